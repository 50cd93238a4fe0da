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
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from agent_helpers import Launcher, run_dir, sandbox, start_agent
from e2e_helpers import cluster  # noqa: F401 (fixture)
from mesoslike import ExecutorInfo, FrameworkInfo, Resources, TaskInfo, TaskState
from mesoslike.wire import executor_messages as x
from security_helpers import SecuredKeys
from test_executors import ExecutorScheduler
from waiting import wait_until

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc"),
    pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                       reason="tasks of other users need a root agent (CI runs as root: never skipped there)"),
]

NOBODY = pwd.getpwnam("nobody")


def two_tenants(cluster) -> None:  # noqa: F811 (fixture)
    """The cluster's credentials let fwA and fwB run tasks as nobody and daemon, and give each an HTTP token."""
    cluster.keys = SecuredKeys(Path(cluster.work_root).parent / "tenants", users=("nobody", "daemon"),
                               framework_tokens=True)
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
    assert "MESOS_EXECUTOR_AUTHENTICATION_TOKEN" not in seen   # nor Mesos's name for it (v1 executors)
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
    # untouched: its executor (a sleep) never reports it, and only the executor may (as in Mesos):
    # no update at all, so no forged one, reached fwA
    assert victim.state_of("t1") is None


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


# ------------------------------------------------------------- the agent's HTTP
def get(url: str, token: str | None = None) -> tuple[int, dict | list | str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def files_url(agent: str, endpoint: str, path: str) -> str:
    return f"{agent}/files/{endpoint}?" + urllib.parse.urlencode({"path": path, "offset": 0})


def test_the_agents_http_takes_the_clusters_tokens_and_access_sandboxes(cluster):  # noqa: F811 (fixture)
    from mesoslike.agent.executor import path_component
    from mesoslike.wire.types import Secret, Volume, VolumeSource, ContainerInfo

    two_tenants(cluster)
    cluster.start_master()
    start_agent(cluster, "a1", "cpus:2;mem:1024", "--credentials", str(cluster.keys.credentials))
    agent = cluster.state()["agents"][0]["http_address"]

    class Victim(Launcher):
        def tasks_for(self, offer) -> list[TaskInfo]:
            secret = Secret(Secret.VALUE, value=b"file-secret-of-fwA")
            return [TaskInfo("t", offer.agent_id, "echo fwA-output; sleep 60", self.resources,
                             container=ContainerInfo(volumes=[Volume("db", VolumeSource(VolumeSource.SECRET,
                                                                                        secret=secret))]))]

    victim = Victim({})
    cluster.driver(victim, "victim", framework=FrameworkInfo("victim", user="nobody"))
    victim.wait(lambda: victim.running("t"), 30, "fwA's task to run", cluster.diagnostics)
    victim_dir = path_component(victim.framework_id)
    # fwB's task plants a link to fwA's output in its own sandbox
    attacker = Launcher({"t": f"ln -s ../../{victim_dir}/t/stdout leak; echo fwB-output"})
    cluster.driver(attacker, "attacker", key=cluster.keys.secret("fwB"),
                   framework=FrameworkInfo("attacker", user="daemon"))
    attacker.wait(lambda: attacker.terminal("t"), 30, "fwB's task to end", cluster.diagnostics)
    attacker_dir = path_component(attacker.framework_id)
    fw_a, fw_b, ops = cluster.keys.tokens["fwA"], cluster.keys.tokens["fwB"], cluster.keys.token
    # no token, or a wrong one: 401 everywhere but /health
    assert get(f"{agent}/health")[0] == 200
    for token in (None, "wrong-token"):
        for endpoint in ("/state", "/metrics", "/monitor/statistics", "/containers", "/files/browse?path="):
            request = urllib.request.Request(agent + endpoint,
                                             headers={"Authorization": f"Bearer {token}"} if token else {})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=5)
            assert refused.value.code == 401 and "Bearer" in refused.value.headers["WWW-Authenticate"], endpoint
    assert get(f"{agent}/state", fw_b)[0] == 200
    # each framework principal sees and reads its own frameworks' sandboxes only; the operator all
    assert [e["path"] for e in get(files_url(agent, "browse", ""), fw_b)[1]] == [attacker_dir]
    assert [e["path"] for e in get(files_url(agent, "browse", ""), fw_a)[1]] == [victim_dir]
    assert {e["path"] for e in get(files_url(agent, "browse", ""), ops)[1]} == {victim_dir, attacker_dir}
    # /containers: fwA's running task's container to fwA and the operator, left out for fwB
    for token, seen in ((fw_a, [(victim.framework_id, "t")]), (ops, [(victim.framework_id, "t")]), (fw_b, [])):
        status, listed = get(f"{agent}/containers", token)
        assert status == 200 and [(c["framework_id"], c["executor_id"]) for c in listed] == seen, (token, listed)
    for path in (f"{victim_dir}/t/stdout", f"{attacker_dir}/t/leak"):
        status, body = get(files_url(agent, "read", path), fw_b)
        assert status == 403 and "access_sandboxes" in body["error"], (path, body)
    assert get(files_url(agent, "read", f"{victim_dir}/t/stdout"), fw_a)[1]["data"] == "fwA-output\n"
    assert get(files_url(agent, "read", f"{victim_dir}/t/stdout"), ops)[1]["data"] == "fwA-output\n"
    assert get(files_url(agent, "read", f"{attacker_dir}/t/stdout"), fw_b)[1]["data"] == "fwB-output\n"
    # a task's secret file is never served, not even to its own principal
    status, body = get(files_url(agent, "read", f"{victim_dir}/t/db"), fw_a)
    assert status == 403 and "secret file" in body["error"]
    # mesoslike task log sends the caller's token: its own task's output, and another's refused
    def task_log(token: str | None, *args: str) -> subprocess.CompletedProcess:
        env = dict(cluster.client_env(), **({"MESOSLIKE_TOKEN": token} if token else {}))
        return subprocess.run([sys.executable, "-m", "mesoslike", "task", "log", "t", "--master", cluster.address,
                               *args], env=env, capture_output=True, text=True, timeout=60)
    mine = task_log(fw_a, "--framework", victim.framework_id)
    assert (mine.returncode, mine.stdout) == (0, "fwA-output\n"), mine.stderr
    theirs = task_log(fw_b, "--framework", victim.framework_id)
    assert theirs.returncode != 0 and "403" in theirs.stderr and "fwA-output" not in theirs.stdout
    anonymous = task_log(None, "--framework", victim.framework_id)
    assert anonymous.returncode != 0 and "401" in anonymous.stderr


def test_an_agent_without_credentials_binds_loopback_unless_insecure(cluster):  # noqa: F811 (fixture)
    cluster.start_master()
    refused = cluster._start("agent-open", ["agent", "--master", cluster.address, "--ip", "0.0.0.0",
                                            "--work-dir", str(cluster.work_root / "open"), "--key",
                                            cluster.keys.secret("agent1"), "--master-key", cluster.master_key])
    wait_until(lambda: not refused.running(), 20, "the agent to refuse to start", diagnostics=refused.output)
    assert "refusing to serve HTTP on 0.0.0.0 without --credentials" in refused.output()
    started = start_agent(cluster, "a2", "cpus:1;mem:256", "--ip", "0.0.0.0", "--insecure")
    assert "INSECURE: this agent serves HTTP on 0.0.0.0 without authentication" in started.output()


def test_access_sandboxes_rules_decide_who_reads_whose_sandboxes():
    from mesoslike.credentials import parse_credentials
    from mesoslike.transport import CurveKeys

    keys = {name: CurveKeys.generate().public.decode() for name in "abcd"}
    document = {"principals": {"ops": {"key": keys["a"], "kinds": ["operator"]},
                               "fwA": {"key": keys["b"], "kinds": ["framework"]},
                               "fwB": {"key": keys["c"], "kinds": ["framework"]},
                               "audit": {"key": keys["d"], "kinds": ["operator"]}}}
    default = parse_credentials(document)
    assert [default.may_access_sandboxes(p, "fwA") for p in ("ops", "fwA", "fwB", None)] == [True, True, False, False]
    ruled = parse_credentials({**document, "acls": {"access_sandboxes": [
        {"principals": ["audit"], "framework_principals": ["fwB"]}, {"principals": ["fwA", "fwB"],
                                                                      "framework_principals": ["fwA"]}]}})
    assert [ruled.may_access_sandboxes(p, "fwA") for p in ("ops", "fwA", "fwB", "audit")] == [False, True, True, False]
    assert [ruled.may_access_sandboxes(p, "fwB") for p in ("ops", "fwA", "fwB", "audit")] == [False, False, False, True]
