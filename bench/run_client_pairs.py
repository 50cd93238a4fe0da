"""Paired starts of the ``mesoslike`` client of two source trees: each pair
runs the same command line (default: a one-task ``run``) once with each
tree first on the path, in alternating order, against whatever cluster the
environment names (``MESOSLIKE_MASTER`` and the keys, as ``mesoslike
local`` gives its COMMAND); the client's CPU (user + system, from its
rusage) and wall time, medians and the after/before ratio pair by pair.

    python bench/run_client_pairs.py --before DIR --after DIR --pairs 30 --out FILE [-- ARGS...]

DIR is a source tree (``git archive REF | tar -x -C DIR``, bytecode
compiled first). Interpreter: this one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def client_run(tree: Path, args: list[str]) -> tuple[float, float]:
    """CPU ms and wall ms of ``python -m mesoslike ARGS`` with ``tree`` (and its frameworks) first on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(tree / "frameworks")]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mesoslike", *args], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return cpu * 1000, (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--out", type=Path)
    parser.add_argument("args", nargs="*", default=["run", "--instances", "1", "--", "true"])
    options = parser.parse_args()
    trees = {"before": options.before.resolve(), "after": options.after.resolve()}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    loads = []
    for pair in range(options.pairs):
        loads.append(round(os.getloadavg()[0], 1))
        for name in (list(trees) if pair % 2 == 0 else list(reversed(trees))):
            runs[name].append(client_run(trees[name], options.args))

    def median(values: list[float]) -> float:
        return round(statistics.median(values), 1)
    doc = {"command": ["mesoslike", *options.args], "pairs": options.pairs, "trees": {k: str(v) for k, v in trees.items()},
           "load_1min": {"min": min(loads), "max": max(loads), "pairs": loads},
           **{f"{name}_cpu_ms": median([cpu for cpu, _ in runs[name]]) for name in trees},
           **{f"{name}_wall_ms": median([wall for _, wall in runs[name]]) for name in trees},
           "after_to_before_cpu_percent": median([a[0] / b[0] * 100 for a, b in zip(runs["after"], runs["before"])]),
           "after_to_before_wall_percent": median([a[1] / b[1] * 100 for a, b in zip(runs["after"], runs["before"])]),
           "runs_cpu_wall_ms": {name: [[round(c, 1), round(w, 1)] for c, w in values] for name, values in runs.items()}}
    print(json.dumps({k: v for k, v in doc.items() if k not in ("runs_cpu_wall_ms",)}))
    if options.out:
        options.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
