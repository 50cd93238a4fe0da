"""Custom executors end to end (issue 18 §1, docs/framework-api.rst "Custom
executors", docs/agent.rst): real master and agent processes, a real
executor process (tests/executor_program.py) run by the agent under its
supervisor, talking over the agent's executor channel."""

from __future__ import annotations

import sys
import threading
from collections import deque
from pathlib import Path

import pytest

from agent_helpers import agent_state, kill_9, start_agent
from e2e_helpers import RecordingScheduler, alive, cluster  # noqa: F401 (fixture)
from mesoslike import ExecutorInfo, FrameworkInfo, Resources, TaskInfo, TaskState
from waiting import wait_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")]

PROGRAM = Path(__file__).with_name("executor_program.py")
TASK = Resources.parse("cpus:0.1;mem:16")
EXECUTOR = ExecutorInfo("exec-1", f"{sys.executable} {PROGRAM}", Resources.parse("cpus:0.5;mem:64"),
                        shutdown_grace_period=2.0)
AGENT = "cpus:2;mem:1024"


class ExecutorScheduler(RecordingScheduler):
    """Launches the queued (task_id, command) pairs on its custom executor,
    as many as fit in each offer (the executor's resources as well, the
    first time on an agent), and records everything."""

    def __init__(self, executor: ExecutorInfo = EXECUTOR) -> None:
        super().__init__()
        self.executor = executor
        self.queue: deque[tuple[str, str]] = deque()
        self.lock = threading.Lock()
        self.executor_on: set[str] = set()   # agents where the executor was launched

    def add(self, *tasks: tuple[str, str]) -> None:
        with self.lock:
            self.queue.extend(tasks)

    def on_offers(self, driver, offers):
        for offer in offers:
            left, tasks = offer.resources, []
            with self.lock:
                while self.queue:
                    need = TASK if offer.agent_id in self.executor_on else TASK + self.executor.resources
                    if not left.contains(need):
                        break
                    task_id, command = self.queue.popleft()
                    tasks.append(TaskInfo(task_id, offer.agent_id, command, TASK, executor=self.executor))
                    left = left - need
                    self.executor_on.add(offer.agent_id)
            if tasks:
                driver.launch_tasks([offer.id], tasks)
            else:
                driver.decline_offer(offer.id)

    def state_of(self, task_id: str) -> str | None:
        statuses = self.statuses(task_id)
        return statuses[-1].state if statuses else None

    def messages(self) -> list[bytes]:
        return [data for _, data in self.of("framework_message")]


def executor_pids(scheduler: ExecutorScheduler, *task_ids: str) -> set[int]:
    """The executor processes that reported the tasks RUNNING (their message is ``pid N``)."""
    return {int(s.message.split()[1]) for t in task_ids for s in scheduler.statuses(t)
            if s.state == TaskState.RUNNING and s.message.startswith("pid ")}


def run_cluster(cluster, scheduler, name="executors", **framework):
    cluster.start_master()
    start_agent(cluster, "a1", AGENT)
    return cluster.driver(scheduler, name, framework=FrameworkInfo(name, **framework))


def test_one_executor_runs_many_tasks_and_messages_go_both_ways(cluster):
    scheduler = ExecutorScheduler()
    scheduler.add(*[(f"t{i}", "finish") for i in range(5)])
    driver = run_cluster(cluster, scheduler)
    ids = [f"t{i}" for i in range(5)]
    scheduler.wait(lambda: all(scheduler.state_of(t) == TaskState.FINISHED for t in ids), 40,
                   "five tasks to finish on the executor", cluster.diagnostics)
    # one process ran them all, and said so as its updates' source
    pids = executor_pids(scheduler, *ids)
    assert len(pids) == 1, pids
    assert all(s.source == "SOURCE_EXECUTOR" for t in ids for s in scheduler.statuses(t)
               if s.state in (TaskState.RUNNING, TaskState.FINISHED))
    # executor -> scheduler: its registration message reached framework_message
    pid = pids.pop()
    scheduler.wait(lambda: f"registered exec-1 {pid}".encode() in scheduler.messages(), 20, "the executor's hello")
    # scheduler -> executor -> scheduler
    agent_id = scheduler.statuses("t0")[-1].agent_id
    driver.send_framework_message(agent_id, b"ping", "", executor_id="exec-1")
    scheduler.wait(lambda: f"pong exec-1 {pid}".encode() in scheduler.messages(), 20, "the executor's pong")
    # later tasks go to the same process
    scheduler.add(("t5", "finish"), ("t6", "finish"))
    driver.revive_offers()
    scheduler.wait(lambda: all(scheduler.state_of(t) == TaskState.FINISHED for t in ("t5", "t6")), 40,
                   "two more tasks", cluster.diagnostics)
    assert executor_pids(scheduler, "t5", "t6") == {pid}
    assert alive(pid)
