"""The sorters' side of added agents, booked when the sorters are next read.

After a failover a new leader adds hundreds of re-registering agents a turn,
each with what its frameworks' tasks hold there; the allocator books their
totals and grants in the sorters once they are read (``_book_added``), added
up. These tests hold it to booking each agent as it comes: the same offers,
shares, counts and invariants, whatever the history between the additions.
"""

import random

import pytest

from allocator_helpers import R, make
from mesoslike.resources import Resources

SIZES = [R("cpus:1;mem:128"), R("cpus:0.5;mem:64"), R("cpus:2;mem:512")]


def _history(seed: int, read_after_each: bool, roles: int = 1) -> tuple[list, list, dict]:
    """A random history of agents added with holdings, frameworks coming and
    going, offers answered; with ``read_after_each`` a sorter read after every
    added agent books it at once. What the allocator said along the way."""
    rng = random.Random(seed)
    alloc, clock = make(allocation_interval=1.0)
    said: list = []
    frameworks = [f"f{i}" for i in range(4)]
    for i, framework in enumerate(frameworks):
        alloc.add_framework(framework, role=f"r{i % roles}")
    total = R("cpus:32;mem:8192")
    reserved = R("cpus(r0):4;cpus:28;mem:8192")
    added = 0
    live: list[str] = []
    for step in range(60):
        action = rng.random()
        if action < 0.6:
            used: dict[str, Resources] = {}
            for framework in rng.sample(frameworks, rng.randint(0, len(frameworks))):
                size = rng.choice(SIZES)
                used[framework] = Resources.sum([size] * rng.randint(1, 3))
            # now and then an agent with reservations: booked at once, after what waits
            alloc.add_agent(f"a{added}", reserved if rng.random() < 0.1 else total, used=used)
            live.append(f"a{added}")
            added += 1
            if read_after_each:
                alloc.dominant_share(frameworks[0])   # a read: books the agent at once
        elif action < 0.7 and len(frameworks) > 1:
            gone = frameworks.pop(rng.randrange(len(frameworks)))
            alloc.remove_framework(gone)
            said.append(("removed", gone))
        elif action < 0.75:
            framework = f"g{step}"
            frameworks.append(framework)
            alloc.add_framework(framework, role=f"r{rng.randrange(roles + 1)}")
        elif action < 0.8 and live:
            alloc.remove_agent(live.pop(rng.randrange(len(live))))
        else:
            clock.advance(1.0)
            for offer in alloc.tick():
                said.append((offer.framework_id, offer.agent_id, offer.resources))
                if rng.random() < 0.5:
                    alloc.accept_offer(offer.id, offer.resources.minimum(R("cpus:1;mem:64")), refuse_seconds=0)
                else:
                    alloc.decline_offer(offer.id, refuse_seconds=rng.choice([0, 5]))
        said.append(sorted((f, round(alloc.dominant_share(f), 9)) for f in frameworks))
    alloc.check_invariants()
    shares = {f: alloc.dominant_share(f) for f in frameworks}
    return said, [alloc.allocation(f) for f in frameworks], {"shares": shares, "stats": alloc.statistics()}


@pytest.mark.parametrize("roles", [1, 2])
@pytest.mark.parametrize("seed", range(12))
def test_agents_booked_when_the_sorters_are_read_leave_what_booking_each_at_once_leaves(seed, roles):
    assert _history(seed, read_after_each=False, roles=roles) == _history(seed, read_after_each=True, roles=roles)


def test_a_turns_agents_are_booked_as_one_grant_per_framework_and_vector_with_its_count():
    alloc, clock = make()
    alloc.add_framework("f1")
    alloc.add_framework("f2")
    vector, total = R("cpus:1;mem:128"), R("cpus:8;mem:4096")
    for i in range(300):
        alloc.add_agent(f"a{i}", total, used={"f1": vector, "f2": vector} if i % 3 else {"f1": vector})
    assert len(alloc._unbooked_grants) == 2 and len(alloc._unbooked_totals) == 1
    assert alloc.dominant_share("f1") == pytest.approx(300 / 2400)
    assert alloc.dominant_share("f2") == pytest.approx(200 / 2400)
    assert not alloc._unbooked_totals and not alloc._unbooked_grants
    sorter = alloc._framework_sorters_booked["*"]
    assert sorter._leaves["f1"].count == 300 and sorter._leaves["f2"].count == 200
    alloc.check_invariants()
