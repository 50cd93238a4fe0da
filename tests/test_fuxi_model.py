"""Fuxi jobs: the model and the TOML job file (docs/fuxi.rst)."""

from pathlib import Path

import pytest

from mesoslike import Resources
from mesoslike_frameworks.fuxi.model import (
    LIMITS,
    MAX_ATTEMPTS,
    MAX_COMMAND,
    MAX_INSTANCES,
    MAX_LIST,
    MAX_NAME,
    MAX_PORT,
    MAX_RESOURCE,
    MAX_SLOTS,
    MAX_UNITS,
    BackupPolicy,
    JobSpec,
    JobSpecError,
    Locality,
    UnitSpec,
    load_job_file,
    parse_job,
)

pytestmark = pytest.mark.timeout(30)

DESIGN_EXAMPLE = '''
[job]
name = "wordcount"
quota_group = "analytics"
priority = 100            # smaller number = higher priority
policy = "FIFO"           # or "FAIR" among equal priority

[[job.units]]             # one ScheduleUnit
name = "map"
slots = 8                 # desired slot count
cpus = 1.0
mem = 512
max_per_machine = 2
all_or_nothing = false
command = "python -m examples.wordcount map {instance}"
instances = 32            # data shards handed to the unit's workers
locality = [ { machine = "host-1", count = 2 }, { room = "er1", count = 4 }, { cluster = true, count = 8 } ]
'''


def test_the_design_example_parses(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(DESIGN_EXAMPLE)
    job = load_job_file(path)
    assert (job.name, job.quota_group, job.priority, job.policy) == ("wordcount", "analytics", 100, "FIFO")
    (unit,) = job.units
    assert unit.slot == Resources.parse("cpus:1;mem:512") and unit.slots == 8 and unit.instances == 32
    assert unit.locality == (Locality.machine("host-1", 2), Locality.room("er1", 4), Locality.cluster(8))
    assert unit.max_per_machine == 2 and not unit.all_or_nothing and job.priority_of(unit) == 100


def test_runtime_fields_data_after_attempts_backup_and_blacklist():
    job = parse_job({"job": {"name": "wc", "blacklist_after": 2,
                             "backup": {"min_finished_fraction": 0.25, "slower_factor": 1.5},
                             "units": [{"name": "map", "slots": 2, "cpus": 1, "instances": 2,
                                        "data": [["node-0"], ["node-1", "node-0"]], "max_attempts": 4},
                                       {"name": "reduce", "slots": 1, "cpus": 1, "after": ["map"]}]}})
    assert job.unit("map").data == (("node-0",), ("node-1", "node-0")) and job.unit("map").max_attempts == 4
    assert job.unit("reduce").after == ("map",) and job.unit("reduce").instance_count == 1
    assert job.backup == BackupPolicy(min_finished_fraction=0.25, slower_factor=1.5) and job.blacklist_after == 2


def test_a_unit_may_run_in_a_container_image_and_its_job_file_says_so_again():
    from mesoslike_frameworks.fuxi.model import job_document

    job = parse_job(unit_doc(image="busybox:1.36"))
    assert job.unit("u").image == "busybox:1.36"
    assert parse_job(job_document(job)) == job and parse_job(unit_doc()).unit("u").image == ""


def unit_doc(**fields):
    return {"job": {"name": "j", "units": [{"name": "u", "slots": 1, "cpus": 1, **fields}]}}


@pytest.mark.parametrize("document, message", [
    ({}, "job: the file needs a [job] table"),
    ({"job": {"name": "j"}}, "job.units: a job needs at least one unit"),
    (unit_doc(slots=0), "job.units[0].slots: must be an integer >= 1, got 0"),
    (unit_doc(slots=-2), "job.units[0].slots: must be an integer >= 1, got -2"),
    (unit_doc(cpus=0), "job.units[0].cpus: must be a number > 0"),
    (unit_doc(colour="red"), "job.units[0]: unknown field(s) 'colour'"),
    (unit_doc(locality=[{"machine": "h", "room": "r"}]), "job.units[0].locality[0]: needs exactly one of"),
    (unit_doc(locality=[{"cluster": True, "count": 0}]), "job.units[0].locality[0].count: must be an integer >= 1"),
    (unit_doc(instances=2, data=[["a"]]), "job.units[0].data: lists 1 instances' data"),
    (unit_doc(after=["u"]), "job.units[0].after: 'u' is not another unit"),
    (unit_doc(max_attempts=0), "job.units[0].max_attempts: must be an integer >= 1"),
    (unit_doc(image="Bad Image!"), "job.units[0].image: must be a Docker image reference"),
    (unit_doc(image=7), "job.units[0].image: must be a Docker image reference"),
    ({"job": {"name": "j", "policy": "LIFO", "units": [{"name": "u", "slots": 1, "cpus": 1}]}},
     "job.policy: must be FIFO or FAIR"),
    ({"job": {"name": "j", "backup": {"slower_factor": 0.5}, "units": [{"name": "u", "slots": 1, "cpus": 1}]}},
     "job.backup.slower_factor: must be a number in [1.0, inf]"),
    ({"job": {"name": "j", "units": [{"name": "u", "slots": 1, "cpus": 1}, {"name": "u", "slots": 1, "cpus": 1}]}},
     "job.units[1].name: duplicate unit name 'u'"),
])
def test_bad_job_files_name_the_field(document, message):
    with pytest.raises(JobSpecError) as info:
        parse_job(document)
    assert message in str(info.value)


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(JobSpecError, match="cannot read the job file"):
        load_job_file(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[job\nname = ")
    with pytest.raises(JobSpecError, match="not valid TOML"):
        load_job_file(bad)


def test_python_api_checks_too():
    with pytest.raises(JobSpecError, match="cycle"):
        JobSpec("j", [UnitSpec("a", 1, Resources.parse("cpus:1"), after=["b"]),
                      UnitSpec("b", 1, Resources.parse("cpus:1"), after=["a"])])
    with pytest.raises(JobSpecError, match="a slot needs resources"):
        UnitSpec("a", 1, Resources())


# ------------------------------------------------------------------ limits
@pytest.mark.parametrize("document, message", [
    # issue 12 §2: each of these was accepted and then choked the AppMaster or the scheduler
    (unit_doc(instances=2**63 - 1), f"job.units[0].instances: must be at most {MAX_INSTANCES}"),
    # a 400-digit bound is the resource codec's refusal (issue 12 §2: every quantity is at most 1e15) ...
    (unit_doc(resources="ports:[1-" + "9" * 400 + "]"), "for 'ports': bounds are at most 1e+15"),
    # ... and a port range the codec takes but no machine has is the job file's
    (unit_doc(resources="ports:[1-70000]"), f"job.units[0].resources: ports must lie within [0, {MAX_PORT}]"),
    (unit_doc(slots=MAX_SLOTS + 1), f"job.units[0].slots: must be at most {MAX_SLOTS}"),
    (unit_doc(cpus=1e300), f"job.units[0].cpus: must be at most {MAX_RESOURCE}"),
    (unit_doc(resources="gpus:1e12"), f"job.units[0].resources: gpus must be at most {MAX_RESOURCE}"),
    (unit_doc(max_attempts=10**9), f"job.units[0].max_attempts: must be at most {MAX_ATTEMPTS}"),
    (unit_doc(priority=2**80), "job.units[0].priority: must be at most"),
    (unit_doc(command="x" * (MAX_COMMAND + 1)), f"job.units[0].command: must be at most {MAX_COMMAND} characters"),
    (unit_doc(blacklist=[f"h{i}" for i in range(MAX_LIST + 1)]), f"job.units[0].blacklist: must have at most {MAX_LIST}"),
    (unit_doc(name="u" * (MAX_NAME + 1)), f"job.units[0].name: must be at most {MAX_NAME} characters"),
    ({"job": {"name": "j", "units": [{"name": f"u{i}", "slots": 1, "cpus": 1} for i in range(MAX_UNITS + 1)]}},
     f"job.units: a job has at most {MAX_UNITS} units"),
])
def test_hostile_job_files_are_refused_by_the_documented_limits(document, message):
    with pytest.raises(JobSpecError) as info:
        parse_job(document)
    assert message in str(info.value)
    assert len(str(info.value)) < 300   # the refusal never echoes the hostile field whole


def test_errors_never_echo_a_huge_field():
    huge = "x\n" * 1_000_000
    for document in ({"job": {"name": huge, "units": []}}, unit_doc(**{huge: 1}), unit_doc(slots=huge),
                     {"job": {"name": "j", "policy": huge, "units": [{"name": "u", "slots": 1, "cpus": 1}]}},
                     {"job": {"name": "j", 3: 1, "units": [{"name": "u", "slots": 1, "cpus": 1}]}}):
        with pytest.raises(JobSpecError) as info:
            parse_job(document)
        assert len(str(info.value)) < 400, str(info.value)[:400]


def test_the_limits_are_documented():
    text = (Path(__file__).resolve().parents[1] / "docs" / "fuxi.rst").read_text()
    for value in LIMITS.values():
        assert f"{value:,}".replace(",", "_") in text or str(value) in text, value
