#!/usr/bin/env python3
"""The master core's CPU a task (``bench/control_core.py --parts master_wire``, in process) for the real
agents' updates — a ``container_status`` with seven isolators, a pid and an address on each RUNNING and
FINISHED, as the agents send them — in frames of ``BATCH`` updates, with the caches warm or evicted before
each frame (``cold``: 16 MiB written and 25,000 small dictionaries read, untimed, as another process's turn
on the CPU would leave them). Best of three fresh cores.

    python bench/master_cold_turns.py 45 cold
"""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import control_core  # noqa: E402
import mesoslike.wire as wire  # noqa: E402
from mesoslike.master import MasterCore  # noqa: E402,F401 - imported before TaskStatus is wrapped below
from mesoslike.wire.types import ContainerStatus  # noqa: E402

ISOLATORS = ["cgroups/cpu", "cgroups/mem", "namespaces/pid", "namespaces/mount", "namespaces/ipc",
             "namespaces/uts", "filesystem/tmp"]


def main() -> None:
    batch, cold = int(sys.argv[1]), sys.argv[2] == "cold"
    container = ContainerStatus(ISOLATORS, "", 12345, "127.0.0.1")
    plain = wire.TaskStatus

    def status(*args, **kwargs):   # the harness's statuses, as a real agent's (TASK_STARTING carries none)
        if len(args) > 1 and args[1] != wire.TaskState.STARTING:
            kwargs["container_status"] = container
        return plain(*args, **kwargs)
    wire.TaskStatus = status  # type: ignore[misc,assignment]
    junk, dicts = bytearray(16 * 1024 * 1024), [{"a": i} for i in range(200_000)]
    reads = [0]

    def thread_time() -> float:   # the harness reads it before and after each timed call: evict before
        reads[0] += 1
        if cold and reads[0] % 2 == 1:
            junk[::64] = bytes(len(junk[::64]))
            for each in dicts[::8]:
                each.get("a")
        return time.thread_time()
    control_core.time = types.SimpleNamespace(thread_time=thread_time, perf_counter=time.perf_counter,  # type: ignore[attr-defined]
                                              monotonic=time.monotonic)
    best: dict[str, float] | None = None
    for _ in range(3):
        got = control_core.measure(3000, 4, batch, wire=True)
        if best is None or sum(got.values()) < sum(best.values()):
            best = got
    assert best is not None
    print(f"batch {batch}, {'cold' if cold else 'warm'}: " + ", ".join(f"{k} {v:.1f}" for k, v in best.items())
          + f"; total {sum(best.values()):.1f} µs a task")


if __name__ == "__main__":
    main()
