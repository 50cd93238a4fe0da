"""Dynamic reservations across a master failover through real ZooKeeper
(issue 18 §4): two ``mesoslike master --zk`` processes elect a leader, a
framework in role ``analytics`` reserves through an offer and runs a task on
part of what it reserved, the leader is killed -9, and the new leader

* knows the reservation from the registry before the agent is back (the
  agent is frozen meanwhile, so nothing but the registry can tell it):
  ``/state``'s ``recovered_agents`` lists the agent with it;
* has it, and the task on it, once the agent re-registered;
* offers the reservation's free part only to the role: a framework in role
  ``web`` that declines everything at once is never offered a reserved
  kind, before or after the failover, while ``analytics`` is offered it.

Authenticated as every e2e cluster (docs/security.rst): the reserving
principal is ``fwA``, the key the framework's driver holds."""

from __future__ import annotations

import signal
import sys
import threading

import pytest

from e2e_helpers import RecordingScheduler, wait_for
from mesoslike import Filters, Launch, Reserve, Resources, TaskInfo, TaskState
from test_e2e_ha import BAD_STATES, group_url, make_cluster  # noqa: F401 (make_cluster: a fixture)
from test_reservations_e2e import Web
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="freezes processes")]

RESERVE = "cpus:1;mem:256"
#: what the reservation is, with the reserving principal the key of the driver authenticated as
RESERVED = Resources.parse("cpus(analytics,fwA):1;mem(analytics,fwA):256")
#: the part of it the long task uses; the rest is offered to the role
TASK = Resources.parse("cpus(analytics,fwA):0.5;mem(analytics,fwA):128")
FREE_PART = RESERVED - TASK
AGAIN = Filters(refuse_seconds=0.0)


class Reserver(RecordingScheduler):
    """Reserves on its first offer that can hold it and, in the same accept,
    runs a long task on part of the reservation; declines all else at once."""

    def __init__(self) -> None:
        super().__init__()
        self.done = threading.Event()

    def on_offers(self, driver, offers):
        for offer in offers:
            if not self.done.is_set() and offer.resources.contains(Resources.parse(RESERVE)):
                self.done.set()
                driver.accept_offers([offer.id], [
                    Reserve(RESERVE),
                    Launch([TaskInfo("on-reservation", offer.agent_id, "exec sleep 600", TASK)])], AGAIN)
            else:
                driver.decline_offer(offer.id, AGAIN)


def offered(scheduler: RecordingScheduler) -> list:
    """Every offer ``scheduler`` was made, in order."""
    return [offer for batch in scheduler.of("resource_offers") for offer in batch]


def dynamic(entries: list[dict]) -> list[dict]:
    return [entry for entry in entries if entry["type"] == "dynamic"]


def test_a_reservation_survives_a_leader_failover_and_is_offered_only_to_its_role(zookeeper, make_cluster):
    cluster = make_cluster(group_url(zookeeper, "reservations"))
    # the agent stays frozen for a while under load: it must not be removed meanwhile
    cluster.master_args += ("--agent-reregister-timeout", "30")
    cluster.start_masters(2)
    first = cluster.wait_for_leader()
    agent = cluster.start_agent("h1", "cpus:2;mem:512")
    cluster.wait_for_agents(first, ["h1"])
    reserver, web = Reserver(), Web()
    cluster.driver(reserver, "reserver", role="analytics")
    cluster.driver(web, "web", role="web")
    reserver.wait(lambda: TaskState.RUNNING in [s.state for s in reserver.statuses("on-reservation")], 30,
                  "the task on the just-reserved resources running", cluster.diagnostics)
    expected = [{"role": "analytics", "type": "dynamic", "principal": "fwA", "resources": str(RESERVED)}]
    doc = first.state()
    (h1,) = doc["agents"]
    assert dynamic(h1["reservations"]) == expected
    agent_id = h1["id"]

    # the agent frozen, the leader killed: only the registry can tell the next leader of the reservation
    agent.signal_group(signal.SIGSTOP)
    try:
        first.proc.kill()
        second = cluster.wait_for_leader(timeout=30)
        assert second is not first
        recovered = wait_for(lambda: second.state().get("recovered_agents"), 10,
                             "the new leader to list the agent it expects back", diagnostics=cluster.diagnostics)
        assert [(a["id"], a["hostname"]) for a in recovered] == [(agent_id, "h1")]
        assert dynamic(recovered[0]["reservations"]) == expected
        assert second.state()["agents"] == []
    finally:
        agent.signal_group(signal.SIGCONT)

    doc = cluster.wait_for_agents(second, ["h1"], timeout=30)
    (h1,) = doc["agents"]
    assert h1["id"] == agent_id and dynamic(h1["reservations"]) == expected
    assert doc["recovered_agents"] == []
    assert Resources.parse(doc["reservations"]["analytics"]["reserved_dynamic"]) == RESERVED

    # offered after the failover: the free part of the reservation to analytics only
    web_seen, reserver_seen = len(offered(web)), len(offered(reserver))
    reserver.wait(lambda: any(offer.resources.contains(FREE_PART) for offer in offered(reserver)[reserver_seen:]),
                  30, "the new leader to offer the reservation's free part to analytics", cluster.diagnostics)
    web.wait(lambda: len(offered(web)) >= web_seen + 5, 30, "five more offers to web after the failover",
             cluster.diagnostics)
    assert all(not offer.resources.has_reservations() for offer in offered(web)), \
        [str(offer.resources) for offer in offered(web) if offer.resources.has_reservations()]
    assert not BAD_STATES & {s.state for s in reserver.statuses("on-reservation")}, reserver.statuses()
    (framework,) = [f for f in second.state()["frameworks"] if f["name"] == "reserver"]
    assert [(t["id"], t["state"], Resources.parse(t["resources"])) for t in framework["tasks"]] == \
        [("on-reservation", TaskState.RUNNING, TASK)]
