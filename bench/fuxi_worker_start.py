#!/usr/bin/env python3
"""A Fuxi job's fixed start, alone: N workers started at once (as a job's
slots start) against a stand-in AppMaster, until every one said HELLO —
this tree's workers and, with ``--before-tree``, another tree's, in
interleaved rounds.

No cluster: each worker is the task command the tree's service gives a
slot (``service.worker_command``: ``python -S`` and its boot line, since
fuxi29h; ``python -m mesoslike_frameworks.fuxi.worker`` with
``--as-module``, what this bench started before) run by ``sh`` in a sandbox
of its own (without the agent's part), the stand-in AppMaster a ROUTER of this tree on
127.0.0.1 that answers each HELLO with WELCOME and RELEASE. With
``--appmaster-late S`` the AppMaster binds S seconds after the workers
started (as on a loaded machine, where a job's AppMaster is up after its
workers). Per round: seconds from the start to the last HELLO, and the
workers' CPU (user + system of the reaped processes).

    python bench/fuxi_worker_start.py --before-tree /var/tmp/base --rounds 10 --out bench/results/x.json
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import throughput as tp  # noqa: E402
from fuxi_job_alone import worker_command  # noqa: E402

from mesoslike.transport import Server  # noqa: E402
from mesoslike_frameworks.fuxi import am_protocol as amp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def free_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def one_start(python: str, tree: Path, workers: int, late: float, work: Path,
              command: str | None = None) -> tuple[float, float]:
    """Seconds until the last of ``workers`` said HELLO, and their CPU seconds."""
    address = free_address()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    procs = []
    for i in range(workers):
        sandbox = Path(tempfile.mkdtemp(dir=work))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "FUXI_APPMASTER": address,
               "FUXI_SLOT_ID": f"job-1.work.{i}", "FUXI_JOB_ID": "job-1", "FUXI_UNIT": "work",
               "FUXI_HOSTNAME": "h1", "FUXI_ROOM": "", "FUXI_WORKER_TOKEN": "t"}
        argv = ["/bin/sh", "-c", command] if command else [python, "-m", "mesoslike_frameworks.fuxi.worker"]
        procs.append(subprocess.Popen(argv, cwd=sandbox, env=env,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    if late:
        time.sleep(late)
    server = Server(address, codec=amp.CODEC)
    said: set[bytes] = set()
    try:
        deadline = time.monotonic() + 120
        while len(said) < workers and time.monotonic() < deadline:
            server.wait(0.5)
            for peer, frame in server.receive_frames():
                if peer is not None and isinstance(amp.decode(frame), amp.Hello) and peer not in said:
                    said.add(peer)
                    server.send(peer, amp.Welcome(peer.decode()))
                    server.send(peer, amp.Release())
        elapsed = time.perf_counter() - started
        if len(said) < workers:
            raise SystemExit(f"only {len(said)} of {workers} workers said HELLO ({tree})")
        for proc in procs:
            proc.wait(30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        server.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--appmaster-late", type=float, default=0.0,
                        help="seconds after the workers' start that the AppMaster binds")
    parser.add_argument("--before-tree", type=Path, default=None,
                        help="a source tree to compare with, with its virtualenv in .venv")
    parser.add_argument("--as-module", action="store_true",
                        help="start workers with python -m, not the tree's service's worker_command")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    doc, started, load_start = benchlib.start("fuxi_worker_start", None, {"git_head": benchlib.git_state([])[0]})
    trees = benchlib.trees(ROOT, args.before_tree, doc)
    commands = {name: None if args.as_module else worker_command(python, tree)
                for name, (python, tree) in trees.items()}
    work = Path(tempfile.mkdtemp(prefix="bench-fuxi-worker-start-", dir="/var/tmp"))
    seconds: dict[str, list[float]] = {name: [] for name in trees}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    loads: list[list[float]] = []
    try:
        for r in range(args.rounds):
            loads.append([round(x, 2) for x in os.getloadavg()])
            for name, (python, tree) in trees.items():
                elapsed, used = one_start(python, tree, args.workers, args.appmaster_late, work, commands[name])
                seconds[name].append(elapsed)
                cpu[name].append(used)
            tp.log(f"round {r + 1}: " + ", ".join(f"{name} {seconds[name][-1]:.2f} s, cpu {cpu[name][-1]:.2f} s"
                                                  for name in trees) + f", load {loads[-1]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc.update({"workers": args.workers, "appmaster_late_s": args.appmaster_late, "loadavg_per_round": loads,
                "worker_commands": commands})
    for name in trees:
        doc[name] = {"seconds_to_last_hello": tp.spread(seconds[name]),
                     "cpu_ms_per_worker": tp.spread([1000 * c / args.workers for c in cpu[name]])}
    if "before" in trees:
        doc["after_of_before_percent"] = {
            "seconds_to_last_hello": tp.spread([100 * a / b for a, b in zip(seconds["after"], seconds["before"])]),
            "cpu": tp.spread([100 * a / b for a, b in zip(cpu["after"], cpu["before"])])}
    benchlib.finish(doc, started, load_start, args.out, tp.log, None)


if __name__ == "__main__":
    main()
