"""Hostile frames for the fuzz test (issue 12 §4): seeded and bounded.

:func:`hostile_frames` makes, from valid example messages, frames of every
kind a hostile or broken peer sends: random bytes, truncated frames, fields
of the wrong type, huge numbers (1.7e305, 1e308, 2**64 - 1...), hostile
resources strings (each quantity or their sum too large, 5,000-digit range
bounds), strings of a megabyte, and the valid examples themselves (so that
state changes happen between the junk). Oversize frames (over the master
protocol's frame limit: the default --max-message-size and 1 MiB) are separate: ZeroMQ drops the connection that sends one,
so a test sends them on a connection of their own (:func:`oversize_frame`).
"""

from __future__ import annotations

import random
from typing import Iterator

import msgpack

from codec_helpers import HOSTILE_NUMBERS, HOSTILE_RESOURCES, ODD_VALUES, _lookup, _paths, _replaced
from mesoslike.wire import encode
from mesoslike.wire.codec import CODEC

KINDS = ("bytes", "truncated", "wrong_type", "huge_number", "resources", "long_string", "valid")


def hostile_frames(rng: random.Random, examples: list[object], count: int,
                   protect: tuple[str, ...] = ()) -> Iterator[tuple[str, bytes]]:
    """``count`` frames, as (kind, frame). Fields named in ``protect`` keep
    their value (a task's ``command``: the agent would run whatever a
    mutation put there)."""
    frames = [encode(example) for example in examples]
    plains = [msgpack.unpackb(frame, raw=False) for frame in frames]
    for _ in range(count):
        kind = rng.choice(KINDS)
        index = rng.randrange(len(frames))
        if kind == "bytes":
            yield kind, rng.randbytes(rng.randint(0, 300))
        elif kind == "truncated":
            frame = frames[index]
            yield kind, frame[:rng.randrange(max(1, len(frame)))]
        elif kind == "valid":
            yield kind, frames[index]
        else:
            yield kind, _mutated(rng, plains[index], kind, protect)


def _mutated(rng: random.Random, plain: dict, kind: str, protect: tuple[str, ...]) -> bytes:
    paths = [path for path in list(_paths(plain))[1:]
             if path[0] not in ("v", "type") and not any(part in protect for part in path)]
    if not paths:
        return msgpack.packb(plain, use_bin_type=True)
    if kind == "resources":
        targets = [path for path in paths if path[-1] == "resources"] or paths
        value: object = rng.choice(HOSTILE_RESOURCES)
    elif kind == "huge_number":
        targets = paths
        value = rng.choice(HOSTILE_NUMBERS + [2**64 - 1, -(2**63)])
    elif kind == "long_string":
        targets = [path for path in paths if isinstance(_lookup(plain, path), str)] or paths
        value = "z" * rng.choice([1_000, 100_000, 1_000_000])
    else:  # wrong_type
        targets = paths
        value = rng.choice(ODD_VALUES)
    return msgpack.packb(_replaced(plain, rng.choice(targets), value), use_bin_type=True)


def oversize_frame() -> bytes:
    """A frame one byte over the master protocol's limit (a master's or agent's of the default --max-message-size)."""
    return b"\x00" * (CODEC.max_message_size + 1)
