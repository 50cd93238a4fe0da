"""An AppMaster's start, from its process's start to its "serving workers on"
log line: its CPU then (``/proc``'s clock ticks, 10 ms) and the wall time,
for this tree and another one (``--before-tree``, with its virtualenv in
``.venv``), in interleaved runs. Each AppMaster is started with its tree's
boot line (``service.appmaster_argv``, as its service starts one) for a job
of 1,000 instances on 16 slots, and killed once it serves (docs/performance.rst,
"Stop 14: the AppMaster's start (fuxi29j)")."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = {"job": {"name": "bench", "units": [{"name": "u", "slots": 16, "resources": "cpus:0.1;mem:32",
                                            "command": "true", "instances": 1000}]}}


def boot_line(tree: Path) -> list[str]:
    """The AppMaster's argv as ``tree``'s service starts one (before its options)."""
    out = subprocess.run([str(tree / ".venv/bin/python"), "-c",
                          "import sys,json\nfrom mesoslike_frameworks.fuxi import service\n"
                          "print(json.dumps(service.appmaster_argv(sys.executable)))"],
                         capture_output=True, text=True, cwd=tree, check=True).stdout
    return json.loads(out)


def start_once(argv: list[str], work: Path, run: int) -> tuple[float, float]:
    """(CPU ms, wall s) of one AppMaster from its start to its serving."""
    snapshot = work / f"snapshot-{run}.json"
    argv = argv + ["--service", "tcp://127.0.0.1:9", "--job-id", "job-1", "--bind", "tcp://127.0.0.1:0",
                   "--snapshot", str(snapshot), "--job", str(work / "job.json")]
    started = time.monotonic()
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd="/", text=True)
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if "serving workers on" in line:
                with open(f"/proc/{process.pid}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
                return cpu, time.monotonic() - started
        raise RuntimeError(f"the AppMaster exited with {process.wait()} before it served")
    finally:
        process.kill()
        process.wait()
        snapshot.unlink(missing_ok=True)


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "q1": ordered[len(ordered) // 4],
            "q3": ordered[3 * len(ordered) // 4], "min": ordered[0], "max": ordered[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-tree", required=True, type=Path)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    trees = {"after": REPO, "before": args.before_tree.resolve()}
    argvs = {name: boot_line(tree) for name, tree in trees.items()}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    wall: dict[str, list[float]] = {name: [] for name in trees}
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as directory:
        work = Path(directory)
        (work / "job.json").write_text(json.dumps(JOB))
        for run in range(args.runs):
            for name in (list(trees) if run % 2 == 0 else list(trees)[::-1]):
                ms, seconds = start_once(argvs[name], work, run)
                cpu[name].append(ms)
                wall[name].append(seconds)
    ratios = [a / b for a, b in zip(cpu["after"], cpu["before"]) if b]
    result = {"trees": {name: str(tree) for name, tree in trees.items()}, "runs": args.runs,
              "load_start": load_start, "load_end": os.getloadavg(),
              "cpu_ms_to_serving": {name: summary(values) for name, values in cpu.items()},
              "wall_s_to_serving": {name: summary(values) for name, values in wall.items()},
              "cpu_ratio_pair_by_pair": summary(ratios) if ratios else None,
              "raw": {"cpu_ms": cpu, "wall_s": wall}}
    for name in trees:
        c, w = result["cpu_ms_to_serving"][name], result["wall_s_to_serving"][name]
        print(f"{name}: CPU to serving {c['median']:.0f} ms ({c['q1']:.0f}-{c['q3']:.0f}), "
              f"wall {w['median']:.3f} s ({w['q1']:.3f}-{w['q3']:.3f})")
    print(f"pair by pair {result['cpu_ratio_pair_by_pair']}; load {load_start} -> {result['load_end']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
