"""The sans-I/O allocator: sorters and the hierarchical offer allocator."""

from mesoslike.allocator.sorter import Sorter, make_sorter, register_sorter, sorter_names
from mesoslike.allocator.drf import DRFSorter
from mesoslike.allocator.random_sorter import RandomSorter

__all__ = ["Sorter", "DRFSorter", "RandomSorter", "make_sorter", "register_sorter", "sorter_names"]

from mesoslike.allocator.hierarchical import (  # noqa: E402
    DEFAULT_MIN_ALLOCATABLE,
    HierarchicalAllocator,
    parse_min_allocatable,
)
from mesoslike.allocator.offers import AllocatorStatistics, Offer, Rescind, RescindReason  # noqa: E402
from mesoslike.allocator.blockers import OfferBlocker  # noqa: E402
from mesoslike.allocator.roles import DEFAULT_ROLE, validate_role  # noqa: E402

__all__ += [
    "HierarchicalAllocator", "parse_min_allocatable", "DEFAULT_MIN_ALLOCATABLE",
    "AllocatorStatistics", "OfferBlocker", "Offer", "Rescind", "RescindReason", "DEFAULT_ROLE", "validate_role",
]
