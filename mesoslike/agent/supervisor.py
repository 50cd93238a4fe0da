"""A task's supervisor: the small per-task process (our *executor*, in
Mesos's words) that runs one task, outlives the agent, and records how the
task ended. (The tasks with no image, URIs or health check — with
namespaces, through the compiled init helper :mod:`.nsinit` — share one
long-lived supervisor per agent instead,
:mod:`.shared_supervisor`, which runs this module's :class:`Supervisor`
for each of them with its own loop, and writes the same run files.)

The agent starts it in a session of its own (so the agent's Ctrl-C, SIGTERM
or death leaves it alone) as ``python -I -S supervisor.py RUN_DIR``. It uses
the standard library only and is run as a file, not through the package,
so that it starts in ~30 ms and holds ~10 MB. It talks to the agent through
files in ``RUN_DIR`` (each written whole: temp file, rename; not fsynced,
see :data:`RUN_FILES_DURABLE`) and two signals:

==================  =========================================================
``launch.json``     written by the agent: what to run and how
                    (:func:`read_launch` says which keys)
``supervisor.json`` the supervisor's pid and start time (written first, so a
                    restarted agent can tell it from a process that reused
                    the pid)
``task.json``       the task's pid, once it runs, and how it was started
                    (``started``: ``spawn``, ``fork`` — a user to switch to
                    — or ``runc``)
``exit.json``       ``{"ended": false}`` until the task ended, then its exit
                    status (:data:`EXIT_KEYS`); pre-made by the agent at full
                    size, and the final status written over it in place (no
                    file made or removed, room even on a full disk:
                    :func:`write_exit_status`)
``supervisor.log``  what the supervisor itself says (stdout and stderr); one
                    forked by the launcher makes it only once it says something
``health.json``     the task's health, written on each change, when it has a
                    health check (:mod:`.health`)
==================  =========================================================

Before the task starts, the supervisor fetches its URIs into the sandbox
(``uris`` and ``fetcher`` in ``launch.json``; :mod:`.fetcher`): a fetch that
fails ends the run with ``reason: "fetch_failed"`` and the task never runs.
Once it runs, a task with a ``health_check`` is checked by a thread of the
supervisor (:mod:`.health`); ``consecutive_failures`` failed checks kill it
(as for SIGTERM) with ``reason: "health_check_failed"``. Both modules are
standard library only and loaded by their path, only when a task needs them.

The task runs as ``/bin/sh -c COMMAND`` in a session and process group of
its own (its pid is the group id), inside the task's cgroups (it writes its
own pid into each ``cgroup.procs`` before ``exec``; the supervisor stays
outside, so its memory is not charged to the task), with the environment,
working directory and output files of ``launch.json``.

With a ``user`` in ``launch.json`` (the agent's ``--switch-user``) the task
runs as that unix user: the supervisor — root, like the agent — looks the
user up (``pwd.getpwnam``; a user this machine does not have fails the
launch, naming it: never root instead), gives it the sandbox directory and
the ``stdout``/``stderr`` files, sets ``HOME``, ``USER`` and ``LOGNAME``
(unless the task's environment has them), and the task's process drops to
the user's uid, gid and groups (``os.getgrouplist``) after it joined its
cgroups — which only root may do — and before ``exec``. The supervisor
stays root, so it can still kill the task and its cgroups and record how it
ended. The output files are opened without following symlinks and must be
plain files, so a task cannot make its root supervisor (or a later run of
the same task id) write anywhere else.

Signals from the agent: ``SIGTERM`` — kill the task: SIGTERM to its process
group, SIGKILL after ``grace_period`` seconds; ``SIGUSR1`` — kill it at once
(SIGKILL). SIGINT and SIGHUP are ignored. When the task's leading process
exits, whatever is left of its group and of its cgroups is SIGKILLed, the
cgroups' out-of-memory counters are read, the cgroups are removed, and
``exit.json`` is written. Then the supervisor exits.

Recovery timeout: the agent's pid and start time are in the file
``agent_pid_file`` names. The supervisor looks every second; once that agent
process has been gone for ``recovery_timeout`` seconds (no agent came back
on the work directory, or none re-attached), it kills the task (as for
SIGTERM) and records ``reason: "recovery_timeout"`` (Mesos's executors do
the same when their agent does not come back within ``--recovery_timeout``).
"""

from __future__ import annotations

import errno
import gc
import json
import os
import pwd
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable   # imported already by subprocess: nothing more at the start

__all__ = ["LAUNCH_FILE", "SUPERVISOR_FILE", "TASK_FILE", "EXIT_FILE", "LOG_FILE", "EXIT_PLACEHOLDER_SIZE",
           "EXIT_KEYS", "REASON_RECOVERY_TIMEOUT", "REASON_LAUNCH_FAILED", "REASON_HEALTH_CHECK_FAILED",
           "REASON_FETCH_FAILED", "REASON_CONTAINER_FAILED", "load_sibling", "write_atomically", "overwrite",
           "write_json_atomically", "read_json", "exit_placeholder", "process_start_ticks", "cgroup_pids",
           "kill_cgroups", "join_cgroup", "flat_keyed", "parse_flat_keyed", "read_int", "remove_cgroup", "LaunchProblem", "TaskUser", "resolve_user",
           "open_sandbox_file", "is_own_identity", "main", "serve_launches"]

LAUNCH_FILE = "launch.json"
SUPERVISOR_FILE = "supervisor.json"
TASK_FILE = "task.json"
EXIT_FILE = "exit.json"
LOG_FILE = "supervisor.log"
#: bytes of the pre-made ``exit.json``: the final status always fits in it
EXIT_PLACEHOLDER_SIZE = 4096
#: what ``exit.json`` holds once the task ended
EXIT_KEYS = ("ended", "exit_code", "signal", "reason", "message", "killed", "oom_kills", "memory_peak_bytes",
             "ended_at", "cgroups_kept")
REASON_RECOVERY_TIMEOUT = "recovery_timeout"
REASON_LAUNCH_FAILED = "launch_failed"
#: killed by its health check (the message says which check failed and why)
REASON_HEALTH_CHECK_FAILED = "health_check_failed"
#: never started: a URI could not be fetched (the message names it and says why)
REASON_FETCH_FAILED = "fetch_failed"
#: never started: its container could not be made — its image pulled, its bundle built, runc run (the
#: message names the image and the cause)
REASON_CONTAINER_FAILED = "container_failed"

#: The supervisor's own run files (``supervisor.json``, ``task.json``,
#: ``exit.json``) are written whole (a rename) but not fsynced: six fsyncs a
#: task were most of a supervisor's wall time and queued behind the agent's
#: journal on the same disk (issue 14). What they are read for survives
#: without: a killed *agent* loses no written byte (the page cache is the
#: kernel's), and a machine crash ends the supervisor and its task as well.
#: After such a crash nothing runs, and a run file that did not reach the
#: disk reads as missing, which recovery already treats as a supervisor that
#: never started (launch cancelled) or died (``TASK_FAILED``, executor
#: terminated). The task's end becomes durable where Mesos makes it so: the
#: agent reads ``exit.json`` and journals the update, with an fdatasync,
#: before anyone is told (``checkpoint.TaskJournal``); until then a machine
#: crash loses it as it would lose a Mesos executor's unacknowledged update.
RUN_FILES_DURABLE = False

SHELL = "/bin/sh"
#: mode of a switched task's sandbox: its user's only (the agent, root, reads it anyway)
SANDBOX_MODE = 0o700
#: how often the agent's liveness is looked at (s)
AGENT_CHECK_INTERVAL = 1.0
#: how long the remains of a task are SIGKILLed before giving up on them (s)
CLEANUP_LIMIT = 5.0
#: bytes still charged to a pooled task's memory cgroup (page cache its task left) above which it is removed,
#: not kept for another task: the next one starts with next to nothing counted against its limit
POOL_MEMORY_LEFT = 1 << 20
#: SIGUSR2: sent by the supervisor's own health checker, to kill the task
_WATCHED = (signal.SIGCHLD, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
#: what a supervisor waits for (blocked from its start when it is an init: see serve_launches)
WATCHED_SIGNALS = _WATCHED
#: back to SIG_DFL in a spawned task: ignored here (by the supervisor, or by Python itself) or watched
_CHILD_DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ) + _WATCHED


# ----------------------------------------------------------- shared helpers
def write_atomically(path: str, data: bytes, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that a reader (or a crash) sees the old
    file or the new one, never a part: a temp file in the same directory,
    fsync, rename over, fsync of the directory. Without ``durable``, no
    fsync: a reader still sees a whole file (the rename), but a machine
    crash may lose it."""
    directory = os.path.dirname(path) or "."
    temp = f"{path}.tmp-{os.getpid()}"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    if not durable:
        return
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json_atomically(path: str, value: object, durable: bool = True) -> None:
    """:func:`write_atomically` of ``value`` as JSON."""
    write_atomically(path, json.dumps(value, sort_keys=True).encode(), durable)


def overwrite(path: str, data: bytes, create: bool = True, mode: int = 0o644) -> None:
    """Make ``data`` the content of ``path`` in the same file (made if
    missing and ``create``; FileNotFoundError else): written from the
    start, then cut to its length — never to 0, which would free the
    file's block, a discard on a file system mounted with ``discard``
    (issue 14: no file or block made and freed per task). Not atomic for a
    reader: see :func:`write_run_file`. A file of another ``mode`` (a
    reused one) gets this one before it is written."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | (os.O_CREAT if create else 0), mode)
    try:
        if mode != 0o644 and stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            os.fchmod(fd, mode)
        view, offset = memoryview(data), 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
        # cut only a file longer than ``data``: an ftruncate to the size the file has already (a blank
        # the agent cut to one byte and written over, a placeholder of exit.json's size) still dirties
        # the inode and walks its page cache on ext4 (as costly as the write, perf); lseek says the size
        if os.lseek(fd, 0, os.SEEK_END) > len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def write_run_file(path: str, value: dict) -> None:
    """``supervisor.json`` or ``task.json``, over the blank the agent left
    in a reused run directory (:func:`overwrite`) or a new file; no temp
    file made and renamed (issue 14, :data:`RUN_FILES_DURABLE`). A reader
    that comes before the write is done finds a blank or a cut JSON
    object, which it reads as "not yet" — as it reads a missing file."""
    overwrite(path, json.dumps(value, sort_keys=True).encode())


#: an encoder of sorted compact JSON (msgspec's, ``order="sorted"``) the shared supervisor sets when it has
#: msgspec (:func:`.shared_supervisor.launch_loads`'s): None, json.dumps alone (:func:`status_json`)
sorted_json: Callable[[object], bytes] | None = None


def status_json(status: dict) -> bytes:
    """``status`` as :func:`write_exit_status` writes it: compact, sorted,
    ASCII JSON. A flat status whose strings are ASCII and whose floats are
    finite — every end of a task but one with a message in another script —
    goes through :data:`sorted_json` when it is set: the same bytes as
    ``json.dumps`` (checked in the tests), ~0.5 µs where json.dumps took ~5
    a task; anything else (a nested value, a non-ASCII message, which
    msgspec would write as UTF-8 where json escapes it) through json.dumps."""
    encode = sorted_json
    if encode is not None:
        for value in status.values():
            kind = type(value)
            if kind is str:
                if not value.isascii():
                    break
            elif kind is float:
                if value != value or value in (_INFINITY, -_INFINITY):   # json writes NaN, msgspec null
                    break
            elif not (value is None or kind is bool or kind is int):
                break
        else:
            try:
                return encode(status)
            except (TypeError, ValueError, OverflowError):   # (an int past 64 bits): json's way
                pass
    return json.dumps(status, sort_keys=True, separators=(",", ":")).encode()


_INFINITY = float("inf")


def write_exit_status(path: str, status: dict) -> bytes:
    """``exit.json``, written over the placeholder the agent made
    (:func:`exit_placeholder`): in place, one page, padded to its size — no
    file made, none removed (issue 14), and no room needed on a full disk.
    No reader looks at it before this process has ended (the agent reads it
    once the supervisor is gone), so in place is whole to every reader. A
    status too long for the placeholder replaces it (:func:`write_atomically`),
    or, if that fails (a full disk), goes in place all the same. Returns the
    JSON written (compact, sorted, ASCII): the shared supervisor tells the
    agent these bytes in its ``X`` line rather than encoding the status
    twice."""
    text = status_json(status)
    data = text
    if len(data) < EXIT_PLACEHOLDER_SIZE:
        data = _padded(data)
        try:
            overwrite(path, data, create=False)
            return text
        except FileNotFoundError:   # no placeholder: made here
            pass
    try:
        write_atomically(path, data, RUN_FILES_DURABLE)
    except OSError as exc:
        say(f"cannot replace {path} ({exc}); writing it in place")
        overwrite(path, data)
    return text


def load_sibling(name: str):
    """The module (or package) ``name`` of this file's directory
    (:mod:`.health`, :mod:`.fetcher`, :mod:`.images`), loaded by its path:
    the supervisor runs as ``python -I -S supervisor.py``, with no package
    on its path."""
    loaded = sys.modules.get(f"mesoslike_supervisor_{name}")
    if loaded is not None:   # the launcher loaded it before it forked this process
        return loaded
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    package = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    if os.path.isdir(package):   # a package of the standard library only, relative imports (:mod:`.images`)
        path = os.path.join(package, "__init__.py")
        spec = importlib.util.spec_from_file_location(f"mesoslike_supervisor_{name}", path,
                                                      submodule_search_locations=[package])
    else:
        spec = importlib.util.spec_from_file_location(f"mesoslike_supervisor_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def read_json(path: str) -> object:
    """The JSON document in ``path``; raises OSError or ValueError. (Read
    with one ``os.open`` and no file object: ``open()`` adds an ``fstat``
    and an ``ioctl`` — each run file is read once or more a task.)"""
    return json.loads(_read_small(path))


def exit_placeholder() -> bytes:
    """The pre-made ``exit.json``: "not ended", padded to its full size."""
    return _EXIT_PLACEHOLDER


def _padded(text: bytes) -> bytes:
    return text + b" " * (EXIT_PLACEHOLDER_SIZE - len(text) - 1) + b"\n"


_EXIT_PLACEHOLDER = _padded(json.dumps({"ended": False}).encode())


def set_autogroup_nice(nice: int, pid: int | str = "self") -> bool:
    """The nice of the autogroup of ``pid``'s session (Linux's
    ``CONFIG_SCHED_AUTOGROUP``): where ``kernel.sched_autogroup_enabled``
    is 1, each session of the root cgroup is one entity at the top of the
    scheduler, of weight 1024 at nice 0, 110 at 10. Its processes' own
    nice is unchanged, and what they start in sessions of their own (a
    task) is not in it. False where the kernel has no autogroups or it
    cannot be set (a lower nice than now needs ``CAP_SYS_NICE``)."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as autogroup:
            autogroup.write(str(nice))
        return True
    except OSError:
        return False


def process_start_ticks(pid: int, proc: int | None = None) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if it
    does not exist or has ended (a zombie). Tells a process from a later one
    that reused its pid. ``proc``: a descriptor of the host's ``/proc``
    directory (in a container, whose ``/proc`` shows its own processes)."""
    try:
        if proc is None:
            with open(f"/proc/{pid}/stat", "rb") as source:
                text = source.read().decode("ascii", "replace")
        else:
            fd = os.open(f"{pid}/stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc)
            try:
                text = os.read(fd, 4096).decode("ascii", "replace")
            finally:
                os.close(fd)
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


# ------------------------------------------------------------ the task's user
class LaunchProblem(Exception):
    """The task cannot be started as asked; the message says why, in words
    fit for the task's update."""


class ContainerProblem(LaunchProblem):
    """The task's container (image, bundle, runc) cannot be made."""


class TaskUser:
    """The unix user a task runs as, as this machine knows it. (A plain
    class: ``typing`` would add to the supervisor's start-up.)"""

    __slots__ = ("name", "uid", "gid", "groups", "home")

    def __init__(self, name: str, uid: int, gid: int, groups: list[int], home: str) -> None:
        self.name, self.uid, self.gid, self.groups, self.home = name, uid, gid, groups, home


def resolve_user(name: str, getpwnam=pwd.getpwnam, getgrouplist=os.getgrouplist) -> TaskUser:
    """The user ``name`` of this machine, with its groups. Raises
    :class:`LaunchProblem` when there is no such user, and for another name
    of uid 0: the master lets a task run as root only when a ``run_tasks``
    ACL names ``root``, so no other name may lead there."""
    try:
        entry = getpwnam(name)
    except (KeyError, ValueError):
        raise LaunchProblem(f"user {name!r} does not exist on this agent") from None
    if entry.pw_uid == 0 and name != "root":
        raise LaunchProblem(f"user {name!r} has uid 0 on this agent: tasks run as root only as 'root', "
                            "which a run_tasks ACL must name")
    try:
        groups = list(getgrouplist(name, entry.pw_gid))
    except OSError as exc:
        raise LaunchProblem(f"the groups of user {name!r} cannot be read on this agent: {exc}") from None
    return TaskUser(name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)


def is_own_identity(user: TaskUser) -> bool:
    """Whether this process is ``user`` already — real, effective and saved
    uid and gid, and the same supplementary groups — so that running a task
    as it switches nothing (the sandbox and output files are still given
    to it, its HOME, USER and LOGNAME still set): the task can then be
    spawned without a fork of this process (issue 14's cost, which an
    agent run as root paid for every task of ``root``)."""
    # the groups a process has are its gid's and its supplementary ones (an agent may have none of the
    # latter where the user's list names its gid)
    return (set(os.getresuid()) == {user.uid} and set(os.getresgid()) == {user.gid}
            and set(os.getgroups()) | {user.gid} == set(user.groups) | {user.gid})


def give_sandbox(directory: str, user: TaskUser) -> None:
    """Make the sandbox ``directory`` the user's (mode :data:`SANDBOX_MODE`),
    without following a symlink."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchown(fd, user.uid, user.gid)
        os.fchmod(fd, SANDBOX_MODE)
    finally:
        os.close(fd)


def make_directory_in(path: str, directory: str, user: TaskUser | None) -> None:
    """Make ``path`` (and its missing parents) below ``directory`` — only
    there, its existing part's symlinks resolved — owned by ``user``."""
    limit = os.path.realpath(directory)
    missing = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    real = os.path.realpath(probe)
    if real != limit and not real.startswith(limit.rstrip("/") + "/"):
        raise LaunchProblem(f"{path} leads out of {directory}")
    for made in reversed(missing):
        os.mkdir(made, 0o755)
        if user is not None:
            os.chown(made, user.uid, user.gid, follow_symlinks=False)


def open_sandbox_file(path: str) -> int:
    """A file of a sandbox opened for appending (created if missing). It
    must be a plain file with one link: a switched task owns its sandbox and
    may have put a symlink, a hard link or a FIFO there, which root must
    neither write through nor block on. Raises OSError.

    Made new (``O_EXCL``: the usual case, a sandbox made for the launch)
    it is a plain file with one link by construction — nothing was at
    its name, not even a symlink — so neither ``fstat`` nor the
    non-blocking open and its ``ioctl`` are needed (four system calls a
    task of the shared supervisor's loop); only a name taken already is
    opened and checked."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        pass
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o644)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise OSError(errno.EPERM, "not a plain file of the sandbox", path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_output(path: str, user: TaskUser | None) -> int:
    """A task's output file (:func:`open_sandbox_file`), given to ``user``."""
    try:
        fd = open_sandbox_file(path)
    except OSError as exc:
        raise LaunchProblem(f"cannot open the task's output file {path}: {exc.strerror}") from None
    if user is not None:
        try:
            os.fchown(fd, user.uid, user.gid)
        except BaseException:
            os.close(fd)
            raise
    return fd


# ------------------------------------------------------------ the process
def read_launch(path: str, loads: Callable[[bytes], object] = json.loads) -> dict:
    """``launch.json``, checked: command, cwd, env, stdout, stderr,
    grace_period, recovery_timeout, agent_pid_file, cgroups (directories),
    oom_events (``[file, key]`` pairs counting OOM kills), memory_peak (a file
    or ""), user (the unix user to run the task as; "" or absent: the
    supervisor's own), health_check (the task's ``HealthCheck`` or null),
    uris (its ``CommandURI`` list), fetcher (the fetcher's settings:
    :func:`.fetcher.fetch_all`), and its container (:func:`.namespaces.enter`):
    namespaces (of "pid", "mount", "ipc", "uts", "net"), tmp (the directory
    mounted on ``/tmp``; "": none), keep (paths below ``/tmp`` the task must
    still reach), hostname ("": the agent's) and volumes (``{"source",
    "target", "readonly"}``); argv (Mesos's ``shell: false``: the
    program and its arguments, run without a shell; []: ``command`` by
    ``/bin/sh -c``); image (a task with a container image, run by runc:
    :meth:`Supervisor.start_container` says which keys; null: none); secrets
    (whether the agent left a ``secrets.json`` to take; absent, from an agent
    of before the key: looked for). ``loads``: what decodes its JSON (the
    shared supervisor's is faster, :func:`.shared_supervisor.launch_loads`);
    it raises ValueError for what is not JSON."""
    launch = loads(_read_small(path))
    if not isinstance(launch, dict):
        raise ValueError(f"{path}: not a JSON object")
    launch.setdefault("user", "")
    launch.setdefault("health_check", None)
    launch.setdefault("uris", [])
    launch.setdefault("fetcher", {})
    for key, default in (("namespaces", []), ("tmp", ""), ("keep", []), ("hostname", ""), ("volumes", []),
                         ("argv", []), ("image", None)):
        launch.setdefault(key, default)
    for key, kinds in (("user", (str,)), ("health_check", (dict, type(None))), ("uris", (list,)),
                       ("fetcher", (dict,)), ("namespaces", (list,)), ("tmp", (str,)), ("keep", (list,)),
                       ("hostname", (str,)), ("volumes", (list,)), ("argv", (list,)), ("image", (dict, type(None)))):
        if not isinstance(launch[key], kinds):
            raise ValueError(f"{path}: {key} of the wrong type")
    for key, kind in (("command", str), ("cwd", str), ("env", dict), ("stdout", str), ("stderr", str),
                      ("grace_period", (int, float)), ("recovery_timeout", (int, float)), ("agent_pid_file", str),
                      ("cgroups", list), ("oom_events", list), ("memory_peak", str)):
        if not isinstance(launch.get(key), kind):
            raise ValueError(f"{path}: {key} missing or of the wrong type")
    return launch


class Supervisor:
    """One task's life: start, watch, kill on request, clean up, record."""

    # What a task starts with and most tasks keep: class attributes, set on the instance only once they
    # change (each assignment in __init__ is a dictionary insert; the shared supervisor makes one object a
    # task, and ~35 of them were a tenth of its user-space instructions making it). Mutable ones stay below.
    task_pid = 0
    child: subprocess.Popen | None = None
    kill_deadline: float | None = None
    sigkill_sent = False
    killed = False
    reason = ""
    message = ""
    cgroups_emptied = False   # the last kill_cgroups found none of the task's processes left
    exit_json = b""   # what record() wrote to exit.json (unpadded), once it has
    user: TaskUser | None = None
    checker = None          # a health.HealthChecker while the task runs, if it has a check
    health_kill = ""        # set by the checker's thread: why the task must be killed
    host_proc: int | None = None   # a descriptor of the host's /proc, while its own is mounted on it
    runc = None                    # an image task's runc.Runc, once its container exists
    check_process = ""             # an image task's health check's process file (runc exec --process)
    started_by = ""                # how the task was started: "spawn", "fork" or "runc"
    #: switch users by subprocess.Popen's uid/gid/groups rather than a preexec_fn (the shared supervisor)
    switch_by_popen = False

    def __init__(self, run_dir: str, host_pid: int = 0) -> None:
        """``host_pid``: this process's pid, if the caller knows it (the
        shared supervisor's loop: no ``getpid`` a task)."""
        self.run_dir = run_dir
        self.launch: dict = {}
        self.agent_seen_at = time.monotonic()
        self.next_agent_check = self.agent_seen_at
        self.env: dict = {}
        self.check_env: dict = {}    # the environment of its command health checks: the task's without secrets
        self.secret_env: dict = {}   # its secret variables (an image task's container gets them from here)
        self.secret_files: list = []  # the secret files written for it: removed when it has ended
        self.unwritten_secret_files: list = []   # an image task's, until its container's user is known
        # the init (pid 1) of the task's PID namespace (the launcher forked it so): it reaps the task's
        # orphans, and knows itself and the agent by the host's pids, through the host's /proc
        self.host_pid = host_pid or os.getpid()
        self.init = self.host_pid == 1
        self.children = Children()          # what of its children are not orphans to reap
        self.images: dict = {}              # an image task's: image name -> its images.ProvisionedImage

    def path(self, name: str) -> str:
        return os.path.join(self.run_dir, name)

    def run(self) -> int:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
        if self.init:   # before anything mounts another /proc
            self.host_pid = host_pid()
            self.host_proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        write_run_file(self.path(SUPERVISOR_FILE), {"pid": self.host_pid,
                                                    "start_ticks": process_start_ticks(self.host_pid)})
        try:
            self.launch = read_launch(self.path(LAUNCH_FILE))
        except FileNotFoundError:
            say("launch.json is gone: the launch was cancelled")
            return 0
        except (OSError, ValueError) as exc:
            self.record(None, None, REASON_LAUNCH_FAILED, f"unreadable launch file: {exc}")
            return 1
        try:
            self.prepare()
            if self.launch["uris"] and not self.fetch():
                return 1
            if self.launch["image"] is not None:
                self.provision()
            self.enter_container()
            self.task_pid = self.start()
        except LaunchProblem as exc:
            say(f"not started: {exc}")
            self.record(None, None, REASON_CONTAINER_FAILED if isinstance(exc, ContainerProblem)
                        else REASON_LAUNCH_FAILED, str(exc))
            return 1
        except (OSError, subprocess.SubprocessError) as exc:
            self.record(None, None, REASON_LAUNCH_FAILED, f"{type(exc).__name__}: {exc}")
            return 1
        write_run_file(self.path(TASK_FILE), {"pid": self.task_host_pid(), "started": self.started_by})
        self.start_health_checks()
        status = self.watch()
        if self.checker is not None:
            self.checker.stop()
        self.clean_up()
        code, signum = (None, os.WTERMSIG(status)) if os.WIFSIGNALED(status) else (os.WEXITSTATUS(status), None)
        self.record(code, signum, self.reason, self.message)
        return 0

    def prepare(self) -> None:
        """The task's user (its sandbox given to it), environment and
        secrets (:mod:`.secrets`: the agent's file of them removed at once;
        the variables in the task's environment only, the files written
        for its user — an image task's by :meth:`start_container`, for its
        container's user)."""
        launch = self.launch
        self.user = user = resolve_user(launch["user"]) if launch["user"] else None
        self.env = env = dict(launch["env"])
        if user is not None:
            give_sandbox(launch["cwd"], user)
            for name, value in (("HOME", user.home), ("USER", user.name), ("LOGNAME", user.name)):
                env.setdefault(name, value)
        self.check_env = dict(env)
        told = launch.get("secrets")   # said by the agent: no look for the file (an older agent's: looked for)
        secrets = load_sibling("secrets") if (told if isinstance(told, bool) else os.path.exists(self.path(
            "secrets.json"))) else None
        if secrets is None:
            return
        try:
            variables, files = secrets.take_secrets(self.run_dir)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LaunchProblem(f"the task's secrets cannot be read from its run directory: {exc}") from None
        env.update(variables)
        self.secret_env = variables
        if launch["image"] is not None:   # written once the container's user is known (start_container)
            self.unwritten_secret_files = files
            return
        self.write_secret_files(files, *((user.uid, user.gid) if user is not None else (os.getuid(), os.getgid())))

    def write_secret_files(self, files: list, uid: int, gid: int) -> None:
        """The task's secret files, mode 0400, ``uid``:``gid``'s (:mod:`.secrets`):
        before the task's mount namespace or container is made, which bind
        those at absolute paths."""
        secrets = load_sibling("secrets")
        for path, data in files:
            self.secret_files.append(path)
            try:
                secrets.write_secret_file(path, data, uid, gid, self.launch["cwd"])
            except OSError as exc:
                raise LaunchProblem(f"cannot write the secret file {path}: {exc.strerror or exc}") from None

    def enter_container(self) -> None:
        """The task's namespaces and mounts (``namespaces`` in
        ``launch.json``; :func:`.namespaces.enter`), after the fetch (which
        may need the network ``network/none`` takes away)."""
        launch = self.launch
        namespaces = launch["namespaces"]
        if not namespaces:
            return
        if "pid" in namespaces and not self.init:
            raise LaunchProblem("the task was to have a PID namespace of its own, and its supervisor is not the "
                                "first process of one")
        for volume in launch["volumes"]:   # a sandbox path is made if missing (as Mesos does), the task's
            if volume.get("make_source") and not os.path.lexists(volume["source"]):
                make_directory_in(volume["source"], volume["within"], self.user)
        load_sibling("namespaces").enter(namespaces, tmp=launch["tmp"], keep=launch["keep"],
                                         hostname=launch["hostname"], volumes=launch["volumes"])

    def provision(self) -> None:
        """Pull (or find in the agent's cache) the task's image and its
        image volumes' — in this process, never on the agent's loop: a
        pull may take minutes — with the agent's image store
        (:mod:`.images`, loaded by its path; ``image.store``: its
        settings), each under a lease of the container's until it ends.
        Raises :class:`ContainerProblem` naming the image and the cause."""
        spec = self.launch["image"]
        images = load_sibling("images")
        try:
            store = images.ImageStore.from_settings(spec["store"])
            wanted = [(spec["id"], spec["name"], bool(spec.get("force_pull")))]
            wanted += [(f"{spec['id']}.volume-{index}", volume["image"]["name"], bool(volume["image"].get("force_pull")))
                       for index, volume in enumerate(spec.get("volumes", [])) if volume.get("image")]
            for lease, name, force in wanted:
                self.images[name] = store.provision(name, lease=lease, cached=not force)
        except images.ImageError as exc:
            raise ContainerProblem(str(exc)) from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ContainerProblem(f"image {spec.get('name')}: the image store failed: {type(exc).__name__}: "
                                   f"{exc}") from None

    def start_container(self) -> int:
        """An image task's container, made and started with runc
        (:mod:`.runc`); the container process's pid. ``image`` in
        ``launch.json``: name, runc (the binary), root (runc's state
        directory), id (the container's), bundle (a directory of its own),
        network ("host" or "none"), hostname, cgroups_path (runc's
        ``cgroupsPath`` of the task's cgroups), shell/command/arguments
        (the task's), env (the task's own variables: the container's
        environment is the image's and these), volumes
        (``{"destination", "readonly"}`` with ``"source"`` (``within``,
        ``make_source``) or ``"image"``), provision (the store's command
        line) and store (its settings)."""
        spec, launch = self.launch["image"], self.launch
        runc = load_sibling("runc")
        bundle, name = spec["bundle"], spec["name"]
        image = self.images.get(name)
        if image is None:
            raise ContainerProblem(f"image {name}: the image store did not provide it")
        try:
            # the agent's only: its config.json holds the task's environment (and secret variables)
            os.makedirs(bundle, 0o700, exist_ok=True)
            os.chmod(bundle, 0o700)
            rootfs = os.path.join(bundle, "rootfs")
            self.mount_image(image, bundle, rootfs)
            config = image.config
            user = self.user
            ids = runc.process_user(rootfs, config.user,
                                    (user.uid, user.gid, user.groups) if user is not None else None)
            self.write_secret_files(self.unwritten_secret_files, ids[0], ids[1])   # the container's user's
            mounts = self.container_volumes(spec, bundle)
            argv = runc.command_line({"Entrypoint": config.entrypoint, "Cmd": config.cmd},
                                     bool(spec.get("shell", True)), spec.get("command", ""),
                                     list(spec.get("arguments", [])))
            sandbox_env = {"MESOS_SANDBOX": runc.SANDBOX, "MESOSLIKE_SANDBOX": runc.SANDBOX}
            own = {**spec.get("env", {}), **sandbox_env}
            env = runc.environment({"Env": list(config.env)}, {**spec.get("env", {}), **self.secret_env, **sandbox_env})
            tmp = os.path.join(launch["cwd"], "tmp")
            os.makedirs(tmp, exist_ok=True)
            os.chmod(tmp, 0o1777)
            document = runc.oci_config(argv=argv, env=env, cwd=config.working_dir or runc.SANDBOX,
                                       user=ids, hostname=spec["hostname"], pid_namespace="/proc/1/ns/pid",
                                       network=spec["network"], cgroups_path=spec["cgroups_path"],
                                       sandbox=launch["cwd"], tmp=tmp, mounts=mounts)
            write_atomically(os.path.join(bundle, "config.json"), json.dumps(document).encode(), False)
            check = launch["health_check"]
            if check is not None and check.get("type") not in ("HTTP", "TCP"):
                # its command check's process: the container's without the secret variables (runc exec --process)
                process = {**document["process"], "args": [SHELL, "-c", str(check.get("command"))],
                           "env": runc.environment({"Env": list(config.env)}, own)}
                self.check_process = os.path.join(bundle, "check-process.json")
                write_atomically(self.check_process, json.dumps(process).encode(), False)
        except runc.ImageProblem as exc:
            raise ContainerProblem(f"image {name}: {exc}") from None
        except OSError as exc:
            raise ContainerProblem(f"image {name}: its container could not be made: {exc}") from None
        stdout = open_output(launch["stdout"], self.user)
        stderr = -1
        try:
            stderr = open_output(launch["stderr"], self.user)
            container = runc.Runc(spec["runc"], spec["root"], spec["id"])
            tool_env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
            try:
                pid = container.run(bundle, stdout, stderr, tool_env)
                self.runc = container
            except OSError as exc:
                container.delete(tool_env)   # runc run removes what it made when it fails: to be sure
                raise ContainerProblem(f"image {name}: {exc}") from None
        finally:
            for fd in (stdout, stderr):
                if fd >= 0:
                    os.close(fd)
        return pid

    def mount_image(self, image, bundle: str, target: str) -> None:
        """An image's root filesystem on ``target``: the overlay of its
        layers under a writable layer in ``bundle`` (made here), or, where
        its whiteouts are only markers, a flattened copy
        (:mod:`.images.rootfs`)."""
        images = load_sibling("images")
        upper, work = target + ".upper", target + ".work"
        for directory in (target, upper, work):
            os.makedirs(directory, 0o755, exist_ok=True)
        if image.whiteouts == "overlay":
            images.mount_overlay(image.layers, upper, work, target)
        else:
            images.flatten(image.layers, target)

    def container_volumes(self, spec: dict, bundle: str) -> list[dict]:
        """The volumes of an image task, as runc mounts them: a sandbox path
        (made if missing) or an allowed host path, resolved and checked
        here; an image's root filesystem (mounted in the bundle, bound
        read-only)."""
        mounts = []
        for index, volume in enumerate(spec.get("volumes", [])):
            if volume.get("image"):
                image = self.images.get(volume["image"]["name"])
                if image is None:
                    raise ContainerProblem(f"image {volume['image']['name']}: the image store did not provide it")
                source = os.path.join(bundle, "volumes", str(index))
                self.mount_image(image, bundle, source)
                mounts.append({"source": source, "destination": volume["destination"], "readonly": True})
                continue
            source = volume["source"]
            if volume.get("make_source") and not os.path.lexists(source):
                make_directory_in(source, volume["within"], self.user)
            real = os.path.realpath(source)
            limit = os.path.realpath(volume["within"])
            if real != limit and not real.startswith(limit.rstrip("/") + "/"):
                raise ContainerProblem(f"volume source {source} resolves to {real}, outside {limit}")
            mounts.append({"source": real, "destination": volume["destination"],
                           "readonly": bool(volume.get("readonly"))})
        return mounts

    def release_container(self) -> None:
        """An image task's container is done: runc's state and cgroups
        removed, the root filesystem unmounted, the bundle removed."""
        spec = self.launch.get("image") if self.launch else None
        if not spec:
            return
        if self.runc is not None:
            self.runc.delete({"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")})
        namespaces = load_sibling("namespaces")
        bundle = spec["bundle"]
        volumes = os.path.join(bundle, "volumes")
        targets = [os.path.join(volumes, entry) for entry in _entries(volumes) if not entry.endswith((".upper", ".work"))]
        for target in targets + [os.path.join(bundle, "rootfs")]:
            try:
                namespaces.umount(target)
            except OSError:
                pass
        import shutil
        shutil.rmtree(bundle, ignore_errors=True)
        if self.images:   # the layers may go once no container holds them
            try:
                images = load_sibling("images")
                store = images.ImageStore.from_settings(spec["store"])
                for lease in [spec["id"]] + [f"{spec['id']}.volume-{i}" for i in range(len(spec.get("volumes", [])))]:
                    store.release(lease)
            except Exception as exc:  # noqa: BLE001 - a lease left is pruned by the agent later
                say(f"could not release the image leases: {type(exc).__name__}: {exc}")

    def task_host_pid(self) -> int:
        """The task's pid as the agent sees it (the host's)."""
        if not self.init or self.host_proc is None:
            return self.task_pid
        found = load_sibling("namespaces").host_pid_of_child(self.host_proc, self.host_pid, self.task_pid)
        return found if found is not None else 0   # 0: gone already (task.json then reads as no pid)

    def fetch(self) -> bool:
        """Fetch the task's URIs into its sandbox; False (the run recorded as
        failed) if one could not be."""
        fetcher = None
        try:
            fetcher = load_sibling("fetcher")
            fetcher.fetch_all(self.launch["uris"], self.launch["cwd"], self.user, self.launch["fetcher"], say)
        except Exception as exc:  # noqa: BLE001 - a FetchError, or anything else: the task must not start
            known = fetcher is not None and isinstance(exc, fetcher.FetchError)
            message = str(exc) if known else f"the fetcher failed: {type(exc).__name__}: {exc}"
            say(f"not started: {message}")
            self.record(None, None, REASON_FETCH_FAILED, message)
            return False
        return True

    def start_health_checks(self) -> None:
        check = self.launch["health_check"]
        if check is None:
            return
        health = load_sibling("health")

        def on_kill(message: str) -> None:   # on the checker's thread: the main loop kills
            self.health_kill = message
            os.kill(os.getpid(), signal.SIGUSR2)

        enter = None
        image = self.launch["image"]
        if self.runc is not None and image.get("network") == "none":   # the container's own network
            namespaces, task_pid = load_sibling("namespaces"), self.task_pid

            def enter() -> None:
                fd = os.open(f"/proc/{task_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    namespaces.setns(fd, namespaces.CLONE_NEWNET)
                finally:
                    os.close(fd)
        checker = health.HealthChecker(check, self.run_dir, cwd=self.launch["cwd"], env=self.check_env, user=self.user,
                                       write=write_json_atomically, on_kill=on_kill, say=say,
                                       children=self.children if self.init else None,
                                       prefix=self.runc.exec_prefix(self.check_process) if self.runc is not None
                                       else (), enter=enter)
        checker.start()
        self.checker = checker

    def start(self) -> int:
        """Start the task; its pid. Without a user to switch to — none
        named, or the one named is who this process is already (``root``
        under an agent run as root: :func:`is_own_identity`) — and with the
        way back out of the cgroups known, :meth:`spawn`; else a fork that
        joins the cgroups and drops to the user in Python."""
        homes = self.launch.get("cgroups_home") if self.launch["cgroups"] else []
        if self.launch["image"] is not None:
            self.started_by = "runc"
            return self.start_container()
        known = homes if isinstance(homes, list) and len(homes) == len(self.launch["cgroups"]) else None
        if (self.user is None or is_own_identity(self.user)) and known is not None:
            self.started_by = "spawn"
            return self.spawn(known)
        self.started_by = "fork"
        if self.switch_by_popen and known is not None:
            return self.spawn(known, switch=True)
        return self.start_forked()

    def spawn(self, homes: list, switch: bool = False) -> int:
        """Start the task with ``posix_spawn`` (a ``vfork``: issue 14), not a
        fork of this Python process that runs Python before ``exec`` (its
        copy-on-write faults were a third of a task's CPU). The task must be
        in its cgroups before its first instruction, and only a process can
        place itself before ``exec``; so the supervisor joins them, spawns
        (a child starts in its parent's cgroups), and goes back to
        ``homes`` (where it came from: the agent's own cgroups), all before
        it does anything else. Memory it used before stays charged where it
        was (charges do not move with a process); the microseconds in
        between are charged to the task. The child gets an empty signal
        mask and default dispositions (this process ignores SIGINT, SIGHUP,
        SIGPIPE and SIGXFSZ, and blocks the signals it waits for), its own
        session, stdin ``/dev/null``.

        With ``switch`` (the shared supervisor's user switch,
        :mod:`.shared_supervisor`: a process that ignores and blocks no
        signal), the task is started by ``subprocess.Popen`` with the
        user's uid, gid and groups, in the same place: a fork whose child
        runs no Python — it switches and executes — so its copy-on-write
        faults are a few pages; no exec step runs as root with the task's
        environment (a helper such as ``setpriv`` would, and would load
        what ``LD_PRELOAD`` names)."""
        launch = self.launch
        stdout = open_output(launch["stdout"], self.user)
        stderr = -1
        here = -1
        pid = 0
        try:
            stderr = open_output(launch["stderr"], self.user)
            here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            os.chdir(launch["cwd"])   # posix_spawn has no cwd: the child inherits this process's
            for directory in launch["cgroups"]:
                join_cgroup(directory)
            argv = self.argv()
            if switch:
                user = self.user
                assert user is not None
                self.child = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=stdout,
                                              stderr=stderr, close_fds=True, start_new_session=True,
                                              user=user.uid, group=user.gid, extra_groups=user.groups)
                pid = self.child.pid
            else:
                spawn = os.posix_spawn if argv[0] == SHELL or "/" in argv[0] else os.posix_spawnp
                pid = spawn(argv[0], argv, self.env, setsid=True, setsigmask=(), setsigdef=_CHILD_DEFAULT_SIGNALS,
                            file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                          (os.POSIX_SPAWN_DUP2, stdout, 1), (os.POSIX_SPAWN_DUP2, stderr, 2)])
        finally:
            try:
                for directory in homes:   # never stay: the task's end SIGKILLs whatever is in its cgroups
                    join_cgroup(directory)
                if here >= 0:
                    os.fchdir(here)
            except OSError:
                if pid:   # a task this supervisor cannot stand apart from: it must not run
                    os.killpg(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                raise
            finally:
                for fd in (here, stderr, stdout):
                    if fd >= 0:
                        os.close(fd)
        return pid

    def start_forked(self) -> int:
        launch = self.launch
        cgroups = launch["cgroups"]
        user, env = self.user, self.env

        def child_setup() -> None:  # in the child, before exec: runs single-threaded
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGTERM, signal.SIGUSR1):
                signal.signal(signum, signal.SIG_DFL)
            for directory in cgroups:  # into the task's cgroups before any of its code runs
                join_cgroup(directory)
            if user is not None:
                # after the cgroups (only root may join them), so not Popen's user=/group=/extra_groups=,
                # which switch before preexec_fn; groups, then gid, then uid: each needs root left
                os.setgroups(user.groups)
                os.setresgid(user.gid, user.gid, user.gid)
                os.setresuid(user.uid, user.uid, user.uid)

        stdout = open_output(launch["stdout"], user)
        try:
            stderr = open_output(launch["stderr"], user)
            try:
                child = subprocess.Popen(self.argv(), cwd=launch["cwd"], env=env,
                                         stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, close_fds=True,
                                         start_new_session=True, preexec_fn=child_setup)
            finally:
                os.close(stderr)
        finally:
            os.close(stdout)
        self.child = child  # kept: its finaliser must not run; watch() reaps it with waitpid
        return child.pid

    def argv(self) -> list[str]:
        """What the task's process executes: ``/bin/sh -c COMMAND``, or its
        ``argv`` (Mesos's ``shell: false``: the program looked up in
        ``PATH``, no shell)."""
        argv = self.launch["argv"]
        return list(argv) if argv else [SHELL, "-c", self.launch["command"]]

    def watch(self) -> int:
        """Wait for the task's leader to exit, killing on request; its wait status."""
        while True:
            if _exited(self.task_pid):
                # the unreaped leader still pins the group id: clear the group, then reap
                self.signal_group(signal.SIGKILL)
                _, status = os.waitpid(self.task_pid, 0)
                return status
            now = time.monotonic()
            if self.kill_deadline is not None and now >= self.kill_deadline and not self.sigkill_sent:
                self.sigkill()
            if now >= self.next_agent_check:
                self.next_agent_check = now + AGENT_CHECK_INTERVAL
                self.check_agent(now)
            timeout = self.next_agent_check - now
            if self.kill_deadline is not None and not self.sigkill_sent:
                timeout = min(timeout, self.kill_deadline - now)
            info = signal.sigtimedwait(_WATCHED, max(0.0, timeout))
            if info is None:
                continue
            if info.si_signo == signal.SIGCHLD and self.init and info.si_pid != self.task_pid:
                # another child than the task's leader (whose end the loop's top sees): an orphan, maybe
                # with others (their SIGCHLDs merge), or a health check's command (its thread waits)
                self.children.reap_orphans(self.task_pid)
            elif info.si_signo == signal.SIGTERM:
                self.kill(float(self.launch["grace_period"]))
            elif info.si_signo == signal.SIGUSR1:
                self.kill(0.0)
            elif info.si_signo == signal.SIGUSR2 and self.health_kill and self.kill_deadline is None:
                self.reason, self.message = REASON_HEALTH_CHECK_FAILED, self.health_kill
                self.kill(float(self.launch["grace_period"]))

    def check_agent(self, now: float) -> None:
        if _agent_alive(self.launch["agent_pid_file"], self.host_proc):
            self.agent_seen_at = now
            return
        timeout = float(self.launch["recovery_timeout"])
        if now - self.agent_seen_at >= timeout and self.kill_deadline is None:
            self.reason = REASON_RECOVERY_TIMEOUT
            self.message = f"the agent did not come back within {timeout:g} s (--recovery-timeout)"
            say(self.message + ": killing the task")
            self.kill(float(self.launch["grace_period"]))

    def kill(self, grace: float) -> None:
        self.killed = True
        now = time.monotonic()
        if self.kill_deadline is None:
            self.signal_group(signal.SIGTERM)
            self.kill_deadline = now + max(0.0, grace)
        else:
            self.kill_deadline = min(self.kill_deadline, now + max(0.0, grace))
        if grace <= 0:
            self.sigkill()

    def sigkill(self) -> None:
        self.sigkill_sent = True
        self.signal_group(signal.SIGKILL)
        self.kill_cgroups()

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.task_pid, signum)
        except ProcessLookupError:   # not a group's leader (a container's process may not be): itself
            try:
                os.kill(self.task_pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        except PermissionError:
            pass

    def kill_cgroups(self) -> bool:
        """SIGKILL every process left in the task's cgroups; True if none was left."""
        self.cgroups_emptied = kill_cgroups(self.launch.get("cgroups", []))
        return self.cgroups_emptied

    def read_oom_kills(self) -> int:
        """The OOM kills the task's cgroups count (``oom_events``: ``[file, key]`` pairs)."""
        return sum(flat_keyed(path).get(key, 0) for path, key in self.launch.get("oom_events", []))

    def read_peak(self, to_reset: bool) -> tuple[int | None, int]:
        """:func:`_read_peak` of the task's ``memory_peak``: the peak, and
        with ``to_reset`` its file still open for :meth:`keep_cgroups`'s
        reset (-1: none), handed to :meth:`done_with_peak` after."""
        return _read_peak(self.launch.get("memory_peak") or "", to_reset)

    def done_with_peak(self, fd: int) -> None:
        """:meth:`read_peak`'s descriptor is no longer needed: closed (the
        shared supervisor keeps a pooled cgroup's)."""
        os.close(fd)

    def removing_cgroups(self) -> None:
        """The task's cgroups are about to be removed (not kept for another task)."""

    def keep_cgroups(self, peak: int | None = None, peak_fd: int = -1) -> bool:
        """The pooled cgroups of an ended task may serve another (the agent
        puts them back in its pool): emptied, next to no memory still
        charged to them (its page cache), their peak reset. False: removed.
        ``peak``: the peak just read (the charge now is no more than that:
        with a small one, the charge is not read); ``peak_fd``: the peak's
        file opened for writing too, where the reset goes (not opened again)."""
        launch = self.launch
        if not self.cgroups_emptied:
            return False
        if (peak is None or peak > POOL_MEMORY_LEFT) \
                and (read_int(launch.get("memory_usage", "")) or 0) > POOL_MEMORY_LEFT:
            return False
        try:
            if peak_fd >= 0:   # v1's max_usage_in_bytes: reset by writing 0
                os.pwrite(peak_fd, b"0", 0)
            elif launch.get("memory_peak"):
                fd = os.open(launch["memory_peak"], os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
        except OSError:
            return False
        return True

    def take_back(self) -> None:
        """The task has ended (or never started): its secret files go, and
        a switched task's sandbox becomes the agent's again (mode 0700), so
        that no later task of its user — another principal's, where the
        operator lets principals share a user — can read what it left."""
        if self.secret_files:
            load_sibling("secrets").remove_secret_files(self.secret_files, self.launch["cwd"])
        if self.user is not None:
            try:
                give_sandbox(self.launch["cwd"], TaskUser("", os.getuid(), os.getgid(), [], ""))
            except OSError as exc:
                say(f"cannot take the sandbox back from user {self.user.name}: {exc}")

    def clean_up(self) -> None:
        """The task's leader has ended: nothing of it may stay behind."""
        deadline = time.monotonic() + CLEANUP_LIMIT
        while not self.kill_cgroups() and time.monotonic() < deadline:
            time.sleep(0.01)

    def record(self, exit_code: int | None, signum: int | None, reason: str, message: str) -> dict:
        """Write the task's end to ``exit.json``; returns what was written."""
        launch = self.launch
        self.take_back()
        oom_kills = self.read_oom_kills()
        peak, peak_fd = self.read_peak(launch.get("pooled") is True and not oom_kills)
        try:
            try:
                self.release_container()
            except Exception as exc:  # noqa: BLE001 - the exit status must still be written
                say(f"could not release the container: {type(exc).__name__}: {exc}")
            kept = launch.get("pooled") is True and not oom_kills and self.keep_cgroups(peak, peak_fd)
        finally:
            if peak_fd >= 0:
                self.done_with_peak(peak_fd)
        if not kept:
            self.removing_cgroups()
            for directory in launch.get("cgroups", []):
                if not remove_cgroup(directory):
                    say(f"could not remove the cgroup {directory}")
        status = {"ended": True, "exit_code": exit_code, "signal": signum, "reason": reason, "message": message,
                  "killed": self.killed, "oom_kills": oom_kills, "memory_peak_bytes": peak, "ended_at": time.time(),
                  "cgroups_kept": kept}
        self.exit_json = write_exit_status(self.path(EXIT_FILE), status)
        return status


def say(text: str) -> None:
    """A line to the supervisor's log. Unbuffered, and never an error: on a
    full disk the log cannot grow, and the exit status matters more."""
    _log_write((text + "\n").encode("utf-8", "replace"))


#: a supervisor forked by the launcher makes its log file when it first has
#: something to say (most never do: a file made and removed per task for
#: nothing, issue 14); until then its stdout and stderr are /dev/null
_unopened_log: str | None = None
_log_lock = threading.Lock()


def _log_write(data: bytes) -> None:
    global _unopened_log
    try:
        if _unopened_log is not None:
            with _log_lock:
                if _unopened_log is not None:
                    fd = os.open(_unopened_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
                    _unopened_log = None
                    os.dup2(fd, 1)
                    os.dup2(fd, 2)
                    os.close(fd)
        os.write(2, data)
    except OSError:
        pass


class _LazyStderr:
    """``sys.stderr`` of a launcher-forked supervisor: what Python itself
    says (a traceback of a thread, a warning) goes to the log, made then."""

    def write(self, text: str) -> int:
        _log_write(text.encode("utf-8", "replace"))
        return len(text)

    def flush(self) -> None:
        pass


def _exited(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _agent_alive(pid_file: str, proc: int | None = None) -> bool:
    try:
        agent = read_json(pid_file)
        pid, ticks = agent["pid"], agent["start_ticks"]  # type: ignore[index]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return isinstance(pid, int) and process_start_ticks(pid, proc) == ticks


def _entries(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def host_pid() -> int:
    """This process's pid as the host sees it: the first of ``NSpid`` in
    ``/proc/self/status`` (read before a new ``/proc`` is mounted)."""
    try:
        with open("/proc/self/status", "rb") as source:
            for line in source:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return os.getpid()


class Children:
    """The children of a supervisor that is its PID namespace's init which
    are not orphans: the task's orphans are reparented to it, and it must
    reap them (else they stay zombies), but never a child another part of
    it waits for — a health check's command, which its thread starts and
    registers under ``lock`` (the reaper holds it while it looks)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.own: set[int] = set()

    def reap_orphans(self, task_pid: int) -> int:
        """Reap every ended child but the task's leader and those of
        :attr:`own`; how many. Reads this namespace's ``/proc`` (the
        supervisor's and its task's processes only)."""
        reaped = 0
        with self.lock:
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                pid = int(entry)
                if pid in (1, task_pid) or pid in self.own:
                    continue
                try:
                    with open(f"/proc/{pid}/stat", "rb") as source:
                        fields = source.read().rsplit(b")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if fields[0] == b"Z" and fields[1] == b"1":   # ended, and a child of this process
                    try:
                        if os.waitpid(pid, os.WNOHANG)[0]:
                            reaped += 1
                    except ChildProcessError:
                        pass
        return reaped


def join_cgroup(directory: str) -> None:
    """Move this process into the cgroup ``directory``. Raises OSError."""
    with open(os.path.join(directory, "cgroup.procs"), "w") as sink:
        sink.write(str(os.getpid()))


def cgroup_pids(directory: str) -> list[int]:
    """The processes in a cgroup (none if it is gone)."""
    try:
        return [int(line) for line in _read_small(os.path.join(directory, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


def _read_small(path: str) -> bytes:
    """A small file's bytes (a cgroup's or ``/proc``'s): one open and read
    with no text layer (three of them a task end, in the shared
    supervisor's loop); a longer one read to its end."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 65536)
        if len(data) == 65536:
            chunks = [data]
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            data = b"".join(chunks)
        return data
    finally:
        os.close(fd)


def kill_cgroups(directories: list[str]) -> bool:
    """SIGKILL every process in these cgroups; True if there was none."""
    empty = True
    for directory in directories:
        for pid in cgroup_pids(directory):
            if pid <= 0:   # a process outside the reader's PID namespace reads as 0: never kill(0)
                continue
            empty = False
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    return empty


def flat_keyed(path: str) -> dict[str, int]:
    """A cgroup file of ``key value`` lines as a dict (empty if unreadable)."""
    try:
        return parse_flat_keyed(_read_small(path))
    except OSError:
        return {}


def parse_flat_keyed(data: bytes) -> dict[str, int]:
    """:func:`flat_keyed` of a file's bytes."""
    values: dict[str, int] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(" ")
        try:
            values[key] = int(value)
        except ValueError:
            continue
    return values


def _read_peak(path: str, to_reset: bool) -> tuple[int | None, int]:
    """The memory peak a task's cgroup file holds (None if none or
    unreadable) and, with ``to_reset``, the file still open for the reset
    that keeps its cgroup for another task (:meth:`Supervisor.keep_cgroups`;
    -1 if not: read-only, or unreadable): one open a task end, not two."""
    if not path:
        return None, -1
    if to_reset:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:   # a peak that cannot be written (v2's memory.peak before Linux 6.12): read alone
            return read_int(path), -1
        try:
            return int(os.pread(fd, 64, 0).strip()), fd
        except (OSError, ValueError):
            os.close(fd)
            return None, -1
    return read_int(path), -1


def read_int(path: str) -> int | None:
    """The integer a file holds (None if unreadable)."""
    try:
        return int(_read_small(path).strip())
    except (OSError, ValueError):
        return None


def remove_cgroup(directory: str) -> bool:
    """Remove an emptied cgroup, waiting a little for the kernel to let go of
    its last process (EBUSY meanwhile). True if it is gone."""
    for _ in range(50):
        try:
            os.rmdir(directory)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.02)
    return False


def main(argv: list[str]) -> int:
    if argv == ["--launcher"]:
        return serve_launches()
    if len(argv) != 1:
        say("usage: supervisor.py RUN_DIR | supervisor.py --launcher")
        return 2
    return Supervisor(argv[0]).run()


# ----------------------------------------------------------------- launcher
#: what the launcher loads before it forks supervisors (:func:`serve_launches`)
PRELOADED_SIBLINGS = ("namespaces", "secrets", "images", "runc", "fetcher", "health")


def serve_launches() -> int:
    """``supervisor.py --launcher``: the agent's fork server
    (:mod:`mesoslike.agent.launcher`). Reads one JSON request a line on
    stdin — ``{"run_dir", "env", "log", "pid_namespace"}`` — forks a
    supervisor for it (this module is loaded already: no interpreter start
    per task, issue 14), with ``pid_namespace`` as the first process of a
    PID namespace of its own (:class:`.namespaces.PidNamespaceForker`), and
    answers its pid on a line of stdout (``!`` and why, if it could not) — the answers to the requests
    read together written together, when no request is left to read. Ends at the end of stdin (the agent
    went). The supervisors are in sessions of their own and outlive it; it
    reaps those that end while it runs (so their CPU time, and their
    tasks', is counted as its children's), the agent watches them with
    pidfds, as any supervisor an earlier agent started."""
    signal.signal(signal.SIGCHLD, _reap_children)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the modules a forked supervisor's task may need, loaded once here rather than in each supervisor: the
    # tasks that get a supervisor of their own are those with an image, URIs or a health check (the shared
    # supervisor runs the rest), and loading the image provisioner alone was 100 ms of CPU a task
    for name in PRELOADED_SIBLINGS:
        try:
            load_sibling(name)
        except Exception as exc:  # noqa: BLE001 - a supervisor that needs it loads it, and says why it cannot
            say(f"the launcher could not load {name}: {type(exc).__name__}: {exc}")
    # what is loaded now is shared by every supervisor forked from here: out of the collector's sight,
    # so that a supervisor's collections do not touch (and copy) the pages it lives in
    gc.collect()
    gc.freeze()
    forker = None
    for line in _requests():
        request = json.loads(line)
        if request.get("pid_namespace"):
            # the supervisor is the init of a PID namespace of its own (namespaces/pid). As an init it
            # would drop a SIGTERM of the agent's that came before it blocked it: blocked from the start
            if forker is None:
                forker = load_sibling("namespaces").PidNamespaceForker()
            signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
            try:
                pid = forker.first_of_new_namespace(os.fork)
            except OSError as exc:
                _answers.append(b"!%s\n" % str(exc).encode("utf-8", "replace").replace(b"\n", b" "))
                continue
            finally:
                if os.getpid() != 1:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, _WATCHED)
        else:
            pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _become_supervisor(request["run_dir"], request["env"], request["log"])
            finally:
                os._exit(code)
        _answers.append(b"%d\n" % pid)
    return 0


#: the launcher's answers not written yet (written together once no request is left to read)
_answers: list[bytes] = []


def _requests():
    """The launcher's requests, a line each, read from stdin; before it
    waits for more, the answers so far go out in one write (the agent
    submits a batch and reads the answers at its end). Not through
    ``sys.stdin``/``sys.stdout``: a buffer of theirs would be copied into
    every supervisor forked."""
    pending = b""
    while True:
        end = pending.find(b"\n")
        if end < 0:
            if _answers:
                data = memoryview(b"".join(_answers))
                _answers.clear()
                while data:
                    data = data[os.write(1, data):]
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return
            pending += chunk
            continue
        line, pending = pending[:end], pending[end + 1:]
        yield line


def _reap_children(*_: object) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _become_supervisor(run_dir: str, env: dict, log: str) -> int:
    """In a child of the launcher: what ``python -I -S supervisor.py
    RUN_DIR`` with ``env``, stdin /dev/null, stdout and stderr ``log`` and
    a session of its own would be — except that ``log`` is made on the
    first line said (:func:`say`)."""
    global _unopened_log
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):   # the launcher's pipes are gone from this process
        os.dup2(null, fd)
    os.closerange(3, 1 << 16)
    _unopened_log = log
    sys.stderr = _LazyStderr()
    os.environ.clear()
    os.environ.update(env)
    try:
        return main([run_dir])
    except BaseException:   # as the interpreter would say it, to the log
        import traceback
        say(traceback.format_exc().rstrip("\n"))
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
