"""Unmodified pymesos from PyPI (0.3.15, tests/pymesos_env.py installs it in
a virtualenv of its own) on Mesos's v1 HTTP APIs of a real mesoslike
cluster (docs/mesos-api.rst): pymesos's own example scheduler and executor,
and a scheduler of ours written only against pymesos's public API, on an
authenticated cluster (HTTP Basic: a framework principal and its token)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import pymesos_env
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)
from e2e_helpers import cluster, free_port, run_on_local, task_processes, wait_for  # noqa: F401 (cluster: a fixture)
from v1_helpers import EventStream, basic, post

pytestmark = pytest.mark.timeout(300)

DATA = Path(__file__).resolve().parent / "data"
RESOURCES = [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
             {"name": "mem", "type": "SCALAR", "scalar": {"value": 64}}]


class V1Client:
    """A v1 scheduler driven by the test (its stream, its calls, acknowledgements)."""

    def __init__(self, master: str, headers: dict[str, str]) -> None:
        self.url = master + "/api/v1/scheduler"
        self.headers = headers
        self.stream = EventStream(self.url, {"type": "SUBSCRIBE", "subscribe": {"framework_info": {
            "name": "v1-test", "user": os.environ.get("USER", "root"), "failover_timeout": 0}}}, headers)
        self.framework_id = self.stream.wait_for("SUBSCRIBED")["subscribed"]["framework_id"]["value"]
        self.acknowledged: set[str] = set()

    def call(self, kind: str, body: dict) -> tuple[int, bytes]:
        status, _, answer = post(self.url, {"type": kind, "framework_id": {"value": self.framework_id},
                                            kind.lower(): body},
                                 {"Mesos-Stream-Id": self.stream.stream_id, **self.headers})
        return status, answer

    def until_state(self, task_id: str, state: str, timeout: float = 60) -> dict:
        def reached() -> dict | None:
            for event in list(self.stream.events):
                status = event["update"]["status"] if event.get("type") == "UPDATE" else None
                if status is None or status["task_id"]["value"] != task_id:
                    continue
                if status.get("uuid") and status["uuid"] not in self.acknowledged:
                    self.acknowledged.add(status["uuid"])
                    self.call("ACKNOWLEDGE", {"agent_id": status["agent_id"], "task_id": status["task_id"],
                                              "uuid": status["uuid"]})
                if status["state"] == state:
                    return status
            return None
        return wait_for(reached, timeout, f"{task_id} {state}",
                        diagnostics=lambda: repr([e for e in self.stream.events if e.get("type") == "UPDATE"]))

    def echo(self, agent_id: dict, data: bytes, timeout: float = 20) -> bytes:
        """Send ``data`` to the executor until an answer comes (framework messages may be lost while the
        executor is away: sent again every 2 s); the answer."""
        seen = len(self.stream.events)
        deadline = time.monotonic() + timeout
        while True:
            assert self.call("MESSAGE", {"agent_id": agent_id, "executor_id": {"value": "echoer"},
                                         "data": base64.b64encode(data).decode()})[0] == 202
            try:
                answer = self.stream.wait_for(lambda e: e.get("type") == "MESSAGE" and
                                              self.stream.events.index(e) >= seen, 2)
                return base64.b64decode(answer["message"]["data"])
            except AssertionError:
                if time.monotonic() > deadline:
                    raise


@pytest.fixture(scope="module")
def pymesos_python() -> str:
    return str(pymesos_env.ensure())


def published_example(name: str) -> str:
    """pymesos's example as published (tests/data keeps it, vendored for the
    shim with its import changed: changed back here), with one change: its
    scheduler passes a str to ``encode_data``, which pymesos refuses on
    Python 3 (``TypeError: a bytes-like object is required``) — it is given
    the str's bytes."""
    lines = (DATA / f"pymesos_{name}.py").read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if i > 0 and not line.startswith("#"))
    source = lines[0] + "".join(lines[end:])
    source = source.replace("from mesoslike.compat.pymesos import", "from pymesos import")
    fixed = source.replace("encode_data('Hello from task {}!'.format(task_id))",
                           "encode_data('Hello from task {}!'.format(task_id).encode())")
    assert (fixed != source) == (name == "scheduler")
    return fixed


def test_pymesos_example_scheduler_and_executor_run_on_the_v1_apis(cluster, tmp_path, pymesos_python):
    # pymesos's example passes no principal: an anonymous (loopback) cluster
    cluster.start_local("--insecure", "--agents", "1", "--resources", "cpus:0.4;mem:128")
    example = tmp_path / "example"
    example.mkdir()
    for name in ("scheduler", "executor"):   # the example finds executor.py beside scheduler.py
        (example / f"{name}.py").write_text(published_example(name))
    log_path = tmp_path / "scheduler.log"
    with open(log_path, "wb") as log:
        # pymesos's master form HOST:PORT: the master's HTTP port, where Mesos's API is
        scheduler = subprocess.Popen([pymesos_python, str(example / "scheduler.py"), f"127.0.0.1:{cluster.http_port}"],
                                     cwd=str(example), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def diagnostics() -> str:
        return f"--- scheduler.log\n{log_path.read_text(errors='replace')[-4000:]}\n{cluster.diagnostics()}"

    def greeted() -> list[str]:
        running = [task["id"] for framework in cluster.state()["frameworks"] for task in framework["tasks"]
                   if task["state"] == "TASK_RUNNING"]
        stderr = "".join(path.read_text() for path in cluster.work_root.glob("*/sandboxes/*/*MinimalExecutor*/stderr"))
        return [task for task in running if f"Hello from task {task}!" in stderr]

    try:
        # its executor (pymesos's MesosExecutorDriver on the agent's v1 API) got each task with its data
        tasks = wait_for(greeted, 90, "the example's tasks TASK_RUNNING, their data printed by its executor",
                         interval=0.5, diagnostics=diagnostics)
        (framework,) = cluster.state()["frameworks"]
        assert framework["name"] == "MinimalFramework" and framework["connected"]
        assert f"Status update TID {tasks[0]} TASK_RUNNING" in log_path.read_text()
        # Ctrl-C: the example's handler calls driver.stop(): pymesos sends TEARDOWN
        scheduler.send_signal(signal.SIGINT)
        assert scheduler.wait(timeout=30) == 0, diagnostics()
        wait_for(lambda: not cluster.state()["frameworks"], 20, "the framework torn down", diagnostics=diagnostics)
        wait_for(lambda: not task_processes(cluster.work_root), 30, "the executor and its tasks ended",
                 diagnostics=diagnostics)
    finally:
        if scheduler.poll() is None:
            os.killpg(scheduler.pid, signal.SIGKILL)
            scheduler.wait(timeout=10)


def checked_findings(done: subprocess.CompletedProcess, diagnostics) -> dict:
    """What tests/data/pymesos_v1_scheduler.py found (its last line), checked:
    what frameworks rely on, as Mesos gives it."""
    found = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}\n{diagnostics()}"
    assert found["problems"] == []
    # the executor's update, byte for byte and field by field
    assert found["executor"] == {"data_equal": True, "message": "done \u00e9\u4e2d",
                                 "reason": "REASON_TASK_CHECK_STATUS_UPDATED", "source": "SOURCE_EXECUTOR",
                                 "healthy": True}
    # no TASK_STARTING of the agent's for a custom executor's task: only what the executor said
    assert found["states"]["executor"] == ["TASK_RUNNING", "TASK_FINISHED"]
    assert found["command"]["ip_address"] == "127.0.0.1"   # container_status.network_infos[0]...
    assert found["states"]["sleeper"][-1] == "TASK_KILLED"
    assert found["pong"] == {"executor_id": "checker", "equal": True}
    assert found["executor_lost"] == {"executor_id": "checker", "status": 3}
    return found


def test_a_pymesos_scheduler_of_our_own_on_an_authenticated_cluster(cluster, tmp_path, pymesos_python):
    cluster.start_master()
    cluster.start_agent("node-a", "cpus:2;mem:1024")
    executor = f"{pymesos_python} {DATA / 'pymesos_v1_executor.py'}"
    done = subprocess.run([pymesos_python, str(DATA / "pymesos_v1_scheduler.py"), f"127.0.0.1:{cluster.http_port}",
                           "fwA", cluster.keys.framework_tokens["fwA"], executor],
                          capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
    found = checked_findings(done, cluster.diagnostics)
    # it stopped without failover: torn down, as pymesos's stop() does
    wait_for(lambda: not cluster.state()["frameworks"], 20, "the framework torn down",
             diagnostics=cluster.diagnostics)
    (completed,) = cluster.state()["completed_frameworks"]
    assert completed["id"] == found["framework_id"] and completed["name"] == "pymesos-v1-checker"


def test_pymesos_without_its_secret_is_refused(cluster, tmp_path, pymesos_python):
    cluster.start_master()
    done = subprocess.run([pymesos_python, str(DATA / "pymesos_v1_scheduler.py"), f"127.0.0.1:{cluster.http_port}",
                           "fwA", "not-the-token", "true"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    assert "401" in done.stderr   # pymesos: RuntimeError('Failed with HTTP 401: ...')
    assert cluster.state()["frameworks"] == []


def test_a_pymesos_executor_survives_a_kill_9_of_its_agent(cluster, tmp_path, pymesos_python):
    """MESOS_CHECKPOINT: pymesos's executor waits for its restarted agent
    and subscribes again; the restarted agent (which never had the
    executor's secret in this process) takes it back, reading the secret
    from the executor's sandbox, checked against the checkpointed digest."""
    cluster.start_master("--max-agent-ping-timeouts", "120")   # the agent is away, not removed
    port = free_port()   # Mesos's agents keep their port: the executor's MESOS_AGENT_ENDPOINT names it
    agent_args = ("--http-port", str(port), "--executor-reregistration-timeout", "60")
    cluster.start_agent("node-a", "cpus:2;mem:1024", extra=agent_args)
    fwa = basic("fwA", cluster.keys.framework_tokens["fwA"])
    v1 = V1Client(cluster.http, fwa)
    try:
        offer = v1.stream.wait_for("OFFERS")["offers"]["offers"][0]
        task = {"task_id": {"value": "echo"}, "agent_id": offer["agent_id"], "name": "echo",
                "resources": RESOURCES,
                "executor": {"executor_id": {"value": "echoer"}, "name": "echoer", "resources": RESOURCES,
                             "command": {"value": f"{pymesos_python} {DATA / 'pymesos_restart_executor.py'}"}}}
        assert v1.call("ACCEPT", {"offer_ids": [offer["id"]], "operations": [
            {"type": "LAUNCH", "launch": {"task_infos": [task]}}]})[0] == 202
        v1.until_state("echo", "TASK_RUNNING")
        assert v1.echo(offer["agent_id"], b"before") == b"echo:before"
        cluster.kill_agent("node-a")
        cluster.start_agent("node-a", "cpus:2;mem:1024", extra=agent_args)
        # the executor subscribes again when pymesos's backoff next tries (up to 15 s); then it echoes
        assert v1.echo(offer["agent_id"], b"finish", timeout=60) == b"echo:finish"
        finished = v1.until_state("echo", "TASK_FINISHED")
        assert base64.b64decode(finished["data"]) == b"after the restart\x00"
        stderr = next(cluster.work_root.glob("node-a/sandboxes/*/*echoer*/stderr")).read_text()
        assert "reregistered with node-a" in stderr
    finally:
        v1.stream.close()


def test_pymesos_runs_against_mesoslike_local_out_of_the_box(pymesos_python):
    """``mesoslike local`` (authenticated, as it is by default) gives its
    command the master's HTTP address and the client principal's Mesos
    credential: a pymesos scheduler and executor need nothing else."""
    executor = f"{pymesos_python} {DATA / 'pymesos_v1_executor.py'}"
    done = run_on_local("sh", "-c", f'exec {pymesos_python} {DATA / "pymesos_v1_scheduler.py"} "$MESOS_MASTER" '
                        f'"$MESOS_EXAMPLE_PRINCIPAL" "$MESOS_EXAMPLE_SECRET" "$0"', executor, timeout=200)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert json.loads(done.stdout.strip().splitlines()[-1])["problems"] == []
    assert "Mesos v1 API (pymesos): master 127.0.0.1:" in done.stdout and "principal 'client'" in done.stdout


def test_pymesos_finds_the_leading_master_through_zookeeper(cluster, zookeeper, pymesos_python):
    """pymesos's ``zk://`` master: it reads the group's lowest ``json.info_``
    znode as Mesos's MasterInfo JSON and talks to ``address.ip:address.port``
    — the leading master's HTTP API."""
    url = zookeeper.url("/pymesos-zk")
    cluster.start_master("--zk", url)
    cluster.start_agent("node-a", "cpus:2;mem:1024")
    executor = f"{pymesos_python} {DATA / 'pymesos_v1_executor.py'}"
    done = subprocess.run([pymesos_python, str(DATA / "pymesos_v1_scheduler.py"), url, "fwA",
                           cluster.keys.framework_tokens["fwA"], executor],
                          capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}\n{cluster.diagnostics()}"
    assert json.loads(done.stdout.strip().splitlines()[-1])["problems"] == []


def test_a_non_leading_master_redirects_v1_calls_to_the_leader_and_pymesos_follows(cluster, zookeeper,
                                                                                  pymesos_python):
    """Mesos's 307: a master that does not lead answers the v1 scheduler and
    operator APIs with ``Location: //LEADER/api/v1/...``; pymesos given the
    follower's address (``HOST:PORT``, no ZooKeeper) follows it and runs."""
    url = zookeeper.url("/pymesos-redirect")
    cluster.start_master("--zk", url)
    leader_http = cluster.http_port
    cluster.start_agent("node-a", "cpus:2;mem:1024")   # registered with the leader (its tcp address)
    cluster.start_master("--zk", url)                     # the follower: its ports are the cluster's now
    assert cluster.http_port != leader_http
    for path, call in (("/api/v1/scheduler", {"type": "SUBSCRIBE", "subscribe": {"framework_info": {
                           "name": "x", "user": os.environ.get("USER", "root")}}}),
                       ("/api/v1", {"type": "GET_STATE"})):
        status, headers, _ = post(cluster.http + path, call)
        assert (status, headers.get("location")) == (307, f"//127.0.0.1:{leader_http}{path}"), (path, status)
    executor = f"{pymesos_python} {DATA / 'pymesos_v1_executor.py'}"
    done = subprocess.run([pymesos_python, str(DATA / "pymesos_v1_scheduler.py"), f"127.0.0.1:{cluster.http_port}",
                           "fwA", cluster.keys.framework_tokens["fwA"], executor],
                          capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
    checked_findings(done, cluster.diagnostics)
    assert f"redirect to new master: 127.0.0.1:{leader_http}" in done.stderr
