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


def test_a_turn_that_built_many_objects_has_them_frozen_at_its_end(thawed):
    # after a failover a turn of 2,000 re-registrations leaves ~250,000 records that live as long as their
    # agents: frozen at the turn's end (O(1)) rather than traversed by the young pass due, which frees none
    long_lived = LongLivedObjects()
    long_lived.FREEZE_TURN_OVER = 20_000   # type: ignore[misc]  # a small turn for this test
    gc.collect()                             # the young generation's count starts at 0
    records = [[i] for i in range(25_000)]   # the turn's new state (the collector is off during a turn)
    long_lived.turn_ended()
    assert gc.get_freeze_count() >= len(records) and long_lived.turns_frozen == 1
    assert gc.get_count()[0] < 1_000         # the young pass due has nothing left to traverse


def test_an_ordinary_turn_leaves_its_objects_to_the_young_pass(thawed):
    long_lived = LongLivedObjects()
    long_lived.FREEZE_TURN_OVER = 20_000   # type: ignore[misc]
    gc.collect()
    kept = [[i] for i in range(5_000)]       # fewer than FREEZE_TURN_OVER: most live a second or two
    long_lived.turn_ended()
    assert gc.get_freeze_count() == 0 and long_lived.turns_frozen == 0
    assert gc.get_count()[0] >= len(kept)
