"""Launches (sans I/O): an ACCEPT's plan (:mod:`mesoslike.master.planner`)
carried out — reservations converted, tasks sent to their agent with
RUN_TASK, the rest of the offers declined — RUN_TASK sent again until the
agent confirms the task (or it ends TASK_LOST/TASK_DROPPED), and a
framework's KILL.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from typing import Sequence


from mesoslike.allocator import Offer as AllocatorOffer
from mesoslike.backoff import Backoff
from mesoslike.master.context import CoreContext
from mesoslike.master.delivery import UpdateDelivery
from mesoslike.master.offers import OfferDesk
from mesoslike.master.planner import OPERATION_REFUSED, LaunchPlan, operations_of, plan_accept
from mesoslike.master.reconciliation import reconciled
from mesoslike.master.records import STAGING, AgentRecord, FrameworkRecord, ReportedStatus, TaskRecord, new_status
from mesoslike.master.reservations import Conversion
from mesoslike.master.task_lifecycle import Action, Event, Phase, process
from mesoslike.resources import Resources
from mesoslike.wire import TaskInfo, TaskState
from mesoslike.wire import messages as m

__all__ = ["Launches"]

log = logging.getLogger("mesoslike.master")


class Launches:
    """Accepts carried out and launches watched until confirmed."""

    def __init__(self, context: CoreContext, offers: OfferDesk, delivery: UpdateDelivery) -> None:
        self._context = context
        self._offers = offers
        self._delivery = delivery
        #: launched tasks not confirmed by their agent yet: (when to look
        #: again, sequence, framework id, task id, RUN_TASKs sent by then);
        #: entries of tasks confirmed or ended meanwhile are skipped when due
        self._unconfirmed: list[tuple[float, int, str, str, int]] = []
        self._sequence = itertools.count()
        #: the launch retry's back-off, made once for the configured timeout (a frozen attrs object
        #: made a send was a tenth of the core's ACCEPT)
        self._launch_backoff = Backoff(context.config.task_launch_timeout, math.inf, 0.0)

    # ------------------------------------------------------------ messages
    def accept(self, peer: bytes, msg: m.Accept, principal: str | None) -> None:
        """ACCEPT: planned (:func:`~mesoslike.master.planner.plan_accept`), then carried out."""
        context = self._context
        record = context.framework_for(peer, msg.framework_id)
        if record is None:
            return
        plan = plan_accept(record, msg.offer_ids, operations_of(msg), msg.filters.refuse_seconds, principal,
                           offer_of=context.allocator.get_offer, agents=context.agents.records,
                           credentials=context.credentials)
        for offer in plan.offers:
            self._offers.answered(offer.id)
        if not isinstance(plan, LaunchPlan):
            for offer in plan.offers:  # the valid ones go back
                context.allocator.decline_offer(offer.id, plan.refuse_seconds)
            for task in plan.dropped:
                self._launch_failed(record, task, TaskState.DROPPED, plan.why, "REASON_INVALID_OFFERS")
            if plan.permission is not None:
                context.count_refusal(plan.permission)
                log.warning("refused %s: %s", plan.permission, plan.why)
            if plan.kind == OPERATION_REFUSED:
                context.counters["operations_refused"] += 1
            if plan.tells_framework:
                context.out.error(peer, plan.why)
            return
        for permission in plan.refused_permissions:
            context.count_refusal(permission)
        agent = context.agents.records[plan.agent_id]
        offers = list(plan.offers)
        if plan.conversions:
            offers = self._convert_offers(agent, offers, plan.conversions)
        for failed in plan.failed:
            self._launch_failed(record, failed.task, failed.state, failed.why, failed.reason)
        for executor_id, executor in plan.starting.items():
            agent.executors[(record.id, executor_id)] = executor   # used until EXECUTOR_EXITED
        self._consume_offers(offers, plan.used, plan.refuse_seconds)
        if plan.launched:
            self._run_tasks(record, agent, plan.launched)

    def kill(self, peer: bytes, msg: m.Kill, principal: str | None) -> None:
        """A framework's KILL: its agent is told; a task that is not live is answered at once."""
        context = self._context
        record = context.framework_for(peer, msg.framework_id)
        if record is None:
            return
        task = record.tasks.get(msg.task_id)
        if task is None or task.terminal:
            state = task.state if task is not None else TaskState.LOST
            context.out.send_framework(record, m.Update(new_status(
                msg.task_id, state, agent_id=msg.agent_id, framework_id=record.id,
                message="unknown task" if task is None else "task already terminal",
                reason="REASON_RECONCILIATION", timestamp=context.wall_clock())))
            return
        agent = context.agents.get(task.agent_id)
        if agent is not None:
            context.out.send(agent.peer, m.KillTask(record.id, task.id))
        elif task.state == TaskState.UNREACHABLE:   # as Mesos: it cannot be killed now; say so
            context.out.send_framework(record, m.Update(reconciled(task.status, context.wall_clock())))

    def shutdown_executor(self, peer: bytes, msg: m.ShutdownExecutor, principal: str | None) -> None:
        """SHUTDOWN (Mesos's scheduler call): the agent ends the framework's
        executor; nothing to do if it runs none of that id."""
        context = self._context
        record = context.framework_for(peer, msg.framework_id)
        if record is None:
            return
        agent = context.agents.get(msg.agent_id)
        if agent is not None and (record.id, msg.executor_id) in agent.executors:
            context.out.send(agent.peer, msg)

    # ----------------------------------------------------- carrying it out
    def _convert_offers(self, agent: AgentRecord, offers: list[AllocatorOffer],
                        conversions: tuple[Conversion, ...]) -> list[AllocatorOffer]:
        """Apply checked conversions to the offers (each spread over them in
        order), the agent's total and the registry, and tell the agent its
        dynamic reservations (before the tasks that may use them). Returns
        the offers as they are now."""
        allocator = self._context.allocator
        current = list(offers)
        total = agent.info.resources
        for conversion in conversions:
            remaining = conversion.removed
            for index, offer in enumerate(current):
                part = offer.resources.minimum(remaining)
                if not part:
                    continue
                remaining = remaining.subtract_clamped(part)
                current[index] = allocator.convert_offered(offer.id, part, conversion.convert(part))
            total = total - conversion.removed + conversion.added
            log.info("agent %s: %s became %s", agent.id, conversion.removed, conversion.added)
        self.reservations_changed(agent, total)
        return current

    def reservations_changed(self, agent: AgentRecord, total: Resources) -> None:
        """The agent's total is ``total`` now (its dynamic reservations
        changed): the registry keeps it (a new leader knows them), the agent
        is told to checkpoint them (it re-registers with them)."""
        context = self._context
        agent.info = agent.info.replace(resources=total)
        context.registry.admit_agent(agent.info)
        context.registry_changed()
        context.counters["reservation_operations"] += 1
        context.out.send(agent.peer, m.CheckpointResources(agent.id, total.dynamically_reserved()))

    def _consume_offers(self, offers: list[AllocatorOffer], used: Resources, refuse: float) -> None:
        """Split what the tasks use over the offers; the rest is declined
        with the accept's filter."""
        remaining = used
        for offer in offers:
            part = offer.resources.minimum(remaining)
            remaining = remaining.subtract_clamped(part)
            self._context.allocator.accept_offer(offer.id, part, refuse)

    def _run_tasks(self, record: FrameworkRecord, agent: AgentRecord, tasks: Sequence[TaskInfo]) -> None:
        """Launch an ACCEPT's ``tasks`` on ``agent``: each recorded (TASK_STAGING, launched now), sent
        (its first RUN_TASK), and looked at again after the launch timeout, as :meth:`_send_run_task`
        has it. The clocks and the first wait are read once an ACCEPT, not once a launch: the launches
        of one call are launched at one time."""
        context = self._context
        # (the ids read once from the infos: the records' id properties were five calls a launch)
        framework, framework_id, agent_id, peer = record.info, record.info.id, agent.info.id, agent.peer
        now, wall = context.clock.now(), context.wall_clock()
        due = now + self._backoff().delay(0)
        live, on_agent, unconfirmed, sequence = record.tasks, agent.tasks, self._unconfirmed, self._sequence
        run_task = context.out.run_task
        for task in tasks:
            task_id = task.task_id
            # its TASK_STAGING as the fields of one (records.ReportedStatus), built only if read: the agent's
            # TASK_STARTING nearly always replaces it unread (a status less to build a launch)
            status: ReportedStatus = (task_id, STAGING, agent_id, framework_id, wall, task.labels, None)
            live[task_id] = TaskRecord(task, framework_id, agent_id, status, Phase.PENDING, launched_at=now,
                                       launch_sends=1)
            on_agent.add((framework_id, task_id))
            heapq.heappush(unconfirmed, (due, next(sequence), framework_id, task_id, 1))
            run_task(peer, framework, task)
        context.counters["tasks_launched"] += len(tasks)

    def _backoff(self) -> Backoff:
        """Mesos's launch retry: the confirmation timeout doubling per send, no jitter (the master's own
        deadline, not many peers retrying at once)."""
        backoff = self._launch_backoff
        if backoff.initial != self._context.config.task_launch_timeout:   # (a configuration changed since)
            backoff = self._launch_backoff = Backoff(self._context.config.task_launch_timeout, math.inf, 0.0)
        return backoff

    def _send_run_task(self, record: FrameworkRecord, agent: AgentRecord, task: TaskRecord, now: float) -> None:
        """Send (again) a task to its agent, and look again after the launch
        timeout, doubled for each send before. O(log unconfirmed tasks)."""
        task.launch_sends += 1
        wait = self._backoff().delay(task.launch_sends - 1)
        heapq.heappush(self._unconfirmed, (now + wait, next(self._sequence), record.info.id, task.info.task_id,
                                           task.launch_sends))
        self._context.out.run_task(agent.peer, record.info, task.info)

    def _launch_failed(self, record: FrameworkRecord, task: TaskInfo, state: str, why: str, reason: str) -> None:
        context = self._context
        context.counters["tasks_invalid"] += 1
        status = new_status(task.task_id, state, agent_id=task.agent_id, framework_id=record.id, message=why,
                            reason=reason, timestamp=context.wall_clock(), labels=task.labels)
        context.out.send_framework(record, m.Update(status))

    # ------------------------------------------------------- unconfirmed
    def tick(self, now: float) -> None:
        """Tasks whose agent has not confirmed them in time: RUN_TASK again
        (an agent ignores one for a task it has), or after the last attempt
        end them TASK_LOST (TASK_DROPPED if partition-aware) and tell the
        agent to kill them, should the task reach it after all.
        O(due entries x log unconfirmed)."""
        context = self._context
        if self._unconfirmed and self._unconfirmed[0][0] <= now:
            context.settle()   # a task launched here may since have been reported by another agent
        while self._unconfirmed and self._unconfirmed[0][0] <= now:
            _, _, framework_id, task_id, sends = heapq.heappop(self._unconfirmed)
            found = context.frameworks.task(framework_id, task_id)
            if found is None:
                continue
            record, task = found
            if task.phase is not Phase.PENDING or task.launch_sends != sends:
                continue   # confirmed, ended, out of reach, or a newer entry stands for it
            agent = context.agents.get(task.agent_id)
            if agent is None:
                continue   # its agent's removal ended it
            if task.launch_sends < context.config.task_launch_attempts:
                if process(task, Event.LAUNCH_TIMEOUT) == (Action.RESEND,):
                    context.counters["launches_resent"] += 1
                    log.warning("task %s of framework %s not confirmed by agent %s after %d launch(es): sending it "
                                "again", task_id, framework_id, agent.id, task.launch_sends)
                    self._send_run_task(record, agent, task, now)
                continue
            context.counters["tasks_unconfirmed"] += 1
            why = (f"agent {agent.id} did not confirm the task after {task.launch_sends} launch attempts over "
                   f"{now - task.launched_at:.0f}s")
            log.warning("task %s of framework %s: %s", task_id, framework_id, why)
            self._delivery.end(record, task, process(task, Event.LAUNCH_GIVEN_UP),
                               TaskState.DROPPED if record.info.partition_aware else TaskState.LOST,
                               "REASON_RECONCILIATION", why)

    def next_wakeup(self) -> float:
        return self._unconfirmed[0][0] if self._unconfirmed else float("inf")
