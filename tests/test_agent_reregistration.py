"""Prompt re-registration (issue 15 §3): an agent is back with a restarted
standalone master, and with its master after a ZooKeeper outage, within
2 s of that master serving again — not after the ping silence
(``ping_interval`` x 5 = 75 s by default, the interval these tests keep).

Each test prints what it measured.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest

from agent_helpers import Launcher, cgroups_root, kill_9, start_agent  # noqa: F401
from e2e_helpers import FAST_MASTER_ARGS, ProcessSet, cluster, free_port, http_get  # noqa: F401
from mesoslike import FrameworkInfo, TaskState
from waiting import wait_until
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")]

#: the goal of issue 15: back within this long after the master serves again
GOAL = 2.0
#: the default ping interval: the agents' silence detection would take 75 s
SLOW_PINGS = ("--ping-interval", "15")


def _registered_hostnames(http: str) -> list[str] | None:
    try:
        status, _, body = http_get(http + "/state", timeout=1.0)
    except OSError:
        return None
    if status != 200:
        return None
    doc = json.loads(body)
    return [a["hostname"] for a in doc.get("agents", [])] if doc.get("is_leader", True) else None


def test_agents_are_back_within_2s_of_a_restarted_standalone_master(cluster, tmp_path, cgroups_root):
    registry = tmp_path / "registry"
    master_args = ("--work-dir", str(registry), *SLOW_PINGS)
    cluster.start_master(*master_args)
    start_agent(cluster, "a1", "cpus:2;mem:512", "--cgroups-root", cgroups_root)
    start_agent(cluster, "a2", "cpus:2;mem:512", "--cgroups-root", cgroups_root)
    scheduler = Launcher({"long": "echo $$ > pid; sleep 600"}, "cpus:0.5;mem:64")
    cluster.driver(scheduler, "keeper", framework=FrameworkInfo("keeper", failover_timeout=60.0))
    scheduler.wait(lambda: any(s.state == TaskState.RUNNING for s in scheduler.statuses("long")), 20, "the task")

    kill_9(cluster.master)
    cluster.master = cluster._start("master-restarted", [
        "master", "--ip", "127.0.0.1", "--port", str(cluster.port), "--http-port", str(cluster.http_port),
        *FAST_MASTER_ARGS, *master_args, *cluster.security_args()])
    serving = wait_until(lambda: _registered_hostnames(cluster.http) is not None and time.monotonic(), 30,
                         "the restarted master to serve")
    back = wait_until(lambda: sorted(_registered_hostnames(cluster.http) or []) == ["a1", "a2"] and time.monotonic(),
                      30, "both agents to re-register", diagnostics=cluster.diagnostics)
    took = back - serving
    print(f"standalone master restart: both agents re-registered {took:.2f}s after the new master served "
          f"(ping silence would have taken 75s)")
    assert took <= GOAL
    tasks = [t for f in cluster.state()["frameworks"] for t in f["tasks"]]
    assert [(t["id"], t["state"]) for t in tasks] == [("long", TaskState.RUNNING)]
    assert TaskState.LOST not in [s.state for s in scheduler.statuses("long")]


def _agent_says_registered(agent) -> bool:
    served = re.search(r"agent HTTP on (http://\S+)", agent.output(100_000))
    if served is None:
        return False
    try:
        status, _, body = http_get(served.group(1) + "/health", timeout=1.0)
    except OSError:
        return False
    return status == 200 and json.loads(body).get("registered") is True


class ZkCluster(ProcessSet):
    """One ``mesoslike master --zk`` and agents following it through ZooKeeper."""

    def __init__(self, tmp_path, zk_url: str) -> None:
        super().__init__(tmp_path)
        self.zk_url = zk_url
        self.port, self.http_port = free_port(), free_port()
        self.http = f"http://127.0.0.1:{self.http_port}"

    def start_master(self):
        return self._start("master", ["master", "--ip", "127.0.0.1", "--port", str(self.port), "--http-port",
                                      str(self.http_port), *FAST_MASTER_ARGS, *SLOW_PINGS, "--zk", self.zk_url,
                                      "--zk-session-timeout", "2", "--agent-reregister-timeout", "60"])

    def start_agent(self, hostname: str, cgroups_root: str):
        return self._start(f"agent-{hostname}", ["agent", "--master", self.zk_url, "--resources", "cpus:1;mem:256",
                                                 "--hostname", hostname, "--work-dir", str(self.work_root / hostname),
                                                 "--cgroups-root", cgroups_root, "--log-level", "info"])

    def leads(self) -> bool:
        try:
            status, _, body = http_get(self.http + "/health", timeout=1.0)
        except OSError:
            return False
        return status == 200 and json.loads(body).get("is_leader", False)

    def diagnostics(self) -> str:
        return "\n".join(self.process_diagnostics())


@pytest.fixture
def zk_cluster(tmp_path, zookeeper):  # noqa: F811
    clusters = []

    def make():
        clusters.append(ZkCluster(tmp_path, zookeeper.url(f"/mesoslike-rereg-{os.getpid()}-{len(clusters)}")))
        return clusters[-1]
    yield make
    for made in clusters:
        made.close()


def test_agents_are_back_within_2s_of_their_master_leading_again_after_a_zookeeper_outage(
        zk_cluster, zookeeper, cgroups_root):  # noqa: F811
    cluster = zk_cluster()
    cluster.start_master()
    wait_until(cluster.leads, 30, "the master to lead", diagnostics=cluster.diagnostics)
    agent = cluster.start_agent("z1", cgroups_root)
    # registered as the agent knows it: the master lists an agent in /state while its admission is still being
    # written to ZooKeeper, and an outage then would start from an agent that was never registered
    wait_until(lambda: _registered_hostnames(cluster.http) == ["z1"] and _agent_says_registered(agent), 30,
               "the agent to register", diagnostics=cluster.diagnostics)
    zookeeper.stop()
    wait_until(lambda: not cluster.leads(), 15, "the master to step down without ZooKeeper")
    time.sleep(3.0)   # the outage lasts past the masters' 2 s session timeout (an outage is the scenario)
    zookeeper.start()
    leading = wait_until(lambda: cluster.leads() and time.monotonic(), 60, "the master to lead again",
                         diagnostics=cluster.diagnostics)
    back = wait_until(lambda: _registered_hostnames(cluster.http) == ["z1"] and time.monotonic(), 60,
                      "the agent to re-register", diagnostics=cluster.diagnostics)
    took = back - leading
    print(f"ZooKeeper outage: the agent re-registered {took:.2f}s after its master led again "
          "(ping silence would have taken 75s)")
    assert took <= GOAL
