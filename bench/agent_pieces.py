"""The CPU of the pieces of a task's launch and end that stop 17 changed in
the agent and its shared supervisor, each alone in a loop (best of
``--repeat`` passes of ``--loops`` calls, ``time.process_time``), in this
tree and, with ``--before-tree``, in another tree's code (e.g. ``git
archive 40ede08 | tar -x -C DIR``), the two alternated ``--rounds``
times: the container spec of a command task, the launch file written
(``_write_run_files``), a run file's path (the shared supervisor's),
an exit status written over its placeholder as the shared supervisor
writes it (msgspec named to it, as the agent does), its ``X`` line decoded
by the agent, and the sweep of the pooled cgroups an agent does at its
first launch (over whatever the machine's cgroup bases hold). Each is
called through the tree's own code. Needs root (cgroups v1 or v2).

    python bench/agent_pieces.py --before-tree /tmp/agent29m-base --out bench/results/agent-pieces-agent29m.json
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
from datetime import datetime, timezone
from pathlib import Path

ISOLATION = "cgroups/cpu,cgroups/mem,filesystem/linux,namespaces/pid,namespaces/ipc,namespaces/uts"
STATUS = {"ended": True, "exit_code": 0, "signal": None, "reason": "", "message": "", "killed": False,
          "oom_kills": 0, "memory_peak_bytes": 1234567, "ended_at": 1796054885.1845965, "cgroups_kept": True}


def best_us(call, loops: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(loops):
            call()
        best = min(best, time.process_time() - started)
    return round(best / loops * 1e6, 2)


def measure(loops: int, repeat: int) -> dict:
    """The pieces in the code on ``sys.path`` (this process's tree)."""
    import msgspec

    from mesoslike.agent import shared_supervisor as shared
    from mesoslike.agent import supervisor_link
    from mesoslike.agent.executor import TaskExecutor
    from mesoslike.agent.isolation import Container, select_isolation, select_isolator
    from mesoslike.agent.secrets import TaskSecrets
    from mesoslike.wire.types import Resources, TaskInfo

    shared.launch_loads(os.path.dirname(os.path.dirname(os.path.abspath(msgspec.__file__))))   # as --msgspec
    sup = shared.sup   # the supervisor module the shared supervisor's code uses (as its process loads it)
    root = Path(tempfile.mkdtemp(prefix="bench-agent-pieces-"))
    try:
        executor = TaskExecutor(root / "agent", shared_supervisor=True,
                                isolation=select_isolation(ISOLATION, cgroups_root="bench-agent-pieces"))
        task = TaskInfo("t1", "agent-1", "true", Resources.parse("cpus:0.01;mem:16"))
        sandbox, run_dir = executor._task_paths("fw", "t1")
        os.makedirs(run_dir)
        os.makedirs(sandbox)
        executor._real_sandbox = (sandbox, str(sandbox))
        bases = executor.isolator.bases
        container = Container(executor.isolator.name, {c: f"{b}/x.pooled.abc" for c, b in bases.items()},
                              0.01, 16 << 20, True)
        spec = executor._container_spec("fw", task, "agent-1", sandbox, run_dir)
        exit_file = os.path.join(run_dir, "exit.json")
        told = json.dumps(STATUS, sort_keys=True, separators=(",", ":")).encode()
        shared_task = shared.SharedTask(str(run_dir), "fw/t1")
        swept = select_isolator("cgroups")

        def exit_status() -> None:
            sup.overwrite(exit_file, sup.exit_placeholder())   # the agent's blank, then the end's record
            sup.write_exit_status(exit_file, STATUS)

        return {
            "container_spec_us": best_us(lambda: executor._container_spec("fw", task, "agent-1", sandbox, run_dir),
                                         loops, repeat),
            "write_run_files_us": best_us(lambda: executor._write_run_files(
                run_dir, "fw", task, "agent-1", sandbox, container, dict(spec), TaskSecrets({}, [])), loops, repeat),
            "shared_run_file_path_us": best_us(lambda: shared_task.path("exit.json"), loops, repeat),
            "exit_status_written_us": best_us(exit_status, loops, repeat),
            "x_line_decoded_us": best_us(lambda: supervisor_link._exit_status_of(told), loops, repeat),
            # the agents' default cgroup bases, with what the machine left there; a prefix of no agent's:
            # nothing is removed
            "cgroup_sweep_ms": round(best_us(lambda: swept.sweep("bench-agent-pieces-none", set()),
                                             max(1, loops // 2000), repeat) / 1000, 2),
            "cgroup_base_entries": sum(len(os.listdir(b)) for b in set(swept.bases.values()) if os.path.isdir(b)),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-tree", type=Path, help="a source tree to measure alternately with this one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loops", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.loops, args.repeat)))
        return 0
    here = Path(__file__).resolve().parents[1]
    trees = {"this": here, **({"before": args.before_tree.resolve()} if args.before_tree else {})}
    rounds: dict[str, list[dict]] = {name: [] for name in trees}
    loads = [os.getloadavg()]
    for number in range(args.rounds):
        for name in (list(trees) if number % 2 == 0 else list(reversed(trees))):
            tree = trees[name]
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run([sys.executable, str(here / "bench" / "agent_pieces.py"), "--child",
                                  "--loops", str(args.loops), "--repeat", str(args.repeat)],
                                 env=env, cwd=tree, check=True, capture_output=True, text=True).stdout
            rounds[name].append(json.loads(out.splitlines()[-1]))
            print(f"round {number + 1} {name}: {rounds[name][-1]}", file=sys.stderr, flush=True)
    loads.append(os.getloadavg())
    keys = rounds["this"][0].keys()
    result = {"command": " ".join(["agent_pieces.py", *sys.argv[1:]]),
              "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "trees": {name: str(tree) for name, tree in trees.items()},
              "loadavg_start_end": [[round(x, 2) for x in load] for load in loads],
              "median": {name: {key: sorted(r[key] for r in rounds[name])[len(rounds[name]) // 2] for key in keys}
                         for name in trees},
              "rounds": rounds}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
