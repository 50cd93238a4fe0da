"""Static reservations end to end (issue 18 §4): a real master and an agent
started with ``--resources "cpus(analytics):...;cpus:...;..."``; a framework
in role ``analytics`` is offered the reserved part and runs a task on it, a
framework in role ``web`` is offered only the unreserved part, however often
it asks; ``/state`` shows reserved vs unreserved per agent and per role."""

from __future__ import annotations

import pytest

from e2e_helpers import RecordingScheduler, cluster  # noqa: F401 (cluster: a fixture)
from mesoslike import Filters, Resources, TaskInfo, TaskState

pytestmark = pytest.mark.timeout(90)

AGENT_RESOURCES = "cpus(analytics):2;mem(analytics):512;cpus:1;mem:256"
RESERVED_TASK = Resources.parse("cpus(analytics):1;mem(analytics):128")
AGAIN = Filters(refuse_seconds=0.0)


class Analytics(RecordingScheduler):
    """Launches one long task on reserved resources, declines the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.launched = False

    def on_offers(self, driver, offers):
        for offer in offers:
            if not self.launched and offer.resources.contains(RESERVED_TASK):
                self.launched = True
                driver.launch_tasks([offer.id], [TaskInfo(task_id="on-reserved", agent_id=offer.agent_id,
                                                          command="sleep 600", resources=RESERVED_TASK)], AGAIN)
            else:
                driver.decline_offer(offer.id, AGAIN)


class Web(RecordingScheduler):
    """Declines every offer at once so that it is offered again and again."""

    def on_offers(self, driver, offers):
        for offer in offers:
            driver.decline_offer(offer.id, AGAIN)


def test_reserved_resources_go_only_to_their_role(cluster):
    cluster.start_master()
    cluster.start_agent("res1", AGENT_RESOURCES)
    doc = cluster.state()
    (agent,) = doc["agents"]
    assert agent["reserved"] == "cpus(analytics):2;mem(analytics):512"
    # the agent adds what it has of the kinds not given (disk, ports) unreserved
    assert Resources.parse(agent["unreserved"]).only(["cpus", "mem"]) == Resources.parse("cpus:1;mem:256")
    assert doc["reservations"]["analytics"]["reserved"] == "cpus(analytics):2;mem(analytics):512"

    web = Web()
    cluster.driver(web, "web", role="web")
    analytics = Analytics()
    cluster.driver(analytics, "analytics", role="analytics")
    analytics.wait(lambda: any(s.task_id == "on-reserved" and s.state == TaskState.RUNNING
                               for s in analytics.statuses()), 30, "the task on reserved resources running")
    # web keeps being offered (it declines with refuse 0) while analytics runs
    seen = len(web.of("resource_offers"))
    web.wait(lambda: len(web.of("resource_offers")) >= seen + 5, 30, "five more offer batches to web")

    web_offers = [offer for batch in web.of("resource_offers") for offer in batch]
    assert web_offers, "web was never offered the unreserved part"
    assert all(not offer.resources.has_reservations() for offer in web_offers), \
        [str(offer.resources) for offer in web_offers if offer.resources.has_reservations()]
    assert any(offer.resources.reserved("analytics") for batch in analytics.of("resource_offers")
               for offer in batch)

    def placed(doc):
        entry = doc["reservations"].get("analytics")
        return doc if entry and Resources.parse(entry["allocated_reserved"]).contains(RESERVED_TASK) else None
    doc = cluster.wait_until(lambda: placed(cluster.state()), 10, "analytics's task counted in /state")
    frameworks = {f["name"]: f for f in doc["frameworks"]}
    assert Resources.parse(frameworks["analytics"]["used"]) == RESERVED_TASK
    assert not Resources.parse(frameworks["web"]["used"])
