#!/usr/bin/env python3
"""``mesoslike master`` with every loop turn's duration recorded (bench instrumentation).

    python bench/master_turns.py TURNS_FILE [--mux] master --ip 127.0.0.1 --port 5050 ...

runs the real master CLI (the arguments after TURNS_FILE are ``mesoslike``'s)
with one addition: each turn's *stall* — what ``LoopStats`` measures, from
waking with work to the answers sent, the wait for the lock included — is
kept in memory as well. SIGUSR1 forgets the turns so far; SIGUSR2 writes
those since to TURNS_FILE as ``{"since": t0, "at": t1, "turns": [...]}``
(monotonic seconds, turn durations in seconds, in order). The master's loop
runs in the main thread, so the handlers run between two of its steps.
With ``--mux`` the master's server also takes agents multiplexed over a few
streams (``bench/muxwire.py``: past one process's file limit).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))   # run from a checkout without installing


def main() -> None:
    import mesoslike.master.runtime as runtime
    from mesoslike.master.metrics import LoopStats

    path = Path(sys.argv[1])
    turns = array("d")
    since = [time.monotonic()]
    record = LoopStats.record
    #: CPU seconds of this process's threads by name when the turns were last forgotten (the loop's
    #: main thread against the mux's, which ``comm`` in /proc does not tell apart: both "python")
    threads_since: dict[str, float] = {}
    #: the mux servers' counters when the turns were last forgotten (with --mux)
    mux_since: dict[str, int] = {}

    def mux_stats() -> dict[str, int]:
        server_class = getattr(sys.modules.get("muxwire"), "MuxServer", None)
        out: dict[str, int] = {}
        for server in server_class.made if server_class is not None else ():
            for name, value in server.mux_stats.items():
                out[name] = out.get(name, 0) + value
        return out

    def thread_cpu() -> dict[str, float]:
        import threading

        out = {}
        for thread in threading.enumerate():
            if thread.ident is None:
                continue
            try:
                out[thread.name] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except (OSError, AttributeError):
                continue
        return out

    # what each turn did: frames taken from the inbox and handled, agents re-admitted (unknown before:
    # every agent after a failover), agents whose task records were made (AgentLifecycle.settle: by a
    # reader's gate or the runtime's idle turns), and when it ended (monotonic)
    from mesoslike.master.agents import AgentLifecycle
    from mesoslike.master.runtime import MasterRuntime
    defer = os.environ.get("BENCH_DEFER_TASK_RECORDS")
    if defer in ("on", "off"):   # an experiment's switch (bench/failover.py --defer-task-records)
        AgentLifecycle.defer_task_records = defer == "on"
    counts = {"frames": 0, "admitted": 0, "settled": 0}
    per_turn: dict[str, array] = {"ended": array("d"), "cpu": array("d"), "frames": array("l"),
                                  "admitted": array("l"), "settled": array("l")}
    cpu_at = [time.thread_time()]   # the loop's thread: CPU seconds between two turns' ends, its own only
    from mesoslike.master.inbox import Inbox

    # counted a turn at a time, not a frame at a time: a wrapper around every frame's handling and every
    # admission cost the loop ~2 us an agent, 3-4 % of the storm (failover30l's profile) — the
    # benchmark's, not the master's
    take, handle_messages, settle = Inbox.take, MasterRuntime._handle_messages, AgentLifecycle.settle

    def counting_take(self, *args, **kwargs):   # type: ignore[no-untyped-def]
        taken = take(self, *args, **kwargs)
        counts["frames"] += len(taken)
        return taken

    def counting_messages(self, core):   # type: ignore[no-untyped-def]
        # agents admitted: the agent book's growth over the turn's frames (after a failover every agent
        # is admitted by a re-registration; none is removed meanwhile)
        before = len(core.agent_book.records)
        try:
            return handle_messages(self, core)
        finally:
            counts["admitted"] += max(len(core.agent_book.records) - before, 0)

    def counting_settle(self, *args, **kwargs):   # type: ignore[no-untyped-def]
        made = settle(self, *args, **kwargs)
        counts["settled"] += made
        return made

    Inbox.take = counting_take   # type: ignore[method-assign]
    MasterRuntime._handle_messages = counting_messages   # type: ignore[method-assign]
    AgentLifecycle.settle = counting_settle   # type: ignore[method-assign]

    def recording(self, stall: float, lock_wait: float) -> None:
        record(self, stall, lock_wait)
        turns.append(stall)
        per_turn["ended"].append(time.monotonic())
        cpu = time.thread_time()
        per_turn["cpu"].append(cpu - cpu_at[0])
        cpu_at[0] = cpu
        for name in ("frames", "admitted", "settled"):
            per_turn[name].append(counts[name])
            counts[name] = 0

    def forget(*_: object) -> None:
        del turns[:]
        for kept in per_turn.values():
            del kept[:]
        since[0] = time.monotonic()
        threads_since.clear()
        threads_since.update(thread_cpu())
        mux_since.clear()
        mux_since.update(mux_stats())

    def write(*_: object) -> None:
        partial = path.with_suffix(".partial")
        cpu = {name: round(spent - threads_since.get(name, 0.0), 3) for name, spent in thread_cpu().items()}
        partial.write_text(json.dumps({"since": since[0], "at": time.monotonic(), "turns": turns.tolist(),
                                       **{name: kept.tolist() for name, kept in per_turn.items()},
                                       "thread_cpu_s": {name: spent for name, spent in cpu.items() if spent >= 0.01},
                                       "mux_stats": {name: value - mux_since.get(name, 0)
                                                     for name, value in mux_stats().items()}}))
        os.replace(partial, path)

    LoopStats.record = recording   # type: ignore[method-assign]
    if sys.argv[2:3] == ["--mux"]:   # agents over a few streams (bench/muxwire.py)
        sys.path.insert(0, str(HERE))
        from muxwire import MuxServer
        runtime.Server = MuxServer   # type: ignore[misc,assignment]
        del sys.argv[2]
    signal.signal(signal.SIGUSR1, forget)
    signal.signal(signal.SIGUSR2, write)
    sys.argv = ["mesoslike", *sys.argv[2:]]
    from mesoslike.cli import main as cli
    cli()


if __name__ == "__main__":
    main()
