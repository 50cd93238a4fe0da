"""A long-lived custom executor running many short tasks, with framework
messages both ways (docs/framework-api.rst, "Custom executors").

The scheduler launches ``--tasks`` tiny tasks ("square N"), all naming one
``ExecutorInfo``: each agent starts the executor (this file, run with
``--executor``) once, for the first task it gets, and hands it every later
one. The executor computes each square in a thread, reports the task
FINISHED, and sends the result to the scheduler as a framework message. When
every result is in, the scheduler says ``bye`` to each executor (a framework
message the other way); each answers and stops. Run it against a local
cluster::

    mesoslike local -- python examples/executor_many_tasks.py --tasks 50

It prints how many executor processes ran the tasks (one per agent used)
and exits 0 if every square came back right.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import uuid

from mesoslike import (ExecutorInfo, Filters, FrameworkInfo, Resources, Scheduler, SchedulerDriver, TaskInfo,
                       TaskState, TaskStatus)
from mesoslike.executor import Executor, ExecutorDriver

TASK = Resources.parse("cpus:0.05;mem:8")
#: this executor process, as the scheduler tells one from another (not its pid: each executor runs in
#: a PID namespace of its own, where every one is pid 2 — docs/containers.rst)
PROCESS = uuid.uuid4().hex[:12]
EXECUTOR = ExecutorInfo("squares", f"{sys.executable} {os.path.abspath(__file__)} --executor",
                        Resources.parse("cpus:0.2;mem:64"), name="squares executor")


# ------------------------------------------------------------ the executor
class SquaresExecutor(Executor):
    """Runs each task ("square N") in a thread of this one process."""

    def launch_task(self, driver, task):
        def run():
            driver.send_status_update(TaskStatus(task.task_id, TaskState.RUNNING, message=f"process {PROCESS}"))
            number = int(task.command.split()[1])
            driver.send_framework_message(f"result {task.task_id} {number * number} {PROCESS}".encode())
            driver.send_status_update(TaskStatus(task.task_id, TaskState.FINISHED))
        threading.Thread(target=run, daemon=True).start()

    def framework_message(self, driver, data):
        if data == b"bye":
            driver.send_framework_message(f"bye {PROCESS}".encode())
            driver.stop()

    def shutdown(self, driver):
        print("shut down by the agent", file=sys.stderr)


# ------------------------------------------------------------ the scheduler
class SquaresScheduler(Scheduler):
    def __init__(self, count: int) -> None:
        self.pending = list(range(count))
        self.count = count
        self.results: dict[str, int] = {}
        self.ran_by: dict[str, str] = {}       # task id -> the executor process that computed it
        self.finished: set[str] = set()
        self.failed: list[TaskStatus] = []
        self.executors: dict[str, bool] = {}    # agent id -> said bye
        self.lock = threading.Lock()
        self.done = threading.Event()

    def resource_offers(self, driver, offers):
        for offer in offers:
            left, tasks = offer.resources, []
            with self.lock:
                while self.pending:
                    need = TASK if offer.agent_id in self.executors else TASK + EXECUTOR.resources
                    if not left.contains(need):
                        break
                    number = self.pending.pop()
                    tasks.append(TaskInfo(f"square-{number}", offer.agent_id, f"square {number}", TASK,
                                          executor=EXECUTOR))
                    self.executors.setdefault(offer.agent_id, False)
                    left = left - need
            if tasks:
                driver.launch_tasks([offer.id], tasks, Filters(refuse_seconds=1.0))
            else:
                driver.decline_offer(offer.id, Filters(refuse_seconds=30.0))

    def status_update(self, driver, status):
        with self.lock:
            if status.state == TaskState.FINISHED:
                self.finished.add(status.task_id)
            elif status.terminal:
                self.failed.append(status)
        self._maybe_done(driver)

    def framework_message(self, driver, agent_id, data):
        words = data.decode().split()
        with self.lock:
            if words[0] == "result":
                self.results[words[1]] = int(words[2])
                self.ran_by[words[1]] = words[3]
            elif words[0] == "bye":
                self.executors[agent_id] = True
                if all(self.executors.values()):
                    self.done.set()
        self._maybe_done(driver)

    def _maybe_done(self, driver):
        with self.lock:
            if self.failed:
                self.done.set()
                return
            complete = len(self.finished) == len(self.results) == self.count
            if not complete or any(self.executors.values()):
                return
            agents = list(self.executors)
        for agent_id in agents:   # every result is in: send the executors home
            driver.send_framework_message(agent_id, b"bye", "", executor_id=EXECUTOR.executor_id)


def main() -> int:
    parser = argparse.ArgumentParser(description="Many short tasks on one long-lived executor per agent.")
    parser.add_argument("--master", default=os.environ.get("MESOSLIKE_MASTER", "tcp://127.0.0.1:5050"),
                        help="master address (default: $MESOSLIKE_MASTER or tcp://127.0.0.1:5050)")
    parser.add_argument("--tasks", type=int, default=50, help="how many tasks (default 50)")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
    parser.add_argument("--executor", action="store_true", help="run as the executor (the agent does this)")
    args = parser.parse_args()
    if args.executor:
        status = ExecutorDriver(SquaresExecutor()).run()
        return 0 if status.value == "DRIVER_STOPPED" else 1
    scheduler = SquaresScheduler(args.tasks)
    driver = SchedulerDriver(scheduler, FrameworkInfo(name="squares-example"), args.master)
    driver.start()
    finished = scheduler.done.wait(args.timeout)
    driver.stop()
    driver.join(10)
    wrong = {t: v for t, v in scheduler.results.items() if v != int(t.split("-")[1]) ** 2}
    if not finished or scheduler.failed or wrong:
        print(f"failed: {len(scheduler.finished)} of {args.tasks} finished, failures {scheduler.failed}, "
              f"wrong results {wrong}", file=sys.stderr)
        return 1
    processes = sorted(set(scheduler.ran_by.values()))
    print(f"{args.tasks} tasks finished on {len(processes)} executor process(es) "
          f"(one per agent used: {len(scheduler.executors)}); every square right; every executor said bye")
    return 0


if __name__ == "__main__":
    sys.exit(main())
