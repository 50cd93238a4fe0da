"""The operator's commands and endpoints on a real, authenticated cluster
(docs/operations.rst): ``mesoslike task kill``, ``framework teardown``,
``agent drain`` and ``agent reactivate`` — each a POST to the master's HTTP
with the operator's token — and the history they leave in ``/state`` and
``mesoslike state``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from e2e_helpers import REPO, RecordingScheduler, cluster, http_get, task_processes  # noqa: F401 (fixture)
from mesoslike import Filters, TaskInfo, TaskState
from mesoslike.resources import Resources

pytestmark = pytest.mark.timeout(180)

TASK = Resources.parse("cpus:0.5;mem:64")


class Holder(RecordingScheduler):
    """Runs ``sleep 600`` tasks ``t0``, ``t1``, ... one per offer until it has
    ``want`` of them (on the agents of ``hosts`` if given); declines every
    other offer for a second, so offers keep coming."""

    def __init__(self, want: int, hosts: set[str] | None = None) -> None:
        super().__init__()
        self.want, self.hosts = want, hosts
        self.launched: list[str] = []
        self.lock = threading.Lock()

    def on_offers(self, driver, offers) -> None:
        for offer in offers:
            with self.lock:
                fits = offer.resources.contains(TASK) and (self.hosts is None or offer.hostname in self.hosts)
                if len(self.launched) < self.want and fits:
                    task_id = f"t{len(self.launched)}"
                    self.launched.append(task_id)
                    driver.launch_tasks([offer.id], [TaskInfo(task_id, offer.agent_id, "sleep 600", TASK)],
                                        Filters(0.0))
                    continue
            driver.decline_offer(offer.id, Filters(1.0))

    def running(self) -> set[str]:
        latest = {s.task_id: s.state for s in self.statuses()}
        return {task_id for task_id, state in latest.items() if state == TaskState.RUNNING}

    def state_of(self, task_id: str) -> str | None:
        states = [s.state for s in self.statuses(task_id)]
        return states[-1] if states else None


def cli(c, *args: str, token: str | None = "cluster's") -> subprocess.CompletedProcess:
    """A ``mesoslike`` command as a user runs it against the cluster (its
    keys and, unless None, the operator's token in the environment)."""
    env = c.client_env()
    if token is not None:
        env["MESOSLIKE_TOKEN"] = c.token if token == "cluster's" else token
    return subprocess.run([sys.executable, "-m", "mesoslike", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


def post(url: str, body: object, token: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def running_cluster(c, holder: Holder, agents: tuple[str, ...] = ("node-0",)):
    c.start_master()
    for hostname in agents:
        c.start_agent(hostname, "cpus:2;mem:1024")
    c.driver(holder, "holder")
    holder.wait(lambda: len(holder.running()) == holder.want, 30, f"{holder.want} tasks running",
                diagnostics=c.diagnostics)


def test_task_kill_kills_the_task_and_state_shows_it_completed(cluster):
    holder = Holder(want=2)
    running_cluster(cluster, holder)
    done = cli(cluster, "task", "kill", "t0", "--master", cluster.address)
    assert done.returncode == 0, done.stderr
    assert f"killing task t0 of framework {holder.framework_id}" in done.stdout
    holder.wait(lambda: holder.state_of("t0") == TaskState.KILLED, 30, "t0 TASK_KILLED")
    assert holder.state_of("t1") == TaskState.RUNNING

    def completed():
        framework = cluster.framework("holder")
        return [(t["id"], t["state"]) for t in framework["completed_tasks"]] if framework else None
    assert cluster.wait_until(completed, 20, "t0 in completed_tasks") == [("t0", "TASK_KILLED")]
    shown = cli(cluster, "state", "--master", cluster.address)
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if line.startswith(holder.framework_id) and " t0 " in line)
    assert "TASK_KILLED" in line and "completed tasks (1)" in shown.stdout
    metrics = http_get(cluster.http + "/metrics")[2]
    assert 'mesoslike_tasks_completed_total{state="TASK_KILLED"} 1' in metrics

    for args, code, words in [(("t0",), 409, "ended already"), (("nope",), 404, "no task 'nope'"),
                              (("t1", "--framework", "m-F9999"), 404, "no framework")]:
        refused = cli(cluster, "task", "kill", *args, "--master", cluster.address)
        assert refused.returncode == 1, refused.stdout
        assert refused.stderr.startswith(f"error: the master refused ({code}): ") and words in refused.stderr
    assert holder.state_of("t1") == TaskState.RUNNING


def test_framework_teardown_kills_its_tasks_and_keeps_it_in_the_history(cluster):
    holder = Holder(want=2)
    running_cluster(cluster, holder)
    framework_id = holder.framework_id
    assert set(task_processes(cluster.work_root, framework_id).values()) == {"t0", "t1"}
    done = cli(cluster, "framework", "teardown", framework_id, "--master", cluster.http)   # the HTTP address works too
    assert done.returncode == 0, done.stderr
    assert f"framework {framework_id} (holder) torn down; 2 task(s) killed" in done.stdout
    holder.wait(lambda: any("operator" in e for e in holder.of("error")), 20, "the framework told it is removed")
    cluster.wait_until(lambda: not task_processes(cluster.work_root, framework_id), 30, "its task processes gone")
    doc = cluster.state()
    assert doc["frameworks"] == []
    (gone,) = doc["completed_frameworks"]
    assert (gone["id"], gone["name"], gone["removal_reason"]) == (framework_id, "holder", "torn down by the operator")
    assert sorted((t["id"], t["state"]) for t in gone["completed_tasks"]) == [("t0", "TASK_KILLED"),
                                                                              ("t1", "TASK_KILLED")]
    shown = cli(cluster, "state", "--master", cluster.address).stdout
    assert "completed frameworks (1)" in shown and "torn down by the operator" in shown
    again = cli(cluster, "framework", "teardown", framework_id, "--master", cluster.address)
    assert again.returncode == 1 and "(404)" in again.stderr and "removed already" in again.stderr


def test_drain_stops_offers_kills_after_the_grace_and_reactivate_offers_again(cluster):
    holder = Holder(want=2, hosts={"node-0"})
    running_cluster(cluster, holder, agents=("node-0", "node-1"))
    node0 = cluster.agent_id("node-0")
    done = cli(cluster, "agent", "drain", "node-0", "--grace", "3", "--master", cluster.address)
    assert done.returncode == 0, done.stderr
    assert f"agent {node0} (node-0) DRAINING" in done.stdout and "killed after 3s" in done.stdout
    offers_before = len(holder.of("resource_offers"))
    agent = next(a for a in cluster.state()["agents"] if a["id"] == node0)
    assert agent["deactivated"] is True and agent["drain_info"]["state"] == "DRAINING"
    drain_started = agent["drain_info"]["started_at"]
    assert agent["drain_info"]["kill_at"] == pytest.approx(drain_started + 3)
    assert holder.running() == {"t0", "t1"}            # the grace has not passed: they run
    holder.wait(lambda: all(holder.state_of(t) == TaskState.KILLED for t in ("t0", "t1")), 30, "both TASK_KILLED")
    assert all(s.timestamp >= drain_started + 3 for s in holder.statuses() if s.state == TaskState.KILLED)

    def drained():
        entry = next(a for a in cluster.state()["agents"] if a["id"] == node0)
        return entry["drain_info"] and entry["drain_info"]["state"] == "DRAINED"
    cluster.wait_until(drained, 20, "node-0 DRAINED")
    assert "DRAINED" in next(line for line in cli(cluster, "state", "--master", cluster.address).stdout.splitlines()
                             if "node-0" in line)
    # node-1 is offered meanwhile, node-0 (free now) is not
    holder.wait(lambda: len(holder.of("resource_offers")) >= offers_before + 3, 20, "more offers")
    later = [o for batch in holder.of("resource_offers")[offers_before:] for o in batch]
    assert {o.hostname for o in later} == {"node-1"}

    offers_drained = len(holder.of("resource_offers"))
    done = cli(cluster, "agent", "reactivate", "node-0", "--master", cluster.address)
    assert done.returncode == 0, done.stderr
    assert f"agent {node0} (node-0) reactivated (it was DRAINED)" in done.stdout
    holder.wait(lambda: any(o.hostname == "node-0" for batch in holder.of("resource_offers")[offers_drained:]
                            for o in batch), 20, "node-0 offered again")
    agent = next(a for a in cluster.state()["agents"] if a["id"] == node0)
    assert agent["deactivated"] is False and agent["drain_info"] is None
    again = cli(cluster, "agent", "reactivate", node0, "--master", cluster.address)
    assert again.returncode == 1 and "(409)" in again.stderr and "not draining" in again.stderr
    unknown = cli(cluster, "agent", "drain", "nowhere", "--master", cluster.address)
    assert unknown.returncode == 1 and "(404)" in unknown.stderr and "'nowhere'" in unknown.stderr


def test_the_operator_endpoints_need_a_token_and_the_permission(cluster):
    # the operations are granted to fwA only (a framework principal): the operator's token lacks them
    rules = "".join(f'[[acls.{acl}]]\nprincipals = ["fwA"]\n' for acl in
                    ("kill_tasks", "teardown_frameworks", "drain_agents", "reactivate_agents", "mark_agents_gone"))
    cluster.keys.credentials.write_text(cluster.keys.credentials.read_text() + rules)
    cluster.start_master()
    cluster.start_agent("node-0", "cpus:2;mem:1024")
    requests = {"/tasks/kill": {"task_id": "t0"}, "/frameworks/teardown": {"framework_id": "x"},
                "/agents/drain": {"agent": "node-0"}, "/agents/reactivate": {"agent": "node-0"},
                "/agents/gone": {"agent": "node-0"}}
    for path, body in requests.items():
        code, reply = post(cluster.http + path, body)
        assert code == 401 and "Bearer" in reply["error"], path
        assert post(cluster.http + path, body, token="not-a-token")[0] == 401, path
        code, reply = post(cluster.http + path, body, token=cluster.token)
        permission = {"/tasks/kill": "kill_tasks", "/frameworks/teardown": "teardown_frameworks",
                      "/agents/drain": "drain_agents", "/agents/reactivate": "reactivate_agents",
                      "/agents/gone": "mark_agents_gone"}[path]
        assert code == 403 and f"lacks the {permission} permission" in reply["error"], path
    without = cli(cluster, "agent", "drain", "node-0", "--master", cluster.address, token=None)
    assert without.returncode == 1 and "(401)" in without.stderr and "Bearer" in without.stderr
    forbidden = cli(cluster, "agent", "drain", "node-0", "--master", cluster.address)
    assert forbidden.returncode == 1 and "(403)" in forbidden.stderr and "drain_agents" in forbidden.stderr
    assert all(not a["deactivated"] for a in cluster.state()["agents"])
    assert "mesoslike_http_forbidden_total 6" in http_get(cluster.http + "/metrics")[2]
