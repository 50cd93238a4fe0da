"""Reservations end to end (issue 18 §4), real processes.

Static: a real master and an agent started with ``--resources
"cpus(analytics):...;cpus:...;..."``; a framework in role ``analytics`` is
offered the reserved part and runs a task on it, a framework in role ``web``
is offered only the unreserved part, however often it asks; ``/state``
shows reserved vs unreserved per agent and per role.

Dynamic: a framework reserves through an offer and launches on it; the
reservation survives a master restart (registry) and an agent kill -9 and
restart (its checkpoint); an operator reserves and unreserves over HTTP."""

from __future__ import annotations

import json
import sys

import pytest

from e2e_helpers import RecordingScheduler, cluster, http_get, run_on_local  # noqa: F401 (cluster: a fixture)
from mesoslike import Filters, FrameworkInfo, Launch, Reserve, Resources, TaskInfo, TaskState
from test_operations import cli, post

pytestmark = pytest.mark.timeout(120)

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


# ==================================================== dynamic reservations
RESERVE = "cpus:1;mem:128"
DYNAMIC = Resources.parse("cpus(analytics,fwA):1;mem(analytics,fwA):128")   # fwA: the driver's principal


class Reserver(RecordingScheduler):
    """Reserves part of its first offer and, in the same accept, runs a long
    task on what it just reserved; declines the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.done = False

    def on_offers(self, driver, offers):
        for offer in offers:
            if not self.done and offer.resources.contains(Resources.parse(RESERVE)):
                self.done = True
                driver.accept_offers([offer.id], [
                    Reserve(RESERVE),
                    Launch([TaskInfo(task_id="on-reservation", agent_id=offer.agent_id, command="sleep 600",
                                     resources=DYNAMIC)])], Filters(refuse_seconds=3600.0))
            else:
                driver.decline_offer(offer.id, Filters(refuse_seconds=3600.0))


def dynamic_reservations(doc: dict, hostname: str) -> list[dict]:
    agent = next((a for a in doc["agents"] if a["hostname"] == hostname), None)
    return [r for r in (agent or {}).get("reservations", []) if r["type"] == "dynamic"]


def test_a_reservation_made_through_an_offer_survives_a_master_restart_and_an_agent_kill(cluster, tmp_path):
    """A framework reserves through an offer (principal from its key) and
    runs a task on it; the reservation is in the registry, so a master
    killed -9 and restarted on its work dir knows it, and the agent killed
    -9 and restarted registers again with it from its checkpoint (the
    agent's word wins on re-registration: without the checkpoint it would be
    gone; if the master removed the agent meanwhile, it registers anew with
    them, as a Mesos agent does with its checkpointed resources)."""
    registry_dir = tmp_path / "master"
    cluster.start_master("--work-dir", str(registry_dir), "--agent-reregister-timeout", "30")
    cluster.start_agent("dyn1", "cpus:2;mem:512")
    reserver = Reserver()
    cluster.driver(reserver, "reserver", framework=FrameworkInfo("reserver", role="analytics", failover_timeout=60))
    reserver.wait(lambda: any(s.state == TaskState.RUNNING for s in reserver.statuses("on-reservation")), 30,
                  "the task on the just-reserved resources running", cluster.diagnostics)
    expected = [{"role": "analytics", "type": "dynamic", "principal": "fwA", "resources": str(DYNAMIC)}]
    assert dynamic_reservations(cluster.state(), "dyn1") == expected
    registry = json.loads((registry_dir / "registry.json").read_text())
    (record,) = registry["agents"].values()
    assert Resources.parse(record["resources"]).dynamically_reserved() == DYNAMIC

    cluster.restart_master("--work-dir", str(registry_dir), "--agent-reregister-timeout", "30")

    def reregistered_with_it():
        try:
            return dynamic_reservations(cluster.state(), "dyn1") == expected
        except OSError:
            return False
    cluster.wait_until(reregistered_with_it, 30, "the restarted master to show the reservation")

    before = next(a for a in cluster.state()["agents"] if a["hostname"] == "dyn1")["http_address"]
    cluster.kill_agent("dyn1")
    assert (cluster.work_root / "dyn1" / "meta" / "resources.ckpt").exists()
    cluster.start_agent("dyn1", "cpus:2;mem:512", wait=False)

    def back_with_it():   # re-registered: its new HTTP address (port 0: another one) is the master's
        doc = cluster.state()
        agent = next((a for a in doc["agents"] if a["hostname"] == "dyn1"), None)
        return doc if agent and agent["http_address"] != before and dynamic_reservations(doc, "dyn1") == expected \
            else None
    seen = cluster.wait_until(back_with_it, 30, "the restarted agent re-registered with its reservation")
    agent = next(a for a in seen["agents"] if a["hostname"] == "dyn1")
    status, _, body = http_get(agent["http_address"].rstrip("/") + "/state")
    assert status == 200 and Resources.parse(json.loads(body)["resources"]).dynamically_reserved() == DYNAMIC
    agent = next(a for a in seen["agents"] if a["hostname"] == "dyn1")
    assert Resources.parse(agent["resources"]).only(["cpus", "mem"]) == Resources.parse("cpus:1;mem:384")
    assert seen["reservations"]["analytics"]["reserved_dynamic"] == str(DYNAMIC)


def test_operator_reserves_and_unreserves_over_http(cluster):
    """``POST /reserve`` and ``/unreserve`` with the operator's token (the
    second through ``mesoslike unreserve``): the reservation carries the
    operator's principal and ``mesoslike state`` lists it; without a token:
    401. Then a reservation with labels (``mesoslike reserve --label``),
    listed with them, unreserved by its labelled kind."""
    cluster.start_master()
    cluster.start_agent("op1", "cpus:2;mem:512")
    body = {"agent_id": "op1", "resources": "cpus(web):1;mem(web):64"}
    assert post(cluster.http + "/reserve", body)[0] == 401
    status, reply = post(cluster.http + "/reserve", body, cluster.token)
    assert status == 200, reply
    assert reply["resources"] == "cpus(web,ops):1;mem(web,ops):64"
    assert dynamic_reservations(cluster.state(), "op1") == [
        {"role": "web", "type": "dynamic", "principal": "ops", "resources": "cpus(web,ops):1;mem(web,ops):64"}]
    shown = cli(cluster, "state", "--master", cluster.address, token=None)
    assert shown.returncode == 0, shown.stderr
    assert "dynamic reservations (1)" in shown.stdout and "cpus(web,ops):1;mem(web,ops):64" in shown.stdout
    status, reply = post(cluster.http + "/reserve", {"agent_id": "op1", "resources": "cpus(web):5"}, cluster.token)
    assert status == 409 and "has no" in reply["error"]

    done = cli(cluster, "unreserve", "--master", cluster.http, "op1", "cpus(web,ops):1;mem(web,ops):64")
    assert done.returncode == 0, done.stderr
    assert "unreserved" in done.stdout
    assert dynamic_reservations(cluster.state(), "op1") == []
    # the string `reserve` takes, `unreserve` takes back (the role's reservation by the operator)
    for command in ("reserve", "unreserve"):
        done = cli(cluster, command, "--master", cluster.http, "op1", "cpus(web):0.5")
        assert done.returncode == 0, done.stderr
    assert "cpus(web,ops):0.5 unreserved" in done.stdout
    assert dynamic_reservations(cluster.state(), "op1") == []

    # with labels (Mesos's ReservationInfo.labels): part of the reserved kinds
    done = cli(cluster, "reserve", "--master", cluster.http, "--label", "ticket=OPS-42", "op1", "cpus(web):1")
    assert done.returncode == 0, done.stderr
    assert "reserved cpus(web,ops,ticket=OPS-42):1" in done.stdout
    assert dynamic_reservations(cluster.state(), "op1") == [
        {"role": "web", "type": "dynamic", "principal": "ops", "labels": [{"key": "ticket", "value": "OPS-42"}],
         "resources": "cpus(web,ops,ticket=OPS-42):1"}]
    status, reply = post(cluster.http + "/reserve", {"agent_id": "op1", "resources": "cpus(web):0.5",
                                                     "labels": [{"key": "ticket", "value": "OPS 42"}]}, cluster.token)
    assert status == 400 and "cannot be part of a kind" in reply["error"], reply
    labelled = {"agent_id": "op1", "resources": "cpus(web,ops,ticket=OPS-42):1"}
    status, reply = post(cluster.http + "/unreserve", labelled, cluster.token)
    assert status == 200, reply
    assert dynamic_reservations(cluster.state(), "op1") == []


def test_the_example_reserves_launches_and_unreserves_on_a_local_cluster():
    """examples/reserve_then_launch.py through the public API on ``mesoslike
    local`` (authenticated: its framework principal is ``client``)."""
    done = run_on_local(sys.executable, "examples/reserve_then_launch.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2. offered cpus(analytics,client):0.5;mem(analytics,client):64 reserved" in done.stdout
    assert "on-reserved: TASK_FINISHED" in done.stdout
    assert "nothing reserved: done" in done.stdout


# ==================================================================== ACLs
#: appended to the cluster's credentials (docs/security.rst, "Reservations and the ACLs")
RESERVATION_ACLS = """
[[acls.reserve_resources]]
principals = ["fwA"]
roles = ["analytics"]
[[acls.reserve_resources]]
principals = ["ops"]
roles = ["web"]
[[acls.unreserve_resources]]
principals = ["ops"]
reserver_principals = ["ops"]
"""


def test_the_acls_limit_reserving_to_roles_and_unreserving_to_reserver_principals(cluster):
    """With ``reserve_resources`` and ``unreserve_resources`` rules: fwA
    reserves for analytics through an offer; fwB (no rule) is refused for
    web, its accept refused whole; the operator ``ops`` may reserve for web
    only (403 for analytics) and unreserve only what ``ops`` reserved (403
    for fwA's reservation, whichever of its HTTP paths asks); refusals are
    counted per permission."""
    with open(cluster.keys.credentials, "a") as credentials:
        credentials.write(RESERVATION_ACLS)
    cluster.start_master()
    cluster.start_agent("acl1", "cpus:3;mem:768")
    reserver = Reserver()
    cluster.driver(reserver, "reserver", role="analytics")
    reserver.wait(lambda: any(s.state == TaskState.RUNNING for s in reserver.statuses("on-reservation")), 30,
                  "fwA's task on what it reserved running", cluster.diagnostics)

    refused = Reserver()
    cluster.driver(refused, "refused", role="web", key=cluster.keys.secret("fwB"))
    refused.wait(lambda: refused.of("error"), 30, "fwB's reserve to be refused", cluster.diagnostics)
    (error,) = refused.of("error")[:1]
    assert "not authorized: principal fwB lacks the reserve_resources permission for role 'web'" in error, error
    assert [s.state for s in refused.statuses("on-reservation")] == [TaskState.DROPPED]

    body = {"agent_id": "acl1", "resources": "cpus(analytics):0.5"}
    status, reply = post(cluster.http + "/reserve", body, cluster.token)
    assert status == 403 and "principal ops lacks the reserve_resources permission for role 'analytics'" \
        in reply["error"], reply
    status, reply = post(cluster.http + "/reserve", {"agent_id": "acl1", "resources": "cpus(web):0.5"}, cluster.token)
    assert status == 200 and reply["resources"] == "cpus(web,ops):0.5", reply
    status, reply = post(cluster.http + "/unreserve", {"agent_id": "acl1", "resources": str(DYNAMIC)}, cluster.token)
    assert status == 403 and "on what principal 'fwA' reserved" in reply["error"], reply
    done = cli(cluster, "unreserve", "--master", cluster.http, "acl1", "cpus(web,ops):0.5")
    assert done.returncode == 0, done.stderr
    assert dynamic_reservations(cluster.state(), "acl1") == [
        {"role": "analytics", "type": "dynamic", "principal": "fwA", "resources": str(DYNAMIC)}]
    status, _, metrics = http_get(cluster.http + "/metrics")
    assert 'mesoslike_authorization_refused_total{permission="reserve_resources"} 2' in metrics
    assert 'mesoslike_authorization_refused_total{permission="unreserve_resources"} 1' in metrics
