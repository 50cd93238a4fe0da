"""The agent's Mesos v1 executor API, ``POST /api/v1/executor``
(docs/mesos-api.rst, "Executor API"): what pymesos's
``MesosExecutorDriver`` and other v1 executors speak. A thin runtime over
:mod:`mesoslike.v1.executor`: a handler for the agent's HTTP server that
turns calls into the executor channel's messages for the agent's core, and
puts what the core says to such an executor onto its event stream.

Where an executor connects: the agent starts every custom executor with
Mesos's variables (``MESOS_AGENT_ENDPOINT``, ``MESOS_FRAMEWORK_ID``,
``MESOS_EXECUTOR_ID`` ...; :mod:`mesoslike.agent.core`). Who it is: the
framework and executor ids a call names, and — because those are no secret
— a call is taken only from this host (a loopback address, as executors
run here) or with ``Authorization: Bearer`` and the executor's own secret
(the content of its ``MESOSLIKE_EXECUTOR_SECRET_FILE``). The agent's core then
knows it by that secret, exactly as on the channel.

Calls are handed to the agent's loop (which owns the core and the master's
connection) and answered 202 at once; what the core refuses comes back on
the stream as an ERROR event.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import threading
import uuid
from collections import deque
from typing import Callable, Protocol

from mesoslike.http_server import Request, Response, Stream
from mesoslike.v1 import executor as executor_api
from mesoslike.v1.calls import JSON, CallError, accepts_json, call_type, decode_call
from mesoslike.v1.recordio import DEFAULT_MAX_RECORD, encode as encode_record

__all__ = ["V1Executors", "V1Agent", "EXECUTOR_PATH", "is_v1_peer", "MAX_CALL_BODY", "MAX_QUEUED_CALLS"]

log = logging.getLogger("mesoslike.agent.v1")

EXECUTOR_PATH = "/api/v1/executor"
#: the largest call an executor may post (an update or message with 50 MB of data, base64, fits)
MAX_CALL_BODY = 72 * 1024 * 1024
#: calls waiting for the agent's loop at most (more: 503, try again)
MAX_QUEUED_CALLS = 10_000
_STREAM_BUFFER = DEFAULT_MAX_RECORD + 32 * 1024 * 1024
#: never a ZeroMQ identity (ZeroMQ's own begin with a zero byte and are 5 bytes long; a peer may choose none
#: that begins with one)
_PEER_PREFIX = b"\x00mesos-v1-executor/"


def is_v1_peer(peer: bytes) -> bool:
    return peer.startswith(_PEER_PREFIX)


class V1Agent(Protocol):
    """What the front end needs of the agent runtime."""

    def executor_secret(self, framework_id: str, executor_id: str) -> str | None:
        """The secret of the executor the agent runs for the framework (None: none). Thread-safe."""

    def wake(self) -> None:
        """Have the loop take the queued calls now."""


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class V1Executors:
    """The v1 executors' streams and calls of one agent."""

    def __init__(self, agent: V1Agent) -> None:
        self._agent = agent
        self._lock = threading.Lock()
        #: peer -> (stream, framework id, executor id)
        self._streams: dict[bytes, tuple[Stream, str, str]] = {}
        #: (peer, channel message) for the loop, oldest first
        self._calls: deque[tuple[bytes, object]] = deque()

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
        self._check_caller(request, secret)
        if kind == "SUBSCRIBE":
            if not accepts_json(request.header("Accept")):
                raise CallError(406, f"Expecting 'Accept' to allow '{JSON}'")
            messages = executor_api.channel_messages(call, secret)
            peer = _PEER_PREFIX + str(uuid.uuid4()).encode()
            stream = Stream(_STREAM_BUFFER)
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
        self._queue(current[-1], executor_api.channel_messages(call, secret))
        return Response(202, b"", JSON)

    @staticmethod
    def _check_caller(request: Request, secret: str) -> None:
        """From this host, or proving the executor's secret."""
        scheme, _, token = (request.header("Authorization") or "").strip().partition(" ")
        if scheme.lower() == "bearer" and token:
            if not hmac.compare_digest(token.strip().encode(), secret.encode()):
                raise CallError(403, "Forbidden: the token is not this executor's")
            return
        if not _loopback(request.client):
            raise CallError(401, "Unauthorized: an executor calls from the agent's host, or gives "
                                 "'Authorization: Bearer' with the secret of its MESOSLIKE_EXECUTOR_SECRET_FILE")

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
