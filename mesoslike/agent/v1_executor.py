"""The agent's Mesos v1 executor API, ``POST /api/v1/executor``
(docs/mesos-api.rst, "Executor API"): what pymesos's
``MesosExecutorDriver`` and other v1 executors speak. A thin runtime over
:mod:`mesoslike.v1.executor`: a handler for the agent's HTTP server that
turns calls into the executor channel's messages for the agent's core, and
puts what the core says to such an executor onto its event stream.

Where an executor connects: the agent starts every custom executor with
Mesos's variables (``MESOS_AGENT_ENDPOINT``, ``MESOS_FRAMEWORK_ID``,
``MESOS_EXECUTOR_ID`` ...; :mod:`mesoslike.agent.core`). Who it is: the
framework and executor ids a call names — and, because those are no
secret, a call naming executor E is taken only from a process inside E's
container, as the kernel says who holds the connection's other end
(:mod:`mesoslike.agent.connection_owner`, looked at once per connection),
or with ``Authorization: Bearer`` and E's own secret (the content of its
``MESOSLIKE_EXECUTOR_SECRET_FILE``). The agent's core then knows it by that
secret, exactly as on the channel.

Calls are handed to the agent's loop (which owns the core and the master's
connection) and answered 202 at once; what the core refuses comes back on
the stream as an ERROR event.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from typing import Callable, Protocol

from mesoslike.agent.connection_owner import holder_of_connection
from mesoslike.http_server import Request, Response, Stream
from mesoslike.v1 import executor as executor_api
from mesoslike.v1.calls import JSON, CallError, accepts_json, call_type, decode_call
from mesoslike.v1.recordio import encode as encode_record
from mesoslike.v1.shapes import call_body_limit, stream_buffer_limit
from mesoslike.wire.types import MAX_FRAMEWORK_MESSAGE

__all__ = ["V1Executors", "V1Agent", "EXECUTOR_PATH", "is_v1_peer", "MAX_CALL_BODY", "MAX_QUEUED_CALLS"]

log = logging.getLogger("mesoslike.agent.v1")

EXECUTOR_PATH = "/api/v1/executor"
#: the largest call an executor may post by default (an update or message with --max-message-size's default
#: of data, base64, fits; the agent's is call_body_limit of its --max-message-size)
MAX_CALL_BODY = call_body_limit(MAX_FRAMEWORK_MESSAGE)
#: calls waiting for the agent's loop at most (more: 503, try again)
MAX_QUEUED_CALLS = 10_000
#: connections remembered as an executor's (proven once, by the kernel: not looked at again), at most
MAX_KNOWN_CONNECTIONS = 4096
#: never a ZeroMQ identity (ZeroMQ's own begin with a zero byte and are 5 bytes long; a peer may choose none
#: that begins with one)
#: how long a call waits for its executor's processes to become known: an executor may call before the
#: agent has heard its process id from the supervisor (posix isolation finds the container's processes
#: by the leader's session), and the first call of a raw client is its only one
PROCESSES_KNOWN_WITHIN = 5.0
_PEER_PREFIX = b"\x00mesos-v1-executor/"


def is_v1_peer(peer: bytes) -> bool:
    return peer.startswith(_PEER_PREFIX)


class V1Agent(Protocol):
    """What the front end needs of the agent runtime."""

    def executor_secret(self, framework_id: str, executor_id: str) -> str | None:
        """The secret of the executor the agent runs for the framework (None: none). Thread-safe."""

    def executor_processes(self, framework_id: str, executor_id: str) -> list[int] | None:
        """The processes of that executor's container now; None while it starts and they are not known
        yet. Thread-safe."""

    def wake(self) -> None:
        """Have the loop take the queued calls now."""


class V1Executors:
    """The v1 executors' streams and calls of one agent."""

    def __init__(self, agent: V1Agent, max_data: int = MAX_FRAMEWORK_MESSAGE) -> None:
        self._agent = agent
        #: bytes of an update's or a message's data at most (the agent's --max-message-size)
        self._max_data = max_data
        self._stream_buffer = stream_buffer_limit(max_data)
        self._lock = threading.Lock()
        #: peer -> (stream, framework id, executor id)
        self._streams: dict[bytes, tuple[Stream, str, str]] = {}
        #: (peer, channel message) for the loop, oldest first
        self._calls: deque[tuple[bytes, object]] = deque()
        #: HTTP connection (its number) -> the executor (framework id, executor id) the kernel said holds it
        self._known: OrderedDict[int, tuple[str, str]] = OrderedDict()

    @property
    def handlers(self) -> dict[str, Callable[[Request], Response]]:
        return {EXECUTOR_PATH: self.handle}

    def handle(self, request: Request) -> Response:
        try:
            return self._handle(request)
        except CallError as error:
            return Response(error.status, error.message.encode(), "text/plain; charset=utf-8")

    def _handle(self, request: Request) -> Response:
        if request.method != "POST":
            raise CallError(405, "Expecting 'POST'")
        call = decode_call(request.header("Content-Type"), request.body)
        kind = call_type(call)
        if kind == "HEARTBEAT":
            return Response(202, b"", JSON)
        framework_id, executor_id = executor_api.executor_of(call)
        secret = self._agent.executor_secret(framework_id, executor_id)
        if secret is None:
            raise CallError(400, "Executor cannot be found")
        self._check_caller(request, framework_id, executor_id, secret)
        if kind == "SUBSCRIBE":
            if not accepts_json(request.header("Accept")):
                raise CallError(406, f"Expecting 'Accept' to allow '{JSON}'")
            messages = executor_api.channel_messages(call, secret, self._max_data)
            peer = _PEER_PREFIX + str(uuid.uuid4()).encode()
            stream = Stream(self._stream_buffer)
            with self._lock:
                older = [p for p, (_, f, e) in self._streams.items() if (f, e) == (framework_id, executor_id)]
                self._streams[peer] = (stream, framework_id, executor_id)
            for other in older:   # subscribed again (a reconnection): the old stream is done
                self._close(other, "the executor subscribed again")
            stream.on_close(lambda: self._forget(peer))
            self._queue(peer, messages)
            return Response(200, b"", JSON, stream=stream)
        with self._lock:
            current = [p for p, (_, f, e) in self._streams.items() if (f, e) == (framework_id, executor_id)]
        if not current:
            raise CallError(403, "Executor is not subscribed")
        self._queue(current[-1], executor_api.channel_messages(call, secret, self._max_data))
        return Response(202, b"", JSON)

    def _check_caller(self, request: Request, framework_id: str, executor_id: str, secret: str) -> None:
        """From a process of the executor's container, or proving the executor's secret."""
        scheme, _, token = (request.header("Authorization") or "").strip().partition(" ")
        if scheme.lower() == "bearer" and token:
            if not hmac.compare_digest(token.strip().encode(), secret.encode()):
                raise CallError(403, "Forbidden: the token is not this executor's")
            return
        executor = (framework_id, executor_id)
        with self._lock:
            if request.connection and self._known.get(request.connection) == executor:
                self._known.move_to_end(request.connection)
                return
        holder = None
        if request.client_port and request.local[1]:
            deadline = time.monotonic() + PROCESSES_KNOWN_WITHIN
            processes = self._agent.executor_processes(framework_id, executor_id)
            while processes is None and time.monotonic() < deadline:   # starting: not known yet
                time.sleep(0.02)
                processes = self._agent.executor_processes(framework_id, executor_id)
            holder = holder_of_connection((request.client, request.client_port), request.local, processes or [])
        if holder is None:
            log.warning("executor API: a %s call for executor %s of framework %s from %s:%d refused: not from "
                        "a process of its container", request.method, executor_id[:200], framework_id[:200],
                        request.client, request.client_port)
            raise CallError(403, "Forbidden: this connection is not from a process of the executor's container "
                                 "(an executor calls from its container, or gives 'Authorization: Bearer' with "
                                 "the secret of its MESOSLIKE_EXECUTOR_SECRET_FILE)")
        if request.connection:
            with self._lock:
                self._known[request.connection] = executor
                while len(self._known) > MAX_KNOWN_CONNECTIONS:
                    self._known.popitem(last=False)

    def _queue(self, peer: bytes, messages: list[object]) -> None:
        with self._lock:
            if len(self._calls) + len(messages) > MAX_QUEUED_CALLS:
                raise CallError(503, "the agent is busy: too many executor calls wait; try again")
            self._calls.extend((peer, message) for message in messages)
        self._agent.wake()

    def take(self) -> list[tuple[bytes, object]]:
        """The calls queued for the loop (which hands each to the core's
        ``on_executor_frame``)."""
        with self._lock:
            calls, self._calls = list(self._calls), deque()
        return calls

    def deliver(self, peer: bytes, message: object) -> None:
        """The loop sends ``message`` (the executor channel's) to a v1 executor."""
        with self._lock:
            entry = self._streams.get(peer)
        if entry is None:
            return
        for event in executor_api.events(message):
            if not entry[0].send(encode_record(json.dumps(event).encode())):
                log.warning("executor %s/%s: its event stream is closed", entry[1], entry[2])
                return

    def _close(self, peer: bytes, why: str) -> None:
        with self._lock:
            entry = self._streams.get(peer)
        if entry is not None:
            entry[0].close(why)

    def _forget(self, peer: bytes) -> None:
        with self._lock:
            self._streams.pop(peer, None)

    def close(self) -> None:
        with self._lock:
            streams = [stream for stream, _, _ in self._streams.values()]
        for stream in streams:
            stream.close("the agent stopped")
