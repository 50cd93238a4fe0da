"""The agent's HTTP endpoints (``--http-port``), as Mesos's agent has them:

=====================================  ==========================================================
``GET /health``                        ``{"healthy": true, "registered": ..., "agent_id": ...}``
``GET /state``                         the agent: id, resources, isolation, work dir, its tasks
                                       (state, pid, sandbox), recovery errors
``GET /monitor/statistics``            per task: usage (CPU seconds, memory) and limits
``GET /metrics``                       Prometheus text: refused file requests by kind, tasks,
                                       sandboxes collected, checkpoint failures
``GET /files/browse?path=P``           the entries of a sandbox directory
``GET /files/read?path=P&offset=O&length=L``  ``{"data": ..., "offset": ...}`` (Mesos's format)
``GET /files/download?path=P``         the file's bytes
=====================================  ==========================================================

``path`` is relative to the sandbox root: ``FRAMEWORK/TASK/stdout``
(:mod:`.files` refuses anything that leads out, 403, and counts it). The
server is :class:`mesoslike.http_server.HTTPServer` (its loop and worker
threads, deadlines and connection bound: docs/reliability.rst, *Bounds*);
what it shows of the agent comes from the :class:`AgentView` it is given,
which takes the agent loop's lock.
"""

from __future__ import annotations

import logging
import threading
from typing import BinaryIO, Callable, Iterator, Mapping, Protocol

from mesoslike.agent.files import REFUSALS, FileAccessError, SandboxFiles
from mesoslike.http_server import CHUNK, MAX_CONNECTIONS, Handler, HTTPServer, Request, Response, json_response

__all__ = ["AgentHTTPServer", "AgentView", "REQUEST_TIMEOUT"]

log = logging.getLogger("mesoslike.agent.http")

#: seconds a connection may take to send its request (a slow client cannot hold a thread)
REQUEST_TIMEOUT = 10.0
#: threads answering requests (reading sandbox files, rendering /state)
WORKERS = 4
#: the endpoints, for a 404's list
ENDPOINTS = ["/health", "/state", "/monitor/statistics", "/metrics", "/files/browse", "/files/read", "/files/download"]


class AgentView(Protocol):
    """What the endpoints read of the agent (thread-safe)."""

    def state_document(self) -> dict: ...

    def statistics_document(self) -> list[dict]: ...

    def metrics_text(self) -> str: ...

    def health_document(self) -> dict: ...


class FileCounters:
    """Refused ``/files`` requests by kind (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.refused = {kind: 0 for kind in REFUSALS}

    def refuse(self, kind: str) -> None:
        with self._lock:
            self.refused[kind] = self.refused.get(kind, 0) + 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.refused)


class AgentHTTPServer(HTTPServer):
    """Serves ``view`` and the sandboxes below ``sandbox_root`` on ``host:port``
    (0: any port), at most ``max_connections`` connections at once."""

    def __init__(self, host: str, port: int, view: AgentView, files: SandboxFiles, *,
                 max_connections: int = MAX_CONNECTIONS, handlers: Mapping[str, Handler] | None = None,
                 body_limits: Mapping[str, int] | None = None) -> None:
        self.view = view
        self.files = files
        self.counters = FileCounters()
        #: endpoints that take the whole request (the v1 executor API, mesoslike.agent.v1_executor)
        self.handlers = dict(handlers or {})
        super().__init__(host, port, self._handle, name="agent-http", workers=WORKERS, timeout=REQUEST_TIMEOUT,
                         max_connections=max_connections, server_header="mesoslike-agent", body_limits=body_limits)

    def _handle(self, request: Request) -> Response:
        handler = self.handlers.get(request.path.rstrip("/") or "/")
        if handler is not None:
            return handler(request)
        if request.method != "GET":
            return json_response(405, {"error": "the agent's endpoints are read-only: use GET"})
        path = request.path.rstrip("/") or "/"
        # one value per parameter, decoded once: %2e%2e%2f arrives as ../ and is refused as such
        query = request.query
        try:
            if path == "/files/download":
                return self._download(_required(query, "path"))
            route = self.route(path)
            if route is None:
                return json_response(404, {"error": f"no such endpoint {path}", "endpoints": ENDPOINTS})
            return _reply(*route(query))
        except FileAccessError as exc:
            if exc.refusal:
                self.counters.refuse(exc.refusal)
                log.warning("refused %s from %s: %s", request.target[:200], request.client, exc)
            return json_response(exc.status, {"error": str(exc)})

    def _download(self, path: str) -> Response:
        source, size = self.files.open(path)
        name = path.rstrip("/").rsplit("/", 1)[-1].replace('"', "")
        return Response(200, content_type="application/octet-stream", chunks=_pieces(source, size), length=size,
                        headers={"Content-Disposition": f'attachment; filename="{name}"'}, on_done=source.close)

    # -------------------------------------------------------------- routes
    def route(self, path: str) -> Callable[[dict[str, str]], tuple[int, str, object]] | None:
        return {
            "/health": lambda q: (200, "json", self.view.health_document()),
            "/state": lambda q: (200, "json", self.view.state_document()),
            "/monitor/statistics": lambda q: (200, "json", self.view.statistics_document()),
            "/metrics": lambda q: (200, "text", self.view.metrics_text()),
            "/files/browse": lambda q: (200, "json", self.files.browse(q.get("path", ""))),
            "/files/read": self._read,
        }.get(path)

    def _read(self, query: dict[str, str]) -> tuple[int, str, object]:
        offset, length = _integer(query, "offset", 0), _integer(query, "length", None)
        return 200, "json", self.files.read(_required(query, "path"), offset if offset is not None else 0, length)


def _required(query: dict[str, str], name: str) -> str:
    if name not in query:
        raise FileAccessError(400, f"the query parameter {name!r} is required")
    return query[name]


def _integer(query: dict[str, str], name: str, default: int | None) -> int | None:
    if name not in query:
        return default
    try:
        return int(query[name])
    except ValueError:
        raise FileAccessError(400, f"{name} must be an integer, got {query[name]!r}") from None


def _reply(code: int, kind: str, body: object) -> Response:
    if kind == "json":
        return json_response(code, body)
    return Response(code, str(body).encode(), "text/plain; version=0.0.4")


def _pieces(source: BinaryIO, size: int) -> Iterator[bytes]:
    """The file's first ``size`` bytes (its size when opened: what Content-Length said), a piece at a time."""
    while size > 0 and (piece := source.read(min(CHUNK, size))):
        size -= len(piece)
        yield piece
