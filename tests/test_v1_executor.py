"""Mesos's v1 executor API on a real agent (docs/mesos-api.rst, "Executor
API"): the test is the executor — the agent starts the executor's process
(a sleeper that never speaks) and the test speaks for it from outside its
container, with the executor's secret as its bearer token (as an executor
calling from elsewhere does); a v1 scheduler is on the other side. Calls
from inside the container with no token: tests/test_v1_executor_identity.py."""

from __future__ import annotations

import base64

import pytest

from test_v1_scheduler import Cluster, command_task, subscribed, until_state
from v1_helpers import EventStream, post
from waiting import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path)
    yield made
    made.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def launch_executor_task(cluster: Cluster, scheduler: EventStream, task_id: str = "t1") -> tuple[str, dict]:
    offer = scheduler.wait_for("OFFERS")["offers"]["offers"][0]
    task = command_task(offer, task_id, "")
    del task["command"]
    task["data"] = b64(b"for the executor\x00")
    task["executor"] = {"executor_id": {"value": "exec-1"}, "name": "exec-1", "command": {"value": "sleep 120"},
                        "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                                      {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}}]}
    assert cluster.call(scheduler, "ACCEPT", {"offer_ids": [offer["id"]], "operations": [
        {"type": "LAUNCH", "launch": {"task_infos": [task]}}]})[0] == 202
    framework_id = subscribed(scheduler)
    wait_until(lambda: cluster.agent.executor_secret(framework_id, "exec-1"), 20, "the executor started")
    return framework_id, offer


def as_executor(cluster: Cluster, framework_id: str) -> dict[str, str]:
    """The executor's own secret as a bearer token (the test is not in its container)."""
    return {"Authorization": f"Bearer {cluster.agent.executor_secret(framework_id, 'exec-1')}"}


def executor_call(cluster: Cluster, framework_id: str, kind: str, body: dict | None = None,
                  headers: dict | None = None) -> tuple[int, bytes]:
    call = {"type": kind, "framework_id": {"value": framework_id}, "executor_id": {"value": "exec-1"}}
    if body is not None:
        call[kind.lower()] = body
    status, _, answer = post(cluster.agent.core.http_address + "/api/v1/executor", call,
                             headers if headers is not None else as_executor(cluster, framework_id))
    return status, answer


def subscribe_executor(cluster: Cluster, framework_id: str, **subscribe) -> EventStream:
    return EventStream(cluster.agent.core.http_address + "/api/v1/executor",
                       {"type": "SUBSCRIBE", "framework_id": {"value": framework_id},
                        "executor_id": {"value": "exec-1"}, "subscribe": subscribe},
                       as_executor(cluster, framework_id))


def test_an_executor_subscribes_gets_its_task_and_its_updates_reach_the_scheduler(cluster):
    scheduler = cluster.subscribe(failover_timeout=0)
    framework_id, offer = launch_executor_task(cluster, scheduler)
    executor = subscribe_executor(cluster, framework_id)
    assert executor.status == 200
    subscribed_event = executor.wait_for("SUBSCRIBED")["subscribed"]
    assert subscribed_event["executor_info"]["executor_id"] == {"value": "exec-1"}
    assert subscribed_event["framework_info"]["id"] == {"value": framework_id}
    assert subscribed_event["agent_info"]["hostname"] == "node-a"
    task = executor.wait_for("LAUNCH")["launch"]["task"]
    assert task["task_id"] == {"value": "t1"} and base64.b64decode(task["data"]) == b"for the executor\x00"
    # an update with data (NUL bytes too), acknowledged to the executor once the agent has it
    data = b"\x00\x01running\xff"
    uuid = b64(bytes(range(16)))
    assert executor_call(cluster, framework_id, "UPDATE", {"status": {
        "task_id": {"value": "t1"}, "state": "TASK_RUNNING", "source": "SOURCE_EXECUTOR", "uuid": uuid,
        "data": b64(data), "message": "up", "healthy": True}})[0] == 202
    acknowledged = executor.wait_for("ACKNOWLEDGED")["acknowledged"]
    assert acknowledged == {"task_id": {"value": "t1"}, "uuid": uuid}
    status = until_state(cluster, scheduler, "t1", "TASK_RUNNING")
    assert base64.b64decode(status["data"]) == data
    assert (status["message"], status["healthy"], status["source"]) == ("up", True, "SOURCE_EXECUTOR")
    # the agent said nothing of its own about the executor's task (no TASK_STARTING)
    assert [e["update"]["status"]["state"] for e in scheduler.events if e.get("type") == "UPDATE"] == \
        ["TASK_RUNNING"]
    # messages both ways
    assert executor_call(cluster, framework_id, "MESSAGE", {"data": b64(b"up\x00")})[0] == 202
    message = scheduler.wait_for("MESSAGE")["message"]
    assert message["executor_id"] == {"value": "exec-1"} and base64.b64decode(message["data"]) == b"up\x00"
    assert cluster.call(scheduler, "MESSAGE", {"agent_id": offer["agent_id"], "executor_id": {"value": "exec-1"},
                                               "data": b64(b"down\x00")})[0] == 202
    assert base64.b64decode(executor.wait_for("MESSAGE")["message"]["data"]) == b"down\x00"
    # a kill goes to the executor, which reports the end
    assert cluster.call(scheduler, "KILL", {"task_id": {"value": "t1"}})[0] == 202
    assert executor.wait_for("KILL")["kill"]["task_id"] == {"value": "t1"}
    assert executor_call(cluster, framework_id, "UPDATE", {"status": {
        "task_id": {"value": "t1"}, "state": "TASK_KILLED", "uuid": b64(bytes(range(1, 17)))}})[0] == 202
    until_state(cluster, scheduler, "t1", "TASK_KILLED")
    assert executor_call(cluster, framework_id, "HEARTBEAT")[0] == 202
    # SHUTDOWN from the scheduler: the executor is told, then its process killed; executorLost (FAILURE)
    assert cluster.call(scheduler, "SHUTDOWN", {"executor_id": {"value": "exec-1"},
                                                "agent_id": offer["agent_id"]})[0] == 202
    executor.wait_for("SHUTDOWN")
    failure = scheduler.wait_for("FAILURE")["failure"]
    assert failure["executor_id"] == {"value": "exec-1"} and failure["agent_id"] == offer["agent_id"]
    assert "status" in failure   # killed: minus the signal
    wait_until(lambda: cluster.agent.executor_secret(framework_id, "exec-1") is None, 20, "the executor ended")
    scheduler.close()
    executor.close()


def test_an_executor_update_the_agent_refuses_comes_back_as_an_error_event(cluster):
    scheduler = cluster.subscribe(failover_timeout=0)
    framework_id, _ = launch_executor_task(cluster, scheduler)
    executor = subscribe_executor(cluster, framework_id)
    executor.wait_for("LAUNCH")
    assert executor_call(cluster, framework_id, "UPDATE", {"status": {
        "task_id": {"value": "not-mine"}, "state": "TASK_RUNNING", "uuid": b64(bytes(16))}})[0] == 202
    assert "not this executor's" in executor.wait_for("ERROR")["error"]["message"]
    scheduler.close()
    executor.close()


def test_executor_calls_mesos_refuses_are_refused_with_its_statuses(cluster):
    url = cluster.agent.core.http_address + "/api/v1/executor"
    scheduler = cluster.subscribe(failover_timeout=0)
    framework_id, _ = launch_executor_task(cluster, scheduler)
    assert post(url, None, method="GET", content_type=None)[0] == 405
    assert post(url, {"type": "UPDATE"}, content_type="text/plain")[0] == 415
    assert post(url, b"[", content_type="application/json")[0] == 400
    assert post(url, {"type": "SUBSCRIBE"})[0] == 400                                 # no ids
    assert post(url, {"type": "LAUNCH", "framework_id": {"value": framework_id},
                      "executor_id": {"value": "exec-1"}})[0] == 400                  # not a call
    status, _, body = post(url, {"type": "SUBSCRIBE", "framework_id": {"value": framework_id},
                                 "executor_id": {"value": "nobody"}})
    assert (status, body) == (400, b"Executor cannot be found")
    # before it subscribed
    assert executor_call(cluster, framework_id, "UPDATE", {"status": {"task_id": {"value": "t1"},
                                                                      "state": "TASK_RUNNING"}}) == \
        (403, b"Executor is not subscribed")
    # a token that is not the executor's
    assert executor_call(cluster, framework_id, "SUBSCRIBE", {}, {"Authorization": "Bearer nope"})[0] == 403
    executor = subscribe_executor(cluster, framework_id)
    executor.wait_for("SUBSCRIBED")
    for body in ({"status": {"state": "TASK_RUNNING"}}, {"status": {"task_id": {"value": "t1"}, "state": "NOPE"}},
                 {"status": {"task_id": {"value": "t1"}, "state": "TASK_RUNNING", "data": "%%"}}, None):
        assert executor_call(cluster, framework_id, "UPDATE", body)[0] == 400, body
    assert executor_call(cluster, framework_id, "MESSAGE", {"data": 3})[0] == 400
    assert post(url, {"type": "SUBSCRIBE", "framework_id": {"value": framework_id},
                      "executor_id": {"value": "exec-1"}}, {"Accept": "text/html",
                                                            **as_executor(cluster, framework_id)})[0] == 406
    # subscribing again (a reconnection) ends the older stream
    again = subscribe_executor(cluster, framework_id, unacknowledged_tasks=[{"task_id": {"value": "t1"}}])
    again.wait_for("SUBSCRIBED")
    executor.wait_ended()
    scheduler.close()
    again.close()
