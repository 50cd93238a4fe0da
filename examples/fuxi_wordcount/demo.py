"""The Fuxi word count, end to end: ``make demo``.

    python examples/fuxi_wordcount/demo.py [--work-dir DIR] [--keep] [--agents 3] [--shards 12] [--replicas 2]

1. ``prepare.py``: text shards in the agents' work directories
   (``DIR/data/node-<i>/``, each shard on ``--replicas`` nodes) and the job
   file ``DIR/job.toml``;
2. ``mesoslike local --agents N --work-dir DIR/data`` (a master and N agents
   ``node-0`` ...) and ``mesoslike fuxi serve`` on it, authenticated end to
   end with the keys and credentials ``mesoslike local`` made;
3. ``mesoslike fuxi submit --wait DIR/job.toml``: the maps run where their
   shard is if the scheduler can place them there, then the reduce;
4. ``wc.py verify``: the result against a single-process count, and how
   many map reads were local.

Everything it started is stopped at the end, also on Ctrl-C, SIGTERM or an
error. Exit status 0 only if the job succeeded and its result is right.
The processes' output is in ``DIR/logs/``; without ``--work-dir`` or with
``--keep`` DIR stays, else it is removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import prepare  # noqa: E402
import wc  # noqa: E402

MESOSLIKE = [sys.executable, "-m", "mesoslike"]
STOP_TIMEOUT = 15.0


class DemoError(Exception):
    """Something the demo cannot go on after; the message says what."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM."""


class Signals:
    """Ctrl-C and SIGTERM become :class:`Interrupted` — but not while a child
    process is being started (it would be left running, unknown to the
    clean-up): inside :meth:`deferred` they are raised once it ends."""

    def __init__(self) -> None:
        self.pending: str | None = None
        self.depth = 0

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def ignore(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.depth:
            self.pending = self.pending or name
        else:
            raise Interrupted(name)

    @contextlib.contextmanager
    def deferred(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        if not self.depth and self.pending:
            raise Interrupted(self.pending)


SIGNALS = Signals()


def say(line: str) -> None:
    print(f"demo: {line}", flush=True)


class Processes:
    """The long-running processes the demo started, stopped in reverse order.
    Each runs in its own session (a Ctrl-C at the terminal reaches only the
    demo, which then stops them in order) with its output in a log file."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[tuple[str, subprocess.Popen, Path]] = []

    def start(self, name: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.log_dir / f"{name}.log"
        with SIGNALS.deferred(), open(log, "wb") as out:
            proc = subprocess.Popen(MESOSLIKE + args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            self.started.append((name, proc, log))
        return proc, log

    def wait_for_line(self, name: str, proc: subprocess.Popen, log: Path, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, log.read_text(errors="replace"), re.MULTILINE)
            if match:
                return match
            if proc.poll() is not None:
                raise DemoError(f"{name} exited with status {proc.returncode}:\n{tail(log)}")
            if time.monotonic() > deadline:
                raise DemoError(f"{name} did not start within {timeout:g}s:\n{tail(log)}")
            time.sleep(0.05)

    def stop_all(self) -> None:
        for name, proc, _ in reversed(self.started):
            if proc.poll() is None:
                proc.terminate()                       # both commands stop cleanly on SIGTERM
                try:
                    proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    say(f"{name} did not stop within {STOP_TIMEOUT:g}s: killing it")
                    proc.kill()
                    proc.wait()
        self.started.clear()


def tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join(f"  | {line}" for line in text[-lines:]) or "  (empty log)"


def run_job(fuxi_address: str, job_file: Path, timeout: float) -> tuple[int, str]:
    """``mesoslike fuxi submit --wait``, its output shown as it comes; (exit status, job id)."""
    args = ["fuxi", "submit", "--fuxi", fuxi_address, "--wait", "--interval", "0.5", str(job_file)]
    print(f"$ mesoslike {' '.join(args)}", flush=True)
    proc: subprocess.Popen | None = None
    job_id: list[str] = []

    def echo() -> None:
        for line in proc.stdout:
            print(f"  {line}", end="", flush=True)
            found = re.match(r"submitted (\S+)", line)
            if found:
                job_id.append(found.group(1))

    reader = threading.Thread(target=echo, daemon=True)
    try:
        with SIGNALS.deferred():
            proc = subprocess.Popen(MESOSLIKE + args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, bufsize=1)
            reader.start()
        status = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        say(f"the job did not end within {timeout:g}s (--timeout)")
        status = 1
    finally:                                           # also on Ctrl-C / SIGTERM
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait()
        if reader.is_alive():
            reader.join(5)
    return status, (job_id[0] if job_id else "")


def show_task_errors(work_dir: Path, most: int = 3) -> None:
    """The last lines of the newest non-empty stderr files of the job's
    instances (``instances/<n>.<attempt>.stderr`` in a worker's sandbox),
    or else of its tasks, and the end of the AppMaster's log."""
    sandboxes = work_dir / "data"
    files = [f for f in sandboxes.glob("*/sandboxes/*/*/instances/*.stderr") if f.stat().st_size] or \
        [f for f in sandboxes.glob("*/sandboxes/*/*/stderr") if f.stat().st_size]
    for path in sorted(files, key=lambda f: f.stat().st_mtime)[-most:]:
        print(f"  {path.relative_to(sandboxes)}:\n{tail(path, 3)}", flush=True)
    for log in sorted((work_dir / "fuxi").glob("*/appmaster.log")):
        print(f"  {log.relative_to(work_dir)}:\n{tail(log, 5)}", flush=True)


def show_status(fuxi_address: str, job_id: str) -> None:
    with SIGNALS.deferred():                           # a few seconds at most
        done = subprocess.run(MESOSLIKE + ["fuxi", "status", "--fuxi", fuxi_address, *([job_id] if job_id else [])],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    print("\n".join(f"  | {line}" for line in (done.stdout + done.stderr).splitlines()), flush=True)


def demo(args: argparse.Namespace, work_dir: Path, processes: Processes) -> int:
    job_file = work_dir / "job.toml"
    manifest = prepare.prepare(work_dir, job_file, args.agents, args.shards, args.replicas, args.seed,
                               seconds=args.map_seconds)
    size = sum(shard["bytes"] for shard in manifest["shards"])
    say(f"prepared {len(manifest['shards'])} shards ({size // 1024} KB of text), each on {args.replicas} of "
        f"node-0..node-{args.agents - 1}, in {work_dir}/data; job file {job_file}")

    local, log = processes.start("local", ["local", "--agents", str(args.agents), "--port", "0", "--http-port", "0",
                                           "--work-dir", str(work_dir / "data"), "--allocation-interval", "0.2"])
    line = processes.wait_for_line("mesoslike local", local, log, r"^local cluster: master (tcp://\S+).*$", 30)
    master = line.group(1)
    say(line.group(0))
    # authenticated end to end (docs/security.rst): what `mesoslike local` gives its COMMAND, given to every
    # process from here on — the Fuxi service is the cluster's client, and serves its job clients with the same
    # key pair and local's credentials; `fuxi submit/status` are that client too
    keys = work_dir / "data" / "keys"
    os.environ.update({"MESOSLIKE_KEY": str(keys / "client.key_secret"), "MESOSLIKE_MASTER_KEY": str(keys / "master.key"),
                       "MESOSLIKE_FUXI_KEY": str(keys / "client.key"),
                       "MESOSLIKE_FUXI_CREDENTIALS": str(keys / "credentials.toml")})
    serve, log = processes.start("fuxi", ["fuxi", "serve", "--master", master, "--port", "0",
                                          "--work-dir", str(work_dir / "fuxi")])
    line = processes.wait_for_line("mesoslike fuxi serve", serve, log,
                                   r"^fuxi scheduler .* serving jobs on (tcp://\S+),.*$", 30)
    fuxi_address = line.group(1)
    say(line.group(0))

    started = time.monotonic()
    status, job_id = run_job(fuxi_address, job_file, args.timeout)
    if status != 0:
        say(f"the job did not succeed (submit exited {status}); its status:")
        show_status(fuxi_address, job_id)
        show_task_errors(work_dir)
        for name, _, log in processes.started:
            print(f"  {name} log ({log}):\n{tail(log)}", flush=True)
        return 1
    say(f"job {job_id} succeeded in {time.monotonic() - started:.1f}s")
    result = json.loads(wc.result_path(work_dir).read_text(encoding="utf-8"))
    say(wc.top_words_line(result))
    ok, summary = wc.verify(work_dir)
    print(summary, flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the data, outputs and logs go (kept); default: a temporary directory, removed")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--shards", type=int, default=12)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--map-seconds", type=float, default=prepare.MAP_SECONDS,
                        help="each map spreads its reading over at least this long")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds the job may take")
    args = parser.parse_args(argv)
    if not 1 <= args.replicas <= args.agents or args.shards < 1:
        parser.error("need --shards >= 1 and 1 <= --replicas <= --agents")

    temporary = args.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix="fuxi-wordcount-")) if temporary else args.work_dir.resolve()
    (work_dir / "logs").mkdir(parents=True, exist_ok=True)
    processes = Processes(work_dir / "logs")
    began = time.monotonic()
    status = 1
    try:
        SIGNALS.install()
        status = demo(args, work_dir, processes)
    except Interrupted as exc:
        say(f"interrupted ({exc}): stopping")
        status = 130
    except DemoError as exc:
        say(f"error: {exc}")
    finally:
        SIGNALS.ignore()                                   # a second Ctrl-C must not cut the clean-up short
        processes.stop_all()
        if temporary and not args.keep and status == 0:
            shutil.rmtree(work_dir, ignore_errors=True)
            where = ""
        else:
            where = f"; the data, outputs and logs are in {work_dir}"
        say(f"stopped the Fuxi scheduler and the cluster; {'OK' if status == 0 else 'FAILED'} in "
            f"{time.monotonic() - began:.1f}s{where}")
    return status


if __name__ == "__main__":
    sys.exit(main())
