"""The services' HTTP server: a small seam between the project's HTTP
server (:mod:`mesoslike.http_server`, the one the master and the agents
serve on) and the API's plain ``Request -> Response`` functions (:mod:`.api`).

Bounded as the master's is (docs/reliability.rst, "Bounds"): no thread per
connection — idle, slow and silent connections cost a socket, never a
thread; a connection has ``timeout`` seconds to send its whole request head
and as long for its body, however it trickles; at most ``max_connections``
are open, a new one evicting the one that has waited longest for its
request head; bodies over :data:`~.api.MAX_BODY` are refused (413). A
long-lived answer (``Response.stream``, the server-sent events of
``/v2/events``) is written by the server as the API's writer feeds it, on a
thread of its own that ends when the client goes.
"""

from __future__ import annotations

import logging
import ssl
import threading
import urllib.parse
from typing import Callable

from mesoslike.http_server import HTTPServer, Stream
from mesoslike.http_server import Request as HTTPRequest
from mesoslike.http_server import Response as HTTPResponse
from mesoslike_frameworks.services.api import MAX_BODY, Request, Response

__all__ = ["ServicesHTTPServer", "parse_request"]

log = logging.getLogger("mesoslike_frameworks.services.httpd")


def parse_request(method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"",
                  client: str = "") -> Request:
    """A :class:`~.api.Request` from a request line's target (path and query)."""
    parsed = urllib.parse.urlsplit(target)
    return Request(method.upper(), urllib.parse.unquote(parsed.path),
                   urllib.parse.parse_qs(parsed.query, keep_blank_values=True),
                   {k.lower(): v for k, v in (headers or {}).items()}, body, client)


class ServicesHTTPServer:
    """Serves ``handle`` (a :meth:`~.api.ServicesApi.handle`) on ``host:port``
    (0: any free port), with TLS if ``tls`` is given."""

    def __init__(self, host: str, port: int, handle: Callable[[Request], Response], *, timeout: float = 10.0,
                 max_connections: int = 256, tls: ssl.SSLContext | None = None) -> None:
        self._handle = handle
        self._server = HTTPServer(host, port, self._answer, name="services-http", timeout=timeout,
                                  max_connections=max_connections, max_body=MAX_BODY, tls=tls,
                                  server_header="mesoslike-services")
        self.host, self.port = self._server.host, self._server.port

    @property
    def address(self) -> str:
        return self._server.address

    @property
    def open_connections(self) -> int:
        return self._server.open_connections

    @property
    def evicted(self) -> int:
        """Connections closed to make room for a new one (they waited longest for their request head)."""
        return self._server.evicted

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()

    def _answer(self, request: HTTPRequest) -> HTTPResponse:
        response = self._handle(parse_request(request.method, request.target, dict(request.headers), request.body,
                                              request.client))
        if response.stream is None:
            return HTTPResponse(response.status, response.body, response.content_type, dict(response.headers))
        stream = Stream()
        threading.Thread(target=_feed, args=(response.stream, stream), name="services-stream", daemon=True).start()
        return HTTPResponse(response.status, content_type=response.content_type, headers=dict(response.headers),
                            stream=stream)


def _feed(produce: Callable[[Callable[[bytes], None]], None], stream: Stream) -> None:
    """Run the API's long-lived answer, its writes fed to ``stream``; it ends
    when ``produce`` returns or the client goes (a write then raises)."""

    def write(data: bytes) -> None:
        if not stream.send(data):
            raise OSError(f"the client is gone ({stream.why or 'closed'})")

    try:
        produce(write)
    except (OSError, ValueError):
        pass   # the client went away
    except Exception:
        log.exception("a long-lived answer failed")
    finally:
        stream.close("the answer ended")
