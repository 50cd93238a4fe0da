"""Tasks' containers beyond the default namespaces (docs/containers.rst):
Mesos's ``CommandInfo.shell``/``arguments`` (a program executed without a
shell), and tasks with container images — pulled from a real registry
(Debian's docker-registry, images built in the test from busybox-static)
and run by real runc — with real agents and real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent_helpers import cgroups_root, master, start_agent  # noqa: F401 (fixtures)
from e2e_helpers import REPO, cluster  # noqa: F401 (fixture)
from environment import unavailable
from image_registry import busybox_image, push_image, registry, registry_factory, require_tools  # noqa: F401
from mesoslike.agent.executor import run_dir_path, sandbox_path
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.agent.secrets import secret_file_host_path
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import (ContainerInfo, DockerInfo, FrameworkInfo, HealthCheck, Image, Secret, TaskInfo,
                                  TaskState, TCPCheck, Volume, VolumeSource)
from waiting import wait_until

pytestmark = pytest.mark.timeout(120)

FW = FrameworkInfo(name="containers", id="fw-1")


@pytest.fixture
def agent(master, tmp_path, cgroups_root):  # noqa: F811 (fixture)
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:4;mem:1024", hostname="c1",
                                         work_dir=tmp_path / "agent", cgroups_root=cgroups_root)).start()
    master.register()
    yield runtime
    runtime.stop()


def test_shell_false_executes_the_arguments_without_a_shell(master, agent):  # noqa: F811
    task = TaskInfo("argv", "agent-1", "", Resources.parse("cpus:0.5;mem:64"), shell=False,
                    arguments=["printf", "%s|", "two words", "$HOME", ";", "exit 3"])
    master.send(m.RunTask(FW, task))
    statuses = master.updates_until_terminal("argv")
    assert [s.state for s in statuses] == [TaskState.STARTING, TaskState.RUNNING, TaskState.FINISHED], statuses
    out = (sandbox_path(agent.work_dir, "fw-1", "argv") / "stdout").read_text()
    assert out == "two words|$HOME|;|exit 3|"   # no word splitting, no expansion, no ';'


def test_shell_false_with_a_command_executes_it_as_mesoss_value_with_the_arguments_after_the_first(master, agent):  # noqa: F811,E501
    task = TaskInfo("value", "agent-1", "/usr/bin/printf", Resources.parse("cpus:0.5;mem:64"), shell=False,
                    arguments=["printf", "[%s]", "a b"])
    master.send(m.RunTask(FW, task))
    assert master.updates_until_terminal("value")[-1].state == TaskState.FINISHED
    assert (sandbox_path(agent.work_dir, "fw-1", "value") / "stdout").read_text() == "[a b]"


def test_shell_false_with_a_program_that_does_not_exist_fails_naming_it(master, agent):  # noqa: F811
    task = TaskInfo("missing", "agent-1", "", Resources.parse("cpus:0.5;mem:64"), shell=False,
                    arguments=["no-such-program-here", "x"])
    master.send(m.RunTask(FW, task))
    failed = master.updates_until_terminal("missing")[-1]
    assert failed.state == TaskState.FAILED and "no-such-program-here" in failed.message, failed


# ------------------------------------------------------------- images
@pytest.fixture
def image_agent(master, tmp_path, cgroups_root, registry):  # noqa: F811 (fixtures)
    """An agent whose default registry is the test's, which has test/busybox:1 and test/other:1
    (``restart=True``: the next agent on the same work dir, which re-registers)."""
    require_tools("runc", "docker-registry")
    if os.geteuid() != 0:
        unavailable("containers need root")
    push_image(registry, "test/busybox", "1", busybox_image())
    push_image(registry, "test/other", "1", busybox_image(extra=b"the other image\n"))
    made = []

    def make(restart=False, **kwargs):
        kwargs.setdefault("docker_registry", registry.host)
        runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:4;mem:1024", hostname="img",
                                             work_dir=tmp_path / "agent", cgroups_root=cgroups_root, **kwargs)).start()
        made.append(runtime)
        if restart:
            master.expect(m.ReregisterAgent)
            master.send(m.AgentRegistered("agent-1", master.info, 30.0))
        else:
            master.register()
        return runtime
    yield make
    for runtime in made:
        runtime.stop()


def image_task(task_id, command="", container=None, image="test/busybox:1", resources="cpus:0.5;mem:64", **fields):
    return TaskInfo(task_id, "agent-1", command, Resources.parse(resources),
                    container=container or ContainerInfo(image=Image(image)), **fields)


def sandbox_file(runtime, task_id, name):
    return (sandbox_path(runtime.work_dir, "fw-1", task_id) / name).read_text()


def test_a_task_with_an_image_runs_in_the_images_root_filesystem_and_its_own_pids(master, image_agent, registry):
    runtime = image_agent()
    probe = ("cat /etc/motd; test -e /etc/remove-me || echo whiteout-held; ls /opt/hidden; "
             "echo sandbox=$MESOS_SANDBOX greeting=$GREETING pwd=$(pwd); ls /proc | grep -c '^[0-9]'; "
             "hostname; echo inside > $MESOS_SANDBOX/written; test -e /usr/bin/python3 || echo no-host-files")
    master.send(m.RunTask(FW, image_task("img", probe)))
    statuses = master.updates_until_terminal("img", timeout=60)
    assert [s.state for s in statuses] == [TaskState.STARTING, TaskState.RUNNING, TaskState.FINISHED], statuses
    out = sandbox_file(runtime, "img", "stdout").split("\n")
    assert out[0] == "built in the test" and "whiteout-held" in out and "new" in out   # the image's files
    assert "sandbox=/mnt/mesos/sandbox greeting=hello pwd=/tmp" in out    # Env and WorkingDir of the image
    assert int(out[out.index("sandbox=/mnt/mesos/sandbox greeting=hello pwd=/tmp") + 1]) <= 6   # its pids only
    assert "no-host-files" in out                                          # not the agent's root filesystem
    assert sandbox_file(runtime, "img", "written") == "inside\n"          # the sandbox, seen inside
    running = statuses[1]
    assert running.container_status.image == "test/busybox:1" and "docker/runtime" in running.container_status.isolators
    assert not list((runtime.work_dir / "containers").iterdir())          # the bundle went with it


def test_the_second_launch_of_an_image_does_not_pull_it_again(master, image_agent, registry):
    image_agent()
    master.send(m.RunTask(FW, image_task("first", "true")))
    assert master.updates_until_terminal("first", timeout=60)[-1].state == TaskState.FINISHED
    pulled = registry.blob_downloads()
    assert pulled >= 3   # two layers and the config
    master.send(m.RunTask(FW, image_task("second", "true")))
    assert master.updates_until_terminal("second", timeout=60)[-1].state == TaskState.FINISHED
    assert registry.blob_downloads() == pulled


@pytest.mark.parametrize("image, words", [
    ("test/nothere:1", ["image test/nothere:1", "not found"]),
    ("test/BAD:1", ["test/BAD:1", "must be lowercase"]),
])
def test_an_image_that_cannot_be_had_fails_the_task_naming_the_image_and_the_cause(master, image_agent, image, words):
    image_agent()
    master.send(m.RunTask(FW, image_task("bad", "true", image=image)))
    failed = master.updates_until_terminal("bad", timeout=60)[-1]
    assert failed.state == TaskState.FAILED and failed.reason == "REASON_CONTAINER_LAUNCH_FAILED", failed
    for word in words:
        assert word in failed.message, failed.message


def test_an_unreachable_registry_fails_the_task_naming_the_image_and_the_cause(master, image_agent):
    with socket.socket() as closed:   # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    image_agent(docker_registry=f"127.0.0.1:{port}")
    master.send(m.RunTask(FW, image_task("far", "true")))
    failed = master.updates_until_terminal("far", timeout=120)[-1]
    assert failed.state == TaskState.FAILED and failed.reason == "REASON_CONTAINER_LAUNCH_FAILED", failed
    assert "image test/busybox:1" in failed.message and "cannot reach the registry" in failed.message, failed.message


def test_a_docker_container_runs_the_images_entrypoint_and_cmd_with_no_network(master, image_agent, registry):
    runtime = image_agent()
    push_image(registry, "test/entry", "1", busybox_image(config={
        "Entrypoint": ["/bin/sh", "-c", "echo entry:$0:$*; cat /proc/net/dev | wc -l", "first"],
        "Cmd": ["from-cmd"]}))
    docker = ContainerInfo("DOCKER", docker=DockerInfo("test/entry:1", network="NONE"))
    master.send(m.RunTask(FW, image_task("cmd", container=docker, shell=False)))
    assert master.updates_until_terminal("cmd", timeout=60)[-1].state == TaskState.FINISHED
    lines = sandbox_file(runtime, "cmd", "stdout").splitlines()
    assert lines[0] == "entry:first:from-cmd"        # Entrypoint + Cmd
    assert int(lines[1]) == 3                         # 2 header lines and lo: no network but loopback
    master.send(m.RunTask(FW, image_task("args", container=docker, shell=False, arguments=["a", "b"])))
    assert master.updates_until_terminal("args", timeout=60)[-1].state == TaskState.FINISHED
    assert sandbox_file(runtime, "args", "stdout").splitlines()[0] == "entry:first:a b"   # arguments replace Cmd


def test_kill_with_grace_and_the_memory_limit_in_an_image_container(master, image_agent):
    runtime = image_agent()
    master.send(m.RunTask(FW, image_task("graceful", "trap 'echo term > $MESOS_SANDBOX/got; exit 0' TERM; "
                                                     "echo up > $MESOS_SANDBOX/up; while true; do sleep 0.1; done",
                                         kill_grace_period=20.0)))
    assert [master.update("graceful").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    wait_until(lambda: (sandbox_path(runtime.work_dir, "fw-1", "graceful") / "up").exists(), 30, "the task up")
    master.send(m.KillTask("fw-1", "graceful"))
    killed = master.update("graceful", timeout=30)
    assert killed.state == TaskState.KILLED, killed
    assert sandbox_file(runtime, "graceful", "got") == "term\n"   # SIGTERM reached it: it ended in its grace
    master.send(m.RunTask(FW, image_task("hog", "head -c 300000000 /dev/zero > /dev/shm/fill; sleep 60")))
    failed = master.updates_until_terminal("hog", timeout=60)[-1]
    assert failed.state == TaskState.FAILED and failed.reason == "REASON_CONTAINER_LIMITATION_MEMORY", failed


def test_volumes_of_an_image_container(master, image_agent, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("from the host\n")
    runtime = image_agent(allowed_host_paths=[str(tmp_path)])
    container = ContainerInfo(image=Image("test/busybox:1"), volumes=[
        Volume("/data", VolumeSource("HOST_PATH", path=str(shared)), mode="RO"),
        Volume("/work", VolumeSource("SANDBOX_PATH", path="out")),
        Volume("/other", VolumeSource("IMAGE", image=Image("test/other:1"))),
    ])
    command = ("cat /data/data.txt; touch /data/x 2>&1 || true; echo hi > /work/hello; cat /other/etc/motd; "
               "touch /other/x 2>&1 || true")
    master.send(m.RunTask(FW, image_task("vol", command, container=container)))
    assert master.updates_until_terminal("vol", timeout=60)[-1].state == TaskState.FINISHED
    out = sandbox_file(runtime, "vol", "stdout")
    assert out.startswith("from the host\n") and out.count("Read-only file system") == 2, out
    assert "the other image" in out
    assert sandbox_file(runtime, "vol", "out/hello") == "hi\n" and not (shared / "x").exists()


def test_a_command_health_check_of_an_image_task_runs_in_its_container(master, image_agent):
    image_agent()
    check = HealthCheck(type="COMMAND", command="test -e /etc/motd && test ! -e /usr/bin/python3",
                        delay_seconds=0.0, interval_seconds=0.3, timeout_seconds=10.0, grace_period_seconds=60.0)
    master.send(m.RunTask(FW, image_task("checked", "sleep 600", health_check=check)))
    assert [master.update("checked", timeout=60).state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    healthy = master.update("checked", timeout=30)
    assert healthy.healthy is True, healthy


def test_an_image_task_survives_an_agent_restart_and_is_then_killed(master, image_agent, tmp_path):
    runtime = image_agent(kill_tasks_on_exit=False)
    master.send(m.RunTask(FW, image_task("long", "echo up > $MESOS_SANDBOX/up; sleep 600")))
    assert [master.update("long", timeout=60).state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    pid = runtime.executor.pid("fw-1", "long")
    runtime.stop()   # the task runs on under its supervisor
    assert os.kill(pid, 0) is None
    again = image_agent(restart=True, kill_tasks_on_exit=False)
    wait_until(lambda: again.executor.pid("fw-1", "long") == pid, 30, "the restarted agent to recover the task")
    master.send(m.KillTask("fw-1", "long"))
    states = [master.update("long", timeout=30).state]
    while states[-1] not in (TaskState.KILLED, TaskState.FAILED, TaskState.FINISHED):
        states.append(master.update("long", timeout=30).state)
    assert states[-1] == TaskState.KILLED, states
    wait_until(lambda: not list((again.work_dir / "containers").iterdir()), 20, "the container's bundle to go")


# ------------------------------------------------------- entry points
def test_mesoslike_run_image_runs_each_instance_in_the_image(cluster, cgroups_root, registry):  # noqa: F811
    require_tools("runc", "docker-registry")
    if os.geteuid() != 0:
        unavailable("containers need root")
    push_image(registry, "test/busybox", "1", busybox_image())
    push_image(registry, "test/entry", "1", busybox_image(config={"Entrypoint": ["/bin/cat", "/etc/motd"],
                                                                   "Cmd": []}))
    cluster.start_master()
    start_agent(cluster, "img-host", "cpus:2;mem:512", "--docker-registry", registry.host,
                "--cgroups-root", cgroups_root)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "mesoslike", "run", "--master", cluster.address, "--output",
                               *args], cwd=str(REPO), env=cluster.client_env(), capture_output=True, text=True,
                              timeout=120)
    done = run("--name", "in-image", "--instances", "2", "--image", "test/busybox:1", "--",
               "cat /etc/motd; test -e /usr/bin/python3 || echo not-the-host")
    assert done.returncode == 0, done.stdout + done.stderr
    for instance in (0, 1):
        assert f"[{instance}] built in the test" in done.stdout and f"[{instance}] not-the-host" in done.stdout
    done = run("--name", "entrypoint", "--image", "test/entry:1", "--container-type", "DOCKER")   # no COMMAND
    assert done.returncode == 0 and "[0] built in the test" in done.stdout, done.stdout + done.stderr
    done = run("--name", "nothing")
    assert done.returncode == 2 and "only with --image" in done.stderr


def test_an_image_task_whose_supervisor_is_killed_fails_and_its_container_goes(master, image_agent):
    runtime = image_agent()
    master.send(m.RunTask(FW, image_task("orphan", "sleep 600")))
    assert [master.update("orphan", timeout=60).state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    pid = runtime.executor.pid("fw-1", "orphan")
    supervisor = json.loads((run_dir_path(runtime.work_dir, "fw-1", "orphan") / "supervisor.json").read_text())["pid"]
    os.kill(supervisor, signal.SIGKILL)   # the kernel ends its PID namespace: the container's process with it
    failed = master.update("orphan", timeout=30)
    assert failed.state == TaskState.FAILED and failed.reason == "REASON_EXECUTOR_TERMINATED", failed
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 10, "the container's process to be gone")
    wait_until(lambda: not list((runtime.work_dir / "containers").iterdir()), 20, "its bundle to be removed")


def test_a_tcp_check_reaches_an_image_task_in_its_own_network_and_the_host_does_not(master, image_agent):
    image_agent()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    check = HealthCheck(type="TCP", tcp=TCPCheck(port), delay_seconds=0.0, interval_seconds=0.3,
                        timeout_seconds=5.0, grace_period_seconds=60.0)
    docker = ContainerInfo("DOCKER", docker=DockerInfo("test/busybox:1", network="NONE"))
    master.send(m.RunTask(FW, image_task("listener", f"exec /bin/busybox httpd -f -p 127.0.0.1:{port} -h /tmp",
                                         container=docker, health_check=check)))
    assert [master.update("listener", timeout=60).state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    healthy = master.update("listener", timeout=30)
    assert healthy.healthy is True, healthy
    with pytest.raises(OSError):   # its 127.0.0.1 is not the host's
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_an_image_task_of_a_switched_user_runs_as_that_user_in_the_container(master, image_agent):
    runtime = image_agent()
    master.send(m.RunTask(FW, image_task("as-nobody", "id -u; id -g; echo hi > $MESOS_SANDBOX/mine", user="nobody")))
    assert master.updates_until_terminal("as-nobody", timeout=60)[-1].state == TaskState.FINISHED
    assert sandbox_file(runtime, "as-nobody", "stdout").split() == ["65534", "65534"]
    assert (sandbox_path(runtime.work_dir, "fw-1", "as-nobody") / "mine").owner() == "nobody"


SECRET = b"the-container's-secret"


def test_secrets_of_an_image_task_as_files_and_a_variable_its_check_does_not_get(master, image_agent):
    """Secret files at a relative path (in the sandbox, /mnt/mesos/sandbox)
    and an absolute one (bound read-only into the image's root filesystem),
    0400 and the task user's, gone when it ends; a secret variable in its
    environment, not in its command check's."""
    runtime = image_agent()
    secret = VolumeSource("SECRET", secret=Secret(Secret.VALUE, value=SECRET))
    container = ContainerInfo(image=Image("test/busybox:1"),
                              volumes=[Volume("conf/token", secret, "RO"), Volume("/etc/app/token", secret)])
    command = ("cat $MESOS_SANDBOX/conf/token; echo; cat /etc/app/token; echo; "
               "stat -c '%a %u' $MESOS_SANDBOX/conf/token /etc/app/token; echo \"variable=$API_KEY\"; "
               "echo x 2>/dev/null > /etc/app/token || echo not-written; echo done > $MESOS_SANDBOX/done; sleep 600")
    check = HealthCheck(type="COMMAND", command='test -z "$API_KEY" && test -e /etc/motd', delay_seconds=0.0,
                        interval_seconds=0.3, timeout_seconds=10.0, grace_period_seconds=60.0)
    master.send(m.RunTask(FW, image_task("s", command, container=container, user="nobody", health_check=check,
                                         environment_secrets={"API_KEY": Secret(Secret.VALUE, value=b"key-1")})))
    assert [master.update("s", timeout=60).state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    healthy = master.update("s", timeout=30)
    assert healthy.healthy is True, healthy   # its check ran without the variable
    wait_until(lambda: (sandbox_path(runtime.work_dir, "fw-1", "s") / "done").exists(), 20, "the task's report")
    sandbox = sandbox_path(runtime.work_dir, "fw-1", "s")
    assert sandbox_file(runtime, "s", "stdout").split("\n")[:6] == [
        SECRET.decode(), SECRET.decode(), "400 65534", "400 65534", "variable=key-1", "not-written"]
    host_file = Path(secret_file_host_path(sandbox.resolve(), run_dir_path(runtime.work_dir, "fw-1", "s"),
                                           "/etc/app/token"))
    assert host_file.read_bytes() == SECRET and os.stat(host_file).st_uid == 65534
    bundle = next((runtime.work_dir / "containers").iterdir())
    assert stat.S_IMODE(os.stat(bundle).st_mode) == 0o700   # its config.json has the variable
    master.send(m.KillTask("fw-1", "s"))
    assert master.updates_until_terminal("s", timeout=30)[-1].state == TaskState.KILLED
    assert not (sandbox / "conf" / "token").exists() and not host_file.exists()


def test_secret_files_of_an_image_task_are_its_image_users(master, image_agent, registry):  # noqa: F811
    push_image(registry, "test/user", "1", busybox_image(config={"User": "nobody"}))
    runtime = image_agent()
    secret = VolumeSource("SECRET", secret=Secret(Secret.VALUE, value=SECRET))
    container = ContainerInfo(image=Image("test/user:1"),
                              volumes=[Volume("conf/token", secret), Volume("/etc/app/token", secret)])
    command = "id -u; cat $MESOS_SANDBOX/conf/token /etc/app/token; echo; stat -c '%a %u' /etc/app/token"
    master.send(m.RunTask(FW, image_task("u", command, container=container)))   # no task user: the image's
    assert master.updates_until_terminal("u", timeout=60)[-1].state == TaskState.FINISHED
    assert sandbox_file(runtime, "u", "stdout").split("\n")[:3] == ["65534", SECRET.decode() * 2, "400 65534"]
