"""What every benchmark in ``bench/`` records about its run, in one place:
the machine, the measured code (git head and blob ids) and the JSON output."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

ROOT = Path(__file__).resolve().parent.parent


def machine_info() -> dict:
    mem_total = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_total = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "mem_total_bytes": mem_total,
    }


def blob_ids(files: Iterable[str]) -> dict[str, str]:
    """Git blob ids of ``files`` (``git hash-object FILE``), so a result can
    be matched to the commit holding exactly that code."""
    out = {}
    for name in files:
        path = ROOT / name
        if path.exists():
            data = path.read_bytes()
            out[name] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return out


def git_state(files: Iterable[str]) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether any of ``files`` differs from it)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *files], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head, bool(dirty)


def start(benchmark: str, argv: list[str] | None, code: dict) -> tuple[dict, float, tuple]:
    """A result document's header (what ran, when, where, on which code),
    the start time and the load average now: for :func:`finish`."""
    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], os.getcwd()),
                                                            *(sys.argv[1:] if argv is None else argv)])
    doc = {"benchmark": benchmark, "command": command, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": machine_info(), "code": code}
    return doc, time.perf_counter(), os.getloadavg()


def callgrind_instructions(args: list[str], env: dict[str, str], cwd: str | Path, timeout: float = 1800) -> int:
    """The user-space instructions valgrind's callgrind counts in one run of
    this interpreter with ``args``, with one hash seed (``PYTHONHASHSEED=0``: a
    random seed moves a small operation's count by up to a quarter — its
    dictionaries' probes): the same count in every run, where times on a
    shared VM move by a tenth or more. Needs ``valgrind``."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *args],
                          env={**env, "PYTHONHASHSEED": "0"}, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    found = re.search(r"refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind gave no count for {args}:\n{done.stderr[-3000:]}")
    return int(found.group(1).replace(",", ""))


def trees(root: Path, before_tree: Path | None, doc: dict) -> dict[str, tuple[str, Path]]:
    """The source trees a before/after bench runs, name -> (its Python, the
    tree): this one ("after", ``root``) and, with ``before_tree``, that one
    ("before", its virtualenv in ``.venv``), noted in ``doc``."""
    found = {"after": (sys.executable, root)}
    if before_tree is not None:
        before = before_tree.resolve()
        found["before"] = (str(before / ".venv" / "bin" / "python"), before)
        doc["before_tree"] = str(before)
    return found


def emit(doc: dict, out: Path | None, log: Callable[[str], None]) -> None:
    """Print the result document as JSON and, with ``out``, write it there."""
    text = json.dumps(doc, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        log(f"wrote {out}")


def finish(doc: dict, started: float, load_start: tuple, out: Path | None, log: Callable[[str], None],
           code_changed: bool | None = None) -> None:
    """Record the run's wall time, load, peak memory and whether the measured
    code changed on disk meanwhile; then :func:`emit` the document."""
    doc["wall_s"] = time.perf_counter() - started
    doc["loadavg_start_end"] = [load_start, os.getloadavg()]
    if code_changed is not None:
        doc["code"]["changed_on_disk_during_run"] = code_changed
    doc["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    emit(doc, out, log)
    log(f"done in {doc['wall_s']:.0f} s")


def probe_under_state_readers(runtime, readers: int, seconds: float, at_least_one: bool = False) -> dict:
    """How long a master's peers wait while ``readers`` threads poll its
    ``GET /state`` for ``seconds``: a probe client makes a cheap call
    (REVIVE of an unknown framework, answered with an ERROR) every 20 ms
    and times each answer. ``runtime`` is a started MasterRuntime in this
    process; its loop statistics are reset first (the set-up's turns do not
    count). With ``at_least_one``, goes on until one document was served."""
    import threading
    import urllib.request

    from mesoslike.transport import Client
    from mesoslike.wire import messages as m

    probe = Client(runtime.address)

    def call() -> float:
        sent = time.monotonic()
        probe.send(m.Revive("no-such-framework"))
        while not any(isinstance(msg, m.Error) for _, msg in probe.receive()):
            probe.wait(0.01)
        return time.monotonic() - sent
    call()  # a whole turn since the set-up, which held the lock: only what follows counts
    reset_loop_stats(runtime)
    stop = threading.Event()
    served = [0]

    def read() -> None:
        while not stop.is_set():
            try:
                urllib.request.urlopen(runtime.http_address + "/state", timeout=600).read()
                served[0] += 1
            except OSError:
                pass
    threads = [threading.Thread(target=read, daemon=True) for _ in range(readers)]
    for thread in threads:
        thread.start()
    waits: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or (at_least_one and not served[0]):
        waits.append(call())
        time.sleep(0.02)
    probe.close()
    stop.set()
    for thread in threads:
        thread.join(600)
    waits.sort()
    return {"readers": readers, "seconds": seconds, "state_documents_served": served[0], "probe_calls": len(waits),
            "probe_answer_max_s": round(waits[-1], 4),
            "probe_answer_p99_s": round(waits[max(int(len(waits) * 0.99) - 1, 0)], 4),
            "probe_answer_median_s": round(waits[len(waits) // 2], 4),
            "loop_stall_seconds_max": getattr(loop_stats(runtime), "stall_max", None)}


def master_runtime(address: str, http_port: int | None, config):
    """A MasterRuntime of the tree on sys.path, whichever constructor it has
    (a tree from before MasterSettings takes the parameters: --before)."""
    from mesoslike.master.runtime import MasterRuntime

    try:
        from mesoslike.master.settings import MasterSettings
    except ImportError:
        return MasterRuntime(address, http_port=http_port, config=config)
    return MasterRuntime(MasterSettings(address=address, http_port=http_port, config=config))


def loop_stats(runtime):
    """The runtime's loop statistics (None: a tree from before they were kept)."""
    metrics = getattr(runtime, "metrics", None)
    return metrics.loop if metrics is not None else getattr(runtime, "loop_stats", None)


def reset_loop_stats(runtime) -> None:
    stats = loop_stats(runtime)
    if stats is None:
        return
    fresh = type(stats)()
    if getattr(runtime, "metrics", None) is not None:
        runtime.metrics.loop = fresh
    else:
        runtime.loop_stats = fresh


def wait(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05,
         transient: tuple[type[BaseException], ...] = ()):
    """``predicate()``'s first true value, asked every ``interval`` s (an
    exception of the ``transient`` kinds counts as "not yet": a server still
    starting); RuntimeError after ``timeout`` s. The benchmarks' one wait, as
    tests/waiting.py's ``wait_until`` is the tests' (which must not import bench/)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except transient:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def log(message: str) -> None:
    """A timestamped line to stderr (a benchmark's progress; its figures go to stdout as JSON)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Processes:
    """Every process the benchmark started; all killed at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, command: list[str], stdout=None, cpus: set[int] | None = None) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        for key in [k for k in env if k.startswith("MESOSLIKE_")]:
            del env[key]
        log_file = open(self.directory / f"{name}.log", "ab")
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        proc = subprocess.Popen(command, cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL,
                                stdout=stdout if stdout is not None else log_file, stderr=log_file,
                                start_new_session=True, preexec_fn=pin)
        proc.name = name  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def log_tails(self) -> None:
        """The end of every process's log, to stderr (after an error)."""
        for proc in self.procs:
            path = self.directory / f"{proc.name}.log"
            if path.exists():
                log(f"--- {proc.name}\n" + path.read_text(errors="replace")[-3000:])

    def kill_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1: one a controller; v2: the one)."""
    found: list[Path] = []
    try:
        with open("/proc/self/mounts") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
                    found.append(Path(fields[1]))
    except OSError:
        pass
    return found


def sweep_agent_cgroups(work: Path, roots: Iterable[str] = ("mesoslike",)) -> int:
    """Remove the empty cgroups the agents run under ``work`` left: an agent
    killed (or stopped while a task was still ending) keeps its pooled and
    spare cgroups for its next process to sweep, and a benchmark's agents
    have no next process — thousands piled up across runs and the kernel's
    memory cgroup ids ran out (EBUSY/ENOSPC in later tests). Only cgroups
    named for an agent whose work directory is under ``work`` (the product's
    ``agent_key``: whatever the agent's hostname, its work directory's
    digest), and in ``roots`` the ``roots`` directories themselves
    when they are left empty and named for this benchmark (``bench-*``), so a
    concurrent run's agents are never touched. Returns how many were
    removed."""
    from mesoslike.agent.isolation import agent_key
    # an agent's key is its hostname and a digest of its work directory: the digest alone is matched, as a
    # benchmark's agents are named apart from their directories (throughput.py's bench-N in agent-N: their
    # cgroups were never swept)
    digests: set[str] = set()
    for directory in [work, *(d for d in work.glob("*") if d.is_dir()), *(d for d in work.glob("*/*") if d.is_dir())]:
        digests.add(agent_key("", directory).rsplit("-", 1)[-1])
    removed = 0
    for hierarchy in cgroup_hierarchies():
        for root in roots:
            for base in [hierarchy / root, *_nested(hierarchy, root)]:   # also under a container's own cgroup
                try:
                    names = os.listdir(base)
                except OSError:
                    continue
                for name in names:
                    if name.split(".", 1)[0].rsplit("-", 1)[-1] not in digests:
                        continue
                    for below, _, _ in sorted(os.walk(base / name), key=lambda entry: -len(entry[0])):
                        try:
                            os.rmdir(below)
                            removed += 1
                        except OSError:
                            pass   # a cgroup with processes is not ours to remove
                if root.startswith("bench-"):
                    try:
                        os.rmdir(base)
                    except OSError:
                        pass
    return removed


def _nested(hierarchy: Path, root: str) -> list[Path]:
    """``hierarchy/*/*/root`` that exist: pathlib's glob raises when another
    session removes a cgroup while it walks (two benchmark runs lost their
    results so); a directory gone is simply not listed."""
    found = []
    for first in _listdir(hierarchy):
        for second in _listdir(hierarchy / first):
            if os.path.isdir(hierarchy / first / second / root):
                found.append(hierarchy / first / second / root)
    return found


def _listdir(directory: Path) -> list[str]:
    try:
        return [entry.name for entry in os.scandir(directory) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []


#: where :func:`remove_work_directory` notes when a benchmark last removed its work directory (wall clock)
REMOVED_STAMP = Path(os.environ.get("TMPDIR", "/tmp")) / "mesoslike-bench-removed-at"
#: seconds after a removal before ext4 stops skipping the freed inodes (``RECENTCY_MIN``; the inode table
#: synced, so not ``RECENTCY_DIRTY``'s five minutes more), and a margin
SETTLE_AFTER_REMOVAL = 65.0


def remove_work_directory(work: Path) -> None:
    """Remove a benchmark's work directory, sync, and note when
    (:data:`REMOVED_STAMP`). On ext4 without a journal (these machines)
    the kernel does not give out an inode freed less than a minute ago (5
    if its inode table block is still dirty: hence the sync): each new
    inode's allocation scans past them (``find_inode_bit``,
    ``recently_deleted``). A run's tens of thousands of sandboxes removed
    just before the next run made that run's ``mkdir`` calls cost several
    times more (docs/performance.rst, "Stop 21: what is left, priced")."""
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    os.sync()
    try:
        REMOVED_STAMP.write_text(f"{time.time():.3f}\n")
    except OSError:
        pass


def settle_after_removal(log: Callable[[str], None], seconds: float = SETTLE_AFTER_REMOVAL) -> float:
    """Wait until ``seconds`` have passed since a benchmark last removed
    its work directory (:func:`remove_work_directory`), so that this run
    does not pay for that one's freed inodes; the seconds waited."""
    try:
        removed_at = float(REMOVED_STAMP.read_text())
    except (OSError, ValueError):
        return 0.0
    wait_s = removed_at + seconds - time.time()
    if wait_s <= 0 or wait_s > seconds + 1.0:   # long ago, or a clock set back: nothing to wait for
        return 0.0
    log(f"waiting {wait_s:.0f} s: the last benchmark removed its work directory {seconds - wait_s:.0f} s ago "
        "(ext4 skips inodes freed less than a minute ago)")
    wait_s = min(wait_s, seconds)
    time.sleep(wait_s)
    return round(wait_s, 1)


def free_port(pair: bool = False) -> int:
    """A free port on 127.0.0.1 (with ``pair``, the next one is free too: bench/muxwire.py's)."""
    import socket
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if not pair:
            return port
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
