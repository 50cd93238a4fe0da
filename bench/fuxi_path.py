#!/usr/bin/env python3
"""The Fuxi path against real agents, and against the Fuxi path of another
commit, in the same interleaved rounds (issue 29's "Fuxi path >= 90 % of
real agents").

One cluster (a master and 4 agents of this tree, as ``bench/throughput.py``
starts them), two Fuxi services on it — this tree's and, with ``--before
REF``, one running REF's code (its own virtualenv: ``REF_TREE/.venv``, made
with ``make venv`` there; the AppMasters and workers it starts are REF's) —
and per round: the real-agents round of ``bench/throughput.py`` (N x
``true`` through the ``CommandScheduler``), then a Fuxi job of N
instances of ``true`` in 16 slots on each service (``mesoslike fuxi submit
--wait``, as ``bench/throughput.py``'s ``fuxi``), the trees in turn first
(the job right after the real agents' round shares the machine with their
agents' cleaning up). Each Fuxi round also
records the CPU of the job's AppMaster and of its workers (their processes
found in ``/proc`` every 50 ms, each process's CPU as last read: a
worker's instances are not in it — they are their own processes — but
what a worker does to start them is), its timeline (when the AppMaster
and the workers started, from ``/proc``; when the first, tenth and last
instance ended, from the workers' logs — their stdout files, whose ctime
said when they started, are made only for an instance that writes there
since fuxi29e; seconds after the client started) and the load average;
and, in the timeline's ``phases``, where the round's wall time went: from
the client's start to the first worker's HELLO, the workers' joining, the
steady state (the last HELLO to the last instance's end) and the end (to
the client's exit), each with its length, the cores the whole machine kept
busy meanwhile (``/proc/stat``) and the cores the job's AppMaster, workers
and instances used — on a quiet machine, a stretch whose machine cores are
short of 2 left the machine idle.

With ``--also-slot-cpus CPUS`` every round runs a third job, this tree's
with slots of CPUS cpus instead of 0.1: the agents give a slot's cgroup
cpu shares in proportion, and the worker and every instance it starts run
in it — how much of a loaded machine the job gets.

    python bench/fuxi_path.py --before-tree /tmp/base --rounds 3 --out bench/results/fuxi_path.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import throughput as tp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _boot_time() -> float:
    """When the machine booted, as an epoch time to the microsecond: a
    process's start time in /proc is counted from it (``btime`` in
    /proc/stat is rounded down to the second, which put every process start
    of the timeline up to a second early)."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


#: when the machine booted (a process's start time in /proc is counted from it)
_BOOT = _boot_time()


def _log_time(line: str) -> float | None:
    """The epoch time a log line of ``logging``'s default time format starts with (None: none)."""
    try:
        return time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
    except ValueError:
        return None


def _instances_done(work: str, submitted: float, ended: float) -> list[float]:
    """When the job's instances ended, from its workers' logs (``instance N
    attempt A succeeded``, in the stderr of the workers' tasks, below the
    bench's work directory): the same in either tree, and present where an
    instance that writes nothing leaves no file of its own (this branch's
    workers)."""
    done: list[float] = []
    # os.walk, not a glob: the agents remove sandboxes while it looks (a glob raised FileNotFoundError)
    paths = [os.path.join(top, "stderr") for top, _, files in os.walk(work) if "stderr" in files
             and "agent-" in os.path.relpath(top, work).split(os.sep)[0]]
    for path in paths:
        try:
            if not os.stat(path).st_size:
                continue
            with open(path, errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        if "fuxi-worker" not in text:
            continue
        for line in text.splitlines():
            if " succeeded: " in line and (stamp := _log_time(line)) is not None and submitted <= stamp <= ended + 1:
                done.append(stamp)
    return sorted(done)


def _appmaster_log(work: str, submitted: float, ended: float) -> tuple[list[float], list[float], list[float]]:
    """When a job's AppMaster said it serves workers, when each worker
    joined, and when it knew the service had its job's end (its answer to
    JOB_ENDED: ``appmaster.log`` in the service's work directory, the lines
    of this job's time)."""
    serving: list[float] = []
    joined: list[float] = []
    service_knows: list[float] = []
    for path in Path(work).glob("fuxi-*-work/*/appmaster.log"):
        for line in path.read_text(errors="replace").splitlines():
            stamp = _log_time(line)
            if stamp is not None and submitted <= stamp <= ended + 1:
                if "serving workers on" in line:
                    serving.append(stamp)
                elif ") joined" in line:
                    joined.append(stamp)
                elif "ended and the service knows" in line:
                    service_knows.append(stamp)
    return sorted(serving), sorted(joined), sorted(service_knows)


class JobProcesses:
    """The CPU seconds of a job's AppMaster and workers, read from /proc while it runs."""

    def __init__(self, work: Path) -> None:
        self.work = str(work)
        self.cpu: dict[int, tuple[str, float]] = {}
        self.started: dict[int, float] = {}   # pid -> when the process started (seconds since the epoch)
        self.parent: dict[int, int] = {}
        #: pid -> CPU seconds of its reaped children (a worker's: its instances')
        self.children: dict[int, float] = {}
        self.earlier: set[int] = set()
        #: every scan: (epoch time, the machine's busy CPU seconds, the job's CPU seconds with its reaped instances')
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> "JobProcesses":
        self._scan()
        self.earlier = set(self.cpu)   # the workers of an earlier job, still exiting: not this job's
        self.cpu.clear()
        self.children.clear()
        self.samples.clear()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._scan()
        self._sample()

    def _poll(self) -> None:
        while not self._stop.wait(0.05):
            self._scan()
            self._sample()

    def _sample(self) -> None:
        with open("/proc/stat") as handle:
            fields = [int(x) for x in handle.readline().split()[1:]]
        busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
        job = sum(seconds for _, seconds in self.cpu.values()) + sum(self.children.values())
        self.samples.append((time.time(), busy, job))

    def phases(self, marks: dict[str, float], submitted: float) -> dict[str, dict[str, float]]:
        """Where the round's wall time went: for each stretch between two
        marks of its timeline (seconds after the client started), its length,
        the cores the whole machine kept busy meanwhile (``/proc/stat``: 2.0
        is both cores, whoever used them) and the cores the job's AppMaster,
        workers and their instances used (from the 50 ms scans, interpolated):
        on a quiet machine, what a stretch leaves idle is the machine's
        busy cores short of 2."""
        def at(when: float, column: int) -> float:
            rows = self.samples
            if not rows:
                return 0.0
            if when <= rows[0][0]:
                return rows[0][column]
            for before, after in zip(rows, rows[1:]):
                if before[0] <= when <= after[0]:
                    share = (when - before[0]) / (after[0] - before[0]) if after[0] > before[0] else 1.0
                    return before[column] + share * (after[column] - before[column])
            return rows[-1][column]

        stretches = [("client_to_first_join", 0.0, "first_worker_joined"),
                     ("joining", "first_worker_joined", "last_worker_joined"),
                     ("steady", "last_worker_joined", "last_instance_done"),
                     ("end", "last_instance_done", "ended")]
        out: dict[str, dict[str, float]] = {}
        for name, start, end in stretches:
            a = start if isinstance(start, float) else marks.get(start)
            b = marks.get(end)
            if a is None or b is None or b <= a:
                continue
            wall = b - a
            out[name] = {"s": round(wall, 3),
                         "machine_cores": round((at(submitted + b, 1) - at(submitted + a, 1)) / wall, 2),
                         "job_cores": round((at(submitted + b, 2) - at(submitted + a, 2)) / wall, 2)}
        return out

    def _scan(self) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in self.earlier:
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    command = handle.read().replace(b"\0", b" ").decode(errors="replace")
                if "fuxi.appmaster" in command:
                    kind = "appmaster"
                elif "fuxi.worker" in command:
                    kind = "workers"
                else:
                    continue
                if self.work not in command and not os.readlink(f"/proc/{name}/cwd").startswith(self.work):
                    continue   # another bench's, or another engineer's
                with open(f"/proc/{name}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # a worker's child between its fork (or vfork) and its exec still shows the worker's command
            # line: it is counted with the workers (what starting an instance costs them)
            self.cpu[int(name)] = (kind, (int(fields[11]) + int(fields[12])) / ticks)
            self.children[int(name)] = (int(fields[13]) + int(fields[14])) / ticks
            self.started.setdefault(int(name), _BOOT + int(fields[19]) / ticks)
            self.parent.setdefault(int(name), int(fields[1]))

    def timeline(self, submitted: float, ended: float) -> dict[str, float]:
        """When the job's parts happened, in seconds after the client started
        (``submitted``, an epoch time; the job ended at ``ended``): the
        AppMaster's process start and when it served, the first and last
        worker's start and HELLO (joined), the first, tenth and last
        instance's end (its worker's log line: :func:`_instances_done`), and
        when the AppMaster had the service's answer to its JOB_ENDED
        (``service_knows_the_end``; ``ended``: the client's exit)."""
        starts = {kind: sorted(self.started[pid] for pid, (k, _) in self.cpu.items()
                               if k == kind and self.parent.get(pid) not in self.cpu)   # not an instance's vfork
                  for kind in ("appmaster", "workers")}
        instances = _instances_done(self.work, submitted, ended)
        serving, joined, service_knows = _appmaster_log(self.work, submitted, ended)
        marks = {"appmaster_started": starts["appmaster"][:1], "appmaster_serving": serving[:1],
                 "first_worker_started": starts["workers"][:1], "last_worker_started": starts["workers"][-1:],
                 "first_worker_joined": joined[:1], "last_worker_joined": joined[-1:], "first_instance_done": instances[:1],
                 "tenth_instance_done": instances[9:10], "last_instance_done": instances[-1:],
                 "service_knows_the_end": service_knows[:1], "ended": [ended]}
        return {name: round(found[0] - submitted, 3) for name, found in marks.items() if found}

    def totals(self) -> dict[str, float]:
        """CPU seconds of the AppMaster and of the workers; how many workers (processes over 10 ms of CPU)."""
        totals = {"appmaster": 0.0, "workers": 0.0, "worker_processes": 0.0}
        for kind, seconds in self.cpu.values():
            totals[kind] += seconds
            totals["worker_processes"] += kind == "workers" and seconds > 0.01
        return {kind: round(seconds, 3) for kind, seconds in totals.items()}


def fuxi_round(procs: tp.Processes, address: str, python: str, tree: Path, name: str, tasks: int,
               slots: int, cpus: float = 0.1) -> tuple[float, dict[str, float], dict[str, Any]]:
    job = procs.work / f"{name}.toml"
    job.write_text(f'[job]\nname = "{name}"\n\n[[job.units]]\nname = "work"\nslots = {slots}\n'
                   f'cpus = {cpus:g}\nmem = {tp.FUXI_WORKER_MEM}\ninstances = {tasks}\ncommand = "true"\n')
    with JobProcesses(procs.work) as job_processes:
        started, submitted = time.perf_counter(), time.time()
        done = subprocess.run([python, "-m", "mesoslike", "fuxi", "submit", "--fuxi", address, "--wait",
                               "--interval", "0.1", str(job)], cwd=tree, capture_output=True, text=True, timeout=1200)
        elapsed = time.perf_counter() - started
    # the client's exit (when the round's rate is timed to), not after the /proc poller's last scan and join
    timeline: dict[str, Any] = {**job_processes.timeline(submitted, submitted + elapsed)}
    timeline["phases"] = job_processes.phases(timeline, submitted)
    if done.returncode != 0:
        raise SystemExit(f"fuxi job {name} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return tasks / elapsed, job_processes.totals(), timeline


def start_fuxi(procs: tp.Processes, name: str, python: str, tree: Path, cluster: tp.Cluster) -> str:
    port = tp.free_port()
    procs.start(name, [python, "-m", "mesoslike", "fuxi", "serve", "--master", cluster.address, "--port", str(port),
                       "--name", name, "--work-dir", str(procs.work / f"{name}-work")], cwd=tree)
    tp.wait_for(lambda: any(f["name"] == name for f in tp.get_json(cluster.http + "/state", 5)["frameworks"]), 60,
                f"the Fuxi service {name}")
    return f"tcp://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=1000, help="tasks of a real-agents round, instances of a job")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--before-tree", type=Path, default=None,
                        help="a source tree of the code to compare with, with its virtualenv in .venv (e.g. "
                             "`git archive REF | tar -x -C DIR && make -C DIR venv`)")
    parser.add_argument("--also-slot-cpus", type=float, default=None, metavar="CPUS",
                        help="also run this tree's job with slots of CPUS cpus (the bench's are 0.1: the slots' "
                             "cgroups get cpu shares of that), as a third job of every round")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    doc, started, load_start = benchlib.start("fuxi_path", None, {"git_head": benchlib.git_state([])[0]})
    trees = benchlib.trees(ROOT, args.before_tree, doc)
    #: the jobs of a round: name -> (python, tree, its service's name, the slots' cpus)
    jobs = {name: (python, tree, name, 0.1) for name, (python, tree) in trees.items()}
    if args.also_slot_cpus is not None:
        first = next(iter(trees))
        jobs[f"{first}_cpus_{args.also_slot_cpus:g}"] = (*trees[first], first, args.also_slot_cpus)
    work = Path(tempfile.mkdtemp(prefix="bench-fuxi-path-"))
    procs = tp.Processes(work)
    real: list[float] = []
    fuxi: dict[str, list[float]] = {name: [] for name in jobs}
    cpus: dict[str, list[dict[str, float]]] = {name: [] for name in jobs}
    timelines: dict[str, list[dict[str, Any]]] = {name: [] for name in jobs}
    loads: list[list[float]] = []
    try:
        cluster = tp.Cluster(procs, 4, "cpus:64;mem:65536")
        services = {name: start_fuxi(procs, f"fuxi-{name}", python, tree, cluster)
                    for name, (python, tree) in trees.items()}
        for r in range(args.rounds):
            loads.append([round(x, 2) for x in os.getloadavg()])
            rate, _, failed = tp.one_round(cluster, args.tasks)
            real.append(rate)
            # the trees' jobs in turn first, right after the real agents' round (whose agents still clean up)
            order = list(jobs.items()) if r % 2 == 0 else list(reversed(jobs.items()))
            for name, (python, tree, service, slot_cpus) in order:
                rate, cpu, timeline = fuxi_round(procs, services[service], python, tree, f"{name}-{r}", args.tasks,
                                                 args.slots, slot_cpus)
                fuxi[name].append(rate)
                cpus[name].append(cpu)
                timelines[name].append(timeline)
            tp.log(f"round {r + 1}: real agents {real[-1]:.0f} tasks/s (failed {failed}), "
                   + ", ".join(f"fuxi {name} {fuxi[name][-1]:.0f} instances/s (cpu {cpus[name][-1]}, "
                               f"timeline {timelines[name][-1]})"
                               for name in jobs) + f", load {loads[-1]}")
    finally:
        procs.close()
        shutil.rmtree(work, ignore_errors=True)
    doc.update({"tasks": args.tasks, "slots": args.slots, "real_agents_tasks_per_s": tp.spread(real),
                "loadavg_per_round": loads})
    for name in jobs:
        doc[f"fuxi_{name}"] = {
            "instances_per_s": tp.spread(fuxi[name]),
            "percent_of_real_agents": tp.spread([100 * f / r for f, r in zip(fuxi[name], real)]),
            "cpu_ms_per_instance": {kind: tp.spread([1000 * cpu[kind] / args.tasks for cpu in cpus[name]])
                                    for kind in ("appmaster", "workers")},
            "cpu_s_per_round": cpus[name],
            "timeline_s_per_round": timelines[name]}
    benchlib.finish(doc, started, load_start, args.out, tp.log, None)


if __name__ == "__main__":
    main()
