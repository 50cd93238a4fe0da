"""The launch planner: an ACCEPT checked against what its offers hold —
offer ids and operations in, a :class:`LaunchPlan` or a :class:`Refusal`
out. Pure: it reads the offers, the framework and the agent it is given,
changes nothing and does no I/O (Mesos's ``master/validation.cpp`` plays this
part); :class:`mesoslike.master.launches.Launches` carries a plan out.

The rules (docs/framework-api.rst, docs/reservations.rst): the operations
apply in order — a RESERVE or UNRESERVE changes what the offers hold for the
operations after it — and ``tasks`` are a last LAUNCH. An invalid task
ends TASK_ERROR and the others launch, as in Mesos; an invalid RESERVE or
UNRESERVE refuses the whole accept (nothing is applied, its tasks end
TASK_DROPPED, the offers go back unfiltered and the framework gets an
ERROR); offers that are not the framework's to accept refuse it too (the
valid ones go back with the accept's filter).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import attrs

from mesoslike.acl import Credentials, Refused
from mesoslike.allocator import Offer as AllocatorOffer
from mesoslike.master.records import AgentRecord, FrameworkRecord, clip
from mesoslike.master.reservations import (Conversion, ReservationError, check_reservation_count, framework_reserve,
                                           reserver_principals, unreserve)
from mesoslike.resources import Resources
from mesoslike.wire import Operation, OperationType, TaskInfo, TaskState
from mesoslike.wire import messages as m
from mesoslike.wire.types import EXECUTOR_RUN_PREFIX, ExecutorInfo

__all__ = ["LaunchPlan", "FailedTask", "Refusal", "BAD_FILTER", "INVALID_OFFERS", "OPERATION_REFUSED",
           "plan_accept", "operations_of", "reservation_refusal"]

EMPTY = Resources()

#: why a whole accept is refused (:attr:`Refusal.kind`)
BAD_FILTER = "bad filter"                  # refuse_seconds < 0: an ERROR, the offers stay outstanding
INVALID_OFFERS = "invalid offers"          # offers unknown, repeated, of another framework or agent
OPERATION_REFUSED = "operation refused"    # a RESERVE or UNRESERVE that may not be applied


@attrs.frozen
class FailedTask:
    """A task of the accept that may not launch: it ends ``state`` with ``why`` and ``reason``."""

    task: TaskInfo
    state: str
    why: str
    reason: str


@attrs.frozen
class LaunchPlan:
    """What an accept does, checked: the offers it takes (as they were
    made), the reservation ``conversions`` to apply first, the tasks to
    launch (with the user they run as), those that may not (``failed``),
    what the tasks and the custom executors they start use, those
    ``starting`` executors by id, and the permissions refused to single
    tasks (``run_tasks``, counted by the caller)."""

    agent_id: str
    offers: tuple[AllocatorOffer, ...]
    conversions: tuple[Conversion, ...]
    launched: tuple[TaskInfo, ...]
    failed: tuple[FailedTask, ...]
    used: Resources
    starting: Mapping[str, ExecutorInfo]
    refuse_seconds: float
    refused_permissions: tuple[str, ...] = ()


@attrs.frozen
class Refusal:
    """An accept refused whole (:data:`BAD_FILTER`, :data:`INVALID_OFFERS`,
    :data:`OPERATION_REFUSED`): ``offers`` (the valid ones) go back with a
    ``refuse_seconds`` filter, ``dropped`` tasks end TASK_DROPPED saying
    ``why``; ``permission``: the ACL permission that was refused, if one was."""

    kind: str
    why: str
    offers: tuple[AllocatorOffer, ...] = ()
    refuse_seconds: float = 0.0
    dropped: tuple[TaskInfo, ...] = ()
    permission: str | None = None

    @property
    def tells_framework(self) -> bool:
        """Whether the framework gets an ERROR saying why (else only its tasks' statuses)."""
        return self.kind != INVALID_OFFERS


def operations_of(accept: m.Accept) -> list[Operation]:
    """The accept's operations, in order, its ``tasks`` as a last LAUNCH."""
    operations = list(accept.operations)
    if accept.tasks:
        operations.append(Operation(OperationType.LAUNCH, tasks=list(accept.tasks)))
    return operations


def plan_accept(framework: FrameworkRecord, offer_ids: Sequence[str], operations: Sequence[Operation],
                refuse_seconds: float, principal: str | None, *, offer_of: Callable[[str], AllocatorOffer | None],
                agents: Mapping[str, AgentRecord], credentials: Credentials | None) -> LaunchPlan | Refusal:
    """Check an accept by ``framework`` (its sender authenticated as
    ``principal``) of the offers ``offer_ids`` (``offer_of`` finds an
    outstanding offer by id) for ``operations``. O(tasks x resource kinds)."""
    all_tasks = tuple(task for operation in operations for task in operation.tasks)
    if refuse_seconds < 0:
        return Refusal(BAD_FILTER, f"refuse_seconds must be >= 0, got {refuse_seconds}")
    offers, problem = _accepted_offers(framework, offer_ids, offer_of)
    if problem is not None:
        return Refusal(INVALID_OFFERS, problem, offers, refuse_seconds, all_tasks)
    agent = agents[offers[0].agent_id]
    try:
        return _plan(framework, agent, offers, operations, refuse_seconds, principal, credentials)
    except _Refused as refused:
        return Refusal(OPERATION_REFUSED, f"the accept was refused, nothing was applied: {refused.why}", offers,
                       0.0, all_tasks, refused.permission)


class _Refused(Exception):
    def __init__(self, why: str, permission: str | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.permission = permission


def _accepted_offers(framework: FrameworkRecord, offer_ids: Sequence[str],
                     offer_of: Callable[[str], AllocatorOffer | None]) -> tuple[tuple[AllocatorOffer, ...], str | None]:
    """The valid offers among ``offer_ids`` and why the accept may not use them (None: it may)."""
    offers: list[AllocatorOffer] = []
    problem: str | None = None
    if not offer_ids:
        return (), "no offers given"
    if len(set(offer_ids)) != len(offer_ids):
        problem = "an offer is given twice"
    for offer_id in dict.fromkeys(offer_ids):
        offer = offer_of(offer_id)
        if offer is None or offer.framework_id != framework.id:
            problem = problem or f"offer {offer_id} is no longer valid (answered, rescinded or never made)"
        else:
            offers.append(offer)
    if problem is None and len({offer.agent_id for offer in offers}) > 1:
        problem = "offers of more than one agent in one accept"
    return tuple(offers), problem


def _plan(framework: FrameworkRecord, agent: AgentRecord, offers: tuple[AllocatorOffer, ...],
          operations: Sequence[Operation], refuse_seconds: float, principal: str | None,
          credentials: Credentials | None) -> LaunchPlan:
    """Check the operations against what the offers hold, in order. Raises
    :class:`_Refused` for a RESERVE or UNRESERVE that may not be applied."""
    pool = Resources.sum(offer.resources for offer in offers)
    conversions: list[Conversion] = []
    launched: list[TaskInfo] = []
    launched_ids: set[str] = set()
    failed: list[FailedTask] = []
    refused_permissions: list[str] = []
    used: list[Resources] = []               # what the launches use, summed once at the end
    left = pool                              # what is left of the offers after the operations so far
    starting: dict[str, ExecutorInfo] = {}   # custom executors this accept starts on the agent
    for number, operation in enumerate(operations, 1):
        if operation.type == OperationType.LAUNCH:
            if operation.resources or operation.role or operation.labels:
                raise _Refused(f"operation {number}: a LAUNCH carries tasks only")
            # while only scalars are taken from a ``left`` without ranges: its thousandths, changed in place
            # (a new vector a task was ~1.5 µs of the 5-7 an ACCEPT's task costs), the vector made again
            # when read; ``plain``: the last task resources seen without ranges (an ACCEPT's tasks mostly
            # share one vector, the codec's parse of their equal text)
            left_millis: dict[str, int] | None = None
            plain: Resources | None = None
            for task in operation.tasks:
                need = task.resources
                if task.executor is None:
                    executor_needs: Resources = EMPTY
                    problem = None
                else:
                    if left_millis is not None:
                        left, left_millis = Resources.from_millis(left_millis), None
                    executor_needs, problem = _executor_needs(framework, task, agent, starting)
                    if problem is None and executor_needs:
                        if not left.contains(need + executor_needs):
                            problem = (f"task resources {need} and its executor's {executor_needs} "
                                       f"exceed what is left of the offers ({left})")
                if problem is None:
                    problem = _task_problem(framework, task, agent, launched_ids)
                if problem is None:
                    if need is not plain and task.executor is None and not need.range_names():
                        plain = need
                    if need is plain and task.executor is None and (left_millis is not None
                                                                    or not left.range_names()):
                        if left_millis is None:
                            left_millis = dict(left.millis())
                        for name, amount in need.millis().items():
                            if left_millis.get(name, 0) < amount:
                                left, left_millis = Resources.from_millis(left_millis), None
                                break
                    elif left_millis is not None:   # ranges asked for: the vector
                        left, left_millis = Resources.from_millis(left_millis), None
                    if left_millis is None and not left.contains(need):
                        problem = f"task resources {need} exceed what is left of the offers ({left})"
                    elif task.kill_grace_period < 0:
                        problem = "kill_grace_period must be >= 0"
                if problem is not None:
                    failed.append(FailedTask(task, TaskState.ERROR, problem, "REASON_TASK_INVALID"))
                    continue
                task, problem = _task_user(framework, task, principal, credentials)
                if problem is not None:
                    refused_permissions.append("run_tasks")
                    failed.append(FailedTask(task, TaskState.ERROR, problem, "REASON_TASK_UNAUTHORIZED"))
                    continue
                launched.append(task)
                launched_ids.add(task.task_id)
                used.append(need)
                if left_millis is not None:   # (it fits: checked above)
                    for name, amount in need.millis().items():
                        rest = left_millis[name] - amount
                        if rest > 0:
                            left_millis[name] = rest
                        else:
                            del left_millis[name]
                else:
                    left = left - need   # (one vector operation a task: pool - used was two with used + r)
                if task.executor is not None and task.executor.executor_id not in starting \
                        and (framework.id, task.executor.executor_id) not in agent.executors:
                    starting[task.executor.executor_id] = task.executor
                    used.append(task.executor.resources)
                    left = left - task.executor.resources
            if left_millis is not None:
                left = Resources.from_millis(left_millis)
            continue
        conversion = _conversion(number, operation, framework, principal, credentials)
        if not left.contains(conversion.removed):
            raise _Refused(f"operation {number} ({operation.type}): {conversion.removed} is not in what the offers "
                           f"hold after the operations before it ({left})")
        left = left - conversion.removed + conversion.added
        conversions.append(conversion)
    if conversions:
        total = agent.info.resources
        for conversion in conversions:
            total = total - conversion.removed + conversion.added
        try:
            check_reservation_count(total)
        except ReservationError as exc:
            raise _Refused(str(exc)) from None
    return LaunchPlan(agent.id, offers, tuple(conversions), tuple(launched), tuple(failed), Resources.sum(used),
                      starting, refuse_seconds, tuple(refused_permissions))


def _conversion(number: int, operation: Operation, framework: FrameworkRecord, principal: str | None,
                credentials: Credentials | None) -> Conversion:
    """What a RESERVE or UNRESERVE by the framework converts, if it may."""
    if operation.tasks:
        raise _Refused(f"operation {number}: a {operation.type} carries no tasks")
    if operation.labels and operation.type != OperationType.RESERVE:
        raise _Refused(f"operation {number}: only a RESERVE carries labels (an UNRESERVE names them in its "
                       "resources' kinds)")
    try:
        if operation.type == OperationType.RESERVE:
            conversion = framework_reserve(operation.resources, operation.role, framework.info.role,
                                           principal or "", [(label.key, label.value) for label in operation.labels])
            action, targets = "reserve_resources", conversion.added.reservation_roles()
        else:
            if operation.role:
                raise ReservationError("an UNRESERVE names no role: its resources say whose they are")
            conversion = unreserve(operation.resources)
            action, targets = "unreserve_resources", reserver_principals(operation.resources)
    except ReservationError as exc:
        raise _Refused(f"operation {number} ({operation.type}): {exc}") from None
    refused = reservation_refusal(credentials, action, principal, targets, "framework")
    if refused is not None:
        raise _Refused(f"operation {number} ({operation.type}): {refused}", action)
    return conversion


def reservation_refusal(credentials: Credentials | None, action: str, principal: str | None, targets: Sequence[str],
                        kind: str) -> Refused | None:
    """With credentials, why ``principal``, acting as a ``kind`` peer, may
    not do ``action`` on every target (roles reserved for, principals that
    reserved); None if it may (or the cluster is anonymous)."""
    if credentials is None:
        return None
    for target in targets:
        try:
            credentials.check(action, principal, target, kind)
        except Refused as refused:
            return refused
    return None


def _executor_needs(framework: FrameworkRecord, task: TaskInfo, agent: AgentRecord,
                    starting: Mapping[str, ExecutorInfo]) -> tuple[Resources, str | None]:
    """What the task's custom executor takes from the offers besides the
    task (its resources the first time it starts on the agent, else
    nothing), or why the task cannot use it (another executor under the
    same id)."""
    if task.executor is None:
        return EMPTY, None
    executor_id = task.executor.executor_id
    running = starting.get(executor_id) or agent.executors.get((framework.id, executor_id))
    if running is None:
        return task.executor.resources, None
    if (running.command, running.resources) != (task.executor.command, task.executor.resources):
        return EMPTY, (f"executor {clip(executor_id)!r} runs on agent {agent.id} with another command or other "
                       "resources")
    return EMPTY, None


def _task_problem(framework: FrameworkRecord, task: TaskInfo, agent: AgentRecord, earlier: set[str]) -> str | None:
    """Why ``task`` cannot launch (``earlier``: the ids launched before it
    in the same ACCEPT), or None — but for whether it fits in what is left
    of the offers and its kill grace period, which the caller checks after
    this, in that order. O(resource kinds): an ACCEPT of 5,000 tasks used
    to scan the earlier ones for each (a stall of seconds)."""
    if not task.task_id:
        return "the task id is empty"
    if task.task_id in framework.tasks or task.task_id in earlier:
        return f"task id {task.task_id} is already in use"
    if agent.doomed and (framework.id, task.task_id) in agent.doomed:
        return (f"task id {task.task_id} is in use on agent {agent.id} by the task of that id it brought back "
                "from a partition, which is being killed; use another id")
    if task.agent_id != agent.id:
        return f"task agent_id {task.agent_id!r} is not the offers' agent {agent.id}"
    if task.executor is None and not _runs_something(task):
        return "the task has no command" if task.shell else "the task has shell false and no arguments"
    if task.task_id.startswith(EXECUTOR_RUN_PREFIX):
        return "a task id may not begin with the executors' reserved prefix"
    if not task.resources:
        return "the task asks for no resources"
    return None


def _task_user(framework: FrameworkRecord, task: TaskInfo, principal: str | None,
               credentials: Credentials | None) -> tuple[TaskInfo, str | None]:
    """``task`` with the unix user it runs as (its own, else its
    framework's), and why it may not launch (the ``run_tasks`` ACL), or
    None. In an anonymous cluster a task without a user runs as the agent's
    user, as before."""
    user = task.user or framework.info.user
    if user != task.user:
        task = task.replace(user=user)
    if credentials is None:
        return task, None
    if not user:
        return task, "not authorized: the task has no user to run as (set FrameworkInfo.user or the task's)"
    try:
        credentials.check("run_tasks", principal, user)
    except Refused as refused:
        return task, str(refused)
    return task, None


def _runs_something(task: TaskInfo) -> bool:
    """The task names what to run: a shell ``command``; with ``shell``
    false a program (``command``, Mesos's ``value``) or ``arguments``, or
    an image's entrypoint (docs/framework-api.rst)."""
    if task.shell:
        return bool(task.command.strip())
    return bool(task.command.strip() or task.arguments) or \
        (task.container is not None and bool(task.container.image_name()))
