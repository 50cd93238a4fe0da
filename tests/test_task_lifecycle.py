"""A task's delivery at the master (mesoslike.master.task_lifecycle): every
row of the table walked, and over any sequence of events no illegal state is
reachable — resources go back exactly once, a task's story is told once,
nothing but its end is said after its end, a task an agent speaks of is
confirmed, and confirmation is never taken back."""

import pathlib

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mesoslike.master.task_lifecycle import (BIRTHS, CONFIRMED, HOLDING, TRANSITIONS, Action, Event, Phase, process,
                                             render_phases, render_transitions, transition)
from mesoslike.wire import TaskState, TaskStatus

pytestmark = pytest.mark.timeout(120)

ROOT = pathlib.Path(__file__).resolve().parents[1]


@attrs.define
class Task:
    phase: Phase
    status: TaskStatus
    acknowledged_uuid: str = ""


def status(state=TaskState.RUNNING, uuid=""):
    return TaskStatus("t", state, uuid=uuid)


def start(phase, uuid="", acknowledged=""):
    """A task in ``phase`` whose status fits it (terminal only when ENDED or DONE)."""
    state = TaskState.FINISHED if phase in (Phase.ENDED, Phase.DONE) else \
        TaskState.UNREACHABLE if phase in (Phase.UNREACHABLE, Phase.UNREACHABLE_PENDING) else TaskState.RUNNING
    return Task(phase, status(state, uuid), acknowledged)


def case(row):
    """A task, an update, an acknowledged uuid and partition awareness for which ``row`` is the one taken."""
    update = status(TaskState.FINISHED if row.event is Event.END else TaskState.RUNNING, "u2") \
        if row.event in (Event.UPDATE, Event.END) else None
    guard = row.guard.__name__ if row.guard is not None else ""
    task = start(row.source, uuid="u1")
    if guard == "_acknowledged_retry":
        task.acknowledged_uuid = "u2"
    elif guard == "_after_the_end":
        task.status = status(TaskState.FINISHED, "u1")
    elif not guard and row.source is Phase.ENDED and row.event is Event.END:
        task.status = status(TaskState.FINISHED, "u2")   # its retry
    uuid = "u1" if guard == "_acknowledges_end" else "u0"
    return task, update, uuid, guard == "_aware"


@pytest.mark.parametrize("row", TRANSITIONS, ids=lambda row: f"{row.source.name}-{row.event.name}-{row.when[:20]}")
def test_each_transition(row):
    task, update, uuid, aware = case(row)
    assert transition(task, row.event, update, uuid=uuid, aware=aware) is row
    assert process(task, row.event, update, uuid=uuid, aware=aware) == row.actions
    assert task.phase is row.target


def test_events_without_a_row_change_nothing():
    rows = {(row.source, row.event) for row in TRANSITIONS}
    for phase in Phase:
        for event in Event:
            if (phase, event) in rows:
                continue
            task = start(phase)
            assert process(task, event, status()) == () and task.phase is phase


def test_done_is_final_and_every_phase_is_reachable():
    assert not [row for row in TRANSITIONS if row.source is Phase.DONE]
    reached = {phase for _, phase in BIRTHS}
    while True:
        more = {row.target for row in TRANSITIONS if row.source in reached} - reached
        if not more:
            break
        reached |= more
    assert reached == set(Phase)
    assert {row.event for row in TRANSITIONS} == set(Event)


def test_resources_go_back_only_from_the_phases_that_hold_them():
    for row in TRANSITIONS:
        if Action.RECOVER in row.actions:
            assert row.source in HOLDING and row.target not in HOLDING, row


# ------------------------------------------------------------- sequences
UUIDS = st.sampled_from(["", "a", "b", "c"])
#: (event, the uuid of its update or acknowledgement, whether the framework is partition-aware)
EVENTS = st.tuples(st.sampled_from(list(Event)), UUIDS, st.booleans())
#: events by which what a task holds goes back with its agent (the allocator forgets the agent) or its
#: framework (the allocator forgets the framework), not through RECOVER
RETURNED_WITH = {Event.AGENT_UNREACHABLE, Event.AGENT_REMOVED, Event.FRAMEWORK_REMOVED}


@settings(max_examples=400, deadline=None)
@given(birth=st.sampled_from([phase for _, phase in BIRTHS]), events=st.lists(EVENTS, max_size=30))
def test_no_illegal_state_is_reachable(birth, events):
    """Carry out the actions as the core does (statuses only) and keep an
    allocator's ledger of what the task holds."""
    task = start(birth)
    held = 1 if birth in HOLDING else 0
    ended_with: TaskStatus | None = task.status if task.status.terminal else None
    confirmed = task.phase in CONFIRMED
    completed = 0
    for event, uuid, aware in events:
        before = task.phase
        update = status(TaskState.FINISHED if event is Event.END else TaskState.RUNNING, uuid) \
            if event in (Event.UPDATE, Event.END) else None
        actions = process(task, event, update, uuid=uuid, aware=aware)
        if before is Phase.DONE:
            assert actions == () and task.phase is Phase.DONE, "a task's story is told once"
        for action in actions:
            if action is Action.APPLY:
                assert update is not None
                task.status = update
            elif action is Action.FORWARD:
                assert update is not None
                assert ended_with is None or update.terminal, "nothing but its end is said after its end"
                if update.terminal:
                    ended_with = update
            elif action is Action.RECOVER:
                held -= 1
            elif action is Action.REMEMBER and uuid:
                task.acknowledged_uuid = uuid
            elif action is Action.TELL:
                task.status = status(TaskState.UNREACHABLE if event is Event.AGENT_UNREACHABLE else TaskState.RUNNING)
            elif action is Action.END:   # a status the master makes up, then complete
                task.status = status(TaskState.LOST)
                completed += 1
            elif action in (Action.COMPLETE, Action.ARCHIVE):
                completed += 1
        if before in HOLDING and task.phase not in HOLDING and event in RETURNED_WITH:
            held -= 1   # the allocator gave them back with the agent or the framework
        if before not in HOLDING and task.phase in HOLDING:
            held += 1   # its agent re-registered running it: the allocator counts it used again
        assert held == (1 if task.phase in HOLDING else 0), f"resources {held} in {task.phase} after {event}"
        assert completed <= 1 and (completed == 1) == (task.phase is Phase.DONE)
        if task.phase is not Phase.DONE:
            assert (task.phase is Phase.ENDED) == task.status.terminal, f"{task.phase} with {task.status.state}"
        if actions and event in (Event.UPDATE, Event.END, Event.REPORTED, Event.REPORTED_ENDED):
            assert task.phase in CONFIRMED, "an agent that speaks of a task has it"
        confirmed_now = task.phase in CONFIRMED or task.phase is Phase.DONE
        assert confirmed_now or not confirmed, "a confirmed task is never unconfirmed"
        confirmed = confirmed_now


# ------------------------------------------------------------------ docs
def test_docs_show_the_table_the_code_has():
    doc = (ROOT / "docs" / "architecture.rst").read_text()
    paste = "docs/architecture.rst: paste what `python -m mesoslike.master.task_lifecycle` prints"
    assert render_phases() in doc, paste
    assert render_transitions() in doc, paste
