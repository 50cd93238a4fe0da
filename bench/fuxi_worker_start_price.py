#!/usr/bin/env python3
"""What a Fuxi worker's start costs, piece by piece, and what a worker
whose wire did not go through pyzmq would cost: a price, not a feature.

Each variant is a process of this tree's ``.venv`` Python started as the
service starts a worker (``python -S``, the collector off, the package
directories on ``sys.path``: ``service.worker_command``'s boot line) that
runs up to a point and leaves with ``os._exit``; its CPU (user + system,
``wait4``) is what it cost. The variants run one after the other, in
interleaved rounds (one process at a time: no bench lock, run it under
``nice``):

- ``bare``: the interpreter with the boot line alone;
- ``imports``: the worker's module imported (what ``main`` has before it
  starts), nothing run; with ``--before-tree``, ``before_imports`` too: that
  tree's worker module by that tree's ``.venv`` and boot line's paths;
- ``round_trip``: the worker's imports, then its connection
  (``worker_libzmq.Connection``, libzmq through ``ctypes``) with the
  worker's CURVE keys to this process's CURVE ROUTER, one frame out and its
  answer in — a worker's HELLO and WELCOME, its fixed start up to its join;
- ``pyzmq_round_trip``: the same with a ``mesoslike.transport.Client``
  (pyzmq), what a worker used before; with ``--before-tree``,
  ``before_round_trip``: that tree's worker module and its transport's
  client.

    nice -n 10 python bench/fuxi_worker_start_price.py --rounds 30 --out bench/results/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import throughput as tp  # noqa: E402

from mesoslike.transport import Authenticator, CurveKeys, Server  # noqa: E402
from mesoslike_frameworks.fuxi import service  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

PYZMQ = """
import mesoslike_frameworks.fuxi.worker as w, msgpack
from mesoslike.transport import Client, CurveKeys, poll
c = Client(ADDRESS, codec=w.wire.CODEC, identity=b"slot-1", keys=CurveKeys(PUBLIC, SECRET), server_key=SERVER,
           reconnect_min=0.02, reconnect_max=0.1)
c.send_frame(msgpack.packb({"kind": "HELLO", "slot": "slot-1"}))
while not poll([c], 5.0):
    pass
assert list(c.receive_frames())
"""

WORKER = """
import mesoslike_frameworks.fuxi.worker, msgpack
from mesoslike_frameworks.fuxi.worker_libzmq import Connection, Poller, WorkerKeys
class Raw:
    error, max_message_size = ValueError, 1 << 20
    def encode(self, message): return message
    def decode(self, frame): return frame
c = Connection(ADDRESS, codec=Raw(), identity=b"slot-1", keys=WorkerKeys(PUBLIC, SECRET), server_key=SERVER,
               reconnect_min=0.02, reconnect_max=0.1, log=lambda level, text: None)
c.send(msgpack.packb({"kind": "HELLO", "slot": "slot-1"}))
while not Poller([c]).poll(5.0):
    pass
assert list(c.receive())
"""


class RawFrames:
    """The stand-in AppMaster's codec: frames as they come (it echoes each)."""

    error = ValueError
    max_message_size = 1 << 20

    def encode(self, message: bytes) -> bytes:
        return message

    def decode(self, frame: bytes) -> bytes:
        return frame


def boot(paths: list[str], body: str) -> str:
    """The worker's boot line (``service.worker_command``'s) with ``body`` for the worker's main."""
    return (f"import gc,sys,os;gc.disable();sys.path+={json.dumps(paths)}\n{body}\n"
            "sys.stdout.flush();os._exit(0)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--before-tree", type=Path, help="another tree whose worker's imports are measured too")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    doc, started, load_start = benchlib.start("fuxi_worker_start_price", None, {})
    python = str(ROOT / ".venv" / "bin" / "python")
    paths = service._worker_paths()
    appmaster, worker = CurveKeys.generate(), CurveKeys.generate()
    server_public, public, secret = appmaster.public, worker.public, worker.secret
    address = f"tcp://127.0.0.1:{tp.free_port()}"
    server = Server(address, codec=RawFrames(), keys=appmaster, authenticator=Authenticator({public: "workers"}))
    constants = f"ADDRESS={address!r};PUBLIC={public!r};SECRET={secret!r};SERVER={server_public!r}"
    variants = {
        "bare": boot(paths, "pass"),
        "imports": boot(paths, "import mesoslike_frameworks.fuxi.worker"),
        "round_trip": boot(paths, constants + WORKER),
        "pyzmq_round_trip": boot(paths, constants + PYZMQ),
    }
    pythons = {name: python for name in variants}
    if args.before_tree is not None:
        before = args.before_tree.resolve()
        pythons["before_imports"] = str(before / ".venv" / "bin" / "python")
        found = subprocess.run([pythons["before_imports"], "-c", "import json; from mesoslike_frameworks.fuxi "
                                "import service; print(json.dumps(service._worker_paths()))"],
                               cwd=before, env={**os.environ, "PYTHONPATH": str(before)}, capture_output=True,
                               text=True, check=True)
        variants["before_imports"] = boot(json.loads(found.stdout), "import mesoslike_frameworks.fuxi.worker")
        variants["before_round_trip"] = boot(json.loads(found.stdout), constants + PYZMQ)
        pythons["before_round_trip"] = pythons["before_imports"]
        doc["before_tree"] = str(before)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir()}
    results: dict[str, list[float]] = {name: [] for name in variants}
    for number in range(args.rounds):
        order = list(variants) if number % 2 == 0 else list(reversed(variants))
        for name in order:
            pid = os.posix_spawn(pythons[name], [pythons[name], "-S", "-c", variants[name]], env)
            while True:   # answer its one frame (the round trips), until it exits
                if server.wait(0.01):
                    for peer, frame in server.receive():
                        server.send(peer, frame)
                done, status, usage = os.wait4(pid, os.WNOHANG)
                if done:
                    break
            if status != 0:
                raise RuntimeError(f"{name} exited with status {status}")
            results[name].append(round((usage.ru_utime + usage.ru_stime) * 1000, 1))
    server.close()
    doc["rounds"] = results
    doc["median_ms"] = {name: statistics.median(values) for name, values in results.items()}
    doc["quartiles_ms"] = {name: statistics.quantiles(values, n=4) for name, values in results.items()
                           if len(values) > 1}
    benchlib.finish(doc, started, load_start, args.out, benchlib.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
