#!/usr/bin/env python3
"""The contended simulation, policy by policy: this checkout against a baseline revision and against
itself with every scheduling pass in full, in one run.

Runs ``mesoslike simulate`` (by default the contended case: ``--workload
trace --nodes 500 --load 1000 --quota examples/simulate/quota.toml``) once
per policy with ``--policy P --json``, each in a process of its own, twice:
with this checkout's code and with the code at git revision ``--baseline``
(``git archive`` into a temporary directory, imported ahead of the installed
package), interleaved policy by policy so both see the same machine load.
For each it records the wall time, the process's CPU time (user + system,
from ``wait4``), its peak RSS and the load average before and after, and
whether the two JSON documents are byte-identical (a speed-up must not
change a result). ``--full-passes`` also runs this checkout with
``simulate --full-passes`` (the Fuxi core's pass on every batch, no quiet
passes: the behaviour before them), interleaved too, and compares its JSON
with the checkout's. ``--copies N`` passes ``--copies N`` too (the whole trace
on a cluster N times as big: ``--nodes 0 --load 1 --copies 10``).

Prints one JSON document (progress on stderr); ``--out FILE`` also writes
it there. It reports; it never fails on slow numbers (it exits 1 if a
result differs).

    python bench/simulate_contended.py --out bench/results/simulate_contended.json
    python bench/simulate_contended.py --full-passes --baseline main --out bench/results/simulate_quiet_passes.json
    python bench/simulate_contended.py --args "--workload trace --nodes 0 --load 1" --copies 10 --baseline '' \\
        --out bench/results/simulate_whole_trace_10x.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from benchlib import finish, git_state, start  # noqa: E402

CONTENDED = "--workload trace --nodes 500 --load 1000 --quota examples/simulate/quota.toml"
POLICIES = "drf,random,fuxi-fifo,fuxi-fair"
GOAL_SECONDS = 10.0      # per policy
CODE_FILES = [*(f"frameworks/mesoslike_frameworks/fuxi/{name}.py"
                for name in ("core", "books", "preemption", "machines", "waiting_queue", "simulation")),
              "mesoslike/sim/engine.py", "mesoslike/sim/schedulers.py", "mesoslike/sim/metrics.py",
              "mesoslike/sim/traces.py", "mesoslike/allocator/hierarchical.py"]


#: the baseline's process: without the editable install's finder, then asserting it imports the baseline's tree
BASELINE_SCRIPT = (
    "import os, sys; sys.meta_path[:] = [f for f in sys.meta_path "
    "if not getattr(f, '__module__', '').startswith('__editable__')]; "
    "sys.path[:] = [p for p in sys.path if p not in ('', os.getcwd())]; "
    "import mesoslike, mesoslike_frameworks; "
    "root = os.environ['PYTHONPATH'].split(os.pathsep)[0]; "
    "assert mesoslike.__file__.startswith(root) and mesoslike_frameworks.__path__[0].startswith(root), "
    "(mesoslike.__file__, list(mesoslike_frameworks.__path__)); "
    "from mesoslike.cli import main; main()")


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def checkout_of(rev: str) -> Path:
    """The tree at ``rev`` in a temporary directory, laid out as an
    installed package (``mesoslike/frameworks`` is ``frameworks/``)."""
    folder = Path(tempfile.mkdtemp(prefix="simulate-baseline-"))
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True, timeout=120).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True, timeout=120)
    (folder / "mesoslike" / "frameworks").symlink_to(folder / "frameworks")
    return folder


def run_once(code: Path | None, argv: list[str], keep: Path | None = None) -> dict:
    """One ``mesoslike simulate`` process: wall, CPU, peak RSS, load, the JSON's digest
    (the JSON itself written to ``keep`` if given)."""
    env = dict(os.environ)
    if code is not None:
        # both packages from the baseline's tree: mesoslike, and the bundled frameworks (the Fuxi policies)
        # ahead of this checkout's editable install
        paths = [str(code), str(code / "frameworks"), *filter(None, [env.get("PYTHONPATH")])]
        env["PYTHONPATH"] = os.pathsep.join(paths)
    load_before = os.getloadavg()
    wall0 = time.perf_counter()
    # ``python -c`` puts the working directory (this checkout) first on sys.path, and an editable install
    # (``make venv``) finds this checkout through a finder on sys.meta_path: the baseline's process drops
    # both, else it would run this checkout's code
    script = "from mesoslike.cli import main; main()" if code is None else BASELINE_SCRIPT
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, "-c", script, "simulate",
                                    *argv], cwd=ROOT, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - wall0
        out.seek(0)
        data = out.read()
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"simulate {' '.join(argv)} failed: {err.read().decode(errors='replace')[-2000:]}")
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_bytes(data)
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "json_bytes": len(data), "json_sha256": hashlib.sha256(data).hexdigest()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--args", default=CONTENDED, help=f"simulate's arguments but the policy (default {CONTENDED})")
    parser.add_argument("--policies", default=POLICIES, help=f"comma-separated (default {POLICIES})")
    parser.add_argument("--copies", type=int, default=1, help="simulate --copies N (default 1: the trace once)")
    parser.add_argument("--baseline", default="", help="git revision timed alongside ('' to skip; default '')")
    parser.add_argument("--full-passes", action="store_true",
                        help="also time this checkout with simulate --full-passes (every pass in full)")
    parser.add_argument("--keep-json", type=Path, default=None,
                        help="also write each run's JSON into this folder (POLICY-checkout.json, ...) to diff them")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    head, dirty = git_state(CODE_FILES)
    doc, started, load_start = start("mesoslike simulate per policy: this checkout vs a baseline revision", argv,
                                     {"git_head": head, "measured_files_differ_from_head": dirty,
                                      "baseline": args.baseline or None})
    common = shlex.split(args.args) + (["--copies", str(args.copies)] if args.copies != 1 else []) + ["--json"]
    doc["config"] = {"simulate_args": common, "policies": args.policies.split(","), "goal_s_per_policy": GOAL_SECONDS,
                     "timer": "wall: time.perf_counter around the process; cpu: its user + system time (wait4)",
                     "interleaved": "per policy: the checkout, then with --full-passes, then the baseline"}
    baseline = checkout_of(args.baseline) if args.baseline else None
    if args.baseline:    # a branch name moves: the commit it named when this run began
        doc["code"]["baseline_commit"] = subprocess.run(["git", "rev-parse", args.baseline], cwd=ROOT, check=True,
                                                        capture_output=True, text=True, timeout=60).stdout.strip()
    results: dict[str, dict] = {}
    differ = False

    def kept(policy: str, which: str) -> Path | None:
        return args.keep_json / f"{policy}-{which}.json" if args.keep_json is not None else None

    for policy in args.policies.split(","):
        argv_policy = [*common, "--policy", policy]
        entry = results[policy] = {"checkout": run_once(None, argv_policy, kept(policy, "checkout"))}
        log(f"{policy}: checkout {entry['checkout']['wall_s']:.1f} s wall, {entry['checkout']['cpu_s']:.1f} s cpu")
        if args.full_passes:
            full = entry["full_passes"] = run_once(None, [*argv_policy, "--full-passes"], kept(policy, "full-passes"))
            entry["full_passes_identical_json"] = full["json_sha256"] == entry["checkout"]["json_sha256"]
            entry["speedup_cpu_over_full_passes"] = round(full["cpu_s"] / entry["checkout"]["cpu_s"], 2)
            differ |= not entry["full_passes_identical_json"]
            log(f"{policy}: --full-passes {full['wall_s']:.1f} s wall, {full['cpu_s']:.1f} s cpu; identical JSON: "
                f"{entry['full_passes_identical_json']}")
        if baseline is not None:
            entry["baseline"] = run_once(baseline, argv_policy, kept(policy, "baseline"))
            entry["identical_json"] = entry["baseline"]["json_sha256"] == entry["checkout"]["json_sha256"]
            entry["speedup_cpu"] = round(entry["baseline"]["cpu_s"] / entry["checkout"]["cpu_s"], 2)
            differ |= not entry["identical_json"]
            log(f"{policy}: baseline {entry['baseline']['wall_s']:.1f} s wall, {entry['baseline']['cpu_s']:.1f} s "
                f"cpu; identical JSON: {entry['identical_json']}")
        entry["goal_met_cpu"] = entry["checkout"]["cpu_s"] <= GOAL_SECONDS
        if args.out is not None:     # what is measured so far, in case the run is cut short
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({**doc, "results": results, "complete": False}, indent=2) + "\n")
    doc["results"] = results
    doc["complete"] = True
    doc["all_identical"] = not differ if baseline is not None or args.full_passes else None
    finish(doc, started, load_start, args.out, log, code_changed=git_state(CODE_FILES) != (head, dirty))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
