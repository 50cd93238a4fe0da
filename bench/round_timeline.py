#!/usr/bin/env python3
"""Where a round of ``bench/throughput.py --only real`` waits: one cluster
(a master, four agents with ``cpus:64``), one ``CommandScheduler``
framework launching N × ``true`` with ``cpus:0.1``, as ``throughput.py``'s
real-agents round; for each task, what the framework sees and when
(``time.monotonic``, the clock every process shares): the offer it was
launched on (and the agent), its ``TASK_STARTING`` (the agent read the
RUN_TASK), ``TASK_RUNNING`` (the agent read that its shared supervisor
started it), its terminal update (the agent read its end). Meanwhile a
thread samples the CPU of the master, each agent, its shared supervisor
and their reaped children every ``--sample`` seconds, and the machine's
idle time (``/proc/stat``), so the round's idle stretches can be put
against what the tasks waited for.

    python bench/round_timeline.py --tasks 1000 --rounds 3 --out bench/results/round-timeline.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import throughput  # noqa: E402
from throughput import Cluster, Processes, child_pids, cpu_seconds  # noqa: E402


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the machine so far (``/proc/stat``)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / throughput.TICKS, sum(fields) / throughput.TICKS


class Sampler(threading.Thread):
    """CPU seconds of the cluster's processes every ``interval`` s."""

    def __init__(self, cluster: Cluster, interval: float) -> None:
        super().__init__(daemon=True)
        self.cluster, self.interval = cluster, interval
        self.samples: list[dict] = []
        self.stop = threading.Event()
        procs = cluster.procs.procs
        self.pids = {"master": procs[cluster.master].pid, **{a: procs[a].pid for a in cluster.agents}}

    def sample(self) -> dict:
        row: dict = {"t": time.monotonic()}
        row["machine_busy"], row["machine_total"] = machine_busy()
        for name, pid in self.pids.items():
            try:
                own = cpu_seconds(pid)
            except OSError:
                continue
            row[name] = own["self"]
            if name != "master":
                supervisors = 0.0
                for child in child_pids(pid):
                    try:
                        used = cpu_seconds(child)
                        supervisors += used["self"] + used["children"]
                        for grandchild in child_pids(child):
                            supervisors += sum(cpu_seconds(grandchild).values())
                    except OSError:
                        continue
                row[name + "/rest"] = own["children"] + supervisors
        return row

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append(self.sample())
            self.stop.wait(self.interval)
        self.samples.append(self.sample())


def schedstat(cluster: Cluster) -> dict[str, list[float]]:
    """Of each agent's main thread and its shared supervisor, and the master's: seconds on a CPU,
    seconds runnable and waiting for one (``/proc/PID/task/PID/schedstat``)."""
    out: dict[str, list[float]] = {}
    procs = cluster.procs.procs
    for name in [cluster.master, *cluster.agents]:
        pid = procs[name].pid
        wanted = [(name, pid)]
        if name != cluster.master:
            wanted += [(name + "/supervisor", child) for child in child_pids(pid)
                       if b"shared_supervisor" in Path(f"/proc/{child}/cmdline").read_bytes()]
        for key, each in wanted:
            try:
                ran, waited, _ = Path(f"/proc/{each}/task/{each}/schedstat").read_text().split()
            except OSError:
                continue
            out[key] = [int(ran) / 1e9, int(waited) / 1e9]
    return out


def master_messages(cluster: Cluster) -> int:
    """Messages (frames, a batch counting one) the master has received so far (its ``/metrics``)."""
    text = urllib.request.urlopen(cluster.http + "/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if "messages_received_total" in line and not line.startswith("#"):
            return int(float(line.split()[-1]))
    return -1


def one_round(cluster: Cluster, tasks: int, sample: float) -> dict:
    from mesoslike import Resources, SchedulerDriver
    from mesoslike_frameworks.command import CommandScheduler, framework_info

    offers_seen: list[dict] = []
    updates: dict[str, dict[str, float]] = {}
    agent_of: dict[str, str] = {}

    class Timed(CommandScheduler):
        def resource_offers(self, driver, offers) -> None:
            now = time.monotonic()
            before = self.progress.launched
            super().resource_offers(driver, offers)
            offers_seen.append({"t": now, "agents": [o.agent_id[-6:] for o in offers],
                                "launched": self.progress.launched - before, "took": time.monotonic() - now})
            for task_id, host in list(self.progress.hosts.items())[before:]:
                agent_of[task_id] = host
                updates.setdefault(task_id, {})["accepted"] = now

        def status_update(self, driver, status) -> None:
            updates.setdefault(status.task_id, {}).setdefault(status.state, time.monotonic())
            super().status_update(driver, status)

    scheduler = Timed("true", Resources.parse("cpus:0.1;mem:16"), tasks, "timeline")
    sampler = Sampler(cluster, sample)
    sampler.start()
    sched0 = schedstat(cluster)
    received0 = master_messages(cluster)
    driver = SchedulerDriver(scheduler, framework_info("timeline", "*"), cluster.address)
    driver.start()
    if not scheduler.finished.wait(600):
        raise SystemExit(scheduler.progress.summary())
    end = time.monotonic()
    sched1 = schedstat(cluster)
    received1 = master_messages(cluster)
    driver.join(30)
    time.sleep(sample * 2)
    sampler.stop.set()
    sampler.join()
    start = offers_seen[0]["t"]
    return {"start": start, "end": end, "offers": offers_seen, "tasks": updates, "agent_of": agent_of,
            "samples": sampler.samples, "failed": scheduler.progress.failed,
            "master_messages_received": received1 - received0,
            "sched": {key: {"on_cpu_s": round(sched1[key][0] - sched0[key][0], 3),
                            "runnable_waiting_s": round(sched1[key][1] - sched0[key][1], 3),
                            "blocked_or_idle_s": round(end - start_of(offers_seen) - (sched1[key][0] - sched0[key][0])
                                                       - (sched1[key][1] - sched0[key][1]), 3)}
                      for key in sched1 if key in sched0}}


def start_of(offers_seen: list[dict]) -> float:
    return offers_seen[0]["t"]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def summarize(r: dict) -> dict:
    start, end = r["start"], r["end"]
    tasks = r["tasks"]
    stages = [("accepted", "TASK_STARTING"), ("TASK_STARTING", "TASK_RUNNING"), ("TASK_RUNNING", "TASK_FINISHED"),
              ("accepted", "TASK_FINISHED")]
    out: dict = {"seconds": round(end - start, 3), "tasks_per_s": round(len(tasks) / (end - start), 1),
                 "master_messages_received": r["master_messages_received"], "sched": r["sched"], "offers": [{"at_ms": round(1000 * (o["t"] - start)), "agents": o["agents"], "launched": o["launched"],
                             "took_ms": round(1000 * o["took"], 1)} for o in r["offers"]]}
    per_agent: dict[str, list[str]] = {}
    for task, host in r["agent_of"].items():
        per_agent.setdefault(host, []).append(task)
    out["per_agent"] = {}
    for host, ids in sorted(per_agent.items()):
        first = [tasks[t].get("TASK_RUNNING", end) - start for t in ids]
        last = [tasks[t].get("TASK_FINISHED", end) - start for t in ids]
        out["per_agent"][host] = {"tasks": len(ids), "accepted_ms": round(1000 * (tasks[ids[0]]["accepted"] - start)),
                                  "first_running_ms": round(1000 * min(first)),
                                  "last_finished_ms": round(1000 * max(last)),
                                  "rate_per_s": round(len(ids) / max(1e-9, max(last) - min(first)), 1)}
    out["stage_ms"] = {}
    for a, b in stages:
        gaps = [1000 * (t[b] - t[a]) for t in tasks.values() if a in t and b in t]
        out["stage_ms"][f"{a}->{b}"] = {"p10": round(pct(gaps, 0.1), 1), "p50": round(pct(gaps, 0.5), 1),
                                         "p90": round(pct(gaps, 0.9), 1), "max": round(max(gaps), 1)}
    # the machine's use and each process's, in 100 ms buckets over the round
    samples = [s for s in r["samples"] if start - 0.05 <= s["t"] <= end + 0.1]
    buckets = []
    for a, b in zip(samples, samples[1:]):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        row = {"at_ms": round(1000 * (a["t"] - start)),
               "machine": round((b["machine_busy"] - a["machine_busy"]) / max(1e-9, b["machine_total"] - a["machine_total"]) * os.cpu_count(), 2)}
        ours = 0.0
        for key in a:
            if key.startswith(("master", "agent")) and key in b:
                used = (b[key] - a[key]) / dt
                ours += used
                row[key] = round(used, 2)
        row["ours"] = round(ours, 2)
        buckets.append(row)
    out["cpu_over_time"] = buckets
    used = [row["ours"] for row in buckets]
    out["ours_cpus_mean"] = round(statistics.mean(used), 2) if used else None
    out["machine_cpus_mean"] = round(statistics.mean(row["machine"] for row in buckets), 2) if buckets else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sample", type=float, default=0.1, help="seconds between CPU samples")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tree", type=Path, default=throughput.ROOT,
                        help="the source tree whose master and agents run (default this one; e.g. a git archive)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the processes' logs)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mesoslike-timeline-"))
    procs = Processes(work)
    rounds = []
    try:
        cluster = Cluster(procs, args.agents, "cpus:64;mem:65536", tree=args.tree.resolve())
        for n in range(args.rounds):
            load = [round(x, 2) for x in os.getloadavg()]
            summary = summarize(one_round(cluster, args.tasks, args.sample))
            summary["loadavg"] = load
            rounds.append(summary)
            print(json.dumps({k: v for k, v in summary.items() if k != "cpu_over_time"}), flush=True)
            for row in summary["cpu_over_time"]:
                print("   ", row, flush=True)
    finally:
        procs.close()
        import shutil
        if args.keep:
            print("work directory kept:", work, flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.out:
        doc = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "tasks": args.tasks,
               "agents": args.agents, "command": " ".join(sys.argv), "tree": str(args.tree), "rounds": rounds}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
