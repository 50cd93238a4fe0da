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
    LAUNCH_VARIABLE,
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
    # one agent with room for two tasks at a time: each is the example's 0.1 cpu / 32 MB
    # plus its executor's 0.1 cpu / 32 MB, as Mesos accounts them
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
            # the task's data reached its executor (decode_data(task.data) printed to its stderr)
            stderr = next(cluster.work_root.glob(f"*/sandboxes/*/{task_id}/stderr"))
            assert f"Hello from task {task_id}!" in stderr.read_text()
        # Ctrl-C: the example's handler calls driver.stop(), which tears the framework down
        scheduler.send_signal(signal.SIGINT)
        assert scheduler.wait(timeout=30) == 0, diagnostics()
        wait_for(lambda: not task_processes(cluster.work_root), 20,
                 "the example's remaining tasks killed by its teardown", diagnostics=diagnostics)
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


# --------------------------------------------------- the executor as a process
EXECUTOR = """
import sys, threading
from mesoslike.compat.pymesos import Executor, MesosExecutorDriver, decode_data

class Script(Executor):
    def registered(self, driver, executorInfo, frameworkInfo, agentInfo):
        print("registered", executorInfo.executor_id.value, frameworkInfo.id.value, agentInfo.hostname,
              file=sys.stderr, flush=True)

    def launchTask(self, driver, task):
        print("data", decode_data(task.data).decode(), file=sys.stderr, flush=True)
        driver.sendStatusUpdate({"task_id": task.task_id, "state": "TASK_RUNNING"})
        if sys.argv[1] == "finish":
            driver.sendStatusUpdate({"task_id": task.task_id, "state": "TASK_FINISHED"})
        elif sys.argv[1] == "fail":
            driver.sendStatusUpdate({"task_id": task.task_id, "state": "TASK_FAILED", "message": "no input"})
        else:
            print("waiting for a kill", file=sys.stderr, flush=True)

    def killTask(self, driver, taskId):
        print("killTask", taskId["value"], file=sys.stderr, flush=True)
        driver.sendStatusUpdate({"task_id": taskId, "state": "TASK_KILLED"})

    def shutdown(self, driver):
        print("shutdown", file=sys.stderr, flush=True)

MesosExecutorDriver(Script(), use_addict=True).run()
"""


def executor_task(tmp_path: Path, mode: str):
    """The TaskInfo MesosSchedulerDriver makes of a pymesos task with an executor."""
    script = tmp_path / "script_executor.py"
    script.write_text(EXECUTOR)
    task = {"task_id": {"value": "t-1"}, "agent_id": {"value": "A1"}, "name": "t-1",
            "data": shim.encode_data(b"payload 1"),
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}}],
            "executor": {"executor_id": {"value": "script"},
                         "command": {"value": f"{sys.executable} {script} {mode}"},
                         "resources": [{"name": "mem", "type": "SCALAR", "scalar": {"value": 32}}]}}
    return task_info(task, {"name": "fw", "user": "me"}, "F-1",
                     lambda agent_id: {"id": {"value": agent_id}, "hostname": "node-7"})


def run_as_agent(info, tmp_path: Path) -> subprocess.Popen:
    """Start the task's command as the agent does: a shell, the task's environment."""
    env = dict(os.environ, **info.environment, MESOSLIKE_TASK_ID=info.task_id)
    return subprocess.Popen(["/bin/sh", "-c", info.command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(tmp_path), start_new_session=True)


def test_an_executor_task_carries_its_executor_resources_and_launch(tmp_path):
    info = executor_task(tmp_path, "finish")
    assert info.resources == Resources.parse("cpus:0.1;mem:32")   # the task's and its executor's
    launch = json.loads(info.environment[LAUNCH_VARIABLE])
    assert launch["task"]["data"] == shim.encode_data(b"payload 1")
    assert launch["framework_info"]["id"] == {"value": "F-1"}
    assert launch["agent_info"] == {"id": {"value": "A1"}, "hostname": "node-7"}


@pytest.mark.parametrize("mode, code, says", [("finish", 0, "TASK_FINISHED"), ("fail", 1, "TASK_FAILED: no input")])
def test_the_executor_process_exits_as_its_task_ended(tmp_path, mode, code, says):
    process = run_as_agent(executor_task(tmp_path, mode), tmp_path)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert "registered script F-1 node-7" in stderr and "data payload 1" in stderr
    assert f"task t-1 {says}" in stderr and "shutdown" in stderr


def test_a_killed_executor_task_gets_killTask(tmp_path):
    process = run_as_agent(executor_task(tmp_path, "kill"), tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("waiting for a kill" in line for line in lines), 60, "the task running")
        os.killpg(process.pid, signal.SIGTERM)   # what the agent's kill does first (to the task's group)
        reader.join(30)   # the executor ended: its stderr closed
        assert not reader.is_alive(), lines
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)
    assert any("killTask t-1" in line for line in lines) and any("task t-1 TASK_KILLED" in line for line in lines)


def test_the_executor_driver_refuses_to_run_outside_such_a_task(monkeypatch):
    monkeypatch.delenv(LAUNCH_VARIABLE, raising=False)
    with pytest.raises(PymesosCompatError, match=LAUNCH_VARIABLE):
        shim.MesosExecutorDriver(shim.Executor())


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
                          kill_policy={"grace_period": {"nanoseconds": 5_000_000_000}}), {}, "F", dict)
    assert (info.command, info.environment, info.user, info.kill_grace_period) == ("echo $X", {"X": "1"}, "nobody",
                                                                                   5.0)
    assert info.resources == Resources.parse("cpus:0.5;ports:[80-81]")
    argv = task_info(dict(base, command={"shell": False, "value": "/bin/echo", "arguments": ["echo", "a b", "$c"]}),
                     {}, "F", dict)
    assert argv.command == "/bin/echo 'a b' '$c'"   # exec'd as argv: nothing expanded


@pytest.mark.parametrize("change, complaint", [
    ({"container": {"type": "DOCKER"}}, "containers"),
    ({"health_check": {"type": "HTTP"}}, "health checks"),
    ({"command": {"value": "x", "uris": [{"value": "http://h/f"}]}}, "fetcher"),
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
        task_info(task, {}, "F", dict)


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
