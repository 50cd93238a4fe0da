"""The wire codec: every message round-trips; bad frames raise WireError."""

import math

import msgpack
import msgspec
import pytest

from mesoslike import MesoslikeError
from mesoslike.resources import Resources
from mesoslike.wire import (
    MESSAGE_TYPES,
    AgentInfo,
    ExecutorInfo,
    Filters,
    FrameworkInfo,
    MasterInfo,
    Offer,
    TaskInfo,
    TaskState,
    TaskStatus,
    WireError,
    decode,
    encode,
)
from mesoslike.wire import messages as m
from mesoslike.wire.types import (ContainerInfo, DockerInfo, Image, Launch, Reserve, Secret, SecretReference, Unreserve,
                                  Volume, VolumeSource)

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
TASK = TaskInfo("t1", "a1", "sleep 1", R("cpus:1;mem:128;ports:[31000-31001]"), name="sleeper",
                environment={"K": "v"})
FW = FrameworkInfo(name="demo", role="eng/prod", failover_timeout=60.0, id="fw-1")
MASTER = MasterInfo("m1", "tcp://127.0.0.1:5050", "http://127.0.0.1:5051", "0.1.0")
STATUS = TaskStatus("t1", TaskState.FAILED, agent_id="a1", message="exit 3", source="SOURCE_AGENT",
                    uuid="u-1", timestamp=12.5, exit_code=3, framework_id="fw-1")

EXAMPLES = [
    m.Subscribe(FW), m.Teardown("fw-1"),
    m.Accept("fw-1", ["O1", "O2"], [TASK], Filters(2.5)),
    m.Accept("fw-1", ["O1"], [], operations=[Reserve("cpus:1;mem:64"), Launch([TASK]),
                                              Unreserve("cpus(analytics,alice):1")]),
    m.Decline("fw-1", ["O3"], Filters(0.0)),
    m.Revive("fw-1"), m.Suppress("fw-1"), m.Kill("fw-1", "t1", "a1"),
    m.ShutdownExecutor("fw-1", "e1", "a1"), m.UpdateFramework(FrameworkInfo("demo", id="fw-1", labels=[("k", "v")])),
    m.Failure("a1", "exited", executor_id="e1", status=-9),
    m.Acknowledge("fw-1", "a1", "t1", "u-1"),
    m.Reconcile("fw-1", [m.ReconcileTask("t1", "a1"), m.ReconcileTask("t2")]), m.Reconcile("fw-1"),
    m.FrameworkMessage("fw-1", "a1", b"\x00\xffdata"),
    m.Subscribed("fw-1", 15.0, MASTER), m.Offers([Offer("O1", "a1", "node-0", R("cpus:2;mem:64"), {"room": "er0"})]),
    m.RescindOffer("O1", "offer_timeout"), m.Update(STATUS), m.Failure("a1", "lost"), m.Error("nope", fatal=True),
    m.Heartbeat(),
    m.RegisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), {"room": "er0"}, port=0)),
    m.ReregisterAgent(AgentInfo("node-0", R("cpus:4"), id="a1"), [m.RunningTask("fw-1", TASK, TaskState.RUNNING)],
                      [FW]),
    m.AgentRegistered("a1", MASTER, 5.0), m.Ping("a1"), m.Pong("a1"), m.RunTask(FW, TASK), m.KillTask("fw-1", "t1"),
    m.CheckpointResources("a1", Resources.parse("cpus(analytics,alice):1;mem(analytics,):64")),
    m.StatusUpdate("fw-1", STATUS), m.StatusUpdateAck("a1", "fw-1", "t1", "u-1"), m.ShutdownAgent("removed"),
    m.ShutdownFramework("fw-1"), m.PreemptionWarning(["t1", "t2"], 15.0, "eng"), m.GetState(), m.StateReply('{"leader": {}}'),
    m.Pong("a1", [m.TaskUsage("fw-1", "t1", 1.5, 0.25, 0.125, 1.0, 4096, 8192, 65536)]),
    m.UnregisterAgent("a1", "drained"),
    # batches (docs/wire.rst, "Batching"), and the flags that announce them
    m.Subscribe(FW, accepts_batches=True), m.Subscribed("fw-1", 15.0, MASTER, accepts_batches=True),
    m.RegisterAgent(AgentInfo("node-0", R("cpus:4")), accepts_batches=True),
    m.AgentRegistered("a1", MASTER, 5.0, accepts_batches=True),
    m.StatusUpdates([m.StatusUpdate("fw-1", STATUS), m.StatusUpdate("fw-2", TaskStatus("t2", TaskState.RUNNING,
                                                                                        uuid="u-2"))]),
    m.Updates([STATUS, TaskStatus("t2", TaskState.RUNNING, uuid="u-2")]),
    m.Acknowledgements([m.Acknowledge("fw-1", "a1", "t1", "u-1"), m.Acknowledge("fw-1", "a2", "t2", "u-2")]),
    m.StatusUpdateAcks([m.StatusUpdateAck("a1", "fw-1", "t1", "u-1"), m.StatusUpdateAck("a1", "fw-2", "t2", "u-2")]),
    m.RunTasks(FW, [TASK, TaskInfo("t2", "a1", "true", R("cpus:0.1;mem:16"))]),
    # custom executors (issue 18 §1)
    m.RunTask(FW, TaskInfo("t3", "a1", "", R("cpus:0.1"), executor=ExecutorInfo("e1", "run-executor", R("cpus:0.5"),
                                                                                 {"K": "v"}, "exec", [("k", "v")]))),
    m.ExecutorExited("a1", "fw-1", "e1", "exited with status 0"), m.ExecutorExited("a1", "fw-1", "e1", "x", 3),
    m.FrameworkMessage("fw-1", "a1", b"to the executor", executor_id="e1"),
    m.ReregisterAgent(AgentInfo("node-0", R("cpus:4"), id="a1"), [], [FW],
                      executors=[m.RunningExecutor("fw-1", ExecutorInfo("e1", "run-executor"))]),
    # containers, volumes and secrets (docs/containers.rst)
    m.RunTask(FW, TaskInfo("t4", "a1", "", R("cpus:0.1"), shell=False, arguments=["/bin/echo", "hi"],
                           container=ContainerInfo(image=Image("busybox:1.36", cached=False), hostname="web-1", volumes=[
                               Volume("/data", VolumeSource("HOST_PATH", path="/srv/data"), "RO"),
                               Volume("in", VolumeSource("SANDBOX_PATH", path="shared/in")),
                               Volume("/opt/tools", VolumeSource("IMAGE", image=Image("tools:2"))),
                               Volume("db.conf", VolumeSource("SECRET", secret=Secret("VALUE", value=b"pw\x00")))]),
                           environment_secrets={"DB_PASSWORD": Secret("REFERENCE",
                                                                      reference=SecretReference("db/pw", "k"))})),
    m.RunTask(FW, TaskInfo("t5", "a1", "serve", R("cpus:0.1"),
                           container=ContainerInfo("DOCKER", docker=DockerInfo("localhost:5000/team/web@sha256:"
                                                                               + "ab" * 32, "NONE", True)))),
]


def test_examples_cover_every_message_type():
    assert {type(e).TYPE for e in EXAMPLES} == set(MESSAGE_TYPES)


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda e: type(e).TYPE)
def test_round_trip(message):
    assert decode(encode(message)) == message


def frame(**fields):
    return msgpack.packb({"v": 1, **fields}, use_bin_type=True)


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"\xc1garbage", "not valid MessagePack"),
        (msgpack.packb([1, 2]), "must be a map"),
        (msgpack.packb({"v": 99, "type": "HEARTBEAT"}), "unsupported protocol version 99"),
        (msgpack.packb({"type": "HEARTBEAT"}), "unsupported protocol version None"),
        (frame(type="NOPE"), "unknown message type 'NOPE'"),
        (frame(type=7), "unknown message type 7"),
        (frame(type="TEARDOWN"), "TEARDOWN.framework_id: missing"),
        (frame(type="TEARDOWN", framework_id=5), "TEARDOWN.framework_id: expected str, got int"),
        (frame(type="DECLINE", framework_id="f", offer_ids="O1"), "offer_ids: expected a list"),
        (frame(type="DECLINE", framework_id="f", offer_ids=["O1"], filters={"refuse_seconds": math.nan}),
         "refuse_seconds: expected float"),
        (frame(type="DECLINE", framework_id="f", offer_ids=[], filters={"refuse_seconds": True}),
         "expected float, got bool"),
        (frame(type="PING", agent_id=None), "expected str"),
        (frame(type="OFFERS", offers=[{"id": "O", "agent_id": "a", "hostname": "h", "resources": "cpus:-1"}]),
         "OFFERS.offers[0].resources: quantity of 'cpus' must be >= 0"),
        (frame(type="OFFERS", offers=[{"id": "O", "agent_id": "a", "hostname": "h", "resources": 4}]),
         "resources must be a string"),
        (frame(type="SUBSCRIBE", framework={"name": "x", "failover_timeout": "long"}),
         "SUBSCRIBE.framework.failover_timeout: expected float"),
        (frame(type="UPDATE", status={"task_id": "t", "state": "TASK_RUNNING", "exit_code": 1.5}),
         "exit_code: expected int"),
        (frame(type="ACCEPT", framework_id="f", offer_ids=[], tasks=[{"task_id": "t"}]),
         "ACCEPT.tasks[0].agent_id: missing"),
        (frame(type="RUN_TASK", framework={"name": "x"}, task={**{"task_id": "t", "agent_id": "a",
                                                                 "command": "c", "resources": ""},
                                                              "environment": {"K": 1}}),
         "environment['K']: expected str"),
    ],
)
def test_bad_frames_raise_a_clear_wire_error(data, fragment):
    with pytest.raises(WireError) as info:
        decode(data)
    assert fragment in str(info.value)
    assert isinstance(info.value, MesoslikeError)


def test_size_limit():
    big = encode(m.Error("x" * 5000))
    assert decode(big, max_size=len(big)) == m.Error("x" * 5000)
    with pytest.raises(WireError, match="exceeds the limit"):
        decode(big, max_size=len(big) - 1)


def test_unknown_fields_are_ignored_for_forward_compatibility():
    assert decode(frame(type="TEARDOWN", framework_id="f", added_in_v2=[1, 2])) == m.Teardown("f")


def test_encode_refuses_non_messages():
    with pytest.raises(WireError):
        encode(TASK)
    with pytest.raises(WireError):
        decode("text")  # not bytes


# ------------------------------------------------------- the compiled path
# decode() runs the compiled decoder (msgspec) first and falls back to the
# checking one. The compiled one must never accept what the checking one
# refuses, nor build anything else from what both accept.

from codec_helpers import assert_the_fast_decoder_agrees_on_any_mutation  # noqa: E402

from mesoslike.wire import CODEC  # noqa: E402
from mesoslike.wire.codec import to_plain  # noqa: E402
from mesoslike.wire.schema import fields, is_message_class  # noqa: E402


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: type(e).TYPE)
def test_the_fast_decoder_agrees_with_the_checking_one_on_any_mutation(example):
    assert_the_fast_decoder_agrees_on_any_mutation(CODEC, example)


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda e: type(e).TYPE)
def test_the_compiled_decoder_takes_every_valid_message(message):
    assert CODEC._decode_compiled(encode(message)) == message


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda e: type(e).TYPE)
def test_peek_type_reads_the_type_without_decoding(message):
    from mesoslike.wire.codec import peek_type
    frame_bytes = encode(message)
    assert peek_type(frame_bytes) == type(message).TYPE
    # maps written by another encoder, key order included, take the slow path
    assert peek_type(msgpack.packb({"type": type(message).TYPE, "v": 1})) == type(message).TYPE
    for cut in (0, 1, 5, 9, 11):
        peeked = peek_type(frame_bytes[:cut])
        assert peeked is None or type(message).TYPE.startswith(peeked)


@pytest.mark.parametrize("junk", [b"", b"\x00", b"\xc1garbage", msgpack.packb([1, 2]), msgpack.packb({"v": 1}),
                                  msgpack.packb({"v": 1, "type": 7}), b"\x82\xa1v\x01\xa4type\xa5AB"])
def test_peek_type_of_junk_is_none(junk):
    from mesoslike.wire.codec import peek_type
    assert peek_type(junk) is None


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda e: type(e).TYPE)
def test_the_encoder_writes_what_to_plain_writes_version_and_type_first(message):
    """What the encoder writes is what to_plain writes, but for the fields
    of a class that omits its defaults (``TaskInfo``, ``TaskStatus``: most
    of their fields are at their defaults in nearly every task) left out
    when at their default: every decoder fills an absent field's default."""
    written = msgpack.unpackb(encode(message), raw=False)
    assert list(written)[:2] == ["v", "type"] and written["v"] == 1 and written["type"] == type(message).TYPE
    _assert_written_as_plain({key: value for key, value in written.items() if key not in ("v", "type")}, message)
    assert CODEC._decode_compiled(encode(message)) == message


def test_only_a_message_that_may_carry_any_value_is_walked_before_it_is_encoded():
    """The encoder checks ``Any`` values for plain data before writing
    (msgspec would write a set or a date no decoder takes back); a message
    whose classes carry no ``Any`` field is written without a walk — a
    class's other annotations (``__wire_converters__``, a ClassVar of
    converters taking Any) are not values it carries. Counted, they had
    every RUN_TASK, ACCEPT and OFFERS call a check for each task and offer."""
    from mesoslike.wire import compiled
    from mesoslike_frameworks.fuxi import protocol

    from mesoslike.wire import executor_messages

    for schema in (m.SCHEMA, executor_messages.EXECUTOR_SCHEMA):
        for message_class in schema.types.values():
            assert not compiled._holds_any(message_class), f"{message_class.__name__} carries no Any field"
            assert compiled._encode_check(message_class) is None
    for message_class in (protocol.Submit, protocol.Progress):   # a job's document, a unit's report: Any, walked
        assert compiled._holds_any(message_class) and compiled._encode_check(message_class) is not None
    with pytest.raises(WireError, match="set"):
        protocol.CODEC.encode(protocol.Submit(1, {"job": {1, 2}}))


def _assert_written_as_plain(written, value, path="message"):
    """``written`` (a decoded frame's part) is ``to_plain(value)`` but for
    fields left out of classes that omit defaults, at their default."""
    if isinstance(value, (list, tuple)):
        assert isinstance(written, list) and len(written) == len(value), path
        for index, (item, one) in enumerate(zip(written, value)):
            _assert_written_as_plain(item, one, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        assert isinstance(written, dict) and set(written) == set(value), path
        for key, one in value.items():
            _assert_written_as_plain(written[key], one, f"{path}.{key}")
        return
    if not is_message_class(type(value)):
        assert written == to_plain(value), path
        return
    assert isinstance(written, dict), path
    names = [field.name for field in fields(type(value))]
    assert set(written) <= set(names), path
    for name in names:
        if name in written:
            _assert_written_as_plain(written[name], getattr(value, name), f"{path}.{name}")
        else:   # left out: only by a Struct that omits defaults, and only at the default
            assert isinstance(value, msgspec.Struct) and value.__struct_config__.omit_defaults, f"{path}.{name}"
            (field,) = [field for field in msgspec.structs.fields(value) if field.name == name]
            default = field.default if field.default is not msgspec.NODEFAULT else field.default_factory()
            assert getattr(value, name) == default, f"{path}.{name} left out but not at its default"


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda e: type(e).TYPE)
def test_a_frame_with_every_field_written_decodes_to_the_same_message(message):
    """The form before defaults were left out (what an older peer writes: every
    field, as to_plain has them) decodes to the very message, on both paths."""
    every_field = msgpack.packb({"v": 1, "type": type(message).TYPE, **to_plain(message)}, use_bin_type=True)
    assert CODEC._decode_compiled(every_field) == message
    assert decode(every_field) == message


def test_a_message_class_that_would_omit_its_defaults_is_refused():
    from typing import ClassVar

    from mesoslike.wire import compiled

    class Omitting(msgspec.Struct, frozen=True, omit_defaults=True):
        TYPE: ClassVar[str] = "OMITTING"
        name: str = ""

    with pytest.raises(TypeError, match="writes every field"):
        compiled.encoder(Omitting, 1)


def test_a_status_and_a_task_leave_their_default_fields_out():
    from mesoslike.wire.checking import from_plain

    written = msgpack.unpackb(encode(m.StatusUpdate("fw-1", STATUS.replace(exit_code=None, message=""))), raw=False)
    assert set(written["status"]) == {"task_id", "state", "agent_id", "source", "uuid", "timestamp", "framework_id"}
    bare = TaskInfo("t2", "a1", "true", R("cpus:0.01;mem:1"))
    written = msgpack.unpackb(encode(m.RunTask(FW, bare)), raw=False)
    assert set(written["task"]) == {"task_id", "agent_id", "command", "resources"}
    # each decoder fills what is left out: the compiled one and the checking one alike
    assert decode(encode(m.RunTask(FW, bare))).task == bare
    assert from_plain(TaskInfo, written["task"], "task") == bare


# ----------------------------------------------- hostile numbers (issue 12 §2)
@pytest.mark.parametrize("resources, fragment", [
    ("cpus:1.7e305;cpus:1.7e305;mem:1024", "must be <= 1e+15"),   # each entry, and their sum 3.4e305, too large
    ("cpus:6e14;cpus:6e14", "(its entries added up)"),            # each fits, the sum does not
    ("cpus:1e306", "must be <= 1e+15"),                            # *1000 overflowed a float: OverflowError
    ("cpus:1e308", "must be <= 1e+15"),
    ("cpus:inf", "must be finite"),
    ("cpus:nan", "must be finite"),
    ("ports:[1-" + "9" * 400 + "]", "bounds are at most 1e+15"),
    ("ports:[1-" + "9" * 5000 + "]", "bounds are at most 1e+15"),  # int() refuses 4,300+ digits with a ValueError
])
def test_a_registration_with_hostile_resources_is_a_wire_error_naming_the_field(resources, fragment):
    data = frame(type="REGISTER_AGENT", agent={"hostname": "h", "resources": resources})
    with pytest.raises(WireError) as info:
        decode(data)
    assert str(info.value).startswith("REGISTER_AGENT.agent.resources:") and fragment in str(info.value)


def test_the_largest_quantity_decodes_and_adds_up_without_overflow():
    top = f"cpus:{Resources.parse('cpus:1').get('cpus') * 1e15:.0f};mem:1e15"
    offer = {"id": "O", "agent_id": "a", "hostname": "h", "resources": top}
    (decoded,) = decode(frame(type="OFFERS", offers=[offer])).offers
    assert decoded.resources.get("cpus") == 1e15
    total = Resources.sum([decoded.resources] * 100_000)   # a cluster of the largest agents
    assert total.get("mem") == 1e20 and total.contains(decoded.resources)


@pytest.mark.parametrize("value", [1.7e305, 1e306, 1e308, -1e308])
def test_huge_finite_numbers_are_numbers_and_infinities_are_not(value):
    assert decode(frame(type="SUBSCRIBED", framework_id="f", heartbeat_interval=value,
                        master={"id": "m", "address": "a"})).heartbeat_interval == value
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(WireError, match="heartbeat_interval: expected float"):
            decode(frame(type="SUBSCRIBED", framework_id="f", heartbeat_interval=bad,
                         master={"id": "m", "address": "a"}))


# ------------------------------------------------------------ containers and secrets
def test_a_secrets_value_never_shows_in_a_repr():
    task = TaskInfo("t", "a1", "", R("cpus:0.1"), environment_secrets={"DB_PASSWORD": Secret("VALUE", value=b"hunter2")},
                    container=ContainerInfo(volumes=[Volume("pw", VolumeSource("SECRET", secret=Secret(
                        "VALUE", value=b"swordfish")))]))
    text = repr(m.RunTask(FW, task))
    assert "DB_PASSWORD" in text
    assert "hunter2" not in text and "swordfish" not in text


@pytest.mark.parametrize("build, fragment", [
    (lambda: Volume("../etc", VolumeSource("SANDBOX_PATH", path="x")), "without '..'"),
    (lambda: VolumeSource("HOST_PATH", path="relative/path"), "must be absolute"),
    (lambda: VolumeSource("SANDBOX_PATH", path="/abs"), "relative to the sandbox"),
    (lambda: VolumeSource("SECRET"), "secret is required"),
    (lambda: Secret("VALUE"), "value is required"),
    (lambda: Secret("REFERENCE", value=b"x"), "only for it"),
    (lambda: SecretReference("../../etc/shadow"), "without '..'"),
    (lambda: Image("Bad Name"), "Docker image reference"),
    (lambda: ContainerInfo("DOCKER"), "docker is required"),
    (lambda: DockerInfo("busybox", network="BRIDGE"), "no bridge network"),
    (lambda: TaskInfo("t", "a", "", R("cpus:1"), environment_secrets={"1X": Secret("VALUE", value=b"")}),
     "shell variable name"),
    (lambda: TaskInfo("t", "a", "", R("cpus:1"), arguments=["a\0b"]), "without NUL"),
])
def test_hostile_container_fields_are_refused_naming_the_field(build, fragment):
    with pytest.raises(ValueError, match=fragment):
        build()


# --------------------------------- the value types' checks on the compiled path
def run_task_frame(**task):
    return frame(type="RUN_TASK", framework={"name": "fw"},
                 task={"task_id": "t", "agent_id": "a", "command": "c", "resources": "cpus:1", **task})


@pytest.mark.parametrize("data, fragment", [
    # attrs validators and __attrs_post_init__ (msgspec runs them)
    (run_task_frame(labels=[{"key": "k"}] * 33), "33 labels are more than 32"),
    (run_task_frame(labels=[{"key": "k\x07"}]), "holds a control character"),
    (run_task_frame(health_check={"type": "TCP"}), "health_check.tcp is required"),
    (run_task_frame(container={"type": "MESOS", "hostname": "a b"}), "container.hostname"),
    # converters that check (run after msgspec, not marked normalizer())
    (run_task_frame(uris=[{"value": "https://h/f"}] * 101), "a task fetches at most 100 URIs"),
    (run_task_frame(environment_secrets={"1X": {"type": "VALUE", "value": b""}}), "shell variable name"),
    (run_task_frame(arguments=["a\x00b"]), "without NUL"),
    # what msgspec does not check: finite floats, lengths
    (run_task_frame(kill_grace_period=math.nan), "kill_grace_period: expected float"),
    (frame(type="UPDATE", status={"task_id": "t", "state": "TASK_RUNNING", "timestamp": math.inf}),
     "UPDATE.status.timestamp: expected float"),
    (frame(type="PREEMPTION_WARNING", task_ids=["t"] * 200_001, seconds=1.0), "not valid MessagePack"),
    (run_task_frame(environment={str(i): "" for i in range(200_001)}), "not valid MessagePack"),
])
def test_the_compiled_decoder_refuses_what_the_value_types_refuse(data, fragment):
    with pytest.raises(Exception):   # (it raises whatever it raises: the codec then runs the checking decoder)
        CODEC._decode_compiled(data)
    with pytest.raises(WireError) as info:
        decode(data)
    assert fragment in str(info.value)


def test_a_frame_laid_out_otherwise_takes_the_checking_path_to_the_same_message():
    message = m.StatusUpdate("fw-1", STATUS)
    reordered = msgpack.packb({"type": "STATUS_UPDATE", **to_plain(message), "v": 1}, use_bin_type=True)
    with pytest.raises(ValueError):
        CODEC._decode_compiled(reordered)
    assert decode(reordered) == message


def test_a_converter_runs_on_a_decoded_empty_list_only_if_it_might_refuse_or_change_it():
    # the compiled decoder skips a converter on an empty list when the converter keeps
    # an empty list as it is (asked once): it ran for every task's empty fields before
    import attrs

    from mesoslike.wire.compiled import decoder

    calls = []

    def keeps(value):
        calls.append(value)
        return list(value)

    def refuses_empty(value):
        if not value:
            raise ValueError("at least one item")
        return list(value)

    @attrs.frozen
    class Keeps:
        items: list[str] = attrs.field(converter=keeps, factory=list)

    @attrs.frozen
    class Refuses:
        items: list[str] = attrs.field(converter=refuses_empty, factory=lambda: ["x"])

    decode = decoder(Keeps)
    calls.clear()   # (asked once, when the decoder was made)
    assert decode(msgpack.packb({"items": []})).items == [] and calls == []
    assert decode(msgpack.packb({"items": ["a"]})).items == ["a"] and calls == [["a"]]
    with pytest.raises(ValueError):
        decoder(Refuses)(msgpack.packb({"items": []}))
    assert decoder(Refuses)(msgpack.packb({"items": ["a"]})).items == ["a"]


def test_a_converter_taking_the_instance_is_refused_and_attrs_classes_probe_msgspec_when_first_compiled():
    # attrs is imported by the compiled codec only for an attrs class (a client's classes are all Structs):
    # its Converter class is looked up in the loaded attrs, and its validators probed once, lazily
    import attrs

    from mesoslike.wire import compiled

    def with_instance(value, instance):
        return list(value)

    @attrs.frozen
    class TakesInstance:
        items: list[str] = attrs.field(converter=attrs.Converter(with_instance, takes_self=True), factory=list)

    compiled._refuse_an_old_msgspec_for_attrs.cache_clear()
    with pytest.raises(TypeError, match="a converter that takes the instance"):
        compiled.decoder(TakesInstance)
    assert compiled._refuse_an_old_msgspec_for_attrs.cache_info().misses == 1


def test_the_wire_modules_import_no_attrs():
    # attrs costs a client ~20 ms of its start: the codec, the value types and the allocator's values
    # tell an attrs class by its __attrs_attrs__ and import attrs only to take one apart
    import subprocess
    import sys

    modules = ("mesoslike.wire.schema", "mesoslike.wire.compiled", "mesoslike.wire.codec", "mesoslike.attributes",
               "mesoslike.allocator.offers", "mesoslike.wire.types", "mesoslike_frameworks.constraints")
    out = subprocess.run([sys.executable, "-c", f"import sys\nfor m in {modules!r}: __import__(m)\n"
                          "print(sorted(m for m in ('attr', 'attrs') if m in sys.modules))"],
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
