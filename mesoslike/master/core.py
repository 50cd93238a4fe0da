"""The master's brain, sans I/O: messages and time in, messages out.

``MasterCore`` is organised as Mesos's master is: one entry point per input
(``on_message(peer, message, principal)``, ``tick()``, the operator's
operations) that dispatches to the part whose business it is, and one
command buffer (:class:`~mesoslike.master.outbox.Outbox`) whose
:class:`Send` commands the runtime carries out. The parts share a
:class:`~mesoslike.master.context.CoreContext`:

- the books — :class:`~mesoslike.master.framework_book.FrameworkBook` and
  :class:`~mesoslike.master.agent_book.AgentBook` — hold the soft state and
  guard its invariants;
- :class:`~mesoslike.master.frameworks.FrameworkLifecycle` and
  :class:`~mesoslike.master.agents.AgentLifecycle` move frameworks and agents
  through their lives (subscription, registration, liveness, partitions,
  removal);
- :class:`~mesoslike.master.offers.OfferDesk` sends and takes back offers;
  :mod:`~mesoslike.master.planner` plans an ACCEPT (pure) and
  :class:`~mesoslike.master.launches.Launches` carries the plan out;
- :class:`~mesoslike.master.delivery.UpdateDelivery` applies and forwards
  status updates and acknowledgements (each task's delivery follows
  :mod:`~mesoslike.master.task_lifecycle`'s table);
- :class:`~mesoslike.master.reconciliation.Reconciliation` answers RECONCILE;
- :class:`~mesoslike.master.operator_operations.OperatorOperations` carries
  out the operator's operations; :class:`~mesoslike.master.preempting.Preempting`
  runs fair-share preemption.

The core never touches a socket and reads time only from the injected
clock. The principal a message came from travels with it as a value (the
runtime knows it from the peer's key). A peer's bad or out-of-place message
gets an ``ERROR`` reply and changes nothing; the master never crashes on
what a peer sends.
"""

from __future__ import annotations

import logging
import random
from typing import Callable, Mapping, Sequence

from mesoslike.acl import Credentials, Refused
from mesoslike.allocator import HierarchicalAllocator
from mesoslike.clock import Clock
from mesoslike.errors import MesoslikeError
from mesoslike.master.agent_book import AgentBook
from mesoslike.master.agents import AgentLifecycle
from mesoslike.master.context import CoreContext
from mesoslike.master.delivery import UpdateDelivery
from mesoslike.master.framework_book import FrameworkBook
from mesoslike.master.frameworks import FrameworkLifecycle
from mesoslike.master.history import History
from mesoslike.master.launches import Launches
from mesoslike.master.offers import OfferDesk
from mesoslike.master.operations import DRAINED, DRAINING, DrainInfo
from mesoslike.master.operator_operations import OperatorOperations
from mesoslike.master.outbox import MAX_ERROR_TEXT, Send
from mesoslike.master.partitions import UnreachableAgent
from mesoslike.master.preempting import Preempting
from mesoslike.master.preemption import FairSharePreemption
from mesoslike.master.reconciliation import Reconciliation
from mesoslike.master.records import AgentRecord, FrameworkRecord, Holdings, MasterConfig, clip
from mesoslike.master.registry import Registry
from mesoslike.master.roles import RolesConfig
from mesoslike.master.task_lifecycle import Phase
from mesoslike.observations import Histogram
from mesoslike.wire import MasterInfo
from mesoslike.wire import messages as m
from mesoslike.wire.batching import BATCH_TYPES, unbatched

__all__ = ["MasterCore", "Send", "MAX_ERROR_TEXT"]

log = logging.getLogger("mesoslike.master")

#: a message handler: (the sender's connection, the message of its type, its principal)
Handler = Callable[..., None]


class MasterCore:
    """The leading master's state machine (see the module docstring).

    Complexity: a message costs O(its size) plus the allocator's work; a tick
    sweeps agents once per ``ping_interval`` and frameworks once per second.
    """

    def __init__(self, clock: Clock, info: MasterInfo, config: MasterConfig | None = None,
                 rng: random.Random | None = None, registry: Registry | None = None,
                 wall_clock: Callable[[], float] | None = None,
                 agent_peers: Mapping[str, bytes] | None = None, credentials: Credentials | None = None,
                 receipt_key: bytes | None = None, term: int = 1) -> None:
        context = self.context = CoreContext(
            clock, info, (config or MasterConfig()).validate(), rng or random.Random(0), registry or Registry(),
            wall_clock or clock.now, credentials, receipt_key, agent_peers, term)
        self.clock = clock
        self.info = info
        self.config = context.config
        self.credentials = credentials
        self.framework_book: FrameworkBook = context.frameworks
        self.agent_book: AgentBook = context.agents
        self.preempting = Preempting(context)
        self.offer_desk = OfferDesk(context)
        self.delivery = UpdateDelivery(context, self.preempting)
        self.reconciliation = Reconciliation(context)
        self.launches = Launches(context, self.offer_desk, self.delivery)
        self.framework_lifecycle = FrameworkLifecycle(context, self.reconciliation)
        self.agent_lifecycle = AgentLifecycle(context, self.framework_lifecycle, self.delivery, self.reconciliation,
                                              self.offer_desk)
        self.operations = OperatorOperations(context, self.framework_lifecycle, self.agent_lifecycle, self.launches,
                                             self.offer_desk)
        #: the roles file in force, set by the runtime
        self.roles_config: RolesConfig | None = None
        frameworks, agents = self.framework_lifecycle, self.agent_lifecycle
        self._handlers: dict[type, Handler] = {
            m.Subscribe: frameworks.subscribe, m.Teardown: frameworks.teardown,
            m.UpdateFramework: frameworks.update_framework,
            m.Accept: self.launches.accept, m.Kill: self.launches.kill,
            m.ShutdownExecutor: self.launches.shutdown_executor,
            m.Decline: self.offer_desk.decline, m.Revive: self.offer_desk.revive,
            m.Suppress: self.offer_desk.suppress,
            m.StatusUpdate: self.delivery.status_update, m.Acknowledge: self.delivery.acknowledge,
            m.FrameworkMessage: self.delivery.framework_message,
            m.Reconcile: self.reconciliation.reconcile,
            m.RegisterAgent: agents.register, m.ReregisterAgent: agents.reregister, m.Pong: agents.pong,
            m.UnregisterAgent: agents.unregister, m.ExecutorExited: agents.executor_exited,
            m.Heartbeat: _heartbeat,
            # (GET_STATE is the runtime's: it answers from a snapshot rendered off the loop, mesoslike.master.state)
        }
        #: batches handled whole (their items of one kind, in order, each checked and answered as if it came
        #: alone: the handler's loop, not one call a level down for each)
        self._batch_handlers: dict[type, Callable[[bytes, list], None]] = {
            m.StatusUpdates: self.delivery.status_updates, m.Acknowledgements: self.delivery.acknowledgements}
        #: the runtime's (batch_sends): whether a peer takes batches, for the sends of a batch's handling
        self._batches_to: Callable[[bytes], bool] | None = None
        self._recover(clock.now())

    def _recover(self, now: float) -> None:
        """Serve from a registry: its frameworks wait (disconnected) for the
        heartbeat silence plus their failover timeout
        (:meth:`FrameworkLifecycle.adopt`), its agents get
        ``agent_reregister_timeout`` to come back, its drains go on, weights
        and quota apply at once."""
        context, registry = self.context, self.context.registry
        for info in registry.frameworks.values():
            if info.id not in self.frameworks:
                self.framework_lifecycle.adopt(info)
        self.agent_lifecycle.recover(now)
        wall = context.wall_clock()
        for agent_id, record in sorted(registry.drains.items()):
            # a drain in progress goes on (its kills due as they were), also of an agent out of reach
            if agent_id in self.agent_book.expected or agent_id in self.agent_book.unreachable:
                self.agent_book.drains[agent_id] = DrainInfo.from_record(record, now, wall)
        if registry.weights:
            self.allocator.update_weights(registry.weights)
        for role, record in sorted(registry.quota.items()):
            try:
                self.allocator.update_quota(role, record.get("guarantee"), record.get("limit"))
            except MesoslikeError as exc:  # a record this master cannot apply: skipped, not fatal
                log.warning("registry: skipping the quota of role %r: %s", role, exc)
        if registry.agents or registry.frameworks:
            log.info("recovered a registry: %d agents expected back within %.0fs, %d frameworks",
                     len(self.agent_book.expected), self.config.agent_reregister_timeout, len(registry.frameworks))

    # ================================================================ inputs
    def on_message(self, peer: bytes, message: object, principal: str | None = None) -> list[Send]:
        """Handle one decoded message from ``peer``, who authenticated as
        ``principal`` (None: an anonymous cluster)."""
        out = self.context.out
        out.clear()
        self.context.counters["messages_received"] += 1
        if type(message) not in _TASKS_UNREAD:
            self.context.settle()   # it reads tasks (the gate: AgentLifecycle.settle)
        if type(message) in BATCH_TYPES:
            # each item as if it came alone, in order, with every check (docs/wire.rst, "Batching")
            if type(message) not in _ACCEPTED_BATCHES:
                out.error(peer, f"unexpected message {type(message).__name__} for a master")
            else:
                items = unbatched(message)
                whole = self._batch_handlers.get(type(message)) if items else None
                handler = self._handlers.get(type(items[0])) if items else None
                if whole is not None:   # the batch's handler: each item as if it came alone, a call a batch
                    self.delivery.batch_begun()
                    # its updates and acknowledgements out as batches, if the runtime batches (batch_sends;
                    # no item changes who is on a connection, nor whether it takes batches)
                    out.batches_to = self._batches_to
                    try:
                        whole(peer, items)
                    finally:
                        out.batches_to = None
                        self.delivery.batch_ended()
                elif handler is None:
                    for item in items:
                        self._handle(peer, item, principal)
                else:   # one kind of item: its handler looked up once, called here (a batch carries up to
                    self.delivery.batch_begun()   # MAX_BATCH: a call level less for each), each item as
                    try:                          # _handle's; the ended tasks' resources back at the end
                        for item in items:
                            try:
                                handler(peer, item, principal)
                            except MesoslikeError as exc:
                                out.error(peer, str(exc))
                            except Refused as exc:
                                self.context.refuse(peer, exc)
                    finally:
                        self.delivery.batch_ended()
        elif type(message) is m.Accept and self._batches_to is not None:
            # its launches out as RUN_TASKS already (Outbox.run_task), as a batch's updates are
            out.batches_to = self._batches_to
            try:
                self._handle(peer, message, principal)
            finally:
                out.batches_to = None
        else:
            self._handle(peer, message, principal)
            if isinstance(message, (m.Subscribe, m.RegisterAgent, m.ReregisterAgent)):
                self._note_batches(peer, message)
        self._note_heard(peer)
        return out.flush()

    def _handle(self, peer: bytes, message: object, principal: str | None) -> None:
        handler = self._handlers.get(type(message))
        if handler is None:
            self.context.out.error(peer, f"unexpected message {type(message).__name__} for a master")
            return
        try:
            handler(peer, message, principal)
        except MesoslikeError as exc:  # bad input from the peer: tell it, change nothing more
            self.context.out.error(peer, str(exc))
        except Refused as exc:  # the ACLs do not allow it: tell it (naming the permission), count it
            self.context.refuse(peer, exc)

    def _note_batches(self, peer: bytes, message: m.Subscribe | m.RegisterAgent | m.ReregisterAgent) -> None:
        """Whether the framework or agent now on ``peer`` takes batches (it
        says so in every SUBSCRIBE and registration)."""
        record: FrameworkRecord | AgentRecord | None
        record = self.framework_book.on(peer) if isinstance(message, m.Subscribe) else self.agent_book.on(peer)
        if record is not None:
            record.accepts_batches = message.accepts_batches

    def batch_sends(self) -> None:
        """The runtime batches what the core says (``wire.batching.batched``):
        the updates and acknowledgements that a STATUS_UPDATES or
        ACKNOWLEDGEMENTS batch makes the core send, and an ACCEPT's
        launches, come out batched already, as ``batched`` would make them (:class:`~mesoslike.master.outbox.Outbox`:
        one Send a batch, not one an item). What the messages say and their
        order on each connection do not change."""
        self._batches_to = self.accepts_batches

    def accepts_batches(self, peer: bytes) -> bool:
        """Whether ``peer`` is a framework's or an agent's connection that
        takes batch messages (the runtime batches what goes to it). O(1)."""
        framework = self.framework_book.on(peer)
        if framework is not None:
            return framework.accepts_batches
        agent = self.agent_book.on(peer)
        return agent is not None and agent.accepts_batches

    def on_retried_registration(self, peer: bytes, persisted: int | None = None) -> list[Send] | None:
        """``peer`` sent again, byte for byte, the registration this master
        already handled from it (the runtime recognises the frame): if the
        agent is still registered on that connection, answer
        AGENT_REGISTERED again and return the sends; otherwise None, and the
        caller decodes and handles the message as usual.

        Agents retry while the first answer is slow — after a failover most
        of them do. Handling a retry in full costs as much as the first
        attempt, and would mark tasks launched since the first attempt as
        lost, because the retry does not list them. ``persisted``: the
        registry changes the registry holds (None: all). While it does not
        hold the agent's admission yet, the retry is ignored (counted in
        ``registration_retries_ignored``), as Mesos ignores a re-registration
        already in progress: the answer held for the write goes out once it
        is done, and no second one after it. O(1).
        """
        agent = self.agent_book.on(peer)
        if agent is None:
            return None
        counters = self.context.counters
        counters["messages_received"] += 1
        counters["registration_retries"] += 1
        self.agent_lifecycle.heard_from(agent)
        if persisted is not None and agent.registry_change > persisted:
            counters["registration_retries_ignored"] += 1
            return []
        out = self.context.out
        out.clear()
        out.send(peer, self.agent_lifecycle.registered_message(agent.info))
        return out.flush()

    def on_connection_closed(self, peer: bytes) -> list[Send]:
        """The connection ``peer`` is gone (see :meth:`FrameworkLifecycle.connection_closed`)."""
        out = self.context.out
        out.clear()
        self.context.settle()
        self.framework_lifecycle.connection_closed(peer)
        return out.flush()

    def on_bad_frame(self, peer: bytes | None, error: Exception) -> list[Send]:
        """A frame that did not decode: answer ERROR (if we know who sent it)."""
        out = self.context.out
        out.clear()
        self.context.counters["bad_messages"] += 1
        log.warning("bad frame from %s: %s", clip(peer), clip(str(error)))
        if peer is not None:
            out.error(peer, f"bad message: {clip(str(error), MAX_ERROR_TEXT // 2)}")
        return out.flush()

    def tick(self) -> list[Send]:
        """Time-driven work: allocation, offer timeouts, rescinds, pings,
        heartbeats, failovers, and the next part of pending reconciliations.
        The runtime calls it once per loop turn, after the turn's messages."""
        out = self.context.out
        out.clear()
        now = self.clock.now()
        self.reconciliation.answer_waiting()   # a new turn's budget
        self.agent_lifecycle.tick(now)
        if self.framework_lifecycle.tick(now):
            self.agent_lifecycle.check_expected(now)
        self.preempting.tick(now)
        self.offer_desk.expire(now)
        self.launches.tick(now)
        if self.agent_book.drains:
            self.operations.check_drains(now)
        if self.agent_lifecycle.bookings_pending and self.allocator.offers_wanted():
            self.agent_lifecycle.book()   # the agents admitted are offered as if booked at once
        self.offer_desk.send(self.allocator.tick())
        self.offer_desk.send_rescinds()
        return out.flush()

    def next_wakeup(self) -> float:
        if self.reconciliation.busy:
            return self.clock.now()  # answers wait: the next turn sends more
        # task records pending (made after the answers): not now — once the re-admissions pause
        # (AgentLifecycle.settle_due), so the storm's turns wait for frames as they do without them
        if self.agent_lifecycle.bookings_pending and self.allocator.offers_wanted():
            return self.clock.now()   # the allocator would have them to allocate (booked in the tick)
        wake = min(self.allocator.next_wakeup(), self.agent_lifecycle.next_wakeup(),
                   self.agent_lifecycle.settle_due(),
                   self.framework_lifecycle.next_sweep(), self.offer_desk.next_expiry(),
                   self.launches.next_wakeup(), self.preempting.next_wakeup())
        if self.agent_book.drains:
            wake = min(wake, self.operations.drain_wakeup())
        return wake

    def _note_heard(self, peer: bytes) -> None:
        framework = self.framework_book.on(peer)
        if framework is not None:
            framework.last_heard = self.clock.now()
            return
        agent = self.agent_book.on(peer)
        if agent is not None:
            # any message answers the pings, as any message is a framework's
            # heartbeat: an agent launching 5,000 tasks sends their updates
            # long before it reads the PINGs queued behind the RUN_TASKs
            self.agent_lifecycle.heard_from(agent)

    # ============================================================= operator
    # docs/operations.rst. The operator's operations run on an HTTP thread
    # under the master's lock (mesoslike.master.operator); each returns what
    # to answer and the sends it causes. Bad input raises MesoslikeError
    # (NotFound, Conflict) and changes nothing.
    def _operate(self, operation: Callable[[], dict | None]) -> tuple[dict, list[Send]]:
        out = self.context.out
        out.clear()
        self.context.settle()
        return operation() or {}, out.flush()

    def update_weights(self, weights: dict[str, float]) -> list[Send]:
        """Set role weights (others keep theirs); persisted in the registry.
        Returns the rescinds the new weights cause. Raises
        :class:`MesoslikeError` (nothing changes) on a bad role or weight."""
        return self._operate(lambda: self.operations.update_weights(weights))[1]

    def update_quota(self, role: str, guarantee: str | None = None, limit: str | None = None) -> list[Send]:
        """Set (or, with neither, clear) a role's quota guarantee and limit
        (resource strings); persisted in the registry. Returns the rescinds
        the new quota causes. Raises :class:`MesoslikeError` (nothing
        changes) on bad input."""
        return self._operate(lambda: self.operations.update_quota(role, guarantee, limit))[1]

    def kill_task(self, task_id: str, framework_id: str | None = None) -> tuple[dict, list[Send]]:
        """See :meth:`OperatorOperations.kill_task`."""
        return self._operate(lambda: self.operations.kill_task(task_id, framework_id))

    def teardown_framework(self, framework_id: str) -> tuple[dict, list[Send]]:
        """See :meth:`OperatorOperations.teardown_framework`."""
        return self._operate(lambda: self.operations.teardown_framework(framework_id))

    def drain_agent(self, agent: str, grace: object = 0.0) -> tuple[dict, list[Send]]:
        """See :meth:`OperatorOperations.drain_agent`."""
        return self._operate(lambda: self.operations.drain_agent(agent, grace))

    def reactivate_agent(self, agent: str) -> tuple[dict, list[Send]]:
        """See :meth:`OperatorOperations.reactivate_agent`."""
        return self._operate(lambda: self.operations.reactivate_agent(agent))

    def reserve_resources(self, agent: str, resources: str, principal: str | None,
                          labels: Sequence[tuple[str, str]] = ()) -> tuple[dict, list[Send]]:
        """See :meth:`OperatorOperations.reserve_resources`."""
        return self._operate(lambda: self.operations.reserve_resources(agent, resources, principal, labels))

    def unreserve_resources(self, agent: str, resources: str, principal: str | None = None) -> tuple[dict, list[Send]]:
        """See :meth:`OperatorOperations.unreserve_resources`."""
        return self._operate(lambda: self.operations.unreserve_resources(agent, resources, principal))

    def mark_agent_gone(self, agent: str) -> tuple[dict, list[Send]]:
        """See :meth:`OperatorOperations.mark_agent_gone`."""
        return self._operate(lambda: self.operations.mark_agent_gone(agent))

    def set_preemption(self, settings: RolesConfig | None) -> None:
        """Turn fair-share preemption on, update it, or turn it off (see
        :meth:`Preempting.configure`). The runtime calls it whenever it
        applies the roles file."""
        self.preempting.configure(settings)

    # ================================================================ views
    @property
    def allocator(self) -> HierarchicalAllocator:
        return self.context.allocator

    @property
    def registry(self) -> Registry:
        """The hard state (the runtime persists it when ``registry_changes`` moved)."""
        return self.context.registry

    @property
    def registry_changes(self) -> int:
        return self.context.registry_changes

    @property
    def frameworks(self) -> dict[str, FrameworkRecord]:
        """The live frameworks by id (read only: change them through the core),
        every task record made (:meth:`settle`; call it under the master's lock)."""
        self.context.settle()
        return self.framework_book.records

    @property
    def agents(self) -> dict[str, AgentRecord]:
        """The registered agents by id (read only: change them through the core),
        every task record made (:meth:`settle`; call it under the master's lock)."""
        self.context.settle()
        return self.agent_book.records

    def settle(self, most: int | None = None) -> int:
        """Make the task records of agents re-registered since the last
        call (:meth:`AgentLifecycle.settle`, the gate every reader of tasks
        passes): the runtime calls it at the end of a turn with nothing left
        waiting, after the turn's answers went out, once no agent was
        re-admitted for a while (:meth:`AgentLifecycle.settle_due`; the loop
        does not wake for them before), for ``most`` agents at a
        time (a turn of 100,000 agents' records would be ~2 s). O(tasks
        pending). Returns the number of agents whose records it made."""
        return self.agent_lifecycle.settle(most)

    @property
    def removed_frameworks(self) -> set[str]:
        return self.framework_book.removed

    @property
    def removed_agents(self) -> set[str]:
        return self.agent_book.removed

    @property
    def unreachable(self) -> dict[str, UnreachableAgent]:
        return self.agent_book.unreachable

    @property
    def framework_owners(self) -> Holdings:
        return self.framework_book.owners

    @property
    def agent_owners(self) -> Holdings:
        return self.agent_book.owners

    @property
    def framework_principals(self) -> Holdings:
        return self.framework_book.principals

    @property
    def agent_principals(self) -> Holdings:
        return self.agent_book.principals

    @property
    def drains(self) -> dict[str, DrainInfo]:
        return self.agent_book.drains

    @property
    def counters(self) -> dict[str, int]:
        return self.context.counters

    @property
    def refused_by_permission(self) -> dict[str, int]:
        return self.context.refused_by_permission

    @property
    def updates_dropped(self) -> dict[str, int]:
        return self.delivery.updates_dropped

    @property
    def framework_messages_dropped(self) -> dict[str, int]:
        return self.delivery.framework_messages_dropped

    @property
    def offer_round_trips(self) -> Histogram:
        return self.offer_desk.round_trips

    @property
    def launches_to_running(self) -> Histogram:
        return self.delivery.launches_to_running

    @property
    def completed_by_state(self) -> dict[str, int]:
        return self.framework_book.completed_by_state

    @property
    def history(self) -> History:
        return self.framework_book.history

    @property
    def preemption(self) -> FairSharePreemption | None:
        """The fair-share preemption policy (docs/preemption.rst); None = off, the default."""
        return self.preempting.policy

    def expected_agents(self) -> frozenset[str]:
        """The agents of the registry this master took over with that have
        not re-registered yet (marked unreachable once ``agent_reregister_timeout``
        has passed); ``/state`` shows them as ``recovered_agents``."""
        return frozenset(self.agent_book.expected)

    def reconcile_answers_waiting(self) -> int:
        """Reconciliation answers not sent yet (see :meth:`Reconciliation.waiting`)."""
        return self.reconciliation.waiting()

    def agent_peers(self) -> dict[str, bytes]:
        """agent id -> its connection, for a later core of this process (``agent_peers``)."""
        return self.agent_book.peers()

    # ============================================================ invariants
    def _check(self) -> None:
        """The books' invariants, and those that tie them together (tests
        call it). O(frameworks + agents + tasks)."""
        self.context.settle()
        keep = self.config.completed_tasks_per_framework
        self.framework_book._check(keep)
        self.agent_book._check()
        frameworks, agents = self.framework_book.records, self.agent_book.records
        for agent in agents.values():
            for framework_id, task_id in agent.tasks:
                found = self.framework_book.task(framework_id, task_id)
                assert found is not None and found[1].agent_id == agent.id, \
                    f"agent {agent.id} runs task {task_id} of framework {framework_id}, which is not its"
        unreachable = self.agent_book.unreachable
        for record in frameworks.values():
            for task in record.tasks.values():
                key = (record.id, task.id)
                on = agents.get(task.agent_id)
                assert on is None or key in on.tasks, \
                    f"task {task.id} of framework {record.id} is not on its agent {task.agent_id}'s books"
                # the delivery table's phases (mesoslike.master.task_lifecycle) and what they mean
                assert task.phase is not Phase.DONE, f"task {task.id} is done, and live"
                assert (task.phase is Phase.ENDED) == task.terminal, f"task {task.id} is {task.phase} {task.state}"
                if task.phase in (Phase.UNREACHABLE, Phase.UNREACHABLE_PENDING):
                    assert key in unreachable[task.agent_id].tasks, f"task {task.id} is out of reach, its agent not"
                elif task.holds_resources:
                    assert on is not None, f"task {task.id} holds resources on agent {task.agent_id}, not registered"
        for agent_out_of_reach in unreachable.values():
            assert agent_out_of_reach.tasks_known or not agent_out_of_reach.tasks
        self._check_history()

    def _check_history(self) -> None:
        """Invariants of the history and the drains (tests call it)."""
        self.framework_book._check(self.config.completed_tasks_per_framework)
        drains = self.agent_book.drains
        assert all(drain.state in (DRAINING, DRAINED) for drain in drains.values())
        offered = {offer.agent_id for offer in self.allocator.outstanding_offers()}
        assert not offered & drains.keys(), "a draining or drained agent is offered"
        assert self.registry.drains == {agent_id: drain.to_record() for agent_id, drain in drains.items()}, \
            "the registry's drains are not the drains"


def _heartbeat(peer: bytes, msg: m.Heartbeat, principal: str | None) -> None:
    pass  # MasterCore._note_heard does the work


#: the messages that read no task (the others pass the gate first: AgentLifecycle.settle); a
#: re-registration passes it itself unless the agent is new to this master
_TASKS_UNREAD = frozenset({m.ReregisterAgent, m.Pong, m.Heartbeat})

#: the batches a master takes (the others are the master's to send)
_ACCEPTED_BATCHES = frozenset({m.StatusUpdates, m.Acknowledgements})
