"""Properties of the Fuxi core over random jobs, offers and releases."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike import Offer, Resources
from mesoslike.clock import FakeClock
from mesoslike_frameworks.fuxi.core import DeclineOffers, FuxiCore, LaunchSlots, SlotGranted, SlotRevoked
from mesoslike_frameworks.fuxi.model import JobSpec, Locality, UnitSpec

pytestmark = pytest.mark.timeout(120)

HOSTS = [f"M{i}" for i in range(6)]
POLICIES = {"a": "FAIR", "b": "FIFO", "default": "FIFO"}
GANG_SECONDS = 4.0          # short: reservations expire within a plan
BLACKLISTED = "M5"

units = st.builds(
    lambda slots, cpus, mem, prio, mpm, aon, prefs, bl: UnitSpec(
        "u", slots, Resources({"cpus": cpus, "mem": mem}), priority=prio, max_per_machine=mpm, all_or_nothing=aon,
        locality=prefs, blacklist=bl),
    st.integers(1, 6), st.sampled_from([0.5, 1, 2, 3]), st.sampled_from([64, 256, 1024]), st.integers(0, 3),
    st.one_of(st.none(), st.integers(1, 3)), st.booleans(),
    st.lists(st.one_of(st.builds(Locality.machine, st.sampled_from(HOSTS), st.integers(1, 3)),
                       st.builds(Locality.room, st.sampled_from(["er0", "er1"]), st.integers(1, 3)),
                       st.builds(Locality.cluster, st.integers(1, 4))), max_size=3),
    st.sets(st.sampled_from(HOSTS), max_size=2))

steps = st.lists(st.one_of(
    st.tuples(st.just("submit"), units, st.sampled_from(["a", "b", "default"]), st.sampled_from(["FIFO", "FAIR"])),
    st.tuples(st.just("offers"), st.lists(st.tuples(st.sampled_from(HOSTS), st.sampled_from([1, 2, 4]),
                                                    st.sampled_from([256, 1024, 4096])), max_size=6, unique_by=lambda t: t[0])),
    st.tuples(st.just("release"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("lost"), st.integers(0, 50)),
), min_size=1, max_size=25)


@given(steps)
def test_the_core_keeps_its_promises(plan):
    clock = FakeClock()
    core = FuxiCore({"a": Resources.parse("cpus:6;mem:6000"), "b": Resources.parse("cpus:4;mem:4000")},
                    global_blacklist=[BLACKLISTED], clock=clock, policies=POLICIES, gang_seconds=GANG_SECONDS)
    live: dict[str, object] = {}
    specs = {}
    offer_seq = 0
    for step in plan:
        clock.advance(1.0)
        kind = step[0]
        if kind == "submit":
            _, spec, group, policy = step
            # the policy is the group's (issue 16): a job names its group's or none
            job_id, out = core.submit(JobSpec("j", [spec], quota_group=group,
                                              policy=POLICIES[group] if policy == "FAIR" else None))
            specs[job_id] = spec
        elif kind == "offers":
            offered = {}
            offers = []
            for host, cpus, mem in step[1]:
                offer_seq += 1
                offers.append(Offer(f"o{offer_seq}", f"a-{host}", host, Resources({"cpus": cpus, "mem": mem}),
                                    {"room": f"er{int(host[1:]) % 2}"}))
                offered[f"a-{host}"] = offers[-1].resources
            before = {job_id: core.status(job_id)["jobs"][0]["units"][0] for job_id in specs if job_id in core.jobs}
            out = core.on_offers(offers)
            # every offer answered in the pass, exactly once
            answered = [o for c in out if isinstance(c, (LaunchSlots, DeclineOffers)) for o in c.offer_ids]
            assert sorted(answered) == sorted(o.id for o in offers)
            granted = [c.slot for c in out if isinstance(c, SlotGranted)]
            for agent_id, resources in offered.items():
                on_agent = [s.resources for s in granted if s.agent_id == agent_id]
                assert resources.contains(Resources.sum(on_agent))       # never more than offered
            for launch in (c for c in out if isinstance(c, LaunchSlots)):
                assert {s.agent_id for s in launch.slots} == {launch.agent_id}
            for slot in granted:
                spec = specs[slot.job_id]
                assert slot.hostname != BLACKLISTED and slot.hostname not in spec.blacklist
                live[slot.id] = slot
            for job_id, unit in before.items():
                if specs[job_id].all_or_nothing and unit["granted"] == 0:
                    # a gang starts whole or not at all (a lost member is replaced alone)
                    assert sum(1 for s in granted if s.job_id == job_id) in (0, unit["desired"])
            for c in out:
                if isinstance(c, SlotRevoked):
                    live.pop(c.slot_id, None)
        elif kind == "release" and live:
            slot_id = sorted(live)[step[1] % len(live)]
            core.release(slot_id, keep_desire=step[2])
            del live[slot_id]
        elif kind == "lost" and live:
            slot_id = sorted(live)[step[1] % len(live)]
            out = core.on_slot_lost(slot_id, "failed")
            assert [c.slot_id for c in out if isinstance(c, SlotRevoked)] == [slot_id]
            del live[slot_id]
        # after every step: the books balance
        core._check()
        status = core.status()
        for job in status["jobs"]:
            (u,) = job["units"]
            spec = specs[job["id"]]
            assert u["granted"] <= spec.slots
            if spec.max_per_machine is not None:
                assert all(n <= spec.max_per_machine for n in u["hosts"].values())
            assert sum(u["hosts"].values()) == u["granted"]
        assert set(core._slots) == set(live)


def _lockstep(plan):
    """The same steps on a core with the first-fit tree and one with the
    naive scan: every answer must be the same."""
    clock = FakeClock()
    cores = [FuxiCore({"a": Resources.parse("cpus:6;mem:6000"), "b": None}, global_blacklist=[BLACKLISTED], clock=clock,
                      policies=POLICIES, gang_seconds=GANG_SECONDS, machine_index=index) for index in ("tree", "scan")]
    offer_seq = 0
    for step in plan:
        clock.advance(1.0)
        kind = step[0]
        outs = []
        for core in cores:
            if kind == "submit":
                _, spec, group, _ = step
                outs.append(core.submit(JobSpec("j", [spec], quota_group=group)))
            elif kind == "offers":
                outs.append(core.on_offers([
                    Offer(f"o{offer_seq}-{i}", f"a-{host}", host, Resources({"cpus": cpus, "mem": mem}),
                          {"room": f"er{int(host[1:]) % 2}"}) for i, (host, cpus, mem) in enumerate(step[1])]))
            elif kind == "release" and core.held_slots():
                slot_id = sorted(s.id for s in core.held_slots())[step[1] % len(core.held_slots())]
                outs.append(core.release(slot_id, keep_desire=step[2]))
            elif kind == "lost" and core.held_slots():
                slot_id = sorted(s.id for s in core.held_slots())[step[1] % len(core.held_slots())]
                outs.append(core.on_slot_lost(slot_id, "failed"))
            core._check()
        offer_seq += 1
        if outs:
            assert outs[0] == outs[1], step
    assert cores[0].status() == cores[1].status()


@given(steps)
def test_the_first_fit_tree_decides_exactly_as_the_naive_scan(plan):
    _lockstep(plan)


@given(steps)
def test_a_batch_in_agent_order_and_the_same_batch_shuffled_decide_alike(plan):
    """A core's first batch of one offer per agent in agent order (what the
    master sends) is taken by a loop of its own (``_take_first_offers``);
    any other batch by the general one, which sorts. Fed the same steps,
    one core every batch in agent order, the other every batch reversed:
    every answer and the books (``_check``: the machines, the frontier of
    their sizes) must be the same."""
    clock = FakeClock()
    cores = [FuxiCore({"a": Resources.parse("cpus:6;mem:6000"), "b": None}, global_blacklist=[BLACKLISTED], clock=clock,
                      policies=POLICIES, gang_seconds=GANG_SECONDS) for _ in range(2)]
    for number, step in enumerate(plan):
        clock.advance(1.0)
        outs = []
        for reverse, core in enumerate(cores):
            if step[0] == "submit":
                outs.append(core.submit(JobSpec("j", [step[1]], quota_group=step[2])))
            elif step[0] == "offers":
                offers = sorted((Offer(f"o{number}-{host}", f"a-{host}", host, Resources({"cpus": cpus, "mem": mem}),
                                       {"room": f"er{int(host[1:]) % 2}"}) for host, cpus, mem in step[1]),
                                key=lambda offer: offer.agent_id, reverse=bool(reverse))
                outs.append(core.on_offers(offers))
            elif step[0] == "release" and core.held_slots():
                slot_id = sorted(s.id for s in core.held_slots())[step[1] % len(core.held_slots())]
                outs.append(core.release(slot_id, keep_desire=step[2]))
            core._check()
        if outs:
            assert outs[0] == outs[1], step
    assert cores[0].status() == cores[1].status()
    assert cores[0]._frontier == cores[1]._frontier
