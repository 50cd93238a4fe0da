"""A one-shot command framework, like ``mesos-execute``: run a shell command
as N task instances, report progress, end with their outcome.

Built only on the public API (``mesoslike``), like every bundled framework.
``mesoslike run`` is its command line.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable

from mesoslike import (CommandURI, ContainerInfo, Filters, FrameworkInfo, HealthCheck, Label, Offer, Resources, Scheduler, TaskInfo,
                       TaskState, TaskStatus)
from mesoslike_frameworks.constraints import Constraint, Placements

__all__ = ["CommandScheduler", "Instance", "Progress", "instance_of", "TERMINAL_STATES"]

log = logging.getLogger("mesoslike_frameworks.command")


#: the terminal states, as the public TaskStatus model says (computed once: asked per update)
TERMINAL_STATES = frozenset(state for state in TaskState.ALL if TaskStatus(task_id="", state=state).terminal)


class Instance:
    """What a run knows of one of its instances: one record a task, so that a
    status update touches one dict entry and a few slots, not five dicts
    (issue 29)."""

    __slots__ = ("state", "message", "agent_id", "hostname", "exit_code", "launched_on")

    def __init__(self, state: str, hostname: str = "", launched_on: str = "") -> None:
        self.state = state
        #: the message of its latest status (None before its first)
        self.message: str | None = None
        #: the agent it runs (ran) on, from its statuses ("" before its first that names one)
        self.agent_id = ""
        #: that agent's hostname, from the offer it was launched with
        self.hostname = hostname
        #: its exit code once it ended (None: ended without one, or not ended)
        self.exit_code: int | None = None
        #: the agent it was launched on while it is staging ("" once it left TASK_STAGING)
        self.launched_on = launched_on

    def __repr__(self) -> str:
        return (f"Instance({self.state!r}, message={self.message!r}, agent_id={self.agent_id!r}, "
                f"hostname={self.hostname!r}, exit_code={self.exit_code!r})")


class Progress:
    """Counts of the instances by what happened to them.

    Every figure (``finished``, ``failed`` — of which ``killed`` —,
    ``running``, ``done``, ``summary()``) is a counter kept up to date by :meth:`record`: O(1) per
    status update, not a recount of every task (which made a run O(N²),
    issue 14). ``tasks`` keeps each task's :class:`Instance` (latest state,
    message, agent, hostname, exit code) for the end; ``states``,
    ``messages``, ``agents``, ``hosts`` and ``exit_codes`` are dicts made
    from it when asked (O(N): for the end and for tests, not per update).
    """

    _RUNNING = frozenset({TaskState.RUNNING, TaskState.STARTING, TaskState.STAGING, TaskState.KILLING})

    def __init__(self, instances: int) -> None:
        self.instances = instances
        self.launched = 0
        self.tasks: dict[str, Instance] = {}   # task id -> what is known of it, in launch order
        self.finished = 0
        self.failed = 0                        # ended other than TASK_FINISHED ...
        self.killed = 0                        # ... of which TASK_KILLED
        self.running = 0
        #: why instances wait although agents were offered (a constraint refused them all), "" if they do not
        self.blocked = ""
        #: what an instance needs that no offer had (``cpus:64``), "" once one fits
        self.too_big = ""

    def record(self, task_id: str, state: str) -> None:
        """``task_id`` is now in ``state``: O(1)."""
        task = self.tasks.get(task_id)
        if task is None:
            self.tasks[task_id] = Instance(state)
        else:
            self._count(task.state, -1)
            task.state = state
        self._count(state, +1)

    def staged(self, task_id: str, hostname: str, agent_id: str) -> None:
        """A new instance ``task_id`` launched on ``agent_id`` (``hostname``):
        TASK_STAGING there, one more launched. O(1)."""
        self.record(task_id, TaskState.STAGING)
        task = self.tasks[task_id]
        task.hostname, task.launched_on = hostname, agent_id
        self.launched += 1

    def moved(self, task_id: str, before: str, state: str) -> None:
        """:meth:`record` of a task known to be in ``before`` (one lookup less; one an update)."""
        self.tasks[task_id].state = state
        if before in self._RUNNING and state in self._RUNNING:   # STARTING -> RUNNING: no count changes
            return
        self._count(before, -1)
        self._count(state, +1)

    def _count(self, state: str, by: int) -> None:
        if state == TaskState.FINISHED:
            self.finished += by
        elif state in TERMINAL_STATES:
            self.failed += by
            if state == TaskState.KILLED:
                self.killed += by
        elif state in self._RUNNING:
            self.running += by

    @property
    def done(self) -> bool:
        return self.finished + self.failed == self.instances

    @property
    def unended(self) -> int:
        """Instances launched and not ended yet."""
        return self.launched - self.finished - self.failed

    # each task's latest state, message, agent, hostname and exit code as dicts (O(N) a call)
    @property
    def states(self) -> dict[str, str]:
        """task id -> its latest state"""
        return {task_id: task.state for task_id, task in self.tasks.items()}

    @property
    def messages(self) -> dict[str, str]:
        """task id -> the message of its latest status (the tasks that had one)"""
        return {task_id: task.message for task_id, task in self.tasks.items() if task.message is not None}

    @property
    def agents(self) -> dict[str, str]:
        """task id -> the agent it runs (ran) on (the tasks whose statuses named one)"""
        return {task_id: task.agent_id for task_id, task in self.tasks.items() if task.agent_id}

    @property
    def hosts(self) -> dict[str, str]:
        """task id -> its agent's hostname, from the offer it was launched with"""
        return {task_id: task.hostname for task_id, task in self.tasks.items() if task.hostname}

    @property
    def exit_codes(self) -> dict[str, int | None]:
        """task id -> its exit code (None: none), for the ended tasks"""
        return {task_id: task.exit_code for task_id, task in self.tasks.items() if task.state in TERMINAL_STATES}

    def failures(self) -> list[str]:
        """The ids of the instances that ended other than TASK_FINISHED, in instance order."""
        return sorted((task_id for task_id, task in self.tasks.items()
                       if task.state != TaskState.FINISHED and task.state in TERMINAL_STATES), key=_instance_order)

    def summary(self) -> str:
        killed = f" ({self.killed} killed)" if self.killed else ""
        return (f"{self.finished}/{self.instances} finished, {self.failed} failed{killed}, {self.running} running, "
                f"{self.instances - self.launched} waiting")

    def _check(self) -> None:
        """The counters agree with a recount of ``tasks`` (for tests: O(N))."""
        states = [task.state for task in self.tasks.values()]
        assert self.finished == states.count(TaskState.FINISHED)
        assert self.failed == sum(1 for s in states if s in TERMINAL_STATES and s != TaskState.FINISHED)
        assert self.killed == states.count(TaskState.KILLED)
        assert self.running == sum(1 for s in states if s in self._RUNNING)
        assert len(states) == self.launched <= self.instances


def _copies_that_fit(free: Resources, need: Resources) -> int | None:
    """How many copies of ``need`` fit in ``free`` when ``need`` is scalars
    only (None when it has ranges, or no quantity: counted one by one then).
    O(kinds), against a contains and a subtraction a copy."""
    if need.range_names():
        return None
    have = free.millis()
    copies: int | None = None
    for kind, amount in need.millis().items():
        if amount > 0:
            fit = have.get(kind, 0) // amount
            copies = fit if copies is None or fit < copies else copies
    return copies


def instance_of(task_id: str) -> int | None:
    """The instance number of a task id ``<name>-<n>`` (None for another id)."""
    number = task_id.rpartition("-")[2]
    return int(number) if number.isdigit() else None


def _instance_order(task_id: str) -> tuple[int, str]:
    number = instance_of(task_id)
    return (number if number is not None else -1, task_id)


class CommandScheduler(Scheduler):
    """Launches ``instances`` copies of ``command`` (as many per offer as fit),
    declines what it cannot use, suppresses offers once everything is
    launched, and stops the driver when every instance has ended.

    ``on_change(progress, status)`` is called on the driver thread after each
    status update (``status`` None for other progress changes).

    ``constraints`` (Marathon-style, :mod:`mesoslike_frameworks.constraints`)
    decide which offers may take an instance, counting the instances of this
    run that have not ended. When every offer that has room is refused by a
    constraint while none of the run's instances is running (so nothing will
    change by waiting for them), ``progress.blocked`` says which constraint
    and which agents, at once; if that lasts ``unsatisfiable_after`` seconds,
    the run ends with that error instead of waiting for ever.

    Every instance gets the same ``health_check``, ``uris`` (fetched into its
    sandbox first) and ``labels``; values a task cannot have (101 URIs, say)
    raise ``ValueError`` here, not in a callback.
    """

    #: tasks launched on one agent and not yet started, at most: an agent
    #: starts its tasks one by one, and the master sends a launch again when
    #: the agent has not confirmed it within 10 s (docs/reliability.rst) —
    #: 25,600 launches at once made 70,000 resends (issue 14)
    max_staging_per_agent = 500

    def __init__(self, command: str, resources: Resources, instances: int = 1, name: str = "run",
                 on_change: Callable[[Progress, TaskStatus | None], None] | None = None,
                 environment: dict[str, str] | None = None, constraints: Iterable[Constraint] = (),
                 unsatisfiable_after: float = 15.0, clock: Callable[[], float] = time.monotonic,
                 health_check: HealthCheck | None = None, uris: Iterable[CommandURI] = (),
                 labels: Iterable[Label] = (), container: ContainerInfo | None = None,
                 task_prefix: str | None = None) -> None:
        self.command = command
        #: the tasks' container (an image: docs/containers.rst); with an image and no command, the
        #: image's entrypoint runs (Mesos's shell false, no arguments)
        self.container = container
        self.shell = bool(command) or container is None or not container.image_name()
        self.resources = resources
        self.name = name
        #: task ids are ``<task_prefix>-<instance>`` (the name by default; ``mesoslike run`` makes one per run)
        self.task_prefix = task_prefix or name
        self.environment = dict(environment or {})
        self.health_check = health_check
        self.uris = list(uris)
        self.labels = list(labels)
        # what TaskInfo refuses is refused now, once, rather than in resource_offers
        TaskInfo(task_id=f"{self.task_prefix}-0", agent_id="", command=command, resources=resources, name=name,
                 environment=self.environment, health_check=health_check, uris=self.uris, labels=self.labels,
                 container=container, shell=self.shell)
        self.progress = Progress(instances)
        self.on_change = on_change or (lambda progress, status: None)
        self.errors: list[str] = []
        self.finished = threading.Event()
        #: set by :meth:`kill_all`: launch nothing more
        self.stopping = False
        #: set once every launched instance has ended after :meth:`kill_all`
        self.all_ended = threading.Event()
        self.framework_id = ""
        self.staging: dict[str, int] = {}          # agent id -> its tasks launched and not yet started
        self._last_offer: dict[str, Resources] = {}  # agent id -> what its latest offer held
        self._said_too_big = ""                     # the last "no agent can fit" said (once each)
        self.placements = Placements(constraints)
        self.unsatisfiable_after = unsatisfiable_after
        self._clock = clock
        self._blocked_since: float | None = None

    def registered(self, driver, framework_id, master_info) -> None:
        self.framework_id = framework_id
        self.on_change(self.progress, None)

    def reregistered(self, driver, master_info) -> None:
        driver.reconcile_tasks([])

    def resource_offers(self, driver, offers) -> None:
        if self.stopping:
            for offer in offers:
                driver.decline_offer(offer.id)
            return
        if self.placements.constraints:
            self._place_constrained(driver, offers)
            return
        progress = self.progress
        # spread what is left over the offers that came together — an even
        # share on each first, then the rest wherever it fits: an agent starts
        # its tasks one by one, so 1,000 instances on one agent of four took
        # about four times as long as 250 on each (issue 14)
        share = -(-(progress.instances - progress.launched) // max(len(offers), 1))
        tasks: list[list[TaskInfo]] = [[] for _ in offers]
        free = [offer.resources for offer in offers]
        room = [self.max_staging_per_agent - self.staging.get(offer.agent_id, 0) for offer in offers]
        need = self.resources
        template = self._task_template()   # (each task a copy of it: a new TaskInfo made whole cost ~2 µs)
        for limit in (share, None):
            for i, offer in enumerate(offers):
                fits = _copies_that_fit(free[i], need)
                if fits is not None:   # scalars only: as many as fit, taken from the offer at once
                    count = min(fits, room[i] - len(tasks[i]), progress.instances - progress.launched,
                                fits if limit is None else limit - len(tasks[i]))
                    if count > 0:
                        tasks[i].extend([self._new_task(offer, template) for _ in range(count)])
                        free[i] = free[i] - need.scale(count)
                    continue
                while progress.launched < progress.instances and free[i].contains(need) and \
                        len(tasks[i]) < room[i] and (limit is None or len(tasks[i]) < limit):
                    tasks[i].append(self._new_task(offer, template))
                    free[i] = free[i] - need
        for offer, launched in zip(offers, tasks):
            if launched:
                self.staging[offer.agent_id] = self.staging.get(offer.agent_id, 0) + len(launched)
                # what is left of the offer comes back at the next allocation while instances wait:
                # refusing it for a second held each agent to max_staging_per_agent tasks a second
                # (5,000/s with 10 agents, whatever the master could do; issue 14)
                more = progress.launched < progress.instances
                driver.launch_tasks([offer.id], launched, Filters(refuse_seconds=0.0 if more else 1.0))
            else:  # an agent busy starting what it has is asked again soon; one too small, later
                busy = self.staging.get(offer.agent_id, 0) >= self.max_staging_per_agent
                driver.decline_offer(offer.id, Filters(refuse_seconds=1.0 if busy else 5.0))
        if progress.launched >= progress.instances:
            driver.suppress_offers()
        elif not any(tasks) and progress.running == 0:
            self._say_if_too_big(offers)
        elif any(tasks):
            progress.too_big = ""
        self._last_offer.update((offer.agent_id, offer.resources) for offer in offers)
        self.on_change(progress, None)

    def _say_if_too_big(self, offers) -> None:
        """Nothing of ours runs and no offer fits an instance: if no agent
        ever offered enough, note which resources (``progress.too_big``;
        ``mesoslike run`` checks them against the agents' sizes and says so)
        and log how much the largest offer had (once per figure)."""
        seen = {**self._last_offer, **{offer.agent_id: offer.resources for offer in offers}}
        wanted = self.resources.scalars()
        largest = {kind: max(resources.get(kind) for resources in seen.values()) for kind in wanted}
        short = sorted(kind for kind, amount in wanted.items() if amount > largest[kind])
        if not short:
            self.progress.too_big = ""   # an agent big enough was offered: it waits for room, not for a bigger agent
            return
        needed = ';'.join(f'{kind}:{wanted[kind]:g}' for kind in short)
        offered = ';'.join(f'{kind}:{largest[kind]:g}' for kind in short)
        notice = f"no agent can fit {needed}; the largest offers {offered}"
        if notice != self._said_too_big:   # `mesoslike run` says it to the user, once it knows no agent is big enough
            self._said_too_big = notice
            log.info("%s (waiting for a bigger agent)", notice)
        self.progress.too_big = needed

    def _task_template(self) -> TaskInfo:
        """A task as this scheduler's are now, but for its id and agent (made whole: converted and checked)."""
        return TaskInfo(task_id="", agent_id="", command=self.command, resources=self.resources, name=self.name,
                        environment=self.environment, health_check=self.health_check, uris=self.uris,
                        labels=self.labels, container=self.container, shell=self.shell)

    def _new_task(self, offer: Offer, template: TaskInfo | None = None) -> TaskInfo:
        """The next instance's task on ``offer``: ``template`` (:meth:`_task_template`, made for this
        round of offers) with its id and agent."""
        progress = self.progress
        task_id = f"{self.task_prefix}-{progress.launched}"
        progress.staged(task_id, offer.hostname, offer.agent_id)
        return (template or self._task_template()).replace(task_id=task_id, agent_id=offer.agent_id)

    def _place_constrained(self, driver, offers: list[Offer]) -> None:
        """One instance at a time, each on the next offer (in turn) that has
        room and that every constraint accepts — in turn, so that GROUP_BY
        and UNIQUE spread over the agents offered together."""
        progress = self.progress
        tasks: list[list[TaskInfo]] = [[] for _ in offers]
        free = [offer.resources for offer in offers]
        room = [self.max_staging_per_agent - self.staging.get(offer.agent_id, 0) for offer in offers]
        refused: dict[str, Constraint] = {}          # agent hostname -> the constraint that refused it
        start = 0
        while progress.launched < progress.instances:
            for step in range(len(offers)):
                i = (start + step) % len(offers)
                offer = offers[i]
                if len(tasks[i]) >= room[i] or not free[i].contains(self.resources):
                    continue
                constraint = self.placements.refusing(offer.hostname, offer.attributes)
                if constraint is not None:
                    refused[offer.hostname] = constraint
                    continue
                task = self._new_task(offer)
                tasks[i].append(task)
                free[i] = free[i] - self.resources
                self.placements.place(task.task_id, offer.hostname, offer.attributes)
                start = i + 1
                break
            else:
                break   # no offer takes one more
        placed = sum(len(launched) for launched in tasks)
        for i, (offer, launched) in enumerate(zip(offers, tasks)):
            if launched:
                self.staging[offer.agent_id] = self.staging.get(offer.agent_id, 0) + len(launched)
                more = progress.launched < progress.instances
                driver.launch_tasks([offer.id], launched, Filters(refuse_seconds=0.0 if more else 1.0))
            else:   # refused by a constraint: asked again soon, a placement may change the answer
                driver.decline_offer(offer.id, Filters(refuse_seconds=1.0 if offer.hostname in refused else 5.0))
        self._check_blocked(driver, placed, refused)
        if progress.launched >= progress.instances:
            driver.suppress_offers()
        self.on_change(progress, None)

    def _check_blocked(self, driver, placed: int, refused: dict[str, Constraint]) -> None:
        """Report instances that wait only because constraints refuse every
        agent with room, with none of ours running to change that; end the
        run if it lasts ``unsatisfiable_after`` seconds."""
        progress = self.progress
        active = progress.launched - progress.finished - progress.failed
        if placed or not refused or active > 0 or progress.launched >= progress.instances:
            self._blocked_since = None
            progress.blocked = ""
            return
        by_constraint: dict[str, list[str]] = {}
        for hostname, constraint in sorted(refused.items()):
            by_constraint.setdefault(str(constraint), []).append(hostname)
        progress.blocked = "; ".join(f"constraint {text} refuses every agent offered ({', '.join(hosts)})"
                                     for text, hosts in by_constraint.items())
        now = self._clock()
        if self._blocked_since is None:
            self._blocked_since = now
        elif now - self._blocked_since >= self.unsatisfiable_after:
            waiting = progress.instances - progress.launched
            self.errors.append(f"{waiting} instance(s) cannot be placed: {progress.blocked}")
            self.finished.set()
            driver.stop()

    def status_update(self, driver, status: TaskStatus) -> None:
        progress = self.progress
        task_id, state = status.task_id, status.state
        task = progress.tasks.get(task_id)
        if task is None:
            return
        before = task.state
        if state in TERMINAL_STATES:
            if self.placements.constraints:   # (only then was it placed: _place_constrained)
                self.placements.remove(task_id)   # an ended instance no longer counts against a constraint
            # (LOST, DROPPED: failed; a one-shot runner does not retry)
            task.exit_code = status.exit_code
        running = Progress._RUNNING
        counted = not (before in running and state in running)
        if not counted:   # (Progress.moved's common case, STARTING -> RUNNING, inlined: no count changes)
            task.state = state
        elif state == TaskState.FINISHED and before in running:   # (and its common end, RUNNING -> FINISHED)
            task.state = state
            progress.running -= 1
            progress.finished += 1
        else:
            progress.moved(task_id, before, state)
        task.message = status.message
        if status.agent_id:
            task.agent_id = status.agent_id
        if task.launched_on and state != TaskState.STAGING:   # it left TASK_STAGING: its agent stages one less
            self.staging[task.launched_on] -= 1
            task.launched_on = ""
        self.on_change(progress, status)
        if self.stopping and progress.unended == 0:
            self.all_ended.set()
        if counted and progress.done:   # (only a change of the counts can make it done)
            self.finished.set()
            driver.stop()

    def kill_all(self, driver) -> list[str]:
        """Launch nothing more and kill every launched instance that has not
        ended (called from another thread: the driver's calls are
        thread-safe); the ids of those asked to end. :attr:`all_ended` is set
        once each has ended."""
        self.stopping = True
        driver.suppress_offers()
        progress = self.progress
        unended = [(task_id, task.agent_id or task.launched_on) for task_id, task in list(progress.tasks.items())
                   if task.state not in TERMINAL_STATES]
        for task_id, agent_id in unended:
            driver.kill_task(task_id, agent_id)
        if progress.unended == 0:
            self.all_ended.set()
        return [task_id for task_id, _ in unended]

    def error(self, driver, message: str) -> None:
        self.errors.append(message)

    def exit_code(self) -> int:
        """0 if every instance finished successfully; else the exit code of
        a failed instance when it had one, else 1."""
        if self.progress.finished == self.progress.instances:
            return 0
        for task_id, task in sorted(self.progress.tasks.items()):
            code = task.exit_code
            if task.state != TaskState.FINISHED and code:
                return code if 0 < code < 256 else 1
        return 1


def framework_info(name: str, role: str, user: str = "") -> FrameworkInfo:
    """A one-shot framework: no failover (its tasks go when it does); its
    tasks run as ``user`` (empty: the driver's default, docs/security.rst)."""
    return FrameworkInfo(name=name, role=role, failover_timeout=0.0, user=user)
