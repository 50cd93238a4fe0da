"""A worker's connection to its AppMaster on libzmq through ctypes
(``fuxi/worker_libzmq.py``): what the transport's client guaranteed a
worker — CURVE to that AppMaster only, a refused handshake tried again, a
connection ZeroMQ gave up on made anew, a frame over the limit never read,
a waker that wakes the poll — against a real transport server on 127.0.0.1."""

from __future__ import annotations

import time
from typing import Callable

import pytest

from mesoslike.transport import Authenticator, CurveKeys, Server
from mesoslike_frameworks.fuxi.worker_libzmq import Connection, Poller, Waker, WorkerKeys
from tests.e2e_helpers import free_port

pytestmark = pytest.mark.timeout(60)


class Frames:
    """A codec of raw frames up to ``max_message_size`` bytes."""

    error = ValueError

    def __init__(self, max_message_size: int) -> None:
        self.max_message_size = max_message_size

    def encode(self, message: object) -> bytes:
        assert isinstance(message, bytes)
        return message

    def decode(self, frame: bytes) -> object:
        return frame


def wait_until(condition: Callable[[], object], poll: Callable[[], object], what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        poll()
    return found


def server_frames(server: Server) -> Callable[[], list]:
    got: list = []

    def poll() -> list:
        server.wait(0.05)
        got.extend(server.receive())
        return got
    return poll


@pytest.fixture
def free_address() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


@pytest.fixture
def pairs():
    appmaster, worker = CurveKeys.generate(), CurveKeys.generate()
    return appmaster, worker, WorkerKeys(worker.public, worker.secret)


def connect(address: str, keys, server_key: bytes, limit: int = 1 << 20, log=None) -> Connection:
    return Connection(address, codec=Frames(limit), identity=b"job-1.u.0", keys=keys, server_key=server_key,
                      reconnect_min=0.02, reconnect_max=0.1, log=log or (lambda level, text: None))


def appmaster_and_worker(pairs, address: str, limit: int = 1 << 20) -> tuple[Server, Connection, Poller]:
    """An AppMaster's server that knows the workers' key, and a worker's connection to it (reading frames up to
    ``limit`` bytes) with its poller."""
    appmaster, worker, keys = pairs
    server = Server(address, codec=Frames(1 << 20), keys=appmaster,
                    authenticator=Authenticator({worker.public: "workers"}))
    connection = connect(address, keys, appmaster.public, limit=limit)
    return server, connection, Poller([connection])


def test_a_worker_connection_speaks_curve_with_its_appmaster(pairs, free_address):
    server, connection, poller = appmaster_and_worker(pairs, free_address)
    try:
        assert connection.send(b"HELLO")
        frames = server_frames(server)
        peer, hello = wait_until(lambda: frames() and frames()[0], lambda: None, "HELLO")
        assert (peer, hello) == (b"job-1.u.0", b"HELLO")
        assert server.send(peer, b"WELCOME")
        got: list = []
        wait_until(lambda: got, lambda: got.extend(m for _, m in connection.receive())
                   if connection in poller.poll(0.05) else None, "WELCOME")
        assert got == [b"WELCOME"]
    finally:
        connection.close()
        server.close()


def test_a_refused_key_is_logged_and_tried_again_with_a_new_socket(pairs, free_address):
    appmaster, _, keys = pairs
    other = CurveKeys.generate()
    server = Server(free_address, codec=Frames(1 << 20), keys=appmaster,
                    authenticator=Authenticator({other.public: "workers"}))   # not this worker's key
    lines: list[tuple[str, str]] = []
    connection = connect(free_address, keys, appmaster.public, log=lambda level, text: lines.append((level, text)))
    poller = Poller([connection])
    try:
        connection.send(b"HELLO")
        # refused, then a new socket after reconnect_max (0.1 s), refused again: ZeroMQ alone never retries
        wait_until(lambda: connection.handshakes_refused >= 2 and connection.generation >= 2,
                   lambda: poller.poll(0.05), "second refusal")
        assert [level for level, text in lines if "refused our key" in text] == ["ERROR"]   # logged once
        assert not list(server.receive())
    finally:
        connection.close()
        server.close()


def test_a_frame_over_the_limit_is_not_read_and_the_connection_is_made_anew(pairs, free_address):
    server, connection, poller = appmaster_and_worker(pairs, free_address, limit=1024)
    frames = server_frames(server)
    got: list = []

    def read() -> None:
        if connection in poller.poll(0.05):
            got.extend(m for _, m in connection.receive())
    try:
        connection.send(b"HELLO")
        peer = wait_until(lambda: frames() and frames()[0][0], lambda: None, "HELLO")
        server.send(peer, b"x" * 2048)   # a protocol error: ZeroMQ ends the connection and never reconnects
        wait_until(lambda: connection.generation >= 2, read, "a new socket")
        connection.send(b"AGAIN")
        wait_until(lambda: [m for _, m in frames() if m == b"AGAIN"], lambda: None, "the new socket's frame")
        server.send(peer, b"small")
        wait_until(lambda: got, read, "a frame after the new connection")
        assert got == [b"small"]   # the large one never read
    finally:
        connection.close()
        server.close()


def _monitor_readable(connection: Connection) -> bool:
    """Whether the connection's monitor has an event waiting (looked at, not read)."""
    import ctypes

    from mesoslike_frameworks.fuxi import worker_libzmq
    item = (worker_libzmq._PollItem * 1)(worker_libzmq._PollItem(connection.monitor, -1, 1, 0))   # POLLIN
    return worker_libzmq.library().lib.zmq_poll(ctypes.cast(item, ctypes.c_void_p), 1, 50) > 0


def test_the_last_frames_before_a_drop_are_read_from_the_socket_made_anew(pairs, free_address):
    # an AppMaster that says RELEASE and exits: the frame and the drop's event wait together when the worker
    # wakes (a loaded machine); the socket is made anew for the drop, and the frame must not go with the old one
    server, connection, poller = appmaster_and_worker(pairs, free_address)
    frames = server_frames(server)
    try:
        connection.send(b"HELLO")
        peer = wait_until(lambda: frames() and frames()[0][0], lambda: None, "HELLO")
        connection.watch()   # the handshake's event read: the next is the drop's
        assert not _monitor_readable(connection)
        assert server.send(peer, b"RELEASE")
        server.close(linger=1.0)   # the frame goes out, then the connection closes
        # nothing read until the drop's event waits too (its frame came before it)
        wait_until(lambda: _monitor_readable(connection), lambda: None, "the drop's event")
        got: list = []
        wait_until(lambda: got, lambda: got.extend(m for _, m in connection.receive())
                   if connection in poller.poll(0.05) else None, "RELEASE")
        assert got == [b"RELEASE"] and connection.generation >= 2   # read, though the socket was made anew
    finally:
        connection.close()
        server.close()


def test_a_waker_wakes_the_poll_and_is_cleared_by_it():
    waker = Waker()
    poller = Poller([waker])
    try:
        assert poller.poll(0) == []
        waker.wake()
        waker.wake()
        assert poller.poll(5.0) == [waker]
        assert poller.poll(0) == []   # cleared
    finally:
        waker.close()


def test_worker_keys_hide_the_secret_in_their_repr(pairs):
    _, worker, keys = pairs
    assert keys.public == worker.public and worker.secret.decode() not in repr(keys)
