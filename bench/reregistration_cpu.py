#!/usr/bin/env python3
"""The new leader's CPU per re-registering agent after a failover, without
the wire and the machine's load: what bounds ``bench/failover.py``'s
"agents back" once the new leader serves (its one loop re-admits every
agent with its tasks).

A first core admits ``--agents`` agents, each re-registering with
``--tasks-per-agent`` running tasks of ``--frameworks`` frameworks (the
frames ``bench/simagents.py`` sends); a second core recovers from its
registry, as a new leader does, and handles every agent's REREGISTER_AGENT
frame again: decoded by the codec, then the core's ``on_message``, in turns
of ``--batch`` (the runtime's batch), each followed by the core's ``tick``
and the collector as the runtime's turn leaves it (``LongLivedObjects``):
the collector's passes are timed by generation (``collector_cpu_s_by_generation``).
After a failover the runtime's turns hold a few hundred re-registrations
each (those that came since the last turn), not ``--batch``'s 2,000 at most:
``--batch 300`` is nearer what the runtime does.
Reported: process CPU seconds for decoding and for handling, per agent, and
how many registry changes the re-registrations made (each change is a
registry write the agents' answers wait for); ``after_s``: what the
re-registrations left for the ticks after them, off the agents' answers'
path (an allocator that books agents after answering them: an experiment
of docs/performance.rst "Failover under ten seconds"; 0 otherwise).

``--baseline-src DIR`` runs the same measurement first with the mesoslike
package of DIR (a checkout of another commit: ``git archive <commit> | tar
-x -C DIR``), in a process of its own, so the two are measured back to back.

Run: ``python bench/reregistration_cpu.py --agents 10000 --baseline-src
/tmp/base --out bench/results/reregistration_cpu.json``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


class _Allocation:
    """An object from the allocator, not a free list: its allocation makes the
    collector look at its counts (a list or a dict may come from a free list)."""


def measure(agents: int, tasks_per_agent: int, frameworks: int, batch: int, rounds: int) -> dict:
    from mesoslike.clock import FakeClock
    from mesoslike.master import MasterConfig, MasterCore
    from mesoslike.master.registry import Registry
    from mesoslike.master.runtime import LongLivedObjects
    from mesoslike.wire import MasterInfo, decode

    from simagents import registrations

    ids, frames, _ = registrations(0, agents, tasks_per_agent, frameworks)
    peers = [f"agent-{i}".encode() for i in range(agents)]
    first = MasterCore(FakeClock(), MasterInfo("m1", "tcp://127.0.0.1:1"), MasterConfig())
    for peer, frame in zip(peers, frames):
        first.on_message(peer, decode(frame))
    document = first.registry.to_document()
    del first
    long_lived = LongLivedObjects()
    long_lived.start()   # the master's young-generation threshold
    passes = {"cpu_s": [0.0, 0.0, 0.0], "count": [0, 0, 0], "longest_s": 0.0, "began": 0.0}

    def timed(phase: str, info: dict) -> None:   # the collector's passes, by generation (CPU of this thread)
        if phase == "start":
            passes["began"] = time.thread_time()
            return
        spent = time.thread_time() - passes["began"]
        passes["cpu_s"][info["generation"]] += spent
        passes["count"][info["generation"]] += 1
        passes["longest_s"] = max(passes["longest_s"], spent)

    results = []
    for _ in range(rounds):
        gc.collect()
        clock = FakeClock()
        core = MasterCore(clock, MasterInfo("m2", "tcp://127.0.0.1:2"), MasterConfig(),
                          registry=Registry.from_document(document))
        changes_before = core.registry_changes
        decoding = handling = 0.0
        passes.update(cpu_s=[0.0, 0.0, 0.0], count=[0, 0, 0], longest_s=0.0)
        gc.callbacks.append(timed)
        for start in range(0, agents, batch):
            admitted_before = len(core.agents)
            gc.disable()   # as the runtime's turn: collected after it
            for peer, frame in zip(peers[start:start + batch], frames[start:start + batch]):
                began = time.process_time()
                message = decode(frame)
                decoded = time.process_time()
                core.on_message(peer, message)
                handled = time.process_time()
                decoding += decoded - began
                handling += handled - decoded
            began = time.process_time()
            core.tick()
            # the collector as the runtime's turn leaves it (MasterRuntime._work); a commit without
            # turn_ended (a baseline) leaves the turn's young objects to the passes due
            turn_ended = getattr(long_lived, "turn_ended", None)
            if turn_ended is not None:
                turn_ended(len(core.agents) - admitted_before)
            gc.enable()
            _Allocation()   # as the runtime's next allocations do: a pass due runs now
            long_lived.after_turn()
            handling += time.process_time() - began
            clock.advance(0.01)
        # what the re-registrations left for after them (an allocator with agents still to book: the
        # experiment of docs/performance.rst "Failover under ten seconds"), made by the ticks after
        began = time.process_time()
        gc.disable()
        while getattr(core.allocator, "_arriving", None):
            clock.advance(0.01)
            core.tick()
        gc.enable()
        after = time.process_time() - began
        gc.callbacks.remove(timed)
        assert len(core.agents) == agents, f"{len(core.agents)} of {agents} agents re-registered"
        results.append({"decode_s": round(decoding, 3), "handle_s": round(handling, 3), "after_s": round(after, 3),
                        "registry_changes": core.registry_changes - changes_before,
                        "collector_cpu_s_by_generation": [round(x, 3) for x in passes["cpu_s"]],
                        "collector_passes_by_generation": list(passes["count"]),
                        "longest_pass_s": round(passes["longest_s"], 3)})
        del core
    best = min(results, key=lambda r: r["decode_s"] + r["handle_s"])
    return {"rounds": results, "best": best,
            "per_agent_ms": round(1000 * (best["decode_s"] + best["handle_s"]) / agents, 4),
            "handle_per_agent_ms": round(1000 * best["handle_s"] / agents, 4),
            "after_per_agent_ms": round(1000 * best["after_s"] / agents, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--tasks-per-agent", type=int, default=10)
    parser.add_argument("--frameworks", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="a checkout of the commit to compare with, measured first in a process of its own")
    parser.add_argument("--json-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sizes = [str(args.agents), "--tasks-per-agent", str(args.tasks_per_agent), "--frameworks",
             str(args.frameworks), "--batch", str(args.batch), "--rounds", str(args.rounds)]
    if args.json_only:
        print(json.dumps(measure(args.agents, args.tasks_per_agent, args.frameworks, args.batch, args.rounds)))
        return
    from benchlib import emit, machine_info
    doc: dict = {"benchmark": "the new leader's CPU per re-registering agent (decode + core), no wire",
                 "command": " ".join(["python", "bench/reregistration_cpu.py", *sys.argv[1:]]),
                 "machine": machine_info(), "loadavg_start": os.getloadavg(),
                 "agents": args.agents, "tasks_per_agent": args.tasks_per_agent, "frameworks": args.frameworks}
    if args.baseline_src is not None:
        env = dict(os.environ, PYTHONPATH=f"{args.baseline_src}{os.pathsep}{HERE}")
        answer = subprocess.run([sys.executable, str(HERE / "reregistration_cpu.py"), "--agents", *sizes,
                                 "--json-only"], env=env, capture_output=True, text=True, check=True)
        doc["baseline"] = {"source": str(args.baseline_src), **json.loads(answer.stdout)}
    doc["this"] = measure(args.agents, args.tasks_per_agent, args.frameworks, args.batch, args.rounds)
    doc["loadavg_end"] = os.getloadavg()
    emit(doc, args.out, lambda text: print(text, file=sys.stderr))


if __name__ == "__main__":
    main()
