"""A standby master's copy of the registry (mesoslike.ha.registry_store.RegistryMirror,
docs/ha.rst "Standby masters keep the registry loaded"): kept current by
ZooKeeper watches, it hands the master that takes over the registry its
predecessor wrote — to the last write before it died — reading only the
znodes that changed, against a real ZooKeeper from ``zk_helpers``."""

from __future__ import annotations

import logging
import threading

import pytest
from kazoo.protocol.states import Callback

from mesoslike.ha import FencedRegistryStore, RegistryMirror, ZooKeeperRegistry, connect
from mesoslike.wire import FrameworkInfo
from test_zookeeper_registry_layout import client, masters, realistic_agent, reload, url  # noqa: F401 (fixtures)
from waiting import wait_until
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def standby_client(zookeeper, url):  # noqa: F811
    client = connect(url, timeout=10.0)
    yield client
    client.stop()
    client.close()


def test_the_new_leader_takes_the_mirror_with_the_last_writes_of_its_predecessor(masters, url, client,  # noqa: F811
                                                                                  standby_client):
    leader = masters("a").wait_until_leading()
    registry = leader.load_and_store(2000)
    mirror = RegistryMirror(standby_client, url.path, timeout=30.0)
    # counted through the standby's client, the one waited for above: the other client may still be
    # reconnecting, or find its session expired (ZooKeeper restarts its sessions' clocks when it starts)
    znodes = len(standby_client.get_children(f"{url.path}/registry"))
    assert mirror.refresh() == znodes + 2   # the first refresh reads every shard, the header and the list
    assert mirror.complete
    assert mirror.refresh() == 0                   # nothing changed: nothing read
    # the leader's last writes, not yet refreshed: only the watches know of them
    for i in range(2000, 2003):
        registry.admit_agent(realistic_agent(i))
    registry.remove_agent(realistic_agent(7).id)
    registry.add_framework(FrameworkInfo("late", "role1", 60.0, id="0123abcd-Flate"))
    registry.update_weights({"role0": 3.0})
    leader.store.store(registry)
    leader.contender.stop()   # its election znode goes: the standby may take over

    read_before = mirror.reads
    successor = ZooKeeperRegistry(standby_client, url.path, timeout=30.0, mirror=mirror)
    taken = successor.load()
    assert taken == reload(client, url) == registry
    assert realistic_agent(2002).id in taken.agents and realistic_agent(7).id not in taken.agents
    # the changed shards, the removed list's, the weights, the header and the list of children
    assert 0 < mirror.reads - read_before < 20
    # the versions came with it: the new leader writes over the znodes its predecessor wrote
    taken.admit_agent(realistic_agent(3000))
    successor.store(taken, "/")   # any existing znode fences this direct write
    assert reload(client, url) == taken
    assert not mirror.complete    # a leader does not mirror: the next standby term reads afresh


def test_a_quiet_mirror_has_the_registry_assembled_before_the_election_and_a_later_write_is_not_missed(
        masters, url, client, standby_client):  # noqa: F811
    """The standby assembles the registry while its copy is quiet
    (``prepare``): a take() that reads no znode hands that over — the same
    registry a fresh read gives — and one after a later write assembles
    afresh, with the write."""
    leader = masters("a").wait_until_leading()
    registry = leader.load_and_store(300)
    mirror = RegistryMirror(standby_client, url.path, timeout=30.0)
    mirror.refresh()
    assert mirror.refresh() == 0 and mirror.prepare()
    assert not mirror.prepare()   # nothing read since: already assembled
    leader.contender.stop()
    taken = ZooKeeperRegistry(standby_client, url.path, timeout=30.0, mirror=mirror).load()
    assert mirror.takes_prepared == 1 and taken == reload(client, url) == registry
    # taken again: assembled now, then a write the watches know of before the next take
    mirror.refresh()
    assert mirror.refresh() == 0 and mirror.prepare()
    taken.admit_agent(realistic_agent(5000))
    writer = ZooKeeperRegistry(client, url.path, timeout=30.0)
    writer.load()
    writer.store(taken, "/")   # any existing znode fences this direct write
    wait_until(lambda: not mirror.current, 30.0, "the write's watch to fire")
    again = ZooKeeperRegistry(standby_client, url.path, timeout=30.0, mirror=mirror).load()
    assert mirror.takes_prepared == 1   # not the one assembled before the write
    assert again == reload(client, url) == taken and realistic_agent(5000).id in again.agents


def test_a_mirror_whose_session_wavered_is_not_taken(masters, url, client, standby_client):  # noqa: F811
    leader = masters("a").wait_until_leading()
    leader.load_and_store(50)
    mirror = RegistryMirror(standby_client, url.path, timeout=30.0)
    mirror.refresh()
    mirror.invalidate()   # what a SUSPENDED or LOST session does: the watches may have missed changes
    assert not mirror.complete
    read_before = mirror.reads
    loaded = FencedRegistryStore(ZooKeeperRegistry(standby_client, url.path, mirror=mirror),
                                 leader.contender.fence).load()
    assert loaded == reload(client, url)
    assert mirror.reads == read_before   # not the mirror: the store read the registry itself
    # counted through the standby's client, the one waited for above: the other client may still be
    # reconnecting, or find its session expired (ZooKeeper restarts its sessions' clocks when it starts)
    znodes = len(standby_client.get_children(f"{url.path}/registry"))
    assert mirror.refresh() == znodes + 2   # and the next refresh reads everything again


def test_a_mirror_across_a_zookeeper_restart_reads_everything_again_without_an_error(  # noqa: F811
        zookeeper, masters, url, client, standby_client, caplog):  # noqa: F811
    # a lost connection makes kazoo call every watch with a session event (no path): the copy may have
    # missed changes, so it is not complete until a refresh reads every znode again
    leader = masters("a").wait_until_leading()
    leader.load_and_store(50)
    mirror = RegistryMirror(standby_client, url.path, timeout=30.0)
    mirror.refresh()
    assert mirror.current
    with caplog.at_level(logging.WARNING):
        zookeeper.stop()
        wait_until(lambda: not mirror.complete, 30, "the mirror to forget it is complete")
        zookeeper.start()
        wait_until(lambda: standby_client.connected and mirror.changed.is_set(), 60, "the standby to reconnect")
        ran = threading.Event()   # every watch callback queued before this one has run
        standby_client.handler.dispatch_callback(Callback("watch", ran.set, ()))
        assert ran.wait(30)
    raised = [r for r in caplog.records if r.exc_info is not None]
    assert raised == [], [r.getMessage() for r in raised]
    assert not mirror.complete
    # counted through the standby's client, the one waited for above: the other client may still be
    # reconnecting, or find its session expired (ZooKeeper restarts its sessions' clocks when it starts)
    znodes = len(standby_client.get_children(f"{url.path}/registry"))
    assert mirror.refresh() == znodes + 2
    assert mirror.current


def test_the_standby_mirror_follows_the_registry_s_creation(url, client, standby_client, masters):  # noqa: F811
    mirror = RegistryMirror(standby_client, url.path, timeout=30.0)
    mirror.refresh()   # no registry yet: a watch waits for it
    leader = masters("a").wait_until_leading()
    registry = leader.load_and_store(10)
    leader.contender.stop()
    taken = ZooKeeperRegistry(standby_client, url.path, mirror=mirror).load()
    assert taken == registry


# ----------------------------------------------------------------- the master runtime
import json  # noqa: E402
import urllib.request  # noqa: E402
import uuid  # noqa: E402

from mesoslike.ha import ZkUrl  # noqa: E402
from mesoslike.master.runtime import MasterRuntime  # noqa: E402
from mesoslike.master.settings import MasterSettings  # noqa: E402
from mesoslike.transport import Client  # noqa: E402
from mesoslike.wire import messages as m  # noqa: E402
from test_master_runtime import receive  # noqa: E402


def health(runtime: MasterRuntime) -> dict:
    with urllib.request.urlopen(f"{runtime.http_address}/health", timeout=5) as response:
        return json.loads(response.read())


def subscribed(address: str, name: str) -> str:
    with Client(address) as framework:
        framework.send(m.Subscribe(FrameworkInfo(name, failover_timeout=60.0)))
        return receive(framework, m.Subscribed, timeout=10.0).framework_id   # answered once stored


def test_a_standby_master_takes_over_with_the_registry_it_kept_current(zookeeper):  # noqa: F811
    url = ZkUrl.parse(zookeeper.url(f"mirror-{uuid.uuid4().hex[:8]}"))

    def settings() -> MasterSettings:
        return MasterSettings(address="tcp://127.0.0.1:0", http_port=0, zk=url, zk_session_timeout=4.0)
    leader = MasterRuntime(settings())
    leader.start()
    running = [leader]
    try:
        wait_until(lambda: leader.is_leader, 15, "the first leader")
        early = subscribed(leader.address, "early")
        standby = MasterRuntime(settings())
        standby.start()
        running.append(standby)
        wait_until(lambda: health(standby).get("registry_mirrored"), 15, "the standby's copy of the registry")
        late = subscribed(leader.address, "late")   # written after the copy was current: a watch tells
        running.remove(leader)
        leader.stop()                               # leaves the group: the standby is elected
        wait_until(lambda: standby.is_leader, 15, "the standby to lead")
        assert {early, late} <= set(standby.core.registry.frameworks)
        assert "registry_mirrored" not in health(standby)   # a leader keeps no copy
    finally:
        for runtime in running:
            runtime.stop()
