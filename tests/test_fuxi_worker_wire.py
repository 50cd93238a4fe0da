"""The worker's side of the AppMaster/worker protocol (frameworks/
mesoslike_frameworks/fuxi/worker_wire.py) against the protocol's
declaration (am_protocol.py): the same messages, fields and defaults;
what a worker sends is what the AppMaster's codec takes (its compiled
decoder, as the AppMaster's own encoder writes it), what the AppMaster
sends is what the worker reads, and a bad frame is refused as strictly.
And what a worker imports when it starts — every slot pays for it — is
not the schema machinery."""

from __future__ import annotations

import subprocess
import sys

import msgpack
import msgspec
import pytest

from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import worker_wire as wire

pytestmark = pytest.mark.timeout(60)

SENT = [wire.Hello("job-1.u.0", "u", "node-1", "er0", [3, 1], [[0, 1, True, "exit status 0"]], "t0ken", "agent-1"),
        wire.Hello("s", "u", "h"), wire.Heartbeat("s", None), wire.Heartbeat("s", [3, 1]),
        wire.Progress("s", 1, 2, 0.25), wire.Done("s", 1, 1, False, "exit status 1: boom"), wire.Done("s", 0, 0, True),
        wire.Bye("s", "killed (SIGTERM)"), wire.Error("busy")]
RECEIVED = [amp.Welcome("s"), amp.Rejoin(), amp.Assign(7, 2, "echo hi", {"A": "b", "FUXI_X": ""}),
            amp.Assign(0, 0, "true"), amp.Kill(1, 2), amp.Ack(1, 2), amp.Release(), amp.Error("no")]


def _fields(cls: type) -> list[tuple[str, object]]:
    """A message class's fields and their defaults (``...`` when required), a Struct or the worker's own."""
    if issubclass(cls, msgspec.Struct):
        return [(f.name, ... if f.required else
                 (f.default_factory() if f.default is msgspec.NODEFAULT else f.default))
                for f in msgspec.structs.fields(cls)]
    return [(name, cls._field_defaults.get(name, ...)) for name in cls._fields]  # type: ignore[attr-defined]


def test_the_worker_knows_every_message_of_the_protocol_with_its_fields_and_defaults():
    ours = {**wire.SENT, **wire.RECEIVED}
    assert set(ours) == set(amp.SCHEMA.types)
    for kind, cls in amp.SCHEMA.types.items():
        assert _fields(ours[kind]) == _fields(cls), kind
    assert (wire.VERSION, wire.MAX_FRAME) == (amp.SCHEMA.version, amp.CODEC.max_message_size)


@pytest.mark.parametrize("message", SENT, ids=lambda m: type(m).__name__)
def test_what_a_worker_sends_is_what_the_appmaster_reads_through_its_compiled_decoder(message):
    frame = wire.CODEC.encode(message)
    expected = getattr(amp, type(message).__name__)(*message)
    assert frame == amp.CODEC.encode(expected)   # byte for byte as the AppMaster's side writes it
    assert amp.CODEC._decode_compiled(frame) == expected


@pytest.mark.parametrize("message", RECEIVED, ids=lambda m: type(m).__name__)
def test_what_the_appmaster_sends_is_what_a_worker_reads(message):
    got = wire.CODEC.decode(amp.CODEC.encode(message))
    assert type(got).__name__ == type(message).__name__
    assert got._asdict() == msgspec.structs.asdict(message)


@pytest.mark.parametrize("plain, reason", [
    ({"type": "ACK", "instance": 1, "attempt": 0}, "unsupported protocol version"),
    ({"v": True, "type": "ACK", "instance": 1, "attempt": 0}, "unsupported protocol version"),
    ({"v": 2, "type": "ACK", "instance": 1, "attempt": 0}, "unsupported protocol version"),
    ({"v": 1, "type": "NOPE"}, "unknown message type"),
    ({"v": 1, "type": 3}, "unknown message type"),
    ({"v": 1, "type": "HELLO", "slot": "s", "unit": "u", "hostname": "h"}, "HELLO is not a message for a worker"),
    ({"v": 1, "type": "ASSIGN", "instance": 1, "attempt": 0}, "ASSIGN.command: missing"),
    ({"v": 1, "type": "ASSIGN", "instance": -1, "attempt": 0, "command": "x"}, "ASSIGN.instance: must be >= 0"),
    ({"v": 1, "type": "ACK", "instance": True, "attempt": 0}, "ACK.instance: expected int, got bool"),
    ({"v": 1, "type": "KILL", "instance": 1.0, "attempt": 0}, "KILL.instance: expected int, got float"),
    ({"v": 1, "type": "ASSIGN", "instance": 1, "attempt": 0, "command": b"x"}, "ASSIGN.command: expected str"),
    ({"v": 1, "type": "ASSIGN", "instance": 1, "attempt": 0, "command": "x", "env": {"A": 1}},
     "ASSIGN.env: expected strings"),
    ({"v": 1, "type": "ASSIGN", "instance": 1, "attempt": 0, "command": "x", "env": ["A"]},
     "ASSIGN.env: expected a map"),
    ({"v": 1, "type": "ASSIGN", "instance": 1, "attempt": 0, "command": "x", "acks": [[1, "2"]]},
     "ASSIGN.acks: expected int, got str"),
    ({"v": 1, "type": "ASSIGN", "instance": 1, "attempt": 0, "command": "x", "acks": [[1]]},
     r"ASSIGN.acks: expected \[instance, attempt\]"),
    ({"v": 1, "type": "ASSIGN", "instance": 1, "attempt": 0, "command": "x", "acks": {"1": 2}},
     "ASSIGN.acks: expected a list"),
    ({"v": 1, "type": "ASSIGN", "instance": 1, "attempt": 0, "command": "x", "acks": [[1, -2]]},
     "ASSIGN.acks: must be >= 0"),
    ({"v": 1, "type": "WELCOME"}, "WELCOME.slot: missing"),
    ({"v": 1, "type": "ERROR", "message": None}, "ERROR.message: expected str"),
])
def test_a_bad_frame_is_refused_with_the_field_named(plain, reason):
    with pytest.raises(wire.CODEC.error, match=reason):
        wire.CODEC.decode(msgpack.packb(plain))


@pytest.mark.parametrize("frame", [b"", b"\xc1", b"\x93\x01\x02\x03", msgpack.packb("ACK"),
                                   b"\x00" * (wire.MAX_FRAME + 1)])
def test_garbage_is_a_wire_error_not_a_crash(frame):
    with pytest.raises(wire.WireError):
        wire.CODEC.decode(frame)


def test_unknown_fields_are_ignored_as_the_appmaster_does():
    frame = msgpack.packb({"v": 1, "type": "ACK", "instance": 1, "attempt": 2, "later": [1]})
    assert wire.CODEC.decode(frame) == wire.Ack(1, 2)


def test_a_worker_sends_only_its_own_messages():
    with pytest.raises(wire.WireError):
        wire.CODEC.encode(wire.Assign(1, 1, "true"))
    with pytest.raises(wire.WireError):
        wire.CODEC.encode(amp.Hello("s", "u", "h"))


def test_a_worker_starts_without_the_schema_machinery():
    """What a worker's start imports: not the protocol's declaration,
    its compiled codec or the wire package under it, not msgspec, not the
    resources parser."""
    heavy = ["mesoslike_frameworks.fuxi.am_protocol", "mesoslike.wire", "mesoslike.messaging", "msgspec",
             "mesoslike.resources"]
    done = subprocess.run([sys.executable, "-c", "import sys, mesoslike_frameworks.fuxi.worker; "
                           f"print([m for m in {heavy!r} if m in sys.modules])"],
                          capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_a_worker_tries_its_appmaster_again_at_least_every_tenth_of_a_second(monkeypatch, tmp_path):
    """A job's AppMaster binds while its workers start — often after them (it
    imports more than a worker, and 16 workers start with it); a worker
    whose first try was refused must not back off for long (the transport's
    default doubles to 2 s): every instance of the job waits for the
    workers' HELLOs. It tries again after 20 ms, doubling to 0.1 s (the
    transport's shortest). (The effect is measured by bench/fuxi_path.py's
    timeline, not timed here.)"""
    from mesoslike_frameworks.fuxi import worker

    made: list[dict] = []

    class Recording(worker.Connection):
        def __init__(self, *args, **kwargs) -> None:
            made.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(worker, "Connection", Recording)
    it = worker.Worker("tcp://127.0.0.1:1", "job-1.u.0", "u", "h", sandbox=tmp_path)
    try:
        assert made and made[0].get("reconnect_max", 2.0) <= 0.1
        assert made[0].get("reconnect_min", 0.1) <= 0.02
    finally:
        it._client.close()
        it._waker.close()
