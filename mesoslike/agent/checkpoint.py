"""The agent's checkpoints: what a restarted agent reads to recover.

Everything lives in ``<work_dir>/meta`` (Mesos's ``meta`` directory):

=====================================  =========================================================
``meta/agent.lock``                    held (``flock``) by the agent running on this work dir:
                                       a second agent on it is refused
``meta/agent.pid``                     the running agent's pid and start time (JSON, written by
                                       the executor): the supervisors watch it for
                                       ``--recovery-timeout``
``meta/agent.ckpt``                    the agent's id (:class:`AgentFile`)
``meta/tasks/<framework>/<task>/``     a task's *run directory*: ``task.ckpt`` (the core's
                                       :class:`~mesoslike.agent.core.TaskCheckpoint`: the task,
                                       its state, its unacknowledged updates) beside the files
                                       its supervisor keeps (:mod:`.supervisor`)
=====================================  =========================================================

The ``.ckpt`` files are messages of their own small protocol on the wire
machinery (:data:`SCHEMA`, :data:`CODEC`: MessagePack, versioned, every field
checked), each written whole — temp file, fsync, rename, fsync of the
directory — so a crash leaves the old version or the new one. A file that
does not decode (truncated, corrupt, from an incompatible version) raises
:class:`CheckpointError` naming it; recovery reports it and goes on with the
other tasks.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import ClassVar, TextIO, TypeVar

import attrs

from mesoslike.agent.core import TaskCheckpoint
from mesoslike.agent.executor import run_dir_path
from mesoslike.agent.supervisor import write_atomically
from mesoslike.errors import ConfigError, MesoslikeError
from mesoslike.wire.codec import Codec, WireError
from mesoslike.wire.schema import Schema

__all__ = ["CheckpointStore", "CheckpointError", "AgentFile", "TaskFile", "SCHEMA", "CODEC", "TASK_CHECKPOINT"]

#: the checkpoint files' protocol (its own version: bump it on an incompatible change)
SCHEMA = Schema("agent checkpoint", 1)
TASK_CHECKPOINT = "task.ckpt"
AGENT_CHECKPOINT = "agent.ckpt"
AGENT_LOCK = "agent.lock"


@SCHEMA.message
@attrs.frozen
class AgentFile:
    """``meta/agent.ckpt``: who this agent is."""

    TYPE: ClassVar[str] = "AGENT"
    agent_id: str
    hostname: str


@SCHEMA.message
@attrs.frozen
class TaskFile:
    """``meta/tasks/<framework>/<task>/task.ckpt``."""

    TYPE: ClassVar[str] = "TASK"
    task: TaskCheckpoint


CODEC = Codec(SCHEMA, max_message_size=64 * 1024 * 1024)
R = TypeVar("R")


class CheckpointError(MesoslikeError):
    """A checkpoint file that cannot be read; ``path`` names it."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"checkpoint {path}: {problem}")
        self.path = path
        self.problem = problem


class CheckpointStore:
    """The ``meta`` directory of one agent's work dir (see the module doc).
    Writes raise OSError (a full disk, say); reads raise :class:`CheckpointError`."""

    def __init__(self, work_dir: str | os.PathLike) -> None:
        self.meta = Path(work_dir) / "meta"
        self.tasks_dir = self.meta / "tasks"
        self._lock: TextIO | None = None

    # ----------------------------------------------------------- the agent
    def lock(self) -> None:
        """Take the work dir for this process; :class:`ConfigError` if another
        agent runs on it. Held until :meth:`unlock` or the process ends."""
        self.tasks_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.meta / AGENT_LOCK, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ConfigError(f"another agent ({holder}) runs on the work directory {self.meta.parent}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._lock = handle

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing releases the flock
            self._lock = None

    def load_agent(self) -> AgentFile | None:
        """The checkpointed agent, None if there is none."""
        path = self.meta / AGENT_CHECKPOINT
        if not path.exists():
            return None
        return self._decode(path, AgentFile)

    def save_agent(self, agent_id: str, hostname: str) -> None:
        """Persist the agent's id; "" forgets it (the next start registers anew)."""
        path = self.meta / AGENT_CHECKPOINT
        if not agent_id:
            path.unlink(missing_ok=True)
            return
        self.meta.mkdir(parents=True, exist_ok=True)
        write_atomically(str(path), CODEC.encode(AgentFile(agent_id, hostname)))

    # ------------------------------------------------------------- tasks
    def run_dir(self, framework_id: str, task_id: str) -> Path:
        """``meta/tasks/<framework>/<task>`` (ids made safe as for sandboxes)."""
        return run_dir_path(self.meta.parent, framework_id, task_id)

    def save_task(self, checkpoint: TaskCheckpoint) -> None:
        directory = self.run_dir(checkpoint.framework.id, checkpoint.task.task_id)
        directory.mkdir(parents=True, exist_ok=True)
        write_atomically(str(directory / TASK_CHECKPOINT), CODEC.encode(TaskFile(checkpoint)))

    def run_dirs(self) -> list[Path]:
        """Every task's run directory, in a stable order."""
        if not self.tasks_dir.is_dir():
            return []
        return sorted(task for framework in self.tasks_dir.iterdir() if framework.is_dir()
                      for task in framework.iterdir() if task.is_dir())

    def load_task(self, run_dir: Path) -> TaskCheckpoint:
        """The task checkpointed in ``run_dir``; :class:`CheckpointError` if
        it is missing or unreadable."""
        path = run_dir / TASK_CHECKPOINT
        record = self._decode(path, TaskFile)
        expected = self.run_dir(record.task.framework.id, record.task.task.task_id)
        if expected != run_dir:
            raise CheckpointError(path, f"holds task {record.task.framework.id}/{record.task.task.task_id}, "
                                        f"which belongs in {expected}")
        return record.task

    def remove_run(self, run_dir: Path) -> None:
        """Remove a task's run directory (and its framework's, once empty)."""
        shutil.rmtree(run_dir, ignore_errors=True)
        try:
            run_dir.parent.rmdir()
        except OSError:
            pass  # other tasks of the framework, or gone already

    def clear(self) -> None:
        """Forget everything (``--recover cleanup``, a drained agent): the
        agent id and every task's run directory."""
        self.save_agent("", "")
        shutil.rmtree(self.tasks_dir, ignore_errors=True)

    def _decode(self, path: Path, kind: type[R]) -> R:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CheckpointError(path, f"cannot be read: {exc.strerror or exc}") from None
        if not data:
            raise CheckpointError(path, "is empty (truncated)")
        try:
            record = CODEC.decode(data)
        except WireError as exc:
            raise CheckpointError(path, f"is corrupt or truncated ({exc})") from None
        if not isinstance(record, kind):
            raise CheckpointError(path, f"holds a {getattr(record, 'TYPE', '?')} record, not "
                                        f"{getattr(kind, 'TYPE', kind.__name__)}")
        return record

