"""Who may speak for a v1 executor (docs/mesos-api.rst, "Executor API"):
a pymesos-like executor sends no token, so the agent asks the kernel which
process holds the other end of the connection and takes a call naming
executor E only from a process of E's container. The executor here is a
raw client inside its container, as pymesos's is; the intruders are another
framework's task on the same agent (another principal) and a process of the
agent's host outside any container, both knowing the ids."""

from __future__ import annotations

import base64
import os
import shlex
import sys

import pytest

from mesoslike.credentials import load_credentials
from security_helpers import SecuredKeys
from test_v1_scheduler import Cluster, command_task, subscribed, until_state
from v1_helpers import EventStream, basic, post

pytestmark = pytest.mark.timeout(120)

#: a v1 executor as pymesos's is: its stream on one connection, its calls on another kept alive, no token
RAW_EXECUTOR = r'''
import base64, http.client, json, os, sys, uuid
host, port = os.environ["MESOS_AGENT_ENDPOINT"].rsplit(":", 1)
ids = {"framework_id": {"value": os.environ["MESOS_FRAMEWORK_ID"]},
       "executor_id": {"value": os.environ["MESOS_EXECUTOR_ID"]}}
head = {"Content-Type": "application/json", "Accept": "application/json"}
stream = http.client.HTTPConnection(host, int(port), timeout=60)
stream.request("POST", "/api/v1/executor", json.dumps({"type": "SUBSCRIBE", **ids, "subscribe": {}}), head)
answer = stream.getresponse()
print("SUBSCRIBE", answer.status, flush=True)
calls = http.client.HTTPConnection(host, int(port), timeout=60)

def call(kind, body):
    calls.request("POST", "/api/v1/executor", json.dumps({"type": kind, **ids, kind.lower(): body}), head)
    reply = calls.getresponse()
    print(kind, reply.status, reply.read(), flush=True)

def update(task_id, state):
    call("UPDATE", {"status": {"task_id": task_id, "state": state, "source": "SOURCE_EXECUTOR",
                               "uuid": base64.b64encode(uuid.uuid4().bytes).decode()}})

buffer = b""
while True:
    piece = answer.read1(65536)
    if not piece:
        break
    buffer += piece
    while b"\n" in buffer:
        length, _, rest = buffer.partition(b"\n")
        if len(rest) < int(length):
            break
        event, buffer = json.loads(rest[:int(length)]), rest[int(length):]
        if event["type"] == "LAUNCH":
            task_id = event["launch"]["task"]["task_id"]
            update(task_id, "TASK_RUNNING")
            call("MESSAGE", {"data": base64.b64encode(b"from inside").decode()})
        elif event["type"] == "KILL":
            update(event["kill"]["task_id"], "TASK_KILLED")
        elif event["type"] == "SHUTDOWN":
            sys.exit(0)
'''

#: another task that knows the executor's ids: its calls, and whether each was refused as not the executor's
INTRUDER = r'''
import http.client, json, sys
endpoint, framework_id, executor_id = sys.argv[1:4]
host, port = endpoint.split("://", 1)[-1].rsplit(":", 1)
ids = {"framework_id": {"value": framework_id}, "executor_id": {"value": executor_id}}
refused = []
for kind, body in (("SUBSCRIBE", {}), ("UPDATE", {"status": {"task_id": {"value": "t1"}, "state": "TASK_FAILED"}}),
                   ("MESSAGE", {"data": "aGk="})):
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("POST", "/api/v1/executor", json.dumps({"type": kind, **ids, kind.lower(): body}),
                       {"Content-Type": "application/json", "Accept": "application/json"})
    reply = connection.getresponse()
    text = reply.read(2000)
    print(kind, reply.status, text, flush=True)
    refused.append(reply.status == 403 and b"executor's container" in text)
sys.exit(0 if all(refused) else 1)
'''

TERMINAL = ("TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED")
RESOURCES = [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
             {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}}]


def launch_raw_executor(cluster: Cluster, scheduler: EventStream, tmp_path,
                        headers: dict | None = None) -> tuple[str, dict]:
    """fwA's task on a custom executor that is a raw v1 client; (framework id, offer)."""
    script = tmp_path / "raw_executor.py"
    script.write_text(RAW_EXECUTOR)
    offer = scheduler.wait_for("OFFERS")["offers"]["offers"][0]
    task = command_task(offer, "t1", "")
    del task["command"]
    task["executor"] = {"executor_id": {"value": "exec-1"}, "name": "exec-1",
                        "command": {"value": f"{sys.executable} {script}"}, "resources": RESOURCES}
    assert cluster.call(scheduler, "ACCEPT", {"offer_ids": [offer["id"]], "operations": [
        {"type": "LAUNCH", "launch": {"task_infos": [task]}}]}, headers)[0] == 202
    return subscribed(scheduler), offer


def refused_from_the_host(cluster: Cluster, framework_id: str) -> None:
    """The test process (the agent's host, in no container) knows the ids: refused."""
    for kind, body in (("SUBSCRIBE", {}), ("MESSAGE", {"data": "aGk="})):
        status, _, answer = post(cluster.agent.core.http_address + "/api/v1/executor",
                                 {"type": kind, "framework_id": {"value": framework_id},
                                  "executor_id": {"value": "exec-1"}, kind.lower(): body})
        assert status == 403 and b"not from a process of the executor's container" in answer, (kind, answer)


@pytest.mark.parametrize("isolation", ["cgroups", "posix"])
def test_an_executor_calling_from_its_container_needs_no_token_and_the_host_is_refused(tmp_path, isolation):
    cluster = Cluster(tmp_path, isolation=isolation)
    try:
        scheduler = cluster.subscribe(failover_timeout=0)
        framework_id, _ = launch_raw_executor(cluster, scheduler, tmp_path)
        until_state(cluster, scheduler, "t1", "TASK_RUNNING")      # its SUBSCRIBE and UPDATE were taken
        message = scheduler.wait_for("MESSAGE")["message"]           # and a call on the kept connection
        assert base64.b64decode(message["data"]) == b"from inside"
        refused_from_the_host(cluster, framework_id)
        assert cluster.call(scheduler, "KILL", {"task_id": {"value": "t1"}})[0] == 202
        until_state(cluster, scheduler, "t1", "TASK_KILLED")
        scheduler.close()
    finally:
        cluster.close()


def test_another_principals_task_on_the_agent_cannot_speak_for_an_executor(tmp_path):
    keys = SecuredKeys(tmp_path)
    cluster = Cluster(tmp_path, load_credentials(str(keys.credentials)), keys)
    try:
        fwa = basic("fwA", keys.framework_tokens["fwA"])
        owner = cluster.subscribe(headers=fwa, failover_timeout=0)
        framework_id, _ = launch_raw_executor(cluster, owner, tmp_path, fwa)
        until_state(cluster, owner, "t1", "TASK_RUNNING", fwa)
        # fwB's task on the same agent (as another user: principals never share one), sharing its network,
        # names fwA's executor
        other = cluster.subscribe("other", headers=basic("fwB", keys.framework_tokens["fwB"]), failover_timeout=0,
                                  user="nobody")
        offer = other.wait_for("OFFERS")["offers"]["offers"][0]
        task = command_task(offer, "intruder", shlex.join(["python3", "-c", INTRUDER,
                                                           cluster.agent.core.http_address, framework_id, "exec-1"]))
        fwb = {"Authorization": f"Bearer {keys.framework_tokens['fwB']}"}
        assert cluster.call(other, "ACCEPT", {"offer_ids": [offer["id"]], "operations": [
            {"type": "LAUNCH", "launch": {"task_infos": [task]}}]}, headers=fwb)[0] == 202
        ended = until_state(cluster, other, "intruder", TERMINAL, fwb)
        assert ended["state"] == "TASK_FINISHED", ended      # each of its calls was refused 403
        refused_from_the_host(cluster, framework_id)
        # the executor itself was not disturbed
        assert [e["update"]["status"]["state"] for e in owner.events if e.get("type") == "UPDATE"] == \
            ["TASK_RUNNING"]
        owner.close()
        other.close()
    finally:
        cluster.close()


class StartingAgent:
    """An agent whose executor's process becomes known only after a few asks (posix isolation before the
    supervisor's reply): the process asking is this test's, which holds the connection."""

    def __init__(self, unknown_for: int) -> None:
        self.asked = 0
        self.unknown_for = unknown_for

    def executor_secret(self, framework_id, executor_id):
        return "secret"

    def executor_processes(self, framework_id, executor_id):
        self.asked += 1
        return None if self.asked <= self.unknown_for else [os.getpid()]

    def wake(self):
        pass


def test_a_call_made_before_the_agent_knows_the_executors_process_waits_for_it_and_is_taken():
    import socket

    from mesoslike.agent.v1_executor import V1Executors
    from mesoslike.http_server import Request

    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as client:
        accepted, (host, port) = server.accept()
        with accepted:
            request = Request("POST", "/api/v1/executor", {}, client=host, client_port=port,
                              local=server.getsockname(), connection=1)
            agent = StartingAgent(unknown_for=3)
            V1Executors(agent)._check_caller(request, "F", "E", "secret")   # raises CallError if refused
            assert agent.asked == 4
