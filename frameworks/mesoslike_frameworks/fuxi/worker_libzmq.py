"""A worker's connection to its AppMaster on libzmq itself, through
``ctypes``: the worker's one edge, without pyzmq's Python layer.

A slot's worker starts for every slot of a job, 16 at once for a job of 16
slots; importing pyzmq — its enums of constants, ``platform``, ``pickle``,
``json``, ``random``, its sugar classes — and the transport over it was
half of a worker's ~60 ms of CPU to its ``HELLO`` (docs/performance.rst,
"Stop 20: the Fuxi workers' start (fuxi29r)"). The same libzmq (the one
pyzmq's extension links, found next to it on ``sys.path``; the system's
``libzmq.so.5`` else) does the same work here: a DEALER with the slot's
identity, the job's workers' CURVE pair and the AppMaster's public key (it
talks to that AppMaster only), the transport's reconnect intervals, connect
timeout, frame limit and send high-water mark.

What :class:`mesoslike.transport.Client` guarantees a worker is kept: a
socket monitor reports the connection dropping, and the socket is then
made anew with the same identity (ZeroMQ never reconnects after a protocol
error); a refused handshake — the AppMaster's ZAP refused the key, a
mechanism mismatch, or three handshakes in a row cut — is logged and tried
again with a new socket every ``reconnect_max`` (the transport's rules, from
the one place: :mod:`mesoslike.handshake_watch`); a frame over the limit is
never read. What differs: no outbox beyond ZeroMQ's queue (10,000 frames,
the transport's high-water mark; a worker says HELLO twice a second, so an
AppMaster away for its whole orphan timeout leaves 600), a frame that does
not fit is dropped and ``send`` says so; and what goes wrong is logged by the
worker's own log. Per message, ``ctypes`` costs ~3 µs more than pyzmq's
Cython (a send, a poll and a receive; ~0.4 ms is a worker's whole share of
an instance).
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
import time
#: typing.TYPE_CHECKING without importing typing (a worker's start: fuxi/worker.py)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator, Protocol

from mesoslike.handshake_watch import (FIRST_CUT, FIRST_REFUSAL, SUCCEEDED_AFTER_FAILURE, WATCHED_EVENTS,
                                       HandshakeWatch, monitor_event)

__all__ = ["KeyPair", "WorkerKeys", "Connection", "Poller", "Waker", "flush_before_exit", "library"]

# libzmq's constants (zmq.h, stable since 4.0; the handshake events since 4.3)
_PAIR, _DEALER = 0, 5
_DONTWAIT, _POLLIN, _EAGAIN, _EINTR = 1, 1, 11, 4
_IDENTITY, _LINGER, _RECONNECT_IVL, _RCVMORE, _RECONNECT_IVL_MAX = 5, 17, 18, 13, 21
_MAXMSGSIZE, _SNDHWM, _RCVHWM = 22, 23, 24
_CURVE_PUBLICKEY, _CURVE_SECRETKEY, _CURVE_SERVERKEY, _CONNECT_TIMEOUT = 48, 49, 50, 79
#: the transport's send high-water mark and connect timeout (mesoslike.transport)
_SEND_HIGH_WATER_MARK = 10_000
_CONNECT_TIMEOUT_MS = 1000


if TYPE_CHECKING:   # (a worker names it in annotations only)
    class KeyPair(Protocol):
        """A CURVE pair (z85), as :class:`mesoslike.transport.CurveKeys` holds one."""

        public: bytes
        secret: bytes


class WorkerKeys:
    """The job's workers' pair as a worker reads it from its environment and
    sandbox (:class:`mesoslike.transport.CurveKeys` without the transport's
    import); its repr hides the secret."""

    __slots__ = ("public", "secret")

    def __init__(self, public: bytes, secret: bytes) -> None:
        self.public, self.secret = public, secret

    def __repr__(self) -> str:
        return f"WorkerKeys(public={self.public!r})"


class _PollItem(ctypes.Structure):
    _fields_ = [("socket", ctypes.c_void_p), ("fd", ctypes.c_int), ("events", ctypes.c_short),
                ("revents", ctypes.c_short)]


def _library_path() -> str:
    """pyzmq's extension on ``sys.path`` (its libzmq's symbols come with
    it), else the system's libzmq."""
    for entry in sys.path:
        directory = os.path.join(entry or ".", "zmq", "backend", "cython")
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if name.endswith(".so"):
                return os.path.join(directory, name)
    return "libzmq.so.5"


class _Library:
    """libzmq's functions this module calls, and the process's one context."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(_library_path(), use_errno=True)
        pointer, integer, size = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        for name, result, arguments in (
                ("zmq_ctx_new", pointer, []), ("zmq_ctx_term", integer, [pointer]),
                ("zmq_socket", pointer, [pointer, integer]), ("zmq_close", integer, [pointer]),
                ("zmq_setsockopt", integer, [pointer, integer, pointer, size]),
                ("zmq_getsockopt", integer, [pointer, integer, pointer, ctypes.POINTER(size)]),
                ("zmq_connect", integer, [pointer, ctypes.c_char_p]),
                ("zmq_socket_monitor", integer, [pointer, ctypes.c_char_p, integer]),
                ("zmq_send", integer, [pointer, ctypes.c_char_p, size, integer]),
                ("zmq_recv", integer, [pointer, pointer, size, integer]),
                ("zmq_msg_init", integer, [pointer]), ("zmq_msg_close", integer, [pointer]),
                ("zmq_msg_recv", integer, [pointer, pointer, integer]), ("zmq_msg_data", pointer, [pointer]),
                ("zmq_poll", integer, [pointer, integer, ctypes.c_long]),
                ("zmq_errno", integer, []), ("zmq_strerror", ctypes.c_char_p, [integer])):
            function = getattr(lib, name)
            function.restype, function.argtypes = result, arguments
        self.lib = lib
        self.context: int = lib.zmq_ctx_new()
        if not self.context:
            raise OSError("libzmq: no context")
        self.sockets = 0   # open, for flush_before_exit

    def error(self, doing: str) -> OSError:
        number = self.lib.zmq_errno()
        return OSError(number, f"{doing}: {self.lib.zmq_strerror(number).decode(errors='replace')}")

    def socket(self, kind: int, options: list[tuple[int, bytes]]) -> int:
        handle = self.lib.zmq_socket(self.context, kind)
        if not handle:
            raise self.error("cannot make a socket")
        self.sockets += 1
        for option, value in options:
            if self.lib.zmq_setsockopt(handle, option, value, len(value)) != 0:
                problem = self.error(f"socket option {option}")
                self.close(handle, 0)
                raise problem
        return handle

    def close(self, handle: int, linger_ms: int) -> None:
        self.lib.zmq_setsockopt(handle, _LINGER, _int(linger_ms), 4)
        self.lib.zmq_close(handle)
        self.sockets -= 1


_library: _Library | None = None


def library() -> _Library:
    """libzmq, loaded at the first call (OSError if it cannot be)."""
    global _library
    if _library is None:
        _library = _Library()
    return _library


def _int(value: int) -> bytes:
    return value.to_bytes(4, sys.byteorder, signed=True)


_monitor_numbers = iter(range(1, 1 << 62))


class Connection:
    """A DEALER connected to ``address`` carrying messages of ``codec``
    (see the module's doc). ``log``: where its warnings and errors go
    (``log(level, message)``)."""

    def __init__(self, address: str, *, codec: Any, identity: bytes, keys: KeyPair | None,
                 server_key: bytes | None, reconnect_min: float, reconnect_max: float,
                 log: Callable[[str, str], None]) -> None:
        if keys is not None and server_key is None:
            raise ValueError("a client with keys needs the server's public key too")
        self.address = address
        self.codec = codec
        self._lib = library()
        self._log = log
        self._reconnect_max = max(0.1, reconnect_max)
        self._options = [
            (_LINGER, _int(0)), (_MAXMSGSIZE, codec.max_message_size.to_bytes(8, sys.byteorder, signed=True)),
            (_SNDHWM, _int(_SEND_HIGH_WATER_MARK)), (_IDENTITY, identity),
            (_RECONNECT_IVL, _int(max(1, int(reconnect_min * 1000)))),
            (_RECONNECT_IVL_MAX, _int(max(max(1, int(reconnect_min * 1000)), 100, int(reconnect_max * 1000)))),
            (_CONNECT_TIMEOUT, _int(_CONNECT_TIMEOUT_MS))]
        if keys is not None and server_key is not None:
            self._options += [(_CURVE_SERVERKEY, server_key), (_CURVE_PUBLICKEY, keys.public),
                              (_CURVE_SECRETKEY, keys.secret)]
        #: the frame being read (a zmq_msg_t: 64 bytes, pointer-aligned), reused — no buffer of the frame
        #: limit's size (1 MiB zeroed at the start, ~0.5 ms of CPU and 1 MiB resident a worker)
        self._message = (ctypes.c_uint64 * 8)()
        self._lib.lib.zmq_msg_init(self._message)
        self._event = ctypes.create_string_buffer(64)
        self._more = ctypes.c_int(0)
        self._more_size = ctypes.c_size_t(ctypes.sizeof(self._more))
        self.dropped = 0                 # frames send() could not hand to ZeroMQ
        #: what the monitor's events mean: the handshake's state, and when a refused one is tried again
        #: with a new socket (``retry_at``, which the poller waits for)
        self.handshake = HandshakeWatch(self._reconnect_max)
        #: counts the sockets made: a poller registers the new ones
        self.generation = 0
        self._socket: int | None = None
        self._monitor: int | None = None
        #: frames the socket had taken in before it was made anew (:meth:`_renew`), for :meth:`receive`
        self._pending: list[bytes] = []
        self._connect()

    # --------------------------------------------------------------- sockets
    def _connect(self) -> None:
        lib = self._lib
        socket = lib.socket(_DEALER, self._options)
        # the monitor's reader first: a monitor without its reader blocks the I/O thread at its first event
        address = f"inproc://fuxi-worker-monitor-{os.getpid()}-{next(_monitor_numbers)}".encode()
        try:
            monitor = lib.socket(_PAIR, [(_RCVHWM, _int(0)), (_LINGER, _int(0))])
        except OSError:
            lib.close(socket, 0)
            raise
        if lib.lib.zmq_socket_monitor(socket, address, WATCHED_EVENTS) != 0 \
                or lib.lib.zmq_connect(monitor, address) != 0:
            problem = lib.error("cannot monitor the connection")
            lib.lib.zmq_socket_monitor(socket, None, 0)
            lib.close(monitor, 0)
            lib.close(socket, 0)
            raise problem
        if lib.lib.zmq_connect(socket, self.address.encode()) != 0:
            problem = lib.error(f"cannot connect to {self.address}")
            self._close_sockets(socket, monitor, 0)
            raise problem
        self._socket, self._monitor = socket, monitor
        self.generation += 1

    def _close_sockets(self, socket: int, monitor: int, linger_ms: int) -> None:
        # the safe order (mesoslike.transport's _MonitoredSocket): the monitor stopped, its reader, the socket
        self._lib.lib.zmq_socket_monitor(socket, None, 0)
        self._lib.close(monitor, 0)
        self._lib.close(socket, linger_ms)

    def _renew(self) -> bool:
        """The socket made anew with the same identity (what its queue held is
        lost: the protocol's retries cover it); False, the old kept, if no new
        one can be made now."""
        assert self._socket is not None and self._monitor is not None
        old = self._socket, self._monitor
        try:
            self._connect()
        except OSError as exc:   # (the process's file or socket limit): the old one kept, tried again later
            self._log("ERROR", f"cannot connect anew to {self.address} ({exc}): keeping the old connection, "
                               f"trying again in {self._reconnect_max:g}s")
            self.handshake.renew_failed(time.monotonic())
            return False
        self._drain(old[0])
        self._close_sockets(*old, 0)
        return True

    def _drain(self, socket: int) -> None:
        """What ``socket`` has taken in, kept for :meth:`receive`: a
        connection that drops after its last frames came (an AppMaster that
        says RELEASE and exits) has the frames and the drop's event waiting
        together, and the frames are the protocol's — a socket closed with
        them unread lost the RELEASE, and the worker was killed at the end
        of its release grace instead of exiting. At most ZeroMQ's receive
        queue (its high-water mark) is ever there."""
        lib = self._lib.lib
        while True:
            got = lib.zmq_msg_recv(self._message, socket, _DONTWAIT)
            if got < 0:
                return
            self._pending.append(ctypes.string_at(lib.zmq_msg_data(self._message), got))

    @property
    def pending(self) -> bool:
        """Whether frames of a socket made anew wait for :meth:`receive`."""
        return bool(self._pending)

    @property
    def socket(self) -> int | None:
        return self._socket

    @property
    def monitor(self) -> int | None:
        return self._monitor

    @property
    def handshakes_refused(self) -> int:
        """Refused handshakes (cuts that made a refusal included), ever."""
        return self.handshake.refusals

    def watch(self) -> None:
        """Read the monitor's events; make the socket anew if the connection
        dropped, or if a refused handshake's pause is over (the rules:
        :mod:`mesoslike.handshake_watch`). O(events)."""
        lib = self._lib.lib
        handshake = self.handshake
        dropped = False
        while self._monitor is not None:
            got = lib.zmq_recv(self._monitor, self._event, len(self._event), _DONTWAIT)
            if got < 0:
                break
            event = monitor_event(ctypes.string_at(self._event, min(got, len(self._event))))
            while self._has_more():   # the event's endpoint
                lib.zmq_recv(self._monitor, self._event, len(self._event), _DONTWAIT)
            if event is None:
                continue
            kind, value = event
            verdict = handshake.event(kind, time.monotonic())
            if verdict is FIRST_CUT:   # the AppMaster going down cuts one: ZeroMQ tries again
                self._log("WARNING", f"the handshake with {self.address} was cut (errno {value}): "
                                     "the AppMaster is going down, or refuses us; trying again")
            elif verdict is FIRST_REFUSAL:
                self._log("ERROR", f"the handshake with {self.address} failed (event {kind:#x}, {value}): "
                                   f"it refused our key, or it is not the AppMaster whose key we were "
                                   f"given; trying again every {self._reconnect_max:g}s")
            elif verdict is SUCCEEDED_AFTER_FAILURE:
                self._log("WARNING", f"the handshake with {self.address} succeeded after all")
            dropped = dropped or verdict.renew
        if dropped:
            if self._renew():
                self._log("WARNING", f"the connection to {self.address} dropped: connecting anew")
        elif self._socket is not None and handshake.retry_due(time.monotonic()):
            self._renew()

    def _has_more(self) -> bool:
        self._more_size.value = ctypes.sizeof(self._more)
        lib = self._lib.lib
        return lib.zmq_getsockopt(self._monitor, _RCVMORE, ctypes.byref(self._more),
                                  ctypes.byref(self._more_size)) == 0 and bool(self._more.value)

    # --------------------------------------------------------------- frames
    @property
    def queued(self) -> int:
        """Frames waiting beyond ZeroMQ's queue: none (see the module's doc)."""
        return 0

    def send(self, message: object) -> bool:
        """Encode ``message`` and hand it to ZeroMQ without blocking; False
        (counted in ``dropped``) if its queue is full. Raises the codec's
        error for a message it cannot encode."""
        frame = self.codec.encode(message)
        if self._socket is None or self._lib.lib.zmq_send(self._socket, frame, len(frame), _DONTWAIT) < 0:
            self.dropped += 1
            return False
        return True

    def receive(self) -> Iterator[tuple[None, object]]:
        """Every frame waiting now, decoded; a bad frame yields the codec's error."""
        self.watch()
        if self._pending:   # the old socket's, before the new one's
            pending, self._pending = self._pending, []
            for frame in pending:
                try:
                    yield None, self.codec.decode(frame)
                except self.codec.error as exc:
                    yield None, exc
        lib = self._lib.lib
        while self._socket is not None:
            got = lib.zmq_msg_recv(self._message, self._socket, _DONTWAIT)   # (a frame over MAXMSGSIZE never is)
            if got < 0:
                return
            try:
                yield None, self.codec.decode(ctypes.string_at(lib.zmq_msg_data(self._message), got))
            except self.codec.error as exc:
                yield None, exc

    def close(self, linger: float = 0.0) -> None:
        """Close the socket; what it still queues gets ``linger`` seconds. Idempotent."""
        if self._socket is not None and self._monitor is not None:
            self._close_sockets(self._socket, self._monitor, max(0, int(linger * 1000)))
            self._socket = self._monitor = None
            self._lib.lib.zmq_msg_close(self._message)


class Waker:
    """Wakes the loop blocked in :meth:`Poller.poll` (a signal handler's
    :meth:`wake`): an eventfd, cleared by the poll that saw it."""

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def fileno(self) -> int:
        return self._fd

    def wake(self) -> None:
        try:
            os.eventfd_write(self._fd, 1)
        except (BlockingIOError, OSError):
            pass   # already pending (or closed at the end)

    def clear(self) -> None:
        try:
            os.eventfd_read(self._fd)
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass


class Poller:
    """What of a connection and descriptors (anything with ``fileno``) has
    something to read: one ``zmq_poll`` over them and the connection's
    monitor, whose events are handled here (:meth:`Connection.watch`). A
    :class:`Waker` that fired is cleared."""

    def __init__(self, items: list[Any]) -> None:
        self._items: list[Any] = []
        self._array: Any = None
        self._generations: list[int] = []
        for item in items:
            self.register(item)

    def register(self, item: Any) -> None:
        self._items.append(item)
        self._array = None

    def unregister(self, item: Any) -> None:
        self._items = [each for each in self._items if each is not item]
        self._array = None

    def _build(self) -> Any:
        connections = [item for item in self._items if isinstance(item, Connection)]
        array = (_PollItem * (len(self._items) + len(connections)))()
        owners: list[tuple[Any, bool]] = []
        for item in self._items:
            slot = array[len(owners)]
            if isinstance(item, Connection):
                slot.socket, slot.fd = item.socket, -1   # (closed: no socket, and a negative fd is skipped)
            else:
                slot.fd = item.fileno()
            slot.events = _POLLIN
            owners.append((item, False))
        for connection in connections:
            slot = array[len(owners)]
            slot.socket, slot.fd = connection.monitor, -1
            slot.events = _POLLIN
            owners.append((connection, True))
        self._owners = owners
        self._generations = [connection.generation for connection in connections]
        return array

    def poll(self, timeout: float) -> list[Any]:
        """What is ready within ``timeout`` seconds (>= 0; empty if it passed
        or a signal came)."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            connections = [item for item in self._items if isinstance(item, Connection)]
            until = deadline
            for connection in connections:   # a refused handshake's pause over: a new socket now
                if connection.handshake.retry_at is not None:
                    if time.monotonic() >= connection.handshake.retry_at:
                        connection.watch()
                    if connection.handshake.retry_at is not None:
                        until = min(until, connection.handshake.retry_at)
            if self._array is None or self._generations != [each.generation for each in connections]:
                self._array = self._build()
            # frames kept from a socket made anew are ready now
            millis = 0 if any(each.pending for each in connections) else \
                max(0, math.ceil((until - time.monotonic()) * 1000))
            count = library().lib.zmq_poll(self._array, len(self._owners), millis)
            if count < 0:
                return []   # a signal (its handler has run)
            ready: list[Any] = []
            for slot, (item, monitor) in zip(self._array, self._owners):
                if not slot.revents:
                    continue
                if monitor:
                    item.watch()
                else:
                    ready.append(item)
            ready += [each for each in connections if each.pending and each not in ready]
            # a poll woken only by a monitor (a handshake, a reconnect) waits on for the rest of the timeout
            if ready or time.monotonic() >= deadline:
                break
        for item in ready:
            if isinstance(item, Waker):
                item.clear()
        return ready


def flush_before_exit(timeout: float) -> None:
    """Give what the closed sockets still queue up to ``timeout`` seconds to
    go out (their linger) by ending the context, for a process about to
    leave with ``os._exit`` (:func:`mesoslike.transport.flush_before_exit`'s
    rule)."""
    if _library is None:
        return
    ending = threading.Thread(target=_library.lib.zmq_ctx_term, args=(_library.context,), name="zmq-term",
                              daemon=True)
    ending.start()
    ending.join(timeout)
