#!/usr/bin/env python3
"""What a task's private ``/tmp`` directory costs (stop 19, agent29p: the
dearest step of the init, 39-84 µs in ``bench/nsinit_steps.py``): the
price of a new inode on the work directory's file system, as the agent's
sandboxes take them, against the inodes removed near them just before.

Each round, two framework directories (``plain`` and ``spread``, in
turn which first), each a child of a work directory under ``--root`` that
is marked as the agent marks its sandbox root (``chattr +T``: each
framework directory in a block group of its own; ``--unmarked-root``: not,
all in the group of ``--root``'s own directory, as the directories of
``bench/nsinit_steps.py`` were), and in each, the thread's CPU clock
around each system call, ``--sandboxes`` launches' worth of:

``fresh``
    a sandbox ``mkdir`` (the agent's), its ``tmp`` ``mkdir`` (the init's),
    a file made in the sandbox (``stdout``'s ``open(O_CREAT)``);
``after_removals``
    the same again in the same framework directory, right after the
    first sandboxes were removed (the agent's garbage collection of ended
    tasks' sandboxes);
``renamed_in``
    a ``tmp`` renamed into each sandbox from directories made ahead
    (what reusing emptied ``/tmp`` directories, as the agent reuses run
    directories, would cost a launch instead of the ``mkdir``).

``spread``: the framework directory itself marked, so that each sandbox
is placed as a top directory (its own block group, Orlov's search).

The ext4 of this project's machines has no journal: each inode it hands
out is found past the inodes of its block group removed in the last
seconds (``recently_deleted`` in ``fs/ext4/ialloc.c``), so the price of a
new inode moves with what was removed near it, whoever removed it.

    python bench/agent_tmp_inodes.py --sandboxes 1500 --rounds 6 --out bench/results/agent-tmp-inodes-agent29q.json
    python bench/agent_tmp_inodes.py --sandboxes 1500 --rounds 6 --unmarked-root --out bench/results/agent-tmp-inodes-agent29q-unmarked.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import benchlib  # noqa: E402

sys.path.insert(0, str(HERE.parent))
from mesoslike.agent.executor import spread_children  # noqa: E402

clock = time.thread_time_ns


def make_sandboxes(framework: str, count: int, first: int = 0) -> dict[str, float]:
    """``count`` sandboxes (numbered from ``first``) in ``framework``, each
    with its ``tmp`` and a file: µs a launch by step."""
    sandbox_ns = tmp_ns = file_ns = 0
    for number in range(first, first + count):
        sandbox = f"{framework}/{number}"
        start = clock()
        os.mkdir(sandbox)
        made = clock()
        os.mkdir(f"{sandbox}/tmp", 0o777)
        tmp = clock()
        fd = os.open(f"{sandbox}/stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        done = clock()
        os.close(fd)
        sandbox_ns += made - start
        tmp_ns += tmp - made
        file_ns += done - tmp
    return {"sandbox_mkdir": sandbox_ns / count / 1000, "tmp_mkdir": tmp_ns / count / 1000,
            "file_create": file_ns / count / 1000}


def rename_in(framework: str, spares: str, count: int, first: int) -> float:
    """µs a launch of a directory made ahead renamed into place as ``tmp``."""
    os.mkdir(spares)
    for number in range(first, first + count):
        os.mkdir(f"{spares}/{number}", 0o777)
    total = 0
    for number in range(first, first + count):
        start = clock()
        os.rename(f"{spares}/{number}", f"{framework}/{number}/tmp2")
        total += clock() - start
    return total / count / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandboxes", type=int, default=2000, help="launches a phase")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--root", type=Path, default=Path("/var/tmp"),
                        help="where the framework directories are made (a work directory's file system)")
    parser.add_argument("--unmarked-root", action="store_true",
                        help="the framework directories in the group of --root's directory (no chattr +T on it)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    document, _, _ = benchlib.start("agent_tmp_inodes", None, {"git_head": benchlib.git_state([])[0]})
    rounds: dict[str, list[float]] = {}
    loads = []
    work = Path(tempfile.mkdtemp(prefix="bench-agent-tmp-inodes-", dir=args.root))
    try:
        # the agent's sandbox root: each framework directory a block group of its own (--unmarked-root: not,
        # as bench/nsinit_steps.py's directories are, in whatever group --root's other users churn)
        if not args.unmarked_root and not spread_children(work):
            raise SystemExit(f"{work}: no chattr +T on this file system")
        for number in range(args.rounds):
            loads.append([round(x, 2) for x in os.getloadavg()])
            place = work / str(number)
            place.mkdir()
            measured: dict[str, float] = {}
            for layout in (("plain", "spread") if number % 2 == 0 else ("spread", "plain")):
                framework = f"{work}/{number}-{layout}"   # spread by the work directory's mark, as the agent's
                os.mkdir(framework)
                if layout == "spread" and not spread_children(framework):
                    raise SystemExit(f"{framework}: no chattr +T on this file system")
                fresh = make_sandboxes(framework, args.sandboxes)
                for each in range(args.sandboxes):   # the ended tasks' sandboxes removed (the agent's gc)
                    shutil.rmtree(f"{framework}/{each}")
                after = make_sandboxes(framework, args.sandboxes, first=args.sandboxes)
                measured.update({f"{layout}_fresh_{k}": v for k, v in fresh.items()})
                measured.update({f"{layout}_after_removals_{k}": v for k, v in after.items()})
                measured[f"{layout}_renamed_in_tmp"] = rename_in(framework, f"{place}/{layout}-spares",
                                                                 args.sandboxes, args.sandboxes)
                shutil.rmtree(framework)
            for key, value in measured.items():
                rounds.setdefault(key, []).append(round(value, 2))
            shutil.rmtree(place)
            print(f"round {number + 1}: { {k: round(v, 1) for k, v in measured.items()} } load {loads[-1]}",
                  file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    document.update({"sandboxes_per_phase": args.sandboxes, "root": str(args.root),
                     "framework_directories_spread": not args.unmarked_root,
                     "cpu_us_per_launch_median": {k: round(statistics.median(v), 2) for k, v in rounds.items()},
                     "cpu_us_per_launch_rounds": rounds, "loadavg_per_round": loads})
    benchlib.emit(document, args.out, lambda line: print(line, file=sys.stderr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
