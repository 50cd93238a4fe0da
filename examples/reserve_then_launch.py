"""Dynamic reservations through offers (issue 18 §4).

A framework in role ``analytics``:

1. reserves ``cpus:0.5;mem:64`` of its first offer (``Reserve``): they
   become ``cpus(analytics,PRINCIPAL):0.5;...``, reserved for the role by
   the principal the driver's key authenticated as;
2. is offered them again, reserved — a framework in another role would
   never be — and launches a task on exactly them (``Launch``);
3. once the task finished, unreserves them (``Unreserve``) and checks the
   next offer holds them unreserved again.

Run it on a local cluster::

    mesoslike local -- python examples/reserve_then_launch.py

It prints each step and exits 0 when all three happened.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from mesoslike import (
    Filters,
    FrameworkInfo,
    Launch,
    Reserve,
    Resources,
    Scheduler,
    SchedulerDriver,
    TaskInfo,
    TaskState,
    Unreserve,
)

ROLE = "analytics"
WANTED = Resources.parse("cpus:0.5;mem:64")
AGAIN = Filters(refuse_seconds=0.0)   # offer the rest again at once: the example should not wait


class ReserveThenLaunch(Scheduler):
    def __init__(self) -> None:
        self.step = "reserve"
        self.agent_id = ""
        self.reserved = Resources()
        self.done = threading.Event()
        self.failed = ""
        self.lock = threading.Lock()

    def resource_offers(self, driver, offers) -> None:
        with self.lock:
            for offer in offers:
                mine = offer.resources.dynamically_reserved()
                if self.step == "reserve" and offer.resources.unreserved().contains(WANTED):
                    self.step, self.agent_id = "reserving", offer.agent_id
                    print(f"1. reserving {WANTED} on {offer.hostname} for role {ROLE}")
                    driver.accept_offers([offer.id], [Reserve(WANTED)], AGAIN)
                elif self.step == "reserving" and offer.agent_id == self.agent_id and mine:
                    self.step, self.reserved = "running", mine
                    print(f"2. offered {mine} reserved; launching a task on exactly them")
                    task = TaskInfo("on-reserved", offer.agent_id, "echo running on reserved resources", mine)
                    driver.accept_offers([offer.id], [Launch([task])], AGAIN)
                elif self.step == "unreserve" and offer.agent_id == self.agent_id and mine.contains(self.reserved):
                    self.step = "unreserving"
                    print(f"3. unreserving {self.reserved}")
                    driver.accept_offers([offer.id], [Unreserve(self.reserved)], AGAIN)
                elif self.step == "unreserving" and offer.agent_id == self.agent_id and not mine:
                    print(f"   offered {offer.resources.only(['cpus', 'mem'])} again, nothing reserved: done")
                    self.step = "done"
                    driver.decline_offer(offer.id, AGAIN)
                    self.done.set()
                else:
                    driver.decline_offer(offer.id, AGAIN)

    def status_update(self, driver, status) -> None:
        print(f"   {status.task_id}: {status.state} {status.message}".rstrip())
        with self.lock:
            if status.state == TaskState.FINISHED:
                self.step = "unreserve"
            elif status.terminal:
                self.failed = f"the task ended {status.state}: {status.message}"
                self.done.set()

    def error(self, driver, message) -> None:
        print(f"error: {message}", file=sys.stderr)
        self.failed = message
        self.done.set()


def main() -> int:
    parser = argparse.ArgumentParser(description="Reserve resources through an offer, launch on them, unreserve.")
    parser.add_argument("--master", default=os.environ.get("MESOSLIKE_MASTER", "tcp://127.0.0.1:5050"),
                        help="master address (default: $MESOSLIKE_MASTER or tcp://127.0.0.1:5050)")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    args = parser.parse_args()
    scheduler = ReserveThenLaunch()
    driver = SchedulerDriver(scheduler, FrameworkInfo(name="reserve-then-launch", role=ROLE), args.master)
    driver.start()
    try:
        if not scheduler.done.wait(args.timeout):
            print(f"gave up after {args.timeout:g} s at step {scheduler.step}", file=sys.stderr)
            return 1
    finally:
        driver.stop()
        driver.join(10)
    if scheduler.failed:
        return 1
    return 0 if scheduler.step == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
