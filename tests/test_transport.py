"""Real ZeroMQ sockets on 127.0.0.1."""

import gc
import os
import socket
import threading
import time
import warnings
from typing import ClassVar

import attrs
import pytest

from mesoslike.errors import ConfigError
from mesoslike.messaging import Codec, Schema, WireError
from mesoslike.transport import (COPY_THRESHOLD, DEFAULT_LISTEN_BACKLOG, Client, Poller, Readable, Server, Waker,
                                 parse_tcp_address, poll)
from mesoslike.wire import encode
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
    with Server("tcp://127.0.0.1:0") as server:
        with Client(server.address) as raw:
            raw.send_frame(b"\xc1not msgpack")
            _, error = receive_one(server)
            assert isinstance(error, WireError)
        with Client(server.address) as good:
            good.send(m.Heartbeat())
            assert receive_one(server)[1] == m.Heartbeat()


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
        assert server.backlog == DEFAULT_LISTEN_BACKLOG >= 4096
    with Server("tcp://127.0.0.1:0", backlog=50) as server:
        assert server.backlog == 50


@pytest.mark.parametrize("backlog", [0, -1, 1.5, True, "100"])
def test_a_bad_backlog_is_a_config_error(backlog):
    with pytest.raises(ConfigError, match="backlog"):
        Server("tcp://127.0.0.1:0", backlog=backlog)


# ------------------------------------------------------ a codec of one's own
SCHEMA = Schema("test", 3)


@SCHEMA.message
@attrs.frozen
class Note:
    TYPE: ClassVar[str] = "NOTE"
    text: str


CODEC = Codec(SCHEMA, max_message_size=64)


def test_endpoints_carry_the_messages_of_the_codec_they_are_given():
    with Server("tcp://127.0.0.1:0", codec=CODEC) as server, Client(server.address, codec=CODEC) as client:
        client.send(Note("hi"))
        peer, note = receive_one(server)
        assert note == Note("hi")
        server.send(peer, Note("back"))
        assert receive_one(client) == (None, Note("back"))
        with pytest.raises(WireError, match="not a message of the test protocol"):
            client.send(m.Heartbeat())               # the master's message is not one of this protocol
        client.send_frame(encode(m.Heartbeat()))     # ... nor is its frame: version 1, not 3
        assert "unsupported protocol version 1" in str(receive_one(server)[1])


def test_the_codec_limits_frames_both_ways():
    with Server("tcp://127.0.0.1:0", codec=CODEC) as server, Client(server.address, codec=CODEC) as client:
        with pytest.raises(WireError, match="exceeds the limit of 64"):
            client.send(Note("x" * 100))
        client.send(Note("small"))
        assert receive_one(server)[1] == Note("small")


def test_frames_pass_undecoded_both_ways():
    with Server("tcp://127.0.0.1:0", codec=CODEC) as server, Client(server.address, codec=CODEC) as client:
        assert client.send_frame(CODEC.encode(Note("a")))
        assert server.wait(5)
        (peer, frame), = list(server.receive_frames())
        assert frame == CODEC.encode(Note("a")) and server.decode(frame) == Note("a")
        assert isinstance(server.decode(b"junk"), WireError)
        server.send_frame(peer, b"raw bytes")
        assert client.wait(5)
        assert list(client.receive_frames()) == [(None, b"raw bytes")]


def test_a_batch_sized_frame_is_copied_not_handed_to_pyzmqs_collector_thread():
    # pyzmq sends a frame over its socket's copy_threshold (64 KiB by default) uncopied and registers it
    # with its garbage-collector thread, which releases it later (a message and a GIL hand-off a frame);
    # a few hundred updates' frame is cheaper copied: both ends copy up to COPY_THRESHOLD
    frame = bytes(range(256)) * 1000   # 256 kB: over pyzmq's 64 KiB, under COPY_THRESHOLD
    assert 64 * 1024 < len(frame) < COPY_THRESHOLD
    with Server("tcp://127.0.0.1:0") as server, Client(server.address) as client:   # the master protocol's codec
        assert server._socket.copy_threshold == client._socket.copy_threshold == COPY_THRESHOLD
        assert client.send_frame(frame)
        assert server.wait(5)
        (peer, received), = list(server.receive_frames())
        server.send_frame(peer, frame)
        assert client.wait(5)
        assert received == frame and list(client.receive_frames()) == [(None, frame)]


def test_a_poll_wakes_for_a_readable_descriptor_and_leaves_its_data_to_the_caller():
    read, write = os.pipe()
    try:
        with Server("tcp://127.0.0.1:0") as server:
            readable = Readable(read)
            assert poll([server, readable], 0) == []
            os.write(write, b"E run\n")
            assert poll([server, readable], 5) == [readable]
            assert poll([readable], 0) == [readable]   # not read, not cleared: the caller reads it
            assert os.read(read, 100) == b"E run\n"
            assert poll([server, readable], 0) == []
    finally:
        os.close(read)
        os.close(write)


def test_a_poller_waits_on_several_sockets_and_wakers_at_once():
    with Server("tcp://127.0.0.1:0") as one, Server("tcp://127.0.0.1:0") as two, \
            Client(two.address) as client:
        first, second = Waker(), Waker()
        try:
            poller = Poller([one, two, first, second])
            assert poller.poll(0) == []
            client.send(m.Heartbeat())
            second.wake()
            ready = []
            deadline = time.monotonic() + 5
            while len(ready) < 2 and time.monotonic() < deadline:
                ready += poller.poll(1.0)
            assert sorted(map(id, ready)) == sorted(map(id, [two, second]))
            assert poller.poll(0) == [two]           # the waker was cleared; the frame still waits
            assert list(two.receive()) and poller.poll(0) == []
            poller.unregister(two)
            client.send(m.Heartbeat())
            assert poll([first], 0.2) == []          # only what is asked about is waited on
            first.wake()
            assert poll([one, first], 5) == [first]
        finally:
            first.close()
            second.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_closing_with_linger_lets_queued_messages_leave():
    address = f"tcp://127.0.0.1:{free_port()}"
    client = Client(address)
    client.send(m.Teardown("fw-1"))   # no server yet: queued
    client.close(linger=10.0)         # returns at once; ZeroMQ keeps sending in the background
    client.close(linger=10.0)         # idempotent
    with Server(address) as server:
        assert receive_one(server, 10.0)[1] == m.Teardown("fw-1")


# ------------------------------------------------------- no silent loss (issue 12 §1)
def test_a_peer_that_reads_slower_than_the_server_writes_gets_every_frame_in_order():
    # ZeroMQ's ROUTER used to drop what did not fit under the peer's
    # high-water mark (1,000 frames) without a word
    count, payload = 30_000, "x" * 1000
    with Server("tcp://127.0.0.1:0") as server, Client(server.address) as client:
        client.send(m.Heartbeat())
        peer, _ = receive_one(server)
        assert all(server.send(peer, m.Error(f"{i} {payload}")) for i in range(count))
        assert server.stats.deferred > 0 and server.queued > 0    # the outbox took what the socket could not
        stop = threading.Event()

        def serve():   # the server's thread: its waits drain the outbox
            while not stop.is_set():
                server.wait(0.05)

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            received = []
            deadline = time.monotonic() + 60
            while len(received) < count and time.monotonic() < deadline:
                if client.wait(0.1):
                    received += [int(msg.message.split()[0]) for _, msg in client.receive()]
        finally:
            stop.set()
            thread.join()
        assert received == list(range(count))
        assert server.queued == 0 and server.stats.dropped == 0 and server.stats.sent == count


def test_a_frame_for_a_peer_that_is_gone_is_counted_not_raised():
    with Server("tcp://127.0.0.1:0") as server:
        assert server.send(b"nobody", m.Heartbeat()) is False
        assert server.stats.unroutable == 1 and server.stats.sent == 0


def test_an_outbox_is_bounded_and_what_it_cannot_hold_is_counted_and_logged(caplog):
    with Server("tcp://127.0.0.1:0", max_queued_bytes_per_peer=100_000) as server, \
            Client(server.address) as client:
        client.send(m.Heartbeat())
        peer, _ = receive_one(server)
        results = [server.send(peer, m.Error("y" * 1000)) for _ in range(20_000)]
        assert results.count(False) == server.stats.overflowed > 0
        assert server.stats.queued_bytes <= 100_000
        # One line per episode, not a storm: a "full" line when the outbox
        # fills, an "empty again" line if the peer drained it meanwhile (on
        # a loaded machine its reader may catch up between two sends).
        full = sum(1 for r in caplog.records if "is full" in r.getMessage())
        empty = sum(1 for r in caplog.records if "is empty again" in r.getMessage())
        assert 1 <= full <= empty + 1
        assert full + empty <= server.stats.overflowed / 100


def test_a_client_queues_what_its_socket_cannot_take_until_the_server_is_there():
    address = f"tcp://127.0.0.1:{free_port()}"
    with Client(address) as client:
        count = 15_000                                      # more than ZeroMQ queues (10,000)
        assert all(client.send(m.Pong(str(i))) for i in range(count))
        assert client.queued > 0 and client.stats.dropped == 0
        with Server(address) as server:
            received = []
            deadline = time.monotonic() + 60
            while len(received) < count and time.monotonic() < deadline:
                client.wait(0.01)                           # its wait drains its outbox
                received += [int(msg.agent_id) for _, msg in server.receive()]
            assert received == list(range(count)) and client.queued == 0


def test_closing_counts_what_never_left_the_outbox():
    client = Client(f"tcp://127.0.0.1:{free_port()}")
    for i in range(10_050):
        client.send(m.Pong(str(i)))
    waiting = client.queued
    client.close()
    assert waiting > 0 and client.stats.unsent_at_close == waiting and client.queued == 0


def test_an_enormous_timeout_does_not_overflow_a_wait():
    with Server("tcp://127.0.0.1:0") as server:
        waker = Waker()
        try:
            waker.wake()
            assert server.wait(1e308, waker) is False       # int(1e308 * 1000) used to raise OverflowError
            assert poll([waker], float("nan")) == []              # not a number: do not wait
        finally:
            waker.close()


def test_a_client_sent_a_frame_over_its_limit_connects_anew_and_carries_on():
    # ZeroMQ ends a connection for good on a frame over the limit (a
    # protocol error, never retried): one such frame left an agent deaf
    with Server("tcp://127.0.0.1:0") as server, Client(server.address) as client:
        client.send(m.Heartbeat())
        peer, _ = receive_one(server)
        assert server.send_frame(peer, b"\x00" * (server.codec.max_message_size + 1))
        deadline = time.monotonic() + 10
        answered = []
        while not answered and time.monotonic() < deadline:
            server.send(peer, m.Ping("again"))            # the same identity, once it is back
            client.wait(0.1)
            answered = [msg for _, msg in client.receive()]
        assert answered and answered[0] == m.Ping("again") and client.stats.reconnects == 1
        client.send(m.Pong("back"))
        assert receive_one(server) == (peer, m.Pong("back"))


def test_a_long_lived_poller_follows_a_client_that_connected_anew():
    with Server("tcp://127.0.0.1:0") as server, Client(server.address) as client:
        poller = Poller([client])
        client.send(m.Heartbeat())
        peer, _ = receive_one(server)
        server.send_frame(peer, b"\x00" * (server.codec.max_message_size + 1))
        deadline = time.monotonic() + 10
        while client.stats.reconnects == 0 and time.monotonic() < deadline:
            poller.poll(0.1)                              # its monitor is polled too
        assert client.stats.reconnects == 1
        ready = []
        while not ready and time.monotonic() < deadline:
            server.send(peer, m.Ping())
            ready = poller.poll(0.1)
        assert ready == [client] and list(client.receive())


def test_a_client_that_cannot_make_a_new_socket_keeps_its_connection_and_its_thread():
    # An agent's loop thread died when connecting anew hit the process's file limit (a loaded CI
    # machine): the client keeps the old connection, says why, and tries again later. Run in a child
    # process, whose file limit is lowered to what it uses.
    import subprocess
    import sys
    import textwrap
    program = textwrap.dedent("""
        import os, resource, sys
        from mesoslike.transport import Client, Server
        from mesoslike.wire import messages as m
        with Server("tcp://127.0.0.1:0") as server, Client(server.address) as client:
            client.send(m.Heartbeat())
            server.wait(5)
            (peer, _), = server.receive()
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            spare = []
            try:   # use every descriptor the child may open
                while True:
                    spare.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                pass
            client.reconnect()                     # raised out of the caller's thread before
            for fd in spare:
                os.close(fd)
            client.send(m.Pong("still"))           # the old connection still carries frames
            server.wait(5)
            print([msg for _, msg in server.receive()] == [m.Pong("still")], client.stats.reconnects)
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: __import__("resource").setrlimit(
                              __import__("resource").RLIMIT_NOFILE, (256, 256)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "0"], (done.stdout, done.stderr)
    assert "cannot connect anew to" in done.stderr and "keeping the old connection" in done.stderr, done.stderr


def test_a_client_dropped_unclosed_closes_itself_and_never_stops_the_processs_zeromq():
    """A client left unclosed (a test that forgot, an owner that dropped
    it) is collected with its socket and the socket reading its monitor.
    Collected by the socket library's own finalizers, in no set order, the
    reader could go first: the next monitor event — the connection dropping
    when the server goes — then blocked libzmq's I/O thread for good, and
    every socket of the process with it (CI: every in-process test after
    tests/test_security_master.py, whose raw peers were never closed,
    failed). The client closes both itself, monitor first, when dropped."""
    server = Server("tcp://127.0.0.1:0")
    gc.collect()   # earlier tests' garbage (an agent test's dropped executor) warns here, not below
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(20):
            dropped = Client(server.address)
            dropped.send(m.Ping(f"dropped {n}"))
            assert receive_one(server)[1] == m.Ping(f"dropped {n}")
            dropped.itself = dropped   # a cycle: only the garbage collector frees it
            del dropped
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not unclosed, unclosed   # each client closed its sockets itself, in order
    server.close()   # every dropped client's connection drops now
    with Server("tcp://127.0.0.1:0") as again, Client(again.address) as client:
        client.send(m.Ping("still here"))
        assert receive_one(again)[1] == m.Ping("still here")


def test_a_client_nobody_polls_never_stops_the_processs_zeromq():
    """libzmq's I/O thread sends monitor events with a blocking send: a
    client's monitor left unread (its owner stuck in a callback, or an
    endpoint never closed) while its connection keeps dropping filled its
    queue after ~1,000 events and stopped the I/O thread, and with it every
    socket of the process (a CI run: every in-process test after one such
    client failed). A peer that accepts and hangs up at once makes a
    connection drop per reconnect; the monitor a client makes holds what it is
    sent instead."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    hang_ups = 0

    def hang_up() -> None:
        nonlocal hang_ups
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.close()
            hang_ups += 1

    threading.Thread(target=hang_up, daemon=True).start()
    flapping = Client(f"tcp://127.0.0.1:{listener.getsockname()[1]}", reconnect_min=0.001, reconnect_max=0.001)
    try:
        deadline = time.monotonic() + 20
        while hang_ups < 3_000 and time.monotonic() < deadline:   # well past the ~1,000 that stopped it
            time.sleep(0.05)
        assert hang_ups >= 3_000, f"only {hang_ups} connections dropped"
        with Server("tcp://127.0.0.1:0") as server, Client(server.address) as client:
            client.send(m.Ping("still here"))
            assert receive_one(server)[1] == m.Ping("still here")
    finally:
        list(flapping.receive())   # its owner reads at last (what a stopped I/O thread waits for, before close)
        flapping.close()
        listener.close()


def test_a_servers_last_frames_before_it_goes_are_read_though_the_client_makes_its_socket_anew():
    # a server that answers and goes (an AppMaster's RELEASE, a master's last update before it exits): the frame
    # and the drop's monitor event wait together when the client looks (a loaded machine); the dropped
    # connection's socket is made anew, and what it had taken in is still read — not closed with it
    server = Server("tcp://127.0.0.1:0")
    client = Client(server.address)
    poller = Poller([client])
    try:
        client.send(m.Ping("hello"))
        peer, _ = receive_one(server)
        client._watch()   # the connection's events so far read: the next is the drop's
        assert not client._monitor.poll(0)
        server.send(peer, m.Pong("last"))
        server.close(linger=1.0)
        assert client._monitor.poll(10_000), "no drop event"   # nothing read until the drop waits too
        got: list = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            if client in poller.poll(0.05):
                got += [message for _, message in client.receive()]
        assert got == [m.Pong("last")] and client.stats.reconnects == 1
    finally:
        client.close()
        server.close()
