"""The master runtime in this process, with real sockets on 127.0.0.1."""

import time

import pytest

from mesoslike.master.leadership import ElectionWon
from mesoslike.master.runtime import MasterRuntime
from mesoslike.master.settings import MasterSettings
from mesoslike.resources import Resources
from mesoslike.transport import Client
from mesoslike.wire import AgentInfo, FrameworkInfo, TaskInfo, TaskState, encode
from mesoslike.wire import messages as m
from waiting import wait_until

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
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None))
    runtime.start()
    yield runtime
    runtime.stop()


def test_a_registration_retried_byte_for_byte_is_answered_without_handling_it_again(master):
    running = m.RunningTask("fw-1", TaskInfo("t1", "a1", "sleep 100", Resources.parse("cpus:1;mem:64")),
                            TaskState.RUNNING)
    frame = encode(m.ReregisterAgent(AgentInfo("node-0", Resources.parse("cpus:4;mem:1024"), id="a1"), [running],
                                     [FrameworkInfo("demo", id="fw-1", failover_timeout=60.0)]))
    with Client(master.address) as agent:
        agent.send_frame(frame)
        assert receive(agent, m.AgentRegistered).agent_id == "a1"
        agent.send_frame(frame)                     # the retry of an agent that waited too long
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


def test_a_registration_retried_after_many_others_is_still_recognised_by_its_length_and_hash(master):
    """After a failover 100,000 agents re-register at once and their retries
    come behind tens of thousands of other registrations: a registration is
    remembered by its length and hash, and its retry is answered without
    being handled again; a frame that differs is handled in full."""

    def frame(i, tasks):
        return encode(m.ReregisterAgent(AgentInfo(f"node-{i}", Resources.parse("cpus:4;mem:1024"), id=f"a{i}"),
                                        [m.RunningTask("fw-1", TaskInfo(f"t{i}.{j}", f"a{i}", "sleep 100",
                                                                        Resources.parse("cpus:1;mem:64")),
                                                       TaskState.RUNNING) for j in range(tasks)],
                                        [FrameworkInfo("demo", id="fw-1", failover_timeout=60.0)]))
    with Client(master.address) as first, Client(master.address) as second:
        first.send_frame(frame(1, 2))
        assert receive(first, m.AgentRegistered).agent_id == "a1"
        second.send_frame(frame(2, 2))   # another agent's registration in between
        assert receive(second, m.AgentRegistered).agent_id == "a2"
        first.send_frame(frame(1, 2))
        assert receive(first, m.AgentRegistered).agent_id == "a1"
        assert master.core.counters["registration_retries"] == 1
        first.send_frame(frame(1, 1))    # not the same: handled in full (its second task is lost)
        assert receive(first, m.AgentRegistered).agent_id == "a1"
        assert master.core.counters["registration_retries"] == 1
        with master._lock:
            assert "t1.1" not in master.core.frameworks["fw-1"].tasks


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
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=0), registry_store=FileRegistryStore(tmp_path))
    runtime.start()
    try:
        assert post(runtime, "/weights", {"eng": 2.0}) == (200, {"ok": True})
        assert post(runtime, "/quota", {"role": "eng", "guarantee": "cpus:2", "limit": "cpus:8;gpus:0", "force": True}) == \
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
    again = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None), registry_store=FileRegistryStore(tmp_path))
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
    leader = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
    leader.start()
    wait_until(lambda: leader.is_leader, 10, "the first master to lead")
    follower = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
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


# ------------------------------------------------------ connection blips
import uuid  # noqa: E402

from kazoo.protocol.states import KazooState  # noqa: E402
from mesoslike.wire import FrameworkInfo as _FrameworkInfo  # noqa: E402


def _turn_until(runtime, condition, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        runtime._turn()


@pytest.fixture
def ha_master(zookeeper):
    """An HA master whose loop the test turns by hand, so that a connection
    state change can be delivered at an exact point of a turn."""
    url = ZkUrl.parse(zookeeper.url(f"blip-{uuid.uuid4().hex[:8]}"))
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
    try:
        _turn_until(runtime, lambda: runtime.is_leader, "leadership")
        yield runtime
    finally:
        runtime._close()


def _frames_waiting(runtime):
    """True once a frame waits on the master's socket (it is not read)."""
    return runtime._server.wait(0.0)


def _subscribed_framework(runtime):
    client = Client(runtime.address)
    client.send(m.Subscribe(_FrameworkInfo("blip", failover_timeout=60.0)))
    got = []
    _turn_until(runtime, lambda: got or got.extend(m for _, m in client.receive()) or got, "SUBSCRIBED")
    assert isinstance(got[0], m.Subscribed)
    return client, got[0].framework_id


def _answers(runtime, client, timeout=10.0):
    """What the client hears until the master leads and has said something."""
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (runtime.is_leader and out):
        runtime._turn()
        out += [message for _, message in client.receive()]
    return out


@pytest.mark.parametrize("when", ["while the loop waits", "while the loop handles the call"])
def test_a_call_that_meets_a_connection_blip_is_answered_once_the_master_leads_on(ha_master, when):
    """Found in CI: a call that arrived in the same turn as the demotion was
    refused ("does not lead") although the master led on with the very core
    the call was for; and a turn cut short by the demotion lost its replies."""
    runtime = ha_master
    client, framework_id = _subscribed_framework(runtime)
    core = runtime.core
    reconcile = m.Reconcile(framework_id, [m.ReconcileTask("never-launched", "agent-x")])
    if when == "while the loop waits":
        real_wait = runtime._server.wait

        def wait(timeout, waker):  # the call and the connection break arrive together
            runtime._server.wait = real_wait
            client.send(reconcile)
            wait_until(lambda: _frames_waiting(runtime), 5, "the call to reach the master")
            runtime._contender._on_state(KazooState.SUSPENDED)
            return real_wait(timeout, waker)
        runtime._server.wait = wait
        runtime._turn()
        runtime._contender._on_state(KazooState.CONNECTED)
    else:
        real_on_message = core.on_message

        def on_message(peer, message, principal=None):  # the connection breaks while the core works
            sends = real_on_message(peer, message, principal)
            if isinstance(message, m.Reconcile):
                runtime._contender._on_state(KazooState.SUSPENDED)
            return sends
        core.on_message = on_message
        client.send(reconcile)
        wait_until(lambda: _frames_waiting(runtime), 5, "the call to reach the master")
        runtime._turn()
        runtime._contender._on_state(KazooState.CONNECTED)
    answers = _answers(runtime, client)
    assert runtime.is_leader and runtime.core is core, "the master did not lead on with the core it kept"
    assert [a for a in answers if isinstance(a, m.Error)] == []
    updates = [a.status for a in answers if isinstance(a, m.Update)]
    assert [(s.task_id, s.state) for s in updates] == [("never-launched", TaskState.LOST)]
    client.close()


def test_a_master_whose_session_expired_meanwhile_drops_the_kept_core_and_refuses_at_once(ha_master):
    """Seen in a stress run (a frozen leader woken past its session): the
    kept core held peers' messages until the session timeout although the
    session was known lost and another master led."""
    runtime = ha_master
    client, framework_id = _subscribed_framework(runtime)
    other = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=runtime._zk,
                                         zk_session_timeout=4.0))
    other.start()
    try:
        runtime._contender._on_state(KazooState.SUSPENDED)
        runtime._turn()
        assert runtime.leadership.kept is not None and not runtime.is_leader   # in doubt: kept, peers wait
        runtime._contender.client.delete(runtime._contender.fence())   # as when the session expired
        runtime._contender._on_state(KazooState.CONNECTED)              # it rejoins behind the other master
        wait_until(lambda: other.is_leader, 10, "the other master to lead")
        client.send(m.Reconcile(framework_id, []))
        replies = []
        # refused well within the session timeout (4 s) it would otherwise hold for
        _turn_until(runtime, lambda: replies.extend(m for _, m in client.receive()) or replies,
                    "a refusal", timeout=2.0)
        assert runtime.leadership.kept is None and not runtime.is_leader
        assert isinstance(replies[0], m.Error) and other.address in replies[0].message, replies
    finally:
        other.stop()
        client.close()


def test_an_elected_master_that_cannot_read_the_registry_waits_and_serves_once_it_is_repaired(zookeeper):
    """It used to log once and never serve, while still holding the lowest
    znode: a cluster with no leader, for good."""
    from mesoslike.ha.zookeeper import connect

    url = ZkUrl.parse(zookeeper.url(f"unreadable-{uuid.uuid4().hex[:8]}"))
    operator = connect(url, timeout=10)
    operator.create(url.path + "/registry", b"{not json", makepath=True)
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
    try:
        _turn_until(runtime, lambda: runtime._contender.is_leader, "the election")
        with Client(runtime.address) as framework:
            framework.send(m.Subscribe(_FrameworkInfo("patient", failover_timeout=60.0)))
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                runtime._turn()
                assert list(framework.receive()) == [], "answered before it could read the registry"
            assert runtime._contender.is_leader and not runtime.is_leader
            operator.delete(url.path + "/registry")      # the operator repairs it
            replies = []
            _turn_until(runtime, lambda: replies.extend(m for _, m in framework.receive()) or replies,
                        "an answer once the registry is readable")
            assert runtime.is_leader and isinstance(replies[0], m.Subscribed)   # the call that waited
    finally:
        runtime._close()
        operator.stop()
        operator.close()


def test_a_call_that_arrives_with_the_election_is_handled_by_the_new_leader(zookeeper):
    """The frames that woke a follower in the very wait its election ended
    were refused ("does not lead") and the framework had to back off."""
    url = ZkUrl.parse(zookeeper.url(f"elected-{uuid.uuid4().hex[:8]}"))
    leader = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
    follower = None
    try:
        _turn_until(leader, lambda: leader.is_leader, "the first leader")
        follower = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url,
                                                zk_session_timeout=4.0))
        follower._turn()
        framework = Client(follower.address)
        real_wait = follower._server.wait

        def wait(timeout, waker):  # the old leader leaves and a call comes, both while the follower waits
            follower._server.wait = real_wait
            leader._close()
            wait_until(lambda: any(isinstance(e, ElectionWon) for e in list(follower._pending)), 10,
                       "the follower to be elected")
            framework.send(m.Subscribe(_FrameworkInfo("early", failover_timeout=60.0)))
            wait_until(lambda: _frames_waiting(follower), 5, "the call to reach the follower")
            return real_wait(timeout, waker)
        follower._server.wait = wait
        replies = []
        _turn_until(follower, lambda: replies.extend(m for _, m in framework.receive()) or replies,
                    "an answer from the new leader")
        assert isinstance(replies[0], m.Subscribed), replies
        framework.close()
    finally:
        leader._close()
        if follower is not None:
            follower._close()


# ------------------------------------------------------------- registry writes off the loop
import threading  # noqa: E402

from mesoslike.master.storage import MemoryRegistryStore  # noqa: E402


class GatedStore(MemoryRegistryStore):
    """A store slow as ZooKeeper can be: each write waits until the test opens the gate."""

    asynchronous = True

    def __init__(self):
        super().__init__()
        self.gate = threading.Event()
        self.writes = 0

    def write(self, document):
        self.writes += 1
        if not self.gate.wait(10):
            raise AssertionError("the gate stayed shut: the test waited on the loop")
        super().write(document)


def test_the_loop_handles_frames_while_a_registry_write_is_on_its_way_and_answers_after_it():
    """A registration's answer waits for its registry write, but the loop
    does not: it handles the next registration meanwhile, whose change goes
    in the next write (group commit), and both answers go out once written."""
    store = GatedStore()
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None), registry_store=store)
    agents = [Client(runtime.address) for _ in range(2)]
    heard: list[list] = [[], []]

    def turn() -> None:
        runtime._turn()
        for agent, messages in zip(agents, heard):
            messages.extend(message for _, message in agent.receive())
    try:
        agents[0].send(m.RegisterAgent(AgentInfo("node-0", Resources.parse("cpus:2;mem:512"))))
        wait_until(lambda: turn() or store.writes == 1, 10, "the first write")
        agents[1].send(m.RegisterAgent(AgentInfo("node-1", Resources.parse("cpus:2;mem:512"))))
        wait_until(lambda: turn() or len(runtime.core.agents) == 2, 10, "the second registration handled")
        assert heard == [[], []], "an answer went out before its registry write was done"
        assert store.writes == 1 and store.document == {}
        store.gate.set()
        wait_until(lambda: turn() or all(any(isinstance(h, m.AgentRegistered) for h in hs) for hs in heard),
                   10, "both answers")
        assert sorted(store.document["agents"]) == sorted(h[0].agent_id for h in heard)
        assert store.writes == 2   # the second registration went in the next write, not one each
    finally:
        for agent in agents:
            agent.close()
        runtime._close()


def test_a_registration_retried_while_its_registry_write_is_on_its_way_is_answered_once_after_the_write():
    """As Mesos ignores a re-registration in progress: the retry gets no
    answer of its own (before, a second AGENT_REGISTERED was made, held
    with the turn and sent after the first); the answer held for the write
    goes out once it is done, once."""
    store = GatedStore()
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None), registry_store=store)
    agent = Client(runtime.address)
    heard: list = []

    def turn() -> None:
        runtime._turn()
        heard.extend(message for _, message in agent.receive())
    try:
        frame = encode(m.RegisterAgent(AgentInfo("node-0", Resources.parse("cpus:2;mem:512"))))
        agent.send_frame(frame)
        wait_until(lambda: turn() or store.writes == 1, 10, "the admission's write on its way")
        agent.send_frame(frame)                           # the agent retries, byte for byte
        wait_until(lambda: turn() or runtime.core.counters["registration_retries"] == 1, 10, "the retry received")
        for _ in range(3):
            turn()
        assert heard == [], "an answer went out before its registry write was done"
        store.gate.set()
        wait_until(lambda: turn() or heard, 10, "the answer")
        for _ in range(3):
            turn()
        assert [type(h) for h in heard] == [m.AgentRegistered]
        assert store.document["agents"] and heard[0].agent_id in store.document["agents"]
        assert runtime.core.counters["registration_retries_ignored"] == 1
    finally:
        agent.close()
        runtime._close()


def test_a_retried_registration_is_answered_as_it_is_received_not_behind_the_registrations_waiting(monkeypatch):
    """After a failover at scale thousands of registrations wait; an agent
    whose answer was slow retries, and its retry — queued behind them —
    held up its PONGs until it was marked unreachable. Now the retry is
    answered as it is received, and the agent's PONG is not held up."""
    import mesoslike.master.runtime as runtime_module

    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None))
    agent = Client(runtime.address)
    others = [Client(runtime.address) for _ in range(3)]
    heard: list = []

    def turn() -> None:
        runtime._turn()
        heard.extend(message for _, message in agent.receive())
    try:
        frame = encode(m.RegisterAgent(AgentInfo("node-a", Resources.parse("cpus:2;mem:512"))))
        agent.send_frame(frame)
        registered = wait_until(lambda: turn() or next((h for h in heard if isinstance(h, m.AgentRegistered)), None),
                                10, "the agent registered")
        monkeypatch.setattr(runtime_module, "_BATCH", 0)   # frames are taken in, none handled
        for n, other in enumerate(others):
            other.send(m.RegisterAgent(AgentInfo(f"node-{n}", Resources.parse("cpus:2;mem:512"))))
        wait_until(lambda: turn() or runtime._inbox.deferred == 3, 10, "three registrations waiting")
        runtime.core.agents[registered.agent_id].pings_unanswered = 2
        heard.clear()
        agent.send_frame(frame)                           # the retry, byte for byte
        agent.send(m.Pong(registered.agent_id))
        wait_until(lambda: turn() or any(isinstance(h, m.AgentRegistered) for h in heard), 10,
                   "the retry answered while the registrations wait")
        assert runtime._inbox.deferred == 3
        monkeypatch.setattr(runtime_module, "_BATCH", 1)   # one frame a turn: the PONG goes first
        wait_until(lambda: turn() or runtime.core.agents[registered.agent_id].pings_unanswered == 0, 10,
                   "the PONG handled")
        assert runtime._inbox.deferred == 3
    finally:
        for client in [agent, *others]:
            client.close()
        runtime._close()


def test_a_follower_flooded_at_its_election_answers_a_batch_at_a_time_and_takes_over(zookeeper):
    """Agents learn of an election when the follower does and flood it: it
    answered every frame waiting in one turn, and those that kept coming
    kept the turn — and the election — waiting (93 s at 30,000 agents)."""
    from mesoslike.master import runtime as runtime_module

    url = ZkUrl.parse(zookeeper.url(f"flood-{uuid.uuid4().hex[:8]}"))
    leader = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
    follower = None
    try:
        _turn_until(leader, lambda: leader.is_leader, "the first leader")
        follower = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url,
                                                zk_session_timeout=4.0))
        follower._turn()
        flood = 3 * runtime_module._BATCH
        with Client(follower.address) as agents:
            for _ in range(flood):
                agents.send(m.Pong("a1"))
            wait_until(lambda: _frames_waiting(follower), 5, "the flood to reach the follower")
            real_send = follower._server.send
            sent = []

            def send(peer, message):   # the election comes while the follower answers the flood
                sent.append(message)
                if len(sent) == 10:
                    leader._close()
                    wait_until(lambda: any(isinstance(e, ElectionWon) for e in list(follower._pending)), 10,
                               "the follower to be elected")
                return real_send(peer, message)
            follower._server.send = send
            follower._turn()
            assert 10 <= len(sent) <= runtime_module._BATCH, len(sent)
            assert len(sent) == 10   # it stopped at the news
            _turn_until(follower, lambda: follower.is_leader, "the new leader")
    finally:
        leader._close()
        if follower is not None:
            follower._close()


def test_a_turn_handles_frames_up_to_its_bytes_and_answers_them_before_the_next(monkeypatch):
    """A frame may be a batch of a thousand updates: a turn that took every
    frame waiting held every answer back until all were handled, while the
    peers waited idle (and agents retried their updates). A turn stops taking
    frames once they hold ``_TURN_BYTES``; its answers go out at its end."""
    import mesoslike.master.runtime as runtime_module

    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None))
    framework = Client(runtime.address)
    heard: list = []
    try:
        _turn_until(runtime, lambda: runtime.is_leader, "the master to lead")
        monkeypatch.setattr(runtime_module, "_BATCH", 0)   # frames are taken in, none handled
        for n in range(3):   # not subscribed: each is answered with an ERROR
            framework.send(m.Acknowledge("nobody", "a1", f"t{n}", f"{n:032x}"))
        wait_until(lambda: runtime._turn() or len(runtime._inbox) == 3, 10, "the three frames taken in")
        monkeypatch.setattr(runtime_module, "_BATCH", 2000)
        monkeypatch.setattr(runtime_module, "_TURN_BYTES", 1)   # one frame a turn, whatever its size
        runtime._turn()
        wait_until(lambda: heard.extend(msg for _, msg in framework.receive()) or heard, 10, "the first answer")
        assert len(heard) == 1 and isinstance(heard[0], m.Error)
        assert len(runtime._inbox) == 2   # taken from the socket, handled in the next turns
        wait_until(lambda: runtime._turn() or heard.extend(msg for _, msg in framework.receive()) or len(heard) == 3,
                   10, "the other two answers")
    finally:
        framework.close()
        runtime._close()


def _two_frames_in_one_turn(runtime, framework, framework_id, monkeypatch):
    """Two frames of ``framework`` (acknowledgements of tasks the master
    does not have: each answered with an ERROR) handled in one turn."""
    import mesoslike.master.runtime as runtime_module

    monkeypatch.setattr(runtime_module, "_BATCH", 0)   # frames are taken in, none handled
    for n in range(2):
        framework.send(m.Acknowledge(framework_id, "a1", f"t{n}", f"{n:032x}"))
    wait_until(lambda: runtime._turn() or len(runtime._inbox) == 2, 10, "the two frames taken in")
    monkeypatch.setattr(runtime_module, "_BATCH", 2000)
    runtime._turn()
    assert not runtime._inbox


def test_a_busy_master_spaces_its_turns_and_an_idle_one_answers_at_once(monkeypatch):
    """``turn_spacing``: after a turn that handled several frames the loop
    waits until the spacing has passed since that turn woke, so that what
    comes meanwhile is handled in one turn (docs/performance.rst, "Stop 22:
    the master's CPU a task on the real path (master22)"); a turn that
    handled none, or one frame (a request another hop waits on: a lone
    task's launch would be delayed at every hop), or a master that handled
    none yet, waits for nothing more."""
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, turn_spacing=0.2))
    framework = Client(runtime.address)
    try:
        _turn_until(runtime, lambda: runtime.is_leader, "the master to lead")
        assert runtime._space_turns() == 0.0     # nothing handled yet: no wait
        runtime._turn()                          # (a turn with no frame: still not busy)
        assert runtime._busy_turn_at == float("-inf")
        framework.send(m.Subscribe(FrameworkInfo("spaced")))
        heard: list = []
        _turn_until(runtime, lambda: heard.extend(msg for _, msg in framework.receive()) or heard, "SUBSCRIBED")
        assert isinstance(heard[0], m.Subscribed)
        assert runtime._busy_turn_at == float("-inf")   # a turn of one frame: answered, not spaced
        assert runtime._space_turns() == 0.0
        _two_frames_in_one_turn(runtime, framework, heard[0].framework_id, monkeypatch)
        assert runtime._busy_turn_at > float("-inf")
        runtime._busy_turn_at = time.monotonic()
        assert runtime._space_turns() > 0.0      # it waited for the rest of the spacing
    finally:
        framework.close()
        runtime._close()


def test_a_wake_ends_the_wait_between_busy_turns_and_is_left_for_the_turn_that_follows():
    """A thread that wakes the loop (stop, a registry write done, a /state
    reader) is not held up by the spacing, and its wake is not lost: the
    wait for frames that follows sees it."""
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, turn_spacing=1.0))
    try:
        runtime._busy_turn_at = time.monotonic()
        runtime._waker.wake()
        runtime._space_turns()
        assert runtime._waker.wait(0.0)          # still pending after the spacing's wait ended
    finally:
        runtime._close()


@pytest.mark.parametrize("spacing", [-0.001, 1.5])
def test_a_turn_spacing_outside_0_to_1_second_is_refused(spacing):
    with pytest.raises(ValueError):
        MasterSettings(turn_spacing=spacing)


def test_a_turn_that_handled_a_large_batch_is_not_followed_by_a_wait(monkeypatch):
    """A turn of many updates answers in large batches already: the control
    plane's turns, held too, lost a third of their rate. Only a turn of
    fewer bytes than ``_SMALL_TURN_BYTES`` is followed by the spacing."""
    import mesoslike.master.runtime as runtime_module

    monkeypatch.setattr(runtime_module, "_SMALL_TURN_BYTES", 1)   # every frame is "large"
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, turn_spacing=1.0))
    framework = Client(runtime.address)
    try:
        _turn_until(runtime, lambda: runtime.is_leader, "the master to lead")
        framework.send(m.Subscribe(FrameworkInfo("large")))
        heard: list = []
        _turn_until(runtime, lambda: heard.extend(msg for _, msg in framework.receive()) or heard, "SUBSCRIBED")
        assert isinstance(heard[0], m.Subscribed)
        _two_frames_in_one_turn(runtime, framework, heard[0].framework_id, monkeypatch)
        assert runtime._busy_turn_at == float("-inf")
        assert runtime._space_turns() == 0.0
    finally:
        framework.close()
        runtime._close()
