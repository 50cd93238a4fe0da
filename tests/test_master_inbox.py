"""The master's inbox: registrations wait behind everything else; one peer's frames keep their order."""

import pytest

from mesoslike.master.inbox import Inbox
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo, TaskState, TaskStatus, WireError, encode
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(30)

REG = encode(m.ReregisterAgent(AgentInfo("h", Resources.parse("cpus:1"), id="a1")))
NEW = encode(m.RegisterAgent(AgentInfo("h", Resources.parse("cpus:1"))))
SUB = encode(m.Subscribe(FrameworkInfo("f")))
PONG = encode(m.Pong("a1"))


def test_registrations_wait_behind_everything_else():
    inbox = Inbox()
    for i in range(3):
        inbox.add(b"agent%d" % i, REG)
    inbox.add(b"new", NEW)
    inbox.add(b"fw", SUB)
    bad = WireError("expected one frame, got 2")
    inbox.add(None, bad)
    assert len(inbox) == 6 and inbox.deferred == 4
    assert inbox.take(2) == [(b"fw", SUB), (None, bad)]
    assert inbox.take(10) == [(b"agent0", REG), (b"agent1", REG), (b"agent2", REG), (b"new", NEW)]
    assert len(inbox) == 0 and inbox.take(5) == []


def test_a_peers_frames_keep_their_order_behind_its_registration():
    inbox = Inbox()
    inbox.add(b"a1", PONG)          # before its registration: goes first
    inbox.add(b"a1", REG)
    inbox.add(b"a1", PONG)          # after it: waits behind it
    inbox.add(b"fw", SUB)
    assert inbox.take(10) == [(b"a1", PONG), (b"fw", SUB), (b"a1", REG), (b"a1", PONG)]
    inbox.add(b"a1", PONG)          # nothing of a1 waits any more: urgent again
    assert inbox.deferred == 0 and inbox.take(1) == [(b"a1", PONG)]


def test_take_respects_its_limit_and_clear_empties():
    inbox = Inbox()
    for i in range(5):
        inbox.add(b"p%d" % i, REG)
    assert len(inbox.take(2)) == 2 and len(inbox) == 3
    inbox.clear()
    assert len(inbox) == 0 and inbox.deferred == 0
    inbox.add(b"p0", PONG)          # no stale per-peer count after clear
    assert inbox.deferred == 0


def test_take_stops_urgent_frames_once_they_hold_max_bytes_and_takes_at_least_one():
    # a frame may be a batch of a thousand updates: a turn is bounded by its bytes, so that its
    # answers go out before the next thousands are handled
    inbox = Inbox()
    big = encode(m.StatusUpdates([m.StatusUpdate("f", TaskStatus(f"t{i}", TaskState.RUNNING, uuid=f"{i:032x}"))
                                  for i in range(100)]))
    for i in range(4):
        inbox.add(b"agent", big)
    assert inbox.take(10, max_bytes=1) == [(b"agent", big)]                    # one, however large
    assert inbox.take(10, max_bytes=len(big) + 1) == [(b"agent", big)] * 2    # the second passes the budget
    assert inbox.take(10, max_bytes=10 * len(big)) == [(b"agent", big)]
    assert len(inbox) == 0


def test_registrations_are_taken_by_count_whatever_the_bytes():
    # after a failover registrations come by the thousand, one a frame: a turn takes as many as before
    inbox = Inbox()
    inbox.add(b"fw", SUB)
    for i in range(3):
        inbox.add(b"agent%d" % i, REG)
    assert inbox.take(10, max_bytes=1) == [(b"fw", SUB), (b"agent0", REG), (b"agent1", REG), (b"agent2", REG)]


def test_a_registration_repeating_one_still_waiting_is_dropped():
    inbox = Inbox()
    other = encode(m.ReregisterAgent(AgentInfo("h", Resources.parse("cpus:2"), id="a1")))
    inbox.add(b"a1", REG)
    inbox.add(b"a1", REG)           # the agent retried while it waited: dropped
    inbox.add(b"a2", REG)           # another peer's is its own
    inbox.add(b"a1", other)         # a different registration is kept, in order
    inbox.add(b"a1", other)
    assert inbox.duplicates == 2 and len(inbox) == 3
    assert inbox.take(10) == [(b"a1", REG), (b"a2", REG), (b"a1", other)]
    inbox.add(b"a1", REG)           # handled already: a retry now is handled again
    assert inbox.take(10) == [(b"a1", REG)] and inbox.duplicates == 2


def test_add_says_when_a_registration_was_dropped_as_a_repeat():
    # the runtime counts what the inbox drops (received, and a metric), so no frame goes uncounted
    inbox = Inbox(peek=lambda frame: "REGISTER_AGENT" if frame.startswith(b"reg") else "PONG")
    assert inbox.add(b"a", b"reg1") is True
    assert inbox.add(b"a", b"reg1") is False and inbox.duplicates == 1
    assert inbox.add(b"a", b"reg2") is True    # a different registration is kept
    assert inbox.add(b"b", b"reg1") is True    # another peer's
    assert inbox.add(b"a", b"pong") is True


def test_the_inbox_counts_the_bytes_it_holds():
    inbox = Inbox()
    bad = WireError("expected one frame, got 2")
    inbox.add(b"fw", SUB)
    inbox.add(b"a1", REG)
    inbox.add(b"a1", REG)           # a repeat, dropped: not held
    inbox.add(None, bad)            # an error counts one
    assert inbox.bytes == len(SUB) + len(REG) + 1
    inbox.take(1)
    assert inbox.bytes == len(REG) + 1
    inbox.take(10)
    assert inbox.bytes == 0 and len(inbox) == 0
    inbox.add(b"fw", SUB)
    inbox.clear()
    assert inbox.bytes == 0


@pytest.mark.parametrize("bound", ["frames", "bytes"])
def test_a_peer_sending_faster_than_the_master_handles_fills_the_socket_not_the_master(monkeypatch, bound):
    # the master takes nothing more from its socket while its inbox is at its bound (in frames or in bytes):
    # a flood waits in ZeroMQ's queues, which push back on the sender, and every frame is still handled
    import mesoslike.master.runtime as runtime_module
    from mesoslike.master.runtime import MasterRuntime
    from mesoslike.master.settings import MasterSettings
    from mesoslike.transport import Client
    from waiting import wait_until

    frame, count = b"x" * 512, 1500   # each answered ERROR (bad message): cheap to handle
    monkeypatch.setattr(runtime_module, "_BATCH", 50)
    if bound == "frames":
        monkeypatch.setattr(runtime_module, "_INBOX_FRAMES", 100)
    else:
        monkeypatch.setattr(runtime_module, "_INBOX_BYTES", 40 * len(frame))
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None))
    held = {"frames": 0, "bytes": 0}
    inbox, add = runtime._inbox, runtime._inbox.add

    def noting(peer, received):
        kept = add(peer, received)
        held["frames"], held["bytes"] = max(held["frames"], len(inbox)), max(held["bytes"], inbox.bytes)
        return kept
    inbox.add = noting   # type: ignore[method-assign]
    runtime.start()
    try:
        with Client(runtime.address) as peer:
            for i in range(count):
                assert peer.send_frame(frame)
                if i % 100 == 99:   # read the answers, as a peer would
                    peer.wait(0.0)
                    list(peer.receive_frames())

            def handled() -> bool:
                peer.wait(0.0)
                list(peer.receive_frames())
                with runtime._lock:
                    return runtime.core.counters["bad_messages"] >= count
            wait_until(handled, 20, f"the master to handle all {count} frames")
        with runtime._lock:
            assert runtime.core.counters["bad_messages"] == count   # none dropped
        if bound == "frames":
            assert 50 <= held["frames"] <= 100, held   # it filled, and never past its bound
        else:
            assert 20 * len(frame) <= held["bytes"] <= 40 * len(frame), held
    finally:
        runtime.stop()
