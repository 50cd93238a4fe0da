#!/usr/bin/env python3
"""What a task's cgroups cost the agent and its supervisor, made and removed
per task against pooled (:attr:`.isolation.CgroupsV1Isolator.pool_size`),
modes interleaved in one process on the machine's real cgroups. Per task:
the agent's side (``create``: the directories made, or a spare checked
empty with its limits and counters read; ``give_back``) and the
supervisor's (``kill_cgroups``, the OOM counter and peak read; then the
directories removed, or the usage read and the peak reset). No task runs:
this is the cgroups' part of a launch alone. Needs root and cgroups.

    python bench/cgroup_pool.py --tasks 400 --rounds 5 --out bench/results/cgroup-pool.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mesoslike.agent.isolation import Container, Isolator, select_isolator  # noqa: E402
from mesoslike.agent.supervisor import flat_keyed, kill_cgroups, read_int, remove_cgroup  # noqa: E402
from mesoslike.resources import Resources  # noqa: E402

MODES = ("made_and_removed", "pooled")


def supervisor_end(isolator: Isolator, container: Container) -> None:
    """What a supervisor does with the cgroups once its task ended (``Supervisor.record``)."""
    spec = isolator.launch_spec(container)
    kill_cgroups(spec["cgroups"])
    sum(flat_keyed(path).get(key, 0) for path, key in spec["oom_events"])
    read_int(spec["memory_peak"])
    if spec.get("pooled"):
        read_int(spec["memory_usage"])
        fd = os.open(spec["memory_peak"], os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    else:
        for directory in spec["cgroups"]:
            remove_cgroup(directory)


def one_round(isolator: Isolator, tasks: int, pooled: bool) -> dict[str, float]:
    resources = Resources.parse("cpus:0.1;mem:16")
    agent = supervisor = 0.0
    started = time.perf_counter()
    for i in range(tasks):
        t = time.process_time()
        container = isolator.create(f"poolbench.t{i}", resources, pooled=pooled)
        agent += time.process_time() - t
        t = time.process_time()
        supervisor_end(isolator, container)
        supervisor += time.process_time() - t
        t = time.process_time()
        if pooled:
            isolator.give_back(container)
        agent += time.process_time() - t
    return {"agent_cpu_ms": 1000 * agent / tasks, "supervisor_cpu_ms": 1000 * supervisor / tasks,
            "wall_ms": 1000 * (time.perf_counter() - started) / tasks, "loadavg": round(os.getloadavg()[0], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    isolator = select_isolator("cgroups", cgroups_root=f"cgroup-pool-bench-{os.getpid()}")
    rounds: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    try:
        for r in range(args.rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                rounds[mode].append(one_round(isolator, args.tasks, mode == "pooled"))
    finally:
        isolator.release()
        for base in set(getattr(isolator, "bases", {}).values()):
            try:
                os.rmdir(base)
            except OSError:
                pass
    doc = {"command": " ".join(["python", "bench/cgroup_pool.py", *sys.argv[1:]]),
           "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "isolator": isolator.name,
           "tasks": args.tasks,
           "median": {mode: {key: round(statistics.median(r[key] for r in rounds[mode]), 3)
                             for key in ("agent_cpu_ms", "supervisor_cpu_ms", "wall_ms")} for mode in MODES},
           "rounds": rounds}
    text = json.dumps(doc, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
