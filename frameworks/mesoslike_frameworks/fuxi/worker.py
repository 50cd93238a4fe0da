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

import os
import select
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator, NoReturn

from mesoslike import Clock, MesoslikeError, SystemClock
from mesoslike_frameworks.fuxi import flush_before_os_exit
from mesoslike_frameworks.fuxi import worker_wire as wire

if TYPE_CHECKING:
    import _socket

    from mesoslike.transport import CurveKeys

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


class _Fd:
    """A descriptor the worker's relayed loop (:class:`_LocalPoller`) waits
    on — the running instance's stdout and stderr pipes and its pidfd, and
    the waker's pipe — read by the loop itself (a connected worker's loop
    waits on them through the transport's :class:`~mesoslike.transport.Poller`
    as its ``Readable``\ s)."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


class _PipeWaker(_Fd):
    """What wakes a relayed worker's loop (:meth:`Worker.stop`, from a signal
    handler): a pipe, as the transport's ``Waker`` (not imported by a relayed
    worker)."""

    __slots__ = ("_write",)

    def __init__(self) -> None:
        read, self._write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(self._write, False)
        super().__init__(read)

    def wake(self) -> None:
        try:
            os.write(self._write, b"x")
        except BlockingIOError:
            pass   # already pending

    def clear(self) -> None:
        try:
            while os.read(self._fd, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        for fd in (self._fd, self._write):
            try:
                os.close(fd)
            except OSError:
                pass


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
        self.watched: list[Any] = []   # what the loop's poller waits on for it (each with its fileno())

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
    watches the running instance — its stdout pipe and its pidfd are polled
    with the socket, so that an instance's exit becomes its DONE in the same
    turn, without a hand-over between threads (a watcher thread, a queue and
    a waker's pipe cost each instance two thread wake-ups more)."""

    def __init__(self, appmaster: str, slot: str, unit: str, hostname: str, room: str = "", *,
                 sandbox: str | os.PathLike = ".", clock: Clock | None = None, kill_grace: float = 2.0,
                 orphan_timeout: float = 300.0, interval: float = wire.HEARTBEAT_INTERVAL, token: str = "",
                 agent_id: str = "", keys: CurveKeys | None = None, appmaster_key: bytes | None = None,
                 link: RelayLink | None = None) -> None:
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
        self._stop: str | None = None        # why the worker stops (SIGTERM) or None
        self._exit: int | None = None
        # with keys: the job's workers' pair, and its AppMaster's public key (that AppMaster only)
        self._keys, self._appmaster_key = keys, appmaster_key
        self._client: Any
        self._waker: Any                     # stop() wakes the loop (a signal handler)
        self._poller: Any                    # one for the worker's life, not one per wait
        self._readable: Any                  # what the poller takes a descriptor of the running instance as
        if link is not None:   # through another worker's relay: no ZeroMQ in this process (RelayLink)
            self._client, self._waker, self._readable = link, _PipeWaker(), _Fd
            self._poller = _LocalPoller([link, self._waker])
        else:
            self._connect()
        keep_descriptors_from_instances()

    def _connect(self) -> None:
        """The worker's own connection to its AppMaster (the transport's ZeroMQ client), and its poller."""
        from mesoslike.transport import Client, Poller, Readable, Waker

        self._client = Client(self.appmaster, codec=wire.CODEC, identity=self.slot.encode(), keys=self._keys,
                              server_key=self._appmaster_key, reconnect_max=RECONNECT_MAX,
                              reconnect_min=RECONNECT_MIN)
        self._waker, self._readable = Waker(), Readable
        self._poller = Poller([self._client, self._waker])

    @property
    def relayed(self) -> bool:
        """Does the worker reach its AppMaster through another worker's relay (:class:`RelayLink`)?"""
        return isinstance(self._client, RelayLink)

    def _relay_lost(self) -> None:
        """The relay this worker reached its AppMaster through is gone (its
        worker exited): connect to the AppMaster itself — ZeroMQ imported
        now —, the running instance's descriptors polled by the new poller,
        and say HELLO again (what it runs, holds queued and has not had
        acknowledged: the AppMaster takes it as from a worker that
        reconnected; a frame the relay had not passed on is said again, or
        asked for again, as after any reconnection)."""
        log.warning("the relay to the AppMaster is gone: connecting to %s itself", self.appmaster)
        link, waker = self._client, self._waker
        self._connect()
        link.close()
        waker.close()
        if self.run_ is not None:
            self.run_.watched = [self._readable(item.fileno()) for item in self.run_.watched]
            for item in self.run_.watched:
                self._poller.register(item)
        if self._stop is not None:
            self._waker.wake()
        self.welcomed = False
        self._beat()

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
                ready = self._poller.poll(max(0.0, timeout))
                if self._client in ready:
                    last_contact = self.clock.now()
                if self.run_ is not None:
                    watched = self.run_.watched
                    self._watch(self.run_, {item.fileno() for item in ready if item in watched})
                if self._client in ready:   # (a poll is level-triggered: what came since is seen by the next)
                    for _, message in self._client.receive():
                        self._on_message(message)
                    if self.relayed and self._client.broken:
                        self._relay_lost()
                        last_contact, next_beat = self.clock.now(), self.clock.now() + self.interval
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
        """Poll the run's stdout and stderr (copied to their files) and its pidfd with the socket."""
        try:
            run.pidfd = os.pidfd_open(run.pid)
        except OSError:   # a kernel before 5.3: its exit is seen once its stdout and stderr ended
            run.pidfd = None
        run.watched = [self._readable(run.stdout.fd), self._readable(run.stderr.fd)] + \
            ([self._readable(run.pidfd)] if run.pidfd is not None else [])
        for item in run.watched:
            self._poller.register(item)
        return run

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
            if run.pidfd is not None and run.pidfd in ready:
                self._unwatch(run, run.pidfd)
                os.close(run.pidfd)
                run.pidfd = None
                run.returncode = _reap(run.pid)
                run.report_by = time.monotonic() + STDOUT_GRACE
            elif run.pidfd is None and run.returncode is None and not run.output_open:
                pid, status = os.waitpid(run.pid, os.WNOHANG)   # no pidfd: its output ended, has it exited?
                if pid:
                    run.returncode = os.waitstatus_to_exitcode(status)
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


# ------------------------------------------------------------ the relay
#: the first bytes a worker sends the relay it connects to: the relay's protocol and its version
RELAY_MAGIC = b"FUXI-RELAY-1"
#: bytes of each side's nonce, and of each side's proof (a keyed BLAKE2b of both nonces and the slot)
RELAY_NONCE = RELAY_PROOF = 32
#: seconds a worker waits for a relay's answers while it joins it (else it connects to the AppMaster itself)
RELAY_JOIN_TIMEOUT = 3.0
#: seconds a relaying worker stays, after its own slot is released, for the workers it relays for
RELAY_LINGER = 30.0
#: seconds the relay waits for a relayed worker to take a frame (else it drops the link: the worker connects
#: to the AppMaster itself)
RELAY_SEND_TIMEOUT = 2.0
#: the environment that turns the relay off (a worker then always connects to its AppMaster itself)
RELAY_ENV = "FUXI_WORKER_RELAY"
_LENGTH = 4


def relay_address(job: str, appmaster: str, public_key: str) -> bytes:
    """The abstract Unix socket (Linux: no file, gone with its last
    descriptor) of the relay of a job's workers on this machine — of this
    user, for this AppMaster and the job's workers' key."""
    import _blake2   # hashlib's BLAKE2 without hashlib (and OpenSSL's module)

    digest = _blake2.blake2b(f"{job}\0{appmaster}\0{public_key}\0{os.getuid()}".encode(), digest_size=16)
    return b"\0mesoslike-fuxi-relay-" + digest.hexdigest().encode()


def _proof(key: bytes, side: bytes, first: bytes, second: bytes, slot: bytes) -> bytes:
    """What proves a side of a relay's link knows the job's workers' secret key (``key``)."""
    import _blake2

    return _blake2.blake2b(side + first + second + slot, key=key[:64], digest_size=RELAY_PROOF).digest()


def _same_digest(a: bytes, b: bytes) -> bool:
    from _operator import _compare_digest

    return _compare_digest(a, b)


def _peer_uid(sock: _socket.socket) -> int:
    """The user of the process at the other end of a Unix socket (``SO_PEERCRED``: pid, uid, gid)."""
    import _socket

    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder)


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(_LENGTH, "big") + payload


class _Frames:
    """The frames of a byte stream (each its length, 4 bytes, then its bytes), as they come."""

    __slots__ = ("_buffer", "limit")

    def __init__(self, limit: int) -> None:
        self._buffer = bytearray()
        self.limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        """The frames ``data`` completed; ValueError for one over ``limit``."""
        self._buffer += data
        frames: list[bytes] = []
        while len(self._buffer) >= _LENGTH:
            size = int.from_bytes(self._buffer[:_LENGTH], "big")
            if size > self.limit:
                raise ValueError(f"a frame of {size} bytes exceeds the limit of {self.limit}")
            if len(self._buffer) < _LENGTH + size:
                break
            frames.append(bytes(self._buffer[_LENGTH:_LENGTH + size]))
            del self._buffer[:_LENGTH + size]
        return frames


def _read_frame(sock: _socket.socket, frames: _Frames, deadline: float) -> bytes:
    """The next frame of a blocking socket (OSError at ``deadline`` or at its end)."""
    while True:
        got = frames.feed(b"")
        if got:
            return got[0]
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer")
        sock.settimeout(left)
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        got = frames.feed(data)
        if got:
            if len(got) > 1:
                raise ConnectionError("more than was asked")
            return got[0]


class RelayLink:
    """A worker's way to its AppMaster through the relay of another worker of
    its job on this machine (:class:`Relay`): a Unix socket, its frames
    those the worker would send and receive on its own ZeroMQ connection
    (:mod:`.worker_wire`'s, length-prefixed). A worker that reaches its
    AppMaster so imports no ZeroMQ (~25-30 ms of CPU of its start, of a
    job's 16 workers all but one a machine: docs/performance.rst, "Stop 16:
    the Fuxi path, its workers (fuxi29l)"). Joined with :meth:`join`: the
    relay proves it holds the job's workers' secret key, and so does the
    worker (and the other end runs as the same user); then the relay
    connects to the AppMaster for this worker's slot, with the same keys
    and identity as the worker would (the AppMaster sees no difference).
    :attr:`broken` once the relay is gone: the worker then connects itself
    (:meth:`Worker._relay_lost`). The client's surface the worker uses:
    ``send``, ``receive``, ``queued``, ``close``, ``fileno``."""

    #: the most bytes waiting to go to the relay before a send is refused (as the transport's outbox)
    MAX_QUEUED = 4 * wire.MAX_FRAME

    def __init__(self, sock: _socket.socket) -> None:
        self._sock = sock
        sock.setblocking(False)
        self._frames = _Frames(wire.MAX_FRAME)
        self._out = bytearray()
        self._queued = 0
        self.broken = False

    @classmethod
    def join(cls, address: bytes, slot: str, key: bytes, timeout: float = RELAY_JOIN_TIMEOUT) -> RelayLink | None:
        """The link through the relay at ``address``; None if there is none, or it does not prove the key."""
        import _socket

        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            if _peer_uid(sock) != os.getuid():
                raise ConnectionError("the relay runs as another user")
            deadline = time.monotonic() + timeout
            mine, name = os.urandom(RELAY_NONCE), slot.encode()
            sock.sendall(_frame(RELAY_MAGIC + mine + name))
            frames = _Frames(RELAY_NONCE + RELAY_PROOF)
            answer = _read_frame(sock, frames, deadline)
            theirs, proof = answer[:RELAY_NONCE], answer[RELAY_NONCE:]
            if len(theirs) != RELAY_NONCE or not _same_digest(proof, _proof(key, b"relay", mine, theirs, name)):
                raise ConnectionError("the relay does not prove the job's key")
            sock.sendall(_frame(_proof(key, b"worker", theirs, mine, name)))
            if _read_frame(sock, frames, deadline) != b"OK":
                raise ConnectionError("the relay did not take the worker")
        except OSError as exc:
            if not isinstance(exc, (FileNotFoundError, ConnectionRefusedError)):
                log.warning("not through the relay of this machine: %s", exc)
            sock.close()
            return None
        return cls(sock)

    def fileno(self) -> int:
        return self._sock.fileno()

    @property
    def queued(self) -> int:
        """Frames not yet taken by the relay (roughly: those of the bytes waiting)."""
        return self._queued if self._out else 0

    @property
    def waiting(self) -> bool:
        return bool(self._out)

    def send(self, message: object) -> bool:
        """Send a message (False if too much waits already: dropped)."""
        if self.broken:
            return True   # dropped as on a connection that is down (said again once connected anew)
        if len(self._out) > self.MAX_QUEUED:
            return False
        self._out += _frame(wire.CODEC.encode(message))
        self._queued += 1
        self.flush()
        return True

    def flush(self) -> None:
        """What the socket takes of the bytes waiting."""
        if not self._out or self.broken:
            return
        try:
            sent = self._sock.send(self._out)
        except BlockingIOError:
            return
        except OSError:
            self._lost()
            return
        del self._out[:sent]
        if not self._out:
            self._queued = 0

    def receive(self) -> Iterator[tuple[None, object]]:
        """Every message waiting now (a bad frame: the codec's error); :attr:`broken` at the relay's end."""
        while not self.broken:
            try:
                data = self._sock.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            try:
                frames = self._frames.feed(data)
            except ValueError:
                self._lost()
                return
            for frame in frames:
                yield None, wire.CODEC.decode(frame) if len(frame) <= wire.MAX_FRAME else \
                    wire.WireError("frame too large")

    def _lost(self) -> None:
        self.broken = True
        self._out.clear()

    def close(self, linger: float = 0.0) -> None:
        """Close the link; what waits gets up to ``linger`` seconds to go."""
        deadline = time.monotonic() + linger
        while self._out and not self.broken and time.monotonic() < deadline:
            poller = select.poll()
            poller.register(self._sock.fileno(), select.POLLOUT)
            poller.poll(max(1, round(1000 * (deadline - time.monotonic()))))
            self.flush()
        self._sock.close()


class _LocalPoller:
    """The relayed worker's poll (``select.poll``) over its link, its waker
    and the running instance's descriptors: the transport's
    :class:`~mesoslike.transport.Poller`'s surface the worker uses; what
    waits to go to the relay is sent as the socket takes it."""

    def __init__(self, items: list[Any]) -> None:
        self._poll = select.poll()
        self._items: dict[int, Any] = {}
        self._link: RelayLink | None = None
        for item in items:
            self.register(item)

    def register(self, item: Any) -> None:
        if isinstance(item, RelayLink):
            self._link = item
        self._items[item.fileno()] = item
        self._poll.register(item.fileno(), select.POLLIN)

    def unregister(self, item: Any) -> None:
        fd = item.fileno()
        if self._items.get(fd) is item:
            del self._items[fd]
            self._poll.unregister(fd)

    def poll(self, timeout: float | None) -> list[Any]:
        link = self._link
        if link is not None:
            link.flush()
            if link.waiting:
                self._poll.modify(link.fileno(), select.POLLIN | select.POLLOUT)
        events = self._poll.poll(None if timeout is None else max(0, round(1000 * timeout + 0.5)))
        if link is not None and link.waiting:
            self._poll.modify(link.fileno(), select.POLLIN)
            link.flush()
        ready = []
        for fd, event in events:
            item = self._items.get(fd)
            if item is None or (item is link and event == select.POLLOUT):
                continue
            if isinstance(item, _PipeWaker):
                item.clear()
            ready.append(item)
        return ready


class _Relayed:
    """A worker the relay passes frames for: its Unix socket, where it is in
    joining (``stage``), and once joined its ZeroMQ client to the AppMaster."""

    __slots__ = ("sock", "frames", "stage", "nonces", "slot", "client", "readable")

    def __init__(self, sock: _socket.socket, readable: Any) -> None:
        self.sock, self.readable = sock, readable
        self.frames = _Frames(len(RELAY_MAGIC) + RELAY_NONCE + 1024)
        self.stage = "hello"
        self.nonces = (b"", b"")
        self.slot = b""
        self.client: Any = None


class Relay:
    """The relay of a job's workers on this machine, in the worker that bound
    its address first (:func:`relay_address`): a thread that lets in the
    workers that prove the job's workers' secret key (:class:`RelayLink`)
    and passes their frames to the AppMaster and back, on a ZeroMQ client of
    its own for each (the same keys, the slot's identity). A relayed worker
    whose relay closes connects to the AppMaster itself."""

    def __init__(self, listener: _socket.socket, appmaster: str, key: bytes, keys: CurveKeys | None,
                 appmaster_key: bytes | None) -> None:
        from mesoslike.transport import Poller, Readable, Waker

        self._listener, self._appmaster, self._key = listener, appmaster, key
        self._keys, self._appmaster_key = keys, appmaster_key
        listener.setblocking(False)
        self._readable_type = Readable
        self._listening: Any = Readable(listener.fileno())
        self._waker = Waker()
        self._poller = Poller([self._listening, self._waker])
        self._links: dict[int, _Relayed] = {}   # by the socket's descriptor
        self._clients: dict[int, _Relayed] = {}   # by id() of the link's client
        self._stopping = False
        self._close_listener = False
        self._thread = threading.Thread(target=self._serve, name="fuxi-relay", daemon=True)

    @classmethod
    def bind(cls, address: bytes) -> _socket.socket | None:
        """A listening socket at ``address``; None if another process holds it."""
        import _socket

        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.bind(address)
            sock.listen(64)
        except OSError:
            sock.close()
            return None
        return sock

    def start(self) -> None:
        self._thread.start()

    @property
    def relaying(self) -> int:
        """The workers joined (or joining) now."""
        return len(self._links)

    def stop_listening(self) -> None:
        """Let no more workers in (another worker may bind the address then)."""
        self._close_listener = True
        self._waker.wake()

    def stop(self) -> None:
        """Close every link (their workers connect to the AppMaster themselves) and the thread."""
        self._stopping = True
        self._waker.wake()
        self._thread.join(5.0)

    def _serve(self) -> None:
        try:
            while not self._stopping:
                if self._close_listener and self._listening is not None:
                    self._poller.unregister(self._listening)
                    self._listening = None
                    self._listener.close()
                for item in self._poller.poll(0.5):
                    if item is self._listening:
                        self._accept()
                    elif isinstance(item, self._readable_type):
                        link = self._links.get(item.fileno())
                        if link is not None:
                            self._from_worker(link)
                    elif id(item) in self._clients:
                        self._from_appmaster(self._clients[id(item)])
        except Exception:   # noqa: BLE001 - a relay that fails must not take its worker down: its links close
            log.exception("the relay failed")
        finally:
            for link in list(self._links.values()):
                self._drop(link)
            if self._listening is not None:
                self._listener.close()
            self._waker.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener._accept()   # type: ignore[attr-defined]   # (the C socket's)
            except BlockingIOError:
                return
            except OSError as exc:
                log.warning("the relay cannot take a worker: %s", exc)
                return
            import _socket

            conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, fileno=sock)
            try:
                if _peer_uid(conn) != os.getuid():
                    conn.close()
                    continue
            except OSError:
                conn.close()
                continue
            conn.setblocking(False)
            link = _Relayed(conn, self._readable_type(conn.fileno()))
            self._links[conn.fileno()] = link
            self._poller.register(link.readable)

    def _from_worker(self, link: _Relayed) -> None:
        try:
            data = link.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(link)
            return
        try:
            frames = link.frames.feed(data)
        except ValueError:
            self._drop(link)
            return
        for frame in frames:
            if link.stage == "open":
                link.client.send_frame(frame)
            elif not self._join(link, frame):
                self._drop(link)
                return

    def _join(self, link: _Relayed, frame: bytes) -> bool:
        if link.stage == "hello":
            size = len(RELAY_MAGIC) + RELAY_NONCE
            if not frame.startswith(RELAY_MAGIC) or len(frame) <= size:
                return False
            theirs, link.slot = frame[len(RELAY_MAGIC):size], frame[size:]
            mine = os.urandom(RELAY_NONCE)
            link.nonces, link.stage = (theirs, mine), "proof"
            return self._to_worker(link, mine + _proof(self._key, b"relay", theirs, mine, link.slot))
        if link.stage == "proof":
            theirs, mine = link.nonces
            if not _same_digest(frame, _proof(self._key, b"worker", mine, theirs, link.slot)):
                log.warning("a process that does not prove the job's key tried the relay")
                return False
            from mesoslike.transport import Client

            # (the worker's codec only for its frame limit: frames pass as they are, with send_frame and
            # receive_frames; without one the transport would import the master protocol's)
            link.client = Client(self._appmaster, codec=wire.CODEC, identity=link.slot, keys=self._keys,
                                 server_key=self._appmaster_key, reconnect_max=RECONNECT_MAX,
                                 reconnect_min=RECONNECT_MIN)
            link.frames.limit = wire.MAX_FRAME
            self._clients[id(link.client)] = link
            self._poller.register(link.client)
            link.stage = "open"
            log.info("relaying for slot %s", link.slot.decode(errors="replace"))
            return self._to_worker(link, b"OK")
        return False

    def _from_appmaster(self, link: _Relayed) -> None:
        for _, frame in link.client.receive_frames():
            if not self._to_worker(link, frame):
                self._drop(link)
                return

    def _to_worker(self, link: _Relayed, payload: bytes) -> bool:
        data = _frame(payload)
        try:
            try:
                sent = link.sock.send(data)   # (non-blocking: all of it, nearly always)
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                link.sock.settimeout(RELAY_SEND_TIMEOUT)
                link.sock.sendall(data[sent:])
                link.sock.setblocking(False)
        except OSError as exc:
            log.warning("slot %s: the relay cannot pass a frame to its worker: %s",
                        link.slot.decode(errors="replace"), exc)
            return False
        return True

    def _drop(self, link: _Relayed) -> None:
        if self._links.pop(link.sock.fileno(), None) is None:
            return
        self._poller.unregister(link.readable)
        if link.client is not None:
            self._poller.unregister(link.client)
            del self._clients[id(link.client)]
            link.client.close(linger=0.5)   # what the worker said last (its BYE) still goes out
        link.sock.close()


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
    relay: Relay | None = None
    try:
        orphan_timeout = float(env.get("FUXI_ORPHAN_TIMEOUT", "300"))
        public = env.get("FUXI_WORKER_PUBLIC_KEY", "")
        secret = read_secret(env, SECRET_KEY_FILE_ENV, "FUXI_WORKER_SECRET_KEY")
        token = read_secret(env, TOKEN_FILE_ENV, "FUXI_WORKER_TOKEN")
        appmaster_key = env.get("FUXI_APPMASTER_KEY", "").encode() or None
        link, listener = _find_relay(env, public, secret)
        keys = None
        if public and secret:
            from mesoslike.transport import CurveKeys

            keys = CurveKeys(public.encode(), secret.encode())
        if link is None:
            from mesoslike.transport import small_frames_only

            small_frames_only()   # its AppMaster's ASSIGNs and ACKs: no ctypes nor mallopt at its first socket
        worker = Worker(env["FUXI_APPMASTER"], env["FUXI_SLOT_ID"], env["FUXI_UNIT"], env["FUXI_HOSTNAME"],
                        env.get("FUXI_ROOM", ""), sandbox=os.getcwd(), orphan_timeout=orphan_timeout,
                        token=token, agent_id=env.get("MESOSLIKE_AGENT_ID", ""),
                        keys=keys, appmaster_key=appmaster_key, link=link)
        if listener is not None:
            relay = Relay(listener, env["FUXI_APPMASTER"], secret.encode(), keys, appmaster_key)
    except (ValueError, MesoslikeError) as exc:
        print(f"fuxi worker: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: worker.stop("killed (SIGTERM)"))
    signal.signal(signal.SIGINT, lambda *_: worker.stop("interrupted"))
    log.info("slot %s of job %s unit %s on %s: AppMaster %s%s", worker.slot, env["FUXI_JOB_ID"], worker.unit,
             worker.hostname, worker.appmaster,
             " (through the relay of this machine)" if link is not None else
             " (the relay of this machine)" if relay is not None else "")
    if relay is not None:
        relay.start()
    code = worker.run()
    if relay is not None:
        relay.stop_listening()
        if code != 143:   # released or orphaned: the workers it relays for get RELAY_LINGER to end
            deadline = time.monotonic() + RELAY_LINGER
            while relay.relaying and worker._stop is None and time.monotonic() < deadline:
                time.sleep(0.05)
        relay.stop()
    return code


def _find_relay(env: os._Environ[str], public: str, secret: str) -> tuple[RelayLink | None, _socket.socket | None]:
    """The worker's way to its AppMaster on a machine where other workers of
    its job run: through the relay of the first of them (a :class:`RelayLink`),
    else its own connection, and the relay's listening socket if this worker
    is the first. Neither without the job's workers' keys (what the link is
    proven with), on another system than Linux (abstract sockets), or with
    ``FUXI_WORKER_RELAY=0``."""
    if not (public and secret) or env.get(RELAY_ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return None, None
    # one relay an agent (a machine may run several agents): its workers of the job, the agent's slots
    address = relay_address(f"{env.get('FUXI_JOB_ID', '')}\0{env.get('MESOSLIKE_AGENT_ID', '')}\0"
                            f"{env.get('FUXI_HOSTNAME', '')}", env["FUXI_APPMASTER"], public)
    for _ in range(2):   # a worker that bound it may not listen yet: once more after a refused bind
        link = RelayLink.join(address, env["FUXI_SLOT_ID"], secret.encode())
        if link is not None:
            return link, None
        listener = Relay.bind(address)
        if listener is not None:
            return None, listener
    return None, None


def main_and_exit() -> NoReturn:
    """:func:`main`, then out of the process without the interpreter's
    teardown (~6 ms of CPU a worker, 16 workers a job of 16 slots): its log
    flushed, and what its socket still holds (closed with a linger) given
    up to 0.6 s to go out (:func:`mesoslike.transport.flush_before_exit`;
    a plain exit does not wait: pyzmq leaves its context alone at exit)."""
    code = main()
    flush_before_os_exit()
    if "mesoslike.transport" in sys.modules:   # (not imported by a worker that ran through a relay)
        from mesoslike.transport import flush_before_exit

        flush_before_exit(0.6)
    os._exit(code)


if __name__ == "__main__":
    main_and_exit()
