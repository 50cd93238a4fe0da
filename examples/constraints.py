"""A framework placing its tasks by agent attributes (issue 18 §5, §5b).

It runs ``--replicas`` copies of a small service (here ``sleep``) under
Marathon-style constraints — by default one per host, spread evenly over
the agents' ``room`` attribute — using the pure constraints module that
``mesoslike run --constraint`` uses, and labels each task (``replica``,
``room``), which come back in the status updates and show in ``/state``.
It prints the typed attributes of every agent it is offered, where each
replica landed, and exits 0 once every replica ran and finished::

    mesoslike local --agents 4 -- python examples/constraints.py
    mesoslike local --agents 4 -- python examples/constraints.py --constraint room:CLUSTER:er1 --replicas 2

(``mesoslike local`` gives agent *i* the attribute ``room:er<i mod 2>``;
a cluster of your own may use any, e.g. ``mesoslike agent --attributes
"rack:r1;ssd:true;level:3"`` and ``--constraint level:LIKE:[3-9]``.)
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from mesoslike import Filters, FrameworkInfo, Label, Resources, Scheduler, SchedulerDriver, TaskInfo, TaskState
from mesoslike_frameworks.constraints import ConstraintError, Placements, parse_constraints

SLOT = Resources(cpus=0.1, mem=32)


class PlacingScheduler(Scheduler):
    """Launches each replica on the first offer every constraint accepts."""

    def __init__(self, replicas: int, placements: Placements, seconds: float) -> None:
        self.replicas = replicas
        self.placements = placements
        self.command = f"sleep {seconds:g}"
        self.launched: dict[str, str] = {}     # task id -> hostname
        self.ended: dict[str, str] = {}        # task id -> its terminal state
        self.seen_agents: set[str] = set()
        self.done = threading.Event()

    def resource_offers(self, driver, offers) -> None:
        for offer in offers:
            if offer.hostname not in self.seen_agents:
                self.seen_agents.add(offer.hostname)
                typed = ", ".join(f"{a.name}={a.value!r} ({a.type})" for a in offer.typed_attributes.values())
                print(f"agent {offer.hostname}: {typed or 'no attributes'}")
            tasks = []
            free = offer.resources
            while len(self.launched) < self.replicas and free.contains(SLOT) \
                    and self.placements.refusing(offer.hostname, offer.attributes) is None:
                replica = len(self.launched)
                task_id = f"replica-{replica}"
                labels = [Label("replica", str(replica)), Label("room", offer.attributes.get("room", ""))]
                tasks.append(TaskInfo(task_id=task_id, agent_id=offer.agent_id, command=self.command,
                                      resources=SLOT, name="replica", labels=labels))
                self.placements.place(task_id, offer.hostname, offer.attributes)
                self.launched[task_id] = offer.hostname
                free = free - SLOT
            if tasks:
                driver.launch_tasks([offer.id], tasks)
            else:
                driver.decline_offer(offer.id, Filters(refuse_seconds=1.0))

    def status_update(self, driver, status) -> None:
        labels = {label.key: label.value for label in status.labels}
        if status.state == TaskState.RUNNING:
            print(f"{status.task_id} running on {self.launched.get(status.task_id, '?')} (labels {labels})")
        if status.terminal:
            self.ended[status.task_id] = status.state
            if len(self.ended) == self.replicas:
                self.done.set()

    def error(self, driver, message: str) -> None:
        print(f"error: {message}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description="Place replicas by agent attributes.")
    parser.add_argument("--master", default=os.environ.get("MESOSLIKE_MASTER", "tcp://127.0.0.1:5050"),
                        help="master address (default: $MESOSLIKE_MASTER or tcp://127.0.0.1:5050)")
    parser.add_argument("--replicas", type=int, default=4, help="how many replicas (default 4)")
    parser.add_argument("--constraint", action="append", default=None, metavar="FIELD:OP[:VALUE]",
                        help="a Marathon-style constraint, repeatable "
                             "(default: hostname:UNIQUE and room:GROUP_BY:2)")
    parser.add_argument("--seconds", type=float, default=2.0, help="how long each replica runs")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    args = parser.parse_args()
    try:
        constraints = parse_constraints(args.constraint or ["hostname:UNIQUE", "room:GROUP_BY:2"])
    except ConstraintError as exc:
        parser.error(str(exc))
    scheduler = PlacingScheduler(args.replicas, Placements(constraints), args.seconds)
    framework = FrameworkInfo(name="placing-example", labels={"example": "constraints"})
    driver = SchedulerDriver(scheduler, framework, args.master)
    driver.start()
    finished = scheduler.done.wait(args.timeout)
    driver.stop()
    driver.join(10)
    if not finished:
        print(f"gave up: {len(scheduler.launched)} of {args.replicas} replicas placed "
              f"under {', '.join(map(str, constraints))}", file=sys.stderr)
        return 1
    hosts = sorted(scheduler.launched.values())
    print(f"placed {args.replicas} replicas on {hosts} under {', '.join(map(str, constraints))}")
    return 0 if all(state == TaskState.FINISHED for state in scheduler.ended.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
