"""The garbage collector held off during a scheduling pass, by its runtimes.

A first pass over 20,000 machines makes some 100,000 objects (machines,
slots, events, vectors); collections set off while it runs would scan them
again and again, a fifth of the pass (``bench/fuxi_scale.py``). The runtime
that drives :meth:`FuxiCore.on_offers <.core.FuxiCore.on_offers>` — the
service, the simulator's policy, the benchmark — runs it inside
:func:`deferred_collection`. The pure core itself leaves the interpreter's
state alone.

What a big pass leaves behind lives on: the slots it granted, their events,
the machines' books. Collecting them once after the pass would still scan
every one of them (about 418,000 after a first pass over 100,000 machines:
0.15-0.25 s, a tenth of the pass), and each later collection of an older
generation again. So after a block that left at least
:data:`FREEZE_FROM` new objects, the survivors are frozen (``gc.freeze``),
as the master freezes its long-lived objects after a full collection
(``mesoslike.master.runtime.LongLivedObjects``): frozen objects are still
freed by their reference counts; only cycles among them wait, until what was
frozen since the last thaw has doubled: then it is thawed once, and the next
full collection takes them.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["deferred_collection", "FREEZE_FROM", "THAW_FROM"]

#: young container objects a block must leave for its survivors to be frozen rather than collected
FREEZE_FROM = 50_000
#: frozen objects (as counted by the blocks that froze them) below which no thaw is worth a full pass
THAW_FROM = 1_000_000


class _Frozen:
    """What the blocks froze (their young objects, counted when frozen;
    ``gc.get_freeze_count`` would walk the whole set), and after a thaw the
    number of full collections then, until the next one. O(1)."""

    since_thaw = 0
    at_last_thaw = 0
    thawed_at_full: int | None = None


@contextmanager
def deferred_collection() -> Iterator[None]:
    """No automatic collection inside the block (unless it was off already);
    after a block that made at least :data:`FREEZE_FROM` objects that are
    still there, they are frozen instead of collected (module docstring)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            _freeze_if_big(gc.get_count()[0])
            gc.enable()


def _full_collections() -> int:
    return gc.get_stats()[2]["collections"]


def _freeze_if_big(young: int) -> None:
    if young < FREEZE_FROM:
        return   # the collector's next young pass takes them, as usual
    if _Frozen.thawed_at_full is not None:
        if _full_collections() == _Frozen.thawed_at_full:
            return   # thawed, and the full pass that frees the cycles has not come yet: freeze nothing till then
        _Frozen.thawed_at_full = None
    _Frozen.since_thaw += young
    if _Frozen.since_thaw > max(2 * _Frozen.at_last_thaw, THAW_FROM):
        # thaw once: every frozen object goes to the oldest generation, whose next full pass frees
        # the cycles that waited; counted anew from there
        gc.unfreeze()
        _Frozen.at_last_thaw, _Frozen.since_thaw = _Frozen.since_thaw, 0
        _Frozen.thawed_at_full = _full_collections()
        return
    gc.freeze()
