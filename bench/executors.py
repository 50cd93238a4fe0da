#!/usr/bin/env python3
"""Many short tasks: on one custom executor versus the built-in command
executor (issue 18 §1), measured in the same run.

A ``mesoslike local`` cluster of one agent (``cpus:8;mem:8192``) runs,
round after round, interleaved so that a change in the machine's load falls
on both:

``command``
    N tasks of ``true`` (``cpus:0.05;mem:8`` each), each its own process
    under its own supervisor: the baseline.
``executor``
    N tasks ("square i") on one custom executor
    (``examples/executor_many_tasks.py --executor``, ``cpus:0.2;mem:64``),
    started for the round's first task and handed the others; each task is
    a thread of it that reports TASK_RUNNING and TASK_FINISHED. The
    executor's start is part of the round.

Each round is timed from the framework's first offer to the last task's
terminal update (one framework per round, torn down after it). The
benchmark reports; it never fails on a figure.

    python bench/executors.py --out bench/results/executors.json
    python bench/executors.py --tasks 100 --rounds 1
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import ROOT, blob_ids, finish, git_state, start, wait  # noqa: E402

from mesoslike import (ExecutorInfo, Filters, FrameworkInfo, Resources, Scheduler, SchedulerDriver,  # noqa: E402
                       TaskInfo, TaskState)

CODE = ["mesoslike/agent/core.py", "mesoslike/agent/runtime.py", "mesoslike/executor/driver.py",
        "mesoslike/executor/core.py", "mesoslike/master/core.py", "examples/executor_many_tasks.py"]
TASK = Resources.parse("cpus:0.05;mem:8")
EXECUTOR = ExecutorInfo("bench", f"{sys.executable} {ROOT / 'examples' / 'executor_many_tasks.py'} --executor",
                        Resources.parse("cpus:0.2;mem:64"))


def log(text: str) -> None:
    print(f"[executors] {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Batch(Scheduler):
    """Launches N tasks (on the custom executor or as commands) and times them."""

    def __init__(self, tasks: int, on_executor: bool) -> None:
        self.pending = list(range(tasks))
        self.count = tasks
        self.on_executor = on_executor
        self.executor_on: set[str] = set()
        self.ended: dict[str, str] = {}
        self.first_offer: float | None = None
        self.done = threading.Event()

    def resource_offers(self, driver, offers) -> None:
        if self.first_offer is None:
            self.first_offer = time.perf_counter()
        for offer in offers:
            left, tasks = offer.resources, []
            while self.pending:
                first = self.on_executor and offer.agent_id not in self.executor_on
                need = TASK + EXECUTOR.resources if first else TASK
                if not left.contains(need):
                    break
                i = self.pending.pop()
                if self.on_executor:
                    tasks.append(TaskInfo(f"t{i}", offer.agent_id, f"square {i}", TASK, executor=EXECUTOR))
                    self.executor_on.add(offer.agent_id)
                else:
                    tasks.append(TaskInfo(f"t{i}", offer.agent_id, "true", TASK))
                left = left - need
            driver.launch_tasks([offer.id], tasks, Filters(refuse_seconds=0.0)) if tasks else \
                driver.decline_offer(offer.id, Filters(refuse_seconds=0.0))

    def status_update(self, driver, status) -> None:
        if status.terminal:
            self.ended[status.task_id] = status.state
            if len(self.ended) == self.count:
                self.done.set()


def one_round(master: str, tasks: int, on_executor: bool, name: str) -> dict:
    scheduler = Batch(tasks, on_executor)
    driver = SchedulerDriver(scheduler, FrameworkInfo(name=name), master)
    driver.start()
    if not scheduler.done.wait(300):
        raise RuntimeError(f"{name}: {len(scheduler.ended)} of {tasks} ended in 300 s")
    elapsed = time.perf_counter() - (scheduler.first_offer or 0.0)
    driver.stop()
    driver.join(10)
    failed = sum(state != TaskState.FINISHED for state in scheduler.ended.values())
    return {"seconds": elapsed, "tasks_per_second": tasks / elapsed, "not_finished": failed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300, help="tasks per round (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind, interleaved (default 3)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON result here too")
    args = parser.parse_args()
    doc, started, load = start("executors", None, {"blobs": blob_ids(CODE)})
    doc["code"]["git_head"], _ = git_state(CODE)
    work = Path(tempfile.mkdtemp(prefix="bench-executors-"))
    port, http_port = free_port(), free_port()
    local = subprocess.Popen(
        [sys.executable, "-m", "mesoslike", "local", "--agents", "1", "--resources", "cpus:8;mem:8192",
         "--port", str(port), "--http-port", str(http_port), "--work-dir", str(work), "--insecure",
         "--allocation-interval", "0.1"], stdout=subprocess.DEVNULL, stderr=open(work / "local.log", "wb"),
        start_new_session=True)
    try:
        def up() -> bool:
            if local.poll() is not None:
                raise RuntimeError("mesoslike local exited before it came up")
            return bool(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/state", timeout=1).read())

        wait(up, 60, "mesoslike local to come up", interval=0.2, transient=(OSError,))
        master = f"tcp://127.0.0.1:{port}"
        results: dict[str, list[dict]] = {"command": [], "executor": []}
        for round_ in range(args.rounds):
            for kind in ("command", "executor"):
                result = one_round(master, args.tasks, kind == "executor", f"{kind}-{round_}")
                log(f"round {round_} {kind}: {result['tasks_per_second']:.1f} tasks/s")
                results[kind].append(result)
        medians = {kind: statistics.median(r["tasks_per_second"] for r in rounds) for kind, rounds in results.items()}
        doc.update({"tasks": args.tasks, "rounds": results,
                    "median_tasks_per_second": medians,
                    "executor_over_command": medians["executor"] / medians["command"]})
    finally:
        os.killpg(local.pid, 15)
        local.wait(30)
    finish(doc, started, load, args.out, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
