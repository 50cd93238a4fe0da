"""A cold cluster's first burst against its next ones, this tree and another
alternated: ``bench/throughput.py --only real --rounds 3`` (a freshly
started master and 4 agents, three rounds of ``--tasks`` tasks ``true``)
run in each tree in turn, ``--pairs`` times; for each run, each process
kind's CPU a task in round 1 minus the mean of rounds 2-3 (what the first
burst pays once: run directories, cgroups, files made rather than taken
from the spares), and the three rounds' rates against raw spawn. Paired:
the trees alternate (which goes first alternating too), each run its own
fresh cluster under the same load. Run it under the benchmark lock (each
run ~20 s)::

    flock /work/wt/bench.lock python bench/agent_first_burst.py --before-tree /var/tmp/agent29s-base --pairs 4 --out bench/results/agent-first-burst-agent29s.json

The other tree runs with its own ``.venv`` (``make venv`` there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import benchlib

ROOT = Path(__file__).resolve().parent.parent
#: the process kinds of throughput.py's CPU split (``agents_tasks`` is the sum of the three after it)
KINDS = ("agents", "shared_supervisors", "init_servers", "inits_and_tasks", "master", "framework")


def one_run(python: str, tree: Path, tasks: int, out: Path) -> dict:
    """``throughput.py --only real --rounds 3`` in ``tree``: its rates and CPU by round."""
    subprocess.run([python, "bench/throughput.py", "--only", "real", "--rounds", "3", "--tasks", str(tasks),
                    "--out", str(out)], cwd=tree, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    real = json.loads(out.read_text())["real_agents"]
    cpus = real["cpu_s_per_round"]
    per_task = {kind: [round(1000 * cpu[kind] / tasks, 3) for cpu in cpus] for kind in KINDS}
    per_task["sum"] = [round(sum(per_task[kind][r] for kind in KINDS), 3) for r in range(3)]
    return {"ratio_to_spawn_percent": real["ratio_to_baseline"]["rounds"],
            "cpu_ms_per_task_by_round": per_task,
            "first_minus_next_ms_per_task": {kind: round(v[0] - (v[1] + v[2]) / 2, 3) for kind, v in per_task.items()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-tree", type=Path, required=True, help="the other source tree (with a .venv)")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    code = {"git_head": benchlib.git_state([])[0]}
    doc, started, load_start = benchlib.start("agent_first_burst", argv, code)
    trees = benchlib.trees(ROOT, args.before_tree, doc)
    runs: dict[str, list[dict]] = {"after": [], "before": []}
    with tempfile.TemporaryDirectory(prefix="bench-first-burst-") as work:
        for pair in range(args.pairs):
            for name in (("before", "after") if pair % 2 == 0 else ("after", "before")):
                python, tree = trees[name]
                load = [round(x, 2) for x in os.getloadavg()]
                run = one_run(python, tree, args.tasks, Path(work) / f"{name}-{pair}.json")
                run["loadavg"] = load
                runs[name].append(run)
                benchlib.log(f"pair {pair + 1} {name} (load {load[0]}): round 1 minus 2-3, ms a task "
                             f"{run['first_minus_next_ms_per_task']}; % of spawn {run['ratio_to_spawn_percent']}")
    doc["runs"] = runs
    doc["median_first_minus_next_ms_per_task"] = {
        name: {kind: statistics.median(run["first_minus_next_ms_per_task"][kind] for run in runs[name])
               for kind in (*KINDS, "sum")} for name in runs}
    doc["median_ratio_to_spawn_percent_by_round"] = {
        name: [statistics.median(run["ratio_to_spawn_percent"][r] for run in runs[name]) for r in range(3)]
        for name in runs}
    benchlib.finish(doc, started, load_start, args.out, benchlib.log)


if __name__ == "__main__":
    main()
