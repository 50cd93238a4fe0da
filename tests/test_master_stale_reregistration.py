"""Stale re-registrations (docs/reliability.rst, "Stale re-registrations"): an agent that retries its
re-registration over fresh connections in a lossy network may have an older attempt reach the master
after a newer one was admitted. The older report must neither end the tasks launched since nor move the
agent's connection; a newer report, or one of a restarted agent, is still taken.

CI run 80 (tests/test_partitions.py, 30 % loss + 200 ms delay): the master admitted agent S2's retry,
launched pa2-1..8, heard STARTING and RUNNING, then handled an older retry listing none of them and ended
them TASK_DROPPED ("the agent re-registered without this task") — STARTING -> RUNNING -> DROPPED -> FINISHED.
"""

import random

import pytest

from mesoslike.agent.core import AgentCore, SendToMaster
from mesoslike.clock import FakeClock
from mesoslike.master.state import master_metrics
from mesoslike.metrics import render
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo, MasterInfo, TaskInfo, TaskState, TaskStatus
from mesoslike.wire import messages as m

from test_master_core import AG, AG2, FW, Harness, launch, only, task

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
INFO = AgentInfo("node-0", R("cpus:8;mem:8192"))
OLD = [f"old-{n}" for n in range(3)]        # the tasks both reports list
NEW = [f"pa2-{n}" for n in range(1, 9)]     # launched after the newer report was admitted


def report(h, aid, fid, task_ids, sequence, incarnation="inc-1", **kwargs):
    info = INFO.replace(id=aid)
    running = [m.RunningTask(fid, task(t, aid), TaskState.RUNNING, update_state="") for t in task_ids]
    return m.ReregisterAgent(info, running, [FrameworkInfo("pa", id=fid, partition_aware=True)],
                             incarnation=incarnation, sequence=sequence, **kwargs)


def running_cluster(h):
    """A partition-aware framework with OLD running on an agent of incarnation inc-1 that registered
    and then re-registered with report 1 (the earlier attempt) ... returns (fid, aid)."""
    fid = h.subscribe(partition_aware=True)
    out = h.send(AG, m.RegisterAgent(INFO, incarnation="inc-1"))
    (registered,) = only(out, m.AgentRegistered, AG)
    aid = registered.agent_id
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, *[task(t, aid) for t in OLD])
    for t in OLD:
        h.send(AG, m.StatusUpdate(fid, TaskStatus(t, TaskState.RUNNING, uuid=f"u-{t}")))
    return fid, aid


def start_new_tasks(h, fid, aid):
    (offer,) = h.offers(h.tick(advance=1.0))
    out = launch(h, fid, offer, *[task(t, aid, "cpus:0.5;mem:64") for t in NEW])
    assert [r.task.task_id for r in only(out, m.RunTask, AG2)] == NEW
    for state in (TaskState.STARTING, TaskState.RUNNING):
        for t in NEW:
            h.send(AG2, m.StatusUpdate(fid, TaskStatus(t, state, uuid=f"{state}-{t}")))


def states(h, fid, task_ids):
    tasks = h.core.frameworks[fid].tasks
    return {t: tasks[t].status.state if t in tasks else None for t in task_ids}


def test_an_older_retry_reaching_the_master_after_a_newer_one_ends_no_task_and_moves_no_connection():
    """The exact sequence of CI run 80: retry N admitted, tasks launched and RUNNING, retry N-1 late."""
    h = Harness()
    fid, aid = running_cluster(h)
    older, newer = report(h, aid, fid, OLD, 4), report(h, aid, fid, OLD, 5)
    # the agent lost the master and retried: attempt 5 (over a fresh connection, AG2) came first
    out = h.send(AG2, newer)
    assert only(out, m.AgentRegistered, AG2)[0].agent_id == aid
    assert h.core.agent_book.records[aid].peer == AG2
    start_new_tasks(h, fid, aid)
    assert set(states(h, fid, NEW).values()) == {TaskState.RUNNING}
    # attempt 4, delayed in the network, arrives 3.4 s later over the old connection
    h.clock.advance(3.4)
    out = h.send(AG, older)
    assert not only(out, m.Update), "a stale report ended tasks"
    assert not out, "a stale report was answered"
    assert set(states(h, fid, NEW + OLD).values()) == {TaskState.RUNNING}
    record = h.core.agent_book.records[aid]
    assert record.peer == AG2 and (record.incarnation, record.sequence) == ("inc-1", 5)
    assert h.core.counters["reregistrations_stale"] == 1 and h.core.counters["tasks_unreported"] == 0
    assert "mesoslike_agent_reregistrations_stale_total 1" in render(master_metrics(h.core))
    # pings still go to the agent's live connection
    assert only(h.tick(advance=1.0), m.Ping, AG2)


def test_a_retry_whose_answer_was_lost_is_admitted_and_answered():
    h = Harness()
    fid, aid = running_cluster(h)
    h.send(AG2, report(h, aid, fid, OLD, 1))      # admitted; its answer is lost with the connection
    finished = report(h, aid, fid, OLD[1:], 2)    # a newer report: OLD[0] ended, its end acknowledged
    out = h.send(AG, finished)
    assert only(out, m.AgentRegistered, AG)[0].agent_id == aid
    assert h.core.agent_book.records[aid].peer == AG
    assert h.core.agent_book.records[aid].sequence == 2 and h.core.counters["reregistrations_stale"] == 0
    # the same report again (its frame no longer remembered by the runtime): answered, not compared again
    out = h.send(AG, finished)
    assert only(out, m.AgentRegistered, AG)[0].agent_id == aid and not only(out, m.Update)
    assert h.core.counters["reregistrations_stale"] == 0


def test_a_newer_report_made_before_a_launch_reached_the_agent_does_not_end_the_launched_tasks():
    """The other order (Mesos's second guard): the agent sent attempt 6 while the answer to 5 was on
    its way, took 5's answer, got pa2-* and confirmed them; 6 arrives last. Newer, but made before the
    launch: the tasks it does not list are kept (the same agent process forgets no task silently)."""
    h = Harness()
    fid, aid = running_cluster(h)
    h.send(AG2, report(h, aid, fid, OLD, 5))
    start_new_tasks(h, fid, aid)
    unconfirmed = "pa2-late"
    (offer,) = h.offers(h.tick(advance=1.0))
    launch(h, fid, offer, task(unconfirmed, aid, "cpus:0.5;mem:64"))
    out = h.send(AG2, report(h, aid, fid, OLD, 6))
    assert only(out, m.AgentRegistered, AG2) and not only(out, m.Update)
    assert set(states(h, fid, NEW + OLD).values()) == {TaskState.RUNNING}
    assert h.core.counters["unreported_tasks_kept"] == len(NEW) + 1
    # the unconfirmed one is left to the launch retry: RUN_TASK again after task_launch_timeout
    resent = only(h.tick(advance=h.core.config.task_launch_timeout + 0.1), m.RunTask, AG2)
    assert [r.task.task_id for r in resent] == [unconfirmed]


def test_a_newer_report_still_completes_a_task_whose_end_the_agent_reported_before():
    """Kept are only tasks that run or were launched (PENDING, LIVE): one the agent reported ended
    (ENDING: its updates on their way) and no longer lists is complete, as before."""
    h = Harness()
    fid = "fw-x"
    h.send(FW, m.Subscribe(FrameworkInfo("pa", id=fid, partition_aware=True)))
    ended = m.RunningTask(fid, task("done", "agent-x"), TaskState.FINISHED, update_state=TaskState.RUNNING)
    framework = FrameworkInfo("pa", id=fid, partition_aware=True)
    h.send(AG, m.ReregisterAgent(INFO.replace(id="agent-x"), [ended], [framework], incarnation="inc-1", sequence=4))
    assert h.core.frameworks[fid].tasks["done"].phase.name == "ENDING"
    h.send(AG, report(h, "agent-x", fid, [], 5))
    assert "done" not in h.core.frameworks[fid].tasks and h.core.counters["unreported_tasks_kept"] == 0


def test_a_restarted_agent_new_incarnation_lower_number_is_admitted_and_its_unreported_tasks_lost():
    h = Harness()
    fid, aid = running_cluster(h)
    h.send(AG2, report(h, aid, fid, OLD, 7))
    start_new_tasks(h, fid, aid)
    # the agent process restarted (recovered its id and OLD from its checkpoint, not NEW): its first report
    out = h.send(AG, report(h, aid, fid, OLD, 1, incarnation="inc-2"))
    assert only(out, m.AgentRegistered, AG)[0].agent_id == aid
    dropped = {u.status.task_id: u.status for u in only(out, m.Update, FW)}
    assert set(dropped) == set(NEW)
    assert {s.state for s in dropped.values()} == {TaskState.DROPPED}
    assert {s.message for s in dropped.values()} == {"the agent re-registered without this task"}
    assert set(states(h, fid, OLD).values()) == {TaskState.RUNNING}
    record = h.core.agent_book.records[aid]
    assert (record.peer, record.incarnation, record.sequence) == (AG, "inc-2", 1)
    assert h.core.counters["tasks_unreported"] == len(NEW) and h.core.counters["reregistrations_stale"] == 0


def test_a_late_report_of_the_agent_process_a_restart_replaced_is_stale():
    h = Harness()
    fid, aid = running_cluster(h)
    h.send(AG2, report(h, aid, fid, OLD, 3, incarnation="inc-2"))  # the restarted process, admitted
    start_new_tasks(h, fid, aid)
    out = h.send(AG, report(h, aid, fid, OLD, 9))                   # the replaced one's, delayed
    assert not out and set(states(h, fid, NEW + OLD).values()) == {TaskState.RUNNING}
    record = h.core.agent_book.records[aid]
    assert (record.peer, record.incarnation, record.earlier_incarnation) == (AG2, "inc-2", "inc-1")
    assert h.core.counters["reregistrations_stale"] == 1


def test_agents_without_an_incarnation_are_handled_as_before():
    """Older agents and bench/'s simulated ones send none: no staleness check, unreported tasks end."""
    h = Harness()
    fid, aid = running_cluster(h)
    h.send(AG2, report(h, aid, fid, OLD, 0, incarnation=""))
    start_new_tasks(h, fid, aid)
    out = h.send(AG, report(h, aid, fid, OLD, 0, incarnation=""))
    assert {u.status.task_id for u in only(out, m.Update, FW)} == set(NEW)
    assert h.core.agent_book.records[aid].peer == AG


def test_a_new_leader_admits_any_report_then_takes_older_ones_for_stale():
    """A new leader knows no report numbers: the first it gets is admitted (as an unknown agent's);
    an older attempt of the same incarnation arriving after it is stale there too."""
    h = Harness()
    fid = "fw-x"
    h.send(FW, m.Subscribe(FrameworkInfo("pa", id=fid, partition_aware=True)))
    out = h.send(AG2, report(h, "agent-x", fid, OLD, 9))
    assert only(out, m.AgentRegistered, AG2)[0].agent_id == "agent-x"
    assert (h.core.agent_book.records["agent-x"].incarnation, h.core.agent_book.records["agent-x"].sequence) == \
        ("inc-1", 9)
    out = h.send(AG, report(h, "agent-x", fid, OLD[:1], 8))
    assert not out and set(states(h, fid, OLD).values()) == {TaskState.RUNNING}
    assert h.core.counters["reregistrations_stale"] == 1


def test_an_overlong_incarnation_is_taken_as_none():
    h = Harness()
    fid, aid = running_cluster(h)
    h.send(AG2, report(h, aid, fid, OLD, 5, incarnation="x" * 65))
    assert h.core.agent_book.records[aid].incarnation == ""


# ------------------------------------------------------------- the agent's side
def agent(**kwargs):
    clock = FakeClock(100.0)
    core = AgentCore(clock, AgentInfo("host-1", R("cpus:4;mem:1024")), rng=random.Random(7), **kwargs)
    return core, clock


def sent(commands):
    return [c.message for c in commands if isinstance(c, SendToMaster)
            and isinstance(c.message, (m.RegisterAgent, m.ReregisterAgent))]


def test_the_agent_numbers_its_reports_a_retry_repeats_the_number_and_a_changed_report_raises_it():
    core, clock = agent()
    (first,) = sent(core.tick())
    assert isinstance(first, m.RegisterAgent) and first.incarnation == core.incarnation
    core.on_message(m.AgentRegistered("agent-1", MasterInfo("m", "tcp://127.0.0.1:1"), 1.0))
    clock.advance(10.0)
    (one,) = sent(core.tick())                    # the master is silent: it re-registers
    assert isinstance(one, m.ReregisterAgent) and (one.incarnation, one.sequence) == (core.incarnation, 1)
    clock.advance(10.0)
    (retry,) = sent(core.tick())                  # no answer: the same report again, byte for byte
    assert retry == one
    core.on_message(m.RunTask(FrameworkInfo("demo", id="fw-1"), TaskInfo("t1", "agent-1", "true", R("cpus:1"))))
    clock.advance(10.0)
    (changed,) = sent(core.tick())                # it lists t1 now: a new report
    assert changed.sequence == 2 and [r.task.task_id for r in changed.tasks] == ["t1"]
    # a restarted agent is another incarnation, whatever its rng
    again, _ = agent()
    assert again.incarnation != core.incarnation and len(core.incarnation) == 16
