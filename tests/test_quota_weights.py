"""Quota and weights one can see (docs/cluster.rst, "Weights and quota"):
``mesoslike quota set|get|remove``, ``mesoslike weights set|get``, ``GET
/quota``, ``GET /weights``, both in ``/state`` and ``mesoslike state``, and
the checks Mesos makes on a quota request; agents warned of resource names
that look like typos."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from e2e_helpers import REPO, child_env, cluster, free_port, http_get  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(120)


def cli(c, *args: str) -> subprocess.CompletedProcess:
    """A ``mesoslike`` command as the operator runs it (the cluster's keys and token in the environment)."""
    env = dict(c.client_env(), MESOSLIKE_TOKEN=c.token)
    return subprocess.run([sys.executable, "-m", "mesoslike", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


def get(c, path: str):
    status, _, body = http_get(c.http + path, timeout=5)
    assert status == 200, body
    return json.loads(body)


def test_quota_and_weights_set_with_the_cli_show_in_the_endpoints_state_and_the_cli(cluster):
    cluster.start_local("--agents", "2")
    master = ("--master", cluster.address)
    done = cli(cluster, "weights", "set", "eng=2", "batch=0.5", *master)
    assert done.returncode == 0, done.stderr
    done = cli(cluster, "quota", "set", "eng", "--guarantee", "cpus:1;mem:256", "--limit", "cpus:3;gpus:0", *master)
    assert done.returncode == 0, done.stderr

    assert get(cluster, "/weights") == [{"role": "batch", "weight": 0.5}, {"role": "eng", "weight": 2.0}]
    (config,) = get(cluster, "/quota")["configs"]
    assert config["role"] == "eng"
    assert config["guarantees"] == {"cpus": {"value": 1.0}, "mem": {"value": 256.0}}
    assert config["limits"] == {"cpus": {"value": 3.0}, "gpus": {"value": 0.0}}   # an explicit zero is kept
    assert (config["guarantee"], config["limit"]) == ("cpus:1;mem:256", "cpus:3;gpus:0")
    state = cluster.state()
    assert state["weights"] == {"batch": 0.5, "eng": 2.0}
    assert state["quota"]["eng"]["guarantee"] == "cpus:1;mem:256" and state["quota"]["eng"]["limit"] == "cpus:3;gpus:0"

    shown = cli(cluster, "quota", "get", *master)
    assert shown.returncode == 0 and "eng" in shown.stdout and "cpus:1;mem:256" in shown.stdout \
        and "cpus:3;gpus:0" in shown.stdout, shown
    shown = cli(cluster, "weights", "get", *master)
    assert shown.returncode == 0 and [line.split() for line in shown.stdout.splitlines()[1:]] == \
        [["batch", "0.5"], ["eng", "2"]], shown
    printed = cli(cluster, "state", *master)
    assert printed.returncode == 0, printed.stderr
    roles = printed.stdout.split("roles (", 1)[1].splitlines()
    assert roles[1].split() == ["role", "share", "weight", "guarantee", "limit", "consumed"]
    assert ["batch", "-", "0.5", "-", "-", "-"] in [line.split() for line in roles]
    assert any(line.split()[:5] == ["eng", "-", "2", "cpus:1;mem:256", "cpus:3;gpus:0"] for line in roles), roles

    done = cli(cluster, "quota", "remove", "eng", *master)
    assert done.returncode == 0, done.stderr
    assert get(cluster, "/quota") == {"configs": []} and cluster.state()["quota"] == {}
    assert "no role has quota" in cli(cluster, "quota", "get", *master).stdout


def test_a_quota_with_an_unknown_name_or_beyond_the_cluster_is_refused_unless_forced(cluster):
    cluster.start_local("--agents", "1", "--resources", "cpus:2;mem:1024")
    master = ("--master", cluster.address)
    typo = cli(cluster, "quota", "set", "eng", "--guarantee", "cpu:1", *master)
    assert typo.returncode == 1 and "unknown resource 'cpu'" in typo.stderr and "did you mean cpus?" in typo.stderr
    too_big = cli(cluster, "quota", "set", "eng", "--guarantee", "cpus:100", *master)
    assert too_big.returncode == 1 and "not enough cluster capacity" in too_big.stderr, too_big.stderr
    assert "force" in too_big.stderr
    assert get(cluster, "/quota") == {"configs": []}           # nothing was set
    forced = cli(cluster, "quota", "set", "eng", "--guarantee", "cpus:100", "--force", *master)
    assert forced.returncode == 0, forced.stderr
    assert get(cluster, "/quota")["configs"][0]["guarantee"] == "cpus:100"
    # what the cluster has is fine without --force, a limit beyond it too
    fits = cli(cluster, "quota", "set", "ops", "--guarantee", "cpus:0;mem:512", "--limit", "cpus:64", *master)
    assert fits.returncode == 1 and "not enough cluster capacity" in fits.stderr   # 100 + 0 cpus: still beyond
    cli(cluster, "quota", "remove", "eng", *master)
    fits = cli(cluster, "quota", "set", "ops", "--guarantee", "cpus:1;mem:512", "--limit", "cpus:64", *master)
    assert fits.returncode == 0, fits.stderr


def test_an_agent_warns_of_a_resource_name_that_looks_like_a_typo(tmp_path):
    work = tmp_path / "agent"
    agent = subprocess.Popen([sys.executable, "-m", "mesoslike", "agent", "--master", f"tcp://127.0.0.1:{free_port()}",
                              "--resources", "cpu:4;mem:512;fpgas:2", "--work-dir", str(work), "--hostname", "n1"],
                             cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = agent.stderr.readline()
    finally:
        agent.kill()
        agent.communicate(timeout=10)
    assert "'cpu' is not a resource mesoslike knows (did you mean cpus?)" in line
    assert "custom resource named 'cpu'" in line and "cpus is detected" in line
