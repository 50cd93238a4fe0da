"""pymesos on mesoslike: change ``from pymesos import ...`` to
``from mesoslike.compat.pymesos import ...`` and a pymesos scheduler runs on
a mesoslike cluster.

``MesosSchedulerDriver`` has pymesos's constructor, methods and callback
names and passes the scheduler the same dicts (addict ``Dict`` objects with
``use_addict=True``): offers, statuses, ids as ``{"value": ...}``, resources
as lists of ``{"name", "type", "scalar"}`` / ``RANGES``. Underneath it is a
:class:`mesoslike.SchedulerDriver` — the public framework API only — so the
threading, delivery and failover rules of ``docs/framework-api.rst`` hold.

The shim reads the cluster's keys as ``mesoslike run`` does (``MESOSLIKE_KEY``
and ``MESOSLIKE_MASTER_KEY``, which ``mesoslike local`` exports to its
command), so a pymesos scheduler started under ``mesoslike local -- ...`` is
authenticated with no change. What maps to what, and what is not supported,
is in ``docs/framework-api.rst``, "pymesos compatibility".
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any, Iterable, Mapping

from mesoslike import DriverStatus, FrameworkInfo, MasterInfo, Offer, Scheduler as _Scheduler, SchedulerDriver
from mesoslike import TaskStatus
from mesoslike.compat._pymesos_executor import Executor, MesosExecutorDriver
from mesoslike.compat._pymesos_shapes import framework_info as framework_info_from
from mesoslike.compat._pymesos_shapes import (
    Message,
    PymesosCompatError,
    addict_class,
    decode_data,
    encode_data,
    filters_from,
    framework_info,
    id_message,
    master_address,
    master_info_message,
    offer_id_list,
    offer_message,
    operations_from,
    status_from_message,
    status_message,
    task_info,
    value_of,
)

__all__ = ["Scheduler", "MesosSchedulerDriver", "Executor", "MesosExecutorDriver", "encode_data", "decode_data",
           "PymesosCompatError"]

log = logging.getLogger("mesoslike.compat.pymesos")

#: executor ids the scheduler launched tasks on, remembered to route its
#: ``sendFrameworkMessage(executorId, ...)`` (an executor's id, or a command
#: task's id as Mesos's command executor has it); the oldest are forgotten
_MAX_REMEMBERED_EXECUTORS = 100_000


class Scheduler:
    """pymesos's ``Scheduler``: override the callbacks you need; the rest do
    nothing (``error`` prints, as pymesos's does). Every callback gets the
    :class:`MesosSchedulerDriver` first; ids are ``{"value": ...}`` dicts."""

    def registered(self, driver: MesosSchedulerDriver, frameworkId: Message, masterInfo: Message) -> None:
        """The master accepted the framework: ``frameworkId.value`` is its id."""

    def reregistered(self, driver: MesosSchedulerDriver, masterInfo: Message) -> None:
        """Subscribed again (same framework id) after the master was lost."""

    def disconnected(self, driver: MesosSchedulerDriver) -> None:
        """The master went silent; the driver is re-subscribing."""

    def processHeartBeat(self, driver: MesosSchedulerDriver) -> None:
        """pymesos calls this on each master heartbeat; mesoslike's driver
        keeps heartbeats to itself, so it is never called."""

    def resourceOffers(self, driver: MesosSchedulerDriver, offers: list[Message]) -> None:
        """New offers, each ``{"id", "framework_id", "agent_id", "hostname",
        "resources", "attributes"}``."""

    def inverseOffers(self, driver: MesosSchedulerDriver, offers: list[Message]) -> None:
        """Never called: mesoslike makes no inverse offers (no maintenance)."""

    def offerRescinded(self, driver: MesosSchedulerDriver, offerId: Message) -> None:
        """An offer is void."""

    def inverseOfferRescinded(self, driver: MesosSchedulerDriver, offerId: Message) -> None:
        """Never called (no inverse offers)."""

    def statusUpdate(self, driver: MesosSchedulerDriver, status: Message) -> None:
        """A task changed state: ``{"task_id", "state", "message", "agent_id",
        "source", "reason", "uuid", "timestamp"}``."""

    def operationStatusUpdate(self, driver: MesosSchedulerDriver, status: Message) -> None:
        """Never called: mesoslike has no offer operations with feedback."""

    def frameworkMessage(self, driver: MesosSchedulerDriver, executorId: Message, slaveId: Message,
                         message: str) -> None:
        """An executor sent the framework data with its driver's
        ``sendFrameworkMessage`` (base64 text, as pymesos gives it:
        ``decode_data(message)``); ``executorId.value`` is its id (empty
        for data from an agent that is not an executor's)."""

    def slaveLost(self, driver: MesosSchedulerDriver, slaveId: Message) -> None:
        """An agent was removed (its tasks come as TASK_LOST updates too)."""

    def agentLost(self, driver: MesosSchedulerDriver, agentId: Message) -> None:
        """The same as :meth:`slaveLost`, by its v1 name; by default it calls
        ``slaveLost``, so override either."""
        self.slaveLost(driver, agentId)

    def executorLost(self, driver: MesosSchedulerDriver, executorId: Message, slaveId: Message,
                     status: int) -> None:
        """A custom executor's process ended (``status``: its exit code, or
        minus the signal that ended it; None if not known); its tasks that
        had not ended come as TASK_FAILED updates too."""

    def preemptionWarning(self, driver: MesosSchedulerDriver, taskIds: list[Message], seconds: float) -> None:
        """mesoslike's fair-share preemption will kill these tasks in
        ``seconds`` (``docs/preemption.rst``); not a pymesos callback."""

    def error(self, driver: MesosSchedulerDriver, message: str) -> None:
        """The master refused something, a callback raised, a launch was
        dropped, or (``driver.status`` is DRIVER_ABORTED) the session ended."""
        log.error("Error from mesoslike: %s", message)


class _Translator(_Scheduler):
    """The mesoslike scheduler the real driver calls: it turns each callback
    into the pymesos one, with pymesos's dicts and the pymesos driver."""

    def __init__(self, shim: MesosSchedulerDriver) -> None:
        self.shim = shim

    def _call(self, name: str, *args: object) -> None:
        callback = getattr(self.shim.sched, name, None)
        if callback is not None:
            callback(self.shim, *args)

    def registered(self, driver: SchedulerDriver, framework_id: str, master_info: MasterInfo) -> None:
        self._call("registered", self.shim._wrap(id_message(framework_id)),
                   self.shim._wrap(master_info_message(master_info)))

    def reregistered(self, driver: SchedulerDriver, master_info: MasterInfo) -> None:
        self._call("reregistered", self.shim._wrap(master_info_message(master_info)))

    def disconnected(self, driver: SchedulerDriver) -> None:
        self._call("disconnected")

    def resource_offers(self, driver: SchedulerDriver, offers: list[Offer]) -> None:
        framework_id = driver.framework_id
        self._call("resourceOffers", [self.shim._wrap(offer_message(offer, framework_id)) for offer in offers])

    def offer_rescinded(self, driver: SchedulerDriver, offer_id: str) -> None:
        self._call("offerRescinded", self.shim._wrap(id_message(offer_id)))

    def status_update(self, driver: SchedulerDriver, status: TaskStatus) -> None:
        self._call("statusUpdate", self.shim._wrap(status_message(status)))

    def framework_message(self, driver: SchedulerDriver, agent_id: str, data: bytes) -> None:
        self._call("frameworkMessage", self.shim._wrap(id_message("")), self.shim._wrap(id_message(agent_id)),
                   encode_data(data))

    def executor_message(self, driver: SchedulerDriver, executor_id: str, agent_id: str, data: bytes) -> None:
        self._call("frameworkMessage", self.shim._wrap(id_message(executor_id)),
                   self.shim._wrap(id_message(agent_id)), encode_data(data))

    def executor_lost(self, driver: SchedulerDriver, executor_id: str, agent_id: str, status: int | None) -> None:
        self._call("executorLost", self.shim._wrap(id_message(executor_id)), self.shim._wrap(id_message(agent_id)),
                   status)

    def agent_lost(self, driver: SchedulerDriver, agent_id: str) -> None:
        # the v1 name if the scheduler has it (pymesos's base class has only slaveLost)
        name = "agentLost" if hasattr(self.shim.sched, "agentLost") else "slaveLost"
        self._call(name, self.shim._wrap(id_message(agent_id)))

    def preemption_warning(self, driver: SchedulerDriver, task_ids: list[str], seconds: float) -> None:
        self._call("preemptionWarning", [self.shim._wrap(id_message(task_id)) for task_id in task_ids], seconds)

    def error(self, driver: SchedulerDriver, message: str) -> None:
        self._call("error", message)


class MesosSchedulerDriver:
    """pymesos's ``MesosSchedulerDriver`` on mesoslike.

    ``framework`` is a pymesos framework dict (``name``, ``user``,
    ``hostname``, ``role`` or one-element ``roles``, ``failover_timeout`` —
    100 s when absent, as pymesos — ``id``, ``capabilities``). ``master`` is
    ``host:port`` (``host`` alone: port 5050), ``tcp://host:port`` or
    ``zk://hosts/path``. ``principal`` and ``secret`` (HTTP basic
    authentication in pymesos) have no use here: mesoslike authenticates by
    key, ``key`` and ``master_key`` (by default ``$MESOSLIKE_KEY`` and
    ``$MESOSLIKE_MASTER_KEY``); giving them logs a warning. ``failover``
    and ``timeout`` are accepted and unused. Methods return the driver's
    ``DriverStatus`` (pymesos returns None); a malformed dict raises
    :class:`PymesosCompatError` in the caller's thread.
    """

    def __init__(self, sched: Any, framework: Mapping[str, Any], master_uri: str, use_addict: bool = False,
                 implicit_acknowledgements: bool = True, principal: str | None = None, secret: str | None = None,
                 failover: bool = False, timeout: float | None = None, *, key: str | None = None,
                 master_key: str | None = None, stop_timeout: float = 10.0) -> None:
        self.sched = sched
        self.master_uri = master_uri
        self._framework: dict[str, Any] = dict(framework)
        self.implicit_acknowledgements = implicit_acknowledgements
        self._dict_cls = addict_class() if use_addict else dict
        if principal is not None or secret is not None:
            log.warning("principal/secret are ignored: mesoslike authenticates frameworks by key "
                        "($MESOSLIKE_KEY, docs/security.rst)")
        self._executor_ids: OrderedDict[str, None] = OrderedDict()
        self._executor_ids_lock = threading.Lock()
        info: FrameworkInfo = framework_info(framework)
        self._driver = SchedulerDriver(_Translator(self), info, master_address(master_uri),
                                       implicit_acknowledgements, key=key, master_key=master_key,
                                       stop_timeout=stop_timeout)

    # ------------------------------------------------------------ properties
    @property
    def framework_id(self) -> str | None:
        """The framework's id once registered (None before, as pymesos)."""
        return self._driver.framework_id or None

    @property
    def framework(self) -> dict[str, Any]:
        """The framework dict, with its ``id`` once registered."""
        framework = dict(self._framework)
        if self._driver.framework_id:
            framework["id"] = id_message(self._driver.framework_id)
        return framework

    @property
    def connected(self) -> bool:
        return self._driver.connected

    @property
    def master(self) -> str | None:
        """``host:port`` of the master subscribed to (None while there is none)."""
        info = self._driver.master_info
        return info.address.removeprefix("tcp://") if info is not None and self.connected else None

    @property
    def status(self) -> DriverStatus:
        return self._driver.status

    @property
    def aborted(self) -> bool:
        """pymesos's: the driver no longer runs because it aborted (a
        callback raised, the master ended the framework, or ``abort()``)."""
        return self._driver.status is DriverStatus.ABORTED

    @property
    def stream_id(self) -> str | None:
        """pymesos's ``Mesos-Stream-Id`` of the subscription: here an id of
        the current subscription (the framework id) while subscribed, None
        otherwise — what pymesos programs test it for."""
        return self._driver.framework_id or None if self._driver.connected else None

    def change_master(self, master: str) -> None:
        """pymesos's: subscribe to another master. The mesoslike driver
        follows the leading master itself (``zk://`` or the master's own
        answer), so this only logs which one pymesos meant."""
        log.info("change_master(%r): the driver follows the leading master by itself", master)

    @property
    def driver(self) -> SchedulerDriver:
        """The mesoslike driver underneath (for what only mesoslike has)."""
        return self._driver

    # -------------------------------------------------------------- lifecycle
    def start(self) -> DriverStatus:
        return self._driver.start()

    def stop(self, failover: bool = False) -> DriverStatus:
        """``failover=False`` tears the framework down (its tasks are killed)."""
        return self._driver.stop(failover)

    def abort(self) -> DriverStatus:
        return self._driver.abort()

    def join(self) -> DriverStatus:
        """Wait for the driver to end. As pymesos (whose I/O thread re-raises
        a callback's exception in the main thread), the exception of a
        callback that aborted the driver is raised here."""
        status = self._driver.join()
        if self._driver.callback_exception is not None:
            raise self._driver.callback_exception
        return status

    def run(self) -> DriverStatus:
        status = self._driver.start()
        return self.join() if status is DriverStatus.RUNNING else status

    # ------------------------------------------------------------------ calls
    def launchTasks(self, offerIds: Any, tasks: Iterable[Mapping[str, Any]], filters: Any = None) -> DriverStatus:
        """Launch pymesos task dicts on offers of one agent (``offer.id`` or
        a list of offer ids); no tasks declines the offers."""
        ids = offer_id_list(offerIds)
        if isinstance(tasks, Mapping) or isinstance(tasks, (str, bytes)):
            raise PymesosCompatError("tasks must be a list of task dicts")
        infos = [task_info(task) for task in tasks]
        self._remember_executors(info.executor.executor_id for info in infos if info.executor is not None)
        if not infos:
            return self.declineOffer(offerIds, filters)
        return self._driver.launch_tasks(ids, infos, filters_from(filters))

    def acceptOffers(self, offerIds: Any, operations: Iterable[Mapping[str, Any]], filters: Any = None) -> DriverStatus:
        """Accept offers with ``LAUNCH``, ``RESERVE`` and ``UNRESERVE``
        operations, applied in order (docs/framework-api.rst,
        "Reservations"); others raise :class:`PymesosCompatError`. A RESERVE's
        resources carry the role they are for (and any
        ``reservation.principal``: the framework's own is used, from its key);
        an UNRESERVE's are written as offered. No operations declines."""
        ids = offer_id_list(offerIds)
        items = operations_from(operations)
        self._remember_executors(task.executor.executor_id for item in items for task in item.tasks
                                 if task.executor is not None)
        if not items:
            return self.declineOffer(offerIds, filters)
        return self._driver.accept_offers(ids, items, filters_from(filters))

    def declineOffer(self, offerIds: Any, filters: Any = None) -> DriverStatus:
        """Decline one offer (``offer.id``) or a list of them."""
        chosen = filters_from(filters)
        status = self._driver.status
        for offer_id in offer_id_list(offerIds):
            status = self._driver.decline_offer(offer_id, chosen)
        return status

    def reviveOffers(self, roles: Iterable[str] = ()) -> DriverStatus:
        """Ask for offers again, clearing filters (the framework has one
        role, so ``roles`` does not narrow it)."""
        return self._driver.revive_offers()

    def suppressOffers(self, roles: Iterable[str] = ()) -> DriverStatus:
        return self._driver.suppress_offers()

    def updateFramework(self, framework_info: Mapping[str, Any], suppressed_roles: Iterable[str] = (),
                        *args: Any, **kwargs: Any) -> DriverStatus:
        """Mesos's UPDATE_FRAMEWORK (pymesos 0.3.15 lacks it; Mesos >= 1.9):
        the framework dict's name, failover timeout, labels, web UI, host
        name and capabilities; its role stays. ``suppressed_roles``: offers
        are suppressed when it names the framework's role."""
        info = framework_info_from(framework_info)
        self._framework = dict(framework_info)
        status = self._driver.update_framework(info)
        if info.role in set(suppressed_roles):
            status = self._driver.suppress_offers()
        return status

    def killTask(self, taskId: Any) -> DriverStatus:
        """Kill a task by its ``{"value": ...}`` id."""
        return self._driver.kill_task(value_of(taskId, "task id"))

    def acknowledgeStatusUpdate(self, status: Mapping[str, Any]) -> DriverStatus:
        """Acknowledge a status dict given to ``statusUpdate`` (with
        ``implicit_acknowledgements=False``); one without ``uuid`` needs none."""
        return self._driver.acknowledge_status_update(status_from_message(status))

    def reconcileTasks(self, tasks: Iterable[Mapping[str, Any]]) -> DriverStatus:
        """Ask for the state of tasks, given as status dicts (their
        ``task_id`` and ``agent_id``); an empty list asks for all of them."""
        if isinstance(tasks, Mapping) or isinstance(tasks, (str, bytes)):
            raise PymesosCompatError("reconcileTasks takes a list of status dicts")
        return self._driver.reconcile_tasks(
            [status_from_message(task, f"tasks[{index}]") for index, task in enumerate(tasks)])

    def sendFrameworkMessage(self, executorId: Any, agentId: Any, data: str | bytes) -> DriverStatus:
        """Send ``data`` (base64 text, as pymesos; raw ``bytes`` are taken as
        they are) to an executor on an agent, best effort: ``executorId``
        names a custom executor this driver launched tasks on (its
        ``frameworkMessage`` gets it), or else a command task (Mesos's
        command executor has its task's id), whose ``<sandbox>/messages``
        gets it."""
        payload = data if isinstance(data, bytes) else decode_data(data)
        agent, executor = value_of(agentId, "agent id"), value_of(executorId, "executor id")
        with self._executor_ids_lock:
            custom = executor in self._executor_ids
        if custom:
            return self._driver.send_framework_message(agent, payload, "", executor_id=executor)
        return self._driver.send_framework_message(agent, payload, executor)

    def requestResources(self, requests: Any) -> DriverStatus:
        """A no-op, as in Mesos' allocator: offers come anyway."""
        log.warning("requestResources is not supported: the allocator offers what it has")
        return self._driver.status

    def acceptInverseOffers(self, offer_ids: Any, filters: Any = None) -> DriverStatus:
        """A no-op: there are no inverse offers."""
        return self._driver.status

    def declineInverseOffer(self, offer_ids: Any, filters: Any = None) -> DriverStatus:
        """A no-op: there are no inverse offers."""
        return self._driver.status

    def acknowledgeOperationStatusUpdate(self, status: Any) -> DriverStatus:
        """A no-op: there are no operation status updates."""
        return self._driver.status

    def reconcileOperations(self, operations: Any) -> DriverStatus:
        """A no-op: there are no offer operations with feedback."""
        return self._driver.status

    # ---------------------------------------------------------------- helpers
    def _wrap(self, message: Message) -> Any:
        """A message as the scheduler gets it: a plain dict, or an addict
        ``Dict`` (nested ones too) with ``use_addict=True``."""
        return self._dict_cls(message)

    def _remember_executors(self, executor_ids: Iterable[str]) -> None:
        with self._executor_ids_lock:
            for executor_id in executor_ids:
                self._executor_ids[executor_id] = None
                self._executor_ids.move_to_end(executor_id)
            while len(self._executor_ids) > _MAX_REMEMBERED_EXECUTORS:
                self._executor_ids.popitem(last=False)

    def __repr__(self) -> str:
        return f"MesosSchedulerDriver({self._driver!r})"

