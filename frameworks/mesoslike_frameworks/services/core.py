"""The service scheduler's core: apps and their versions, instances and
their states, the launch queue with back-off, deployments as plans of
steps. Pure and deterministic: no I/O, a :class:`~mesoslike.Clock` (epoch
seconds: versions are times) and a ``random.Random`` are injected.

Events in (:meth:`ServicesCore.handle`: offers, status updates, drains,
ticks) and the API's operations (:meth:`create_app`, :meth:`update_apps`,
:meth:`delete_app`, :meth:`restart_app`, :meth:`kill_tasks`,
:meth:`cancel_deployment` ...) change the state; :meth:`take_commands`
gives what the runtime must do, in order: :class:`Persist` first (the hard
state a new leader reads: an instance is stored with its task id *before*
its launch, so no instance is ever launched twice), then launches,
declines, kills, reconciliation, suppress/revive, and the events for
``/v2/events`` (:class:`Emit`).

How instances are kept (Marathon's semantics, docs/services.rst):

- an app wants ``instances`` *active* instances (goal Running, not on a
  draining agent, not unreachable past its ``unreachableStrategy``);
  missing ones are *scheduled* (the launch queue) and launched on offers
  that fit, after the app's back-off; extra ones are killed in
  ``killSelection`` order;
- an instance that ends while it should run is replaced; a failure
  (FAILED, ERROR, DROPPED) grows the app's launch delay
  (``backoffSeconds`` x ``backoffFactor`` ^ n, at most
  ``maxLaunchDelaySeconds``), reset by a new config version;
- an instance on a draining agent is replaced first and killed once its
  replacement is ready (running, and healthy if the app has a check);
- a deployment is a list of steps, each a set of actions on apps
  (StartApplication, ScaleApplication, RestartApplication,
  StopApplication); a step ends when its actions' apps are where the
  action wants them, then the next begins. RestartApplication replaces
  the instances of an older config version following ``upgradeStrategy``:
  at least ``ceil(n * minimumHealthCapacity)`` ready, at most
  ``floor(n * (1 + maximumOverCapacity))`` at once. Each action is
  computed from the instances as they are (no state of its own), so a new
  leader resumes a deployment where the instances say it is.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shlex
import uuid
import zlib
from typing import Any, Iterable, Mapping, Union

import attrs

from mesoslike import (Clock, CommandURI, ContainerInfo, DockerInfo, HealthCheck, HTTPCheck, Image, Label, Offer,
                       Resources, Secret, TaskInfo, TaskState, TaskStatus, TCPCheck, Volume, VolumeSource)
from mesoslike_frameworks.constraints import Placements
from mesoslike_frameworks.services.matching import Fit, OfferStats, match
from mesoslike_frameworks.services.model import (AppDefinition, ValidationError, format_timestamp, merge_app,
                                                 normalize_id, parse_app, secret_reference)

__all__ = [
    "ServicesCore", "Instance", "AppRecord", "Deployment", "Action", "ApiError",
    "Registered", "Reregistered", "Disconnected", "OffersReceived", "StatusUpdate", "DrainingAgents", "Tick",
    "MasterBlockers",
    "Event", "Persist", "Launch", "Decline", "Kill", "Reconcile", "Suppress", "Revive", "Emit", "Command",
    "SCHEDULED", "STAGING", "STARTING", "RUNNING", "KILLING", "UNREACHABLE", "UNKNOWN", "GOAL_RUNNING",
    "GOAL_STOPPED", "START", "SCALE", "RESTART", "STOP", "INSTANCE_BUCKETS", "MAX_APPS",
]

# ------------------------------------------------------------ vocabulary
#: an instance's condition (Marathon's names): Scheduled until launched, then its task's
SCHEDULED, STAGING, STARTING, RUNNING, KILLING, UNREACHABLE, UNKNOWN = (
    "Scheduled", "Staging", "Starting", "Running", "Killing", "Unreachable", "Unknown")
_CONDITION = {TaskState.STAGING: STAGING, TaskState.STARTING: STARTING, TaskState.RUNNING: RUNNING,
              TaskState.KILLING: KILLING, TaskState.UNREACHABLE: UNREACHABLE}
#: what the scheduler wants of an instance
GOAL_RUNNING, GOAL_STOPPED = "Running", "Stopped"
#: deployment actions (Marathon's names)
START, SCALE, RESTART, STOP = "StartApplication", "ScaleApplication", "RestartApplication", "StopApplication"
#: task ends that grow the app's launch delay (a kill, a lost agent, a drain do not)
_LIMIT_WORTHY = frozenset({TaskState.FAILED, TaskState.ERROR, TaskState.DROPPED})
_HEALTH_KILL = "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
#: instance records are stored in this many buckets (a launch rewrites its bucket, not every instance)
INSTANCE_BUCKETS = 64
#: apps one service keeps, at most
MAX_APPS = 1000
#: versions kept per app (Marathon's --zk_max_versions default)
MAX_VERSIONS = 50
#: a kill not answered by the task's end is sent again after this long (s)
KILL_RETRY = 10.0
#: tasks launched on one agent and not yet started, at most (as ``mesoslike run``)
MAX_STAGING_PER_AGENT = 500


class ApiError(Exception):
    """An operation refused: ``status`` (HTTP) and the JSON ``body`` Marathon answers."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("message", ""))
        self.status = status
        self.body = body


def _not_found(app_id: str) -> ApiError:
    return ApiError(404, {"message": f"App '{app_id}' does not exist"})


# ----------------------------------------------------------------- state
@attrs.define
class Instance:
    """One instance of an app: scheduled (no task yet), then one task."""

    instance_id: str
    app_id: str
    version: str                   # the app version it was scheduled for
    config_version: str            # that version's lastConfigChangeAt: old or new in an upgrade
    scheduled_at: float
    goal: str = GOAL_RUNNING
    condition: str = SCHEDULED
    task_id: str = ""
    agent_id: str = ""
    hostname: str = ""
    host_ports: tuple[int, ...] = ()
    staged_at: float | None = None
    started_at: float | None = None
    healthy: bool | None = None
    unreachable_since: float | None = None
    kill_sent_at: float | None = None
    state: str = ""                # the task's last TaskState
    message: str = ""

    @property
    def launched(self) -> bool:
        return bool(self.task_id)

    def ready(self, has_checks: bool) -> bool:
        """Running, and healthy if its app has a health check."""
        return self.condition == RUNNING and (not has_checks or self.healthy is True)

    def to_record(self) -> dict[str, Any]:
        return {"id": self.instance_id, "app": self.app_id, "version": self.version,
                "config": self.config_version, "scheduled": self.scheduled_at, "goal": self.goal,
                "task": self.task_id, "agent": self.agent_id, "host": self.hostname,
                "ports": list(self.host_ports), "staged": self.staged_at, "started": self.started_at}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Instance:
        return cls(str(record["id"]), str(record["app"]), str(record["version"]), str(record["config"]),
                   float(record["scheduled"]), goal=str(record["goal"]),
                   condition=UNKNOWN if record.get("task") else SCHEDULED, task_id=str(record.get("task", "")),
                   agent_id=str(record.get("agent", "")), hostname=str(record.get("host", "")),
                   host_ports=tuple(int(p) for p in record.get("ports", ())),
                   staged_at=record.get("staged"), started_at=record.get("started"))


@attrs.define
class Delay:
    """An app's launch delay (Marathon's RateLimiter): no launch before ``reference + current``."""

    reference: float
    current: float


@attrs.define
class AppRecord:
    """An app: its current definition (the deployment's target while one
    runs), its kept versions, and what the queue knows of it."""

    definition: AppDefinition
    versions: dict[str, AppDefinition] = attrs.field(factory=dict)    # version -> definition, oldest first
    deleting: bool = False
    # soft state
    delay: Delay | None = None
    last_failure: dict[str, Any] | None = None
    queued_since: float | None = None
    stats: OfferStats = attrs.field(factory=OfferStats)             # since it was queued
    last_round: OfferStats = attrs.field(factory=OfferStats)        # the last batch of offers
    last_used_offer_at: float | None = None
    last_unused_offer_at: float | None = None
    waiting_for: str = ""                                           # why it cannot launch at all, if so

    @property
    def id(self) -> str:
        return self.definition.id

    def to_record(self) -> dict[str, Any]:
        return {"definition": self.definition.to_json(), "deleting": self.deleting,
                "versions": [v.to_json() for v in self.versions.values()]}


@attrs.frozen
class Action:
    kind: str
    app_id: str

    def to_json(self) -> dict[str, str]:
        return {"action": self.kind, "app": self.app_id}


@attrs.define
class Deployment:
    """A plan: ``steps`` run one after the other (``current`` is the one
    running), each a set of :class:`Action`. ``original``/``target``: each
    affected app before and after (None: absent), for rollback."""

    id: str
    version: str
    steps: list[list[Action]]
    original: dict[str, AppDefinition | None]
    target: dict[str, AppDefinition | None]
    current: int = 0
    started_at: float = 0.0

    @property
    def affected_apps(self) -> list[str]:
        return sorted(self.target)

    def current_actions(self) -> list[Action]:
        return self.steps[self.current] if self.current < len(self.steps) else []

    def to_record(self) -> dict[str, Any]:
        return {"id": self.id, "version": self.version, "current": self.current, "started": self.started_at,
                "steps": [[[a.kind, a.app_id] for a in step] for step in self.steps],
                "original": {k: v.to_json() if v else None for k, v in self.original.items()},
                "target": {k: v.to_json() if v else None for k, v in self.target.items()}}


# ---------------------------------------------------------------- events
@attrs.frozen
class Registered:
    framework_id: str


@attrs.frozen
class Reregistered:
    pass


@attrs.frozen
class Disconnected:
    pass


@attrs.frozen
class OffersReceived:
    offers: list[Offer]


@attrs.frozen
class StatusUpdate:
    status: TaskStatus


@attrs.frozen
class DrainingAgents:
    """The agents now draining or drained (all of them, as the master says)."""

    agent_ids: frozenset[str]


@attrs.frozen
class MasterBlockers:
    """Why the master makes the service no offers now, as its ``/state``
    says (the framework's ``offer_blockers``: ``(reason, sentence)`` pairs,
    ``QUOTA_LIMIT``, ``NO_AGENTS`` ...); empty when nothing holds them back
    or the service holds an offer. The queue's ``why`` (:func:`api.queue_json`)."""

    blockers: tuple[tuple[str, str], ...]


@attrs.frozen
class Tick:
    pass


Event = Union[Registered, Reregistered, Disconnected, OffersReceived, StatusUpdate, DrainingAgents, MasterBlockers,
              Tick]


# -------------------------------------------------------------- commands
@attrs.frozen
class Persist:
    """Store ``records`` and delete ``deleted`` before carrying out what follows."""

    records: Mapping[str, bytes]
    deleted: tuple[str, ...] = ()


@attrs.frozen
class Launch:
    offer_id: str
    tasks: list[TaskInfo]
    refuse_seconds: float


@attrs.frozen
class Decline:
    offer_id: str
    refuse_seconds: float


@attrs.frozen
class Kill:
    task_id: str
    agent_id: str


@attrs.frozen
class Reconcile:
    """Ask the master about ``task_ids`` (empty: every task of ours it knows)."""

    task_ids: tuple[str, ...]
    agent_ids: tuple[str, ...] = ()


@attrs.frozen
class Suppress:
    pass


@attrs.frozen
class Revive:
    pass


@attrs.frozen
class Emit:
    """An event for ``/v2/events`` (Marathon's JSON, ``eventType`` in it)."""

    event: dict[str, Any]


Command = Union[Persist, Launch, Decline, Kill, Reconcile, Suppress, Revive, Emit]


def _app_record_name(app_id: str) -> str:
    return "app." + hashlib.sha1(app_id.encode()).hexdigest()[:24]


def _bucket_name(instance_id: str) -> str:
    return f"instances.{zlib.crc32(instance_id.encode()) % INSTANCE_BUCKETS:02d}"


def _strategy_bounds(app: AppDefinition, old: int) -> tuple[int, int]:
    """(minimum healthy, maximum at once) of a rolling replacement of ``old`` instances."""
    n = app.instances
    minimum = math.ceil(n * app.upgrade_strategy.minimum_health_capacity - 1e-9)
    maximum = int(math.floor(n * (1 + app.upgrade_strategy.maximum_over_capacity) + 1e-9))
    if minimum == maximum and old > 0:
        maximum += 1     # Marathon's way out of a deadlock: one over, or nothing could start
    return minimum, maximum


def container_info(container: Mapping[str, Any] | None) -> ContainerInfo | None:
    """An app's ``container`` (Marathon's JSON, validated by the model) as the
    task's ``ContainerInfo``: ``DOCKER`` with ``docker.image`` runs on the
    agents' OCI runtime as Mesos's Docker containerizer would, ``MESOS`` with
    ``docker.image`` is Mesos's universal containerizer with that image; host
    ``volumes`` are bound (under the agents' allow-list). A container with
    no image gives only its volumes."""
    if container is None:
        return None
    volumes = [Volume(volume["containerPath"], VolumeSource(VolumeSource.HOST_PATH, path=volume["hostPath"]),
                      volume.get("mode", "RW")) for volume in container.get("volumes") or []]
    docker = container.get("docker") or {}
    image = docker.get("image")
    if container.get("type", "DOCKER") == "DOCKER" and image:
        return ContainerInfo("DOCKER", docker=DockerInfo(image, network=docker.get("network", "HOST"),
                                                         force_pull_image=bool(docker.get("forcePullImage"))),
                             volumes=volumes)
    return ContainerInfo("MESOS", image=Image(image, cached=not docker.get("forcePullImage")) if image else None,
                         volumes=volumes)


# ------------------------------------------------------------------ core
class ServicesCore:
    """See the module docstring. ``framework_role``: the role apps run in.

    Why one class of some 900 lines: apps, instances and deployments are one
    set of books that every event changes together (an update moves an
    instance, which advances its deployment, which may launch the next);
    the parts with no books of their own are beside it (:mod:`.model` the
    app definition, :mod:`.matching` an offer against an instance,
    :mod:`.api` requests to answers)."""

    def __init__(self, clock: Clock, rng: random.Random, framework_role: str = "*",
                 reconcile_interval: float = 300.0) -> None:
        self.clock = clock
        self.rng = rng
        self.framework_role = framework_role
        self.reconcile_interval = reconcile_interval
        self.apps: dict[str, AppRecord] = {}
        self.instances: dict[str, Instance] = {}
        self._by_app: dict[str, dict[str, Instance]] = {}
        self._by_task: dict[str, Instance] = {}
        self.deployments: dict[str, Deployment] = {}
        self.draining: frozenset[str] = frozenset()
        #: why the master makes no offers now, as it last said (:class:`MasterBlockers`)
        self.master_blockers: tuple[tuple[str, str], ...] = ()
        self.agent_attributes: dict[str, dict[str, str]] = {}
        self.framework_id = ""
        self.connected = False
        self.suppressed = False
        self._next_reconcile = math.inf
        self._last_version = 0.0
        self._out: list[Command] = []
        self._dirty: set[str] = set()
        self._deleted: set[str] = set()
        self._touched: set[str] = set()

    # ------------------------------------------------------------ output
    def take_commands(self) -> list[Command]:
        """What to carry out, in order: the records to store first."""
        self._converge()
        out, self._out = self._out, []
        if self._dirty or self._deleted:
            records = {name: self._record(name) for name in sorted(self._dirty)}
            stored = {name: data for name, data in records.items() if data is not None}
            deleted = tuple(sorted(self._deleted | {name for name, data in records.items() if data is None}))
            self._dirty, self._deleted = set(), set()
            out.insert(0, Persist(stored, deleted))
        return out

    def _record(self, name: str) -> bytes | None:
        """The stored form of record ``name`` now (None: delete it)."""
        if name == "service":
            return json.dumps({"framework_id": self.framework_id}).encode()
        if name.startswith("app."):
            for record in self.apps.values():
                if _app_record_name(record.id) == name:
                    return json.dumps(record.to_record(), sort_keys=True).encode()
            return None
        if name.startswith("deployment."):
            deployment = self.deployments.get(name[len("deployment."):])
            return json.dumps(deployment.to_record(), sort_keys=True).encode() if deployment else None
        if name.startswith("instances."):
            members = [i.to_record() for i in self.instances.values()
                       if i.launched and _bucket_name(i.instance_id) == name]
            return json.dumps(sorted(members, key=lambda r: r["id"])).encode() if members else None
        return None

    def _emit(self, event_type: str, **fields: Any) -> None:
        self._out.append(Emit({"eventType": event_type, "timestamp": format_timestamp(self.clock.now()),
                               **fields}))

    # ---------------------------------------------------------- recovery
    def recover(self, records: Mapping[str, bytes]) -> None:
        """Take the hard state a store holds (a new leader, a restart):
        apps, deployments, launched instances (Unknown until the master
        says). Raises ValueError for a record that does not parse."""
        try:
            service = records.get("service")
            if service:
                self.framework_id = str(json.loads(service)["framework_id"])
            for name, data in sorted(records.items()):
                if name.startswith("app."):
                    doc = json.loads(data)
                    definition = _stored_app(doc["definition"], self.framework_role)
                    versions = {v.version: v for v in (_stored_app(d, self.framework_role)
                                                       for d in doc.get("versions", []))}
                    self.apps[definition.id] = AppRecord(definition, versions, deleting=bool(doc.get("deleting")))
                    self._by_app.setdefault(definition.id, {})
                    self._last_version = max(self._last_version, _seconds(definition.version))
            for name, data in sorted(records.items()):
                if name.startswith("deployment."):
                    doc = json.loads(data)
                    self.deployments[doc["id"]] = Deployment(
                        doc["id"], doc["version"], [[Action(kind, app) for kind, app in step] for step in doc["steps"]],
                        {k: _stored_app(v, self.framework_role) if v else None for k, v in doc["original"].items()},
                        {k: _stored_app(v, self.framework_role) if v else None for k, v in doc["target"].items()},
                        int(doc["current"]), float(doc.get("started", 0.0)))
                elif name.startswith("instances."):
                    for item in json.loads(data):
                        instance = Instance.from_record(item)
                        if instance.app_id in self.apps:
                            self._add_instance(instance)
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            raise ValueError(f"the kept state does not parse: {exc}") from None
        self.deployments = dict(sorted(self.deployments.items(), key=lambda item: item[1].started_at))
        self._touched.update(self.apps)

    # ------------------------------------------------------------ events
    def handle(self, event: Event) -> list[Command]:
        """Take one event; the commands to carry out."""
        if isinstance(event, OffersReceived):
            self._offers(event.offers)
        elif isinstance(event, StatusUpdate):
            self._status(event.status)
        elif isinstance(event, Tick):
            self._tick()
        elif isinstance(event, MasterBlockers):
            self.master_blockers = event.blockers
        elif isinstance(event, DrainingAgents):
            if event.agent_ids != self.draining:
                self.draining = frozenset(event.agent_ids)
                self._touched.update(self.apps)
        elif isinstance(event, Registered):
            if event.framework_id != self.framework_id:
                self.framework_id = event.framework_id
                self._dirty.add("service")
            self._connected()
        elif isinstance(event, Reregistered):
            self._connected()
        elif isinstance(event, Disconnected):
            self.connected = False
        return self.take_commands()

    def _connected(self) -> None:
        """(Re)registered: reconcile every launched instance explicitly (an
        unknown one comes back TASK_LOST and is replaced), and implicitly
        (a task of ours nobody knows is killed); offers as the queue needs."""
        self.connected = True
        launched = sorted((i for i in self.instances.values() if i.launched), key=lambda i: i.task_id)
        if launched:
            self._out.append(Reconcile(tuple(i.task_id for i in launched), tuple(i.agent_id for i in launched)))
        self._out.append(Reconcile(()))
        self._next_reconcile = self.clock.now() + self.reconcile_interval
        self.suppressed = not self._wants_offers()
        self._out.append(Suppress() if self.suppressed else Revive())

    def _tick(self) -> None:
        now = self.clock.now()
        for instance in list(self.instances.values()):
            if instance.goal == GOAL_STOPPED and instance.launched and instance.kill_sent_at is not None \
                    and now - instance.kill_sent_at >= KILL_RETRY:
                self._kill(instance)
            if instance.condition == UNREACHABLE and instance.unreachable_since is not None:
                app = self.apps.get(instance.app_id)
                expunge = app.definition.unreachable_expunge_after_seconds if app else 0.0
                if expunge and now - instance.unreachable_since >= expunge:
                    self._kill(instance)
                    self._remove(instance)
                self._touched.add(instance.app_id)
        for record in self.apps.values():
            delay = record.delay
            if delay is not None and now > delay.reference + record.definition.max_launch_delay_seconds:
                record.delay = None      # overdue: Marathon's cleanUpOverdueDelays
        if self.connected and now >= self._next_reconcile:
            self._out.append(Reconcile(()))
            self._next_reconcile = now + self.reconcile_interval
        self._touched.update(self.apps)

    # --------------------------------------------------- status updates
    def _status(self, status: TaskStatus) -> None:
        instance = self._by_task.get(status.task_id)
        if instance is None:
            if not status.terminal:
                # a task of ours no instance owns (a deleted app's whose kill was lost): it goes
                self._out.append(Kill(status.task_id, status.agent_id))
            return
        now = self.clock.now()
        app = self.apps.get(instance.app_id)
        instance.state = status.state
        instance.message = status.message
        if status.agent_id and status.agent_id != instance.agent_id:
            instance.agent_id = status.agent_id
        self._emit("status_update_event", slaveId=instance.agent_id, taskId=instance.task_id,
                   taskStatus=status.state, message=status.message, appId=instance.app_id,
                   host=instance.hostname, ports=list(instance.host_ports), version=instance.version)
        self._touched.add(instance.app_id)
        if status.terminal:
            if instance.goal == GOAL_RUNNING and app is not None:
                self._failed(app, instance, status)
            self._remove(instance)
            return
        instance.condition = _CONDITION.get(status.state, instance.condition)
        if instance.condition == RUNNING and instance.started_at is None:
            instance.started_at = status.timestamp or now
        if instance.condition == UNREACHABLE:
            if instance.unreachable_since is None:
                instance.unreachable_since = now
        else:
            instance.unreachable_since = None
        if status.healthy is not None and status.healthy != instance.healthy:
            instance.healthy = status.healthy
            self._emit("health_status_changed_event", appId=instance.app_id, instanceId=instance.instance_id,
                       taskId=instance.task_id, version=instance.version, alive=status.healthy)
        if instance.goal == GOAL_STOPPED and instance.kill_sent_at is None:
            self._kill(instance)

    def _failed(self, app: AppRecord, instance: Instance, status: TaskStatus) -> None:
        """An instance that should run ended: remembered as the app's last
        failure; a failure grows the launch delay. It is replaced by the
        convergence that follows."""
        now = self.clock.now()
        app.last_failure = {"appId": app.id, "host": instance.hostname, "message": status.message,
                            "state": status.state, "taskId": instance.task_id, "instanceId": instance.instance_id,
                            "slaveId": instance.agent_id, "timestamp": format_timestamp(now),
                            "version": instance.version}
        if status.reason == _HEALTH_KILL:
            self._emit("unhealthy_instance_kill_event", appId=app.id, taskId=instance.task_id,
                       instanceId=instance.instance_id, version=instance.version, reason=status.message,
                       host=instance.hostname, slaveId=instance.agent_id)
        definition = app.definition
        if instance.agent_id in self.draining:
            app.delay = None     # killed by a drain: relaunch at once elsewhere (as Marathon)
        elif status.state in _LIMIT_WORTHY or status.reason == _HEALTH_KILL:
            if app.delay is None:
                app.delay = Delay(now, min(definition.backoff_seconds, definition.max_launch_delay_seconds))
            else:
                app.delay = Delay(now, min(definition.max_launch_delay_seconds,
                                           app.delay.current * definition.backoff_factor))

    # --------------------------------------------------------- instances
    def _add_instance(self, instance: Instance) -> None:
        self.instances[instance.instance_id] = instance
        self._by_app.setdefault(instance.app_id, {})[instance.instance_id] = instance
        if instance.task_id:
            self._by_task[instance.task_id] = instance

    def _remove(self, instance: Instance) -> None:
        self.instances.pop(instance.instance_id, None)
        self._by_app.get(instance.app_id, {}).pop(instance.instance_id, None)
        if instance.task_id:
            self._by_task.pop(instance.task_id, None)
            self._dirty.add(_bucket_name(instance.instance_id))
        self._touched.add(instance.app_id)

    def instances_of(self, app_id: str) -> list[Instance]:
        return list(self._by_app.get(app_id, {}).values())

    def _schedule(self, app: AppDefinition, count: int) -> None:
        now = self.clock.now()
        prefix = app.id.strip("/").replace("/", "_")
        for _ in range(count):
            instance_id = ""
            while not instance_id or instance_id in self.instances:   # never one id for two instances
                instance_id = f"{prefix}.instance-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}"
            self._add_instance(Instance(instance_id, app.id, app.version, app.last_config_change_at, now))
        record = self.apps[app.id]
        if record.queued_since is None:
            record.queued_since = now
            record.stats = OfferStats()

    def _stop(self, instance: Instance) -> None:
        """The instance is not wanted: a scheduled one is dropped, a launched one killed."""
        if instance.goal == GOAL_STOPPED:
            return
        instance.goal = GOAL_STOPPED
        if not instance.launched:
            self._remove(instance)
            return
        self._dirty.add(_bucket_name(instance.instance_id))
        self._kill(instance)

    def _kill(self, instance: Instance) -> None:
        instance.kill_sent_at = self.clock.now()
        self._out.append(Kill(instance.task_id, instance.agent_id))

    def _active(self, instance: Instance, app: AppDefinition) -> bool:
        """Counts toward the app's instances: wanted, not on a draining
        agent, not unreachable past the app's unreachable strategy."""
        if instance.goal != GOAL_RUNNING or (instance.launched and instance.agent_id in self.draining):
            return False
        if instance.condition == UNREACHABLE and instance.unreachable_since is not None:
            after = app.unreachable_inactive_after_seconds
            return after is None or self.clock.now() - instance.unreachable_since < after
        return True

    def _kill_order(self, app: AppDefinition, candidates: Iterable[Instance]) -> list[Instance]:
        """Which instances to stop first (Marathon's ScalingProposition): not
        launched, then unknown or unreachable, then not yet running, then
        unhealthy, then by ``killSelection`` on when they were staged."""
        has_checks = bool(app.health_checks)
        youngest = app.kill_selection == "YOUNGEST_FIRST"

        def key(instance: Instance) -> tuple:
            rank = (0 if not instance.launched else 1 if instance.condition in (UNKNOWN, UNREACHABLE) else
                    2 if instance.condition != RUNNING else 3 if has_checks and instance.healthy is not True else 4)
            staged = instance.staged_at or instance.scheduled_at
            return (rank, -staged if youngest else staged, instance.instance_id)
        return sorted(candidates, key=key)

    # --------------------------------------------------------- converge
    def _converge(self) -> None:
        """Bring every touched app toward what its deployment action, or its
        definition, wants; advance the deployments; ask for offers as needed."""
        for _ in range(4):   # a step that ends may start the next, which may end at once
            touched, self._touched = self._touched, set()
            locked = self._locking_actions()
            for app_id in sorted(touched):
                record = self.apps.get(app_id)
                if record is None:
                    continue
                action = locked.get(app_id)
                if action == RESTART:
                    self._replace(record.definition)
                elif action == STOP or record.deleting:
                    for instance in self.instances_of(app_id):
                        self._stop(instance)
                else:
                    self._keep(record.definition)
                self._queue_bookkeeping(record)
            self._advance_deployments()
            if not self._touched:
                break
        if self.connected:
            wants = self._wants_offers()
            if wants and self.suppressed:
                self.suppressed = False
                self._out.append(Revive())
            elif not wants and not self.suppressed:
                self.suppressed = True
                self._out.append(Suppress())

    def _locking_actions(self) -> dict[str, str]:
        """App id -> the RESTART or STOP action running on it now."""
        locked: dict[str, str] = {}
        for deployment in self.deployments.values():
            for action in deployment.current_actions():
                if action.kind in (RESTART, STOP):
                    locked[action.app_id] = action.kind
        return locked

    def _keep(self, app: AppDefinition) -> None:
        """Steady state: ``instances`` active ones; instances on draining
        agents killed once enough others are ready to take their place."""
        instances = self.instances_of(app.id)
        active = [i for i in instances if self._active(i, app)]
        if len(active) < app.instances:
            self._schedule(app, app.instances - len(active))
        elif len(active) > app.instances:
            for instance in self._kill_order(app, active)[:len(active) - app.instances]:
                self._stop(instance)
        has_checks = bool(app.health_checks)
        draining = [i for i in instances if i.goal == GOAL_RUNNING and i.launched and i.agent_id in self.draining]
        if draining:
            ready = sum(1 for i in active if i.ready(has_checks))
            surplus = ready + len(draining) - app.instances
            for instance in self._kill_order(app, draining)[:max(0, surplus)]:
                self._stop(instance)

    def _replace(self, app: AppDefinition) -> None:
        """A rolling restart or upgrade to ``app`` (module docstring)."""
        has_checks = bool(app.health_checks)
        instances = [i for i in self.instances_of(app.id) if i.goal == GOAL_RUNNING]
        old = [i for i in instances if i.config_version != app.last_config_change_at]
        new = [i for i in instances if i.config_version == app.last_config_change_at]
        minimum, maximum = _strategy_bounds(app, len(old))
        if len(new) > app.instances:
            for instance in self._kill_order(app, new)[:len(new) - app.instances]:
                self._stop(instance)
            new = [i for i in new if i.goal == GOAL_RUNNING]
        new_ready = sum(1 for i in new if i.ready(has_checks))
        kills = min(len(old), max(0, len(old) + new_ready - minimum))
        for instance in self._kill_order(app, old)[:kills]:
            self._stop(instance)
        alive_old = len(old) - kills
        start = min(app.instances - len(new), maximum - alive_old - len(new))
        if start > 0:
            self._schedule(app, start)

    def _queue_bookkeeping(self, record: AppRecord) -> None:
        if not any(i.condition == SCHEDULED for i in self.instances_of(record.id)):
            record.queued_since = None

    def _wants_offers(self) -> bool:
        return any(i.condition == SCHEDULED for i in self.instances.values())

    # ------------------------------------------------------ deployments
    def _action_done(self, deployment: Deployment, action: Action) -> bool:
        record = self.apps.get(action.app_id)
        if action.kind == START:
            return True
        if action.kind == STOP:
            return record is None or not self.instances_of(action.app_id)
        if record is None:
            return True
        app = record.definition
        has_checks = bool(app.health_checks)
        instances = self.instances_of(app.id)
        if any(i.goal == GOAL_STOPPED for i in instances):
            return False    # kills not done yet
        if action.kind == RESTART and any(i.config_version != app.last_config_change_at for i in instances):
            return False
        wanted = [i for i in instances if i.goal == GOAL_RUNNING]
        return len(wanted) == app.instances and all(i.ready(has_checks) for i in wanted)

    def _advance_deployments(self) -> None:
        for deployment in list(self.deployments.values()):
            while deployment.current < len(deployment.steps) and \
                    all(self._action_done(deployment, a) for a in deployment.current_actions()):
                for action in deployment.current_actions():
                    if action.kind == STOP:
                        self._forget_app(action.app_id)
                self._emit("deployment_step_success", plan=self.plan_json(deployment),
                           currentStep={"actions": [_typed(a) for a in deployment.current_actions()]})
                deployment.current += 1
                self._dirty.add(f"deployment.{deployment.id}")
                self._touched.update(a.app_id for a in deployment.current_actions())
                if deployment.current < len(deployment.steps):
                    self._emit("deployment_info", plan=self.plan_json(deployment),
                               currentStep={"actions": [_typed(a) for a in deployment.current_actions()]})
            if deployment.current >= len(deployment.steps):
                del self.deployments[deployment.id]
                self._deleted.add(f"deployment.{deployment.id}")
                self._dirty.discard(f"deployment.{deployment.id}")
                self._emit("deployment_success", id=deployment.id, plan=self.plan_json(deployment))

    def _forget_app(self, app_id: str) -> None:
        record = self.apps.pop(app_id, None)
        if record is not None:
            self._by_app.pop(app_id, None)
            self._deleted.add(_app_record_name(app_id))
            self._dirty.discard(_app_record_name(app_id))
            self._emit("app_terminated_event", appId=app_id)

    def plan_json(self, deployment: Deployment) -> dict[str, Any]:
        """The plan as Marathon's deployment events carry it."""
        def group(apps: Mapping[str, AppDefinition | None]) -> dict[str, Any]:
            return {"id": "/", "apps": [a.to_json() for a in apps.values() if a is not None], "groups": [],
                    "dependencies": [], "pods": [], "version": deployment.version}
        return {"id": deployment.id, "version": deployment.version, "original": group(deployment.original),
                "target": group(deployment.target),
                "steps": [{"actions": [a.to_json() for a in step]} for step in deployment.steps]}

    def deployments_of(self, app_id: str) -> list[Deployment]:
        return [d for d in self.deployments.values() if app_id in d.target]

    # ------------------------------------------------------------- offers
    def _offers(self, offers: list[Offer]) -> None:
        now = self.clock.now()
        for offer in offers:
            self.agent_attributes[offer.agent_id] = dict(offer.attributes)
        waiting = self._launchable(now)
        tasks: list[list[TaskInfo]] = [[] for _ in offers]
        available = [self._usable(offer.resources) for offer in offers]
        staging: dict[str, int] = {}
        for instance in self.instances.values():
            if instance.condition == STAGING:
                staging[instance.agent_id] = staging.get(instance.agent_id, 0) + 1
        for record, queued in waiting:
            app = record.definition
            placements = self._placements(app) if app.constraints else None
            round_stats = OfferStats()
            counted: set[int] = set()
            ports = [p.port if app.require_ports else 0 for p in app.port_definitions]
            start = 0
            for instance in queued:
                placed = False
                for step in range(len(offers)):
                    i = (start + step) % len(offers)
                    offer = offers[i]
                    if staging.get(offer.agent_id, 0) >= MAX_STAGING_PER_AGENT:
                        continue
                    outcome = match(cpus=app.cpus, mem=app.mem, disk=app.disk, gpus=app.gpus, ports=ports,
                                    hostname=offer.hostname, attributes=offer.attributes, available=available[i],
                                    placements=placements, draining=offer.agent_id in self.draining,
                                    rng=self.rng)
                    if i not in counted:
                        counted.add(i)
                        round_stats.count(outcome)
                        record.stats.count(outcome)
                    if outcome.fit is None:
                        continue
                    task = self._launch(app, instance, offer, outcome.fit)
                    if task is None:
                        break
                    tasks[i].append(task)
                    available[i] = available[i] - outcome.fit.resources
                    staging[offer.agent_id] = staging.get(offer.agent_id, 0) + 1
                    if placements is not None:
                        placements.place(instance.instance_id, offer.hostname, offer.attributes)
                    start = i + 1
                    placed = True
                    break
                if not placed:
                    break     # the app's instances are alike: none after this one fits either
            record.last_round = round_stats
            if round_stats.offers:
                if round_stats.unused < round_stats.offers:
                    record.last_used_offer_at = now
                if round_stats.unused:
                    record.last_unused_offer_at = now
        more = self._wants_offers()
        for offer, launched in zip(offers, tasks):
            if launched:
                self._out.append(Launch(offer.id, launched, 0.0 if more else 5.0))
            else:
                self._out.append(Decline(offer.id, 1.0 if more else 5.0))

    def _usable(self, resources: Resources) -> Resources:
        """What of an offer apps may take: the unreserved resources
        (reservations are not used; docs/services.rst)."""
        return resources.unreserved()

    def _launchable(self, now: float) -> list[tuple[AppRecord, list[Instance]]]:
        """Apps with scheduled instances that may launch now (their delay
        passed, nothing keeps them), oldest in the queue first."""
        waiting: list[tuple[AppRecord, list[Instance]]] = []
        for record in self.apps.values():
            queued = sorted((i for i in self.instances_of(record.id) if i.condition == SCHEDULED),
                            key=lambda i: (i.scheduled_at, i.instance_id))
            if not queued:
                continue
            record.waiting_for = ""
            if record.deleting:
                continue
            if record.delay is not None and now < record.delay.reference + record.delay.current:
                continue
            waiting.append((record, queued))
        waiting.sort(key=lambda item: (item[0].queued_since or 0.0, item[0].id))
        return waiting

    def _placements(self, app: AppDefinition) -> Placements:
        placements = Placements(app.parsed_constraints())
        for instance in self.instances_of(app.id):
            if instance.launched and instance.goal == GOAL_RUNNING:
                placements.place(instance.instance_id, instance.hostname,
                                 self.agent_attributes.get(instance.agent_id, {}))
        return placements

    def _launch(self, app: AppDefinition, instance: Instance, offer: Offer, fit: Fit) -> TaskInfo | None:
        """The instance's task on ``offer``; the instance is now staging."""
        task_id = f"{instance.instance_id}._app.1"
        try:
            task = self.task_info(app, task_id, offer.agent_id, offer.hostname, fit)
        except ValueError as exc:     # a value TaskInfo refuses: the app cannot launch
            self.apps[app.id].waiting_for = f"its task cannot be built: {exc}"
            return None
        instance.task_id, instance.agent_id, instance.hostname = task_id, offer.agent_id, offer.hostname
        instance.host_ports = fit.host_ports
        instance.condition, instance.staged_at, instance.state = STAGING, self.clock.now(), TaskState.STAGING
        self._by_task[task_id] = instance
        self._dirty.add(_bucket_name(instance.instance_id))
        return task

    def task_info(self, app: AppDefinition, task_id: str, agent_id: str, hostname: str, fit: Fit) -> TaskInfo:
        """The task an instance of ``app`` runs (Marathon's environment: ``PORT0``..., ``PORT_<NAME>``,
        ``PORTS``, ``HOST``, ``MARATHON_APP_ID`` ...)."""
        ports = fit.host_ports
        env: dict[str, str] = {}
        secrets: dict[str, Secret] = {}
        for name, value in app.env.items():
            if isinstance(value, Mapping):
                # a reference the agent resolves under the service's principal: the value never
                # passes through the service, the master or the wire (docs/containers.rst, "Secrets")
                source = app.secrets[value["secret"]]["source"]
                secrets[name] = Secret(Secret.REFERENCE, reference=secret_reference(source))
            else:
                env[name] = value
        for index, (port, definition) in enumerate(zip(ports, app.port_definitions)):
            env[f"PORT{index}"] = str(port)
            if definition.name:
                env[f"PORT_{definition.name.upper().replace('-', '_')}"] = str(port)
            if definition.port:
                env[f"PORT_{definition.port}"] = str(port)
        if ports:
            env["PORT"] = str(ports[0])
            env["PORTS"] = ",".join(str(p) for p in ports)
        env.update({"HOST": hostname, "MARATHON_APP_ID": app.id, "MARATHON_APP_VERSION": app.version,
                    "MESOS_TASK_ID": task_id, "MARATHON_APP_RESOURCE_CPUS": str(app.cpus),
                    "MARATHON_APP_RESOURCE_MEM": str(app.mem), "MARATHON_APP_RESOURCE_DISK": str(app.disk),
                    "MARATHON_APP_LABELS": " ".join(sorted(app.labels))})
        container = container_info(app.container)
        command = app.cmd if app.cmd is not None else shlex.join(app.args or ())
        shell: dict[str, Any] = {}
        if container is not None and container.image_name() and app.cmd is None:
            # in an image, args are its entrypoint's arguments, none runs its own command (Mesos's shell false)
            command, shell = "", {"shell": False, "arguments": list(app.args or ())}
        uris = [CommandURI(item["uri"], extract=bool(item.get("extract", True)),
                           executable=bool(item.get("executable", False)), cache=bool(item.get("cache", False)),
                           output_file=str(item.get("outputFile", ""))) for item in app.fetch]
        return TaskInfo(task_id=task_id, agent_id=agent_id, command=command, resources=fit.resources,
                        name=app.id.strip("/").replace("/", "."), environment=env,
                        kill_grace_period=(app.task_kill_grace_period_seconds
                                           if app.task_kill_grace_period_seconds is not None else 3.0),
                        user=app.user or "", health_check=self._health_check(app, ports), uris=uris,
                        labels=[Label(k, v) for k, v in sorted(app.labels.items())], container=container,
                        environment_secrets=secrets, **shell)

    @staticmethod
    def _health_check(app: AppDefinition, ports: tuple[int, ...]) -> HealthCheck | None:
        if not app.health_checks:
            return None
        check = app.health_checks[0]
        timings = dict(delay_seconds=check.delay_seconds, interval_seconds=check.interval_seconds,
                       timeout_seconds=check.timeout_seconds, grace_period_seconds=check.grace_period_seconds,
                       consecutive_failures=check.max_consecutive_failures or 1000)
        if check.protocol == "COMMAND":
            return HealthCheck(HealthCheck.COMMAND, command=check.command, **timings)  # type: ignore[arg-type]
        port = check.port if check.port is not None else ports[check.port_index or 0]
        if check.protocol.endswith("TCP"):
            return HealthCheck(HealthCheck.TCP, tcp=TCPCheck(port), **timings)  # type: ignore[arg-type]
        scheme = "https" if check.protocol.endswith("HTTPS") else "http"
        return HealthCheck(HealthCheck.HTTP, http=HTTPCheck(port, check.path, scheme=scheme),
                           **timings)  # type: ignore[arg-type]

    # ---------------------------------------------------- API: changes
    def _new_version(self) -> str:
        """A version time after every earlier one (two changes in one millisecond get two versions)."""
        now = max(self.clock.now(), self._last_version + 0.001)
        self._last_version = now
        return format_timestamp(now)

    def _locked(self, app_ids: Iterable[str], force: bool) -> None:
        """Refuse (409) a change of apps a deployment is changing, unless
        ``force``: then those deployments are cancelled (no rollback)."""
        blocking = {d.id: d for app_id in app_ids for d in self.deployments_of(app_id)}
        if not blocking:
            return
        if not force:
            ids = sorted(blocking)
            raise ApiError(409, {
                "message": "App is locked by one or more deployments. Override with the option '?force=true'. "
                           f"View details at '/v2/deployments/{ids[0]}'.",
                "deployments": [{"id": i} for i in ids]})
        for deployment in blocking.values():
            self._drop_deployment(deployment, failed=True)

    def _drop_deployment(self, deployment: Deployment, failed: bool) -> None:
        self.deployments.pop(deployment.id, None)
        self._deleted.add(f"deployment.{deployment.id}")
        self._dirty.discard(f"deployment.{deployment.id}")
        if failed:
            self._emit("deployment_failed", id=deployment.id, plan=self.plan_json(deployment))
        self._touched.update(deployment.target)

    def _start_deployment(self, steps: list[list[Action]], original: dict[str, AppDefinition | None],
                          target: dict[str, AppDefinition | None], version: str) -> Deployment:
        deployment = Deployment(str(uuid.UUID(int=self.rng.getrandbits(128), version=4)), version,
                                [step for step in steps if step], original, target, started_at=self.clock.now())
        self.deployments[deployment.id] = deployment
        self._dirty.add(f"deployment.{deployment.id}")
        self._touched.update(target)
        if deployment.steps:
            self._emit("deployment_info", plan=self.plan_json(deployment),
                       currentStep={"actions": [_typed(a) for a in deployment.current_actions()]})
        return deployment

    def _store_app(self, app: AppDefinition, deleting: bool = False) -> None:
        record = self.apps.get(app.id)
        if record is None:
            if len(self.apps) >= MAX_APPS:
                raise ApiError(422, {"message": f"this service keeps at most {MAX_APPS} apps"})
            record = self.apps[app.id] = AppRecord(app)
            self._by_app.setdefault(app.id, {})
        old_config = record.definition.last_config_change_at
        record.definition = app
        record.deleting = deleting
        record.versions[app.version] = app
        while len(record.versions) > MAX_VERSIONS:
            del record.versions[next(iter(record.versions))]
        if app.last_config_change_at != old_config:
            record.delay = None       # a new config starts without the old one's back-off
        self._dirty.add(_app_record_name(app.id))
        self._touched.add(app.id)

    def _versioned(self, app: AppDefinition, previous: AppDefinition | None, restart: bool = False) -> AppDefinition:
        version = self._new_version()
        config_changed = restart or previous is None or app.config() != previous.config()
        return attrs.evolve(app, version=version, last_scaling_at=version,
                            last_config_change_at=version if config_changed or previous is None
                            else previous.last_config_change_at)

    def create_app(self, document: object, force: bool = False) -> tuple[AppDefinition, Deployment]:
        """``POST /v2/apps``: 409 if the app exists (or is being deleted)."""
        app = parse_app(document, framework_role=self.framework_role)
        if app.id in self.apps:
            raise ApiError(409, {"message": f"An app with id [{app.id}] already exists."})
        self._check_not_a_group(app.id)
        app = self._versioned(app, None)
        self._store_app(app)
        deployment = self._start_deployment([[Action(START, app.id)], [Action(SCALE, app.id)]], {app.id: None},
                                            {app.id: app}, app.version)
        return app, deployment

    def _check_not_a_group(self, app_id: str) -> None:
        for other in self.apps:
            if other.startswith(app_id + "/") or app_id.startswith(other + "/"):
                raise ApiError(422, {"message": "Object is not valid", "details": [
                    {"path": "/id", "errors": [f"{app_id} and the app {other} cannot both exist: an app's id is "
                                               "not a group of other apps"]}]})

    def update_apps(self, changes: list[tuple[str, object]], force: bool = False, partial: bool = True
                    ) -> tuple[Deployment, bool]:
        """``PUT /v2/apps/{id}``, ``PATCH``, ``PUT /v2/apps``: each
        (app id, document) applied (``partial``: the fields given replace
        those of the app; a document of only ``version`` rolls back to that
        version); apps that do not exist are created. One deployment for
        all; True if an app was created."""
        plans: list[tuple[AppDefinition | None, AppDefinition]] = []
        problems: list[tuple[str, list[str]]] = []
        for app_id, document in changes:
            app_id = normalize_id(app_id)
            record = self.apps.get(app_id)
            current = record.definition if record is not None and not record.deleting else None
            try:
                if isinstance(document, Mapping) and set(document) == {"version"} and current is not None:
                    target = self._rollback_target(record, str(document["version"]))  # type: ignore[arg-type]
                elif current is not None and partial:
                    target = merge_app(current, document, self.framework_role)
                else:
                    target = parse_app(document, app_id=app_id, framework_role=self.framework_role)
            except ValidationError as exc:
                problems += [(path if len(changes) == 1 else f"({len(plans)}){path}", errors)
                             for path, errors in exc.details]
                continue
            if current is None:
                self._check_not_a_group(target.id)
            plans.append((current, target))
        if problems:
            raise ValidationError(problems)
        if record_deleting := [t.id for _, t in plans if t.id in self.apps and self.apps[t.id].deleting]:
            self._locked(record_deleting, force)
        self._locked([target.id for _, target in plans], force)
        steps: list[list[Action]] = [[], [], []]
        original: dict[str, AppDefinition | None] = {}
        target_apps: dict[str, AppDefinition | None] = {}
        created = False
        for current, target in plans:
            versioned = self._versioned(target, current)
            if current is not None and versioned.config() == current.config() \
                    and versioned.instances == current.instances:
                original[target.id] = target_apps[target.id] = current   # nothing changes
                continue
            self._store_app(versioned)
            original[target.id], target_apps[target.id] = current, versioned
            if current is None:
                created = True
                steps[0].append(Action(START, target.id))
                steps[1].append(Action(SCALE, target.id))
            elif versioned.last_config_change_at != current.last_config_change_at:
                steps[1].append(Action(RESTART, target.id))
            else:
                steps[1].append(Action(SCALE, target.id))
        version = max((a.version for a in target_apps.values() if a is not None), default=self._new_version())
        return self._start_deployment(steps, original, target_apps, version), created

    def _rollback_target(self, record: AppRecord, version: str) -> AppDefinition:
        stored = record.versions.get(version)
        if stored is None:
            raise ValidationError([("/version", [f"app {record.id} has no version {version}"])])
        return attrs.evolve(stored, version="", last_scaling_at="", last_config_change_at="")

    def restart_app(self, app_id: str, force: bool = False) -> Deployment:
        """``POST /v2/apps/{id}/restart``: a new config version, every instance replaced."""
        record = self._app(app_id)
        self._locked([record.id], force)
        current = record.definition
        app = self._versioned(current, current, restart=True)
        self._store_app(app)
        return self._start_deployment([[Action(RESTART, app.id)]], {app.id: current}, {app.id: app}, app.version)

    def delete_app(self, app_id: str, force: bool = False) -> Deployment:
        """``DELETE /v2/apps/{id}``: every instance killed, then the app forgotten."""
        record = self._app(app_id)
        self._locked([record.id], force)
        current = record.definition
        self._store_app(current, deleting=True)
        return self._start_deployment([[Action(STOP, current.id)]], {current.id: current}, {current.id: None},
                                      self._new_version())

    def kill_tasks(self, task_ids: Iterable[str], scale: bool = False, force: bool = False,
                   app_id: str | None = None) -> tuple[list[Instance], Deployment | None]:
        """``POST /v2/tasks/delete``, ``DELETE /v2/apps/{id}/tasks[/{task}]``:
        the instances of these tasks are killed — replaced, or with
        ``scale`` not (their apps scale down by as many, a deployment). Ids
        of no instance are ignored (as Marathon); with ``app_id``, ids of
        another app's too."""
        found = [self._by_task[t] for t in dict.fromkeys(task_ids) if t in self._by_task]
        if app_id is not None:
            found = [i for i in found if i.app_id == normalize_id(app_id)]
        found = [i for i in found if i.goal == GOAL_RUNNING]
        if not scale:
            for instance in found:
                self._stop(instance)
            return found, None
        by_app: dict[str, list[Instance]] = {}
        for instance in found:
            by_app.setdefault(instance.app_id, []).append(instance)
        self._locked(by_app, force)
        original: dict[str, AppDefinition | None] = {}
        target: dict[str, AppDefinition | None] = {}
        for the_app, killed in sorted(by_app.items()):
            current = self.apps[the_app].definition
            scaled = self._versioned(attrs.evolve(current, instances=max(0, current.instances - len(killed))),
                                     current)
            self._store_app(scaled)
            original[the_app], target[the_app] = current, scaled
            for instance in killed:
                self._stop(instance)
        steps = [[Action(SCALE, a) for a in sorted(target)]]
        return found, self._start_deployment(steps, original, target, self._new_version())

    def cancel_deployment(self, deployment_id: str, force: bool = False) -> Deployment | None:
        """``DELETE /v2/deployments/{id}``: with ``force`` it just stops (the
        apps stay as they are); without, a new deployment rolls each app back
        to what it was before (that deployment is returned)."""
        deployment = self.deployments.get(deployment_id)
        if deployment is None:
            raise ApiError(404, {"message": f"DeploymentPlan {deployment_id} does not exist"})
        self._drop_deployment(deployment, failed=True)
        if force:
            return None
        steps: list[list[Action]] = [[], [], []]
        original: dict[str, AppDefinition | None] = {}
        target: dict[str, AppDefinition | None] = {}
        for app_id, before in sorted(deployment.original.items()):
            record = self.apps.get(app_id)
            now = record.definition if record is not None and not record.deleting else None
            original[app_id] = now
            if before is None:
                if record is not None:
                    self._store_app(record.definition, deleting=True)
                    steps[0].append(Action(STOP, app_id))
                target[app_id] = None
                continue
            restored = self._versioned(attrs.evolve(before, version="", last_scaling_at="",
                                                    last_config_change_at=""), now)
            if now is not None and restored.config() == now.config():
                restored = attrs.evolve(restored, last_config_change_at=now.last_config_change_at)
            self._store_app(restored)
            target[app_id] = restored
            if now is None:
                steps[1].append(Action(SCALE, app_id))
            elif restored.last_config_change_at != now.last_config_change_at:
                steps[1].append(Action(RESTART, app_id))
            else:
                steps[1].append(Action(SCALE, app_id))
        return self._start_deployment(steps, original, target, self._new_version())

    def reset_delay(self, app_id: str) -> None:
        """``DELETE /v2/queue/{id}/delay``."""
        self._app(app_id).delay = None
        self._touched.add(normalize_id(app_id))

    def _app(self, app_id: str) -> AppRecord:
        record = self.apps.get(normalize_id(app_id))
        if record is None or record.deleting:
            raise _not_found(normalize_id(app_id))
        return record

    def app(self, app_id: str) -> AppRecord:
        """The app (404 ApiError if there is none, or it is being deleted)."""
        return self._app(app_id)

    def visible_apps(self) -> list[AppRecord]:
        return sorted((r for r in self.apps.values() if not r.deleting), key=lambda r: r.id)

    def instance_by_task(self, task_id: str) -> Instance | None:
        return self._by_task.get(task_id)

    def delay_left(self, record: AppRecord) -> float:
        if record.delay is None:
            return 0.0
        return max(0.0, record.delay.reference + record.delay.current - self.clock.now())

    def next_wakeup(self) -> float:
        """When a :class:`Tick` next has something to do (at the latest in a second)."""
        return self.clock.now() + 1.0

    def check(self) -> None:
        """Invariants (tests call it): the indexes agree with the instances;
        every instance belongs to an app; a task id belongs to one instance;
        no launched instance lacks a task id."""
        assert set(self._by_task) == {i.task_id for i in self.instances.values() if i.task_id}
        assert all(self._by_task[i.task_id] is i for i in self.instances.values() if i.task_id)
        indexed = {iid for members in self._by_app.values() for iid in members}
        assert indexed == set(self.instances)
        for instance in self.instances.values():
            assert instance.app_id in self.apps, instance
            assert (instance.condition == SCHEDULED) == (not instance.launched), instance
        for deployment in self.deployments.values():
            assert deployment.current < len(deployment.steps)


def _typed(action: Action) -> dict[str, str]:
    """An action as deployment events write it (``type`` rather than ``action``)."""
    return {"type": action.kind, "app": action.app_id}


def _stored_app(document: Mapping[str, Any], role: str) -> AppDefinition:
    """A stored app document back (with its version fields)."""
    info = document.get("versionInfo") or {}
    fields = {k: v for k, v in document.items() if k not in ("version", "versionInfo")}
    if fields.get("role") not in (None, "", role):
        fields["role"] = role     # the service now runs in another role: its apps follow
    app = parse_app(fields, framework_role=role)
    return attrs.evolve(app, version=str(document.get("version", "")),
                        last_scaling_at=str(info.get("lastScalingAt", "")),
                        last_config_change_at=str(info.get("lastConfigChangeAt", "")))


def _seconds(timestamp: str) -> float:
    """Epoch seconds of a version time written by :func:`format_timestamp`."""
    import datetime

    try:
        moment = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return 0.0
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()
