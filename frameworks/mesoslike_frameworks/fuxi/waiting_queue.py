"""The waiting queue of one quota group: passive scheduling in Fuxi (docs/fuxi-queue.rst).

When resources free up on a machine ("OnResourceFree"), the scheduler asks
the hungriest quota group's queue for *the highest-priority waiting
ScheduleUnit whose slot fits the free resources*. A linear scan in priority
order answers that in O(N) and, when the free space is small, wastes nearly
all of it on units that are too big. :class:`WaitingQueue` answers it without
looking at units that cannot fit.

Order
    Smaller ``priority`` number first. Among equal priority, ``FIFO``: smaller
    ``submitted`` (a submission sequence number) first; ``FAIR``: fewer
    ``granted`` slots first, then smaller ``submitted``. The unit id breaks the
    last tie, so the order is total and deterministic.

Fits
    A unit fits ``free`` when ``free.contains(slot)``: every scalar of the slot
    is <= the same scalar of ``free`` (a kind that ``free`` lacks counts 0).

Structure
    1. **One sub-queue per distinct slot size** (a ``SortedList`` of order keys).
       Every unit of a sub-queue has the same slot, so either all of it fits or
       none does, and only its head can be the answer.
    2. **A tree over the sizes**: an implicit, array-backed binary tree with
       one leaf per size. Each node keeps, over the sizes below it whose
       sub-queue is not empty, the smallest head key and which size holds it,
       and the component-wise minimum and maximum slot (a bounding box).
    3. **Leaves in k-d order**, so that a node covers sizes close together and
       its box is tight: recursive splits on the dimension of widest spread.
       New sizes keep it so by the logarithmic method (Bentley-Saxe): the used
       leaves form aligned blocks whose sizes are the one bits of their count,
       each block a subtree in k-d order of its own, and a new size merges the
       trailing blocks of 1, 2, ..., 2^(t-1) leaves into one block of 2^t.

    ``pick(free)`` is a best-first search: a heap of nodes by their smallest
    head key, starting at the root. A node whose minimum corner does not fit
    is dropped (no size below it fits); a node whose maximum corner fits is
    the answer (every size below it fits, and its smallest head key is
    smaller than that of everything left); any other node is replaced by its
    children. The first node that fits whole holds the answer, which is
    exactly what a linear scan in queue order would return.

Complexity (N waiting units, S distinct slot sizes, d resource kinds)
    * ``pick``: O(E log E) for the E nodes popped from the heap, and nothing
      per waiting unit: E does not depend on N, only on the sizes near the
      edge of ``free``. Only nodes that straddle that edge (their box fits
      partly) are expanded, and only while their smallest head key beats the
      answer's. With one resource kind a block has at most one such node per
      level, so E = O(log S) per block and O(log^2 S) over the O(log S)
      blocks. With d >= 2 kinds a k-d block of m sizes has O(d m^(1-1/d))
      straddling nodes at worst: that, not O(log N), is the worst case.
      Measured E and pick times, 10k to 1M units: docs/fuxi-queue.rst.
    * ``add`` / ``remove`` / ``update_granted``: O(log N) in the sub-queue plus
      O(log S) to refresh the head key on one leaf-to-root path (O(d log S)
      when a sub-queue turns empty or non-empty and boxes change). A new size
      costs amortised O(log^3 S) for the block merges (each size is re-laid
      out O(log S) times, a block of m in O(m log^2 m)); doubling the leaves
      costs O(S) when they run out. A new resource kind, or empty sizes
      outnumbering live ones, rebuilds the whole layout.
    * memory: O(N + d S).

Pure code: no I/O, no clock, no randomness; the same calls give the same
state. Errors (:class:`WaitingQueueError` and subclasses) are raised before
anything changes, so a failed call leaves the queue as it was.
"""

from __future__ import annotations

import heapq
from itertools import count
from operator import le
from typing import Any, Iterator, NamedTuple, NoReturn

from sortedcontainers import SortedList

from mesoslike import MesoslikeError, Resources

__all__ = [
    "WaitingQueue",
    "WaitingUnit",
    "WaitingQueueError",
    "InvalidArgumentError",
    "DuplicateUnitError",
    "UnknownUnitError",
    "POLICIES",
]

POLICIES = ("FIFO", "FAIR")


class WaitingQueueError(MesoslikeError):
    """Base class of the errors a :class:`WaitingQueue` raises on bad input."""


class InvalidArgumentError(WaitingQueueError, ValueError):
    """A bad policy, unit id, priority, slot, sequence number, granted count
    or free vector."""


class DuplicateUnitError(WaitingQueueError, ValueError):
    """A unit with this id is already waiting."""


class UnknownUnitError(WaitingQueueError, KeyError):
    """No unit with this id is waiting."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class WaitingUnit(NamedTuple):
    """What the queue knows about one waiting unit."""

    unit_id: str
    priority: int
    slot: Resources
    submitted: int
    granted: int


class _Unit:
    __slots__ = ("unit_id", "priority", "slot", "submitted", "granted", "size", "key")

    def __init__(self, unit_id: str, priority: int, slot: Resources, submitted: int, granted: int,
                 key: tuple) -> None:
        self.unit_id = unit_id
        self.priority = priority
        self.slot = slot
        self.submitted = submitted
        self.granted = granted
        self.key = key      # the order key (:meth:`WaitingQueue._key`), the unit id last
        self.size: _Size


class _Size:
    """One distinct slot size: its sub-queue of order keys and its leaf."""

    __slots__ = ("slot", "vec", "queue", "leaf")

    def __init__(self, slot: Resources) -> None:
        self.slot = slot
        self.vec: tuple[int, ...] = ()
        self.queue = SortedList()
        self.leaf = 0


def _fits(corner: tuple[int, ...], free: tuple[int, ...]) -> bool:
    return all(map(le, corner, free))


def _is_int(value: object) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


_MIN_CAPACITY = 8           # leaves in the smallest tree
_MIN_EMPTY_GARBAGE = 64     # empty sizes kept before a rebuild drops them, at least


class WaitingQueue:
    """Waiting ScheduleUnits of one quota group; :meth:`pick` answers "the
    highest-priority unit whose slot fits these free resources" without
    scanning the units: O(E log E) for the E tree nodes it pops, which is
    O(log S) for S distinct slot sizes when the bounding boxes prune exactly
    (one resource kind) and at worst O(d S^(1-1/d)) per k-d block for d kinds;
    never a function of the number of waiting units (module docstring)."""

    # The tree, laid out by _rebuild: node i has children 2i and 2i + 1, the
    # leaves are _cap .. 2 _cap - 1. Per node: the smallest head key below it
    # (_key_at), the size holding it (_arg), and the box corners (_lo, _hi);
    # None where nothing waits below. Typed Any: the hot loops read them
    # after a None check, which the element types cannot carry.
    _cap: int
    _used: int
    _key_at: list[Any]
    _arg: list[Any]
    _lo: list[Any]
    _hi: list[Any]
    _leaf_sizes: list[_Size | None]
    _dim_index: dict[str, int]

    def __init__(self, policy: str = "FIFO") -> None:
        if policy not in POLICIES:
            raise InvalidArgumentError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self._policy = policy
        self._fair = policy == "FAIR"
        self._units: dict[str, _Unit] = {}
        self._sizes: dict[Resources, _Size] = {}
        self._dims: tuple[str, ...] = ()
        self._zeros: tuple[int, ...] = ()
        self._empty = 0          # sizes whose sub-queue is empty (kept for reuse until a rebuild)
        self._version = 0        # bumped by every change; iterators check it
        self._rebuild()

    # ----------------------------------------------------------- properties
    @property
    def policy(self) -> str:
        return self._policy

    @property
    def distinct_slots(self) -> int:
        """Distinct slot sizes with at least one waiting unit (S)."""
        return len(self._sizes) - self._empty

    def __len__(self) -> int:
        return len(self._units)

    def __contains__(self, unit_id: object) -> bool:
        return unit_id in self._units

    def __repr__(self) -> str:
        return f"<WaitingQueue {self._policy} units={len(self._units)} slots={self.distinct_slots}>"

    def info(self, unit_id: str) -> WaitingUnit:
        """The waiting unit's fields; :class:`UnknownUnitError` if not waiting."""
        unit = self._get(unit_id)
        return WaitingUnit(unit.unit_id, unit.priority, unit.slot, unit.submitted, unit.granted)

    def __iter__(self) -> Iterator[str]:
        """All waiting unit ids in queue order (a merge of the sub-queues:
        O(N log S) for the whole walk). The queue must not change meanwhile."""
        version = self._version
        queues = [size.queue for size in self._sizes.values() if size.queue]
        for key in heapq.merge(*queues):
            if self._version != version:
                raise RuntimeError("WaitingQueue changed during iteration")
            yield key[-1]

    # ------------------------------------------------------------- changes
    def add(self, unit_id: str, priority: int, slot: Resources, submitted: int, granted: int = 0) -> None:
        """Queue a unit. ``priority``: smaller is more urgent; ``submitted``: a
        submission sequence number (FIFO order); ``granted``: slots already
        granted to it (FAIR order). Raises :class:`DuplicateUnitError` if the
        id is already waiting and :class:`InvalidArgumentError` on bad values;
        either way nothing changes."""
        if not isinstance(unit_id, str) or not unit_id:
            raise InvalidArgumentError(f"unit_id must be a non-empty string, got {unit_id!r}")
        if unit_id in self._units:
            raise DuplicateUnitError(f"unit {unit_id!r} is already waiting")
        if not _is_int(priority):
            raise InvalidArgumentError(f"priority of {unit_id!r} must be an integer, got {priority!r}")
        if not isinstance(slot, Resources):
            raise InvalidArgumentError(f"slot of {unit_id!r} must be a Resources, got {type(slot).__name__}")
        size = self._sizes.get(slot)
        if size is None:                        # a size already here was checked when it came
            if slot.range_names():
                raise InvalidArgumentError(
                    f"slot of {unit_id!r} asks for range resources ({', '.join(slot.range_names())}): "
                    "a slot is a vector of scalars")
            if not slot.millis():
                raise InvalidArgumentError(f"slot of {unit_id!r} is empty: a slot must ask for some resource")
        if not _is_int(submitted) or submitted < 0:
            raise InvalidArgumentError(f"submitted of {unit_id!r} must be an integer >= 0, got {submitted!r}")
        if not _is_int(granted) or granted < 0:
            raise InvalidArgumentError(f"granted of {unit_id!r} must be an integer >= 0, got {granted!r}")

        unit = _Unit(unit_id, priority, slot, submitted, granted, self._key(priority, submitted, granted, unit_id))
        self._version += 1
        self._units[unit_id] = unit

        if size is None:
            size = unit.size = self._sizes[slot] = _Size(slot)
            size.queue.add(unit.key)
            self._place_new_size(size)
            return
        unit.size = size
        queue = size.queue
        if not queue:
            self._empty -= 1
            queue.add(unit.key)
            self._set_leaf(size)
            self._grow_path(size.leaf)
        else:
            head = queue[0]
            queue.add(unit.key)
            if unit.key < head:
                self._set_leaf(size)
                self._pull_keys(size.leaf)

    def remove(self, unit_id: str) -> None:
        """Take a unit out of the queue (granted in full, cancelled, ...).
        :class:`UnknownUnitError` (a ``KeyError``) if it is not waiting."""
        unit = self._get(unit_id)
        self._version += 1
        del self._units[unit_id]
        size = unit.size
        queue = size.queue
        was_head = queue[0] is unit.key
        queue.remove(unit.key)
        if not queue:
            self._empty += 1
            self._set_leaf(size)
            self._pull_path(size.leaf)
            if self._empty > max(_MIN_EMPTY_GARBAGE, len(self._sizes) - self._empty):
                self._rebuild()
        elif was_head:
            self._set_leaf(size)
            self._pull_keys(size.leaf)

    def update_granted(self, unit_id: str, granted: int) -> None:
        """Record how many slots the unit holds now. Under FAIR this moves it
        (fewer granted first); under FIFO it changes nothing in the order."""
        unit = self._get(unit_id)
        if not _is_int(granted) or granted < 0:
            raise InvalidArgumentError(f"granted of {unit_id!r} must be an integer >= 0, got {granted!r}")
        self._version += 1
        unit.granted = granted
        if not self._fair:
            return
        old = unit.key
        new = self._key(unit.priority, unit.submitted, granted, unit_id)
        if new == old:
            return
        size = unit.size
        queue = size.queue
        was_head = queue[0] is old
        queue.remove(old)
        queue.add(new)
        unit.key = new
        if was_head or queue[0] is new:
            self._set_leaf(size)
            self._pull_keys(size.leaf)

    # ------------------------------------------------------------- queries
    def pick(self, free: Resources) -> str | None:
        """The first unit, in queue order, whose slot fits in ``free``; None
        if none does. The queue is not changed."""
        size = self._search(self._free_vector(free))[0]
        return None if size is None else size.queue[0][-1]

    def search_cost(self, free: Resources) -> int:
        """How many tree nodes :meth:`pick` pops from its heap for ``free``
        (E): a measure of its work, for benchmarks and tests."""
        return self._search(self._free_vector(free))[1]

    def iter_fitting(self, free: Resources) -> Iterator[str]:
        """Lazily, every unit whose slot fits in ``free``, in queue order (the
        first one is :meth:`pick`'s answer). Each step costs O(log) in the
        sizes and units touched; units that do not fit are never looked at.
        The queue must not change while the iterator is in use
        (``RuntimeError``); to grant as you go, call :meth:`pick` again."""
        fv = self._free_vector(free)
        version = self._version
        key, arg, lo, hi = self._key_at, self._arg, self._lo, self._hi
        cap = self._cap
        tie = count()
        heap: list = []
        if key[1] is not None and _fits(lo[1], fv):
            heap.append((key[1], next(tie), 1, None))
        while heap:
            k, _, node, rest = heapq.heappop(heap)
            if node == 0:                       # a cursor in one sub-queue
                if self._version != version:
                    raise RuntimeError("WaitingQueue changed during iteration")
                yield k[-1]
                nxt = next(rest, None)
                if nxt is not None:
                    heapq.heappush(heap, (nxt, next(tie), 0, rest))
            elif node >= cap:                   # a leaf that fits: walk its sub-queue
                it = iter(arg[node].queue)
                heapq.heappush(heap, (next(it), next(tie), 0, it))
            else:
                whole = _fits(hi[node], fv)
                for child in (2 * node, 2 * node + 1):
                    ck = key[child]
                    if ck is not None and (whole or _fits(lo[child], fv)):
                        heapq.heappush(heap, (ck, next(tie), child, None))
        if self._version != version:
            raise RuntimeError("WaitingQueue changed during iteration")

    def least(self) -> dict[str, int] | None:
        """What every waiting unit's slot asks for at least, kind by kind
        (millis; the kinds it is 0 in left out): free resources that do not
        hold it hold no waiting unit's slot, and :meth:`pick` would say None.
        None if no unit waits. O(d) (the root's box)."""
        if self._key_at[1] is None:
            return None
        return {kind: amount for kind, amount in zip(self._dims, self._lo[1]) if amount > 0}

    def pick_all(self, free: Resources, limit: int | None = None) -> list[str]:
        """The first ``limit`` (all if None) units of :meth:`iter_fitting`."""
        out: list[str] = []
        if limit is not None and limit <= 0:
            return out
        for unit_id in self.iter_fitting(free):
            out.append(unit_id)
            if limit is not None and len(out) >= limit:
                break
        return out

    # ------------------------------------------------------------ internals
    def _key(self, priority: int, submitted: int, granted: int, unit_id: str) -> tuple:
        if self._fair:
            return (priority, granted, submitted, unit_id)
        return (priority, submitted, unit_id)

    def _get(self, unit_id: str) -> _Unit:
        try:
            return self._units[unit_id]
        except (KeyError, TypeError):
            raise UnknownUnitError(f"unit {unit_id!r} is not waiting") from None

    def _free_vector(self, free: Resources) -> tuple[int, ...]:
        if not isinstance(free, Resources):
            raise InvalidArgumentError(f"free must be a Resources, got {type(free).__name__}")
        return tuple(map(free.millis().get, self._dims, self._zeros))

    def _search(self, fv: tuple[int, ...]) -> tuple[_Size | None, int]:
        key, lo, hi = self._key_at, self._lo, self._hi
        root_key = key[1]
        if root_key is None or not _fits(lo[1], fv):
            return None, 0
        heap = [(root_key, 1)]
        pop, push = heapq.heappop, heapq.heappush
        popped = 0
        while heap:
            _, node = pop(heap)
            popped += 1
            if _fits(hi[node], fv):             # all of it fits: its best head is the answer
                return self._arg[node], popped
            child = 2 * node                    # a leaf's box is a point, so this is internal
            ck = key[child]
            if ck is not None and _fits(lo[child], fv):
                push(heap, (ck, child))
            child += 1
            ck = key[child]
            if ck is not None and _fits(lo[child], fv):
                push(heap, (ck, child))
        return None, popped

    # tree maintenance ----------------------------------------------------
    def _set_leaf(self, size: _Size) -> None:
        leaf = size.leaf
        queue = size.queue
        if queue:
            self._key_at[leaf] = queue[0]
            self._arg[leaf] = size
            self._lo[leaf] = self._hi[leaf] = size.vec
        else:
            self._key_at[leaf] = self._arg[leaf] = self._lo[leaf] = self._hi[leaf] = None

    def _pull_keys(self, leaf: int) -> None:
        """Refresh the smallest head key on the path above ``leaf`` (boxes unchanged)."""
        key, arg = self._key_at, self._arg
        node = leaf >> 1
        while node:
            left = 2 * node
            kl, kr = key[left], key[left + 1]
            if kr is None or (kl is not None and kl < kr):
                k, a = kl, arg[left]
            else:
                k, a = kr, arg[left + 1]
            if k is key[node] and a is arg[node]:
                return
            key[node] = k
            arg[node] = a
            node >>= 1

    def _grow_path(self, leaf: int) -> None:
        """``leaf`` turned non-empty: fold its key and point into the path
        above it. Boxes only grow and keys only drop, so the walk stops at the
        first node that already covers both."""
        key, arg, lo, hi = self._key_at, self._arg, self._lo, self._hi
        k, a, v = key[leaf], arg[leaf], lo[leaf]
        node = leaf >> 1
        while node:
            nk = key[node]
            if nk is None:
                key[node], arg[node], lo[node], hi[node] = k, a, v, v
            else:
                changed = False
                if k < nk:
                    key[node], arg[node] = k, a
                    changed = True
                if not _fits(lo[node], v):
                    lo[node] = tuple(map(min, lo[node], v))
                    changed = True
                if not _fits(v, hi[node]):
                    hi[node] = tuple(map(max, hi[node], v))
                    changed = True
                if not changed:
                    return
            node >>= 1

    def _pull_path(self, leaf: int) -> None:
        """Refresh keys and boxes on the path above ``leaf``."""
        node = leaf >> 1
        while node:
            self._pull(node)
            node >>= 1

    def _pull(self, node: int) -> None:
        key, arg, lo, hi = self._key_at, self._arg, self._lo, self._hi
        left = 2 * node
        right = left + 1
        kl, kr = key[left], key[right]
        if kl is None:
            key[node], arg[node], lo[node], hi[node] = kr, arg[right], lo[right], hi[right]
        elif kr is None:
            key[node], arg[node], lo[node], hi[node] = kl, arg[left], lo[left], hi[left]
        else:
            if kl < kr:
                key[node], arg[node] = kl, arg[left]
            else:
                key[node], arg[node] = kr, arg[right]
            lo[node] = tuple(map(min, lo[left], lo[right]))
            hi[node] = tuple(map(max, hi[left], hi[right]))

    def _place_new_size(self, size: _Size) -> None:
        """Give a new (non-empty) size a leaf, keeping the layout a binary
        counter of k-d ordered blocks (the logarithmic method): with m leaves
        used, the used leaves split into aligned blocks of the sizes of m's
        one bits, largest first, each block a subtree laid out in k-d order.
        Using leaf m merges the trailing blocks of 1, 2, ..., 2^(t-1) leaves
        with the new one into one block of 2^t, re-laid out in k-d order; a
        size takes part in O(log S) such merges. Sizes found empty in a merged
        block are dropped on the way."""
        slot_kinds = size.slot.millis()
        if any(kind not in self._dim_index for kind in slot_kinds):
            self._rebuild()                     # a new resource kind: every vector changes
            return
        size.vec = tuple(map(slot_kinds.get, self._dims, self._zeros))
        if self._used == self._cap:
            self._grow_capacity()
        used = self._used + 1
        block = used & -used                    # 2^t: the lowest one bit of the new count
        start = used - block
        self._used = used
        if block == 1:                          # half of all new sizes: a free leaf of its own
            self._leaf_sizes[start] = size
            size.leaf = self._cap + start
            self._set_leaf(size)
            self._grow_path(size.leaf)
            return
        items = [size]
        sizes = self._sizes
        for other in self._leaf_sizes[start:used - 1]:
            if other is None:
                continue
            if other.queue:
                items.append(other)
            else:                               # empty for a while: drop it now
                del sizes[other.slot]
                self._empty -= 1
        self._lay_out(_kd_order(items, block, len(self._dims)), start, block)

    def _lay_out(self, ordered: list[_Size], start: int, block: int) -> None:
        """Put ``ordered`` at leaves start.. of the aligned block [start,
        start + block), holes after it, and recompute the block's subtree and
        the path above it."""
        cap = self._cap
        positions = self._leaf_sizes
        for i in range(start, start + block):
            positions[i] = None
        for i, size in enumerate(ordered, start):
            positions[i] = size
            size.leaf = cap + i
        for i in range(start, start + block):
            leaf = cap + i
            placed = positions[i]
            if placed is None:
                self._key_at[leaf] = self._arg[leaf] = self._lo[leaf] = self._hi[leaf] = None
            else:
                self._set_leaf(placed)
        first, last = cap + start, cap + start + block - 1
        while first > 1:
            first >>= 1
            last >>= 1
            for node in range(first, last + 1):
                self._pull(node)

    def _grow_capacity(self) -> None:
        """Double the leaves; the used ones keep their positions (so their
        blocks stay aligned) and every node is recomputed."""
        old = self._cap
        cap = 2 * old
        key, arg, lo, hi = self._key_at, self._arg, self._lo, self._hi
        self._key_at = [None] * cap + key[old:] + [None] * old
        self._arg = [None] * cap + arg[old:] + [None] * old
        self._lo = [None] * cap + lo[old:] + [None] * old
        self._hi = [None] * cap + hi[old:] + [None] * old
        self._leaf_sizes.extend([None] * old)
        self._cap = cap
        for size in self._leaf_sizes[:self._used]:
            if size is not None:
                size.leaf += cap - old
        for node in range(cap - 1, 0, -1):
            self._pull(node)

    def _rebuild(self) -> None:
        """Drop empty sizes, recompute the resource kinds, lay all sizes out in
        k-d order and recompute every node. The layout is also a valid binary
        counter of blocks: the k-d split of a partly filled subtree fills its
        left child first."""
        sizes = self._sizes
        for slot in [slot for slot, size in sizes.items() if not size.queue]:
            del sizes[slot]
        self._empty = 0
        live = list(sizes.values())
        kinds: set[str] = set()
        for size in live:
            kinds.update(size.slot.millis())
        self._dims = tuple(sorted(kinds))
        self._dim_index = {kind: i for i, kind in enumerate(self._dims)}
        self._zeros = (0,) * len(self._dims)
        for size in live:
            size.vec = tuple(map(size.slot.millis().get, self._dims, self._zeros))
        cap = _MIN_CAPACITY
        while cap < 2 * len(live):
            cap *= 2
        self._cap = cap
        self._key_at = [None] * (2 * cap)
        self._arg = [None] * (2 * cap)
        self._lo = [None] * (2 * cap)
        self._hi = [None] * (2 * cap)
        self._leaf_sizes = [None] * cap
        ordered = _kd_order(live, cap, len(self._dims))
        for i, size in enumerate(ordered):
            size.leaf = cap + i
            self._leaf_sizes[i] = size
            self._set_leaf(size)
        for node in range(cap - 1, 0, -1):
            self._pull(node)
        self._used = len(ordered)

    # --------------------------------------------------------------- checks
    def check_invariants(self) -> None:
        """Verify every internal invariant; raise AssertionError on the first
        broken one. O(N log N + d S): for tests."""

        def fail(message: str) -> NoReturn:
            raise AssertionError(f"WaitingQueue invariant broken: {message}")

        cap = self._cap
        if cap < _MIN_CAPACITY or cap & (cap - 1):
            fail(f"capacity {cap} is not a power of two >= {_MIN_CAPACITY}")
        if not 0 <= self._used <= cap:
            fail("used leaves out of range")
        if len(self._leaf_sizes) != cap or any(self._leaf_sizes[self._used:]):
            fail("leaf positions past the used ones are not free")
        for array in (self._key_at, self._arg, self._lo, self._hi):
            if len(array) != 2 * cap:
                fail("tree arrays have the wrong length")
        if self._dims != tuple(sorted(self._dim_index, key=self._dim_index.__getitem__)):
            fail("dimension index does not match the dimensions")
        if self._zeros != (0,) * len(self._dims):
            fail("zero vector has the wrong length")

        for position, size in enumerate(self._leaf_sizes[:self._used]):
            if size is not None and self._sizes.get(size.slot) is not size:
                fail(f"leaf position {position} holds a size that is not registered")

        seen_leaves: dict[int, _Size] = {}
        queued = 0
        empty = 0
        for slot, size in self._sizes.items():
            if size.slot is not slot and size.slot != slot:
                fail(f"size registered under {slot} holds {size.slot}")
            if not cap <= size.leaf < cap + self._used:
                fail(f"size {slot} has leaf {size.leaf} outside the used leaves")
            if self._leaf_sizes[size.leaf - cap] is not size:
                fail(f"leaf position of size {slot} does not point back to it")
            if size.leaf in seen_leaves:
                fail(f"sizes {slot} and {seen_leaves[size.leaf].slot} share leaf {size.leaf}")
            seen_leaves[size.leaf] = size
            if set(slot.millis()) - set(self._dims):
                fail(f"size {slot} has a kind outside the dimensions {self._dims}")
            if size.vec != tuple(slot.millis().get(d, 0) for d in self._dims):
                fail(f"size {slot} has a stale vector {size.vec}")
            keys = list(size.queue)
            if keys != sorted(keys):
                fail(f"sub-queue of {slot} is not sorted")
            queued += len(keys)
            if not keys:
                empty += 1
            for key in keys:
                unit = self._units.get(key[-1])
                if unit is None:
                    fail(f"sub-queue of {slot} holds {key[-1]!r}, which is not waiting")
                if unit.size is not size or unit.key != key:
                    fail(f"unit {key[-1]!r} is out of place")
        if queued != len(self._units):
            fail(f"{queued} keys in sub-queues for {len(self._units)} units")
        if empty != self._empty:
            fail(f"empty-size count {self._empty}, actual {empty}")
        for unit_id, unit in self._units.items():
            if unit.unit_id != unit_id:
                fail(f"unit registered as {unit_id!r} is {unit.unit_id!r}")
            if unit.key != self._key(unit.priority, unit.submitted, unit.granted, unit_id):
                fail(f"unit {unit_id!r} has a stale order key {unit.key}")
            if self._sizes.get(unit.slot) is not unit.size:
                fail(f"unit {unit_id!r} is in the wrong size")

        key, arg, lo, hi = self._key_at, self._arg, self._lo, self._hi
        for leaf in range(cap, 2 * cap):
            size = seen_leaves.get(leaf)
            want: tuple[Any, ...]
            if size is not None and size.queue:
                want = (size.queue[0], size, size.vec, size.vec)
            else:
                want = (None, None, None, None)
            got = (key[leaf], arg[leaf], lo[leaf], hi[leaf])
            if got[0] != want[0] or got[1] is not want[1] or got[2:] != want[2:]:
                fail(f"leaf {leaf} holds {got[0]}, expected {want[0]}")
        for node in range(cap - 1, 0, -1):
            left, right = 2 * node, 2 * node + 1
            children = [c for c in (left, right) if key[c] is not None]
            if not children:
                want = (None, None, None, None)
            else:
                best = min(children, key=lambda c: key[c])
                want = (key[best], arg[best],
                        tuple(map(min, *(lo[c] for c in children))) if len(children) > 1 else lo[children[0]],
                        tuple(map(max, *(hi[c] for c in children))) if len(children) > 1 else hi[children[0]])
            got = (key[node], arg[node], lo[node], hi[node])
            if got[0] != want[0] or got[1] is not want[1] or got[2:] != want[2:]:
                fail(f"node {node} holds {got}, expected {want}")


def _kd_order(sizes: list[_Size], block: int, dims: int) -> list[_Size]:
    """The sizes in k-d order for a subtree of ``block`` leaves: split at the
    left child's capacity on the dimension of widest spread, recursively. The
    left child of a split is always full, so the order fills leaves
    0..len-1 and every node's leaves are a contiguous run of it."""
    out: list[_Size] = []
    stack = [(sizes, block)]
    while stack:
        items, block = stack.pop()
        while len(items) > 1 and len(items) <= block // 2:
            block //= 2
        if len(items) <= 1:
            out.extend(items)
            continue
        half = block // 2
        best_dim, best_spread = 0, -1
        for d in range(dims):
            values = [s.vec[d] for s in items]
            spread = max(values) - min(values)
            if spread > best_spread:
                best_dim, best_spread = d, spread
        items = sorted(items, key=lambda s: s.vec[best_dim])
        stack.append((items[half:], half))   # popped second: right child after left
        stack.append((items[:half], half))
    return out
