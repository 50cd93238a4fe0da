"""Named records in ZooKeeper (mesoslike.ha.record_store): whole and chunked
records read back as written, only the leader writes, an interrupted write
leaves the old record readable and its stray chunks are cleaned up — against
a real ZooKeeper from ``zk_helpers``."""

from __future__ import annotations

import itertools
import os

import pytest

from mesoslike import MasterContender, ZkUrl, ZooKeeperRecordStore
from mesoslike.ha import FencingError, RegistryError
from mesoslike.ha.zookeeper import MAX_REGISTRY_BYTES
from waiting import wait_until
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(60)

_paths = itertools.count()


@pytest.fixture
def url(zookeeper):
    return ZkUrl(hosts=zookeeper.hosts, path=f"/mesoslike-test/records{next(_paths)}")


@pytest.fixture
def contenders(url):
    started: list[MasterContender] = []

    def start(name: str) -> MasterContender:
        contender = MasterContender(url, {"address": f"tcp://127.0.0.1:{6000 + len(started)}", "id": name},
                                    on_elected=lambda: None, on_demoted=lambda reason: None)
        contender.start()
        started.append(contender)
        return contender

    yield start
    for contender in started:
        contender.stop()


def store_of(contender: MasterContender, url: ZkUrl) -> ZooKeeperRecordStore:
    # "registry": the one child of an election group that is not a member
    return ZooKeeperRecordStore(contender.client, f"{url.path}/registry", contender.fence)


def test_whole_and_chunked_records_read_back_and_replace_each_other(url, contenders):
    leader = contenders("a")
    wait_until(lambda: leader.is_leader, 15, "a leader")
    store = store_of(leader, url)
    assert store.load() == {}
    big = os.urandom(3 * MAX_REGISTRY_BYTES + 12345)   # four chunks
    store.write({"service": b'{"generation": 1}', "job.job-0001": big, "job.job-0002": b"small"})
    fresh = store_of(leader, url)
    assert fresh.load() == {"service": b'{"generation": 1}', "job.job-0001": big, "job.job-0002": b"small"}
    chunks = [n for n in leader.client.get_children(f"{url.path}/registry") if "~" in n]
    assert len(chunks) == 4
    # a chunked record becomes small, a small one chunked; the old chunks go
    bigger = os.urandom(2 * MAX_REGISTRY_BYTES)
    fresh.write({"job.job-0001": b"now small", "job.job-0002": bigger}, deleted=["service"])
    assert store_of(leader, url).load() == {"job.job-0001": b"now small", "job.job-0002": bigger}
    assert len([n for n in leader.client.get_children(f"{url.path}/registry") if "~" in n]) == 3
    fresh.write({}, deleted=["job.job-0002"])
    assert store_of(leader, url).load() == {"job.job-0001": b"now small"}
    assert [n for n in leader.client.get_children(f"{url.path}/registry")] == ["job.job-0001"]


def test_only_the_holder_of_the_fence_writes(url, contenders):
    first = contenders("a")
    wait_until(lambda: first.is_leader, 15, "a leader")
    second = contenders("b")
    stale = store_of(first, url)
    stale.load()
    stale.write({"service": b"1"})
    fence = first.fence()
    loaded_before = store_of(first, url)
    loaded_before.load()
    second.client.delete(fence)                     # its znode goes (its session expired, say)
    with pytest.raises(FencingError):               # refused by ZooKeeper, or because it rejoined since
        stale.write({"service": b"stale"})
    with pytest.raises(FencingError, match="load|not the leader"):
        stale.write({"service": b"stale again"})     # and after a failed write it must read first
    wait_until(lambda: first.fence() != fence, 15, "the first to rejoin under a new znode")
    with pytest.raises(FencingError, match="it read the records as"):
        loaded_before.write({"service": b"stale"})
    first.stop()
    wait_until(lambda: second.is_leader, 15, "the second to lead")
    store = store_of(second, url)
    assert store.load() == {"service": b"1"}
    store.write({"service": b"2"})
    assert store_of(second, url).load() == {"service": b"2"}


def test_an_interrupted_write_leaves_the_old_record_and_its_strays_are_cleaned_up(url, contenders):
    leader = contenders("a")
    wait_until(lambda: leader.is_leader, 15, "a leader")
    store = store_of(leader, url)
    store.load()
    store.write({"job.j": b"old"})
    # the first phase of a chunked write happened (new chunks), the header never changed
    leader.client.create(f"{url.path}/registry/job.j~{'ab' * 8}.0", b"half of a new")
    fresh = store_of(leader, url)
    assert fresh.load() == {"job.j": b"old"}
    fresh.write({"other": b"x"})
    assert sorted(leader.client.get_children(f"{url.path}/registry")) == ["job.j", "other"]
    # a header naming chunks that are not there is damage, said as such
    leader.client.set(f"{url.path}/registry/other", b'C{"tag": "00", "chunks": 2, "size": 5, "crc": 1}')
    with pytest.raises(RegistryError, match="other is damaged"):
        store_of(leader, url).load()
    with pytest.raises(RegistryError, match="bad record name"):
        fresh.write({"no/slashes": b""})
