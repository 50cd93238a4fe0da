"""The user-facing commands end to end: ``local`` running ``run`` and the
word-count example, with real processes."""

import subprocess
import sys

import pytest

from e2e_helpers import REPO, child_env, free_port

pytestmark = pytest.mark.timeout(120)


def local(*command: str, agents: int = 2) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "mesoslike", "local", "--agents", str(agents), "--port", str(free_port()),
            "--http-port", str(free_port()), "--allocation-interval", "0.2", "--", *command]
    return subprocess.run(args, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=100)


def test_run_streams_status_and_exits_0_when_all_instances_finish():
    done = local(sys.executable, "-m", "mesoslike", "run", "--instances", "4", "--", "echo $MESOSLIKE_TASK_ID")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("TASK_FINISHED") == 4
    assert "done: 4/4 finished, 0 failed" in done.stdout


def test_run_shows_progress_for_many_instances_and_exits_with_a_failure_code():
    done = local(sys.executable, "-m", "mesoslike", "run", "--instances", "24", "--cpus", "0.25", "--",
                 'case "$MESOSLIKE_TASK_ID" in run-*-7) exit 3;; esac')
    assert done.returncode == 3, done.stdout + done.stderr
    assert "TASK_FINISHED" not in done.stdout  # too many instances to stream each change
    assert "23/24 finished, 1 failed" in done.stdout


def test_wordcount_example_runs_real_tasks_and_checks_its_result():
    done = local(sys.executable, "examples/wordcount.py", "--shards", "6", "--words", "5000", agents=3)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6/6 shards done" in done.stdout
    assert "matches the single-process count: yes" in done.stdout


@pytest.mark.parametrize("command", [["state"], ["run", "--", "true"], ["agent", "--hostname", "lonely"]])
def test_a_stopped_zookeeper_gives_one_clear_error_not_a_page_of_client_warnings(command):
    url = f"zk://127.0.0.1:{free_port()}/mesoslike"   # nothing listens there
    args = [sys.executable, "-m", "mesoslike", command[0], "--master", url, *command[1:]]
    done = subprocess.run(args, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=60)
    # `run` used to wait forever once its driver had given up
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("error: ") for line in lines), done.stderr
    assert any("could not connect to ZooKeeper" in line for line in lines), done.stderr
