"""Fuxi NodeLabel (seed 000 feature 4, "NodeLabel 动态划分集群"; issue 18 §5):
a unit's ``node_labels`` — agent attributes a machine must have — carve the
cluster: the core grants the unit's slots only on machines whose offers
carry those attributes, in every placement path (active, passive,
preemption), and says why it waits when no machine has them."""

import pytest

from mesoslike import Offer, Resources
from mesoslike.clock import FakeClock
from mesoslike_frameworks.fuxi.core import WAIT_NO_FIT, FuxiCore, SlotGranted, SlotRevoked
from mesoslike_frameworks.fuxi.model import JobSpec, JobSpecError, Locality, UnitSpec, job_document, parse_job

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
ATTRIBUTES = {"fast-1": {"ssd": "true", "rack": "r1", "room": "er0"},
              "fast-2": {"ssd": "true", "rack": "r2", "room": "er1"},
              "slow-1": {"ssd": "false", "rack": "r1", "room": "er0"},
              "bare-1": {},
              "gpu-1": {"gpu": "true"},
              "aaa-slow": {"ssd": "false"}}   # first in agent order: where preemption would look first


def offers(*hosts, res="cpus:4;mem:4096", tag=""):
    return [Offer(f"o-{h}{tag}", f"a-{h}", h, R(res), ATTRIBUTES[h]) for h in hosts]


def granted_hosts(out):
    return sorted(c.slot.hostname for c in out if isinstance(c, SlotGranted))


def labelled(slots, labels, name="su", **kwargs):
    return UnitSpec(name, slots, R("cpus:1;mem:100"), node_labels=labels, **kwargs)


def why_waiting(core):
    return core.status()["jobs"][0]["units"][0]["why_waiting"]


def test_a_unit_gets_slots_only_on_machines_with_its_labels():
    core = FuxiCore(clock=FakeClock())
    core.submit(JobSpec("j", [labelled(6, {"ssd": "true"})]))
    out = core.on_offers(offers("fast-1", "fast-2", "slow-1", "bare-1"))
    assert granted_hosts(out) == ["fast-1"] * 3 + ["fast-2"] * 3
    # passive scheduling (the unit already waits) keeps to them too
    core.update_desire(core.status()["jobs"][0]["id"], "su", 10)
    out = core.on_offers(offers("slow-1", "bare-1", "fast-2", tag="-2", res="cpus:1;mem:100"))
    assert granted_hosts(out) == ["fast-2"]


def test_every_label_must_match_and_locality_still_applies():
    core = FuxiCore(clock=FakeClock())
    core.submit(JobSpec("j", [labelled(4, {"ssd": "true", "rack": "r1"}, locality=[Locality.room("er0", 4)],
                                       max_per_machine=2)]))
    out = core.on_offers(offers("fast-1", "fast-2", "slow-1"))
    assert granted_hosts(out) == ["fast-1", "fast-1"]     # r1 and ssd: fast-1 only, at most 2 there
    assert why_waiting(core) == WAIT_NO_FIT


def test_a_unit_whose_labels_no_machine_has_says_so_and_starts_when_one_comes():
    core = FuxiCore(clock=FakeClock())
    core.submit(JobSpec("j", [labelled(2, {"gpu": "true"})]))
    assert granted_hosts(core.on_offers(offers("fast-1", "slow-1", "bare-1"))) == []
    assert why_waiting(core) == "no machine with labels gpu=true"
    assert granted_hosts(core.on_offers(offers("gpu-1", "slow-1", tag="-2"))) == ["gpu-1", "gpu-1"]
    assert why_waiting(core) == ""


def test_preemption_for_a_labelled_unit_takes_room_only_on_its_machines():
    core = FuxiCore(clock=FakeClock())
    core.submit(JobSpec("low", [UnitSpec("filler", 2, R("cpus:4;mem:100"))], priority=500))
    out = core.on_offers(offers("aaa-slow", "fast-1"))
    host_of = {c.slot.id: c.slot.hostname for c in out if isinstance(c, SlotGranted)}
    assert sorted(host_of.values()) == ["aaa-slow", "fast-1"]
    core.submit(JobSpec("high", [UnitSpec("urgent", 1, R("cpus:4;mem:100"), node_labels={"ssd": "true"})],
                        priority=10))
    out = core.on_offers(offers("aaa-slow", "fast-1", tag="-2", res="cpus:0.5;mem:100"))
    assert [host_of[c.slot_id] for c in out if isinstance(c, SlotRevoked)] == ["fast-1"]


def test_the_job_file_takes_node_labels_as_a_table_of_attribute_values():
    document = {"job": {"name": "j", "units": [{"name": "u", "slots": 2, "cpus": 1, "mem": 64,
                                                "node_labels": {"ssd": True, "level": 3, "rack": "r1"}}]}}
    spec = parse_job(document)
    assert spec.units[0].node_labels == (("level", "3"), ("rack", "r1"), ("ssd", "true"))   # as agents show them
    assert parse_job(job_document(spec)) == spec
    document["job"]["units"][0]["node_labels"] = ["ssd"]
    with pytest.raises(JobSpecError, match=r"job.units\[0\].node_labels: must be a table"):
        parse_job(document)
    document["job"]["units"][0]["node_labels"] = {"ssd": ["true"]}
    with pytest.raises(JobSpecError, match=r"job.units\[0\].node_labels.ssd: must be a string"):
        parse_job(document)
