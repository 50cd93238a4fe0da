"""The one back-off and the one update stream every retry loop uses
(mesoslike.backoff, mesoslike.delivery), as properties: a back-off's delays
stay within their bounds and their jitter, and start again on reset; an
update stream, against a receiver behind a channel that loses, repeats and
reorders messages, delivers each task's updates in order, one in flight at a
time, each until it is acknowledged, ignores duplicate and old
acknowledgements, and holds no more than its limit."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike.backoff import Backoff
from mesoslike.clock import FakeClock
from mesoslike.delivery import UpdateStreams
from mesoslike.wire.types import TaskState, TaskStatus

pytestmark = pytest.mark.timeout(60)

#: initial, maximum as a multiple of it (or no maximum), jitter
backoffs = st.tuples(st.floats(0.001, 100.0), st.floats(1.0, 1000.0) | st.just(math.inf), st.floats(0.0, 0.99)).map(
    lambda t: Backoff(initial=t[0], maximum=t[0] * t[1], jitter=t[2]))


# ------------------------------------------------------------------ back-off
@given(backoffs, st.integers(0, 2000), st.integers(0, 2 ** 32))
def test_a_delay_stays_between_its_jittered_floor_and_the_maximum(backoff, attempt, seed):
    base = min(backoff.initial * 2 ** min(attempt, 1000), backoff.maximum)
    delay = backoff.delay(attempt, random.Random(seed))
    assert (1 - backoff.jitter) * base <= delay <= base <= backoff.maximum
    assert base >= backoff.initial


@given(backoffs.map(lambda b: Backoff(b.initial, b.maximum, jitter=0.0)), st.integers(1, 60))
def test_without_jitter_delays_double_from_initial_up_to_the_maximum(backoff, attempts):
    delays = [backoff.delay(n) for n in range(attempts)]
    assert delays[0] == backoff.initial   # a reset (attempt 0) starts from the first delay again
    expected = backoff.initial
    for delay in delays:   # as each user used to write it: doubled after each try, capped
        assert delay == expected
        expected = min(expected * 2, backoff.maximum)


@given(backoffs.filter(lambda b: b.jitter > 0.05), st.integers(0, 2 ** 32))
def test_jitter_spreads_the_delays_of_many_peers_over_its_range(backoff, seed):
    rng = random.Random(seed)
    draws = [backoff.delay(0, rng) / backoff.initial for _ in range(200)]
    assert all(1 - backoff.jitter <= d <= 1 for d in draws)
    # 200 uniform draws cover the range: none of its halves is empty
    middle = 1 - backoff.jitter / 2
    assert any(d < middle for d in draws) and any(d > middle for d in draws)


def test_a_seeded_back_off_draws_once_per_delay_whatever_its_spread():
    # the agent draws status update uuids from the same random.Random: a
    # spread of 0 must not change which uuids a seeded agent makes
    for jitter in (0.0, 0.5):
        rng = random.Random(7)
        Backoff(1.0, 8.0, jitter).delay(3, rng)
        reference = random.Random(7)
        reference.uniform(0, 1)
        assert rng.random() == reference.random()


@pytest.mark.parametrize("kwargs", [dict(initial=0.0), dict(initial=-1.0), dict(initial=2.0, maximum=1.0),
                                    dict(jitter=1.0), dict(jitter=-0.1), dict(initial=math.nan)])
def test_a_back_off_refuses_bounds_that_mean_nothing(kwargs):
    with pytest.raises(ValueError):
        Backoff(**kwargs)


def test_a_jittered_back_off_needs_a_random_source_and_attempts_count_from_zero():
    with pytest.raises(ValueError):
        Backoff(1.0, 2.0, jitter=0.5).delay(0)
    with pytest.raises(ValueError):
        Backoff(1.0, 2.0, jitter=0.0).delay(-1)
    assert Backoff(1.0, math.inf, jitter=0.0).delay(5000) > 1e300   # no OverflowError without a maximum


# ------------------------------------------------------------- update stream
def status(task: str, n: int) -> TaskStatus:
    return TaskStatus(task, TaskState.RUNNING, message=str(n), uuid=f"{task}-{n}")


TASKS = ["a", "b", "c"]

#: what happens next: a task's producer adds an update; time passes; the
#: channel delivers, loses or duplicates what is in it; the receiver
#: acknowledges an old or unknown uuid; the receiver goes away and comes back
steps = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(TASKS)),
    st.tuples(st.just("add"), st.sampled_from(TASKS[:1])),   # often several of one task
    st.tuples(st.just("wait"), st.floats(0.0, 30.0)),
    st.tuples(st.just("deliver"), st.integers(0, 50)),
    st.tuples(st.just("lose"), st.integers(0, 50)),
    st.tuples(st.just("duplicate"), st.integers(0, 50)),
    st.tuples(st.just("stale_ack"), st.sampled_from(TASKS), st.integers(0, 20)),
    st.tuples(st.just("readd"), st.sampled_from(TASKS), st.integers(0, 20)),
    st.tuples(st.just("disconnect"),),
    st.tuples(st.just("reconnect"),),
)


class Run:
    """A sender (UpdateStreams, sending only while connected), a lossy
    channel both ways, and a receiver that takes each task's updates in
    order and acknowledges whatever it gets (as the master and the agent
    do). Records what the properties are checked on."""

    def __init__(self, backoff: Backoff, limit: int, timed: bool = False, combined: bool = False) -> None:
        #: acknowledgements told with their time (as the agent's are): retries may wait for progress
        self.timed = timed
        #: added and acknowledged as the agent does, each with the send that follows in one call
        #: (add_and_send, acknowledge_and_send), not add or acknowledge and then send_head
        self.combined = combined
        self.now = 0.0
        self.streams: UpdateStreams[str] = UpdateStreams(backoff, limit=limit)
        self.connected = True
        self.produced: dict[str, list[TaskStatus]] = {t: [] for t in TASKS}
        self.acked: dict[str, list[str]] = {t: [] for t in TASKS}
        #: (task, uuid) of every send, in order, with the time
        self.sends: list[tuple[float, str, str]] = []
        #: messages in the channel: ("update", task, status) or ("ack", task, uuid)
        self.channel: list[tuple[str, str, object]] = []
        self.received: dict[str, list[str]] = {t: [] for t in TASKS}

    def send(self, out: list[tuple[str, TaskStatus]]) -> None:
        for task, update in out:
            self.check_in_flight(task, update)
            self.sends.append((self.now, task, update.uuid))
            self.channel.append(("update", task, update))

    def check_in_flight(self, task: str, update: TaskStatus) -> None:
        # one in flight: what goes out is the task's oldest unacknowledged update
        unacked = [u for u in self.produced[task] if u.uuid not in self.acked[task]]
        assert unacked and unacked[0] == update

    def step(self, step: tuple) -> None:
        kind = step[0]
        if kind == "add":
            task = step[1]
            if self.streams.full:
                with pytest.raises(OverflowError):
                    self.streams.add(task, status(task, 10_000))
                return
            update = status(task, len(self.produced[task]))
            self.produced[task].append(update)
            if self.combined:
                head = self.streams.add_and_send(task, update, FakeClock(self.now) if self.connected else None)
                assert (head is not None) == (self.streams.pending(task) == [update])
                if head is not None and self.connected:
                    self.send([(task, head)])   # (sent: else out on reconnection)
            elif self.streams.add(task, update) and self.connected:
                self.send([(task, self.streams.send_head(task, self.now))])
        elif kind == "readd":   # the producer sends one of its pending updates again
            task, n = step[1], step[2]
            before = self.streams.pending(task)
            if before:
                if self.combined:
                    assert self.streams.add_and_send(task, before[n % len(before)], FakeClock(self.now)) is None
                else:
                    assert self.streams.add(task, before[n % len(before)]) is False
                assert self.streams.pending(task) == before
        elif kind == "wait":
            due = self.streams.next_due()
            self.now += step[1]
            if self.connected:
                if due is not None and due <= self.now:
                    out = self.streams.due(self.now)
                    assert out or self.timed   # (timed: a retry may wait behind older sends)
                    self.send(out)
                else:
                    assert self.streams.due(self.now) == []
        elif kind in ("deliver", "lose", "duplicate") and self.channel:
            message = self.channel[step[1] % len(self.channel)]
            if kind != "duplicate":
                self.channel.remove(message)
            if kind != "lose" and self.connected:
                self.receive(message)
        elif kind == "stale_ack":   # an ack naming anything but the head changes nothing
            task, n = step[1], step[2]
            before = self.streams.pending(task)
            # one acknowledged already, one waiting behind the head, or one never made
            stale = self.acked[task] + [u.uuid for u in before[1:]] + [f"{task}-unknown"]
            assert self.streams.acknowledge(task, stale[n % len(stale)]) is None
            assert self.streams.pending(task) == before
        elif kind == "disconnect":
            self.connected = False
            self.channel.clear()   # what was on the way is lost with the connection
        elif kind == "reconnect" and not self.connected:
            self.connected = True
            self.send(self.streams.heads(self.now))

    def receive(self, message: tuple[str, str, object]) -> None:
        kind, task, body = message
        if kind == "update":
            assert isinstance(body, TaskStatus)
            if body.uuid not in self.received[task]:
                self.received[task].append(body.uuid)
            self.channel.append(("ack", task, body.uuid))
            return
        assert isinstance(body, str)
        if self.combined:
            answer = self.streams.acknowledge_and_send(task, body, self.now if self.timed else None, self.connected)
            if answer is None:
                return
            self.acked[task].append(answer[0].uuid)
            if answer[1] is not None:
                self.send([(task, answer[1])])
                return
            if self.timed or not self.connected:
                assert self.streams.head(task) is None or not self.connected
                return
            following = self.streams.head(task)   # (without a time, nothing was sent)
            if following is not None:
                self.send([(task, self.streams.send_head(task, self.now))])
            return
        acked = self.streams.acknowledge(task, body, self.now if self.timed else None)
        if acked is None:
            return   # the second answer to a retry, or an old one
        self.acked[task].append(acked.uuid)
        following = self.streams.head(task)
        if following is not None:
            self.send([(task, self.streams.send_head(task, self.now))])

    def settle(self) -> None:
        """From now on nothing is lost: every update gets through and is
        acknowledged, within a bounded time."""
        if not self.connected:
            self.step(("reconnect",))
        deadline = self.now + 100 * self.streams.backoff.maximum + 100
        while self.streams.count:
            while self.channel:
                self.receive(self.channel.pop(0))
            due = self.streams.next_due()
            if due is None:
                break
            assert due <= self.now + self.streams.backoff.maximum   # a head waits at most the longest delay
            self.now = max(self.now, due)
            self.send(self.streams.due(self.now))
            assert self.now <= deadline


@given(st.lists(steps, max_size=80), st.integers(1, 40),
       st.tuples(st.floats(0.1, 5.0), st.floats(1.0, 20.0)), st.booleans(), st.booleans())
def test_a_stream_delivers_each_tasks_updates_in_order_one_in_flight_until_acknowledged(script, limit, times, timed,
                                                                                        combined):
    run = Run(Backoff(times[0], times[0] * times[1], jitter=0.0), limit, timed, combined)
    for step in script:
        run.step(step)
        assert run.streams.count <= limit   # bounded
        assert run.streams.count == sum(len(run.produced[t]) - len(run.acked[t]) for t in TASKS)
    run.settle()
    for task in TASKS:
        produced = [u.uuid for u in run.produced[task]]
        assert run.received[task] == produced   # each one, in order
        assert run.acked[task] == produced      # each acknowledged once
        assert run.streams.pending(task) == [] and run.streams.head(task) is None
    assert run.streams.count == 0 and run.streams.next_due() is None


@given(st.integers(1, 12), st.floats(0.1, 2.0), st.floats(2.0, 50.0))
def test_an_unanswered_head_is_sent_again_with_the_back_off_which_starts_again_on_reregistration(
        tries, initial, maximum):
    backoff = Backoff(initial, maximum, jitter=0.0)
    streams: UpdateStreams[str] = UpdateStreams(backoff)
    now = 0.0
    assert streams.add("a", status("a", 0))
    streams.send_head("a", now)
    for attempt in range(1, tries + 1):
        due = streams.next_due()
        assert due == now + backoff.delay(attempt - 1)
        assert streams.due(math.nextafter(due, 0)) == []   # not a moment early
        now = due
        assert streams.due(now) == [("a", status("a", 0))]
    # a new registration: the head goes out at once, and its back-off starts from the first delay
    assert streams.heads(now) == [("a", status("a", 0))]
    assert streams.next_due() == now + initial
    # acknowledged: the next update's back-off starts from the first delay too
    assert streams.add("a", status("a", 1)) is False
    assert streams.acknowledge("a", "a-0") == status("a", 0)
    assert streams.send_head("a", now) == status("a", 1)
    assert streams.next_due() == now + initial


def test_a_retry_waits_while_older_sends_are_acknowledged_and_goes_once_they_stop_or_a_later_one_is():
    """With acknowledgements told their time (the agent's), a head due again
    is not sent while the receiver acknowledges sends older than it (it is
    queued there, not lost); it goes once none came for the back-off's
    first wait, or once a send after it is acknowledged first."""
    streams: UpdateStreams[str] = UpdateStreams(Backoff(0.5, 10.0, jitter=0.0))
    for task in "abcd":
        streams.add(task, status(task, 0))
        streams.send_head(task, 0.0)   # sends 1 to 4, all due again at 0.5
    assert streams.acknowledge("a", "a-0", 0.4) == status("a", 0)   # the receiver works through them
    assert streams.due(0.5) == []   # b, c and d are behind a: they wait, until 0.9
    assert streams.retries_waited == 3 and streams.next_due() == 0.9
    assert streams.acknowledge("b", "b-0", 0.8) == status("b", 0)
    assert streams.due(0.9) == [] and streams.next_due() == 1.3   # still coming: c and d wait on
    # none for 0.5 s: the receiver may have lost them — c and d go again
    assert streams.due(1.3) == [("c", status("c", 0)), ("d", status("d", 0))]
    # a later send acknowledged first: the one before it goes at once when due
    streams.add("e", status("e", 0))
    streams.send_head("e", 1.3)   # due again at 1.8
    assert streams.acknowledge("d", "d-0", 1.5) == status("d", 0)   # d sent twice (sends 4 and 6): which?
    streams.postpone("c", 1.8)
    assert streams.due(1.8) == [] and streams.next_due() == 2.0   # so c (send 5) still waits
    assert streams.acknowledge("e", "e-0", 2.0) == status("e", 0)   # send 7, sent once: after c's 5
    # c due again: acknowledgements still come, but of sends after its own
    assert streams.next_due() == 2.0 and streams.due(2.0) == [("c", status("c", 0))]
    assert streams.retries_waited == 7   # (e waited at 1.8 too: its first wait ended then)
    # without times (the executor driver's), every retry goes when due, as before
    plain: UpdateStreams[str] = UpdateStreams(Backoff(0.5, 10.0, jitter=0.0))
    for task in "ab":
        plain.add(task, status(task, 0))
        plain.send_head(task, 0.0)
    assert plain.acknowledge("a", "a-0") == status("a", 0)
    assert plain.due(0.5) == [("b", status("b", 0))] and plain.retries_waited == 0


def test_an_acknowledgement_of_an_ending_update_ends_its_stream_and_sends_nothing_more():
    """``acknowledge_and_send``'s ``ends`` (the agent's terminal states): the
    stream is gone with whatever followed the ending update; any other
    acknowledgement sends the next head at once, when asked to."""
    streams: UpdateStreams[str] = UpdateStreams(Backoff(1.0, 8.0, jitter=0.0))
    running, finished, late = status("a", 0), TaskStatus("a", TaskState.FINISHED, uuid="a-1"), status("a", 2)
    assert streams.add_and_send("a", running, FakeClock(0.0)) == running
    assert streams.add_and_send("a", finished, FakeClock(0.0)) is None and streams.add_and_send("a", late, None) is None
    assert streams.acknowledge_and_send("a", "a-1", 0.5, True, {TaskState.FINISHED}) is None   # not the head
    assert streams.acknowledge_and_send("a", "a-0", 0.5, True, {TaskState.FINISHED}) == (running, finished)
    assert streams.next_due() == 1.5
    assert streams.acknowledge_and_send("a", "a-1", 0.6, True, {TaskState.FINISHED}) == (finished, None)
    assert "a" not in streams and streams.count == 0 and streams.next_due() is None
    # not asked to send: the next head waits for send_head (or heads, on registration)
    streams.add("b", status("b", 0))
    streams.add("b", status("b", 1))
    assert streams.acknowledge_and_send("b", "b-0", 0.7, False) == (status("b", 0), None)
    assert streams.next_due() is None and streams.send_head("b", 0.7) == status("b", 1)


def test_only_the_head_is_acknowledged():
    streams: UpdateStreams[str] = UpdateStreams(Backoff(1.0, 8.0, jitter=0.0))
    for n in range(3):
        streams.add("a", status("a", n))
    streams.send_head("a", 0.0)
    for uuid in ("a-1", "a-2", "a-9"):   # behind the head, or unknown
        assert streams.acknowledge("a", uuid) is None
    assert streams.acknowledge("b", "a-0") is None   # another task's
    assert streams.acknowledge("a", "a-0") == status("a", 0)
    assert streams.acknowledge("a", "a-0") is None   # the second answer to a retry
    assert [u.uuid for u in streams.pending("a")] == ["a-1", "a-2"] and streams.key_of("a-1") == "a"


def test_a_postponed_head_waits_and_removed_or_cleared_streams_send_nothing():
    streams: UpdateStreams[str] = UpdateStreams(Backoff(1.0, 8.0, jitter=0.0))
    for task in ("a", "b"):
        streams.add(task, status(task, 0))
        streams.send_head(task, 0.0)
    streams.postpone("a", 30.0)
    assert streams.due(29.0) == [("b", status("b", 0))]   # sent again at 29, due at 31 next
    assert streams.due(30.0) == [("a", status("a", 0))]
    streams.remove("a")
    assert streams.key_of("a-0") is None and "a" not in streams
    assert [key for key, _ in streams.due(1000.0)] == ["b"]
    streams.clear()
    assert streams.count == 0 and streams.next_due() is None and streams.due(10_000.0) == []


def test_a_stream_refuses_what_it_could_not_deliver_or_bound():
    streams: UpdateStreams[str] = UpdateStreams(Backoff(1.0, 2.0, jitter=0.0), limit=1)
    with pytest.raises(ValueError):
        streams.add("a", TaskStatus("a", TaskState.RUNNING))   # no uuid: no acknowledgement could name it
    streams.add("a", status("a", 0))
    with pytest.raises(OverflowError):
        streams.add("b", status("b", 0))
    with pytest.raises(ValueError):
        UpdateStreams(Backoff(1.0, 2.0, jitter=0.5))   # no random source to jitter with


# ---------------------------------------------------------------- the docs
def documented_backoffs() -> dict[str, tuple[str, ...]]:
    """The rows of docs/reliability.rst's table of retries: name -> (initial, maximum, jitter)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "reliability.rst").read_text()
    lines = text[text.index("the ``Backoff``"):].splitlines()
    columns = [m.span() for m in re.finditer("=+", lines[1])]
    rows = {}
    for line in lines[2:]:
        if line.startswith("==="):
            return rows
        if line[:1] != " ":   # a row begins (its continuation lines leave the first column blank)
            cells = [line[start:end + 2].strip() for start, end in columns]
            rows[cells[0]] = tuple(cells[1:4])
    raise AssertionError("the table of retries has no end")


def test_the_retries_table_states_each_back_off_as_the_code_has_it():
    import inspect

    from mesoslike.agent import core as agent_core
    from mesoslike.agent.core import AgentCore
    from mesoslike.driver import Backoff as DriverBackoff
    from mesoslike.executor import core as executor_core
    from mesoslike.master import runtime as master_runtime
    from mesoslike.master.records import MasterConfig

    def seconds(value: float) -> str:
        return "none" if value == math.inf else f"{value:g} s"

    agent = inspect.signature(AgentCore).parameters
    code = {
        "``agent.core.UPDATE_BACKOFF``": agent_core.UPDATE_BACKOFF,
        "``AgentCore`` registration": Backoff(agent["register_backoff"].default, agent["register_backoff_max"].default,
                                              agent["register_jitter"].default),
        "``executor.core.ANSWER_BACKOFF``": executor_core.ANSWER_BACKOFF,
        "``executor.core.REFUSAL_BACKOFF``": executor_core.REFUSAL_BACKOFF,
        "``executor.core.REGISTER_BACKOFF``": executor_core.REGISTER_BACKOFF,
        "``driver.Backoff()``": DriverBackoff(),
        "``MasterConfig.task_launch_timeout``": Backoff(MasterConfig().task_launch_timeout, math.inf, 0.0),
        "``master.runtime.STORE_BACKOFF``": master_runtime.STORE_BACKOFF,
    }
    assert documented_backoffs() == {name: (seconds(b.initial), seconds(b.maximum), f"{b.jitter:g}")
                                     for name, b in code.items()}


def test_a_retry_held_for_the_receivers_progress_is_due_when_that_wait_ends_even_at_a_rounding_edge():
    # 1.045 - 0.545 < 0.5 but 0.545 + 0.5 == 1.045 in floating point: the retry held until the receiver's
    # progress grows stale was rescheduled to a time already come, and ``due`` looped for good (an
    # agent in that loop sent nothing more: CI run 84's test_a_dropped_acknowledgement...)
    streams: UpdateStreams[str] = UpdateStreams(Backoff(0.5, 4.0, jitter=0.0))
    first = TaskStatus("a", TaskState.RUNNING, uuid="u1")
    second = TaskStatus("b", TaskState.RUNNING, uuid="u2")
    assert streams.add("a", first) and streams.send_head("a", 0.0) == first
    assert streams.add("b", second) and streams.send_head("b", 0.0) == second
    assert 1.045 - 0.545 < 0.5 and 0.545 + 0.5 <= 1.045
    assert streams.acknowledge("a", "u1", 0.545) == first   # the receiver got the older send at 0.545
    assert streams.due(1.045) == [("b", second)]
    assert streams.next_due() == 1.045 + 1.0
