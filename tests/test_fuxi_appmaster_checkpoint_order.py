"""What a job's AppMaster sends before its turn's checkpoint and what after
(mesoslike_frameworks/fuxi/appmaster.py, ``_flush``): a worker whose result
the turn took gets its next ASSIGN before the fsync, so it runs while the
disk writes; the ACK of the result (which lets the worker forget it) and a
RELEASE (the worker exits) only once the checkpoint holds it. Real sockets
on 127.0.0.1 (the harness of test_fuxi_appmaster_news); the checkpoint's
save is watched — what reached the worker while it ran — not replaced."""

from __future__ import annotations

import time

import pytest

from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol
from test_fuxi_appmaster_news import JOB, assigned, harness  # noqa: F401 - harness: its fixture

pytestmark = pytest.mark.timeout(60)


def test_the_next_assign_goes_out_before_the_checkpoint_and_the_ack_and_release_after(harness, monkeypatch):
    harness.tell(protocol.SlotGranted(JOB, "s1", "u", "h1", "er0"))
    harness.join("s1")
    harness.turn_until(lambda: assigned(harness.heard["s1"]) == [0], "instance 0 to be assigned")
    worker = harness.workers["s1"]
    during_save: list[list] = []
    real_save = harness.appmaster.checkpoint.save

    def watched_save(core) -> None:
        # what the worker receives while the checkpoint is being written (the AppMaster's loop is in here)
        # (the first one: until the next ASSIGN arrives, which it never would if it were sent after)
        heard: list = []
        deadline = time.monotonic() + (3.0 if not during_save else 0.2)
        while time.monotonic() < deadline and not any(isinstance(m, amp.Assign) for m in heard):
            if worker.wait(0.05):
                heard += [amp.decode(frame) for _, frame in worker.receive_frames()]
        during_save.append(heard)
        harness.heard["s1"] += heard
        real_save(core)

    monkeypatch.setattr(harness.appmaster.checkpoint, "save", watched_save)
    worker.send(amp.Done("s1", 0, 1, True, "exit status 0"))
    worker.flush()
    harness.turn_until(lambda: any(isinstance(m, amp.Ack) for m in harness.heard["s1"]), "the ACK of instance 0")
    first = during_save[0]
    assert [(m.instance, m.attempt) for m in first if isinstance(m, amp.Assign)] == [(1, 1)]
    assert not any(isinstance(m, (amp.Ack, amp.Release)) for m in first)
    # the last result: the worker is released, after the checkpoint that holds the result
    worker.send(amp.Done("s1", 1, 1, True, "exit status 0"))
    worker.flush()
    harness.turn_until(lambda: any(isinstance(m, amp.Release) for m in harness.heard["s1"]), "the release")
    assert not any(isinstance(m, (amp.Ack, amp.Release)) for heard in during_save for m in heard)
    assert harness.appmaster.core.state == "succeeded"
