"""What the master remembers of what ended (pure, bounded): the completed
frameworks, and monotonic totals (each framework's completed tasks are its
record's, :class:`mesoslike.master.records.CompletedTasks`).

As Mesos's master does (``--max_completed_frameworks``, default 50;
``--max_completed_tasks_per_framework``, default 1,000), the history is
soft state: it lives in the leading master's memory only, is never written
to the registry, and starts empty after a failover or a restart (so do the
counters of ``/metrics``, as with any process's metrics). docs/operations.rst
says so.

Every structure here is bounded by its configuration and costs O(1) per
change (amortised): an ended task appended to a full history pushes the
oldest one out.
"""

from __future__ import annotations

from collections import deque

import attrs

from mesoslike.master.records import TaskRecord
from mesoslike.wire import FrameworkInfo

__all__ = ["CompletedFramework", "History", "MAX_COMPLETED_FRAMEWORKS",
           "MAX_COMPLETED_TASKS_PER_FRAMEWORK"]

#: Mesos's defaults (its master's --max_completed_frameworks and --max_completed_tasks_per_framework)
MAX_COMPLETED_FRAMEWORKS = 50
MAX_COMPLETED_TASKS_PER_FRAMEWORK = 1000


@attrs.frozen
class CompletedFramework:
    """A removed framework as ``/state`` shows it under ``completed_frameworks``.
    Immutable: a ``/state`` snapshot holds it by reference."""

    info: FrameworkInfo
    #: its ended tasks, oldest first (at most max_completed_tasks_per_framework)
    tasks: tuple[TaskRecord, ...]
    #: wall-clock time (seconds since the epoch) it was removed, and why
    removed_at: float
    reason: str


class History:
    """The completed frameworks (a bounded deque, most recent last) and how
    many frameworks completed, which keeps counting after they leave the
    history. (Tasks completed by state are counted by the core's records:
    ``mesoslike.master.state``'s ``tasks_completed_total``.)"""

    def __init__(self, max_frameworks: int = MAX_COMPLETED_FRAMEWORKS) -> None:
        self.frameworks: deque[CompletedFramework] = deque(maxlen=max_frameworks)
        self.frameworks_completed = 0

    @property
    def max_frameworks(self) -> int:
        maxlen = self.frameworks.maxlen
        assert maxlen is not None
        return maxlen

    def framework_completed(self, framework: CompletedFramework) -> None:
        self.frameworks.append(framework)   # the oldest goes when full
        self.frameworks_completed += 1

    def _check(self, keep_tasks: int | None = None) -> None:
        assert len(self.frameworks) <= self.max_frameworks
        assert self.frameworks_completed >= len(self.frameworks)
        for framework in self.frameworks:
            assert keep_tasks is None or len(framework.tasks) <= keep_tasks
            assert all(task.ended for task in framework.tasks)
        ids = [framework.info.id for framework in self.frameworks]
        assert len(ids) == len(set(ids)), "a framework is removed once"
