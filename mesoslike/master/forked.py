"""Large read-only views (``/state``, the v1 operator ``GET_STATE``) rendered
in a forked child: the fork is the snapshot.

Rendering 1,000,000 tasks to JSON is tens of seconds of Python holding the
GIL; in a thread of the master the loop then waits for the GIL at every
socket call it makes (the "convoy": a turn of a few milliseconds took
seconds while readers polled ``/state``). ``os.fork`` under the master's
lock copies the process's page tables, not its memory (copy-on-write): the
child holds the core exactly as it was at that instant, renders it with its
own interpreter and CPU, writes the bytes into a pipe and exits; the parent
only reads the pipe (the GIL released while it waits). The loop waits for
the fork alone (page tables: milliseconds per GB). :func:`stream_forked`
hands the pieces on as they are read (``/state`` is sent as it is rendered:
the parent never holds a whole document, 400 MB at 1,000,000 tasks);
:func:`render_forked` joins them.

The child runs :data:`RENDER_NICENESS` nicer than the master: a rendering is
bulk work, the loop's turns are latency. The child runs only ``render`` (pure: no locks, no sockets, no logging; it
must not wait for another thread, which the child does not have) and leaves
with ``os._exit`` (no atexit, no destructors of the parent's objects). Where
``fork`` is missing or refused (no memory for the page tables), the caller
renders in its own thread as before.
"""

from __future__ import annotations

import fcntl
import gc
import os
import select
import signal
import time
from typing import Callable, ContextManager, Iterable

__all__ = ["render_forked", "stream_forked", "ForkedPieces", "ForkFailed", "RENDER_TIMEOUT"]

#: a child that has not finished by then is killed and the caller told
RENDER_TIMEOUT = 600.0
#: how much nicer than the master the rendering child runs: where CPUs are short, the loop's turns
#: (latency: agents' pings, offers) go before the bulk rendering (throughput), which then just takes longer
RENDER_NICENESS = 10
_CHUNK = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class ForkFailed(Exception):
    """The child could not be started, or did not render (its exit status)."""


def render_forked(lock: ContextManager[object], render: Callable[[], bytes], timeout: float = RENDER_TIMEOUT) -> bytes:
    """``render()`` run in a child forked while ``lock`` is held (so it sees
    what ``lock`` guards in one consistent state); its bytes."""
    return b"".join(stream_forked(lock, lambda: (render(),), timeout))


def stream_forked(lock: ContextManager[object], render: Callable[[], Iterable[bytes]],
                  timeout: float = RENDER_TIMEOUT) -> ForkedPieces:
    """The pieces ``render()`` yields in a child forked *now*, while ``lock``
    is held, read as the child writes them (at most ``_CHUNK`` bytes each):
    the caller never holds more than a piece, however large the whole.
    ForkFailed at once if no child can be started, or from the iterator if
    the child fails or outlives ``timeout``. Closing the iterator before its
    end kills the child."""
    if not hasattr(os, "fork"):
        raise ForkFailed("this platform has no fork")
    readable, writable = os.pipe()
    _widen(writable)
    try:
        with lock:
            pid = os.fork()
            if pid == 0:   # the child: never returns
                _child(writable, readable, render)
    except OSError as exc:
        os.close(readable)
        os.close(writable)
        raise ForkFailed(f"fork: {exc}") from None
    os.close(writable)
    return ForkedPieces(pid, readable, time.monotonic() + timeout)


def _widen(pipe: int) -> None:
    """A pipe of ``_CHUNK`` bytes where Linux allows it (64 KiB by default):
    each piece read is then up to 1 MiB, and the threads that hand a piece on
    to its readers wake 16 times less often."""
    try:
        fcntl.fcntl(pipe, _F_SETPIPE_SZ, _CHUNK)
    except OSError:
        pass   # over /proc/sys/fs/pipe-max-size for this user: the default size still works


class ForkedPieces:
    """The pieces a rendering child writes, as an iterator; :meth:`close`
    (also run at the end, on an error, or when it is dropped) kills a child
    still running and reaps it. Not thread-safe: one reader."""

    def __init__(self, pid: int, readable: int, deadline: float) -> None:
        self._pid, self._readable, self._deadline = pid, readable, deadline
        self._poller = select.poll()
        self._poller.register(readable, select.POLLIN)
        self._open = True

    def __iter__(self) -> ForkedPieces:
        return self

    def __next__(self) -> bytes:
        if not self._open:
            raise StopIteration
        try:
            left = self._deadline - time.monotonic()
            if left <= 0 or not self._poller.poll(left * 1000):
                raise ForkFailed("the rendering child did not finish in time")
            chunk = self._read()
        except BaseException:
            self.close()
            raise
        if chunk:
            return chunk
        status = self._end(kill=False)
        if status != 0:
            raise ForkFailed(f"the rendering child ended with status {status:#x}")
        raise StopIteration

    def _read(self) -> bytes:
        """What the pipe holds now, up to ``_CHUNK`` bytes, once it holds
        something (b"" at its end); what the child writes meanwhile is taken
        too, so a piece is rarely smaller than the pipe."""
        chunk = os.read(self._readable, _CHUNK)
        pieces, size = [chunk], len(chunk)
        while chunk and size < _CHUNK and self._poller.poll(0):
            chunk = os.read(self._readable, _CHUNK - size)
            pieces.append(chunk)
            size += len(chunk)
        return b"".join(pieces)

    def close(self) -> None:
        """Stop reading: the child, if still running, is killed."""
        if self._open:
            self._end(kill=True)

    def _end(self, kill: bool) -> int:
        self._open = False
        os.close(self._readable)
        if kill:
            os.kill(self._pid, signal.SIGKILL)
        return os.waitpid(self._pid, 0)[1]

    def __del__(self) -> None:
        self.close()


def _lower_priority() -> None:
    """The child yields the CPU to the master's loop (:data:`RENDER_NICENESS`);
    best effort: a refused change (no permission) renders at the master's priority."""
    try:
        os.nice(RENDER_NICENESS)
    except OSError:
        pass


def _child(writable: int, readable: int, render: Callable[[], Iterable[bytes]]) -> None:
    code = 1
    try:
        os.close(readable)
        _lower_priority()
        gc.disable()   # it lives for one rendering: reference counts free what it makes
        for piece in render():
            view = memoryview(piece)
            while view:
                view = view[os.write(writable, view):]
        code = 0
    except BaseException:   # noqa: BLE001 - the parent learns it from the status
        pass
    finally:
        os._exit(code)
