#!/usr/bin/env python3
"""One Fuxi worker alone, its AppMaster stood in for by this process: the
worker's own CPU an instance (without its start), for this tree and, with
``--before-tree``, another in interleaved rounds. Two processes at a time
at most (the worker and the instance it runs): light enough to run beside
other work, under ``nice``, without the bench lock.

The worker is started as the service starts it (``python -m
mesoslike_frameworks.fuxi.worker``, this interpreter or the tree's
``.venv``, the tree's code on ``PYTHONPATH``, in a sandbox of its own;
no CURVE; its log at INFO, the service's default, to a file of the
sandbox). This process WELCOMEs it, then keeps it busy as the AppMaster
does: one instance running and one queued (each DONE answered with the
next ASSIGN, which carries its ACK). The worker's CPU (user + system, its
own, not its reaped instances') is read from ``/proc`` at its first DONE
and at its last; per round: ms of the worker an instance between the two,
its ms up to the first (its start, its HELLO, its first instance), the
instances a second, the load average.

    python bench/fuxi_worker_alone.py --before-tree /var/tmp/base --rounds 6 --out bench/results/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput as tp  # noqa: E402

from mesoslike.transport import Server  # noqa: E402
from mesoslike_frameworks.fuxi import am_protocol as amp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def own_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) of ``pid`` itself, not its reaped children."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def python_of(tree: Path) -> str:
    venv = tree / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def one_worker(tree: Path, instances: int, command: str, work: Path, timeout: float = 300.0,
               wrap: list[str] | None = None) -> dict:
    sandbox = Path(tempfile.mkdtemp(dir=work))
    server = Server(f"tcp://127.0.0.1:{tp.free_port()}", codec=amp.CODEC)
    env = dict(os.environ, PYTHONPATH=f"{tree}:{tree / 'frameworks'}", FUXI_APPMASTER=server.address,
               FUXI_SLOT_ID="s0", FUXI_JOB_ID="alone", FUXI_UNIT="work", FUXI_HOSTNAME="h0")
    env.pop("FUXI_LOG_LEVEL", None)   # INFO, as the service starts it: a line an instance, to its sandbox's stderr
    with open(sandbox / "stderr", "wb") as stderr:
        worker = subprocess.Popen([*(wrap or []), python_of(tree), "-m", "mesoslike_frameworks.fuxi.worker"],
                                  cwd=sandbox, env=env, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr)
    peer: bytes | None = None
    sent = done = 0
    cpu_first = t_first = 0.0
    deadline = time.monotonic() + timeout

    def assign(acks: list[list[int]]) -> None:
        nonlocal sent
        assert peer is not None
        server.send(peer, amp.Assign(sent, 0, command, {}, acks))
        sent += 1

    try:
        while done < instances:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker ran {done} of {instances} instances in {timeout}s")
            server.wait(1.0)
            for who, message in server.receive():
                if isinstance(message, amp.Hello) and peer is None:
                    peer = who
                    server.send(peer, amp.Welcome("s0"))
                    assign([])
                    assign([])   # one running, one queued: as the AppMaster keeps a worker
                elif isinstance(message, amp.Done) and who == peer:
                    if not message.ok:
                        raise RuntimeError(f"instance {message.instance} failed: {message.message}")
                    done += 1
                    if done == 1:
                        cpu_first, t_first = own_cpu(worker.pid), time.monotonic()
                    if done == instances:
                        break
                    acks = [[message.instance, message.attempt]]
                    if sent < instances:
                        assign(acks)
                    else:
                        server.send(peer, amp.Ack(message.instance, message.attempt))
        cpu_last, t_last = own_cpu(worker.pid), time.monotonic()
        assert peer is not None
        server.send(peer, amp.Release())
        worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        server.close()
        shutil.rmtree(sandbox, ignore_errors=True)
    measured = instances - 1
    return {"worker_ms_per_instance": round(1000 * (cpu_last - cpu_first) / measured, 4),
            "worker_start_ms": round(1000 * cpu_first, 1),   # its start, its HELLO and its first instance
            "instances_per_s": round(measured / (t_last - t_first), 1), "worker_cpu_s": round(cpu_last - cpu_first, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-tree", type=Path, help="another tree, measured in the same rounds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--command", default="true", help="each instance's command (sh -c)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    trees = {"after": ROOT} | ({"before": args.before_tree.resolve()} if args.before_tree else {})
    work = Path(tempfile.mkdtemp(prefix="fuxi-worker-alone-", dir="/var/tmp"))
    result: dict = {"command": " ".join(sys.argv), "instances": args.instances, "instance_command": args.command,
                    "load_start": Path("/proc/loadavg").read_text().split()[:3], "rounds": []}
    try:
        for number in range(args.rounds):
            order = list(trees) if number % 2 == 0 else list(reversed(trees))
            row: dict = {}
            for name in order:
                row[name] = one_worker(trees[name], args.instances, args.command, work)
            row["load"] = Path("/proc/loadavg").read_text().split()[0]
            result["rounds"].append(row)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["load_end"] = Path("/proc/loadavg").read_text().split()[:3]
    for name in trees:
        values = sorted(row[name]["worker_ms_per_instance"] for row in result["rounds"])
        result[f"{name}_median_ms"] = values[len(values) // 2]
    if "before" in trees:
        ratios = sorted(row["after"]["worker_ms_per_instance"] / row["before"]["worker_ms_per_instance"]
                        for row in result["rounds"])
        result["after_over_before_median"] = round(ratios[len(ratios) // 2], 3)
    print(json.dumps({key: value for key, value in result.items() if key != "rounds"}))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
