"""The agent's side of its shared supervisor (:mod:`.shared_supervisor`):
find the one that runs on the work directory, or start it; connect; send
launches and kills; read what it tells (a task started, a run ended).

The shared supervisor is started as the agent's child (so its CPU, and
its tasks', is counted as the agent's children's), in a session of its
own: it outlives the agent, and a restarted agent connects to it again
(:meth:`SupervisorLink.attach`, from the identity the tasks' run files
name). Not thread-safe: the agent's loop thread uses it.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec

from mesoslike.agent import shared_supervisor as shared
from mesoslike.agent import supervisor as sup

__all__ = ["SupervisorLink", "Identity", "SHARED_SUPERVISOR_SCRIPT"]

log = logging.getLogger("mesoslike.agent")

SHARED_SUPERVISOR_SCRIPT = shared.__file__
#: how long a shared supervisor just started may take to listen (s)
START_TIMEOUT = 10.0
#: a process's pid and start time (clock ticks since boot): tells it from a later one with its pid
Identity = tuple[int, object]


def _msgspec_option(python: str) -> list[str]:
    """``--msgspec DIR`` for a shared supervisor run by this interpreter
    (``-I -S``: it has none of its packages) when this one has msgspec:
    it decodes the tasks' ``launch.json`` with it
    (:func:`.shared_supervisor.launch_loads`)."""
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return []
    try:
        import msgspec
    except ImportError:
        return []
    return ["--msgspec", os.path.dirname(os.path.dirname(os.path.abspath(msgspec.__file__)))]


class SupervisorLink:
    """The connection to the shared supervisor of ``meta`` (the agent's
    ``<work_dir>/meta``)."""

    def __init__(self, meta: Path, python: str, sandbox_root: Path | None = None) -> None:
        self.meta = meta
        self.sandbox_root = sandbox_root
        self.python = python
        self.identity: Identity | None = None   # of the one connected to
        self.started = 0        # shared supervisors this link started
        self.reconnected = False   # the connection was made again: what it told meanwhile is to be re-read
        #: whether it ran at the last look (:meth:`receive`, or the connection): one look a loop turn, not
        #: one a task
        self.live = False
        #: the nice of its session's autogroup (:func:`.supervisor.set_autogroup_nice`; 0: left alone), set
        #: on each one connected to: one started now, found, or attached to (an earlier agent process's)
        self.autogroup_nice = 0
        self._sock: socket.socket | None = None
        self._popen: subprocess.Popen | None = None
        self._pidfd: int | None = None
        self._inbox = b""
        self._outbox: list[bytes] = []
        #: the exit status of a run whose ``E`` was read (``X`` told it before: what its ``exit.json`` holds),
        #: taken by the caller (:meth:`pop_exit_status`); a run with none has its file read
        self._exit_statuses: dict[str, dict] = {}
        self._told_status: dict[str, dict] = {}   # X read, its E not yet

    @property
    def pid(self) -> int:
        return self.identity[0] if self.identity is not None else 0

    # ------------------------------------------------------------- finding
    def ensure(self) -> bool:
        """Connected to a live shared supervisor: the one running on the
        work directory, or one started now. False (a warning logged) if
        none can be had: the caller starts a task supervisor instead."""
        if self._sock is not None and self.alive():
            return True
        self._disconnect()
        identity = self._running()
        if identity is not None and self._connect(identity):
            return True
        return self._start()

    def attach(self, identity: Identity) -> bool:
        """Connected to the shared supervisor ``identity`` (a restarted
        agent's tasks name it); False if it no longer runs."""
        if self.identity == identity and self._sock is not None and self.alive():
            return True
        if self._running() != identity:
            return False
        self._disconnect()
        return self._connect(identity)

    def alive(self) -> bool:
        """The shared supervisor connected to (or last connected to) still runs."""
        if self._popen is not None:
            return self._popen.poll() is None
        if self._pidfd is not None:
            return not select.select([self._pidfd], [], [], 0)[0]
        return False

    def _running(self) -> Identity | None:
        try:
            state = sup.read_json(str(self.meta / shared.STATE_FILE))
            pid, ticks = state["pid"], state["start_ticks"]  # type: ignore[index]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(pid, int) or pid <= 0 or sup.process_start_ticks(pid) != ticks:
            return None
        return pid, ticks

    def _start(self) -> bool:
        try:
            with open(self.meta / shared.LOG, "ab") as log_file:
                popen = subprocess.Popen([self.python, "-I", "-S", SHARED_SUPERVISOR_SCRIPT, str(self.meta),
                                          *_msgspec_option(self.python)],
                                         stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                         start_new_session=True, close_fds=True,
                                         env=self._environment())
        except OSError as exc:
            log.warning("cannot start the shared supervisor (tasks get supervisors of their own): %s", exc)
            return False
        self.started += 1
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and popen.poll() is None:
            identity = self._running()
            if identity is not None and identity[0] == popen.pid:
                self._popen = popen
                if self._connect(identity):
                    return True
                break
            time.sleep(0.005)
        log.warning("the shared supervisor (pid %d) did not start listening (tasks get supervisors of their own); "
                    "see %s", popen.pid, self.meta / shared.LOG)
        if popen.poll() is None:
            popen.kill()
        popen.wait()
        self._popen = None
        return False

    def _environment(self) -> dict[str, str]:
        # whose it is, for a process listing (and a test's clean-up), as a task supervisor's says
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MESOSLIKE_SUPERVISOR": "shared"}
        if self.sandbox_root is not None:
            env["MESOSLIKE_SANDBOX"] = str(self.sandbox_root.resolve())
        return env

    def _connect(self, identity: Identity) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        dir_fd = -1
        try:
            dir_fd = os.open(self.meta, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            sock.connect(f"/proc/self/fd/{dir_fd}/{shared.SOCKET_FILE}")   # a path of any length
        except OSError as exc:
            log.warning("cannot connect to the shared supervisor (pid %d): %s", identity[0], exc)
            sock.close()
            return False
        finally:
            if dir_fd >= 0:
                os.close(dir_fd)
        sock.setblocking(False)
        if self._popen is None or self._popen.pid != identity[0]:
            self._popen = None
            self._close_pidfd()
            try:
                self._pidfd = os.pidfd_open(identity[0])
            except OSError:
                sock.close()
                return False
            if sup.process_start_ticks(identity[0]) != identity[1]:   # ended (and the pid reused) meanwhile
                self._close_pidfd()
                sock.close()
                return False
        self._sock, self.identity, self._inbox = sock, identity, b""
        self._told_status.clear()
        self.live = True
        if self.autogroup_nice:
            sup.set_autogroup_nice(self.autogroup_nice, identity[0])
        return True

    def fileno(self) -> int | None:
        """The connection's descriptor, to poll with the agent's sockets (an
        end told wakes the loop at once, not at its next look), None while
        not connected."""
        return self._sock.fileno() if self._sock is not None else None

    # ------------------------------------------------------------- talking
    def send(self, kind: str, name: str) -> None:
        """Queue a request (``L``, ``T``, ``K`` for the run ``name``); :meth:`flush` sends."""
        self._outbox.append(f"{kind} {name}\n".encode("ascii"))

    def flush(self) -> None:
        """Send what is queued (blocking: a few bytes a task, which the
        shared supervisor reads as fast as it starts them)."""
        if not self._outbox:
            return
        data, self._outbox = b"".join(self._outbox), []
        sock = self._sock
        if sock is None:
            return
        try:
            sock.setblocking(True)
            sock.sendall(data)
        except OSError as exc:
            log.warning("the shared supervisor's connection failed: %s", exc)
            self._disconnect()
        else:
            sock.setblocking(False)

    def receive(self) -> list[tuple[str, str, int]]:
        """What the shared supervisor told since the last call: ``("S",
        run, task_pid)`` and ``("E", run, 0)``. A connection that ended
        while the supervisor runs is made again, with :attr:`reconnected`
        set (ends told meanwhile were lost: the caller re-reads its runs'
        ``exit.json``)."""
        told: list[tuple[str, str, int]] = []
        self.live = self.alive()
        sock = self._sock
        if sock is None:
            return self._reconnect(told)
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                chunk = b""
            if not chunk:
                self._disconnect()
                return self._parse(told) + self._reconnect([])
            self._inbox += chunk
        return self._parse(told)

    def _parse(self, told: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        *lines, self._inbox = self._inbox.split(b"\n")
        for line in lines:
            parts = line.decode("ascii", "replace").split(" ")
            if len(parts) == 3 and parts[0] == "S" and parts[2].isdigit():
                told.append(("S", parts[1], int(parts[2])))
            elif len(parts) == 2 and parts[0] == "E":
                status = self._told_status.pop(parts[1], None)
                if status is not None:
                    self._exit_statuses[parts[1]] = status
                told.append(("E", parts[1], 0))
            elif len(parts) >= 3 and parts[0] == "X":
                status = _exit_status_of(line[len(parts[1]) + 3:])
                if status is not None:
                    self._told_status[parts[1]] = status
        return told

    def pop_exit_status(self, name: str) -> dict | None:
        """The exit status the shared supervisor told with the run's end, if it did."""
        return self._exit_statuses.pop(name, None)

    def _reconnect(self, told: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        identity = self.identity
        if identity is not None and self.alive() and self._connect(identity):
            self.reconnected = True
        return told

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._inbox = b""

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def close(self) -> None:
        """The agent stops: the shared supervisor runs on with its tasks."""
        self.flush()
        self._disconnect()
        self._close_pidfd()
        self._popen = None


_decode_json = msgspec.json.Decoder().decode


def _exit_status_of(data: bytes) -> dict | None:
    """An ``X`` line's status: a JSON object that says the task ended; None
    for anything else (the agent then reads ``exit.json``). Decoded by
    msgspec (0.6 µs where ``json.loads`` took 3.9, a task), with
    ``json.loads`` having the last word on anything msgspec refuses, as the
    shared supervisor decodes launch files (:func:`.shared_supervisor.launch_loads`)."""
    try:
        status = _decode_json(data)
    except Exception:   # (msgspec's errors are ValueErrors) json has the last word on any of them
        try:
            status = json.loads(data)
        except (ValueError, RecursionError):
            return None
    return status if isinstance(status, dict) and status.get("ended") is True else None
