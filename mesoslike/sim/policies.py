"""The level-2 policies a simulation can run, by name, and what a policy
written elsewhere is given (docs/simulate.rst, "Policies of your own").

Built in: greedy frameworks (one per task class) under an allocator sorter
of that name (:class:`~mesoslike.sim.schedulers.GreedySchedulers`):
``drf``, ``random`` and any sorter registered with
:func:`~mesoslike.allocator.register_sorter`.
Every other policy is a plugin: a :class:`SimulationPolicy` registered
with :func:`register_policy` or declared in the
``mesoslike.simulation_policies`` entry points (:mod:`mesoslike.plugins`)
— as the bundled Fuxi scheduler declares ``fuxi-fifo`` and ``fuxi-fair``
(its core as the one framework), so that the simulator imports no
framework. A plugin's module is imported when a run uses it.

A policy builds a :class:`Scheduler`: it answers the offers the simulator
(its :class:`Host`) makes, and says why tasks wait (:data:`REASONS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from mesoslike import plugins
from mesoslike.allocator import sorter_names
from mesoslike.clock import Clock
from mesoslike.sim.schedulers import (
    REASON_BLACKLIST,
    REASON_FILTERED,
    REASON_GANG,
    REASON_LOWER_PRIORITY,
    REASON_NO_FIT,
    REASON_NO_OFFER,
    REASON_QUOTA,
    REASONS,
    ClusterView,
    FrameworkCounters,
    Host,
    Run,
    Scheduler,
    group_key,
)
from mesoslike.sim.workload import TaskSpec, Workload

__all__ = [
    "greedy_policies", "SimulationPolicy", "RunSettings", "register_policy", "policy_names", "load_policy",
    "Host", "Run", "Scheduler", "ClusterView", "FrameworkCounters", "group_key", "TaskSpec", "Workload",
    "REASONS", "REASON_QUOTA", "REASON_NO_FIT", "REASON_FILTERED", "REASON_LOWER_PRIORITY", "REASON_GANG",
    "REASON_BLACKLIST", "REASON_NO_OFFER",
]


def greedy_policies() -> tuple[str, ...]:
    """The built-in policies: greedy frameworks under the allocator sorter of that name."""
    return tuple(sorter_names())


class RunSettings(Protocol):
    """What a policy reads of a run's :class:`~mesoslike.sim.SimulationConfig`."""

    @property
    def quota(self) -> object | None:
        """The policy's quota (from :meth:`SimulationPolicy.read_quota`, or built), None: none."""

    @property
    def preemption(self) -> bool | None:
        """Preemption on or off; None: as the quota says."""

    @property
    def seed(self) -> int: ...

    @property
    def quiet_passes(self) -> bool:
        """May the policy answer offers without a scheduling pass when a pass
        could change nothing? False: a full pass every time (the same results,
        slower; for checks and benchmarks)."""

    @property
    def offer_filters(self) -> bool:
        """May the policy's scheduler keep offer filters (its
        :meth:`~mesoslike.sim.schedulers.Scheduler.offer_shapes`)? False:
        every agent is offered, as before offer filters."""


class SimulationPolicy(Protocol):
    """A level-2 policy of its own (a plugin)."""

    def scheduler(self, host: Host, workload: Workload, config: RunSettings, clock: Clock) -> Scheduler:
        """The scheduler of one run: it answers ``host``'s offers for
        ``workload``'s tasks; ``config`` is the run's (its ``quota`` and
        ``preemption`` are the policy's to read); ``clock`` the simulated one."""

    def read_quota(self, path: Path) -> object:
        """The policy's quota file (``simulate --quota FILE``), as the run's
        ``SimulationConfig.quota``. Raises ``ValueError`` (a
        :class:`~mesoslike.MesoslikeError`) naming what is wrong."""


def register_policy(name: str, policy: SimulationPolicy) -> None:
    """Make ``policy`` a policy of the simulator (hiding an installed one of that name)."""
    if name in greedy_policies():
        raise ValueError(f"{name!r} is a built-in policy (a sorter's)")
    plugins.register(plugins.SIMULATION_POLICIES, name, policy)


def policy_names() -> tuple[str, ...]:
    """Every policy: the built-in ones, then the plugins in the order they were declared."""
    greedy = greedy_policies()
    return greedy + tuple(name for name in plugins.names(plugins.SIMULATION_POLICIES) if name not in greedy)


def load_policy(name: str) -> SimulationPolicy:
    """The plugin policy ``name`` (its module imported on first use); ``ValueError`` if there is none."""
    try:
        return plugins.load(plugins.SIMULATION_POLICIES, name)
    except plugins.PluginError as exc:
        raise ValueError(str(exc)) from None
