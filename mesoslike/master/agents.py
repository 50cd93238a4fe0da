"""An agent's life at the master (sans I/O): registration and
re-registration (after a failover, a restart, a partition), pings and the
health checks that mark a silent agent unreachable (docs/reliability.rst,
"Partitions": Mesos's markUnreachable, _reregisterSlave, registry GC),
removal, and its custom executors' resources.

The agents themselves are in the :class:`~mesoslike.master.agent_book.AgentBook`.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
from typing import Iterator, NamedTuple

import msgspec

import mesoslike.master.receipts as receipts
from mesoslike.errors import AgentCapacityError, MesoslikeError
from mesoslike.allocator import RescindReason
from mesoslike.allocator.hierarchical import CheckedAgent
from mesoslike.master.context import CoreContext
from mesoslike.master.delivery import UpdateDelivery
from mesoslike.master.frameworks import FrameworkLifecycle, text_problem
from mesoslike.master.offers import OfferDesk
from mesoslike.master.partitions import UnreachableAgent, agents_to_forget
from mesoslike.master.reconciliation import Reconciliation
from mesoslike.master.records import (MAX_ATTRIBUTES, MAX_NAME_LENGTH, AgentRecord, FrameworkRecord, ReportedStatus,
                                      TaskRecord, clip, new_status)
from mesoslike.master.task_lifecycle import HOLDING, Action, Event, Phase, process
from mesoslike.resources import Resources
from mesoslike.wire import TERMINAL_STATES, AgentInfo, FrameworkInfo, TaskState
from mesoslike.wire import messages as m
from mesoslike.wire.types import ExecutorInfo

__all__ = ["AgentLifecycle"]

log = logging.getLogger("mesoslike.master")

EMPTY = Resources()
#: agents pinged per loop turn: a sweep of more goes on over the next turns (which handle what came
#: meanwhile), so that 100,000 agents make a hundred short turns rather than one of seconds. Half of
#: the frames a turn handles (the runtime's batch of 2,000): the PONGs, which go first, leave room
#: for the rest
PING_CHUNK = 1000
#: the longest agent incarnation remembered (the agent's is 16 characters): a longer one is taken as none
MAX_INCARNATION = 64
#: the most distinct (vector, count) sums of a framework's tasks kept (AgentLifecycle._multiples)
_MULTIPLES_KEPT = 1024


class AgentLifecycle:
    """Registration to removal; O(1) per message (a re-registration:
    O(its tasks)), O(agents) per ping sweep."""

    def __init__(self, context: CoreContext, frameworks: FrameworkLifecycle, delivery: UpdateDelivery,
                 reconciliation: Reconciliation, offers: OfferDesk) -> None:
        self._context = context
        self._frameworks = frameworks
        self._delivery = delivery
        self._reconciliation = reconciliation
        self._offers = offers
        #: re-registered agents' tasks admitted (decoded, checked, their holdings in the allocator) whose
        #: records are not made yet: made by :meth:`settle`, the gate every reader of the tasks passes
        self._pending: list[_PendingTasks] = []
        #: the allocator's side of the latest of them, not booked yet (the allocator checked them at admission),
        #: in the order they were admitted: booked with their records, or before a cycle that may offer
        #: anything (:meth:`book`)
        self._bookings: collections.deque[CheckedAgent] = collections.deque()
        context.settle = self.settle
        now = context.clock.now()
        self._next_ping_sweep = now + context.config.ping_interval
        self._next_registry_gc = now + context.config.registry_gc_interval
        #: the agents of the sweep under way still to ping (None: no sweep under way)
        self._sweep: Iterator[AgentRecord] | None = None
        #: (id(resources), count) -> (those resources, count times them): what a framework's tasks hold on
        #: a re-registering agent, when they all hold the one vector (_admit_reregistered)
        self._multiples: dict[tuple[int, int], tuple[Resources, Resources]] = {}

    def recover(self, now: float) -> None:
        """Serve from a registry: its agents get ``agent_reregister_timeout``
        to come back (those an earlier core of this process knew are pinged
        at once), its unreachable agents stay unreachable."""
        context = self._context
        book, registry = context.agents, context.registry
        book.expected = set(registry.agents)
        book.expected_until = now + context.config.agent_reregister_timeout
        for agent_id, entry in registry.unreachable.items():   # their tasks were an earlier leader's
            book.keep_unreachable(UnreachableAgent(agent_id, entry.hostname, entry.since,
                                                   principal=entry.principal, tasks_known=False))
        book.earlier_peers = {a: p for a, p in book.earlier_peers.items() if a in book.expected}
        if book.earlier_peers:
            self._next_ping_sweep = now

    def tick(self, now: float) -> None:
        """Pings (every ``ping_interval``), agents whose turn to be marked
        unreachable came, and the registry's unreachable agents aged out."""
        context = self._context
        if now >= self._next_ping_sweep and self._sweep is None:
            # the next sweep starts once this one is over: a master too busy to ping every agent
            # within the interval pings each less often, never some of them more often
            self._next_ping_sweep = now + context.config.ping_interval
            self._start_ping_sweep()
        if self._sweep is not None:
            self._ping()
        removals = context.agents.removals
        if removals and now >= removals.next_turn():
            self._mark_due_unreachable(now)
        if now >= self._next_registry_gc:
            self._next_registry_gc = now + context.config.registry_gc_interval
            self._forget_unreachable_agents()

    def next_wakeup(self) -> float:
        if self._sweep is not None:
            return self._context.clock.now()   # the sweep goes on at the next turn
        return min(self._next_ping_sweep, self._context.agents.removals.next_turn(), self._next_registry_gc)

    # ------------------------------------------------------------ messages
    def register(self, peer: bytes, msg: m.RegisterAgent, principal: str | None) -> None:
        context = self._context
        existing = context.agents.on(peer)
        if existing is not None:  # our AGENT_REGISTERED was lost: say it again
            context.out.send(peer, self.registered_message(existing.info))
            return
        context.authorize(principal, "register_agents")
        if self._refused(peer, principal, msg.agent, None, msg.http_address):
            return
        agent_id = context.agents.new_id(context.registry.agents)
        info = msg.agent.replace(id=agent_id, principal=principal or "")
        self._admit(peer, info, {}, msg.http_address)
        if msg.incarnation and len(msg.incarnation) <= MAX_INCARNATION:   # its reports come next (number 1 on)
            context.agents.records[agent_id].incarnation = msg.incarnation
        log.info("agent %s (%s) registered with %s", agent_id, clip(info.hostname), info.resources)

    def registered_message(self, info: AgentInfo) -> m.AgentRegistered:
        """AGENT_REGISTERED for ``info``, with the master's receipt binding
        its id to its principal (secured clusters: mesoslike.master.receipts)."""
        context = self._context
        receipt = receipts.sign(context.receipt_key, receipts.AGENT, info.id, info.principal) \
            if context.receipt_key is not None and info.principal else ""
        return m.AgentRegistered(info.id, context.info, context.config.ping_interval, accepts_batches=True, receipt=receipt)

    def _refused(self, peer: bytes, principal: str | None, info: AgentInfo, agent_id: str | None,
                       http_address: str = "") -> bool:
        """Refuse (ERROR, counted) a registration the master will not keep:
        fields beyond its bounds, or one more agent on a connection that
        holds ``max_agents_per_connection`` (``agent_id``: the agent
        re-registering, which may already be this connection's)."""
        context = self._context
        owner = context.owner(peer)
        # every re-registering agent's (no attributes, short texts) in three tests, without the calls and
        # tuples of the full checks (_agent_problem), which any other one takes
        problem = None if not info.attributes and len(info.id) <= MAX_NAME_LENGTH and \
            len(info.hostname) <= MAX_NAME_LENGTH and len(http_address) <= MAX_NAME_LENGTH else \
            _agent_problem(info) or text_problem("the HTTP address", http_address)
        if problem is None and (agent_id is None or context.agents.owners.owner(agent_id) != owner) \
                and context.agents.owners.count(owner) >= context.config.max_agents_per_connection:
            held = ", ".join(sorted(context.agents.owners.of(owner)))
            problem = (f"this connection already holds {context.config.max_agents_per_connection} agent(s) ({held}; "
                       "max_agents_per_connection): run another agent on its own connection")
        held_by = (principal or "").encode()
        if problem is None and held_by and (agent_id is None or context.agents.principals.owner(agent_id) != held_by) \
                and context.agents.principals.count(held_by) >= context.config.max_agents_per_principal:
            problem = (f"principal {clip(principal)} already holds {context.config.max_agents_per_principal} "
                       "agent(s) (max_agents_per_principal)")
        if problem is None:
            return False
        context.counters["agent_registrations_refused"] += 1
        context.out.error(peer, f"cannot register the agent: {problem}")
        return True

    def reregister(self, peer: bytes, msg: m.ReregisterAgent, principal: str | None) -> None:
        """REREGISTER_AGENT. As in Mesos, an agent comes back under the id it
        had, even one this master does not know (its registry was lost, or
        the agent knew an earlier leader); what it claims is bounded per
        connection, and fresh ids skip the ones agents hold
        (:meth:`_new_agent_id`).

        In a secured cluster an agent id belongs to its principal: the one
        this master or its registry recorded, else the one the agent's
        receipt names (:meth:`_unproven_agent`)."""
        context = self._context
        info = msg.agent
        if not info.id:
            context.out.error(peer, "REREGISTER_AGENT needs the agent's id")
            return
        context.authorize(principal, "register_agents")
        # (the record looked up once: nothing below adds or removes one before it is read again)
        record = context.agents.records.get(info.id)
        known = record or context.registry.agents.get(info.id) or context.agents.unreachable.get(info.id)
        if known is not None:
            if context.credentials is not None:   # (an anonymous cluster owns no ids: no text made for nothing)
                context.owned(principal, known.info.principal if isinstance(known, AgentRecord) else known.principal,
                              f"agent {info.id}")
        elif self._unproven(peer, principal, info.id, msg.receipt):
            return
        if info.id in context.agents.removed:
            context.out.send(peer, m.ShutdownAgent("this agent was removed; register anew"))
            return
        if info.principal != (principal or ""):   # whose it is, is never the agent's to say
            info = info.replace(principal=principal or "")
            msg = msgspec.structs.replace(msg, agent=info)
        if self._refused(peer, principal, info, info.id, msg.http_address):
            return
        if record is None:
            unreachable = context.agents.unreachable.get(info.id)
            if unreachable is not None:
                self.settle()   # both read the tasks (and an agent out of reach comes back eagerly)
            if unreachable is not None and unreachable.tasks_known:
                self._readmit_unreachable(peer, msg, unreachable)
            else:
                self._admit_reregistered(peer, msg, returning=unreachable is not None)
            if msg.incarnation:   # (old agents and bench/'s simulated ones send none: nothing to remember)
                self._note_report(context.agents.records.get(info.id), msg)
            return
        incarnation = _incarnation(msg)
        same = bool(incarnation) and incarnation == record.incarnation
        if (same and msg.sequence <= record.sequence) or (incarnation and incarnation == record.earlier_incarnation):
            self._repeated_report(peer, record, msg, same)
            return
        self.settle()   # a known agent's tasks are compared with those it reports
        context.agents.connect(record, peer, context.owner(peer))
        record.pings_unanswered = 0
        record.http_address = msg.http_address
        self._lose_unreported_tasks(record, msg.tasks, same_incarnation=same)
        self._forget_unreported_doomed(record, msg.tasks)
        self._reconcile_executors(record, msg.executors)
        self._update(record, info)
        self._frameworks.bind_reported(msg.frameworks)
        self._note_report(record, msg)
        context.out.send(peer, self.registered_message(record.info))
        log.info("agent %s re-registered", record.id)

    def _note_report(self, agent: AgentRecord | None, msg: m.ReregisterAgent) -> None:
        """``agent`` was admitted with ``msg``'s report: a report of its
        incarnation numbered lower is stale from now on, and so is any of the
        incarnation it replaced (that agent process is gone). O(1)."""
        if agent is not None:
            incarnation = _incarnation(msg)
            if agent.incarnation and incarnation != agent.incarnation:
                agent.earlier_incarnation = agent.incarnation
            agent.incarnation, agent.sequence = incarnation, msg.sequence

    def _repeated_report(self, peer: bytes, agent: AgentRecord, msg: m.ReregisterAgent, same: bool) -> None:
        """A registered agent's report numbered as the one admitted, or lower,
        by the same incarnation (``same``), or one of the incarnation that
        agent process replaced. The same number: a retry of the admitted
        report (its answer was lost, or its frame is no longer remembered
        for the runtime's byte-for-byte check): answered again, its tasks
        not compared again — tasks launched since the report was made are
        not in it. Lower, or the replaced process's: stale — sent before the
        admitted one and delayed in the network (several attempts over fresh
        connections, a lossy network); its tasks are older than what the
        master knows, so nothing is reconciled, the agent's connection stays
        where it is, and no answer goes out (the agent has its answer, or is
        retrying with a newer report); counted (``reregistrations_stale``)
        and logged once per agent. O(1)."""
        context = self._context
        if same and msg.sequence == agent.sequence:
            context.counters["registration_retries"] += 1
            context.agents.connect(agent, peer, context.owner(peer))
            agent.pings_unanswered = 0
            context.out.send(peer, self.registered_message(agent.info))
            return
        context.counters["reregistrations_stale"] += 1
        context.log_once(agent.id, "stale re-registration",
                         f"agent {agent.id}: a stale re-registration ignored (report {msg.sequence} of incarnation "
                         f"{clip(msg.incarnation)}, {len(msg.tasks)} task(s); report {agent.sequence} of incarnation "
                         f"{clip(agent.incarnation)} was admitted since: this one was sent before it and delayed)")

    def _unproven(self, peer: bytes, principal: str | None, agent_id: str, receipt: str) -> bool:
        """An agent re-registers under an id neither this master nor its
        registry knows (a master without a registry restarted, or the
        registry was lost). In a secured cluster it must show this master's
        receipt binding the id to the principal it authenticated as — an id
        is never the first claimant's. Without one it is told to register
        anew (SHUTDOWN_AGENT: its tasks are killed, it gets a fresh id) and
        the refusal is counted and logged once. True if refused."""
        context = self._context
        if context.credentials is None or context.receipt_key is None:
            return False
        if receipts.verify(context.receipt_key, receipts.AGENT, agent_id, principal or "", receipt):
            return False
        context.counters["agent_registrations_refused"] += 1
        context.count_refusal("principal")
        why = (f"agent id {clip(agent_id)} is not known to this master and the agent shows no receipt of the master's "
               f"binding it to principal {clip(principal or '')}: register anew")
        context.log_once(agent_id, "reregistration", f"re-registration refused: {why}")
        context.out.send(peer, m.ShutdownAgent(why))
        return True

    def _update(self, agent: AgentRecord, info: AgentInfo) -> None:
        """A known agent re-registered with another total or other
        attributes (it restarted with other flags): as Mesos's master does,
        the allocator takes the new ones (``update_agent``, which also drops
        the decline filters on the agent and allocates it again) and the
        registry keeps them. Its outstanding offers, made of the old ones,
        are rescinded first. A total below what its tasks still hold is
        refused: the agent keeps its old total and attributes. O(offers)."""
        context = self._context
        total = info.resources if info.resources != agent.info.resources else None
        attributes = info.attributes if info.attributes != agent.info.attributes else None
        if total is None and attributes is None:
            return
        for offer in context.allocator.outstanding_offers():
            if offer.agent_id == agent.id:  # its old incarnation went away
                context.allocator.rescind_offer(offer.id, RescindReason.AGENT_DEACTIVATED)
        self._offers.send_rescinds()
        try:
            context.allocator.update_agent(agent.id, total=total, attributes=attributes)
        except AgentCapacityError as exc:
            log.warning("agent %s re-registered with a total its tasks do not fit in; keeping the old one: %s",
                        agent.id, exc)
            return
        agent.info = agent.info.replace(resources=info.resources, attributes=dict(info.attributes))
        self._keep_in_registry(agent)
        log.info("agent %s re-registered with resources %s and attributes %s", agent.id, info.resources,
                 clip(info.attributes))

    def _admit_reregistered(self, peer: bytes, msg: m.ReregisterAgent, returning: bool = False) -> None:
        """An agent this master does not know (it restarted or took over):
        admit it with the tasks it runs, and their frameworks as disconnected
        until they re-subscribe. A task's state is the one its update stream
        delivers next (``update_state``): a reconciliation answer must not
        overtake the updates still on their way. ``returning``: an agent the
        registry lists as unreachable (marked by an earlier leader, or not
        back in time after a failover): it is no longer, and connected
        partition-aware frameworks are told the states of its tasks."""
        context = self._context
        if returning:
            context.agents.forget_unreachable(msg.agent.id)
            context.registry.mark_reachable(msg.agent.id)
            context.counters["agents_reachable_again"] += 1
        # whose a framework is, is never the agent's to say: the registry knows, or the master's receipt
        # the agent kept with the framework's tasks (_reported_info); else nobody may take it (_check_bound).
        # Checked only when a framework is not known (after a failover the registry knows them all)
        known_infos: list[dict[str, FrameworkInfo]] = []   # (a functools.cache cost ~1.5 µs an agent)

        def infos() -> dict[str, FrameworkInfo]:
            if not known_infos:
                known_infos.append({info.id: self._frameworks.reported_info(info) for info in msg.frameworks if info.id})
            return known_infos[0]

        self._frameworks.bind_reported(msg.frameworks)
        holding: dict[str, list[Resources]] = {}
        # the tasks its frameworks were told had ended though this master did not know them (a
        # reconciliation's TASK_LOST or TASK_GONE while the agent was away or not back yet after a
        # failover) — unless the framework launched the id anew on this very agent: tasks of the past,
        # and what each still holds (nothing if it ended). Found in the same pass (1,000,000 tasks after
        # a failover: a pass of their own cost ~2 µs an agent)
        doomed: dict[tuple[str, str], Resources] = {}
        unknown: set[str] = set()   # frameworks of tasks skipped: not known (after this pass, none of its records)
        agent_id = msg.agent.id
        removed, frameworks = context.frameworks.removed, context.frameworks.records  # hot: 100k tasks per failover
        for running in msg.tasks:
            framework_id = running.framework_id
            record = frameworks.get(framework_id)
            if record is not None and record.pronounced_ended and running.task.task_id in record.pronounced_ended:
                relaunched = record.tasks.get(running.task.task_id)   # launched anew, perhaps elsewhere
                if relaunched is None or relaunched.agent_id != agent_id:
                    if running.state in TERMINAL_STATES:
                        doomed[framework_id, running.task.task_id] = EMPTY
                    else:
                        doomed[framework_id, running.task.task_id] = running.task.resources
                        holding.setdefault(framework_id, []).append(running.task.resources)
                    continue
            if framework_id in removed or running.state in TERMINAL_STATES:
                if record is None:
                    unknown.add(framework_id)
                    if framework_id not in removed:
                        self._frameworks.remember_reported(msg.agent.id, running, infos())  # it may subscribe
                continue
            if record is None:
                self.settle()   # the agents admitted before are booked in the allocator before it knows the framework
                self._frameworks.adopt(infos().get(framework_id) or FrameworkInfo(
                    name="(recovered)", id=framework_id), reported=True)
            held = holding.get(framework_id)   # (not setdefault: a list made a task for nothing)
            if held is None:
                holding[framework_id] = [running.task.resources]
            else:
                held.append(running.task.resources)
        executors: dict[tuple[str, str], ExecutorInfo] = {}
        if msg.executors:   # (most agents run none: no comprehension, no loop)
            executors = {(e.framework_id, e.executor.executor_id): e.executor for e in msg.executors
                         if e.framework_id not in context.frameworks.removed}
            for (framework_id, _), executor in executors.items():   # an idle executor's framework lives on too
                if framework_id not in context.frameworks.records:
                    self.settle()   # (as above)
                    self._frameworks.adopt(infos().get(framework_id) or FrameworkInfo(name="(recovered)",
                                                                                    id=framework_id), reported=True)
                holding.setdefault(framework_id, []).append(executor.resources)
        book_later = not returning and self.defer_task_records
        booking = self._admit(peer, msg.agent, self._sums(holding), msg.http_address, book_later)
        if booking is not None:
            self._bookings.append(booking)
        agent = context.agents.records[msg.agent.id]
        if executors:
            agent.executors.update(executors)
        # frameworks still unknown now: a framework another agent makes known later (adopt) does not
        # make this agent's skipped tasks its records (as when they were made at once)
        batch = _PendingTasks(agent, msg.tasks, frozenset(fid for fid in unknown if fid not in frameworks)
                              if unknown else _NO_FRAMEWORKS, doomed, context.wall_clock(), context.clock.now(),
                              booking)
        if not book_later:
            self._enter_tasks(batch, returning)
        else:
            # made after the answer (settle): ~16 µs an agent of ten tasks off the path to the last answer
            self._pending.append(batch)
        if doomed:
            self._doom(peer, agent, doomed)
        log.info("agent %s re-registered (unknown before) with %d tasks", agent_id, len(msg.tasks))

    def _sums(self, holding: dict[str, list[Resources]]) -> dict[str, Resources]:
        """What each framework's tasks (and executors) on an agent hold:
        framework id -> the sum of its vectors. O(vectors)."""
        used: dict[str, Resources] = {}
        multiples = self._multiples
        for framework_id, items in holding.items():
            first, count = items[0], len(items)
            if count == 1:
                used[framework_id] = first
                continue
            # a framework's tasks on an agent mostly hold the codec's one parse of their resources: their
            # sum is that vector's multiple, kept here (a call of Resources.sum a framework was ~0.75 us,
            # these tests ~0.35); the entry holds the vector its key's id names, so the id is still its
            key = (id(first), count)
            known = multiples.get(key)
            if known is not None and known[0] is first and items.count(first) == count:
                used[framework_id] = known[1]
                continue
            used[framework_id] = total = Resources.sum(items)
            if items.count(first) == count:   # (count equal vectors: their sum is one's multiple too)
                if len(multiples) >= _MULTIPLES_KEPT:
                    multiples.clear()
                multiples[key] = (first, total)
        return used

    #: whether a re-registered agent's task records are made after the answer (settle) rather than at
    #: once: ~17 us an agent of ten tasks off the path to the answer. failover30i's policy (the loop
    #: woken at once while records were pending) made the storm take more turns over the wire; with the
    #: loop waiting for frames until the re-admissions pause (settle_due) the storm's turns are those
    #: of the records made at once (docs/performance.rst, "Stop 15: failover, the storm's policy");
    #: the tests hold the two to the same state
    defer_task_records = True

    def settle(self, most: int | None = None) -> int:
        """The gate: make the task records of the agents re-registered since
        the last call, in the order they were admitted (``most``: of the
        first ``most`` agents only — the runtime's idle turns; a reader
        never passes it). Every reader of a
        framework's or an agent's tasks calls it first (every message but a
        re-registration or a PONG, the tick's parts that read tasks, the
        operator's calls, the state snapshot, ``MasterCore.frameworks`` and
        ``agents``); the runtime calls it at the end of a turn with nothing
        left waiting, after the answers went out, once the re-admissions
        paused (:meth:`settle_due`). What each admission
        decided (the allocator's holdings, the tasks of the past, the
        frameworks adopted) was done when the agent was admitted; the
        records made here are those the admission would have made then.
        O(tasks pending); O(1) when none are. Returns the number of agents
        whose records it made."""
        made = 0
        if most is not None:
            batches = self._pending[:most]
            del self._pending[:most]
            for batch in batches:
                self._settle_batch(batch)
            return len(batches)
        while self._pending:
            batches, self._pending = self._pending, []
            for batch in batches:
                self._settle_batch(batch)
            made += len(batches)
        return made

    def _settle_batch(self, batch: _PendingTasks) -> None:
        bookings = self._bookings
        if bookings and bookings[0] is batch.booking:   # the allocator's books first, as at its admission
            self._context.allocator.book_agent(bookings.popleft())
        self._enter_tasks(batch, False)

    @property
    def bookings_pending(self) -> int:
        """Agents admitted that the allocator checked and has not booked yet (see :meth:`book`)."""
        return len(self._bookings)

    def book(self) -> None:
        """Book in the allocator every agent admitted that it has not booked
        yet, in the order they were admitted, their task records left for
        :meth:`settle`. The core calls it before the allocator's turn when
        some framework may be offered anything: until then no cycle offers
        anything, so the allocator's books wait with the records — off the
        path to the answers (failover30p: ~9 us an agent in one process) —
        and the offers made are those of agents booked at once. O(agents
        booked)."""
        bookings, book_agent = self._bookings, self._context.allocator.book_agent
        while bookings:
            book_agent(bookings.popleft())

    @property
    def tasks_pending(self) -> int:
        """Agents whose task records are not made yet (see :meth:`settle`)."""
        return len(self._pending)

    #: seconds without a re-admission before the runtime makes pending task records on its own
    #: (:meth:`settle_due`): while the storm lasts its turns wait for frames, not for records
    SETTLE_QUIET = 0.2

    def settle_due(self) -> float:
        """When the runtime may make the pending task records unasked: once
        no agent was re-admitted for :attr:`SETTLE_QUIET` seconds (a reader
        makes them at once whenever it comes); infinity when none are
        pending. While agents keep coming the loop waits for their frames, as
        it does with nothing pending. O(1)."""
        if not self._pending:
            return math.inf
        return self._pending[-1].launched + self.SETTLE_QUIET

    def _enter_tasks(self, batch: _PendingTasks, returning: bool) -> None:
        """The task records of an agent just admitted (``_admit_reregistered``'s
        second pass). O(its tasks)."""
        context = self._context
        frameworks = context.frameworks.records
        agent, doomed, unknown, now, launched = batch.agent, batch.doomed, batch.unknown, batch.wall, batch.launched
        agent_id = agent.id
        for running in batch.tasks:
            framework_id, task_id = running.framework_id, running.task.task_id
            record = frameworks.get(framework_id)
            if record is None or (doomed and (framework_id, task_id) in doomed) or (unknown and framework_id in unknown):
                continue
            delivered = running.update_state   # (_delivered_state, inlined: 1,000,000 tasks after a failover)
            if delivered not in _STATES:
                delivered = running.state
            # its status is made when first read (TaskRecord.status): most never are before it changes
            status: ReportedStatus = (task_id, delivered, agent_id, framework_id, now, running.task.labels,
                                      running.healthy)
            known = record.tasks.get(task_id)
            if known is not None and known.agent_id != agent_id:
                # another agent reported it too: the latest report stands, and the other agent's books
                # no longer list it (its removal must not end a task it does not run)
                earlier = context.agents.get(known.agent_id)
                if earlier is not None:
                    earlier.tasks.discard((framework_id, task_id))
            # an ended task holds nothing; its updates are on their way (BIRTHS of the lifecycle table)
            phase = Phase.LIVE if running.state not in TERMINAL_STATES else \
                Phase.ENDED if delivered in TERMINAL_STATES else Phase.ENDING
            task = record.tasks[task_id] = TaskRecord(running.task, framework_id, agent_id, status, phase, launched)
            agent.tasks.add((framework_id, task_id))
            if returning and record.connected and record.info.partition_aware and delivered not in TERMINAL_STATES:
                context.out.send_framework(record, m.Update(task.status.replace(
                    message="its agent re-registered after being unreachable",
                    reason="REASON_AGENT_REREGISTERED")))

    def _doom(self, peer: bytes, agent: AgentRecord, doomed: dict[tuple[str, str], Resources]) -> None:
        """Tasks of the past on an agent just admitted (their frameworks were
        told they ended): killed if they still run; their updates are
        acknowledged and never forwarded (one terminal state per task), and
        what they hold goes back once they end. O(doomed)."""
        context = self._context
        for (framework_id, task_id), resources in sorted(doomed.items()):
            agent.doomed[(framework_id, task_id)] = resources   # EMPTY: it ended, its update is on its way
            if resources:
                context.counters["tasks_killed_on_return"] += 1
                context.out.send(peer, m.KillTask(framework_id, task_id))

    def _readmit_unreachable(self, peer: bytes, msg: m.ReregisterAgent, unreachable: UnreachableAgent) -> None:
        """An agent this master marked unreachable re-registers (Mesos's
        _reregisterSlave of an unreachable agent): admitted again under its
        id. Its partition-aware tasks come back — their frameworks are told
        the state the update stream delivers next (TASK_RUNNING, ...; a task
        that ended meanwhile: its terminal update follows), and TASK_GONE
        for those it no longer has (TASK_DROPPED if it never confirmed them). Tasks whose frameworks were told
        TASK_LOST are killed; nothing more is said of them (one terminal
        state per task). O(its tasks)."""
        context = self._context
        agent_id = msg.agent.id
        context.agents.forget_unreachable(agent_id)
        context.registry.mark_reachable(agent_id)
        context.counters["agents_reachable_again"] += 1
        holding: dict[str, list[Resources]] = {}
        back: list[tuple[FrameworkRecord, TaskRecord, m.RunningTask]] = []
        doomed: dict[tuple[str, str], Resources] = {}
        shut_down: set[str] = set()
        for running in msg.tasks:
            framework_id, task_id = running.framework_id, running.task.task_id
            record = context.frameworks.records.get(framework_id)
            if record is None:   # removed (or never known): the agent shuts it down
                shut_down.add(framework_id)
                continue
            task = record.tasks.get(task_id)
            alive = running.state not in TERMINAL_STATES
            if task is not None and task.agent_id == agent_id:
                back.append((record, task, running))
            else:   # its framework was told it ended (TASK_LOST): a task of the past
                doomed[(framework_id, task_id)] = running.task.resources if alive else EMPTY
            if alive:
                holding.setdefault(framework_id, []).append(running.task.resources)
        executors = {(e.framework_id, e.executor.executor_id): e.executor for e in msg.executors
                     if e.framework_id in context.frameworks.records}
        for (framework_id, _), executor in executors.items():
            holding.setdefault(framework_id, []).append(executor.resources)
        self._admit(peer, msg.agent, self._sums(holding), msg.http_address)
        agent = context.agents.records[agent_id]
        agent.executors.update(executors)
        wall = context.wall_clock()
        reported = set()
        for record, task, running in back:
            key = (record.id, task.id)
            reported.add(key)
            agent.tasks.add(key)
            event = Event.REPORTED_ENDED if running.state in TERMINAL_STATES else Event.REPORTED
            actions = process(task, event)
            self._delivery.end(record, task, actions, "", "", "")   # CONFIRM
            delivered = _delivered_state(running)
            if Action.TELL in actions and delivered not in TERMINAL_STATES:
                self._delivery.tell_status(record, task, new_status(
                    task.id, delivered, agent_id=agent_id, framework_id=record.id,
                    message="its agent re-registered after being unreachable", reason="REASON_AGENT_REREGISTERED",
                    timestamp=wall, labels=task.info.labels, healthy=running.healthy))
        for record, task in self.unreachable_tasks(unreachable):
            if (record.id, task.id) in reported:
                continue
            # the agent forgot it: an ended one is complete (the acknowledgement would go nowhere), another one
            # is gone — or dropped if never confirmed: its launch did not reach the agent (as for a known agent)
            state = TaskState.GONE if task.confirmed else TaskState.DROPPED
            actions = process(task, Event.NOT_REPORTED)
            if Action.END in actions:
                context.counters["tasks_unreported"] += 1
            self._delivery.end(record, task, actions, state, "REASON_AGENT_REREGISTERED",
                               "its agent re-registered without it")
        self._doom(peer, agent, doomed)
        for framework_id in sorted(shut_down):
            context.out.send(peer, m.ShutdownFramework(framework_id))
        log.warning("agent %s (%s) re-registered after being unreachable for %.0fs: %d task(s) back, %d killed",
                    agent_id, clip(msg.agent.hostname), wall - unreachable.since, len(back), len(doomed))

    def _admit(self, peer: bytes, info: AgentInfo, used: dict[str, Resources], http_address: str = "",
               book_later: bool = False) -> CheckedAgent | None:
        """Admit an agent checked already, holding ``used`` (framework id ->
        what its tasks hold there), and answer it. ``book_later``: the
        allocator's checks now (a refusal raises before anything changes),
        its books later — the agent is returned for :meth:`settle` to book
        (a drained agent is booked now: it is deactivated at once)."""
        context = self._context
        allocator = context.allocator
        book_now = not book_later or info.id in context.agents.drains
        if book_now:
            self.settle()   # the agents admitted before it are booked first: the allocator's order is kept
        checked = allocator.check_agent(info.id, info.resources, info.attributes, info.hostname, used)
        if book_now:
            allocator.book_agent(checked)
        expected = info.id in context.agents.expected
        agent = AgentRecord(info=info, peer=peer, registered_at=context.clock.now(), http_address=http_address)
        context.agents.add(agent, context.owner(peer))
        if expected:
            self._reconciliation.release_held(info.id)
        if info.id in context.agents.drains:   # drained before a failover (the registry kept it): still no offers
            context.allocator.deactivate_agent(info.id)
        self._keep_in_registry(agent)
        context.out.send(peer, self.registered_message(info))
        return None if book_now else checked

    def _keep_in_registry(self, agent: AgentRecord) -> None:
        """The registry admits ``agent`` as it is now. An agent that
        re-registers as the registry holds it (every agent after a failover)
        changes nothing: nothing is written, and its AGENT_REGISTERED is not
        held for a write (as Mesos, which writes nothing for an agent its
        registry lists). O(1)."""
        context = self._context
        if context.registry.agents.get(agent.id) != agent.info:
            context.registry.admit_agent(agent.info)
            context.registry_changed()
        agent.registry_change = context.registry_changes

    def _lose_unreported_tasks(self, agent: AgentRecord, reported: list[m.RunningTask],
                               same_incarnation: bool = False) -> None:
        """As Mesos did before it reconciled through the agent: a task the
        agent does not report ends TASK_LOST (TASK_DROPPED for a
        partition-aware framework) — it never reached the agent, or the agent
        lost it; those it reports are confirmed.

        ``same_incarnation``: the report is a newer one of the agent process
        admitted before (:meth:`_repeated_report` took the older ones). That
        agent process forgets no task silently — one it had it runs, or
        reports ended until the master, which has its end by then,
        acknowledges it — so a running or launched task (PENDING, LIVE) it
        does not report was launched here after the report was made:
        confirmed since (the report was delayed past the task's updates), or
        its RUN_TASK is still on its way or was lost (the launch is retried,
        and the task ended after ``task_launch_attempts``, by the launch
        timeout). Those are kept, counted (``unreported_tasks_kept``); a task
        whose end the agent reported (ENDING) completes as before. Mesos's
        master asks the agent about such tasks instead
        (``reconcileKnownSlave``)."""
        context = self._context
        still_running = {(r.framework_id, r.task.task_id) for r in reported}
        kept = 0
        for framework_id, task_id in sorted(agent.tasks - still_running):
            found = context.frameworks.task(framework_id, task_id)
            if found is None:
                continue
            record, task = found
            if same_incarnation and task.phase in HOLDING:
                kept += 1
                continue
            actions = process(task, Event.NOT_REPORTED)   # the agent stays: what the task held is free again
            if Action.END in actions:
                context.counters["tasks_unreported"] += 1
            self._delivery.end(record, task, actions, TaskState.DROPPED if record.info.partition_aware
                               else TaskState.LOST, "REASON_RECONCILIATION", "the agent re-registered without this task")
        for framework_id, task_id in still_running:
            found = context.frameworks.task(framework_id, task_id)
            if found is not None and found[1].agent_id == agent.id:
                self._delivery.end(found[0], found[1], process(found[1], Event.REPORTED), "", "", "")   # CONFIRM
        if kept:
            context.counters["unreported_tasks_kept"] += kept
            log.info("agent %s re-registered without %d task(s) launched after its report was made: kept",
                     agent.id, kept)

    def _forget_unreported_doomed(self, agent: AgentRecord, reported: list[m.RunningTask]) -> None:
        """A known agent re-registered without tasks it was told to kill: they ended."""
        if agent.doomed:
            listed = {(r.framework_id, r.task.task_id) for r in reported}
            for key in [key for key in agent.doomed if key not in listed]:
                self._delivery.free_doomed(agent, key)

    def executor_exited(self, peer: bytes, msg: m.ExecutorExited, principal: str | None) -> None:
        """A custom executor's process ended: its resources are free again."""
        context = self._context
        agent = context.agent_for(peer)
        if agent is None:
            return
        executor = agent.executors.pop((msg.framework_id, msg.executor_id), None)
        if executor is None:
            return
        log.info("executor %s of framework %s on agent %s exited: %s", clip(msg.executor_id), msg.framework_id,
                 agent.id, clip(msg.message))
        self._recover_executor(agent, msg.framework_id, executor)
        record = context.frameworks.get(msg.framework_id)
        if record is not None and record.connected:   # its executor_lost (Mesos's FAILURE with an executor id)
            context.out.send_framework(record, m.Failure(agent.id, msg.message, executor_id=msg.executor_id,
                                                         status=msg.status))

    def _recover_executor(self, agent: AgentRecord, framework_id: str, executor: ExecutorInfo) -> None:
        context = self._context
        if framework_id not in context.frameworks.records or not executor.resources:
            return   # a removed framework's allocation went with it
        try:
            context.allocator.recover_resources(framework_id, agent.id, executor.resources)
        except MesoslikeError:  # a bookkeeping bug must not take the master down
            log.exception("recovering the resources of executor %s failed", clip(executor.executor_id))

    def _reconcile_executors(self, agent: AgentRecord, reported: list[m.RunningExecutor]) -> None:
        """A known agent re-registered: the executors it no longer runs free
        what they held (their EXECUTOR_EXITED may have been lost)."""
        still = {(e.framework_id, e.executor.executor_id) for e in reported}
        for key in sorted(set(agent.executors) - still):
            self._recover_executor(agent, key[0], agent.executors.pop(key))

    def pong(self, peer: bytes, msg: m.Pong, principal: str | None) -> None:
        context = self._context
        agent = context.agent_for(peer)
        if agent is not None:
            if msg.usage or agent.usage:
                self.settle()   # the usage kept is of the tasks it runs
                agent.usage = {(u.framework_id, u.task_id): u for u in msg.usage if (u.framework_id, u.task_id)
                               in agent.tasks}

    def unregister(self, peer: bytes, msg: m.UnregisterAgent, principal: str | None) -> None:
        """The agent leaves for good (drained): removed now, not after the
        ping timeouts. Its tasks ended already; any that did not are lost."""
        context = self._context
        agent = context.agent_for(peer)
        if agent is None or agent.id != msg.agent_id:
            return
        self.remove(agent, f"it unregistered ({msg.reason or 'no reason given'})", shutdown=False)

    # ------------------------------------------------------------ liveness
    def _start_ping_sweep(self) -> None:
        context = self._context
        for agent_id in sorted(context.agents.expected & context.agents.earlier_peers.keys()):
            # an agent this core does not know yet, on a connection an earlier core of this process
            # knew: it believes it is registered, and would only notice after the ping silence (as
            # Mesos's PingSlaveMessage.connected = false, it re-registers at once)
            context.out.send(context.agents.earlier_peers[agent_id], m.Ping(agent_id, connected=False))
        self._sweep = iter(list(context.agents.records.values()))

    def _ping(self) -> None:
        """Ping the next PING_CHUNK agents of the sweep (an agent removed
        since the sweep began is skipped); at its end, mark unreachable those
        whose turn came."""
        context = self._context
        assert self._sweep is not None
        chunk = list(itertools.islice(self._sweep, PING_CHUNK))
        if len(chunk) < PING_CHUNK:
            self._sweep = None
        records = context.agents.records
        for agent in chunk:
            if records.get(agent.id) is not agent:
                continue   # removed (or replaced) since the sweep began
            if agent.pings_unanswered >= context.config.max_agent_ping_timeouts:
                if agent.id not in context.agents.removals:
                    context.agents.removals.schedule(agent.id, f"{agent.pings_unanswered} pings unanswered")
                    if context.agents.removals.limit is not None:
                        log.warning("agent %s (%s) failed its health checks: marked unreachable in its turn "
                                    "(agent_removal_rate_limit %s, %d waiting)", agent.id,
                                    clip(agent.info.hostname), context.config.agent_removal_rate_limit,
                                    len(context.agents.removals))
                if context.agents.removals.limit is None:
                    continue   # marked below, at once
            agent.pings_unanswered += 1   # pinged on while it waits for its turn: an answer keeps it
            context.out.send(agent.peer, m.Ping(agent.id))
        if self._sweep is None:
            self._mark_due_unreachable(context.clock.now())

    def _mark_due_unreachable(self, now: float) -> None:
        """Mark unreachable the agents whose turn has come (all at once
        without agent_removal_rate_limit)."""
        context = self._context
        for agent_id, why in context.agents.removals.due(now):
            agent = context.agents.records.get(agent_id)
            if agent is not None and agent.pings_unanswered >= context.config.max_agent_ping_timeouts:
                self._mark_unreachable(agent, why)

    def heard_from(self, agent: AgentRecord) -> None:
        """A message from the agent: it answers its pings; a removal it waits
        for is called off (Mesos's master does the same)."""
        context = self._context
        agent.pings_unanswered = 0
        if context.agents.removals and context.agents.removals.cancel(agent.id):
            context.counters["agent_removals_canceled"] += 1
            log.warning("agent %s (%s) answered before its turn to be marked unreachable: it stays", agent.id,
                        clip(agent.info.hostname))

    def check_expected(self, now: float) -> None:
        """Agents of the registry not back within ``agent_reregister_timeout``
        of the failover are marked unreachable, as Mesos's master does: they
        may still come back under their ids (their tasks with them)."""
        context = self._context
        if not context.agents.expected or now < context.agents.expected_until:
            return
        since = context.wall_clock()
        for agent_id in sorted(context.agents.expected):
            log.warning("agent %s did not re-register within %.0fs after the failover: marked unreachable",
                        agent_id, context.config.agent_reregister_timeout)
            info = context.registry.agents.get(agent_id)
            unreachable = UnreachableAgent(agent_id, info.hostname if info else "", since,
                                           principal=info.principal if info else "", tasks_known=False)
            self._note_unreachable(unreachable)
            for record in context.frameworks.records.values():
                if record.connected:
                    context.out.send_framework(record, m.Failure(agent_id, "did not re-register after a failover"))
        context.agents.expected.clear()
        self._reconciliation.release_held("")

    def _note_unreachable(self, agent: UnreachableAgent) -> None:
        context = self._context
        context.agents.keep_unreachable(agent)
        context.registry.mark_unreachable(agent.id, agent.entry())
        context.registry_changed()
        context.counters["agents_unreachable"] += 1

    # ------------------------------------------------------------ removal
    def remove(self, agent: AgentRecord, why: str, shutdown: bool = True, gone: str = TaskState.GONE,
                      reason: str = "REASON_AGENT_REMOVED") -> None:
        """The agent is gone for good (it unregistered, or the operator
        marked it gone): its tasks not ended end ``gone`` (TASK_LOST for
        frameworks that are not partition-aware), and it may not come back
        under its id."""
        self.settle()
        context = self._context
        log.warning("removing agent %s (%s): %s", agent.id, clip(agent.info.hostname), why)
        for framework_id, task_id in sorted(agent.tasks):
            found = context.frameworks.task(framework_id, task_id)
            if found is not None:   # the agent's removal returns what its tasks held
                record, task = found
                self._delivery.end(record, task, process(task, Event.AGENT_REMOVED),
                                   gone if record.info.partition_aware else TaskState.LOST, reason,
                                   f"agent {agent.id} removed: {why}")
        self._forget(agent, why)
        if shutdown:  # an agent that left on its own needs no telling
            context.out.send(agent.peer, m.ShutdownAgent(why))
        context.agents.removed.add(agent.id)
        context.registry.remove_agent(agent.id)
        context.registry_changed()
        context.counters["agents_removed"] += 1

    def _forget(self, agent: AgentRecord, why: str) -> None:
        """Take a registered agent out of the allocator and the soft state;
        its offers are rescinded and the frameworks told (AGENT_LOST)."""
        context = self._context
        context.allocator.remove_agent(agent.id)
        self._offers.send_rescinds()
        for record in context.frameworks.records.values():
            if record.connected:
                context.out.send_framework(record, m.Failure(agent.id, why))
        context.agents.forget(agent)

    # ---------------------------------------------------------- partitions
    def _mark_unreachable(self, agent: AgentRecord, why: str) -> None:
        """The agent failed its health checks (Mesos's markUnreachable): out
        of the allocator and the registered agents, into the registry's
        unreachable list. Tasks of partition-aware frameworks become
        TASK_UNREACHABLE and stay known (they come back with the agent);
        the others end TASK_LOST. It may re-register under its id.
        O(its tasks + frameworks)."""
        self.settle()
        context = self._context
        log.warning("agent %s (%s) marked unreachable: %s", agent.id, clip(agent.info.hostname), why)
        since = context.wall_clock()
        kept: set[tuple[str, str]] = set()
        for framework_id, task_id in sorted(agent.tasks):
            found = context.frameworks.task(framework_id, task_id)
            if found is None:
                continue
            record, task = found   # the agent's removal returns what its tasks held
            actions = process(task, Event.AGENT_UNREACHABLE, aware=record.info.partition_aware)
            if task.phase is not Phase.DONE:
                kept.add((framework_id, task_id))  # out of reach, or ended: its acknowledgement waits for the agent
            if Action.TELL in actions:
                self._delivery.tell_status(record, task, new_status(
                    task.id, TaskState.UNREACHABLE, agent_id=agent.id, framework_id=record.id,
                    message=f"agent {agent.id} is unreachable: {why}", reason="REASON_AGENT_REMOVED",
                    timestamp=since, labels=task.info.labels, healthy=task.status.healthy))
            self._delivery.end(record, task, actions, TaskState.LOST, "REASON_AGENT_REMOVED",
                               f"agent {agent.id} removed: {why}")
        self._forget(agent, why)
        self._note_unreachable(UnreachableAgent(agent.id, agent.info.hostname, since, kept,
                                                principal=agent.info.principal))
        context.counters["agents_removed"] += 1

    def unreachable_tasks(self, unreachable: UnreachableAgent) -> list[tuple[FrameworkRecord, TaskRecord]]:
        """The tasks still on an unreachable agent (TASK_UNREACHABLE, or ended and not acknowledged)."""
        self.settle()
        context = self._context
        found = [context.frameworks.task(*key) for key in sorted(unreachable.tasks)]
        return [(record, task) for record, task in filter(None, found) if task.agent_id == unreachable.id]

    def drop_unreachable(self, unreachable: UnreachableAgent, state: str, reason: str, why: str) -> None:
        """An unreachable agent is gone for good: its TASK_UNREACHABLE tasks
        end ``state``, its ended tasks are done with, and it may not come
        back under its id (it is told to shut down if it does)."""
        self.settle()
        context = self._context
        context.agents.forget_unreachable(unreachable.id)
        for record, task in self.unreachable_tasks(unreachable):   # an ended one's acknowledgement would go nowhere
            self._delivery.end(record, task, process(task, Event.AGENT_FORGOTTEN), state, reason, why)
        context.agents.removed.add(unreachable.id)
        context.registry.remove_agent(unreachable.id)
        context.registry_changed()

    def _forget_unreachable_agents(self) -> None:
        """Mesos's registry GC: unreachable agents beyond
        ``registry_max_agent_count`` (the oldest) or marked more than
        ``registry_max_agent_age`` ago are gone: their partition-aware tasks
        end TASK_GONE. O(unreachable agents)."""
        self.settle()
        context = self._context
        config = context.config
        for agent_id in agents_to_forget(context.registry.unreachable, context.wall_clock(), config.registry_max_agent_age,
                                         config.registry_max_agent_count):
            unreachable = context.agents.unreachable.get(agent_id)
            if unreachable is None:  # pragma: no cover - the registry and the core agree
                context.registry.remove_agent(agent_id)
                continue
            why = (f"agent {agent_id} unreachable since {unreachable.since:.0f} is forgotten (registry_max_agent_age "
                   f"{config.registry_max_agent_age:g}s, registry_max_agent_count {config.registry_max_agent_count})")
            log.warning("%s", why)
            self.drop_unreachable(unreachable, TaskState.GONE, "REASON_AGENT_REMOVED", why)
            context.counters["unreachable_agents_forgotten"] += 1


#: every task state, for a test in O(1) (TaskState.ALL is a tuple)
_STATES = frozenset(TaskState.ALL)


#: a batch's unknown frameworks when there are none (nearly every agent's)
_NO_FRAMEWORKS: frozenset[str] = frozenset()


class _PendingTasks(NamedTuple):
    """A re-registered agent's tasks whose records :meth:`AgentLifecycle.settle` makes."""
    agent: AgentRecord
    tasks: list[m.RunningTask]
    #: frameworks none of whose tasks here become records (not known when the agent was admitted)
    unknown: frozenset[str]
    #: the tasks of the past (AgentRecord.doomed): no record
    doomed: dict[tuple[str, str], Resources]
    #: the wall clock and the clock when it was admitted (the records' status time and launch time)
    wall: float
    launched: float
    #: the agent as the allocator checked it at admission, booked with the records (None: booked then)
    booking: CheckedAgent | None = None


def _incarnation(msg: m.ReregisterAgent) -> str:
    """The agent incarnation a re-registration names ("": none, or one longer than the master keeps)."""
    return msg.incarnation if len(msg.incarnation) <= MAX_INCARNATION else ""


def _delivered_state(running: m.RunningTask) -> str:
    """What the framework of a task an agent lists hears next (or has heard last)."""
    return running.update_state if running.update_state in _STATES else running.state


def _agent_problem(info: AgentInfo) -> str | None:
    """Why the master will not keep ``info`` (fields longer, or attributes
    more, than it stores), or None."""
    for what, value in (("the id", info.id), ("the hostname", info.hostname)):
        problem = text_problem(what, value)
        if problem is not None:
            return problem
    if len(info.attributes) > MAX_ATTRIBUTES:
        return f"{len(info.attributes)} attributes are more than {MAX_ATTRIBUTES}"
    for key, value in info.attributes.items():
        problem = text_problem("an attribute", key) or text_problem("an attribute's value", value)
        if problem is not None:
            return problem
    return None
