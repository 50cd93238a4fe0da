"""The agent's sans-I/O core, driven through its public API with a fake clock
(no sockets, no processes)."""

import math
import random

import pytest

from mesoslike.agent.core import (
    REASON_COMMAND_EXECUTOR_FAILED,
    REASON_TASK_INVALID,
    REASON_TASK_UNKNOWN,
    SOURCE_AGENT,
    AgentCore,
    CheckpointAgent,
    DeliverMessage,
    KillTask,
    LaunchTask,
    Reconnect,
    SendToMaster,
)
from mesoslike.clock import FakeClock
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import AgentInfo, FrameworkInfo, MasterInfo, TaskInfo, TaskState

pytestmark = pytest.mark.timeout(60)

R = Resources.parse
MASTER = MasterInfo("master-1", "tcp://127.0.0.1:5050")
FW = FrameworkInfo(name="demo", id="fw-1")
OTHER_FW = FrameworkInfo(name="other", id="fw-2")


# ---------------------------------------------------------------- helpers
def make(resources="cpus:4;mem:1024", **kwargs):
    clock = FakeClock(100.0)
    kwargs.setdefault("rng", random.Random(7))
    kwargs.setdefault("wall_clock", lambda: 1_700_000_000.0 + clock.now())
    core = AgentCore(clock, AgentInfo("host-1", R(resources), {"room": "er1"}), **kwargs)
    return core, clock


def messages(commands):
    return [c.message for c in commands if isinstance(c, SendToMaster)]


def updates(commands):
    return [msg.status for msg in messages(commands) if isinstance(msg, m.StatusUpdate)]


def registrations(commands):
    return [msg for msg in messages(commands) if isinstance(msg, (m.RegisterAgent, m.ReregisterAgent))]


def of_type(commands, kind):
    return [c for c in commands if isinstance(c, kind)]


def register(core, agent_id="agent-1", ping_interval=1.0):
    (msg,) = messages(core.tick())
    assert isinstance(msg, (m.RegisterAgent, m.ReregisterAgent))
    return core.on_message(m.AgentRegistered(agent_id, MASTER, ping_interval))


def task(task_id="t1", resources="cpus:1;mem:128", agent_id="agent-1", grace=3.0, command="true"):
    return TaskInfo(task_id, agent_id, command, R(resources), kill_grace_period=grace)


def ack(core, status, framework_id=None):
    return core.on_message(m.StatusUpdateAck(core.agent_id, framework_id or status.framework_id, status.task_id,
                                             status.uuid))


def launch(core, task_id="t1", framework=FW, **kwargs):
    """RUN_TASK and the process starting; returns (STARTING, RUNNING) in queue order."""
    out = core.on_message(m.RunTask(framework, task(task_id, **kwargs)))
    assert of_type(out, LaunchTask)
    core.on_task_started(framework.id, task_id, pid=4242)
    return core.pending_updates(framework.id, task_id)


def drain(core, framework_id, task_id):
    """Acknowledge a task's updates until none is left; returns them."""
    seen = []
    while core.pending_updates(framework_id, task_id):
        head = core.pending_updates(framework_id, task_id)[0]
        seen.append(head)
        ack(core, head)
    return seen


# ----------------------------------------------------------- registration
def _registration_gaps(core, clock, attempts=6):
    gaps = []
    for _ in range(attempts):
        gap = core.next_wakeup() - clock.now()
        gaps.append(round(gap, 6))
        clock.advance(gap)
        assert [type(msg) for msg in messages(core.tick())] == [m.RegisterAgent]
    return gaps


def test_registers_first_and_retries_with_doubling_backoff_until_answered():
    core, clock = make(register_backoff=1.0, register_jitter=0.0)
    assert core.agent_id == "" and not core.registered
    (first,) = messages(core.tick())
    assert isinstance(first, m.RegisterAgent)
    assert first.agent.id == "" and first.agent.hostname == "host-1" and first.agent.attributes == {"room": "er1"}
    assert messages(core.tick()) == []  # not again before the backoff
    assert _registration_gaps(core, clock) == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert core.on_message(m.AgentRegistered("agent-1", MASTER, 10.0)) == []
    assert core.registered and core.agent_id == "agent-1" and core.master == MASTER
    clock.advance(20.0)
    assert messages(core.tick()) == []            # registered: no more attempts


def test_a_registration_sent_before_any_master_was_known_is_sent_again_once_one_is(caplog):
    # through ZooKeeper the agent's first attempt can go out before the detector names a leader: it went
    # nowhere, so the first leader gets one at once, not after the attempt's back-off (4-10 s by default)
    core, clock = make()
    (first,) = messages(core.tick())
    assert isinstance(first, m.RegisterAgent)
    clock.advance(0.01)
    assert messages(core.tick()) == []
    assert core.on_master_changed() == []
    with caplog.at_level("INFO", logger="mesoslike.agent"):
        out = core.tick()
    assert [type(c) for c in out] == [SendToMaster] and isinstance(messages(out)[0], m.RegisterAgent)
    assert "unreachable" not in caplog.text   # that attempt was not left unanswered by a master
    assert core.on_message(m.AgentRegistered("agent-1", MASTER, 10.0)) == []
    assert core.registered


def test_a_master_that_does_not_lead_yet_has_the_registration_sent_again_soon_not_after_the_back_off():
    # after a failover ZooKeeper names the new leader to the agents before that master's election
    # reaches its loop: its refusal (ERROR standby) has the agent ask again within [0.25, 0.5] s,
    # doubling while refusals go on — not the 5-10 s of its back-off; any other error changes nothing
    core, clock = make(rng=random.Random(7))
    messages(core.tick())
    backoff = core.next_wakeup() - clock.now()
    assert backoff >= 5.0
    assert core.on_message(m.Error("not authorized")) == []
    assert core.next_wakeup() - clock.now() == backoff
    delays = []
    for _ in range(3):
        assert core.on_message(m.Error("this master does not lead; the leader is not elected yet", standby=True)) == []
        delays.append(core.next_wakeup() - clock.now())
        clock.advance(delays[-1])
        assert [type(msg) for msg in messages(core.tick())] == [m.RegisterAgent]
    assert 0.25 <= delays[0] <= 0.5 and 0.5 <= delays[1] <= 1.0 and 1.0 <= delays[2] <= 2.0, delays
    assert core.on_message(m.AgentRegistered("agent-1", MASTER, 10.0)) == []
    assert core.registered
    assert core.on_message(m.Error("this master does not lead", standby=True)) == []   # registered: nothing to do
    assert core.next_wakeup() - clock.now() > 2.0


@pytest.mark.parametrize("options, bounds", [
    # by default: 10 s, its maximum (a new leader of 100,000 agents answers them all in about as
    # long), each delay drawn from its upper half
    ({}, [10.0, 10.0, 10.0, 10.0, 10.0, 10.0]),
    # a shorter first delay doubles up to the maximum
    ({"register_backoff": 4.0}, [4.0, 8.0, 10.0, 10.0, 10.0, 10.0]),
])
def test_registration_retries_are_spread_so_many_agents_do_not_retry_in_lockstep(options, bounds):
    runs = []
    for seed in range(20):
        core, clock = make(rng=random.Random(seed), **options)
        messages(core.tick())
        gaps = _registration_gaps(core, clock)
        assert all(bound / 2 <= gap <= bound for gap, bound in zip(gaps, bounds)), gaps
        runs.append(gaps[0])
    assert len(set(runs)) == 20 and max(runs) - min(runs) > 0.5


def test_a_bad_registration_jitter_is_refused():
    for jitter in (-0.1, 1.0):
        with pytest.raises(ValueError, match="register_jitter"):
            make(register_jitter=jitter)


def test_ping_is_answered_with_pong():
    core, _ = make()
    register(core)
    assert messages(core.on_message(m.Ping("agent-1"))) == [m.Pong("agent-1")]


def test_silent_master_is_gone_after_ping_interval_times_max_timeouts_then_reregistration_with_tasks():
    core, clock = make(max_ping_timeouts=5)
    register(core, ping_interval=1.0)
    launch(core, "t1")
    assert core.next_wakeup() <= clock.now() + 5.0
    clock.advance(4.9)
    assert registrations(core.tick()) == []
    core.on_message(m.Ping("agent-1"))           # any message resets the clock
    clock.advance(4.9)
    assert registrations(core.tick()) == [] and core.registered
    clock.advance(0.2)
    (rereg,) = registrations(core.tick())
    assert not core.registered
    assert isinstance(rereg, m.ReregisterAgent)
    assert rereg.agent.id == "agent-1"
    assert [(t.framework_id, t.task.task_id, t.state) for t in rereg.tasks] == [("fw-1", "t1", TaskState.RUNNING)]
    assert rereg.frameworks == [FW]
    # with backoff (5-10 s each time, by default), until a master answers
    clock.advance(10.0)
    assert [type(msg) for msg in messages(core.tick())] == [m.ReregisterAgent]   # updates wait meanwhile
    assert clock.now() + 5.0 <= core.next_wakeup() <= clock.now() + 10.0
    core.on_message(m.AgentRegistered("agent-1", MASTER, 1.0))
    assert core.registered and core.agent_id == "agent-1"


def test_a_silent_master_is_reconnected_to_afresh_and_so_is_every_unanswered_registration():
    """docs/reliability.rst, "Partitions": the old connection may be stalled in the kernel's
    retransmission backoff long after the network healed; the re-registration goes over a fresh one,
    and so does every retry of a registration that got no answer."""
    core, clock = make(max_ping_timeouts=5)
    register(core, ping_interval=1.0)
    launch(core, "t1")
    clock.advance(5.1)
    out = core.tick()
    assert [type(c) for c in out if isinstance(c, (Reconnect, SendToMaster))] == [Reconnect, SendToMaster]
    assert isinstance(out[-1].message, m.ReregisterAgent)
    clock.advance(10.0)   # the retry: 5-10 s later by default
    out = core.tick()
    assert of_type(out, Reconnect) and registrations(out)   # no answer to the last one: a fresh connection again
    core.on_message(m.AgentRegistered("agent-1", MASTER, 1.0))
    clock.advance(0.5)
    assert not of_type(core.tick(), Reconnect)


def test_any_master_message_counts_as_a_sign_of_life():
    core, clock = make()
    register(core, ping_interval=1.0)
    for _ in range(10):
        clock.advance(4.0)
        core.on_message(m.Heartbeat())
        core.tick()
    assert core.registered


def test_updates_wait_for_a_master_and_go_out_when_it_answers():
    core, clock = make()
    register(core, ping_interval=1.0)
    starting, _ = launch(core, "t1")
    clock.advance(5.5)
    core.tick()                                   # master gone
    assert not core.registered
    core.on_task_exited("fw-1", "t1", exit_code=0)
    clock.advance(30.0)
    out = core.tick()
    assert updates(out) == []                     # nobody to send them to
    flushed = updates(core.on_message(m.AgentRegistered("agent-1", MASTER, 1.0)))
    assert flushed == [starting]                  # the head, at once, same uuid
    for gap in (5.0, 4.9):                        # (the master's heartbeats keep it registered)
        clock.advance(gap)
        core.on_message(m.Heartbeat())
        assert updates(core.tick()) == []         # backoff restarted: 10 s, as Mesos's agent
    clock.advance(0.1)
    assert updates(core.tick()) == [starting]


def test_a_stale_agent_registered_without_a_registration_outstanding_is_ignored():
    core, _ = make()
    register(core, "agent-1")
    core.on_message(m.ShutdownAgent("removed"))
    assert core.on_message(m.AgentRegistered("agent-1", MASTER, 1.0)) == []
    assert core.agent_id == "" and not core.registered


def test_unexpected_messages_are_ignored():
    core, _ = make()
    register(core)
    assert core.on_message(m.Offers([])) == []
    assert core.registered


# --------------------------------------------------------- resource checks
def test_task_that_does_not_fit_is_answered_task_error_and_not_launched():
    core, _ = make("cpus:2;mem:1024")
    register(core)
    launch(core, "big-enough", resources="cpus:1.5;mem:512")
    out = core.on_message(m.RunTask(FW, task("too-big", "cpus:1;mem:128")))
    assert of_type(out, LaunchTask) == []
    (status,) = updates(out)
    assert status.state == TaskState.ERROR and status.reason == REASON_TASK_INVALID
    assert "only" in status.message and status.uuid  # reliable: it has a uuid
    assert core.used == R("cpus:1.5;mem:512")
    assert ack(core, status) == [] and core.pending_updates("fw-1", "too-big") == []


def test_a_task_sent_again_is_not_run_twice_and_its_oldest_update_confirms_it():
    # the master sends RUN_TASK again when the agent has not confirmed it in
    # time (issue 12 §1): a TASK_ERROR for the "duplicate" would give the
    # framework a second terminal state for a task that runs
    core, _ = make()
    register(core)
    starting, running = launch(core, "t1")
    out = core.on_message(m.RunTask(FW, task("t1")))
    assert of_type(out, LaunchTask) == []
    assert updates(out) == [starting]          # the update in flight, again: no TASK_ERROR
    assert core.pending_updates("fw-1", "t1") == [starting, running]
    assert core.used == R("cpus:1;mem:128")
    # the same task id in another framework is another task
    assert of_type(core.on_message(m.RunTask(OTHER_FW, task("t1"))), LaunchTask)


@pytest.mark.parametrize("bad_task, words", [
    (task("t", agent_id="agent-9"), "agent-9"),
    (TaskInfo("t", "agent-1", "true", Resources()), "no resources"),
])
def test_invalid_tasks_are_task_errors(bad_task, words):
    core, _ = make()
    register(core)
    out = core.on_message(m.RunTask(FW, bad_task))
    (status,) = updates(out)
    assert status.state == TaskState.ERROR and words in status.message and not of_type(out, LaunchTask)


def test_resources_are_freed_when_the_task_ends_not_when_its_update_is_acknowledged():
    core, _ = make("cpus:1;mem:128")
    register(core)
    launch(core, "t1")
    assert core.free.is_empty()
    core.on_task_exited("fw-1", "t1", exit_code=0)
    assert core.free == R("cpus:1;mem:128")
    assert of_type(core.on_message(m.RunTask(FW, task("t2"))), LaunchTask)
    assert [t.task_id for t in core.tasks()] == ["t1", "t2"]  # t1 until its updates are acknowledged


# --------------------------------------------------------- reliable updates
def test_updates_of_a_task_go_out_in_order_one_at_a_time():
    core, _ = make()
    register(core)
    out = core.on_message(m.RunTask(FW, task("t1")))
    (starting,) = updates(out)
    assert starting.state == TaskState.STARTING
    assert updates(core.on_task_started("fw-1", "t1", 99)) == []        # RUNNING waits behind STARTING
    assert updates(core.on_task_exited("fw-1", "t1", exit_code=3)) == []
    (running,) = updates(ack(core, starting))
    assert running.state == TaskState.RUNNING
    (failed,) = updates(ack(core, running))
    assert failed.state == TaskState.FAILED and failed.exit_code == 3 and "status 3" in failed.message
    assert len({starting.uuid, running.uuid, failed.uuid}) == 3
    assert core.tasks()[0].pending_updates == 1
    assert ack(core, failed) == []
    assert core.tasks() == []                                            # terminal acked: forgotten


def test_updates_carry_the_agent_the_framework_the_source_and_a_wall_clock_timestamp():
    core, clock = make()
    register(core)
    starting, _ = launch(core, "t1")
    assert starting.agent_id == "agent-1" and starting.framework_id == "fw-1"
    assert starting.source == SOURCE_AGENT
    assert starting.timestamp == 1_700_000_000.0 + clock.now()


def test_uuids_come_from_the_injected_random_generator():
    first, _ = make(rng=random.Random(3))
    second, _ = make(rng=random.Random(3))
    for core in (first, second):
        register(core)
    assert launch(first, "t1") == launch(second, "t1")


def test_update_uuids_are_the_random_version_4_uuids_of_the_generators_draws():
    import uuid

    from mesoslike.agent.core import random_uuid4

    for seed in range(200):
        ours, reference = random.Random(seed), random.Random(seed)
        for _ in range(5):
            made = random_uuid4(ours)
            assert made == str(uuid.UUID(int=reference.getrandbits(128), version=4))
            assert uuid.UUID(made).version == 4 and uuid.UUID(made).variant == uuid.RFC_4122


def test_update_uuids_are_distinct_version_4_uuids_across_updates_runs_and_a_wrap():
    import uuid

    from mesoslike.agent.core import UpdateUuids

    first, again = UpdateUuids(random.Random()), UpdateUuids(random.Random())   # an agent, and its next run
    made = [first() for _ in range(1000)] + [again() for _ in range(1000)]
    assert len(set(made)) == len(made)
    for each in made:
        parsed = uuid.UUID(each)
        assert str(parsed) == each and parsed.version == 4 and parsed.variant == uuid.RFC_4122
    # the counted last group about to wrap: a new random uuid, not the group's 0 after the same prefix
    first._next = (1 << 48) - 1
    last, after = first(), first()
    assert last.endswith("-ffffffffffff") and after[:24] != last[:24] and uuid.UUID(after).version == 4


def test_each_update_of_the_agent_has_a_uuid_of_its_own():
    core, _ = make()
    register(core)
    made = [status.uuid for name in ("t1", "t2", "t3") for status in updates(core.on_message(m.RunTask(FW, task(name))))]
    assert len(made) == 3 and len(set(made)) == 3


def test_the_head_update_is_resent_with_backoff_until_acknowledged():
    core, clock = make()
    register(core, ping_interval=200.0)
    (starting,) = updates(core.on_message(m.RunTask(FW, task("t1"))))
    gaps = []
    for _ in range(7):
        core.on_message(m.Heartbeat())                                   # the master is there all along
        gap = core.next_wakeup() - clock.now()
        gaps.append(gap)
        clock.advance(gap)
        assert updates(core.tick()) == [starting]                        # same uuid every time
    # Mesos's agent: STATUS_UPDATE_RETRY_INTERVAL_MIN 10 s, doubling, at most _MAX 10 min
    assert gaps == [10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 600.0]
    ack(core, starting)
    assert core.next_wakeup() == pytest.approx(clock.now() + 1000.0)     # only the master's deadline


def test_acknowledgements_of_anything_but_the_update_in_flight_are_ignored():
    core, clock = make()
    register(core, ping_interval=100.0)
    starting, running = launch(core, "t1")
    assert ack(core, running) == []                        # not the head yet
    assert core.pending_updates("fw-1", "t1") == [starting, running]
    assert core.on_message(m.StatusUpdateAck("agent-1", "fw-1", "t1", "no-such-uuid")) == []
    assert core.on_message(m.StatusUpdateAck("agent-1", "fw-1", "unknown", starting.uuid)) == []
    assert core.on_message(m.StatusUpdateAck("agent-1", "fw-9", "t1", starting.uuid)) == []
    assert updates(ack(core, starting)) == [running]
    assert ack(core, starting) == []                       # a duplicate
    assert core.pending_updates("fw-1", "t1") == [running]


# ------------------------------------------------------------------ exits
def test_exit_zero_is_finished_and_a_signal_is_failed():
    core, _ = make()
    register(core)
    launch(core, "ok")
    launch(core, "sig")
    core.on_task_exited("fw-1", "ok", exit_code=0)
    core.on_task_exited("fw-1", "sig", signal=9)
    finished = drain(core, "fw-1", "ok")[-1]
    failed = drain(core, "fw-1", "sig")[-1]
    assert finished.state == TaskState.FINISHED and finished.exit_code == 0
    assert failed.state == TaskState.FAILED and "signal 9 (SIGKILL)" in failed.message


def test_a_command_that_cannot_start_is_failed_and_frees_its_resources():
    core, _ = make()
    register(core)
    core.on_message(m.RunTask(FW, task("t1")))
    core.on_task_launch_failed("fw-1", "t1", "PermissionError: sandbox")
    assert core.used.is_empty()
    states = drain(core, "fw-1", "t1")
    assert [s.state for s in states] == [TaskState.STARTING, TaskState.FAILED]
    assert states[-1].reason == REASON_COMMAND_EXECUTOR_FAILED and "sandbox" in states[-1].message


# ------------------------------------------------------------------ kills
def test_kill_task_kills_with_the_tasks_grace_period_and_ends_killed():
    core, _ = make()
    register(core)
    launch(core, "t1", grace=7.5)
    out = core.on_message(m.KillTask("fw-1", "t1"))
    assert out == [KillTask("fw-1", "t1", 7.5)]
    assert core.on_message(m.KillTask("fw-1", "t1")) == []       # once is enough
    core.on_task_exited("fw-1", "t1", signal=15)
    killed = drain(core, "fw-1", "t1")[-1]
    assert killed.state == TaskState.KILLED and "KILL_TASK" in killed.message


def test_a_task_killed_before_its_process_started_is_killed_once_it_has_a_pid():
    core, _ = make()
    register(core)
    core.on_message(m.RunTask(FW, task("t1")))
    assert core.on_message(m.KillTask("fw-1", "t1")) == []
    assert of_type(core.on_task_started("fw-1", "t1", 77), KillTask) == [KillTask("fw-1", "t1", 3.0)]
    core.on_task_exited("fw-1", "t1", exit_code=0)                 # even a clean exit is KILLED then
    assert drain(core, "fw-1", "t1")[-1].state == TaskState.KILLED


def test_kill_of_an_unknown_task_answers_task_lost():
    core, _ = make()
    register(core)
    (status,) = updates(core.on_message(m.KillTask("fw-1", "ghost")))
    assert status.state == TaskState.LOST and status.reason == REASON_TASK_UNKNOWN and status.uuid


def test_shutdown_framework_kills_only_that_frameworks_tasks():
    core, _ = make()
    register(core)
    launch(core, "a")
    launch(core, "b")
    launch(core, "a", framework=OTHER_FW)
    out = core.on_message(m.ShutdownFramework("fw-1"))
    assert sorted(out, key=str) == [KillTask("fw-1", "a", 3.0), KillTask("fw-1", "b", 3.0)]


def test_a_shut_down_frameworks_dying_tasks_do_not_turn_away_the_next_frameworks_launches():
    """The master gives a removed framework's resources back at once and offers them again (as Mesos's
    does); the agent must not refuse the next framework's tasks TASK_ERROR while the old ones die out
    (their kill grace period; a custom executor's shutdown grace)."""
    core, _ = make("cpus:2;mem:256")
    register(core)
    launch(core, "a", resources="cpus:2;mem:256")
    core.on_message(m.ShutdownFramework("fw-1"))
    assert core.used == R("cpus:2;mem:256")          # the process still runs...
    assert core.free == R("cpus:2;mem:256")          # ...but what it held is the master's to offer again
    out = core.on_message(m.RunTask(OTHER_FW, task("b", resources="cpus:2;mem:256")))
    assert of_type(out, LaunchTask) and [s.state for s in updates(out)] == [TaskState.STARTING]
    core.on_task_exited("fw-1", "a", signal=15)
    assert core.used == R("cpus:2;mem:256") and core.free.is_empty()
    core.on_task_exited("fw-2", "b", exit_code=0)
    assert core.used.is_empty() and core.free == R("cpus:2;mem:256")
    # a second SHUTDOWN_FRAMEWORK of a framework gone releases nothing twice
    core.on_message(m.ShutdownFramework("fw-1"))
    assert core.free == R("cpus:2;mem:256")


def test_shutdown_agent_kills_everything_forgets_its_id_and_registers_anew_once_drained():
    core, clock = make()
    register(core, "agent-1")
    launch(core, "a")
    launch(core, "b")
    out = core.on_message(m.ShutdownAgent("removed"))
    assert sorted(out, key=str) == [KillTask("fw-1", "a", 3.0), KillTask("fw-1", "b", 3.0)]
    assert core.agent_id == "" and not core.registered and core.tasks() == []
    assert core.used == R("cpus:2;mem:256")          # the processes still hold them
    assert messages(core.tick()) == []               # no registration while they live
    assert core.on_task_exited("fw-1", "a", signal=15) == []   # no updates: the master wrote them off
    assert messages(core.tick()) == []
    core.on_task_exited("fw-1", "b", signal=9)
    (register_msg,) = messages(core.tick())
    assert isinstance(register_msg, m.RegisterAgent) and register_msg.agent.id == ""
    assert core.used.is_empty()
    core.on_message(m.AgentRegistered("agent-2", MASTER, 1.0))
    assert core.agent_id == "agent-2"


def test_after_shutdown_a_stuck_task_delays_registration_only_until_the_drain_deadline():
    core, clock = make()
    register(core)
    launch(core, "stuck", grace=2.0)
    core.on_message(m.ShutdownAgent())
    assert core.next_wakeup() == pytest.approx(clock.now() + 7.0)
    clock.advance(7.0)
    assert [type(msg) for msg in messages(core.tick())] == [m.RegisterAgent]


# --------------------------------------------------------------- messages
def test_framework_messages_go_to_running_tasks_only():
    core, _ = make()
    register(core)
    launch(core, "t1")
    msg = m.FrameworkMessage("fw-1", "agent-1", b"hello\n", task_id="t1")
    assert core.on_message(msg) == [DeliverMessage("fw-1", "t1", b"hello\n")]
    assert core.on_message(m.FrameworkMessage("fw-1", "agent-1", b"x", task_id="nope")) == []
    assert core.on_message(m.FrameworkMessage("fw-1", "agent-1", b"x")) == []


def test_idle_registered_agent_without_pings_sleeps_forever():
    core, _ = make()
    register(core, ping_interval=0.0)
    assert core.next_wakeup() == math.inf


def test_bad_constructor_arguments():
    clock = FakeClock()
    info = AgentInfo("h", R("cpus:1"))
    with pytest.raises(ValueError):
        AgentCore(clock, info, max_ping_timeouts=0)
    with pytest.raises(ValueError):
        AgentCore(clock, info, register_backoff=5.0, register_backoff_max=1.0)


# ============================================== checkpointing and recovery (issue 15)
from mesoslike.agent.core import (  # noqa: E402
    REASON_AGENT_DRAINING,
    REASON_CONTAINER_LIMITATION_MEMORY,
    REASON_EXECUTOR_TERMINATED,
    CheckpointAgent,
    CheckpointTask,
    ForgetTask,
    TaskCheckpoint,
)


def checkpointing(**kwargs):
    return make(checkpoint=True, **kwargs)


def kinds(commands):
    """The commands as (kind, detail): the order they must be carried out in."""
    out = []
    for command in commands:
        if isinstance(command, SendToMaster):
            msg = command.message
            out.append((msg.TYPE, msg.status.state if isinstance(msg, m.StatusUpdate) else ""))
        else:
            out.append((type(command).__name__, ""))
    return out


def test_every_update_is_checkpointed_before_it_is_sent_and_the_id_when_assigned():
    core, _ = checkpointing()
    core.tick()
    assert core.on_message(m.AgentRegistered("agent-1", MASTER, 1.0)) == [CheckpointAgent("agent-1")]
    out = core.on_message(m.RunTask(FW, task("t1")))
    assert kinds(out) == [("CheckpointTask", ""), ("STATUS_UPDATE", TaskState.STARTING), ("LaunchTask", "")]
    assert core.task_checkpoint("fw-1", "t1").updates == core.pending_updates("fw-1", "t1")
    out = core.on_task_started("fw-1", "t1", 42)
    assert kinds(out) == [("CheckpointTask", "")]          # behind STARTING: checkpointed, not sent yet
    (starting, running) = core.pending_updates("fw-1", "t1")
    assert kinds(ack(core, starting)) == [("CheckpointTask", ""), ("STATUS_UPDATE", TaskState.RUNNING)]
    assert kinds(core.on_task_exited("fw-1", "t1", exit_code=0)) == [("CheckpointTask", "")]
    ack(core, running)
    (finished,) = core.pending_updates("fw-1", "t1")
    assert ack(core, finished) == [ForgetTask("fw-1", "t1")]  # its story is told: nothing left to recover


def test_a_kill_is_checkpointed_before_it_is_carried_out():
    core, _ = checkpointing()
    register(core)
    launch(core, "t1")
    out = core.on_message(m.KillTask("fw-1", "t1"))
    assert kinds(out) == [("CheckpointTask", ""), ("KillTask", "")]
    assert core.task_checkpoint("fw-1", "t1").killing


def running_checkpoint(task_id="t1", state=TaskState.RUNNING, updates=(), **kwargs):
    return TaskCheckpoint(FW, task(task_id), state, list(updates), **kwargs)


def test_a_recovered_agent_reregisters_with_its_id_and_its_tasks_before_anything_else():
    core, _ = checkpointing()
    assert core.recover("agent-1", [running_checkpoint("t1"), running_checkpoint("t2")]) == []
    assert core.recovering() == [("fw-1", "t1"), ("fw-1", "t2")]
    assert core.used == R("cpus:2;mem:256")                  # what the still-running tasks hold
    assert core.on_task_reattached("fw-1", "t1", 101) == []  # RUNNING was said already: nothing new
    assert core.on_task_started("fw-1", "t2", 102) == []     # a recovered task's start is a re-attachment
    assert core.recovering() == []
    (rereg,) = registrations(core.tick())
    assert isinstance(rereg, m.ReregisterAgent) and rereg.agent.id == "agent-1"
    assert [(t.task.task_id, t.state) for t in rereg.tasks] == [("t1", TaskState.RUNNING), ("t2", TaskState.RUNNING)]
    assert [(t.task_id, t.pid) for t in core.tasks()] == [("t1", 101), ("t2", 102)]


def test_unacknowledged_updates_are_resent_with_their_original_uuids_then_the_exit_while_down():
    core, clock = make()
    register(core)
    starting, running = launch(core, "t1")
    ack(core, starting)
    # the agent dies here, RUNNING unacknowledged; the task exits 3 while no agent watches
    saved = TaskCheckpoint(FW, task("t1"), TaskState.RUNNING, [running])
    fresh, _ = checkpointing(rng=random.Random(99))
    fresh.recover("agent-1", [saved])
    out = fresh.on_task_started("fw-1", "t1", 4242) + fresh.on_task_exited("fw-1", "t1", exit_code=3)
    assert updates(out) == []                                 # no master yet
    fresh.tick()
    resent = updates(fresh.on_message(m.AgentRegistered("agent-1", MASTER, 1.0)))
    assert resent == [running]                                # same uuid, same timestamp: the same update
    (failed,) = fresh.pending_updates("fw-1", "t1")[1:]
    assert (failed.state, failed.exit_code) == (TaskState.FAILED, 3) and failed.uuid != running.uuid
    assert updates(ack(fresh, running)) == [failed]


def test_a_recovered_task_that_was_starting_says_running_once_found_alive():
    core, _ = checkpointing()
    starting = core._status("fw-1", "t1", TaskState.STARTING, "")
    core.recover("agent-1", [running_checkpoint("t1", TaskState.STARTING, [starting])])
    core.on_task_reattached("fw-1", "t1", 7)
    assert [s.state for s in core.pending_updates("fw-1", "t1")] == [TaskState.STARTING, TaskState.RUNNING]


def test_a_recovered_task_being_killed_is_killed_again_and_ends_killed():
    core, _ = checkpointing()
    core.recover("agent-1", [running_checkpoint("t1", killing=True, kill_why="KILL_TASK")])
    assert of_type(core.on_task_reattached("fw-1", "t1", 7), KillTask) == [KillTask("fw-1", "t1", 3.0)]
    core.on_task_exited("fw-1", "t1", signal=15)
    assert core.pending_updates("fw-1", "t1")[-1].state == TaskState.KILLED


def test_recovery_forgets_leftovers_whose_story_was_told():
    core, _ = checkpointing()
    out = core.recover("agent-1", [running_checkpoint("done", TaskState.FINISHED)])
    assert out == [ForgetTask("fw-1", "done")] and core.tasks() == []


def test_a_task_the_agent_restarted_on_before_it_started_fails_with_the_reason_given():
    core, _ = checkpointing()
    core.recover("agent-1", [running_checkpoint("t1", TaskState.STARTING)])
    core.on_task_launch_failed("fw-1", "t1", "the agent restarted", why="REASON_AGENT_RESTARTED")
    (failed,) = core.pending_updates("fw-1", "t1")
    assert (failed.state, failed.reason) == (TaskState.FAILED, "REASON_AGENT_RESTARTED")
    assert core.used.is_empty()


def test_a_memory_limitation_kills_at_once_and_ends_failed_naming_the_limit():
    core, _ = make()
    register(core)
    launch(core, "hog")
    out = core.on_task_limitation("fw-1", "hog", REASON_CONTAINER_LIMITATION_MEMORY,
                                  "memory limit exceeded: the task may use 64 MB (mem:64)")
    assert of_type(out, KillTask) == [KillTask("fw-1", "hog", 0.0)]
    assert core.on_task_limitation("fw-1", "hog", REASON_CONTAINER_LIMITATION_MEMORY, "again") == []
    core.on_task_exited("fw-1", "hog", signal=9)
    failed = core.pending_updates("fw-1", "hog")[-1]
    assert (failed.state, failed.reason) == (TaskState.FAILED, REASON_CONTAINER_LIMITATION_MEMORY)
    assert "mem:64" in failed.message and "signal 9" in failed.message


def test_an_exit_with_a_reason_is_failed_with_it_unless_the_agent_was_killing_the_task():
    core, _ = make()
    register(core)
    launch(core, "a")
    launch(core, "b")
    core.on_task_exited("fw-1", "a", reason=REASON_EXECUTOR_TERMINATED, message="the task's executor died")
    died = core.pending_updates("fw-1", "a")[-1]
    assert (died.state, died.reason) == (TaskState.FAILED, REASON_EXECUTOR_TERMINATED)
    assert "executor died" in died.message
    core.on_message(m.KillTask("fw-1", "b"))
    core.on_task_exited("fw-1", "b", reason=REASON_EXECUTOR_TERMINATED, message="the task's executor died")
    assert core.pending_updates("fw-1", "b")[-1].state == TaskState.KILLED


def test_tasks_killed_because_the_agent_stops_end_killed_never_failed():
    core, _ = make()
    register(core)
    launch(core, "a")
    out = core.kill_all("the agent stopped")
    assert of_type(out, KillTask) == [KillTask("fw-1", "a", 3.0)]
    core.on_task_exited("fw-1", "a", signal=15)
    ended = core.pending_updates("fw-1", "a")[-1]
    assert ended.state == TaskState.KILLED and "the agent stopped" in ended.message


def test_a_drain_kills_everything_refuses_new_tasks_and_unregisters_once_told():
    core, _ = checkpointing()
    register(core)
    (starting, running) = launch(core, "a")
    assert not core.draining and not core.drained
    out = core.drain()
    assert of_type(out, KillTask) == [KillTask("fw-1", "a", 3.0)]
    refused = updates(core.on_message(m.RunTask(FW, task("late"))))
    assert [(s.state, s.reason) for s in refused] == [(TaskState.DROPPED, REASON_AGENT_DRAINING)]
    ack(core, refused[0])
    core.on_task_exited("fw-1", "a", signal=15)
    assert not core.drained                                   # its updates are not acknowledged yet
    for status in drain(core, "fw-1", "a"):
        assert status.state != TaskState.FAILED
    assert core.drained
    out = core.unregister()
    assert [type(c) for c in out] == [SendToMaster, CheckpointAgent]
    assert out[0].message == m.UnregisterAgent("agent-1", "the agent was drained")
    assert out[1] == CheckpointAgent("") and core.agent_id == ""
    assert messages(core.tick()) == []                        # and it does not register again


def test_pongs_carry_the_latest_usage_and_registrations_the_http_address():
    core, _ = make(http_address="http://127.0.0.1:5151")
    (registration,) = registrations(core.tick())
    assert registration.http_address == "http://127.0.0.1:5151"
    core.on_message(m.AgentRegistered("agent-1", MASTER, 1.0))
    usage = [m.TaskUsage("fw-1", "t1", 1.0, cpus_user_time_secs=0.5, mem_rss_bytes=1024)]
    core.set_usage(usage)
    assert messages(core.on_message(m.Ping("agent-1"))) == [m.Pong("agent-1", usage)]


def test_shutdown_agent_forgets_the_checkpoints_of_the_tasks_it_kills():
    core, _ = checkpointing()
    register(core)
    launch(core, "a")
    out = core.on_message(m.ShutdownAgent("removed"))
    assert ForgetTask("fw-1", "a") in out and CheckpointAgent("") in out
    assert out.index(ForgetTask("fw-1", "a")) < out.index(KillTask("fw-1", "a", 3.0))
    assert core.task_checkpoint("fw-1", "a") is None


def test_a_ping_saying_the_master_does_not_know_this_agent_makes_it_reregister_at_once():
    core, clock = make()
    register(core)
    launch(core, "t1")
    assert messages(core.on_message(m.Ping("agent-1", connected=False))) == []   # no PONG: it is not known
    assert not core.registered and core.next_wakeup() == clock.now()
    (rereg,) = registrations(core.tick())
    assert isinstance(rereg, m.ReregisterAgent) and [t.task.task_id for t in rereg.tasks] == ["t1"]
    core.on_message(m.Ping("agent-1", connected=False))                          # already re-registering
    assert registrations(core.tick()) == []


def test_the_masters_receipts_are_kept_checkpointed_and_shown_when_re_registering():
    """An agent keeps the master's receipt for its id (AGENT_REGISTERED), checkpoints
    it with the id, recovers it, and shows it with each framework's (from RUN_TASK)
    in REREGISTER_AGENT: whose the ids are, told to a master without a registry."""
    core, clock = make(checkpoint=True)
    (msg,) = messages(core.tick())
    out = core.on_message(m.AgentRegistered("agent-1", MASTER, 1.0, receipt="r" * 32))
    assert of_type(out, CheckpointAgent) == [CheckpointAgent("agent-1", "r" * 32)]
    signed = FW.replace(principal="fwA", principal_receipt="f" * 32)
    launch(core, framework=signed)
    clock.advance(10.0)                                   # the master falls silent
    (again,) = registrations(core.tick())
    assert isinstance(again, m.ReregisterAgent) and again.receipt == "r" * 32
    assert [(f.id, f.principal, f.principal_receipt) for f in again.frameworks] == [("fw-1", "fwA", "f" * 32)]
    restarted, _ = make(checkpoint=True)
    restarted.recover("agent-1", [], "r" * 32)
    (shown,) = registrations(restarted.tick())
    assert isinstance(shown, m.ReregisterAgent) and shown.receipt == "r" * 32


def test_used_kept_in_place_is_the_vector_arithmetic():
    """``AgentCore._use``/``_unuse`` (thousandths changed in place while
    nothing used has ranges) leave ``_used`` what ``+`` and
    ``subtract_clamped`` of the vectors make, with ports coming and going."""
    rng = random.Random(2929)
    kinds = ["cpus:1", "cpus:0.5;mem:512", "mem:1", "disk:3", "cpus:1;ports:[1005-1005]", "ports:[1000-1002]",
             "cpus:0.01;mem:1"]
    for _ in range(200):
        core, _ = make("cpus:4;mem:1024;ports:[1000-1010]")
        expected = R("")
        for _ in range(rng.randrange(1, 30)):
            held = R(rng.choice(kinds))
            if rng.random() < 0.6:
                core._use(held)
                expected = expected + held
            else:
                core._unuse(held)
                expected = expected.subtract_clamped(held)
            if rng.random() < 0.5:
                assert core._used == expected and core.used == expected, (core._used, expected)
                need = R(rng.choice(kinds))
                assert core._fits(need) == core.free.contains(need)
        assert core._used == expected, (core._used, expected)


def test_fits_is_free_contains():
    """The launch check's shortcut (``AgentCore._fits``) says what
    ``free.contains`` says, with and without ports, released resources
    and a total the tasks overrun."""
    rng = random.Random(29)
    for _ in range(500):
        core, _ = make(rng.choice(["cpus:4;mem:1024", "cpus:4;mem:1024;ports:[1000-1010]", "cpus:2"]))
        core._used = R(f"cpus:{rng.choice([0, 1, 2.5, 4, 5])};mem:{rng.choice([0, 512, 1024, 2000])}")
        if rng.random() < 0.3:
            core._released = R(f"cpus:{rng.choice([0.5, 1, 3])}")
        need = R(rng.choice(["cpus:1", "cpus:0.5;mem:512", "mem:1", "cpus:4;mem:1024", "disk:1",
                             "cpus:1;ports:[1005-1005]"]))
        assert core._fits(need) == core.free.contains(need), (core._used, core._released, need)
