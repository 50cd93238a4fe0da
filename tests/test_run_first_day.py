"""What a newcomer meets with ``mesoslike run`` and ``mesoslike state`` on the
first day (docs/cluster.rst): environment variables, task ids unique per
run, an instance bigger than every agent, an unreachable master, a master
that requires keys the client does not have, and an authenticated run that
ends without a spurious handshake error."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from e2e_helpers import REPO, child_env, cluster, free_port, http_get  # noqa: F401 (fixture)
from mesoslike.cli.state import NEEDS_KEYS

pytestmark = pytest.mark.timeout(150)


def mesoslike(*args: str, env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mesoslike", *args], cwd=REPO, env=env or child_env(),
                          capture_output=True, text=True, timeout=timeout)


def keys(c) -> list[str]:
    return ["--key", c.client_key, "--master-key", c.master_key]


def test_run_env_reaches_the_tasks_and_task_ids_are_unique_per_run(cluster):
    cluster.start_local("--agents", "1")
    master = ["--master", cluster.address, *keys(cluster)]
    ids = []
    for word in ("first", "second"):
        done = mesoslike("run", *master, "--env", f"WORD={word}", "--env", "OTHER=x", "--", "echo $WORD $OTHER")
        assert done.returncode == 0, done.stderr
        (task_id,) = set(re.findall(r"^(run-[0-9a-f]{6}-0) on ", done.stdout, re.M))
        ids.append(task_id)
    assert ids[0] != ids[1]
    # two runs of the same name: the second's task is found without --framework
    log = mesoslike("task", "log", ids[1], *master, "--token", cluster.token)
    assert log.returncode == 0 and log.stdout == "second x\n", log
    # the agents show sandboxes only to a token: without one, the error says why nothing was found
    blind = mesoslike("task", "log", ids[1], *master)
    assert blind.returncode == 1 and "refused to list their sandboxes to a caller without a token" in blind.stderr, \
        blind
    named = mesoslike("run", *master, "--name", "web", "--", "true")
    assert re.search(r"^web-[0-9a-f]{6}-0 on ", named.stdout, re.M), named.stdout


def test_a_run_exits_only_once_the_master_has_removed_its_framework(cluster):
    """``run`` ends its process without the interpreter's teardown, once its
    driver ended — and the driver ends once the master confirmed the
    TEARDOWN: right after ``run`` exits, its framework is gone from /state
    (no TEARDOWN left queued in the exiting process), and its exit status
    and output are whole."""
    cluster.start_local("--agents", "1")
    master = ["--master", cluster.address, *keys(cluster)]
    for name, command, status in (("ok", "true", 0), ("bad", "echo broken >&2; exit 3", 3)):
        done = mesoslike("run", *master, "--name", name, "--instances", "2", "--", command)
        assert done.returncode == status, done
        assert done.stdout.rstrip().endswith(f"done: {2 if status == 0 else 0}/2 finished, "
                                             f"{0 if status == 0 else 2} failed, 0 running, 0 waiting"), done.stdout
        code, _, body = http_get(cluster.http + "/state")
        assert code == 200
        assert name not in [framework["name"] for framework in json.loads(body)["frameworks"]], body
    assert "-0 TASK_FAILED: command exited with status 3" in done.stderr   # the failures, reported at the end


def test_an_instance_bigger_than_every_agent_is_said_once_and_the_run_gives_up(cluster):
    cluster.start_local("--agents", "2", "--resources", "cpus:2;mem:1024")
    done = mesoslike("run", "--master", cluster.address, *keys(cluster), "--cpus", "64", "--timeout", "6", "--",
                     "true")
    assert done.returncode == 124, done
    assert done.stderr.count("error: no agent can fit an instance: it needs cpus:64, the largest agent has "
                             "cpus:2 (2 agent(s))") == 1, done.stderr
    assert "gave up after --timeout 6s: no agent can fit an instance" in done.stderr
    # without --timeout it does not wait for ever either
    shown = mesoslike("run", "--help")
    assert "none; 60s while no agent can fit an instance" in " ".join(shown.stdout.split())


def test_an_unreachable_master_is_given_up_after_the_connect_timeout():
    done = mesoslike("run", "--master", f"tcp://127.0.0.1:{free_port()}", "--connect-timeout", "2", "--", "true")
    assert done.returncode == 1
    assert "no master took the subscription within --connect-timeout 2s: no answer from a master at" in done.stderr
    assert "default: 30" in " ".join(mesoslike("run", "--help").stdout.split())


def test_a_client_without_keys_is_told_the_master_requires_them(cluster):
    cluster.start_local("--agents", "1")
    for command in (["state"], ["run", "--", "true"]):
        done = mesoslike(*command[:1], "--master", cluster.address, *command[1:], timeout=60)
        assert done.returncode == 1, done
        assert NEEDS_KEYS in done.stderr, done.stderr
        assert "refused our key" not in done.stderr and "it is down" not in done.stderr, done.stderr


def test_an_authenticated_run_with_its_output_ends_without_a_handshake_error(cluster):
    cluster.start_local("--agents", "1")
    done = mesoslike("run", "--master", cluster.address, *keys(cluster), "--output", "--", "echo hello",
                     env=dict(child_env(), MESOSLIKE_TOKEN=cluster.token))
    assert done.returncode == 0, done.stderr
    assert "[0] hello" in done.stdout
    assert "ERROR" not in done.stderr and "handshake" not in done.stderr, done.stderr
    # without a token the agent shows no sandbox, and run says so once instead of showing nothing
    blind = mesoslike("run", "--master", cluster.address, *keys(cluster), "--output", "--", "echo hello")
    assert blind.returncode == 0 and "[0] hello" not in blind.stdout, blind
    assert blind.stderr.count("error: cannot show the tasks' output:") == 1, blind.stderr
    assert "MESOSLIKE_TOKEN" in blind.stderr


def test_state_takes_an_http_master_as_the_operator_commands_do(cluster):
    cluster.start_local("--agents", "1")
    by_http = mesoslike("state", "--master", cluster.http, "--json", env=cluster.client_env())
    assert by_http.returncode == 0, by_http.stderr
    assert json.loads(by_http.stdout)["leader"]["address"] == cluster.address
    shown = mesoslike("state", "--master", cluster.http)
    assert shown.returncode == 0 and "agents (1)" in shown.stdout, shown.stderr


@pytest.mark.parametrize("command", [["state"], ["task", "log"], ["task", "kill"], ["agent", "drain"],
                                     ["quota", "get"], ["weights", "get"]])
def test_client_commands_wait_as_long_for_the_master_by_default(command):
    shown = mesoslike(*command, "--help")
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert re.search(r"--timeout FLOAT RANGE Seconds to wait for the master[^.]*\. \[env var: \S+; default: 10\.0;",
                     text), text
