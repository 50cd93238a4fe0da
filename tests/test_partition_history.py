"""The partition suite's checker (tests/partition_history.py) on histories written by hand: it flags
each broken promise of docs/reliability.rst and accepts what is documented."""

import pytest

from partition_history import check_framework, check_leaders, leadership_terms

pytestmark = pytest.mark.timeout(10)


def history(*tasks, removed_at=None):
    """``tasks``: (task id, [(state, reason or "", uuid or "", agent)...]) in order, after a start,
    a registration with master m1 and an offer from it."""
    events = [{"ev": "start", "name": "fw1", "m": 0.0}, {"ev": "registered", "master": "m1", "m": 1.0},
              {"ev": "offer", "offer": "m1-O1", "agent": "a1", "master": "m1", "m": 2.0}]
    clock = 3.0
    for task_id, updates in tasks:
        events.append({"ev": "launch", "task": task_id, "agent": "a1", "offer": "m1-O1", "m": clock})
        for state, reason, uuid, agent in updates:
            clock += 1.0
            events.append({"ev": "status", "task": task_id, "state": f"TASK_{state}", "reason": reason,
                           "source": "", "agent": agent, "uuid": uuid, "message": "", "m": clock})
    if removed_at is not None:
        events.append({"ev": "error", "message": "framework fw removed: failover timeout expired", "m": removed_at})
    return events


RUNS = [("RUNNING", "", "u1", "a1"), ("FINISHED", "", "u2", "a1")]


def test_a_plain_history_holds_and_is_summed_up():
    problems, summary = check_framework(history(
        ("t1", RUNS),
        ("t2", [("RUNNING", "", "u3", "a1"), ("UNREACHABLE", "REASON_AGENT_REMOVED", "", "a1"),
                ("RUNNING", "REASON_AGENT_REREGISTERED", "", "a1"), ("KILLED", "", "u4", "a1"),
                ("KILLED", "REASON_RECONCILIATION", "", "a1")]),
        ("t3", [("LOST", "REASON_RECONCILIATION", "", "")])))   # never reached the master: reconciled
    assert problems == []
    assert (summary.tasks, summary.updates, summary.reconciliation_answers) == (3, 8, 2)
    assert summary.ended == {"TASK_FINISHED": 1, "TASK_KILLED": 1, "TASK_LOST": 1}
    assert summary.unreachable_then_running == 1


@pytest.mark.parametrize("updates, found", [
    ([("FINISHED", "REASON_RECONCILIATION", "", "a1"), ("RUNNING", "", "u1", "a1"),
      ("FINISHED", "", "u2", "a1")], "followed by another state"),
    ([("RUNNING", "", "u1", "a1"), ("LOST", "REASON_RECONCILIATION", "", "a1"), ("FINISHED", "", "u2", "a1")],
     "followed by another state"),
    ([("LOST", "REASON_AGENT_REMOVED", "", "a1"), ("LOST", "REASON_AGENT_REMOVED", "", "a1")],
     "2 terminal updates"),
    ([("RUNNING", "", "u1", "a1"), ("UNREACHABLE", "REASON_AGENT_REMOVED", "", "a1"),
      ("LOST", "REASON_RECONCILIATION", "", "a1")], "UNREACHABLE and then TASK_LOST"),
    ([("RUNNING", "", "u1", "a1"), ("UNREACHABLE", "REASON_AGENT_REMOVED", "", "a1")], "never ended"),
    ([("RUNNING", "", "u1", "a1"), ("RUNNING", "", "u2", "a2"), ("FINISHED", "", "u3", "a2")], "ran on 2 agents"),
])
def test_each_broken_promise_is_found(updates, found):
    problems, _ = check_framework(history(("t1", updates)))
    assert len(problems) == 1 and found in problems[0], problems


def test_a_retried_terminal_update_is_one_update():
    problems, _ = check_framework(history(("t1", [*RUNS, ("FINISHED", "", "u2", "a1")])))
    assert problems == []


def test_tasks_of_a_removed_framework_may_end_unheard():
    running = [("RUNNING", "", "u1", "a1")]
    assert check_framework(history(("t1", running), removed_at=100.0))[0] == []
    assert "never ended" in check_framework(history(("t1", running)))[0][0]


def test_an_offer_from_another_master_than_the_one_subscribed_to_is_found():
    events = history(("t1", RUNS))
    events.append({"ev": "offer", "offer": "m2-O7", "agent": "a1", "master": "m2", "m": 50.0})
    (problem,) = check_framework(events)[0]
    assert "from master m2 while subscribed to m1" in problem


def test_two_masters_leading_at_once_are_found_a_handover_is_not():
    handover = [(0.0, "m1", True), (0.01, "m2", False), (5.0, "m1", False), (5.01, "m2", True)]
    assert check_leaders(handover) == []
    (problem,) = check_leaders([(0.0, "m1", True), (0.05, "m2", True)])
    assert "m1 and m2 both led" in problem


def lost_unknown_then_found(new_master_between: bool, reason: str = "REASON_RECONCILIATION",
                            message: str = "unknown task") -> list[dict]:
    """A TASK_LOST the master made (by default a reconciliation's "unknown task"), then the task's own
    RUNNING and FINISHED — through the same master, or after the framework re-registered with another one."""
    events = history(("t1", [("LOST", reason, "", "")]))
    events[-1].update(message=message, source="SOURCE_MASTER")
    if new_master_between:
        events.append({"ev": "reregistered", "master": "m2", "m": 20.0})
    for n, (state, uuid) in enumerate((("RUNNING", "u1"), ("FINISHED", "u2"))):
        events.append({"ev": "status", "task": "t1", "state": f"TASK_{state}", "reason": "", "source": "",
                       "agent": "a1", "uuid": uuid, "message": "", "m": 21.0 + n})
    return events


def test_a_task_reconciled_lost_then_found_through_the_same_master_is_a_broken_promise():
    problems, summary = check_framework(lost_unknown_then_found(new_master_between=False))
    assert len(problems) == 1 and "followed by another state" in problems[0] and summary.lost_then_found == 0


def test_a_task_reconciled_lost_by_a_master_that_then_failed_over_is_counted_not_failed():
    problems, summary = check_framework(lost_unknown_then_found(new_master_between=True))
    assert problems == [] and summary.lost_then_found == 1 and summary.ended == {"TASK_FINISHED": 1}


def test_a_task_lost_with_its_agent_marked_unreachable_then_found_by_the_next_master_is_counted():
    """The master that marked the agent unreachable said TASK_LOST and lost leadership; the agent came back
    to its successor, which lets the task run on (Mesos's master kills only what it marked itself)."""
    events = lost_unknown_then_found(True, "REASON_AGENT_REMOVED", "agent a1 removed: 6 pings unanswered")
    problems, summary = check_framework(events)
    assert problems == [] and summary.lost_then_found == 1
    problems, _ = check_framework(lost_unknown_then_found(False, "REASON_AGENT_REMOVED", "agent a1 removed"))
    assert any("followed by another state" in problem for problem in problems), problems


MASTER_LOG = """\
2026-11-29 20:00:00,000 INFO mesoslike.master: master m1 leads (0 agents and 0 frameworks in the registry)
2026-11-29 20:00:05,000 WARNING mesoslike.master.runtime: master m1 steps down: soft state kept in case the session survives (x)
2026-11-29 20:00:06,000 NOTICE mesoslike.master.runtime: master m1 leads again under the same znode: soft state kept
2026-11-29 20:00:30,500 NOTICE mesoslike.master.runtime: master m1 leads (3 agents and 2 frameworks in the registry)
"""


def test_leadership_terms_are_read_from_the_masters_logs():
    """A core kept over a blip ("leads again under the same znode") is the same term; a new core is another."""
    import datetime
    terms = leadership_terms(MASTER_LOG.splitlines())
    began = [datetime.datetime(2026, 11, 29, 20, 0, 0).timestamp(), datetime.datetime(2026, 11, 29, 20, 0, 30, 500000).timestamp()]
    assert terms == {"m1": began}


def test_a_task_reconciled_lost_then_found_after_the_same_master_was_elected_again_is_counted():
    """The same master id, elected again: its new core knew nothing of what the old one said, as another
    master would not; re-registering within the same term is not enough."""
    terms = leadership_terms(MASTER_LOG.splitlines())
    second_term = terms["m1"][1]

    def events(reregistered_at: float) -> list[dict]:
        found = lost_unknown_then_found(new_master_between=False)
        for event in found:
            if event["ev"] == "registered":
                event["t"] = terms["m1"][0] + 1.0
        found.insert(-2, {"ev": "reregistered", "master": "m1", "m": 20.0, "t": reregistered_at})
        return found
    problems, summary = check_framework(events(second_term + 1.0), terms)
    assert problems == [] and summary.lost_then_found == 1
    problems, summary = check_framework(events(second_term - 10.0), terms)   # the same term, subscribed again
    assert len(problems) == 1 and "followed by another state" in problems[0] and summary.lost_then_found == 0
