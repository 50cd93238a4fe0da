"""ZeroMQ at the edge: the only module that imports ``zmq``.

A master binds one ROUTER socket; agents and scheduler drivers connect DEALER
sockets to it. Each frame carries one encoded message (see
:mod:`mesoslike.wire`). The ROUTER sees every peer under the identity ZeroMQ
gives its connection; that identity is how the master answers it.

Sockets are not thread-safe: a :class:`Server` or :class:`Client` belongs to
the thread that polls it. Other threads hand work over through a
:class:`Waker`, which makes that thread's poll return.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from typing import Iterator

import zmq

from mesoslike.errors import ConfigError
from mesoslike.wire import WireError, decode, encode
from mesoslike.wire.codec import DEFAULT_MAX_MESSAGE_SIZE

__all__ = ["Server", "Client", "Waker", "idle", "parse_tcp_address", "Received"]

log = logging.getLogger(__name__)

#: The listen backlog of a server. ZeroMQ's default (100) drops most of the
#: connections of thousands of agents reconnecting at once after a failover,
#: and the kernel makes each dropped SYN wait 1, 3, 7, 15... s to retry
#: (docs/failover.rst). The kernel caps it at ``net.core.somaxconn``.
DEFAULT_LISTEN_BACKLOG = 4096

#: (peer identity or None for a client, message or the WireError it raised)
Received = tuple[bytes | None, object]


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


class _Socket:
    def __init__(self, kind: int, max_message_size: int) -> None:
        self._socket = _context().socket(kind)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, max_message_size)
        self.max_message_size = max_message_size
        self._closed = False

    @property
    def socket(self) -> zmq.Socket:
        return self._socket

    def wait(self, timeout: float | None, waker: Waker | None = None) -> bool:
        """Block until a frame is readable (True), the waker fires, or the
        timeout (seconds; None = forever) passes."""
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        if waker is not None:
            poller.register(waker.fileno(), zmq.POLLIN)
        millis = None if timeout is None else max(0, int(timeout * 1000))
        ready = dict(poller.poll(millis))
        if waker is not None and waker.fileno() in ready:
            waker.clear()
        return self._socket in ready

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._socket.close(linger=0)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Server(_Socket):
    """A ROUTER socket bound to ``tcp://host:port`` (port 0 = any free port),
    listening with a backlog of ``backlog`` pending connections."""

    def __init__(self, address: str, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 backlog: int = DEFAULT_LISTEN_BACKLOG) -> None:
        host, port = parse_tcp_address(address)
        if not isinstance(backlog, int) or isinstance(backlog, bool) or backlog < 1:
            raise ConfigError(f"bad listen backlog {backlog!r}: expected an integer >= 1")
        super().__init__(zmq.ROUTER, max_message_size)
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

    def send(self, peer: bytes, message: object) -> None:
        self._socket.send_multipart([peer, encode(message)], copy=False)

    def receive(self) -> Iterator[Received]:
        """Every frame waiting now, decoded; a bad frame yields its WireError."""
        for peer, frame in self.receive_frames():
            if isinstance(frame, WireError):
                yield peer, frame
            else:
                yield peer, self.decode(frame)

    def receive_frames(self) -> Iterator[tuple[bytes | None, bytes | WireError]]:
        """Every frame waiting now, not decoded (see :meth:`decode`), so a
        caller can recognise a frame it has seen before without paying for
        decoding it again. A message of the wrong shape yields a WireError."""
        while True:
            try:
                parts = self._socket.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            if len(parts) != 2:
                yield (parts[0] if parts else None), WireError(f"expected one frame, got {len(parts) - 1}")
                continue
            yield parts[0], parts[1]

    def decode(self, frame: bytes) -> object:
        """The message in ``frame``, or the WireError that it is not one."""
        try:
            return decode(frame, self.max_message_size)
        except WireError as exc:
            return exc


class Client(_Socket):
    """A DEALER socket connected to a server; reconnects by itself."""

    def __init__(self, address: str, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 identity: bytes | None = None) -> None:
        parse_tcp_address(address)
        super().__init__(zmq.DEALER, max_message_size)
        self._socket.setsockopt(zmq.IDENTITY, identity or os.urandom(8))
        # don't queue without bound for a master that is gone
        self._socket.setsockopt(zmq.SNDHWM, 10_000)
        self._socket.setsockopt(zmq.RECONNECT_IVL, 100)
        self._socket.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        self._socket.connect(address)
        self.address = address

    def send(self, message: object) -> bool:
        """Queue a message; False if the outgoing queue is full."""
        try:
            self._socket.send(encode(message), zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False

    def receive(self) -> Iterator[Received]:
        while True:
            try:
                frame = self._socket.recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            try:
                yield None, decode(frame, self.max_message_size)
            except WireError as exc:
                yield None, exc


def idle(waker: Waker, timeout: float | None) -> None:
    """Sleep until ``waker`` fires or ``timeout`` seconds pass (for a loop
    that has no socket at the moment, e.g. while no master leads)."""
    import select

    select.select([waker.fileno()], [], [], timeout)
    waker.clear()


class Waker:
    """Wakes a thread blocked in ``wait``: a pipe other threads write to."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._lock = threading.Lock()

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
