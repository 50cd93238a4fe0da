#!/usr/bin/env python3
"""The agent journal's turn: a loop turn's records written (and the forget
records of as many tasks forgotten, the tree's way), then the turn's
``fdatasync`` (:meth:`~mesoslike.agent.checkpoint.CheckpointStore.sync`),
in a real ``CheckpointStore`` of one tree writing to a work directory on
``--dir``'s file system (the agents' work directories are on ``/tmp`` in
``bench/throughput.py``). Each tree (``--before-tree``: another checkout,
e.g. ``git archive`` of the base) runs in a child process per round, trees
alternated; the CPU of the writes and of the syncs is the thread's
(``time.thread_time``: on this VM a sync's kicks of the virtual disk count
as the thread's CPU), µs a turn, medians over the round's turns; with the
journal's own counts (fsyncs, compactions, the file's size).

    python bench/agent_journal_sync.py --before-tree /var/tmp/agent29r-base --rounds 8 --out bench/results/agent-journal-sync-agent29r.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(turns: int, records: int, directory: str) -> dict:
    import mesoslike
    from mesoslike.agent.checkpoint import CheckpointStore
    from mesoslike.agent.core import TaskCheckpoint
    from mesoslike.resources import Resources
    from mesoslike.wire.types import FrameworkInfo, TaskInfo, TaskState, TaskStatus

    work_dir = tempfile.mkdtemp(prefix="agent-journal-sync-", dir=directory)
    framework = FrameworkInfo(name="bench", id="bench-F0001", role="*")
    resources = Resources.parse("cpus:0.01;mem:16")
    store = CheckpointStore(work_dir)
    store.start_journal([])
    journal = store.journal
    assert journal is not None
    writes, syncs = [], []
    number = 0
    batched = "forgotten" in inspect.signature(store.save_tasks).parameters
    for _ in range(turns):   # a turn: `records` tasks change (written together), then the sync before the sends
        checkpoints = []
        for _ in range(records):
            task_id = f"bench-{number}"
            number += 1
            status = TaskStatus(task_id=task_id, state=TaskState.RUNNING, agent_id="agent-1",
                                uuid=f"{number:032x}", framework_id=framework.id)
            checkpoints.append(TaskCheckpoint(framework, TaskInfo(task_id, "agent-1", "true", resources, name="bench"),
                                              TaskState.RUNNING, [status]))
        # as many tasks of the turn are forgotten (the ends of an earlier turn's, acknowledged): the tree's way of
        # journalling them, a write each (forget_task) or with the turn's records (save_tasks' forgotten)
        forgotten = [(framework.id, f"bench-{n}") for n in range(number - 2 * records, number - records) if n >= 0]
        start = time.thread_time_ns()
        if batched:
            store.save_tasks(checkpoints, forgotten)
        else:
            for key in forgotten:
                store.forget_task(*key)
            store.save_tasks(checkpoints)
        middle = time.thread_time_ns()
        store.sync()
        end = time.thread_time_ns()
        writes.append((middle - start) / 1000)
        syncs.append((end - middle) / 1000)
    counters = dict(journal.counters)
    size = os.path.getsize(store.journal_path)
    store.close_journal()
    shutil.rmtree(work_dir, ignore_errors=True)
    return {"code": os.path.dirname(os.path.dirname(mesoslike.__file__)),
            "write_us_a_turn": round(statistics.median(writes), 1), "sync_us_a_turn": round(statistics.median(syncs), 1),
            "sync_us_mean": round(statistics.mean(syncs), 1), "fsyncs": counters["fsyncs"],
            "compactions": counters["compactions"], "file_bytes": size, "forgets_batched": batched}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before-tree", type=Path)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--records", type=int, default=4, help="tasks changed a turn")
    parser.add_argument("--dir", default="/tmp", help="where the work directories are made")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.turns, args.records, args.dir)))
        return 0
    trees = {"after": ROOT}
    if args.before_tree:
        trees["before"] = args.before_tree.resolve()
    rounds: dict[str, list[dict]] = {name: [] for name in trees}
    load = [os.getloadavg()[0]]
    for number in range(args.rounds):
        order = list(trees) if number % 2 == 0 else list(reversed(trees))
        for name in order:
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "--turns", str(args.turns),
                                  "--records", str(args.records), "--dir", args.dir],
                                 env={**os.environ, "PYTHONPATH": str(trees[name])}, check=True, capture_output=True,
                                 text=True, cwd=trees[name])
            rounds[name].append(json.loads(out.stdout))
            print(name, rounds[name][-1], flush=True)
    load.append(os.getloadavg()[0])
    summary: dict = {name: {key: statistics.median(r[key] for r in results)
                            for key in ("write_us_a_turn", "sync_us_a_turn", "sync_us_mean")}
                     for name, results in rounds.items()}
    if "before" in rounds:
        pairs = list(zip(rounds["after"], rounds["before"]))
        summary["sync_lower_in_pairs"] = sum(a["sync_us_a_turn"] < b["sync_us_a_turn"] for a, b in pairs)
        summary["write_lower_in_pairs"] = sum(a["write_us_a_turn"] < b["write_us_a_turn"] for a, b in pairs)
        summary["pairs"] = len(pairs)
    result = {"command": " ".join(sys.argv), "turns": args.turns, "records_a_turn": args.records, "dir": args.dir,
              "loadavg_start_end": load, "rounds": rounds, "summary": summary}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
