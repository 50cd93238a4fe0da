"""Tasks as real processes: the agent's process I/O.

Each task runs as ``["/bin/sh", "-c", command]`` in its own session and
process group (``start_new_session=True``), in a sandbox directory
``<work_dir>/sandboxes/<framework_id>/<task_id>/`` that holds its ``stdout``
and ``stderr`` files and the ``messages`` file framework messages are
appended to.

Killing a task signals its whole process group: SIGTERM, then SIGKILL once
the grace period has passed. When a task's leading process exits, whatever
is left of its group is SIGKILLed before the leader is reaped (the leader,
a zombie until then, keeps the group id from being reused) — as Mesos
destroys a task's container when the task ends. A process that leaves the
group on purpose (``setsid``) escapes; only cgroups could catch it.

Exits are found by polling (:meth:`TaskExecutor.poll`), not by SIGCHLD, so
the executor works from any thread and never fights other code over signal
handlers. One executor belongs to one thread.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Mapping

import attrs

from mesoslike.clock import Clock, SystemClock
from mesoslike.errors import MesoslikeError
from mesoslike.wire.types import TaskInfo

__all__ = ["TaskExecutor", "TaskExit", "LaunchError", "sandbox_path", "path_component", "SHELL",
           "MESSAGES_FILE"]

log = logging.getLogger("mesoslike.agent")

SHELL = "/bin/sh"
MESSAGES_FILE = "messages"
_SAFE_COMPONENT = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,199}\Z")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


class LaunchError(MesoslikeError):
    """A task's process could not be started; the message says why."""


@attrs.frozen
class TaskExit:
    """A task's leading process ended: with ``exit_code``, or killed by ``signal``."""

    framework_id: str
    task_id: str
    exit_code: int | None
    signal: int | None


def path_component(identifier: str) -> str:
    """A file name for an id: the id itself when it is plain (letters,
    digits, ``_.-``, not starting with a dot, at most 200 characters);
    otherwise the unsafe characters replaced by ``_`` plus a hash of the
    id, so that distinct ids never share a directory and ``..`` or ``/``
    never reach the file system."""
    if _SAFE_COMPONENT.match(identifier):
        return identifier
    digest = hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    readable = _UNSAFE_CHARS.sub("_", identifier).lstrip(".")[:100]
    return f"{readable}-{digest}" if readable else digest


def sandbox_path(work_dir: str | os.PathLike, framework_id: str, task_id: str) -> Path:
    """``<work_dir>/sandboxes/<framework_id>/<task_id>`` with both ids made safe."""
    return Path(work_dir) / "sandboxes" / path_component(framework_id) / path_component(task_id)


class _Process:
    __slots__ = ("framework_id", "task_id", "popen", "sandbox", "grace_period", "kill_deadline", "sigkill_sent")

    def __init__(self, framework_id: str, task_id: str, popen: subprocess.Popen, sandbox: Path,
                 grace_period: float) -> None:
        self.framework_id = framework_id
        self.task_id = task_id
        self.popen = popen
        self.sandbox = sandbox
        self.grace_period = grace_period
        self.kill_deadline: float | None = None
        self.sigkill_sent = False

    @property
    def pgid(self) -> int:
        return self.popen.pid  # a session leader's pid is its group id


class TaskExecutor:
    """Starts, kills and reaps task processes.

    :param work_dir: the agent's work directory; sandboxes go below
        ``<work_dir>/sandboxes``.
    :param environment: the base environment of every task (the agent's own
        ``os.environ`` at launch time when omitted).
    :param clock: monotonic time for kill deadlines.
    """

    def __init__(self, work_dir: str | os.PathLike, *, environment: Mapping[str, str] | None = None,
                 clock: Clock | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.sandbox_root = self.work_dir / "sandboxes"
        self._environment = dict(environment) if environment is not None else None
        self.clock = clock or SystemClock()
        self._processes: dict[tuple[str, str], _Process] = {}

    # -------------------------------------------------------------- queries
    def running(self) -> list[tuple[str, str]]:
        """(framework_id, task_id) of every task whose leader is not reaped yet."""
        return sorted(self._processes)

    def pid(self, framework_id: str, task_id: str) -> int | None:
        process = self._processes.get((framework_id, task_id))
        return process.popen.pid if process else None

    def sandbox(self, framework_id: str, task_id: str) -> Path:
        return sandbox_path(self.work_dir, framework_id, task_id)

    def next_deadline(self) -> float:
        """The earliest pending SIGKILL escalation (``math.inf`` if none)."""
        return min((p.kill_deadline for p in self._processes.values()
                    if p.kill_deadline is not None and not p.sigkill_sent), default=math.inf)

    # --------------------------------------------------------------- launch
    def launch(self, framework_id: str, task: TaskInfo, agent_id: str) -> int:
        """Start the task; returns its pid. Raises :class:`LaunchError` (never
        anything else) when the sandbox or the process cannot be made."""
        key = (framework_id, task.task_id)
        if key in self._processes:
            raise LaunchError(f"task {framework_id}/{task.task_id} is already running")
        try:
            sandbox = self._make_sandbox(framework_id, task.task_id)
            env = self._task_environment(framework_id, task, agent_id, sandbox)
            with open(sandbox / "stdout", "ab") as stdout, open(sandbox / "stderr", "ab") as stderr:
                popen = subprocess.Popen([SHELL, "-c", task.command], cwd=sandbox, env=env, stdin=subprocess.DEVNULL,
                                         stdout=stdout, stderr=stderr, start_new_session=True, close_fds=True)
        except LaunchError:
            raise
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise LaunchError(f"{type(exc).__name__}: {exc}") from None
        self._processes[key] = _Process(framework_id, task.task_id, popen, sandbox, task.kill_grace_period)
        log.info("task %s/%s started as pid %d in %s", framework_id, task.task_id, popen.pid, sandbox)
        return popen.pid

    def _make_sandbox(self, framework_id: str, task_id: str) -> Path:
        sandbox = sandbox_path(self.work_dir, framework_id, task_id)
        sandbox.mkdir(parents=True, exist_ok=True)
        # belt and braces against symlinks planted below the work dir
        root = self.sandbox_root.resolve()
        if root not in sandbox.resolve().parents:
            raise LaunchError(f"sandbox {sandbox} resolves outside {root}")
        return sandbox

    def _task_environment(self, framework_id: str, task: TaskInfo, agent_id: str, sandbox: Path) -> dict[str, str]:
        env = dict(os.environ if self._environment is None else self._environment)
        env.update(task.environment)
        env.update({
            "MESOSLIKE_TASK_ID": task.task_id,
            "MESOSLIKE_FRAMEWORK_ID": framework_id,
            "MESOSLIKE_AGENT_ID": agent_id,
            "MESOSLIKE_SANDBOX": str(sandbox.resolve()),
        })
        return env

    # ---------------------------------------------------------------- kill
    def kill(self, framework_id: str, task_id: str, grace_period: float) -> bool:
        """SIGTERM the task's process group now, SIGKILL it after
        ``grace_period`` seconds (at once if it is <= 0). False if the task
        is not running."""
        process = self._processes.get((framework_id, task_id))
        if process is None:
            return False
        deadline = self.clock.now() + max(0.0, grace_period)
        if process.kill_deadline is None:
            log.info("killing task %s/%s (pgid %d, grace %.1f s)", framework_id, task_id, process.pgid, grace_period)
            _signal_group(process.pgid, signal.SIGTERM)
            process.kill_deadline = deadline
        else:
            process.kill_deadline = min(process.kill_deadline, deadline)
        if grace_period <= 0:
            self._sigkill(process)
        return True

    def _sigkill(self, process: _Process) -> None:
        if not process.sigkill_sent:
            process.sigkill_sent = True
            log.info("task %s/%s outlived its grace period: SIGKILL to pgid %d", process.framework_id,
                     process.task_id, process.pgid)
            _signal_group(process.pgid, signal.SIGKILL)

    # ------------------------------------------------------------- reaping
    def poll(self) -> list[TaskExit]:
        """Escalate overdue kills and reap the tasks whose leader exited."""
        now = self.clock.now()
        exits = []
        for key, process in list(self._processes.items()):
            if _has_exited(process.popen.pid):
                # the zombie leader still pins the group id: clear the group, then reap
                _signal_group(process.pgid, signal.SIGKILL)
                exits.append(self._reap(key, process))
            elif process.kill_deadline is not None and now >= process.kill_deadline:
                self._sigkill(process)
        return exits

    def _reap(self, key: tuple[str, str], process: _Process) -> TaskExit:
        returncode = process.popen.wait()
        del self._processes[key]
        if returncode < 0:
            return TaskExit(key[0], key[1], None, -returncode)
        return TaskExit(key[0], key[1], returncode, None)

    def kill_all(self, grace_period: float | None = None, give_up_after: float = 5.0) -> list[TaskExit]:
        """Kill every task and wait until all are reaped; returns their exits.

        Each task gets its own ``kill_grace_period`` unless ``grace_period``
        is given. A process that survives SIGKILL for ``give_up_after``
        seconds (stuck in the kernel) is left behind with an error logged.
        """
        for process in list(self._processes.values()):
            grace = grace_period if grace_period is not None else process.grace_period
            self.kill(process.framework_id, process.task_id, grace)
        exits = self.poll()
        last_deadline = max((p.kill_deadline or 0.0 for p in self._processes.values()), default=0.0)
        while self._processes and self.clock.now() < last_deadline + give_up_after:
            time.sleep(0.01)
            exits.extend(self.poll())
        for key in self._processes:
            log.error("task %s/%s (pid %d) did not die", key[0], key[1], self._processes[key].popen.pid)
        return exits

    # ------------------------------------------------------------ messages
    def deliver_message(self, framework_id: str, task_id: str, data: bytes) -> Path:
        """Append ``data`` to the task's ``messages`` file; returns its path.
        Raises ``OSError`` when the file cannot be written."""
        path = sandbox_path(self.work_dir, framework_id, task_id) / MESSAGES_FILE
        with open(path, "ab") as sink:
            sink.write(data)
        return path


def _has_exited(pid: int) -> bool:
    """Has the child exited? Looks without reaping (WNOWAIT)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # already reaped elsewhere; Popen.wait copes


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # the group is already empty
    except PermissionError as exc:  # pragma: no cover - a group we do not own
        log.error("cannot signal process group %d: %s", pgid, exc)
