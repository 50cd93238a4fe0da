"""The master core and partitioned agents (docs/reliability.rst, "Partitions"), sans I/O on a FakeClock:
unreachable agents that come back, are marked gone or age out; the agent removal rate limit;
reconciliation around a failover."""

import pytest

from mesoslike.errors import ConfigError
from mesoslike.master import MasterConfig, MasterCore
from mesoslike.master.operations import NotFound
from mesoslike.master.partitions import RemovalRateLimit, agents_to_forget, parse_mesos_duration
from mesoslike.master.registry import Registry, UnreachableEntry
from mesoslike.wire import AgentInfo, FrameworkInfo, MasterInfo, TaskState, TaskStatus
from mesoslike.wire import messages as m
from test_master_core import AG, AG2, FW, Harness, R, launch, only, task

pytestmark = pytest.mark.timeout(30)

AGENT = "cpus:4;mem:4096"


def cut_off(h, *answering):
    """Let the master's ping timeouts pass (max 3 of 1 s) with only the ``answering`` agents (peer, id)
    answering; the framework keeps heartbeating. Returns what the master sent."""
    out = []
    for _ in range(5):
        out += h.tick(advance=1.0)
        h.send(FW, m.Heartbeat())
        for peer, agent_id in answering:
            h.send(peer, m.Pong(agent_id))
    return out


def updates(out, task_id):
    return [u.status for u in only(out, m.Update, FW) if u.status.task_id == task_id]


def reregister(h, agent_id, *running, peer=AG, hostname="node-0"):
    return h.send(peer, m.ReregisterAgent(AgentInfo(hostname, R(AGENT), id=agent_id), list(running)))


def running(fid, aid, task_id, state=TaskState.RUNNING, update_state=""):
    return m.RunningTask(fid, task(task_id, aid), state, update_state=update_state)


def started(h, partition_aware=True, tasks=("t",)):
    """A framework with tasks running on one agent."""
    fid, aid = h.subscribe(partition_aware=partition_aware), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, *(task(t, aid) for t in tasks))
    for n, task_id in enumerate(tasks):
        h.send(AG, m.StatusUpdate(fid, TaskStatus(task_id, TaskState.RUNNING, uuid=f"r-{task_id}")))
        h.send(FW, m.Acknowledge(fid, aid, task_id, f"r-{task_id}"))
    return fid, aid


def test_a_partition_aware_task_comes_back_running_with_its_agent():
    h = Harness()
    fid, aid = started(h, tasks=("t", "u"))
    out = cut_off(h)
    assert [s.state for s in updates(out, "t")] == [TaskState.UNREACHABLE]
    assert aid in h.core.unreachable and aid in h.core.registry.unreachable and aid not in h.core.registry.agents
    assert not only(out, m.ShutdownAgent)   # an unreachable agent is not told to shut down
    assert h.core.frameworks[fid].tasks["t"].state == TaskState.UNREACHABLE
    # explicit reconciliation naming the agent says UNREACHABLE while it is
    (answer,) = updates(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("t", aid)])), "t")
    assert answer.state == TaskState.UNREACHABLE
    # it comes back with "t" only (under its id: it is not told to register anew)
    out = reregister(h, aid, running(fid, aid, "t"))
    assert only(out, m.AgentRegistered, AG)[0].agent_id == aid and not only(out, m.ShutdownAgent)
    (back,) = updates(out, "t")
    assert (back.state, back.reason) == (TaskState.RUNNING, "REASON_AGENT_REREGISTERED")
    (gone,) = updates(out, "u")
    assert gone.state == TaskState.GONE
    assert aid not in h.core.unreachable and aid not in h.core.registry.unreachable and aid in h.core.registry.agents
    (answer,) = updates(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("t", aid)])), "t")
    assert answer.state == TaskState.RUNNING
    # what "t" holds is used again: the agent offers the rest only
    (offer,) = h.offers(h.tick(advance=1.0))
    assert offer.resources == R("cpus:3;mem:3968")
    h.core.allocator.check_invariants()


def test_a_launch_that_never_reached_the_unreachable_agent_is_dropped_when_it_returns():
    h = Harness()
    fid, aid = h.subscribe(partition_aware=True), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid))   # the agent never says a word of it
    cut_off(h)
    (dropped,) = updates(reregister(h, aid), "t")
    assert (dropped.state, dropped.reason) == (TaskState.DROPPED, "REASON_AGENT_REREGISTERED")


def test_a_task_that_ended_during_the_partition_is_told_once_from_its_update_stream():
    """The agent lists the task FINISHED, its RUNNING update still unacknowledged ahead of FINISHED:
    the framework hears RUNNING, then the stream's RUNNING and FINISHED — never FINISHED first."""
    h = Harness()
    fid, aid = h.subscribe(partition_aware=True), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid), task("v", aid))
    cut_off(h)
    out = reregister(h, aid, running(fid, aid, "t", TaskState.FINISHED, update_state=TaskState.RUNNING),
                     running(fid, aid, "v", TaskState.FAILED, update_state=TaskState.FAILED))
    assert [s.state for s in updates(out, "t")] == [TaskState.RUNNING]
    assert updates(out, "v") == []   # its terminal update is on its way: nothing made up before it
    seen = []
    for task_id, state, uuid in (("t", TaskState.RUNNING, "1"), ("t", TaskState.FINISHED, "2"),
                                 ("v", TaskState.FAILED, "3")):
        seen += [(s.task_id, s.state) for s in updates(h.send(AG, m.StatusUpdate(fid, TaskStatus(
            task_id, state, uuid=uuid))), task_id)]
    assert seen == [("t", TaskState.RUNNING), ("t", TaskState.FINISHED), ("v", TaskState.FAILED)]
    assert h.core.allocator.available(aid) == R(AGENT)


def test_tasks_of_frameworks_told_lost_are_killed_on_return_and_nothing_more_is_said():
    h = Harness()
    fid, aid = started(h, partition_aware=False)
    out = cut_off(h)
    assert [s.state for s in updates(out, "t")] == [TaskState.LOST]
    out = reregister(h, aid, running(fid, aid, "t"))
    assert only(out, m.KillTask, AG) == [m.KillTask(fid, "t")] and not only(out, m.Update, FW)
    assert h.core.allocator.available(aid) == R("cpus:3;mem:3968")   # held until it has ended
    (offer,) = h.offers(h.tick(advance=1.0))   # its id may not be used on that agent before it has ended
    (refused,) = updates(launch(h, fid, offer, task("t", aid)), "t")
    assert refused.state == TaskState.ERROR and "being killed" in refused.message
    # its updates are the master's to acknowledge; the framework never hears of it again
    out = h.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.KILLED, uuid="k")))
    assert only(out, m.StatusUpdateAck, AG)[0].uuid == "k" and not only(out, m.Update, FW)
    assert h.core.allocator.available(aid) == R(AGENT)
    h.core.allocator.check_invariants()


def test_a_killed_task_of_the_past_does_not_trip_over_a_new_task_with_its_id():
    """The framework launched "t" again elsewhere after TASK_LOST: the returning agent's old "t" is
    killed and its updates settled, not refused as another agent's task."""
    h = Harness()
    fid, aid = started(h, partition_aware=False)
    other = h.register_agent(peer=AG2, hostname="node-1")
    out = cut_off(h, (AG2, other))
    (offer,) = [o for o in h.offers(out) if o.agent_id == other] or h.offers(h.tick(advance=1.0))
    launch(h, fid, offer, task("t", other))
    reregister(h, aid, running(fid, aid, "t"))
    out = h.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.KILLED, uuid="k")))
    assert only(out, m.StatusUpdateAck, AG) and not only(out, m.Error) and not only(out, m.Update, FW)
    assert h.core.frameworks[fid].tasks["t"].agent_id == other


def test_an_unreachable_agent_marked_gone_ends_its_tasks_gone_by_operator_and_may_not_return():
    h = Harness()
    fid, aid = started(h)
    cut_off(h)
    with pytest.raises(NotFound):
        h.core.mark_agent_gone("nope")
    reply, sends = h.core.mark_agent_gone("node-0")   # by hostname
    assert reply == {"agent_id": aid, "hostname": "node-0", "was": "unreachable", "tasks": 1}
    (gone,) = [s.message.status for s in sends if isinstance(s.message, m.Update)]
    assert (gone.state, gone.reason) == (TaskState.GONE_BY_OPERATOR, "REASON_AGENT_REMOVED_BY_OPERATOR")
    assert aid in h.core.removed_agents and aid not in h.core.registry.unreachable
    assert only(reregister(h, aid, running(fid, aid, "t")), m.ShutdownAgent, AG)


def test_a_registered_agent_marked_gone_is_shut_down():
    h = Harness()
    aware, aid = started(h)
    reply, sends = h.core.mark_agent_gone(aid)
    out = [(s.peer, s.message) for s in sends]
    assert reply["was"] == "registered" and only(out, m.ShutdownAgent, AG)
    assert [s.state for s in updates(out, "t")] == [TaskState.GONE_BY_OPERATOR]
    assert aid not in h.core.agents and aid in h.core.removed_agents


def test_unreachable_agents_age_out_of_the_registry_and_their_tasks_end_gone():
    h = Harness(registry_max_agent_age=60.0, registry_gc_interval=10.0, heartbeat_interval=30.0)
    fid, aid = started(h)
    cut_off(h)
    out = []
    for _ in range(5):   # 50 s: not yet
        out += h.tick(advance=10.0)
        h.send(FW, m.Heartbeat())
    assert aid in h.core.unreachable and not updates(out, "t")
    out = []
    for _ in range(2):
        out += h.tick(advance=10.0)
        h.send(FW, m.Heartbeat())
    assert [s.state for s in updates(out, "t")] == [TaskState.GONE]
    assert aid not in h.core.unreachable and aid in h.core.removed_agents
    assert h.core.counters["unreachable_agents_forgotten"] == 1


def test_the_registry_keeps_the_newest_unreachable_agents_up_to_its_count():
    entries = {f"a{i}": UnreachableEntry(float(i)) for i in range(5)}
    assert agents_to_forget(entries, now=5.0, max_age=100.0, max_count=3) == ["a0", "a1"]
    assert agents_to_forget(entries, now=5.0, max_age=2.5, max_count=10) == ["a0", "a1", "a2"]
    assert agents_to_forget({}, now=5.0, max_age=1.0, max_count=1) == []


@pytest.mark.parametrize("text, agents, seconds", [("1/20mins", 1, 1200.0), ("2/3hrs", 2, 10800.0),
                                                    ("10/1secs", 10, 1.0), ("1/500ms", 1, 0.5)])
def test_removal_rate_limits_are_read_in_mesos_format(text, agents, seconds):
    assert RemovalRateLimit.parse(text) == RemovalRateLimit(agents, seconds)


@pytest.mark.parametrize("text", ["", "1", "0/1mins", "1/0secs", "x/1mins", "1/20lightyears", "-1/1mins"])
def test_bad_removal_rate_limits_are_refused(text):
    with pytest.raises(ConfigError, match="AGENTS/DURATION"):
        RemovalRateLimit.parse(text)
    with pytest.raises(ConfigError):
        MasterConfig(agent_removal_rate_limit=text).validate()


def test_parse_mesos_duration():
    assert parse_mesos_duration("1weeks") == 604800.0 and parse_mesos_duration("1.5mins") == 90.0
    with pytest.raises(ValueError):
        parse_mesos_duration("5 parsecs")


def test_agents_failing_health_checks_are_marked_unreachable_at_the_rate_limit():
    """Three agents cut off at once with 1/10secs: one is marked at once, the next 10 s later; the
    third answers before its turn and stays."""
    h = Harness(agent_removal_rate_limit="1/10secs")
    h.subscribe()
    peers = [b"a0", b"a1", b"a2"]
    ids = [h.register_agent(peer=peer, hostname=f"node-{n}") for n, peer in enumerate(peers)]
    cut_off(h)
    assert len(h.core.unreachable) == 1
    for _ in range(5):
        h.tick(advance=1.0)
        h.send(FW, m.Heartbeat())
    assert len(h.core.unreachable) == 1   # 6 s after the first
    waiting = [(peer, agent_id) for peer, agent_id in zip(peers, ids) if agent_id not in h.core.unreachable]
    h.send(*waiting[-1][:1], m.Pong(waiting[-1][1]))   # the last in line answers
    for _ in range(30):
        h.tick(advance=1.0)
        h.send(FW, m.Heartbeat())
        h.send(waiting[-1][0], m.Pong(waiting[-1][1]))
    assert set(h.core.unreachable) == set(ids) - {waiting[-1][1]}
    assert h.core.counters["agent_removals_canceled"] == 1


def test_without_a_rate_limit_all_agents_cut_off_are_marked_at_once():
    h = Harness()
    h.subscribe()
    for n, peer in enumerate((b"a0", b"a1", b"a2")):
        h.register_agent(peer=peer, hostname=f"node-{n}")
    cut_off(h)
    assert len(h.core.unreachable) == 3


# ------------------------------------------------------------ around a failover
def failed_over(registry, **config):
    """A new leader's core on ``registry`` (what its predecessor stored)."""
    h = Harness.__new__(Harness)
    from mesoslike.clock import FakeClock

    h.clock = FakeClock()
    settings = dict(heartbeat_interval=1.0, ping_interval=1.0, max_agent_ping_timeouts=3, **config)
    h.core = MasterCore(h.clock, MasterInfo("m2", "tcp://127.0.0.1:2"), MasterConfig(**settings),
                        registry=Registry.from_document(registry.to_document()))
    return h


def test_reconciliation_waits_for_the_agents_expected_back_after_a_failover():
    """Explicit reconciliation by task id (no agent id) right after a failover, while the agent that
    runs the task has not re-registered: no TASK_LOST; the answer comes once it is back — from what its
    update stream delivers next (RUNNING), not the FINISHED it lists ahead of that stream."""
    old = Harness()
    fid, aid = started(old, partition_aware=False)
    h = failed_over(old.core.registry)
    h.send(FW, m.Subscribe(FrameworkInfo("demo", id=fid)))
    out = h.send(FW, m.Reconcile(fid, [m.ReconcileTask("t"), m.ReconcileTask("nope", aid)]))
    assert updates(out, "t") == [] and updates(out, "nope") == []
    assert h.core.reconcile_answers_waiting() == 2
    reregister(h, aid, running(fid, aid, "t", TaskState.FINISHED, update_state=TaskState.RUNNING))
    out = h.tick()
    assert [s.state for s in updates(out, "t")] == [TaskState.RUNNING]
    assert [s.state for s in updates(out, "nope")] == [TaskState.LOST]
    assert h.core.reconcile_answers_waiting() == 0


def test_held_answers_are_given_once_the_expected_agents_are_marked_unreachable():
    old = Harness()
    fid, aid = started(old, partition_aware=True)
    h = failed_over(old.core.registry, agent_reregister_timeout=5.0)
    h.send(FW, m.Subscribe(FrameworkInfo("demo", id=fid, partition_aware=True)))
    assert updates(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("t", aid)])), "t") == []
    out = []
    for _ in range(6):
        out += h.tick(advance=1.0)
        h.send(FW, m.Heartbeat())
    assert aid in h.core.unreachable and not h.core.unreachable[aid].tasks_known
    assert [s.state for s in updates(out, "t")] == [TaskState.UNREACHABLE]
    # it comes back after all: adopted, and the partition-aware framework is told its task runs
    out = reregister(h, aid, running(fid, aid, "t"))
    assert [(s.state, s.reason) for s in updates(out, "t")] == [(TaskState.RUNNING, "REASON_AGENT_REREGISTERED")]
    assert "t" in h.core.frameworks[fid].tasks and aid not in h.core.registry.unreachable


def test_a_task_reconciled_lost_after_a_failover_is_killed_unheard_of_when_its_agent_comes_back():
    """The partition suite's history: after a failover, the agent running "t" was not back within
    agent_reregister_timeout, so a framework that is not partition-aware was told TASK_LOST ("unknown
    task") — and then the agent came back with "t" and the framework heard RUNNING, FINISHED: a terminal
    state followed by others. As for the tasks of an agent this master itself marked unreachable, the
    task is killed on return and nothing more is said of it; the same holds for an agent this master
    never expected (its predecessor's registry lacked it)."""
    old = Harness()
    fid, aid = started(old, partition_aware=False, tasks=("t", "u"))
    h = failed_over(old.core.registry, agent_reregister_timeout=5.0)
    h.send(FW, m.Subscribe(FrameworkInfo("demo", id=fid)))
    for _ in range(6):
        h.tick(advance=1.0)
        h.send(FW, m.Heartbeat())
    assert aid in h.core.unreachable and not h.core.expected_agents()
    (answer,) = updates(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("t")])), "t")
    assert (answer.state, answer.message) == (TaskState.LOST, "unknown task")
    out = reregister(h, aid, running(fid, aid, "t"), running(fid, aid, "u"))
    assert only(out, m.KillTask, AG) == [m.KillTask(fid, "t")]
    assert updates(out, "t") == [] and "t" not in h.core.frameworks[fid].tasks
    assert "u" in h.core.frameworks[fid].tasks   # never said to have ended: it runs on
    out = h.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.KILLED, uuid="k")))
    assert only(out, m.StatusUpdateAck, AG)[0].uuid == "k" and updates(out, "t") == []
    (again,) = updates(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("t")])), "t")
    assert again.state == TaskState.LOST   # what it was told, it is told again
    assert h.core.allocator.available(aid) == R(AGENT) - task("u", aid).resources
    h.core.allocator.check_invariants()


def test_a_task_reconciled_lost_and_launched_anew_elsewhere_keeps_its_new_incarnation():
    """After TASK_LOST the framework launched "t" again on another agent: the old "t" the first agent
    brings back is killed unheard of, and the books keep the new one."""
    old = Harness()
    fid, aid = started(old, partition_aware=False)
    h = failed_over(old.core.registry, agent_reregister_timeout=5.0)
    h.send(FW, m.Subscribe(FrameworkInfo("demo", id=fid)))
    other = h.register_agent(peer=AG2, hostname="node-1")
    out = []
    for _ in range(6):
        out += h.tick(advance=1.0)
        h.send(FW, m.Heartbeat())
        h.send(AG2, m.Pong(other))
    (answer,) = updates(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("t")])), "t")
    assert answer.state == TaskState.LOST
    (offer,) = [o for o in h.offers(out) if o.agent_id == other]
    launch(h, fid, offer, task("t", other))
    out = reregister(h, aid, running(fid, aid, "t"))
    assert only(out, m.KillTask, AG) == [m.KillTask(fid, "t")] and updates(out, "t") == []
    assert h.core.frameworks[fid].tasks["t"].agent_id == other


def test_what_a_framework_was_told_ended_is_remembered_within_the_completed_tasks_bound():
    h = Harness(completed_tasks_per_framework=3)
    fid = h.subscribe(partition_aware=False)
    h.send(FW, m.Reconcile(fid, [m.ReconcileTask(f"t{n}") for n in range(5)]))
    assert list(h.core.frameworks[fid].pronounced_ended) == ["t2", "t3", "t4"]


def test_unreachable_agents_survive_a_failover_in_the_registry():
    old = Harness()
    fid, aid = started(old)
    cut_off(old)
    document = old.core.registry.to_document()
    assert list(document["unreachable"]) == [aid] and document["unreachable"][aid]["hostname"] == "node-0"
    h = failed_over(old.core.registry)
    assert aid in h.core.unreachable and aid not in h.core.expected_agents()
    h.send(FW, m.Subscribe(FrameworkInfo("demo", id=fid, partition_aware=True)))
    (answer,) = updates(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("t", aid)])), "t")
    assert answer.state == TaskState.UNREACHABLE
    # without the agent named: it may be on that agent, whose tasks this master never saw
    (answer,) = updates(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("t")])), "t")
    assert answer.state == TaskState.UNREACHABLE
    assert only(reregister(h, aid, running(fid, aid, "t")), m.AgentRegistered, AG)[0].agent_id == aid
    h.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.FINISHED, uuid="f")))
    h.send(FW, m.Acknowledge(fid, aid, "t", "f"))
    (answer,) = updates(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("u")])), "u")
    assert answer.state == TaskState.GONE   # no unreachable agent left: an unknown task runs nowhere


def test_an_unreachable_agent_keeps_its_principal():
    registry = Registry()
    registry.mark_unreachable("a1", UnreachableEntry(12.5, "node-0", "alice"))
    again = Registry.from_document(registry.to_document())
    assert again.unreachable == {"a1": UnreachableEntry(12.5, "node-0", "alice")}
    assert again.changes().unreachable == frozenset() and registry.changes().unreachable == {"a1"}
