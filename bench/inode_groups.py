#!/usr/bin/env python3
"""What a task's files cost the kernel where the agent makes them: sandboxes
(a directory, its ``stdout`` and ``stderr``: three inodes, as the agent and
its shared supervisor make them a task) made in a framework directory below
a plain parent, against one below a parent marked the top of directory
hierarchies (``chattr +T``, :func:`mesoslike.agent.executor.spread_children`,
which the agent does to its sandbox root). Placements interleaved, CPU
(user + system) of this process per sandbox, each round in a new framework
directory; the framework directories' inode numbers say where ext4 put
them (the plain one beside its parent, the spread one in a group of its
own). On ext4 without a journal, an inode made in a block group costs a scan
past the inodes freed there in the last minutes (``recently_deleted``): the
plain parent's group is that of whatever else makes and deletes files there.
Then the same for ``bench/throughput.py``'s raw spawn baseline (``--spawn``
rounds of :func:`throughput.spawn_directly`, 4 threads, each task its own
directory and output files): its rate with its directory below a plain
parent (as ``throughput.py`` makes it) and below a spread one.

    python bench/inode_groups.py --rounds 6 --sandboxes 1000 --out bench/results/inode-groups.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mesoslike.agent.executor import spread_children  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def make_sandboxes(parent: Path, count: int) -> tuple[float, int]:
    """CPU ms a sandbox for ``count`` sandboxes in a new framework directory of ``parent``; its inode."""
    framework = parent / f"fw-{time.monotonic_ns()}"
    framework.mkdir()
    started = cpu_seconds()
    for i in range(count):
        sandbox = os.path.join(framework, f"t{i}")
        os.mkdir(sandbox)
        for name in ("stdout", "stderr"):
            os.close(os.open(os.path.join(sandbox, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                             0o644))
    return 1000 * (cpu_seconds() - started) / count, os.stat(framework).st_ino


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--sandboxes", type=int, default=1000)
    parser.add_argument("--spawn", type=int, default=1000, help="tasks a raw spawn round (0: none)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the two parents are made")
    parser.add_argument("--out")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-inode-groups-", dir=args.dir))
    parents = {"plain": work / "plain", "spread": work / "spread"}
    for parent in parents.values():
        parent.mkdir()
    if not spread_children(parents["spread"]):
        print(f"{args.dir}: no 'top of directory hierarchies' flag on this file system", file=sys.stderr)
        return 1
    per: dict[str, list[float]] = {name: [] for name in parents}
    inodes: dict[str, list[int]] = {name: [] for name in parents}
    loads = []
    for r in range(args.rounds):
        loads.append([round(x, 2) for x in os.getloadavg()])
        for name in (("plain", "spread") if r % 2 == 0 else ("spread", "plain")):
            ms, inode = make_sandboxes(parents[name], args.sandboxes)
            per[name].append(round(ms, 4))
            inodes[name].append(inode)
        print(f"round {r + 1}: plain {per['plain'][-1]:.3f} ms, spread {per['spread'][-1]:.3f} ms a sandbox "
              f"(load {loads[-1]})", file=sys.stderr)
    spawned: dict[str, list[float]] = {name: [] for name in parents}
    if args.spawn:
        from throughput import spawn_directly
        for r in range(args.rounds):
            for name in (("plain", "spread") if r % 2 == 0 else ("spread", "plain")):
                spawned[name].append(round(args.spawn / spawn_directly(args.spawn, 4, parents[name] / "spawn"), 1))
            print(f"raw spawn round {r + 1}: plain {spawned['plain'][-1]:.0f}/s, spread {spawned['spread'][-1]:.0f}/s",
                  file=sys.stderr)
    result = {"command": " ".join(sys.argv), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "dir": args.dir, "sandboxes": args.sandboxes,
              "cpu_ms_per_sandbox": {name: {"median": statistics.median(values), "rounds": values}
                                     for name, values in per.items()},
              "parent_inode": {name: os.stat(parent).st_ino for name, parent in parents.items()},
              "framework_dir_inodes": inodes, "loadavg_per_round": loads,
              "raw_spawn_per_s": {name: {"median": statistics.median(values), "rounds": values}
                                  for name, values in spawned.items() if values},
              "loadavg_end": [round(x, 2) for x in os.getloadavg()]}
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0   # the work directory is left: deleting it would make the next run's inodes dearer (see above)


if __name__ == "__main__":
    sys.exit(main())
