#!/usr/bin/env python3
"""Master failover benchmark: seconds from killing the leading master to every
agent re-registered and every framework re-subscribed with the new leader.

Modelled on Mesos's ``MasterFailover_BENCHMARK_Test`` (agents with running
tasks re-register with a new master; Mesos 1.5 re-registered 10k agents with
100k tasks in about 4 s). Here the failover is the real one of an HA cluster:

* one real ZooKeeper server (Debian's package, started like
  ``tests/zk_helpers.py`` does: a 200 ms tick, a scratch data dir, but with a
  1 GiB heap: at 10k agents every registry write is a ~1 MB document and the
  tests' 128 MiB server dies of OutOfMemoryError);
* two real ``python -m mesoslike master --zk ...`` processes: the first leads,
  the second stands by;
* simulated agents: worker processes (``bench/simagents.py``, up to
  ``--agents-per-process`` each) that speak the agent protocol for many agent
  ids, one connection per agent speaking ZeroMQ's ZMTP as a DEALER does
  (the master tells agents apart by connection). Each agent follows the leader through a
  ``mesoslike.locator`` ZooKeeper locator, (re-)registers with
  ``REREGISTER_AGENT`` listing its tasks (``RunningTask`` entries spread over
  the frameworks), retries like the real agent (4 s doubling to 10 s, jittered) until
  ``AGENT_REGISTERED`` arrives, and answers every ``PING`` with a ``PONG``.
  Agents are first admitted by the first leader the same way (an unknown
  agent re-registering with its tasks), so both masters see the same load;
* real frameworks: ``SchedulerDriver`` instances in this process with the ids
  the tasks name; they suppress offers once subscribed and time their
  ``reregistered`` callback.

One failover: wait until the registry in ZooKeeper lists every agent, then
SIGKILL the leader's process group (t = 0) and record, on the monotonic clock
shared by every process of the machine:

``detect_s``       the group's leading znode changes (a ``LeaderDetector`` in
                   this process): the dead leader's session ended. With the
                   masters' session guard (``--session-guard on``, the
                   product's default) its guard process closes it as soon as
                   the kernel has closed the dead master's pipe; without
                   (``off``), or with ``--kill-mode freeze`` (the leader and
                   its guard SIGSTOPped: a host gone), ZooKeeper expires it
                   ``--zk-session-timeout`` after it last heard from it (kazoo
                   pings every third of the timeout, so 2/3 to 1 timeout
                   after the kill).
``serving_s``      the first sign that the new leader acts: its ``GET /health``
                   says ``is_leader`` (polled every 20 ms), or its first
                   ``SUBSCRIBED`` or ``AGENT_REGISTERED`` arrives. It has read
                   the registry from ZooKeeper by then.
``agents_s``       the last simulated agent got ``AGENT_REGISTERED``.
``frameworks_s``   the last framework's ``reregistered`` callback ran.
``total_s``        max(agents_s, frameworks_s); ``total_minus_session_s`` takes
                   the session timeout off.

and the parts: ``registry_load_s`` = serving - detect, ``reregistration_s`` =
agents - serving (the figure to compare with Mesos's 4 s: Mesos's benchmark
starts its clock at the new master, not at the old one's death). Each
failover also records the agents' retries, the kernel's TCP listen-queue
overflows during it, and how often the registry was written. The killed
master is then restarted as the standby and the next failover goes the other
way. ``--compare-backlog 100`` runs every size again with the masters'
listen backlog at ZeroMQ's default of 100, as the product had it before it set
4096 (an experiment done by a wrapper in this file, not a product change).
Progress goes to stderr; one JSON document to stdout (and ``--out``). The
default run takes about 2 minutes on 2 cores.

    python bench/failover.py --out bench/results/failover.json
    python bench/failover.py --sizes 1000x10000 --failovers 1     # quick
    python bench/failover.py --sizes 10000x100000 --profile /tmp/master.prof
    python bench/failover.py --sizes 100000x1000000 --failovers 1 --pin auto --py-spy /var/tmp/spy   # the storm profiled
    python bench/failover.py ... --py-spy /var/tmp/perf --py-spy-command 'perf record -F 999 -p {pid} -o {out}'
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))            # run from a checkout without installing
sys.path.insert(0, str(ROOT / "tests"))  # the ZooKeeper server helper
sys.path.insert(0, str(HERE))           # benchlib

from benchlib import Processes, blob_ids, free_port, git_state, log, machine_info, wait  # noqa: E402,F401
from benchlib import emit as emit_result  # noqa: E402  (emit() below is the agents' line printer)

#: past this many agents, the simulated agents reach the masters multiplexed (bench/muxwire.py): a
#: master holds a file per agent connection, and a process here may open at most 20,000
MUX_ABOVE = 15000
MESOS_15_SECONDS = 4.0          # the anchor: Mesos 1.5, 10k agents with 100k tasks re-registered in ~4 s
DEFAULT_SIZES = "1000x100000,10000x100000"


# =============================================================== simulated agents
# bench/simagents.py: ZMTP-speaking simulated agents, tens of thousands per process
from simagents import AGENT_BACKOFF, AGENT_JITTER, AGENT_RESOURCES, framework_info, raise_file_limit  # noqa: E402,F401


# =============================================================== the harness
BACKLOG_WRAPPER = """
import sys
import mesoslike.transport as transport
_init = transport.Server.__init__
def init(self, address, **options):
    _init(self, address, **{**options, "backlog": %d})
transport.Server.__init__ = init
sys.argv[0] = "mesoslike"
from mesoslike.cli import main
main()
"""


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (Linux /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])   # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """User + system CPU seconds of each of a process's threads so far, by
    thread name (/proc/PID/task/*/comm; threads of one name summed): the
    master's loop ("python" or its main thread's name), ZeroMQ's I/O thread
    ("ZMQbg/IO/0"), the registry writer, kazoo's threads, HTTP."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def listen_overflows() -> int | None:
    """The kernel's count of connections dropped because a listen queue was full."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for header, values in zip(lines[::2], lines[1::2]):
        if header.startswith("TcpExt:"):
            fields = dict(zip(header.split()[1:], values.split()[1:]))
            return int(fields.get("ListenOverflows", 0))
    return None


def turn_summary(recorded: dict, killed_at: float, last_agent: float) -> dict:
    """What the new leader's turns did (bench/master_turns.py): the turns
    that admitted agents until the last agent's answer, the frames and agents
    a turn, the task records made after the answers (by a reader's gate or
    the runtime's idle turns) and when, and every turn as [ended (s from the
    kill), stall (s), frames, admitted, settled, the loop thread's CPU since the last turn ended (s)].
    ``loop_cpu_us_an_agent_admitting``: the loop's CPU in the turns that admitted agents and made no
    records, over the agents they admitted (the storm's cost an agent, whatever share of a CPU the
    loop got); ``settle_cpu_us_an_agent``: the same for turns that only made records."""
    cpu = recorded.get("cpu") or [0.0] * len(recorded["turns"])
    rows = [[round(ended - killed_at, 4), round(stall, 5), frames, admitted, settled, round(spent, 5)]
            for ended, stall, frames, admitted, settled, spent in zip(
                recorded["ended"], recorded["turns"], recorded["frames"], recorded["admitted"],
                recorded["settled"], cpu)]
    storm = [row for row in rows if row[0] <= last_agent - killed_at + 0.05]
    admitting = [row for row in storm if row[3]]
    settling = [row for row in rows if row[4]]
    pure = [row for row in admitting if not row[4]]
    only_settling = [row for row in settling if not row[3]]
    return {
        "loop_cpu_us_an_agent_admitting": round(sum(row[5] for row in pure) / max(1, sum(row[3] for row in pure))
                                                * 1e6, 1),
        "settle_cpu_us_an_agent": round(sum(row[5] for row in only_settling) /
                                        max(1, sum(row[4] for row in only_settling)) * 1e6, 1),
        "until_last_agent": len(storm),
        "admitting": len(admitting),
        "admitted_a_turn_median": statistics.median(row[3] for row in admitting) if admitting else 0,
        "frames_a_turn_median": statistics.median(row[2] for row in admitting) if admitting else 0,
        "settled_until_last_agent": sum(row[4] for row in storm),
        "settled_after": sum(row[4] for row in rows) - sum(row[4] for row in storm),
        "settling_turns": len(settling),
        "last_settled_s": settling[-1][0] if settling else None,
        "per_turn": rows,
    }


def expected_retries(per_turn: list, sent_s: float) -> int:
    """First retries the simulated agents' back-off makes (``AGENT_BACKOFF``,
    ``AGENT_JITTER``: the real agent's) for agents answered in the turns of
    ``per_turn`` (turn_summary's rows: [ended, stall, frames, admitted, ...],
    seconds from the kill) when their registrations left at ``sent_s``."""
    high = AGENT_BACKOFF[0]
    low = high * (1.0 - AGENT_JITTER)
    total = 0.0
    for row in per_turn:
        waited = row[0] - sent_s
        total += row[3] * min(max((waited - low) / max(high - low, 1e-9), 0.0), 1.0)
    return round(total)


def start_py_spy(prefix: str | None, pid: int, tag: str,
                 command: str | None = None) -> tuple[subprocess.Popen, str] | None:
    """A profiler recording the new leader from just before the kill until every agent is back: the
    storm's profile as the real master runs it. By default py-spy (its native frames too, 500 Hz, every
    thread, raw); ``command`` another (``{pid}`` and ``{out}`` filled in, e.g. ``perf record -F 999 -p
    {pid} -o {out}``: no pauses of the process, native only). Started before the kill (py-spy takes ~0.5 s
    to attach), so the standby's last idle moments are in it too."""
    if not prefix:
        return None
    out = f"{prefix}.{tag}.txt"
    argv = shlex.split(command.format(pid=pid, out=out)) if command else [
        str(Path(sys.executable).with_name("py-spy")), "record", "--native", "-r", "500", "--threads", "-f", "raw",
        "-o", out, "--pid", str(pid)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)   # attached before the kill
    return spy, out


def stop_py_spy(spy: tuple[subprocess.Popen, str]) -> str:
    """Stop the recording (SIGINT: py-spy writes its output) and return the file written."""
    proc, out = spy
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    return out


class Master:
    def __init__(self, procs: Processes, name: str, zk_url: str, args: argparse.Namespace,
                 profile: str | None = None, turns_file: Path | None = None) -> None:
        self.name = name
        mux = getattr(args, "mux", False)
        self.port, self.http_port = free_port(pair=mux), free_port()
        prefix = [sys.executable, "-m", "cProfile", "-o", profile] if profile else [sys.executable]
        #: with turns_file: every loop turn recorded (bench/master_turns.py; see turns())
        self.turns_file = turns_file
        if turns_file is not None or mux:
            assert turns_file is not None, "the mux goes with the turns wrapper"
            prefix += [str(HERE / "master_turns.py"), str(turns_file)] + (["--mux"] if mux else [])
        elif getattr(args, "master_backlog", 0):
            # an experiment, not the product: the ROUTER's listen backlog raised before it binds
            wrapper = procs.directory / "master_with_backlog.py"
            wrapper.write_text(BACKLOG_WRAPPER % args.master_backlog)
            prefix.append(str(wrapper))
        else:
            prefix += ["-m", "mesoslike"]
        self.profile = profile
        self.proc = procs.start(name, prefix + [
            "master", "--ip", "127.0.0.1", "--port", str(self.port), "--http-port", str(self.http_port),
            "--zk", zk_url, "--zk-session-timeout", str(args.zk_session_timeout),
            "--allocation-interval", str(args.allocation_interval), "--log-level", args.master_log_level,
            "--standby-registry-mirror" if getattr(args, "standby_mirror", "on") == "on" else
            "--no-standby-registry-mirror",
            # absent: the product's default (a tree from before the guard has no such flag)
            *({"on": ["--zk-session-guard"], "off": ["--no-zk-session-guard"]}.get(
                getattr(args, "session_guard", "default"), []))], cpus=args.master_cpus)
        self.address = f"tcp://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 5.0) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=timeout) as response:
                return response.read().decode()
        except OSError:
            return None

    def is_leader(self) -> bool:
        body = self.get("/health", timeout=2.0)
        return bool(body) and json.loads(body).get("is_leader", False)

    def registry_mirrored(self) -> bool:
        """A standby's copy of the registry is current (/health's registry_mirrored)."""
        body = self.get("/health", timeout=2.0)
        return bool(body) and json.loads(body).get("registry_mirrored", False)

    def metrics(self) -> dict[str, float]:
        out = {}
        for line in (self.get("/metrics", timeout=30.0) or "").splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def wait_serving(self, timeout: float) -> None:
        def serving() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"master {self.name} exited before it served")
            return self.get("/health", timeout=1.0) is not None

        wait(serving, timeout, f"master {self.name} to serve")

    def forget_turns(self) -> None:
        """Start recording loop turns afresh (a master started with turns_file)."""
        os.kill(self.proc.pid, signal.SIGUSR1)

    def turns(self, timeout: float = 60.0) -> dict:
        """The loop turns since forget_turns(): {"since", "at", "turns": [seconds...]}."""
        assert self.turns_file is not None
        self.turns_file.unlink(missing_ok=True)
        os.kill(self.proc.pid, signal.SIGUSR2)
        wait(self.turns_file.exists, timeout, f"{self.name}'s loop turns")
        return json.loads(self.turns_file.read_text())

    def rss(self) -> dict[str, int]:
        """The process's resident memory now and at its peak (bytes)."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
        return out

    def guards(self) -> list[int]:
        """The pids of this master's session guards (mesoslike.ha.session_guard: processes of their own
        session, so a signal to the master's process group does not reach them)."""
        found = []
        for entry in Path("/proc").iterdir():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
            except OSError:
                continue
            if b"mesoslike.ha.session_guard" in argv and str(self.proc.pid).encode() in argv:
                found.append(int(entry.name))
        return found

    def freeze(self, guards: list[int]) -> None:
        """SIGSTOP the process group and the guards: a host gone (the session timeout decides)."""
        for pid in guards:
            os.kill(pid, signal.SIGSTOP)
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def kill(self, guards: list[int] | None = None) -> None:
        for pid in guards or []:   # a frozen master's guards first: they must not act after it
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM (a profiled master writes its profile), then SIGKILL."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class AgentWorkers:
    """The simulated agent processes and the JSON lines they print."""

    def __init__(self, procs: Processes, zk_url: str, agents: int, tasks: int, args: argparse.Namespace) -> None:
        self.rounds: list[dict] = []
        self.ready: list[dict] = []
        self.other: list[dict] = []   # "stats" lines (SIGUSR1)
        self.cond = threading.Condition()
        self.workers = []
        per = args.agents_per_process
        tasks_per_agent = tasks // agents
        for w, first in enumerate(range(0, agents, per)):
            count = min(per, agents - first)
            proc = procs.start(f"agents-{w}", [
                sys.executable, str(HERE / "simagents.py"), "--master", zk_url, "--first", str(first),
                "--count", str(count), "--tasks-per-agent", str(tasks_per_agent),
                "--frameworks", str(args.frameworks), "--resources", args.agent_resources,
                *(["--mux", "--admission-window", str(args.admission_window)] if getattr(args, "mux", False)
                  else [])],
                stdout=subprocess.PIPE)
            self.workers.append(proc)
            threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc) -> None:
        for line in proc.stdout:
            record = json.loads(line)
            if record["event"] == "error":
                log(f"a simulated agent was answered ERROR: {record['message']}")
                continue
            with self.cond:
                {"round": self.rounds, "ready": self.ready}.get(record["event"], self.other).append(record)
                self.cond.notify_all()

    def wait_rounds(self, leader: str, timeout: float) -> list[dict]:
        """Every worker's round record for ``leader`` (one each, once all its agents registered)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                mine = [r for r in self.rounds if r["leader"] == leader]
                if len(mine) >= len(self.workers):
                    return mine
                for proc in self.workers:
                    if proc.poll() is not None:
                        raise RuntimeError(f"agent worker exited with {proc.returncode}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"agents did not all register with {leader} within {timeout:g}s "
                                       f"({len(mine)}/{len(self.workers)} workers done)")
                self.cond.wait(min(left, 1.0))


class Frameworks:
    """Real scheduler drivers with the framework ids the tasks name."""

    def __init__(self, zk_url: str, count: int) -> None:
        from mesoslike import Scheduler, SchedulerDriver

        self.events: list[tuple[float, int, str, str]] = []   # (time, framework, callback, master)
        self.cond = threading.Condition()
        frameworks = self

        class Recorder(Scheduler):
            def __init__(self, j):
                self.j = j

            def _record(self, name, master=""):
                with frameworks.cond:
                    frameworks.events.append((time.monotonic(), self.j, name, master))
                    frameworks.cond.notify_all()

            def registered(self, driver, framework_id, master_info):
                driver.suppress_offers()
                self._record("registered", master_info.address)

            def reregistered(self, driver, master_info):
                driver.suppress_offers()
                self._record("reregistered", master_info.address)

            def disconnected(self, driver):
                self._record("disconnected")

            def error(self, driver, message):
                self._record("error")

        self.drivers = [SchedulerDriver(Recorder(j), framework_info(j), zk_url, stop_timeout=5.0)
                        for j in range(count)]
        for driver in self.drivers:
            # subscribed with offers suppressed (SUBSCRIBE's suppressed_roles): at 100,000 agents a first
            # allocation to an unsuppressed framework is 100,000 offers, each rescinded at its next SUBSCRIBE
            driver.suppress_offers()
            driver.start()

    def wait_for(self, name: str, master: str, timeout: float) -> list[float]:
        """The time of each framework's ``name`` callback naming ``master``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                times = {}
                for t, j, event, address in self.events:
                    if event == name and address == master and j not in times:
                        times[j] = t
                if len(times) == len(self.drivers):
                    return sorted(times.values())
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"frameworks did not {name} with {master} in {timeout:g}s")
                self.cond.wait(min(left, 1.0))

    def count(self, name: str, since: float) -> int:
        with self.cond:
            return sum(1 for t, _, event, _ in self.events if event == name and t >= since)

    def first_times(self, name: str, since: float) -> list[float]:
        """Each framework's first ``name`` callback since ``since``, sorted."""
        with self.cond:
            times: dict[int, float] = {}
            for t, j, event, _ in self.events:
                if event == name and t >= since and j not in times:
                    times[j] = t
            return sorted(times.values())

    def stop(self) -> None:
        for driver in self.drivers:
            try:
                driver.abort()  # no TEARDOWN: nothing to kill
                driver.join(5)
            except Exception:  # noqa: BLE001
                pass


def registry_agents(client, path: str) -> tuple[int, int]:
    """(agents in the stored registry, its size in bytes over all its znodes)."""
    from mesoslike.ha.registry_store import ZooKeeperRegistry

    try:
        agents = len(ZooKeeperRegistry(client, path).load().agents)
    except Exception:  # noqa: BLE001 (not there yet)
        return 0, 0
    return agents, sum(stat.dataLength for stat in _registry_stats(client, path))


def registry_version(client, path: str) -> int | None:
    """How many znode writes the registry has had (creations + versions of
    its znodes; shards deleted meanwhile are not counted)."""
    stats = _registry_stats(client, path)
    return sum(stat.version + 1 for stat in stats) if stats else None


def registry_shards(client, path: str) -> dict:
    """The registry's znodes: how many, the largest (ZooKeeper refuses a
    znode over jute.maxbuffer, about 1 MiB) and the agents' shards."""
    node = f"{path}/registry"
    sizes = {"": client.exists(node).dataLength}
    for child in client.get_children(node):
        stat = client.exists(f"{node}/{child}")
        if stat is not None:
            sizes[child] = stat.dataLength
    agent_shards = [size for name, size in sizes.items() if name.startswith("agents.")]
    return {"znodes": len(sizes), "largest_bytes": max(sizes.values()), "agent_shards": len(agent_shards),
            "largest_agent_shard_bytes": max(agent_shards, default=0), "sizes": sizes}


def _registry_stats(client, path: str) -> list:
    node = f"{path}/registry"
    try:
        stats = [client.exists(node)]
        stats += [client.exists(f"{node}/{child}") for child in client.get_children(node)]
    except Exception:  # noqa: BLE001 (not there yet)
        return []
    return [stat for stat in stats if stat is not None]


def start_zookeeper(directory: Path, heap: str):
    """A standalone server as ``tests/zk_helpers.py`` makes one, with a bigger
    heap: ZooKeeper keeps its last 500 writes in memory (commitLogCount), and
    the first store of a 10k-agent registry writes about 1.7 MB."""
    from zk_helpers import MAIN_CLASS, ZooKeeperServer, _LIVE_PROCESSES, java, zookeeper_classpath

    server = ZooKeeperServer(directory)
    node = server.node

    def launch() -> None:
        if node.running:
            return
        command = [java(), f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   f"-Dlog4j.configuration=file:{node.directory / 'log4j.properties'}",
                   f"-Dzookeeper.log.dir={node.directory}", "-cp", zookeeper_classpath(), MAIN_CLASS,
                   str(node.config_file)]
        with open(node.console_file, "ab") as console:
            node.process = subprocess.Popen(command, cwd=node.directory, stdin=subprocess.DEVNULL, stdout=console,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        _LIVE_PROCESSES.add(node.process)
    node.launch = launch
    server.start()
    return server


def wait_registry(client, path: str, agents: int) -> tuple[int, int]:
    def stored():
        found = registry_agents(client, path)
        return found if found[0] >= agents else None
    return wait(stored, 120, "the registry in ZooKeeper to list every agent", interval=0.5)


def one_size(agents: int, tasks: int, args: argparse.Namespace, zk, procs: Processes, workdir: Path) -> dict:
    from kazoo.client import KazooClient

    from mesoslike.ha import LeaderDetector, ZkUrl

    path = f"/mesoslike-bench/a{agents}-t{tasks}-b{args.master_backlog}-m{args.standby_mirror}-{os.getpid()}"
    zk_url = zk.url(path)
    url = ZkUrl.parse(zk_url)
    args.mux = agents > args.mux_above
    log(f"--- {agents} agents, {tasks} tasks ({tasks // agents} per agent), {args.frameworks} frameworks"
        + (f"; masters with listen backlog {args.master_backlog}" if args.master_backlog else "")
        + ("; standby registry mirror off" if args.standby_mirror == "off" else "")
        + ("; agents multiplexed (bench/muxwire.py)" if args.mux else ""))
    kazoo = KazooClient(hosts=url.hosts)
    kazoo.start(timeout=10)
    result: dict = {"agents": agents, "tasks": (tasks // agents) * agents, "frameworks": args.frameworks,
                    "agent_wire": "muxwire" if args.mux else "zmtp",
                    "agent_processes": math.ceil(agents / args.agents_per_process), "failovers": []}
    try:
        masters = [Master(procs, f"a{agents}-master1", zk_url, args, turns_file=workdir / "master1.turns")]
        masters[0].wait_serving(30)
        wait(masters[0].is_leader, 30, "the first master to lead")
        profile = None
        if args.profile:
            profile = f"{args.profile}.{agents}x{tasks}" + (f".backlog{args.master_backlog}" if args.master_backlog
                                                           else "") + (".nomirror" if args.standby_mirror == "off" else "")
        masters.append(Master(procs, f"a{agents}-master2", zk_url, args, profile=profile,
                              turns_file=workdir / "master2.turns"))
        masters[1].wait_serving(30)

        started = time.monotonic()
        workers = AgentWorkers(procs, zk_url, agents, tasks, args)
        rounds = workers.wait_rounds(masters[0].address, args.timeout)
        admitted = max(r["last_at"] for r in rounds)
        result["initial_admission_s"] = admitted - min(r["sent_at"] for r in rounds)
        result["reregister_message_bytes"] = sum(r["message_bytes"] for r in workers.ready)
        log(f"{agents} agents admitted by the first leader in {result['initial_admission_s']:.2f}s "
            f"(after {admitted - started:.1f}s of setup)")
        frameworks = Frameworks(zk_url, args.frameworks)
        frameworks.wait_for("registered", masters[0].address, 600)
        stored, size = wait_registry(kazoo, path, agents)
        result["registry_bytes"] = size
        result["registry_bytes_per_agent"] = round(size / agents, 1)
        result["registry_shards"] = registry_shards(kazoo, path)
        log(f"registry stored: {stored} agents, {size} bytes")

        leader, standby = masters
        for number in range(args.failovers):
            changes: list[tuple[float, str | None]] = []
            detector = LeaderDetector(url, on_change=lambda info: changes.append(
                (time.monotonic(), info and info.get("address"))))
            detector.start()
            wait(lambda: detector.leader() is not None, 10, "the detector")
            serving: list[float] = []
            stop_polling = threading.Event()

            def poll_standby(standby=standby):
                while not serving and not stop_polling.is_set():
                    if standby.is_leader():
                        serving.append(time.monotonic())
                        return
                    time.sleep(0.02)
            poller = threading.Thread(target=poll_standby, daemon=True)
            poller.start()
            if number:
                time.sleep(1.0)  # settle
            if args.standby_mirror == "on":   # a standby that has followed a while: its copy is current
                wait(standby.registry_mirrored, args.timeout, "the standby's registry mirror")
            overflows_before = listen_overflows()
            writes_before = registry_version(kazoo, path)
            threads_before = thread_cpu_seconds(standby.proc.pid)
            cpu_before = {"new_leader": cpu_seconds([standby.proc.pid]),
                          "agent_processes": cpu_seconds([w.pid for w in workers.workers])}
            standby.forget_turns()
            spy = start_py_spy(args.py_spy, standby.proc.pid, f"{agents}x{tasks}.f{number + 1}", args.py_spy_command)
            guards = leader.guards()
            killed_at = time.monotonic()
            if args.kill_mode == "freeze":
                leader.freeze(guards)
            else:
                leader.kill()
            log(f"failover {number + 1}: {'froze' if args.kill_mode == 'freeze' else 'killed'} {leader.name} "
                f"({len(guards)} session guard(s))")
            rounds = workers.wait_rounds(standby.address, args.timeout)
            framework_times = frameworks.wait_for("reregistered", standby.address, args.timeout)
            if spy is not None:
                result.setdefault("py_spy", []).append(stop_py_spy(spy))
            stop_polling.set()
            poller.join(10)
            detector.stop()
            overflows_after = listen_overflows()
            written = registry_version(kazoo, path)
            threads_after = thread_cpu_seconds(standby.proc.pid)
            cpu_after = {"new_leader": cpu_seconds([standby.proc.pid]),
                         "agent_processes": cpu_seconds([w.pid for w in workers.workers])}
            detected = next((t for t, address in changes if address == standby.address), None)
            last_agent = max(r["last_at"] for r in rounds)
            first_agent = min(r["first_at"] for r in rounds)
            total = max(last_agent, framework_times[-1]) - killed_at
            if args.kill_mode == "freeze":
                leader.kill(guards)   # the frozen host never comes back; a fresh master does, below
            record = {
                "killed": leader.name,
                "kill_mode": args.kill_mode,
                "leader_session_guards": len(guards),
                "new_leader": standby.name,
                "detect_s": detected - killed_at if detected else None,
                "agents_detect_s": min(r["changed_at"] for r in rounds) - killed_at,
                "first_agent_s": first_agent - killed_at,
                "agents_s": last_agent - killed_at,
                "frameworks_first_s": framework_times[0] - killed_at,
                # when each driver noticed the leader change (its disconnected callback: ZooKeeper told its
                # detector, or its master fell silent for 5 heartbeats) -- before it could re-subscribe
                "frameworks_noticed_s": [round(t - killed_at, 3) for t in frameworks.first_times("disconnected",
                                                                                                  killed_at)],
                "frameworks_s": framework_times[-1] - killed_at,
                "total_s": total,
                "total_minus_session_s": total - args.zk_session_timeout,
                "agent_retries": sum(r["retries"] for r in rounds),
                "agent_errors": sum(r["errors"] for r in rounds),
                "agent_other_messages": _merge(r["other"] for r in rounds),
                "reconnect_s": max(r["sent_done_at"] - r["sent_at"] for r in rounds),
                "registry_writes": (written - writes_before if None not in (written, writes_before) else None),
                # CPU time (user + system) spent from the kill to the end of this failover: what the new
                # leader's work costs, and what the simulated agents took from the same CPUs
                "cpu_s": {key: round(cpu_after[key] - cpu_before[key], 2) for key in cpu_before},
                # the new leader's CPU by thread: its loop against ZeroMQ's I/O thread (or the mux's), kazoo, HTTP
                "new_leader_thread_cpu_s": {name: round(spent - threads_before.get(name, 0.0), 2)
                                            for name, spent in sorted(threads_after.items())
                                            if spent - threads_before.get(name, 0.0) >= 0.01},
                "tcp_listen_overflows": (overflows_after - overflows_before
                                         if overflows_before is not None and overflows_after is not None else None),
                "workers": [{"registered_after_sent_s": r["quantiles_after_sent"], "retries": r["retries"],
                             "sent_s": r["sent_at"] - killed_at} for r in rounds],
            }
            # serving: the first sign that the new leader acts -- its /health (polled; late
            # when the master is busy), its first SUBSCRIBED or its first AGENT_REGISTERED
            signs = [t for t in (serving[0] if serving else None, framework_times[0], first_agent) if t]
            serving_at = min(signs)
            record["serving_s"] = serving_at - killed_at
            record["health_says_leader_s"] = serving[0] - killed_at if serving else None
            if detected:
                record["registry_load_s"] = serving_at - detected
            record["reregistration_s"] = last_agent - serving_at
            record["resubscription_s"] = framework_times[-1] - serving_at
            # the figure both ways: from the kill (detection by the session timeout included), and from
            # the new leader serving, as Mesos's MasterFailover_BENCHMARK_Test counts
            record["from_kill_s"] = {"detected": record["detect_s"], "serving": record["serving_s"],
                                     "frameworks": record["frameworks_s"], "agents": record["agents_s"],
                                     "all": total}
            record["from_serving_s"] = {"first_agent": first_agent - serving_at,
                                        "frameworks": record["resubscription_s"],
                                        "agents": record["reregistration_s"],
                                        "all": max(last_agent, framework_times[-1]) - serving_at}
            # what the re-admission left for after it (work moved off the agents' answers, if any): the
            # new leader's CPU 3 s after the last agent
            time.sleep(max(0.0, last_agent + 3.0 - time.monotonic()))
            record["new_leader_cpu_s_3s_after_agents"] = round(
                cpu_seconds([standby.proc.pid]) - cpu_before["new_leader"], 2)
            recorded = standby.turns()
            turns = recorded["turns"]
            record["new_leader_turns"] = {"count": len(turns), "longest_s": round(max(turns, default=0.0), 4),
                                          "busy_s": round(sum(turns), 3)}
            if "frames" in recorded:
                record["new_leader_turns"].update(turn_summary(recorded, killed_at, last_agent))
                # the retries the agents' back-off makes for answers this late: an agent's first retry is
                # due uniformly within [(1 - jitter) x, 1 x] the first back-off after its registration
                # left (the earliest worker's sending taken for all); a retry is dropped unread while its
                # registration waits, or answered without decoding once it was handled
                record["agent_retries_expected"] = expected_retries(
                    record["new_leader_turns"]["per_turn"], min(r["sent_at"] for r in rounds) - killed_at)
            # the new leader's CPU by Python thread from the kill on (the loop, "MainThread", against the
            # benchmark's mux thread, "bench-mux", standing in for ZeroMQ's I/O thread)
            record["new_leader_python_thread_cpu_s"] = recorded.get("thread_cpu_s", {})
            if recorded.get("mux_stats"):   # records in and out, reads from the streams (bench/muxwire.py)
                record["new_leader_mux_stats"] = recorded["mux_stats"]
            record["new_leader_rss_bytes"] = standby.rss()
            metrics = standby.metrics()
            record["new_leader_agents"] = metrics.get("mesoslike_agents_registered")
            record["new_leader_running_tasks"] = metrics.get('mesoslike_tasks{state="TASK_RUNNING"}')
            record["new_leader_frameworks_connected"] = metrics.get("mesoslike_frameworks_connected")
            # the agents' retries at the new leader: dropped unread (their registration still waited),
            # answered as retries (recognised byte for byte), the rest decoded and handled in full
            record["new_leader_counters"] = {name: metrics.get(f"mesoslike_{name}_total") for name in (
                "messages_received", "registrations_repeated", "agent_registration_retries")}
            result["failovers"].append(record)
            log("failover %d: detect %.2fs, serving %.2fs, agents %.2fs, frameworks %.2fs, total %.2fs "
                "(%.2fs past the session timeout); re-registration %.2fs after serving; %s agents, %s tasks" % (
                    number + 1, record["detect_s"] or -1, record["serving_s"] or -1, record["agents_s"],
                    record["frameworks_s"], total, total - args.zk_session_timeout,
                    record.get("reregistration_s", -1), record["new_leader_agents"],
                    record["new_leader_running_tasks"]))
            if standby.profile:
                standby.stop()  # writes the profile; then the roles go on without it
                result["profile"] = standby.profile
                log(f"profile of the new leader written to {standby.profile}")
                break
            if number + 1 < args.failovers:
                # the killed master comes back as the standby; the new leader
                # must have stored every agent before the next failover
                replacement = Master(procs, f"{leader.name}-r{number + 1}", zk_url, args,
                                     turns_file=workdir / f"master-r{number + 1}.turns")
                replacement.wait_serving(30)
                wait_registry(kazoo, path, agents)
                leader, standby = standby, replacement
        frameworks.stop()
        for record_key in ("detect_s", "serving_s", "health_says_leader_s", "agents_s", "frameworks_s", "total_s",
                           "total_minus_session_s", "registry_load_s", "reregistration_s", "resubscription_s",
                           "agent_retries", "tcp_listen_overflows"):
            values = [f[record_key] for f in result["failovers"] if f.get(record_key) is not None]
            if values:
                result.setdefault("median", {})[record_key] = statistics.median(values)
    finally:
        kazoo.stop()
        kazoo.close()
    return result


def _merge(dicts) -> dict:
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        agents, _, tasks = item.strip().lower().partition("x")
        sizes.append((int(agents), int(tasks or 0)))
    return sizes


CODE_FILES = ["mesoslike/master/core.py", "mesoslike/master/runtime.py", "mesoslike/master/registry.py",
              "mesoslike/ha/registry_store.py", "mesoslike/ha/zookeeper.py", "mesoslike/ha/session_guard.py", "mesoslike/wire/codec.py", "mesoslike/allocator/hierarchical.py",
              "bench/failover.py"]


def code_info() -> dict:
    head, dirty = git_state([name for name in CODE_FILES if name.startswith("mesoslike/")])
    return {"git_head": head, "git_blobs": blob_ids(CODE_FILES), "product_files_differ_from_head": dirty}


def log_drivers() -> None:
    """The frameworks' drivers and their ZooKeeper detectors say what they do
    (a leader change seen, a SUBSCRIBE retried, a master fallen silent) on
    stderr, with the time: why frameworks came back when they did."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(name)s: %(message)s", "%H:%M:%S"))
    for name in ("mesoslike.driver", "mesoslike.locator", "mesoslike.ha"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        logger.propagate = False


def stop_on_sigterm() -> None:
    """SIGTERM ends the run as an error does: every process it started is killed."""
    def stop(*_: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # once: the cleanup and the JSON are not cut short
        raise KeyboardInterrupt("SIGTERM")
    signal.signal(signal.SIGTERM, stop)


def add_cluster_options(parser: argparse.ArgumentParser, zk_heap: str, timeout: float) -> None:
    """The options of a simulated cluster (ZooKeeper, masters, simulated agents) that
    this benchmark and bench/scale_master.py share."""
    parser.add_argument("--zk-heap", default=zk_heap, help=f"the ZooKeeper server's -Xmx (default {zk_heap})")
    parser.add_argument("--zk-session-timeout", type=float, default=5.0,
                        help="the masters' ZooKeeper session timeout, s (default 5)")
    parser.add_argument("--agent-resources", default=AGENT_RESOURCES, help=f"(default {AGENT_RESOURCES})")
    parser.add_argument("--agents-per-process", type=int, default=25000,
                        help="simulated agents per worker process (default 25000)")
    parser.add_argument("--timeout", type=float, default=timeout,
                        help=f"give up a phase after this long (default {timeout:g})")
    parser.add_argument("--admission-window", type=int, default=500,
                        help="multiplexed agents: at most this many registrations of a worker process unanswered "
                             "at a time while the first master admits them (a cluster brought up; a failover is "
                             "all at once; default 500)")
    parser.add_argument("--mux-above", type=int, default=MUX_ABOVE,
                        help="sizes with more agents than this multiplex them over a few streams to the masters "
                             f"(bench/muxwire.py: a process here may hold at most 20,000 files; default {MUX_ABOVE})")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "reregistration":   # real agents back after a master restart / ZooKeeper outage
        import reregistration
        return reregistration.main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"AGENTSxTASKS,... (default {DEFAULT_SIZES})")
    parser.add_argument("--frameworks", type=int, default=4, help="frameworks owning the tasks (default 4)")
    parser.add_argument("--failovers", type=int, default=3, help="failovers per size (default 3)")
    add_cluster_options(parser, zk_heap="1g", timeout=300.0)
    parser.add_argument("--allocation-interval", type=float, default=1.0, help="the masters' (default 1)")
    parser.add_argument("--profile", default=None, metavar="PREFIX",
                        help="run the standby master under cProfile and write its profile to "
                             "PREFIX.<agents>x<tasks>[.backlog<N>] (one failover per size: the profiled master is "
                             "stopped after it)")
    parser.add_argument("--master-backlog", type=int, default=0,
                        help="experiment: start the masters with their ROUTER's listen backlog (ZMQ_BACKLOG; the "
                             "product uses transport.DEFAULT_LISTEN_BACKLOG, 4096; ZeroMQ's own default is 100) "
                             "set to this (0: the product as it is)")
    parser.add_argument("--compare-backlog", type=int, default=0,
                        help="then run every size again with --master-backlog this (e.g. 100, ZeroMQ's default, "
                             "as before the product set one; default 0: don't)")
    parser.add_argument("--standby-mirror", choices=["on", "off"], default="on",
                        help="the masters' --standby-registry-mirror (on, the default: the standby keeps the "
                             "registry loaded and the new leader reads only what changed; off: it reads it all)")
    parser.add_argument("--session-guard", choices=["on", "off", "default"], default="default",
                        help="the masters' --zk-session-guard (on: a killed leader's session is closed at once by "
                             "its guard; off: ZooKeeper expires it after the session timeout; default: the "
                             "product's, which is on — and a tree from before the guard has none)")
    parser.add_argument("--kill-mode", choices=["kill", "freeze"], default="kill",
                        help="kill: SIGKILL the leader's process group (t = 0; default); freeze: SIGSTOP it and "
                             "its session guard (a host gone: the session timeout decides), then kill it once "
                             "the failover is measured")
    parser.add_argument("--compare-mirror-off", action="store_true",
                        help="run every size first with --standby-mirror off (the baseline, under \"baseline\"), "
                             "then as asked")
    parser.add_argument("--master-log-level", default="warning", choices=["debug", "info", "warning"],
                        help="the masters' --log-level (info logs every registration: slower)")
    parser.add_argument("--defer-task-records", choices=["on", "off", "default"], default="default",
                        help="the masters' AgentLifecycle.defer_task_records (the re-admitted agents' task "
                             "records made after the answers) forced on or off, an experiment's switch "
                             "(bench/master_turns.py); default: the product's")
    parser.add_argument("--py-spy", default=None, metavar="PREFIX",
                        help="record the new leader with py-spy (--native, 500 Hz, raw) from the kill until every "
                             "agent is back, into PREFIX.<agents>x<tasks>.f<N>.txt")
    parser.add_argument("--py-spy-command", default=None, metavar="COMMAND",
                        help="with --py-spy: another profiler's command line, {pid} and {out} filled in "
                             "(e.g. 'perf record -F 999 -p {pid} -o {out}'); stopped with SIGINT")
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy the processes' logs here at the end")
    parser.add_argument("--pin", choices=["auto", "off"], default="off",
                        help="auto (with 2+ CPUs): the masters run on the last CPU and everything else "
                             "(ZooKeeper, the simulated agents, the frameworks) on the others, as if the master "
                             "had a machine of its own; off (default): all share every CPU")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    sizes = parse_sizes(args.sizes)
    if args.defer_task_records != "default":   # read by bench/master_turns.py in the masters
        os.environ["BENCH_DEFER_TASK_RECORDS"] = args.defer_task_records
    args.master_cpus = None
    available = sorted(os.sched_getaffinity(0))
    if args.pin == "auto" and len(available) >= 2:
        args.master_cpus = {available[-1]}
        os.sched_setaffinity(0, set(available[:-1]))   # this process and what it starts, but the masters

    from zk_helpers import ZOOKEEPER_JAR, java

    if not ZOOKEEPER_JAR.exists() or java() is None:
        print("failover.py needs ZooKeeper and Java (Debian: apt-get install zookeeper)", file=sys.stderr)
        return 2
    # the masters hold one connection per agent (and, while agents reconnect, some more): as root the
    # hard limit is raised too; the processes started inherit it
    raise_file_limit(2 * max(agents for agents, _ in sizes) + 4096)

    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, os.getcwd()), *argv])
    doc: dict = {
        "benchmark": "mesoslike master failover: kill -9 of the leader -> every agent re-registered and every "
                     "framework re-subscribed with the new leader (Mesos MasterFailover_BENCHMARK_Test style)",
        "command": command,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(),
        "code": code_info(),
        "config": {
            "zk_session_timeout_s": args.zk_session_timeout,
            "zookeeper": f"one standalone server (Debian package), tickTime 200 ms, -Xmx{args.zk_heap}, on 127.0.0.1",
            "masters": 2,
            "master_options": {"allocation_interval": args.allocation_interval, "others": "defaults"},
            "master_backlog_experiment": args.master_backlog or None,
            "standby_registry_mirror": args.standby_mirror,
            "session_guard": args.session_guard,
            "kill_mode": args.kill_mode,
            "frameworks": args.frameworks,
            "agent_resources": args.agent_resources,
            "task_resources": "half of the agent's cpus and mem, split over its tasks",
            "agents_per_process": args.agents_per_process,
            "agent_backoff_s": list(AGENT_BACKOFF),
            "agent_backoff_jitter": AGENT_JITTER,
            "agents": "bench/simagents.py: one TCP connection speaking ZMTP 3.0 (a DEALER's protocol) per agent, "
                      "driven by one epoll loop per worker process",
            "cpu_pinning": None if args.master_cpus is None else {
                "masters": sorted(args.master_cpus), "zookeeper_agents_frameworks": sorted(os.sched_getaffinity(0))},
            "failovers_per_size": args.failovers,
            "defer_task_records": args.defer_task_records,
            "clock": "time.monotonic (CLOCK_MONOTONIC, shared by every process on the machine)",
        },
        "anchor": {"mesos_1_5_seconds": MESOS_15_SECONDS, "what": "10k agents with 100k tasks re-registered "
                   "after a master failover (Mesos 1.5); the clock starts at the new master"},
        "sizes": {},
    }
    if args.compare_backlog:
        doc["experiments"] = {f"master_backlog_{args.compare_backlog}": {
            "what": f"the same runs with the masters' ROUTER listen backlog (ZMQ_BACKLOG) set to "
                    f"{args.compare_backlog} instead of the product's 4096 (a wrapper around "
                    f"mesoslike.transport.Server, not the product's code)",
            "sizes": {}}}
    started = time.perf_counter()
    load_start = os.getloadavg()
    stop_on_sigterm()
    log_drivers()
    with tempfile.TemporaryDirectory(prefix="mesoslike-failover-") as scratch:
        workdir = Path(scratch)
        procs = Processes(workdir)
        zk = None
        try:
            zk = start_zookeeper(workdir / "zookeeper", args.zk_heap)
            runs: list[tuple[dict, dict]] = [(doc["sizes"], {})]
            if args.compare_backlog:
                runs.append((doc["experiments"][f"master_backlog_{args.compare_backlog}"]["sizes"],
                             {"master_backlog": args.compare_backlog}))
            if args.compare_mirror_off:   # the baseline first, each size next to its run as asked
                doc["baseline"] = {"what": "the same runs with the standby's registry mirror off "
                                           "(--no-standby-registry-mirror): the new leader reads the whole "
                                           "registry when elected, as before the mirror", "sizes": {}}
                runs.insert(0, (doc["baseline"]["sizes"], {"standby_mirror": "off"}))
            for agents, tasks in sizes:
                for target, overrides in runs:
                    run_args = argparse.Namespace(**{**vars(args), **overrides})
                    target[f"{agents}x{tasks}"] = one_size(agents, tasks, run_args, zk, procs, workdir)
                    procs.kill_all()
                    procs.procs.clear()
        except Exception as exc:
            doc["error"] = f"{type(exc).__name__}: {exc}"
            log(f"error: {doc['error']}; logs in {workdir}")
            if zk is not None:
                log("--- zookeeper\n" + zk.node.log_tail(15))
            procs.log_tails()
        finally:
            procs.kill_all()
            if zk is not None:
                zk.kill()
            if args.keep_logs is not None:
                import shutil
                shutil.copytree(workdir, args.keep_logs, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("data"))
    doc["wall_s"] = time.perf_counter() - started
    doc["loadavg_start_end"] = [load_start, os.getloadavg()]
    emit_result(doc, args.out, log)
    return 1 if "error" in doc else 0


if __name__ == "__main__":
    sys.exit(main())
