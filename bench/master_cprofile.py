#!/usr/bin/env python3
"""``mesoslike master`` under ``cProfile`` with a CPU clock (the loop's thread's, ``time.thread_time``):
where its CPU goes function by function (bench instrumentation, docs/performance.rst "Stop 22: the
master's CPU a task on the real path (master22)").

    python bench/master_cprofile.py STATS_FILE master --port 5050 ...

SIGUSR1 starts the profile (the rounds measured, not the start-up), SIGUSR2 stops it and writes
``pstats`` to STATS_FILE. The master's loop runs in the main thread, so the handlers run between
two of its steps, in it: only that thread is profiled.
"""

from __future__ import annotations

import cProfile
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))   # run from a checkout without installing


def main() -> None:
    path = Path(sys.argv[1])
    profile = cProfile.Profile(time.thread_time)
    signal.signal(signal.SIGUSR1, lambda *_: profile.enable())

    def stop(*_: object) -> None:
        profile.disable()
        profile.dump_stats(str(path))
    signal.signal(signal.SIGUSR2, stop)
    from mesoslike.cli import main as cli
    sys.argv = ["mesoslike", *sys.argv[2:]]
    cli()


if __name__ == "__main__":
    main()
