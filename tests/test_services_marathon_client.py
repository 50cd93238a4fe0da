"""The unmodified ``marathon`` client from PyPI (setup.cfg pins it) against
`mesoslike services serve` on a real cluster: create, list, scale, restart,
kill a task and see it come back, delete; the event stream read raw, as
curl would, and through the client; a principal limited by the
manage_apps ACL sees only its apps."""

from __future__ import annotations

import json
import threading

import pytest
from marathon import MarathonApp, MarathonClient
from marathon.exceptions import MarathonHttpError, NotFoundError

from e2e_helpers import cluster, free_port  # noqa: F401 (fixture)
from services_helpers import api, read_events, services_args, wait_until_serving
from waiting import wait_until

pytestmark = pytest.mark.timeout(240)


def _serve(cluster):
    for index, name in enumerate(("node-a", "node-b")):
        low = 31000 + index * 200
        cluster.start_agent(name, f"cpus:4;mem:4096;disk:2048;ports:[{low}-{low + 199}]", wait=False)
    cluster.wait_for_agents(["node-a", "node-b"])
    port = free_port()
    proc = cluster._start("services", services_args(cluster, port))
    url = f"http://127.0.0.1:{port}"
    wait_until_serving(proc, url, cluster.token, cluster.diagnostics)
    return url


def _running(client: MarathonClient, app_id: str) -> list:
    return [t for t in client.list_tasks(app_id) if t.state == "TASK_RUNNING"]


def test_the_marathon_client_creates_lists_scales_restarts_kills_and_deletes(cluster):
    cluster.start_master()
    url = _serve(cluster)
    client = MarathonClient(url, auth_token=cluster.token)    # it sends "Authorization: token=..."
    assert client.ping().strip() == b"pong"
    assert client.get_info().name == "mesoslike-services"
    assert client.get_leader()["leader"] == url.split("://")[1]

    created = client.create_app("/demo/sleeper", MarathonApp(cmd="sleep 1000", instances=2, cpus=0.1, mem=32,
                                                              labels={"team": "demo"}))
    assert created.id == "/demo/sleeper" and created.instances == 2 and created.version
    wait_until(lambda: len(_running(client, "/demo/sleeper")) == 2, 60, "2 running",
               diagnostics=cluster.diagnostics)
    listed = client.list_apps(embed_tasks=True)
    assert [a.id for a in listed] == ["/demo/sleeper"] and len(listed[0].tasks) == 2
    assert listed[0].labels == {"team": "demo"} and listed[0].tasks_running == 2

    client.scale_app("/demo/sleeper", instances=4)
    wait_until(lambda: client.get_app("/demo/sleeper").tasks_running == 4 and not client.list_deployments(), 60,
               "scaled to 4", diagnostics=cluster.diagnostics)

    before = {t.id for t in _running(client, "/demo/sleeper")}
    restart = client.restart_app("/demo/sleeper")
    assert restart["deploymentId"] and restart["version"]
    wait_until(lambda: not client.list_deployments() and not before & {t.id for t in _running(client, "/demo/sleeper")}
               and len(_running(client, "/demo/sleeper")) == 4, 90, "every instance replaced",
               diagnostics=cluster.diagnostics)
    assert len(client.list_versions("/demo/sleeper")) == 3

    # kill a task: it comes back (a new instance); the app still wants 4
    victim = _running(client, "/demo/sleeper")[0]
    assert client.kill_given_tasks([victim.id]) is True
    wait_until(lambda: victim.id not in {t.id for t in _running(client, "/demo/sleeper")}
               and len(_running(client, "/demo/sleeper")) == 4, 60, "the killed task replaced",
               diagnostics=cluster.diagnostics)
    # and with scale: one fewer
    other = _running(client, "/demo/sleeper")[0]
    assert client.kill_given_tasks([other.id], scale=True) is True
    wait_until(lambda: client.get_app("/demo/sleeper").instances == 3
               and len(_running(client, "/demo/sleeper")) == 3, 60, "scaled down by the kill",
               diagnostics=cluster.diagnostics)
    assert client.list_queue() == []

    with pytest.raises(MarathonHttpError) as invalid:
        client.create_app("/demo/bad", MarathonApp(cmd="sleep 1", instances=-1))
    assert invalid.value.status_code == 422

    client.delete_app("/demo/sleeper")
    wait_until(lambda: client.list_apps() == [] and not client.list_tasks(), 60, "the app gone",
               diagnostics=cluster.diagnostics)
    with pytest.raises(NotFoundError):
        client.get_app("/demo/sleeper")


def test_the_event_stream_raw_and_through_the_client(cluster):
    cluster.start_master()
    url = _serve(cluster)
    token = cluster.token
    everything: list = []
    deployments: list = []
    ready_all, ready_filtered = threading.Event(), threading.Event()
    # everything up to the deployment's success (how many events come before it varies: a CI run under
    # load saw more than the 12 once read)
    readers = [threading.Thread(target=read_events, args=(url, "/v2/events", token, 100, everything, ready_all,
                                                          "deployment_success"), daemon=True),
               threading.Thread(target=read_events, args=(url, "/v2/events?event_type=deployment_success",
                                                           token, 2, deployments, ready_filtered), daemon=True)]
    for reader in readers:
        reader.start()
    assert ready_all.wait(10) and ready_filtered.wait(10)
    assert "200 OK" in everything[0][1] and "text/event-stream" in everything[0][1]
    status, _ = api(url + "/v2/apps", "POST", {"id": "/events/app", "cmd": "sleep 1000", "cpus": 0.1, "mem": 32},
                    token)
    assert status == 201
    for reader in readers:
        reader.join(60)
    kinds = [kind for kind, _ in everything[1:]]
    assert kinds[0] == "event_stream_attached"
    for kind in ("api_post_event", "deployment_info", "status_update_event", "deployment_success"):
        assert kind in kinds, kinds
    running = [e for k, e in everything if k == "status_update_event" and e["taskStatus"] == "TASK_RUNNING"]
    assert running and running[0]["appId"] == "/events/app" and running[0]["ports"]
    assert [k for k, _ in deployments[1:]] == ["deployment_success"] and deployments[1][1]["id"]
    # without a token: 401, nothing streamed
    status, _ = api(url + "/v2/events")
    assert status == 401

    # the marathon client's own reader of the stream (it sends no token there: basic authentication,
    # the principal's name and its token)
    client = MarathonClient(url, username="ops", password=token)
    seen: list = []

    def consume() -> None:
        for event in client.event_stream(event_types=["status_update_event"]):
            seen.append(event)
            return
    # the client has no hook saying it is attached: a watcher of event_stream_attached sees it attach
    attached: list = []
    watching = threading.Event()
    watcher = threading.Thread(target=read_events, args=(url, "/v2/events?event_type=event_stream_attached",
                                                          token, 3, attached, watching), daemon=True)
    watcher.start()
    assert watching.wait(10)
    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    watcher.join(30)   # its head, its own attachment, then the client's
    assert [kind for kind, _ in attached[1:]] == ["event_stream_attached"] * 2, attached
    client.scale_app("/events/app", instances=2)
    consumer.join(60)
    assert seen and seen[0].event_type == "status_update_event" and seen[0].app_id == "/events/app"


def test_a_principal_sees_only_the_apps_its_acl_names(cluster):
    from mesoslike.transport import new_certificate

    cluster.start_master()
    cluster.start_agent("node-a", "cpus:4;mem:4096;disk:2048;ports:[31000-31199]")
    # "ops" may manage the apps of /team-b only, "admin" every app
    keys = cluster.keys.dir
    new_certificate(str(keys), "admin")
    credentials = cluster.keys.credentials.parent / "limited.toml"   # its keys' paths are relative to it
    credentials.write_text(cluster.keys.credentials.read_text().replace("[[acls.update_quota]]", "\n".join([
        f'[principals.admin]\nkey = "{keys}/admin.key"\nkinds = ["operator"]\ntoken = "admin-token"',
        '[[acls.manage_apps]]\nprincipals = ["ops"]\napps = ["/team-b"]',
        '[[acls.manage_apps]]\nprincipals = ["admin"]\napps = ["*"]', "[[acls.update_quota]]"])))
    credentials.chmod(0o600)
    port = free_port()
    args = services_args(cluster, port)
    args[args.index("--credentials") + 1] = str(credentials)
    proc = cluster._start("services", args)
    url = f"http://127.0.0.1:{port}"
    wait_until_serving(proc, url, cluster.token, cluster.diagnostics)
    ops, admin = cluster.token, "admin-token"
    app = {"cmd": "sleep 1000", "cpus": 0.1, "mem": 32}
    assert api(url + "/v2/apps", "POST", {"id": "/team-a/web", **app}, admin)[0] == 201
    status, body = api(url + "/v2/apps", "POST", {"id": "/team-a/api", **app}, ops)
    assert status == 403 and "manage_apps" in body["message"]
    assert api(url + "/v2/apps", "POST", {"id": "/team-b/api", **app}, ops)[0] == 201
    assert [a["id"] for a in api(url + "/v2/apps", token=ops)[1]["apps"]] == ["/team-b/api"]
    assert [a["id"] for a in api(url + "/v2/apps", token=admin)[1]["apps"]] == ["/team-a/web", "/team-b/api"]
    assert api(url + "/v2/apps/team-a/web", token=ops)[0] == 403
    assert api(url + "/v2/apps/team-a/web", "DELETE", None, ops)[0] == 403
    wait_until(lambda: len(api(url + "/v2/tasks", token=admin)[1]["tasks"]) == 2, 60, "both running",
               diagnostics=cluster.diagnostics)
    assert {t["appId"] for t in api(url + "/v2/tasks", token=ops)[1]["tasks"]} == {"/team-b/api"}
    # the services page's recent events too: none of another team's app (its definition, hosts, ports)
    seen = api(url + "/services/events", token=ops)[1]["events"]
    assert seen and all("team-a" not in json.dumps(event) for event in seen), seen
    assert any("team-a" in json.dumps(event) for event in api(url + "/services/events", token=admin)[1]["events"])
    assert api(url + "/v2/apps/team-b/api", token="not-a-token")[0] == 401
