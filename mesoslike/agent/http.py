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
(:mod:`.files` refuses anything that leads out, 403, and counts it).

With the cluster's credentials (``--credentials``: docs/agent.rst,
"Authorization") every endpoint but ``/health`` needs a principal's token —
``Authorization: Bearer TOKEN``, or ``Basic`` with the token as password, as
a browser following a dashboard link sends once asked (401 otherwise) — and
``/files`` serves a framework's sandboxes only to the principals
``access_sandboxes`` allows (403; ``/files/browse`` of the root lists only
those). The
server runs in threads of its own; what it shows of the agent comes from
the :class:`AgentView` it is given, which takes the agent loop's lock.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Protocol
from urllib.parse import parse_qs, urlsplit

from mesoslike.agent.files import REFUSALS, FileAccessError, MayRead, SandboxAccess, SandboxFiles
from mesoslike.errors import ConfigError

__all__ = ["AgentHTTPServer", "AgentView", "REQUEST_TIMEOUT"]

log = logging.getLogger("mesoslike.agent.http")

#: seconds a connection may take to send its request (a slow client cannot hold a thread)
REQUEST_TIMEOUT = 10.0
#: what a 401 asks for: a bearer token, or (a browser) a user name and the token as password
_CHALLENGE = 'Bearer realm="mesoslike agent", Basic realm="mesoslike agent (password: your token)"'
#: the endpoints anyone may read
_PUBLIC = ("/health",)


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


class AgentHTTPServer:
    """Serves ``view`` and the sandboxes below ``sandbox_root`` on ``host:port``
    (0: any port); with ``access``, to the principals it admits only."""

    def __init__(self, host: str, port: int, view: AgentView, files: SandboxFiles,
                 access: SandboxAccess | None = None) -> None:
        self.view = view
        self.files = files
        self.access = access
        self.counters = FileCounters()
        try:
            self._server = ThreadingHTTPServer((host, port), _make_handler(self))
        except OSError as exc:
            raise ConfigError(f"cannot serve the agent's HTTP on {host}:{port}: {exc}") from None
        self._server.daemon_threads = True
        self.host, self.port = str(self._server.server_address[0]), int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-http", daemon=True)

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    # -------------------------------------------------------------- routes
    def route(self, path: str) -> Callable[[dict[str, str], MayRead | None], tuple[int, str, object]] | None:
        return {
            "/health": lambda q, may: (200, "json", self.view.health_document()),
            "/state": lambda q, may: (200, "json", self.view.state_document()),
            "/monitor/statistics": lambda q, may: (200, "json", self.view.statistics_document()),
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


def _make_handler(server: AgentHTTPServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "mesoslike-agent"
        timeout = REQUEST_TIMEOUT

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            parts = urlsplit(self.path)
            path = parts.path.rstrip("/") or "/"
            # one value per parameter, decoded once: %2e%2e%2f arrives as ../ and is refused as such
            query = {key: values[-1] for key, values in parse_qs(parts.query, keep_blank_values=True).items()}
            try:
                may_read, refusal = server.admit(path, self.headers.get("Authorization"))
                if refusal:
                    server.counters.refuse("unauthorized")
                    log.warning("refused %s from %s: %s", path[:200], self.client_address[0], refusal)
                    self._send(401, "json", {"error": refusal}, {"WWW-Authenticate": _CHALLENGE})
                    return
                if path == "/files/download":
                    self._download(_required(query, "path"), may_read)
                    return
                route = server.route(path)
                if route is None:
                    self._send(404, "json", {"error": f"no such endpoint {path}",
                                             "endpoints": ["/health", "/state", "/monitor/statistics", "/metrics",
                                                           "/files/browse", "/files/read", "/files/download"]})
                    return
                self._send(*route(query, may_read))
            except FileAccessError as exc:
                if exc.refusal:
                    server.counters.refuse(exc.refusal)
                    log.warning("refused %s from %s: %s", self.path[:200], self.client_address[0], exc)
                self._send(exc.status, "json", {"error": str(exc)})
            except Exception:
                log.exception("HTTP %s failed", path)
                self._send(500, "json", {"error": "internal error"})

        def _download(self, path: str, may_read: MayRead | None) -> None:
            source, size = server.files.open(path, may_read)
            with source:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                name = path.rstrip("/").rsplit("/", 1)[-1].replace('"', "")
                self.send_header("Content-Disposition", f'attachment; filename="{name}"')
                self.end_headers()
                shutil.copyfileobj(source, self.wfile, 64 * 1024)

        def _send(self, code: int, kind: str, body: object, headers: dict[str, str] | None = None) -> None:
            if kind == "json":
                data, content_type = json.dumps(body).encode(), "application/json"
            else:
                data, content_type = str(body).encode(), "text/plain; version=0.0.4"
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802
            self._send(405, "json", {"error": "the agent's endpoints are read-only: use GET"})

        do_PUT = do_DELETE = do_POST

        def log_message(self, fmt: str, *args: object) -> None:
            log.debug("http: " + fmt, *args)

    return Handler
