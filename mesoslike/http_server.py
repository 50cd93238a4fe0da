"""The one HTTP/1.1 server edge of mesoslike: the master's endpoints
(:mod:`mesoslike.master.http`), the agent's (:mod:`mesoslike.agent.http`)
and whatever joins them. Handlers stay plain functions, request in,
response out (:data:`Handler`); this module owns every socket, deadline
and bound.

How it holds up (docs/reliability.rst, *Bounds*; docs/security.rst):

- **No thread per connection.** One asyncio loop, on a thread of its own,
  reads every connection; only a whole request (head and body) goes to
  one of ``workers`` threads, which runs the handler. Idle, slow and
  silent connections cost a socket and a few kilobytes, never a thread,
  so 2,000 slowloris connections leave ``/health`` answering
  (``tests/test_http_server.py``).
- **Deadlines, not idle timers.** A connection has ``timeout`` seconds
  for its TLS handshake (with TLS), then ``timeout`` seconds (from then,
  or, kept alive, from the first byte of its next request) to send its whole request head,
  and as long again for its body; a client trickling a byte at a time is closed at the deadline all
  the same. A kept-alive connection may wait idle between requests for as
  long as its client likes (as Mesos's libprocess lets it: clients such as
  pymesos keep one connection and do not retry a closed one); it is the
  first to be evicted at the bound. An answer must be taken at :data:`CHUNK` bytes per
  ``timeout`` at least. The handler's own time is not the client's: no
  deadline runs while it works.
- **Bounded.** At most ``max_connections`` connections are open (default
  :data:`MAX_CONNECTIONS`). When a new one would pass the bound, the
  connection that has waited longest for its request head is closed to
  make room (``evicted``): a flood of idle connections cannot shut a
  legitimate client out, it only shortens the flood's own lives. Only when
  every open connection is being answered or streaming is the new one
  refused, ``503`` (``refused``). The process's open-file limit is raised
  to fit the bound where the hard limit allows (a warning says when it
  does not). A request head is at most :data:`MAX_HEAD` bytes (``431``),
  a body ``max_body`` (:data:`MAX_BODY`, ``413``; ``body_limits`` sets
  other bounds for exact paths).
- **Long-lived answers.** A handler may answer with a :class:`Stream` —
  server-sent events, a chunked RecordIO event stream — that other threads
  feed with :meth:`Stream.send`. The loop writes it as it comes, holding
  no worker thread, so streams never starve requests; a stream keeps at
  most ``max_buffered`` bytes for a client that reads slower than it is
  fed, and is closed (the feeder's ``send`` returns False) beyond that or
  when the client goes. A body made piece by piece (a file,
  ``Response.chunks``) is read a piece at a time on a worker thread.

Why asyncio with ``h11`` rather than a server library: the standard
library's ``ThreadingHTTPServer`` gives every connection a thread for as
long as it stays open (200 slowloris connections left ``/health`` answered
4 times in 23); waitress and cheroot bound their threads but time a
connection out only after it goes *idle* (a trickle keeps it alive) and
refuse new connections at their bound; aiohttp and uvicorn have no
deadline for a request head at all and no connection bound. Each would
have needed its internals patched for the three properties above. ``h11``
(python-hyper, the HTTP/1.1 parser under httpx and uvicorn's pure-Python
mode) is a sans-I/O parser — this project's own layering: a pure machine
for the protocol, and a thin edge (this module) for the sockets, the
deadlines and the bounds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import resource
import socket
import ssl
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Awaitable, Callable, Iterator, Mapping, TypeVar
from urllib.parse import parse_qs, urlsplit

import attrs
import h11

from mesoslike.errors import ConfigError

__all__ = ["HTTPServer", "Request", "Response", "Stream", "Handler", "json_response", "MAX_CONNECTIONS",
           "MAX_HEAD", "MAX_BODY", "CHUNK", "DEFAULT_TIMEOUT", "STREAM_BUFFER"]

log = logging.getLogger("mesoslike.http")

T = TypeVar("T")

#: connections open at once, by default (each costs a socket and a few kilobytes: no thread)
MAX_CONNECTIONS = 4096
#: the largest request head (request line and headers)
MAX_HEAD = 64 * 1024
#: the largest request body, by default (an operator's request is a few hundred bytes)
MAX_BODY = 1 << 20
#: answers are written in pieces of this size; a client has ``timeout`` seconds to take each
CHUNK = 64 * 1024
#: seconds a client has for each step: its request head, its body, taking a piece of the answer
DEFAULT_TIMEOUT = 10.0
#: bytes a stream keeps for a client that reads slower than it is fed, by default
STREAM_BUFFER = 1 << 20
#: file descriptors kept free beyond the connections (the process's own sockets, files, children)
_SPARE_FILES = 512
_READ_SIZE = 64 * 1024


@attrs.frozen
class Request:
    """One whole request: ``target`` as sent (path and query), ``headers``
    with lower-case names (repeated ones joined by ", "), ``client`` the
    peer's address. The TCP connection it came on: ``client_port``,
    ``local`` (the server's end: address and port) and ``connection``, a
    number no other connection of this process had (0: unknown) — what a
    handler that learns something of the peer may remember it by.
    ``principal``: who the request authenticated as, once a server's
    authorization said so (None: nobody, or not asked)."""

    method: str
    target: str
    headers: Mapping[str, str]
    body: bytes = b""
    client: str = ""
    client_port: int = 0
    local: tuple[str, int] = ("", 0)
    connection: int = 0
    principal: str | None = None

    @property
    def path(self) -> str:
        """The target's path, without the query (not percent-decoded)."""
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, str]:
        """The query's parameters, each decoded once, the last of a repeated one."""
        return {key: values[-1] for key, values in
                parse_qs(urlsplit(self.target).query, keep_blank_values=True).items()}

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@attrs.frozen
class Response:
    """What a handler answers: ``status``, ``body`` and its ``content_type``,
    more ``headers``. Instead of ``body``, a body made piece by piece
    (``chunks``, each ``next`` run on a worker thread; ``length``: their
    total, None to send them chunked) or a long-lived :class:`Stream`.
    ``on_done`` is called once the answer is sent or abandoned (e.g. to
    close the file ``chunks`` reads)."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: Mapping[str, str] = attrs.field(factory=dict)
    chunks: Iterator[bytes] | None = None
    length: int | None = None
    stream: Stream | None = None
    on_done: Callable[[], None] | None = None


#: a request handler: called on a worker thread, never raises (a raise is a 500, logged)
Handler = Callable[[Request], Response]


def json_response(status: int, document: object, headers: Mapping[str, str] | None = None) -> Response:
    """``document`` as JSON."""
    return Response(status, json.dumps(document).encode(), "application/json", headers or {})


class Stream:
    """A long-lived response body that other threads feed (server-sent
    events, a RecordIO event stream). :meth:`send` queues bytes for the
    client and returns False once the stream is closed — by :meth:`close`,
    by the client leaving, by the server stopping, or because more than
    ``max_buffered`` bytes waited for a client reading too slowly.
    :meth:`on_close` callbacks run once, when it closes (the feeder's cue
    to forget it). A feeder that would rather wait for the client than
    lose it calls :meth:`wait_for_room` before it sends; one whose body
    cannot be finished calls :meth:`abort` (the answer then ends short, an
    error to the client, never a body that looks whole). Thread-safe; O(1)
    per call."""

    def __init__(self, max_buffered: int = STREAM_BUFFER) -> None:
        self.max_buffered = max_buffered
        self._lock = threading.Condition(threading.Lock())
        self._queued: deque[bytes] = deque()
        self._buffered = 0
        self._closed = False
        #: the answer is to end short (:meth:`abort`)
        self.aborted = False
        #: why it closed ("" while open)
        self.why = ""
        self._wake: Callable[[], None] | None = None
        self._callbacks: list[Callable[[], None]] = []

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, data: bytes) -> bool:
        """Queue ``data`` for the client; False if the stream is closed (now or before)."""
        with self._lock:
            if self._closed:
                return False
            if self._buffered + len(data) > self.max_buffered:
                overflow = True
            else:
                overflow = False
                self._queued.append(bytes(data))
                self._buffered += len(data)
            wake = self._wake
        if overflow:
            self.close(f"the client read too slowly: more than {self.max_buffered} bytes waited")
            return False
        if wake is not None:
            wake()
        return True

    @property
    def buffered(self) -> int:
        """Bytes queued, not yet taken by the server."""
        return self._buffered

    def wait_for_room(self, size: int, timeout: float) -> bool:
        """Wait until ``size`` more bytes fit (at once if nothing waits,
        whatever ``size``) or the stream closes; False if it closed or
        ``timeout`` passed without room."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._closed and self._buffered and self._buffered + size > self.max_buffered:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return not self._closed

    def abort(self, why: str) -> None:
        """End the stream short: what is queued is dropped and the
        connection closed without the body's end (the client sees an
        incomplete answer, not a finished one)."""
        with self._lock:
            if not self._closed:
                self.aborted = True
                self._queued.clear()
                self._buffered = 0
        self.close(why)

    def close(self, why: str = "closed") -> None:
        """End the stream (what is queued is still sent); idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed, self.why = True, why
            wake, callbacks, self._callbacks = self._wake, self._callbacks, []
            self._lock.notify_all()
        if wake is not None:
            wake()
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a stream's close callback failed")

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the stream closes (at once if it has)."""
        with self._lock:
            if not self._closed:
                self._callbacks.append(callback)
                return
        callback()

    # the server's side
    def _attach(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wake = wake

    def _take(self) -> tuple[list[bytes], bool]:
        with self._lock:
            taken, self._queued, self._buffered = list(self._queued), deque(), 0
            if taken:
                self._lock.notify_all()   # a feeder waiting for room
            return taken, self._closed


class _Deadline(Exception):
    """A client missed a deadline (its head, its body, taking the answer)."""


class _Reject(Exception):
    """Answer ``status`` with ``message`` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


#: numbers the connections of every server of the process (never one number twice)
_serials = itertools.count(1)


class _Connection:
    __slots__ = ("writer", "evicted", "serial")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.evicted = False
        self.serial = next(_serials)


class HTTPServer:
    """Serves ``handler`` on ``host:port`` (0: any free port; ``port`` is the
    bound one) with TLS if ``tls`` is given. See the module docstring for
    ``workers``, ``timeout``, ``max_connections``, ``max_body``. Binds at
    once (ConfigError if it cannot); serves from :meth:`start` to
    :meth:`stop`. Counters (read without a lock, for /metrics):
    ``refused`` (503: the bound, nothing to evict), ``evicted`` (closed to
    make room), ``timed_out`` (closed at a deadline), ``bad_requests``."""

    def __init__(self, host: str, port: int, handler: Handler, *, name: str = "http", workers: int = 8,
                 timeout: float = DEFAULT_TIMEOUT, max_connections: int = MAX_CONNECTIONS, max_body: int = MAX_BODY,
                 tls: ssl.SSLContext | None = None, server_header: str = "mesoslike",
                 body_limits: Mapping[str, int] | None = None) -> None:
        if workers < 1 or max_connections < 1 or max_body < 0 or not timeout > 0:
            raise ConfigError(f"bad HTTP server bounds: workers={workers}, max_connections={max_connections}, "
                              f"max_body={max_body}, timeout={timeout}")
        self._handler = handler
        self.name = name
        self.timeout = timeout
        self.max_connections = max_connections
        self.max_body = max_body
        #: exact paths whose bodies may be larger (or must be smaller) than max_body: the v1 APIs' calls
        #: carry framework messages of tens of megabytes
        self.body_limits = dict(body_limits or {})
        self._tls = tls
        self._server_header = server_header.encode()
        _fit_file_limit(max_connections, name)
        try:
            self._listener = socket.create_server((host, port), backlog=1024)
        except OSError as exc:
            raise ConfigError(f"cannot serve HTTP on {host}:{port}: {exc}") from None
        self._listener.setblocking(False)
        address = self._listener.getsockname()
        self.host, self.port = str(address[0]), int(address[1])
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-worker")
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(_quiet)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._ready = threading.Event()
        self._server: asyncio.AbstractServer | None = None
        #: every open connection; those waiting for a request head, longest waiting first
        self._open: set[_Connection] = set()
        self._waiting: OrderedDict[_Connection, None] = OrderedDict()
        self._streams: set[Stream] = set()
        self._stopped = False
        self.refused = 0
        self.evicted = 0
        self.timed_out = 0
        self.bad_requests = 0

    @property
    def address(self) -> str:
        return f"{'https' if self._tls is not None else 'http'}://{self.host}:{self.port}"

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def stop(self) -> None:
        """Stop serving: every connection is closed, every stream ends."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread.is_alive():
            future = asyncio.run_coroutine_threadsafe(self._shut(), self._loop)
            try:
                future.result(timeout=5)
            except Exception:  # a loop too busy to answer: the daemon thread dies with the process
                log.warning("HTTP server %s: stopping took too long", self.name)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        else:
            self._listener.close()
            self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ the loop
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(
                self._serve, sock=self._listener, limit=_READ_SIZE, backlog=1024, ssl=self._tls,
                ssl_handshake_timeout=self.timeout if self._tls is not None else None))
        except Exception:
            log.exception("HTTP server %s could not start", self.name)
            self._ready.set()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:   # the connections' coroutines end (their sockets are closed already), then the loop
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    async def _shut(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self._open):
            connection.writer.transport.abort()
        for stream in list(self._streams):
            stream.close("the server stopped")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection(writer)
        if not self._admit(connection):
            return
        self._waiting[connection] = None
        deadline = self._loop.time() + self.timeout
        try:
            await self._converse(connection, reader, writer, deadline)
            await self._flush(writer)
        except _Deadline:
            self.timed_out += 1
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, ConnectionError, h11.LocalProtocolError):
            pass   # the client went, or broke the conversation
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("HTTP server %s: a connection failed", self.name)
        finally:
            self._waiting.pop(connection, None)
            self._open.discard(connection)
            writer.transport.abort()

    def _admit(self, connection: _Connection) -> bool:
        """Room for ``connection``: evict the one waiting longest for its
        head if the bound is reached; without one, 503."""
        if len(self._open) >= self.max_connections:
            if not self._waiting:
                self.refused += 1
                connection.writer.write(_BUSY)
                connection.writer.transport.close()   # after the 503 is written
                return False
            oldest, _ = self._waiting.popitem(last=False)
            oldest.evicted = True
            self._open.discard(oldest)
            oldest.writer.transport.abort()
            self.evicted += 1
        self._open.add(connection)
        return True

    async def _converse(self, connection: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        deadline: float | None) -> None:
        """Requests and answers on one connection, until it closes."""
        parser = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        while True:
            try:
                event = await self._next(parser, reader, deadline)
                if not isinstance(event, h11.Request):
                    return    # closed between requests
                self._waiting.pop(connection, None)   # it sent a head: no longer evictable
                request = await self._request(parser, reader, writer, event, connection.serial)
            except _Reject as reject:
                self.bad_requests += 1
                await self._reject(parser, writer, reject)
                return
            except h11.RemoteProtocolError as exc:
                self.bad_requests += 1
                await self._reject(parser, writer, _Reject(exc.error_status_hint, "bad request"))
                return
            response = await self._loop.run_in_executor(self._pool, self._call, request)
            if not await self._answer(parser, reader, writer, request, response):
                return
            if parser.our_state is not h11.DONE or parser.their_state is not h11.DONE:
                return
            parser.start_next_cycle()
            self._waiting[connection] = None
            deadline = None   # kept alive: idle until its next head begins (see _next)

    async def _next(self, parser: h11.Connection, reader: asyncio.StreamReader, deadline: float | None) -> object:
        """The parser's next event, reading by ``deadline``; with None (a
        connection kept alive, between requests) the deadline runs from the
        next head's first byte. An idle kept-alive connection costs a socket
        and stays evictable at the bound: clients keep one connection for
        all their calls and do not retry on a closed one (pymesos's driver
        got a broken pipe on its first call after 10 s without one — a
        framework that declined for 60 s), and Mesos's libprocess keeps them."""
        while True:
            event = parser.next_event()
            if event is not h11.NEED_DATA:
                return event
            if deadline is None and not parser.trailing_data[0]:
                data = await reader.read(_READ_SIZE)
                deadline = self._loop.time() + self.timeout
            else:
                if deadline is None:
                    deadline = self._loop.time() + self.timeout
                data = await self._before(reader.read(_READ_SIZE), deadline)
            parser.receive_data(data)

    async def _before(self, awaitable: Awaitable[T], deadline: float) -> T:
        try:
            return await asyncio.wait_for(awaitable, max(0.0, deadline - self._loop.time()))
        except TimeoutError:
            raise _Deadline() from None

    async def _request(self, parser: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       head: h11.Request, serial: int) -> Request:
        if len(head.target) + sum(len(name) + len(value) + 4 for name, value in head.headers) > MAX_HEAD:
            raise _Reject(431, f"a request head is at most {MAX_HEAD} bytes")
        headers: dict[str, str] = {}
        for name, value in head.headers:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        target = head.target.decode("latin-1")
        max_body = self.body_limits.get(urlsplit(target).path.rstrip("/") or "/", self.max_body)
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body:
            raise _Reject(413, f"a request body is at most {max_body} bytes")
        if parser.they_are_waiting_for_100_continue:
            writer.write(parser.send(h11.InformationalResponse(status_code=100, headers=[])))
        body = bytearray()
        deadline = self._loop.time() + self.timeout
        while True:
            event = await self._next(parser, reader, deadline)
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > max_body:
                    raise _Reject(413, f"a request body is at most {max_body} bytes")
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                raise _Reject(400, "the request ended early")
        peer, local = writer.get_extra_info("peername"), writer.get_extra_info("sockname")
        tcp = isinstance(peer, tuple) and isinstance(local, tuple)
        return Request(head.method.decode("latin-1"), target, headers, bytes(body),
                       str(peer[0]) if isinstance(peer, tuple) else "", int(peer[1]) if tcp else 0,
                       (str(local[0]), int(local[1])) if tcp else ("", 0), serial)

    def _call(self, request: Request) -> Response:
        try:
            return self._handler(request)
        except Exception:
            log.exception("HTTP %s %s failed", request.method, request.target[:200])
            return json_response(500, {"error": "internal error"})

    async def _answer(self, parser: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      request: Request, response: Response) -> bool:
        """Send ``response``; False if the connection is to close after it."""
        try:
            headers = [(b"Server", self._server_header), (b"Content-Type", response.content_type.encode("latin-1"))]
            headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.headers.items()]
            if response.stream is not None:
                if not any(name.lower() == "cache-control" for name in response.headers):
                    headers.append((b"Cache-Control", b"no-cache"))
                headers.append((b"Connection", b"close"))
            elif response.chunks is not None:
                if response.length is not None:
                    headers.append((b"Content-Length", str(response.length).encode()))
            else:
                headers.append((b"Content-Length", str(len(response.body)).encode()))
            head = parser.send(h11.Response(status_code=response.status, headers=headers,
                                            reason=_reason(response.status)))
            if request.method != "HEAD" and response.stream is None and response.chunks is None \
                    and len(response.body) <= CHUNK:
                # a small answer in one write: clients that read the head and the body in one recv
                # (pymesos's error path) see them together
                await self._write(writer, head + parser.send(h11.Data(data=response.body)) +
                                  parser.send(h11.EndOfMessage()))
                return parser.our_state is h11.DONE
            await self._write(writer, head)
            if request.method == "HEAD":
                pass
            elif response.stream is not None:
                await self._stream(parser, reader, writer, response.stream)
            elif response.chunks is not None:
                while True:
                    try:
                        piece = await self._loop.run_in_executor(self._pool, next, response.chunks, b"")
                    except Exception as exc:   # the body could not be made: the answer stops short
                        log.warning("HTTP server %s: the answer to %s %s stopped: %s", self.name, request.method,
                                    request.target[:200], exc)
                        raise ConnectionAbortedError("the answer's body failed") from None
                    if not piece:
                        break
                    await self._write(writer, parser.send(h11.Data(data=piece)))
            else:
                view = memoryview(response.body)
                for start in range(0, len(view), CHUNK):
                    await self._write(writer, parser.send(h11.Data(data=bytes(view[start:start + CHUNK]))))
            await self._write(writer, parser.send(h11.EndOfMessage()))
            return parser.our_state is h11.DONE
        finally:
            if response.stream is not None:
                response.stream.close("the answer ended")
            if response.on_done is not None:
                try:
                    response.on_done()
                except Exception:
                    log.exception("an HTTP answer's on_done failed")

    async def _stream(self, parser: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      stream: Stream) -> None:
        """Write what ``stream`` is fed until it closes or the client goes."""
        wake = asyncio.Event()
        stream._attach(lambda: _ignore(self._loop.call_soon_threadsafe(wake.set)))
        self._streams.add(stream)
        gone = asyncio.ensure_future(reader.read(_READ_SIZE))   # a read returns when the client leaves
        try:
            while True:
                wake.clear()
                pieces, closed = stream._take()
                for piece in pieces:
                    await self._write(writer, parser.send(h11.Data(data=piece)))
                if closed and not pieces:
                    if stream.aborted:
                        log.warning("HTTP server %s: a streamed answer stopped short: %s", self.name, stream.why)
                        raise ConnectionAbortedError(stream.why)
                    return
                if pieces:
                    continue
                waiting = asyncio.ensure_future(wake.wait())
                await asyncio.wait([waiting, gone], return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                if gone.done():
                    stream.close("the client left")
                    raise ConnectionResetError("the client left a stream")
        except _Deadline:
            stream.close("the client stopped reading")
            raise
        finally:
            gone.cancel()
            self._streams.discard(stream)

    async def _flush(self, writer: asyncio.StreamWriter) -> None:
        """Wait (by the deadline) until everything written has left the
        transport: the connection is closed with ``abort()``, which drops
        what is still buffered — ``drain()`` returns while up to the
        high-water mark (64 KiB) waits, so the end of an answer to a client
        reading slower than we write (a streamed /state) was lost, and the
        client saw an incomplete answer (a CI run)."""
        if not writer.transport.get_write_buffer_size():
            return   # (the usual case: not even a turn of the loop, the connection leaves its bound's count now)
        writer.transport.set_write_buffer_limits(high=0)
        await self._before(writer.drain(), self._loop.time() + self.timeout)

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        if data:
            writer.write(data)
            await self._before(writer.drain(), self._loop.time() + self.timeout)

    async def _reject(self, parser: h11.Connection, writer: asyncio.StreamWriter, reject: _Reject) -> None:
        if parser.our_state is not h11.SEND_RESPONSE and parser.our_state is not h11.IDLE:
            return
        body = json.dumps({"error": str(reject)}).encode()
        try:
            data = parser.send(h11.Response(status_code=reject.status, reason=_reason(reject.status), headers=[
                (b"Server", self._server_header), (b"Content-Type", b"application/json"),
                (b"Content-Length", str(len(body)).encode()), (b"Connection", b"close")]))
            await self._write(writer, data + parser.send(h11.Data(data=body)) + parser.send(h11.EndOfMessage()))
        except (h11.LocalProtocolError, _Deadline, OSError):
            pass


def _reason(status: int) -> bytes:
    """The status line's reason phrase ("OK", "Not Found"; empty for a code HTTP does not name): h11
    sends none unless given, and some clients look for it."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
         b'Content-Length: 50\r\n\r\n{"error": "too many connections; try again later"}')


def _ignore(_: object) -> None:
    pass


def _quiet(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """The loop's own complaints (a TLS handshake a client abandoned...):
    a client's doing, at debug level — a flood of them must not flood the log."""
    log.debug("HTTP: %s", context.get("message"), exc_info=context.get("exception"))


def _fit_file_limit(max_connections: int, name: str) -> None:
    """Raise the process's open-file limit to hold ``max_connections``
    (and the process's own files), as far as the hard limit allows."""
    wanted = max_connections + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning("HTTP server %s: the open-file limit (%d) is below the %d connections it may hold: raise "
                    "it (ulimit -n) or lower the bound", name, soft, max_connections)
