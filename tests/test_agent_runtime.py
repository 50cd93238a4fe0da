"""The agent runtime with real processes and real ZeroMQ sockets on 127.0.0.1:
the test plays the master with a transport Server and scripted replies."""

import os
import signal
import time
from pathlib import Path

import pytest

from agent_helpers import master  # noqa: F401 (fixture)
from waiting import wait_until
from mesoslike.agent.executor import (LaunchError, TaskExecutor, TaskExit, TaskStarted, path_component, run_dir_path,
                                      sandbox_path)
from mesoslike.agent.runtime import AgentRuntime, turn_gap_left
from mesoslike.agent.settings import AgentSettings
from mesoslike.errors import ConfigError
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import FrameworkInfo, TaskInfo, TaskState

pytestmark = pytest.mark.timeout(60)

R = Resources.parse
FW = FrameworkInfo(name="demo", id="fw-1")


@pytest.fixture
def make_agent(tmp_path, master):
    agents = []

    def make(resources="cpus:2;mem:512;disk:100;ports:[31000-31010]", **kwargs):
        kwargs.setdefault("hostname", f"agent-{len(agents)}")
        kwargs.setdefault("work_dir", tmp_path / kwargs["hostname"])
        agent = AgentRuntime(AgentSettings(master=master.address, resources=resources, **kwargs)).start()
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.stop()


def task(task_id, command, resources="cpus:0.5;mem:64", grace=3.0, **kwargs):
    return TaskInfo(task_id, "agent-1", command, R(resources), kill_grace_period=grace, **kwargs)


def live_group_members(pgid):
    """Pids of the processes (zombies excluded) in process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()   # after "pid (comm) "
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def read_pid(path, timeout=10.0):
    wait_until(lambda: path.exists() and path.read_text().strip(), timeout, f"{path}")
    return int(path.read_text().split()[0])


def running_task(master, agent, task_id, command, **kwargs):
    """Launch a task and wait for its RUNNING; returns its sandbox."""
    master.send(m.RunTask(FW, task(task_id, command, **kwargs)))
    assert [master.update(task_id).state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    return sandbox_path(agent.work_dir, FW.id, task_id)


# ------------------------------------------------------------ registration
def test_agent_registers_with_its_resources_and_answers_pings(master, make_agent):
    agent = make_agent(attributes="rack:r1;room:er1")
    registration = master.register()
    assert registration.agent.hostname == "agent-0"
    assert registration.agent.resources == R("cpus:2;mem:512;disk:100;ports:[31000-31010]")
    assert registration.agent.attributes == {"rack": "r1", "room": "er1"}
    wait_until(lambda: agent.registered, 10, "registration")
    assert agent.agent_id == "agent-1"
    master.send(m.Ping("agent-1"))
    assert master.expect(m.Pong) == m.Pong("agent-1")


def test_a_bad_frame_from_the_master_is_skipped(master, make_agent):
    make_agent()
    master.register()
    master.server.send_frame(master.peer, b"\xc1 not msgpack")
    master.send(m.Ping("agent-1"))
    assert master.expect(m.Pong) == m.Pong("agent-1")


def test_an_agent_whose_master_is_silent_reregisters(master, make_agent):
    make_agent(max_ping_timeouts=1)
    master.register(ping_interval=0.3)
    again = master.expect(m.ReregisterAgent, timeout=5.0)
    assert again.agent.id == "agent-1"


# ------------------------------------------------------------------- tasks
def test_failing_task_reports_starting_running_failed_with_its_exit_code_output_and_environment(master, make_agent):
    agent = make_agent()
    master.register()
    command = ('echo hi; echo "id=$MESOSLIKE_TASK_ID fw=$MESOSLIKE_FRAMEWORK_ID agent=$MESOSLIKE_AGENT_ID '
               'sandbox=$MESOSLIKE_SANDBOX extra=$EXTRA pwd=$(pwd)"; echo oops >&2; exit 3')
    master.send(m.RunTask(FW, task("t1", command, environment={"EXTRA": "42"})))
    statuses = master.updates_until_terminal("t1")
    assert [s.state for s in statuses] == [TaskState.STARTING, TaskState.RUNNING, TaskState.FAILED]
    failed = statuses[-1]
    assert failed.exit_code == 3 and "3" in failed.message and failed.source == "SOURCE_AGENT"
    sandbox = (agent.work_dir / "sandboxes" / "fw-1" / "t1").resolve()
    out = (sandbox / "stdout").read_text()
    assert out.startswith("hi\n")
    assert f"id=t1 fw=fw-1 agent=agent-1 sandbox={sandbox} extra=42 pwd={sandbox}" in out
    assert (sandbox / "stderr").read_text() == "oops\n"


def test_a_dropped_acknowledgement_makes_the_agent_resend_the_same_uuid(master, make_agent):
    make_agent()
    master.register()
    master.send(m.RunTask(FW, task("t1", "exit 0")))
    first = master.update("t1", ack=False)
    # the retry, 0.5 s after the agent sent the first copy; not timed here: on a loaded machine the first copy
    # can reach the test most of that half second late (it failed CI so at load 25)
    again = master.update("t1", ack=True)
    assert (again.uuid, again.state) == (first.uuid, TaskState.STARTING)
    rest = master.updates_until_terminal("t1")
    assert [s.state for s in rest] == [TaskState.RUNNING, TaskState.FINISHED]
    assert first.uuid not in {s.uuid for s in rest}


def test_task_that_does_not_fit_gets_task_error(master, make_agent):
    make_agent(resources="cpus:1;mem:128;disk:10")
    master.register()
    master.send(m.RunTask(FW, task("big", "true", resources="cpus:2;mem:64")))
    status = master.update("big")
    assert status.state == TaskState.ERROR and "free" in status.message


def test_kill_task_escalates_to_sigkill_after_the_grace_period_and_leaves_no_process(master, make_agent):
    agent = make_agent()
    master.register()
    # the shell and its sleep both ignore SIGTERM (an ignored signal stays ignored across exec)
    sandbox = running_task(master, agent, "stubborn", "echo $$ > pid; trap '' TERM; sleep 60 & wait", grace=0.5)
    read_pid(sandbox / "pid")   # the shell runs (its $$ is its PID namespace's; the host's pid is the agent's)
    pgid = agent.executor.pid(FW.id, "stubborn")
    wait_until(lambda: len(live_group_members(pgid)) >= 2, 10, "shell and sleep")
    started = time.monotonic()
    master.send(m.KillTask("fw-1", "stubborn"))
    killed = master.update("stubborn")
    assert killed.state == TaskState.KILLED
    assert time.monotonic() - started >= 0.45              # SIGTERM alone did nothing
    assert live_group_members(pgid) == []


def test_framework_message_is_appended_to_the_task_sandbox(master, make_agent):
    agent = make_agent()
    master.register()
    sandbox = running_task(master, agent, "reader", "sleep 60")
    for part in (b"one\n", b"two\n"):
        master.send(m.FrameworkMessage("fw-1", "agent-1", part, task_id="reader"))
    wait_until(lambda: (sandbox / "messages").read_bytes() == b"one\ntwo\n", 10, "messages file")


def test_a_task_whose_sandbox_cannot_be_made_fails_instead_of_crashing_the_agent(master, make_agent, tmp_path):
    work_dir = tmp_path / "blocked"
    work_dir.mkdir()
    (work_dir / "sandboxes").write_text("a file where the sandboxes directory should be")
    make_agent(work_dir=work_dir)
    master.register()
    master.send(m.RunTask(FW, task("t1", "true")))
    statuses = master.updates_until_terminal("t1")
    assert [s.state for s in statuses] == [TaskState.STARTING, TaskState.FAILED]
    assert "could not start" in statuses[-1].message
    master.send(m.Ping("agent-1"))
    assert master.expect(m.Pong) == m.Pong("agent-1")     # still serving


def test_stop_with_running_tasks_leaves_no_process_behind(master, make_agent):
    agent = make_agent()
    master.register()
    pgids = []
    for name in ("a", "b"):
        sandbox = running_task(master, agent, name, "echo $$ > pid; sleep 60 & sleep 60 & wait")
        read_pid(sandbox / "pid")
        pgids.append(agent.executor.pid(FW.id, name))
    for pgid in pgids:
        wait_until(lambda: len(live_group_members(pgid)) == 3, 10, "three processes per task")
    agent.stop()
    assert not agent._thread.is_alive()
    assert [live_group_members(pgid) for pgid in pgids] == [[], []]


# ------------------------------------------------------------- turn gap
def test_the_turn_gap_holds_only_a_turn_after_news_and_never_waiting_launches():
    assert turn_gap_left(None, 100.0, 0.01, False) == 0.0            # after an idle turn: at once
    assert turn_gap_left(100.0, 100.004, 0.01, False) == pytest.approx(0.006)
    assert turn_gap_left(100.0, 100.02, 0.01, False) == 0.0          # the turn took longer than the gap
    assert turn_gap_left(100.0, 100.001, 0.01, True) == 0.0          # launches wait: never held back
    assert turn_gap_left(100.0, 100.001, 0.0, False) == 0.0          # 0: off


def test_a_burst_of_exits_under_a_long_turn_gap_is_reported_whole_and_in_order(master, make_agent):
    agent = make_agent(resources="cpus:8;mem:4096", turn_gap=0.5)
    master.register()
    master.send(m.Ping("agent-1"))
    assert master.expect(m.Pong) == m.Pong("agent-1")
    ids = [f"t{i}" for i in range(12)]
    for task_id in ids:   # every task waits for the same file: they end together
        master.send(m.RunTask(FW, task(task_id, f"while [ ! -e {agent.work_dir}/go ]; do sleep 0.01; done; exit 0",
                                       resources="cpus:0.1;mem:16")))
    for task_id in ids:
        assert master.update(task_id).state == TaskState.STARTING
        assert master.update(task_id).state == TaskState.RUNNING
    (agent.work_dir / "go").touch()
    for task_id in ids:
        statuses = master.updates_until_terminal(task_id)
        assert [s.state for s in statuses] == [TaskState.FINISHED]
    master.send(m.Ping("agent-1"))
    assert master.expect(m.Pong) == m.Pong("agent-1")
    agent.stop()   # after a busy turn too
    assert agent._thread is not None and not agent._thread.is_alive()


def test_a_turn_gap_out_of_range_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="turn_gap"):
        AgentRuntime(AgentSettings(master="tcp://127.0.0.1:5050", resources="cpus:1;mem:64", work_dir=tmp_path,
                                   turn_gap=-0.01))


# ------------------------------------------------------- configuration
def test_malformed_master_addresses_are_config_errors(tmp_path):
    AgentRuntime(AgentSettings(master="zk://127.0.0.1:2181/mesoslike", work_dir=tmp_path))  # accepted; followed when running
    with pytest.raises(ConfigError, match="ZooKeeper URL"):
        AgentRuntime(AgentSettings(master="zk://127.0.0.1:2181", work_dir=tmp_path))
    with pytest.raises(ConfigError, match="tcp://HOST:PORT"):
        AgentRuntime(AgentSettings(master="127.0.0.1:5050", work_dir=tmp_path))
    with pytest.raises(ConfigError, match="resources"):
        AgentRuntime(AgentSettings(master="tcp://127.0.0.1:5050", resources="cpus:-1", work_dir=tmp_path))


def test_resources_default_to_what_the_machine_has(tmp_path):
    agent = AgentRuntime(AgentSettings(master="tcp://127.0.0.1:5050", work_dir=tmp_path))
    resources = agent.info.resources
    assert resources.get("cpus") == os.cpu_count()
    assert resources.get("mem") > 0 and resources.get("disk") > 0
    assert resources.ranges("ports") == ((31000, 32000),)
    assert agent.info.hostname  # the machine's name
    partial = AgentRuntime(AgentSettings(master="tcp://127.0.0.1:5050", resources="cpus:3;mem:100", work_dir=tmp_path))
    assert partial.info.resources.get("cpus") == 3 and partial.info.resources.get("mem") == 100
    assert partial.info.resources.ranges("ports") == ((31000, 32000),) and partial.info.resources.get("disk") > 0


# --------------------------------------------------------------- sandboxes
@pytest.mark.parametrize("identifier", ["..", ".", "../../etc", "a/b", "/abs", "", ".hidden", "x" * 300, "sp ace"])
def test_ids_never_escape_the_sandbox_root(tmp_path, identifier):
    component = path_component(identifier)
    assert component and "/" not in component and not component.startswith(".")
    path = sandbox_path(tmp_path, identifier, identifier)
    assert tmp_path / "sandboxes" in path.parents and len(path.relative_to(tmp_path).parts) == 3
    # the executor's own, made from its frameworks' kept parents: the same paths, equal and alike
    sandbox, run_dir = TaskExecutor(tmp_path)._task_paths(identifier, identifier)
    for made, expected in ((sandbox, path), (run_dir, run_dir_path(tmp_path, identifier, identifier))):
        assert made == expected and str(made) == str(expected) and hash(made) == hash(expected)
        assert made.parent == expected.parent and made.name == expected.name


def test_distinct_ids_get_distinct_sandboxes():
    assert len({path_component(i) for i in ("a/b", "a_b", "a b", "a\\b")}) == 4
    assert path_component("plain-id_1.0") == "plain-id_1.0"


@pytest.fixture
def make_executor():
    executors = []

    def make(work_dir):
        executors.append(TaskExecutor(work_dir))
        return executors[-1]

    yield make
    for executor in executors:  # even when a test fails: leave no process behind
        executor.kill_all(grace_period=0.0)


def test_executor_refuses_a_symlinked_sandbox_outside_the_root(tmp_path, make_executor):
    outside = tmp_path / "outside"
    outside.mkdir()
    work_dir = tmp_path / "work"
    (work_dir / "sandboxes").mkdir(parents=True)
    (work_dir / "sandboxes" / "fw").symlink_to(outside)
    executor = make_executor(work_dir)
    with pytest.raises(LaunchError, match="outside"):
        executor.launch("fw", task("t", "true"), "agent-1")
    assert not any(p.name in ("stdout", "stderr") for p in outside.rglob("*"))
    assert executor.running() == []


def test_executor_refuses_a_framework_directory_swapped_for_a_symlink_after_a_launch(tmp_path, make_executor):
    """The checks of a framework's sandbox directory are remembered between
    its launches; a directory that is no longer the one checked is checked again."""
    outside = tmp_path / "outside"
    outside.mkdir()
    work_dir = tmp_path / "work"
    executor = make_executor(work_dir)
    executor.launch("fw", task("first", "true"), "agent-1")
    framework_dir = work_dir / "sandboxes" / "fw"
    framework_dir.rename(tmp_path / "moved")
    framework_dir.symlink_to(outside)
    with pytest.raises(LaunchError, match="outside"):
        executor.launch("fw", task("second", "true"), "agent-1")
    assert not any(p.name in ("stdout", "stderr") for p in outside.rglob("*"))


def test_executor_reports_signals_and_kill_all_reaps_everything(tmp_path, make_executor):
    executor = make_executor(tmp_path)
    executor.launch("fw", task("self-kill", "kill -9 $$"), "agent-1")   # started asynchronously, by its supervisor
    executor.launch("fw", task("sleeper", "sleep 60", grace=0.2), "agent-1")
    events = []

    def self_kill_ended():
        events.extend(executor.poll())
        return any(isinstance(e, TaskExit) and e.task_id == "self-kill" for e in events)

    wait_until(self_kill_ended, 10, "the self-killing task to end")
    (pid,) = [e.pid for e in events if isinstance(e, TaskStarted) and e.task_id == "self-kill"]
    exits = [e for e in events if isinstance(e, TaskExit)]
    (self_kill,) = [e for e in exits if e.task_id == "self-kill"]
    assert (self_kill.exit_code, self_kill.signal) == (None, signal.SIGKILL)
    assert live_group_members(pid) == []
    # kill_all gives up 5 s after the grace by default (an agent's shutdown); a loaded CI machine right after
    # mass deletions once took longer to see the sleeper end (CI run 64): this waits on the end, up to 30 s
    (sleeper,) = [e for e in executor.kill_all(give_up_after=30.0) if isinstance(e, TaskExit)]
    assert sleeper.task_id == "sleeper" and sleeper.signal == signal.SIGTERM
    assert executor.running() == []


def test_the_shared_supervisor_runs_before_the_first_task_and_runs_it(make_agent, master):
    """An agent with a shared supervisor starts it at its own start (not at
    its first launch, which it would delay), and its first task runs under
    that one."""
    agent = make_agent(shared_supervisor=True)
    master.register()
    link = agent.executor.link
    assert link.started == 1 and link.identity is not None
    supervisor = link.pid
    assert os.path.exists(f"/proc/{supervisor}")
    master.send(m.RunTask(FW, task("first", "true")))
    assert master.updates_until_terminal("first")[-1].state == TaskState.FINISHED
    assert link.started == 1 and link.pid == supervisor   # the one started with the agent
