"""The framework side of the protocol as a pure state machine: FakeClock, no
sockets. The conversation is docs/wire.rst, "Conversations"."""

import ast
import pathlib
import random

import pytest

from mesoslike.clock import FakeClock
from mesoslike.driver.core import (
    Backoff,
    DriverCore,
    InvokeCallback,
    SAME_CONNECTION_RETRIES_FOR,
    TEARDOWN_WAIT,
    Reconnect,
    SendToMaster,
    Shutdown,
    SubscriptionState,
)
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import Filters, FrameworkInfo, MasterInfo, Offer, TaskInfo, TaskState, TaskStatus

pytestmark = pytest.mark.timeout(60)

MASTER = MasterInfo(id="master-1", address="tcp://127.0.0.1:5050")
HEARTBEAT = 2.0


def make_core(clock=None, framework=None, **kwargs):
    clock = clock or FakeClock()
    core = DriverCore(framework or FrameworkInfo(name="demo", failover_timeout=60.0), clock, random.Random(7),
                      **kwargs)
    return core, clock


def sent(commands):
    return [c.message for c in commands if isinstance(c, SendToMaster)]


def callbacks(commands):
    return [(c.name, c.args) for c in commands if isinstance(c, InvokeCallback)]


def subscribed(core, framework_id="fw-1", resubscribed=False):
    return core.receive(m.Subscribed(framework_id, HEARTBEAT, MASTER, resubscribed))


def subscribed_core(**kwargs):
    core, clock = make_core(**kwargs)
    core.start()
    subscribed(core)
    return core, clock


def task(task_id, agent_id="agent-1"):
    return TaskInfo(task_id=task_id, agent_id=agent_id, command="echo hi", resources=Resources.parse("cpus:1"))


def run_callbacks(core, commands):
    """What the runtime does: every callback returns, then the core may answer."""
    follow_ups = []
    for command in commands:
        if isinstance(command, InvokeCallback):
            follow_ups += core.callback_returned(command)
    return follow_ups


# ------------------------------------------------------------ subscription
def test_start_sends_subscribe_without_an_id():
    core, _ = make_core()
    assert core.state is SubscriptionState.DISCONNECTED
    commands = core.start()
    assert commands == [SendToMaster(m.Subscribe(FrameworkInfo(name="demo", failover_timeout=60.0),
                                                    accepts_batches=True))]
    assert core.state is SubscriptionState.SUBSCRIBING
    assert core.start() == []   # idempotent


def test_subscribed_gives_registered_with_the_id_and_master():
    core, _ = make_core()
    core.start()
    commands = subscribed(core)
    assert callbacks(commands) == [("registered", ("fw-1", MASTER))]
    assert core.state is SubscriptionState.SUBSCRIBED and core.connected
    assert core.framework_id == "fw-1" and core.master_info == MASTER and core.heartbeat_interval == HEARTBEAT


def test_a_duplicate_subscribed_answer_is_ignored():
    core, _ = subscribed_core()
    assert subscribed(core, resubscribed=True) == []
    assert subscribed(core, framework_id="other") == []
    assert core.framework_id == "fw-1"


def test_subscribed_without_an_id_is_ignored():
    core, _ = make_core()
    core.start()
    assert core.receive(m.Subscribed("", HEARTBEAT, MASTER)) == []
    assert core.state is SubscriptionState.SUBSCRIBING


def test_events_before_subscribed_are_ignored():
    core, _ = make_core()
    core.start()
    offer = Offer("o1", "agent-1", "host", Resources.parse("cpus:1"))
    assert core.receive(m.Offers([offer])) == []
    assert core.receive(m.Update(TaskStatus("t1", TaskState.RUNNING))) == []


def test_resubscription_keeps_the_id_and_gives_reregistered():
    core, clock = subscribed_core()
    clock.advance(5 * HEARTBEAT)
    commands = core.tick()
    assert callbacks(commands)[0] == ("disconnected", ())
    (subscribe,) = sent(commands)
    assert subscribe.framework.id == "fw-1" and subscribe.framework.name == "demo"
    assert callbacks(subscribed(core, resubscribed=True)) == [("reregistered", (MASTER,))]
    assert core.framework_id == "fw-1"


def test_a_framework_info_with_an_id_resumes_it_and_gets_registered_first():
    core, _ = make_core(framework=FrameworkInfo(name="demo", id="fw-old", failover_timeout=60.0))
    (subscribe,) = sent(core.start())
    assert subscribe.framework.id == "fw-old"
    assert callbacks(subscribed(core, framework_id="fw-old", resubscribed=True)) == [
        ("registered", ("fw-old", MASTER))]


def test_a_new_id_after_reconnecting_is_a_new_registration():
    core, clock = subscribed_core()
    clock.advance(5 * HEARTBEAT)
    core.tick()
    assert callbacks(subscribed(core, framework_id="fw-2")) == [("registered", ("fw-2", MASTER))]
    assert core.framework_id == "fw-2"


# --------------------------------------------------------------- backoff
def retry_delays(core, clock, attempts):
    """Advance to each retry; the delay between two SUBSCRIBEs each time."""
    delays = []
    for _ in range(attempts):
        deadline = core.next_deadline()
        delays.append(deadline - clock.now())
        clock.advance(delays[-1])
        assert any(isinstance(msg, m.Subscribe) for msg in sent(core.tick()))
    return delays


def test_subscription_retries_back_off_exponentially_with_jitter():
    core, clock = make_core(backoff=Backoff(initial=0.5, maximum=10.0, jitter=0.5))
    core.start()
    delays = retry_delays(core, clock, 8)
    bounds = [0.5, 1, 2, 4, 8, 10, 10, 10]
    for delay, bound in zip(delays, bounds):
        assert bound * 0.5 <= delay <= bound
    assert delays[4] > delays[0] * 4   # it grows ...
    assert max(delays) <= 10.0         # ... up to the cap
    assert len(set(delays)) == len(delays)   # jittered


def test_nothing_is_retried_before_the_deadline():
    core, clock = make_core()
    core.start()
    clock.advance(core.next_deadline() - clock.now() - 0.01)
    assert core.tick() == []


def test_subscription_retries_go_over_the_connection_for_a_while_then_over_fresh_ones():
    # without an id the master can only tell a retry from a new framework by
    # the connection; with one, retries go over the connection the SUBSCRIBE
    # went over for SAME_CONNECTION_RETRIES_FOR seconds (a busy master reads
    # them in order: a stale SUBSCRIBE of a closed connection read after the
    # live one's would move the framework's events to it), then over fresh
    # ones (a connection stalled after a partition)
    core, clock = make_core()
    core.start()
    clock.advance(1.0)
    assert not any(isinstance(c, Reconnect) for c in core.tick())
    subscribed(core)
    clock.advance(5 * HEARTBEAT)
    assert any(isinstance(c, Reconnect) for c in core.tick())   # the master fell silent: a fresh connection
    made = clock.now()
    retries = 0
    while clock.now() - made < SAME_CONNECTION_RETRIES_FOR:
        clock.advance(core.next_deadline() - clock.now())
        commands = core.tick()
        fresh = any(isinstance(c, Reconnect) for c in commands)
        assert sent(commands) and fresh == (clock.now() - made >= SAME_CONNECTION_RETRIES_FOR)
        retries += 1
    assert retries >= 4
    assert any(isinstance(c, Reconnect) for c in commands)
    clock.advance(core.next_deadline() - clock.now())   # and the fresh one is kept as long again
    assert not any(isinstance(c, Reconnect) for c in core.tick())


def test_a_framework_started_with_its_id_retries_over_its_first_connection():
    core, clock = make_core(framework=FrameworkInfo(name="fw", id="fw-7"))
    core.start()
    for _ in range(3):
        clock.advance(core.next_deadline() - clock.now())
        commands = core.tick()
        assert [type(msg) for msg in sent(commands)] == [m.Subscribe]
        assert not any(isinstance(c, Reconnect) for c in commands)


def test_after_a_leader_change_retries_go_over_the_new_connection():
    """The 100,000-agent failover's framework that heard nothing for 75 s
    (docs/performance.rst): SUBSCRIBE retries each over a fresh connection
    reached the busy new leader together, and the one it read last decided
    where the framework's events went."""
    core, clock = subscribed_core()
    commands = core.master_changed()
    assert any(isinstance(c, Reconnect) for c in commands)
    for _ in range(4):
        clock.advance(core.next_deadline() - clock.now())
        commands = core.tick()
        assert [type(msg) for msg in sent(commands)] == [m.Subscribe]
        assert not any(isinstance(c, Reconnect) for c in commands)


def test_backoff_restarts_after_a_successful_subscription():
    core, clock = make_core(backoff=Backoff(initial=0.5, maximum=10.0, jitter=0.0))
    core.start()
    assert retry_delays(core, clock, 4) == [0.5, 1.0, 2.0, 4.0]
    subscribed(core)
    clock.advance(5 * HEARTBEAT)
    core.tick()   # master gone: re-subscribes at once, next retry 0.5 s later
    assert core.next_deadline() - clock.now() == 0.5


@pytest.mark.parametrize("kwargs", [dict(initial=0.0), dict(initial=2.0, maximum=1.0), dict(jitter=1.0)])
def test_bad_backoff(kwargs):
    with pytest.raises(ValueError):
        Backoff(**kwargs)


# ------------------------------------------------------------- heartbeats
def test_a_heartbeat_goes_out_after_heartbeat_interval_of_our_silence():
    core, clock = subscribed_core()
    clock.advance(HEARTBEAT - 0.1)
    assert core.tick() == []
    clock.advance(0.1)
    core.receive(m.Heartbeat())
    assert sent(core.tick()) == [m.Heartbeat()]
    clock.advance(HEARTBEAT / 2)
    assert core.tick() == []   # just sent one


def test_any_call_counts_as_a_heartbeat():
    core, clock = subscribed_core()
    clock.advance(HEARTBEAT - 0.5)
    core.revive_offers()
    clock.advance(0.5)
    assert core.tick() == []
    assert core.next_deadline() == pytest.approx(clock.now() + HEARTBEAT - 0.5)


def test_master_silence_means_disconnected_and_resubscribe():
    core, clock = subscribed_core()
    for _ in range(4):   # we keep sending heartbeats; the master says nothing
        clock.advance(HEARTBEAT)
        assert sent(core.tick()) == [m.Heartbeat()]
    assert core.connected
    clock.advance(HEARTBEAT)
    commands = core.tick()
    assert callbacks(commands) == [("disconnected", ())]
    assert isinstance(commands[1], Reconnect)
    assert [type(msg) for msg in sent(commands)] == [m.Subscribe]
    assert core.state is SubscriptionState.SUBSCRIBING


def test_any_message_from_the_master_postpones_the_verdict():
    core, clock = subscribed_core()
    clock.advance(4 * HEARTBEAT)
    core.receive(m.RescindOffer("o1"))
    clock.advance(4 * HEARTBEAT)
    assert core.connected and "disconnected" not in [name for name, _ in callbacks(core.tick())]


def test_errors_alone_do_not_keep_the_session_alive():
    # a master restarted at the same address forgets us and answers each of
    # our heartbeats with ERROR; only re-subscribing gets us back
    core, clock = subscribed_core()
    for _ in range(5):
        clock.advance(HEARTBEAT)
        commands = core.tick()
        if not core.connected:
            break
        core.receive(m.Error("unknown framework fw-1"))
    assert callbacks(commands)[0] == ("disconnected", ())
    assert sent(commands)[-1].framework.id == "fw-1"


def test_next_deadline_follows_the_state():
    core, clock = make_core()
    assert core.next_deadline() is None
    core.start()
    assert core.next_deadline() > clock.now()
    subscribed(core)
    assert core.next_deadline() == clock.now() + HEARTBEAT
    core.stop()
    assert core.next_deadline() == clock.now() + TEARDOWN_WAIT   # the wait for the teardown's confirmation
    core.receive(m.Error("framework fw-1 removed", fatal=True))
    assert core.next_deadline() is None


# ------------------------------------------------------------------ events
def test_events_become_callbacks():
    core, _ = subscribed_core()
    offer = Offer("o1", "agent-1", "host-1", Resources.parse("cpus:4;mem:1024"), {"room": "er1"})
    assert callbacks(core.receive(m.Offers([offer]))) == [("resource_offers", ([offer],))]
    assert core.receive(m.Offers([])) == []
    assert callbacks(core.receive(m.RescindOffer("o1", "timeout"))) == [("offer_rescinded", ("o1",))]
    assert callbacks(core.receive(m.Failure("agent-1"))) == [("agent_lost", ("agent-1",))]
    assert callbacks(core.receive(m.PreemptionWarning(["t1", "t2"], 15.0, "eng"))) == [
        ("preemption_warning", (["t1", "t2"], 15.0))]
    assert callbacks(core.receive(m.FrameworkMessage("fw-1", "agent-1", b"\x00hi"))) == [
        ("framework_message", ("agent-1", b"\x00hi"))]
    # from a custom executor: executor_message names it (Scheduler's default passes it to framework_message)
    assert callbacks(core.receive(m.FrameworkMessage("fw-1", "agent-1", b"hi", executor_id="exec-1"))) == [
        ("executor_message", ("exec-1", "agent-1", b"hi"))]
    assert core.receive(m.Heartbeat()) == []
    assert core.receive(m.Ping("agent-1")) == []   # not for a framework: ignored


def test_non_fatal_error_is_reported_and_the_session_goes_on():
    core, _ = subscribed_core()
    assert core.receive(m.Error("offer o9 is unknown")) == [InvokeCallback("error", ("offer o9 is unknown",))]
    assert core.connected


def test_fatal_error_aborts_after_the_error_callback():
    core, _ = subscribed_core()
    assert core.receive(m.Error("framework was removed", fatal=True)) == [
        InvokeCallback("error", ("framework was removed",)), Shutdown(aborted=True)]
    assert core.state is SubscriptionState.STOPPED
    assert core.receive(m.Update(TaskStatus("t1", TaskState.RUNNING))) == []


def test_fatal_error_while_subscribing_aborts_too():
    core, _ = make_core()
    core.start()
    assert core.receive(m.Error("role not allowed", fatal=True))[-1] == Shutdown(aborted=True)


# --------------------------------------------------------- acknowledgements
def update(uuid="u-1", state=TaskState.RUNNING):
    return m.Update(TaskStatus("t1", state, agent_id="agent-1", uuid=uuid))


def test_implicit_acknowledgement_follows_the_callback():
    core, _ = subscribed_core()
    commands = core.receive(update())
    assert sent(commands) == []   # not before the callback ran
    assert sent(run_callbacks(core, commands)) == [m.Acknowledge("fw-1", "agent-1", "t1", "u-1")]


def test_no_acknowledgement_for_an_update_without_uuid():
    core, _ = subscribed_core()
    assert run_callbacks(core, core.receive(update(uuid=""))) == []


def test_explicit_acknowledgements_wait_for_the_framework():
    core, _ = subscribed_core(implicit_acknowledgements=False)
    commands = core.receive(update())
    assert run_callbacks(core, commands) == []
    status = commands[0].args[0]
    assert sent(core.acknowledge_status_update(status)) == [m.Acknowledge("fw-1", "agent-1", "t1", "u-1")]
    assert core.acknowledge_status_update(status.replace(uuid="")) == []


def test_explicit_acknowledge_is_ignored_when_implicit():
    core, _ = subscribed_core()
    assert core.acknowledge_status_update(update().status) == []
    with pytest.raises(TypeError):
        core.acknowledge_status_update("t1")


def test_no_acknowledgement_if_the_master_went_away_during_the_callback():
    core, clock = subscribed_core()
    commands = core.receive(update())
    clock.advance(5 * HEARTBEAT)
    core.tick()
    assert run_callbacks(core, commands) == []   # the agent resends it


# ------------------------------------------------------------------- calls
def test_calls_carry_the_framework_id():
    core, _ = subscribed_core()
    filters = Filters(refuse_seconds=5.0)
    tasks = [task("t1"), task("t2")]
    assert sent(core.launch_tasks(["o1", "o2"], tasks, filters)) == [m.Accept("fw-1", ["o1", "o2"], tasks, filters)]
    assert sent(core.launch_tasks(["o3"], [])) == [m.Accept("fw-1", ["o3"], [], Filters())]
    assert sent(core.decline_offer("o4", Filters(refuse_seconds=30.0))) == [
        m.Decline("fw-1", ["o4"], Filters(refuse_seconds=30.0))]
    assert sent(core.suppress_offers()) == [m.Suppress("fw-1")]
    assert sent(core.revive_offers()) == [m.Revive("fw-1")]
    assert sent(core.kill_task("t1")) == [m.Kill("fw-1", "t1", "")]
    assert sent(core.reconcile_tasks([])) == [m.Reconcile("fw-1", [])]
    status = TaskStatus("t2", TaskState.RUNNING, agent_id="agent-2")
    assert sent(core.reconcile_tasks(["t1", status])) == [
        m.Reconcile("fw-1", [m.ReconcileTask("t1"), m.ReconcileTask("t2", "agent-2")])]
    assert sent(core.send_framework_message("agent-1", b"data", "t1")) == [
        m.FrameworkMessage("fw-1", "agent-1", b"data", "t1")]


@pytest.mark.parametrize("call", [
    lambda core: core.launch_tasks("o1", []),
    lambda core: core.launch_tasks(["o1"], ["not a task"]),
    lambda core: core.launch_tasks(["o1"], [], filters=5.0),
    lambda core: core.decline_offer(7),
    lambda core: core.reconcile_tasks("t1"),
    lambda core: core.reconcile_tasks([3]),
    lambda core: core.send_framework_message("agent-1", "text", "t1"),
    lambda core: core.send_framework_message("agent-1", b"data", None),
])
def test_bad_call_arguments_raise_type_error(call):
    core, _ = subscribed_core()
    with pytest.raises(TypeError):
        call(core)


def test_calls_while_disconnected_are_dropped():
    core, _ = make_core()
    core.start()
    for call in (lambda: core.decline_offer("o1"), core.suppress_offers, core.revive_offers,
                 lambda: core.kill_task("t1"), lambda: core.reconcile_tasks([]),
                 lambda: core.send_framework_message("agent-1", b"x", "t1")):
        assert call() == []


def test_launch_while_disconnected_gives_task_dropped_updates_and_an_error():
    core, clock = subscribed_core()
    clock.advance(5 * HEARTBEAT)
    core.tick()
    commands = core.launch_tasks(["o1"], [task("t1"), task("t2", "agent-2")])
    assert sent(commands) == []
    names = [name for name, _ in callbacks(commands)]
    assert names == ["status_update", "status_update", "error"]
    dropped = [args[0] for name, args in callbacks(commands) if name == "status_update"]
    assert [(s.task_id, s.agent_id, s.state, s.uuid, s.framework_id) for s in dropped] == [
        ("t1", "agent-1", TaskState.DROPPED, "", "fw-1"), ("t2", "agent-2", TaskState.DROPPED, "", "fw-1")]
    assert all(s.terminal and s.source == "SOURCE_MASTER" for s in dropped)
    assert "t1, t2" in callbacks(commands)[-1][1][0]
    assert run_callbacks(core, commands) == []   # made up here: nothing to acknowledge


# ---------------------------------------------------------------- stopping
def test_stop_tears_the_framework_down():
    core, _ = subscribed_core()
    # the session ends when the master confirms the teardown (below), not when it is sent
    assert core.stop() == [SendToMaster(m.Teardown("fw-1"))]
    assert core.state is SubscriptionState.STOPPED
    assert core.stop() == []
    assert core.receive(update()) == [] and core.tick() == []
    assert core.launch_tasks(["o1"], [task("t1")]) == []   # no callbacks after stop


def test_a_teardown_ends_the_session_when_the_master_confirms_it():
    core, clock = subscribed_core(teardown_wait=1.0)
    assert core.stop() == [SendToMaster(m.Teardown("fw-1"))]
    assert core.next_deadline() == clock.now() + 1.0
    assert core.receive(m.Error("refused, not fatal")) == []   # only the removal's fatal ERROR confirms it
    assert core.receive(m.Error("framework fw-1 removed: torn down by the framework", fatal=True)) == [
        Shutdown(aborted=False)]   # no error() callback: the driver was stopped
    assert core.next_deadline() is None and core.tick() == []
    assert core.receive(m.Error("again", fatal=True)) == []


def test_an_unconfirmed_teardown_ends_the_session_after_the_wait():
    core, clock = subscribed_core(teardown_wait=1.0)
    core.stop()
    clock.advance(0.999)
    assert core.tick() == []
    clock.advance(0.001)
    assert core.tick() == [Shutdown(aborted=False)]
    assert core.next_deadline() is None and core.tick() == []


def test_stop_with_failover_only_goes_quiet():
    core, _ = subscribed_core()
    assert core.stop(failover=True) == [Shutdown(aborted=False)]


def test_stop_while_not_subscribed_sends_no_teardown():
    core, _ = make_core()
    core.start()
    assert core.stop() == [Shutdown(aborted=False)]


def test_abort():
    core, _ = subscribed_core()
    assert core.abort() == [Shutdown(aborted=True)]
    assert core.abort() == []


# --------------------------------------------------------------- layering
def test_the_core_does_no_io():
    path = pathlib.Path(__file__).resolve().parents[1] / "mesoslike" / "driver" / "core.py"
    forbidden = {"socket", "threading", "zmq", "time", "os", "select", "selectors", "asyncio", "subprocess"}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            assert not {alias.name.split(".")[0] for alias in node.names} & forbidden
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.module.split(".")[0] not in forbidden
            assert node.module not in ("mesoslike.transport", "mesoslike.driver.driver")
    source = path.read_text()
    for call in ("random.random(", "random.uniform(", "time.time(", "time.monotonic("):
        assert call not in source


def test_a_new_leader_means_resubscribe_at_once_with_the_same_id():
    core, clock = subscribed_core()
    commands = core.master_changed()
    assert callbacks(commands) == [("disconnected", ())]
    assert any(isinstance(c, Reconnect) for c in commands)
    (subscribe,) = sent(commands)
    assert subscribe.framework.id == "fw-1"
    assert callbacks(subscribed(core, resubscribed=True)) == [("reregistered", (MASTER,))]


def test_a_new_leader_while_still_subscribing_just_retries_there():
    core, clock = make_core()
    core.start()
    commands = core.master_changed()
    assert callbacks(commands) == []
    assert [type(msg) for msg in sent(commands)] == [m.Subscribe]
