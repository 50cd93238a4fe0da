#!/usr/bin/env python3
"""How long the master's loop stalls while clients poll ``/state`` (issue 12 §3).

A master (in this process) is given a large state through its core — F
frameworks, each with T tasks on an agent of its own — and then ``--readers`` threads
poll ``GET /state`` as fast as they can for ``--seconds``. Meanwhile a probe
client makes a cheap call (REVIVE of an unknown framework, answered with an
ERROR) every 20 ms and times the answer: the longest answer is how long a
peer of the master waited behind ``/state``. The issue measured 13.3 s with
10 readers on a 12.6 MB state.

``--before DIR`` also runs the same measurement on another source tree (for
example ``git archive main mesoslike | tar -x -C DIR``) in a subprocess, so
the JSON holds both and their ratio, measured in the same run.

    python bench/state_under_load.py --out bench/results/state_under_load.json --before /tmp/main-tree
    python bench/state_under_load.py --quick

Prints one JSON document on stdout; it reports, it does not fail.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402


def measure(frameworks: int, tasks: int, readers: int, seconds: float) -> dict:
    from mesoslike.master import MasterConfig
    from mesoslike.resources import Resources
    from mesoslike.wire import AgentInfo, Filters, FrameworkInfo, TaskInfo
    from mesoslike.wire import messages as m

    runtime = benchlib.master_runtime("tcp://127.0.0.1:0", 0, MasterConfig(offer_timeout=None))
    runtime.start()
    try:
        with runtime._lock:
            core = runtime.core
            for a in range(frameworks):
                core.on_message(f"agent-{a}".encode(), m.RegisterAgent(
                    AgentInfo(f"node-{a}", Resources.parse(f"cpus:{tasks};mem:{64 * tasks}"))))
            for f in range(frameworks):
                peer = f"fw-{f}".encode()
                core.on_message(peer, m.Subscribe(FrameworkInfo(f"bench-{f}")))
            offers = [o for s in core.tick() if isinstance(s.message, m.Offers) for o in s.message.offers]
            by_framework: dict[str, list] = {}
            for offer in offers:
                by_framework.setdefault(offer.framework_id, []).append(offer)
            for f, (framework_id, held) in enumerate(sorted(by_framework.items())):
                offer = held[0]
                core.on_message(f"fw-{f}".encode(), m.Accept(framework_id, [offer.id], [
                    TaskInfo(f"task-{f}-{t}", offer.agent_id, "sleep 1000", Resources.parse("cpus:0.5;mem:32"),
                             name=f"a task with a name of some length {t}")
                    for t in range(tasks)], Filters(0)))
            task_count = sum(len(r.tasks) for r in core.frameworks.values())
        size = len(urllib.request.urlopen(runtime.http_address + "/state", timeout=120).read())
        result = benchlib.probe_under_state_readers(runtime, readers, seconds)
        return {"tasks": task_count, "state_bytes": size, **result}
    finally:
        runtime.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", type=int, default=50)
    parser.add_argument("--tasks", type=int, default=1000, help="tasks per framework")
    parser.add_argument("--readers", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true", help="a small state, 5 s")
    parser.add_argument("--before", default=None, help="another source tree to measure the same way")
    parser.add_argument("--source", default=str(ROOT), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.quick:
        args.frameworks, args.tasks, args.seconds = 10, 100, 5.0
    sys.path.insert(0, args.source)
    sizes = dict(frameworks=args.frameworks, tasks=args.tasks, readers=args.readers, seconds=args.seconds)
    if args.source != str(ROOT):  # the child run of --before
        print(json.dumps(measure(**sizes)))
        return
    result: dict = {"command": " ".join(sys.argv), "after": measure(**sizes)}
    if args.before:
        child = subprocess.run([sys.executable, __file__, "--source", args.before, "--frameworks", str(args.frameworks),
                                "--tasks", str(args.tasks), "--readers", str(args.readers),
                                "--seconds", str(args.seconds)],
                               capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=args.before))
        if child.returncode != 0:
            raise SystemExit(child.stderr)
        result["before"] = json.loads(child.stdout.strip().splitlines()[-1])
        result["probe_answer_max_ratio_before_over_after"] = round(
            result["before"]["probe_answer_max_s"] / result["after"]["probe_answer_max_s"], 1)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
