"""The wire codec per message type: microseconds to encode and to decode
(with every check), frame bytes — this tree's codec and, in the same run, a
baseline tree's (``--baseline``: another checkout, e.g. ``git worktree add
/tmp/wire-base main``), round by round, interleaved, so the machine's load
falls on both. Prints one JSON document.

Also measured in this tree, to say what the codec's checks cost:
``msgspec_structs`` — the same messages as plain msgspec Structs generated
from the attrs classes (no converters, validators or checks: the bound of
decoding without validation), and ``formats`` — MessagePack against JSON on
the same plain data (what chose MessagePack, docs/wire.rst).

    python bench/wire.py --baseline /tmp/wire-base --out bench/results/wire.json
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def samples() -> dict[str, tuple[object, object]]:
    """name -> (codec, message): what crosses the wire per task, and a few larger frames."""
    from mesoslike_frameworks.fuxi import am_protocol as amp
    from mesoslike_frameworks.fuxi import protocol
    from mesoslike.resources import Resources
    from mesoslike.wire import CODEC, FrameworkInfo, Offer, TaskInfo, TaskState, TaskStatus
    from mesoslike.wire import executor_messages as x
    from mesoslike.wire import messages as m
    from mesoslike.wire.types import CommandURI, ContainerInfo, HealthCheck, Image, Label, Volume, VolumeSource

    res = Resources.parse("cpus:24;mem:4096;disk:4096;ports:[31000-32000]")
    offers = [Offer(f"O{i}", f"agent-{i:05d}", f"node-{i:05d}", res, {"room": f"er{i % 2}"}) for i in range(100)]
    tasks = [TaskInfo(f"task-{i}", "agent-00001", "python -m worker --shard 17", Resources.parse("cpus:1;mem:512"))
             for i in range(10)]
    status = TaskStatus("task-1", TaskState.RUNNING, agent_id="agent-00001", source="SOURCE_AGENT",
                        uuid="6f1c2a8e-2f0b-4c7e-9a55-1d3f5e7a9b0c", timestamp=1732200000.5, framework_id="fw-1")
    framework = FrameworkInfo("demo", "eng/prod", 60.0, id="fw-1", user="alice")
    task = TaskInfo("task-1", "agent-00001", "true", Resources.parse("cpus:0.01;mem:1"), name="bench0 #1")
    rich = TaskInfo("task-2", "agent-00001", "serve --port $PORT", Resources.parse("cpus:1;mem:512;ports:[31000-31000]"),
                    environment={"PORT": "31000", "MODE": "prod"}, health_check=HealthCheck("COMMAND", "true"),
                    uris=[CommandURI("https://example.com/app.tar.gz")], labels=[Label("team", "ml")],
                    container=ContainerInfo(image=Image("busybox:1.36"),
                                            volumes=[Volume("data", VolumeSource("SANDBOX_PATH", path="data"))]))
    ack = m.Acknowledge("fw-1", "agent-00001", "task-1", status.uuid)
    return {
        "STATUS_UPDATE": (CODEC, m.StatusUpdate("fw-1", status)),
        "UPDATE": (CODEC, m.Update(status)),
        "ACKNOWLEDGE": (CODEC, ack),
        "STATUS_UPDATE_ACK": (CODEC, m.StatusUpdateAck("agent-00001", "fw-1", "task-1", status.uuid)),
        "RUN_TASK": (CODEC, m.RunTask(framework, task)),
        "RUN_TASK (container, health check, URI)": (CODEC, m.RunTask(framework, rich)),
        "ACCEPT (10 tasks)": (CODEC, m.Accept("fw-1", ["O1"], tasks)),
        "OFFERS (100 offers)": (CODEC, m.Offers(offers)),
        "STATUS_UPDATES (100)": (CODEC, m.StatusUpdates([m.StatusUpdate("fw-1", status)] * 100)),
        "ACKNOWLEDGEMENTS (100)": (CODEC, m.Acknowledgements([ack] * 100)),
        "SUBSCRIBE": (CODEC, m.Subscribe(framework, accepts_batches=True)),
        "PING": (CODEC, m.Ping("agent-00001")),
        "EXECUTOR_STATUS": (x.EXECUTOR_CODEC, x.ExecutorStatus("ab" * 32, status)),
        "fuxi SUBMIT": (protocol.CODEC, protocol.Submit(1, {"job": {"name": "x", "units": [
            {"name": "u", "slots": 2, "instances": 100, "command": "true", "cpus": 0.1, "mem": 64}]}})),
        "fuxi AppMaster HEARTBEAT": (amp.CODEC, amp.Heartbeat("job-1.u.1", [3, 1])),
        "fuxi AppMaster DONE": (amp.CODEC, amp.Done("job-1.u.1", 3, 1, True, "exit 0")),
    }


def per_op_us(fn: Callable[[], object], budget_s: float = 0.1) -> float:
    """The best of 5 timed loops of ``fn``, in microseconds of this
    process's CPU time per call (on a loaded machine, wall time counts the
    time other processes ran)."""
    clock = time.process_time
    repeat = 1
    while True:   # calibrate: a loop of about budget_s / 5
        started = clock()
        for _ in range(repeat):
            fn()
        if clock() - started > budget_s / 5 or repeat > 1_000_000:
            break
        repeat *= 4
    best = float("inf")
    for _ in range(5):
        started = clock()
        for _ in range(repeat):
            fn()
        best = min(best, (clock() - started) / repeat)
    return best * 1e6


def measure_codec() -> dict[str, dict[str, float]]:
    """Encode and decode of every sample with the codec importable here (one round)."""
    out = {}
    for name, (codec, message) in samples().items():
        frame = codec.encode(message)  # type: ignore[attr-defined]
        assert codec.decode(frame) == message, name  # type: ignore[attr-defined]
        out[name] = {"bytes": len(frame),
                     "encode_us": per_op_us(lambda: codec.encode(message)),  # type: ignore[attr-defined]
                     "decode_us": per_op_us(lambda: codec.decode(frame))}  # type: ignore[attr-defined]
    return out


# -------------------------------------------------- plain msgspec Structs
def struct_mirror(cls: type, made: dict[type, type]) -> type:
    """A msgspec Struct with the fields and hints of message class ``cls``
    (an attrs class or a Struct; nested classes mirrored, Resources as str),
    no checks."""
    import typing

    import attrs
    import msgspec

    from mesoslike.resources import Resources
    from mesoslike.wire.schema import is_message_class
    if cls in made:
        return made[cls]

    def mirror(hint: object) -> object:
        if hint is Resources:
            return str
        if is_message_class(hint):
            return struct_mirror(hint, made)  # type: ignore[arg-type]
        origin = typing.get_origin(hint)
        if origin is typing.Annotated:
            return mirror(typing.get_args(hint)[0])
        if origin in (list, dict):
            return origin[tuple(mirror(a) for a in typing.get_args(hint))]  # type: ignore[index]
        if origin is not None and type(None) in typing.get_args(hint):
            (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
            return mirror(inner) | None  # type: ignore[operator]
        return hint
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: list[Any] = []
    for name, default in _defaults(cls):
        if default is _REQUIRED:
            fields.append((name, mirror(hints[name])))
        else:
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = msgspec.field(default_factory=default.factory)
            elif is_message_class(type(default)) or isinstance(default, Resources):
                default = msgspec.field(default_factory=lambda d=default: to_struct(d, made))
            fields.append((name, mirror(hints[name]), default))
    made[cls] = msgspec.defstruct(cls.__name__, fields)
    return made[cls]


def to_struct(value: object, made: dict[type, type]) -> object:
    from mesoslike.resources import Resources
    from mesoslike.wire.schema import fields, is_message_class
    if isinstance(value, Resources):
        return str(value)
    if isinstance(value, list):
        return [to_struct(v, made) for v in value]
    if isinstance(value, dict):
        return {k: to_struct(v, made) for k, v in value.items()}
    if is_message_class(type(value)):
        struct = struct_mirror(type(value), made)
        return struct(**{f.name: to_struct(getattr(value, f.name), made) for f in fields(type(value))})
    return value


_REQUIRED = object()


def _defaults(cls: type) -> list[tuple[str, object]]:
    """(name, default: an attrs default or Factory, or _REQUIRED) of each field of an attrs class or Struct."""
    import attrs
    import msgspec
    if issubclass(cls, msgspec.Struct):
        return [(f.name, _REQUIRED if f.required else f.default if f.default is not msgspec.NODEFAULT
                 else attrs.Factory(f.default_factory)) for f in msgspec.structs.fields(cls)]
    return [(f.name, _REQUIRED if f.default is attrs.NOTHING else f.default) for f in attrs.fields(cls)]


def measure_structs() -> dict[str, dict[str, float]]:
    import msgspec
    made: dict[type, type] = {}
    out = {}
    encoder = msgspec.msgpack.Encoder()
    for name, (_, message) in samples().items():
        struct = to_struct(message, made)
        decoder = msgspec.msgpack.Decoder(type(struct))
        frame = encoder.encode(struct)
        assert decoder.decode(frame) == struct
        out[name] = {"encode_us": per_op_us(lambda: encoder.encode(struct)),
                     "decode_us": per_op_us(lambda: decoder.decode(frame))}
    return out


def measure_formats() -> dict[str, dict[str, float]]:
    """MessagePack against JSON on the same plain data (both without checks)."""
    import msgpack

    from mesoslike.wire.codec import to_plain
    out = {}
    for name in ("STATUS_UPDATE", "SUBSCRIBE", "ACCEPT (10 tasks)", "OFFERS (100 offers)"):
        message = samples()[name][1]
        plain = {"v": 1, "type": type(message).TYPE, **to_plain(message)}  # type: ignore[attr-defined, dict-item]
        packed = msgpack.packb(plain, use_bin_type=True)
        text = json.dumps(plain, separators=(",", ":"), default=_base64).encode()
        out[name] = {"msgpack_bytes": len(packed), "json_bytes": len(text),
                     "msgpack_encode_decode_us": per_op_us(lambda: msgpack.unpackb(msgpack.packb(plain))),
                     "json_encode_decode_us": per_op_us(lambda: json.loads(json.dumps(plain, default=_base64)))}
    return out


def _base64(value: object) -> str:
    """Bytes in JSON, as Mesos's JSON carries them (a status's ``data``): base64."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON")


# ------------------------------------------------------------------ rounds
def child(tree: Path, what: str) -> dict:
    """One round of ``what`` measured in a fresh interpreter importing ``tree``'s mesoslike."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, str(HERE / "wire.py"), "--measure", what], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"measuring {what} in {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def summary(rounds: list[dict]) -> dict:
    """Per message and figure: the median over rounds (and the rounds)."""
    out: dict[str, dict] = {}
    for name in rounds[0]:
        out[name] = {}
        for key in rounds[0][name]:
            values = [r[name][key] for r in rounds]
            out[name][key] = round(statistics.median(values), 3) if key != "bytes" else values[0]
            if key.endswith("_us"):
                out[name][key + "_rounds"] = [round(v, 3) for v in values]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a checkout of the baseline tree (e.g. main)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="also write the JSON document here")
    parser.add_argument("--measure", choices=["codec", "structs", "formats"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps({"codec": measure_codec, "structs": measure_structs, "formats": measure_formats}[args.measure]()))
        return
    load_before = os.getloadavg()
    this: list[dict] = []
    base: list[dict] = []
    structs: list[dict] = []
    for r in range(args.rounds):   # interleaved: the load of the moment falls on both
        this.append(child(ROOT, "codec"))
        if args.baseline:
            base.append(child(args.baseline.resolve(), "codec"))
        structs.append(child(ROOT, "structs"))
        print(f"[wire] round {r + 1}/{args.rounds} done, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    report: dict[str, Any] = {
        "benchmark": "wire",
        "command": " ".join(["python", *sys.argv]),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 1) for x in load_before],
        "load_average_after": [round(x, 1) for x in os.getloadavg()],
        "rounds": args.rounds,
        "how": "per message: CPU time, best of 5 timed loops per round, medians over the rounds; each round measures this tree, "
               "then the baseline, then plain Structs, each in a fresh interpreter",
        "this_tree": summary(this),
        "msgspec_structs": summary(structs),
        "formats": child(ROOT, "formats"),
    }
    if base:
        report["baseline_tree"] = summary(base)
        report["speedup"] = {name: {key: round(report["baseline_tree"][name][key] / report["this_tree"][name][key], 2)
                                    for key in ("encode_us", "decode_us")} for name in report["this_tree"]}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
