"""``mesoslike services serve``, ``mesoslike app ...`` and ``mesoslike
deployment ...``: the bundled service scheduler (docs/services.rst) and its
command line, a client of its Marathon REST API."""

from __future__ import annotations

import json
import signal
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import click

from mesoslike import MesoslikeError
from mesoslike.cli.options import client_key_options, config_option, die, logging_option, option
from mesoslike.cli.state import table

__all__ = ["services", "app", "deployment"]

_PORT = click.IntRange(0, 65535)
_POSITIVE = click.FloatRange(min=0, min_open=True)
DEFAULT_SERVICES = "http://127.0.0.1:8080"


# ------------------------------------------------------------------ serve
@click.group()
def services() -> None:
    """The bundled service scheduler: long-running apps behind Marathon's REST API."""


@services.command()
@config_option("services_serve")
@option("", "--master", "master_address", required=True,
        help="The master: tcp://HOST:PORT, or zk://HOST:PORT[,...]/PATH to follow the leader.")
@option("services_serve", "--zk", "zk_url", default=None, show_default="none: a single service",
        help="zk://HOST:PORT[,...]/PATH: one of several services that elect a leader there; the apps, their "
             "versions, deployments and launched instances are kept there (needs --work-dir).")
@option("services_serve", "--ip", default="127.0.0.1", help="Address the REST API binds.")
@option("services_serve", "--http-port", type=_PORT, default=8080,
        help="Port of the REST API (/v2/apps, /v2/events ...) and the services page (0 = any free).")
@option("services_serve", "--work-dir", type=click.Path(file_okay=False), default=None,
        show_default="none: nothing is kept",
        help="Without --zk, where the apps, versions, deployments and instances are kept (<work-dir>/state/), "
             "so that a restart resumes them.")
@option("services_serve", "--name", default="services", help="Framework name.")
@option("services_serve", "--role", default="*", help="Role the framework (and so every app) runs in.")
@option("services_serve", "--user", default="", show_default="the master's default",
        help="Unix user the apps' tasks run as when an app gives no user.")
@option("services_serve", "--failover-timeout", type=click.FloatRange(min=0), default=None,
        show_default="600 when the state is kept (--work-dir or --zk), else 0",
        help="Seconds the master keeps the instances running while no service is connected (a restart, a new "
             "leader).")
@option("services_serve", "--zk-session-timeout", type=_POSITIVE, default=10.0,
        help="With --zk: the ZooKeeper session timeout (s): how long a leader cut off keeps its term.")
@option("services_serve", "--drain-poll", type=_POSITIVE, default=2.0,
        help="Seconds between reads of the master's /state for draining agents (their instances are replaced "
             "before the drain kills them).")
@click.option("--credentials", type=click.Path(dir_okay=False), default=None,
              envvar="MESOSLIKE_SERVICES_CREDENTIALS", show_envvar=True, show_default="none",
              help="TOML file of principals and ACLs (the master's format, docs/security.rst): API clients need an "
                   "operator's bearer token; the manage_apps ACL says which apps each may see and change.")
@option("services_serve", "--insecure", is_flag=True, default=False, show_default="off",
        help="Serve the API without --credentials on an address other than loopback.")
@client_key_options
@logging_option("services_serve")
def serve(master_address, zk_url, ip, http_port, work_dir, name, role, user, failover_timeout, zk_session_timeout,
          drain_poll, credentials, insecure, key, master_key) -> None:
    """Run the service scheduler: a framework on the master that keeps the
    apps it is given running — scaled, upgraded, replaced when they fail —
    and serves Marathon's REST API on --http-port. With --work-dir or --zk
    the apps are kept: stopping it (Ctrl-C, SIGTERM) leaves the instances
    running for --failover-timeout, and the next service takes them over.
    Without, stopping it ends the framework and its instances."""
    from mesoslike.credentials import load_credentials
    from mesoslike_frameworks.services.runner import ServicesRunner

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        runner = ServicesRunner(master_address, zk=zk_url, ip=ip, http_port=http_port, work_dir=work_dir, name=name,
                                role=role, failover_timeout=failover_timeout,
                                credentials=load_credentials(credentials) if credentials else None, key=key,
                                master_key=master_key, insecure=insecure, zk_session_timeout=zk_session_timeout,
                                drain_poll=drain_poll, user=user)
        runner.start()
    except MesoslikeError as exc:
        die(str(exc))
    if zk_url:
        click.echo(f"services {name!r}: REST API on {runner.address}, standing for election in {zk_url}")
    else:
        click.echo(f"services {name!r}: REST API on {runner.address}, framework in role {role} on {master_address}; "
                   f"{'API clients authenticated' if credentials else 'API clients NOT authenticated'}")
    try:
        while not stopping.wait(0.5) and runner.running():
            pass
    except KeyboardInterrupt:
        pass
    finally:
        runner.stop()
    if runner.lost:
        die(f"no longer the leading service scheduler ({runner.lost}): exiting; the next leader takes the apps over")
    if runner.driver is not None and not stopping.is_set() and not runner.running():
        die(f"the scheduler driver ended: {'; '.join(runner.service.errors) or 'no error reported'}")


# ----------------------------------------------------------------- client
def _client_options(fn):
    fn = option("", "--token", default=None, show_default="none",
                help="An operator's bearer token, when the service has --credentials.")(fn)
    fn = option("", "--timeout", type=_POSITIVE, default=10.0, help="Seconds to wait for an answer.")(fn)
    return option("", "--services", "services_address", default=DEFAULT_SERVICES,
                  help="The service scheduler's REST API: http://HOST:PORT, or zk://HOST:PORT[,...]/PATH to find "
                       "the leader of the services serving with --zk.")(fn)


def _client(services_address: str, token: str | None, timeout: float):
    from mesoslike_frameworks.services.client import ServicesClient

    try:
        return ServicesClient(services_address, token, timeout)
    except MesoslikeError as exc:
        die(str(exc))


def _call(client, method: str, path: str, body: Any = None, **query: Any) -> Any:
    try:
        return client.request(method, path, body, **query)
    except MesoslikeError as exc:
        die(str(exc))


def _app_path(app_id: str) -> str:
    return "/v2/apps/" + app_id.strip("/")


def _wait_deployment(client, deployment_id: str, timeout: float | None) -> None:
    """Until the deployment is no longer listed (done, or cancelled)."""
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        running = {d["id"]: d for d in _call(client, "GET", "/v2/deployments")}
        current = running.get(deployment_id)
        if current is None:
            click.echo(f"deployment {deployment_id} done")
            return
        if deadline is not None and time.monotonic() > deadline:
            die(f"deployment {deployment_id} still running after {timeout:g}s (step {current['currentStep']} of "
                f"{current['totalSteps']})")
        time.sleep(0.5)


def _wait_option(fn):
    fn = option("", "--wait-timeout", type=_POSITIVE, default=None, show_default="none",
                help="With --wait: give up (exit 1) after this many seconds.")(fn)
    return click.option("--wait", is_flag=True, default=False, help="Wait until the deployment is done.")(fn)


def _force_option(fn):
    return click.option("--force", is_flag=True, default=False,
                        help="Go ahead even if a deployment is changing the app (that deployment is cancelled).")(fn)


def _deployed(client, answer: dict, wait: bool, wait_timeout: float | None) -> None:
    deployment_id = answer.get("deploymentId") or (answer.get("deployments") or [{}])[0].get("id")
    click.echo(f"deployment {deployment_id} (version {answer.get('version', '-')})")
    if wait and deployment_id:
        _wait_deployment(client, deployment_id, wait_timeout)


@click.group()
def app() -> None:
    """Apps of the service scheduler (`mesoslike services serve`): deploy, list, show, scale, restart, remove."""


@app.command()
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@_client_options
@_force_option
@_wait_option
def deploy(file, services_address, token, timeout, force, wait, wait_timeout) -> None:
    """Create or update the app FILE describes (Marathon's app JSON, or the
    same keys in TOML). A running app is updated: a rolling upgrade, or a
    scale when only `instances` changed."""
    path = Path(file)
    try:
        text = path.read_text()
        document = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        die(f"cannot read {path}: {exc}", 2)
    if not isinstance(document, dict) or not isinstance(document.get("id"), str):
        die(f"{path}: an app document with an \"id\" is needed", 2)
    client = _client(services_address, token, timeout)
    from mesoslike_frameworks.services.client import ServicesError

    try:
        client.request("GET", _app_path(document["id"]))
        exists = True
    except ServicesError as exc:
        if exc.status != 404:
            die(str(exc))
        exists = False
    if exists:
        answer = _call(client, "PUT", _app_path(document["id"]), document, force=force or None)
    else:
        answer = _call(client, "POST", "/v2/apps", document)
        click.echo(f"created {answer['id']}")
    _deployed(client, answer, wait, wait_timeout)


@app.command(name="list")
@_client_options
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the API's JSON.")
def list_apps(services_address, token, timeout, as_json) -> None:
    """Apps: instances running/wanted, healthy, resources, deployments, why some wait."""
    client = _client(services_address, token, timeout)
    apps = _call(client, "GET", "/v2/apps")["apps"]
    queue = {item["app"]["id"]: item for item in _call(client, "GET", "/v2/queue")["queue"]}
    if as_json:
        click.echo(json.dumps({"apps": apps, "queue": list(queue.values())}, indent=2))
        return
    rows = []
    for document in apps:
        waiting = queue.get(document["id"])
        rows.append([document["id"], f"{document['tasksRunning']}/{document['instances']}",
                     str(document["tasksHealthy"]) if document["healthChecks"] else "-",
                     f"{document['cpus']:g}", f"{document['mem']:g}", str(len(document["deployments"])),
                     f"{waiting['count']} waiting: {waiting['processedOffersSummary']['why']}" if waiting else ""])
    click.echo("\n".join(table(rows, ["ID", "RUNNING", "HEALTHY", "CPUS", "MEM", "DEPLOYMENTS", "QUEUE"])))


@app.command()
@click.argument("app_id")
@_client_options
def show(app_id, services_address, token, timeout) -> None:
    """One app as JSON: its definition, counts, tasks, last failure, and its queue entry (why instances wait)."""
    client = _client(services_address, token, timeout)
    document = _call(client, "GET", _app_path(app_id), embed=["app.tasks", "app.lastTaskFailure"])["app"]
    queue = [item for item in _call(client, "GET", "/v2/queue")["queue"] if item["app"]["id"] == document["id"]]
    if queue:
        item = queue[0]
        document["queue"] = {"count": item["count"], "delay": item["delay"],
                             "why": item["processedOffersSummary"]["why"],
                             "processedOffersSummary": item["processedOffersSummary"]}
    click.echo(json.dumps(document, indent=2))


@app.command()
@click.argument("app_id")
@click.argument("instances", type=click.IntRange(min=0))
@_client_options
@_force_option
@_wait_option
def scale(app_id, instances, services_address, token, timeout, force, wait, wait_timeout) -> None:
    """Scale APP_ID to INSTANCES."""
    client = _client(services_address, token, timeout)
    answer = _call(client, "PUT", _app_path(app_id), {"instances": instances}, force=force or None)
    _deployed(client, answer, wait, wait_timeout)


@app.command()
@click.argument("app_id")
@_client_options
@_force_option
@_wait_option
def restart(app_id, services_address, token, timeout, force, wait, wait_timeout) -> None:
    """Replace every instance of APP_ID (rolling, as its upgradeStrategy says)."""
    client = _client(services_address, token, timeout)
    answer = _call(client, "POST", _app_path(app_id) + "/restart", force=force or None)
    _deployed(client, answer, wait, wait_timeout)


@app.command()
@click.argument("app_id")
@_client_options
@_force_option
@_wait_option
def remove(app_id, services_address, token, timeout, force, wait, wait_timeout) -> None:
    """Delete APP_ID: its instances are killed, then it is forgotten."""
    client = _client(services_address, token, timeout)
    answer = _call(client, "DELETE", _app_path(app_id), force=force or None)
    _deployed(client, answer, wait, wait_timeout)


@app.command()
@click.argument("app_id")
@_client_options
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the API's JSON.")
def tasks(app_id, services_address, token, timeout, as_json) -> None:
    """The tasks of APP_ID: state, health, host and ports."""
    client = _client(services_address, token, timeout)
    listed = _call(client, "GET", _app_path(app_id) + "/tasks")["tasks"]
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    rows = []
    for task in listed:
        results = task.get("healthCheckResults") or []
        health = "-" if not results else "healthy" if results[0]["alive"] else "unhealthy"
        rows.append([task["id"], task["state"], health, task["host"], ",".join(str(p) for p in task["ports"]),
                     task["version"]])
    click.echo("\n".join(table(rows, ["TASK", "STATE", "HEALTH", "HOST", "PORTS", "VERSION"])))


@click.group()
def deployment() -> None:
    """Deployments of the service scheduler: list them, cancel one (rolled back, or with --force just stopped)."""


@deployment.command(name="list")
@_client_options
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the API's JSON.")
def list_deployments(services_address, token, timeout, as_json) -> None:
    """Deployments in progress: their apps, steps, and the step running."""
    client = _client(services_address, token, timeout)
    listed = _call(client, "GET", "/v2/deployments")
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    rows = [[d["id"], ",".join(d["affectedApps"]), f"{d['currentStep']}/{d['totalSteps']}",
             ", ".join(f"{a['action']} {a['app']}" for a in d["currentActions"]), d["version"]] for d in listed]
    click.echo("\n".join(table(rows, ["ID", "APPS", "STEP", "DOING", "VERSION"])))


@deployment.command()
@click.argument("deployment_id")
@_client_options
@click.option("--force", is_flag=True, default=False,
              help="Just stop it (the apps stay as they are), instead of rolling back to how they were.")
def cancel(deployment_id, services_address, token, timeout, force) -> None:
    """Cancel DEPLOYMENT_ID: a new deployment rolls its apps back (with --force: stopped where it is)."""
    client = _client(services_address, token, timeout)
    answer = _call(client, "DELETE", f"/v2/deployments/{deployment_id}", force=force or None)
    if answer:
        click.echo(f"rolling back: deployment {answer['deploymentId']}")
    else:
        click.echo(f"deployment {deployment_id} stopped")
