"""Where does a slot fit? First-fit indexes over the machines of one offer batch.

Active scheduling (seed 000) spreads a new ScheduleUnit round-robin over the
machines that can take one of its slots, in machine order. Asking every
machine for every unit costs O(units x machines) per pass: 13.6 s for 1,000
jobs on 20,000 machines (issue 16 §3). Here the question is "the first
machine at or after position ``start`` whose free resources hold ``need``",
and the machines are indexed so that it does not look at the ones that
cannot hold it.

Resources are integer vectors (thousandths, as :meth:`Resources.millis`)
over the batch's kinds (:class:`Dims`). Two implementations answer the same
question with the same answer:

:class:`FitTree`
    A segment tree over the machines in order; every node keeps the
    component-wise maximum of the free vectors below it. ``first_fit`` walks
    right from ``start`` and descends only into nodes whose maximum holds
    ``need``. With one resource kind the maximum is exact: O(log M) per
    answer. With several kinds a node's maximum may hold ``need`` while no
    single machine below it does (one machine has the cpus, another the
    memory), so the descent can visit such nodes in vain: the worst case is
    O(M), met only by adversarial mixes; machines of a few shapes keep the
    walk near O(log M) (``bench/fuxi_scale.py``). ``update`` is O(d log M),
    and stops early where the maximum does not change.
:class:`FitScan`
    The naive walk over the machines, O(M) per answer: the baseline of the
    benchmark and the oracle of the tests.

:class:`Scope` pairs an index with the machines it covers (the cluster, or
one engine room), so positions can be mapped back to machines.
"""

from __future__ import annotations

from functools import lru_cache
from operator import ge, itemgetter
from typing import Callable, Generic, Iterable, Iterator, Mapping, Protocol, Sequence, TypeVar

__all__ = ["Vector", "Dims", "fits", "fits_of", "minus_of", "FitIndex", "FitTree", "FitScan", "Scope", "make_index", "INDEX_KINDS"]

Vector = tuple[int, ...]
INDEX_KINDS = ("tree", "scan")
_PROBE = 32      # machines a first-fit looks at directly before it asks the index
_DEAD_KEPT = 4  # needs a tree node remembers as holding nowhere below it
_SCAN_FIRST = 2048  # machines a scope walks past the probe before it builds its index


class Dims:
    """The scalar resource kinds of one batch, in a fixed order; converts
    millis mappings to vectors over them."""

    __slots__ = ("names", "_index", "_zeros")

    def __init__(self, names: Iterable[str]) -> None:
        self.names: tuple[str, ...] = tuple(sorted(set(names)))
        self._index = {name: i for i, name in enumerate(self.names)}
        self._zeros = (0,) * len(self.names)

    @property
    def vector_of(self) -> Callable[[Mapping[str, int]], Vector]:
        """:meth:`vector` with its lookups written out (``(get(name0, 0),
        ...)``), for a loop that makes one vector per machine (a first
        batch). Made once per set of kinds (a few dozen kept): making it
        costs what 100 vectors do, and a steady pass makes a Dims."""
        return _vector_maker(self.names)

    def vector(self, millis: Mapping[str, int]) -> Vector:
        """``millis`` over the kinds (a kind not among them is dropped). O(d)."""
        return tuple(map(millis.get, self.names, self._zeros))

    def need(self, millis: Mapping[str, int]) -> Vector | None:
        """The vector of a slot, or None if it asks for a kind no machine of
        the batch has (then it fits nowhere). O(d)."""
        for name, amount in millis.items():
            if amount > 0 and name not in self._index:
                return None
        return self.vector(millis)

    def __len__(self) -> int:
        return len(self.names)


@lru_cache(maxsize=64)      # (kinds come from offers: bounded)
def _vector_maker(names: tuple[str, ...]) -> Callable[[Mapping[str, int]], Vector]:
    """A function of a millis mapping to its vector over ``names`` (what
    :meth:`Dims.vector` returns). O(d). The names are bound as variables,
    never put in the code's text (they come from offers)."""
    scope: dict[str, object] = {f"name{i}": name for i, name in enumerate(names)}
    terms = "".join(f"get(name{i}, 0), " for i in range(len(names)))
    exec(f"def vector(millis):\n    get = millis.get\n    return ({terms})\n", scope)  # noqa: S102 - our text
    return scope["vector"]  # type: ignore[return-value]  # (the function just made)


def fits(free: Vector, need: Vector) -> bool:
    """Does ``free`` hold ``need``, kind by kind? O(d)."""
    return all(map(ge, free, need))


@lru_cache(maxsize=None)
def fits_of(dims: int) -> Callable[[Vector, Vector], bool]:
    """:func:`fits` for vectors of ``dims`` kinds, its comparisons written
    out (``free[0] >= need[0] and ...``): a third of its cost, for the loops
    that ask it of every machine of a batch (the frontier of machine sizes
    over a first batch of 100,000)."""
    if dims < 0:
        raise ValueError(f"dims must be >= 0, not {dims}")
    test = " and ".join(f"free[{i}] >= need[{i}]" for i in range(dims)) or "True"
    scope: dict[str, Callable[[Vector, Vector], bool]] = {}
    exec(f"def fits_{dims}(free, need):\n    return {test}\n", scope)  # noqa: S102 - our text, dims an int
    return scope[f"fits_{dims}"]


@lru_cache(maxsize=None)
def minus_of(dims: int) -> Callable[[Vector, Vector], Vector]:
    """``free - need`` kind by kind for vectors of ``dims`` kinds, written
    out (``(free[0] - need[0], ...)``): half the cost of
    ``tuple(map(sub, free, need))``, which every grant of a first pass
    asked (twice, its free and its open room). O(d)."""
    if dims < 0:
        raise ValueError(f"dims must be >= 0, not {dims}")
    terms = "".join(f"free[{i}] - need[{i}], " for i in range(dims))
    scope: dict[str, Callable[[Vector, Vector], Vector]] = {}
    exec(f"def minus_{dims}(free, need):\n    return ({terms})\n", scope)  # noqa: S102 - our text, dims an int
    return scope[f"minus_{dims}"]


class FitIndex(Protocol):
    def __len__(self) -> int: ...

    def first_fit(self, need: Vector, start: int = 0) -> int | None: ...

    def may_fit(self, need: Vector) -> bool: ...

    def update(self, position: int, free: Vector) -> None: ...

    def update_many(self, changes: Iterable[tuple[int, Vector]]) -> None: ...


class FitTree:
    """A segment tree of component-wise maxima over free vectors (module
    docstring). Positions ``0 .. len - 1``; padding leaves hold a vector of
    ``-1`` that holds nothing.

    With several kinds a node's maximum may hold a need that no machine
    below it holds. A search that finds so remembers the need at that node
    (the last few per node): while the vectors below only shrink, it holds
    for any need at least as big, and the next search skips the subtree at
    once. A vector that grows forgets what its ancestors remembered."""

    __slots__ = ("_size", "_n", "_max", "_none", "_dead")

    def __init__(self, vectors: Sequence[Vector], dims: int) -> None:
        n = len(vectors)
        size = 1
        while size < n:
            size *= 2
        self._size = size
        self._n = n
        none = self._none = (-1,) * dims
        # Built level by level over one list per kind: C-level maps instead of a
        # Python step per node (2.5x faster; a first pass builds 20,000 leaves' worth)
        columns = [list(column) + [-1] * (size - n) for column in zip(*vectors)] if n and dims else []
        levels: list[list[Vector]] = []
        while size > 1 and columns and len(columns[0]) > 1:
            columns = [list(map(max, column[0::2], column[1::2])) for column in columns]
            levels.append(list(zip(*columns)))
        tree: list[Vector] = [none]
        for level in reversed(levels):
            tree += level
        if len(tree) < size:                     # no vectors (or no kinds): every node holds nothing
            tree += [none] * (size - len(tree))
        tree += vectors
        tree += [none] * (size - n)
        self._max = tree
        self._dead: dict[int, list[Vector]] = {}    # node -> needs no machine below it holds

    def __len__(self) -> int:
        return self._n

    def first_fit(self, need: Vector, start: int = 0) -> int | None:
        """The smallest position >= ``start`` whose vector holds ``need``, or
        None. Walks up from ``start`` to the roots of the subtrees right of
        it, left to right, and searches a subtree only if its maximum holds
        ``need``."""
        if start >= self._n:
            return None
        tree, size = self._max, self._size
        node = start + size
        while True:
            if all(map(ge, tree[node], need)):
                found = self._leftmost(node, need)
                if found is not None:
                    return found
            while node & 1:                     # a right child: its parent's span is done
                node >>= 1
            if node == 0:
                return None
            node += 1                           # the next subtree to the right

    def _leftmost(self, root: int, need: Vector) -> int | None:
        """The leftmost leaf under ``root`` (whose maximum holds ``need``)
        that holds ``need``: depth first, left child first, pruned by the
        maxima and by the needs remembered as holding nowhere below a node;
        remembers the nodes it finds empty. One loop over a stack, not a
        call per node: a closing entry (the node negated) is met once
        everything below the node was searched in vain."""
        tree, size, dead = self._max, self._size, self._dead
        stack = [root]
        pop, push = stack.pop, stack.append
        while stack:
            node = pop()
            if node < 0:                        # searched in vain below -node: remember it
                node = -node
                known = dead.get(node)
                if known is None:
                    dead[node] = [need]
                else:
                    if len(known) >= _DEAD_KEPT:
                        del known[0]
                    known.append(need)
                continue
            if node >= size:
                return node - size
            known = dead.get(node)
            if known is not None:
                for empty in known:
                    if all(map(ge, need, empty)):
                        break
                else:
                    known = None
                if known is not None:           # a need no bigger than this one holds nowhere below
                    continue
            push(-node)
            right = 2 * node + 1
            if all(map(ge, tree[right], need)):
                push(right)
            if all(map(ge, tree[right - 1], need)):
                push(right - 1)
        return None

    def may_fit(self, need: Vector) -> bool:
        """False if no machine holds ``need`` (the root's maximum does not). O(d)."""
        return all(map(ge, self._max[1], need)) if self._n else False

    def update(self, position: int, free: Vector) -> None:
        """Machine ``position`` has ``free`` now; refresh the maxima above it,
        stopping where one does not change. O(d log M)."""
        tree = self._max
        node = position + self._size
        self._set_leaf(node, free)
        node >>= 1
        while node:
            value = tuple(map(max, tree[2 * node], tree[2 * node + 1]))
            if value == tree[node]:
                return
            tree[node] = value
            node >>= 1

    def _set_leaf(self, leaf: int, free: Vector) -> None:
        """Store a leaf's vector; if it grew, its ancestors forget the needs
        they remembered as holding nowhere below them."""
        dead = self._dead
        if dead and not all(map(ge, self._max[leaf], free)):
            node = leaf >> 1
            while node:
                dead.pop(node, None)
                node >>= 1
        self._max[leaf] = free

    def update_many(self, changes: Iterable[tuple[int, Vector]]) -> None:
        """Several machines changed: refresh each ancestor once, level by
        level, stopping where a maximum does not change. O(k log(M / k) + k)
        node refreshes for k spread-out changes (O(k log M) one at a time)."""
        tree, size = self._max, self._size
        nodes = set()
        for position, free in changes:
            self._set_leaf(position + size, free)
            nodes.add((position + size) >> 1)
        while nodes:
            parents = set()
            for node in nodes:
                value = tuple(map(max, tree[2 * node], tree[2 * node + 1]))
                if value != tree[node]:
                    tree[node] = value
                    if node > 1:
                        parents.add(node >> 1)
            nodes = parents

    def _check(self, vectors: Sequence[Vector]) -> None:
        """Raise AssertionError unless the tree holds exactly ``vectors`` and
        every node the maximum of its children (for tests). O(M d)."""
        size = self._size
        assert self._n == len(vectors), "length"
        for i, vector in enumerate(vectors):
            assert self._max[size + i] == vector, f"leaf {i}"
        for node in range(size + self._n, 2 * size):
            assert self._max[node] == self._none, f"padding leaf {node - size}"
        for node in range(size - 1, 0, -1):
            want = tuple(map(max, self._max[2 * node], self._max[2 * node + 1]))
            assert self._max[node] == want, f"node {node}"
        for node, needs in self._dead.items():
            span = 1 << (node.bit_length() - 1)   # leaves below: size / that level's width
            first = (node - span) * (size // span)
            below = vectors[first:first + size // span]
            for need in needs:
                assert not any(all(map(ge, vector, need)) for vector in below), f"node {node} holds {need}"


class FitScan:
    """The naive first fit: walk the machines from ``start``. O(M) per answer."""

    __slots__ = ("_free",)

    def __init__(self, vectors: Sequence[Vector], dims: int) -> None:
        self._free = list(vectors)

    def __len__(self) -> int:
        return len(self._free)

    def first_fit(self, need: Vector, start: int = 0) -> int | None:
        free = self._free
        for position in range(start, len(free)):
            if all(map(ge, free[position], need)):
                return position
        return None

    def may_fit(self, need: Vector) -> bool:
        return bool(self._free)

    def update(self, position: int, free: Vector) -> None:
        self._free[position] = free

    def update_many(self, changes: Iterable[tuple[int, Vector]]) -> None:
        for position, free in changes:
            self._free[position] = free


def make_index(kind: str, vectors: Sequence[Vector], dims: int) -> FitTree | FitScan:
    """A :class:`FitTree` (``"tree"``) or a :class:`FitScan` (``"scan"``)."""
    if kind == "tree":
        return FitTree(vectors, dims)
    if kind == "scan":
        return FitScan(vectors, dims)
    raise ValueError(f"machine index must be one of {', '.join(INDEX_KINDS)}, got {kind!r}")


M = TypeVar("M")


class Scope(Generic[M]):
    """Machines (in order) and the index over their free vectors: the whole
    batch, or one engine room of it. ``position`` maps a machine's key back
    to its place here; ``cursor`` is where the next round-robin starts (just
    after the machine that took the last slot).

    The index is built when a question first goes further than
    ``scan_first`` machines past the probe: a pass over 100,000 offers
    asked it 9 times, each answered within a few hundred machines, and
    building it cost a tenth of the pass. Until then ``first_fit`` walks
    the machines and ``may_fit`` compares with the machines' component-wise
    maximum (an upper bound, kept as vectors grow). The answers are the
    same either way.

    It remembers the needs that fit no machine at all. While vectors only
    shrink (slots granted, room reserved), a need at least as big as one of
    them fits nowhere either, and is answered without a search: in a busy
    cluster most waiting units ask exactly that. Any vector that grows
    forgets them. O(remembered needs x d) per query, and they are few: only
    needs not covered by a smaller one are kept."""

    __slots__ = ("machines", "index", "cursor", "_keys", "_position", "_vectors", "_no_fit", "_dirty", "_grown",
                 "_kind", "_dims", "_scan_first", "_bound", "_fits")

    def __init__(self, machines: list[M], vectors: Sequence[Vector], dims: int, kind: str,
                 keys: Sequence[str] = (), scan_first: int = _SCAN_FIRST) -> None:
        if kind not in INDEX_KINDS:
            raise ValueError(f"machine index must be one of {', '.join(INDEX_KINDS)}, got {kind!r}")
        self.machines = machines
        self.index: FitTree | FitScan | None = None   # built when first needed (class docstring)
        self._kind = kind
        self._dims = dims
        self._scan_first = scan_first
        self._bound: Vector | None = None     # with no index yet: every vector's component-wise maximum, or more
        self._keys = keys
        self._position: dict[str, int] | None = None
        self.cursor = 0
        self._vectors = list(vectors)
        self._no_fit: list[Vector] = []
        self._dirty: set[int] = set()         # positions whose new vector the index has not seen
        self._grown = False                   # did one of them grow (else the index's maxima still bound them)
        self._fits = fits_of(dims)            # (asked of the probed machines of each first-fit)

    @property
    def position(self) -> dict[str, int]:
        """A machine's key (as given) -> its position here; built when first
        asked (a caller that knows the positions never pays for it)."""
        if self._position is None:
            self._position = {key: i for i, key in enumerate(self._keys)}
        return self._position

    def first_fit(self, need: Vector, start: int = 0) -> int | None:
        """The first position >= ``start`` whose vector holds ``need``: the
        next few machines are looked at directly (the round-robin's next
        machine usually has room), then the index is asked (before it is
        built: ``scan_first`` more machines are looked at first)."""
        vectors = self._vectors
        count = len(vectors)
        probe_end = start + _PROBE
        if probe_end > count:
            probe_end = count
        holds = self._fits
        for position in range(start, probe_end):
            if holds(vectors[position], need):
                return position
        for known in self._no_fit:
            if holds(need, known):
                return None
        found = None
        if probe_end < count:
            index = self.index
            if index is None:
                scan_end = min(probe_end + self._scan_first, count)
                for position in range(probe_end, scan_end):
                    if all(map(ge, vectors[position], need)):
                        return position
                if scan_end < count:
                    found = self._build().first_fit(need, scan_end)
            else:
                if self._dirty:
                    self._flush()
                found = index.first_fit(need, probe_end)
        if found is None and start == 0:
            self._no_fit = [known for known in self._no_fit if not all(map(ge, known, need))]
            self._no_fit.append(need)
        return found

    def may_fit(self, need: Vector) -> bool:
        """False when surely no machine holds ``need``: it is at least a
        need known to fit nowhere, or beyond the index's overall maximum.
        O(remembered needs x d)."""
        for known in self._no_fit:
            if all(map(ge, need, known)):
                return False
        if self.index is None:
            bound = self._bound
            if bound is None:
                if not self._vectors:
                    return False
                vectors = self._vectors
                bound = self._bound = tuple(max(map(itemgetter(kind), vectors)) for kind in range(self._dims))
            return all(map(ge, bound, need))
        if self._dirty and self._grown:
            self._flush()
        # with only shrunk vectors pending, the index's maxima are still upper bounds: its
        # "no" is sure, its "yes" a maybe as before; the pending changes wait for a search
        return self.index.may_fit(need)

    def update(self, position: int, free: Vector) -> None:
        """Machine ``position`` has ``free`` now. The index learns it at the
        next query: a scope queried less often than its machines change
        (a room, while units spread over the cluster) pays once per
        machine per query, not per change."""
        if self.index is None:
            if not all(map(ge, self._vectors[position], free)):
                self._no_fit = []               # it grew: a need that fitted nowhere may fit now
                if self._bound is not None:
                    self._bound = tuple(map(max, self._bound, free))
            self._vectors[position] = free
            return
        if (self._no_fit or not self._grown) and not all(map(ge, self._vectors[position], free)):
            self._no_fit = []                   # it grew: a need that fitted nowhere may fit now
            self._grown = True
        self._vectors[position] = free
        self._dirty.add(position)

    def shrunk(self, position: int, free: Vector) -> None:
        """:meth:`update` for a vector that grew in no kind (a slot granted
        on it): nothing remembered is forgotten, so nothing is compared."""
        self._vectors[position] = free
        if self.index is not None:
            self._dirty.add(position)

    def _build(self) -> FitTree | FitScan:
        """The index over the vectors as they are now."""
        index = self.index = make_index(self._kind, self._vectors, self._dims)
        self._dirty.clear()
        self._grown = False
        self._bound = None
        return index

    def _check(self) -> None:
        """Raise AssertionError unless the index holds the machines' vectors
        (after the pending updates), the bound holds every vector, and every
        remembered need fits nowhere (for tests). O(M d)."""
        if self.index is None:
            if self._bound is not None:
                assert all(all(map(ge, self._bound, vector)) for vector in self._vectors), "bound"
        else:
            self._flush()
            if isinstance(self.index, FitTree):
                self.index._check(self._vectors)
        for need in self._no_fit:
            assert not any(all(map(ge, vector, need)) for vector in self._vectors), f"{need} fits somewhere"

    def _flush(self) -> None:
        vectors, dirty, index = self._vectors, self._dirty, self.index
        assert index is not None, "only a built index has changes pending"
        self._grown = False
        if len(dirty) == 1:
            position = dirty.pop()
            index.update(position, vectors[position])
            return
        index.update_many([(position, vectors[position]) for position in dirty])
        dirty.clear()

    def around(self, need: Vector, origin: int) -> Iterator[int]:
        """Positions whose vector holds ``need`` *when reached*, once around
        from ``origin``: ``origin .. len - 1`` then ``0 .. origin - 1``. The
        caller may change vectors between steps; each step is one
        :meth:`first_fit`."""
        start, end = origin, len(self.machines)
        for _ in range(2):
            while True:
                found = self.first_fit(need, start)
                if found is None or found >= end:
                    break
                yield found
                start = found + 1
            start, end = 0, origin

    def __len__(self) -> int:
        return len(self.machines)
