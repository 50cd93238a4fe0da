"""The garbage collector held off during a scheduling pass, by its runtimes.

A first pass over 20,000 machines makes some 100,000 objects (machines,
slots, events, vectors); collections set off while it runs would scan them
again and again, a fifth of the pass (``bench/fuxi_scale.py``). The runtime
that drives :meth:`FuxiCore.on_offers <.core.FuxiCore.on_offers>` — the
service, the simulator's policy, the benchmark — runs it inside
:func:`deferred_collection`, and one collection of them follows, as the
master's loop does with its turns. The pure core itself leaves the
interpreter's state alone.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["deferred_collection"]


@contextmanager
def deferred_collection() -> Iterator[None]:
    """No automatic collection inside the block (unless it was off already)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
