"""End-to-end tests: real ``python -m mesoslike`` master / agent / local
processes on 127.0.0.1, frameworks in this process through the public API.

Each test asserts something a user of the cluster relies on (docs/cluster.rst, docs/framework-api.rst,
docs/wire.rst "Conversations"). Process handling, readiness polling and
cleanup live in ``e2e_helpers``.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from e2e_helpers import (REPO, RecordingScheduler, alive, cluster,  # noqa: F401 (cluster: a fixture)
                         group_members, http_get, task_processes)
from mesoslike import DriverStatus, Filters, Resources, TaskInfo, TaskState
from mesoslike.wire.types import TERMINAL_STATES


pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not sys.platform.startswith("linux"),
                                                             reason="inspects /proc")]

LONG = Filters(refuse_seconds=3600.0)
NONE = Filters(refuse_seconds=0.0)


def running(scheduler: RecordingScheduler, task_ids) -> bool:
    seen = {s.task_id for s in scheduler.statuses() if s.state == TaskState.RUNNING}
    return set(task_ids) <= seen


# --------------------------------------------------------------------------- 1
class DrfFramework(RecordingScheduler):
    """Seed 004's frameworks: one task of ``need`` per offer while it fits;
    the unused part of the offer comes back at once (refuse 0); an offer the
    task no longer fits is declined for an hour. Until ``go`` is set (both
    frameworks registered) offers are handed straight back, so that neither
    gets a head start before the other exists."""

    def __init__(self, prefix: str, need: str, go: threading.Event) -> None:
        super().__init__()
        self.prefix, self.need, self.go = prefix, Resources.parse(need), go
        self.launched: list[str] = []

    def on_offers(self, driver, offers):
        for offer in offers:
            if not self.go.is_set():
                driver.decline_offer(offer.id, NONE)
            elif offer.resources.contains(self.need):
                task_id = f"{self.prefix}-{len(self.launched)}"
                self.launched.append(task_id)
                driver.launch_tasks([offer.id], [TaskInfo(task_id=task_id, agent_id=offer.agent_id,
                                                          command="sleep 600", resources=self.need)], NONE)
            else:
                driver.decline_offer(offer.id, LONG)


def test_drf_example_from_seed_004_end_to_end(cluster):
    cluster.start_master()
    cluster.start_agent("drf-host", "cpus:9;mem:18432")
    go = threading.Event()
    fw_a = DrfFramework("a", "cpus:1;mem:4096", go)
    fw_b = DrfFramework("b", "cpus:3;mem:1024", go)
    driver_a = cluster.driver(fw_a, "A")
    driver_b = cluster.driver(fw_b, "B")
    for fw in (fw_a, fw_b):
        fw.wait(lambda fw=fw: fw.framework_id, 15, "registration", cluster.diagnostics)
    go.set()

    def settled():
        doc = cluster.state()
        frameworks = {f["name"]: f for f in doc["frameworks"]}
        if doc["offers"] or set(frameworks) != {"A", "B"}:
            return None
        counts = {name: sum(t["state"] == TaskState.RUNNING for t in f["tasks"]) for name, f in frameworks.items()}
        return frameworks if counts == {"A": 3, "B": 2} else None

    frameworks = cluster.wait_until(settled, 30, "A with 3 running tasks, B with 2, no offer outstanding")
    assert frameworks["A"]["dominant_share"] == pytest.approx(2 / 3, abs=1e-3)
    assert frameworks["B"]["dominant_share"] == pytest.approx(2 / 3, abs=1e-3)
    assert Resources.parse(frameworks["A"]["used"]) == Resources.parse("cpus:3;mem:12288")
    assert Resources.parse(frameworks["B"]["used"]) == Resources.parse("cpus:6;mem:2048")
    # and no further task got in: the leftover <0 cpus, 4096 mem> fits neither
    assert len(fw_a.launched) == 3 and len(fw_b.launched) == 2
    # the tasks are real processes in the agent's sandboxes
    pids = cluster.wait_until(
        lambda: (lambda found: found if set(found.values()) == {"a-0", "a-1", "a-2", "b-0", "b-1"} else None)(
            task_processes(cluster.work_root)),
        10, "the five sleep processes")

    # teardown: the master kills the frameworks' tasks
    assert driver_a.stop() is DriverStatus.STOPPED
    assert driver_b.stop() is DriverStatus.STOPPED

    def torn_down():
        for f in cluster.state()["frameworks"]:
            if f["id"] in (fw_a.framework_id, fw_b.framework_id) and any(
                    t["state"] not in TERMINAL_STATES for t in f["tasks"]):
                return False
        # a dying task has lost its memory (so its environment reads empty and task_processes
        # no longer names it) before it is gone: the init of a PID namespace waits for its
        # children to be reaped. Killed means every pid seen running is gone too.
        return not task_processes(cluster.work_root) and not any(alive(pid) for pid in pids)

    cluster.wait_until(torn_down, 15, "the torn-down frameworks' tasks to be killed")

    def freed():   # the agent's resources are whole again
        agent = next(a for a in cluster.state()["agents"] if a["hostname"] == "drf-host")
        return Resources.parse(agent["available"]).contains(Resources.parse("cpus:9;mem:18432"))
    cluster.wait_until(freed, 10, "the agent's resources freed")


# --------------------------------------------------------------------------- 2
class DeclineFirst(RecordingScheduler):
    """Declines the first offer for ``refuse`` seconds, every later one for an hour."""

    def __init__(self, refuse: float) -> None:
        super().__init__()
        self.refuse = refuse

    def on_offers(self, driver, offers):
        for offer in offers:
            first = len(self.of("resource_offers")) == 1 and offer is offers[0]
            driver.decline_offer(offer.id, Filters(refuse_seconds=self.refuse) if first else LONG)


def test_declined_agent_is_not_reoffered_within_refuse_seconds(cluster):
    cluster.start_master()
    cluster.start_agent("filter-host", "cpus:2;mem:1024")
    agent_id = cluster.agent_id("filter-host")
    fw = DeclineFirst(refuse=3.0)
    cluster.driver(fw, "decliner")

    def offer_times():
        return [t for t, offers in fw.timed("resource_offers") if any(o.agent_id == agent_id for o in offers)]

    fw.wait(lambda: len(offer_times()) >= 2, 15, "the agent offered again after the filter", cluster.diagnostics)
    first, second = offer_times()[:2]
    gap = second - first
    # never earlier than the filter (which started after the first offer arrived) ...
    assert gap >= 3.0, f"re-offered after {gap:.3f}s despite refuse_seconds=3"
    # ... and not much later: an allocation cycle (0.2 s) after it expired, plus scheduling slack
    assert gap < 3.0 + 2.0, f"re-offered only after {gap:.3f}s"


# --------------------------------------------------------------------------- 3
class LaunchOneThenHold(RecordingScheduler):
    """Launches one long task on the first offer (the rest comes back at
    once) and holds every later offer without answering it."""

    def __init__(self) -> None:
        super().__init__()
        self.launch_offer = None

    def on_offers(self, driver, offers):
        if self.launch_offer is None:
            offer = offers[0]
            self.launch_offer = offer.id
            driver.launch_tasks([offer.id], [TaskInfo(task_id="doomed", agent_id=offer.agent_id,
                                                      command="sleep 600",
                                                      resources=Resources.parse("cpus:1;mem:128"))], NONE)


def test_killed_agent_rescinds_its_offers_and_loses_its_tasks(cluster):
    cluster.start_master()
    cluster.start_agent("victim", "cpus:2;mem:1024")
    agent_id = cluster.agent_id("victim")
    fw = LaunchOneThenHold()
    cluster.driver(fw, "holder")

    def held_offers():
        return [o.id for batch in fw.of("resource_offers") for o in batch
                if o.agent_id == agent_id and o.id != fw.launch_offer]

    fw.wait(lambda: running(fw, ["doomed"]) and held_offers(), 15, "a running task and a held offer",
            cluster.diagnostics)
    held = set(held_offers())
    outstanding = {o["id"] for o in cluster.state()["offers"]}
    assert held <= outstanding, f"held offers {held} not outstanding in /state {outstanding}"

    killed_at = time.monotonic()
    cluster.kill_agent("victim")

    def lost():
        rescinded = set(fw.of("offer_rescinded"))
        task_lost = any(s.task_id == "doomed" and s.state == TaskState.LOST for s in fw.statuses())
        return held <= rescinded and task_lost and agent_id in fw.of("agent_lost")

    fw.wait(lost, 10, "offer_rescinded, TASK_LOST and agent_lost after the agent died", cluster.diagnostics)
    elapsed = time.monotonic() - killed_at
    # ping interval 0.5 s x 3 missed pongs: noticed within a few seconds
    assert elapsed < 8.0, f"the agent's loss took {elapsed:.1f}s to reach the framework"
    lost_update = next(s for s in fw.statuses("doomed") if s.state == TaskState.LOST)
    assert lost_update.agent_id == agent_id
    doc = cluster.wait_until(lambda: (lambda d: d if agent_id not in {a["id"] for a in d["agents"]} else None)(
        cluster.state()), 5, "the agent gone from /state")
    assert not any(o["agent_id"] == agent_id for o in doc["offers"])


# --------------------------------------------------------------------------- 4
class AckAllButFirstRunning(RecordingScheduler):
    """Explicit acknowledgements: acknowledges every update except the first
    delivery of TASK_RUNNING (which the agent must therefore re-send)."""

    def __init__(self) -> None:
        super().__init__()
        self.launched = False
        self.skipped_uuid = ""
        self.acked_running_at: float | None = None

    def on_offers(self, driver, offers):
        for offer in offers:
            if not self.launched:
                self.launched = True
                driver.launch_tasks([offer.id], [TaskInfo(task_id="short", agent_id=offer.agent_id,
                                                          command="sleep 0.2",
                                                          resources=Resources.parse("cpus:0.5;mem:64"))], LONG)
            else:
                driver.decline_offer(offer.id, LONG)

    def on_status(self, driver, status):
        if status.state == TaskState.RUNNING and not self.skipped_uuid:
            self.skipped_uuid = status.uuid   # "lose" this acknowledgement
            return
        if status.state == TaskState.RUNNING:
            self.acked_running_at = time.monotonic()
        driver.acknowledge_status_update(status)


def test_unacknowledged_update_is_retried_until_acknowledged(cluster):
    cluster.start_master()
    cluster.start_agent("ack-host", "cpus:1;mem:256")
    fw = AckAllButFirstRunning()
    cluster.driver(fw, "no-implicit-acks", implicit_acknowledgements=False)

    fw.wait(lambda: any(s.state == TaskState.FINISHED for s in fw.statuses("short")), 20,
            "TASK_FINISHED after the re-sent TASK_RUNNING was acknowledged", cluster.diagnostics)
    timed = [(t, s) for t, s in fw.timed("status_update") if s.task_id == "short"]
    running_updates = [(t, s) for t, s in timed if s.state == TaskState.RUNNING]
    assert len(running_updates) >= 2, f"TASK_RUNNING was not re-sent: {[s.state for _, s in timed]}"
    (t1, first), (t2, again) = running_updates[:2]
    assert first.uuid and again.uuid == first.uuid == fw.skipped_uuid
    assert t2 - t1 >= 0.4, f"re-sent after {t2 - t1:.3f}s; the agent's first retry is due after 0.5 s"
    # the task ended long before, yet its terminal update waited for the acknowledgement
    finished_at, finished = next((t, s) for t, s in timed if s.state == TaskState.FINISHED)
    assert fw.acked_running_at is not None and finished_at >= fw.acked_running_at
    assert finished.uuid and finished.uuid != first.uuid
    assert finished.exit_code == 0
    states = [s.state for _, s in timed]
    assert states.index(TaskState.FINISHED) > max(i for i, st in enumerate(states) if st == TaskState.RUNNING)


# --------------------------------------------------------------------------- 5
class RaisesOnce(RecordingScheduler):
    """resource_offers raises the first time; afterwards it launches one
    short task and declines everything else."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.launched = False

    def on_offers(self, driver, offers):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("boom in resource_offers")
        for offer in offers:
            if not self.launched:
                self.launched = True
                driver.launch_tasks([offer.id], [TaskInfo(task_id="after-boom", agent_id=offer.agent_id,
                                                          command="echo survived",
                                                          resources=Resources.parse("cpus:0.5;mem:64"))], LONG)
            else:
                driver.decline_offer(offer.id, LONG)


def test_a_raising_callback_is_reported_and_aborts_the_driver_as_mesos_does(cluster):
    # As Mesos's native driver: an exception in a callback aborts the driver
    # (DRIVER_ABORTED), so that a program relying on it fails instead of
    # running on with a scheduler in an unknown state (docs/framework-api.rst).
    cluster.start_master("--offer-timeout", "1.0")
    cluster.start_agent("boom-host", "cpus:1;mem:256")
    fw = RaisesOnce()
    driver = cluster.driver(fw, "raiser")

    fw.wait(lambda: fw.of("error"), 15, "error() for the exception", cluster.diagnostics)
    assert any("boom in resource_offers" in message and "the driver aborts" in message
               for message in fw.of("error")), fw.of("error")
    assert driver.join() is DriverStatus.ABORTED
    assert fw.calls == 1 and not fw.launched   # no callback after the abort


# --------------------------------------------------------------------------- 6
class LaunchN(RecordingScheduler):
    """Launches ``count`` tasks of ``need`` running ``command``, as many per offer as fit."""

    def __init__(self, count: int, need: str, command: str, prefix: str = "t") -> None:
        super().__init__()
        self.count, self.need, self.command, self.prefix = count, Resources.parse(need), command, prefix
        self.launched: list[str] = []

    def on_offers(self, driver, offers):
        for offer in offers:
            tasks, free = [], offer.resources
            while len(self.launched) < self.count and free.contains(self.need):
                task_id = f"{self.prefix}-{len(self.launched)}"
                self.launched.append(task_id)
                tasks.append(TaskInfo(task_id=task_id, agent_id=offer.agent_id, command=self.command,
                                      resources=self.need))
                free -= self.need
            if tasks:
                driver.launch_tasks([offer.id], tasks, NONE)
            else:
                driver.decline_offer(offer.id, LONG)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_of_local_leaves_no_process_behind(cluster, signum):
    local = cluster.start_local("--agents", "2", "--resources", "cpus:2;mem:1024")
    cluster.wait_for_agents(["node-0", "node-1"])
    fw = LaunchN(4, "cpus:0.5;mem:64", "sleep 600")
    cluster.driver(fw, "sleepers")
    task_ids = [f"t-{i}" for i in range(4)]
    fw.wait(lambda: running(fw, task_ids), 20, "four running tasks", cluster.diagnostics)
    pids = cluster.wait_until(
        lambda: (lambda found: found if set(found.values()) == set(task_ids) else None)(
            task_processes(cluster.work_root)),
        10, "the four sleep processes")

    # Ctrl-C in a terminal signals the whole foreground process group (SIGTERM: `kill`, docker stop, systemd)
    local.signal_group(signum)
    try:
        code = local.popen.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`mesoslike local` still running 15 s after {signal.Signals(signum).name}\n"
                    + cluster.diagnostics())
    assert code == 0, f"exit status {code}\n{local.output()}"
    # all of it is gone: the task processes (in their own sessions) and the local process group
    leftover = [pid for pid in pids if alive(pid)]
    assert not leftover, f"task processes survived {signal.Signals(signum).name}: {leftover}"
    assert not task_processes(cluster.work_root)
    assert not group_members(local.pgid)


# --------------------------------------------------------------------------- 7, 8
def test_state_command_prints_agents_and_frameworks(cluster):
    cluster.start_master()
    cluster.start_agent("state-host-1", "cpus:1;mem:256")
    cluster.start_agent("state-host-2", "cpus:1;mem:256")
    fw = LaunchN(0, "cpus:0.1;mem:32", "true")
    cluster.driver(fw, "state-fw")
    cluster.wait_until(lambda: cluster.framework("state-fw"), 15, "the framework in /state")

    def run_state(*extra):
        done = subprocess.run([sys.executable, "-m", "mesoslike", "state", "--master", cluster.address, *extra],
                              cwd=str(REPO), env=cluster.client_env(), capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    text = run_state()
    for needle in ("state-host-1", "state-host-2", "state-fw"):
        assert needle in text, f"{needle!r} missing from:\n{text}"
    doc = json.loads(run_state("--json"))
    assert {"agents", "frameworks", "offers", "leader"} <= set(doc)
    assert sorted(a["hostname"] for a in doc["agents"]) == ["state-host-1", "state-host-2"]
    assert [f["name"] for f in doc["frameworks"]] == ["state-fw"]
    assert doc["leader"]["address"] == cluster.address


def test_metrics_health_and_unknown_path(cluster):
    cluster.start_master()
    cluster.start_agent("metrics-host", "cpus:1;mem:256")
    fw = LaunchN(1, "cpus:0.5;mem:64", "sleep 600")
    cluster.driver(fw, "metrics-fw")
    fw.wait(lambda: running(fw, ["t-0"]), 15, "a running task", cluster.diagnostics)

    def scrape():
        status, content_type, body = http_get(cluster.http + "/metrics")
        assert status == 200
        assert content_type.startswith("text/plain"), content_type
        return body

    # the master learns of TASK_RUNNING as the framework does; allow it a moment
    body = cluster.wait_until(lambda: (lambda b: b if re.search(
        r'^mesoslike_tasks\{state="TASK_RUNNING"\} 1\.0$', b, re.M) else None)(scrape()), 5, "TASK_RUNNING 1")
    made = re.search(r"^mesoslike_offers_made_total (\S+)$", body, re.M)
    assert made and float(made.group(1)) >= 1, body
    assert re.search(r"^mesoslike_agents_registered 1\.0$", body, re.M), body
    assert re.search(r"^# TYPE mesoslike_offers_made_total counter$", body, re.M), body

    assert http_get(cluster.http + "/health")[0] == 200
    status, _, _ = http_get(cluster.http + "/no/such/endpoint")
    assert status == 404
