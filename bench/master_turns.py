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

    def recording(self, stall: float, lock_wait: float) -> None:
        record(self, stall, lock_wait)
        turns.append(stall)

    def forget(*_: object) -> None:
        del turns[:]
        since[0] = time.monotonic()
        threads_since.clear()
        threads_since.update(thread_cpu())

    def write(*_: object) -> None:
        partial = path.with_suffix(".partial")
        cpu = {name: round(spent - threads_since.get(name, 0.0), 3) for name, spent in thread_cpu().items()}
        partial.write_text(json.dumps({"since": since[0], "at": time.monotonic(), "turns": turns.tolist(),
                                       "thread_cpu_s": {name: spent for name, spent in cpu.items() if spent >= 0.01}}))
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
