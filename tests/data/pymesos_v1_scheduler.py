"""A scheduler written only against pymesos's public API (pymesos 0.3.15
from PyPI), for tests/test_pymesos_v1.py: it runs on a mesoslike master's v1
scheduler API, authenticated with HTTP Basic (a principal and its token).

It launches a command task, a task that sleeps (and kills it), and a task of
a custom executor (tests/data/pymesos_v1_executor.py, on pymesos's executor
driver), then checks what Mesos frameworks rely on: status ``data`` byte for
byte (NUL included), ``message``/``reason``/``source``/``healthy`` as sent,
``container_status``'s address, framework messages both ways,
``executorLost`` when the executor exits. It prints its findings as JSON on
its last line and exits 0 if they are all as expected.

Usage: pymesos_v1_scheduler.py MASTER PRINCIPAL SECRET EXECUTOR_COMMAND
"""

import getpass
import json
import sys
import threading

from pymesos import MesosSchedulerDriver, Scheduler, decode_data, encode_data

RUNNING_DATA = b"\x00started\x00\xff\xfe"
FINISHED_DATA = b"result:\x00\x01\x02" + bytes(range(256))
PING, PONG = b"ping\x00", b"pong\x00\xff"


def resources(cpus, mem):
    return [dict(name="cpus", type="SCALAR", scalar=dict(value=cpus)),
            dict(name="mem", type="SCALAR", scalar=dict(value=mem))]


class Checker(Scheduler):
    def __init__(self, executor_command):
        self.executor = dict(executor_id=dict(value="checker"), name="checker",
                             command=dict(value=executor_command), resources=resources(0.1, 32))
        self.lock = threading.Lock()
        self.launched = False
        self.found = {"states": {}, "problems": []}
        self.done = threading.Event()
        self.wanted = {"command", "killed", "executor", "pong", "executor_lost"}

    def note(self, what, value=True):
        with self.lock:
            self.found[what] = value
            if self.wanted <= set(self.found):
                self.done.set()

    def problem(self, text):
        with self.lock:
            self.found["problems"].append(text)

    def registered(self, driver, framework_id, master_info):
        self.note("framework_id", framework_id["value"])

    def resourceOffers(self, driver, offers):
        for offer in offers:
            if self.launched:
                driver.declineOffer(offer["id"], dict(refuse_seconds=60))
                continue
            self.launched = True
            agent = offer["agent_id"]
            tasks = [
                dict(task_id=dict(value="command"), agent_id=agent, name="command", resources=resources(0.1, 32),
                     command=dict(value="echo from the command task")),
                dict(task_id=dict(value="sleeper"), agent_id=agent, name="sleeper", resources=resources(0.1, 32),
                     command=dict(value="sleep 300")),
                dict(task_id=dict(value="executor"), agent_id=agent, name="executor", resources=resources(0.1, 32),
                     executor=self.executor, data=encode_data(b"task data\x00")),
            ]
            driver.launchTasks(offer["id"], tasks, dict(refuse_seconds=60))

    def statusUpdate(self, driver, status):
        task, state = status["task_id"]["value"], status["state"]
        with self.lock:
            self.found["states"].setdefault(task, []).append(state)
        if task == "sleeper" and state == "TASK_RUNNING":
            driver.killTask(status["task_id"])
        elif task == "sleeper" and state == "TASK_KILLED":
            self.note("killed")
        elif task == "command" and state == "TASK_FINISHED":
            address = status.get("container_status", {}).get("network_infos", [{}])[0] \
                .get("ip_addresses", [{}])[0].get("ip_address")
            self.note("command", {"source": status.get("source"), "ip_address": address})
        elif task == "executor" and state == "TASK_RUNNING":
            if decode_data(status.get("data", "")) != RUNNING_DATA:
                self.problem(f"TASK_RUNNING data {status.get('data')!r}")
            driver.sendFrameworkMessage(self.executor["executor_id"], status["agent_id"], encode_data(PING))
        elif task == "executor" and state == "TASK_FINISHED":
            self.note("executor", {"data_equal": decode_data(status.get("data", "")) == FINISHED_DATA,
                                   "message": status.get("message"), "reason": status.get("reason"),
                                   "source": status.get("source"), "healthy": status.get("healthy")})

    def frameworkMessage(self, driver, executor_id, agent_id, message):
        self.note("pong", {"executor_id": executor_id["value"], "equal": decode_data(message) == PONG})

    def executorLost(self, driver, executor_id, agent_id, status):
        self.note("executor_lost", {"executor_id": executor_id["value"], "status": status})

    def error(self, driver, message):
        self.problem(f"error: {message}")


def main(master, principal, secret, executor_command):
    checker = Checker(executor_command)
    framework = dict(name="pymesos-v1-checker", user=getpass.getuser(), hostname="localhost", failover_timeout=0)
    driver = MesosSchedulerDriver(checker, framework, master, principal=principal, secret=secret)
    driver.start()
    finished = False
    for _ in range(180):   # until done, or pymesos's driver aborted (a refused subscription)
        finished = checker.done.wait(0.5)
        if finished or driver.aborted:
            break
    if not driver.aborted:
        driver.stop()
    driver.join()
    with checker.lock:
        found = dict(checker.found, finished=finished)
    print(json.dumps(found), flush=True)
    return 0 if finished and not found["problems"] else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
