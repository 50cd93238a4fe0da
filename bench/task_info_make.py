#!/usr/bin/env python3
"""What a framework pays to make a task: a ``TaskInfo`` made whole (its
metaclass's ``__call__``, keyword arguments, the conversion of its lists and
maps) against a copy of a template made once with its id and agent
(``TaskInfo.replace`` of fields its conversion does not touch:
``msgspec.structs.replace``, in C) — ``CommandScheduler``'s tasks, as it
makes them for each round of offers (docs/performance.rst, "Stop 17: the
control plane (ctl29o)"). CPU ns a task (``time.thread_time``), the two
interleaved, best of ``--rounds``; one JSON document.

    python bench/task_info_make.py --out bench/results/task-info-make-ctl29o.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000, help="tasks a round, each way")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", help="also write the JSON document here")
    args = parser.parse_args()

    from mesoslike.resources import Resources
    from mesoslike.wire import TaskInfo

    resources = Resources.parse("cpus:0.01;mem:1")
    environment: dict[str, str] = {}
    uris: list = []
    labels: list = []

    def whole(i: int) -> TaskInfo:   # CommandScheduler._new_task's call before
        return TaskInfo(task_id=f"run-{i}", agent_id="a1", command="true", resources=resources, name="run",
                        environment=environment, health_check=None, uris=uris, labels=labels, container=None,
                        shell=True)

    template = whole(0).replace(task_id="", agent_id="")

    def copied(i: int) -> TaskInfo:   # and now
        return template.replace(task_id=f"run-{i}", agent_id="a1")

    assert copied(7) == whole(7)
    best = {"made_whole_ns": float("inf"), "template_replaced_ns": float("inf")}
    load_before = [round(x, 2) for x in os.getloadavg()]
    for _ in range(args.rounds):
        for key, make in (("made_whole_ns", whole), ("template_replaced_ns", copied)):
            began = time.thread_time()
            for i in range(args.tasks):
                make(i)
            best[key] = min(best[key], (time.thread_time() - began) / args.tasks * 1e9)
    doc = {"command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
           "tasks_a_round": args.tasks, "rounds": args.rounds, "load_average_before": load_before,
           "load_average_after": [round(x, 2) for x in os.getloadavg()],
           **{key: round(value) for key, value in best.items()}}
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
