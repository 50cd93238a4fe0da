#!/usr/bin/env python3
"""What each part of a task's container costs, in isolation: the CPU (user
+ system, of the launches and everything they started) of N launches of
``/bin/true`` in each variant of a container's set-up, by a small C program
(``bench/ns_variants.c``, built here with ``cc -O2 -static``), variants
interleaved round by round. The variants are those the namespace init helper
(``mesoslike/agent/nsinit.c``) could take: executed per task or cloned from
a server, the task forked or vforked, ``/`` a recursive slave or private,
each namespace and mount with or without. Needs root (namespaces, mounts).

The private ``/tmp`` directories are made in a directory below ``--root``
(``/tmp`` by default, the file system of a work directory there), one per
variant and round, moved aside — never deleted while the bench runs: on
ext4 without a journal, an inode is placed only after scanning past those
deleted in the last minutes (``recently_deleted``), which a deletion here
would make the next variant pay.

    python bench/ns_variants.py --launches 500 --rounds 5 --out bench/results/ns-variants.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import benchlib  # noqa: E402

#: seconds waited after a variant's launches before the kernel threads' CPU is read again
SETTLE = 0.2

PID, MOUNT, IPC, UTS, RSLAVE, RPRIVATE, PROC, SHM, TMP, VFORK, EXEC, VM, TEMPLATE, SHM_BIND = (
    1, 2, 4, 8, 16, 32, 64, 128, 256, 4096, 8192, 16384, 32768, 65536)
CONTAINER = PID | MOUNT | IPC | UTS | RSLAVE | PROC | SHM | TMP   # what the default isolation's init does
VARIANTS = {
    "exec_per_task_fork": CONTAINER | EXEC,          # the helper executed per task, the task forked (before)
    "clone_fork": CONTAINER,                         # cloned from a server, the task forked
    "clone_vfork": CONTAINER | VFORK,                # cloned from a server, the task vforked (now)
    "clone_vm_vfork": CONTAINER | VFORK | VM,        # the same cloned into the server's memory (CLONE_VM)
    "clone_vfork_rprivate": CONTAINER & ~RSLAVE | RPRIVATE | VFORK,
    "clone_vfork_no_tmp_dir": CONTAINER & ~TMP | VFORK,
    "pid_mount": PID | MOUNT | VFORK,
    "pid_ipc_uts": PID | IPC | UTS | VFORK,
    "pid_only": PID | VFORK,
    "pid_only_exec": PID | VFORK | EXEC,
    # a mount namespace made once (/ a recursive slave) that each launch's copies: no MS_SLAVE walk a launch
    "clone_vfork_template": CONTAINER & ~RSLAVE | TEMPLATE | VFORK,
    # /dev/shm a directory of one tmpfs bound in place, not a tmpfs of its own
    "clone_vfork_shm_bind": CONTAINER & ~SHM | SHM_BIND | VFORK,
    "clone_vfork_no_ipc": CONTAINER & ~IPC & ~SHM | VFORK,
    "clone_vfork_no_uts": CONTAINER & ~UTS | VFORK,
    "clone_vfork_no_proc": CONTAINER & ~PROC | VFORK,
}


def kernel_threads_cpu_ms() -> float:
    """The CPU time every kernel thread has run so far (``schedstat``, ns),
    in ms: where the deferred teardown of namespaces, mounts and
    superblocks runs (workqueues' ``kworker``, RCU callbacks), which the
    launches' own CPU leaves out. Other processes' work puts some here too:
    the variants are interleaved."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            if fields[1] != b"2" and entry.name != "2":   # the parent: kthreadd
                continue
            with open(f"/proc/{entry.name}/schedstat", "rb") as schedstat:
                total += int(schedstat.read().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e6


def build(into: Path, program: str = "ns_variants") -> Path:
    """``bench/PROGRAM.c`` built static into ``into``."""
    binary = into / program
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-Wall", "-static", "-o", str(binary),
                    str(HERE / f"{program}.c")], check=True)
    return binary


def interleaved(names: list[str], rounds: int) -> Iterator[tuple[int, str]]:
    """(round, variant) in the order measured: the variants' order reversed
    every other round, so that none is always first after another."""
    for number in range(rounds):
        for name in (names if number % 2 == 0 else list(reversed(names))):
            yield number, name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--root", type=Path, default=Path("/tmp"))
    parser.add_argument("--only", help="the variants measured, comma-separated (default: all)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    document, _, _ = benchlib.start("ns_variants", None, {"git_head": benchlib.git_state([])[0]})
    work = Path(tempfile.mkdtemp(prefix="bench-ns-variants-", dir=args.root))
    variants = {name: VARIANTS[name] for name in (args.only.split(",") if args.only else VARIANTS)}
    rounds: dict[str, list[float]] = {name: [] for name in variants}
    kernel: dict[str, list[float]] = {name: [] for name in variants}
    loads = []
    try:
        binary = build(work)
        for number, name in interleaved(list(variants), args.rounds):
            place = work / f"{name}-{number}"
            place.mkdir()
            kernel_before = kernel_threads_cpu_ms()
            done = subprocess.run([str(binary), str(args.launches), str(variants[name]), str(place)],
                                  capture_output=True, text=True, check=True)
            time.sleep(SETTLE)   # the deferred teardown of the last launches
            kernel[name].append(round((kernel_threads_cpu_ms() - kernel_before) / args.launches, 3))
            user, system = (float(x) for x in done.stdout.split())
            rounds[name].append(round(user + system, 3))
            if any(len(values) <= number for values in rounds.values()):
                continue   # the round goes on
            loads.append([round(x, 2) for x in os.getloadavg()])
            print(f"round {number + 1}: {({name: values[-1] for name, values in rounds.items()})} "
                  f"kernel threads {({name: values[-1] for name, values in kernel.items()})} "
                  f"load {loads[-1]}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: round(statistics.median(values), 3) for name, values in rounds.items()}
    document.update({"launches_per_round": args.launches, "variants": variants,
                     "cpu_ms_per_launch_median": medians, "cpu_ms_per_launch_rounds": rounds,
                     "kernel_threads_cpu_ms_per_launch_median":
                         {name: round(statistics.median(values), 3) for name, values in kernel.items()},
                     "kernel_threads_cpu_ms_per_launch_rounds": kernel,
                     "loadavg_per_round": loads})
    benchlib.emit(document, args.out, lambda line: print(line, file=sys.stderr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
