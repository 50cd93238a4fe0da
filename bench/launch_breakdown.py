#!/usr/bin/env python3
"""Where a task's launch CPU goes under the agent's shared supervisor, with
and without namespaces: one executor (the agent's ``TaskExecutor``, no
master) per isolation in this process, each launching N tasks ``true`` in
batches and polling until they end, rounds interleaved. Per task: the CPU of
this process (the executor: the agent's side), of the shared supervisor
itself, and of its descendants, reaped or running (``reaped_by_it``; with
namespaces: the init helper's server, the inits it clones and, through them,
the tasks; without: the tasks). Each round also prices an inode on
the work directory's file system (:func:`inode_cost`): a task makes five
(its sandbox, ``stdout``, ``stderr``, its private ``/tmp`` and, with the
work directory below ``/tmp``, the place of the path kept there). Needs
root (cgroups, namespaces).

    python bench/launch_breakdown.py --tasks 1000 --rounds 3 --out bench/results/launch-breakdown.json
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
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import benchlib  # noqa: E402
from mesoslike.agent.executor import TaskExecutor, TaskExit, LaunchFailed  # noqa: E402
from mesoslike.agent.isolation import select_isolation  # noqa: E402
from mesoslike.agent.executor import Launch  # noqa: E402
from mesoslike.resources import Resources  # noqa: E402
from mesoslike.wire.types import TaskInfo  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
ISOLATIONS = {"namespaces": "cgroups/cpu,cgroups/mem,filesystem/linux,namespaces/pid,namespaces/ipc,namespaces/uts",
              "no_namespaces": "cgroups/cpu,cgroups/mem"}


def cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of ``pid`` itself, and of its descendants: the reaped
    ones and those that run (the namespace init server, at any depth)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    descendants = (cutime + cstime) / TICKS
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as fh:
                children = [int(x) for x in fh.read().split()]
        except OSError:
            continue
        for child in children:
            try:
                descendants += sum(cpu(child))
            except OSError:   # reaped meanwhile: counted in cutime next time
                continue
    return (utime + stime) / TICKS, descendants


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def inode_cost(root: Path, count: int) -> dict:
    """CPU microseconds (this process's, user + system) to make a file,
    to make a directory, and to open an existing file, in a fresh directory
    of ``root``'s file system: what each of a task's new inodes (its
    sandbox, ``stdout``, ``stderr``, its private ``/tmp`` and the places of
    the paths kept below it) costs now. On ext4 without a journal, making an
    inode scans past the inodes removed in the last minutes
    (``recently_deleted``), whoever removed them: the cost moves with the
    whole machine's file churn."""
    place = Path(tempfile.mkdtemp(prefix="inode-cost-", dir=root))
    clock = time.process_time   # this process's CPU, to the nanosecond (os.times: to the clock tick)
    try:
        started = clock()
        for number in range(count):
            os.close(os.open(place / f"f{number}", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        made_files = clock()
        for number in range(count):
            os.mkdir(place / f"d{number}")
        made_dirs = clock()
        for number in range(count):
            os.close(os.open(place / f"f{number}", os.O_WRONLY | os.O_CLOEXEC))
        opened = clock()
    finally:
        shutil.rmtree(place, ignore_errors=True)
    return {"file_us": round((made_files - started) * 1e6 / count),
            "directory_us": round((made_dirs - made_files) * 1e6 / count),
            "open_existing_us": round((opened - made_dirs) * 1e6 / count)}


def one_round(executor: TaskExecutor, name: str, tasks: int, batch: int, serial: list[int]) -> dict:
    resources = Resources.parse("cpus:0.01;mem:16")
    ended = 0
    launched = 0
    if not executor._pid_file_written:
        executor.write_agent_pid()   # makes meta, where the shared supervisor lives
    assert executor.link.ensure(), "no shared supervisor"
    shared = executor.link.pid
    before_shared, before_reaped = cpu(shared)
    before_own = own_cpu()
    started = time.monotonic()
    while ended < tasks:
        if launched < tasks:
            launches = []
            for _ in range(min(batch, tasks - launched)):
                serial[0] += 1
                launches.append(Launch("fw", TaskInfo(f"t{serial[0]}", "agent-1", "true", resources), "agent-1"))
            problems = executor.launch_many(launches)
            assert not any(problems), problems
            launched += len(launches)
        for event in executor.poll():
            if isinstance(event, (TaskExit, LaunchFailed)):
                ended += 1
                if isinstance(event, LaunchFailed) or event.exit_code != 0:
                    raise SystemExit(f"{name}: a task failed: {event}")
                executor.forget(event.framework_id, event.task_id)
        time.sleep(0.002)
    wall = time.monotonic() - started
    after_shared, after_reaped = cpu(shared)
    return {"tasks_per_s": round(tasks / wall, 1),
            "cpu_ms_per_task": {"executor": round((own_cpu() - before_own) * 1000 / tasks, 2),
                                "shared_supervisor": round((after_shared - before_shared) * 1000 / tasks, 2),
                                "reaped_by_it": round((after_reaped - before_reaped) * 1000 / tasks, 2)},
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--inodes", type=int, default=500, help="files and directories made a round to price an inode")
    parser.add_argument("--only", choices=sorted(ISOLATIONS), help="measure this isolation alone (to profile it)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-launch-breakdown-"))
    cgroups_root = f"bench-breakdown-{os.getpid()}"
    executors = {name: TaskExecutor(root / name, shared_supervisor=True,
                                    isolation=select_isolation(spec, cgroups_root=cgroups_root))
                 for name, spec in ISOLATIONS.items() if args.only in (None, name)}
    assert "namespaces" not in executors or executors["namespaces"].init_helper is not None, "no init helper: no C compiler?"
    serial = [0]
    rounds: dict[str, list[dict]] = {name: [] for name in executors}
    inodes: list[dict] = []
    try:
        for number in range(args.rounds):
            inodes.append(inode_cost(root, args.inodes))
            print(f"round {number + 1} inode cost: {inodes[-1]}", file=sys.stderr, flush=True)
            for name, executor in executors.items():
                result = one_round(executor, name, args.tasks, args.batch, serial)
                rounds[name].append(result)
                print(f"round {number + 1} {name}: {result}", file=sys.stderr, flush=True)
    finally:
        for executor in executors.values():
            executor.kill_all(grace_period=0.0)
            executor.release()
        benchlib.sweep_agent_cgroups(root, roots=(cgroups_root,))   # and the root this run made
        shutil.rmtree(root, ignore_errors=True)

    def median(name: str, *keys: str) -> float:
        values = []
        for result in rounds[name]:
            value = result
            for key in keys:
                value = value[key]
            values.append(value)
        return round(statistics.median(values), 2)
    summary = {name: {"tasks_per_s": median(name, "tasks_per_s"),
                      "cpu_ms_per_task": {part: median(name, "cpu_ms_per_task", part)
                                          for part in ("executor", "shared_supervisor", "reaped_by_it")}}
               for name in executors}
    document = {"command": " ".join(["launch_breakdown.py", *sys.argv[1:]]),
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "isolations": ISOLATIONS, "tasks": args.tasks, "batch": args.batch,
                "median": summary, "rounds": rounds,
                "inode_cost_cpu_us": {key: round(statistics.median(cost[key] for cost in inodes))
                                      for key in ("file_us", "directory_us", "open_existing_us")},
                "inode_cost_rounds": inodes}
    text = json.dumps(document, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
