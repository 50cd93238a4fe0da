"""Quiet passes (docs/simulate.rst, "Speed"; FuxiCore.on_offers): the Fuxi
core declines a batch without a scheduling pass when a pass could change
nothing, and a simulation gives the same report, byte for byte, as one that
runs every pass in full (``--full-passes``)."""

from __future__ import annotations

import json

import pytest

from mesoslike import Offer, Resources
from mesoslike.clock import FakeClock
from mesoslike.sim import SimulationConfig, Simulator
from mesoslike.sim.synthetic import SyntheticSpec, synthetic_workload
from mesoslike_frameworks.fuxi.core import DeclineOffers, FuxiCore
from mesoslike_frameworks.fuxi.model import JobSpec, UnitSpec
from mesoslike_frameworks.fuxi.quota import QuotaConfig

QUOTA = QuotaConfig(groups={"prod": Resources.parse("cpus:40;mem:200000"),
                            "batch": Resources.parse("cpus:60;mem:400000;gpus:4"),
                            "dev": Resources.parse("cpus:20;mem:100000;gpus:2")})


def _report(spec: SyntheticSpec, policy: str, quiet: bool, quota: QuotaConfig | None) -> tuple[str, dict]:
    simulator = Simulator(synthetic_workload(spec), SimulationConfig.for_policy(
        policy, quiet_passes=quiet, quota=quota, seed=spec.seed, check_invariants=True))
    document = json.dumps(simulator.run().to_dict(checkpoints=5), indent=2)
    return document, dict(simulator.scheduler.core.counters)  # type: ignore[attr-defined]


@pytest.mark.parametrize("policy", ["fuxi-fifo", "fuxi-fair"])
@pytest.mark.parametrize("seed, agents, load, quota", [(1, 12, 2.0, None), (4, 12, 3.0, QUOTA)])
def test_the_report_is_the_same_with_and_without_quiet_passes(policy: str, seed: int, agents: int, load: float,
                                                              quota: QuotaConfig | None) -> None:
    spec = SyntheticSpec(agents=agents, tasks=200, load=load, seed=seed)
    full, full_counters = _report(spec, policy, False, quota)
    quiet, quiet_counters = _report(spec, policy, True, quota)
    assert full_counters["quiet_passes"] == 0
    assert quiet_counters["quiet_passes"] > 0            # some batches were answered without a pass
    assert quiet_counters["passes"] == full_counters["passes"]
    assert quiet == full                                   # ... and nothing a user sees changed


def _offer(offer_id: str, agent: str, resources: str) -> Offer:
    return Offer(id=offer_id, agent_id=agent, hostname=f"host-{agent}", resources=Resources.parse(resources))


def test_a_quiet_pass_declines_as_the_pass_did_until_something_changes() -> None:
    clock = FakeClock()
    core = FuxiCore(clock=clock)
    job_id, _ = core.submit(JobSpec("big", (UnitSpec("u", slots=1, slot=Resources.parse("cpus:4;mem:1024")),)))
    core.on_offers([_offer("o1", "a1", "cpus:2;mem:4096")])      # the unit's first pass: a change
    clock.advance(1)
    first = core.on_offers([_offer("o2", "a1", "cpus:2;mem:4096")])
    assert core.counters["quiet_passes"] == 0                    # a full pass that changed nothing
    clock.advance(1)
    again = core.on_offers([_offer("o3", "a1", "cpus:2;mem:4096")])
    assert core.counters["quiet_passes"] == 1
    assert again == [DeclineOffers(("o3",), first[0].refuse_seconds)]   # type: ignore[union-attr]
    clock.advance(1)
    core.on_offers([_offer("o4", "a1", "cpus:3;mem:4096")])      # the machine offers more: a full pass
    assert core.counters["quiet_passes"] == 1
    clock.advance(1)
    core.update_desire(job_id, "u", 2)                           # a job's call: a full pass
    core.on_offers([_offer("o5", "a1", "cpus:3;mem:4096")])
    assert core.counters["quiet_passes"] == 1
    clock.advance(1)
    granted = core.on_offers([_offer("o6", "a1", "cpus:4;mem:4096")])
    assert core.counters["quiet_passes"] == 1 and not isinstance(granted[0], DeclineOffers)
