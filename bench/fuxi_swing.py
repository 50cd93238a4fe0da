#!/usr/bin/env python3
"""Why the Fuxi path's rate swings from run to run (issue 29): the real
agents' round and the Fuxi job of ``bench/throughput.py`` in alternating
order, each accounted for over the whole machine.

One cluster (a master and 4 agents of this tree, as ``bench/throughput.py``
starts them), one Fuxi service of this tree on it, and per round the real
agents' round (1,000 x ``true`` through the ``CommandScheduler``) and a
Fuxi job of 1,000 instances in 16 slots of 0.1 cpus (``mesoslike fuxi
submit --wait``), the real agents first in even rounds and the job first
in odd ones (so each follows the other system in half its rounds and itself
in the other half). For each part:

- its rate (the real agents': from the first launch to the last task's end,
  as ``throughput.py`` times it; the job's: the client's whole life);
- the job's timeline, from the AppMaster's and the workers' logs as
  ``bench/fuxi_path.py`` reads them (no ``/proc`` poller beside the job):
  when the AppMaster served, the first and last worker joined, the first
  and last instance ended, and the client's exit;
- the whole machine over the part (``bench/machine_accounting.py``'s
  accounting): ``/proc/stat`` by kind, the CPU of our processes by role
  (master, agents, the Fuxi service and what runs below each), of kernel
  threads by kind (the deferred teardown of the tasks' namespaces, mounts
  and cgroups runs in ``kworker``s) and of other sessions' processes, the
  CPU pressure (``/proc/pressure/cpu``'s ``some``: time some runnable
  process waited for a processor);
- what the agents and kernel threads still used in the ``--quiet-probe``
  seconds right before it (the previous part's teardown).

``--competing N`` runs N busy loops, each in a session of its own (with
the kernel's autogroups, a scheduling entity of its own, as another user's
shell is), during the third and fourth of every four rounds (``competing``
in the part): how
much of a contended machine each system gets.

``--root-shares N`` gives the agents' tasks a cgroups root of this run's
own (``--cgroups-root bench-fuxi-swing-PID``) and sets its ``cpu.shares``
to N during the third and fourth of every four rounds (1024, the kernel's
default, in the others — written each round, over the weight the agents
give their tasks' parent at their start, ``Isolator.weigh_tasks``;
``root_shares`` in the part): against other sessions every task
of the agents — the real agents' ``true``s, the Fuxi job's workers and
their instances — shares that one group's weight, as much as one other
session's whole autogroup. With ``--competing-always`` the busy loops run
in every round.

``--settle`` waits, before every part of either system, until a probe of
``--quiet-probe`` seconds finds the agents and kernel threads using less
than ``--settle-cores`` of the machine (or 5 s pass): the same for both.

    python bench/fuxi_swing.py --rounds 10 --out bench/results/fuxi_swing-fuxi29p.json

Run it under the machine-wide benchmark lock (``flock /work/wt/bench.lock``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import fuxi_path  # noqa: E402
import machine_accounting as ma  # noqa: E402
import throughput as tp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def background_cores(roots: dict[int, str], seconds: float) -> dict[str, float]:
    """The cores the cluster's processes (by role) and kernel threads used
    over the next ``seconds``, and the machine's busy cores meanwhile."""
    stat0, table0 = ma.machine_ticks(), ma.processes()
    time.sleep(seconds)
    stat1, table1 = ma.machine_ticks(), ma.processes()
    accounted = ma.account(table0, table1, roots, os.getpid())
    whole = ma.ticks_delta(stat0, stat1)
    per_core = ma.TICKS * seconds
    return {"machine_busy": round(sum(v for k, v in whole.items() if k not in ("idle", "iowait")) / per_core, 2),
            "kernel_threads": round(accounted["kernel_threads"] / per_core, 2),
            "others": round(accounted["others"] / per_core, 2),
            **{role: round(entry["ticks"] / per_core, 2) for role, entry in accounted["ours_by_role"].items()}}


def settle(roots: dict[int, str], probe: float, cores: float, limit: float = 5.0) -> tuple[float, dict[str, float]]:
    """Wait until a probe finds the agents and kernel threads below ``cores``
    (at most ``limit`` seconds); the seconds waited and the last probe."""
    started = time.perf_counter()
    while True:
        found = background_cores(roots, probe)
        if found.get("agents", 0.0) + found["kernel_threads"] < cores or time.perf_counter() - started > limit:
            return round(time.perf_counter() - started, 3), found


def accounted_part(roots: dict[int, str], run: Any) -> tuple[Any, dict[str, Any]]:
    """``run()``'s result and the machine's accounting over it."""
    stat0, table0, pressure0 = ma.machine_ticks(), ma.processes(), ma.cpu_pressure_us()
    started = time.perf_counter()
    result = run()
    wall = time.perf_counter() - started
    stat1, table1, pressure1 = ma.machine_ticks(), ma.processes(), ma.cpu_pressure_us()
    whole = ma.ticks_delta(stat0, stat1)
    accounted = ma.account(table0, table1, roots, os.getpid())
    return result, {
        "wall_s": round(wall, 3), "ticks": whole,
        "busy_cores": round(sum(v for k, v in whole.items() if k not in ("idle", "iowait")) / ma.TICKS / wall, 2),
        "cpu_pressure_some_s": (round((pressure1 - pressure0) / 1e6, 3)
                                if pressure0 is not None and pressure1 is not None else None),
        "ours_ticks_by_role": {role: entry["ticks"] for role, entry in accounted["ours_by_role"].items()},
        "ours_runnable_waiting_s": {role: entry["runnable_waiting_s"]
                                    for role, entry in accounted["ours_by_role"].items()},
        "kernel_threads_ticks": accounted["kernel_threads"], "kernel_threads_by_kind":
            dict(list(accounted["kernel_threads_by_kind"].items())[:6]),
        "others_ticks": accounted["others"], "others_top": dict(list(accounted["others_top"].items())[:5]),
        "bench_ticks": accounted["bench"],
        # the machine's busy time that none of the cluster's processes (nor this one) used: other sessions'
        # processes and kernel threads (their reaped children's whole lives would overstate "others_ticks")
        "not_ours_cores": round((sum(v for k, v in whole.items() if k not in ("idle", "iowait"))
                                 - sum(e["ticks"] for e in accounted["ours_by_role"].values())
                                 - accounted["bench"]) / ma.TICKS / wall, 2)}


def set_cpu_shares(root: str, shares: int) -> None:
    """``cpu.shares`` of the agents' cgroups root (made now if no task made it yet: the agents make it when
    missing, as any cgroup directory)."""
    for hierarchy in benchlib.cgroup_hierarchies():
        if (hierarchy / "cpu.shares").exists():
            (hierarchy / root).mkdir(exist_ok=True)
            (hierarchy / root / "cpu.shares").write_text(str(shares))


def fuxi_job(procs: tp.Processes, address: str, name: str, tasks: int, slots: int) -> tuple[float, dict[str, float]]:
    """``throughput.py``'s Fuxi round (no /proc poller beside it: ``fuxi_path.py``'s costs the machine ~0.3 s
    a round); its rate and its timeline from the AppMaster's and workers' logs (seconds after the client
    started): the first and last worker's HELLO, the first and last instance's end, the client's exit."""
    job = procs.work / f"{name}.toml"
    job.write_text(f'[job]\nname = "{name}"\n\n[[job.units]]\nname = "work"\nslots = {slots}\n'
                   f'cpus = 0.1\nmem = {tp.FUXI_WORKER_MEM}\ninstances = {tasks}\ncommand = "true"\n')
    started, submitted = time.perf_counter(), time.time()
    done = subprocess.run([sys.executable, "-m", "mesoslike", "fuxi", "submit", "--fuxi", address, "--wait",
                           "--interval", "0.1", str(job)], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"fuxi job {name} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    instances = fuxi_path._instances_done(str(procs.work), submitted, submitted + elapsed)
    serving, joined, _ = fuxi_path._appmaster_log(str(procs.work), submitted, submitted + elapsed)
    marks = {"appmaster_serving": serving[:1], "first_worker_joined": joined[:1], "last_worker_joined": joined[-1:],
             "first_instance_done": instances[:1], "last_instance_done": instances[-1:]}
    timeline = {key: round(found[0] - submitted, 3) for key, found in marks.items() if found}
    timeline["ended"] = round(elapsed, 3)
    if "first_instance_done" in timeline and "last_instance_done" in timeline:
        timeline["instances_window_s"] = round(timeline["last_instance_done"] - timeline["first_instance_done"], 3)
        timeline["last_instance_to_end_s"] = round(elapsed - timeline["last_instance_done"], 3)
    return tasks / elapsed, timeline


def one_part(args: argparse.Namespace, procs: tp.Processes, cluster: tp.Cluster, address: str,
             roots: dict[int, str], r: int, system: str, previous: str, competing: int) -> dict[str, Any]:
    """One system's part of round ``r``, accounted for (the module's doc)."""
    waited, before = (settle(roots, args.quiet_probe, args.settle_cores) if args.settle
                      else (0.0, background_cores(roots, args.quiet_probe)))
    part: dict[str, Any] = {"round": r, "system": system, "after": previous, "competing": competing,
                            "settle_s": waited, "before_cores": before,
                            "loadavg": [round(x, 2) for x in os.getloadavg()]}
    if system == "real":
        (rate, _, failed), part["machine"] = accounted_part(roots, lambda: tp.one_round(cluster, args.tasks))
        part.update(rate=round(rate, 1), failed=failed)
    else:
        (rate, timeline), part["machine"] = accounted_part(
            roots, lambda: fuxi_job(procs, address, f"swing-{r}", args.tasks, args.slots))
        part.update(rate=round(rate, 1), timeline=timeline)
    machine = part["machine"]
    tp.log(f"round {r + 1} {system} (after {previous}, {competing} competing): {rate:.0f}/s, "
           f"busy {machine['busy_cores']}, not ours {machine['not_ours_cores']}, pressure "
           f"{machine['cpu_pressure_some_s']} s, kthreads {machine['kernel_threads_ticks']}, others "
           f"{machine['others_top']}, ours {machine['ours_ticks_by_role']}, before {before}"
           + (f", timeline {part['timeline']}" if system == "fuxi" else ""))
    return part


def correlation(xs: list[float], ys: list[float]) -> float | None:
    try:
        return round(statistics.correlation(xs, ys), 2)
    except (statistics.StatisticsError, ValueError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=1000, help="tasks of a real-agents round, instances of a job")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--quiet-probe", type=float, default=0.3, help="seconds of the probe before each part")
    parser.add_argument("--settle", action="store_true", help="wait for the previous part's teardown to settle")
    parser.add_argument("--settle-cores", type=float, default=0.1)
    parser.add_argument("--competing", type=int, default=0, help="busy loops of other sessions in the third and fourth of every four rounds")
    parser.add_argument("--competing-always", action="store_true", help="the busy loops in every round")
    parser.add_argument("--root-shares", type=int, default=0, help="cpu.shares of the tasks' cgroups root in the "
                                                                   "third and fourth of every four rounds")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    doc, started, load_start = benchlib.start("fuxi_swing", None, {"git_head": benchlib.git_state([])[0]})
    doc["autogroup"] = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    work = Path(tempfile.mkdtemp(prefix="bench-fuxi-swing-"))
    procs = tp.Processes(work)
    parts: list[dict[str, Any]] = []
    # a root of the run's own: its cpu.shares are set (and the swept cgroups left named for this benchmark)
    cgroups_root = f"bench-fuxi-swing-{os.getpid()}" if args.root_shares else "mesoslike"
    try:
        cluster = tp.Cluster(procs, 4, "cpus:64;mem:65536",
                             ("--cgroups-root", cgroups_root) if args.root_shares else ())
        address = fuxi_path.start_fuxi(procs, "fuxi-after", sys.executable, ROOT, cluster)
        roots = {procs.procs[cluster.master].pid: "master", procs.procs["fuxi-after"].pid: "fuxi_service",
                 **{procs.procs[a].pid: "agents" for a in cluster.agents}}
        previous = "none"
        for r in range(args.rounds):
            second_kind = r % 4 >= 2
            competing = args.competing if second_kind or args.competing_always else 0
            shares = args.root_shares if second_kind and args.root_shares else 1024
            if args.root_shares:
                set_cpu_shares(cgroups_root, shares)
            spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                        for _ in range(competing)]
            try:
                for system in (("real", "fuxi") if r % 2 == 0 else ("fuxi", "real")):
                    parts.append(one_part(args, procs, cluster, address, roots, r, system, previous, competing))
                    parts[-1]["root_shares"] = shares
                    previous = system
            finally:
                for spinner in spinners:
                    spinner.kill()
                    spinner.wait()
    finally:
        procs.close()
        swept = benchlib.sweep_agent_cgroups(work, ("mesoslike", cgroups_root))
        if swept:
            tp.log(f"removed {swept} cgroups the stopped agents left")
        shutil.rmtree(work, ignore_errors=True)
    rates = {s: [p["rate"] for p in parts if p["system"] == s] for s in ("real", "fuxi")}
    pairs = [100 * f / r for f, r in zip(rates["fuxi"], rates["real"])]
    competing_by_round = [p["competing"] for p in parts if p["system"] == "fuxi"]
    summary: dict[str, Any] = {"real_tasks_per_s": tp.spread(rates["real"]),
                               "fuxi_instances_per_s": tp.spread(rates["fuxi"]),
                               "fuxi_percent_of_real_pair_by_pair": tp.spread(pairs)}
    shares_by_round = [p.get("root_shares", 1024) for p in parts if p["system"] == "fuxi"]
    for shares in sorted(set(shares_by_round)):
        summary[f"fuxi_percent_of_real_with_root_shares_{shares}"] = tp.spread(
            [x for x, c in zip(pairs, shares_by_round) if c == shares])
        for system in ("real", "fuxi"):
            summary[f"{system}_with_root_shares_{shares}"] = tp.spread(
                [p["rate"] for p in parts if p["system"] == system and p.get("root_shares", 1024) == shares])
    for competing in sorted(set(competing_by_round)):
        summary[f"fuxi_percent_of_real_with_{competing}_competing"] = tp.spread(
            [x for x, c in zip(pairs, competing_by_round) if c == competing])
    for system in ("real", "fuxi"):
        mine = [p for p in parts if p["system"] == system]
        for after in ("real", "fuxi"):
            chosen = [p["rate"] for p in mine if p["after"] == after and not p["competing"]]
            if chosen:
                summary[f"{system}_after_{after}_alone"] = tp.spread(chosen)
        for competing in sorted({p["competing"] for p in mine}):
            summary[f"{system}_with_{competing}_competing"] = tp.spread([p["rate"] for p in mine
                                                                         if p["competing"] == competing])
        # what a part's rate goes with: the other sessions' CPU, kernel threads', the CPU pressure
        summary[f"{system}_rate_correlation"] = {
            "not_ours_cores": correlation([p["rate"] for p in mine], [p["machine"]["not_ours_cores"] for p in mine]),
            "kernel_threads_ticks": correlation([p["rate"] for p in mine],
                                                [p["machine"]["kernel_threads_ticks"] for p in mine]),
            "cpu_pressure_some_s": correlation([p["rate"] for p in mine],
                                               [p["machine"]["cpu_pressure_some_s"] or 0.0 for p in mine]),
            "before_agents_and_kthreads": correlation([p["rate"] for p in mine],
                                                      [p["before_cores"].get("agents", 0.0)
                                                       + p["before_cores"]["kernel_threads"] for p in mine])}
    doc.update({"tasks": args.tasks, "slots": args.slots, "settle": args.settle, "summary": summary, "parts": parts})
    benchlib.finish(doc, started, load_start, args.out, tp.log, None)


if __name__ == "__main__":
    main()
