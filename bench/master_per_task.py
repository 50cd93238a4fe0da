#!/usr/bin/env python3
"""What the master does a task on the real path against the control plane:
``bench/throughput.py``'s real-agents round (a master, four agents with
``cpus:64``, one ``CommandScheduler`` launching N x ``true`` with
``cpus:0.1``) and its control-plane round (simulated agents
``tests/stress_helpers.py agents``, the same protocol), each round between
two scrapes of the master's ``/metrics``: messages handled by type (and the
core's seconds on them), loop turns, allocation cycles, offers made,
declined, accepted and rescinded, frames sent; all per task, beside the
master's and the framework's CPU ms a task.

    python bench/master_per_task.py --rounds 3 --out bench/results/master-per-task.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402
import throughput  # noqa: E402

#: the counters read (sample name as /metrics spells it -> our name)
COUNTERS = {"mesoslike_allocation_cycles_total": "allocation_cycles",
            "mesoslike_offers_made_total": "offers_made",
            "mesoslike_offers_declined_total": "offers_declined",
            "mesoslike_offers_accepted_total": "offers_accepted",
            "mesoslike_offers_rescinded_total": "offers_rescinded",
            "mesoslike_offers_filtered_total": "offers_filtered",
            "mesoslike_transport_frames_sent_total": "frames_sent",
            "mesoslike_loop_turns_total": "loop_turns",
            "mesoslike_messages_received_total": "messages_received",
            "mesoslike_tasks_launched_total": "tasks_launched"}


def scrape(http: str) -> dict[str, float]:
    """The counters of :data:`COUNTERS` and, by message type, ``handled:TYPE`` (count) and
    ``seconds:TYPE`` (the core's seconds on them) from the master's /metrics."""
    with urllib.request.urlopen(http + "/metrics", timeout=30) as answer:
        lines = answer.read().decode().splitlines()
    out: dict[str, float] = {}
    for line in lines:
        if not line or line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        if name in COUNTERS:
            out[COUNTERS[name]] = float(value)
        elif name.startswith("mesoslike_message_handling_seconds_count{"):
            out["handled:" + name.split('type="', 1)[1].split('"', 1)[0]] = float(value)
        elif name.startswith("mesoslike_message_handling_seconds_sum{"):
            out["seconds:" + name.split('type="', 1)[1].split('"', 1)[0]] = float(value)
    return out


def per_task(before: dict[str, float], after: dict[str, float], tasks: int) -> dict[str, float]:
    keys = set(before) | set(after)
    return {key: round((after.get(key, 0.0) - before.get(key, 0.0)) / tasks * (1e6 if key.startswith("seconds:")
                                                                             else 1), 4)
            for key in sorted(keys)}


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of ``pid`` by its name (the loop's is ``main``; ZeroMQ's I/O thread
    ``ZMQbg/IO/0``; Python's other threads are all named as the process, summed as ``other``)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        key = "main" if task.name == str(pid) else name if name.startswith("ZMQ") else "other"
        out[key] = out.get(key, 0.0) + (int(fields[11]) + int(fields[12])) / throughput.TICKS
    return out


def real_rounds(procs: throughput.Processes, tasks: int, rounds: int, profile: Path | None = None,
                cprofile: Path | None = None) -> list[dict]:
    if cprofile is not None:   # the master under bench/master_cprofile.py: its loop's CPU by function
        plain = procs.mesoslike

        def mesoslike(name: str, *args: str, **kwargs: object) -> object:
            if name != "master":
                return plain(name, *args, **kwargs)  # type: ignore[arg-type]
            return procs.start(name, [sys.executable, str(HERE / "master_cprofile.py"), str(cprofile), *args])
        procs.mesoslike = mesoslike  # type: ignore[method-assign]
    cluster = throughput.Cluster(procs, 4, "cpus:64;mem:65536")
    if cprofile is not None:
        import os
        import signal
        os.kill(procs.procs[cluster.master].pid, signal.SIGUSR1)
    out = []
    spy = None
    if profile is not None:   # perf's samples of the master's threads on the CPUs over the rounds
        import subprocess
        spy = subprocess.Popen(["perf", "record", "-F", "1999", "-g", "-p", str(procs.procs[cluster.master].pid),
                                "-o", str(profile)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for r in range(rounds):
        master_pid = procs.procs[cluster.master].pid
        before, cpu0, threads0 = scrape(cluster.http), cluster.cpu(), thread_cpu(master_pid)
        result = throughput.run_frameworks(cluster.address, tasks, 1, "cpus:0.1;mem:16")
        cpu1, threads1, after = cluster.cpu(), thread_cpu(master_pid), scrape(cluster.http)
        row = per_task(before, after, tasks)
        for name, seconds in threads1.items():
            row[f"master_thread_cpu_ms:{name}"] = round(1000 * (seconds - threads0.get(name, 0.0)) / tasks, 4)
        row["master_cpu_ms"] = round(1000 * (cpu1["master"] - cpu0["master"]) / tasks, 4)
        row["framework_cpu_ms"] = round(1000 * result["framework_cpu_s"] / tasks, 4)
        row["seconds"] = round(result["seconds"], 3)
        throughput.log(f"real round {r + 1}: {row}")
        out.append(row)
    if cprofile is not None:
        import os
        import signal
        os.kill(procs.procs[cluster.master].pid, signal.SIGUSR2)
        throughput.wait_for(lambda: cprofile.exists(), 30, "the master's profile")
        time.sleep(1)
    if spy is not None:
        import signal
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    for name in list(procs.procs):
        procs.stop(name)
    return out


def control_rounds(procs: throughput.Processes, tasks: int, agents: int, rounds: int, staging: int) -> list[dict]:
    out = []
    for r in range(rounds):
        port, http = throughput.free_port(), throughput.free_port()
        address, url = f"tcp://127.0.0.1:{port}", f"http://127.0.0.1:{http}"
        procs.mesoslike("cp-master", "master", "--port", str(port), "--http-port", str(http),
                        "--allocation-interval", "0.2")
        throughput.wait_for(lambda: throughput.get_json(url + "/health", 2), 30, "the master")
        procs.start("cp-agents", [sys.executable, str(throughput.ROOT / "tests" / "stress_helpers.py"), "agents",
                                  "--master", address, "--count", str(agents), "--resources",
                                  "cpus:1000;mem:1000000"])
        throughput.wait_for(lambda: len(throughput.get_json(url + "/state", 5)["agents"]) == agents, 60,
                            "the simulated agents")
        before, cpu0 = scrape(url), procs.cpu(["cp-master"])["cp-master"]["self"]
        result = throughput.run_frameworks(address, tasks, 1, "cpus:0.01;mem:1", staging_per_agent=staging)
        cpu1, after = procs.cpu(["cp-master"])["cp-master"]["self"], scrape(url)
        row = per_task(before, after, tasks)
        row["master_cpu_ms"] = round(1000 * (cpu1 - cpu0) / tasks, 4)
        row["framework_cpu_ms"] = round(1000 * result["framework_cpu_s"] / tasks, 4)
        row["seconds"] = round(result["seconds"], 3)
        throughput.log(f"control round {r + 1}: {row}")
        out.append(row)
        procs.stop("cp-agents")
        procs.stop("cp-master")
    return out


def medians(rows: list[dict]) -> dict[str, float]:
    keys = sorted({key for row in rows for key in row})
    return {key: round(statistics.median(row.get(key, 0.0) for row in rows), 4) for key in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--control-tasks", type=int, default=20000)
    parser.add_argument("--sim-agents", type=int, default=10)
    parser.add_argument("--control-staging", type=int, default=2000)
    parser.add_argument("--only", default="real,control")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--cprofile", type=Path, default=None,
                        help="real: the master's loop under cProfile (CPU clock) over the rounds, pstats to this file")
    parser.add_argument("--profile", type=Path, default=None,
                        help="real: perf record of the master over the rounds to this file")
    args = parser.parse_args()
    only = set(args.only.split(","))
    work = Path(tempfile.mkdtemp(prefix="bench-master-per-task-"))
    procs = throughput.Processes(work)
    doc: dict = {"command": " ".join(["master_per_task.py", *sys.argv[1:]]),
                 "code": {"git_head": benchlib.git_state(throughput.MEASURED)[0]}}
    try:
        if "real" in only:
            rows = real_rounds(procs, args.tasks, args.rounds, args.profile, args.cprofile)
            doc["real"] = {"tasks": args.tasks, "per_task_median": medians(rows), "rounds": rows}
        if "control" in only:
            rows = control_rounds(procs, args.control_tasks, args.sim_agents, args.rounds, args.control_staging)
            doc["control"] = {"tasks": args.control_tasks, "per_task_median": medians(rows), "rounds": rows}
    finally:
        procs.close()
        benchlib.sweep_agent_cgroups(work)
        benchlib.remove_work_directory(work)
    text = json.dumps(doc, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({k: v.get("per_task_median") for k, v in doc.items() if isinstance(v, dict)}, indent=1))


if __name__ == "__main__":
    main()
