"""Small drivers shared by the allocator tests."""

from hypothesis import strategies as st

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


def draw_answer(data, offer):
    """For property tests: a random answer to ``offer`` drawn from ``data``,
    as a function of an allocator (None: keep the offer unanswered)."""
    choice = data.draw(st.sampled_from(["accept-all", "accept-part", "decline", "keep"]))
    refuse = data.draw(st.sampled_from([0, 1, 5, 3600]))
    if choice == "accept-all":
        return lambda alloc: alloc.accept_offer(offer.id, offer.resources, refuse_seconds=refuse)
    if choice == "accept-part":
        part = offer.resources.minimum(R("cpus:1;mem:1"))
        return lambda alloc: alloc.accept_offer(offer.id, part, refuse_seconds=refuse)
    if choice == "decline":
        return lambda alloc: alloc.decline_offer(offer.id, refuse_seconds=refuse)
    return None
