"""The acknowledgements a ``SchedulerDriver`` sends for a run of updates
(``_invoke_updates``): ACKNOWLEDGEs only go out in ACKNOWLEDGEMENTS of
``SEND_BATCH`` (the same frames ``batched_messages`` makes), in the
updates' order; a callback's own send keeps its place among them; the
heartbeat's clock is read once a run (``note_sent``). In process, no socket
(as ``bench/control_core.py`` drives it)."""

from __future__ import annotations

import threading

import pytest

from mesoslike import Scheduler, SchedulerDriver
from mesoslike.driver.core import SubscriptionState
from mesoslike.driver.driver import DriverStatus
from mesoslike.wire import MasterInfo, TaskStatus
from mesoslike.wire import messages as m
from mesoslike.wire.batching import SEND_BATCH, batched_messages
from mesoslike.wire.types import FrameworkInfo

pytestmark = pytest.mark.timeout(60)


class Killing(Scheduler):
    """Kills task ``kill_at`` from its update's callback (None: never)."""

    def __init__(self, kill_at: str | None = None) -> None:
        self.kill_at = kill_at
        self.seen: list[str] = []

    def status_update(self, driver, status) -> None:
        self.seen.append(status.task_id)
        if status.task_id == self.kill_at:
            driver.kill_task(status.task_id, status.agent_id)


def driven(scheduler: Scheduler) -> tuple[SchedulerDriver, list[object]]:
    """A driver subscribed by hand whose sends are recorded, its calls acting at once."""
    driver = SchedulerDriver(scheduler, FrameworkInfo(name="acks"), master="tcp://127.0.0.1:1")
    core = driver._core
    core.state = SubscriptionState.SUBSCRIBING
    driver._status, driver._thread = DriverStatus.RUNNING, threading.current_thread()
    driver._execute(core.receive(m.Subscribed("fw-0", 0.0, MasterInfo("m", "tcp://127.0.0.1:1"),
                                              accepts_batches=True)))
    driver._run_pending()
    sent: list[object] = []
    driver._send = sent.append  # type: ignore[method-assign]
    return driver, sent


def updates(count: int) -> m.Updates:
    return m.Updates([TaskStatus(f"t{i}", "TASK_RUNNING", agent_id="a", uuid=f"u{i:04d}", framework_id="fw-0")
                      for i in range(count)])


def step(driver: SchedulerDriver, message: object) -> None:
    driver._take(message)
    driver._run_pending()
    driver._send_outgoing()


def acknowledged(sent: list[object]) -> list[str]:
    return [ack.uuid for message in sent
            for ack in (message.acknowledgements if isinstance(message, m.Acknowledgements) else [message])
            if isinstance(ack, m.Acknowledge)]


def test_a_run_of_updates_is_acknowledged_in_full_batches_in_order():
    driver, sent = driven(Killing())
    statuses = updates(2 * SEND_BATCH + 7)
    clock_before = driver._core._last_sent
    step(driver, statuses)
    assert [type(message) for message in sent] == [m.Acknowledgements] * 3
    assert [len(message.acknowledgements) for message in sent] == [SEND_BATCH, SEND_BATCH, 7]
    assert acknowledged(sent) == [status.uuid for status in statuses.statuses]
    assert driver._core._last_sent >= clock_before   # noted once the run ended


def test_one_update_is_acknowledged_alone():
    driver, sent = driven(Killing())
    step(driver, updates(1))
    assert [type(message) for message in sent] == [m.Acknowledge]


def test_a_callbacks_own_send_keeps_its_place_among_the_acknowledgements():
    driver, sent = driven(Killing(kill_at="t3"))
    statuses = updates(6)
    step(driver, statuses)
    kill = sent[1]
    assert isinstance(kill, m.Kill) and kill.task_id == "t3"
    # (t3's acknowledgement once its callback, which sent the kill, returned)
    expected = batched_messages([m.Acknowledge("fw-0", "a", f"t{i}", f"u{i:04d}") for i in range(3)] + [kill] +
                                [m.Acknowledge("fw-0", "a", f"t{i}", f"u{i:04d}") for i in range(3, 6)], True)
    assert sent == expected   # (the old path's frames: something but ACKNOWLEDGEs was queued)
    assert acknowledged(sent) == [status.uuid for status in statuses.statuses]
