#!/usr/bin/env python3
"""How the master's HTTP answers a legitimate client while slow clients hold
connections open (slowloris).

A master (in this process) serves HTTP with its defaults; ``--slow``
connections are opened to it — half send nothing, half a header byte every
0.5 s, each reopened as soon as the server closes it — and a client then
asks ``GET /health`` ``--requests`` times, one after the other, with a 15 s
timeout each. Reported: how many were answered, their latencies (median,
p99, max), the server process's threads, and the same with no slow
connection (the baseline of the same run). The issue measured 4 answers in
23 under 200 slow connections.

``--before DIR`` also runs the same measurement on another source tree (for
example ``git archive main mesoslike | tar -x -C DIR``) in a subprocess, so
the JSON holds both, measured in the same run.

    python bench/http_slowloris.py --out bench/results/http_slowloris.json --before /tmp/main-tree
    python bench/http_slowloris.py --quick

Prints one JSON document on stdout; it reports, it does not fail.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def keep_slow(host: str, port: int, count: int, stop: threading.Event) -> list:
    """``count`` connections that never finish a request, kept open until ``stop``."""
    sockets: list = [None] * count

    def open_one(index: int) -> None:
        try:
            conn = socket.create_connection((host, port), timeout=5)
            if index % 2:
                conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            conn.setblocking(False)
            sockets[index] = conn
        except OSError:
            sockets[index] = None

    for index in range(count):
        open_one(index)

    def keep() -> None:
        while not stop.wait(0.5):
            for index, conn in enumerate(sockets):
                try:
                    if conn is None or conn.recv(1) == b"":
                        raise OSError
                except BlockingIOError:
                    if index % 2:
                        try:
                            conn.send(b"X")
                        except OSError:
                            pass
                    continue
                except OSError:
                    pass
                if conn is not None:
                    conn.close()
                open_one(index)
        for conn in sockets:
            if conn is not None:
                conn.close()

    threading.Thread(target=keep, daemon=True).start()
    return sockets


def ask(url: str, requests: int) -> dict:
    latencies, answered = [], 0
    for _ in range(requests):
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(url + "/health", timeout=15) as reply:
                answered += reply.status == 200
                latencies.append(time.perf_counter() - started)
        except OSError:
            pass
    ordered = sorted(latencies)
    if not ordered:   # none answered: no latency to tell
        return {"requests": requests, "answered": 0, "latency_median_s": None, "latency_p99_s": None,
                "latency_max_s": None}
    return {"requests": requests, "answered": answered,
            "latency_median_s": round(statistics.median(ordered), 4),
            "latency_p99_s": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 4),
            "latency_max_s": round(ordered[-1], 4)}


def threads() -> int:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


def measure(slow: int, requests: int) -> dict:
    from mesoslike.master.runtime import MasterRuntime
    from mesoslike.master.settings import MasterSettings

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * slow + 2048)), hard))
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=0))
    runtime.start()
    try:
        url = runtime.http_address
        baseline = ask(url, requests)
        threads_before = threads()
        stop = threading.Event()
        held = keep_slow("127.0.0.1", int(url.rsplit(":", 1)[1]), slow, stop)
        try:
            attacked = ask(url, requests)
            attacked["threads_added"] = threads() - threads_before
            attacked["slow_connections_open"] = sum(conn is not None for conn in held)
        finally:
            stop.set()
        return {"slow_connections": slow, "without_slow_clients": baseline, "with_slow_clients": attacked}
    finally:
        runtime.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=2000, help="slow connections held open")
    parser.add_argument("--requests", type=int, default=50, help="GET /health asked, one after the other")
    parser.add_argument("--quick", action="store_true", help="200 slow connections, 10 requests")
    parser.add_argument("--before", default=None, help="another source tree to measure the same way")
    parser.add_argument("--source", default=str(ROOT), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.quick:
        args.slow, args.requests = 200, 10
    sys.path.insert(0, args.source)
    if args.source != str(ROOT):  # the child run of --before
        print(json.dumps(measure(args.slow, args.requests)))
        return
    result: dict = {"command": " ".join(sys.argv), "loadavg_start": os.getloadavg(),
                    "after": measure(args.slow, args.requests)}
    if args.before:
        child = subprocess.run([sys.executable, __file__, "--source", args.before, "--slow", str(args.slow),
                                "--requests", str(args.requests)],
                               capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=args.before))
        if child.returncode != 0:
            raise SystemExit(child.stderr)
        result["before"] = json.loads(child.stdout.strip().splitlines()[-1])
    result["loadavg_end"] = os.getloadavg()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
