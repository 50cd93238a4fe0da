"""``mesoslike fuxi``: run the bundled Fuxi scheduler, submit jobs to it, see their status."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import NoReturn

import click

from mesoslike import MesoslikeError
from mesoslike.cli.options import client_key_options, config_option, die, logging_option, option
from mesoslike_frameworks.fuxi import DEFAULT_FAILOVER_TIMEOUT, flush_before_os_exit

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
    """A :class:`JobClient` with the keys of --key/--fuxi-key (or the environment); exit 1 saying what is wrong.
    Without a key given, nor any ``MESOSLIKE_*KEY*`` variable that could give one, the client is anonymous
    in the clear (what :func:`~mesoslike.credentials.client_keys` says then) without importing the
    credentials module (acl, secrets, hmac: 12 ms of CPU before a submission goes out)."""
    from mesoslike.transport import small_frames_only
    from mesoslike_frameworks.fuxi.client import JobClient

    # a short-lived client: glibc's default allocator threshold does, without the ctypes import and mallopt
    # of a long-lived process's first endpoint (~1.5-2 ms before a submission goes out; docs/performance.rst,
    # "Stop 15: the Fuxi path (fuxi29k)")
    small_frames_only()
    try:
        keys, server_key = None, None
        if key or fuxi_key or any(name.startswith("MESOSLIKE_") and "KEY" in name for name in os.environ):
            from mesoslike.credentials import FUXI_KEY_ENV, client_keys

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
    from mesoslike_frameworks.fuxi.runner import ZK_NEEDS_WORK_DIR, FuxiRunner

    if zk_url and not work_dir:
        die(ZK_NEEDS_WORK_DIR, 2)
    try:
        runner = FuxiRunner(master_address, zk=zk_url, ip=ip, port=port, http_port=http_port, quota=_quota(quota),
                            name=name, role=role, work_dir=work_dir, failover_timeout=failover_timeout,
                            keep_ended=keep_ended, zk_session_timeout=zk_session_timeout, credentials=credentials,
                            insecure=insecure, key=key, master_key=master_key, say=click.echo)
    except MesoslikeError as exc:
        die(str(exc))
    signal.signal(signal.SIGTERM, lambda *_: runner.stopping.set())
    try:
        runner.start()
        while not runner.stopping.wait(0.5) and runner.running():
            pass
    except KeyboardInterrupt:
        pass
    except MesoslikeError as exc:
        runner.stop()
        die(str(exc))
    ended = runner.ended()
    runner.stop()
    if runner.lost:
        die(f"no longer the leading Fuxi scheduler ({runner.lost}): exiting; the next leader takes the jobs over")
    if ended:
        die(ended)


def _quota(path: str | None):
    """The quota file's configuration (exit 2 naming the field), None without one."""
    from mesoslike_frameworks.fuxi.quota import load_quota_file

    if not path:
        return None
    try:
        return load_quota_file(path)
    except MesoslikeError as exc:
        die(str(exc), 2)


# ----------------------------------------------------------------- submit
@fuxi.command()
@config_option("fuxi_submit")
@_fuxi_option()
@option("fuxi_submit", "--wait", is_flag=True, default=False, show_default="off",
        help="Show the job's progress until it ends; exit 0 only if it succeeded.")
@option("fuxi_submit", "--interval", type=_POSITIVE, default=0.5,
        help="Seconds between progress updates with --wait; the job's end is seen at once (the service answers "
             "a long poll then; one of before long polls is polled, down to a fifth of this near the end).")
@_timeout_option("fuxi_submit")
@_reattach_option("fuxi_submit")
@_fuxi_key_options
@logging_option("fuxi_submit")
@click.argument("job_file", metavar="JOB.toml", type=click.Path(dir_okay=False))
def submit(fuxi_address, wait, interval, timeout, reattach_timeout, key, fuxi_key, job_file) -> None:
    """Submit the job in JOB.toml (the job file of docs/fuxi.rst) and print its
    id. A job file that is not valid exits 2 and sends nothing."""
    from mesoslike_frameworks.fuxi.model import JobSpecError, check_runnable, parse_job, read_toml

    try:
        document = read_toml(job_file, "job file", JobSpecError)
        spec = parse_job(document)
        check_runnable(spec)
    except JobSpecError as exc:
        message = str(exc)
        die(message if str(job_file) in message else f"{job_file}: {message}", 2)
    code: int | None = None
    try:
        with _job_client(fuxi_address, timeout, key, fuxi_key) as client:
            job_id = client.submit(document)
            click.echo(f"submitted {job_id} ({spec.name})")
            if wait:
                code = _follow(client, job_id, interval, reattach_timeout)
    except MesoslikeError as exc:
        die(str(exc))
    if code is not None:
        _leave(code)


def _leave(code: int) -> NoReturn:
    """The end of a ``--wait`` (the client closed): exit ``code``. When this
    process is the ``mesoslike`` command itself — not a caller's in-process
    ``main``, nor a test's runner — without the interpreter's teardown, as a
    Fuxi worker leaves: what the client imported (click, pyzmq, msgspec,
    the job model) took ~25 ms of CPU to tear down, ~0.1 s of wall at load
    ~50 between the job's end and the exit that ``--wait`` is timed by. Its
    output and log are flushed first; nothing is left to send (the client's
    socket closes without linger: the answers came)."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(main_spec, "name", None) == "mesoslike.__main__" or os.path.basename(sys.argv[0]) == "mesoslike":
        flush_before_os_exit()
        os._exit(code)
    raise SystemExit(code)


def next_poll(interval: float, seen: tuple[float, int] | None, now: float, done: int, total: int) -> float:
    """Seconds to the next progress poll of a job with ``done`` of
    ``total`` instances done ``now`` (``seen``: the poll before, when and
    how many were done then): ``interval``, or sooner — down to a fifth of
    it — when the rate since the poll before says the last instance ends
    sooner, or when every instance is done and only the job's end is still
    to come: the end is seen about a fifth of an interval after it, not up
    to a whole one (a ``--wait`` for a job of short instances waited
    ~interval/2 on average past its end)."""
    shortest = interval / 5
    if done >= total > 0:
        return shortest
    if seen is None or done <= seen[1] or now <= seen[0]:
        return interval
    rate = (done - seen[1]) / (now - seen[0])
    return min(interval, max(shortest, (total - done) / rate))


def _follow(client, job_id: str, interval: float, reattach_timeout: float) -> int:
    """Show the job's progress until it ends; the exit status (0: it
    succeeded). A service that stops answering (a restart, a failover) is
    asked again until ``reattach_timeout`` s have passed without an answer."""
    from mesoslike_frameworks.fuxi.client import JobRefused, NoAnswer
    from mesoslike_frameworks.fuxi.client_wire import STANDBY_REFUSAL

    bar = ProgressBar(sys.stdout.isatty())
    silent_since: float | None = None
    seen: tuple[float, int] | None = None   # when the last answer came, and the instances done then
    wait = 0.0   # the next request's: the service answers at the job's end, or after this long
    try:
        while True:
            asked = time.monotonic()
            try:
                job = client.status(job_id, wait=wait)["jobs"][0]
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
            now, done = time.monotonic(), int(job["instances"]["done"])
            if now - asked < wait * 0.9:
                # answered before its wait with the job still running: a service of before long polls,
                # or one with too many waiting, answers at once — then poll, as before
                time.sleep(next_poll(interval, seen, now, done, int(job["instances"]["total"])))
            wait = interval   # a long poll: the service answers at the job's end, progress every interval
            seen = (now, done)
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
@option("fuxi_status", "--interval", type=_POSITIVE, default=0.5,
        help="Seconds between progress updates with --wait; the job's end is seen at once (the service answers "
             "a long poll then; one of before long polls is polled, down to a fifth of this near the end).")
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
    code: int | None = None
    try:
        with _job_client(fuxi_address, timeout, key, fuxi_key) as client:
            if wait:
                code = _follow(client, job, interval, reattach_timeout)
            else:
                document = client.status(job)
    except MesoslikeError as exc:
        die(str(exc))
    if code is not None:
        _leave(code)
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
    from mesoslike.cli.state import table   # here: a submission does not print tables (its import: urllib, http)

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
        lines += ["  " + row for row in table(rows, ["unit", "slot", "desired", "granted", "hosts", "instances",
                                                       "running", "failed", "backups", "waiting for"])]
    lines += ["", "quota groups"]
    lines += ["  " + row for row in table([[g["name"], g["maximum"] or "none", g["used"] or "-", g["waiting"] or "-"]
                                            for g in document["quota_groups"]],
                                           ["group", "maximum", "used", "waiting"])]
    if document.get("global_blacklist"):
        lines.append(f"global blacklist: {', '.join(document['global_blacklist'])}")
    return "\n".join(lines)
