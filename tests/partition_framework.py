"""The partition suite's framework (tests/test_partitions.py): a workload that records every callback.

Run inside a framework node's namespace. It keeps ``--inflight`` tasks running (``sleep`` of a few
seconds, a quarter of them of tens of seconds, so that some span each fault), with ids unique over
the run, and writes every callback of the driver, every launch, kill and reconciliation it asks for,
as one JSON object per line to ``--history`` (times: ``t`` wall clock, ``m`` monotonic, comparable
with the test process's). After ``registered`` it reconciles implicitly; after ``reregistered`` it
reconciles explicitly by task id without agent ids (what a framework does when it knows its tasks
but not where they are) — the answers around a master failover are what the checker
(tests/partition_history.py) looks at.

SIGUSR1 winds it down: no more launches, every task not ended is killed (again every 2 s) and
reconciled, and once each launched task has a terminal state it logs ``drained``. SIGTERM stops the
driver (failover: the framework stays registered) and exits. A fatal error from the master (the
framework was removed after its failover timeout) ends the driver; the process exits 3.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import signal
import sys
import threading
import time

from mesoslike import DriverStatus, Filters, FrameworkInfo, Resources, Scheduler, SchedulerDriver, TaskInfo
from mesoslike.wire import TERMINAL_STATES

TASK_RESOURCES = Resources.parse("cpus:0.05;mem:8")


class Recorder(Scheduler):
    def __init__(self, history: str, prefix: str, inflight: int, seed: int) -> None:
        self._out = open(history, "a", buffering=1)
        self._lock = threading.Lock()
        self._prefix = prefix
        self._inflight = inflight
        self._rng = random.Random(seed)
        self._count = 0
        self.states: dict[str, str] = {}     # task id -> the latest state heard
        self.winding_down = False
        self.drained = False

    def log(self, event: str, **fields: object) -> None:
        with self._lock:
            self._out.write(json.dumps({"t": time.time(), "m": time.monotonic(), "ev": event, **fields}) + "\n")

    def live(self) -> list[str]:
        return [task_id for task_id, state in self.states.items() if state not in TERMINAL_STATES]

    # ------------------------------------------------------------ callbacks
    def registered(self, driver, framework_id, master_info):
        self.log("registered", framework_id=framework_id, master=master_info.id)
        driver.reconcile_tasks([])
        self.log("reconcile", tasks=[])

    def reregistered(self, driver, master_info):
        self.log("reregistered", master=master_info.id)
        live = sorted(self.live())
        driver.reconcile_tasks(live)   # by id only: the master must not answer ahead of the facts
        self.log("reconcile", tasks=live)

    def disconnected(self, driver):
        self.log("disconnected")

    def resource_offers(self, driver, offers):
        for offer in offers:
            # the master that made it: offer ids are <master id>-O<n>, or <master id>-T<term>-O<n> from the
            # second term of the same master (docs/reliability.rst)
            master = re.sub(r"-T\d+$", "", offer.id.rsplit("-O", 1)[0])
            self.log("offer", offer=offer.id, agent=offer.agent_id, master=master)
            room = self._inflight - len(self.live())
            if self.winding_down or room <= 0:
                driver.decline_offer(offer.id, Filters(refuse_seconds=1.0))
                continue
            tasks = []
            left = offer.resources
            while room > 0 and left.contains(TASK_RESOURCES):
                self._count += 1
                task_id = f"{self._prefix}-{self._count}"
                seconds = self._rng.uniform(15, 40) if self._rng.random() < 0.25 else self._rng.uniform(1, 5)
                tasks.append(TaskInfo(task_id, offer.agent_id, f"sleep {seconds:.1f}", TASK_RESOURCES))
                self.states[task_id] = "TASK_STAGING"
                left = left - TASK_RESOURCES
                room -= 1
            for task in tasks:
                self.log("launch", task=task.task_id, agent=offer.agent_id, offer=offer.id)
            driver.launch_tasks([offer.id], tasks, Filters(refuse_seconds=0.5))

    def offer_rescinded(self, driver, offer_id):
        self.log("rescinded", offer=offer_id)

    def status_update(self, driver, status):
        self.log("status", task=status.task_id, state=status.state, reason=status.reason, source=status.source,
                 agent=status.agent_id, uuid=status.uuid, message=status.message[:200])
        if status.task_id in self.states:
            self.states[status.task_id] = status.state

    def agent_lost(self, driver, agent_id):
        self.log("agent_lost", agent=agent_id)

    def error(self, driver, message):
        self.log("error", message=message[:500])


def main() -> int:
    parser = argparse.ArgumentParser(description="the partition suite's recording framework")
    parser.add_argument("--master", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--partition-aware", action="store_true")
    parser.add_argument("--failover-timeout", type=float, default=60.0)
    parser.add_argument("--inflight", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    recorder = Recorder(args.history, args.name, args.inflight, args.seed)
    info = FrameworkInfo(name=args.name, failover_timeout=args.failover_timeout, partition_aware=args.partition_aware)
    driver = SchedulerDriver(recorder, info, master=args.master)
    stopping = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: setattr(recorder, "winding_down", True))
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    recorder.log("start", name=args.name, partition_aware=args.partition_aware,
                 failover_timeout=args.failover_timeout)
    driver.start()
    last_kill = 0.0
    while not stopping.wait(0.25):
        if driver.join(timeout=0) is not DriverStatus.RUNNING:
            recorder.log("driver_ended")
            return 3
        if recorder.winding_down and not recorder.drained:
            live = recorder.live()
            if not live:
                recorder.drained = True
                recorder.log("drained")
            elif time.monotonic() - last_kill >= 2.0:
                last_kill = time.monotonic()
                driver.suppress_offers()
                for task_id in live:
                    driver.kill_task(task_id)
                driver.reconcile_tasks(live)
                recorder.log("kill", tasks=live)
    driver.stop(failover=True)
    recorder.log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
