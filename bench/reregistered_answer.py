#!/usr/bin/env python3
"""AGENT_REGISTERED made and encoded, as a new leader answers every
re-registering agent: this tree's class against the attrs class it was
(``ebd09af``'s, defined here the same), alternating in one process.

    python bench/reregistered_answer.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import timeit
from pathlib import Path
from typing import ClassVar

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mesoslike.wire import compiled  # noqa: E402
from mesoslike.wire import messages as m  # noqa: E402
from mesoslike.wire.types import MasterInfo  # noqa: E402


@attrs.frozen
class AttrsAgentRegistered:
    """AGENT_REGISTERED as an attrs class (the base's)."""

    TYPE: ClassVar[str] = "AGENT_REGISTERED"
    agent_id: str
    master: MasterInfo
    ping_interval: float
    accepts_batches: bool = False
    receipt: str = ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    master = MasterInfo("m2", "tcp://127.0.0.1:2")
    variants = {"this": (m.AgentRegistered, compiled.encoder(m.AgentRegistered, 1)),
                "base": (AttrsAgentRegistered, compiled.encoder(AttrsAgentRegistered, 1))}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    loadavg_start = os.getloadavg()
    for number in range(args.rounds):
        for name in (("base", "this") if number % 2 == 0 else ("this", "base")):
            cls, encode = variants[name]
            made = cls("sim-000001", master, 15.0, accepts_batches=True, receipt="")
            make_s = timeit.timeit(lambda: cls("sim-000001", master, 15.0, accepts_batches=True, receipt=""),
                                   number=args.number)
            encode_s = timeit.timeit(lambda: encode(made), number=args.number)
            rounds[name].append({"make_us": round(make_s / args.number * 1e6, 3),
                                 "encode_us": round(encode_s / args.number * 1e6, 3)})
    result = {"benchmark": "AGENT_REGISTERED made and encoded (us)", "command": "python " + " ".join(sys.argv),
              "rounds": rounds, "loadavg_start_end": [loadavg_start, os.getloadavg()]}
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
