"""The services' HTTP server: a small seam between sockets and the API's
plain ``Request -> Response`` functions (:mod:`.api`).

Bounded, as the master's HTTP server is (docs/reliability.rst, "Bounds"):
at most ``max_connections`` connections at once (one thread each: an event
stream holds its connection), the rest answered ``503`` and closed; a
connection has ``timeout`` seconds for each read (request head, body) and
each write, and is closed when idle that long between requests; bodies over
:data:`~.api.MAX_BODY` are refused. A long-lived answer (``Response.stream``,
the server-sent events of ``/v2/events``) writes as it goes, each write
flushed.

When the project's shared HTTP server lands, this module is what changes:
the handlers stay as they are.
"""

from __future__ import annotations

import logging
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from mesoslike import ConfigError
from mesoslike_frameworks.services.api import MAX_BODY, Request, Response

__all__ = ["ServicesHTTPServer", "parse_request"]

log = logging.getLogger("mesoslike_frameworks.services.httpd")

_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
         b'Content-Length: 52\r\n\r\n{"message": "too many connections; try again later"}')


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int,
                 tls: ssl.SSLContext | None) -> None:
        self.max_connections = max_connections
        self.open_connections = 0
        self.refused = 0
        self.tls = tls
        self._count = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        with self._count:
            full = self.open_connections >= self.max_connections
            if not full:
                self.open_connections += 1
        if full:
            self.refused += 1
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            if self.tls is not None:
                request.settimeout(10.0)
                request = self.tls.wrap_socket(request, server_side=True)
            super().process_request_thread(request, client_address)
        except (OSError, ssl.SSLError):
            self.shutdown_request(request)
        finally:
            with self._count:
                self.open_connections -= 1


def parse_request(method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"",
                  client: str = "") -> Request:
    """A :class:`~.api.Request` from a request line's target (path and query)."""
    parsed = urllib.parse.urlsplit(target)
    return Request(method.upper(), urllib.parse.unquote(parsed.path),
                   urllib.parse.parse_qs(parsed.query, keep_blank_values=True),
                   {k.lower(): v for k, v in (headers or {}).items()}, body, client)


class ServicesHTTPServer:
    """Serves ``handle`` (a :meth:`~.api.ServicesApi.handle`) on ``host:port``."""

    def __init__(self, host: str, port: int, handle: Callable[[Request], Response], *, timeout: float = 10.0,
                 max_connections: int = 256, tls: ssl.SSLContext | None = None) -> None:
        handler = _handler(handle, timeout)
        try:
            self._server = _Server((host, port), handler, max_connections, tls)
        except OSError as exc:
            raise ConfigError(f"cannot serve HTTP on {host}:{port}: {exc}") from None
        self.host, self.port = str(self._server.server_address[0]), int(self._server.server_address[1])
        self._tls = tls
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="services-http", daemon=True)

    @property
    def address(self) -> str:
        return f"{'https' if self._tls else 'http'}://{self.host}:{self.port}"

    @property
    def open_connections(self) -> int:
        return self._server.open_connections

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(handle: Callable[[Request], Response], timeout: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "mesoslike-services"

        # every read and write of the connection (StreamRequestHandler sets it on the socket)
        timeout_seconds = timeout

        def setup(self) -> None:
            self.request.settimeout(self.timeout_seconds)
            super().setup()

        def _serve(self) -> None:
            length_text = self.headers.get("Content-Length")
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                self._answer(Response(411, b'{"message": "send a Content-Length, not a chunked body"}'), close=True)
                return
            try:
                length = int(length_text or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self._answer(Response(413, f'{{"message": "a body of 0 to {MAX_BODY} bytes"}}'.encode()), close=True)
                return
            body = self.rfile.read(length) if length else b""
            request = parse_request(self.command, self.path, dict(self.headers.items()), body,
                                    str(self.client_address[0]))
            self._answer(handle(request))

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve  # noqa: N815

        def _answer(self, response: Response, close: bool = False) -> None:
            self.send_response(response.status)
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", response.content_type)
            if response.stream is not None:
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                self.close_connection = True

                def write(data: bytes) -> None:
                    self.wfile.write(data)
                    self.wfile.flush()
                try:
                    response.stream(write)
                except (OSError, ValueError):
                    pass     # the client went away
                return
            self.send_header("Content-Length", str(len(response.body)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)
            self.wfile.flush()

        def log_message(self, fmt: str, *args) -> None:
            log.debug("http: " + fmt, *args)

    return Handler
