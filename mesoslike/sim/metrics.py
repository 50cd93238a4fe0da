"""What a simulation measures, and the JSON-ready summary of it.

The simulator tells a :class:`Recorder` when tasks arrive, start, end and are
preempted, what each class holds after every round, and why the waiting tasks
wait at every sample time; :meth:`Recorder.summary` turns that into per-class
utilisation and dominant shares over time, wait-time distributions,
preemptions and the top reasons for waiting. Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import math
from typing import Mapping, Sequence

from mesoslike.resources import Resources
from mesoslike.sim.workload import TaskSpec

__all__ = ["Recorder", "percentile", "sample_times", "QUANTILES", "LOG_AFTER"]

#: the quantiles of the wait-time CDF kept in the summary (0%, 1%, ..., 100%)
QUANTILES = tuple(i / 100 for i in range(101))


#: runs longer than this (simulated s) are sampled on a geometric time grid
LOG_AFTER = 3600.0


def sample_times(end: float, samples: int) -> list[float]:
    """``samples`` times from 0 to ``end``: even, or 0 then geometric from
    1 s for runs longer than :data:`LOG_AFTER`."""
    if samples < 2:
        raise ValueError(f"samples must be >= 2, got {samples!r}")
    if end <= LOG_AFTER:
        return [end * j / (samples - 1) for j in range(samples)]
    ratio = end ** (1 / (samples - 2))
    return [0.0] + [ratio ** j for j in range(samples - 2)] + [end]


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of sorted values (``fraction`` in [0, 1]):
    the smallest value with at least ``fraction`` of them at or below it. O(1)."""
    if not ordered:
        raise ValueError("no values")
    rank = max(1, math.ceil(fraction * len(ordered) - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def _r(value: float) -> float:
    """Rounded for the JSON document: short, and the same on every run."""
    return round(value, 6)


def _wait(value: float) -> float | None:
    """A wait for the JSON document: None (JSON null) for "never started"."""
    return None if value == math.inf else _r(value)


class Recorder:
    """Per-task events and per-class holdings over time (see the module docstring).

    ``classes``: the task classes in report order; ``kinds``: the resource
    kinds measured, with the cluster's ``total``. Recording an event is O(1)
    (O(kinds) for a start or an end); a round's snapshot is O(classes x kinds).
    """

    def __init__(self, classes: Sequence[str], total: Resources, kinds: Sequence[str]) -> None:
        self.classes = list(classes)
        self._class_index = {c: i for i, c in enumerate(self.classes)}
        self.kinds = list(kinds)
        self.total = [total.millis().get(k, 0) for k in self.kinds]
        self._tasks: dict[int, list] = {}           # id(task) -> [task, arrival, first start, end, preemptions]
        self._used = [[0] * len(self.kinds) for _ in self.classes]
        self._pending = [0] * len(self.classes)
        self._times: list[float] = []
        self._held: list[tuple[tuple[int, ...], ...]] = []
        self._queues: list[tuple[int, ...]] = []
        self._reasons: dict[tuple[str, str], float] = {}
        self.preemptions = [0] * len(self.classes)
        self.unplaceable = [0] * len(self.classes)
        self._dropped: list[tuple[TaskSpec, float]] = []   # tasks that fit no agent, with their arrival

    # ------------------------------------------------------------- events
    def arrived(self, task: TaskSpec, now: float) -> None:
        self._tasks[id(task)] = [task, now, None, None, 0]
        self._pending[self._class_index[task.framework_id]] += 1

    def dropped(self, task: TaskSpec, now: float) -> None:
        """A task that fits no agent at all (never queued): it never starts,
        and counts as such in the waits (:meth:`summary`)."""
        self.unplaceable[self._class_index[task.framework_id]] += 1
        self._dropped.append((task, now))

    def _charge(self, task: TaskSpec, sign: int) -> None:
        used = self._used[self._class_index[task.framework_id]]
        millis = task.resources.millis()
        for i, kind in enumerate(self.kinds):
            used[i] += sign * millis.get(kind, 0)

    def started(self, task: TaskSpec, now: float) -> None:
        record = self._tasks[id(task)]
        if record[2] is None:
            record[2] = now
        self._pending[self._class_index[task.framework_id]] -= 1
        self._charge(task, 1)

    def ended(self, task: TaskSpec, now: float) -> None:
        self._tasks[id(task)][3] = now
        self._charge(task, -1)

    def preempted(self, task: TaskSpec) -> None:
        self._tasks[id(task)][4] += 1
        index = self._class_index[task.framework_id]
        self.preemptions[index] += 1
        self._pending[index] += 1
        self._charge(task, -1)

    def waited(self, reasons: Mapping[tuple[str, str], int], seconds: float) -> None:
        """At a sample time, ``reasons[(class, reason)]`` tasks were waiting
        for that reason; they count for ``seconds`` each."""
        for key, count in reasons.items():
            self._reasons[key] = self._reasons.get(key, 0.0) + count * seconds

    def snapshot(self, now: float) -> None:
        """What every class holds and how many of its tasks wait, after a
        round at ``now`` (a later snapshot at the same time replaces it)."""
        held = tuple(tuple(u) for u in self._used)
        queues = tuple(self._pending)
        if self._times and self._held[-1] == held and self._queues[-1] == queues:
            return
        if self._times and self._times[-1] == now:
            self._held[-1], self._queues[-1] = held, queues
            return
        self._times.append(now)
        self._held.append(held)
        self._queues.append(queues)

    def pending(self, cls: str) -> int:
        return self._pending[self._class_index[cls]]

    def first_starts(self) -> list[tuple[TaskSpec, float | None]]:
        """Every task that arrived, with its first start (None: not started), in arrival order."""
        return [(record[0], record[2]) for record in self._tasks.values()]

    # ------------------------------------------------------------ summary
    def makespan(self) -> float | None:
        """When the last task ended, if every task that arrived has ended."""
        ends = [r[3] for r in self._tasks.values()]
        if not ends or any(e is None for e in ends):
            return None
        return max(ends)

    def _held_at(self, t: float) -> int:
        """Index of the snapshot in force at time ``t``."""
        return max(0, bisect.bisect_right(self._times, t) - 1)

    def _average(self, end: float) -> list[list[float]]:
        """Time-weighted mean of what each class held over [0, end], per kind."""
        sums = [[0.0] * len(self.kinds) for _ in self.classes]
        if end <= 0 or not self._times:
            return sums
        bounds = self._times[1:] + [end]
        for start, stop, held in zip(self._times, bounds, self._held):
            span = min(stop, end) - start
            if span <= 0:
                continue
            for c, used in enumerate(held):
                for k, amount in enumerate(used):
                    sums[c][k] += amount * span
        return [[s / end for s in row] for row in sums]

    def _share(self, used: Sequence[float]) -> float:
        return max((u / t for u, t in zip(used, self.total) if t), default=0.0)

    def series(self, end: float, samples: int) -> dict:
        """``samples`` points over [0, end]: the utilisation of each kind (all
        classes, and per class), each class's dominant share (of the whole
        cluster) and its waiting tasks. The points are even, or, for a run
        longer than :data:`LOG_AFTER` seconds (trace tails last for months
        after the arrivals), 0 then geometric from 1 s (``"axis": "log"``)."""
        times = sample_times(end, samples)
        picks = [self._held_at(t) for t in times]
        kinds = self.kinds
        total = self.total
        out: dict = {"axis": "log" if end > LOG_AFTER else "linear", "time": [_r(t) for t in times],
                     "utilisation": {}, "by_class": {}}
        for k, kind in enumerate(kinds):
            if total[k]:
                out["utilisation"][kind] = [_r(sum(h[c][k] for c in range(len(self.classes))) / total[k])
                                            if self._times else 0.0 for h in (self._held[p] for p in picks)]
        for c, cls in enumerate(self.classes):
            held = [self._held[p][c] if self._times else (0,) * len(kinds) for p in picks]
            out["by_class"][cls] = {
                "utilisation": {kind: [_r(h[k] / total[k]) for h in held] for k, kind in enumerate(kinds) if total[k]},
                "dominant_share": [_r(self._share(h)) for h in held],
                "waiting": [self._queues[p][c] if self._times else 0 for p in picks],
            }
        return out

    def waits(self) -> dict[str, list[float]]:
        """Sorted wait times (first start - arrival) of every task that
        arrived, per class and ``all``: ``math.inf`` for a task that never
        started (still waiting when the run stopped, or fitting no agent), so
        a percentile that falls among those is "never", not the wait of the
        tasks that were lucky enough to start."""
        out: dict[str, list[float]] = {c: [] for c in self.classes}
        for task, arrival, start, _, _ in self._tasks.values():
            out[task.framework_id].append(math.inf if start is None else start - arrival)
        for task, _ in self._dropped:
            out[task.framework_id].append(math.inf)
        out["all"] = [w for c in self.classes for w in out[c]]
        for values in out.values():
            values.sort()
        return out

    def summary(self, end: float, samples: int) -> dict:
        """The JSON-ready measurements of a run that stopped at ``end``."""
        waits = self.waits()
        unplaceable = dict(zip(self.classes, self.unplaceable))
        unplaceable["all"] = sum(self.unplaceable)
        wait: dict = {}
        cdf: dict = {}
        for cls, values in waits.items():
            started = [v for v in values if v != math.inf]
            # tasks = started + never_started; never_started counts the unplaceable ones too
            entry: dict = {"tasks": len(values), "started": len(started), "never_started": len(values) - len(started),
                           "unplaceable": unplaceable[cls]}
            if started:
                entry["mean_started"] = _r(sum(started) / len(started))
            if values:
                # None: "never" (more than 1 - q of the tasks never started)
                entry.update(p50=_wait(percentile(values, 0.5)), p90=_wait(percentile(values, 0.9)),
                             p99=_wait(percentile(values, 0.99)), max=_wait(values[-1]))
                cdf[cls] = [_wait(percentile(values, q)) for q in QUANTILES]
            wait[cls] = entry
        makespan = self.makespan()
        horizon = makespan if makespan is not None else end
        average = self._average(horizon)
        utilisation = {kind: _r(sum(average[c][k] for c in range(len(self.classes))) / self.total[k])
                       for k, kind in enumerate(self.kinds) if self.total[k]}
        reasons: dict[str, float] = {}
        by_class: dict[str, dict[str, float]] = {}
        for (cls, reason), seconds in sorted(self._reasons.items()):
            reasons[reason] = reasons.get(reason, 0.0) + seconds
            by_class.setdefault(cls, {})[reason] = _r(seconds)
        waited = sum(reasons.values())
        top = [{"reason": reason, "task_seconds": _r(seconds), "share": _r(seconds / waited) if waited else 0.0}
               for reason, seconds in sorted(reasons.items(), key=lambda item: (-item[1], item[0]))]
        return {
            "makespan": None if makespan is None else _r(makespan),
            "mean_utilisation": utilisation,
            "mean_dominant_share": {cls: _r(self._share(average[c])) for c, cls in enumerate(self.classes)},
            "wait": wait,
            "wait_cdf": {"quantiles": list(QUANTILES), "by_class": cdf},
            "preemptions": {"total": sum(self.preemptions),
                            "by_class": dict(zip(self.classes, self.preemptions))},
            "unplaceable": dict(zip(self.classes, self.unplaceable)),
            "why_waiting": {"top": top, "by_class": by_class},
            "series": self.series(horizon, samples),
        }
