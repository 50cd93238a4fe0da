#!/usr/bin/env python3
"""A new leader's re-admission in a FRESH process: the CPU an agent split
into user and system time, and the page faults an agent.

``bench/readmission_ab.py`` re-admits the agents in a process whose heap
already held a first core's (its memory is mapped and touched: no page
faults). A real new leader's heap grows through the storm (1.7 GB resident
at 100,000 agents, ``bench/results/failover-stop17-100k.json``): every page
it touches first is a page fault, and on a virtual machine a fault is
costly (here ~2 µs: the hypervisor's and the kernel's, counted as system
time). Each round runs every variant in a process of its own, alternating
(which goes first alternates by round); each process recovers the same
registry (made once by a child process, so that no measuring process ever
held it), hands its free memory back to the OS (``malloc_trim``), and
re-admits the agents as the loop would (``MasterCore.on_message`` after
decoding, a ``tick`` every ``--batch``; the collector off, as in the
runtime's turns).

Variants (``--variants``, comma-separated):

- ``plain``: as the master runs;
- ``prefault``: glibc's allocator for every object (``PYTHONMALLOC=malloc``),
  its heap never trimmed, and ``--prefault-mb`` of it touched and freed
  before the storm (what a standby could do while it waits): the storm's
  objects land on pages already mapped;
- ``malloc``: glibc's allocator for every object, nothing touched ahead;
- ``base``: as ``plain``, with the tree of ``--base-src`` (a ``git archive``
  of the commit to compare with) instead of this one: a paired A/B of a
  change that the decoding or the heap's growth sees (the registry is then
  made by that tree, which both read).

    python bench/readmission_faults.py --agents 20000 --rounds 3 --variants plain,prefault
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: the environment of each variant's process (on top of this one's)
VARIANTS: dict[str, dict[str, str]] = {
    "plain": {},
    "malloc": {"PYTHONMALLOC": "malloc"},
    # never trimmed, and blocks up to 32 MiB from the heap (not mapped apart): what is touched ahead stays mapped
    "prefault": {"PYTHONMALLOC": "malloc", "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
                 "MALLOC_MMAP_THRESHOLD_": str(32 << 20)},
    "base": {},   # (--base-src's tree on the path)
}


def make_document(args: argparse.Namespace) -> None:
    """The registry of ``--agents`` agents as a first leader has it, pickled to ``--document``."""
    from mesoslike.clock import FakeClock
    from mesoslike.master import MasterConfig, MasterCore
    from mesoslike.wire import MasterInfo, decode

    from simagents import registrations

    _, frames, _ = registrations(0, args.agents, args.tasks_per_agent, args.frameworks)
    first = MasterCore(FakeClock(), MasterInfo("m1", "tcp://127.0.0.1:1"), MasterConfig())
    for number, frame in enumerate(frames):
        first.on_message(f"agent-{number}".encode(), decode(frame))
    args.document.write_bytes(pickle.dumps(first.registry.to_document()))


def storm(args: argparse.Namespace) -> dict:
    """Re-admit every agent in this process (fresh); what it cost."""
    from mesoslike.clock import FakeClock
    from mesoslike.master import MasterConfig, MasterCore
    from mesoslike.master.registry import Registry
    from mesoslike.wire import MasterInfo, decode

    from simagents import registrations

    _, frames, _ = registrations(0, args.agents, args.tasks_per_agent, args.frameworks)
    peers = [f"agent-{number}".encode() for number in range(args.agents)]
    core = MasterCore(FakeClock(), MasterInfo("m2", "tcp://127.0.0.1:2"), MasterConfig(),
                      registry=Registry.from_document(pickle.loads(args.document.read_bytes())))
    gc.collect()
    gc.freeze()
    ctypes.CDLL(None).malloc_trim(0)   # the heap's free pages back to the OS: as a process that never had them
    prefault_s = 0.0
    if args.prefault_mb:
        began = time.perf_counter()
        # filled (not calloc'd: the heap's fresh pages would be taken as zero and never touched), then freed
        blocks = [bytearray(b"\x01") * (16 << 20) for _ in range(args.prefault_mb // 16)]
        blocks.clear()   # (freed: the pages stay in the heap, touched)
        prefault_s = time.perf_counter() - began
    gc.disable()
    before, began = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    for start in range(0, args.agents, args.batch):
        for peer, frame in zip(peers[start:start + args.batch], frames[start:start + args.batch]):
            core.on_message(peer, decode(frame))
        core.tick()
    spent, after = time.process_time() - began, resource.getrusage(resource.RUSAGE_SELF)
    gc.enable()
    assert len(core.agents) == args.agents
    per_agent = 1e6 / args.agents
    return {"cpu_us_per_agent": round(spent * per_agent, 2),
            "user_us_per_agent": round((after.ru_utime - before.ru_utime) * per_agent, 2),
            "system_us_per_agent": round((after.ru_stime - before.ru_stime) * per_agent, 2),
            "page_faults_per_agent": round((after.ru_minflt - before.ru_minflt) / args.agents, 3),
            "max_rss_mb": after.ru_maxrss // 1024, "prefault_s": round(prefault_s, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=20_000)
    parser.add_argument("--tasks-per-agent", type=int, default=10)
    parser.add_argument("--frameworks", type=int, default=4)
    parser.add_argument("--batch", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="plain,prefault")
    parser.add_argument("--prefault-mb", type=int, default=0,
                        help="the prefault variant's heap touched ahead (default: 16 KiB an agent)")
    parser.add_argument("--base-src", type=Path, default=None,
                        help="the tree of the base variant (its PYTHONPATH; needed for --variants ...,base)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--document", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--role", choices=("main", "document", "storm"), default="main", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "document":
        make_document(args)
        return
    if args.role == "storm":
        print(json.dumps(storm(args)))
        return
    variants = args.variants.split(",")
    unknown = set(variants) - VARIANTS.keys()
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}: take {sorted(VARIANTS)}")
    if "base" in variants and args.base_src is None:
        parser.error("the base variant needs --base-src")
    # the base tree's processes: its mesoslike first on the path (this script and bench/simagents.py are this tree's)
    base_env = {"PYTHONPATH": os.pathsep.join([str(args.base_src), os.environ.get("PYTHONPATH", "")])} \
        if args.base_src is not None else {}
    prefault_mb = args.prefault_mb or max(16, args.agents * 16 // 1024)
    result: dict = {"benchmark": "re-admission in a fresh process: user and system CPU, page faults an agent",
                    "command": "python " + " ".join(sys.argv), "agents": args.agents,
                    "tasks_per_agent": args.tasks_per_agent, "frameworks": args.frameworks, "batch": args.batch,
                    "prefault_mb": prefault_mb, "loadavg_start": list(os.getloadavg()),
                    "rounds": {variant: [] for variant in variants}}
    common = ["--agents", str(args.agents), "--tasks-per-agent", str(args.tasks_per_agent),
              "--frameworks", str(args.frameworks), "--batch", str(args.batch)]
    with tempfile.TemporaryDirectory(prefix="readmission-faults-") as scratch:
        document = Path(scratch) / "registry.pickle"
        subprocess.run([sys.executable, __file__, "--role", "document", "--document", str(document), *common],
                       check=True, env={**os.environ, **(base_env if "base" in variants else {})})
        for number in range(args.rounds):
            for variant in (variants if number % 2 == 0 else variants[::-1]):
                prefault = ["--prefault-mb", str(prefault_mb)] if variant == "prefault" else []
                measured_in_child([sys.executable, __file__, "--role", "storm", "--document", str(document),
                                   *common, *prefault],
                                  {**os.environ, **(base_env if variant == "base" else VARIANTS[variant])},
                                  result["rounds"], variant)
    write_result(result, args.out)


def measured_in_child(argv: list[str], env: dict[str, str], rounds: dict[str, list], variant: str,
                      cwd: str | None = None) -> None:
    """Run one measuring child process; the JSON line it prints goes to ``rounds[variant]``, and is shown."""
    done = subprocess.run(argv, check=True, capture_output=True, text=True, env=env, cwd=cwd)
    rounds[variant].append(json.loads(done.stdout))
    print(variant, done.stdout.strip(), flush=True)


def write_result(result: dict, out: Path | None) -> None:
    """The load at the end added, ``result`` written to ``out`` (or shown)."""
    result["loadavg_end"] = list(os.getloadavg())
    text = json.dumps(result, indent=2)
    if out is not None:
        out.write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
