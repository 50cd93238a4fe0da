"""The master's inbox: received frames in the order they are worth handling.

After a failover every agent re-registers at once, and ZeroMQ hands the new
leader their REREGISTER_AGENT frames round-robin with everything else. A
framework's SUBSCRIBE, a PONG or a status update would then wait behind
thousands of registrations that each cost far more to handle. The inbox
takes what is waiting and hands it out with registrations last:

* frames whose type (read with :func:`mesoslike.wire.codec.peek_type`, not
  decoded) is REGISTER_AGENT or REREGISTER_AGENT wait in a FIFO queue;
* everything else is *urgent* and goes first, in arrival order;
* one peer's frames keep their order: once a peer has a registration
  waiting, its later frames wait behind it;
* a registration that repeats, byte for byte, one of the same peer still
  waiting is dropped (counted in ``duplicates``): an agent retries while
  the master is busy (every 4-10 s), and a master taking minutes over
  100,000 registrations would otherwise hold — and handle — every retry.
  The one waiting gets the answer the agent waits for.

It counts the frames and bytes it holds (``len``, :attr:`Inbox.bytes`):
the runtime takes nothing more from its socket while either is at its
bound, so a peer that sends faster than the master handles fills the
socket's queues (ZeroMQ's back-pressure, fair between peers) and not the
master's memory.

Pure: no sockets, no clock. O(1) per frame (a duplicate costs one
comparison of bytes).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable

from mesoslike.wire.codec import peek_type

__all__ = ["Inbox", "DEFERRED_TYPES"]

#: what waits behind everything else
DEFERRED_TYPES = frozenset({"REGISTER_AGENT", "REREGISTER_AGENT"})

Frame = bytes | Exception
Item = tuple[bytes | None, Frame]


def _size(frame: Frame) -> int:
    return len(frame) if isinstance(frame, bytes) else 1


class Inbox:
    def __init__(self, peek: Callable[[bytes], str | None] = peek_type) -> None:
        self._peek = peek
        self._urgent: deque[Item] = deque()
        self._deferred: deque[Item] = deque()
        self._waiting: dict[bytes | None, int] = {}   # peer -> its frames in _deferred
        #: peer -> its latest registration frame waiting in _deferred
        self._registration: dict[bytes | None, bytes] = {}
        #: registrations dropped as repeats of one waiting
        self.duplicates = 0
        #: the bytes of the frames held (an error counts one)
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._urgent) + len(self._deferred)

    @property
    def deferred(self) -> int:
        return len(self._deferred)

    def add(self, peer: bytes | None, frame: Frame) -> bool:
        """Keep ``frame`` of ``peer``; False if it was dropped as a repeat."""
        registration = isinstance(frame, bytes) and self._peek(frame) in DEFERRED_TYPES
        if registration:
            waiting = self._registration.get(peer)
            if waiting is not None and waiting == frame:
                self.duplicates += 1
                return False
        if registration or self._waiting.get(peer):
            self._deferred.append((peer, frame))
            self._waiting[peer] = self._waiting.get(peer, 0) + 1
            if registration:
                assert isinstance(frame, bytes)
                self._registration[peer] = frame
        else:
            self._urgent.append((peer, frame))
        self.bytes += _size(frame)
        return True

    def take(self, limit: int, max_bytes: int | None = None) -> list[Item]:
        """Up to ``limit`` frames: urgent ones first, then registrations.
        Given ``max_bytes``, no more urgent frames once those taken hold that
        many bytes (at least one is taken: a frame may carry a batch of a
        thousand updates); registrations are counted by ``limit`` only, as
        after a failover they come by the thousand, each a frame."""
        out: list[Item] = []
        budget = max_bytes if max_bytes is not None else math.inf
        while self._urgent and len(out) < limit and budget > 0:
            item = self._urgent.popleft()
            size = _size(item[1])
            budget -= size
            self.bytes -= size
            out.append(item)
        while self._deferred and len(out) < limit:
            item = self._deferred.popleft()
            self.bytes -= _size(item[1])
            left = self._waiting[item[0]] - 1
            if left:
                self._waiting[item[0]] = left
            else:
                del self._waiting[item[0]]
            if self._registration.get(item[0]) is item[1]:
                del self._registration[item[0]]   # handled now: a later retry is handled too
            out.append(item)
        return out

    def clear(self) -> None:
        self.bytes = 0
        self._urgent.clear()
        self._deferred.clear()
        self._waiting.clear()
        self._registration.clear()
