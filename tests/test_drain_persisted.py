"""A drain survives the master (docs/operations.rst, "Draining an agent"):
the registry keeps it, as Mesos's does, so a restarted master (the file
registry of ``--work-dir``) or a new leader (the registry in ZooKeeper)
goes on with a drain in progress — the agent, once back, gets no offers
and is shown draining — and a reactivation is forgotten the same way. Also
the masters say who was elected at the default log level."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

import pytest

from e2e_helpers import cluster  # noqa: F401 (fixture)
from mesoslike import FrameworkInfo
from test_e2e_ha import group_url, make_cluster  # noqa: F401 (make_cluster: a fixture)
from test_operations import Holder, cli
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.timeout(180), pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")]


def post(url: str, body: dict, token: str) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=15) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def drain_of(state: dict, hostname: str) -> dict | None:
    """The drain_info of the registered agent ``hostname``, or None (also when it is not registered)."""
    agent = next((a for a in state["agents"] if a["hostname"] == hostname), None)
    return agent["drain_info"] if agent is not None else None


def test_a_restarted_master_remembers_a_drain_in_progress_from_its_file_registry(cluster, tmp_path):
    work = str(tmp_path / "master-work")
    cluster.start_master("--work-dir", work)
    cluster.start_agent("d1", "cpus:2;mem:512")
    cluster.start_agent("d2", "cpus:2;mem:512")
    holder = Holder(1, hosts={"d1"})
    cluster.driver(holder, "holder", framework=FrameworkInfo("holder", failover_timeout=60.0))
    holder.wait(lambda: holder.running() == {"t0"}, 30, "a task on d1", cluster.diagnostics)
    done = cli(cluster, "agent", "drain", "--master", cluster.address, "--grace", "600", "d1")
    assert done.returncode == 0, done.stderr
    registry = json.loads((tmp_path / "master-work" / "registry.json").read_text())   # stored when answered
    (record,) = registry["drains"].values()
    assert record["state"] == "DRAINING" and record["grace"] == 600.0

    cluster.restart_master("--work-dir", work)
    state = cluster.wait_until(lambda: (lambda s: s if drain_of(s, "d1") else None)(cluster.state()), 30,
                               "the restarted master to know d1 again, draining")
    assert drain_of(state, "d1")["state"] == "DRAINING"
    assert drain_of(state, "d1")["config"] == {"grace_period": 600.0}
    (d1,) = [a for a in state["agents"] if a["hostname"] == "d1"]
    assert d1["deactivated"] is True
    # its task keeps running (the grace is not over), and the framework is offered d2 only
    seen = len(holder.of("resource_offers"))
    holder.wait(lambda: len(holder.of("resource_offers")) >= seen + 3, 30, "offers from the new master")
    later = [o for batch in holder.of("resource_offers")[seen:] for o in batch]
    assert {o.hostname for o in later} == {"d2"}
    done = cli(cluster, "agent", "reactivate", "--master", cluster.address, "d1")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "master-work" / "registry.json").read_text())["drains"] == {}


def test_a_new_leader_remembers_a_drain_in_progress_from_zookeeper(zookeeper, make_cluster):
    cluster = make_cluster(group_url(zookeeper, "drains"))
    cluster.start_masters(2)
    first = cluster.wait_for_leader()
    # elections are said at the default level (notice)
    assert "elected leading master" in first.proc.output() and f"master {first.state()['leader']['id']} leads" \
        in first.proc.output(), first.proc.output()
    cluster.start_agent("h1", "cpus:2;mem:512")
    cluster.wait_for_agents(first, ["h1"])
    status, reply = post(first.http + "/agents/drain", {"agent": "h1", "grace": 600}, cluster.keys.token)
    assert status == 200 and reply["drain_info"]["state"] == "DRAINED", reply   # no task there: drained at once
    first.proc.kill()
    second = cluster.wait_for_leader(timeout=30)
    assert second is not first
    doc = cluster.wait_for_agents(second, ["h1"], timeout=30)
    assert drain_of(doc, "h1")["state"] == "DRAINED"
    assert [a["deactivated"] for a in doc["agents"]] == [True]
    assert "elected leading master" in second.proc.output()
