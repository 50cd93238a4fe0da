"""Instructions a task of the agent's core, its runtime's carrying out of
the commands and its journal (``bench/agent_core_journal.py``'s loop: a
real ``AgentRuntime`` through RUN_TASK, STARTING, RUNNING and the end, each
acknowledged, ``--batch`` tasks a turn; no process started, no socket, no
fsync), counted by ``valgrind --tool=callgrind``: the run of ``--small``
tasks subtracted from that of ``--large`` tasks, over their difference —
the interpreter's start and imports cancel out. Deterministic: the same
tree gives the same count to a few hundred instructions a task. Each tree
(this one, ``--before-tree``) with its own ``PYTHONPATH``.

    python bench/agent_task_instructions.py --before-tree /var/tmp/NAME-base --out bench/results/agent-task-instructions-NAME.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(tasks: int, batch: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import agent_core_journal   # (the tree's own on PYTHONPATH: the loop is this file's tree's)
    agent_core_journal.journal_alone = lambda *args, **kwargs: 0.0   # the loop alone
    result = agent_core_journal.child(tasks, batch)
    subprocess.run(["rm", "-rf", result["work_dir"]], check=False)


def instructions(tree: Path, tasks: int, batch: int) -> int:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    # once without valgrind first: a source changed since its bytecode was cached is compiled in that run, not
    # in a counted one (a compile in the small run alone took ~0.5 G instructions off the difference)
    subprocess.run([sys.executable, __file__, "--child", "--tasks", "10", "--batch", str(batch)], env=env, cwd=tree,
                   check=True, capture_output=True)
    with tempfile.TemporaryDirectory(prefix="agent-task-instructions-") as scratch:
        out = os.path.join(scratch, "callgrind.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
                        "--child", "--tasks", str(tasks), "--batch", str(batch)],
                       env=env, cwd=tree, check=True, capture_output=True)
        with open(out) as handle:
            for line in handle:
                match = re.match(r"summary:\s+(\d+)", line) or re.match(r"totals:\s+(\d+)", line)
                if match:
                    return int(match.group(1))
    raise RuntimeError("no total in callgrind's output")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before-tree", type=Path)
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=1200)
    parser.add_argument("--batch", type=int, default=10, help="tasks a loop turn")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--tasks", type=int)
    args = parser.parse_args()
    if args.child:
        child(args.tasks, args.batch)
        return 0
    trees = {"this": ROOT, **({"before": args.before_tree} if args.before_tree else {})}
    rows = {}
    for name, tree in trees.items():
        small, large = instructions(tree, args.small, args.batch), instructions(tree, args.large, args.batch)
        rows[name] = {"tree": str(tree), "small": small, "large": large,
                      "instructions_a_task": round((large - small) / (args.large - args.small))}
        print(name, rows[name], flush=True)
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "trees": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
