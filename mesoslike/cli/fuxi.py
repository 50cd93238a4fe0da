"""``mesoslike fuxi``: run the bundled Fuxi scheduler, submit jobs to it, see their status."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time

import click

from mesoslike.cli.options import client_key_options, die, logging_option, option
from mesoslike.cli.state import _table
from mesoslike import MesoslikeError

__all__ = ["fuxi", "format_status", "progress_line", "ProgressBar", "bar"]

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
@option("fuxi_serve", "--ip", default="127.0.0.1",
        help="Address to bind for job clients and the jobs' AppMasters (workers in the slots connect to them).")
@option("fuxi_serve", "--port", type=_PORT, default=5060, help="Port job clients connect to (0 = any free).")
@option("fuxi_serve", "--quota", type=click.Path(dir_okay=False), default=None,
        show_default="one group 'default' without a maximum",
        help="TOML file of quota groups ([quota.<group>] cpus = 8, mem = 8192), the global blacklist "
             "([blacklist] hosts = [...]) and [preemption] enabled = true|false.")
@option("fuxi_serve", "--name", default="fuxi", help="Framework name.")
@option("fuxi_serve", "--role", default="*", help="Role the framework runs in.")
@option("fuxi_serve", "--work-dir", type=click.Path(file_okay=False), default=None,
        show_default="a temporary directory, removed on exit",
        help="Where each job's document, AppMaster snapshot and AppMaster log go (<work-dir>/<job id>/).")
@client_key_options
@logging_option("fuxi_serve")
def serve(master_address, ip, port, quota, name, role, work_dir, key, master_key) -> None:
    """Run the Fuxi scheduler: a framework on the master that schedules the
    jobs submitted to it on --port, with an AppMaster process per job (bound
    on --ip) and a worker task per granted slot. Prints the address job
    clients use. Stopping it (Ctrl-C, SIGTERM) ends the framework: its tasks
    are killed, its AppMasters stopped."""
    from mesoslike import DriverStatus, FrameworkInfo, SchedulerDriver
    from mesoslike.frameworks.fuxi.core import FuxiCore
    from mesoslike.frameworks.fuxi.quota import QuotaConfig, load_quota_file
    from mesoslike.frameworks.fuxi.service import FuxiService, JobServer

    try:
        config = load_quota_file(quota) if quota else QuotaConfig()
    except MesoslikeError as exc:
        die(str(exc), 2)
    try:
        core = FuxiCore(config.groups, global_blacklist=config.blacklist, preemption=config.preemption)
        service = FuxiService(core, work_dir=work_dir, appmaster_ip=ip)
        driver = SchedulerDriver(service, FrameworkInfo(name=name, role=role, failover_timeout=0.0), master_address,
                                 key=key, master_key=master_key)
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
        service.stop()
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
    from mesoslike.frameworks.fuxi.model import JobSpecError, check_runnable, parse_job, read_toml
    from mesoslike.frameworks.fuxi.service import JobClient

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
    bar = ProgressBar(sys.stdout.isatty())
    try:
        while True:
            job = client.status(job_id)["jobs"][0]
            if job["state"] != "running":
                break
            bar.show(progress_line(job))
            time.sleep(interval)
    except KeyboardInterrupt:
        bar.close()
        click.echo(f"stopped following {job_id}; it goes on (`mesoslike fuxi status {job_id}`)", err=True)
        return 130
    bar.show(progress_line(job))
    bar.close()
    counts = job["instances"]
    if job["state"] == "succeeded":
        click.echo(f"{job_id} succeeded: {counts['done']}/{counts['total']} instances done in {job['elapsed']:.1f}s")
        return 0
    click.echo(f"{job_id} {job['state']}: {job['reason']}", err=True)
    return 1


class ProgressBar:
    """One line that updates in place on a terminal (carriage return and
    ANSI erase-line); elsewhere a plain line whenever it changes."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.last = ""

    def show(self, line: str) -> None:
        if line == self.last:
            return
        self.last = line
        if self.tty:
            click.echo("\r\x1b[K" + line, nl=False)
        else:
            click.echo(line)

    def close(self) -> None:
        if self.tty and self.last:
            click.echo()


def bar(done: int, total: int, width: int = 24) -> str:
    """``[#########...............]`` for ``done`` of ``total``."""
    filled = done * width // total if total > 0 else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


def progress_line(job: dict) -> str:
    """One line of a job's progress: a bar, instances done/total, running,
    failed (attempts), backups; then granted/desired slots per unit."""
    counts = job["instances"]
    line = (f"{job['id']} {bar(counts['done'], counts['total'])} {counts['done']}/{counts['total']} done, "
            f"{counts['running']} running, {counts['failed']} failed, {counts['backups']} backups")
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
                     f"{job['priority']}, {job['policy']}; {bar(counts['done'], counts['total'])} "
                     f"{counts['done']}/{counts['total']} instances done, {counts['running']} running, "
                     f"{counts['failed']} failed, {counts['backups']} backups, {job['elapsed']:.1f}s")
        if job["reason"]:
            lines.append(f"  reason: {job['reason']}")
        appmaster = job.get("appmaster")
        if appmaster:
            lines.append(f"  appmaster: pid {appmaster['pid']} on {appmaster['address']}, "
                         f"{'running' if appmaster['running'] else 'exited'}, {appmaster['restarts']} restart(s)")
        if job.get("blacklisted"):
            lines.append(f"  blacklisted: {', '.join(job['blacklisted'])}")
        rows = [[u["name"], u["slot"], u["desired"], u["granted"], _hosts(u["hosts"]),
                 f"{u['instances']['done']}/{u['instances']['total']}", u["instances"]["running"],
                 u["instances"]["failed"], u["instances"]["backups"], u["why_waiting"] or "-"]
                for u in job["units"]]
        lines += ["  " + row for row in _table(rows, ["unit", "slot", "desired", "granted", "hosts", "instances",
                                                       "running", "failed", "backups", "waiting for"])]
    lines += ["", "quota groups"]
    lines += ["  " + row for row in _table([[g["name"], g["maximum"] or "none", g["used"] or "-", g["waiting"] or "-"]
                                            for g in document["quota_groups"]],
                                           ["group", "maximum", "used", "waiting"])]
    if document.get("global_blacklist"):
        lines.append(f"global blacklist: {', '.join(document['global_blacklist'])}")
    return "\n".join(lines)
