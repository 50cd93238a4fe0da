"""``mesoslike master``, ``agent`` and ``local``: run the cluster's processes."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import click

from mesoslike.allocator import sorter_names
from mesoslike.cli.options import ConfigOption, client_key_options, config_option, die, logging_option, option
from mesoslike.errors import ConfigError, MesoslikeError
from mesoslike.ha.url import ZkUrl
from mesoslike.master.records import MasterConfig
from mesoslike.master.roles import RolesFileError, load_roles_file
from mesoslike.master.storage import FileRegistryStore
from mesoslike.resources import Resources, similar_kind

__all__ = ["master", "agent", "local"]

_POSITIVE = click.FloatRange(min=0, min_open=True)
_PORT = click.IntRange(0, 65535)
_COUNT = click.IntRange(min=1)
_DEFAULTS = MasterConfig()


def _load_roles(ctx: click.Context, param: click.Parameter, value: str | None):
    """``--roles FILE`` -> a RolesConfig, checked before anything binds."""
    if value is None:
        return None
    try:
        return load_roles_file(value)
    except RolesFileError as exc:
        raise click.BadParameter(str(exc), ctx, param_hint="'--roles'") from None


def _roles_option(command: str):
    # MESOSLIKE_<COMMAND>_ROLES as every option has, and MESOSLIKE_ROLES for both commands
    return click.option("--roles", cls=ConfigOption, type=click.Path(dir_okay=False), default=None, metavar="FILE",
                        callback=_load_roles, envvar=[f"MESOSLIKE_{command.upper()}_ROLES", "MESOSLIKE_ROLES"],
                        show_envvar=True, show_default="none",
                        help="TOML file of role weights, quota and fair-share preemption settings "
                             "(docs/roles.rst). Read again on SIGHUP and when it changes; a version that "
                             "does not parse is logged and the roles in force stay.")


def _reload_roles_on_sighup(runtime) -> None:
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda *_: runtime.reload_roles())


def _removal_rate(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--agent-removal-rate-limit, checked before anything binds."""
    from mesoslike.master.partitions import RemovalRateLimit

    if value is None:
        return None
    try:
        RemovalRateLimit.parse(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    return value


def _mesos_duration(ctx: click.Context, param: click.Parameter, value: object) -> float:
    """A duration in Mesos's units (20mins, 3hrs, 2weeks) or seconds."""
    from mesoslike.master.partitions import parse_mesos_duration

    if isinstance(value, (int, float)):
        return float(value)
    try:
        seconds = float(str(value))
    except ValueError:
        try:
            seconds = parse_mesos_duration(str(value))
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    if not seconds > 0:
        raise click.BadParameter(f"{value!r}: a duration > 0 is needed", ctx, param)
    return seconds


def _master_options(command: str):
    """Options shared by ``master`` and ``local``."""
    decorators = [
        option(command, "--ip", default="127.0.0.1", help="Address to bind (agents and frameworks connect here)."),
        option(command, "--port", type=_PORT, default=5050, help="Port for agents and frameworks (0 = any free)."),
        option(command, "--http-port", type=_PORT, default=5051, help="Port of /state, /health, /metrics (0 = any)."),
        option(command, "--allocation-interval", type=_POSITIVE, default=1.0,
               help="Seconds between batch allocation cycles."),
        option(command, "--offer-timeout", type=click.FloatRange(min=0), default=_DEFAULTS.offer_timeout,
               help="Seconds after which an unanswered offer is taken back and counts as declined for as "
                    "long again (0 = never)."),
        option(command, "--heartbeat-interval", type=_POSITIVE, default=15.0,
               help="Seconds between heartbeats to frameworks; 5 missed = disconnected."),
        option(command, "--ping-interval", type=_POSITIVE, default=15.0, help="Seconds between pings to agents."),
        option(command, "--max-agent-ping-timeouts", type=click.IntRange(min=1), default=5,
               help="Unanswered pings after which an agent is removed and its tasks are lost."),
        option(command, "--sorter", type=click.Choice(sorter_names()), default="drf",
               help="Order in which offers go to roles and frameworks."),
        option(command, "--min-allocatable", default="cpus:0.01|mem:32",
               help="Smallest offer worth making: alternatives separated by '|'."),
        option(command, "--agent-reregister-timeout", type=_POSITIVE, default=600.0,
               help="After a master failover or restart: seconds for known agents to re-register "
                    "before they are marked unreachable."),
        option(command, "--agent-removal-rate-limit", default=None, show_default="none: at once",
               callback=_removal_rate,
               help="Most agents failing health checks marked unreachable per duration, Mesos's format: "
                    "AGENTS/DURATION, e.g. 1/20mins, 2/3hrs (docs/reliability.rst, \"Partitions\")."),
        option(command, "--registry-max-agent-age", callback=_mesos_duration, default="2weeks",
               help="How long an unreachable agent stays in the registry (and may re-register); its "
                    "partition-aware tasks then end TASK_GONE (e.g. 2weeks, 3days, 12hrs)."),
        option(command, "--registry-max-agent-count", type=_COUNT, default=_DEFAULTS.registry_max_agent_count,
               help="Most unreachable agents the registry keeps; the oldest are forgotten first."),
        option(command, "--registry-gc-interval", callback=_mesos_duration, default="15mins",
               help="How often the registry forgets unreachable agents past --registry-max-agent-age/-count."),
        _roles_option(command),
        option(command, "--http-auth", type=click.Choice(["writes", "all"]), default="writes",
               help="With --credentials: which HTTP requests need 'Authorization: Bearer TOKEN' (a token of the "
                    "credentials file): operator writes only, or every request."),
        option(command, "--http-tls-cert", type=click.Path(dir_okay=False), default=None, show_default="none",
               help="PEM certificate (chain): serve HTTP over TLS (with --http-tls-key)."),
        option(command, "--http-tls-key", type=click.Path(dir_okay=False), default=None, show_default="none",
               help="PEM private key of --http-tls-cert (mode 0600)."),
        option(command, "--insecure", is_flag=True, default=False, show_default="off",
               help="Run without authentication on an address other than loopback (any peer that reaches it "
                    "may run tasks; warned at every start)."),
        option(command, "--max-frameworks-per-connection", type=_COUNT, default=_DEFAULTS.max_frameworks_per_connection,
               help="Frameworks one connection may hold (subscribed from it and not removed)."),
        option(command, "--max-agents-per-connection", type=_COUNT, default=_DEFAULTS.max_agents_per_connection,
               help="Agents one connection may hold (registered from it and not removed)."),
        option(command, "--max-frameworks-per-principal", type=_COUNT,
               default=_DEFAULTS.max_frameworks_per_principal,
               help="Frameworks one principal (an authenticated key) may hold over all its connections."),
        option(command, "--max-agents-per-principal", type=_COUNT, default=_DEFAULTS.max_agents_per_principal,
               help="Agents one principal (an authenticated key) may hold over all its connections."),
        option(command, "--max-failover-timeout", type=_POSITIVE, default=_DEFAULTS.max_failover_timeout,
               help="Seconds at most that a disconnected framework's tasks wait for it: a larger "
                    "failover_timeout is lowered to this."),
        option(command, "--max-message-size", callback=lambda ctx, param, value: _size(ctx, param, value),
               default="64MB",
               help="Bytes of data one framework message (scheduler <-> executor) or status update may carry; "
                    "more is refused, more than 1 MB logged. Give the agents the same (docs/reliability.rst)."),
        option(command, "--max-reconcile-tasks", type=_COUNT, default=_DEFAULTS.max_reconcile_tasks,
               help="Task ids one RECONCILE may name; a larger one gets an ERROR."),
        option(command, "--http-workers", type=_COUNT, default=_DEFAULTS.http_workers,
               help="Threads serving HTTP requests."),
        option(command, "--http-timeout", type=_POSITIVE, default=_DEFAULTS.http_timeout,
               help="Seconds an HTTP client has to send its request head (from connecting; on a kept-alive "
                    "connection, which may idle between requests, from the head's first byte), as long for its "
                    "body, and to take each 64 KiB of the answer."),
        option(command, "--http-max-connections", type=_COUNT, default=_DEFAULTS.http_max_connections,
               help="HTTP connections open at once: beyond it the one waiting longest for its request head is "
                    "closed to make room (503 only when none waits)."),
        option(command, "--max-completed-frameworks", type=click.IntRange(min=0),
               default=_DEFAULTS.max_completed_frameworks,
               help="Removed frameworks (with their ended tasks) /state keeps in completed_frameworks "
                    "(docs/operations.rst)."),
        option(command, "--max-completed-tasks-per-framework", type=click.IntRange(min=0),
               default=_DEFAULTS.completed_tasks_per_framework,
               help="Ended tasks /state keeps per framework, live or completed (docs/operations.rst)."),
    ]

    def apply(fn):
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn
    return apply


#: the options of _master_options that are MasterConfig fields under the same name
_CONFIG_OPTIONS = ("allocation_interval", "offer_timeout", "heartbeat_interval", "ping_interval",
                   "max_agent_ping_timeouts", "sorter", "min_allocatable", "agent_reregister_timeout",
                   "agent_removal_rate_limit", "registry_max_agent_age", "registry_max_agent_count",
                   "registry_gc_interval",
                   "max_frameworks_per_connection", "max_agents_per_connection", "max_frameworks_per_principal",
                   "max_agents_per_principal", "max_failover_timeout",
                   "max_reconcile_tasks", "http_workers", "http_timeout", "http_max_connections",
                   "max_completed_frameworks", "max_message_size")


def _master_config(options: dict) -> MasterConfig:
    """The MasterConfig of the command's options (taken out of ``options``)."""
    settings = {name: options.pop(name) for name in _CONFIG_OPTIONS}
    settings["completed_tasks_per_framework"] = options.pop("max_completed_tasks_per_framework")
    if not settings["offer_timeout"]:
        settings["offer_timeout"] = None  # 0: offers never expire
    return MasterConfig(**settings).validate()


def _tls(cert: str | None, key: str | None):
    """--http-tls-cert/--http-tls-key -> an ssl.SSLContext, or None."""
    if not cert and not key:
        return None
    if not (cert and key):
        raise ConfigError("--http-tls-cert and --http-tls-key go together")
    from mesoslike.master.http import tls_context

    return tls_context(cert, key)


def _stop_on_sigterm(stop) -> None:
    signal.signal(signal.SIGTERM, lambda *_: stop())


@click.command()
@config_option("master")
@_master_options("master")
@option("master", "--advertise-ip", default=None, show_default="--ip, or this host's address when --ip is 0.0.0.0",
        help="The address agents, frameworks and ZooKeeper are told to reach this master at (it binds --ip): "
             "a master bound to 0.0.0.0 never advertises 0.0.0.0.")
@option("master", "--zk", default=None, show_default="none",
        help="zk://HOST:PORT[,HOST:PORT...]/PATH: run highly available, elected through this ZooKeeper "
             "group, with the registry in ZooKeeper.")
@option("master", "--zk-auth", type=click.Path(dir_okay=False), default=None, show_default="none",
        help="File of one line USER:PASSWORD (mode 0600): authenticate to ZooKeeper with this digest and "
             "guard the group's znodes so that only masters may change them (others read).")
@option("master", "--zk-session-timeout", type=_POSITIVE, default=10.0,
        help="ZooKeeper session timeout (s): how long a frozen or cut-off leader keeps its term.")
@option("master", "--zk-session-guard/--no-zk-session-guard", default=True,
        help="With --zk: a guard process (in a session of its own) closes this master's ZooKeeper session as "
             "soon as the master's process dies (kill -9, a crash), so that a standby leads at once instead of "
             "after --zk-session-timeout. A frozen or cut-off master still keeps its term for the timeout.")
@option("master", "--standby-registry-mirror/--no-standby-registry-mirror", default=True,
        help="With --zk: while standing by, keep a copy of the registry current through ZooKeeper watches, "
             "so that taking over reads only the registry's znodes that changed since (costs the standby "
             "the registry's memory).")
@option("master", "--work-dir", type=click.Path(file_okay=False), default=None, show_default="none",
        help="Directory for the registry (hard state: admitted agents, frameworks, removals, weights); "
             "a master restarted on it recovers them. Without it (and without --zk) the registry lives in "
             "memory only; with --zk it lives in ZooKeeper.")
@click.option("--key", type=click.Path(dir_okay=False), default=None, envvar="MESOSLIKE_MASTER_SECRET_KEY",
              show_envvar=True, show_default="none",
              help="The master's secret certificate (NAME.key_secret, mode 0600); with --credentials.")
@option("master", "--credentials", type=click.Path(dir_okay=False), default=None, show_default="none",
        help="TOML file of principals (keys, kinds, tokens) and ACLs (docs/security.rst): every peer must "
             "authenticate with a listed key.")
@logging_option("master")
def master(ip, port, http_port, roles, advertise_ip, zk, zk_auth, zk_session_timeout, zk_session_guard,
           standby_registry_mirror, work_dir, key, credentials, insecure, http_auth, http_tls_cert, http_tls_key, **options) -> None:
    """Run a master. Prints the address it bound."""
    from mesoslike.credentials import load_credentials, load_keys
    from mesoslike.master.runtime import MasterRuntime
    from mesoslike.master.settings import MasterSettings

    try:
        config = _master_config(options)
        zk_url = ZkUrl.parse(zk) if zk else None
        if zk_auth:
            if zk_url is None:
                raise ConfigError("--zk-auth needs --zk")
            zk_url = zk_url.with_auth_file(zk_auth)
        store = FileRegistryStore(work_dir) if work_dir and zk_url is None else None
        settings = MasterSettings(
            address=f"tcp://{ip}:{port}", http_port=http_port, config=config, zk=zk_url,
            zk_session_timeout=zk_session_timeout, zk_session_guard=zk_session_guard,
            standby_mirror=standby_registry_mirror, roles=roles, keys=load_keys(key),
            credentials=load_credentials(credentials) if credentials else None, insecure=insecure,
            http_auth=http_auth, http_tls=_tls(http_tls_cert, http_tls_key), advertise_ip=advertise_ip)
        runtime = MasterRuntime(settings, registry_store=store)
    except MesoslikeError as exc:
        die(str(exc))
    mode = f"contending in {zk}" if zk else "leading"
    bound = f", bound to {runtime.bound_address}" if runtime.bound_address != runtime.address else ""
    click.echo(f"master {runtime.info.id} listening on {runtime.address} (HTTP {runtime.http_address}){bound}, {mode}")
    _stop_on_sigterm(runtime.stop)
    _reload_roles_on_sighup(runtime)
    try:
        runtime.run()
    except KeyboardInterrupt:
        pass


_SIZE_UNITS = {"": 1, "B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}


def _size(ctx: click.Context, param: click.Parameter, value: object) -> int:
    """A size in bytes: 1048576, 512KB, 100MB, 2GB (binary units)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip().upper().replace("IB", "B")
    number = text.rstrip("KMGTB")
    unit = text[len(number):]
    try:
        if unit not in _SIZE_UNITS or not number:
            raise ValueError(text)
        size = int(float(number) * _SIZE_UNITS[unit])
    except (ValueError, OverflowError):
        raise click.BadParameter(f"{value!r} is not a size (e.g. 1048576, 512KB, 100MB, 2GB)", ctx, param) from None
    if size < 0:
        raise click.BadParameter(f"{value!r}: a size is not negative", ctx, param)
    return size


def _duration(ctx: click.Context, param: click.Parameter, value: object) -> float:
    from mesoslike.agent.gc import parse_duration

    if isinstance(value, (int, float)):
        return float(value)
    try:
        return parse_duration(str(value))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a duration (e.g. 90s, 15m, 12h, 7d, 1w)", ctx, param) from None


def _environment_json(ctx: click.Context, param: click.Parameter, value: object) -> dict[str, str] | None:
    """--executor-environment-variables: a JSON object of strings (a TOML table from a config file)."""
    if value is None or isinstance(value, dict):
        document = value
    else:
        try:
            document = json.loads(str(value))
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", ctx, param) from None
    if document is not None and (not isinstance(document, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
            for k, v in document.items())):
        raise click.BadParameter('expected a JSON object of strings, e.g. {"PATH": "/usr/bin:/bin"}', ctx, param)
    return document


@click.group(invoke_without_command=True)  # its subcommands (drain, reactivate): mesoslike.cli.operations
@config_option("agent")
@option("agent", "--master", "master_address", default=None, show_default="required",
        also_envvar="MESOSLIKE_MASTER",  # as run's and state's; MESOSLIKE_AGENT_MASTER wins when both are set
        help="The master: tcp://HOST:PORT, or zk://HOST:PORT[,...]/PATH to follow the leader. From "
             "MESOSLIKE_AGENT_MASTER, else MESOSLIKE_MASTER (as `run` and `state` read it).")
@option("agent", "--resources", default=None, show_default="detected",
        help='What the agent offers, e.g. "cpus:4;mem:8192;disk:10240"; kinds left out are detected.')
@option("agent", "--attributes", default="", help='Typed attributes, as in Mesos: "rack:r1;level:3;ports:[1000-2000];tags:{a,b}" '
        '(a number is a scalar, [a-b,...] ranges, {a,...} a set, anything else text).')
@option("agent", "--hostname", default=None, show_default="this machine's name",
        help="Name of the agent (several agents on one machine need distinct names).")
@option("agent", "--port", type=_PORT, default=0, help="Port advertised in the agent's info (0 = none).")
@option("agent", "--work-dir", type=click.Path(file_okay=False), default=None,
        show_default="<tmp>/mesoslike-<uid>/agent-<hostname>",
        help="Directory for task sandboxes (<work-dir>/sandboxes) and the checkpoints a restarted agent "
             "recovers its tasks from (<work-dir>/meta). One agent per work dir.")
@option("agent", "--ip", default="127.0.0.1",
        help="Address the agent's HTTP endpoints bind (0.0.0.0: all; another than loopback needs --credentials, "
             "or --insecure).")
@option("agent", "--advertise-ip", default=None, show_default="--ip, or this host's address when --ip is 0.0.0.0",
        help="The address the agent tells the master its HTTP endpoints are at (it binds --ip): never 0.0.0.0.")
@option("agent", "--http-port", type=_PORT, default=0,
        help="Port of the agent's HTTP endpoints (/files, /state, /monitor/statistics; 0 = any free port). "
             "The agent tells the master, whose /state shows it.")
@option("agent", "--recover", type=click.Choice(["reconnect", "cleanup"]), default="reconnect",
        help="reconnect: recover the tasks an earlier agent on this work dir left running, and their "
             "unacknowledged updates; cleanup: kill them, forget them, and exit.")
@option("agent", "--recovery-timeout", callback=_duration, default="15m",
        help="How long a task's supervisor waits for a gone agent to come back before it kills the task.")
@option("agent", "--isolation", default="auto",
        help="Mesos's isolator names, comma-separated: cgroups/cpu, cgroups/mem (or posix/cpu, posix/mem: "
             "measured, not enforced), filesystem/linux (private /tmp and /proc, volumes), namespaces/pid, "
             "namespaces/ipc, namespaces/uts, network/none (only loopback), docker/runtime (tasks with an image, "
             "run by runc). auto: all but network/none, each the machine refuses dropped with a warning; an "
             "explicit list is all or nothing. cgroups: auto, cgroups required. posix: posix/cpu,posix/mem "
             "(no namespaces).")
@option("agent", "--allowed-host-paths", default="",
        help="Comma-separated directories whose contents tasks may mount as HOST_PATH volumes (below them only, "
             "symlinks resolved). Empty: every HOST_PATH volume is refused (TASK_FAILED).")
@option("agent", "--cgroups-root", default="mesoslike",
        help="Name of the cgroup the tasks' cgroups are made in (below the agent's own, for v1).")
@option("agent", "--cgroups-cpu-quota/--no-cgroups-cpu-quota", default=False,
        help="Cap each task's CPU time at its cpus (CFS quota) besides its proportional share.")
@option("agent", "--switch-user/--no-switch-user", default=None, show_default="on when the agent runs as root",
        help="Run each task as the unix user of its framework (or its own), which the master checked against "
             "the run_tasks ACL; a user this machine does not have fails the task. Needs root. Off: tasks run "
             "as the agent's user.")
@option("agent", "--shared-supervisor/--no-shared-supervisor", default=True,
        help="Run the tasks that need no process of their own (no namespaces, image, URIs or health check) under "
             "one long-lived supervisor per agent, with no Python process forked per task. Off: a supervisor "
             "process per task.")
# (the defaults below are agent.settings' TURN_GAP and AUTOGROUP_NICE, written out: importing the agent's
# modules would cost every command's start; tests/test_cli_rough_edges.py holds them equal)
@option("agent", "--turn-gap", type=click.FloatRange(0, 1), default=0.01, show_default=True,
        help="Seconds: after a loop turn that handled news, the next look at the sockets waits until this long "
             "after that turn began, so task ends arriving meanwhile share one journal sync and one STATUS_UPDATES "
             "frame (docs/agent.rst, Turns). Never while launches wait; 0: at once.")
@option("agent", "--autogroup-nice", type=click.IntRange(0, 19), default=10, show_default=True,
        help="The nice of the scheduler autogroups of the agent's session and its shared supervisor's (where "
             "kernel.sched_autogroup_enabled is 1): they serve the tasks and, at their weight, preempted them for "
             "every task's end (docs/agent.rst, CPU). 0: the kernel's.")
@option("agent", "--gc-delay", callback=_duration, default="1w",
        help="How long the sandbox of an ended task is kept (e.g. 1w, 2d, 12h, 30m).")
@option("agent", "--gc-disk-watermark", type=click.FloatRange(0, 1, min_open=True), default=0.9,
        help="Remove the oldest ended sandboxes sooner once the work dir's disk is this full (a fraction).")
@option("agent", "--drain-timeout", callback=_duration, default="30s",
        help="On SIGUSR1 (decommission): how long to wait for the killed tasks' updates to be acknowledged "
             "before unregistering anyway.")
@option("agent", "--drain", is_flag=True, default=False, show_default="off",
        help="Deprecated: `mesoslike agent decommission` (the agent of --work-dir kills its tasks, unregisters "
             "and exits). `mesoslike agent drain` is the master's drain, Mesos's DRAIN_AGENT.")
@option("agent", "--fetcher-cache-size", callback=_size, default="2GB",
        help="Bytes the fetcher's cache of URIs (<work-dir>/fetcher-cache, for URIs with cache=true) may hold; "
             "the least recently used files are evicted first. 0: nothing is cached.")
@option("agent", "--fetcher-timeout", callback=_duration, default="5m",
        help="How long the download of one URI of a task may take before the task fails.")
@option("agent", "--fetcher-max-size", callback=_size, default="1GB",
        help="The largest file a task may fetch, and the most an archive of it may unpack to.")
@option("agent", "--max-message-size", callback=_size, default="64MB",
        help="Bytes of data one framework message (either way) or status update of its executors may carry; more "
             "is refused, more than 1 MB logged. The master's --max-message-size (docs/reliability.rst).")
@option("agent", "--executor-reregistration-timeout", callback=_duration, default="10s",
        help="After a restart, how long a custom executor that outlived the previous agent has to reconnect "
             "before it is killed and its tasks end TASK_FAILED (REASON_EXECUTOR_REREGISTRATION_TIMEOUT).")
@option("agent", "--executor-registration-timeout", callback=_duration, default="1m",
        help="How long a custom executor's process has, once started, to register before it is killed and its "
             "tasks end TASK_FAILED (REASON_EXECUTOR_REGISTRATION_TIMEOUT).")
@option("agent", "--docker-registry", default="https://registry-1.docker.io",
        help="The registry of image names that name none (busybox, team/app:v1): host[:port] or "
             "http(s)://host[:port]. Plain http only for loopback registries and --docker-insecure-registries.")
@option("agent", "--docker-config", type=click.Path(dir_okay=False), default=None, show_default="none",
        help="Registry credentials: a Docker config.json (its \"auths\" table), mode 0600.")
@option("agent", "--docker-insecure-registries", default="", show_default="none",
        help="Comma-separated host[:port] of registries reached over plain http (loopback ones always are).")
@option("agent", "--image-cache-size", callback=_size, default="10GB",
        help="Bytes the unpacked image layers (<work-dir>/images) may take; the least recently used layers "
             "no running task uses are removed first.")
@option("agent", "--secrets-dir", type=click.Path(file_okay=False), default=None, show_default="none",
        help="Directory of the secrets tasks reference (Secret REFERENCE): <dir>/<principal>/<name>, a principal's "
             "tasks reaching only its own; owned by the agent's user, files mode 0600 or 0400 "
             "(docs/containers.rst, Secrets).")
@option("agent", "--shared-task-users", default="", show_default="none",
        help="Unix users (comma-separated; * for any) that tasks of different principals may share on this agent. "
             "Any other user runs the tasks of one principal at a time: a task of another principal as that user is "
             "refused (TASK_ERROR). Sharing lets them read each other's processes and files (docs/security.rst).")
@option("agent", "--credentials", "credentials_file", type=click.Path(dir_okay=False), default=None,
        show_default="none",
        help="The cluster's credentials file (the master's): every HTTP endpoint but /health then needs a "
             "principal's token (Authorization: Bearer TOKEN), and a framework's sandboxes are served only to the "
             "principals the access_sandboxes ACL allows (docs/agent.rst, Authorization).")
@option("agent", "--insecure", is_flag=True, default=False, show_default="off",
        help="Serve HTTP without --credentials on an address other than loopback (anyone who reaches it may read "
             "every sandbox); warned at every start.")
@option("agent", "--executor-environment-variables", callback=_environment_json, default=None, show_default="PATH only",
        help='The base environment of every task, a JSON object ({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}): '
             "tasks never get the agent's own environment (docs/framework-api.rst).")
@client_key_options
@logging_option("agent")
@click.pass_context
def agent(ctx: click.Context, master_address, resources, attributes, hostname, port, work_dir, ip, advertise_ip,
          http_port, recover,
          recovery_timeout, isolation, cgroups_root, cgroups_cpu_quota, switch_user, shared_supervisor, turn_gap, autogroup_nice, gc_delay,
          gc_disk_watermark, drain_timeout, drain, fetcher_cache_size, fetcher_timeout, fetcher_max_size, executor_reregistration_timeout,
          executor_registration_timeout, allowed_host_paths, docker_registry, docker_config,
          docker_insecure_registries, image_cache_size, secrets_dir, shared_task_users, credentials_file, insecure,
          executor_environment_variables, max_message_size, key, master_key) -> None:
    """Run an agent that runs the tasks its master sends it. With
    --master-key it talks to, and takes commands from, that master only.

    SIGTERM or Ctrl-C stops the agent and leaves its tasks running under
    their supervisors: an agent restarted on the same work dir recovers
    them. SIGUSR1 (`mesoslike agent decommission`) takes the machine out of
    the cluster: the tasks are killed (TASK_KILLED) and the agent
    unregisters and exits, so the master does not wait for it.

    `mesoslike agent drain` and `reactivate` ask the master to drain an
    agent from afar, Mesos's DRAIN_AGENT: no offers, its tasks killed after
    a grace, the agent kept, DRAINED (docs/operations.rst)."""
    if ctx.invoked_subcommand is not None:
        return
    from mesoslike.agent.runtime import AgentRuntime, default_work_dir
    from mesoslike.agent.settings import AgentSettings

    if drain:
        click.echo("warning: `mesoslike agent --drain` is deprecated: it is `mesoslike agent decommission` "
                   "(`mesoslike agent drain` is the master's drain)", err=True)
        _decommission(work_dir or default_work_dir(hostname or socket.gethostname()), drain_timeout)
        return
    if not master_address:
        raise click.UsageError("--master is required (or MESOSLIKE_AGENT_MASTER, or MESOSLIKE_MASTER)")
    _warn_of_near_misses(resources)
    try:
        from mesoslike.credentials import client_keys, load_credentials

        keys, server_key = client_keys(key, master_key)
        credentials = load_credentials(credentials_file) if credentials_file else None
        settings = AgentSettings(
            master=master_address, resources=resources, attributes=attributes, hostname=hostname, work_dir=work_dir,
            port=port, keys=keys, master_key=server_key, kill_tasks_on_exit=False, http_port=http_port, http_ip=ip,
            advertise_ip=advertise_ip, recover=recover, recovery_timeout=recovery_timeout, isolation=isolation,
            cgroups_root=cgroups_root, cgroups_cpu_quota=cgroups_cpu_quota, switch_user=switch_user,
            shared_supervisor=shared_supervisor, turn_gap=turn_gap, autogroup_nice=autogroup_nice, gc_delay=gc_delay, gc_disk_watermark=gc_disk_watermark, drain_timeout=drain_timeout,
            fetcher_cache_size=fetcher_cache_size, fetcher_timeout=fetcher_timeout, fetcher_max_size=fetcher_max_size,
            executor_reregistration_timeout=executor_reregistration_timeout,
            executor_registration_timeout=executor_registration_timeout,
            allowed_host_paths=tuple(path.strip() for path in allowed_host_paths.split(",") if path.strip()),
            docker_registry=docker_registry, docker_config=docker_config,
            docker_insecure_registries=tuple(name.strip() for name in docker_insecure_registries.split(",")
                                             if name.strip()),
            image_cache_size=image_cache_size, secrets_dir=secrets_dir, environment=executor_environment_variables,
            credentials=credentials, insecure=insecure, max_message_size=max_message_size,
            shared_task_users=[user.strip() for user in shared_task_users.split(",") if user.strip()])
        runtime = AgentRuntime(settings, on_serving=lambda address: click.echo(f"agent HTTP on {address}"))
    except MesoslikeError as exc:
        die(str(exc))
    click.echo(f"agent {runtime.info.hostname} with {runtime.info.resources} -> {master_address}; "
               f"sandboxes in {runtime.executor.sandbox_root}")
    click.echo(runtime.isolation.describe())
    for warning in runtime.isolation.warnings:
        click.echo(f"warning: --isolation {warning}", err=True)
    click.echo(runtime.describe_users())
    _stop_on_sigterm(lambda: threading.Thread(target=runtime.stop, daemon=True).start())
    signal.signal(signal.SIGUSR1, lambda *_: runtime.drain())
    try:
        runtime.run()
    except KeyboardInterrupt:
        pass
    except MesoslikeError as exc:  # e.g. ZooKeeper unreachable at start-up, another agent on the work dir
        die(str(exc))


def _warn_of_near_misses(resources: str | None) -> None:
    """Say which resource names of ``--resources`` look like a typo of one
    mesoslike knows (``cpu:4`` is offered as a custom resource named
    ``cpu``, and the cpus are detected): a warning, not an error, since
    custom resources are allowed. A string that does not parse is left to
    the agent to refuse."""
    try:
        parsed = Resources.parse(resources or "")
    except MesoslikeError:
        return
    for kind in sorted({*parsed.scalars(), *parsed.range_names()}):
        name = kind.partition("(")[0]
        near = similar_kind(name)
        if near is not None:
            click.echo(f"warning: --resources: {name!r} is not a resource mesoslike knows (did you mean {near}?); "
                       f"it is offered as a custom resource named {name!r}"
                       + (f", and {near} is detected" if near in ("cpus", "mem", "disk") else ""), err=True)


@click.command("decommission")
@option("agent", "--work-dir", type=click.Path(file_okay=False), default=None,
        show_default="<tmp>/mesoslike-<uid>/agent-<hostname>", help="The work dir of the agent to decommission.")
@option("agent", "--hostname", default=None, show_default="this machine's name",
        help="The agent's name (finds its default --work-dir).")
@option("agent", "--drain-timeout", callback=_duration, default="30s",
        help="How long the agent waits for its killed tasks' updates to be acknowledged before unregistering "
             "anyway (this command waits that long and 30 s more for it to exit).")
def decommission(work_dir: str | None, hostname: str | None, drain_timeout: float) -> None:
    """Take the agent running on this machine (on --work-dir) out of the
    cluster for good: it kills its tasks (TASK_KILLED), waits for their
    updates to be acknowledged, unregisters and exits; this command waits
    for it (SIGUSR1 to the agent does the same). To stop offering an agent
    and keep it, see `mesoslike agent drain` (the master's drain)."""
    from mesoslike.agent.runtime import default_work_dir

    _decommission(work_dir or default_work_dir(hostname or socket.gethostname()), drain_timeout)


def _decommission(work_dir: str, timeout: float) -> None:
    """SIGUSR1 to the agent of ``work_dir``, then wait for it to exit."""
    from mesoslike.agent.supervisor import process_start_ticks, read_json

    pid_file = os.path.join(work_dir, "meta", "agent.pid")
    try:
        record = read_json(pid_file)
        pid, ticks = record["pid"], record["start_ticks"]  # type: ignore[index]
    except (OSError, ValueError, KeyError, TypeError):
        die(f"no agent has run on {work_dir} ({pid_file} is missing or unreadable)")
    if not isinstance(pid, int) or process_start_ticks(pid) != ticks:
        die(f"the agent of {work_dir} (pid {pid}) is not running")
    os.kill(pid, signal.SIGUSR1)
    click.echo(f"decommissioning the agent of {work_dir} (pid {pid}): its tasks are killed, then it unregisters")
    deadline = time.monotonic() + timeout + 30.0
    while process_start_ticks(pid) == ticks:
        if time.monotonic() > deadline:
            die(f"the agent (pid {pid}) is still running {timeout + 30.0:g} s later")
        time.sleep(0.1)
    click.echo("decommissioned: the agent has unregistered and exited")


@click.command(context_settings={"allow_interspersed_args": False})
@config_option("local")
@option("local", "--agents", type=click.IntRange(min=1, max=256), default=3, help="How many agents to run.")
@option("local", "--resources", default="cpus:2;mem:2048;disk:4096;ports:[31000-32000]",
        help="Resources of each agent.")
@option("local", "--work-dir", type=click.Path(file_okay=False), default=None,
        show_default="a temporary dir, removed on exit", help="Directory for the agents' sandboxes (kept).")
@option("local", "--services", "with_services", is_flag=True, default=False, show_default="off",
        help="Also run the service scheduler (`mesoslike services serve`, docs/services.rst), its REST API and page "
             "on --services-port; COMMAND gets MESOSLIKE_SERVICES.")
@option("local", "--services-port", type=_PORT, default=8080, help="With --services: the port of its REST API.")
@_master_options("local")
@logging_option("local")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def local(agents, resources, work_dir, ip, port, http_port, roles, insecure, http_auth, http_tls_cert, http_tls_key,
          command, with_services, services_port, **options) -> None:
    """A master and N agents in one process, no ZooKeeper. Agents are named
    node-0 ... node-<N-1> and carry the attribute room:er<i mod 2>.

    The cluster is authenticated (docs/security.rst): keys and credentials
    are made under <work-dir>/keys/ (kept ones used again) and COMMAND gets
    MESOSLIKE_KEY, MESOSLIKE_MASTER_KEY and MESOSLIKE_TOKEN too, so clients
    need no flag; for Mesos's v1 API (pymesos), MESOS_MASTER (the HTTP
    host:port) and the client principal's credential, MESOS_EXAMPLE_PRINCIPAL
    and MESOS_EXAMPLE_SECRET. --insecure: an anonymous cluster instead.

    With a COMMAND (after --), run it with MESOSLIKE_MASTER set to the
    cluster's address, then stop the cluster and exit with its status.
    Without one, run until Ctrl-C. Stopping kills every task."""
    from mesoslike.agent.runtime import AgentRuntime
    from mesoslike.agent.settings import AgentSettings
    from mesoslike.credentials import local_keys
    from mesoslike.master.runtime import MasterRuntime
    from mesoslike.master.settings import MasterSettings

    base = work_dir or tempfile.mkdtemp(prefix="mesoslike-local-")
    try:
        Resources.parse(resources)
        _warn_of_near_misses(resources)
        config = _master_config(options)
        keys = None if insecure else local_keys(os.path.join(base, "keys"), agents, getpass.getuser())
        master_runtime = MasterRuntime(MasterSettings(
            address=f"tcp://{ip}:{port}", http_port=http_port, config=config, roles=roles, insecure=insecure,
            http_auth=http_auth, http_tls=_tls(http_tls_cert, http_tls_key), keys=keys.master if keys else None,
            credentials=keys.credentials if keys else None))
    except MesoslikeError as exc:
        if work_dir is None:
            shutil.rmtree(base, ignore_errors=True)
        die(str(exc))
    master_runtime.start()
    _reload_roles_on_sighup(master_runtime)
    agent_runtimes = []
    services = None
    try:
        for i in range(agents):
            agent_runtimes.append(AgentRuntime(AgentSettings(
                master=master_runtime.address, resources=resources, attributes={"room": f"er{i % 2}"},
                hostname=f"node-{i}", work_dir=os.path.join(base, f"node-{i}"), keys=keys.agents[i] if keys else None,
                master_key=keys.master.public if keys else None,
                credentials=keys.credentials if keys else None, max_message_size=config.max_message_size)).start())
        click.echo(f"local cluster: master {master_runtime.address} (HTTP {master_runtime.http_address}), "
                   f"{agents} agents with {resources}; sandboxes in {base}")
        if keys is not None:
            click.echo(f"authenticated: keys and credentials in {keys.directory} (client key {keys.client_secret}, "
                       f"master key {keys.master_public}, operator token in {keys.directory}/operator.token)")
        mesos_master = master_runtime.http_address.split("://", 1)[-1] if master_runtime.http_address else ""
        if mesos_master:
            click.echo(f"Mesos v1 API (pymesos): master {mesos_master}" + (
                f", principal 'client', its secret in {keys.directory}/client.token (Mesos's credential JSON: "
                f"{keys.mesos_credential})" if keys is not None else ", no credentials"))
        environment = keys.client_environment() if keys else {}
        if mesos_master:
            environment["MESOS_MASTER"] = mesos_master   # pymesos's master form: the HTTP host:port
        if with_services:
            services = _local_services(master_runtime.address, ip, services_port, base, keys)
            environment["MESOSLIKE_SERVICES"] = services.address
        status = _run_local(master_runtime, list(command), environment)
    finally:
        if services is not None:
            services.stop()
        for runtime in agent_runtimes:
            runtime.stop()
        master_runtime.stop()
        if work_dir is None:  # ours: the sandboxes go with the cluster (give --work-dir to keep them)
            shutil.rmtree(base, ignore_errors=True)
    raise SystemExit(status)


def _local_services(master: str, ip: str, port: int, base: str, keys):
    """``local --services``: the service scheduler beside the cluster, as the
    cluster's client principal, its API for the operator's token. The
    bundled frameworks' runner, found by name (:mod:`mesoslike.plugins`)."""
    from mesoslike import plugins

    try:
        make_runner = plugins.load(plugins.LOCAL, "services")
        runner = make_runner(master, ip=ip, http_port=port, work_dir=os.path.join(base, "services"),
                             credentials=keys.credentials if keys else None,
                             key=keys.client_secret if keys else None, master_key=keys.master_public if keys else None,
                             user=getpass.getuser())
        runner.start()
    except MesoslikeError as exc:
        die(f"cannot start the service scheduler: {exc}")
    click.echo(f"service scheduler: REST API and page on {runner.address}/ (`mesoslike app ...`, the marathon client)")
    return runner


def _run_local(master_runtime, command: list[str], environment: dict[str, str]) -> int:
    stopping = threading.Event()
    children: list[subprocess.Popen] = []

    def on_sigterm(*_) -> None:
        stopping.set()
        for started in children:   # (the COMMAND, once started: its end ends the wait below)
            started.terminate()
    signal.signal(signal.SIGTERM, on_sigterm)
    if not command:
        click.echo("Ctrl-C to stop")
        try:
            while not stopping.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        return 0
    env = dict(os.environ, MESOSLIKE_MASTER=master_runtime.address, **environment)
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:  # no such command, not executable: say so (the caller stops the cluster)
        click.echo(f"error: cannot run {command[0]!r}: {exc.strerror or exc}; stopping the cluster", err=True)
        # the shell's codes: 127 command not found, 126 found but not runnable
        return 127 if isinstance(exc, FileNotFoundError) else 126
    children.append(child)
    if stopping.is_set():   # SIGTERM came while it was started
        child.terminate()
    try:
        # one blocking wait, no timeout: SIGTERM's handler (above) runs in it and terminates the COMMAND, Ctrl-C
        # raises in it; a wait with a timeout polled ~30 times a second, each poll taking the interpreter's lock
        # from the master's and agents' threads (issue 29: they share this process)
        return child.wait()
    except KeyboardInterrupt:
        child.terminate()
        try:
            return child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            return child.wait()
