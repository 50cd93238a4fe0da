#!/usr/bin/env python3
"""The master at scale: memory, loop turns and ``/state`` with up to 100,000
simulated agents and 1,000,000 running tasks on the real wire.

For each size (AGENTSxTASKS) this starts, as ``bench/failover.py`` does, a
real ZooKeeper server and a real ``mesoslike master --zk`` process (through
``bench/master_turns.py``, which records every loop turn), then:

* **admission**: simulated agents (``bench/simagents.py``: one TCP
  connection speaking ZeroMQ's ZMTP per agent, tens of thousands per
  process) register with ``REREGISTER_AGENT`` listing their running tasks,
  spread over ``--frameworks`` frameworks; real ``SchedulerDriver``
  frameworks subscribe with those ids, offers suppressed. Timed until every
  agent has its ``AGENT_REGISTERED`` and the registry in ZooKeeper lists
  every agent.
* **steady state** (``--steady-s``): the agents answer the master's pings at
  its default interval (``ping_interval`` 15 s) and the frameworks their
  heartbeats; nothing else happens. Measured: every loop turn's duration
  (the master's own ``LoopStats`` stall, recorded by the wrapper), the
  answer time of a *probe* — a client asking a cheap question (REVIVE of an
  unknown framework, answered with an ERROR) every 20 ms, i.e. what any peer
  waits —, the master's CPU seconds and its resident memory.
* **state readers** (``--state-s``): the same while ``--readers`` threads
  poll ``GET /state`` and as many poll the v1 operator API's ``GET_STATE``
  (``POST /api/v1``) as fast as they can.

Alone first: one ``GET /state`` and one ``GET /metrics``, timed.

Each figure comes with the machine's load average (other engineers' work
shares the 2 CPUs: wall times stretch; CPU seconds and memory do not). One
JSON document to stdout (and ``--out``); progress to stderr.

    python bench/scale_master.py --out bench/results/scale_master.json
    python bench/scale_master.py --sizes 2000x20000 --steady-s 20 --state-s 10    # quick
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))   # the ZooKeeper server helper
sys.path.insert(0, str(HERE))

from benchlib import Processes, blob_ids, git_state, log, wait  # noqa: E402
import benchlib  # noqa: E402
from failover import (AgentWorkers, Frameworks, Master, add_cluster_options, cpu_seconds,  # noqa: E402
                      parse_sizes, raise_file_limit, registry_shards, start_zookeeper, stop_on_sigterm,
                      wait_registry)

DEFAULT_SIZES = "1000x10000,3000x30000,10000x100000,30000x300000,100000x1000000"
CODE_FILES = ["mesoslike/master/core.py", "mesoslike/master/runtime.py", "mesoslike/master/state.py",
              "mesoslike/master/v1_api.py", "mesoslike/ha/registry_store.py", "mesoslike/wire/compiled.py",
              "mesoslike/transport.py", "mesoslike/allocator/hierarchical.py", "bench/scale_master.py",
              "bench/simagents.py"]
#: how often the probe asks (s)
PROBE_EVERY = 0.02


def quantiles(values: list[float]) -> dict:
    """p50/p90/p99/p99.9/max (and count) of ``values``, in seconds, rounded."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def q(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 5)
    return {"count": len(ordered), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p999": q(0.999),
            "max": round(ordered[-1], 5), "mean": round(statistics.fmean(ordered), 5)}


class Probe:
    """A client asking the master a cheap question every PROBE_EVERY s in a
    thread; the answer times are what a peer waits while the loop is busy."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.waits: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from mesoslike.transport import Client
        from mesoslike.wire import messages as m

        client = Client(self.address)
        try:
            while not self._stop.is_set():
                sent = time.monotonic()
                client.send(m.Revive("no-such-framework"))
                while not any(isinstance(message, m.Error) for _, message in client.receive()):
                    client.wait(0.005)
                    if self._stop.is_set():
                        return
                self.waits.append(time.monotonic() - sent)
                self._stop.wait(PROBE_EVERY)
        finally:
            client.close()

    def __enter__(self) -> "Probe":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)


class StateReaders:
    """``count`` threads polling ``GET /state`` and ``count`` polling the v1
    operator ``GET_STATE``, as fast as each gets its answer."""

    def __init__(self, http: str, count: int) -> None:
        self.http = http
        self.served = {"state": 0, "v1_get_state": 0}
        self.seconds: dict[str, list[float]] = {"state": [], "v1_get_state": []}
        self.errors = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._read, args=(kind,), daemon=True)
                         for kind in ("state", "v1_get_state") for _ in range(count)]

    def _read(self, kind: str) -> None:
        while not self._stop.is_set():
            if kind == "state":
                request = urllib.request.Request(self.http + "/state")
            else:
                request = urllib.request.Request(self.http + "/api/v1", data=b'{"type": "GET_STATE"}',
                                                 headers={"Content-Type": "application/json",
                                                          "Accept": "application/json"})
            sent = time.monotonic()
            try:
                with urllib.request.urlopen(request, timeout=600) as response:
                    response.read()
            except OSError:
                self.errors += 1
                self._stop.wait(0.5)
                continue
            self.seconds[kind].append(time.monotonic() - sent)
            self.served[kind] += 1

    def __enter__(self) -> "StateReaders":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(600)


def timed_get(url: str) -> tuple[float, int]:
    sent = time.monotonic()
    with urllib.request.urlopen(url, timeout=600) as response:
        size = len(response.read())
    return time.monotonic() - sent, size


def agent_stats(workers: AgentWorkers, timeout: float = 30.0) -> dict:
    """Every worker's counters now (SIGUSR1 -> one "stats" line each), summed."""
    import signal

    with workers.cond:
        before = len(workers.other)
    for proc in workers.workers:
        os.kill(proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    with workers.cond:
        while len(workers.other) < before + len(workers.workers) and time.monotonic() < deadline:
            workers.cond.wait(1.0)
        lines = workers.other[before:]
    total: dict = {"pings": 0, "registered": 0, "connected": 0, "cpu_s": 0.0}
    for line in lines:
        for key in total:
            total[key] += line.get(key, 0)
    return total


def window(master: Master, workers: AgentWorkers, seconds: float, readers: int = 0) -> dict:
    """``seconds`` of the master's life, with ``readers`` state readers of each kind."""
    agents_before = agent_stats(workers)
    cpu_before = cpu_seconds([master.proc.pid])
    load_before = os.getloadavg()
    master.forget_turns()
    started = time.monotonic()
    reader_stats = None
    with Probe(master.address) as probe:
        if readers:
            with StateReaders(f"http://127.0.0.1:{master.http_port}", readers) as state_readers:
                time.sleep(seconds)
            reader_stats = {"readers_per_kind": readers, "served": state_readers.served,
                            "errors": state_readers.errors,
                            "answer_s": {kind: quantiles(values) for kind, values in state_readers.seconds.items()}}
        else:
            time.sleep(seconds)
    elapsed = time.monotonic() - started
    turns = master.turns()
    cpu = cpu_seconds([master.proc.pid]) - cpu_before
    agents_after = agent_stats(workers)
    pings = agents_after["pings"] - agents_before["pings"]
    busy = sum(turns["turns"])
    out = {
        "seconds": round(elapsed, 1),
        "loadavg_start_end": [load_before, os.getloadavg()],
        "loop_turns_s": quantiles(turns["turns"]),
        "loop_turns_over_100ms": sum(1 for t in turns["turns"] if t > 0.1),
        "loop_busy_fraction": round(busy / max(turns["at"] - turns["since"], 1e-9), 3),
        "probe_answer_s": quantiles(probe.waits),
        "master_cpu_s": round(cpu, 2),
        "master_cpu_share": round(cpu / elapsed, 3),
        "master_rss": master.rss(),
        "pings_answered": pings,
        "pings_per_agent_per_s": round(pings / max(agents_after["registered"], 1) / elapsed, 4),
        "agents_registered": agents_after["registered"],
        "agent_processes_cpu_s": round(agents_after["cpu_s"] - agents_before["cpu_s"], 2),
    }
    if reader_stats is not None:
        out["state_readers"] = reader_stats
    return out


def one_size(agents: int, tasks: int, args: argparse.Namespace, zk, procs: Processes, workdir: Path,
             result: dict) -> dict:
    """One size's figures, filled into ``result`` as they come (a run cut
    short keeps those it has)."""
    path = f"/mesoslike-scale/a{agents}-t{tasks}-{os.getpid()}"
    zk_url = zk.url(path)
    from kazoo.client import KazooClient

    from mesoslike.ha import ZkUrl

    kazoo = KazooClient(hosts=ZkUrl.parse(zk_url).hosts)
    kazoo.start(timeout=10)
    args.mux = agents > args.mux_above
    log(f"--- {agents} agents, {tasks} tasks ({tasks // agents} per agent), {args.frameworks} frameworks"
        + ("; agents multiplexed (bench/muxwire.py)" if args.mux else ""))
    result.update({"agents": agents, "tasks": (tasks // agents) * agents, "frameworks": args.frameworks,
                   "agent_wire": "muxwire" if args.mux else "zmtp"})
    try:
        # like failover.py's options: a session timeout of 5 s, the rest the product's defaults
        args.allocation_interval = 1.0
        args.master_log_level = "warning"
        args.master_cpus = None
        master = Master(procs, f"a{agents}-master", zk_url, args, turns_file=workdir / f"a{agents}.turns")
        master.wait_serving(60)
        wait(master.is_leader, 60, "the master to lead")
        rss_empty = master.rss()
        cpu_before = cpu_seconds([master.proc.pid])
        load_before = os.getloadavg()
        started = time.monotonic()
        workers = AgentWorkers(procs, zk_url, agents, tasks, args)
        rounds = workers.wait_rounds(master.address, args.timeout)
        admitted = max(r["last_at"] for r in rounds)
        sent = min(r["sent_at"] for r in rounds)
        result["admission"] = {
            "agents_registered_s": round(admitted - sent, 2),
            "setup_s": round(sent - started, 1),
            "agents_per_s": round(agents / (admitted - sent), 1),
            "master_cpu_s": round(cpu_seconds([master.proc.pid]) - cpu_before, 2),
            "agent_retries": sum(r["retries"] for r in rounds),
            "reregister_message_bytes": sum(r["message_bytes"] for r in workers.ready),
            "loadavg_start_end": [load_before, os.getloadavg()],
        }
        result["admission"]["master_cpu_per_agent_ms"] = round(
            1000 * result["admission"]["master_cpu_s"] / agents, 3)
        log(f"admitted {agents} agents in {admitted - sent:.1f}s "
            f"(master CPU {result['admission']['master_cpu_s']} s)")
        frameworks = Frameworks(zk_url, args.frameworks)
        frameworks.wait_for("registered", master.address, 600)
        stored, size = wait_registry(kazoo, path, agents)
        shards = registry_shards(kazoo, path)
        result["registry"] = {"agents": stored, "bytes": size, "shards": shards["znodes"],
                              "largest_shard_bytes": shards["largest_bytes"], "agent_shards": shards["agent_shards"],
                              "largest_agent_shard_bytes": shards["largest_agent_shard_bytes"]}
        result["rss_empty"] = rss_empty
        result["rss_loaded"] = master.rss()
        log(f"registry: {stored} agents in {shards['znodes']} shards, {size} bytes; master RSS "
            f"{result['rss_loaded']['VmRSS'] / 2**20:.0f} MiB")
        time.sleep(args.settle_s)
        alone_state = timed_get(f"http://127.0.0.1:{master.http_port}/state")
        alone_metrics = timed_get(f"http://127.0.0.1:{master.http_port}/metrics")
        result["alone"] = {"state_get_s": round(alone_state[0], 3), "state_bytes": alone_state[1],
                           "metrics_get_s": round(alone_metrics[0], 3)}
        log(f"GET /state alone: {alone_state[0]:.2f}s, {alone_state[1]} bytes")
        result["steady"] = window(master, workers, args.steady_s)
        log("steady: turns %s; probe %s; CPU share %s" % (
            result["steady"]["loop_turns_s"], result["steady"]["probe_answer_s"],
            result["steady"]["master_cpu_share"]))
        if args.state_s > 0:
            result["state_readers"] = window(master, workers, args.state_s, readers=args.readers)
            log("with state readers: turns %s; probe %s; served %s" % (
                result["state_readers"]["loop_turns_s"], result["state_readers"]["probe_answer_s"],
                result["state_readers"]["state_readers"]["served"]))
        result["rss_end"] = master.rss()
        frameworks.stop()
    finally:
        kazoo.stop()
        kazoo.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"AGENTSxTASKS,... (default {DEFAULT_SIZES})")
    parser.add_argument("--frameworks", type=int, default=10, help="frameworks owning the tasks (default 10)")
    parser.add_argument("--steady-s", type=float, default=45.0,
                        help="the steady-state window, s (default 45: three ping intervals)")
    parser.add_argument("--state-s", type=float, default=30.0, help="the state readers' window, s (default 30)")
    parser.add_argument("--readers", type=int, default=5,
                        help="GET /state readers, and as many v1 GET_STATE readers (default 5)")
    parser.add_argument("--settle-s", type=float, default=5.0, help="wait after admission, s (default 5)")
    add_cluster_options(parser, zk_heap="2g", timeout=900.0)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--plot", type=Path, default=None,
                        help="draw the costs against agents into this PNG (needs matplotlib)")
    parser.add_argument("--plot-from", type=Path, nargs="+", default=None, metavar="RESULT.json",
                        help="only draw --plot from these results (their sizes together)")
    args = parser.parse_args(argv)
    if args.plot_from is not None:
        if args.plot is None:
            parser.error("--plot-from needs --plot")
        plot([json.loads(path.read_text()) for path in args.plot_from], args.plot)
        return 0
    sizes = parse_sizes(args.sizes)

    from zk_helpers import ZOOKEEPER_JAR, java

    if not ZOOKEEPER_JAR.exists() or java() is None:
        print("scale_master.py needs ZooKeeper and Java (Debian: apt-get install zookeeper)", file=sys.stderr)
        return 2
    raise_file_limit(2 * max(agents for agents, _ in sizes) + 4096)
    head, dirty = git_state([name for name in CODE_FILES if name.startswith("mesoslike/")])
    doc, started, load_start = benchlib.start(
        "mesoslike master at scale: memory, loop turns and /state with simulated agents on the real wire", argv,
        {"git_head": head, "git_blobs": blob_ids(CODE_FILES), "product_files_differ_from_head": dirty})
    doc["config"] = {
        "master": "one `mesoslike master --zk` process (bench/master_turns.py records its loop turns), product "
                  "defaults but --zk-session-timeout; ping_interval 15 s, heartbeat_interval 15 s",
        "zookeeper": f"one standalone server (Debian package), tickTime 200 ms, -Xmx{args.zk_heap}, on 127.0.0.1",
        "agents": "bench/simagents.py: one TCP connection speaking ZMTP 3.0 (a DEALER's protocol) per agent, "
                  f"{args.agents_per_process} per process; REREGISTER_AGENT with their running tasks",
        "agent_resources": args.agent_resources, "frameworks": args.frameworks,
        "frameworks_do": "real SchedulerDrivers in the bench process; suppress offers once subscribed",
        "steady_s": args.steady_s, "state_s": args.state_s, "readers_per_kind": args.readers,
        "probe": f"REVIVE of an unknown framework (answered ERROR) every {PROBE_EVERY} s from a client",
    }
    doc["sizes"] = {}
    stop_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="mesoslike-scale-") as scratch:
        workdir = Path(scratch)
        procs = Processes(workdir)
        zk = None
        try:
            zk = start_zookeeper(workdir / "zookeeper", args.zk_heap)
            for agents, tasks in sizes:
                doc["sizes"][f"{agents}x{tasks}"] = result = {}
                one_size(agents, tasks, args, zk, procs, workdir, result)
                procs.kill_all()
                procs.procs.clear()
        except (Exception, KeyboardInterrupt) as exc:   # (SIGTERM too: what was measured is kept)
            doc["error"] = f"{type(exc).__name__}: {exc}"
            log(f"error: {doc['error']}")
            procs.log_tails()
        finally:
            procs.kill_all()
            if zk is not None:
                zk.kill()
    benchlib.finish(doc, started, load_start, args.out, log)
    if args.plot is not None:
        plot([doc], args.plot)
    return 1 if "error" in doc else 0


def plot(docs: list[dict], path: Path) -> None:
    """Memory, admission and loop turns against agents (tasks = 10 per agent), one point per size measured."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = sorted(((size["agents"], size, doc["code"]["git_head"][:7]) for doc in docs
                     for size in doc["sizes"].values() if "steady" in size), key=lambda point: point[0])
    agents = [point[0] for point in points]
    mib = 1 << 20

    def series(*keys: str, scale: float = 1.0) -> list[float | None]:
        out: list[float | None] = []
        for _, size, _ in points:
            value = size
            for key in keys:
                value = value.get(key) if isinstance(value, dict) else None
            out.append(None if value is None else value * scale)
        return out
    figure, (memory, admission, turns) = plt.subplots(1, 3, figsize=(14, 4.2))
    memory.plot(agents, series("rss_loaded", "VmRSS", scale=1 / mib), "o-", label="loaded (admitted)")
    memory.plot(agents, series("steady", "master_rss", "VmHWM", scale=1 / mib), "s--", label="peak, steady window")
    memory.plot(agents, series("state_readers", "master_rss", "VmHWM", scale=1 / mib), "^:",
                label="peak, with 10 state readers")
    memory.axhline(4096, color="grey", linewidth=1, label="goal: 4 GB")
    memory.set(title="master RSS", xlabel="agents (10 running tasks each)", ylabel="MiB")
    admission.plot(agents, series("admission", "master_cpu_s"), "o-", label="master CPU s, all agents")
    admission.plot(agents, series("admission", "agents_registered_s"), "s--", label="wall s (shared machine)")
    admission.set(title="admitting every agent", xlabel="agents", ylabel="seconds")
    turns.plot(agents, series("steady", "loop_turns_s", "p99", scale=1000), "o-", label="p99, steady (pings)")
    turns.plot(agents, series("state_readers", "loop_turns_s", "p99", scale=1000), "^:", label="p99, with readers")
    turns.plot(agents, series("alone", "state_get_s", scale=1000), "s--", label="one GET /state, read to its end")
    turns.axhline(100, color="grey", linewidth=1, label="goal: p99 100 ms")
    turns.set(title="loop turns", xlabel="agents", ylabel="ms")
    for axes in (memory, admission, turns):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=7)
    commits = sorted({point[2] for point in points})
    figure.suptitle(f"the master against its size (bench/scale_master.py; commit {', '.join(commits)})")
    figure.tight_layout()
    figure.savefig(path, dpi=90)


if __name__ == "__main__":
    sys.exit(main())
