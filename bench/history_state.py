#!/usr/bin/env python3
"""What the history costs ``/state`` (docs/operations.rst): a master core
holding the default history in full — 50 completed frameworks and one live
one, each with 1,000 ended tasks — against the baseline of the same cluster
with no history (both bounds 0), measured in the same run.

Timed with ``time.perf_counter``, the best of ``--repeat``: the snapshot (taken
under the master's lock) and the rendering to JSON (outside it).

    python bench/history_state.py [--out bench/results/history_state.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib  # noqa: E402

from mesoslike.clock import FakeClock  # noqa: E402
from mesoslike.master import MasterConfig, MasterCore  # noqa: E402
from mesoslike.master.state import render_state, snapshot  # noqa: E402
from mesoslike.resources import Resources  # noqa: E402
from mesoslike.wire import AgentInfo, Filters, FrameworkInfo, MasterInfo, TaskInfo, TaskState, TaskStatus  # noqa: E402
from mesoslike.wire import messages as m  # noqa: E402

AGENT = b"agent"
TASK = Resources.parse("cpus:0.01;mem:1")


def cluster(frameworks: int, tasks: int, keep_frameworks: int, keep_tasks: int) -> MasterCore:
    """A core whose ``frameworks`` frameworks each ran and ended ``tasks``
    tasks; all but the last torn down."""
    clock = FakeClock()
    core = MasterCore(clock, MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig(
        offer_timeout=None, max_completed_frameworks=keep_frameworks, completed_tasks_per_framework=keep_tasks))
    core.on_message(AGENT, m.RegisterAgent(AgentInfo("node-0", Resources.parse("cpus:100000;mem:10000000"))))
    agent_id = next(iter(core.agents))
    for n in range(frameworks):
        peer = f"fw{n}".encode()
        core.on_message(peer, m.Subscribe(FrameworkInfo(name=f"job{n}")))
        framework_id = core.framework_book.on(peer).id
        clock.advance(1.0)
        offer = next(s.message.offers[0] for s in core.tick() if s.peer == peer and isinstance(s.message, m.Offers))
        ids = [f"t{i}" for i in range(tasks)]
        core.on_message(peer, m.Accept(framework_id, [offer.id], [TaskInfo(t, agent_id, "true", TASK) for t in ids],
                                       Filters(0.0)))
        for task_id in ids:
            uuid = f"{n}-{task_id}"
            core.on_message(AGENT, m.StatusUpdate(framework_id, TaskStatus(task_id, TaskState.FINISHED, uuid=uuid)))
            core.on_message(peer, m.Acknowledge(framework_id, agent_id, task_id, uuid))
        if n < frameworks - 1:
            core.on_message(peer, m.Teardown(framework_id))
    return core


def measure(core: MasterCore, repeat: int) -> dict:
    snapshots, renders, size = [], [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        taken = snapshot(core)
        taken_at = time.perf_counter()
        body = json.dumps(render_state(taken)).encode()
        snapshots.append(taken_at - started)
        renders.append(time.perf_counter() - taken_at)
        size = len(body)
    doc = render_state(snapshot(core))
    return {"snapshot_under_lock_ms": round(min(snapshots) * 1e3, 3), "render_json_ms": round(min(renders) * 1e3, 1),
            "body_bytes": size, "completed_frameworks": len(doc["completed_frameworks"]),
            "completed_tasks": sum(len(f["completed_tasks"]) for f in doc["frameworks"] + doc["completed_frameworks"])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the JSON document here")
    parser.add_argument("--repeat", type=int, default=5, help="measurements of each; the best is kept")
    args = parser.parse_args(argv)
    code = ["mesoslike/master/history.py", "mesoslike/master/state.py", "mesoslike/master/core.py"]
    head, dirty = benchlib.git_state(code)
    doc, started, load = benchlib.start("history_state", argv, {"git_head": head, "dirty": dirty,
                                                                  "files": benchlib.blob_ids(code)})
    doc["baseline_no_history"] = measure(cluster(51, 1000, 0, 0), args.repeat)
    doc["default_history_full"] = measure(cluster(51, 1000, 50, 1000), args.repeat)
    benchlib.finish(doc, started, load, Path(args.out) if args.out else None,
                    lambda line: print(line, file=sys.stderr))


if __name__ == "__main__":
    main()
