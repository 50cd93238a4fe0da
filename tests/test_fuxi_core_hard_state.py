"""The quota configuration issue 16 §2 adds is hard state too (issue 16 §1).

A quota group's policy (FIFO or FAIR, seed 000) and how many jobs' reports
put a host on the global blacklist come from the quota file; a new leader
started without ``--quota`` takes them from the stored service record, so a
FAIR group stays FAIR across a failover and its jobs (which may name FAIR)
are taken over instead of refused.
"""

from __future__ import annotations

import pytest

from mesoslike import FakeClock
from mesoslike_frameworks.fuxi.core import FuxiCore
from mesoslike_frameworks.fuxi.hard_state import SERVICE_KEY, HardStateError, ServiceRecord, decode, encode
from mesoslike_frameworks.fuxi.jobs import (
    JobAccepted,
    JobCore,
    JobSubmitted,
    Persist,
    Persisted,
    Recover,
)
from mesoslike_frameworks.fuxi.model import JobSpec, UnitSpec, job_document
from mesoslike_frameworks.fuxi.quota import QuotaConfig
from mesoslike.resources import Resources

pytestmark = pytest.mark.timeout(60)


def written(core: JobCore, out: list, stored: dict[str, bytes]) -> list:
    """Carry out the Persists in ``out`` as a store would; every other command."""
    rest = [c for c in out if not isinstance(c, Persist)]
    for command in out:
        if isinstance(command, Persist):
            stored.update({key: encode(record) for key, record in command.records.items()})
            rest += written(core, core.handle(Persisted(command.waiting, stimulus_id="test")), stored)
    return rest


def leader(config: QuotaConfig, stored: dict[str, bytes]) -> JobCore:
    core = JobCore(FuxiCore.from_config(config, clock=FakeClock()), persist=True)
    state = decode(stored)
    written(core, core.handle(Recover(state.service, list(state.jobs.values()), stimulus_id="test")), stored)
    return core


def kept_config(record: ServiceRecord) -> QuotaConfig:
    """What ``fuxi serve`` without ``--quota`` configures from the kept record 
    (frameworks/mesoslike_frameworks/fuxi/cli.py)."""
    return QuotaConfig({group: Resources.parse(maximum) if maximum else None
                        for group, maximum in record.quota.items()},
                       frozenset(record.global_blacklist), record.preemption, record.policies,
                       record.blacklist_reports, record.blacklist_report_seconds)


def test_policies_and_report_settings_are_written_and_a_new_leader_keeps_them():
    stored: dict[str, bytes] = {}
    first = leader(QuotaConfig({"batch": None}, policies={"batch": "FAIR"}, blacklist_reports=3,
                               blacklist_report_seconds=120.0), stored)
    spec = JobSpec("j", [UnitSpec("u", 2, Resources.parse("cpus:1;mem:100"), command="run")],
                   quota_group="batch", policy="FAIR")
    out = written(first, first.handle(JobSubmitted(spec, job_document(spec), "secret", stimulus_id="t")), stored)
    (job_id,) = [c.job_id for c in out if isinstance(c, JobAccepted)]
    record = decode(stored).service
    assert record is not None
    assert record.policies == {"batch": "FAIR", "default": "FIFO"}
    assert (record.blacklist_reports, record.blacklist_report_seconds) == (3, 120.0)
    # the next leader, configured from the record alone: the group is FAIR, the job taken over
    second = leader(kept_config(record), stored)
    assert second.scheduler.groups["batch"].policy == "FAIR"
    assert second.scheduler.blacklist_reporting == (3, 120.0)
    assert second.job(job_id).spec.policy == "FAIR"


def test_a_record_with_an_unknown_policy_or_a_bad_report_count_is_refused():
    for bad in ({"policies": {"batch": "LIFO"}}, {"blacklist_reports": 0}, {"blacklist_report_seconds": -1}):
        record = encode(ServiceRecord(**bad))   # type: ignore[arg-type]  # wrong on purpose
        with pytest.raises(HardStateError, match="wrong type"):
            decode({SERVICE_KEY: record})
