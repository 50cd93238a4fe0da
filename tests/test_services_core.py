"""The service scheduler's pure parts with a fake clock: validation naming
the field, the launch queue and its back-off, kill selection, drains,
unreachable instances, deployments and their rollback, failover recovery,
"why waiting", and properties over random event sequences (hypothesis)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck as HypothesisHealthCheck
from hypothesis import given, settings
from hypothesis import strategies as st

from mesoslike import (ContainerInfo, DockerInfo, Image, Resources, Secret, SecretReference, TaskState, Volume,
                       VolumeSource)
from mesoslike_frameworks.services.api import Request, ServicesApi, app_json, queue_json
from mesoslike_frameworks.services.core import (RESTART, ApiError, Decline, DrainingAgents, Emit, Kill, Launch,
                                                MasterBlockers, Persist, Reconcile, Registered, Revive, ServicesCore,
                                                Suppress)
from mesoslike_frameworks.services.matching import match
from mesoslike_frameworks.services.model import ValidationError, parse_app
from services_helpers import Cluster

pytestmark = pytest.mark.timeout(120)


def _cluster(**kwargs) -> Cluster:
    cluster = Cluster(**kwargs)
    cluster.run(cluster.core.handle(Registered("fw-1")))
    return cluster


def _create(cluster: Cluster, document: dict) -> None:
    cluster.core.create_app(document)
    cluster.run(cluster.core.take_commands())


def _events(cluster: Cluster, kind: str) -> list[dict]:
    return [c.event for c in cluster.log if isinstance(c, Emit) and c.event["eventType"] == kind]


# ---------------------------------------------------------------- model
@pytest.mark.parametrize("document, path, words", [
    ({"id": "/a", "cmd": "x", "instances": -1}, "/instances", "got -1, expected 0 or more"),
    ({"id": "/a", "cmd": "x", "cpus": "lots"}, "/cpus", "expected a number"),
    ({"id": "/A_b", "cmd": "x"}, "/id", "must fully match regular expression"),
    ({"id": "/a"}, "/", "must either contain one of 'cmd' or 'args'"),
    ({"id": "/a", "cmd": "x", "constraints": [["hostname", "NEAR"]]}, "/constraints(0)", "unknown operator"),
    ({"id": "/a", "cmd": "x", "healthChecks": [{"protocol": "HTTP"}, {"protocol": "TCP"}]}, "/healthChecks",
     "at most one health check"),
    ({"id": "/a", "cmd": "x", "healthChecks": [{"protocol": "HTTP", "portIndex": 3}]},
     "/healthChecks(0)/portIndex", "the app has 1 port"),
    ({"id": "/a", "cmd": "x", "upgradeStrategy": {"minimumHealthCapacity": 1.5}},
     "/upgradeStrategy/minimumHealthCapacity", "expected 1 or less"),
    ({"id": "/a", "cmd": "x", "killSelection": "RANDOM"}, "/killSelection", "YOUNGEST_FIRST"),
    ({"id": "/a", "cmd": "x", "cpu": 1}, "/cpu", "unknown field"),
    ({"id": "/a", "cmd": "x", "env": {"K": {"secret": "nope"}}}, "/env/K", "undefined secret"),
    ({"id": "/a", "cmd": "x", "env": {"K": {"secret": "s"}}, "secrets": {"s": {"source": "../etc/shadow"}}},
     "/secrets/s/source", "without '..'"),
    ({"id": "/a", "cmd": "x", "residency": {"taskLostBehavior": "WAIT_FOREVER"}}, "/residency", "not supported"),
    ({"id": "/a", "cmd": "x", "container": {"type": "DOCKER", "docker": {}}}, "/container/docker/image",
     "needs an image"),
    ({"id": "/a", "cmd": "x", "role": "prod"}, "/role", "the service's role"),
    ({"id": "/a", "container": {"docker": {"image": "Web Server!"}}}, "/container/docker/image", "image"),
    ({"id": "/a", "container": {"docker": {"image": "web", "network": "BRIDGE"}}}, "/container/docker/network",
     "no bridge"),
    ({"id": "/a", "container": {"docker": {"image": "web", "portMappings": [{"containerPort": 80}]}}},
     "/container/docker/portMappings", "not supported"),
    ({"id": "/a", "cmd": "x", "container": {"type": "MESOS", "volumes": [{"containerPath": "data"}]}},
     "/container/volumes/0/hostPath", "only host volumes"),
])
def test_validation_names_the_field_in_marathons_shape(document, path, words):
    with pytest.raises(ValidationError) as refused:
        parse_app(document)
    shape = refused.value.to_json()
    assert shape["message"] == "Object is not valid"
    errors = {detail["path"]: detail["errors"] for detail in shape["details"]}
    assert path in errors and any(words in error for error in errors[path]), shape


def test_an_app_document_round_trips_with_marathons_defaults():
    app = parse_app({"id": "team/web", "cmd": "serve", "ports": [0, 0], "constraints": [["rack", "GROUP_BY", "2"]],
                     "healthChecks": [{"protocol": "COMMAND", "command": {"value": "true"}}], "labels": {"a": "b"}})
    document = app.to_json()
    assert document["id"] == "/team/web" and document["instances"] == 1 and document["cpus"] == 1
    assert document["backoffFactor"] == 1.15 and document["upgradeStrategy"] == {"minimumHealthCapacity": 1,
                                                                                 "maximumOverCapacity": 1}
    assert [p["port"] for p in document["portDefinitions"]] == [0, 0]
    assert parse_app(document) == app


# ------------------------------------------------------------- keeping up
def test_an_app_is_launched_and_its_deployment_succeeds():
    cluster = _cluster()
    _create(cluster, {"id": "/web", "cmd": "serve", "instances": 5, "cpus": 1, "mem": 64, "ports": [0, 0]})
    assert [a.kind for step in next(iter(cluster.core.deployments.values())).steps for a in step] == [
        "StartApplication", "ScaleApplication"]
    cluster.settle(2)
    assert len(cluster.running("/web")) == 5 and not cluster.core.deployments
    assert _events(cluster, "deployment_success")
    launches = [t for c in cluster.log if isinstance(c, Launch) for t in c.tasks]
    task = launches[0]
    ports = [int(task.environment["PORT0"]), int(task.environment["PORT1"])]
    assert task.environment["PORTS"] == ",".join(map(str, ports)) and task.environment["MARATHON_APP_ID"] == "/web"
    assert task.resources.ranges("ports") == tuple(sorted((p, p) for p in ports))
    # each launch was stored before it was sent: its instance is in a Persist earlier in the log
    first_launch = next(i for i, c in enumerate(cluster.log) if isinstance(c, Launch))
    stored = [json.loads(data) for c in cluster.log[:first_launch] if isinstance(c, Persist)
              for name, data in c.records.items() if name.startswith("instances.")]
    assert any(record["task"] == task.task_id for bucket in stored for record in bucket)
    # nothing more to launch: offers suppressed
    assert isinstance([c for c in cluster.log if isinstance(c, (Suppress, Revive))][-1], Suppress)


def test_a_failed_instance_is_replaced_after_the_back_off_which_grows_and_resets_on_a_new_config():
    cluster = _cluster()
    _create(cluster, {"id": "/web", "cmd": "serve", "instances": 1, "cpus": 1, "mem": 64,
                      "backoffSeconds": 2, "backoffFactor": 2, "maxLaunchDelaySeconds": 5})
    cluster.settle(1)
    delays = []
    for _ in range(4):
        victim = cluster.running("/web")[0]
        cluster.update(victim, TaskState.FAILED)
        failed_at = cluster.clock.now()
        while not cluster.running("/web"):
            cluster.offer_all()
            cluster.tick(0.25)
        delays.append(round(cluster.clock.now() - failed_at))
    # 2, x2, capped at maxLaunchDelaySeconds; a delay is forgotten maxLaunchDelaySeconds after the failure
    # that set it (Marathon's cleanUpOverdueDelays): the fourth failure starts again at backoffSeconds
    assert delays == [2, 4, 5, 2]
    record = cluster.core.apps["/web"]
    assert record.last_failure["state"] == TaskState.FAILED
    cluster.core.update_apps([("/web", {"cmd": "serve --better"})])
    cluster.run(cluster.core.take_commands())
    assert record.delay is None
    # a kill (not a failure) adds no delay
    cluster.settle(3)
    cluster.update(cluster.running("/web")[0], TaskState.KILLED)
    cluster.offer_all()
    assert len(cluster.running("/web")) == 1


@pytest.mark.parametrize("selection, survivors", [("YOUNGEST_FIRST", [0, 1]), ("OLDEST_FIRST", [2, 3])])
def test_scale_down_kills_in_kill_selection_order(selection, survivors):
    cluster = _cluster()
    _create(cluster, {"id": "/web", "cmd": "serve", "instances": 1, "cpus": 1, "mem": 64, "killSelection": selection})
    order = []
    for count in (1, 2, 3, 4):
        cluster.core.update_apps([("/web", {"instances": count})], force=True)
        cluster.run(cluster.core.take_commands())
        cluster.offer_all()
        cluster.tick(1)
        order += [t for t in cluster.running("/web") if t not in order]
    cluster.core.update_apps([("/web", {"instances": 2})], force=True)
    cluster.run(cluster.core.take_commands())
    cluster.tick(1)
    assert sorted(cluster.running("/web")) == sorted(order[i] for i in survivors)


def test_instances_on_a_draining_agent_are_replaced_before_they_are_killed():
    cluster = _cluster(agents=("a1", "a2"))
    _create(cluster, {"id": "/web", "cmd": "serve", "instances": 4, "cpus": 1, "mem": 64,
                      "healthChecks": [{"protocol": "COMMAND", "command": {"value": "true"}}]})
    cluster.healthy = True
    cluster.settle(2)
    on_a1 = [t for t in cluster.running() if cluster.task_agent[t] == "a1"]
    assert on_a1
    cluster.run(cluster.core.handle(DrainingAgents(frozenset({"a1"}))))
    assert not [c for c in cluster.log[-5:] if isinstance(c, Kill)], "killed before a replacement ran"
    del cluster.agents["a1"]                    # a draining agent gets no offers
    cluster.auto_run = False
    cluster.offer_all()
    assert set(cluster.running()) >= set(on_a1), "killed while the replacements only stage"
    cluster.start_all(healthy=True)
    assert not set(cluster.running()) & set(on_a1)
    assert len(cluster.running()) == 4 and all(cluster.task_agent[t] == "a2" for t in cluster.running())


def test_an_unreachable_instance_is_replaced_after_the_strategys_time_and_the_extra_killed_when_it_returns():
    cluster = _cluster()
    _create(cluster, {"id": "/web", "cmd": "serve", "instances": 2, "cpus": 1, "mem": 64,
                      "unreachableStrategy": {"inactiveAfterSeconds": 30, "expungeAfterSeconds": 600}})
    cluster.settle(2)
    lost = cluster.running()[0]
    cluster.update(lost, TaskState.UNREACHABLE)
    cluster.settle(3)
    assert len(cluster.launched) == 2, "replaced before inactiveAfterSeconds"
    cluster.tick(30)
    cluster.settle(2)
    assert len(cluster.launched) == 3 and len(cluster.running()) == 2
    cluster.update(lost, TaskState.RUNNING)          # it comes back: one too many
    cluster.tick(1)
    assert len(cluster.running()) == 2


def test_cancelling_a_deployment_rolls_back_or_with_force_stops_it():
    cluster = _cluster()
    _create(cluster, {"id": "/web", "cmd": "v1", "instances": 2, "cpus": 1, "mem": 64})
    cluster.settle(2)
    deployment, _ = cluster.core.update_apps([("/web", {"cmd": "v2"})])
    cluster.run(cluster.core.take_commands())
    with pytest.raises(ApiError) as locked:
        cluster.core.restart_app("/web")
    assert locked.value.status == 409 and locked.value.body["deployments"] == [{"id": deployment.id}]
    rollback = cluster.core.cancel_deployment(deployment.id)
    cluster.run(cluster.core.take_commands())
    assert rollback is not None and cluster.core.apps["/web"].definition.cmd == "v1"
    assert _events(cluster, "deployment_failed")[-1]["id"] == deployment.id
    cluster.settle(4)
    launched_cmds = {t.command for c in cluster.log if isinstance(c, Launch) for t in c.tasks}
    assert not cluster.core.deployments and launched_cmds <= {"v1", "v2"}
    assert {cluster.core.instance_by_task(t).config_version for t in cluster.running()} == {
        cluster.core.apps["/web"].definition.last_config_change_at}
    # force: the deployment just stops, no rollback
    deployment, _ = cluster.core.update_apps([("/web", {"cmd": "v3"})])
    assert cluster.core.cancel_deployment(deployment.id, force=True) is None
    assert cluster.core.apps["/web"].definition.cmd == "v3" and not cluster.core.deployments


def test_a_new_leader_reconciles_and_replaces_only_what_the_master_does_not_know():
    cluster = _cluster()
    _create(cluster, {"id": "/web", "cmd": "serve", "instances": 3, "cpus": 1, "mem": 64})
    cluster.settle(2)
    # the leader stores a launch then dies before the master hears of it: a fourth, stored, never launched
    core = cluster.core
    core.update_apps([("/web", {"instances": 4})])
    cluster.run(core.take_commands())
    cluster.auto_run = False
    offers = cluster.offer_all()
    phantom = next(t.task_id for c in offers if isinstance(c, Launch) for t in c.tasks)
    cluster.tasks.pop(phantom)                   # the launch never reached the master
    new = ServicesCore(cluster.clock, random.Random(99))
    new.recover(cluster.stored)
    assert new.framework_id == "fw-1" and set(new.deployments) == set(core.deployments)
    cluster.core = new
    commands = cluster.run(new.handle(Registered("fw-1")))
    explicit = next(c for c in commands if isinstance(c, Reconcile) and c.task_ids)
    assert set(explicit.task_ids) == set(cluster.running()) | {phantom}
    assert not [c for c in commands if isinstance(c, Launch)], "launched before the master answered"
    for task_id in cluster.running():
        cluster.update(task_id, TaskState.RUNNING)
    cluster.update(phantom, TaskState.LOST)      # the master's answer for a task it never saw
    cluster.auto_run = True
    cluster.settle(2)
    assert len(cluster.running()) == 4 and not new.deployments
    assert len(cluster.launched) == len(set(cluster.launched))


def test_the_queue_says_why_an_app_waits():
    cluster = _cluster()
    _create(cluster, {"id": "/big", "cmd": "x", "cpus": 64, "mem": 64})
    _create(cluster, {"id": "/picky", "cmd": "x", "cpus": 1, "mem": 64, "constraints": [["rack", "CLUSTER", "r9"]]})
    cluster.offer_all()
    core = cluster.core
    why = {app_id: queue_json(core, core.apps[app_id])["processedOffersSummary"] for app_id in core.apps}
    assert "enough cpus" in why["/big"]["why"]
    cpus = next(r for r in why["/big"]["rejectSummaryLastOffers"] if r["reason"] == "InsufficientCpus")
    assert cpus == {"reason": "InsufficientCpus", "declined": 3, "processed": 3}
    assert "constraint" in why["/picky"]["why"]
    assert all(isinstance(c, Decline) for c in cluster.log if isinstance(c, (Launch, Decline)))
    # the master holds offers back (its /state's offer_blockers for the service): quota, not the offers, is why
    limit = "role 'svc' reached its quota limit for cpus (limit cpus:0.5, consumed cpus:0.5)"
    cluster.run(core.handle(MasterBlockers((("QUOTA_LIMIT", limit),))))
    summary = queue_json(core, core.apps["/big"])["processedOffersSummary"]
    assert summary["why"] == f"the master makes the service no offers: {limit}"
    assert summary["masterOfferBlockers"] == [{"reason": "QUOTA_LIMIT", "message": limit}]
    # its own declines' filters are not a reason of the master's: the offers' funnel says why
    cluster.run(core.handle(MasterBlockers((("DECLINE_FILTERS", "it declined the 3 agent(s)"),))))
    assert "enough cpus" in queue_json(core, core.apps["/big"])["processedOffersSummary"]["why"]


def test_an_apps_container_becomes_its_tasks_container_as_mesos_runs_it():
    cluster = _cluster()
    _create(cluster, {"id": "/entry", "container": {"type": "DOCKER", "docker": {"image": "registry:5000/web:1"}},
                      "cpus": 1, "mem": 64})
    _create(cluster, {"id": "/argv", "args": ["--port", "80"], "cpus": 1, "mem": 64,
                      "container": {"type": "MESOS", "docker": {"image": "web", "forcePullImage": True},
                                    "volumes": [{"containerPath": "/data", "hostPath": "/srv/data", "mode": "RO"}]}})
    _create(cluster, {"id": "/line", "cmd": "echo hi", "cpus": 1, "mem": 64,
                      "container": {"docker": {"image": "busybox", "network": "NONE"}}})
    cluster.offer_all()
    tasks = {task.name: task for c in cluster.log if isinstance(c, Launch) for task in c.tasks}
    entry, argv, line = tasks["entry"], tasks["argv"], tasks["line"]
    assert entry.container == ContainerInfo("DOCKER", docker=DockerInfo("registry:5000/web:1"))
    assert (entry.command, entry.shell, entry.arguments) == ("", False, [])   # the image's own entrypoint
    assert argv.container == ContainerInfo("MESOS", image=Image("web", cached=False), volumes=[
        Volume("/data", VolumeSource(VolumeSource.HOST_PATH, path="/srv/data"), "RO")])
    assert (argv.command, argv.shell, argv.arguments) == ("", False, ["--port", "80"])
    assert line.container is not None and line.container.docker.network == "NONE"
    assert (line.command, line.shell) == ("echo hi", True)


def test_an_apps_secrets_become_references_the_agent_resolves_never_values():
    """Marathon's ``secrets`` (``source``: a path in the secret store) and the ``env`` entries naming them:
    the task carries a REFERENCE per variable (the agent reads it from its secrets directory under the
    service's principal); no value passes through the service, nothing waits for one."""
    cluster = _cluster()
    _create(cluster, {"id": "/db", "cmd": "serve", "cpus": 1, "mem": 64,
                      "env": {"PLAIN": "p", "DB_PASSWORD": {"secret": "pw"}, "DB_USER": {"secret": "user"}},
                      "secrets": {"pw": {"source": "/db/password"}, "user": {"source": "db@USER"}}})
    cluster.offer_all()
    task = next(t for c in cluster.log if isinstance(c, Launch) for t in c.tasks)
    assert task.environment["PLAIN"] == "p" and "DB_PASSWORD" not in task.environment
    assert task.environment_secrets == {
        "DB_PASSWORD": Secret(Secret.REFERENCE, reference=SecretReference("db/password")),
        "DB_USER": Secret(Secret.REFERENCE, reference=SecretReference("db", key="USER"))}
    assert queue_json(cluster.core, cluster.core.apps["/db"]) is None      # launched, not waiting
    document = app_json(cluster.core, cluster.core.apps["/db"])
    assert document["env"]["DB_PASSWORD"] == {"secret": "pw"}
    assert document["secrets"]["pw"] == {"source": "/db/password"}


def test_matching_follows_marathons_reason_funnel():
    offer = Resources.parse("cpus:1;mem:64;ports:[31000-31000]")
    outcome = match(cpus=2, mem=128, disk=0, gpus=0, ports=[0], hostname="h", attributes={}, available=offer,
                    placements=None, draining=False)
    assert outcome.reason == "InsufficientCpus" and outcome.checks[-1] == "InsufficientCpus"
    outcome = match(cpus=1, mem=64, disk=0, gpus=0, ports=[0, 0], hostname="h", attributes={}, available=offer,
                    placements=None, draining=False)
    assert outcome.reason == "InsufficientPorts"
    fit = match(cpus=1, mem=64, disk=0, gpus=0, ports=[0], hostname="h", attributes={}, available=offer,
                placements=None, draining=False).fit
    assert fit is not None and fit.host_ports == (31000,)
    assert match(cpus=1, mem=64, disk=0, gpus=0, ports=[], hostname="h", attributes={}, available=offer,
                 placements=None, draining=True).reason == "AgentMaintenance"
    # gpus: an instance asking for them needs an offer with as many, and its task gets them
    assert match(cpus=1, mem=64, disk=0, gpus=1, ports=[], hostname="h", attributes={}, available=offer,
                 placements=None, draining=False).reason == "InsufficientGpus"
    gpu_offer = Resources.parse("cpus:1;mem:64;gpus:2")
    fit = match(cpus=1, mem=64, disk=0, gpus=2, ports=[], hostname="h", attributes={}, available=gpu_offer,
                placements=None, draining=False).fit
    assert fit is not None and fit.resources.get("gpus") == 2


# ------------------------------------------------------------------- API
class _Backend:
    def __init__(self, core: ServicesCore) -> None:
        self.core = core
        self.published: list[dict] = []

    def read(self, fn):
        return fn(self.core)

    def change(self, fn):
        result = fn(self.core)
        self.core.take_commands()
        return result

    def leading(self) -> bool:
        return True

    def leader_address(self) -> str:
        return "127.0.0.1:8080"

    def info(self) -> dict:
        return {"name": "test"}

    def subscribe(self, types, client):
        return iter([])

    def publish(self, event) -> None:
        self.published.append(event)

    def recent_events(self) -> list:
        return list(self.published)


def _request(method: str, path: str, body: object = None, **query: str) -> Request:
    return Request(method, path, {k: [v] for k, v in query.items()}, {},
                   json.dumps(body).encode() if body is not None else b"", "127.0.0.1")


def test_the_api_answers_as_marathon():
    cluster = _cluster()
    api = ServicesApi(_Backend(cluster.core))
    answer = api.handle(_request("POST", "/v2/apps", {"id": "/web", "cmd": "x", "instances": -2}))
    assert answer.status == 422
    assert json.loads(answer.body)["details"][0]["path"] == "/instances"
    answer = api.handle(_request("POST", "/v2/apps", {"id": "/web", "cmd": "x", "cpus": 0.5, "mem": 32}))
    assert answer.status == 201 and answer.headers["Location"] == "/v2/apps/web"
    assert json.loads(answer.body)["deployments"] == [{"id": answer.headers["Marathon-Deployment-Id"]}]
    assert api.handle(_request("POST", "/v2/apps", {"id": "/web", "cmd": "x"})).status == 409
    locked = api.handle(_request("PUT", "/v2/apps/web", {"instances": 3}))
    assert locked.status == 409 and "locked" in json.loads(locked.body)["message"]
    forced = api.handle(_request("PUT", "/v2/apps/web", {"instances": 3}, force="true"))
    assert forced.status == 200 and json.loads(forced.body)["deploymentId"]
    assert api.handle(_request("GET", "/v2/apps/nope")).status == 404
    assert api.handle(_request("GET", "/ping")).body == b"pong\n"
    listed = json.loads(api.handle(_request("GET", "/v2/apps", embed="apps.tasks")).body)["apps"]
    assert listed[0]["instances"] == 3 and listed[0]["tasks"] == []
    assert api.handle(_request("DELETE", "/v2/apps")).status == 405
    assert app_json(cluster.core, cluster.core.apps["/web"])["version"]


def test_an_apps_versions_are_listed_shown_and_rolled_back_to():
    """``GET /v2/apps/{id}/versions`` lists every version, newest first; ``/versions/{v}`` shows that
    definition; ``PUT /v2/apps/{id} {"version": v}`` goes back to it (a new version, the old config)."""
    cluster = _cluster()
    api = ServicesApi(_Backend(cluster.core))
    assert api.handle(_request("POST", "/v2/apps", {"id": "/web", "cmd": "v1", "cpus": 0.5, "mem": 32})).status == 201
    cluster.clock.advance(1)
    assert api.handle(_request("PUT", "/v2/apps/web", {"cmd": "v2"}, force="true")).status == 200
    versions = json.loads(api.handle(_request("GET", "/v2/apps/web/versions")).body)["versions"]
    assert len(versions) == 2 and versions == sorted(versions, reverse=True)
    first = json.loads(api.handle(_request("GET", f"/v2/apps/web/versions/{versions[-1]}")).body)
    assert first["cmd"] == "v1" and first["version"] == versions[-1]
    cluster.clock.advance(1)
    back = api.handle(_request("PUT", "/v2/apps/web", {"version": versions[-1]}, force="true"))
    assert back.status == 200
    app = json.loads(api.handle(_request("GET", "/v2/apps/web")).body)["app"]
    assert app["cmd"] == "v1" and app["version"] not in versions
    assert len(json.loads(api.handle(_request("GET", "/v2/apps/web/versions")).body)["versions"]) == 3
    assert api.handle(_request("GET", "/v2/apps/web/versions/2001-01-01T00:00:00.000Z")).status == 404


def test_put_v2_apps_creates_or_updates_several_apps_in_one_deployment():
    cluster = _cluster()
    api = ServicesApi(_Backend(cluster.core))
    assert api.handle(_request("POST", "/v2/apps", {"id": "/a", "cmd": "x", "cpus": 0.5, "mem": 32})).status == 201
    api.handle(_request("DELETE", f"/v2/deployments/{next(iter(cluster.core.deployments))}", force="true"))
    answer = api.handle(_request("PUT", "/v2/apps", [{"id": "/a", "instances": 3},
                                                     {"id": "/b", "cmd": "y", "cpus": 0.5, "mem": 32}]))
    assert answer.status == 200, answer.body
    deployments = json.loads(api.handle(_request("GET", "/v2/deployments")).body)
    assert len(deployments) == 1 and sorted(deployments[0]["affectedApps"]) == ["/a", "/b"]
    assert json.loads(answer.body)["deploymentId"] == deployments[0]["id"]
    apps = {a["id"]: a for a in json.loads(api.handle(_request("GET", "/v2/apps")).body)["apps"]}
    assert apps["/a"]["instances"] == 3 and apps["/a"]["cmd"] == "x" and apps["/b"]["cmd"] == "y"
    bad = api.handle(_request("PUT", "/v2/apps", [{"id": "/c", "cmd": "z", "mem": -1}], force="true"))
    assert bad.status == 422 and json.loads(bad.body)["details"][0]["path"] == "/mem"


def test_deleting_a_deployment_through_the_api_rolls_back_or_with_force_stops_it():
    cluster = _cluster()
    api = ServicesApi(_Backend(cluster.core))
    created = api.handle(_request("POST", "/v2/apps", {"id": "/web", "cmd": "x", "instances": 2, "cpus": 0.5,
                                                       "mem": 32}))
    deployment_id = created.headers["Marathon-Deployment-Id"]       # no offers: it stays in progress
    listed = json.loads(api.handle(_request("GET", "/v2/deployments")).body)
    assert [d["id"] for d in listed] == [deployment_id]
    assert [a["action"] for step in listed[0]["steps"] for a in step["actions"]] == ["StartApplication",
                                                                                     "ScaleApplication"]
    stopped = api.handle(_request("DELETE", f"/v2/deployments/{deployment_id}", force="true"))
    assert stopped.status == 202 and json.loads(api.handle(_request("GET", "/v2/deployments")).body) == []
    assert api.handle(_request("GET", "/v2/apps/web")).status == 200          # left as it is
    scaled = json.loads(api.handle(_request("PUT", "/v2/apps/web", {"instances": 5})).body)["deploymentId"]
    rollback = api.handle(_request("DELETE", f"/v2/deployments/{scaled}"))
    assert rollback.status == 200 and json.loads(rollback.body)["deploymentId"] != scaled
    assert json.loads(api.handle(_request("GET", "/v2/apps/web")).body)["app"]["instances"] == 2
    assert api.handle(_request("DELETE", "/v2/deployments/nope")).status == 404


# ------------------------------------------------------------- properties
_ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("offers")), st.tuples(st.just("tick"), st.floats(0.1, 40)),
    st.tuples(st.just("fail"), st.integers(0, 20)), st.tuples(st.just("kill"), st.integers(0, 20)),
    st.tuples(st.just("scale"), st.integers(0, 6)), st.tuples(st.just("restart")),
    st.tuples(st.just("upgrade"), st.integers(0, 3)), st.tuples(st.just("drain"), st.sampled_from(["a1", "a2", ""])),
    st.tuples(st.just("unreachable"), st.integers(0, 20)), st.tuples(st.just("cancel"), st.booleans()),
    st.tuples(st.just("failover"))), max_size=40)


@settings(max_examples=200, deadline=None, suppress_health_check=[HypothesisHealthCheck.too_slow])
@given(actions=_ACTIONS, seed=st.integers(0, 1000), strategy=st.sampled_from([(1.0, 0.0), (0.5, 0.5), (0.0, 1.0)]))
def test_whatever_happens_no_task_is_launched_twice_and_the_app_converges(actions, seed, strategy):
    cluster = _cluster(seed=seed)
    document = {"id": "/web", "cmd": "v0", "instances": 3, "cpus": 1, "mem": 64,
                "upgradeStrategy": {"minimumHealthCapacity": strategy[0], "maximumOverCapacity": strategy[1]},
                "unreachableStrategy": {"inactiveAfterSeconds": 5}}
    _create(cluster, document)
    core = cluster.core
    failovers = 0
    for action in actions:
        kind = action[0]
        live = sorted(cluster.tasks)
        try:
            if kind == "offers":
                cluster.offer_all()
            elif kind == "tick":
                cluster.tick(action[1])
            elif kind in ("fail", "kill", "unreachable") and live:
                state = {"fail": TaskState.FAILED, "kill": TaskState.KILLED, "unreachable": TaskState.UNREACHABLE}
                cluster.update(live[action[1] % len(live)], state[kind])
            elif kind == "scale":
                cluster.core.update_apps([("/web", {"instances": action[1]})], force=True)
            elif kind == "restart":
                cluster.core.restart_app("/web", force=True)
            elif kind == "upgrade":
                cluster.core.update_apps([("/web", {"cmd": f"v{action[1]}"})], force=True)
            elif kind == "drain":
                cluster.run(core.handle(DrainingAgents(frozenset({action[1]} - {""}))))
            elif kind == "cancel" and core.deployments:
                core.cancel_deployment(next(iter(core.deployments)), force=action[1])
            elif kind == "failover":
                failovers += 1
                fresh = ServicesCore(cluster.clock, random.Random(seed + failovers))
                fresh.recover(cluster.stored)
                cluster.core = core = fresh
                cluster.run(core.handle(Registered("fw-1")))
                for task_id, state in list(cluster.tasks.items()):
                    cluster.update(task_id, state)
                for instance in list(core.instances.values()):
                    if instance.launched and instance.task_id not in cluster.tasks:
                        cluster.update(instance.task_id, TaskState.LOST)
        except ApiError:
            pass
        cluster.run(core.take_commands())
        core.check()
        if "/web" not in core.apps:       # the creation was rolled back: create it again
            _create(cluster, document)
        # a restart never runs more than its maximum at once (plus the deadlock escape and one being killed)
        app = core.apps["/web"].definition
        if any(a.kind == RESTART for d in core.deployments.values() for a in d.current_actions()):
            wanted = [i for i in core.instances_of("/web") if i.goal == "Running"]
            assert len(wanted) <= int(app.instances * (1 + app.upgrade_strategy.maximum_over_capacity)) + 1
    # left alone, with every agent back and no failures, the app converges
    cluster.run(core.handle(DrainingAgents(frozenset())))
    for task_id, state in list(cluster.tasks.items()):
        if state == TaskState.UNREACHABLE:
            cluster.update(task_id, TaskState.RUNNING)
    for _ in range(40):
        cluster.offer_all()
        cluster.tick(2)
        if not core.deployments and len(cluster.running("/web")) == core.apps["/web"].definition.instances:
            break
    app = core.apps["/web"].definition
    assert not core.deployments, [d.current_actions() for d in core.deployments.values()]
    assert len(cluster.running("/web")) == app.instances == len(core.instances_of("/web"))
    assert len(cluster.launched) == len(set(cluster.launched))
