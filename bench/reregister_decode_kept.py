#!/usr/bin/env python3
"""Decoding every agent's REREGISTER_AGENT and keeping the messages (as a
new leader keeps them until their tasks' records are made), in a FRESH
process per tree, alternating: CPU (user, system), page faults and memory
an agent. What a change to the wire's value types costs or saves in a
100,000-agent storm, without the core's handling around it.

    python bench/reregister_decode_kept.py --base-src /var/tmp/base --agents 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def decode_kept(frames_file: Path) -> dict:
    """Decode every frame in ``frames_file`` and keep them; what it cost an agent."""
    from mesoslike.wire import decode
    frames = pickle.loads(frames_file.read_bytes())
    gc.collect()
    gc.disable()   # as the runtime's turns
    before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    kept = [decode(frame) for frame in frames]
    wall, after = time.perf_counter() - began, resource.getrusage(resource.RUSAGE_SELF)
    per = 1e6 / len(kept)
    return {"cpu_us_per_agent": round((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * per, 2),
            "user_us_per_agent": round((after.ru_utime - before.ru_utime) * per, 2),
            "system_us_per_agent": round((after.ru_stime - before.ru_stime) * per, 2),
            "wall_us_per_agent": round(wall * per, 2),
            "page_faults_per_agent": round((after.ru_minflt - before.ru_minflt) / len(kept), 3),
            "max_rss_mb": after.ru_maxrss // 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-src", type=Path, required=True, help="the other tree (a git archive of a commit)")
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--tasks-per-agent", type=int, default=10)
    parser.add_argument("--frameworks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--frames", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.frames is not None:
        print(json.dumps(decode_kept(args.frames)))
        return
    sys.path.insert(0, str(HERE))
    from readmission_faults import measured_in_child, write_result
    from simagents import registrations
    _, frames, _ = registrations(0, args.agents, args.tasks_per_agent, args.frameworks)
    trees = {"this": str(HERE.parent), "base": str(args.base_src)}
    result: dict = {"benchmark": "REREGISTER_AGENT decoded and kept, a fresh process per tree",
                    "command": "python " + " ".join(sys.argv), "agents": args.agents,
                    "loadavg_start": list(os.getloadavg()), "rounds": {name: [] for name in trees}}
    with tempfile.TemporaryDirectory(prefix="decode-kept-") as scratch:
        frames_file = Path(scratch) / "frames.pickle"
        frames_file.write_bytes(pickle.dumps(frames))
        del frames
        for number in range(args.rounds):
            for name in (("base", "this") if number % 2 == 0 else ("this", "base")):
                measured_in_child([sys.executable, __file__, "--base-src", str(args.base_src),
                                   "--frames", str(frames_file)], {**os.environ, "PYTHONPATH": trees[name]},
                                  result["rounds"], name, cwd=trees[name])
    write_result(result, args.out)


if __name__ == "__main__":
    main()
