"""The master's Mesos v1 HTTP front end (docs/mesos-api.rst): ``POST
/api/v1/scheduler`` (the scheduler API: calls, and SUBSCRIBE's RecordIO
event stream), ``POST /api/v1`` (the operator API; also at
``/api/v1/operator``, where pymesos's operator driver posts) and ``GET
/version``. A thin runtime over :mod:`mesoslike.v1`: handlers for the
master's one HTTP server (:mod:`mesoslike.http_server`), feeding the same
:class:`~mesoslike.master.core.MasterCore` as the ZeroMQ protocol.

Each scheduler event stream is a *peer* of the core's world: an identity
(:func:`v1_peer`) no ZeroMQ connection can have, under which the core sees
an ordinary framework connection. The loop hands what the core sends such
a peer to :meth:`V1API.deliver` (translated to Mesos events, RecordIO,
onto the stream); calls are handled on the HTTP worker thread under the
master's lock, and what the core answers goes out with the loop's next
turn, after the registry holds what it acknowledges. A closed stream
disconnects its framework at once (its failover timeout starts), as
Mesos does; while it is open the framework counts as heard.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from typing import Any, Callable, Iterator, Mapping, Protocol

import attrs

from mesoslike import __version__
from mesoslike.acl import Credentials
from mesoslike.http_server import Request, Response, Stream
from mesoslike.master.core import MasterCore, Send
from mesoslike.json_chunks import json_chunks
from mesoslike.master.forked import ForkFailed, stream_forked
from mesoslike.master.shared_stream import SharedStream
from mesoslike.master.records import MasterConfig, clip
from mesoslike.master.state import StateSnapshot, snapshot
from mesoslike.v1 import operator as operator_api
from mesoslike.v1 import scheduler as scheduler_api
from mesoslike.v1.calls import JSON, STREAM_ID_HEADER, CallError, accepts_json, call_type, decode_call
from mesoslike.v1.identity import CHALLENGE, authenticate
from mesoslike.v1.recordio import encode as encode_record
from mesoslike.v1.shapes import ShapeError, call_body_limit, stream_buffer_limit, value_of
from mesoslike.wire import messages as m
from mesoslike.wire.types import MAX_FRAMEWORK_MESSAGE, MasterInfo

__all__ = ["V1API", "V1Master", "v1_peer", "is_v1_peer", "SCHEDULER_PATH", "OPERATOR_PATHS", "VERSION_PATH",
           "MAX_CALL_BODY", "STREAM_BUFFER", "OPERATOR_LOOK_EVERY"]

log = logging.getLogger("mesoslike.master.v1")

SCHEDULER_PATH = "/api/v1/scheduler"
OPERATOR_PATHS = ("/api/v1", "/api/v1/operator")
VERSION_PATH = "/version"
#: the largest call a scheduler may post by default (a MESSAGE of --max-message-size's default, base64, fits;
#: the master's is call_body_limit of its --max-message-size)
MAX_CALL_BODY = call_body_limit(MAX_FRAMEWORK_MESSAGE)
#: bytes an event stream keeps for a client reading slower than events come (more: the stream is closed,
#: the framework disconnected), by default; room for the largest event
STREAM_BUFFER = stream_buffer_limit(MAX_FRAMEWORK_MESSAGE)
#: how often the operator event stream compares the master's state (s)
OPERATOR_LOOK_EVERY = 1.0
#: ZeroMQ's own identities are a zero byte and 4 more; a peer may not choose one that starts with a zero byte
_PEER_PREFIX = b"\x00mesos-v1/"


def v1_peer(stream_id: str) -> bytes:
    """The core's name for the scheduler event stream ``stream_id``."""
    return _PEER_PREFIX + stream_id.encode()


def is_v1_peer(peer: bytes | None) -> bool:
    return peer is not None and peer.startswith(_PEER_PREFIX)


class V1Master(Protocol):
    """What the front end needs of the master runtime."""

    #: the master's lock (it guards the core)
    stored: threading.Condition
    credentials: Credentials | None
    config: MasterConfig
    info: MasterInfo

    def serving_core(self) -> MasterCore | None: ...

    def leader_info(self) -> dict[str, str]: ...

    def send_later(self, sends: list[Send]) -> None: ...

    def healthy(self) -> bool: ...


@attrs.define
class _Subscription:
    stream_id: str
    peer: bytes
    stream: Stream
    principal: str | None
    framework_id: str = ""
    #: when the framework was last marked heard (master clock)
    heard_at: float = 0.0


def _text(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, message.encode(), "text/plain; charset=utf-8", dict(headers or {}))


def _refusal(error: CallError) -> Response:
    return _text(error.status, error.message, CHALLENGE if error.status == 401 else None)


class V1API:
    """The v1 endpoints of one master (:attr:`handlers`); ``reads_need_auth``:
    the operator API asks for credentials (``--http-auth all``)."""

    def __init__(self, master: V1Master, reads_need_auth: bool = False, clock: Callable[[], float] = time.monotonic,
                 stream_buffer: int | None = None) -> None:
        self._master = master
        self._reads_need_auth = reads_need_auth
        self._clock = clock
        self._stream_buffer = stream_buffer_limit(master.config.max_message_size) if stream_buffer is None \
            else stream_buffer
        self._started = time.time()
        self._lock = threading.Lock()   # guards the tables below (HTTP threads, the loop)
        #: operator reads by call: one rendering (one child) at a time, shared by the callers waiting
        self._reads: dict[str, SharedStream] = {}
        self._by_peer: dict[bytes, _Subscription] = {}
        self._by_stream: dict[str, _Subscription] = {}
        self._closed: deque[bytes] = deque()
        self._operator_streams: set[Stream] = set()
        self._operator_thread: threading.Thread | None = None
        #: counters for /metrics
        self.calls = 0
        self.refused = 0

    @property
    def handlers(self) -> dict[str, Callable[[Request], Response]]:
        handlers: dict[str, Callable[[Request], Response]] = {SCHEDULER_PATH: self.scheduler,
                                                              VERSION_PATH: self.version}
        handlers.update({path: self.operator for path in OPERATOR_PATHS})
        return handlers

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._by_peer)

    # ------------------------------------------------------------ /version
    def version(self, request: Request) -> Response:
        if request.method != "GET":
            return _text(405, "Expecting 'GET'")
        return Response(200, json.dumps(operator_api.version_info(__version__)).encode(), JSON)

    # ------------------------------------------------------- the scheduler
    def scheduler(self, request: Request) -> Response:
        try:
            return self._scheduler(request)
        except CallError as error:
            self.refused += 1
            if error.status >= 500:
                log.warning("v1 scheduler call refused (%d): %s", error.status, error.message)
            return _refusal(error)

    def _scheduler(self, request: Request) -> Response:
        if request.method != "POST":
            raise CallError(405, "Expecting 'POST'")
        redirect = self._not_leading(request)
        if redirect is not None:
            return redirect
        call = decode_call(request.header("Content-Type"), request.body)
        principal = authenticate(request.header("Authorization"), self._master.credentials)
        self.calls += 1
        if call_type(call) == "SUBSCRIBE":
            return self._subscribe(request, call, principal)
        return self._call(request, call, principal)

    def _not_leading(self, request: Request) -> Response | None:
        """307 to the leader's HTTP address (Mesos's redirect), 503 with no
        leader; None when this master leads."""
        with self._master.stored:
            if self._master.serving_core() is not None:
                return None
        leader = self._master.leader_info().get("http_address", "")
        if not leader:
            raise CallError(503, "No leader elected")
        host = leader.split("://", 1)[-1].rstrip("/")
        return _text(307, f"this master does not lead; the leader is {host}",
                     {"Location": f"//{host}{request.target}"})

    def _subscribe(self, request: Request, call: dict, principal: str | None) -> Response:
        if request.header(STREAM_ID_HEADER) is not None:
            raise CallError(400, "Subscribe calls should not include the 'Mesos-Stream-Id' header")
        if not accepts_json(request.header("Accept")):
            raise CallError(406, f"Expecting 'Accept' to allow '{JSON}'")
        subscribe = scheduler_api.subscribe_message(call)
        credentials = self._master.credentials
        if credentials is not None and subscribe.framework.id == "" \
                and not credentials.allows("register_frameworks", principal, subscribe.framework.role):
            raise CallError(403, f"Forbidden: principal {principal} lacks the register_frameworks permission "
                                 f"for role {subscribe.framework.role!r}")
        stream_id = str(uuid.uuid4())
        subscription = _Subscription(stream_id, v1_peer(stream_id), Stream(self._stream_buffer), principal,
                                     heard_at=self._clock())
        with self._lock:
            self._by_peer[subscription.peer] = subscription
            self._by_stream[stream_id] = subscription
        subscription.stream.on_close(lambda: self._stream_closed(subscription.peer))
        with self._master.stored:
            core = self._master.serving_core()
            if core is None:
                subscription.stream.close("not leading")
                raise CallError(503, "this master stopped leading")
            self._master.send_later(core.on_message(subscription.peer, subscribe, principal))
        return Response(200, b"", JSON, {STREAM_ID_HEADER: stream_id}, stream=subscription.stream)

    def _call(self, request: Request, call: dict, principal: str | None) -> Response:
        kind = call_type(call)
        try:
            framework_id = value_of(call.get("framework_id"), "framework_id")
        except ShapeError as exc:
            raise CallError(400, f"Failed to validate scheduler::Call: {exc}") from None
        with self._master.stored:
            core = self._master.serving_core()
            if core is None:
                raise CallError(503, "this master stopped leading")
            record = core.frameworks.get(framework_id)
            if record is None:
                raise CallError(400, "Framework cannot be found")
            if self._master.credentials is not None and principal != record.info.principal:
                raise CallError(400, f"Authenticated principal '{principal}' does not match principal "
                                     f"'{record.info.principal}' set in `FrameworkInfo`")
            if not record.connected:
                raise CallError(403, "Framework is not subscribed")
            if not is_v1_peer(record.peer):
                raise CallError(403, "Framework is not connected via HTTP")
            stream_id = request.header(STREAM_ID_HEADER)
            if stream_id is None:
                raise CallError(400, "All non-subscribe calls should include the 'Mesos-Stream-Id' header")
            assert record.peer is not None
            if record.peer != v1_peer(stream_id.strip()):
                raise CallError(400, f"The stream ID '{clip(stream_id, 64)}' included in this request didn't "
                                     f"match the stream ID currently associated with framework ID {framework_id}")
            message = scheduler_api.call_message(call, framework_id)
            limit = self._master.config.max_message_size
            if isinstance(message, m.FrameworkMessage) and len(message.data) > limit:
                raise CallError(400, f"Failed to validate scheduler::Call: message.data holds {len(message.data)} "
                                     f"bytes; at most {limit} (the master's --max-message-size)")
            if message is not None:
                sends = core.on_message(record.peer, message, principal)
                refused = [send for send in sends if send.peer == record.peer and isinstance(send.message, m.Error)
                           and not send.message.fatal] if kind == "UPDATE_FRAMEWORK" else []
                self._master.send_later([send for send in sends if send not in refused])
                if refused:   # Mesos answers UPDATE_FRAMEWORK synchronously: a refusal is its answer
                    assert isinstance(refused[0].message, m.Error)
                    raise CallError(400, f"Failed to validate scheduler::Call: {refused[0].message.message}")
        if kind in scheduler_api.NO_OPS:
            log.debug("v1 %s of framework %s: nothing to do", kind, framework_id)
        return Response(200 if kind == "UPDATE_FRAMEWORK" else 202, b"", JSON)

    # ------------------------------------------------------------ the loop
    def deliver(self, peer: bytes, message: object) -> None:
        """The loop sends ``message`` to a v1 peer: its events go onto the
        stream. An ERROR before SUBSCRIBED (a refused subscription) or a
        fatal one ends the stream, as does a subscription taken over by a
        newer stream of the same framework."""
        with self._lock:
            subscription = self._by_peer.get(peer)
        if subscription is None:
            return   # the stream closed meanwhile
        if isinstance(message, m.Subscribed):
            subscription.framework_id = message.framework_id
            self._close_older(subscription)
        if isinstance(message, m.Error) and (message.fatal or not subscription.framework_id):
            self._send(subscription, [{"type": "ERROR", "error": {"message": message.message}}])
            subscription.stream.close(message.message)
            return
        if isinstance(message, m.Error):
            log.warning("framework %s (v1): %s", subscription.framework_id, clip(message.message))
            return
        self._send(subscription, scheduler_api.events(message, subscription.framework_id, self._master.info))

    def _send(self, subscription: _Subscription, events: list[dict[str, Any]]) -> None:
        for event in events:
            if not subscription.stream.send(encode_record(json.dumps(event).encode())):
                return

    def _close_older(self, subscription: _Subscription) -> None:
        with self._lock:
            older = [s for s in self._by_peer.values() if s.framework_id == subscription.framework_id
                     and s is not subscription]
        for other in older:   # Mesos: the framework failed over to a new connection
            other.framework_id = ""
            self._send(other, [{"type": "ERROR", "error": {"message": "Framework failed over"}}])
            other.stream.close("the framework subscribed on another stream")

    def _stream_closed(self, peer: bytes) -> None:   # the HTTP server's loop thread: no master lock here
        with self._lock:
            subscription = self._by_peer.pop(peer, None)
            if subscription is not None:
                self._by_stream.pop(subscription.stream_id, None)
                self._closed.append(peer)
        if subscription is not None:
            self._master.send_later([])   # wakes the loop: it disconnects the framework

    def turn(self, core: MasterCore) -> list[Send]:
        """The loop's turn (under the master's lock): frameworks whose
        stream closed are disconnected; those whose stream is open are
        heard (a v1 scheduler sends no heartbeats: its open stream is its
        sign of life)."""
        out: list[Send] = []
        with self._lock:
            closed, self._closed = list(self._closed), deque()
            open_ = list(self._by_peer.values())
        for peer in closed:
            out += core.on_connection_closed(peer)
        now = self._clock()
        every = core.config.heartbeat_interval
        for subscription in open_:
            if subscription.framework_id and now - subscription.heard_at >= every:
                subscription.heard_at = now
                out += core.on_message(subscription.peer, m.Heartbeat(), subscription.principal)
        return out

    def close(self) -> None:
        with self._lock:
            streams = [s.stream for s in self._by_peer.values()] + list(self._operator_streams)
        for stream in streams:
            stream.close("the master stopped")

    # ------------------------------------------------------- the operator
    def operator(self, request: Request) -> Response:
        try:
            if request.method != "POST":
                raise CallError(405, "Expecting 'POST'")
            call = decode_call(request.header("Content-Type"), request.body)
            if self._reads_need_auth:
                authenticate(request.header("Authorization"), self._master.credentials)
            if not accepts_json(request.header("Accept")):
                raise CallError(406, f"Expecting 'Accept' to allow '{JSON}'")
            kind = call_type(call)
            self.calls += 1
            if kind in ("GET_HEALTH", "GET_VERSION"):
                return self._json(operator_api.answer(kind, None, self._master.info, self._master.healthy(),
                                                      __version__, self._started))
            redirect = self._not_leading(request)
            if redirect is not None:
                return redirect
            if kind == "SUBSCRIBE":
                return self._operator_subscribe()
            if kind not in operator_api.CALLS:
                raise CallError(501, f"the operator call {kind[:40]!r} is not one mesoslike answers "
                                     f"({', '.join(operator_api.CALLS)}; docs/mesos-api.rst)")
            return self._answer_from_snapshot(kind)
        except CallError as error:
            self.refused += 1
            return _refusal(error)

    @staticmethod
    def _json(document: dict) -> Response:
        return Response(200, json.dumps(document).encode(), JSON)

    def _answer_from_snapshot(self, kind: str) -> Response:
        """An operator read of the core, rendered in a forked child
        (mesoslike.master.forked: the loop waits for the fork, not for the
        GIL while a thread renders) and streamed to every caller that asked
        before it forked (mesoslike.master.shared_stream: the master never
        holds the answer, hundreds of MB for GET_STATE at 1,000,000 tasks);
        rendered in this thread where a fork is refused."""
        if self._master.serving_core() is None:
            raise CallError(503, "this master stopped leading")
        with self._lock:
            read = self._reads.get(kind)
            if read is None:
                read = self._reads[kind] = SharedStream(lambda: self._render_forked(kind), name=f"{kind} rendering")
        return Response(200, content_type=JSON, stream=read.read())

    def _render_forked(self, kind: str) -> Iterator[bytes]:
        """The answer to ``kind`` in pieces, rendered in a forked child (a
        child that finds no leading core fails: its readers' answers stop short)."""
        info, started = self._master.info, self._started

        def render() -> Iterator[bytes]:
            core = self._master.serving_core()
            if core is None:
                raise CallError(503, "this master stopped leading")
            return json_chunks(operator_api.answer(kind, snapshot(core), info, True, __version__, started))
        try:
            return stream_forked(self._master.stored, render)
        except ForkFailed as exc:
            log.warning("answering %s in this process: %s", kind, exc)
            return iter((json.dumps(operator_api.answer(kind, self._snapshot(), info, True, __version__,
                                                        started)).encode(),))

    def _snapshot(self) -> StateSnapshot:
        with self._master.stored:
            core = self._master.serving_core()
            if core is None:
                raise CallError(503, "this master stopped leading")
            return snapshot(core)

    def _operator_subscribe(self) -> Response:
        taken = self._snapshot()
        stream = Stream(self._stream_buffer)
        stream.send(encode_record(json.dumps(operator_api.subscribed_event(
            taken, self._master.config.heartbeat_interval)).encode()))
        with self._lock:
            self._operator_streams.add(stream)
            start = self._operator_thread is None
            if start:
                self._operator_thread = threading.Thread(target=self._watch_state, args=(taken,),
                                                         name="master-v1-operator", daemon=True)
        stream.on_close(lambda: self._forget_operator_stream(stream))
        if start:
            assert self._operator_thread is not None
            self._operator_thread.start()
        return Response(200, b"", JSON, stream=stream)

    def _forget_operator_stream(self, stream: Stream) -> None:
        with self._lock:
            self._operator_streams.discard(stream)

    def _watch_state(self, taken: StateSnapshot) -> None:
        """The operator streams' thread: every OPERATOR_LOOK_EVERY seconds,
        a snapshot (under the lock: cheap) compared with the last one (not
        under it); the changes go to every stream. Ends with the last stream."""
        before = operator_api.view_of(taken)
        beat = time.monotonic()
        while True:
            time.sleep(OPERATOR_LOOK_EVERY)
            with self._lock:
                streams = list(self._operator_streams)
                if not streams:
                    self._operator_thread = None
                    return
            try:
                after = operator_api.view_of(self._snapshot())
            except CallError:   # no longer leading: the streams end
                for stream in streams:
                    stream.close("this master stopped leading")
                continue
            events = operator_api.changes(before, after)
            before = after
            if time.monotonic() - beat >= self._master.config.heartbeat_interval:
                beat = time.monotonic()
                events.append({"type": "HEARTBEAT"})
            records = [encode_record(json.dumps(event).encode()) for event in events]
            for stream in streams:
                for record in records:
                    if not stream.send(record):
                        break
