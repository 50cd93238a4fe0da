"""The agent's sandbox GC pass: CPU a sandbox, the book (this tree) against
the walk of every ended sandbox's files (the pass before it).

Makes N ended sandboxes (as a command task leaves them: ``stdout``,
``stderr``, ``tmp``) under a fresh directory, then alternates, round by
round, the two ways a pass learns the ended sandboxes: the earlier pass's
(each sandbox's files walked and ``lstat``-ed, every pass) and this tree's
(:func:`mesoslike.agent.runtime._subdirectories` names only, the sandboxes
already booked). Prints and writes JSON: CPU µs a sandbox per round and
their medians, the load average.

    python bench/gc_pass.py --sandboxes 5000 --rounds 5 --out bench/results/gc-pass.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mesoslike.agent import runtime  # noqa: E402


def walked_pass(root: Path) -> int:
    """The pass before the book: every ended sandbox's files walked."""
    found = 0
    for framework in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        for task in sorted(p for p in framework.iterdir() if p.is_dir() and not p.is_symlink()):
            runtime._last_use_and_size(str(task))
            found += 1
    return found


def booked_pass(root: Path, book: dict[str, float]) -> int:
    """This tree's pass once its sandboxes are booked: names only."""
    ended: dict[str, float] = {}
    for framework in runtime._subdirectories(root):
        for task in runtime._subdirectories(framework.path):
            when = book.get(task.path)
            ended[task.path] = when if when is not None else 0.0
    book.update(ended)
    return len(ended)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandboxes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    top = Path(tempfile.mkdtemp(prefix="bench-gc-pass-", dir="/var/tmp"))
    root = top / "sandboxes"
    try:
        for i in range(args.sandboxes):
            sandbox = root / f"fw-{i % 5}" / f"task-{i}"
            (sandbox / "tmp").mkdir(parents=True)
            (sandbox / "stdout").write_text("hi\n")
            (sandbox / "stderr").write_text("")
        book: dict[str, float] = {}
        booked_pass(root, book)
        rounds = []
        for _ in range(args.rounds):
            row = {}
            for name, run in (("walked", lambda: walked_pass(root)), ("booked", lambda: booked_pass(root, book))):
                start = time.process_time()
                count = run()
                row[name] = round((time.process_time() - start) / count * 1e6, 2)
            rounds.append(row)
            print(f"walked {row['walked']} us a sandbox, booked {row['booked']}", flush=True)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    result = {
        "command": "python bench/gc_pass.py " + " ".join(sys.argv[1:]),
        "sandboxes": args.sandboxes,
        "load_average": os.getloadavg(),
        "cpu_us_a_sandbox_rounds": rounds,
        "median_walked_us": statistics.median(r["walked"] for r in rounds),
        "median_booked_us": statistics.median(r["booked"] for r in rounds),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
