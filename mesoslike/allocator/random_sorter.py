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

from mesoslike.allocator.drf import DRFSorter, _Node
from mesoslike.allocator.sorter import register_sorter

__all__ = ["RandomSorter"]


class RandomSorter(DRFSorter):
    """Weighted random order; O(n log n) per ``iter_sorted`` level walked."""

    policy = "random"

    def iter_sorted(self) -> Iterator[str]:
        return self._shuffled_walk(self._root)

    def _shuffled_walk(self, node: _Node) -> Iterator[str]:
        draw = self._rng.random
        keyed = []
        for child in node.children.values():
            if child.active_leaves:
                weight = self._weights.get(child.path, 1.0)
                keyed.append((draw() ** (1.0 / weight), child.path, child))
        keyed.sort(key=lambda item: (-item[0], item[1]))
        for _, _, child in keyed:
            if child.client is not None:
                yield child.client
            else:
                yield from self._shuffled_walk(child)


register_sorter("random", RandomSorter)
