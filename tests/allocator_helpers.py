"""Small drivers shared by the allocator tests."""

from mesoslike.allocator import HierarchicalAllocator
from mesoslike.clock import FakeClock
from mesoslike.resources import Resources

R = Resources.parse


def make(**kwargs):
    clock = FakeClock()
    return HierarchicalAllocator(clock=clock, **kwargs), clock


def run_tasks(alloc, task_sizes, cycles=100, refuse_when_full=3600.0):
    """Frameworks launch one task per offer while it fits, decline the rest
    with refuse 0; a framework whose task no longer fits declines with a long
    filter. Returns tasks launched per framework."""
    launched = {fw: 0 for fw in task_sizes}
    for _ in range(cycles):
        offers = alloc.allocate()
        if not offers:
            break
        for offer in offers:
            task = task_sizes[offer.framework_id]
            if offer.resources.contains(task):
                alloc.accept_offer(offer.id, task, refuse_seconds=0)
                launched[offer.framework_id] += 1
            else:
                alloc.decline_offer(offer.id, refuse_seconds=refuse_when_full)
        alloc.check_invariants()
    return launched
