#!/usr/bin/env python3
"""What decoding one REREGISTER_AGENT frame costs, by part: the codec
(``mesoslike.wire.decode``: msgspec's C decoder into the attrs message
classes, then the generated after-checks), msgspec alone into the attrs
classes, msgspec into ``msgspec.Struct`` classes with the same fields (what
the frame would cost decoded into structs, the frame's ``Resources`` left as
strings), and msgspec untyped (maps and lists). The frames are
``bench/simagents.py``'s (``--tasks-per-agent`` tasks of ``--frameworks``
frameworks each). Process CPU µs per frame, best of ``--rounds``.

Run: ``python bench/reregister_decode.py --frames 2000``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import msgspec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


class _Agent(msgspec.Struct):
    hostname: str
    resources: str
    id: str = ""
    port: int = 0
    principal: str = ""
    attributes: dict[str, str] = {}


class _Task(msgspec.Struct):
    task_id: str
    agent_id: str
    command: str
    resources: str
    name: str = ""
    environment: dict[str, str] = {}
    kill_grace_period: float = 3.0
    user: str = ""
    health_check: Any = None
    uris: list[Any] = []
    labels: list[Any] = []
    executor: Any = None
    container: Any = None
    environment_secrets: dict[str, Any] = {}
    shell: bool = True
    arguments: list[str] = []


class _Running(msgspec.Struct):
    framework_id: str
    task: _Task
    state: str
    healthy: bool | None = None
    update_state: str = ""


class _Framework(msgspec.Struct):
    name: str
    role: str = "*"
    failover_timeout: float = 0.0
    id: str = ""
    user: str = ""
    hostname: str = ""
    partition_aware: bool = False
    min_allocatable: str = ""
    principal: str = ""
    labels: list[Any] = []
    webui_url: str = ""
    principal_receipt: str = ""


class _Reregister(msgspec.Struct):
    agent: _Agent
    tasks: list[_Running] = []
    frameworks: list[_Framework] = []
    version: str = ""
    http_address: str = ""
    accepts_batches: bool = False
    executors: list[Any] = []
    receipt: str = ""


def _best_us(decode: Callable[[bytes], object], frames: list[bytes], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        began = time.process_time()
        for frame in frames:
            decode(frame)
        best = min(best, time.process_time() - began)
    return round(1e6 * best / len(frames), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--tasks-per-agent", type=int, default=10)
    parser.add_argument("--frameworks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from mesoslike.wire import decode
    from mesoslike.wire import compiled
    from mesoslike.wire import messages as m
    from simagents import registrations

    _, frames, _ = registrations(0, args.frames, args.tasks_per_agent, args.frameworks)
    into_attrs = msgspec.msgpack.Decoder(m.ReregisterAgent, dec_hook=compiled._decode_hook).decode
    into_structs = msgspec.msgpack.Decoder(_Reregister).decode
    parts = {"codec_us": decode, "msgspec_into_attrs_us": into_attrs, "msgspec_into_structs_us": into_structs,
             "msgspec_untyped_us": msgspec.msgpack.Decoder().decode}
    result = {"command": " ".join(["python", "bench/reregister_decode.py", *sys.argv[1:]]),
              "frame_bytes": len(frames[0]), "loadavg": os.getloadavg()}
    result.update({name: _best_us(function, frames, args.rounds) for name, function in parts.items()})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
