"""The SchedulerDriver over real ZeroMQ sockets on 127.0.0.1. The test plays
the master with a transport.Server and scripted replies."""

import logging
import threading
import time

import pytest

from mesoslike.driver import Backoff, DriverStatus, Scheduler, SchedulerDriver
from mesoslike.errors import ConfigError
from mesoslike.resources import Resources
from mesoslike.transport import Server
from mesoslike.wire import messages as m
from mesoslike.wire.types import Filters, FrameworkInfo, MasterInfo, Offer, TaskInfo, TaskState, TaskStatus
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)

DEADLINE = 10.0
#: long enough that the driver never gives up on a master that sends no heartbeats
QUIET_HEARTBEAT = 60.0


class FakeMaster:
    """A ROUTER socket answering the driver by hand. Messages are kept in
    arrival order; ``expect`` takes the first one of a type."""

    def __init__(self):
        self.server = Server("tcp://127.0.0.1:0")
        self.address = self.server.address
        self.info = MasterInfo(id="master-1", address=self.address)
        self.received = []   # (peer, message), not yet taken
        self.arrived = 0     # frames received in all

    def _poll(self, timeout):
        if self.server.wait(timeout):
            frames = list(self.server.receive())
            self.arrived += len(frames)
            self.received.extend(frames)

    def expect(self, kind, timeout=DEADLINE):
        deadline = time.monotonic() + timeout
        while True:
            for item in self.received:
                if isinstance(item[1], kind):
                    self.received.remove(item)
                    return item
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {kind.TYPE} within {timeout} s; got {[type(x[1]) for x in self.received]}")
            self._poll(min(remaining, 0.05))

    def assert_none_sent(self, kind, driver):
        """No ``kind`` among what ``driver`` has sent so far: every frame it
        handed to its socket (its client's ``stats.sent``, none left queued)
        has arrived here, and none is one."""
        stats = driver._client.stats

        def all_arrived():
            self._poll(0.01)
            return stats.queued == 0 and self.arrived >= stats.sent

        wait_until(all_arrived, DEADLINE, "the driver's frames to arrive")
        assert not [msg for _, msg in self.received if isinstance(msg, kind)], self.received

    def send(self, peer, message):
        self.server.send(peer, message)

    def subscribe(self, framework_id="fw-1", heartbeat=QUIET_HEARTBEAT, resubscribed=False):
        """Answer the next SUBSCRIBE; returns (peer, the SUBSCRIBE)."""
        peer, subscribe = self.expect(m.Subscribe)
        self.send(peer, m.Subscribed(framework_id, heartbeat, self.info, resubscribed))
        return peer, subscribe

    def close(self):
        self.server.close()


class RecordingScheduler(Scheduler):
    """Records every callback (name, args, thread); ``hooks[name]`` runs after recording."""

    def __init__(self, **hooks):
        self.events = []
        self.hooks = hooks
        self.condition = threading.Condition()

    def _record(self, driver, name, *args):
        with self.condition:
            self.events.append((name, args, threading.current_thread()))
            self.condition.notify_all()
        if name in self.hooks:
            self.hooks[name](driver, *args)

    def registered(self, driver, framework_id, master_info):
        self._record(driver, "registered", framework_id, master_info)

    def reregistered(self, driver, master_info):
        self._record(driver, "reregistered", master_info)

    def disconnected(self, driver):
        self._record(driver, "disconnected")

    def resource_offers(self, driver, offers):
        self._record(driver, "resource_offers", offers)

    def offer_rescinded(self, driver, offer_id):
        self._record(driver, "offer_rescinded", offer_id)

    def status_update(self, driver, status):
        self._record(driver, "status_update", status)

    def framework_message(self, driver, agent_id, data):
        self._record(driver, "framework_message", agent_id, data)

    def agent_lost(self, driver, agent_id):
        self._record(driver, "agent_lost", agent_id)

    def executor_lost(self, driver, executor_id, agent_id, status):
        self._record(driver, "executor_lost", executor_id, agent_id, status)

    def error(self, driver, message):
        self._record(driver, "error", message)

    def names(self):
        with self.condition:
            return [name for name, _, _ in self.events]

    def wait_for(self, name, count=1, timeout=DEADLINE):
        """The args of the ``count``-th call of ``name``."""
        def calls():
            return [args for event, args, _ in self.events if event == name]
        with self.condition:
            if not self.condition.wait_for(lambda: len(calls()) >= count, timeout):
                raise AssertionError(f"{name} #{count} not called within {timeout} s; got {self.names()}")
            return calls()[count - 1]


@pytest.fixture
def master():
    fake = FakeMaster()
    yield fake
    fake.close()


@pytest.fixture
def drivers():
    started = []
    yield started
    for driver in started:
        driver.abort()
        driver.join(DEADLINE)


def start_driver(master, drivers, scheduler=None, **kwargs):
    scheduler = scheduler or RecordingScheduler()
    driver = SchedulerDriver(scheduler, FrameworkInfo(name="test", failover_timeout=60.0), master.address,
                             backoff=Backoff(initial=0.2, maximum=1.0), **kwargs)
    drivers.append(driver)
    assert driver.start() is DriverStatus.RUNNING
    return driver, scheduler


def subscribed_driver(master, drivers, scheduler=None, heartbeat=QUIET_HEARTBEAT, **kwargs):
    driver, scheduler = start_driver(master, drivers, scheduler, **kwargs)
    peer, _ = master.subscribe(heartbeat=heartbeat)
    scheduler.wait_for("registered")
    return driver, scheduler, peer


def offer(offer_id="o1", agent_id="agent-1"):
    return Offer(offer_id, agent_id, "host-1", Resources.parse("cpus:4;mem:1024"), {"room": "er1"})


def running(task_id="t1", uuid="u-1"):
    return TaskStatus(task_id, TaskState.RUNNING, agent_id="agent-1", uuid=uuid, source="SOURCE_AGENT")


# ------------------------------------------------------------------ tests
def test_the_driver_subscribes_and_gets_registered(master, drivers):
    driver, scheduler = start_driver(master, drivers)
    _, subscribe = master.subscribe(framework_id="fw-42")
    assert subscribe.framework == FrameworkInfo(name="test", failover_timeout=60.0)
    assert scheduler.wait_for("registered") == ("fw-42", master.info)
    assert driver.framework_id == "fw-42" and driver.connected and driver.master_info == master.info
    assert scheduler.events[0][2] is driver._thread   # callbacks run on the driver thread


def test_offers_arrive_and_launch_tasks_sends_an_accept(master, drivers):
    task = TaskInfo(task_id="t1", agent_id="agent-1", command="echo hi", resources=Resources.parse("cpus:1;mem:64"))

    def launch(driver, offers):
        driver.launch_tasks([o.id for o in offers], [task], filters=Filters(refuse_seconds=5.0))

    driver, scheduler, peer = subscribed_driver(master, drivers, RecordingScheduler(resource_offers=launch))
    offers = [offer("o1"), offer("o2")]
    master.send(peer, m.Offers(offers))
    assert scheduler.wait_for("resource_offers") == (offers,)
    _, accept = master.expect(m.Accept)
    assert accept == m.Accept("fw-1", ["o1", "o2"], [task], Filters(refuse_seconds=5.0))


def test_a_status_update_is_acknowledged_after_the_callback_returns(master, drivers):
    release = threading.Event()
    driver, scheduler, peer = subscribed_driver(
        master, drivers, RecordingScheduler(status_update=lambda driver, status: release.wait(DEADLINE)))
    master.send(peer, m.Update(running()))
    scheduler.wait_for("status_update")
    master.assert_none_sent(m.Acknowledge, driver)   # the callback is still running
    release.set()
    _, ack = master.expect(m.Acknowledge)
    assert ack == m.Acknowledge("fw-1", "agent-1", "t1", "u-1")


def test_updates_without_uuid_are_not_acknowledged(master, drivers):
    driver, scheduler, peer = subscribed_driver(master, drivers)
    master.send(peer, m.Update(running(uuid="")))
    master.send(peer, m.Update(running("t2")))
    _, ack = master.expect(m.Acknowledge)
    assert ack.task_id == "t2"
    master.assert_none_sent(m.Acknowledge, driver)


def test_explicit_acknowledgements(master, drivers):
    driver, scheduler, peer = subscribed_driver(master, drivers, implicit_acknowledgements=False)
    master.send(peer, m.Update(running()))
    master.send(peer, m.FrameworkMessage("fw-1", "agent-1", b"after"))
    (status,) = scheduler.wait_for("status_update")
    scheduler.wait_for("framework_message")   # the update's callback has returned: an implicit ack went before
    master.assert_none_sent(m.Acknowledge, driver)
    assert driver.acknowledge_status_update(status) is DriverStatus.RUNNING   # from the test thread
    _, ack = master.expect(m.Acknowledge)
    assert ack == m.Acknowledge("fw-1", "agent-1", "t1", "u-1")


def test_a_raising_callback_is_reported_and_aborts_the_driver_as_mesos_does(master, drivers, caplog):
    def explode(driver, offers):
        raise RuntimeError("boom")

    scheduler = RecordingScheduler(resource_offers=explode)
    driver, scheduler, peer = subscribed_driver(master, drivers, scheduler)
    with caplog.at_level(logging.ERROR, logger="mesoslike.driver"):
        master.send(peer, m.Offers([offer()]))
        (message,) = scheduler.wait_for("error")
    assert "resource_offers" in message and "boom" in message
    assert any("resource_offers" in record.getMessage() and record.exc_info for record in caplog.records)
    # aborted: join()/run() say so, no callback follows, nothing is acknowledged, the framework is not torn down
    assert driver.join(DEADLINE) is DriverStatus.ABORTED
    assert isinstance(driver.callback_exception, RuntimeError)
    master.send(peer, m.Update(running()))
    master.assert_none_sent(m.Acknowledge, driver)
    master.assert_none_sent(m.Teardown, driver)
    assert "status_update" not in scheduler.names()


def test_system_exit_in_a_callback_aborts_the_driver_too(master, drivers):
    def leave(driver, status):
        raise SystemExit(3)

    driver, scheduler, peer = subscribed_driver(master, drivers, RecordingScheduler(status_update=leave))
    master.send(peer, m.Update(running()))
    assert driver.join(DEADLINE) is DriverStatus.ABORTED
    assert isinstance(driver.callback_exception, SystemExit) and driver.callback_exception.code == 3
    master.assert_none_sent(m.Acknowledge, driver)


def test_an_error_callback_that_raises_aborts_the_driver(master, drivers):
    class Fragile(RecordingScheduler):
        def error(self, driver, message):
            super().error(driver, message)
            raise ValueError("error() itself is broken")

    driver, scheduler, peer = subscribed_driver(master, drivers, Fragile())
    master.send(peer, m.Error("refused"))
    assert scheduler.wait_for("error") == ("refused",)
    assert driver.join(DEADLINE) is DriverStatus.ABORTED and not driver._thread.is_alive()


def test_executor_lost_is_called_when_a_custom_executor_ends(master, drivers):
    driver, scheduler, peer = subscribed_driver(master, drivers)
    master.send(peer, m.Failure("agent-1", "exited with status 3", executor_id="exec-1", status=3))
    assert scheduler.wait_for("executor_lost") == ("exec-1", "agent-1", 3)
    master.send(peer, m.Failure("agent-2"))
    assert scheduler.wait_for("agent_lost") == ("agent-2",)


def test_stop_inside_a_callback_tears_down_and_ends_the_thread(master, drivers):
    driver, scheduler, peer = subscribed_driver(
        master, drivers, RecordingScheduler(status_update=lambda driver, status: driver.stop()))
    master.send(peer, m.Update(running()))
    master.send(peer, m.Offers([offer()]))   # no callbacks after stop
    peer, teardown = master.expect(m.Teardown)
    assert teardown == m.Teardown("fw-1")
    master.send(peer, m.Error("framework fw-1 removed: torn down by the framework", fatal=True))
    assert driver.join(DEADLINE) is DriverStatus.STOPPED
    assert not driver._thread.is_alive()
    assert "resource_offers" not in scheduler.names()
    assert "error" not in scheduler.names()   # the confirmation is no error of the framework's
    master.assert_none_sent(m.Acknowledge, driver)   # stopped before the implicit acknowledgement


def test_a_stopped_driver_ends_once_the_master_confirmed_the_teardown(master, drivers):
    """``join`` returns only after the master has removed the framework: a
    program that exits then (``mesoslike run``) leaves no TEARDOWN queued."""
    driver, scheduler, peer = subscribed_driver(master, drivers, teardown_wait=DEADLINE)
    stopper = threading.Thread(target=driver.stop)
    stopper.start()
    peer, _ = master.expect(m.Teardown)
    assert driver.status is DriverStatus.STOPPED and driver._thread.is_alive()   # waiting for the answer
    master.send(peer, m.Error("framework fw-1 removed: torn down by the framework", fatal=True))
    stopper.join(DEADLINE)
    assert driver.join(DEADLINE) is DriverStatus.STOPPED and not driver._thread.is_alive()
    assert "error" not in scheduler.names()


def test_a_stopped_driver_whose_master_does_not_answer_ends_after_the_teardown_wait(master, drivers):
    driver, _, _ = subscribed_driver(master, drivers, teardown_wait=0.2)
    assert driver.stop() is DriverStatus.STOPPED
    master.expect(m.Teardown)
    assert driver.join(DEADLINE) is DriverStatus.STOPPED and not driver._thread.is_alive()


def test_stop_with_failover_from_another_thread_sends_no_teardown(master, drivers):
    driver, scheduler, peer = subscribed_driver(master, drivers)
    assert driver.stop(failover=True) is DriverStatus.STOPPED
    assert not driver._thread.is_alive()
    master.assert_none_sent(m.Teardown, driver)
    assert driver.launch_tasks(["o1"], []) is DriverStatus.STOPPED
    assert driver.start() is DriverStatus.STOPPED


def test_run_returns_when_stopped(master, drivers):
    scheduler = RecordingScheduler(registered=lambda driver, framework_id, info: driver.stop())
    driver = SchedulerDriver(scheduler, FrameworkInfo(name="run"), master.address)
    drivers.append(driver)
    result = {}
    runner = threading.Thread(target=lambda: result.setdefault("status", driver.run()))
    runner.start()
    master.subscribe()
    peer, _ = master.expect(m.Teardown)
    master.send(peer, m.Error("framework fw-1 removed: torn down by the framework", fatal=True))
    runner.join(DEADLINE)
    assert result["status"] is DriverStatus.STOPPED


def test_a_silent_master_means_disconnected_then_resubscription_with_the_same_id(master, drivers):
    driver, scheduler, first_peer = subscribed_driver(master, drivers, heartbeat=0.1)
    master.expect(m.Heartbeat)   # the driver keeps talking; the master says nothing
    scheduler.wait_for("disconnected")
    assert not driver.connected
    peer, subscribe = master.expect(m.Subscribe)
    assert subscribe.framework.id == "fw-1"
    assert peer != first_peer   # a fresh connection: nothing stale queued on it
    master.send(peer, m.Subscribed("fw-1", QUIET_HEARTBEAT, master.info, resubscribed=True))
    assert scheduler.wait_for("reregistered") == (master.info,)
    assert scheduler.names().count("registered") == 1
    assert driver.connected and driver.framework_id == "fw-1"


def test_subscription_is_retried_until_a_master_answers(master, drivers):
    driver, scheduler = start_driver(master, drivers)
    master.expect(m.Subscribe)
    master.expect(m.Subscribe)   # unanswered: retried with backoff
    master.subscribe()
    scheduler.wait_for("registered")


def test_subscription_retries_come_over_one_connection(master, drivers):
    """A framework that knows its id subscribes and its SUBSCRIBE goes
    unanswered a while (a busy new leader after a failover): the retries come
    over the connection the first went over, so the master reads them in
    order. Each over a fresh connection, a busy master read them in any order
    and the one it read last, maybe from a closed connection, took the
    framework's events (docs/ha.rst, "Frameworks re-subscribing to a busy new leader")."""
    scheduler = RecordingScheduler()
    driver = SchedulerDriver(scheduler, FrameworkInfo(name="test", id="fw-1", failover_timeout=60.0), master.address,
                             backoff=Backoff(initial=0.05, maximum=0.2))
    drivers.append(driver)
    driver.start()
    first = [master.expect(m.Subscribe)[0] for _ in range(4)]   # unanswered: retried with backoff
    assert len(set(first)) == 1
    master.send(first[-1], m.Subscribed("fw-1", 0.2, master.info, True))
    scheduler.wait_for("registered")
    # the master falls silent (5 heartbeats): a fresh connection, and its retries over it
    peers = [master.expect(m.Subscribe, timeout=DEADLINE)[0] for _ in range(4)]
    assert len(set(peers)) == 1 and peers[0] != first[0]


def test_calls_from_another_thread_are_delivered(master, drivers):
    driver, scheduler, peer = subscribed_driver(master, drivers)
    status = running("t2")
    calls = [
        (lambda: driver.decline_offer("o1", Filters(refuse_seconds=30.0)),
         m.Decline("fw-1", ["o1"], Filters(refuse_seconds=30.0))),
        (driver.suppress_offers, m.Suppress("fw-1")),
        (driver.revive_offers, m.Revive("fw-1")),
        (lambda: driver.kill_task("t1"), m.Kill("fw-1", "t1")),
        (lambda: driver.reconcile_tasks([]), m.Reconcile("fw-1", [])),
        (lambda: driver.reconcile_tasks(["t1", status]),
         m.Reconcile("fw-1", [m.ReconcileTask("t1"), m.ReconcileTask("t2", "agent-1")])),
        (lambda: driver.send_framework_message("agent-1", b"hello", "t1"),
         m.FrameworkMessage("fw-1", "agent-1", b"hello", "t1")),
    ]
    caller = threading.Thread(target=lambda: [call() for call, _ in calls])
    caller.start()
    caller.join(DEADLINE)
    for _, expected in calls:
        assert master.expect(type(expected))[1] == expected


def test_events_reach_their_callbacks(master, drivers):
    driver, scheduler, peer = subscribed_driver(master, drivers)
    master.send(peer, m.FrameworkMessage("fw-1", "agent-1", b"\x00\x01"))
    master.send(peer, m.Failure("agent-1"))
    assert scheduler.wait_for("framework_message") == ("agent-1", b"\x00\x01")
    assert scheduler.wait_for("agent_lost") == ("agent-1",)


def test_launch_before_subscription_gives_task_dropped(master, drivers):
    driver, scheduler = start_driver(master, drivers)
    master.expect(m.Subscribe)
    task = TaskInfo(task_id="t1", agent_id="agent-1", command="true", resources=Resources.parse("cpus:1"))
    driver.launch_tasks(["o1"], [task])
    (status,) = scheduler.wait_for("status_update")
    assert (status.task_id, status.state) == ("t1", TaskState.DROPPED)
    scheduler.wait_for("error")
    master.assert_none_sent(m.Accept, driver)


def test_a_fatal_error_aborts_the_driver(master, drivers):
    seen = {}
    scheduler = RecordingScheduler(error=lambda driver, message: seen.setdefault("status", driver.status))
    driver, scheduler, peer = subscribed_driver(master, drivers, scheduler)
    master.send(peer, m.Error("framework fw-1 was torn down", fatal=True))
    assert scheduler.wait_for("error") == ("framework fw-1 was torn down",)
    assert driver.join(DEADLINE) is DriverStatus.ABORTED
    assert seen["status"] is DriverStatus.ABORTED   # aborted before error() runs, as in Mesos


def test_calls_before_start_and_bad_arguments(master):
    driver = SchedulerDriver(RecordingScheduler(), FrameworkInfo(name="idle"), master.address)
    assert driver.revive_offers() is DriverStatus.NOT_STARTED
    assert driver.join() is DriverStatus.NOT_STARTED
    with pytest.raises(TypeError):
        driver.launch_tasks("o1", [])
    with pytest.raises(TypeError):
        driver.send_framework_message("agent-1", "not bytes", "t1")
    with pytest.raises(ValueError, match="needs the task_id of a running task"):
        driver.send_framework_message("agent-1", b"hello", "")
    assert driver.stop() is DriverStatus.STOPPED
    assert driver.start() is DriverStatus.STOPPED


@pytest.mark.parametrize("address, match", [
    ("zk://127.0.0.1:2181", "ZooKeeper URL"),
    ("127.0.0.1:5050", "bad master address"),
    ("http://127.0.0.1:5050", "bad master address"),
])
def test_bad_master_addresses(address, match):
    with pytest.raises(ConfigError, match=match):
        SchedulerDriver(Scheduler(), FrameworkInfo(name="x"), address)


def test_join_inside_a_callback_is_refused(master, drivers):
    driver, scheduler, peer = subscribed_driver(
        master, drivers, RecordingScheduler(offer_rescinded=lambda driver, offer_id: driver.join()))
    master.send(peer, m.RescindOffer("o1"))
    (message,) = scheduler.wait_for("error")
    assert "join()" in message
