"""The sans-I/O allocator: sorters and the hierarchical offer allocator."""

from typing import TYPE_CHECKING

__all__ = [
    "Sorter", "DRFSorter", "RandomSorter", "make_sorter", "register_sorter", "sorter_names",
    "HierarchicalAllocator", "parse_min_allocatable", "DEFAULT_MIN_ALLOCATABLE",
    "AllocatorStatistics", "OfferBlocker", "Offer", "Rescind", "RescindReason", "DEFAULT_ROLE", "validate_role",
]

if TYPE_CHECKING:   # the names __getattr__ below loads on first use, for type checkers
    from mesoslike.allocator.drf import DRFSorter
    from mesoslike.allocator.random_sorter import RandomSorter
    from mesoslike.allocator.sorter import Sorter, make_sorter, register_sorter, sorter_names
    from mesoslike.allocator.blockers import OfferBlocker
    from mesoslike.allocator.hierarchical import DEFAULT_MIN_ALLOCATABLE, HierarchicalAllocator, parse_min_allocatable
    from mesoslike.allocator.offers import AllocatorStatistics, Offer, Rescind, RescindReason
    from mesoslike.allocator.roles import DEFAULT_ROLE, validate_role

#: names loaded on first use, and the module each comes from: the allocator
#: itself (its sorters, its quota and role books) is the master's, not the
#: driver's, though every peer's message types import the offer model from here
_LAZY = {"Sorter": "mesoslike.allocator.sorter", "make_sorter": "mesoslike.allocator.sorter",
         "register_sorter": "mesoslike.allocator.sorter", "sorter_names": "mesoslike.allocator.sorter",
         "DRFSorter": "mesoslike.allocator.drf", "RandomSorter": "mesoslike.allocator.random_sorter",
         "HierarchicalAllocator": "mesoslike.allocator.hierarchical",
         "parse_min_allocatable": "mesoslike.allocator.hierarchical",
         "DEFAULT_MIN_ALLOCATABLE": "mesoslike.allocator.hierarchical",
         "AllocatorStatistics": "mesoslike.allocator.offers", "Offer": "mesoslike.allocator.offers",
         "Rescind": "mesoslike.allocator.offers", "RescindReason": "mesoslike.allocator.offers",
         "OfferBlocker": "mesoslike.allocator.blockers", "DEFAULT_ROLE": "mesoslike.allocator.roles",
         "validate_role": "mesoslike.allocator.roles"}

def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value   # once: the next lookup is an ordinary attribute
        return value
    raise AttributeError(f"module 'mesoslike.allocator' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
