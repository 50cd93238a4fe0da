"""``mesoslike run``: a one-shot command framework (like ``mesos-execute``).

Besides the tasks' progress it shows where their output is: with
``--output`` each instance's stdout as it is written, prefixed by the
instance's number; at the end, the last lines of stderr of every failed
instance and where its sandbox is. Both come from the agents' ``/files``
endpoints, found through the master (:mod:`mesoslike.cli.task`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
import time

import click

from mesoslike import MesoslikeError, Resources
from mesoslike.cli.options import client_key_options, config_option, die, exit_when_done, logging_option, option

__all__ = ["run"]

_STREAM_LIMIT = 10  # stream every status change for up to this many instances
#: lines of stderr shown for each failed instance
STDERR_TAIL_LINES = 10
#: failed instances described at the end (the rest are counted)
FAILURES_SHOWN = 10
_TTY_PERIOD = 0.1   # seconds between two progress lines on a terminal
#: seconds a stop (Ctrl-C, SIGTERM, --timeout) waits for the killed tasks' TASK_KILLED before tearing down
KILL_WAIT = 10.0
#: without --timeout, how long a run waits for an agent big enough for its instances (s)
UNFIT_TIMEOUT = 60.0
#: how often the master is asked whether some agent is big enough, while none was offered (s)
UNFIT_CHECK_INTERVAL = 5.0
#: how soon, while not subscribed yet, the master is asked directly why (a refused handshake is said at once)
PROBE_AFTER = 3.0


class _Reporter:
    """Prints status changes (few instances) and a progress line (many)."""

    def __init__(self, instances: int, tty: bool) -> None:
        self.stream = instances <= _STREAM_LIMIT
        self.tty = tty
        self.last_line = ""
        self.last_print = 0.0
        self.blocked = ""

    def __call__(self, progress, status) -> None:
        if progress.blocked != self.blocked:   # why instances wait, once per reason (issue 18 §5)
            self.blocked = progress.blocked
            if progress.blocked:
                self._clear()
                click.echo(f"waiting: {progress.blocked}", err=True)
        if status is not None and self.stream:
            detail = f" ({status.message})" if status.message else ""
            self._clear()
            task = progress.tasks.get(status.task_id)
            where = (task.hostname if task is not None else "") or status.agent_id or "?"
            click.echo(f"{status.task_id} on {where}: {status.state}{detail}")
        # at most 10 progress lines a second on a terminal (unless it streams
        # each change), 1 otherwise: a 100k-task job must not spend its time
        # drawing (issue 14); the last line always
        now = time.monotonic()
        if not progress.done and now - self.last_print < (_TTY_PERIOD if self.tty else 1.0) and (
                not self.stream or not self.tty):
            return
        line = f"[{_bar(progress)}] {progress.summary()}"
        if line != self.last_line:
            self.last_line, self.last_print = line, now
            if self.tty:
                click.echo("\r" + line, nl=False)
            elif not self.stream or progress.done:
                click.echo(line)

    def _clear(self) -> None:
        if self.tty and self.last_line:
            click.echo("\r" + " " * len(self.last_line) + "\r", nl=False)
            self.last_line = ""

    def close(self) -> None:
        if self.tty and self.last_line:
            click.echo()


def _bar(progress, width: int = 20) -> str:
    """``#`` for the finished instances, ``x`` for the failed (or killed)
    ones, ``.`` for the rest: a job whose every instance failed is not a
    full bar of ``#``."""
    instances = max(progress.instances, 1)
    finished = progress.finished * width // instances
    ended = (progress.finished + progress.failed) * width // instances
    return "#" * finished + "x" * (ended - finished) + "." * (width - ended)


@click.command(context_settings={"allow_interspersed_args": False})
@config_option("run")
@option("", "--master", "master_address", required=True,
        help="The master: tcp://HOST:PORT, or zk://HOST:PORT[,...]/PATH to follow the leader.")
@option("run", "--cpus", type=click.FloatRange(min=0, min_open=True), default=0.1, help="CPUs per instance.")
@option("run", "--mem", type=click.FloatRange(min=0, min_open=True), default=32.0, help="Memory (MB) per instance.")
@option("run", "--instances", type=click.IntRange(min=1), default=1, help="How many instances of the command.")
@option("run", "--role", default="*", help="Role the framework runs in.")
@option("run", "--name", default="run", help="Framework and task name.")
@option("run", "--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
        show_default=f"none; {UNFIT_TIMEOUT:g}s while no agent can fit an instance",
        help="Give up (kill the tasks, exit 124) after this many seconds. Without it a run waits as long as its "
             "tasks take, but gives up after 60s while its instances are bigger than every agent.")
@option("run", "--connect-timeout", type=click.FloatRange(min=0, min_open=True), default=30.0,
        help="Give up (exit 1, saying why) if no master has taken the framework's subscription within this "
             "many seconds: it is down, the address is wrong, or it refuses our keys.")
@option("run", "--user", default=None, show_default="the current user with keys, else the agent's",
        help="The unix user the tasks run as (FrameworkInfo.user): a secured master checks it against its "
             "run_tasks ACL, an agent run as root switches to it.")
@option("run", "--env", "env", multiple=True, metavar="KEY=VALUE",
        help="An environment variable of every instance (repeatable); given to the tasks only, never shown in "
             "/state or logs.")
@option("run", "--constraint", "constraints", multiple=True, metavar="FIELD:OP[:VALUE]",
        help="Where instances may run, as in Marathon (repeatable): FIELD is hostname or an agent attribute, OP "
             "one of UNIQUE, CLUSTER[:VALUE], GROUP_BY[:N], LIKE:REGEX, UNLIKE:REGEX, MAX_PER:N; "
             "e.g. hostname:UNIQUE or rack:GROUP_BY:2.")
@option("run", "--uri", "uris", multiple=True, metavar="URI[,NAME=VALUE...]",
        help="A file:// or http(s):// URI the agent fetches into each instance's sandbox before it starts "
             "(repeatable, in order), with settings as in Marathon's fetch: extract=true|false (unpack a "
             ".tar(.gz/.bz2/.xz), .tgz or .zip; default true), executable=true|false, cache=true|false, "
             "output_file=NAME; e.g. 'http://repo/app.tgz,cache=true'. A comma of the URI itself is %2C.")
@option("run", "--label", "labels", multiple=True, metavar="KEY[=VALUE]",
        help="A label of each instance (repeatable): shown in /state and carried by its status updates.")
@option("run", "--health-cmd", "health_cmd", default=None, show_default="none", metavar="CMD",
        help="A COMMAND health check: CMD run by /bin/sh in the instance's sandbox, healthy when it exits 0.")
@option("run", "--health-http", "health_http", default=None, show_default="none", metavar="PORT[:PATH]",
        help="An HTTP health check: GET http://127.0.0.1:PORT/PATH answers 200-399 (PATH default /).")
@option("run", "--health-https", "health_https", default=None, show_default="none", metavar="PORT[:PATH]",
        help="The same over HTTPS (the certificate is not verified, as in Mesos).")
@option("run", "--health-tcp", "health_tcp", default=None, show_default="none", metavar="PORT",
        help="A TCP health check: 127.0.0.1:PORT accepts a connection.")
@option("run", "--health-delay", type=float, default=None, show_default="15",
        help="Seconds from an instance's start to its first health check.")
@option("run", "--health-interval", type=float, default=None, show_default="10",
        help="Seconds from the end of one health check to the next.")
@option("run", "--health-timeout", type=float, default=None, show_default="20",
        help="Seconds after which a health check that has not ended has failed.")
@option("run", "--health-grace-period", type=float, default=None, show_default="10",
        help="Seconds from the start in which failures do not count (until a check has passed).")
@option("run", "--health-consecutive-failures", type=int, default=None, show_default="3",
        help="Counted failures in a row that kill an instance (it ends TASK_FAILED).")
@option("run", "--image", default=None, show_default="none", metavar="NAME",
        help="Run each instance in this container image (a Docker/OCI reference, pulled by the agent: "
             "docs/containers.rst); without COMMAND the image's entrypoint and cmd run.")
@option("run", "--container-type", type=click.Choice(["MESOS", "DOCKER"], case_sensitive=False), default="MESOS",
        help="With --image: Mesos's ContainerInfo type (both run on the agent's runc; DOCKER as docker.image).")
@option("run", "--output", is_flag=True, default=False, show_default="off",
        help="Stream each instance's stdout as it is written, each line prefixed by the instance's number.")
@client_key_options
@logging_option("run")
@click.argument("command", nargs=-1, required=False, type=click.UNPROCESSED)
def run(master_address, cpus, mem, instances, role, name, timeout, connect_timeout, user, env, constraints, uris,
        labels, health_cmd, health_http, health_https, health_tcp, health_delay, health_interval, health_timeout,
        health_grace_period, health_consecutive_failures, image, container_type, output, key, master_key,
        command) -> None:
    """Run COMMAND (after --) as task instances on the cluster, show their
    progress, and exit 0 if all finished, else with a failed instance's exit
    code (1 if it had none). The last lines of each failed instance's stderr
    are shown, with where its sandbox is; ``mesoslike task log`` prints the rest."""
    from mesoslike import SchedulerDriver
    from mesoslike_frameworks.command import CommandScheduler, framework_info
    from mesoslike_frameworks.constraints import ConstraintError, parse_constraints

    try:
        placement = parse_constraints(constraints)
    except ConstraintError as exc:
        die(f"--constraint {exc}")
    from mesoslike_frameworks.task_options import TaskOptionError, health_check, parse_labels, parse_uris

    try:
        check = health_check(health_cmd, health_http, health_https, health_tcp, {
            "--health-delay": health_delay, "--health-interval": health_interval, "--health-timeout": health_timeout,
            "--health-grace-period": health_grace_period,
            "--health-consecutive-failures": health_consecutive_failures})
        fetched, task_labels = parse_uris(uris), parse_labels(labels)
    except TaskOptionError as exc:
        die(str(exc))
    if not command and not image:
        raise click.UsageError("Missing argument 'COMMAND...' (it may be left out only with --image)")
    shell_command = "" if not command else command[0] if len(command) == 1 else shlex.join(command)
    environment = _environment(env)
    reporter = _Reporter(instances, sys.stdout.isatty())
    try:
        # task ids unique per run (NAME-<6 hex>-<instance>): `task log ID` finds this run's, not an earlier one's;
        # os.urandom, as secrets.token_hex is, without the hashlib (OpenSSL) secrets imports: ~4 ms of the start
        scheduler = CommandScheduler(shell_command, Resources(cpus=cpus, mem=mem), instances, name, reporter,
                                     environment=environment, constraints=placement, health_check=check,
                                     uris=fetched, labels=task_labels, container=_container(image, container_type),
                                     task_prefix=f"{name}-{os.urandom(3).hex()}")
    except ValueError as exc:   # what a task cannot have, the flags each being fine (101 --uri, say)
        die(str(exc))
    try:
        driver = SchedulerDriver(scheduler, framework_info(name, role, user or ""), master_address, key=key,
                                 master_key=master_key)
    except MesoslikeError as exc:
        die(str(exc))
    agents = _Agents(master_address, key, master_key)
    follower = _OutputFollower(agents, scheduler) if output else None
    with _sigterm_as_interrupt() as signals:
        stopped, code = "", 0
        try:
            driver.start()
            if follower is not None:
                follower.start()
            waiting = _Waiting(scheduler, driver, agents, timeout, connect_timeout)
            stopped, code = waiting.wait()
        except KeyboardInterrupt:
            stopped, code = ("terminated (SIGTERM)", 143) if signals else ("interrupted (Ctrl-C)", 130)
        if stopped and not scheduler.framework_id:   # never subscribed: nothing to kill, only why to say
            driver.stop()
            driver.join(10)
            reporter.close()
            if follower is not None:
                follower.finish()
            die(stopped, code)
        if stopped:
            _stop(scheduler, driver, reporter, stopped)  # as Ctrl-C does, whatever stopped us
        if follower is not None:
            follower.finish()
    if stopped:
        raise SystemExit(code)
    if not scheduler.finished.is_set():  # the driver gave up (it said why through error())
        reporter.close()
        for message in scheduler.errors:
            click.echo(f"error: {message}", err=True)
        die(f"the scheduler driver ended ({driver.join(10).value}) before the tasks did")
    driver.join(10)
    reporter.close()
    for message in scheduler.errors:
        click.echo(f"error: {message}", err=True)
    _report_failures(master_address, agents, scheduler)
    click.echo(f"done: {scheduler.progress.summary()}")
    # all done: the driver has ended (the master confirmed the teardown), the output is written
    exit_when_done()
    raise SystemExit(scheduler.exit_code())


def _container(image: str | None, kind: str):
    """``--image`` and ``--container-type`` as the tasks' ``ContainerInfo`` (None without an image)."""
    from mesoslike import ContainerInfo, DockerInfo, Image

    if not image:
        return None
    try:
        if kind.upper() == "DOCKER":
            return ContainerInfo("DOCKER", docker=DockerInfo(image))
        return ContainerInfo(image=Image(image))
    except ValueError as exc:
        die(f"--image: {exc}")


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """While inside, SIGTERM stops ``run`` as Ctrl-C does (its tasks killed,
    its framework torn down) rather than ending the process with them left
    running; the list it yields gets the signal's number once it came."""
    received: list[int] = []

    def interrupt(signum, frame) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(scheduler, driver, reporter, why: str) -> None:
    """Kill the instances still running, wait (up to :data:`KILL_WAIT` s)
    for their end, tear the framework down, and say what happened."""
    from mesoslike import DriverStatus
    from mesoslike_frameworks.command import TERMINAL_STATES

    progress = scheduler.progress
    asked = scheduler.kill_all(driver) if driver.status is DriverStatus.RUNNING else []
    try:
        if asked:
            scheduler.all_ended.wait(KILL_WAIT)
    except KeyboardInterrupt:
        pass  # asked again: do not wait for the confirmations, the teardown kills what is left
    driver.stop()  # tears the framework down: the master kills whatever still runs
    driver.join(10)
    reporter.close()
    tasks = progress.tasks
    states = [tasks[task_id].state if task_id in tasks else "" for task_id in asked]
    killed = states.count("TASK_KILLED")
    parts = []
    if asked:
        parts.append(f"killed the {len(asked)} tasks still running" if killed == len(asked)
                     else f"killed {killed} of the {len(asked)} tasks still running")
    ended_otherwise = sum(1 for state in states if state != "TASK_KILLED" and state in TERMINAL_STATES)
    if ended_otherwise:
        parts.append(f"{ended_otherwise} ended otherwise meanwhile")
    unconfirmed = len(asked) - killed - ended_otherwise
    if unconfirmed:
        parts.append(f"{unconfirmed} not confirmed dead within {KILL_WAIT:g}s (the framework is torn down: "
                     "the master kills them)")
    never = progress.instances - progress.launched
    if never:
        parts.append(f"{never} never launched")
    click.echo(f"{why}: {'; '.join(parts) or 'no task was running'}. "
               f"{progress.finished}/{progress.instances} finished", err=True)


def _environment(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--env KEY=VALUE`` flags as a mapping (a later one wins)."""
    environment = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            die(f"--env {pair!r}: expected KEY=VALUE")
        environment[name] = value
    return environment


class _Agents:
    """agent id -> its HTTP address and sandbox root, asked of the master
    (with the run's keys) and the agent once per agent."""

    def __init__(self, master_address: str, key: str | None = None, master_key: str | None = None) -> None:
        self.master_address = master_address
        self.key, self.master_key = key, master_key
        self._known: dict[str, tuple[str, str]] = {}

    def state(self, timeout: float = 5.0) -> dict:
        """The master's state document (MesoslikeError if it cannot be had)."""
        from mesoslike.cli.state import fetch_state

        return fetch_state(self.master_address, timeout, self.key, self.master_key)

    def get(self, agent_id: str) -> tuple[str, str]:
        """(HTTP address, sandbox root); ("", "") when it cannot be told."""
        if agent_id not in self._known:
            try:
                for agent in self.state()["agents"]:
                    address = agent.get("http_address", "")
                    if address and agent["id"] not in self._known:
                        self._known[agent["id"]] = (address, _sandbox_root(address))
            except (MesoslikeError, KeyError, TypeError):
                pass
        return self._known.get(agent_id, ("", ""))


def _sandbox_root(http_address: str) -> str:
    from mesoslike.cli.task import get_json, agent_token

    try:
        return str(get_json(f"{http_address}/state", 5.0, agent_token()).get("sandbox_root", ""))
    except MesoslikeError:
        return ""


class _OutputFollower(threading.Thread):
    """``--output``: each instance's stdout, line by line, as ``[N] line``."""

    def __init__(self, agents: _Agents, scheduler) -> None:
        super().__init__(name="run-output", daemon=True)
        self.scheduler = scheduler
        self.agents = agents
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}
        self._done = threading.Event()
        self._refused = False   # said once: the agents refuse our token

    def run(self) -> None:
        while not self._done.wait(0.5):
            self._read_all()
        self._read_all()  # what they wrote last
        for task_id, rest in sorted(self.partial.items()):
            if rest:
                self._echo(task_id, rest)

    def finish(self) -> None:
        self._done.set()
        if self.ident is not None:  # started (a signal may come before it is)
            self.join(15)

    def _read_all(self) -> None:
        from mesoslike.cli.task import AccessRefused, agent_token, read_file, sandbox_file

        progress = self.scheduler.progress
        for task_id, agent_id in sorted(progress.agents.items()):
            address, _ = self.agents.get(agent_id)
            if not address or not self.scheduler.framework_id:
                continue
            path = sandbox_file(self.scheduler.framework_id, task_id, "stdout")
            try:
                while True:
                    data, self.offsets[task_id] = read_file(address, path, self.offsets.get(task_id, 0),
                                                            token=agent_token())
                    if not data:
                        break
                    self._lines(task_id, data)
            except AccessRefused as exc:
                if not self._refused:
                    self._refused = True
                    click.echo(f"error: cannot show the tasks' output: {exc} — an agent with credentials shows a "
                               "sandbox to its framework's principal's HTTP token or the operator's (give it as "
                               "MESOSLIKE_TOKEN; docs/security.rst)", err=True)
            except MesoslikeError:
                continue  # not started yet (no sandbox), or the agent is gone: the next round

    def _lines(self, task_id: str, data: bytes) -> None:
        *lines, rest = (self.partial.get(task_id, b"") + data).split(b"\n")
        self.partial[task_id] = rest
        for line in lines:
            self._echo(task_id, line)

    @staticmethod
    def _echo(task_id: str, line: bytes) -> None:
        from mesoslike_frameworks.command import instance_of

        number = instance_of(task_id)
        click.echo(f"[{number if number is not None else task_id}] {line.decode('utf-8', 'replace')}")


def _report_failures(master_address: str, agents: _Agents, scheduler) -> None:
    """For each failed instance: how it ended, its stderr's last lines, where its sandbox is."""
    progress = scheduler.progress
    failures = progress.failures()
    if not failures:
        return
    # only now: the agents' HTTP client (urllib, http.client, ssl) is ~10 ms of imports a run without failures
    # does not need, at its end
    from mesoslike.cli.task import agent_token, read_tail, sandbox_file

    for task_id in failures[:FAILURES_SHOWN]:
        task = progress.tasks[task_id]
        agent_id = task.agent_id
        click.echo(f"{task_id} {task.state}: {task.message or 'no message'}", err=True)
        address, root = agents.get(agent_id) if agent_id else ("", "")
        if not address or not scheduler.framework_id:
            continue
        try:
            tail = read_tail(address, sandbox_file(scheduler.framework_id, task_id, "stderr"), STDERR_TAIL_LINES,
                             token=agent_token())
        except MesoslikeError:
            tail = []
        if tail:
            click.echo("  last lines of its stderr:", err=True)
            for line in tail:
                click.echo(f"  | {line}", err=True)
        sandbox = f"{root}/{sandbox_file(scheduler.framework_id, task_id, '')}".rstrip("/") if root else "?"
        host = task.hostname
        on = f"{host} (agent {agent_id})" if host else f"agent {agent_id}"
        click.echo(f"  sandbox: {sandbox} on {on}; all of it: mesoslike task log {task_id} "
                   f"--framework {scheduler.framework_id} --master {master_address} [--stderr]", err=True)
    if len(failures) > FAILURES_SHOWN:
        click.echo(f"... and {len(failures) - FAILURES_SHOWN} more failed instances", err=True)


class _Waiting:
    """The wait for a run's end, and the three reasons to give up on it:
    ``--timeout`` ran out; no master took the subscription within
    ``--connect-timeout`` (or one refused our keys: said at once); its
    instances are bigger than every agent (checked against the agents'
    resources in the master's state, not only against the offers) for
    ``--timeout``, or :data:`UNFIT_TIMEOUT` without it."""

    def __init__(self, scheduler, driver, agents: _Agents, timeout: float | None, connect_timeout: float) -> None:
        self.scheduler, self.driver, self.agents = scheduler, driver, agents
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self.start = time.monotonic()
        self.deadline = float("inf") if timeout is None else self.start + timeout
        self.probed = False
        self.unfit_since: float | None = None
        self.next_unfit_check = 0.0
        self.unfit = ""

    def wait(self) -> tuple[str, int]:
        """("", 0) once every instance ended or the driver stopped on its
        own; else why to give up and the exit status."""
        from mesoslike import DriverStatus

        while not self.scheduler.finished.wait(max(0.0, min(0.5, self.deadline - time.monotonic()))):
            if self.driver.status is not DriverStatus.RUNNING:
                return "", 0
            now = time.monotonic()
            if now >= self.deadline:
                why = f": {self.unfit}" if self.unfit else ""
                return f"gave up after --timeout {self.timeout:g}s{why}", 124
            if not self.scheduler.framework_id:
                problem = self._unsubscribed(now)
                if problem:
                    return problem, 1
                continue
            if self._unfit(now) and self.timeout is None and now - (self.unfit_since or now) >= UNFIT_TIMEOUT:
                return f"gave up after {UNFIT_TIMEOUT:g}s: {self.unfit}", 124
        return "", 0

    def _unsubscribed(self, now: float) -> str:
        """Why there is no subscription yet, once it is worth saying."""
        from mesoslike.cli.state import NEEDS_KEYS

        waited = now - self.start
        if not self.probed and waited >= PROBE_AFTER:   # ask the master directly: a refusal is known at once
            self.probed = True
            try:
                self.agents.state(timeout=min(3.0, self.connect_timeout))
            except MesoslikeError as exc:
                if NEEDS_KEYS in str(exc) or "refused our key" in str(exc):
                    return str(exc)
        if waited < self.connect_timeout:
            return ""
        try:
            self.agents.state(timeout=3.0)
        except MesoslikeError as exc:
            return f"no master took the subscription within --connect-timeout {self.connect_timeout:g}s: {exc}"
        return (f"the master at {self.agents.master_address} answers, but did not take the framework's "
                f"subscription within --connect-timeout {self.connect_timeout:g}s")

    def _unfit(self, now: float) -> bool:
        """Whether the instances are bigger than every agent the master
        knows (asked every UNFIT_CHECK_INTERVAL while the offers say so);
        said once when it starts."""
        needed = self.scheduler.progress.too_big
        if not needed:
            self.unfit_since, self.unfit = None, ""
            return False
        if now < self.next_unfit_check:
            return self.unfit_since is not None
        self.next_unfit_check = now + UNFIT_CHECK_INTERVAL
        try:
            agents = self.agents.state()["agents"]
        except (MesoslikeError, KeyError, TypeError):
            return self.unfit_since is not None
        wanted = Resources.parse(needed)
        sizes = [Resources.parse(agent["resources"]).stripped() for agent in agents]
        if any(size.contains(wanted) for size in sizes):
            self.unfit_since, self.unfit = None, ""    # one is big enough: its room will come
            return False
        if self.unfit_since is None:
            largest = {kind: max((size.get(kind) for size in sizes), default=0.0) for kind in wanted.scalars()}
            self.unfit = (f"no agent can fit an instance: it needs {needed}, the largest agent has "
                          f"{';'.join(f'{kind}:{amount:g}' for kind, amount in largest.items())} "
                          f"({len(sizes)} agent(s))")
            self.unfit_since = now
            wait = f"--timeout {self.timeout:g}s" if self.timeout is not None else f"{UNFIT_TIMEOUT:g}s"
            click.echo(f"error: {self.unfit}; giving up after {wait} unless a bigger agent joins", err=True)
        return True
