"""The master's HTTP endpoints: ``GET /state``, ``/health``, ``/metrics``,
and the operator's ``POST /weights`` and ``POST /quota``.

Served from a thread of the master process; every request takes the master's
lock for the moment it reads the core, so it sees a consistent state.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from mesoslike.errors import ConfigError

__all__ = ["StatusHTTPServer"]

log = logging.getLogger("mesoslike.master.http")


#: a POST handler: request body -> (HTTP status, JSON-able reply)
Action = Callable[[bytes], tuple[int, object]]
#: the largest POST body read (an operator request is a few hundred bytes)
MAX_BODY = 1 << 20


class StatusHTTPServer:
    """``views`` maps a path to a function returning (content type, body);
    ``actions`` maps a path to a POST handler (:data:`Action`)."""

    def __init__(self, host: str, port: int, views: dict[str, Callable[[], tuple[str, bytes]]],
                 actions: dict[str, Action] | None = None) -> None:
        handler = _make_handler(views, actions or {})
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise ConfigError(f"cannot serve HTTP on {host}:{port}: {exc}") from None
        self._server.daemon_threads = True
        address = self._server.server_address
        self.host, self.port = str(address[0]), int(address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="master-http", daemon=True)

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() would wait forever for a loop never started
            self._server.shutdown()
        self._server.server_close()


def _make_handler(views: dict[str, Callable[[], tuple[str, bytes]]],
                  actions: dict[str, Action]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "mesoslike"

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            view = views.get(self.path.split("?", 1)[0].rstrip("/") or "/")
            if view is None:
                self._reply(404, "application/json", json.dumps(
                    {"error": f"no such endpoint {self.path}", "endpoints": sorted(views)}).encode())
                return
            try:
                content_type, body = view()
            except Exception:
                log.exception("HTTP view %s failed", self.path)
                self._reply(500, "application/json", b'{"error": "internal error"}')
                return
            self._reply(200, content_type, body)

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            action = actions.get(path)
            if action is None:
                self._json(405 if path in views else 404,
                           {"error": f"no POST endpoint {path}", "post_endpoints": sorted(actions)})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self._json(400, {"error": f"a body of 0 to {MAX_BODY} bytes with its Content-Length is needed"})
                return
            try:
                code, reply = action(self.rfile.read(length))
            except Exception:
                log.exception("HTTP action %s failed", path)
                code, reply = 500, {"error": "internal error"}
            self._json(code, reply)

        def do_PUT(self) -> None:  # noqa: N802
            self._json(405, {"error": "use GET or POST"})

        do_DELETE = do_PUT

        def _json(self, code: int, reply: object) -> None:
            self._reply(code, "application/json", json.dumps(reply).encode())

        def _reply(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args) -> None:
            log.debug("http: " + fmt, *args)

    return Handler
