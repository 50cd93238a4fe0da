"""Update delivery (sans I/O): agents' status updates applied to the
tasks and forwarded to their frameworks, frameworks' acknowledgements
passed back, the statuses the master makes up itself, tasks' ends (their
resources recovered, their stories told), and framework messages between
executors and schedulers (docs/reliability.rst, docs/security.rst).
"""

from __future__ import annotations

import logging
from typing import Sequence

import msgspec

from mesoslike.acl import Refused
from mesoslike.errors import MesoslikeError
from mesoslike.master.context import CoreContext
from mesoslike.master.preempting import Preempting
from mesoslike.master.records import AgentRecord, FrameworkRecord, TaskRecord, clip, new_status
from mesoslike.master.task_lifecycle import Action, Event, process
from mesoslike.observations import LATENCY_BUCKETS, Histogram
from mesoslike.resources import Resources
from mesoslike.wire import TERMINAL_STATES, TaskState, TaskStatus
from mesoslike.wire import messages as m
from mesoslike.wire.types import WARN_MESSAGE_SIZE, without_secret_values

__all__ = ["UpdateDelivery", "UPDATE_REFORWARD_INTERVAL", "SOURCE_EXECUTOR", "SOURCE_MASTER", "confirm"]

log = logging.getLogger("mesoslike.master")

#: sources of a status update (TaskStatus.source) an agent may name only for some tasks (an executor's)
#: or never (the master's)
SOURCE_EXECUTOR, SOURCE_MASTER = "SOURCE_EXECUTOR", "SOURCE_MASTER"

#: an agent retries an unacknowledged update (10 s doubling to 10 min, as Mesos's); the
#: master forwards a retry to the framework's connection that already got
#: that update only once this long has passed since. The transport does not
#: drop what it was given for a connected peer, so a retry is needed only if
#: the framework did not acknowledge (explicit acknowledgements) or its driver
#: ignored the update (while it re-subscribed); forwarding every retry of a
#: congested framework only made the congestion worse
UPDATE_REFORWARD_INTERVAL = 2.0


class UpdateDelivery:
    """Status updates, acknowledgements and framework messages; O(1) each."""

    def __init__(self, context: CoreContext, preempting: Preempting) -> None:
        self._context = context
        self._preempting = preempting
        #: status updates and framework messages from agents that were not forwarded, by why
        #: (docs/observability.rst)
        self.updates_dropped: dict[str, int] = {}
        self.framework_messages_dropped: dict[str, int] = {}
        #: seconds from RUN_TASK to TASK_RUNNING (/metrics)
        self.launches_to_running = Histogram(LATENCY_BUCKETS)
        #: while a batch is handled (:meth:`batch_begun`): the tasks whose resources go back at its end,
        #: by framework and agent — one allocator call for each instead of one a task
        self._recoveries: dict[tuple[str, str], tuple[FrameworkRecord, list[TaskRecord]]] | None = None

    # ------------------------------------------------------------- batches
    def batch_begun(self) -> None:
        """A batch of updates is handled from now (the core's loop over a
        STATUS_UPDATES): the resources of the tasks that end in it go back
        to the allocator at :meth:`batch_ended`, summed by framework and
        agent. Nothing in between reads the allocator (it allocates in ticks)."""
        self._recoveries = {}

    def batch_ended(self) -> None:
        """Give back what the tasks that ended in the batch held: one
        ``recover_resources`` a framework and agent (with the sum); should
        it refuse the sum (it checks before it changes anything), task by
        task as without a batch, each failure logged."""
        recoveries, self._recoveries = self._recoveries, None
        if not recoveries:
            return
        agents = self._context.agents.records
        for (framework_id, agent_id), (record, tasks) in recoveries.items():
            if len(tasks) == 1 or agent_id not in agents:
                for task in tasks:
                    self.recover_resources(record, task)
                continue
            try:
                self._context.allocator.recover_resources(
                    framework_id, agent_id, Resources.sum([task.info.resources for task in tasks]))
            except MesoslikeError:
                for task in tasks:
                    self.recover_resources(record, task)

    # ------------------------------------------------------------ messages
    def status_update(self, peer: bytes, msg: m.StatusUpdate, principal: str | None) -> None:
        """An agent's update: applied, and forwarded to the framework once
        (a retry again only if it may not have arrived, see
        UPDATE_REFORWARD_INTERVAL). A retry of an update the framework
        acknowledged already, or of a task that ended, is acknowledged by the
        master instead: the framework has had it (docs/reliability.rst).

        Updates are bound to what the master knows (docs/security.rst): only
        for a task the master placed on this agent (or the agent reported
        when it re-registered) and that has not ended there, with
        ``SOURCE_EXECUTOR`` only for a task run by a custom executor and
        never ``SOURCE_MASTER``. Anything else is dropped (:meth:`_drop`):
        not forwarded, counted, logged once per agent and kind — and
        acknowledged, so that the agent's stream of updates drains."""
        agent = self._context.agent_for(peer)
        if agent is not None:
            self._status_update(peer, agent, msg, self._context.clock.now())

    def status_updates(self, peer: bytes, updates: Sequence[m.StatusUpdate]) -> None:
        """A STATUS_UPDATES batch's updates (between :meth:`batch_begun` and
        :meth:`batch_ended`): each as :meth:`status_update` has one that came
        alone, in order, an error in one answered and the next handled; the
        agent on ``peer`` is looked up once (no update changes who is on a
        connection)."""
        context = self._context
        agent = context.agents.on(peer)
        handle = self._status_update
        now = context.clock.now()   # (the batch's time, read once: one to two reads an update before)
        for msg in updates:
            try:
                if agent is None:
                    context.agent_for(peer)   # (logs it, as for an update alone)
                else:
                    handle(peer, agent, msg, now)
            except MesoslikeError as exc:  # bad input from the peer: tell it, change nothing more
                context.out.error(peer, str(exc))
            except Refused as exc:
                context.refuse(peer, exc)

    def _status_update(self, peer: bytes, agent: AgentRecord, msg: m.StatusUpdate, now: float) -> None:
        """``msg`` from ``agent`` on ``peer``, handled at ``now`` (the master's clock)."""
        context = self._context
        agent_id = agent.info.id
        status = msg.status
        if status.agent_id != agent_id or status.framework_id != msg.framework_id:
            # the ids are the connection's and the message's, never what the status claims
            # (an agent's own say so already: attrs.evolve cost 12 % of the master's handling)
            status = status.replace(agent_id=agent_id, framework_id=msg.framework_id)
        if agent.doomed and (msg.framework_id, status.task_id) in agent.doomed:
            self._settle_doomed(agent, msg.framework_id, status)
            return
        preempting = self._preempting.preempting
        why = preempting.get((msg.framework_id, status.task_id)) if preempting else None
        if why is not None and status.state == TaskState.KILLED:
            status = status.replace(reason="REASON_TASK_PREEMPTED", message=why)
        record = context.frameworks.records.get(msg.framework_id)
        if record is None:
            if msg.framework_id in context.frameworks.removed:
                if status.uuid:   # nobody will ever acknowledge: do it on the framework's behalf
                    context.out.send(peer, m.StatusUpdateAck(agent.id, msg.framework_id, status.task_id, status.uuid))
            else:
                self._drop(agent, msg.framework_id, status, "unknown_framework", "the master knows no such framework")
            return
        task = record.tasks.get(status.task_id)
        if task is None:
            ended = record.completed_task(status.task_id)
            if ended is not None and ended.agent_id == agent.id:
                if status.uuid and ended.status.uuid and status.uuid != ended.status.uuid:
                    self._count_drop(agent, record.id, status, "already_terminal", f"the task ended {ended.state}")
                self._settle_stale(agent, record, ended, status)
                return
            self._drop(agent, record.id, status, "unknown_task",
                       "the master placed no such task of the framework on this agent")
            return
        if task.agent_id != agent_id:
            # only the agent that runs a task speaks for it (a forged update would free what it holds)
            self._drop(agent, record.id, status, "not_on_agent", f"the task runs on agent {task.agent_id}")
            context.count_refusal("status_updates")
            context.out.send(peer, m.Error(f"not authorized: task {clip(task.id)} of framework {record.id} does not "
                                           f"run on agent {agent_id}"))   # logged once, by _drop
            return
        if status.source == SOURCE_MASTER or (status.source == SOURCE_EXECUTOR and task.info.executor is None):
            self._drop(agent, record.id, status, "forged_source",
                       f"{clip(status.source, 40)} is not an agent's to claim for this task")
            return
        for action in process(task, _END if status.state in TERMINAL_STATES else _UPDATE, status):
            if action is _APPLY:
                if status.state == _RUNNING and task.state in _BEFORE_RUNNING:
                    self.launches_to_running.observe(max(0.0, now - task.launched_at))
                task._status = status   # (the status property's setter, without its call)
                warned = self._preempting.warned   # (nearly always empty: asked first, three times a task)
                if warned and status.terminal and (msg.framework_id, task.info.task_id) in warned:
                    self._preempting.ended((msg.framework_id, task.info.task_id), task.agent_id)
            elif action is _FORWARD:
                # to the framework now: the first time, to another connection, or a while after the last
                # time (what _apply and _forward_due were, without their calls: three a task)
                if record.connected:
                    uuid = status.uuid
                    if uuid and uuid == task.forwarded_uuid and record.peer == task.forwarded_to:
                        if now - task.forwarded_at < UPDATE_REFORWARD_INTERVAL:
                            context.counters["updates_held_back"] += 1
                            continue
                        context.counters["updates_reforwarded"] += 1
                    task.forwarded_uuid, task.forwarded_to, task.forwarded_at = uuid, record.peer, now
                    record.last_sent = now   # (send_framework's, without asking the clock again)
                    context.out.batch(record.peer, m.Updates, status)
            elif action is _RECOVER:
                recoveries = self._recoveries
                if recoveries is None:
                    self.recover_resources(record, task)
                else:
                    held = recoveries.get((record.id, task.agent_id))
                    if held is None:
                        recoveries[record.id, task.agent_id] = (record, [task])
                    else:
                        held[1].append(task)
            elif action is _CONFIRM:
                confirm(task)
            elif action is Action.SETTLE:   # our acknowledgement to the agent was late or lost
                self._settle(agent, record, status)
            else:
                assert action is Action.DROP   # one end per task: another update came after it
                self._drop(agent, record.id, status, "already_terminal", f"the task ended {task.state}")

    def acknowledge(self, peer: bytes, msg: m.Acknowledge, principal: str | None) -> None:
        context = self._context
        record = context.framework_for(peer, msg.framework_id)
        if record is not None:
            self._acknowledge(record, msg, context.agents.records.get(msg.agent_id))

    def acknowledgements(self, peer: bytes, acknowledgements: Sequence[m.Acknowledge]) -> None:
        """An ACKNOWLEDGEMENTS batch's items: each as :meth:`acknowledge` has
        one that came alone, in order, an error in one answered and the next
        handled; the framework and the agent of a run of items naming the same
        one looked up once (no acknowledgement changes who is subscribed or
        registered)."""
        context = self._context
        agents = context.agents.records
        framework_id: str | None = None
        record: FrameworkRecord | None = None
        agent_id: str | None = None
        agent: AgentRecord | None = None
        handle = self._acknowledge
        for msg in acknowledgements:
            try:
                if record is None or msg.framework_id != framework_id:
                    framework_id = msg.framework_id
                    record = context.framework_for(peer, framework_id)
                    if record is None:
                        continue
                if msg.agent_id != agent_id:
                    agent_id = msg.agent_id
                    agent = agents.get(agent_id)
                handle(record, msg, agent)
            except MesoslikeError as exc:  # bad input from the peer: tell it, change nothing more
                context.out.error(peer, str(exc))
            except Refused as exc:
                context.refuse(peer, exc)

    def _acknowledge(self, record: FrameworkRecord, msg: m.Acknowledge, agent: AgentRecord | None) -> None:
        """``msg`` from ``record``'s connection; ``agent``: the registered one it names (None: none)."""
        task = record.tasks.get(msg.task_id)
        if task is not None:
            for action in process(task, _ACKNOWLEDGED, uuid=msg.uuid):
                if action is _REMEMBER:
                    task.acknowledged_uuid = msg.uuid or task.acknowledged_uuid
                else:
                    assert action is Action.COMPLETE
                    self.complete(record, task)
        if agent is not None:   # (its id is msg.agent_id: found by it; the framework's is msg.framework_id)
            self._context.out.batch(agent.peer, m.StatusUpdateAcks, m.StatusUpdateAck(
                msg.agent_id, msg.framework_id, msg.task_id, msg.uuid))

    def framework_message(self, peer: bytes, msg: m.FrameworkMessage, principal: str | None) -> None:
        """A message between an executor (through its agent) and its scheduler."""
        context = self._context
        agent = context.agents.on(peer)
        if agent is not None:  # agent -> framework
            if (msg.framework_id, msg.executor_id) not in agent.executors:
                # an agent speaks only for the custom executors of that framework it runs
                kind = "unknown_executor"
                self.framework_messages_dropped[kind] = self.framework_messages_dropped.get(kind, 0) + 1
                context.log_once(agent.id, "message:" + kind, f"agent {agent.id}: a framework message for framework "
                                                              f"{clip(msg.framework_id)} from executor "
                                                              f"{clip(msg.executor_id)!r} dropped ({kind}: no such "
                                                              "executor of the framework runs on this agent)")
                return
            record = context.frameworks.get(msg.framework_id)
            if record is not None and record.connected:
                # the agent is the one its connection says, whatever the message claims
                context.out.send_framework(record, msg if msg.agent_id == agent.id
                                           else msgspec.structs.replace(msg, agent_id=agent.id))
            return
        record = context.framework_for(peer, msg.framework_id)
        if record is None:
            return
        if len(msg.data) > context.config.max_message_size:
            context.out.error(peer, f"a framework message of {len(msg.data)} bytes is more than the master's "
                                    f"--max-message-size ({context.config.max_message_size}); message dropped")
            return
        if len(msg.data) > WARN_MESSAGE_SIZE:
            log.warning("framework %s sends a framework message of %d bytes (more than %d)", clip(msg.framework_id),
                        len(msg.data), WARN_MESSAGE_SIZE)
        target = context.agents.get(msg.agent_id)
        if target is None:
            context.out.error(peer, f"agent {clip(msg.agent_id)!r} is not registered; message dropped")
            return
        context.out.send(target.peer, msg)

    # ---------------------------------------------------------- forwarding
    def _drop(self, agent: AgentRecord, framework_id: str, status: TaskStatus, kind: str, why: str) -> None:
        """Do not forward ``status``: count and log it (:meth:`_count_drop`)
        and acknowledge it to its agent — a retry would be dropped again, and
        an agent's stream must not stay blocked behind it."""
        self._count_drop(agent, framework_id, status, kind, why)
        if status.uuid:
            self._context.out.send(agent.peer, m.StatusUpdateAck(agent.id, framework_id, status.task_id, status.uuid))

    def _count_drop(self, agent: AgentRecord, framework_id: str, status: TaskStatus, kind: str, why: str) -> None:
        self.updates_dropped[kind] = self.updates_dropped.get(kind, 0) + 1
        self._context.log_once(agent.id, kind, f"agent {agent.id}: a status update {clip(status.state, 40)} of task "
                                               f"{clip(status.task_id)} of framework {clip(framework_id)} dropped "
                                               f"({kind}: {why})")

    def _settle(self, agent: AgentRecord, record: FrameworkRecord, status: TaskStatus) -> None:
        """Acknowledge an update to its agent on the framework's behalf."""
        self._context.counters["updates_settled_by_master"] += 1
        self._context.out.send(agent.peer, m.StatusUpdateAck(agent.id, record.id, status.task_id, status.uuid))

    def _settle_stale(self, agent: AgentRecord, record: FrameworkRecord, ended: TaskRecord,
                      status: TaskStatus) -> None:
        """An update of a task whose end the framework has had — the retry
        of an acknowledged update, or news of a task the master ended
        itself (TASK_LOST, TASK_DROPPED) because the agent was silent about
        it: the framework never hears of it again (one terminal state per
        task); the agent gets its acknowledgement and, for a task it still
        runs, a kill."""
        if status.uuid:
            self._settle(agent, record, status)
        if not status.terminal and ended.status.source == SOURCE_MASTER:
            log.warning("agent %s reports task %s of framework %s %s, which the master ended %s: killing it",
                        agent.id, status.task_id, record.id, status.state, ended.state)
            self._context.out.send(agent.peer, m.KillTask(record.id, status.task_id))

    # ---------------------------------------------------------- task ends
    def recover_resources(self, record: FrameworkRecord, task: TaskRecord) -> None:
        """Give what a task held back to the allocator (its RECOVER action:
        the table has it happen once, as the task leaves the phases that hold them)."""
        if task.agent_id in self._context.agents.records:
            try:
                self._context.allocator.recover_resources(record.id, task.agent_id, task.info.resources)
            except MesoslikeError:  # a bookkeeping bug must not lose the update itself
                log.exception("recovering the resources of task %s failed", clip(task.id))

    def complete(self, record: FrameworkRecord, task: TaskRecord) -> None:
        """The task's story is told (its terminal state acknowledged, or made
        up by the master): each task comes here once."""
        context = self._context
        context.frameworks.complete(record, task, context.config.completed_tasks_per_framework)
        agent = context.agents.records.get(task.agent_id)
        if agent is not None:
            agent.tasks.discard((record.info.id, task.info.task_id))

    def end_by_master(self, record: FrameworkRecord, task: TaskRecord, state: str, reason: str, why: str) -> None:
        """End a task with a status the master makes up (no uuid: nothing to
        acknowledge), tell the framework, and forget the task."""
        status = new_status(task.id, state, agent_id=task.agent_id, framework_id=record.id, message=why,
                            reason=reason, timestamp=self._context.wall_clock(), labels=task.info.labels)
        task.status = status
        if self._preempting.warned and (record.id, task.id) in self._preempting.warned:
            self._preempting.ended((record.id, task.id))
        if record.connected:
            self._context.out.send_framework(record, m.Update(status))
        self.complete(record, task)

    def tell_status(self, record: FrameworkRecord, task: TaskRecord, status: TaskStatus) -> None:
        """A state of a live task the master says (no uuid: nothing to
        acknowledge): kept, and sent to the framework if it is connected."""
        task.status = status
        if record.connected:
            self._context.out.send_framework(record, m.Update(status))

    def end(self, record: FrameworkRecord, task: TaskRecord, actions: tuple[Action, ...], state: str, reason: str,
            why: str) -> None:
        """Carry out what the table says when the master, not the agent,
        ends or moves a task (launch timeouts, re-registrations, partitions,
        removals): RECOVER, KILL, COMPLETE, END with ``state``, ``reason``
        and ``why``; TELL, CONFIRM and ARCHIVE are the caller's."""
        for action in actions:
            if action is Action.RECOVER:
                self.recover_resources(record, task)
            elif action is Action.KILL:
                agent = self._context.agents.get(task.agent_id)
                if agent is not None:
                    self._context.out.send(agent.peer, m.KillTask(record.id, task.id))
            elif action is Action.COMPLETE:
                self.complete(record, task)
            elif action is Action.END:
                self.end_by_master(record, task, state, reason, why)
            elif action is Action.CONFIRM:
                confirm(task)

    # -------------------------------------------- tasks killed on return
    def _settle_doomed(self, agent: AgentRecord, framework_id: str, status: TaskStatus) -> None:
        """An update of a task killed on its agent's return: acknowledged by
        the master, never forwarded; its end frees what it held."""
        if status.uuid:
            self._context.out.send(agent.peer, m.StatusUpdateAck(agent.id, framework_id, status.task_id, status.uuid))
        if status.terminal:
            self.free_doomed(agent, (framework_id, status.task_id))

    def free_doomed(self, agent: AgentRecord, key: tuple[str, str]) -> None:
        """A task killed on its agent's return ended: what it held is free."""
        resources = agent.doomed.pop(key)
        if resources and key[0] in self._context.frameworks.records:
            try:
                self._context.allocator.recover_resources(key[0], agent.id, resources)
            except MesoslikeError:  # a bookkeeping bug must not lose the update itself
                log.exception("recovering the resources of task %s failed", clip(key[1]))


#: the table's members an update's handling compares with, as module globals (an enum member is a class
#: attribute looked up on each use: three to five a status update)
_UPDATE, _END, _ACKNOWLEDGED = Event.UPDATE, Event.END, Event.ACKNOWLEDGED
_APPLY, _FORWARD, _RECOVER, _CONFIRM = Action.APPLY, Action.FORWARD, Action.RECOVER, Action.CONFIRM
_REMEMBER = Action.REMEMBER
_RUNNING = TaskState.RUNNING
_BEFORE_RUNNING = (TaskState.STAGING, TaskState.STARTING)


def confirm(task: TaskRecord) -> None:
    """Its agent has it (CONFIRM): the master keeps no secret's value from now on."""
    task.info = without_secret_values(task.info)
