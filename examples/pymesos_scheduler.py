"""A pymesos scheduler on mesoslike: the only mesoslike-specific line is the import.

Runs N shell tasks (``echo``), each on 0.1 cpu and 32 MB, waits for all of
them to end and stops. Written exactly as for pymesos: plain dicts for the
framework and the tasks, offers and statuses as Mesos' JSON, the pymesos
callback names. Run it on a local cluster (which gives it
``$MESOSLIKE_MASTER`` and the keys of the authenticated cluster)::

    mesoslike local -- python examples/pymesos_scheduler.py 5

or against a master of your own: ``python examples/pymesos_scheduler.py 5
HOST:PORT`` (also ``tcp://HOST:PORT`` or ``zk://HOSTS/PATH``). Exits 0 once
every task finished. ``docs/framework-api.rst`` ("pymesos compatibility")
lists what maps to what.
"""

import getpass
import logging
import os
import sys
import threading

# with pymesos this line is: from pymesos import MesosSchedulerDriver, Scheduler
from mesoslike.compat.pymesos import MesosSchedulerDriver, Scheduler

TASK_CPUS = 0.1
TASK_MEM = 32.0
TERMINAL = {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED", "TASK_GONE"}


def scalar(resources, name):
    """The quantity of a SCALAR resource in an offer's resource list."""
    return sum(r["scalar"]["value"] for r in resources if r["name"] == name and r["type"] == "SCALAR")


class EchoScheduler(Scheduler):
    def __init__(self, count):
        self.count = count
        self.launched = 0
        self.ended = {}          # task id -> terminal state
        self.lock = threading.Lock()

    def registered(self, driver, frameworkId, masterInfo):
        print(f"registered as {frameworkId['value']} with the master at {masterInfo['hostname']}:"
              f"{masterInfo['port']}")

    def resourceOffers(self, driver, offers):
        for offer in offers:
            cpus, mem = scalar(offer["resources"], "cpus"), scalar(offer["resources"], "mem")
            tasks = []
            while self.launched < self.count and cpus >= TASK_CPUS and mem >= TASK_MEM:
                task_id = f"echo-{self.launched}"
                tasks.append({
                    "task_id": {"value": task_id},
                    "agent_id": offer["agent_id"],
                    "name": task_id,
                    "command": {"value": f"echo hello from {task_id} on {offer['hostname']}"},
                    "resources": [
                        {"name": "cpus", "type": "SCALAR", "scalar": {"value": TASK_CPUS}},
                        {"name": "mem", "type": "SCALAR", "scalar": {"value": TASK_MEM}},
                    ],
                })
                cpus, mem = cpus - TASK_CPUS, mem - TASK_MEM
                self.launched += 1
            if tasks:
                driver.launchTasks(offer["id"], tasks, {"refuse_seconds": 5})
            else:
                driver.declineOffer(offer["id"], {"refuse_seconds": 30})
        if self.launched >= self.count:
            driver.suppressOffers()

    def statusUpdate(self, driver, update):
        task_id, state = update["task_id"]["value"], update["state"]
        print(f"{task_id}: {state} {update.get('message', '')}".rstrip())
        if state in TERMINAL:
            with self.lock:
                self.ended[task_id] = state
                if len(self.ended) == self.count:
                    driver.stop()

    def error(self, driver, message):
        print(f"error: {message}", file=sys.stderr)


def main(count=5, master=None):
    logging.basicConfig(level=logging.WARNING)
    master = master or os.environ.get("MESOSLIKE_MASTER", "127.0.0.1:5050")
    framework = {"name": "pymesos-echo", "user": getpass.getuser(), "failover_timeout": 0}
    scheduler = EchoScheduler(count)
    driver = MesosSchedulerDriver(scheduler, framework, master)
    driver.run()
    finished = sum(state == "TASK_FINISHED" for state in scheduler.ended.values())
    print(f"{finished}/{count} tasks finished")
    return 0 if finished == count else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5, sys.argv[2] if len(sys.argv) > 2 else None))
