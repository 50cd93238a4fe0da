"""The Fuxi scheduler's core: FuxiMaster's scheduling model, sans I/O.

It runs inside a framework (``mesoslike fuxi serve``): the Mesos master
offers it resources, and it hands them out as *slots* to the ScheduleUnits of
the jobs submitted to it (DESIGN §6, seed 000). Pure and deterministic:
calls go in, commands (:class:`LaunchSlots`, :class:`DeclineOffers`,
:class:`KillSlot`, :class:`SuppressOffers`, :class:`ReviveOffers`) and job
events (:class:`SlotGranted`, :class:`SlotRevoked`) come out; time comes
from an injected clock.

How a pass over an offer batch (:meth:`FuxiCore.on_offers`) goes:

1. **Active scheduling** of the units that arrived since the last pass, in
   submission order: machine preferences first, then engine rooms, then the
   cluster (LT_MACHINE > LT_ENGINEROOM > LT_CLUSTER); rooms and the cluster
   round-robin over the eligible machines, fewest slots of the unit first.
   Bounded by the quota group's room / slot size, ``max_per_machine``, the
   global blacklist and the unit's own. What is not placed waits.
2. **All-or-nothing** units are planned on a copy of the free resources and
   granted only if every slot fits at once.
3. **Passive scheduling** (OnResourceFree) machine by machine: quota groups
   by hunger (used / maximum, hungriest first); in a group, the highest
   priority waiting unit that fits the machine and the group's room, found
   by the O(log N) :class:`WaitingQueue`; FIFO or FAIR among equal priority.
4. **Preemption** for units still waiting: an owner group under its maximum
   takes back lent quota from groups over theirs; a unit that cannot be
   placed reclaims slots from the lowest priority upward, never from equal or
   higher priority. Victims' jobs get :class:`SlotRevoked`; the machine is
   reserved for the urgent unit until its resources are offered again.
5. Offers of machines that got slots are accepted (:class:`LaunchSlots`);
   the rest are declined with a filter. With nothing waiting the scheduler
   suppresses offers; new demand revives them. It never holds an offer
   past the pass.

The **incremental protocol**: a job states its demand once
(:meth:`FuxiCore.submit`); the core remembers the outstanding desire and
emits grants as resources appear; the job hands back slots it no longer
needs (:meth:`FuxiCore.release` with ``keep_desire=False``) — no re-sends.
"""

from __future__ import annotations

import itertools
import logging
from typing import Collection, Iterable, Mapping

import attrs

from mesoslike import Clock, MesoslikeError, Offer, Resources, SystemClock
from mesoslike.frameworks.fuxi.model import LT_CLUSTER, LT_ENGINEROOM, LT_MACHINE, JobSpec, UnitSpec
from mesoslike.frameworks.fuxi.quota import QuotaGroup, compute_caps, hunger
from mesoslike.frameworks.fuxi.waiting_queue import WaitingQueue

__all__ = ["FuxiCore", "FuxiError", "LaunchSlots", "DeclineOffers", "KillSlot", "SuppressOffers", "ReviveOffers",
           "SlotGranted", "SlotRevoked", "Slot", "WAIT_QUOTA", "WAIT_BLACKLIST", "WAIT_NO_FIT",
           "WAIT_LOWER_PRIORITY", "WAIT_ALL_OR_NOTHING"]

log = logging.getLogger("mesoslike.frameworks.fuxi")

EMPTY = Resources()
ROOM_ATTRIBUTE = "room"
#: why a unit waits (``status()``)
WAIT_QUOTA = "quota"
WAIT_BLACKLIST = "blacklist"
WAIT_NO_FIT = "no fit"
WAIT_LOWER_PRIORITY = "lower priority"
WAIT_ALL_OR_NOTHING = "all-or-nothing: not every slot fits at once"


class FuxiError(MesoslikeError, ValueError):
    """A bad call from a job: unknown job, unit or slot, unknown quota group."""


# ---------------------------------------------------------------- commands
@attrs.frozen
class Slot:
    """A granted slot: one task of ``resources`` on ``agent_id`` (``hostname``,
    in engine ``room``) for ``unit`` of ``job_id``."""
    id: str
    job_id: str
    unit: str
    agent_id: str
    hostname: str
    resources: Resources
    priority: int
    group: str
    granted_at: float
    room: str = ""


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


# ------------------------------------------------------------------- state
@attrs.define
class _Machine:
    agent_id: str
    hostname: str
    room: str
    free: Resources = EMPTY
    offer_ids: list[str] = attrs.field(factory=list)
    granted: list[Slot] = attrs.field(factory=list)


@attrs.define(eq=False)
class _Unit:
    key: str                      # "<job id>/<unit name>", the waiting queue's id
    job_id: str
    spec: UnitSpec
    priority: int
    group: str
    policy: str
    submitted: int
    desired: int
    slots: dict[str, Slot] = attrs.field(factory=dict)
    per_host: dict[str, int] = attrs.field(factory=dict)
    blacklist: set[str] = attrs.field(factory=set)
    avoid: frozenset[str] = frozenset()  # hosts its next slots should not go to (the job says, and changes it)
    new: bool = True              # active scheduling not done yet
    reason: str = ""              # why it waits, from the last pass

    @property
    def granted(self) -> int:
        return len(self.slots)

    @property
    def waiting(self) -> int:
        return max(0, self.desired - len(self.slots))


@attrs.define(eq=False)
class _Job:
    id: str
    spec: JobSpec
    units: dict[str, _Unit]
    submitted_at: float


class FuxiCore:
    """FuxiMaster's scheduling model over Mesos offers. Not thread-safe: one
    caller (the framework's callback thread) at a time.

    ``quota_groups``: name -> maximum (None: unlimited). A ``default`` group
    without a maximum exists unless given. ``global_blacklist``: hostnames no
    slot goes to. ``preemption``: take back lent quota and preempt lower
    priority slots for units that cannot be placed. ``decline_seconds``: the
    filter on declined offers while units wait for something else (with
    nothing waiting the core suppresses offers instead).
    """

    def __init__(self, quota_groups: Mapping[str, Resources | None] | None = None, *,
                 global_blacklist: Iterable[str] = (), preemption: bool = True, clock: Clock | None = None,
                 decline_seconds: float = 1.0, reservation_seconds: float = 30.0) -> None:
        self.clock = clock or SystemClock()
        groups = dict(quota_groups or {})
        groups.setdefault("default", None)
        self.groups: dict[str, QuotaGroup] = {}
        for name, maximum in groups.items():
            if maximum is not None and not isinstance(maximum, Resources):
                raise FuxiError(f"quota of group {name!r} must be Resources or None, got {maximum!r}")
            self.groups[name] = QuotaGroup(name, maximum)
        self._queues: dict[tuple[str, str], WaitingQueue] = {}
        self._global_blacklist: set[str] = set(global_blacklist)
        self.preemption = preemption
        self.decline_seconds = decline_seconds
        self.reservation_seconds = reservation_seconds
        self.jobs: dict[str, _Job] = {}
        self._units: dict[str, _Unit] = {}
        self._slots: dict[str, Slot] = {}
        self._machines: dict[str, _Machine] = {}     # every agent seen in an offer
        self._reservations: dict[str, tuple[str, float]] = {}   # agent id -> (unit key, until)
        self._job_seq = itertools.count(1)
        self._submit_seq = itertools.count()
        self._slot_seq = itertools.count(1)
        #: put before the slot numbers: a scheduler that recovered after a failover numbers its slots apart
        #: from its predecessors' (which it re-adopts with :meth:`adopt`)
        self.slot_prefix = ""
        self._suppressed = False
        self._out: list[Command] = []
        self.counters = {"slots_granted": 0, "slots_preempted": 0, "passes": 0}

    # ================================================================ jobs
    def submit(self, job: JobSpec, job_id: str | None = None) -> tuple[str, list[Command]]:
        """Register a job's demand once. Its units get active scheduling on
        the next offers. Raises :class:`FuxiError` (nothing changes) for an
        unknown quota group or a duplicate job id."""
        if not isinstance(job, JobSpec):
            raise FuxiError(f"submit needs a JobSpec, got {type(job).__name__}")
        if job.quota_group not in self.groups:
            raise FuxiError(f"unknown quota group {job.quota_group!r}; known: {', '.join(sorted(self.groups))}")
        job_id = job_id or f"job-{next(self._job_seq):04d}"
        if job_id in self.jobs:
            raise FuxiError(f"job id {job_id!r} is taken")
        self._out = []
        units = {}
        for spec in job.units:
            unit = _Unit(key=f"{job_id}/{spec.name}", job_id=job_id, spec=spec, priority=job.priority_of(spec),
                         group=job.quota_group, policy=job.policy, submitted=next(self._submit_seq),
                         desired=spec.slots, blacklist=set(spec.blacklist))
            units[spec.name] = unit
            self._units[unit.key] = unit
        self.jobs[job_id] = _Job(job_id, job, units, self.clock.now())
        log.info("job %s (%s) submitted: %s", job_id, job.name,
                 ", ".join(f"{u.name} x{u.slots}" for u in job.units))
        self._want_offers()
        return job_id, self._flush()

    def release(self, slot_id: str, keep_desire: bool = False) -> list[Command]:
        """A slot ends. ``keep_desire=False``: the job returns it (its unit
        wants one slot less). ``keep_desire=True``: its task ended but the
        unit still wants the slot (it waits for another)."""
        slot = self._slots.get(slot_id)
        if slot is None:
            raise FuxiError(f"unknown slot {slot_id!r}")
        self._out = []
        unit = self._units[f"{slot.job_id}/{slot.unit}"]
        self._drop_slot(slot)
        if not keep_desire:
            unit.desired = max(0, unit.desired - 1)
        self._requeue(unit)
        self._want_offers()
        return self._flush()

    def adopt(self, slot: Slot) -> list[Command]:
        """Count ``slot`` — granted before a failover, its worker still
        running — as granted again: its unit's, its host's and its group's,
        without a launch. Raises :class:`FuxiError` for an unknown job or
        unit or a slot already held. O(1) plus requeueing the unit."""
        unit = self._unit(slot.job_id, slot.unit)
        if slot.id in self._slots:
            raise FuxiError(f"slot {slot.id!r} is held already")
        self._out = []
        unit.slots[slot.id] = slot
        unit.per_host[slot.hostname] = unit.per_host.get(slot.hostname, 0) + 1
        self._slots[slot.id] = slot
        group = self.groups[unit.group]
        group.used = group.used + slot.resources
        self._requeue(unit)
        self._want_offers()
        return self._flush()

    def update_desire(self, job_id: str, unit_name: str, desired: int) -> list[Command]:
        """Change a unit's outstanding desire (slots wanted at once)."""
        unit = self._unit(job_id, unit_name)
        if not isinstance(desired, int) or isinstance(desired, bool) or desired < 0:
            raise FuxiError(f"desired slots must be an integer >= 0, got {desired!r}")
        self._out = []
        unit.desired = desired
        self._requeue(unit)
        self._want_offers()
        return self._flush()

    def blacklist(self, job_id: str, unit_name: str, hostname: str) -> None:
        """The unit's own blacklist: no new slot of it goes to ``hostname``."""
        self._unit(job_id, unit_name).blacklist.add(hostname)

    def add_to_global_blacklist(self, hostname: str) -> None:
        """No new slot of any job goes to ``hostname`` (a job reported it)."""
        self._global_blacklist.add(hostname)

    @property
    def global_blacklist(self) -> Collection[str]:
        """Hostnames no slot goes to (read-only: :meth:`add_to_global_blacklist` adds)."""
        return frozenset(self._global_blacklist)

    def avoid_hosts(self, job_id: str, unit_name: str, hosts: Iterable[str]) -> None:
        """The unit's next slots should not go to ``hosts`` (replacing what it
        said before; empty: no preference). A job asks this for a backup
        copy, which must run on another machine than its straggler."""
        self._unit(job_id, unit_name).avoid = frozenset(hosts)

    def finish_job(self, job_id: str) -> list[Command]:
        """Forget a job; its remaining slots are killed and returned."""
        job = self.jobs.pop(job_id, None)
        if job is None:
            raise FuxiError(f"unknown job {job_id!r}")
        self._out = []
        for unit in job.units.values():
            for slot in list(unit.slots.values()):
                self._drop_slot(slot)
                self._out.append(KillSlot(slot.id, "job finished"))
            self._dequeue(unit)
            del self._units[unit.key]
        self._want_offers()
        return self._flush()

    # =========================================================== resources
    def on_offers(self, offers: list[Offer]) -> list[Command]:
        """One scheduling pass over an offer batch (module docstring)."""
        self._out = []
        self.counters["passes"] += 1
        now = self.clock.now()
        machines = self._take_offers(offers)
        self._reservations = {a: r for a, r in self._reservations.items() if r[1] > now and r[0] in self._units}
        self._refresh_groups()
        caps = compute_caps(self.groups.values())
        for unit in sorted((u for u in self._units.values() if u.new), key=lambda u: u.submitted):
            unit.new = False
            if unit.spec.all_or_nothing:
                continue
            self._active(unit, machines, caps)
        self._all_or_nothing(machines, caps)
        self._passive(machines, caps)
        if self.preemption:
            self._preempt(machines, caps)
        self._answer_offers(machines)
        self._want_offers()
        return self._flush()

    def on_slot_lost(self, slot_id: str, reason: str) -> list[Command]:
        """The slot's task ended without the job asking (failed, lost): the
        unit keeps its desire and waits for another slot."""
        slot = self._slots.get(slot_id)
        if slot is None:
            return []
        self._out = [SlotRevoked(slot.job_id, slot.unit, slot_id, reason)]
        unit = self._units.get(f"{slot.job_id}/{slot.unit}")
        self._drop_slot(slot)
        if unit is not None:
            self._requeue(unit)
        self._want_offers()
        return self._flush()

    def on_agent_lost(self, agent_id: str) -> list[Command]:
        out: list[Command] = []
        for slot in [s for s in self._slots.values() if s.agent_id == agent_id]:
            out += self.on_slot_lost(slot.id, "agent lost")
        self._machines.pop(agent_id, None)
        self._reservations.pop(agent_id, None)
        return out

    def on_offer_rescinded(self, offer_id: str) -> None:
        """Nothing to do: offers are answered within the pass that got them."""

    def needs_offers(self) -> bool:
        return any(u.waiting for u in self._units.values())

    def holds(self, slot_id: str) -> bool:
        """Is ``slot_id`` granted (not released, lost, revoked or finished with its job)? O(1)."""
        return slot_id in self._slots

    def held_slots(self) -> Collection[Slot]:
        """Every granted slot (a read-only view). O(1)."""
        return self._slots.values()

    # =============================================================== status
    def status(self, job_id: str | None = None) -> dict:
        """Per job and unit: desired and granted slots, where they run, and
        why a unit waits."""
        jobs = [self.jobs[job_id]] if job_id is not None else list(self.jobs.values())
        if job_id is not None and job_id not in self.jobs:
            raise FuxiError(f"unknown job {job_id!r}")
        return {"jobs": [{
            "id": job.id, "name": job.spec.name, "quota_group": job.spec.quota_group, "priority": job.spec.priority,
            "policy": job.spec.policy,
            "units": [{"name": u.spec.name, "priority": u.priority, "slot": str(u.spec.slot), "desired": u.desired,
                       "granted": u.granted, "waiting": u.waiting, "hosts": dict(sorted(u.per_host.items())),
                       "why_waiting": u.reason if u.waiting else ""} for u in job.units.values()],
        } for job in jobs], "quota_groups": [{
            "name": g.name, "maximum": None if g.maximum is None else str(g.maximum), "used": str(g.used),
            "waiting": str(g.waiting)} for g in self.groups.values()]}

    # ============================================================ internals
    def _unit(self, job_id: str, unit_name: str) -> _Unit:
        unit = self._units.get(f"{job_id}/{unit_name}")
        if unit is None or job_id not in self.jobs:
            raise FuxiError(f"unknown job or unit {job_id!r}/{unit_name!r}")
        return unit

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

    def _take_offers(self, offers: list[Offer]) -> list[_Machine]:
        batch: dict[str, _Machine] = {}
        for offer in offers:
            machine = batch.get(offer.agent_id)
            if machine is None:
                machine = self._machines.get(offer.agent_id)
                room = offer.attributes.get(ROOM_ATTRIBUTE, "")
                if machine is None or machine.hostname != offer.hostname or machine.room != room:
                    machine = _Machine(offer.agent_id, offer.hostname, room)
                    self._machines[offer.agent_id] = machine
                machine.free, machine.offer_ids, machine.granted = EMPTY, [], []
                batch[offer.agent_id] = machine
            machine.free = machine.free + offer.resources
            machine.offer_ids.append(offer.id)
        return sorted(batch.values(), key=lambda m: m.agent_id)

    def _refresh_groups(self) -> None:
        for group in self.groups.values():
            group.used, group.waiting = EMPTY, EMPTY
        used: dict[str, list[Resources]] = {}
        for slot in self._slots.values():
            used.setdefault(slot.group, []).append(slot.resources)
        waiting: dict[str, list[Resources]] = {}
        for unit in self._units.values():
            if unit.waiting:
                waiting.setdefault(unit.group, []).append(unit.spec.slot.scale(unit.waiting))
        for name, items in used.items():
            self.groups[name].used = Resources.sum(items)
        for name, items in waiting.items():
            self.groups[name].waiting = Resources.sum(items)

    # ------------------------------------------------------------ limits
    def _eligible(self, unit: _Unit, machine: _Machine) -> bool:
        host = machine.hostname
        if host in self._global_blacklist or host in unit.blacklist or host in unit.avoid:
            return False
        limit = unit.spec.max_per_machine
        if limit is not None and unit.per_host.get(host, 0) >= limit:
            return False
        reserved = self._reservations.get(machine.agent_id)
        if reserved is not None and reserved[0] != unit.key:
            return False
        prefs = unit.spec.locality
        if not prefs or any(p.kind == LT_CLUSTER for p in prefs):
            return True
        return any((p.kind == LT_MACHINE and p.target == host) or (p.kind == LT_ENGINEROOM and p.target == machine.room)
                   for p in prefs)

    def _quota_room(self, unit: _Unit, caps: Mapping[str, Resources | None]) -> Resources | None:
        cap = caps.get(unit.group)
        return None if cap is None else cap.subtract_clamped(self.groups[unit.group].used)

    def _quota_slots(self, unit: _Unit, caps: Mapping[str, Resources | None]) -> int:
        """How many more slots the unit's quota group allows."""
        room = self._quota_room(unit, caps)
        if room is None:
            return unit.waiting
        return _how_many(room, unit.spec.slot)

    # ------------------------------------------------------------- grants
    def _grant(self, unit: _Unit, machine: _Machine) -> Slot:
        slot = Slot(id=f"{unit.job_id}.{unit.spec.name}.{self.slot_prefix}{next(self._slot_seq)}", job_id=unit.job_id,
                    unit=unit.spec.name, agent_id=machine.agent_id, hostname=machine.hostname,
                    resources=unit.spec.slot, priority=unit.priority, group=unit.group,
                    granted_at=self.clock.now(), room=machine.room)
        machine.free = machine.free - unit.spec.slot
        machine.granted.append(slot)
        unit.slots[slot.id] = slot
        unit.per_host[machine.hostname] = unit.per_host.get(machine.hostname, 0) + 1
        self._slots[slot.id] = slot
        group = self.groups[unit.group]
        group.used = group.used + unit.spec.slot
        group.waiting = group.waiting.subtract_clamped(unit.spec.slot)
        if self._reservations.get(machine.agent_id, ("",))[0] == unit.key:
            del self._reservations[machine.agent_id]
        self.counters["slots_granted"] += 1
        self._out.append(SlotGranted(slot))
        return slot

    def _drop_slot(self, slot: Slot) -> None:
        del self._slots[slot.id]
        unit = self._units.get(f"{slot.job_id}/{slot.unit}")
        if unit is not None:
            unit.slots.pop(slot.id, None)
            left = unit.per_host.get(slot.hostname, 0) - 1
            if left > 0:
                unit.per_host[slot.hostname] = left
            else:
                unit.per_host.pop(slot.hostname, None)
        group = self.groups.get(slot.group)
        if group is not None:
            group.used = group.used.subtract_clamped(slot.resources)

    # ------------------------------------------------------ active (arrival)
    def _active(self, unit: _Unit, machines: list[_Machine], caps: Mapping[str, Resources | None]) -> None:
        budget = min(unit.waiting, self._quota_slots(unit, caps))
        placed = 0
        prefs = unit.spec.locality or ()
        if not prefs:
            placed += self._spread(unit, machines, budget)
        for pref in prefs:
            if placed >= budget:
                break
            count = min(pref.count, budget - placed)
            if pref.kind == LT_MACHINE:
                targets = [m for m in machines if m.hostname == pref.target]
            elif pref.kind == LT_ENGINEROOM:
                targets = [m for m in machines if m.room == pref.target]
            else:
                targets = machines
            placed += self._spread(unit, targets, count)
        self._after_placing(unit, caps)

    def _spread(self, unit: _Unit, machines: list[_Machine], count: int) -> int:
        """Round-robin ``count`` slots over ``machines``, fewest slots of the
        unit first (ties in machine order)."""
        placed = 0
        candidates = [m for m in machines if self._eligible(unit, m) and m.free.contains(unit.spec.slot)]
        while placed < count and candidates:
            candidates.sort(key=lambda m: unit.per_host.get(m.hostname, 0))
            progress = False
            for machine in list(candidates):
                if placed >= count:
                    break
                if not (self._eligible(unit, machine) and machine.free.contains(unit.spec.slot)):
                    candidates.remove(machine)
                    continue
                self._grant(unit, machine)
                placed += 1
                progress = True
            if not progress:
                break
        return placed

    def _after_placing(self, unit: _Unit, caps: Mapping[str, Resources | None]) -> None:
        if unit.waiting:
            self._requeue(unit)
            unit.reason = self._why_waiting(unit, caps)
        else:
            self._dequeue(unit)
            unit.reason = ""

    # -------------------------------------------------------- all or nothing
    def _all_or_nothing(self, machines: list[_Machine], caps: Mapping[str, Resources | None]) -> None:
        units = sorted((u for u in self._units.values() if u.spec.all_or_nothing and u.waiting),
                       key=lambda u: (u.priority, u.submitted))
        for unit in units:
            want = unit.waiting
            if self._quota_slots(unit, caps) < want:
                unit.reason = WAIT_QUOTA
                self._requeue(unit)
                continue
            plan = self._plan(unit, machines, want)
            if plan is None:
                unit.reason = WAIT_ALL_OR_NOTHING
                self._requeue(unit)
                continue
            for machine in plan:
                self._grant(unit, machine)
            self._after_placing(unit, caps)

    def _plan(self, unit: _Unit, machines: list[_Machine], want: int) -> list[_Machine] | None:
        """Machines (one entry per slot) that take ``want`` slots at once, or None."""
        free = {m.agent_id: m.free for m in machines}
        per_host = dict(unit.per_host)
        limit = unit.spec.max_per_machine
        plan: list[_Machine] = []
        progress = True
        while len(plan) < want and progress:
            progress = False
            for machine in machines:
                if len(plan) >= want:
                    break
                host = machine.hostname
                if not self._eligible(unit, machine) or (limit is not None and per_host.get(host, 0) >= limit):
                    continue
                if free[machine.agent_id].contains(unit.spec.slot):
                    free[machine.agent_id] = free[machine.agent_id] - unit.spec.slot
                    per_host[host] = per_host.get(host, 0) + 1
                    plan.append(machine)
                    progress = True
        return plan if len(plan) == want else None

    # ------------------------------------------------- passive (resource free)
    def _passive(self, machines: list[_Machine], caps: Mapping[str, Resources | None]) -> None:
        cluster = Resources.sum([m.free for m in machines] + [s.resources for s in self._slots.values()])
        reserved = [m for m in machines if m.agent_id in self._reservations]
        for machine in reserved + [m for m in machines if m.agent_id not in self._reservations]:
            self._fill(machine, caps, cluster)

    def _fill(self, machine: _Machine, caps: Mapping[str, Resources | None], cluster: Resources) -> None:
        while machine.free:
            groups = sorted((g for g in self.groups.values() if g.waiting),
                            key=lambda g: (hunger(g, cluster), g.name))
            for group in groups:
                unit = self._pick(group, machine, caps)
                if unit is not None and self._greedy(unit, machine, caps):
                    break
            else:
                return

    def _pick(self, group: QuotaGroup, machine: _Machine, caps: Mapping[str, Resources | None]) -> _Unit | None:
        """The group's highest-priority waiting unit that fits ``machine``
        and the group's room and may run there."""
        cap = caps.get(group.name)
        free = machine.free if cap is None else machine.free.minimum(cap.subtract_clamped(group.used))
        best: tuple | None = None
        for policy in ("FIFO", "FAIR"):
            queue = self._queues.get((group.name, policy))
            if not queue:
                continue
            for key in queue.iter_fitting(free):
                unit = self._units[key]
                if unit.spec.all_or_nothing or not self._eligible(unit, machine):
                    continue
                rank = (unit.priority, unit.submitted)
                if best is None or rank < best[0]:
                    best = (rank, unit)
                break
        return None if best is None else best[1]

    def _greedy(self, unit: _Unit, machine: _Machine, caps: Mapping[str, Resources | None]) -> int:
        """As many slots of ``unit`` on ``machine`` as fit (Fuxi serves a
        picked unit greedily); how many."""
        granted = 0
        while unit.waiting and self._quota_slots(unit, caps) > 0 and self._eligible(unit, machine) \
                and machine.free.contains(unit.spec.slot):
            self._grant(unit, machine)
            granted += 1
        self._after_placing(unit, caps)
        return granted

    # -------------------------------------------------------------- queues
    def _requeue(self, unit: _Unit) -> None:
        queue = self._queues.get((unit.group, unit.policy))
        if queue is None:
            queue = self._queues[(unit.group, unit.policy)] = WaitingQueue(unit.policy)
        if not unit.waiting or unit.new:
            if unit.key in queue:
                queue.remove(unit.key)
            return
        if unit.key in queue:
            queue.update_granted(unit.key, unit.granted)
        else:
            queue.add(unit.key, unit.priority, unit.spec.slot, unit.submitted, unit.granted)

    def _dequeue(self, unit: _Unit) -> None:
        queue = self._queues.get((unit.group, unit.policy))
        if queue is not None and unit.key in queue:
            queue.remove(unit.key)

    def _why_waiting(self, unit: _Unit, caps: Mapping[str, Resources | None]) -> str:
        if self._quota_slots(unit, caps) == 0:
            return WAIT_QUOTA
        machines = list(self._machines.values())
        if machines and all(m.hostname in self._global_blacklist or m.hostname in unit.blacklist
                            for m in machines):
            return WAIT_BLACKLIST
        return WAIT_NO_FIT

    # ----------------------------------------------------------- preemption
    def _preempt(self, machines: list[_Machine], caps: Mapping[str, Resources | None]) -> None:
        waiting = sorted((u for u in self._units.values() if u.waiting and not u.spec.all_or_nothing),
                         key=lambda u: (u.priority, u.submitted))
        pending = {key for key, _ in self._reservations.values()}
        for unit in waiting:
            if unit.key in pending:
                continue  # its earlier preemption has not landed yet
            group = self.groups[unit.group]
            own_room = None if group.maximum is None else group.maximum.subtract_clamped(group.used)
            takes_back = own_room is not None and own_room.contains(unit.spec.slot)
            if takes_back:
                victims = self._victims(unit, lambda s: self.groups[s.group].over_maximum() and s.group != unit.group)
                if victims is not None:
                    self._evict(unit, victims, "quota taken back by its owner")
                    continue
            if self._quota_slots(unit, caps) == 0:
                continue
            victims = self._victims(unit, lambda s: s.priority > unit.priority)
            if victims is not None:
                self._evict(unit, victims, f"preempted by a higher priority unit ({unit.key}, "
                                           f"priority {unit.priority})")
            elif unit.reason == WAIT_NO_FIT and self._held_by_others(unit):
                unit.reason = WAIT_LOWER_PRIORITY  # units it may not preempt hold the resources

    def _held_by_others(self, unit: _Unit) -> bool:
        """Would the unit fit on some machine it may use if the slots of
        others (which it may not preempt) were gone?"""
        held: dict[str, list[Resources]] = {}
        for slot in self._slots.values():
            if slot.job_id != unit.job_id:
                held.setdefault(slot.agent_id, []).append(slot.resources)
        return any((machine.free + Resources.sum(held[agent_id])).contains(unit.spec.slot)
                   for agent_id, machine in self._machines.items()
                   if agent_id in held and self._eligible(unit, machine))

    def _victims(self, unit: _Unit, may_take) -> tuple[_Machine, list[Slot]] | None:
        """The cheapest machine where the free resources plus slots that
        ``may_take`` make room for one slot of ``unit``: lowest priority
        (largest number) first, newest first; fewest victims wins."""
        best: tuple[int, tuple, _Machine, list[Slot]] | None = None
        by_agent: dict[str, list[Slot]] = {}
        for slot in self._slots.values():
            if may_take(slot):
                by_agent.setdefault(slot.agent_id, []).append(slot)
        for agent_id, candidates in sorted(by_agent.items()):
            machine = self._machines.get(agent_id)
            if machine is None or not self._eligible(unit, machine) or agent_id in self._reservations:
                continue
            candidates.sort(key=lambda s: (-s.priority, -s.granted_at, s.id))
            room, chosen = machine.free, []
            for slot in candidates:
                if room.contains(unit.spec.slot):
                    break
                room = room + slot.resources
                chosen.append(slot)
            if chosen and room.contains(unit.spec.slot):
                cost = (len(chosen), tuple(-s.priority for s in chosen))
                if best is None or (cost, agent_id) < (best[1], best[2].agent_id):
                    best = (len(chosen), cost, machine, chosen)
        return None if best is None else (best[2], best[3])

    def _evict(self, unit: _Unit, victims: tuple[_Machine, list[Slot]], reason: str) -> None:
        machine, slots = victims
        for slot in slots:
            self._out.append(KillSlot(slot.id, reason))
            self._out.append(SlotRevoked(slot.job_id, slot.unit, slot.id, reason))
            owner = self._units.get(f"{slot.job_id}/{slot.unit}")
            self._drop_slot(slot)
            if owner is not None:
                self._requeue(owner)
            self.counters["slots_preempted"] += 1
        self._reservations[machine.agent_id] = (unit.key, self.clock.now() + self.reservation_seconds)
        log.info("preempting %d slot(s) on %s for %s: %s", len(slots), machine.hostname, unit.key, reason)

    # -------------------------------------------------------- offer answers
    def _answer_offers(self, machines: list[_Machine]) -> None:
        waiting = self.needs_offers()
        refuse = self.decline_seconds if waiting else 5.0
        declined: list[str] = []
        for machine in machines:
            if machine.granted:
                self._out.append(LaunchSlots(machine.agent_id, tuple(machine.offer_ids), tuple(machine.granted),
                                             0.0 if waiting else refuse))
            else:
                declined += machine.offer_ids
            machine.offer_ids, machine.granted, machine.free = [], [], EMPTY
        if declined:
            self._out.append(DeclineOffers(tuple(declined), refuse))


def _how_many(room: Resources, slot: Resources) -> int:
    """How many ``slot``s fit in ``room``. O(kinds)."""
    count = None
    for kind in slot.names():
        need = slot.get(kind)
        if need > 0:
            fits = int(round(room.get(kind) * 1000)) // int(round(need * 1000))
            count = fits if count is None else min(count, fits)
    return count or 0
