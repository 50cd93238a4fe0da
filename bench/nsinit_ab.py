#!/usr/bin/env python3
"""The CPU of a task's init and the task itself — what the real agents'
benchmark counts as "inits and tasks" — for two builds of the init helper
(``mesoslike/agent/nsinit.c``: this tree's and another's), rounds
interleaved: each build served as the shared supervisor serves it (``nsinit
--serve`` with a status channel, channel requests, the inits this process's
children by ``CLONE_PARENT``), the default isolation's container (PID, mount,
IPC and UTS namespaces, the sandbox's ``tmp`` as ``/tmp`` with the work
directory kept inside it, the three v1 cgroups the agent gives a task
joined in its order: ``cpu``, ``cpuacct``, ``memory`` — ``pids`` too
before agent29p), the task ``sh -c true`` in its own sandbox with its
``stdout`` and ``stderr`` (``--task exit0``: a static program that only
exits, ``bench/nsinit_exit0.c``, so that the C library's start-up of
``sh`` — ~1 ms on this VM, moving with the host's load — does not bury the
inits' own CPU). Per launch: the CPU (user + system) of the inits
reaped — which waited for their tasks, so theirs is in it (``getrusage``'s
children) — and the system-wide minor page faults of the round over its
launches. No agent, no master, no Python supervisor: the helper alone.
Needs root (cgroups, namespaces).

    python bench/nsinit_ab.py --before main --launches 2000 --rounds 6 --out bench/results/nsinit-ab.json

``--root /dev/shm``: the sandboxes (so the private ``/tmp``, ``stdout`` and
``stderr``) on a ``tmpfs``, no work directory kept — the inits' CPU without
ext4's inodes, whose price moves with the machine's removals by more than
a change of the init's own work (stop 22, init22).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from mesoslike.agent import nsinit  # noqa: E402
from mesoslike.agent.shared_supervisor import INIT_BLOCKED  # noqa: E402

#: the v1 hierarchies of a task's cgroups, in the order the agent lists them (isolation.py: sorted)
HIERARCHIES = ("cpu", "cpuacct", "memory")
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "MESOS_TASK_ID": "t", "LANG": "C.UTF-8"}


def source_of(ref: str, into: Path) -> Path:
    """``nsinit.c`` as of ``ref`` (a git revision), or a file's path."""
    if os.path.exists(ref):
        return Path(ref)
    text = subprocess.run(["git", "show", f"{ref}:mesoslike/agent/nsinit.c"], cwd=HERE.parent, check=True,
                          capture_output=True).stdout
    path = into / f"nsinit-{ref.replace('/', '_')}.c"
    path.write_bytes(text)
    return path


def make_cgroups(name: str, count: int) -> list[list[str]]:
    slots = []
    for number in range(count):
        dirs = []
        for hierarchy in HIERARCHIES:
            path = f"/sys/fs/cgroup/{hierarchy}/{name}/s{number}"
            os.makedirs(path, exist_ok=True)
            dirs.append(path)
        slots.append(dirs)
    return slots


def remove_cgroups(name: str) -> None:
    for hierarchy in HIERARCHIES:
        top = f"/sys/fs/cgroup/{hierarchy}/{name}"
        if not os.path.isdir(top):
            continue
        for entry in os.listdir(top):
            if os.path.isdir(os.path.join(top, entry)):
                try:
                    os.rmdir(os.path.join(top, entry))
                except OSError:
                    pass
        try:
            os.rmdir(top)
        except OSError:
            pass


def minor_faults() -> int:
    with open("/proc/vmstat") as fh:
        for line in fh:
            if line.startswith("pgfault "):
                return int(line.split()[1])
    return 0


def one_round(helper: str, work: Path, launches: int, in_flight: int, slots: list[list[str]],
              argv: tuple[str, ...] = ("/bin/sh", "-c", "true")) -> dict:
    """``launches`` tasks through one server of ``helper``, ``in_flight`` at a time."""
    channel = nsinit.StatusChannel()
    server = nsinit.Server(helper, INIT_BLOCKED, channel)
    assert server.channel is not None, f"{helper} takes no channel requests"
    free = list(range(len(slots)))
    running: dict[int, int] = {}   # tag -> slot
    launched = reaped = 0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    faults = minor_faults()
    started = time.monotonic()
    try:
        while reaped < launches:
            while launched < launches and free:
                slot = free.pop()
                tag = launched
                sandbox = work / f"task{tag}"
                sandbox.mkdir()
                tmp = str(sandbox / "tmp")
                # the work directory's place in the private /tmp, as the agent keeps one below /tmp (none elsewhere)
                below = os.path.commonpath([str(work), "/tmp"]) == "/tmp"
                keep = [(str(work), os.path.join(tmp, os.path.relpath(work, "/tmp")))] if below else []
                spec = nsinit.encode_spec(namespaces=["pid", "mount", "ipc", "uts"], hostname="agent-1", tmp=tmp,
                                          keep=keep, volumes=[], user=None, cwd=str(sandbox), env=ENV,
                                          argv=list(argv), cgroups=slots[slot])
                assert server.submit_channel(tag, spec, str(sandbox / "stdout"), str(sandbox / "stderr"), None, True)
                running[tag] = slot
                launched += 1
            for answer in server.answers(wait=False):
                if isinstance(answer, OSError):
                    raise answer
            select.select([channel.read_end], [], [], 0.05)
            for tag, line in channel.read():
                if line.startswith(b"F"):
                    raise SystemExit(f"task {tag}: {line!r}")
                if line.startswith(b"X"):   # its cgroups taken again (its init about to end)
                    free.append(running.pop(tag))
            while True:   # the inits (children by CLONE_PARENT), reaped
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if pid != server.pid:
                    reaped += 1
    finally:
        server.close()
        channel.close()
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_ms_per_launch": round(cpu * 1000 / launches, 4),
            "user_ms_per_launch": round((after.ru_utime - before.ru_utime) * 1000 / launches, 4),
            "system_ms_per_launch": round((after.ru_stime - before.ru_stime) * 1000 / launches, 4),
            "minor_faults_per_launch": round((after.ru_minflt - before.ru_minflt) / launches, 1),
            "minor_faults_per_launch_systemwide": round((minor_faults() - faults) / launches, 1),
            "launches_per_s": round(launches / wall, 1), "loadavg": [round(x, 2) for x in os.getloadavg()]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="a git revision of nsinit.c, or a file's path")
    parser.add_argument("--after", default=str(HERE.parent / "mesoslike" / "agent" / "nsinit.c"),
                        help="nsinit.c measured against it (default: this tree's)")
    parser.add_argument("--launches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--task", choices=("sh", "exit0"), default="sh",
                        help="the task: sh -c true (as the benchmarks), or a static program that only exits")
    parser.add_argument("--root", default="/tmp",
                        help="where the sandboxes are made: /tmp (ext4 here: each inode's price moves with the "
                             "file system's recent removals), or e.g. /dev/shm to leave the inodes' price out")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    work_root = Path(tempfile.mkdtemp(prefix="bench-nsinit-ab-", dir=args.root))
    name = f"bench-nsinit-ab-{os.getpid()}"
    results: dict[str, list[dict]] = {"after": [], "before": []}
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        helpers = {}
        for which, ref in (("after", args.after), ("before", args.before)):
            place = work_root / f"build-{which}"
            place.mkdir()
            helpers[which] = nsinit.build(str(place), str(source_of(ref, place)))
        exit0 = work_root / "exit0"
        exit0_elsewhere = Path("/var/tmp") / f"bench-nsinit-ab-exit0-{os.getpid()}"
        if args.task == "exit0":
            subprocess.run([os.environ.get("CC", "cc"), "-O2", "-static", "-nostdlib", "-o", str(exit0),
                            str(HERE / "nsinit_exit0.c")], check=True)
            shutil.copy(exit0, exit0_elsewhere)
        slots = make_cgroups(name, args.in_flight)
        for number in range(args.rounds):
            order = ("after", "before") if number % 2 == 0 else ("before", "after")
            for which in order:
                work = work_root / f"{which}-{number}" / "work"
                work.mkdir(parents=True)
                argv: tuple[str, ...] = ("/bin/sh", "-c", "true")
                if args.task == "exit0":   # in the kept directory: the private /tmp hides the rest of /tmp
                    argv = (str(shutil.copy(exit0, work / "exit0")),)
                    if not work.is_relative_to("/tmp"):   # nothing kept (and a fresh /dev/shm): where it was built
                        argv = (str(exit0_elsewhere),)
                result = one_round(helpers[which], work, args.launches, args.in_flight, slots, argv)
                results[which].append(result)
                print(f"round {number + 1} {which}: {result}", file=sys.stderr, flush=True)
        medians = {which: {key: round(statistics.median(r[key] for r in rounds), 4)
                           for key in ("cpu_ms_per_launch", "user_ms_per_launch", "system_ms_per_launch",
                                       "minor_faults_per_launch", "minor_faults_per_launch_systemwide",
                                       "launches_per_s")}
                   for which, rounds in results.items()}
        document = {"command": " ".join(["nsinit_ab.py", *sys.argv[1:]]), "started": started,
                    "before": args.before, "after": args.after, "launches": args.launches,
                    "in_flight": args.in_flight, "task": args.task, "median": medians, "rounds": results}
        text = json.dumps(document, indent=1)
        if args.out:   # before the clean-up: thousands of sandboxes take a while to remove on a loaded machine
            args.out.write_text(text + "\n")
        print(text, flush=True)
    finally:
        remove_cgroups(name)
        exit0_elsewhere.unlink(missing_ok=True)
        shutil.rmtree(work_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
