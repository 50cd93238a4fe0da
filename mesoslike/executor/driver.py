"""The executor driver: the imperative shell around
:class:`~mesoslike.executor.core.ExecutorCore` (docs/framework-api.rst,
"Custom executors"), and the :class:`Executor` interface users implement,
whose callbacks it calls (each names the other, so they live together, as
mesos.interface's and pymesos's interfaces do).

Every callback of an :class:`Executor` receives the driver first. The
driver calls them one at a time, in the order the events happened, on its
own thread. The defaults do nothing, except :meth:`Executor.error`, which
logs. An exception raised in a callback is logged and reported through
:meth:`Executor.error`; it never ends the executor.

A process the agent started for a custom executor creates one
``ExecutorDriver(MyExecutor())`` and runs it. The driver finds the agent's
executor channel in the environment the agent gave it
(``MESOSLIKE_EXECUTOR_ENDPOINT``) and its own secret in the file
``MESOSLIKE_EXECUTOR_SECRET_FILE`` names (relative to the sandbox,
``MESOS_SANDBOX``; mode 0400, the executor's user's: an environment would be
readable through ``/proc`` by the user's other processes), connects,
registers, and calls the executor's callbacks on its own thread. Its calls
(:meth:`ExecutorDriver.send_status_update`,
:meth:`ExecutorDriver.send_framework_message`, :meth:`ExecutorDriver.stop`)
are safe from any thread, callbacks included.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import uuid
from typing import Callable, Mapping

from mesoslike.clock import SystemClock
from mesoslike.driver.driver import DriverStatus
from mesoslike.errors import ConfigError
from mesoslike.executor.core import ExecutorCommand, ExecutorCore, InvokeCallback, SendToAgent, Stop
from mesoslike.transport import Client, Waker
from mesoslike.wire import WireError
from mesoslike.wire import executor_messages as x
from mesoslike.wire.codec import sized
from mesoslike.wire.types import (MAX_FRAMEWORK_MESSAGE, AgentInfo, ExecutorInfo, FrameworkInfo, TaskInfo,
                                  TaskStatus, check_message_size)

__all__ = ["Executor", "ExecutorDriver"]

log = logging.getLogger("mesoslike.executor")

#: the longest wait between attempts to reach an agent that is away (s)
RECONNECT_MAX = 0.5
#: the longest the loop sleeps without looking at the connection (s)
LOOP_INTERVAL = 0.25
#: how long a stopping driver waits for the agent to have the updates sent before it (s)
STOP_FLUSH_TIMEOUT = 5.0


def _secret(env: Mapping[str, str]) -> str:
    """The executor's secret: from the file the agent wrote (its path
    relative to the sandbox), else from an environment made by hand
    (``MESOSLIKE_EXECUTOR_SECRET``: the agent never sets it)."""
    name = env.get(x.SECRET_FILE_ENV, "")
    if not name:
        return env.get(x.SECRET_ENV, "")
    # below the sandbox: by its absolute path, or — where the directories above it are closed to the
    # executor's user — from the working directory it was started in, the sandbox
    sandbox = env.get("MESOS_SANDBOX") or env.get("MESOSLIKE_SANDBOX") or ""
    problem: Exception | None = None
    for path in dict.fromkeys((os.path.join(sandbox, name), name) if sandbox else (name,)):
        try:
            with open(path, encoding="ascii") as source:
                return source.read().strip()
        except (OSError, ValueError) as exc:
            problem = problem or exc
    raise ConfigError(f"cannot read the executor's secret {name} ({x.SECRET_FILE_ENV}): {problem}")


def _max_message_size(env: Mapping[str, str]) -> int:
    """The agent's ``--max-message-size`` (as it told its executor); the default without it."""
    text = env.get(x.MAX_MESSAGE_SIZE_ENV, "")
    try:
        return check_message_size(int(text)) if text else MAX_FRAMEWORK_MESSAGE
    except ValueError as exc:
        raise ConfigError(f"{x.MAX_MESSAGE_SIZE_ENV}={text[:40]!r}: {exc}") from None


class Executor:
    """Override the callbacks your executor needs; the rest are no-ops."""

    def registered(self, driver: ExecutorDriver, executor_info: ExecutorInfo, framework_info: FrameworkInfo,
                   agent_info: AgentInfo) -> None:
        """The agent that started this process took it: who it is
        (``executor_info``), for which framework, on which agent."""

    def reregistered(self, driver: ExecutorDriver, agent_info: AgentInfo) -> None:
        """The connection to the agent was made again (the agent restarted
        and recovered this executor, or the channel broke and healed).
        Updates not yet acknowledged are sent again by the driver."""

    def disconnected(self, driver: ExecutorDriver) -> None:
        """The connection to the agent dropped (the agent stopped or
        restarted); the driver is reconnecting. Tasks run on; calls made
        meanwhile are sent once the agent is back."""

    def launch_task(self, driver: ExecutorDriver, task: TaskInfo) -> None:
        """Run ``task`` (handed to this executor by the agent). Report its
        progress with :meth:`ExecutorDriver.send_status_update` — at least a
        terminal state. Do not block here for long: the driver calls the
        callbacks one at a time."""

    def kill_task(self, driver: ExecutorDriver, task_id: str) -> None:
        """The framework (or the agent) wants the task killed: end it and
        send its terminal update (TASK_KILLED)."""

    def framework_message(self, driver: ExecutorDriver, data: bytes) -> None:
        """Data the scheduler sent with ``SchedulerDriver.send_framework_message``."""

    def shutdown(self, driver: ExecutorDriver) -> None:
        """The framework was torn down (or the agent is stopping): end the
        tasks. The driver stops after this callback returns; the agent kills
        the process after the executor's ``shutdown_grace_period``."""

    def error(self, driver: ExecutorDriver, message: str) -> None:
        """The agent refused something this executor sent, or a callback raised."""
        log.error("executor error: %s", message)


class ExecutorDriver:
    """Connects an :class:`~mesoslike.executor.Executor` to the agent that
    started this process. ``environment`` (default ``os.environ``) must hold
    what the agent put there; without it :class:`ConfigError` says the
    process was not started by an agent for a custom executor."""

    def __init__(self, executor: Executor, environment: Mapping[str, str] | None = None) -> None:
        env = os.environ if environment is None else environment
        endpoint, secret = env.get(x.ENDPOINT_ENV, ""), _secret(env)
        if not endpoint or not secret:
            raise ConfigError(f"{x.ENDPOINT_ENV} and {x.SECRET_FILE_ENV} are not set: an ExecutorDriver runs in a "
                              "process a mesoslike agent started for a task's ExecutorInfo")
        self.executor = executor
        self.endpoint = endpoint
        self.executor_id = env.get(x.EXECUTOR_ID_ENV, "")
        max_size = _max_message_size(env)
        self._core = ExecutorCore(secret, SystemClock(), lambda: str(uuid.uuid4()), max_size)
        self._codec = sized(x.EXECUTOR_CODEC, max_size)
        self._status = DriverStatus.NOT_STARTED
        self._lock = threading.Lock()
        self._inbox: collections.deque[Callable[[], list[ExecutorCommand]]] = collections.deque()
        self._waker: Waker | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._client: Client | None = None

    # ------------------------------------------------------------ properties
    @property
    def status(self) -> DriverStatus:
        return self._status

    @property
    def registered(self) -> bool:
        """True while the agent has this executor registered on the current connection."""
        return self._core.registered

    @property
    def executor_info(self) -> ExecutorInfo | None:
        return self._core.executor_info

    @property
    def framework_info(self) -> FrameworkInfo | None:
        return self._core.framework_info

    @property
    def agent_info(self) -> AgentInfo | None:
        return self._core.agent_info

    # ------------------------------------------------------------- lifecycle
    def start(self) -> DriverStatus:
        """Start the driver thread, which connects and registers."""
        with self._lock:
            if self._status is not DriverStatus.NOT_STARTED:
                return self._status
            self._waker = Waker()
            self._status = DriverStatus.RUNNING
            self._thread = threading.Thread(target=self._run_loop, daemon=True, name="mesoslike-executor-driver")
            self._thread.start()
        return DriverStatus.RUNNING

    def join(self, timeout: float | None = None) -> DriverStatus:
        """Wait until the driver stops (or ``timeout`` seconds pass)."""
        if self._thread is not None and threading.current_thread() is self._thread:
            raise RuntimeError("join() inside an executor callback would wait for itself; call stop() and return")
        if self._thread is not None:
            self._thread.join(timeout)
        return self._status

    def run(self) -> DriverStatus:
        """``start()`` then ``join()``."""
        status = self.start()
        return self.join() if status is DriverStatus.RUNNING else status

    def stop(self) -> DriverStatus:
        """Stop the driver; the process should then exit, which ends its
        tasks that have not ended TASK_FAILED. The updates sent before are
        delivered first: the driver's thread waits for the agent to have
        them (at most :data:`STOP_FLUSH_TIMEOUT`), and ``stop()`` from
        another thread waits for that, so ``send_status_update(FINISHED);
        stop(); exit`` loses nothing. Safe from a callback (it does not
        wait there: ``join()`` in the main thread does)."""
        status = self._end(DriverStatus.STOPPED)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_FLUSH_TIMEOUT + 5.0)
        return status

    def abort(self) -> DriverStatus:
        """Stop the driver; the status becomes DRIVER_ABORTED."""
        return self._end(DriverStatus.ABORTED)

    def _end(self, status: DriverStatus) -> DriverStatus:
        with self._lock:
            if self._status is not DriverStatus.RUNNING:
                if self._status is DriverStatus.NOT_STARTED:
                    self._status = status
                return self._status
            self._status = status
            self._stopping = True
            if self._waker is not None:
                self._waker.wake()
        return status

    # ----------------------------------------------------------------- calls
    def send_status_update(self, status: TaskStatus) -> DriverStatus:
        """Report a task's state (``task_id``, ``state``, and optionally
        ``message``, ``reason``, ``healthy``). Reliable: kept and sent again
        until the agent has it on disk, across reconnections, and after a
        backoff when the agent refuses it for now; a task's updates go out in
        order (docs/framework-api.rst, "Refused and unanswered updates")."""
        if not isinstance(status, TaskStatus):
            raise TypeError(f"send_status_update takes a TaskStatus, got {type(status).__name__}")
        self._core.check_data(status.data, "a status update's data")   # here, in the caller's thread
        return self._call(lambda: self._core.send_status_update(status))

    def send_framework_message(self, data: bytes) -> DriverStatus:
        """Send ``data`` (at most the agent's ``--max-message-size``, 64 MiB by default) to
        the scheduler's ``executor_message`` callback (by default its
        ``framework_message``). Best effort, as in Mesos: a message sent
        while no master leads is dropped. More data: ValueError."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"framework message data must be bytes, got {type(data).__name__}")
        self._core.send_framework_message(data)   # checks the size here, in the caller's thread
        payload = bytes(data)
        return self._call(lambda: self._core.send_framework_message(payload))

    def _call(self, action: Callable[[], list[ExecutorCommand]]) -> DriverStatus:
        with self._lock:
            if self._status is not DriverStatus.RUNNING:
                return self._status
            self._inbox.append(action)
            if self._waker is not None and threading.current_thread() is not self._thread:
                self._waker.wake()
        return DriverStatus.RUNNING

    # ------------------------------------------------------------------ loop
    def _run_loop(self) -> None:
        try:
            self._loop()
        except Exception:
            log.exception("the executor driver crashed")
            with self._lock:
                self._status = DriverStatus.ABORTED
        finally:
            with self._lock:
                waker, self._waker = self._waker, None
            if waker is not None:
                waker.close()

    def _loop(self) -> None:
        assert self._waker is not None
        waker = self._waker
        client = self._client = Client(self.endpoint, codec=self._codec, watch_connection=True,
                                       reconnect_max=RECONNECT_MAX)
        try:
            while not self._stopping:
                if client.connections():
                    self._carry_out(client, self._core.on_connected())
                self._carry_out(client, self._core.tick())
                self._run_inbox(client)
                if self._stopping:
                    break
                wakeup = self._core.next_wakeup()
                timeout = LOOP_INTERVAL if wakeup is None else max(0.0, min(LOOP_INTERVAL, wakeup - self._core.clock.now()))
                client.wait(timeout, waker)
                for _, message in client.receive():
                    if isinstance(message, WireError):
                        log.warning("bad frame from the agent skipped: %s", message)
                        continue
                    self._carry_out(client, self._core.on_message(message))
                    if self._stopping:
                        break
            self._run_inbox(client)   # what the last callbacks sent (a terminal update) goes out
            if self._status is DriverStatus.STOPPED:
                self._flush(client, waker)
        finally:
            client.close(linger=2.0)
            self._client = None

    def _flush(self, client: Client, waker: Waker) -> None:
        """Stopping: until the agent has every update sent (or
        :data:`STOP_FLUSH_TIMEOUT` passes), go on sending and resending them
        and taking the agent's answers; no callback runs any more."""
        deadline = self._core.clock.now() + STOP_FLUSH_TIMEOUT
        while self._core.pending_updates:
            now = self._core.clock.now()
            if now >= deadline:
                log.warning("stopped with %d status updates the agent has not confirmed",
                            len(self._core.pending_updates))
                return
            if client.connections():
                self._send_only(client, self._core.on_connected())
            self._send_only(client, self._core.tick())
            wakeup = self._core.next_wakeup()
            client.wait(max(0.0, min(LOOP_INTERVAL, deadline - now, (wakeup or now + LOOP_INTERVAL) - now)), waker)
            for _, message in client.receive():
                if not isinstance(message, WireError):
                    self._send_only(client, self._core.on_message(message))

    def _send_only(self, client: Client, commands: list[ExecutorCommand]) -> None:
        self._carry_out(client, [command for command in commands if isinstance(command, SendToAgent)])

    def _run_inbox(self, client: Client) -> None:
        while True:
            with self._lock:
                if not self._inbox:
                    return
                action = self._inbox.popleft()
            self._carry_out(client, action())

    def _carry_out(self, client: Client, commands: list[ExecutorCommand]) -> None:
        for command in commands:
            if isinstance(command, SendToAgent):
                try:
                    client.send(command.message)
                except WireError as exc:
                    log.error("cannot send %s to the agent: %s", getattr(command.message, "TYPE", command), exc)
            elif isinstance(command, InvokeCallback):
                self._invoke(command)
                self._run_inbox(client)   # calls made by the callback go out before the next event
            elif isinstance(command, Stop):
                self._end(DriverStatus.STOPPED)

    def _invoke(self, command: InvokeCallback) -> None:
        callback = getattr(self.executor, command.name)
        try:
            callback(self, *command.args)
        except Exception as exc:  # a user's bug must not end the executor
            log.exception("executor callback %s raised", command.name)
            if command.name != "error":
                try:
                    self.executor.error(self, f"callback {command.name} raised {type(exc).__name__}: {exc}")
                except Exception:
                    log.exception("executor callback error raised")
