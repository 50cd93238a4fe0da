#!/usr/bin/env python3
"""A Fuxi round's two ends on the client's side, in two trees, interleaved:
``mesoslike fuxi submit --wait`` of each tree against a stand-in job server
(a ZeroMQ ROUTER of this process speaking the job protocol's frames), which
answers its SUBMIT at once and its first STATUS with the job already
succeeded. Per run: the seconds from the client's start to its SUBMIT
(what it imports and does before it submits), its CPU then (``/proc``,
clock ticks), the seconds from the STATUS_REPLY that says the job ended to
the process's exit, and the whole process's CPU (``wait4``, to the
microsecond). No cluster: the client alone, as a round starts and ends it.

    python bench/fuxi_client_round.py --before-tree /var/tmp/base --runs 20 --out bench/results/fuxi_client_round.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from mesoslike.transport import Server  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
JOB = ('[job]\nname = "j"\n\n[[job.units]]\nname = "work"\nslots = 16\ncpus = 0.1\nmem = 64\n'
       'instances = 1000\ncommand = "true"\n')
ENDED = {"jobs": [{"id": "job-1", "state": "succeeded", "reason": "", "elapsed": 1.9,
                   "instances": {"done": 1000, "total": 1000, "running": 0, "failed": 0, "backups": 0},
                   "units": [{"name": "work", "granted": 0, "desired": 0, "why_waiting": ""}]}]}


def _frame(kind: str, **fields: object) -> bytes:
    return msgpack.packb({"v": 1, "type": kind, **dict(sorted(fields.items()))})


def _cpu_ticks(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(python: str, tree: Path, job: Path, router: Server, address: str) -> dict[str, float]:
    started = time.perf_counter()
    client = subprocess.Popen([python, "-m", "mesoslike", "fuxi", "submit", "--fuxi", address, "--wait",
                               "--interval", "0.1", "--timeout", "30", str(job)], cwd=tree,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result: dict[str, float] = {}
    try:
        while True:
            if not router.wait(30.0):
                raise SystemExit("the client sent nothing in 30 s")
            frames = [(peer, frame) for peer, frame in router.receive_frames() if isinstance(frame, bytes)]
            if not frames:
                continue
            peer, frame = frames[0]   # one request at a time: the client waits for each answer
            assert peer is not None
            message = msgpack.unpackb(frame)
            if message["type"] == "SUBMIT":
                result["submit_s"] = time.perf_counter() - started
                result["cpu_at_submit_s"] = _cpu_ticks(client.pid)
                router.send_frame(peer, _frame("SUBMITTED", id=message["id"], job_id="job-1"))
            elif message["type"] == "STATUS":
                router.send_frame(peer, _frame("STATUS_REPLY", id=message["id"], document=json.dumps(ENDED)))
                answered = time.perf_counter()
                break
        _, status, usage = os.wait4(client.pid, 0)
        result["exit_after_end_s"] = time.perf_counter() - answered
        result["cpu_s"] = usage.ru_utime + usage.ru_stime
        result["wall_s"] = time.perf_counter() - started
        client.returncode = os.waitstatus_to_exitcode(status)
        if client.returncode != 0:
            raise SystemExit(f"the client of {tree} exited {client.returncode}")
        return result
    finally:
        if client.returncode is None:
            client.kill()
            client.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--before-tree", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    doc, started, load_start = benchlib.start("fuxi_client_round", None, {"git_head": benchlib.git_state([])[0]})
    trees = benchlib.trees(ROOT, args.before_tree, doc)
    router = Server("tcp://127.0.0.1:0")   # a stand-in job server: raw frames, as the service's would read
    port = int(router.address.rsplit(":", 1)[1])
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-fuxi-client-") as work:
        job = Path(work) / "job.toml"
        job.write_text(JOB)
        try:
            for r in range(args.runs):
                loads.append(round(os.getloadavg()[0], 1))
                order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
                for name, (python, tree) in order:
                    runs[name].append(one_run(python, tree, job, router, f"tcp://127.0.0.1:{port}"))
        finally:
            router.close()
    doc.update({"runs": args.runs, "loadavg_per_run": loads})
    for name in trees:
        doc[name] = {key: {"median": round(statistics.median(r[key] for r in runs[name]), 4),
                           "quartiles": [round(q, 4) for q in statistics.quantiles([r[key] for r in runs[name]], n=4)]}
                     for key in runs[name][0]}
        doc[name]["per_run"] = runs[name]
    if "before" in trees:
        doc["cpu_ratio_per_pair"] = {
            key: round(statistics.median(a[key] / b[key] for a, b in zip(runs["after"], runs["before"]) if b[key]), 3)
            for key in ("cpu_s", "cpu_at_submit_s")}
    benchlib.finish(doc, started, load_start, args.out, lambda text: print(text, file=sys.stderr), None)


if __name__ == "__main__":
    main()
