"""The services' HTTP seam with real sockets: bounded connections (idle
ones make room for a new client), slow clients cut at their deadline, a
stream written as it goes."""

from __future__ import annotations

import socket
import threading

import pytest

from mesoslike_frameworks.services.api import Request, Response
from mesoslike_frameworks.services.httpd import ServicesHTTPServer
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)


def _serve(**kwargs) -> ServicesHTTPServer:
    release = threading.Event()

    def handle(request: Request) -> Response:
        if request.path == "/stream":
            def stream(write) -> None:
                for number in range(3):
                    write(f"data: {number}\n\n".encode())
                release.wait(10)
            return Response(200, b"", "text/event-stream", stream=stream)
        return Response(200, f"{request.method} {request.path} {dict(request.query)}".encode(), "text/plain")
    server = ServicesHTTPServer("127.0.0.1", 0, handle, **kwargs)
    server.release = release  # type: ignore[attr-defined]
    server.start()
    return server


def _get(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def test_idle_connections_cannot_shut_a_client_out_and_are_cut_at_their_deadline():
    """The services' API is served as the master's is (mesoslike.http_server): a new client
    finds room however many connections sit idle — the one that waited longest for its request
    head is closed — and a connection that sends nothing is cut at its deadline."""
    server = _serve(max_connections=2, timeout=1.0)
    try:
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(2)]
        wait_until(lambda: server.open_connections == 2, 5, "two connections held")
        assert b"GET /x {'a': ['1']}" in _get(server.port, "/x?a=1")
        assert server.evicted >= 1
        wait_until(lambda: server.open_connections == 0, 10, "idle connections cut")
        for sock in idle:
            sock.close()
    finally:
        server.stop()


def test_a_client_trickling_its_request_is_cut_at_the_deadline_not_kept_alive():
    server = _serve(timeout=1.0)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as slow:
            stop = threading.Event()

            def trickle() -> None:   # a byte every 0.2 s: never idle for the timeout
                for byte in b"GET /x HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                    if stop.wait(0.2):
                        return
                    try:
                        slow.sendall(bytes([byte]))
                    except OSError:
                        return

            writer = threading.Thread(target=trickle, daemon=True)
            writer.start()
            wait_until(lambda: server.open_connections == 1, 5, "the slow client connected")
            wait_until(lambda: server.open_connections == 0, 10, "the slow client cut at its deadline")
            stop.set()
            writer.join(5)
    finally:
        server.stop()


def test_a_stream_is_written_as_it_goes():
    server = _serve()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while data.count(b"data: ") < 3:
                data += sock.recv(65536)
            assert b"text/event-stream" in data and b"data: 2\n\n" in data
        server.release.set()  # type: ignore[attr-defined]
    finally:
        server.stop()
