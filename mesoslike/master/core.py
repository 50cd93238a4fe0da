"""The master's brain, sans I/O: messages and time in, messages out.

``MasterCore`` keeps the soft state (frameworks, agents, tasks), embeds the
:class:`~mesoslike.allocator.HierarchicalAllocator`, validates launches,
forwards status updates and acknowledgements, answers reconciliation, and
watches liveness (agent pings, framework heartbeats, failover timeouts). It
never touches a socket: ``on_message(peer, message)`` and ``tick()`` return
:class:`Send` commands that the runtime carries out, and it reads time only
from the injected clock. A peer's bad or out-of-place message gets an
``ERROR`` reply and changes nothing; the master never crashes on what a peer
sends.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import random
from collections import deque
from typing import Callable, Iterable, Mapping, Sequence

import attrs

import mesoslike.master.receipts as receipts
from mesoslike.acl import Credentials, Refused
from mesoslike.allocator import HierarchicalAllocator, RescindReason
from mesoslike.allocator import Offer as AllocatorOffer
from mesoslike.clock import Clock
from mesoslike.errors import AgentCapacityError, MesoslikeError
from mesoslike.master.history import CompletedFramework, History
from mesoslike.master.operations import DRAIN_KILL_RESEND, DRAINED, DRAINING, Conflict, DrainInfo, NotFound, check_grace
from mesoslike.master.partitions import RemovalQueue, RemovalRateLimit, UnreachableAgent, agents_to_forget
from mesoslike.master.preemption import FairSharePreemption, Kill, Prefer, RoleUsage, TaskView, Warn
from mesoslike.master.records import (MAX_ATTRIBUTES, MAX_NAME_LENGTH, AgentRecord, FrameworkRecord, Holdings,
                                      MasterConfig, TaskRecord, clip, new_status)
from mesoslike.master.registry import Registry
from mesoslike.master.reservations import (Conversion, ReservationError, check_reservation_count, framework_reserve,
                                           operator_reserve, operator_unreserve, reserver_principals, unreserve)
from mesoslike.master.roles import RolesConfig
from mesoslike.master.state import state_json
from mesoslike.observations import LATENCY_BUCKETS, Histogram
from mesoslike.resources import Resources
from mesoslike.wire import (
    TERMINAL_STATES,
    AgentInfo,
    FrameworkInfo,
    MasterInfo,
    Offer,
    Operation,
    OperationType,
    TaskInfo,
    TaskState,
    TaskStatus,
)
from mesoslike.wire import messages as m
from mesoslike.wire.batching import BATCH_TYPES, unbatched
from mesoslike.wire.types import EXECUTOR_RUN_PREFIX, ExecutorInfo, without_secret_values

__all__ = ["MasterCore", "Send", "MAX_ERROR_TEXT"]

log = logging.getLogger("mesoslike.master")

EMPTY = Resources()
#: the longest ERROR text sent to a peer (it may quote what the peer sent)
MAX_ERROR_TEXT = 2000
#: ended tasks remembered from agents' reports, of frameworks not known otherwise (see _reported)
_MAX_REPORTED_TASKS = 100_000
#: (agent, kind) pairs whose dropped input was logged: later drops of that kind from that agent are
#: only counted (bounded logging: a keyed agent cannot flood the log)
_MAX_LOGGED_DROPS = 10_000
#: sources of a status update (TaskStatus.source) an agent may name only for some tasks (an executor's)
#: or never (the master's)
SOURCE_EXECUTOR, SOURCE_MASTER = "SOURCE_EXECUTOR", "SOURCE_MASTER"

#: what _reconcile_answer returns for an answer to hold back (see _reconcile)
_HOLD = new_status("", TaskState.LOST)

#: an agent retries an unacknowledged update (0.5 s doubling to 10 s); the
#: master forwards a retry to the framework's connection that already got
#: that update only once this long has passed since. The transport does not
#: drop what it was given for a connected peer, so a retry is needed only if
#: the framework did not acknowledge (explicit acknowledgements) or its driver
#: ignored the update (while it re-subscribed); forwarding every retry of a
#: congested framework only made the congestion worse (issue 12 §1)
UPDATE_REFORWARD_INTERVAL = 2.0


@attrs.frozen
class Send:
    """Send ``message`` to the peer with transport identity ``peer``."""

    peer: bytes
    message: object


class MasterCore:
    """The leading master's state machine (see the module docstring).

    Complexity: a message costs O(its size) plus the allocator's work; a tick
    sweeps agents once per ``ping_interval`` and frameworks once per second.
    """

    def __init__(self, clock: Clock, info: MasterInfo, config: MasterConfig | None = None,
                 rng: random.Random | None = None, registry: Registry | None = None,
                 wall_clock: Callable[[], float] | None = None,
                 agent_peers: Mapping[str, bytes] | None = None, credentials: Credentials | None = None,
                 receipt_key: bytes | None = None) -> None:
        self.clock = clock
        #: with credentials, peers are principals and the ACLs apply (docs/security.rst)
        self.credentials = credentials
        #: signs and checks the receipts binding ids to principals (mesoslike.master.receipts);
        #: None: no receipts are given, and none is believed
        self._receipt_key = receipt_key
        #: authorization refusals, by the permission that was missing
        self.refused_by_permission: dict[str, int] = {}
        #: seconds since the epoch for the statuses the master makes up, as
        #: agents stamp theirs (the runtime passes time.time); defaults to clock
        self._wall_clock = wall_clock or clock.now
        self.info = info
        self.config = (config or MasterConfig()).validate()
        self._rng = rng or random.Random(0)
        self.allocator = HierarchicalAllocator(
            clock, sorter=self.config.sorter, allocation_interval=self.config.allocation_interval,
            # offer_timeout is the core's: an expired offer counts as declined (_expire_offers)
            min_allocatable=self.config.min_allocatable, offer_timeout=None,
            rng=self._rng, offer_id_prefix=f"{info.id}-O",
        )
        self.frameworks: dict[str, FrameworkRecord] = {}
        self.agents: dict[str, AgentRecord] = {}
        #: the hard state; ``registry_changes`` counts its changes so the
        #: runtime knows when to persist it
        self.registry = registry or Registry()
        self.registry_changes = 0
        self.removed_frameworks: set[str] = set(self.registry.removed_frameworks)
        self.removed_agents: set[str] = set(self.registry.removed_agents)
        self._expected_agents: set[str] = set()      # known before a failover, not back yet
        #: agent id -> the connection an earlier core of this process knew it on (after a ZooKeeper
        #: outage the same master may lead again with a fresh core): told at once to re-register
        self._earlier_peers = dict(agent_peers or {})
        self._expected_until = 0.0
        #: agents marked unreachable (docs/reliability.rst, "Partitions"): they may re-register
        self.unreachable: dict[str, UnreachableAgent] = {}
        #: those of them whose tasks this master never saw (taken over from the registry)
        self._unreachable_unknown: set[str] = set()
        #: agents that failed their health checks, marked unreachable in turn (agent_removal_rate_limit)
        limit = self.config.agent_removal_rate_limit
        self._removals = RemovalQueue(RemovalRateLimit.parse(limit) if limit is not None else None)
        #: explicit reconciliation items of unknown tasks held while agents are expected back after a
        #: failover: the agent id named ("" : none named, any expected agent) -> (framework id, item)
        self._held_reconciles: dict[str, list[tuple[str, m.ReconcileTask]]] = {}
        self._held_count: dict[str, int] = {}   # framework id -> its items held
        self._framework_by_peer: dict[bytes, str] = {}
        self._agent_by_peer: dict[bytes, str] = {}
        #: which owner (connection; principal with issue 13) holds which frameworks and agents
        self.framework_owners = Holdings()
        self.agent_owners = Holdings()
        #: the same, by principal (secured clusters: max_*_per_principal)
        self.framework_principals = Holdings()
        self.agent_principals = Holdings()
        self._framework_ids = (f"{info.id}-F{n:04d}" for n in itertools.count(1))
        self._agent_ids = (f"{info.id}-S{n}" for n in itertools.count(1))
        #: reconciliation answers not sent yet: framework id -> what is still to be answered, in
        #: order; frameworks take turns (_answer_reconciliations)
        self._reconciling: dict[str, deque[m.ReconcileTask | str]] = {}
        self._reconcile_budget = self.config.reconcile_answers_per_turn
        #: (deadline, offer id) of the offers made, oldest first (all share offer_timeout)
        self._offer_deadlines: deque[tuple[float, str]] = deque()
        #: frameworks whose ended tasks a re-registering agent reported (not adopted: nothing of
        #: theirs runs): framework id -> its info as reported (principal only if its receipt checked)
        #: and task id -> (the agent, its report). Such a framework may subscribe under its id to
        #: hear of them; its tasks are then the master's like any other. At most _MAX_REPORTED_TASKS
        self._reported: dict[str, tuple[FrameworkInfo, dict[str, tuple[str, m.RunningTask]]]] = {}
        self._reported_count = 0
        #: adopted frameworks whose principal no registry and no receipt told (secured clusters:
        #: nobody may subscribe under their ids, see _subscribe)
        self._unbound_frameworks: set[str] = set()
        #: status updates and framework messages from agents that were not forwarded, by why
        #: (docs/observability.rst); the (agent, why) pairs already logged
        self.updates_dropped: dict[str, int] = {}
        self.framework_messages_dropped: dict[str, int] = {}
        self._logged_drops: set[tuple[str, str]] = set()
        now = clock.now()
        self._next_registry_gc = now + self.config.registry_gc_interval
        self._next_ping_sweep = now + self.config.ping_interval
        self._next_framework_sweep = now
        self.counters = {"messages_received": 0, "bad_messages": 0, "tasks_launched": 0, "tasks_invalid": 0,
                         "agents_removed": 0, "frameworks_removed": 0, "registration_retries": 0,
                         "preemptions_warned": 0, "preemptions_killed": 0, "preemptions_released": 0,
                         "offers_expired": 0, "subscriptions_refused": 0, "agent_registrations_refused": 0,
                         "reconciliations_refused": 0, "reconcile_answers": 0,
                         "launches_resent": 0, "tasks_unconfirmed": 0, "tasks_unreported": 0,
                         "updates_reforwarded": 0, "updates_held_back": 0, "updates_settled_by_master": 0,
                         "reservation_operations": 0, "operations_refused": 0,
                         "agents_unreachable": 0, "agents_reachable_again": 0, "agent_removals_canceled": 0,
                         "agents_gone": 0, "unreachable_agents_forgotten": 0, "reconcile_answers_held": 0,
                         "tasks_killed_on_return": 0}
        #: launched tasks not confirmed by their agent yet: (when to look
        #: again, sequence, framework id, task id, RUN_TASKs sent by then);
        #: entries of tasks confirmed or ended meanwhile are skipped when due
        self._unconfirmed: list[tuple[float, int, str, str, int]] = []
        self._unconfirmed_seq = itertools.count()
        #: seconds from an offer made to its ACCEPT/DECLINE, and from RUN_TASK to TASK_RUNNING (/metrics)
        self.offer_round_trips = Histogram(LATENCY_BUCKETS)
        self.launches_to_running = Histogram(LATENCY_BUCKETS)
        #: tasks whose story is told (see _complete), by their terminal state: monotonic totals
        self.completed_by_state: dict[str, int] = {}
        #: removed frameworks with their ended tasks, bounded (docs/operations.rst)
        self.history = History(self.config.max_completed_frameworks)
        #: agents drained or being drained by the operator (docs/operations.rst)
        self.drains: dict[str, DrainInfo] = {}
        #: the roles file in force, set by the runtime
        self.roles_config: RolesConfig | None = None
        #: fair-share preemption (docs/preemption.rst); None = off, the default
        self.preemption: FairSharePreemption | None = None
        self._next_preemption_update = now
        self._warned: dict[tuple[str, str], str] = {}    # (framework, task) warned -> the role it goes to
        self._preempting: dict[tuple[str, str], str] = {}  # (framework, task) killed by preemption -> why
        self._out: list[Send] = []
        self._recover(now)

    def _recover(self, now: float) -> None:
        """Serve from a registry: its frameworks wait (disconnected) for the
        heartbeat silence plus their failover timeout (_adopt_framework), its
        agents get ``agent_reregister_timeout`` to come back, weights and
        quota apply at once."""
        for info in self.registry.frameworks.values():
            if info.id not in self.frameworks:
                self._adopt_framework(info)
        self._expected_agents = set(self.registry.agents)
        self._expected_until = now + self.config.agent_reregister_timeout
        for agent_id, entry in self.registry.unreachable.items():   # their tasks were an earlier leader's
            self._keep_unreachable(UnreachableAgent(agent_id, entry.hostname, entry.since,
                                                    principal=entry.principal, tasks_known=False))
        self._earlier_peers = {a: p for a, p in self._earlier_peers.items() if a in self._expected_agents}
        self._next_ping_sweep = now if self._earlier_peers else self._next_ping_sweep
        wall = self._wall_clock()
        for agent_id, record in sorted(self.registry.drains.items()):
            if agent_id in self._expected_agents:   # a drain in progress goes on; its kills due as they were
                self.drains[agent_id] = DrainInfo.from_record(record, now, wall)
        if self.registry.weights:
            self.allocator.update_weights(self.registry.weights)
        for role, record in sorted(self.registry.quota.items()):
            try:
                self.allocator.update_quota(role, record.get("guarantee"), record.get("limit"))
            except MesoslikeError as exc:  # a record this master cannot apply: skipped, not fatal
                log.warning("registry: skipping the quota of role %r: %s", role, exc)
        if self.registry.agents or self.registry.frameworks:
            log.info("recovered a registry: %d agents expected back within %.0fs, %d frameworks",
                     len(self._expected_agents), self.config.agent_reregister_timeout, len(self.registry.frameworks))

    # ============================================================= operator
    def update_weights(self, weights: dict[str, float]) -> list[Send]:
        """Set role weights (others keep theirs); persisted in the registry.
        Returns the rescinds the new weights cause. Raises
        :class:`MesoslikeError` (nothing changes) on a bad role or weight."""
        self._out = []
        self.allocator.update_weights(weights)
        self.registry.update_weights(weights)
        self._registry_changed()
        log.info("weights updated: %s", clip(weights))
        self._send_rescinds()
        return self._flush()

    def update_quota(self, role: str, guarantee: str | None = None, limit: str | None = None) -> list[Send]:
        """Set (or, with neither, clear) a role's quota guarantee and limit
        (resource strings); persisted in the registry. Offers the new quota
        needs back are rescinded (the returned sends). Raises
        :class:`MesoslikeError` (nothing changes) on bad input."""
        self._out = []
        self.allocator.update_quota(role, guarantee, limit)
        self.registry.update_quota(role, guarantee, limit)
        self._registry_changed()
        log.info("quota of role %s: guarantee %s, limit %s", clip(role), guarantee or "none", limit or "none")
        self._send_rescinds()
        return self._flush()

    def set_preemption(self, settings: RolesConfig | None) -> None:
        """Turn fair-share preemption on with the roles file ``settings``,
        update its settings, or turn it off (None, or a file with preemption
        disabled: the policy and its pending victims are dropped). The
        runtime calls it whenever it applies the roles file."""
        if settings is None or not settings.preemption.enabled:
            if self.preemption is not None:
                log.info("fair-share preemption off")
            self.preemption = None
            self._warned.clear()
            self._preempting.clear()
            return
        if self.preemption is None:
            self.preemption = FairSharePreemption(settings, allocation_interval=self.config.allocation_interval)
            self._next_preemption_update = self.clock.now()
            log.info("fair-share preemption on (wait before kill %.1fs)", settings.preemption.wait_before_kill)
        else:
            self.preemption.set_settings(settings)

    def _registry_changed(self) -> None:
        self.registry_changes += 1

    def expected_agents(self) -> frozenset[str]:
        """The agents of the registry this master took over with that have
        not re-registered yet (marked unreachable once ``agent_reregister_timeout``
        has passed); ``/state`` shows them as ``recovered_agents``."""
        return frozenset(self._expected_agents)

    def _check_expected_agents(self, now: float) -> None:
        """Agents of the registry not back within ``agent_reregister_timeout``
        of the failover are marked unreachable, as Mesos's master does: they
        may still come back under their ids (their tasks with them)."""
        if not self._expected_agents or now < self._expected_until:
            return
        since = self._wall_clock()
        for agent_id in sorted(self._expected_agents):
            log.warning("agent %s did not re-register within %.0fs after the failover: marked unreachable",
                        agent_id, self.config.agent_reregister_timeout)
            info = self.registry.agents.get(agent_id)
            unreachable = UnreachableAgent(agent_id, info.hostname if info else "", since,
                                           principal=info.principal if info else "", tasks_known=False)
            self._note_unreachable(unreachable)
            for record in self.frameworks.values():
                if record.connected:
                    self._send_framework(record, m.Failure(agent_id, "did not re-register after a failover"))
        self._expected_agents.clear()
        self._release_held_reconciles("")

    def _note_unreachable(self, agent: UnreachableAgent) -> None:
        self._keep_unreachable(agent)
        self.registry.mark_unreachable(agent.id, agent.entry())
        self._registry_changed()
        self.counters["agents_unreachable"] += 1

    # ================================================ history and operations
    # docs/operations.rst. The operator's operations run on an HTTP thread
    # under the master's lock (mesoslike.master.operator); each returns what
    # to answer and the sends it causes. Bad input raises MesoslikeError
    # (NotFound, Conflict) and changes nothing.

    def kill_task(self, task_id: str, framework_id: str | None = None) -> tuple[dict, list[Send]]:
        """Kill a live task (of ``framework_id``, or of whichever framework
        has one with this id): its agent is told to, and the framework hears
        TASK_KILLED from it as for its own kills. O(frameworks) without
        ``framework_id``, else O(1)."""
        self._out = []
        record, task = self._operated_task(task_id, framework_id)
        agent = self.agents.get(task.agent_id)
        if agent is not None:  # else its agent's removal is ending it
            self._send(agent.peer, m.KillTask(record.id, task.id))
        log.info("operator: killing task %s of framework %s on agent %s", clip(task.id), record.id, task.agent_id)
        return {"framework_id": record.id, "task_id": task.id, "agent_id": task.agent_id}, self._flush()

    def teardown_framework(self, framework_id: str) -> tuple[dict, list[Send]]:
        """Remove a framework as its own TEARDOWN does: its tasks are killed
        (TASK_KILLED in the history), it is told (a fatal ERROR), its id may
        not come back, and it moves to the completed frameworks."""
        self._out = []
        record = self.frameworks.get(framework_id)
        if record is None:
            gone = " (it was removed already)" if framework_id in self.removed_frameworks else ""
            raise NotFound(f"no framework {clip(framework_id)!r} is known to the master{gone}")
        live = sum(1 for task in record.tasks.values() if not task.terminal)
        self._remove_framework(record, "torn down by the operator")
        return {"framework_id": record.id, "name": record.info.name, "tasks_killed": live}, self._flush()

    def drain_agent(self, agent: str, grace: object = 0.0) -> tuple[dict, list[Send]]:
        """Mesos's DRAIN_AGENT: the agent (an id or a hostname) gets no more
        offers (its outstanding ones are rescinded) and is DRAINING; once
        ``grace`` seconds have passed its tasks still running are killed
        (TASK_KILLED), and once none is left it is DRAINED. Draining again
        may shorten the grace, not lengthen it. Until :meth:`reactivate_agent`."""
        self._out = []
        record = self._operated_agent(agent)
        seconds = check_grace(grace)
        now, wall = self.clock.now(), self._wall_clock()
        drain = self.drains.get(record.id)
        if drain is None:
            self.allocator.deactivate_agent(record.id)
            self._send_rescinds()
            drain = DrainInfo(DRAINING, seconds, now, wall, now + seconds, wall + seconds)
            log.info("operator: draining agent %s (%s), its tasks killed in %gs", record.id,
                     clip(record.info.hostname), seconds)
        elif drain.state == DRAINING and now + seconds < drain.kill_at:
            drain = attrs.evolve(drain, grace=seconds, kill_at=now + seconds, kill_at_wall=wall + seconds)
        self._set_drain(record.id, drain)
        self._advance_drain(record, drain, now)
        return self._agent_reply(record), self._flush()

    def _set_drain(self, agent_id: str, drain: DrainInfo | None) -> None:
        """An agent's drain now (None: none), in the registry too: a new
        leader goes on with it (Mesos keeps drains in its registry)."""
        if drain is None:
            self.drains.pop(agent_id, None)
        else:
            self.drains[agent_id] = drain
        before = self.registry.drains.get(agent_id)
        self.registry.update_drain(agent_id, drain.to_record() if drain is not None else None)
        if self.registry.drains.get(agent_id) != before:
            self._registry_changed()

    def reactivate_agent(self, agent: str) -> tuple[dict, list[Send]]:
        """Mesos's REACTIVATE_AGENT: a draining or drained agent is offered
        again (a drain whose grace has not passed kills nothing)."""
        self._out = []
        record = self._operated_agent(agent)
        drain = self.drains.get(record.id)
        if drain is None:
            raise Conflict(f"agent {record.id} ({clip(record.info.hostname)}) is not draining or drained")
        self._set_drain(record.id, None)
        self.allocator.activate_agent(record.id)
        log.info("operator: agent %s (%s) reactivated (it was %s)", record.id, clip(record.info.hostname),
                 drain.state)
        return {**self._agent_reply(record), "was": drain.state}, self._flush()

    def reserve_resources(self, agent: str, resources: str, principal: str | None,
                          labels: Sequence[tuple[str, str]] = ()) -> tuple[dict, list[Send]]:
        """Mesos's ``/reserve``: ``resources`` written reserved for their
        role (``cpus(analytics):2``) become dynamically reserved for it on
        the agent (an id or a hostname) by the operator's ``principal``.
        They must be unreserved and not used by tasks there; outstanding
        offers on the agent are rescinded if they hold them. Persisted in
        the registry; the agent is told to checkpoint them. ``labels``:
        the reservation's (``cpus(analytics,ops,team=ml):2``). With
        credentials the ``reserve_resources`` ACL must let ``principal``
        reserve for the role (else :class:`~mesoslike.acl.Refused`)."""
        self._out = []
        record = self._operated_agent(agent)
        conversion = operator_reserve(Resources.parse(resources), principal or "", labels)
        self._authorize_reservation("reserve_resources", principal, conversion.added.reservation_roles(), "operator")
        return self._operator_conversion(record, conversion, "reserved"), self._flush()

    def unreserve_resources(self, agent: str, resources: str, principal: str | None = None) -> tuple[dict, list[Send]]:
        """Mesos's ``/unreserve``: dynamically reserved ``resources``
        (``cpus(analytics,alice):2``) on the agent become unreserved — with
        credentials, if the ``unreserve_resources`` ACL lets the operator's
        ``principal`` unreserve what each of their reserver principals
        reserved; as :meth:`reserve_resources` otherwise. Written as for
        :meth:`reserve_resources` (``cpus(analytics):2``), they name what
        that made: the role's reservation by ``principal``."""
        self._out = []
        record = self._operated_agent(agent)
        conversion = operator_unreserve(Resources.parse(resources), principal or "")
        self._authorize_reservation("unreserve_resources", principal, reserver_principals(conversion.removed),
                                    "operator")
        return self._operator_conversion(record, conversion, "unreserved"), self._flush()

    def _authorize_reservation(self, action: str, principal: str | None, targets: list[str], kind: str) -> None:
        """With credentials, raise :class:`~mesoslike.acl.Refused` (counted)
        unless ``principal``, acting as a ``kind`` peer, may do ``action``
        on every target (roles reserved for, principals that reserved)."""
        if self.credentials is None:
            return
        for target in targets:
            try:
                self.credentials.check(action, principal, target, kind)
            except Refused as refused:
                self.refused_by_permission[action] = self.refused_by_permission.get(action, 0) + 1
                log.warning("refused %s: %s", action, refused)
                raise

    def _operator_conversion(self, agent: AgentRecord, conversion: Conversion, done: str) -> dict:
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
            self.allocator.convert_available(agent.id, conversion.removed, conversion.added)
        except AgentCapacityError:   # nothing changed, no offer rescinded
            raise Conflict(f"{conversion.removed} on agent {agent.id} ({clip(agent.info.hostname)}) is in use by "
                           "tasks; try again once they ended") from None
        self._send_rescinds()
        self._reservations_changed(agent, agent.info.resources - conversion.removed + conversion.added)
        log.info("operator: %s on agent %s %s as %s", conversion.removed, agent.id, done, conversion.added)
        return {"agent_id": agent.id, "hostname": agent.info.hostname, done: str(conversion.removed),
                "resources": str(conversion.added), "total": str(agent.info.resources)}

    def _operated_task(self, task_id: str, framework_id: str | None) -> tuple[FrameworkRecord, TaskRecord]:
        """The live task an operation names; NotFound or Conflict (ambiguous, ended)."""
        if framework_id is not None:
            record = self.frameworks.get(framework_id)
            if record is None:
                raise NotFound(f"no framework {clip(framework_id)!r} is known to the master")
            candidates = [record]
        else:
            candidates = list(self.frameworks.values())
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
        record = self.agents.get(agent)
        if record is not None:
            return record
        named = [a for a in self.agents.values() if a.info.hostname == agent]
        if len(named) > 1:
            raise Conflict(f"several agents have the hostname {clip(agent)!r} "
                           f"({', '.join(sorted(a.id for a in named))}): name one by its id")
        if not named:
            raise NotFound(f"no registered agent has the id or hostname {clip(agent)!r}")
        return named[0]

    def _agent_reply(self, agent: AgentRecord) -> dict:
        drain = self.drains.get(agent.id)
        return {"agent_id": agent.id, "hostname": agent.info.hostname, "tasks": len(agent.tasks),
                "drain_info": drain.to_json() if drain is not None else None}

    def _check_drains(self, now: float) -> None:
        """Every turn: kills due, agents drained, drains of agents removed
        meanwhile forgotten. O(drains)."""
        for agent_id, drain in list(self.drains.items()):
            agent = self.agents.get(agent_id)
            if agent is None and agent_id not in self._expected_agents:   # removed (not one expected back)
                self._set_drain(agent_id, None)
            elif agent is not None and drain.state == DRAINING:
                self._advance_drain(agent, drain, now)

    def _advance_drain(self, agent: AgentRecord, drain: DrainInfo, now: float) -> None:
        """DRAINED once the agent has no task left (their ends acknowledged,
        as in Mesos); else, once the grace has passed, kill those still
        running (again every DRAIN_KILL_RESEND). O(the agent's tasks) when
        kills go out, else O(1)."""
        if drain.state != DRAINING:
            return
        if not agent.tasks:
            self._set_drain(agent.id, attrs.evolve(drain, state=DRAINED, next_kill=None))
            log.info("agent %s (%s) is drained", agent.id, clip(agent.info.hostname))
            return
        if now < drain.kill_at or (drain.next_kill is not None and now < drain.next_kill):
            return
        for framework_id, task_id in sorted(agent.tasks):
            found = self._task(framework_id, task_id)
            if found is not None and not found[1].terminal:
                self._send(agent.peer, m.KillTask(framework_id, task_id))
        self.drains[agent.id] = attrs.evolve(drain, next_kill=now + DRAIN_KILL_RESEND)

    def _drain_wakeup(self) -> float:
        """When a drain has kills due next (inf: none)."""
        due = [drain.next_kill if drain.next_kill is not None else drain.kill_at
               for agent_id, drain in self.drains.items() if drain.state == DRAINING and agent_id in self.agents]
        return min(due, default=float("inf"))

    def _archive_framework(self, record: FrameworkRecord, why: str) -> None:
        """A framework is being removed: its tasks not ended yet end
        TASK_KILLED (its agents are told to shut it down; as Mesos's
        master records them), every task not completed yet is counted, and
        the framework with its ended tasks joins the completed frameworks.
        O(its tasks + completed_tasks_per_framework)."""
        keep = self.config.completed_tasks_per_framework
        wall = self._wall_clock()
        for task in list(record.tasks.values()):
            if not task.terminal and task.state != TaskState.UNREACHABLE:
                task.status = new_status(task.id, TaskState.KILLED, agent_id=task.agent_id, framework_id=record.id,
                                         message=f"framework removed: {why}", reason="REASON_FRAMEWORK_REMOVED",
                                         timestamp=wall, labels=task.info.labels)
            self.completed_by_state[task.state] = self.completed_by_state.get(task.state, 0) + 1
            record.add_completed(task, keep)
        self.history.framework_completed(CompletedFramework(record.info, tuple(record.completed), wall, why))

    def _check_history(self) -> None:
        """Invariants of the history and the drains (tests call it)."""
        keep = self.config.completed_tasks_per_framework
        self.history._check(keep)
        for record in self.frameworks.values():
            record.completed._check(keep)
        assert all(drain.state in (DRAINING, DRAINED) for drain in self.drains.values())
        offered = {offer.agent_id for offer in self.allocator.outstanding_offers()}
        assert not offered & self.drains.keys(), "a draining or drained agent is offered"
        assert self.registry.drains == {agent_id: drain.to_record() for agent_id, drain in self.drains.items()}, \
            "the registry's drains are not the drains"

    # ================================================================ inputs
    def on_message(self, peer: bytes, message: object, principal: str | None = None) -> list[Send]:
        """Handle one decoded message from ``peer``, who authenticated as
        ``principal`` (None: an anonymous cluster)."""
        self._out = []
        self.counters["messages_received"] += 1
        if type(message) in BATCH_TYPES:
            # each item as if it came alone, in order, with every check (docs/wire.rst, "Batching")
            if type(message) not in self._ACCEPTED_BATCHES:
                self._error(peer, f"unexpected message {type(message).__name__} for a master")
            else:
                for item in unbatched(message):
                    self._handle(peer, item, principal)
        else:
            self._handle(peer, message, principal)
            if isinstance(message, (m.Subscribe, m.RegisterAgent, m.ReregisterAgent)):
                self._note_batches(peer, message)
        self._note_heard(peer)
        return self._flush()

    def _handle(self, peer: bytes, message: object, principal: str | None) -> None:
        handler = self._HANDLERS.get(type(message))
        if handler is None:
            self._error(peer, f"unexpected message {type(message).__name__} for a master")
            return
        try:
            handler(self, peer, message, principal)
        except MesoslikeError as exc:  # bad input from the peer: tell it, change nothing more
            self._error(peer, str(exc))
        except Refused as exc:  # the ACLs do not allow it: tell it (naming the permission), count it
            self._refuse(peer, exc)

    def _note_batches(self, peer: bytes, message: m.Subscribe | m.RegisterAgent | m.ReregisterAgent) -> None:
        """Whether the framework or agent now on ``peer`` takes batches (it
        says so in every SUBSCRIBE and registration)."""
        record: FrameworkRecord | AgentRecord | None
        if isinstance(message, m.Subscribe):
            framework_id = self._framework_by_peer.get(peer)
            record = self.frameworks.get(framework_id) if framework_id is not None else None
        else:
            agent_id = self._agent_by_peer.get(peer)
            record = self.agents.get(agent_id) if agent_id is not None else None
        if record is not None and record.peer == peer:
            record.accepts_batches = message.accepts_batches

    def accepts_batches(self, peer: bytes) -> bool:
        """Whether ``peer`` is a framework's or an agent's connection that
        takes batch messages (the runtime batches what goes to it). O(1)."""
        framework_id = self._framework_by_peer.get(peer)
        if framework_id is not None:
            framework = self.frameworks.get(framework_id)
            return framework is not None and framework.peer == peer and framework.accepts_batches
        agent_id = self._agent_by_peer.get(peer)
        agent = self.agents.get(agent_id) if agent_id is not None else None
        return agent is not None and agent.peer == peer and agent.accepts_batches

    def on_retried_registration(self, peer: bytes) -> list[Send] | None:
        """``peer`` sent again, byte for byte, the registration this master
        already handled from it (the runtime recognises the frame): if the
        agent is still registered on that connection, answer
        AGENT_REGISTERED again and return the sends; otherwise None, and the
        caller decodes and handles the message as usual.

        Agents retry while the first answer is slow — after a failover most
        of them do. Handling a retry in full costs as much as the first
        attempt, and would mark tasks launched since the first attempt as
        lost, because the retry does not list them. O(1).
        """
        agent_id = self._agent_by_peer.get(peer)
        agent = self.agents.get(agent_id) if agent_id is not None else None
        if agent is None or agent.peer != peer:
            return None
        self._out = []
        self.counters["messages_received"] += 1
        self.counters["registration_retries"] += 1
        self._heard_from_agent(agent)
        self._send(peer, self._agent_registered(agent.info))
        return self._flush()

    def on_bad_frame(self, peer: bytes | None, error: Exception) -> list[Send]:
        """A frame that did not decode: answer ERROR (if we know who sent it)."""
        self._out = []
        self.counters["bad_messages"] += 1
        log.warning("bad frame from %s: %s", clip(peer), clip(str(error)))
        if peer is not None:
            self._error(peer, f"bad message: {clip(str(error), MAX_ERROR_TEXT // 2)}")
        return self._flush()

    def tick(self) -> list[Send]:
        """Time-driven work: allocation, offer timeouts, rescinds, pings,
        heartbeats, failovers, and the next part of pending reconciliations.
        The runtime calls it once per loop turn, after the turn's messages."""
        self._out = []
        now = self.clock.now()
        self._reconcile_budget = self.config.reconcile_answers_per_turn  # a new turn
        if self._reconciling:
            self._answer_reconciliations()
        if now >= self._next_ping_sweep:
            self._next_ping_sweep = now + self.config.ping_interval
            self._ping_agents()
        if self._removals and now >= self._removals.next_turn():
            self._mark_due_unreachable(now)
        if now >= self._next_registry_gc:
            self._next_registry_gc = now + self.config.registry_gc_interval
            self._forget_unreachable()
        if now >= self._next_framework_sweep:
            self._next_framework_sweep = now + min(1.0, self.config.heartbeat_interval / 2)
            self._check_frameworks(now)
            self._check_expected_agents(now)
        if self.preemption is not None and now >= self._next_preemption_update:
            self._next_preemption_update = now + self.preemption.update_interval
            self._preemption_update(self.preemption, now)
        self._expire_offers(now)
        if self._unconfirmed and now >= self._unconfirmed[0][0]:
            self._check_unconfirmed(now)
        if self.drains:
            self._check_drains(now)
        self._send_offers(self.allocator.tick())
        self._send_rescinds()
        return self._flush()

    def next_wakeup(self) -> float:
        if self._reconciling:
            return self.clock.now()  # answers wait: the next turn sends more
        wake = min(self.allocator.next_wakeup(), self._next_ping_sweep, self._next_framework_sweep,
                   self._removals.next_turn(), self._next_registry_gc)
        if self._offer_deadlines:
            wake = min(wake, self._offer_deadlines[0][0])
        if self._unconfirmed:
            wake = min(wake, self._unconfirmed[0][0])
        if self.drains:
            wake = min(wake, self._drain_wakeup())
        return wake if self.preemption is None else min(wake, self._next_preemption_update)

    # ============================================================ preemption
    def _preemption_update(self, policy: FairSharePreemption, now: float) -> None:
        """One round of the policy (every ``update_interval``): its inputs
        from the soft state, then its actions. O(tasks + offers + agents).

        Demand: frameworks do not state what they still want (as in Mesos),
        so a role with a connected framework that is not suppressed wants
        the whole cluster on top of what it holds; a role whose frameworks
        are all suppressed or disconnected wants nothing more."""
        total = Resources.sum(agent.info.resources for agent in self.agents.values())
        usage: dict[str, list[Resources]] = {}
        wanting: set[str] = set()
        tasks: list[TaskView] = []
        for record in self.frameworks.values():
            role = record.info.role
            held = usage.setdefault(role, [])
            if record.connected and not record.suppressed:
                wanting.add(role)
            for task in record.tasks.values():
                if not task.terminal and task.state != TaskState.UNREACHABLE:   # on an agent out of reach
                    held.append(task.info.resources)
                    tasks.append(TaskView(task.id, record.id, role, task.agent_id, task.info.resources,
                                          task.launched_at))
            held.extend(offer.resources for offer in self.allocator.outstanding_offers(record.id))
        roles = {}
        for role, held in usage.items():
            used = Resources.sum(held)
            roles[role] = RoleUsage(used, used + total if role in wanting else used)
        for key in [key for key in self._warned if not self._running(key)]:
            self._preemption_ended(key)  # ended without a status (framework removed, ...)
        try:
            actions = policy.update(now, total, roles, tasks)
        except Exception:  # a bug in the policy must not stop the master
            log.exception("fair-share preemption: the update failed")
            return
        for action in actions:
            if isinstance(action, Warn):
                self._preemption_warn(action, now)
            elif isinstance(action, Kill):
                self._preemption_kill(action)
            elif isinstance(action, Prefer):
                if action.agent_id in self.agents:
                    self.allocator.prefer_role(action.agent_id, action.role, action.until)

    def _running(self, key: tuple[str, str]) -> bool:
        found = self._task(*key)
        return found is not None and not found[1].terminal

    def _task(self, framework_id: str, task_id: str) -> tuple[FrameworkRecord, TaskRecord] | None:
        """A known task with its framework, or None. O(1)."""
        record = self.frameworks.get(framework_id)
        task = record.tasks.get(task_id) if record is not None else None
        return None if record is None or task is None else (record, task)

    def _preemption_warn(self, action: Warn, now: float) -> None:
        record = self.frameworks.get(action.framework_id)
        for task_id in action.task_ids:
            self._warned[(action.framework_id, task_id)] = action.role_for
        self.counters["preemptions_warned"] += len(action.task_ids)
        log.info("preemption: warning framework %s that tasks %s will be killed in %.1fs for role %s",
                 action.framework_id, clip(", ".join(action.task_ids)), action.deadline - now, action.role_for)
        if record is not None and record.connected:
            self._send_framework(record, m.PreemptionWarning(list(action.task_ids), max(0.0, action.deadline - now),
                                                             action.role_for))

    def _preemption_kill(self, action: Kill) -> None:
        found = self._task(action.framework_id, action.task_id)
        if found is None or found[1].terminal:
            return
        record, task = found
        self._preempting[(record.id, task.id)] = action.reason
        self.counters["preemptions_killed"] += 1
        log.info("preemption: killing task %s of framework %s: %s", clip(task.id), record.id, action.reason)
        agent = self.agents.get(task.agent_id)
        if agent is not None:
            self._send(agent.peer, m.KillTask(record.id, task.id))

    def _preemption_ended(self, key: tuple[str, str], agent_id: str | None = None) -> None:
        """A warned task ended: tell the policy, count it, and have its
        agent offered to the role it was taken for at once (the policy's own
        Prefer comes with its next update, after the allocator may have
        offered the agent elsewhere)."""
        role_for = self._warned.pop(key)
        if self._preempting.pop(key, None) is None:
            self.counters["preemptions_released"] += 1
        if self.preemption is None:
            return
        self.preemption.task_gone(*key)
        if agent_id is not None and agent_id in self.agents:
            self.allocator.prefer_role(agent_id, role_for, self.clock.now() + self.preemption.prefer_for)

    # ============================================================ frameworks
    def _owner(self, peer: bytes) -> bytes:
        """Who a registration from ``peer`` counts against for the
        per-connection bounds (``max_frameworks_per_connection``,
        ``max_agents_per_connection``): its connection, in a secured cluster
        too. A principal has bounds of its own over all its connections
        (``max_frameworks_per_principal``, ``max_agents_per_principal``:
        ``framework_principals``, ``agent_principals``), large enough for
        ``mesoslike local``'s client to run several frameworks; whose an id
        is, is the principal's (see :meth:`_owned`)."""
        return peer

    def _authorize(self, principal: str | None, action: str, target: str | None = None) -> None:
        """Raise :class:`~mesoslike.acl.Refused` unless ``principal`` may do
        ``action`` (on the role or user ``target``). Anonymous clusters have no ACLs."""
        if self.credentials is not None:
            self.credentials.check(action, principal, target)

    def _refuse(self, peer: bytes, refused: Refused) -> None:
        self.refused_by_permission[refused.permission] = self.refused_by_permission.get(refused.permission, 0) + 1
        log.warning("refused %s: %s", clip(peer), refused)
        self._error(peer, str(refused))

    def _owned(self, principal: str | None, owner: str, what: str) -> None:
        """Refuse using ``what`` (a framework or agent id owned by
        ``owner``) unless the sender is that principal. An id whose owner is
        not known (learnt from an agent after the registry was lost, or
        registered while the cluster was anonymous) goes to the first
        principal that uses it."""
        if self.credentials is not None and owner and owner != principal:
            raise Refused("principal", f"not authorized: {what} belongs to another principal than "
                                       f"{principal or 'an anonymous peer'}")

    def _check_bound(self, record: FrameworkRecord) -> None:
        """Refuse using a framework id whose principal this secured master
        cannot know: adopted from agents' reports after a restart without a
        registry, with no receipt of the master's to say whose it is (an
        agent's word alone could hand it to anyone; docs/security.rst)."""
        if self.credentials is not None and record.id in self._unbound_frameworks:
            raise Refused("principal", f"not authorized: framework {record.id} is known to this master only from "
                                       "agents that showed no receipt for its principal, so whose it is cannot "
                                       "be told; it cannot be subscribed to")

    def _signed(self, info: FrameworkInfo) -> FrameworkInfo:
        """``info`` with the master's receipt for its id and principal (none
        without a principal or a receipt key): what RUN_TASK carries to the
        agents, who report it back (mesoslike.master.receipts)."""
        receipt = receipts.sign(self._receipt_key, receipts.FRAMEWORK, info.id, info.principal) \
            if self._receipt_key is not None and info.principal and info.id else ""
        return info if info.principal_receipt == receipt else attrs.evolve(info, principal_receipt=receipt)

    def _reported_info(self, info: FrameworkInfo) -> FrameworkInfo:
        """A framework's info as a re-registering agent reported it: its
        principal kept only with a receipt of this master's that binds it
        (secured clusters), never on the agent's word."""
        if self.credentials is not None and self._receipt_key is not None and info.principal and \
                receipts.verify(self._receipt_key, receipts.FRAMEWORK, info.id, info.principal,
                                info.principal_receipt):
            return info
        if not info.principal and not info.principal_receipt:
            return info
        return attrs.evolve(info, principal="", principal_receipt="")

    def _subscribe(self, peer: bytes, msg: m.Subscribe, principal: str | None) -> None:
        """SUBSCRIBE: a new framework (no id: the master gives one) or one
        the master knows re-subscribing.

        Ids are the master's to give. A framework may come back only under
        an id this master knows: one it (or an earlier leader, through the
        registry) gave, or one a re-registering agent runs tasks of after a
        failover. Any other id is refused (a non-fatal ERROR: the driver
        retries, and an agent re-registering meanwhile may make it known),
        so a peer cannot claim ids the master would give later, nor grow the
        registry with ids of its own. Which *peer* may use a known id is not
        checked yet: with authentication (issue 13) an id belongs to the
        principal that registered it, and only that principal may use it.
        """
        info = msg.framework
        problem = _framework_problem(info)
        if problem is not None:
            self._refuse_subscription(peer, problem, fatal=True)
            return
        if info.id in self.removed_frameworks:
            self._refuse_subscription(peer, f"framework {clip(info.id)} has been removed; subscribe without an id",
                                      fatal=True)
            return
        if not info.id and peer in self._framework_by_peer:
            # a retried first SUBSCRIBE from the same connection: same framework
            retried = self.frameworks[self._framework_by_peer[peer]]
            self._set_suppressed(retried, retried.info.role in msg.suppressed_roles)
            self._send_framework(retried, m.Subscribed(retried.id, self.config.heartbeat_interval, self.info, False,
                                                       accepts_batches=True))
            return
        record = self.frameworks.get(info.id) if info.id else None
        if info.id and record is None and info.id in self._reported:
            # an agent holds ended tasks of it, not acknowledged yet: adopted as the agents reported it
            # (its principal, if their receipt checked), never as the subscriber says
            self._adopt_framework(self._reported[info.id][0], reported=True)
            record = self.frameworks[info.id]
        if info.id and record is None:
            self._refuse_subscription(
                peer, f"framework id {clip(info.id)} is not one this master gave (nor do registered agents run "
                      "tasks of it); subscribe without an id to get one", fatal=False)
            return
        if record is None:
            self._authorize(principal, "register_frameworks", info.role)
        else:
            self._owned(principal, record.info.principal, f"framework {record.id}")
            self._check_bound(record)
        owner = self._owner(peer)
        if (record is None or self.framework_owners.owner(record.id) != owner) \
                and self.framework_owners.count(owner) >= self.config.max_frameworks_per_connection:
            held = ", ".join(sorted(self.framework_owners.of(owner)))
            self._refuse_subscription(
                peer, f"this connection already holds {self.config.max_frameworks_per_connection} framework(s) "
                      f"({held}; max_frameworks_per_connection): subscribe another one from its own connection",
                fatal=True)
            return
        info = attrs.evolve(self._capped(info), principal=principal or "")  # never what the message says
        if record is None and principal \
                and self.framework_principals.count(principal.encode()) >= self.config.max_frameworks_per_principal:
            self._refuse_subscription(
                peer, f"principal {clip(principal)} already holds {self.config.max_frameworks_per_principal} "
                      "framework(s) (max_frameworks_per_principal): tear one down first", fatal=True)
            return
        role = info.role if record is None else record.info.role
        unknown = [name for name in msg.suppressed_roles if name != role]
        if unknown:   # as Mesos: a suppressed role must be one of the framework's
            self._refuse_subscription(peer, f"suppressed role {clip(unknown[0])!r} is not the framework's role "
                                            f"{clip(role)!r}", fatal=True)
            return
        if record is None:
            framework_id = self._new_framework_id()
            info = self._signed(attrs.evolve(info, id=framework_id))
            try:
                self.allocator.add_framework(framework_id, info.role, min_allocatable=info.min_allocatable or None)
            except MesoslikeError as exc:
                self._refuse_subscription(peer, str(exc), fatal=True)
                return
            record = FrameworkRecord(info=info, peer=peer, last_heard=self.clock.now())
            self.frameworks[framework_id] = record
            self.registry.add_framework(info)
            self._registry_changed()
            resubscribed = False
            log.info("framework %s (%s) subscribed in role %s", framework_id, clip(info.name), clip(info.role))
        elif record.connected and record.peer == peer:
            # a retried SUBSCRIBE on the connection it is subscribed on: our
            # SUBSCRIBED was slow, not lost with a master. Answer again and
            # leave its offers alone (Mesos does the same for a retrying
            # driver); rescinding them each time stormed after a failover.
            resubscribed = True
            record.last_heard = self.clock.now()
        else:
            resubscribed = True
            self._reconnect_framework(record, peer, info)
        self._set_suppressed(record, bool(msg.suppressed_roles))
        self.framework_owners.hold(owner, record.id)
        if record.info.principal:
            self.framework_principals.hold(record.info.principal.encode(), record.id)
        self._framework_by_peer[peer] = record.id
        self._send_framework(record, m.Subscribed(record.id, self.config.heartbeat_interval, self.info,
                                                  resubscribed, accepts_batches=True))

    def _set_suppressed(self, record: FrameworkRecord, suppressed: bool) -> None:
        """A (re-)subscription states the framework's suppression, which
        replaces what it was (Mesos's ``updateFramework`` with the SUBSCRIBE's
        ``suppressed_roles``): a scheduler that restarted or failed over
        starts from what it says, never from its predecessor's SUPPRESS.
        Reviving clears the framework's filters, as a REVIVE does."""
        if suppressed and not record.suppressed:
            self.allocator.suppress_offers(record.id)
        elif record.suppressed and not suppressed:
            self.allocator.revive_offers(record.id)
        record.suppressed = suppressed

    def _refuse_subscription(self, peer: bytes, why: str, fatal: bool) -> None:
        self.counters["subscriptions_refused"] += 1
        self._error(peer, f"cannot subscribe: {why}", fatal=fatal)

    def _new_framework_id(self) -> str:
        """The next id of this master's series that is free: a framework
        adopted after a failover, or a registry written by an earlier master
        of the same id, may hold ids of the series already; a chosen id never
        makes a later subscription fail. O(1) amortised (each taken id is
        skipped once)."""
        for framework_id in self._framework_ids:
            if framework_id not in self.frameworks and framework_id not in self.removed_frameworks \
                    and framework_id not in self.registry.frameworks:
                return framework_id
        raise AssertionError("unreachable: the series is endless")

    def _capped(self, info: FrameworkInfo) -> FrameworkInfo:
        """``info`` with its failover_timeout lowered to ``max_failover_timeout``
        (Mesos refuses timeouts beyond what a Duration holds; a bound this
        low keeps what a vanished framework leaves behind from lasting)."""
        cap = self.config.max_failover_timeout
        if info.failover_timeout <= cap:
            return info
        log.info("framework %s: failover_timeout %g lowered to %g (max_failover_timeout)", clip(info.id or info.name),
                 info.failover_timeout, cap)
        return attrs.evolve(info, failover_timeout=cap)

    def _reconnect_framework(self, record: FrameworkRecord, peer: bytes, info: FrameworkInfo) -> None:
        if record.peer is not None and record.peer != peer:
            self._framework_by_peer.pop(record.peer, None)
        # a re-subscribing framework gets fresh offers (as in Mesos)
        for offer in self.allocator.outstanding_offers(record.id):
            self.allocator.rescind_offer(offer.id, RescindReason.FRAMEWORK_DEACTIVATED)
        record.info = self._signed(attrs.evolve(info, id=record.id, role=record.info.role))
        if self.registry.frameworks.get(record.id) != record.info:
            self.registry.add_framework(record.info)
            self._registry_changed()
        record.peer = peer
        record.connected = True
        record.failover_deadline = None
        record.last_heard = self.clock.now()
        self.allocator.activate_framework(record.id)
        log.info("framework %s re-subscribed", record.id)

    def _framework_for(self, peer: bytes, framework_id: str) -> FrameworkRecord | None:
        record = self.frameworks.get(framework_id)
        if record is None or record.peer != peer or not record.connected:
            self._error(peer, f"framework {clip(framework_id)!r} is not subscribed on this connection; "
                              "send SUBSCRIBE")
            return None
        return record

    def _teardown(self, peer: bytes, msg: m.Teardown, principal: str | None) -> None:
        record = self._framework_for(peer, msg.framework_id)
        if record is not None:
            self._remove_framework(record, "torn down by the framework")

    def _remove_framework(self, record: FrameworkRecord, why: str) -> None:
        log.info("removing framework %s: %s", record.id, why)
        self._archive_framework(record, why)
        agents = {task.agent_id for task in record.tasks.values()}
        agents |= {agent.id for agent in self.agents.values() if any(key[0] == record.id for key in agent.executors)}
        for agent_id in sorted(agents):
            agent = self.agents.get(agent_id)
            if agent is not None:
                self._send(agent.peer, m.ShutdownFramework(record.id))
                agent.tasks = {key for key in agent.tasks if key[0] != record.id}
                agent.executors = {key: e for key, e in agent.executors.items() if key[0] != record.id}
        self.allocator.remove_framework(record.id)
        if record.peer is not None:
            self._framework_by_peer.pop(record.peer, None)
            if record.connected:
                self._send(record.peer, m.Error(f"framework {record.id} removed: {why}", fatal=True))
        del self.frameworks[record.id]
        self._unbound_frameworks.discard(record.id)
        self.framework_owners.release(record.id)
        self.framework_principals.release(record.id)
        self._reconciling.pop(record.id, None)
        self.removed_frameworks.add(record.id)
        self.registry.remove_framework(record.id)
        self._registry_changed()
        self.counters["frameworks_removed"] += 1

    def _check_frameworks(self, now: float) -> None:
        timeout = self.config.heartbeat_interval * self.config.framework_timeout_heartbeats
        for record in list(self.frameworks.values()):
            if record.connected:
                if now - record.last_heard >= timeout:
                    self._disconnect_framework(record, now)
                elif now - record.last_sent >= self.config.heartbeat_interval:
                    self._send_framework(record, m.Heartbeat())
            elif record.failover_deadline is not None and now >= record.failover_deadline:
                self._remove_framework(record, "failover timeout expired")

    def _disconnect_framework(self, record: FrameworkRecord, now: float) -> None:
        log.info("framework %s disconnected; failover timeout %.1fs", record.id, record.info.failover_timeout)
        record.connected = False
        record.failover_deadline = now + record.info.failover_timeout
        self._reconciling.pop(record.id, None)  # nobody to answer; it reconciles again when back
        self.allocator.deactivate_framework(record.id)
        if record.peer is not None:
            self._framework_by_peer.pop(record.peer, None)

    # ================================================================ offers
    def _send_offers(self, offers: Iterable[Offer]) -> None:
        by_framework: dict[str, list[Offer]] = {}
        timeout = self.config.offer_timeout
        deadline = self.clock.now() + timeout if timeout is not None else None
        for offer in offers:  # the allocator's offers are the wire's: sent as they are
            by_framework.setdefault(offer.framework_id, []).append(offer)
            if deadline is not None:
                self._offer_deadlines.append((deadline, offer.id))
        for framework_id, batch in by_framework.items():
            record = self.frameworks.get(framework_id)
            if record is not None and record.connected:
                self._send_framework(record, m.Offers(batch))

    def _expire_offers(self, now: float) -> None:
        """Offers unanswered for ``offer_timeout``: taken back, and counted as
        declined for ``offer_timeout`` seconds (a filter), the framework told
        (RESCIND_OFFER, reason ``offer_timeout``), counted in
        ``offers_expired``. Mesos only takes such offers back; without the
        filter the framework that never answers, holding nothing, would
        come first in DRF order and get the same resources straight back, so
        hoarding would go on. O(offers expired)."""
        timeout = self.config.offer_timeout
        deadlines = self._offer_deadlines
        while deadlines and deadlines[0][0] <= now:
            offer_id = deadlines.popleft()[1]
            offer = self.allocator.get_offer(offer_id)
            if offer is None or timeout is None:
                continue  # answered or rescinded meanwhile
            self.allocator.decline_offer(offer_id, timeout)
            self.counters["offers_expired"] += 1
            record = self.frameworks.get(offer.framework_id)
            if record is not None and record.connected:
                self._send_framework(record, m.RescindOffer(offer_id, RescindReason.OFFER_TIMEOUT))

    def _send_rescinds(self) -> None:
        for rescind in self.allocator.drain_rescinds():
            record = self.frameworks.get(rescind.offer.framework_id)
            if record is not None and record.connected:
                self._send_framework(record, m.RescindOffer(rescind.offer.id, rescind.reason))

    def _decline(self, peer: bytes, msg: m.Decline, principal: str | None) -> None:
        record = self._framework_for(peer, msg.framework_id)
        if record is None:
            return
        for offer_id in msg.offer_ids:
            offer = self.allocator.get_offer(offer_id)
            if offer is not None and offer.framework_id == record.id:
                self._offer_answered(offer_id)
                self.allocator.decline_offer(offer_id, msg.filters.refuse_seconds)
            else:
                log.info("framework %s declined unknown offer %s", record.id, clip(offer_id))

    def _offer_answered(self, offer_id: str) -> None:
        made = self.allocator.offer_made_at(offer_id)
        if made is not None:
            self.offer_round_trips.observe(max(0.0, self.clock.now() - made))

    def _revive(self, peer: bytes, msg: m.Revive, principal: str | None) -> None:
        record = self._framework_for(peer, msg.framework_id)
        if record is not None:
            self.allocator.revive_offers(record.id)
            record.suppressed = False

    def _suppress(self, peer: bytes, msg: m.Suppress, principal: str | None) -> None:
        record = self._framework_for(peer, msg.framework_id)
        if record is not None:
            self.allocator.suppress_offers(record.id)
            record.suppressed = True

    # ================================================================ launch
    def _accept(self, peer: bytes, msg: m.Accept, principal: str | None) -> None:
        """ACCEPT: the operations in order (a RESERVE or UNRESERVE changes
        what the offers hold for the operations after it), then ``tasks``
        as a last LAUNCH; the unused rest is declined with the filter. An
        invalid task ends TASK_ERROR and the others launch, as in Mesos; an
        invalid RESERVE or UNRESERVE refuses the whole accept — nothing is
        applied, its tasks end TASK_DROPPED, the offers go back unfiltered
        and the framework gets an ERROR saying why."""
        record = self._framework_for(peer, msg.framework_id)
        if record is None:
            return
        operations = list(msg.operations)
        if msg.tasks:
            operations.append(Operation(OperationType.LAUNCH, tasks=list(msg.tasks)))
        all_tasks = [task for operation in operations for task in operation.tasks]
        refuse = msg.filters.refuse_seconds
        if refuse < 0:
            self._error(peer, f"refuse_seconds must be >= 0, got {refuse}")
            return
        offers, problem = self._accepted_offers(record, msg.offer_ids)
        for offer in offers:
            self._offer_answered(offer.id)
        if problem is not None:
            for offer in offers:  # the valid ones go back
                self.allocator.decline_offer(offer.id, refuse)
            for task in all_tasks:
                self._launch_failed(record, task, TaskState.DROPPED, problem, "REASON_INVALID_OFFERS")
            return
        agent = self.agents[offers[0].agent_id]
        try:
            conversions, launched, failed, used, starting = self._plan_accept(record, agent, offers, operations,
                                                                              principal)
        except ReservationError as exc:
            for offer in offers:  # nothing applied: all of it goes back, unfiltered
                self.allocator.decline_offer(offer.id, 0.0)
            why = f"the accept was refused, nothing was applied: {exc}"
            for task in all_tasks:
                self._launch_failed(record, task, TaskState.DROPPED, why, "REASON_INVALID_OFFERS")
            self.counters["operations_refused"] += 1
            self._error(peer, why)
            return
        if conversions:
            offers = self._convert_offers(agent, offers, conversions)
        for task, state, why, reason in failed:
            self._launch_failed(record, task, state, why, reason)
        for executor_id, executor in starting.items():
            agent.executors[(record.id, executor_id)] = executor   # used until EXECUTOR_EXITED
        self._consume_offers(offers, used, refuse)
        for task in launched:
            self._run_task(record, agent, task)

    def _plan_accept(self, record: FrameworkRecord, agent: AgentRecord, offers: list[AllocatorOffer],
                     operations: list[Operation], principal: str | None
                     ) -> tuple[list[Conversion], list[TaskInfo], list[tuple[TaskInfo, str, str, str]], Resources,
                                dict[str, ExecutorInfo]]:
        """Check an accept's operations against what the offers hold, in
        order, changing nothing: the conversions to apply, the tasks to
        launch, those that may not (with their state, message and reason),
        what the tasks (and the custom executors they start) use, and those
        executors. Raises :class:`ReservationError` for a RESERVE or
        UNRESERVE that may not be applied. O(tasks x kinds)."""
        pool = Resources.sum(offer.resources for offer in offers)
        conversions: list[Conversion] = []
        launched: list[TaskInfo] = []
        launched_ids: set[str] = set()
        failed: list[tuple[TaskInfo, str, str, str]] = []
        used = EMPTY
        starting: dict[str, ExecutorInfo] = {}   # custom executors this accept starts on the agent
        for number, operation in enumerate(operations, 1):
            if operation.type == OperationType.LAUNCH:
                if operation.resources or operation.role or operation.labels:
                    raise ReservationError(f"operation {number}: a LAUNCH carries tasks only")
                for task in operation.tasks:
                    executor_needs, problem = self._executor_needs(record, task, agent, starting)
                    if problem is None and executor_needs:
                        if not (pool - used).contains(task.resources + executor_needs):
                            problem = (f"task resources {task.resources} and its executor's {executor_needs} "
                                       f"exceed what is left of the offers ({pool - used})")
                    if problem is None:
                        problem = self._task_problem(record, task, agent, pool - used, launched_ids)
                    if problem is not None:
                        failed.append((task, TaskState.ERROR, problem, "REASON_TASK_INVALID"))
                        continue
                    task, problem = self._task_user(record, task, principal)
                    if problem is not None:
                        failed.append((task, TaskState.ERROR, problem, "REASON_TASK_UNAUTHORIZED"))
                        continue
                    launched.append(task)
                    launched_ids.add(task.task_id)
                    used = used + task.resources
                    if task.executor is not None and task.executor.executor_id not in starting \
                            and (record.id, task.executor.executor_id) not in agent.executors:
                        starting[task.executor.executor_id] = task.executor
                        used = used + task.executor.resources
                continue
            if operation.tasks:
                raise ReservationError(f"operation {number}: a {operation.type} carries no tasks")
            if operation.labels and operation.type != OperationType.RESERVE:
                raise ReservationError(f"operation {number}: only a RESERVE carries labels (an UNRESERVE names "
                                       "them in its resources' kinds)")
            try:
                if operation.type == OperationType.RESERVE:
                    conversion = framework_reserve(operation.resources, operation.role, record.info.role,
                                                   principal or "",
                                                   [(label.key, label.value) for label in operation.labels])
                    self._authorize_reservation("reserve_resources", principal,
                                                conversion.added.reservation_roles(), "framework")
                else:
                    if operation.role:
                        raise ReservationError("an UNRESERVE names no role: its resources say whose they are")
                    conversion = unreserve(operation.resources)
                    self._authorize_reservation("unreserve_resources", principal,
                                                reserver_principals(operation.resources), "framework")
            except (ReservationError, Refused) as exc:
                raise ReservationError(f"operation {number} ({operation.type}): {exc}") from None
            left = pool - used
            if not left.contains(conversion.removed):
                raise ReservationError(f"operation {number} ({operation.type}): {conversion.removed} is not in "
                                       f"what the offers hold after the operations before it ({left})")
            pool = pool - conversion.removed + conversion.added
            conversions.append(conversion)
        if conversions:
            total = agent.info.resources
            for conversion in conversions:
                total = total - conversion.removed + conversion.added
            check_reservation_count(total)
        return conversions, launched, failed, used, starting

    def _convert_offers(self, agent: AgentRecord, offers: list[AllocatorOffer],
                        conversions: list[Conversion]) -> list[AllocatorOffer]:
        """Apply checked conversions to the offers (each spread over them in
        order), the agent's total and the registry, and tell the agent its
        dynamic reservations (before the tasks that may use them). Returns
        the offers as they are now."""
        current = list(offers)
        total = agent.info.resources
        for conversion in conversions:
            remaining = conversion.removed
            for index, offer in enumerate(current):
                part = offer.resources.minimum(remaining)
                if not part:
                    continue
                remaining = remaining.subtract_clamped(part)
                current[index] = self.allocator.convert_offered(offer.id, part, conversion.convert(part))
            total = total - conversion.removed + conversion.added
            log.info("agent %s: %s became %s", agent.id, conversion.removed, conversion.added)
        self._reservations_changed(agent, total)
        return current

    def _reservations_changed(self, agent: AgentRecord, total: Resources) -> None:
        """The agent's total is ``total`` now (its dynamic reservations
        changed): the registry keeps it (a new leader knows them), the agent
        is told to checkpoint them (it re-registers with them)."""
        agent.info = attrs.evolve(agent.info, resources=total)
        self.registry.admit_agent(agent.info)
        self._registry_changed()
        self.counters["reservation_operations"] += 1
        self._send(agent.peer, m.CheckpointResources(agent.id, total.dynamically_reserved()))

    def _accepted_offers(self, record: FrameworkRecord,
                         offer_ids: list[str]) -> tuple[list[AllocatorOffer], str | None]:
        offers: list[AllocatorOffer] = []
        problem: str | None = None
        if not offer_ids:
            return offers, "no offers given"
        if len(set(offer_ids)) != len(offer_ids):
            problem = "an offer is given twice"
        for offer_id in dict.fromkeys(offer_ids):
            offer = self.allocator.get_offer(offer_id)
            if offer is None or offer.framework_id != record.id:
                problem = problem or f"offer {offer_id} is no longer valid (answered, rescinded or never made)"
            else:
                offers.append(offer)
        if problem is None and len({offer.agent_id for offer in offers}) > 1:
            problem = "offers of more than one agent in one accept"
        return offers, problem

    @staticmethod
    def _executor_needs(record: FrameworkRecord, task: TaskInfo, agent: AgentRecord,
                        starting: Mapping[str, ExecutorInfo]) -> tuple[Resources, str | None]:
        """What the task's custom executor takes from the offers besides the
        task (its resources the first time it starts on the agent, else
        nothing), or why the task cannot use it (another executor under the
        same id)."""
        if task.executor is None:
            return EMPTY, None
        executor_id = task.executor.executor_id
        running = starting.get(executor_id) or agent.executors.get((record.id, executor_id))
        if running is None:
            return task.executor.resources, None
        if (running.command, running.resources) != (task.executor.command, task.executor.resources):
            return EMPTY, (f"executor {clip(executor_id)!r} runs on agent {agent.id} with another command or other "
                           "resources")
        return EMPTY, None

    def _task_problem(self, record: FrameworkRecord, task: TaskInfo, agent: AgentRecord, left: Resources,
                      earlier: set[str]) -> str | None:
        """Why ``task`` cannot launch (``earlier``: the ids launched before
        it in the same ACCEPT), or None. O(resource kinds): an ACCEPT of
        5,000 tasks used to scan the earlier ones for each (a stall of
        seconds, issue 12 §1)."""
        if not task.task_id:
            return "the task id is empty"
        if task.task_id in record.tasks or task.task_id in earlier:
            return f"task id {task.task_id} is already in use"
        if agent.doomed and (record.id, task.task_id) in agent.doomed:
            return (f"task id {task.task_id} is in use on agent {agent.id} by the task of that id it brought back "
                    "from a partition, which is being killed; use another id")
        if task.agent_id != agent.id:
            return f"task agent_id {task.agent_id!r} is not the offers' agent {agent.id}"
        if not task.command.strip() and task.executor is None:
            return "the task has no command"
        if task.task_id.startswith(EXECUTOR_RUN_PREFIX):
            return "a task id may not begin with the executors' reserved prefix"
        if not task.resources:
            return "the task asks for no resources"
        if not left.contains(task.resources):
            return f"task resources {task.resources} exceed what is left of the offers ({left})"
        if task.kill_grace_period < 0:
            return "kill_grace_period must be >= 0"
        return None

    def _task_user(self, record: FrameworkRecord, task: TaskInfo, principal: str | None
                   ) -> tuple[TaskInfo, str | None]:
        """``task`` with the unix user it runs as (its own, else its
        framework's), and why it may not launch (the ``run_tasks`` ACL,
        counted), or None. In an anonymous cluster a task without a user
        runs as the agent's user, as before."""
        user = task.user or record.info.user
        if user != task.user:
            task = attrs.evolve(task, user=user)
        if self.credentials is None:
            return task, None
        if not user:
            return task, "not authorized: the task has no user to run as (set FrameworkInfo.user or the task's)"
        try:
            self._authorize(principal, "run_tasks", user)
        except Refused as refused:
            self.refused_by_permission["run_tasks"] = self.refused_by_permission.get("run_tasks", 0) + 1
            return task, str(refused)
        return task, None

    def _consume_offers(self, offers: list[AllocatorOffer], used: Resources, refuse: float) -> None:
        """Split what the tasks use over the offers; the rest is declined
        with the accept's filter."""
        remaining = used
        for offer in offers:
            part = offer.resources.minimum(remaining)
            remaining = remaining.subtract_clamped(part)
            self.allocator.accept_offer(offer.id, part, refuse)

    def _run_task(self, record: FrameworkRecord, agent: AgentRecord, task: TaskInfo) -> None:
        status = new_status(task.task_id, TaskState.STAGING, agent_id=agent.id, framework_id=record.id,
                            timestamp=self._wall_clock(), labels=task.labels)
        now = self.clock.now()
        launched = record.tasks[task.task_id] = TaskRecord(task, record.id, agent.id, status, launched_at=now,
                                                           confirmed=False)
        agent.tasks.add((record.id, task.task_id))
        self.counters["tasks_launched"] += 1
        self._send_run_task(record, agent, launched, now)

    def _send_run_task(self, record: FrameworkRecord, agent: AgentRecord, task: TaskRecord, now: float) -> None:
        """Send (again) a task to its agent, and look again after the launch
        timeout, doubled for each send before. O(log unconfirmed tasks)."""
        task.launch_sends += 1
        wait = self.config.task_launch_timeout * 2 ** (task.launch_sends - 1)
        heapq.heappush(self._unconfirmed, (now + wait, next(self._unconfirmed_seq), record.id, task.id,
                                           task.launch_sends))
        self._send(agent.peer, m.RunTask(record.info, task.info))

    def _check_unconfirmed(self, now: float) -> None:
        """Tasks whose agent has not confirmed them in time: RUN_TASK again
        (an agent ignores one for a task it has), or after the last attempt
        end them TASK_LOST (TASK_DROPPED if partition-aware) and tell the
        agent to kill them, should the task reach it after all.
        O(due entries x log unconfirmed)."""
        while self._unconfirmed and self._unconfirmed[0][0] <= now:
            _, _, framework_id, task_id, sends = heapq.heappop(self._unconfirmed)
            found = self._task(framework_id, task_id)
            if found is None:
                continue
            record, task = found
            if task.confirmed or task.terminal or task.launch_sends != sends:
                continue   # confirmed, ended, or a newer entry stands for it
            agent = self.agents.get(task.agent_id)
            if agent is None:
                continue   # its agent's removal ended it
            if task.launch_sends < self.config.task_launch_attempts:
                self.counters["launches_resent"] += 1
                log.warning("task %s of framework %s not confirmed by agent %s after %d launch(es): sending it again",
                            task_id, framework_id, agent.id, task.launch_sends)
                self._send_run_task(record, agent, task, now)
                continue
            self.counters["tasks_unconfirmed"] += 1
            why = (f"agent {agent.id} did not confirm the task after {task.launch_sends} launch attempts over "
                   f"{now - task.launched_at:.0f}s")
            log.warning("task %s of framework %s: %s", task_id, framework_id, why)
            self._recover_resources(record, task)
            self._send(agent.peer, m.KillTask(record.id, task.id))
            self._end_by_master(record, task, TaskState.DROPPED if record.info.partition_aware else TaskState.LOST,
                                "REASON_RECONCILIATION", why)

    def _launch_failed(self, record: FrameworkRecord, task: TaskInfo, state: str, why: str, reason: str) -> None:
        self.counters["tasks_invalid"] += 1
        status = new_status(task.task_id, state, agent_id=task.agent_id, framework_id=record.id, message=why,
                            reason=reason, timestamp=self._wall_clock(), labels=task.labels)
        self._send_framework(record, m.Update(status))

    def _kill(self, peer: bytes, msg: m.Kill, principal: str | None) -> None:
        record = self._framework_for(peer, msg.framework_id)
        if record is None:
            return
        task = record.tasks.get(msg.task_id)
        if task is None or task.terminal:
            state = task.state if task is not None else TaskState.LOST
            self._send_framework(record, m.Update(new_status(
                msg.task_id, state, agent_id=msg.agent_id, framework_id=record.id,
                message="unknown task" if task is None else "task already terminal",
                reason="REASON_RECONCILIATION", timestamp=self._wall_clock())))
            return
        agent = self.agents.get(task.agent_id)
        if agent is not None:
            self._send(agent.peer, m.KillTask(record.id, task.id))
        elif task.state == TaskState.UNREACHABLE:   # as Mesos: it cannot be killed now; say so
            self._send_framework(record, m.Update(self._reconciled(task.status, self._wall_clock())))

    # ======================================================= status updates
    def _status_update(self, peer: bytes, msg: m.StatusUpdate, principal: str | None) -> None:
        """An agent's update: applied, and forwarded to the framework once
        (a retry again only if it may not have arrived, see
        UPDATE_REFORWARD_INTERVAL). A retry of an update the framework
        acknowledged already, or of a task that ended, is acknowledged by the
        master instead: the framework has had it (docs/reliability.rst).

        Updates are bound to what the master knows (docs/security.rst): only
        for a task the master placed on this agent (or the agent reported
        when it re-registered) and that has not ended there, with
        ``SOURCE_EXECUTOR`` only for a task run by a custom executor and
        never ``SOURCE_MASTER``. Anything else is dropped (:meth:`_drop_update`):
        not forwarded, counted, logged once per agent and kind — and
        acknowledged, so that the agent's stream of updates drains."""
        agent = self._agent_for(peer)
        if agent is None:
            return
        status = msg.status
        if status.agent_id != agent.id or status.framework_id != msg.framework_id:
            # the ids are the connection's and the message's, never what the status claims
            # (an agent's own say so already: attrs.evolve cost 12 % of the master's handling, issue 14)
            status = attrs.evolve(status, agent_id=agent.id, framework_id=msg.framework_id)
        if agent.doomed and (msg.framework_id, status.task_id) in agent.doomed:
            self._settle_doomed(agent, msg.framework_id, status)
            return
        why = self._preempting.get((msg.framework_id, status.task_id)) if self._preempting else None
        if why is not None and status.state == TaskState.KILLED:
            status = attrs.evolve(status, reason="REASON_TASK_PREEMPTED", message=why)
        record = self.frameworks.get(msg.framework_id)
        if record is None:
            if msg.framework_id in self.removed_frameworks:
                if status.uuid:   # nobody will ever acknowledge: do it on the framework's behalf
                    self._send(peer, m.StatusUpdateAck(agent.id, msg.framework_id, status.task_id, status.uuid))
            else:
                self._drop_update(agent, msg.framework_id, status, "unknown_framework",
                                  "the master knows no such framework")
            return
        task = record.tasks.get(status.task_id)
        if task is None:
            ended = record.completed_task(status.task_id)
            if ended is not None and ended.agent_id == agent.id:
                if status.uuid and ended.status.uuid and status.uuid != ended.status.uuid:
                    self._count_drop(agent, record.id, status, "already_terminal", f"the task ended {ended.state}")
                self._settle_stale(agent, record, ended, status)
                return
            self._drop_update(agent, record.id, status, "unknown_task",
                              "the master placed no such task of the framework on this agent")
            return
        if task.agent_id != agent.id:
            # only the agent that runs a task speaks for it (a forged update would free what it holds)
            self._drop_update(agent, record.id, status, "not_on_agent", f"the task runs on agent {task.agent_id}")
            self.refused_by_permission["status_updates"] = self.refused_by_permission.get("status_updates", 0) + 1
            self._send(peer, m.Error(f"not authorized: task {clip(task.id)} of framework {record.id} does not run on "
                                     f"agent {agent.id}"))   # logged once, by _drop_update
            return
        if status.source == SOURCE_MASTER or (status.source == SOURCE_EXECUTOR and task.info.executor is None):
            self._drop_update(agent, record.id, status, "forged_source",
                              f"{clip(status.source, 40)} is not an agent's to claim for this task")
            return
        if not task.confirmed:   # its agent has it: the master keeps no secret's value from now on
            task.info = without_secret_values(task.info)
        task.confirmed = True
        if status.uuid and status.uuid == task.acknowledged_uuid:
            self._settle(agent, record, status)   # our acknowledgement to the agent was late or lost
            return
        if task.terminal and task.status.uuid and status.uuid != task.status.uuid:
            # the agent's terminal update came already (a retry of it has its uuid): one end per task
            self._drop_update(agent, record.id, status, "already_terminal", f"the task ended {task.state}")
            return
        self._apply_status(record, task, status)
        if record.connected and self._forward_due(record, task, status):
            self._send_framework(record, m.Update(status))

    def _forward_due(self, record: FrameworkRecord, task: TaskRecord, status: TaskStatus) -> bool:
        """Whether to forward ``status`` to the framework now: the first
        time, to another connection, or a while after the last time."""
        now = self.clock.now()
        if status.uuid and status.uuid == task.forwarded_uuid and record.peer == task.forwarded_to:
            if now - task.forwarded_at < UPDATE_REFORWARD_INTERVAL:
                self.counters["updates_held_back"] += 1
                return False
            self.counters["updates_reforwarded"] += 1
        task.forwarded_uuid, task.forwarded_to, task.forwarded_at = status.uuid, record.peer, now
        return True

    def _drop_update(self, agent: AgentRecord, framework_id: str, status: TaskStatus, kind: str, why: str) -> None:
        """Do not forward ``status``: count and log it (:meth:`_count_drop`)
        and acknowledge it to its agent — a retry would be dropped again, and
        an agent's stream must not stay blocked behind it."""
        self._count_drop(agent, framework_id, status, kind, why)
        if status.uuid:
            self._send(agent.peer, m.StatusUpdateAck(agent.id, framework_id, status.task_id, status.uuid))

    def _count_drop(self, agent: AgentRecord, framework_id: str, status: TaskStatus, kind: str, why: str) -> None:
        self.updates_dropped[kind] = self.updates_dropped.get(kind, 0) + 1
        self._log_drop(agent.id, kind, f"agent {agent.id}: a status update {clip(status.state, 40)} of task "
                                       f"{clip(status.task_id)} of framework {clip(framework_id)} dropped ({kind}: "
                                       f"{why})")

    def _log_drop(self, agent_id: str, kind: str, text: str) -> None:
        """Log ``text`` the first time an agent's input of ``kind`` is
        dropped; later ones are counted only (mesoslike_status_updates_dropped_total,
        mesoslike_framework_messages_dropped_total). O(1), bounded."""
        key = (agent_id, kind)
        if key in self._logged_drops or len(self._logged_drops) >= _MAX_LOGGED_DROPS:
            return
        self._logged_drops.add(key)
        log.warning("%s; further ones of this kind from this agent are only counted", text)

    def _settle(self, agent: AgentRecord, record: FrameworkRecord, status: TaskStatus) -> None:
        """Acknowledge an update to its agent on the framework's behalf."""
        self.counters["updates_settled_by_master"] += 1
        self._send(agent.peer, m.StatusUpdateAck(agent.id, record.id, status.task_id, status.uuid))

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
        if not status.terminal and ended.status.source == "SOURCE_MASTER":
            log.warning("agent %s reports task %s of framework %s %s, which the master ended %s: killing it",
                        agent.id, status.task_id, record.id, status.state, ended.state)
            self._send(agent.peer, m.KillTask(record.id, status.task_id))

    def _apply_status(self, record: FrameworkRecord, task: TaskRecord, status: TaskStatus) -> None:
        if task.terminal and not status.terminal:
            return  # a late retry of an older update
        if status.state == TaskState.RUNNING and task.state in (TaskState.STAGING, TaskState.STARTING):
            self.launches_to_running.observe(max(0.0, self.clock.now() - task.launched_at))
        task.status = status
        if status.terminal and self._warned and (record.id, task.id) in self._warned:
            self._preemption_ended((record.id, task.id), task.agent_id)
        if status.terminal:
            self._recover_resources(record, task)

    def _recover_resources(self, record: FrameworkRecord, task: TaskRecord) -> None:
        """Give what an ended task held back to the allocator, once."""
        if task.resources_recovered:
            return
        task.resources_recovered = True
        if task.agent_id in self.agents:
            try:
                self.allocator.recover_resources(record.id, task.agent_id, task.info.resources)
            except MesoslikeError:  # a bookkeeping bug must not lose the update itself
                log.exception("recovering the resources of task %s failed", clip(task.id))

    def _acknowledge(self, peer: bytes, msg: m.Acknowledge, principal: str | None) -> None:
        record = self._framework_for(peer, msg.framework_id)
        if record is None:
            return
        task = record.tasks.get(msg.task_id)
        if task is not None and msg.uuid:
            task.acknowledged_uuid = msg.uuid
        if task is not None and task.terminal and task.status.uuid == msg.uuid:
            self._complete(record, task)
        agent = self.agents.get(msg.agent_id)
        if agent is not None:
            self._send(agent.peer, m.StatusUpdateAck(agent.id, record.id, msg.task_id, msg.uuid))

    def _complete(self, record: FrameworkRecord, task: TaskRecord) -> None:
        """The task's story is told (its terminal state acknowledged, or made
        up by the master): each task comes here once."""
        self.completed_by_state[task.state] = self.completed_by_state.get(task.state, 0) + 1
        del record.tasks[task.id]
        agent = self.agents.get(task.agent_id)
        if agent is not None:
            agent.tasks.discard((record.id, task.id))
        record.add_completed(task, self.config.completed_tasks_per_framework)

    def _reconcile(self, peer: bytes, msg: m.Reconcile, principal: str | None) -> None:
        """RECONCILE: the latest state of the named tasks, or (none named) of
        every non-terminal task of the framework.

        Bounded and spread: a request naming more than
        ``max_reconcile_tasks`` ids, or one that would make the framework's
        waiting explicit answers exceed it, gets an ERROR and changes
        nothing. Answers go out at most ``reconcile_answers_per_turn`` per
        loop turn over all frameworks (those of this turn's budget at once,
        the rest from :meth:`tick`, frameworks taking turns), so a large
        reconciliation never holds other peers up. Each answer is the
        task's state when it is sent. A new implicit request replaces a
        waiting one. O(ids named) now, O(1) per answer later.

        After a failover, a task this master does not know may be on an
        agent not back yet: its answer is held until that agent (the one
        named, or, none named, every expected agent) re-registered or was
        marked unreachable, as Mesos's master does not answer for
        ``recovered_slaves``; held answers count against
        ``max_reconcile_tasks``."""
        record = self._framework_for(peer, msg.framework_id)
        if record is None:
            return
        limit = self.config.max_reconcile_tasks
        queue = self._reconciling.get(record.id)
        if msg.tasks:
            waiting = sum(1 for item in queue if not isinstance(item, str)) if queue else 0
            waiting += self._held_count.get(record.id, 0)
            if len(msg.tasks) + waiting > limit:
                self.counters["reconciliations_refused"] += 1
                self._error(peer, f"RECONCILE of {len(msg.tasks)} tasks refused: at most {limit} task ids "
                                  f"(max_reconcile_tasks) may wait for an answer, and {waiting} do; "
                                  "reconcile in smaller parts")
                return
            items: list[m.ReconcileTask | str] = list(msg.tasks)
        else:
            wanted = sorted(task.id for task in record.tasks.values() if not task.terminal)
            if queue:  # the fresh implicit request answers what a waiting one would
                queue = deque(item for item in queue if not isinstance(item, str))
                self._reconciling[record.id] = queue
            items = list(wanted)
        if queue is None:
            queue = self._reconciling[record.id] = deque()
        queue.extend(items)
        if self._reconcile_budget > 0:
            self._answer_reconciling(record, queue, self._reconcile_budget)
        if not queue:
            del self._reconciling[record.id]

    def reconcile_answers_waiting(self) -> int:
        """Reconciliation answers not sent yet (at most: some may need none),
        held ones included. O(frameworks waiting)."""
        return sum(len(queue) for queue in self._reconciling.values()) + sum(self._held_count.values())

    def _answer_reconciliations(self) -> None:
        """Spend this turn's budget on the waiting answers, an equal part per
        framework (one at least), in the order they asked."""
        while self._reconciling and self._reconcile_budget > 0:
            share = max(1, self._reconcile_budget // len(self._reconciling))
            for framework_id, queue in list(self._reconciling.items()):
                record = self.frameworks.get(framework_id)
                if record is not None and record.connected:
                    self._answer_reconciling(record, queue, min(share, self._reconcile_budget))
                else:
                    queue.clear()
                if not queue:
                    del self._reconciling[framework_id]
                if self._reconcile_budget <= 0:
                    break

    def _answer_reconciling(self, record: FrameworkRecord, queue: deque[m.ReconcileTask | str], most: int) -> None:
        """Send up to ``most`` answers from the front of ``queue`` (task ids
        of an implicit request, items of explicit ones)."""
        now = self._wall_clock()
        sent = 0
        completed: dict[str, TaskRecord] | None = None   # built once, when an id is not live
        while queue and sent < most:
            item = queue.popleft()
            if completed is None and not isinstance(item, str) and item.task_id not in record.tasks:
                completed = {task.id: task for task in record.completed}   # the latest of an id wins
            status = self._reconcile_answer(record, item, now, completed or {})
            if status is _HOLD:
                assert not isinstance(item, str)
                self._hold_reconcile(record, item)
            elif status is not None:
                self._send_framework(record, m.Update(status))
                sent += 1
        self._reconcile_budget -= sent
        self.counters["reconcile_answers"] += sent

    def _reconcile_answer(self, record: FrameworkRecord, item: m.ReconcileTask | str, now: float,
                          completed: dict[str, TaskRecord]) -> TaskStatus | None:
        """The answer for one task of a reconciliation, or None for none
        (``completed``: the framework's terminal tasks by id). O(1)."""
        if isinstance(item, str):  # implicit: a task that was live when asked
            live = record.tasks.get(item)
            return self._reconciled(live.status, now) if live is not None and not live.terminal else None
        live = record.tasks.get(item.task_id)
        if live is not None:
            return self._reconciled(live.status, now)
        ended = completed.get(item.task_id)
        if ended is not None:
            return self._reconciled(ended.status, now)
        if item.agent_id in self._expected_agents or (not item.agent_id and self._expected_agents):
            return _HOLD  # it may be on an agent expected back after a failover: answered once it is
        # Mesos's answers for an unknown task (TASK_LOST to frameworks that are not partition-aware)
        aware = record.info.partition_aware
        if item.agent_id in self.unreachable:
            state, why = TaskState.UNREACHABLE if aware else TaskState.LOST, "its agent is unreachable"
        elif aware and not item.agent_id and self._unreachable_unknown:
            # it may run on an unreachable agent whose tasks this master never saw: not gone for sure
            state, why = TaskState.UNREACHABLE, "unknown task; it may be on an unreachable agent"
        else:   # on no agent this master knows, nor may hear from again: not running anywhere
            state, why = TaskState.GONE if aware else TaskState.LOST, "unknown task"
        return new_status(item.task_id, state, agent_id=item.agent_id, framework_id=record.id, message=why,
                          reason="REASON_RECONCILIATION", timestamp=now)

    def _hold_reconcile(self, record: FrameworkRecord, item: m.ReconcileTask) -> None:
        self._held_reconciles.setdefault(item.agent_id, []).append((record.id, item))
        self._held_count[record.id] = self._held_count.get(record.id, 0) + 1
        self.counters["reconcile_answers_held"] += 1

    def _release_held_reconciles(self, agent_id: str) -> None:
        """``agent_id`` is no longer expected back (it re-registered, or was
        marked unreachable): the answers held for it — and, once no agent is
        expected, all of them — wait for the next turns again. O(released)."""
        released = self._held_reconciles.pop(agent_id, []) if agent_id else []
        if not self._expected_agents:
            for items in self._held_reconciles.values():
                released += items
            self._held_reconciles.clear()
        for framework_id, item in released:
            left = self._held_count[framework_id] - 1
            if left:
                self._held_count[framework_id] = left
            else:
                del self._held_count[framework_id]
            record = self.frameworks.get(framework_id)
            if record is not None and record.connected:
                self._reconciling.setdefault(framework_id, deque()).append(item)

    @staticmethod
    def _reconciled(status: TaskStatus, now: float) -> TaskStatus:
        return attrs.evolve(status, uuid="", source="SOURCE_MASTER", reason="REASON_RECONCILIATION", timestamp=now)

    def _executor_exited(self, peer: bytes, msg: m.ExecutorExited, principal: str | None) -> None:
        """A custom executor's process ended: its resources are free again."""
        agent = self._agent_for(peer)
        if agent is None:
            return
        executor = agent.executors.pop((msg.framework_id, msg.executor_id), None)
        if executor is None:
            return
        log.info("executor %s of framework %s on agent %s exited: %s", clip(msg.executor_id), msg.framework_id,
                 agent.id, clip(msg.message))
        self._recover_executor(agent, msg.framework_id, executor)

    def _recover_executor(self, agent: AgentRecord, framework_id: str, executor: ExecutorInfo) -> None:
        if framework_id not in self.frameworks or not executor.resources:
            return   # a removed framework's allocation went with it
        try:
            self.allocator.recover_resources(framework_id, agent.id, executor.resources)
        except MesoslikeError:  # a bookkeeping bug must not take the master down
            log.exception("recovering the resources of executor %s failed", clip(executor.executor_id))

    def _reconcile_executors(self, agent: AgentRecord, reported: list[m.RunningExecutor]) -> None:
        """A known agent re-registered: the executors it no longer runs free
        what they held (their EXECUTOR_EXITED may have been lost)."""
        still = {(e.framework_id, e.executor.executor_id) for e in reported}
        for key in sorted(set(agent.executors) - still):
            self._recover_executor(agent, key[0], agent.executors.pop(key))

    def _framework_message(self, peer: bytes, msg: m.FrameworkMessage, principal: str | None) -> None:
        agent_id = self._agent_by_peer.get(peer)
        if agent_id is not None:  # agent -> framework
            if (msg.framework_id, msg.executor_id) not in self.agents[agent_id].executors:
                # an agent speaks only for the custom executors of that framework it runs
                kind = "unknown_executor"
                self.framework_messages_dropped[kind] = self.framework_messages_dropped.get(kind, 0) + 1
                self._log_drop(agent_id, "message:" + kind, f"agent {agent_id}: a framework message for framework "
                                                            f"{clip(msg.framework_id)} from executor "
                                                            f"{clip(msg.executor_id)!r} dropped ({kind}: no such "
                                                            "executor of the framework runs on this agent)")
                return
            record = self.frameworks.get(msg.framework_id)
            if record is not None and record.connected:
                # the agent is the one its connection says, whatever the message claims
                self._send_framework(record, msg if msg.agent_id == agent_id else attrs.evolve(msg, agent_id=agent_id))
            return
        record = self._framework_for(peer, msg.framework_id)
        if record is None:
            return
        agent = self.agents.get(msg.agent_id)
        if agent is None:
            self._error(peer, f"agent {clip(msg.agent_id)!r} is not registered; message dropped")
            return
        self._send(agent.peer, msg)

    # ================================================================ agents
    def _register_agent(self, peer: bytes, msg: m.RegisterAgent, principal: str | None) -> None:
        existing = self._agent_by_peer.get(peer)
        if existing is not None:  # our AGENT_REGISTERED was lost: say it again
            self._send(peer, self._agent_registered(self.agents[existing].info))
            return
        self._authorize(principal, "register_agents")
        if self._agent_refused(peer, principal, msg.agent, None, msg.http_address):
            return
        agent_id = self._new_agent_id()
        info = attrs.evolve(msg.agent, id=agent_id, principal=principal or "")
        self._admit_agent(peer, info, {}, msg.http_address)
        log.info("agent %s (%s) registered with %s", agent_id, clip(info.hostname), info.resources)

    def _agent_registered(self, info: AgentInfo) -> m.AgentRegistered:
        """AGENT_REGISTERED for ``info``, with the master's receipt binding
        its id to its principal (secured clusters: mesoslike.master.receipts)."""
        receipt = receipts.sign(self._receipt_key, receipts.AGENT, info.id, info.principal) \
            if self._receipt_key is not None and info.principal else ""
        return m.AgentRegistered(info.id, self.info, self.config.ping_interval, accepts_batches=True, receipt=receipt)

    def _new_agent_id(self) -> str:
        """The next id of this master's series that no agent holds, held or
        is expected back under: an agent that re-registered under an id of
        the series (as an agent may, after a failover) never makes a later
        registration fail. O(1) amortised."""
        for agent_id in self._agent_ids:
            if agent_id not in self.agents and agent_id not in self.removed_agents \
                    and agent_id not in self.registry.agents and agent_id not in self._expected_agents:
                return agent_id
        raise AssertionError("unreachable: the series is endless")

    def _agent_refused(self, peer: bytes, principal: str | None, info: AgentInfo, agent_id: str | None,
                       http_address: str = "") -> bool:
        """Refuse (ERROR, counted) a registration the master will not keep:
        fields beyond its bounds, or one more agent on a connection that
        holds ``max_agents_per_connection`` (``agent_id``: the agent
        re-registering, which may already be this connection's)."""
        owner = self._owner(peer)
        problem = _agent_problem(info) or _text_problem("the HTTP address", http_address)
        if problem is None and (agent_id is None or self.agent_owners.owner(agent_id) != owner) \
                and self.agent_owners.count(owner) >= self.config.max_agents_per_connection:
            held = ", ".join(sorted(self.agent_owners.of(owner)))
            problem = (f"this connection already holds {self.config.max_agents_per_connection} agent(s) ({held}; "
                       "max_agents_per_connection): run another agent on its own connection")
        held_by = (principal or "").encode()
        if problem is None and held_by and (agent_id is None or self.agent_principals.owner(agent_id) != held_by) \
                and self.agent_principals.count(held_by) >= self.config.max_agents_per_principal:
            problem = (f"principal {clip(principal)} already holds {self.config.max_agents_per_principal} "
                       "agent(s) (max_agents_per_principal)")
        if problem is None:
            return False
        self.counters["agent_registrations_refused"] += 1
        self._error(peer, f"cannot register the agent: {problem}")
        return True

    def _reregister_agent(self, peer: bytes, msg: m.ReregisterAgent, principal: str | None) -> None:
        """REREGISTER_AGENT. As in Mesos, an agent comes back under the id it
        had, even one this master does not know (its registry was lost, or
        the agent knew an earlier leader); what it claims is bounded per
        connection, and fresh ids skip the ones agents hold
        (:meth:`_new_agent_id`).

        In a secured cluster an agent id belongs to its principal: the one
        this master or its registry recorded, else the one the agent's
        receipt names (:meth:`_unproven_agent`)."""
        info = msg.agent
        if not info.id:
            self._error(peer, "REREGISTER_AGENT needs the agent's id")
            return
        self._authorize(principal, "register_agents")
        known = self.agents.get(info.id) or self.registry.agents.get(info.id) or self.unreachable.get(info.id)
        if known is not None:
            self._owned(principal, known.info.principal if isinstance(known, AgentRecord) else known.principal,
                        f"agent {info.id}")
        elif self._unproven_agent(peer, principal, info.id, msg.receipt):
            return
        if info.id in self.removed_agents:
            self._send(peer, m.ShutdownAgent("this agent was removed; register anew"))
            return
        info = attrs.evolve(info, principal=principal or "")
        msg = attrs.evolve(msg, agent=info)
        if self._agent_refused(peer, principal, info, info.id, msg.http_address):
            return
        record = self.agents.get(info.id)
        if record is None:
            unreachable = self.unreachable.get(info.id)
            if unreachable is not None and unreachable.tasks_known:
                self._readmit_unreachable(peer, msg, unreachable)
            else:
                self._admit_reregistered(peer, msg, returning=unreachable is not None)
            return
        if record.peer is not None and record.peer != peer:
            self._agent_by_peer.pop(record.peer, None)
        record.peer = peer
        record.pings_unanswered = 0
        record.http_address = msg.http_address
        self._agent_by_peer[peer] = record.id
        self.agent_owners.hold(self._owner(peer), record.id)
        if record.info.principal:
            self.agent_principals.hold(record.info.principal.encode(), record.id)
        self._lose_unreported_tasks(record, msg.tasks)
        self._forget_unreported_doomed(record, msg.tasks)
        self._reconcile_executors(record, msg.executors)
        self._update_agent(record, info)
        self._bind_reported(msg.frameworks)
        self._send(peer, self._agent_registered(record.info))
        log.info("agent %s re-registered", record.id)

    def _unproven_agent(self, peer: bytes, principal: str | None, agent_id: str, receipt: str) -> bool:
        """An agent re-registers under an id neither this master nor its
        registry knows (a master without a registry restarted, or the
        registry was lost). In a secured cluster it must show this master's
        receipt binding the id to the principal it authenticated as — an id
        is never the first claimant's. Without one it is told to register
        anew (SHUTDOWN_AGENT: its tasks are killed, it gets a fresh id) and
        the refusal is counted and logged once. True if refused."""
        if self.credentials is None or self._receipt_key is None:
            return False
        if receipts.verify(self._receipt_key, receipts.AGENT, agent_id, principal or "", receipt):
            return False
        self.counters["agent_registrations_refused"] += 1
        self.refused_by_permission["principal"] = self.refused_by_permission.get("principal", 0) + 1
        why = (f"agent id {clip(agent_id)} is not known to this master and the agent shows no receipt of the master's "
               f"binding it to principal {clip(principal or '')}: register anew")
        self._log_drop(agent_id, "reregistration", f"re-registration refused: {why}")
        self._send(peer, m.ShutdownAgent(why))
        return True

    def _update_agent(self, agent: AgentRecord, info: AgentInfo) -> None:
        """A known agent re-registered with another total or other
        attributes (it restarted with other flags): as Mesos's master does,
        the allocator takes the new ones (``update_agent``, which also drops
        the decline filters on the agent and allocates it again) and the
        registry keeps them. Its outstanding offers, made of the old ones,
        are rescinded first. A total below what its tasks still hold is
        refused: the agent keeps its old total and attributes. O(offers)."""
        total = info.resources if info.resources != agent.info.resources else None
        attributes = info.attributes if info.attributes != agent.info.attributes else None
        if total is None and attributes is None:
            return
        for offer in self.allocator.outstanding_offers():
            if offer.agent_id == agent.id:  # its old incarnation went away
                self.allocator.rescind_offer(offer.id, RescindReason.AGENT_DEACTIVATED)
        self._send_rescinds()
        try:
            self.allocator.update_agent(agent.id, total=total, attributes=attributes)
        except AgentCapacityError as exc:
            log.warning("agent %s re-registered with a total its tasks do not fit in; keeping the old one: %s",
                        agent.id, exc)
            return
        agent.info = attrs.evolve(agent.info, resources=info.resources, attributes=dict(info.attributes))
        self.registry.admit_agent(agent.info)
        self._registry_changed()
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
        if returning:
            self._forget_unreachable_agent(msg.agent.id)
            self.registry.mark_reachable(msg.agent.id)
            self.counters["agents_reachable_again"] += 1
        # whose a framework is, is never the agent's to say: the registry knows, or the master's receipt
        # the agent kept with the framework's tasks (_reported_info); else nobody may take it (_check_bound)
        infos = {info.id: self._reported_info(info) for info in msg.frameworks if info.id}
        self._bind_reported(msg.frameworks)
        holding: dict[str, list[Resources]] = {}
        for running in msg.tasks:
            if running.framework_id in self.removed_frameworks or running.state in TERMINAL_STATES:
                if running.framework_id not in self.removed_frameworks and running.framework_id not in self.frameworks:
                    self._remember_reported(msg.agent.id, running, infos)  # it may subscribe for the update
                continue
            if running.framework_id not in self.frameworks:
                self._adopt_framework(infos.get(running.framework_id) or FrameworkInfo(
                    name="(recovered)", id=running.framework_id), reported=True)
            holding.setdefault(running.framework_id, []).append(running.task.resources)
        executors = {(e.framework_id, e.executor.executor_id): e.executor for e in msg.executors
                     if e.framework_id not in self.removed_frameworks}
        for (framework_id, _), executor in executors.items():   # an idle executor's framework lives on too
            if framework_id not in self.frameworks:
                self._adopt_framework(infos.get(framework_id) or FrameworkInfo(name="(recovered)", id=framework_id),
                                      reported=True)
            holding.setdefault(framework_id, []).append(executor.resources)
        self._admit_agent(peer, msg.agent, {fid: Resources.sum(items) for fid, items in holding.items()},
                          msg.http_address)
        agent = self.agents[msg.agent.id]
        agent.executors.update(executors)
        agent_id, now, frameworks = agent.id, self._wall_clock(), self.frameworks  # hot: 100k tasks per failover
        launched = self.clock.now()  # when it started is not known: when this master learnt of it
        for running in msg.tasks:
            framework_id, task_id = running.framework_id, running.task.task_id
            record = frameworks.get(framework_id)
            if record is None:
                continue
            status = new_status(task_id, _delivered_state(running), agent_id=agent_id, framework_id=framework_id,
                                timestamp=now, labels=running.task.labels, healthy=running.healthy)
            # an ended task holds nothing; its terminal update is on its way
            record.tasks[task_id] = TaskRecord(running.task, framework_id, agent_id, status,
                                               running.state in TERMINAL_STATES, launched)
            agent.tasks.add((framework_id, task_id))
            if returning and record.connected and record.info.partition_aware and not status.terminal:
                self._send_framework(record, m.Update(attrs.evolve(
                    status, message="its agent re-registered after being unreachable",
                    reason="REASON_AGENT_REREGISTERED")))
        log.info("agent %s re-registered (unknown before) with %d tasks", agent_id, len(msg.tasks))

    def _readmit_unreachable(self, peer: bytes, msg: m.ReregisterAgent, unreachable: UnreachableAgent) -> None:
        """An agent this master marked unreachable re-registers (Mesos's
        _reregisterSlave of an unreachable agent): admitted again under its
        id. Its partition-aware tasks come back — their frameworks are told
        the state the update stream delivers next (TASK_RUNNING, ...; a task
        that ended meanwhile: its terminal update follows), and TASK_GONE
        for those it no longer has (TASK_DROPPED if it never confirmed them). Tasks whose frameworks were told
        TASK_LOST are killed; nothing more is said of them (one terminal
        state per task). O(its tasks)."""
        agent_id = msg.agent.id
        self._forget_unreachable_agent(agent_id)
        self.registry.mark_reachable(agent_id)
        self.counters["agents_reachable_again"] += 1
        holding: dict[str, list[Resources]] = {}
        back: list[tuple[FrameworkRecord, TaskRecord, m.RunningTask]] = []
        doomed: dict[tuple[str, str], Resources] = {}
        shut_down: set[str] = set()
        for running in msg.tasks:
            framework_id, task_id = running.framework_id, running.task.task_id
            record = self.frameworks.get(framework_id)
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
                     if e.framework_id in self.frameworks}
        for (framework_id, _), executor in executors.items():
            holding.setdefault(framework_id, []).append(executor.resources)
        self._admit_agent(peer, msg.agent, {fid: Resources.sum(items) for fid, items in holding.items()},
                          msg.http_address)
        agent = self.agents[agent_id]
        agent.executors.update(executors)
        wall = self._wall_clock()
        reported = set()
        for record, task, running in back:
            key = (record.id, task.id)
            reported.add(key)
            agent.tasks.add(key)
            task.confirmed = True
            task.resources_recovered = running.state in TERMINAL_STATES
            delivered = _delivered_state(running)
            if task.state == TaskState.UNREACHABLE and delivered not in TERMINAL_STATES:
                self._tell_status(record, task, new_status(
                    task.id, delivered, agent_id=agent_id, framework_id=record.id,
                    message="its agent re-registered after being unreachable", reason="REASON_AGENT_REREGISTERED",
                    timestamp=wall, labels=task.info.labels, healthy=running.healthy))
        for record, task in self._unreachable_tasks(unreachable):
            if (record.id, task.id) in reported:
                continue
            if task.terminal:
                self._complete(record, task)   # the agent forgot it: the acknowledgement would go nowhere
            else:   # never confirmed: its launch did not reach the agent (TASK_DROPPED, as for a known agent)
                self.counters["tasks_unreported"] += 1
                self._end_by_master(record, task, TaskState.GONE if task.confirmed else TaskState.DROPPED,
                                    "REASON_AGENT_REREGISTERED", "its agent re-registered without it")
        for (framework_id, task_id), resources in sorted(doomed.items()):
            agent.doomed[(framework_id, task_id)] = resources   # EMPTY: it ended, its update is on its way
            if resources:
                self.counters["tasks_killed_on_return"] += 1
                self._send(peer, m.KillTask(framework_id, task_id))
        for framework_id in sorted(shut_down):
            self._send(peer, m.ShutdownFramework(framework_id))
        log.warning("agent %s (%s) re-registered after being unreachable for %.0fs: %d task(s) back, %d killed",
                    agent_id, clip(msg.agent.hostname), wall - unreachable.since, len(back), len(doomed))

    def _settle_doomed(self, agent: AgentRecord, framework_id: str, status: TaskStatus) -> None:
        """An update of a task killed on its agent's return: acknowledged by
        the master, never forwarded; its end frees what it held."""
        if status.uuid:
            self._send(agent.peer, m.StatusUpdateAck(agent.id, framework_id, status.task_id, status.uuid))
        if status.terminal:
            self._free_doomed(agent, (framework_id, status.task_id))

    def _free_doomed(self, agent: AgentRecord, key: tuple[str, str]) -> None:
        resources = agent.doomed.pop(key)
        if resources and key[0] in self.frameworks:
            try:
                self.allocator.recover_resources(key[0], agent.id, resources)
            except MesoslikeError:  # a bookkeeping bug must not lose the update itself
                log.exception("recovering the resources of task %s failed", clip(key[1]))

    def _forget_unreported_doomed(self, agent: AgentRecord, reported: list[m.RunningTask]) -> None:
        """A known agent re-registered without tasks it was told to kill: they ended."""
        if agent.doomed:
            listed = {(r.framework_id, r.task.task_id) for r in reported}
            for key in [key for key in agent.doomed if key not in listed]:
                self._free_doomed(agent, key)

    def _adopt_framework(self, info: FrameworkInfo, reported: bool = False) -> None:
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
        info = self._signed(self._capped(info))
        ended = self._reported.pop(info.id, None)
        self.allocator.add_framework(info.id, info.role, active=False)
        if info.id not in self.registry.frameworks:
            self.registry.add_framework(info)
            self._registry_changed()
        silence = self.config.heartbeat_interval * self.config.framework_timeout_heartbeats
        record = self.frameworks[info.id] = FrameworkRecord(
            info=info, peer=None, connected=False,
            failover_deadline=self.clock.now() + silence + info.failover_timeout)
        if reported and not info.principal:
            self._unbound_frameworks.add(info.id)
        for task_id, (agent_id, running) in sorted(ended[1].items()) if ended is not None else ():
            self._reported_count -= 1
            agent = self.agents.get(agent_id)
            if agent is not None and task_id not in record.tasks:   # its terminal update is on its way
                status = new_status(task_id, running.state, agent_id=agent_id, framework_id=info.id,
                                    timestamp=self._wall_clock(), labels=running.task.labels, healthy=running.healthy)
                record.tasks[task_id] = TaskRecord(running.task, info.id, agent_id, status, True, self.clock.now())
                agent.tasks.add((info.id, task_id))

    def _remember_reported(self, agent_id: str, running: m.RunningTask, infos: Mapping[str, FrameworkInfo]) -> None:
        """An agent reports an ended task of a framework this master does
        not know: kept (up to _MAX_REPORTED_TASKS) so that the framework,
        should it subscribe under its id, hears of the task's end from that
        agent — and so that no other agent's word about it is believed."""
        framework_id, task_id = running.framework_id, running.task.task_id
        entry = self._reported.get(framework_id)
        if entry is None:
            if self._reported_count >= _MAX_REPORTED_TASKS:
                return
            info = infos.get(framework_id) or FrameworkInfo(name="(recovered)", id=framework_id)
            entry = self._reported[framework_id] = (info, {})
        if task_id not in entry[1]:
            if self._reported_count >= _MAX_REPORTED_TASKS:
                return
            self._reported_count += 1
        entry[1][task_id] = (agent_id, running)

    def _bind_reported(self, reported: Iterable[FrameworkInfo]) -> None:
        """Frameworks a re-registering agent reports with this master's
        receipt for their principal: an unbound one is bound to it; one
        bound to another principal keeps its own (logged once: someone holds
        a receipt of the other principal for this id)."""
        if self.credentials is None or self._receipt_key is None:
            return
        for info in reported:
            checked = self._reported_info(info)
            if not checked.principal:
                continue
            record = self.frameworks.get(info.id)
            if record is None:
                entry = self._reported.get(info.id)
                if entry is not None and not entry[0].principal:
                    self._reported[info.id] = (checked, entry[1])
                continue
            if info.id in self._unbound_frameworks:
                self._unbound_frameworks.discard(info.id)
                record.info = attrs.evolve(record.info, principal=checked.principal,
                                           principal_receipt=checked.principal_receipt)
                self.registry.add_framework(record.info)
                self._registry_changed()
                log.info("framework %s belongs to principal %s (an agent showed the master's receipt)", record.id,
                         clip(checked.principal))
            elif record.info.principal and record.info.principal != checked.principal:
                self._log_drop(info.id, "framework-principal",
                               f"framework {record.id} belongs to principal {clip(record.info.principal)}, but an "
                               f"agent shows a receipt for principal {clip(checked.principal)}: ignored")

    def _admit_agent(self, peer: bytes, info: AgentInfo, used: dict[str, Resources], http_address: str = "") -> None:
        self.allocator.add_agent(info.id, info.resources, attributes=info.attributes, hostname=info.hostname,
                                 used=used)
        self.agents[info.id] = AgentRecord(info=info, peer=peer, registered_at=self.clock.now(),
                                           http_address=http_address)
        self._agent_by_peer[peer] = info.id
        self.agent_owners.hold(self._owner(peer), info.id)
        if info.principal:
            self.agent_principals.hold(info.principal.encode(), info.id)
        if info.id in self._expected_agents:
            self._expected_agents.discard(info.id)
            self._release_held_reconciles(info.id)
        self._earlier_peers.pop(info.id, None)
        if info.id in self.drains:   # drained before a failover (the registry kept it): still no offers
            self.allocator.deactivate_agent(info.id)
        self.registry.admit_agent(info)
        self._registry_changed()
        self._send(peer, self._agent_registered(info))

    def _lose_unreported_tasks(self, agent: AgentRecord, reported: list[m.RunningTask]) -> None:
        """As Mesos does: a task the agent does not report ends TASK_LOST
        (TASK_DROPPED for a partition-aware framework) — it never reached the
        agent, or the agent lost it; those it reports are confirmed."""
        still_running = {(r.framework_id, r.task.task_id) for r in reported}
        for framework_id, task_id in sorted(agent.tasks - still_running):
            found = self._task(framework_id, task_id)
            if found is not None and not found[1].terminal:
                record, task = found
                self.counters["tasks_unreported"] += 1
                self._recover_resources(record, task)  # the agent stays: what the task held is free again
                self._end_by_master(record, task,
                                    TaskState.DROPPED if record.info.partition_aware else TaskState.LOST,
                                    "REASON_RECONCILIATION", "the agent re-registered without this task")
        for framework_id, task_id in still_running:
            found = self._task(framework_id, task_id)
            if found is not None:
                found[1].confirmed = True

    def _agent_for(self, peer: bytes) -> AgentRecord | None:
        agent_id = self._agent_by_peer.get(peer)
        if agent_id is None:
            log.info("message from an unregistered agent connection %s ignored", clip(peer))
            return None
        return self.agents[agent_id]

    def _pong(self, peer: bytes, msg: m.Pong, principal: str | None) -> None:
        agent = self._agent_for(peer)
        if agent is not None:
            if msg.usage or agent.usage:
                agent.usage = {(u.framework_id, u.task_id): u for u in msg.usage if (u.framework_id, u.task_id)
                               in agent.tasks}

    def _unregister_agent(self, peer: bytes, msg: m.UnregisterAgent, principal: str | None) -> None:
        """The agent leaves for good (drained): removed now, not after the
        ping timeouts. Its tasks ended already; any that did not are lost."""
        agent = self._agent_for(peer)
        if agent is None or agent.id != msg.agent_id:
            return
        self._remove_agent(agent, f"it unregistered ({msg.reason or 'no reason given'})", shutdown=False)

    def agent_peers(self) -> dict[str, bytes]:
        """agent id -> its connection, for a later core of this process (``agent_peers``)."""
        peers = {agent.id: agent.peer for agent in self.agents.values()}
        peers.update((a, p) for a, p in self._earlier_peers.items() if a in self._expected_agents)
        return peers

    def _ping_agents(self) -> None:
        for agent_id in sorted(self._expected_agents & self._earlier_peers.keys()):
            # an agent this core does not know yet, on a connection an earlier core of this process
            # knew: it believes it is registered, and would only notice after the ping silence (as
            # Mesos's PingSlaveMessage.connected = false, it re-registers at once)
            self._send(self._earlier_peers[agent_id], m.Ping(agent_id, connected=False))
        for agent in list(self.agents.values()):
            if agent.pings_unanswered >= self.config.max_agent_ping_timeouts:
                if agent.id not in self._removals:
                    self._removals.schedule(agent.id, f"{agent.pings_unanswered} pings unanswered")
                    if self._removals.limit is not None:
                        log.warning("agent %s (%s) failed its health checks: marked unreachable in its turn "
                                    "(agent_removal_rate_limit %s, %d waiting)", agent.id,
                                    clip(agent.info.hostname), self.config.agent_removal_rate_limit,
                                    len(self._removals))
                if self._removals.limit is None:
                    continue   # marked below, at once
            agent.pings_unanswered += 1   # pinged on while it waits for its turn: an answer keeps it
            self._send(agent.peer, m.Ping(agent.id))
        self._mark_due_unreachable(self.clock.now())

    def _mark_due_unreachable(self, now: float) -> None:
        """Mark unreachable the agents whose turn has come (all at once
        without agent_removal_rate_limit)."""
        for agent_id, why in self._removals.due(now):
            agent = self.agents.get(agent_id)
            if agent is not None and agent.pings_unanswered >= self.config.max_agent_ping_timeouts:
                self._mark_unreachable(agent, why)

    def _heard_from_agent(self, agent: AgentRecord) -> None:
        """A message from the agent: it answers its pings; a removal it waits
        for is called off (Mesos's master does the same)."""
        agent.pings_unanswered = 0
        if self._removals and self._removals.cancel(agent.id):
            self.counters["agent_removals_canceled"] += 1
            log.warning("agent %s (%s) answered before its turn to be marked unreachable: it stays", agent.id,
                        clip(agent.info.hostname))

    def _remove_agent(self, agent: AgentRecord, why: str, shutdown: bool = True, gone: str = TaskState.GONE,
                      reason: str = "REASON_AGENT_REMOVED") -> None:
        """The agent is gone for good (it unregistered, or the operator
        marked it gone): its tasks not ended end ``gone`` (TASK_LOST for
        frameworks that are not partition-aware), and it may not come back
        under its id."""
        log.warning("removing agent %s (%s): %s", agent.id, clip(agent.info.hostname), why)
        for framework_id, task_id in sorted(agent.tasks):
            found = self._task(framework_id, task_id)
            if found is not None and not found[1].terminal:
                record, task = found
                task.resources_recovered = True  # the agent's removal returns them
                self._end_by_master(record, task, gone if record.info.partition_aware else TaskState.LOST,
                                    reason, f"agent {agent.id} removed: {why}")
        self._forget_agent(agent, why)
        if shutdown:  # an agent that left on its own needs no telling
            self._send(agent.peer, m.ShutdownAgent(why))
        self.removed_agents.add(agent.id)
        self.registry.remove_agent(agent.id)
        self._registry_changed()
        self.counters["agents_removed"] += 1

    def _forget_agent(self, agent: AgentRecord, why: str) -> None:
        """Take a registered agent out of the allocator and the soft state;
        its offers are rescinded and the frameworks told (AGENT_LOST)."""
        self.allocator.remove_agent(agent.id)
        self._send_rescinds()
        for record in self.frameworks.values():
            if record.connected:
                self._send_framework(record, m.Failure(agent.id, why))
        self._agent_by_peer.pop(agent.peer, None)
        del self.agents[agent.id]
        self.agent_owners.release(agent.id)
        self.agent_principals.release(agent.id)
        self._removals.cancel(agent.id)

    # ============================================================ partitions
    # docs/reliability.rst, "Partitions": Mesos's markUnreachable,
    # _reregisterSlave, registry GC and MARK_AGENT_GONE.

    def _mark_unreachable(self, agent: AgentRecord, why: str) -> None:
        """The agent failed its health checks (Mesos's markUnreachable): out
        of the allocator and the registered agents, into the registry's
        unreachable list. Tasks of partition-aware frameworks become
        TASK_UNREACHABLE and stay known (they come back with the agent);
        the others end TASK_LOST. It may re-register under its id.
        O(its tasks + frameworks)."""
        log.warning("agent %s (%s) marked unreachable: %s", agent.id, clip(agent.info.hostname), why)
        since = self._wall_clock()
        kept: set[tuple[str, str]] = set()
        for framework_id, task_id in sorted(agent.tasks):
            found = self._task(framework_id, task_id)
            if found is None:
                continue
            record, task = found
            task.resources_recovered = True  # the agent's removal returns them
            if task.terminal:
                kept.add((framework_id, task_id))  # ended, told; its acknowledgement waits for the agent
            elif record.info.partition_aware:
                kept.add((framework_id, task_id))
                self._tell_status(record, task, new_status(
                    task.id, TaskState.UNREACHABLE, agent_id=agent.id, framework_id=record.id,
                    message=f"agent {agent.id} is unreachable: {why}", reason="REASON_AGENT_REMOVED",
                    timestamp=since, labels=task.info.labels, healthy=task.status.healthy))
            else:
                self._end_by_master(record, task, TaskState.LOST, "REASON_AGENT_REMOVED",
                                    f"agent {agent.id} removed: {why}")
        self._forget_agent(agent, why)
        self._note_unreachable(UnreachableAgent(agent.id, agent.info.hostname, since, kept,
                                                principal=agent.info.principal))
        self.counters["agents_removed"] += 1

    def _keep_unreachable(self, agent: UnreachableAgent) -> None:
        self.unreachable[agent.id] = agent
        if not agent.tasks_known:
            self._unreachable_unknown.add(agent.id)

    def _forget_unreachable_agent(self, agent_id: str) -> None:
        del self.unreachable[agent_id]
        self._unreachable_unknown.discard(agent_id)

    def _tell_status(self, record: FrameworkRecord, task: TaskRecord, status: TaskStatus) -> None:
        """A state of a live task the master says (no uuid: nothing to
        acknowledge): kept, and sent to the framework if it is connected."""
        task.status = status
        if record.connected:
            self._send_framework(record, m.Update(status))

    def _unreachable_tasks(self, unreachable: UnreachableAgent) -> list[tuple[FrameworkRecord, TaskRecord]]:
        """The tasks still on an unreachable agent (TASK_UNREACHABLE, or ended and not acknowledged)."""
        found = [self._task(*key) for key in sorted(unreachable.tasks)]
        return [(record, task) for record, task in filter(None, found) if task.agent_id == unreachable.id]

    def _drop_unreachable(self, unreachable: UnreachableAgent, state: str, reason: str, why: str) -> None:
        """An unreachable agent is gone for good: its TASK_UNREACHABLE tasks
        end ``state``, its ended tasks are done with, and it may not come
        back under its id (it is told to shut down if it does)."""
        self._forget_unreachable_agent(unreachable.id)
        for record, task in self._unreachable_tasks(unreachable):
            if task.terminal:
                self._complete(record, task)   # the acknowledgement would go nowhere
            else:
                self._end_by_master(record, task, state, reason, why)
        self.removed_agents.add(unreachable.id)
        self.registry.remove_agent(unreachable.id)
        self._registry_changed()

    def _forget_unreachable(self) -> None:
        """Mesos's registry GC: unreachable agents beyond
        ``registry_max_agent_count`` (the oldest) or marked more than
        ``registry_max_agent_age`` ago are gone: their partition-aware tasks
        end TASK_GONE. O(unreachable agents)."""
        config = self.config
        for agent_id in agents_to_forget(self.registry.unreachable, self._wall_clock(), config.registry_max_agent_age,
                                         config.registry_max_agent_count):
            unreachable = self.unreachable.get(agent_id)
            if unreachable is None:  # pragma: no cover - the registry and the core agree
                self.registry.remove_agent(agent_id)
                continue
            why = (f"agent {agent_id} unreachable since {unreachable.since:.0f} is forgotten (registry_max_agent_age "
                   f"{config.registry_max_agent_age:g}s, registry_max_agent_count {config.registry_max_agent_count})")
            log.warning("%s", why)
            self._drop_unreachable(unreachable, TaskState.GONE, "REASON_AGENT_REMOVED", why)
            self.counters["unreachable_agents_forgotten"] += 1

    def mark_agent_gone(self, agent: str) -> tuple[dict, list[Send]]:
        """Mesos's MARK_AGENT_GONE: the agent (an id or a hostname,
        registered or unreachable) is gone for good. Its tasks end
        TASK_GONE_BY_OPERATOR (TASK_LOST for frameworks that are not
        partition-aware), a registered one is told to shut down, and it may
        not come back under its id (docs/reliability.rst)."""
        self._out = []
        why = "marked gone by the operator"
        registered = self.agents.get(agent)
        unreachable = self.unreachable.get(agent)
        if registered is None and unreachable is None:
            named = [u for u in self.unreachable.values() if u.hostname == agent]
            if len(named) == 1:
                unreachable = named[0]
            elif len(named) > 1:
                raise Conflict(f"several unreachable agents have the hostname {clip(agent)!r} "
                               f"({', '.join(sorted(u.id for u in named))}): name one by its id")
            else:
                try:
                    registered = self._operated_agent(agent)
                except NotFound:
                    gone = " (it was removed already)" if agent in self.removed_agents else ""
                    raise NotFound(f"no registered or unreachable agent has the id or hostname "
                                   f"{clip(agent)!r}{gone}") from None
        if registered is not None:
            tasks = len(registered.tasks)
            reply = {"agent_id": registered.id, "hostname": registered.info.hostname, "was": "registered"}
            self._remove_agent(registered, why, gone=TaskState.GONE_BY_OPERATOR,
                               reason="REASON_AGENT_REMOVED_BY_OPERATOR")
        else:
            assert unreachable is not None
            tasks = len(self._unreachable_tasks(unreachable))
            reply = {"agent_id": unreachable.id, "hostname": unreachable.hostname, "was": "unreachable"}
            self._drop_unreachable(unreachable, TaskState.GONE_BY_OPERATOR, "REASON_AGENT_REMOVED_BY_OPERATOR", why)
        self.counters["agents_gone"] += 1
        log.warning("operator: agent %s (%s) marked gone", reply["agent_id"], clip(reply["hostname"]))
        return {**reply, "tasks": tasks}, self._flush()

    def _end_by_master(self, record: FrameworkRecord, task: TaskRecord, state: str, reason: str, why: str) -> None:
        """End a task with a status the master makes up (no uuid: nothing to
        acknowledge), tell the framework, and forget the task."""
        status = new_status(task.id, state, agent_id=task.agent_id, framework_id=record.id, message=why,
                            reason=reason, timestamp=self._wall_clock(), labels=task.info.labels)
        task.status = status
        if self._warned and (record.id, task.id) in self._warned:
            self._preemption_ended((record.id, task.id))
        if record.connected:
            self._send_framework(record, m.Update(status))
        self._complete(record, task)

    def _heartbeat(self, peer: bytes, msg: m.Heartbeat, principal: str | None) -> None:
        pass  # _note_heard does the work

    def _get_state(self, peer: bytes, msg: m.GetState, principal: str | None) -> None:
        self._send(peer, m.StateReply(json.dumps(state_json(self))))

    # ============================================================== plumbing
    def _note_heard(self, peer: bytes) -> None:
        framework_id = self._framework_by_peer.get(peer)
        if framework_id is not None:
            self.frameworks[framework_id].last_heard = self.clock.now()
            return
        agent_id = self._agent_by_peer.get(peer)
        if agent_id is not None:
            # any message answers the pings, as any message is a framework's
            # heartbeat: an agent launching 5,000 tasks sends their updates
            # long before it reads the PINGs queued behind the RUN_TASKs
            self._heard_from_agent(self.agents[agent_id])

    def _send(self, peer: bytes | None, message: object) -> None:
        if peer is not None:
            self._out.append(Send(peer, message))

    def _send_framework(self, record: FrameworkRecord, message: object) -> None:
        record.last_sent = self.clock.now()
        self._send(record.peer, message)

    def _error(self, peer: bytes, text: str, fatal: bool = False) -> None:
        """ERROR to ``peer``. The text may quote what the peer sent: it is cut
        to MAX_ERROR_TEXT (the log line to less), so an answer never echoes
        unbounded input."""
        log.info("error to %s: %s", clip(peer), clip(text))
        self._send(peer, m.Error(clip(text, MAX_ERROR_TEXT), fatal))

    def _flush(self) -> list[Send]:
        out, self._out = self._out, []
        return out

    _HANDLERS: dict[type, Callable] = {
        m.Subscribe: _subscribe, m.Teardown: _teardown, m.Accept: _accept, m.Decline: _decline,
        m.Revive: _revive, m.Suppress: _suppress, m.Kill: _kill, m.Acknowledge: _acknowledge,
        m.Reconcile: _reconcile, m.FrameworkMessage: _framework_message, m.Heartbeat: _heartbeat,
        m.RegisterAgent: _register_agent, m.ReregisterAgent: _reregister_agent, m.Pong: _pong,
        m.UnregisterAgent: _unregister_agent, m.ExecutorExited: _executor_exited,
        m.StatusUpdate: _status_update, m.GetState: _get_state,
    }
    #: the batches a master takes (the others are the master's to send)
    _ACCEPTED_BATCHES = frozenset({m.StatusUpdates, m.Acknowledgements})


def _delivered_state(running: m.RunningTask) -> str:
    """What the framework of a task an agent lists hears next (or has heard last)."""
    return running.update_state if running.update_state in TaskState.ALL else running.state


def _text_problem(what: str, value: str) -> str | None:
    if len(value) > MAX_NAME_LENGTH:
        return f"{what} of {len(value)} characters is longer than {MAX_NAME_LENGTH}"
    return None


def _framework_problem(info: FrameworkInfo) -> str | None:
    """Why the master will not keep ``info`` (fields longer than it stores), or None."""
    for what, value in (("the id", info.id), ("the name", info.name), ("the role", info.role),
                        ("the user", info.user), ("the hostname", info.hostname),
                        ("min_allocatable", info.min_allocatable)):
        problem = _text_problem(what, value)
        if problem is not None:
            return problem
    return None


def _agent_problem(info: AgentInfo) -> str | None:
    """Why the master will not keep ``info`` (fields longer, or attributes
    more, than it stores), or None."""
    for what, value in (("the id", info.id), ("the hostname", info.hostname)):
        problem = _text_problem(what, value)
        if problem is not None:
            return problem
    if len(info.attributes) > MAX_ATTRIBUTES:
        return f"{len(info.attributes)} attributes are more than {MAX_ATTRIBUTES}"
    for key, value in info.attributes.items():
        problem = _text_problem("an attribute", key) or _text_problem("an attribute's value", value)
        if problem is not None:
            return problem
    return None
