"""One rendering of a large document streamed to every reader that asked
for it before it began: :class:`SharedStream`, the streaming counterpart of
:class:`~mesoslike.master.http.Fresh`.

``Fresh`` hands its callers a finished value; for ``/state`` of a million
tasks (~400 MB) that value, held while it is sent, was what took the
master's memory past its bound with readers polling. Here nothing whole is
held: a rendering's pieces go to each of its readers' small buffers as the
renderer yields them, and each reader's HTTP answer sends them as they
arrive (chunked). The renderer waits for the slowest reader (a forked
child blocks on its pipe), and a reader that takes nothing for ``timeout``
seconds while the others wait is cut off, so one slow client cannot hold
the rest for longer than that.

Memory: at most ``buffer`` bytes per reader plus the piece in hand,
whatever the document's size. Threads: one pump per rendering in progress;
a reader's :meth:`SharedReading.__next__` blocks its caller (an HTTP
worker) until a piece is there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable, Iterator

__all__ = ["SharedStream", "SharedReading", "ReadingFailed", "READER_BUFFER"]

log = logging.getLogger("mesoslike.master.shared_stream")

#: bytes a reader may have waiting before the renderer waits for it
READER_BUFFER = 8 << 20


class ReadingFailed(Exception):
    """The rendering failed, or this reader was cut off: the answer is incomplete."""


class SharedReading:
    """One reader's pieces of one rendering, in order (an iterator). Close it
    (the HTTP answer's ``on_done``) when its client leaves: the renderer
    stops waiting for it, and stops altogether when no reader is left."""

    def __init__(self, shared: SharedStream) -> None:
        self._shared = shared
        self._pieces: deque[bytes] = deque()
        self.buffered = 0
        self.ended = False           # the rendering ended and every piece was queued
        self.failure: str = ""       # why this reading failed ("" if it did not)
        self.closed = False          # its reader left

    def __iter__(self) -> SharedReading:
        return self

    def __next__(self) -> bytes:
        shared = self._shared
        with shared._cond:
            deadline = time.monotonic() + shared.wait_limit
            while not self._pieces and not self.ended and not self.failure and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ReadingFailed("no piece of the rendering came in time")
                shared._cond.wait(left)
            if self._pieces:
                piece = self._pieces.popleft()
                self.buffered -= len(piece)
                shared._cond.notify_all()
                return piece
            if self.failure:
                raise ReadingFailed(self.failure)
            raise StopIteration

    def close(self) -> None:
        """This reader leaves (idempotent)."""
        with self._shared._cond:
            self.closed = True
            self._pieces.clear()
            self.buffered = 0
            self._shared._cond.notify_all()


class SharedStream:
    """Readings of what ``start()`` yields: :meth:`read` returns a reading of
    a rendering that begins after the call (never older than the call);
    readers that ask while one is in progress share the next one. At most
    ``buffer`` bytes wait for any reader; one that takes nothing for
    ``timeout`` seconds while the renderer waits is cut off. ``wait_limit``:
    how long a reader waits for its next piece at most (the rendering's own
    time limit is ``start``'s business). O(readers) per piece."""

    def __init__(self, start: Callable[[], Iterator[bytes]], *, buffer: int = READER_BUFFER,
                 timeout: float = 60.0, wait_limit: float = 900.0, name: str = "rendering") -> None:
        self._start = start
        self.buffer = buffer
        self.timeout = timeout
        self.wait_limit = wait_limit
        self._name = name
        self._cond = threading.Condition()
        self._waiting: list[SharedReading] = []
        self._pumping = False
        #: renderings begun (for tests and metrics)
        self.renderings = 0

    def read(self) -> SharedReading:
        """A reading of the next rendering to begin (it begins at once if none is in progress)."""
        reading = SharedReading(self)
        with self._cond:
            self._waiting.append(reading)
            if self._pumping:
                return reading
            self._pumping = True
        threading.Thread(target=self._pump, name=f"{self._name}-pump", daemon=True).start()
        return reading

    def _pump(self) -> None:
        while True:
            with self._cond:
                readers = [reading for reading in self._waiting if not reading.closed]
                self._waiting = []
                if not readers:
                    self._pumping = False
                    return
                self.renderings += 1
            self._render_to(readers)

    def _render_to(self, readers: list[SharedReading]) -> None:
        pieces: Iterator[bytes] | None = None
        failure = ""
        try:
            pieces = self._start()
            for piece in pieces:
                if not self._hand_out(piece, readers):
                    break   # every reader left
        except Exception as exc:   # noqa: BLE001 - its readers are told; the pump goes on
            log.warning("%s failed: %s", self._name, exc)
            failure = f"the {self._name} failed: {exc}"
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()
            with self._cond:
                for reading in readers:
                    if failure and not reading.closed:
                        reading.failure = failure
                    reading.ended = True
                self._cond.notify_all()

    def _hand_out(self, piece: bytes, readers: list[SharedReading]) -> bool:
        """Queue ``piece`` for every reader still there once each has room
        (cutting off those that made none in ``timeout``); False if none is left."""
        with self._cond:
            deadline = time.monotonic() + self.timeout
            while True:
                live = [reading for reading in readers if not reading.closed and not reading.failure]
                full = [reading for reading in live if reading.buffered >= self.buffer]
                if not full:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    for reading in full:
                        reading.failure = f"the client read too slowly: {self.buffer} bytes waited {self.timeout:g} s"
                    continue
                self._cond.wait(left)
            for reading in live:
                reading._pieces.append(piece)
                reading.buffered += len(piece)
            self._cond.notify_all()
            return bool(live)
