"""Nothing lost, nothing told twice, under load (issue 12 §1 and §4;
docs/reliability.rst).

Bounded stress runs of the recipes that lost work: a master process with
10 simulated agents in another process answering at once, 20,000 tasks; and
one real agent process given 5,000 tasks in one ACCEPT. Each task must reach
exactly one terminal state at the framework, no update may reach the
scheduler twice, and the master must agree: every task's story told
(nothing live), as many tasks completed as launched, in the same states.
Before the fixes the master silently dropped RUN_TASKs (tasks STAGING
forever) and UPDATEs, and delivered one update up to 900 times."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from e2e_helpers import REPO, cluster  # noqa: F401  (the cluster fixture)
from stress_helpers import CountingScheduler, metrics
from waiting import wait_until

pytestmark = pytest.mark.timeout(300)

#: liveness a loaded 2-core machine keeps (the e2e defaults, 0.5 s x 3, are
#: for idle clusters): 15 s before an agent or a framework counts as gone
PATIENT = ("--ping-interval", "3", "--max-agent-ping-timeouts", "5", "--heartbeat-interval", "3")


def assert_every_task_ended_once_and_the_master_agrees(cluster, scheduler, tasks, timeout):  # noqa: F811
    wait_until(scheduler.finished, timeout, f"a terminal state for each of {tasks} tasks",
               diagnostics=lambda: json.dumps(scheduler.figures()) + "\n" + cluster.diagnostics())
    figures = scheduler.figures()
    assert figures["with_terminal_state"] == tasks and figures["lost"] == 0, figures
    assert figures["twice_terminal"] == 0, figures          # exactly one terminal state per task
    assert figures["duplicate_uuids"] == 0, figures          # no update reached the callback twice

    def master_agrees():   # every story told: terminal and acknowledged
        framework = cluster.framework("stress")
        return framework is not None and not framework["tasks"]
    cluster.wait_until(master_agrees, 60, "the master to hold no live task of the framework")
    values = metrics(cluster.http)
    completed = {name.split('"')[1]: int(value) for name, value in values.items()
                 if name.startswith("mesoslike_tasks_completed_total{") and int(value)}   # every state is listed
    assert values["mesoslike_tasks_launched_total"] == tasks
    assert completed == figures["terminal_states"], (completed, figures["terminal_states"])
    assert values['mesoslike_transport_frames_dropped_total{reason="overflow"}'] == 0
    return figures, values


def test_twenty_thousand_tasks_on_ten_simulated_agents_each_end_once(cluster, capsys):  # noqa: F811
    tasks = 20_000
    cluster.start_master(*PATIENT)
    agents = subprocess.Popen([sys.executable, str(REPO / "tests" / "stress_helpers.py"), "agents",
                               "--master", cluster.address, "--count", "10"],
                              env=cluster.agent_env(), stdout=subprocess.PIPE, start_new_session=True)
    try:
        cluster.wait_until(lambda: len(cluster.state()["agents"]) == 10, 30, "10 simulated agents")
        scheduler = CountingScheduler(tasks, "cpus:0.01;mem:1")
        cluster.driver(scheduler, "stress")
        figures, values = assert_every_task_ended_once_and_the_master_agrees(cluster, scheduler, tasks, 240)
    finally:
        os.killpg(agents.pid, signal.SIGTERM)
        seen = json.loads(agents.communicate(timeout=30)[0] or "{}")
    assert seen["tasks"] == tasks                             # each RUN_TASK reached its agent
    with capsys.disabled():
        print("\n" + json.dumps({"stress": "10 simulated agents", **figures, "agents_saw": seen,
                                 **{k: v for k, v in values.items() if "transport" in k or "retries" in k}}))


@pytest.mark.timeout(660)
def test_five_thousand_tasks_in_one_accept_to_one_agent_process_each_end_once(cluster, capsys):  # noqa: F811
    # each task starts under its own supervisor process (issue 15: tasks outlive their agent), which costs
    # a Python start per task: 5,000 take 3-7 minutes on the 2-core test machine (issue 14 is the speed)
    tasks = 5_000
    cluster.start_master(*PATIENT)
    cluster.start_agent("big", "cpus:60;mem:60000;disk:1000")
    scheduler = CountingScheduler(tasks, "cpus:0.01;mem:1", per_accept=tasks)
    cluster.driver(scheduler, "stress")
    figures, values = assert_every_task_ended_once_and_the_master_agrees(cluster, scheduler, tasks, 600)
    assert figures["terminal_states"] == {"TASK_FINISHED": tasks}
    with capsys.disabled():
        print("\n" + json.dumps({"stress": "one agent process, one ACCEPT", **figures,
                                 **{k: v for k, v in values.items() if "transport" in k or "retries" in k}}))
