"""The executor protocol: the messages between an agent and the custom
executors it runs (docs/wire.rst, "The executor channel"), version
:data:`EXECUTOR_PROTOCOL_VERSION`, with its own codec :data:`EXECUTOR_CODEC`.

The channel is a Unix socket (ZeroMQ ``ipc://``) of the agent, reachable
only by its user (or, with ``--switch-user``, by anyone who knows an
executor's secret). Every frame an executor sends carries the random
``secret`` the agent gave that executor's process as a file of its sandbox
(mode 0400, the executor's user's; ``MESOSLIKE_EXECUTOR_SECRET_FILE`` names
it — never in an environment another process of the user could read): the
agent learns *which* executor speaks from the secret alone, never from an
id in a message.

- executor -> agent: REGISTER_EXECUTOR (first, and again after a
  reconnection: ``tasks`` are those it still runs), EXECUTOR_STATUS
  (a task's update; acknowledged once the agent has it on disk; resent by
  the executor until then), EXECUTOR_MESSAGE (data for its scheduler);
- agent -> executor: EXECUTOR_REGISTERED, LAUNCH_EXECUTOR_TASK,
  KILL_EXECUTOR_TASK, EXECUTOR_FRAMEWORK_MESSAGE (data from its scheduler),
  EXECUTOR_STATUS_ACK, SHUTDOWN_EXECUTOR, EXECUTOR_ERROR.

Pure: no I/O.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from mesoslike.wire.codec import Codec, frame_limit
from mesoslike.wire.schema import Schema, check_length
from mesoslike.wire.types import (MAX_FRAMEWORK_MESSAGE, MAX_MESSAGE_SIZE_CEILING, AgentInfo, ExecutorInfo,
                                  FrameworkInfo, TaskInfo, TaskStatus)

__all__ = ["EXECUTOR_PROTOCOL_VERSION", "EXECUTOR_SCHEMA", "EXECUTOR_CODEC", "MAX_EXECUTOR_FRAME", "SECRET_LENGTH",
           "MAX_REPORTED_TASKS", "RegisterExecutor", "ExecutorStatus", "ExecutorMessage", "ExecutorRegistered",
           "LaunchExecutorTask", "KillExecutorTask", "ExecutorFrameworkMessage", "ExecutorStatusAck",
           "ShutdownExecutor", "ExecutorError", "EXECUTOR_TO_AGENT", "ENDPOINT_ENV",
           "MAX_MESSAGE_SIZE_ENV", "SECRET_ENV", "SECRET_FILE_ENV", "SECRET_FILE",
           "EXECUTOR_ID_ENV"]

EXECUTOR_PROTOCOL_VERSION = 1
EXECUTOR_SCHEMA = Schema("executor", EXECUTOR_PROTOCOL_VERSION)
#: the largest frame either way, by default: a framework message's data and room for the rest (an agent
#: with another --max-message-size sizes its channel's codec to it: mesoslike.wire.codec.sized)
MAX_EXECUTOR_FRAME = frame_limit(MAX_FRAMEWORK_MESSAGE)
#: characters of an executor's secret (hex of 32 random bytes)
SECRET_LENGTH = 64
#: task ids one REGISTER_EXECUTOR may list
MAX_REPORTED_TASKS = 100_000


class _Message(msgspec.Struct, frozen=True, gc=False):
    """The base of the channel's messages: frozen ``msgspec.Struct`` types
    (attrs classes before), built, encoded and decoded in C, their checks in
    ``__post_init__`` (run at construction and on decoding alike). Each
    writes every field: the frames are the maps the attrs classes wrote (the
    keys of a message of several fields in their declared order, where
    msgspec wrote an attrs object's sorted: a decoder reads either)."""


# ------------------------------------------------------ executor -> agent
@EXECUTOR_SCHEMA.message
class RegisterExecutor(_Message, frozen=True, gc=False):
    """The executor is here (again, after a reconnection: ``tasks`` lists
    the ids of the tasks it still runs, so a recovered agent hands it those
    it never had)."""

    TYPE: ClassVar[str] = "REGISTER_EXECUTOR"
    secret: str
    tasks: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        check_length(self.secret, "secret", SECRET_LENGTH)
        check_length(self.tasks, "tasks", MAX_REPORTED_TASKS)


@EXECUTOR_SCHEMA.message
class ExecutorStatus(_Message, frozen=True, gc=False):
    """A task's status update from its executor. The agent takes from it
    ``task_id``, ``state``, ``message``, ``reason`` and ``healthy`` (the
    rest is the agent's to say) and acknowledges ``status.uuid``."""

    TYPE: ClassVar[str] = "EXECUTOR_STATUS"
    secret: str
    status: TaskStatus

    def __post_init__(self) -> None:
        check_length(self.secret, "secret", SECRET_LENGTH)


@EXECUTOR_SCHEMA.message
class ExecutorMessage(_Message, frozen=True, gc=False):
    """Data for the executor's scheduler (its ``framework_message`` callback)."""

    TYPE: ClassVar[str] = "EXECUTOR_MESSAGE"
    secret: str
    data: bytes

    def __post_init__(self) -> None:
        check_length(self.secret, "secret", SECRET_LENGTH)
        check_length(self.data, "data", MAX_MESSAGE_SIZE_CEILING)   # (the codec's frame limit is the bound)


#: the messages an agent takes on its executor channel
EXECUTOR_TO_AGENT = (RegisterExecutor, ExecutorStatus, ExecutorMessage)


# ------------------------------------------------------ agent -> executor
@EXECUTOR_SCHEMA.message
class ExecutorRegistered(_Message, frozen=True, gc=False):
    """The answer to REGISTER_EXECUTOR: who the executor is, for whom, where."""

    TYPE: ClassVar[str] = "EXECUTOR_REGISTERED"
    executor: ExecutorInfo
    framework: FrameworkInfo
    agent: AgentInfo
    reregistered: bool = False


@EXECUTOR_SCHEMA.message
class LaunchExecutorTask(_Message, frozen=True, gc=False):
    TYPE: ClassVar[str] = "LAUNCH_EXECUTOR_TASK"
    task: TaskInfo


@EXECUTOR_SCHEMA.message
class KillExecutorTask(_Message, frozen=True, gc=False):
    TYPE: ClassVar[str] = "KILL_EXECUTOR_TASK"
    task_id: str


@EXECUTOR_SCHEMA.message
class ExecutorFrameworkMessage(_Message, frozen=True, gc=False):
    TYPE: ClassVar[str] = "EXECUTOR_FRAMEWORK_MESSAGE"
    data: bytes

    def __post_init__(self) -> None:
        check_length(self.data, "data", MAX_MESSAGE_SIZE_CEILING)   # (the codec's frame limit is the bound)


@EXECUTOR_SCHEMA.message
class ExecutorStatusAck(_Message, frozen=True, gc=False):
    TYPE: ClassVar[str] = "EXECUTOR_STATUS_ACK"
    task_id: str
    uuid: str


@EXECUTOR_SCHEMA.message
class ShutdownExecutor(_Message, frozen=True, gc=False):
    """End: kill the tasks and exit (the framework was torn down). The agent
    kills the process after the executor's ``shutdown_grace_period``."""

    TYPE: ClassVar[str] = "SHUTDOWN_EXECUTOR"


@EXECUTOR_SCHEMA.message
class ExecutorError(_Message, frozen=True, gc=False):
    """A frame the agent refused (bad secret, bad update), in words. A
    refused EXECUTOR_STATUS is named by its ``uuid`` (empty for other
    frames, and from agents older than the field); ``retry`` says the agent
    may take it later (a task with too many updates the master has not
    acknowledged): the executor sends it again after a backoff. An update
    refused without ``retry`` will never be taken."""

    TYPE: ClassVar[str] = "EXECUTOR_ERROR"
    message: str
    uuid: str = ""
    retry: bool = False


EXECUTOR_CODEC = Codec(EXECUTOR_SCHEMA, max_message_size=MAX_EXECUTOR_FRAME)

# ---------------------------------------------- the executor's environment
#: the agent's executor channel (``ipc://PATH``), in the executor's environment
ENDPOINT_ENV = "MESOSLIKE_EXECUTOR_ENDPOINT"
#: the file holding the executor's secret (every frame it sends carries it): a path relative to the
#: sandbox (``MESOS_SANDBOX``), in the executor's environment
SECRET_FILE_ENV = "MESOSLIKE_EXECUTOR_SECRET_FILE"
#: where the agent writes that file in the executor's sandbox (mode 0400, the executor's user's)
SECRET_FILE = ".executor_secret"
#: the secret itself: read by an ExecutorDriver given it (an environment of its own making); the agent
#: never sets it (an environment is readable through /proc by the user's other processes)
SECRET_ENV = "MESOSLIKE_EXECUTOR_SECRET"
#: its executor id (informative: the agent goes by the secret)
EXECUTOR_ID_ENV = "MESOSLIKE_EXECUTOR_ID"
#: the agent's --max-message-size: bytes of data a framework message or a status update may carry
MAX_MESSAGE_SIZE_ENV = "MESOSLIKE_MAX_MESSAGE_SIZE"
