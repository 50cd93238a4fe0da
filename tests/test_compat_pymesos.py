"""mesoslike.compat.pymesos (issue 18 §6): a pymesos scheduler runs on
mesoslike by changing its import.

The headline test runs pymesos's own published example — scheduler and
executor, vendored in tests/data with only the import line changed — as a
real process against a real authenticated ``mesoslike local``, and waits for
its tasks to reach TASK_FINISHED through its ``statusUpdate``. The others
drive the shim's methods against a real cluster, the executor driver as a
real process, and the dict conversions directly.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from e2e_helpers import (REPO, child_env, cluster, free_port, task_processes,  # noqa: F401 (cluster: a fixture)
                         wait_for)
from mesoslike import DriverStatus, Filters, Offer, Reserve, Resources, TaskState, TaskStatus, Unreserve
from mesoslike.compat import pymesos as shim
from mesoslike.compat._pymesos_shapes import (
    EXECUTOR_VARIABLE,
    TASK_VARIABLE,
    PymesosCompatError,
    filters_from,
    framework_info,
    master_address,
    offer_message,
    resources_from,
    resources_message,
    status_from_message,
    status_message,
    task_info,
)
from test_pymesos_v1 import checked_findings

pytestmark = pytest.mark.timeout(180)

DATA = Path(__file__).resolve().parent / "data"
#: what the example's statusUpdate logs (logging.debug('Status update TID %s %s', ...))
STATUS_LINE = re.compile(r"Status update TID (\S+) (TASK_[A-Z_]+)")


def example_source(name: str) -> str:
    """A vendored example file without the header comment we added."""
    lines = (DATA / f"pymesos_{name}.py").read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if i > 0 and not line.startswith("#"))
    return lines[0] + "".join(lines[end:])


# ------------------------------------------------------ pymesos's own example
def test_the_vendored_example_differs_from_pymesos_in_its_import_line_only():
    for name, names in (("scheduler", "MesosSchedulerDriver, Scheduler, encode_data"),
                        ("executor", "MesosExecutorDriver, Executor, decode_data")):
        source = example_source(name)
        assert f"from mesoslike.compat.pymesos import {names}\n" in source
        assert "pymesos import" not in source.replace("mesoslike.compat.pymesos import", "")
        # the header names the line it changed, as it was
        assert f"#     from pymesos import {names}\n" in (DATA / f"pymesos_{name}.py").read_text()


def test_pymesos_example_scheduler_runs_unchanged_and_its_tasks_finish(cluster, tmp_path):
    # one agent with room for the example's executor (0.1 cpu / 32 MB, taken once: one
    # long-lived executor process runs the tasks) and three of its 0.1 cpu / 32 MB tasks
    cluster.start_local("--agents", "1", "--resources", "cpus:0.4;mem:128")
    example = tmp_path / "example"
    example.mkdir()
    for name in ("scheduler", "executor"):  # the example finds executor.py beside scheduler.py
        shutil.copy(DATA / f"pymesos_{name}.py", example / f"{name}.py")
    log_path = tmp_path / "scheduler.log"
    # pymesos's HOST:PORT master form; the keys come from the environment, as `mesoslike local` exports them
    with open(log_path, "wb") as log:
        scheduler = subprocess.Popen([sys.executable, str(example / "scheduler.py"),
                                      cluster.address.removeprefix("tcp://")],
                                     cwd=str(example), env=cluster.client_env(), stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def updates() -> list[tuple[str, str]]:
        return STATUS_LINE.findall(log_path.read_text(errors="replace"))

    def diagnostics() -> str:
        return f"--- scheduler.log\n{log_path.read_text(errors='replace')[-4000:]}\n{cluster.diagnostics()}"

    try:
        # the example's executor sleeps 30 s in each task before TASK_FINISHED
        finished = wait_for(lambda: (lambda done: done if len(done) >= 2 else None)(
            [task for task, state in updates() if state == TaskState.FINISHED]),
            120, "two of the example's tasks TASK_FINISHED through its statusUpdate", interval=0.5,
            diagnostics=diagnostics)
        seen = updates()
        for task_id in finished[:2]:
            states = [state for task, state in seen if task == task_id]
            assert states.index(TaskState.RUNNING) < states.index(TaskState.FINISHED), states
            assert not set(states) & {TaskState.FAILED, TaskState.ERROR, TaskState.LOST}, states
            # the task's data reached its executor (decode_data(task.data) printed to the executor's stderr)
            stderrs = "".join(path.read_text()
                              for path in cluster.work_root.glob("*/sandboxes/*/*MinimalExecutor*/stderr"))
            assert f"Hello from task {task_id}!" in stderrs
        # Ctrl-C: the example's handler calls driver.stop(), which tears the framework down
        scheduler.send_signal(signal.SIGINT)
        assert scheduler.wait(timeout=30) == 0, diagnostics()
        wait_for(lambda: not task_processes(cluster.work_root), 30,
                 "the example's executor and its remaining tasks ended by its teardown", diagnostics=diagnostics)
    finally:
        if scheduler.poll() is None:
            os.killpg(scheduler.pid, signal.SIGKILL)
            scheduler.wait(timeout=10)


def test_the_pymesos_example_of_mesoslike_runs_under_local():
    # examples/pymesos_scheduler.py: plain dicts, $MESOSLIKE_MASTER and the keys from `mesoslike local`
    done = subprocess.run(
        [sys.executable, "-m", "mesoslike", "local", "--agents", "2", "--resources", "cpus:0.3;mem:128",
         "--port", str(free_port()), "--http-port", str(free_port()), "--allocation-interval", "0.2",
         "--", sys.executable, "examples/pymesos_scheduler.py", "4"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4/4 tasks finished" in done.stdout
    assert sorted(re.findall(r"(echo-\d): TASK_FINISHED", done.stdout)) == [f"echo-{i}" for i in range(4)]


def test_the_pymesos_executor_example_runs_its_tasks_on_one_executor_per_agent(tmp_path):
    # examples/pymesos_executor.py: a pymesos scheduler and executor, the squares coming back as messages
    done = subprocess.run(
        [sys.executable, "-m", "mesoslike", "local", "--agents", "2", "--port", str(free_port()), "--http-port",
         str(free_port()), "--work-dir", str(tmp_path / "work"), "--allocation-interval", "0.2",
         "--", sys.executable, "examples/pymesos_executor.py", "20"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if "tasks finished" in line)
    assert line.startswith("20/20 tasks finished, 20 squares right, on ") and line.endswith("(squares)"), line
    assert 1 <= int(line.split(" on ")[1].split()[0]) <= 2, line   # one executor process per agent used


# ------------------------------------------------- the driver's calls, end to end
class DictScheduler(shim.Scheduler):
    """A pymesos scheduler with plain dicts (use_addict=False) and explicit
    acknowledgements: one task that finishes, one that is killed."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.registered_with: tuple = ()
        self.offers: list[dict] = []
        self.statuses: list[dict] = []
        self.reconciled: list[dict] = []
        self.errors: list[str] = []
        self.launched = False

    def _note(self, change) -> None:
        with self.cond:
            change()
            self.cond.notify_all()

    def wait(self, predicate, what: str, timeout: float = 40.0):
        return wait_for(lambda: self._locked(predicate), timeout, what,
                        diagnostics=lambda: f"statuses {self.statuses}\nerrors {self.errors}")

    def _locked(self, predicate):
        with self.cond:
            return predicate()

    def states(self, task: str) -> list[str]:
        return [s["state"] for s in self.statuses if s["task_id"]["value"] == task]

    def registered(self, driver, frameworkId, masterInfo):
        self._note(lambda: setattr(self, "registered_with", (frameworkId, masterInfo)))

    def resourceOffers(self, driver, offers):
        self._note(lambda: self.offers.extend(offers))
        for offer in offers:
            if self.launched:
                driver.declineOffer(offer["id"], {"refuse_seconds": 30})
                continue
            self.launched = True
            quick = {"task_id": {"value": "quick"}, "agent_id": offer["agent_id"], "name": "quick",
                     "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                                   {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}}],
                     "command": {"value": 'test "$GREETING" = hello',
                                 "environment": {"variables": [{"name": "GREETING", "value": "hello"}]}}}
            sleeper = {"task_id": {"value": "sleeper"}, "agent_id": offer["agent_id"], "name": "sleeper",
                       "resources": quick["resources"],
                       "command": {"shell": False, "value": "/bin/sleep", "arguments": ["sleep", "600"]}}
            driver.launchTasks([offer["id"]], [quick, sleeper], {"refuse_seconds": 1})

    def statusUpdate(self, driver, status):
        self._note(lambda: (self.reconciled if status.get("reason") == "REASON_RECONCILIATION"
                            else self.statuses).append(status))
        if status["task_id"]["value"] == "sleeper" and status["state"] == TaskState.RUNNING \
                and "uuid" in status:
            driver.reconcileTasks([status])
            driver.killTask(status["task_id"])
        driver.acknowledgeStatusUpdate(status)   # explicit: nothing moves on without it

    def error(self, driver, message):
        self._note(lambda: self.errors.append(message))


def test_a_pymesos_dict_scheduler_launches_kills_reconciles_and_acknowledges(cluster):
    cluster.start_local("--agents", "1", "--resources", "cpus:1;mem:256")
    sched = DictScheduler()
    driver = shim.MesosSchedulerDriver(sched, {"name": "dicts", "failover_timeout": 0},
                                       cluster.address.removeprefix("tcp://"), use_addict=False,
                                       implicit_acknowledgements=False, key=cluster.client_key,
                                       master_key=cluster.master_key, stop_timeout=5.0)
    cluster.drivers.append(driver)   # stopped at clean-up
    runner = threading.Thread(target=driver.run, daemon=True)
    runner.start()

    framework_id, master_info = sched.wait(lambda: sched.registered_with, "registered")
    assert type(framework_id) is dict and framework_id["value"] == driver.framework_id
    assert master_info["port"] == int(cluster.address.rpartition(":")[2])
    offer = sched.wait(lambda: sched.offers and sched.offers[0], "an offer")
    assert offer["hostname"] == "node-0" and offer["agent_id"]["value"]
    resources = {r["name"]: r for r in offer["resources"]}
    assert resources["cpus"] == {"name": "cpus", "type": "SCALAR", "scalar": {"value": 1.0}, "role": "*"}
    assert resources["mem"]["scalar"]["value"] == 256.0

    # each update is acknowledged explicitly; the agent holds a task's later ones until it is
    sched.wait(lambda: TaskState.FINISHED in sched.states("quick"), "quick TASK_FINISHED")
    sched.wait(lambda: TaskState.KILLED in sched.states("sleeper"), "sleeper TASK_KILLED by killTask")
    assert sched.states("quick")[-1] == TaskState.FINISHED and sched.states("sleeper")[-1] == TaskState.KILLED
    for status in sched.statuses:
        assert len(base64.b64decode(status["uuid"])) == 16, status   # pymesos's uuid form
        assert status["agent_id"] == offer["agent_id"] and status["source"] == "SOURCE_AGENT"
    answer = sched.wait(lambda: sched.reconciled and sched.reconciled[0], "the reconciliation answer")
    assert answer["task_id"] == {"value": "sleeper"} and answer["source"] == "SOURCE_MASTER" and "uuid" not in answer
    # the offers that came after the launch were declined (the declines held: no error)
    assert sched.errors == []
    driver.suppressOffers()
    assert driver.stop() is DriverStatus.STOPPED
    runner.join(10)
    assert not runner.is_alive() and driver.status is DriverStatus.STOPPED


# ------------------------------------- pymesos executors as mesoslike custom executors
EXECUTOR = """
import os, sys, threading
from mesoslike.compat.pymesos import Executor, MesosExecutorDriver, decode_data, encode_data

class Script(Executor):
    def registered(self, driver, executorInfo, frameworkInfo, agentInfo):
        hello = "registered %s %s %s %s %d" % (executorInfo.executor_id.value, decode_data(executorInfo.data).decode(),
                                               frameworkInfo.id.value, agentInfo.hostname, os.getpid())
        driver.sendFrameworkMessage(encode_data(hello.encode()))

    def launchTask(self, driver, task):
        mode = decode_data(task.data).decode()
        driver.sendStatusUpdate({"task_id": task.task_id, "state": "TASK_RUNNING", "message": "pid %d" % os.getpid()})
        if mode == "finish":
            driver.sendStatusUpdate({"task_id": task.task_id, "state": "TASK_FINISHED"})
        elif mode == "fail":
            driver.sendStatusUpdate({"task_id": task.task_id, "state": "TASK_FAILED", "message": "no input"})

    def killTask(self, driver, taskId):
        driver.sendStatusUpdate({"task_id": taskId, "state": "TASK_KILLED", "message": "killTask " + taskId.value})

    def frameworkMessage(self, driver, message):
        driver.sendFrameworkMessage(encode_data(b"pong " + decode_data(message)))

    def shutdown(self, driver):
        print("shutdown called", file=sys.stderr, flush=True)

MesosExecutorDriver(Script(), use_addict=True).run()
"""

TASK_RESOURCES = [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                  {"name": "mem", "type": "SCALAR", "scalar": {"value": 16}}]


def executor_dict(script: Path) -> dict:
    return {"executor_id": {"value": "script"}, "name": "script", "data": shim.encode_data(b"executor data"),
            "command": {"value": f"{sys.executable} {script}"},
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.2}},
                          {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}}],
            "shutdown_grace_period": {"nanoseconds": 2_000_000_000}}


class ExecutorDictScheduler(DictScheduler):
    """Launches queued (task id, mode) pairs on its pymesos executor; records messages."""

    def __init__(self, executor: dict) -> None:
        super().__init__()
        self.executor = executor
        self.queue: list[tuple[str, str]] = []
        self.messages: list[tuple[dict, dict, bytes]] = []
        self.started_on: set[str] = set()

    def add(self, *tasks: tuple[str, str]) -> None:
        with self.cond:
            self.queue.extend(tasks)

    def resourceOffers(self, driver, offers):
        self._note(lambda: self.offers.extend(offers))
        for offer in offers:
            with self.cond:
                tasks, self.queue = self.queue, []
                if tasks:
                    self.started_on.add(offer["agent_id"]["value"])
            if not tasks:
                driver.declineOffer(offer["id"], {"refuse_seconds": 0.2})
                continue
            driver.launchTasks(offer["id"], [
                {"task_id": {"value": task_id}, "agent_id": offer["agent_id"], "name": task_id,
                 "resources": TASK_RESOURCES, "executor": self.executor, "data": shim.encode_data(mode.encode())}
                for task_id, mode in tasks])

    def statusUpdate(self, driver, status):
        self._note(lambda: self.statuses.append(status))

    def frameworkMessage(self, driver, executorId, slaveId, message):
        self._note(lambda: self.messages.append((executorId, slaveId, shim.decode_data(message))))

    def said(self) -> list[bytes]:
        with self.cond:
            return [data for _, _, data in self.messages]

    def pids(self, *task_ids: str) -> set[int]:
        return {int(s["message"].split()[1]) for t in task_ids for s in self.statuses
                if s["task_id"]["value"] == t and s["state"] == TaskState.RUNNING}


def test_a_pymesos_executor_runs_many_tasks_as_one_custom_executor_and_messages_go_both_ways(cluster, tmp_path):
    cluster.start_local("--agents", "1", "--resources", "cpus:1;mem:256")
    script = tmp_path / "script_executor.py"
    script.write_text(EXECUTOR)
    sched = ExecutorDictScheduler(executor_dict(script))
    sched.add(("fin1", "finish"), ("bad", "fail"), ("held", "hold"))
    driver = shim.MesosSchedulerDriver(sched, {"name": "pymesos-executor", "failover_timeout": 0},
                                       cluster.address.removeprefix("tcp://"), key=cluster.client_key,
                                       master_key=cluster.master_key, stop_timeout=5.0)
    cluster.drivers.append(driver)
    runner = threading.Thread(target=driver.run, daemon=True)
    runner.start()

    def last(task_id: str) -> str | None:
        states = sched.states(task_id)
        return states[-1] if states else None

    sched.wait(lambda: (last("fin1"), last("bad"), last("held")) ==
               (TaskState.FINISHED, TaskState.FAILED, TaskState.RUNNING), "the executor's three tasks", 60)
    assert [s["message"] for s in sched.statuses if s["task_id"]["value"] == "bad"][-1] == "no input"
    assert all(s["source"] == "SOURCE_EXECUTOR" for s in sched.statuses if s["state"] != TaskState.STARTING)
    pids = sched.pids("fin1", "bad", "held")
    assert len(pids) == 1, pids   # one process ran them all
    pid = pids.pop()
    # executor -> scheduler: registered got the scheduler's ExecutorInfo (its data) and the framework id
    agent_id = sched.statuses[0]["agent_id"]
    hello = f"registered script executor data {driver.framework_id} node-0 {pid}".encode()
    sched.wait(lambda: hello in sched.said(), "the executor's hello through frameworkMessage")
    executor_id, slave_id = next((executor, slave) for executor, slave, data in sched.messages if data == hello)
    assert (executor_id, slave_id) == ({"value": "script"}, agent_id)
    # scheduler -> executor (by the executor id frameworkMessage gave) -> scheduler
    driver.sendFrameworkMessage(executor_id, slave_id, shim.encode_data(b"ping"))
    sched.wait(lambda: b"pong ping" in sched.said(), "the executor's pong")
    # killTask reaches the executor's killTask
    driver.killTask({"value": "held"})
    sched.wait(lambda: last("held") == TaskState.KILLED, "held killed by the executor")
    assert sched.statuses[-1]["message"] == "killTask held"
    # a later task goes to the same process
    sched.add(("fin2", "finish"))
    driver.reviveOffers()
    sched.wait(lambda: last("fin2") == TaskState.FINISHED, "a later task", 40)
    assert sched.pids("fin2") == {pid}
    assert sched.errors == []
    # the teardown shuts it down: shutdown is called, the process ends
    assert driver.stop() is DriverStatus.STOPPED
    wait_for(lambda: not task_processes(cluster.work_root), 30, "the executor to end after its shutdown",
             diagnostics=cluster.diagnostics)
    stderr = next(cluster.work_root.glob("*/sandboxes/*/*script*/stderr"))
    assert "shutdown called" in stderr.read_text()


def test_an_executor_task_becomes_a_task_of_a_custom_executor(tmp_path):
    task = {"task_id": {"value": "t-1"}, "agent_id": {"value": "A1"}, "name": "t-1", "data": shim.encode_data(b"x"),
            "resources": TASK_RESOURCES, "labels": {"labels": [{"key": "tier", "value": "web"}]},
            "executor": dict(executor_dict(tmp_path / "e.py"), labels={"labels": [{"key": "k"}]},
                             command={"value": "run-it", "user": "nobody",
                                      "environment": {"variables": [{"name": "A", "value": "1"}]}})}
    info = task_info(task)
    assert info.resources == Resources.parse("cpus:0.1;mem:16")   # the executor's are its own
    assert (info.command, info.user, [(l.key, l.value) for l in info.labels]) == ("", "nobody", [("tier", "web")])
    assert json.loads(info.environment[TASK_VARIABLE]) == task   # launchTask gets the dict, data and all
    executor = info.executor
    assert (executor.executor_id, executor.command, executor.name, executor.shutdown_grace_period) == \
        ("script", "run-it", "script", 2.0)
    assert executor.resources == Resources.parse("cpus:0.2;mem:32") and executor.labels[0].key == "k"
    assert executor.environment["A"] == "1"
    assert json.loads(executor.environment[EXECUTOR_VARIABLE])["data"] == shim.encode_data(b"executor data")
    with pytest.raises(PymesosCompatError, match="uris"):
        task_info(dict(task, executor=dict(task["executor"], command={"value": "x", "uris": [{"value": "file:///a"}]})))
    with pytest.raises(PymesosCompatError, match="at most"):
        task_info(dict(task, data="A" * (2 * 1024 * 1024)))


def test_the_executor_driver_refuses_to_run_outside_a_custom_executor():
    with pytest.raises(PymesosCompatError, match="MESOSLIKE_EXECUTOR_ENDPOINT"):
        shim.MesosExecutorDriver(shim.Executor(), environment={})


def test_a_command_task_fetches_its_uris_is_health_checked_and_carries_labels(cluster, tmp_path):
    cluster.start_local("--agents", "1", "--resources", "cpus:1;mem:256")
    source = tmp_path / "payload.txt"
    source.write_text("fetched")
    sched = DictScheduler()
    task = {"task_id": {"value": "checked"}, "name": "checked", "resources": TASK_RESOURCES,
            "labels": {"labels": [{"key": "tier", "value": "web"}]},
            "command": {"value": "test \"$(cat got.txt)\" = fetched && exec sleep 600",
                        "uris": [{"value": source.as_uri(), "output_file": "got.txt", "extract": False}]},
            "health_check": {"type": "COMMAND", "command": {"value": "test -f got.txt"}, "delay_seconds": 0,
                             "interval_seconds": 0.5, "grace_period_seconds": 0}}

    def offers(driver, offers):
        for offer in offers:
            if sched.launched:
                driver.declineOffer(offer["id"], {"refuse_seconds": 30})
            else:
                sched.launched = True
                driver.launchTasks(offer["id"], [dict(task, agent_id=offer["agent_id"])])

    sched.resourceOffers = offers
    driver = shim.MesosSchedulerDriver(sched, {"name": "checked", "failover_timeout": 0},
                                       cluster.address.removeprefix("tcp://"), key=cluster.client_key,
                                       master_key=cluster.master_key, stop_timeout=5.0)
    cluster.drivers.append(driver)
    threading.Thread(target=driver.run, daemon=True).start()
    healthy = sched.wait(lambda: next((s for s in sched.statuses if s.get("healthy") is True), None),
                         "a healthy update of the fetched task", 60)
    assert healthy["state"] == TaskState.RUNNING and healthy["reason"] == "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
    assert healthy["labels"] == {"labels": [{"key": "tier", "value": "web"}]}
    driver.killTask({"value": "checked"})
    sched.wait(lambda: TaskState.KILLED in sched.states("checked"), "the task killed")
    assert sched.errors == []


# ------------------------------------------------------------- the dict shapes
def test_an_offer_looks_as_pymesos_shows_it():
    offer = Offer(id="O1", agent_id="A1", hostname="h1", framework_id="F1",
                  resources=Resources.parse("cpus:2;mem:1024;ports:[31000-31009,32000-32000]"),
                  attributes={"rack": "r1", "level": "3"})
    assert offer_message(offer, "F1") == {
        "id": {"value": "O1"}, "framework_id": {"value": "F1"}, "agent_id": {"value": "A1"}, "hostname": "h1",
        "resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 2.0}, "role": "*"},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": 1024.0}, "role": "*"},
            {"name": "ports", "type": "RANGES", "role": "*",
             "ranges": {"range": [{"begin": 31000, "end": 31009}, {"begin": 32000, "end": 32000}]}}],
        "attributes": [{"name": "level", "type": "SCALAR", "scalar": {"value": 3.0}},
                       {"name": "rack", "type": "TEXT", "text": {"value": "r1"}}]}
    # and what a scheduler sends back from it is the same vector
    assert resources_from(offer_message(offer, "F1")["resources"], "r") == offer.resources


def test_reserved_resources_look_as_in_mesos_and_reserve_unreserve_operations_translate(monkeypatch):
    """Reservations (issue 18 §4) as Mesos shows them without reservation
    refinement: ``role`` and, for a dynamic one, ``reservation.principal``;
    acceptOffers' RESERVE/UNRESERVE become ``Reserve``/``Unreserve``."""
    reserved = Resources.parse("cpus:1;cpus(web):2;cpus(web,alice):0.5;ports(web,):[80-81]")
    items = resources_message(reserved)
    assert items == [
        {"name": "cpus", "role": "*", "type": "SCALAR", "scalar": {"value": 1.0}},
        {"name": "cpus", "role": "web", "type": "SCALAR", "scalar": {"value": 2.0}},
        {"name": "cpus", "role": "web", "reservation": {"principal": "alice"}, "type": "SCALAR",
         "scalar": {"value": 0.5}},
        {"name": "ports", "role": "web", "reservation": {"principal": ""}, "type": "RANGES",
         "ranges": {"range": [{"begin": 80, "end": 81}]}}]
    assert resources_from(items, "r") == reserved
    monkeypatch.delenv("MESOSLIKE_KEY", raising=False)
    monkeypatch.delenv("MESOSLIKE_MASTER_KEY", raising=False)
    driver = shim.MesosSchedulerDriver(shim.Scheduler(), {"name": "fw", "role": "web"}, "127.0.0.1:1")
    sent: list = []
    monkeypatch.setattr(driver.driver, "accept_offers", lambda ids, operations, filters: sent.append(operations))
    driver.acceptOffers([{"value": "O1"}], [
        {"type": "RESERVE", "reserve": {"resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 1}, "role": "web",
             "reservation": {"principal": "whoever"}}]}},     # the principal is the key's, not this
        {"type": "UNRESERVE", "unreserve": {"resources": items[2:3]}}])
    assert sent == [[Reserve("cpus:1", role="web"), Unreserve("cpus(web,alice):0.5")]]
    with pytest.raises(PymesosCompatError, match="CREATE"):
        driver.acceptOffers([{"value": "O1"}], [{"type": "CREATE", "create": {}}])


def test_a_status_uuid_is_pymesos_base64_and_comes_back_for_the_acknowledgement():
    uuid_text = str(uuid.uuid4())
    status = TaskStatus(task_id="t", state=TaskState.RUNNING, agent_id="A", message="m", source="SOURCE_AGENT",
                        uuid=uuid_text, timestamp=12.5)
    message = status_message(status)
    assert message == {"task_id": {"value": "t"}, "state": "TASK_RUNNING", "message": "m",
                       "agent_id": {"value": "A"}, "source": "SOURCE_AGENT", "uuid": message["uuid"],
                       "timestamp": 12.5}
    assert uuid.UUID(bytes=shim.decode_data(message["uuid"])) == uuid.UUID(uuid_text)
    back = status_from_message(message)
    assert (back.task_id, back.agent_id, back.uuid, back.state) == ("t", "A", uuid_text, "TASK_RUNNING")
    assert "uuid" not in status_message(TaskStatus(task_id="t", state=TaskState.LOST))


def test_task_dicts_become_task_infos():
    base = {"task_id": {"value": "t"}, "agent_id": {"value": "A"},
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.5}},
                          {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 80, "end": 81}]}}]}
    info = task_info(dict(base, command={"value": "echo $X", "user": "nobody",
                                         "environment": {"variables": [{"name": "X", "value": "1"}]}},
                          kill_policy={"grace_period": {"nanoseconds": 5_000_000_000}}))
    assert (info.command, info.environment, info.user, info.kill_grace_period) == ("echo $X", {"X": "1"}, "nobody",
                                                                                   5.0)
    assert info.resources == Resources.parse("cpus:0.5;ports:[80-81]")
    argv = task_info(dict(base, command={"shell": False, "value": "/bin/echo", "arguments": ["echo", "a b", "$c"]}))
    assert argv.command == "/bin/echo 'a b' '$c'"   # exec'd as argv: nothing expanded


def test_a_tasks_container_passes_through_as_mesoss_json_has_it():
    from mesoslike import ContainerInfo, DockerInfo, Image, Secret, Volume, VolumeSource

    base = {"task_id": {"value": "t"}, "agent_id": {"value": "A"}}
    docker = task_info(dict(base, command={"shell": False}, container={
        "type": "DOCKER", "hostname": "web-1",
        "docker": {"image": "registry:5000/team/web:1.2", "network": "NONE", "force_pull_image": True},
        "volumes": [{"container_path": "/data", "host_path": "/srv/data", "mode": "RO"},
                    {"container_path": "cache", "source": {"type": "SANDBOX_PATH",
                                                           "sandbox_path": {"type": "SELF", "path": "c"}}},
                    {"container_path": "/etc/pw", "source": {"type": "SECRET", "secret": {
                        "type": "VALUE", "value": {"data": "czNjcmV0"}}}}]}))
    assert docker.container == ContainerInfo(
        "DOCKER", docker=DockerInfo("registry:5000/team/web:1.2", network="NONE", force_pull_image=True),
        hostname="web-1", volumes=[Volume("/data", VolumeSource("HOST_PATH", path="/srv/data"), "RO"),
                                   Volume("cache", VolumeSource("SANDBOX_PATH", path="c")),
                                   Volume("/etc/pw", VolumeSource("SECRET", secret=Secret("VALUE", value=b"s3cret")))])
    assert (docker.shell, docker.command, docker.arguments) == (False, "", [])   # the image's entrypoint runs
    mesos = task_info(dict(base, command={"shell": False, "arguments": ["--port", "80"]}, container={
        "type": "MESOS", "mesos": {"image": {"type": "DOCKER", "docker": {"name": "busybox"}, "cached": False}}}))
    assert mesos.container.image == Image("busybox", cached=False) and mesos.arguments == ["--port", "80"]
    shell = task_info(dict(base, command={"value": "echo hi"}, container={"type": "MESOS"}))
    assert shell.command == "echo hi" and shell.shell and shell.container == ContainerInfo()


@pytest.mark.parametrize("change, complaint", [
    ({"container": {"type": "DOCKER", "docker": {"image": "nginx", "network": "BRIDGE"}}}, "no bridge"),
    ({"container": {"type": "DOCKER", "docker": {"image": "nginx", "port_mappings": [{"host_port": 80}]}}},
     "port mappings"),
    ({"container": {"type": "MESOS", "mesos": {"image": {"type": "APPC", "appc": {"name": "a"}}}}}, "Docker/OCI"),
    ({"container": {"network_infos": [{"name": "cni"}]}}, "CNI"),
    ({"health_check": {"type": "HTTP"}}, "health_check.http must be a dict"),
    ({"health_check": {"type": "GRPC"}}, "COMMAND, HTTP and TCP"),
    ({"check": {"type": "COMMAND"}}, "general checks"),
    ({"command": {"value": "x", "uris": [{"value": "ftp://h/f"}]}}, "uris"),
    ({"labels": {"labels": [{"value": "no key"}]}}, "labels"),
    ({"executor": {"executor_id": {"value": "e"}, "command": {"value": "x"}}}, "exactly one"),
    ({"command": {"value": " "}}, "nothing to run"),
    ({"resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 1}, "reservations": [{"role": "w"}]}]},
     "refined reservations"),
    ({"resources": [{"name": "disks", "type": "SET", "set": {"item": ["a"]}}]}, "SCALAR and RANGES"),
    ({"resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": -1}}]}, ">= 0"),
    ({"task_id": {"value": 7}}, "task_id.value must be a string"),
    ({"command": {"value": "x", "environment": {"variables": [{"name": "S", "type": "SECRET"}]}}}, "secrets"),
])
def test_what_mesoslike_cannot_do_is_refused_naming_it(change, complaint):
    task = {"task_id": {"value": "t"}, "agent_id": {"value": "A"}, "command": {"value": "true"}, **change}
    with pytest.raises(PymesosCompatError, match=complaint):
        task_info(task)


def test_framework_dicts_master_addresses_and_filters():
    info = framework_info({"name": "fw", "user": "u", "hostname": "h", "roles": ["analytics"],
                           "capabilities": [{"type": "PARTITION_AWARE"}], "id": {"value": "F9"}})
    assert (info.name, info.role, info.user, info.hostname, info.id, info.partition_aware,
            info.failover_timeout) == ("fw", "analytics", "u", "h", "F9", True, 100.0)   # pymesos's default
    assert framework_info({"name": "fw", "failover_timeout": 0}).failover_timeout == 0.0
    with pytest.raises(PymesosCompatError, match="exactly one role"):
        framework_info({"name": "fw", "roles": ["a", "b"]})
    assert master_address("10.0.0.1:5050") == "tcp://10.0.0.1:5050"
    assert master_address("mesos-master") == "tcp://mesos-master:5050"
    assert master_address("zoo://zk1:2181/mesos") == "zk://zk1:2181/mesos"
    assert master_address("zk://zk1:2181/mesos") == "zk://zk1:2181/mesos"
    assert master_address("tcp://h:1") == "tcp://h:1"
    assert filters_from({"refuse_seconds": 7}) == Filters(refuse_seconds=7.0)
    assert filters_from(None) is None and filters_from({}) == Filters()
    with pytest.raises(PymesosCompatError):
        filters_from({"refuse_seconds": "soon"})


def test_encode_and_decode_data_as_pymesos():
    assert shim.encode_data(b"\x00\xffhi") == base64.b64encode(b"\x00\xffhi").decode()
    assert shim.decode_data(shim.encode_data(b"\x00\xffhi")) == b"\x00\xffhi"
    assert shim.encode_data("héllo") == shim.encode_data("héllo".encode())   # the example passes a str


def test_callbacks_reach_their_pymesos_names(monkeypatch):
    monkeypatch.delenv("MESOSLIKE_KEY", raising=False)
    monkeypatch.delenv("MESOSLIKE_MASTER_KEY", raising=False)
    calls: list[tuple] = []

    class OldStyle(shim.Scheduler):
        def slaveLost(self, driver, slaveId):
            calls.append(("slaveLost", slaveId))

        def frameworkMessage(self, driver, executorId, slaveId, message):
            calls.append(("frameworkMessage", slaveId, shim.decode_data(message)))

    class NewStyle(shim.Scheduler):
        def agentLost(self, driver, agentId):
            calls.append(("agentLost", agentId))

    for sched in (OldStyle(), NewStyle()):
        driver = shim.MesosSchedulerDriver(sched, {"name": "fw"}, "127.0.0.1:1", use_addict=True)
        translator = driver.driver.scheduler
        translator.agent_lost(driver.driver, "A1")
        translator.framework_message(driver.driver, "A2", b"\x01hi")
    assert calls == [("slaveLost", {"value": "A1"}), ("frameworkMessage", {"value": "A2"}, b"\x01hi"),
                     ("agentLost", {"value": "A1"})]
    assert type(calls[0][1]).__name__ == "Dict"   # addict's, with use_addict=True


def test_the_shim_exports_pymesos_names():
    assert sorted(shim.__all__) == ["Executor", "MesosExecutorDriver", "MesosSchedulerDriver", "PymesosCompatError",
                                    "Scheduler", "decode_data", "encode_data"]


def shim_source(name: str) -> str:
    """tests/data/pymesos_v1_<name>.py (written only against pymesos's public
    API, run on pymesos from PyPI by tests/test_pymesos_v1.py) with its
    import line changed to the shim's — the only change."""
    source = (DATA / f"pymesos_v1_{name}.py").read_text()
    changed = source.replace("from pymesos import", "from mesoslike.compat.pymesos import")
    assert changed.count("mesoslike.compat.pymesos") == 1
    return changed


def test_the_v1_checker_scheduler_and_executor_pass_on_zeromq_through_the_shim(cluster, tmp_path):
    """The semantics frameworks rely on hold on the native front end as on
    the v1 APIs (tests/test_pymesos_v1.py runs the same programs on
    pymesos): status data byte for byte (NUL bytes too), message, reason,
    source and healthy as the executor sent them, no TASK_STARTING of the
    agent's for a custom executor's task, container_status with the task's
    address, framework messages both ways, a kill, executorLost with the
    executor's exit status — on an authenticated cluster (CURVE keys)."""
    cluster.start_master()
    cluster.start_agent("node-a", "cpus:2;mem:1024")
    for name in ("scheduler", "executor"):
        (tmp_path / f"{name}.py").write_text(shim_source(name))
    # a task's environment is clean (not the agent's): the executor is told where mesoslike is
    executor = f"/usr/bin/env PYTHONPATH={REPO} {sys.executable} {tmp_path / 'executor.py'}"
    # pymesos's principal and secret: ignored by the shim (it authenticates by key: MESOSLIKE_KEY)
    done = subprocess.run([sys.executable, str(tmp_path / "scheduler.py"), cluster.address.removeprefix("tcp://"),
                           "fwA", "unused", executor], env=cluster.client_env(), capture_output=True, text=True,
                          timeout=150, stdin=subprocess.DEVNULL)
    checked_findings(done, cluster.diagnostics)   # as tests/test_pymesos_v1.py checks pymesos's run
    wait_for(lambda: not cluster.state()["frameworks"], 20, "the framework torn down",
             diagnostics=cluster.diagnostics)
