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
"""

from __future__ import annotations

import os
import select
from typing import Any, Iterable, Iterator, Protocol, Self, Union

import zmq

from mesoslike.errors import ConfigError
from mesoslike.wire.codec import CODEC

__all__ = ["Server", "Client", "Waker", "Poller", "poll", "idle", "parse_tcp_address", "allow_sockets",
           "MessageCodec", "Received", "DEFAULT_LISTEN_BACKLOG"]

#: The listen backlog of a server. ZeroMQ's default (100) drops most of the
#: connections of thousands of agents reconnecting at once after a failover,
#: and the kernel makes each dropped SYN wait 1, 3, 7, 15... s to retry
#: (docs/failover.rst). The kernel caps it at ``net.core.somaxconn``.
DEFAULT_LISTEN_BACKLOG = 4096

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


def _context() -> zmq.Context:
    return zmq.Context.instance()


def allow_sockets(count: int) -> None:
    """Let this process open up to ``count`` sockets (ZeroMQ's default is
    1,023; a process that plays thousands of agents needs more). Call it
    before the first socket is made."""
    _context().set(zmq.MAX_SOCKETS, count)


def _millis(timeout: float | None) -> int | None:
    return None if timeout is None else max(0, int(timeout * 1000))


class _Endpoint:
    """A socket and the codec of what it carries."""

    def __init__(self, kind: int, codec: MessageCodec) -> None:
        self.codec = codec
        self._socket = _context().socket(kind)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, codec.max_message_size)
        self._closed = False

    def wait(self, timeout: float | None, waker: Waker | None = None) -> bool:
        """Block until a frame is readable (True), the waker fires, or the
        timeout (seconds; None = forever) passes."""
        return self in poll([self] if waker is None else [self, waker], timeout)

    def decode(self, frame: bytes) -> object:
        """The message in ``frame``, or the codec's error that it is not one."""
        try:
            return self.codec.decode(frame)
        except self.codec.error as exc:
            return exc

    def close(self, linger: float = 0.0) -> None:
        """Close the socket; messages still queued get ``linger`` seconds to
        leave (0: dropped now). Idempotent."""
        if not self._closed:
            self._closed = True
            self._socket.close(linger=int(linger * 1000))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Server(_Endpoint):
    """A ROUTER socket bound to ``tcp://host:port`` (port 0 = any free port),
    listening with a backlog of ``backlog`` pending connections, carrying
    messages of ``codec``."""

    def __init__(self, address: str, *, codec: MessageCodec = CODEC,
                 backlog: int = DEFAULT_LISTEN_BACKLOG) -> None:
        host, port = parse_tcp_address(address)
        if not isinstance(backlog, int) or isinstance(backlog, bool) or backlog < 1:
            raise ConfigError(f"bad listen backlog {backlog!r}: expected an integer >= 1")
        super().__init__(zmq.ROUTER, codec)
        self._socket.setsockopt(zmq.BACKLOG, backlog)
        # a message to a peer that went away is dropped instead of blocking
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 0)
        try:
            if port == 0:
                port = self._socket.bind_to_random_port(f"tcp://{host}")
            else:
                self._socket.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError as exc:
            self.close()
            raise ConfigError(f"cannot bind {address}: {exc}") from None
        self.address = f"tcp://{host}:{port}"

    @property
    def backlog(self) -> int:
        """The listen backlog the socket was given."""
        return int(self._socket.getsockopt(zmq.BACKLOG))

    def send(self, peer: bytes, message: object) -> None:
        """Encode ``message`` and queue it for ``peer`` (raises the codec's
        error if it cannot be encoded; dropped if the peer is gone)."""
        self.send_frame(peer, self.codec.encode(message))

    def send_frame(self, peer: bytes, frame: bytes) -> None:
        """Queue an encoded frame for ``peer``."""
        self._socket.send_multipart([peer, frame], copy=False)

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
        while True:
            try:
                parts = self._socket.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            if len(parts) != 2:
                yield (parts[0] if parts else None), self.codec.error(f"expected one frame, got {len(parts) - 1}")
                continue
            yield parts[0], parts[1]


class Client(_Endpoint):
    """A DEALER socket connected to a server, carrying messages of
    ``codec``; reconnects by itself (every 0.1 s doubling to ``reconnect_max``
    seconds). ``identity``: how the server sees it (default random).
    ``watch_connection``: count the connections made (:meth:`connections`)."""

    def __init__(self, address: str, *, codec: MessageCodec = CODEC, identity: bytes | None = None,
                 watch_connection: bool = False, reconnect_max: float = 2.0) -> None:
        parse_tcp_address(address)
        super().__init__(zmq.DEALER, codec)
        self._socket.setsockopt(zmq.IDENTITY, identity or os.urandom(8))
        # don't queue without bound for a server that is gone
        self._socket.setsockopt(zmq.SNDHWM, 10_000)
        self._socket.setsockopt(zmq.RECONNECT_IVL, 100)
        self._socket.setsockopt(zmq.RECONNECT_IVL_MAX, max(100, int(reconnect_max * 1000)))
        # handshakes with the server, counted by connections(): made before connect() to see the first
        self._monitor = self._socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED) if watch_connection else None
        self._socket.connect(address)
        self.address = address

    def connections(self) -> int:
        """How many times the connection to the server was made since the
        last call (``watch_connection`` clients; 0 for others). One after
        the first means the server restarted, or the network broke and healed:
        the server may not know this client any more."""
        count = 0
        while self._monitor is not None:
            try:
                self._monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            count += 1
        return count

    def close(self, linger: float = 0.0) -> None:
        if self._monitor is not None and not self._closed:
            self._socket.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None
        super().close(linger)

    def send(self, message: object) -> bool:
        """Encode and queue a message; False if the outgoing queue is full
        (raises the codec's error if it cannot be encoded)."""
        return self.send_frame(self.codec.encode(message))

    def send_frame(self, frame: bytes) -> bool:
        """Queue an encoded frame; False if the outgoing queue is full."""
        try:
            self._socket.send(frame, zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False

    def receive(self) -> Iterator[Received]:
        """Every frame waiting now, decoded; a bad frame yields the codec's error."""
        for _, frame in self.receive_frames():
            yield None, self.decode(frame)

    def receive_frames(self) -> Iterator[tuple[None, bytes]]:
        """Every frame waiting now, not decoded."""
        while True:
            try:
                yield None, self._socket.recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return


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


#: what a poll waits on
Pollable = Union[_Endpoint, Waker]


class Poller:
    """Waits until any of several endpoints has a frame to read or any of
    several wakers fires. Registering is O(1); a poll is O(n) in what is
    registered (keep one Poller for many sockets rather than a new one per
    poll)."""

    def __init__(self, items: Iterable[Pollable] = ()) -> None:
        self._poller = zmq.Poller()
        self._items: dict[object, Pollable] = {}
        for item in items:
            self.register(item)

    @staticmethod
    def _key(item: Pollable) -> object:
        return item.fileno() if isinstance(item, Waker) else item._socket

    def register(self, item: Pollable) -> None:
        key = self._key(item)
        self._poller.register(key, zmq.POLLIN)
        self._items[key] = item

    def unregister(self, item: Pollable) -> None:
        key = self._key(item)
        self._poller.unregister(key)
        del self._items[key]

    def poll(self, timeout: float | None) -> list[Pollable]:
        """What is ready within ``timeout`` seconds (None = wait forever;
        empty if the time passed). A waker that fired is cleared."""
        ready = [self._items[key] for key, _ in self._poller.poll(_millis(timeout))]
        for item in ready:
            if isinstance(item, Waker):
                item.clear()
        return ready


def poll(items: Iterable[Pollable], timeout: float | None) -> list[Pollable]:
    """What of ``items`` is ready within ``timeout`` seconds (see :class:`Poller`)."""
    return Poller(items).poll(timeout)


def idle(waker: Waker, timeout: float | None) -> None:
    """Sleep until ``waker`` fires or ``timeout`` seconds pass (for a loop
    that has no socket at the moment, e.g. while no master leads)."""
    select.select([waker.fileno()], [], [], timeout)
    waker.clear()
