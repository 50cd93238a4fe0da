"""Chooses the wire encoding by measurement: MessagePack vs JSON.

Both encode the same plain data (``mesoslike.wire.codec.to_plain``); the
validation step (``from_plain``) is shared and measured separately. Prints one
JSON document.

    python bench/wire.py [--out bench/results/wire.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import msgpack

from mesoslike.resources import Resources
from mesoslike.wire import FrameworkInfo, Offer, TaskInfo, TaskState, TaskStatus, decode, encode
from mesoslike.wire import messages as m
from mesoslike.wire.codec import from_plain, to_plain


def samples() -> dict[str, object]:
    res = Resources.parse("cpus:24;mem:4096;disk:4096;ports:[31000-32000]")
    offers = [Offer(f"O{i}", f"agent-{i:05d}", f"node-{i:05d}", res, {"room": f"er{i % 2}"}) for i in range(100)]
    tasks = [TaskInfo(f"task-{i}", "agent-00001", "python -m worker --shard 17", Resources.parse("cpus:1;mem:512"))
             for i in range(10)]
    status = TaskStatus("task-1", TaskState.RUNNING, agent_id="agent-00001", source="SOURCE_AGENT",
                        uuid="6f1c2a8e-2f0b-4c7e-9a55-1d3f5e7a9b0c", timestamp=1732200000.5, framework_id="fw-1")
    return {
        "offers_100": m.Offers(offers),
        "accept_10_tasks": m.Accept("fw-1", ["O1"], tasks),
        "status_update": m.StatusUpdate("fw-1", status),
        "subscribe": m.Subscribe(FrameworkInfo("demo", "eng/prod", 60.0)),
    }


def per_op_us(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best * 1e6


def measure(name: str, message: object) -> dict:
    plain = {"v": 1, "type": type(message).TYPE, **to_plain(message)}
    packed = msgpack.packb(plain, use_bin_type=True)
    text = json.dumps(plain, separators=(",", ":")).encode()
    repeat = 200 if name == "offers_100" else 5000
    result = {
        "msgpack_bytes": len(packed),
        "json_bytes": len(text),
        "msgpack_encode_us": per_op_us(lambda: msgpack.packb(plain, use_bin_type=True), repeat),
        "json_encode_us": per_op_us(lambda: json.dumps(plain, separators=(",", ":")).encode(), repeat),
        "msgpack_decode_us": per_op_us(lambda: msgpack.unpackb(packed, raw=False), repeat),
        "json_decode_us": per_op_us(lambda: json.loads(text), repeat),
        "validate_us": per_op_us(lambda: from_plain(type(message), plain, "x"), repeat),
        "codec_round_trip_us": per_op_us(lambda: decode(encode(message)), repeat),
    }
    result["size_ratio_json_over_msgpack"] = result["json_bytes"] / result["msgpack_bytes"]
    result["speed_ratio_json_over_msgpack"] = (
        (result["json_encode_us"] + result["json_decode_us"])
        / (result["msgpack_encode_us"] + result["msgpack_decode_us"])
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the JSON document here")
    args = parser.parse_args()
    report = {
        "benchmark": "wire",
        "command": " ".join(["python", *sys.argv]),
        "python": platform.python_version(),
        "msgpack": ".".join(map(str, msgpack.version)),
        "results": {name: measure(name, msg) for name, msg in samples().items()},
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
