"""A distributed word count on a mesoslike cluster — the main-job demo.

It writes a text corpus in shards to a shared directory, runs one task per
shard on the cluster's agents (as many at once as the offers allow), retries
failed shards, merges the partial counts, and checks the result against a
single-process count. Run it against a local cluster::

    mesoslike local -- python examples/wordcount.py

(the agents share this machine's file system; on a real cluster the shard
directory must be shared storage). The directory is made under ``/var/tmp``
(``--data-dir``), not ``/tmp``: each task has a private ``/tmp`` of its own
(docs/containers.rst), so a directory in the host's ``/tmp`` is out of its
sight.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time

from mesoslike import Filters, FrameworkInfo, Resources, Scheduler, SchedulerDriver, TaskInfo, TaskState

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "wordcount_worker.py")
TASK_RESOURCES = Resources.parse("cpus:0.5;mem:64")
MAX_ATTEMPTS = 3


def write_corpus(directory: str, shards: int, words_per_shard: int, seed: int) -> list[str]:
    """Deterministic Zipf-like text, one file per shard."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(2000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    paths = []
    for shard in range(shards):
        words = rng.choices(vocabulary, weights, k=words_per_shard)
        path = os.path.join(directory, f"shard-{shard:03d}.txt")
        with open(path, "w", encoding="utf-8") as handle:
            for start in range(0, len(words), 20):
                handle.write(" ".join(words[start:start + 20]) + "\n")
        paths.append(path)
    return paths


class WordCountScheduler(Scheduler):
    def __init__(self, shards: list[str], out_dir: str) -> None:
        self.shards = shards
        self.out_dir = out_dir
        self.pending = list(range(len(shards)))      # shards waiting for a slot
        self.attempts = collections.Counter()
        self.running: set[int] = set()
        self.done: set[int] = set()
        self.failed: set[int] = set()
        self.finished = threading.Event()
        self.lock = threading.Lock()
        # one progress line redrawn in place (\r) on a terminal; whole lines into a pipe or file
        self.tty = sys.stdout.isatty()

    def output(self, shard: int) -> str:
        return os.path.join(self.out_dir, f"counts-{shard:03d}.json")

    def registered(self, driver, framework_id, master_info) -> None:
        print(f"registered as {framework_id} at {master_info.address}")

    def resource_offers(self, driver, offers) -> None:
        with self.lock:
            for offer in offers:
                tasks, free = [], offer.resources
                while self.pending and free.contains(TASK_RESOURCES):
                    shard = self.pending.pop(0)
                    self.attempts[shard] += 1
                    task_id = f"shard-{shard}-attempt-{self.attempts[shard]}"
                    command = f"{sys.executable} {WORKER} {self.shards[shard]} {self.output(shard)}"
                    tasks.append(TaskInfo(task_id, offer.agent_id, command, TASK_RESOURCES, name="wordcount"))
                    self.running.add(shard)
                    free = free - TASK_RESOURCES
                if tasks:
                    driver.launch_tasks([offer.id], tasks, Filters(refuse_seconds=1.0))
                else:
                    driver.decline_offer(offer.id, Filters(refuse_seconds=5.0))
            if not self.pending:
                driver.suppress_offers()

    def status_update(self, driver, status) -> None:
        if not status.terminal:
            return
        shard = int(status.task_id.split("-")[1])
        with self.lock:
            self.running.discard(shard)
            if status.state == TaskState.FINISHED:
                self.done.add(shard)
            elif self.attempts[shard] < MAX_ATTEMPTS:
                print(f"{self.newline()}{status.task_id} ended {status.state} ({status.message}); retrying")
                self.pending.append(shard)
                driver.revive_offers()
            else:
                self.failed.add(shard)
            self.report()
            if len(self.done) + len(self.failed) == len(self.shards):
                self.finished.set()
                driver.stop()

    def error(self, driver, message) -> None:
        print(f"{self.newline()}error: {message}", file=sys.stderr)

    def newline(self) -> str:
        """What ends the progress line drawn in place before another line is printed."""
        return "\n" if self.tty else ""

    def report(self) -> None:
        total = len(self.shards)
        width = 30
        bar = "#" * (len(self.done) * width // total) + "." * (width - len(self.done) * width // total)
        line = f"[{bar}] {len(self.done)}/{total} shards done, {len(self.running)} running, {len(self.failed)} failed"
        if self.tty:
            print("\r" + line, end="", flush=True)
        else:
            print(line, flush=True)


def merge(scheduler: WordCountScheduler) -> collections.Counter:
    total = collections.Counter()
    for shard in sorted(scheduler.done):
        with open(scheduler.output(shard), encoding="utf-8") as handle:
            total.update(json.load(handle))
    return total


def count_locally(paths: list[str]) -> collections.Counter:
    total = collections.Counter()
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            total.update(handle.read().split())
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description="Distributed word count on a mesoslike cluster.")
    parser.add_argument("--master", default=os.environ.get("MESOSLIKE_MASTER", "tcp://127.0.0.1:5050"),
                        help="master address (default: $MESOSLIKE_MASTER or tcp://127.0.0.1:5050)")
    parser.add_argument("--shards", type=int, default=12, help="number of shards / tasks (default 12)")
    parser.add_argument("--words", type=int, default=50_000, help="words per shard (default 50000)")
    parser.add_argument("--seed", type=int, default=7, help="corpus seed (default 7)")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    parser.add_argument("--data-dir", default="/var/tmp",
                        help="where the shared corpus directory is made (default /var/tmp: tasks do not see the "
                             "host's /tmp)")
    args = parser.parse_args()
    if args.shards < 1 or args.words < 1:
        parser.error("--shards and --words must be >= 1")

    work = tempfile.mkdtemp(prefix="wordcount-", dir=args.data_dir)
    os.chmod(work, 0o755)   # tasks of another user read the shards too (their counts are written by them)
    shards = write_corpus(work, args.shards, args.words, args.seed)
    print(f"corpus: {args.shards} shards x {args.words} words in {work}")
    scheduler = WordCountScheduler(shards, work)
    driver = SchedulerDriver(scheduler, FrameworkInfo(name="wordcount"), args.master)
    started = time.monotonic()
    driver.start()
    if not scheduler.finished.wait(args.timeout):
        driver.stop()
        print(f"{scheduler.newline()}gave up after {args.timeout:g}s", file=sys.stderr)
        return 1
    driver.join(10)
    elapsed = time.monotonic() - started
    print(scheduler.newline(), end="")
    if scheduler.failed:
        print(f"FAILED: shards {sorted(scheduler.failed)} failed {MAX_ATTEMPTS} times", file=sys.stderr)
        return 1
    distributed, expected = merge(scheduler), count_locally(shards)
    ok = distributed == expected
    print("top words: " + ", ".join(f"{w} {c}" for w, c in distributed.most_common(5)))
    print(f"{sum(distributed.values())} words, {len(distributed)} distinct, {len(shards)} tasks, "
          f"{sum(scheduler.attempts.values())} attempts, {elapsed:.1f}s; "
          f"matches the single-process count: {'yes' if ok else 'NO'}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
