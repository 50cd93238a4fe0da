"""The session guard: a dead contender's ZooKeeper session ends at once.

When a leading master's *process* dies (``kill -9``, a crash, the OOM
killer) its host's kernel knows at once, but ZooKeeper keeps the session —
and the election znode with it, so nobody else leads — until the session
timeout has passed without a word from it. The guard (HDFS's ZKFC idea, the
Curator "kill session" technique) closes that session as soon as the process
is gone (docs/ha.rst, "The session guard"):

* :class:`SessionGuard` (the contender's side) starts
  ``python -m mesoslike.ha.session_guard`` in a session of its own (a signal
  to the master's process group, or a terminal's Ctrl-C, does not reach it),
  handing it the read end of a pipe and nothing else of the master's. The
  write end stays in the master only: close-on-exec, and closed in any child
  forked without an exec (:func:`os.register_at_fork`). Each time the
  contender's client gets a new session, the master writes its credentials
  (:func:`encode_session`); on a clean stop, :func:`encode_bye`.
* :func:`main` (the guard) reads the records (:class:`RecordReader`: hostile
  input, a malformed record is logged and skipped). At end of file without a
  bye — the kernel closed the dead master's descriptors — or once it is no
  longer the master's child, it attaches to the last session with its id and
  password and closes it (:func:`close_session`): ZooKeeper deletes the
  session's ephemeral znodes at once and the standbys' watches fire. An
  expired session is left alone; all of it within the session timeout.

A frozen or cut-off master is not dead: its guard sees no end of file and
does nothing, and the session timeout decides as before. So the guard only
ever ends the session of a process that cannot act any more, and no two
masters lead at once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time

import attrs

__all__ = ["SessionRecord", "Bye", "Malformed", "RecordReader", "encode_session", "encode_bye", "SessionGuard",
           "close_session", "watch", "main", "MAX_PAYLOAD"]

log = logging.getLogger("mesoslike.ha.session_guard")

#: every record: magic, version, kind, payload length (big-endian), then the payload
_HEADER = struct.Struct(">4sBBH")
_MAGIC = b"MLSG"
_VERSION = 1
_SESSION = 1
_BYE = 2
#: a session record is ~200 bytes; anything longer is not one of ours
MAX_PAYLOAD = 4096
_MAX_HOSTS = 2048
_MAX_PASSWORD = 64         # ZooKeeper's are 16 bytes
_MAX_AUTH = 1024
_MAX_TIMEOUT = 3600.0
#: how often the guard looks whether it is still the master's child (a forked
#: descendant of the master holding the pipe would otherwise delay the end of file)
_PARENT_CHECK = 0.5


# ----------------------------------------------------------------- records (pure)
@attrs.frozen(repr=False)
class SessionRecord:
    """A ZooKeeper session to close if its master dies: the ensemble, the
    session's id and password, the timeout (the guard's bound) and the
    digest auth of a secured group (user, password), if any."""

    hosts: str
    session_id: int
    password: bytes
    timeout: float
    auth: tuple[str, str] | None = None

    def __repr__(self) -> str:   # never the password or the digest in a log line
        return f"SessionRecord(0x{self.session_id:x} at {self.hosts}, timeout {self.timeout:g} s)"


@attrs.frozen
class Bye:
    """The master stops cleanly: the guard exits without touching ZooKeeper."""


@attrs.frozen
class Malformed:
    """Bytes that are not a valid record (why), skipped."""

    reason: str


def encode_session(record: SessionRecord) -> bytes:
    """``record`` as the guard reads it (ValueError if it does not fit a record)."""
    payload = json.dumps({"hosts": record.hosts, "session_id": record.session_id,
                          "password": record.password.hex(), "timeout": record.timeout,
                          "auth": list(record.auth) if record.auth else None}).encode("utf-8")
    if isinstance(_decode_session(payload), str):
        raise ValueError(f"not a valid session record: {_decode_session(payload)}")
    return _HEADER.pack(_MAGIC, _VERSION, _SESSION, len(payload)) + payload


def encode_bye() -> bytes:
    return _HEADER.pack(_MAGIC, _VERSION, _BYE, 0)


def _decode_session(payload: bytes) -> SessionRecord | str:
    """The session record in ``payload``, or why it is not one."""
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return f"not JSON ({type(exc).__name__})"
    if not isinstance(doc, dict) or set(doc) != {"hosts", "session_id", "password", "timeout", "auth"}:
        return "not a session object"
    hosts, session_id, password, timeout, auth = (doc[k] for k in ("hosts", "session_id", "password", "timeout",
                                                                    "auth"))
    if not isinstance(hosts, str) or not 0 < len(hosts) <= _MAX_HOSTS or not hosts.isprintable():
        return "bad hosts"
    if not isinstance(session_id, int) or isinstance(session_id, bool) or not 0 < session_id < 2 ** 64:
        return "bad session id"
    if not isinstance(password, str) or not 0 < len(password) <= 2 * _MAX_PASSWORD:
        return "bad password"
    try:
        password_bytes = bytes.fromhex(password)
    except ValueError:
        return "bad password"
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout <= _MAX_TIMEOUT:
        return "bad timeout"
    if auth is not None and not (isinstance(auth, list) and len(auth) == 2
                                 and all(isinstance(part, str) and 0 < len(part) <= _MAX_AUTH for part in auth)):
        return "bad auth"
    return SessionRecord(hosts=hosts, session_id=session_id, password=password_bytes, timeout=float(timeout),
                         auth=(auth[0], auth[1]) if auth is not None else None)


class RecordReader:
    """Records from a byte stream fed in pieces of any size. Input is hostile:
    nothing it holds makes :meth:`feed` raise; a malformed record comes out as
    :class:`Malformed` and is skipped (by its length when its header is sound,
    else up to the next magic). At most one record's bytes are kept."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[SessionRecord | Bye | Malformed]:
        self._buffer += data
        out: list[SessionRecord | Bye | Malformed] = []
        while True:
            start = self._buffer.find(_MAGIC)
            if start != 0:
                # garbage before a magic (or no magic: keep a tail that may be the start of one)
                drop = start if start > 0 else max(0, len(self._buffer) - (len(_MAGIC) - 1))
                if drop:
                    out.append(Malformed(f"{drop} bytes that are no record"))
                    del self._buffer[:drop]
                if start < 0:
                    return out
            if len(self._buffer) < _HEADER.size:
                return out
            _, version, kind, length = _HEADER.unpack_from(self._buffer)
            if version != _VERSION or kind not in (_SESSION, _BYE) or length > MAX_PAYLOAD \
                    or (kind == _BYE and length):
                out.append(Malformed(f"a header of version {version}, kind {kind}, length {length}"))
                del self._buffer[:len(_MAGIC)]    # resynchronise on the next magic
                continue
            if len(self._buffer) < _HEADER.size + length:
                return out
            payload = bytes(self._buffer[_HEADER.size:_HEADER.size + length])
            del self._buffer[:_HEADER.size + length]
            if kind == _BYE:
                out.append(Bye())
            else:
                record = _decode_session(payload)
                out.append(Malformed(f"a session record: {record}") if isinstance(record, str) else record)


# ----------------------------------------------------------------- the master's side
#: write ends of live guards' pipes: closed in any child forked without an exec
#: (mesoslike.master.forked renders /state in one), which would otherwise keep a
#: dead master's pipe open until it ends
_WRITE_ENDS: set[int] = set()
_WRITE_ENDS_LOCK = threading.Lock()


def _close_write_ends_in_child() -> None:
    for fd in list(_WRITE_ENDS):
        try:
            os.close(fd)
        except OSError:
            pass
    _WRITE_ENDS.clear()


os.register_at_fork(after_in_child=_close_write_ends_in_child)


class SessionGuard:
    """The master's end of a guard process (see the module docstring).
    :meth:`start` starts it; :meth:`tell` reports the current session
    (from any thread; a session already told is not sent again); :meth:`bye`
    says the master stops cleanly and reaps the guard. If the guard is gone,
    a warning says so once and the session timeout decides, as without one."""

    def __init__(self, hosts: str, session_timeout: float, auth: tuple[str, str] | None = None) -> None:
        self._hosts = hosts
        self._timeout = session_timeout
        self._auth = auth
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._proc: subprocess.Popen | None = None
        self._told: int | None = None

    @property
    def pid(self) -> int | None:
        """The guard process's pid (None before start)."""
        return None if self._proc is None else self._proc.pid

    def start(self) -> None:
        read_end, write_end = os.pipe()     # both close-on-exec: only pass_fds hands the read end over
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        if os.path.basename(package_root) not in ("site-packages", "dist-packages"):
            # run from a checkout: the guard runs this very code (an installed one finds itself; its
            # site-packages ahead of the standard library could shadow it)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "mesoslike.ha.session_guard", "--fd", str(read_end),
                 "--master-pid", str(os.getpid())],
                pass_fds=(read_end,), start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, env=env)
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        os.set_blocking(write_end, False)   # the kazoo thread that tells it must never block on it
        with _WRITE_ENDS_LOCK:
            _WRITE_ENDS.add(write_end)
        self._fd = write_end
        log.debug("session guard started (pid %d)", self._proc.pid)

    def tell(self, client_id: tuple[int, bytes] | None) -> None:
        """Report kazoo's ``client.client_id`` (ignored when None or told already)."""
        if client_id is None:
            return
        session_id, password = client_id
        with self._lock:
            if self._fd is None or session_id == self._told:
                return
            self._told = session_id
            try:
                record = encode_session(SessionRecord(hosts=self._hosts, session_id=session_id, password=password,
                                                      timeout=self._timeout, auth=self._auth))
            except ValueError as exc:   # hosts or credentials beyond the record's bounds
                log.warning("the ZooKeeper session guard cannot be told this session (%s): if this master dies, "
                            "its session ends only at the session timeout", exc)
                return
            self._write(record)

    def bye(self) -> None:
        """The master stops cleanly: tell the guard, which exits without
        touching ZooKeeper, and reap it."""
        with self._lock:
            if self._fd is not None:
                self._write(encode_bye())
                self._close_fd()
        if self._proc is not None:
            try:
                self._proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:   # it exits on its own (end of file); init reaps it
                log.debug("the session guard (pid %d) had not exited 2 s after bye", self._proc.pid)

    def _write(self, record: bytes) -> None:
        assert self._fd is not None
        try:
            written = os.write(self._fd, record)   # < PIPE_BUF: all or nothing
        except OSError as exc:   # EPIPE: the guard died; EAGAIN: it stopped reading
            log.warning("the ZooKeeper session guard cannot be told (%s): if this master dies, its session "
                        "ends only at the session timeout", exc.strerror or exc)
            self._close_fd()
            return
        assert written == len(record)

    def _close_fd(self) -> None:
        assert self._fd is not None
        with _WRITE_ENDS_LOCK:
            _WRITE_ENDS.discard(self._fd)
        os.close(self._fd)
        self._fd = None


# ----------------------------------------------------------------- the guard
def close_session(record: SessionRecord) -> str:
    """Attach to ``record``'s session and close it; what happened, in words.
    Within ~``record.timeout`` seconds (kazoo's close waits for the answer)."""
    from kazoo.client import KazooClient, KazooState
    from kazoo.handlers.threading import KazooTimeoutError
    from kazoo.retry import KazooRetry

    expired = threading.Event()
    quiet = logging.getLogger("mesoslike.ha.session_guard.kazoo")
    quiet.setLevel(logging.ERROR)   # kazoo warns at every expired or refused attempt
    client = KazooClient(hosts=record.hosts, client_id=(record.session_id, record.password),
                         timeout=record.timeout, logger=quiet,
                         connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
                         auth_data=[("digest", ":".join(record.auth))] if record.auth else None)
    # LOST: the server said the session had expired (kazoo then makes a new one, closed here too)
    client.add_listener(lambda state: expired.set() if state == KazooState.LOST else None)
    try:
        client.start(timeout=record.timeout)
    except KazooTimeoutError:
        outcome = f"ZooKeeper did not answer within {record.timeout:g} s; the session expires on its own"
    else:
        client_id = client.client_id
        if expired.is_set() or client_id is None or client_id[0] != record.session_id:
            outcome = "the session had expired already"
        else:
            outcome = "closed"
    finally:
        try:
            client.stop()
            client.close()
        except Exception as exc:   # the session ends anyway: at the timeout
            log.debug("closing the client: %r", exc)
    return outcome


def _parent_is(pid: int) -> bool:
    return os.getppid() == pid


def watch(fd: int, master_pid: int, parent_check: float = _PARENT_CHECK) -> SessionRecord | None:
    """Read the master's records until it says bye (None) or dies: the last
    session it told (None if none). Death is the pipe's end of file, or this
    process no longer being the master's child (reparented: the master is
    gone, though a forked descendant of its may still hold the pipe)."""
    reader = RecordReader()
    last: SessionRecord | None = None
    while True:
        ready, _, _ = select.select([fd], [], [], parent_check)
        if not ready:
            if not _parent_is(master_pid):
                return last
            continue
        data = os.read(fd, 65536)
        if not data:
            return last
        for record in reader.feed(data):
            if isinstance(record, Bye):
                return None
            if isinstance(record, Malformed):
                log.warning("session guard: ignoring input from the master: %s", record.reason)
            else:
                last = record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mesoslike.ha.session_guard",
                                     description="Close a dead master's ZooKeeper session (docs/ha.rst).")
    parser.add_argument("--fd", type=int, required=True, help="the read end of the master's pipe")
    parser.add_argument("--master-pid", type=int, required=True, help="the master's pid (this process's parent)")
    args = parser.parse_args(argv)
    # Ctrl-C is the master's (it stops cleanly and says bye); SIGTERM only wakes the loop, which ends the
    # guard's watch if the master is gone and otherwise waits for the master's end
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: None)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    record = watch(args.fd, args.master_pid)
    if record is None:
        return 0
    started = time.monotonic()
    outcome = close_session(record)
    log.warning("session guard: the master (pid %d) is gone; its ZooKeeper session 0x%x: %s (%.2f s)",
                args.master_pid, record.session_id, outcome, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
