"""Mesos's v1 operator API on a real master (docs/mesos-api.rst, "Operator
API"): the calls tools use, answered in Mesos's shapes from the master's
state, the master's event stream, ``GET /version``, and the refusals."""

from __future__ import annotations

import json

import pytest

from test_v1_scheduler import Cluster, command_task, subscribed, until_state
from v1_helpers import EventStream, basic, post

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path)
    yield made
    made.close()


def operator(cluster: Cluster, kind: str, path: str = "/api/v1", headers: dict | None = None) -> dict:
    status, answer_headers, body = post(cluster.url + path, {"type": kind}, headers)
    assert status == 200, (kind, status, body)
    assert answer_headers["content-type"] == "application/json"
    return json.loads(body)


def test_the_read_calls_answer_in_mesos_shapes(cluster):
    scheduler = cluster.subscribe(failover_timeout=0)
    offer = scheduler.wait_for("OFFERS")["offers"]["offers"][0]
    cluster.call(scheduler, "ACCEPT", {"offer_ids": [offer["id"]], "operations": [
        {"type": "LAUNCH", "launch": {"task_infos": [command_task(offer, "t1", "sleep 60")]}}]})
    until_state(cluster, scheduler, "t1", "TASK_RUNNING")
    framework_id = subscribed(scheduler)
    assert operator(cluster, "GET_HEALTH") == {"type": "GET_HEALTH", "get_health": {"healthy": True}}
    assert operator(cluster, "GET_VERSION")["get_version"]["version_info"]["version"] == "1.11.0"
    (agent,) = operator(cluster, "GET_AGENTS")["get_agents"]["agents"]
    assert agent["agent_info"]["hostname"] == "node-a" and agent["active"]
    assert {r["name"] for r in agent["total_resources"]} >= {"cpus", "mem"}
    assert any(r["name"] == "cpus" and r["scalar"]["value"] == pytest.approx(0.1) for r in agent["allocated_resources"])
    (framework,) = operator(cluster, "GET_FRAMEWORKS")["get_frameworks"]["frameworks"]
    assert framework["framework_info"]["id"] == {"value": framework_id} and framework["connected"]
    (task,) = operator(cluster, "GET_TASKS")["get_tasks"]["tasks"]
    assert (task["task_id"], task["framework_id"], task["state"]) == ({"value": "t1"}, {"value": framework_id},
                                                                       "TASK_RUNNING")
    assert task["agent_id"] == offer["agent_id"] and task["statuses"][0]["state"] == "TASK_RUNNING"
    state = operator(cluster, "GET_STATE")["get_state"]
    assert set(state) == {"get_tasks", "get_executors", "get_frameworks", "get_agents"}
    assert state["get_tasks"]["tasks"] == [task]
    assert operator(cluster, "GET_EXECUTORS")["get_executors"] == {"executors": []}
    assert operator(cluster, "GET_MASTER")["get_master"]["master_info"]["id"] == cluster.master.info.id
    # pymesos's operator driver posts to /api/v1/operator
    assert operator(cluster, "GET_HEALTH", "/api/v1/operator")["get_health"]["healthy"]
    status, _, body = post(cluster.url + "/version", None, method="GET", content_type=None)
    assert status == 200 and json.loads(body)["version"] == "1.11.0"
    scheduler.close()


def test_subscribe_streams_the_state_then_its_changes(cluster):
    events = EventStream(cluster.url + "/api/v1", {"type": "SUBSCRIBE"})
    assert events.status == 200
    first = events.wait_for("SUBSCRIBED")["subscribed"]
    assert [a["agent_info"]["hostname"] for a in first["get_state"]["get_agents"]["agents"]] == ["node-a"]
    scheduler = cluster.subscribe(failover_timeout=0)
    added = events.wait_for("FRAMEWORK_ADDED")["framework_added"]["framework"]
    assert added["framework_info"]["id"] == {"value": subscribed(scheduler)}
    offer = scheduler.wait_for("OFFERS")["offers"]["offers"][0]
    cluster.call(scheduler, "ACCEPT", {"offer_ids": [offer["id"]], "operations": [
        {"type": "LAUNCH", "launch": {"task_infos": [command_task(offer, "t1", "sleep 60")]}}]})
    until_state(cluster, scheduler, "t1", "TASK_RUNNING")
    assert events.wait_for("TASK_ADDED")["task_added"]["task"]["task_id"] == {"value": "t1"}
    # the stream compares the state every second: the task is seen added, then RUNNING (perhaps at once)
    events.wait_for(lambda e: e.get("type") == "TASK_UPDATED" and e["task_updated"]["state"] == "TASK_RUNNING"
                    or e.get("type") == "TASK_ADDED" and e["task_added"]["task"]["state"] == "TASK_RUNNING")
    cluster.call(scheduler, "KILL", {"task_id": {"value": "t1"}})
    until_state(cluster, scheduler, "t1", "TASK_KILLED")
    update = events.wait_for(lambda e: e.get("type") == "TASK_UPDATED" and e["task_updated"]["state"] == "TASK_KILLED")
    assert update["task_updated"]["status"]["task_id"] == {"value": "t1"}
    assert cluster.call(scheduler, "TEARDOWN")[0] == 202
    events.wait_for("FRAMEWORK_REMOVED")
    events.close()


def test_operator_refusals(cluster, tmp_path):
    url = cluster.url + "/api/v1"
    assert post(url, None, method="GET", content_type=None)[0] == 405
    assert post(url, {"type": "GET_STATE"}, content_type="application/x-protobuf")[0] == 415
    assert post(url, b"nope")[0] == 400
    assert post(url, {"type": "GET_FLAGS"})[0] == 501          # Mesos has it; mesoslike does not answer it
    assert post(url, {"type": "GET_STATE"}, {"Accept": "application/x-protobuf"})[0] == 406


def test_with_http_auth_all_the_operator_api_asks_for_credentials(tmp_path):
    from mesoslike.credentials import load_credentials
    from mesoslike.master.records import MasterConfig
    from mesoslike.master.runtime import MasterRuntime
    from mesoslike.master.settings import MasterSettings
    from security_helpers import SecuredKeys
    keys = SecuredKeys(tmp_path)
    master = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=0, config=MasterConfig(),
                                          credentials=load_credentials(str(keys.credentials)), keys=keys.keys("master"),
                                          http_auth="all"))
    master.start()
    try:
        url = master.http_address + "/api/v1"
        status, headers, _ = post(url, {"type": "GET_HEALTH"})
        assert status == 401 and "Basic" in headers["www-authenticate"]
        assert post(url, {"type": "GET_HEALTH"}, basic("ops", keys.token))[0] == 200
        assert post(url, {"type": "GET_HEALTH"}, {"Authorization": f"Bearer {keys.token}"})[0] == 200
    finally:
        master.stop()
