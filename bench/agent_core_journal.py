"""The agent's CPU a task in its core, its status updates and its journal
(no process started, no socket): a real ``AgentRuntime`` of one tree (its
core, its runtime's carrying out of the commands, its journal in a
temporary work directory, its executor's ``forget``) driven through a
task's life in loop turns — RUN_TASK (its records written where the launch
would be), then the acknowledgement of STARTING with the task's start,
then the acknowledgement of RUNNING with its end, then the acknowledgement
of the end (the forget) — ``--batch`` tasks a turn. Each tree
(``--before-tree``: another checkout, e.g. ``git archive main``) runs in a
child process per round, trees alternated; CPU is the child's
(``time.process_time``) over ``--tasks`` tasks, in µs a task, with the
journal's records and writes counted.

Each round also gives the journal's CPU alone (``journal_us_a_task``):
the same calls the run made of its ``CheckpointStore`` — the records
asked (``save_tasks``, the checkpoints as they were), the forgets — made
again into a fresh journal, best of 7: no core, no runtime.

The turns are the kindest to a tree that writes a task's records once a
turn (an acknowledgement and the next event always fall together here);
in the real-agent benchmark they fall together about one time in six.

    python bench/agent_core_journal.py --before-tree /var/tmp/main-tree --rounds 6 --out bench/results/agent-core-journal-NAME.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(tasks: int, batch: int) -> dict:
    import mesoslike
    from mesoslike.agent.runtime import AgentRuntime
    from mesoslike.agent.settings import AgentSettings
    from mesoslike.resources import Resources
    from mesoslike.wire import messages as m
    from mesoslike.wire.types import ContainerStatus, FrameworkInfo, MasterInfo, TaskInfo
    from mesoslike.young_collections import pass_over_young_objects_less_often

    pass_over_young_objects_less_often()   # as the agent's loop does
    work_dir = tempfile.mkdtemp(prefix="agent-core-journal-", dir="/var/tmp")
    runtime = AgentRuntime(AgentSettings(master="tcp://127.0.0.1:5050", work_dir=work_dir,
                                         resources="cpus:64;mem:65536"))
    core = runtime.core
    core.ip_address = "127.0.0.1"
    core.tick()
    core.on_message(m.AgentRegistered("agent-1", MasterInfo("m", "tcp://127.0.0.1:5050"), 1.0))
    runtime.checkpoints.start_journal([])
    journal = runtime.checkpoints.journal
    assert journal is not None
    framework = FrameworkInfo(name="bench", id="bench-F0001", role="*", failover_timeout=0.0)
    resources = Resources.parse("cpus:0.01;mem:16")
    container = ContainerStatus(["cgroups/cpu", "cgroups/mem", "namespaces/pid"], "", 0)
    write_due = getattr(runtime, "_write_checkpoints", lambda: None)   # (a tree that writes at once has none)
    store = runtime.checkpoints
    calls: list[tuple[str, tuple]] = []   # the store's calls, made again alone after the run
    for name in ("save_task", "save_tasks", "forget_task"):
        def noting(*args: object, _name: str = name, _real: object = getattr(store, name)) -> object:
            calls.append((_name, tuple(list(a) if isinstance(a, list) else a for a in args)))
            return _real(*args)   # type: ignore[operator]
        setattr(store, name, noting)

    def acks(ids: list[str]) -> None:
        heads = [core.pending_updates(framework.id, task_id)[0] for task_id in ids]
        runtime._carry_out(None, core.on_message(m.StatusUpdateAcks(
            [m.StatusUpdateAck("agent-1", framework.id, status.task_id, status.uuid) for status in heads])))

    before = dict(journal.counters)
    start = time.process_time()
    for first in range(0, tasks, batch):
        ids = [f"bench-{i}" for i in range(first, min(tasks, first + batch))]
        for task_id in ids:
            runtime._carry_out(None, core.on_message(m.RunTask(framework, TaskInfo(
                task_id=task_id, agent_id="agent-1", command="true", resources=resources, name="bench"))))
        write_due()   # where _launch_batch writes them, before the launch
        runtime._launches.clear()
        runtime._launch_queued_at.clear()
        runtime._send_outgoing()
        acks(ids)
        for task_id in ids:
            runtime._carry_out(None, core.on_task_started(framework.id, task_id, 4242, container))
        runtime._send_outgoing()
        acks(ids)
        for task_id in ids:
            runtime._carry_out(None, core.on_task_exited(framework.id, task_id, 0))
        runtime._send_outgoing()
        acks(ids)
        runtime._send_outgoing()
    cpu = time.process_time() - start
    counters = {k: journal.counters[k] - before[k] for k in journal.counters}
    runtime.checkpoints.close_journal()
    journal_cpu = journal_alone(type(store), calls, work_dir)
    return {"code": os.path.dirname(os.path.dirname(mesoslike.__file__)), "us_a_task": round(1e6 * cpu / tasks, 1),
            "journal_us_a_task": round(1e6 * journal_cpu / tasks, 2),
            "records_a_task": round(counters["records"] / tasks, 2), "bytes_a_task": round(counters["bytes"] / tasks),
            "work_dir": work_dir}


def journal_alone(store_class: type, calls: list[tuple[str, tuple]], work_dir: str, repeats: int = 7) -> float:
    """CPU seconds of ``calls`` made into a fresh journal, best of ``repeats``."""
    best = float("inf")
    for repeat in range(repeats):
        store = store_class(os.path.join(work_dir, f"journal-alone-{repeat}"))
        store.start_journal([])
        start = time.process_time()
        for name, args in calls:
            getattr(store, name)(*args)
        best = min(best, time.process_time() - start)
        store.close_journal()
    return best


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before-tree", type=Path, required=False)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=10, help="tasks a loop turn")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        result = child(args.tasks, args.batch)
        subprocess.run(["rm", "-rf", result.pop("work_dir")], check=False)
        print(json.dumps(result))
        return 0
    trees = {"this": ROOT, **({"before": args.before_tree} if args.before_tree else {})}
    # A B, B A, A B, ...: neither tree always runs first
    order = [(r + 1, name) for r in range(args.rounds) for name in (list(trees)[::1 if r % 2 == 0 else -1])]
    rounds = [measure(number, name, trees[name], args.tasks, args.batch) for number, name in order]
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "rounds": rounds}, indent=1) + "\n")
    return 0


def measure(number: int, name: str, tree: Path, tasks: int, batch: int) -> dict:
    """One round of one tree, in a child process of its own."""
    result = json.loads(subprocess.run(
        [sys.executable, __file__, "--child", "--tasks", str(tasks), "--batch", str(batch)],
        env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, check=True, capture_output=True, text=True).stdout)
    row = {"round": number, "tree": name, "load": os.getloadavg()[0], **result}
    print(row, flush=True)
    return row

if __name__ == "__main__":
    sys.exit(main())
