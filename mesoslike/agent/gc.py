"""Sandbox garbage collection: which sandboxes of ended tasks to remove.

As Mesos's agent does (``--gc_delay``, default one week), a sandbox is kept
for ``gc_delay`` seconds after it was last used, so that people can read
what the task printed. When the work directory's file system is fuller
than ``disk_watermark`` (a fraction of its size), the oldest ended
sandboxes go at once, oldest first, until what they free brings the use
back under the watermark. Sandboxes of tasks the agent still knows (running,
or ended with an unacknowledged update) are never candidates.

:func:`plan` decides (pure: it takes the time, the book of ended
sandboxes and a way to measure one); the agent's runtime keeps the book,
measures and removes. The book (path -> when the sandbox was last known to
be used) is what lets a pass look at no file: an agent's pass used to walk
every ended sandbox and ``lstat`` every file in it each ``gc_interval``
(a minute), which on an agent that had run many tasks took a fifth of its
loop's time in the minute it ran (issue 29, run29l's profile). Now a pass
lists the sandbox directories' names (no ``stat``), books a sandbox the
first time it sees it ended (at the agent's start, with its last use as
the files say), and walks a sandbox only when the book says it may be due
— to see whether it was written to since (then it is booked again at that
time) and how big it is — or, past the watermark, when it is among the
oldest to go. Measured once a sandbox, not once a pass.

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
from typing import Callable, Mapping

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


def plan(ended: Mapping[str, float], *, now: float, gc_delay: float, disk_used: int, disk_total: int,
         disk_watermark: float, measure: Callable[[str], tuple[float, int]]) -> tuple[list[Sandbox], dict[str, float]]:
    """The sandboxes to remove now, and those found used later than booked.

    ``ended`` books each ended sandbox's path with when it was last known
    to be used; ``measure(path)`` says when anything in it was last written
    to and its size in bytes (a walk of its files: called only for the
    sandboxes this looks at). A sandbox booked ``gc_delay`` ago or more is
    measured: it goes if it was not used since, else it is returned in the
    second part with its later use (to be booked again). While the disk's
    use, less what the chosen free, is above ``disk_watermark`` x
    ``disk_total``, the oldest of the rest go too, oldest first (used
    since or not). O(n) in the book, plus O(m log m) and m measurements for
    the m sandboxes due or, past the watermark, looked at."""
    limit = disk_watermark * disk_total
    pressed = disk_used > limit
    due_before = now - gc_delay
    candidates = ended.items() if pressed else [(path, used) for path, used in ended.items() if used <= due_before]
    chosen: list[Sandbox] = []
    later: dict[str, float] = {}
    used = disk_used
    for path, booked in sorted(candidates, key=lambda item: (item[1], item[0])):
        if booked > due_before and used <= limit:
            break   # the rest are younger still, and the disk is back under its watermark
        last_used, size = measure(path)
        if now - last_used < gc_delay and used <= limit:
            later[path] = last_used   # written to since it was booked: it waits its delay from then
            continue
        chosen.append(Sandbox(path, last_used, size))
        used -= size
    return chosen, later


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
