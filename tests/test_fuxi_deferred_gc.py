"""The collector around a scheduling pass: a big pass's survivors frozen, not
scanned again and again; cycles among them freed after a thaw."""

from __future__ import annotations

import gc
import weakref

import pytest

from mesoslike_frameworks.fuxi import deferred_gc
from mesoslike_frameworks.fuxi.deferred_gc import FREEZE_FROM, deferred_collection


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def fresh_collector(monkeypatch):
    """Each test starts with nothing frozen and its own counts, and leaves the interpreter so."""
    monkeypatch.setattr(deferred_gc._Frozen, "since_thaw", 0)
    monkeypatch.setattr(deferred_gc._Frozen, "at_last_thaw", 0)
    monkeypatch.setattr(deferred_gc._Frozen, "thawed_at_full", None)
    gc.unfreeze()
    gc.collect()
    yield
    gc.unfreeze()
    gc.collect()


def test_a_big_pass_leaves_its_survivors_frozen_not_for_the_young_collection_to_scan():
    with deferred_collection():
        kept = [[] for _ in range(FREEZE_FROM + 1_000)]
    assert gc.get_freeze_count() >= len(kept)
    assert gc.get_count()[0] < 1_000 and gc.isenabled()


def test_a_small_pass_is_left_to_the_collector():
    with deferred_collection():
        kept = [[] for _ in range(1_000)]
    assert gc.get_freeze_count() == 0 and kept   # the young collection takes them as usual


def test_the_collector_off_before_the_block_stays_off_and_nothing_is_frozen():
    gc.disable()
    try:
        with deferred_collection():
            kept = [[] for _ in range(FREEZE_FROM + 1_000)]
        assert not gc.isenabled() and gc.get_freeze_count() == 0 and kept
    finally:
        gc.enable()


def test_a_cycle_frozen_with_a_pass_is_freed_after_the_thaw_and_the_next_full_collection(monkeypatch):
    monkeypatch.setattr(deferred_gc, "THAW_FROM", 3 * FREEZE_FROM)
    with deferred_collection():
        kept = [[] for _ in range(FREEZE_FROM)]
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is not None, "frozen: a full collection does not see the cycle"
    passes = 1
    while gc.get_freeze_count():   # more big passes, until what was frozen since the last thaw doubled
        with deferred_collection():
            kept += [[] for _ in range(FREEZE_FROM)]
        passes += 1
        assert passes < 10
    gc.collect()
    assert gone() is None, "thawed: the next full collection frees the cycle"
    # and freezing starts again after that full collection
    with deferred_collection():
        kept += [[] for _ in range(FREEZE_FROM)]
    assert gc.get_freeze_count() >= FREEZE_FROM
