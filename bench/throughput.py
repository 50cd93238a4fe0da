#!/usr/bin/env python3
"""The task pipeline end to end: tasks launched and finished per second
(issue 14), each figure with its baseline measured in the same run.

``real_agents``
    A master and 4 agents (``cpus:64;mem:65536`` each), each its own process;
    one framework in this process — ``CommandScheduler``, what ``mesoslike
    run`` is, on the public driver API — launching N tasks ``true``. Timed
    from the first launch to the return of the callback of the last terminal
    update (the driver acknowledges it then). Baseline: the same N commands
    spawned directly by 4 threads, each command with a sandbox directory and
    its stdout/stderr files, as the agent makes them. Each round also says
    how many messages the master received a task, in all and by type
    (``master_messages_per_task_per_round``): how well the round's turns
    shared their work, since a round of small batches costs the master,
    the agents and the framework more CPU a task.
``control_plane``
    One master; K simulated agents in one process (``tests/stress_helpers.py
    agents``: real ``AgentCore`` objects speaking the agent protocol, whose
    tasks end at once, no process); F frameworks on the public driver API in
    this process. Tasks launched + finished + acknowledged per second.
    Baseline: raw pyzmq ROUTER/DEALER round trips (another process echoes)
    of frames the size of an encoded STATUS_UPDATE, with a window in flight.
``fuxi``
    A Fuxi job of N instances of ``true`` (S slots) submitted with ``mesoslike
    fuxi submit --wait`` to ``mesoslike fuxi serve`` on the real-agents
    cluster; timed from submit to the end of ``submit``. Compared with the
    real-agents rate of the same run: with both measured, their rounds take
    turns (the real agents first in even rounds, the job first in odd ones)
    and the ratio is also taken round by round
    (``fuxi.percent_of_real_agents_pair_by_pair``). Every real-agents and
    Fuxi round records the machine's busy cores and how many of them were
    not the benchmark's (``machine_per_round``: other sessions, kernel
    threads): a round with them is not a quiet one; the ratio over the pairs
    where neither round had 0.25 such cores is
    ``fuxi.percent_of_real_agents_quiet_pairs``.
``big_master`` (``--big-master``)
    A master (a subprocess, its core fed directly as in
    ``bench/state_under_load.py``) holding A agents and T running tasks: its
    RSS, how long ``GET /state`` takes, and the longest answer to a cheap call
    while readers poll ``/state`` (the loop stall).
``isolation`` (``--only isolation``)
    The real-agents measurement on two clusters side by side, rounds
    interleaved: agents with ``--isolation ISOLATION`` (the default:
    namespaces on top of cgroups) against agents with ``--isolation
    BASELINE`` (``cgroups/cpu,cgroups/mem``: the same cgroups, no
    namespaces). The goal: the first keeps >= 80 % of the second's rate.
``before_after`` (``--before REF``)
    The real-agents measurement on two clusters side by side, rounds
    interleaved, with the raw spawn baseline in each round: one runs this
    tree's code, the other the code of the git ``REF`` (``git archive``d
    into the benchmark's directory): a change measured against the code it
    changes, under the same load. The load average of each round is kept.
    With ``--fresh-clusters``: a new pair of clusters each round (every
    round a cold cluster's first burst). With ``--only control``: the control-plane round of this tree and of
    REF side by side (``control_before_after``; master, simulated agents and
    frameworks each of their own tree), the raw ZeroMQ round trips in each
    round.
``run_local`` (``--only run_local``)
    ``mesoslike run --instances N --cpus 0.1 --mem 16 -- true`` against
    ``mesoslike local --agents 4`` (master and agents in one process, as a
    user starts them), each run timed from its start to its exit
    (interpreter start and imports included), raw spawn in the same round.
    With ``--before REF``: the same for this tree and for REF side by side,
    each with a ``local`` cluster of its own tree, rounds interleaved
    (``run_local_before_after``).
``run_local_processes`` (``--only run_local_processes``)
    The same ``run`` against ``mesoslike local --insecure`` (one process)
    and against a master and 4 agents each in its own process (no keys
    either), rounds interleaved: does ``local``'s one interpreter lock hold
    ``run`` back?
``big_run`` (``--big-run N``)
    ``mesoslike run --instances N --cpus 0.01 --mem 1 -- true`` on the 4-agent
    cluster: wall time and peak RSS of the ``run`` client, master and agents.

Rounds interleave each measurement with its baseline so a change in the
machine's load falls on both. CPU seconds are given per process (master,
agents, framework) so the bottleneck shows. The ``targets`` section checks
the issue's goals; the benchmark reports, it never fails on a figure.

    python bench/throughput.py --out bench/results/throughput.json
    python bench/throughput.py --quick
    python bench/throughput.py --only isolation --out bench/results/throughput-isolation.json
    python bench/throughput.py --only run_local --rounds 5 --out bench/results/throughput-run-local.json
    python bench/throughput.py --only run_local --before main --rounds 6 --out bench/results/throughput-runlocal-ab.json
    python bench/throughput.py --only run_local_processes --rounds 6 --out bench/results/throughput-run-local-processes.json
    python bench/throughput.py --only control --before main --rounds 5 --out bench/results/throughput-control-ab.json
    python bench/throughput.py --before main --task-user root --rounds 5 --out bench/results/throughput-before-after.json
    python bench/throughput.py --only real --agent-isolation cgroups/cpu,cgroups/mem --out bench/results/throughput-shared-supervisor.json
    python bench/throughput.py --before 1f1603d --before-isolation cgroups/cpu,cgroups/mem --after-isolation cgroups/cpu,cgroups/mem
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import benchlib  # noqa: E402
import slurm_peer  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
MEASURED = ["frameworks/mesoslike_frameworks/command.py", "frameworks/mesoslike_frameworks/command_cli.py",
            "mesoslike/driver/core.py", "mesoslike/driver/driver.py",
            "mesoslike/master/core.py", "mesoslike/master/runtime.py", "mesoslike/master/state.py",
            "mesoslike/agent/core.py", "mesoslike/agent/runtime.py", "mesoslike/agent/executor.py",
            "mesoslike/agent/supervisor.py", "mesoslike/agent/launcher.py", "mesoslike/agent/checkpoint.py",
            "mesoslike/agent/gc.py", "mesoslike/agent/shared_supervisor.py", "mesoslike/agent/supervisor_link.py",
            "mesoslike/agent/isolation.py", "mesoslike/agent/namespaces.py",
            "mesoslike/transport.py", "mesoslike/wire/codec.py", "mesoslike/wire/messages.py",
            "mesoslike/wire/batching.py"]


def log(text: str) -> None:
    print(f"[throughput {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ processes
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> dict[str, float]:
    """User+system CPU of ``pid`` itself and of its reaped children."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return {"self": (utime + stime) / TICKS, "children": (cutime + cstime) / TICKS}


def child_pids(pid: int) -> list[int]:
    """The processes ``pid`` started that run now (an agent's supervisor launcher)."""
    out: list[int] = []
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{thread}/children") as fh:
                out += [int(x) for x in fh.read().split()]
    except OSError:
        pass
    return out


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None: gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def descendants(pid: int, only: list[tuple[int, int | None]] | None = None) -> list[tuple[int, int | None]]:
    """Every process below ``pid`` that runs now, with its start time;
    with ``only``, just the subtrees of those of ``only`` that ``pid``
    adopted (an agent's shared supervisors, reparented to init once the
    agent has gone)."""
    found: list[tuple[int, int | None]] = []
    kept = {p for p, _ in only} if only is not None else None
    for child in child_pids(pid):
        if kept is not None and child not in kept:
            continue
        found.append((child, _start_time(child)))
        found += descendants(child)
    return found


def tree_cpu_seconds(pid: int) -> dict[str, float]:
    """:func:`cpu_seconds` of ``pid``, its ``children`` counting also what
    every running descendant used and reaped, at any depth (an agent's
    supervisor launcher forks the supervisors and reaps them; its shared
    supervisor's namespace init server clones the tasks' inits and lives
    as long as it does: their CPU and their tasks')."""
    own = cpu_seconds(pid)
    for child in child_pids(pid):
        try:
            used = tree_cpu_seconds(child)
        except OSError:   # ended meanwhile: the agent reaped it, its time is in the agent's children
            continue
        own["children"] += used["self"] + used["children"]
    return own


def peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class Processes:
    """Child processes of the bench, each in its own session, stopped at the end."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, args: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.Popen:
        out = open(self.work / f"{name}.log", "wb")
        proc = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
        out.close()
        self.procs[name] = proc
        return proc

    def mesoslike(self, name: str, *args: str, tree: Path = ROOT, env: dict[str, str] | None = None
                  ) -> subprocess.Popen:
        """``python -m mesoslike ARGS`` of the source ``tree`` (run in it: ``-m`` finds the package there
        before the installed one)."""
        return self.start(name, [sys.executable, "-m", "mesoslike", *args], cwd=tree, env=env)

    def cpu(self, names: list[str]) -> dict[str, dict[str, float]]:
        return {name: tree_cpu_seconds(self.procs[name].pid) for name in names}

    def stop(self, name: str) -> None:
        """SIGTERM (SIGKILL after 20 s), then SIGKILL to whatever it had
        started that is still there: an agent leaves its tasks running when
        it stops (``mesoslike agent``'s design: they survive an agent
        restart), so a Fuxi worker granted at a job's end, its shared
        supervisor and its init server outlived the benchmark (300 s, the
        worker's orphan timeout) and took CPU from the next one."""
        proc = self.procs.pop(name)
        if proc.poll() is None:
            started = descendants(proc.pid)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            started += [found for found in descendants(1, only=started) if found not in started]
            for pid, start_time in started:
                if _start_time(pid) == start_time:   # the same process, not a pid used again
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass

    def close(self) -> None:
        for name in reversed(list(self.procs)):
            self.stop(name)

    def tail(self, name: str, chars: int = 2000) -> str:
        return (self.work / f"{name}.log").read_text(errors="replace")[-chars:]


def get_json(url: str, timeout: float = 60.0) -> dict:
    import json
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return json.loads(answer.read())


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> object:
    """benchlib.wait for an HTTP endpoint or file that may not be up yet."""
    return benchlib.wait(predicate, timeout, what, interval=0.1, transient=(OSError,))


class Cluster:
    """A master and ``agents`` agents, each its own process."""

    def __init__(self, procs: Processes, agents: int, resources: str, agent_args: tuple[str, ...] = (),
                 prefix: str = "", tree: Path = ROOT) -> None:
        self.procs = procs
        port, self.http_port = free_port(), free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        self.http = f"http://127.0.0.1:{self.http_port}"
        self.master = f"{prefix}master"
        procs.mesoslike(self.master, "master", "--port", str(port), "--http-port", str(self.http_port),
                        "--allocation-interval", "0.2", tree=tree)
        wait_for(lambda: get_json(self.http + "/health", 2), 30, "the master")
        self.agents = [f"{prefix}agent-{i}" for i in range(agents)]
        for i, name in enumerate(self.agents):
            procs.mesoslike(name, "agent", "--master", self.address, "--resources", resources,
                            "--hostname", f"{prefix}bench-{i}", "--work-dir", str(procs.work / name), *agent_args,
                            tree=tree)
        wait_for(lambda: len(get_json(self.http + "/state", 5).get("agents", ())) == agents, 60, "the agents")

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far: master, agents (their own and their reaped
        tasks': ``agents_tasks``), and of that last, split: the running
        shared supervisors' own (``shared_supervisors``), their init
        servers' own (``init_servers``), and the rest (``inits_and_tasks``:
        what they reaped — the inits, the tasks — and any other supervisor)."""
        cpu = self.procs.cpu([self.master, *self.agents])
        supervisors = servers = 0.0
        for agent in self.agents:
            for child in child_pids(self.procs.procs[agent].pid):
                try:
                    if b"shared_supervisor.py" not in Path(f"/proc/{child}/cmdline").read_bytes():
                        continue
                    supervisors += cpu_seconds(child)["self"]
                    for grandchild in child_pids(child):
                        if Path(f"/proc/{grandchild}/cmdline").read_bytes().endswith(b"\0--serve\0"):
                            servers += cpu_seconds(grandchild)["self"]
                except OSError:   # ended meanwhile
                    continue
        tasks = sum(cpu[a]["children"] for a in self.agents)
        return {"master": cpu[self.master]["self"],
                "agents": sum(cpu[a]["self"] for a in self.agents),
                "agents_tasks": tasks, "shared_supervisors": supervisors, "init_servers": servers,
                "inits_and_tasks": tasks - supervisors - servers}

    def master_messages(self) -> dict[str, int]:
        """The master's messages received so far (its ``/metrics``): ``total``
        (``messages_received_total``) and each kind it handled on its loop
        (``message_handling_seconds_count`` by type)."""
        with urllib.request.urlopen(self.http + "/metrics", timeout=30) as answer:
            text = answer.read().decode()
        found = re.search(r"^mesoslike_messages_received_total (\S+)$", text, re.MULTILINE)
        if found is None:
            raise RuntimeError("the master's /metrics has no messages_received_total")
        kinds = {kind: int(float(count)) for kind, count in re.findall(
            r'^mesoslike_message_handling_seconds_count\{type="(\w+)"\} (\S+)$', text, re.MULTILINE)}
        return {"total": int(float(found.group(1))), **kinds}

    def peak_rss(self) -> dict[str, int]:
        return {"master": peak_rss_bytes(self.procs.procs[self.master].pid),
                "agents_max": max(peak_rss_bytes(self.procs.procs[a].pid) for a in self.agents)}


def machine_busy_seconds() -> float:
    """The machine's processors' busy seconds so far (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / TICKS


class MachineShare:
    """What the machine did over a round: its busy cores and how many of them
    were not this benchmark's (``not_ours_cores``: other sessions' processes,
    kernel threads — on a shared machine they come and go within seconds and
    take the round's CPU; a round with them is not a quiet one). Ours: the
    cluster's process trees, this process and the children it reaped (the
    Fuxi client), and ``extra`` (the Fuxi service, its AppMasters)."""

    def __init__(self, cluster: Cluster, extra: tuple[int, ...] = ()) -> None:
        self.cluster, self.extra = cluster, extra

    def _ours(self) -> float:
        own = cpu_seconds(os.getpid())
        cluster = self.cluster.cpu()
        extra = sum(sum(tree_cpu_seconds(pid).values()) for pid in self.extra)
        return cluster["master"] + cluster["agents"] + cluster["agents_tasks"] + own["self"] + own["children"] + extra

    def __enter__(self) -> "MachineShare":
        self.busy, self.ours, self.started = machine_busy_seconds(), self._ours(), time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        wall = time.perf_counter() - self.started
        busy, ours = machine_busy_seconds() - self.busy, self._ours() - self.ours
        self.result = {"wall_s": round(wall, 3), "busy_cores": round(busy / wall, 2),
                       "not_ours_cores": round(max(0.0, busy - ours) / wall, 2)}


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: round(after[key] - before[key], 3) for key in after}


def spread(values: list[float], digits: int = 1) -> dict[str, float]:
    """Median, min, max and each round, rounded to ``digits`` (CPU ms a task: 3 — a change of 0.05 ms a task is
    ~2 % of a real-agents round, which one decimal hid)."""
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "rounds": [round(v, digits) for v in values]}


# ----------------------------------------------------------------- frameworks
def run_frameworks(master: str, tasks: int, frameworks: int, resources: str, command: str = "true",
                   timeout: float = 600.0, user: str = "", container: object = None,
                   staging_per_agent: int | None = None, progress_out: list | None = None) -> dict:
    """F ``CommandScheduler`` frameworks (``mesoslike run``'s) launching
    ``tasks`` in all, as ``user`` (``FrameworkInfo.user``; "": none named);
    seconds from the first launch to the last terminal update's callback,
    and this process's CPU seconds meanwhile. ``staging_per_agent``: the
    schedulers' ``max_staging_per_agent`` (None: ``CommandScheduler``'s).
    ``progress_out``: given, each scheduler's ``Progress`` is appended to it
    before the drivers start (a sampler of the round reads its counts);
    ``first_launch_at`` and ``ended_at`` are then ``time.perf_counter()``
    instants."""
    from mesoslike import Resources, SchedulerDriver
    from mesoslike_frameworks.command import CommandScheduler, framework_info

    first_launch: list[float] = []
    last_launch: list[float] = [0.0]

    class Timed(CommandScheduler):
        if staging_per_agent is not None:
            max_staging_per_agent = staging_per_agent

        def resource_offers(self, driver, offers) -> None:
            if not first_launch:
                first_launch.append(time.perf_counter())
            launched = self.progress.launched
            super().resource_offers(driver, offers)
            if self.progress.launched != launched:
                last_launch[0] = time.perf_counter()

    share = [tasks // frameworks + (i < tasks % frameworks) for i in range(frameworks)]
    schedulers = [Timed(command, Resources.parse(resources), n, f"bench{i}", container=container)  # type: ignore[arg-type]
                  for i, n in enumerate(share)]
    ended: list[float] = []

    def on_change(progress, status) -> None:
        if progress.done:
            ended.append(time.perf_counter())
    for scheduler in schedulers:
        scheduler.on_change = on_change
    if progress_out is not None:
        progress_out.extend(s.progress for s in schedulers)
    gc.collect()
    cpu0 = time.process_time()
    drivers = [SchedulerDriver(s, framework_info(s.name, "*", user), master) for s in schedulers]
    for driver in drivers:
        driver.start()
    deadline = time.monotonic() + timeout
    for scheduler in schedulers:
        if not scheduler.finished.wait(max(0.0, deadline - time.monotonic())):
            raise SystemExit(f"{scheduler.name}: {scheduler.progress.summary()} after {timeout} s")
    cpu = time.process_time() - cpu0
    for driver in drivers:
        driver.join(30)
    failed = sum(s.progress.failed for s in schedulers)
    # launch_span_s: from the first offers to the last that launched (the allocation cycles the launches
    # waited for: no round is shorter, whatever the CPU)
    return {"seconds": max(ended) - first_launch[0], "framework_cpu_s": round(cpu, 3), "failed": failed,
            "launch_span_s": round(max(0.0, last_launch[0] - first_launch[0]), 3),
            "first_launch_at": first_launch[0], "ended_at": max(ended)}


# ------------------------------------------------------------------ baselines
def spawn_directly(tasks: int, threads: int, root: Path, command: str = "true", spread: bool = True) -> float:
    """Seconds to run ``tasks`` commands with ``threads`` threads, each in a
    sandbox directory of its own with stdout/stderr files (as the agent).

    Nothing is deleted while the benchmark runs: a previous round's
    directory is moved aside (the whole work directory goes at the end).
    On ext4 without a journal (these machines) a new inode is placed after
    scanning past those freed in the last minutes, by any process: deleting
    this round's 3,000 inodes just before the next system's round made that
    round's files and directories cost it up to several times more CPU.

    With ``spread`` (the default) ``root`` is marked the top of directory
    hierarchies, as the agent marks its sandbox root, and the round's
    sandboxes go in a directory below it: ext4 gives that directory a block
    group of its own, away from the churn of the rest of ``/tmp`` — the
    baseline gets the placement the agent's sandboxes get, not a slower
    one (docs/performance.rst, "The agent's launch toward half of raw
    spawn")."""
    from mesoslike.agent.executor import SHELL, spread_children

    if root.exists():
        root.rename(root.with_name(f"{root.name}-{time.monotonic_ns()}"))
    if spread:
        root.mkdir(parents=True)
        spread_children(root)
        root = root / "round"
    counter = iter(range(tasks))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            sandbox = root / f"t{i}"
            sandbox.mkdir(parents=True)
            with open(sandbox / "stdout", "ab") as out, open(sandbox / "stderr", "ab") as err:
                subprocess.Popen([SHELL, "-c", command], cwd=sandbox, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=err, start_new_session=True).wait()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started


def status_update_frame() -> bytes:
    from mesoslike.wire import TaskState, TaskStatus, encode
    from mesoslike.wire import messages as m
    return encode(m.StatusUpdate("0d5f1c9e-framework-0001", TaskStatus(
        task_id="bench0-12345", state=TaskState.FINISHED, agent_id="7a3e-agent-0003", uuid="5b0f9a6c" * 4,
        exit_code=0, message="exited with 0")))


def zmq_echo(address_file: str) -> None:
    """The baseline's far end: a ROUTER (the transport's Server, frames not
    decoded) that sends every frame back until one says ``stop``."""
    from mesoslike.transport import Server

    server = Server("tcp://127.0.0.1:0")
    Path(address_file).write_text(server.address)
    while True:
        server.wait(1.0)
        for peer, frame in server.receive_frames():
            if frame == b"stop":
                server.close()
                return
            if peer is not None and isinstance(frame, bytes):
                server.send_frame(peer, frame)


def zmq_round_trips(procs: Processes, count: int, size: int, window: int = 100) -> dict:
    """Round trips per second of ``size``-byte frames between a DEALER (here)
    and a ROUTER (another process), ``window`` in flight. Through the
    transport's Server and Client with frames not encoded or decoded: the
    layering rule keeps zmq out of every file but mesoslike/transport.py,
    bench/ included, and their send and receive are the raw socket calls."""
    from mesoslike.transport import Client
    address_file = procs.work / "echo.address"
    address_file.unlink(missing_ok=True)
    echo = procs.start("zmq-echo", [sys.executable, __file__, "--zmq-echo", str(address_file)])
    address = str(wait_for(lambda: address_file.exists() and address_file.read_text(), 20, "the echo server"))
    client = Client(address)
    frame = b"x" * size
    cpu0 = time.process_time()
    started = time.perf_counter()
    sent = received = 0
    while received < count:
        while sent < count and sent - received < window:
            client.send_frame(frame)
            sent += 1
        client.wait(1.0)
        received += sum(1 for _ in client.receive_frames())
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    echo_cpu = cpu_seconds(echo.pid)["self"]
    client.send_frame(b"stop")
    client.close(linger=1.0)
    echo.wait(10)
    procs.procs.pop("zmq-echo")
    return {"per_s": count / elapsed, "client_cpu_s": round(cpu, 3), "echo_cpu_s": round(echo_cpu, 3)}


def measure_batching(updates: int = 20_000, batch: int = 100, rounds: int = 3) -> dict:
    """What batching per loop turn saves (issue 14 §4): µs per status
    update from encoding to decoding at the far end of a DEALER/ROUTER pair
    (the transport's Client and Server) in this process, one STATUS_UPDATE
    frame per update against one STATUS_UPDATES frame per ``batch`` updates
    (taken apart again at the far end)."""
    from mesoslike.transport import Client, Server
    from mesoslike.wire import decode, encode
    from mesoslike.wire.batching import unbatched
    from mesoslike.wire import messages as m
    from mesoslike.wire.types import TaskState, TaskStatus

    server = Server("tcp://127.0.0.1:0")
    client = Client(server.address)
    messages = [m.StatusUpdate("0d5f1c9e-framework-0001", TaskStatus(
        task_id=f"bench0-{i}", state=TaskState.FINISHED, agent_id="7a3e-agent-0003", uuid=f"{i:032x}",
        exit_code=0, message="exited with 0")) for i in range(updates)]

    def frames_in(want: int) -> list[bytes]:
        got: list[bytes] = []
        while len(got) < want:
            server.wait(1.0)
            got += [frame for _, frame in server.receive_frames() if isinstance(frame, bytes)]
        return got

    window = 20 * batch   # updates in flight, so neither side waits for the other's every frame

    def one_by_one() -> None:
        for start in range(0, updates, window):
            for message in messages[start:start + window]:
                client.send_frame(encode(message))
            for frame in frames_in(len(messages[start:start + window])):
                decode(frame)

    def batched() -> None:   # the protocol's STATUS_UPDATES (docs/wire.rst, "Batching")
        for start in range(0, updates, window):
            chunk = messages[start:start + window]
            for first in range(0, len(chunk), batch):
                client.send_frame(encode(m.StatusUpdates(chunk[first:first + batch])))
            for frame in frames_in(-(-len(chunk) // batch)):
                unbatched(decode(frame))
    results: dict[str, list[float]] = {"one_frame_per_update_us": [], "batched_us": []}
    for _ in range(rounds):
        for name, run in (("one_frame_per_update_us", one_by_one), ("batched_us", batched)):
            started = time.perf_counter()
            run()
            results[name].append((time.perf_counter() - started) / updates * 1e6)
    client.close()
    server.close()
    single, grouped = statistics.median(results["one_frame_per_update_us"]), statistics.median(results["batched_us"])
    return {"updates": updates, "batch": batch, **{k: [round(x, 2) for x in v] for k, v in results.items()},
            "saved_us_per_update": round(single - grouped, 2), "saved_fraction": round(1 - grouped / single, 3)}


# --------------------------------------------------------------- measurements
class RealAgentsRounds:
    """The real agents' rounds (N x ``true`` through the ``CommandScheduler``), one at a time (:meth:`round`),
    so that they can take turns with the Fuxi path's (:class:`FuxiRounds`); :meth:`result` sums them up."""

    def __init__(self, procs: Processes, cluster: Cluster, tasks: int,
                 slurm: "slurm_peer.SingleNodeSlurm | None" = None) -> None:
        self.procs, self.cluster, self.tasks, self.slurm = procs, cluster, tasks, slurm
        self.rates: list[float] = []
        self.baseline: list[float] = []
        self.cpus: list[dict[str, float]] = []
        self.machine: list[dict[str, float]] = []
        self.master_messages: list[dict[str, float]] = []
        self.peers: dict[str, list[float]] = ({f"slurm_{name}": [] for name in slurm_peer.CONFIGURATIONS}
                                              if slurm else {})

    def round(self, r: int) -> None:
        tasks = self.tasks
        base_s = spawn_directly(tasks, 4, self.procs.work / "spawn")
        self.baseline.append(tasks / base_s)
        if self.slurm is not None:   # in the same round as the baseline and mesoslike (--peers slurm)
            for name in slurm_peer.CONFIGURATIONS:
                self.slurm.reconfigure(name)
                self.peers[f"slurm_{name}"].append(tasks / self.slurm.run_array(tasks))
            log(f"slurm round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f} tasks/s" for k, v in self.peers.items()))
        before, frames_before = self.cluster.cpu(), self.cluster.master_messages()
        with MachineShare(self.cluster) as machine:
            result = run_frameworks(self.cluster.address, tasks, 1, "cpus:0.1;mem:16")
        cpu = cpu_delta(before, self.cluster.cpu())
        cpu["framework"] = result["framework_cpu_s"]
        self.cpus.append(cpu)
        self.machine.append(machine.result)
        self.rates.append(tasks / result["seconds"])
        # the master's messages a task (frames received: a batch of updates or acknowledgements is one): how
        # well the round's turns shared their work (a round of small batches costs every process more CPU)
        frames_after = self.cluster.master_messages()
        self.master_messages.append({kind: round((count - frames_before.get(kind, 0)) / tasks, 3)
                                     for kind, count in frames_after.items() if count > frames_before.get(kind, 0)})
        log(f"real agents round {r + 1}: {self.rates[-1]:.0f} tasks/s (spawning directly {self.baseline[-1]:.0f}/s), "
            f"cpu {cpu}, master messages a task {self.master_messages[-1]}, failed {result['failed']}, "
            f"machine {machine.result}")

    def result(self) -> dict:
        tasks, rates, baseline, cpus, peers = self.tasks, self.rates, self.baseline, self.cpus, self.peers
        ratios = [a / b for a, b in zip(rates, baseline)]
        # CPU per task of each part (the bound, once the CPUs are busy: docs/performance.rst)
        per_task = {key: spread([1000 * cpu[key] / tasks for cpu in cpus], 3) for key in cpus[0]}
        result = {"tasks": tasks, "agents": len(self.cluster.agents), "tasks_per_s": spread(rates),
                  "baseline_spawn_per_s": spread(baseline), "ratio_to_baseline": spread([100 * x for x in ratios]),
                  "cpu_s_per_round": cpus, "cpu_ms_per_task": per_task, "machine_per_round": self.machine,
                  "master_messages_per_task_per_round": self.master_messages}
        if peers:
            result["peers"] = {name: {"tasks_per_s": spread(values),
                                      "ratio_to_baseline": spread([100 * a / b for a, b in zip(values, baseline)]),
                                      "mesoslike_times": spread([a / b for a, b in zip(rates, values)])}
                               for name, values in peers.items()}
            result["peers"]["how"] = ("bench/slurm_peer.py: single-node Slurm on loopback (conf/slurm/slurm.conf.in), "
                                      "one job array of N x true, each task's stdout/stderr in its own files; "
                                      "mesoslike_times = mesoslike's rate / the peer's, round by round")
        return result


def one_round(cluster: Cluster, tasks: int, user: str = "") -> tuple[float, dict[str, float], int]:
    """One framework's ``tasks`` on ``cluster`` (as ``user``): tasks/s, CPU seconds of each part, tasks failed."""
    before = cluster.cpu()
    result = run_frameworks(cluster.address, tasks, 1, "cpus:0.1;mem:16", user=user)
    cpu = cpu_delta(before, cluster.cpu())
    cpu["framework"] = result["framework_cpu_s"]
    return tasks / result["seconds"], cpu, result["failed"]


def measure_isolation(procs: Processes, tasks: int, rounds: int, isolation: str, baseline: str) -> dict:
    """Launch rates of agents with ``isolation`` against agents with
    ``baseline``, each on a cluster of its own, rounds interleaved."""
    clusters = {"isolated": Cluster(procs, 4, "cpus:64;mem:65536", ("--isolation", isolation), "iso-"),
                "baseline": Cluster(procs, 4, "cpus:64;mem:65536", ("--isolation", baseline), "base-")}
    rates: dict[str, list[float]] = {name: [] for name in clusters}
    cpus: dict[str, list[dict]] = {name: [] for name in clusters}
    loads: list[list[float]] = []
    for r in range(rounds):
        for name in (("isolated", "baseline") if r % 2 == 0 else ("baseline", "isolated")):
            rate, cpu, failed = one_round(clusters[name], tasks)
            cpus[name].append(cpu)
            rates[name].append(rate)
            log(f"isolation round {r + 1} {name}: {rate:.0f} tasks/s, cpu {cpu}, failed {failed}")
        loads.append([round(x, 2) for x in os.getloadavg()])
    ratios = [100 * a / b for a, b in zip(rates["isolated"], rates["baseline"])]
    agents_isolation = {name: _agent_isolation(cluster) for name, cluster in clusters.items()}
    for cluster in clusters.values():
        for name in [*cluster.agents, cluster.master]:
            procs.stop(name)
    return {"tasks": tasks, "agents": 4, "isolation": isolation, "baseline": baseline,
            "agents_isolators": agents_isolation,
            "isolated_tasks_per_s": spread(rates["isolated"]), "baseline_tasks_per_s": spread(rates["baseline"]),
            "ratio_percent": spread(ratios), "ratio_percent_per_round": [round(x, 1) for x in ratios],
            "loadavg_per_round": loads,
            "cpu_ms_per_task": {name: {key: spread([1000 * cpu[key] / tasks for cpu in cpus[name]], 3)
                                       for key in cpus[name][0]} for name in cpus}}


def source_tree(ref: str, into: Path) -> tuple[Path, str]:
    """The repository's files at ``ref`` (``git archive``: nothing of the
    repository changes), extracted into ``into``; and the commit it names."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", commit], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    assert archive.stdout is not None
    archive.stdout.close()
    if archive.wait() != 0:
        raise SystemExit(f"git archive {commit} failed")
    return into, commit


def measure_before_after(procs: Processes, tasks: int, rounds: int, ref: str, user: str = "",
                         after_isolation: str = "", before_isolation: str = "", fresh_clusters: bool = False) -> dict:
    """The real-agents measurement on two clusters side by side, rounds
    interleaved (and the raw spawn baseline in each round): one runs this
    tree's code (``after``), the other the code of ``ref`` (``before``), so
    that a change is measured against what it changes under the same load.
    ``after_isolation``: this tree's agents' ``--isolation`` (e.g. the
    isolators ``ref`` had), default theirs; ``before_isolation``: the same
    for ``ref``'s agents (both the same: a change of the launch path
    measured like for like under isolators other than the default).
    ``fresh_clusters``: a new pair of clusters for each round (the last
    stopped), started together: every round a cold cluster's first, the
    tree that goes first alternating as in every round (the idle spell
    before a round the same for both trees over a pair of rounds). Else
    one pair for all the rounds."""
    tree, commit = before_tree(procs, ref)
    # each tree's tasks below a cgroups root of its own: what one tree's agents set on the tasks' parent
    # cgroup (its CPU weight) is not the other's
    after_args = ("--cgroups-root", "mesoslike-after", *(("--isolation", after_isolation) if after_isolation else ()))
    before_args = ("--cgroups-root", "mesoslike-before",
                   *(("--isolation", before_isolation) if before_isolation else ()))

    def start_pair(r: int) -> dict[str, Cluster]:   # work directories of their own: nothing of an earlier pair's
        suffix = f"{r + 1}-" if fresh_clusters else "-"
        return {"after": Cluster(procs, 4, "cpus:64;mem:65536", after_args, prefix=f"after{suffix}"),
                "before": Cluster(procs, 4, "cpus:64;mem:65536", before_args, prefix=f"before{suffix}", tree=tree)}

    def stop_pair(pair: dict[str, Cluster]) -> None:
        for cluster in pair.values():
            for name in [*cluster.agents, cluster.master]:
                procs.stop(name)

    clusters = start_pair(0)
    measured: set[tuple[str, int]] = set()

    def measure(name: str, r: int) -> tuple[float, dict, str]:
        nonlocal clusters
        if fresh_clusters and r > 0 and not any(round_ == r for _, round_ in measured):
            stop_pair(clusters)   # the round's first: a new pair, both started together
            clusters = start_pair(r)
        measured.add((name, r))
        rate, cpu, failed = one_round(clusters[name], tasks, user)
        return rate, cpu, f", failed {failed}"

    summary, _ = interleaved_before_after(procs, tasks, rounds, measure, "before/after")
    stop_pair(clusters)
    return {"tasks": tasks, "agents": 4, "task_user": user, "before": {"ref": ref, "commit": commit},
            "after_isolation": after_isolation or "(the agents' default)",
            "before_isolation": before_isolation or "(the agents' default)", "fresh_clusters": fresh_clusters,
            **summary}


def before_tree(procs: Processes, ref: str) -> tuple[Path, str]:
    """The source tree of ``ref`` and its commit: a directory already made
    (e.g. by git archive) as it is (no commit known), else the git
    revision archived into the benchmark's directory."""
    if Path(ref).is_dir():
        return Path(ref).resolve(), ""
    return source_tree(ref, procs.work / "before-tree")


def interleaved_before_after(procs: Processes, tasks: int, rounds: int,
                             measure: Callable[[str, int], tuple[float, dict, str]],
                             what: str, baseline: Callable[[], float] | None = None,
                             baseline_name: str = "spawn") -> tuple[dict, dict[str, list[dict]]]:
    """Rounds of ``measure(name, round)`` (its rate, CPU seconds by process
    and a note for the log) for ``after`` and ``before`` in turn,
    alternating which goes first, each round after the raw spawn baseline
    of ``tasks`` commands (or ``baseline()``, a rate, named
    ``baseline_name``); the rates, their ratios, the load averages and
    the CPU a task as the result document has them, and the CPU by round."""
    rates: dict[str, list[float]] = {"after": [], "before": []}
    cpus: dict[str, list[dict]] = {"after": [], "before": []}
    baselines: list[float] = []
    loads: list[list[float]] = []
    for r in range(rounds):
        loads.append([round(x, 2) for x in os.getloadavg()])
        baselines.append(baseline() if baseline is not None else tasks / spawn_directly(tasks, 4, procs.work / "spawn"))
        for name in (("after", "before") if r % 2 == 0 else ("before", "after")):
            rate, cpu, note = measure(name, r)
            rates[name].append(rate)
            cpus[name].append(cpu)
            log(f"{what} round {r + 1} {name}: {rate:.0f} tasks/s ({baseline_name.replace('_', ' ')} "
                f"{baselines[-1]:.0f}/s, load {loads[-1]}), cpu {cpu}{note}")
    summary = {
        "after_tasks_per_s": spread(rates["after"]), "before_tasks_per_s": spread(rates["before"]),
        f"baseline_{baseline_name}_per_s": spread(baselines),
        "after_to_before_percent": spread([100 * a / b for a, b in zip(rates["after"], rates["before"])]),
        "after_to_baseline_percent": spread([100 * a / b for a, b in zip(rates["after"], baselines)]),
        "before_to_baseline_percent": spread([100 * a / b for a, b in zip(rates["before"], baselines)]),
        "loadavg_per_round": loads,
        "cpu_ms_per_task": {name: {key: spread([1000 * cpu[key] / tasks for cpu in cpus[name]], 3)
                                   for key in cpus[name][0]} for name in cpus},
        # the whole cluster's CPU a task (every process but the bench's own), after - before, pair by pair: the
        # rate of a pair moves with the machine by more than a change of a few per cent does, its CPU less
        "cpu_ms_per_task_after_minus_before": _paired_cpu(cpus, tasks),
        "cpu_s_per_round": cpus}
    return summary, cpus


#: CPU figures that are sums of others in the same record (the real agents' ``agents_tasks``: the shared
#: supervisors', the init servers' and the inits' and tasks'), left out of a total
_SUMS = frozenset({"agents_tasks"})


def _paired_cpu(cpus: dict[str, list[dict]], tasks: int) -> dict:
    def total(cpu: dict) -> float:
        return sum(value for key, value in cpu.items() if key not in _SUMS)
    differences = [1000 * (total(after) - total(before)) / tasks for after, before in zip(cpus["after"], cpus["before"])]
    return {**spread(differences, 3), "lower_in": sum(1 for d in differences if d < 0), "pairs": len(differences)}


def _agent_isolation(cluster: Cluster) -> list[str]:
    """The isolators the cluster's first agent says it gives (its /state)."""
    agent = get_json(cluster.http + "/state", 10)["agents"][0]
    return get_json(agent["http_address"] + "/state", 10)["isolation"]["isolators"]


def control_round(procs: Processes, tasks: int, agents: int, frameworks: int, tree: Path = ROOT,
                  prefix: str = "cp-", framework_child: bool = False,
                  staging: int | None = None) -> tuple[float, dict[str, float], int, dict[str, int], float]:
    """One control-plane round of ``tree``'s code: a master and ``agents``
    simulated agents (``tests/stress_helpers.py agents``) started for it, F
    frameworks launching ``tasks`` (in this process, or with
    ``framework_child`` in a child process of ``tree``'s code); tasks/s, the
    CPU seconds of master, agents and framework meanwhile, the master's
    peak RSS, its counts of update retries (:func:`update_retries`) and
    the seconds from the first offers to the last launch.
    ``staging``: the frameworks' launches not yet started an agent (None:
    ``CommandScheduler.max_staging_per_agent``)."""
    port, http = free_port(), free_port()
    address = f"tcp://127.0.0.1:{port}"
    master, sim = f"{prefix}master", f"{prefix}agents"
    procs.mesoslike(master, "master", "--port", str(port), "--http-port", str(http), "--allocation-interval", "0.2",
                    tree=tree)
    wait_for(lambda: get_json(f"http://127.0.0.1:{http}/health", 2), 30, "the master")
    procs.start(sim, [sys.executable, str(tree / "tests" / "stress_helpers.py"), "agents", "--master", address,
                      "--count", str(agents), "--resources", "cpus:1000;mem:1000000"], cwd=tree)
    wait_for(lambda: len(get_json(f"http://127.0.0.1:{http}/state", 5)["agents"]) == agents, 60,
             "the simulated agents")
    before = procs.cpu([master, sim])
    if framework_child:
        import json
        child = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--control-framework-child",
                                f"{tree},{address},{tasks},{frameworks},{staging or 0}"], cwd=tree,
                               env=tree_environment(tree),
                               capture_output=True, text=True, timeout=1200)
        if child.returncode != 0:
            raise SystemExit(f"the control-plane framework failed: {child.stderr[-3000:]}")
        result = json.loads(child.stdout.strip().splitlines()[-1])
    else:
        result = run_frameworks(address, tasks, frameworks, "cpus:0.01;mem:1", staging_per_agent=staging)
    after = procs.cpu([master, sim])
    cpu = {"master": round(after[master]["self"] - before[master]["self"], 3),
           "agents": round(after[sim]["self"] - before[sim]["self"], 3),
           "framework": result["framework_cpu_s"]}
    master_rss = peak_rss_bytes(procs.procs[master].pid)
    retries = update_retries(f"http://127.0.0.1:{http}")
    procs.stop(sim)
    procs.stop(master)
    return tasks / result["seconds"], cpu, master_rss, retries, result["launch_span_s"]


#: the master's counters of status updates that were retries (or of tasks it no longer had), /metrics
RETRY_SAMPLES = {"settled": 'mesoslike_status_update_retries_total{outcome="settled"}',
                 "held_back": 'mesoslike_status_update_retries_total{outcome="held_back"}',
                 "reforwarded": 'mesoslike_status_update_retries_total{outcome="reforwarded"}',
                 "unknown_task": 'mesoslike_status_updates_dropped_total{reason="unknown_task"}'}


def update_retries(http: str) -> dict[str, int]:
    """The master's counts of the agents' status update retries this round
    (its /metrics: settled for the framework, held back, forwarded again,
    dropped as of a task it no longer had): each is an update decoded and
    handled, and an acknowledgement made, on top of a task's three."""
    with urllib.request.urlopen(http + "/metrics", timeout=30) as answer:
        lines = answer.read().decode().splitlines()
    values = dict(line.rsplit(" ", 1) for line in lines if line and not line.startswith("#"))
    return {name: int(float(values.get(sample, "0"))) for name, sample in RETRY_SAMPLES.items()}


def control_framework_child(spec: str) -> None:
    """``--control-framework-child TREE,ADDRESS,TASKS,FRAMEWORKS,STAGING``: the
    frameworks of one control-plane round on the code of ``TREE`` (its
    ``mesoslike`` and ``mesoslike_frameworks`` first on the path), STAGING
    their ``max_staging_per_agent`` (0: the scheduler's); one JSON line of
    :func:`run_frameworks`'s result."""
    import json
    tree, address, tasks, frameworks, staging = spec.split(",")
    sys.path[:0] = [tree, str(Path(tree) / "frameworks")]
    import mesoslike
    import mesoslike_frameworks
    for module in (mesoslike, mesoslike_frameworks):
        if not Path(module.__file__ or "").resolve().is_relative_to(Path(tree).resolve()):
            raise SystemExit(f"{module.__name__} imported from {module.__file__}, not from {tree}")
    print(json.dumps(run_frameworks(address, int(tasks), int(frameworks), "cpus:0.01;mem:1",
                                    staging_per_agent=int(staging) or None)), flush=True)


def measure_control_plane(procs: Processes, tasks: int, agents: int, frameworks: int, rounds: int,
                          staging: int | None = None) -> dict:
    rates, baseline, cpus, retried, spans = [], [], [], [], []
    frame = len(status_update_frame())
    for r in range(rounds):
        trips = zmq_round_trips(procs, 20_000, frame)
        baseline.append(trips["per_s"])
        rate, cpu, master_rss, retries, span = control_round(procs, tasks, agents, frameworks, staging=staging)
        cpus.append(cpu)
        rates.append(rate)
        retried.append(retries)
        spans.append(span)
        log(f"control plane round {r + 1}: {rates[-1]:.0f} tasks/s (zmq round trips {baseline[-1]:.0f}/s), "
            f"cpu {cpu}, master peak rss {master_rss >> 20} MiB, update retries {retries}, launches over {span} s")
    ratios = [a / b for a, b in zip(rates, baseline)]
    return {"tasks": tasks, "simulated_agents": agents, "staging_per_agent": staging, "frameworks": frameworks,
            "frame_bytes": frame, "tasks_per_s": spread(rates), "baseline_zmq_round_trips_per_s": spread(baseline),
            "ratio_to_baseline": spread([100 * x for x in ratios]), "cpu_s_per_round": cpus,
            "cpu_us_per_task": {key: spread([1e6 * cpu[key] / tasks for cpu in cpus]) for key in cpus[0]},
            "update_retries_per_round": retried, "launch_span_s_per_round": spans,
            "loadavg_start": [round(x, 2) for x in os.getloadavg()]}


def measure_control_before_after(procs: Processes, tasks: int, agents: int, frameworks: int, rounds: int,
                                 ref: str, before_agents: int | None = None, staging: int | None = None,
                                 before_staging: int | None = None) -> dict:
    """The control-plane round for this tree's code and for the code of
    git ``ref`` side by side: master, simulated agents and frameworks
    (each in a process of its own, of its tree) of each tree in turn, after
    the round's raw ZeroMQ round trips, alternating which goes first.
    ``before_agents``: ``ref``'s round with that many simulated agents
    (default ``agents``); ``staging``, ``before_staging``: the frameworks'
    ``max_staging_per_agent`` in this tree's round and in ``ref``'s
    (default ``staging``; None: the scheduler's) — e.g. the round's former
    cadence beside its present one, of the same code."""
    counts = {"after": agents, "before": agents if before_agents is None else before_agents}
    stagings = {"after": staging or None, "before": (staging if before_staging is None else before_staging) or None}
    tree, commit = before_tree(procs, ref)
    trees = {"after": ROOT, "before": tree}
    compile_bytecode(list(trees.values()))
    frame = len(status_update_frame())

    retried: dict[str, list[dict[str, int]]] = {"after": [], "before": []}
    spans: dict[str, list[float]] = {"after": [], "before": []}

    def measure(name: str, r: int) -> tuple[float, dict, str]:
        rate, cpu, master_rss, retries, span = control_round(procs, tasks, counts[name], frameworks, trees[name],
                                                             f"{name}-cp-", framework_child=True,
                                                             staging=stagings[name])
        retried[name].append(retries)
        spans[name].append(span)
        return rate, cpu, f", master peak rss {master_rss >> 20} MiB, update retries {retries}, launches over {span} s"

    summary, cpus = interleaved_before_after(
        procs, tasks, rounds, measure, "control plane before/after",
        baseline=lambda: zmq_round_trips(procs, 20_000, frame)["per_s"], baseline_name="zmq_round_trips")
    summary["cpu_us_per_task"] = {name: {key: spread([1e6 * cpu[key] / tasks for cpu in cpus[name]])
                                         for key in cpus[name][0]} for name in cpus}
    return {"tasks": tasks, "simulated_agents": agents, "before_simulated_agents": counts["before"],
            "staging_per_agent": stagings["after"], "before_staging_per_agent": stagings["before"],
            "frameworks": frameworks, "frame_bytes": frame, "before": {"ref": ref, "commit": commit}, **summary,
            "cpu_s_per_round": cpus,
            "update_retries_per_round": retried, "launch_span_s_per_round": spans,
            "how": "each round: raw ZeroMQ round trips of a STATUS_UPDATE-sized frame (window 100), then for each "
                   "tree (alternating which goes first) a fresh master, tests/stress_helpers.py agents and a child "
                   "process running the frameworks (run_frameworks), all of that tree's code; bytecode compiled "
                   "first in both trees"}


#: MB per Fuxi worker slot: a worker is a Python process, and the agents enforce memory limits
#: (cgroups, issue 15) — at 16 MB the kernel killed every worker and the job failed
FUXI_WORKER_MEM = 64


class FuxiRounds:
    """The Fuxi path's rounds: a job of N instances of ``true`` in ``slots`` slots, ``mesoslike fuxi submit
    --wait`` to ``mesoslike fuxi serve`` on the cluster, timed by the client's whole life; one at a time
    (:meth:`round`), so that they can take turns with the real agents' (:class:`RealAgentsRounds`)."""

    def __init__(self, procs: Processes, cluster: Cluster, tasks: int, slots: int) -> None:
        self.procs, self.cluster, self.tasks, self.slots = procs, cluster, tasks, slots
        port = free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        procs.mesoslike("fuxi", "fuxi", "serve", "--master", cluster.address, "--port", str(port),
                        "--work-dir", str(procs.work / "fuxi-work"))
        wait_for(lambda: any(f["name"] == "fuxi" for f in get_json(cluster.http + "/state", 5)["frameworks"]), 60,
                 "the fuxi framework")
        self.rates: list[float] = []
        self.cpus: list[dict[str, float]] = []
        self.machine: list[dict[str, float]] = []

    def round(self, r: int) -> None:
        procs, tasks, slots = self.procs, self.tasks, self.slots
        job = procs.work / f"job-{r}.toml"
        # mem: the slot holds the worker, a Python process with the transport and its keys (~30 MB since
        # issue 13), which runs the instances; 16 MB had the kernel kill every worker
        job.write_text(f'[job]\nname = "bench-{r}"\n\n[[job.units]]\nname = "work"\nslots = {slots}\n'
                       f'cpus = 0.1\nmem = {FUXI_WORKER_MEM}\ninstances = {tasks}\ncommand = "true"\n')
        before = {**self.cluster.cpu(), "fuxi": cpu_seconds(procs.procs["fuxi"].pid)["self"]}
        with MachineShare(self.cluster, (procs.procs["fuxi"].pid,)) as machine:
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "mesoslike", "fuxi", "submit", "--fuxi", self.address,
                                   "--wait", "--interval", "0.1", str(job)], cwd=ROOT, capture_output=True, text=True,
                                  timeout=1200)
            elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"fuxi job failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        cpu = cpu_delta(before, {**self.cluster.cpu(), "fuxi": cpu_seconds(procs.procs["fuxi"].pid)["self"]})
        self.cpus.append(cpu)
        self.machine.append(machine.result)
        self.rates.append(tasks / elapsed)
        log(f"fuxi round {r + 1}: {self.rates[-1]:.0f} instances/s, cpu {cpu}, machine {machine.result}")

    def result(self) -> dict:
        self.procs.stop("fuxi")
        return {"instances": self.tasks, "slots": self.slots, "instances_per_s": spread(self.rates),
                "cpu_s_per_round": self.cpus, "machine_per_round": self.machine,
                "note": "cpu: fuxi = the service; the workers are tasks (agents_tasks), the AppMaster is the "
                        "service's child (in none of them)"}


def measure_fuxi(procs: Processes, cluster: Cluster, tasks: int, slots: int, rounds: int) -> dict:
    fuxi = FuxiRounds(procs, cluster, tasks, slots)
    for r in range(rounds):
        fuxi.round(r)
    return fuxi.result()


#: a round is quiet when other sessions and kernel threads kept less than this many cores busy over it
QUIET_NOT_OURS_CORES = 0.25


def measure_real_and_fuxi(real: RealAgentsRounds, fuxi: FuxiRounds, rounds: int) -> tuple[dict, dict]:
    """The real agents' and the Fuxi path's rounds taking turns — the real agents first in even rounds, the
    Fuxi job first in odd ones — so that each meets the same stretch of the machine's load (other sessions
    come and go within seconds on a shared machine; all of one's rounds, then all of the other's, had the
    ratio swing with them) and follows the other system's round as often; the Fuxi path's percent of the
    real agents' rate is also taken round by round (``percent_of_real_agents_pair_by_pair``)."""
    order: list[str] = []
    for r in range(rounds):
        for system in (("real", "fuxi") if r % 2 == 0 else ("fuxi", "real")):
            (real if system == "real" else fuxi).round(r)
            order.append(system)
    real_result, fuxi_result = real.result(), fuxi.result()
    pairs = [100 * f / a for f, a in zip(fuxi.rates, real.rates)]
    fuxi_result["percent_of_real_agents_pair_by_pair"] = spread(pairs)
    # the pairs in which neither round met other sessions' work (the swing's cause: docs/performance.rst,
    # "Stop 19: the Fuxi path (fuxi29p)"); informative only: the issue's figure is the medians' ratio
    quiet = [pair for pair, a, b in zip(pairs, real.machine, fuxi.machine)
             if max(a["not_ours_cores"], b["not_ours_cores"]) < QUIET_NOT_OURS_CORES]
    fuxi_result["percent_of_real_agents_quiet_pairs"] = {**(spread(quiet) if quiet else {}), "pairs": len(quiet),
                                                         "not_ours_cores_below": QUIET_NOT_OURS_CORES}
    fuxi_result["round_order"] = order
    return real_result, fuxi_result


def measure_big_run(procs: Processes, cluster: Cluster, instances: int) -> dict:
    started = time.perf_counter()
    before = cluster.cpu()
    # its output to a file: read from a pipe only at the end, a run long enough to print 64 KiB of
    # progress lines (one a second) blocked on its stdout for good
    output = procs.work / "big-run.out"
    with open(output, "wb") as sink:
        child = subprocess.Popen([sys.executable, "-m", "mesoslike", "run", "--master", cluster.address,
                                  "--instances", str(instances), "--cpus", "0.01", "--mem", "1", "--", "true"],
                                 cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    out = output.read_text(errors="replace")
    result = {"instances": instances, "exit_status": os.waitstatus_to_exitcode(status), "seconds": round(elapsed, 1),
              "tasks_per_s": round(instances / elapsed, 1), "last_line": out.strip().splitlines()[-1] if out else "",
              "peak_rss_bytes": {"run": usage.ru_maxrss * 1024, **cluster.peak_rss()},
              "cpu_s": {**cpu_delta(before, cluster.cpu()), "run": round(usage.ru_utime + usage.ru_stime, 3)}}
    log(f"big run: {result}")
    return result


def measure_run_local(procs: Processes, tasks: int, rounds: int, agents: int = 4) -> dict:
    """``mesoslike run --instances N -- true`` against ``mesoslike local
    --agents 4``, as a user types them: ``local`` runs this script again as
    its COMMAND (so it inherits the cluster's address and keys), which times
    each ``run`` from its start to its exit, interpreter start included, with
    the raw spawn baseline in the same round."""
    import json
    out = procs.work / "run-local.json"
    local = procs.mesoslike("local", "local", "--agents", str(agents), "--resources", "cpus:64;mem:65536",
                            "--port", "0", "--http-port", "0", "--work-dir", str(procs.work / "local"),
                            "--", sys.executable, str(Path(__file__).resolve()), "--run-local-child",
                            f"{tasks},{rounds},{out}")
    try:
        local.wait(60 + rounds * 600)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"mesoslike local did not finish:\n{procs.tail('local')}") from None
    if local.returncode != 0 or not out.exists():
        raise SystemExit(f"mesoslike local ended with {local.returncode}:\n{procs.tail('local')}")
    result = json.loads(out.read_text())
    result["agents"] = agents
    return result


def local_cpu_seconds(local_pid: int, leave_out: int | None = None) -> dict[str, float]:
    """:func:`tree_cpu_seconds` of the local cluster ``local_pid``, without
    the subtree of ``leave_out``: the benchmark itself when it runs as
    ``local``'s COMMAND (its raw spawn baseline and the ``run`` clients it
    reaps are not the cluster's)."""
    own = cpu_seconds(local_pid)
    for child in child_pids(local_pid):
        if child == leave_out:
            continue
        try:
            used = tree_cpu_seconds(child)
        except OSError:   # ended meanwhile
            continue
        own["children"] += used["self"] + used["children"]
    return own


def time_run_on_local(local_pid: int, tasks: int, output: Path, tree: Path = ROOT,
                      env: dict[str, str] | None = None) -> tuple[float, dict[str, float]]:
    """One ``mesoslike run --instances N --cpus 0.1 --mem 16 -- true`` of
    ``tree`` (with ``env``) on the local cluster ``local_pid``: tasks a
    second from its start to its exit, and the CPU seconds meanwhile of the
    cluster's process, of its tasks and supervisors, and of the client
    (this process and its clients are left out of the cluster's)."""
    before = local_cpu_seconds(local_pid, os.getpid())
    started = time.perf_counter()
    with open(output, "wb") as sink:
        child = subprocess.Popen([sys.executable, "-m", "mesoslike", "run", "--instances", str(tasks),
                                  "--cpus", "0.1", "--mem", "16", "--", "true"],
                                 cwd=tree, env=env, stdout=sink, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    after = local_cpu_seconds(local_pid, os.getpid())
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"mesoslike run failed: {output.read_text()[-2000:]}")
    return tasks / elapsed, {"local_master_and_agents": round(after["self"] - before["self"], 3),
                             "local_tasks_and_supervisors": round(after["children"] - before["children"], 3),
                             "run_client": round(usage.ru_utime + usage.ru_stime, 3)}


def run_local_child(tasks: int, rounds: int, out: Path) -> None:
    """In ``mesoslike local``'s COMMAND: the rounds of :func:`measure_run_local`;
    after each, a one-task ``run`` (its start to its exit: the client's fixed
    part — interpreter, imports, keys, subscription, teardown)."""
    import json
    local_pid = os.getppid()   # the local cluster: master and agents in one process, tasks its children
    rates, baseline, cpus, fixed = [], [], [], []
    for r in range(rounds):
        base_s = spawn_directly(tasks, 4, out.parent / "spawn")
        baseline.append(tasks / base_s)
        rate, cpu = time_run_on_local(local_pid, tasks, out.parent / f"run-{r}.out")
        cpus.append(cpu)
        rates.append(rate)
        one, one_cpu = time_run_on_local(local_pid, 1, out.parent / f"run-one-{r}.out")
        fixed.append({"ms": round(1000 / one, 1), "client_cpu_ms": round(1000 * one_cpu["run_client"], 1)})
        log(f"run on local round {r + 1}: {rates[-1]:.0f} tasks/s (spawning directly {baseline[-1]:.0f}/s), "
            f"cpu {cpu}; a one-task run {fixed[-1]}")
    per_task = {key: spread([1000 * cpu[key] / tasks for cpu in cpus], 3) for key in cpus[0]}
    out.write_text(json.dumps({
        "tasks": tasks, "tasks_per_s": spread(rates), "baseline_spawn_per_s": spread(baseline),
        "ratio_to_baseline": spread([100 * a / b for a, b in zip(rates, baseline)]),
        "cpu_s_per_round": cpus, "cpu_ms_per_task": per_task,
        "one_task_run": {"ms": spread([f["ms"] for f in fixed]),
                         "client_cpu_ms": spread([f["client_cpu_ms"] for f in fixed])},
        "how": "mesoslike local --agents 4 --resources cpus:64;mem:65536 -- (this script), which runs "
               "`mesoslike run --instances N --cpus 0.1 --mem 16 -- true` per round, timed from its start to its "
               "exit (interpreter start, subscription, every task ended), the raw spawn baseline in the same round; "
               "then a one-task run (the client's fixed part). local's CPU leaves out this script and its clients"}))


def tree_environment(tree: Path) -> dict[str, str]:
    """This process's environment with ``tree``'s ``mesoslike`` and
    ``mesoslike_frameworks`` first on the path (before an installed or
    editable copy), so that a ``run`` of the tree is that tree's client."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(tree / "frameworks")]))


def run_local_hold(out: Path) -> None:
    """In ``mesoslike local``'s COMMAND (:func:`measure_run_local_before_after`):
    hand the cluster's address and keys (``MESOSLIKE_*`` and ``MESOS_*``,
    as ``local`` gives its COMMAND) to the benchmark, then wait for the
    cluster's end (``local`` terminates its COMMAND when it is stopped)."""
    import json
    keys = {name: value for name, value in os.environ.items() if name.startswith(("MESOSLIKE_", "MESOS_"))}
    out.with_suffix(".tmp").write_text(json.dumps(keys))
    out.with_suffix(".tmp").rename(out)
    while True:
        signal.pause()   # until local's SIGTERM ends this process


def measure_run_local_before_after(procs: Processes, tasks: int, rounds: int, ref: str, agents: int = 4) -> dict:
    """:func:`measure_run_local` for this tree and for the code of git
    ``ref`` side by side: two ``mesoslike local`` clusters, each of its
    own tree (master and agents in one process), and each round a ``run``
    client of each tree on its own cluster, in alternating order, after
    the raw spawn baseline of the round: the client, ``local`` and the
    driver changes measured against the code they change, under the same
    load."""
    import json
    tree, commit = before_tree(procs, ref)
    trees = {"after": ROOT, "before": tree}
    compile_bytecode(list(trees.values()))
    held: dict[str, dict[str, str]] = {}
    for name, side_tree in trees.items():
        keys = procs.work / f"{name}-local.json"
        procs.mesoslike(f"{name}-local", "local", "--agents", str(agents), "--resources", "cpus:64;mem:65536",
                        "--port", "0", "--http-port", "0", "--work-dir", str(procs.work / f"{name}-local"),
                        "--", sys.executable, str(Path(__file__).resolve()), "--run-local-hold", str(keys),
                        tree=side_tree, env=tree_environment(side_tree))
        wait_for(keys.exists, 120, f"the {name} local cluster")
        held[name] = {**tree_environment(side_tree), **json.loads(keys.read_text())}
    fixed: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}

    def measure(name: str, r: int) -> tuple[float, dict, str]:
        pid = procs.procs[f"{name}-local"].pid
        rate, cpu = time_run_on_local(pid, tasks, procs.work / f"{name}-run-{r}.out", trees[name], held[name])
        one, one_cpu = time_run_on_local(pid, 1, procs.work / f"{name}-run-one-{r}.out", trees[name], held[name])
        fixed[name].append((1000 / one, 1000 * one_cpu["run_client"]))
        return rate, cpu, f"; a one-task run {fixed[name][-1][0]:.0f} ms, client CPU {fixed[name][-1][1]:.0f} ms"

    summary, cpus = interleaved_before_after(procs, tasks, rounds, measure, "run on local before/after")
    for name in trees:
        procs.stop(f"{name}-local")
    one_task = {name: {"ms": spread([ms for ms, _ in fixed[name]]),
                       "client_cpu_ms": spread([cpu for _, cpu in fixed[name]])} for name in trees}
    one_task["client_cpu_after_to_before_percent"] = spread(
        [100 * a[1] / b[1] for a, b in zip(fixed["after"], fixed["before"])])
    one_task["ms_after_to_before_percent"] = spread([100 * a[0] / b[0] for a, b in zip(fixed["after"], fixed["before"])])
    return {"tasks": tasks, "agents": agents, "before": {"ref": ref, "commit": commit}, **summary,
            "one_task_run": one_task, "cpu_s_per_round": cpus,
            "how": "two mesoslike local --agents 4 --resources cpus:64;mem:65536 clusters, one of this tree and one "
                   "of the ref's, each round `mesoslike run --instances N --cpus 0.1 --mem 16 -- true` of each tree "
                   "on its own cluster (alternating which goes first), timed from its start to its exit, after the "
                   "round's raw spawn baseline, each followed by a one-task run (one_task_run: the client's fixed "
                   "part); bytecode compiled first in both trees"}


def measure_run_local_processes(procs: Processes, tasks: int, rounds: int, agents: int = 4) -> dict:
    """Whether ``local``'s one process (master and agents sharing one
    interpreter lock) is what holds ``run`` back: the same ``run`` client
    against ``mesoslike local --insecure`` and against a master and
    ``agents`` agents each in its own process (:class:`Cluster`, no keys
    either; both with ``--allocation-interval 0.2``), rounds interleaved
    after the raw spawn baseline; CPU of each cluster (its processes, then
    its supervisors and tasks) and of the client."""
    import json
    keys = procs.work / "one-process.env"
    procs.mesoslike("one-process", "local", "--insecure", "--agents", str(agents), "--resources",
                    "cpus:64;mem:65536", "--port", "0", "--http-port", "0", "--allocation-interval", "0.2",
                    "--work-dir", str(procs.work / "one-process"),
                    "--", sys.executable, str(Path(__file__).resolve()), "--run-local-hold", str(keys))
    wait_for(keys.exists, 120, "the local cluster")
    local_env = {**os.environ, **json.loads(keys.read_text())}
    cluster = Cluster(procs, agents, "cpus:64;mem:65536", prefix="processes-")
    sides = {"one_process": local_env, "processes": dict(os.environ, MESOSLIKE_MASTER=cluster.address)}
    rates: dict[str, list[float]] = {name: [] for name in sides}
    cpus: dict[str, list[dict]] = {name: [] for name in sides}
    baselines: list[float] = []
    loads: list[list[float]] = []
    for r in range(rounds):
        loads.append([round(x, 2) for x in os.getloadavg()])
        baselines.append(tasks / spawn_directly(tasks, 4, procs.work / "spawn"))
        for name in (list(sides) if r % 2 == 0 else list(reversed(sides))):
            if name == "one_process":
                rate, cpu = time_run_on_local(procs.procs["one-process"].pid, tasks, procs.work / f"{name}-{r}.out",
                                              env=sides[name])
                cpu = {"cluster": cpu["local_master_and_agents"], "supervisors_and_tasks":
                       cpu["local_tasks_and_supervisors"], "run_client": cpu["run_client"]}
            else:
                before = cluster.cpu()
                started = time.perf_counter()
                with open(procs.work / f"{name}-{r}.out", "wb") as sink:
                    child = subprocess.Popen([sys.executable, "-m", "mesoslike", "run", "--instances", str(tasks),
                                              "--cpus", "0.1", "--mem", "16", "--", "true"], cwd=ROOT,
                                             env=sides[name], stdout=sink, stderr=subprocess.STDOUT)
                    _, status, usage = os.wait4(child.pid, 0)
                rate = tasks / (time.perf_counter() - started)
                if os.waitstatus_to_exitcode(status) != 0:
                    raise SystemExit(f"mesoslike run failed: {procs.tail(name)}")
                used = cpu_delta(before, cluster.cpu())
                cpu = {"cluster": round(used["master"] + used["agents"], 3),
                       "supervisors_and_tasks": used["agents_tasks"],
                       "run_client": round(usage.ru_utime + usage.ru_stime, 3)}
            rates[name].append(rate)
            cpus[name].append(cpu)
            log(f"run on one process / processes, round {r + 1} {name}: {rate:.0f} tasks/s (spawning directly "
                f"{baselines[-1]:.0f}/s, load {loads[-1]}), cpu {cpu}")
    procs.stop("one-process")
    return {"tasks": tasks, "agents": agents,
            **{f"{name}_tasks_per_s": spread(rates[name]) for name in sides},
            "baseline_spawn_per_s": spread(baselines),
            "one_process_to_processes_percent": spread([100 * a / b for a, b in zip(rates["one_process"],
                                                                                    rates["processes"])]),
            **{f"{name}_to_baseline_percent": spread([100 * a / b for a, b in zip(rates[name], baselines)])
               for name in sides},
            "loadavg_per_round": loads,
            "cpu_ms_per_task": {name: {key: spread([1000 * cpu[key] / tasks for cpu in cpus[name]], 3)
                                       for key in cpus[name][0]} for name in sides},
            "cpu_s_per_round": cpus,
            "how": "`mesoslike run --instances N --cpus 0.1 --mem 16 -- true`, start to exit, against `mesoslike "
                   "local --insecure --agents 4` (one process) and against `mesoslike master` + 4 `mesoslike agent` "
                   "processes (no keys), both --allocation-interval 0.2 and cpus:64;mem:65536 agents, alternating "
                   "which goes first, after the round's raw spawn baseline"}


def compile_bytecode(trees: list[Path]) -> None:
    """Compile the trees' modules to bytecode, as installing a package does:
    with ``PYTHONDONTWRITEBYTECODE`` set and no cache, every ``run`` would
    compile its ~40 modules again (~0.25 s of its start), which no user's
    install pays."""
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", "mesoslike", "frameworks"], cwd=tree,
                       check=True, stdout=subprocess.DEVNULL)


# ----------------------------------------------------------------- big master
def big_master(agents: int, tasks: int, frameworks: int, readers: int, seconds: float) -> dict:
    """In a fresh process: a master holding ``agents`` agents and ``tasks``
    running tasks of ``frameworks`` frameworks, fed through its core."""
    from mesoslike.master import MasterConfig
    from mesoslike.resources import Resources
    from mesoslike.wire import AgentInfo, Filters, FrameworkInfo, TaskInfo
    from mesoslike.wire import messages as m

    def rss() -> int:
        gc.collect()
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))

    empty_rss = rss()
    from mesoslike.master.state import render_state, snapshot
    from mesoslike.metrics import master_metrics_text as metrics_text

    # the simulated agents and frameworks are never there: nothing times out while the bench runs
    quiet = dict(ping_interval=3600.0, heartbeat_interval=3600.0, task_launch_timeout=3600.0)
    runtime = benchlib.master_runtime("tcp://127.0.0.1:0", 0, MasterConfig(offer_timeout=None, **quiet))
    runtime.start()
    per_agent = -(-tasks // agents)
    try:
        started = time.perf_counter()
        with runtime._lock:
            core = runtime.core
            for a in range(agents):
                core.on_message(f"agent-{a}".encode(), m.RegisterAgent(
                    AgentInfo(f"node-{a}", Resources.parse(f"cpus:{per_agent};mem:{64 * per_agent}"))))
            for f in range(frameworks):
                core.on_message(f"fw-{f}".encode(), m.Subscribe(FrameworkInfo(f"bench-{f}")))
            launched = 0
            while launched < tasks:
                offers = [o for s in core.tick() if isinstance(s.message, m.Offers) for o in s.message.offers]
                if not offers:
                    runtime._lock.release()   # the next allocation cycle is due in up to a second
                    time.sleep(0.05)
                    runtime._lock.acquire()
                    continue
                peers = {framework_id: f"fw-{f}".encode()
                         for f, framework_id in enumerate(sorted(core.frameworks))}
                for offer in offers:
                    count = min(per_agent, tasks - launched)
                    core.on_message(peers[offer.framework_id], m.Accept(offer.framework_id, [offer.id], [
                        TaskInfo(f"task-{launched + t}", offer.agent_id, "sleep 1000",
                                 Resources.parse("cpus:1;mem:32"), name="a bench task")
                        for t in range(count)], Filters(3600)))
                    launched += count
            task_count = sum(len(r.tasks) for r in core.frameworks.values())
        setup_s = time.perf_counter() - started
        master_rss = rss()
        with runtime._lock:   # what /state costs the loop (under its lock) and what it costs outside
            sent = time.perf_counter()
            taken = snapshot(runtime.core)
            snapshot_s = time.perf_counter() - sent
        sent = time.perf_counter()
        render_state(taken)
        render_s = time.perf_counter() - sent
        with runtime._lock:   # /metrics is rendered under the lock
            sent = time.perf_counter()
            metrics_text(runtime.core)
            metrics_s = time.perf_counter() - sent
        del taken
        timings = []
        for _ in range(3):
            sent = time.perf_counter()
            size = len(urllib.request.urlopen(runtime.http_address + "/state", timeout=600).read())
            timings.append(time.perf_counter() - sent)
        probe = benchlib.probe_under_state_readers(runtime, readers, seconds, at_least_one=True)
        return {"agents": agents, "tasks": task_count, "frameworks": frameworks, "setup_s": round(setup_s, 1),
                "rss_bytes": master_rss, "rss_bytes_before_master": empty_rss,
                "state_snapshot_under_lock_s": round(snapshot_s, 3), "state_render_s": round(render_s, 3),
                "metrics_under_lock_s": round(metrics_s, 3),
                "state_bytes": size, "state_get_s": [round(t, 2) for t in timings], **probe}
    finally:
        runtime.stop()


def measure_big_master(agents: int, tasks: int, readers: int, seconds: float) -> dict:
    import json
    child = subprocess.run([sys.executable, __file__, "--big-master-child", f"{agents},{tasks},{readers},{seconds}"],
                           cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if child.returncode != 0:
        raise SystemExit(f"big master failed: {child.stderr[-3000:]}")
    result = json.loads(child.stdout.strip().splitlines()[-1])
    log(f"big master: {result}")
    return result


# -------------------------------------------------------------------- targets
def targets(doc: dict) -> list[dict]:
    out = []

    def target(name: str, measured: float | None, goal: float, unit: str, higher: bool = True) -> None:
        met = None if measured is None else (measured >= goal if higher else measured <= goal)
        out.append({"target": name, "measured": measured, "goal": goal, "unit": unit, "met": met})
    real = doc.get("real_agents")
    control = doc.get("control_plane")
    fuxi = doc.get("fuxi")
    big = doc.get("big_master")
    if real:
        target("real agents >= 50% of spawning directly", real["ratio_to_baseline"]["median"], 50, "%")
    if control:
        target("control plane >= 5,000 tasks/s through one master", control["tasks_per_s"]["median"], 5000,
               "tasks/s")
        target("control plane >= 20% of raw zmq round trips", control["ratio_to_baseline"]["median"], 20, "%")
    control_ab = doc.get("control_before_after")
    if control_ab:
        target("control plane >= 20% of raw zmq round trips (this tree, beside the ref)",
               control_ab["after_to_baseline_percent"]["median"], 20, "%")
    if fuxi and real:
        target("fuxi >= 90% of the real-agents rate",
               round(100 * fuxi["instances_per_s"]["median"] / real["tasks_per_s"]["median"], 1), 90, "%")
    run_local = doc.get("run_local")
    if run_local:
        target("mesoslike run of N tasks on mesoslike local >= 33% of spawning directly",
               run_local["ratio_to_baseline"]["median"], 33, "%")
    isolation = doc.get("isolation")
    if isolation:
        target("default isolation (namespaces) >= 80% of the launch rate without", isolation["ratio_percent"]["median"],
               80, "%")
    if big:
        target(f"master RSS with {big['agents']} agents and {big['tasks']} tasks <= 1 GB",
               round(big["rss_bytes"] / 2**20), 1024, "MiB", higher=False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=1000, help="real agents: tasks per round")
    parser.add_argument("--control-tasks", type=int, default=20000, help="control plane: tasks per round")
    parser.add_argument("--sim-agents", type=int, default=10, help="control plane: simulated agents")
    parser.add_argument("--control-staging", type=int, default=2000,
                        help="control plane: the frameworks' max_staging_per_agent (default 2,000; 0: "
                             "CommandScheduler's 500). A scheduler stages at most that many tasks an agent and the "
                             "rest of an offer comes back at the next allocation cycle (0.2 s here), so N agents "
                             "cap a round at N x STAGING / 0.2 tasks/s whatever the CPU: 500 on 10 agents, the "
                             "round to stop 13, held it at 25,000, under 20%% of a quiet machine's round trips; "
                             "the simulated agents start a task at once")
    parser.add_argument("--before-sim-agents", type=int, default=None,
                        help="control plane with --before: REF's round with this many simulated agents "
                             "(default --sim-agents)")
    parser.add_argument("--before-control-staging", type=int, default=None,
                        help="control plane with --before: REF's frameworks' max_staging_per_agent "
                             "(default --control-staging; 0: CommandScheduler's)")
    parser.add_argument("--frameworks", type=int, default=1, help="control plane: frameworks")
    parser.add_argument("--fuxi-instances", type=int, default=1000)
    parser.add_argument("--fuxi-slots", type=int, default=16)
    parser.add_argument("--big-master", default="20000,200000", metavar="AGENTS,TASKS",
                        help="'none' to skip")
    parser.add_argument("--big-run", type=int, default=0, metavar="N", help="also run a job of N instances")
    parser.add_argument("--only", default="",
                        help="which measurements, comma-separated (default real,control,fuxi,batching,big; also: "
                             "isolation, before_after, run_local, run_local_processes)")
    parser.add_argument("--isolation", default="auto", help="isolation: the agents' --isolation measured")
    parser.add_argument("--isolation-baseline", default="cgroups/cpu,cgroups/mem",
                        help="isolation: the agents' --isolation it is compared with")
    parser.add_argument("--peers", default="", help="'slurm': also measure a single-node Slurm (Debian slurm-wlm, "
                        "munge) in the real-agents rounds (bench/slurm_peer.py)")
    parser.add_argument("--before", metavar="REF", default="",
                        help="before_after: the real-agents rounds also on a cluster running the code of git REF "
                             "(e.g. main; or a directory holding a source tree), interleaved with this tree's "
                             "(implies --only before_after unless --only is given); with --only run_local: a "
                             "`mesoslike local` and `run` of REF beside this tree's, rounds interleaved; with --only "
                             "control: the control-plane round of REF (master, simulated agents, frameworks) beside "
                             "this tree's")
    parser.add_argument("--after-isolation", default="", metavar="ISOLATORS",
                        help="before_after: this tree's agents' --isolation (e.g. what REF's agents had; default "
                             "theirs)")
    parser.add_argument("--before-isolation", default="", metavar="ISOLATORS",
                        help="before_after: REF's agents' --isolation (default theirs)")
    parser.add_argument("--fresh-clusters", action="store_true",
                        help="before_after: a new pair of clusters each round (each round a cold cluster's first; "
                             "default: one pair for all the rounds)")
    parser.add_argument("--agent-isolation", default="", metavar="ISOLATORS",
                        help="real, fuxi: the agents' --isolation (default theirs: namespaces on top of cgroups; "
                             "cgroups/cpu,cgroups/mem: the tasks the shared supervisor runs)")
    parser.add_argument("--task-user", default="", metavar="USER",
                        help="before_after: the frameworks' FrameworkInfo.user (as 'mesoslike run' on a secured "
                             "cluster names its user; default: none, the agents' own)")
    parser.add_argument("--no-settle", action="store_true",
                        help="start at once, even within a minute of another benchmark's removal of its work "
                             "directory (by default this run waits for those freed inodes to age: on ext4 without "
                             "a journal a new inode is placed after scanning past them)")
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--zmq-echo", help=argparse.SUPPRESS)
    parser.add_argument("--big-master-child", help=argparse.SUPPRESS)
    parser.add_argument("--run-local-child", help=argparse.SUPPRESS)
    parser.add_argument("--run-local-hold", help=argparse.SUPPRESS)
    parser.add_argument("--control-framework-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.control_framework_child:
        return control_framework_child(args.control_framework_child)
    if args.zmq_echo:
        return zmq_echo(args.zmq_echo)
    if args.run_local_hold:
        return run_local_hold(Path(args.run_local_hold))
    if args.run_local_child:
        count, times, out = args.run_local_child.split(",", 2)
        return run_local_child(int(count), int(times), Path(out))
    if args.big_master_child:
        import json
        a, t, r, s = args.big_master_child.split(",")
        print(json.dumps(big_master(int(a), int(t), 5, int(r), float(s))))
        return
    if args.quick:
        args.rounds, args.tasks, args.control_tasks, args.fuxi_instances = 1, 200, 2000, 200
        args.big_master = "2000,20000"
    only = set((args.only or ("before_after" if args.before else "real,control,fuxi,batching,big")).split(","))
    if "before_after" in only and not args.before:
        parser.error("before_after needs --before REF")
    if args.before and only & {"run_local", "control"}:
        only.discard("before_after")   # --before goes to the run_local or control measurement
    # nothing freed by the last run's clean-up still in the way of this one's inodes (remove_work_directory)
    settled_s = 0.0 if args.no_settle else benchlib.settle_after_removal(log)
    started = time.perf_counter()
    load_start = os.getloadavg()
    head, _ = benchlib.git_state(MEASURED)
    doc: dict = {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                 "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "machine": benchlib.machine_info(),
                 "code": {"git_head": head, "blob_ids": benchlib.blob_ids(MEASURED)},
                 # spawn_directly's sandboxes placed as the agent's are (the top of directory hierarchies)
                 "baseline_spawn_spread": True,
                 # seconds waited for the last benchmark's removed files to age (benchlib.settle_after_removal)
                 "settled_s": settled_s}
    work = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    procs = Processes(work)
    try:
        if "control" in only and args.before:
            doc["control_before_after"] = measure_control_before_after(procs, args.control_tasks, args.sim_agents,
                                                                       args.frameworks, args.rounds, args.before,
                                                                       args.before_sim_agents,
                                                                       args.control_staging or None,
                                                                       args.before_control_staging)
            log(f"control plane before/after: {doc['control_before_after']['after_to_before_percent']} %")
        elif "control" in only:
            doc["control_plane"] = measure_control_plane(procs, args.control_tasks, args.sim_agents, args.frameworks,
                                                         args.rounds, args.control_staging or None)
        if "before_after" in only:
            doc["before_after"] = measure_before_after(procs, args.tasks, args.rounds, args.before, args.task_user,
                                                       args.after_isolation, args.before_isolation,
                                                       args.fresh_clusters)
        if "isolation" in only:
            doc["isolation"] = measure_isolation(procs, args.tasks, args.rounds, args.isolation,
                                                 args.isolation_baseline)
        if only & {"real", "fuxi"} or args.big_run:
            cluster = Cluster(procs, 4, "cpus:64;mem:65536",
                              ("--isolation", args.agent_isolation) if args.agent_isolation else ())
            doc["agent_isolation"] = args.agent_isolation or "(the agents' default)"
            if "real" in only:
                with contextlib.ExitStack() as stack:
                    slurm = None
                    if "slurm" in args.peers.split(","):
                        # its own directory, not under the benchmark's 0700 one: munged wants its socket's
                        # directory searchable by all
                        slurm_work = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
                        stack.callback(shutil.rmtree, slurm_work, ignore_errors=True)
                        slurm = stack.enter_context(slurm_peer.SingleNodeSlurm(slurm_work))
                    real = RealAgentsRounds(procs, cluster, args.tasks, slurm)
                    if "fuxi" in only:   # the issue's ratio: the two systems' rounds take turns
                        doc["real_agents"], doc["fuxi"] = measure_real_and_fuxi(
                            real, FuxiRounds(procs, cluster, args.fuxi_instances, args.fuxi_slots), args.rounds)
                    else:
                        for r in range(args.rounds):
                            real.round(r)
                        doc["real_agents"] = real.result()
            elif "fuxi" in only:
                doc["fuxi"] = measure_fuxi(procs, cluster, args.fuxi_instances, args.fuxi_slots, args.rounds)
            if args.big_run:
                doc["big_run"] = measure_big_run(procs, cluster, args.big_run)
            doc["cluster_peak_rss_bytes"] = cluster.peak_rss()
        if "run_local" in only and args.before:
            doc["run_local_before_after"] = measure_run_local_before_after(procs, args.tasks, args.rounds,
                                                                           args.before)
            log(f"run on local, before/after: {doc['run_local_before_after']['after_to_before_percent']} %")
        elif "run_local" in only:
            compile_bytecode([ROOT])
            doc["run_local"] = measure_run_local(procs, args.tasks, args.rounds)
            log(f"run on local: {doc['run_local']['tasks_per_s']}, {doc['run_local']['ratio_to_baseline']} % of raw")
        if "run_local_processes" in only:
            compile_bytecode([ROOT])
            doc["run_local_processes"] = measure_run_local_processes(procs, args.tasks, args.rounds)
            log(f"run on local, one process / processes: "
                f"{doc['run_local_processes']['one_process_to_processes_percent']} %")
        if "batching" in only:
            doc["batching"] = measure_batching()
            log(f"batching: {doc['batching']}")
        if "big" in only and args.big_master != "none":
            agents, tasks = (int(x) for x in args.big_master.split(","))
            doc["big_master"] = measure_big_master(agents, tasks, 10, 10.0)
    except BaseException:
        for name in list(procs.procs):
            log(f"--- {name}\n{procs.tail(name)}")
        raise
    finally:
        procs.close()
        swept = benchlib.sweep_agent_cgroups(work)
        if swept:
            log(f"removed {swept} cgroups the stopped agents left")
        benchlib.remove_work_directory(work)
    doc["targets"] = targets(doc)
    _, changed = benchlib.git_state(MEASURED)
    benchlib.finish(doc, started, load_start, args.out, log, changed)


if __name__ == "__main__":
    main()
