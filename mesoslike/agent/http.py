"""The agent's HTTP endpoints (``--http-port``), as Mesos's agent has them:

=====================================  ==========================================================
``GET /health``                        ``{"healthy": true, "registered": ..., "agent_id": ...}``
``GET /state``                         the agent: id, resources, isolation, work dir, its tasks
                                       (state, pid, sandbox), recovery errors
``GET /monitor/statistics``            per task: usage (CPU seconds, memory) and limits
``GET /containers[?container_id=ID]``  per running container (a task's, a custom executor's): its
                                       ids, Mesos's ``ContainerStatus`` and ``ResourceStatistics``
``GET /metrics``                       Prometheus text: refused file requests by kind, tasks,
                                       sandboxes collected, checkpoint failures
``GET /files/browse?path=P``           the entries of a sandbox directory
``GET /files/read?path=P&offset=O&length=L``  ``{"data": ..., "offset": ...}`` (Mesos's format)
``GET /files/download?path=P``         the file's bytes
=====================================  ==========================================================

``path`` is relative to the sandbox root: ``FRAMEWORK/TASK/stdout``
(:mod:`.files` refuses anything that leads out, 403, and counts it).

With the cluster's credentials (``--credentials``: docs/agent.rst,
"Authorization") every endpoint but ``/health`` needs a principal's token —
``Authorization: Bearer TOKEN``, or ``Basic`` with the token as password, as
a browser following a dashboard link sends once asked (401 otherwise) — and
``/files`` serves a framework's sandboxes only to the principals
``access_sandboxes`` allows (403; ``/files/browse`` of the root lists only
those; ``/containers`` leaves out the containers of the others). The
server is :class:`mesoslike.http_server.HTTPServer` (its loop and worker
threads, deadlines and connection bound: docs/reliability.rst, *Bounds*);
what it shows of the agent comes from the :class:`AgentView` it is given,
which takes the agent loop's lock.
"""

from __future__ import annotations

import logging
import threading
from typing import BinaryIO, Callable, Iterator, Mapping, Protocol

from mesoslike.agent.files import REFUSALS, FileAccessError, MayRead, SandboxAccess, SandboxFiles
from mesoslike.http_server import CHUNK, MAX_CONNECTIONS, Handler, HTTPServer, Request, Response, json_response

__all__ = ["AgentHTTPServer", "AgentView", "REQUEST_TIMEOUT"]

log = logging.getLogger("mesoslike.agent.http")

#: seconds a connection may take to send its request (a slow client cannot hold a thread)
REQUEST_TIMEOUT = 10.0
#: threads answering requests (reading sandbox files, rendering /state)
WORKERS = 4
#: what a 401 asks for: a bearer token, or (a browser) a user name and the token as password
_CHALLENGE = 'Bearer realm="mesoslike agent", Basic realm="mesoslike agent (password: your token)"'
#: the endpoints anyone may read
_PUBLIC = ("/health",)
#: the endpoints, for a 404's list
ENDPOINTS = ["/health", "/state", "/monitor/statistics", "/containers", "/metrics", "/files/browse", "/files/read",
             "/files/download"]


class AgentView(Protocol):
    """What the endpoints read of the agent (thread-safe)."""

    def state_document(self) -> dict: ...

    def statistics_document(self) -> list[dict]: ...

    def containers_document(self, may_read: MayRead | None = None, container_id: str | None = None) -> list[dict]: ...

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
    (0: any port), at most ``max_connections`` connections at once; with
    ``access``, to the principals it admits only."""

    def __init__(self, host: str, port: int, view: AgentView, files: SandboxFiles,
                 access: SandboxAccess | None = None, *, max_connections: int = MAX_CONNECTIONS,
                 handlers: Mapping[str, Handler] | None = None, body_limits: Mapping[str, int] | None = None) -> None:
        self.view = view
        self.files = files
        self.access = access
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
            may_read, refusal = self.admit(path, request.header("Authorization"))
            if refusal:
                self.counters.refuse("unauthorized")
                log.warning("refused %s from %s: %s", path[:200], request.client, refusal)
                return json_response(401, {"error": refusal}, {"WWW-Authenticate": _CHALLENGE})
            if path == "/files/download":
                return self._download(_required(query, "path"), may_read)
            route = self.route(path)
            if route is None:
                return json_response(404, {"error": f"no such endpoint {path}", "endpoints": ENDPOINTS})
            return _reply(*route(query, may_read))
        except FileAccessError as exc:
            if exc.refusal:
                self.counters.refuse(exc.refusal)
                log.warning("refused %s from %s: %s", request.target[:200], request.client, exc)
            return json_response(exc.status, {"error": str(exc)})

    def _download(self, path: str, may_read: MayRead | None) -> Response:
        source, size = self.files.open(path, may_read)
        name = path.rstrip("/").rsplit("/", 1)[-1].replace('"', "")
        return Response(200, content_type="application/octet-stream", chunks=_pieces(source, size), length=size,
                        headers={"Content-Disposition": f'attachment; filename="{name}"'}, on_done=source.close)

    # -------------------------------------------------------------- routes
    def route(self, path: str) -> Callable[[dict[str, str], MayRead | None], tuple[int, str, object]] | None:
        return {
            "/health": lambda q, may: (200, "json", self.view.health_document()),
            "/state": lambda q, may: (200, "json", self.view.state_document()),
            "/monitor/statistics": lambda q, may: (200, "json", self.view.statistics_document()),
            # Mesos's show_nested and show_standalone are taken and ignored: no container here is either
            "/containers": lambda q, may: (200, "json", self.view.containers_document(may, q.get("container_id"))),
            "/metrics": lambda q, may: (200, "text", self.view.metrics_text()),
            "/files/browse": lambda q, may: (200, "json", self.files.browse(q.get("path", ""), may)),
            "/files/read": self._read,
        }.get(path)

    def _read(self, query: dict[str, str], may_read: MayRead | None) -> tuple[int, str, object]:
        offset, length = _integer(query, "offset", 0), _integer(query, "length", None)
        return 200, "json", self.files.read(_required(query, "path"), offset if offset is not None else 0, length,
                                            may_read)

    def admit(self, path: str, authorization: str | None) -> tuple[MayRead | None, str]:
        """Who may see what of a request: (``may_read`` for its ``/files``,
        None: anything), or why it is refused (401) — "" if it is not."""
        if self.access is None or path in _PUBLIC:
            return None, ""
        access = self.access
        principal = access.principal(authorization)
        if principal is None:
            return None, "a valid token of the cluster's credentials is needed: Authorization: Bearer TOKEN"
        return (lambda framework_dir: access.may_read(principal, framework_dir)), ""


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
