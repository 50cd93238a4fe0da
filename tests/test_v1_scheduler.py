"""Mesos's v1 scheduler API on a real master and agent (docs/mesos-api.rst,
"Scheduler API"): every call, answered as Mesos answers it, and every
refusal with Mesos's HTTP status."""

from __future__ import annotations

import base64
import getpass

import pytest

from mesoslike.acl import Credentials
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.credentials import load_credentials
from mesoslike.driver import Scheduler, SchedulerDriver
from mesoslike.master.records import MasterConfig
from mesoslike.master.runtime import MasterRuntime
from mesoslike.master.settings import MasterSettings
from mesoslike.wire.types import FrameworkInfo
from security_helpers import SecuredKeys
from v1_helpers import EventStream, basic, post
from waiting import wait_until

pytestmark = pytest.mark.timeout(120)

FAST = dict(heartbeat_interval=0.5, allocation_interval=0.1, ping_interval=0.5)


class Cluster:
    def __init__(self, tmp_path, credentials: Credentials | None = None, keys: SecuredKeys | None = None,
                 agent: bool = True, master_options: dict | None = None, **agent_options) -> None:
        self.keys = keys
        self.master = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=0,
                                                   config=MasterConfig(**FAST, **(master_options or {})), credentials=credentials,
                                                   keys=keys.keys("master") if keys else None))
        self.master.start()
        self.url = self.master.http_address
        self.agent = None
        if agent:
            self.agent = AgentRuntime(AgentSettings(master=self.master.address, resources="cpus:2;mem:1024",
                                                    hostname="node-a", work_dir=tmp_path / "agent",
                                                    register_backoff=0.2, register_backoff_max=0.5,
                                                    keys=keys.keys("agent1") if keys else None,
                                                    master_key=keys.master_public if keys else None,
                                                    **agent_options)).start()
            wait_until(lambda: self.master.state()["agents"], 20, "the agent registered")

    def subscribe(self, name: str = "v1", headers: dict | None = None, **info) -> EventStream:
        framework = {"name": name, "user": getpass.getuser(), **info}
        call = {"type": "SUBSCRIBE", "subscribe": {"framework_info": framework}}
        if "id" in info:
            call["framework_id"] = info["id"]
        return EventStream(self.url + "/api/v1/scheduler", call, headers)

    def call(self, stream: EventStream, kind: str, body: dict | None = None, headers: dict | None = None,
             framework_id: str | None = None) -> tuple[int, bytes]:
        framework_id = framework_id or subscribed(stream)
        call = {"type": kind, "framework_id": {"value": framework_id}}
        if body is not None:
            call[kind.lower()] = body
        status, _, answer = post(self.url + "/api/v1/scheduler", call,
                                 {"Mesos-Stream-Id": stream.stream_id, **(headers or {})})
        return status, answer

    def close(self) -> None:
        if self.agent is not None:
            self.agent.stop()
        self.master.stop()


def subscribed(stream: EventStream) -> str:
    return stream.wait_for("SUBSCRIBED")["subscribed"]["framework_id"]["value"]


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path)
    yield made
    made.close()


def command_task(offer: dict, task_id: str, command: str) -> dict:
    return {"task_id": {"value": task_id}, "agent_id": offer["agent_id"], "name": task_id,
            "command": {"value": command},
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                          {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}}]}


def until_state(cluster: Cluster, stream: EventStream, task_id: str, state: str | tuple[str, ...],
                headers: dict | None = None) -> dict:
    """Acknowledge the task's updates, as a scheduler does, until one says
    ``state`` (or one of these states); that status."""
    acknowledged: set[str] = set()

    def reached():
        for event in list(stream.events):
            status = event["update"]["status"] if event.get("type") == "UPDATE" else None
            if status is None or status["task_id"]["value"] != task_id:
                continue
            if status.get("uuid") and status["uuid"] not in acknowledged:
                acknowledged.add(status["uuid"])
                assert cluster.call(stream, "ACKNOWLEDGE", {"agent_id": status["agent_id"],
                                                            "task_id": status["task_id"],
                                                            "uuid": status["uuid"]}, headers)[0] == 202
            if status["state"] == state or status["state"] in state:
                return status
        return None
    return wait_until(reached, 20, f"{task_id} {state}", diagnostics=lambda: repr(stream.events[-5:]))


def update_of(task_id: str, state: str):
    return lambda event: event.get("type") == "UPDATE" and event["update"]["status"]["task_id"]["value"] == task_id \
        and event["update"]["status"]["state"] == state


# ------------------------------------------------------------------ the calls
def test_subscribe_answers_a_recordio_event_stream_with_its_stream_id(cluster):
    stream = cluster.subscribe(failover_timeout=0)
    assert stream.status == 200 and stream.headers["content-type"] == "application/json"
    assert stream.headers["transfer-encoding"] == "chunked" and len(stream.stream_id) == 36
    event = stream.wait_for("SUBSCRIBED")
    assert event["subscribed"]["heartbeat_interval_seconds"] == 0.5
    master_info = event["subscribed"]["master_info"]
    assert master_info["port"] == cluster.master._http.port
    # Mesos's MasterInfo: the IPv4 address also as its uint32 (network order read little-endian), and the pid
    assert master_info["address"]["ip"] == "127.0.0.1" and master_info["ip"] == 0x0100007F
    assert master_info["pid"] == f"master@127.0.0.1:{cluster.master._http.port}"
    offers = stream.wait_for("OFFERS")["offers"]["offers"]
    assert offers[0]["hostname"] == "node-a" and {r["name"] for r in offers[0]["resources"]} >= {"cpus", "mem"}
    stream.wait_for("HEARTBEAT", timeout=5)
    (framework,) = cluster.master.state()["frameworks"]
    assert framework["name"] == "v1" and framework["connected"]
    stream.close()


def test_accept_acknowledge_kill_reconcile_and_teardown(cluster):
    stream = cluster.subscribe(failover_timeout=0)
    offer = stream.wait_for("OFFERS")["offers"]["offers"][0]
    status, _ = cluster.call(stream, "ACCEPT", {
        "offer_ids": [offer["id"]], "filters": {"refuse_seconds": 1},
        "operations": [{"type": "LAUNCH", "launch": {"task_infos": [command_task(offer, "t1", "sleep 60")]}}]})
    assert status == 202
    running = until_state(cluster, stream, "t1", "TASK_RUNNING")   # acknowledging each update (ACKNOWLEDGE)
    assert running["uuid"] and running["agent_id"] == offer["agent_id"]
    assert running["container_status"]["network_infos"][0]["ip_addresses"][0]["ip_address"] == "127.0.0.1"
    # implicit reconciliation: the master's word, with no uuid (nothing to acknowledge)
    assert cluster.call(stream, "RECONCILE", {"tasks": []})[0] == 202
    answer = stream.wait_for(lambda e: e.get("type") == "UPDATE" and "uuid" not in e["update"]["status"])
    assert answer["update"]["status"]["state"] == "TASK_RUNNING"
    # explicit: the tasks named (one the master never heard of too)
    assert cluster.call(stream, "RECONCILE", {"tasks": [{"task_id": {"value": "t1"}, "agent_id": offer["agent_id"]},
                                                        {"task_id": {"value": "never"}}]})[0] == 202
    unknown = stream.wait_for(lambda e: e.get("type") == "UPDATE" and e["update"]["status"]["task_id"] ==
                              {"value": "never"})["update"]["status"]
    assert unknown["state"] in ("TASK_LOST", "TASK_UNKNOWN", "TASK_DROPPED", "TASK_GONE") and "uuid" not in unknown
    wait_until(lambda: sum(e.get("type") == "UPDATE" and "uuid" not in e["update"]["status"]
                           and e["update"]["status"]["task_id"] == {"value": "t1"} for e in list(stream.events)) >= 2,
               10, "t1's explicit answer")
    assert cluster.call(stream, "KILL", {"task_id": {"value": "t1"}, "agent_id": offer["agent_id"]})[0] == 202
    until_state(cluster, stream, "t1", "TASK_KILLED")
    assert cluster.call(stream, "TEARDOWN")[0] == 202
    stream.wait_ended()   # removed: the master ends the stream (an ERROR event says why)
    assert "ERROR" in stream.types()
    wait_until(lambda: not cluster.master.state()["frameworks"], 10, "the framework removed")


def test_decline_suppress_revive_request_and_the_calls_without_effect(cluster):
    stream = cluster.subscribe(failover_timeout=0)
    offer = stream.wait_for("OFFERS")["offers"]["offers"][0]
    assert cluster.call(stream, "DECLINE", {"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 3600}})[0] == 202
    assert cluster.call(stream, "SUPPRESS")[0] == 202
    wait_until(lambda: cluster.master.state()["frameworks"][0]["suppressed_roles"] == ["*"], 10, "suppressed")
    assert sum(t == "OFFERS" for t in stream.types()) == 1   # declined for an hour: no offer meanwhile
    assert cluster.call(stream, "REVIVE")[0] == 202    # filters cleared: offered again
    wait_until(lambda: sum(t == "OFFERS" for t in stream.types()) >= 2, 10, "a new offer after REVIVE")
    assert cluster.master.state()["frameworks"][0]["suppressed_roles"] == []
    for kind, body in (("REQUEST", {"requests": [{"agent_id": offer["agent_id"]}]}),
                       ("ACCEPT_INVERSE_OFFERS", {"inverse_offer_ids": [{"value": "x"}]}),
                       ("DECLINE_INVERSE_OFFERS", {"inverse_offer_ids": [{"value": "x"}]}),
                       ("RECONCILE_OPERATIONS", {"operations": []}),
                       ("ACKNOWLEDGE_OPERATION_STATUS", {"uuid": "AAAA", "operation_id": {"value": "o"}})):
        assert cluster.call(stream, kind, body)[0] == 202, kind
    stream.close()


def test_message_shutdown_and_update_framework(cluster):
    stream = cluster.subscribe(failover_timeout=0)
    offer = stream.wait_for("OFFERS")["offers"]["offers"][0]
    cluster.call(stream, "ACCEPT", {"offer_ids": [offer["id"]], "operations": [
        {"type": "LAUNCH", "launch": {"task_infos": [command_task(offer, "t1", "sleep 60")]}}]})
    until_state(cluster, stream, "t1", "TASK_RUNNING")
    # to a command task's executor (its task's id): into its sandbox's messages file
    data = b"hello\x00there"
    assert cluster.call(stream, "MESSAGE", {"agent_id": offer["agent_id"], "executor_id": {"value": "t1"},
                                            "data": base64.b64encode(data).decode()})[0] == 202
    messages = next((cluster.agent.work_dir / "sandboxes").glob("*/t1*")) / "messages"
    wait_until(lambda: messages.exists() and data in messages.read_bytes(), 10, "the message in the sandbox")
    assert cluster.call(stream, "SHUTDOWN", {"executor_id": {"value": "none"}, "agent_id": offer["agent_id"]})[0] \
        == 202   # no such executor: nothing to do, as in Mesos
    framework_id = subscribed(stream)
    status, _ = cluster.call(stream, "UPDATE_FRAMEWORK", {"framework_info": {
        "id": {"value": framework_id}, "name": "renamed", "user": getpass.getuser(), "failover_timeout": 7,
        "labels": {"labels": [{"key": "team", "value": "a"}]}}})
    assert status == 200
    wait_until(lambda: cluster.master.state()["frameworks"][0]["name"] == "renamed", 10, "the new name in /state")
    (framework,) = cluster.master.state()["frameworks"]
    assert framework["failover_timeout"] == 7 and framework["labels"] == [{"key": "team", "value": "a"}]
    # a role change: refused as the call's answer (Mesos answers UPDATE_FRAMEWORK synchronously), nothing changed
    status, answer = cluster.call(stream, "UPDATE_FRAMEWORK", {"framework_info": {
        "id": {"value": framework_id}, "name": "again", "user": getpass.getuser(), "roles": ["other"]}})
    assert status == 400 and b"keeps the role it subscribed in" in answer
    assert cluster.master.state()["frameworks"][0]["name"] == "renamed"
    assert "ERROR" not in stream.types()
    stream.close()


def test_a_closed_stream_disconnects_its_framework_at_once_and_a_new_one_takes_over(cluster):
    stream = cluster.subscribe(failover_timeout=60)
    framework_id = subscribed(stream)
    again = cluster.subscribe(id={"value": framework_id}, failover_timeout=60)
    assert subscribed(again) == framework_id
    stream.wait_ended()   # the older stream: Mesos's "Framework failed over"
    assert stream.wait_for("ERROR")["error"]["message"] == "Framework failed over"
    assert cluster.call(stream, "REVIVE", framework_id=framework_id)[0] == 400   # the old stream id is void
    again.close()
    wait_until(lambda: not cluster.master.state()["frameworks"][0]["connected"], 5, "disconnected at once")
    status, answer = cluster.call(again, "REVIVE", framework_id=framework_id)
    assert (status, answer) == (403, b"Framework is not subscribed")


def test_an_unknown_framework_id_is_accepted_for_its_subscriber(cluster):
    stream = cluster.subscribe(id={"value": "kept-in-my-database"}, failover_timeout=60)
    assert subscribed(stream) == "kept-in-my-database"
    fresh = cluster.subscribe(name="other")
    assert subscribed(fresh) not in ("kept-in-my-database", "")
    stream.close()
    fresh.close()


# ------------------------------------------------------------------ refusals
def test_requests_mesos_refuses_are_refused_with_its_statuses(cluster):
    url = cluster.url + "/api/v1/scheduler"
    subscribe = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"name": "x", "user": "nobody"}}}
    assert post(url, None, method="GET", content_type=None)[0] == 405
    assert post(url, subscribe, content_type=None)[0] == 400                           # no Content-Type
    assert post(url, subscribe, content_type="text/plain")[0] == 415
    assert post(url, b"\x08\x01", content_type="application/x-protobuf")[0] == 415     # protobuf: not spoken
    assert post(url, b"{not json")[0] == 400
    assert post(url, [1, 2])[0] == 400
    assert post(url, {"subscribe": {}})[0] == 400                                       # no type
    assert post(url, {"type": "UNKNOWN", "framework_id": {"value": "f"}})[0] == 400     # no such framework
    assert post(url, subscribe, {"Accept": "application/x-protobuf"})[0] == 406
    assert post(url, subscribe, {"Mesos-Stream-Id": "x"})[0] == 400
    assert post(url, {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "x"}}})[0] == 400   # no name
    assert post(url, {"type": "SUBSCRIBE", "framework_id": {"value": "a"},
                      "subscribe": {"framework_info": {"name": "x", "id": {"value": "b"}}}})[0] == 400
    status, _, body = post(url, {"type": "REVIVE", "framework_id": {"value": "nobody-s"}})
    assert (status, body) == (400, b"Framework cannot be found")
    stream = cluster.subscribe()
    framework_id = subscribed(stream)
    revive = {"type": "REVIVE", "framework_id": {"value": framework_id}}
    assert post(url, revive)[2] == b"All non-subscribe calls should include the 'Mesos-Stream-Id' header"
    assert post(url, revive, {"Mesos-Stream-Id": "another"})[0] == 400
    assert post(url, {"type": "NO_SUCH_CALL", "framework_id": {"value": framework_id}},
                {"Mesos-Stream-Id": stream.stream_id})[0] == 400
    assert post(url, {"type": "UNKNOWN", "framework_id": {"value": framework_id}},
                {"Mesos-Stream-Id": stream.stream_id})[0] == 501
    for kind, body in (("ACCEPT", None), ("ACCEPT", {"offer_ids": "x"}), ("DECLINE", {"offer_ids": [{}]}),
                       ("KILL", {}), ("ACKNOWLEDGE", {"agent_id": {"value": "a"}, "task_id": {"value": "t"}}),
                       ("MESSAGE", {"agent_id": {"value": "a"}, "executor_id": {"value": "e"}, "data": "%%"}),
                       ("UPDATE_FRAMEWORK", {"framework_info": {"name": "n", "id": {"value": "other"}}}),
                       ("ACCEPT", {"offer_ids": [{"value": "o"}], "operations": [{"type": "CREATE"}]})):
        assert cluster.call(stream, kind, body)[0] == 400, (kind, body)
    stream.close()


def test_a_framework_on_zeromq_is_not_reachable_over_http(cluster):
    class Quiet(Scheduler):
        pass
    driver = SchedulerDriver(Quiet(), FrameworkInfo("native"), cluster.master.address)
    driver.start()
    try:
        wait_until(lambda: driver.framework_id, 10, "the native framework subscribed")
        status, _, body = post(cluster.url + "/api/v1/scheduler",
                               {"type": "REVIVE", "framework_id": {"value": driver.framework_id}},
                               {"Mesos-Stream-Id": "00000000-0000-0000-0000-000000000000"})
        assert (status, body) == (403, b"Framework is not connected via HTTP")
    finally:
        driver.stop()


# ------------------------------------------------------------ identity, ACLs
@pytest.fixture
def secured(tmp_path):
    keys = SecuredKeys(tmp_path)
    made = Cluster(tmp_path, load_credentials(str(keys.credentials)), keys)
    yield made
    made.close()


def test_http_basic_with_the_principals_token_or_a_bearer_token_identify_a_framework(secured):
    keys = secured.keys
    assert secured.subscribe(failover_timeout=0).status == 401                         # nobody
    assert secured.subscribe(headers=basic("fwA", "wrong")).status == 401
    assert secured.subscribe(headers=basic("fwA", keys.framework_tokens["fwB"])).status == 401   # not its own
    refused = secured.subscribe(headers=basic("ops", keys.token))    # an operator: no register_frameworks
    assert refused.status == 403 and b"register_frameworks" in refused.body
    stream = secured.subscribe(headers=basic("fwA", keys.framework_tokens["fwA"]), failover_timeout=60)
    framework_id = subscribed(stream)
    assert secured.master.state()["frameworks"][0]["id"] == framework_id
    # another principal may neither call for it nor take its id
    status, body = secured.call(stream, "REVIVE", headers=basic("fwB", keys.framework_tokens["fwB"]))
    assert status == 400 and b"does not match principal 'fwA'" in body
    thief = secured.subscribe(headers={"Authorization": f"Bearer {keys.framework_tokens['fwB']}"},
                              id={"value": framework_id})
    assert "belongs to another principal" in thief.wait_for("ERROR")["error"]["message"]
    thief.wait_ended()
    # its own principal, by bearer token, with the stream's id
    assert secured.call(stream, "REVIVE", headers={"Authorization": f"Bearer {keys.framework_tokens['fwA']}"})[0] \
        == 202
    # an id the master never gave: bound to its first subscriber, refused to another
    mine = secured.subscribe(headers=basic("fwA", keys.framework_tokens["fwA"]), id={"value": "my-own"})
    assert subscribed(mine) == "my-own"
    taken = secured.subscribe(headers=basic("fwB", keys.framework_tokens["fwB"]), id={"value": "my-own"})
    assert "belongs to another principal" in taken.wait_for("ERROR")["error"]["message"]
    stream.close()
    mine.close()


def test_the_run_tasks_acl_holds_for_a_v1_framework_as_on_zeromq(secured):
    """As tests/test_security_master.py's run_tasks test: a user not granted
    to the principal (root, unless granted) gets TASK_ERROR, nothing runs."""
    keys = secured.keys
    user = "root" if "root" not in keys.users else "daemon"
    stream = secured.subscribe(headers=basic("fwA", keys.framework_tokens["fwA"]), user=user, failover_timeout=0)
    offer = stream.wait_for("OFFERS")["offers"]["offers"][0]
    assert secured.call(stream, "ACCEPT", {"offer_ids": [offer["id"]], "operations": [
        {"type": "LAUNCH", "launch": {"task_infos": [command_task(offer, "t1", "id")]}}]},
        basic("fwA", keys.framework_tokens["fwA"]))[0] == 202
    status = stream.wait_for("UPDATE")["update"]["status"]
    assert (status["task_id"], status["state"], status["reason"]) == ({"value": "t1"}, "TASK_ERROR",
                                                                      "REASON_TASK_UNAUTHORIZED")
    assert "lacks the run_tasks permission" in status["message"]
    assert secured.agent.core.tasks() == []
    stream.close()


# ------------------------------------------------------- RESCIND and FAILURE
@pytest.mark.parametrize("how", ["offer_timeout", "agent_lost"])
def test_offers_are_rescinded_and_a_lost_agent_is_a_failure_event(tmp_path, how):
    options = {"offer_timeout": 1.0} if how == "offer_timeout" else {"max_agent_ping_timeouts": 2}
    made = Cluster(tmp_path, master_options=options)
    try:
        stream = made.subscribe(failover_timeout=0)
        offer = stream.wait_for("OFFERS")["offers"]["offers"][0]
        if how == "agent_lost":
            made.agent.stop()   # it answers no more pings: removed after two
            made.agent = None
        assert stream.wait_for("RESCIND")["rescind"] == {"offer_id": offer["id"]}
        if how == "agent_lost":   # no executor_id: the agent itself (pymesos's slaveLost)
            assert stream.wait_for("FAILURE")["failure"] == {"agent_id": offer["agent_id"]}
        stream.close()
    finally:
        made.close()


# ------------------------------------------------------- not leading: 307, 503
class Follower:
    """A master runtime as the v1 front end sees it, while it does not lead."""

    def __init__(self, leader_http: str) -> None:
        import threading

        from mesoslike.wire.types import MasterInfo
        self.stored = threading.Condition()
        self.credentials = None
        self.config = MasterConfig()
        self.info = MasterInfo(id="follower", address="tcp://127.0.0.1:1")
        self.leader_http = leader_http

    def serving_core(self):
        return None

    def leader_info(self) -> dict[str, str]:
        return {"http_address": self.leader_http} if self.leader_http else {}

    def send_later(self, sends) -> None:
        raise AssertionError("a follower sends nothing")

    def healthy(self) -> bool:
        return True


def test_a_master_that_does_not_lead_redirects_to_the_leader_or_answers_503_without_one():
    """(tests/test_pymesos_v1.py has the 307 of a real follower, and pymesos following it.)"""
    from mesoslike.http_server import Request
    from mesoslike.master.v1_api import V1API

    subscribe = b'{"type": "SUBSCRIBE", "subscribe": {"framework_info": {"name": "x", "user": "nobody"}}}'
    for path, handler in (("/api/v1/scheduler", "scheduler"), ("/api/v1", "operator")):
        request = Request("POST", path, {"content-type": "application/json"}, subscribe)
        answer = getattr(V1API(Follower("http://10.0.0.7:5051")), handler)(request)
        assert (answer.status, answer.headers["Location"]) == (307, f"//10.0.0.7:5051{path}")
        answer = getattr(V1API(Follower("")), handler)(request)
        assert (answer.status, answer.body) == (503, b"No leader elected")
