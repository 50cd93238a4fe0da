"""The operator's operations on the master's state (sans I/O;
docs/operations.rst, docs/reservations.rst, docs/reliability.rst): role
weights and quota, killing a task, tearing a framework down, draining and
reactivating an agent, marking one gone, and dynamic reservations.

:mod:`mesoslike.master.operator` serves them over HTTP on a server thread,
under the master's lock, through :class:`~mesoslike.master.core.MasterCore`,
which returns what each has the master say. Bad input raises
:class:`~mesoslike.errors.MesoslikeError` (:class:`NotFound`,
:class:`Conflict`) and changes nothing; what the ACLs do not allow raises
:class:`~mesoslike.acl.Refused`.
"""

from __future__ import annotations

import logging
from typing import Sequence

import attrs

from mesoslike.errors import AgentCapacityError
from mesoslike.master.agents import AgentLifecycle
from mesoslike.master.context import CoreContext
from mesoslike.master.frameworks import FrameworkLifecycle
from mesoslike.master.launches import Launches
from mesoslike.master.offers import OfferDesk
from mesoslike.master.operations import DRAIN_KILL_RESEND, DRAINED, DRAINING, Conflict, DrainInfo, NotFound, check_grace
from mesoslike.master.planner import reservation_refusal
from mesoslike.master.records import AgentRecord, FrameworkRecord, TaskRecord, clip
from mesoslike.master.reservations import (Conversion, ReservationError, check_reservation_count, operator_reserve,
                                           operator_unreserve, reserver_principals)
from mesoslike.resources import Resources
from mesoslike.wire import TaskState
from mesoslike.wire import messages as m

__all__ = ["OperatorOperations"]

log = logging.getLogger("mesoslike.master")


class OperatorOperations:
    """Each operation returns the JSON-able reply (its sends go to the core's outbox)."""

    def __init__(self, context: CoreContext, frameworks: FrameworkLifecycle, agents: AgentLifecycle,
                 launches: Launches, offers: OfferDesk) -> None:
        self._context = context
        self._frameworks = frameworks
        self._agents = agents
        self._launches = launches
        self._offers = offers

    # ------------------------------------------------------ weights, quota
    def update_weights(self, weights: dict[str, float]) -> dict | None:
        """Set role weights (others keep theirs); persisted in the registry.
        Offers the new weights need back are rescinded. Raises
        :class:`MesoslikeError` (nothing changes) on a bad role or weight."""
        context = self._context
        context.allocator.update_weights(weights)
        context.registry.update_weights(weights)
        context.registry_changed()
        log.info("weights updated: %s", clip(weights))
        self._offers.send_rescinds()
        return None

    def update_quota(self, role: str, guarantee: str | None = None, limit: str | None = None) -> dict | None:
        """Set (or, with neither, clear) a role's quota guarantee and limit
        (resource strings); persisted in the registry. Offers the new quota
        needs back are rescinded. Raises
        :class:`MesoslikeError` (nothing changes) on bad input."""
        context = self._context
        context.allocator.update_quota(role, guarantee, limit)
        context.registry.update_quota(role, guarantee, limit)
        context.registry_changed()
        log.info("quota of role %s: guarantee %s, limit %s", clip(role), guarantee or "none", limit or "none")
        self._offers.send_rescinds()
        return None

    # ------------------------------------------------ tasks and frameworks
    def kill_task(self, task_id: str, framework_id: str | None = None) -> dict:
        """Kill a live task (of ``framework_id``, or of whichever framework
        has one with this id): its agent is told to, and the framework hears
        TASK_KILLED from it as for its own kills. O(frameworks) without
        ``framework_id``, else O(1)."""
        context = self._context
        record, task = self._operated_task(task_id, framework_id)
        agent = context.agents.records.get(task.agent_id)
        if agent is not None:  # else its agent's removal is ending it
            context.out.send(agent.peer, m.KillTask(record.id, task.id))
        log.info("operator: killing task %s of framework %s on agent %s", clip(task.id), record.id, task.agent_id)
        return {"framework_id": record.id, "task_id": task.id, "agent_id": task.agent_id}

    def teardown_framework(self, framework_id: str) -> dict:
        """Remove a framework as its own TEARDOWN does: its tasks are killed
        (TASK_KILLED in the history), it is told (a fatal ERROR), its id may
        not come back, and it moves to the completed frameworks."""
        context = self._context
        record = context.frameworks.records.get(framework_id)
        if record is None:
            gone = " (it was removed already)" if framework_id in context.frameworks.removed else ""
            raise NotFound(f"no framework {clip(framework_id)!r} is known to the master{gone}")
        live = sum(1 for task in record.tasks.values() if not task.terminal)
        self._frameworks.remove(record, "torn down by the operator")
        return {"framework_id": record.id, "name": record.info.name, "tasks_killed": live}

    # -------------------------------------------------------------- agents
    def drain_agent(self, agent: str, grace: object = 0.0) -> dict:
        """Mesos's DRAIN_AGENT: the agent (an id or a hostname) gets no more
        offers (its outstanding ones are rescinded) and is DRAINING; once
        ``grace`` seconds have passed its tasks still running are killed
        (TASK_KILLED), and once none is left it is DRAINED. Draining again
        may shorten the grace, not lengthen it. Until :meth:`reactivate_agent`."""
        context = self._context
        record = self._operated_agent(agent)
        seconds = check_grace(grace)
        now, wall = context.clock.now(), context.wall_clock()
        drain = context.agents.drains.get(record.id)
        if drain is None:
            context.allocator.deactivate_agent(record.id)
            self._offers.send_rescinds()
            drain = DrainInfo(DRAINING, seconds, now, wall, now + seconds, wall + seconds)
            log.info("operator: draining agent %s (%s), its tasks killed in %gs", record.id,
                     clip(record.info.hostname), seconds)
        elif drain.state == DRAINING and now + seconds < drain.kill_at:
            drain = attrs.evolve(drain, grace=seconds, kill_at=now + seconds, kill_at_wall=wall + seconds)
        self._set_drain(record.id, drain)
        self._advance_drain(record, drain, now)
        return self._agent_reply(record)

    def _set_drain(self, agent_id: str, drain: DrainInfo | None) -> None:
        """An agent's drain now (None: none), in the registry too: a new
        leader goes on with it (Mesos keeps drains in its registry)."""
        context = self._context
        if drain is None:
            context.agents.drains.pop(agent_id, None)
        else:
            context.agents.drains[agent_id] = drain
        before = context.registry.drains.get(agent_id)
        context.registry.update_drain(agent_id, drain.to_record() if drain is not None else None)
        if context.registry.drains.get(agent_id) != before:
            context.registry_changed()

    def reactivate_agent(self, agent: str) -> dict:
        """Mesos's REACTIVATE_AGENT: a draining or drained agent is offered
        again (a drain whose grace has not passed kills nothing)."""
        context = self._context
        record = self._operated_agent(agent)
        drain = context.agents.drains.get(record.id)
        if drain is None:
            raise Conflict(f"agent {record.id} ({clip(record.info.hostname)}) is not draining or drained")
        self._set_drain(record.id, None)
        context.allocator.activate_agent(record.id)
        log.info("operator: agent %s (%s) reactivated (it was %s)", record.id, clip(record.info.hostname),
                 drain.state)
        return {**self._agent_reply(record), "was": drain.state}

    def reserve_resources(self, agent: str, resources: str, principal: str | None,
                          labels: Sequence[tuple[str, str]] = ()) -> dict:
        """Mesos's ``/reserve``: ``resources`` written reserved for their
        role (``cpus(analytics):2``) become dynamically reserved for it on
        the agent (an id or a hostname) by the operator's ``principal``.
        They must be unreserved and not used by tasks there; outstanding
        offers on the agent are rescinded if they hold them. Persisted in
        the registry; the agent is told to checkpoint them. ``labels``:
        the reservation's (``cpus(analytics,ops,team=ml):2``). With
        credentials the ``reserve_resources`` ACL must let ``principal``
        reserve for the role (else :class:`~mesoslike.acl.Refused`)."""
        record = self._operated_agent(agent)
        conversion = operator_reserve(Resources.parse(resources), principal or "", labels)
        self._authorize_reservation("reserve_resources", principal, conversion.added.reservation_roles())
        return self._operator_conversion(record, conversion, "reserved")

    def unreserve_resources(self, agent: str, resources: str, principal: str | None = None) -> dict:
        """Mesos's ``/unreserve``: dynamically reserved ``resources``
        (``cpus(analytics,alice):2``) on the agent become unreserved — with
        credentials, if the ``unreserve_resources`` ACL lets the operator's
        ``principal`` unreserve what each of their reserver principals
        reserved; as :meth:`reserve_resources` otherwise. Written as for
        :meth:`reserve_resources` (``cpus(analytics):2``), they name what
        that made: the role's reservation by ``principal``."""
        record = self._operated_agent(agent)
        conversion = operator_unreserve(Resources.parse(resources), principal or "")
        self._authorize_reservation("unreserve_resources", principal, reserver_principals(conversion.removed))
        return self._operator_conversion(record, conversion, "unreserved")

    def _authorize_reservation(self, action: str, principal: str | None, targets: list[str]) -> None:
        """With credentials, raise :class:`~mesoslike.acl.Refused` (counted)
        unless ``principal``, acting as an operator, may do ``action`` on
        every target (roles reserved for, principals that reserved)."""
        refused = reservation_refusal(self._context.credentials, action, principal, targets, "operator")
        if refused is not None:
            self._context.count_refusal(action)
            log.warning("refused %s: %s", action, refused)
            raise refused

    def _operator_conversion(self, agent: AgentRecord, conversion: Conversion, done: str) -> dict:
        context = self._context
        if not agent.info.resources.contains(conversion.removed):
            held = agent.info.resources
            static = Resources.sum(held.reserved(role) for role in conversion.removed.reservation_roles())
            static = static - static.dynamically_reserved()
            hint = (f"; its {static} is a static reservation (the agent's --resources), which changes only with "
                    "them" if static and done == "unreserved" else "")
            raise Conflict(f"agent {agent.id} ({clip(agent.info.hostname)}) has no {conversion.removed} "
                           f"(its resources are {agent.info.resources}){hint}")
        try:
            check_reservation_count(agent.info.resources - conversion.removed + conversion.added)
        except ReservationError as exc:
            raise Conflict(f"agent {agent.id} ({clip(agent.info.hostname)}): {exc}") from None
        try:
            context.allocator.convert_available(agent.id, conversion.removed, conversion.added)
        except AgentCapacityError:   # nothing changed, no offer rescinded
            raise Conflict(f"{conversion.removed} on agent {agent.id} ({clip(agent.info.hostname)}) is in use by "
                           "tasks; try again once they ended") from None
        self._offers.send_rescinds()
        self._launches.reservations_changed(agent, agent.info.resources - conversion.removed + conversion.added)
        log.info("operator: %s on agent %s %s as %s", conversion.removed, agent.id, done, conversion.added)
        return {"agent_id": agent.id, "hostname": agent.info.hostname, done: str(conversion.removed),
                "resources": str(conversion.added), "total": str(agent.info.resources)}

    def _operated_task(self, task_id: str, framework_id: str | None) -> tuple[FrameworkRecord, TaskRecord]:
        """The live task an operation names; NotFound or Conflict (ambiguous, ended)."""
        context = self._context
        if framework_id is not None:
            record = context.frameworks.records.get(framework_id)
            if record is None:
                raise NotFound(f"no framework {clip(framework_id)!r} is known to the master")
            candidates = [record]
        else:
            candidates = list(context.frameworks.records.values())
        live = [(r, r.tasks[task_id]) for r in candidates if task_id in r.tasks and not r.tasks[task_id].terminal]
        if len(live) > 1:
            raise Conflict(f"tasks of several frameworks have the id {clip(task_id)!r} "
                           f"({', '.join(r.id for r, _ in live)}): say which framework")
        if live:
            return live[0]
        for record in candidates:
            ended = record.tasks.get(task_id) or record.completed_task(task_id)
            if ended is not None:
                raise Conflict(f"task {clip(task_id)!r} of framework {record.id} has ended already ({ended.state})")
        of = f" of framework {framework_id}" if framework_id is not None else ""
        raise NotFound(f"no task {clip(task_id)!r}{of} is known to the master")

    def _operated_agent(self, agent: str) -> AgentRecord:
        """The registered agent with this id, else the one with this hostname; NotFound or Conflict."""
        context = self._context
        record = context.agents.records.get(agent)
        if record is not None:
            return record
        named = [a for a in context.agents.records.values() if a.info.hostname == agent]
        if len(named) > 1:
            raise Conflict(f"several agents have the hostname {clip(agent)!r} "
                           f"({', '.join(sorted(a.id for a in named))}): name one by its id")
        if not named:
            raise NotFound(f"no registered agent has the id or hostname {clip(agent)!r}")
        return named[0]

    def _agent_reply(self, agent: AgentRecord) -> dict:
        context = self._context
        drain = context.agents.drains.get(agent.id)
        return {"agent_id": agent.id, "hostname": agent.info.hostname, "tasks": len(agent.tasks),
                "drain_info": drain.to_json() if drain is not None else None}

    def check_drains(self, now: float) -> None:
        """Every turn: kills due, agents drained, drains of agents removed
        meanwhile forgotten. The drain of an agent out of reach (marked
        unreachable, or still expected back after a failover) is kept, as
        Mesos keeps it: the agent is still drained when it comes back.
        O(drains)."""
        context = self._context
        context.settle()
        book = context.agents
        for agent_id, drain in list(book.drains.items()):
            agent = book.records.get(agent_id)
            if agent is None and agent_id not in book.expected and agent_id not in book.unreachable:   # removed
                self._set_drain(agent_id, None)
            elif agent is not None and drain.state == DRAINING:
                self._advance_drain(agent, drain, now)

    def _advance_drain(self, agent: AgentRecord, drain: DrainInfo, now: float) -> None:
        """DRAINED once the agent has no task left (their ends acknowledged,
        as in Mesos); else, once the grace has passed, kill those still
        running (again every DRAIN_KILL_RESEND). O(the agent's tasks) when
        kills go out, else O(1)."""
        context = self._context
        if drain.state != DRAINING:
            return
        if not agent.tasks:
            self._set_drain(agent.id, attrs.evolve(drain, state=DRAINED, next_kill=None))
            log.info("agent %s (%s) is drained", agent.id, clip(agent.info.hostname))
            return
        if now < drain.kill_at or (drain.next_kill is not None and now < drain.next_kill):
            return
        for framework_id, task_id in sorted(agent.tasks):
            found = context.frameworks.task(framework_id, task_id)
            if found is not None and not found[1].terminal:
                context.out.send(agent.peer, m.KillTask(framework_id, task_id))
        context.agents.drains[agent.id] = attrs.evolve(drain, next_kill=now + DRAIN_KILL_RESEND)

    def drain_wakeup(self) -> float:
        """When a drain has kills due next (inf: none)."""
        context = self._context
        due = [drain.next_kill if drain.next_kill is not None else drain.kill_at
               for agent_id, drain in context.agents.drains.items() if drain.state == DRAINING and agent_id in context.agents.records]
        return min(due, default=float("inf"))

    def mark_agent_gone(self, agent: str) -> dict:
        """Mesos's MARK_AGENT_GONE: the agent (an id or a hostname,
        registered or unreachable) is gone for good. Its tasks end
        TASK_GONE_BY_OPERATOR (TASK_LOST for frameworks that are not
        partition-aware), a registered one is told to shut down, and it may
        not come back under its id (docs/reliability.rst)."""
        context = self._context
        why = "marked gone by the operator"
        registered = context.agents.records.get(agent)
        unreachable = context.agents.unreachable.get(agent)
        if registered is None and unreachable is None:
            named = [u for u in context.agents.unreachable.values() if u.hostname == agent]
            if len(named) == 1:
                unreachable = named[0]
            elif len(named) > 1:
                raise Conflict(f"several unreachable agents have the hostname {clip(agent)!r} "
                               f"({', '.join(sorted(u.id for u in named))}): name one by its id")
            else:
                try:
                    registered = self._operated_agent(agent)
                except NotFound:
                    gone = " (it was removed already)" if agent in context.agents.removed else ""
                    raise NotFound(f"no registered or unreachable agent has the id or hostname "
                                   f"{clip(agent)!r}{gone}") from None
        if registered is not None:
            tasks = len(registered.tasks)
            reply = {"agent_id": registered.id, "hostname": registered.info.hostname, "was": "registered"}
            self._agents.remove(registered, why, gone=TaskState.GONE_BY_OPERATOR,
                               reason="REASON_AGENT_REMOVED_BY_OPERATOR")
        else:
            assert unreachable is not None
            tasks = len(self._agents.unreachable_tasks(unreachable))
            reply = {"agent_id": unreachable.id, "hostname": unreachable.hostname, "was": "unreachable"}
            self._agents.drop_unreachable(unreachable, TaskState.GONE_BY_OPERATOR, "REASON_AGENT_REMOVED_BY_OPERATOR", why)
        context.counters["agents_gone"] += 1
        log.warning("operator: agent %s (%s) marked gone", reply["agent_id"], clip(reply["hostname"]))
        return {**reply, "tasks": tasks}
