"""A job's AppMaster hears of its slots from the service directly
(SLOT_GRANTED, SLOT_REVOKED; mesoslike_frameworks/fuxi/appmaster.py): a
revoked slot's work goes to another worker at once, not after its worker's
heartbeats stop, and a worker must say HELLO for the unit and host its slot
was granted for. Real sockets on 127.0.0.1: a Server plays the service, a
Client the workers; the AppMaster's loop runs turn by turn in the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from mesoslike import Resources
from mesoslike.transport import Client, Server
from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.appmaster import AppMaster
from mesoslike_frameworks.fuxi.model import JobSpec, UnitSpec
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)

JOB, TOKEN = "job-0001", "secret"


class Harness:
    def __init__(self, tmp_path: Path, instances: int = 2) -> None:
        self.service = Server("tcp://127.0.0.1:0", codec=protocol.CODEC)
        job = JobSpec("j", (UnitSpec("u", 2, Resources.parse("cpus:1;mem:64"), command="run {instance}",
                                     instances=instances),))
        self.appmaster = AppMaster(JOB, job, bind="tcp://127.0.0.1:0", service=self.service.address, token=TOKEN,
                                   snapshot=tmp_path / "snapshot.json", heartbeat_timeout=60.0)
        self.peer = b""
        self.workers: dict[str, Client] = {}
        self.heard: dict[str, list] = {}
        # the AppMaster reports first: its connection is where the service's news go
        self.turn_until(lambda: self._service_heard())

    def _service_heard(self) -> bool:
        for peer, frame in self.service.receive_frames():
            message = protocol.decode(frame)
            if peer is not None and getattr(message, "job_id", "") == JOB:
                self.peer = peer
                self.service.send(peer, protocol.Ok(message.id))
        return bool(self.peer)

    def turn_until(self, condition, what: str = "the AppMaster") -> None:
        def turned() -> bool:
            self.appmaster._turn()
            for slot, client in self.workers.items():
                self.heard[slot] += [amp.decode(frame) for _, frame in client.receive_frames()]
            return bool(condition())
        wait_until(turned, 10, what)

    def tell(self, news) -> None:
        self.service.send(self.peer, news)

    def join(self, slot: str, unit: str = "u", hostname: str = "h1") -> None:
        client = self.workers[slot] = Client(self.appmaster.address, codec=amp.CODEC)
        self.heard[slot] = []
        client.send(amp.Hello(slot, unit, hostname, "er0", token=amp.worker_token(TOKEN, slot)))
        client.flush()

    def close(self) -> None:
        for client in self.workers.values():
            client.close()
        self.appmaster.close()
        self.service.close()


@pytest.fixture
def harness(tmp_path):
    h = Harness(tmp_path)
    yield h
    h.close()


def assigned(heard: list) -> list[int]:
    return [m.instance for m in heard if isinstance(m, amp.Assign)]


def test_a_revoked_slots_instance_is_pending_again_at_once(harness):
    for slot in ("s1", "s2"):
        harness.tell(protocol.SlotGranted(JOB, slot, "u", "h1", "er0"))
        harness.join(slot)
    harness.turn_until(lambda: assigned(harness.heard["s1"]) and assigned(harness.heard["s2"]), "both to run")
    (first,) = assigned(harness.heard["s1"])
    # s1 is preempted: its instance is pending again now, with no heartbeat timeout (60 s here) to wait for
    harness.tell(protocol.SlotRevoked(JOB, "s1", "preempted by a higher priority unit"))
    harness.turn_until(lambda: "s1" not in harness.appmaster.workers, "s1 to be gone")
    assert harness.appmaster.core.progress_report()["units"]["u"]["pending"] == 1
    harness.join("s3")                       # the slot granted in its place runs it
    harness.turn_until(lambda: first in assigned(harness.heard["s3"]), "s1's instance to go to s3")
    # a late word from the revoked slot's worker is told to go
    harness.workers["s1"].send(amp.Heartbeat("s1"))
    harness.workers["s1"].flush()
    harness.turn_until(lambda: any(isinstance(m, amp.Release) for m in harness.heard["s1"]), "s1 to be released")


def test_a_worker_must_say_hello_for_the_unit_and_host_of_its_grant(harness):
    harness.tell(protocol.SlotGranted(JOB, "s1", "u", "h1", "er0"))
    harness.turn_until(lambda: "s1" in harness.appmaster.granted, "the grant")
    harness.join("s1", hostname="elsewhere")
    harness.turn_until(lambda: any(isinstance(m, amp.Error) for m in harness.heard["s1"]), "a refusal")
    (error,) = [m for m in harness.heard["s1"] if isinstance(m, amp.Error)]
    assert "granted for unit u on h1" in error.message and "s1" not in harness.appmaster.workers
    harness.join("s1")       # the slot's own place: welcome
    harness.turn_until(lambda: "s1" in harness.appmaster.workers, "the worker to join")


def test_news_of_another_job_change_nothing(harness):
    harness.tell(protocol.SlotGranted("job-0002", "x1", "u", "h1", "er0"))
    harness.tell(protocol.SlotGranted(JOB, "s1", "u", "h1", "er0"))
    harness.turn_until(lambda: "s1" in harness.appmaster.granted, "the grant")
    assert "x1" not in harness.appmaster.granted
