"""The one schema and codec machinery (mesoslike.messaging), over all three
protocols built on it: the master's (mesoslike.wire), the Fuxi service's and
the Fuxi AppMaster/worker one."""

import datetime
from typing import Annotated, Any, ClassVar

import attrs
import msgpack
import msgspec
import pytest
from codec_helpers import HOSTILE_NUMBERS, HOSTILE_RESOURCES, assert_the_fast_decoder_agrees_on_any_mutation
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol
from mesoslike.messaging import Codec, Items, Range, Schema, WireError
from mesoslike.wire import CODEC as MASTER_CODEC
from mesoslike.wire.schema import fields as message_fields

pytestmark = pytest.mark.timeout(60)

CODECS = [MASTER_CODEC, protocol.CODEC, amp.CODEC]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.schema.name)
def test_every_protocol_keeps_the_invariants_and_every_hint_is_checkable(codec):
    codec._check()
    assert codec.error is WireError
    assert all(cls.TYPE == kind for kind, cls in codec.schema.types.items())


def test_the_fuxi_protocols_share_the_error_type_of_the_wire():
    assert protocol.ProtocolError is amp.ProtocolError is WireError


# ------------------------------------------------------------------ schemas
def test_a_schema_refuses_what_is_not_a_message():
    schema = Schema("test", 1)

    @schema.message
    @attrs.frozen
    class Ping:
        TYPE: ClassVar[str] = "PING"

    with pytest.raises(TypeError, match="duplicate message type PING"):
        @schema.message
        @attrs.frozen
        class Again:
            TYPE: ClassVar[str] = "PING"
    with pytest.raises(TypeError, match="has no TYPE"):
        schema.message(attrs.frozen(type("NoType", (), {})))
    with pytest.raises(TypeError, match="neither an attrs class nor a msgspec Struct"):
        schema.message(type("Plain", (), {"TYPE": "PLAIN"}))
    assert schema.types == {"PING": Ping}
    schema._check()
    for version in (-1, 128, "1", 1.0):
        with pytest.raises(ValueError, match="0-127"):
            Schema("bad", version)


def test_a_codec_refuses_a_hint_it_cannot_check():
    schema = Schema("test", 1)

    @schema.message
    @attrs.frozen
    class Odd:
        TYPE: ClassVar[str] = "ODD"
        when: datetime.date

    with pytest.raises(TypeError, match="unsupported field type"):
        Codec(schema)._check()


# -------------------------------------------------------------- constraints
SCHEMA = Schema("constraints", 7)


@SCHEMA.message
@attrs.frozen
class Sample:
    TYPE: ClassVar[str] = "SAMPLE"
    count: Annotated[int, Range(min=0)]
    share: Annotated[float, Range(0, 1)] = 0.5
    pair: Annotated[list[Any], Items(str, Annotated[int, Range(max=9)])] = attrs.field(factory=lambda: ["a", 1])
    document: dict[str, Any] = attrs.field(factory=dict)


CODEC = Codec(SCHEMA, max_message_size=200)


def frame(**fields):
    return msgpack.packb({"v": 7, "type": "SAMPLE", **fields}, use_bin_type=True)


def test_constrained_fields_round_trip():
    sample = Sample(3, 1, ["b", 9], {"nested": [1, 2.5, None, True, b"x", {"k": "v"}]})
    assert CODEC.decode(CODEC.encode(sample)) == sample
    assert CODEC.decode(frame(count=0)) == Sample(0)
    assert type(CODEC.decode(frame(count=0, share=1)).share) is float


@pytest.mark.parametrize("fields, fragment", [
    ({"count": -1}, "SAMPLE.count: must be >= 0, got -1"),
    ({"count": True}, "SAMPLE.count: expected int, got bool"),
    ({"count": 1, "share": 1.5}, "SAMPLE.share: must be in [0, 1], got 1.5"),
    ({"count": 1, "share": float("nan")}, "SAMPLE.share: expected float"),
    ({"count": 1, "pair": ["a"]}, "SAMPLE.pair: expected a list of 2 items, got ['a']"),
    ({"count": 1, "pair": ["a", 1, 2]}, "SAMPLE.pair: expected a list of 2 items"),
    ({"count": 1, "pair": ("a", 1)}, None),   # msgpack gives a list back: accepted
    ({"count": 1, "pair": [1, 1]}, "SAMPLE.pair[0]: expected str, got int"),
    ({"count": 1, "pair": ["a", 10]}, "SAMPLE.pair[1]: must be <= 9, got 10"),
    ({"count": 1, "document": {"a": [msgpack.ExtType(5, b"x")]}}, "SAMPLE.document['a'][0]: expected plain data, got ExtType"),
    ({"count": 1, "document": {"a": {"b": msgpack.Timestamp(1)}}}, "SAMPLE.document['a']['b']: expected plain data"),
    ({"count": 1, "document": []}, "SAMPLE.document: expected a map"),
    ({}, "SAMPLE.count: missing"),
])
def test_constraints_name_the_field_and_the_bound(fields, fragment):
    if fragment is None:
        assert CODEC.decode(frame(**fields)).pair == ["a", 1]
        return
    with pytest.raises(WireError) as info:
        CODEC.decode(frame(**fields))
    assert fragment in str(info.value)


def test_encoding_refuses_foreign_messages_values_msgpack_cannot_carry_and_oversized_frames():
    with pytest.raises(WireError, match="not a message of the constraints protocol"):
        CODEC.encode(amp.Release())
    with pytest.raises(WireError, match="cannot encode SAMPLE"):
        CODEC.encode(Sample(1, document={"when": datetime.date(2024, 1, 1)}))
    with pytest.raises(WireError, match="exceeds the limit of 200"):
        CODEC.encode(Sample(1, document={"text": "x" * 300}))
    with pytest.raises(WireError, match="exceeds the limit of 200"):
        CODEC.decode(frame(count=1, document={"text": "x" * 300}))


def test_the_fuxi_job_document_cannot_carry_a_date():
    with pytest.raises(protocol.ProtocolError, match="cannot encode SUBMIT"):
        protocol.encode(protocol.Submit(1, {"job": {"start": datetime.date(2024, 1, 1)}}))


# ------------------------------------------------- the Fuxi frames unchanged
FUXI_EXAMPLES = [
    protocol.Submit(1, {"job": {"name": "x", "units": [{"name": "u", "slots": 2}]}}), protocol.Submitted(2, "job-0001"),
    protocol.Status(3), protocol.StatusReply(4, "{}"), protocol.Error(5, "no"), protocol.Ok(6),
    protocol.SetDesire(7, "job-1", "t", "u", 3), protocol.ReleaseSlot(8, "job-1", "t", "job-1.u.1"),
    protocol.AvoidHosts(9, "job-1", "t", "u", ["h1", "h2"]), protocol.BlacklistHost(10, "job-1", "t", "h1"),
    protocol.ReportHost(11, "job-1", "t", "h1"), protocol.Progress(12, "job-1", "t", {"units": {"u": {"done": 1}}}),
    protocol.JobEnded(13, "job-1", "t", True, ""), protocol.KillJob(14, "job-1"),
    protocol.SlotGranted("job-1", "job-1.u.1", "u", "h1", "er1"), protocol.SlotRevoked("job-1", "job-1.u.1", "lost"),
    amp.Hello("s", "u", "h", "er0", [1, 2], [[0, 1, True, "ok"]]), amp.Heartbeat("s", None), amp.Heartbeat("s", [3, 1]),
    amp.Progress("s", 1, 1, 0.5), amp.Done("s", 1, 1, False, "exit status 1"), amp.Bye("s", "x"), amp.Welcome("s"),
    amp.Rejoin(), amp.Assign(1, 2, "true", {"A": "b"}), amp.Kill(1, 2), amp.Ack(1, 2), amp.Release(), amp.Error("no"),
]


def fuxi_codec(message):
    return protocol.CODEC if type(message) in protocol.SCHEMA.types.values() else amp.CODEC


def test_the_fuxi_examples_cover_both_protocols():
    assert {type(e) for e in FUXI_EXAMPLES} == set(protocol.SCHEMA.types.values()) | set(amp.SCHEMA.types.values())


@pytest.mark.parametrize("message", FUXI_EXAMPLES, ids=lambda e: type(e).__module__.split(".")[-1] + "." + e.TYPE)
def test_fuxi_frames_are_the_maps_the_old_codec_wrote_and_round_trip(message):
    # the old codec: {"v": 1, "type": TYPE, **attrs.asdict(message, recurse=False)} (the classes were attrs classes)
    old = msgpack.packb({"v": 1, "type": message.TYPE, **msgspec.structs.asdict(message)}, use_bin_type=True)
    codec = fuxi_codec(message)
    written = codec.encode(message)
    # the same map ("v" and "type" first; MessagePack maps are unordered, and the fields may come in another order)
    assert msgpack.unpackb(written) == msgpack.unpackb(old)
    assert list(msgpack.unpackb(written))[:2] == ["v", "type"]
    assert codec.decode(old) == message == codec.decode(written)


@pytest.mark.parametrize("message", FUXI_EXAMPLES + [Sample(1)], ids=lambda e: e.TYPE)
def test_the_fast_decoder_agrees_with_the_checking_one_on_any_mutation(message):
    assert_the_fast_decoder_agrees_on_any_mutation(CODEC if isinstance(message, Sample) else fuxi_codec(message),
                                                   message)


# ------------------------------------------------------------ total decoders
plain_scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | st.text(max_size=6)
                 | st.binary(max_size=6) | st.sampled_from(HOSTILE_RESOURCES + HOSTILE_NUMBERS))
plain = st.recursive(plain_scalars, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=12)


@st.composite
def frames_of(draw, codec):
    """Maps that look like frames of ``codec``: its version (mostly), one of
    its types, its field names (mostly) with any plain values."""
    cls = draw(st.sampled_from(list(codec.schema.types.values())))
    names = [field.name for field in message_fields(cls)]
    keys = st.sampled_from(names) if names else st.text(max_size=4)
    fields = draw(st.dictionaries(keys | st.text(max_size=4), plain, max_size=len(names) + 1))
    version = draw(st.sampled_from([codec.schema.version] * 3 + [None, 99]))
    kind = draw(st.sampled_from([cls.TYPE] * 3 + ["NOPE", 7]))
    return msgpack.packb({"v": version, "type": kind, **fields}, use_bin_type=True)


def assert_decodes_or_raises_wire_error(codec, data):
    try:
        message = codec.decode(data)
    except WireError:
        return
    assert type(message) in codec.schema.types.values()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.schema.name)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_frame_decodes_to_a_message_or_raises_the_codecs_error(codec, data):
    assert_decodes_or_raises_wire_error(codec, data.draw(frames_of(codec)))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.schema.name)
@settings(max_examples=100, deadline=None)
@given(junk=st.binary(max_size=64))
def test_any_bytes_decode_to_a_message_or_raise_the_codecs_error(codec, junk):
    assert_decodes_or_raises_wire_error(codec, junk)
