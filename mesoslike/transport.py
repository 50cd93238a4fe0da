"""ZeroMQ at the edge: the only module that uses ``zmq``.

A server binds one ROUTER socket; clients connect DEALER sockets to it. Each
frame carries one message, encoded by the endpoint's *codec* (any object
with ``encode``, ``decode``, ``error`` and ``max_message_size``, see
:class:`MessageCodec`; by default the master protocol's,
:data:`mesoslike.wire.CODEC` — the bundled Fuxi scheduler passes its own).
The ROUTER sees every peer under the identity ZeroMQ gives its connection;
that identity is how a server answers it.

Sockets are not thread-safe: a :class:`Server` or :class:`Client` belongs to
the thread that polls it. Other threads hand work over through a
:class:`Waker`, which makes that thread's poll return. :class:`Poller` (and
:func:`poll`) wait on several sockets and wakers at once.

Nothing is dropped silently (docs/reliability.rst). A frame ZeroMQ cannot
take now — the peer's send high-water mark is reached because the peer reads
slower than we write — waits in the endpoint's *outbox* (per peer on a
server, so one slow peer holds up no other), in order, and leaves as soon as
the socket takes it: every send, :meth:`~_Endpoint.wait` and
:meth:`Poller.poll` drain what they can. The outbox is bounded (bytes per
peer and in all); a frame beyond the bound, or for a peer that is gone, is
dropped, logged and counted in :class:`DeliveryStats`, which the master
exports in ``/metrics``.

Authentication (docs/security.rst). A server given its CURVE keys
(:class:`CurveKeys`) and an :class:`Authenticator` encrypts every connection
and lets in only peers whose public key the authenticator knows; the one ZAP
handler of the process (:class:`_ZapHandler`, a thread) asks it. The
*principal* a key stands for travels with each frame (ZeroMQ's ``User-Id``)
and :meth:`Server.principal` gives it for a peer: it comes from the key,
never from a message. A client given the server's public key talks to that
server only: a server without the matching secret key fails the handshake.
Certificates are pyzmq's ``zmq.auth`` files (:func:`new_certificate`,
:func:`load_certificate`, :func:`load_public_key`).
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import select
import sys
import threading
import time
import weakref
from collections import OrderedDict, deque
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Self, Union

import zmq
from zmq.utils import z85

from mesoslike import handshake_watch
from mesoslike.errors import ConfigError
from mesoslike.secret_files import check_secret_file_mode

# the public API a framework may use (pinned by tests/test_layering.py); an
# endpoint's ``stats`` (a DeliveryStats) and ``queued`` come with Server and Client
__all__ = ["Server", "Client", "Waker", "Readable", "Poller", "poll", "idle", "parse_tcp_address", "allow_sockets",
           "MessageCodec", "Received", "DEFAULT_LISTEN_BACKLOG", "CurveKeys", "Authenticator",
           "new_certificate", "load_certificate", "load_public_key", "check_secret_file_mode",
           "flush_before_exit", "small_frames_only"]


class _LazyLog:
    """``logging.getLogger("mesoslike.transport")``, imported at its first
    use: ``logging`` brings in ``re``, ``traceback``, ``tokenize``... and a
    Fuxi worker — 16 start for a job of 16 slots — imports this module but
    logs nothing through it unless something goes wrong
    (docs/performance.rst, "Stop 12: the Fuxi path, pipelined (fuxi29f)").
    What goes wrong may be the process's descriptors, all used: then
    ``logging`` cannot be read from the disk, and the line goes to stderr
    as it is (``ERROR mesoslike.transport: ...``), to be imported at the
    next line."""

    _logger: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._logger is None:
            try:
                import logging
            except (ImportError, OSError):
                return functools.partial(_to_stderr, name)
            self._logger = logging.getLogger("mesoslike.transport")
        return getattr(self._logger, name)


def _to_stderr(level: str, message: str, *args: object, **_: object) -> None:
    """A log line of the transport's written without ``logging`` (which could not be imported)."""
    try:
        sys.stderr.write(f"{level.upper()} mesoslike.transport: {message % args if args else message}\n")
    except (OSError, ValueError, TypeError):
        pass


log: Any = _LazyLog() if "logging" not in sys.modules else sys.modules["logging"].getLogger("mesoslike.transport")

#: The listen backlog of a server. ZeroMQ's default (100) drops most of the
#: connections of thousands of agents reconnecting at once after a failover,
#: and the kernel makes each dropped SYN wait 1, 3, 7, 15... s to retry
#: (docs/failover.rst). The kernel caps it at ``net.core.somaxconn``.
DEFAULT_LISTEN_BACKLOG = 4096

#: frames ZeroMQ queues per peer before a send would block (its default
#: is 1,000); what does not fit waits in the endpoint's outbox
SEND_HIGH_WATER_MARK = 10_000
#: the most bytes waiting in an outbox for one peer: 64 MiB (eight largest
#: master frames, or ~250,000 status updates)
DEFAULT_MAX_QUEUED_BYTES_PER_PEER = 64 * 1024 * 1024
#: the most bytes waiting in a server's outbox for all its peers together
DEFAULT_MAX_QUEUED_BYTES = 512 * 1024 * 1024
#: while frames wait in an outbox, a wait looks again after this long,
#: doubling to _RETRY_MAX while the socket takes nothing (seconds)
#: flags as plain ints: pyzmq's enum arithmetic costs a few µs a call on the hot path
#: frames up to this size are copied into ZeroMQ when sent, larger ones handed over without a copy.
#: pyzmq's own threshold (64 KiB) is below a batch of a few hundred updates (~300 B an item): a frame
#: handed over uncopied is released by pyzmq's garbage-collector thread — a message on an inproc
#: socket and a GIL hand-off per frame, 2-7 % of each control-plane peer's samples. CPU a frame sent
#: and received over TCP on 127.0.0.1 (pyzmq 27): 70 kB 110 us uncopied / 66 us copied, 256 kB
#: 173 / 127, 1 MB 350 / 305, 4 MB 1,690 / 3,124 — copying wins up to about 1 MiB
COPY_THRESHOLD = 1024 * 1024
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)
_RETRY_MIN = 0.001
_RETRY_MAX = 0.05

#: (peer identity or None for a client, the message — of whatever class the
#: codec decoded — or the codec's error for a bad frame)
Received = tuple[bytes | None, Any]


class MessageCodec(Protocol):
    """What an endpoint needs of a codec (:class:`mesoslike.wire.Codec` is one)."""

    @property
    def error(self) -> type[Exception]:
        """What ``decode`` and ``encode`` raise; made with one message argument."""

    @property
    def max_message_size(self) -> int:
        """The largest frame, in bytes, either way."""

    def encode(self, message: object) -> bytes:
        """The frame of ``message``."""

    def decode(self, frame: bytes) -> object:
        """The message in ``frame``."""


def parse_tcp_address(address: str) -> tuple[str, int]:
    """``tcp://host:port`` -> (host, port); raises ConfigError with the reason."""
    if not isinstance(address, str) or not address.startswith("tcp://"):
        raise ConfigError(f"bad address {address!r}: expected tcp://HOST:PORT")
    host, sep, port = address[len("tcp://"):].rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"bad address {address!r}: expected tcp://HOST:PORT with a port 0-65535")
    return host, int(port)


#: the longest path of a Unix socket (sun_path holds 108 bytes with its NUL)
MAX_IPC_PATH = 107


def _ipc_path(address: str) -> str | None:
    """The path of an ``ipc://PATH`` address (an absolute path of at most
    :data:`MAX_IPC_PATH` bytes, no abstract ``@`` names); None for any other
    address. Raises ConfigError for a bad ipc one."""
    if not isinstance(address, str) or not address.startswith("ipc://"):
        return None
    path = address[len("ipc://"):]
    if not path.startswith("/") or len(path.encode()) > MAX_IPC_PATH or "\0" in path:
        raise ConfigError(f"bad address {address!r}: expected ipc:///ABSOLUTE/PATH of at most {MAX_IPC_PATH} bytes")
    return path


def _context() -> zmq.Context:
    return zmq.Context.instance()


#: contexts replaced by :func:`_new_context`, kept so that they are never terminated by the garbage collector
#: (pyzmq's finalizer would: that blocks for ever on a socket its owner left open)
_retired_contexts: list[zmq.Context] = []


def _new_context() -> None:
    """Endpoints made from now on share a new ZeroMQ context (and ZAP
    handler); earlier ones keep theirs, which is never terminated. For the
    test suite: one context per test module, so that what one module leaves
    behind cannot stop the sockets of the next."""
    if zmq.Context._instance is not None:
        _retired_contexts.append(zmq.Context._instance)
    zmq.Context._instance = None   # Context.instance() makes a new one
    _ZapHandler._instance = None   # the ZAP handler must live in its servers' context


def flush_before_exit(timeout: float) -> None:
    """Give what this process's endpoints still queue up to ``timeout``
    seconds to go out (each socket's linger, at most ``timeout``) by ending
    the ZeroMQ context, for a process about to leave with ``os._exit``.
    A plain exit does not wait either (pyzmq leaves its context alone at
    exit); endpoints must be closed first, or it waits the whole timeout."""
    context = zmq.Context._instance
    if context is None:
        return
    ending = threading.Thread(target=context.term, name="zmq-term", daemon=True)
    ending.start()
    ending.join(timeout)


def allow_sockets(count: int) -> None:
    """Let this process open up to ``count`` sockets (ZeroMQ's default is
    1,023; a process that plays thousands of agents needs more). Call it
    before the first socket is made."""
    _context().set(zmq.MAX_SOCKETS, count)


#: the longest poll ZeroMQ is asked for (ms): a day; longer timeouts are
#: polled again (a timeout of 1e308 s must not overflow)
_MAX_POLL_MILLIS = 86_400_000


#: frames (and other buffers) this large are mapped from the OS and given
#: back when freed (glibc's M_MMAP_THRESHOLD), instead of the default that
#: rises to the largest buffer freed so far and keeps later ones in the heap
LARGE_BUFFER = 128 * 1024
_M_MMAP_THRESHOLD = -3   # glibc's mallopt parameter
_large_buffers_returned = False


def _return_large_buffers_to_the_os() -> None:
    """Once per process, with glibc: a peer's burst of 1 MiB frames (the fuzz
    test sends ~150) otherwise left the master at 260 MB resident for good,
    its heap holding buffers long freed; with a fixed threshold it stays
    within 25 MB of where it started. Elsewhere (musl, macOS): nothing."""
    global _large_buffers_returned
    if _large_buffers_returned:
        return
    _large_buffers_returned = True
    import ctypes   # here: a process that takes no large frames (small_frames_only) never imports it (~1.4 ms)

    try:
        libc = ctypes.CDLL(None)   # the process's own symbols, the C library's among them (no ldconfig run)
        if hasattr(libc, "mallopt"):
            libc.mallopt(_M_MMAP_THRESHOLD, LARGE_BUFFER)
    except OSError:  # not glibc: its own policy stands
        pass


def small_frames_only() -> None:
    """Say, before this process's first endpoint, that its peers send it
    small frames only (a Fuxi worker: its AppMaster's ``ASSIGN``, ``ACK``,
    ``WELCOME``): glibc's allocator keeps its default threshold, and the
    ``ctypes`` import and ``mallopt`` call that set it (~1.5-2 ms of a
    worker's start, 16 at once for a job of 16 slots) are skipped. Frames
    up to the codec's limit are still taken; a burst of large ones may then
    leave the heap high, as it would without glibc."""
    global _large_buffers_returned
    _large_buffers_returned = True


def _millis(timeout: float | None) -> int | None:
    if timeout is None:
        return None
    if not timeout > 0:  # 0, negative, NaN
        return 0
    return int(min(timeout * 1000, _MAX_POLL_MILLIS))


# ------------------------------------------------------------ authentication
#: ZeroMQ CURVE keys in z85 are 40 characters
_Z85_KEY_LENGTH = 40


class CurveKeys:
    """A CURVE key pair (z85), as a peer proves who it is: ``public`` is
    what others list, ``secret`` stays with its owner. Its repr hides the
    secret. Immutable, equal by value.

    A plain class, not attrs: this module is every process's first import
    (a Fuxi job starts a worker per slot at once), and attrs was a third of
    its import time."""

    __slots__ = ("public", "secret")
    public: bytes
    secret: bytes

    def __init__(self, public: bytes, secret: bytes) -> None:
        object.__setattr__(self, "public", public)
        object.__setattr__(self, "secret", secret)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"CurveKeys is immutable: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"CurveKeys is immutable: cannot delete {name}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, CurveKeys)
        return (self.public, self.secret) == (other.public, other.secret)

    def __hash__(self) -> int:
        return hash((self.public, self.secret))

    def __repr__(self) -> str:
        return f"CurveKeys(public={self.public!r})"

    @classmethod
    def generate(cls) -> CurveKeys:
        """A fresh pair (e.g. for a client that only wants an encrypted
        connection to a server it knows)."""
        public, secret = zmq.curve_keypair()
        return cls(public, secret)

    @classmethod
    def load(cls, path: str) -> CurveKeys:
        """The pair in the secret certificate ``path`` (``NAME.key_secret``),
        which must be mode 0600. Raises ConfigError naming the file."""
        check_secret_file_mode(path)
        public, secret = load_certificate(path)
        if secret is None:
            raise ConfigError(f"{path} holds no secret key: give the NAME.key_secret file")
        return cls(public, secret)


def new_certificate(directory: str, name: str) -> tuple[str, str]:
    """Write a CURVE certificate pair in pyzmq's ``zmq.auth`` format:
    ``DIRECTORY/NAME.key`` (public, mode 0644) and ``DIRECTORY/NAME.key_secret``
    (secret, mode 0600 from the moment it exists: written in a private
    directory first). Refuses to overwrite. Returns (public path, secret path)."""
    if not name or os.sep in name or name.startswith("."):
        raise ConfigError(f"bad key name {name!r}: a file name without '/' and not starting with '.'")
    os.makedirs(directory, exist_ok=True)
    public_path = os.path.join(directory, f"{name}.key")
    secret_path = os.path.join(directory, f"{name}.key_secret")
    for path in (public_path, secret_path):
        if os.path.exists(path):
            raise ConfigError(f"{path} exists: not overwritten (remove it first, or pick another name)")
    import tempfile   # here, as zmq.auth below: a process that only connects (a Fuxi worker) never needs them

    import zmq.auth

    scratch = tempfile.mkdtemp(prefix=f".{name}-", dir=directory)  # mode 0700: nobody else sees the secret
    try:
        made_public, made_secret = zmq.auth.create_certificates(scratch, name)
        os.chmod(made_secret, 0o600)
        os.chmod(made_public, 0o644)
        os.replace(made_secret, secret_path)
        os.replace(made_public, public_path)
    finally:
        for leftover in os.listdir(scratch):
            os.unlink(os.path.join(scratch, leftover))
        os.rmdir(scratch)
    return public_path, secret_path


def load_certificate(path: str) -> tuple[bytes, bytes | None]:
    """(public key, secret key or None) of a ``zmq.auth`` certificate file;
    ConfigError naming the file if it is not one."""
    import zmq.auth   # on first use (new_certificate says why)

    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the certificate {path}: {exc}") from None
    if len(public) != _Z85_KEY_LENGTH or (secret is not None and len(secret) != _Z85_KEY_LENGTH):
        raise ConfigError(f"{path} is not a CURVE certificate (keys are 40 z85 characters)")
    return public, secret


def load_public_key(key: str, base: str = ".") -> bytes:
    """A public key given as its 40 z85 characters, or as the path of a
    certificate (relative to ``base``) holding it."""
    if len(key) == _Z85_KEY_LENGTH and not os.path.exists(os.path.join(base, key)):
        try:
            if len(z85.decode(key.encode())) == 32:
                return key.encode()
        except (ValueError, KeyError, UnicodeEncodeError, TypeError):
            pass
    return load_certificate(os.path.join(base, key))[0]


class Authenticator:
    """Who may connect to a server, and as whom: public key (z85) -> the
    principal it stands for. ``principals`` may be a mapping, or a callable
    for keys that change (return None to refuse). ``allow_any``: every key
    is let in, as the principal ``key:<z85>`` (encryption without a list of
    peers). Thread-safe: the ZAP thread asks it."""

    def __init__(self, principals: Mapping[bytes, str] | Callable[[bytes], str | None] | None = None, *,
                 allow_any: bool = False) -> None:
        if principals is None and not allow_any:
            raise ConfigError("an Authenticator needs principals, or allow_any=True")
        self._principals = principals
        self._allow_any = allow_any
        #: connections refused and admitted (read by /metrics)
        self.refused = 0
        self.admitted = 0

    def principal(self, public_key: bytes) -> str | None:
        """The principal of ``public_key`` (z85), None if it may not connect."""
        principals = self._principals
        found = principals(public_key) if callable(principals) else \
            principals.get(public_key) if principals is not None else None
        if found is None and self._allow_any:
            found = "key:" + public_key.decode()
        return found


class _ZapHandler:
    """The process's ZAP handler: ZeroMQ asks it over
    ``inproc://zeromq.zap.01`` whether a peer may complete a handshake with
    a server; it answers from the :class:`Authenticator` of the server's ZAP
    domain. One thread, started with the first secured server, for the life
    of the process (ZeroMQ allows one ZAP handler per context)."""

    _instance: _ZapHandler | None = None
    _instance_lock = threading.Lock()

    def __init__(self) -> None:
        self._domains: dict[bytes, Authenticator] = {}
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._socket = _context().socket(zmq.REP)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind("inproc://zeromq.zap.01")
        threading.Thread(target=self._serve, name="zap-handler", daemon=True).start()

    @classmethod
    def get(cls) -> _ZapHandler:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def add(self, authenticator: Authenticator) -> bytes:
        """A new ZAP domain answered by ``authenticator``."""
        with self._lock:
            domain = f"mesoslike-{next(self._numbers)}".encode()
            self._domains[domain] = authenticator
        return domain

    def remove(self, domain: bytes) -> None:
        with self._lock:
            self._domains.pop(domain, None)

    def _serve(self) -> None:
        while True:
            try:
                request = self._socket.recv_multipart()
            except zmq.ZMQError:  # the context terminated: the process is ending
                return
            try:
                reply = self._answer(request)
            except Exception:  # a bug must not leave ZeroMQ waiting: refuse
                log.exception("the ZAP handler failed")
                reply = [b"1.0", request[1] if len(request) > 1 else b"", b"500", b"internal error", b"", b""]
            self._socket.send_multipart(reply)

    def _answer(self, request: list[bytes]) -> list[bytes]:
        version, request_id, domain, address, _identity, mechanism = request[:6]
        with self._lock:
            authenticator = self._domains.get(domain)
        principal = None
        if authenticator is not None and mechanism == b"CURVE" and len(request) == 7:
            key = z85.encode(request[6])
            principal = authenticator.principal(key)
            if principal is None:
                authenticator.refused += 1
                log.warning("refused a connection from %s: key %s is not listed", address.decode(errors="replace"),
                            key.decode())
            else:
                authenticator.admitted += 1
        if principal is None:
            return [version, request_id, b"400", b"key not allowed", b"", b""]
        return [version, request_id, b"200", b"OK", principal.encode(), b""]


class DeliveryStats:
    """What an endpoint did with the frames it was given to send. Counters
    only grow; ``queued``/``queued_bytes`` are what waits now. (A plain
    class with slots, not attrs: see :class:`CurveKeys`.)

    ``sent``: frames handed to ZeroMQ. ``deferred``: frames that had to
    wait in the outbox (the peer read slower than we wrote).
    ``unroutable``: frames dropped because their peer is gone (a server's
    answer to a closed connection; the protocol's retries and timeouts
    cover them). ``overflowed``: frames dropped because the outbox was full
    (a peer that does not read). ``unsent_at_close``: frames still in the
    outbox when the endpoint closed. ``reconnects``: a client's connection
    made anew after it dropped. ``handshakes_failed``: a client's
    handshakes that failed, for whatever reason (refused, or cut by a
    server going down). ``handshakes_refused``: those of them that were a
    definite refusal (the server refused its key or its mechanism, or is
    not the server whose key it was given: see :meth:`Client._watch`); a
    client waiting for an answer gives up on these only.
    ``impersonations``: frames a server
    dropped because they came under a peer identity another principal holds
    (a connection taking over someone's identity). ``queued``,
    ``queued_bytes``, ``peak_queued``: frames and bytes waiting in the
    outbox now, and the most frames ever."""

    FIELDS = ("sent", "deferred", "unroutable", "overflowed", "unsent_at_close", "reconnects",
              "handshakes_failed", "handshakes_refused", "impersonations", "queued", "queued_bytes", "peak_queued")
    __slots__ = FIELDS

    sent: int
    deferred: int
    unroutable: int
    overflowed: int
    unsent_at_close: int
    reconnects: int
    handshakes_failed: int
    handshakes_refused: int
    impersonations: int
    queued: int
    queued_bytes: int
    peak_queued: int

    def __init__(self, **counts: int) -> None:
        unknown = set(counts) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"DeliveryStats has no {', '.join(sorted(unknown))}")
        for name in self.FIELDS:
            setattr(self, name, counts.get(name, 0))

    def as_dict(self) -> dict[str, int]:
        """Every counter by its name (ints only: safe to read from another
        thread than the endpoint's)."""
        return {name: getattr(self, name) for name in self.FIELDS}

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, DeliveryStats)
        return self.as_dict() == other.as_dict()

    __hash__ = None   # type: ignore[assignment]   # mutable counters

    def __repr__(self) -> str:
        return "DeliveryStats(" + ", ".join(f"{name}={value}" for name, value in self.as_dict().items()) + ")"

    @property
    def dropped(self) -> int:
        return self.unroutable + self.overflowed + self.unsent_at_close


class _Backlog:
    """One peer's frames waiting for the socket, oldest first."""

    __slots__ = ("frames", "bytes", "warned")

    def __init__(self) -> None:
        self.frames: deque[bytes] = deque()
        self.bytes = 0
        self.warned = False   # an overflow was logged since the peer last caught up


class _Endpoint:
    """A socket, the codec of what it carries, and its outbox."""

    def __init__(self, kind: int, codec: MessageCodec | None, max_queued_bytes_per_peer: int,
                 max_queued_bytes: int) -> None:
        for name, value in (("max_queued_bytes_per_peer", max_queued_bytes_per_peer),
                            ("max_queued_bytes", max_queued_bytes)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"bad {name} {value!r}: expected an integer >= 0")
        _return_large_buffers_to_the_os()
        if codec is None:   # the master protocol's, imported here: a process speaking another protocol never needs it
            from mesoslike.wire import codec as master_codec
            codec = master_codec.CODEC
        self.codec: MessageCodec = codec
        self.stats = DeliveryStats()
        self._max_peer_bytes = max_queued_bytes_per_peer
        self._max_bytes = max_queued_bytes
        #: peer (b"" for a client's one server) -> its waiting frames; only peers with some
        self._backlogs: dict[bytes, _Backlog] = {}
        self._socket = self._new_socket(kind)
        self._closed = False

    def _new_socket(self, kind: int) -> zmq.Socket:
        socket = _context().socket(kind)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, self.codec.max_message_size)
        socket.setsockopt(zmq.SNDHWM, SEND_HIGH_WATER_MARK)
        socket.copy_threshold = COPY_THRESHOLD
        return socket

    # --------------------------------------------------------------- sending
    def _push(self, peer: bytes, frame: bytes) -> bool | None:
        """Hand one frame to ZeroMQ without blocking: True if it took it,
        False if it cannot now (full), None if the peer is gone."""
        raise NotImplementedError

    def _send_or_queue(self, peer: bytes, frame: bytes) -> bool:
        """Send ``frame`` to ``peer`` after what waits for it already, or
        queue it; False (counted, logged) if it had to be dropped."""
        backlog = self._backlogs.get(peer)
        if backlog is not None:
            self._drain(peer, backlog)
            backlog = self._backlogs.get(peer)
        if backlog is None:
            pushed = self._push(peer, frame)
            if pushed:
                self.stats.sent += 1
                return True
            if pushed is None:
                self.stats.unroutable += 1
                log.debug("a frame to %r dropped: the peer is gone", peer)
                return False
            backlog = self._backlogs[peer] = _Backlog()
        if backlog.bytes + len(frame) > self._max_peer_bytes or \
                self.stats.queued_bytes + len(frame) > self._max_bytes:
            self.stats.overflowed += 1
            if not backlog.warned:
                backlog.warned = True
                log.error("the outbox to %r is full (%d frames, %d bytes waiting; %d bytes in all): dropping "
                          "frames to it until it reads", peer, len(backlog.frames), backlog.bytes,
                          self.stats.queued_bytes)
            if not backlog.frames:
                del self._backlogs[peer]
            return False
        backlog.frames.append(frame)
        backlog.bytes += len(frame)
        self.stats.deferred += 1
        self.stats.queued += 1
        self.stats.queued_bytes += len(frame)
        self.stats.peak_queued = max(self.stats.peak_queued, self.stats.queued)
        return True

    def _drain(self, peer: bytes, backlog: _Backlog) -> None:
        """Send what waits for ``peer`` until the socket is full."""
        frames = backlog.frames
        while frames:
            pushed = self._push(peer, frames[0])
            if pushed is False:
                break
            frame = frames.popleft()
            backlog.bytes -= len(frame)
            self.stats.queued -= 1
            self.stats.queued_bytes -= len(frame)
            if pushed:
                self.stats.sent += 1
            else:  # gone while its frames waited
                self.stats.unroutable += 1
        if not frames:
            del self._backlogs[peer]
            if backlog.warned:
                log.warning("the outbox to %r is empty again", peer)

    def _close_extras(self) -> None:
        """What a subclass holds besides the socket (a client's monitor)."""

    def flush(self) -> int:
        """Send what waits in the outbox, as far as the socket takes it; the
        number of frames still waiting. O(peers waiting + frames sent)."""
        if self._closed:
            return 0
        for peer, backlog in list(self._backlogs.items()):
            self._drain(peer, backlog)
        return self.stats.queued

    @property
    def queued(self) -> int:
        """Frames waiting in the outbox."""
        return self.stats.queued

    # --------------------------------------------------------------- waiting
    def wait(self, timeout: float | None, waker: Waker | None = None) -> bool:
        """Block until a frame is readable (True), the waker fires, or the
        timeout (seconds; None = forever) passes — sending what waits in the
        outbox meanwhile."""
        return self in poll([self] if waker is None else [self, waker], timeout)

    def decode(self, frame: bytes) -> object:
        """The message in ``frame``, or the codec's error that it is not one."""
        try:
            return self.codec.decode(frame)
        except self.codec.error as exc:
            return exc

    def close(self, linger: float = 0.0) -> None:
        """Close the socket; messages still queued get ``linger`` seconds to
        leave (0: dropped now). What is still in the outbox then (more than
        ZeroMQ's high-water mark) is counted and logged. Idempotent."""
        if not self._closed:
            self._close_extras()
            if linger > 0:
                self.flush()
            if self.stats.queued:
                self.stats.unsent_at_close += self.stats.queued
                log.warning("closing with %d frames not sent (%d bytes)", self.stats.queued, self.stats.queued_bytes)
                self._backlogs.clear()
                self.stats.queued = self.stats.queued_bytes = 0
            self._closed = True
            self._socket.close(linger=_millis(linger))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: peers whose principal a server remembers (the least recently heard are forgotten first)
_PRINCIPALS_KEPT = 100_000


class Server(_Endpoint):
    """A ROUTER socket bound to ``tcp://host:port`` (port 0 = any free port) or ``ipc:///path`` (a Unix socket),
    listening with a backlog of ``backlog`` pending connections, carrying
    messages of ``codec``.

    With ``keys`` (its CURVE pair) and ``authenticator`` every connection is
    encrypted and only peers the authenticator knows complete the handshake;
    :meth:`principal` names the principal of a peer. A frame arriving under a
    peer identity that another principal used before is dropped (counted in
    ``stats.impersonations``)."""

    def __init__(self, address: str, *, codec: MessageCodec | None = None,
                 backlog: int = DEFAULT_LISTEN_BACKLOG,
                 max_queued_bytes_per_peer: int = DEFAULT_MAX_QUEUED_BYTES_PER_PEER,
                 max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
                 keys: CurveKeys | None = None, authenticator: Authenticator | None = None) -> None:
        ipc = _ipc_path(address)   # a Unix socket (the agent's executor channel), else tcp://HOST:PORT
        host, port = ("", 0) if ipc is not None else parse_tcp_address(address)
        if not isinstance(backlog, int) or isinstance(backlog, bool) or backlog < 1:
            raise ConfigError(f"bad listen backlog {backlog!r}: expected an integer >= 1")
        if (keys is None) != (authenticator is None):
            raise ConfigError("a secured server needs both its keys and an authenticator")
        super().__init__(zmq.ROUTER, codec, max_queued_bytes_per_peer, max_queued_bytes)
        self.authenticator = authenticator
        self._zap_domain: bytes | None = None
        #: peer identity -> the principal whose frames came under it (secured servers only)
        self._principals: OrderedDict[bytes, str] = OrderedDict()
        if keys is not None and authenticator is not None:
            self._zap_domain = _ZapHandler.get().add(authenticator)
            self._socket.setsockopt(zmq.ZAP_DOMAIN, self._zap_domain)
            self._socket.setsockopt(zmq.CURVE_SERVER, 1)
            self._socket.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
            self._socket.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
        self._socket.setsockopt(zmq.BACKLOG, backlog)
        # a send that cannot go out says so (EAGAIN: the peer's queue is
        # full; EHOSTUNREACH: the peer is gone) instead of ZeroMQ dropping it
        # without a word: the first goes to the outbox, the second is counted
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # a client that makes its connection anew (Client._reconnect) keeps
        # its identity: the new connection takes over at once
        self._socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        try:
            if ipc is not None:
                self._socket.bind(address)
            elif port == 0:
                port = self._socket.bind_to_random_port(f"tcp://{host}")
            else:
                self._socket.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError as exc:
            self.close()
            raise ConfigError(f"cannot bind {address}: {exc}") from None
        self.address = address if ipc is not None else f"tcp://{host}:{port}"

    @property
    def secured(self) -> bool:
        """Whether peers must authenticate (CURVE with a listed key)."""
        return self._zap_domain is not None

    def principal(self, peer: bytes) -> str | None:
        """The principal whose key ``peer``'s frames came with (None on a
        server that is not secured, or for a peer not heard from). O(1)."""
        return self._principals.get(peer)

    def _close_extras(self) -> None:
        if self._zap_domain is not None:
            _ZapHandler.get().remove(self._zap_domain)

    @property
    def backlog(self) -> int:
        """The listen backlog the socket was given."""
        return int(self._socket.getsockopt(zmq.BACKLOG))

    def send(self, peer: bytes, message: object) -> bool:
        """Encode ``message`` and send it to ``peer``, or queue it in the
        outbox while the peer's queue is full. False if it was dropped (the
        peer is gone, or its outbox is full: counted in :attr:`stats`);
        raises the codec's error if it cannot be encoded."""
        return self.send_frame(peer, self.codec.encode(message))

    def send_frame(self, peer: bytes, frame: bytes) -> bool:
        """:meth:`send` with an encoded frame."""
        return self._send_or_queue(peer, frame)

    def _push(self, peer: bytes, frame: bytes) -> bool | None:
        try:
            # two sends, not send_multipart: the same message, ~6 µs less a frame (issue 14)
            self._socket.send(peer, _NOBLOCK_MORE)
            self._socket.send(frame, _NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                return None
            raise

    def receive(self) -> Iterator[Received]:
        """Every frame waiting now, decoded; a bad frame yields the codec's error."""
        for peer, frame in self.receive_frames():
            if isinstance(frame, Exception):
                yield peer, frame
            else:
                yield peer, self.decode(frame)

    def receive_frames(self) -> Iterator[tuple[bytes | None, bytes | Exception]]:
        """Every frame waiting now, not decoded (see :meth:`decode`), so a
        caller can recognise a frame it has seen before without paying for
        decoding it again. A message of the wrong shape yields the codec's error."""
        secured = self._zap_domain is not None
        socket = self._socket
        while True:
            # recv and RCVMORE, not recv_multipart: the same parts, ~8 µs less a frame (issue 14)
            try:
                if secured:   # the principal comes with the last part's metadata
                    frames = socket.recv_multipart(zmq.NOBLOCK, copy=False)
                    parts = [frame.bytes for frame in frames]
                else:
                    parts = [socket.recv(_NOBLOCK)]
                    while socket.getsockopt(_RCVMORE):
                        parts.append(socket.recv(_NOBLOCK))
            except zmq.Again:
                return
            if secured and parts and not self._same_principal(parts[0], str(frames[-1].get("User-Id"))):
                continue
            if len(parts) != 2:
                yield (parts[0] if parts else None), self.codec.error(f"expected one frame, got {len(parts) - 1}")
                continue
            yield parts[0], parts[1]

    def _same_principal(self, peer: bytes, principal: str) -> bool:
        """Remember ``peer``'s principal; False (counted, logged) if another
        principal's frames came under that identity before."""
        known = self._principals.get(peer)
        if known is None:
            self._principals[peer] = principal
            if len(self._principals) > _PRINCIPALS_KEPT:
                self._principals.popitem(last=False)
        elif known != principal:
            self.stats.impersonations += 1
            log.warning("dropped a frame of principal %s under the peer identity of %s", principal, known)
            return False
        self._principals.move_to_end(peer)
        return True


#: handshakes cut in a row that make a refusal (the rules: mesoslike.handshake_watch)
_HANDSHAKE_CUTS_REFUSED = handshake_watch.CUTS_REFUSED

#: bumped whenever a client makes its socket anew: pollers then register it again
_socket_generation = 0

#: numbers the monitors' inproc endpoints (pyzmq's default names them by file descriptor, which is reused)
_monitor_numbers = itertools.count(1)


def _monitor_socket(socket: zmq.Socket, events: int) -> zmq.Socket:
    """A PAIR socket receiving ``socket``'s monitor events, with no high-water
    mark. libzmq's I/O thread sends monitor events with a *blocking* send
    (libzmq issue 3575): once a monitor's queue holds its high-water mark
    (about 2,000 events — a connection dropping ten times a second fills it
    in minutes), the I/O thread stops for good, and with it every ZeroMQ
    socket of the process. The owner reads these events whenever it polls
    (:meth:`Client._watch`); a client that is not polled (a thread stuck in a
    callback, an endpoint its owner forgot to close) only holds its own events
    in memory, never the whole process. O(1)."""
    address = f"inproc://mesoslike-monitor-{os.getpid()}-{next(_monitor_numbers)}"
    # the reader is made first: a monitor started with no reader blocks the I/O thread at its first event,
    # so one that cannot be given its reader (the process's socket limit) is never started
    monitor = socket.context.socket(zmq.PAIR)
    try:
        monitor.setsockopt(zmq.RCVHWM, 0)   # before connecting: the pipe's limit is fixed when it is made
        monitor.setsockopt(zmq.LINGER, 0)
        socket.monitor(address, events)
        try:
            monitor.connect(address)
        except zmq.ZMQError:
            socket.disable_monitor()
            raise
    except zmq.ZMQError:
        monitor.close(linger=0)
        raise
    return monitor


class _MonitoredSocket:
    """A client's socket and the PAIR socket reading its monitor events,
    closed as one, in the one safe order: the monitor disabled first, then
    its reader, then the socket. libzmq's I/O thread sends monitor events
    with a blocking send (see :func:`_monitor_socket`), so a monitor whose
    reader is closed first blocks that thread — and with it every socket of
    the process — at the socket's next event (its connection dropping when
    the server goes). A :class:`Client` dropped without ``close()`` is
    closed this way by its finalizer; left to the garbage collector, the two
    sockets' own finalizers run in no set order (a test module that left its
    clients open stopped every ZeroMQ socket of the test process after it)."""

    __slots__ = ("socket", "monitor")

    def __init__(self, socket: zmq.Socket, monitor: zmq.Socket) -> None:
        self.socket = socket
        self.monitor = monitor

    def stop_monitor(self) -> None:
        if not self.socket.closed:
            self.socket.disable_monitor()
        self.monitor.close(linger=0)

    def close(self) -> None:
        self.stop_monitor()
        self.socket.close(linger=0)


#: seconds a client's TCP connect may take before it is given up and tried again (see Client)
CONNECT_TIMEOUT = 1.0


class Client(_Endpoint):
    """A DEALER socket connected to a server, carrying messages of
    ``codec``; reconnects by itself (every ``reconnect_min`` seconds, 0.1 by
    default, doubling to ``reconnect_max``). ``identity``: how the server sees it (default random).
    ``watch_connection``: count the connections made (:meth:`connections`).
    ``connect_timeout``: a TCP connect not answered in this many seconds is
    given up and tried again, so that a server cut off by a network
    partition is reached within about that long of the heal (the kernel's
    own SYN retries back off to 32 s).

    ZeroMQ reconnects after a network error, but never after a protocol
    error — a frame from the server over the codec's limit ends the
    connection for good, and one such frame left an agent deaf to its master
    (issue 12 §2). A monitor watches for the connection dropping; the client
    then makes its socket anew, with the same identity (what waited in the
    old socket's queue is lost; the protocol's retries cover it), and counts
    it in ``stats.reconnects``.

    A failed handshake is counted in ``stats.handshakes_failed``; one that
    is a refusal — the server's ZAP handler refused our key, a mechanism
    mismatch, or the third handshake in a row cut (what a server whose key
    is not ``server_key`` does; a server going down cuts one) — in
    ``stats.handshakes_refused`` too (docs/wire.rst, "Failed handshakes")."""

    def __init__(self, address: str, *, codec: MessageCodec | None = None, identity: bytes | None = None,
                 max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES_PER_PEER, watch_connection: bool = False,
                 reconnect_max: float = 2.0, keys: CurveKeys | None = None,
                 server_key: bytes | None = None, connect_timeout: float = CONNECT_TIMEOUT,
                 reconnect_min: float = 0.1) -> None:
        self._watch_connection = watch_connection
        self._reconnect_min_ms = max(1, int(reconnect_min * 1000))
        self._reconnect_max_ms = max(self._reconnect_min_ms, 100, int(reconnect_max * 1000))
        self._connect_timeout_ms = max(100, int(connect_timeout * 1000))
        self._connections_told = -1   # the first connection is one made
        if _ipc_path(address) is None:
            parse_tcp_address(address)
        if keys is not None and server_key is None:
            raise ConfigError("a client with keys needs the server's public key too")
        super().__init__(zmq.DEALER, codec, max_queued_bytes, max_queued_bytes)
        self.address = address
        self._identity = identity or os.urandom(8)
        #: with ``server_key``: CURVE, to that server only (a one-time pair if no ``keys``)
        self._keys = keys if keys is not None or server_key is None else CurveKeys.generate()
        self._anonymous = keys is None   # no key of our own (none, or a one-time pair)
        self._server_key = server_key
        #: what the monitor's events mean: the handshake's state, when to try a refused one again (_watch)
        self._handshake = handshake_watch.HandshakeWatch(self._reconnect_max_ms / 1000)
        #: how the last handshakes failed (see :func:`_handshake_failure`), for the log and tests
        self._handshake_failures: deque[str] = deque(maxlen=_HANDSHAKE_CUTS_REFUSED)
        #: frames the socket had taken in when it was made anew (_reconnect), for receive_frames: a server
        #: that sends its last frames and goes has them and the drop's event waiting together
        self._pending: list[bytes] = []
        self._monitor = self._connect()
        self._sockets = _MonitoredSocket(self._socket, self._monitor)
        #: closes the sockets in the safe order if this client is dropped unclosed (not at exit: the
        #: process's end takes the sockets with it)
        self._finalizer = weakref.finalize(self, self._sockets.close)
        self._finalizer.atexit = False

    def handshake_problem(self) -> str:
        """Why a failed handshake failed, as far as this side can tell: a
        client that sent no key of its own cannot have had it refused."""
        if self._server_key is None:
            return "the server requires keys (CURVE), and this client has none"
        if self._anonymous:
            return "the server takes listed keys only, and this client has no key of its own"
        return "it refused our key, or it is not the server whose key we were given"

    def _close_extras(self) -> None:
        self._finalizer.detach()   # close() closes the socket itself, with the linger asked for
        self._sockets.stop_monitor()

    def _connect(self) -> zmq.Socket:
        """Connect the socket; its monitor (reporting the connection dropping)."""
        self._socket.setsockopt(zmq.IDENTITY, self._identity)
        self._socket.setsockopt(zmq.RECONNECT_IVL, self._reconnect_min_ms)
        self._socket.setsockopt(zmq.RECONNECT_IVL_MAX, self._reconnect_max_ms)
        self._socket.setsockopt(zmq.CONNECT_TIMEOUT, self._connect_timeout_ms)
        if self._keys is not None and self._server_key is not None:
            self._socket.setsockopt(zmq.CURVE_SERVERKEY, self._server_key)
            self._socket.setsockopt(zmq.CURVE_PUBLICKEY, self._keys.public)
            self._socket.setsockopt(zmq.CURVE_SECRETKEY, self._keys.secret)
        monitor = _monitor_socket(self._socket, handshake_watch.WATCHED_EVENTS)
        self._socket.connect(self.address)
        return monitor

    def _watch(self) -> None:
        """Read the monitor's events; make the socket anew if the
        connection dropped, or if a refused handshake's pause is over
        (the rules: :mod:`mesoslike.handshake_watch`). O(events)."""
        handshake = self._handshake
        dropped = False
        while not self._closed and self._monitor.poll(0):
            try:
                event = _monitor_event(self._monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
            if event is None:
                continue
            verdict = handshake.event(event[0], time.monotonic())
            if verdict.failed:
                self.stats.handshakes_failed += 1
                self._handshake_failures.append(_handshake_failure(*event))
            if verdict is handshake_watch.FIRST_CUT:
                # ZeroMQ tries again by itself, on this socket (what waits in its queue goes out once a
                # handshake succeeds)
                log.warning("the handshake with %s was cut (%s): the server is going down, or refuses us; "
                            "trying again", self.address, self._handshake_failures[-1])
            elif verdict.refused:
                if verdict.tell:
                    log.error("the handshake with %s failed (%s): %s; trying again every %gs", self.address,
                              ", ".join(self._handshake_failures), self.handshake_problem(),
                              handshake.retry_after)
                self.stats.handshakes_refused += 1
            elif verdict is handshake_watch.SUCCEEDED_AFTER_FAILURE:
                log.warning("the handshake with %s succeeded after all", self.address)
                self.stats.reconnects += 1   # a connection made anew: the server may not know us
                self._handshake_failures.clear()
            elif verdict is handshake_watch.SUCCEEDED:
                self._handshake_failures.clear()
            dropped = dropped or verdict.renew
        if dropped:
            self._reconnect()
        elif not self._closed and handshake.retry_due(time.monotonic()):
            self._reconnect(counted=False)   # counted once its handshake succeeds

    def _reconnect(self, counted: bool = True) -> None:
        global _socket_generation
        old, old_monitor = self._socket, self._monitor
        try:
            self._socket = self._new_socket(zmq.DEALER)
            self._monitor = self._connect()
        except zmq.ZMQError as exc:
            # no new socket now (the process's file or socket limit): keep the old connection, try again
            # after the reconnect interval rather than let the caller's thread die of it
            if self._socket is not old:
                self._socket.close(linger=0)
            self._socket, self._monitor = old, old_monitor
            self._handshake.renew_failed(time.monotonic())
            log.error("cannot connect anew to %s (%s): keeping the old connection, trying again in %gs",
                      self.address, exc, self._reconnect_max_ms / 1000)
            return
        while True:   # what the old socket took in is the server's (at most its receive high-water mark)
            try:
                self._pending.append(old.recv(_NOBLOCK))
            except zmq.ZMQError:
                break
        _MonitoredSocket(old, old_monitor).close()
        self._sockets.socket, self._sockets.monitor = self._socket, self._monitor
        _socket_generation += 1
        if counted:
            self.stats.reconnects += 1
            log.warning("the connection to %s dropped: connecting anew", self.address)

    def reconnect(self) -> None:
        """Throw the connection away and connect anew, with the same identity
        (the server's ROUTER hands the identity over to the new connection):
        a fresh TCP connection, not the old one stalled in the kernel's
        retransmission backoff after a network partition (19-28 s once it
        heals). What waited to be sent in the old socket's queue is lost
        (what it had taken in is still read). Not counted in
        :meth:`connections`: the caller knows."""
        if not self._closed:
            self._reconnect(counted=False)

    def connections(self) -> int:
        """How many times the connection to the server was made since the
        last call (``watch_connection`` clients; 0 for others). One after
        the first means the server restarted, or the network broke and healed:
        the server may not know this client any more."""
        # a dropped connection is made anew with a new socket (see _watch): each counts
        self._watch()
        count = self.stats.reconnects - self._connections_told
        self._connections_told = self.stats.reconnects
        return count if self._watch_connection else 0

    def send(self, message: object) -> bool:
        """Encode and send a message, or queue it in the outbox while the
        socket's queue is full (the server reads slower than we write, or is
        away). False if it was dropped because the outbox is full too
        (counted in :attr:`stats`); raises the codec's error if it cannot be
        encoded."""
        return self.send_frame(self.codec.encode(message))

    def send_frame(self, frame: bytes) -> bool:
        """:meth:`send` with an encoded frame."""
        return self._send_or_queue(b"", frame)

    def _push(self, peer: bytes, frame: bytes) -> bool | None:
        try:
            self._socket.send(frame, _NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False

    def receive(self) -> Iterator[Received]:
        """Every frame waiting now, decoded; a bad frame yields the codec's error."""
        for _, frame in self.receive_frames():
            yield None, self.decode(frame)

    def receive_frames(self) -> Iterator[tuple[None, bytes]]:
        """Every frame waiting now, not decoded."""
        self._watch()
        if self._pending:   # the old socket's, before the new one's
            pending, self._pending = self._pending, []
            for frame in pending:
                yield None, frame
        while True:
            try:
                yield None, self._socket.recv(_NOBLOCK)
            except zmq.Again:
                return


def _monitor_event(frames: list[bytes]) -> tuple[int, int] | None:
    """The event and value of a ZeroMQ socket monitor's message (its first
    frame: a 16-bit event, a 32-bit value; its second, the endpoint), None for
    anything else. Read here, not with ``zmq.utils.monitor``, which imports
    asyncio: 0.04 s of CPU at the start of every process with a client."""
    return handshake_watch.monitor_event(frames[0]) if len(frames) == 2 else None


def _handshake_failure(kind: int, value: int) -> str:
    """A failed handshake's monitor event as ``AUTH 400`` (the ZAP status
    code), ``PROTOCOL ZMTP_MECHANISM_MISMATCH`` (ZeroMQ's protocol error) or
    ``NO_DETAIL ECONNRESET`` (the errno of the connection that closed)."""
    if kind == handshake_watch.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"AUTH {value}"
    if kind == handshake_watch.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        names = {getattr(zmq, name): name[len("PROTOCOL_ERROR_"):] for name in dir(zmq)
                 if name.startswith("PROTOCOL_ERROR_")}
        return f"PROTOCOL {names.get(value, hex(value))}"
    return f"NO_DETAIL {errno.errorcode.get(value, str(value))}"


class Waker:
    """Wakes a thread blocked in a poll: a pipe other threads write to."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def fileno(self) -> int:
        return self._read

    def wait(self, timeout: float) -> bool:
        """Block until woken (True) or ``timeout`` seconds pass (False)."""
        ready, _, _ = select.select([self._read], [], [], max(0.0, timeout))
        if ready:
            self.clear()
        return bool(ready)

    def wake(self) -> None:
        try:
            os.write(self._write, b"x")
        except BlockingIOError:
            pass  # already pending

    def clear(self) -> None:
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass


class Readable:
    """A file descriptor a poll also wakes for when it has data (a pipe or
    a Unix socket the caller reads itself, e.g. the agent's connection to
    its shared supervisor). Unlike a :class:`Waker` the poll neither reads
    nor clears it: the caller reads what it holds."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


#: what a poll waits on
Pollable = Union[_Endpoint, Waker, Readable]


class Poller:
    """Waits until any of several endpoints has a frame to read or any of
    several wakers fires. Registering is O(1); a poll is O(n) in what is
    registered (keep one Poller for many sockets rather than a new one per
    poll). A client's monitor is polled with it: a dropped connection is
    made anew (:class:`Client`) without the caller noticing."""

    def __init__(self, items: Iterable[Pollable] = ()) -> None:
        self._items: list[Pollable] = []
        self._poller = zmq.Poller()
        #: what is registered with ZeroMQ -> (its item, True for a client's monitor)
        self._keys: dict[object, tuple[Pollable, bool]] = {}
        self._generation = _socket_generation
        for item in items:
            self.register(item)

    @staticmethod
    def _item_keys(item: Pollable) -> list[tuple[object, bool]]:
        if isinstance(item, (Waker, Readable)):
            return [(item.fileno(), False)]
        if isinstance(item, Client):
            return [(item._socket, False), (item._monitor, True)]
        return [(item._socket, False)]

    def register(self, item: Pollable) -> None:
        self._items.append(item)
        for key, monitor in self._item_keys(item):
            self._poller.register(key, zmq.POLLIN)
            self._keys[key] = (item, monitor)

    def unregister(self, item: Pollable) -> None:
        self._items = [each for each in self._items if each is not item]
        for key, (owner, _) in list(self._keys.items()):
            if owner is item:
                self._poller.unregister(key)
                del self._keys[key]

    def _resync(self) -> None:
        """Register again after a client made its socket anew. O(items), rare."""
        self._generation = _socket_generation
        for key in self._keys:
            self._poller.unregister(key)
        self._keys.clear()
        items, self._items = self._items, []
        for item in items:
            self.register(item)

    def poll(self, timeout: float | None) -> list[Pollable]:
        """What is ready within ``timeout`` seconds (None = wait forever;
        empty if the time passed). A waker that fired is cleared. While an
        endpoint's outbox holds frames, they are sent as the socket takes
        them (looking again every millisecond, backing off to 50 ms while
        it takes nothing)."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        endpoints = [item for item in self._items if isinstance(item, _Endpoint)]
        retry, last_queued = _RETRY_MIN, None
        while True:
            if self._generation != _socket_generation:
                self._resync()
            queued = sum(endpoint.flush() for endpoint in endpoints)
            if last_queued is not None:   # back off while the sockets take nothing
                retry = _RETRY_MIN if queued < last_queued else min(retry * 2, _RETRY_MAX)
            last_queued = queued
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = left if not queued else retry if left is None else min(left, retry)
            kept = [item for item in endpoints if isinstance(item, Client) and item._pending]
            if kept:   # frames kept from a socket made anew are ready now
                step = 0.0
            ready: list[Pollable] = []
            for key, _ in self._poller.poll(_millis(step)):
                item, monitor = self._keys[key]
                if monitor:
                    assert isinstance(item, Client)
                    item._watch()
                else:
                    ready.append(item)
            ready += [item for item in endpoints
                      if isinstance(item, Client) and item._pending and item not in ready]
            # a poll woken only by a client's monitor (a handshake, a
            # reconnect) waits on for what is left of the timeout
            if ready or (deadline is not None and time.monotonic() >= deadline):
                break
        for item in ready:
            if isinstance(item, Waker):
                item.clear()
        return ready


def poll(items: Iterable[Pollable], timeout: float | None) -> list[Pollable]:
    """What of ``items`` is ready within ``timeout`` seconds (see :class:`Poller`)."""
    return Poller(items).poll(timeout)


def idle(waker: Waker, timeout: float | None, clear: bool = True) -> None:
    """Sleep until ``waker`` fires or ``timeout`` seconds pass (for a loop
    that has no socket at the moment, e.g. while no master leads). With
    ``clear=False`` a wake is left set, for the loop's next poll to see."""
    select.select([waker.fileno()], [], [], timeout)
    if clear:
        waker.clear()
