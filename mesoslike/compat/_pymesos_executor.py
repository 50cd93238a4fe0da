"""pymesos's ``Executor`` and ``MesosExecutorDriver`` on mesoslike's custom
executors (``docs/framework-api.rst``, "Custom executors").

A pymesos task with an ``executor`` is launched by ``MesosSchedulerDriver``
as a mesoslike task of that custom executor: the agent starts the
executor's command the first time a task of the framework names it there,
and hands it every later task naming the same ``executor_id``. In that
process ``MesosExecutorDriver(executor)`` is a mesoslike
:class:`~mesoslike.executor.ExecutorDriver` that calls the executor's pymesos
callbacks with pymesos's dicts: ``registered`` (the scheduler's
``ExecutorInfo`` dict, Mesos's framework and agent info), ``launchTask``
(the scheduler's task dict, its ``data`` included), ``killTask``,
``frameworkMessage`` (base64 text), ``reregistered``/``disconnected`` across
an agent restart, ``shutdown`` and ``error``. ``sendStatusUpdate`` and
``sendFrameworkMessage`` go to the agent: updates reliably (kept until the
agent has them on disk), messages to the scheduler's ``frameworkMessage``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable, Mapping

from mesoslike import ConfigError, DriverStatus, TaskInfo
from mesoslike.compat._pymesos_shapes import (
    Message,
    PymesosCompatError,
    addict_class,
    agent_message,
    decode_data,
    encode_data,
    executor_message,
    executor_task_message,
    framework_message,
    id_message,
    status_from_executor,
)
from mesoslike.executor import Executor as _Executor
from mesoslike.executor import ExecutorDriver

__all__ = ["Executor", "MesosExecutorDriver"]

log = logging.getLogger("mesoslike.compat.pymesos")


class Executor:
    """pymesos's ``Executor``: override what you need; the rest do nothing."""

    def registered(self, driver: MesosExecutorDriver, executorInfo: Message, frameworkInfo: Message,
                   agentInfo: Message) -> None:
        """The agent took the executor: its ``ExecutorInfo``, the framework's and the agent's info."""

    def reregistered(self, driver: MesosExecutorDriver, agentInfo: Message) -> None:
        """The agent restarted and recovered this executor (or the channel
        broke and healed); its tasks go on."""

    def disconnected(self, driver: MesosExecutorDriver) -> None:
        """The agent went away; the driver reconnects (tasks go on)."""

    def launchTask(self, driver: MesosExecutorDriver, task: Message) -> None:
        """Run ``task`` (its ``data`` is base64 text); report with
        ``driver.sendStatusUpdate``. Return quickly: run it on a thread."""

    def launchTaskGroup(self, driver: MesosExecutorDriver, taskGroup: list[Message]) -> None:
        """Never called (no task groups)."""

    def killTask(self, driver: MesosExecutorDriver, taskId: Message) -> None:
        """The task is being killed: stop it and send TASK_KILLED."""

    def frameworkMessage(self, driver: MesosExecutorDriver, message: str) -> None:
        """Data from the scheduler's ``sendFrameworkMessage`` (base64 text: ``decode_data(message)``)."""

    def shutdown(self, driver: MesosExecutorDriver) -> None:
        """The framework was torn down (or the agent stops): end the tasks;
        the driver stops after this, and the agent kills the process after
        the executor's ``shutdown_grace_period``."""

    def error(self, driver: MesosExecutorDriver, message: str) -> None:
        """The agent refused something, or a callback of the executor raised."""
        print(f"Error from executor: {message}", file=sys.stderr)


class _Translator(_Executor):
    """The mesoslike executor the real driver calls: each callback becomes
    the pymesos one, with pymesos's dicts and the pymesos driver."""

    def __init__(self, shim: MesosExecutorDriver) -> None:
        self.shim = shim

    def _call(self, name: str, *args: object) -> None:
        getattr(self.shim.executor, name)(self.shim, *args)

    def registered(self, driver: ExecutorDriver, executor_info: Any, framework_info: Any, agent_info: Any) -> None:
        shim = self.shim
        shim.executor_info = executor_message(executor_info, framework_info.id, shim.environment)
        shim.framework_info = framework_message(framework_info)
        shim.framework_id = id_message(framework_info.id)
        self._call("registered", shim._wrap(shim.executor_info), shim._wrap(shim.framework_info),
                   shim._wrap(agent_message(agent_info)))

    def reregistered(self, driver: ExecutorDriver, agent_info: Any) -> None:
        self._call("reregistered", self.shim._wrap(agent_message(agent_info)))

    def disconnected(self, driver: ExecutorDriver) -> None:
        self._call("disconnected")

    def launch_task(self, driver: ExecutorDriver, task: TaskInfo) -> None:
        self._call("launchTask", self.shim._wrap(executor_task_message(task, self.shim.executor_info or {})))

    def kill_task(self, driver: ExecutorDriver, task_id: str) -> None:
        self._call("killTask", self.shim._wrap(id_message(task_id)))

    def framework_message(self, driver: ExecutorDriver, data: bytes) -> None:
        self._call("frameworkMessage", encode_data(data))

    def shutdown(self, driver: ExecutorDriver) -> None:
        self._call("shutdown")

    def error(self, driver: ExecutorDriver, message: str) -> None:
        self._call("error", message)


class MesosExecutorDriver:
    """pymesos's ``MesosExecutorDriver`` in a custom executor's process (see
    the module docstring). ``timeout`` and ``http_timeout`` are accepted and
    unused. Outside a process an agent started for an executor the
    constructor raises :class:`PymesosCompatError`. Methods return the
    driver's ``DriverStatus`` (pymesos returns None)."""

    def __init__(self, executor: Any, use_addict: bool = False, timeout: float | None = None,
                 http_timeout: float = 10, *, environment: Mapping[str, str] | None = None) -> None:
        self.executor = executor
        self.environment: Mapping[str, str] = os.environ if environment is None else environment
        self._dict_cls: Callable[[Message], Any] = addict_class() if use_addict else dict
        try:
            self._driver = ExecutorDriver(_Translator(self), self.environment)
        except ConfigError as exc:
            raise PymesosCompatError(f"MesosExecutorDriver runs in the process of a custom executor that a "
                                     f"mesoslike agent started (a pymesos task with an executor): {exc}") from None
        #: the executor's and its framework's info as dicts, once registered (as pymesos's driver keeps them)
        self.executor_info: Message | None = None
        self.framework_info: Message | None = None
        self.executor_id: Message = id_message(self._driver.executor_id) if self._driver.executor_id else {}
        self.framework_id: Message = id_message(self.environment.get("MESOSLIKE_FRAMEWORK_ID", ""))

    @property
    def status(self) -> DriverStatus:
        return self._driver.status

    @property
    def driver(self) -> ExecutorDriver:
        """The mesoslike ``ExecutorDriver`` underneath."""
        return self._driver

    # ------------------------------------------------------------ lifecycle
    def start(self) -> DriverStatus:
        """Connect to the agent and register (on the driver's thread)."""
        return self._driver.start()

    def join(self) -> DriverStatus:
        """Wait until the driver stops: after ``shutdown``, ``stop()`` or ``abort()``."""
        return self._driver.join()

    def run(self) -> DriverStatus:
        return self._driver.run()

    def stop(self) -> DriverStatus:
        """End the driver; the process should then exit (its tasks that have
        not ended become TASK_FAILED)."""
        return self._driver.stop()

    def abort(self) -> DriverStatus:
        return self._driver.abort()

    # ---------------------------------------------------------------- calls
    def sendStatusUpdate(self, status: Any) -> DriverStatus:
        """Report a task's state: a status dict's ``task_id``, ``state``
        (TASK_STARTING, TASK_RUNNING, TASK_KILLING or a terminal one),
        ``message``, ``reason``, ``healthy`` and ``uuid`` (base64, as pymesos
        makes it; one is made when absent). ``timestamp``, ``source`` and
        ``data`` are the agent's or unused. Reliable: kept and sent again
        until the agent has it on disk."""
        return self._driver.send_status_update(status_from_executor(status))

    def sendFrameworkMessage(self, data: str | bytes) -> DriverStatus:
        """Send ``data`` (base64 text, as pymesos; raw ``bytes`` are taken as
        they are; at most the agent's --max-message-size decoded, 64 MiB by default) to the scheduler's
        ``frameworkMessage``; best effort."""
        payload = data if isinstance(data, bytes) else decode_data(data)
        return self._driver.send_framework_message(payload)

    # -------------------------------------------------------------- helpers
    def _wrap(self, message: Message) -> Any:
        return self._dict_cls(message)

    def __repr__(self) -> str:
        return f"MesosExecutorDriver({self.executor_id.get('value', '')!r}, {self.status})"
