#!/usr/bin/env python3
"""A Fuxi job's AppMaster alone, its workers stood in for by one process:
the AppMaster's CPU an instance without 16 workers and 1,000 instances'
processes around it (light enough to run beside other work), for this tree
and, with ``--before-tree``, another in interleaved rounds.

The AppMaster is started as ``python -m`` its module, this interpreter
with the tree's code on ``PYTHONPATH`` (its job document, snapshot, keys and token; the
stand-in service answers every request OK). This process holds the job's
``--slots`` workers as CURVE DEALERs with the slots' tokens: each says
HELLO, then answers every ASSIGN with its DONE ``--run-ms`` after the run
before it ended (a worker runs one instance at a time and holds one
queued), and sends a HEARTBEAT every 0.5 s. Per round: the AppMaster's
CPU (user + system, from ``/proc`` when it exited), its seconds, the load.

    python bench/fuxi_appmaster_fake.py --before-tree /var/tmp/base --rounds 6 --out bench/results/x.json
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import fuxi_job_alone as alone  # noqa: E402
import throughput as tp  # noqa: E402

from mesoslike.transport import Client, CurveKeys, Poller  # noqa: E402
from mesoslike_frameworks.fuxi import am_protocol as amp  # noqa: E402
from mesoslike_frameworks.fuxi.service import JobKeys  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def one_job(start: list[str], tree: Path, instances: int, slots: int, run_s: float, work: Path,
            env: dict[str, str] | None = None) -> dict:
    job_dir = Path(tempfile.mkdtemp(dir=work))
    document = {"job": {"name": "alone", "units": [{"name": "work", "slots": slots, "cpus": 0.1, "mem": 64,
                                                    "instances": instances, "command": "true"}]}}
    (job_dir / "job.json").write_text(json.dumps(document))
    keys = JobKeys.of(job_dir)
    service = alone.StandInService()
    bind = f"tcp://127.0.0.1:{tp.free_port()}"
    argv = [*start, "--service", service.address, "--job-id", "job-0001", "--bind", bind,
            "--snapshot", str(job_dir / "snapshot.json"), "--job", str(job_dir / "job.json"), "--log-level", "info",
            "--key", str(keys.appmaster_secret_path), f"--worker-key={keys.worker.public.decode()}"]
    base_env = {name: value for name, value in os.environ.items() if not name.startswith("FUXI_")}
    base_env["PYTHONPATH"] = f"{tree}{os.pathsep}{tree / 'frameworks'}"   # this tree's code, whatever is installed
    base_env.update(env or {})
    started = time.perf_counter()
    with open(job_dir / "appmaster.log", "wb") as log_file:
        appmaster = subprocess.Popen(argv, cwd=tree, env={**base_env, "FUXI_AM_TOKEN": alone.TOKEN},
                                     stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    worker_keys = CurveKeys(keys.worker.public, keys.worker.secret)
    clients = {}
    for i in range(slots):
        slot = f"job-0001.work.{i}"
        clients[slot] = Client(bind, codec=amp.CODEC, identity=slot.encode(), keys=worker_keys,
                               server_key=keys.appmaster.public)
        clients[slot].send(amp.Hello(slot, "work", f"h{i % 4}", token=amp.worker_token(alone.TOKEN, slot)))
    poller = Poller(list(clients.values()))
    # per slot: the runs handed to it, in order (running first); the ends due, as a heap (time, slot)
    runs: dict[str, list[tuple[int, int]]] = {slot: [] for slot in clients}
    due: list[tuple[float, str]] = []
    next_beat = time.monotonic() + 0.5
    done = 0
    try:
        while os.waitid(os.P_PID, appmaster.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            now = time.monotonic()
            timeout = min(0.05, max(0.0, (due[0][0] - now) if due else 0.05))
            ready = poller.poll(timeout)
            for client in ready:
                for _, message in client.receive():
                    if isinstance(message, amp.Assign):
                        slot = client._identity.decode()  # noqa: SLF001 - the bench's own client
                        runs[slot].append((message.instance, message.attempt))
                        if len(runs[slot]) == 1:
                            heapq.heappush(due, (time.monotonic() + run_s, slot))
                    elif isinstance(message, amp.Release):
                        pass
            now = time.monotonic()
            while due and due[0][0] <= now:
                _, slot = heapq.heappop(due)
                instance, attempt = runs[slot].pop(0)
                clients[slot].send(amp.Done(slot, instance, attempt, True, ""))
                done += 1
                if runs[slot]:
                    heapq.heappush(due, (now + run_s, slot))
            if now >= next_beat:
                next_beat = now + 0.5
                for slot, client in clients.items():
                    running = list(runs[slot][0]) if runs[slot] else None
                    queued = list(runs[slot][1]) if len(runs[slot]) > 1 else None
                    client.send(amp.Heartbeat(slot, running, queued))
        elapsed = time.perf_counter() - started
        cpu = _cpu_of_exited(appmaster)
        appmaster.returncode = 0
        if not service.ended.is_set():
            raise SystemExit(f"the job did not end well ({tree}): "
                             f"{(job_dir / 'appmaster.log').read_text(errors='replace')[-2000:]}")
    finally:
        if appmaster.poll() is None:
            appmaster.kill()
            appmaster.wait()
        for client in clients.values():
            client.close()
        service.close()
        shutil.rmtree(job_dir, ignore_errors=True)
    return {"seconds": elapsed, "appmaster": cpu, "dones": done}


def _cpu_of_exited(proc: subprocess.Popen) -> float:
    """An exited (unreaped) child's CPU seconds, then reap it."""
    return alone._exited_cpu(proc.pid)[0]  # noqa: SLF001 - the sibling bench's helper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--run-ms", type=float, default=40.0, help="an instance's run, ms (default: %(default)s)")
    parser.add_argument("--before-tree", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE",
                        help="also run this tree's AppMaster with VAR=VALUE in its environment, as NAME")
    parser.add_argument("--wrap", default="", help="a command the AppMaster runs under (a profiler), split on spaces")
    args = parser.parse_args()
    doc, started, load_start = benchlib.start("fuxi_appmaster_fake", None, {"git_head": benchlib.git_state([])[0]})
    trees = benchlib.trees(ROOT, args.before_tree, doc)
    envs: dict[str, dict[str, str]] = {name: {} for name in trees}
    for variant in args.variant:
        name, _, assignment = variant.partition(":")
        var, _, value = assignment.partition("=")
        trees[name], envs[name] = trees["after"], {var: value}
    # one interpreter for both trees, each with its own code on PYTHONPATH (the loop is measured, not the start)
    starts = {name: [*args.wrap.split(), sys.executable, "-m", "mesoslike_frameworks.fuxi.appmaster"] for name in trees}
    work = Path(tempfile.mkdtemp(prefix="bench-fuxi-am-fake-"))
    try:
        results, loads = alone.interleaved_rounds(
            trees, args.rounds,
            lambda name, _, tree: one_job(starts[name], tree, args.instances, args.slots, args.run_ms / 1000, work,
                                          envs[name]),
            lambda name, result: f"{name} {result['seconds']:.2f} s, appmaster "
                                 f"{1e6 * result['appmaster'] / args.instances:.0f} us an instance")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc.update({"instances": args.instances, "slots": args.slots, "run_ms": args.run_ms, "loadavg_per_round": loads})
    for name in trees:
        doc[name] = {"seconds": tp.spread([x["seconds"] for x in results[name]]),
                     "appmaster_cpu_us_per_instance": tp.spread([1e6 * x["appmaster"] / args.instances
                                                                 for x in results[name]])}
    for name in trees:
        if name != "before" and "before" in trees:
            doc[f"{name}_of_before_percent"] = tp.spread([100 * a["appmaster"] / b["appmaster"]
                                                          for a, b in zip(results[name], results["before"])])
    benchlib.finish(doc, started, load_start, args.out, tp.log, None)


if __name__ == "__main__":
    main()
