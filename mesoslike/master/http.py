"""The master's HTTP endpoints: ``GET /state``, ``/health``, ``/metrics``,
the operator's ``POST /weights`` and ``POST /quota``, and the dashboard's
files at ``/`` and ``/static/`` (:func:`dashboard_files`).

Served by :class:`mesoslike.http_server.HTTPServer` (the one HTTP edge:
no thread per connection, deadlines for a request's head and body, a bound
on connections that evicts the longest-waiting idle one, streams for
long-lived answers; docs/reliability.rst, *Bounds*); this module only
routes requests to views, actions and handlers, and asks ``authorize``
(:class:`~mesoslike.master.http_auth.HTTPAuthorization`), whose principal
goes with the request to its action or handler (``Request.principal``).

Views read the master's state themselves (the runtime renders ``/state``
from a snapshot outside its lock: :class:`Fresh`).
"""

from __future__ import annotations

import logging
import ssl
import threading
from pathlib import Path
from typing import Callable, Generic, Mapping, TypeVar

import attrs

from mesoslike.errors import ConfigError
from mesoslike.http_server import (CHUNK, MAX_BODY, MAX_CONNECTIONS, MAX_HEAD, Handler, HTTPServer, Request, Response,
                                   json_response)
from mesoslike.master.http_auth import HTTPRefusal
from mesoslike.secret_files import check_secret_file_mode

__all__ = ["StatusHTTPServer", "Fresh", "Action", "Authorize", "ViewError",
           "MAX_BODY", "MAX_HEAD", "CHUNK", "tls_context", "dashboard_files", "DASHBOARD_DIR", "DASHBOARD_HEADERS"]

log = logging.getLogger("mesoslike.master.http")

T = TypeVar("T")

#: a POST handler: the request (its body, its caller's principal) -> (HTTP status, JSON-able reply)
Action = Callable[[Request], tuple[int, object]]
#: (method, path, the Authorization header or None) -> a refusal, or the caller's principal (None: anonymous)
Authorize = Callable[[str, str, "str | None"], "HTTPRefusal | str | None"]


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server's TLS context from PEM files (``--http-tls-cert``,
    ``--http-tls-key``, the key mode 0600); ConfigError naming what is wrong."""
    check_secret_file_mode(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot use the TLS certificate {cert} with key {key}: {exc}") from None
    return context


class Fresh(Generic[T]):
    """A value computed for its callers by ``compute``, at most one
    computation at a time: :meth:`get` returns a value whose computation
    began after the call did (so it is never older than the call), and
    callers that arrive while one runs wait and share the next one. Ten
    clients polling ``/state`` thus cost about one rendering at a time,
    not ten. A value is kept only while callers wait for it (a large one
    is not held between calls; no later call could use it anyway)."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._cond = threading.Condition()
        self._started = 0        # computations begun
        self._done = 0           # the number of the computation self._value comes from
        self._running = False
        self._waiting = 0        # callers waiting for another's computation
        self._value: T | None = None

    def get(self) -> T:
        with self._cond:
            wanted = self._started + 1   # one that begins after now serves this call
            if self._running:
                self._waiting += 1
                try:
                    while self._running and self._done < wanted:
                        self._cond.wait()
                finally:
                    self._waiting -= 1
                if self._done >= wanted:
                    value = self._value
                    if not self._waiting:
                        self._value = None
                    assert value is not None
                    return value
            self._running = True
            self._started += 1
            number = self._started
        try:
            value = self._compute()
        except BaseException:
            with self._cond:
                self._running = False
                self._cond.notify_all()
            raise
        with self._cond:
            self._value = value if self._waiting else None
            self._done, self._running = number, False
            self._cond.notify_all()
        return value


class StatusHTTPServer(HTTPServer):
    """``views`` maps a path to a function returning (content type, body);
    ``actions`` maps a path to a POST handler (:data:`Action`);
    ``handlers`` maps a path to a plain request handler
    (:data:`mesoslike.http_server.Handler`, any method; it may stream) for
    endpoints that need the whole request. ``authorize`` decides for all of
    them. See :mod:`mesoslike.http_server` for ``workers``, ``timeout`` and
    ``max_connections``. ``dashboard``: the files served at their exact
    paths with no authorization (default: :func:`dashboard_files`; ``{}``:
    none)."""

    def __init__(self, host: str, port: int, views: dict[str, Callable[[], tuple[str, bytes]]],
                 actions: dict[str, Action] | None = None, *, workers: int = 8, timeout: float = 10.0,
                 max_connections: int = MAX_CONNECTIONS, tls: ssl.SSLContext | None = None,
                 authorize: Authorize | None = None,
                 dashboard: Mapping[str, tuple[str, bytes]] | None = None,
                 handlers: Mapping[str, Handler] | None = None, body_limits: Mapping[str, int] | None = None) -> None:
        self._views = views
        self._actions = actions or {}
        self._handlers = dict(handlers or {})
        self._authorize = authorize
        self._dashboard = dashboard_files() if dashboard is None else dashboard
        super().__init__(host, port, self._handle, name="master-http", workers=workers, timeout=timeout,
                         max_connections=max_connections, max_body=MAX_BODY, tls=tls, body_limits=body_limits)

    def _handle(self, request: Request) -> Response:
        target = request.target.split("?", 1)[0]
        page = self._dashboard.get(target) if request.method == "GET" else None
        if page is not None:   # the dashboard's own files: public, no cluster data in them
            return Response(200, page[1], page[0], DASHBOARD_HEADERS)
        path = target.rstrip("/") or "/"
        handler = self._handlers.get(path)
        if handler is not None:
            verdict = self._authorized(request, path)
            return verdict if isinstance(verdict, Response) else handler(verdict)
        if request.method == "GET":
            verdict = self._authorized(request, path)
            if isinstance(verdict, Response):
                return verdict
            view = self._views.get(path)
            if view is None:
                return json_response(404, {"error": f"no such endpoint {request.target[:200]}",
                                           "endpoints": sorted(self._views | self._handlers.keys())})
            try:
                content_type, body = view()
            except ViewError as refusal:
                return json_response(refusal.status, {"error": str(refusal)})
            except Exception:
                log.exception("HTTP view %s failed", request.target[:200])
                return json_response(500, {"error": "internal error"})
            return Response(200, body, content_type)
        if request.method == "POST":
            action = self._actions.get(path)
            if action is None:
                return json_response(405 if path in self._views else 404,
                                     {"error": f"no POST endpoint {path[:200]}", "post_endpoints": sorted(self._actions)})
            verdict = self._authorized(request, path)
            if isinstance(verdict, Response):
                return verdict
            try:
                code, reply = action(verdict)
            except Exception:
                log.exception("HTTP action %s failed", path)
                code, reply = 500, {"error": "internal error"}
            return json_response(code, reply)
        return json_response(405, {"error": "use GET or POST"})

    def _authorized(self, request: Request, path: str) -> Request | Response:
        """The request with its caller's principal, or the 401/403 to answer
        if ``authorize`` refuses it."""
        if self._authorize is None:
            return request
        verdict = self._authorize(request.method, path, request.header("Authorization"))
        if isinstance(verdict, HTTPRefusal):
            return json_response(verdict.status, {"error": verdict.message},
                                 {"WWW-Authenticate": 'Bearer realm="mesoslike"'} if verdict.status == 401 else {})
        return request if verdict == request.principal else attrs.evolve(request, principal=verdict)


# ---------------------------------------------------------------- dashboard
#: the dashboard's files (docs/dashboard.rst), shipped in the package (setup.cfg package_data)
DASHBOARD_DIR = Path(__file__).resolve().parent / "static"
_CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                  ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}
#: sent with the dashboard's files. /state holds what peers said (host names,
#: task names, attributes): the page shows it as text only, and its policy
#: lets it run its own script and reach its own master only, nothing else
DASHBOARD_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def dashboard_files(directory: Path = DASHBOARD_DIR) -> dict[str, tuple[str, bytes]]:
    """URL path -> (content type, bytes) of the dashboard: ``/`` is its
    ``index.html``, every other file of ``directory`` is ``/static/NAME``.
    Read once, at start: only these exact paths are ever served (a request
    never names a file on disk, so ``/static/../x`` is no file's path). The
    files are public — the page asks for the token itself (``--http-auth all``)."""
    files: dict[str, tuple[str, bytes]] = {}
    for path in sorted(directory.iterdir()) if directory.is_dir() else []:
        content_type = _CONTENT_TYPES.get(path.suffix)
        if path.is_file() and content_type is not None:
            files[f"/static/{path.name}"] = (content_type, path.read_bytes())
    if "/static/index.html" in files:
        files["/"] = files.pop("/static/index.html")
    return files


class ViewError(Exception):
    """Raised by a view: answer ``status`` with ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
