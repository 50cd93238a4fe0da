"""The executor book: the custom executors an agent runs — each one's
process (a supervised run of id ``ExecutorInfo.run_id()``), its secret, its
connection on the executor channel and its timers — and the decisions that
are theirs alone (sans I/O).

It guards what the agent core leans on when a frame arrives on the executor
channel or a run's process starts or ends (:meth:`ExecutorBook._check`):

- an executor is known by the sha256 of its secret, one executor per digest
  and one digest per executor: a frame's secret names its executor, never a
  field of the frame (``hmac.compare_digest``);
- an executor in the book has not ended (its end takes it out);
- an executor orphaned by a SHUTDOWN_AGENT has no connection: it gets no
  frame, only its end is waited for;
- the executors counted per framework are those in the book (the bound
  :data:`MAX_EXECUTORS_PER_FRAMEWORK` is checked on the count).

What it decides: whether a frame is refused (an unknown secret, a frame an
executor does not send, data over ``--max-message-size``), the run a new
executor starts as (its environment, its secret as a file), when a started
executor must have registered and a recovered one reconnected
(``--executor-registration-timeout``, ``--executor-reregistration-timeout``),
its shutdown (SHUTDOWN_EXECUTOR, killed after its grace period) and kill,
and what is checkpointed of it. What ties executors to the tasks they run
(their tasks' launches, updates, kills and ends, the resources both hold)
is :class:`~mesoslike.agent.core.AgentCore`'s: it reads and changes the
task table and the update streams in the same step.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Callable

import attrs

from mesoslike.agent.commands import (Command, CheckpointTask, ForgetTask, KillTask, SendToExecutor, TaskCheckpoint,
                                      TaskKey)
from mesoslike.clock import Clock
from mesoslike.resources import Resources
from mesoslike.wire import executor_messages as x
from mesoslike.wire.types import (EXECUTOR_RUN_PREFIX, WARN_MESSAGE_SIZE, ContainerStatus, ExecutorInfo, FrameworkInfo,
                                  TaskInfo, TaskState, without_secret_values)

__all__ = [
    "ExecutorBook", "ExecutorRecord", "ExecutorPhase", "AgentExecutor", "SOURCE_EXECUTOR",
    "EXECUTOR_REREGISTER_TIMEOUT", "MAX_EXECUTOR_REREGISTER_TIMEOUT", "check_executor_timeout",
    "EXECUTOR_REGISTER_TIMEOUT", "EXECUTOR_STATES", "MAX_EXECUTOR_TEXT", "MAX_EXECUTOR_PENDING_UPDATES",
    "MAX_EXECUTORS_PER_FRAMEWORK", "REASON_EXECUTOR_REGISTRATION_TIMEOUT", "REASON_EXECUTOR_REREGISTRATION_TIMEOUT",
    "secret_digest", "executor_id_of_run",
]

log = logging.getLogger("mesoslike.agent")

#: an update a custom executor sent (docs/agent.rst, "Custom executors")
SOURCE_EXECUTOR = "SOURCE_EXECUTOR"
#: how long a recovered agent waits for a custom executor still running to
#: reconnect before it kills it (Mesos's --executor_reregistration_timeout)
EXECUTOR_REREGISTER_TIMEOUT = 10.0
#: the longest such wait (a day): tasks of an executor that never comes back must end
MAX_EXECUTOR_REREGISTER_TIMEOUT = 86_400.0
#: how long a custom executor's process has, once started, to register on the
#: executor channel before it is killed and its tasks fail (Mesos's
#: --executor_registration_timeout, default 1 min): a process that never
#: connects must not hold its tasks in TASK_STARTING and its resources forever
EXECUTOR_REGISTER_TIMEOUT = 60.0
#: the states an executor may report for its task
EXECUTOR_STATES = frozenset({TaskState.STARTING, TaskState.RUNNING, TaskState.KILLING, TaskState.FINISHED,
                             TaskState.FAILED, TaskState.KILLED, TaskState.ERROR})
#: characters of an executor's update message and reason the agent keeps
MAX_EXECUTOR_TEXT = 4096
#: a task's unacknowledged updates beyond which its executor's non-terminal ones are refused (a peer
#: that sends TASK_RUNNING in a loop while no master acknowledges must not grow the agent without bound)
MAX_EXECUTOR_PENDING_UPDATES = 100
#: custom executors one framework may run on one agent: an executor may hold no resources and outlives
#: its tasks, so without a bound a framework could leave an idle process (and the agent's record of it)
#: per executor id it ever named
MAX_EXECUTORS_PER_FRAMEWORK = 256
#: TASK_FAILED: the supervisor killed the task because no agent came back in time (--recovery-timeout),
#: or its custom executor did not reconnect to a restarted agent in time (--executor-reregistration-timeout)
REASON_EXECUTOR_REREGISTRATION_TIMEOUT = "REASON_EXECUTOR_REREGISTRATION_TIMEOUT"
#: TASK_FAILED: its custom executor did not register in time (--executor-registration-timeout)
REASON_EXECUTOR_REGISTRATION_TIMEOUT = "REASON_EXECUTOR_REGISTRATION_TIMEOUT"

EMPTY = Resources()


def check_executor_timeout(name: str, seconds: float) -> None:
    """ValueError naming ``name`` unless 0 < ``seconds`` <= a day (the
    executor registration and re-registration timeouts)."""
    if not 0 < seconds <= MAX_EXECUTOR_REREGISTER_TIMEOUT:
        raise ValueError(f"{name} must be more than 0 and at most {MAX_EXECUTOR_REREGISTER_TIMEOUT:g} s, "
                         f"got {seconds!r}")


def secret_digest(secret: str) -> str:
    """sha256 of an executor's secret: how its frames are known (only the
    digest is kept and checkpointed)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def executor_id_of_run(task_id: str) -> str | None:
    """The executor id of an executor's run id (None: a task's id)."""
    return task_id[len(EXECUTOR_RUN_PREFIX):] if task_id.startswith(EXECUTOR_RUN_PREFIX) else None


@attrs.frozen
class AgentExecutor:
    """A read-only view of a custom executor the agent runs (see :meth:`ExecutorBook.views`)."""

    framework_id: str
    executor_id: str
    resources: Resources
    pid: int | None
    registered: bool
    tasks: list[str]
    #: its ``ExecutorInfo.name`` ("" when it has none)
    name: str = ""


class ExecutorPhase:
    LAUNCHING = "launching"    # its run's LaunchTask emitted, no pid yet
    RECOVERING = "recovering"  # checkpointed by an earlier agent process: is it still there?
    RUNNING = "running"        # its process exists
    TERMINATED = "terminated"  # its process ended (it is out of the book then)


class ExecutorRecord:
    """A custom executor: its process (a supervised run of id
    ``info.run_id()``: ``run``), its connection and its live tasks."""

    __slots__ = ("framework", "info", "run", "digest", "secret", "phase", "pid", "peer", "tasks", "registered_once",
                 "shutdown_deadline", "reregister_deadline", "register_deadline", "killing", "orphaned", "end_reason",
                 "end_message", "limits", "released", "container_status")

    def __init__(self, framework: FrameworkInfo, run: TaskInfo, digest: str) -> None:
        assert run.executor is not None
        self.framework = framework
        self.info: ExecutorInfo = run.executor
        self.run = run
        self.digest = digest          # sha256 of its secret: how its frames are known
        #: the secret itself, in this agent process's memory only (never checkpointed, never in an
        #: environment): the v1 executor API builds the channel's frames with it; "" after a restart
        self.secret = ""
        self.phase = ExecutorPhase.LAUNCHING
        self.pid: int | None = None
        self.peer: bytes | None = None  # the connection it registered on
        self.tasks: set[str] = set()    # its tasks not ended yet
        self.registered_once = False
        self.shutdown_deadline: float | None = None   # SHUTDOWN_EXECUTOR sent: killed at this time
        self.reregister_deadline: float | None = None  # recovered: killed unless it reconnects by then
        self.register_deadline: float | None = None    # started: killed unless it registers by then
        self.killing = False
        self.orphaned = False         # after SHUTDOWN_AGENT: no messages, only its end to wait for
        self.end_reason = ""          # why its tasks fail when it ends (a limitation)
        self.end_message = ""
        self.limits: Resources | None = run.resources   # of its container as last set (None: not known)
        self.released = False         # its framework was shut down (see AgentCore.free)
        self.container_status: ContainerStatus | None = None   # its container: its tasks' updates carry it

    @property
    def key(self) -> TaskKey:
        return (self.framework.id, self.info.executor_id)

    @property
    def ended(self) -> bool:
        return self.phase == ExecutorPhase.TERMINATED


class ExecutorBook:
    """The custom executors by (framework id, executor id) (:attr:`records`),
    with the index by secret digest. Read the records freely; change
    membership only through the book. O(1) per frame and per operation on
    one executor; :meth:`deadlines` and :meth:`due` O(executors)."""

    def __init__(self, clock: Clock, *, checkpoint: bool, register_timeout: float, reregister_timeout: float,
                 endpoint: str, max_message_size: int, new_secret: Callable[[], str]) -> None:
        check_executor_timeout("executor_reregister_timeout", reregister_timeout)
        check_executor_timeout("executor_register_timeout", register_timeout)
        self.clock = clock
        #: emit CheckpointTask / ForgetTask for the executors' runs (the agent's --checkpoint)
        self.checkpoint = checkpoint
        self.register_timeout = register_timeout
        self.reregister_timeout = reregister_timeout
        #: the executor channel custom executors are told to connect to
        self.endpoint = endpoint
        self.max_message_size = max_message_size
        self._new_secret = new_secret
        self.records: dict[TaskKey, ExecutorRecord] = {}   # (framework_id, executor_id) -> executor
        self._by_digest: dict[str, TaskKey] = {}            # sha256 of its secret -> its key
        self._per_framework: dict[str, int] = {}

    # --------------------------------------------------------------- lookups
    def __len__(self) -> int:
        return len(self.records)

    def get(self, framework_id: str, executor_id: str) -> ExecutorRecord | None:
        return self.records.get((framework_id, executor_id))

    def of_run(self, framework_id: str, run_id: str) -> ExecutorRecord | None:
        """The executor whose run ``run_id`` is, if any."""
        executor_id = executor_id_of_run(run_id)
        return self.records.get((framework_id, executor_id)) if executor_id is not None else None

    def count(self, framework_id: str) -> int:
        """The framework's executors in the book (orphans included). O(1)."""
        return self._per_framework.get(framework_id, 0)

    def views(self) -> list[AgentExecutor]:
        """The custom executors whose processes run (or start)."""
        return [AgentExecutor(key[0], key[1], e.info.resources, e.pid, e.peer is not None, sorted(e.tasks),
                              e.info.name)
                for key, e in sorted(self.records.items()) if not e.orphaned]

    def recovering(self) -> list[TaskKey]:
        """(framework_id, run id) of the recovered executors not yet found running or ended."""
        return [(key[0], e.info.run_id()) for key, e in self.records.items() if e.phase == ExecutorPhase.RECOVERING]

    def checkpoint_of(self, framework_id: str, executor_id: str) -> TaskCheckpoint | None:
        """What to persist of an executor's run (a task of its run id); None if it is not known."""
        executor = self.get(framework_id, executor_id)
        if executor is None or executor.orphaned:
            return None
        state = TaskState.RUNNING if executor.phase == ExecutorPhase.RUNNING else TaskState.STAGING
        return TaskCheckpoint(executor.framework, without_secret_values(executor.run), state, [],
                              not executor.ended, executor.killing, executor_secret_digest=executor.digest)

    # ------------------------------------------------------------- identity
    def admit(self, peer: bytes, message: object) -> tuple[ExecutorRecord | None, list[Command]]:
        """Which executor sent a frame of the executor channel on connection
        ``peer`` — known from its secret alone — or the refusal to send back
        (an EXECUTOR_ERROR): a frame an executor does not send, an unknown
        secret, data over ``--max-message-size``. A frame other than
        REGISTER_EXECUTOR moves the executor to ``peer``."""
        if not isinstance(message, x.EXECUTOR_TO_AGENT):
            return None, [SendToExecutor(peer, x.ExecutorError(
                f"{getattr(message, 'TYPE', type(message).__name__)} is not a message an executor sends"))]
        digest = secret_digest(message.secret)
        key = self._by_digest.get(digest)
        executor = self.records.get(key) if key is not None else None
        if executor is None or not hmac.compare_digest(executor.digest, digest) or executor.orphaned:
            log.warning("executor channel: a %s with an unknown secret refused", message.TYPE)
            return None, [SendToExecutor(peer, x.ExecutorError("unknown executor secret: refused"))]
        if isinstance(message, x.RegisterExecutor):
            return executor, []
        executor.peer = peer   # its latest connection (the secret says it is this executor)
        data = message.status.data if isinstance(message, x.ExecutorStatus) else message.data
        if len(data) > self.max_message_size:
            what = "a status update's data" if isinstance(message, x.ExecutorStatus) else "a framework message"
            log.warning("executor %s/%r: %s of %d bytes refused (--max-message-size %d)", *executor.key, what,
                        len(data), self.max_message_size)
            return None, [SendToExecutor(peer, x.ExecutorError(
                f"{what} holds {len(data)} bytes; at most {self.max_message_size} (the agent's --max-message-size): "
                "refused", uuid=message.status.uuid if isinstance(message, x.ExecutorStatus) else ""))]
        if len(data) > WARN_MESSAGE_SIZE:
            log.warning("executor %s/%r sends %d bytes of data (more than %d)", *executor.key, len(data),
                        WARN_MESSAGE_SIZE)
        return executor, []

    def secret(self, framework_id: str, executor_id: str) -> str | None:
        """The secret of the framework's executor ``executor_id`` while its
        process runs or starts: "" while it is not known — a recovered
        executor's, until :meth:`restore_secret` — and None for no such executor."""
        executor = self.get(framework_id, executor_id)
        if executor is None or executor.orphaned or executor.ended:
            return None
        return executor.secret

    def restore_secret(self, framework_id: str, executor_id: str, secret: str) -> bool:
        """Give a recovered executor back its secret — only if its digest is
        the checkpointed one. True if it was."""
        executor = self.get(framework_id, executor_id)
        if executor is None or not secret or not hmac.compare_digest(secret_digest(secret), executor.digest):
            return False
        executor.secret = secret
        return True

    # ----------------------------------------------------------- membership
    def start(self, framework: FrameworkInfo, info: ExecutorInfo, user: str, agent_id: str, http_address: str,
              first_task: Resources = EMPTY) -> tuple[ExecutorRecord, str]:
        """A new executor's record, in the book, and the secret its process
        gets as a file (:data:`~mesoslike.wire.executor_messages.SECRET_FILE`):
        only its digest is kept (and checkpointed). Its container starts
        with room for its first task too (Mesos's launch, then update)."""
        secret = self._new_secret()
        environment = dict(info.environment)
        environment.update({x.ENDPOINT_ENV: self.endpoint, x.SECRET_FILE_ENV: x.SECRET_FILE,
                            x.EXECUTOR_ID_ENV: info.executor_id, x.MAX_MESSAGE_SIZE_ENV: str(self.max_message_size)})
        environment.update(self._mesos_environment(framework, info, agent_id, http_address))
        run = TaskInfo(info.run_id(), agent_id, info.command, info.resources + first_task,
                       name=info.name or info.executor_id,
                       environment=environment, kill_grace_period=info.shutdown_grace_period, user=user,
                       executor=info, environment_secrets=info.environment_secrets)
        return self.add(framework, run, secret_digest(secret), secret), secret

    def _mesos_environment(self, framework: FrameworkInfo, info: ExecutorInfo, agent_id: str,
                           http_address: str) -> dict[str, str]:
        """Mesos's variables of an executor, for v1 executors (pymesos's
        ``MesosExecutorDriver``): where the agent's executor API is
        (``MESOS_AGENT_ENDPOINT``, host:port, without an HTTP server none)
        and who the executor is."""
        environment = {"MESOS_FRAMEWORK_ID": framework.id, "MESOS_EXECUTOR_ID": info.executor_id,
                       "MESOS_AGENT_ID": agent_id, "MESOS_SLAVE_ID": agent_id,
                       "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": f"{info.shutdown_grace_period:g}secs"}
        # not MESOS_EXECUTOR_AUTHENTICATION_TOKEN: a secret in the environment is readable through
        # /proc (docs/containers.rst, "Secrets"); an executor that calls from elsewhere than the
        # agent's host sends the secret of its file (MESOSLIKE_EXECUTOR_SECRET_FILE) as its bearer token
        if http_address:
            environment["MESOS_AGENT_ENDPOINT"] = http_address.split("://", 1)[-1].rstrip("/")
        if self.checkpoint:   # the executor waits for a restarted agent (pymesos takes any value as true)
            environment["MESOS_CHECKPOINT"] = "1"
        return environment

    def add(self, framework: FrameworkInfo, run: TaskInfo, digest: str, secret: str = "") -> ExecutorRecord:
        executor = ExecutorRecord(framework, run, digest)
        executor.secret = secret
        self.records[executor.key] = executor
        self._by_digest[executor.digest] = executor.key
        self._per_framework[framework.id] = self._per_framework.get(framework.id, 0) + 1
        return executor

    def recover(self, checkpoint: TaskCheckpoint) -> tuple[ExecutorRecord | None, list[Command]]:
        """An executor's run an earlier agent process checkpointed: into the
        book, waiting to be found running or ended; or, ended or damaged,
        its checkpoint forgotten."""
        run = checkpoint.task
        # (an agent before secret files kept the secret in the executor's environment)
        old_secret = run.environment.get(x.SECRET_ENV, "")
        digest = checkpoint.executor_secret_digest or (secret_digest(old_secret) if old_secret else "")
        if run.executor is None or not digest or not checkpoint.holds_resources:
            return None, [ForgetTask(checkpoint.framework.id, run.task_id)]   # nothing to wait for
        executor = self.add(checkpoint.framework, run, digest)
        executor.limits = None   # as its last update set them: set again with the next change
        executor.phase = ExecutorPhase.RECOVERING
        executor.killing = checkpoint.killing
        return executor, []

    def remove(self, executor: ExecutorRecord) -> None:
        """The executor's process ended: out of the book."""
        executor.phase = ExecutorPhase.TERMINATED
        del self.records[executor.key]
        self._by_digest.pop(executor.digest, None)
        left = self._per_framework[executor.framework.id] - 1
        if left:
            self._per_framework[executor.framework.id] = left
        else:
            del self._per_framework[executor.framework.id]

    def orphan_all(self) -> list[Command]:
        """SHUTDOWN_AGENT: every executor is killed, its checkpoint forgotten;
        its end frees what it holds, nothing more."""
        out: list[Command] = []
        for key, executor in list(self.records.items()):
            out.extend(self.forget(executor))
            executor.orphaned = True
            executor.peer = None
            if not executor.killing and not executor.ended:
                executor.killing = True
                out.append(KillTask(key[0], executor.info.run_id(), 0.0))
        return out

    # -------------------------------------------------------- its process
    def started(self, framework_id: str, run_id: str, pid: int,
                container: ContainerStatus | None = None) -> list[Command]:
        """The executor's process exists (started, or still there after a
        restart): it has its timeout to register, or to reconnect."""
        executor = self.of_run(framework_id, run_id)
        if executor is None or executor.phase not in (ExecutorPhase.LAUNCHING, ExecutorPhase.RECOVERING):
            return []
        recovered = executor.phase == ExecutorPhase.RECOVERING
        executor.phase = ExecutorPhase.RUNNING
        executor.pid = pid
        executor.container_status = container
        log.info("executor %s/%s %s pid %d", *executor.key, "still runs as" if recovered else "started as", pid)
        if executor.killing or executor.orphaned:
            return [KillTask(framework_id, run_id, 0.0)]
        if recovered and executor.peer is None:
            executor.reregister_deadline = self.clock.now() + self.reregister_timeout
        elif not recovered and executor.peer is None:
            executor.register_deadline = self.clock.now() + self.register_timeout
        return self.checkpointed(executor)

    def limited(self, framework_id: str, run_id: str, reason: str, message: str) -> list[Command]:
        """The executor's container went over a limit: killed, its tasks fail with ``reason``."""
        executor = self.of_run(framework_id, run_id)
        if executor is None or executor.killing or executor.ended:
            return []
        executor.end_reason, executor.end_message = reason, message
        log.warning("executor %s/%s: %s", *executor.key, message)
        return self.kill(executor)

    def registered(self, executor: ExecutorRecord, peer: bytes) -> bool:
        """The executor (re)registered on ``peer``: its timers stop. True if
        it registered before (or was recovered): a re-registration."""
        again = executor.registered_once or executor.reregister_deadline is not None
        executor.peer = peer
        executor.registered_once = True
        executor.reregister_deadline = executor.register_deadline = None
        log.info("executor %s/%s %sregistered", *executor.key, "re" if again else "")
        return again

    def shut_down(self, executor: ExecutorRecord) -> list[Command]:
        """SHUTDOWN_EXECUTOR now, the process killed after its grace period."""
        if executor.shutdown_deadline is not None or executor.killing or executor.ended:
            return []
        executor.shutdown_deadline = self.clock.now() + executor.info.shutdown_grace_period
        log.info("shutting executor %s/%s down", *executor.key)
        return [SendToExecutor(executor.peer, x.ShutdownExecutor())] if executor.peer is not None else []

    def kill(self, executor: ExecutorRecord) -> list[Command]:
        executor.killing = True
        return [*self.checkpointed(executor), KillTask(executor.framework.id, executor.info.run_id(), 0.0)]

    def deadlines(self) -> list[float]:
        """When an executor's timer runs out (its shutdown's grace period, its registration, its reconnection)."""
        return [t for e in self.records.values() if not e.killing
                for t in (e.shutdown_deadline, e.reregister_deadline, e.register_deadline) if t is not None]

    def timeouts(self, now: float) -> list[Command]:
        """Kill the executors whose timer ran out: a shutdown's grace period,
        a registration or a reconnection that did not come (their tasks then
        fail with that reason)."""
        out: list[Command] = []
        for executor in list(self.records.values()):
            if executor.killing:
                continue
            if executor.shutdown_deadline is not None and now >= executor.shutdown_deadline:
                log.info("executor %s/%s did not end within its grace period: killing it", *executor.key)
            elif executor.reregister_deadline is not None and now >= executor.reregister_deadline:
                log.warning("executor %s/%s did not reconnect within %g s of the agent's restart: killing it",
                            *executor.key, self.reregister_timeout)
                executor.end_reason = REASON_EXECUTOR_REREGISTRATION_TIMEOUT
                executor.end_message = f"it did not reconnect within {self.reregister_timeout:g} s of " \
                                       "the agent's restart (--executor-reregistration-timeout)"
            elif executor.register_deadline is not None and now >= executor.register_deadline:
                log.warning("executor %s/%s did not register within %g s of its start: killing it",
                            *executor.key, self.register_timeout)
                executor.end_reason = REASON_EXECUTOR_REGISTRATION_TIMEOUT
                executor.end_message = f"it did not register within {self.register_timeout:g} s of its " \
                                       "start (--executor-registration-timeout)"
            else:
                continue
            out.extend(self.kill(executor))
        return out

    # -------------------------------------------------------- its channel
    def message_to(self, framework_id: str, executor_id: str, data: bytes) -> list[Command]:
        """A framework message for the executor, if it is registered and the data within the limit."""
        executor = self.get(framework_id, executor_id)
        if executor is None or executor.peer is None or executor.orphaned:
            log.warning("framework message for executor %s/%r dropped: no such registered executor",
                        framework_id, executor_id[:200])
            return []
        if len(data) > self.max_message_size:
            log.warning("framework message of %d bytes for executor %s/%r dropped: more than %d "
                        "(--max-message-size)", len(data), framework_id, executor_id[:200], self.max_message_size)
            return []
        return [SendToExecutor(executor.peer, x.ExecutorFrameworkMessage(data))]

    # --------------------------------------------------------- checkpoints
    def checkpointed(self, executor: ExecutorRecord) -> list[Command]:
        if not self.checkpoint or executor.orphaned:
            return []
        return [CheckpointTask(executor.framework.id, executor.info.run_id())]

    def forget(self, executor: ExecutorRecord) -> list[Command]:
        return [ForgetTask(executor.framework.id, executor.info.run_id())] if self.checkpoint else []

    # -------------------------------------------------------------- checks
    def _check(self) -> None:
        """Assert the book's invariants (the module docstring's); tests call it."""
        assert len(self._by_digest) == len(self.records), "one digest per executor"
        per_framework: dict[str, int] = {}
        for key, executor in self.records.items():
            assert key == executor.key, (key, executor.key)
            assert self._by_digest.get(executor.digest) == key, f"{key}: its digest does not name it"
            assert not executor.ended, f"{key}: ended, still in the book"
            assert not (executor.orphaned and executor.peer is not None), f"{key}: orphaned with a connection"
            per_framework[key[0]] = per_framework.get(key[0], 0) + 1
        assert per_framework == self._per_framework, (per_framework, self._per_framework)
