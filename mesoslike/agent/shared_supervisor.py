"""The agent's shared supervisor: one long-lived process per agent that
starts, watches, kills and records the agent's plain tasks, without a
Python process (nor a fork of one) per task.

A task's supervisor (:mod:`.supervisor`) is a Python process forked per
task; its copy-on-write faults and its interpreter's work were most of
the CPU a short task cost (docs/performance.rst). This process does the
same work for many tasks at once: it *spawns* each task (``posix_spawn``,
a ``vfork``), reaps it when ``SIGCHLD`` says a child has ended
(:meth:`SharedSupervisor.reap_ended`), and writes its run files — the
same ``supervisor.json``, ``task.json`` and ``exit.json`` a task's own
supervisor writes, with the same meaning (:mod:`.supervisor` says which).
It runs the tasks that need nothing a per-task Python process must give
them (:func:`covers`): a command or a program, in its cgroups, with its
environment, secrets, output files, kill grace and its unix user (a fork
that runs no Python: :meth:`.supervisor.Supervisor.spawn`). A task with
namespaces (the default isolation) gets, instead of a supervisor of its
own as the init of its PID namespace, the compiled namespace init helper
(:mod:`.nsinit`, ``nsinit.c``), cloned by the helper's server (one per
shared supervisor, its child: :meth:`SharedSupervisor.server_for`) as pid 1
of a new PID namespace and a child of this process
(:meth:`SharedTask.submit_init`): it makes the mounts, starts the
task, forwards signals, reaps orphans and says when the task executes
and how it ended — on the shared supervisor's one status channel, each
line tagged with the task's number (:class:`.nsinit.StatusChannel`; a
helper built from an older ``nsinit.c``: on a pipe of its own). Its
requests to the server are not round trips: a batch of launches is sent, and the answers (each init's pid, in
the order asked) are taken as they come, in the loop; a kill that comes
before its task's answer is carried out once the pid is known. A
container image, URIs to fetch or a health check keep a supervisor of
their own.

It is started by the agent as ``python -I -S shared_supervisor.py META``
(``META``: the agent's ``<work_dir>/meta``) in a session of its own, so
it outlives the agent as a task's supervisor does; standard library only,
:mod:`.supervisor` loaded by its path — and msgspec's JSON decoder for
the tasks' ``launch.json`` if the agent names where its interpreter has
it (``--msgspec DIR``; :func:`launch_loads`). Its files, in ``META``:

``shared-supervisor.json``  its pid and start time (written once it listens)
``shared-supervisor.sock``  the socket an agent connects to (mode
                            ``0600`` in ``META``, which is the agent's
                            only, ``0700``: no other user reaches it)
``shared-supervisor.log``   what it says

The protocol, lines of ASCII on the socket (``RUN``: a run directory
relative to ``META/tasks``, ``FRAMEWORK/TASK``, both components made safe
by the agent, checked again here):

- agent to supervisor: ``L RUN`` start the task of that run directory (its
  ``launch.json``); ``T RUN`` kill it with its grace (SIGTERM to its
  process group, SIGKILL after ``grace_period``: a task supervisor's
  SIGTERM); ``K RUN`` kill it at once (SIGUSR1's).
- supervisor to agent: ``S RUN PID`` the task runs (``task.json``
  written); ``X RUN STATUS`` what its ``exit.json`` now holds (``STATUS``:
  that JSON object, compact, ASCII; told just before the ``E`` of the run
  when the file was written: the agent takes it rather than reading the
  file); ``E RUN`` its run has ended (``exit.json`` written first, so an
  agent that reads it on ``E`` — or at any time after — finds the status;
  an agent that does not know ``X``, an older one, ignores it).

One agent connection at a time: a new one (a restarted agent) replaces
the last. Ends are told to the connection there is; an agent that was not
connected when a task ended reads it from ``exit.json`` (it connects
first, then reads: an end after the connection is told, one before is in
the file). The task's end becomes durable as today: the agent journals
it, with an ``fdatasync``, before anyone is told.

Its own death (``kill -9``, a bug): its tasks lose the process that would
record their ends — a non-child cannot learn an exit status — so, as a
task whose own supervisor died, each of them is ended by the agent
(``TASK_FAILED``, ``REASON_EXECUTOR_TERMINATED``, the task's process group
and cgroups killed: :meth:`.executor.TaskExecutor.poll`, or ``recover``
after an agent restart) — Mesos's executor crash, whose tasks fail. The
agent starts a new shared supervisor for its next tasks. A ``SIGTERM``
to it kills its tasks (each with its grace), records them, and ends it.

Recovery timeout: as a task's supervisor, it looks at the agent's pid file
every second; the tasks of an agent gone for longer than their
``recovery_timeout`` are killed (``reason: "recovery_timeout"``). Once it
has had no task and no agent connected for a few seconds, it exits.
"""

from __future__ import annotations

import collections
import errno
import gc
import importlib.util
import json
import os
import re
import select
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING, Callable

__all__ = ["STATE_FILE", "SOCKET_FILE", "LOG", "covers", "main", "SharedSupervisor"]

STATE_FILE = "shared-supervisor.json"
SOCKET_FILE = "shared-supervisor.sock"
LOG = "shared-supervisor.log"
#: a request line longer than this is no request: the connection is closed
MAX_LINE = 4096
#: bytes of told ends an agent may leave unread before its connection is dropped (it re-reads exit.json)
MAX_OUTBOX = 1 << 20
#: how often the remains of an ended task's cgroups are looked at again (s)
CLEANUP_INTERVAL = 0.01
#: how long it stays with no task and no agent connected before it ends (s)
IDLE_LIMIT = 2.0
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _load_supervisor():
    """:mod:`.supervisor`, by its path (run as ``python -I -S``, no package)."""
    name = "mesoslike_supervisor_supervisor"
    loaded = sys.modules.get(name) or sys.modules.get("mesoslike.agent.supervisor")
    if loaded is not None:
        return loaded
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "supervisor.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from mesoslike.agent import nsinit
    from mesoslike.agent import supervisor as sup
else:
    sup = _load_supervisor()
    nsinit = sup.load_sibling("nsinit")


def launch_loads(directory: str | None) -> Callable[[bytes], object]:
    """What decodes a task's ``launch.json`` here: msgspec's JSON decoder
    from ``directory`` (the agent's interpreter's packages, which it names
    when msgspec is there: this process runs ``-I -S``, with none of them)
    — 4 µs where ``json.loads`` takes 12 (a 3 KB launch; 13 % of this
    loop's busy samples) — falling back to ``json.loads``, whose result or
    error stands, for anything msgspec refuses (``NaN``, a lone surrogate's
    escape, a byte-order mark, what is not JSON): the same object, or the
    same error, as before. Without ``directory``, or if msgspec cannot be
    imported from it: ``json.loads``. Either way a document nested too
    deeply for ``json.loads`` is a ValueError, not a RecursionError.
    With msgspec, the exit statuses are encoded by it too
    (:data:`.supervisor.sorted_json`: the same bytes)."""
    decode: Callable[[bytes], object] | None = None
    if directory:
        sys.path.append(directory)
        try:
            import msgspec.json
            decode = msgspec.json.Decoder().decode
            # the exit statuses too (write_exit_status; the agent's X line): the same bytes, a tenth of the CPU
            sup.sorted_json = msgspec.json.Encoder(order="sorted").encode
        except Exception as exc:   # another interpreter's build, a broken install: the standard library's
            sup.say(f"msgspec cannot be imported from {directory} ({type(exc).__name__}: {exc}): "
                    "launch files are decoded by json")
        finally:
            sys.path.remove(directory)

    def loads(data: bytes) -> object:
        if decode is not None:
            try:
                return decode(data)
            except Exception:   # msgspec's errors are ValueErrors; json has the last word on any of them
                pass
        try:
            return json.loads(data)
        except RecursionError:
            raise ValueError("nested too deeply") from None

    return loads


def covers(launch: dict) -> bool:
    """Whether a task of this ``launch.json`` content runs under the shared
    supervisor: no image, URIs or health check, and namespaces only with
    the init helper the agent names (``init``: :mod:`.nsinit`)."""
    return not (launch.get("image") or launch.get("uris") or launch.get("health_check")
                or (launch.get("namespaces") and not isinstance(launch.get("init"), str)))


def safe_run(name: str) -> bool:
    """``FRAMEWORK/TASK`` of two safe components (what the agent's
    ``path_component`` makes), nothing else: each of 1 to 255 characters
    of :data:`_SAFE`, not starting with ``.``. (One match of a compiled
    pattern: 0.3 µs where a split, two sets and a generator took 1.7, a
    request.)"""
    return _SAFE_RUN(name) is not None


_SAFE_RUN = re.compile(r"(?!\.)[a-zA-Z0-9_.\-]{1,255}/(?!\.)[a-zA-Z0-9_.\-]{1,255}").fullmatch


class EndFiles:
    """The memory cgroup files a pooled task's end reads — its OOM kill
    count and its peak (read, then reset) — kept open from one task of a
    pooled cgroup to the next, read with ``pread`` at 0 (a cgroup file
    makes its text anew at each read from the start): an ``openat`` and a
    ``close`` of each a task fewer, each a walk of a long path through
    kernfs and a file made and freed (~12 µs of ~14 a task). A cgroup
    removed (by this process, the agent's pool or its sweep) fails every
    later read of such a descriptor (``ENODEV``, even with another cgroup
    made at its path since): the file is then opened anew by its path, so
    a read is always of the cgroup the path names now. At most
    :attr:`limit` files are kept (the least recently read closed first:
    each descriptor of a cgroup gone holds a kernfs node, not the cgroup)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.fds: dict[str, int] = {}   # path -> descriptor, the least recently read first

    def pread(self, path: str, flags: int, size: int) -> tuple[bytes, int]:
        """The file's bytes from its start and its descriptor (kept here:
        never closed by the caller). Raises OSError as ``os.open`` or
        ``os.pread`` of the path would."""
        fd = self.fds.pop(path, -1)
        if fd >= 0:
            try:
                data = os.pread(fd, size, 0)
            except OSError:   # its cgroup removed: the path's file now, opened anew
                os.close(fd)
            else:
                self.fds[path] = fd
                return data, fd
        fd = os.open(path, flags | os.O_CLOEXEC)
        try:
            data = os.pread(fd, size, 0)
        except BaseException:
            os.close(fd)
            raise
        self.fds[path] = fd
        while len(self.fds) > self.limit:
            os.close(self.fds.pop(next(iter(self.fds))))
        return data, fd

    def forget(self, paths: list[str]) -> None:
        """Close what is kept of these files (their cgroup is being removed)."""
        for path in paths:
            fd = self.fds.pop(path, -1)
            if fd >= 0:
                os.close(fd)

    def close(self) -> None:
        self.forget(list(self.fds))


def _end_files_limit() -> int:
    """How many cgroup files :class:`EndFiles` keeps open: two a pooled
    cgroup, for as many as an agent pools and makes ahead (256 and spares),
    within a quarter of this process's descriptors."""
    import resource

    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        soft = 1024
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, min(1024, soft // 4))


class SharedTask(sup.Supervisor):
    """One task of the shared supervisor: a :class:`.supervisor.Supervisor`
    whose watching is the shared loop's. A task with namespaces is started
    through the init helper (:mod:`.nsinit`): :attr:`task_pid` is then
    the helper's (the process watched, signalled and reaped here), and the
    helper tells on the status channel (or its status pipe) when the task
    executes (its pid), why it could not, and how it ended."""

    # defaults as class attributes, set on a task only when they change (Supervisor's: one object a task)
    status: int | None = None          # the leader's wait status, once reaped
    cleanup_deadline = 0.0
    switch_by_popen = True   # no Python runs in a forked child of this process
    status_pipe = -1                   # the init helper's status pipe (read end), while open
    tag = -1                           # its tag on the status channel, if its init says its lines there
    said = b""                         # what the helper said and was not read as a line yet
    task_status: int | None = None     # the task leader's wait status, as the helper said it
    failure = ""                       # why the helper could not start the task
    executing = False                  # the helper said the task executes
    awaiting = False                   # its init asked of the server, its pid not answered yet
    pending_kill: float | None = None  # a kill asked while awaiting: its grace
    unrecorded_start: dict | None = None   # its task.json, not written: it had ended (started())
    #: the shared supervisor's tasks with a kill deadline (SharedSupervisor.killing), once it has one
    killing: dict[str, SharedTask] | None = None
    #: the memory cgroup files kept open from one pooled task to the next (a pooled task's: EndFiles)
    end_files: EndFiles | None = None
    kept_peak_fd = -1   # the peak's descriptor read_peak took from end_files

    def __init__(self, run_dir: str, name: str, host_pid: int = 0) -> None:
        super().__init__(run_dir, host_pid)
        self.name = name
        self._prefix = run_dir + "/"   # (the launch's run directory: made here, no trailing "/")

    def path(self, name: str) -> str:
        # a run file's path by concatenation: os.path.join, three to five a task, was ~1 µs each
        return self._prefix + name

    def read_oom_kills(self) -> int:
        """As a task supervisor's, through :attr:`end_files` (a pooled task's)."""
        files = self.end_files
        if files is None or self.launch.get("pooled") is not True:
            return super().read_oom_kills()
        kills = 0
        for path, key in self.launch.get("oom_events", []):
            try:
                kills += sup.parse_flat_keyed(files.pread(path, os.O_RDONLY, 4096)[0]).get(key, 0)
            except OSError:   # unreadable: none, as flat_keyed says
                pass
        return kills

    def read_peak(self, to_reset: bool) -> tuple[int | None, int]:
        """As a task supervisor's; a peak to reset (a pooled task's) through
        :attr:`end_files`, whose descriptor stays open."""
        files, path = self.end_files, self.launch.get("memory_peak") or ""
        if files is None or not to_reset or not path:
            return super().read_peak(to_reset)
        try:
            data, fd = files.pread(path, os.O_RDWR, 64)
        except OSError:   # one that cannot be written (v2's memory.peak before Linux 6.12), or gone: read alone
            return sup.read_int(path), -1
        try:
            peak = int(data.strip())
        except ValueError:
            return None, -1
        self.kept_peak_fd = fd
        return peak, fd

    def done_with_peak(self, fd: int) -> None:
        if fd != self.kept_peak_fd:   # end_files's stays open
            os.close(fd)

    def removing_cgroups(self) -> None:
        if self.end_files is not None:
            self.end_files.forget([path for path, _ in self.launch.get("oom_events", [])]
                                  + [self.launch.get("memory_peak") or ""])

    def kill(self, grace: float) -> None:
        """As a task's own supervisor kills it; with a deadline for its
        SIGKILL, the task is among the shared supervisor's :attr:`killing`
        (what its loop looks at for deadlines, not every task a turn)."""
        super().kill(grace)
        if self.killing is not None and self.kill_deadline is not None and not self.sigkill_sent:
            self.killing[self.name] = self

    def submit_init(self, server_for: Callable[[str], nsinit.Server], tag: int = -1) -> nsinit.Server:
        """Ask for the init helper of this task (``launch["init"]``) of
        its server (``server_for(helper)``, a :class:`.nsinit.Server`: a
        clone of a long-lived helper process, no exec; asked of a new one
        if that one had ended), in its cgroups and, with ``pid``, as pid 1
        of a new PID namespace; the server asked. Its answer (the init's
        pid) is not waited for: it comes on the server's socket, in the
        order of the requests (:meth:`SharedSupervisor.answered`).
        The helper joins the task's cgroups itself, first thing, and makes
        the private ``/tmp`` and the places of the paths kept below it: in
        a process of each task's, not in this one's loop, which every
        launch waits for (their directories made and the cgroup moves, which
        block on the kernel's cgroup lock, were most of its time). What
        must not run as root in the task's mount namespace is done here
        first, as a task's own supervisor does it: the volumes' missing
        sandbox sources made. With ``tag`` (>= 0) and a server that has a
        status channel, the init says its lines there under ``tag``
        (:attr:`tag` set; no status pipe: :meth:`.nsinit.Server.submit_channel`)."""
        launch = self.launch
        for volume in launch["volumes"]:
            if volume.get("make_source") and not os.path.lexists(volume["source"]):
                sup.make_directory_in(volume["source"], volume["within"], self.user)
        keep: list[tuple[str, str]] = []
        if launch["tmp"] and "mount" in launch["namespaces"]:
            keep = _private_tmp_places(launch["tmp"], launch["keep"])
        user = self.user
        try:
            spec = nsinit.encode_spec(namespaces=launch["namespaces"], hostname=launch["hostname"],
                                      tmp=launch["tmp"] if "mount" in launch["namespaces"] else "", keep=keep,
                                      volumes=launch["volumes"] if "mount" in launch["namespaces"] else [],
                                      user=(user.uid, user.gid, user.groups) if user is not None else None,
                                      cwd=launch["cwd"], env=self.env, argv=self.argv(), cgroups=launch["cgroups"])
        except (ValueError, KeyError, TypeError) as exc:
            raise sup.LaunchProblem(f"the task's container cannot be described: {exc}") from None
        pid_namespace = "pid" in launch["namespaces"]
        owner = (user.uid, user.gid) if user is not None else None
        if tag >= 0:   # one channel for every init: no pipe made, passed, polled and closed a task
            server = server_for(launch["init"])
            try:
                sent = server.submit_channel(tag, spec, launch["stdout"], launch["stderr"], owner, pid_namespace)
            except nsinit.ServerGone:   # killed, or ended: this request did not reach it; a new one
                server = server_for(launch["init"])
                sent = server.submit_channel(tag, spec, launch["stdout"], launch["stderr"], owner, pid_namespace)
            if sent:
                self.tag = tag
                self.started_by = "nsinit"
                return server
        read_end, write_end = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            server = server_for(launch["init"])
            try:
                sent = server.submit_inline(spec, write_end, launch["stdout"], launch["stderr"], owner,
                                            pid_namespace)
            except nsinit.ServerGone:   # killed, or ended: this request did not reach it; a new one
                server = server_for(launch["init"])
                sent = server.submit_inline(spec, write_end, launch["stdout"], launch["stderr"], owner,
                                            pid_namespace)
            if not sent:   # a helper of before, or a spec too large for a request: in a memfd
                server = self._submit_by_memfd(server_for, spec, write_end)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        self.status_pipe = read_end
        self.started_by = "nsinit"
        return server

    def _submit_by_memfd(self, server_for: Callable[[str], nsinit.Server], spec: bytes,
                         write_end: int) -> nsinit.Server:
        """The request of a server without inline requests (a helper built
        from an older ``nsinit.c``) or of a spec larger than one: the spec
        in a memfd, the output files opened here."""
        launch, user = self.launch, self.user
        spec_fd = os.memfd_create("nsinit-spec", os.MFD_CLOEXEC)
        stdout = stderr = -1
        try:
            _write_all(spec_fd, spec)
            os.lseek(spec_fd, 0, os.SEEK_SET)
            stdout = sup.open_output(launch["stdout"], user)
            stderr = sup.open_output(launch["stderr"], user)
            server = server_for(launch["init"])
            try:
                server.submit(spec_fd, write_end, stdout, stderr, "pid" in launch["namespaces"])
            except nsinit.ServerGone:   # killed, or ended: this request did not reach it; a new one
                server = server_for(launch["init"])
                server.submit(spec_fd, write_end, stdout, stderr, "pid" in launch["namespaces"])
        finally:
            for fd in (spec_fd, stdout, stderr):
                if fd >= 0:
                    os.close(fd)
        return server

    def read_status(self) -> None:
        """Read what the helper said (non-blocking): ``R PID``, ``H PID``
        (the task's host pid, with ``R``: a helper with a PID namespace),
        ``F WHY``, ``X STATUS`` lines; at the end of the pipe, closed. A
        read short of its size emptied the pipe: no more is tried (the
        loop's epoll says when more comes; once the init is reaped, all it
        said was in that read)."""
        while self.status_pipe >= 0:
            try:
                chunk = os.read(self.status_pipe, 4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                chunk = b""
            if not chunk:
                os.close(self.status_pipe)
                self.status_pipe = -1
                return
            self.said += chunk
            short = len(chunk) < 4096   # the pipe emptied: no read for its EAGAIN (epoll says when more comes)
            *lines, self.said = self.said.split(b"\n")
            if len(self.said) > MAX_LINE:
                self.said = b""
            self.take(lines)
            if short:
                return

    def take(self, lines: list[bytes] | tuple[bytes, ...]) -> None:
        """What the helper said, line by line (:meth:`read_status`; a
        status channel's line, :meth:`SharedSupervisor.hear_channel`)."""
        for line in lines:
            kind, _, rest = line.decode("utf-8", "replace").partition(" ")
            if kind == "R" and rest.isdigit() and not self.executing:
                self.executing = True
                self.reported_pid = int(rest)
            elif kind == "H" and rest.isdigit() and int(rest) > 0:
                self.host_pid_said = int(rest)
            elif kind == "F" and not self.failure:
                self.failure = rest[:2000] or "the namespace init helper failed"
            elif kind == "X" and rest.lstrip("-").isdigit():
                self.task_status = int(rest)

    def spawn(self, homes: list, switch: bool = False) -> int:
        """As :meth:`.supervisor.Supervisor.spawn`; the user switch's
        ``Popen`` (a fork that sets no signal mask) runs with ``SIGCHLD``
        unblocked, as the task must start (the loop blocks it for its
        signalfd): a ``SIGCHLD`` taken meanwhile is lost, so the loop looks
        for ended children again after such a start
        (:attr:`SharedSupervisor.sweep_due`)."""
        if not switch:
            return super().spawn(homes)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGCHLD,))
        try:
            return super().spawn(homes, switch)
        finally:
            signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGCHLD,))

    reported_pid = 0   # the task's pid as the helper's namespace sees it
    host_pid_said = 0  # the task's pid as the host sees it, as the helper said it (H; 0: not said)


#: what the init helper is started with blocked: a SIGTERM before it waits for signals waits for it (the
#: first process of a PID namespace would drop one it has no handler for)
INIT_BLOCKED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGCHLD)


def _private_tmp_places(tmp: str, keep: list) -> list[tuple[str, str]]:
    """:func:`.namespaces.private_tmp`'s paths: the place inside ``tmp``
    of each kept path below ``/tmp``, as ``(path, place)`` pairs to bind
    (the helper makes ``tmp`` and the places). Every task of an agent
    keeps the same paths: where they lie below ``/tmp`` is worked out once
    (:data:`_KEPT_BELOW_TMP`)."""
    relatives = _KEPT_BELOW_TMP.get(tuple(keep))
    if relatives is None:
        namespaces = sup.load_sibling("namespaces")
        root = "/tmp"
        real_root = root if not os.path.islink(root) else os.path.realpath(root)
        relatives = []
        for path in namespaces._outermost(keep):
            relative = os.path.relpath(path, real_root)
            if relative != "." and not relative.startswith(".."):
                relatives.append((path, relative))
        if len(_KEPT_BELOW_TMP) >= 64:
            _KEPT_BELOW_TMP.clear()
        _KEPT_BELOW_TMP[tuple(keep)] = relatives
    return [(path, os.path.join(tmp, relative)) for path, relative in relatives]


#: the kept paths of a launch (``keep``) -> each below ``/tmp`` with its path relative to it
_KEPT_BELOW_TMP: dict[tuple, list[tuple[str, str]]] = {}


def child_signals() -> int:
    """A signalfd (non-blocking, close-on-exec) for ``SIGCHLD``, which the
    caller blocks: readable while one is pending. The standard library has
    no ``signalfd``; the C library's, through ``ctypes``."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    mask = (ctypes.c_ulong * (1024 // bits))()   # the C library's sigset_t: 1,024 bits
    mask[(signal.SIGCHLD - 1) // bits] |= 1 << ((signal.SIGCHLD - 1) % bits)
    fd = libc.signalfd(-1, ctypes.byref(mask), os.O_NONBLOCK | os.O_CLOEXEC)   # SFD_NONBLOCK, SFD_CLOEXEC
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"signalfd: {os.strerror(code)}")
    return int(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class SharedSupervisor:
    """The loop: accept the agent, read its requests, start tasks, reap
    them as ``SIGCHLD`` says (a signalfd), kill on request and at
    deadlines, record ends."""

    def __init__(self, meta: str, loads: Callable[[bytes], object] = json.loads) -> None:
        """``loads``: what decodes a task's ``launch.json`` (:func:`launch_loads`)."""
        self.meta = os.path.abspath(meta)
        self.loads = loads
        self.tasks_root = os.path.join(self.meta, "tasks")
        self.agent_pid_file = os.path.join(self.meta, "agent.pid")
        self.tasks: dict[str, SharedTask] = {}
        #: the tasks with a kill deadline not reached (SharedTask.kill): the loop's turn looks at these for
        #: its timeout and its SIGKILLs, not at every task (two passes over all of them a turn, each task's
        #: launch and end a few turns: O(tasks running) a task)
        self.killing: dict[str, SharedTask] = {}
        #: the running tasks by the pid reaped here (their init's, for a task with namespaces): a task's
        #: end is found by waitid when SIGCHLD comes (reap_ended), not watched by a pidfd of its own in the
        #: epoll set (pidfd_open, two epoll_ctl and a close a task)
        self.by_pid: dict[int, SharedTask] = {}
        self.child_signals = -1   # the signalfd of SIGCHLD (blocked), once run
        #: look for ended children at the end of this turn: a SIGCHLD may have been taken unblocked (a
        #: user switch's Popen), or an init's zombie waited for its server's answer (answered)
        self.sweep_due = False
        self.by_status_pipe: dict[int, SharedTask] = {}   # the init helpers' status pipes
        #: the inits' status channel (one for every server started; made with the first), and the tasks
        #: whose inits say their lines there, by tag: no pipe a task (pipe2, its epoll_ctl, two close)
        self.channel: nsinit.StatusChannel | None = None
        self.by_tag: dict[int, SharedTask] = {}
        self.next_tag = 0
        self.init_server: nsinit.Server | None = None   # the init helper's server, once a task has namespaces
        #: the servers with requests in flight (or answers unread): socket fd -> the server and the tasks
        #: asked of it, in the order asked (it answers in that order)
        self.servers: dict[int, tuple[nsinit.Server, collections.deque[SharedTask]]] = {}
        self.host_proc = -1    # /proc, to find a task's pid from its helper's (opened once needed)
        #: the pooled memory cgroups' end files, kept open from one task to the next
        self.end_files = EndFiles(_end_files_limit())
        self.cleaning: list[SharedTask] = []
        #: epoll, not poll: a task's status pipe is watched while it runs, and poll(2) looked at
        #: every one of them each turn (8 % of this process's CPU in a 4,000-task burst, perf)
        self.poller = select.epoll()
        self.listener: socket.socket | None = None
        self.conn: socket.socket | None = None
        self.inbox = b""
        self.outbox = b""
        self.agent_seen_at = time.monotonic()
        # the agent that starts it connects within this long; only then does "no agent, no task" end it
        self.next_agent_check = time.monotonic() + sup.AGENT_CHECK_INTERVAL
        self.stopping = False
        self.idle_since: float | None = None   # since when it has had no task and no connection
        self.wake_read, self.wake_write = os.pipe()
        self.pid = os.getpid()
        self.start_ticks = sup.process_start_ticks(self.pid)
        #: every task's supervisor.json: the same record (this process), encoded once
        self.supervisor_record = json.dumps({"pid": self.pid, "start_ticks": self.start_ticks, "shared": True},
                                            sort_keys=True).encode()

    # ------------------------------------------------------------ start
    def listen(self) -> None:
        """Bind the socket (by a path through ``/proc/self/fd``: a work dir's
        path may be longer than a socket address), then say who it is."""
        dir_fd = os.open(self.meta, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            path = f"/proc/self/fd/{dir_fd}/{SOCKET_FILE}"
            try:
                os.unlink(SOCKET_FILE, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            listener.bind(path)
            os.chmod(SOCKET_FILE, 0o600, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        listener.listen(4)
        listener.setblocking(False)
        self.listener = listener
        self.poller.register(listener.fileno(), select.EPOLLIN)
        self.poller.register(self.wake_read, select.EPOLLIN)
        sup.write_json_atomically(os.path.join(self.meta, STATE_FILE),
                                  {"pid": self.pid, "start_ticks": self.start_ticks}, False)

    def run(self) -> int:
        # handled, not ignored: a task started by a fork of this process (a user switch) gets them back
        # as SIG_DFL at its exec, where an ignored signal would stay ignored
        signal.signal(signal.SIGINT, _ignore)
        signal.signal(signal.SIGHUP, _ignore)
        signal.signal(signal.SIGTERM, self._terminate)
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        signal.set_wakeup_fd(self.wake_write)
        # blocked before any task starts: each child's end is then pending on the signalfd, read with the
        # rest of the loop's work (the tasks themselves start with an empty mask: posix_spawn's setsigmask,
        # the init server's own, SharedTask.spawn)
        signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGCHLD,))
        self.child_signals = child_signals()
        self.poller.register(self.child_signals, select.EPOLLIN)
        self.listen()
        while True:
            now = time.monotonic()
            if now >= self.next_agent_check:
                self.next_agent_check = now + sup.AGENT_CHECK_INTERVAL
                if self.check_agent(now):
                    break
            if self.stopping and not self.tasks:
                break
            for fd, _ in self.poller.poll(self.timeout(now)):
                if self.listener is not None and fd == self.listener.fileno():
                    self.accept()
                elif self.conn is not None and fd == self.conn.fileno():
                    self.receive()
                elif fd == self.wake_read:
                    self._drain_wakeups()
                elif fd == self.child_signals:
                    self.reap_ended()
                elif self.channel is not None and fd == self.channel.fileno():
                    self.hear_channel()
                elif fd in self.by_status_pipe:
                    self.heard(self.by_status_pipe[fd])
                elif fd in self.servers:
                    self.settle(self.servers[fd][0])
            if self.sweep_due:
                self.reap_ended()
            self.deadlines(time.monotonic())
            self.flush()
        self.close()
        return 0

    def unwatch(self, fd: int) -> None:
        """``fd`` no longer polled (one closed already is out of the epoll set: the kernel took it out)."""
        try:
            self.poller.unregister(fd)
        except OSError:
            pass

    def timeout(self, now: float) -> float:
        wake = self.next_agent_check
        for task in self.killing.values():
            if task.kill_deadline is not None and not task.sigkill_sent:
                wake = min(wake, task.kill_deadline)
        if self.cleaning:
            wake = min(wake, now + CLEANUP_INTERVAL)
        for server, _ in self.servers.values():
            if server.pending:
                wake = min(wake, server.oldest + server.TIMEOUT)
        return max(0.0, wake - now)

    def _terminate(self, *_: object) -> None:
        self.stopping = True

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_read, 512):
                pass
        except BlockingIOError:
            pass
        if self.stopping:
            for task in self.tasks.values():
                if task.kill_deadline is None and task.task_pid:
                    task.kill(float(task.launch["grace_period"]))

    # ------------------------------------------------------------ the agent
    def accept(self) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        self.drop_connection()   # a restarted agent: the last one is gone
        conn.setblocking(False)
        self.conn = conn
        self.poller.register(conn.fileno(), select.EPOLLIN)

    def drop_connection(self) -> None:
        if self.conn is not None:
            self.unwatch(self.conn.fileno())
            self.conn.close()
            self.conn = None
        self.inbox = self.outbox = b""

    def receive(self) -> None:
        assert self.conn is not None
        try:
            data = self.conn.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.drop_connection()
            return
        self.inbox += data
        *lines, self.inbox = self.inbox.split(b"\n")
        if len(self.inbox) > MAX_LINE:
            sup.say("a request line too long: the connection is closed")
            self.drop_connection()
            return
        for line in lines:
            self.request(line.decode("ascii", "replace"))
        server = self.init_server
        if server is not None and (server.pending or server.ready):   # the answers come so far
            self.settle(server)

    def request(self, line: str) -> None:
        kind, _, name = line.partition(" ")
        if not safe_run(name) or kind not in ("L", "T", "K"):
            sup.say(f"a bad request ignored: {line[:200]!r}")
            return
        if kind == "L":
            if name not in self.tasks:
                self.launch(name)
            return
        task = self.tasks.get(name)
        grace = float(task.launch["grace_period"]) if task is not None and kind == "T" else 0.0
        if task is not None and task.awaiting:   # its init's pid not answered yet: killed once it is
            task.pending_kill = grace if task.pending_kill is None else min(grace, task.pending_kill)
            return
        if task is None or not task.task_pid:
            return   # ended (its end is told), or asked twice
        task.kill(grace)

    def tell(self, line: str) -> None:
        if self.conn is None:
            return
        self.outbox += line.encode("ascii") + b"\n"

    def tell_status(self, task: SharedTask, status: dict) -> None:
        """``X RUN STATUS``: what ``exit.json`` holds now (compact ASCII JSON),
        told before the run's ``E`` so the agent need not read the file: the
        bytes written there (:func:`.supervisor.write_exit_status`), not
        encoded again."""
        if self.conn is None:
            return
        text = task.exit_json or sup.status_json(status)
        self.outbox += b"X " + task.name.encode("ascii") + b" " + text + b"\n"

    def flush(self) -> None:
        if self.conn is None or not self.outbox:
            return
        try:
            sent = self.conn.send(self.outbox)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.drop_connection()
            return
        self.outbox = self.outbox[sent:]
        if len(self.outbox) > MAX_OUTBOX:   # the agent reads nothing: it will read exit.json when it comes back
            sup.say("the agent reads nothing of what it is told: its connection is closed")
            self.drop_connection()

    def check_agent(self, now: float) -> bool:
        """Kill the tasks of an agent gone longer than their recovery
        timeout; True if this process should end: no task and no agent
        connected for :data:`IDLE_LIMIT` (an agent that stopped let go of
        it; the next one starts another)."""
        if self.tasks or self.conn is not None:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = now
        elif now - self.idle_since >= IDLE_LIMIT:
            return True
        if sup._agent_alive(self.agent_pid_file):
            self.agent_seen_at = now
            return False
        for task in self.tasks.values():
            timeout = float(task.launch["recovery_timeout"])
            if now - self.agent_seen_at >= timeout and task.kill_deadline is None and task.task_pid:
                task.reason = sup.REASON_RECOVERY_TIMEOUT
                task.message = f"the agent did not come back within {timeout:g} s (--recovery-timeout)"
                sup.say(f"{task.name}: {task.message}: killing the task")
                task.kill(float(task.launch["grace_period"]))
        return False

    # ------------------------------------------------------------ tasks
    def launch(self, name: str) -> None:
        run_dir = os.path.join(self.tasks_root, name)
        task = SharedTask(run_dir, name, self.pid)
        task.killing = self.killing
        task.end_files = self.end_files
        try:
            sup.overwrite(task.path(sup.SUPERVISOR_FILE), self.supervisor_record)   # sup.write_run_file's way
        except OSError as exc:
            sup.say(f"{name}: cannot write its supervisor.json: {exc}")
            return
        try:
            task.launch = sup.read_launch(task.path(sup.LAUNCH_FILE), self.loads)
        except FileNotFoundError:
            return   # cancelled (a restarted agent found no supervisor.json): nothing to run, nothing to tell
        except (OSError, ValueError) as exc:
            self.failed(task, sup.REASON_LAUNCH_FAILED, f"unreadable launch file: {exc}")
            return
        if not covers(task.launch):
            self.failed(task, sup.REASON_LAUNCH_FAILED, "the shared supervisor does not run tasks with an image, "
                                                        "URIs or a health check, nor namespaces without its helper")
            return
        init = bool(task.launch["namespaces"])
        try:
            task.prepare()
            if init:
                server = task.submit_init(self.server_for, self.next_tag)
                if task.tag >= 0:
                    self.by_tag[task.tag] = task
                    self.next_tag += 1
                task.awaiting = True
                self.tasks[name] = task
                self.asked(server, task)
                return
            task.task_pid = task.start()
        except sup.LaunchProblem as exc:
            self.failed(task, sup.REASON_LAUNCH_FAILED, str(exc))
            return
        except OSError as exc:
            if task.task_pid:   # started, and cannot be watched: it must not run unsupervised
                task.signal_group(signal.SIGKILL)
                os.waitpid(task.task_pid, 0)
            if task.status_pipe >= 0:
                os.close(task.status_pipe)
                task.status_pipe = -1
            self.failed(task, sup.REASON_LAUNCH_FAILED, f"{type(exc).__name__}: {exc}")
            return
        self.tasks[name] = task
        self.by_pid[task.task_pid] = task
        if task.child is not None:   # a Popen: SIGCHLD was unblocked for it (SharedTask.spawn)
            self.sweep_due = True
        self.started(task, task.task_pid)

    def asked(self, server: nsinit.Server, task: SharedTask) -> None:
        """``task``'s init asked of ``server``: its answer awaited (on the server's socket, polled)."""
        fd = server.fileno()
        entry = self.servers.get(fd)
        if entry is not None and entry[0] is not server:   # a server done and not yet settled had this number
            self.settle(entry[0])
            entry = None
        if entry is None:
            entry = self.servers[fd] = (server, collections.deque())
            self.poller.register(fd, select.EPOLLIN)
        entry[1].append(task)

    def settle(self, server: nsinit.Server, wait: bool = False) -> None:
        """Take ``server``'s answers that have come (each to the task asked
        in its turn; with ``wait``, every answer to what was asked, waited
        for); a server that is done (ended, let go, overdue) is no longer
        polled — before anything opens a descriptor that could take its
        socket's number — and its unanswered tasks fail."""
        entry = next(((fd, queue) for fd, (known, queue) in self.servers.items() if known is server), None)
        if entry is None:
            return
        fd, queue = entry
        while True:
            answers = server.answers(wait=wait and server.pending > 0)
            if server.sock is None:
                del self.servers[fd]
                self.unwatch(fd)
            for answer in answers:
                self.answered(queue.popleft(), answer)
            if not (wait and server.pending and server.sock is not None):
                return

    def answered(self, task: SharedTask, answer: int | OSError) -> None:
        """The server's answer for ``task``'s init: its pid (watched from
        now on; it runs once its helper says so, :meth:`heard`), or why it
        was not cloned (the launch fails)."""
        task.awaiting = False
        if isinstance(answer, int):
            task.task_pid = answer
        if isinstance(answer, OSError):
            if task.status_pipe >= 0:
                os.close(task.status_pipe)
                task.status_pipe = -1
            if isinstance(answer, nsinit.ServerGone):   # cloned or not, unknown: an init joins its cgroups first
                task.kill_cgroups()
            self.by_tag.pop(task.tag, None)
            del self.tasks[task.name]
            self.failed(task, sup.REASON_LAUNCH_FAILED, f"{type(answer).__name__}: {answer}")
            return
        self.by_pid[answer] = task
        self.sweep_due = True   # it may have ended already: its zombie, left by reap_ended until now
        if task.status_pipe >= 0:
            self.by_status_pipe[task.status_pipe] = task
            self.poller.register(task.status_pipe, select.EPOLLIN)
        elif task.executing:   # said on the channel before its answer was read: told now, with its pid
            self.started(task, self.task_host_pid(task))
        if task.pending_kill is not None:
            task.kill(task.pending_kill)
        elif self.stopping:
            task.kill(float(task.launch["grace_period"]))

    def server_for(self, helper: str) -> nsinit.Server:
        """The init helper's server (:class:`.nsinit.Server`) for the helper
        ``helper`` (the one the agent names: a restarted agent of another
        version may name another), started if there is none or the last
        one has ended."""
        server = self.init_server
        if server is not None and (server.sock is None or server.helper != helper):
            if server.sock is not None:   # another helper named: what was asked of this one is answered first
                self.settle(server, wait=True)
            server.close()   # what is still in flight (an ended server's) fails (settle)
            self.settle(server)
            server = self.init_server = None
        if server is None:
            if self.channel is None:   # kept while this process lives: the inits of a server let go hold it
                self.channel = nsinit.StatusChannel()
                self.poller.register(self.channel.fileno(), select.EPOLLIN)
            server = self.init_server = nsinit.Server(helper, INIT_BLOCKED, self.channel)
        return server

    def started(self, task: SharedTask, pid: int) -> None:
        """The task executes (``pid``: the host's): its ``task.json``, and the agent told.
        A task whose helper said in the same read that it has ended (a
        short task: ``R`` and ``X`` come together) gets no ``task.json``
        unless its end cannot be recorded at once (:meth:`reap`): its
        ``exit.json`` follows within this loop's turn, and until it is
        written the run directory reads as it did before the helper's
        words were read (started, not yet said so) — to a restarted agent
        too, which then learns the end as any (:meth:`.TaskExecutor.recover`).
        Four system calls and a JSON encoding a task fewer."""
        record = {"pid": pid, "started": task.started_by}
        if task.started_by == "nsinit":
            record["init"] = task.task_pid   # the init of its namespaces (its supervisor, as far as it sees)
        if task.task_status is not None:
            task.unrecorded_start = record
        elif task.started_by == "nsinit" and type(pid) is int and type(task.task_pid) is int:
            # write_run_file's bytes (json.dumps, sorted keys) made by formatting: a JSON encoding a start fewer
            sup.overwrite(task.path(sup.TASK_FILE), b'{"init": %d, "pid": %d, "started": "nsinit"}' % (task.task_pid, pid))
        else:
            sup.write_run_file(task.path(sup.TASK_FILE), record)
        self.tell(f"S {task.name} {pid}")

    def heard(self, task: SharedTask) -> None:
        """The init helper of ``task`` said something (or closed its pipe)."""
        was_executing = task.executing
        pipe = task.status_pipe
        task.read_status()
        if task.status_pipe < 0 and pipe >= 0:   # closed at its end: the kernel took it out of the epoll set
            self.by_status_pipe.pop(pipe, None)
        if task.executing and not was_executing:
            self.started(task, self.task_host_pid(task))

    def hear_channel(self) -> None:
        """What the inits said on the status channel, each line to its
        task by its tag (:meth:`heard`'s, for a channel's init). A task
        whose answer is not read yet is told started once it is
        (:meth:`answered`): its pid is not known before."""
        if self.channel is None:
            return
        begun: list[SharedTask] = []
        for tag, line in self.channel.read():
            task = self.by_tag.get(tag)
            if task is None:   # a tag of no task now (never written so): dropped
                continue
            was_executing = task.executing
            task.take((line,))
            if task.executing and not was_executing and not task.awaiting:
                begun.append(task)
        # told once every line read is taken: a short task's R and X in the same read, as in one read
        # of a pipe, get no task.json (started)
        for task in begun:
            self.started(task, self.task_host_pid(task))

    def task_host_pid(self, task: SharedTask) -> int:
        """The task's pid as the host sees it, from the pid its helper
        said (in its PID namespace: found among the helper's children).
        If the task is gone already, its helper's: a pid of its container
        that no other process can have until it is reaped here (never 0,
        which a process group signal would take for the agent's own)."""
        if "pid" not in task.launch["namespaces"]:
            return task.reported_pid
        if task.task_status is not None:   # it has ended, said its helper: gone from its children (3 calls)
            return task.task_pid
        if task.host_pid_said:   # the helper read it (H): no /proc read here
            return task.host_pid_said
        if self.host_proc < 0:
            self.host_proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        found = sup.load_sibling("namespaces").host_pid_of_child(self.host_proc, task.task_pid, task.reported_pid)
        return found if found is not None else task.task_pid

    def failed(self, task: SharedTask, reason: str, message: str) -> None:
        sup.say(f"{task.name}: not started: {message}")
        try:
            recorded = task.record(None, None, reason, message)
        except OSError as exc:
            sup.say(f"{task.name}: cannot record its end: {exc}")
        else:
            self.tell_status(task, recorded)
        self.tell(f"E {task.name}")

    def reap_ended(self) -> None:
        """``SIGCHLD`` pending (the signalfd read empty), or a look due:
        every ended child found with ``waitid`` — looked at, not reaped
        (``WNOWAIT``) — and taken in turn: a task's (:meth:`reap`), an
        init server's (its answers read first, then reaped:
        :meth:`.nsinit.Server.close`), or one of no one's (reaped). An init
        whose server's answer has not been read yet is an ended child too:
        its zombie is left until the answer comes (:meth:`answered` asks
        for another look), and the look stops there (``waitid`` would find
        it first again)."""
        self.sweep_due = False
        if self.child_signals >= 0:
            try:
                while len(os.read(self.child_signals, 4096)) == 4096:
                    pass
            except (BlockingIOError, InterruptedError):
                pass
        while True:
            try:
                found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if found is None or not found.si_pid:
                return
            pid = found.si_pid
            task = self.by_pid.get(pid)
            if task is not None:
                self.reap(task)
                continue
            servers = [server for server, _ in self.servers.values()]
            if self.init_server is not None:
                servers.append(self.init_server)
            server = next((server for server in servers if server.pid == pid and server.sock is not None), None)
            if server is not None:   # ended: what it answered first, then let go (and reaped)
                self.settle(server)
                server.close()
                self.settle(server)
                continue
            for server in servers:   # an init whose answer came and is not read yet?
                if server.pending:
                    self.settle(server)
            if pid in self.by_pid:
                continue
            if any(server.pending for server in servers):   # maybe an init still unanswered: left
                return
            try:   # no one's (an init of a server gone before it answered): reaped
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def reap(self, task: SharedTask) -> None:
        """The task's leader has ended: its group killed (the unreaped
        leader still pins the group id), then reaped; its cgroups emptied
        before its end is recorded. The first process of a PID namespace
        (an init helper's) needs no kill: its group is its own (``setpgid``)
        and of its namespace, every process of which the kernel killed and
        reaped before this zombie could be seen (:meth:`emptied`): one
        ``kill`` a task fewer."""
        self.by_pid.pop(task.task_pid, None)
        if not (task.started_by == "nsinit" and "pid" in task.launch.get("namespaces", ())):
            task.signal_group(signal.SIGKILL)
        _, task.status = os.waitpid(task.task_pid, 0)
        if task.status_pipe >= 0:   # an init helper: all it said is in its pipe now
            pipe = task.status_pipe
            self.heard(task)
            if task.status_pipe >= 0:   # all read (its end not read yet, or something else holds it)
                self.by_status_pipe.pop(pipe, None)   # closed: out of the epoll set (no one else has it)
                os.close(pipe)
                task.status_pipe = -1
        if task.tag >= 0:   # its init said all it said before it ended: on the channel now, if not read yet
            if task.task_status is None and not task.failure:
                self.hear_channel()
            self.by_tag.pop(task.tag, None)
        if task.child is not None:   # reaped here: its Popen must never wait for the pid (reused by then)
            task.child.returncode = os.waitstatus_to_exitcode(task.status)
        task.cleanup_deadline = time.monotonic() + sup.CLEANUP_LIMIT
        if not self.finish(task):
            if task.unrecorded_start is not None:   # its end waits for its cgroups: its start written now
                try:
                    sup.write_run_file(task.path(sup.TASK_FILE), task.unrecorded_start)
                except OSError as exc:
                    sup.say(f"{task.name}: cannot write its task.json: {exc}")
                task.unrecorded_start = None
            self.cleaning.append(task)

    def finish(self, task: SharedTask) -> bool:
        """Record the task's end once nothing of it is left in its cgroups
        (or the time to empty them is over); False while it waits."""
        if not self.emptied(task) and time.monotonic() < task.cleanup_deadline:
            return False
        status = task.task_status if task.task_status is not None else task.status
        assert status is not None
        code, signum = (None, os.WTERMSIG(status)) if os.WIFSIGNALED(status) else (os.WEXITSTATUS(status), None)
        reason, message = task.reason, task.message
        if task.failure and not task.executing:   # its helper could not start it
            code = signum = None
            reason, message = sup.REASON_LAUNCH_FAILED, task.failure
            sup.say(f"{task.name}: not started: {message}")
        try:
            recorded = task.record(code, signum, reason, message)
        except OSError as exc:
            sup.say(f"{task.name}: cannot record its end: {exc}")
        else:
            self.tell_status(task, recorded)
        del self.tasks[task.name]
        self.tell(f"E {task.name}")
        return True

    @staticmethod
    def emptied(task: SharedTask) -> bool:
        """Whether nothing of the reaped task is left in its cgroups
        (what is left SIGKILLed: :meth:`.supervisor.Supervisor.kill_cgroups`).
        A task whose init was the first process of its PID namespace needs
        no look: the init joined the cgroups as pid 1 of that namespace, so
        every process of the task in them is of the namespace, and the
        kernel kills and reaps all of a namespace's processes before its
        first process ends (``zap_pid_ns_processes``; ``waitid`` finds the
        init's zombie only after that, and a process that has exited is no
        longer in ``cgroup.procs``). Four ``cgroup.procs`` read a task
        fewer (12 % of this loop's busy samples)."""
        if task.started_by == "nsinit" and task.status is not None and "pid" in task.launch["namespaces"]:
            task.cgroups_emptied = True
            return True
        return task.kill_cgroups()

    def deadlines(self, now: float) -> None:
        for name, task in list(self.killing.items()):
            if self.tasks.get(name) is not task or task.sigkill_sent or task.status is not None:
                del self.killing[name]   # ended, reaped or SIGKILLed: no deadline left
            elif task.kill_deadline is not None and now >= task.kill_deadline:
                task.sigkill()
                del self.killing[name]
        if self.cleaning:
            self.cleaning = [task for task in self.cleaning if not self.finish(task)]
        for server, _ in list(self.servers.values()):
            if server.overdue(now):   # no answer for that long: let go, its requests fail
                sup.say(f"the namespace init server {server.pid} does not answer: it is let go")
                server.close()
                self.settle(server)

    def close(self) -> None:
        if self.listener is not None:
            try:   # only its own socket: a later shared supervisor may have bound the path anew
                if self.start_ticks == _state_ticks(self.meta):
                    os.unlink(os.path.join(self.meta, SOCKET_FILE))
                    os.unlink(os.path.join(self.meta, STATE_FILE))
            except OSError:
                pass
            self.listener.close()
        self.drop_connection()
        if self.init_server is not None:
            self.init_server.close()
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.child_signals >= 0:
            os.close(self.child_signals)
            self.child_signals = -1
        self.end_files.close()


def _ignore(*_: object) -> None:
    pass


def _state_ticks(meta: str) -> object:
    try:
        state = sup.read_json(os.path.join(meta, STATE_FILE))
        return state.get("start_ticks") if isinstance(state, dict) else None
    except (OSError, ValueError):
        return None


#: container objects allocated (net) between two passes of the collector over the young generation:
#: mesoslike.young_collections's figure (this script imports nothing of the package but its siblings)
YOUNG_PASS_EVERY = 50_000


def _pass_over_young_objects_less_often() -> None:
    """As the agent and the master do (:mod:`mesoslike.young_collections`):
    a task's launch, spec and records (a decoded ``launch.json`` alone is
    dozens of containers) live until its end, a second or two in a burst;
    at Python's 700 the collector passed over them and promoted them every
    few launches. What is loaded at start is frozen out of its sight."""
    gc.collect()
    gc.freeze()
    young, *older = gc.get_threshold()
    if 0 < young < YOUNG_PASS_EVERY:
        gc.set_threshold(YOUNG_PASS_EVERY, *older)


def main(argv: list[str]) -> int:
    """``META [--msgspec DIR]``: DIR, where the agent's interpreter has
    msgspec (:func:`launch_loads`)."""
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--msgspec"):
        sup.say("usage: shared_supervisor.py META_DIR [--msgspec DIR]")
        return 2
    _pass_over_young_objects_less_often()
    try:
        return SharedSupervisor(argv[0], launch_loads(argv[2] if len(argv) == 3 else None)).run()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            sup.say(f"another shared supervisor listens in {argv[0]}")
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
