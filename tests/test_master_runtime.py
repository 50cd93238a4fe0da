"""The master runtime in this process, with real sockets on 127.0.0.1."""

import time

import pytest

from mesoslike.master.runtime import MasterRuntime
from mesoslike.resources import Resources
from mesoslike.transport import Client
from mesoslike.wire import AgentInfo, FrameworkInfo, TaskInfo, TaskState, encode
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(30)


def receive(client, kind, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.wait(0.05):
            for _, message in client.receive():
                if isinstance(message, kind):
                    return message
    raise AssertionError(f"no {kind.__name__} within {timeout}s")


@pytest.fixture
def master():
    runtime = MasterRuntime("tcp://127.0.0.1:0", http_port=None)
    runtime.start()
    yield runtime
    runtime.stop()


def test_a_registration_retried_byte_for_byte_is_answered_without_handling_it_again(master):
    running = m.RunningTask("fw-1", TaskInfo("t1", "a1", "sleep 100", Resources.parse("cpus:1;mem:64")),
                            TaskState.RUNNING)
    frame = encode(m.ReregisterAgent(AgentInfo("node-0", Resources.parse("cpus:4;mem:1024"), id="a1"), [running],
                                     [FrameworkInfo("demo", id="fw-1", failover_timeout=60.0)]))
    with Client(master.address) as agent:
        agent.socket.send(frame)
        assert receive(agent, m.AgentRegistered).agent_id == "a1"
        agent.socket.send(frame)                     # the retry of an agent that waited too long
        assert receive(agent, m.AgentRegistered).agent_id == "a1"
        assert master.core.counters["registration_retries"] == 1
        # a retry whose content changed is handled in full
        agent.send(m.ReregisterAgent(AgentInfo("node-0", Resources.parse("cpus:4;mem:1024"), id="a1"), [], []))
        assert receive(agent, m.AgentRegistered).agent_id == "a1"
        assert master.core.counters["registration_retries"] == 1
        with master._lock:  # it no longer lists t1, so t1 is lost
            framework = master.core.frameworks["fw-1"]
            assert "t1" not in framework.tasks
            assert [(t.id, t.status.state) for t in framework.completed] == [("t1", TaskState.LOST)]


# ------------------------------------------------------------- operator
import json  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

from mesoslike.master.storage import FileRegistryStore  # noqa: E402


def post(runtime, path, document):
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    request = urllib.request.Request(runtime.http_address + path, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=15) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_weights_and_quota_set_over_http_are_stored_before_the_answer_and_survive_a_restart(tmp_path):
    runtime = MasterRuntime("tcp://127.0.0.1:0", http_port=0, registry_store=FileRegistryStore(tmp_path))
    runtime.start()
    try:
        assert post(runtime, "/weights", {"eng": 2.0}) == (200, {"ok": True})
        assert post(runtime, "/quota", {"role": "eng", "guarantee": "cpus:2", "limit": "cpus:8;gpus:0"}) == \
            (200, {"ok": True})
        stored = json.loads((tmp_path / "registry.json").read_text())   # on disk when the answer came
        assert stored["weights"] == {"eng": 2.0}
        assert stored["quota"] == {"eng": {"guarantee": "cpus:2", "limit": "cpus:8;gpus:0"}}
        # bad requests: a clear error, nothing changes
        code, reply = post(runtime, "/quota", {"role": "eng", "guarantee": "cpus:-1"})
        assert code == 400 and "cpus" in reply["error"]
        code, reply = post(runtime, "/weights", {"eng": "heavy"})
        assert code == 400
        assert post(runtime, "/weights", b"{not json")[0] == 400
        assert post(runtime, "/nope", {})[0] == 404
        assert json.loads((tmp_path / "registry.json").read_text())["quota"] == stored["quota"]
    finally:
        runtime.stop()
    again = MasterRuntime("tcp://127.0.0.1:0", http_port=None, registry_store=FileRegistryStore(tmp_path))
    try:
        applied = again.core.allocator.snapshot()
        assert applied["weights"] == {"eng": 2.0} and applied["quota"]["eng"]["guarantee"] == "cpus:2"
    finally:
        again._close()


# ------------------------------------------------------------- followers
from mesoslike.ha.url import ZkUrl  # noqa: E402
from zk_helpers import zookeeper, zookeeper_server  # noqa: E402,F401 (fixtures)


def test_a_follower_reads_who_leads_from_zookeeper_at_most_once_a_second(zookeeper):
    # /health and the loop ask often; each read blocks while ZooKeeper is unreachable
    url = ZkUrl.parse(zookeeper.url("runtime-follower"))
    leader = MasterRuntime("tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0)
    leader.start()
    deadline = time.monotonic() + 10
    while not leader.is_leader and time.monotonic() < deadline:
        time.sleep(0.05)
    follower = MasterRuntime("tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0)
    follower.start()
    try:
        reads = []
        real = follower._contender.leader_info
        follower._contender.leader_info = lambda: reads.append(1) or real()
        started = time.monotonic()
        answers = {follower._health()["leader"] for _ in range(200)}
        assert answers == {leader.address} and not follower.is_leader
        assert len(reads) <= 1 + (time.monotonic() - started) / 1.0
    finally:
        follower.stop()
        leader.stop()
