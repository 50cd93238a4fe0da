"""A standalone master restarted on its --work-dir recovers its registry:
agents re-register with their running tasks, frameworks re-subscribe, and
no task is lost or killed."""

import pytest

from e2e_helpers import RecordingScheduler, cluster, http_get  # noqa: F401
from mesoslike import FrameworkInfo, Resources, TaskInfo, TaskState
from waiting import wait_until

pytestmark = pytest.mark.timeout(120)


class OneLongTask(RecordingScheduler):
    def __init__(self):
        super().__init__()
        self.launched = False

    def on_offers(self, driver, offers):
        for offer in offers:
            if not self.launched:
                self.launched = True
                driver.launch_tasks([offer.id], [TaskInfo("long", offer.agent_id, "sleep 600",
                                                          Resources.parse("cpus:1;mem:64"))])
            else:
                driver.decline_offer(offer.id)


def test_restarted_master_recovers_agents_frameworks_and_running_tasks(cluster, tmp_path):
    registry_dir = tmp_path / "master"
    cluster.start_master("--work-dir", str(registry_dir), "--agent-reregister-timeout", "30")
    cluster.start_agent("a1", "cpus:2;mem:512")
    scheduler = OneLongTask()
    driver = cluster.driver(scheduler, "keeper", framework=FrameworkInfo("keeper", failover_timeout=60.0))
    scheduler.wait(lambda: any(s.state == TaskState.RUNNING for s in scheduler.statuses("long")), 20,
                   "the task to run")
    framework_id = scheduler.framework_id
    assert (registry_dir / "registry.json").exists()

    cluster.restart_master("--work-dir", str(registry_dir), "--agent-reregister-timeout", "30")

    def recovered():
        try:
            state = cluster.state()
        except OSError:
            return False
        frameworks = {f["id"]: f for f in state["frameworks"]}
        framework = frameworks.get(framework_id)
        return (framework and framework["connected"] and [a["hostname"] for a in state["agents"]] == ["a1"]
                and [(t["id"], t["state"]) for t in framework["tasks"]] == [("long", TaskState.RUNNING)])

    wait_until(recovered, 30, "the restarted master to recover the agent, framework and task")
    scheduler.wait(lambda: scheduler.of("reregistered"), 10, "the framework to re-register")
    states = [s.state for s in scheduler.statuses("long")]
    assert TaskState.LOST not in states and TaskState.KILLED not in states
    # nothing bad arrives late either: the master answers a reconciliation
    # after everything it sent the framework before, on the same connection
    driver.reconcile_tasks([])
    scheduler.wait(lambda: any(s.reason == "REASON_RECONCILIATION" for s in scheduler.statuses("long")), 10,
                   "the master's answer to a reconciliation")
    assert [s.state for s in scheduler.statuses("long") if s.terminal] == []
    assert [s.state for s in scheduler.statuses("long") if s.reason == "REASON_RECONCILIATION"] == \
        [TaskState.RUNNING]
