"""What a simulation replays: agents, task classes and tasks.

A :class:`Workload` is plain data, checked when it is built; the loaders
(:mod:`mesoslike.sim.traces`, :mod:`mesoslike.sim.synthetic`) make one from a
trace file or a generator, and a test or a user can build one by hand.

A task belongs to a *class* (``framework_id``: a QoS class of the trace, a
role of the synthetic generator). Under the greedy policies each class is a
framework of its own, in the role of the same name; under the Fuxi policies
the class names the task's quota group. Metrics are reported per class.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import attrs

from mesoslike.errors import MesoslikeError
from mesoslike.resources import Resources

__all__ = ["KNOWN_KINDS", "DEFAULT_PRIORITY", "TraceError", "AgentSpec", "TaskSpec", "Workload"]

#: the resource kinds a workload may use (agents and tasks alike)
KNOWN_KINDS = ("cpus", "mem", "gpus", "disk")
#: a task's priority when its trace gives none (Fuxi's default; smaller = higher)
DEFAULT_PRIORITY = 100


class TraceError(MesoslikeError, ValueError):
    """A trace or workload file that cannot be replayed; the message names the
    file and, for a bad row, the row."""


def _check_time(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


def _check_count(_instance: object, attribute: attrs.Attribute, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be an integer >= 1, got {value!r}")


def _check_priority(_instance: object, attribute: attrs.Attribute, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be an integer >= 0, got {value!r}")


def unknown_kinds(resources: Resources) -> list[str]:
    """The kinds of ``resources`` a workload may not use (sorted)."""
    return sorted(set(resources.names()) - set(KNOWN_KINDS))


@attrs.frozen
class AgentSpec:
    """One machine of the simulated cluster."""

    agent_id: str
    resources: Resources
    attributes: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class TaskSpec:
    """One task: its class (``framework_id``), what it needs, when it
    arrives, how long it runs once started (None = long-running).

    ``index`` orders tasks that arrive together. ``priority`` (smaller =
    higher) matters to the Fuxi policies; the allocator knows none. Tasks
    sharing a non-empty ``job`` are one Fuxi job (one ScheduleUnit whose
    desired slots grow as they arrive: FIFO and FAIR order jobs); tasks
    sharing a non-empty ``gang`` start together or not at all (Fuxi's
    all-or-nothing unit) and arrive together. The tasks of a job or a gang
    have the same class, resources and priority; a task is in a job or a
    gang, not both.
    """

    task_id: str
    framework_id: str
    resources: Resources
    arrival: float = attrs.field(validator=_check_time)
    duration: float | None = attrs.field(validator=attrs.validators.optional(_check_time))
    index: int = 0
    priority: int = attrs.field(default=DEFAULT_PRIORITY, validator=_check_priority)
    gang: str = ""
    job: str = ""

    def __attrs_post_init__(self) -> None:
        if self.gang and self.job:
            raise ValueError(f"task {self.task_id!r} is in gang {self.gang!r} and job {self.job!r}: one or the other")

    @property
    def group(self) -> str:
        """The job or gang the task belongs to ("" if none)."""
        return self.gang or self.job


def _check_groups(tasks: Iterable[TaskSpec]) -> None:
    """The tasks of a gang or a job are alike; a gang's arrive together."""
    first: dict[tuple[str, str], TaskSpec] = {}
    for task in tasks:
        if not task.group:
            continue
        kind = "gang" if task.gang else "job"
        head = first.setdefault((kind, task.group), task)
        fields = ("framework_id", "resources", "priority") + (("arrival",) if task.gang else ())
        for field in fields:
            if getattr(task, field) != getattr(head, field):
                raise ValueError(f"{kind} {task.group!r}: task {task.task_id!r} differs from {head.task_id!r} "
                                 f"in {field} ({getattr(task, field)} != {getattr(head, field)}); the tasks of a "
                                 f"{kind} are identical slots" + (" that arrive together" if task.gang else ""))


@attrs.frozen
class Workload:
    """Agents, classes and tasks (in any order) to simulate.

    ``frameworks`` lists the task classes; ``roles`` maps a class to the
    allocator role its framework registers in (a class not listed uses a
    role of its own name; ``"*"`` puts it in the default role).
    ``skipped`` counts input rows left out, by reason, and ``notes`` says
    how rows were interpreted; ``tasks_per_offer`` caps how many tasks a
    greedy framework launches per offer (None = as many as fit).
    """

    name: str
    agents: tuple[AgentSpec, ...]
    frameworks: tuple[str, ...]
    tasks: tuple[TaskSpec, ...]
    skipped: Mapping[str, int] = attrs.field(factory=dict)
    tasks_per_offer: int | None = attrs.field(default=None, validator=attrs.validators.optional(_check_count))
    description: str = ""
    roles: Mapping[str, str] = attrs.field(factory=dict)
    notes: Mapping[str, int] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        _check_groups(self.tasks)

    def role_of(self, framework_id: str) -> str:
        """The allocator role of a class's framework."""
        return self.roles.get(framework_id, framework_id)

    @property
    def total(self) -> Resources:
        """What all agents have together."""
        return Resources.sum(agent.resources for agent in self.agents)
