"""Weighted Dominant Resource Fairness sorter over a (role) hierarchy.

Order: among siblings, by weighted dominant share, then by how many
allocations the subtree has received, then by path — a total, deterministic
order. A hierarchical sorter orders level by level: the top-level roles, then
inside the first role its sub-roles, and so on. A role that has clients of its
own and sub-roles keeps its own in a virtual ``.`` leaf of weight 1, as in
Mesos (``a/.``): the role's weight ranks its whole subtree against its
siblings, and inside the subtree its own clients compete with its sub-roles
as a sibling of weight 1 (Mesos's ``DRFSorterTest.AddChildToLeaf``).

Each inner node keeps its active children in a sorted list keyed by that
triple, updated on every allocation along the path to the root, so
``allocated`` costs O(depth · log siblings) and the first client of
``iter_sorted`` comes in O(depth). When the cluster total changes every key is
stale; the sorter only marks itself and rebuilds once, lazily, on the next
query (O(n log n)), so adding 10k agents costs one rebuild, not 10k.
"""

from __future__ import annotations

import math
import random
from typing import Any, Iterator, Mapping, Sequence

from bisect import bisect_left, insort
from operator import itemgetter

from sortedcontainers import SortedList

from mesoslike.allocator.millis import add_millis
from mesoslike.allocator.sorter import Sorter
from mesoslike.resources import Resources

__all__ = ["DRFSorter", "SorterNode"]

_SELF = "."  # name of the virtual leaf holding an inner path's own client


_BIG = 4096  # siblings beyond which a plain sorted list stops being the fastest
_PATH = itemgetter(2)  # the path field of an entry (share, count, path, node)


class _SiblingOrder:
    """Sorted entries of a node's active children.

    A plain list searched with the C ``bisect`` is the fastest structure for
    the usual few to few thousand siblings; past ``_BIG`` entries it becomes a
    ``SortedList`` so that add and remove stay O(log n) however many
    frameworks share a role. ``items`` and ``big`` are read by the sorter's
    grant path (:meth:`DRFSorter.allocated`), which re-ranks in place.
    """

    __slots__ = ("items", "big")

    def __init__(self, entries: list | tuple = ()) -> None:
        items = sorted(entries)
        self.big = len(items) > _BIG
        #: a plain list, or a SortedList (untyped) past _BIG entries
        self.items: Any = SortedList(items) if self.big else items

    def add(self, entry: tuple) -> None:
        if self.big:
            self.items.add(entry)
            return
        insort(self.items, entry)
        if len(self.items) > _BIG:
            self.items, self.big = SortedList(self.items), True

    def remove(self, entry: tuple) -> None:
        if self.big:
            self.items.remove(entry)
        else:
            del self.items[bisect_left(self.items, entry)]

    def replace(self, old: tuple, new: tuple) -> None:
        """Swap an entry for its updated version; in place when it keeps its rank."""
        if self.big:
            self.items.remove(old)
            self.items.add(new)
            return
        items = self.items
        i = bisect_left(items, old)
        if (i == 0 or items[i - 1] < new) and (i + 1 == len(items) or new < items[i + 1]):
            items[i] = new
        else:
            del items[i]
            insort(items, new)

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class SorterNode:
    """A node of a hierarchical sorter's tree: a role path, or a client's leaf.

    Public so that other policies built on :class:`DRFSorter`'s bookkeeping
    (the random sorter) can walk the tree: ``children`` by name, ``client``
    (set on leaves), ``active_leaves`` (active clients in the subtree),
    ``weight`` (1 for a virtual ``.`` leaf, whatever its path's weight),
    ``path``. Only the sorter changes it.
    """

    __slots__ = ("name", "path", "parent", "children", "order", "client", "active",
                 "active_leaves", "alloc", "count", "entry", "entry_dirty", "weight")

    def __init__(self, name: str, path: str, parent: SorterNode | None, weight: float = 1.0) -> None:
        self.name = name
        self.path = path
        self.parent = parent
        self.children: dict[str, SorterNode] = {}
        self.order = _SiblingOrder()     # entries of active children
        self.client: str | None = None   # set on leaves
        self.active = False              # leaves: client active
        self.active_leaves = 0           # active leaves in this subtree
        self.alloc: dict[str, int] = {}  # scalar millis, whole subtree
        self.count = 0                   # allocations received, whole subtree
        self.entry: tuple | None = None  # our entry in parent.order, if listed
        self.entry_dirty = False         # entry's key is out of date (an only child needs no rank)
        self.weight = weight             # what its share is divided by among its siblings


class DRFSorter(Sorter):
    """Weighted DRF; ``hierarchical=False`` treats client names as opaque."""

    policy = "drf"

    def __init__(self, hierarchical: bool = True, rng: random.Random | None = None) -> None:
        self.hierarchical = hierarchical
        self._rng = rng if rng is not None else random.Random(0)
        self._root = SorterNode("", "", None)
        self._leaves: dict[str, SorterNode] = {}
        self._weights: dict[str, float] = {}
        self._total: dict[str, int] = {}
        self._stale = False

    def fresh(self, hierarchical: bool | None = None) -> DRFSorter:
        flat_or_tree = self.hierarchical if hierarchical is None else hierarchical
        return type(self)(hierarchical=flat_or_tree, rng=self._rng)

    @property
    def root(self) -> SorterNode:
        """The root of the client tree (read-only: for policies that walk it)."""
        return self._root

    @property
    def rng(self) -> random.Random:
        """The injected randomness (for policies that draw from it)."""
        return self._rng

    # ----------------------------------------------------------- tree shape
    def _split(self, client: str) -> list[str]:
        if not self.hierarchical:
            return [client]
        return client.split("/")

    def add_client(self, client: str) -> None:
        if client in self._leaves:
            raise ValueError(f"client {client!r} already in sorter")
        node = self._root
        parts = self._split(client)
        for i, part in enumerate(parts):
            child = node.children.get(part)
            if child is None:
                path = "/".join(parts[: i + 1]) if self.hierarchical else client
                child = SorterNode(part, path, node, self._weights.get(path, 1.0))
                node.children[part] = child
            elif not child.children and child.client is not None:
                self._push_down(child)
            node = child
        if node.children:            # an inner path gets a virtual leaf (of weight 1)
            leaf = SorterNode(_SELF, client, node)
            node.children[_SELF] = leaf
            node = leaf
        node.client = client
        self._leaves[client] = node
        self._set_active(node, True)

    def _push_down(self, node: SorterNode) -> None:
        """A leaf gains sub-clients: move its client into a virtual leaf of
        weight 1 (the node keeps its weight, for its whole subtree)."""
        client = node.client
        assert client is not None
        leaf = SorterNode(_SELF, node.path, node)
        leaf.client, leaf.active, leaf.alloc, leaf.count = client, node.active, dict(node.alloc), node.count
        leaf.active_leaves = node.active_leaves
        node.client, node.active = None, False
        node.children[_SELF] = leaf
        self._leaves[client] = leaf
        if leaf.active_leaves:
            self._list(leaf)

    def remove_client(self, client: str) -> None:
        leaf = self._leaf(client)
        self._set_active(leaf, False)
        self._change(leaf, dict(leaf.alloc), -1, 0)
        del self._leaves[client]
        leaf.client = None
        node = leaf
        while node.parent is not None and not node.children and node.client is None:
            del node.parent.children[node.name]
            node = node.parent
        if node.parent is not None:
            self._pull_up(node)

    def _pull_up(self, node: SorterNode) -> None:
        """An inner path left with only its virtual leaf becomes a leaf again."""
        leaf = node.children.get(_SELF)
        if leaf is None or len(node.children) != 1:
            return
        client = leaf.client
        assert client is not None
        self._unlist(leaf)
        del node.children[_SELF]
        node.client, node.active = client, leaf.active
        self._leaves[client] = node

    def _leaf(self, client: str) -> SorterNode:
        try:
            return self._leaves[client]
        except KeyError:
            raise KeyError(f"client {client!r} not in sorter") from None

    # ---------------------------------------------------------- activation
    def activate(self, client: str) -> None:
        self._set_active(self._leaf(client), True)

    def deactivate(self, client: str) -> None:
        self._set_active(self._leaf(client), False)

    def _set_active(self, leaf: SorterNode, active: bool) -> None:
        if leaf.active == active:
            return
        leaf.active = active
        delta = 1 if active else -1
        node: SorterNode | None = leaf
        while node is not None:
            before = node.active_leaves
            node.active_leaves += delta
            if node.parent is not None:
                if before == 0 and node.active_leaves > 0:
                    self._list(node)
                elif before > 0 and node.active_leaves == 0:
                    self._unlist(node)
            node = node.parent

    # -------------------------------------------------------------- weights
    def update_weight(self, path: str, weight: float) -> None:
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight > 0):
            raise ValueError(f"weight must be a finite number > 0, got {weight!r}")
        self._weights[path] = float(weight)
        node = self._node_at(path)
        if node is not None:  # not its virtual leaf, if any: that one keeps weight 1
            node.weight = float(weight)
            self._relist(node)

    def _node_at(self, path: str) -> SorterNode | None:
        node: SorterNode | None = self._root
        for part in self._split(path):
            node = node.children.get(part) if node is not None else None
        return node

    # -------------------------------------------------------- allocations
    def allocated(self, client: str, resources: Resources) -> None:
        # The allocator's hot path, one call per grant: _change, _entry and
        # _share inlined and specialised to a grant. A grant only adds (a
        # Resources holds no zero or negative quantity, so no kind of the
        # allocation reaches zero) and counts one more allocation, so every
        # key on the path strictly grows: an entry can only move back, and
        # its new place is searched behind the old one.
        leaf = self._leaves.get(client) or self._leaf(client)
        millis = resources.millis()
        total = self._total
        stale = self._stale
        node = leaf
        parent = node.parent
        while parent is not None:  # the root has no rank to keep
            alloc = node.alloc
            node.count += 1
            old = node.entry
            items = parent.order.items
            if old is None or stale or len(items) == 1:
                for kind, amount in millis.items():
                    alloc[kind] = alloc.get(kind, 0) + amount
                if old is not None and not stale:
                    node.entry_dirty = True  # re-keyed when a sibling joins (_list)
            else:
                # the new allocation and its dominant share in one pass over the grant's kinds ...
                dominant = 0.0
                for kind, amount in millis.items():
                    amount += alloc.get(kind, 0)
                    alloc[kind] = amount
                    pool = total.get(kind)
                    if pool:
                        ratio = amount / pool
                        if ratio > dominant:
                            dominant = ratio
                if len(alloc) != len(millis):
                    # ... unless the allocation holds kinds the grant lacks: all of them count
                    dominant = 0.0
                    for kind, amount in alloc.items():
                        pool = total.get(kind)
                        if pool:
                            ratio = amount / pool
                            if ratio > dominant:
                                dominant = ratio
                new = node.entry = (dominant / node.weight, node.count, node.path, node)
                if parent.order.big:
                    parent.order.replace(old, new)
                else:
                    # a grant usually goes to the first client in order and sends it to
                    # the back: both in O(1), else a binary search
                    i = 0 if items[0] is old else bisect_left(items, old)
                    if items[-1] < new:
                        items.append(new)
                        del items[i]
                    else:
                        j = bisect_left(items, new, i + 1)
                        if j == i + 1:
                            items[i] = new
                        else:
                            items.insert(j, new)
                            del items[i]
            node = parent
            parent = node.parent

    def allocated_many(self, client: str, resources: Resources, count: int) -> None:
        # the sums and counts ``count`` calls of allocated() leave, in one walk up the tree
        if count == 1:
            self.allocated(client, resources)
            return
        leaf = self._leaves.get(client) or self._leaf(client)
        self._change(leaf, {kind: amount * count for kind, amount in resources.millis().items()}, 1, count)

    def unallocated(self, client: str, resources: Resources) -> None:
        leaf = self._leaves.get(client) or self._leaf(client)
        self._change(leaf, resources.millis(), -1, 0)

    def _change(self, leaf: SorterNode, millis: Mapping[str, int], sign: int, count: int) -> None:
        """Add ``sign`` x ``millis`` and ``count`` allocations received to
        the leaf and its ancestors, and re-rank each among its siblings."""
        node = leaf
        stale = self._stale
        while True:
            parent = node.parent
            if parent is None:  # the root: nothing to rank it against
                return
            add_millis(node.alloc, millis, sign)
            node.count += count
            old = node.entry
            if old is not None and not stale:
                order = parent.order
                if len(order) == 1:
                    node.entry_dirty = True  # re-keyed when a sibling joins (_list)
                else:
                    node.entry = self._entry(node)
                    order.replace(old, node.entry)
            node = parent

    def add_total(self, resources: Resources) -> None:
        for kind, amount in resources.millis().items():
            self._total[kind] = self._total.get(kind, 0) + amount
        self._stale = True

    def remove_total(self, resources: Resources) -> None:
        for kind, amount in resources.millis().items():
            left = self._total.get(kind, 0) - amount
            if left > 0:
                self._total[kind] = left
            else:
                self._total.pop(kind, None)
        self._stale = True

    # ------------------------------------------------------------ ordering
    def _share(self, node: SorterNode) -> float:
        total = self._total
        dominant = 0.0
        for kind, amount in node.alloc.items():
            pool = total.get(kind)
            if pool:
                ratio = amount / pool
                if ratio > dominant:
                    dominant = ratio
        return dominant / node.weight

    def _entry(self, node: SorterNode) -> tuple:
        # paths are unique among siblings, so the node itself is never compared
        return (self._share(node), node.count, node.path, node)

    def _list(self, node: SorterNode) -> None:
        node.entry = self._entry(node)
        node.entry_dirty = False
        if not self._stale:
            assert node.parent is not None
            order = node.parent.order
            if len(order) == 1:  # the only child's key may be out of date
                (only,) = order
                sibling = only[-1]
                if sibling.entry_dirty:
                    sibling.entry = self._entry(sibling)
                    sibling.entry_dirty = False
                    order.replace(only, sibling.entry)
            order.add(node.entry)

    def _unlist(self, node: SorterNode) -> None:
        if node.entry is not None:
            if not self._stale:
                assert node.parent is not None
                node.parent.order.remove(node.entry)
            node.entry = None
            node.entry_dirty = False

    def _relist(self, node: SorterNode) -> None:
        if node.entry is not None:
            self._unlist(node)
            self._list(node)

    def _rebuild(self) -> None:
        """Recompute every key after the total changed."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            entries = []
            for child in node.children.values():
                child.entry_dirty = False
                if child.active_leaves:
                    child.entry = self._entry(child)
                    entries.append(child.entry)
                else:
                    child.entry = None
                stack.append(child)
            node.order = _SiblingOrder(entries)
        self._stale = False

    def iter_sorted(self) -> Iterator[str]:
        if self._stale:
            self._rebuild()
        if not self.hierarchical:
            # every child of the root is a leaf, and a leaf's path is its
            # client: iterate in C, no generator frame per step
            return map(_PATH, self._root.order.items)
        return self._walk(self._root)

    def live_order(self) -> Sequence[tuple] | None:
        """A flat DRF order's own sorted entries (share, count, client,
        node): see :meth:`Sorter.live_order`. None for a hierarchical one
        or a subclass with its own order (the random sorter)."""
        if self.hierarchical or type(self).iter_sorted is not DRFSorter.iter_sorted:
            return None
        if self._stale:
            self._rebuild()
        return self._root.order.items

    def _walk(self, node: SorterNode) -> Iterator[str]:
        for entry in node.order:
            child = entry[-1]
            if child.client is not None:
                yield child.client
            else:
                yield from self._walk(child)

    def first(self) -> str | None:
        """The first client of the order, or None: O(depth)."""
        for client in self.iter_sorted():
            return client
        return None

    # ------------------------------------------------------------- queries
    def share(self, client: str) -> float:
        leaf = self._leaves.get(client)
        if leaf is not None:
            return self._share(leaf)
        node = self._node_at(client)
        if node is None:
            raise KeyError(f"client {client!r} not in sorter")
        return self._share(node)

    def allocation(self, client: str) -> Resources:
        return Resources.from_millis(self._leaf(client).alloc)

    def clients(self) -> list[str]:
        return sorted(self._leaves)

    def __contains__(self, client: str) -> bool:
        return client in self._leaves

    def __len__(self) -> int:
        return len(self._leaves)
