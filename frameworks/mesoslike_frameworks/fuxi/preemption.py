"""The Fuxi scheduler's preemption search: a pure planner beside
:class:`~.core.FuxiCore` (docs/fuxi-scheduling.rst, "Preemption"; seed 002).

After a pass placed what it could, units still missing slots may take room
back, highest priority first: an owner group under its maximum takes back
quota it lent to groups over theirs; otherwise a unit reclaims room from
the lowest priority upward — room reserved for lower priority units first,
then their running slots, newest first — never from equal or higher
priority, for all its missing slots in one pass (a gang only if all of them
can be freed). The search is bounded by the core's ``preemption_budget``
of candidates per pass, and a unit whose search found nothing searches
again only after ``preemption_retry_seconds``.

:meth:`PreemptionPlanner.decisions` reads the scheduler's books
(:class:`Books`: the core's own state, never copied) and yields what to do,
one decision at a time: :class:`Evict` (kill these victims, drop these
reservations, reserve the room for the unit), :class:`WaitReason` (why the
unit waits now) and :class:`SearchLater`. It changes nothing: the core
carries out each decision before the planner goes on, so that the next
search sees the room the last one freed. No I/O, no clock (the pass's
time is the books'), no randomness.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from operator import attrgetter
from typing import Callable, Collection, Iterator, Mapping, Protocol, Sequence

import attrs

from mesoslike import Resources
from mesoslike_frameworks.fuxi.books import (
    CLUSTER_SCOPE,
    WAIT_LOWER_PRIORITY,
    WAIT_NEVER_FITS,
    WAIT_NO_FIT,
    WAIT_QUOTA,
    Machine,
    Reserved,
    Slot,
    Unit,
    how_many_within,
)
from mesoslike_frameworks.fuxi.machines import Dims, Vector
from mesoslike_frameworks.fuxi.quota import QuotaGroup

__all__ = ["PreemptionPlanner", "Books", "JobBooks", "Batch", "Decision", "Evict", "WaitReason", "SearchLater", "Victim",
           "VictimOrder", "FailedSearches"]

#: what preemption takes: a running slot, or room reserved for a lower priority unit
Victim = Slot | Reserved


# ---------------------------------------------------------------- decisions
@attrs.frozen
class Evict:
    """Make room for ``unit``: per machine of ``plan``, its victims (slots
    to kill, reservations to drop) and how many of the unit's slots the room
    they free holds, reserved for it. ``reason`` is the victims'."""
    unit: Unit
    plan: tuple[tuple[Machine, list[Victim], int], ...]
    reason: str


@attrs.frozen
class WaitReason:
    """The unit waits for ``reason`` (what ``status`` says)."""
    unit: Unit
    reason: str


@attrs.frozen
class SearchLater:
    """The unit's search found nothing to take: no other before ``until``."""
    unit: Unit
    until: float


Decision = Evict | WaitReason | SearchLater


#: the order units search in: priority, then arrival
_by_rank: Callable[[Unit], tuple[int, int]] = attrgetter("priority", "submitted")


# ------------------------------------------------------------ victim order
def _victim_key(slot: Slot) -> tuple[int, float, str]:
    """Lowest priority first, newest first among equal priority (seed 002); the id breaks ties."""
    return -slot.priority, -slot.granted_at, slot.id


class VictimOrder:
    """The slots the scheduler holds (``held``: its own mapping, read) in
    victim order (:func:`_victim_key`), kept from pass to pass: the core
    tells it of the slots a pass granted, once it answers the offers, and
    of each slot it adopts (:meth:`add_many`, :meth:`add`), and of each
    slot it drops (:meth:`dropped`); a pass that preempts asks :meth:`order`.
    Sorting every held slot in each such pass cost O(S log S) key calls, a
    tenth of a contended simulation; now a pass pays for the slots granted
    since (O(k log S) key calls, each insertion a memmove), and the lists
    are pruned of dropped slots when those are as many as the held ones.

    The order may hold dropped slots (the planner skips a slot the books no
    longer hold, as it skips the slots its own evictions drop during the
    pass); the held ones are in exactly the order a sort would give, the
    key being a total order (a held slot's id is its own). A slot id held
    again after it was dropped (a slot adopted again) prunes the order
    before it is read, so that no id appears twice.

    It also logs what a search could see change (:class:`FailedSearches`):
    ``log`` holds each slot added (+1) or dropped (-1), ``stamp`` counts
    them (the log keeps the last ones: ``log[0]`` is change ``log_start``),
    and ``changed`` maps each priority to the stamp after the last change of
    a slot of it. A slot the core grants is added once the pass that granted
    it answers its offers: it is a victim from the next pass on, not before."""

    __slots__ = ("_held", "_order", "_pending", "_dropped", "_gone", "_stale", "stamp", "changed", "log",
                 "log_start")

    #: changes the log keeps at least (it drops its older half beyond twice as many)
    LOG = 32768

    def __init__(self, held: Mapping[str, Slot]) -> None:
        self._held = held
        self._order: list[Slot] = []      # sorted by _victim_key; may hold dropped slots
        self._pending: list[Slot] = []    # added since the last order(), not in it yet
        self._dropped = 0                 # slots dropped since the last pruning
        self._gone: set[str] = set()      # their ids
        self._stale = False               # one of them is held again: prune by identity first
        self.stamp = 0                    # slots added or dropped
        self.changed: dict[int, int] = {}  # priority -> the stamp after the last slot of it added or dropped
        self.log: list[tuple[Slot, int]] = []   # (slot, +1 added / -1 dropped), the last ones
        self.log_start = 0                 # the stamp of log[0]

    def add(self, slot: Slot) -> None:
        self.add_many((slot,))

    def add_many(self, slots: Sequence[Slot]) -> None:
        if slots:
            log = self.log
            if len(log) >= 2 * self.LOG:
                del log[:len(log) - self.LOG]
                self.log_start = self.stamp - self.LOG
            stamp = self.stamp
            changed = self.changed
            for slot in slots:
                log.append((slot, 1))
                stamp += 1
                changed[slot.priority] = stamp
            self.stamp = stamp
        self._pending += slots
        if self._gone and any(slot.id in self._gone for slot in slots):
            self._stale = True
        if self._dropped > len(self._held) + 64:    # a core that never preempts: keep the lists bounded
            self._prune()

    def dropped(self, slot: Slot) -> None:
        self.log.append((slot, -1))
        self.stamp = self.changed[slot.priority] = self.stamp + 1
        self._dropped += 1
        self._gone.add(slot.id)

    def _prune(self) -> None:
        held = self._held
        self._order = [slot for slot in self._order if held.get(slot.id) is slot]
        self._pending = [slot for slot in self._pending if held.get(slot.id) is slot]
        self._dropped = 0
        self._gone.clear()
        self._stale = False

    def order(self, granted_now: Collection[str]) -> list[Slot]:
        """Every held slot but those of ``granted_now`` in victim order,
        perhaps with dropped slots among them. The list is this object's:
        the caller reads it before anything else is added."""
        if self._stale or (self._dropped and 2 * self._dropped >= len(self._order) + len(self._pending)):
            self._prune()
        order = self._order
        if self._pending:
            held = self._held
            ready = []
            later = []
            for slot in self._pending:
                if slot.id in granted_now:
                    later.append(slot)          # granted in this pass: a victim from the next one
                elif held.get(slot.id) is slot:
                    ready.append(slot)
            self._pending = later
            if 4 * len(ready) >= len(order):
                order.extend(ready)
                order.sort(key=_victim_key)
            else:
                for slot in ready:
                    bisect.insort(order, slot, key=_victim_key)
        return order

    def _check(self) -> None:
        """Raise AssertionError unless every held slot is in the order or
        pending, once, and the order is sorted (for tests). O(S log S)."""
        held = self._held
        ids = [slot.id for slot in self._order + self._pending if held.get(slot.id) is slot]
        assert sorted(ids) == sorted(held), "every held slot once"
        assert self._order == sorted(self._order, key=_victim_key), "victim order"


# ------------------------------------------------------------ failed searches
class _Failed:
    """A search that found nothing (:class:`FailedSearches`): for ``slot``
    (the unit's, by identity), at the victim order's ``stamp``, walking
    slots of priorities above ``floor`` (None: every one), the reservations
    as of ``holds`` (the core's count of their changes; None: it walks none)
    and, for a walk that asks what groups borrowed, the groups that lent
    then with their excess in the slot's kinds (``lending``, from
    :meth:`PreemptionPlanner._lending`; None: it asks none) and the groups
    whose slots it walks (``watch``), it looked at ``examined`` candidates;
    ``rooms``: per machine of the candidates, the room they free over
    ``kinds``, each short of ``amounts`` (the slot's). ``follow``, for a
    take-back whose every lending group lends in one kind of the slot's:
    per group, its candidates as they change (:class:`_Lent`)."""

    __slots__ = ("slot", "group", "stamp", "floor", "holds", "lending", "watch", "examined", "kinds", "amounts",
                 "rooms", "follow")

    def __init__(self, slot: Resources, group: str, stamp: int, floor: int | None, holds: int | None, lending: tuple | None,
                 watch: frozenset[str], examined: int, kinds: tuple[str, ...], amounts: tuple[int, ...],
                 rooms: dict[str, list[int]], follow: dict[str, _Lent] | None = None) -> None:
        self.slot = slot
        self.group = group
        self.stamp = stamp
        self.floor = floor
        self.holds = holds
        self.lending = lending
        self.watch = watch
        self.examined = examined
        self.kinds = kinds
        self.amounts = amounts
        self.rooms = rooms
        self.follow = follow


class _Lent:
    """What a take-back's walk took of one lending group over its maximum
    in one kind (``at``: its place in the search's kinds) only: the group's
    slots that use that kind, in victim order, until they cover its excess
    there (``members``, by id: a prefix of those slots), their ``total``
    in that kind and the ``last`` of them in victim order. A slot of the
    group added before ``last`` joins them (the excess grows by what it
    uses: the slots after it stay out), a member dropped leaves (the excess
    shrinks by as much), any other slot added or dropped changes nothing
    the walk takes but the excess; the members are then the walk's
    candidates of the group exactly when the excess now is above what all
    but the last cover and at most what all of them do."""

    __slots__ = ("kind", "at", "members", "total", "last")

    def __init__(self, kind: str, at: int, members: dict[str, Slot], total: int, last: Slot) -> None:
        self.kind = kind
        self.at = at
        self.members = members
        self.total = total
        self.last = last


class FailedSearches:
    """The preemption searches that found nothing, remembered from pass to
    pass (the core keeps one; the planner reads and fills it), each by what
    it depends on: the search of a unit alike (:meth:`PreemptionPlanner._alike`:
    its kind, group, priority and slot) walks the candidates the victim
    order, the reservations and the groups' use give, in an order that
    does not depend on the machines' open room, and finds nothing if no
    machine of them fits a slot with the room they free and its open room.
    While none of what its walk reads changed (:meth:`PreemptionPlanner._still`:
    stamps, not a walk), the same walk finds the same candidates; then only
    the open room in the pass's batch can differ, and a machine outside the
    batch has none: the search would find nothing again unless a machine of
    its candidates in the batch now fits a slot, which is checked machine
    by machine. The answer is the search's, counted against the budget as
    the walk would count (exact: the report of a simulation is the same
    byte for byte with the memo and without, ``tests/test_fuxi_search_memo.py``).
    ``limit``: entries kept at most (then forgotten at once)."""

    __slots__ = ("entries", "limit", "stored", "hits")

    def __init__(self, limit: int = 4096) -> None:
        self.entries: dict[tuple, _Failed] = {}
        self.limit = limit
        self.stored = 0           # failed searches remembered
        self.hits = 0             # searches answered from here (not within one pass: the pass's own memo)


# -------------------------------------------------------------------- books
class Batch(Protocol):
    """The pass's offer batch, as far as the planner reads it."""

    @property
    def dims(self) -> Dims: ...

    @property
    def machines(self) -> Sequence[Machine]: ...

    def resources(self, vector: Vector) -> Resources: ...


class JobBooks(Protocol):
    """A job as the planner reads it: its units."""

    @property
    def units(self) -> Mapping[str, Unit]: ...


class Books(Protocol):
    """What the planner reads of the scheduler (:class:`~.core.FuxiCore`):
    its books as they are (read-only here), and the rules placement uses too."""

    @property
    def groups(self) -> Mapping[str, QuotaGroup]: ...

    @property
    def jobs(self) -> Mapping[str, JobBooks]: ...

    @property
    def preemption_budget(self) -> int: ...

    @property
    def preemption_retry_seconds(self) -> float: ...

    @property
    def _units(self) -> Mapping[str, Unit]: ...

    @property
    def _wanting(self) -> Collection[str]: ...

    @property
    def _queued_units(self) -> Mapping[str, Unit]: ...

    @property
    def _parked(self) -> Mapping[tuple[str, int], Mapping[str, Unit]]: ...

    @property
    def _unparked(self) -> Mapping[str, Unit]: ...

    @property
    def _backing_off(self) -> Collection[str]: ...

    @property
    def _slots(self) -> Mapping[str, Slot]: ...

    @property
    def _machines(self) -> Mapping[str, Machine]: ...

    @property
    def _holders(self) -> Collection[str]: ...

    @property
    def _held_now(self) -> Collection[tuple[str, str]]: ...

    @property
    def _granted_now(self) -> Collection[str]: ...

    @property
    def _victims(self) -> VictimOrder: ...

    @property
    def _now(self) -> float: ...

    @property
    def search_memo(self) -> bool: ...

    @property
    def _failed_searches(self) -> FailedSearches: ...

    @property
    def _holds_changes(self) -> int: ...

    @property
    def _held_by(self) -> Mapping[str, Mapping[int, int]]: ...

    def _never_fits(self, unit: Unit) -> bool: ...

    def _quota_slots(self, unit: Unit, caps: Mapping[str, Resources | None]) -> int: ...

    def _in_scope(self, unit: Unit, machine: Machine) -> bool: ...

    def _allowed(self, unit: Unit, machine: Machine) -> bool: ...

    def _unrestricted(self, unit: Unit) -> bool: ...


class PreemptionPlanner:
    """One pass's preemption search over ``books`` (the groups' use settled),
    the pass's ``batch`` (None: outside a pass) and the groups' ``caps``
    (quota with lending: :func:`~.quota.compute_caps`)."""

    #: compare the units found short (:meth:`_short`) with a recount in every pass (for tests)
    check_short = False

    def __init__(self, books: Books, batch: Batch | None, caps: Mapping[str, Resources | None]) -> None:
        self.books = books
        self.batch = batch
        self.caps = caps
        self.now = books._now
        self.preemption_budget = books.preemption_budget
        self.preemption_retry_seconds = books.preemption_retry_seconds
        #: candidates looked at in this pass
        self._examined = 0
        #: failed searches remembered across passes (None: not used, as outside a pass)
        self.memo = books._failed_searches if books.search_memo and batch is not None else None
        # for the memo, made when first asked in this pass (None: again after an eviction)
        self._open_now: list[Machine] | None = None
        self._lending_now: dict[tuple, tuple] = {}
        self._at: dict[tuple[str, ...], list[int | None]] = {}
        # what the last _make_room that failed saw: the kinds and amounts of the slot, and per
        # machine the room its candidates freed (the open room left out) -- or None
        self._failed_room: tuple[tuple[str, ...], tuple[int, ...], dict[str, list[int]]] | None = None

    def decisions(self) -> Iterator[Decision]:
        """For units still missing slots, highest priority first: take back
        lent quota, else preempt lower priority, for all missing slots in
        one pass (a gang: only if all of them can be freed).

        The two agree on who owns what, so that neither undoes the other
        (docs/fuxi-scheduling.rst, "Preemption"): a take-back reclaims only
        quota the victim's group borrowed, in a kind the owner needs; and a
        unit whose group would go over its maximum takes from another
        limited group only slots that group holds over its own maximum.
        Otherwise a unit on borrowed quota could preempt the owner's slots
        and the owner take them back at once, for ever (issue 19)."""
        short = self._short()
        # the queued units waiting for quota, by group and slot size (as the pass began: evictions change them)
        parked = [(size, list(members.values())) for size, members in self.books._parked.items()]
        if self.check_short:
            assert {u.key for u in short} | {u.key for _, members in parked for u in members} == \
                {u.key for u in self._short_recounted()}, "queued units"
        if not short and not parked:
            return
        held = self._held_room()
        granted_now = self.books._granted_now
        if not held and all(slot_id in granted_now for slot_id in self.books._slots):
            # nothing to preempt: only the reasons change (in any order; those waiting for quota keep theirs)
            for unit in short:
                if unit.reason == WAIT_NO_FIT and self._held_by_others(unit):
                    yield WaitReason(unit, WAIT_LOWER_PRIORITY)
            return
        # sorting every slot costs O(S log S): only once a unit is due to search (most
        # passes of a busy steady state have none: they searched lately, search_after)
        order: list[Slot] | None = None
        first = 0                                # order[first]: the lowest priority slot still held
        lenders = self._lenders()
        reserved = self._reserved_by_group()
        self._examined = 0
        # searches that found nothing since the last eviction, by what they depend on: the same
        # search again walks the same candidates to the same nothing (the books have not changed)
        failed: dict[tuple, int] = {}
        exhausted: list[tuple[Resources, int]] = []   # (slot, priority): all lower-priority room was looked at
        # (group, id(slot)) -> (own slots, quota slots or None if unlimited): both read the groups' use
        # and the reservations only, which only an eviction changes during the search
        sizes: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        # (priority, id(slot)) -> is a unit of them covered by ``exhausted`` (which only covers more)
        covered: dict[tuple[int, int], bool] = {}
        waiting, idle = self._set_aside(short, parked, reserved, sizes)
        evicted = False                          # (since the idle units were set aside)
        budget = self.preemption_budget
        at = 0
        while True:
            if idle and (evicted or self._examined >= budget):
                # the books changed or the budget ran out: the units set aside after the last one
                # looked at come back, in rank order (those before it did nothing, as they would have)
                if at:
                    last = _by_rank(waiting[at - 1])
                    idle = [unit for unit in idle if _by_rank(unit) > last]
                waiting = sorted(waiting[at:] + idle, key=_by_rank)
                at, idle = 0, []
            if at >= len(waiting):
                break
            unit = waiting[at]
            at += 1
            missing = unit.missing
            if not missing or (unit.preempted_until > self.now and unit.holds) or unit.search_after > self.now:
                continue
            if self.books._never_fits(unit):
                yield WaitReason(unit, WAIT_NEVER_FITS)
                continue
            if self._examined >= self.preemption_budget:
                break                            # the rest try again next pass
            if order is None:
                order = self._victim_order()
            while first < len(order) and order[first].id not in self.books._slots:
                first += 1
            # (the same for every unit of a group and slot size until an eviction changes the books)
            size = (unit.group, id(unit.slot))
            quota = sizes.get(size)
            if quota is None:
                cap_slots = None if self.caps.get(unit.group) is None else self.books._quota_slots(unit, self.caps)
                quota = sizes[size] = (self._own_slots(unit, reserved), cap_slots)
            own = quota[0]
            searched = False
            alike: tuple | None = None           # (asked only for a search: most units do none)
            if first < len(order) and own and lenders and (len(lenders) > 1 or unit.group not in lenders):
                searched = True
                alike = self._alike(unit)
                plan, _ = self._search(failed, alike and ("take back", *alike), unit, min(missing, own),
                                       lambda: self._take_back_walk(unit, order, first))
                if plan:
                    yield Evict(unit, tuple(plan), "quota taken back by its owner")
                    lenders, reserved = self._lenders(), self._reserved_by_group()
                    evicted = True
                    failed.clear()
                    sizes.clear()
                    self._open_now = None
                    self._lending_now.clear()
                    continue
            room = (self.books._quota_slots(unit, self.caps) if quota[1] is None else quota[1]) - unit.reserved
            lower = (first < len(order) and order[first].priority > unit.priority) or \
                (bool(held) and held[0].priority > unit.priority)
            if room > 0 and lower and not self._covered(unit, exhausted, covered):
                want = min(missing, room)
                anyone = own is None or own >= want
                if own is not None and 0 < own < want:
                    want = own                       # the rest, on borrowed quota, in a later pass
                if anyone or own:
                    # within its group's own maximum: any lower priority slot (the walk, lower_only,
                    # stops at the first slot of the unit's priority or higher: None asks nothing more)
                    room_held: Sequence[Reserved] = held
                    kind = "own"
                else:
                    # on borrowed quota: a slot another group holds over its maximum, or one of
                    # its own group at least as big (the swap borrows nothing more) -- never room
                    # a group holds as its own
                    room_held = [r for r in held if r.group == unit.group]
                    kind = "borrowed"
                if not searched:                   # (else the take-back asked)
                    alike = self._alike(unit)
                searched = True
                if kind == "own":
                    walk = lambda: self._candidates(unit, order, first, None, room_held, lower_only=True)
                else:
                    walk = lambda: self._borrowed_walk(unit, order, first, room_held)
                plan, complete = self._search(failed, alike and (kind, *alike), unit, want, walk)
                if complete and anyone and not unit.gang and self._unrestricted(unit):
                    # what it could not free now, no unit of lower or equal priority with a
                    # slot as big can: their victims are among its own (holds only grow)
                    exhausted = [(slot, p) for slot, p in exhausted
                                 if not (p >= unit.priority and slot.contains(unit.slot))]
                    exhausted.append((unit.slot, unit.priority))
                    covered = {size: True for size, yes in covered.items() if yes}   # (only more are now)
                if plan:
                    yield Evict(unit, tuple(plan), f"preempted by a higher priority unit ({unit.key}, "
                                                   f"priority {unit.priority})")
                    lenders, reserved = self._lenders(), self._reserved_by_group()
                    evicted = True
                    failed.clear()
                    sizes.clear()
                    self._open_now = None
                    self._lending_now.clear()
                    continue
                if not (anyone or own) and unit.reason in (WAIT_NO_FIT, WAIT_LOWER_PRIORITY):
                    yield WaitReason(unit, WAIT_QUOTA)   # its group is at its maximum; the rest is others' own
            if searched and self._examined < self.preemption_budget:
                # nothing to take now; the room it could take changes slowly: look again later
                yield SearchLater(unit, self.now + self.preemption_retry_seconds)
            if unit.reason == WAIT_NO_FIT and self._held_by_others(unit):
                yield WaitReason(unit, WAIT_LOWER_PRIORITY)  # units it may not preempt hold the resources

    def _set_aside(self, short: list[Unit], parked: list[tuple[tuple[str, int], list[Unit]]],
                   reserved: Mapping[str, Resources],
                   sizes: dict[tuple[str, int], tuple[int | None, int | None]]) -> tuple[list[Unit], list[Unit]]:
        """The units of ``short`` and ``parked`` (those waiting for quota, by
        group and slot size) due to search (a unit that searched lately
        is passed over, and only its own decision changes when it may search
        again), in rank order, without those that would
        do nothing in this pass while the books stay as they are (``idle``,
        in any order): a unit that waits for another reason than no fit
        (it is told nothing of lower priority units), whose slot fits some
        machine, and whose group and slot size (``sizes``, filled here as
        :meth:`decisions` would fill it before an eviction) leave it no own
        slot (no take-back) and no quota slot (no search) -- most units of
        a group at its quota in a contended cluster, looked at every pass.
        :meth:`decisions` brings them back once an eviction changes the
        books or the budget runs out (the first unit it then reaches stops
        the search), so its decisions are the same. O(units of ``short`` +
        sizes of ``parked``) when the parked ones are idle (a unit set aside
        may be one not due: it would do nothing either)."""
        now = self.now
        active: list[Unit] = []
        idle: list[Unit] = []
        quiet: dict[tuple[str, int], bool] = {}
        for unit in short:
            if unit.search_after > now:
                continue
            if unit.reason == WAIT_NO_FIT:
                active.append(unit)
                continue
            size = (unit.group, id(unit.slot))
            still = quiet.get(size)
            if still is None:
                still = quiet[size] = self._idle(unit, size, reserved, sizes)
            (idle if still else active).append(unit)
        for size, members in parked:
            still = quiet.get(size)
            if still is None:
                still = quiet[size] = self._idle(members[0], size, reserved, sizes)
            if still:
                idle += members
            else:
                active += [unit for unit in members if unit.search_after <= now]
        active.sort(key=_by_rank)
        return active, idle

    def _idle(self, unit: Unit, size: tuple[str, int], reserved: Mapping[str, Resources],
              sizes: dict[tuple[str, int], tuple[int | None, int | None]]) -> bool:
        """Would a unit of this group and slot ``size`` (``unit``, one of
        them) that waits for another reason than no fit do nothing in this
        pass (:meth:`_set_aside`)? ``sizes`` is filled as :meth:`decisions`
        would fill it."""
        books, caps = self.books, self.caps
        quota = sizes.get(size)
        if quota is None:
            cap_slots = None if caps.get(unit.group) is None else books._quota_slots(unit, caps)
            quota = sizes[size] = (self._own_slots(unit, reserved), cap_slots)
        return not quota[0] and quota[1] is not None and quota[1] <= 0 and not books._never_fits(unit)

    def _short(self) -> list[Unit]:
        """The units that miss slots beyond their reservations, active
        scheduling done, but those waiting for quota (the books' ``_parked``):
        those in their waiting queues (queued means just
        that, :meth:`FuxiCore._sync`) and the gangs backing off that miss
        slots (kept out of the queues meanwhile). O(such units), where
        :meth:`_short_recounted` walks every waiting unit. Their order does
        not matter: :meth:`decisions` sorts them by rank (unique)."""
        books = self.books
        units = books._units
        short = list(books._unparked.values())     # (those waiting for quota: books._parked)
        wanting = books._wanting
        for key in books._backing_off:
            unit = units[key]
            if not unit.new and key in wanting and unit.missing > 0:
                short.append(unit)
        return short

    def _short_recounted(self) -> list[Unit]:
        """:meth:`_short` from the waiting units (for checks). O(waiting units)."""
        units = self.books._units
        short = []
        for unit in map(units.__getitem__, self.books._wanting):
            if not unit.new:
                left = unit.desired - len(unit.slots)          # unit.missing, inlined (a call per unit)
                if unit.holds:
                    left -= sum(unit.holds.values())
                if left > 0:
                    short.append(unit)
        return short

    @staticmethod
    def _covered(unit: Unit, exhausted: Sequence[tuple[Resources, int]],
                 covered: dict[tuple[int, int], bool]) -> bool:
        """Is there in ``exhausted`` a slot no bigger than the unit's, of a
        priority no lower (then it could not free what the unit asks)?
        ``covered`` remembers the answers for the unit's priority and slot
        (the slot one object per size, kept alive by its unit)."""
        size = (unit.priority, id(unit.slot))
        known = covered.get(size)
        if known is None:
            known = covered[size] = any(unit.priority >= p and unit.slot.contains(slot) for slot, p in exhausted)
        return known

    def _alike(self, unit: Unit) -> tuple | None:
        """What a search for the unit depends on besides the books, if that
        is all: its group, priority and slot (one object per size), for a
        unit that is no gang, may use any machine and holds no reservation.
        A search for another such unit alike finds what this one found."""
        if unit.gang or unit.holds or unit.spec.node_labels or not self._unrestricted(unit):
            return None
        return unit.group, unit.priority, id(unit.slot)

    def _search(self, failed: dict[tuple, int], key: tuple | None | bool, unit: Unit, missing: int,
                candidates: Callable[[], Iterator[Victim]]) -> tuple[list[tuple[Machine, list[Victim], int]] | None, bool]:
        """:meth:`_make_room`, unless a search alike (``key``) found nothing
        since the books last changed: then its answer, with the candidates
        it looked at counted against the budget as this search would count
        them (it stops where the budget ends). ``failed`` remembers the
        searches that looked at every candidate and found nothing."""
        if key:
            seen = failed.get(key)           # type: ignore[arg-type]
            if seen is None and self.memo is not None:
                seen = self._remembered(key, unit)   # type: ignore[arg-type]
                if seen is not None:
                    failed[key] = seen               # type: ignore[index]
            if seen is not None:
                until_budget = max(1, self.preemption_budget + 1 - self._examined)
                if seen >= until_budget:
                    self._examined += until_budget
                    return None, False
                self._examined += seen
                return None, True
        before = self._examined
        self._failed_room = None
        walked: list[Victim] | None = None
        if key and self.memo is not None and key[0] == "take back":     # type: ignore[index]
            walked = []                  # (its candidates, for the memo to follow)
            plan, complete = self._make_room(unit, missing, _recording(candidates(), walked.append))
        else:
            plan, complete = self._make_room(unit, missing, candidates())
        if key and plan is None and complete:
            failed[key] = self._examined - before      # type: ignore[index]
            if self.memo is not None:
                self._remember(key, unit, self._examined - before, walked)   # type: ignore[arg-type]
        return plan, complete

    # ------------------------------------------------ the failed searches' memo
    def _remember(self, key: tuple, unit: Unit, examined: int, walked: list[Victim] | None = None) -> None:
        """Keep a search alike (``key``) that looked at ``examined``
        candidates (``walked``, of a take-back) and found nothing, with what
        it read (:class:`FailedSearches`)."""
        made = self._failed_room
        memo = self.memo
        if made is None or memo is None:          # (a _make_room that does not say what it saw)
            return
        kinds, amounts, rooms = made
        kind = key[0]
        lending = None if kind == "own" else self._lending(kinds, unit.group)
        # the groups whose slots the walk may take: those that lent (and its own, on borrowed quota)
        watch = frozenset() if lending is None else frozenset(name for name, _ in lending)
        if kind == "borrowed":
            watch |= {unit.group}
        if len(memo.entries) >= memo.limit:
            memo.entries.clear()
        follow = None if walked is None or lending is None else _follow(lending, kinds, walked)
        memo.entries[key] = _Failed(unit.slot, unit.group, self.books._victims.stamp, None if kind == "take back" else unit.priority,
                                    None if kind == "take back" else self.books._holds_changes, lending, watch,
                                    examined, kinds, amounts, rooms, follow)
        memo.stored += 1

    def _remembered(self, key: tuple, unit: Unit) -> int | None:
        """The candidates a search alike (``key``) that found nothing looked
        at, if it would look at the same ones now and find nothing again;
        else None (and it is forgotten)."""
        memo = self.memo
        entry = memo.entries.get(key) if memo is not None else None
        if entry is None:
            return None
        if entry.slot is unit.slot and self._still(entry):
            entry.stamp = self.books._victims.stamp     # (as if found now: later checks look at less)
            memo.hits += 1                              # type: ignore[union-attr]
            return entry.examined
        del memo.entries[key]                           # type: ignore[union-attr]
        return None

    def _still(self, entry: _Failed) -> bool:
        """Would the search ``entry`` remembers find nothing now? Its
        candidates are the same if no slot of a priority it walks was added
        or dropped since (those of any priority for a take-back), no
        reservation changed (if it walks them) and no limited group's use
        changed (if it asks what a group borrowed); a machine of its
        candidates then fits no slot unless its open room in this batch
        grew enough (machines outside the batch have none)."""
        books = self.books
        victims = books._victims
        if entry.follow is not None:
            if not self._follow_up(entry):
                return False
        elif victims.stamp != entry.stamp:
            floor = entry.floor
            if entry.lending is None:
                # a search of its own group's maximum ("own") takes every lower priority slot: what it
                # would find now is what it found, with the slots added or dropped since
                if not self._replay(entry):
                    return False
            else:
                # a walk asking what groups borrowed takes slots of those groups only (and of its own):
                # the same while none of theirs it may take was added or dropped
                start = entry.stamp - victims.log_start
                if start < 0:
                    return False
                watch = entry.watch
                for slot, _ in victims.log[start:]:
                    if slot.group in watch and (floor is None or slot.priority > floor):
                        return False
        if entry.holds is not None and entry.holds != books._holds_changes:
            return False
        if entry.follow is None and entry.lending is not None and entry.lending != self._lending(entry.kinds, entry.group):
            return False
        rooms = entry.rooms
        if rooms:
            open_now = self._open_now
            if open_now is None:
                open_now = self._open_now = self._open_machines()
            if open_now:
                at = self._kinds_at(entry.kinds)
                amounts = entry.amounts
                for machine in open_now:
                    room = rooms.get(machine.agent_id)
                    if room is None:
                        continue
                    open_room = machine.open
                    for j, i in enumerate(at):
                        have = room[j] + (open_room[i] if i is not None and open_room[i] > 0 else 0)
                        if have < amounts[j]:
                            break
                    else:
                        return False            # a slot fits there now
        return True

    def _follow_up(self, entry: _Failed) -> bool:
        """Bring a remembered take-back (:class:`_Lent` per lending group) up
        to the slots added and dropped since, and tell whether its members
        are what the walk would take now: the same groups lend, each in the
        same one kind, an excess its members cover as the walk would. False
        if not (or a machine a member was added on now fits a slot, or the
        log is too short)."""
        victims, follow = self.books._victims, entry.follow
        assert follow is not None
        grown: list[str] = []
        if victims.stamp != entry.stamp:
            start = entry.stamp - victims.log_start
            if start < 0:
                return False
            rooms, kinds = entry.rooms, entry.kinds
            width = range(len(kinds))
            for slot, sign in victims.log[start:]:
                lent = follow.get(slot.group)
                if lent is None:
                    continue                     # (a group that does not lend: the walk takes none of its slots)
                uses = slot.resources.millis()
                use = uses.get(lent.kind, 0)
                if use <= 0:
                    continue                     # never taken: it uses nothing of what the group lends
                if sign > 0:
                    if _victim_key(slot) >= _victim_key(lent.last):
                        continue                 # after the members: the walk stops before it
                    lent.members[slot.id] = slot
                    lent.total += use
                    room = rooms.get(slot.agent_id)
                    if room is None:
                        room = rooms[slot.agent_id] = [0] * len(kinds)
                    for j in width:
                        room[j] += uses.get(kinds[j], 0)
                    entry.examined += 1
                    grown.append(slot.agent_id)
                elif lent.members.get(slot.id) is slot:
                    del lent.members[slot.id]
                    lent.total -= use
                    room = rooms[slot.agent_id]
                    for j in width:
                        room[j] -= uses.get(kinds[j], 0)
                    entry.examined -= 1
                    if slot is lent.last:
                        if not lent.members:
                            return False
                        lent.last = max(lent.members.values(), key=_victim_key)
        lending = self._lending(entry.kinds, entry.group)
        if len(lending) != len(follow):
            return False
        for name, over in lending:
            lent = follow.get(name)
            if lent is None or not _lends_in(over, lent.at):
                return False
            excess = over[lent.at]
            if excess > lent.total:
                return False                     # the walk would take slots after the members
            if lent.total - lent.last.resources.millis().get(lent.kind, 0) >= excess:
                # the excess shrank by more than the members dropped (slots after them ended): the walk
                # takes fewer, the first of them in victim order (less room: no machine fits more)
                self._trim(entry, lent, excess)
        if grown:
            return self._none_fits(entry, grown)
        return True

    @staticmethod
    def _trim(entry: _Failed, lent: _Lent, excess: int) -> None:
        """Drop ``lent``'s last members until the others no longer cover
        ``excess`` (it stays above nought: one member at least is left)."""
        ordered = sorted(lent.members.values(), key=_victim_key)
        rooms, kinds, kind = entry.rooms, entry.kinds, lent.kind
        while True:
            last = ordered[-1]
            uses = last.resources.millis()
            if lent.total - uses.get(kind, 0) < excess:
                break
            ordered.pop()
            del lent.members[last.id]
            lent.total -= uses.get(kind, 0)
            room = rooms[last.agent_id]
            for j, name in enumerate(kinds):
                room[j] -= uses.get(name, 0)
            entry.examined -= 1
        lent.last = last

    def _none_fits(self, entry: _Failed, agents: list[str]) -> bool:
        """Does no machine of ``agents`` fit a slot of the search ``entry``
        remembers, with the room its candidates free there and its open room
        in this batch?"""
        machines, amounts, rooms = self.books._machines, entry.amounts, entry.rooms
        at = self._kinds_at(entry.kinds) if self.batch is not None else None
        width = range(len(entry.kinds))
        for agent in agents:
            room = rooms[agent]
            machine = machines.get(agent)
            if machine is None:
                return False
            open_room = machine.open if at is not None and machine.in_batch else None
            for j in width:
                have = room[j]
                if open_room is not None:
                    i = at[j]            # type: ignore[index]
                    if i is not None and open_room[i] > 0:
                        have += open_room[i]
                if have < amounts[j]:
                    break
            else:
                return False             # a slot fits there now
        return True

    def _replay(self, entry: _Failed) -> bool:
        """Bring a remembered search that takes every slot of a priority
        above its floor up to the slots added and dropped since: its
        candidates' count and rooms change by theirs. False if a machine
        a slot was added on now fits a slot (or the log is too short)."""
        victims = self.books._victims
        start = entry.stamp - victims.log_start
        if start < 0:
            return False
        floor, rooms, kinds = entry.floor, entry.rooms, entry.kinds
        width = range(len(kinds))
        examined = entry.examined
        grown: list[str] = []
        for slot, sign in victims.log[start:]:
            if slot.priority <= floor:   # type: ignore[operator]
                continue
            agent = slot.agent_id
            room = rooms.get(agent)
            if room is None:
                if sign < 0:
                    return False             # (not one it counted: no longer sure what it counted)
                room = rooms[agent] = [0] * len(kinds)
            uses = slot.resources.millis()
            for j in width:
                room[j] += sign * uses.get(kinds[j], 0)
            examined += sign
            if sign > 0:
                grown.append(agent)
        entry.examined = examined
        return self._none_fits(entry, grown) if grown else True

    def _kinds_at(self, kinds: tuple[str, ...]) -> list[int | None]:
        """Each kind's place in the batch's vectors (None: not there)."""
        at = self._at.get(kinds)
        if at is None:
            index = {name: i for i, name in enumerate(self.batch.dims.names)}   # type: ignore[union-attr]
            at = self._at[kinds] = [index.get(kind) for kind in kinds]
        return at

    def _open_machines(self) -> list[Machine]:
        """The machines of this batch with open room in some kind."""
        batch = self.batch
        if batch is None:
            return []
        return [m for m in batch.machines if m.in_batch and any(v > 0 for v in m.open)]

    def _lending(self, kinds: tuple[str, ...], own: str) -> tuple:
        """The groups but ``own`` over their maximum in one of ``kinds``,
        each with its excess in those kinds: all that a walk of
        :meth:`_borrowed` reads of the groups. O(groups x kinds)."""
        known = self._lending_now.get((kinds, own))
        if known is None:
            lending = []
            for group in self.books.groups.values():
                if group.maximum is not None and group.name != own:
                    cap, used = group.maximum.millis(), group.used.millis()
                    over = tuple(used.get(kind, 0) - cap.get(kind, 0) for kind in kinds)
                    if any(v > 0 for v in over):
                        lending.append((group.name, over))
            known = self._lending_now[(kinds, own)] = tuple(lending)
        return known

    def _reserved_by_group(self) -> dict[str, Resources]:
        """The room reserved for each group's units (it becomes the group's use
        when granted). O(reservations)."""
        out: dict[str, Resources] = {}
        for key in self.books._holders:
            unit = self.books._units[key]
            room = unit.slot.scale(unit.reserved)
            out[unit.group] = out[unit.group] + room if unit.group in out else room
        return out

    def _own_slots(self, unit: Unit, reserved: Mapping[str, Resources]) -> int | None:
        """How many more slots of the unit its group's own maximum holds, its
        use and the room reserved for its units counted (None: no maximum)."""
        group = self.books.groups[unit.group]
        if group.maximum is None:
            return None
        taken = group.used + reserved[group.name] if group.name in reserved else group.used
        return how_many_within(group.maximum, taken, unit.slot)

    def _take_back_walk(self, unit: Unit, order: list[Slot], first: int) -> Iterator[Victim]:
        """The candidates of a take-back: slots of other groups that hold
        quota they borrowed (:meth:`_borrowed`), lowest priority first."""
        borrowed, groups = self._borrowed(unit.slot, unit.group)
        return self._candidates(unit, order, first, lambda s: s.group != unit.group and borrowed(s), groups=groups)

    def _borrowed_walk(self, unit: Unit, order: list[Slot], first: int, held: Sequence[Reserved]) -> Iterator[Victim]:
        """The candidates of a unit on borrowed quota: lower priority slots
        another group holds over its maximum (:meth:`_borrowed`), or of its
        own group at least as big as its slot, and its own group's room
        reserved for lower priority units (``held``), lowest priority first."""
        borrowed, groups = self._borrowed(unit.slot, unit.group)
        priority, group, slot = unit.priority, unit.group, unit.slot
        held_by = self.books._held_by.get(group)
        if held_by and any(p > priority for p in held_by):
            groups.add(group)            # (else no slot of its own group is of lower priority: none to ask)
        may_take = lambda s: s.priority > priority and (s.resources.contains(slot) if s.group == group
                                                         else borrowed(s))
        return self._candidates(unit, order, first, may_take, held, lower_only=True, groups=groups)

    def _borrowed(self, need: Resources, own: str) -> tuple[Callable[[Slot], bool], set[str]]:
        """For one search: does a slot hold quota its group borrowed, in a kind
        ``need`` uses too -- is its group over its maximum in such a kind that
        the slot uses? The slots it says yes to are taken off the group's
        excess, so one search takes little more than the group borrowed.
        O(groups x kinds), then O(kinds) a slot. With it, the groups but
        ``own`` over their maximum in a kind ``need`` uses: it says no to
        any slot of another group. A group whose excess in those kinds is
        used up is taken out of that set (a set the walk reads: once it is
        empty, the walk's other slots would all be refused)."""
        excess: dict[str, dict[str, int]] = {}
        kinds = [kind for kind, amount in need.millis().items() if amount > 0]
        groups: set[str] = set()
        for group in self.books.groups.values():
            if group.maximum is not None:
                cap = group.maximum.millis()
                over = {k: v - cap.get(k, 0) for k, v in group.used.millis().items() if v > cap.get(k, 0)}
                if over:
                    excess[group.name] = over
                    if group.name != own and any(over.get(kind, 0) > 0 for kind in kinds):
                        groups.add(group.name)

        def borrowed(slot: Slot) -> bool:
            over = excess.get(slot.group)
            if not over:
                return False
            uses = slot.resources.millis()
            if not any(over.get(kind, 0) > 0 and uses.get(kind, 0) > 0 for kind in kinds):
                return False
            for kind, amount in uses.items():
                if kind in over:
                    over[kind] -= amount
            if not any(over.get(kind, 0) > 0 for kind in kinds):
                groups.discard(slot.group)      # none of its slots is refused by this group's test only
            return True
        return borrowed, groups

    def _unrestricted(self, unit: Unit) -> bool:
        """May the unit use any machine (no locality limit, blacklist, avoided
        host or per-machine limit)?"""
        return CLUSTER_SCOPE in unit.scopes and not (unit.spec.blacklist or unit.blocked or unit.avoid
                                                      or unit.spec.max_per_machine is not None)

    def _lenders(self) -> set[str]:
        """The groups holding more than their maximum: lent quota to take back."""
        return {g.name for g in self.books.groups.values() if g.over_maximum()}

    def _victim_order(self) -> list[Slot]:
        """Every slot not granted in this pass, lowest priority first, newest
        first among equal priority (seed 002), perhaps with slots no longer
        held among them (skipped as those this pass evicts are): the books'
        :class:`VictimOrder`. O(slots granted since the last pass that
        preempted x log S)."""
        return self.books._victims.order(self.books._granted_now)

    def _held_room(self) -> list[Reserved]:
        """Every reservation but those made in this pass, lowest priority
        first: room preemption may take back before it kills a task of the
        same priority."""
        held = [Reserved(key, agent, unit.slot.scale(count), unit.priority, unit.group)
                for key in self.books._holders for unit in (self.books._units[key],) for agent, count in unit.holds.items()
                if (key, agent) not in self.books._held_now]
        return sorted(held, key=lambda r: (-r.priority, r.agent_id, r.unit))

    def _candidates(self, unit: Unit, order: list[Slot], first: int, may_take: Callable[[Slot], bool] | None,
                    held: Sequence[Reserved] = (), lower_only: bool = False,
                    groups: Collection[str] | None = None) -> Iterator[Slot | Reserved]:
        """What ``unit`` may take, on machines it may use, lowest priority
        first: the slots of ``order`` from ``first`` that ``may_take``
        allows (None: every one), and the reservations in ``held`` of lower
        priority than the unit's (at each priority, reserved room before
        running slots). ``lower_only``: ``may_take`` allows only slots of
        lower priority than the unit's, so the walk stops at the first other
        one. ``groups``: ``may_take`` allows only slots of these groups (None:
        of any), asked first (most slots of a take-back's walk are of groups
        within their maximum)."""
        books = self.books   # (the books' parts as locals: this loop runs once per candidate)
        units, slots, machines, in_scope, allowed = (books._units, books._slots, books._machines, books._in_scope,
                                                     books._allowed)
        lowest: Iterator[Slot] = itertools.islice(order, first, None)
        if lower_only:
            priority = unit.priority
            lowest = itertools.takewhile(lambda s: s.priority > priority, lowest)
        ahead = [r for r in held if r.priority > unit.priority]
        if not ahead:       # running slots only: no merge (most searches; a candidate costs less)
            if books._unrestricted(unit) and CLUSTER_SCOPE in unit.scopes:
                # every machine is in its scope and allowed: no question per candidate but the slot's
                if may_take is None:
                    for slot in lowest:
                        if slot.id in slots and slot.agent_id in machines:
                            yield slot
                    return
                if groups is not None:
                    # ``groups`` may shrink as the walk goes (:meth:`_borrowed`): once empty, no slot is taken
                    for slot in lowest:
                        if slot.group in groups and slot.id in slots and may_take(slot) and slot.agent_id in machines:
                            yield slot
                        if not groups:
                            return
                    return
                for slot in lowest:
                    if slot.id in slots and may_take(slot) and slot.agent_id in machines:
                        yield slot
                return
            for slot in lowest:
                if slot.id not in slots or (groups is not None and slot.group not in groups) or \
                        (may_take is not None and not may_take(slot)):
                    continue
                machine = machines.get(slot.agent_id)
                if machine is not None and in_scope(unit, machine) and allowed(unit, machine):
                    yield slot
            return
        reserved: Iterator[tuple[int, int, Slot | Reserved]] = ((-r.priority, 0, r) for r in ahead)
        running: Iterator[tuple[int, int, Slot | Reserved]] = ((-s.priority, 1, s) for s in lowest)
        for _, _, victim in heapq.merge(reserved, running, key=lambda item: item[:2]):
            if isinstance(victim, Reserved):
                holder = units.get(victim.unit)
                if holder is None or not holder.holds.get(victim.agent_id) or holder is unit:
                    continue
            elif victim.id not in slots or (groups is not None and victim.group not in groups) or \
                    (may_take is not None and not may_take(victim)):
                continue
            machine = machines.get(victim.agent_id)
            if machine is not None and in_scope(unit, machine) and allowed(unit, machine):
                yield victim

    def _make_room(self, unit: Unit, missing: int, candidates: Iterator[Slot | Reserved]
                   ) -> tuple[list[tuple[Machine, list[Slot | Reserved], int]] | None, bool]:
        """Victims that make room for ``missing`` slots of ``unit``, taken
        in the candidates' order (lowest priority first) until enough room
        is free, each machine counting its open room in this batch too; then
        only the victims that made a slot's room are kept. Returns
        ``(machine, victims, slots made)`` per machine, or None if no slot
        can be made (a gang: unless all ``missing`` can); and whether every
        candidate was looked at. Stops at the pass's ``preemption_budget``
        of candidates looked at.

        The room freed on a machine is counted only in the kinds the unit's
        slot asks for (how many slots it holds depends on nothing else), as
        a list of integers per machine: a candidate costs O(kinds of the
        slot), not a sum of Resources and a division of two (a contended
        simulation looks at some two million candidates)."""
        batch, machines = self.batch, self.books._machines
        needs = [(kind, amount) for kind, amount in unit.slot.millis().items() if amount > 0]
        if not needs:                            # (an empty slot: no slot of it is counted anywhere)
            return self._make_no_room(candidates)
        kinds = [kind for kind, _ in needs]
        amounts = [amount for _, amount in needs]
        width = range(len(needs))
        at: list[int | None] | None = None       # each kind's place in the batch's vectors (None: not there)
        freed: dict[str, list[int]] = {}
        opened: list[tuple[str, list[int]]] = []  # the machines whose room began with open room, and that
        chosen: dict[str, list[Slot | Reserved]] = {}
        made: dict[str, int] = {}
        useful: dict[str, int] = {}
        total = 0
        limit = unit.spec.max_per_machine
        complete = True
        budget = self.preemption_budget
        for slot in candidates:
            self._examined += 1
            if self._examined > budget:
                complete = False
                break
            agent = slot.agent_id
            room = freed.get(agent)
            if room is None:
                machine = machines[agent]
                if batch is not None and machine.in_batch:
                    if at is None:
                        index = {name: i for i, name in enumerate(batch.dims.names)}
                        at = [index.get(kind) for kind in kinds]
                    open_room = machine.open
                    room = [0 if i is None or open_room[i] <= 0 else open_room[i] for i in at]
                    if any(room):
                        opened.append((agent, room[:]))
                else:
                    room = [0] * len(needs)
                freed[agent] = room
                chosen[agent], made[agent] = [], 0
            uses = slot.resources.millis()
            can = -1
            for i in width:
                have = room[i] = room[i] + uses.get(kinds[i], 0)
                fits_here = have // amounts[i]
                if can < 0 or fits_here < can:
                    can = fits_here
            if can < 0:
                can = 0
            chosen[agent].append(slot)
            if limit is not None:
                can = min(can, limit - unit.per_host.get(machines[agent].hostname, 0) - unit.holds.get(agent, 0))
            if can > made[agent]:
                total += can - made[agent]
                made[agent] = can
                useful[agent] = len(chosen[agent])
                if total >= missing:
                    complete = False
                    break
        if total == 0 or (unit.gang and total < missing):
            if total == 0 and complete:
                for agent, open_part in opened:      # the room the candidates freed, without the open room
                    freed_here = freed[agent]
                    for i in width:
                        freed_here[i] -= open_part[i]
                self._failed_room = (tuple(kinds), tuple(amounts), freed)
            return None, complete
        return _plan(machines, chosen, made, useful, total - missing), complete

    def _make_no_room(self, candidates: Iterator[Slot | Reserved]) -> tuple[None, bool]:
        """:meth:`_make_room` for a slot that asks for nothing: no slot of it is
        ever made; every candidate is looked at (up to the budget)."""
        for _ in candidates:
            self._examined += 1
            if self._examined > self.preemption_budget:
                return None, False
        self._failed_room = ((), (), {})
        return None, True

    def _held_by_others(self, unit: Unit) -> bool:
        """Could the unit fit on a machine it may use, were the slots there
        gone? (Then units it may not preempt hold the room.) O(distinct
        capacities), or O(machines) for a unit limited to some."""
        if len(self.books._slots) == sum(u.granted for u in self.books.jobs[unit.job_id].units.values()):
            return False                          # nobody else holds anything
        if CLUSTER_SCOPE in unit.scopes:
            return not self.books._never_fits(unit)
        need = unit.slot.millis()
        return any(all(m.capacity.get(k, 0) >= v for k, v in need.items()) for m in self.books._machines.values()
                   if self.books._in_scope(unit, m) and self.books._allowed(unit, m))


def _recording(candidates: Iterator[Victim], record: Callable[[Victim], None]) -> Iterator[Victim]:
    """The candidates, each given to ``record`` as it is looked at."""
    for victim in candidates:
        record(victim)
        yield victim


def _lends_in(over: tuple[int, ...], at: int) -> bool:
    """Is the only kind in ``over`` (a group's excess over its maximum per
    kind) above nought the one at ``at``?"""
    return over[at] > 0 and not any(v > 0 for i, v in enumerate(over) if i != at)


def _follow(lending: tuple, kinds: tuple[str, ...], walked: Sequence[Victim]) -> dict[str, _Lent] | None:
    """What a take-back's walk (``walked``: its candidates) took of each
    lending group (:class:`_Lent`), if each lends in one kind of ``kinds``
    only and the walk took up its excess; else None (the memo then asks
    that nothing of theirs changed)."""
    follow: dict[str, _Lent] = {}
    for name, over in lending:
        positive = [i for i, v in enumerate(over) if v > 0]
        if len(positive) != 1:
            return None
        follow[name] = _Lent(kinds[positive[0]], positive[0], {}, 0, None)   # type: ignore[arg-type]
    for victim in walked:
        if not isinstance(victim, Slot):
            return None
        lent = follow.get(victim.group)
        if lent is None:
            return None
        lent.members[victim.id] = victim
        lent.total += victim.resources.millis().get(lent.kind, 0)
        lent.last = victim
    for name, over in lending:
        lent = follow[name]
        if lent.last is None:
            return None
        if not lent.total - lent.last.resources.millis().get(lent.kind, 0) < over[lent.at] <= lent.total:
            return None                        # (the walk did not take up its excess: its slots ran out)
    return follow


def _plan(machines: Mapping[str, Machine], chosen: Mapping[str, list[Victim]], made: Mapping[str, int],
          useful: Mapping[str, int], extra: int) -> list[tuple[Machine, list[Victim], int]]:
    """A search's plan, machine by machine in agent order: the victims that
    made room (the first ``useful`` of those ``chosen`` there) and the slots
    they make, ``extra`` slots more than missing cut from the first machines
    (each keeping one)."""
    plan = []
    for agent in sorted(useful):
        slots = made[agent]
        if extra > 0:
            cut = min(extra, slots - 1)
            slots, extra = slots - cut, extra - cut
        plan.append((machines[agent], chosen[agent][:useful[agent]], slots))
    return plan
