"""``mesoslike fuxi``: run the bundled Fuxi scheduler, submit jobs to it, see their status."""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import click

from mesoslike.cli.options import client_key_options, config_option, die, logging_option, option
from mesoslike.cli.state import _table
from mesoslike import MesoslikeError

__all__ = ["fuxi", "format_status", "progress_line", "ProgressBar", "bar", "DEFAULT_FAILOVER_TIMEOUT"]

_POSITIVE = click.FloatRange(min=0, min_open=True)
_PORT = click.IntRange(0, 65535)
DEFAULT_FUXI = "tcp://127.0.0.1:5060"


def _fuxi_option():
    return option("", "--fuxi", "fuxi_address", default=DEFAULT_FUXI,
                  help="The Fuxi service (`mesoslike fuxi serve`) to talk to: tcp://HOST:PORT, or "
                       "zk://HOST:PORT[,...]/PATH to find the leader of the services serving with --zk.")


def _fuxi_key_options(fn):
    """``--key`` and ``--fuxi-key`` of a job client of an authenticated Fuxi
    service (env ``MESOSLIKE_KEY``, ``MESOSLIKE_FUXI_KEY``; docs/security.rst)."""
    fn = option("", "--fuxi-key", type=click.Path(dir_okay=False), default=None, show_default="none",
                help="The Fuxi service's public certificate (the .key of its --key): talk to that service only.")(fn)
    return option("", "--key", type=click.Path(dir_okay=False), default=None, show_default="none",
                  help="This client's secret certificate (NAME.key_secret, mode 0600), a principal of the Fuxi "
                       "service's credentials: the jobs it submits are that principal's.")(fn)


def _job_client(fuxi_address: str, timeout: float, key: str | None, fuxi_key: str | None):
    """A :class:`JobClient` with the keys of --key/--fuxi-key (or the environment); exit 1 saying what is wrong."""
    from mesoslike.credentials import FUXI_KEY_ENV, client_keys
    from mesoslike.frameworks.fuxi.service import JobClient

    try:
        keys, server_key = client_keys(key, fuxi_key, server_env=FUXI_KEY_ENV, server_option="--fuxi-key",
                                       server="the Fuxi service")
        return JobClient(fuxi_address, timeout, keys=keys, server_key=server_key)
    except MesoslikeError as exc:
        die(str(exc))


def _timeout_option(command: str):
    return option(command, "--timeout", type=_POSITIVE, default=10.0,
                  help="Seconds to wait for the service to answer a request.")


def _reattach_option(command: str):
    return option(command, "--reattach-timeout", type=click.FloatRange(min=0), default=600.0,
                  help="With --wait: how long to keep asking a Fuxi service that does not answer — one "
                       "restarting, or a failover to a new leader — before giving up (exit 1). The job goes on "
                       "meanwhile; serve's --failover-timeout is how long its workers outlive a service.")


@click.group()
def fuxi() -> None:
    """The bundled Fuxi scheduler: serve it as a framework, submit jobs to it, see their status, kill them."""


# ------------------------------------------------------------------ serve
#: the framework's failover timeout when the state is kept: long enough for a restart or a new leader
DEFAULT_FAILOVER_TIMEOUT = 600.0


@fuxi.command()
@config_option("fuxi_serve")
@option("", "--master", "master_address", required=True,
        help="The master: tcp://HOST:PORT, or zk://HOST:PORT[,...]/PATH to follow the leader.")
@option("fuxi_serve", "--zk", "zk_url", default=None, show_default="none: a single service",
        help="zk://HOST:PORT[,...]/PATH: one of several services that elect a leader there; only the leader "
             "schedules, and the jobs are kept there (needs --work-dir, shared by the services).")
@option("fuxi_serve", "--ip", default="127.0.0.1",
        help="Address to bind for job clients and the jobs' AppMasters (workers in the slots connect to them).")
@option("fuxi_serve", "--port", type=_PORT, default=5060, help="Port job clients connect to (0 = any free).")
@option("fuxi_serve", "--http-port", type=_PORT, default=None, show_default="none: no page",
        help="Port of the service's read-only web page (jobs, units, slots, why a unit waits; docs/dashboard.rst) "
             "and its GET /status JSON, on --ip (0 = any free).")
@option("fuxi_serve", "--quota", type=click.Path(dir_okay=False), default=None,
        show_default="the kept one, else one group 'default' without a maximum",
        help="TOML file of quota groups ([quota.<group>] cpus = 8, mem = 8192), the global blacklist "
             "([blacklist] hosts = [...]) and [preemption] enabled = true|false.")
@option("fuxi_serve", "--name", default="fuxi", help="Framework name.")
@option("fuxi_serve", "--role", default="*", help="Role the framework runs in.")
@option("fuxi_serve", "--work-dir", type=click.Path(file_okay=False), default=None,
        show_default="a temporary directory, removed on exit (nothing is kept)",
        help="Where each job's document, AppMaster snapshot and AppMaster log go (<work-dir>/<job id>/); "
             "without --zk also the jobs themselves (<work-dir>/state/), so that a restart resumes them.")
@option("fuxi_serve", "--failover-timeout", type=click.FloatRange(min=0), default=None,
        show_default=f"{DEFAULT_FAILOVER_TIMEOUT:g} when the jobs are kept (--work-dir or --zk), else 0",
        help="Seconds the master keeps the framework's workers running while no service is connected "
             "(a restart, a new leader); the AppMasters wait as long for a service.")
@option("fuxi_serve", "--keep-ended", type=click.IntRange(min=0), default=1000,
        help="Ended jobs kept for `status` (the oldest is forgotten first).")
@option("fuxi_serve", "--zk-session-timeout", type=_POSITIVE, default=10.0,
        help="With --zk: the ZooKeeper session timeout (s), how long a frozen or cut-off leader keeps its term "
             "(and how long the next one waits for it).")
@click.option("--credentials", type=click.Path(dir_okay=False), default=None, envvar="MESOSLIKE_FUXI_CREDENTIALS",
              show_envvar=True, show_default="none",
              help="TOML file of principals and ACLs (docs/security.rst, the master's format): job clients must "
                   "authenticate with a listed key; a job is its submitter's (submit_jobs, kill_jobs ACLs). Needs "
                   "--key: the service serves with it too (its public .key is the clients' --fuxi-key).")
@option("fuxi_serve", "--insecure", is_flag=True, default=False, show_default="off",
        help="Serve jobs without --credentials on an address other than loopback (anyone who reaches it may submit "
             "and kill jobs); a warning is logged at every start.")
@client_key_options
@logging_option("fuxi_serve")
def serve(master_address, zk_url, ip, port, http_port, quota, name, role, work_dir, failover_timeout, keep_ended,
          zk_session_timeout, credentials, insecure, key, master_key) -> None:
    """Run the Fuxi scheduler: a framework on the master that schedules the
    jobs submitted to it on --port, with an AppMaster process per job (bound
    on --ip) and a worker task per granted slot. Prints the address job
    clients use. With --work-dir (or --zk) the jobs are kept: stopping it
    (Ctrl-C, SIGTERM) or losing it leaves the workers and AppMasters running
    for --failover-timeout, and the next service — this one restarted, or
    the next leader — takes them over. Without, stopping it ends the
    framework: its tasks are killed, its AppMasters stopped.

    With --credentials (and --key) job clients authenticate, as at the
    master; without, it serves anyone on loopback only (unless --insecure).
    Each job's AppMaster and workers get key pairs of their own."""
    from mesoslike import DriverStatus
    from mesoslike.credentials import load_credentials, load_keys
    from mesoslike.frameworks.fuxi.service import STANDBY_REFUSAL, JobServer

    if zk_url and not work_dir:
        die("--zk needs --work-dir: the jobs' AppMaster snapshots and logs go there (shared by the services)", 2)
    kept = bool(zk_url or work_dir)
    failover_timeout = failover_timeout if failover_timeout is not None else \
        DEFAULT_FAILOVER_TIMEOUT if kept else 0.0
    # stopping hands the jobs over only if something can take them in time
    hand_over = kept and failover_timeout > 0
    config = _quota(quota)
    try:
        serving_keys = load_keys(key) if credentials else None
        serving_credentials = load_credentials(credentials) if credentials else None
        server = JobServer(None, f"tcp://{ip}:{port}", refusing=STANDBY_REFUSAL, keys=serving_keys,
                           credentials=serving_credentials, insecure=insecure, work_dir=work_dir)
    except MesoslikeError as exc:
        die(str(exc))
    page = _status_page(ip, http_port, server) if http_port is not None else None
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    leadership = _Leadership(zk_url, server.address, name, stopping, zk_session_timeout, server.hold) \
        if zk_url else None
    driver = service = store = None
    try:
        if leadership is not None:
            server.start()
            click.echo(f"fuxi scheduler {name!r} standing by on {server.address}: one of the services in {zk_url}")
            if not leadership.wait_until_elected():
                return
            store = leadership.store()
        elif work_dir:
            store = _file_store(work_dir)
        state = _read(store) if store is not None else None
        service = _service(state, store, config, master_address, work_dir, ip, zk_url, failover_timeout,
                           keep_ended, serving_credentials, serving_keys.public if serving_keys else None)
        service.service_address = server.address   # for the AppMasters it adopts or starts
        # the kept framework id: the master hands this framework's tasks over to it
        driver = _driver(service, name, role, failover_timeout, master_address,
                         state.service.framework_id if state is not None and state.service is not None else "",
                         key, master_key, webui_url=f"{page.address}/" if page is not None else "")
        service.attach(driver)
        if state is not None:
            service.recover(state)
        server.serve(service)   # (after the jobs are back: a request held since the election asks of them)
        groups = ", ".join(f"{g.name} ({g.maximum or 'no maximum'})"
                           for g in sorted(service.core.scheduler.groups.values(), key=lambda g: g.name))
        click.echo(f"fuxi scheduler {name!r} serving jobs on {server.address}, framework in role {role} on "
                   f"{master_address}; quota groups: {groups}; "
                   f"{'job clients authenticated' if server.secured else 'job clients NOT authenticated'}")
        if leadership is None:
            server.start()
        driver.start()
        try:
            while not stopping.wait(0.5) and driver.status is DriverStatus.RUNNING:
                pass
        except KeyboardInterrupt:
            pass
    except KeyboardInterrupt:
        pass
    finally:
        if page is not None:
            page.stop()
        server.stop()
        if service is not None:
            service.stop(failover=hand_over)
        ended = driver.status if driver is not None else None
        if driver is not None:
            driver.stop(failover=hand_over)
            driver.join(10)
        if leadership is not None:
            leadership.stop()
        elif store is not None:
            store.close()
    if leadership is not None and leadership.lost:
        die(f"no longer the leading Fuxi scheduler ({leadership.lost}): exiting; the next leader takes the jobs "
            "over")
    if service is not None and ended is not None and ended is not DriverStatus.RUNNING:
        die(f"the scheduler driver ended ({ended.value}): {'; '.join(service.errors) or 'no error reported'}")


def _status_page(ip: str, port: int, server):
    """The service's read-only page (``--http-port``, docs/dashboard.rst):
    its files at ``/`` and ``/static/``, what ``fuxi status --json`` says at
    ``GET /status`` (a standby says it is one). Started; exit 1 if the port
    cannot be bound."""
    import mesoslike.frameworks.fuxi as fuxi_package
    from mesoslike.master.http import StatusHTTPServer, dashboard_files

    def status() -> tuple[str, bytes]:
        service = server.service   # None until this service leads
        document = service.status() if service is not None else {"serving": False, "why_not": server.refusing}
        return "application/json", json.dumps(document).encode()

    from mesoslike.metrics import CONTENT_TYPE, exposition, metrics_registry

    registry = metrics_registry(lambda: _fuxi_metrics(server))
    shared = dashboard_files()   # the master dashboard's script helpers, style and icon
    files = {path: shared[path] for path in ("/static/page.js", "/static/dashboard.css", "/static/favicon.svg")}
    files.update(dashboard_files(Path(fuxi_package.__file__).resolve().parent / "static"))
    try:
        page = StatusHTTPServer(ip, port, {"/status": status, "/metrics": lambda: (CONTENT_TYPE, exposition(registry))},
                                dashboard=files, workers=2, max_connections=16)
    except MesoslikeError as exc:
        server.stop()
        die(str(exc))
    page.start()
    click.echo(f"fuxi scheduler's page on {page.address}/")
    return page


def _fuxi_metrics(server) -> list:
    """The service's ``/metrics`` (docs/observability.rst): jobs, and slots by
    quota group — what ``GET /status`` says, as numbers."""
    from mesoslike.observations import metric

    service = server.service   # None until this service leads
    document = service.status() if service is not None else {"jobs": [], "quota_groups": []}
    slots: dict[str, dict[str, int]] = {group["name"]: {"desired": 0, "granted": 0, "waiting": 0, "reserved": 0}
                                        for group in document["quota_groups"]}
    units_waiting = 0
    for job in document["jobs"]:
        counts = slots.setdefault(job["quota_group"], {"desired": 0, "granted": 0, "waiting": 0, "reserved": 0})
        for unit in job["units"]:
            units_waiting += unit["waiting"] > 0
            for field in counts:
                counts[field] += unit[field]
    return [
        metric("fuxi_serving", "gauge", "1 while this Fuxi service leads and serves jobs.", int(service is not None)),
        metric("fuxi_jobs", "gauge", "Jobs the service keeps (running, and ended ones kept for status).",
               len(document["jobs"])),
        metric("fuxi_units_waiting", "gauge", "ScheduleUnits waiting for slots.", units_waiting),
        *(metric(f"fuxi_slots_{field}", "gauge", f"Slots {field} by the units of each quota group.",
                 [({"quota_group": group}, counts[field]) for group, counts in sorted(slots.items())])
          for field in ("desired", "granted", "waiting", "reserved")),
    ]


def _quota(path: str | None):
    """The quota file's configuration (exit 2 naming the field), None without one."""
    from mesoslike.frameworks.fuxi.quota import load_quota_file

    if not path:
        return None
    try:
        return load_quota_file(path)
    except MesoslikeError as exc:
        die(str(exc), 2)


def _file_store(work_dir: str):
    from mesoslike.frameworks.fuxi.state_store import FileRecordStore

    try:
        return FileRecordStore(Path(work_dir) / "state")
    except MesoslikeError as exc:
        die(str(exc))


def _read(store):
    """The hard state a store holds; exit 1 saying why it cannot be read."""
    from mesoslike.frameworks.fuxi import hard_state

    try:
        return hard_state.decode(store.load())
    except MesoslikeError as exc:
        die(f"cannot read the scheduler's kept state: {exc}")


def _service(state, store, config, master_address, work_dir, ip, zk_url, failover_timeout, keep_ended,
             credentials=None, service_key: bytes | None = None):
    """The service a leader runs: the quota from --quota, else the kept one, else the default."""
    from mesoslike import Resources
    from mesoslike.frameworks.fuxi.core import FuxiCore
    from mesoslike.frameworks.fuxi.quota import QuotaConfig
    from mesoslike.frameworks.fuxi.service import FuxiService

    kept = state.service if state is not None else None
    if config is None and kept is not None:
        config = QuotaConfig({group: Resources.parse(maximum) if maximum else None
                              for group, maximum in kept.quota.items()},
                             frozenset(kept.global_blacklist), kept.preemption, kept.policies,
                             kept.blacklist_reports, kept.blacklist_report_seconds)
    config = config or QuotaConfig()
    try:
        core = FuxiCore.from_config(config)
        return FuxiService(core, work_dir=work_dir, appmaster_ip=ip, store=store, appmaster_service=zk_url or "",
                           master=master_address, keep_ended=keep_ended, credentials=credentials,
                           service_key=service_key, orphan_timeout=failover_timeout if store is not None and failover_timeout > 0 else None)
    except MesoslikeError as exc:
        die(str(exc))


def _driver(service, name: str, role: str, failover_timeout: float, master_address: str, framework_id: str,
            key: str | None = None, master_key: str | None = None, webui_url: str = ""):
    """A driver for the framework, resuming ``framework_id`` (a failover) if there is one;
    ``webui_url``: the service's page, which the master's dashboard links (docs/dashboard.rst)."""
    from mesoslike import FrameworkInfo, SchedulerDriver

    try:
        return SchedulerDriver(service, FrameworkInfo(name=name, role=role, failover_timeout=failover_timeout,
                                                      id=framework_id, webui_url=webui_url), master_address, key=key,
                               master_key=master_key)
    except MesoslikeError as exc:
        die(str(exc))


class _Leadership:
    """One candidacy among the services of ``--zk``: waits to lead, says when
    leadership is lost (the service then exits, like a Mesos master: the
    next leader takes over from the kept state)."""

    def __init__(self, zk_url: str, address: str, name: str, stopping: threading.Event,
                 session_timeout: float, on_elected: Callable[[], None] = lambda: None) -> None:
        from mesoslike import MasterContender, ZkUrl

        self.url = zk_url
        self.lost = ""
        self._leaving = False
        self._elected = threading.Event()
        self._on_elected = on_elected
        self._stopping = stopping
        try:
            parsed = ZkUrl.parse(zk_url)
            self.path = parsed.path
            self.contender = MasterContender(parsed, {"address": address, "name": name, "id": str(uuid.uuid4()),
                                                      "hostname": socket.gethostname()},
                                             on_elected=self._elected_now, on_demoted=self._demoted,
                                             session_timeout=session_timeout, warn_unverified=False)
            self.contender.start()
        except MesoslikeError as exc:
            die(str(exc))

    def _elected_now(self) -> None:
        self._on_elected()   # (the job server holds requests until the jobs are loaded)
        self._elected.set()

    def _demoted(self, reason: str) -> None:
        if not self._leaving:   # not its own stop at the end
            self.lost = reason
            self._stopping.set()

    def wait_until_elected(self) -> bool:
        while not self._elected.wait(0.5):
            if self._stopping.is_set():
                return False
        click.echo(f"elected the leading Fuxi scheduler in {self.url}")
        return not self._stopping.is_set()

    def store(self):
        from mesoslike import ZooKeeperRecordStore

        # "registry": beside the election znodes, the one child of the group that is not a candidate
        return ZooKeeperRecordStore(self.contender.client, f"{self.path.rstrip('/')}/registry",
                                    self.contender.fence)

    def stop(self) -> None:
        self._leaving = True
        self.contender.stop()


# ----------------------------------------------------------------- submit
@fuxi.command()
@config_option("fuxi_submit")
@_fuxi_option()
@option("fuxi_submit", "--wait", is_flag=True, default=False, show_default="off",
        help="Show the job's progress until it ends; exit 0 only if it succeeded.")
@option("fuxi_submit", "--interval", type=_POSITIVE, default=0.5, help="Seconds between progress polls with --wait.")
@_timeout_option("fuxi_submit")
@_reattach_option("fuxi_submit")
@_fuxi_key_options
@logging_option("fuxi_submit")
@click.argument("job_file", metavar="JOB.toml", type=click.Path(dir_okay=False))
def submit(fuxi_address, wait, interval, timeout, reattach_timeout, key, fuxi_key, job_file) -> None:
    """Submit the job in JOB.toml (the job file of docs/fuxi.rst) and print its
    id. A job file that is not valid exits 2 and sends nothing."""
    from mesoslike.frameworks.fuxi.model import JobSpecError, check_runnable, parse_job, read_toml

    try:
        document = read_toml(job_file, "job file", JobSpecError)
        spec = parse_job(document)
        check_runnable(spec)
    except JobSpecError as exc:
        message = str(exc)
        die(message if str(job_file) in message else f"{job_file}: {message}", 2)
    try:
        with _job_client(fuxi_address, timeout, key, fuxi_key) as client:
            job_id = client.submit(document)
            click.echo(f"submitted {job_id} ({spec.name})")
            if wait:
                raise SystemExit(_follow(client, job_id, interval, reattach_timeout))
    except MesoslikeError as exc:
        die(str(exc))


def _follow(client, job_id: str, interval: float, reattach_timeout: float) -> int:
    """Show the job's progress until it ends; the exit status (0: it
    succeeded). A service that stops answering (a restart, a failover) is
    asked again until ``reattach_timeout`` s have passed without an answer."""
    from mesoslike.frameworks.fuxi.service import STANDBY_REFUSAL, JobRefused, NoAnswer

    bar = ProgressBar(sys.stdout.isatty())
    silent_since: float | None = None
    try:
        while True:
            try:
                job = client.status(job_id)["jobs"][0]
            except (NoAnswer, JobRefused) as exc:
                if isinstance(exc, JobRefused) and str(exc) != STANDBY_REFUSAL:
                    raise   # an unknown job (a restart that kept nothing), not authorized...
                now = time.monotonic()
                if silent_since is None:
                    silent_since = now
                    bar.close()
                    click.echo(f"{exc}; still following {job_id} (for up to {reattach_timeout:g}s without an "
                               "answer: a restart or a new leader takes the job over)", err=True)
                elif now - silent_since > reattach_timeout:
                    raise NoAnswer(f"no answer about {job_id} for {reattach_timeout:g}s (--reattach-timeout): "
                                   f"stopped following; `mesoslike fuxi status --wait {job_id}` follows it "
                                   "again") from None
                time.sleep(interval)
                continue
            if silent_since is not None:
                silent_since = None
                bar.forget()   # show the progress again after our message
                click.echo(f"following {job_id} again at {client.address}", err=True)
            if job["state"] != "running":
                break
            bar.show(progress_line(job))
            time.sleep(interval)
    except KeyboardInterrupt:
        bar.close()
        click.echo(f"stopped following {job_id}; it goes on (`mesoslike fuxi status --wait {job_id}`)", err=True)
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

    def forget(self) -> None:
        """The next line is shown even if unchanged (something else was printed since)."""
        self.last = ""


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
@config_option("fuxi_status")
@_fuxi_option()
@option("fuxi_status", "--json", "as_json", is_flag=True, default=False, show_default="off",
        help="Print the raw JSON document.")
@option("fuxi_status", "--wait", is_flag=True, default=False, show_default="off",
        help="With JOB: show its progress until it ends, as `submit --wait` (across a restart of the service or "
             "a new leader); exit 0 only if it succeeded.")
@option("fuxi_status", "--interval", type=_POSITIVE, default=0.5, help="Seconds between progress polls with --wait.")
@_timeout_option("fuxi_status")
@_reattach_option("fuxi_status")
@_fuxi_key_options
@logging_option("fuxi_status")
@click.argument("job", required=False)
def status(fuxi_address, as_json, wait, interval, timeout, reattach_timeout, key, fuxi_key, job) -> None:
    """Jobs (or JOB) with their units: desired and granted slots, the hosts
    of the slots, instances done/total, and why a unit waits. With --wait,
    follow JOB until it ends."""
    if wait and not job:
        die("--wait follows one job: give its id (`mesoslike fuxi status --wait JOB`)", 2)
    if wait and as_json:
        die("--wait shows progress, --json one document: give one of them", 2)
    try:
        with _job_client(fuxi_address, timeout, key, fuxi_key) as client:
            if wait:
                raise SystemExit(_follow(client, job, interval, reattach_timeout))
            document = client.status(job)
    except MesoslikeError as exc:
        die(str(exc))
    click.echo(json.dumps(document, indent=2) if as_json else format_status(document))


# ------------------------------------------------------------------- kill
@fuxi.command()
@config_option("fuxi_kill")
@_fuxi_option()
@_timeout_option("fuxi_kill")
@_fuxi_key_options
@logging_option("fuxi_kill")
@click.argument("job")
def kill(fuxi_address, timeout, key, fuxi_key, job) -> None:
    """End JOB: its workers and its AppMaster are killed and its state
    becomes killed (kept in the history of ended jobs). An unknown or
    already ended job exits 1, and so does another principal's job
    (unless the kill_jobs ACL allows: operators)."""
    try:
        with _job_client(fuxi_address, timeout, key, fuxi_key) as client:
            client.kill(job)
    except MesoslikeError as exc:
        die(str(exc))
    click.echo(f"killed {job}")


def _hosts(hosts: dict) -> str:
    return ",".join(f"{host}:{count}" for host, count in hosts.items()) or "-"


def format_status(document: dict) -> str:
    """The status document as text a person can read."""
    lines = []
    framework = document.get("framework") or {}
    if framework and not framework.get("registered", True):
        master = f" with {framework['master']}" if framework.get("master") else ""
        lines.append(f"framework not registered{master}: {framework.get('why_not') or 'no master'}")
    if not document["jobs"]:
        lines.append("no jobs")
    for job in document["jobs"]:
        counts = job["instances"]
        owner = f" (by {job['principal']})" if job.get("principal") else ""
        lines.append(f"{job['id']} {job['name']}{owner}: {job['state']}, quota group {job['quota_group']}, priority "
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
