"""Issue 13 §5: tasks run as a user (``--switch-user``), with real
processes: a real master that checks the ``run_tasks`` ACL and real
``mesoslike agent`` processes, or an in-process agent and a scripted master
where the agent alone is under test. The suite runs as root (CI), which
switching needs; each task reports who it ran as through its own output."""

from __future__ import annotations

import os
import pwd
import stat
import sys
from pathlib import Path

import pytest

from agent_helpers import (Launcher, agent_state, alive, cgroups_root, kill_9, master,  # noqa: F401 (fixtures)
                           read_pid_file, require_cgroups, run_dir, sandbox, start_agent, task_pid, traversable_dir)
from e2e_helpers import ProcessSet, cluster, http_get  # noqa: F401 (fixture)
from mesoslike import FrameworkInfo, TaskState
from mesoslike.agent.executor import sandbox_path
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.agent.supervisor import LaunchProblem, is_own_identity, read_json, resolve_user
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import TaskInfo
from waiting import wait_until

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, cgroups"),
    pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                       reason="switching users needs root (CI runs as root: never skipped there)"),
]

NOBODY = pwd.getpwnam("nobody")
MISSING = "mesoslike-no-such-user"
RESOURCES = "cpus:1;mem:256"
#: who the task is, whether its sandbox is its own, and whether it can see the agent's meta (launch
#: files hold the tasks' environments): one line each, in this order
WHO_AM_I = ('id -u; id -un; id -g; echo "home=$HOME user=$USER logname=$LOGNAME"; '
            'test -r stdout && test -w stderr && touch made-by-task && echo sandbox-ok; '
            'ls ../../../meta >/dev/null 2>&1 && echo meta-readable || echo meta-private; '
            'cat /proc/self/cgroup')
WAIT_FOR_GO = "echo $$ > pid; while [ ! -e go ]; do sleep 0.05; done; id -un"


def output_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def process_uid(pid: int) -> int:
    """The real uid of process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise ValueError(f"no Uid line for {pid}")


# ------------------------------------------------------- a real cluster
def run_one(cluster, command: str, user: str, *agent_args: str, master_args: tuple[str, ...] = ()):
    """A master (``master_args``), an agent (``agent_args``), a framework of
    ``user`` and one task ``t`` running ``command``; returns (scheduler, agent proc)."""
    cluster.start_master(*master_args)
    agent = start_agent(cluster, "a1", RESOURCES, *agent_args)
    scheduler = Launcher({"t": command})
    cluster.driver(scheduler, "switch", framework=FrameworkInfo("switch", user=user))
    return scheduler, agent


def test_a_task_of_a_framework_with_user_nobody_runs_as_nobody(cluster, cgroups_root):
    require_cgroups()
    scheduler, _ = run_one(cluster, WHO_AM_I, "nobody", "--isolation", "cgroups", "--cgroups-root", cgroups_root)
    scheduler.wait(lambda: scheduler.terminal("t"), 30, "the task to end", cluster.diagnostics)
    (ended,) = scheduler.terminal("t")
    directory = sandbox(cluster, "a1", scheduler.framework_id, "t")
    lines = output_lines(directory / "stdout")
    assert ended.state == TaskState.FINISHED, (ended, lines, (directory / "stderr").read_text())
    assert lines[:6] == [str(NOBODY.pw_uid), "nobody", str(NOBODY.pw_gid),
                         f"home={NOBODY.pw_dir} user=nobody logname=nobody", "sandbox-ok", "meta-private"]
    assert any(cgroups_root in line for line in lines[6:]), lines          # in its cgroups all the same
    for path in (directory / "stdout", directory / "stderr", directory / "made-by-task"):
        assert os.stat(path).st_uid == NOBODY.pw_uid, path                 # the sandbox was the task's
    # ended, the sandbox is the agent's again: no later task of nobody (another principal's) reads it
    info = os.stat(directory)
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (os.geteuid(), 0o700)
    assert "tasks run as their user (--switch-user)" in cluster.agents["a1"].output()


def test_without_switch_user_a_task_runs_as_the_agents_user(cluster):
    scheduler, _ = run_one(cluster, "id -u; id -un", "nobody", "--no-switch-user")
    scheduler.wait(lambda: scheduler.terminal("t"), 30, "the task to end", cluster.diagnostics)
    assert [s.state for s in scheduler.terminal("t")] == [TaskState.FINISHED]
    directory = sandbox(cluster, "a1", scheduler.framework_id, "t")
    agent_user = pwd.getpwuid(os.geteuid()).pw_name
    assert output_lines(directory / "stdout") == [str(os.geteuid()), agent_user]   # root in CI, not nobody
    assert os.stat(directory).st_uid == os.geteuid()
    assert f"tasks run as the agent's user ({agent_user}; --no-switch-user)" in cluster.agents["a1"].output()


def test_a_task_of_the_agents_own_user_is_spawned_in_its_cgroups_and_namespaces(cluster, cgroups_root):
    # root -> root switches nothing: the task is started by the shared supervisor's init helper (posix_spawn
    # of a compiled program, not a fork of a Python supervisor), and is what a switched task is all the
    # same: its user's HOME, USER and LOGNAME, the sandbox its user's, in its cgroups, in a PID namespace
    # of its own (the agent's default isolation)
    require_cgroups()
    command = ('echo "home=$HOME user=$USER logname=$LOGNAME"; id -u; cat /proc/self/cgroup; '
               "while [ ! -e go ]; do sleep 0.05; done")
    scheduler, _ = run_one(cluster, command, "root", "--cgroups-root", cgroups_root)
    scheduler.wait(lambda: scheduler.running("t"), 30, "the task to run", cluster.diagnostics)
    directory = sandbox(cluster, "a1", scheduler.framework_id, "t")
    run_directory = run_dir(cluster, "a1", scheduler.framework_id, "t")
    pid = task_pid(run_directory)
    assert read_json(str(run_directory / "task.json"))["started"] == "nsinit"  # type: ignore[index]
    assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    assert process_uid(pid) == 0
    info = os.stat(directory)
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o700)
    (directory / "go").touch()
    scheduler.wait(lambda: scheduler.terminal("t"), 30, "the task to finish", cluster.diagnostics)
    assert [s.state for s in scheduler.terminal("t")] == [TaskState.FINISHED]
    lines = output_lines(directory / "stdout")
    assert lines[:2] == [f"home={pwd.getpwnam('root').pw_dir} user=root logname=root", "0"]
    assert any(cgroups_root in line for line in lines[2:]), lines


def test_a_task_of_another_user_is_forked_to_switch():
    assert is_own_identity(resolve_user("root"))   # the suite runs as root, whatever supplementary groups
    assert not is_own_identity(resolve_user("nobody"))


def test_a_restarted_agent_reattaches_to_a_switched_task(cluster, cgroups_root):
    # the master waits 30 s for the restarted agent (a restart on a loaded machine takes seconds)
    scheduler, agent = run_one(cluster, WAIT_FOR_GO, "nobody", "--cgroups-root", cgroups_root,
                               master_args=("--max-agent-ping-timeouts", "60"))
    scheduler.wait(lambda: scheduler.running("t"), 30, "the task to run", cluster.diagnostics)
    directory = sandbox(cluster, "a1", scheduler.framework_id, "t")
    read_pid_file(directory / "pid")   # it runs
    pid = task_pid(run_dir(cluster, "a1", scheduler.framework_id, "t"))
    assert process_uid(pid) == NOBODY.pw_uid
    kill_9(agent)
    assert alive(pid)
    start_agent(cluster, "a1", RESOURCES, "--cgroups-root", cgroups_root, wait=False)

    def reattached() -> bool:
        tasks = {t["id"]: t for t in agent_state(cluster, "a1")["tasks"]}
        return tasks.get("t", {}).get("pid") == pid and tasks["t"]["state"] == TaskState.RUNNING

    cluster.wait_until(reattached, 30, "the restarted agent to report the task running with the same pid")
    assert next(t for t in agent_state(cluster, "a1")["tasks"] if t["id"] == "t")["user"] == "nobody"
    (directory / "go").touch()
    scheduler.wait(lambda: scheduler.terminal("t"), 30, "the task to finish", cluster.diagnostics)
    assert [s.state for s in scheduler.terminal("t")] == [TaskState.FINISHED]
    assert output_lines(directory / "stdout") == ["nobody"]


# ------------------------------------------- an in-process agent, a scripted master
FW = FrameworkInfo(name="switch", id="fw-1", user="nobody")


@pytest.fixture
def agent(master, traversable_dir):  # noqa: F811 (fixture)
    runtime = AgentRuntime(AgentSettings(master=master.address, resources=RESOURCES, hostname="h1",
                                         work_dir=traversable_dir / "agent", isolation="posix")).start()
    master.register()
    yield runtime
    runtime.stop()


def task(task_id: str, command: str, user: str) -> TaskInfo:
    return TaskInfo(task_id, "agent-1", command, Resources.parse("cpus:0.5;mem:64"), kill_grace_period=1.0,
                    user=user)


def test_a_task_whose_user_does_not_exist_fails_naming_it(master, agent):  # noqa: F811 (fixture)
    master.send(m.RunTask(FW, task("t", "touch ran", MISSING)))
    statuses = master.updates_until_terminal("t")
    assert [s.state for s in statuses] == [TaskState.STARTING, TaskState.FAILED]
    assert f"user '{MISSING}' does not exist on this agent" in statuses[-1].message
    assert statuses[-1].reason == "REASON_COMMAND_EXECUTOR_FAILED"
    assert not (sandbox_path(agent.work_dir, FW.id, "t") / "ran").exists()     # nothing ran, as root or anyone


def test_a_switched_task_reaches_its_sandbox_by_its_absolute_path_and_nothing_else_of_the_agent(master, agent):  # noqa: F811
    master.send(m.RunTask(FW, task("t", 'cd "$MESOSLIKE_SANDBOX" && id -un > by-path; cat ../../../meta/agent.pid',
                                   "nobody")))
    statuses = master.updates_until_terminal("t")
    directory = sandbox_path(agent.work_dir, FW.id, "t")
    assert (directory / "by-path").read_text() == "nobody\n"
    assert statuses[-1].state == TaskState.FAILED                       # cat: Permission denied
    assert "Permission denied" in (directory / "stderr").read_text()
    assert oct(os.stat(agent.work_dir).st_mode & 0o777) == "0o711"
    assert oct(os.stat(agent.work_dir / "meta").st_mode & 0o777) == "0o700"
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"


def test_a_switched_task_cannot_make_the_agent_write_through_links_it_planted(master, agent, traversable_dir,  # noqa: F811
                                                                             caplog):
    victim = traversable_dir / "victim"
    victim.write_text("precious\n")
    os.chmod(victim, 0o644)
    plant = f"ln -s {victim} messages && rm stdout && ln -s {victim} stdout && echo $$ > pid-planted; " \
            "while [ ! -e go ]; do sleep 0.05; done"
    master.send(m.RunTask(FW, task("t", plant, "nobody")))
    assert [master.update("t").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    directory = sandbox_path(agent.work_dir, FW.id, "t")
    read_pid_file(directory / "pid-planted")
    master.send(m.FrameworkMessage(FW.id, "agent-1", b"root writes this\n", task_id="t"))
    wait_until(lambda: "framework message for task fw-1/t lost" in caplog.text, 10, "the message to be refused")
    (directory / "go").touch()
    assert master.updates_until_terminal("t")[-1].state == TaskState.FINISHED
    # the same task id again: its supervisor (root) finds a symlink where stdout was
    master.send(m.RunTask(FW, task("t", "echo again", "nobody")))
    statuses = master.updates_until_terminal("t")
    assert statuses[-1].state == TaskState.FAILED and "output file" in statuses[-1].message, statuses[-1]
    assert victim.read_text() == "precious\n" and os.stat(victim).st_uid == 0


def test_the_agents_state_says_whom_tasks_run_as(master, agent):  # noqa: F811 (fixture)
    master.send(m.RunTask(FW, task("t", "sleep 60", "nobody")))
    assert [master.update("t").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    state = agent.views.state_document()
    assert state["switch_user"] is True
    assert [(t["id"], t["user"]) for t in state["tasks"]] == [("t", "nobody")]


# ------------------------------------------------------- the user lookup itself
class _Entry:
    def __init__(self, uid: int, gid: int = 100, home: str = "/home/x") -> None:
        self.pw_uid, self.pw_gid, self.pw_dir = uid, gid, home


def test_another_name_for_uid_0_never_runs_a_task_as_root():
    # the master grants root only to an ACL naming "root": an alias of uid 0 must not lead there
    with pytest.raises(LaunchProblem, match="user 'toor' has uid 0 on this agent"):
        resolve_user("toor", getpwnam=lambda name: _Entry(0), getgrouplist=lambda name, gid: [gid])
    root = resolve_user("root", getpwnam=lambda name: _Entry(0, 0, "/root"), getgrouplist=lambda name, gid: [0, 4])
    assert (root.uid, root.gid, root.groups, root.home) == (0, 0, [0, 4], "/root")


def test_a_user_lookup_names_the_missing_user():
    with pytest.raises(LaunchProblem, match=f"user '{MISSING}' does not exist on this agent"):
        resolve_user(MISSING)
    with pytest.raises(LaunchProblem, match="does not exist"):
        resolve_user("bad\0name")
    nobody = resolve_user("nobody")
    assert (nobody.uid, nobody.gid) == (NOBODY.pw_uid, NOBODY.pw_gid)
    assert nobody.groups == os.getgrouplist("nobody", NOBODY.pw_gid)


def test_switch_user_is_on_by_default_as_root(master, traversable_dir):  # noqa: F811 (fixture)
    runtime = AgentRuntime(AgentSettings(master=master.address, resources=RESOURCES, hostname="h2",
                                         work_dir=traversable_dir / "h2"))
    assert runtime.switch_user is (os.geteuid() == 0)
    off = AgentRuntime(AgentSettings(master=master.address, resources=RESOURCES, hostname="h3",
                                     work_dir=traversable_dir / "h3", switch_user=False))
    assert off.switch_user is False and oct(os.stat(off.work_dir).st_mode & 0o777) == "0o700"


def test_a_fifo_a_task_made_in_its_sandbox_does_not_hold_the_agents_http(master, agent):  # noqa: F811 (fixture)
    master.send(m.RunTask(FW, task("t", "mkfifo pipe && echo made > made; sleep 60", "nobody")))
    assert [master.update("t").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    directory = sandbox_path(agent.work_dir, FW.id, "t")
    wait_until(lambda: (directory / "made").exists(), 10, "the FIFO")
    for endpoint in ("read", "download"):
        status, _, body = http_get(f"{agent.http_address}/files/{endpoint}?path=fw-1/t/pipe&offset=0", timeout=5.0)
        assert (status, "is not a regular file" in body) == (400, True), (endpoint, status, body)


def test_a_config_file_can_turn_switching_off(tmp_path):
    processes = ProcessSet(tmp_path)
    config = tmp_path / "agent.toml"
    config.write_text(f'[agent]\nswitch_user = false\nwork_dir = "{tmp_path / "work" / "a"}"\n')
    try:
        # no master needs to answer: the agent says whom its tasks run as before it registers
        proc = processes._start("agent", ["agent", "--master", "tcp://127.0.0.1:9", "--config", str(config)])
        wait_until(lambda: "--no-switch-user)" in proc.output(), 20, "the agent's start-up lines",
                   diagnostics=proc.output)
    finally:
        processes.close()
