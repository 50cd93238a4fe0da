"""The containerizer's namespaces (docs/containers.rst, "Isolators"), with
real agents, real processes and the kernel's real namespaces: by default a
task sees only its own processes, has a private /tmp and /dev/shm, its own
IPC and UTS namespaces, cannot signal another task, is health-checked inside
its namespaces, leaves no zombie; ``--isolation posix/cpu,posix/mem`` turns
it all off; ``/state`` says what each task got; an explicit ``--isolation``
the machine refuses stops the agent at start, naming why. Root is needed
(CI runs as root: these never skip there)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from environment import unavailable

from agent_helpers import cgroups_root, master, traversable_dir  # noqa: F401 (fixtures)
from mesoslike.agent.executor import run_dir_path, sandbox_path
from mesoslike.agent.isolation import DEFAULT_ISOLATION, parse_isolation, select_isolation
from mesoslike.agent.runtime import AgentRuntime, _check_work_dir_visible
from mesoslike.agent.settings import AgentSettings
from mesoslike.agent.secrets import secret_file_host_path
from mesoslike.errors import ConfigError
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import (ContainerInfo, ExecutorInfo, FrameworkInfo, HealthCheck, HTTPCheck, Secret, TaskInfo,
                                  TaskState, Volume, VolumeSource)
from waiting import wait_until

pytestmark = pytest.mark.timeout(120)

FW = FrameworkInfo(name="ns", id="fw-1")
NAMESPACES = "namespaces/pid,namespaces/ipc,namespaces/uts,filesystem/linux"


def require_root() -> None:
    if os.geteuid() != 0:
        unavailable("namespaces need root")


@pytest.fixture
def agent(master, tmp_path, cgroups_root):  # noqa: F811 (fixture)
    require_root()
    made = []

    def make(isolation: str = "auto", **kwargs):
        runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:4;mem:1024", hostname=f"h{len(made)}",
                                             work_dir=tmp_path / f"agent{len(made)}", isolation=isolation,
                                             cgroups_root=cgroups_root, **kwargs)).start()
        made.append(runtime)
        master.register()
        return runtime
    yield make
    for runtime in made:
        runtime.stop()


def launch(master, task_id, command, container=None, health_check=None, grace=1.0):  # noqa: F811
    master.send(m.RunTask(FW, TaskInfo(task_id, "agent-1", command, Resources.parse("cpus:0.5;mem:64"),
                                       kill_grace_period=grace, container=container, health_check=health_check)))
    assert master.update(task_id).state == TaskState.STARTING


def running(master, task_id):  # noqa: F811
    status = master.update(task_id)
    assert status.state == TaskState.RUNNING, status
    return status


def written(runtime, task_id, name, timeout=20.0):
    path = sandbox_path(runtime.work_dir, "fw-1", task_id) / name
    return wait_until(lambda: path.exists() and path.read_text().endswith("\n") and path.read_text(), timeout,
                      f"{path} to be written")


def host_pid_of(runtime, task_id):
    return wait_until(lambda: runtime.executor.pid("fw-1", task_id), 10, f"{task_id}'s pid")


def namespace_of(pid, kind):
    return os.readlink(f"/proc/{pid}/ns/{kind}")


# ------------------------------------------------------------- by default
def test_a_task_sees_only_its_own_processes_and_its_supervisor_is_its_init(master, agent):  # noqa: F811
    runtime = agent()
    launch(master, "t", "ls /proc | grep -E '^[0-9]+$' > pids.tmp; echo $$ >> pids.tmp; "
                        "tr '\\0' ' ' < /proc/1/cmdline > init.tmp; echo >> init.tmp; "
                        "mv init.tmp init; mv pids.tmp pids; sleep 600")
    started = running(master, "t")
    seen = [int(pid) for pid in written(runtime, "t", "pids").split()]
    *listed, own = seen
    assert own == 2                        # the shell: the first process after its supervisor
    assert set(listed) <= set(range(1, 8)), listed   # its supervisor, itself, ls, grep: not the host's
    assert os.getpid() not in listed
    # its init: the namespace init helper the agent's shared supervisor starts (no Python process a task)
    assert "/nsinit-" in written(runtime, "t", "init")
    run_dir = run_dir_path(runtime.work_dir, "fw-1", "t")
    assert json.loads((run_dir / "supervisor.json").read_text())["shared"] is True
    assert json.loads((run_dir / "task.json").read_text())["started"] == "nsinit"
    host = host_pid_of(runtime, "t")
    assert host != 2 and namespace_of(host, "pid") != namespace_of(os.getpid(), "pid")
    got = runtime.views.state_document()["tasks"][0]["isolation"]
    assert {"filesystem/linux", "namespaces/pid", "namespaces/ipc", "namespaces/uts"} <= set(got), got
    # the task's updates tell the master (its /state) what its container is
    assert started.container_status.isolators == got and started.container_status.executor_pid == host


def test_a_task_cannot_signal_another_task(master, agent):  # noqa: F811
    runtime = agent()
    launch(master, "victim", "sleep 600")
    running(master, "victim")
    victim = host_pid_of(runtime, "victim")
    launch(master, "attacker", f"kill -KILL {victim} 2> err; echo $? > rc; sleep 600")
    running(master, "attacker")
    assert written(runtime, "attacker", "rc").strip() != "0"
    assert "No such process" in (sandbox_path(runtime.work_dir, "fw-1", "attacker") / "err").read_text()
    assert runtime.executor.pid("fw-1", "victim") == victim and os.kill(victim, 0) is None   # alive


def test_a_task_has_a_private_tmp_dev_shm_ipc_and_uts(master, agent, tmp_path):  # noqa: F811
    runtime = agent()
    host_name = os.uname().nodename
    marker = f"mesoslike-private-{os.getpid()}"
    launch(master, "a", f"echo secret > /tmp/{marker}; echo shm > /dev/shm/{marker}; ipcmk -Q > /dev/null; "
                        f"echo done > a; sleep 600", container=ContainerInfo(hostname="web-1"))
    running(master, "a")
    written(runtime, "a", "a")
    assert not Path(f"/tmp/{marker}").exists() and not Path(f"/dev/shm/{marker}").exists()
    sandbox = sandbox_path(runtime.work_dir, "fw-1", "a")
    assert (sandbox / "tmp" / marker).read_text() == "secret\n"   # its /tmp is its sandbox's tmp
    launch(master, "b", f"cat /tmp/{marker} /dev/shm/{marker} > seen 2>&1; ipcs -q | grep -c '^0x' > queues; "
                        f"hostname > name; ls {tmp_path} > work; echo done > b; sleep 600")
    running(master, "b")
    written(runtime, "b", "b")
    other = sandbox_path(runtime.work_dir, "fw-1", "b")
    assert "No such file" in (other / "seen").read_text()             # not a's /tmp, nor its /dev/shm
    assert (other / "queues").read_text().strip() == "0"               # not a's message queue
    assert (other / "name").read_text().strip() == host_name           # the agent's name: b asked none
    assert "agent0" in (other / "work").read_text()   # the tree the agent's work dir is in stays in sight
    a, b = host_pid_of(runtime, "a"), host_pid_of(runtime, "b")
    for kind in ("ipc", "uts", "mnt", "pid"):
        assert namespace_of(a, kind) != namespace_of(b, kind) != namespace_of(os.getpid(), kind)
    assert subprocess.run(["nsenter", "-t", str(a), "-u", "hostname"], capture_output=True,
                          text=True).stdout.strip() == "web-1"


def test_opting_out_runs_tasks_in_the_agents_namespaces(master, agent):  # noqa: F811
    runtime = agent("posix/cpu,posix/mem")
    marker = f"mesoslike-shared-{os.getpid()}"
    launch(master, "t", f"echo shared > /tmp/{marker}; ls /proc > procs; echo $$ > pid; sleep 600")
    try:
        running(master, "t")
        host = host_pid_of(runtime, "t")
        assert int(written(runtime, "t", "pid")) == host
        assert str(os.getpid()) in written(runtime, "t", "procs").split()   # the host's processes
        assert Path(f"/tmp/{marker}").read_text() == "shared\n"
        assert namespace_of(host, "pid") == namespace_of(os.getpid(), "pid")
        assert runtime.views.state_document()["tasks"][0]["isolation"] == ["posix/cpu", "posix/mem"]
    finally:
        Path(f"/tmp/{marker}").unlink(missing_ok=True)


def test_a_command_health_check_runs_in_the_tasks_namespaces(master, agent):  # noqa: F811
    runtime = agent()
    ready = f"/tmp/mesoslike-ready-{os.getpid()}"   # in the task's /tmp: the host's has none
    check = HealthCheck(type="COMMAND", command=f"test -f {ready} && test \"$(hostname)\" = web-2",
                        delay_seconds=0.0, interval_seconds=0.2, timeout_seconds=5.0, grace_period_seconds=30.0)
    launch(master, "t", f"touch {ready}; sleep 600", container=ContainerInfo(hostname="web-2"),
           health_check=check)
    running(master, "t")
    healthy = master.update("t")
    assert healthy.state == TaskState.RUNNING and healthy.healthy is True, healthy
    assert not Path(ready).exists()


def test_the_tasks_orphans_are_reaped_by_its_supervisor(master, agent):  # noqa: F811
    runtime = agent()
    # each ( ... & ) leaves an orphan that ends at once: reparented to the namespace's init, its supervisor
    launch(master, "t", "for i in 1 2 3 4 5; do (true &); done; echo done > spawned; sleep 600")
    running(master, "t")
    written(runtime, "t", "spawned")
    # the namespace's init: the init helper the shared supervisor started (task.json names it)
    supervisor = json.loads((run_dir_path(runtime.work_dir, "fw-1", "t") / "task.json").read_text())["init"]

    def zombies():
        children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
        states = []
        for child in children:
            try:
                states.append(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0])
            except OSError:
                continue
        return [s for s in states if s == "Z"]
    wait_until(lambda: zombies() == [], 10, "the orphans to be reaped")


def test_kill_with_grace_reaches_a_task_in_its_namespace_and_ends_it_killed(master, agent):  # noqa: F811
    runtime = agent()
    launch(master, "t", "trap 'echo term > got; exit 0' TERM; echo ready > ready; sleep 600 & wait", grace=10.0)
    running(master, "t")
    written(runtime, "t", "ready")
    master.send(m.KillTask("fw-1", "t"))
    killed = master.update("t")
    assert killed.state == TaskState.KILLED, killed
    assert (sandbox_path(runtime.work_dir, "fw-1", "t") / "got").read_text() == "term\n"


def test_volumes_of_a_container_without_an_image(master, agent, tmp_path):  # noqa: F811
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("from the host\n")
    runtime = agent(allowed_host_paths=[str(tmp_path)])
    container = ContainerInfo(volumes=[
        Volume("in", VolumeSource("HOST_PATH", path=str(shared)), mode="RO"),
        Volume("/mnt", VolumeSource("SANDBOX_PATH", path="out")),
    ])
    launch(master, "t", "cat in/data.txt > copy; touch in/x 2> ro.err; echo hi > /mnt/hello; echo done > done; "
                        "sleep 600", container=container)
    running(master, "t")
    written(runtime, "t", "done")
    sandbox = sandbox_path(runtime.work_dir, "fw-1", "t")
    assert (sandbox / "copy").read_text() == "from the host\n"
    assert "Read-only" in (sandbox / "ro.err").read_text() and not (shared / "x").exists()
    assert (sandbox / "out" / "hello").read_text() == "hi\n"   # the sandbox path, seen at /mnt
    assert not Path("/mnt/hello").exists()


def test_a_host_path_volume_outside_the_allow_list_fails_the_task_naming_it(master, agent, tmp_path):  # noqa: F811
    agent(allowed_host_paths=[str(tmp_path / "allowed")])
    container = ContainerInfo(volumes=[Volume("etc", VolumeSource("HOST_PATH", path="/etc"), mode="RO")])
    master.send(m.RunTask(FW, TaskInfo("t", "agent-1", "true", Resources.parse("cpus:0.5;mem:64"),
                                       container=container)))
    statuses = master.updates_until_terminal("t")
    failed = statuses[-1]
    assert failed.state == TaskState.FAILED and failed.reason == "REASON_CONTAINER_LAUNCH_FAILED", failed
    assert "/etc" in failed.message and "--allowed-host-paths" in failed.message



SECRET = b"the-task's-own-secret"


def test_secret_volumes_of_a_container_without_an_image(master, traversable_dir, cgroups_root):  # noqa: F811
    """A relative secret file is written into the sandbox, an absolute one
    bound read-only over a path of the agent in the task's mount namespace
    only; both 0400 and the task user's, for no other task, gone at its end."""
    require_root()
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:4;mem:1024", hostname="s",
                                         work_dir=traversable_dir / "agent", cgroups_root=cgroups_root)).start()   # a work dir below /tmp that nobody may traverse
    try:
        master.register()
        target = traversable_dir / "app-token"   # the agent's own file, kept below the task's private /tmp
        target.write_text("")
        secret = VolumeSource("SECRET", secret=Secret(Secret.VALUE, value=SECRET))
        container = ContainerInfo(volumes=[Volume("conf/token", secret, "RO"), Volume(str(target), secret)])
        command = (f"cat conf/token > seen; echo >> seen; cat {target} >> seen; echo >> seen; "
                   f"stat -c '%a %U' conf/token {target} >> seen; echo done > done; sleep 600")
        master.send(m.RunTask(FW, TaskInfo("t", "agent-1", command, Resources.parse("cpus:0.5;mem:64"),
                                           kill_grace_period=0.5, container=container, user="nobody")))
        assert master.update("t").state == TaskState.STARTING
        running(master, "t")
        written(runtime, "t", "done")
        sandbox = sandbox_path(runtime.work_dir, "fw-1", "t")
        assert (sandbox / "seen").read_text().split("\n")[:4] == [SECRET.decode(), SECRET.decode(), "400 nobody",
                                                                  "400 nobody"]
        host_file = Path(secret_file_host_path(sandbox.resolve(), run_dir_path(runtime.work_dir, "fw-1", "t"),
                                               str(target)))
        info = os.stat(host_file)
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (pwd.getpwnam("nobody").pw_uid, 0o400)
        assert target.read_text() == ""   # the host's own file: the bind is the task's
        # another user's task: the agent's empty file at that path, and no way into the first one's sandbox
        other = f"cat {target} > other; cat {sandbox.resolve()}/conf/token >> other 2>&1; echo done >> other"
        master.send(m.RunTask(FW, TaskInfo("u", "agent-1", other, Resources.parse("cpus:0.5;mem:64"),
                                           user="daemon")))
        assert master.updates_until_terminal("u")[-1].state == TaskState.FINISHED
        seen_by_other = (sandbox_path(runtime.work_dir, "fw-1", "u") / "other").read_text()
        assert SECRET.decode() not in seen_by_other and "Permission denied" in seen_by_other, seen_by_other
        master.send(m.KillTask("fw-1", "t"))
        assert master.updates_until_terminal("t")[-1].state == TaskState.KILLED
        assert not (sandbox / "conf" / "token").exists() and not host_file.exists()   # gone with the task
    finally:
        runtime.stop()


def test_a_custom_executors_container_gets_its_secret_volumes(master, agent, tmp_path):  # noqa: F811
    runtime = agent()
    target = tmp_path / "executor-token"
    target.write_text("")
    secret = VolumeSource("SECRET", secret=Secret(Secret.VALUE, value=SECRET))
    executor = ExecutorInfo("e", f"cat token {target} > seen; echo >> seen; exec sleep 60",
                            Resources.parse("cpus:0.1;mem:32"),
                            container=ContainerInfo(volumes=[Volume("token", secret), Volume(str(target), secret)]))
    master.send(m.RunTask(FW, TaskInfo("t", "agent-1", "", Resources.parse("cpus:0.1;mem:32"), executor=executor)))
    seen = written(runtime, executor.run_id(), "seen")   # the executor's process reports before it registers
    assert seen == SECRET.decode() * 2 + "\n" and target.read_text() == ""


def test_a_custom_executor_runs_in_namespaces_of_its_own(master, agent):  # noqa: F811
    """As a command task: its own PID (it is not pid 1's only child on the host's, it sees no other
    container's processes), mount, IPC and UTS namespaces; the tasks it runs share them (its container)."""
    runtime = agent()
    launch(master, "other", "sleep 600")
    running(master, "other")
    other = host_pid_of(runtime, "other")
    executor = ExecutorInfo("e", "ls /proc | grep -E '^[0-9]+$' > pids.tmp; echo $$ >> pids.tmp; mv pids.tmp pids; "
                                 "exec sleep 60", Resources.parse("cpus:0.1;mem:32"))
    master.send(m.RunTask(FW, TaskInfo("t", "agent-1", "", Resources.parse("cpus:0.1;mem:32"), executor=executor)))
    *listed, own = [int(pid) for pid in written(runtime, executor.run_id(), "pids").split()]
    assert own == 2 and set(listed) <= set(range(1, 8)), (listed, own)   # its init and itself, not the host's
    host = wait_until(lambda: runtime.executor.pid("fw-1", executor.run_id()), 10, "the executor's pid")
    assert host != own and other not in listed
    for kind in ("pid", "mnt", "ipc", "uts"):
        assert namespace_of(host, kind) != namespace_of(os.getpid(), kind), kind
        assert namespace_of(host, kind) != namespace_of(other, kind), kind


def test_a_secret_at_an_absolute_path_needs_a_mount_namespace_and_a_path_of_the_agent(master, agent):  # noqa: F811
    secret = VolumeSource("SECRET", secret=Secret(Secret.VALUE, value=SECRET))
    agent(isolation="posix")
    master.send(m.RunTask(FW, TaskInfo("t", "agent-1", "true", Resources.parse("cpus:0.5;mem:64"),
                                       container=ContainerInfo(volumes=[Volume("/etc/app-token", secret)]))))
    failed = master.updates_until_terminal("t")[-1]
    assert failed.state == TaskState.FAILED and failed.reason == "REASON_CONTAINER_LAUNCH_FAILED", failed
    assert "filesystem/linux" in failed.message
    agent()   # (as Mesos: without an image, an absolute path must be there; the task's mount covers it)
    master.send(m.RunTask(FW, TaskInfo("u", "agent-1", "touch ran", Resources.parse("cpus:0.5;mem:64"),
                                       container=ContainerInfo(volumes=[Volume("/no/such/app-token", secret)]))))
    failed = master.updates_until_terminal("u")[-1]
    assert failed.state == TaskState.FAILED and failed.reason == "REASON_CONTAINER_LAUNCH_FAILED", failed
    assert "volume at /no/such/app-token" in failed.message and "does not exist" in failed.message


# ------------------------------------------------------------ the flag
def test_the_flag_takes_mesos_names_and_the_old_values():
    assert parse_isolation("auto") == (DEFAULT_ISOLATION.split(","), True)
    assert parse_isolation("posix") == (["posix/cpu", "posix/mem"], False)
    assert parse_isolation("namespaces/pid,filesystem/linux,cgroups/mem") == (
        ["cgroups/mem", "filesystem/linux", "namespaces/pid"], False)
    for bad, words in (("namespaces/net", "unknown isolator 'namespaces/net'"),
                       ("namespaces/pid", "namespaces/pid needs filesystem/linux"),
                       ("cgroups/cpu,posix/cpu", "name one"), ("", "unknown isolator")):
        with pytest.raises(ConfigError, match=words):
            parse_isolation(bad)


def _probe_as_nobody(tmp_path):
    """The real probe, run as an unprivileged user (whom the kernel refuses namespaces)."""
    place = Path(tempfile.mkdtemp(prefix="mesoslike-probe-"))   # where nobody may read (not below tmp_path)
    os.chmod(place, 0o755)
    script = place / "namespaces.py"
    shutil.copy(Path(__file__).resolve().parents[1] / "mesoslike" / "agent" / "namespaces.py", script)

    def probe(names):
        done = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-I", "-S", str(script),
                               "--probe", ",".join(names)], capture_output=True, text=True, timeout=60)
        return json.loads(done.stdout)
    return probe, place


def test_an_explicit_isolation_the_kernel_refuses_stops_the_agent_naming_why_and_auto_drops_it(tmp_path):
    require_root()
    probe, place = _probe_as_nobody(tmp_path)
    try:
        with pytest.raises(ConfigError) as refused:
            select_isolation(f"posix/cpu,posix/mem,{NAMESPACES}", probe=probe)
        lenient = select_isolation("auto", probe=probe, find_runc=lambda: "")
    finally:
        shutil.rmtree(place)
    assert "refuses a new" in str(refused.value) and "Operation not permitted" in str(refused.value)
    assert "posix/cpu,posix/mem" in str(refused.value)   # how to opt out
    assert lenient.namespaces == ()
    assert ("filesystem/linux, namespaces/pid, namespaces/ipc, namespaces/uts: the kernel refused a new mount, pid, "
            "ipc, uts namespace (Operation not permitted); tasks run without them") in lenient.warnings   # one line
    assert any("docker/runtime" in w for w in lenient.warnings)


def test_an_agent_given_isolators_that_cannot_go_together_exits_saying_so(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mesoslike", "agent", "--master", "tcp://127.0.0.1:1",
                           "--work-dir", str(tmp_path / "w"), "--isolation", "cgroups/cpu,posix/cpu,namespaces/pid"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "cgroups/cpu and posix/cpu" in done.stderr, done.stderr



def test_an_agent_whose_work_dir_is_below_dev_shm_refuses_to_start_with_an_ipc_namespace():
    """Each task's fresh /dev/shm would hide a sandbox below the host's: its files would be lost when it ended."""
    work = Path(tempfile.mkdtemp(prefix="mesoslike-shm-", dir="/dev/shm"))
    try:
        done = subprocess.run([sys.executable, "-m", "mesoslike", "agent", "--master", "tcp://127.0.0.1:1",
                               "--work-dir", str(work / "agent"), "--isolation",
                               "filesystem/linux,namespaces/pid,namespaces/ipc"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert "below /dev/shm" in done.stderr and "namespaces/ipc" in done.stderr, done.stderr
        _check_work_dir_visible(work / "agent", ("mount", "pid"))   # no IPC namespace: its /dev/shm is the host's
        _check_work_dir_visible(Path("/dev/shmx/agent"), ("mount", "ipc"))   # a name that only begins alike
        with pytest.raises(ConfigError, match="below /dev/shm"):
            _check_work_dir_visible(Path("/dev/shm"), ("mount", "ipc"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

def test_network_none_gives_a_task_only_its_loopback_where_its_checks_reach_it(master, agent):  # noqa: F811
    runtime = agent(f"cgroups/cpu,cgroups/mem,{NAMESPACES},network/none")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    check = HealthCheck(type="HTTP", http=HTTPCheck(port, "/"), delay_seconds=0.0, interval_seconds=0.3,
                        timeout_seconds=5.0, grace_period_seconds=60.0)
    launch(master, "web", f"cat /proc/net/dev > devices; exec {sys.executable} -m http.server {port} "
                          "--bind 127.0.0.1", health_check=check)
    running(master, "web")
    healthy = master.update("web", timeout=30)
    assert healthy.healthy is True, healthy   # the check, in the task's network namespace, reached it
    devices = written(runtime, "web", "devices")
    assert [line.split(":")[0].strip() for line in devices.splitlines()[2:]] == ["lo"]
    with pytest.raises(OSError):   # the host's 127.0.0.1 is another one
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert "network/none" in runtime.views.state_document()["tasks"][0]["isolation"]
