"""The Fuxi scheduler's core: FuxiMaster's scheduling model, sans I/O.

It runs inside a framework (``mesoslike fuxi serve``): the Mesos master
offers it resources, and it hands them out as *slots* to the ScheduleUnits of
the jobs submitted to it (docs/fuxi-scheduling.rst; seeds 000 and 002). Pure and
deterministic: calls go in, commands (:class:`LaunchSlots`,
:class:`DeclineOffers`, :class:`KillSlot`, :class:`SuppressOffers`,
:class:`ReviveOffers`) and job events (:class:`SlotGranted`,
:class:`SlotRevoked`) come out; time comes from an injected clock.

How a pass over an offer batch (:meth:`FuxiCore.on_offers`) goes
(docs/fuxi-scheduling.rst has the details and the seeds' examples):

1. **Passive scheduling** (OnResourceFree) machine by machine, for the units
   that were already waiting: first the units holding a *reservation* on the
   machine, then quota groups by hunger (used / maximum, hungriest first);
   in a group, the highest-priority waiting unit that fits the machine and
   the group's room, found by the group's :class:`WaitingQueue`. A FIFO
   group's unit takes as many slots as fit; a FAIR group's units take one
   slot at a time, so equal priorities split a machine evenly. An
   all-or-nothing unit (a *gang*) picked here *reserves* the room instead.
2. **Active scheduling** of the units that arrived since the last pass, by
   priority: machine preferences, then engine rooms, then the cluster
   (LT_MACHINE > LT_ENGINEROOM > LT_CLUSTER, whatever order the job lists
   them in); rooms and the cluster round-robin over the machines that fit,
   fewest slots of the unit first, found by a first-fit index
   (:mod:`.machines`) rather than a scan. Units of equal priority in a FAIR
   group are interleaved slot by slot.
3. **Gangs** whose reserved room adds up to all their slots, every piece of
   it in this batch, are granted at once. Reservations accumulate across
   batches, in priority order, for at most ``gang_seconds``; then they are
   released and the gang backs off as long (it can still start from one
   batch), so two gangs cannot hold each other's room forever.
4. **Preemption** for units still waiting, highest priority first: an owner
   group under its maximum takes back lent quota from groups over theirs;
   otherwise a unit reclaims room from the lowest priority upward, never
   from equal or higher priority, for all its missing slots in one pass (a
   gang only if all of them). Victims' jobs get :class:`SlotRevoked`; the
   freed room is reserved for the urgent unit.
5. Offers of machines that got slots are accepted (:class:`LaunchSlots`);
   the rest are declined with a short filter. With nothing waiting the
   scheduler suppresses offers; new demand revives them. It never holds an
   offer past the pass: a reservation is room the core keeps for a unit
   when the machine's resources come back.

The **incremental protocol**: a job states its demand once
(:meth:`FuxiCore.submit`); the core remembers the outstanding desire and
emits grants as resources appear; the job hands back slots it no longer
needs (:meth:`FuxiCore.release` with ``keep_desire=False``) — no re-sends.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import deque
from itertools import chain
from operator import attrgetter, lt
from typing import Any, Callable, Collection, Generator, Iterable, Iterator, Mapping, Sequence

import attrs

from mesoslike import Clock, MesoslikeError, Offer, Resources, SystemClock
from mesoslike_frameworks.fuxi.books import (
    CLUSTER_SCOPE,
    EMPTY,
    WAIT_ALL_OR_NOTHING,
    WAIT_BLACKLIST,
    WAIT_LOWER_PRIORITY,
    WAIT_NEVER_FITS,
    WAIT_NO_FIT,
    WAIT_NO_LABELS,
    WAIT_QUOTA,
    NO_ENTRIES,
    NOTHING_GRANTED,
    Machine,
    Reserved,
    Slot,
    Unit,
    how_many_within,
)
from mesoslike_frameworks.fuxi.blacklist import DEFAULT_REPORT_SECONDS, DEFAULT_REPORTS_NEEDED, GlobalBlacklist
from mesoslike_frameworks.fuxi.machines import INDEX_KINDS, Dims, Scope, Vector, fits, fits_of, minus_of
from mesoslike_frameworks.fuxi.model import LT_CLUSTER, LT_ENGINEROOM, LT_MACHINE, POLICIES, JobSpec, Locality
from mesoslike_frameworks.fuxi.preemption import Evict, FailedSearches, PreemptionPlanner, VictimOrder, WaitReason
from mesoslike_frameworks.fuxi.quota import QuotaConfig, QuotaGroup, compute_caps, hunger
from mesoslike_frameworks.fuxi.waiting_queue import WaitingQueue

__all__ = ["FuxiCore", "FuxiError", "LaunchSlots", "DeclineOffers", "KillSlot", "SuppressOffers", "ReviveOffers",
           "SlotGranted", "SlotRevoked", "Slot", "WAIT_QUOTA", "WAIT_BLACKLIST", "WAIT_NO_FIT",
           "WAIT_LOWER_PRIORITY", "WAIT_ALL_OR_NOTHING", "WAIT_NEVER_FITS", "WAIT_NO_LABELS"]

log = logging.getLogger("mesoslike_frameworks.fuxi")

ROOM_ATTRIBUTE = "room"
#: seed 000: LT_MACHINE > LT_ENGINEROOM > LT_CLUSTER
_LOCALITY_ORDER = {LT_MACHINE: 0, LT_ENGINEROOM: 1, LT_CLUSTER: 2}


class FuxiError(MesoslikeError, ValueError):
    """A bad call from a job: unknown job, unit or slot, unknown quota group."""


# ---------------------------------------------------------------- commands
@attrs.frozen
class LaunchSlots:
    """Accept ``offer_ids`` (all of one agent) and start one task per slot."""
    agent_id: str
    offer_ids: tuple[str, ...]
    slots: tuple[Slot, ...]
    refuse_seconds: float


@attrs.frozen
class DeclineOffers:
    offer_ids: tuple[str, ...]
    refuse_seconds: float


@attrs.frozen
class KillSlot:
    slot_id: str
    reason: str


@attrs.frozen
class SuppressOffers:
    pass


@attrs.frozen
class ReviveOffers:
    pass


@attrs.frozen
class SlotGranted:
    """Event for the job: ``slot`` is its."""
    slot: Slot


@attrs.frozen
class SlotRevoked:
    """Event for the job: ``slot_id`` is taken back (preempted, agent lost)."""
    job_id: str
    unit: str
    slot_id: str
    reason: str


Command = LaunchSlots | DeclineOffers | KillSlot | SuppressOffers | ReviveOffers | SlotGranted | SlotRevoked

def _maker(cls: type) -> Callable[..., Any]:
    """A constructor of the frozen attrs class ``cls`` for values the core
    made itself (every field, in order): stored through the slots without
    the class's per-field checks. Same value as ``cls(*values)``; a first
    pass makes tens of thousands of slots and events. The stores are
    written out one by one (as attrs writes its own ``__init__``): a loop
    over them cost twice as much."""
    fields = [field.name for field in attrs.fields(cls)]
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    for i, name in enumerate(fields):
        scope[f"store{i}"] = getattr(cls, name).__set__
    values = ", ".join(f"value{i}" for i in range(len(fields)))
    stores = "".join(f"    store{i}(made, value{i})\n" for i in range(len(fields)))
    exec(f"def make({values}):\n    made = new(cls)\n{stores}    return made\n", scope)  # noqa: S102 - our text
    make: Callable[..., Any] = scope["make"]
    return make


_new_slot: Callable[..., Slot] = _maker(Slot)
_new_granted: Callable[[Slot], SlotGranted] = _maker(SlotGranted)
_new_launch: Callable[..., LaunchSlots] = _maker(LaunchSlots)


# ------------------------------------------------------------------- state
def _offer_agent(offer: Offer) -> str:
    return offer.agent_id


def _offered_by_agent(offers: Iterable[Offer]) -> dict[str, tuple[str, Mapping[str, Any], Resources]]:
    """Agent -> (hostname, attributes, what its offers in ``offers`` add up to)."""
    out: dict[str, tuple[str, Mapping[str, Any], Resources]] = {}
    for offer in offers:
        known = out.get(offer.agent_id)
        if known is None:
            out[offer.agent_id] = (offer.hostname, offer.attributes, offer.resources)
        else:
            out[offer.agent_id] = (known[0], known[1], known[2] + offer.resources)
    return out


@attrs.define(eq=False)
class _QuietPass:
    """A pass that changed nothing (:meth:`FuxiCore.on_offers`, "Quiet
    passes"): the books' change count after it, the settings it ran with,
    when the core's next timer falls due, what each machine offered to it,
    and the filter it declined with."""

    changes: int
    settings: tuple
    until: float
    offered: dict[str, tuple[str, Mapping[str, Any], Resources]]
    refuse: float

    @classmethod
    def of(cls, core: FuxiCore, offers: list[Offer], out: list[Command]) -> _QuietPass:
        refuse = next((c.refuse_seconds for c in out if isinstance(c, DeclineOffers)), core.decline_seconds)
        return cls(core._changes, core._settings(), core._next_timer(), _offered_by_agent(offers), refuse)

    def covers(self, core: FuxiCore, offers: list[Offer], now: float) -> bool:
        """Would a pass over ``offers`` at ``now`` only decline them, as this one did? O(offers + groups)."""
        if core._changes != self.changes or now >= self.until or core._settings() != self.settings:
            return False
        offered = self.offered
        return all(offered.get(agent_id) == seen for agent_id, seen in _offered_by_agent(offers).items())


@attrs.define(eq=False)
class _Job:
    id: str
    spec: JobSpec
    units: dict[str, Unit]
    submitted_at: float


class _Batch:
    """The machines of one offer batch in agent order, their kinds, and the
    first-fit indexes over their open room: the cluster's, and each room's
    (built when a unit first asks for that room; the rooms' members are
    sorted out then, for every room at once)."""

    def __init__(self, machines: list[Machine], vectors: list[Vector], dims: Dims, index: str,
                 hosts: dict[str, Machine] | None = None) -> None:
        """``machines`` in agent order, each's ``at`` its position there, ``vectors`` their open room;
        ``hosts``: hostname -> machine if the caller made it (else made when first asked)."""
        self.machines = machines
        self.dims = dims
        self._index = index
        self.cluster: Scope[Machine] = Scope(machines, vectors, len(dims), index)
        self._members: dict[str, list[Machine]] | None = None
        self._rooms: dict[str, Scope[Machine]] = {}
        self._hosts = hosts
        self._needs: dict[Resources, Vector | None] = {}
        self._needs_by_id: dict[int, tuple[Resources, Vector | None]] = {}
        self._resources: dict[Vector, Resources] = {}
        self.minus = minus_of(len(dims))         # a grant's room left, written out for the batch's kinds
        self.fits = fits_of(len(dims))

    @property
    def hosts(self) -> dict[str, Machine]:
        """Hostname -> machine (the last in agent order of a hostname); built when a unit first names a
        machine, unless the batch was taken with it (a first batch: in its loop over the offers)."""
        if self._hosts is None:
            self._hosts = {m.hostname: m for m in self.machines}
        return self._hosts

    def room(self, name: str) -> Scope[Machine] | None:
        """The scope of one engine room (None: no machine of it in this batch)."""
        scope = self._rooms.get(name)
        if scope is None:
            if self._members is None:
                self._members = {}
                for machine in self.machines:
                    members = self._members.get(machine.room)
                    if members is None:
                        self._members[machine.room] = [machine]
                    else:
                        members.append(machine)
            members = self._members.get(name)
            if members is None:
                return None
            scope = self._rooms[name] = Scope(members, [m.open for m in members], len(self.dims), self._index)
            for position, machine in enumerate(members):
                machine.room_at = position
        return scope

    def need(self, slot: Resources) -> Vector | None:
        """``slot`` over the batch's kinds; None if no machine here has one of its kinds."""
        known = self._needs_by_id.get(id(slot))     # the same object (a unit's): no hashing
        if known is not None and known[0] is slot:
            return known[1]
        try:
            vector = self._needs[slot]
        except KeyError:
            vector = self._needs[slot] = self.dims.need(slot.millis())
        self._needs_by_id[id(slot)] = (slot, vector)  # keeps ``slot`` alive, so its id stays its own
        return vector

    def refresh(self, machine: Machine) -> None:
        """``machine.open`` changed: update both indexes."""
        self.cluster.update(machine.at, machine.open)
        if self._rooms:
            scope = self._rooms.get(machine.room)
            if scope is not None:             # built in this batch: it set the machine's room_at
                scope.update(machine.room_at, machine.open)

    def shrunk(self, machine: Machine) -> None:
        """``machine.open`` shrank (no kind grew): update both indexes. A grant's."""
        self.cluster.shrunk(machine.at, machine.open)
        if self._rooms:
            scope = self._rooms.get(machine.room)
            if scope is not None:
                scope.shrunk(machine.room_at, machine.open)

    def resources(self, vector: Vector) -> Resources:
        """``vector`` as Resources; the same vector, the same object: passive
        scheduling asks it of every machine with room, and machines of a
        few shapes have few distinct free vectors (Resources is immutable)."""
        known = self._resources.get(vector)
        if known is None:
            known = self._resources[vector] = Resources.from_millis(
                {k: v for k, v in zip(self.dims.names, vector) if v > 0})
        return known


class FuxiCore:
    """FuxiMaster's scheduling model over Mesos offers. Not thread-safe: one
    caller (the framework's callback thread) at a time.

    Why one class of some 1,100 lines: it keeps the books (units, machines,
    slots, reservations, the waiting queues' membership, quota use) and the
    placement that changes them on the hot path — a first pass over 20,000
    machines grants tens of thousands of slots (``bench/fuxi_scale.py``),
    and every grant updates six books at once, which an object boundary
    per grant would make slower and no clearer. What only reads the books,
    or keeps a structure of its own, is beside it: the preemption search
    (:mod:`.preemption`, a planner whose decisions this class carries out),
    the records (:mod:`.books`), the waiting queues (:mod:`.waiting_queue`),
    the first-fit index (:mod:`.machines`), quota (:mod:`.quota`), the
    global blacklist (:mod:`.blacklist`).

    ``quota_groups``: name -> maximum (None: unlimited). A ``default`` group
    without a maximum exists unless given. ``policies``: group name -> FIFO
    or FAIR (seed 000: the policy among equal priority is the group's; FIFO
    when not given). ``global_blacklist``: hostnames no slot goes to (the
    operators'); ``blacklist_reports`` different jobs reporting a host within
    ``blacklist_report_seconds`` put it there too. ``preemption``: take back
    lent quota and preempt lower priority slots for units that cannot be
    placed. ``decline_seconds``: the filter on declined offers while units
    wait for something else (with nothing waiting the core suppresses
    offers instead). ``reservation_seconds``: how long room freed by
    preemption is kept for the unit it was freed for. ``gang_seconds``: how
    long an all-or-nothing unit may keep room reserved while it accumulates
    enough. ``machine_index``: ``tree`` (the first-fit index) or ``scan``
    (the naive walk over the machines; same results, for benchmarks and
    tests). ``preemption_budget``: victim candidates a pass may look at
    (units it does not reach try again next pass), which bounds the pass.
    ``preemption_retry_seconds``: a unit whose preemption search found
    nothing to take searches again only after this long (or when its
    desire grows): a search walks every lower priority slot, and passes
    come every second while units wait (issue 19).
    ``quiet_passes``: answer a batch without a pass when a pass could not
    change anything (:meth:`on_offers`, "Quiet passes"); False runs every
    pass in full (same commands, slower: for checks and benchmarks).
    """

    def __init__(self, quota_groups: Mapping[str, Resources | None] | None = None, *,
                 global_blacklist: Iterable[str] = (), preemption: bool = True, clock: Clock | None = None,
                 decline_seconds: float = 1.0, reservation_seconds: float = 30.0, gang_seconds: float = 60.0,
                 policies: Mapping[str, str] | None = None, blacklist_reports: int = DEFAULT_REPORTS_NEEDED,
                 blacklist_report_seconds: float = DEFAULT_REPORT_SECONDS, machine_index: str = "tree",
                 preemption_budget: int = 50_000, preemption_retry_seconds: float = 10.0,
                 quiet_passes: bool = True) -> None:
        self.clock = clock or SystemClock()
        groups = dict(quota_groups or {})
        groups.setdefault("default", None)
        policies = dict(policies or {})
        unknown = sorted(set(policies) - set(groups))
        if unknown:
            raise FuxiError(f"policy for unknown quota group(s) {', '.join(map(repr, unknown))}")
        self.groups: dict[str, QuotaGroup] = {}
        for name, maximum in groups.items():
            if maximum is not None and not isinstance(maximum, Resources):
                raise FuxiError(f"quota of group {name!r} must be Resources or None, got {maximum!r}")
            policy = policies.get(name, "FIFO")
            if policy not in POLICIES:
                raise FuxiError(f"policy of group {name!r} must be FIFO or FAIR, got {policy!r}")
            self.groups[name] = QuotaGroup(name, maximum, policy=policy)
        if machine_index not in INDEX_KINDS:
            raise FuxiError(f"machine_index must be one of {', '.join(INDEX_KINDS)}, got {machine_index!r}")
        self.machine_index = machine_index
        self._queues: dict[tuple[str, str], WaitingQueue] = {}    # (group, scope) -> its waiting units
        self._queued: dict[str, int] = {}                          # group -> units in its queues
        self._blacklist = GlobalBlacklist(global_blacklist, reports_needed=blacklist_reports,
                                          report_seconds=blacklist_report_seconds)
        self.preemption = preemption
        self.decline_seconds = decline_seconds
        self.reservation_seconds = reservation_seconds
        self.gang_seconds = gang_seconds
        self.preemption_budget = preemption_budget
        self.preemption_retry_seconds = preemption_retry_seconds
        self.jobs: dict[str, _Job] = {}
        self._units: dict[str, Unit] = {}
        self._new: dict[str, Unit] = {}              # units waiting for active scheduling
        self._wanting: set[str] = set()               # units with waiting slots
        # each group's waiting demand as it changes (:meth:`_sync`): group -> id(slot) -> [slot, slots
        # waiting], and the groups whose sum (``QuotaGroup.waiting``) is stale (:meth:`_refresh_groups`)
        self._demand: dict[str, dict[int, list[Any]]] = {}
        self._demand_stale: set[str] = set(self.groups)
        self._at_quota: set[str] = set()              # units whose reason is WAIT_QUOTA (waiting or not)
        #: None, or a list a reader set and drains: ``(job id, True)`` as a unit joins
        #: ``_at_quota & _wanting`` (:meth:`waiting_for_quota`'s units), ``(job id, False)`` as one leaves, in order
        self.quota_log: list[tuple[str, bool]] | None = None
        self._queued_units: dict[str, Unit] = {}      # units in their waiting queues (``Unit.queued``), by key
        # the queued units waiting for quota, by group and slot size (``_park``), and the other queued ones
        self._parked: dict[tuple[str, int], dict[str, Unit]] = {}
        self._unparked: dict[str, Unit] = {}
        self._holders: set[str] = set()               # units with reservations
        self._backing_off: set[str] = set()           # gangs whose reservations expired, for gang_seconds
        self._slots: dict[str, Slot] = {}
        self._victims = VictimOrder(self._slots)                 # the slots in preemption's order, kept between passes
        #: preemption searches that found nothing, kept between passes while what they read is the same
        #: (:class:`~.preemption.FailedSearches`); False: every search walks (same commands, for checks)
        self.search_memo = True
        self._failed_searches = FailedSearches()
        self._holds_changes = 0                      # reservations made or released, ever (the memo's stamp)
        self._holds_seen = 0                         # ... when the last pass began
        self._machines: dict[str, Machine] = {}     # every agent seen in an offer
        self._capacity_sum: Resources | None = EMPTY  # the machines' capacities summed (None: to recompute)
        # the machines' capacities that no other one contains, over these kinds (None: to recompute)
        self._frontier: list[Vector] | None = []
        self._frontier_kinds = Dims(())
        self._frontier_version = 0                  # bumped when it changes
        self._too_big: dict[int, tuple[Resources, bool]] = {}   # id(slot) -> (slot, fits no capacity seen)
        self._slot_sizes: dict[Resources, list[Any]] = {}      # a size -> [its one object, units of it]
        # limited group -> (its cap, its use, the room between them): asked per unit placed or queued
        self._quota_room: dict[str, tuple[Resources, Resources, Resources]] = {}
        self._lowest: dict[int, int] = {}            # slot priority -> slots held at it
        self._held_by: dict[str, dict[int, int]] = {}  # group -> slot priority -> its slots held at it
        # unlimited group -> id(slot) -> (slot, count) not summed into its use yet
        self._use_delta: dict[str, dict[int, list[Any]]] = {}    # [slot, count], the count changed in place
        self._job_seq = itertools.count(1)
        self._submit_seq = itertools.count()
        self._slot_seq = itertools.count(1)
        #: put before the slot numbers: a scheduler that recovered after a failover numbers its slots apart
        #: from its predecessors' (which it re-adopts with :meth:`adopt`)
        self.slot_prefix = ""
        self._suppressed = False
        self._out: list[Command] = []
        self._now = 0.0
        self._batch: _Batch | None = None
        self._granted_now: set[str] = set()          # slots granted in this pass (not launched yet)
        self._held_now: set[tuple[str, str]] = set()  # (unit, agent) reserved in this pass
        self.counters = {"slots_granted": 0, "slots_preempted": 0, "passes": 0, "gang_reservations_expired": 0,
                         "quiet_passes": 0}
        self.quiet_passes = quiet_passes
        #: bumped by every change a pass's outcome depends on: calls from jobs and what passes change
        self._changes = 0
        self._quiet: _QuietPass | None = None        # the last pass that changed nothing, while nothing changes
        self._queue_joins = 0                          # units that joined the waiting queues, ever

    @classmethod
    def from_config(cls, config: QuotaConfig, **options: Any) -> FuxiCore:
        """The core a quota file configures (groups, policies, global
        blacklist, preemption); ``options`` are the other keywords."""
        return cls(config.groups, global_blacklist=config.blacklist, preemption=config.preemption,
                   policies=config.policies, blacklist_reports=config.blacklist_reports,
                   blacklist_report_seconds=config.blacklist_report_seconds, **options)

    # ================================================================ jobs
    def submit(self, job: JobSpec, job_id: str | None = None) -> tuple[str, list[Command]]:
        """Register a job's demand once. Its units get active scheduling on
        the next offers. Raises :class:`FuxiError` (nothing changes) for an
        unknown quota group, a policy other than its group's, or a duplicate
        job id."""
        self._changes += 1
        if not isinstance(job, JobSpec):
            raise FuxiError(f"submit needs a JobSpec, got {type(job).__name__}")
        group = self.groups.get(job.quota_group)
        if group is None:
            raise FuxiError(f"unknown quota group {job.quota_group!r}; known: {', '.join(sorted(self.groups))}")
        if job.policy is not None and job.policy != group.policy:
            raise FuxiError(f"job.policy: {job.policy!r}, but quota group {group.name!r} schedules {group.policy}: "
                            "FIFO or FAIR is the quota group's (seed 000), set in the quota file; leave it out "
                            "of the job")
        job_id = job_id or f"job-{next(self._job_seq):04d}"
        if job_id in self.jobs:
            raise FuxiError(f"job id {job_id!r} is taken")
        self._out = []
        units = {}
        for spec in job.units:
            unit = Unit(key=f"{job_id}/{spec.name}", job_id=job_id, spec=spec, priority=job.priority_of(spec),
                         group=job.quota_group, submitted=next(self._submit_seq), desired=spec.slots,
                         blacklist_seconds=job.blacklist_seconds, slot=self._intern(spec.slot),
                         scopes=_scopes(spec.locality),
                         preferences=_preferences(spec.locality))
            units[spec.name] = unit
            self._units[unit.key] = unit
            self._new[unit.key] = unit
            self._sync(unit)
        self.jobs[job_id] = _Job(job_id, job, units, self.clock.now())
        log.info("job %s (%s) submitted: %s", job_id, job.name,
                 ", ".join(f"{u.name} x{u.slots}" for u in job.units))
        self._want_offers()
        return job_id, self._flush()

    def release(self, slot_id: str, keep_desire: bool = False) -> list[Command]:
        """A slot ends. ``keep_desire=False``: the job returns it (its unit
        wants one slot less). ``keep_desire=True``: its task ended but the
        unit still wants the slot (it waits for another)."""
        self._changes += 1
        slot = self._slots.get(slot_id)
        if slot is None:
            raise FuxiError(f"unknown slot {slot_id!r}")
        self._out = []
        unit = self._units[f"{slot.job_id}/{slot.unit}"]
        self._drop_slot(slot)
        if not keep_desire:
            unit.desired = max(0, unit.desired - 1)
        self._sync(unit)
        self._want_offers()
        return self._flush()

    def adopt(self, slot: Slot) -> list[Command]:
        """Count ``slot`` — granted before a failover, its worker still
        running — as granted again: its unit's, its host's and its group's,
        without a launch. Raises :class:`FuxiError` for an unknown job or
        unit or a slot already held. O(1) plus requeueing the unit."""
        self._changes += 1
        unit = self._unit(slot.job_id, slot.unit)
        if slot.id in self._slots:
            raise FuxiError(f"slot {slot.id!r} is held already")
        self._out = []
        machine = self._machines.get(slot.agent_id)
        if machine is None:     # not offered to this leader yet: known from its slot until it is
            machine = self._machines[slot.agent_id] = Machine(slot.agent_id, slot.hostname, slot.room)
            self._frontier = self._capacity_sum = None
        if machine.slots is NO_ENTRIES:
            machine.slots = {}
        machine.slots[slot.id] = slot
        unit.slots[slot.id] = slot
        unit.per_host[slot.hostname] = unit.per_host.get(slot.hostname, 0) + 1
        self._slots[slot.id] = slot
        self._victims.add(slot)
        self._lowest[slot.priority] = self._lowest.get(slot.priority, 0) + 1
        self._count_held(slot.group, slot.priority, 1)
        self._use(unit.group, slot.resources, 1)
        self._sync(unit)
        self._want_offers()
        return self._flush()

    def update_desire(self, job_id: str, unit_name: str, desired: int) -> list[Command]:
        """Change a unit's outstanding desire (slots wanted at once)."""
        self._changes += 1
        unit = self._unit(job_id, unit_name)
        if not isinstance(desired, int) or isinstance(desired, bool) or desired < 0:
            raise FuxiError(f"desired slots must be an integer >= 0, got {desired!r}")
        self._out = []
        if desired > unit.desired:
            unit.search_after = -math.inf            # more to wait for: it may preempt for it at once
        unit.desired = desired
        self._sync(unit)
        self._want_offers()
        return self._flush()

    def blacklist(self, job_id: str, unit_name: str, hostname: str) -> None:
        """The unit's own blacklist: no new slot of it goes to ``hostname``
        for the job's ``blacklist_seconds`` (seed 000: "for a while")."""
        self._changes += 1
        unit = self._unit(job_id, unit_name)
        unit.blocked[hostname] = self.clock.now() + unit.blacklist_seconds

    def report_host(self, job_id: str, hostname: str) -> None:
        """Job ``job_id`` reports ``hostname`` for the global blacklist; it
        goes there once enough different jobs reported it recently
        (:class:`~.blacklist.GlobalBlacklist`)."""
        self._changes += 1
        if job_id not in self.jobs:
            raise FuxiError(f"unknown job {job_id!r}")
        if self._blacklist.report(job_id, hostname, self.clock.now()):
            log.warning("%s is globally blacklisted: reported by %d jobs", hostname, self._blacklist.reports_needed)

    def add_to_global_blacklist(self, hostname: str) -> None:
        """No new slot of any job goes to ``hostname``, for good (the operators')."""
        self._changes += 1
        self._blacklist.add(hostname)

    @property
    def blacklist_reporting(self) -> tuple[int, float]:
        """How many different jobs must report a host, within how many
        seconds, to put it on the global blacklist (kept in the hard state)."""
        return self._blacklist.reports_needed, self._blacklist.report_seconds

    @property
    def global_blacklist(self) -> Collection[str]:
        """Hostnames no slot goes to now (read-only: :meth:`add_to_global_blacklist`
        and :meth:`report_host` add)."""
        self._blacklist.expire(self.clock.now())
        return self._blacklist.hosts()

    def avoid_hosts(self, job_id: str, unit_name: str, hosts: Iterable[str]) -> None:
        """The unit's next slots should not go to ``hosts`` (replacing what it
        said before; empty: no preference). A job asks this for a backup
        copy, which must run on another machine than its straggler."""
        self._changes += 1
        self._unit(job_id, unit_name).avoid = frozenset(hosts)

    def finish_job(self, job_id: str) -> list[Command]:
        """Forget a job; its remaining slots are killed and returned."""
        self._changes += 1
        job = self.jobs.pop(job_id, None)
        if job is None:
            raise FuxiError(f"unknown job {job_id!r}")
        self._out = []
        for unit in job.units.values():
            for slot in list(unit.slots.values()):
                self._drop_slot(slot)
                self._out.append(KillSlot(slot.id, "job finished"))
            self._release_holds(unit)
            unit.desired = 0
            self._backing_off.discard(unit.key)
            self._sync(unit)
            self._new.pop(unit.key, None)
            self._at_quota.discard(unit.key)    # out of _wanting already (_sync): quota_log has it
            del self._units[unit.key]
            self._forget_size(unit.slot)
        self._want_offers()
        return self._flush()

    # =========================================================== resources
    def on_offers(self, offers: list[Offer]) -> list[Command]:
        """One scheduling pass over an offer batch (module docstring). A big
        pass makes many objects: its runtime holds the garbage collector off
        meanwhile (:func:`.deferred_gc.deferred_collection`).

        **Quiet passes.** A pass that changed nothing -- it granted,
        revoked, reserved, reasoned and scheduled to search nothing, it only
        declined -- leaves the books as it found them, so a pass over the
        same books and no other offers would decline again. While no call
        from a job changes the books and no timer of the core falls due (a
        reservation's or a gang's back-off end, a unit's next preemption
        search or preemption, a blacklisting's end), a batch whose every
        machine offers what it offered to that pass (or is not in it) is
        declined at once, with the same filter, without a pass: O(offers),
        where a pass is O(waiting units). ``quiet_passes=False`` runs every
        pass in full; the commands are the same.
        """
        now = self.clock.now()
        quiet = self._quiet
        if quiet is not None and offers and quiet.covers(self, offers, now):
            self.counters["passes"] += 1
            self.counters["quiet_passes"] += 1
            self._now = now
            return [DeclineOffers(tuple(offer.id for offer in sorted(offers, key=_offer_agent)), quiet.refuse)]
        self._quiet = None
        self._out = []
        self.counters["passes"] += 1
        self._now = now
        self._granted_now = set()
        self._held_now = set()
        if self._holds_changes != self._holds_seen:
            # reservations changed in or since the last pass: a search then saw them as of its start, or
            # not those made in it (this pass sees them): one change more for what it remembered
            self._holds_changes = self._holds_seen = self._holds_changes + 1
        changes = self._changes
        self._expire()
        sizes_seen = self._frontier_version
        batch = self._batch = self._take_offers(offers)
        self._settle_use()
        self._refresh_groups()
        caps = compute_caps(self.groups.values())
        self._passive(batch, caps)
        self._active(batch, caps)
        self._start_gangs(batch, caps)
        if self._frontier is None or self._frontier_version != sizes_seen:
            self._recheck_never_fits(caps)
        if self.preemption:
            self._preempt(batch, caps)
        self._answer_offers(batch)
        self.counters["slots_granted"] += len(self._granted_now)     # (counted here, not per grant)
        self._batch = None
        self._want_offers()
        out = self._flush()
        if self.quiet_passes and self._changes == changes and all(type(c) is DeclineOffers for c in out):
            self._quiet = _QuietPass.of(self, offers, out)
        return out

    def _settings(self) -> tuple:
        """What a caller may set on the core between passes, which a pass reads. O(groups)."""
        return (self.preemption, self.decline_seconds, self.reservation_seconds, self.gang_seconds,
                self.preemption_budget, self.preemption_retry_seconds, self.slot_prefix,
                tuple((g.name, g.maximum, g.policy) for g in self.groups.values()))

    def _next_timer(self) -> float:
        """The earliest time at which time alone could change what a pass
        does: a blacklist report stops counting, a unit's blacklisting of a
        host ends, a reservation or a gang's back-off ends, a waiting unit
        may search for victims or preempt again. O(waiting units + holders)."""
        now = self._now
        soonest = self._blacklist.next_expiry
        units = self._units
        for key in self._wanting:
            unit = units[key]
            if now < unit.search_after < soonest:
                soonest = unit.search_after
            if unit.holds and now < unit.preempted_until < soonest:
                soonest = unit.preempted_until
            for until in unit.blocked.values():
                if now < until < soonest:
                    soonest = until
        for key in self._holders:
            soonest = min(soonest, units[key].held_until)
        for key in self._backing_off:
            soonest = min(soonest, units[key].backoff_until)
        return soonest

    def on_slot_lost(self, slot_id: str, reason: str) -> list[Command]:
        """The slot's task ended without the job asking (failed, lost): the
        unit keeps its desire and waits for another slot."""
        self._changes += 1
        slot = self._slots.get(slot_id)
        if slot is None:
            return []
        self._out = [SlotRevoked(slot.job_id, slot.unit, slot_id, reason)]
        unit = self._units.get(f"{slot.job_id}/{slot.unit}")
        self._drop_slot(slot)
        if unit is not None:
            self._sync(unit)
        self._want_offers()
        return self._flush()

    def on_agent_lost(self, agent_id: str) -> list[Command]:
        out: list[Command] = []
        for slot in [s for s in self._slots.values() if s.agent_id == agent_id]:
            out += self.on_slot_lost(slot.id, "agent lost")
        machine = self._machines.pop(agent_id, None)
        if machine is not None:
            for key in list(machine.holds):
                unit = self._units.get(key)
                if unit is not None:
                    self._unhold(unit, machine)
                    self._sync(unit)
            self._frontier = self._capacity_sum = None
        return out

    def on_offer_rescinded(self, offer_id: str) -> None:
        """Nothing to do: offers are answered within the pass that got them."""
        self._changes += 1

    def needs_offers(self) -> bool:
        """Does a unit wait for slots? O(1)."""
        return bool(self._wanting)

    def waiting_reasons(self) -> dict[tuple[str, str], str]:
        """Why each unit that waits for slots waits, as of the last pass, by
        ``(job id, unit name)`` (the reasons of :meth:`status`, without its
        per-group figures). O(waiting units)."""
        units = self._units
        return {(unit.job_id, unit.spec.name): unit.reason for unit in map(units.__getitem__, self._wanting)}

    def waiting_for_quota(self) -> list[tuple[str, str]]:
        """The ``(job id, unit name)`` of the units that wait for slots for
        their group's quota, as of the last pass: those of
        :meth:`waiting_reasons` whose reason is ``WAIT_QUOTA``, in
        O(such units) (kept as reasons change), not O(waiting units)."""
        units, wanting = self._units, self._wanting
        return [(unit.job_id, unit.spec.name) for unit in map(units.__getitem__, self._at_quota & wanting)]

    def why_waiting(self, job_id: str, unit: str) -> str:
        """Why one unit waits for slots, as of the last pass ("" if it does
        not wait): what :meth:`status` says of it, in O(1) (status sums the
        waiting demand of every group first: O(waiting units))."""
        if job_id not in self.jobs:
            raise FuxiError(f"unknown job {job_id!r}")
        found = self._units.get(f"{job_id}/{unit}")
        if found is None:
            raise FuxiError(f"job {job_id!r} has no unit {unit!r}")
        return found.reason if found.waiting else ""

    def holds(self, slot_id: str) -> bool:
        """Is ``slot_id`` granted (not released, lost, revoked or finished with its job)? O(1)."""
        return slot_id in self._slots

    def held_slots(self) -> Collection[Slot]:
        """Every granted slot (a read-only view). O(1)."""
        return self._slots.values()

    # =============================================================== status
    def status(self, job_id: str | None = None) -> dict:
        """Per job and unit: desired, granted and reserved slots, where they
        run, and why a unit waits; per quota group its maximum, use, waiting
        demand and policy."""
        self._settle_use()
        self._refresh_groups(limited_only=False)
        jobs = [self.jobs[job_id]] if job_id is not None else list(self.jobs.values())
        if job_id is not None and job_id not in self.jobs:
            raise FuxiError(f"unknown job {job_id!r}")
        return {"jobs": [{
            "id": job.id, "name": job.spec.name, "quota_group": job.spec.quota_group, "priority": job.spec.priority,
            "policy": self.groups[job.spec.quota_group].policy,
            "units": [{"name": u.spec.name, "priority": u.priority, "slot": str(u.slot), "desired": u.desired,
                       "granted": u.granted, "waiting": u.waiting, "reserved": u.reserved,
                       "hosts": dict(sorted(u.per_host.items())),
                       "why_waiting": u.reason if u.waiting else ""} for u in job.units.values()],
        } for job in jobs], "quota_groups": [{
            "name": g.name, "maximum": None if g.maximum is None else str(g.maximum), "used": str(g.used),
            "waiting": str(g.waiting), "policy": g.policy} for g in self.groups.values()]}

    def _check(self) -> None:
        """Raise AssertionError unless the books agree: slots, units,
        machines, reservations, queues and the waiting set (for tests).
        O(slots + units + machines)."""
        for slot_id, slot in self._slots.items():
            machine = self._machines.get(slot.agent_id)
            assert machine is not None and machine.slots.get(slot_id) is slot, f"slot {slot_id} not on its machine"
            unit = self._units.get(f"{slot.job_id}/{slot.unit}")
            assert unit is not None and unit.slots.get(slot_id) is slot, f"slot {slot_id} not with its unit"
        assert not NOTHING_GRANTED, "the shared empty list of slots granted was appended to"
        between = self._batch is None
        own: set[int] = set()                    # the machines' dicts of slots and reservations: none shared
        for agent_id, machine in self._machines.items():
            assert machine.agent_id == agent_id, f"machine {machine.agent_id} filed under {agent_id}"
            for entries in (machine.slots, machine.holds):
                if entries is not NO_ENTRIES:
                    assert id(entries) not in own, f"machine {agent_id} shares a dict with another"
                    own.add(id(entries))
            if between:
                assert not machine.in_batch and machine.granted is _BETWEEN_BATCHES \
                    and machine.offer_ids is _BETWEEN_BATCHES, f"machine {agent_id} kept a batch's offers"
            for slot_id in machine.slots:
                assert slot_id in self._slots, f"machine {machine.agent_id} holds unknown slot {slot_id}"
            for key, count in machine.holds.items():
                assert count > 0 and self._units[key].holds.get(machine.agent_id) == count, f"hold {key}"
        for key, unit in self._units.items():
            assert sum(unit.per_host.values()) == unit.granted, f"{key}: per-host counts"
            for agent_id, count in unit.holds.items():
                assert self._machines[agent_id].holds.get(key) == count, f"{key}: hold on {agent_id}"
            assert (key in self._holders) == bool(unit.holds), f"{key}: holders"
            assert (key in self._wanting) == (unit.waiting > 0), f"{key}: wanting"
            assert unit.counted == unit.waiting, f"{key}: counted in its group"
            assert (key in self._at_quota) == (unit.reason == WAIT_QUOTA), f"{key}: at quota"
            queued = {scope for (group, scope), queue in self._queues.items() if key in queue}
            want = set() if (unit.new or not unit.missing or key in self._backing_off) else set(unit.scopes)
            assert queued == want, f"{key}: queued in {queued}, expected {want}"
            assert (key in self._queued_units) == unit.queued == bool(want), f"{key}: queued units"
        assert self._at_quota <= self._units.keys(), "a unit gone is still said to wait for quota"
        assert all(self._units.get(key) is unit for key, unit in self._queued_units.items()), \
            "a unit gone is still said to be queued"
        parked: dict[tuple[str, int], dict[str, Unit]] = {(unit.group, id(unit.slot)): {} for unit in self._queued_units.values()
                                                           if unit.reason == WAIT_QUOTA}
        for key, unit in self._queued_units.items():
            if unit.reason == WAIT_QUOTA:
                parked[(unit.group, id(unit.slot))][key] = unit
        assert self._parked == parked, "the queued units waiting for quota, by group and slot size"
        assert self._unparked == {key: unit for key, unit in self._queued_units.items() if unit.reason != WAIT_QUOTA}, \
            "the other queued units"
        recount = {name: {size: (slot, n) for size, (slot, n) in by_size.items()}
                   for name, by_size in self._recount_demand().items()}
        kept = {name: {size: (slot, n) for size, (slot, n) in by_size.items()}
                for name, by_size in self._demand.items() if by_size}
        assert kept == recount, f"groups' waiting demand kept {kept}, recounted {recount}"
        for name, group in self.groups.items():
            if name not in self._demand_stale:
                counted = recount.get(name)
                summed = Resources.sum(slot.scale(n) for slot, n in counted.values()) if counted else EMPTY
                assert group.waiting == summed, f"group {name}: waiting {group.waiting}, its units' {summed}"
        lowest: dict[int, int] = {}
        for slot in self._slots.values():
            lowest[slot.priority] = lowest.get(slot.priority, 0) + 1
        assert lowest == self._lowest, "slot priority counts"
        held_by: dict[str, dict[int, int]] = {}
        for slot in self._slots.values():
            counts = held_by.setdefault(slot.group, {})
            counts[slot.priority] = counts.get(slot.priority, 0) + 1
        assert held_by == {g: c for g, c in self._held_by.items() if c}, "slot priority counts by group"
        # each group's use is its slots' (active scheduling counts a unit's grants after them; an
        # unlimited group's use is summed when read): with what is pending settled, the books agree
        held: dict[str, list[Resources]] = {}
        for slot in self._slots.values():
            held.setdefault(slot.group, []).append(slot.resources)
        for name, group in self.groups.items():
            pending = self._use_delta.get(name, {})
            used = group.used + Resources.sum(size.scale(n) for size, n in pending.values() if n > 0)
            for size, n in pending.values():
                if n < 0:
                    used = used.subtract_clamped(size.scale(-n))
            assert used == Resources.sum(held.get(name, ())), f"group {name}: its use is not its slots'"
        if self._frontier is not None and self._machines:
            kinds = self._frontier_kinds
            sizes = {kinds.vector(m.capacity) for m in self._machines.values()}
            maximal = {size for size in sizes if not any(other != size and fits(other, size) for other in sizes)}
            assert set(self._frontier) == maximal and len(self._frontier) == len(maximal), \
                "the frontier of machine sizes is not the sizes no other contains"
        self._victims._check()

    # ============================================================ internals
    def _unit(self, job_id: str, unit_name: str) -> Unit:
        unit = self._units.get(f"{job_id}/{unit_name}")
        if unit is None or job_id not in self.jobs:
            raise FuxiError(f"unknown job or unit {job_id!r}/{unit_name!r}")
        return unit

    def _intern(self, slot: Resources) -> Resources:
        """The one object of ``slot``'s size among the units' slots. The
        scheduler's caches of slot vectors, fits and quota use are keyed by
        identity (no hashing on the hot path): units of the same size share
        their entries. Counted per unit, forgotten with the last one."""
        known = self._slot_sizes.get(slot)
        if known is None:
            self._slot_sizes[slot] = [slot, 1]
            return slot
        known[1] += 1
        return known[0]

    def _forget_size(self, slot: Resources) -> None:
        known = self._slot_sizes.get(slot)
        if known is not None:
            known[1] -= 1
            if known[1] <= 0:
                del self._slot_sizes[slot]

    def _flush(self) -> list[Command]:
        out, self._out = self._out, []
        return out

    def _want_offers(self) -> None:
        wanted = self.needs_offers()
        if wanted and self._suppressed:
            self._suppressed = False
            self._out.append(ReviveOffers())
        elif not wanted and not self._suppressed:
            self._suppressed = True
            self._out.append(SuppressOffers())

    def _expire(self) -> None:
        """Forget old blacklist entries; release reservations past their time."""
        now = self._now
        if now >= self._blacklist.next_expiry:
            self._changes += 1
            self._blacklist.expire(now)
        for key in [k for k in self._backing_off if self._units[k].backoff_until <= now]:
            self._changes += 1
            self._backing_off.discard(key)
            self._sync(self._units[key])         # it may reserve again
        for key in list(self._holders):
            unit = self._units[key]
            if unit.held_until <= now:
                if unit.gang:
                    self._changes += 1
                    unit.backoff_until = now + self.gang_seconds
                    self._backing_off.add(key)
                    self.counters["gang_reservations_expired"] += 1
                    log.info("%s: reserved %d of %d slots for %gs; released, backing off", key, unit.reserved,
                             unit.waiting, self.gang_seconds)
                self._release_holds(unit)
                self._sync(unit)
            elif unit.reserved > unit.waiting:       # it wants fewer now
                self._trim_holds(unit, unit.waiting)

    def _take_offers(self, offers: list[Offer]) -> _Batch:
        """The batch's machines (new ones remembered), their offers summed
        and their free room as vectors. O(offers x kinds): plain loops with
        their lookups in locals, since a first pass over 100,000 machines
        runs them 100,000 times."""
        if not self._machines:
            first = self._take_first_offers(offers)
            if first is not None:
                return first
        offered: list[Mapping[str, int]] = []    # what each machine offers (its kinds make the batch's)
        merged: dict[str, dict[str, int]] = {}   # agents of several offers: their sums, dicts of our own
        batch: dict[str, Machine] = {}
        known = self._machines
        changes = 0
        get_batch, get_known = batch.get, known.get
        for offer in offers:
            agent_id = offer.agent_id
            machine = get_batch(agent_id)
            if machine is None:
                machine = get_known(agent_id)
                attributes = offer.attributes           # shared, not copied: offers are read-only
                room = attributes.get(ROOM_ATTRIBUTE, "")
                millis = offer.resources.millis()       # read-only, not copied: a first pass takes 100,000
                offered.append(millis)
                if machine is None:                     # first seen: made with this offer's fields
                    changes += 1
                    known[agent_id] = batch[agent_id] = Machine(agent_id, offer.hostname, room, attributes, millis,
                                                                [offer.id])
                    continue
                if machine.hostname != offer.hostname or machine.room != room:
                    old = machine
                    changes += 1
                    machine = Machine(agent_id, offer.hostname, room)
                    machine.slots, machine.holds, machine.capacity = old.slots, old.holds, old.capacity
                    known[agent_id] = machine
                else:
                    machine.offer_ids, machine.granted = [], NOTHING_GRANTED
                machine.in_batch = True
                machine.attributes = attributes
                batch[agent_id] = machine
                machine.offered = millis
            else:
                total = merged.get(agent_id)
                if total is None:                               # its first offer's own mapping: copy it
                    total = merged[agent_id] = dict(machine.offered)
                    machine.offered = total
                    offered.append(total)
                for kind, amount in offer.resources.millis().items():
                    total[kind] = total.get(kind, 0) + amount
            machine.offer_ids.append(offer.id)  # type: ignore[union-attr]  # the general way's are lists
        dims = Dims(set().union(*offered))
        machines = sorted(batch.values(), key=_agent_key)
        vectors: list[Vector] = []               # their open room, in order: the cluster scope's
        names, zeros = dims.names, (0,) * len(dims)      # dims.vector, inlined
        # a machine seen for the first time joins the frontier of sizes here, by its free
        # vector (which is its capacity), if the frontier is over the same kinds
        frontier = self._frontier
        if frontier is not None and not frontier:
            self._frontier_kinds = dims
        elif frontier is not None and self._frontier_kinds.names != dims.names:
            frontier = None
        first_seen: list[Vector] = []
        add = vectors.append
        for position, machine in enumerate(machines):
            machine.at = position
            millis = machine.offered
            free = machine.free = tuple(map(millis.get, names, zeros))
            if not machine.capacity and not machine.slots:     # first seen: what it offers, at least
                changes += 1
                machine.capacity = millis
                if frontier is not None:
                    first_seen.append(free)
                else:
                    self._frontier = None
            else:
                if first_seen:                                 # (in order: before it may reset the frontier)
                    self._widen_frontier(frontier, first_seen)   # type: ignore[arg-type]  # (not None)
                    first_seen = []
                self._learn_capacity(machine, millis)
                # (it may drop the frontier; one this batch does not widen, over other kinds, stays aside)
                frontier = self._frontier if frontier is not None else None
            if machine.holds:
                self._fit_holds(machine, dims)
                add(self._open(machine, dims))
                machine.open = vectors[-1]
            else:
                machine.open = free
                add(free)
        if first_seen:
            self._widen_frontier(frontier, first_seen)   # type: ignore[arg-type]  # (not None)
        if changes:
            self._changes += changes
            self._capacity_sum = None
        return _Batch(machines, vectors, dims, self.machine_index)

    def _take_first_offers(self, offers: list[Offer]) -> _Batch | None:
        """:meth:`_take_offers` for the core's first batch (no machine seen
        yet: at start or after a failover) of one offer per agent in agent
        order, as the master sends them; None, having remembered nothing,
        for any other. Each machine is made with what its offer gives it
        (its free and open room, its place, its capacity) in one loop, with
        no second one over the machines and no sort. Same machines, vectors
        and frontier as the general way. O(offers x kinds), column by
        column: each a loop of the interpreter's own (a comprehension,
        ``map``, ``dict(zip())``), not one loop of Python statements."""
        agent_ids = [offer.agent_id for offer in offers]
        if not all(map(lt, chain(("",), agent_ids), agent_ids)):
            return None                          # out of order, or an agent of several offers (or one unnamed)
        kinds = [offer.resources.millis() for offer in offers]
        dims = Dims(set().union(*kinds))
        vectors: list[Vector] = list(map(dims.vector_of, kinds))
        hostnames = [offer.hostname for offer in offers]
        attributes = [offer.attributes for offer in offers]
        # each made with its offer's fields, its free and open room, its place and its capacity; its one
        # offer id as a tuple: the launch takes it as it is, and no list is made per machine
        machines: list[Machine] = list(map(
            Machine, agent_ids, hostnames, [a.get(ROOM_ATTRIBUTE, "") for a in attributes], attributes, kinds,
            [(offer.id,) for offer in offers], vectors, range(len(offers)), kinds))
        self._machines.update(zip(agent_ids, machines))
        hosts = dict(zip(hostnames, machines))   # the batch's hosts, made here (the last of a name, as later)
        frontier = self._frontier                # (the machines joined it as the general way joins them)
        if frontier is not None and not frontier:
            self._frontier_kinds = dims
        elif frontier is not None and self._frontier_kinds.names != dims.names:
            frontier = None
        if frontier is not None:
            self._widen_frontier(frontier, vectors)
        elif machines:
            self._frontier = None
        self._changes += 2 * len(machines)       # (made, and its capacity learnt: as the general way counts)
        self._capacity_sum = None
        return _Batch(machines, vectors, dims, self.machine_index, hosts)

    def _widen_frontier(self, frontier: list[Vector], sizes: Iterable[Vector]) -> None:
        """Machines of ``sizes`` (over the frontier's kinds) were seen, in
        this order: keep the frontier the sizes no other one contains.
        O(frontier x kinds) a size; most are contained by the size that
        contained the one before (machines come in a few shapes), asked
        first. (The frontier's order does not matter: it is a set.)"""
        last: Vector | None = None
        holds = fits_of(len(self._frontier_kinds))     # (every size, and the frontier, over its kinds)
        for size in sizes:
            if last is not None and holds(last, size):
                continue
            for bigger in frontier:
                if holds(bigger, size):
                    last = bigger
                    break
            else:
                frontier[:] = [smaller for smaller in frontier if not holds(size, smaller)]
                frontier.insert(0, size)
                last = size
                self._frontier_version += 1
                self._too_big.clear()                    # a slot that fitted nowhere may fit this one

    def _recheck_never_fits(self, caps: Mapping[str, Resources | None]) -> None:
        """Machines bigger than any before were seen: a unit said to fit no
        machine that passive and active scheduling did not reach in this
        pass gets its reason again. O(waiting units), in such passes only."""
        for key in self._wanting:
            unit = self._units[key]
            if unit.reason == WAIT_NEVER_FITS and not self._never_fits(unit):
                self._set_reason(unit, self._why_waiting(unit, caps))

    def _refresh_groups(self, limited_only: bool = True) -> None:
        """Each group's waiting demand, summed from what :meth:`_sync` keeps
        by slot size as units' desire and grants change: only the limited
        groups' unless asked (only they lend and borrow quota), and only
        those whose demand changed since. O(changed groups x their slot
        sizes); it was a recount over the waiting units every pass."""
        stale = self._demand_stale
        if not stale:
            return
        groups = self.groups
        demand = self._demand
        for name in list(stale):
            group = groups[name]
            if limited_only and group.maximum is None:
                continue
            stale.discard(name)
            sizes = demand.get(name)
            # by the slot's identity (a unit's slot is the one object of its size: no hashing of Resources;
            # two objects of one size are summed apart, to the same total)
            group.waiting = Resources.sum(slot.scale(n) for slot, n in sizes.values()) if sizes else EMPTY

    def _recount_demand(self) -> dict[str, dict[int, list[Any]]]:
        """Each group's waiting demand recounted from the waiting units (what
        :attr:`_demand` keeps; for :meth:`_check`). O(waiting units)."""
        waiting: dict[str, dict[int, list[Any]]] = {}
        for key in self._wanting:
            unit = self._units[key]
            left = unit.desired - len(unit.slots)
            if left > 0:
                sizes = waiting.setdefault(unit.group, {})
                known = sizes.get(id(unit.slot))
                if known is None:
                    sizes[id(unit.slot)] = [unit.slot, left]
                else:
                    known[1] += left
        return waiting

    # ---------------------------------------------------------- machines
    def _learn_capacity(self, machine: Machine, offered: Mapping[str, int]) -> None:
        """What the machine has at least: the most ever offered plus held by
        our slots there, kind by kind. O(kinds + its slots). (A framework
        sees no agent's total: other frameworks' tasks hide part of it.)"""
        seen = offered
        if machine.slots:
            held = dict(offered)
            for slot in machine.slots.values():
                for kind, amount in slot.resources.millis().items():
                    held[kind] = held.get(kind, 0) + amount
            seen = held
        old = machine.capacity
        if old:
            if all(amount <= old.get(kind, 0) for kind, amount in seen.items()):
                return
            most = dict(seen)
            for kind, amount in old.items():
                if amount > most.get(kind, 0):
                    most[kind] = amount
            seen = most
        machine.capacity = seen if seen is not offered else dict(offered)
        self._frontier = self._capacity_sum = None
        self._changes += 1

    @property
    def _capacity_total(self) -> Resources:
        """The machines seen, summed: an unlimited group's hunger is measured
        against it. O(machines) when one changed, then cached."""
        if self._capacity_sum is None:
            total: dict[str, int] = {}
            for machine in self._machines.values():
                for kind, amount in machine.capacity.items():
                    total[kind] = total.get(kind, 0) + amount
            self._capacity_sum = Resources.from_millis({k: v for k, v in total.items() if v > 0})
        return self._capacity_sum

    def _never_fits(self, unit: Unit) -> bool:
        """Is the unit's slot bigger than every machine seen? O(distinct
        capacities that no other contains); False before any machine is seen."""
        if self._frontier is None:
            kinds = self._frontier_kinds = Dims(k for m in self._machines.values() for k in m.capacity)
            sizes = sorted({kinds.vector(m.capacity) for m in self._machines.values()}, key=sum, reverse=True)
            frontier: list[Vector] = []
            for size in sizes:                    # a bigger one comes first: one pass keeps the maximal ones
                if not any(fits(bigger, size) for bigger in frontier):
                    frontier.append(size)
            self._frontier = frontier
            self._frontier_version += 1
            self._too_big.clear()
        slot = unit.slot
        known = self._too_big.get(id(slot))
        if known is not None and known[0] is slot:
            return known[1]
        need = self._frontier_kinds.need(slot.millis())
        answer = bool(self._frontier) and (need is None or not any(fits(capacity, need)
                                                                   for capacity in self._frontier))
        self._too_big[id(slot)] = (slot, answer)    # keeps ``slot`` alive, so its id stays its own
        return answer

    def _open(self, machine: Machine, dims: Dims) -> Vector:
        """Free minus the room reserved on it. O(holders x kinds)."""
        room = machine.free
        for key, count in machine.holds.items():
            need = dims.need(self._units[key].slot.millis())
            if need is not None:
                room = tuple(free - count * amount for free, amount in zip(room, need))
        return room

    def _fit_holds(self, machine: Machine, dims: Dims) -> None:
        """The machine is offered again: keep the reservations its free room
        holds, in priority order; drop the rest (someone else took it)."""
        room = machine.free
        holders = sorted((self._units[key] for key in machine.holds), key=lambda u: (u.priority, u.submitted))
        for unit in holders:
            need = dims.need(unit.slot.millis())
            keep = 0 if need is None else min(machine.holds[unit.key], _count(room, need))
            if need is not None and keep:
                room = tuple(free - keep * amount for free, amount in zip(room, need))
            if keep < machine.holds[unit.key]:
                self._unhold(unit, machine, machine.holds[unit.key] - keep)
                self._sync(unit)

    # ------------------------------------------------------------ limits
    def _allowed(self, unit: Unit, machine: Machine) -> bool:
        """May one more slot of the unit go to ``machine``: not blacklisted
        (globally, by the unit or its job for now), not avoided, below
        ``max_per_machine``? Locality is the caller's (scopes, queues)."""
        host = machine.hostname
        if host in self._blacklist or host in unit.spec.blacklist or host in unit.avoid:
            return False
        if unit.blocked and self._blacklisted(unit, host):
            return False
        if unit.spec.node_labels and not _has_labels(machine, unit.spec.node_labels):
            return False
        limit = unit.spec.max_per_machine
        return limit is None or unit.per_host.get(host, 0) + unit.holds.get(machine.agent_id, 0) < limit

    def _unrestricted(self, unit: Unit) -> bool:
        """Is :meth:`_allowed` true for the unit on every machine (no
        blacklist, avoided host, node labels or ``max_per_machine``)?"""
        spec = unit.spec
        return not (len(self._blacklist) or spec.blacklist or unit.avoid or unit.blocked or spec.node_labels
                    or spec.max_per_machine is not None)

    def _in_scope(self, unit: Unit, machine: Machine) -> bool:
        """Does the unit's locality allow ``machine`` (any machine with a cluster preference or none)?"""
        if CLUSTER_SCOPE in unit.scopes:
            return True
        return f"host:{machine.hostname}" in unit.scopes or f"room:{machine.room}" in unit.scopes

    def _quota_slots(self, unit: Unit, caps: Mapping[str, Resources | None]) -> int:
        """How many more slots the unit's quota group allows."""
        cap = caps.get(unit.group)
        if cap is None:
            return unit.waiting
        # how_many(self._group_room(...), unit.slot) without the room as Resources: the use of a
        # group placing slots changes with each, and the room was made again for every slot
        return how_many_within(cap, self.groups[unit.group].used, unit.slot)

    def _group_room(self, name: str, cap: Resources) -> Resources:
        """The room between group ``name``'s use and its ``cap``. Cached while
        neither changes: asked per unit placed or queued, per machine offered."""
        used = self.groups[name].used
        known = self._quota_room.get(name)
        if known is None or known[0] is not cap or known[1] is not used:   # both are replaced when they change
            known = self._quota_room[name] = (cap, used, cap.subtract_clamped(used))
        return known[2]

    # ------------------------------------------------------------- grants
    def _grant(self, unit: Unit, machine: Machine, batch: _Batch, need: Vector) -> Slot:
        """One slot of ``unit`` on ``machine`` (of this batch), from its own
        reservation there if it has one. O(log M) (the machine's scopes)."""
        slot = self._grant_uncounted(unit, machine, batch, need)
        self._count_grants(unit, 1)
        return slot

    def _count_grants(self, unit: Unit, count: int) -> None:
        """``count`` slots of ``unit`` granted: the books that only count
        them (the change count, the slots held per priority, the group's
        use). Active scheduling counts a unit's plain grants once, after
        them (:meth:`_place`). O(1)."""
        self._changes += count
        lowest = self._lowest
        lowest[unit.priority] = lowest.get(unit.priority, 0) + count
        self._count_held(unit.group, unit.priority, count)
        self._use(unit.group, unit.slot, count)

    def _count_held(self, group: str, priority: int, count: int) -> None:
        """``count`` more (or fewer) slots of ``group`` held at ``priority``. O(1)."""
        counts = self._held_by.get(group)
        if counts is None:
            counts = self._held_by[group] = {}
        left = counts.get(priority, 0) + count
        if left:
            counts[priority] = left
        else:
            del counts[priority]

    def _grant_uncounted(self, unit: Unit, machine: Machine, batch: _Batch, need: Vector) -> Slot:
        """:meth:`_grant` but for :meth:`_count_grants`, which the caller owes."""
        slot = _new_slot(f"{unit.job_id}.{unit.spec.name}.{self.slot_prefix}{next(self._slot_seq)}", unit.job_id,
                         unit.spec.name, machine.agent_id, machine.hostname, unit.slot, unit.priority, unit.group,
                         self._now, machine.room)
        free = machine.free
        minus = batch.minus
        left = machine.free = minus(free, need)
        if unit.holds.get(machine.agent_id):
            self._unhold(unit, machine, 1)
            machine.open = self._open(machine, batch.dims)
            batch.refresh(machine)
        else:                                # (no reservation on it: its open room is its free room)
            machine.open = left if machine.open is free else minus(machine.open, need)
            batch.shrunk(machine)
        granted = machine.granted
        if granted:
            granted.append(slot)
        else:                                # its first slot in this batch: its list of its own
            machine.granted = [slot]
        slot_id = slot.id
        slots = machine.slots
        if slots is NO_ENTRIES:                  # its first slot: its dict of its own
            slots = machine.slots = {}
        slots[slot_id] = slot
        unit.slots[slot_id] = slot
        per_host = unit.per_host
        per_host[machine.hostname] = per_host.get(machine.hostname, 0) + 1
        self._slots[slot_id] = slot
        self._granted_now.add(slot_id)
        self._out.append(_new_granted(slot))
        return slot

    def _drop_slot(self, slot: Slot) -> None:
        self._changes += 1
        del self._slots[slot.id]
        self._victims.dropped(slot)
        left = self._lowest[slot.priority] - 1
        if left:
            self._lowest[slot.priority] = left
        else:
            del self._lowest[slot.priority]
        self._count_held(slot.group, slot.priority, -1)
        machine = self._machines.get(slot.agent_id)
        if machine is not None:
            machine.slots.pop(slot.id, None)
        unit = self._units.get(f"{slot.job_id}/{slot.unit}")
        if unit is not None:
            unit.slots.pop(slot.id, None)
            left = unit.per_host.get(slot.hostname, 0) - 1
            if left > 0:
                unit.per_host[slot.hostname] = left
            else:
                unit.per_host.pop(slot.hostname, None)
        if slot.group in self.groups:
            self._use(slot.group, slot.resources, -1)

    def _use(self, name: str, slot: Resources, count: int) -> None:
        """``count`` more (or fewer) slots of ``slot`` used by group ``name``.
        A limited group's use is counted at once (its quota is checked slot
        by slot); an unlimited one's is summed when read (:meth:`_settle_use`),
        which keeps a grant cheap."""
        group = self.groups[name]
        if group.maximum is not None:
            if count == 1:
                group.used = group.used + slot
            elif count > 1:                      # (a unit's grants counted at once: the same sum)
                group.used = Resources.sum(itertools.chain((group.used,), itertools.repeat(slot, count)))
            else:
                for _ in range(-count):
                    group.used = group.used.subtract_clamped(slot)
            return
        delta = self._use_delta.get(name)
        if delta is None:
            delta = self._use_delta[name] = {}
        known = delta.get(id(slot))                  # by identity: a unit's slot is one object
        if known is None:
            delta[id(slot)] = [slot, count]
        else:
            known[1] += count

    def _settle_use(self) -> None:
        """Bring every group's ``used`` up to date. O(distinct slot sizes granted since)."""
        for name, delta in self._use_delta.items():
            group = self.groups[name]
            used = group.used + Resources.sum(slot.scale(n) for slot, n in delta.values() if n > 0)
            for slot, n in delta.values():
                if n < 0:
                    used = used.subtract_clamped(slot.scale(-n))
            group.used = used
        self._use_delta.clear()

    # ------------------------------------------------------- reservations
    def _hold(self, unit: Unit, machine: Machine, count: int, until: float) -> None:
        """Reserve room for ``count`` more slots of ``unit`` on ``machine``,
        the unit's reservations ending at ``until`` at the latest."""
        self._changes += 1
        self._holds_changes += 1
        if not unit.holds:
            unit.held_until = until
            self._holders.add(unit.key)
        else:
            unit.held_until = min(unit.held_until, until) if unit.gang else max(unit.held_until, until)
        unit.holds[machine.agent_id] = unit.holds.get(machine.agent_id, 0) + count
        holds = machine.holds
        if holds is NO_ENTRIES:                  # its first reservation: its dict of its own
            holds = machine.holds = {}
        holds[unit.key] = holds.get(unit.key, 0) + count
        self._held_now.add((unit.key, machine.agent_id))

    def _unhold(self, unit: Unit, machine: Machine, count: int | None = None) -> None:
        """Release ``count`` (None: all) of the unit's reserved slots on ``machine``."""
        self._changes += 1
        self._holds_changes += 1
        held = unit.holds.get(machine.agent_id, 0)
        left = 0 if count is None else held - count
        if left > 0:
            unit.holds[machine.agent_id] = left
            machine.holds[unit.key] = left
        else:
            unit.holds.pop(machine.agent_id, None)
            machine.holds.pop(unit.key, None)
            if not unit.holds:
                self._holders.discard(unit.key)
                unit.held_until = math.inf

    def _release_holds(self, unit: Unit) -> None:
        batch = self._batch
        for agent_id in list(unit.holds):
            machine = self._machines[agent_id]
            self._unhold(unit, machine)
            if batch is not None and machine.in_batch:
                machine.open = self._open(machine, batch.dims)
                batch.refresh(machine)

    def _trim_holds(self, unit: Unit, keep: int) -> None:
        """Keep at most ``keep`` reserved slots (dropping from the last machines)."""
        extra = unit.reserved - keep
        for agent_id in sorted(unit.holds, reverse=True):
            if extra <= 0:
                break
            drop = min(extra, unit.holds[agent_id])
            self._unhold(unit, self._machines[agent_id], drop)
            extra -= drop
        self._sync(unit)

    # -------------------------------------------------------------- queues
    def _sync(self, unit: Unit) -> None:
        """Bring the waiting set and the queues in line with the unit: it is
        queued (in each of its scopes) while it misses slots beyond its
        reservations and had its active scheduling. O(log N) per queue."""
        key = unit.key
        live = key in self._units
        left = unit.desired - len(unit.slots)          # unit.waiting, unit.missing: inlined (a call per unit)
        wanting = self._wanting
        if left > 0 and live:
            if key not in wanting:
                wanting.add(key)
                if key in self._at_quota:
                    self._quota_moved(unit, True)
            counted = left
        else:
            if key in wanting:
                wanting.discard(key)
                if key in self._at_quota:
                    self._quota_moved(unit, False)
            counted = 0
        if counted != unit.counted:                   # its group's waiting demand follows
            self._count_demand(unit, counted - unit.counted)
            unit.counted = counted
        if unit.holds:
            left -= sum(unit.holds.values())
        queued = not unit.new and left > 0 and live and key not in self._backing_off
        was = unit.queued
        if not queued and not was:
            return
        if queued and was:
            if self.groups[unit.group].policy == "FAIR":     # FIFO's order does not depend on it
                for scope in unit.scopes:
                    self._queues[(unit.group, scope)].update_granted(unit.key, unit.granted)
            return
        unit.queued = queued
        self._queued[unit.group] = self._queued.get(unit.group, 0) + (1 if queued else -1)
        if queued:
            self._queued_units[key] = unit
        else:
            self._queued_units.pop(key, None)
        self._park(unit)
        if queued:
            self._queue_joins += 1
        for scope in unit.scopes:
            queue = self._queues.get((unit.group, scope))
            if not queued:
                queue.remove(unit.key)  # type: ignore[union-attr]  # queued before: its queues exist
                continue
            if queue is None:
                queue = self._queues[(unit.group, scope)] = WaitingQueue(self.groups[unit.group].policy)
            queue.add(unit.key, unit.priority, unit.slot, unit.submitted, unit.granted)

    def _count_demand(self, unit: Unit, count: int) -> None:
        """``count`` more (or fewer) slots of ``unit``'s size waiting in its group. O(1)."""
        name = unit.group
        sizes = self._demand.get(name)
        if sizes is None:
            sizes = self._demand[name] = {}
        slot = unit.slot
        known = sizes.get(id(slot))
        if known is None:
            sizes[id(slot)] = [slot, count]
        elif known[1] + count:
            known[1] += count
        else:
            del sizes[id(slot)]
        self._demand_stale.add(name)

    def _after_placing(self, unit: Unit, caps: Mapping[str, Resources | None]) -> None:
        self._sync(unit)
        reason = self._why_waiting(unit, caps) if unit.waiting else ""
        if reason != unit.reason:
            self._set_reason(unit, reason)

    def _set_reason(self, unit: Unit, reason: str) -> None:
        """The unit waits for ``reason`` now (a change). O(1)."""
        unit.reason = reason
        self._changes += 1
        key = unit.key
        if reason == WAIT_QUOTA:
            self._at_quota.add(key)
            if key in self._wanting:
                self._quota_moved(unit, True)
        elif key in self._at_quota:
            self._at_quota.discard(key)
            if key in self._wanting:
                self._quota_moved(unit, False)
        if unit.queued:
            self._park(unit)

    def _quota_moved(self, unit: Unit, joined: bool) -> None:
        """The unit joined (left) :meth:`waiting_for_quota`'s units."""
        if self.quota_log is not None:
            self.quota_log.append((unit.job_id, joined))

    def _park(self, unit: Unit) -> None:
        """File a unit whose queued flag or reason changed: a queued unit
        waiting for quota among ``_parked`` (by group and slot size: the
        preemption planner asks once per size whether any of them may
        search, :meth:`PreemptionPlanner._set_aside`), another queued one
        in ``_unparked``. O(1)."""
        key = unit.key
        size = (unit.group, id(unit.slot))     # (the slot is interned: one object per size, kept by the unit)
        if unit.queued and unit.reason == WAIT_QUOTA:
            self._unparked.pop(key, None)
            members = self._parked.get(size)
            if members is None:
                members = self._parked[size] = {}
            members[key] = unit
            return
        members = self._parked.get(size)
        if members is not None and members.pop(key, None) is not None and not members:
            del self._parked[size]
        if unit.queued:
            self._unparked[key] = unit
        else:
            self._unparked.pop(key, None)

    def _why_waiting(self, unit: Unit, caps: Mapping[str, Resources | None]) -> str:
        if self._never_fits(unit):
            return WAIT_NEVER_FITS
        quota = self._quota_slots(unit, caps)
        if quota == 0 or (unit.gang and quota < unit.waiting):
            return WAIT_QUOTA
        if unit.gang:
            return WAIT_ALL_OR_NOTHING
        if self._all_blacklisted(unit):
            return WAIT_BLACKLIST
        labels = unit.spec.node_labels
        if labels and not any(_has_labels(machine, labels) for machine in self._machines.values()):
            return f"{WAIT_NO_LABELS} {unit.spec.labels_text()}"
        return WAIT_NO_FIT

    def _blacklisted(self, unit: Unit, host: str) -> bool:
        """Is ``host`` on the global blacklist, the unit's, or its job's for now?"""
        return host in self._blacklist or host in unit.spec.blacklist \
            or unit.blocked.get(host, -math.inf) > self._now

    def _all_blacklisted(self, unit: Unit) -> bool:
        """Is every machine seen blacklisted for the unit? O(1) unless the
        blacklists are as long as the machine list."""
        if len(self._blacklist) + len(unit.spec.blacklist) + len(unit.blocked) < len(self._machines):
            return False
        return bool(self._machines) and all(self._blacklisted(unit, m.hostname) for m in self._machines.values())

    # ------------------------------------------------- passive (resource free)
    def _passive(self, batch: _Batch, caps: Mapping[str, Resources | None]) -> None:
        """OnResourceFree over the batch: the reservations first, then the
        hungriest group's best waiting unit, machine by machine."""
        order: list[QuotaGroup] | None = None
        reserved = [m for m in batch.machines if m.holds] if self._holders else []   # (none without holders)
        for machine in reserved:
            self._serve_holds(machine, batch, caps)
        if not any(self._queued.values()):
            return
        # each group's floor: what every unit in its queues asks for at least, over the batch's kinds;
        # a machine whose open room does not hold it gets no unit of the group (most machines of a
        # busy cluster offer crumbs), and is passed over without the queues' search. Made again when
        # a unit joins a queue (a floor only rises as units leave: an old one still holds)
        floors: dict[str, list[tuple[int, int]] | None] = {}
        floors_at = -1
        for machine in reserved + [m for m in batch.machines if not m.holds]:
            while any(machine.open):
                if order is None:
                    self._settle_use()
                    order = sorted((g for g in self.groups.values() if self._queued.get(g.name)),
                                   key=lambda g: (hunger(g, self._capacity_total), g.name))
                if floors_at != self._queue_joins:
                    floors_at = self._queue_joins
                    floors = self._floors(batch.dims)
                room = machine.open
                for group in order:
                    floor = floors.get(group.name, _NO_FLOOR)
                    if floor is None or not all(room[i] >= amount for i, amount in floor):
                        continue             # no unit of the group fits here (None: none in this batch)
                    unit = self._pick(group, machine, batch, caps)
                    if unit is not None and self._serve(unit, machine, batch, caps):
                        order = None         # hunger changed
                        break
                else:
                    break

    def _floors(self, dims: Dims) -> dict[str, list[tuple[int, int]] | None]:
        """Per group with queued units: what each of them asks for at least,
        as ``(place in the batch's vectors, amount)`` of the kinds it asks
        for; None if one of those kinds is not in the batch (no unit of the
        group fits any machine of it). O(queues x kinds)."""
        least: dict[str, dict[str, int]] = {}
        for (name, _), queue in self._queues.items():
            needs = queue.least()
            if needs is None:
                continue
            known = least.get(name)
            if known is None:
                least[name] = needs
            else:
                least[name] = {kind: min(amount, needs[kind]) for kind, amount in known.items() if kind in needs}
        places = {kind: i for i, kind in enumerate(dims.names)}
        out: dict[str, list[tuple[int, int]] | None] = {}
        for name, needs in least.items():
            if any(kind not in places for kind in needs):
                out[name] = None
            else:
                out[name] = [(places[kind], amount) for kind, amount in needs.items()]
        return out

    def _serve_holds(self, machine: Machine, batch: _Batch, caps: Mapping[str, Resources | None]) -> None:
        """A machine with reservations is back: plain units take their
        reserved slots now; gangs keep theirs until all their room is here.

        A plain unit's reservation is room a preemption freed for it, within
        its quota then: it is granted even if the group's cap shrank since.
        The cap shrinks when the victims' group, waiting again, shares what
        others lend; refusing the room would hand it back to the victims and
        the unit would preempt them again, pass after pass (issue 19)."""
        for key in sorted(machine.holds, key=lambda k: (self._units[k].priority, self._units[k].submitted)):
            unit = self._units[key]
            if unit.gang:
                continue
            need = batch.need(unit.slot)
            while need is not None and unit.holds.get(machine.agent_id) and unit.waiting \
                    and self._allowed_with_hold(unit, machine) and fits(machine.free, need):
                self._grant(unit, machine, batch, need)
            if unit.holds.get(machine.agent_id):
                self._unhold(unit, machine)
                machine.open = self._open(machine, batch.dims)
                batch.refresh(machine)
            self._after_placing(unit, caps)

    def _allowed_with_hold(self, unit: Unit, machine: Machine) -> bool:
        """:meth:`_allowed` for a slot taken from the unit's own reservation there."""
        held = unit.holds.pop(machine.agent_id, 0)
        try:
            return self._allowed(unit, machine)
        finally:
            if held:
                unit.holds[machine.agent_id] = held

    def _pick(self, group: QuotaGroup, machine: Machine, batch: _Batch,
              caps: Mapping[str, Resources | None]) -> Unit | None:
        """The group's highest-priority waiting unit that fits ``machine``'s
        open room and the group's room and may run there: the best head of
        the group's cluster queue and the queues of the machine and its room."""
        free = batch.resources(machine.open)
        cap = caps.get(group.name)
        if cap is not None:
            free = free.minimum(self._group_room(group.name, cap))
        fair = group.policy == "FAIR"
        best: tuple | None = None
        for scope in (CLUSTER_SCOPE, f"host:{machine.hostname}", f"room:{machine.room}"):
            queue = self._queues.get((group.name, scope))
            if not queue:
                continue
            for key in queue.iter_fitting(free):
                unit = self._units[key]
                if not self._allowed(unit, machine):
                    continue
                rank = (unit.priority, unit.granted, unit.submitted) if fair else (unit.priority, unit.submitted)
                if best is None or rank < best[0]:
                    best = (rank, unit)
                break
        return None if best is None else best[1]

    def _serve(self, unit: Unit, machine: Machine, batch: _Batch, caps: Mapping[str, Resources | None]) -> int:
        """Give the picked unit slots on ``machine``: a FIFO group's unit as
        many as fit (Fuxi serves a picked unit greedily), a FAIR group's one
        (the next pick may be another unit of equal priority); a gang
        reserves as many as fit instead. How many."""
        need = batch.need(unit.slot)
        if need is None:
            return 0
        one = self.groups[unit.group].policy == "FAIR" and not unit.gang
        served = 0
        while unit.missing and self._quota_slots(unit, caps) > unit.reserved and self._allowed(unit, machine) \
                and fits(machine.open, need):
            if unit.gang:
                self._hold_here(unit, machine, batch, need)
            else:
                self._grant(unit, machine, batch, need)
            served += 1
            if one:
                break
        self._after_placing(unit, caps)
        return served

    def _hold_here(self, unit: Unit, machine: Machine, batch: _Batch, need: Vector) -> None:
        """Reserve one slot of a gang on a machine of this batch."""
        self._hold(unit, machine, 1, self._now + self.gang_seconds)
        machine.open = batch.minus(machine.open, need)
        batch.refresh(machine)

    # ------------------------------------------------------ active (arrival)
    def _active(self, batch: _Batch, caps: Mapping[str, Resources | None]) -> None:
        """Active scheduling of the units that arrived, by priority then
        arrival; the units of one FAIR group at one priority take turns,
        one slot each."""
        if not self._new:
            return
        self._changes += 1
        arrived = sorted(self._new.values(), key=_by_arrival)
        self._new.clear()
        fair = {name for name, group in self.groups.items() if group.policy == "FAIR"}
        cohorts: dict[tuple[int, str], list[Unit]] = {}
        for unit in arrived:
            if unit.group in fair:
                cohorts.setdefault((unit.priority, unit.group), []).append(unit)
        for unit in arrived:
            if not unit.new:
                continue                         # placed with its FAIR cohort
            cohort: Sequence[Unit] = cohorts[(unit.priority, unit.group)] if unit.group in fair else (unit,)
            for member in cohort:
                member.new = False
            placers = []
            for member in cohort:
                need = batch.need(member.slot)
                if need is None or not batch.cluster.may_fit(need):
                    self._after_placing(member, caps)      # nothing it could take here: no search
                else:
                    placers.append(self._place(member, batch, caps, need, alone=len(cohort) == 1))
            if len(placers) == 1:               # alone: no turns to take
                deque(placers[0], maxlen=0)
                continue
            while placers:                       # round robin, one slot per turn
                placers = [p for p in placers if next(p, None) is not None]

    def _place(self, unit: Unit, batch: _Batch, caps: Mapping[str, Resources | None],
               need: Vector | None = None, alone: bool = False) -> Iterator[bool]:
        """Active scheduling of one unit, one slot (or a gang's reservation)
        per step; ``need``: its slot over the batch's kinds if the caller
        has it; ``alone``: no other unit takes turns with it (no grant of
        its group comes between its steps). O(slots x log M) (:meth:`_spread`)."""
        if not unit.holds and caps.get(unit.group) is None:
            budget = unit.desired - len(unit.slots)    # (the general case's value when nothing limits it)
        else:
            budget = min(unit.missing, self._quota_slots(unit, caps) - unit.reserved)
            if unit.gang and self._quota_slots(unit, caps) < unit.waiting:
                budget = 0                       # all or nothing: it waits for quota
        if need is None:
            need = batch.need(unit.slot)
        placed = 0
        plain = False
        try:
            if need is not None and budget > 0:
                # what a unit of no restriction (most) skips asking per machine, and whether each step is
                # a grant with no quota to ask (counted once, below): nothing changes either within a pass.
                # A unit of a limited group placed alone needs no quota question either: its budget is
                # within its quota, and each of its grants takes exactly one slot of it (how_many_within
                # of the use plus k slots is k fewer), so the question per step never says no.
                anywhere = self._unrestricted(unit)
                plain = not unit.gang and (alone or caps.get(unit.group) is None)
                hosts: dict[str, Machine] | None = None
                for pref in unit.preferences or _ANYWHERE:
                    count = min(pref.count, budget - placed)
                    if pref.kind == LT_MACHINE:
                        if hosts is None:
                            hosts = batch.hosts
                        machine = hosts.get(pref.target)
                        if machine is not None:       # (the steps pass through: no loop here per slot)
                            placed += yield from self._fill_machine(unit, machine, batch, need, count, caps,
                                                                    anywhere, plain)
                    else:
                        scope = batch.cluster if pref.kind == LT_CLUSTER else batch.room(pref.target)
                        if scope is not None:
                            placed += yield from self._spread(unit, scope, batch, need, count, caps, anywhere,
                                                              plain)
                    if placed >= budget:
                        break
        finally:                                 # (also if the caller stops early: the books stay whole)
            if plain and placed:
                self._count_grants(unit, placed)
        self._after_placing(unit, caps)

    def _spread(self, unit: Unit, scope: Scope[Machine], batch: _Batch, need: Vector, count: int,
                caps: Mapping[str, Resources | None], anywhere: bool,
                plain: bool) -> Generator[bool, None, int]:
        """Round-robin ``count`` slots over the machines of ``scope`` whose
        open room fits one, fewest slots of the unit first: each round goes
        once around the scope from its cursor (where the last unit's
        round-robin stopped), and round ``r`` passes machines holding more
        than ``r`` of the unit. Each step is one first-fit query (O(log M)
        with the tree, module :mod:`.machines`). ``anywhere``: the unit is
        :meth:`_unrestricted`; ``plain``: each step is a grant, no quota to
        ask (no cap on its group, no gang), left uncounted (the caller
        counts them: :meth:`_count_grants`). Returns the slots placed."""
        placed, level = 0, 0
        origin = scope.cursor
        machines = scope.machines
        size = len(machines)
        per_host, holds = unit.per_host, unit.holds                  # (changed in place, never replaced)
        while placed < count:
            progress = skipped = False
            for position in scope.around(need, origin):
                machine = machines[position]
                if not (anywhere or self._allowed(unit, machine)):
                    continue
                if (per_host or holds) and \
                        per_host.get(machine.hostname, 0) + holds.get(machine.agent_id, 0) > level:
                    skipped = True
                    continue
                if plain:
                    self._grant_uncounted(unit, machine, batch, need)
                elif not self._take_one(unit, machine, batch, need, caps):
                    return placed
                placed += 1
                progress = True
                scope.cursor = position + 1 if position + 1 < size else 0
                yield True
                if placed >= count:              # done: no question for a next machine
                    return placed
            if not (progress or skipped):
                return placed
            level += 1
        return placed

    def _fill_machine(self, unit: Unit, machine: Machine, batch: _Batch, need: Vector, count: int,
                      caps: Mapping[str, Resources | None], anywhere: bool,
                      plain: bool) -> Generator[bool, None, int]:
        """Up to ``count`` slots on one named machine (LT_MACHINE); ``anywhere``
        and ``plain`` as for :meth:`_spread`. Returns the slots placed. O(count log M)."""
        holds = batch.fits
        placed = 0
        while placed < count:
            if not (holds(machine.open, need) and (anywhere or self._allowed(unit, machine))):
                break
            if plain:
                self._grant_uncounted(unit, machine, batch, need)
            elif not self._take_one(unit, machine, batch, need, caps):
                break
            placed += 1
            yield True
        return placed

    def _take_one(self, unit: Unit, machine: Machine, batch: _Batch, need: Vector,
                  caps: Mapping[str, Resources | None]) -> bool:
        """Grant one slot (a gang: reserve one); False if the quota is spent."""
        if caps.get(unit.group) is not None and self._quota_slots(unit, caps) <= unit.reserved:
            return False
        if unit.gang:
            self._hold_here(unit, machine, batch, need)
        else:
            self._grant(unit, machine, batch, need)
        return True

    # ------------------------------------------------------------- gangs
    def _start_gangs(self, batch: _Batch, caps: Mapping[str, Resources | None]) -> None:
        """Grant every gang whose reserved room covers all its waiting slots
        and is all in this batch. Then a gang backing off (it reserves
        nothing meanwhile, so others may use the room) tries what is left
        of this batch: all its slots at once, or nothing."""
        by_rank = lambda key: (self._units[key].priority, self._units[key].submitted)  # noqa: E731
        for key in sorted(self._holders, key=by_rank):
            unit = self._units[key]
            if unit.gang:
                self._start(unit, batch, caps)
        for key in sorted(self._backing_off, key=by_rank):
            unit = self._units[key]
            if unit.waiting and not unit.holds:
                for _ in self._place(unit, batch, caps):
                    pass
                if not self._start(unit, batch, caps):
                    self._release_holds(unit)
                    self._after_placing(unit, caps)

    def _start(self, unit: Unit, batch: _Batch, caps: Mapping[str, Resources | None]) -> bool:
        """Grant a gang all its waiting slots from its reservations if they
        cover them, all in this batch, and its quota allows. Did it?"""
        machines = [self._machines[a] for a in sorted(unit.holds)]
        if not (unit.reserved >= unit.waiting > 0 and all(m.in_batch for m in machines)
                and self._quota_slots(unit, caps) >= unit.waiting):
            return False
        need = batch.need(unit.slot)
        assert need is not None, "a reservation in this batch has the batch's kinds"
        for machine in machines:
            for _ in range(unit.holds.get(machine.agent_id, 0)):
                self._grant(unit, machine, batch, need)
        log.info("%s: all %d slots at once", unit.key, unit.granted)
        self._after_placing(unit, caps)
        return True

    # ----------------------------------------------------------- preemption
    def _preempt(self, batch: _Batch, caps: Mapping[str, Resources | None]) -> None:
        """Take room back for the units still missing slots: the planner
        (:mod:`.preemption`) searches, this carries out each decision before
        it goes on."""
        self._settle_use()
        for decision in PreemptionPlanner(self, batch, caps).decisions():
            if isinstance(decision, Evict):
                self._evict(decision.unit, decision.plan, batch, decision.reason)
            elif isinstance(decision, WaitReason):
                if decision.unit.reason != decision.reason:
                    self._set_reason(decision.unit, decision.reason)
            elif decision.unit.search_after != decision.until:
                decision.unit.search_after = decision.until
                self._changes += 1

    def _evict(self, unit: Unit, plan: Iterable[tuple[Machine, list[Slot | Reserved], int]], batch: _Batch,
               reason: str) -> None:
        """Carry out a preemption: kill the victims' slots (their jobs get
        :class:`SlotRevoked`), drop the reservations among them (their units
        wait again), reserve the room for ``unit``."""
        until = self._now + self.reservation_seconds
        for machine, victims, slots in plan:
            for slot in victims:
                if isinstance(slot, Reserved):    # room kept for a lower priority unit: it waits again
                    holder = self._units[slot.unit]
                    self._unhold(holder, machine)
                    self._sync(holder)
                    continue
                self._out.append(KillSlot(slot.id, reason))
                self._out.append(SlotRevoked(slot.job_id, slot.unit, slot.id, reason))
                owner = self._units.get(f"{slot.job_id}/{slot.unit}")
                self._drop_slot(slot)
                if owner is not None:
                    self._sync(owner)
                self.counters["slots_preempted"] += 1
            self._hold(unit, machine, slots, until)
            if machine.in_batch:
                machine.open = self._open(machine, batch.dims)
                batch.refresh(machine)
            log.info("preempting %d slot(s) on %s for %d slot(s) of %s: %s", len(victims), machine.hostname, slots,
                     unit.key, reason)
        unit.preempted_until = until
        self._sync(unit)

    # -------------------------------------------------------- offer answers
    def _answer_offers(self, batch: _Batch) -> None:
        """Launch on the machines that got slots, decline the others' offers,
        and clear what each machine kept for the batch. O(machines + slots)."""
        waiting = self.needs_offers()
        refuse = self.decline_seconds if waiting else 5.0
        launch_refuse = 0.0 if waiting else refuse
        declined: list[str] = []
        launched: list[Slot] = []                       # preemption's victims from the next pass on
        add_launch = self._out.append
        for machine in batch.machines:
            granted = machine.granted
            if granted:
                launched += granted
                # (a first batch's offer ids are a tuple already: tuple() returns it, no copy)
                add_launch(_new_launch(machine.agent_id, tuple(machine.offer_ids), tuple(granted), launch_refuse))
            else:
                declined += machine.offer_ids
            machine.offer_ids = machine.granted = _BETWEEN_BATCHES
            machine.in_batch = False
            machine.free = machine.open = ()
            machine.offered = _NOTHING
        if declined:
            self._out.append(DeclineOffers(tuple(declined), refuse))
        if launched:
            self._victims.add_many(launched)             # (in one call: the same as one per machine)


_NOTHING: Mapping[str, int] = {}
#: the floor of a group with no unit queued (passive scheduling asks only groups that have some)
_NO_FLOOR: list[tuple[int, int]] = []
#: a machine's offer ids and slots granted between batches: read, never appended to (a batch gives
#: each of its machines a list of offer ids of its own, and a list of slots at its first grant), so
#: answering 100,000 offers makes no new lists
_BETWEEN_BATCHES: list[Any] = NOTHING_GRANTED
#: the preference of a unit that states none: anywhere, as many as its budget (counts are capped by it)
_ANYWHERE = (Locality.cluster(2 ** 62),)


def _has_labels(machine: Machine, labels: tuple[tuple[str, str], ...]) -> bool:
    """Does the machine's agent have every (attribute, canonical text) of ``labels``?"""
    attributes = machine.attributes
    return all(attributes.get(name) == text for name, text in labels)


_agent_key: Callable[[Machine], str] = attrgetter("agent_id")
#: active scheduling's order: priority, then arrival (an attrgetter: no Python call per unit sorted)
_by_arrival: Callable[[Unit], tuple[int, int]] = attrgetter("priority", "submitted")


def _scopes(locality: Iterable[Locality]) -> tuple[str, ...]:
    """The waiting queues of a unit with these preferences: the cluster's if
    it may run anywhere, else those of its machines and rooms."""
    prefs = list(locality)
    if not prefs or any(p.kind == LT_CLUSTER for p in prefs):
        return (CLUSTER_SCOPE,)
    return tuple(dict.fromkeys(f"host:{p.target}" if p.kind == LT_MACHINE else f"room:{p.target}" for p in prefs))


def _preferences(locality: Iterable[Locality]) -> tuple[Locality, ...]:
    """The unit's preferences in seed 000's order, LT_MACHINE > LT_ENGINEROOM >
    LT_CLUSTER, whatever order the job lists them in (stable within a kind)."""
    return tuple(sorted(locality, key=lambda p: _LOCALITY_ORDER[p.kind]))


def _count(room: Vector, need: Vector) -> int:
    """How many ``need``s fit in ``room``. O(kinds)."""
    count = None
    for have, want in zip(room, need):
        if want > 0:
            fits_here = have // want if have > 0 else 0
            count = fits_here if count is None else min(count, fits_here)
    return count or 0
