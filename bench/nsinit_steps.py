#!/usr/bin/env python3
"""The CPU of each step of a task's container, timed inside its init: the
cgroup joins, each namespace's ``unshare``, ``/`` made a recursive slave,
the ``proc`` and ``/dev/shm`` mounts, the private ``/tmp``'s directory and
bind, the task's ``vfork``/``execve``/wait — as ``mesoslike/agent/nsinit.c``
takes them — by a small C program (``bench/nsinit_steps.c``, built here with
``cc -O2 -static``), launches one at a time, each in a PID namespace of its
own. What no step shows (the namespaces' and superblocks' teardown at the
init's exit, ``/bin/true``'s own start) is in the children's total; what
the kernel's threads do later for them, ``bench/ns_variants.py`` measures.

Variants, interleaved round by round: the init joining a cgroup in each of
the v1 hierarchies ``--hierarchies`` names (the agent's cgroups v1 isolator
joins ``memory``, ``cpu`` and ``cpuacct`` since ``agent29p``), with the
bench's directory below ``/tmp`` kept inside each private ``/tmp`` (its
place made and bound there, as the init does for a work directory below
``/tmp``: the default ``--work-dir``'s and the real agents' benchmark's)
and with nothing kept (a work directory elsewhere). Needs root
(namespaces, mounts, cgroups v1).

    python bench/nsinit_steps.py --launches 500 --rounds 6 --out bench/results/nsinit-steps-inits29r.json

Since agent29q the rounds' directories (where the ``/tmp`` directories are
made) are each in a block group of their own, as the agent's framework
directories are; the ``mkdir``'s price still moves with that group's
recent removals (``bench/agent_tmp_inodes.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import benchlib  # noqa: E402
from ns_variants import build, interleaved  # noqa: E402

sys.path.insert(0, str(HERE.parent))
from mesoslike.agent.executor import spread_children  # noqa: E402

CGROUPS_V1 = Path("/sys/fs/cgroup")


def parse(line: str, hierarchies: list[str]) -> dict[str, float]:
    """``name=value`` fields; the joins named by their hierarchies."""
    values = {}
    for field in line.split():
        name, _, value = field.partition("=")
        if name.startswith("join_"):
            name = "join_" + hierarchies[int(name[len("join_"):])]
        values[name] = float(value)
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--root", type=Path, default=Path("/tmp"),
                        help="where the private /tmp directories are made (a work directory's file system)")
    parser.add_argument("--hierarchies", default="memory,cpu,cpuacct",
                        help="the v1 hierarchies the init joins a cgroup in (those mounted)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    document, _, _ = benchlib.start("nsinit_steps", None, {"git_head": benchlib.git_state([])[0]})
    mounted = [name for name in args.hierarchies.split(",") if (CGROUPS_V1 / name / "cgroup.procs").exists()]
    work = Path(tempfile.mkdtemp(prefix="bench-nsinit-steps-", dir=args.root))
    # what each variant keeps inside its private /tmps: (the kept directory, its place there) or nothing
    variants: dict[str, tuple[str, str]] = {"kept: the work directory": (str(work), work.name),
                                            "kept: nothing": ("-", "-")}
    # each round's directory (the private /tmp directories' parent) in a block group of its own, as the agent's
    # framework directories are (its sandbox root is so marked): not in the group of --root's other users, whose
    # removals every inode made there pays for (bench/agent_tmp_inodes.py; stop 19, agent29q)
    spread_children(work)
    cgroups = {name: CGROUPS_V1 / name / "mesoslike" / f"nsinit-steps-{os.getpid()}" for name in mounted}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    loads = []
    try:
        for directory in cgroups.values():
            directory.mkdir(parents=True)
        binary = build(work, "nsinit_steps")
        for number, name in interleaved(list(variants), args.rounds):
            place = work / f"{number}-{list(variants).index(name)}"
            place.mkdir()
            done = subprocess.run([str(binary), str(args.launches), str(place), *variants[name],
                                   *(str(cgroups[h]) for h in mounted)], capture_output=True, text=True, check=True)
            rounds[name].append(parse(done.stdout, mounted))
            if any(len(values) <= number for values in rounds.values()):
                continue   # the round goes on
            loads.append([round(x, 2) for x in os.getloadavg()])
            print(f"round {number + 1}: {({name: values[-1] for name, values in rounds.items()})} "
                  f"load {loads[-1]}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for directory in cgroups.values():
            try:
                directory.rmdir()
            except OSError:
                pass
    medians = {name: {step: round(statistics.median(r[step] for r in values), 2) for step in values[0]}
               for name, values in rounds.items() if values}
    document.update({"launches_per_round": args.launches, "variants": variants, "joined": mounted,
                     "cpu_us_per_launch_median": medians, "cpu_us_per_launch_rounds": rounds,
                     "loadavg_per_round": loads})
    benchlib.emit(document, args.out, lambda line: print(line, file=sys.stderr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
