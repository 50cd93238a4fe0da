"""A pymesos scheduler and its pymesos executor on mesoslike (scheduler and
executor in one file); the only mesoslike-specific line is the import.

The scheduler launches N tasks on a custom executor (``"executor"`` in the
task dicts, as with pymesos). Each agent starts the executor once — one
long-lived process runs all the tasks sent there — and the executor answers
each task's ``data`` (a number) with its square through
``sendFrameworkMessage``, then finishes the task. The scheduler's
``frameworkMessage`` collects the answers (with the executor's id), and it
stops once every task ended. Run it on a local cluster::

    mesoslike local --agents 2 -- python examples/pymesos_executor.py 20

or against a master of your own: ``python examples/pymesos_executor.py 20
HOST:PORT``. Exits 0 once every task finished and every square came back.
``docs/framework-api.rst`` ("pymesos compatibility", "Executors") lists
what maps to what.
"""

import getpass
import logging
import os
import sys
import threading

# with pymesos this line is:
# from pymesos import Executor, MesosExecutorDriver, MesosSchedulerDriver, Scheduler, decode_data, encode_data
from mesoslike.compat.pymesos import (Executor, MesosExecutorDriver, MesosSchedulerDriver, Scheduler, decode_data,
                                      encode_data)

TASK_CPUS, TASK_MEM = 0.05, 8.0
EXECUTOR_CPUS, EXECUTOR_MEM = 0.1, 64.0
TERMINAL = {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED", "TASK_GONE"}


# ------------------------------------------------------------- the executor
class SquaresExecutor(Executor):
    def launchTask(self, driver, task):
        driver.sendStatusUpdate({"task_id": task["task_id"], "state": "TASK_RUNNING"})
        n = int(decode_data(task["data"]))
        driver.sendFrameworkMessage(encode_data(f"{task['task_id']['value']} {n * n} {os.getpid()}".encode()))
        driver.sendStatusUpdate({"task_id": task["task_id"], "state": "TASK_FINISHED"})


# ------------------------------------------------------------ the scheduler
def scalar(resources, name):
    return sum(r["scalar"]["value"] for r in resources if r["name"] == name and r["type"] == "SCALAR")


def resources(cpus, mem):
    return [{"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}}]


class SquaresScheduler(Scheduler):
    def __init__(self, count):
        self.count = count
        self.launched = 0
        self.started_on = set()   # agents whose executor is started (its resources are taken once)
        self.ended = {}           # task id -> terminal state
        self.squares = {}         # task id -> (square, executor id, pid)
        self.lock = threading.Lock()
        self.executor = {
            "executor_id": {"value": "squares"}, "name": "squares",
            "command": {"value": f"{sys.executable} {os.path.abspath(__file__)} --executor"},
            "resources": resources(EXECUTOR_CPUS, EXECUTOR_MEM),
        }

    def resourceOffers(self, driver, offers):
        for offer in offers:
            agent = offer["agent_id"]["value"]
            cpus, mem = scalar(offer["resources"], "cpus"), scalar(offer["resources"], "mem")
            if agent not in self.started_on:
                cpus, mem = cpus - EXECUTOR_CPUS, mem - EXECUTOR_MEM
            tasks = []
            while self.launched < self.count and cpus >= TASK_CPUS and mem >= TASK_MEM:
                n = self.launched
                tasks.append({"task_id": {"value": f"square-{n}"}, "agent_id": offer["agent_id"],
                              "name": f"square-{n}", "executor": self.executor, "data": encode_data(str(n)),
                              "resources": resources(TASK_CPUS, TASK_MEM)})
                cpus, mem = cpus - TASK_CPUS, mem - TASK_MEM
                self.launched += 1
            if tasks:
                self.started_on.add(agent)
                driver.launchTasks(offer["id"], tasks, {"refuse_seconds": 5})
            else:
                driver.declineOffer(offer["id"], {"refuse_seconds": 30})
        if self.launched >= self.count:
            driver.suppressOffers()

    def frameworkMessage(self, driver, executorId, agentId, message):
        task_id, square, pid = decode_data(message).decode().split()
        with self.lock:
            self.squares[task_id] = (int(square), executorId["value"], int(pid))
            self._stop_when_done(driver)

    def statusUpdate(self, driver, update):
        task_id, state = update["task_id"]["value"], update["state"]
        if state in TERMINAL:
            with self.lock:
                self.ended[task_id] = state
                if state != "TASK_FINISHED":
                    print(f"{task_id}: {state} {update.get('message', '')}")
                self._stop_when_done(driver)

    def _stop_when_done(self, driver):
        # a task's square and its TASK_FINISHED take different paths: wait for both
        if len(self.ended) == self.count and (len(self.squares) == self.count
                                              or any(s != "TASK_FINISHED" for s in self.ended.values())):
            driver.stop()

    def error(self, driver, message):
        print(f"error: {message}", file=sys.stderr)


def main(count=20, master=None):
    logging.basicConfig(level=logging.WARNING)
    scheduler = SquaresScheduler(count)
    framework = {"name": "pymesos-squares", "user": getpass.getuser(), "failover_timeout": 0}
    driver = MesosSchedulerDriver(scheduler, framework,
                                  master or os.environ.get("MESOSLIKE_MASTER", "127.0.0.1:5050"))
    driver.run()
    finished = sum(state == "TASK_FINISHED" for state in scheduler.ended.values())
    right = sum(square == int(task_id.split("-")[1]) ** 2 for task_id, (square, _, _) in scheduler.squares.items())
    processes = {pid for _, _, pid in scheduler.squares.values()}
    print(f"{finished}/{count} tasks finished, {right} squares right, on {len(processes)} executor processes "
          f"({', '.join(sorted({executor for _, executor, _ in scheduler.squares.values()}))})")
    return 0 if finished == right == count else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--executor"]:
        MesosExecutorDriver(SquaresExecutor()).run()
    else:
        sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20, sys.argv[2] if len(sys.argv) > 2 else None))
