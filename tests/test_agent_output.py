"""Output for users (issue 15 §6): ``mesoslike task log`` prints what a task
printed, found through the master on whichever agent ran it (also after its
framework is gone), and follows it; ``mesoslike run --output`` streams each
instance's stdout prefixed by its number, and a failed run shows the last
lines of each failed instance's stderr and where its sandbox is."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from agent_helpers import Launcher, sandbox, start_agent
from e2e_helpers import REPO, cluster  # noqa: F401 (fixture)
from mesoslike.agent.executor import path_component
from waiting import wait_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")]


def mesoslike(cluster, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """The CLI as the cluster's client (its keys in the environment: docs/security.rst)."""
    return subprocess.run([sys.executable, "-m", "mesoslike", *args], cwd=str(REPO), env=cluster.client_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_task_log_prints_what_the_task_printed_on_whichever_agent_it_ran(cluster):
    cluster.start_master()
    start_agent(cluster, "a1", "cpus:1;mem:256", "--isolation", "posix")
    scheduler = Launcher({"talker": "echo 'hello, world'; printf 'second line\\n'; echo 'to stderr' >&2; "
                                    "while [ ! -e go ]; do sleep 0.05; done; echo bye"})
    cluster.driver(scheduler, "talk")
    scheduler.wait(lambda: scheduler.running("talker"), 20, "the task to run", cluster.diagnostics)
    stdout = sandbox(cluster, "a1", scheduler.framework_id, "talker") / "stdout"
    wait_until(lambda: "second line" in stdout.read_text(), 10, "the task to print")
    out = mesoslike(cluster, "task", "log", "talker", "--master", cluster.address)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello, world\nsecond line\n"
    err = mesoslike(cluster, "task", "log", "talker", "--framework", scheduler.framework_id, "--stderr",
                    "--master", cluster.address)
    assert (err.returncode, err.stdout) == (0, "to stderr\n")
    # --follow prints what comes later and returns once the task has ended
    follower = subprocess.Popen([sys.executable, "-m", "mesoslike", "task", "log", "talker", "--follow", "--master",
                                 cluster.address], cwd=str(REPO), env=cluster.client_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        (stdout.parent / "go").touch()
        followed, errors = follower.communicate(timeout=60)
    finally:
        follower.kill()
    assert follower.returncode == 0, errors
    assert followed == "hello, world\nsecond line\nbye\n"
    missing = mesoslike(cluster, "task", "log", "nobody", "--master", cluster.address)
    assert missing.returncode == 1 and "no task 'nobody'" in missing.stderr


def test_run_streams_output_shows_failed_stderr_and_where_sandboxes_are(cluster):
    cluster.start_master()
    start_agent(cluster, "a1", "cpus:2;mem:512", "--isolation", "posix")
    command = ('echo "hello from $MESOSLIKE_TASK_ID"; echo "trouble in $MESOSLIKE_TASK_ID" >&2; '
               'case $MESOSLIKE_TASK_ID in *-1) exit 3;; esac')
    run = mesoslike(cluster, "run", "--master", cluster.address, "--instances", "3", "--output", "--", "sh", "-c", command)
    assert run.returncode == 3, run.stderr
    run_id = re.search(r"\[0\] hello from (run-[0-9a-f]{6})-0", run.stdout).group(1)   # task ids unique per run
    for instance in range(3):
        assert f"[{instance}] hello from {run_id}-{instance}" in run.stdout.splitlines()
    assert f"{run_id}-1 TASK_FAILED: command exited with status 3" in run.stderr
    assert f"  | trouble in {run_id}-1" in run.stderr
    assert f"trouble in {run_id}-0" not in run.stderr                             # only the failed instances'
    (where,) = [line for line in run.stderr.splitlines() if "sandbox:" in line]
    framework_id = where.split("--framework ")[1].split()[0]
    expected = sandbox(cluster, "a1", framework_id, f"{run_id}-1")
    assert f"sandbox: {expected} on a1 (agent " in where   # the hostname, and the id
    assert f"mesoslike task log {run_id}-1 --framework {framework_id} --master {cluster.address}" in where
    # what it says works, though the framework is gone from the master: the sandbox is found on the agent
    log = mesoslike(cluster, "task", "log", f"{run_id}-1", "--framework", framework_id, "--stderr", "--master",
                    cluster.address)
    assert (log.returncode, log.stdout) == (0, f"trouble in {run_id}-1\n"), log.stderr
    assert path_component(framework_id) == framework_id
