#!/usr/bin/env python3
"""The CPU an agent's sweep of its cgroup bases costs at its start
(:meth:`mesoslike.agent.isolation._Cgroups.sweep`), on bases that hold many
names of other agents: ``--names`` pooled cgroups of the previous naming
(``<key>.pooled.<random>``: no holder, left alone by every sweep) and
``--gone`` pooled cgroups named for a holder process that is gone (removed
by a sweep that knows holders, at most ``ORPHANS_A_SWEEP``). Each round
runs the sweep of this tree and of ``--before-tree`` in a fresh process
each, alternating which goes first, on the same bases made anew: the first
sweep (what an agent's start pays) and a second one (nothing left to
remove). One process at a time; the cgroups are removed at the end.

    python bench/cgroup_sweep.py --before-tree /var/tmp/base --names 2000 --gone 256 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from mesoslike.agent.isolation import select_isolator  # noqa: E402
from mesoslike.agent.supervisor import process_start_ticks  # noqa: E402

#: run in a fresh interpreter of the tree measured: two sweeps of a prefix of no agent's, their CPU
CHILD = """
import json, sys, time
from mesoslike.agent.isolation import select_isolator
isolator = select_isolator('cgroups', cgroups_root=sys.argv[1])
out = {}
for what in ('first', 'second'):
    cpu = time.process_time()
    removed = isolator.sweep('bench-sweep-none', set())
    out[what + '_ms'] = round((time.process_time() - cpu) * 1000, 2)
    out[what + '_removed'] = removed
print(json.dumps(out))
"""


def gone_holder() -> str:
    """A process that was there and is gone: its pid, start time and this pid namespace."""
    child = subprocess.Popen(["true"])
    start = process_start_ticks(child.pid) or 1
    child.wait()
    return f"{child.pid}-{start}-{os.stat('/proc/self/ns/pid').st_ino}"


def make_names(bases: list[str], names: list[str]) -> None:
    for base in bases:
        os.makedirs(base, exist_ok=True)
        for name in names:
            try:
                os.mkdir(os.path.join(base, name))
            except FileExistsError:
                pass


def remove_all(bases: list[str]) -> None:
    for base in bases:
        if not os.path.isdir(base):
            continue
        for name in os.listdir(base):
            if os.path.isdir(os.path.join(base, name)):
                os.rmdir(os.path.join(base, name))
        os.rmdir(base)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-tree", type=Path, required=True)
    parser.add_argument("--names", type=int, default=2000)
    parser.add_argument("--gone", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    root = f"mesoslike-sweepbench-{os.getpid()}"
    isolator = select_isolator("cgroups", cgroups_root=root)
    bases = sorted(set(getattr(isolator, "bases", {}).values()))
    if not bases:
        print("no cgroups v1 bases here", file=sys.stderr)
        return 1
    old = [f"agent{i % 50}-0000beef.pooled.{os.urandom(6).hex()}" for i in range(args.names)]
    holder = gone_holder()
    gone = [f"agent-gone-0000dead.pooled.{holder}-{os.urandom(6).hex()}" for _ in range(args.gone)]
    trees = {"after": HERE, "before": args.before_tree.resolve()}
    rounds: list[dict] = []
    loads = [os.getloadavg()[0]]
    try:
        for n in range(args.rounds):
            order = ["after", "before"] if n % 2 == 0 else ["before", "after"]
            result: dict = {}
            for tree in order:
                make_names(bases, old + gone)
                env = dict(os.environ, PYTHONPATH=str(trees[tree]))
                done = subprocess.run([sys.executable, "-c", CHILD, root], env=env, capture_output=True,
                                      text=True, timeout=300, cwd=str(trees[tree]))
                if done.returncode != 0:
                    raise SystemExit(done.stderr)
                result[tree] = json.loads(done.stdout)
            result["load"] = os.getloadavg()[0]
            rounds.append(result)
            print(json.dumps(result), flush=True)
    finally:
        remove_all(bases)
        loads.append(os.getloadavg()[0])
    report = {"what": "CPU of an agent's cgroup sweep at its start (first) and again (second), each tree in a fresh "
                      "process on the same bases: old-format pooled names of other agents (kept) and pooled "
                      "names of a gone holder (removed where holders are known)",
              "hierarchies": len(bases), "old_format_names": args.names, "gone_holder_names": args.gone,
              "load_start_end": loads, "rounds": rounds,
              "command": " ".join(["python", "bench/cgroup_sweep.py", *sys.argv[1:]]),
              "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rounds"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
