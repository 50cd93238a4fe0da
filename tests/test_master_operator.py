"""The operator's writes (mesoslike.master.operator) against a sans-I/O core
and a stand-in for the runtime: no sockets, no HTTP, no threads. The real
endpoints are tested in test_master_runtime.py."""

from __future__ import annotations

import json
import threading

import pytest

from mesoslike.clock import FakeClock
from mesoslike.http_server import Request
from mesoslike.master.core import MasterCore, Send
from mesoslike.master.operator import OperatorWrites, quota_request, weights_request
from mesoslike.master.records import MasterConfig
from mesoslike.wire import MasterInfo

pytestmark = pytest.mark.timeout(30)

LEADER = {"id": "other", "address": "tcp://10.0.0.2:5050", "http_address": "http://10.0.0.2:5051"}


class Master:
    """What OperatorWrites needs of a runtime. ``stores``: whether the
    loop stores the change (at once) when given the replies."""

    def __init__(self, leading: bool = True, stores: bool = True) -> None:
        self.stored = threading.Condition(threading.RLock())
        self.core = MasterCore(FakeClock(), MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig())
        self.leading = leading
        self.stores = stores
        self.dropped = False
        self.sent: list[Send] = []
        self.written = 0

    def serving_core(self) -> MasterCore | None:
        return self.core if self.leading else None

    def persisted(self, core: MasterCore) -> int | None:
        return None if self.dropped or core is not self.core else self.written

    def leader_info(self) -> dict[str, str]:
        return dict(LEADER)

    def send_later(self, sends: list[Send]) -> None:
        self.sent += sends
        if self.stores:
            self.written = self.core.registry_changes


def post(writes, path, document):
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return writes.actions[path](Request("POST", path, {}, body))


def test_a_write_is_answered_once_the_registry_holds_it():
    master = Master()
    writes = OperatorWrites(master)
    assert post(writes, "/weights", {"eng": 2.0}) == (200, {"ok": True})
    assert post(writes, "/quota", {"role": "eng", "guarantee": "cpus:2", "limit": "cpus:8;gpus:0", "force": True}) == \
        (200, {"ok": True})
    assert master.core.registry.weights == {"eng": 2.0}
    assert master.core.registry.quota == {"eng": {"guarantee": "cpus:2", "limit": "cpus:8;gpus:0"}}
    assert post(writes, "/quota", {"role": "eng"}) == (200, {"ok": True})   # neither: cleared
    assert master.core.registry.quota == {}


@pytest.mark.parametrize("path, body, error", [
    ("/weights", b"{not json", "not JSON"),
    ("/weights", {}, '{"role": weight, ...}'),
    ("/weights", ["eng", 2.0], '{"role": weight, ...}'),
    ("/weights", {"eng": "heavy"}, ""),
    ("/weights", {"eng": -1.0}, ""),
    ("/quota", {"guarantee": "cpus:1"}, '"role": R'),
    ("/quota", {"role": "eng", "guarantee": 2}, '"role": R'),
    ("/quota", {"role": "eng", "floor": "cpus:1"}, '"role": R'),
    ("/quota", {"role": "eng", "guarantee": "cpus:-1"}, "cpus"),
    ("/quota", {"role": "eng", "guarantee": "cpus:4", "limit": "cpus:2"}, ""),
])
def test_a_bad_request_is_refused_and_changes_nothing(path, body, error):
    master = Master()
    before = master.core.registry_changes
    code, reply = post(OperatorWrites(master), path, body)
    assert code == 400 and error in reply["error"]
    assert master.core.registry_changes == before and master.sent == []


def test_a_master_that_does_not_lead_names_the_leader():
    master = Master(leading=False)
    assert post(OperatorWrites(master), "/weights", {"eng": 2.0}) == \
        (409, {"error": "this master does not lead", "leader": LEADER})


def test_a_change_not_stored_in_time_is_reported_as_applied_but_not_stored():
    master = Master(stores=False)
    code, reply = post(OperatorWrites(master, store_timeout=0.01), "/weights", {"eng": 2.0})
    assert code == 503 and "not stored yet" in reply["error"]
    assert master.core.registry.weights == {"eng": 2.0}   # applied: the loop retries the write every turn


def test_a_core_dropped_before_the_change_was_stored_asks_for_a_retry():
    master = Master(stores=False)

    def drop(sends):
        master.sent += sends
        master.dropped = True   # the loop drops the core (and notifies)
    master.send_later = drop
    code, reply = post(OperatorWrites(master, store_timeout=5.0), "/weights", {"eng": 2.0})
    assert code == 503 and "stopped leading" in reply["error"]


def test_the_request_shapes():
    assert weights_request({"a": 1.0}) == {"a": 1.0}
    assert quota_request({"role": "a", "limit": "cpus:1"}) == ("a", None, "cpus:1", False)
    assert quota_request({"role": "a", "guarantee": "cpus:1", "force": True}) == ("a", "cpus:1", None, True)
    for bad in (None, "a", {"role": 1}, {"role": "a", "guarantee": None}, {"role": "a", "force": "yes"}):
        with pytest.raises(ValueError):
            quota_request(bad)
