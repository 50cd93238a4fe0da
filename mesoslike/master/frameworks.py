"""A framework's life at the master (sans I/O): SUBSCRIBE (first, again,
from another connection), heartbeats and the silence that disconnects it,
its failover timeout, TEARDOWN and removal into the history, and frameworks
adopted after a failover (from the registry, or from agents' reports) with
the receipts that say whose they are (docs/security.rst).

The frameworks themselves are in the :class:`~mesoslike.master.framework_book.FrameworkBook`.
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping


import mesoslike.master.receipts as receipts
from mesoslike.acl import Refused
from mesoslike.allocator import RescindReason
from mesoslike.errors import MesoslikeError
from mesoslike.master.context import CoreContext
from mesoslike.master.framework_book import MAX_REPORTED_TASKS
from mesoslike.master.history import CompletedFramework
from mesoslike.master.reconciliation import Reconciliation
from mesoslike.master.records import MAX_NAME_LENGTH, FrameworkRecord, TaskRecord, clip, new_status
from mesoslike.master.task_lifecycle import Event, Phase, process
from mesoslike.wire import FrameworkInfo, TaskState
from mesoslike.wire import messages as m

__all__ = ["FrameworkLifecycle", "text_problem"]

log = logging.getLogger("mesoslike.master")


class FrameworkLifecycle:
    """SUBSCRIBE to removal; O(1) per message, O(frameworks) per sweep."""

    def __init__(self, context: CoreContext, reconciliation: Reconciliation) -> None:
        self._context = context
        self._book = context.frameworks
        self._reconciliation = reconciliation
        self._next_sweep = context.clock.now()

    # ------------------------------------------------------------ messages
    def subscribe(self, peer: bytes, msg: m.Subscribe, principal: str | None) -> None:
        """SUBSCRIBE: a new framework (no id: the master gives one) or one
        the master knows re-subscribing.

        A framework comes back under the id it had. An id this master knows
        (it or an earlier leader gave it, through the registry, or
        re-registering agents run tasks of it) belongs to the principal that
        registered it, and only that principal may use it. An id this master
        does not know is accepted as Mesos accepts it — a framework that
        keeps its id across master restarts, or makes its own — and is
        bound to the subscribing principal; should an agent later show this
        master's receipt binding it to another principal, the proof wins
        (:meth:`bind_reported`). Fresh ids skip ids in use, so a claimed id
        never makes a later subscription fail; what one principal may hold
        is bounded (``max_frameworks_per_principal``).
        """
        context, book = self._context, self._book
        config = context.config
        info = msg.framework
        problem = _framework_problem(info)
        if problem is not None:
            self._refuse(peer, problem, fatal=True)
            return
        if info.id in book.removed:
            self._refuse(peer, f"framework {clip(info.id)} has been removed; subscribe without an id", fatal=True)
            return
        retried = book.on(peer) if not info.id else None
        if retried is not None:
            # a retried first SUBSCRIBE from the same connection: same framework
            self._set_suppressed(retried, retried.info.role in msg.suppressed_roles)
            context.out.send_framework(retried, m.Subscribed(retried.id, config.heartbeat_interval, context.info,
                                                             False, accepts_batches=True))
            return
        record = book.get(info.id) if info.id else None
        if info.id and record is None and info.id in book.reported:
            # an agent holds ended tasks of it, not acknowledged yet: adopted as the agents reported it
            # (its principal, if their receipt checked), never as the subscriber says
            self.adopt(book.reported[info.id][0], reported=True)
            record = book.records[info.id]
        claimed = bool(info.id) and record is None   # an id this master does not know: accepted, as Mesos does
        if record is None:
            context.authorize(principal, "register_frameworks", info.role)
        else:
            context.owned(principal, record.info.principal, f"framework {record.id}")
            self._check_bound(record)
        owner = context.owner(peer)
        if (record is None or book.owners.owner(record.id) != owner) \
                and book.owners.count(owner) >= config.max_frameworks_per_connection:
            held = ", ".join(sorted(book.owners.of(owner)))
            self._refuse(peer, f"this connection already holds {config.max_frameworks_per_connection} framework(s) "
                               f"({held}; max_frameworks_per_connection): subscribe another one from its own "
                               "connection", fatal=True)
            return
        info = self._capped(info).replace(principal=principal or "")  # never what the message says
        if record is None and principal \
                and book.principals.count(principal.encode()) >= config.max_frameworks_per_principal:
            self._refuse(peer, f"principal {clip(principal)} already holds {config.max_frameworks_per_principal} "
                               "framework(s) (max_frameworks_per_principal): tear one down first", fatal=True)
            return
        role = info.role if record is None else record.info.role
        unknown = [name for name in msg.suppressed_roles if name != role]
        if unknown:   # as Mesos: a suppressed role must be one of the framework's
            self._refuse(peer, f"suppressed role {clip(unknown[0])!r} is not the framework's role {clip(role)!r}",
                         fatal=True)
            return
        if record is None:
            framework_id = info.id if claimed else book.new_id(context.registry.frameworks)
            info = self.signed(info.replace(id=framework_id))
            if claimed:
                book.claimed.add(framework_id)
                log.info("framework %s subscribed under an id this master did not know, bound to principal %s",
                         clip(framework_id), clip(info.principal or "(anonymous)"))
            try:
                context.allocator.add_framework(framework_id, info.role, min_allocatable=info.min_allocatable or None)
            except MesoslikeError as exc:
                self._refuse(peer, str(exc), fatal=True)
                return
            record = FrameworkRecord(info=info, peer=peer, last_heard=context.clock.now())
            book.add(record)
            context.registry.add_framework(info)
            context.registry_changed()
            resubscribed = False
            log.info("framework %s (%s) subscribed in role %s", framework_id, clip(info.name), clip(info.role))
        elif record.connected and record.peer == peer:
            # a retried SUBSCRIBE on the connection it is subscribed on: our
            # SUBSCRIBED was slow, not lost with a master. Answer again and
            # leave its offers alone (Mesos does the same for a retrying
            # driver); rescinding them each time stormed after a failover.
            resubscribed = True
            record.last_heard = context.clock.now()
        else:
            resubscribed = True
            self._reconnect(record, info)
        self._set_suppressed(record, bool(msg.suppressed_roles))
        book.connect(record, peer, owner)
        context.out.send_framework(record, m.Subscribed(record.id, config.heartbeat_interval, context.info,
                                                        resubscribed, accepts_batches=True))

    def teardown(self, peer: bytes, msg: m.Teardown, principal: str | None) -> None:
        record = self._context.framework_for(peer, msg.framework_id)
        if record is not None:
            self.remove(record, "torn down by the framework")

    def update_framework(self, peer: bytes, msg: m.UpdateFramework, principal: str | None) -> None:
        """UPDATE_FRAMEWORK: a subscribed framework's name, failover timeout,
        labels, web UI, host name and partition awareness change; its id,
        role, user and principal do not (a role change is refused)."""
        context = self._context
        record = context.framework_for(peer, msg.framework.id)
        if record is None:
            return
        info = msg.framework
        problem = _framework_problem(info)
        if problem is None and info.role != record.info.role:
            problem = f"role {clip(info.role)!r}: a framework keeps the role it subscribed in ({record.info.role})"
        if problem is not None:
            context.out.error(peer, f"cannot update framework {record.id}: {problem}")
            return
        updated = self.signed(self._capped(info).replace(id=record.id, role=record.info.role,
                                           user=record.info.user, principal=record.info.principal))
        if updated != record.info:
            record.info = updated
            context.registry.add_framework(updated)
            context.registry_changed()
            log.info("framework %s updated its info", record.id)

    def connection_closed(self, peer: bytes) -> None:
        """The connection ``peer`` is gone (a v1 HTTP scheduler's event
        stream closed; ZeroMQ says nothing of the kind): a framework
        subscribed on it is disconnected now, as Mesos does for HTTP
        frameworks, and its failover timeout starts."""
        record = self._book.on(peer)
        if record is not None:
            self._disconnect(record, self._context.clock.now())

    def _set_suppressed(self, record: FrameworkRecord, suppressed: bool) -> None:
        """A (re-)subscription states the framework's suppression, which
        replaces what it was (Mesos's ``updateFramework`` with the SUBSCRIBE's
        ``suppressed_roles``): a scheduler that restarted or failed over
        starts from what it says, never from its predecessor's SUPPRESS.
        Reviving clears the framework's filters, as a REVIVE does."""
        if suppressed and not record.suppressed:
            self._context.allocator.suppress_offers(record.id)
        elif record.suppressed and not suppressed:
            self._context.allocator.revive_offers(record.id)
        record.suppressed = suppressed

    def _refuse(self, peer: bytes, why: str, fatal: bool) -> None:
        self._context.counters["subscriptions_refused"] += 1
        self._context.out.error(peer, f"cannot subscribe: {why}", fatal=fatal)

    def _capped(self, info: FrameworkInfo) -> FrameworkInfo:
        """``info`` with its failover_timeout lowered to ``max_failover_timeout``
        (Mesos refuses timeouts beyond what a Duration holds; a bound this
        low keeps what a vanished framework leaves behind from lasting)."""
        cap = self._context.config.max_failover_timeout
        if info.failover_timeout <= cap:
            return info
        log.info("framework %s: failover_timeout %g lowered to %g (max_failover_timeout)", clip(info.id or info.name),
                 info.failover_timeout, cap)
        return info.replace(failover_timeout=cap)

    def _reconnect(self, record: FrameworkRecord, info: FrameworkInfo) -> None:
        """A known framework subscribes again (after a disconnection, a failover, from another connection)."""
        context = self._context
        # a re-subscribing framework gets fresh offers (as in Mesos)
        for offer in context.allocator.outstanding_offers(record.id):
            context.allocator.rescind_offer(offer.id, RescindReason.FRAMEWORK_DEACTIVATED)
        record.info = self.signed(info.replace(id=record.id, role=record.info.role))
        if context.registry.frameworks.get(record.id) != record.info:
            context.registry.add_framework(record.info)
            context.registry_changed()
        record.connected = True
        record.failover_deadline = None
        record.last_heard = context.clock.now()
        context.allocator.activate_framework(record.id)
        log.info("framework %s re-subscribed", record.id)

    # ------------------------------------------------------------ liveness
    def tick(self, now: float) -> bool:
        """Heartbeats due, silent frameworks disconnected, failover timeouts
        expired — once a second at most (or twice a heartbeat interval).
        Whether it was time (the caller's other sweeps go with it)."""
        if now < self._next_sweep:
            return False
        config = self._context.config
        self._next_sweep = now + min(1.0, config.heartbeat_interval / 2)
        timeout = config.heartbeat_interval * config.framework_timeout_heartbeats
        for record in list(self._book.records.values()):
            if record.connected:
                if now - record.last_heard >= timeout:
                    self._disconnect(record, now)
                elif now - record.last_sent >= config.heartbeat_interval:
                    self._context.out.send_framework(record, m.Heartbeat())
            elif record.failover_deadline is not None and now >= record.failover_deadline:
                self.remove(record, "failover timeout expired")
        return True

    def next_sweep(self) -> float:
        return self._next_sweep

    def _disconnect(self, record: FrameworkRecord, now: float) -> None:
        log.info("framework %s disconnected; failover timeout %.1fs", record.id, record.info.failover_timeout)
        record.failover_deadline = now + record.info.failover_timeout
        self._book.disconnect(record)
        self._reconciliation.forget(record.id)
        self._context.allocator.deactivate_framework(record.id)

    # ------------------------------------------------------------- removal
    def remove(self, record: FrameworkRecord, why: str) -> None:
        """Remove a framework for good: its tasks end (its agents shut it
        down), it is told (a fatal ERROR), and it joins the history."""
        context = self._context
        context.settle()   # its tasks release what they hold: every one of them
        log.info("removing framework %s: %s", record.id, why)
        self._archive(record, why)
        agents = {task.agent_id for task in record.tasks.values()}
        agents |= {agent.id for agent in context.agents.records.values()
                   if any(key[0] == record.id for key in agent.executors)}
        for agent_id in sorted(agents):
            agent = context.agents.get(agent_id)
            if agent is not None:
                context.out.send(agent.peer, m.ShutdownFramework(record.id))
                agent.tasks = {key for key in agent.tasks if key[0] != record.id}
                agent.executors = {key: e for key, e in agent.executors.items() if key[0] != record.id}
        context.allocator.remove_framework(record.id)
        if record.peer is not None and record.connected:
            context.out.send(record.peer, m.Error(f"framework {record.id} removed: {why}", fatal=True))
        self._book.remove(record)
        self._reconciliation.forget(record.id)
        context.registry.remove_framework(record.id)
        context.registry_changed()
        context.counters["frameworks_removed"] += 1

    def _archive(self, record: FrameworkRecord, why: str) -> None:
        """A framework is being removed: its tasks not ended yet end
        TASK_KILLED (its agents are told to shut it down; as Mesos's
        master records them), every task not completed yet is counted, and
        the framework with its ended tasks joins the completed frameworks.
        O(its tasks + completed_tasks_per_framework)."""
        context, book = self._context, self._book
        keep = context.config.completed_tasks_per_framework
        wall = context.wall_clock()
        for task in list(record.tasks.values()):
            process(task, Event.FRAMEWORK_REMOVED)   # ARCHIVE
            if not task.terminal and task.state != TaskState.UNREACHABLE:
                task.status = new_status(task.id, TaskState.KILLED, agent_id=task.agent_id, framework_id=record.id,
                                         message=f"framework removed: {why}", reason="REASON_FRAMEWORK_REMOVED",
                                         timestamp=wall, labels=task.info.labels)
            book.completed_by_state[task.state] = book.completed_by_state.get(task.state, 0) + 1
            record.add_completed(task, keep)
        book.history.framework_completed(CompletedFramework(record.info, tuple(record.completed), wall, why))

    # ----------------------------------------------------- after a failover
    def adopt(self, info: FrameworkInfo, reported: bool = False) -> None:
        """A framework this master learnt of from the registry or (``reported``)
        a re-registering agent, after a failover. It was most likely connected
        to the old master, so it gets what a connected framework gets before
        it counts as gone — the heartbeat silence (heartbeat_interval x
        framework_timeout_heartbeats) — and then its failover timeout. A
        framework with ``failover_timeout=0`` (``mesoslike run``) thus
        survives a master failover, as in Mesos, instead of being torn down
        before it could re-subscribe. A reported one without a principal
        (no receipt checked) is unbound (:meth:`_check_bound`); ended tasks
        of it other agents reported are its tasks now."""
        context, book = self._context, self._book
        info = self.signed(self._capped(info))
        ended = book.take_reported(info.id)
        context.allocator.add_framework(info.id, info.role, active=False)
        if info.id not in context.registry.frameworks:
            context.registry.add_framework(info)
            context.registry_changed()
        silence = context.config.heartbeat_interval * context.config.framework_timeout_heartbeats
        record = FrameworkRecord(info=info, peer=None, connected=False,
                                 failover_deadline=context.clock.now() + silence + info.failover_timeout)
        book.add(record)
        if reported and not info.principal:
            book.unbound.add(info.id)
        for task_id, (agent_id, running) in sorted(ended.items()):
            agent = context.agents.get(agent_id)
            if agent is not None and task_id not in record.tasks:   # its terminal update is on its way
                status = new_status(task_id, running.state, agent_id=agent_id, framework_id=info.id,
                                    timestamp=context.wall_clock(), labels=running.task.labels,
                                    healthy=running.healthy)
                record.tasks[task_id] = TaskRecord(running.task, info.id, agent_id, status, Phase.ENDED,
                                                   context.clock.now())
                agent.tasks.add((info.id, task_id))

    def remember_reported(self, agent_id: str, running: m.RunningTask, infos: Mapping[str, FrameworkInfo]) -> None:
        """An agent reports an ended task of a framework this master does
        not know: kept (up to MAX_REPORTED_TASKS) so that the framework,
        should it subscribe under its id, hears of the task's end from that
        agent — and so that no other agent's word about it is believed."""
        book = self._book
        framework_id, task_id = running.framework_id, running.task.task_id
        entry = book.reported.get(framework_id)
        if entry is None:
            if book.reported_count >= MAX_REPORTED_TASKS:
                return
            info = infos.get(framework_id) or FrameworkInfo(name="(recovered)", id=framework_id)
            entry = book.reported[framework_id] = (info, {})
        if task_id not in entry[1]:
            if book.reported_count >= MAX_REPORTED_TASKS:
                return
            book.reported_count += 1
        entry[1][task_id] = (agent_id, running)

    def bind_reported(self, reported: Iterable[FrameworkInfo]) -> None:
        """Frameworks a re-registering agent reports with this master's
        receipt for their principal: an unbound one is bound to it; one
        bound to another principal keeps its own (logged once: someone holds
        a receipt of the other principal for this id)."""
        context, book = self._context, self._book
        if context.credentials is None or context.receipt_key is None:
            return
        for info in reported:
            checked = self.reported_info(info)
            if not checked.principal:
                continue
            record = book.get(info.id)
            if record is None:
                entry = book.reported.get(info.id)
                if entry is not None and not entry[0].principal:
                    book.reported[info.id] = (checked, entry[1])
                continue
            if info.id in book.unbound:
                book.unbound.discard(info.id)
                record.info = record.info.replace(principal=checked.principal,
                                           principal_receipt=checked.principal_receipt)
                context.registry.add_framework(record.info)
                context.registry_changed()
                log.info("framework %s belongs to principal %s (an agent showed the master's receipt)", record.id,
                         clip(checked.principal))
            elif record.info.principal and record.info.principal != checked.principal and record.id in book.claimed:
                self._give_back_claimed(record, checked)
            elif record.info.principal and record.info.principal != checked.principal:
                context.log_once(info.id, "framework-principal",
                                 f"framework {record.id} belongs to principal {clip(record.info.principal)}, but an "
                                 f"agent shows a receipt for principal {clip(checked.principal)}: ignored")
            else:
                book.claimed.discard(record.id)   # the receipt confirms whose it is

    def _give_back_claimed(self, record: FrameworkRecord, proven: FrameworkInfo) -> None:
        """A framework id accepted unknown (:meth:`subscribe`) that an
        agent's receipt shows was another principal's: the claimant is cut
        off (a fatal ERROR) and the id goes to the proven principal, which
        may subscribe to it."""
        context, book = self._context, self._book
        book.claimed.discard(record.id)
        context.count_refusal("principal")
        log.warning("framework %s: principal %s subscribed under it first, but an agent shows the master's receipt "
                    "for principal %s: the id goes to %s", record.id, clip(record.info.principal),
                    clip(proven.principal), clip(proven.principal))
        if record.connected and record.peer is not None:
            context.out.send(record.peer, m.Error(f"framework id {record.id} belongs to another principal",
                                                  fatal=True))
            self._disconnect(record, context.clock.now())
        book.principals.release(record.id)
        book.owners.release(record.id)
        record.info = record.info.replace(principal=proven.principal, principal_receipt=proven.principal_receipt)
        book.principals.hold(proven.principal.encode(), record.id)
        context.registry.add_framework(record.info)
        context.registry_changed()

    # ------------------------------------------------------------ receipts
    def signed(self, info: FrameworkInfo) -> FrameworkInfo:
        """``info`` with the master's receipt for its id and principal (none
        without a principal or a receipt key): what RUN_TASK carries to the
        agents, who report it back (mesoslike.master.receipts)."""
        key = self._context.receipt_key
        receipt = receipts.sign(key, receipts.FRAMEWORK, info.id, info.principal) \
            if key is not None and info.principal and info.id else ""
        return info if info.principal_receipt == receipt else info.replace(principal_receipt=receipt)

    def reported_info(self, info: FrameworkInfo) -> FrameworkInfo:
        """A framework's info as a re-registering agent reported it: its
        principal kept only with a receipt of this master's that binds it
        (secured clusters), never on the agent's word."""
        context = self._context
        if context.credentials is not None and context.receipt_key is not None and info.principal and \
                receipts.verify(context.receipt_key, receipts.FRAMEWORK, info.id, info.principal,
                                info.principal_receipt):
            return info
        if not info.principal and not info.principal_receipt:
            return info
        return info.replace(principal="", principal_receipt="")

    def _check_bound(self, record: FrameworkRecord) -> None:
        """Refuse using a framework id whose principal this secured master
        cannot know: adopted from agents' reports after a restart without a
        registry, with no receipt of the master's to say whose it is (an
        agent's word alone could hand it to anyone; docs/security.rst)."""
        if self._context.credentials is not None and record.id in self._book.unbound:
            raise Refused("principal", f"not authorized: framework {record.id} is known to this master only from "
                                       "agents that showed no receipt for its principal, so whose it is cannot "
                                       "be told; it cannot be subscribed to")


def text_problem(what: str, value: str) -> str | None:
    """Why the master will not keep the text ``value`` (longer than it stores), or None."""
    if len(value) > MAX_NAME_LENGTH:
        return f"{what} of {len(value)} characters is longer than {MAX_NAME_LENGTH}"
    return None


def _framework_problem(info: FrameworkInfo) -> str | None:
    """Why the master will not keep ``info`` (fields longer than it stores), or None."""
    for what, value in (("the id", info.id), ("the name", info.name), ("the role", info.role),
                        ("the user", info.user), ("the hostname", info.hostname),
                        ("min_allocatable", info.min_allocatable)):
        problem = text_problem(what, value)
        if problem is not None:
            return problem
    return None
