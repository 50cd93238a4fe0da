"""The master resolves every launch and tells each update once (issue 12 §1;
docs/reliability.rst): the core with a FakeClock.

Under load RUN_TASKs were lost (tasks STAGING forever) and updates delivered
hundreds of times; the transport no longer drops them, and the master no
longer relies on that: a task its agent does not confirm is sent again and
finally ended, and retries the framework has had are settled by the master."""

import pytest

from mesoslike.errors import MesoslikeError
from mesoslike.resources import Resources
from mesoslike.wire import FrameworkInfo, TaskState, TaskStatus
from mesoslike.wire import messages as m

from test_master_core import AG, AG2, FW, FW2, Harness, R, launch, only, reregister, task

pytestmark = pytest.mark.timeout(30)


def launched(h, *task_ids, **framework):
    fid, aid = h.subscribe(**framework), h.register_agent()
    (offer,) = h.offers(h.tick())
    out = launch(h, fid, offer, *[task(tid, aid) for tid in task_ids])
    return fid, aid, out


# -------------------------------------------------- launches the agent never confirms
def test_a_task_its_agent_does_not_confirm_is_sent_again_with_backoff_then_lost():
    h = Harness(task_launch_timeout=10.0, task_launch_attempts=3, max_agent_ping_timeouts=1000, heartbeat_interval=1e3)
    fid, aid, out = launched(h, "t")
    assert [r.task.task_id for r in only(out, m.RunTask, AG)] == ["t"]
    resent_at = []
    for second in range(1, 80):
        out = h.tick(advance=1.0)
        h.send(AG, m.Pong(aid))
        if only(out, m.RunTask, AG):
            resent_at.append(second)
        if only(out, m.Update, FW):
            break
    assert resent_at == [10, 30]                   # after 10 s, then 20 s more
    (lost,) = only(out, m.Update, FW)
    assert second == 70 and lost.status.state == TaskState.LOST and lost.status.uuid == ""
    assert lost.status.reason == "REASON_RECONCILIATION" and "did not confirm" in lost.status.message
    assert only(out, m.KillTask, AG) == [m.KillTask(fid, "t")]   # should it reach the agent after all
    assert "t" not in h.core.frameworks[fid].tasks
    h.tick(advance=1.0)
    offered = [o.resources for o in h.core.allocator.outstanding_offers(fid)] + [h.core.allocator.available(aid)]
    assert Resources.sum(offered) == R("cpus:4;mem:4096")   # what the task held is free again
    assert (h.core.counters["launches_resent"], h.core.counters["tasks_unconfirmed"]) == (2, 1)
    assert h.core.completed_by_state == {TaskState.LOST: 1}


def test_a_partition_aware_framework_gets_task_dropped():
    h = Harness(task_launch_timeout=1.0, task_launch_attempts=1, max_agent_ping_timeouts=1000)
    fid, aid, _ = launched(h, "t", partition_aware=True)
    (dropped,) = only(h.tick(advance=1.0), m.Update, FW)
    assert dropped.status.state == TaskState.DROPPED


def test_any_status_from_the_agent_confirms_the_task():
    h = Harness(task_launch_timeout=1.0, task_launch_attempts=2, max_agent_ping_timeouts=1000, heartbeat_interval=1e3)
    fid, aid, _ = launched(h, "t")
    h.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.STARTING, uuid="u1")))
    for _ in range(10):
        out = h.tick(advance=1.0)
        assert not only(out, m.RunTask) and not only(out, m.Update, FW)
    assert h.core.frameworks[fid].tasks["t"].state == TaskState.STARTING
    assert h.core.next_wakeup() > h.clock.now()


def test_a_reregistering_agent_confirms_what_it_reports_and_the_rest_ends_lost_or_dropped():
    h = Harness(task_launch_timeout=1.0, task_launch_attempts=2, max_agent_ping_timeouts=1000, heartbeat_interval=1e3)
    fid, aid, _ = launched(h, "kept", "gone", partition_aware=True)
    kept = m.RunningTask(fid, task("kept", aid), TaskState.STAGING)
    out = reregister(h, aid, "cpus:4;mem:4096", tasks=[kept], peer=AG2)
    (dropped,) = only(out, m.Update, FW)
    assert (dropped.status.task_id, dropped.status.state) == ("gone", TaskState.DROPPED)   # as Mesos
    assert dropped.status.reason == "REASON_RECONCILIATION"
    assert h.core.counters["tasks_unreported"] == 1
    for _ in range(5):
        assert not only(h.tick(advance=1.0), m.RunTask)   # "kept" is confirmed


# ------------------------------------------------------ late news of an ended task
def test_news_of_a_task_the_master_ended_never_reaches_the_framework_and_the_task_is_killed():
    h = Harness(task_launch_timeout=1.0, task_launch_attempts=1, max_agent_ping_timeouts=1000)
    fid, aid, _ = launched(h, "t")
    assert only(h.tick(advance=1.0), m.Update, FW)[0].status.state == TaskState.LOST
    out = h.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.RUNNING, uuid="late")))
    assert not only(out, m.Update, FW)             # one terminal state per task
    assert only(out, m.StatusUpdateAck, AG) == [m.StatusUpdateAck(aid, fid, "t", "late")]
    assert only(out, m.KillTask, AG) == [m.KillTask(fid, "t")]
    out = h.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.KILLED, uuid="end")))
    assert not only(out, m.Update, FW) and not only(out, m.KillTask)
    assert only(out, m.StatusUpdateAck, AG)[0].uuid == "end"


def test_a_retry_of_an_acknowledged_terminal_update_is_settled_by_the_master():
    h = Harness()
    fid, aid, _ = launched(h, "t")
    finished = TaskStatus("t", TaskState.FINISHED, uuid="u9", exit_code=0)
    assert only(h.send(AG, m.StatusUpdate(fid, finished)), m.Update, FW)
    h.send(FW, m.Acknowledge(fid, aid, "t", "u9"))
    out = h.send(AG, m.StatusUpdate(fid, finished))   # the agent had not got the acknowledgement yet
    assert not only(out, m.Update) and only(out, m.StatusUpdateAck, AG)[0].uuid == "u9"
    assert h.core.completed_by_state == {TaskState.FINISHED: 1}


# -------------------------------------------------------------- retried updates
def test_a_retry_of_an_acknowledged_update_is_acknowledged_by_the_master_not_forwarded():
    h = Harness()
    fid, aid, _ = launched(h, "t")
    running = TaskStatus("t", TaskState.RUNNING, uuid="u1")
    h.send(AG, m.StatusUpdate(fid, running))
    h.send(FW, m.Acknowledge(fid, aid, "t", "u1"))
    out = h.send(AG, m.StatusUpdate(fid, running))
    assert not only(out, m.Update) and only(out, m.StatusUpdateAck, AG)[0].uuid == "u1"
    assert h.core.counters["updates_settled_by_master"] == 1


def test_a_retry_is_forwarded_again_only_after_a_while_or_to_a_new_connection():
    h = Harness(heartbeat_interval=100.0)
    fid, aid, _ = launched(h, "t", failover_timeout=60.0)
    running = m.StatusUpdate(fid, TaskStatus("t", TaskState.RUNNING, uuid="u1"))
    assert only(h.send(AG, running), m.Update, FW)
    h.clock.advance(0.5)
    assert not only(h.send(AG, running), m.Update)       # the first copy is on its way
    h.clock.advance(2.0)
    assert only(h.send(AG, running), m.Update, FW)       # a while later: it may not have been taken
    h.send(FW2, m.Subscribe(FrameworkInfo("demo", id=fid, failover_timeout=60.0)))
    assert only(h.send(AG, running), m.Update, FW2)      # a new connection has not had it
    assert (h.core.counters["updates_held_back"], h.core.counters["updates_reforwarded"]) == (1, 1)


# ----------------------------------------------------------------- liveness
def test_an_agent_busy_sending_updates_is_alive_without_answering_pings():
    # an agent launching 5,000 tasks reads the PINGs queued behind the
    # RUN_TASKs late; its updates say it lives
    h = Harness(task_launch_timeout=100.0)
    fid, aid, _ = launched(h, "t")
    for i in range(10):
        h.tick(advance=1.0)
        h.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.RUNNING, uuid=f"u{i}")))
    assert aid in h.core.agents


def test_an_accept_of_many_tasks_checks_duplicate_ids_within_it():
    h = Harness()
    fid, aid = h.subscribe(), h.register_agent(resources="cpus:100;mem:100000")
    (offer,) = h.offers(h.tick())
    tasks = [task(f"t{i}", aid, "cpus:0.01;mem:1") for i in range(5000)] + [task("t7", aid, "cpus:0.01;mem:1")]
    out = launch(h, fid, offer, *tasks)
    assert len(only(out, m.RunTask, AG)) == 5000
    (error,) = only(out, m.Update, FW)
    assert error.status.task_id == "t7" and "already in use" in error.status.message


# ------------------------------------------------------------- batches as batches
def test_the_tasks_a_batch_of_updates_ends_give_back_their_resources_in_one_allocator_call():
    h = Harness()
    fid, aid, _ = launched(h, "t1", "t2", "t3")
    calls = []
    recover = h.core.allocator.recover_resources
    h.core.allocator.recover_resources = lambda *args, **kw: (calls.append(args), recover(*args, **kw))[1]
    ends = [TaskStatus(t, TaskState.FINISHED, uuid=f"u{t}", exit_code=0) for t in ("t1", "t2", "t3")]
    out = h.send(AG, m.StatusUpdates([m.StatusUpdate(fid, status) for status in ends]))
    assert [u.status.task_id for u in only(out, m.Update, FW)] == ["t1", "t2", "t3"]   # each forwarded, in order
    assert calls == [(fid, aid, Resources.sum([R("cpus:1;mem:128")] * 3))]              # one call, the sum
    assert h.core.allocator.available(aid) == R("cpus:4;mem:4096")                      # as three calls leave it
    h.core.allocator.check_invariants()
    calls.clear()
    h.send(AG, m.StatusUpdate(fid, TaskStatus("t1", TaskState.FINISHED, uuid="ut1", exit_code=0)))
    assert calls == []                                       # a retry: nothing given back twice


def test_a_batch_whose_sum_the_allocator_refuses_is_recovered_task_by_task():
    h = Harness()
    fid, aid, _ = launched(h, "t1", "t2")
    calls = []
    recover = h.core.allocator.recover_resources

    def refusing_sums(framework_id, agent_id, resources, *rest):
        calls.append(resources)
        if resources != R("cpus:1;mem:128"):
            raise MesoslikeError("refused")   # (checked before anything changes, as the allocator does)
        return recover(framework_id, agent_id, resources, *rest)
    h.core.allocator.recover_resources = refusing_sums
    ends = [TaskStatus(t, TaskState.FINISHED, uuid=f"u{t}", exit_code=0) for t in ("t1", "t2")]
    out = h.send(AG, m.StatusUpdates([m.StatusUpdate(fid, status) for status in ends]))
    assert len(only(out, m.Update, FW)) == 2
    assert calls == [R("cpus:2;mem:256"), R("cpus:1;mem:128"), R("cpus:1;mem:128")]
    assert h.core.allocator.available(aid) == R("cpus:4;mem:4096")
