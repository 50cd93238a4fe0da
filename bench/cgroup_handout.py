"""The agent's CPU for a task's cgroups (cgroups v1), per call: made when the
pool is dry, handed out from the pool (its emptiness checked, its counters
read), and — where the tree has them — spares made ahead and handed out.
Runs one tree's :mod:`mesoslike.agent.isolation` (``--tree``, default this
one) in a child process per round, trees alternated; CPU is the process's
(``time.process_time``). As root, where cgroups v1 can be written.

    python bench/cgroup_handout.py --before-tree /var/tmp/main-tree --rounds 5 --tasks 300
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(tasks: int) -> dict:
    from mesoslike.agent.isolation import select_isolator
    from mesoslike.resources import Resources

    isolator = select_isolator("cgroups", cgroups_root=f"mesoslike-handout-{os.getpid()}")
    resources = Resources.parse("cpus:0.5;mem:32")
    import mesoslike
    result: dict = {"isolator": isolator.name, "code": os.path.dirname(os.path.dirname(mesoslike.__file__))}

    def timed(what: str, call) -> None:
        start = time.process_time()
        call()
        result[what] = round(1e6 * (time.process_time() - start) / tasks, 1)

    made: list = []
    timed("made (pool dry) us", lambda: made.extend(isolator.create("agent-h.pooled", resources, pooled=True)
                                                    for _ in range(tasks)))
    for container in made:   # as their tasks ended, emptied and kept (exit.json's cgroups_kept)
        isolator.give_back(container)
    again: list = []
    timed("from the pool us", lambda: again.extend(isolator.create("agent-h.pooled", resources, pooled=True)
                                                   for _ in range(tasks)))
    for container in again:
        isolator.destroy(container)
    if hasattr(isolator, "make_spares"):
        isolator.spare_size = tasks
        timed("spares made (idle) us", lambda: isolator.make_spares("agent-h", tasks))
        spares: list = []
        timed("a spare handed out us", lambda: spares.extend(isolator.create("agent-h.pooled", resources, pooled=True)
                                                             for _ in range(tasks)))
        for container in spares:
            isolator.destroy(container)
    isolator.release()
    for base in set(isolator.bases.values()):
        try:
            os.rmdir(base)
        except OSError:
            pass
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before-tree", type=Path, required=False)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.tasks)))
        return 0
    trees = {"this": ROOT} | ({"before": args.before_tree} if args.before_tree else {})
    rounds = []
    for r in range(args.rounds):
        for name in (list(trees) if r % 2 == 0 else list(reversed(trees))):
            out = subprocess.run([sys.executable, __file__, "--child", "--tasks", str(args.tasks)],
                                 env={**os.environ, "PYTHONPATH": str(trees[name])},
                                 check=True, capture_output=True, text=True).stdout
            row = {"round": r + 1, "tree": name, "load": os.getloadavg()[0], **json.loads(out)}
            print(row, flush=True)
            rounds.append(row)
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "rounds": rounds}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
