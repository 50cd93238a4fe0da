"""Sandbox garbage collection: which sandboxes of ended tasks to remove.

As Mesos's agent does (``--gc_delay``, default one week), a sandbox is kept
for ``gc_delay`` seconds after it was last used, so that people can read
what the task printed. When the work directory's file system is fuller
than ``disk_watermark`` (a fraction of its size), the oldest ended
sandboxes go at once, oldest first, until what they free brings the use
back under the watermark. Sandboxes of tasks the agent still knows (running,
or ended with an unacknowledged update) are never candidates.

:func:`plan` decides (pure: it takes the time and the measurements);
the agent's runtime measures and removes.

The run directories of forgotten tasks (``meta/tasks/<framework>/<task>``:
the supervisor's files, of no use once the task's story is told) go at
once, but not on the agent's loop: :class:`RunDirRemover` moves each into
``meta/trash`` (one rename) and a thread of its own removes it (issue 14:
``shutil.rmtree`` on the loop was a fifth of an agent's time at 100 tasks/s).
What a crash leaves in the trash is removed at the next start.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import shutil
import threading
from pathlib import Path

import attrs

__all__ = ["Sandbox", "plan", "DEFAULT_GC_DELAY", "DEFAULT_DISK_WATERMARK", "parse_duration", "RunDirRemover"]

log = logging.getLogger("mesoslike.agent")

#: a week, as Mesos's --gc_delay
DEFAULT_GC_DELAY = 7 * 24 * 3600.0
#: collect early once the work directory's file system is 90% full
DEFAULT_DISK_WATERMARK = 0.9

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


@attrs.frozen
class Sandbox:
    """An ended task's sandbox: where, when it was last written to (seconds
    since the epoch), and how many bytes it holds."""

    path: str
    last_used: float
    size: int


def plan(sandboxes: list[Sandbox], *, now: float, gc_delay: float, disk_used: int, disk_total: int,
         disk_watermark: float) -> list[Sandbox]:
    """The sandboxes to remove now: those unused for ``gc_delay`` seconds,
    then — while ``disk_used`` minus what those free is above
    ``disk_watermark`` x ``disk_total`` — the oldest of the rest.
    O(n log n) in the sandboxes."""
    by_age = sorted(sandboxes, key=lambda s: (s.last_used, s.path))
    chosen = [s for s in by_age if now - s.last_used >= gc_delay]
    used = disk_used - sum(s.size for s in chosen)
    limit = disk_watermark * disk_total
    for sandbox in by_age:
        if used <= limit:
            break
        if sandbox not in chosen:
            chosen.append(sandbox)
            used -= sandbox.size
    return chosen


def parse_duration(text: str) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"45s"``, ``"1w"`` or plain seconds -> seconds.
    Raises ValueError on anything else (or a negative duration)."""
    text = text.strip().lower()
    unit = _UNITS.get(text[-1:]) if text else None
    number = text[:-1] if unit is not None else text
    value = float(number) * (unit or 1.0)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"not a duration: {text!r}")
    return value


class RunDirRemover:
    """Removes directories off the caller's thread: :meth:`discard` renames
    one into ``trash`` (on the same file system) and a daemon thread removes
    it. The thread starts when there is work and ends after ``idle_exit``
    seconds without (a process running many agents keeps no idle thread per
    agent). Thread-safe."""

    def __init__(self, trash: Path, idle_exit: float = 5.0) -> None:
        self.trash = trash
        self.idle_exit = idle_exit
        #: directories to remove, and events to set once those before them are
        self._queue: queue.SimpleQueue[Path | threading.Event] = queue.SimpleQueue()
        self._names = itertools.count()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: directories removed so far (by the thread)
        self.removed = 0

    def discard(self, directory: Path) -> bool:
        """Move ``directory`` to the trash, to be removed; False if there was
        none. Where it cannot be moved it is removed here and now."""
        target = self.trash / f"{os.getpid()}-{next(self._names)}"
        try:
            os.rename(directory, target)
        except FileNotFoundError:
            if not directory.exists():
                return False
            self.trash.mkdir(mode=0o700, parents=True, exist_ok=True)   # the first use: no trash yet
            return self.discard(directory)
        except OSError as exc:  # another file system (a bind mount?), or not allowed: the slow way
            log.debug("cannot move %s to %s (%s): removing it in place", directory, self.trash, exc)
            shutil.rmtree(directory, ignore_errors=True)
            return True
        self._submit(target)
        return True

    def empty_trash(self) -> None:
        """Remove what an earlier agent process left in the trash (in the thread)."""
        try:
            leftovers = list(self.trash.iterdir())
        except OSError:
            return
        for path in leftovers:
            self._submit(path)

    def wait(self, timeout: float = 10.0) -> bool:
        """Wait until everything discarded so far is removed (tests, a stop);
        False if it took longer than ``timeout``."""
        done = threading.Event()
        self._queue.put(done)
        self._start()
        return done.wait(timeout)

    def _submit(self, path: Path) -> None:
        self._queue.put(path)
        self._start()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mesoslike-agent-remover", daemon=True)
                self._thread.start()

    @property
    def working(self) -> bool:
        """Whether its thread runs."""
        return self._thread is not None

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self.idle_exit)
            except queue.Empty:
                with self._lock:   # a _submit after this sees no thread and starts one
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            if isinstance(item, threading.Event):
                item.set()
            else:
                shutil.rmtree(item, ignore_errors=True)
                self.removed += 1
