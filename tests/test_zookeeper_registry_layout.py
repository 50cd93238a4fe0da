"""The registry's sharded layout in ZooKeeper (mesoslike.ha.registry_store, docs/ha.rst):
capacity (100k agents), incremental writes, fencing of every transaction,
split writes, corrupt shards, removed-id chunks and the conversion of the
old one-document format — against a real ZooKeeper from ``zk_helpers``."""

from __future__ import annotations

import itertools
import json
import logging
import time

import pytest
from kazoo.protocol.serialization import CheckVersion, Transaction

from mesoslike.ha import FencedRegistryStore, FencingError, MasterContender, ZkUrl, ZooKeeperRegistry, connect
from mesoslike.ha import registry_store as zk
from mesoslike.master import registry as registry_module
from mesoslike.master.registry import Registry, UnreachableEntry
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo
from waiting import wait_until
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)

_paths = itertools.count()
RESOURCES = Resources.parse("cpus:16;mem:64000;disk:450000;ports:[31000-32000]")


def realistic_agent(i: int) -> AgentInfo:
    """An agent as the real agent registers it: detected disk and ports, an attribute, a DNS hostname."""
    return AgentInfo(f"ip-10-{i // 62500}-{i // 250 % 250}-{i % 250}.ec2.internal", RESOURCES,
                     {"rack": f"r{i % 40}"}, id=f"0123abcd-4567-89ef-S{i}")


def realistic_registry(agents: int, frameworks: int = 20) -> Registry:
    registry = Registry()
    for i in range(agents):
        registry.admit_agent(realistic_agent(i))
    for i in range(frameworks):
        registry.add_framework(FrameworkInfo(f"fw{i}", f"role{i % 3}", 3600.0, id=f"0123abcd-F{i:04d}"))
    for i in range(min(agents // 10, 50)):
        registry.remove_agent(f"gone-S{i}")
    registry.remove_framework("0123abcd-F9999")
    registry.update_weights({"role0": 2.0, "role1": 0.5})
    return registry


class Master:
    """A contender that leads, with its own registry store."""

    def __init__(self, url: ZkUrl, name: str) -> None:
        self.contender = MasterContender(url, {"id": name, "address": f"tcp://127.0.0.1:{5050 + len(name)}"},
                                         on_elected=lambda: None, on_demoted=lambda reason: None)
        self.contender.start()
        self.registry = ZooKeeperRegistry(self.contender.client, url.path, timeout=30.0)
        self.store = FencedRegistryStore(self.registry, self.contender.fence)

    def wait_until_leading(self, timeout: float = 15.0) -> Master:
        wait_until(lambda: self.contender.is_leader, timeout, "the master to lead")
        return self

    def load_and_store(self, agents: int) -> Registry:
        """Load the registry, admit ``agents`` realistic agents, store it; the registry."""
        registry = self.store.load()
        for i in range(agents):
            registry.admit_agent(realistic_agent(i))
        self.store.store(registry)
        return registry


@pytest.fixture
def url(zookeeper):
    return ZkUrl(hosts=zookeeper.hosts, path=f"/mesoslike-test/layout{next(_paths)}")


@pytest.fixture
def masters(url):
    started: list[Master] = []

    def start(name: str = "a") -> Master:
        master = Master(url, name)
        started.append(master)
        return master
    yield start
    for master in started:
        master.contender.stop()


@pytest.fixture
def client(zookeeper, url):
    client = connect(url, timeout=10.0)
    yield client
    client.stop()
    client.close()


def snapshot(client, url: ZkUrl) -> dict[str, tuple[bytes, int]]:
    """Every registry znode: name ("" for the header) -> (data, version)."""
    node = f"{url.path}/registry"
    data, stat = client.get(node)
    found = {"": (data, stat.version)}
    for name in client.get_children(node):
        data, stat = client.get(f"{node}/{name}")
        found[name] = (data, stat.version)
    return found


def changed(before: dict, after: dict) -> set[str]:
    """The znodes of a snapshot that are new or differ from an earlier one."""
    return {name for name in after if after[name] != before.get(name)}


def reload(client, url: ZkUrl) -> Registry:
    return ZooKeeperRegistry(client, url.path, timeout=30.0).load()


# ----------------------------------------------------------------- capacity
def test_bucket_count_and_sizes_leave_room_for_a_million_agents():
    """No I/O: how the realistic agents spread over the buckets."""
    registry = realistic_registry(100_000)
    shards = zk._encode_registry(registry.to_document())
    agent_shards = {name: data for name, data in shards.items() if name.startswith("agents.")}
    assert len(agent_shards) == zk.AGENT_BUCKETS
    sizes = sorted(len(data) for data in agent_shards.values())
    per_agent = sum(sizes) / 100_000
    assert 120 < per_agent < 200
    assert sizes[-1] < 2 * sizes[len(sizes) // 2]  # the hash spreads them evenly (~24 a bucket)
    # the fullest bucket reaches the limit at about this many agents in all
    assert zk.MAX_REGISTRY_BYTES / sizes[-1] * 100_000 > 1_000_000


@pytest.mark.slow
def test_100k_realistic_agents_round_trip_through_zookeeper(masters, client, url):
    leader = masters().wait_until_leading()
    registry = realistic_registry(100_000)
    assert leader.store.load() == Registry()
    leader.store.store(registry)
    assert not registry.changes()
    shards = snapshot(client, url)
    assert len([name for name in shards if name.startswith("agents.")]) == zk.AGENT_BUCKETS
    assert max(len(data) for data, _ in shards.values()) < zk.MAX_REGISTRY_BYTES / 20  # well under the limit
    assert reload(client, url) == registry
    # a change to one agent afterwards is one small write
    registry.remove_agent("0123abcd-4567-89ef-S4242")
    assert leader.registry.store(registry, leader.contender.fence()) == 2  # its shard, the removed chunk
    assert reload(client, url) == registry


# ----------------------------------------------------------------- incremental
def test_a_change_to_one_agent_writes_only_its_shard(masters, client, url):
    leader = masters().wait_until_leading()
    registry = leader.load_and_store(3000)
    before = snapshot(client, url)

    registry.admit_agent(realistic_agent(7))  # the same again: not a change
    registry.admit_agent(AgentInfo("renamed", RESOURCES, id=realistic_agent(12).id))
    leader.store.store(registry)
    after = snapshot(client, url)
    shard = zk._record_shard("agents", realistic_agent(12).id)
    assert changed(before, after) == {shard}
    assert after[shard][1] == 1  # written once more: version 0 -> 1
    assert reload(client, url) == registry

    registry.add_framework(FrameworkInfo("fw", id="f1"))
    registry.update_weights({"ops": 3.0})
    leader.store.store(registry)
    later = snapshot(client, url)
    assert changed(after, later) == \
        {zk._record_shard("frameworks", "f1"), "weights"}
    assert leader.registry.store(registry, leader.contender.fence()) == 0  # nothing changed, nothing written
    assert snapshot(client, url) == later

    registry.update_quota("ops", guarantee="cpus:2", limit="cpus:4;gpus:0")
    leader.store.store(registry)
    with_quota = snapshot(client, url)
    assert changed(later, with_quota) == {"quota"}
    assert reload(client, url).quota == {"ops": {"guarantee": "cpus:2", "limit": "cpus:4;gpus:0"}}
    registry.update_quota("ops")  # cleared: the znode goes
    leader.store.store(registry)
    assert "quota" not in snapshot(client, url) and reload(client, url).quota == {}


def test_unreachable_agents_are_sharded_and_written_incrementally_oldest_first(masters, client, url):
    """docs/reliability.rst, "Partitions": the unreachable list in ZooKeeper, in the order agents were marked."""
    leader = masters().wait_until_leading()
    registry = leader.load_and_store(20)
    before = snapshot(client, url)
    for n, i in enumerate((5, 3, 9)):   # marked in this order
        registry.mark_unreachable(realistic_agent(i).id, UnreachableEntry(1000.0 + n, f"h{i}", "p"))
    leader.store.store(registry)
    after = snapshot(client, url)
    assert changed(before, after) == {zk._record_shard("unreachable", realistic_agent(i).id) for i in (5, 3, 9)}
    assert not {zk._record_shard("agents", realistic_agent(i).id) for i in (5, 3, 9)} & set(after)  # alone there
    loaded = reload(client, url)
    assert loaded == registry
    assert list(loaded.unreachable) == [realistic_agent(i).id for i in (5, 3, 9)]   # whatever their shards
    registry.mark_reachable(realistic_agent(5).id)
    registry.admit_agent(realistic_agent(5))
    leader.store.store(registry)
    later = snapshot(client, url)
    assert changed(after, later) == {zk._record_shard("agents", realistic_agent(5).id)}
    assert zk._record_shard("unreachable", realistic_agent(5).id) not in later
    assert reload(client, url) == registry


def test_removing_the_last_agent_of_a_bucket_deletes_its_shard(masters, client, url):
    leader = masters().wait_until_leading()
    registry = leader.store.load()
    registry.admit_agent(realistic_agent(1))
    leader.store.store(registry)
    shard = zk._record_shard("agents", realistic_agent(1).id)
    assert shard in snapshot(client, url)
    registry.remove_agent(realistic_agent(1).id)
    leader.store.store(registry)
    assert shard not in snapshot(client, url)
    assert reload(client, url) == registry and registry.removed_agents == [realistic_agent(1).id]


def test_removed_ids_are_kept_in_order_in_chunks_and_only_the_touched_chunks_are_written(
        masters, client, url, monkeypatch):
    monkeypatch.setattr(registry_module, "MAX_REMOVED", 25)
    monkeypatch.setattr(zk, "MAX_REMOVED", 25)
    monkeypatch.setattr(zk, "REMOVED_CHUNK", 10)
    leader = masters().wait_until_leading()
    registry = leader.store.load()
    for i in range(23):
        registry.remove_agent(f"a{i}")
    leader.store.store(registry)
    assert sorted(name for name in snapshot(client, url) if name.startswith("removed_agents")) == \
        ["removed_agents.0", "removed_agents.1", "removed_agents.2"]
    before = snapshot(client, url)
    registry.remove_agent("a23")  # appends to the last chunk
    leader.store.store(registry)
    after = snapshot(client, url)
    assert changed(before, after) == {"removed_agents.2"}
    for i in range(24, 31):  # now the oldest are forgotten: the first chunk shrinks, then goes
        registry.remove_agent(f"a{i}")
        leader.store.store(registry)
    assert registry.removed_agents == [f"a{i}" for i in range(6, 31)]
    assert sorted(name for name in snapshot(client, url) if name.startswith("removed_agents")) == \
        ["removed_agents.0", "removed_agents.1", "removed_agents.2", "removed_agents.3"]
    assert json.loads(snapshot(client, url)["removed_agents.0"][0])["first"] == 6
    assert reload(client, url).removed_agents == registry.removed_agents
    for i in range(31, 35):
        registry.remove_agent(f"a{i}")
    leader.store.store(registry)
    assert "removed_agents.0" not in snapshot(client, url)
    # a new leader continues the same chunks
    successor = ZooKeeperRegistry(client, url.path)
    loaded = successor.load()
    assert loaded.removed_agents == [f"a{i}" for i in range(10, 35)]
    loaded.remove_agent("a35")
    before = snapshot(client, url)
    successor.store(loaded, leader.contender.fence())
    after = snapshot(client, url)
    assert changed(before, after) == {"removed_agents.1", "removed_agents.3"}
    assert json.loads(after["removed_agents.1"][0])["first"] == 11  # a10 forgotten


# ----------------------------------------------------------------- fencing
def test_after_a_write_zookeeper_did_not_answer_in_time_the_next_store_reads_and_writes_everything(
        masters, client, url):
    """A loaded ZooKeeper that takes longer than the timeout to answer leaves
    a write's outcome unknown; the leader then made every later store fail
    as fenced ("load() it before storing") and stopped serving for good. Now
    the next store reads what is stored and writes the whole registry over it."""
    from mesoslike.ha.zookeeper import ZooKeeperError

    leader = masters().wait_until_leading()
    registry = leader.load_and_store(500)
    for i in range(500, 700):
        registry.admit_agent(realistic_agent(i))
    leader.registry._timeout = 0.0   # no answer is waited for: the outcome is unknown
    with pytest.raises(ZooKeeperError) as unknown:
        leader.store.store(registry)
    assert not isinstance(unknown.value, FencingError)
    assert registry.changes().agents   # not marked stored
    leader.registry._timeout = 30.0
    registry.admit_agent(realistic_agent(700))
    leader.store.store(registry)
    assert not registry.changes()
    assert reload(client, url) == registry


def test_a_deposed_leaders_write_is_refused_and_changes_nothing(masters, client, url):
    first = masters("a").wait_until_leading()
    registry = first.load_and_store(100)
    second = masters("bb")
    old_fence = first.contender.fence()
    client.delete(old_fence)  # as if its session had expired
    second.wait_until_leading()
    before = snapshot(client, url)
    registry.admit_agent(realistic_agent(100))
    registry.remove_agent(realistic_agent(5).id)
    with pytest.raises(FencingError, match="not the leader any more: its election znode .* is gone"):
        first.registry.store(registry, old_fence)
    assert snapshot(client, url) == before
    assert registry.changes().agents == {realistic_agent(100).id, realistic_agent(5).id}  # not marked stored
    with pytest.raises(FencingError, match="load"):  # it must read again before any write
        first.registry.store(registry, second.contender.fence())
    # rejoined under a new znode, which exists: still not the leader that read the registry
    wait_until(lambda: first.contender._znode not in (None, old_fence), 15.0, "the old leader to rejoin")
    first.registry.load()  # even with what it knows up to date
    with pytest.raises(FencingError, match=f"not the leader any more: it read the registry as {old_fence}"):
        first.store.store(registry)
    assert snapshot(client, url) == before
    successor = second.store.load()
    assert successor == reload(client, url) and len(successor.agents) == 100


def test_a_write_bigger_than_one_transaction_is_split_and_every_part_is_fenced(
        masters, client, url, monkeypatch):
    leader = masters().wait_until_leading()
    transactions = []
    real = leader.contender.client.transaction

    def recording_transaction():
        transaction = real()
        transactions.append(transaction)
        return transaction
    monkeypatch.setattr(leader.contender.client, "transaction", recording_transaction)
    registry = leader.load_and_store(20_000)  # about 3 MB
    assert len(transactions) >= 3
    fence = leader.contender.fence()
    for transaction in transactions:
        assert transaction.operations[0] == CheckVersion(fence, -1)
        assert len(Transaction(transaction.operations).serialize()) <= zk.MAX_REGISTRY_BYTES
    assert reload(client, url) == registry

    # refused as a whole when the fence is gone: no part is written
    before = snapshot(client, url)
    for i in range(20_000):
        registry.admit_agent(AgentInfo("moved", RESOURCES, id=realistic_agent(i).id))
    client.delete(fence)
    with pytest.raises(FencingError, match="not the leader any more"):
        leader.store.store(registry)  # the contender has not noticed yet: it still has a fence to give
    assert snapshot(client, url) == before


def test_a_split_write_that_fails_halfway_leaves_every_shard_whole(masters, client, url):
    leader = masters().wait_until_leading()
    registry = leader.load_and_store(20_000)
    before = snapshot(client, url)
    # someone rewrites one shard behind the leader's back (only a bug or an operator could)
    victim = sorted(name for name in before if name.startswith("agents."))[-1]
    client.set(f"{url.path}/registry/{victim}", before[victim][0])
    for i in range(20_000):
        registry.admit_agent(AgentInfo(f"new-{i}", RESOURCES, id=realistic_agent(i).id))
    with pytest.raises(FencingError, match=f"registry changed under us: .*{victim}"):
        leader.store.store(registry)
    after = snapshot(client, url)
    assert after[victim][0] == before[victim][0]  # that transaction wrote nothing
    assert any(after[name] != before[name] for name in before if name != victim)  # earlier ones did
    loaded = reload(client, url)
    assert set(loaded.agents) == set(registry.agents)  # each record is the old one or the new one
    assert {loaded.agents[realistic_agent(i).id].hostname[:4] for i in range(20_000)} == {"new-", "ip-1"}
    with pytest.raises(FencingError, match="load"):
        leader.store.store(registry)


# ----------------------------------------------------------------- bad input
def test_a_corrupt_shard_is_skipped_with_a_warning_and_the_rest_loads(masters, client, url, caplog):
    leader = masters().wait_until_leading()
    registry = leader.store.load()
    for i in range(200):
        registry.admit_agent(realistic_agent(i))
    registry.add_framework(FrameworkInfo("fw", id="f1"))
    leader.store.store(registry)
    node = f"{url.path}/registry"
    corrupt = zk._record_shard("agents", realistic_agent(0).id)
    lost = {agent_id for agent_id in registry.agents if zk._record_shard("agents", agent_id) == corrupt}
    client.set(f"{node}/{corrupt}", b"\x00 not json")
    half = zk._record_shard("agents", realistic_agent(1).id)
    record = json.loads(client.get(f"{node}/{half}")[0])
    record["agents"][realistic_agent(1).id]["resources"] = "cpus:lots"
    client.set(f"{node}/{half}", json.dumps(record).encode())
    client.create(f"{node}/notes.txt", b"left by an operator")
    client.set(f"{node}/{zk._record_shard('frameworks', 'f1')}", b"[]")
    with caplog.at_level(logging.WARNING, logger="mesoslike"):
        successor = ZooKeeperRegistry(client, url.path)
        loaded = successor.load()
    assert set(loaded.agents) == set(registry.agents) - lost - {realistic_agent(1).id}
    assert loaded.frameworks == {}
    assert f"skipping the shard {node}/{corrupt}" in caplog.text
    assert f"skipping agent '{realistic_agent(1).id}'" in caplog.text
    assert "ignoring" in caplog.text and "notes.txt" in caplog.text
    # the new leader serves on: a change rewrites the broken shard with what it knows
    loaded.admit_agent(realistic_agent(0))
    successor.store(loaded, leader.contender.fence())
    assert reload(client, url) == loaded
    assert client.get(f"{node}/notes.txt")[0] == b"left by an operator"  # foreign children are left alone


def test_records_found_in_the_wrong_bucket_are_moved_at_the_next_store(masters, client, url):
    leader = masters().wait_until_leading()
    registry = leader.store.load()
    registry.admit_agent(realistic_agent(1))
    leader.store.store(registry)
    node = f"{url.path}/registry"
    stray = realistic_agent(2)
    client.create(f"{node}/agents.5000", json.dumps(  # as a different bucket count would place it
        {"format": 1, "agents": {stray.id: registry_module.agent_record(stray)}}).encode())
    successor = ZooKeeperRegistry(client, url.path)
    loaded = successor.load()
    assert set(loaded.agents) == {realistic_agent(1).id, stray.id}
    successor.store(loaded, leader.contender.fence())
    names = set(snapshot(client, url))
    assert "agents.5000" not in names and zk._record_shard("agents", stray.id) in names
    assert reload(client, url) == loaded


# ----------------------------------------------------------------- the old format
def test_the_old_one_document_format_is_loaded_and_converted_by_the_first_store(masters, client, url, caplog):
    old = realistic_registry(300)
    node = f"{url.path}/registry"
    client.ensure_path(url.path)
    client.create(node, json.dumps(old.to_document(), separators=(",", ":")).encode())
    # a conversion interrupted before: one shard written, the document still in place
    client.create(f"{node}/agents.0000", b'{"format":1,"agents":{"ghost":{"hostname":"x","resources":"cpus:1"}}}')
    leader = masters().wait_until_leading()
    with caplog.at_level(logging.INFO, logger="mesoslike.ha"):
        registry = leader.store.load()
    assert registry == old and "the first store converts it" in caplog.text
    assert reload(client, url) == old  # until then, every reader reads the document
    leader.store.store(registry)  # nothing changed, yet the layout is converted
    header, version = snapshot(client, url)[""]
    assert json.loads(header) == {"format": 1, "layout": "sharded", "agent_buckets": zk.AGENT_BUCKETS,
                                  "framework_buckets": zk.FRAMEWORK_BUCKETS, "removed_chunk": zk.REMOVED_CHUNK}
    assert version == 1
    assert reload(client, url) == old  # no ghost
    assert ZooKeeperRegistry(client, url.path).load() == old
    registry.admit_agent(realistic_agent(1000))
    assert leader.registry.store(registry, leader.contender.fence()) == 1  # incremental from now on
