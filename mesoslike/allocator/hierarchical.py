"""The hierarchical offer allocator: Mesos's HierarchicalDRFAllocator, sans I/O.

It owns the allocation bookkeeping (agents, frameworks, roles, outstanding
offers, decline filters, quota) and answers "who gets this agent now?". It
never does I/O and never reads the time itself: it takes a :class:`Clock` and
a ``random.Random``. A runtime feeds it events (agents and frameworks coming
and going, declines, accepts, task ends) and carries out what it returns
(offers to send, rescinds to announce).

Allocation order is two-level: roles by the role sorter, then the frameworks
of a role by that role's framework sorter (both DRF by default). Offers are
coarse-grained: an agent's available resources go to one framework per cycle,
unless quota limits or quota headroom cut the offer short, in which case the
rest goes on to the next framework in order.

With quota, a cycle has two stages, as in Mesos: first roles with an
unsatisfied guarantee get, on every agent, what they still need of it; then
everyone competes for the rest, while the unconsumed part of all guarantees
(the headroom) is held back from roles that are not owed it.
"""

from __future__ import annotations

import gc
import math
import random
from collections import deque
from typing import Iterable, Mapping

from mesoslike.allocator.drf import DRFSorter  # noqa: F401  (registers "drf")
from mesoslike.allocator.filters import MAX_REFUSE_SECONDS, FilterStore, refused_any
from mesoslike.allocator.offers import AllocatorStatistics, Offer, Rescind, RescindReason
from mesoslike.allocator.quota import Millis, QuotaBook, add_millis
from mesoslike.allocator.random_sorter import RandomSorter  # noqa: F401  (registers "random")
from mesoslike.allocator.roles import DEFAULT_ROLE, ancestors, validate_role
from mesoslike.allocator.sorter import Sorter, make_sorter
from mesoslike.clock import Clock
from mesoslike.errors import (
    AgentCapacityError,
    DuplicateAgentError,
    DuplicateFrameworkError,
    InvalidFilterError,
    RecoveryError,
    ResourcesError,
    UnknownAgentError,
    UnknownFrameworkError,
    UnknownOfferError,
    WeightError,
)
from mesoslike.resources import Resources

__all__ = ["HierarchicalAllocator", "parse_min_allocatable", "DEFAULT_MIN_ALLOCATABLE"]

EMPTY = Resources()
DEFAULT_MIN_ALLOCATABLE = "cpus:0.01|mem:32"
DEFAULT_REFUSE_SECONDS = 5.0


def parse_min_allocatable(spec: str | Iterable[Resources | str]) -> tuple[Resources, ...]:
    """``"cpus:0.01|mem:32"`` -> alternatives; resources are allocatable if
    they contain at least one alternative. An empty spec means any non-empty
    resources are allocatable."""
    if isinstance(spec, str):
        items: Iterable[Resources | str] = [p for p in spec.split("|") if p.strip()]
    else:
        items = spec
    out = []
    for item in items:
        out.append(item if isinstance(item, Resources) else Resources.parse(item))
    return tuple(out)


class _Agent:
    __slots__ = ("id", "hostname", "attributes", "total", "available", "active", "held", "version", "idle_stamp")

    def __init__(self, agent_id: str, total: Resources, hostname: str, attributes: Mapping[str, str]) -> None:
        self.id = agent_id
        self.hostname = hostname
        self.attributes = dict(attributes)
        self.total = total
        self.available = total
        self.active = True
        self.held: dict[str, Resources] = {}  # framework -> offered + used here
        self.version = 0        # bumped whenever what it could be offered may have grown
        self.idle_stamp: tuple[int, int] | None = None  # (version, eligibility) when nobody could take it


class _Framework:
    __slots__ = ("id", "role", "active", "suppressed", "min_allocatable", "used", "offers")

    def __init__(self, framework_id: str, role: str, min_allocatable: tuple[Resources, ...] | None) -> None:
        self.id = framework_id
        self.role = role
        self.active = True
        self.suppressed = False
        self.min_allocatable = min_allocatable
        self.used: dict[str, Resources] = {}               # agent -> used by tasks
        self.offers: dict[str, dict[str, Offer]] = {}       # agent -> offer id -> offer


def _check_refuse(refuse_seconds: float) -> float:
    if isinstance(refuse_seconds, bool) or not isinstance(refuse_seconds, (int, float)) or math.isnan(refuse_seconds) \
            or refuse_seconds < 0:
        raise InvalidFilterError(f"refuse_seconds must be a number >= 0, got {refuse_seconds!r}")
    return min(float(refuse_seconds), MAX_REFUSE_SECONDS)


def _clip(resources: Resources, caps: Mapping[str, int]) -> Resources:
    """``resources`` with each capped scalar kind cut down to its cap."""
    millis = resources._millis
    clipped = None
    for kind, cap in caps.items():
        have = millis.get(kind)
        if have is not None and have > cap:
            if clipped is None:
                clipped = dict(millis)
            if cap > 0:
                clipped[kind] = cap
            else:
                del clipped[kind]
    return resources if clipped is None else Resources._make(clipped, resources._ranges)


class HierarchicalAllocator:
    """Offers agents' resources to frameworks in (weighted) DRF order.

    Parameters:
        clock: where time comes from (``FakeClock`` in tests).
        sorter: ``"drf"`` (default), ``"random"``, another registered name,
            or a :class:`Sorter` instance used for roles (its ``fresh()``
            copies order the frameworks inside each role).
        allocation_interval: seconds between batch cycles (``tick``).
        min_allocatable: default minimum allocatable resources.
        offer_timeout: seconds after which an unanswered offer is rescinded
            (None = never, the default).
        rng: randomness for the agent order of a cycle and random sorters.
        offer_id_prefix: prefix of the offer ids this allocator makes.

    Complexity: a cycle visits each allocatable agent once and walks the
    sorted frameworks until one takes it, so a cycle with no filters costs
    O(A · depth · log F); a framework skipped for a filter costs O(1) more.
    ``allocate([agent])`` for one freed agent costs O(depth · log F).
    Bad input raises a :class:`~mesoslike.errors.AllocatorError` and changes
    nothing.
    """

    def __init__(
        self,
        clock: Clock,
        sorter: str | Sorter = "drf",
        *,
        allocation_interval: float = 1.0,
        min_allocatable: str | Iterable[Resources | str] = DEFAULT_MIN_ALLOCATABLE,
        offer_timeout: float | None = None,
        rng: random.Random | None = None,
        offer_id_prefix: str = "O",
    ) -> None:
        if not (isinstance(allocation_interval, (int, float)) and allocation_interval > 0):
            raise ValueError(f"allocation_interval must be > 0, got {allocation_interval!r}")
        if offer_timeout is not None and not (isinstance(offer_timeout, (int, float)) and offer_timeout > 0):
            raise ValueError(f"offer_timeout must be > 0 or None, got {offer_timeout!r}")
        self.clock = clock
        self.allocation_interval = float(allocation_interval)
        self.offer_timeout = offer_timeout
        self.min_allocatable = parse_min_allocatable(min_allocatable)
        self._rng = rng if rng is not None else random.Random(0)
        if isinstance(sorter, Sorter):
            self._role_sorter = sorter
        else:
            self._role_sorter = make_sorter(sorter, hierarchical=True, rng=self._rng)
        self._offer_id_prefix = offer_id_prefix
        self._offers_created = 0
        self._agents: dict[str, _Agent] = {}
        self._frameworks: dict[str, _Framework] = {}
        self._role_frameworks: dict[str, Sorter] = {}      # role -> framework sorter
        self._weights: dict[str, float] = {}
        self._offers: dict[str, Offer] = {}
        self._offer_times: deque[tuple[float, str]] = deque()  # creation order, for timeouts
        self._filters = FilterStore()
        self._quota = QuotaBook()
        self._free: Millis = {}                  # unallocated scalars on active agents...
        self._track_free = False                 # ...kept only while some role has a guarantee
        self._rescinds: list[Rescind] = []
        self._pending_all = False
        self._pending: set[str] = set()
        #: agent -> (role, until): offer what the agent has free to that role's
        #: frameworks first until then (fair-share preemption's Prefer)
        self._preferred: dict[str, tuple[str, float]] = {}
        self._eligibility = 0  # bumped whenever some framework may take what it could not before
        self._eligible: set[str] = set()              # frameworks active and not suppressed
        self._min_overrides: dict[tuple[Resources, ...], int] = {}  # distinct per-framework minimums
        self._all_mins = (self.min_allocatable,)
        self._role_eligible: dict[str, int] = {}
        self._active_roles: set[str] = set()          # roles with an eligible framework
        # With a single role and no quota, nothing reads the role sorter's
        # order, so grants skip it and it is brought up to date on demand
        # (_sync_roles): a role-level update per grant saved.
        self._roles_deferred = False
        self._deferred_grants = 0
        self._next_batch = clock.now()
        self._counters = dict(cycles=0, offers_made=0, offers_filtered=0, offers_declined=0,
                              offers_accepted=0, offers_rescinded=0)
        self._last_cycle_duration = 0.0
        self._last_cycle_offers = 0

    # ================================================================ agents
    def add_agent(
        self,
        agent_id: str,
        total: Resources,
        attributes: Mapping[str, str] | None = None,
        hostname: str | None = None,
        used: Mapping[str, Resources] | None = None,
    ) -> None:
        """Add an agent; ``used`` maps framework ids to what their running
        tasks already hold there (an agent re-registering after failover).
        Triggers allocation of this agent."""
        if agent_id in self._agents:
            raise DuplicateAgentError(f"agent {agent_id!r} was already added")
        if not isinstance(total, Resources):
            raise ResourcesError(f"total of agent {agent_id!r} must be Resources, got {type(total).__name__}")
        used = dict(used or {})
        for framework_id in used:
            self._framework(framework_id)
        held = EMPTY
        for resources in used.values():
            held = held + resources
        if not total.contains(held):
            raise AgentCapacityError(f"agent {agent_id!r}: used {held} does not fit in its total {total}")
        agent = _Agent(agent_id, total, hostname or agent_id, attributes or {})
        self._agents[agent_id] = agent
        self._role_sorter.add_total(total)
        for sorter in self._role_frameworks.values():
            sorter.add_total(total)
        self._add_free(total._millis, 1)
        for framework_id, resources in sorted(used.items()):
            if resources:
                self._hold(self._frameworks[framework_id], agent, resources)
                self._frameworks[framework_id].used[agent_id] = resources
        self._pending.add(agent_id)

    def remove_agent(self, agent_id: str) -> None:
        """Remove an agent: its outstanding offers are rescinded (reason
        ``agent_removed``), what tasks held there is released, its filters go."""
        agent = self._agent(agent_id)
        self._rescind_where(lambda o: o.agent_id == agent_id, RescindReason.AGENT_REMOVED, agents=[agent_id])
        for framework_id in sorted(agent.held):
            framework = self._frameworks[framework_id]
            used = framework.used.pop(agent_id, EMPTY)
            self._release(framework, agent, used)
        if agent.active:
            self._add_free(agent.total._millis, -1)
        self._role_sorter.remove_total(agent.total)
        for sorter in self._role_frameworks.values():
            sorter.remove_total(agent.total)
        self._filters.clear_agent(agent_id)
        self._pending.discard(agent_id)
        self._preferred.pop(agent_id, None)
        del self._agents[agent_id]

    def update_agent(
        self,
        agent_id: str,
        total: Resources | None = None,
        attributes: Mapping[str, str] | None = None,
        hostname: str | None = None,
    ) -> None:
        """Change an agent's total (not below what is allocated there),
        attributes or hostname. A grown agent is allocated again."""
        agent = self._agent(agent_id)
        if total is not None:
            allocated = agent.total - agent.available
            if not total.contains(allocated):
                raise AgentCapacityError(
                    f"agent {agent_id!r}: new total {total} is below what is allocated there ({allocated})"
                )
            old = agent.total
            if agent.active:
                self._add_free(old._millis, -1)
                self._add_free(total._millis, 1)
            for sorter in [self._role_sorter, *self._role_frameworks.values()]:
                sorter.remove_total(old)
                sorter.add_total(total)
            agent.total = total
            agent.available = total - allocated
            agent.version += 1
            self._pending.add(agent_id)
        if attributes is not None:
            agent.attributes = dict(attributes)
        if hostname is not None:
            agent.hostname = hostname

    def deactivate_agent(self, agent_id: str) -> None:
        """Stop offering the agent (it disconnected); its offers are rescinded."""
        agent = self._agent(agent_id)
        if not agent.active:
            return
        self._rescind_where(lambda o: o.agent_id == agent_id, RescindReason.AGENT_DEACTIVATED, agents=[agent_id])
        agent.active = False
        self._add_free(agent.available._millis, -1)

    def activate_agent(self, agent_id: str) -> None:
        """Offer the agent again; triggers its allocation."""
        agent = self._agent(agent_id)
        if agent.active:
            return
        agent.active = True
        agent.version += 1
        self._add_free(agent.available._millis, 1)
        self._pending.add(agent_id)

    def prefer_role(self, agent_id: str, role: str, until: float) -> None:
        """Until ``until`` (clock time), offer what ``agent_id`` has free to
        the frameworks of ``role`` first, ahead of the DRF order, weights and
        quota guarantees (fair-share preemption's ``Prefer``: resources freed
        for a starved role). Quota limits and the headroom held for other
        roles' guarantees still cap the offer, and a role whose frameworks
        cannot take it (suppressed, filtered, below their minimum) lets it go
        on in the usual order. One preference per agent: a later call
        replaces it; ``until`` in the past clears it. Triggers allocation of
        the agent. O(1); a cycle pays for preferences only while some are set.
        """
        self._agent(agent_id)
        validate_role(role)
        if until <= self.clock.now():
            self._preferred.pop(agent_id, None)
            return
        self._preferred[agent_id] = (role, float(until))
        self._pending.add(agent_id)

    def preferences(self) -> dict[str, tuple[str, float]]:
        """The preferences in force: agent -> (role, until)."""
        now = self.clock.now()
        return {agent_id: pref for agent_id, pref in sorted(self._preferred.items()) if pref[1] > now}

    # ============================================================ frameworks
    def add_framework(
        self,
        framework_id: str,
        role: str = DEFAULT_ROLE,
        *,
        active: bool = True,
        suppressed: bool = False,
        min_allocatable: str | Iterable[Resources | str] | None = None,
    ) -> None:
        """Add a framework in ``role``. ``min_allocatable`` overrides the
        allocator's default for this framework. Triggers allocation."""
        if framework_id in self._frameworks:
            raise DuplicateFrameworkError(f"framework {framework_id!r} was already added")
        if not isinstance(framework_id, str) or not framework_id:
            raise UnknownFrameworkError(f"framework id must be a non-empty string, got {framework_id!r}")
        validate_role(role)
        mins = parse_min_allocatable(min_allocatable) if min_allocatable is not None else None
        framework = _Framework(framework_id, role, mins)
        if mins is not None:
            self._min_overrides[mins] = self._min_overrides.get(mins, 0) + 1
            self._all_mins = (self.min_allocatable, *self._min_overrides)
        framework.active = active
        framework.suppressed = suppressed
        sorter = self._role_frameworks.get(role)
        if sorter is None:
            self._sync_roles()  # the role sorter is about to have to order roles
            self._roles_deferred = False
            sorter = self._role_frameworks[role] = self._role_sorter.fresh(hierarchical=False)
            for agent in self._agents.values():
                sorter.add_total(agent.total)
            self._role_sorter.add_client(role)
            self._role_sorter.deactivate(role)
            self._role_eligible[role] = 0
        sorter.add_client(framework_id)
        sorter.deactivate(framework_id)
        self._frameworks[framework_id] = framework
        self._sync_activity(framework)
        self._update_role_deferral()
        self._eligibility += 1
        self._pending_all = True

    def remove_framework(self, framework_id: str) -> None:
        """Remove a framework: its offers are rescinded (``framework_removed``),
        everything it held is released and its filters are dropped."""
        framework = self._framework(framework_id)
        self._rescind_where(lambda o: o.framework_id == framework_id, RescindReason.FRAMEWORK_REMOVED,
                            frameworks=[framework_id])
        for agent_id, used in sorted(framework.used.items()):
            self._release(framework, self._agents[agent_id], used)
        framework.used.clear()
        self._filters.clear_framework(framework_id)
        framework.active = False
        self._sync_activity(framework)
        sorter = self._role_frameworks[framework.role]
        sorter.remove_client(framework_id)
        del self._frameworks[framework_id]
        if framework.min_allocatable is not None:
            self._min_overrides[framework.min_allocatable] -= 1
            if not self._min_overrides[framework.min_allocatable]:
                del self._min_overrides[framework.min_allocatable]
            self._all_mins = (self.min_allocatable, *self._min_overrides)
        if not len(sorter):
            self._sync_roles()
            self._roles_deferred = False
            del self._role_frameworks[framework.role]
            del self._role_eligible[framework.role]
            self._role_sorter.remove_client(framework.role)
        self._update_role_deferral()

    def activate_framework(self, framework_id: str) -> None:
        """The framework (re)connected: offer to it again (unless suppressed)."""
        framework = self._framework(framework_id)
        framework.active = True
        self._sync_activity(framework)
        self._eligibility += 1
        self._pending_all = True

    def deactivate_framework(self, framework_id: str) -> None:
        """The framework disconnected: no more offers; outstanding ones are
        rescinded (``framework_deactivated``). Its tasks keep their resources."""
        framework = self._framework(framework_id)
        self._rescind_where(lambda o: o.framework_id == framework_id, RescindReason.FRAMEWORK_DEACTIVATED,
                            frameworks=[framework_id])
        framework.active = False
        self._sync_activity(framework)

    def suppress_offers(self, framework_id: str) -> None:
        """No offers to the framework until it revives (outstanding ones stay)."""
        framework = self._framework(framework_id)
        framework.suppressed = True
        self._sync_activity(framework)

    def revive_offers(self, framework_id: str) -> None:
        """Clear the framework's filters, lift suppression, trigger allocation."""
        framework = self._framework(framework_id)
        self._filters.clear_framework(framework_id)
        framework.suppressed = False
        self._sync_activity(framework)
        self._eligibility += 1
        self._pending_all = True

    def _sync_activity(self, framework: _Framework) -> None:
        """Keep the sorters' active sets equal to "active and not suppressed",
        with a per-role count so a role leaves the order with its last one."""
        eligible = framework.active and not framework.suppressed
        if eligible == (framework.id in self._eligible):
            return
        role = framework.role
        if eligible:
            self._eligible.add(framework.id)
            self._role_frameworks[role].activate(framework.id)
            self._role_eligible[role] = self._role_eligible.get(role, 0) + 1
            if self._role_eligible[role] == 1:
                self._role_sorter.activate(role)
                self._active_roles.add(role)
        else:
            self._eligible.discard(framework.id)
            self._role_frameworks[role].deactivate(framework.id)
            self._role_eligible[role] -= 1
            if self._role_eligible[role] == 0:
                self._role_sorter.deactivate(role)
                self._active_roles.discard(role)

    # ================================================================ offers
    def decline_offer(self, offer_id: str, refuse_seconds: float = DEFAULT_REFUSE_SECONDS) -> None:
        """The framework refused the whole offer; filter the agent for it for
        max(allocation_interval, refuse_seconds) unless refuse_seconds is 0."""
        refuse = _check_refuse(refuse_seconds)
        offer = self._offer(offer_id)
        self._retire(offer)
        framework, agent = self._frameworks[offer.framework_id], self._agents[offer.agent_id]
        self._release(framework, agent, offer.resources)
        self._add_filter(offer.framework_id, offer.agent_id, offer.resources, refuse)
        self._counters["offers_declined"] += 1

    def accept_offer(self, offer_id: str, used: Resources,
                     refuse_seconds: float = DEFAULT_REFUSE_SECONDS) -> Resources:
        """The framework launched tasks using ``used`` of the offer; the rest
        is recovered and filtered like a decline. Returns the unused part."""
        refuse = _check_refuse(refuse_seconds)
        offer = self._offer(offer_id)
        if not offer.resources.contains(used):
            raise RecoveryError(f"offer {offer_id} holds {offer.resources}; cannot use {used}")
        self._retire(offer)
        framework, agent = self._frameworks[offer.framework_id], self._agents[offer.agent_id]
        framework.used[agent.id] = framework.used.get(agent.id, EMPTY) + used
        unused = offer.resources - used
        if unused:
            self._release(framework, agent, unused)
            self._add_filter(framework.id, agent.id, unused, refuse)
        self._counters["offers_accepted"] += 1
        return unused

    def recover_resources(self, framework_id: str, agent_id: str, resources: Resources,
                          refuse_seconds: float = 0.0) -> None:
        """Return ``resources`` the framework holds on the agent to the pool
        (tasks ended, or the unused part of an answered offer) and filter the
        agent for ``refuse_seconds`` (0 = no filter).

        Resources come first out of what the framework's tasks use there; if
        that is not enough, its outstanding offers on the agent count as
        answered (they are retired, their remainder becomes used). Recovering
        more than the framework holds there raises :class:`RecoveryError`.
        """
        refuse = _check_refuse(refuse_seconds)
        framework = self._framework(framework_id)
        agent = self._agent(agent_id)
        if not isinstance(resources, Resources):
            raise ResourcesError(f"resources must be Resources, got {type(resources).__name__}")
        used = framework.used.get(agent_id, EMPTY)
        if used.contains(resources):
            remaining_used = used - resources
        else:
            pool = agent.held.get(framework_id, EMPTY)
            if not pool.contains(resources):
                raise RecoveryError(
                    f"framework {framework_id!r} holds {pool} on agent {agent_id!r}; cannot recover {resources}"
                )
            for offer in list(framework.offers.get(agent_id, {}).values()):
                self._retire(offer)
            remaining_used = pool - resources
        if remaining_used:
            framework.used[agent_id] = remaining_used
        else:
            framework.used.pop(agent_id, None)
        self._release(framework, agent, resources)
        self._add_filter(framework_id, agent_id, resources, refuse)

    def rescind_offer(self, offer_id: str, reason: str = RescindReason.OPERATOR) -> Rescind:
        """Take an outstanding offer back (master-side reasons); the framework
        should be told. Also queued for :meth:`drain_rescinds`."""
        offer = self._offer(offer_id)
        return self._rescind(offer, reason)

    def drain_rescinds(self) -> list[Rescind]:
        """Rescinds made by the allocator since the last call (agent removed or
        deactivated, framework deactivated, weights or quota changed, offer
        timeout), oldest first. The resources are already back in the pool."""
        out, self._rescinds = self._rescinds, []
        return out

    def expire_offers(self) -> list[Rescind]:
        """Rescind offers older than ``offer_timeout`` (no-op if it is None)."""
        if self.offer_timeout is None:
            return []
        deadline = self.clock.now() - self.offer_timeout
        expired = []
        times = self._offer_times
        while times and times[0][0] <= deadline:
            _, offer_id = times.popleft()
            offer = self._offers.get(offer_id)
            if offer is not None:  # else answered or rescinded already
                expired.append(self._rescind(offer, RescindReason.OFFER_TIMEOUT))
        return expired

    def get_offer(self, offer_id: str) -> Offer | None:
        """The outstanding offer with this id, or None."""
        return self._offers.get(offer_id)

    def outstanding_offers(self, framework_id: str | None = None) -> list[Offer]:
        """Offers not yet answered, oldest first."""
        if framework_id is None:
            return list(self._offers.values())
        framework = self._framework(framework_id)
        return sorted((o for offers in framework.offers.values() for o in offers.values()),
                      key=lambda o: o.created_at)

    # ======================================================= weights, quota
    def update_weights(self, weights: Mapping[str, float]) -> None:
        """Set role weights (kept for roles without frameworks too). If a
        changed role has frameworks, all outstanding offers are rescinded so
        the new weights take effect at once (as the Mesos master does)."""
        checked = {}
        for role, weight in weights.items():
            validate_role(role)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                    or weight <= 0:
                raise WeightError(f"weight of role {role!r} must be a finite number > 0, got {weight!r}")
            checked[role] = float(weight)
        for role, weight in checked.items():
            self._weights[role] = weight
            self._role_sorter.update_weight(role, weight)
        touched = any(self._role_has_frameworks(role) for role in checked)
        if touched:
            self._rescind_where(lambda o: True, RescindReason.WEIGHTS_UPDATED)
            self._pending_all = True

    def update_quota(self, role: str, guarantee: Resources | str | Mapping[str, float] | None = None,
                     limit: Resources | str | Mapping[str, float] | None = None) -> None:
        """Set (or, with neither, clear) a role's quota. The guarantee is set
        aside for the role's subtree first; the limit caps what it may hold
        (strings and mappings may hold explicit zeros: ``"gpus:0"``).
        Outstanding offers are rescinded where the new quota needs them: offers
        of other roles until the unmet guarantee is covered, and offers of the
        role beyond its new limit."""
        validate_role(role)
        g, lim = self._quota.validate(role, guarantee, limit)
        self._sync_roles()
        self._roles_deferred = False
        self._quota.set(role, g, lim, self._consumption(role))
        self._update_role_deferral()
        self._sync_free_tracking()
        self._rescind_for_quota(role)
        self._eligibility += 1
        self._pending_all = True

    def _sync_roles(self) -> None:
        """Bring the role sorter up to date after deferred grants: the single
        role's allocation is the sum of its frameworks' (O(F))."""
        if not self._roles_deferred:
            return
        (role,) = self._role_frameworks
        frameworks = self._role_frameworks[role]
        current = EMPTY
        for framework_id in frameworks.clients():
            current = current + frameworks.allocation(framework_id)
        self._role_sorter.unallocated(role, self._role_sorter.allocation(role))
        self._role_sorter.allocated(role, current, times=self._deferred_grants)
        self._deferred_grants = 0

    def _update_role_deferral(self) -> None:
        """Defer role-level accounting exactly while one role exists and no
        quota reads role consumption or order."""
        wanted = len(self._role_frameworks) == 1 and not self._quota
        if self._roles_deferred and not wanted:
            self._sync_roles()
            self._roles_deferred = False
        elif wanted and not self._roles_deferred:
            self._roles_deferred = True

    def _sync_free_tracking(self) -> None:
        """The free pool only matters for guarantee headroom: keep it while
        some role has a guarantee, and rebuild it when one first appears."""
        tracking = bool(self._quota.guarantees)
        if tracking and not self._track_free:
            self._free = {}
            self._track_free = True
            for agent in self._agents.values():
                if agent.active:
                    self._add_free(agent.available._millis, 1)
        elif not tracking:
            self._track_free = False
            self._free = {}

    def _consumption(self, role: str) -> Millis:
        consumed: Millis = {}
        prefix = role + "/"
        for framework in self._frameworks.values():
            if framework.role == role or framework.role.startswith(prefix):
                for agent_id in self._held_agents(framework):
                    for kind, amount in self._agents[agent_id].held[framework.id]._millis.items():
                        consumed[kind] = consumed.get(kind, 0) + amount
        return consumed

    def _held_agents(self, framework: _Framework) -> set[str]:
        return set(framework.used) | set(framework.offers)

    def _rescind_for_quota(self, role: str) -> None:
        quota = self._quota
        limit = quota.limits.get(role)
        if limit is not None:
            consumed = quota.consumed[role]
            over = {k: consumed.get(k, 0) - v for k, v in limit.items() if consumed.get(k, 0) > v}
            self._rescind_until(lambda o: self._in_subtree(self._frameworks[o.framework_id].role, role),
                                over, RescindReason.QUOTA_UPDATED)
        root = quota.guarantee_root(role)
        if root is not None:
            free = self._free
            short = {k: v - free.get(k, 0) for k, v in quota.unsatisfied(root).items() if v > free.get(k, 0)}
            self._rescind_until(lambda o: not self._in_subtree(self._frameworks[o.framework_id].role, root),
                                short, RescindReason.QUOTA_UPDATED)

    def _rescind_until(self, eligible, amounts: Millis, reason: str) -> None:
        """Rescind eligible offers (oldest first) until they cover ``amounts``."""
        left = dict(amounts)
        for offer in list(self._offers.values()):
            if not any(v > 0 for v in left.values()):
                return
            if not eligible(offer):
                continue
            if not any(offer.resources._millis.get(k, 0) > 0 and v > 0 for k, v in left.items()):
                continue
            self._rescind(offer, reason)
            for kind, amount in offer.resources._millis.items():
                if kind in left:
                    left[kind] -= amount

    @staticmethod
    def _in_subtree(role: str, top: str) -> bool:
        return role == top or role.startswith(top + "/")

    def _role_has_frameworks(self, role: str) -> bool:
        return any(self._in_subtree(r, role) for r in self._role_frameworks)

    # ============================================================ allocation
    def allocate(self, agent_ids: Iterable[str] | None = None) -> list[Offer]:
        """Run one allocation cycle over the given agents (all if None) and
        return the offers made, at most one per (framework, agent)."""
        now = self.clock.now()
        for agent_id in self._filters.expire(now):
            agent = self._agents.get(agent_id)
            if agent is not None:
                agent.version += 1
        if agent_ids is None:
            # insertion order is deterministic for a given history: no need to sort
            candidates = [a for a in self._agents.values() if a.active and a.available]
            self._pending_all = False
            self._pending.clear()
        else:
            wanted = sorted(set(agent_ids))
            candidates = [self._agent(agent_id) for agent_id in wanted]
            candidates = [a for a in candidates if a.active and a.available]
            self._pending.difference_update(wanted)
        self._rng.shuffle(candidates)
        grants: dict[tuple[str, str], Resources] = {}
        # a cycle makes many short-lived containers and no reference cycles:
        # the cyclic collector would only walk the whole heap for nothing
        collecting = gc.isenabled()
        gc.disable()
        try:
            if self._preferred:  # empty unless fair-share preemption freed something: nothing to pay
                self._allocate_preferred(candidates, now, grants)
            if self._quota.guarantees:
                for agent in candidates:
                    self._allocate_guarantees(agent, now, grants)
            if not self._quota and len(self._all_mins) == 1 and len(self._active_roles) == 1:
                (role,) = self._active_roles
                self._allocate_plain(candidates, role, now, grants)
            else:
                for agent in candidates:
                    self._allocate_agent(agent, now, grants)
            offers = self._make_offers(grants, now)
        finally:
            if collecting:
                gc.enable()
        self._counters["cycles"] += 1
        self._last_cycle_duration = self.clock.now() - now
        self._last_cycle_offers = len(offers)
        return offers

    def tick(self) -> list[Offer]:
        """What a runtime calls whenever it wakes up: rescinds timed-out
        offers, then runs a batch cycle if one is due, or else allocates the
        agents touched by events since the last cycle (coalesced)."""
        self.expire_offers()
        now = self.clock.now()
        if now >= self._next_batch:
            self._next_batch = now + self.allocation_interval
            return self.allocate()
        if self._pending_all:
            return self.allocate()
        if self._pending:
            return self.allocate(sorted(self._pending))
        return []

    def next_wakeup(self) -> float:
        """When ``tick`` next has work: now if events are pending, else the
        earlier of the next batch cycle and the next offer timeout."""
        if self._pending_all or self._pending:
            return self.clock.now()
        wake = self._next_batch
        if self.offer_timeout is not None:
            times = self._offer_times
            while times and times[0][1] not in self._offers:
                times.popleft()  # answered offers leave stale entries behind
            if times:
                wake = min(wake, times[0][0] + self.offer_timeout)
        return wake

    def _allocate_preferred(self, candidates: list[_Agent], now: float, grants: dict) -> None:
        """Stage 0: an agent preferred for a role goes to that role's first
        framework in sorted order that can take it (see :meth:`prefer_role`).
        O(preferences + candidates), run only while preferences are set."""
        preferred = self._preferred
        for agent_id in [a for a, (_, until) in preferred.items() if until <= now]:
            del preferred[agent_id]
        if not preferred:
            return
        for agent in candidates:
            pref = preferred.get(agent.id)
            if pref is None or pref[0] not in self._active_roles:
                continue
            role = pref[0]
            if not agent.available or not self._allocatable_for_anyone(agent.available):
                continue
            caps = self._caps(role) if self._quota else None
            filters_here = self._filters.on_agent(agent.id)
            for framework_id in self._role_frameworks[role].iter_sorted():
                framework = self._frameworks[framework_id]
                offer = self._offerable(agent, framework, caps)
                if offer is None:
                    continue
                if filters_here:
                    refusals = filters_here.get(framework_id)
                    if refusals and refused_any(refusals, offer, now):
                        self._counters["offers_filtered"] += 1
                        continue
                self._grant(framework, agent, offer, grants)
                break  # the sorter changed: never resume its iterator

    def _allocate_guarantees(self, agent: _Agent, now: float, grants: dict) -> None:
        """Stage 1: roles owed part of their guarantee take it from this agent."""
        quota = self._quota
        for role in self._role_sorter.sort():
            if not agent.available:
                return
            root = quota.guarantee_root(role)
            if root is None:
                continue
            owed = quota.unsatisfied(root)
            if not owed:
                continue
            caps = self._caps(role)
            for kind, amount in owed.items():
                caps[kind] = min(caps.get(kind, amount), amount)
            for framework_id in self._role_frameworks[role].iter_sorted():
                framework = self._frameworks[framework_id]
                offer = self._offerable(agent, framework, caps)
                if offer is None or not any(offer._millis.get(k) for k in owed):
                    continue
                if self._filters.blocks(framework_id, agent.id, offer, now):
                    self._counters["offers_filtered"] += 1
                    continue
                self._grant(framework, agent, offer, grants)
                break  # the sorter changed: never resume its iterator

    def _allocate_plain(self, candidates: list[_Agent], role: str, now: float, grants: dict) -> None:
        """Stage 2 in the common case — no quota, one active role, no
        per-framework minimum — as one tight loop. It decides exactly as
        :meth:`_allocate_agent` does (whole-agent grants: nothing can cut an
        offer short here); the tests run both paths."""
        frameworks = self._frameworks
        sorter = self._role_frameworks[role]
        mins = self.min_allocatable
        on_agent = self._filters.on_agent
        eligibility = self._eligibility
        skipped = 0
        for agent in candidates:
            if agent.idle_stamp == (agent.version, eligibility):
                continue
            available = agent.available
            for minimum in mins:
                if available.contains(minimum):
                    break
            else:
                if mins:
                    continue
            filters_here = on_agent(agent.id)
            for framework_id in sorter.iter_sorted():
                if filters_here:
                    refusals = filters_here.get(framework_id)
                    if refusals and refused_any(refusals, available, now):
                        skipped += 1
                        continue
                break
            else:
                agent.idle_stamp = (agent.version, eligibility)
                continue
            self._hold(frameworks[framework_id], agent, available)  # the sorter changed: iterator dropped
            grants[(framework_id, agent.id)] = available
        self._counters["offers_filtered"] += skipped

    def _allocate_agent(self, agent: _Agent, now: float, grants: dict) -> None:
        """Stage 2: the agent's available resources go to the first framework
        in sorted order that can take them and has not filtered them. When
        quota cut the offer short, the rest goes on to the next framework."""
        stamp = (agent.version, self._eligibility)
        if agent.idle_stamp == stamp:
            return  # nobody could take it, and nothing changed since: O(1)
        served: set[str] = set()
        while agent.available and self._allocatable_for_anyone(agent.available):
            found = self._first_taker(agent, now, served)
            if found is None:
                agent.idle_stamp = (agent.version, self._eligibility)
                return
            framework, offer = found
            self._grant(framework, agent, offer, grants)
            if not agent.available:
                return  # the usual case: the whole agent went to one framework
            served.add(framework.id)

    def _first_taker(self, agent: _Agent, now: float, served: set[str]) -> tuple[_Framework, Resources] | None:
        """The first framework in sorted order that may be offered something
        on ``agent``, with what it may be offered. Hot path: no mutation here,
        so the sorters' iterators stay valid."""
        frameworks = self._frameworks
        filters_here = self._filters.on_agent(agent.id)  # usually None: no filter to check
        quota = self._quota
        plain = len(self._all_mins) == 1  # no framework overrides the minimum
        roles = self._active_roles
        skipped = 0
        try:
            for role in (roles if len(roles) == 1 else self._role_sorter.iter_sorted()):
                caps = self._caps(role) if quota else None
                for framework_id in self._role_frameworks[role].iter_sorted():
                    if served and framework_id in served:
                        continue
                    if caps is None and plain:
                        offer = agent.available  # _allocatable_for_anyone checked the minimum
                    else:
                        offer = self._offerable(agent, frameworks[framework_id], caps)
                        if offer is None:
                            continue
                    if filters_here:
                        refusals = filters_here.get(framework_id)
                        if refusals and refused_any(refusals, offer, now):
                            skipped += 1
                            continue
                    return frameworks[framework_id], offer
            return None
        finally:
            if skipped:
                self._counters["offers_filtered"] += skipped

    def _caps(self, role: str) -> Millis | None:
        """Per scalar kind, the most an allocation to ``role`` may take: the
        room under its (and its ancestors') limits, and the free pool minus
        the headroom owed to other roles' guarantees. None without quota."""
        quota = self._quota
        if not quota:
            return None
        caps = quota.limit_caps(role) or {}
        if quota.guarantees:
            need = quota.required_headroom()
            root = quota.guarantee_root(role)
            own = quota.unsatisfied(root) if root is not None else {}
            for kind, amount in need.items():
                room = max(0, self._free.get(kind, 0) - amount + own.get(kind, 0))
                if kind not in caps or room < caps[kind]:
                    caps[kind] = room
        return caps

    def _allocatable_for_anyone(self, available: Resources) -> bool:
        """Cheap pre-check: could any framework's minimum be met at all?
        Saves walking every framework for an agent left with crumbs."""
        for mins in self._all_mins:
            if not mins:
                return True
            for minimum in mins:
                if available.contains(minimum):
                    return True
        return False

    def _offerable(self, agent: _Agent, framework: _Framework, caps: Millis | None) -> Resources | None:
        """What ``framework`` may be offered on ``agent`` now, or None if
        that is below its minimum allocatable resources."""
        if not caps:
            offer = agent.available
            if framework.min_allocatable is None and len(self._all_mins) == 1:
                return offer  # _allocatable_for_anyone already checked the default minimum
        else:
            offer = _clip(agent.available, caps)
        if not offer:
            return None
        mins = framework.min_allocatable if framework.min_allocatable is not None else self.min_allocatable
        if not mins:
            return offer
        for minimum in mins:
            if offer.contains(minimum):
                return offer
        return None

    def _grant(self, framework: _Framework, agent: _Agent, resources: Resources, grants: dict) -> None:
        self._hold(framework, agent, resources)
        key = (framework.id, agent.id)
        grants[key] = grants[key] + resources if key in grants else resources

    def _make_offers(self, grants: dict[tuple[str, str], Resources], now: float) -> list[Offer]:
        offers = []
        prefix, serial = self._offer_id_prefix, self._offers_created
        for (framework_id, agent_id), resources in grants.items():
            agent = self._agents[agent_id]
            serial += 1
            offer = Offer(f"{prefix}{serial}", framework_id, agent_id, resources, agent.hostname,
                          agent.attributes, now)
            self._offers[offer.id] = offer
            on_agent = self._frameworks[framework_id].offers.get(agent_id)
            if on_agent is None:
                self._frameworks[framework_id].offers[agent_id] = {offer.id: offer}
            else:
                on_agent[offer.id] = offer
            offers.append(offer)
        self._offers_created = serial
        if self.offer_timeout is not None:
            self._offer_times.extend((now, offer.id) for offer in offers)
        self._counters["offers_made"] += len(offers)
        return offers

    # ============================================================ bookkeeping
    def _hold(self, framework: _Framework, agent: _Agent, resources: Resources) -> None:
        """Move resources from the agent's available pool to the framework."""
        # the usual coarse-grained case hands out everything: skip the arithmetic
        agent.available = EMPTY if resources is agent.available else agent.available - resources
        agent.version += 1
        held = agent.held.get(framework.id)
        agent.held[framework.id] = held + resources if held is not None else resources
        if self._roles_deferred:
            self._deferred_grants += 1
        else:
            self._role_sorter.allocated(framework.role, resources)
        self._role_frameworks[framework.role].allocated(framework.id, resources)
        if self._quota:
            self._quota.on_change(framework.role, resources._millis, 1)
            self._eligibility += 1  # quota caps moved
            if agent.active:
                self._add_free(resources._millis, -1)

    def _release(self, framework: _Framework, agent: _Agent, resources: Resources) -> None:
        """Move resources from the framework back to the agent's pool."""
        if not resources:
            return
        left = agent.held[framework.id] - resources
        if left:
            agent.held[framework.id] = left
        else:
            del agent.held[framework.id]
        agent.available = agent.available + resources
        agent.version += 1
        if not self._roles_deferred:
            self._role_sorter.unallocated(framework.role, resources)
        self._role_frameworks[framework.role].unallocated(framework.id, resources)
        if self._quota:
            self._quota.on_change(framework.role, resources._millis, -1)
            self._eligibility += 1  # quota caps moved
            if agent.active:
                self._add_free(resources._millis, 1)

    def _add_free(self, millis: Mapping[str, int], sign: int) -> None:
        if self._track_free:
            add_millis(self._free, millis, sign)

    def _add_filter(self, framework_id: str, agent_id: str, refused: Resources, refuse: float) -> None:
        if refuse > 0 and refused:
            timeout = max(self.allocation_interval, refuse)
            self._filters.add(framework_id, agent_id, refused, self.clock.now() + timeout)

    def _retire(self, offer: Offer) -> None:
        del self._offers[offer.id]
        by_agent = self._frameworks[offer.framework_id].offers
        offers = by_agent[offer.agent_id]
        del offers[offer.id]
        if not offers:
            del by_agent[offer.agent_id]

    def _rescind(self, offer: Offer, reason: str) -> Rescind:
        self._retire(offer)
        self._release(self._frameworks[offer.framework_id], self._agents[offer.agent_id], offer.resources)
        rescind = Rescind(offer, reason)
        self._rescinds.append(rescind)
        self._counters["offers_rescinded"] += 1
        return rescind

    def _rescind_where(self, predicate, reason: str, *, agents: Iterable[str] | None = None,
                       frameworks: Iterable[str] | None = None) -> None:
        if frameworks is not None:
            candidates = [o for f in frameworks for offers in self._frameworks[f].offers.values()
                          for o in offers.values()]
        elif agents is not None:
            candidates = [o for a in agents for f in self._agents[a].held
                          for o in self._frameworks[f].offers.get(a, {}).values()]
        else:
            candidates = list(self._offers.values())
        for offer in sorted(candidates, key=lambda o: (o.created_at, o.id)):
            if predicate(offer):
                self._rescind(offer, reason)

    # =============================================================== lookups
    def _agent(self, agent_id: str) -> _Agent:
        try:
            return self._agents[agent_id]
        except (KeyError, TypeError):
            raise UnknownAgentError(f"unknown agent {agent_id!r}") from None

    def _framework(self, framework_id: str) -> _Framework:
        try:
            return self._frameworks[framework_id]
        except (KeyError, TypeError):
            raise UnknownFrameworkError(f"unknown framework {framework_id!r}") from None

    def _offer(self, offer_id: str) -> Offer:
        try:
            return self._offers[offer_id]
        except (KeyError, TypeError):
            raise UnknownOfferError(f"offer {offer_id!r} is not outstanding") from None

    # ================================================================ queries
    def statistics(self) -> AllocatorStatistics:
        """A frozen snapshot of counters, totals and dominant shares."""
        total = EMPTY
        allocated = EMPTY
        for agent in self._agents.values():
            total = total + agent.total
            allocated = allocated + (agent.total - agent.available)
        self._sync_roles()
        role_shares = {role: self._role_sorter.share(role) for role in self._role_frameworks}
        framework_shares = {fid: self._role_frameworks[f.role].share(fid) for fid, f in self._frameworks.items()}
        return AllocatorStatistics(
            outstanding_offers=len(self._offers),
            active_filters=len(self._filters),
            agents=len(self._agents),
            frameworks=len(self._frameworks),
            last_cycle_duration=self._last_cycle_duration,
            last_cycle_offers=self._last_cycle_offers,
            total=total,
            allocated=allocated,
            role_shares=role_shares,
            framework_shares=framework_shares,
            **self._counters,
        )

    def dominant_share(self, framework_id: str) -> float:
        """The framework's dominant share (DRF, among its role's frameworks)."""
        framework = self._framework(framework_id)
        return self._role_frameworks[framework.role].share(framework_id)

    def available(self, agent_id: str) -> Resources:
        return self._agent(agent_id).available

    def allocation(self, framework_id: str) -> dict[str, Resources]:
        """What the framework holds (offered + used) per agent."""
        self._framework(framework_id)
        return {a.id: a.held[framework_id] for a in self._agents.values() if framework_id in a.held}

    def snapshot(self) -> dict:
        """The whole state as plain data (for ``/state`` and tests)."""
        return {
            "agents": {
                a.id: {"hostname": a.hostname, "attributes": dict(a.attributes), "total": str(a.total),
                       "available": str(a.available), "active": a.active,
                       "held": {f: str(r) for f, r in sorted(a.held.items())}}
                for a in sorted(self._agents.values(), key=lambda a: a.id)
            },
            "frameworks": {
                f.id: {"role": f.role, "active": f.active, "suppressed": f.suppressed,
                       "min_allocatable": None if f.min_allocatable is None else [str(m) for m in f.min_allocatable],
                       "used": {a: str(r) for a, r in sorted(f.used.items())},
                       "offers": sorted(o for offers in f.offers.values() for o in offers)}
                for f in sorted(self._frameworks.values(), key=lambda f: f.id)
            },
            "offers": {o.id: {"framework_id": o.framework_id, "agent_id": o.agent_id,
                              "resources": str(o.resources), "created_at": o.created_at}
                       for o in self._offers.values()},
            "filters": self._filters.snapshot(),
            "weights": dict(sorted(self._weights.items())),
            "quota": self._quota.snapshot(),
            "pending": {"all": self._pending_all, "agents": sorted(self._pending)},
            "preferred": {a: {"role": role, "until": until} for a, (role, until) in self.preferences().items()},
            "counters": dict(self._counters),
            "rescinds": [(r.offer.id, r.reason) for r in self._rescinds],
        }

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` if the bookkeeping is inconsistent: what
        agents hold adds up, offers and used resources make up the holdings,
        sorters and quota agree with the holdings. O(A·F) — for tests."""
        self._sync_roles()
        free: Millis = {}
        for agent in self._agents.values():
            held = EMPTY
            for framework_id, resources in agent.held.items():
                framework = self._frameworks[framework_id]
                parts = framework.used.get(agent.id, EMPTY)
                for offer in framework.offers.get(agent.id, {}).values():
                    parts = parts + offer.resources
                assert parts == resources, f"{framework_id}@{agent.id}: used+offered {parts} != held {resources}"
                held = held + resources
            assert held + agent.available == agent.total, f"agent {agent.id}: held+available != total"
            if agent.active:
                for kind, amount in agent.available._millis.items():
                    free[kind] = free.get(kind, 0) + amount
        if self._track_free:
            assert free == self._free, f"free pool {self._free} != {free}"
        for framework in self._frameworks.values():
            expected = EMPTY
            for agent in self._agents.values():
                expected = expected + agent.held.get(framework.id, EMPTY)
            got = self._role_frameworks[framework.role].allocation(framework.id)
            assert got == expected.only(expected.scalars()), f"sorter allocation of {framework.id}: {got} != {expected}"
        for role in self._quota.consumed:
            assert self._quota.consumed[role] == self._consumption(role), f"quota consumption of {role}"
        for offer in self._offers.values():
            assert offer.id in self._frameworks[offer.framework_id].offers.get(offer.agent_id, {})
