#!/usr/bin/env python3
"""What the stale re-registration guard (docs/reliability.rst, "Stale
re-registrations") costs a new leader: the agents' REREGISTER_AGENT frames
with an ``incarnation`` and a ``sequence`` (as real agents send them) against
the same frames without (as ``bench/simagents.py`` sends them).

Two measurements, alternated kind by kind in one process so that both see
the same machine: the CPU (``time.thread_time``, best of ``--repeat``) of
decoding one frame of each kind and of the master's bookkeeping of the
admitted report (``AgentLifecycle._note_report``); and
``bench/reregistration_cpu.py``'s ``measure`` — a new leader's core
re-admitting ``--agents`` agents of ten tasks each, decoding included —
with each kind of frame, ``--rounds`` times, the order alternating (process
CPU per agent).

Run: ``python bench/reregistration_incarnation_cost.py --agents 20000 --rounds 3
--out bench/results/reregistration_incarnation_cost-rereg15.json``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import timeit
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def with_incarnation(frames: list[bytes]) -> list[bytes]:
    import msgspec

    from mesoslike.wire import decode, encode

    return [encode(msgspec.structs.replace(decode(frame), incarnation=f"{i:016x}", sequence=3))
            for i, frame in enumerate(frames)]


def micro(repeat: int, number: int) -> dict:
    from mesoslike.master.agents import AgentLifecycle
    from mesoslike.master.records import AgentRecord
    from mesoslike.wire import decode

    import simagents

    _, (plain,), _ = simagents.registrations(0, 1, 10, 4)
    (marked,) = with_incarnation([plain])
    message = decode(marked)
    record = AgentRecord(info=message.agent, peer=b"peer")
    note = AgentLifecycle._note_report
    out: dict[str, float] = {}
    for name, statement in (("decode_plain_us", lambda: decode(plain)),
                            ("decode_with_incarnation_us", lambda: decode(marked)),
                            ("note_report_us", lambda: note(None, record, message))):   # type: ignore[arg-type]
        best = min(timeit.repeat(statement, number=number, repeat=repeat, timer=time.thread_time))
        out[name] = round(best / number * 1e6, 3)
    out["frame_bytes_plain"], out["frame_bytes_with_incarnation"] = len(plain), len(marked)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=300, help="re-registrations per turn (as after a failover)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import reregistration_cpu
    import simagents

    plain_registrations = simagents.registrations

    def marked_registrations(*a: object, **k: object) -> tuple[list[str], list[bytes], list[bytes]]:
        ids, frames, pongs = plain_registrations(*a, **k)   # type: ignore[arg-type]
        return ids, with_incarnation(frames), pongs

    load_before = os.getloadavg()
    micros = []
    per_agent: dict[str, list[float]] = {"plain": [], "with_incarnation": []}
    for round_ in range(args.rounds):
        simagents.registrations = plain_registrations
        micros.append(micro(args.repeat, 20_000))
        # the order alternates round by round: neither kind always runs on a warmer (or busier) machine
        for kind in ("plain", "with_incarnation")[::1 if round_ % 2 == 0 else -1]:
            simagents.registrations = plain_registrations if kind == "plain" else marked_registrations
            result = reregistration_cpu.measure(args.agents, 10, 4, args.batch, 1)
            per_agent[kind].append(result["per_agent_ms"])
    simagents.registrations = plain_registrations
    summary = {
        "agents": args.agents, "rounds": args.rounds, "batch": args.batch,
        "micro_best": {key: min(m[key] for m in micros) for key in micros[0]},
        "micro_rounds": micros,
        "new_leader_cpu_ms_per_agent": per_agent,
        "new_leader_cpu_ms_per_agent_best": {kind: min(values) for kind, values in per_agent.items()},
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
