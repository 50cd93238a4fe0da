"""``mesoslike state``: print a master's state."""

from __future__ import annotations

import json

import click

from mesoslike.attributes import SCALAR, format_value
from mesoslike.cli.master_client import NEEDS_KEYS, fetch_state, handshake_refusal
from mesoslike.cli.options import (client_key_options, config_option, die, logging_option, option, timeout_option,
                                   token_option)
from mesoslike.errors import MesoslikeError

__all__ = ["state", "fetch_state", "format_state", "table", "handshake_refusal", "NEEDS_KEYS"]

#: the most recent completed tasks the tables show (--json has them all)
COMPLETED_TASKS_SHOWN = 20


def table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    return ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
            for row in [header, *rows]]


def format_state(doc: dict) -> str:
    """The state document as tables a person can read."""
    lines = [f"leader {doc['leader']['id']} at {doc['leader']['address']} (HTTP {doc['leader']['http_address']})",
             f"total {doc['total'] or '-'}; allocated {doc['allocated'] or '-'}", ""]
    lines.append(f"agents ({len(doc['agents'])})")
    lines += table([[a["id"], a["hostname"], (a.get("drain_info") or {}).get("state", "active"), a["resources"],
                      a["used"] or "-", a["available"] or "-",
                      ";".join(f"{k}:{format_value(SCALAR, v) if isinstance(v, float) else v}"   # 3, not 3.0
                               for k, v in sorted(a["attributes"].items())) or "-"]
                     for a in doc["agents"]],
                    ["id", "hostname", "state", "resources", "used", "available", "attributes"])
    recovered = doc.get("recovered_agents") or []
    if recovered:   # a new leader's registry knows them; they have not re-registered yet
        lines += ["", f"agents expected back after the failover ({len(recovered)})"]
        lines += table([[a["id"], a["hostname"], a["resources"]] for a in recovered], ["id", "hostname", "resources"])
    lines += ["", f"frameworks ({len(doc['frameworks'])})"]
    lines += table([[f["id"], f["name"], f["role"], "yes" if f["connected"] else "no", f"{f['dominant_share']:.3f}",
                      f["used"] or "-", f["offered"] or "-", str(len(f["tasks"]))]
                     for f in doc["frameworks"]],
                    ["id", "name", "role", "connected", "share", "used", "offered", "tasks"])
    tasks = [[f["id"], t["id"], t["state"], _health(t.get("healthy")), t["hostname"], t["resources"]]
             for f in doc["frameworks"] for t in f["tasks"]]
    lines += ["", f"tasks ({len(tasks)})"] + table(tasks, ["framework", "task", "state", "health", "host",
                                                             "resources"])
    lines += _offer_blocker_lines(doc)
    lines += _completed_lines(doc)
    lines += ["", f"offers outstanding: {len(doc['offers'])}"]
    lines += _role_lines(doc)
    reservations = {role: r for role, r in (doc.get("reservations") or {}).items() if r["reserved"]}
    if reservations:
        lines += ["", f"reservations ({len(reservations)} roles)"]
        lines += table([[role, r["reserved"], r["allocated_reserved"] or "-", r["allocated_unreserved"] or "-"]
                         for role, r in reservations.items()],
                        ["role", "reserved", "allocated reserved", "allocated unreserved"])
    dynamic = [[a["id"], a["hostname"], r["role"], r["principal"] or "(anonymous)", r["resources"]]
               for a in [*doc["agents"], *recovered] for r in a.get("reservations", []) if r["type"] == "dynamic"]
    if dynamic:
        lines += ["", f"dynamic reservations ({len(dynamic)})"]
        lines += table(dynamic, ["agent", "hostname", "role", "principal", "resources"])
    if doc.get("preemption"):
        lines += ["", *_preemption_lines(doc["preemption"])]
    return "\n".join(lines)


def _offer_blocker_lines(doc: dict) -> list[str]:
    """Why frameworks get no offers (``offer_blockers`` of each), one line a reason."""
    lines = []
    for framework in doc["frameworks"]:
        for blocker in framework.get("offer_blockers") or []:
            lines.append(f"  {framework['id']} ({framework['name']}): {blocker['reason']}: {blocker['message']}")
    return ["", "why frameworks get no offers", *lines] if lines else []


def _role_lines(doc: dict) -> list[str]:
    """Per role with a share, a weight or quota: its share, weight, guarantee, limit, consumption."""
    shares, weights, quota = doc.get("roles") or {}, doc.get("weights") or {}, doc.get("quota") or {}
    roles = sorted(set(shares) | set(weights) | set(quota))
    if not roles:
        return []
    rows = [[role, f"{shares[role]:.3f}" if role in shares else "-", f"{weights.get(role, 1.0):g}",
             (quota.get(role) or {}).get("guarantee") or "-", (quota.get(role) or {}).get("limit") or "-",
             (quota.get(role) or {}).get("consumed") or "-"] for role in roles]
    return ["", f"roles ({len(roles)})", *table(rows, ["role", "share", "weight", "guarantee", "limit", "consumed"])]


def _health(healthy: object) -> str:
    """A task's latest health verdict in a word: ``-`` when it has no check, or none has ended yet."""
    return "-" if healthy is None else "healthy" if healthy else "unhealthy"


def _completed_lines(doc: dict) -> list[str]:
    """The history: completed tasks (the most recent, of live and completed
    frameworks) and completed frameworks."""
    completed = doc.get("completed_frameworks", [])
    ended = [(t.get("timestamp") or 0.0, i, f["id"], t) for i, (f, t) in enumerate(
        (f, t) for f in [*doc["frameworks"], *completed] for t in f.get("completed_tasks", []))]
    ended.sort(key=lambda item: item[:2])
    shown = ended[-COMPLETED_TASKS_SHOWN:]
    lines = ["", f"completed tasks ({len(ended)}" + (f", the last {len(shown)}" if len(shown) < len(ended) else "")
             + ")"]
    lines += table([[framework, t["id"], t["state"], t["hostname"] or t["agent_id"], t["message"] or "-"]
                     for _, _, framework, t in shown], ["framework", "task", "state", "host", "message"])
    if completed:
        lines += ["", f"completed frameworks ({len(completed)})"]
        lines += table([[f["id"], f["name"], f["role"], str(len(f["completed_tasks"])), f.get("removal_reason", "")]
                         for f in completed], ["id", "name", "role", "tasks", "why"])
    return lines


def _preemption_lines(preemption: dict) -> list[str]:
    """Fair-share preemption: one line per role with work of its own."""
    counters = preemption.get("counters", {})
    lines = ["fair-share preemption: " + ", ".join(f"{counters.get(k, 0)} {k}" for k in ("warned", "killed",
                                                                                        "released"))]
    for role, entry in preemption.get("roles", {}).items():
        if "starved" not in entry:
            continue  # a parent without work of its own
        line = f"  {role}: fair share {entry['fair_share'] or '-'}, usage {entry['usage'] or '-'}"
        if entry.get("starved"):
            line += f", STARVED by {entry['starved']}"
        elif entry.get("fair_share_starved_since") is not None:
            line += f", below its target since {entry['fair_share_starved_since']:.1f}"
        if entry.get("preempting"):
            line += f", preempting {len(entry['preempting'])} task(s) for it"
        lines.append(line)
    return lines


@click.command()
@config_option("state")
@option("", "--master", "master_address", required=True,
        help="The master: tcp://HOST:PORT, zk://HOST:PORT[,...]/PATH to ask the leader, or its http(s)://HOST:PORT "
             "(GET /state; --token if it guards reads).")
@option("state", "--json", "as_json", is_flag=True, default=False, show_default="off",
        help="Print the raw JSON document (the same as GET /state).")
@timeout_option("state")
@token_option
@client_key_options
@logging_option("state")
def state(master_address: str, as_json: bool, timeout: float, token: str | None, key: str | None,
          master_key: str | None) -> None:
    """Print the cluster state: agents, frameworks, tasks, offers, shares,
    roles (weights, quota) and why frameworks get no offers."""
    try:
        doc = fetch_state(master_address, timeout, key, master_key, token)
    except MesoslikeError as exc:
        die(str(exc))
    click.echo(json.dumps(doc, indent=2) if as_json else format_state(doc))
