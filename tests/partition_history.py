"""The partition suite's checker: what the frameworks heard, and who led, must hold together.

Pure functions over the histories tests/partition_framework.py writes (one JSON object per line)
and the leadership samples the suite takes. What a framework relies on (docs/reliability.rst):

* every launched task ends with exactly one terminal update delivered by the update stream —
  the agent's, or one the master makes up (TASK_LOST, TASK_DROPPED, TASK_GONE,
  TASK_GONE_BY_OPERATOR) — or, for a task the master never heard of, a terminal reconciliation
  answer; the one documented exception: the tasks of a framework the master removed (its failover
  timeout expired) end without a word to it (it hears ``error`` instead);
* no terminal state is followed by another state (a later reconciliation answer or a retried update
  may repeat the same terminal state, nothing else) — except, counted, a TASK_LOST the master made in a
  leadership term the framework left for another before the task's own updates came (Mesos's case too: a
  term is a master's core from its election to losing leadership, so the same master elected again is
  another term — see ``leadership_terms``);
* a task id never runs on two agents (nor twice on one after it ended);
* TASK_UNREACHABLE is not an end: by the time everything healed, such a task came back (RUNNING) or
  became GONE — never TASK_LOST;
* offers come from the master the framework is subscribed to (the last ``registered`` or
  ``reregistered``), and no two masters lead at the same moment.
"""

from __future__ import annotations

import bisect
import collections
import datetime
import json
import re
from pathlib import Path
from typing import Iterable

import attrs

TERMINAL = frozenset({"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED",
                      "TASK_GONE", "TASK_GONE_BY_OPERATOR"})
RECONCILIATION = "REASON_RECONCILIATION"


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@attrs.define
class Summary:
    """What one history holds, for the report."""

    framework: str = ""
    tasks: int = 0
    updates: int = 0
    reconciliation_answers: int = 0
    ended: collections.Counter = attrs.field(factory=collections.Counter)
    unreachable_then_running: int = 0
    unreachable_then_gone: int = 0
    #: reconciliation answers TASK_LOST "unknown task" for a task its agent later reported (see _check_task)
    lost_then_found: int = 0
    offers: int = 0
    reregistrations: int = 0
    masters: set = attrs.field(factory=set)
    removed: bool = False

    def line(self) -> str:
        ends = ", ".join(f"{state[5:]} {count}" for state, count in sorted(self.ended.items()))
        return (f"{self.framework}: {self.tasks} tasks, {self.updates} updates ({self.reconciliation_answers} "
                f"reconciliation answers), ended: {ends}; UNREACHABLE->RUNNING {self.unreachable_then_running}, "
                f"UNREACHABLE->GONE {self.unreachable_then_gone}, LOST(r)->found {self.lost_then_found}; "
                f"{self.offers} offers from {len(self.masters)} "
                f"masters, {self.reregistrations} re-registrations" + ("; removed by the master" if self.removed else ""))


#: the line a master logs when a new core of it starts serving (mesoslike.master.runtime's _log_leads); a
#: core kept over a ZooKeeper blip logs "leads again under the same znode" instead: the same term
_LEADS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ mesoslike\.master[.\w]*: master (\S+) leads \(")

#: master id -> the wall-clock times its terms began, in order
Terms = dict[str, list[float]]


def leadership_terms(lines: Iterable[str]) -> Terms:
    """When each master's leadership terms began, from the masters' logs.
    A master that loses leadership and is elected again serves from a new
    core that knows only the registry — another term, under the same master
    id — so "the same master" in the checks below means the same term."""
    terms: Terms = collections.defaultdict(list)
    for line in lines:
        found = _LEADS.match(line)
        if found:
            began = datetime.datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            terms[found[2]].append(began)
    return {master: sorted(times) for master, times in terms.items()}


def _term(terms: Terms | None, master: str, at: float) -> tuple[str, int]:
    """The term of ``master`` serving at wall-clock time ``at`` (a
    framework's registration: a new term's core knows no framework until it
    subscribes again, so every update a framework hears comes from the term
    of its latest registration). Without logs, one term per master."""
    began = (terms or {}).get(master, [])
    # logged before the core says anything, to the millisecond below: never after the registration it served
    return master, bisect.bisect_right(began, at)


def check_framework(events: list[dict], terms: Terms | None = None) -> tuple[list[str], Summary]:
    """The violations in one framework's history, and its summary
    (``terms``: from :func:`leadership_terms`)."""
    problems: list[str] = []
    summary = Summary()
    launched: dict[str, dict] = {}
    statuses: dict[str, list[dict]] = collections.defaultdict(list)
    removed_at: float | None = None
    master: str | None = None
    subscribed_to: tuple[str, int] | None = None
    for event in events:
        kind = event["ev"]
        if kind == "start":
            summary.framework = event["name"]
        elif kind == "launch":
            if event["task"] in launched:
                problems.append(f"task {event['task']} launched twice")
            launched[event["task"]] = event
        elif kind == "status":
            statuses[event["task"]].append({**event, "subscribed_to": subscribed_to})
            summary.updates += 1
            summary.reconciliation_answers += event["reason"] == RECONCILIATION
        elif kind in ("registered", "reregistered"):
            master = event["master"]
            subscribed_to = _term(terms, master, event.get("t", 0.0))
            summary.reregistrations += kind == "reregistered"
        elif kind == "offer":
            summary.offers += 1
            summary.masters.add(event["master"])
            if event["master"] != master:
                problems.append(f"offer {event['offer']} from master {event['master']} while subscribed to {master}")
        elif kind == "error" and "removed" in event["message"] and removed_at is None:
            removed_at = event["m"]
            summary.removed = True
    summary.tasks = len(launched)
    for task_id, launch in sorted(launched.items()):
        problems += _check_task(task_id, launch, statuses.get(task_id, []), removed_at, summary)
    unknown = sorted(set(statuses) - set(launched))
    if unknown:
        problems.append(f"updates of tasks never launched: {unknown[:5]}")
    return problems, summary


def _check_task(task_id: str, launch: dict, updates: list[dict], removed_at: float | None,
                summary: Summary) -> list[str]:
    problems = []
    history = " -> ".join(f"{u['state'][5:]}{'(r)' if u['reason'] == RECONCILIATION else ''}" for u in updates)
    # Mesos's one exception, counted in the report: a TASK_LOST the master made (a reconciliation's "unknown
    # task", the agent it marked unreachable, or the completed task repeated to a reconciliation) in a term
    # that then ended, for a task whose agent came back to a later term — of another master or of the same
    # one elected again: that term's core never heard what its predecessor said (no registry keeps tasks, in
    # Mesos neither) and, not being the one that marked the agent, lets its tasks come back as Mesos's master
    # does. The task's own updates that follow are the truth. A term that said TASK_LOST kills the task when
    # the agent comes back to it and says nothing more: a TASK_LOST followed by updates in the same term fails.
    found = [u for u in updates if u["reason"] != RECONCILIATION and u.get("source") != "SOURCE_MASTER"]
    lost_answers = [u for u in updates if u["state"] == "TASK_LOST" and u.get("source") == "SOURCE_MASTER"
                    and any(f["m"] > u["m"] and f["subscribed_to"] != u["subscribed_to"] for f in found)]
    if lost_answers:
        summary.lost_then_found += 1
        updates = [u for u in updates if u not in lost_answers]
    stream_ends = {(u["uuid"] or f"master:{u['state']}:{u['m']}") for u in updates
                   if u["state"] in TERMINAL and u["reason"] != RECONCILIATION}
    first_end = next((u for u in updates if u["state"] in TERMINAL), None)
    if first_end is None:
        if removed_at is None or launch["m"] > removed_at:
            last = updates[-1]["state"] if updates else "nothing"
            problems.append(f"task {task_id} never ended (last heard: {last}; {history or 'no update'})")
    else:
        summary.ended[first_end["state"]] += 1
        if len(stream_ends) > 1:
            problems.append(f"task {task_id} has {len(stream_ends)} terminal updates: {history}")
        after = updates[updates.index(first_end) + 1:]
        if any(u["state"] != first_end["state"] for u in after):
            problems.append(f"task {task_id}: {first_end['state']} followed by another state: {history}")
    running_on = {u["agent"] for u in updates if u["state"] in ("TASK_STARTING", "TASK_RUNNING") and u["agent"]}
    if len(running_on) > 1:
        problems.append(f"task {task_id} ran on {len(running_on)} agents: {sorted(running_on)}")
    unreachable = next((n for n, u in enumerate(updates) if u["state"] == "TASK_UNREACHABLE"), None)
    if unreachable is not None and any(u["state"] == "TASK_LOST" for u in updates[unreachable:]):
        problems.append(f"task {task_id} was TASK_UNREACHABLE and then TASK_LOST (it must come back or be "
                        f"gone): {history}")
    for earlier, later in zip(updates, updates[1:]):
        if earlier["state"] == "TASK_UNREACHABLE" and later["state"] == "TASK_RUNNING":
            summary.unreachable_then_running += 1
        elif earlier["state"] == "TASK_UNREACHABLE" and later["state"] in ("TASK_GONE", "TASK_GONE_BY_OPERATOR"):
            summary.unreachable_then_gone += 1
    return problems


def check_leaders(samples: Iterable[tuple[float, str, bool]], tolerance: float = 0.2) -> list[str]:
    """``samples``: (monotonic time of the answer, master, whether it said it leads). Two masters
    saying they lead within ``tolerance`` seconds of each other is two leaders at once (a handover
    takes the ZooKeeper session timeout: seconds)."""
    leading = sorted((t, name) for t, name, leads in samples if leads)
    problems = []
    for (t1, a), (t2, b) in zip(leading, leading[1:]):
        if a != b and t2 - t1 < tolerance:
            problems.append(f"masters {a} and {b} both led within {t2 - t1:.3f}s (at {t1:.2f})")
    return problems
