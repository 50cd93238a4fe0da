"""Tenants with valid keys against each other (docs/security.rst, "Threat
model"): real master and agent processes of an authenticated cluster, two
framework principals (fwA the victim, fwB the attacker), the attacks of
the threat model run as an attacker holding fwB's key would."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import stat
import sys
from pathlib import Path

import pytest

from agent_helpers import Launcher, run_dir, sandbox, start_agent
from e2e_helpers import cluster  # noqa: F401 (fixture)
from mesoslike import ExecutorInfo, FrameworkInfo, Resources, TaskInfo, TaskState
from mesoslike.wire import executor_messages as x
from security_helpers import SecuredKeys
from test_executors import ExecutorScheduler

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc"),
    pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                       reason="tasks of other users need a root agent (CI runs as root: never skipped there)"),
]

NOBODY = pwd.getpwnam("nobody")


def two_tenants(cluster) -> None:  # noqa: F811 (fixture)
    """The cluster's credentials let fwA and fwB run tasks as nobody and daemon."""
    cluster.keys = SecuredKeys(Path(cluster.work_root).parent / "tenants", users=("nobody", "daemon"))
    cluster.client_key, cluster.master_key = cluster.keys.secret("fwA"), cluster.keys.public("master")
    cluster.token = cluster.keys.token


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(entry.split("=", 1) for entry in raw.decode(errors="replace").split("\0") if "=" in entry)


def test_another_principals_task_cannot_steal_a_custom_executors_secret(cluster):  # noqa: F811 (fixture)
    two_tenants(cluster)
    cluster.start_master()
    start_agent(cluster, "a1", "cpus:2;mem:1024")
    # the victim's executor runs as nobody (a process that never registers will do: what matters is what
    # its process holds; this machine's Python is not for other users)
    executor = ExecutorInfo("exec-1", "exec sleep 60", Resources.parse("cpus:0.5;mem:64"),
                            environment={"DB_PASSWORD": "in-plain-environment"})
    victim = ExecutorScheduler(executor)
    victim.add(("t1", "hold"))
    cluster.driver(victim, "victim", framework=FrameworkInfo("victim", user="nobody"))
    run_id = executor.run_id()
    cluster.wait_until(lambda: victim.framework_id and (run_dir(cluster, "a1", victim.framework_id, run_id)
                                                        / "task.json").read_text().strip(), 30,
                       "the executor's process to start")
    pid = json.loads((run_dir(cluster, "a1", victim.framework_id, run_id) / "task.json").read_text())["pid"]
    run_sandbox = sandbox(cluster, "a1", victim.framework_id, run_id)
    # the secret is a file of the executor's sandbox, its user's only, never in its environment
    seen = environ(pid)
    assert x.SECRET_ENV not in seen and seen[x.SECRET_FILE_ENV] == x.SECRET_FILE
    secret_file = run_sandbox / x.SECRET_FILE
    info = os.stat(secret_file)
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (NOBODY.pw_uid, 0o400)
    secret = secret_file.read_text()
    assert len(secret) == 64 and secret not in str(cluster.state())
    # fwB's task as nobody (what the example ACL allows it) is refused outright; as daemon it runs, and
    # can read neither the executor's environment nor its sandbox
    steal = f"cat /proc/{pid}/environ; cat {secret_file}"
    for user, task_id in (("nobody", "as-nobody"), ("daemon", "as-daemon")):
        attacker = Launcher({task_id: steal})
        cluster.driver(attacker, f"attacker-{user}", key=cluster.keys.secret("fwB"),
                       framework=FrameworkInfo(f"attacker-{user}", user=user))
        attacker.wait(lambda a=attacker, t=task_id: a.terminal(t), 30, f"the attack as {user} to end",
                      cluster.diagnostics)
        (ended,) = attacker.terminal(task_id)
        if user == "nobody":
            assert (ended.state, ended.reason) == (TaskState.ERROR, "REASON_TASK_UNAUTHORIZED"), ended
        else:
            assert ended.state == TaskState.FAILED, ended
            output = sandbox(cluster, "a1", attacker.framework_id, task_id)
            assert secret not in (output / "stdout").read_text()
            assert "Permission denied" in (output / "stderr").read_text()
    assert victim.state_of("t1") == TaskState.STARTING   # untouched: no forged update reached fwA


def test_value_secrets_never_reach_the_masters_state_nor_the_logs(cluster):  # noqa: F811 (fixture)
    from mesoslike.wire.types import ContainerInfo, Secret, Volume, VolumeSource

    DIGEST = hashlib.sha256(b"value-secret-of-fwA").hexdigest()   # (a command is logged: never the secret)

    two_tenants(cluster)
    cluster.start_master()
    start_agent(cluster, "a1", "cpus:2;mem:1024")

    class SecretLauncher(Launcher):
        def tasks_for(self, offer) -> list[TaskInfo]:
            secret = Secret(Secret.VALUE, value=b"value-secret-of-fwA")
            return [TaskInfo("t", offer.agent_id, f'printf %s "$DB_PASSWORD" | sha256sum | grep -q {DIGEST} && '
                                                  f'sha256sum db | grep -q {DIGEST} && sleep 30',
                             self.resources, environment_secrets={"DB_PASSWORD": secret},
                             container=ContainerInfo(volumes=[Volume("db", VolumeSource(VolumeSource.SECRET,
                                                                                        secret=secret))]))]

    victim = SecretLauncher({})
    cluster.driver(victim, "victim", framework=FrameworkInfo("victim", user="nobody"))
    victim.wait(lambda: victim.running("t"), 30, "the task to run", cluster.diagnostics)
    state = str(cluster.state())
    assert "value-secret-of-fwA" not in state and "DB_PASSWORD" not in state
    for proc in (cluster.master, cluster.agents["a1"]):
        assert "value-secret-of-fwA" not in proc.output()
