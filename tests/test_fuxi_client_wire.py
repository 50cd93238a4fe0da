"""A job client's side of the Fuxi job protocol (frameworks/
mesoslike_frameworks/fuxi/client_wire.py) against the protocol's
declaration (protocol.py): the same messages, fields and defaults; what a
client sends is the frame the protocol's codec writes (and takes), what
the service answers is what the client reads, a bad frame is refused as
strictly, and what only the full codec speaks (a TOML date in a job file,
news to an AppMaster) goes through it. And ``fuxi submit`` imports neither
the protocol's classes nor the wire package before its SUBMIT goes out."""

from __future__ import annotations

import datetime
import subprocess
import sys

import msgpack
import msgspec
import pytest

from mesoslike import MesoslikeError
from mesoslike_frameworks.fuxi import client_wire as wire
from mesoslike_frameworks.fuxi import protocol

pytestmark = pytest.mark.timeout(60)

SENT = [wire.Submit(1, {"job": {"name": "j", "units": [{"name": "u", "slots": 2, "cpus": 0.5, "x": True,
                                                         "y": None, "env": {"A": "b"}, "big": 2 ** 63}]}}),
        wire.Submit(2, {}), wire.Status(3), wire.Status(4, "job-1"), wire.Status(6, "job-1", 2.5),
        wire.KillJob(5, "job-2")]
ANSWERS = [protocol.Submitted(1, "job-1"), protocol.StatusReply(2, '{"jobs": []}'), protocol.Ok(3),
           protocol.Error(0, "no"), protocol.Error(-1, "x" * 1000)]


def _fields(cls: type) -> list[tuple[str, object]]:
    if issubclass(cls, msgspec.Struct):
        return [(f.name, ... if f.required else f.default) for f in msgspec.structs.fields(cls)]
    return [(name, cls._field_defaults.get(name, ...)) for name in cls._fields]  # type: ignore[attr-defined]


def test_the_same_messages_fields_and_defaults_as_the_protocol():
    for kind, cls in (*wire.SENT.items(), *wire.RECEIVED.items()):
        theirs = getattr(protocol, cls.__name__)
        assert theirs.TYPE == kind
        assert _fields(cls) == _fields(theirs), kind
    assert ((wire.VERSION, wire.MAX_FRAME, wire.MAX_ERROR, wire.MAX_STATUS_WAIT, wire.STANDBY_REFUSAL)
            == (protocol.VERSION, protocol.MAX_FRAME, protocol.MAX_ERROR, protocol.MAX_STATUS_WAIT,
                protocol.STANDBY_REFUSAL))
    for text in ("short", "x" * 5000):
        assert wire.bounded(text) == protocol.bounded(text) and wire.bounded(text, 100) == protocol.bounded(text, 100)


@pytest.mark.parametrize("message", SENT, ids=repr)
def test_what_a_client_sends_is_the_protocols_frame(message):
    theirs = getattr(protocol, type(message).__name__)(*message)
    frame = wire.CODEC.encode(message)
    assert frame == protocol.CODEC.encode(theirs)
    assert protocol.CODEC.decode(frame) == theirs


@pytest.mark.parametrize("answer", ANSWERS, ids=repr)
def test_what_the_service_answers_is_what_the_client_reads(answer):
    ours = wire.CODEC.decode(protocol.CODEC.encode(answer))
    assert type(ours) is wire.RECEIVED[answer.TYPE]
    assert ours._asdict() == msgspec.structs.asdict(answer)


def test_what_only_the_full_codec_speaks_goes_through_it():
    # a TOML date: refused by the full codec, as before (a MesoslikeError: fuxi submit exits 1 saying it)
    with pytest.raises(MesoslikeError, match="date"):
        wire.CODEC.encode(wire.Submit(1, {"job": {"when": datetime.date(2026, 1, 1)}}))
    with pytest.raises(wire.WireError):
        wire.CODEC.encode(wire.Submit(1, {"n": 2 ** 70}))
    # an AppMaster's request (the tests' impostors ask with a JobClient), and news it hears
    request = protocol.SetDesire(1, "job-1", "t", "u", 2)
    assert wire.CODEC.encode(request) == protocol.CODEC.encode(request)
    news = protocol.SlotRevoked("job-1", "slot", "lost")
    assert wire.CODEC.decode(protocol.CODEC.encode(news)) == news


@pytest.mark.parametrize("frame, reason", [
    (b"\xc1", "not valid MessagePack"),
    (msgpack.packb([1]), "must be a map"),
    (msgpack.packb({"v": 2, "type": "OK", "id": 1}), "unsupported protocol version"),
    (msgpack.packb({"type": "OK", "id": 1}), "unsupported protocol version"),
    (msgpack.packb({"v": 1, "type": "NOPE", "id": 1}), "unknown message type"),
    (msgpack.packb({"v": 1, "type": "OK", "id": True}), "OK.id"),
    (msgpack.packb({"v": 1, "type": "OK", "id": "1"}), "OK.id"),
    (msgpack.packb({"v": 1, "type": "ERROR", "id": 1}), "ERROR.message: missing"),
    (msgpack.packb({"v": 1, "type": "STATUS_REPLY", "id": 1, "document": b"{}"}), "STATUS_REPLY.document"),
    (b"\x00" * (wire.MAX_FRAME + 1), "exceeds the limit"),
])
def test_a_bad_frame_is_refused_as_by_the_protocol(frame, reason):
    with pytest.raises(wire.WireError, match=reason):
        wire.CODEC.decode(frame)
    with pytest.raises(protocol.ProtocolError):
        protocol.CODEC.decode(frame)


def test_an_unknown_field_of_an_answer_is_ignored():
    assert wire.CODEC.decode(msgpack.packb({"v": 1, "type": "OK", "id": 7, "later": [1]})) == wire.Ok(7)


def test_the_job_client_imports_neither_the_protocols_classes_nor_the_wire():
    code = ("import sys; from mesoslike_frameworks.fuxi.client import JobClient; "
            "print(sorted(m for m in ('mesoslike_frameworks.fuxi.protocol', 'mesoslike.messaging', 'mesoslike.wire', "
            "'msgspec', 'attrs') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
