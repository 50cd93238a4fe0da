"""The master's HTTP endpoints: ``GET /state``, ``/health``, ``/metrics``,
the operator's ``POST /weights`` and ``POST /quota``, and the dashboard's
files at ``/`` and ``/static/`` (:func:`dashboard_files`).

Bounded (docs/reliability.rst, *Bounds*): one dispatcher thread accepts
connections and reads their request heads (request line and headers, at most
:data:`MAX_HEAD` bytes) without blocking; only a whole head goes to one of
``workers`` threads, which answers it. A connection has ``timeout`` seconds
to send its head, as long again (once a worker takes it up) to send its body,
and must then read the answer at :data:`CHUNK` bytes per ``timeout`` at
least; otherwise it is closed. Beyond ``max_connections`` open at once, new
ones get ``503`` and are closed. So slow or silent clients hold no thread
and no socket for long, and the threads never grow with them.

Views read the master's state themselves (the runtime renders ``/state``
from a snapshot outside its lock: :class:`Fresh`).
"""

from __future__ import annotations

import io
import json
import logging
import math
import selectors
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from socketserver import BaseServer
from typing import Any, Callable, Generic, Mapping, TypeVar, cast

from mesoslike.errors import ConfigError
from mesoslike.secret_files import check_secret_file_mode

__all__ = ["StatusHTTPServer", "Fresh", "Action", "Authorize", "request_authorization", "request_query", "ViewError",
           "MAX_BODY", "MAX_HEAD", "CHUNK", "tls_context",
           "dashboard_files", "DASHBOARD_DIR", "DASHBOARD_HEADERS"]

log = logging.getLogger("mesoslike.master.http")

T = TypeVar("T")

#: a POST handler: request body -> (HTTP status, JSON-able reply)
Action = Callable[[bytes], tuple[int, object]]
#: (method, path, the Authorization header or None) -> None to serve it, or (401 or 403, why)
Authorize = Callable[[str, str, "str | None"], "tuple[int, str] | None"]


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
#: the largest POST body read (an operator request is a few hundred bytes)
MAX_BODY = 1 << 20
#: the largest request head (request line and headers) read
MAX_HEAD = 64 * 1024
#: answers are written in pieces of this size; a client has ``timeout`` seconds to take each
CHUNK = 64 * 1024
#: how often the dispatcher looks for connections past their deadline at most (s)
_SWEEP = 0.25
_BUSY_REPLY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
               b'Content-Length: 57\r\n\r\n{"error": "too many connections to the master; try again"}')


class Fresh(Generic[T]):
    """A value computed for its callers by ``compute``, at most one
    computation at a time: :meth:`get` returns a value whose computation
    began after the call did (so it is never older than the call), and
    callers that arrive while one runs wait and share the next one. Ten
    clients polling ``/state`` thus cost about one rendering at a time,
    not ten."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._cond = threading.Condition()
        self._started = 0        # computations begun
        self._done = 0           # the number of the computation self._value comes from
        self._running = False
        self._value: T | None = None

    def get(self) -> T:
        with self._cond:
            wanted = self._started + 1   # one that begins after now serves this call
            while self._running and self._done < wanted:
                self._cond.wait()
            if self._done >= wanted:
                assert self._value is not None
                return self._value
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
            self._value, self._done, self._running = value, number, False
            self._cond.notify_all()
        return value


class StatusHTTPServer:
    """``views`` maps a path to a function returning (content type, body);
    ``actions`` maps a path to a POST handler (:data:`Action`). See the
    module docstring for ``workers``, ``timeout`` and ``max_connections``.
    ``dashboard``: the files served at their exact paths with no
    authorization (default: :func:`dashboard_files`; ``{}``: none)."""

    def __init__(self, host: str, port: int, views: dict[str, Callable[[], tuple[str, bytes]]],
                 actions: dict[str, Action] | None = None, *, workers: int = 8, timeout: float = 10.0,
                 max_connections: int = 64, tls: ssl.SSLContext | None = None,
                 authorize: Authorize | None = None,
                 dashboard: Mapping[str, tuple[str, bytes]] | None = None) -> None:
        if dashboard is None:
            dashboard = dashboard_files()
        self._handler = _make_handler(views, actions or {}, self, authorize, dashboard)
        #: with TLS, every connection is wrapped (the handshake is the dispatcher's, as the head is)
        self._tls = tls
        self.timeout = timeout
        self.max_connections = max_connections
        try:
            self._listener = socket.create_server((host, port), reuse_port=False, backlog=128)
        except OSError as exc:
            raise ConfigError(f"cannot serve HTTP on {host}:{port}: {exc}") from None
        self._listener.setblocking(False)
        address = self._listener.getsockname()
        self.host, self.port = str(address[0]), int(address[1])
        self._workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="master-http")
        self._lock = threading.Lock()
        #: open connections -> the time (monotonic) by which they must be done with their phase
        self._deadlines: dict[socket.socket, float] = {}
        #: the request heads read by the dispatcher, until their handler takes them
        self._heads: dict[socket.socket, bytes] = {}
        self._stopping = threading.Event()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._thread = threading.Thread(target=self._dispatch, name="master-http", daemon=True)
        #: connections refused (over max_connections) and closed at their deadline
        self.refused = 0
        self.timed_out = 0

    @property
    def address(self) -> str:
        return f"{'https' if self._tls is not None else 'http'}://{self.host}:{self.port}"

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._deadlines)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with self._lock:
            open_connections = list(self._deadlines)
        for connection in open_connections:
            _abort(connection)
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._listener.close()
        self._wake_read.close()
        self._wake_write.close()

    # ----------------------------------------------------------- dispatcher
    def _dispatch(self) -> None:
        """Accept; read each connection's request head as it comes (a whole
        head goes to a worker); close those past their deadline."""
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        heads: dict[socket.socket, bytearray] = {}    # connections whose head is being read
        try:
            while not self._stopping.is_set():
                for key, _ in selector.select(_SWEEP):
                    if key.fileobj is self._listener:
                        for connection in self._accept():
                            selector.register(connection, selectors.EVENT_READ)
                            heads[connection] = bytearray()
                    elif key.fileobj is self._wake_read:
                        _drain(self._wake_read)
                    elif isinstance(key.fileobj, socket.socket):
                        connection = key.fileobj
                        done = self._read_head(connection, heads[connection])
                        if done is not None:
                            selector.unregister(connection)
                            head = heads.pop(connection)
                            if done:
                                self._serve_later(connection, bytes(head))
                            else:
                                self._close(connection)
                for connection in self._overdue():
                    if connection in heads:
                        selector.unregister(connection)
                        del heads[connection]
                        self._close(connection)
                    else:  # a worker has it: cut its reads and writes short, the worker closes it
                        _abort(connection)
        except Exception:
            log.exception("the HTTP dispatcher failed; HTTP is off")
        finally:
            for connection in heads:
                self._close(connection)
            selector.close()

    def _read_head(self, connection: socket.socket, head: bytearray) -> bool | None:
        """Read what ``connection`` sent into ``head``: True once the head is
        whole, False if the connection is to be closed (it closed, failed,
        or sent a head over MAX_HEAD), None while more is to come."""
        try:
            if isinstance(connection, ssl.SSLSocket):
                connection.do_handshake()   # done at once after the first time
            chunk = connection.recv(MAX_HEAD)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None
        except OSError:  # ssl.SSLError too: not TLS, or a client that does not trust us
            return False
        if not chunk:
            return False
        head += chunk
        if b"\r\n\r\n" in head or b"\n\n" in head:
            return True
        return None if len(head) <= MAX_HEAD else False

    def _accept(self) -> list[socket.socket]:
        accepted: list[socket.socket] = []
        while True:
            try:
                connection, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return accepted
            except OSError as exc:  # e.g. out of file descriptors: try again at the next wake-up
                log.warning("HTTP: accepting a connection failed: %s", exc)
                return accepted
            with self._lock:
                full = len(self._deadlines) >= self.max_connections
                if not full:
                    self._deadlines[connection] = time.monotonic() + self.timeout
            if full:
                self.refused += 1
                try:
                    connection.setblocking(False)
                    connection.send(_BUSY_REPLY)
                except OSError:
                    pass
                connection.close()
            else:
                connection.setblocking(False)
                if self._tls is not None:
                    plain = connection
                    try:
                        connection = self._tls.wrap_socket(plain, server_side=True, do_handshake_on_connect=False)
                    except (OSError, ValueError):
                        self._close(plain)
                        continue
                    with self._lock:
                        self._deadlines[connection] = self._deadlines.pop(plain)
                accepted.append(connection)

    def _serve_later(self, connection: socket.socket, head: bytes) -> None:
        with self._lock:
            self._deadlines[connection] = math.inf  # waiting for a worker is not the client's doing
        try:
            self._workers.submit(self._serve, connection, head)
        except RuntimeError:  # shutting down
            self._close(connection)

    def _serve(self, connection: socket.socket, head: bytes) -> None:
        """A worker: answer one request whose head has been read."""
        with self._lock:
            if connection not in self._deadlines:
                return  # closed meanwhile (the server stops)
            self._deadlines[connection] = time.monotonic() + self.timeout
        try:
            connection.setblocking(True)
            connection.settimeout(self.timeout)
            address = connection.getpeername()
            with self._lock:
                self._heads[connection] = head
            # the handler only passes the server along; it needs none of BaseServer's methods
            self._handler(connection, address, cast(BaseServer, self))
        except Exception as exc:  # a client gone, too slow, or cut at its deadline
            log.debug("HTTP: a connection ended early: %s", exc)
        finally:
            with self._lock:
                self._heads.pop(connection, None)
            self._close(connection)

    def extend(self, connection: socket.socket) -> None:
        """``connection`` made progress: it has ``timeout`` seconds for the next step."""
        self._set_deadline(connection, time.monotonic() + self.timeout)

    def hold(self, connection: socket.socket) -> None:
        """The request is read and the answer is being made: no deadline meanwhile."""
        self._set_deadline(connection, math.inf)

    def _set_deadline(self, connection: socket.socket, deadline: float) -> None:
        with self._lock:
            if connection in self._deadlines:
                self._deadlines[connection] = deadline

    def head(self, connection: socket.socket) -> bytes:
        """The head the dispatcher read from ``connection`` (for its handler)."""
        with self._lock:
            return self._heads.pop(connection, b"")

    def _overdue(self) -> list[socket.socket]:
        """Connections past their deadline, each reported once."""
        now = time.monotonic()
        with self._lock:
            overdue = [connection for connection, deadline in self._deadlines.items() if deadline <= now]
            for connection in overdue:
                self._deadlines[connection] = math.inf  # closed now, or by its worker soon
        self.timed_out += len(overdue)
        return overdue

    def _close(self, connection: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(connection, None)
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        connection.close()

    def _wake(self) -> None:
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass


def _abort(connection: socket.socket) -> None:
    """End a connection another thread may be blocked on (its recv returns, its send fails)."""
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _drain(wake: socket.socket) -> None:
    try:
        while wake.recv(4096):
            pass
    except (BlockingIOError, InterruptedError, OSError):
        pass


class _Prefixed(io.RawIOBase):
    """A connection's input: the bytes the dispatcher already read, then the socket."""

    def __init__(self, prefix: bytes, connection: socket.socket) -> None:
        self._prefix = memoryview(prefix)
        self._connection = connection

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # a writable buffer (typeshed's WriteableBuffer)
        if self._prefix:
            size = min(len(buffer), len(self._prefix))
            buffer[:size] = self._prefix[:size]
            self._prefix = self._prefix[size:]
            return size
        return self._connection.recv_into(buffer)


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


#: the request an HTTP worker thread is serving (see request_authorization)
_request = threading.local()


def request_authorization() -> str | None:
    """The ``Authorization`` header of the request this thread is serving
    (an action that needs to know who asks: the reserving principal of
    ``/reserve``); the server checked it already."""
    return getattr(_request, "authorization", None)


def request_query() -> str:
    """The query string (after ``?``) of the GET this thread is serving, for a view that takes parameters."""
    return getattr(_request, "query", "")


class ViewError(Exception):
    """Raised by a view: answer ``status`` with ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _make_handler(views: dict[str, Callable[[], tuple[str, bytes]]], actions: dict[str, Action],
                  server: StatusHTTPServer, authorize: Authorize | None,
                  dashboard: Mapping[str, tuple[str, bytes]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        """Serves one request whose head the dispatcher has read."""

        server_version = "mesoslike"

        def setup(self) -> None:
            self.connection = self.request
            self.rfile = io.BufferedReader(_Prefixed(server.head(self.request), self.request))
            self.wfile = self.request.makefile("wb")   # buffered: a write goes out whole (flushed per request)

        def finish(self) -> None:
            try:
                self.wfile.close()
            except OSError:
                pass  # the client is gone
            finally:
                self.rfile.close()

        def _refused(self, method: str, path: str) -> bool:
            """Answer 401/403 (True) if ``authorize`` refuses the request."""
            refusal = authorize(method, path, self.headers.get("Authorization")) if authorize else None
            if refusal is None:
                return False
            code, message = refusal
            self._reply(code, "application/json", json.dumps({"error": message}).encode(),
                        {"WWW-Authenticate": 'Bearer realm="mesoslike"'} if code == 401 else {})
            return True

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            server.hold(self.request)
            page = dashboard.get(self.path.split("?", 1)[0])
            if page is not None:   # the dashboard's own files: public, no cluster data in them
                self._reply(200, page[0], page[1], DASHBOARD_HEADERS)
                return
            if self._refused("GET", self.path.split("?", 1)[0].rstrip("/") or "/"):
                return
            view = views.get(self.path.split("?", 1)[0].rstrip("/") or "/")
            if view is None:
                self._reply(404, "application/json", json.dumps(
                    {"error": f"no such endpoint {self.path[:200]}", "endpoints": sorted(views)}).encode())
                return
            _request.authorization = self.headers.get("Authorization")
            _request.query = self.path.partition("?")[2]
            try:
                content_type, body = view()
            except ViewError as refusal:
                self._json(refusal.status, {"error": str(refusal)})
                return
            except Exception:
                log.exception("HTTP view %s failed", self.path[:200])
                self._reply(500, "application/json", b'{"error": "internal error"}')
                return
            self._reply(200, content_type, body)

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            action = actions.get(path)
            if action is None:
                self._json(405 if path in views else 404,
                           {"error": f"no POST endpoint {path[:200]}", "post_endpoints": sorted(actions)})
                return
            if self._refused("POST", path):
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self._json(400, {"error": f"a body of 0 to {MAX_BODY} bytes with its Content-Length is needed"})
                return
            body = self.rfile.read(length)
            server.hold(self.request)
            _request.authorization = self.headers.get("Authorization")
            try:
                code, reply = action(body)
            except Exception:
                log.exception("HTTP action %s failed", path)
                code, reply = 500, {"error": "internal error"}
            self._json(code, reply)

        def do_PUT(self) -> None:  # noqa: N802
            self._json(405, {"error": "use GET or POST"})

        do_DELETE = do_PUT

        def _json(self, code: int, reply: object) -> None:
            self._reply(code, "application/json", json.dumps(reply).encode())

        def _reply(self, code: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
            server.extend(self.request)
            self.send_response(code)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            view = memoryview(body)
            for start in range(0, len(body), CHUNK):   # a slow reader may take its time, a stalled one may not
                self.wfile.write(view[start:start + CHUNK])
                self.wfile.flush()
                server.extend(self.request)

        def log_message(self, fmt: str, *args) -> None:
            log.debug("http: " + fmt, *args)

    return Handler
