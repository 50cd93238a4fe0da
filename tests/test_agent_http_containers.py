"""The agent's ``GET /containers`` (issue 24 item 5), as Mesos's agent has
it: an entry per running container — a task's and a custom executor's —
with its framework and executor ids, Mesos's ``ContainerStatus`` and the
``ResourceStatistics`` ``/monitor/statistics`` measures; a token of the
cluster's credentials needed, and only the containers of the frameworks
whose sandboxes ``access_sandboxes`` lets the caller read shown. A real
agent runtime over real HTTP on 127.0.0.1, a fake master."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from agent_helpers import FakeMaster
from mesoslike.agent.executor import path_component
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.credentials import parse_credentials
from mesoslike.resources import Resources
from mesoslike.transport import CurveKeys
from mesoslike.wire import messages as m
from mesoslike.wire.types import ExecutorInfo, FrameworkInfo, TaskInfo, TaskState
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)

FW_A = FrameworkInfo(name="a", id="fw-a", principal="fwA")
FW_B = FrameworkInfo(name="b", id="fw-b", principal="fwB")
TOKENS = {"ops": "ops-token-0123456789", "fwA": "fwA-token-0123456789", "fwB": "fwB-token-0123456789"}
#: a custom executor that never registers (its process is what matters here), of fw-a
EXECUTOR = ExecutorInfo("exec-a", "exec sleep 60", Resources.parse("cpus:0.25;mem:32"), name="the executor of a")
EXECUTOR_RUN = EXECUTOR.run_id()


def get(url: str, token: str | None) -> tuple[int, object]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def containers(http: str, token: str | None = TOKENS["ops"], **query: str) -> list[dict]:
    status, body = get(f"{http}/containers" + (f"?{urllib.parse.urlencode(query)}" if query else ""), token)
    assert status == 200, (status, body)
    assert isinstance(body, list)
    return body


def by_id(entries: list[dict]) -> dict[str, dict]:
    return {entry["container_id"]: entry for entry in entries}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """An agent with the cluster's credentials (an operator, fwA and fwB with tokens), running fwA's task
    ``a1`` and custom executor ``exec-a`` and fwB's task ``b1`` (one for the module; the test that ends a
    task launches its own)."""
    keys = {name: CurveKeys.generate().public.decode() for name in TOKENS}
    credentials = parse_credentials({"principals": {
        "ops": {"key": keys["ops"], "kinds": ["operator"], "token": TOKENS["ops"]},
        "fwA": {"key": keys["fwA"], "kinds": ["framework"], "token": TOKENS["fwA"]},
        "fwB": {"key": keys["fwB"], "kinds": ["framework"], "token": TOKENS["fwB"]}}})
    master = FakeMaster()
    work_dir = tmp_path_factory.mktemp("containers") / "work"
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:2;mem:512;disk:10", hostname="web",
                                         work_dir=work_dir, isolation="posix", credentials=credentials,
                                         # both principals' tasks run as the agent's user (whoever runs the test)
                                         shared_task_users=("*",))).start()
    try:
        master.register()
        for framework, task_id in ((FW_A, "a1"), (FW_B, "b1")):
            master.send(m.RunTask(framework, TaskInfo(task_id, "agent-1", "sleep 60",
                                                      Resources.parse("cpus:0.5;mem:64"))))
            assert [master.update(task_id).state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
        master.send(m.RunTask(FW_A, TaskInfo("a2", "agent-1", "", Resources.parse("cpus:0.25;mem:32"),
                                             executor=EXECUTOR)))
        wait_until(lambda: runtime.executor.pid("fw-a", EXECUTOR_RUN), 20, "the executor's process to start")
        yield runtime, runtime.http_address, master
    finally:
        runtime.stop()
        master.close()


def test_containers_lists_each_running_container_with_its_ids_status_and_statistics(served):
    runtime, http, _ = served
    wait_until(lambda: len(containers(http)) == 3, 10, "the three containers to be listed")
    entries = by_id(containers(http))
    executor_id = f"fw-a/{path_component(EXECUTOR_RUN)}"   # as its sandbox is named (its run id is not a file name)
    assert set(entries) == {"fw-a/a1", "fw-b/b1", executor_id}
    # a task's own command: its container named as its sandbox, its executor Mesos's command executor's
    task = entries["fw-a/a1"]
    assert {key: task[key] for key in ("framework_id", "executor_id", "executor_name", "source")} == \
        {"framework_id": "fw-a", "executor_id": "a1", "executor_name": "Command Executor (Task: a1)", "source": "a1"}
    state_task = next(t for t in get(f"{http}/state", TOKENS["ops"])[1]["tasks"] if t["id"] == "a1")
    assert task["container_id"] == state_task["sandbox_path"]
    assert task["status"] == {"container_id": {"value": "fw-a/a1"}, "executor_pid": runtime.executor.pid("fw-a", "a1"),
                              "network_infos": [{"ip_addresses": [{"ip_address": "127.0.0.1"}]}],
                              "isolators": state_task["isolation"], "image": ""}
    statistics = task["statistics"]
    assert statistics["cpus_limit"] == 0.5 and statistics["mem_limit_bytes"] == 64 * 1024 * 1024
    assert statistics["timestamp"] > 0 and statistics["mem_rss_bytes"] > 0
    assert {"cpus_user_time_secs", "cpus_system_time_secs", "processes"} <= set(statistics)
    # the same numbers /monitor/statistics serves
    monitored = next(s for s in get(f"{http}/monitor/statistics", TOKENS["ops"])[1] if s["task_id"] == "a1")
    assert {k: monitored["statistics"][k] for k in ("cpus_limit", "mem_limit_bytes")} == \
        {k: statistics[k] for k in ("cpus_limit", "mem_limit_bytes")}
    # a custom executor's container: its own ids and name, its process
    executor = entries[executor_id]
    assert (executor["framework_id"], executor["executor_id"], executor["executor_name"]) == \
        ("fw-a", "exec-a", "the executor of a")
    assert executor["status"]["executor_pid"] == runtime.executor.pid("fw-a", EXECUTOR_RUN)
    # its container's limits: its own resources and its task a2's
    assert (executor["statistics"]["cpus_limit"], executor["statistics"]["mem_limit_bytes"]) == (0.5, 64 * 1024 * 1024)
    # ?container_id= picks one (none for an unknown id); Mesos's show_nested and show_standalone are taken
    assert [e["container_id"] for e in containers(http, container_id="fw-b/b1")] == ["fw-b/b1"]
    assert containers(http, container_id="fw-b/nope") == []
    assert {e["container_id"] for e in containers(http, show_nested="true", show_standalone="true")} == set(entries)


def test_containers_needs_a_token_of_the_clusters_credentials(served):
    _, http, _ = served
    for token in (None, "wrong-token"):
        status, body = get(f"{http}/containers", token)
        assert status == 401 and "token" in body["error"], (token, status, body)
    assert get(f"{http}/containers", TOKENS["fwB"])[0] == 200


def test_a_principal_sees_only_the_containers_of_the_frameworks_whose_sandboxes_it_may_read(served):
    _, http, _ = served
    wait_until(lambda: len(containers(http)) == 3, 10, "the three containers to be listed")
    assert {e["framework_id"] for e in containers(http, TOKENS["ops"])} == {"fw-a", "fw-b"}
    # the default access_sandboxes: a framework principal its own frameworks' only — the others left out
    mine = containers(http, TOKENS["fwA"])
    assert {(e["framework_id"], e["executor_id"]) for e in mine} == {("fw-a", "a1"), ("fw-a", "exec-a")}
    assert [(e["framework_id"], e["executor_id"]) for e in containers(http, TOKENS["fwB"])] == [("fw-b", "b1")]
    assert containers(http, TOKENS["fwB"], container_id="fw-a/a1") == []   # not an error: nothing to show


def test_a_tasks_container_is_gone_once_the_task_ended(served):
    _, http, fake = served
    # a task of its own, so that the others stay
    fake.send(m.RunTask(FW_B, TaskInfo("b2", "agent-1", "sleep 60", Resources.parse("cpus:0.25;mem:32"))))
    assert [fake.update("b2").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
    wait_until(lambda: "fw-b/b2" in by_id(containers(http)), 10, "b2's container to be listed")
    assert "fw-b/b2" in by_id(containers(http, TOKENS["fwB"]))
    fake.send(m.KillTask("fw-b", "b2"))
    assert fake.updates_until_terminal("b2")[-1].state == TaskState.KILLED
    assert "fw-b/b2" not in by_id(containers(http)) and "fw-b/b1" in by_id(containers(http))
