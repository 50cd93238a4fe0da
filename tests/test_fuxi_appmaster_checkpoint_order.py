"""What a job's AppMaster sends before its checkpoint is written and what
after (mesoslike_frameworks/fuxi/appmaster.py, ``_flush``; checkpoint.py,
``Writer``): a worker whose result a turn took gets its next ASSIGN at once,
so it runs while the disk writes; the ACK of the result (which lets the
worker forget it) and a RELEASE (the worker exits) only once the checkpoint
holds it. The checkpoint is written by a thread of its own: while a write
is in flight the loop goes on, takes other workers' results and hands them
their next instances, whose ACKs wait for the next write. Real sockets on
127.0.0.1 (the harness of test_fuxi_appmaster_news); the checkpoint's
writes are held at a gate — what reached the workers meanwhile is watched
— not replaced."""

from __future__ import annotations

import threading

import pytest

from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi import appmaster as appmaster_module
from test_fuxi_appmaster_news import JOB, Harness, assigned, harness  # noqa: F401 - harness: its fixture

pytestmark = pytest.mark.timeout(60)


class GatedWrites:
    """The checkpoint's writes, each held until the test opens the gate."""

    def __init__(self, checkpoint, monkeypatch) -> None:
        self.real = checkpoint.write
        self.gate = threading.Semaphore(0)
        self.started = 0
        self.written: list = []
        monkeypatch.setattr(checkpoint, "write", self.write)

    def write(self, write) -> None:   # on the writer's thread
        self.started += 1
        if not self.gate.acquire(timeout=20):
            raise OSError("the test never opened the gate")
        self.real(write)
        self.written.append(write)


def acks(heard: list) -> list[int]:
    return [m.instance for m in heard if isinstance(m, amp.Ack)]


def test_the_next_assign_goes_out_before_the_checkpoint_and_the_ack_and_release_after(harness, monkeypatch):
    harness.tell(protocol.SlotGranted(JOB, "s1", "u", "h1", "er0"))
    harness.join("s1")
    harness.turn_until(lambda: assigned(harness.heard["s1"]) == [0], "instance 0 to be assigned")
    worker = harness.workers["s1"]
    writes = GatedWrites(harness.appmaster.checkpoint, monkeypatch)
    worker.send(amp.Done("s1", 0, 1, True, "exit status 0"))
    worker.flush()
    harness.turn_until(lambda: assigned(harness.heard["s1"]) == [0, 1] and writes.started == 1,
                       "the next ASSIGN while the checkpoint is written")
    for _ in range(5):   # the loop goes on; the ACK waits for the write
        harness.turn_until(lambda: True)
    assert acks(harness.heard["s1"]) == [] and not writes.written
    writes.gate.release()
    harness.turn_until(lambda: acks(harness.heard["s1"]) == [0], "the ACK of instance 0 once it is written")
    # the last result: the worker is released, after the write that holds the result
    worker.send(amp.Done("s1", 1, 1, True, "exit status 0"))
    worker.flush()
    harness.turn_until(lambda: writes.started == 2, "the last result's write")
    for _ in range(5):
        harness.turn_until(lambda: True)
    assert not any(isinstance(m, amp.Release) for m in harness.heard["s1"]) and acks(harness.heard["s1"]) == [0]
    writes.gate.release()
    harness.turn_until(lambda: any(isinstance(m, amp.Release) for m in harness.heard["s1"]), "the release")
    assert acks(harness.heard["s1"]) == [0, 1]
    assert harness.appmaster.core.state == "succeeded"
    writes.gate.release(10)   # whatever else is written (the end) goes through


def test_results_that_come_while_the_checkpoint_is_written_are_taken_and_go_into_the_next_write(harness, monkeypatch):
    for slot in ("s1", "s2"):
        harness.tell(protocol.SlotGranted(JOB, slot, "u", "h1", "er0"))
        harness.join(slot)
    harness.turn_until(lambda: assigned(harness.heard["s1"]) and assigned(harness.heard["s2"]), "both to run")
    (first,), (second,) = assigned(harness.heard["s1"]), assigned(harness.heard["s2"])
    writes = GatedWrites(harness.appmaster.checkpoint, monkeypatch)
    harness.workers["s1"].send(amp.Done("s1", first, 1, True, "exit status 0"))
    harness.workers["s1"].flush()
    harness.turn_until(lambda: writes.started == 1, "the first result's write")
    # s1's write is held; s2's result comes: taken at once, not after the write
    harness.workers["s2"].send(amp.Done("s2", second, 1, True, "exit status 0"))
    harness.workers["s2"].flush()
    harness.turn_until(lambda: harness.appmaster.core.progress_report()["instances"]["done"] == 2,
                       "the second result while the first is written")
    assert writes.started == 1 and acks(harness.heard["s1"]) == [] and acks(harness.heard["s2"]) == []
    writes.gate.release()
    harness.turn_until(lambda: acks(harness.heard["s1"]) == [first] and writes.started == 2,
                       "the first ACK, and the second result's write")
    assert acks(harness.heard["s2"]) == []   # its result is in the write now in flight
    writes.gate.release(10)
    harness.turn_until(lambda: acks(harness.heard["s2"]) == [second], "the second ACK")
    journal = b"".join(w.journal for w in writes.written)
    assert journal.count(b"\n") >= 2 and harness.appmaster.core.state == "succeeded"


def test_a_written_ack_rides_on_the_workers_next_assign_and_comes_before_its_release(tmp_path, monkeypatch):
    monkeypatch.setattr(appmaster_module, "ACK_CARRY", 30.0)   # no ACK in a frame of its own unless it must
    h = Harness(tmp_path, instances=4)
    try:
        h.tell(protocol.SlotGranted(JOB, "s1", "u", "h1", "er0"))
        h.join("s1")
        h.turn_until(lambda: assigned(h.heard["s1"]) == [0], "instance 0 to be assigned")
        worker = h.workers["s1"]
        worker.send(amp.Done("s1", 0, 1, True, "exit status 0"))
        worker.flush()
        # short instances: its next one, and the one after queued
        h.turn_until(lambda: assigned(h.heard["s1"]) == [0, 1, 2], "instances 1 and 2 (queued)")
        h.turn_until(lambda: not h.appmaster._writer.busy and h.appmaster._acks, "the write of instance 0")
        worker.send(amp.Done("s1", 1, 1, True, "exit status 0"))
        worker.flush()
        h.turn_until(lambda: assigned(h.heard["s1"]) == [0, 1, 2, 3], "instance 3 queued")
        carried = [m for m in h.heard["s1"] if isinstance(m, amp.Assign) and m.instance == 3][0]
        assert carried.acks == [[0, 1]] and acks(h.heard["s1"]) == []
        for instance in (2, 3):
            worker.send(amp.Done("s1", instance, 1, True, "exit status 0"))
        worker.flush()
        h.turn_until(lambda: any(isinstance(m, amp.Release) for m in h.heard["s1"]), "the release")
        # the ACKs no ASSIGN carried go in frames of their own, before the RELEASE
        heard = [type(m).__name__ for m in h.heard["s1"] if isinstance(m, (amp.Ack, amp.Release))]
        assert heard == ["Ack", "Ack", "Ack", "Release"] and acks(h.heard["s1"]) == [1, 2, 3]
    finally:
        h.close()
