"""Election, detection and the registry against a real ZooKeeper (mesoslike.ha.zookeeper).

Servers come from ``zk_helpers``: one standalone server shared by the module
(each test uses its own group path) and a 3-node ensemble. Every wait polls
against a deadline; nothing sleeps for a fixed long time.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import time

import pytest
from kazoo.client import KazooClient

from mesoslike.errors import MesoslikeError
from mesoslike.ha import (FencedRegistryStore, FencingError, LeaderDetector, MasterContender, RegistryError, ZkUrl,
                          ZooKeeperError, ZooKeeperRegistry, connect)
from mesoslike.ha.zookeeper import MAX_REGISTRY_BYTES
from mesoslike.master.registry import Registry
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo
import zk_helpers
from waiting import wait_until
from zk_helpers import free_port, zookeeper, zookeeper_ensemble, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)

_paths = itertools.count()


#: how long a test waits for ZooKeeper to make something happen (s)
WAIT = 15.0


class LeadershipLog:
    """Records every on_elected/on_demoted of a set of contenders and checks,
    at each election, that nobody else is leading (by the callbacks)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.leaders: set[str] = set()
        self.events: list[tuple[float, str, str, str]] = []
        self.overlaps: list[str] = []

    def elected(self, name):
        with self.lock:
            if self.leaders:
                self.overlaps.append(f"{name} elected while {sorted(self.leaders)} lead")
            self.leaders.add(name)
            self.events.append((time.monotonic(), name, "elected", ""))

    def demoted(self, name, reason):
        with self.lock:
            self.leaders.discard(name)
            self.events.append((time.monotonic(), name, "demoted", reason))

    def of(self, name, kind):
        with self.lock:
            return [event for event in self.events if event[1] == name and event[2] == kind]


class Group:
    """Contenders and detectors on one group path; stops them all at the end."""

    def __init__(self, hosts, session_timeout=10.0):
        self.url = ZkUrl(hosts=hosts, path=f"/mesoslike-test/g{next(_paths)}")
        self.session_timeout = session_timeout
        self.log = LeadershipLog()
        self.contenders: dict[str, MasterContender] = {}
        self.detectors: list[LeaderDetector] = []
        self.changes: list[dict | None] = []

    def contender(self, name):
        info = {"id": name, "address": f"tcp://127.0.0.1:{5050 + len(self.contenders)}",
                "http_address": "http://127.0.0.1:5051", "version": "test"}
        contender = MasterContender(self.url, info, on_elected=lambda: self.log.elected(name),
                                    on_demoted=lambda reason: self.log.demoted(name, reason),
                                    session_timeout=self.session_timeout)
        contender.start()
        self.contenders[name] = contender
        return contender

    def detector(self):
        detector = LeaderDetector(self.url, on_change=self.changes.append, session_timeout=self.session_timeout)
        detector.start()
        self.detectors.append(detector)
        return detector

    def leaders(self):
        return [name for name, contender in self.contenders.items() if contender.is_leader]

    def wait_for_leader(self, name=None, timeout=15.0):
        """Wait until exactly one contender (``name`` if given) leads; return its name."""
        def one_leader():
            leaders = self.leaders()
            return leaders[0] if len(leaders) == 1 and name in (None, leaders[0]) else None
        return wait_until(one_leader, timeout, f"{name or 'one contender'} to lead")

    def stop(self):
        for contender in self.contenders.values():
            contender.stop()
        for detector in self.detectors:
            detector.stop()
        assert not self.log.overlaps, self.log.overlaps


@pytest.fixture
def group(zookeeper):
    group = Group(zookeeper.hosts)
    yield group
    group.stop()


@pytest.fixture
def client(zookeeper):
    client = connect(ZkUrl.parse(zookeeper.url("/mesoslike-test")), timeout=10.0)
    yield client
    client.stop()
    client.close()


def current_fence(contender):
    """The contender's election znode, or None while it has none."""
    try:
        return contender.fence()
    except FencingError:
        return None


def sequence_of(znode):
    return int(re.fullmatch(r".*/json\.info_(\d{10})", znode).group(1))


# ----------------------------------------------------------------- the fixtures themselves
def test_missing_zookeeper_skips_locally_but_fails_under_ci(monkeypatch, tmp_path):
    monkeypatch.setattr(zk_helpers, "ZOOKEEPER_JAR", tmp_path / "no-such-zookeeper.jar")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install zookeeper"):
        zk_helpers.require_zookeeper()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="must not skip"):
        zk_helpers.require_zookeeper()


def test_the_server_fixture_answers_four_letter_words(zookeeper):
    port = int(zookeeper.hosts.rpartition(":")[2])
    assert zk_helpers.four_letter_word(port, "ruok") == "imok"
    assert "Mode: standalone" in zk_helpers.four_letter_word(port, "srvr")
    assert zookeeper.url("/x") == f"zk://{zookeeper.hosts}/x"


# ----------------------------------------------------------------- connecting
def test_connect_to_an_unreachable_zookeeper_fails_clearly_within_the_timeout():
    url = ZkUrl(hosts=f"127.0.0.1:{free_port()}", path="/mesoslike")
    started = time.monotonic()
    with pytest.raises(ZooKeeperError, match=r"could not connect to ZooKeeper at 127\.0\.0\.1:\d+ within 1\.5 s"):
        connect(url, timeout=1.5)
    assert time.monotonic() - started < 5.0
    assert issubclass(ZooKeeperError, MesoslikeError)


def test_contender_and_detector_report_an_unreachable_zookeeper_at_start():
    url = ZkUrl(hosts=f"127.0.0.1:{free_port()}", path="/mesoslike")
    contender = MasterContender(url, {"address": "tcp://h:1"}, on_elected=lambda: None, on_demoted=lambda r: None)
    with pytest.raises(ZooKeeperError, match="could not connect"):
        contender.start(timeout=1.0)
    assert not contender.is_leader
    contender.stop()
    with pytest.raises(ZooKeeperError, match="could not connect"):
        LeaderDetector(url).start(timeout=1.0)


def test_connect_creates_the_group_path(zookeeper):
    url = ZkUrl.parse(zookeeper.url(f"/mesoslike-test/deep/path{next(_paths)}"))
    client = connect(url)
    try:
        assert client.exists(url.path) is not None
    finally:
        client.stop()
        client.close()


def test_contender_info_must_have_an_address():
    url = ZkUrl.parse("zk://127.0.0.1:2181/m")
    for info in ({}, {"address": ""}, {"address": 5}, "tcp://h:1", {"address": "tcp://h:1", "x": object()},
                 {"address": {"ip": "10.0.0.1", "port": 5050}}):   # Mesos's MasterInfo without ours
        with pytest.raises(MesoslikeError):
            MasterContender(url, info, on_elected=lambda: None, on_demoted=lambda r: None)


def test_a_member_in_mesoss_masterinfo_form_is_read_by_its_mesoslike_address(group, client):
    """A master's znode is Mesos's MasterInfo JSON (``address`` an object:
    Mesos's clients read it) with ours beside it; a Mesos master's own
    znode (no ``mesoslike_address``) is no member of ours."""
    path = group.url.path
    client.ensure_path(path)
    client.create(f"{path}/json.info_", json.dumps({"id": "mesos", "address": {"ip": "10.0.0.9", "port": 5050},
                                                    "pid": "master@10.0.0.9:5050"}).encode(),
                  ephemeral=True, sequence=True)
    mesos_form = {"id": "m", "address": {"hostname": "127.0.0.1", "ip": "127.0.0.1", "port": 5051},
                  "ip": 16777343, "port": 5051, "pid": "master@127.0.0.1:5051", "version": "1.11.0",
                  "mesoslike_address": "tcp://127.0.0.1:5050", "http_address": "http://127.0.0.1:5051"}
    contender = MasterContender(group.url, mesos_form, on_elected=lambda: None, on_demoted=lambda r: None,
                                session_timeout=group.session_timeout)
    contender.start()
    try:
        detector = group.detector()
        leader = detector.wait_for_leader(10.0)
        assert (leader["id"], leader["address"], leader["http_address"]) == \
            ("m", "tcp://127.0.0.1:5050", "http://127.0.0.1:5051")
        raw = json.loads(client.get(contender.fence())[0])
        assert raw["address"] == mesos_form["address"] and raw["pid"] == "master@127.0.0.1:5051"
    finally:
        contender.stop()


# ----------------------------------------------------------------- election
def test_lowest_sequence_leads_and_the_next_takes_over(group):
    detector = group.detector()
    first, second, third = (group.contender(name) for name in ("a", "b", "c"))
    assert sequence_of(first.fence()) < sequence_of(second.fence()) < sequence_of(third.fence())
    assert group.wait_for_leader("a") == "a"
    assert detector.wait_for_leader(10.0)["id"] == "a"
    assert second.leader_info() == first.info == third.leader_info()

    for stopped, successor in ((first, "b"), (second, "c")):
        stopped.stop()
        assert not stopped.is_leader
        group.wait_for_leader(successor)
        wait_until(lambda: (detector.leader() or {}).get("id") == successor, WAIT,
                   what=f"the detector to see {successor}")
    third.stop()
    wait_until(lambda: detector.leader() is None, WAIT, what="the detector to see no leader")

    assert [change and change["id"] for change in group.changes] == ["a", "b", "c", None]
    assert [name for _, name, kind, _ in group.log.events if kind == "elected"] == ["a", "b", "c"]
    assert [reason for _, _, kind, reason in group.log.events if kind == "demoted"] == ["stopped"] * 3


def test_followers_never_report_leadership(group):
    contenders = [group.contender(name) for name in ("a", "b", "c")]
    group.wait_for_leader("a")
    # a watch storm (children come and go) must not make a follower lead
    for _ in range(5):
        extra = group.contender(f"x{len(group.contenders)}")
        extra.stop()
    assert group.leaders() == ["a"]
    assert [c.is_leader for c in contenders] == [True, False, False]


def test_foreign_znodes_are_skipped_with_a_warning(group, client, caplog):
    caplog.set_level(logging.WARNING, logger="mesoslike.ha")
    path = group.url.path
    client.ensure_path(path)
    client.create(f"{path}/junk", b"x")
    client.create(f"{path}/json.info_0000000000", b"not json")  # looks like an election znode
    client.create(f"{path}/json.info_0000000001", b"[1, 2]", ephemeral=True)
    client.create(f"{path}/json.info_0000000002", json.dumps({"id": "no-address"}).encode(), ephemeral=True)
    client.create(f"{path}/json.info_0000000003", json.dumps({"address": "tcp://persistent:1"}).encode())
    detector = group.detector()
    contender = group.contender("real")
    group.wait_for_leader("real")
    assert detector.wait_for_leader(10.0)["id"] == "real"
    assert contender.leader_info()["id"] == "real"
    warnings = " ".join(record.getMessage() for record in caplog.records)
    for name in ("junk", *(f"json.info_000000000{i}" for i in range(4))):
        assert name in warnings
    assert "/registry" not in warnings  # the registry's own node is expected beside the members
    # a foreign child appearing while serving neither crashes nor changes the leader
    client.create(f"{path}/json.info_", b"\xff\xfe", sequence=True)
    client.create(f"{path}/another-junk", b"")
    wait_until(lambda: "another-junk" in " ".join(r.getMessage() for r in caplog.records), WAIT, what="the new warning")
    assert group.leaders() == ["real"] and detector.leader()["id"] == "real"


def test_deleting_the_leaders_znode_demotes_it_and_it_rejoins(group, client):
    first, second = group.contender("a"), group.contender("b")
    group.wait_for_leader("a")
    registry = ZooKeeperRegistry(first.client, group.url.path)
    registry.load()
    old_znode = first.fence()
    client.delete(old_znode)
    # The registry refuses the old leader's writes from the moment its znode is gone.
    with pytest.raises(FencingError, match="not the leader any more"):
        registry.store(registry_of("late"), old_znode)
    group.wait_for_leader("b")
    wait_until(lambda: current_fence(first) not in (None, old_znode), WAIT, what="a to rejoin")
    assert sequence_of(first.fence()) > sequence_of(second.fence())
    assert not first.is_leader
    assert old_znode in group.log.of("a", "demoted")[0][3]
    # An operator deleting a live leader's znode is the one case in which the
    # old leader hears of it no sooner than the others (all watches fire at
    # once): the two callbacks may overlap briefly, which fencing covers.
    group.log.overlaps.clear()


def test_a_suspended_leader_is_demoted_at_once_and_one_leads_after_restart(zookeeper):
    group = Group(zookeeper.hosts, session_timeout=8.0)
    try:
        detector = group.detector()
        first, second = group.contender("a"), group.contender("b")
        group.wait_for_leader("a")
        stopped_at = time.monotonic()
        zookeeper.stop()
        wait_until(lambda: group.log.of("a", "demoted"), timeout=5.0, what="the leader's demotion")
        demoted_at, _, _, reason = group.log.of("a", "demoted")[0]
        assert demoted_at - stopped_at < 3.0  # well before the 8 s session could expire
        assert "suspended" in reason
        assert group.leaders() == []
        assert detector.leader()["id"] == "a"  # detectors keep the last known leader meanwhile

        zookeeper.start()
        leader = group.wait_for_leader(timeout=20.0)
        # leadership must be confirmed against ZooKeeper again, never assumed
        assert len(group.log.of(leader, "elected")) == (2 if leader == "a" else 1)
        assert group.leaders() == [leader]
        # "a" may still be getting a new session (its old one expired while the server was down)
        assert wait_until(lambda: _leader_id_or_none(first), WAIT, what="a's view of the group") == leader
    finally:
        group.stop()


def _leader_id_or_none(contender):
    try:
        return contender.leader_info()["id"]
    except ZooKeeperError:  # reconnecting: ask again
        return None


def test_a_lost_session_demotes_the_leader_which_rejoins_with_a_fresh_znode(group):
    first, second = group.contender("a"), group.contender("b")
    group.wait_for_leader("a")
    old_znode = first.fence()
    expire_session(first.client, group.url.hosts)
    wait_until(lambda: group.log.of("a", "demoted"), WAIT, what="the leader's demotion")
    # the twin takes the connection over (SUSPENDED), then closes the session (LOST)
    assert group.log.of("a", "demoted")[0][3] in ("ZooKeeper connection suspended", "ZooKeeper session lost")
    group.wait_for_leader("b")
    wait_until(lambda: current_fence(first) not in (None, old_znode), WAIT, what="a fresh znode")
    assert sequence_of(first.fence()) > sequence_of(second.fence())
    assert group.leaders() == ["b"]


def test_a_contender_reports_each_znode_it_has_and_confirms_it_with_zookeeper(group, client):
    """on_znode tells a master that kept its state through a connection
    break that its session is known lost; confirm() asks ZooKeeper itself
    after a stall (mesoslike.master.leadership: ZnodeChanged, ConfirmLeadership)."""
    znodes = []
    contender = MasterContender(group.url, {"id": "z", "address": "tcp://127.0.0.1:5999"}, on_elected=lambda: None,
                                on_demoted=lambda reason: None, session_timeout=group.session_timeout,
                                on_znode=znodes.append)
    contender.start()
    try:
        first = contender.fence()
        assert znodes == [first]
        assert contender.confirm(5.0) is None
        expire_session(contender.client, group.url.hosts)
        wait_until(lambda: len(znodes) >= 3, WAIT, what="the znode gone with the session, then a fresh one")
        assert znodes[1] is None and znodes[2] not in (None, first)
        wait_until(lambda: contender.confirm(5.0) is None, WAIT, what="the fresh znode confirmed")
        other = client.create(f"{group.url.path}/json.info_", b'{"address": "tcp://x:1"}', ephemeral=True,
                              sequence=True)
        contender._znode = other   # as if its znode were another session's
        assert contender.confirm(5.0) == "the election znode is not ours any more"
        contender._znode = f"{group.url.path}/json.info_9999999999"
        assert contender.confirm(5.0) == "the election znode is gone"
        contender._znode = znodes[-1]
    finally:
        contender.stop()
    assert znodes[-1] is None
    assert contender.confirm(5.0) == "FencingError"   # stopped: no znode to confirm


def expire_session(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session the way ZooKeeper's own tests do: open a
    second connection with the same session id and password, then close it."""
    session_id, password = client.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_callbacks_may_stop_the_contender(group):
    url = group.url
    stopped = threading.Event()
    holder = {}

    def on_elected():
        holder["contender"].stop()  # e.g. a master that exits on any leadership change

    contender = MasterContender(url, {"address": "tcp://h:1"}, on_elected=on_elected,
                                on_demoted=lambda reason: stopped.set())
    holder["contender"] = contender
    contender.start()
    assert stopped.wait(10.0)
    assert not contender.is_leader
    wait_until(lambda: not contender.client.connected, WAIT, what="the contender's client to close")


# ----------------------------------------------------------------- registry
# (the sharded layout in depth: tests/test_zookeeper_registry_layout.py)
def agent(agent_id, hostname="node", **attributes):
    return AgentInfo(hostname, Resources.parse("cpus:4;mem:4096"), attributes, id=agent_id)


def registry_of(*agent_ids):
    registry = Registry()
    for agent_id in agent_ids:
        registry.admit_agent(agent(agent_id))
    return registry


def test_registry_round_trip_with_versions(group):
    contender = group.contender("a")
    group.wait_for_leader("a")
    registry = ZooKeeperRegistry(contender.client, group.url.path)
    assert registry.load() == Registry() and registry.versions == {}
    written = registry_of("a1")
    assert registry.store(written, contender.fence()) == 2  # the header, then a1's shard
    assert not written.changes()
    shard = next(name for name in registry.versions if name)
    assert registry.versions == {"": 0, shard: 0}
    assert ZooKeeperRegistry(contender.client, group.url.path).load() == written
    written.admit_agent(agent("a1", "renamed"))
    written.update_weights({"r": 2.0})
    assert registry.store(written, contender.fence()) == 2  # a1's shard and the weights
    assert registry.versions == {"": 0, shard: 1, "weights": 0}
    reader = ZooKeeperRegistry(contender.client, group.url.path)
    assert reader.load() == written and reader.versions == registry.versions
    raw, _ = contender.client.get(f"{registry.node}/{shard}")
    assert b" " not in raw  # compact JSON


def test_registry_refuses_stale_versions_and_missing_fences(group, client):
    contender = group.contender("a")
    group.wait_for_leader("a")
    registry = ZooKeeperRegistry(contender.client, group.url.path)
    with pytest.raises(FencingError, match="load"):
        registry.store(registry_of("a1"), contender.fence())  # read before writing
    registry.load()
    rival = ZooKeeperRegistry(client, group.url.path)
    rival.load()
    registry.store(registry_of("a1"), contender.fence())
    with pytest.raises(FencingError, match="registry changed under us"):
        rival.store(registry_of("a1"), contender.fence())  # it exists now
    late = registry_of("a1")
    changed = rival.load()
    assert rival.store(changed, contender.fence()) == 0  # nothing changed: nothing written
    changed.admit_agent(agent("a1", "changed"))
    assert rival.store(changed, contender.fence()) == 1
    with pytest.raises(FencingError, match="registry changed under us"):
        registry.store(late, contender.fence())  # someone wrote a1's shard meanwhile
    assert late.changes().agents == {"a1"}  # not marked stored
    gone = contender.fence()
    client.delete(gone)
    reader = ZooKeeperRegistry(client, group.url.path)
    before = (reader.load(), reader.versions)
    registry.load()
    with pytest.raises(FencingError, match="not the leader any more"):
        registry.store(registry_of("a2"), gone)
    assert (reader.load(), reader.versions) == before  # nothing written by the refused stores


def test_fenced_registry_store_follows_the_contender(group):
    contender = group.contender("a")
    group.wait_for_leader("a")
    store = FencedRegistryStore(ZooKeeperRegistry(contender.client, group.url.path), contender.fence)
    with pytest.raises(FencingError, match="load"):
        store.store(registry_of("x"))
    registry = store.load()
    assert registry == Registry()
    registry.admit_agent(agent("x"))
    store.store(registry)
    registry.admit_agent(agent("y"))
    store.store(registry)
    assert store.load() == registry_of("x", "y")
    reader = ZooKeeperRegistry(group.detector().client, group.url.path)
    assert reader.load() == registry_of("x", "y")
    contender.stop()
    registry.admit_agent(agent("z"))
    with pytest.raises(FencingError, match="not the leader any more"):
        store.store(registry)


def test_a_corrupt_registry_record_raises_registry_error(group, client):
    registry = ZooKeeperRegistry(client, group.url.path)
    client.ensure_path(group.url.path)
    for record in (b"not json", b"[1, 2]", b"\xff\xfe", b""):
        client.create(registry.node, record)
        with pytest.raises(RegistryError, match="registry record .* (not valid JSON|not a JSON object)"):
            registry.load()
        client.delete(registry.node)
    client.create(registry.node, b'{"format": 1, "layout": "sharded-v9"}')
    with pytest.raises(RegistryError, match="not one this master reads"):
        registry.load()


def test_shards_too_big_for_zookeeper_are_refused_before_sending(group):
    contender = group.contender("a")
    group.wait_for_leader("a")
    registry = ZooKeeperRegistry(contender.client, group.url.path)
    registry.load()
    written = registry_of()
    written.admit_agent(agent("big", "x" * (MAX_REGISTRY_BYTES - 1000)))
    assert registry.store(written, contender.fence()) == 2
    assert ZooKeeperRegistry(contender.client, group.url.path).load() == written
    written.admit_agent(agent("small"))
    written.admit_agent(agent("huge", "x" * MAX_REGISTRY_BYTES))
    with pytest.raises(RegistryError, match="shard agents.* over the .*-byte limit of one ZooKeeper request"):
        registry.store(written, contender.fence())
    assert written.changes().agents == {"huge"}  # kept to retry; "small" was written
    loaded = ZooKeeperRegistry(contender.client, group.url.path).load()
    assert set(loaded.agents) == {"big", "small"}
    written.update_weights({"r": float("nan")})
    with pytest.raises(RegistryError, match="not JSON-serializable"):
        registry.store(written, contender.fence())
    assert written.changes().sections == {"weights"}
    assert ZooKeeperRegistry(contender.client, group.url.path).load() == loaded  # neither was written
    assert contender.is_leader  # an oversized packet would have dropped the connection
    written.remove_agent("huge")
    written.update_weights({"r": 1.5})
    registry.store(written, contender.fence())  # and the store still works
    assert not written.changes()
    assert ZooKeeperRegistry(contender.client, group.url.path).load() == written


def test_the_registry_of_8000_realistic_agents_fits_in_zookeeper(group):
    """Was a bug (one znode held the whole registry: ~150 bytes an agent, full
    past ~6.7k agents); now the agents are spread over AGENT_BUCKETS shards."""
    contender = group.contender("a")
    group.wait_for_leader("a")
    registry = Registry()
    resources = Resources.parse("cpus:16;mem:64000;disk:450000;ports:[31000-32000]")
    for i in range(8000):
        registry.admit_agent(AgentInfo(f"ip-10-0-{i // 250}-{i % 250}.ec2.internal", resources,
                                       {"rack": f"r{i % 40}"}, id=f"0123abcd-S{i}"))
    assert len(json.dumps(registry.to_document(), separators=(",", ":"))) > MAX_REGISTRY_BYTES  # one znode: too big
    store = FencedRegistryStore(ZooKeeperRegistry(contender.client, group.url.path), contender.fence)
    store.load()
    store.store(registry)
    assert ZooKeeperRegistry(group.detector().client, group.url.path).load() == registry


# ----------------------------------------------------------------- ensemble
def connected_port(client: KazooClient) -> int | None:
    """The client port of the ensemble member ``client`` talks to (test-only peek)."""
    try:
        return client._connection._socket.getpeername()[1]
    except (AttributeError, OSError):
        return None


def test_ensemble_keeps_election_and_registry_working_when_a_node_dies(zookeeper_ensemble):
    group = Group(zookeeper_ensemble.hosts, session_timeout=6.0)
    victim = None
    try:
        detector = group.detector()
        for name in ("a", "b", "c"):
            group.contender(name)
        group.wait_for_leader("a", timeout=20.0)
        leader = group.contenders["a"]
        registry = ZooKeeperRegistry(leader.client, group.url.path)
        registry.load()
        registry.store(registry_of("a1"), leader.fence())

        # kill the member the leader talks to: it must reconnect elsewhere
        ports = [node.client_port for node in zookeeper_ensemble.nodes]
        port = connected_port(leader.client)
        victim = ports.index(port) if port in ports else 0
        zookeeper_ensemble.kill(victim)
        if port in ports:  # then losing that member suspends the leader's connection
            wait_until(lambda: group.log.of("a", "demoted"), WAIT, what="the leader to notice its server died")
            assert group.log.of("a", "demoted")[0][3] == "ZooKeeper connection suspended"

        name = group.wait_for_leader(timeout=20.0)
        current = group.contenders[name]
        registry = ZooKeeperRegistry(current.client, group.url.path)
        loaded = wait_until(lambda: _load_quietly(registry), WAIT, what="the registry to be readable")
        assert loaded == registry_of("a1")
        loaded.admit_agent(agent("a2"))
        assert registry.store(loaded, current.fence()) == 1
        assert ZooKeeperRegistry(current.client, group.url.path).load() == registry_of("a1", "a2")
        assert wait_until(lambda: detector.leader(), WAIT, what="a detected leader")["id"] == name
        assert group.leaders() == [name]
    finally:
        group.stop()
        if victim is not None:
            zookeeper_ensemble.start(victim)


def _load_quietly(registry):
    try:
        return registry.load()
    except ZooKeeperError:
        return None
