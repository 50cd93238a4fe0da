"""The one HTTP server edge (mesoslike.http_server) under hostile clients:
2,000 slow or idle connections against a real master and a real agent
(``/health`` keeps answering), deadlines that a trickle does not reset,
bounded heads and bodies, and long-lived streams that hold no worker."""

import http.client
import re
import resource
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from e2e_helpers import cluster  # noqa: F401  (fixture)
from mesoslike.http_server import HTTPServer, Request, Response, Stream, json_response
from waiting import wait_until

pytestmark = pytest.mark.timeout(240)

ATTACKERS = 2000


def raise_file_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard),
                                                    hard))


class Slowloris:
    """``count`` connections to host:port that never finish a request: half
    send nothing, half trickle a header byte now and then. A connection the
    server closes is opened again, so ``count`` stay open (as an attacker's)."""

    def __init__(self, host: str, port: int, count: int) -> None:
        self.host, self.port = host, port
        self.sockets: list[socket.socket | None] = [None] * count
        self.reopened = 0
        self._stop = threading.Event()
        for index in range(count):
            self._open(index)
        self._thread = threading.Thread(target=self._keep, daemon=True)
        self._thread.start()

    def _open(self, index: int) -> None:
        try:
            conn = socket.create_connection((self.host, self.port), timeout=5)
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" if index % 2 else b"")
            conn.setblocking(False)
            self.sockets[index] = conn
        except OSError:
            self.sockets[index] = None

    def _keep(self) -> None:
        while not self._stop.wait(0.5):
            for index, conn in enumerate(self.sockets):
                if self._stop.is_set():
                    return
                try:
                    if conn is None:
                        raise OSError("closed")
                    if conn.recv(1) == b"":       # closed by the server (its deadline)
                        raise OSError("closed")
                except BlockingIOError:
                    if index % 2:
                        try:
                            conn.send(b"X")       # one more byte of a header that never ends
                        except OSError:
                            pass
                    continue
                except OSError:
                    pass
                if conn is not None:
                    conn.close()
                self.reopened += 1
                self._open(index)

    def open_count(self) -> int:
        return sum(conn is not None for conn in self.sockets)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for conn in self.sockets:
            if conn is not None:
                conn.close()


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(re.search(r"^Threads:\s+(\d+)", status.read(), re.M).group(1))


def health_answers(url: str, attempts: int) -> int:
    answered = 0
    for _ in range(attempts):
        try:
            with urllib.request.urlopen(url + "/health", timeout=15) as reply:
                answered += reply.status == 200
        except (OSError, urllib.error.URLError):
            pass
    return answered


@pytest.mark.parametrize("target", ["master", "agent"])
def test_health_keeps_answering_under_2000_slow_or_idle_connections(cluster, target):  # noqa: F811
    """The issue: under 200 slowloris connections the master answered /health
    4 times in 23; the agent's server gave each connection a thread."""
    raise_file_limit(ATTACKERS + 1024)
    cluster.start_master()
    cluster.start_agent("a1", "cpus:1;mem:256")
    if target == "master":
        url, pid = cluster.http, cluster.master.popen.pid
    else:
        (agent,) = cluster.state()["agents"]
        url, pid = agent["http_address"], cluster.agents["a1"].popen.pid
    assert health_answers(url, 1) == 1
    threads_before = threads_of(pid)
    host, port = url.split("//")[1].rsplit(":", 1)
    attack = Slowloris(host, int(port), ATTACKERS)
    try:
        assert attack.open_count() >= ATTACKERS * 0.95
        answered = health_answers(url, 20)
        assert attack.open_count() >= ATTACKERS * 0.95              # the attack was on all along
        assert answered == 20
        assert threads_of(pid) <= threads_before + 8                # at most its worker pool: no thread per connection
    finally:
        attack.close()
    print(f"{target}: /health answered {answered} of 20 under {ATTACKERS} slow connections "
          f"({attack.reopened} reopened after the server's deadline)")


# ------------------------------------------------------------------ the edge alone
@pytest.fixture
def serve():
    servers = []

    def start(handler, **options):
        server = HTTPServer("127.0.0.1", 0, handler, **options)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def echo(request: Request) -> Response:
    return json_response(200, {"method": request.method, "path": request.path, "query": request.query,
                               "body": len(request.body)})


def raw(server, data: bytes, timeout: float = 10.0) -> bytes:
    with socket.create_connection((server.host, server.port), timeout=timeout) as conn:
        conn.sendall(data)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
        return reply


def trickled_until_closed(conn: socket.socket, seconds: float = 8.0) -> bool:
    """Send a byte every 0.1 s (never idle) until the server closes (True) or ``seconds`` pass."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            conn.sendall(b"X")
        except OSError:
            return True
        time.sleep(0.1)
    return False


def test_a_trickling_client_is_closed_at_its_deadline_while_others_are_served(serve):
    server = serve(echo, timeout=1.0)
    conn = socket.create_connection((server.host, server.port), timeout=10)
    conn.sendall(b"GET / HTTP/1.1\r\n")
    closed = trickled_until_closed(conn)
    conn.close()
    assert closed and server.timed_out >= 1
    with urllib.request.urlopen(f"{server.address}/a?b=1", timeout=10) as reply:
        assert reply.read() == b'{"method": "GET", "path": "/a", "query": {"b": "1"}, "body": 0}'


def test_a_kept_alive_connection_may_idle_past_the_deadline_but_its_next_head_may_not_trickle(serve):
    # pymesos sends every call over one kept-alive connection and does not retry a closed one: a
    # framework that declined for 60 s got a broken pipe on its next call when idle connections were
    # closed after the timeout (a CI run). Mesos's libprocess keeps them; the head's deadline runs
    # from its first byte
    server = serve(echo, timeout=1.0)
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    conn.request("GET", "/first")
    assert b'"/first"' in conn.getresponse().read()
    kept = conn.sock
    time.sleep(2.5)    # the stimulus: idle for longer than the deadline (nothing to wait for)
    conn.request("GET", "/after-idling")
    assert b'"/after-idling"' in conn.getresponse().read() and conn.sock is kept
    conn.sock.sendall(b"GET / HTTP/1.1\r\n")          # the next head begins, then trickles
    closed = trickled_until_closed(conn.sock)
    conn.close()
    assert closed and server.timed_out >= 1


def test_a_client_that_never_reads_a_large_answer_is_cut_off_at_its_deadline(serve):
    body = b"x" * (64 << 20)     # more than the kernel's buffers on both ends hold
    server = serve(lambda request: Response(200, content_type="application/octet-stream", body=body), timeout=1.0)
    conn = socket.create_connection((server.host, server.port), timeout=10)
    conn.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")     # and never reads
    wait_until(lambda: server.timed_out >= 1 and server.open_connections == 0, 20, "the reader to be cut off")
    conn.close()


def test_heads_and_bodies_are_bounded(serve):
    server = serve(echo, max_body=1000)
    assert raw(server, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n").startswith(
        b"HTTP/1.1 431")
    assert raw(server, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n").startswith(b"HTTP/1.1 413")
    chunked = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + b"200\r\n" + b"a" * 512 + \
        b"\r\n" + b"200\r\n" + b"a" * 512 + b"\r\n0\r\n\r\n"
    assert raw(server, chunked).startswith(b"HTTP/1.1 413")
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    conn.request("POST", "/x", body=b"b" * 1000)
    assert conn.getresponse().read() == b'{"method": "POST", "path": "/x", "query": {}, "body": 1000}'
    conn.request("GET", "/again")                                    # the same connection, kept alive
    assert b'"/again"' in conn.getresponse().read()
    conn.close()
    assert raw(server, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert server.bad_requests == 4


def test_a_stream_holds_no_worker_and_ends_when_its_client_leaves(serve):
    streams: list[Stream] = []
    closed = threading.Event()

    def handler(request: Request) -> Response:
        if request.path == "/events":
            stream = Stream(max_buffered=10_000)
            stream.on_close(closed.set)
            stream.send(b"data: hello\n\n")
            streams.append(stream)
            return Response(200, content_type="text/event-stream", stream=stream)
        return echo(request)

    server = serve(handler, workers=1)
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    conn.request("GET", "/events")
    reply = conn.getresponse()
    assert reply.status == 200 and reply.getheader("Content-Type") == "text/event-stream"
    assert reply.readline() == b"data: hello\n"
    # the one worker is free: requests are answered while the stream is open
    for index in range(5):
        with urllib.request.urlopen(f"{server.address}/n{index}", timeout=10) as answer:
            assert answer.status == 200
    assert streams[0].send(b"data: more\n\n")
    assert reply.readline() == b"\n" and reply.readline() == b"data: more\n"
    reply.close()
    conn.close()                                                     # the client leaves
    assert closed.wait(10) and streams[0].closed
    assert not streams[0].send(b"data: late\n\n")


def test_a_stream_whose_client_does_not_read_is_closed_not_grown(serve):
    holder: list[Stream] = []

    def handler(request: Request) -> Response:
        stream = Stream(max_buffered=64 * 1024)
        holder.append(stream)
        return Response(200, content_type="application/recordio", stream=stream)

    server = serve(handler, timeout=2.0)
    conn = socket.create_connection((server.host, server.port), timeout=10)
    conn.sendall(b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n")            # and never reads
    wait_until(lambda: holder, 10, "the stream")
    sent = 0
    while holder[0].send(b"x" * 4096) and sent < 100_000_000:
        sent += 4096
    assert holder[0].closed and sent < 100_000_000
    conn.close()


def test_the_end_of_an_answer_reaches_a_client_that_reads_slower_than_the_server_writes(serve):
    # the connection is closed by abort(), which drops what the transport still holds; drain()
    # returns with up to 64 KiB held, so the tail of an answer to a slow reader (a streamed
    # /state over a busy host) was lost and the client saw an incomplete answer (a CI run)
    body = bytes(range(256)) * (4 * 256)     # 1 MiB
    server = serve(lambda request: Response(200, content_type="application/octet-stream", body=body))
    # small kernel buffers on both ends (accepted sockets inherit the listener's), as on a host whose
    # client is far or busy: most of the answer waits in the server's transport, not in the kernel
    server._listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    for _ in range(3):
        conn = socket.socket()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.settimeout(30)
        conn.connect((server.host, server.port))
        conn.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
        conn.close()
        head, _, got = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and len(got) == len(body) and got == body
