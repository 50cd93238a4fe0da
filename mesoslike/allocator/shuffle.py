"""The agent shuffle of an allocation cycle: ``random.Random.shuffle``, cheaper.

A cycle shuffles every agent it visits (Mesos does too: no agent is always
offered first), and at 100,000 agents ``Random.shuffle`` is some 5 % of a
decline-all cycle: a method call to ``_randbelow`` per agent. :func:`shuffle`
is the same algorithm with ``_randbelow_with_getrandbits`` inlined, so it
draws the same bits and makes the same permutation from the same state —
offers stay what they were for a seed (``tests/test_allocator_parts.py``
checks it against ``Random.shuffle``). A ``Random`` subclass that draws
differently gets its own ``shuffle``.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["shuffle"]


def _draws_as_random(rng: random.Random) -> bool:
    """Whether ``rng`` shuffles as ``random.Random`` does, with ``getrandbits``."""
    cls = type(rng)
    # private names of random.Random (typeshed leaves them out): read with getattr
    return (cls.shuffle is random.Random.shuffle
            and getattr(cls, "_randbelow", None) is getattr(random.Random, "_randbelow_with_getrandbits", False))


def shuffle(rng: random.Random, items: list[Any]) -> None:
    """``rng.shuffle(items)``: the same permutation, the same state after. O(n)."""
    if not _draws_as_random(rng):
        rng.shuffle(items)
        return
    getrandbits = rng.getrandbits
    for i in reversed(range(1, len(items))):
        n = i + 1
        bits = n.bit_length()
        j = getrandbits(bits)
        while j >= n:
            j = getrandbits(bits)
        items[i], items[j] = items[j], items[i]
