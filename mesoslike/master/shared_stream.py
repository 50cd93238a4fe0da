"""One rendering of a large document streamed to every reader that asked
for it before it began: :class:`SharedStream`, the streaming counterpart of
:class:`~mesoslike.master.http.Fresh`.

``Fresh`` hands its callers a finished value; for ``/state`` of a million
tasks (~400 MB) that value, held while it is sent, was what took the
master's memory past its bound with readers polling. Here nothing whole is
held: a rendering's pieces go to each reader's
:class:`~mesoslike.http_server.Stream` as the renderer yields them, and the
HTTP server sends them (chunked) from its event loop — no worker thread
waits for a piece. The renderer waits for the slowest reader (a forked
child blocks on its pipe meanwhile), and a reader that has taken nothing
for ``timeout`` seconds while the renderer waits is cut off, so that one
slow client cannot hold the rest for longer than that (each of them: N
stalled readers hold the rendering N times that, once). A rendering that
fails half-way ends its readers' answers short (an error to them, never a
body that looks whole).

Memory: at most ``buffer`` bytes per reader plus the piece in hand,
whatever the document's size. Threads: one pump per rendering in progress.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterator

from mesoslike.http_server import Stream

__all__ = ["SharedStream", "READER_BUFFER", "PIECE"]

log = logging.getLogger("mesoslike.master.shared_stream")

#: bytes a reader may have waiting before the renderer waits for it
READER_BUFFER = 8 << 20
#: the largest piece handed on (a larger one from the renderer is cut)
PIECE = 1 << 20


class SharedStream:
    """Readings of what ``start()`` yields: :meth:`read` returns the body
    of an answer (a :class:`~mesoslike.http_server.Stream`) fed by a
    rendering that begins after the call (never older than the call);
    readers that ask while one is in progress share the next one. At most
    ``buffer`` bytes wait for any reader; one that makes no room for
    ``timeout`` seconds while the renderer waits is cut off. O(readers)
    per piece."""

    def __init__(self, start: Callable[[], Iterator[bytes]], *, buffer: int = READER_BUFFER,
                 timeout: float = 60.0, name: str = "rendering") -> None:
        self._start = start
        self.buffer = buffer
        self.timeout = timeout
        self._name = name
        self._lock = threading.Lock()
        self._waiting: list[Stream] = []
        self._pumping = False
        #: renderings begun (for tests and metrics)
        self.renderings = 0

    def read(self) -> Stream:
        """The body of one answer, fed by the next rendering to begin (at
        once if none is in progress)."""
        stream = Stream(max(self.buffer, PIECE))
        with self._lock:
            self._waiting.append(stream)
            if self._pumping:
                return stream
            self._pumping = True
        threading.Thread(target=self._pump, name=f"{self._name}-pump", daemon=True).start()
        return stream

    def _pump(self) -> None:
        while True:
            with self._lock:
                readers = [stream for stream in self._waiting if not stream.closed]
                self._waiting = []
                if not readers:
                    self._pumping = False
                    return
                self.renderings += 1
            self._render_to(readers)

    def _render_to(self, readers: list[Stream]) -> None:
        pieces: Iterator[bytes] | None = None
        try:
            pieces = self._start()
            for piece in pieces:
                if not self._hand_out(piece, readers):
                    return   # every reader left
        except Exception as exc:   # noqa: BLE001 - its readers are told; the pump goes on
            log.warning("%s failed: %s", self._name, exc)
            for stream in readers:
                stream.abort(f"the {self._name} failed: {exc}")
            return
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()   # a forked renderer's child is killed if it is still running
        for stream in readers:
            stream.close("the answer ended")

    def _hand_out(self, piece: bytes, readers: list[Stream]) -> bool:
        """``piece`` (cut to PIECE-sized parts) queued for every reader still
        there once each has room, cutting off those that made none in
        ``timeout``; False if none is left."""
        view = memoryview(piece)
        for start in range(0, len(view), PIECE):
            part = bytes(view[start:start + PIECE]) if len(view) > PIECE else piece
            for stream in readers:
                if stream.closed:
                    continue
                # each reader its own ``timeout`` from when the renderer turns to it: with one deadline
                # for the part, a reader waited for after a stalled one got none, and was cut off
                # for a full buffer it was draining
                if not stream.wait_for_room(len(part), self.timeout):
                    if not stream.closed:
                        stream.abort(f"the client read too slowly: {stream.buffered} bytes waited "
                                     f"{self.timeout:g} s")
                    continue
                stream.send(part)
        return any(not stream.closed for stream in readers)
