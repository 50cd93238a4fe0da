"""Unmodified pymesos from PyPI (0.3.15, tests/pymesos_env.py installs it in
a virtualenv of its own) on Mesos's v1 HTTP APIs of a real mesoslike
cluster (docs/mesos-api.rst): pymesos's own example scheduler and executor,
and a scheduler of ours written only against pymesos's public API, on an
authenticated cluster (HTTP Basic: a framework principal and its token)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

import pymesos_env
from e2e_helpers import cluster, task_processes, wait_for  # noqa: F401 (cluster: a fixture)

pytestmark = pytest.mark.timeout(300)

DATA = Path(__file__).resolve().parent / "data"


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


def test_a_pymesos_scheduler_of_our_own_on_an_authenticated_cluster(cluster, tmp_path, pymesos_python):
    cluster.start_master()
    cluster.start_agent("node-a", "cpus:2;mem:1024")
    executor = f"{pymesos_python} {DATA / 'pymesos_v1_executor.py'}"
    done = subprocess.run([pymesos_python, str(DATA / "pymesos_v1_scheduler.py"), f"127.0.0.1:{cluster.http_port}",
                           "fwA", cluster.keys.framework_tokens["fwA"], executor],
                          capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
    found = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}\n{cluster.diagnostics()}"
    assert found["problems"] == []
    # the executor's update, byte for byte and field by field
    assert found["executor"] == {"data_equal": True, "message": "done \u00e9\u4e2d",
                                 "reason": "REASON_TASK_CHECK_STATUS_UPDATED", "source": "SOURCE_EXECUTOR",
                                 "healthy": True}
    # no TASK_STARTING of the agent's for a custom executor's task: only what the executor said
    assert found["states"]["executor"] == ["TASK_RUNNING", "TASK_FINISHED"]
    assert found["command"] == {"source": "SOURCE_EXECUTOR", "ip_address": "127.0.0.1"} or \
        found["command"]["ip_address"] == "127.0.0.1"
    assert found["states"]["sleeper"][-1] == "TASK_KILLED"
    assert found["pong"] == {"executor_id": "checker", "equal": True}
    assert found["executor_lost"] == {"executor_id": "checker", "status": 3}
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
