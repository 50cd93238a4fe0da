#!/usr/bin/env python3
"""Sums ``bench/agent_watch.sh``'s files: for each tree (the processes'
working directory: a name with ``--after`` in it, ``after`` by default, is this tree's) and role (agent, master),
the CPU (``task-clock``) and each system call counted, per task of the run
(``--tasks``: rounds x tasks a round, each cluster's).

    python bench/agent_watch_summary.py /var/tmp/NAME-watch --tasks 8000 --out bench/results/agent-watch-NAME.json
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

LINE = re.compile(r"\s*([\d,.]+)\s+(?:msec\s+)?(task-clock|syscalls:sys_enter_\w+)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--tasks", type=int, required=True, help="tasks each cluster ran in the whole run")
    parser.add_argument("--after", default="after", help="a part of this tree's directory name")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sums: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for path in sorted(args.directory.glob("*.txt")):
        tree = "after" if args.after in path.name else "before"
        role = "master" if "-master-" in path.name else "agent"
        key = f"{tree} {role}"
        sums[key]["processes"] += 1
        for line in path.read_text().splitlines():
            match = LINE.match(line)
            if match:
                name = match.group(2).replace("syscalls:sys_enter_", "")
                sums[key][name] += float(match.group(1).replace(",", ""))
    result = {key: {"processes": counts.pop("processes"),
                    "cpu_us_a_task": round(1000 * counts.pop("task-clock", 0.0) / args.tasks, 1),
                    "system_calls_a_task": {name: round(value / args.tasks, 3) for name, value in sorted(counts.items())}}
              for key, counts in sorted(sums.items())}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"directory": str(args.directory), "tasks": args.tasks, **result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
