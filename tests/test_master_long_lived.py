"""The master keeps its long-lived objects out of full collections
(``LongLivedObjects``, issue 14 §3): frozen after a full collection,
thawed once the frozen set has doubled. Counts, not times."""

from __future__ import annotations

import gc

import pytest

from mesoslike.master.runtime import LongLivedObjects

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def thawed():
    # Automatic collections are off while a test runs: a full collection
    # set off by the test's own allocations (it happened in CI, after 1,600
    # other tests had filled the heap) would be a "full collection since".
    enabled = gc.isenabled()
    gc.disable()
    gc.unfreeze()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


def test_survivors_of_a_full_collection_are_frozen_after_the_turn(thawed):
    long_lived = LongLivedObjects()
    kept = [[i] for i in range(10_000)]
    long_lived.after_turn()
    assert gc.get_freeze_count() == 0          # no full collection since: nothing to do
    gc.collect()
    long_lived.after_turn()
    assert gc.get_freeze_count() >= len(kept)
    frozen = gc.get_freeze_count()
    long_lived.after_turn()
    assert gc.get_freeze_count() == frozen     # once per full collection


def test_the_frozen_set_is_thawed_when_it_has_doubled(thawed):
    long_lived = LongLivedObjects()
    long_lived.THAW_FROM = 1_000   # type: ignore[misc]  # a small process: thaw from 1,000 objects
    gc.collect()
    long_lived.after_turn()
    first = gc.get_freeze_count()
    assert first > 1_000
    gc.collect()
    long_lived.after_turn()                    # over THAW_FROM: thawed once, cycles among them can go
    assert gc.get_freeze_count() == 0 and long_lived.frozen_at_thaw == first
    kept = [[i] for i in range(2 * first)]
    gc.collect()
    long_lived.after_turn()                    # frozen again, thawed only past twice ``first``
    assert gc.get_freeze_count() >= len(kept)
    gc.collect()
    long_lived.after_turn()
    assert gc.get_freeze_count() == 0 and long_lived.frozen_at_thaw > 2 * first


def test_a_frozen_set_too_large_for_a_full_pass_is_never_thawed(thawed):
    # a full pass over tens of millions of objects holds the GIL for seconds:
    # ZooKeeper's session pings wait, the session expires, the master steps down
    long_lived = LongLivedObjects()
    long_lived.THAW_FROM = 1_000     # type: ignore[misc]
    long_lived.THAW_UP_TO = 5_000    # type: ignore[misc]  # "too large" for this test: 5,000 objects
    kept = [[i] for i in range(10_000)]
    gc.collect()
    long_lived.after_turn()
    frozen = gc.get_freeze_count()
    assert frozen >= len(kept)
    more = [[i] for i in range(frozen)]      # doubled: a smaller set would be thawed now
    gc.collect()
    long_lived.after_turn()
    assert gc.get_freeze_count() >= frozen + len(more)
    assert not long_lived.may_thaw             # and the set is not counted again (O(set) a count)


@pytest.fixture
def threshold():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_the_young_generation_is_collected_every_50000_allocations_not_700(threshold):
    gc.set_threshold(700, 10, 10)   # Python's default
    LongLivedObjects().start()
    assert gc.get_threshold() == (LongLivedObjects.YOUNG_PASS_EVERY, 10, 10) == (50_000, 10, 10)


def test_a_higher_threshold_or_the_collector_off_is_left_as_it_is(threshold):
    gc.set_threshold(200_000, 10, 10)
    LongLivedObjects().start()
    assert gc.get_threshold() == (200_000, 10, 10)
    gc.set_threshold(0, 10, 10)
    LongLivedObjects().start()
    assert gc.get_threshold()[0] == 0


def test_a_turn_of_admissions_has_its_young_objects_frozen_once_a_young_pass_is_due(thawed, threshold):
    # after a failover every agent is admitted again, ~125 records an agent that live as long as it: frozen at
    # the turn's end (O(1)) rather than traversed by the young pass due -- which frees none -- and by the older
    # generations' passes after it
    gc.set_threshold(LongLivedObjects.YOUNG_PASS_EVERY, 10, 10)
    long_lived = LongLivedObjects()
    gc.collect()                             # the young generation's count starts at 0
    records = [[i] for i in range(LongLivedObjects.YOUNG_PASS_EVERY)]   # the turn's new state (collector off)
    long_lived.turn_ended(admitted=400)
    assert gc.get_freeze_count() >= len(records) and long_lived.turns_frozen == 1
    assert gc.get_count()[0] < 1_000         # the young pass due has nothing left to traverse


def test_no_freeze_before_a_young_pass_is_due_or_in_a_turn_that_admitted_few_agents(thawed, threshold):
    gc.set_threshold(LongLivedObjects.YOUNG_PASS_EVERY, 10, 10)
    long_lived = LongLivedObjects()
    gc.collect()
    kept = [[i] for i in range(10_000)]      # no pass due yet: the next turns may add to them
    long_lived.turn_ended(admitted=400)
    assert gc.get_freeze_count() == 0
    more = [[i] for i in range(LongLivedObjects.YOUNG_PASS_EVERY)]   # a pass is due, but the turn's objects are
    long_lived.turn_ended(admitted=3)        # not admissions' records: most live a second or two
    assert gc.get_freeze_count() == 0 and long_lived.turns_frozen == 0
    assert gc.get_count()[0] >= len(kept) + len(more)
