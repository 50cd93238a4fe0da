"""The sorter interface and its registry (Mesos's allocator/sorter split).

A sorter orders *clients* — roles, or the frameworks inside one role — for
allocation. The allocator asks it for an order and reports every allocation
and deallocation; the policy lives entirely behind this small interface, so a
new policy is a new sorter, not a new allocator.

Client names are paths. A *hierarchical* sorter treats ``"eng/prod"`` as the
child ``prod`` of ``eng`` and orders siblings level by level (a role's weight
applies to its whole subtree); a flat sorter treats names as opaque.
"""

from __future__ import annotations

import abc
import importlib
import random
from typing import Callable, Iterator, Sequence

from mesoslike.resources import Resources

__all__ = ["Sorter", "SorterFactory", "register_sorter", "make_sorter", "sorter_names"]


class Sorter(abc.ABC):
    """Orders clients for allocation.

    Contract (checked by ``tests/test_sorter_contract.py`` for every
    registered sorter):

    - ``iter_sorted()`` yields every *active* client exactly once and no
      inactive one; the sorter must not be mutated while the iterator is in
      use (stop iterating, mutate, ask again).
    - ``allocated``/``unallocated`` keep ``allocation(client)`` exact;
      allocations of inactive clients still count.
    - ``share(client)`` is the client's dominant share divided by its weight:
      max over scalar kinds of allocated/total. In a hierarchical sorter a
      path's weight applies to its subtree against its siblings; a client
      that also has sub-clients competes with them as a leaf of weight 1.
    - The order is deterministic for a given history (random sorters take a
      seeded ``random.Random``).
    """

    #: registry name of the policy, e.g. "drf"
    policy: str = ""

    @abc.abstractmethod
    def add_client(self, client: str) -> None:
        """Add an (active) client. Adding a known client raises ``ValueError``."""

    @abc.abstractmethod
    def remove_client(self, client: str) -> None:
        """Remove a client and forget its allocation."""

    @abc.abstractmethod
    def activate(self, client: str) -> None:
        """Include the client in the order again."""

    @abc.abstractmethod
    def deactivate(self, client: str) -> None:
        """Leave the client out of the order; its allocation still counts."""

    @abc.abstractmethod
    def update_weight(self, path: str, weight: float) -> None:
        """Set the weight of a path (kept even before a client uses it)."""

    @abc.abstractmethod
    def allocated(self, client: str, resources: Resources) -> None:
        """Record that ``resources`` were allocated to the client: one more
        allocation received (what DRF's tie-break counts), even if empty."""

    def allocated_many(self, client: str, resources: Resources, count: int) -> None:
        """``count`` allocations of ``resources`` each to the client, as
        ``count`` calls of :meth:`allocated` (a sorter may make them in one
        step: the allocator books a turn's re-registered agents this way)."""
        for _ in range(count):
            self.allocated(client, resources)

    @abc.abstractmethod
    def unallocated(self, client: str, resources: Resources) -> None:
        """Record that ``resources`` came back from the client."""

    @abc.abstractmethod
    def add_total(self, resources: Resources) -> None:
        """Grow the pool that shares are measured against (agent added)."""

    @abc.abstractmethod
    def remove_total(self, resources: Resources) -> None:
        """Shrink the pool (agent removed)."""

    @abc.abstractmethod
    def iter_sorted(self) -> Iterator[str]:
        """Active clients, the one to allocate to first coming first."""

    @abc.abstractmethod
    def share(self, client: str) -> float:
        """Weighted dominant share of a client, or of an inner path of a
        hierarchical sorter (its whole subtree)."""

    @abc.abstractmethod
    def allocation(self, client: str) -> Resources:
        """Scalar resources currently allocated to the client."""

    @abc.abstractmethod
    def clients(self) -> list[str]:
        """Every client, active or not, in name order."""

    @abc.abstractmethod
    def fresh(self, hierarchical: bool | None = None) -> Sorter:
        """A new, empty sorter of the same policy and configuration
        (``hierarchical`` overrides whether names are role paths)."""

    def live_order(self) -> Sequence[tuple] | None:
        """For a hot loop that walks the order once per agent: a live,
        read-only sequence of entries in :meth:`iter_sorted` order whose
        ``[2]`` is the client, kept up to date by grants and releases
        (``allocated``, ``unallocated``) and valid until a client comes,
        goes, is (de)activated or reweighted, or a total changes; None if the
        sorter keeps none (then walk :meth:`iter_sorted`)."""
        return None

    def sort(self) -> list[str]:
        """``list(iter_sorted())``."""
        return list(self.iter_sorted())

    def __contains__(self, client: str) -> bool:
        return client in self.clients()

    def __len__(self) -> int:
        """How many clients, active or not."""
        return len(self.clients())


#: builds a sorter; ``hierarchical`` says if names are role paths
SorterFactory = Callable[..., Sorter]

_REGISTRY: dict[str, SorterFactory] = {}


#: the bundled policies: name -> (module, factory's name), imported when first built (their modules are
#: the master's and the simulator's, not every peer's: a framework's message types import the allocator's
#: offer model, and the package's names load on first use). A name registered again overrides its entry.
_BUNDLED: dict[str, tuple[str, str]] = {"drf": ("mesoslike.allocator.drf", "DRFSorter"),
                                        "random": ("mesoslike.allocator.random_sorter", "RandomSorter")}


def register_sorter(name: str, factory: SorterFactory) -> None:
    """Make a policy available by name to ``HierarchicalAllocator(sorter=name)``.

    ``factory(hierarchical: bool, rng: random.Random) -> Sorter``. A
    bundled name (``drf``, ``random``) registered again is overridden.
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"sorter name must be a non-empty string, got {name!r}")
    _REGISTRY[name] = factory


def sorter_names() -> list[str]:
    """Names of the registered policies (the bundled ones among them)."""
    return sorted(_REGISTRY.keys() | _BUNDLED.keys())


def make_sorter(name: str, *, hierarchical: bool = True, rng: random.Random | None = None) -> Sorter:
    """Build a registered sorter by name; an unknown name raises ``ValueError``
    listing the known ones."""
    if name not in _REGISTRY and name in _BUNDLED:
        module, factory_name = _BUNDLED[name]
        _REGISTRY[name] = getattr(importlib.import_module(module), factory_name)
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown sorter {name!r}; known: {', '.join(sorter_names())}") from None
    return factory(hierarchical=hierarchical, rng=rng if rng is not None else random.Random(0))
