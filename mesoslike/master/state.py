"""The master's public views: ``/state`` JSON and ``/metrics`` text (pure).

``/state`` is taken in two steps so that the master's lock is held only for
the cheap one: :func:`snapshot` (under the lock: references to immutable
values) and :func:`render_state` (no lock: strings and dicts)."""

from __future__ import annotations

import functools
from operator import attrgetter
from typing import TYPE_CHECKING, Mapping

import attrs
import msgspec

from mesoslike import __version__
from mesoslike.allocator import AllocatorStatistics
from mesoslike.attributes import attributes_json
from mesoslike.master.records import built_status
from mesoslike.master.reservations import reservations_json
from mesoslike.observations import Metric, metric
from mesoslike.resources import Resources
from mesoslike.wire import TERMINAL_STATES, AgentInfo, FrameworkInfo, Offer, TaskInfo, TaskState, TaskStatus

if TYPE_CHECKING:
    from mesoslike.master.core import MasterCore
    from mesoslike.master.history import CompletedFramework
    from mesoslike.master.records import TaskRecord
    from mesoslike.wire.messages import TaskUsage

__all__ = ["state_json", "master_metrics", "transport_metrics", "snapshot", "render_state", "StateSnapshot",
           "FrameworkLine", "quota_by_role", "quota_json", "weights_json", "labels_json"]

EMPTY = Resources()

#: a task as /state shows it: what it runs, its latest status, its agent and its framework
TaskLine = tuple[TaskInfo, TaskStatus, str, str]
#: a TaskRecord's TaskLine, taken in C: the snapshot's per-task cost (~0.1 µs; a Python
#: function per task made a snapshot of 1,000,000 tasks hold the master's lock for seconds)
_task_line = attrgetter("info", "status", "agent_id", "framework_id")
#: the same, its status as the record holds it — a re-admitted task's may still be the fields
#: of one (records.ReportedStatus), built on first read: the snapshot, under the master's lock,
#: leaves building them to :attr:`FrameworkLine.tasks`, read outside it (the first snapshot
#: after a failover would otherwise build 1,000,000 statuses holding the lock, ~3 s)
_taken_task_line = attrgetter("info", "_status", "agent_id", "framework_id")


def _with_status(line: tuple) -> TaskLine:
    status = line[1]
    if type(status) is not tuple:
        return line
    return line[0], built_status(status), line[2], line[3]


@attrs.frozen
class FrameworkLine:
    info: FrameworkInfo
    connected: bool
    #: its live tasks as taken under the lock (a status may still be a ReportedStatus): read :attr:`tasks`
    taken_tasks: tuple[tuple, ...]
    #: its ended tasks the history keeps, oldest first (records an ended task's are never changed again)
    completed: tuple[TaskRecord, ...]
    #: the roles it asked no offers for (SUPPRESS, or its SUBSCRIBE's suppressed_roles)
    suppressed_roles: tuple[str, ...] = ()

    @functools.cached_property
    def tasks(self) -> tuple[TaskLine, ...]:
        """Its live tasks, each with its status (render_state orders them by
        id): built on first read, outside the master's lock, without
        changing the records (O(tasks))."""
        return tuple(map(_with_status, self.taken_tasks))


@attrs.frozen
class StateSnapshot:
    """What ``/state`` shows, taken from a core at one moment: references to
    immutable values only (infos, statuses, offers, resources, a statistics
    snapshot), so it can be rendered with no lock while the core moves on.
    Taking one is O(agents + tasks + offers) of cheap copies; rendering it
    (:func:`render_state`) is the expensive part (strings, dicts, JSON)."""

    leader: dict[str, str]
    frameworks: tuple[FrameworkLine, ...]
    agents: tuple[tuple[AgentInfo, Resources, str], ...]     # (info, available, HTTP address); render_state orders them by id
    offers: tuple[Offer, ...]
    stats: AllocatorStatistics
    roles_config: dict | None
    preemption: dict | None
    #: the history: removed frameworks, most recent last (immutable, held by reference)
    completed_frameworks: tuple[CompletedFramework, ...] = ()
    #: agent id -> its drain_info (docs/operations.rst)
    drains: Mapping[str, dict] = attrs.field(factory=dict)
    #: agents the registry knows that have not re-registered since this master took over
    recovered_agents: tuple[AgentInfo, ...] = ()
    #: GET /quota's document (:func:`quota_json`)
    quota: Mapping[str, dict] = attrs.field(factory=dict)
    #: role -> weight, of the roles whose weight was set
    weights: Mapping[str, float] = attrs.field(factory=dict)
    #: framework id -> why it gets no offers (frameworks holding an offer are left out)
    offer_blockers: Mapping[str, list[dict]] = attrs.field(factory=dict)
    #: agents marked unreachable: (id, hostname, since) (docs/reliability.rst, "Partitions")
    unreachable_agents: tuple[tuple[str, str, float], ...] = ()
    #: agent id -> its tasks' usage as it measured it at its last PONG (a dict the core
    #: replaces, never changes: held by reference), for the agents that reported some
    usage: Mapping[str, Mapping[tuple[str, str], TaskUsage]] = attrs.field(factory=dict)

    def usage_of(self, line: TaskLine) -> dict | None:
        """A task's usage statistics as measured at its agent's last PONG (None
        until then, or once it ended)."""
        info, status, agent_id, framework_id = line
        measured = self.usage.get(agent_id)
        found = measured.get((framework_id, info.task_id)) if measured else None
        return None if found is None or status.terminal else found.statistics()


def snapshot(core: MasterCore) -> StateSnapshot:
    """The core's state for ``/state`` (call it under the master's lock):
    O(agents + tasks + offers) of references, in the core's order; the
    tasks' part in C (a tuple of fields per task)."""
    allocator = core.allocator
    # references only, no sorting (render_state sorts, outside the lock)
    frameworks = tuple(
        FrameworkLine(record.info, record.connected, tuple(map(_taken_task_line, record.tasks.values())),
                      tuple(record.completed), (record.info.role,) if record.suppressed else ())
        for record in core.frameworks.values())
    agents = tuple((agent.info, allocator.available(agent.id), agent.http_address) for agent in core.agents.values())
    usage = {agent.id: agent.usage for agent in core.agents.values() if agent.usage}
    roles_config = getattr(core, "roles_config", None)  # the roles file in force, set by the runtime
    policy = getattr(core, "preemption", None)
    preemption = None
    if policy is not None:  # fair-share preemption is on
        preemption = policy.state()
        preemption["preferred"] = [{"agent_id": agent_id, "role": role, "until": until}
                                   for agent_id, (role, until) in allocator.preferences().items()]
    return StateSnapshot(
        leader={"id": core.info.id, "address": core.info.address, "http_address": core.info.http_address},
        frameworks=frameworks, agents=agents, offers=tuple(allocator.outstanding_offers()),
        stats=allocator.statistics(), roles_config=roles_config.to_json() if roles_config is not None else None,
        preemption=preemption, completed_frameworks=tuple(core.history.frameworks),
        drains={agent_id: drain.to_json() for agent_id, drain in core.drains.items()},
        recovered_agents=tuple(core.registry.agents[agent_id] for agent_id in core.expected_agents()
                               if agent_id in core.registry.agents),
        quota=quota_by_role(core), weights=allocator.weights(),
        offer_blockers={framework_id: [blocker.to_json() for blocker in blockers]
                        for framework_id, blockers in allocator.offer_blockers().items()},
        unreachable_agents=tuple((u.id, u.hostname, u.since) for u in core.unreachable.values()),
        usage=usage)


def quota_by_role(core: MasterCore) -> dict[str, dict]:
    """Per role with quota: its ``guarantee`` and ``limit`` as set (text,
    explicit zeros kept; None: none) and what its subtree ``consumed``.
    O(roles with quota · depth · kinds)."""
    core.settle()   # (the gate: the agents admitted are booked, what their tasks hold consumed)
    consumed = core.allocator.quota_status()
    return {role: {"guarantee": record.get("guarantee"), "limit": record.get("limit"),
                   "consumed": (consumed.get(role) or {}).get("consumed") or ""}
            for role, record in sorted(core.registry.quota.items())}


def quota_json(quota: Mapping[str, dict]) -> dict:
    """``GET /quota``: Mesos's ``{"configs": [{"role", "guarantees", "limits"}]}``
    (amounts as ``{"cpus": {"value": 2.0}}``), each config with the text
    forms too (``guarantee``, ``limit``, ``consumed``)."""
    def amounts(text: str | None) -> dict[str, dict[str, float]]:
        return {kind: {"value": value} for kind, value in _quantities(text).items()}
    return {"configs": [{"role": role, "guarantees": amounts(entry["guarantee"]), "limits": amounts(entry["limit"]),
                         **entry} for role, entry in sorted(quota.items())]}


def weights_json(weights: Mapping[str, float]) -> list[dict]:
    """``GET /weights``: Mesos's ``[{"role": R, "weight": W}]``."""
    return [{"role": role, "weight": weight} for role, weight in sorted(weights.items())]


def _quantities(text: str | None) -> dict[str, float]:
    """``"cpus:2;gpus:0"`` -> ``{"cpus": 2.0, "gpus": 0.0}`` (a quota's text: scalars, zeros kept)."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(";"))):
        name, _, amount = part.partition(":")
        try:
            out[name.strip()] = float(amount)
        except ValueError:
            continue   # the registry checked it when it was set: never here
    return out


def _task_json(line: TaskLine, hostnames: dict[str, str], usage: dict | None = None) -> dict:
    info, status, agent_id, _ = line
    return {
        "id": info.task_id,
        "name": info.name,
        "state": status.state,
        "agent_id": agent_id,
        "hostname": hostnames.get(agent_id, ""),
        "resources": str(info.resources),
        "message": status.message,
        "exit_code": status.exit_code,
        "timestamp": status.timestamp,   # of its latest status (seconds since the epoch)
        "usage": usage,
        "labels": labels_json(info.labels),
        # its health check's latest verdict, which every update of the task carries (Mesos's
        # statuses[].healthy); None: no check, or none has ended yet
        "healthy": status.healthy,
        # its container on its agent, from its latest update (Mesos's statuses[].container_status):
        # the isolators it got (docs/containers.rst); None: not known (e.g. after a master failover)
        "container_status": msgspec.structs.asdict(status.container_status) if status.container_status else None,
    }


def labels_json(labels: list) -> list[dict[str, str]]:
    """Labels as Mesos's ``/state`` shows them: ``[{"key": ..., "value": ...}]``."""
    return [{"key": label.key, "value": label.value} for label in labels]


def render_state(snap: StateSnapshot) -> dict:
    """The state document of docs/cluster.rst (GET /state, plus a few extras) from a snapshot;
    needs no lock. Frameworks, agents and live tasks by id. O(agents +
    tasks + offers), and the sorting: O(T log T)."""
    stats = snap.stats
    hostnames = {info.id: info.hostname for info, _, _ in snap.agents}
    offered_by: dict[str, Resources] = {}
    for offer in snap.offers:
        offered_by[offer.framework_id] = offered_by.get(offer.framework_id, EMPTY) + offer.resources
    used_by_agent: dict[str, Resources] = {}
    frameworks = []
    for line in sorted(snap.frameworks, key=lambda fw: fw.info.id):
        tasks = sorted(line.tasks, key=lambda task: task[0].task_id)
        used = EMPTY
        for info, status, agent_id, _ in tasks:
            if status.state not in TERMINAL_STATES and status.state != TaskState.UNREACHABLE:
                used = used + info.resources
                used_by_agent[agent_id] = used_by_agent.get(agent_id, EMPTY) + info.resources
        frameworks.append({
            "id": line.info.id,
            "name": line.info.name,
            "role": line.info.role,
            "connected": line.connected,
            "failover_timeout": line.info.failover_timeout,
            "suppressed_roles": list(line.suppressed_roles),
            "labels": labels_json(line.info.labels),
            # the page it serves, if it names one (Mesos's FrameworkInfo.webui_url)
            "webui_url": line.info.webui_url,
            "used": str(used),
            "offered": str(offered_by.get(line.info.id, EMPTY)),
            "dominant_share": stats.framework_shares.get(line.info.id, 0.0),
            # why it gets no offers now ([] while it holds one): mesoslike.allocator.blockers
            "offer_blockers": snap.offer_blockers.get(line.info.id, []),
            "tasks": [_task_json(task, hostnames, snap.usage_of(task)) for task in tasks],
            "completed_tasks": [_task_json(_task_line(task), hostnames) for task in line.completed],
        })
    completed_frameworks = [_completed_framework_json(framework, hostnames)
                            for framework in reversed(snap.completed_frameworks)]   # most recent first
    agents = [
        {
            "id": info.id,
            "hostname": info.hostname,
            "resources": str(info.resources),
            # static reservations (docs/cluster.rst, "Reservations")
            "reserved": str(info.resources.reserved()),
            "unreserved": str(info.resources.unreserved()),
            # per role and reserving principal, static and dynamic (docs/framework-api.rst, "Reservations")
            "reservations": reservations_json(info.resources),
            "used": str(used_by_agent.get(info.id, EMPTY)),
            "available": str(available),
            "attributes": attributes_json(info.attributes),
            "http_address": http_address,  # its /files, /state, /monitor/statistics
            # every agent listed is registered on a live connection: one whose
            # pings go unanswered is removed, not kept as disconnected
            "connected": True,
            # drained or draining by the operator: no offers (docs/operations.rst)
            "deactivated": info.id in snap.drains,
            "drain_info": snap.drains.get(info.id),
        }
        for info, available, http_address in sorted(snap.agents, key=lambda agent: agent[0].id)
    ]
    # Mesos's recovered_slaves: what the registry says of them (resources, dynamic reservations included)
    recovered_agents = [
        {"id": info.id, "hostname": info.hostname, "resources": str(info.resources),
         "reservations": reservations_json(info.resources), "attributes": attributes_json(info.attributes)}
        for info in sorted(snap.recovered_agents, key=lambda info: info.id)
    ]
    offers = [
        {"id": o.id, "framework_id": o.framework_id, "agent_id": o.agent_id, "hostname": o.hostname,
         "resources": str(o.resources)}
        for o in snap.offers
    ]
    return {
        "leader": dict(snap.leader),
        "is_leader": True,
        "version": __version__,
        "agents": agents,
        "recovered_agents": recovered_agents,
        # Mesos's unreachable_slaves: they may re-register under their ids (docs/reliability.rst)
        "unreachable_agents": [{"id": agent_id, "hostname": hostname, "since": since}
                               for agent_id, hostname, since in snap.unreachable_agents],
        "frameworks": frameworks,
        "completed_frameworks": completed_frameworks,
        "offers": offers,
        "roles": {role: share for role, share in sorted(stats.role_shares.items())},
        "reservations": _reservations_json(stats),
        "total": str(stats.total),
        "allocated": str(stats.allocated),
        "roles_config": snap.roles_config,
        "preemption": snap.preemption,
        "quota": {role: dict(entry) for role, entry in snap.quota.items()},
        "weights": dict(snap.weights),
    }


def _reservations_json(stats: AllocatorStatistics) -> dict[str, dict[str, str]]:
    """Per role with reservations or frameworks: what is reserved for it
    (static and dynamic; ``reserved_dynamic`` the dynamic part, its kinds
    naming the reserving principal), and what its frameworks hold of reserved and of unreserved resources."""
    out = {}
    for role in sorted(set(stats.reserved) | set(stats.role_allocated)):
        held = stats.role_allocated.get(role, EMPTY)
        reserved = stats.reserved.get(role, EMPTY)
        out[role] = {"reserved": str(reserved),
                     "reserved_dynamic": str(reserved.dynamically_reserved()),
                     "allocated_reserved": str(held.reserved()),
                     "allocated_unreserved": str(held.unreserved())}
    return out


def _completed_framework_json(framework: CompletedFramework, hostnames: dict[str, str]) -> dict:
    """A removed framework, shaped as a live one (as Mesos's completed_frameworks are)."""
    info = framework.info
    return {
        "id": info.id, "name": info.name, "role": info.role, "connected": False, "active": False,
        "failover_timeout": info.failover_timeout, "suppressed_roles": [], "labels": labels_json(info.labels),
        "used": "", "offered": "", "dominant_share": 0.0,
        "tasks": [], "completed_tasks": [_task_json(_task_line(task), hostnames) for task in framework.tasks],
        "unregistered_time": framework.removed_at, "removal_reason": framework.reason,
    }


def state_json(core: MasterCore) -> dict:
    """The state document of ``core`` now: :func:`render_state` of its :func:`snapshot`."""
    return render_state(snapshot(core))


def _line(lines: list[Metric], name: str, kind: str, help_text: str,
          samples: list[tuple[dict[str, str], float]]) -> None:
    lines.append(metric(name, kind, help_text, samples))


def master_metrics(core: MasterCore, transport: Mapping[str, int] | None = None) -> list[Metric]:
    """What ``/metrics`` shows of ``core``, as plain metric families (the
    runtime renders them through ``prometheus_client``: mesoslike.metrics).
    ``transport``: the socket's delivery counters (the fields of
    :class:`mesoslike.transport.DeliveryStats`), from the runtime."""
    by_state = {state: 0 for state in TaskState.ALL}
    for record in core.frameworks.values():   # (the gate: the records made, the agents admitted booked)
        for task in record.tasks.values():
            by_state[task.state] = by_state.get(task.state, 0) + 1
    stats = core.allocator.statistics()
    completed = {state: 0 for state in TERMINAL_STATES}
    completed.update(core.completed_by_state)
    drains = {"DRAINING": 0, "DRAINED": 0}
    for drain in core.drains.values():
        drains[drain.state] = drains.get(drain.state, 0) + 1
    lines: list[Metric] = []
    _line(lines, "allocation_cycle_seconds", "gauge", "Duration of the last allocation cycle.",
          [({}, float(stats.last_cycle_duration))])
    _line(lines, "allocation_cycles_total", "counter", "Allocation cycles run.", [({}, stats.cycles)])
    _line(lines, "offers_made_total", "counter", "Offers made.", [({}, stats.offers_made)])
    _line(lines, "offers_declined_total", "counter", "Offers declined.", [({}, stats.offers_declined)])
    _line(lines, "offers_accepted_total", "counter", "Offers accepted.", [({}, stats.offers_accepted)])
    _line(lines, "offers_rescinded_total", "counter", "Offers rescinded.", [({}, stats.offers_rescinded)])
    _line(lines, "offers_filtered_total", "counter", "Frameworks skipped for a decline filter.",
          [({}, stats.offers_filtered)])
    _line(lines, "offers_outstanding", "gauge", "Offers not yet answered.", [({}, stats.outstanding_offers)])
    _line(lines, "tasks", "gauge", "Live tasks by state: not completed yet (running, or ended and not acknowledged "
          "yet); ended ones are counted by tasks_completed_total.",
          [({"state": state}, count) for state, count in sorted(by_state.items())])
    _line(lines, "tasks_launched_total", "counter", "Tasks sent to agents.",
          [({}, core.counters["tasks_launched"])])
    _line(lines, "agents_registered", "gauge", "Registered agents.", [({}, len(core.agents))])
    _line(lines, "agents_removed_total", "counter",
          "Agents taken out of the registered ones (marked unreachable, unregistered, marked gone).",
          [({}, core.counters["agents_removed"])])
    _partition_lines(lines, core)
    connected = sum(1 for r in core.frameworks.values() if r.connected)
    _line(lines, "frameworks_registered", "gauge", "Frameworks known (connected or in failover).",
          [({}, len(core.frameworks))])
    _line(lines, "frameworks_connected", "gauge", "Connected frameworks.", [({}, connected)])
    _line(lines, "messages_received_total", "counter", "Messages received.",
          [({}, core.counters["messages_received"])])
    _line(lines, "bad_messages_total", "counter", "Frames that did not decode.",
          [({}, core.counters["bad_messages"])])
    _line(lines, "registrations_repeated_total", "counter",
          "Agent registrations dropped unread as byte-for-byte repeats of one of the same agent still waiting.",
          [({}, core.counters["registrations_repeated"])])
    _line(lines, "preemptions_total", "counter",
          "Fair-share preemption: tasks warned, killed at their deadline, released after a warning.",
          [({"kind": kind}, core.counters[f"preemptions_{kind}"]) for kind in ("warned", "killed", "released")])
    _line(lines, "authorization_refused_total", "counter",
          "Messages refused by the ACLs or by the principal an id belongs to, by the missing permission.",
          [({"permission": permission}, count) for permission, count in sorted(core.refused_by_permission.items())])
    _line(lines, "agent_registration_retries_total", "counter",
          "Agent registrations received again, byte for byte, and answered without handling them again "
          "(or ignored while the registry write of the first is on its way).",
          [({}, core.counters["registration_retries"])])
    _line(lines, "agent_registration_retries_ignored_total", "counter",
          "Agent registrations received again while the registry write of the first was on its way: ignored, "
          "as Mesos ignores a re-registration in progress (the answer goes out once written).",
          [({}, core.counters["registration_retries_ignored"])])
    _line(lines, "tasks_completed_total", "counter",
          "Tasks whose terminal state the framework acknowledged or the master made up (or whose framework was "
          "removed), by that state; a total since this master leads, whatever the history still keeps.",
          [({"state": state}, count) for state, count in sorted(completed.items())])
    _line(lines, "frameworks_completed_total", "counter", "Frameworks removed (torn down, or their failover "
          "timeout expired) since this master leads.", [({}, core.history.frameworks_completed)])
    _line(lines, "frameworks_completed_kept", "gauge", "Removed frameworks the history keeps "
          "(max_completed_frameworks).", [({}, len(core.history.frameworks))])
    _line(lines, "agents_drain", "gauge", "Agents the operator drains, by drain state.",
          [({"state": state}, count) for state, count in sorted(drains.items())])
    _line(lines, "task_launches_resent_total", "counter",
          "RUN_TASKs sent again because the agent had not confirmed the task in time.",
          [({}, core.counters["launches_resent"])])
    _line(lines, "tasks_unconfirmed_total", "counter",
          "Tasks ended TASK_LOST/TASK_DROPPED because their agent never confirmed them.",
          [({}, core.counters["tasks_unconfirmed"])])
    _line(lines, "tasks_unreported_total", "counter",
          "Tasks ended TASK_LOST/TASK_DROPPED because their agent re-registered without them.",
          [({}, core.counters["tasks_unreported"])])
    _line(lines, "agent_reregistrations_stale_total", "counter",
          "Agents' re-registrations ignored as stale: numbered below the report of the same agent process "
          "admitted since (sent before it, delayed in the network), or of an agent process a restart replaced.",
          [({}, core.counters["reregistrations_stale"])])
    _line(lines, "unreported_tasks_kept_total", "counter",
          "Tasks a re-registering agent did not report that were kept: launched after the report was made "
          "(its agent process was the one admitted before).",
          [({}, core.counters["unreported_tasks_kept"])])
    _line(lines, "status_update_retries_total", "counter",
          "Agents' update retries: forwarded again, held back (forwarded moments ago), or acknowledged by "
          "the master (the framework had acknowledged the update, or the task had ended).",
          [({"outcome": outcome}, core.counters[counter]) for outcome, counter in
           (("reforwarded", "updates_reforwarded"), ("held_back", "updates_held_back"),
            ("settled", "updates_settled_by_master"))])
    _line(lines, "reservation_operations_total", "counter",
          "Dynamic reservations made or undone (frameworks' RESERVE/UNRESERVE, the operator's /reserve, /unreserve).",
          [({}, core.counters["reservation_operations"])])
    _line(lines, "accepts_refused_total", "counter",
          "ACCEPTs refused whole for an invalid RESERVE or UNRESERVE (nothing applied).",
          [({}, core.counters["operations_refused"])])
    _line(lines, "status_updates_dropped_total", "counter",
          "Agents' status updates not forwarded, by why: unknown_framework, unknown_task (not placed on that "
          "agent), not_on_agent (the task runs elsewhere), already_terminal (its end came already), "
          "forged_source (SOURCE_MASTER, or SOURCE_EXECUTOR for a task without a custom executor).",
          [({"reason": reason}, core.updates_dropped.get(reason, 0)) for reason in
           ("unknown_framework", "unknown_task", "not_on_agent", "already_terminal", "forged_source")])
    _line(lines, "framework_messages_dropped_total", "counter",
          "Agents' framework messages not forwarded: unknown_executor (no such executor of the framework runs "
          "on that agent).", [({"reason": "unknown_executor"},
                               core.framework_messages_dropped.get("unknown_executor", 0))])
    _bounds_lines(lines, core)
    _latency_lines(lines, core)
    if transport is not None:
        lines += transport_metrics(transport)
    return lines


def _partition_lines(lines: list[Metric], core: MasterCore) -> None:
    """Partitioned agents (docs/reliability.rst, "Partitions")."""
    counters = core.counters
    _line(lines, "agents_unreachable", "gauge", "Agents marked unreachable that may still re-register.",
          [({}, len(core.unreachable))])
    _line(lines, "agent_partition_events_total", "counter",
          "Agents marked unreachable, re-registered after being unreachable, whose removal was called off "
          "(they answered before their turn under agent_removal_rate_limit), marked gone by the operator, and "
          "forgotten by the registry (registry_max_agent_age/count).",
          [({"event": event}, counters[counter]) for event, counter in
           (("unreachable", "agents_unreachable"), ("reachable_again", "agents_reachable_again"),
            ("removal_canceled", "agent_removals_canceled"), ("gone", "agents_gone"),
            ("forgotten", "unreachable_agents_forgotten"))])
    _line(lines, "tasks_killed_on_return_total", "counter",
          "Tasks an agent brought back from a partition whose frameworks had been told TASK_LOST: killed.",
          [({}, counters["tasks_killed_on_return"])])
    _line(lines, "reconcile_answers_held_total", "counter",
          "Reconciliation answers for unknown tasks held until the agents expected back after a failover were.",
          [({}, counters["reconcile_answers_held"])])


def _bounds_lines(lines: list[Metric], core: MasterCore) -> None:
    """The bounds at work (docs/reliability.rst, *Bounds*)."""
    counters = core.counters
    _line(lines, "offers_expired_total", "counter",
          "Offers unanswered for offer_timeout: taken back and counted as declined.",
          [({}, counters["offers_expired"])])
    _line(lines, "registrations_refused_total", "counter",
          "SUBSCRIBEs and agent registrations refused (an id the master did not give, a bound).",
          [({"kind": "framework"}, counters["subscriptions_refused"]),
           ({"kind": "agent"}, counters["agent_registrations_refused"])])
    _line(lines, "reconciliations_refused_total", "counter",
          "RECONCILE requests refused for naming more than max_reconcile_tasks tasks.",
          [({}, counters["reconciliations_refused"])])
    _line(lines, "reconcile_answers_total", "counter", "Reconciliation answers sent.",
          [({}, counters["reconcile_answers"])])
    _line(lines, "reconcile_answers_waiting", "gauge",
          "Reconciliation answers waiting for a later loop turn (reconcile_answers_per_turn).",
          [({}, core.reconcile_answers_waiting())])


def _latency_lines(lines: list[Metric], core: MasterCore) -> None:
    """The latencies people ask for, as histograms (docs/observability.rst)."""
    lines.append(metric("allocation_cycle_duration_seconds", "histogram",
                        "Allocation cycles by duration (allocation_cycle_seconds is the last one's).",
                        core.allocator.cycle_durations.copy()))
    lines.append(metric("offer_round_trip_seconds", "histogram",
                        "Offers by the time from being made to the framework's ACCEPT or DECLINE (offers rescinded "
                        "or expired are not counted).", core.offer_round_trips.copy()))
    lines.append(metric("task_launch_to_running_seconds", "histogram",
                        "Tasks by the time from the master sending RUN_TASK to the agent's first TASK_RUNNING.",
                        core.launches_to_running.copy()))


def transport_metrics(transport: Mapping[str, int]) -> list[Metric]:
    """The socket's delivery counters (docs/reliability.rst, "Back-pressure")."""
    lines: list[Metric] = []
    _line(lines, "transport_frames_sent_total", "counter", "Frames handed to ZeroMQ.", [({}, transport["sent"])])
    _line(lines, "transport_frames_deferred_total", "counter",
          "Frames that waited in the outbox because their peer read slower than the master wrote.",
          [({}, transport["deferred"])])
    _line(lines, "transport_frames_dropped_total", "counter",
          "Frames dropped: the peer was gone, its outbox was full, or the socket closed with them waiting.",
          [({"reason": "unroutable"}, transport["unroutable"]), ({"reason": "overflow"}, transport["overflowed"]),
           ({"reason": "closed"}, transport["unsent_at_close"])])
    _line(lines, "transport_frames_queued", "gauge", "Frames waiting in the outbox now.",
          [({}, transport["queued"])])
    _line(lines, "transport_bytes_queued", "gauge", "Bytes waiting in the outbox now.",
          [({}, transport["queued_bytes"])])
    _line(lines, "transport_frames_queued_peak", "gauge", "The most frames that ever waited in the outbox.",
          [({}, transport["peak_queued"])])
    return lines
