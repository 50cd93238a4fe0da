"""pymesos's ``Executor`` and ``MesosExecutorDriver`` on mesoslike.

mesoslike has no long-lived custom executors yet: an agent runs each task
as one process. So a pymesos task with an ``executor`` runs the executor's
command as that task's process (``MesosSchedulerDriver`` arranges it), and
this driver plays the agent's part inside it: it reads the launch the
scheduler made (``$MESOSLIKE_PYMESOS_LAUNCH``), calls ``registered`` and
``launchTask`` with it, and turns the executor's status updates into what
the agent understands — the process's exit. TASK_FINISHED exits 0 (the
task ends TASK_FINISHED); any other terminal state exits 1 (TASK_FAILED,
with the executor's message on the task's stderr). A kill (SIGTERM from the
agent) calls ``killTask``; the agent's SIGKILL follows after the task's
grace period, and the task ends TASK_KILLED.

One executor process runs one task; framework messages do not reach it
(``frameworkMessage`` is never called) and ``sendFrameworkMessage`` is
dropped with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from typing import Any, Callable

from mesoslike import DriverStatus, TaskState
from mesoslike.compat._pymesos_shapes import (
    LAUNCH_VARIABLE,
    Message,
    PymesosCompatError,
    addict_class,
    known_state,
    value_of,
)

__all__ = ["Executor", "MesosExecutorDriver"]

log = logging.getLogger("mesoslike.compat.pymesos")

#: seconds between the executor's last (terminal) update and the process's
#: forced exit, if the executor's own threads keep it alive (pymesos kills
#: its executor after the agent's shutdown grace period likewise)
SHUTDOWN_GRACE = 5.0
#: how often join() looks up from its wait (signal handlers run in between)
_WAIT_SLICE = 0.2


class Executor:
    """pymesos's ``Executor``: override what you need; the rest do nothing."""

    def registered(self, driver: MesosExecutorDriver, executorInfo: Message, frameworkInfo: Message,
                   agentInfo: Message) -> None:
        """The executor started: its ``ExecutorInfo``, the framework's and the agent's info."""

    def reregistered(self, driver: MesosExecutorDriver, agentInfo: Message) -> None:
        """Never called (an executor process lives as long as its task)."""

    def disconnected(self, driver: MesosExecutorDriver) -> None:
        """Never called."""

    def launchTask(self, driver: MesosExecutorDriver, task: Message) -> None:
        """Run ``task`` (its ``data`` is base64 text); report with
        ``driver.sendStatusUpdate``. Return quickly: run it on a thread."""

    def launchTaskGroup(self, driver: MesosExecutorDriver, taskGroup: list[Message]) -> None:
        """Never called (no task groups)."""

    def killTask(self, driver: MesosExecutorDriver, taskId: Message) -> None:
        """The task is being killed: stop it and send TASK_KILLED."""

    def frameworkMessage(self, driver: MesosExecutorDriver, message: str) -> None:
        """Never called: framework messages do not reach executors here."""

    def shutdown(self, driver: MesosExecutorDriver) -> None:
        """The executor is done (its task ended); the process exits after this."""

    def error(self, driver: MesosExecutorDriver, message: str) -> None:
        """A callback of the executor raised."""
        print(f"Error from executor: {message}", file=sys.stderr)


class MesosExecutorDriver:
    """pymesos's ``MesosExecutorDriver`` inside a task launched by
    ``mesoslike.compat.pymesos.MesosSchedulerDriver`` with an executor
    (see the module docstring). ``timeout`` and ``http_timeout`` are
    accepted and unused; outside such a task the constructor raises
    :class:`PymesosCompatError`."""

    def __init__(self, executor: Any, use_addict: bool = False, timeout: float | None = None,
                 http_timeout: float = 10, *, exit_process: Callable[[int], None] = os._exit) -> None:
        text = os.environ.get(LAUNCH_VARIABLE)
        if not text:
            raise PymesosCompatError(f"${LAUNCH_VARIABLE} is not set: MesosExecutorDriver runs as the process of "
                                     "a task that mesoslike.compat.pymesos launched with an executor")
        try:
            launch = json.loads(text)
        except ValueError as exc:
            raise PymesosCompatError(f"${LAUNCH_VARIABLE} is not JSON: {exc}") from None
        if not isinstance(launch, dict) or not all(isinstance(launch.get(key), dict) for key in
                                                   ("task", "executor", "framework_info", "agent_info")):
            raise PymesosCompatError(f"${LAUNCH_VARIABLE} must hold task, executor, framework_info and agent_info")
        self.executor = executor
        self._dict_cls: Callable[[Message], Any] = addict_class() if use_addict else dict
        self.task: Message = launch["task"]
        self.executor_info: Message = launch["executor"]
        self.framework_info: Message = launch["framework_info"]
        self.agent_info: Message = launch["agent_info"]
        self.task_id = value_of(self.task.get("task_id"), "task.task_id")
        self.framework_id = self.framework_info.get("id", {"value": os.environ.get("MESOSLIKE_FRAMEWORK_ID", "")})
        self.executor_id = self.executor_info.get("executor_id")
        self._exit_process = exit_process
        self._status = DriverStatus.NOT_STARTED
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._outcome: str | None = None     # the terminal state the executor sent
        self._shut_down = False

    @property
    def status(self) -> DriverStatus:
        return self._status

    # ------------------------------------------------------------ lifecycle
    def start(self) -> DriverStatus:
        """Call ``registered`` and ``launchTask`` (on a thread of their own)."""
        with self._lock:
            if self._status is not DriverStatus.NOT_STARTED:
                return self._status
            self._status = DriverStatus.RUNNING
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)
        threading.Thread(target=self._launch, name="pymesos-executor", daemon=True).start()
        return DriverStatus.RUNNING

    def join(self) -> DriverStatus:
        """Wait until the task ended (a terminal update) or the driver was
        stopped; then ``shutdown`` the executor and end the process: exit 0
        if the task finished, else 1. From the main thread a failure raises
        ``SystemExit(1)``; a process kept alive by the executor's own
        threads is ended :data:`SHUTDOWN_GRACE` seconds later."""
        while not self._ended.wait(_WAIT_SLICE):
            pass
        code = 0 if self._outcome == TaskState.FINISHED else 1
        self._shutdown()
        timer = threading.Timer(SHUTDOWN_GRACE, self._force_exit, args=(code,))
        timer.daemon = True
        timer.start()
        if code and threading.current_thread() is threading.main_thread():
            raise SystemExit(code)
        return self._status

    def run(self) -> DriverStatus:
        status = self.start()
        return self.join() if status is DriverStatus.RUNNING else status

    def stop(self) -> DriverStatus:
        return self._end(DriverStatus.STOPPED)

    def abort(self) -> DriverStatus:
        return self._end(DriverStatus.ABORTED)

    # ---------------------------------------------------------------- calls
    def sendStatusUpdate(self, status: Any) -> DriverStatus:
        """Report the task's state. Non-terminal states are logged (the agent
        reported TASK_RUNNING when the process started); a terminal one
        ends the executor (see :meth:`join`)."""
        if not isinstance(status, dict):
            raise PymesosCompatError(f"a status update must be a dict, got {type(status).__name__}")
        task_id = value_of(status.get("task_id"), "status.task_id")
        if task_id != self.task_id:
            raise PymesosCompatError(f"status for task {task_id!r}: this executor runs task {self.task_id!r} only")
        state = known_state(status.get("state"), "status.state")
        message = status.get("message") or ""
        print(f"pymesos executor: task {task_id} {state}{': ' + str(message) if message else ''}",
              file=sys.stderr, flush=True)
        if state in (TaskState.FINISHED, TaskState.FAILED, TaskState.KILLED, TaskState.ERROR, TaskState.LOST,
                     TaskState.DROPPED, TaskState.GONE):
            with self._lock:
                if self._outcome is None:
                    self._outcome = state
            self._ended.set()
        return self._status

    def sendFrameworkMessage(self, data: Any) -> DriverStatus:
        """Dropped with a warning: messages from executors do not reach the
        scheduler on mesoslike yet."""
        log.warning("sendFrameworkMessage dropped: executors cannot message their scheduler on mesoslike yet")
        print("pymesos executor: sendFrameworkMessage is not supported on mesoslike; message dropped",
              file=sys.stderr, flush=True)
        return self._status

    # -------------------------------------------------------------- helpers
    def _launch(self) -> None:
        try:
            self.executor.registered(self, self._dict_cls(self.executor_info), self._dict_cls(self.framework_info),
                                     self._dict_cls(self.agent_info))
            self.executor.launchTask(self, self._dict_cls(self.task))
        except Exception as exc:  # noqa: BLE001 (a user callback: report it, end the task FAILED)
            log.exception("the executor's launch raised")
            self._report_error(f"executor raised {type(exc).__name__}: {exc}")
            self.sendStatusUpdate({"task_id": {"value": self.task_id}, "state": TaskState.FAILED,
                                   "message": f"the executor raised {type(exc).__name__}: {exc}"})

    def _on_sigterm(self, signum: int, frame: object) -> None:
        # the agent kills the task: let the executor stop it (on a thread: not in a signal handler)
        def kill() -> None:
            try:
                self.executor.killTask(self, self._dict_cls({"value": self.task_id}))
            except Exception as exc:  # noqa: BLE001 (a user callback)
                self._report_error(f"killTask raised {type(exc).__name__}: {exc}")
        threading.Thread(target=kill, name="pymesos-executor-kill", daemon=True).start()

    def _report_error(self, message: str) -> None:
        try:
            self.executor.error(self, message)
        except Exception:  # noqa: BLE001 (a user callback: only logged)
            log.exception("the executor's error callback raised")

    def _end(self, status: DriverStatus) -> DriverStatus:
        with self._lock:
            if self._status is DriverStatus.RUNNING or self._status is DriverStatus.NOT_STARTED:
                self._status = status
        self._ended.set()
        return self._status

    def _shutdown(self) -> None:
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
            if self._status is DriverStatus.RUNNING:
                self._status = DriverStatus.STOPPED
        try:
            self.executor.shutdown(self)
        except Exception as exc:  # noqa: BLE001 (a user callback)
            self._report_error(f"shutdown raised {type(exc).__name__}: {exc}")

    def _force_exit(self, code: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit_process(code)
