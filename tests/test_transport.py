"""Real ZeroMQ sockets on 127.0.0.1."""

import threading
import time

import pytest
import zmq

from mesoslike.errors import ConfigError
from mesoslike.transport import DEFAULT_LISTEN_BACKLOG, Client, Server, Waker, parse_tcp_address
from mesoslike.wire import WireError
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(30)


def receive_one(endpoint, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if endpoint.wait(0.1):
            for item in endpoint.receive():
                return item
    raise AssertionError("nothing received")


def test_client_and_server_exchange_messages_and_server_answers_by_identity():
    with Server("tcp://127.0.0.1:0") as server, Client(server.address) as a, Client(server.address) as b:
        assert server.address.startswith("tcp://127.0.0.1:") and not server.address.endswith(":0")
        a.send(m.Ping("a"))
        peer_a, msg = receive_one(server)
        assert msg == m.Ping("a")
        b.send(m.Ping("b"))
        peer_b, _ = receive_one(server)
        assert peer_a != peer_b
        server.send(peer_b, m.Pong("b"))
        assert receive_one(b) == (None, m.Pong("b"))
        assert a.wait(0.2) is False


def test_bad_frames_come_out_as_wire_errors_and_the_server_keeps_going():
    import zmq

    with Server("tcp://127.0.0.1:0") as server:
        raw = zmq.Context.instance().socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(server.address)
        raw.send(b"\xc1not msgpack")
        _, error = receive_one(server)
        assert isinstance(error, WireError)
        with Client(server.address) as good:
            good.send(m.Heartbeat())
            assert receive_one(server)[1] == m.Heartbeat()
        raw.close()


def test_waker_interrupts_a_wait():
    with Server("tcp://127.0.0.1:0") as server:
        waker = Waker()
        threading.Timer(0.1, waker.wake).start()
        start = time.monotonic()
        assert server.wait(10.0, waker) is False
        assert time.monotonic() - start < 5
        waker.close()


@pytest.mark.parametrize("address", ["127.0.0.1:5050", "tcp://127.0.0.1", "tcp://:5", "tcp://h:99999", "zk://x/y"])
def test_bad_addresses(address):
    with pytest.raises(ConfigError):
        parse_tcp_address(address)


def test_binding_a_used_port_is_a_config_error():
    with Server("tcp://127.0.0.1:0") as first:
        with pytest.raises(ConfigError, match="cannot bind"):
            Server(first.address)


def test_a_server_listens_with_a_backlog_that_holds_thousands_of_reconnecting_agents():
    # ZeroMQ's default of 100 made 10k agents re-registering after a failover
    # wait for the kernel's SYN retries (docs/failover.rst)
    with Server("tcp://127.0.0.1:0") as server:
        assert server.socket.getsockopt(zmq.BACKLOG) == DEFAULT_LISTEN_BACKLOG >= 4096
    with Server("tcp://127.0.0.1:0", backlog=50) as server:
        assert server.socket.getsockopt(zmq.BACKLOG) == 50


@pytest.mark.parametrize("backlog", [0, -1, 1.5, True, "100"])
def test_a_bad_backlog_is_a_config_error(backlog):
    with pytest.raises(ConfigError, match="backlog"):
        Server("tcp://127.0.0.1:0", backlog=backlog)
