"""A seeded random sorter: the alternative policy to DRF.

At every level of the hierarchy the active children come in a weighted random
order (Efraimidis–Spirakis: key = u ** (1 / weight), largest first), so a role
of weight 2 tends to come before a role of weight 1 without always doing so.
The randomness comes from the injected ``random.Random``: the same seed and the
same history give the same orders. Allocations and shares are still tracked,
so statistics report dominant shares as with DRF.
"""

from __future__ import annotations

from typing import Iterator

from mesoslike.allocator.drf import DRFSorter, SorterNode

__all__ = ["RandomSorter"]


class RandomSorter(DRFSorter):
    """Weighted random order; O(n log n) per ``iter_sorted`` level walked.

    It keeps :class:`DRFSorter`'s bookkeeping (clients, activation, weights,
    allocations, shares) and replaces only the order, walking the public
    client tree (:attr:`DRFSorter.root`)."""

    policy = "random"

    def iter_sorted(self) -> Iterator[str]:
        return self._shuffled_walk(self.root)

    def _shuffled_walk(self, node: SorterNode) -> Iterator[str]:
        draw = self.rng.random
        keyed = []
        for child in node.children.values():
            if child.active_leaves:
                keyed.append((draw() ** (1.0 / child.weight), child.path, child))
        keyed.sort(key=lambda item: (-item[0], item[1]))
        for _, _, child in keyed:
            if child.client is not None:
                yield child.client
            else:
                yield from self._shuffled_walk(child)
