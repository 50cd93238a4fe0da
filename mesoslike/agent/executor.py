"""Tasks as real processes, each under its own supervisor: the agent's
process I/O.

Each task runs in a sandbox directory
``<work_dir>/sandboxes/<framework_id>/<task_id>/`` that holds its ``stdout``
and ``stderr`` files and the ``messages`` file framework messages are
appended to. It is started, watched and killed by a *supervisor* process
(:mod:`.supervisor`, one per task) that the agent starts in a session of its
own: the task outlives the agent, and a restarted agent finds it again
through the task's *run directory* ``<work_dir>/meta/tasks/<framework>/<task>``
(:meth:`TaskExecutor.recover`). The task's limits are those of its container
(:mod:`.isolation`: cgroups, or none with ``posix``).

With ``shared_supervisor`` the tasks with no image, URIs or health check
share one long-lived supervisor per agent instead
(:mod:`.shared_supervisor`, reached through :mod:`.supervisor_link`): no
process per task but the task's own — and, with namespaces, the compiled
init of its PID namespace (:mod:`.nsinit`, built at start: without a C
compiler such tasks keep a supervisor each); the same run files, read the
same way; its word that a run ended replaces the end of a supervisor process.

Events come out of :meth:`TaskExecutor.poll` (no SIGCHLD handler: the
executor works from any thread and never fights other code over signal
handlers): :class:`TaskStarted` (the task's pid), :class:`TaskExit` (how it
ended, with a reason when it did not end by itself), :class:`TaskLimited`
(it went over its memory limit and is being killed), :class:`TaskHealth`
(its health check's verdict changed: the supervisor checks it, see
:mod:`.health`) and :class:`LaunchFailed` (among others: a URI could not be
fetched, see :mod:`.fetcher`). One executor belongs to one thread.

Killing a task asks its supervisor: SIGTERM to the task's process group,
SIGKILL after the grace period. When a task's leading process exits, the
supervisor SIGKILLs what is left of its group and of its cgroups — as Mesos
destroys a task's container when the task ends. A supervisor that dies
(``kill -9``) takes its task down with it: the agent kills the task's group
and container and reports ``TASK_FAILED`` (the executor died).

With ``switch_user`` (the agent's ``--switch-user``) each task runs as its
``TaskInfo.user`` (the supervisor switches; :mod:`.supervisor`). The work
directory is then opened for traversal only (``0711``: a task reaches its
sandbox by its absolute path). ``meta`` — launch files hold the tasks'
environments — is always ``0700``, its run files ``0600``.

A task's environment is made from nothing (:mod:`.environment`), never
the agent's. Its secrets (:mod:`.secrets`) are resolved here and handed to
its supervisor alone, in a file of the run directory the supervisor
removes once read.
"""

from __future__ import annotations

import array
import errno
import fcntl
import hashlib
import itertools
import json
import logging
import math
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Union

import attrs
import msgspec
from msgspec.json import encode as _encode_json

from mesoslike.agent import supervisor as sup
from mesoslike.agent.environment import base_environment, task_environment, task_variables, user_entry_environment
from mesoslike.agent.executors import REASON_EXECUTOR_REREGISTRATION_TIMEOUT   # the executor book's name
from mesoslike.agent.files import SandboxOwners
from mesoslike.agent.gc import RunDirRemover
from mesoslike.agent.health import HEALTH_FILE, read_health
from mesoslike.agent.isolation import Container, Isolation, Isolator, PosixIsolator, agent_key
from mesoslike.agent.launcher import SupervisorLauncher
from mesoslike.agent import nsinit
from mesoslike.agent.namespaces import PidNamespaceForker
from mesoslike.agent.supervisor_link import Identity, SupervisorLink
from mesoslike.agent.secrets import (RUN_DIR_SECRETS, SECRETS_FILE, SecretError, SecretStore, TaskSecrets,
                                     resolve_task_secrets, secret_file_host_path, write_secrets_file)
from mesoslike.clock import Clock, SystemClock
from mesoslike.errors import MesoslikeError
from mesoslike.resources import Resources
from mesoslike.wire.messages import TaskUsage
from mesoslike.wire.types import ContainerInfo, ContainerStatus, TaskInfo, Volume, VolumeSource

__all__ = ["TaskExecutor", "Launch", "launch_problem", "destroy_containers_under", "TaskStarted", "TaskExit", "TaskLimited", "TaskHealth",
           "LaunchFailed", "ExecutorEvent", "LaunchError", "FetcherSettings", "FETCHER_CACHE_DIR",
           "DEFAULT_FETCHER_CACHE_SIZE", "DEFAULT_FETCHER_TIMEOUT", "DEFAULT_FETCHER_MAX_SIZE",
           "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED", "REASON_CONTAINER_LAUNCH_FAILED",
           "sandbox_path", "run_dir_path", "path_component", "SHELL", "MESSAGES_FILE", "DEFAULT_RECOVERY_TIMEOUT",
           "REASON_CONTAINER_LIMITATION_MEMORY", "REASON_EXECUTOR_TERMINATED", "REASON_EXECUTOR_REREGISTRATION_TIMEOUT",
           "REASON_AGENT_RESTARTED", "REASON_COMMAND_EXECUTOR_FAILED"]

log = logging.getLogger("mesoslike.agent")

SHELL = "/bin/sh"
MESSAGES_FILE = "messages"
#: where an image task's sandbox is inside its container (Mesos's)
RUNC_SANDBOX = "/mnt/mesos/sandbox"
#: how long a supervisor waits for its agent to come back before killing its task (Mesos: 15 min)
DEFAULT_RECOVERY_TIMEOUT = 15 * 60.0
#: forgotten run directories an agent keeps for reuse (``meta/spare``; a few KiB each). As many as a burst has in
#: flight (launched, not yet forgotten): 4 agents given 1,000 tasks ``true`` had 140 each; beyond the spares, each
#: run directory is five inodes made and later removed, which on a file system without a journal makes every
#: later inode's allocation scan past them (ext4's ``recently_deleted``: docs/performance.rst)
MAX_SPARE_RUN_DIRS = 512
#: how often a running task's out-of-memory counter is looked at (s)
OOM_CHECK_INTERVAL = 0.25
#: spare cgroups made ahead in one idle turn of the agent (:meth:`TaskExecutor.poll`, :meth:`.Isolator.make_spares`)
SPARES_A_TURN = 4
#: how long :meth:`TaskExecutor.kill_all` waits for the processes it SIGKILLed itself to be gone (a
#: process in uninterruptible sleep dies only when it leaves it)
KILLED_GONE_WAIT = 2.0
#: framework directories whose check a launch remembers (beyond: forgotten, and checked again)
MAX_CHECKED_FRAMEWORK_DIRS = 1024
#: a file system with less than this free (for unprivileged writers) counts as full
DISK_FULL_BYTES = 64 * 1024
SUPERVISOR_SCRIPT = sup.__file__
#: the start time of a supervisor that ended before the agent looked (never a real one)
_GONE = object()
_SAFE_COMPONENT = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,199}\Z")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")

# the reasons of the updates these events lead to (the core's names, kept in one place: here)
REASON_COMMAND_EXECUTOR_FAILED = "REASON_COMMAND_EXECUTOR_FAILED"
REASON_CONTAINER_LIMITATION_MEMORY = "REASON_CONTAINER_LIMITATION_MEMORY"
REASON_EXECUTOR_TERMINATED = "REASON_EXECUTOR_TERMINATED"
REASON_AGENT_RESTARTED = "REASON_AGENT_RESTARTED"
#: a health update (TASK_RUNNING with ``healthy``), and TASK_FAILED of a task its health check killed
REASON_TASK_HEALTH_CHECK_STATUS_UPDATED = "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
#: TASK_FAILED: a URI could not be fetched (Mesos reports its fetcher's failures so too)
REASON_CONTAINER_LAUNCH_FAILED = "REASON_CONTAINER_LAUNCH_FAILED"
#: the per-agent fetcher cache, below the work dir
FETCHER_CACHE_DIR = "fetcher-cache"
#: the fetcher's defaults: a 2 GiB cache (as Mesos's --fetcher_cache_size), 5 minutes and 1 GiB per URI
DEFAULT_FETCHER_CACHE_SIZE = 2 * 1024 ** 3
DEFAULT_FETCHER_TIMEOUT = 300.0
DEFAULT_FETCHER_MAX_SIZE = 1024 ** 3


@attrs.frozen
class FetcherSettings:
    """The agent's fetcher (docs/agent.rst, "The fetcher"): the cache's size
    bound (bytes, least recently used files evicted; 0: no cache), how long
    one URI may take to download (s), and the largest file — and extracted
    archive — it accepts (bytes)."""

    cache_size: int = DEFAULT_FETCHER_CACHE_SIZE
    timeout: float = DEFAULT_FETCHER_TIMEOUT
    max_size: int = DEFAULT_FETCHER_MAX_SIZE

    def __attrs_post_init__(self) -> None:
        if self.cache_size < 0 or not self.timeout > 0 or self.max_size < 1:
            raise ValueError("the fetcher needs cache_size >= 0, timeout > 0 and max_size >= 1")


class LaunchError(MesoslikeError):
    """A task's process could not be started; the message says why, and
    ``reason`` the update's reason code."""

    def __init__(self, message: str, reason: str = "REASON_COMMAND_EXECUTOR_FAILED") -> None:
        super().__init__(message)
        self.reason = reason


@attrs.frozen
class TaskStarted:
    """The task's process exists (or, after :meth:`TaskExecutor.recover`,
    still does); ``container``: what its container is."""

    framework_id: str
    task_id: str
    pid: int
    container: ContainerStatus | None = None


@attrs.frozen
class TaskExit:
    """A task's leading process ended: with ``exit_code``, or killed by
    ``signal``. ``reason`` says when it did not end on its own (the core's
    ``REASON_*``), ``message`` what else the update should say."""

    framework_id: str
    task_id: str
    exit_code: int | None
    signal: int | None
    reason: str = ""
    message: str = ""


@attrs.frozen
class TaskLimited:
    """The task went over a limit (``reason``); its supervisor is killing it."""

    framework_id: str
    task_id: str
    reason: str
    message: str


@attrs.frozen
class TaskHealth:
    """The task's health check verdict changed (or is learnt anew after an
    agent restart): ``healthy``, and what the last check said."""

    framework_id: str
    task_id: str
    healthy: bool
    message: str


@attrs.frozen
class LaunchFailed:
    """The task never started (``reason``: the update's reason code)."""

    framework_id: str
    task_id: str
    message: str
    reason: str = REASON_COMMAND_EXECUTOR_FAILED


ExecutorEvent = Union[TaskStarted, TaskExit, TaskLimited, TaskHealth, LaunchFailed]


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


#: ``parent / name`` for a ``name`` that is one plain component (:func:`path_component`'s: no ``/``, never
#: ``.`` or ``..``): Python 3.11's and 3.12's pathlib parse ``name`` again for ``/`` (~2 µs), their
#: ``_make_child_relpath`` appends it as it is; 3.13's ``/`` parses nothing until asked (no such method)
_child: Callable[[Path, str], Path] = getattr(Path, "_make_child_relpath", Path.__truediv__)


def sandbox_path(work_dir: str | os.PathLike, framework_id: str, task_id: str) -> Path:
    """``<work_dir>/sandboxes/<framework_id>/<task_id>`` with both ids made safe
    (joined as a string, then one ``Path``: a task's launch makes several, and
    each ``/`` of ``Path`` parses anew — a third of the time)."""
    return Path(os.path.join(work_dir, "sandboxes", path_component(framework_id), path_component(task_id)))


def run_dir_path(work_dir: str | os.PathLike, framework_id: str, task_id: str) -> Path:
    """``<work_dir>/meta/tasks/<framework_id>/<task_id>``: the task's checkpoint and its supervisor's files
    (made as :func:`sandbox_path` is)."""
    return Path(os.path.join(work_dir, "meta", "tasks", path_component(framework_id), path_component(task_id)))


class _Watch:
    """One supervisor process: has it ended, and a way to signal it that
    cannot hit another process that reused its pid (the Popen of a child
    the agent has not reaped, or a pidfd)."""

    def __init__(self, pid: int, popen: subprocess.Popen | None = None, pidfd: int | None = None,
                 start_ticks: object = None) -> None:
        self.pid = pid
        self.popen = popen
        self.pidfd = pidfd
        self.start_ticks = start_ticks

    @classmethod
    def adopt(cls, pid: int, start_ticks: object) -> _Watch | None:
        """A supervisor an earlier agent started, if it still runs."""
        if pid <= 0 or sup.process_start_ticks(pid) != start_ticks:
            return None
        try:
            pidfd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            return cls(pid, start_ticks=start_ticks)  # no pidfds here: look at /proc each time
        if sup.process_start_ticks(pid) != start_ticks:  # ended (and reused) between the look and the open
            os.close(pidfd)
            return None
        return cls(pid, pidfd=pidfd, start_ticks=start_ticks)

    def ended(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is not None
        if self.pidfd is not None:
            poller = select.poll()
            poller.register(self.pidfd, select.POLLIN)
            return bool(poller.poll(0))
        return sup.process_start_ticks(self.pid) != self.start_ticks

    def signal(self, signum: int) -> None:
        try:
            if self.popen is not None:
                self.popen.send_signal(signum)
            elif self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signum)
            elif sup.process_start_ticks(self.pid) == self.start_ticks:
                os.kill(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def how_it_ended(self) -> str:
        code = self.popen.returncode if self.popen is not None else None
        if code is None:
            return ""
        return f" (killed by signal {-code})" if code < 0 else f" (exit status {code})"

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class _SharedWatch:
    """A task under the agent's shared supervisor (:mod:`.shared_supervisor`):
    its run has ended when the shared supervisor told so (or the agent
    read it from ``exit.json``), or when that supervisor is gone; signals
    are requests to it."""

    def __init__(self, link: SupervisorLink, name: str, identity: Identity) -> None:
        self.link = link
        self.name = name                 # FRAMEWORK/TASK, the run directory below meta/tasks
        self.identity = identity
        self.pid = identity[0]
        self.done = False
        #: its exit status as told with its end (``X``, what its ``exit.json`` holds): that file unread
        self.status: dict | None = None
        #: its start is told on this connection (a launch of it); False for a recovered run, whose start
        #: may have been told to the agent before (its task.json is read as a task supervisor's)
        self.start_told = True

    def ended(self) -> bool:
        return self.done or self.link.identity != self.identity or not self.link.live

    def signal(self, signum: int) -> None:
        # SIGTERM: with the task's grace; SIGUSR1 (and SIGKILL, a stuck supervisor's): at once
        self.link.send("T" if signum == signal.SIGTERM else "K", self.name)
        self.link.flush()

    def how_it_ended(self) -> str:
        return " (the agent's shared supervisor ended)"

    def close(self) -> None:
        pass


class _Run:
    """A task under its supervisor."""

    __slots__ = ("framework_id", "task_id", "run_dir", "sandbox", "container", "watch", "task_pid", "limited",
                 "forget", "next_oom_check", "kill_deadline", "checked", "health_changes", "health_stamp",
                 "isolation", "image", "plain")

    def __init__(self, framework_id: str, task_id: str, run_dir: Path, sandbox: Path, container: Container,
                 watch: _Watch | _SharedWatch, task_pid: int | None = None) -> None:
        self.framework_id = framework_id
        self.task_id = task_id
        self.run_dir = run_dir
        self.sandbox = sandbox
        self.container = container
        self.watch = watch
        self.task_pid = task_pid
        self.limited = False
        self.forget = False                       # remove the run directory once it has ended
        self.next_oom_check = 0.0
        self.kill_deadline: float | None = None   # when a supervisor that does not end is killed itself
        self.checked = False                      # it has a health check: its supervisor writes health.json
        self.health_changes = 0                   # the supervisor's count of health changes last reported
        self.health_stamp: tuple[int, int] | None = None   # health.json's (mtime, inode) last read
        self.isolation: tuple[str, ...] = ()      # the isolators it got (Mesos's names)
        self.image = ""                           # the image of its root filesystem ('': the agent's)
        # launched by this agent process for the shared supervisor, without secrets: its run directory ends
        # with launch.json, supervisor.json, task.json and exit.json alone (no log, health, secret files)
        self.plain = False

    def started(self) -> TaskStarted:
        assert self.task_pid is not None
        return TaskStarted(self.framework_id, self.task_id, self.task_pid,
                           ContainerStatus(list(self.isolation), self.image, self.task_pid))


@attrs.frozen
class Launch:
    """A task to start (:meth:`TaskExecutor.launch`'s arguments)."""

    framework_id: str
    task: TaskInfo
    agent_id: str
    principal: str = ""
    secret_files: Mapping[str, bytes] | None = None


@attrs.frozen
class _Prepared:
    """A launch whose files and container are made, its supervisor not started yet."""

    key: tuple[str, str]
    run_dir: Path
    sandbox: Path
    container: Container
    environment: dict[str, str]
    pid_namespace: bool
    checked: bool
    isolation: tuple[str, ...]
    image: str
    shared: bool = False   # for the shared supervisor (no image, URIs, health check; namespaces with its helper)
    secrets: bool = False  # secret files or variables: a secrets.json and (maybe) secret files in the run directory


class TaskExecutor:
    """Starts, kills, watches and recovers supervised tasks.

    Why one class of some 800 lines: a task's run directory, its supervisor
    and its container are one record that launching, watching, killing and
    recovering all read and change (a recovered task is watched as a
    launched one; a kill must find the supervisor a batch launch is still
    starting); what has no share in that record lives beside it — the
    launcher (:mod:`.launcher`), the supervisor (:mod:`.supervisor`), the
    isolation (:mod:`.isolation`, :mod:`.namespaces`) and run files' names.

    :param work_dir: the agent's work directory: sandboxes below
        ``<work_dir>/sandboxes``, run directories below ``<work_dir>/meta/tasks``.
    :param environment: the operator's base environment of every task
        (``--executor-environment-variables``; default: ``PATH`` only, see
        :mod:`.environment`) — never the agent's own.
    :param clock: monotonic time for deadlines.
    :param isolator: the tasks' containers (default: posix, nothing enforced).
    :param recovery_timeout: how long a supervisor waits for a gone agent
        before it kills its task.
    :param python: the interpreter that runs the supervisors.
    :param container_prefix: begins the name of every task's cgroup, so that
        agents sharing a machine never share one (default: from the work dir).
    :param switch_user: run each task as its ``TaskInfo.user`` (needs root;
        a task without one runs as the agent's user).
    :param fork_supervisors: fork the supervisors from a launcher process
        (:mod:`mesoslike.agent.launcher`) instead of starting an interpreter for each.
    :param shared_supervisor: run the tasks that need no process of their
        own (no image, URIs or health check; namespaces through the init
        helper, :mod:`.nsinit`, built here if a C compiler is there) under
        one long-lived supervisor per agent (:mod:`.shared_supervisor`),
        with no Python process forked per task. Tasks of a shared supervisor an
        earlier agent started are recovered either way.
    :param fetcher: how the supervisors fetch the tasks' URIs (the cache is
        ``<work_dir>/fetcher-cache``).
    :param isolation: the agent's ``--isolation`` in force
        (:func:`~.isolation.select_isolation`): the namespaces each task
        gets; its ``resources`` is the ``isolator``. Default: ``isolator``
        alone, no namespaces.
    :param allowed_host_paths: directories whose contents ``HOST_PATH``
        volumes may mount (``--allowed-host-paths``; none: every such
        volume is refused).
    :param image_store: the settings of the agent's image store
        (``ImageStore.settings()``): the supervisor of a task with an image
        pulls it there (None: tasks with images fail).
    :param hostname: the agent's name, an image container's host name
        unless its ``ContainerInfo`` names one.
    :param secrets: the agent's secrets directory (``--secrets-dir``), for
        ``REFERENCE`` secrets; None: a task with one fails to launch.
    """

    def __init__(self, work_dir: str | os.PathLike, *, environment: Mapping[str, str] | None = None,
                 clock: Clock | None = None, isolator: Isolator | None = None,
                 recovery_timeout: float = DEFAULT_RECOVERY_TIMEOUT, python: str | None = None,
                 container_prefix: str | None = None, switch_user: bool = False,
                 fork_supervisors: bool = True, fetcher: FetcherSettings | None = None,
                 isolation: Isolation | None = None, allowed_host_paths: tuple[str, ...] = (),
                 image_store: dict | None = None, hostname: str = "", secrets: SecretStore | None = None,
                 shared_supervisor: bool = False) -> None:
        self.work_dir = Path(work_dir)
        self.sandbox_root = self.work_dir / "sandboxes"
        self.agent_pid_file = self.work_dir / "meta" / "agent.pid"
        self._environment = dict(environment) if environment is not None else None
        self.secrets = secrets
        #: whose each framework directory of the sandboxes is (the agent's /files ask)
        self.sandbox_owners = SandboxOwners(self.work_dir / "meta" / "sandbox-owners")
        #: HOME, USER, LOGNAME of the agent's user: its tasks' when they do not switch
        self._own_user = _own_user_environment()
        #: every task's base environment (:func:`.environment.base_environment`), made once: for a task run as
        #: the agent's user, and for one whose supervisor switches to its own (it adds that user's HOME, USER)
        self._base_environments = {False: base_environment(self._environment, self._own_user),
                                   True: base_environment(self._environment, None)}
        self.clock = clock or SystemClock()
        if isolation is not None:
            isolator = isolation.resources
        self.isolator = isolator or PosixIsolator()
        self.isolation = isolation or Isolation(_resource_isolators(self.isolator), self.isolator)
        #: (isolation, its namespaces, whether "mount" and "uts" are of them, its isolators): what
        #: :meth:`_container_spec` gives every command task, worked out once (a generator a launch before)
        self._isolation_spec: tuple[Isolation, tuple[str, ...], bool, bool, tuple[str, ...]] | None = None
        self.allowed_host_paths = tuple(os.path.realpath(path) for path in allowed_host_paths)
        self.image_store = image_store
        self.hostname = hostname or os.uname().nodename
        #: runc's state of the image tasks' containers
        self.runc_root = self.work_dir / "runc"
        #: what a task with a private /tmp must still reach below /tmp (:func:`.namespaces.private_tmp`)
        self.kept_paths = _kept_paths(self.work_dir)
        #: for supervisors started without the launcher, in PID namespaces of their own
        self._pid_forker: PidNamespaceForker | None = None
        self.recovery_timeout = recovery_timeout
        self.python = python or sys.executable
        self.container_prefix = container_prefix or agent_key(self.work_dir.name, self.work_dir)
        self.switch_user = switch_user
        self.fetcher = fetcher or FetcherSettings()
        self._fetcher_cache_dir = str(self.work_dir / FETCHER_CACHE_DIR)
        self._runs: dict[tuple[str, str], _Run] = {}
        self._pid_file_written = False
        self._pool_swept = False   # the isolator's sweep of an earlier process's pooled cgroups is done
        self._real_sandbox_root: Path | None = None
        self._real_sandbox: tuple[Path, str] | None = None   # the last sandbox made, and its real path
        #: framework sandbox directories made and checked by a launch -> their device, inode and real path
        #: (:meth:`_made_in_checked_framework_dir`: a later task's sandbox made there without the checks again)
        #: framework directory -> its device, inode and real path, all as strings (a Path's parent made and
        #: hashed each launch was 6 % of a launch's samples)
        self._framework_dirs: dict[str, tuple[int, int, str]] = {}
        #: framework id -> the parents of its tasks' sandboxes and run directories (:meth:`_task_paths`)
        self._framework_paths: dict[str, tuple[Path, Path]] = {}
        #: framework id -> how many of its run directories this process made or recovered and the core has
        #: not forgotten: :meth:`forget` removes the framework's directory only once none is left
        self._framework_run_dirs: dict[str, int] = {}
        #: removes the run directories of forgotten tasks in a thread of its own
        self.run_dir_remover = RunDirRemover(self.work_dir / "meta" / "trash")
        #: run directories kept for reuse (:meth:`_recycle`), and those of ended runs not yet forgotten
        self.spare_root = self.work_dir / "meta" / "spare"
        # spare run directories, as strings (a Path made, parsed and hashed for each was 2 % of an agent's launch)
        self._spares: list[str] | None = None
        # the spares whose files are known (:attr:`_Run.plain`): blanked without a listing of the directory
        self._plain_spares: set[str] = set()
        self._spare_root = os.fspath(self.spare_root)
        # a spare's name: this process's random prefix (no spare of another agent process has it) and a count,
        # not a random draw a recycled run (a getrandom system call each)
        spare_prefix = f"{self._spare_root}/{os.urandom(8).hex()}-"
        self._spare_names = (f"{spare_prefix}{number:x}" for number in itertools.count())
        # (framework, task) -> the run directory of its ended run and whether that run was plain: keyed by the
        # ids, not the Path (a Path hashed and compared, three times a task, was ~3 % of an agent's Python)
        self._ended_run_dirs: dict[tuple[str, str], tuple[Path, bool]] = {}
        #: forks the supervisors (None: each is an interpreter started for it)
        self.launcher: SupervisorLauncher | None = SupervisorLauncher(self.python, SUPERVISOR_SCRIPT) \
            if fork_supervisors else None
        #: the shared supervisor (used for recovery even when new tasks do not go to it)
        self.link = SupervisorLink(self.work_dir / "meta", self.python, self.sandbox_root)
        self.shared_supervisor = shared_supervisor
        #: the init helper the shared supervisor starts tasks with namespaces with (:mod:`.nsinit`); None:
        #: those get supervisors of their own
        self.init_helper: str | None = None
        if shared_supervisor and self.isolation.namespaces:
            self.init_helper = nsinit.helper(str(self.work_dir / "meta"), say=lambda why: log.warning(
                "tasks with namespaces get supervisors of their own (a Python process each): the namespace "
                "init helper cannot be built: %s", why))
        self._shared_runs: dict[str, tuple[str, str]] = {}   # FRAMEWORK/TASK -> the run's key
        self._next_scan = 0.0   # when poll() looks at every run next
        self._killing: set[tuple[str, str]] = set()   # the runs that may have a kill deadline

    # -------------------------------------------------------------- queries
    def busy(self) -> bool:
        """Whether any task's supervisor has not ended (cheaper than :meth:`running`)."""
        return bool(self._runs)

    def running(self) -> list[tuple[str, str]]:
        """(framework_id, task_id) of every task whose supervisor has not ended."""
        return sorted(self._runs)

    def pid(self, framework_id: str, task_id: str) -> int | None:
        run = self._runs.get((framework_id, task_id))
        return run.task_pid if run else None

    def sandbox(self, framework_id: str, task_id: str) -> Path:
        return sandbox_path(self.work_dir, framework_id, task_id)

    def container(self, framework_id: str, task_id: str) -> Container | None:
        run = self._runs.get((framework_id, task_id))
        return run.container if run else None

    def container_and_leader(self, framework_id: str, task_id: str) -> tuple[Container, int | None] | None:
        """A running task's container and its process (its session's leader), None if it does not run."""
        run = self._runs.get((framework_id, task_id))
        return (run.container, run.task_pid) if run else None

    def isolation_of(self, framework_id: str, task_id: str) -> tuple[tuple[str, ...], str]:
        """The isolators a running task got (Mesos's names) and its image
        ('' for none); nothing if it is not running."""
        run = self._runs.get((framework_id, task_id))
        return (run.isolation, run.image) if run else ((), "")

    def resize(self, framework_id: str, task_id: str, resources: Resources) -> bool:
        """Set the limits of a running task's container to ``resources``
        (a custom executor's run: its own resources and its live tasks').
        False, with a warning logged, if it is not running or a limit could
        not be set (the old one stays)."""
        run = self._runs.get((framework_id, task_id))
        if run is None:
            return False
        try:
            run.container = self.isolator.update(run.container, resources)
        except OSError as exc:
            log.warning("the container of %s/%s keeps its limits: %s cannot be set: %s", framework_id, task_id,
                        resources, exc)
            return False
        return True

    def readable(self) -> int | None:
        """A descriptor that becomes readable when :meth:`poll` has news
        (the shared supervisor's connection while it runs tasks), for the
        agent's loop to wait on with its sockets; None if there is none."""
        return self.link.fileno() if self._shared_runs else None

    def next_deadline(self) -> float:
        """The earliest time :meth:`poll` has work besides looking (``math.inf`` if none)."""
        killing = [self._runs[key] for key in self._killing if key in self._runs]   # not every run: each turn asks
        return min((run.kill_deadline for run in killing if run.kill_deadline is not None),
                   default=math.inf)

    def usage(self, where: Callable[[str, str], bool] | None = None) -> list[TaskUsage]:
        """The usage now, and the limits, of every running task (of those
        ``where(framework_id, task_id)`` keeps, if given: the others are not read)."""
        out = []
        for key, run in sorted(self._runs.items()):
            if run.task_pid is not None and (where is None or where(*key)):
                try:
                    measured = self.isolator.usage(run.container, run.task_pid)
                except (OSError, ValueError) as exc:  # the task ended while we read
                    log.debug("usage of %s/%s unavailable: %s", key[0], key[1], exc)
                    continue
                out.append(msgspec.structs.replace(measured, framework_id=key[0], task_id=key[1]))
        return out

    # --------------------------------------------------------------- launch
    def prepare_directories(self) -> None:
        """``meta`` (checkpoints and launch files, with the tasks'
        environments) the agent's only (``0700``); with ``switch_user`` the
        work directory and the sandbox root traversable by the tasks' users
        (``0711``, not listable). The sandbox root and ``meta/tasks`` are
        marked as tops of directory hierarchies (:func:`spread_children`)."""
        meta = self.work_dir / "meta"
        meta.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(meta, 0o700)                  # first: only then may the work dir open up
        # the framework directories of the sandboxes and of the run directories each in a block group of its
        # own (spread_children): not in the group of whatever else churns files near the work directory
        tasks = meta / "tasks"
        tasks.mkdir(exist_ok=True)
        spread_children(tasks)
        if self.switch_user:
            os.chmod(self.work_dir, 0o711)
        try:
            if self.switch_user:
                self.sandbox_root.mkdir(mode=0o711, exist_ok=True)
                os.chmod(self.sandbox_root, 0o711)
            else:
                self.sandbox_root.mkdir(exist_ok=True)
        except OSError as exc:  # each launch will fail saying why
            log.warning("cannot prepare the sandbox directory %s: %s", self.sandbox_root, exc)
        spread_children(self.sandbox_root)

    def unreachable_ancestors(self) -> list[Path]:
        """Directories above the work dir that other users cannot traverse:
        a switched task then reaches its sandbox only as its working
        directory, not by its absolute path (``MESOSLIKE_SANDBOX``)."""
        return [parent for parent in self.work_dir.resolve().parents
                if not os.stat(parent).st_mode & stat.S_IXOTH]

    def write_agent_pid(self) -> None:
        """Record this process as the agent the supervisors wait for."""
        self.agent_pid_file.parent.mkdir(parents=True, exist_ok=True)
        sup.write_json_atomically(str(self.agent_pid_file),
                                  {"pid": os.getpid(), "start_ticks": sup.process_start_ticks(os.getpid())})
        self._pid_file_written = True

    def launch(self, framework_id: str, task: TaskInfo, agent_id: str, principal: str = "",
               secret_files: Mapping[str, bytes] | None = None) -> None:
        """Start the task's supervisor, which starts the task
        (:class:`TaskStarted` comes from :meth:`poll`). Raises
        :class:`LaunchError` (never anything else) when the sandbox, the
        container, the supervisor or a secret of the task (of a framework
        of ``principal``; ``secret_files``: more secret files, container
        path -> bytes) cannot be made."""
        (problem,) = self.launch_many([Launch(framework_id, task, agent_id, principal, secret_files)])
        if problem is not None:
            raise problem

    def launch_many(self, launches: list[Launch]) -> list[LaunchError | None]:
        """:meth:`launch` each of ``launches``, in order; what stopped each
        (None: its supervisor was started). Each task is prepared and its
        supervisor asked of the launcher while the launcher forks the
        previous ones; the launcher's answers are read together at the end
        (one round trip, not one a task)."""
        problems: list[LaunchError | None] = [None] * len(launches)
        submitted: list[tuple[int, _Prepared]] = []
        unsubmitted: list[tuple[int, _Prepared]] = []
        shared: list[tuple[int, _Prepared]] = []
        keys: set[tuple[str, str]] = set()
        linked: bool | None = None   # the shared supervisor looked for (and checked alive) once a batch
        try:
            for index, launch in enumerate(launches):
                try:
                    prepared = self._prepare(launch, keys)
                except LaunchError as exc:
                    problems[index] = exc
                    continue
                keys.add(prepared.key)
                if prepared.shared and linked is None:
                    linked = self.link.ensure()
                if prepared.shared and linked:
                    self.link.send("L", _run_name(prepared.run_dir))
                    shared.append((index, prepared))
                    continue
                if prepared.shared:   # no shared supervisor to be had: one of its own after all
                    prepared = attrs.evolve(prepared, shared=False, environment=self._supervisor_environment(
                        *prepared.key, prepared.sandbox))
                if self.launcher is not None and self.launcher.submit(prepared.run_dir, prepared.environment,
                                                                      prepared.run_dir / sup.LOG_FILE,
                                                                      prepared.pid_namespace):
                    submitted.append((index, prepared))
                else:
                    unsubmitted.append((index, prepared))
        finally:
            # even if something unforeseen escapes a preparation: the answers to what was asked are read
            # (the next batch's must not be taken for theirs) and those supervisors watched
            answers: list[int | OSError] = self.launcher.collect() if self.launcher is not None else []
            self.link.flush()
            started: list[tuple[int, _Prepared, int | OSError | None]] = \
                [(index, prepared, answer) for (index, prepared), answer in zip(submitted, answers)]
            started += [(index, prepared, None) for index, prepared in unsubmitted]
            for index, prepared, answer in sorted(started, key=lambda item: item[0]):
                problems[index] = self._watch_prepared(prepared, answer)
            identity = self.link.identity
            for index, prepared in shared:
                assert identity is not None
                self._watch_shared(prepared, _SharedWatch(self.link, _run_name(prepared.run_dir), identity))
        return problems

    def _watch_shared(self, prepared: _Prepared, watch: _SharedWatch) -> None:
        """A launch asked of the shared supervisor, watched as a run (its
        end comes as a word from it, :meth:`poll`)."""
        run = self._runs[prepared.key] = _Run(*prepared.key, prepared.run_dir, prepared.sandbox, prepared.container,
                                              watch)
        run.isolation = prepared.isolation
        run.plain = not prepared.secrets
        self._shared_runs[watch.name] = prepared.key

    def _watch_prepared(self, prepared: _Prepared, answer: int | OSError | None) -> LaunchError | None:
        """The prepared launch's supervisor watched as a run (:meth:`_watch_supervisor`); what stopped it."""
        try:
            watch = self._watch_supervisor(prepared, answer)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            self._abandon(prepared.container)
            return LaunchError(launch_problem(exc, self.work_dir))
        self._runs[prepared.key] = run = _Run(*prepared.key, prepared.run_dir, prepared.sandbox,
                                              prepared.container, watch)
        run.checked = prepared.checked
        run.isolation = prepared.isolation
        run.image = prepared.image
        log.info("task %s/%s: supervisor pid %d, sandbox %s", *prepared.key, watch.pid, prepared.sandbox)
        return None

    def _watch_supervisor(self, prepared: _Prepared, answer: int | OSError | None) -> _Watch:
        """The supervisor the launcher started (``answer``: its pid, or
        why it could not), or one started now without it (None)."""
        if isinstance(answer, OSError):
            raise answer
        if answer is None:
            return self._start_supervisor(prepared.run_dir, prepared.environment, prepared.pid_namespace)
        ticks = sup.process_start_ticks(answer)   # None: it ended already (exit.json says how)
        return (_Watch.adopt(answer, ticks) if ticks is not None else None) or _Watch(answer, start_ticks=_GONE)

    def _prepare(self, launch: Launch, batch: set[tuple[str, str]]) -> _Prepared:
        """Everything of a launch but its supervisor: sandbox, run
        directory and files, secrets, container. Raises
        :class:`LaunchError` (nothing of it left made but its directories)."""
        framework_id, task = launch.framework_id, launch.task
        key = (framework_id, task.task_id)
        if key in self._runs or key in batch:
            raise LaunchError(f"task {framework_id}/{task.task_id} is already running")
        container: Container | None = None
        try:
            if not self._pid_file_written:
                self.write_agent_pid()
            sandbox = self._make_sandbox(framework_id, task.task_id)
            run_dir = self._task_paths(framework_id, task.task_id)[1]
            self._make_run_dir(run_dir, key)
            self._framework_run_dirs[framework_id] = self._framework_run_dirs.get(framework_id, 0) + 1
            spec = self._container_spec(framework_id, task, launch.agent_id, sandbox, run_dir)
            self.sandbox_owners.record(sandbox.parent.name, launch.principal)
            secrets = self._resolve_secrets(task, launch.principal, sandbox, run_dir, launch.secret_files)
            if not self._pool_swept:
                self.sweep_pool()
            # a pooled container is named for no task: its name's hash and random part not made for nothing
            name = f"{self.container_prefix}.pooled" if self.isolator.pool_size > 0 \
                else self._container_name(framework_id, task.task_id)
            container = self.isolator.create(name, task.resources, pooled=True)
            if spec.get("image"):
                spec["image"]["cgroups_path"] = self.isolator.runc_cgroups_path(container) or \
                    f"mesoslike-containers/{spec['image']['id']}"
            shared = self.shared_supervisor and not (spec.get("image") or task.uris or task.health_check is not None
                                                     or (spec["namespaces"] and self.init_helper is None))
            if shared and spec["namespaces"]:   # its container made by the init helper the shared supervisor starts
                spec["init"] = self.init_helper
            self._write_run_files(run_dir, framework_id, task, launch.agent_id, sandbox, container, spec, secrets)
            # a process's environment: none for a task the shared supervisor starts (made if it must fall back)
            environment = {} if shared else self._supervisor_environment(framework_id, task.task_id, sandbox)
        except LaunchError:
            self._abandon(container)
            raise
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            self._abandon(container)
            raise LaunchError(launch_problem(exc, self.work_dir)) from None
        return _Prepared(key, run_dir, sandbox, container, environment, "pid" in spec["namespaces"],
                         task.health_check is not None, tuple(spec["isolation"]),
                         spec["image"]["name"] if spec.get("image") else "", shared, bool(secrets))

    def _start_supervisor(self, run_dir: Path, environment: dict[str, str], pid_namespace: bool) -> _Watch:
        """Start a supervisor without the launcher: an interpreter of its
        own (with ``pid_namespace``, the first process of a PID namespace
        of its own, its watched signals blocked from the start as the
        launcher does)."""
        with open(run_dir / sup.LOG_FILE, "ab") as log_file:
            def start() -> subprocess.Popen:
                return subprocess.Popen([self.python, "-I", "-S", SUPERVISOR_SCRIPT, str(run_dir)],
                                        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True, env=environment)
            if not pid_namespace:
                popen = start()
                return _Watch(popen.pid, popen)
            if self._pid_forker is None:
                self._pid_forker = PidNamespaceForker()
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, sup.WATCHED_SIGNALS)
            try:
                popen = self._pid_forker.first_of_new_namespace(start)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            return _Watch(popen.pid, popen)

    def _container_spec(self, framework_id: str, task: TaskInfo, agent_id: str, sandbox: Path,
                        run_dir: Path) -> dict:
        """What the supervisor makes of the task's container: the
        namespaces, the private ``/tmp``, the paths kept below it, the host
        name, the volumes (each checked: :class:`LaunchError` with
        ``REASON_CONTAINER_LAUNCH_FAILED`` for one this agent refuses), and
        the isolators the task gets, by Mesos's names. A ``SECRET`` volume
        at a relative path is no mount: its file is written into the
        sandbox (:mod:`.secrets`); at an absolute path, its file in the run
        directory is bound there read-only."""
        isolation = self.isolation
        info = _process_container(task)
        if info is not None and info.image_name():
            return self._image_spec(framework_id, task, agent_id, info, sandbox, run_dir)
        if not task.shell and not _exec_argv(task):
            raise LaunchError(f"task {task.task_id}: shell is false and it has no program or arguments to execute")
        cached = self._isolation_spec
        if cached is None or cached[0] is not isolation:   # what every command task of this isolation gets
            namespaces = tuple(isolation.namespaces)
            cached = self._isolation_spec = (isolation, namespaces, "mount" in namespaces, "uts" in namespaces,
                                             tuple(isolation.isolators))
        _, namespaces, mounts, uts, isolators = cached
        volumes: list[dict] = []
        hostname = ""
        if info is not None:
            mounted = [volume for volume in info.volumes if not _secret_in_sandbox(volume)]
            if mounted and not mounts:
                raise LaunchError(f"task {task.task_id} has volumes, and this agent gives tasks no mount namespace "
                                  "(--isolation lacks filesystem/linux)", REASON_CONTAINER_LAUNCH_FAILED)
            volumes = [self._volume(volume, sandbox, run_dir) for volume in mounted]
            hostname = info.hostname
            if hostname and not uts:
                raise LaunchError(f"task {task.task_id} asks for the host name {hostname!r}, and this agent gives "
                                  "tasks no UTS namespace (--isolation lacks namespaces/uts)",
                                  REASON_CONTAINER_LAUNCH_FAILED)
        # fresh lists each launch (a caller may change its spec: the image's cgroups path); the tmp joined as
        # strings (a Path's "/" parses anew)
        return {"namespaces": list(namespaces), "tmp": os.path.join(sandbox, "tmp") if mounts else "",
                "keep": list(self.kept_paths) if mounts else [], "hostname": hostname, "volumes": volumes,
                "isolation": list(isolators)}

    def _image_spec(self, framework_id: str, task: TaskInfo, agent_id: str, info: ContainerInfo,
                    sandbox: Path, run_dir: Path) -> dict:
        """What the supervisor of a task with a container image makes of
        it (:meth:`.supervisor.Supervisor.start_container`): the image, its
        container's runc, bundle, network, host name, cgroups, command,
        environment and volumes. The supervisor is the init of the task's
        PID namespace (the container joins it) and has a mount namespace
        of its own (the overlay goes with it)."""
        name = info.image_name()
        if not self.isolation.images or self.image_store is None:
            why = next((w for w in self.isolation.warnings if w.startswith("docker/runtime")),
                       "--isolation lacks docker/runtime")
            raise LaunchError(f"image {name}: this agent runs no tasks with images ({why})",
                              REASON_CONTAINER_LAUNCH_FAILED)
        if task.executor is not None:
            raise LaunchError(f"image {name}: a custom executor's container cannot have an image on this agent",
                              REASON_CONTAINER_LAUNCH_FAILED)
        if "pid" not in self.isolation.namespaces:
            raise LaunchError(f"image {name}: image containers need namespaces/pid", REASON_CONTAINER_LAUNCH_FAILED)
        docker = info.docker
        network = "none" if (docker is not None and docker.network == "NONE") or "net" in self.isolation.namespaces \
            else "host"
        force_pull = docker.force_pull_image if docker is not None else not (info.image is None or info.image.cached)
        container_id = f"{self.container_prefix}.{path_component(task.task_id)[:40]}.{os.urandom(6).hex()}"
        # the container's environment: the image's, then the task's own and its agent's variables (with the
        # sandbox where the container sees it); its secret variables are the supervisor's to add
        env = task_environment({}, task.environment,
                               task_variables(framework_id, task.task_id, agent_id, RUNC_SANDBOX))
        image = {"name": name, "force_pull": force_pull, "runc": self.isolation.runc, "root": str(self.runc_root),
                 "id": container_id, "bundle": str(self.work_dir / "containers" / container_id),
                 "network": network, "hostname": info.hostname or _container_hostname(self.hostname),
                 "cgroups_path": "", "shell": task.shell, "command": task.command,
                 "arguments": list(task.arguments), "env": env, "store": self.image_store,
                 "volumes": [self._image_volume(volume, sandbox, run_dir) for volume in info.volumes
                             if not _secret_in_sandbox(volume)]}
        return {"namespaces": ["pid", "mount"], "tmp": "", "keep": [], "hostname": "", "volumes": [],
                "isolation": list(self.isolation.isolators), "image": image}

    def _image_volume(self, volume: Volume, sandbox: Path, run_dir: Path) -> dict:
        """A volume of an image's container, as the supervisor checks and
        runc mounts it: ``container_path`` is in the image's root
        filesystem (relative: below the sandbox at /mnt/mesos/sandbox)."""
        source = volume.source
        target = volume.container_path
        destination = target if target.startswith("/") else f"{RUNC_SANDBOX}/{target}"
        spec = {"destination": destination, "readonly": volume.mode == "RO"}
        if source.image is not None:   # an IMAGE volume
            return {"destination": destination, "readonly": True,
                    "image": {"name": source.image.name, "force_pull": not source.image.cached}}
        return {**spec, **self._volume_source(volume, sandbox, run_dir, "")}

    def _volume(self, volume: Volume, sandbox: Path, run_dir: Path) -> dict:
        """A volume of a container without an image, as the supervisor binds
        it (:func:`.namespaces.bind`): a relative ``container_path`` is in
        the sandbox (made there), an absolute one must exist on the agent
        (the task's mount namespace covers it, the host keeps it)."""
        target = volume.container_path
        relative = not target.startswith("/")
        if not relative and not os.path.lexists(target):
            raise LaunchError(f"volume at {target}: a container without an image mounts at absolute paths of the "
                              "agent only, and this one does not exist there", REASON_CONTAINER_LAUNCH_FAILED)
        spec = {"target": str(sandbox / target) if relative else target, "readonly": volume.mode == "RO",
                "create": str(sandbox) if relative else ""}
        return {**spec, **self._volume_source(volume, sandbox, run_dir, " for a container without an image")}

    def _volume_source(self, volume: Volume, sandbox: Path, run_dir: Path, where: str) -> dict:
        """Where a SANDBOX_PATH, HOST_PATH or SECRET volume's source is, and
        the directory it must stay in (checked by the supervisor on what it
        mounts); :class:`LaunchError` for a host path not allowed or
        another kind. A secret's file (at an absolute ``container_path``:
        one at a relative path is no mount) is the one the supervisor
        writes in the run directory before the container exists, always
        bound read-only."""
        source = volume.source
        if source.type == "SECRET":
            path = secret_file_host_path(str(sandbox.resolve()), str(run_dir), volume.container_path)
            return {"source": path, "within": str(run_dir / RUN_DIR_SECRETS), "readonly": True}
        if source.type == "SANDBOX_PATH":
            return {"source": str(sandbox / source.path), "within": str(sandbox), "make_source": True}
        if source.type == "HOST_PATH":
            allowed = self._allowed_host_path(source.path)
            if allowed is None:
                raise LaunchError(f"HOST_PATH volume {source.path}: not below a path this agent allows "
                                  f"(--allowed-host-paths: {', '.join(self.allowed_host_paths) or 'none'})",
                                  REASON_CONTAINER_LAUNCH_FAILED)
            return {"source": source.path, "within": allowed}
        raise LaunchError(f"{source.type} volumes are not supported{where} on this agent",
                          REASON_CONTAINER_LAUNCH_FAILED)

    def _allowed_host_path(self, path: str) -> str | None:
        """The entry of ``--allowed-host-paths`` ``path`` lies in (symlinks
        resolved; the supervisor checks again on what it mounts), or None."""
        real = os.path.realpath(path)
        for allowed in self.allowed_host_paths:
            if real == allowed or real.startswith(allowed.rstrip("/") + "/"):
                return allowed
        return None

    def _discard_container_files(self, run_dir: Path) -> None:
        """An image task whose supervisor died: its bundle and runc's state
        for it go (its mounts went with the supervisor's mount namespace)."""
        image = _launch_image(run_dir)
        if image:
            for directory in (image.get("bundle"), os.path.join(str(self.runc_root), str(image.get("id", "")))):
                if isinstance(directory, str) and image.get("id") and Path(directory).is_relative_to(self.work_dir):
                    self.run_dir_remover.discard(Path(directory))

    def image_leases(self) -> set[str]:
        """The image store's lease holders of the running image tasks (their
        containers' ids and their image volumes'): what a restarted agent keeps."""
        leases: set[str] = set()
        for run in self._runs.values():
            image = _launch_image(run.run_dir)
            if image and isinstance(image.get("id"), str):
                volumes = image.get("volumes")
                volumes = volumes if isinstance(volumes, list) else []
                leases.add(image["id"])
                leases.update(f"{image['id']}.volume-{index}" for index in range(len(volumes)))
        return leases

    def _abandon(self, container: Container | None) -> None:
        if container is not None:
            try:
                self.isolator.destroy(container)
            except OSError as exc:
                log.warning("could not remove the container %s: %s", container.cgroups, exc)

    def _container_name(self, framework_id: str, task_id: str) -> str:
        digest = hashlib.sha256(f"{framework_id}\0{task_id}".encode("utf-8", "surrogatepass")).hexdigest()[:8]
        return f"{self.container_prefix}.{path_component(task_id)[:40]}-{digest}.{os.urandom(4).hex()}"

    def _resolve_secrets(self, task: TaskInfo, principal: str, sandbox: Path, run_dir: Path,
                         secret_files: Mapping[str, bytes] | None) -> TaskSecrets:
        try:
            return resolve_task_secrets(task, principal, self.secrets, sandbox=self._resolved(sandbox),
                                        run_dir=str(run_dir), extra_files=secret_files,
                                        container=_process_container(task))
        except SecretError as exc:
            raise LaunchError(str(exc), REASON_CONTAINER_LAUNCH_FAILED) from None

    def _write_run_files(self, run_dir: Path, framework_id: str, task: TaskInfo, agent_id: str, sandbox: Path,
                         container: Container, spec: dict, secrets: TaskSecrets) -> None:
        # the final exit status always fits in place, even on a full disk (writing it takes its space).
        # The run files are not fsynced (issue 14: two fsyncs a launch on the agent's loop): a machine
        # crash ends the supervisor that would read them too, and a killed agent loses no written byte.
        # (exit.json's placeholder is in place already: _blank_run_files wrote it)
        cwd = str(sandbox)   # joined as strings: a Path's "/" parses anew (pathlib was a tenth of a launch)
        launch = {"framework_id": framework_id, "task_id": task.task_id, "command": task.command,
                  "argv": [] if task.shell else _exec_argv(task),
                  "cwd": cwd, "env": self._task_environment(framework_id, task, agent_id, sandbox),
                  "stdout": f"{cwd}/stdout", "stderr": f"{cwd}/stderr",
                  "grace_period": task.kill_grace_period, "recovery_timeout": self.recovery_timeout,
                  "agent_pid_file": str(self.agent_pid_file), "container": container.to_json(),
                  "user": task.user if self.switch_user else "",
                  "health_check": msgspec.to_builtins(task.health_check) if task.health_check is not None else None,
                  # where its secret files go (never what they hold): the supervisor removes them at the end,
                  # /files serves none of them
                  "secret_files": [path for path, _, _ in secrets.files],
                  # whether there is a secrets.json to take (a supervisor of before this key looks for it)
                  "secrets": bool(secrets),
                  "uris": [msgspec.structs.asdict(uri) for uri in task.uris],
                  "fetcher": {"cache_dir": self._fetcher_cache_dir,
                              "cache_size": self.fetcher.cache_size, "timeout": self.fetcher.timeout,
                              "max_size": self.fetcher.max_size},
                  **spec, **self.isolator.launch_spec(container)}
        if secrets:   # the values: for the supervisor alone (it removes the file once read), 0600 in meta (0700)
            write_secrets_file(run_dir, secrets)
        # whole before the supervisor is started (it reads it then); one cut short by the agent's death
        # never had a supervisor, and recovery reads it as no container
        _write_new_file(f"{os.fspath(run_dir)}/{sup.LAUNCH_FILE}", _launch_json(launch))

    def _task_paths(self, framework_id: str, task_id: str) -> tuple[Path, Path]:
        """:func:`sandbox_path` and :func:`run_dir_path` of the task (equal
        Paths), each its framework's kept parent ``/`` the task's component:
        a Path of the whole path parsed from a string, twice a launch and
        once a forget, was ~15 µs of the agent's CPU a task."""
        parents = self._framework_paths.get(framework_id)
        if parents is None:
            if len(self._framework_paths) >= MAX_CHECKED_FRAMEWORK_DIRS:
                self._framework_paths.clear()
            component = path_component(framework_id)
            parents = self._framework_paths[framework_id] = (
                Path(os.path.join(self.work_dir, "sandboxes", component)),
                Path(os.path.join(self.work_dir, "meta", "tasks", component)))
        name = path_component(task_id)
        return _child(parents[0], name), _child(parents[1], name)

    def _make_sandbox(self, framework_id: str, task_id: str) -> Path:
        sandbox = self._task_paths(framework_id, task_id)[0]
        made = self._made_in_checked_framework_dir(sandbox)
        if made is not None:
            self._real_sandbox = (sandbox, made)
            return sandbox
        sandbox.mkdir(parents=True, exist_ok=True)
        if self.switch_user:  # the framework's directory: traversed by its tasks' users, listed by none
            os.chmod(sandbox.parent, 0o711)
        # belt and braces against symlinks planted below the work dir (the root's own path resolved once:
        # the operator's, not a task's; the sandbox's every launch, once, and that path used for the launch)
        if self._real_sandbox_root is None:
            self._real_sandbox_root = self.sandbox_root.resolve()
        real = sandbox.resolve()
        if self._real_sandbox_root not in real.parents:
            raise LaunchError(f"sandbox {sandbox} resolves outside {self._real_sandbox_root}")
        self._real_sandbox = (sandbox, str(real))
        self._remember_framework_dir(os.path.dirname(os.fspath(sandbox)), str(real.parent))
        return sandbox

    def _made_in_checked_framework_dir(self, sandbox: Path) -> str | None:
        """The task's sandbox made new (one ``mkdir``) in a framework
        directory checked by an earlier launch and still that directory
        (one ``stat``: the same inode), and its real path; None if that
        cannot be told so (the sandbox exists, the framework directory is
        new, gone or another): :meth:`_make_sandbox` makes and checks it
        in full. A directory ``mkdir`` just made is no symlink, and the
        framework directory is the agent's (``0711`` under ``--switch-user``):
        a task's user can plant nothing on this path."""
        path = os.fspath(sandbox)
        parent, name = os.path.split(path)   # strings: no Path made, parsed and hashed
        checked = self._framework_dirs.get(parent)
        if checked is None:
            return None
        try:
            os.mkdir(path)
        except OSError:
            return None
        try:
            now = os.stat(parent)
        except OSError:
            return None
        if (now.st_dev, now.st_ino) != checked[:2]:
            del self._framework_dirs[parent]
            return None
        return f"{checked[2]}/{name}"

    def _remember_framework_dir(self, directory: str, real: str) -> None:
        try:
            now = os.stat(directory)
        except OSError:
            return
        if len(self._framework_dirs) >= MAX_CHECKED_FRAMEWORK_DIRS:
            self._framework_dirs.clear()
        self._framework_dirs[directory] = (now.st_dev, now.st_ino, real)

    def _resolved(self, sandbox: Path) -> str:
        """``sandbox``'s real path: the one :meth:`_make_sandbox` checked, if it is that sandbox."""
        checked = self._real_sandbox
        if checked is not None and (checked[0] is sandbox or checked[0] == sandbox):   # the same Path: no compare
            return checked[1]
        return str(sandbox.resolve())

    def _task_environment(self, framework_id: str, task: TaskInfo, agent_id: str, sandbox: Path) -> dict[str, str]:
        """The task's environment without its secrets (:mod:`.environment`):
        never the agent's own."""
        switched = self.switch_user and bool(task.user)   # the supervisor sets the task user's HOME, USER
        base = self._base_environments[switched]
        executor_id = task.executor.executor_id if task.executor is not None else ""
        return task_environment(base, task.environment,
                                task_variables(framework_id, task.task_id, agent_id, self._resolved(sandbox),
                                               executor_id))

    @staticmethod
    def _supervisor_environment(framework_id: str, task_id: str, sandbox: Path) -> dict[str, str]:
        # the task's identity, so that a process listing (and a test's clean-up) can tell whose it is
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MESOSLIKE_SUPERVISOR": "1",
                "MESOSLIKE_TASK_ID": task_id, "MESOSLIKE_FRAMEWORK_ID": framework_id,
                "MESOSLIKE_SANDBOX": str(sandbox.resolve())}

    # ---------------------------------------------------------------- kill
    def kill(self, framework_id: str, task_id: str, grace_period: float) -> bool:
        """Ask the task's supervisor to kill it: SIGTERM to the task's process
        group now, SIGKILL after the task's grace period (at once if
        ``grace_period`` <= 0). False if the task is not running."""
        run = self._runs.get((framework_id, task_id))
        if run is None:
            return False
        log.info("killing task %s/%s (grace %.1f s)", framework_id, task_id, max(0.0, grace_period))
        run.watch.signal(signal.SIGUSR1 if grace_period <= 0 else signal.SIGTERM)
        # a supervisor that has not ended a while after the grace is stuck: it goes too
        deadline = self.clock.now() + max(0.0, grace_period) + sup.CLEANUP_LIMIT + 5.0
        run.kill_deadline = deadline if run.kill_deadline is None else min(run.kill_deadline, deadline)
        self._killing.add((framework_id, task_id))
        return True

    # ------------------------------------------------------------- watching
    def poll(self) -> list[ExecutorEvent]:
        """What happened to the tasks since the last look. Every run is
        looked at when some have supervisors of their own (their ends are
        seen so), and every :data:`OOM_CHECK_INTERVAL`; between, only the
        runs the shared supervisor told of — a loop turn costs what
        happened in it, not what runs."""
        now = self.clock.now()
        told: set[tuple[str, str]] = set()
        events: list[ExecutorEvent] = self._shared_told(told) if self._shared_runs else []
        if len(self._runs) > len(self._shared_runs) or now >= self._next_scan or not self.link.live:
            self._next_scan = now + OOM_CHECK_INTERVAL
            runs = list(self._runs.items())
        else:
            runs = [(key, self._runs[key]) for key in told if key in self._runs]
        for key, run in runs:
            if run.task_pid is None and not (isinstance(run.watch, _SharedWatch) and run.watch.start_told):
                run.task_pid = _task_pid(run.run_dir)
                if run.task_pid is not None:
                    events.append(run.started())
            if run.watch.ended():
                events.extend(self._ended(key, run))
                continue
            if run.kill_deadline is not None and now >= run.kill_deadline:
                log.error("the supervisor of task %s/%s (pid %d) does not end: SIGKILL", key[0], key[1],
                          run.watch.pid)
                run.watch.signal(signal.SIGKILL)
                run.kill_deadline = None
            if run.task_pid is not None and not run.limited and now >= run.next_oom_check:
                run.next_oom_check = now + OOM_CHECK_INTERVAL
                events.extend(self._check_limits(key, run))
            if run.checked and run.task_pid is not None:
                events.extend(self._check_health(key, run))
        if not events and not told and self.isolator.spares_short():
            # an idle turn: spare cgroups made ahead of the next burst, whose launches then make fewer
            if not self._pool_swept:
                self.sweep_pool()
            self.isolator.make_spares(self.container_prefix, SPARES_A_TURN)
        return events

    def sweep_pool(self) -> None:
        """The pooled cgroups and spares a killed earlier agent process left
        (its recovered tasks' kept): removed once, before the first launch
        or spare (recovery, at the agent's start, has run by then)."""
        self._pool_swept = True
        self.isolator.sweep(self.container_prefix, {directory for run in self._runs.values()
                                                    for directory in run.container.directories})

    def _shared_told(self, told: set[tuple[str, str]]) -> list[ExecutorEvent]:
        """What the shared supervisor told: tasks started (their pids),
        runs ended (with the exit status told, or :meth:`poll` then reads
        their ``exit.json``). After a
        connection made again, every shared run's ``exit.json`` is looked
        at (an end told meanwhile was lost)."""
        events: list[ExecutorEvent] = []
        link = self.link
        for kind, name, pid in link.receive():
            status = link.pop_exit_status(name) if kind == "E" else None
            key = self._shared_runs.get(name)
            run = self._runs.get(key) if key is not None else None
            if key is None or run is None:
                continue
            told.add(key)
            if kind == "S" and run.task_pid is None and pid > 0:   # never 0: a group signal to 0 is the agent's
                run.task_pid = pid
                events.append(run.started())
            elif kind == "E" and isinstance(run.watch, _SharedWatch):
                run.watch.done = True
                run.watch.status = status
        if self.link.reconnected:
            self.link.reconnected = False
            for name, key in self._shared_runs.items():
                run = self._runs.get(key)
                if run is None or not isinstance(run.watch, _SharedWatch):
                    continue
                told.add(key)
                if _supervisor_identity(run.run_dir) is None:
                    # never taken (its supervisor.json is the first thing written): the request was lost with
                    # the connection; asked again (one taken is never asked twice: it would run again)
                    self.link.send("L", name)
                if run.task_pid is None:
                    run.task_pid = _task_pid(run.run_dir)
                    if run.task_pid is not None:
                        events.append(run.started())
                run.watch.done = _has_ended(run.run_dir)
            self.link.flush()
        return events

    @staticmethod
    def _check_health(key: tuple[str, str], run: _Run) -> list[ExecutorEvent]:
        """The supervisor's latest health verdict, if it wrote a new one."""
        path = run.run_dir / HEALTH_FILE
        try:
            info = os.stat(path)
        except OSError:
            return []
        stamp = (info.st_mtime_ns, info.st_ino)
        if stamp == run.health_stamp:
            return []
        run.health_stamp = stamp
        health = read_health(str(path))
        if health is None or health[0] == run.health_changes or health[1] is None:
            return []
        run.health_changes = health[0]
        return [TaskHealth(key[0], key[1], health[1], health[2])]

    def _check_limits(self, key: tuple[str, str], run: _Run) -> list[ExecutorEvent]:
        if "mem" not in self.isolator.limits or not run.container.mem_bytes or not self.isolator.oom_kills(run.container):
            return []
        run.limited = True
        return [TaskLimited(key[0], key[1], REASON_CONTAINER_LIMITATION_MEMORY, _memory_message(run.container, None))]

    def _ended(self, key: tuple[str, str], run: _Run) -> list[ExecutorEvent]:
        """The supervisor has ended: how did the task end?"""
        del self._runs[key]
        self._killing.discard(key)
        run.watch.close()
        if isinstance(run.watch, _SharedWatch):
            self._shared_runs.pop(run.watch.name, None)
        events: list[ExecutorEvent] = []
        if run.task_pid is None:
            run.task_pid = _task_pid(run.run_dir)
            if run.task_pid is not None:
                events.append(run.started())
        if run.checked:
            events.extend(self._check_health(key, run))   # the verdict that killed it comes before the exit
        events.append(self._outcome(key, run))
        if run.forget:
            self._recycle(run.run_dir, run.plain)
        else:
            self._ended_run_dirs[key] = (run.run_dir, run.plain)   # no process of it writes there any more
        return events

    def _outcome(self, key: tuple[str, str], run: _Run) -> ExecutorEvent:
        watch = run.watch
        status = watch.status if isinstance(watch, _SharedWatch) and watch.status is not None else None
        if status is None:
            status = _exit_status(run.run_dir)
        if status is None or not status.get("ended"):
            # the supervisor died without a word: its task (if any) must not run on unsupervised
            if run.task_pid is not None:
                _signal_group(run.task_pid, signal.SIGKILL)
            self._abandon(run.container)
            self._discard_container_files(run.run_dir)
            message = _with_full_disk(f"the task's executor (supervisor pid {run.watch.pid}) died"
                                      f"{run.watch.how_it_ended()}", run.sandbox)
            if run.task_pid is None:
                return LaunchFailed(key[0], key[1], message, REASON_EXECUTOR_TERMINATED)
            return TaskExit(key[0], key[1], None, None, REASON_EXECUTOR_TERMINATED, message)
        if status.get("reason") == sup.REASON_LAUNCH_FAILED:
            self._abandon(run.container)
            return LaunchFailed(key[0], key[1], _with_full_disk(str(status.get("message", "")), run.sandbox))
        code, signum = _int_or_none(status.get("exit_code")), _int_or_none(status.get("signal"))
        if status.get("reason") == sup.REASON_CONTAINER_FAILED:
            self._abandon(run.container)
            return LaunchFailed(key[0], key[1], str(status.get("message", "")), REASON_CONTAINER_LAUNCH_FAILED)
        if status.get("reason") == sup.REASON_FETCH_FAILED:
            self._abandon(run.container)
            return LaunchFailed(key[0], key[1], str(status.get("message", "")), REASON_CONTAINER_LAUNCH_FAILED)
        if status.get("cgroups_kept") is True:   # emptied, no OOM kill: they may serve another task
            self.isolator.give_back(run.container)
        if status.get("reason") == sup.REASON_HEALTH_CHECK_FAILED:
            return TaskExit(key[0], key[1], code, signum, REASON_TASK_HEALTH_CHECK_STATUS_UPDATED,
                            str(status.get("message", "")))
        if status.get("reason") == sup.REASON_RECOVERY_TIMEOUT:
            return TaskExit(key[0], key[1], code, signum, REASON_EXECUTOR_REREGISTRATION_TIMEOUT,
                            str(status.get("message", "")))
        if "mem" in self.isolator.limits and run.container.mem_bytes and _int_or_none(status.get("oom_kills")):
            return TaskExit(key[0], key[1], code, signum, REASON_CONTAINER_LIMITATION_MEMORY,
                            _memory_message(run.container, _int_or_none(status.get("memory_peak_bytes"))))
        message = _with_full_disk("", run.sandbox) if code != 0 else ""
        return TaskExit(key[0], key[1], code, signum, "", message)

    def kill_all(self, grace_period: float | None = None, give_up_after: float = 5.0) -> list[ExecutorEvent]:
        """Kill every task and wait until all have ended; returns what
        happened meanwhile (their exits among it).

        Each task gets its own ``kill_grace_period`` unless ``grace_period``
        is given. A supervisor that has not ended its task by the kill's
        deadline (the grace, then :data:`supervisor.CLEANUP_LIMIT` and 5 s)
        is killed itself (:meth:`poll`); a task whose processes are still
        there ``give_up_after`` seconds after that — its supervisor stopped
        or starved, a shared one among them — has them SIGKILLed by the
        agent (its cgroup's, or its session's), waited for (up to
        :data:`KILLED_GONE_WAIT`) and is left with an error logged: an agent
        stopped with its tasks leaves none running.
        """
        graces = {key: self._grace(run) if grace_period is None else grace_period for key, run in self._runs.items()}
        for key, grace in graces.items():
            self.kill(key[0], key[1], grace)
        events = self.poll()
        # until every kill's deadline has passed (poll kills a stuck supervisor then), and give_up_after more
        deadlines = [run.kill_deadline for run in self._runs.values() if run.kill_deadline is not None]
        give_up = max(deadlines, default=self.clock.now()) + give_up_after
        while self._runs and self.clock.now() < give_up:
            time.sleep(0.01)
            events.extend(self.poll())
        killed: list[int] = []
        for key, run in self._runs.items():
            pids = self._kill_what_is_left(run)
            killed.extend(pids)
            log.error("task %s/%s (supervisor pid %d) did not end: %d of its processes SIGKILLed by the agent",
                      key[0], key[1], run.watch.pid, len(pids))
        # a SIGKILL takes effect when the process is next scheduled: wait (bounded) until each is gone or a
        # zombie, so that what called this finds none running when it returns
        until = time.monotonic() + KILLED_GONE_WAIT
        while killed and time.monotonic() < until:
            killed = [pid for pid in killed if _still_running(pid)]
            if killed:
                time.sleep(0.005)
        return events

    def _kill_what_is_left(self, run: _Run) -> list[int]:
        """SIGKILL the processes of a task its supervisor did not end (those
        of its cgroup, or of its session): the pids signalled."""
        try:   # (its start perhaps not yet told: the supervisor's task.json has its pid)
            pids = self.isolator.processes(run.container, run.task_pid or _task_pid(run.run_dir))
        except OSError:
            return []
        killed = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:   # ended meanwhile
                pass
        return killed

    @staticmethod
    def _grace(run: _Run) -> float:
        try:
            return float(sup.read_launch(str(run.run_dir / sup.LAUNCH_FILE))["grace_period"])
        except (OSError, ValueError, KeyError):
            return 3.0

    # ------------------------------------------------------------- recovery
    def recover(self, framework_id: str, task_id: str) -> list[ExecutorEvent]:
        """Find a task an earlier agent process started: its supervisor still
        runs (:class:`TaskStarted`, and the task is watched from now on), or
        it ended meanwhile (:class:`TaskStarted` if it had started, then how
        it ended), or it never started (:class:`LaunchFailed`)."""
        if not self._pid_file_written:
            self.write_agent_pid()
        key = (framework_id, task_id)
        self._framework_run_dirs[framework_id] = self._framework_run_dirs.get(framework_id, 0) + 1
        run_dir = run_dir_path(self.work_dir, framework_id, task_id)
        sandbox = sandbox_path(self.work_dir, framework_id, task_id)
        container = _launch_container(run_dir)
        identity = _supervisor_identity(run_dir)
        if identity is None:
            # no supervisor ever said it started: cancel the launch so that a late one finds nothing to run
            _cancel_launch(run_dir)
            identity = _supervisor_identity(run_dir)
            if identity is None:
                if container is not None:
                    self._abandon(container)
                return [LaunchFailed(framework_id, task_id, "the agent restarted before the task's supervisor "
                                                            "started", REASON_AGENT_RESTARTED)]
        pid, start_ticks = identity
        watch: _Watch | _SharedWatch | None
        if _is_shared(run_dir):
            # connected first, exit.json read then: an end after the connection is told, one before is there
            watch = _SharedWatch(self.link, _run_name(run_dir), identity) if self.link.attach(identity) else None
            if watch is not None:
                watch.done = _has_ended(run_dir)
                watch.start_told = False
                self._shared_runs[watch.name] = key
        else:
            watch = _Watch.adopt(pid, start_ticks)
        run = _Run(framework_id, task_id, run_dir, sandbox, container or Container(self.isolator.name),
                   watch or _Watch(pid, start_ticks=start_ticks), _task_pid(run_dir))
        run.checked = _launch_has_health_check(run_dir)
        run.isolation, run.image = _launch_isolation(run_dir)
        self._runs[key] = run
        events: list[ExecutorEvent] = [run.started()] if run.task_pid else []
        if watch is None or watch.ended():  # the supervisor (or the run) ended while no agent watched: how?
            return events + self._ended(key, run)
        log.info("task %s/%s: re-attached to its supervisor pid %d (task pid %s)", framework_id, task_id, pid,
                 run.task_pid)
        return events

    def destroy_run(self, run_dir: Path) -> None:
        """End whatever runs from ``run_dir`` (a run no checkpoint explains:
        it cannot be managed) and remove the directory."""
        identity = _supervisor_identity(run_dir)
        if identity is not None and not _is_shared(run_dir):   # a shared supervisor runs other tasks too
            watch = _Watch.adopt(*identity)
            if watch is not None:
                watch.signal(signal.SIGKILL)
                watch.close()
        task_pid = _task_pid(run_dir)
        if task_pid is not None:
            _signal_group(task_pid, signal.SIGKILL)
        container = _launch_container(run_dir)
        if container is not None:
            self._abandon(container)
        shutil.rmtree(run_dir, ignore_errors=True)

    def forget(self, framework_id: str, task_id: str) -> None:
        """The core is done with the task: remove its run directory now, or
        once its supervisor has ended."""
        left = self._framework_run_dirs.pop(framework_id, 0) - 1
        if left > 0:
            self._framework_run_dirs[framework_id] = left
        key = (framework_id, task_id)
        run = self._runs.get(key)
        if run is not None:
            run.forget = True
            return
        ended = self._ended_run_dirs.pop(key, None)
        if ended is not None:
            run_dir = ended[0]
            self._recycle(run_dir, ended[1])
        else:
            run_dir = self._task_paths(framework_id, task_id)[1]
            self.run_dir_remover.discard(run_dir)   # off the agent's loop (gc.RunDirRemover)
        if left > 0:   # (a failed rmdir of a framework's directory still in use was ~10 µs a task)
            return
        try:
            os.rmdir(os.path.dirname(run_dir))   # the framework's, once its last run is gone (no Path parsed)
        except OSError:
            pass

    def _recycle(self, run_dir: Path, plain: bool = False) -> None:
        """Keep the run directory of a task whose supervisor has ended as a
        spare for a later launch (issue 14: on a file system without a
        journal, such as this project's machines', every inode made soon
        after others were removed costs a scan past them, and each run made
        and removed five), up to :data:`MAX_SPARE_RUN_DIRS`; beyond, remove it.
        ``plain``: its files are known (:attr:`_Run.plain`), and its reuse
        need not list them."""
        spares = self._spare_run_dirs()
        if len(spares) >= MAX_SPARE_RUN_DIRS:
            self.run_dir_remover.discard(run_dir)
            return
        spare = next(self._spare_names)
        try:
            os.rename(run_dir, spare)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.debug("cannot keep %s as a spare run directory (%s): removing it", run_dir, exc)
            self.run_dir_remover.discard(run_dir)
            return
        spares.append(spare)
        if plain:
            self._plain_spares.add(spare)

    def _spare_run_dirs(self) -> list[str]:
        if self._spares is None:   # first use: those an earlier agent process kept are spares too
            self.spare_root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._spares = [str(entry) for entry in self.spare_root.iterdir() if entry.is_dir()]
        return self._spares

    def _make_run_dir(self, run_dir: Path, key: tuple[str, str]) -> None:
        """``run_dir`` (of the task ``key``), empty of an earlier run's files: a spare renamed into
        place if there is one (its files emptied, not removed: see
        :meth:`_recycle`), else made."""
        if self._ended_run_dirs:
            self._ended_run_dirs.pop(key, None)
        spares = self._spare_run_dirs()
        if spares:
            spare = spares.pop()
            plain = spare in self._plain_spares
            if plain:
                self._plain_spares.discard(spare)
            # blanked *before* it takes the run directory's place: an agent killed right after the rename
            # must not recover the new task from the last run's supervisor.json, task.json and exit.json
            _blank_run_files(spare, reused=True, plain=plain)
            # no look whether run_dir exists first (a walk of its path a launch): the rename takes the place
            # of nothing or of an empty directory (no run's state), and fails on anything else (ENOTEMPTY,
            # EEXIST, ENOTDIR: a directory with files, a file, a symlink), when the spare stays a spare
            try:
                try:
                    os.rename(spare, run_dir)
                except FileNotFoundError:   # the framework's first run here: its directory made first
                    run_dir.parent.mkdir(parents=True, exist_ok=True)
                    os.rename(spare, run_dir)
                return
            except OSError as exc:
                log.debug("cannot reuse a spare run directory for %s: %s", run_dir, exc)
                spares.append(spare)   # blanked: a spare still (not one whose files are known any more)
        run_dir.mkdir(parents=True, exist_ok=True)
        _blank_run_files(run_dir, reused=False)

    def release(self) -> None:
        """The agent stops (its tasks may run on): let go of the supervisors."""
        for run in self._runs.values():
            run.watch.close()
        if self.launcher is not None:
            self.launcher.close()
        self.link.close()
        self.isolator.release()

    # ------------------------------------------------------------ messages
    def deliver_message(self, framework_id: str, task_id: str, data: bytes) -> Path:
        """Append ``data`` to the task's ``messages`` file; returns its path.
        Raises ``OSError`` when the file cannot be written, or is not a plain
        file with one link: the sandbox may belong to the task's user, and
        the agent must not write through a link (or block on a FIFO) it planted."""
        path = sandbox_path(self.work_dir, framework_id, task_id) / MESSAGES_FILE
        _write_and_close(sup.open_sandbox_file(str(path)), data)
        return path


#: ``FS_IOC_GETFLAGS``, ``FS_IOC_SETFLAGS`` (``linux/fs.h``, 64-bit) and ``FS_TOPDIR_FL``: "the top of a
#: directory hierarchy" for ext2/3/4's Orlov allocator (``chattr +T``)
_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _FS_TOPDIR_FL = 0x80086601, 0x40086602, 0x00020000


def spread_children(directory: str | os.PathLike) -> bool:
    """Mark ``directory`` as the top of directory hierarchies (``chattr
    +T``; best effort: False where the file system has no such flag). ext4
    then places each directory made in it (the sandboxes' framework
    directories) as it places those made in ``/``: in a block group of its
    own with more free inodes than the average, rather than in the group of
    ``directory`` — and the sandboxes, their output files and their private
    ``/tmp`` directories below it follow their framework directory's group. Where
    other processes make and delete files near the work directory (all of
    ``/tmp`` shares a few groups), every inode made in those groups costs a
    scan past the ones they deleted in the last minutes (ext4 without a
    journal: ``recently_deleted``); in a group of their own the sandboxes'
    do not (docs/performance.rst, "The agent's launch toward half of raw
    spawn")."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        flags = array.array("l", [0])
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags, True)
        if not flags[0] & _FS_TOPDIR_FL:
            flags[0] |= _FS_TOPDIR_FL
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, flags, True)
        return True
    except OSError as exc:   # ENOTTY, EOPNOTSUPP: a file system without the flag (tmpfs, overlay); EPERM
        log.debug("cannot mark %s as the top of directory hierarchies: %s", directory, exc)
        return False
    finally:
        os.close(fd)


def destroy_containers_under(root: str | os.PathLike) -> int:
    """Kill what is left in, and remove, the cgroups of every task run below
    ``root`` (run directories of agents that were killed with their
    supervisors: a test's clean-up). Returns how many were removed."""
    removed = 0
    for launch_file in Path(root).glob("**/meta/tasks/*/*/" + sup.LAUNCH_FILE):
        container = _launch_container(launch_file.parent)
        if container is not None and container.cgroups and any(os.path.isdir(d) for d in container.directories):
            sup.kill_cgroups(container.directories)
            removed += sum(sup.remove_cgroup(d) for d in container.directories)
    return removed


# ------------------------------------------------------------- run files
def _task_pid(run_dir: Path) -> int | None:
    try:
        pid = sup.read_json(str(run_dir / sup.TASK_FILE))["pid"]  # type: ignore[index]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def _supervisor_identity(run_dir: Path) -> tuple[int, object] | None:
    try:
        record = sup.read_json(str(run_dir / sup.SUPERVISOR_FILE))
        pid, ticks = record["pid"], record["start_ticks"]  # type: ignore[index]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (pid, ticks) if isinstance(pid, int) else None


def _is_shared(run_dir: Path) -> bool:
    """Whether the run's supervisor is the agent's shared one (its ``supervisor.json`` says so)."""
    try:
        record = sup.read_json(str(run_dir / sup.SUPERVISOR_FILE))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("shared") is True


def _run_name(run_dir: Path) -> str:
    """A run directory as the shared supervisor names it: ``FRAMEWORK/TASK`` below ``meta/tasks``."""
    head, task = os.path.split(os.fspath(run_dir))   # strings: a Path's parent is a Path made and parsed
    return f"{os.path.basename(head)}/{task}"


def _has_ended(run_dir: Path) -> bool:
    status = _exit_status(run_dir)
    return status is not None and status.get("ended") is True


def _exit_status(run_dir: Path) -> dict | None:
    try:
        status = sup.read_json(os.path.join(run_dir, sup.EXIT_FILE))
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def _launch_container(run_dir: Path) -> Container | None:
    for name in (sup.LAUNCH_FILE, sup.LAUNCH_FILE + ".cancelled"):
        try:
            return Container.from_json(sup.read_json(str(run_dir / name))["container"])  # type: ignore[index]
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return None


def _launch_json(launch: dict) -> bytes:
    """``launch.json``'s bytes: JSON any reader of it takes (``json.loads``
    in the supervisors), encoded by msgspec — 2.6 µs where ``json.dumps``
    took 18 (a 3 KB launch: a task's environment, container and paths; 7 %
    of an agent's busy samples). Unsorted, UTF-8 rather than ``\\u``
    escapes. A launch msgspec will not encode (a lone surrogate of an
    undecodable environment byte) goes through ``json.dumps`` as before.
    (msgspec writes a float that is not finite as ``null``: none comes in
    a launch — the wire refuses them in a task, :mod:`mesoslike.wire.checking`
    — and the agent's own settings are finite.)"""
    try:
        return _encode_json(launch)
    except (TypeError, ValueError, UnicodeEncodeError, OverflowError):
        return json.dumps(launch).encode()


def _write_new_file(path: str, data: bytes) -> None:
    sup.overwrite(path, data, mode=0o600)   # into a reused run directory's file, if there is one


def _blank_run_files(run_dir: str | os.PathLike, reused: bool, plain: bool = False) -> None:
    """Empty ``run_dir`` of an earlier run's state: a blank launch.json,
    supervisor.json, task.json or exit.json reads as none (not written yet);
    their files are kept (see :meth:`TaskExecutor._recycle`). exit.json
    becomes the next run's placeholder at once ("not ended", at full size:
    its final status always fits), made if missing: one write, not two.
    ``plain``: the directory is known to hold those four files and no other
    (a run of the shared supervisor without secrets, :attr:`_Run.plain`):
    the three are cut without a listing of the directory first."""
    directory = os.fspath(run_dir)   # its files' paths joined as strings (no Path parsed a file)
    _write_new_file(os.path.join(directory, sup.EXIT_FILE), sup.exit_placeholder())
    if plain:
        for name in (sup.LAUNCH_FILE, sup.SUPERVISOR_FILE, sup.TASK_FILE):
            try:
                os.truncate(os.path.join(directory, name), 1)
            except FileNotFoundError:
                pass
        return
    present = set(os.listdir(directory))   # one read of the directory, not a failed call per file it lacks
    for name in (sup.LAUNCH_FILE, sup.SUPERVISOR_FILE, sup.TASK_FILE):
        if name in present:
            try:   # cut to its first byte ("{"): a cut JSON object, read as "not written yet"; one system
                # call, where overwriting it with a blank was four (open, write, truncate, close)
                os.truncate(os.path.join(directory, name), 1)
            except FileNotFoundError:
                pass
    for stale in (HEALTH_FILE, sup.LAUNCH_FILE + ".cancelled", SECRETS_FILE) + ((sup.LOG_FILE,) if reused else ()):
        if stale in present:
            try:
                os.unlink(os.path.join(directory, stale))
            except FileNotFoundError:
                pass
    if RUN_DIR_SECRETS in present:   # an earlier run's bind-mounted secret files
        shutil.rmtree(os.path.join(directory, RUN_DIR_SECRETS), ignore_errors=True)


def _write_and_close(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _exec_argv(task: TaskInfo) -> list[str]:
    """The argv of a task with ``shell`` false, as Mesos's: ``command``
    (``value``) the program and ``arguments`` its argv (its name first), or
    without a program ``arguments`` alone (``arguments[0]`` the program)."""
    if task.command:
        return [task.command, *task.arguments[1:]]
    return list(task.arguments)


def _process_container(task: TaskInfo) -> ContainerInfo | None:
    """The container of the process ``task`` stands for: its own, or a
    custom executor's process run's — its ``ExecutorInfo``'s (its tasks share it)."""
    if task.container is None and task.executor is not None and task.task_id == task.executor.run_id():
        return task.executor.container
    return task.container


def _secret_in_sandbox(volume: Volume) -> bool:
    """A ``SECRET`` volume at a relative path: a file the supervisor writes
    into the sandbox (:mod:`.secrets`), no mount."""
    return volume.source.type == VolumeSource.SECRET and not volume.container_path.startswith("/")


def _container_hostname(hostname: str) -> str:
    """The agent's name as a container's host name (a UTS name: at most 63 characters)."""
    return hostname[:63] or "mesoslike"


def _launch_image(run_dir: Path) -> dict | None:
    """The ``image`` of a run's launch file (None: not an image task, or unreadable)."""
    try:
        launch = sup.read_json(str(run_dir / sup.LAUNCH_FILE))
    except (OSError, ValueError):
        return None
    image = launch.get("image") if isinstance(launch, dict) else None
    return image if isinstance(image, dict) else None


def _launch_isolation(run_dir: Path) -> tuple[tuple[str, ...], str]:
    """The isolators a run got and its image ('' for none), as its launch file says."""
    try:
        launch = sup.read_json(str(run_dir / sup.LAUNCH_FILE))
    except (OSError, ValueError):
        return (), ""
    if not isinstance(launch, dict):
        return (), ""
    names, image = launch.get("isolation", []), launch.get("image")
    isolators = tuple(name for name in names if isinstance(name, str)) if isinstance(names, list) else ()
    return isolators, str(image.get("name", "")) if isinstance(image, dict) else ""


def _resource_isolators(isolator: Isolator) -> tuple[str, ...]:
    """Mesos's names of what an isolator of resources alone gives."""
    kind = "cgroups" if isolator.enforcing else "posix"
    return tuple(f"{kind}/{resource}" if resource in isolator.limits or kind == "posix" else f"posix/{resource}"
                 for resource in ("cpu", "mem"))


def _kept_paths(work_dir: Path) -> tuple[str, ...]:
    """What a task with a private ``/tmp`` still sees there: the top
    directory below ``/tmp`` of the agent's work directory (sandboxes, run
    directories, the executors' socket — and what lies beside them: a
    ``mesoslike local`` cluster's or a test's files) and of the Python the
    agent and its tasks' tools run from (a virtualenv in ``/tmp``)."""
    package = Path(sup.__file__).resolve().parents[2]   # the directory that holds mesoslike/
    candidates = [work_dir, package, Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent]
    tmp = os.path.realpath("/tmp")
    kept = []
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if real.startswith(tmp + "/"):
            top = os.path.join(tmp, os.path.relpath(real, tmp).split(os.sep)[0])
            if top not in kept:
                kept.append(top)
    return tuple(kept)


def _own_user_environment() -> dict[str, str]:
    import pwd

    try:
        entry = pwd.getpwuid(os.geteuid())
    except KeyError:
        return {}
    return user_entry_environment(entry.pw_name, entry.pw_dir)


def _launch_has_health_check(run_dir: Path) -> bool:
    try:
        launch = sup.read_json(str(run_dir / sup.LAUNCH_FILE))
    except (OSError, ValueError):
        return False
    return isinstance(launch, dict) and launch.get("health_check") is not None


def _cancel_launch(run_dir: Path) -> None:
    try:
        os.replace(run_dir / sup.LAUNCH_FILE, run_dir / (sup.LAUNCH_FILE + ".cancelled"))
    except FileNotFoundError:
        pass


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _memory_message(container: Container, peak: int | None) -> str:
    limit_mb = container.mem_bytes / (1024 * 1024)
    used = f"; it used up to {peak / (1024 * 1024):.1f} MB" if peak else ""
    return (f"memory limit exceeded: the task may use {limit_mb:g} MB (mem:{limit_mb:g}){used}, and the kernel's "
            "out-of-memory killer ended a process of it")


def _with_full_disk(message: str, sandbox: Path) -> str:
    """``message``, plus a word about the sandbox's file system if it is full."""
    try:
        usage = shutil.disk_usage(sandbox)
    except OSError:
        return message
    if usage.free >= DISK_FULL_BYTES:
        return message
    full = f"the sandbox's file system is full ({usage.free} bytes free of {usage.total} at {sandbox})"
    return f"{message}; {full}" if message else full


def launch_problem(exc: BaseException, work_dir: Path) -> str:
    """What to tell of a launch that failed with ``exc``: a full work directory said in words."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"the work directory's file system is full ({work_dir}: no space left on device)"
    return f"{type(exc).__name__}: {exc}"


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # the group is already empty
    except PermissionError as exc:  # pragma: no cover - a group we do not own
        log.error("cannot signal process group %d: %s", pgid, exc)


def _still_running(pid: int) -> bool:
    """Whether ``pid`` is there and not a zombie (a killed process whose
    parent has not reaped it is gone for every purpose but its entry)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")
