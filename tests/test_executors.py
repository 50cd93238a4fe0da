"""Custom executors end to end (issue 18 §1, docs/framework-api.rst "Custom
executors", docs/agent.rst): real master and agent processes, a real
executor process (tests/executor_program.py) run by the agent under its
supervisor, talking over the agent's executor channel."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import threading
from collections import deque
from pathlib import Path

import pytest

from agent_helpers import agent_state, kill_9, start_agent
from e2e_helpers import RecordingScheduler, alive, cluster, host_pid  # noqa: F401 (fixture)
from mesoslike import ExecutorInfo, Filters, FrameworkInfo, Resources, TaskInfo, TaskState, TaskStatus
from executor_program import pattern
from mesoslike.wire.types import TERMINAL_STATES
from waiting import wait_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")]

PROGRAM = Path(__file__).with_name("executor_program.py")
TASK = Resources.parse("cpus:0.1;mem:16")
#: a task's environment is clean (not the agent's): the executor is told where this tree's mesoslike is
EXECUTOR = ExecutorInfo("exec-1", f"/usr/bin/env PYTHONPATH={PROGRAM.parents[1]} {sys.executable} {PROGRAM}",
                        Resources.parse("cpus:0.5;mem:64"),
                        shutdown_grace_period=2.0)
AGENT = "cpus:2;mem:1024"


class ExecutorScheduler(RecordingScheduler):
    """Launches the queued (task_id, command) pairs on its custom executor,
    as many as fit in each offer (the executor's resources as well, the
    first time on an agent), and records everything."""

    def __init__(self, executor: ExecutorInfo = EXECUTOR) -> None:
        super().__init__()
        self.executor = executor
        self.queue: deque[tuple[str, str]] = deque()
        self.lock = threading.Lock()
        self.executor_on: set[str] = set()   # agents where the executor was launched

    def add(self, *tasks: tuple[str, str]) -> None:
        with self.lock:
            self.queue.extend(tasks)

    def on_offers(self, driver, offers):
        for offer in offers:
            left, tasks = offer.resources, []
            with self.lock:
                while self.queue:
                    need = TASK if offer.agent_id in self.executor_on else TASK + self.executor.resources
                    if not left.contains(need):
                        break
                    task_id, command = self.queue.popleft()
                    tasks.append(TaskInfo(task_id, offer.agent_id, command, TASK, executor=self.executor))
                    left = left - need
                    self.executor_on.add(offer.agent_id)
            if tasks:
                driver.launch_tasks([offer.id], tasks)
            else:
                driver.decline_offer(offer.id, Filters(refuse_seconds=0.2))

    def state_of(self, task_id: str) -> str | None:
        statuses = self.statuses(task_id)
        return statuses[-1].state if statuses else None

    def messages(self) -> list[bytes]:
        return [data for _, data in self.of("framework_message")]


def executor_pids(scheduler: ExecutorScheduler, *task_ids: str) -> set[str]:
    """The executor processes that reported the tasks RUNNING (their message is ``pid <ident>``:
    tests/executor_program.py)."""
    return {s.message.split()[1] for t in task_ids for s in scheduler.statuses(t)
            if s.state == TaskState.RUNNING and s.message.startswith("pid ")}


def running(ident: str) -> bool:
    """The executor process ``ident`` still runs."""
    pid = host_pid(ident)
    return pid is not None and alive(pid)


def signal_process(ident: str, signum: int) -> None:
    pid = host_pid(ident)
    assert pid is not None, f"no process {ident}"
    os.kill(pid, signum)


def run_cluster(cluster, scheduler, name="executors", **framework):
    cluster.start_master()
    start_agent(cluster, "a1", AGENT)
    return cluster.driver(scheduler, name, framework=FrameworkInfo(name, **framework))


def test_one_executor_runs_many_tasks_and_messages_go_both_ways(cluster):
    scheduler = ExecutorScheduler()
    scheduler.add(*[(f"t{i}", "finish") for i in range(5)])
    driver = run_cluster(cluster, scheduler)
    ids = [f"t{i}" for i in range(5)]
    scheduler.wait(lambda: all(scheduler.state_of(t) == TaskState.FINISHED for t in ids), 40,
                   "five tasks to finish on the executor", cluster.diagnostics)
    # one process ran them all, and said so as its updates' source
    pids = executor_pids(scheduler, *ids)
    assert len(pids) == 1, pids
    assert all(s.source == "SOURCE_EXECUTOR" for t in ids for s in scheduler.statuses(t)
               if s.state in (TaskState.RUNNING, TaskState.FINISHED))
    # executor -> scheduler: its registration message reached framework_message
    pid = pids.pop()
    scheduler.wait(lambda: f"registered exec-1 {pid}".encode() in scheduler.messages(), 20, "the executor's hello")
    # scheduler -> executor -> scheduler
    agent_id = scheduler.statuses("t0")[-1].agent_id
    driver.send_framework_message(agent_id, b"ping", "", executor_id="exec-1")
    scheduler.wait(lambda: f"pong exec-1 {pid}".encode() in scheduler.messages(), 20, "the executor's pong")
    # later tasks go to the same process
    scheduler.add(("t5", "finish"), ("t6", "finish"))
    driver.revive_offers()
    scheduler.wait(lambda: all(scheduler.state_of(t) == TaskState.FINISHED for t in ("t5", "t6")), 40,
                   "two more tasks", cluster.diagnostics)
    assert executor_pids(scheduler, "t5", "t6") == {pid}
    assert running(pid)


def offered(scheduler: ExecutorScheduler, since: int) -> list[tuple[float, float]]:
    """(cpus, mem) of the offers made since the ``since``-th callback."""
    return [cpus_mem(offer.resources) for offers in scheduler.of("resource_offers")[since:] for offer in offers]


def cpus_mem(resources: Resources) -> tuple[float, float]:
    return (round(resources.get("cpus"), 3), round(resources.get("mem"), 3))


def test_the_executor_resources_are_used_until_it_exits(cluster):
    scheduler = ExecutorScheduler()
    scheduler.add(("t0", "finish"))
    driver = run_cluster(cluster, scheduler)
    scheduler.wait(lambda: scheduler.state_of("t0") == TaskState.FINISHED, 40, "t0 to finish", cluster.diagnostics)
    total = cpus_mem(Resources.parse(AGENT))
    without_executor = cpus_mem(Resources.parse(AGENT) - EXECUTOR.resources)
    # the task's resources came back; the executor's did not: it still runs
    seen = len(scheduler.of("resource_offers"))
    scheduler.wait(lambda: without_executor in offered(scheduler, seen), 30,
                   f"an offer of {without_executor} (the agent less its idle executor)", cluster.diagnostics)
    assert total not in offered(scheduler, seen)
    pid = executor_pids(scheduler, "t0").pop()
    driver.send_framework_message(scheduler.statuses("t0")[-1].agent_id, b"exit", "", executor_id="exec-1")
    wait_until(lambda: not running(pid), 20, "the executor to exit")
    seen = len(scheduler.of("resource_offers"))
    scheduler.wait(lambda: total in offered(scheduler, seen), 30, f"an offer of the whole agent ({total})",
                   cluster.diagnostics)
    wait_until(lambda: agent_state(cluster, "a1")["executors"] == [], 10, "the agent to forget the executor")


def test_an_offer_without_room_for_the_executor_fails_the_task_and_starts_nothing(cluster):
    big = ExecutorInfo("big", EXECUTOR.command, Resources.parse("cpus:1.95;mem:64"))

    class Greedy(ExecutorScheduler):
        def on_offers(self, driver, offers):   # room for the task, not for its executor too
            if not self.statuses("t0"):
                driver.launch_tasks([offers[0].id], [TaskInfo("t0", offers[0].agent_id, "", TASK, executor=big)])

    scheduler = Greedy(big)
    run_cluster(cluster, scheduler)
    status = scheduler.wait(lambda: scheduler.statuses("t0"), 20, "t0's update")[-1]
    assert status.state == TaskState.ERROR and "its executor's" in status.message, status
    assert agent_state(cluster, "a1")["executors"] == []


def test_the_executor_exiting_fails_its_tasks(cluster):
    scheduler = ExecutorScheduler()
    scheduler.add(("held", "hold"))
    driver = run_cluster(cluster, scheduler)
    scheduler.wait(lambda: scheduler.state_of("held") == TaskState.RUNNING, 40, "held to run", cluster.diagnostics)
    scheduler.add(("crash", "exit 3"))
    driver.revive_offers()
    scheduler.wait(lambda: scheduler.state_of("held") == TaskState.FAILED and scheduler.state_of("crash")
                   == TaskState.FAILED, 40, "both tasks to fail with their executor", cluster.diagnostics)
    for task_id in ("held", "crash"):
        status = scheduler.statuses(task_id)[-1]
        assert status.reason == "REASON_EXECUTOR_TERMINATED", status
        assert "exec-1" in status.message and "status 3" in status.message, status.message


def test_an_update_sent_just_before_stop_and_exit_is_not_lost(cluster):
    """``send_status_update(FINISHED); stop(); exit`` (pymesos executors end
    so: their updates are synchronous HTTP calls): stop() waits for the agent
    to have the update, so the task ends FINISHED with its data, not FAILED
    with its executor."""
    scheduler = ExecutorScheduler()
    scheduler.add(("t1", "last 100000"))
    run_cluster(cluster, scheduler)
    scheduler.wait(lambda: scheduler.state_of("t1") in TERMINAL_STATES, 40, "t1 to end", cluster.diagnostics)
    final = scheduler.statuses("t1")[-1]
    assert (final.state, final.data) == (TaskState.FINISHED, pattern(100000)), final


def test_kill_task_reaches_the_executor(cluster):
    scheduler = ExecutorScheduler()
    scheduler.add(("held", "hold"), ("other", "hold"))
    driver = run_cluster(cluster, scheduler)
    scheduler.wait(lambda: scheduler.state_of("held") == scheduler.state_of("other") == TaskState.RUNNING, 40,
                   "the tasks to run", cluster.diagnostics)
    driver.kill_task("held")
    scheduler.wait(lambda: scheduler.state_of("held") == TaskState.KILLED, 20, "held to be killed",
                   cluster.diagnostics)
    assert scheduler.statuses("held")[-1].message == "killed by the executor"
    assert scheduler.state_of("other") == TaskState.RUNNING   # the executor and its other task go on
    pid = executor_pids(scheduler, "other").pop()
    assert running(pid)
    # a message naming one of its tasks (pymesos's executorId = task id habit) reaches the executor too
    driver.send_framework_message(scheduler.statuses("other")[-1].agent_id, b"ping", "other")
    scheduler.wait(lambda: f"pong exec-1 {pid}".encode() in scheduler.messages(), 20, "the executor's pong")


def test_teardown_shuts_an_idle_executor_down_too(cluster):
    scheduler = ExecutorScheduler()
    scheduler.add(("t0", "finish"))
    driver = run_cluster(cluster, scheduler)
    scheduler.wait(lambda: scheduler.state_of("t0") == TaskState.FINISHED, 40, "t0 to finish", cluster.diagnostics)
    pid = executor_pids(scheduler, "t0").pop()
    wait_until(lambda: agent_state(cluster, "a1")["tasks"] == [], 20, "the agent to forget t0 (no task is left)")
    driver.stop()   # the framework's only trace on the agent is its idle executor
    wait_until(lambda: not running(pid), 20, "the idle executor to end after its shutdown")


def test_teardown_shuts_the_executor_down(cluster):
    scheduler = ExecutorScheduler()
    scheduler.add(("held", "hold"))
    driver = run_cluster(cluster, scheduler)
    scheduler.wait(lambda: scheduler.state_of("held") == TaskState.RUNNING, 40, "held to run", cluster.diagnostics)
    pid = executor_pids(scheduler, "held").pop()
    driver.stop()   # tears the framework down
    wait_until(lambda: not running(pid), 20, "the executor to end after its shutdown")
    wait_until(lambda: agent_state(cluster, "a1")["executors"] == [] and agent_state(cluster, "a1")["tasks"] == [],
               20, "the agent to forget the executor and its task")


def test_updates_the_agent_refuses_while_the_master_is_away_are_sent_again_and_arrive_in_order(cluster, tmp_path):
    """The master frozen (SIGSTOP): the agent's updates of the task go unacknowledged, and past 100 the agent
    refuses the executor's (EXECUTOR_ERROR naming each); the executor driver sends them again after a backoff,
    so once the master is back the scheduler gets every update, in order, then TASK_FINISHED."""
    count = 150
    trigger = tmp_path / "flood"
    errors = tmp_path / "flood.errors"
    scheduler = ExecutorScheduler()
    scheduler.add(("flood", f"flood {count} {trigger}"))
    cluster.start_master("--max-agent-ping-timeouts", "60")   # the agent is not removed while it is frozen
    start_agent(cluster, "a1", AGENT)
    cluster.driver(scheduler, "flood", framework=FrameworkInfo("flood", failover_timeout=60.0))
    scheduler.wait(lambda: scheduler.state_of("flood") == TaskState.RUNNING, 40, "flood to run", cluster.diagnostics)
    cluster.master.signal_group(signal.SIGSTOP)
    try:
        trigger.touch()
        wait_until(lambda: errors.exists() and "unacknowledged by the master" in errors.read_text(), 30,
                   "the agent to refuse an update of the executor", diagnostics=cluster.diagnostics)
    finally:
        cluster.master.signal_group(signal.SIGCONT)
    scheduler.wait(lambda: scheduler.state_of("flood") == TaskState.FINISHED, 90, "flood to finish",
                   cluster.diagnostics)
    messages = [s.message for s in scheduler.statuses("flood") if s.message.startswith("n ")]
    assert messages == [f"n {i}" for i in range(count)]   # none lost, none repeated, in order
    assert [s.state for s in scheduler.statuses("flood")][-1] == TaskState.FINISHED


def test_agent_kill_9_and_restart_the_executor_reregisters_and_its_tasks_finish(cluster):
    scheduler = ExecutorScheduler()
    scheduler.add(("held", "hold"))
    cluster.start_master("--max-agent-ping-timeouts", "20")   # the agent is back before it would be removed
    agent = start_agent(cluster, "a1", AGENT)
    driver = cluster.driver(scheduler, "recover", framework=FrameworkInfo("recover", failover_timeout=60.0))
    scheduler.wait(lambda: scheduler.state_of("held") == TaskState.RUNNING, 40, "held to run", cluster.diagnostics)
    pid = executor_pids(scheduler, "held").pop()
    kill_9(agent)
    assert running(pid)   # the executor outlives its agent
    start_agent(cluster, "a1", AGENT, wait=False)

    def executor_back() -> bool:
        # from the agent's /state, not the executor's "reregistered" framework message: framework messages are
        # best effort (as in Mesos), and the executor can re-register before the agent has a master again
        try:
            state = agent_state(cluster, "a1")
        except (KeyError, ValueError, OSError):
            return False
        return state["registered"] and any(e["id"] == "exec-1" and e["registered"] for e in state["executors"])
    wait_until(executor_back, 30, "the executor to re-register with the restarted agent, and it with the master",
               diagnostics=cluster.diagnostics)
    assert running(pid)
    driver.kill_task("held")   # reaches the executor through the new agent
    scheduler.wait(lambda: scheduler.state_of("held") == TaskState.KILLED, 20, "held to be killed",
                   cluster.diagnostics)
    scheduler.add(("after", "finish"))
    driver.revive_offers()
    scheduler.wait(lambda: scheduler.state_of("after") == TaskState.FINISHED, 40, "a task after the restart",
                   cluster.diagnostics)
    assert executor_pids(scheduler, "after") == {pid}   # the same, recovered executor
    assert not {TaskState.FAILED, TaskState.LOST} & {s.state for s in scheduler.statuses()}


def test_an_executor_that_does_not_reconnect_after_an_agent_restart_is_killed_and_its_tasks_fail(cluster):
    scheduler = ExecutorScheduler()
    scheduler.add(("held", "hold"), ("other", "hold"))
    cluster.start_master("--max-agent-ping-timeouts", "20")   # the agent is back before it would be removed
    agent = start_agent(cluster, "a1", AGENT)
    cluster.driver(scheduler, "hung", framework=FrameworkInfo("hung", failover_timeout=60.0))
    scheduler.wait(lambda: scheduler.state_of("held") == scheduler.state_of("other") == TaskState.RUNNING, 40,
                   "the tasks to run", cluster.diagnostics)
    pid = executor_pids(scheduler, "held").pop()
    signal_process(pid, signal.SIGSTOP)   # hung: it cannot reconnect to the next agent
    try:
        kill_9(agent)
        start_agent(cluster, "a1", AGENT, "--executor-reregistration-timeout", "1s", wait=False)
        scheduler.wait(lambda: scheduler.state_of("held") == scheduler.state_of("other") == TaskState.FAILED, 40,
                       "the tasks to fail with their executor", cluster.diagnostics)
    finally:
        if running(pid):
            signal_process(pid, signal.SIGCONT)
    for task_id in ("held", "other"):
        status = scheduler.statuses(task_id)[-1]
        assert status.reason == "REASON_EXECUTOR_REREGISTRATION_TIMEOUT", status
        assert "exec-1" in status.message and "did not reconnect within 1 s" in status.message, status.message
    wait_until(lambda: not running(pid), 10, "the executor to be killed")
    wait_until(lambda: agent_state(cluster, "a1")["executors"] == [], 10, "the agent to forget the executor")


def test_an_executor_that_never_registers_is_killed_after_the_registration_timeout_and_its_tasks_fail(cluster):
    silent = ExecutorInfo("silent", "sleep 600", EXECUTOR.resources)   # never runs an ExecutorDriver
    scheduler = ExecutorScheduler(silent)
    scheduler.add(("waits", "finish"))
    cluster.start_master()
    start_agent(cluster, "a1", AGENT, "--executor-registration-timeout", "1s")
    cluster.driver(scheduler, "silent", framework=FrameworkInfo("silent"))
    scheduler.wait(lambda: scheduler.state_of("waits") == TaskState.FAILED, 40, "the task to fail",
                   cluster.diagnostics)
    status = scheduler.statuses("waits")[-1]
    assert status.reason == "REASON_EXECUTOR_REGISTRATION_TIMEOUT", status
    assert "'silent'" in status.message and "did not register within 1 s" in status.message, status.message
    wait_until(lambda: agent_state(cluster, "a1")["executors"] == [], 10, "the agent to forget the executor")


def test_the_executor_registration_and_reregistration_timeouts_are_checked():
    from mesoslike.agent.core import AgentCore
    from mesoslike.agent.runtime import AgentRuntime
    from mesoslike.agent.settings import AgentSettings
    from mesoslike.clock import FakeClock
    from mesoslike.errors import ConfigError
    from mesoslike.wire.types import AgentInfo

    for bad in (0, -1, 86_401):
        with pytest.raises(ValueError, match="executor_reregister_timeout"):
            AgentCore(FakeClock(0), AgentInfo("h", Resources()), executor_reregister_timeout=bad)
        with pytest.raises(ConfigError, match="--executor-reregistration-timeout"):
            AgentRuntime(AgentSettings(master="tcp://127.0.0.1:1", resources="cpus:1;mem:64",
                                       executor_reregistration_timeout=bad))
        with pytest.raises(ConfigError, match="--executor-registration-timeout"):
            AgentRuntime(AgentSettings(master="tcp://127.0.0.1:1", resources="cpus:1;mem:64",
                                       executor_registration_timeout=bad))


def test_a_channel_directory_in_tmp_that_is_not_the_agents_is_refused(tmp_path, monkeypatch):
    """A long work dir's channel lives under <tmp>/mesoslike-<uid>/: if that was made by someone else (here a
    symlink to a directory of theirs), they could swap the channel for their own socket and learn executors'
    secrets, so the agent refuses to start."""
    import tempfile

    from mesoslike.agent.runtime import AgentRuntime, executor_socket_path

    from mesoslike.agent.settings import AgentSettings
    from mesoslike.errors import ConfigError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    work_dir = tmp_path / ("w" * 100)
    socket = executor_socket_path(work_dir)
    assert socket.parent.parent.parent == tmp_path / "tmp"
    (tmp_path / "theirs").mkdir()
    (tmp_path / "tmp").mkdir()
    socket.parent.parent.symlink_to(tmp_path / "theirs")
    runtime = AgentRuntime(AgentSettings(master="tcp://127.0.0.1:1", resources="cpus:1;mem:64", hostname="h",
                                         work_dir=work_dir, isolation="posix"))
    with pytest.raises(ConfigError, match="mesoslike-.* is not a directory of the agent's user"):
        runtime.run()
    assert list((tmp_path / "theirs").iterdir()) == []


def test_garbage_and_a_wrong_secret_on_the_executor_channel_are_refused_and_the_agent_goes_on(cluster):
    from mesoslike.transport import Client
    from mesoslike.wire import executor_messages as x

    scheduler = ExecutorScheduler()
    scheduler.add(("t0", "finish"))
    driver = run_cluster(cluster, scheduler)
    scheduler.wait(lambda: scheduler.state_of("t0") == TaskState.FINISHED, 40, "t0 to finish", cluster.diagnostics)
    endpoint = agent_state(cluster, "a1")["executor_channel"]
    oversized = Client(endpoint, codec=x.EXECUTOR_CODEC)   # cut off by the agent's socket (its frame limit)
    oversized.send_frame(b"\x00" * 5_000_000)
    intruder = Client(endpoint, codec=x.EXECUTOR_CODEC)
    try:
        for frame in (b"", b"\xff" * 100, x.EXECUTOR_CODEC.encode(x.ShutdownExecutor())):
            intruder.send_frame(frame)
        intruder.send(x.RegisterExecutor("0" * 64))
        intruder.send(x.ExecutorStatus("1" * 64, scheduler.statuses("t0")[-1]))
        intruder.send(x.ExecutorMessage("2" * 64, b"forged"))
        errors: list[str] = []

        def refused():
            intruder.wait(0.1)
            errors.extend(m.message for _, m in intruder.receive() if isinstance(m, x.ExecutorError))
            return sum("unknown executor secret" in e for e in errors) >= 3

        wait_until(refused, 20, "three refusals of a wrong secret")
        assert not [e for e in errors if "registered" in e.lower()]
        assert any("bad frame" in e for e in errors) and any("not a message an executor sends" in e for e in errors)
    finally:
        intruder.close()
        oversized.close()
    assert cluster.agents["a1"].running()
    assert b"forged" not in scheduler.messages()
    scheduler.add(("t1", "finish"))
    driver.revive_offers()
    scheduler.wait(lambda: scheduler.state_of("t1") == TaskState.FINISHED, 40, "a task after the garbage",
                   cluster.diagnostics)
    assert executor_pids(scheduler, "t0") == executor_pids(scheduler, "t1")


# ------------------------------------------------------------ the cores, sans I/O
def registered_agent_core(**options):
    import random

    from mesoslike.agent.core import AgentCore
    from mesoslike.clock import FakeClock
    from mesoslike.wire import messages as m
    from mesoslike.wire.types import AgentInfo, MasterInfo

    clock = FakeClock(100.0)
    secrets = iter(["a" * 64, "b" * 64, "c" * 64])
    core = AgentCore(clock, AgentInfo("host-1", Resources.parse("cpus:4;mem:1024")), rng=random.Random(3),
                     checkpoint=True, executor_endpoint="ipc:///tmp/x.sock", new_secret=lambda: next(secrets),
                     **options)
    core.tick()
    core.on_message(m.AgentRegistered("agent-1", MasterInfo("m", "tcp://127.0.0.1:1"), 1.0))
    return core, clock


def executor_task(task_id, executor=EXECUTOR):
    return TaskInfo(task_id, "agent-1", "", TASK, executor=executor)


def test_core_an_executor_speaks_only_for_its_own_tasks_and_only_with_its_secret():
    from mesoslike.agent.core import MAX_EXECUTOR_PENDING_UPDATES, LaunchTask, SendToExecutor
    from mesoslike.wire import executor_messages as x
    from mesoslike.wire import messages as m
    from mesoslike.wire.types import TaskStatus

    core, _ = registered_agent_core()
    fw = FrameworkInfo("f", id="fw-1")
    other = ExecutorInfo("exec-2", EXECUTOR.command, EXECUTOR.resources)
    launches = [c for t, e in (("t1", EXECUTOR), ("t2", other)) for c in core.on_message(
        m.RunTask(fw, executor_task(t, e))) if isinstance(c, LaunchTask)]
    # each secret goes to its process as a file of its sandbox, never in its environment nor its checkpoint
    assert [c.secret_files for c in launches] == [{x.SECRET_FILE: b"a" * 64}, {x.SECRET_FILE: b"b" * 64}]
    assert all(x.SECRET_ENV not in c.task.environment and c.task.environment[x.SECRET_FILE_ENV] == x.SECRET_FILE
               and "a" * 64 not in repr(c) for c in launches)
    checkpoint = core.task_checkpoint("fw-1", launches[0].task.task_id)
    assert checkpoint is not None and "a" * 64 not in repr(checkpoint)
    assert checkpoint.executor_secret_digest == hashlib.sha256(b"a" * 64).hexdigest()
    assert core.used.get("cpus") == 2 * 0.1 + 2 * 0.5   # both tasks and both executors
    for launch in launches:
        core.on_task_started("fw-1", launch.task.task_id, 1000)
    # exec-1 registers and is handed t1 only
    out = core.on_executor_frame(b"peer-1", x.RegisterExecutor("a" * 64))
    sent = [c.message for c in out if isinstance(c, SendToExecutor)]
    assert isinstance(sent[0], x.ExecutorRegistered) and sent[0].executor.executor_id == "exec-1"
    assert [s.task.task_id for s in sent if isinstance(s, x.LaunchExecutorTask)] == ["t1"]
    # exec-1 may not report exec-2's task; a wrong secret is refused; nothing reaches the master
    for frame in (x.ExecutorStatus("a" * 64, TaskStatus("t2", TaskState.FINISHED, uuid="u1")),
                  x.ExecutorStatus("d" * 64, TaskStatus("t1", TaskState.FINISHED, uuid="u2")),
                  x.ExecutorStatus("a" * 64, TaskStatus("t1", TaskState.STAGING, uuid="u3"))):
        out = core.on_executor_frame(b"peer-1", frame)
        assert [type(c.message) for c in out] == [x.ExecutorError], out
        if frame.secret == "a" * 64:   # the executor's own frame: the refusal names the update, for good
            assert (out[0].message.uuid, out[0].message.retry) == (frame.status.uuid, False)
    # no TASK_STARTING of the agent's for a custom executor's tasks (only the executor reports on them)
    assert {t.task_id: t.state for t in core.tasks()} == {"t1": TaskState.STAGING, "t2": TaskState.STAGING}
    assert core.pending_updates("fw-1", "t1") == core.pending_updates("fw-1", "t2") == []
    # its own update goes the reliable way (to the master), then is acknowledged; a resend only acknowledged
    out = core.on_executor_frame(b"peer-1", x.ExecutorStatus("a" * 64, TaskStatus("t1", TaskState.FINISHED,
                                                                                   uuid="u4", message="ok")))
    kinds = [type(getattr(c, "message", c)).__name__ for c in out]
    assert kinds.index("CheckpointTask") < kinds.index("ExecutorStatusAck")   # on disk before acknowledged
    assert core.pending_updates("fw-1", "t1")[-1].source == "SOURCE_EXECUTOR"
    again = core.on_executor_frame(b"peer-1", x.ExecutorStatus("a" * 64, TaskStatus("t1", TaskState.FINISHED,
                                                                                     uuid="u4")))
    assert [type(c.message) for c in again] == [x.ExecutorStatusAck]
    # a flood of updates while no master acknowledges is bounded: non-terminal ones are refused past the bound
    core.on_message(m.RunTask(fw, executor_task("t3")))
    core.on_executor_frame(b"peer-1", x.RegisterExecutor("a" * 64, []))
    replies = [c.message for i in range(MAX_EXECUTOR_PENDING_UPDATES + 5) for c in core.on_executor_frame(
        b"peer-1", x.ExecutorStatus("a" * 64, TaskStatus("t3", TaskState.RUNNING, uuid=f"r{i}")))
        if isinstance(c, SendToExecutor)]
    assert len(core.pending_updates("fw-1", "t3")) == MAX_EXECUTOR_PENDING_UPDATES
    refusals = [r for r in replies if isinstance(r, x.ExecutorError)]
    assert len(refusals) == 5   # the agent queued no TASK_STARTING of its own: every slot is the executor's
    # each refusal names its update and says it may be sent again later (the executor driver does)
    assert all(r.retry for r in refusals) and [r.uuid for r in refusals][-5:] == [
        f"r{i}" for i in range(MAX_EXECUTOR_PENDING_UPDATES, MAX_EXECUTOR_PENDING_UPDATES + 5)]
    out = core.on_executor_frame(b"peer-1", x.ExecutorStatus("a" * 64, TaskStatus("t3", TaskState.FAILED, uuid="z")))
    assert core.pending_updates("fw-1", "t3")[-1].state == TaskState.FAILED   # a terminal one always gets in


def test_core_an_executor_that_never_registers_is_killed_and_its_tasks_fail():
    from mesoslike.agent.core import EXECUTOR_REGISTER_TIMEOUT, AgentCore, KillTask, LaunchTask
    from mesoslike.wire import executor_messages as x
    from mesoslike.wire import messages as m

    core, clock = registered_agent_core()
    fw = FrameworkInfo("f", id="fw-1")
    (launch,) = [c for c in core.on_message(m.RunTask(fw, executor_task("t1"))) if isinstance(c, LaunchTask)]
    core.on_task_started("fw-1", launch.task.task_id, 1000)
    assert core.next_wakeup() <= clock.now() + EXECUTOR_REGISTER_TIMEOUT
    clock.advance(EXECUTOR_REGISTER_TIMEOUT - 1)
    assert not [c for c in core.tick() if isinstance(c, KillTask)]   # still in time
    clock.advance(1)
    kills = [c for c in core.tick() if isinstance(c, KillTask)]
    assert [(k.framework_id, k.task_id) for k in kills] == [("fw-1", launch.task.task_id)]
    core.on_task_exited("fw-1", launch.task.task_id, None, 9)
    failed = core.pending_updates("fw-1", "t1")[-1]
    assert (failed.state, failed.reason) == (TaskState.FAILED, "REASON_EXECUTOR_REGISTRATION_TIMEOUT")
    assert "did not register within 60 s" in failed.message
    assert core.used.is_empty() and core.executors() == []
    # one that registers in time is not killed later
    (launch,) = [c for c in core.on_message(m.RunTask(fw, executor_task("t2"))) if isinstance(c, LaunchTask)]
    core.on_task_started("fw-1", launch.task.task_id, 1001)
    clock.advance(EXECUTOR_REGISTER_TIMEOUT - 1)
    core.on_executor_frame(b"peer", x.RegisterExecutor("b" * 64))
    clock.advance(EXECUTOR_REGISTER_TIMEOUT * 2)
    assert not [c for c in core.tick() if isinstance(c, KillTask)]
    for bad in (0, -1, 86_401):
        with pytest.raises(ValueError, match="executor_register_timeout"):
            AgentCore(clock, core.info, executor_register_timeout=bad)


def test_core_a_framework_runs_a_bounded_number_of_executors_on_an_agent():
    import itertools

    from mesoslike.agent.core import MAX_EXECUTORS_PER_FRAMEWORK, AgentCore, LaunchTask, SendToMaster
    from mesoslike.clock import FakeClock
    from mesoslike.wire import messages as m
    from mesoslike.wire.types import AgentInfo, MasterInfo

    numbers = itertools.count()
    core = AgentCore(FakeClock(0.0), AgentInfo("h", Resources.parse("cpus:1000;mem:100000")), checkpoint=True,
                     executor_endpoint="ipc:///tmp/x.sock", new_secret=lambda: f"{next(numbers):064x}")
    core.tick()
    core.on_message(m.AgentRegistered("agent-1", MasterInfo("m", "tcp://127.0.0.1:1"), 1.0))
    fw = FrameworkInfo("f", id="fw-1")
    idle = ExecutorInfo("e", EXECUTOR.command)   # no resources of its own: only the bound stops them
    for i in range(MAX_EXECUTORS_PER_FRAMEWORK):
        out = core.on_message(m.RunTask(fw, executor_task(f"t{i}", idle.replace(executor_id=f"e{i}"))))
        assert [c for c in out if isinstance(c, LaunchTask)]
    out = core.on_message(m.RunTask(fw, executor_task("over", idle.replace(executor_id="e-over"))))
    assert not [c for c in out if isinstance(c, LaunchTask)]
    refused = core.pending_updates("fw-1", "over")[-1]
    assert refused.state == TaskState.ERROR and f"already runs {MAX_EXECUTORS_PER_FRAMEWORK}" in refused.message
    assert [c.message for c in out if isinstance(c, SendToMaster) and isinstance(c.message, m.ExecutorExited)]
    # an executor already running still takes tasks; another framework has its own bound
    core.on_message(m.RunTask(fw, executor_task("more", idle.replace(executor_id="e0"))))
    assert {t.task_id: t.state for t in core.tasks()}["more"] == TaskState.STAGING
    other = FrameworkInfo("g", id="fw-2")
    assert [c for c in core.on_message(m.RunTask(other, executor_task("g1", idle))) if isinstance(c, LaunchTask)]


def test_core_the_executor_container_is_its_resources_plus_its_live_tasks():
    from mesoslike.agent.core import LaunchTask, UpdateContainer
    from mesoslike.wire import executor_messages as x
    from mesoslike.wire import messages as m
    from mesoslike.wire.types import TaskStatus

    core, _ = registered_agent_core()
    fw = FrameworkInfo("f", id="fw-1")

    def resized(out):
        return [c.resources for c in out if isinstance(c, UpdateContainer)]

    out = core.on_message(m.RunTask(fw, executor_task("t1")))
    (launch,) = [c for c in out if isinstance(c, LaunchTask)]
    assert launch.task.resources == EXECUTOR.resources + TASK and resized(out) == []   # started with room for t1
    core.on_task_started("fw-1", launch.task.task_id, 1000)
    core.on_executor_frame(b"peer", x.RegisterExecutor("a" * 64))
    assert resized(core.on_message(m.RunTask(fw, executor_task("t2")))) == [EXECUTOR.resources + TASK + TASK]
    out = core.on_executor_frame(b"peer", x.ExecutorStatus("a" * 64, TaskStatus("t1", TaskState.FINISHED, uuid="u")))
    assert resized(out) == [EXECUTOR.resources + TASK]
    out = core.on_message(m.RunTask(fw, TaskInfo("t3", "agent-1", "", Resources.parse("cpus:9"), executor=EXECUTOR)))
    assert resized(out) == []   # refused (no room): nothing changes


def test_core_executor_driver_keeps_updates_until_acknowledged_and_resends_them_on_reregistration():
    from mesoslike.clock import FakeClock
    from mesoslike.executor.core import ExecutorCore, InvokeCallback, SendToAgent
    from mesoslike.wire import executor_messages as x
    from mesoslike.wire.types import AgentInfo, TaskStatus

    uuids = iter(f"u{i}" for i in range(10))
    core = ExecutorCore("s" * 64, FakeClock(0.0), lambda: next(uuids))
    assert [c.message for c in core.on_connected()] == [x.RegisterExecutor("s" * 64, [])]
    registered = x.ExecutorRegistered(EXECUTOR, FrameworkInfo("f", id="fw"), AgentInfo("h", Resources()))
    assert [c.name for c in core.on_message(registered) if isinstance(c, InvokeCallback)] == ["registered"]
    task = executor_task("t1")
    assert len(core.on_message(x.LaunchExecutorTask(task))) == 1
    assert core.on_message(x.LaunchExecutorTask(task)) == []   # handed twice: launched once
    sent = core.send_status_update(TaskStatus("t1", TaskState.FINISHED))
    assert [c.message.status.uuid for c in sent] == ["u0"]
    # the agent restarts: disconnected, registers again with the task it still has, resends the update
    out = core.on_connected()
    assert [c.name for c in out if isinstance(c, InvokeCallback)] == ["disconnected"]
    assert [c.message for c in out if isinstance(c, SendToAgent)] == [x.RegisterExecutor("s" * 64, ["t1"])]
    out = core.on_message(registered)
    assert [c.name for c in out if isinstance(c, InvokeCallback)] == ["reregistered"]
    assert [c.message.status.uuid for c in out if isinstance(c, SendToAgent)] == ["u0"]
    core.on_message(x.ExecutorStatusAck("t1", "u0"))
    assert core.pending_updates == [] and core.tasks == []
    with pytest.raises(ValueError, match="max-message-size"):
        core.send_framework_message(b"x" * (core.max_message_size + 1))


def test_core_executor_driver_sends_a_refused_update_again_after_a_backoff_keeping_each_tasks_order():
    """An update the agent refuses for now (EXECUTOR_ERROR naming its uuid, retry) is sent again after a
    backoff, until acknowledged; a task's later updates wait behind it; one refused for good is dropped
    with the error callback saying so, and the task's next update goes out."""
    from mesoslike.clock import FakeClock
    from mesoslike.executor.core import UPDATE_ANSWER_TIMEOUT, UPDATE_RETRY_MIN, ExecutorCore, InvokeCallback, SendToAgent
    from mesoslike.wire import executor_messages as x
    from mesoslike.wire.types import AgentInfo, TaskStatus

    def sent(commands):
        return [(c.message.status.task_id, c.message.status.uuid) for c in commands if isinstance(c, SendToAgent)]

    def errors(commands):
        return [c.args[0] for c in commands if isinstance(c, InvokeCallback) and c.name == "error"]

    clock = FakeClock(0.0)
    uuids = iter(f"u{i}" for i in range(10))
    core = ExecutorCore("s" * 64, clock, lambda: next(uuids))
    core.on_connected()
    core.on_message(x.ExecutorRegistered(EXECUTOR, FrameworkInfo("f", id="fw"), AgentInfo("h", Resources())))
    for task_id in ("t1", "t2"):
        core.on_message(x.LaunchExecutorTask(executor_task(task_id)))
    assert sent(core.send_status_update(TaskStatus("t1", TaskState.RUNNING))) == [("t1", "u0")]
    assert sent(core.send_status_update(TaskStatus("t1", TaskState.FINISHED))) == []   # waits behind u0
    assert sent(core.send_status_update(TaskStatus("t2", TaskState.RUNNING))) == [("t2", "u2")]   # other task
    # u0 refused for now: the error callback hears it; sent again after the backoff, doubled per refusal
    refused = x.ExecutorError("too many unacknowledged", uuid="u0", retry=True)
    assert errors(core.on_message(refused)) == ["too many unacknowledged"]
    assert core.next_wakeup() == UPDATE_RETRY_MIN
    clock.advance(UPDATE_RETRY_MIN - 0.01)
    assert sent(core.tick()) == []
    clock.advance(0.01)
    assert sent(core.tick()) == [("t1", "u0")]
    core.on_message(refused)
    clock.advance(UPDATE_RETRY_MIN)
    assert sent(core.tick()) == []
    clock.advance(UPDATE_RETRY_MIN)
    assert sent(core.tick()) == [("t1", "u0")]
    # acknowledged: gone from pending, and the task's next update goes out
    assert sent(core.on_message(x.ExecutorStatusAck("t1", "u0"))) == [("t1", "u1")]
    assert [s.uuid for s in core.pending_updates] == ["u1", "u2"]
    assert sent(core.on_message(x.ExecutorStatusAck("t1", "u1"))) == []
    assert [s.uuid for s in core.pending_updates] == ["u2"] and core.tasks == ["t2"]
    # refused for good (a state the agent does not take): dropped, said, and the next one of the task goes out
    core.send_status_update(TaskStatus("t2", TaskState.FINISHED))
    out = core.on_message(x.ExecutorError("an executor may not report 'TASK_RUNNING'", uuid="u2"))
    assert "dropped" in errors(out)[0] and sent(out) == [("t2", "u3")]
    assert [s.uuid for s in core.pending_updates] == ["u3"]
    # an update in flight with no answer at all (an older agent's refusal names none) is sent again too
    clock.advance(UPDATE_ANSWER_TIMEOUT)
    assert sent(core.tick()) == [("t2", "u3")]
    core.on_message(x.ExecutorStatusAck("t2", "u3"))
    assert core.pending_updates == [] and core.tasks == [] and core.next_wakeup() is None


def test_the_example_runs_many_tasks_on_one_executor_per_agent(tmp_path):
    """examples/executor_many_tasks.py under ``mesoslike local`` (2 agents), as docs/framework-api.rst shows it."""
    import subprocess

    from e2e_helpers import REPO, child_env, free_port

    done = subprocess.run(
        [sys.executable, "-m", "mesoslike", "local", "--agents", "2", "--port", str(free_port()), "--http-port",
         str(free_port()), "--work-dir", str(tmp_path / "work"), "--allocation-interval", "0.2", "--",
         sys.executable, "examples/executor_many_tasks.py", "--tasks", "40", "--timeout", "60"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if "tasks finished on" in line)
    processes, agents = int(line.split(" on ")[1].split()[0]), int(line.split("agent used: ")[1].split(")")[0])
    assert line.startswith("40 tasks finished") and processes == agents <= 2, line


# ------------------------------------------------------------ the channel's codec
def channel_examples():
    from mesoslike.wire import executor_messages as x
    from mesoslike.wire.types import AgentInfo, TaskStatus

    task = executor_task("t1")
    return [x.RegisterExecutor("a" * 64, ["t1", "t2"]), x.RegisterExecutor("a" * 64),
            x.ExecutorStatus("a" * 64, TaskStatus("t1", TaskState.RUNNING, uuid="u1", healthy=True)),
            x.ExecutorMessage("a" * 64, b"\x00data"),
            x.ExecutorRegistered(EXECUTOR, FrameworkInfo("f", id="fw"), AgentInfo("h", TASK, id="a1"), True),
            x.LaunchExecutorTask(task), x.KillExecutorTask("t1"), x.ExecutorFrameworkMessage(b"data"),
            x.ExecutorStatusAck("t1", "u1"), x.ShutdownExecutor(), x.ExecutorError("refused"),
            x.ExecutorError("refused for now", uuid="u1", retry=True)]


def test_every_channel_message_round_trips_and_the_fast_decoder_agrees_on_any_mutation():
    from codec_helpers import assert_the_fast_decoder_agrees_on_any_mutation

    from mesoslike.wire import executor_messages as x

    examples = channel_examples()
    assert {type(e).TYPE for e in examples} == set(x.EXECUTOR_SCHEMA.types)
    for example in examples:
        assert x.EXECUTOR_CODEC.decode(x.EXECUTOR_CODEC.encode(example)) == example
        assert_the_fast_decoder_agrees_on_any_mutation(x.EXECUTOR_CODEC, example)


def test_the_channel_refuses_oversized_data_and_secrets_naming_the_field():
    import msgpack

    from mesoslike.wire import WireError
    from mesoslike.wire import executor_messages as x

    from mesoslike.wire.codec import sized

    # data: the channel's frames are sized to the agent's --max-message-size (here the least, 1 KiB: 8 MiB frames)
    small = sized(x.EXECUTOR_CODEC, 1024)
    with pytest.raises(WireError, match="exceeds the limit"):
        small.decode(msgpack.packb({"v": 1, "type": "EXECUTOR_MESSAGE", "secret": "a" * 64,
                                    "data": b"x" * small.max_message_size}, use_bin_type=True))
    for fields, fragment in ((dict(type="REGISTER_EXECUTOR", secret="a" * 65), "secret"),
                             (dict(type="EXECUTOR_STATUS", secret="a" * 64, status={"task_id": "t"}), "state"),
                             (dict(type="EXECUTOR_MESSAGE", secret="a" * 65, data=b""), "secret"),
                             (dict(type="EXECUTOR_STATUS", secret="a" * 65,
                                   status={"task_id": "t", "state": "TASK_RUNNING"}), "secret"),
                             (dict(type="REGISTER_EXECUTOR", secret="a" * 64,
                                   tasks=["t"] * (x.MAX_REPORTED_TASKS + 1)), "tasks")):
        with pytest.raises(WireError, match=fragment):
            x.EXECUTOR_CODEC.decode(msgpack.packb({"v": 1, **fields}, use_bin_type=True))
    # and made by a call (Structs now: their checks in __post_init__, the words of attrs' max_len as before)
    with pytest.raises(ValueError, match="Length of 'secret' must be <= 64: 65"):
        x.RegisterExecutor("a" * 65)
    with pytest.raises(ValueError, match="Length of 'tasks' must be <= 100000: 100001"):
        x.RegisterExecutor("a" * 64, ["t"] * (x.MAX_REPORTED_TASKS + 1))
    with pytest.raises(ValueError, match="Length of 'secret'"):
        x.ExecutorStatus("a" * 65, TaskStatus("t", TaskState.RUNNING))
    with pytest.raises(ValueError, match="Length of 'secret'"):
        x.ExecutorMessage("a" * 65, b"")


def test_core_the_master_takes_the_executor_resources_once_and_frees_them_when_it_exits():
    import test_master_core as helpers   # its Harness: a MasterCore on a FakeClock

    from mesoslike.wire import messages as m

    h = helpers.Harness()
    fid, aid = h.subscribe(), h.register_agent(resources="cpus:4;mem:1024")
    (offer,) = h.offers(h.tick())
    executor = ExecutorInfo("e1", "run", Resources.parse("cpus:1;mem:256"))

    def accept(offer, *task_ids):
        return h.send(helpers.FW, m.Accept(fid, [offer.id], [TaskInfo(t, aid, "", TASK, executor=executor)
                                                             for t in task_ids], Filters(0.0)))

    out = accept(offer, "t1", "t2")
    assert [r.task.task_id for r in helpers.only(out, m.RunTask)] == ["t1", "t2"]
    (offer,) = h.offers(h.tick(advance=1.0))
    assert cpus_mem(offer.resources) == (4 - 1 - 0.2, 1024 - 256 - 32)   # the executor's taken once
    # a later task on the running executor takes only its own; another command under the same id is refused
    out = accept(offer, "t3")
    assert helpers.only(out, m.RunTask)
    (offer,) = h.offers(h.tick(advance=1.0))
    assert cpus_mem(offer.resources) == (4 - 1 - 0.3, 1024 - 256 - 48)
    other = ExecutorInfo("e1", "another", executor.resources)
    out = h.send(helpers.FW, m.Accept(fid, [offer.id], [TaskInfo("t4", aid, "", TASK, executor=other)],
                                      Filters(0.0)))
    assert "another command" in helpers.only(out, m.Update)[0].status.message
    # the tasks end and the executor exits: everything comes back
    for t in ("t1", "t2", "t3"):
        h.send(helpers.AG, m.StatusUpdate(fid, TaskStatus(t, TaskState.FINISHED, agent_id=aid, uuid=f"u-{t}")))
    (offer,) = h.offers(h.tick(advance=1.0))
    assert cpus_mem(offer.resources) == (3.0, 768.0)
    h.send(helpers.FW, m.Decline(fid, [offer.id], Filters(0.0)))
    h.send(helpers.AG, m.ExecutorExited(aid, fid, "e1", "exited"))
    (offer,) = h.offers(h.tick(advance=1.0))
    assert cpus_mem(offer.resources) == (4.0, 1024.0)


def test_core_the_executor_book_keeps_its_invariants_through_executors_lives():
    from mesoslike.agent.core import AgentCore, LaunchTask, TaskCheckpoint
    from mesoslike.wire import executor_messages as x
    from mesoslike.wire import messages as m
    from mesoslike.wire.types import TaskStatus

    core, clock = registered_agent_core()
    book = core._executors
    fw = FrameworkInfo("f", id="fw-1")
    other = ExecutorInfo("exec-2", EXECUTOR.command, EXECUTOR.resources)
    launches = [c for t, e in (("t1", EXECUTOR), ("t2", other), ("t3", EXECUTOR)) for c in core.on_message(
        m.RunTask(fw, executor_task(t, e))) if isinstance(c, LaunchTask)]
    book._check()
    assert [len(book), book.count("fw-1"), book.count("fw-2")] == [2, 2, 0]
    for launch in launches:
        core.on_task_started("fw-1", launch.task.task_id, 1000)
    core.on_executor_frame(b"p1", x.RegisterExecutor("a" * 64))
    core.on_executor_frame(b"p1", x.ExecutorStatus("a" * 64, TaskStatus("t1", TaskState.FINISHED, uuid="u1")))
    book._check()
    checkpoints = [core.task_checkpoint("fw-1", task_id) for task_id in (launches[0].task.task_id, "t3")]
    # exec-2's process ends: out of the book, its digest with it (its secret names nobody now)
    core.on_task_exited("fw-1", launches[1].task.task_id, 1)
    book._check()
    assert book.count("fw-1") == 1 and book.get("fw-1", "exec-2") is None
    assert [type(c.message) for c in core.on_executor_frame(b"p2", x.RegisterExecutor("b" * 64))] == [x.ExecutorError]
    # SHUTDOWN_AGENT orphans what is left: no connection, no frame taken, only its end awaited
    core.on_message(m.ShutdownAgent("bye"))
    book._check()
    assert all(e.orphaned and e.peer is None for e in book.records.values())
    assert [type(c.message) for c in core.on_executor_frame(b"p1", x.RegisterExecutor("a" * 64))] == [x.ExecutorError]
    core.on_task_exited("fw-1", launches[0].task.task_id, None, 9)
    book._check()
    assert len(book) == 0 and book.count("fw-1") == 0
    # a restarted agent recovers the executor from its checkpoint (its secret's digest), its task joins it
    restarted = AgentCore(clock, core.info, checkpoint=True, executor_endpoint="ipc:///tmp/x.sock")
    restarted.recover("agent-1", [c for c in checkpoints if isinstance(c, TaskCheckpoint)])
    restarted._executors._check()
    assert [(e.executor_id, e.tasks) for e in restarted.executors()] == [("exec-1", ["t3"])]
    assert restarted.restore_executor_secret("fw-1", "exec-1", "a" * 64)
    # the check sees a book whose index lies
    restarted._executors._by_digest.clear()
    with pytest.raises(AssertionError, match="digest"):
        restarted._executors._check()


# ------------------------------------------------ the channel's frames, as the attrs classes wrote them
def old_channel_frames():
    """One message of each class of the channel and its frame as the attrs classes wrote it (the base of their
    conversion to frozen Structs, f3c3947; ``{S}`` is the secret "a" * 64, as MessagePack writes it)."""
    from mesoslike.wire import executor_messages as x
    from mesoslike.wire.types import AgentInfo

    s = "a" * 64
    executor = ExecutorInfo("e1", "run", Resources.parse("cpus:0.5;mem:64"), shutdown_grace_period=2.0)
    messages = [x.RegisterExecutor(s, ["t1", "t2"]), x.RegisterExecutor(s),
                x.ExecutorStatus(s, TaskStatus("t1", TaskState.RUNNING, uuid="u1", healthy=True)),
                x.ExecutorMessage(s, b"\x00data"),
                x.ExecutorRegistered(executor, FrameworkInfo("f", id="fw"),
                                     AgentInfo("h", Resources.parse("cpus:1;mem:32"), id="a1"), True),
                x.LaunchExecutorTask(TaskInfo("t1", "a1", "", Resources.parse("cpus:0.1;mem:16"), executor=executor)),
                x.KillExecutorTask("t1"), x.ExecutorFrameworkMessage(b"data"), x.ExecutorStatusAck("t1", "u1"),
                x.ShutdownExecutor(), x.ExecutorError("refused"),
                x.ExecutorError("refused for now", uuid="u1", retry=True)]
    frames = [bytes.fromhex(old.replace("{S}", "d940" + "61" * 64)) for old in OLD_CHANNEL_FRAMES]
    return list(zip(messages, frames))


OLD_CHANNEL_FRAMES = [
    ("84a17601a474797065b152454749535445525f4558454355544f52a6736563726574{S}a57461736b7392a27431a27432"),
    ("84a17601a474797065b152454749535445525f4558454355544f52a6736563726574{S}a57461736b7390"),
    ("84a17601a474797065af4558454355544f525f535441545553a6736563726574{S}a673746174757384a77461736b5f6964a2743"
     "1a57374617465ac5441534b5f52554e4e494e47a475756964a27531a76865616c746879c3"),
    ("84a17601a474797065b04558454355544f525f4d455353414745a464617461c4050064617461a6736563726574{S}"),
    ("86a17601a474797065b34558454355544f525f52454749535445524544a56167656e7486a8686f73746e616d65a168a97265736f"
     "7572636573ad637075733a313b6d656d3a3332aa6174747269627574657380a26964a26131a4706f727400a97072696e63697061"
     "6ca0a86578656375746f7289a7636f6d6d616e64a372756ea9636f6e7461696e6572c0ab656e7669726f6e6d656e7480b3656e76"
     "69726f6e6d656e745f7365637265747380ab6578656375746f725f6964a26531a66c6162656c7390a46e616d65a0a97265736f75"
     "72636573af637075733a302e353b6d656d3a3634b573687574646f776e5f67726163655f706572696f64cb4000000000000000a9"
     "6672616d65776f726b8ca46e616d65a166a4726f6c65a12ab06661696c6f7665725f74696d656f7574cb0000000000000000a269"
     "64a26677a475736572a0a8686f73746e616d65a0af706172746974696f6e5f6177617265c2af6d696e5f616c6c6f63617461626c"
     "65a0a97072696e636970616ca0a66c6162656c7390a977656275695f75726ca0b17072696e636970616c5f72656365697074a0ac"
     "726572656769737465726564c3"),
    ("83a17601a474797065b44c41554e43485f4558454355544f525f5441534ba47461736bde0005a77461736b5f6964a27431a86167"
     "656e745f6964a26131a7636f6d6d616e64a0a97265736f7572636573af637075733a302e313b6d656d3a3136a86578656375746f"
     "7289a7636f6d6d616e64a372756ea9636f6e7461696e6572c0ab656e7669726f6e6d656e7480b3656e7669726f6e6d656e745f73"
     "65637265747380ab6578656375746f725f6964a26531a66c6162656c7390a46e616d65a0a97265736f7572636573af637075733a"
     "302e353b6d656d3a3634b573687574646f776e5f67726163655f706572696f64cb4000000000000000"),
    ("83a17601a474797065b24b494c4c5f4558454355544f525f5441534ba77461736b5f6964a27431"),
    ("83a17601a474797065ba4558454355544f525f4652414d45574f524b5f4d455353414745a464617461c40464617461"),
    ("84a17601a474797065b34558454355544f525f5354415455535f41434ba77461736b5f6964a27431a475756964a27531"),
    ("82a17601a474797065b153485554444f574e5f4558454355544f52"),
    ("85a17601a474797065ae4558454355544f525f4552524f52a76d657373616765a772656675736564a57265747279c2a475756964"
     "a0"),
    ("85a17601a474797065ae4558454355544f525f4552524f52a76d657373616765af7265667573656420666f72206e6f77a5726574"
     "7279c3a475756964a27531"),
]


def _keys_sorted_throughout(value) -> bool:
    """Whether every Struct in ``value`` (itself, nested ones) declares its
    fields in name order: then its frame is the bytes f3c3947 wrote (msgspec
    wrote an attrs object's keys sorted; a Struct's come as declared)."""
    import msgspec

    if isinstance(value, msgspec.Struct):
        names = list(value.__struct_fields__)
        return names == sorted(names) and all(_keys_sorted_throughout(getattr(value, n)) for n in names)
    if isinstance(value, (list, dict)):
        return all(map(_keys_sorted_throughout, value.values() if isinstance(value, dict) else value))
    return True


def test_the_channels_frames_are_the_maps_the_attrs_classes_wrote_and_those_read_as_before():
    import msgpack
    import msgspec

    from mesoslike.wire import executor_messages as x

    examples, same = old_channel_frames(), 0
    assert {type(message).TYPE for message, _ in examples} == set(x.EXECUTOR_SCHEMA.types)
    for message, old in examples:
        assert isinstance(message, msgspec.Struct)
        written = x.EXECUTOR_CODEC.encode(message)
        assert x.EXECUTOR_CODEC.decode(old) == message == x.EXECUTOR_CODEC.decode(written)
        # the same map: its keys "v", "type", then the fields as declared (msgspec wrote an attrs object's sorted)
        assert msgpack.unpackb(written) == msgpack.unpackb(old)
        fields = [f.name for f in msgspec.structs.fields(type(message))]
        assert list(msgpack.unpackb(written)) == ["v", "type", *fields]
        # the same bytes, but for the frames holding a Struct (this message itself, a nested value type) whose
        # fields are not declared in name order: EXECUTOR_MESSAGE, _REGISTERED, _ERROR, LAUNCH_EXECUTOR_TASK
        if _keys_sorted_throughout(message):
            assert written == old, message
            same += 1
    assert same >= 6
