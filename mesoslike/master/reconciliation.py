"""Reconciliation (sans I/O): a framework's RECONCILE answered with the
latest state of its tasks, bounded and spread over loop turns, answers for
tasks possibly on agents expected back after a failover held until those
agents are back or marked unreachable (docs/reliability.rst).
"""

from __future__ import annotations

from collections import deque


from mesoslike.master.context import CoreContext
from mesoslike.master.records import FrameworkRecord, TaskRecord, new_status
from mesoslike.wire import TaskState, TaskStatus
from mesoslike.wire import messages as m

__all__ = ["Reconciliation", "reconciled"]

#: what _answer returns for an answer to hold back (see Reconciliation.reconcile)
_HOLD = new_status("", TaskState.LOST)


def reconciled(status: TaskStatus, now: float) -> TaskStatus:
    """``status`` as the master says it again (no uuid: nothing to acknowledge)."""
    return status.replace(uuid="", source="SOURCE_MASTER", reason="REASON_RECONCILIATION", timestamp=now)


class Reconciliation:
    """The answers waiting, by framework, and those held back."""

    def __init__(self, context: CoreContext) -> None:
        self._context = context
        #: reconciliation answers not sent yet: framework id -> what is still to be answered, in
        #: order; frameworks take turns (answer_waiting)
        self._waiting: dict[str, deque[m.ReconcileTask | str]] = {}
        self._budget = context.config.reconcile_answers_per_turn
        #: explicit reconciliation items of unknown tasks held while agents are expected back after a
        #: failover: the agent id named ("" : none named, any expected agent) -> (framework id, item)
        self._held: dict[str, list[tuple[str, m.ReconcileTask]]] = {}
        self._held_count: dict[str, int] = {}   # framework id -> its items held

    def reconcile(self, peer: bytes, msg: m.Reconcile, principal: str | None) -> None:
        """RECONCILE: the latest state of the named tasks, or (none named) of
        every non-terminal task of the framework.

        Bounded and spread: a request naming more than
        ``max_reconcile_tasks`` ids, or one that would make the framework's
        waiting explicit answers exceed it, gets an ERROR and changes
        nothing. Answers go out at most ``reconcile_answers_per_turn`` per
        loop turn over all frameworks (those of this turn's budget at once,
        the rest from :meth:`answer_waiting`, frameworks taking turns), so a
        large reconciliation never holds other peers up. Each answer is the
        task's state when it is sent. A new implicit request replaces a
        waiting one. O(ids named) now, O(1) per answer later.

        After a failover, a task this master does not know may be on an
        agent not back yet: its answer is held until that agent (the one
        named, or, none named, every expected agent) re-registered or was
        marked unreachable, as Mesos's master does not answer for
        ``recovered_slaves``; held answers count against
        ``max_reconcile_tasks``."""
        context = self._context
        record = context.framework_for(peer, msg.framework_id)
        if record is None:
            return
        limit = context.config.max_reconcile_tasks
        queue = self._waiting.get(record.id)
        if msg.tasks:
            waiting = sum(1 for item in queue if not isinstance(item, str)) if queue else 0
            waiting += self._held_count.get(record.id, 0)
            if len(msg.tasks) + waiting > limit:
                context.counters["reconciliations_refused"] += 1
                context.out.error(peer, f"RECONCILE of {len(msg.tasks)} tasks refused: at most {limit} task ids "
                                        f"(max_reconcile_tasks) may wait for an answer, and {waiting} do; "
                                        "reconcile in smaller parts")
                return
            items: list[m.ReconcileTask | str] = list(msg.tasks)
        else:
            wanted = sorted(task.id for task in record.tasks.values() if not task.terminal)
            if queue:  # the fresh implicit request answers what a waiting one would
                queue = deque(item for item in queue if not isinstance(item, str))
                self._waiting[record.id] = queue
            items = list(wanted)
        if queue is None:
            queue = self._waiting[record.id] = deque()
        queue.extend(items)
        if self._budget > 0:
            self._answer_some(record, queue, self._budget)
        if not queue:
            del self._waiting[record.id]

    def waiting(self) -> int:
        """Reconciliation answers not sent yet (at most: some may need none),
        held ones included. O(frameworks waiting)."""
        return sum(len(queue) for queue in self._waiting.values()) + sum(self._held_count.values())

    @property
    def busy(self) -> bool:
        """Whether answers wait for the next turns."""
        return bool(self._waiting)

    def forget(self, framework_id: str) -> None:
        """The framework left (removed, disconnected): nobody to answer; it reconciles again when back."""
        self._waiting.pop(framework_id, None)

    def answer_waiting(self) -> None:
        """A new turn: spend its budget on the waiting answers, an equal part
        per framework (one at least), in the order they asked."""
        self._budget = self._context.config.reconcile_answers_per_turn
        if self._waiting:
            self._context.settle()   # each answer is the task's state when it is sent
        frameworks = self._context.frameworks
        while self._waiting and self._budget > 0:
            share = max(1, self._budget // len(self._waiting))
            for framework_id, queue in list(self._waiting.items()):
                record = frameworks.get(framework_id)
                if record is not None and record.connected:
                    self._answer_some(record, queue, min(share, self._budget))
                else:
                    queue.clear()
                if not queue:
                    del self._waiting[framework_id]
                if self._budget <= 0:
                    break

    def _answer_some(self, record: FrameworkRecord, queue: deque[m.ReconcileTask | str], most: int) -> None:
        """Send up to ``most`` answers from the front of ``queue`` (task ids
        of an implicit request, items of explicit ones)."""
        context = self._context
        now = context.wall_clock()
        sent = 0
        completed: dict[str, TaskRecord] | None = None   # built once, when an id is not live
        while queue and sent < most:
            item = queue.popleft()
            if completed is None and not isinstance(item, str) and item.task_id not in record.tasks:
                completed = {task.id: task for task in record.completed}   # the latest of an id wins
            status = self._answer(record, item, now, completed or {})
            if status is _HOLD:
                assert not isinstance(item, str)
                self._hold(record, item)
            elif status is not None:
                context.out.send_framework(record, m.Update(status))
                sent += 1
        self._budget -= sent
        context.counters["reconcile_answers"] += sent

    def _answer(self, record: FrameworkRecord, item: m.ReconcileTask | str, now: float,
                completed: dict[str, TaskRecord]) -> TaskStatus | None:
        """The answer for one task of a reconciliation, or None for none
        (``completed``: the framework's terminal tasks by id). O(1)."""
        if isinstance(item, str):  # implicit: a task that was live when asked
            live = record.tasks.get(item)
            return reconciled(live.status, now) if live is not None and not live.terminal else None
        live = record.tasks.get(item.task_id)
        if live is not None:
            return reconciled(live.status, now)
        ended = completed.get(item.task_id)
        if ended is not None:
            return reconciled(ended.status, now)
        agents = self._context.agents
        if item.agent_id in agents.expected or (not item.agent_id and agents.expected):
            return _HOLD  # it may be on an agent expected back after a failover: answered once it is
        # Mesos's answers for an unknown task (TASK_LOST to frameworks that are not partition-aware)
        aware = record.info.partition_aware
        if item.agent_id in agents.unreachable:
            state, why = TaskState.UNREACHABLE if aware else TaskState.LOST, "its agent is unreachable"
        elif aware and not item.agent_id and agents.unreachable_unknown:
            # it may run on an unreachable agent whose tasks this master never saw: not gone for sure
            state, why = TaskState.UNREACHABLE, "unknown task; it may be on an unreachable agent"
        else:   # on no agent this master knows, nor may hear from again: not running anywhere
            state, why = TaskState.GONE if aware else TaskState.LOST, "unknown task"
        if state != TaskState.UNREACHABLE:
            # a terminal state, said once, stays so: should an agent bring the task back after all, it is
            # killed unheard of (mesoslike.master.agents, _admit_reregistered)
            record.pronounce_ended(item.task_id, self._context.config.completed_tasks_per_framework)
        return new_status(item.task_id, state, agent_id=item.agent_id, framework_id=record.id, message=why,
                          reason="REASON_RECONCILIATION", timestamp=now)

    def _hold(self, record: FrameworkRecord, item: m.ReconcileTask) -> None:
        self._held.setdefault(item.agent_id, []).append((record.id, item))
        self._held_count[record.id] = self._held_count.get(record.id, 0) + 1
        self._context.counters["reconcile_answers_held"] += 1

    def release_held(self, agent_id: str) -> None:
        """``agent_id`` is no longer expected back (it re-registered, or was
        marked unreachable): the answers held for it — and, once no agent is
        expected, all of them — wait for the next turns again. O(released)."""
        released = self._held.pop(agent_id, []) if agent_id else []
        if not self._context.agents.expected:
            for items in self._held.values():
                released += items
            self._held.clear()
        frameworks = self._context.frameworks
        for framework_id, item in released:
            left = self._held_count[framework_id] - 1
            if left:
                self._held_count[framework_id] = left
            else:
                del self._held_count[framework_id]
            record = frameworks.get(framework_id)
            if record is not None and record.connected:
                self._waiting.setdefault(framework_id, deque()).append(item)
