"""A Fuxi worker: the long-lived process in one granted slot.

``python -m mesoslike_frameworks.fuxi.worker`` is the task the Fuxi
service launches in every slot it is granted. It reads its place from the
environment — ``FUXI_APPMASTER`` (the job's AppMaster, ``tcp://HOST:PORT``),
``FUXI_SLOT_ID``, ``FUXI_JOB_ID``, ``FUXI_UNIT``, ``FUXI_HOSTNAME``,
``FUXI_ROOM``, ``FUXI_WORKER_PUBLIC_KEY`` (the job's workers' public key)
and ``FUXI_APPMASTER_KEY`` (the AppMaster's public key: it talks to that
AppMaster only); its secrets — the slot's token (what proves it is the
slot's worker) and the workers' secret key (the AppMaster lets in no other
pair) — are files of its sandbox (mode 0400, its user's) that
``FUXI_WORKER_TOKEN_FILE`` and ``FUXI_WORKER_SECRET_KEY_FILE`` name
(relative to the sandbox), never its environment (which another process of
the same user could read); it reads them and removes them, so that the
instances it runs cannot (``FUXI_WORKER_TOKEN``/``FUXI_WORKER_SECRET_KEY``
are still read when a worker is started by hand with them), and the agent's
``MESOSLIKE_AGENT_ID`` — connects to the AppMaster and runs the instances it is
assigned, one at a time (an ASSIGN that comes while one runs is held, one at
most, and started the moment the running one ends), each as ``sh -c command`` in its own process group
in the task's sandbox, started with ``posix_spawn`` (``vfork`` and
``exec``: no copy of the worker's ~30 MB Python process per instance; an
instance inherits only its stdin, stdout and stderr) (stdout and stderr of attempt *a* of instance *i*, both
read by the worker, in ``instances/<i>.<a>.stdout|stderr``, each file made at its first byte; an instance's
environment is the
worker's without its secrets: the key and the token). The messages are in
:mod:`.am_protocol`; a worker speaks them with :mod:`.worker_wire`
(MessagePack alone: what it imports is paid for by every slot, when it starts).

The worker outlives its AppMaster: when the AppMaster is gone it keeps
running its instance, keeps the results the AppMaster has not acknowledged
and keeps saying HELLO (its DEALER reconnects to the same address by
itself), so that a restarted AppMaster learns what happened meanwhile. It
exits 0 when told RELEASE; on SIGTERM (its task killed) it kills its
instance, says BYE and exits; with no word from any AppMaster for
``FUXI_ORPHAN_TIMEOUT`` seconds (default 300) while idle it exits 1.
"""

from __future__ import annotations

import math
import os
import select
import signal
import sys
import threading
import time

from mesoslike import Clock, MesoslikeError, SystemClock
from mesoslike_frameworks.fuxi import flush_before_os_exit
from mesoslike_frameworks.fuxi import worker_wire as wire
from mesoslike_frameworks.fuxi.worker_libzmq import (Connection, Poller, Waker, WorkerKeys,
                                                     flush_before_exit)

#: typing.TYPE_CHECKING without importing typing: with re, contextlib and warnings, ~19 M instructions (~7 ms) of a
#: worker's start, every slot of every job (mypy takes the name for True)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from mesoslike_frameworks.fuxi.worker_libzmq import KeyPair

__all__ = ["Worker", "main", "SHELL", "read_secret", "TOKEN_FILE_ENV", "SECRET_KEY_FILE_ENV"]



class WorkerLog:
    """The worker's log: ``logging.getLogger("mesoslike_frameworks.fuxi.worker")``,
    imported at its first use, until :meth:`to_stderr` — what :func:`main`
    does — makes it write its lines to stderr itself, in ``logging``'s
    format (``%(asctime)s %(levelname)s fuxi-worker %(message)s``), without
    ``logging`` and what it imports (``re``, ``traceback``, ``tokenize``:
    ~8 ms of CPU a worker, 16 workers a job of 16 slots; docs/performance.rst,
    "Stop 12: the Fuxi path, pipelined (fuxi29f)"). What the transport logs in a
    worker (a refused handshake, a dropped connection: warnings) still goes
    through ``logging``, to stderr as its last resort writes it: the
    message alone."""

    LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "WARN": 30, "ERROR": 40, "CRITICAL": 50}
    NAME = "mesoslike_frameworks.fuxi.worker"

    def __init__(self) -> None:
        self._level: int | None = None   # None: through logging

    def to_stderr(self, level: str) -> None:
        """Write lines of ``level`` (a name, as ``logging``'s) and above to stderr; ValueError for an unknown
        level."""
        if level.upper() not in self.LEVELS:
            raise ValueError(f"unknown log level {level!r}")
        self._level = self.LEVELS[level.upper()]

    def _log(self, level: str, message: str, args: tuple, trace: bool = False) -> None:
        if self._level is None:
            import logging

            logger = logging.getLogger(self.NAME)
            logger.log(self.LEVELS[level], message, *args, exc_info=trace, stacklevel=3)
            return
        if self.LEVELS[level] < self._level:
            return
        now = time.time()
        text = message % args if args else message
        if trace:
            import traceback

            text += "\n" + traceback.format_exc().rstrip("\n")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        try:
            sys.stderr.write(f"{stamp},{int(now % 1 * 1000):03d} {level} fuxi-worker {text}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass   # no stderr left: as logging, the worker goes on

    def debug(self, message: str, *args: object) -> None:
        self._log("DEBUG", message, args)

    def info(self, message: str, *args: object) -> None:
        self._log("INFO", message, args)

    def warning(self, message: str, *args: object) -> None:
        self._log("WARNING", message, args)

    def error(self, message: str, *args: object) -> None:
        self._log("ERROR", message, args)

    def exception(self, message: str, *args: object) -> None:
        self._log("ERROR", message, args, trace=True)


log = WorkerLog()


def _log_line(level: str, text: str) -> None:
    """The worker's connection's warnings and errors, in the worker's log."""
    (log.error if level == "ERROR" else log.warning)("%s", text)

SHELL = "/bin/sh"
#: bytes of an instance's stderr quoted in a DONE message
STDERR_TAIL = 600
#: what a worker needs from its environment
ENVIRONMENT = ("FUXI_APPMASTER", "FUXI_SLOT_ID", "FUXI_JOB_ID", "FUXI_UNIT", "FUXI_HOSTNAME")
#: what proves the worker is its slot's: kept from the instances it runs
SECRET_ENVIRONMENT = ("FUXI_WORKER_TOKEN", "FUXI_WORKER_SECRET_KEY")
#: the files (relative to the sandbox) the worker's token and secret key are in, in its environment
TOKEN_FILE_ENV, SECRET_KEY_FILE_ENV = "FUXI_WORKER_TOKEN_FILE", "FUXI_WORKER_SECRET_KEY_FILE"


#: what an instance's ``sh`` gets back at their defaults (Python ignores SIGPIPE and SIGXFSZ; exec keeps that)
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)
#: seconds an instance's stdout is still read after it exited (a child of it may hold it open)
STDOUT_GRACE = 1.0
#: the longest a worker waits before trying its AppMaster's port again: a job's AppMaster binds while its
#: workers start, often after them (it imports more than a worker, and 16 workers start with it), and the
#: transport's default backoff (doubling to 2 s) kept a worker that tried too early away for up to 2 s more —
#: every instance of the job waits for HELLOs. 0.1 s is the transport's shortest; the first retries come
#: sooner still (RECONNECT_MIN, doubling). A refused connect to a port of this machine costs microseconds.
RECONNECT_MAX = 0.1
RECONNECT_MIN = 0.02
#: seconds an instance is watched alone after it started (its pipes and pidfd in a ``poll(2)`` of their own, the
#: AppMaster's socket not read): most instances of a job are short, and one that ends within it costs the worker
#: one wake-up — its exit — instead of two (its exit, and the next ASSIGN, sent in answer to the DONE before,
#: arriving while it runs) and no registration with the socket's poller; what the AppMaster sends meanwhile
#: (an ASSIGN, an ACK, a KILL) waits at most this long. docs/performance.rst, "Stop 19: the Fuxi worker (fuxi29q)"
QUICK_WATCH = 0.05


class _Descriptor:
    """A descriptor of the running instance — its stdout pipe, its pidfd —
    that the worker's :class:`~.worker_libzmq.Poller` waits on with the
    AppMaster's socket; the instance's, read by the worker's loop: nothing is
    made, cleared or closed here."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


class _Output:
    """One output stream of the running instance: the read end of its pipe
    and its copy to its file (:class:`_OutputCopy`); ``open`` until the
    stream ended (or was handed to a thread)."""

    __slots__ = ("fd", "copy", "open")

    def __init__(self, fd: int, copy: _OutputCopy) -> None:
        self.fd, self.copy, self.open = fd, copy, True


class _Run:
    """The instance attempt being run: its process (the leader of its own
    process group), its stdout and stderr (pipes the worker reads and copies
    to their files), and its pidfd (None on a kernel without them: its exit
    is then seen once its stdout and stderr ended)."""

    def __init__(self, instance: int, attempt: int, pid: int, stdout: _Output, stderr: _Output) -> None:
        self.instance = instance
        self.attempt = attempt
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.killed = False
        self.kill_deadline: float | None = None
        self.returncode: int | None = None   # once reaped
        self.message = ""                    # its DONE's: how it exited, the tail of its stderr
        self.pidfd: int | None = None
        #: once it exited: when its exit is reported, its output ended or not (STDOUT_GRACE)
        self.report_by: float | None = None
        self.watched: list[_Descriptor] = []   # its descriptors the loop waits on (while they are open)
        #: until when it is watched alone (QUICK_WATCH), None once its descriptors are in the loop's poller
        self.quick_until: float | None = None

    @property
    def key(self) -> tuple[int, int]:
        return self.instance, self.attempt

    @property
    def outputs(self) -> tuple[_Output, _Output]:
        return self.stdout, self.stderr

    @property
    def output_open(self) -> bool:
        return self.stdout.open or self.stderr.open


class Worker:
    """The worker's loop (:meth:`run`): one thread owns the socket and
    watches the running instance — its stdout and stderr pipes and its
    pidfd, alone for its first ``QUICK_WATCH`` seconds, then polled with the
    socket — so that an instance's exit becomes its DONE in the same turn,
    without a hand-over between threads (a watcher thread, a queue and a
    waker's pipe cost each instance two thread wake-ups more)."""

    def __init__(self, appmaster: str, slot: str, unit: str, hostname: str, room: str = "", *,
                 sandbox: str | os.PathLike = ".", clock: Clock | None = None, kill_grace: float = 2.0,
                 orphan_timeout: float = 300.0, interval: float = wire.HEARTBEAT_INTERVAL, token: str = "",
                 agent_id: str = "", keys: KeyPair | None = None, appmaster_key: bytes | None = None) -> None:
        self.appmaster = appmaster
        self.slot, self.unit, self.hostname, self.room = slot, unit, hostname, room
        self.token, self.agent_id = token, agent_id
        self.sandbox = os.fspath(sandbox)
        self._instances = os.path.join(sandbox, "instances")   # the instances' stdout and stderr files
        self._instances_made = False
        self._in_sandbox: bool | None = None   # does the worker run in its sandbox? (once the instances start)
        #: an instance's environment before its ASSIGN's: the worker's without its secrets (read once: the
        #: worker's own environment does not change)
        self._instance_env = {name: value for name, value in os.environ.items() if name not in SECRET_ENVIRONMENT}
        self.clock = clock or SystemClock()
        self.kill_grace = kill_grace
        self.orphan_timeout = orphan_timeout
        self.interval = interval
        self.run_: _Run | None = None
        self.queued: wire.Assign | None = None   # to run when run_ ends
        self.unacked: dict[tuple[int, int], tuple[bool, str]] = {}   # results the AppMaster has not acknowledged
        self._said: dict[tuple[int, int], float] = {}   # when an unacknowledged result's DONE was sent last
        self.welcomed = False
        self._waker = Waker()                # stop() wakes the loop (a signal handler)
        self._stop: str | None = None        # why the worker stops (SIGTERM) or None
        self._exit: int | None = None
        # with keys: the job's workers' pair, and its AppMaster's public key (that AppMaster only)
        self._client = Connection(appmaster, codec=wire.CODEC, identity=slot.encode(), keys=keys,
                                  server_key=appmaster_key, reconnect_max=RECONNECT_MAX,
                                  reconnect_min=RECONNECT_MIN, log=_log_line)
        self._poller = Poller([self._client, self._waker])   # one for the worker's life, not one per wait
        keep_descriptors_from_instances()

    # ------------------------------------------------------------ the loop
    def run(self) -> int:
        """Serve the AppMaster until RELEASE (0), a stop (143) or orphaned (1)."""
        last_contact = self.clock.now()
        next_beat = 0.0
        try:
            while self._exit is None:
                now = self.clock.now()
                if self._stop is not None:
                    self._shutdown(self._stop)
                    return 143
                if now >= next_beat:
                    self._beat()
                    next_beat = now + self.interval
                self._escalate_kill(now)
                timeout = min(next_beat - self.clock.now(), self._run_timeout(now))
                if self.run_ is not None and self.run_.quick_until is not None:
                    self._watch_alone(self.run_, timeout)
                    continue
                ready = self._poller.poll(max(0.0, timeout))
                if self._client in ready:
                    last_contact = self.clock.now()
                if self.run_ is not None:
                    self._watch(self.run_, {item.fileno() for item in ready if isinstance(item, _Descriptor)})
                if self._client in ready:   # (a poll is level-triggered: what came since is seen by the next)
                    for _, message in self._client.receive():
                        self._on_message(message)
                if self.run_ is None and self.clock.now() - last_contact > self.orphan_timeout:
                    log.error("no word from the AppMaster at %s for %.0fs: giving up", self.appmaster,
                              self.orphan_timeout)
                    return 1
            return self._exit
        finally:
            self._kill_now()
            self._client.close(linger=0.5)   # let a last BYE or DONE go out
            self._waker.close()

    def stop(self, reason: str = "stopped") -> None:
        """Ask the loop to stop (signal-handler safe)."""
        self._stop = reason
        self._waker.wake()

    # ---------------------------------------------------------- messages
    def _send(self, message: object) -> None:
        if not self._client.send(message):   # queued while the AppMaster reads slowly: dropped only past its bound
            log.error("the outbox to the AppMaster is full (%d frames): %s dropped", self._client.queued,
                      type(message).__name__)

    def _running(self) -> list[int] | None:
        return [self.run_.instance, self.run_.attempt] if self.run_ is not None and not self.run_.killed else None

    def _queued(self) -> list[int] | None:
        return [self.queued.instance, self.queued.attempt] if self.queued is not None else None

    def _beat(self) -> None:
        if not self.welcomed:
            finished = [[i, a, ok, msg] for (i, a), (ok, msg) in sorted(self.unacked.items())]
            self._send(wire.Hello(self.slot, self.unit, self.hostname, self.room, self._running(), finished,
                                 self.token, self.agent_id, self._queued()))
            return
        self._send(wire.Heartbeat(self.slot, self._running(), self._queued()))
        # again, unless its DONE went out less than half an interval ago (its ACK may well be on its way: the
        # AppMaster sends it after its checkpoint, with the next ASSIGN)
        now = self.clock.now()
        for key, (ok, message) in sorted(self.unacked.items()):
            if now - self._said.get(key, -1e9) >= self.interval / 2:
                self._said[key] = now
                self._send(wire.Done(self.slot, key[0], key[1], ok, message))

    def _on_message(self, message: object) -> None:
        if isinstance(message, wire.WireError):
            log.warning("a bad frame from the AppMaster: %s", message)
            self._send(wire.Error(str(message)))
            return
        if isinstance(message, wire.Welcome):
            self.welcomed = True
        elif isinstance(message, wire.Rejoin):
            self.welcomed = False
            self._beat()
        elif isinstance(message, wire.Assign):
            for instance, attempt in message.acks:   # ACKs carried by the ASSIGN
                self._acked((instance, attempt))
            self._assign(message)
        elif isinstance(message, wire.Kill):
            if self.run_ is not None and self.run_.key == (message.instance, message.attempt):
                self._kill(self.run_)
            elif self.queued is not None and (self.queued.instance, self.queued.attempt) == (message.instance,
                                                                                              message.attempt):
                log.info("instance %d attempt %d dropped from the queue", message.instance, message.attempt)
                self.queued = None
        elif isinstance(message, wire.Ack):
            self._acked((message.instance, message.attempt))
        elif isinstance(message, wire.Release):
            log.info("released by the AppMaster")
            self._exit = 0
        elif isinstance(message, wire.Error):
            log.warning("the AppMaster says: %s", message.message)

    # ---------------------------------------------------------- instances
    def _assign(self, message: wire.Assign) -> None:
        key = (message.instance, message.attempt)
        if key in self.unacked or (self.run_ is not None and self.run_.key == key) or (
                self.queued is not None and (self.queued.instance, self.queued.attempt) == key):
            return   # a resent ASSIGN
        if self.run_ is not None:
            if self.queued is None:
                self.queued = message   # started as the running one ends (_start_queued)
                return
            self._send(wire.Error(f"busy: running instance {self.run_.instance} attempt {self.run_.attempt}, "
                                  f"instance {self.queued.instance} attempt {self.queued.attempt} queued"))
            return
        self._start(message)

    def _start_queued(self) -> None:
        """The queued instance, now that none runs (unless the worker stops)."""
        while self.queued is not None and self.run_ is None and self._stop is None and self._exit is None:
            message, self.queued = self.queued, None
            self._start(message)

    def _start(self, message: wire.Assign) -> None:
        key = (message.instance, message.attempt)
        stem = os.path.join(self._instances, f"{message.instance}.{message.attempt}")
        env = dict(self._instance_env)
        env.update(message.env)
        env.setdefault("FUXI_INSTANCE", str(message.instance))
        env.setdefault("FUXI_ATTEMPT", str(message.attempt))
        try:
            pid, stdout, stderr = self._spawn(message.command, env)
        except (OSError, ValueError) as exc:
            self._finished(key, False, f"cannot start: {type(exc).__name__}: {exc}")
            self._start_queued()
            return
        log.debug("instance %d attempt %d started as pid %d", message.instance, message.attempt, pid)
        self.run_ = self._start_watching(_Run(message.instance, message.attempt, pid,
                                              _Output(stdout, _OutputCopy(stem + ".stdout", progress=True)),
                                              _Output(stderr, _OutputCopy(stem + ".stderr", tail=STDERR_TAIL))))

    def _spawn(self, command: str, env: dict[str, str]) -> tuple[int, int, int]:
        """:func:`spawn_instance` in the sandbox, its ``instances`` directory
        made first (its files are made there as the instance writes them:
        made again if something removed it)."""
        if not self._instances_made:
            self._make_instances()
        return spawn_instance(command, env, self.sandbox, in_sandbox=self._in_sandbox)

    def _make_instances(self) -> None:
        """The ``instances`` directory, placed by ext4 in a block group of
        its own (:func:`spread_children` of the sandbox first): its two
        files an instance are the worker's largest cost after the instances'
        own start, and in the group of the sandbox — the group of the
        framework's directory, which every job of the service shares on that
        agent — each new inode costs a scan past the inodes deleted there in
        the last minutes (ext4 without a journal), as the agent's sandboxes
        would cost without the same placement (docs/performance.rst, "Fuxi
        path toward nine tenths of the real agents")."""
        if not os.path.isdir(self._instances):
            spread_children(self.sandbox)
        os.makedirs(self._instances, exist_ok=True)
        self._instances_made = True
        # the instances start in the sandbox without a first sh to change there when the worker runs in it
        # (as the agent starts it): asked once, not two stat calls an instance
        self._in_sandbox = os.path.samefile(self.sandbox, ".")

    def _start_watching(self, run: _Run) -> _Run:
        """Watch the run's stdout and stderr (copied to their files) and its pidfd: alone first
        (:meth:`_watch_alone`), then with the socket."""
        try:
            run.pidfd = os.pidfd_open(run.pid)
        except OSError:   # a kernel before 5.3: its exit is seen once its stdout and stderr ended
            run.pidfd = None
        run.watched = [_Descriptor(run.stdout.fd), _Descriptor(run.stderr.fd)] + \
            ([_Descriptor(run.pidfd)] if run.pidfd is not None else [])
        run.quick_until = time.monotonic() + QUICK_WATCH   # (the clock a test injects may stand still)
        return run

    def _watch_alone(self, run: _Run, timeout: float) -> None:
        """A turn of the loop in the run's first ``QUICK_WATCH`` seconds:
        its descriptors and the stop waker polled without the socket (for
        at most ``timeout``); once that time passed, they join the socket
        in the loop's poller."""
        left = run.quick_until - time.monotonic() if run.quick_until is not None else 0.0
        if left <= 0:
            run.quick_until = None
            for item in run.watched:
                self._poller.register(item)
            return
        poller = select.poll()
        for item in run.watched:
            poller.register(item.fileno(), select.POLLIN)
        poller.register(self._waker.fileno(), select.POLLIN)
        ready = {fd for fd, _ in poller.poll(math.ceil(1000 * max(0.0, min(left, timeout))))}
        if self._waker.fileno() in ready:
            self._waker.clear()
        self._watch(run, ready)

    def _run_timeout(self, now: float) -> float:
        """How long the loop may wait for the running instance: until its
        kill escalates, until its exit is reported without its stdout, or a
        short while when only reaping it tells whether it exited."""
        run = self.run_
        if run is None:
            return float("inf")
        timeout = float("inf")
        if run.kill_deadline is not None:
            timeout = run.kill_deadline - now
        if run.report_by is not None:
            timeout = min(timeout, run.report_by - time.monotonic())
        if run.pidfd is None and not run.output_open and run.returncode is None:
            timeout = min(timeout, 0.01)
        return timeout

    def _watch(self, run: _Run, ready: set[int]) -> None:
        """What the run's descriptors in ``ready`` say: copy its stdout and
        stderr and report its progress lines; report its exit once it exited
        and its stdout and stderr ended, or ``STDOUT_GRACE`` after it exited
        (a child of it that kept them open must not hold the result back:
        what that child writes is still copied, until it closes them, by a
        thread of its own — the worker goes on to the next instance)."""
        for output in run.outputs:
            if output.open and output.fd in ready:
                self._read(run, output)
        try:
            if run.pidfd is not None:
                if run.pidfd in ready:
                    returncode: int | None = _reap(run.pid)
                else:
                    # its stdout and stderr ended, most often as it exited (an exit closes them microseconds
                    # before its pidfd tells): reaped now, if it is gone, rather than after another wake-up
                    returncode = None if run.output_open else _reap_if_gone(run.pid)
                if returncode is not None:
                    self._unwatch(run, run.pidfd)
                    os.close(run.pidfd)
                    run.pidfd = None
                    run.returncode = returncode
                    run.report_by = time.monotonic() + STDOUT_GRACE
            elif run.returncode is None and not run.output_open:
                run.returncode = _reap_if_gone(run.pid)   # no pidfd: its output ended, has it exited?
        except ChildProcessError:
            run.returncode = -1
        if run.returncode is None:
            return
        if run.output_open:
            if run.report_by is not None and time.monotonic() < run.report_by:
                return
            # the DONE quotes the stderr read by now; what a child left behind writes on is copied by a thread
            run.message = describe_exit(run.returncode, run.stderr.copy.tail())
            for output in run.outputs:
                if output.open:
                    self._unwatch(run, output.fd)
                    output.open = False
                    threading.Thread(target=self._copy_rest, args=(run, output), daemon=True).start()
        self._exited(run)

    def _read(self, run: _Run, output: _Output) -> None:
        """What is waiting in one of the run's pipes: to its file (stdout's
        progress lines reported); the stream ended, when nothing is."""
        try:
            data = os.read(output.fd, 65536)
        except OSError as exc:
            log.error("instance %d attempt %d: its output: %s", run.instance, run.attempt, exc)
            data = b""
        if data:
            self._progress(run, output.copy.write(data))
        else:
            self._output_ended(run, output)

    def _unwatch(self, run: _Run, fd: int) -> None:
        for item in [item for item in run.watched if item.fileno() == fd]:
            if run.quick_until is None:
                self._poller.unregister(item)
            run.watched.remove(item)

    def _output_ended(self, run: _Run, output: _Output) -> None:
        self._unwatch(run, output.fd)
        output.open = False
        try:
            self._progress(run, output.copy.close())
        except OSError as exc:
            log.error("instance %d attempt %d: %s", run.instance, run.attempt, exc)
        os.close(output.fd)

    def _copy_rest(self, run: _Run, output: _Output) -> None:
        """What a child an instance left behind writes to its stdout or stderr, until it closes it."""
        try:
            while data := os.read(output.fd, 65536):
                output.copy.write(data)
        except OSError as exc:
            log.error("instance %d attempt %d: %s", run.instance, run.attempt, exc)
        finally:
            try:
                output.copy.close()
            except OSError:
                pass
            os.close(output.fd)

    def _exited(self, run: _Run) -> None:
        """The run exited (its stdout ended, or handed to a thread): its DONE, unless it was killed."""
        if run.quick_until is None:
            for item in run.watched:
                self._poller.unregister(item)
        run.watched = []
        assert run.returncode is not None
        if not run.message:
            run.message = describe_exit(run.returncode, run.stderr.copy.tail())
        if run is self.run_:
            self.run_ = None
        if run.killed:
            log.info("instance %d attempt %d killed", run.instance, run.attempt)
        else:
            self._finished(run.key, run.returncode == 0, run.message)
        self._start_queued()

    def _progress(self, run: _Run, fractions: list[float]) -> None:
        if run is self.run_ and not run.killed:
            for fraction in fractions:
                self._send(wire.Progress(self.slot, run.instance, run.attempt, fraction))

    def _finished(self, key: tuple[int, int], ok: bool, message: str) -> None:
        log.info("instance %d attempt %d %s: %s", key[0], key[1], "succeeded" if ok else "failed", message)
        self.unacked[key] = (ok, message)
        if self.welcomed:
            self._said[key] = self.clock.now()
            self._send(wire.Done(self.slot, key[0], key[1], ok, message))

    def _acked(self, key: tuple[int, int]) -> None:
        self.unacked.pop(key, None)
        self._said.pop(key, None)

    def _kill(self, run: _Run) -> None:
        if not run.killed:
            run.killed = True
            run.kill_deadline = self.clock.now() + self.kill_grace
            _signal_group(run.pid, signal.SIGTERM)

    def _escalate_kill(self, now: float) -> None:
        run = self.run_
        if run is not None and run.kill_deadline is not None and now >= run.kill_deadline:
            run.kill_deadline = None
            _signal_group(run.pid, signal.SIGKILL)

    def _kill_now(self) -> None:
        if self.run_ is not None:
            self.run_.killed = True
            _signal_group(self.run_.pid, signal.SIGKILL)

    def _shutdown(self, reason: str) -> None:
        """SIGTERM: the instance gets its grace period, then the AppMaster a BYE."""
        run = self.run_
        if run is not None:
            self._kill(run)
            deadline = time.monotonic() + self.kill_grace
            poller = select.poll()
            for item in run.watched:
                poller.register(item.fileno(), select.POLLIN)
            while self.run_ is run and (left := deadline - time.monotonic()) > 0:
                timeout = min(left, max(0.0, self._run_timeout(self.clock.now())))
                ready = {fd for fd, _ in poller.poll(round(1000 * timeout))}
                watched = {item.fileno() for item in run.watched}
                self._watch(run, ready)
                for fd in watched - {item.fileno() for item in run.watched}:
                    poller.unregister(fd)
        self._send(wire.Bye(self.slot, reason))


#: bytes of an unfinished stdout line kept to find a progress line in (longer lines are not progress lines)
MAX_PROGRESS_LINE = 256


class _OutputCopy:
    """An instance's stdout or stderr on its way to its file, which is made
    at the first byte — an instance that writes nothing there leaves no file:
    two new inodes an instance were the worker's largest cost on a disk whose
    files come and go (ext4 without a journal scans past the inodes deleted
    in the last minutes for each new one: docs/performance.rst, "Stop 12: the
    Fuxi path (fuxi29e)"); with ``progress`` the progress lines in it (the line being
    read is kept up to ``MAX_PROGRESS_LINE`` bytes: no progress line is
    longer); with ``tail`` its last ``tail`` bytes, for a DONE to quote."""

    def __init__(self, path: str, *, progress: bool = False, tail: int = 0) -> None:
        self._path = path
        self._sink = -1
        self._progress = progress
        self._line = bytearray()
        self._overlong = False
        self._keep = tail
        self._tail = bytearray()
        self._failed = False   # its file could not be made or written: logged once, the rest read and dropped

    def write(self, data: bytes) -> list[float]:
        """Copy ``data``; the fractions of the progress lines it ended."""
        if self._keep:
            self._tail += data
            del self._tail[:-self._keep]
        if not self._failed:
            try:
                if self._sink < 0:
                    self._sink = _make_output_file(self._path)
                view = memoryview(data)
                while view:
                    view = view[os.write(self._sink, view):]
            except OSError as exc:
                log.error("%s: %s (what the instance writes there is not kept)", self._path, exc)
                self._failed = True
        if not self._progress:
            return []
        found: list[float] = []
        *ended, rest = data.split(b"\n")
        for piece in ended:
            if not self._overlong:
                fraction = parse_progress(bytes(self._line + piece))
                if fraction is not None:
                    found.append(fraction)
            self._line.clear()
            self._overlong = False
        self._line += rest
        if len(self._line) > MAX_PROGRESS_LINE:
            self._line.clear()
            self._overlong = True
        return found

    def tail(self) -> bytes:
        """The last bytes written (up to ``tail``)."""
        return bytes(self._tail)

    def close(self) -> list[float]:
        """The stream ended: close the file; the fraction of a last line without a newline, if it is a progress
        line."""
        if self._sink >= 0:
            sink, self._sink = self._sink, -1
            os.close(sink)
        if not self._progress:
            return []
        fraction = None if self._overlong or not self._line else parse_progress(bytes(self._line))
        self._line.clear()
        return [] if fraction is None else [fraction]


def spawn_instance(command: str, env: dict[str, str], sandbox: str | os.PathLike, *,
                   in_sandbox: bool | None = None) -> tuple[int, int, int]:
    """Start ``sh -c command`` with ``posix_spawn`` (no fork of this
    process) in its own session (and process group), in ``sandbox``, stdin
    from /dev/null; its pid and the read ends of the pipes its stdout and
    its stderr go to (the caller copies them to their files and closes
    them). The worker runs in its sandbox (the agent starts it there); in
    another directory a first ``sh`` changes to ``sandbox`` and execs the
    instance's (``in_sandbox``: whether this process runs in ``sandbox``,
    None: look)."""
    argv = [SHELL, "-c", command]
    if in_sandbox is None:
        in_sandbox = os.path.samefile(sandbox, ".")
    if not in_sandbox:
        argv = [SHELL, "-c", 'cd -- "$1" && exec "$0" -c "$2"', SHELL, os.fspath(sandbox), command]
    out_read, out_write = os.pipe()
    try:
        err_read, err_write = os.pipe()
    except BaseException:
        os.close(out_read)
        os.close(out_write)
        raise
    try:
        pid = os.posix_spawn(SHELL, argv, env, setsid=True, setsigdef=_DEFAULT_SIGNALS,
                             file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                           (os.POSIX_SPAWN_DUP2, out_write, 1), (os.POSIX_SPAWN_DUP2, err_write, 2)])
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    return pid, out_read, err_read


def _make_output_file(path: str) -> int:
    """A descriptor of the new (emptied) file ``path``, for writing: the
    ``instances`` directory made again first if something removed it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o644)
    except FileNotFoundError:
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            spread_children(os.path.dirname(directory) or ".")   # placed as the worker placed it first
        os.makedirs(directory, exist_ok=True)
        return os.open(path, flags, 0o644)


def _reap(pid: int) -> int:
    """Wait for the child ``pid``; its return code (-signal if a signal ended it)."""
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _reap_if_gone(pid: int) -> int | None:
    """The return code of the child ``pid`` if it exited (reaped), None if it runs on."""
    reaped, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if reaped else None


#: ``FS_IOC_GETFLAGS``, ``FS_IOC_SETFLAGS`` (``linux/fs.h``, 64-bit) and ``FS_TOPDIR_FL`` (``chattr +T``)
_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _FS_TOPDIR_FL = 0x80086601, 0x40086602, 0x00020000


def spread_children(directory: str | os.PathLike) -> bool:
    """Mark ``directory`` the top of directory hierarchies (``chattr +T``),
    as the agent marks its sandbox root: ext2/3/4 then place a directory
    made in it in a block group of its own, with more free inodes than the
    average, and the files made in that directory follow it. Best effort:
    False where the file system has no such flag (tmpfs, overlay) or the
    worker may not set it. (The agent's own, in ``mesoslike.agent``, is not
    an API a framework may import; nor would a worker pay for that import.)"""
    import array   # here: only once, when the first instance starts
    import fcntl

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
    except OSError as exc:   # ENOTTY, EOPNOTSUPP: no such flag here; EPERM
        log.debug("cannot mark %s as the top of directory hierarchies: %s", directory, exc)
        return False
    finally:
        os.close(fd)


def keep_descriptors_from_instances() -> None:
    """Make every descriptor of this process but 0-2 not inheritable:
    ``posix_spawn`` closes only those, and an instance must get none of the
    worker's (what the agent left open to it included)."""
    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in descriptors:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass   # the directory's own descriptor, closed by now


def parse_progress(line: bytes) -> float | None:
    """The fraction of a ``FUXI_PROGRESS <fraction>`` line (clamped to
    [0, 1]), None for any other line."""
    parts = line.split()
    if len(parts) != 2 or parts[0] != wire.PROGRESS_PREFIX.encode():
        return None
    try:
        fraction = float(parts[1])
    except ValueError:
        return None
    if fraction != fraction:   # NaN
        return None
    return min(1.0, max(0.0, fraction))


def describe_exit(returncode: int, stderr: bytes) -> str:
    """``exit status 3`` / ``killed by signal 9``, then the tail of
    ``stderr`` (the last bytes the instance wrote there)."""
    what = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    tail = stderr[-STDERR_TAIL:].decode(errors="replace").strip()
    return f"{what}: {tail}" if tail else what


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def read_secret(env: os._Environ[str] | dict[str, str], file_env: str, value_env: str) -> str:
    """A secret of the worker: from the file ``file_env`` names (below the
    sandbox), which is then removed — the instances the worker runs, its
    user's processes, must not find it — else from ``value_env``."""
    name = env.get(file_env, "")
    if not name:
        return env.get(value_env, "")
    sandbox = env.get("MESOS_SANDBOX") or env.get("MESOSLIKE_SANDBOX") or ""
    problem: OSError | None = None
    for path in dict.fromkeys((os.path.join(sandbox, name), name) if sandbox else (name,)):
        try:
            with open(path, encoding="ascii") as source:
                value = source.read().strip()
        except OSError as exc:
            problem = problem or exc
            continue
        try:
            os.unlink(path)
        except OSError:
            pass
        return value
    raise ValueError(f"cannot read {name} ({file_env}): {problem}")


def main(argv: list[str] | None = None) -> int:
    missing = [name for name in ENVIRONMENT if not os.environ.get(name)]
    if missing:
        print(f"fuxi worker: missing environment {', '.join(missing)} (the Fuxi service sets them)",
              file=sys.stderr)
        return 2
    try:
        log.to_stderr(os.environ.get("FUXI_LOG_LEVEL", "INFO"))
    except ValueError as exc:
        print(f"fuxi worker: FUXI_LOG_LEVEL: {exc}", file=sys.stderr)
        return 2
    env = os.environ
    try:
        orphan_timeout = float(env.get("FUXI_ORPHAN_TIMEOUT", "300"))
        public = env.get("FUXI_WORKER_PUBLIC_KEY", "")
        secret = read_secret(env, SECRET_KEY_FILE_ENV, "FUXI_WORKER_SECRET_KEY")
        token = read_secret(env, TOKEN_FILE_ENV, "FUXI_WORKER_TOKEN")
        keys = WorkerKeys(public.encode(), secret.encode()) if public and secret else None
        appmaster_key = env.get("FUXI_APPMASTER_KEY", "").encode() or None
        worker = Worker(env["FUXI_APPMASTER"], env["FUXI_SLOT_ID"], env["FUXI_UNIT"], env["FUXI_HOSTNAME"],
                        env.get("FUXI_ROOM", ""), sandbox=os.getcwd(), orphan_timeout=orphan_timeout,
                        token=token, agent_id=env.get("MESOSLIKE_AGENT_ID", ""),
                        keys=keys, appmaster_key=appmaster_key)
    except (ValueError, OSError, MesoslikeError) as exc:   # (OSError: libzmq not found, a key not z85)
        print(f"fuxi worker: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: worker.stop("killed (SIGTERM)"))
    signal.signal(signal.SIGINT, lambda *_: worker.stop("interrupted"))
    log.info("slot %s of job %s unit %s on %s: AppMaster %s", worker.slot, env["FUXI_JOB_ID"], worker.unit,
             worker.hostname, worker.appmaster)
    return worker.run()


def main_and_exit() -> NoReturn:
    """:func:`main`, then out of the process without the interpreter's
    teardown (~6 ms of CPU a worker, 16 workers a job of 16 slots): its log
    flushed, and what its socket still holds (closed with a linger) given
    up to 0.6 s to go out (:func:`.worker_libzmq.flush_before_exit`;
    a plain exit does not wait: pyzmq leaves its context alone at exit)."""
    code = main()
    flush_before_os_exit()
    flush_before_exit(0.6)
    os._exit(code)


if __name__ == "__main__":
    main_and_exit()
