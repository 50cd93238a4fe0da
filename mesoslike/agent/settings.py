"""What an agent process is told to be: :class:`AgentSettings`, the one
argument of :class:`~mesoslike.agent.runtime.AgentRuntime` besides what is
injected (a clock, a random source, a callback). The CLI builds it from
``mesoslike agent``'s flags and config file (docs/agent.rst); tests build it
with the defaults and the few fields they need.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable, Mapping

import attrs

from mesoslike.agent import gc
from mesoslike.agent.core import EXECUTOR_REGISTER_TIMEOUT, EXECUTOR_REREGISTER_TIMEOUT
from mesoslike.agent.executor import (DEFAULT_FETCHER_CACHE_SIZE, DEFAULT_FETCHER_MAX_SIZE, DEFAULT_FETCHER_TIMEOUT,
                                      DEFAULT_RECOVERY_TIMEOUT)
from mesoslike.agent.images import DEFAULT_CACHE_SIZE, DEFAULT_REGISTRY
from mesoslike.wire.types import MAX_FRAMEWORK_MESSAGE

if TYPE_CHECKING:
    from mesoslike.acl import Credentials
    from mesoslike.resources import Resources
    from mesoslike.transport import CurveKeys

__all__ = ["AgentSettings", "GC_INTERVAL", "DEFAULT_DRAIN_TIMEOUT"]

#: how often sandboxes are looked at for collection (s)
GC_INTERVAL = 60.0
#: how long a drain waits for the tasks' last updates to be acknowledged (s)
DEFAULT_DRAIN_TIMEOUT = 30.0
#: the least time from the start of a loop turn that handled news (a frame of the master, a task's end or
#: start the shared supervisor told) to the agent's next look at its sockets (s): what arrives meanwhile
#: shares one turn — one journal fsync, one STATUS_UPDATES frame, fewer turns of the master and the
#: framework downstream (docs/agent.rst, "Turns"; docs/performance.rst, "Stop 18: the agent's turns")
TURN_GAP = 0.01
#: the nice of the autogroup of the agent's session and of its shared supervisor's (Linux's autogroups:
#: where they are on, each session is one entity at the top of the scheduler; nice 10 weighs 110 against
#: 1024): they serve the tasks, and at the weight of the tasks' cgroups they preempted them for every
#: task's end (docs/agent.rst, "CPU")
AUTOGROUP_NICE = 10


@attrs.frozen(kw_only=True)
class AgentSettings:
    """An agent's settings; only ``master`` has no default.

    :ivar master: the master's address, ``tcp://HOST:PORT``, or ``zk://HOSTS/PATH`` to follow
        whichever master leads that ZooKeeper group (re-registering on a failover).
    :ivar resources: what the agent offers (a :class:`Resources` or a
        ``"cpus:4;mem:8192"`` string); kinds among cpus, mem, disk and ports
        it leaves out are detected (see :mod:`mesoslike.agent.resources_probe`); ``None``
        detects everything.
    :ivar attributes: e.g. ``{"rack": "r1", "room": "er1"}`` or the string
        ``"rack:r1;room:er1"``.
    :ivar hostname: the name the agent registers under (default: the
        machine's); several agents on one machine need distinct names.
    :ivar work_dir: sandboxes go to ``<work_dir>/sandboxes``, checkpoints to
        ``<work_dir>/meta``; created if missing. Default :func:`mesoslike.agent.runtime.default_work_dir`.
    :ivar port: reported in the agent's info.
    :ivar max_ping_timeouts: with the master's ping interval, how long a
        silent master is trusted (must match the master's setting to agree
        on who gave up first; default 5, as Mesos).
    :ivar register_backoff: first delay between registration attempts,
        doubling to ``register_backoff_max`` (both 10 s by default: every
        delay 5-10 s); each delay is drawn at random from its upper half, so
        agents do not retry in lockstep.
    :ivar kill_tasks_on_exit: kill every task (TASK_KILLED) when :meth:`AgentRuntime.run`
        ends; ``mesoslike local`` relies on it to leave no process behind.
        Off (``mesoslike agent``): the tasks run on under their supervisors,
        for the next agent on this work dir to recover.
    :ivar environment: the operator's base environment of the tasks
        (``--executor-environment-variables``; default: a ``PATH`` only) —
        never the agent's own (docs/framework-api.rst, "The task's environment").
    :ivar credentials: the cluster's credentials file (the master's,
        ``--credentials``): every HTTP endpoint but ``/health`` then needs a
        principal's token, and ``/files`` follows ``access_sandboxes``.
        Without, the endpoints bind loopback only unless ``insecure``.
    :ivar shared_task_users: unix users that tasks of different principals
        may share on this agent (``"*"``: any); no other user runs the tasks
        of two principals at once (docs/security.rst).
    :ivar secrets_dir: the directory of the secrets tasks reference
        (``--secrets-dir``; docs/containers.rst, "Secrets"): it must belong
        to the agent's user and be closed to others.
    :ivar http_port: port of the agent's HTTP endpoints (0: any free one;
        None: none). ``http_ip`` is the address it binds; ``advertise_ip`` the one
        it tells the master (default: ``http_ip``, or this host's address when
        that is a wildcard: :mod:`mesoslike.advertise`).
    :ivar recover: ``"reconnect"`` (recover an earlier agent's tasks) or
        ``"cleanup"`` (kill them, forget them, and return from :meth:`AgentRuntime.run`).
    :ivar recovery_timeout: how long a task's supervisor waits for a gone
        agent to come back before it kills the task (Mesos: 15 minutes).
    :ivar isolation: Mesos's isolator names, comma-separated, or ``"auto"``,
        ``"cgroups"``, ``"posix"`` (:func:`mesoslike.agent.isolation.select_isolation`,
        docs/containers.rst "Isolators").
    :ivar allowed_host_paths: directories whose contents ``HOST_PATH``
        volumes may mount (none: such volumes are refused); each absolute.
    :ivar cgroups_root: the cgroup the tasks' cgroups are made in.
    :ivar cgroups_cpu_quota: cap each task's CPU at ``cpus`` with a CFS quota
        (besides the shares it always gets).
    :ivar gc_delay: seconds an ended task's sandbox is kept (Mesos: a week).
    :ivar gc_disk_watermark: collect sooner once the work dir's file system
        is this full (a fraction).
    :ivar gc_interval: seconds between looks at the sandboxes.
    :ivar turn_gap: after a loop turn that handled news, the agent looks at
        its sockets again no sooner than this long after that turn began
        (:data:`TURN_GAP`; 0: at once). Never while launches wait, nor
        after an idle turn; a stop or drain ends the wait.
    :ivar autogroup_nice: the nice (0-19) of the autogroups of the agent's
        session and its shared supervisor's (:data:`AUTOGROUP_NICE`; 0:
        left at the kernel's 0). No effect where autogroups are off.
    :ivar drain_timeout: how long :meth:`AgentRuntime.drain` waits for the killed tasks'
        updates to be acknowledged before unregistering anyway.
    :ivar shared_supervisor: run the tasks that need no process of their
        own (no namespaces, image, URIs or health check) under one
        long-lived supervisor per agent, with no Python process forked per
        task (docs/agent.rst, "Supervisors"); off: a supervisor per task.
    :ivar switch_user: run each task as the unix user of its ``RUN_TASK``
        (``TaskInfo.user``, which the master resolved and checked against the
        ``run_tasks`` ACL); a user this machine does not have fails the task.
        Needs root. ``None`` (the default): on when the agent runs as root.
        Off, tasks run as the agent's user.
    :ivar fetcher_cache_size: bytes the fetcher's cache of URIs
        (``<work_dir>/fetcher-cache``) may hold; least recently used files
        go first (0: nothing is cached).
    :ivar fetcher_timeout: seconds one URI's download may take.
    :ivar fetcher_max_size: the largest file (and extracted archive) the
        fetcher accepts, in bytes.
    :ivar executor_reregistration_timeout: how long a custom executor that
        outlived the previous agent has to reconnect to this one before it
        is killed and its tasks fail (Mesos's ``--executor_reregistration_timeout``).
    :ivar executor_registration_timeout: how long a custom executor's
        process has, once started, to register before it is killed and its
        tasks fail (Mesos's ``--executor_registration_timeout``).
    :ivar docker_registry: the registry of image names that name none
        (``--docker-registry``: ``host[:port]`` or ``http(s)://host[:port]``).
    :ivar docker_config: a Docker ``config.json`` of registry credentials
        (``--docker-config``), mode 0600.
    :ivar docker_insecure_registries: registries reached over plain http
        (loopback ones always are).
    :ivar image_cache_size: bytes the unpacked image layers
        (``<work_dir>/images``, :attr:`AgentRuntime.images`) may take; least recently
        used layers no task uses go first.
    :ivar max_message_size: bytes of data a framework message or status
        update carries at most (``--max-message-size``, 1 KiB..1 GiB; Mesos's
        64 MiB by default; docs/reliability.rst "Message sizes"): it sizes the
        frames to the master, the executor channel and the v1 executor API's
        call bodies; more is refused where it enters.
    """

    master: str
    resources: Resources | str | None = None
    attributes: Mapping[str, str] | str | None = None
    hostname: str | None = None
    work_dir: str | os.PathLike | None = None
    port: int = 0
    max_ping_timeouts: int = 5
    register_backoff: float = 10.0
    register_backoff_max: float = 10.0
    kill_tasks_on_exit: bool = True
    environment: Mapping[str, str] | None = None
    http_port: int | None = 0
    http_ip: str = "127.0.0.1"
    advertise_ip: str | None = None
    recover: str = "reconnect"
    recovery_timeout: float = DEFAULT_RECOVERY_TIMEOUT
    isolation: str = "auto"
    cgroups_root: str = "mesoslike"
    cgroups_cpu_quota: bool = False
    gc_delay: float = gc.DEFAULT_GC_DELAY
    gc_disk_watermark: float = gc.DEFAULT_DISK_WATERMARK
    gc_interval: float = GC_INTERVAL
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    turn_gap: float = TURN_GAP
    autogroup_nice: int = AUTOGROUP_NICE
    keys: CurveKeys | None = None
    master_key: bytes | None = None
    switch_user: bool | None = None
    shared_supervisor: bool = True
    fetcher_cache_size: int = DEFAULT_FETCHER_CACHE_SIZE
    fetcher_timeout: float = DEFAULT_FETCHER_TIMEOUT
    fetcher_max_size: int = DEFAULT_FETCHER_MAX_SIZE
    executor_reregistration_timeout: float = EXECUTOR_REREGISTER_TIMEOUT
    executor_registration_timeout: float = EXECUTOR_REGISTER_TIMEOUT
    allowed_host_paths: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    docker_registry: str = DEFAULT_REGISTRY
    docker_config: str | None = None
    docker_insecure_registries: tuple[str, ...] = ()
    image_cache_size: int = DEFAULT_CACHE_SIZE
    secrets_dir: str | os.PathLike | None = None
    shared_task_users: Iterable[str] = ()
    credentials: Credentials | None = None
    insecure: bool = False
    max_message_size: int = MAX_FRAMEWORK_MESSAGE
