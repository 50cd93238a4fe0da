"""The master's public views: ``/state`` JSON and ``/metrics`` text (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mesoslike import __version__
from mesoslike.resources import Resources
from mesoslike.wire import TaskState

if TYPE_CHECKING:
    from mesoslike.master.core import MasterCore
    from mesoslike.master.records import TaskRecord

__all__ = ["state_json", "metrics_text"]

EMPTY = Resources()


def _task_json(core: MasterCore, task: TaskRecord) -> dict:
    agent = core.agents.get(task.agent_id)
    usage = agent.usage.get((task.framework_id, task.id)) if agent is not None else None
    return {
        "id": task.id,
        "name": task.info.name,
        "state": task.state,
        "agent_id": task.agent_id,
        "hostname": agent.info.hostname if agent is not None else "",
        "resources": str(task.info.resources),
        "message": task.status.message,
        "exit_code": task.status.exit_code,
        # as its agent measured it at its last PONG (None until then, or once it ended)
        "usage": None if usage is None or task.terminal else usage.statistics(),
    }


def state_json(core: MasterCore) -> dict:
    """DESIGN §3.4's state document (plus a few extras). O(agents + tasks)."""
    allocator = core.allocator
    stats = allocator.statistics()
    used_by_agent: dict[str, Resources] = {}
    frameworks = []
    for record in sorted(core.frameworks.values(), key=lambda r: r.id):
        used = EMPTY
        for task in record.tasks.values():
            if not task.terminal:
                used = used + task.info.resources
                used_by_agent[task.agent_id] = used_by_agent.get(task.agent_id, EMPTY) + task.info.resources
        offered = EMPTY
        for offer in allocator.outstanding_offers(record.id):
            offered = offered + offer.resources
        frameworks.append({
            "id": record.id,
            "name": record.info.name,
            "role": record.info.role,
            "connected": record.connected,
            "failover_timeout": record.info.failover_timeout,
            "used": str(used),
            "offered": str(offered),
            "dominant_share": stats.framework_shares.get(record.id, 0.0),
            "tasks": [_task_json(core, t) for t in sorted(record.tasks.values(), key=lambda t: t.id)],
            "completed_tasks": [_task_json(core, t) for t in record.completed[-100:]],
        })
    agents = [
        {
            "id": agent.id,
            "hostname": agent.info.hostname,
            "resources": str(agent.info.resources),
            "used": str(used_by_agent.get(agent.id, EMPTY)),
            "available": str(allocator.available(agent.id)),
            "attributes": dict(agent.info.attributes),
            "http_address": agent.http_address,  # its /files, /state, /monitor/statistics
            # every agent listed is registered on a live connection: one whose
            # pings go unanswered is removed, not kept as disconnected
            "connected": True,
        }
        for agent in sorted(core.agents.values(), key=lambda a: a.id)
    ]
    offers = [
        {"id": o.id, "framework_id": o.framework_id, "agent_id": o.agent_id, "hostname": o.hostname,
         "resources": str(o.resources)}
        for o in allocator.outstanding_offers()
    ]
    roles_config = getattr(core, "roles_config", None)  # the roles file in force, set by the runtime
    policy = getattr(core, "preemption", None)
    preemption = None
    if policy is not None:  # fair-share preemption is on
        preemption = policy.state()
        preemption["preferred"] = [{"agent_id": agent_id, "role": role, "until": until}
                                   for agent_id, (role, until) in allocator.preferences().items()]
    return {
        "leader": {"id": core.info.id, "address": core.info.address, "http_address": core.info.http_address},
        "is_leader": True,
        "version": __version__,
        "agents": agents,
        "frameworks": frameworks,
        "offers": offers,
        "roles": {role: share for role, share in sorted(stats.role_shares.items())},
        "total": str(stats.total),
        "allocated": str(stats.allocated),
        "roles_config": roles_config.to_json() if roles_config is not None else None,
        "preemption": preemption,
    }


def _line(lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
    lines.append(f"# HELP mesoslike_{name} {help_text}")
    lines.append(f"# TYPE mesoslike_{name} {kind}")
    for labels, value in samples:
        lines.append(f"mesoslike_{name}{labels} {value:g}" if isinstance(value, float) else
                     f"mesoslike_{name}{labels} {value}")


def metrics_text(core: MasterCore) -> str:
    """Prometheus text exposition format (version 0.0.4)."""
    stats = core.allocator.statistics()
    by_state = {state: 0 for state in TaskState.ALL}
    for record in core.frameworks.values():
        for task in record.tasks.values():
            by_state[task.state] = by_state.get(task.state, 0) + 1
        for task in record.completed:
            by_state[task.state] = by_state.get(task.state, 0) + 1
    lines: list[str] = []
    _line(lines, "allocation_cycle_seconds", "gauge", "Duration of the last allocation cycle.",
          [("", float(stats.last_cycle_duration))])
    _line(lines, "allocation_cycles_total", "counter", "Allocation cycles run.", [("", stats.cycles)])
    _line(lines, "offers_made_total", "counter", "Offers made.", [("", stats.offers_made)])
    _line(lines, "offers_declined_total", "counter", "Offers declined.", [("", stats.offers_declined)])
    _line(lines, "offers_accepted_total", "counter", "Offers accepted.", [("", stats.offers_accepted)])
    _line(lines, "offers_rescinded_total", "counter", "Offers rescinded.", [("", stats.offers_rescinded)])
    _line(lines, "offers_filtered_total", "counter", "Frameworks skipped for a decline filter.",
          [("", stats.offers_filtered)])
    _line(lines, "offers_outstanding", "gauge", "Offers not yet answered.", [("", stats.outstanding_offers)])
    _line(lines, "tasks", "gauge", "Tasks known to the master by state (completed ones kept for /state).",
          [(f'{{state="{state}"}}', count) for state, count in sorted(by_state.items())])
    _line(lines, "tasks_launched_total", "counter", "Tasks sent to agents.",
          [("", core.counters["tasks_launched"])])
    _line(lines, "agents_registered", "gauge", "Registered agents.", [("", len(core.agents))])
    _line(lines, "agents_removed_total", "counter", "Agents removed (ping timeouts).",
          [("", core.counters["agents_removed"])])
    connected = sum(1 for r in core.frameworks.values() if r.connected)
    _line(lines, "frameworks_registered", "gauge", "Frameworks known (connected or in failover).",
          [("", len(core.frameworks))])
    _line(lines, "frameworks_connected", "gauge", "Connected frameworks.", [("", connected)])
    _line(lines, "messages_received_total", "counter", "Messages received.",
          [("", core.counters["messages_received"])])
    _line(lines, "bad_messages_total", "counter", "Frames that did not decode.",
          [("", core.counters["bad_messages"])])
    _line(lines, "preemptions_total", "counter",
          "Fair-share preemption: tasks warned, killed at their deadline, released after a warning.",
          [(f'{{kind="{kind}"}}', core.counters[f"preemptions_{kind}"]) for kind in ("warned", "killed", "released")])
    _line(lines, "agent_registration_retries_total", "counter",
          "Agent registrations received again, byte for byte, and answered without handling them again.",
          [("", core.counters["registration_retries"])])
    return "\n".join(lines) + "\n"
