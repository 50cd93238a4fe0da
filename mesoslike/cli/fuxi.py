"""``mesoslike fuxi``: run the bundled Fuxi scheduler, submit jobs to it, see their status."""

from __future__ import annotations

import json
import signal
import threading
import time

import click

from mesoslike.cli.options import die, logging_option, option
from mesoslike.cli.state import _table
from mesoslike.errors import MesoslikeError

__all__ = ["fuxi", "format_status", "progress_line"]

_POSITIVE = click.FloatRange(min=0, min_open=True)
_PORT = click.IntRange(0, 65535)
DEFAULT_FUXI = "tcp://127.0.0.1:5060"


def _fuxi_option():
    return option("", "--fuxi", "fuxi_address", default=DEFAULT_FUXI,
                  help="The Fuxi service (`mesoslike fuxi serve`) to talk to: tcp://HOST:PORT.")


def _timeout_option(command: str):
    return option(command, "--timeout", type=_POSITIVE, default=10.0,
                  help="Seconds to wait for the service to answer a request.")


@click.group()
def fuxi() -> None:
    """The bundled Fuxi scheduler: serve it as a framework, submit jobs to it, see their status."""


# ------------------------------------------------------------------ serve
@fuxi.command()
@option("", "--master", "master_address", required=True,
        help="The master: tcp://HOST:PORT, or zk://HOST:PORT[,...]/PATH to follow the leader.")
@option("fuxi_serve", "--ip", default="127.0.0.1", help="Address to bind for job clients.")
@option("fuxi_serve", "--port", type=_PORT, default=5060, help="Port job clients connect to (0 = any free).")
@option("fuxi_serve", "--quota", type=click.Path(dir_okay=False), default=None,
        show_default="one group 'default' without a maximum",
        help="TOML file of quota groups ([quota.<group>] cpus = 8, mem = 8192), the global blacklist "
             "([blacklist] hosts = [...]) and [preemption] enabled = true|false.")
@option("fuxi_serve", "--name", default="fuxi", help="Framework name.")
@option("fuxi_serve", "--role", default="*", help="Role the framework runs in.")
@option("fuxi_serve", "--max-attempts", type=click.IntRange(min=1), default=3,
        help="Launches of an instance whose command fails before its job fails.")
@logging_option("fuxi_serve")
def serve(master_address, ip, port, quota, name, role, max_attempts) -> None:
    """Run the Fuxi scheduler: a framework on the master that schedules the
    jobs submitted to it on --port. Prints the address job clients use.
    Stopping it (Ctrl-C, SIGTERM) ends the framework: its tasks are killed."""
    from mesoslike import DriverStatus, FrameworkInfo, SchedulerDriver
    from mesoslike.frameworks.fuxi.core import FuxiCore
    from mesoslike.frameworks.fuxi.service import FuxiService, JobServer, QuotaConfig, load_quota_file

    try:
        config = load_quota_file(quota) if quota else QuotaConfig()
    except MesoslikeError as exc:
        die(str(exc), 2)
    try:
        core = FuxiCore(config.groups, global_blacklist=config.blacklist, preemption=config.preemption)
        service = FuxiService(core, max_attempts=max_attempts)
        driver = SchedulerDriver(service, FrameworkInfo(name=name, role=role, failover_timeout=0.0), master_address)
        server = JobServer(service, f"tcp://{ip}:{port}")
    except MesoslikeError as exc:
        die(str(exc))
    service.attach(driver)
    groups = ", ".join(f"{g.name} ({g.maximum or 'no maximum'})" for g in sorted(core.groups.values(),
                                                                                 key=lambda g: g.name))
    click.echo(f"fuxi scheduler {name!r} serving jobs on {server.address}, framework in role {role} on "
               f"{master_address}; quota groups: {groups}")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    server.start()
    driver.start()
    try:
        while not stopping.wait(0.5) and driver.status is DriverStatus.RUNNING:
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        ended = driver.status
        driver.stop()
        driver.join(10)
    if ended is not DriverStatus.RUNNING:
        die(f"the scheduler driver ended ({ended.value}): {'; '.join(service.errors) or 'no error reported'}")


# ----------------------------------------------------------------- submit
@fuxi.command()
@_fuxi_option()
@option("fuxi_submit", "--wait", is_flag=True, default=False, show_default="off",
        help="Show the job's progress until it ends; exit 0 only if it succeeded.")
@option("fuxi_submit", "--interval", type=_POSITIVE, default=0.5, help="Seconds between progress polls with --wait.")
@_timeout_option("fuxi_submit")
@logging_option("fuxi_submit")
@click.argument("job_file", metavar="JOB.toml", type=click.Path(dir_okay=False))
def submit(fuxi_address, wait, interval, timeout, job_file) -> None:
    """Submit the job in JOB.toml (DESIGN §3.5 / docs/fuxi.rst) and print its
    id. A job file that is not valid exits 2 and sends nothing."""
    from mesoslike.frameworks.fuxi.model import JobSpecError, parse_job
    from mesoslike.frameworks.fuxi.service import JobClient, check_runnable, read_toml

    try:
        document = read_toml(job_file, "job file", JobSpecError)
        spec = parse_job(document)
        check_runnable(spec)
    except JobSpecError as exc:
        message = str(exc)
        die(message if str(job_file) in message else f"{job_file}: {message}", 2)
    try:
        with JobClient(fuxi_address, timeout) as client:
            job_id = client.submit(document)
            click.echo(f"submitted {job_id} ({spec.name})")
            if wait:
                raise SystemExit(_follow(client, job_id, interval))
    except MesoslikeError as exc:
        die(str(exc))


def _follow(client, job_id: str, interval: float) -> int:
    last = ""
    try:
        while True:
            job = client.status(job_id)["jobs"][0]
            if job["state"] != "running":
                break
            line = progress_line(job)
            if line != last:
                click.echo(line)
                last = line
            time.sleep(interval)
    except KeyboardInterrupt:
        click.echo(f"stopped following {job_id}; it goes on (`mesoslike fuxi status {job_id}`)", err=True)
        return 130
    counts = job["instances"]
    if job["state"] == "succeeded":
        click.echo(f"{job_id} succeeded: {counts['done']}/{counts['total']} instances done in {job['elapsed']:.1f}s")
        return 0
    click.echo(f"{job_id} {job['state']}: {job['reason']}", err=True)
    return 1


def progress_line(job: dict) -> str:
    """One line of a job's progress: instances done/total, running, failed, slots per unit."""
    counts = job["instances"]
    line = (f"{job['id']} {job['state']}: {counts['done']}/{counts['total']} instances done, "
            f"{counts['running']} running, {counts['failed']} failed")
    if counts["retries"]:
        line += f", {counts['retries']} retried"
    units = []
    for unit in job["units"]:
        text = f"{unit['name']} {unit['granted']}/{unit['desired']} slots"
        if unit["why_waiting"]:
            text += f" (waiting: {unit['why_waiting']})"
        units.append(text)
    return line + "; " + ", ".join(units)


# ----------------------------------------------------------------- status
@fuxi.command()
@_fuxi_option()
@option("fuxi_status", "--json", "as_json", is_flag=True, default=False, show_default="off",
        help="Print the raw JSON document.")
@_timeout_option("fuxi_status")
@logging_option("fuxi_status")
@click.argument("job", required=False)
def status(fuxi_address, as_json, timeout, job) -> None:
    """Jobs (or JOB) with their units: desired and granted slots, the hosts
    of the slots, instances done/total, and why a unit waits."""
    from mesoslike.frameworks.fuxi.service import JobClient

    try:
        with JobClient(fuxi_address, timeout) as client:
            document = client.status(job)
    except MesoslikeError as exc:
        die(str(exc))
    click.echo(json.dumps(document, indent=2) if as_json else format_status(document))


def _hosts(hosts: dict) -> str:
    return ",".join(f"{host}:{count}" for host, count in hosts.items()) or "-"


def format_status(document: dict) -> str:
    """The status document as text a person can read."""
    lines = []
    if not document["jobs"]:
        lines.append("no jobs")
    for job in document["jobs"]:
        counts = job["instances"]
        lines.append(f"{job['id']} {job['name']}: {job['state']}, quota group {job['quota_group']}, priority "
                     f"{job['priority']}, {job['policy']}; {counts['done']}/{counts['total']} instances done, "
                     f"{counts['running']} running, {counts['failed']} failed, {job['elapsed']:.1f}s")
        if job["reason"]:
            lines.append(f"  reason: {job['reason']}")
        rows = [[u["name"], u["slot"], u["desired"], u["granted"], _hosts(u["hosts"]),
                 f"{u['instances']['done']}/{u['instances']['total']}", u["instances"]["running"],
                 u["instances"]["failed"], u["instances"]["retries"], u["why_waiting"] or "-"]
                for u in job["units"]]
        lines += ["  " + row for row in _table(rows, ["unit", "slot", "desired", "granted", "hosts", "instances",
                                                       "running", "failed", "retries", "waiting for"])]
        lines += [f"  last failure of {u['name']}: {u['last_failure']}" for u in job["units"] if u["last_failure"]]
    lines += ["", "quota groups"]
    lines += ["  " + row for row in _table([[g["name"], g["maximum"] or "none", g["used"] or "-", g["waiting"] or "-"]
                                            for g in document["quota_groups"]],
                                           ["group", "maximum", "used", "waiting"])]
    return "\n".join(lines)
