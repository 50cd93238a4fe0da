"""Secrets reach only their task, and tasks start with a clean environment
(docs/containers.rst "Secrets", docs/framework-api.rst "The task's
environment", docs/security.rst): an in-process agent (run as root, tasks
switched to ``nobody``) under a scripted master, real supervisors and real
task processes, each reporting what it saw through its sandbox."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pwd
import stat
import sys
from pathlib import Path

import pytest

from agent_helpers import master, read_pid_file, traversable_dir  # noqa: F401 (fixtures)
from mesoslike.agent.environment import DEFAULT_PATH, TASK_VARIABLES
from mesoslike.agent.executor import run_dir_path, sandbox_path
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.agent.secrets import SecretError, SecretStore, secret_file_host_path, select_key
from mesoslike.errors import ConfigError
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import (ContainerInfo, FrameworkInfo, HealthCheck, Secret, SecretReference, TaskInfo,
                                  TaskState, Volume, VolumeSource)
from waiting import wait_until

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc"),
    pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                       reason="switching users needs root (CI runs as root: never skipped there)"),
]

NOBODY = pwd.getpwnam("nobody")
FW_A = FrameworkInfo(name="a", id="fw-a", user="nobody", principal="fwA")
FW_B = FrameworkInfo(name="b", id="fw-b", user="nobody", principal="fwB")
#: what the agent process holds in its environment: an operator's keys (docs/security.rst)
AGENT_SECRETS = {"MESOSLIKE_TOKEN": "operator-token-do-not-leak", "MESOSLIKE_KEY": "/keys/agent.key_secret",
                 "MESOSLIKE_MASTER_KEY": "/keys/master.key", "AGENT_ONLY_VARIABLE": "agent-only"}
VALUE = b"hunter2-value-secret"
REFERENCED = "db-password-from-the-agents-dir"
FILE_SECRET = b"file-secret-\x00-bytes\n"
#: variables /bin/sh itself may add to what it passes on
SHELL_VARIABLES = {"PWD", "SHLVL", "_", "OLDPWD"}


@pytest.fixture
def secrets_dir(traversable_dir):
    """``<dir>/fwA/db`` (KEY=VALUE lines), ``fwA/app.json`` (JSON) and ``fwA/blob``, as an operator lays them out."""
    directory = traversable_dir / "secrets"
    (directory / "fwA").mkdir(parents=True, mode=0o700)
    os.chmod(directory, 0o700)
    for name, data in (("db", f"# the database\nUSER=app\nPASSWORD={REFERENCED}\n".encode()),
                       ("app.json", json.dumps({"token": "json-token"}).encode()), ("blob", FILE_SECRET)):
        (directory / "fwA" / name).write_bytes(data)
        os.chmod(directory / "fwA" / name, 0o600)
    return directory


#: the agent's isolation: without namespaces (a supervisor per task), and the default (PID, mount, IPC and
#: UTS namespaces; a task without a health check started by the shared supervisor's namespace init helper)
ISOLATIONS = pytest.mark.parametrize("agent", ["posix", "auto"], indirect=True)


@pytest.fixture
def agent(request, master, traversable_dir, secrets_dir, monkeypatch):  # noqa: F811 (fixture)
    for name, value in AGENT_SECRETS.items():
        monkeypatch.setenv(name, value)
    isolation = getattr(request, "param", "posix")
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:2;mem:512", hostname="h1",
                                         work_dir=traversable_dir / "agent", isolation=isolation,
                                         secrets_dir=secrets_dir)).start()
    assert bool(runtime.views.state_document()["isolation"]["namespaces"]) == (isolation == "auto")
    master.register()
    yield runtime
    runtime.stop()


def task(task_id: str, command: str, user: str = "nobody", **fields) -> TaskInfo:
    return TaskInfo(task_id, "agent-1", command, Resources.parse("cpus:0.2;mem:32"), kill_grace_period=1.0,
                    user=user, **fields)


def secret_volume(path: str, secret: Secret) -> Volume:
    return Volume(path, VolumeSource(VolumeSource.SECRET, secret=secret), "RO")


def environment_of(path: Path) -> dict[str, str]:
    """``env -0`` output as a dict."""
    return dict(entry.split("=", 1) for entry in path.read_bytes().decode().split("\0") if entry)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------ the clean environment
@ISOLATIONS
def test_a_task_starts_with_a_clean_environment_and_cannot_read_the_agents(master, agent):  # noqa: F811
    command = ("env -0 > env.out; "
               f"cat /proc/{os.getpid()}/environ > agent-environ 2>/dev/null && echo read || echo refused; "
               "while [ ! -e go ]; do sleep 0.05; done")
    master.send(m.RunTask(FW_A, task("t", command, environment={"FROM_FRAMEWORK": "yes", "PATH": "/bin"})))
    assert [master.update("t").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    task_json = run_dir_path(agent.work_dir, FW_A.id, "t") / "task.json"
    started = json.loads(wait_until(lambda: task_json.exists() and task_json.read_text(), 10, "task.json"))["started"]
    assert (started == "nsinit") == bool(agent.isolation.namespaces), started   # the default's own launch path
    (sandbox_path(agent.work_dir, FW_A.id, "t") / "go").touch()
    statuses = master.updates_until_terminal("t")
    assert statuses[-1].state == TaskState.FINISHED, statuses[-1]
    directory = sandbox_path(agent.work_dir, FW_A.id, "t")
    seen = environment_of(directory / "env.out")
    assert (directory / "stdout").read_text() == "refused\n"      # nobody cannot read the (root) agent's
    expected = {"FROM_FRAMEWORK", "PATH", "HOME", "USER", "LOGNAME", *TASK_VARIABLES}
    assert expected <= set(seen) <= expected | SHELL_VARIABLES, sorted(seen)
    assert not set(AGENT_SECRETS) & set(seen)
    assert seen["PATH"] == "/bin"                                  # the framework's wins over the base
    sandbox = str(directory.resolve())
    assert {name: seen[name] for name in TASK_VARIABLES} == {
        "MESOS_SANDBOX": sandbox, "MESOSLIKE_SANDBOX": sandbox, "MESOS_TASK_ID": "t", "MESOSLIKE_TASK_ID": "t",
        "MESOS_FRAMEWORK_ID": FW_A.id, "MESOSLIKE_FRAMEWORK_ID": FW_A.id, "MESOS_AGENT_ID": "agent-1",
        "MESOSLIKE_AGENT_ID": "agent-1", "MESOS_EXECUTOR_ID": "t"}
    assert (seen["HOME"], seen["USER"], seen["LOGNAME"]) == (NOBODY.pw_dir, "nobody", "nobody")


def test_the_operator_sets_the_base_environment(master, traversable_dir):  # noqa: F811 (fixture)
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256", hostname="h2",
                                         work_dir=traversable_dir / "h2", isolation="posix",
                                         environment={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})).start()
    try:
        master.register()
        master.send(m.RunTask(FW_A, task("t", "env -0 > env.out")))
        assert master.updates_until_terminal("t")[-1].state == TaskState.FINISHED
        seen = environment_of(sandbox_path(runtime.work_dir, FW_A.id, "t") / "env.out")
        assert (seen["PATH"], seen["LANG"]) == ("/usr/bin:/bin", "C.UTF-8")
    finally:
        runtime.stop()
    assert DEFAULT_PATH.startswith("/usr/local/sbin")


# ------------------------------------------------------------------- secrets
@ISOLATIONS
def test_secrets_reach_their_task_as_variables_and_files_and_nothing_else(master, agent, caplog):  # noqa: F811
    caplog.set_level(logging.DEBUG)
    command = ('printf %s "$DB_PASSWORD" | sha256sum > seen; printf %s "$API_TOKEN" | sha256sum >> seen; '
               'printf %s "$VALUE_SECRET" | sha256sum >> seen; sha256sum < conf/blob >> seen; '
               "stat -c '%a %U' conf/blob >> seen; echo $$ > pid; while [ ! -e go ]; do sleep 0.05; done")
    secrets = {"DB_PASSWORD": Secret(Secret.REFERENCE, reference=SecretReference("db", "PASSWORD")),
               "API_TOKEN": Secret(Secret.REFERENCE, reference=SecretReference("app.json", "token")),
               "VALUE_SECRET": Secret(Secret.VALUE, value=VALUE)}
    volumes = [secret_volume("conf/blob", Secret(Secret.REFERENCE, reference=SecretReference("blob"))),
               secret_volume("conf/value", Secret(Secret.VALUE, value=VALUE))]
    health = HealthCheck(HealthCheck.COMMAND, command='test -z "$DB_PASSWORD$VALUE_SECRET"', delay_seconds=0.0,
                         interval_seconds=0.2, grace_period_seconds=0.0)
    master.send(m.RunTask(FW_A, task("t", command, environment_secrets=secrets, health_check=health,
                                     container=ContainerInfo(volumes=volumes))))
    assert [master.update("t").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    directory = sandbox_path(agent.work_dir, FW_A.id, "t")
    run_dir = run_dir_path(agent.work_dir, FW_A.id, "t")
    read_pid_file(directory / "pid")                   # (its own namespace's pid with namespaces)
    pid = wait_until(lambda: agent.executor.pid(FW_A.id, "t"), 10, "the task's host pid")
    lines = wait_until(lambda: (lambda s: s if len(s) == 5 else None)((directory / "seen").read_text().splitlines()),
                       10, "the task's report")
    assert [line.split()[0] for line in lines[:4]] == [digest(REFERENCED.encode()), digest(b"json-token"),
                                                       digest(VALUE), digest(FILE_SECRET)]
    assert lines[4] == "400 nobody"                          # its own file, mode 0400
    # (an absolute container path: tests/test_agent_containers.py, secret volumes)
    outside = Path(secret_file_host_path(directory.resolve(), run_dir, "conf/value"))
    assert outside == directory.resolve() / "conf" / "value" and outside.read_bytes() == VALUE
    assert (os.stat(outside).st_uid, stat.S_IMODE(os.stat(outside).st_mode)) == (NOBODY.pw_uid, 0o400)
    # a health check gets the task's environment without the secrets (its output goes into updates)
    healthy = master.update("t")
    assert (healthy.state, healthy.healthy) == (TaskState.RUNNING, True), healthy
    # nowhere else: not the agent's state, launch files, journal, logs, nor a process's arguments
    supervisor = json.loads((run_dir / "supervisor.json").read_text())["pid"]
    wanted = (REFERENCED.encode(), b"json-token", VALUE, b"file-secret-")
    places = {"the agent's /state": json.dumps(agent.views.state_document()).encode(),
              "the log": caplog.text.encode(),
              "the supervisor's arguments": Path(f"/proc/{supervisor}/cmdline").read_bytes(),
              "the supervisor's environment": Path(f"/proc/{supervisor}/environ").read_bytes(),
              "the task's arguments": Path(f"/proc/{pid}/cmdline").read_bytes()}
    for path in (agent.work_dir / "meta").rglob("*"):
        if path.is_file() and path != outside:
            places[str(path)] = path.read_bytes()
    for where, data in places.items():
        assert not any(secret in data for secret in wanted), where
    assert not (run_dir / "secrets.json").exists()                  # the supervisor took it and removed it
    launch = run_dir / "launch.json"
    assert stat.S_IMODE(os.stat(launch).st_mode) == 0o600 and stat.S_IMODE(os.stat(agent.work_dir / "meta").st_mode) == 0o700
    # and once the task has ended its secret files are gone
    (directory / "go").touch()
    assert master.updates_until_terminal("t")[-1].state == TaskState.FINISHED
    assert not (directory / "conf" / "blob").exists() and not outside.exists()


def test_a_secret_the_agent_cannot_give_fails_the_launch_saying_why(master, agent, secrets_dir):  # noqa: F811
    (secrets_dir / "fwA" / "loose").write_text("x")
    os.chmod(secrets_dir / "fwA" / "loose", 0o644)
    os.symlink(secrets_dir / "fwA" / "db", secrets_dir / "fwA" / "link")
    cases = {
        # another principal's secret: looked up under fwB's own directory, which has none
        "other": (FW_B, SecretReference("db", "PASSWORD"), f"no secret {secrets_dir}/fwB/db on this agent"),
        "loose": (FW_A, SecretReference("loose"), "must belong to uid 0 (the agent's user) with mode 0600 or 0400"),
        "link": (FW_A, SecretReference("link"), "is a symlink or not a directory: refused"),
        "key": (FW_A, SecretReference("db", "NOPE"), "secret 'db' has no key 'NOPE'"),
    }
    for task_id, (framework, reference, message) in cases.items():
        secret = {"S": Secret(Secret.REFERENCE, reference=reference)}
        master.send(m.RunTask(framework, task(task_id, "touch ran", "daemon" if framework is FW_B else "nobody",
                                              environment_secrets=secret)))
        statuses = master.updates_until_terminal(task_id)
        assert statuses[-1].state == TaskState.FAILED and message in statuses[-1].message, (task_id, statuses[-1])
        assert statuses[-1].reason == "REASON_CONTAINER_LAUNCH_FAILED"
        assert not (sandbox_path(agent.work_dir, framework.id, task_id) / "ran").exists()
        assert REFERENCED not in statuses[-1].message


def test_an_agent_without_a_secrets_dir_refuses_references_and_a_loose_dir_is_refused_at_start(
        master, traversable_dir, secrets_dir):  # noqa: F811 (fixture)
    os.chmod(secrets_dir, 0o777)
    with pytest.raises(ConfigError, match="must belong to uid 0 .* and not be writable by others"):
        AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256", hostname="h3",
                                   work_dir=traversable_dir / "h3", secrets_dir=secrets_dir))
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256", hostname="h4",
                                         work_dir=traversable_dir / "h4", isolation="posix")).start()
    try:
        master.register()
        secret = {"S": Secret(Secret.REFERENCE, reference=SecretReference("db"))}
        master.send(m.RunTask(FW_A, task("t", "true", environment_secrets=secret)))
        failed = master.updates_until_terminal("t")[-1]
        assert failed.state == TaskState.FAILED and "this agent has no secrets directory (--secrets-dir)" in failed.message
    finally:
        runtime.stop()


# ------------------------------------------------------------- the pure parts
def test_a_key_selects_a_value_of_a_json_object_or_of_key_value_lines():
    assert select_key(b"whole\n", "", "s") == b"whole\n"
    assert select_key(b'  {"a": "1", "b": "x=y"}', "b", "s") == b"x=y"
    assert select_key(b"# c\n\nA=1\n B = two=2\n", "B", "s") == b" two=2"
    for data, key, problem in ((b'{"a": 1}', "a", "is not a JSON string"), (b"{nope", "a", "not a JSON object"),
                               (b"A=1\n", "B", "has no key 'B'"), (b"just text", "A", "line 1 of secret 's' is not"),
                               (b"\xff", "A", "is not UTF-8")):
        with pytest.raises(SecretError, match=problem) as caught:
            select_key(data, key, "s")
        assert "1" not in str(caught.value).replace("line 1", "")   # never the value


def test_a_secret_file_host_path_is_below_the_sandbox_or_in_the_run_directory():
    assert secret_file_host_path("/s/fw/t", "/w/meta/tasks/fw/t", "conf/x") == "/s/fw/t/conf/x"
    outside = secret_file_host_path("/s/fw/t", "/w/meta/tasks/fw/t", "/etc/x")
    assert outside.startswith("/w/meta/tasks/fw/t/secrets/") and len(Path(outside).name) == 16
    assert outside != secret_file_host_path("/s/fw/t", "/w/meta/tasks/fw/t", "/etc/y")


def test_the_store_refuses_names_that_lead_elsewhere(secrets_dir):
    store = SecretStore(secrets_dir)
    assert store.read("fwA", "blob") == FILE_SECRET
    for principal, name in (("", "blob"), ("..", "fwA/blob"), ("fwA", "../fwA/blob"), (".hidden", "x")):
        with pytest.raises(SecretError):
            store.read(principal, name)


# ------------------------------------------------- one unix user, one principal
def test_tasks_of_two_principals_never_share_a_unix_user(master, agent):  # noqa: F811 (fixture)
    secret = {"DB_PASSWORD": Secret(Secret.VALUE, value=VALUE)}
    master.send(m.RunTask(FW_A, task("a", "echo $$ > pid; while [ ! -e go ]; do sleep 0.05; done",
                                     environment_secrets=secret)))
    assert [master.update("a").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    directory = sandbox_path(agent.work_dir, FW_A.id, "a")
    pid = read_pid_file(directory / "pid")
    # fwB as nobody too: refused, it could read fwA's task's /proc/PID/environ and sandbox
    master.send(m.RunTask(FW_B, task("b", f"cat /proc/{pid}/environ")))
    refused = master.update("b")
    assert (refused.state, refused.reason) == (TaskState.ERROR, "REASON_TASK_UNAUTHORIZED"), refused
    assert "unix user 'nobody' runs tasks of another principal on this agent" in refused.message
    assert not sandbox_path(agent.work_dir, FW_B.id, "b").exists()
    # as another user it runs, and the kernel keeps fwA's task's environment from it
    master.send(m.RunTask(FW_B, task("c", f"cat /proc/{pid}/environ", user="daemon")))
    failed = master.updates_until_terminal("c")[-1]
    assert failed.state == TaskState.FAILED
    assert "Permission denied" in (sandbox_path(agent.work_dir, FW_B.id, "c") / "stderr").read_text()
    assert VALUE.decode() not in (sandbox_path(agent.work_dir, FW_B.id, "c") / "stdout").read_text()
    # once fwA's task has ended nobody is free again, and what fwA's task left is the agent's
    (directory / "go").touch()
    assert master.updates_until_terminal("a")[-1].state == TaskState.FINISHED
    master.send(m.RunTask(FW_B, task("d", f"ls {directory} && echo read || echo refused")))
    assert master.updates_until_terminal("d")[-1].state == TaskState.FINISHED
    assert (sandbox_path(agent.work_dir, FW_B.id, "d") / "stdout").read_text() == "refused\n"


def test_the_operator_may_let_principals_share_a_user(master, traversable_dir):  # noqa: F811 (fixture)
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256", hostname="h5",
                                         work_dir=traversable_dir / "h5", isolation="posix",
                                         shared_task_users=["nobody"])).start()
    try:
        master.register()
        assert "tasks of different principals may share user(s) nobody" in runtime.describe_users()
        master.send(m.RunTask(FW_A, task("a", "sleep 30")))
        assert [master.update("a").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
        master.send(m.RunTask(FW_B, task("b", "true")))
        assert [s.state for s in master.updates_until_terminal("b")] == [TaskState.STARTING, TaskState.RUNNING,
                                                                          TaskState.FINISHED]
    finally:
        runtime.stop()


def test_the_core_frees_a_user_for_another_principal_once_its_last_task_or_executor_ends():
    import random

    from mesoslike.agent.core import AgentCore, TaskUsers
    from mesoslike.clock import FakeClock
    from mesoslike.wire.types import AgentInfo, ExecutorInfo, MasterInfo

    core = AgentCore(FakeClock(100.0), AgentInfo("h", Resources.parse("cpus:4;mem:1024")), rng=random.Random(1),
                     task_users=TaskUsers(switch_user=True, agent_user="root"))
    core.tick()
    core.on_message(m.AgentRegistered("agent-1", MasterInfo("m", "tcp://127.0.0.1:1"), 1.0))

    def run(framework, task_id, user="nobody", **fields) -> str:
        """The agent's own first update of the task; a task of a custom executor gets none but a
        refusal (only its executor reports it, as in Mesos): "" when it was taken."""
        out = core.on_message(m.RunTask(framework, task(task_id, "true", user, **fields)))
        return next((c.message.status.state for c in out if isinstance(getattr(c, "message", None), m.StatusUpdate)),
                    "")

    executor = ExecutorInfo("e", "exec sleep 9", Resources.parse("cpus:0.1;mem:8"))
    assert run(FW_A, "a1") == run(FW_A, "a2") == TaskState.STARTING and run(FW_A, "a3", executor=executor) == ""
    assert run(FW_B, "b1") == TaskState.ERROR and run(FW_B, "b2", "daemon") == TaskState.STARTING
    for task_id in ("a1", "a2", "a3"):
        core.on_task_exited(FW_A.id, task_id, 0)
    assert run(FW_B, "b3") == TaskState.ERROR          # fwA's executor still runs as nobody
    core.on_task_exited(FW_A.id, executor.run_id(), 0)
    assert run(FW_B, "b4") == TaskState.STARTING
    assert run(FW_A, "a4") == TaskState.ERROR          # now nobody is fwB's
