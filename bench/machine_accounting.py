"""Where the whole machine's CPU goes during the real agents' rounds.

``bench/throughput.py``'s real agents report the CPU of our processes a
task (master, agents, shared supervisors, init servers, inits and tasks,
the framework); multiplied by the rate it falls short of the machine's
processors. This benchmark runs the same rounds (the same cluster: a
master and four agents of their default isolation, one framework of 1,000
``true`` tasks, raw spawn before each round) and accounts for the whole
machine over each round's launch window (the first launch to the last
task's end, what the rate divides by):

- ``/proc/stat``'s processor time by kind (user, nice, system, irq,
  softirq, idle, iowait, steal), sampled every ``--interval`` seconds, so
  the window's idle is also seen over time (``timeline``: the ramp at the
  start, the steady state, the tail, with the tasks finished so far);
- every process's CPU (``/proc/PID/stat``: its own and its reaped
  children's) at the round's start and end, split into ours (the cluster's
  process trees: master, agents and every process below them, reaped ones
  through the agents' and shared supervisors' children's time), the
  benchmark's own process (the framework), kernel threads by name
  (``kworker``, ``ksoftirqd``, ``rcu_*``...) and everything else (other
  sessions' processes), the rest being CPU no process that lived at the end
  accounts for (processes that ended with no living parent to reap them
  into, the kernel's own work charged to no thread).

Process times are the kernel's clock ticks (``SC_CLK_TCK``, 100 a second):
a round's ~2 s on two processors is ~400 ticks, the figures good to a few
percent. The snapshots take the whole round (from before the framework
starts to after its last callback); the ``timeline`` says how much of that
is outside the launch window.

    python bench/machine_accounting.py --rounds 3 --out bench/results/machine-accounting-agent29n.json

Run it under the machine-wide benchmark lock (``flock /work/wt/bench.lock``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402
import throughput  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
PF_KTHREAD = 0x00200000


def machine_ticks() -> dict[str, int]:
    """``/proc/stat``'s first line: the processors' ticks by kind (guest time is in user already)."""
    with open("/proc/stat") as fh:
        values = fh.readline().split()[1:1 + len(STAT_FIELDS)]
    return {name: int(value) for name, value in zip(STAT_FIELDS, values)}


def cpu_pressure_us() -> int | None:
    """``/proc/pressure/cpu``'s ``some`` total: microseconds in which some runnable process waited for a processor."""
    try:
        with open("/proc/pressure/cpu") as fh:
            return int(fh.readline().rpartition("total=")[2])
    except (OSError, ValueError):
        return None


class Proc:
    __slots__ = ("pid", "ppid", "comm", "kernel", "start", "own", "children", "run_ns", "wait_ns")

    def __init__(self, pid: int, ppid: int, comm: str, kernel: bool, start: int, own: int, children: int,
                 run_ns: int, wait_ns: int) -> None:
        self.pid, self.ppid, self.comm, self.kernel = pid, ppid, comm, kernel
        self.start, self.own, self.children = start, own, children
        self.run_ns, self.wait_ns = run_ns, wait_ns   # /proc/PID/schedstat: on a processor, runnable and waiting


def schedstat(pid: str) -> tuple[int, int]:
    """The process's main thread's nanoseconds on a processor and runnable but waiting for one (0, 0: gone)."""
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            run, wait = fh.read().split()[:2]
        return int(run), int(wait)
    except (OSError, ValueError):
        return 0, 0


def processes() -> dict[int, Proc]:
    """Every process now, by pid (those that end while read are left out)."""
    found: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                text = fh.read()
        except OSError:
            continue
        head, _, tail = text.rpartition(")")
        comm = head.partition("(")[2]
        fields = tail.split()
        # fields[0] is the state (field 3 of proc(5)): index = field number - 3
        found[int(name)] = Proc(int(name), int(fields[1]), comm, bool(int(fields[6]) & PF_KTHREAD),
                                int(fields[19]), int(fields[11]) + int(fields[12]),
                                int(fields[13]) + int(fields[14]), *schedstat(name))
    return found


def subtree(roots: set[int], table: dict[int, Proc]) -> set[int]:
    """``roots`` and every process below them in ``table``."""
    below: dict[int, list[int]] = {}
    for proc in table.values():
        below.setdefault(proc.ppid, []).append(proc.pid)
    out, todo = set(), [pid for pid in roots if pid in table]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo += below.get(pid, [])
    return out


def kernel_group(comm: str) -> str:
    """A kernel thread's kind: ``kworker/1:2-events`` -> ``kworker``, ``rcu_preempt`` -> ``rcu``."""
    name = comm.split("/")[0].split("-")[0]
    return "rcu" if name.startswith("rcu") else name


def used(before: dict[int, Proc], after: dict[int, Proc], pid: int, earlier: dict[int, int]) -> tuple[int, int]:
    """Ticks ``pid`` used itself and reaped from its children between the
    two tables (all of it if it started after the first); ``earlier``: by
    parent, the ticks its children that ended meanwhile had used before the
    first table (a child reaped brings its whole life's time: that part was
    not the round's)."""
    now, then = after[pid], before.get(pid)
    if then is None or then.start != now.start:
        return now.own, now.children
    return now.own - then.own, max(0, now.children - then.children - earlier.get(pid, 0))


def ended_children(before: dict[int, Proc], after: dict[int, Proc]) -> dict[int, int]:
    """By parent pid, the ticks (own and reaped) of its children of the first
    table that are gone in the second, as the first table had them."""
    earlier: dict[int, int] = {}
    for pid, then in before.items():
        now = after.get(pid)
        if now is None or now.start != then.start:
            earlier[then.ppid] = earlier.get(then.ppid, 0) + then.own + then.children
    return earlier


def role(pid: int, roots: dict[int, str]) -> str:
    """What a process of the cluster is: ``master``, ``agents``, ``shared_supervisors``, ``init_servers``
    or ``inits_and_tasks`` (anything else below an agent)."""
    if pid in roots:
        return roots[pid]
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        return "inits_and_tasks"
    if b"shared_supervisor.py" in cmdline:
        return "shared_supervisors"
    return "init_servers" if cmdline.endswith(b"\0--serve\0") else "inits_and_tasks"


def account(before: dict[int, Proc], after: dict[int, Proc], roots: dict[int, str], bench: int) -> dict:
    """The ticks of every process of ``after`` between the two tables, by
    kind; for the cluster's processes by role, with the seconds those that
    lived through the round (their main threads) ran and waited runnable
    (``run_s``, ``runnable_waiting_s``: the latter is the processors'
    contention they met, from any process)."""
    groups = {"ours": 0, "bench": 0, "kernel_threads": 0, "others": 0}
    kernel: dict[str, int] = {}
    others: dict[str, int] = {}
    ours_by_role: dict[str, dict[str, float]] = {}
    cluster = subtree(set(roots), after)
    earlier = ended_children(before, after)
    for pid, proc in after.items():
        own, children = used(before, after, pid, earlier)
        if pid == bench or pid in cluster:
            kind = "bench" if pid == bench else role(pid, roots)
            ticks = own if pid == bench else own + children   # the bench's children are the cluster's: ours
            groups["bench" if pid == bench else "ours"] += ticks
            entry = ours_by_role.setdefault(kind, {"ticks": 0, "run_s": 0.0, "runnable_waiting_s": 0.0})
            entry["ticks"] += ticks
            then = before.get(pid)
            if then is not None and then.start == proc.start:
                entry["run_s"] = round(entry["run_s"] + (proc.run_ns - then.run_ns) / 1e9, 3)
                entry["runnable_waiting_s"] = round(entry["runnable_waiting_s"]
                                                    + (proc.wait_ns - then.wait_ns) / 1e9, 3)
        elif proc.kernel:
            groups["kernel_threads"] += own
            kind = kernel_group(proc.comm)
            kernel[kind] = kernel.get(kind, 0) + own
        else:
            groups["others"] += own + children
            others[proc.comm] = others.get(proc.comm, 0) + own + children
    top = sorted(others.items(), key=lambda kv: -kv[1])[:12]
    return {**groups, "kernel_threads_by_kind": dict(sorted(kernel.items(), key=lambda kv: -kv[1])),
            "ours_by_role": ours_by_role,
            "others_top": dict(top)}


class Sampler(threading.Thread):
    """``/proc/stat`` and the framework's counts every ``interval`` seconds."""

    def __init__(self, interval: float, progress: list) -> None:
        super().__init__(daemon=True)
        self.interval, self.progress = interval, progress
        self.samples: list[tuple[float, dict[str, int], int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            launched = sum(p.launched for p in self.progress)
            ended = sum(p.finished + p.failed for p in self.progress)
            self.samples.append((time.perf_counter(), machine_ticks(), launched, ended))
            self.stop.wait(self.interval)


def share(delta: dict[str, int]) -> dict[str, float]:
    total = sum(delta.values()) or 1
    return {name: round(100 * value / total, 1) for name, value in delta.items()}


def ticks_delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {name: b[name] - a[name] for name in STAT_FIELDS}


def window(samples: list, start: float, end: float) -> dict[str, int]:
    """The machine's ticks between the samples nearest ``start`` and ``end``."""
    first = min(samples, key=lambda s: abs(s[0] - start))
    last = min(samples, key=lambda s: abs(s[0] - end))
    return ticks_delta(first[1], last[1])


def one_round(procs: throughput.Processes, cluster: throughput.Cluster, tasks: int, interval: float) -> dict:
    progress: list = []
    sampler = Sampler(interval, progress)
    roots = {procs.procs[cluster.master].pid: "master", **{procs.procs[a].pid: "agents" for a in cluster.agents}}
    stat0, table0, pressure0 = machine_ticks(), processes(), cpu_pressure_us()
    sampler.start()
    result = throughput.run_frameworks(cluster.address, tasks, 1, "cpus:0.1;mem:16", progress_out=progress)
    sampler.stop.set()
    sampler.join()
    stat1, table1, pressure1 = machine_ticks(), processes(), cpu_pressure_us()
    whole = ticks_delta(stat0, stat1)
    busy = sum(v for k, v in whole.items() if k not in ("idle", "iowait"))
    accounted = account(table0, table1, roots, os.getpid())
    in_processes = sum(accounted[k] for k in ("ours", "bench", "kernel_threads", "others"))
    launch = window(sampler.samples, result["first_launch_at"], result["ended_at"])
    t0 = result["first_launch_at"]
    timeline = []
    for previous, sample in zip(sampler.samples, sampler.samples[1:]):
        delta = ticks_delta(previous[1], sample[1])
        total = sum(delta.values()) or 1
        timeline.append({"t_s": round(sample[0] - t0, 3), "idle_pct": round(100 * (delta["idle"] + delta["iowait"])
                                                                               / total, 1),
                         "launched": sample[2], "ended": sample[3]})
    seconds = result["seconds"]
    return {"tasks_per_s": round(tasks / seconds, 1), "launch_window_s": round(seconds, 3),
            "round_s": round(result["ended_at"] - sampler.samples[0][0], 3) if sampler.samples else None,
            "failed": result["failed"],
            "whole_round": {"ticks": whole, "percent": share(whole), "busy_ticks": busy,
                            "processes_ticks": accounted, "busy_not_in_processes_ticks": busy - in_processes,
                            "cpu_pressure_some_s": (round((pressure1 - pressure0) / 1e6, 3)
                                                    if pressure0 is not None and pressure1 is not None else None)},
            "launch_window": {"ticks": launch, "percent": share(launch)},
            "timeline": timeline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between /proc/stat samples")
    parser.add_argument("--agent-isolation", default="", metavar="ISOLATORS")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started, load_start = time.perf_counter(), os.getloadavg()
    throughput.compile_bytecode([throughput.ROOT])
    work = Path(tempfile.mkdtemp(prefix="bench-accounting-"))
    procs = throughput.Processes(work)
    rounds: list[dict] = []
    doc: dict = {"tasks": args.tasks, "agents": 4, "interval_s": args.interval, "clock_ticks_per_s": TICKS,
                 "processors": os.cpu_count()}
    try:
        cluster = throughput.Cluster(procs, 4, "cpus:64;mem:65536",
                                     ("--isolation", args.agent_isolation) if args.agent_isolation else ())
        for r in range(args.rounds):
            baseline = args.tasks / throughput.spawn_directly(args.tasks, 4, work / "spawn")
            found = one_round(procs, cluster, args.tasks, args.interval)
            found["baseline_spawn_per_s"] = round(baseline, 1)
            found["ratio_to_baseline"] = round(100 * found["tasks_per_s"] / baseline, 1)
            found["loadavg"] = [round(x, 2) for x in os.getloadavg()]
            rounds.append(found)
            whole = found["whole_round"]
            throughput.log(f"round {r + 1}: {found['tasks_per_s']} tasks/s ({found['ratio_to_baseline']} % of "
                           f"raw {baseline:.0f}/s); window {found['launch_window']['percent']}; "
                           f"round {whole['percent']}; processes {whole['processes_ticks']}")
    finally:
        procs.close()
        swept = benchlib.sweep_agent_cgroups(work)
        if swept:
            throughput.log(f"removed {swept} cgroups the stopped agents left")
        shutil.rmtree(work, ignore_errors=True)
    doc["rounds"] = rounds
    benchlib.finish(doc, started, load_start, args.out, throughput.log, None)


if __name__ == "__main__":
    main()
