"""An update reaches the scheduler's callback once (issue 12 §1;
docs/framework-api.rst, "Delivery"): the driver core with a FakeClock.

An agent retries an update until its acknowledgement arrives, and the master
forwards a retry when the first copy may not have arrived, so the same uuid
can come again; one run delivered an update 900 times."""

import random

import pytest

from mesoslike.driver.core import DeliveredUpdates, InvokeCallback, InvokeUpdates
from mesoslike.wire import messages as m
from mesoslike.wire.types import TaskState, TaskStatus

from test_driver_core import callbacks, make_core, run_callbacks, sent, subscribed, subscribed_core

pytestmark = pytest.mark.timeout(30)


def update(uuid="u-1", state=TaskState.RUNNING, task_id="t1"):
    return m.Update(TaskStatus(task_id, state, agent_id="agent-1", uuid=uuid))


def ack(uuid="u-1", task_id="t1"):
    return m.Acknowledge("fw-1", "agent-1", task_id, uuid)


def deliver(core, message):
    """Receive, run the callbacks as the runtime does; (callbacks, what went to the master)."""
    commands = core.receive(message)
    return callbacks(commands), sent(commands) + sent(run_callbacks(core, commands))


def test_with_implicit_acknowledgements_an_update_reaches_the_callback_once():
    core, _ = subscribed_core()
    first, acks = deliver(core, update())
    assert [name for name, _ in first] == ["status_update"] and acks == [ack()]
    again, acks = deliver(core, update())
    assert again == [] and acks == []            # our acknowledgement is on its way on this connection
    assert core.redeliveries == 1
    core.delivered._check()


def test_a_redelivery_while_the_callback_has_not_returned_is_dropped():
    core, _ = subscribed_core()
    queued = core.receive(update())
    assert core.receive(update()) == []          # the runtime has not run the first callback yet
    assert sent(run_callbacks(core, queued)) == [ack()]


def test_after_a_new_subscription_a_redelivery_is_acknowledged_again_not_delivered():
    # the first acknowledgement went out on a connection that is gone
    core, _ = subscribed_core()
    deliver(core, update())
    core.master_changed()
    subscribed(core, resubscribed=True)
    again, acks = deliver(core, update())
    assert again == [] and acks == [ack()]
    assert deliver(core, update()) == ([], [])   # ... once per session


def test_an_acknowledgement_that_could_not_be_sent_is_sent_when_the_update_comes_again():
    core, _ = subscribed_core()
    queued = core.receive(update())
    core.master_changed()                         # disconnected while the callback ran
    assert sent(run_callbacks(core, queued)) == []
    subscribed(core, resubscribed=True)
    assert deliver(core, update()) == ([], [ack()])


def test_with_explicit_acknowledgements_an_unacknowledged_update_comes_again_until_acknowledged():
    core, _ = subscribed_core(implicit_acknowledgements=False)
    first, acks = deliver(core, update())
    assert len(first) == 1 and acks == []
    again, _ = deliver(core, update())           # the framework did not acknowledge: the agent retried
    assert [args[0].uuid for _, args in again] == ["u-1"]
    (status,) = again[0][1]
    assert sent(core.acknowledge_status_update(status)) == [ack()]
    assert deliver(core, update()) == ([], [])   # acknowledged: never to the callback again


def test_updates_without_a_uuid_always_go_through():
    core, _ = subscribed_core()
    reconciled = update(uuid="")
    for _ in range(3):
        delivered, acks = deliver(core, reconciled)
        assert len(delivered) == 1 and acks == []


def test_distinct_updates_of_one_task_each_reach_the_callback():
    core, _ = subscribed_core()
    states = []
    for uuid, state in [("u-1", TaskState.STARTING), ("u-2", TaskState.RUNNING), ("u-3", TaskState.FINISHED)]:
        delivered, _ = deliver(core, update(uuid, state))
        states += [args[0].state for _, args in delivered]
    assert states == [TaskState.STARTING, TaskState.RUNNING, TaskState.FINISHED]


def test_the_memory_of_delivered_updates_is_bounded():
    core, _ = subscribed_core(remembered_updates=2)
    for uuid in ("a", "b", "c"):
        deliver(core, update(uuid))
    assert len(core.delivered) == 2
    core.delivered._check()
    assert len(deliver(core, update("a"))[0]) == 1   # forgotten: delivered again (documented)
    assert deliver(core, update("c"))[0] == []


def test_delivered_updates_states():
    book = DeliveredUpdates(capacity=10)
    book.add("x")
    assert book.state("x") == DeliveredUpdates.PENDING and book.session("x") is None
    book.delivered("x")
    assert book.state("x") == DeliveredUpdates.DELIVERED
    book.again("x")
    assert book.state("x") == DeliveredUpdates.PENDING
    book.acknowledged("x", 3)
    assert book.state("x") == DeliveredUpdates.ACKNOWLEDGED and book.session("x") == 3
    book.delivered("x")
    book.again("x")                                # an acknowledged update stays acknowledged
    assert book.state("x") == DeliveredUpdates.ACKNOWLEDGED
    book.acknowledged("never-seen", 1)
    assert book.state("never-seen") is None
    with pytest.raises(ValueError):
        DeliveredUpdates(0)
    book._check()


def test_delivered_updates_forget_the_oldest_first_at_capacity():
    """Past its capacity the book forgets its oldest uuid, one for each new
    one, however long it has been full (in O(1): an OrderedDict, where a
    dict's ``next(iter(d))`` walked every slot deleted since its last
    resize — bench/throughput.py's framework at 150,000 tasks spent 190 µs
    of CPU a task, 45 at 20,000)."""
    book = DeliveredUpdates(capacity=1000)
    for n in range(5_000):
        book.add(f"u{n}")
        if n % 2:
            book.acknowledged(f"u{n}", 1)
    held = [f"u{n}" for n in range(4_000, 5_000)]
    assert [book.state(u) for u in held] == [DeliveredUpdates.PENDING, DeliveredUpdates.ACKNOWLEDGED] * 500
    assert book.state("u3999") is None and len(book) == 1000
    book._check()


def test_the_runtime_contract_is_unchanged_for_other_callbacks():
    core, _ = make_core()
    core.start()
    (registered,) = [c for c in subscribed(core) if isinstance(c, InvokeCallback)]
    assert core.callback_returned(registered) == []



def flattened(commands):
    """``grouped`` commands as the ungrouped ones: an InvokeCallback for each status of an InvokeUpdates."""
    out = []
    for command in commands:
        if isinstance(command, InvokeUpdates):
            out += [InvokeCallback("status_update", (status,)) for status in command.statuses]
        else:
            out.append(command)
    return out


@pytest.mark.parametrize("implicit", [True, False])
def test_grouped_updates_are_the_callbacks_and_acknowledgements_of_each_in_order(implicit):
    """receive(grouped=True) (the runtime's path) gives each new update of an
    UPDATES frame to the same callbacks, in the same order, among the same
    answers to redeliveries, as an InvokeCallback each; a run of new updates
    is one InvokeUpdates."""
    rng = random.Random(29)
    cores = [make_core(implicit_acknowledgements=implicit)[0] for _ in range(2)]
    for core in cores:
        core.start()
        subscribed(core)
    uuids = [f"u-{i}" for i in range(40)]
    for turn in range(80):
        if turn == 40:   # a new session: an acknowledged update that comes again is acknowledged again
            for core in cores:
                core.master_changed()
                subscribed(core, resubscribed=True)
        statuses = [TaskStatus(f"t{rng.randrange(20)}", TaskState.RUNNING, agent_id="agent-1",
                               uuid=rng.choice(uuids) if rng.random() < 0.9 else "")
                    for _ in range(rng.randrange(1, 12))]
        plain = cores[0].receive(m.Updates(statuses))
        grouped = cores[1].receive(m.Updates(statuses), grouped=True)
        assert flattened(grouped) == plain
        assert not any(isinstance(a, InvokeUpdates) and isinstance(b, InvokeUpdates)
                       for a, b in zip(grouped, grouped[1:])), "a run is one command"
        # the runtime: each update's callback returns (SchedulerDriver._invoke_updates: update_returned)
        answers = [sent(run_callbacks(cores[0], plain)),
                   [ack for command in grouped if isinstance(command, InvokeUpdates)
                    for status in command.statuses
                    for ack in [cores[1].update_returned(status)] if ack is not None] +
                   sent(run_callbacks(cores[1], [c for c in grouped if isinstance(c, InvokeCallback)]))]
        assert sorted(map(repr, answers[0])) == sorted(map(repr, answers[1]))
        if not implicit:   # the scheduler acknowledges some of what it was given
            chosen = [c.args[0] for c in plain if isinstance(c, InvokeCallback) and c.args[0].uuid
                      and rng.random() < 0.5]
            for core in cores:
                for status in chosen:
                    core.acknowledge_status_update(status)


@pytest.mark.parametrize("how", ["stop", "raise"])
def test_a_stop_or_a_raise_in_a_runs_callback_ends_the_run(how):
    """SchedulerDriver gives a run of new updates (one InvokeUpdates) to
    status_update one by one, acknowledging each as it returns; after a
    callback stops or aborts the driver, no more of them — exactly what an
    InvokeCallback each does. No socket: the driver's steps called by hand,
    on what stands for its thread."""
    import threading

    from mesoslike import FrameworkInfo, Scheduler, SchedulerDriver
    from mesoslike.driver.core import SubscriptionState
    from mesoslike.driver.driver import DriverStatus
    from mesoslike.wire import MasterInfo

    def run(grouped):
        seen, sends = [], []

        class Stopping(Scheduler):
            def status_update(self, driver, status):
                seen.append(status.task_id)
                if len(seen) == 2:
                    if how == "stop":
                        driver.stop()
                    else:
                        raise RuntimeError("a bug")

            def error(self, driver, message):
                pass

        driver = SchedulerDriver(Stopping(), FrameworkInfo("demo", "*"), master="tcp://127.0.0.1:1")
        driver._send = sends.append
        driver._core.state = SubscriptionState.SUBSCRIBING
        driver._take(m.Subscribed("fw-1", 0.0, MasterInfo("m", "tcp://127.0.0.1:1"), accepts_batches=True))
        driver._status, driver._thread = DriverStatus.RUNNING, threading.current_thread()
        driver._run_pending()
        updates = m.Updates([TaskStatus(f"t{i}", TaskState.RUNNING, agent_id="agent-1", uuid=f"u-{i}")
                             for i in range(5)])
        if grouped:
            driver._take(updates)
            assert [type(item) for item in driver._pending] == [InvokeUpdates]
        else:
            driver._execute(driver._core.receive(updates))
        driver._run_pending()
        driver._send_outgoing()
        acknowledged = [item.task_id for message in sends
                        for item in getattr(message, "acknowledgements", [message]) if isinstance(item, m.Acknowledge)]
        return seen, acknowledged, driver._status

    grouped = run(True)
    assert grouped[0] == ["t0", "t1"] and grouped[1] == ["t0"]   # (the second's acknowledgement: not once stopped)
    assert grouped == run(False)
