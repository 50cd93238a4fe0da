#!/usr/bin/env python3
"""Fuxi AppMaster: what checkpointing costs per instance end, whole snapshot vs journal.

Issue 14 §2: the AppMaster wrote its whole job (``AppMasterCore.snapshot()``,
O(instances)) with an fsync after every loop turn that changed it, so an
instance's end cost more the bigger the job. Now a turn appends the core's
``journal()`` records (O(changes)) with one fsync and writes a whole
snapshot only when the journal outgrew the last one
(``frameworks/mesoslike_frameworks/fuxi/checkpoint.py``).

A job of N instances runs on 16 workers (a core alone, fake clock, no
processes); each instance end is one loop turn — ``instance_done``, the
next ASSIGN, the checkpoint — the worst case (a busy AppMaster folds
several ends into one turn). Timed per end, two ways in the same run,
interleaved round by round:

``snapshot``
    the old way: ``json.dumps(core.snapshot())`` written to a temporary
    file, fsynced, renamed over the snapshot (``write_snapshot``);
``journal``
    ``Checkpoint.save(core)``: the records appended, fsynced, a compaction
    now and then (its cost spread over the ends, as it happens).

Each is measured with the fsync (``--fsync``, what the AppMaster does; the
files in ``--dir``, default a temporary directory) and without it (the
core's and the encoding's CPU alone, the fsync replaced by nothing), with
the bytes written per end. Prints one JSON document (progress on stderr);
``--out FILE`` also writes it there. It reports; it never fails on slow
numbers.

    python bench/fuxi_checkpoint.py --out bench/results/fuxi_checkpoint.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from benchlib import blob_ids, finish, git_state, start  # noqa: E402
from mesoslike import Resources  # noqa: E402
from mesoslike.clock import FakeClock  # noqa: E402
from mesoslike_frameworks.fuxi import am_protocol as amp  # noqa: E402
from mesoslike_frameworks.fuxi.appmaster_core import AppMasterCore, ToWorker  # noqa: E402
from mesoslike_frameworks.fuxi.checkpoint import Checkpoint, write_snapshot  # noqa: E402
from mesoslike_frameworks.fuxi.model import BackupPolicy, JobSpec, UnitSpec  # noqa: E402

WORKERS = 16
CODE_FILES = ["frameworks/mesoslike_frameworks/fuxi/appmaster_core.py", "frameworks/mesoslike_frameworks/fuxi/checkpoint.py",
              "bench/fuxi_checkpoint.py"]


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def job(instances: int) -> JobSpec:
    return JobSpec("bench", [UnitSpec("map", WORKERS, Resources.parse("cpus:1;mem:64"), command="true",
                                      instances=instances)], backup=BackupPolicy(enabled=False))


def run(way: str, instances: int, ends: int, folder: Path, fsync: bool) -> dict:
    """``ends`` instance ends of a fresh job, one checkpoint each: seconds and bytes per end."""
    clock = FakeClock()
    path = folder / f"{way}-{instances}.json"
    for leftover in folder.glob(f"{way}-{instances}.json*"):
        leftover.unlink()
    checkpoint = Checkpoint(path)
    core = checkpoint.restore("job-1", job(instances), clock) if way == "journal" else \
        AppMasterCore("job-1", job(instances), clock)
    runs: dict[str, tuple[int, int]] = {}

    def follow(actions) -> None:
        for action in actions:
            if isinstance(action, ToWorker) and isinstance(action.message, amp.Assign):
                runs[action.worker_id] = (action.message.instance, action.message.attempt)

    for w in range(WORKERS):
        follow(core.worker_joined(f"w{w}", "map", f"h{w % 4}"))
    written = 0
    with mock.patch("os.fsync") if not fsync else _nothing():
        if way == "journal":
            checkpoint.save(core)
            base = checkpoint.counters["journal_bytes"] + checkpoint.counters["snapshot_bytes"]
        started = time.perf_counter()
        cpu = time.process_time()
        for n in range(ends):
            worker = f"w{n % WORKERS}"
            instance, attempt = runs.pop(worker)
            clock.advance(0.01)
            follow(core.instance_done(worker, instance, attempt, True))
            if way == "journal":
                checkpoint.save(core)
            else:
                written += write_snapshot(path, core.snapshot())
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    if way == "journal":
        written = checkpoint.counters["journal_bytes"] + checkpoint.counters["snapshot_bytes"] - base
        checkpoint.close()
    return {"ms_per_end": 1000 * wall / ends, "cpu_ms_per_end": 1000 * cpu / ends, "bytes_per_end": written / ends,
            "compactions": checkpoint.counters["compactions"] - (1 if way == "journal" else 0)}


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,100000", help="instances per job, comma-separated "
                                                               "(default 1000,100000)")
    parser.add_argument("--ends", type=int, default=500, help="instance ends timed per run (default 500)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each way in turn (default 3)")
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: a temporary "
                                                                "directory; its disk's fsync is measured)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    imported = blob_ids(CODE_FILES)
    head, dirty = git_state(CODE_FILES)
    doc, started, load_start = start("Fuxi AppMaster checkpoint per instance end: whole snapshot vs journal", argv,
                                     {"git_blobs": imported, "git_head": head,
                                      "measured_files_differ_from_head": dirty})
    doc["config"] = {"sizes": sizes, "ends": args.ends, "rounds": args.rounds, "workers": WORKERS,
                     "one_checkpoint_per_end": True,
                     "timer": "time.perf_counter / process_time over the ends; medians over the rounds"}
    folder = args.dir or Path(tempfile.mkdtemp(prefix="fuxi-checkpoint-"))
    doc["config"]["dir"] = str(folder)
    results: dict = {}
    for size in sizes:
        ends = min(args.ends, size - WORKERS)
        series: dict[str, list[dict]] = {}
        for r in range(args.rounds):
            for fsync in (True, False):
                for way in ("snapshot", "journal"):
                    key = f"{way}{'' if fsync else '_no_fsync'}"
                    result = run(way, size, ends, folder, fsync)
                    series.setdefault(key, []).append(result)
                    log(f"  {size} instances, round {r + 1}, {key}: {result['ms_per_end']:.3f} ms/end, "
                        f"{result['bytes_per_end']:.0f} B/end")
        results[str(size)] = {key: {"ms_per_end_median": statistics.median(x["ms_per_end"] for x in runs),
                                    "cpu_ms_per_end_median": statistics.median(x["cpu_ms_per_end"] for x in runs),
                                    "bytes_per_end": runs[0]["bytes_per_end"], "compactions": runs[0]["compactions"],
                                    "rounds": runs} for key, runs in series.items()}
        results[str(size)]["ends"] = ends
        for suffix in ("", "_no_fsync"):
            results[str(size)][f"speedup{suffix}"] = (results[str(size)][f"snapshot{suffix}"]["ms_per_end_median"]
                                                      / results[str(size)][f"journal{suffix}"]["ms_per_end_median"])
    doc["results"] = results
    finish(doc, started, load_start, args.out, log, code_changed=blob_ids(CODE_FILES) != imported)
    if args.dir is None:
        for leftover in folder.iterdir():
            leftover.unlink()
        os.rmdir(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
