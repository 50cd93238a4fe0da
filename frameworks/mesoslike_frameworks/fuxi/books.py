"""The Fuxi scheduler's books: what :class:`~.core.FuxiCore` keeps of
slots, machines, units and reservations, and the reasons a unit waits —
shared by the core, which alone changes them, and its preemption planner
(:mod:`.preemption`), which reads them. Plain records, no logic beyond
their own arithmetic.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from mesoslike import Resources
from mesoslike_frameworks.fuxi.machines import Vector
from mesoslike_frameworks.fuxi.model import Locality, UnitSpec

__all__ = ["EMPTY", "CLUSTER_SCOPE", "WAIT_QUOTA", "WAIT_BLACKLIST", "WAIT_NO_FIT", "WAIT_LOWER_PRIORITY",
           "WAIT_ALL_OR_NOTHING", "WAIT_NEVER_FITS", "WAIT_NO_LABELS", "Slot", "Machine", "NO_ENTRIES", "NOTHING_GRANTED", "Unit", "Reserved",
           "how_many", "how_many_within"]

EMPTY = Resources()
#: why a unit waits (``status()``)
WAIT_QUOTA = "quota"
WAIT_BLACKLIST = "blacklist"
WAIT_NO_FIT = "no fit"
WAIT_LOWER_PRIORITY = "lower priority"
WAIT_ALL_OR_NOTHING = "all-or-nothing: not every slot fits at once"
WAIT_NEVER_FITS = "no machine can ever fit"
#: a unit with node labels no machine seen has: "no machine with labels ssd=true, rack=r1"
WAIT_NO_LABELS = "no machine with labels"
#: the waiting-queue scope of units that may run anywhere
CLUSTER_SCOPE = "*"


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


#: a machine's mappings before it has any (read-only: they are replaced, never changed)
_NONE: Mapping[str, Any] = {}
class _NoEntries(dict[Any, Any]):
    """An empty dict that refuses entries (TypeError): the slots and the
    reservations of every machine that has none, shared, so a first batch
    of 100,000 machines makes no two dicts per machine. Whoever adds the
    first entry gives the machine a dict of its own (:data:`NO_ENTRIES`)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("the shared empty mapping of a machine: give it a dict of its own first")

    __setitem__ = __delitem__ = __ior__ = setdefault = update = clear = popitem = _refuse


#: the slots (and the reservations) of a machine that has none: shared, read-only (:class:`_NoEntries`)
NO_ENTRIES: dict[Any, Any] = _NoEntries()
#: a machine's slots granted in a batch while it has none (read, never appended to: its first grant
#: gives it a list of its own), so the machines of a batch that get no slot make no list
NOTHING_GRANTED: list[Any] = []


class Machine:
    """An agent seen in an offer: the slots and reservations on it, the most
    it was seen to have, and, during a pass, its offers and free room. A
    plain class: a first pass over 20,000 machines makes 20,000 of them."""

    __slots__ = ("agent_id", "hostname", "room", "slots", "holds", "capacity", "in_batch", "free", "open",
                 "offer_ids", "granted", "at", "room_at", "attributes", "offered")

    def __init__(self, agent_id: str, hostname: str, room: str, attributes: Mapping[str, str] = _NONE,
                 offered: Mapping[str, int] = _NONE, offer_ids: list[str] | tuple[str] | None = None,
                 free: Vector = (), at: int = -1, capacity: Mapping[str, int] = _NONE) -> None:
        # a machine first seen in an offer is made with that offer's fields (``attributes``,
        # ``offered``, ``offer_ids``, and then in a batch): one store each, not two; a first batch
        # (FuxiCore._take_first_offers) gives it its free room, place and capacity too
        self.agent_id = agent_id
        self.hostname = hostname
        self.room = room
        self.attributes = attributes             # its agent's, from its latest offer (node labels match them)
        self.slots: dict[str, Slot] = NO_ENTRIES  # every slot held on it (its own dict from its first)
        self.holds: dict[str, int] = NO_ENTRIES   # unit key -> slots of it reserved here (the same)
        self.capacity: Mapping[str, int] = capacity  # millis (read-only: replaced, never changed): the most seen on it, offered + held by our slots
        # this batch only (reset when the offers are answered)
        self.in_batch = offer_ids is not None
        self.free: Vector = free                 # offered and not granted, over the batch's kinds
        self.open: Vector = free                 # free minus the reservations: what any unit may take
        # a list, appended to (an agent of several offers), or a first batch's one id as a tuple
        self.offer_ids: list[str] | tuple[str, ...] = [] if offer_ids is None else offer_ids
        self.offered = offered                   # millis (read-only): what its offers in this batch add up to
        self.granted: list[Slot] = NOTHING_GRANTED   # (its first grant in a batch makes its list)
        self.at = at                             # its position in the batch's cluster scope
        self.room_at = -1                        # and in its room's (once that scope is built)


@attrs.define(eq=False)
class Unit:
    key: str                      # "<job id>/<unit name>", the waiting queues' id
    job_id: str
    spec: UnitSpec
    priority: int
    group: str
    submitted: int
    desired: int
    blacklist_seconds: float
    #: ``spec.slot``, the one object of its size (:meth:`FuxiCore._intern`): caches keyed by identity hit
    slot: Resources
    slots: dict[str, Slot] = attrs.field(factory=dict)
    per_host: dict[str, int] = attrs.field(factory=dict)
    blocked: dict[str, float] = attrs.field(factory=dict)  # host -> until when the job blacklists it
    avoid: frozenset[str] = frozenset()  # hosts its next slots should not go to (the job says, and changes it)
    scopes: tuple[str, ...] = (CLUSTER_SCOPE,)            # the waiting queues it goes to
    preferences: tuple[Locality, ...] = ()                 # its locality, LT_MACHINE > LT_ENGINEROOM > LT_CLUSTER
    holds: dict[str, int] = attrs.field(factory=dict)      # agent id -> slots reserved for it there
    held_until: float = math.inf  # its reservations end then
    preempted_until: float = -math.inf  # no more preemption for it before (its victims' room is coming)
    search_after: float = -math.inf     # its last preemption search found nothing: no other before then
    backoff_until: float = -math.inf    # a gang whose reservations expired reserves only within a pass until then
    new: bool = True              # active scheduling not done yet
    queued: bool = False          # in its waiting queues
    reason: str = ""              # why it waits, from the last pass
    counted: int = 0              # its waiting slots as counted in its group's demand (FuxiCore._sync)

    @property
    def granted(self) -> int:
        return len(self.slots)

    @property
    def waiting(self) -> int:
        return max(0, self.desired - len(self.slots))

    @property
    def reserved(self) -> int:
        return sum(self.holds.values()) if self.holds else 0

    @property
    def missing(self) -> int:
        """Slots it waits for beyond those reserved for it."""
        left = self.desired - len(self.slots)
        if self.holds:
            left -= sum(self.holds.values())
        return left if left > 0 else 0

    @property
    def gang(self) -> bool:
        return self.spec.all_or_nothing


@attrs.frozen
class Reserved:
    """Room reserved on ``agent_id`` for ``unit`` (its key), of ``priority``:
    preemption may take it back for a higher priority unit, killing nothing."""
    unit: str
    agent_id: str
    resources: Resources
    priority: int
    group: str


def how_many(room: Resources, slot: Resources) -> int:
    """How many ``slot``s fit in ``room``. O(kinds)."""
    have = room.millis()
    count = None
    for kind, need in slot.millis().items():
        if need > 0:
            fits_here = have.get(kind, 0) // need
            count = fits_here if count is None or fits_here < count else count
    return max(count or 0, 0)


def how_many_within(cap: Resources, used: Resources, slot: Resources) -> int:
    """``how_many(cap.subtract_clamped(used), slot)`` without making the room. O(kinds)."""
    limit, taken = cap.millis(), used.millis()
    count = None
    for kind, need in slot.millis().items():
        if need > 0:
            left = limit.get(kind, 0) - taken.get(kind, 0)
            fits_here = left // need if left > 0 else 0
            count = fits_here if count is None or fits_here < count else count
    return count or 0
