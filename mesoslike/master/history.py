"""What the master remembers of what ended (pure, bounded): the completed
tasks of each framework, the completed frameworks, and monotonic totals.

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
from typing import TYPE_CHECKING, Iterator

import attrs

from mesoslike.wire import FrameworkInfo, TaskState

if TYPE_CHECKING:
    from mesoslike.master.records import TaskRecord

__all__ = ["CompletedTasks", "CompletedFramework", "History", "MAX_COMPLETED_FRAMEWORKS",
           "MAX_COMPLETED_TASKS_PER_FRAMEWORK"]

#: Mesos's defaults (its master's --max_completed_frameworks and --max_completed_tasks_per_framework)
MAX_COMPLETED_FRAMEWORKS = 50
MAX_COMPLETED_TASKS_PER_FRAMEWORK = 1000


class CompletedTasks:
    """A framework's ended tasks, most recent last, at most ``keep`` of them
    (the bound is given at each :meth:`add`, so a changed setting applies at
    once), and the latest one of each id. O(1) amortised per task."""

    def __init__(self) -> None:
        self._tasks: deque[TaskRecord] = deque()
        self._by_id: dict[str, TaskRecord] = {}

    def add(self, task: TaskRecord, keep: int) -> None:
        self._tasks.append(task)
        self._by_id[task.id] = task
        while len(self._tasks) > keep:
            old = self._tasks.popleft()
            if self._by_id.get(old.id) is old:   # an id may end twice (reused after it ended)
                del self._by_id[old.id]

    def get(self, task_id: str) -> TaskRecord | None:
        """The most recent ended task with this id still remembered. O(1)."""
        return self._by_id.get(task_id)

    def __iter__(self) -> Iterator[TaskRecord]:
        return iter(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def _check(self, keep: int | None = None) -> None:
        assert keep is None or len(self._tasks) <= keep
        assert all(_ended(task) for task in self._tasks), "only ended tasks are history"
        latest = {task.id: task for task in self._tasks}
        assert self._by_id.keys() == latest.keys()
        assert all(self._by_id[task_id] is task for task_id, task in latest.items())


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
            assert all(_ended(task) for task in framework.tasks)
        ids = [framework.info.id for framework in self.frameworks]
        assert len(ids) == len(set(ids)), "a framework is removed once"


def _ended(task: TaskRecord) -> bool:
    """Whether the task's story is told: a terminal state, or TASK_UNREACHABLE
    (what a partition-aware framework's task ends as when its agent is removed)."""
    return task.terminal or task.state == TaskState.UNREACHABLE
