"""The service scheduler on a real local cluster (a master and agents as
processes, the service as `mesoslike services serve`, tasks as real web
servers with HTTP health checks the agents run): an app of 5 survives
kill -9 of 2 instances, an agent drain and kill -9 of the leading service
(with ZooKeeper), ending with 5 healthy instances and no duplicate; a rolling
upgrade of 10 never goes below its minimumHealthCapacity, sampled through the
API while it runs; the services page and the CLI; `mesoslike local
--services`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from agent_helpers import cgroups_root, start_agent  # noqa: F401 (fixture)
from e2e_helpers import REPO, child_env, cluster, free_port, task_processes  # noqa: F401 (fixture)
from e2e_helpers import _proc_environ as task_environment
from environment import unavailable
from image_registry import busybox_image, push_image, registry, registry_factory, require_tools  # noqa: F401
from mesoslike.agent.executor import sandbox_path
from services_helpers import api, healthy_tasks, read_events, services_args, wait_until_serving, web_app
from waiting import wait_until
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(300)


def _agents(cluster, names=("node-a", "node-b", "node-c")) -> None:
    """Agents with ports of their own (one machine: two agents offering the same port would clash)."""
    for index, name in enumerate(names):
        low = 31000 + index * 200
        cluster.start_agent(name, f"cpus:4;mem:4096;disk:2048;ports:[{low}-{low + 199}]", wait=False)
    cluster.wait_for_agents(names)


def _start_services(cluster, name: str, *extra: str, leading: bool = True):
    port = free_port()
    proc = cluster._start(name, services_args(cluster, port, *extra))
    url = f"http://127.0.0.1:{port}"
    wait_until_serving(proc, url, cluster.token, cluster.diagnostics, name, leading=leading)
    assert proc.running(), cluster.diagnostics()
    return proc, url


def _framework_tasks(cluster, name: str = "services") -> list[dict]:
    framework = cluster.framework(name)
    return [t for t in (framework or {}).get("tasks", []) if t["state"] not in
            ("TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_LOST", "TASK_ERROR", "TASK_DROPPED", "TASK_GONE")]


def _wait_healthy(cluster, url: str, app_id: str, token: str, count: int, timeout: float = 90.0,
                  version: str | None = None) -> list[dict]:
    def enough():
        tasks = healthy_tasks(url, app_id, token)
        if version is not None:
            tasks = [t for t in tasks if t["version"] == version]
        status, app = api(f"{url}/v2/apps{app_id}", token=token)
        return tasks if len(tasks) == count and status == 200 and app["app"]["tasksRunning"] == count else None
    return wait_until(enough, timeout, f"{count} healthy instances of {app_id}", diagnostics=cluster.diagnostics)


def _deployments(url: str, token: str) -> list[dict]:
    status, body = api(url + "/v2/deployments", token=token)
    assert status == 200, body
    return body


def test_a_rolling_upgrade_of_ten_never_drops_below_minimum_health_capacity(cluster):
    cluster.start_master()
    _agents(cluster)
    token = cluster.token
    _, url = _start_services(cluster, "services")
    app = web_app("/shop/web", 10, upgradeStrategy={"minimumHealthCapacity": 0.8, "maximumOverCapacity": 0.2})
    status, created = api(url + "/v2/apps", "POST", app, token)
    assert status == 201, created
    first = _wait_healthy(cluster, url, "/shop/web", token, 10)
    old_version = first[0]["version"]

    # the upgrade: a new environment is a new config version, every instance replaced
    status, answer = api(url + "/v2/apps/shop/web", "PUT", {"env": {"RELEASE": "2"}}, token)
    assert status == 200, answer
    deployment_id = answer["deploymentId"]
    samples: list[tuple[int, int, int]] = []      # (healthy, new, old) as the API says, while it runs
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        tasks = healthy_tasks(url, "/shop/web", token)
        new = sum(1 for t in tasks if t["version"] != old_version)
        samples.append((len(tasks), new, len(tasks) - new))
        if deployment_id not in {d["id"] for d in _deployments(url, token)}:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the upgrade did not end in 150s; samples {samples[-20:]}\n{cluster.diagnostics()}")
    assert len(samples) > 10, f"too few samples to say anything: {samples}"
    assert min(healthy for healthy, _, _ in samples) >= 8, f"below minimumHealthCapacity: {samples}"
    assert any(0 < new < 10 for _, new, _ in samples), f"never saw the upgrade half way: {samples}"
    final = _wait_healthy(cluster, url, "/shop/web", token, 10)
    assert all(t["version"] != old_version for t in final)
    # at most maximumOverCapacity over: 10 * 1.2 = 12 tasks of the framework at any time is the bound the
    # master saw; at the end exactly 10 run, each once
    running = _framework_tasks(cluster)
    assert len(running) == 10 and len({t["id"] for t in running}) == 10


def test_an_app_of_five_survives_instance_kills_a_drain_and_a_leader_kill(cluster, zookeeper):
    cluster.start_master()
    _agents(cluster)
    token = cluster.token
    zk = zookeeper.url("/services-e2e")
    first, url_1 = _start_services(cluster, "services-1", "--zk", zk, "--work-dir", str(cluster.tmp_path / "s1"),
                                   "--zk-session-timeout", "3", leading=False)
    second, url_2 = _start_services(cluster, "services-2", "--zk", zk, "--work-dir", str(cluster.tmp_path / "s2"),
                                    "--zk-session-timeout", "3", leading=False)

    def leader() -> tuple:
        for proc, url in ((first, url_1), (second, url_2)):
            if proc.running() and api(url + "/v2/apps", token=token)[0] == 200:
                return proc, url
        return None
    leading, url = wait_until(leader, 60, "a leading service", diagnostics=cluster.diagnostics)
    standby_url = url_2 if url == url_1 else url_1
    # a standby refuses, naming the leader (once it has heard of one)
    wait_until(lambda: api(standby_url + "/v2/apps", token=token) == (503, {
        "message": f"this service is a standby, not the leader: the leader is {url.split('://')[1]}",
        "leader": url.split("://")[1]}), 30, "the standby to name the leader", diagnostics=cluster.diagnostics)
    status, body = api(standby_url + "/v2/leader", token=token)
    assert status == 200 and body["leader"] == url.split("://")[1]

    status, created = api(url + "/v2/apps", "POST", web_app("/web", 5), token)
    assert status == 201, created
    tasks = _wait_healthy(cluster, url, "/web", token, 5)

    # kill -9 two instances: both replaced
    processes = task_processes(cluster.work_root)
    victims = [t["id"] for t in tasks[:2]]
    for pid, task_id in processes.items():
        if task_id in victims:
            os.kill(pid, signal.SIGKILL)
    tasks = wait_until(lambda: (lambda ts: ts if len(ts) == 5 and not {t["id"] for t in ts} & set(victims) else None)(
        healthy_tasks(url, "/web", token)), 60, "two instances replaced", diagnostics=cluster.diagnostics)

    # drain the busiest agent with a long grace: its instances are replaced elsewhere, then killed by
    # the service (the agent is DRAINED long before the grace is up), never fewer than 5 healthy
    by_host: dict[str, int] = {}
    for task in tasks:
        by_host[task["host"]] = by_host.get(task["host"], 0) + 1
    drained = max(sorted(by_host), key=lambda host: by_host[host])
    request = urllib.request.Request(cluster.http + "/agents/drain", method="POST",
                                     data=json.dumps({"agent": drained, "grace": 120}).encode(),
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
    drain_started = time.monotonic()
    lowest = 5

    def drained_and_replaced():
        nonlocal lowest
        current = healthy_tasks(url, "/web", token)
        lowest = min(lowest, len(current))
        agent = next(a for a in cluster.state()["agents"] if a["hostname"] == drained)
        state = (agent.get("drain_info") or {}).get("state")
        on_drained = [t for t in current if t["host"] == drained]
        return current if state == "DRAINED" and len(current) == 5 and not on_drained else None
    tasks = wait_until(drained_and_replaced, 90, f"{drained} drained and its instances replaced",
                       diagnostics=cluster.diagnostics)
    assert time.monotonic() - drain_started < 100, "the drain's own kill came first: nothing replaced them"
    assert lowest >= 5, f"fewer than 5 healthy instances during the drain ({lowest})"

    # a rolling restart, and kill -9 of the leading service in the middle of it: the standby takes over
    # and finishes it; nothing launched twice, nothing lost
    status, answer = api(url + "/v2/apps/web/restart", "POST", None, token)
    assert status == 200, answer
    wait_until(lambda: sum(1 for t in healthy_tasks(url, "/web", token) if t["version"] == answer["version"]) >= 1,
               60, "the restart to be under way", diagnostics=cluster.diagnostics)
    leading.signal_group(signal.SIGKILL)
    leading.popen.wait(timeout=10)
    survivor, new_url = (second, url_2) if leading is first else (first, url_1)
    wait_until(lambda: api(new_url + "/v2/apps", token=token)[0] == 200, 60, "the standby to lead",
               diagnostics=cluster.diagnostics)
    final = _wait_healthy(cluster, new_url, "/web", token, 5, timeout=120, version=answer["version"])
    wait_until(lambda: not _deployments(new_url, token), 60, "the restart to finish under the new leader",
               diagnostics=cluster.diagnostics)
    running = _framework_tasks(cluster)
    assert sorted(t["id"] for t in running) == sorted(t["id"] for t in final), (running, final)
    assert len({t["id"].split("._app")[0] for t in running}) == 5, "an instance runs twice"
    # every task the master ever saw of the framework ran under its own instance id: nothing launched twice
    framework = cluster.framework("services")
    every = [t["id"] for t in framework["tasks"]] + [t["id"] for t in cluster.state().get("completed_tasks", [])
                                                   if t.get("framework_id") == framework["id"]]
    assert len(every) == len(set(every))
    assert survivor.running()


def test_the_cli_and_the_page(cluster, tmp_path):
    cluster.start_master()
    _agents(cluster, ("node-a", "node-b"))
    token = cluster.token
    _, url = _start_services(cluster, "services")
    env = dict(child_env(), MESOSLIKE_SERVICES=url, MESOSLIKE_TOKEN=token)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mesoslike", *args], env=env, capture_output=True, text=True,
                              timeout=120, cwd=str(REPO))
    path = tmp_path / "web.toml"
    path.write_text('id = "/team/api"\ncmd = "sleep 1000"\ninstances = 2\ncpus = 0.1\nmem = 32\n')
    done = cli("app", "deploy", str(path), "--wait", "--wait-timeout", "60")
    assert done.returncode == 0 and "created /team/api" in done.stdout and "done" in done.stdout, done
    listed = cli("app", "list")
    assert "/team/api" in listed.stdout and "2/2" in listed.stdout, listed
    scaled = cli("app", "scale", "/team/api", "3", "--wait", "--wait-timeout", "60")
    assert scaled.returncode == 0, scaled
    shown = json.loads(cli("app", "show", "/team/api").stdout)
    assert shown["instances"] == 3 and len(shown["tasks"]) == 3
    assert len(cli("app", "tasks", "/team/api").stdout.strip().splitlines()) == 4   # header + 3
    before = {t["id"] for t in shown["tasks"]}
    restarted = cli("app", "restart", "/team/api", "--wait", "--wait-timeout", "90")
    assert restarted.returncode == 0 and "done" in restarted.stdout, restarted
    after = json.loads(cli("app", "show", "/team/api").stdout)["tasks"]
    assert len(after) == 3 and not before & {t["id"] for t in after}, (before, after)
    # too big to place: the queue says why, in the CLI too
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"id": "/team/huge", "cmd": "sleep 1000", "cpus": 64, "mem": 32}))
    assert cli("app", "deploy", str(big)).returncode == 0
    wait_until(lambda: "no offer has enough cpus" in cli("app", "list").stdout, 30, "the queue to say why",
               diagnostics=cluster.diagnostics)
    listed = cli("deployment", "list")
    assert "/team/huge" in listed.stdout, listed
    deployment_id = listed.stdout.splitlines()[1].split()[0]
    cancelled = cli("deployment", "cancel", deployment_id)
    assert cancelled.returncode == 0 and "rolling back" in cancelled.stdout, cancelled
    wait_until(lambda: api(url + "/v2/apps/team/huge", token=token)[0] == 404, 30, "the rollback to remove it")
    removed = cli("app", "remove", "/team/api", "--wait", "--wait-timeout", "60")
    assert removed.returncode == 0, removed
    assert "team" not in cli("app", "list").stdout
    refused = subprocess.run([sys.executable, "-m", "mesoslike", "app", "list"], capture_output=True, text=True,
                             env=dict(env, MESOSLIKE_TOKEN=""), timeout=60, cwd=str(REPO))
    assert refused.returncode == 1 and "401" in refused.stderr
    # the page: public files, its data from the API
    with urllib.request.urlopen(url + "/", timeout=5) as answer:
        assert b"mesoslike services" in answer.read()
    with urllib.request.urlopen(url + "/static/services.js", timeout=5) as answer:
        assert b"/v2/deployments" in answer.read()
    # the page's recent events (what happened above, the API's own events)
    status, recent = api(url + "/services/events", token=token)
    kinds = {event["eventType"] for event in recent["events"]}
    assert status == 200 and {"deployment_success", "status_update_event", "app_terminated_event"} <= kinds, kinds
    assert api(url + "/services/events")[0] == 401


def test_local_with_services_runs_an_app_and_the_dashboard_links_to_its_page(tmp_path):
    """`mesoslike local --services`: the service beside the cluster, authenticated with the cluster's
    keys; COMMAND reaches it with MESOSLIKE_SERVICES and the operator token, and the master's /state
    names its page (the dashboard's link)."""
    http_port = free_port()
    script = tmp_path / "use.sh"
    app = tmp_path / "app.json"
    app.write_text(json.dumps({"id": "/hello", "cmd": "sleep 1000", "instances": 2, "cpus": 0.1, "mem": 32}))
    script.write_text(f"""set -e
{sys.executable} -m mesoslike app deploy {app} --wait --wait-timeout 60
{sys.executable} -m mesoslike app list
{sys.executable} -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{http_port}/state').read().decode())" > {tmp_path}/state.json
""")
    done = subprocess.run([sys.executable, "-m", "mesoslike", "local", "--agents", "2", "--port", str(free_port()),
                           "--http-port", str(http_port), "--allocation-interval", "0.2", "--services",
                           "--services-port", "0", "--work-dir", str(tmp_path / "work"), "--", "sh", str(script)],
                          cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "service scheduler: REST API and page on http://" in done.stdout
    assert "/hello" in done.stdout and "2/2" in done.stdout, done.stdout
    state = json.loads((tmp_path / "state.json").read_text())
    services = next(f for f in state["frameworks"] if f["name"] == "services")
    assert services["webui_url"].startswith("http://127.0.0.1:") and services["webui_url"].endswith("/")


def test_an_unhealthy_instance_is_killed_and_replaced_and_the_stream_says_so(cluster):
    """An instance whose HTTP check fails ``maxConsecutiveFailures`` times in a row is killed by its agent
    and replaced by a new instance; the raw event stream carries ``health_status_changed_event`` (healthy,
    then not) and ``unhealthy_instance_kill_event``."""
    cluster.start_master()
    _agents(cluster, ("node-a",))
    token = cluster.token
    _, url = _start_services(cluster, "services")
    events: list = []
    ready = threading.Event()
    wanted = ("health_status_changed_event", "unhealthy_instance_kill_event")
    reader = threading.Thread(target=read_events, args=(
        url, "/v2/events?" + "&".join(f"event_type={kind}" for kind in wanted), token, 5, events, ready),
        daemon=True)
    reader.start()
    assert ready.wait(10)
    # healthy while the file it serves is there (python's HTTP server serves its sandbox)
    app = web_app("/flaky", 1, cmd="touch ok && exec python3 -m http.server $PORT0 --bind 127.0.0.1")
    app["healthChecks"][0].update(path="/ok", maxConsecutiveFailures=2)
    status, created = api(url + "/v2/apps", "POST", app, token)
    assert status == 201, created
    first = _wait_healthy(cluster, url, "/flaky", token, 1)[0]
    pid = next(pid for pid, task_id in task_processes(cluster.work_root).items() if task_id == first["id"])
    sandbox = task_environment(pid)["MESOSLIKE_SANDBOX"]
    os.remove(os.path.join(sandbox, "ok"))                  # its check fails from now on
    replacement = wait_until(lambda: (lambda ts: ts[0] if len(ts) == 1 and ts[0]["id"] != first["id"] else None)(
        healthy_tasks(url, "/flaky", token)), 90, "the unhealthy instance replaced", diagnostics=cluster.diagnostics)
    reader.join(30)
    seen = [(kind, event.get("taskId"), event.get("alive")) for kind, event in events[1:]]
    assert seen[:3] == [("health_status_changed_event", first["id"], True),
                        ("health_status_changed_event", first["id"], False),
                        ("unhealthy_instance_kill_event", first["id"], None)], seen
    assert ("health_status_changed_event", replacement["id"], True) in seen, seen
    status, body = api(url + "/v2/apps/flaky?embed=apps.lastTaskFailure", token=token)
    assert status == 200 and body["app"]["lastTaskFailure"]["taskId"] == first["id"], body
    assert replacement["id"].split("._app")[0] != first["id"].split("._app")[0], "a replacement is a new instance"


def test_an_apps_secrets_reach_its_tasks_from_the_agents_secrets_directory(cluster, tmp_path):
    """``secrets`` with ``env`` entries naming them: the agent resolves each under the service's
    principal (fwA) from its ``--secrets-dir``; the value reaches the task and nothing else (not the API,
    not the master's /state). A secret the agent lacks fails the launch, and the app's last failure names
    it."""
    secrets = tmp_path / "secrets"
    (secrets / "fwA" / "db").mkdir(parents=True, mode=0o700)
    os.chmod(secrets, 0o700)
    (secrets / "fwA" / "db" / "password").write_text("hunter2-e2e")
    os.chmod(secrets / "fwA" / "db" / "password", 0o600)
    cluster.start_master()
    cluster.start_agent("node-a", "cpus:4;mem:4096;disk:2048;ports:[31000-31199]",
                        extra=("--secrets-dir", str(secrets)))
    token = cluster.token
    _, url = _start_services(cluster, "services")
    app = {"id": "/db", "cmd": '[ ${#DB_PASSWORD} -eq 11 ] && exec sleep 1000', "cpus": 0.1, "mem": 32,
           "env": {"DB_PASSWORD": {"secret": "pw"}}, "secrets": {"pw": {"source": "/db/password"}}}
    status, created = api(url + "/v2/apps", "POST", app, token)
    assert status == 201, created
    task = wait_until(lambda: (lambda ts: ts[0] if ts and ts[0]["state"] == "TASK_RUNNING" else None)(
        api(url + "/v2/apps/db/tasks", token=token)[1]["tasks"]), 60, "the task running with its secret",
        diagnostics=cluster.diagnostics)
    pid = next(pid for pid, task_id in task_processes(cluster.work_root).items() if task_id == task["id"])
    assert task_environment(pid)["DB_PASSWORD"] == "hunter2-e2e"
    assert "hunter2-e2e" not in json.dumps(api(url + "/v2/apps?embed=apps.tasks", token=token)[1])
    assert "hunter2-e2e" not in json.dumps(cluster.state())

    missing = dict(app, id="/nosecret", secrets={"pw": {"source": "db/nope"}}, backoffSeconds=30)
    assert api(url + "/v2/apps", "POST", missing, token)[0] == 201
    failure = wait_until(lambda: api(url + "/v2/apps/nosecret?embed=apps.lastTaskFailure", token=token)[1]["app"]
                         .get("lastTaskFailure"), 60, "the launch to fail", diagnostics=cluster.diagnostics)
    assert failure["state"] == "TASK_FAILED" and "db/nope" in failure["message"], failure


def test_an_app_held_back_by_its_roles_quota_says_so_in_the_queue_and_the_cli(cluster):
    """The service in role ``svc``, whose quota limit (cpus:0.5) a first app uses up: the master makes the
    service no more offers, and the second app's queue entry says it is the quota (the master's
    offer_blockers, read from its /state), in the API and in ``mesoslike app list``."""
    credentials = cluster.keys.credentials
    credentials.write_text(credentials.read_text().replace('roles = ["*"]', 'roles = ["*", "svc"]'))
    cluster.start_master()
    _agents(cluster, ("node-a",))
    token = cluster.token
    request = urllib.request.Request(cluster.http + "/quota", method="POST",
                                     data=json.dumps({"role": "svc", "limit": "cpus:0.5"}).encode(),
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
    _, url = _start_services(cluster, "services", "--role", "svc")
    small = {"id": "/small", "cmd": "sleep 1000", "cpus": 0.5, "mem": 32}
    assert api(url + "/v2/apps", "POST", small, token)[0] == 201
    wait_until(lambda: api(url + "/v2/apps/small", token=token)[1]["app"]["tasksRunning"] == 1, 60,
               "the first app running", diagnostics=cluster.diagnostics)
    assert api(url + "/v2/apps", "POST", dict(small, id="/held"), token)[0] == 201

    def why() -> str | None:
        queue = api(url + "/v2/queue", token=token)[1]["queue"]
        entry = next((q for q in queue if q["app"]["id"] == "/held"), None)
        text = entry["processedOffersSummary"]["why"] if entry else ""
        return text if "quota limit" in text else None
    said = wait_until(why, 60, "the queue to name the quota", diagnostics=cluster.diagnostics)
    assert said.startswith("the master makes the service no offers: role 'svc' reached its quota limit"), said
    listed = subprocess.run([sys.executable, "-m", "mesoslike", "app", "list"], capture_output=True, text=True,
                            env=dict(child_env(), MESOSLIKE_SERVICES=url, MESOSLIKE_TOKEN=token), timeout=60,
                            cwd=str(REPO))
    assert "quota limit" in listed.stdout, listed
    assert api(url + "/v2/apps/held", token=token)[1]["app"]["tasksRunning"] == 0


def test_an_apps_container_image_runs_each_instance_in_the_image(cluster, cgroups_root, registry):  # noqa: F811
    """An app with Marathon's ``container`` (``MESOS`` with ``docker.image``) on a real agent with runc
    and a real registry: each instance runs in the image's root filesystem, not the host's."""
    require_tools("runc", "docker-registry")
    if os.geteuid() != 0:
        unavailable("containers need root")
    push_image(registry, "test/busybox", "1", busybox_image())
    cluster.start_master()
    start_agent(cluster, "img-host", "cpus:2;mem:512;disk:512;ports:[31000-31099]", "--docker-registry",
                registry.host, "--cgroups-root", cgroups_root)
    token = cluster.token
    _, url = _start_services(cluster, "services")
    app = {"id": "/boxed", "container": {"type": "MESOS", "docker": {"image": "test/busybox:1"}}, "instances": 2,
           "cmd": "{ cat /etc/motd; test -e /usr/bin/python3 || echo not-the-host; } > $MESOS_SANDBOX/seen; "
                  "exec sleep 1000", "cpus": 0.1, "mem": 32}
    status, created = api(url + "/v2/apps", "POST", app, token)
    assert status == 201, created
    wait_until(lambda: api(url + "/v2/apps/boxed", token=token)[1]["app"]["tasksRunning"] == 2, 90,
               "2 instances running in the image", diagnostics=cluster.diagnostics)
    framework_id = cluster.framework("services")["id"]
    for task in api(url + "/v2/apps/boxed/tasks", token=token)[1]["tasks"]:
        seen = sandbox_path(cluster.work_root / "img-host", framework_id, task["id"]) / "seen"
        text = wait_until(lambda: seen.exists() and seen.read_text(), 30, f"{task['id']} to write what it sees")
        assert "built in the test" in text and "not-the-host" in text, text


def test_instances_of_an_unreachable_agent_are_replaced_after_inactive_after_seconds(cluster):
    """An agent frozen (SIGSTOP: its tasks run on) past the master's ping timeouts is unreachable: its
    instances are TASK_UNREACHABLE (the service is partition-aware), replaced elsewhere only once the app's
    ``unreachableStrategy.inactiveAfterSeconds`` has passed; when the agent comes back, the extra
    instances are killed and the app runs its 2, each once."""
    cluster.start_master()
    _agents(cluster)
    token = cluster.token
    _, url = _start_services(cluster, "services")
    app = {"id": "/steady", "cmd": "sleep 1000", "instances": 2, "cpus": 0.1, "mem": 32,
           "unreachableStrategy": {"inactiveAfterSeconds": 6, "expungeAfterSeconds": 600}}
    assert api(url + "/v2/apps", "POST", app, token)[0] == 201

    def tasks() -> list[dict]:
        return api(url + "/v2/apps/steady/tasks", token=token)[1]["tasks"]
    first = wait_until(lambda: (lambda ts: ts if len(ts) == 2 and all(t["state"] == "TASK_RUNNING" for t in ts)
                                else None)(tasks()), 60, "2 running", diagnostics=cluster.diagnostics)
    frozen = first[0]["host"]
    cut_off = {t["id"] for t in first if t["host"] == frozen}
    cluster.agents[frozen].signal_group(signal.SIGSTOP)
    try:
        wait_until(lambda: {t["id"] for t in tasks() if t["state"] == "TASK_UNREACHABLE"} == cut_off, 30,
                   "the frozen agent's instances unreachable", diagnostics=cluster.diagnostics)
        unreachable_at = time.monotonic()
        replaced = wait_until(lambda: (lambda ts: ts if len([t for t in ts if t["state"] == "TASK_RUNNING"]) == 2
                                       else None)(tasks()), 60, "replacements running",
                              diagnostics=cluster.diagnostics)
        # replaced no sooner than inactiveAfterSeconds (counted from when the service heard it; polled: 1 s slack)
        assert time.monotonic() - unreachable_at >= 5, "replaced before inactiveAfterSeconds"
        assert all(t["host"] != frozen for t in replaced if t["state"] == "TASK_RUNNING")
    finally:
        cluster.agents[frozen].signal_group(signal.SIGCONT)
    # the agent comes back with its tasks: the extra instances go, 2 run, no instance twice
    final = wait_until(lambda: (lambda ts: ts if len(ts) == 2 and all(t["state"] == "TASK_RUNNING" for t in ts)
                                and len(_framework_tasks(cluster)) == 2 else None)(tasks()), 90,
                       "the app back to 2 once the agent returned", diagnostics=cluster.diagnostics)
    assert len({t["id"].split("._app")[0] for t in final}) == 2
    # the returning instances are the older ones: the replacements (killSelection YOUNGEST_FIRST) were killed
    replacements = {t["id"] for t in replaced if t["state"] == "TASK_RUNNING"} - {t["id"] for t in first}
    assert cut_off <= {t["id"] for t in final} and not replacements & {t["id"] for t in final}, (final, replaced)
