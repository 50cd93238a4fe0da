"""The namespace init helper (``nsinit.c``, beside this file): building it,
the launch spec the shared supervisor hands it, and the client of its
server (:class:`Server`).

A task with namespaces (the default isolation: PID, mount, IPC and UTS
namespaces, a private ``/tmp``) needs a first process of its PID namespace
that sets up its mounts, forwards signals to it and reaps its orphans. A
Python supervisor forked per task did that; the agent's shared supervisor
(:mod:`.shared_supervisor`) has this small compiled program do it
instead: started once as a server, it clones each task's init, which joins
the task's cgroups and is pid 1 of the task's new PID namespace
(``nsinit.c`` says how they talk and what they do).

It is built on the agent's first start with the machine's C compiler
(``$CC``, else ``cc``; statically linked where the C library allows, else
dynamically), once per version of ``nsinit.c``, into ``__pycache__`` beside
it (or, where that is not the agent's to write, the agent's ``meta``
directory) — so ``pip install`` needs no compiler, and a machine without
one still runs every task: :func:`helper` returns None, the agent logs why,
and namespaced tasks get Python supervisors of their own as before.

Standard library only: the shared supervisor loads this file by its path.
"""

from __future__ import annotations

import array
import fcntl
import hashlib
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time

__all__ = ["SOURCE", "helper", "build", "encode_spec", "BuildProblem", "Server", "ServerGone", "INLINE_MAX",
           "INLINE_FEATURE", "takes_inline", "CHANNEL_FEATURE", "takes_channel", "StatusChannel"]

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nsinit.c")
#: how long a compile may take (s): a loaded machine, a slow disk
BUILD_TIMEOUT = 120.0


class BuildProblem(Exception):
    """The helper cannot be built here; the message says why."""


def _digest(source: bytes, compiler: str) -> str:
    return hashlib.sha256(source + b"\0" + compiler.encode()).hexdigest()[:16]


def _safe_directory(directory: str) -> bool:
    """A directory only this process's user (or root) can write in: what
    it holds is executed as that user."""
    try:
        info = os.stat(directory)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid in (0, os.geteuid())
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _safe_binary(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISREG(info.st_mode) and info.st_uid in (0, os.geteuid())
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and bool(info.st_mode & stat.S_IXUSR))


def build(directory: str, source: str = SOURCE, compiler: str | None = None) -> str:
    """The helper's binary in ``directory`` (built there unless a build of
    this very source and compiler is there already); its path. Raises
    :class:`BuildProblem` saying why not."""
    compiler = compiler or os.environ.get("CC") or "cc"
    try:
        with open(source, "rb") as handle:
            text = handle.read()
    except OSError as exc:
        raise BuildProblem(f"its source {source} cannot be read: {exc.strerror}") from None
    try:
        os.makedirs(directory, 0o755, exist_ok=True)
    except OSError as exc:
        raise BuildProblem(f"{directory} cannot be made: {exc.strerror}") from None
    if not _safe_directory(directory):
        raise BuildProblem(f"{directory} is writable by others than its owner, or not this user's")
    target = os.path.join(directory, f"nsinit-{_digest(text, compiler)}")
    if _safe_binary(target):
        return target
    found = shutil.which(compiler)
    if found is None:
        raise BuildProblem(f"no C compiler: {compiler!r} is not found (set CC, or install gcc)")
    made, temp = tempfile.mkstemp(prefix=".nsinit-", dir=directory)
    os.close(made)
    try:
        problem = ""
        for extra in (["-static"], []):   # static: no dynamic loader at each exec, nothing of LD_* consulted
            done = subprocess.run([found, "-O2", "-Wall", *extra, "-o", temp, source],
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=BUILD_TIMEOUT,
                                  env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"})
            if done.returncode == 0:
                break
            problem = done.stderr.decode("utf-8", "replace").strip()[-500:]
        else:
            raise BuildProblem(f"{compiler} failed: {problem}")
        os.chmod(temp, 0o755)
        os.replace(temp, target)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildProblem(f"{compiler} could not run: {exc}") from None
    finally:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
    return target


def helper(meta: str, say=None) -> str | None:
    """The helper's binary, built if need be (:func:`build`) in
    ``__pycache__`` beside its source, else in ``meta``; None if it
    cannot be had (``say`` is told why)."""
    problems = []
    for directory in (os.path.join(os.path.dirname(SOURCE), "__pycache__"), meta):
        try:
            return build(directory)
        except BuildProblem as exc:
            problems.append(f"in {directory}: {exc}")
            if "no C compiler" in str(exc) or "failed:" in str(exc):
                break   # the same elsewhere
    if say is not None:
        say("; ".join(problems))
    return None


# ----------------------------------------------------------------- the server
#: what a Python process ignores that the server (and so each init) must not
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGHUP)


class ServerGone(OSError):
    """The server had ended before a request reached it: nothing was started."""


#: the largest inline request (``nsinit.c``'s ``INLINE_MAX``); a larger spec goes in a memfd
INLINE_MAX = 96 << 10
#: what a helper that takes inline requests has in its binary (``nsinit.c``'s ``inline_feature``)
INLINE_FEATURE = b"nsinit-feature:inline-spec-1"
#: what a helper that takes channel requests has in its binary (``nsinit.c``'s ``channel_feature``)
CHANNEL_FEATURE = b"nsinit-feature:status-channel-2"
#: a helper's path -> (its size, mtime and inode, whether it takes inline requests, channel requests):
#: looked at once
_FEATURES: dict[str, tuple[tuple[int, int, int], bool, bool]] = {}


def _features(helper: str) -> tuple[bool, bool]:
    try:
        info = os.stat(helper)
    except OSError:
        return False, False
    key = (info.st_size, info.st_mtime_ns, info.st_ino)
    known = _FEATURES.get(helper)
    if known is not None and known[0] == key:
        return known[1], known[2]
    try:
        with open(helper, "rb") as handle:
            text = handle.read()
        found = INLINE_FEATURE in text, CHANNEL_FEATURE in text
    except OSError:
        found = False, False
    if len(_FEATURES) >= 16:
        _FEATURES.clear()
    _FEATURES[helper] = (key, *found)
    return found


def takes_inline(helper: str) -> bool:
    """Whether the helper's server takes inline requests (:meth:`Server.submit_inline`):
    a build of this ``nsinit.c`` or a later one does; a helper built from an
    older source (named by an agent of before) does not, and gets a memfd."""
    return _features(helper)[0]


def takes_channel(helper: str) -> bool:
    """Whether the helper's server takes channel requests (:meth:`Server.submit_channel`):
    its inits say their lines on one status channel (:class:`StatusChannel`)
    rather than a pipe each. A helper built from an older ``nsinit.c`` does
    not, and gets a pipe per init as before."""
    return _features(helper)[1]


class StatusChannel:
    """The status channel every init of a channel request says its lines
    on, in place of a pipe per init: no ``pipe2``, no descriptor passed,
    polled and closed a task, and one ``read`` takes the lines of many
    inits. One pipe per shared supervisor, its write end given to each
    server it starts (as its fd 4) and kept for as long as any init may
    still say something (the inits of a server let go hold it too). Each
    line is ``TAG KIND ...`` (``nsinit.c``: an init's lines in one write
    of at most ``PIPE_BUF`` bytes, which the pipe takes whole — never cut
    into by another init's). An init's lines are in the pipe before the
    init has ended, so once its zombie is seen, :meth:`read` has all it
    said. Not thread-safe."""

    #: the pipe's size asked for (bytes): a burst's lines without an init waiting to write
    SIZE = 1 << 20
    #: what is read at once
    CHUNK = 1 << 16

    def __init__(self) -> None:
        read_end, write_end = os.pipe2(os.O_CLOEXEC)   # the inits' end blocks: a full pipe is waited for
        os.set_blocking(read_end, False)
        try:
            fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, self.SIZE)
        except OSError:   # above /proc/sys/fs/pipe-max-size for a user without CAP_SYS_RESOURCE: the default
            pass
        self.read_end = read_end
        #: the end each server is given (close-on-exec: given by posix_spawn's dup2 only)
        self.write_end = write_end
        self.partial = b""   # a line not read whole yet

    def fileno(self) -> int:
        return self.read_end

    def read(self) -> list[tuple[int, bytes]]:
        """Every line come: ``(tag, line)`` pairs in the order written (an
        init's in the order it said them); a line without a decimal tag
        (none is written so) is dropped. A read short of its size emptied
        the pipe: no read for its ``EAGAIN``."""
        got: list[tuple[int, bytes]] = []
        while self.read_end >= 0:
            try:
                chunk = os.read(self.read_end, self.CHUNK)
            except (BlockingIOError, InterruptedError):
                break
            if not chunk:   # never while write_end is held
                break
            *lines, rest = (self.partial + chunk).split(b"\n")
            self.partial = rest if len(rest) <= self.CHUNK else b""
            for line in lines:
                tag, _, said = line.partition(b" ")
                if tag.isdigit() and len(tag) < 20:
                    got.append((int(tag), said))
            if len(chunk) < self.CHUNK:
                break
        return got

    def close(self) -> None:
        for fd in (self.read_end, self.write_end):
            if fd >= 0:
                os.close(fd)
        self.read_end = self.write_end = -1


class Server:
    """The helper as a server (``nsinit --serve``, ``nsinit.c`` says how
    it talks): one long-lived process, a child of this one, that clones
    each task's init instead of this process spawning the helper anew —
    an exec per task cost more CPU than the task's namespaces
    (docs/performance.rst). The inits it clones are this process's
    children (``CLONE_PARENT``): watched, signalled and reaped here as if
    spawned here. ``blocked``: the signals the inits start with blocked
    (the server keeps them blocked; it ends when its socket's other end
    closes, or this process dies). Not thread-safe."""

    #: how long an answer may take (s): a clone on a loaded machine
    TIMEOUT = 30.0

    def __init__(self, helper: str, blocked: tuple = (), channel: StatusChannel | None = None) -> None:
        """``channel``: the status channel to give the server (as its fd 4)
        if the helper takes channel requests (:func:`takes_channel`):
        :meth:`submit_channel` then sends them."""
        self.helper = helper
        inline, takes = _features(helper)
        #: the status channel its inits say their lines on (:meth:`submit_channel`), if it has one
        self.channel = channel if takes else None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            given = fcntl.fcntl(theirs.fileno(), fcntl.F_DUPFD_CLOEXEC, 5)   # never moved over by fd 3's dup
            actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0), (os.POSIX_SPAWN_DUP2, given, 3)]
            status = -1
            try:
                if self.channel is not None:   # above 4 too: neither dup moves over the other's source
                    status = fcntl.fcntl(self.channel.write_end, fcntl.F_DUPFD_CLOEXEC, 5)
                    actions.append((os.POSIX_SPAWN_DUP2, status, 4))
                self.pid = os.posix_spawn(helper, [helper, "--serve"], {}, setsigmask=blocked,
                                          setsigdef=_DEFAULT_SIGNALS, file_actions=actions)
            finally:
                os.close(given)
                if status >= 0:
                    os.close(status)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)   # waits are polls with a deadline (submit, answers)
        self.sock: socket.socket | None = ours
        #: whether it takes inline requests (:meth:`submit_inline`)
        self.inline = inline
        self.pending = 0        # requests sent and not answered
        self.oldest = 0.0       # when the oldest of them was sent (or the last answer came)
        self.ready: list[int | OSError] = []   # answers read and not yet taken

    def start(self, spec: int, status: int, stdout: int, stderr: int, pid_namespace: bool) -> int:
        """Clone an init with these descriptors (as fds 3, 4, 1, 2), the
        first process of a new PID namespace with ``pid_namespace``; its
        pid (:meth:`submit`, then its answer waited for; no other request
        may be in flight). :class:`ServerGone` if the request cannot reach
        it (it has ended: a new server may be asked), OSError if it ends
        without an answer or refuses (its message); :attr:`sock` is None
        once this server is done."""
        if self.pending:
            raise RuntimeError("start() with requests in flight: read their answers first")
        self.submit(spec, status, stdout, stderr, pid_namespace)
        (answer,) = self.answers(wait=True)
        if isinstance(answer, OSError):
            raise answer
        return answer

    def submit(self, spec: int, status: int, stdout: int, stderr: int, pid_namespace: bool) -> None:
        """Ask for an init with these descriptors (as :meth:`start`) and do
        not wait for the answer: :meth:`answers` gives the answers, in the
        order of the requests (the server serves them in turn, so a batch
        of launches costs one wake of it, not a round trip each — the
        round trip was half of the shared supervisor's wall time).
        The descriptors may be closed once this returns (the kernel holds
        what is in flight). :class:`ServerGone` if the request cannot reach
        it: it has ended, and the requests still without an answer will
        have :class:`ServerGone` as theirs. The socket's queue is short
        (``net.unix.max_dgram_qlen``): a full one is waited for (at most
        :attr:`TIMEOUT`), reading the answers meanwhile — the server may
        itself wait to send one."""
        self._send([b"P" if pid_namespace else b"N"], [spec, status, stdout, stderr])

    def submit_inline(self, spec: bytes, status: int, stdout: str, stderr: str, owner: tuple[int, int] | None,
                      pid_namespace: bool) -> bool:
        """As :meth:`submit`, with the spec in the request itself and the
        task's output files (``stdout``, ``stderr``: absolute paths, given to
        ``owner``, ``(uid, gid)``, if not None) opened by the init as
        :func:`.supervisor.open_sandbox_file` opens them, before it joins
        the task's cgroups (one it cannot open fails the launch on the
        status pipe, ``F``, in the words of before): the status pipe is the
        one descriptor passed. False (nothing sent) if this server does not
        take inline requests or the request would be larger than
        :data:`INLINE_MAX`: :meth:`submit` it."""
        if not self.inline:
            return False
        head = b"SP" if pid_namespace else b"SN"
        if not stdout.startswith("/") or not stderr.startswith("/") or "\0" in stdout or "\0" in stderr:
            return False   # the way of before, which refuses such a path as it always did
        paths = os.fsencode(stdout) + b"\0" + os.fsencode(stderr) + b"\0"
        who = f"{int(owner[0])}:{int(owner[1])}".encode() if owner is not None else b""
        if len(head) + len(paths) + len(who) + 1 + len(spec) > INLINE_MAX:
            return False
        self._send([head, paths, who, b"\0", spec], [status])
        return True

    def submit_channel(self, tag: int, spec: bytes, stdout: str, stderr: str, owner: tuple[int, int] | None,
                       pid_namespace: bool) -> bool:
        """As :meth:`submit_inline`, with no descriptor at all: the init
        says its lines on the server's :attr:`channel`, each message
        tagged with ``tag`` (a number >= 0 the caller tells its tasks
        apart by, :meth:`StatusChannel.read`). False (nothing sent) if this
        server has no channel or the request would be too large: ask as
        before (:meth:`submit_inline`, :meth:`submit`) with a pipe."""
        if self.channel is None or tag < 0:
            return False
        if not stdout.startswith("/") or not stderr.startswith("/") or "\0" in stdout or "\0" in stderr:
            return False
        head = b"CP%d\0" % tag if pid_namespace else b"CN%d\0" % tag
        paths = os.fsencode(stdout) + b"\0" + os.fsencode(stderr) + b"\0"
        who = f"{int(owner[0])}:{int(owner[1])}".encode() if owner is not None else b""
        if len(head) + len(paths) + len(who) + 1 + len(spec) > INLINE_MAX:
            return False
        self._send([head, paths, who, b"\0", spec], [])
        return True

    def _send(self, message: list[bytes], descriptors: list[int]) -> None:
        if self.sock is None:
            raise ServerGone(f"the namespace init server {self.pid} has ended")
        control = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", descriptors))] if descriptors else []
        deadline = time.monotonic() + self.TIMEOUT
        while True:
            try:
                self.sock.sendmsg(message, control)
                break
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:
                self._gone(f"the namespace init server {self.pid} has ended: {exc}")
                raise ServerGone(f"the namespace init server {self.pid} has ended: {exc}") from None
            left = deadline - time.monotonic()
            events = _poll(self.sock, select.POLLOUT | select.POLLIN, left) if left > 0 else 0
            if events & select.POLLIN:
                self._read(wait=False)
            if self.sock is None:
                raise ServerGone(f"the namespace init server {self.pid} has ended")
            if not events and left <= 0:
                self._gone(f"the namespace init server {self.pid} does not read its requests")
                raise ServerGone(f"the namespace init server {self.pid} does not read its requests")
        self.pending += 1
        if self.pending == 1:
            self.oldest = time.monotonic()

    def answers(self, wait: bool = False) -> list[int | OSError]:
        """The answers come since the last call, in the order of the
        requests: an init's pid, or OSError (why it was not cloned; a
        :class:`ServerGone` for the requests a server that ended did not
        answer — whether their inits were cloned is not known). Without
        ``wait``, what has come; with it, at least one if a request is in
        flight (or :attr:`TIMEOUT` passes: the server is then let go)."""
        self._read(wait)
        ready, self.ready = self.ready, []
        return ready

    def overdue(self, now: float) -> bool:
        """Whether the oldest request in flight has waited longer than :attr:`TIMEOUT`."""
        return self.pending > 0 and now - self.oldest > self.TIMEOUT

    def fileno(self) -> int:
        """The socket's descriptor (to poll for answers), -1 once done."""
        return self.sock.fileno() if self.sock is not None else -1

    def _read(self, wait: bool) -> None:
        while self.pending and self.sock is not None:
            try:
                answer = self.sock.recv(256)
            except (BlockingIOError, InterruptedError):
                if not wait or self.ready:
                    return
                left = self.oldest + self.TIMEOUT - time.monotonic()
                if left <= 0 or not _poll(self.sock, select.POLLIN, left):
                    self._gone(f"the namespace init server {self.pid} did not answer within {self.TIMEOUT:g} s")
                continue
            except OSError as exc:
                self._gone(f"the namespace init server {self.pid} has ended: {exc}")
                return
            kind, _, rest = answer.decode("ascii", "replace").partition(" ")
            if kind == "P" and rest.isdigit():
                self.ready.append(int(rest))
            elif kind == "F" and answer:
                self.ready.append(OSError(rest[:500]))
            else:
                self._gone(f"the namespace init server {self.pid} ended ({answer[:100]!r})")
                return
            self.pending -= 1
            self.oldest = time.monotonic()

    def _gone(self, why: str) -> None:
        """The server is done: each request in flight gets :class:`ServerGone`."""
        self.ready += [ServerGone(why) for _ in range(self.pending)]
        self.pending = 0
        self.close()

    def close(self) -> None:
        """Let it go and reap it: killed, not waited for to see its socket
        closed (one that does not answer may not read either); it holds
        nothing, and the inits it cloned are not its children. The
        requests still in flight get :class:`ServerGone` as their answers
        (:meth:`answers`)."""
        if self.sock is None:
            return
        self.ready += [ServerGone(f"the namespace init server {self.pid} was let go") for _ in range(self.pending)]
        self.pending = 0
        self.sock.close()
        self.sock = None
        try:   # this process's unreaped child: its pid is no other process's
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _poll(sock: socket.socket, events: int, timeout: float) -> int:
    """What of ``events`` ``sock`` has within ``timeout`` seconds (0: none)."""
    poller = select.poll()
    poller.register(sock.fileno(), events)
    found = poller.poll(max(0.0, timeout) * 1000)
    return found[0][1] if found else 0


# ----------------------------------------------------------------- the spec
def encode_spec(*, namespaces: list, hostname: str, tmp: str, keep: list, volumes: list,
                user: tuple | None, cwd: str, env: dict, argv: list, cgroups: list | tuple = ()) -> bytes:
    """The launch spec ``nsinit`` reads on fd 3: NUL-terminated fields,
    records of a tag and its fields. ``keep``: ``(source, place)`` pairs
    (the place inside ``tmp``: ``nsinit`` makes it, and ``tmp``);
    ``cgroups``: the directories of the task's cgroups, which ``nsinit``
    joins first thing; ``volumes``:
    :func:`.namespaces.enter`'s; ``user``: ``(uid, gid, groups)`` or None.
    Raises ValueError for a field with a NUL (or a variable name with
    ``=``): nothing the task could not have had either."""
    fields: list[str] = []
    for name in namespaces:
        fields += ["ns", name]
    if hostname:
        fields += ["hostname", hostname]
    if tmp:
        fields += ["tmp", tmp]
    for source, place in keep:
        fields += ["keep", source, place]
    for volume in volumes:
        fields += ["volume", volume["source"], volume["target"], "1" if volume.get("readonly") else "0",
                   str(volume.get("within", "")), str(volume.get("create", ""))]
    if user is not None:
        uid, gid, groups = user
        fields += ["user", str(int(uid)), str(int(gid)), ",".join(str(int(group)) for group in groups)]
    fields += ["cwd", cwd]
    for directory in cgroups:
        fields += ["cgroup", directory]
    for name, value in env.items():
        if not name or "=" in name:
            raise ValueError(f"an environment variable's name {name!r}")
        fields += ["env", f"{name}={value}"]
    for arg in argv:
        fields += ["arg", arg]
    fields.append("end")
    text = "\0".join(fields)   # encoded once, not field by field (os.fsencode a call each: 6 % of the shared
    if text.count("\0") != len(fields) - 1:   # supervisor's samples)
        raise ValueError("a NUL byte in the task's command, environment or container")
    return os.fsencode(text) + b"\0"
