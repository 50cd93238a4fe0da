"""A task's delivery at the master, as a pure, table-driven state machine.

From the master's side a task is *pending* until its agent confirms it,
then *live* on its agent; its agent may become unreachable and come back;
its end arrives as a terminal status update that the framework must
acknowledge before the task's story is told (*done*: it joins the
history). Along the way the master forwards its agent's updates to the
framework, acknowledges to the agent what the framework acknowledged (or,
for a retry the framework has had, itself), and gives what the task held
back to the allocator exactly once. Every rule of that is here, as data:
:data:`TRANSITIONS` lists, for each :class:`Phase` and :class:`Event`, the
condition, the next phase and the :class:`Action` s, in order; docs/architecture.rst
shows the table, rendered from it by :func:`render_transitions`.

:func:`process` moves a task (anything with a ``phase``, its latest
``status`` and the uuid the framework ``acknowledged_uuid`` last) and
returns the actions for the caller —
:class:`~mesoslike.master.delivery.UpdateDelivery` and the agent and
launch parts of the core — to carry out. An event with no row in the
task's phase changes nothing and asks for nothing. O(1): a dictionary
lookup and at most two guards; the actions are the row's own tuple.

A task enters the table in one of :data:`BIRTHS`: launched by its
framework (PENDING), or reported by a re-registering agent (LIVE, ENDING,
ENDED). Which phases hold resources in the allocator is :data:`HOLDING`.
"""

from __future__ import annotations

import enum
from typing import Callable, Optional, Protocol

import attrs

from mesoslike.rst import simple_table
from mesoslike.wire import TaskStatus

__all__ = ["Phase", "Event", "Action", "Transition", "TRANSITIONS", "BIRTHS", "HOLDING", "CONFIRMED",
           "DeliveredTask", "process", "transition", "render_transitions", "render_phases"]


class Phase(enum.Enum):
    PENDING = "launched; its agent has not confirmed it yet (RUN_TASK is sent again until it does)"
    LIVE = "its agent has it; the latest update is forwarded, or acknowledged"
    ENDING = "its agent reported it ended when it re-registered; updates from before its end are on their way"
    UNREACHABLE = "its agent is unreachable (a partition-aware framework's task): it may come back"
    UNREACHABLE_PENDING = "its agent became unreachable before it confirmed the task"
    ENDED = "its end is known (its terminal update, or its agent's report): the framework is to acknowledge it"
    DONE = "its story is told (acknowledged, or ended by the master): it is in the history"


#: the phases in which the task holds resources in the allocator (its agent is registered and
#: runs it, or was sent it); leaving them, they go back once — through the allocator
#: (RECOVER) or with the agent's removal
HOLDING = frozenset({Phase.PENDING, Phase.LIVE})
#: the phases in which its agent has confirmed the task (the master keeps no secret's value)
CONFIRMED = frozenset({Phase.LIVE, Phase.ENDING, Phase.UNREACHABLE, Phase.ENDED})


class Event(enum.Enum):
    UPDATE = "a non-terminal status update from its agent"
    END = "a terminal status update from its agent"
    ACKNOWLEDGED = "the framework acknowledges an update"
    LAUNCH_TIMEOUT = "not confirmed within the launch timeout, attempts left"
    LAUNCH_GIVEN_UP = "not confirmed after the last launch attempt"
    REPORTED = "its agent re-registers listing it running"
    REPORTED_ENDED = "its agent re-registers listing it ended"
    NOT_REPORTED = "its agent re-registers without it"
    AGENT_UNREACHABLE = "its agent is marked unreachable"
    AGENT_REMOVED = "its registered agent is gone for good (unregistered, marked gone)"
    AGENT_FORGOTTEN = "its unreachable agent is gone for good (registry GC, marked gone)"
    FRAMEWORK_REMOVED = "its framework is removed (torn down, failover timeout)"


class Action(enum.Enum):
    CONFIRM = "confirmed: the master keeps no secret's value from now on"
    APPLY = "the update becomes the task's status"
    RECOVER = "what the task held goes back to the allocator"
    FORWARD = "the update goes to the framework (if connected; a retry only after a while)"
    SETTLE = "the master acknowledges the update to the agent on the framework's behalf"
    DROP = "the update is dropped: counted, logged once, acknowledged to the agent"
    REMEMBER = "the acknowledgement is remembered (a retry of that update is settled)"
    COMPLETE = "into the history: its story is told"
    RESEND = "RUN_TASK again, the wait doubled"
    KILL = "the agent is told to kill it, should it have it after all"
    TELL = "the framework is told the state its agent's update stream delivers next (no uuid)"
    END = "the master ends it with a status it makes up (no uuid), tells the framework, completes it"
    ARCHIVE = "it goes to the history with its framework (TASK_KILLED if it was running)"


class DeliveredTask(Protocol):
    """What the machine reads and moves of a task (the core's TaskRecord)."""

    phase: Phase
    status: TaskStatus
    acknowledged_uuid: str


#: a guard: (the task, the update or None, the acknowledged uuid, whether its framework is partition-aware)
Guard = Callable[[DeliveredTask, Optional[TaskStatus], str, bool], bool]


@attrs.frozen
class Transition:
    """One row: in ``source``, on ``event``, when ``guard`` holds
    (described by ``when``), go to ``target`` and carry out ``actions``."""

    source: Phase
    event: Event
    when: str
    target: Phase
    actions: tuple[Action, ...]
    guard: Guard | None = attrs.field(default=None, repr=False)


# guards
def _acknowledged_retry(task: DeliveredTask, status: TaskStatus | None, uuid: str, aware: bool) -> bool:
    """A retry of an update the framework acknowledged already (our acknowledgement to the agent was late or lost)."""
    return status is not None and bool(status.uuid) and status.uuid == task.acknowledged_uuid


def _after_the_end(task: DeliveredTask, status: TaskStatus | None, uuid: str, aware: bool) -> bool:
    """Another update than the terminal one the task ended with (one end per task)."""
    return status is not None and bool(task.status.uuid) and status.uuid != task.status.uuid


def _older(task: DeliveredTask, status: TaskStatus | None, uuid: str, aware: bool) -> bool:
    """A non-terminal update after the end (a late retry of an older update)."""
    return True


def _acknowledges_end(task: DeliveredTask, status: TaskStatus | None, uuid: str, aware: bool) -> bool:
    return uuid == task.status.uuid


def _aware(task: DeliveredTask, status: TaskStatus | None, uuid: str, aware: bool) -> bool:
    return aware


def _unaware(task: DeliveredTask, status: TaskStatus | None, uuid: str, aware: bool) -> bool:
    return not aware


P = Phase
E = Event
A = Action
_ACKED = "a retry of an update the framework acknowledged"
_AFTER = "another update than the terminal one"
_ON = "its framework is partition-aware"
_OFF = "its framework is not partition-aware"
_UPDATE = (A.APPLY, A.FORWARD)
_END = (A.APPLY, A.RECOVER, A.FORWARD)

#: every transition; an event with no row in the task's phase changes nothing
TRANSITIONS: tuple[Transition, ...] = (
    # --- its agent's updates
    Transition(P.PENDING, E.UPDATE, _ACKED, P.LIVE, (A.CONFIRM, A.SETTLE), _acknowledged_retry),
    Transition(P.PENDING, E.UPDATE, "", P.LIVE, (A.CONFIRM, *_UPDATE)),
    Transition(P.PENDING, E.END, _ACKED, P.LIVE, (A.CONFIRM, A.SETTLE), _acknowledged_retry),
    Transition(P.PENDING, E.END, "", P.ENDED, (A.CONFIRM, *_END)),
    Transition(P.LIVE, E.UPDATE, _ACKED, P.LIVE, (A.SETTLE,), _acknowledged_retry),
    Transition(P.LIVE, E.UPDATE, "", P.LIVE, _UPDATE),
    Transition(P.LIVE, E.END, _ACKED, P.LIVE, (A.SETTLE,), _acknowledged_retry),
    Transition(P.LIVE, E.END, "", P.ENDED, _END),
    Transition(P.ENDING, E.UPDATE, _ACKED, P.ENDING, (A.SETTLE,), _acknowledged_retry),
    Transition(P.ENDING, E.UPDATE, "", P.ENDING, _UPDATE),
    Transition(P.ENDING, E.END, _ACKED, P.ENDING, (A.SETTLE,), _acknowledged_retry),
    Transition(P.ENDING, E.END, "", P.ENDED, _UPDATE),
    Transition(P.ENDED, E.UPDATE, _ACKED, P.ENDED, (A.SETTLE,), _acknowledged_retry),
    Transition(P.ENDED, E.UPDATE, "a late retry of an older update", P.ENDED, (A.DROP,), _older),
    Transition(P.ENDED, E.END, _ACKED, P.ENDED, (A.SETTLE,), _acknowledged_retry),
    Transition(P.ENDED, E.END, _AFTER, P.ENDED, (A.DROP,), _after_the_end),
    Transition(P.ENDED, E.END, "its retry, or the first with a uuid", P.ENDED, _UPDATE),
    # --- the framework's acknowledgements
    Transition(P.PENDING, E.ACKNOWLEDGED, "", P.PENDING, (A.REMEMBER,)),
    Transition(P.LIVE, E.ACKNOWLEDGED, "", P.LIVE, (A.REMEMBER,)),
    Transition(P.ENDING, E.ACKNOWLEDGED, "", P.ENDING, (A.REMEMBER,)),
    Transition(P.UNREACHABLE, E.ACKNOWLEDGED, "", P.UNREACHABLE, (A.REMEMBER,)),
    Transition(P.UNREACHABLE_PENDING, E.ACKNOWLEDGED, "", P.UNREACHABLE_PENDING, (A.REMEMBER,)),
    Transition(P.ENDED, E.ACKNOWLEDGED, "of its terminal update", P.DONE, (A.REMEMBER, A.COMPLETE),
               _acknowledges_end),
    Transition(P.ENDED, E.ACKNOWLEDGED, "", P.ENDED, (A.REMEMBER,)),
    # --- launches not confirmed
    Transition(P.PENDING, E.LAUNCH_TIMEOUT, "", P.PENDING, (A.RESEND,)),
    Transition(P.PENDING, E.LAUNCH_GIVEN_UP, "", P.DONE, (A.RECOVER, A.KILL, A.END)),
    # --- its agent re-registers (known to this master, or back from a partition)
    Transition(P.PENDING, E.REPORTED, "", P.LIVE, (A.CONFIRM,)),
    Transition(P.PENDING, E.NOT_REPORTED, "", P.DONE, (A.RECOVER, A.END)),
    Transition(P.LIVE, E.NOT_REPORTED, "", P.DONE, (A.RECOVER, A.END)),
    Transition(P.ENDING, E.NOT_REPORTED, "", P.DONE, (A.END,)),
    Transition(P.UNREACHABLE, E.REPORTED, "", P.LIVE, (A.TELL,)),
    Transition(P.UNREACHABLE, E.REPORTED_ENDED, "", P.ENDING, (A.TELL,)),
    Transition(P.UNREACHABLE, E.NOT_REPORTED, "", P.DONE, (A.END,)),
    Transition(P.UNREACHABLE_PENDING, E.REPORTED, "", P.LIVE, (A.CONFIRM, A.TELL)),
    Transition(P.UNREACHABLE_PENDING, E.REPORTED_ENDED, "", P.ENDING, (A.CONFIRM, A.TELL)),
    Transition(P.UNREACHABLE_PENDING, E.NOT_REPORTED, "", P.DONE, (A.END,)),
    Transition(P.ENDED, E.NOT_REPORTED, "its agent was unreachable", P.DONE, (A.COMPLETE,)),
    # --- its agent out of reach, or gone
    Transition(P.PENDING, E.AGENT_UNREACHABLE, _ON, P.UNREACHABLE_PENDING, (A.TELL,), _aware),
    Transition(P.PENDING, E.AGENT_UNREACHABLE, _OFF, P.DONE, (A.END,), _unaware),
    Transition(P.LIVE, E.AGENT_UNREACHABLE, _ON, P.UNREACHABLE, (A.TELL,), _aware),
    Transition(P.LIVE, E.AGENT_UNREACHABLE, _OFF, P.DONE, (A.END,), _unaware),
    Transition(P.ENDING, E.AGENT_UNREACHABLE, _ON, P.UNREACHABLE, (A.TELL,), _aware),
    Transition(P.ENDING, E.AGENT_UNREACHABLE, _OFF, P.DONE, (A.END,), _unaware),
    Transition(P.PENDING, E.AGENT_REMOVED, "", P.DONE, (A.END,)),
    Transition(P.LIVE, E.AGENT_REMOVED, "", P.DONE, (A.END,)),
    Transition(P.ENDING, E.AGENT_REMOVED, "", P.DONE, (A.END,)),
    Transition(P.UNREACHABLE, E.AGENT_FORGOTTEN, "", P.DONE, (A.END,)),
    Transition(P.UNREACHABLE_PENDING, E.AGENT_FORGOTTEN, "", P.DONE, (A.END,)),
    Transition(P.ENDED, E.AGENT_FORGOTTEN, "", P.DONE, (A.COMPLETE,)),
    # --- its framework removed
    *(Transition(phase, E.FRAMEWORK_REMOVED, "", P.DONE, (A.ARCHIVE,)) for phase in Phase if phase is not P.DONE),
)
del P, E, A

#: how a task enters the table: (how, its first phase)
BIRTHS: tuple[tuple[str, Phase], ...] = (
    ("launched by its framework (an ACCEPT)", Phase.PENDING),
    ("reported running by an agent the master did not know (after a failover)", Phase.LIVE),
    ("reported ended by such an agent, updates from before its end still to come", Phase.ENDING),
    ("reported ended by such an agent, its terminal update to come (or by agents before its framework "
     "subscribed again)", Phase.ENDED),
)

#: the rows by (phase, event) — by their names: an Enum member's hash is a Python call (``Enum.__hash__``),
#: a name's is cached; two a lookup, six lookups a task, were 5 % of the master's handling of an update
_ROWS: dict[tuple[str, str], tuple[Transition, ...]] = {}
for _row in TRANSITIONS:
    _ROWS[_row.source._name_, _row.event._name_] = (*_ROWS.get((_row.source._name_, _row.event._name_), ()), _row)
del _row


def transition(task: DeliveredTask, event: Event, status: TaskStatus | None = None, *, uuid: str = "",
               aware: bool = False) -> Transition | None:
    """The row ``event`` follows for ``task`` now (None: it changes nothing).
    ``status``: the update (UPDATE, END); ``uuid``: the acknowledged one
    (ACKNOWLEDGED); ``aware``: whether the framework is partition-aware."""
    for row in _ROWS.get((task.phase._name_, event._name_), ()):
        if row.guard is None or row.guard(task, status, uuid, aware):
            return row
    return None


def process(task: DeliveredTask, event: Event, status: TaskStatus | None = None, *, uuid: str = "",
            aware: bool = False) -> tuple[Action, ...]:
    """Move ``task`` on ``event``; the actions to carry out, in order."""
    # (transition's lookup inlined: six calls a task, the call with its keywords was a fifth of this)
    for row in _ROWS.get((task.phase._name_, event._name_), ()):
        if row.guard is None or row.guard(task, status, uuid, aware):
            task.phase = row.target
            return row.actions
    return ()


# ------------------------------------------------------------------ docs
def render_transitions() -> str:
    """:data:`TRANSITIONS` as an RST table (docs/architecture.rst includes it verbatim)."""
    header = ("phase", "event", "when", "next phase", "actions")
    rows = [(row.source.name, row.event.name, row.when or "—", row.target.name,
             ", ".join(action.name for action in row.actions) or "—") for row in TRANSITIONS]
    return simple_table(header, rows)


def render_phases() -> str:
    """Each phase, whether it holds resources, and what it means, as an RST table."""
    header = ("phase", "holds resources", "meaning")
    rows = [(phase.name, "yes" if phase in HOLDING else "no", phase.value) for phase in Phase]
    return simple_table(header, rows)


if __name__ == "__main__":  # python -m mesoslike.master.task_lifecycle: the tables docs/architecture.rst shows
    print(render_phases())
    print(render_transitions())
