"""Isolation: the agent's ``--isolation`` (Mesos's isolator names, parsed
and probed by :func:`select_isolation`), and each task's ``cpus`` and
``mem`` enforced with cgroups, and its usage measured.

``--isolation`` takes Mesos's isolator names, comma-separated
(docs/containers.rst, "Isolators"): ``cgroups/cpu``, ``cgroups/mem`` (or
``posix/cpu``, ``posix/mem``: measured only), ``filesystem/linux`` (a mount
namespace: private ``/tmp``, ``/proc`` of its own, volumes, image root
filesystems), ``namespaces/pid``, ``namespaces/ipc``, ``namespaces/uts``,
``network/none`` (a network namespace with only loopback) and
``docker/runtime`` (tasks with a container image, run by ``runc``). The
default, :data:`DEFAULT_ISOLATION`, is all of them but ``network/none``;
where the machine refuses one (no cgroups, no privilege for a namespace, no
``runc``) the agent says so at start and goes on without it. A list given
explicitly is all or nothing: the agent refuses to start, saying which
isolator the machine refuses and why. The values of earlier versions stay:
``auto`` is the default, ``cgroups`` the default with cgroups required,
``posix`` is ``posix/cpu,posix/mem`` (no namespaces either: the opt-out).

The namespaces themselves are made by the supervisor and its launcher
(:mod:`.namespaces`); what follows here is the resource part. Three
isolators of resources, chosen by the ``cgroups/*`` or ``posix/*`` names
(cgroups v2 where it works, else v1, else — by default only — posix):

==============  ==============================================================
``cgroups-v2``  the unified hierarchy, where it is mounted with the ``memory``
                and ``cpu`` controllers and they can be enabled below it:
                ``memory.max``, ``cpu.weight`` (and ``cpu.max`` with
                ``cpu_quota``), ``memory.events``' ``oom_kill`` for
                out-of-memory kills. A task's cgroup is
                ``<mount>/<root>/<name>`` (v2 forbids processes in a cgroup
                that has controlled children, so not below the agent's own).
``cgroups-v1``  the ``memory`` and ``cpu`` hierarchies (plus ``cpuacct``
                when mounted, for usage; the processes are tracked in ``memory``):
                ``memory.limit_in_bytes``, ``cpu.shares`` (and
                ``cpu.cfs_quota_us`` with ``cpu_quota``), ``memory.oom_control``'s
                ``oom_kill``. A task's cgroup is ``<agent's own cgroup>/<root>/<name>``
                in each hierarchy, so the tasks stay inside whatever the agent
                was started in.
``posix``       no limits: usage is measured from ``/proc`` (the processes of
                the task's session) and nothing is enforced.
==============  ==============================================================

With only one of ``cgroups/cpu`` and ``cgroups/mem`` the task still gets its
cgroups (for accounting), but only that resource's limit is written.

CPU: a task gets ``cpu.shares`` of 1024 per cpu (``cpu.weight`` in v2), a
proportional share that only binds when the machine is busy, as Mesos does by
default; ``cpu_quota`` adds the hard cap (CFS quota of ``cpus`` x 100 ms per
100 ms), Mesos's ``--cgroups_enable_cfs``. Memory: the limit is ``mem`` MB;
above it the kernel's OOM killer ends a process of the task, which the agent
reports as ``REASON_CONTAINER_LIMITATION_MEMORY``.

The isolator decides names and files; the supervisor (:mod:`.supervisor`)
places the task in its cgroups before ``exec`` and removes them when the
task ends, reading the OOM counters first (:meth:`Isolator.launch_spec` is
what it is told).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from pathlib import Path
from typing import Iterator

import attrs
import msgspec

from mesoslike.agent.supervisor import cgroup_pids as _cgroup_pids
from mesoslike.agent.supervisor import flat_keyed as _flat_keyed
from mesoslike.agent.supervisor import kill_cgroups, process_start_ticks, read_int, remove_cgroup
from mesoslike.errors import ConfigError
from mesoslike.resources import Resources
from mesoslike.wire.messages import TaskUsage

__all__ = ["ISOLATION_MODES", "ISOLATORS", "DEFAULT_ISOLATION", "LEGACY_ISOLATION", "NAMESPACE_OF", "Isolation",
           "parse_isolation", "select_isolation", "find_runc_binary",
           "Container", "Isolator", "CgroupsV1Isolator", "CgroupsV2Isolator",
           "PosixIsolator", "select_isolator", "agent_key", "CgroupMount", "cgroup_mounts"]

log = logging.getLogger("mesoslike.agent")

ISOLATION_MODES = ("auto", "cgroups", "posix")
CFS_PERIOD_US = 100_000
MIN_CFS_QUOTA_US = 1000
CPU_SHARES_PER_CPU = 1024
MIN_CPU_SHARES = 2
#: cgroup v1's most ``cpu.shares``
MAX_CPU_SHARES = 262_144
MB = 1024 * 1024
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: the name of a spare or a pooled cgroup that tells the process that made or holds it, so that another
#: agent can tell one whose process is gone (:meth:`_Cgroups.sweep`): a spare's,
#: ``<key>.spare.<pid>-<start>-<random>`` (its maker's pid and start time, clock ticks since boot), and a
#: pooled cgroup's, ``<key>.pooled.<pid>-<start>-<pid namespace>-<random>`` (the agent process that holds it
#: in its pool; its pid namespace, the inode of ``/proc/<pid>/ns/pid``: a pid is looked up only in the
#: namespace it was read in). Groups: the kind, the pid, the start time, the pid namespace (a pooled
#: cgroup's). Older pooled names (random only, or a spare's tail kept) tell no holder. One match a name, as
#: a base shared by many agents holds thousands
_TOLD_NAME = re.compile(r"[^.]+\.(spare|pooled)\.([0-9]{1,10})-([0-9]{1,20})(?:-([0-9]{1,20}))?-[0-9a-f]{12}")
#: how many spares and pooled cgroups of gone agents (each in every hierarchy) one sweep removes at most:
#: a killed agent leaves up to :attr:`CgroupsV1Isolator.spare_size` spares and
#: :attr:`CgroupsV1Isolator.pool_size` pooled ones; a bound keeps an agent's start short on a base that
#: holds thousands (the rest go at later agents' starts)
ORPHANS_A_SWEEP = 256


@attrs.frozen
class Container:
    """Where one task's processes are confined and measured: its cgroup
    directory per controller (none for ``posix``) and its limits (0 = none)."""

    kind: str
    cgroups: dict[str, str] = attrs.field(factory=dict)
    cpus: float = 0.0
    mem_bytes: int = 0
    #: its cgroups come from, and go back to, the isolator's pool (:meth:`Isolator.give_back`)
    pooled: bool = False
    #: the cumulative counters its cgroups had when it got them (a pooled cgroup's earlier tasks'):
    #: cpu user and system seconds, throttled periods, throttled seconds; usage is counted from them
    base: tuple[float, float, int, float] = (0.0, 0.0, 0, 0.0)

    def to_json(self) -> dict:
        return {"kind": self.kind, "cgroups": dict(self.cgroups), "cpus": self.cpus, "mem_bytes": self.mem_bytes,
                "pooled": self.pooled, "base": list(self.base)}

    @classmethod
    def from_json(cls, value: object) -> Container:
        """The container ``to_json`` described; ValueError if it is not one."""
        if not isinstance(value, dict):
            raise ValueError("a container is a JSON object")
        kind, cgroups, cpus, mem = value.get("kind"), value.get("cgroups"), value.get("cpus"), value.get("mem_bytes")
        pooled, base = value.get("pooled", False), value.get("base", [0.0, 0.0, 0, 0.0])
        if not isinstance(kind, str) or not isinstance(cgroups, dict) or not isinstance(cpus, (int, float)) \
                or not isinstance(mem, int) or not all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in cgroups.items()) \
                or not isinstance(pooled, bool) or not isinstance(base, list) or len(base) != 4 \
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in base):
            raise ValueError(f"not a container: {value!r}")
        return cls(kind, dict(cgroups), float(cpus), mem, pooled,
                   (float(base[0]), float(base[1]), int(base[2]), float(base[3])))

    @property
    def directories(self) -> list[str]:
        """Every cgroup directory, each once (co-mounted controllers share one)."""
        return list(dict.fromkeys(self.cgroups.values()))


def agent_key(hostname: str, work_dir: str | os.PathLike) -> str:
    """A name for this agent's cgroups, distinct per work directory: agents of
    the same name in other work directories (other users, other test runs)
    never share one."""
    digest = hashlib.sha256(str(Path(work_dir).resolve()).encode()).hexdigest()[:8]
    plain = "".join(c if c.isalnum() or c in "-_" else "_" for c in hostname)[:40]
    return f"{plain}-{digest}"


def _spare_maker() -> str:
    """This process, as a spare's name carries it: ``<pid>-<start time>``."""
    pid = os.getpid()
    return f"{pid}-{process_start_ticks(pid) or 0}"


def _pid_namespace() -> str:
    """This process's pid namespace (its inode), or '' if it cannot be read."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def _this_holder() -> str:
    """This process, as a pooled cgroup's name carries it (:data:`_TOLD_NAME`):
    ``<pid>-<start time>-<pid namespace>``; '' when one of them cannot be
    read — its pooled cgroups are then named as before (random only), which
    no other agent removes."""
    pid = os.getpid()
    start, namespace = process_start_ticks(pid), _pid_namespace()
    return f"{pid}-{start}-{namespace}" if start and namespace else ""


class Isolator:
    """The interface, and the ``posix`` behaviour: nothing enforced."""

    name = "posix"
    enforcing = False
    #: the resources whose limit is enforced: "cpu", "mem" (none for posix)
    limits: frozenset[str] = frozenset()
    #: how many emptied containers :meth:`create` with ``pooled`` keeps for later tasks (0: none; a pooled
    #: one is named for no task: only the part of ``name`` before its first dot is used)
    pool_size = 0

    def describe(self) -> str:
        """The startup line: which isolation is active, and where."""
        return "isolation: posix (usage measured from /proc; cpus and mem are NOT enforced)"

    def create(self, name: str, resources: Resources, pooled: bool = False) -> Container:
        """Make the container of a task named ``name`` with the limits of
        ``resources``; ``pooled``: one from the pool if it has one, which
        goes back to it when its task ended cleanly (:meth:`give_back`).
        Raises OSError when its cgroups cannot be made."""
        return Container(self.name, {}, _cpus(resources), _mem_bytes(resources))

    def give_back(self, container: Container) -> None:
        """A pooled container whose task has ended, emptied, with no OOM kill
        (its supervisor kept its cgroups: ``exit.json``'s ``cgroups_kept``):
        into the pool, or removed if the pool is full."""
        self.destroy(container)

    def make_spares(self, prefix: str, count: int) -> int:
        """Make up to ``count`` spares — empty pooled containers no task
        used yet, named ``<prefix>.spare.<maker>-<random>`` — ahead of a burst of
        launches (none here). Returns how many were made."""
        return 0

    def spares_short(self) -> bool:
        """Whether :meth:`make_spares` would make any."""
        return False

    def update(self, container: Container, resources: Resources) -> Container:
        """The container with the limits of ``resources`` (Mesos's
        containerizer ``update``: a custom executor's container grows and
        shrinks with its tasks). Raises OSError when a limit cannot be set
        (a memory limit below what the container uses now)."""
        return attrs.evolve(container, cpus=_cpus(resources), mem_bytes=_mem_bytes(resources))

    def launch_spec(self, container: Container) -> dict:
        """What the supervisor needs: the cgroup directories to enter (and
        to empty and remove at the end), the OOM counters, the peak file."""
        return {"cgroups": [], "oom_events": [], "memory_peak": ""}

    def usage(self, container: Container, pgid: int | None) -> TaskUsage:
        """The task's usage now, with its container's limits (ids left empty);
        ``pgid`` is its session and process group."""
        return _limited(_session_usage(pgid), container, self.enforcing)

    def processes(self, container: Container, session: int | None) -> list[int]:
        """The task's processes now: its cgroup's, or (posix) those of
        ``session``, its leader's session (a scan of ``/proc``)."""
        return [pid for pid, _ in _session_processes(session)]

    def runc_cgroups_path(self, container: Container) -> str:
        """runc's ``cgroupsPath`` of the container's cgroups ('' when it has
        none: runc makes its own). Raises OSError when runc cannot name them."""
        return ""

    def oom_kills(self, container: Container) -> int:
        """How many of the task's processes the OOM killer ended so far."""
        return 0

    def destroy(self, container: Container) -> bool:
        """Kill what is left in the container and remove it (for a task
        whose supervisor died). True when nothing is left."""
        return True

    def release(self) -> None:
        """The agent stops: remove what it made that no task uses."""

    def weigh_tasks(self, offered: Resources, cores: int | None = None) -> int | None:
        """Give the parent of the task cgroups the CPU weight of the cpus
        ``offered`` (:data:`CPU_SHARES_PER_CPU` a cpu, as each task gets
        for its own), at most ``cores``' (default: the CPUs this process
        may run on); never lowered. What it weighs now (None: nothing
        weighed here)."""
        return None

    def sweep(self, prefix: str, keep: set[str]) -> int:
        """Remove the pooled cgroups an earlier process of this agent left."""
        return 0


class _Cgroups(Isolator):
    """What both cgroup versions share: directories, processes, removal."""

    #: how many emptied task cgroups are kept for later tasks (0: each task's made and removed)
    pool_size = 0
    #: spares (:meth:`make_spares`) made while the pool and the spares hold fewer than this
    spare_size = 0

    def __init__(self, bases: dict[str, str], cpu_quota: bool, homes: dict[str, str] | None = None,
                 limits: frozenset[str] = frozenset({"cpu", "mem"})) -> None:
        self.bases = bases            # controller -> the directory task cgroups are made in
        self._pool: list[Container] = []   # emptied cgroups of ended tasks, last in first out
        self._spares: list[Container] = []   # made ahead, never handed out: handed out after the pool's
        self._spared = False   # a spare was made: the bases were there
        self._maker = ""       # this process in its spares' names (_spare_maker), once known
        self._holder: str | None = None   # this process in its pooled cgroups' names (_this_holder), once known
        self._held_mark = ""   # ".pooled.<holder>-": in the name of each pooled cgroup this process holds
        self.cpu_quota = cpu_quota
        self.limits = limits
        self.enforcing = bool(limits)
        # base -> the agent's own cgroup in that hierarchy, where a supervisor goes back to after it
        # spawned its task inside the task's cgroups (supervisor.Supervisor.spawn); empty if not known
        self.homes = homes or {}
        #: (pooled, its cgroup directories) -> :meth:`launch_spec`'s answer: a pooled container serves
        #: task after task with the same spec (~5 µs of paths joined and split a launch); bounded
        self._specs: dict[tuple, dict] = {}

    def describe(self) -> str:
        places = ", ".join(f"{controller} {base}" for controller, base in sorted(self.bases.items()))
        cpu = "cpu shares and CFS quota" if self.cpu_quota else "cpu shares (no CFS quota)"
        enforced = ", ".join(what for what, kind in (("memory limit", "mem"), (cpu, "cpu")) if kind in self.limits)
        return f"isolation: {self.name} ({enforced or 'nothing enforced'}; cgroups in {places})"

    def create(self, name: str, resources: Resources, pooled: bool = False) -> Container:
        pooled = pooled and self.pool_size > 0
        while pooled and self._pool:
            reused = self._reuse(self._pool.pop(), resources)
            if reused is not None:
                return reused
        while pooled and self._spares:
            spare = self._hand_out_spare(self._spares.pop(), resources)
            if spare is not None:
                return spare
        if pooled:   # named for no task: it will serve many (the agent's key stays first), and for its holder
            name = f"{name.partition('.')[0]}.pooled.{self._pooled_tail(os.urandom(6).hex())}"
        container = self._make(name, _cpus(resources), _mem_bytes(resources), pooled)
        try:
            self._set_limits(container)
        except OSError:
            for directory in container.directories:
                _rmdir(directory)
            raise
        return container

    def _make(self, name: str, cpus: float, mem: int, pooled: bool, bases: bool = True) -> Container:
        """The cgroup directories of a container named ``name``, made; no limit written.
        ``bases``: the bases are made where they are missing (else FileNotFoundError)."""
        cgroups: dict[str, str] = {}
        made: list[str] = []
        try:
            for controller, base in sorted(self.bases.items()):
                directory = os.path.join(base, name)
                if directory not in made:
                    try:
                        os.mkdir(directory)
                    except FileNotFoundError:   # the first task's: the base is made with it
                        if not bases:
                            raise
                        os.makedirs(base, exist_ok=True)
                        os.mkdir(directory)
                    made.append(directory)
                cgroups[controller] = directory
        except OSError:
            for directory in made:
                _rmdir(directory)
            raise
        return Container(self.name, cgroups, cpus, mem, pooled)

    def weigh_tasks(self, offered: Resources, cores: int | None = None) -> int | None:
        """The base of the cpu hierarchy (the parent of every task cgroup
        of the agents that share the cgroups root) weighs the cpus ``offered``,
        1024 shares a cpu (v2: ``cpu.weight``, converted) — at most the
        ``cores`` this process may run on (default: its CPU affinity's).

        Made with the kernel's default, 1024 shares, all the tasks together
        weighed as much as one busy process outside them — an agent, its
        shared supervisor, a master on the same machine — whatever the
        cpus offered: on a loaded machine the control plane took the CPU
        the tasks were offered, and woke for every task's end rather than
        for a turn's worth (docs/agent.rst, "CPU"). At most the machine's
        cores: cpus offered beyond them (overcommit) would only starve the
        agent and what else serves the tasks — a Fuxi AppMaster — of the
        CPU they need to. Never lowered: agents that share the base
        (``mesoslike local``) each raise it to theirs. None where no cpu
        controller is used."""
        if "cpu" not in self.limits:
            return None
        if cores is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        shares = max(MIN_CPU_SHARES, min(MAX_CPU_SHARES, int(min(_cpus(offered), cores) * CPU_SHARES_PER_CPU)))
        base, name, value = self._base_weight(shares)
        if base is None:   # no cpu hierarchy among the bases
            return None
        try:
            os.makedirs(base, exist_ok=True)
            now = _read_int(os.path.join(base, name))
            if value > now:
                _write(base, name, value)
                now = value
        except OSError as exc:
            log.warning("cannot weigh the tasks' cgroups %s at %s: %s", base, value, exc)
            return None
        return now

    def _base_weight(self, shares: int) -> tuple[str | None, str, int]:
        """Where ``shares`` of CPU weight go for the tasks' parent: its
        directory (None: none), the file, the value (this version's unit)."""
        raise NotImplementedError

    def _pool_holder(self) -> str:
        """This process in its pooled cgroups' names (:func:`_this_holder`), read once."""
        if self._holder is None:
            self._holder = _this_holder()
            self._held_mark = f".pooled.{self._holder}-" if self._holder else ""
        return self._holder

    def _pooled_tail(self, random: str) -> str:
        """What follows ``.pooled.`` in the name of a pooled cgroup this
        process holds: :data:`_TOLD_NAME` (``random`` alone if this
        process cannot be named)."""
        holder = self._pool_holder()
        return f"{holder}-{random}" if holder else random

    def make_spares(self, prefix: str, count: int) -> int:
        """Spares: pooled cgroups made ahead (no limit written: the
        kernel's defaults), in the agent's idle turns, so that a burst of
        launches larger than the pool makes none (``mkdir`` in each
        hierarchy, ~0.2 ms of the agent's CPU a task). Named
        ``<prefix>.spare.<pid>-<start>-<random>`` (the agent process that
        made it: its pid and start time) while no task has used them;
        renamed ``<prefix>.pooled.<pid>-<start>-<pid namespace>-<random>``
        (:data:`_TOLD_NAME`: the process that holds it now) as one is
        handed out. Bounded: made only while the pool and the spares hold
        fewer than :attr:`spare_size`; removed by :meth:`release` (the agent's
        stop) and, left by an agent killed, by the next one's :meth:`sweep`
        — or by any later agent's on the same bases once that process is
        gone."""
        made = 0
        if not self._maker:
            self._maker = _spare_maker()
        while made < count and self.spares_short():
            try:   # the bases made for the first spare only: removed since (by an operator), none is made
                self._spares.append(self._make(f"{prefix}.spare.{self._maker}-{os.urandom(6).hex()}", 0.0, 0,
                                               True, bases=not self._spared))
                self._spared = True
            except OSError as exc:
                log.debug("cannot make a spare cgroup: %s", exc)
                break
            made += 1
        return made

    def spares_short(self) -> bool:
        return self.pool_size > 0 and len(self._pool) + len(self._spares) < self.spare_size

    def _hand_out_spare(self, spare: Container, resources: Resources) -> Container | None:
        """A spare for a new task: checked empty in every hierarchy (else
        killed and removed: None — something wrote a process in), renamed
        from ``.spare.`` to ``.pooled.`` (a task's now), the task's limits
        written over the defaults it was made with. Its counters are not
        read: no task ran in it, and a process that did is refused."""
        taken: dict[str, str] = {}
        try:
            _check_empty(spare.directories)
            container = Container(self.name, self._rename_held(spare, ".spare.", taken),
                                  _cpus(resources), _mem_bytes(resources), True)
            self._set_limits(container)
            return container
        except OSError as exc:
            log.debug("a spare cgroup cannot serve (%s): removing it", exc)
            self.destroy(attrs.evolve(spare, cgroups={c: taken.get(d, d) for c, d in spare.cgroups.items()}))
            return None

    def _reuse(self, container: Container, resources: Resources) -> Container | None:
        """``container`` from the pool for a new task: checked empty (else
        killed and removed: None), its limits rewritten where they differ,
        its counters read as the new task's base. None if it cannot serve."""
        cpus, mem = _cpus(resources), _mem_bytes(resources)
        try:
            _check_empty(container.directories)   # gone (FileNotFoundError) or holding a process: no spare
            if (cpus, mem) != (container.cpus, container.mem_bytes):
                if not (cpus and mem and container.cpus and container.mem_bytes):   # a limit to lift: a new one
                    raise OSError("a limit to lift")
                container = self.update(container, resources)
            # (made, not attrs.evolve'd: the same fields, a third of the cost)
            return Container(container.kind, container.cgroups, container.cpus, container.mem_bytes,
                             container.pooled, self._counters(container))
        except OSError as exc:
            log.debug("a pooled cgroup cannot serve (%s): removing it", exc)
            self.destroy(container)
            return None

    def give_back(self, container: Container) -> None:
        if container.pooled and len(self._pool) < self.pool_size:
            if self._holder is None:   # a recovered task's, before this process made any
                self._pool_holder()
            if self._held_mark and self._held_mark not in next(iter(container.cgroups.values()), self._held_mark):
                # a recovered task's (an earlier process made it), or named before holders were: renamed for
                # this process before it is in the pool, or another agent's sweep takes its maker for gone
                held = self._renamed_held(container)
                if held is None:
                    return
                container = held
            self._pool.append(container)
            return
        try:   # emptied by its supervisor: removed at once (busy, something got in: killed first)
            for directory in container.directories:
                os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError:
            self.destroy(container)

    def _renamed_held(self, container: Container) -> Container | None:
        """``container`` renamed as a pooled cgroup this process holds. None
        when it cannot be (gone, or swept meanwhile by an agent that took
        its holder for gone): what is left of it is removed."""
        taken: dict[str, str] = {}
        try:
            return Container(container.kind, self._rename_held(container, ".pooled.", taken), container.cpus,
                             container.mem_bytes, True, container.base)
        except OSError as exc:
            log.debug("a pooled cgroup cannot go back to the pool (%s): removing it", exc)
            self.destroy(attrs.evolve(container, cgroups={c: taken.get(d, d) for c, d in container.cgroups.items()}))
            return None

    def _rename_held(self, container: Container, kind: str, taken: dict[str, str]) -> dict[str, str]:
        """The cgroups of ``container`` (named ``<key><kind><tail>``) renamed
        in every hierarchy as a pooled cgroup this process holds (the same
        random part; cgroups v1 renames a cgroup within its parent in place):
        controller -> its new directory. ``taken``: each directory renamed so
        far -> its new name (to remove them when one cannot be: OSError)."""
        for directory in container.directories:
            head, _, tail = directory.rpartition(kind)
            new = f"{head}.pooled.{self._pooled_tail(tail.rpartition('-')[2])}"
            os.rename(directory, new)
            taken[directory] = new
        return {c: taken[d] for c, d in container.cgroups.items()}

    def _counters(self, container: Container) -> tuple[float, float, int, float]:
        """The container's cumulative usage counters now (:attr:`Container.base`)."""
        return (0.0, 0.0, 0, 0.0)

    def _set_limits(self, container: Container) -> None:
        raise NotImplementedError

    def update(self, container: Container, resources: Resources) -> Container:
        updated = super().update(container, resources)
        self._set_limits(updated)
        return updated

    def launch_spec(self, container: Container) -> dict:
        # kept per container (read only by its callers: merged into the launch, encoded)
        key = (container.pooled, *container.cgroups.values())
        spec = self._specs.get(key)
        if spec is None:
            if len(self._specs) >= 4 * (self.pool_size + self.spare_size) + 64:
                self._specs.clear()
            spec = self._specs[key] = self._launch_spec(container)
        return spec

    def _launch_spec(self, container: Container) -> dict:
        spec = {"cgroups": container.directories, "oom_events": [self._oom_event(container)],
                "memory_peak": self._peak_file(container)}
        if container.pooled:   # the supervisor keeps them, emptied, for the pool (supervisor.Supervisor.record)
            spec["pooled"] = True
            spec["memory_usage"] = self._usage_file(container)
        homes = [self.homes.get(os.path.dirname(directory)) for directory in container.directories]
        if all(homes):
            spec["cgroups_home"] = homes
        return spec

    def _oom_event(self, container: Container) -> list[str]:
        raise NotImplementedError

    def runc_cgroups_path(self, container: Container) -> str:
        # relative to the cgroups of runc's process (the supervisor's: the agent's own, ``homes``), in each
        # hierarchy: v1's task cgroups are below the agent's own, at the same place in every hierarchy
        relative = {os.path.relpath(directory, self.homes[os.path.dirname(directory)])
                    for directory in container.directories if os.path.dirname(directory) in self.homes}
        if len(relative) != 1 or len(self.homes) < len({os.path.dirname(d) for d in container.directories}):
            raise OSError(f"runc cannot name the task's cgroups {container.cgroups} by one path below the agent's")
        return relative.pop()

    def _peak_file(self, container: Container) -> str:
        raise NotImplementedError

    def processes(self, container: Container, session: int | None) -> list[int]:
        directories = container.directories
        return _cgroup_pids(directories[0]) if directories else []

    def oom_kills(self, container: Container) -> int:
        path, key = self._oom_event(container)
        return _flat_keyed(path).get(key, 0)

    def destroy(self, container: Container) -> bool:
        deadline = time.monotonic() + 5.0
        while not kill_cgroups(container.directories):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        for directory in container.directories:
            _rmdir(directory)
        return True

    def _usage_file(self, container: Container) -> str:
        raise NotImplementedError

    def release(self) -> None:
        # task cgroups are flat below the root, removed as their tasks end; the pool's and the spares' now
        while self._pool:
            self.destroy(self._pool.pop())
        while self._spares:
            self.destroy(self._spares.pop())

    def sweep(self, prefix: str, keep: set[str]) -> int:
        """Remove the empty pooled cgroups and spares an earlier process of
        the agent whose cgroups are named ``prefix.*`` left (killed, it could
        not release its pool), but those in ``keep`` (its recovered tasks')
        and those this process holds already; and the empty spares and
        pooled cgroups of other agents (other prefixes) whose maker or
        holder, named in the name, is gone — at most :data:`ORPHANS_A_SWEEP`
        of those. Returns how many were removed.

        Only a cgroup of a process that is no longer there (its pid gone or
        another process's: the start time differs) is another agent's to
        remove, and only empty (``rmdir`` refuses a cgroup with a process).
        A live agent's spares and pool are left alone: a pooled cgroup is
        named for the process that holds it (a recovered task's, inherited
        from an earlier process, is renamed as it goes back into the pool:
        :meth:`give_back`), so one that a live agent may hand out is never
        its holder's orphan. A pooled cgroup whose holder's pid namespace is
        not this one, or whose name tells no holder (named before holders
        were), is left to its own agent's next process. A spare whose maker
        cannot be told (named before makers were, or by another pid
        namespace, where the pid is not ours to look up — that agent then
        makes a new spare for the one it misses) is left or removed by that
        rule alike, never a cgroup a task is in. One window is left: a
        launch a killed agent had handed to its supervisor just before the
        kill, whose task had not joined its pooled cgroup yet (milliseconds),
        fails if another agent's sweep removes that cgroup in between — as
        a launch an agent is killed in may."""
        removed = 0
        ours = (f"{prefix}.pooled.", f"{prefix}.spare.")
        holder = self._pool_holder()
        held = f"{prefix}{self._held_mark}" if holder else None   # in this process's pool already
        namespace = holder.rpartition("-")[2]   # a pooled cgroup's holder is looked up only in this one
        makers: dict[str, bool] = {}   # "<pid>-<start>" -> gone
        orphans: set[str] = set()      # the names chosen, the same in every base
        for base in set(self.bases.values()):
            try:
                names = os.listdir(base)
            except OSError:
                continue
            # the names matched before any path is made: a base shared with other agents (and the cgroups
            # killed ones left) may hold thousands, each joined before (~5,000 a hierarchy on this machine)
            for name in names:
                if not name.startswith(ours):
                    # a dash before the random part, or not a name that tells its process (an older pooled
                    # name: random only): a slice is a fifth of a failed match
                    told = _TOLD_NAME.fullmatch(name) if name[-13:-12] == "-" else None
                    if told is not None and (name in orphans or self._orphan(told, namespace, makers, orphans)):
                        removed += _rmdir_if_empty(os.path.join(base, name))
                    continue
                if held is not None and name.startswith(held):
                    continue
                directory = os.path.join(base, name)
                if directory not in keep:
                    removed += _rmdir_if_empty(directory)
        return removed

    @staticmethod
    def _orphan(told: re.Match, namespace: str, makers: dict[str, bool], orphans: set[str]) -> bool:
        """Whether the spare or pooled cgroup ``told`` (:data:`_TOLD_NAME`)
        is a gone process's, to remove in this sweep (bounded)."""
        if len(orphans) >= ORPHANS_A_SWEEP:
            return False
        pooled = told[1] == "pooled"
        if pooled != (told[4] is not None):
            return False   # a pooled name of before holders were (a spare's tail kept): no holder; no spare's
        if pooled and told[4] != namespace:
            return False   # a holder in another pid namespace: its pid means another process here (or none)
        maker = f"{told[2]}-{told[3]}"
        gone = makers.get(maker)
        if gone is None:
            gone = makers[maker] = process_start_ticks(int(told[2])) != int(told[3])
        if gone:
            orphans.add(told[0])
        return gone


class CgroupsV1Isolator(_Cgroups):
    """cgroups v1: memory and cpu hierarchies, cpuacct when present."""

    name = "cgroups-v1"
    enforcing = True
    # v1's counters a reused cgroup carries are read at hand-out (Container.base) and its peak reset by
    # the supervisor; making and removing four cgroups a task was a quarter of the agent's time (docs/performance.rst).
    # As many as tasks in flight at a burst's end: fewer, and most are removed anyway, by the agent
    pool_size = 256
    # spares made ahead in an idle agent's turns (make_spares): the first burst after the agent starts (or one
    # larger than the last) makes fewer cgroups as it launches; each idle agent holds up to this many
    spare_size = 64
    #: whether the memory cgroups have ``memory.memsw.limit_in_bytes`` (None: not looked yet)
    _memsw: bool | None = None

    def _base_weight(self, shares: int) -> tuple[str | None, str, int]:
        return self.bases.get("cpu"), "cpu.shares", shares

    def _set_limits(self, container: Container) -> None:
        groups = container.cgroups
        if container.mem_bytes and "mem" in self.limits:
            _write(groups["memory"], "memory.limit_in_bytes", container.mem_bytes)
            if self._memsw is None:   # swap accounting: the kernel's, the same in every cgroup (one stat, not one a task)
                self._memsw = os.path.exists(os.path.join(groups["memory"], "memory.memsw.limit_in_bytes"))
            if self._memsw:
                _write(groups["memory"], "memory.memsw.limit_in_bytes", container.mem_bytes)  # no swapping past it
        if container.cpus and "cpu" in self.limits:
            _write(groups["cpu"], "cpu.shares", max(MIN_CPU_SHARES, int(container.cpus * CPU_SHARES_PER_CPU)))
            if self.cpu_quota:
                _write(groups["cpu"], "cpu.cfs_period_us", CFS_PERIOD_US)
                _write(groups["cpu"], "cpu.cfs_quota_us", max(MIN_CFS_QUOTA_US, int(container.cpus * CFS_PERIOD_US)))

    def update(self, container: Container, resources: Resources) -> Container:
        # v1 wants memory.memsw.limit_in_bytes >= memory.limit_in_bytes at every step:
        # growing, the swap limit goes up first (_set_limits then writes both again); from none (0) it is
        # no growth: both are unlimited, the memory limit is written first (a swap limit below it: EINVAL)
        mem_bytes = _mem_bytes(resources)
        memsw = os.path.join(container.cgroups["memory"], "memory.memsw.limit_in_bytes")
        if container.mem_bytes and mem_bytes > container.mem_bytes and "mem" in self.limits and os.path.exists(memsw):
            _write(container.cgroups["memory"], "memory.memsw.limit_in_bytes", mem_bytes)
        return super().update(container, resources)

    def _oom_event(self, container: Container) -> list[str]:
        return [os.path.join(container.cgroups["memory"], "memory.oom_control"), "oom_kill"]

    def _peak_file(self, container: Container) -> str:
        return os.path.join(container.cgroups["memory"], "memory.max_usage_in_bytes")

    def _usage_file(self, container: Container) -> str:
        return os.path.join(container.cgroups["memory"], "memory.usage_in_bytes")

    def _counters(self, container: Container) -> tuple[float, float, int, float]:
        groups = container.cgroups
        user = system = 0.0
        if "cpuacct" in groups:
            ticks = _flat_keyed(os.path.join(groups["cpuacct"], "cpuacct.stat"))
            user, system = ticks.get("user", 0) / _CLOCK_TICKS, ticks.get("system", 0) / _CLOCK_TICKS
        if not (self.cpu_quota and "cpu" in self.limits):
            # cpu.stat's throttling counts only a cgroup's own CFS quota: with none written they stay 0, and
            # the file is not read (a read fewer at each hand-out from the pool and each usage)
            return user, system, 0, 0.0
        cpu = _flat_keyed(os.path.join(groups["cpu"], "cpu.stat"))
        return user, system, cpu.get("nr_throttled", 0), cpu.get("throttled_time", 0) / 1e9

    def usage(self, container: Container, pgid: int | None) -> TaskUsage:
        groups = container.cgroups
        memory = _flat_keyed(os.path.join(groups["memory"], "memory.stat"))
        user, system, throttled, throttled_s = (now - then for now, then in zip(self._counters(container),
                                                                                container.base))
        tracker = groups.get("pids", groups["memory"])   # pids: a task recovered from an agent of before
        return _limited(TaskUsage("", "", time.time(), cpus_user_time_secs=user, cpus_system_time_secs=system,
                                  cpus_nr_throttled=int(throttled), cpus_throttled_time_secs=throttled_s,
                                  mem_rss_bytes=memory.get("total_rss", memory.get("rss", 0)),
                                  mem_total_bytes=_read_int(os.path.join(groups["memory"], "memory.usage_in_bytes")),
                                  mem_max_bytes=_read_int(self._peak_file(container)),
                                  processes=len(_cgroup_pids(tracker))), container, self.enforcing)


class CgroupsV2Isolator(_Cgroups):
    """cgroups v2: one unified directory per task."""

    name = "cgroups-v2"
    enforcing = True

    def _base_weight(self, shares: int) -> tuple[str | None, str, int]:
        return self.bases.get("unified"), "cpu.weight", _shares_to_weight(shares)

    def _set_limits(self, container: Container) -> None:
        directory = container.cgroups["unified"]
        if container.mem_bytes and "mem" in self.limits:
            _write(directory, "memory.max", container.mem_bytes)
            if os.path.exists(os.path.join(directory, "memory.swap.max")):
                _write(directory, "memory.swap.max", 0)
        if container.cpus and "cpu" in self.limits:
            shares = max(MIN_CPU_SHARES, int(container.cpus * CPU_SHARES_PER_CPU))
            _write(directory, "cpu.weight", _shares_to_weight(shares))
            if self.cpu_quota:
                quota = max(MIN_CFS_QUOTA_US, int(container.cpus * CFS_PERIOD_US))
                _write(directory, "cpu.max", f"{quota} {CFS_PERIOD_US}")

    def _oom_event(self, container: Container) -> list[str]:
        return [os.path.join(container.cgroups["unified"], "memory.events"), "oom_kill"]

    def runc_cgroups_path(self, container: Container) -> str:
        # v2's task cgroups are below the hierarchy's root, not the agent's: named from the root
        directory = container.cgroups["unified"]
        return "/" + os.path.relpath(directory, os.path.dirname(os.path.dirname(directory)))

    def _peak_file(self, container: Container) -> str:
        return os.path.join(container.cgroups["unified"], "memory.peak")  # Linux 5.19+; else usage has no peak

    def _usage_file(self, container: Container) -> str:
        return os.path.join(container.cgroups["unified"], "memory.current")

    def usage(self, container: Container, pgid: int | None) -> TaskUsage:
        directory = container.cgroups["unified"]
        cpu = _flat_keyed(os.path.join(directory, "cpu.stat"))
        memory = _flat_keyed(os.path.join(directory, "memory.stat"))
        return _limited(TaskUsage("", "", time.time(), cpus_user_time_secs=cpu.get("user_usec", 0) / 1e6,
                                  cpus_system_time_secs=cpu.get("system_usec", 0) / 1e6,
                                  cpus_nr_throttled=cpu.get("nr_throttled", 0),
                                  cpus_throttled_time_secs=cpu.get("throttled_usec", 0) / 1e6,
                                  mem_rss_bytes=memory.get("anon", 0),
                                  mem_total_bytes=_read_int(os.path.join(directory, "memory.current")),
                                  mem_max_bytes=_read_int(self._peak_file(container)),
                                  processes=len(_cgroup_pids(directory))), container, self.enforcing)


class PosixIsolator(Isolator):
    """Measure only (the fallback where no cgroup can be written)."""


def _limited(usage: TaskUsage, container: Container, enforced: bool) -> TaskUsage:
    return msgspec.structs.replace(usage, cpus_limit=container.cpus, mem_limit_bytes=container.mem_bytes, enforced=enforced)


def _shares_to_weight(shares: int) -> int:
    """cgroup v1 shares [2, 262144] to v2 weight [1, 10000], as the kernel documents."""
    return max(1, min(10_000, 1 + (shares - 2) * 9999 // 262_142))


def _cpus(resources: Resources) -> float:
    # reserved cpus (``cpus(analytics):1``) are cpus all the same
    return float(resources.stripped().get("cpus"))


def _mem_bytes(resources: Resources) -> int:
    return int(resources.stripped().get("mem") * MB)


# ------------------------------------------------------------- selection
@attrs.frozen
class CgroupMount:
    """A mounted cgroup hierarchy (from ``/proc/self/mountinfo``)."""

    version: int                 # 1 or 2
    path: str                    # where it is mounted
    root: str                    # which cgroup of the hierarchy is mounted there
    controllers: frozenset[str]  # v1: those of the mount; v2: cgroup.controllers of its root


def cgroup_mounts(proc: str = "/proc") -> list[CgroupMount]:
    """Every cgroup hierarchy this process can see."""
    mounts = []
    try:
        lines = Path(proc, "self", "mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        fstype, options = tail[0], tail[2].split(",")
        root, path = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup":
            mounts.append(CgroupMount(1, path, root, frozenset(o for o in options if o not in ("rw", "ro"))))
        elif fstype == "cgroup2":
            try:
                controllers = frozenset(Path(path, "cgroup.controllers").read_text().split())
            except OSError:
                controllers = frozenset()
            mounts.append(CgroupMount(2, path, root, controllers))
    return mounts


def _own_cgroups(proc: str) -> dict[str, str]:
    """controller (v1) or "" (v2) -> this process's cgroup path."""
    own: dict[str, str] = {}
    try:
        lines = Path(proc, "self", "cgroup").read_text().splitlines()
    except OSError:
        return own
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


def select_isolator(mode: str, *, cgroups_root: str = "mesoslike", cpu_quota: bool = False,
                    proc: str = "/proc", limits: frozenset[str] = frozenset({"cpu", "mem"})) -> Isolator:
    """The isolator of resources for ``mode``: ``auto`` (cgroups v2, else
    v1, else posix), ``cgroups`` (v2 or v1, else :class:`ConfigError`
    saying why), ``posix``. ``cgroups_root`` names the cgroup the tasks'
    cgroups go in (created if missing); ``limits`` the resources a cgroups
    isolator enforces ("cpu", "mem")."""
    if mode not in ISOLATION_MODES:
        raise ConfigError(f"--isolation must be one of {', '.join(ISOLATION_MODES)}, got {mode!r}")
    if mode == "posix":
        return PosixIsolator()
    if not cgroups_root or "/" in cgroups_root or cgroups_root.startswith("."):
        raise ConfigError(f"bad cgroups root {cgroups_root!r}: a plain directory name is needed")
    mounts = cgroup_mounts(proc)
    problems = []
    for attempt in (_try_v2, _try_v1):
        isolator, problem = attempt(mounts, _own_cgroups(proc), cgroups_root, cpu_quota)
        if isolator is not None:
            isolator.limits, isolator.enforcing = frozenset(limits), bool(limits)
            return isolator
        problems.append(problem)
    if mode == "cgroups":
        raise ConfigError("--isolation: no usable cgroup hierarchy for cgroups/cpu and cgroups/mem ("
                          + "; ".join(problems) + "); posix/cpu,posix/mem measures without limits")
    log.warning("no usable cgroups (%s): falling back to posix isolation", "; ".join(problems))
    return PosixIsolator()


# ------------------------------------------------------- --isolation names
#: Mesos's isolator names an agent takes (docs/containers.rst, "Isolators")
ISOLATORS = ("cgroups/cpu", "cgroups/mem", "posix/cpu", "posix/mem", "filesystem/linux", "namespaces/pid",
             "namespaces/ipc", "namespaces/uts", "network/none", "docker/runtime")
#: what ``--isolation`` is unless given: everything but ``network/none``, each
#: dropped with a warning at start where this machine refuses it
DEFAULT_ISOLATION = ("cgroups/cpu,cgroups/mem,filesystem/linux,namespaces/pid,namespaces/ipc,namespaces/uts,"
                     "docker/runtime")
#: the values of earlier versions, and what they mean now
LEGACY_ISOLATION = {"auto": DEFAULT_ISOLATION, "cgroups": DEFAULT_ISOLATION, "posix": "posix/cpu,posix/mem"}
#: the namespace each isolator gives a task (launch files name them so)
NAMESPACE_OF = {"filesystem/linux": "mount", "namespaces/pid": "pid", "namespaces/ipc": "ipc",
                "namespaces/uts": "uts", "network/none": "net"}
#: isolators that need another (Mesos's rules: /proc of a PID namespace and
#: an image's root filesystem are mounts)
_NEEDS = {"namespaces/pid": "filesystem/linux", "docker/runtime": "filesystem/linux"}
#: where ``runc`` is looked for besides ``PATH`` (Debian's is /usr/sbin/runc)
RUNC_PLACES = ("/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc")


@attrs.frozen
class Isolation:
    """The isolation an agent gives its tasks, as its start-up probe found
    it: the isolators in force (Mesos's names, in :data:`ISOLATORS`'
    order), the isolator of resources, ``runc`` (for ``docker/runtime``)
    and what was asked for and is not in force, each with why."""

    isolators: tuple[str, ...]
    resources: Isolator
    runc: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The namespaces a command task gets ("pid", "mount", "ipc", "uts", "net")."""
        return tuple(NAMESPACE_OF[name] for name in self.isolators if name in NAMESPACE_OF)

    @property
    def images(self) -> bool:
        """Tasks with a container image can run here."""
        return "docker/runtime" in self.isolators

    def describe(self) -> str:
        """The start-up line."""
        return f"{self.resources.describe()}; isolators {','.join(self.isolators)}"

    def to_json(self) -> dict:
        return {"isolators": list(self.isolators), "namespaces": list(self.namespaces), "images": self.images,
                "runc": self.runc, "warnings": list(self.warnings)}


def parse_isolation(spec: str) -> tuple[list[str], bool]:
    """``--isolation``'s isolators, checked, and whether the machine may
    drop those it refuses (the default and the values of earlier versions)
    rather than refuse to start. Raises :class:`ConfigError`."""
    text = (spec or "").strip()
    lenient = text in LEGACY_ISOLATION and text != "posix"
    names = [name.strip() for name in LEGACY_ISOLATION.get(text, text).split(",") if name.strip()]
    unknown = [name for name in names if name not in ISOLATORS]
    if unknown or not names:
        raise ConfigError(f"--isolation: unknown isolator {', '.join(map(repr, unknown)) or repr(text)}; "
                          f"it takes a comma-separated list of {', '.join(ISOLATORS)} "
                          f"(default: {DEFAULT_ISOLATION}), or auto, cgroups, posix")
    for resource in ("cpu", "mem"):
        if f"cgroups/{resource}" in names and f"posix/{resource}" in names:
            raise ConfigError(f"--isolation: cgroups/{resource} and posix/{resource} are two isolators of the same "
                              "resource: name one")
    for name, needed in _NEEDS.items():
        if name in names and needed not in names:
            raise ConfigError(f"--isolation: {name} needs {needed} (add it, or leave {name} out)")
    ordered = [name for name in ISOLATORS if name in names]
    return ordered, lenient


def select_isolation(spec: str, *, cgroups_root: str = "mesoslike", cpu_quota: bool = False, proc: str = "/proc",
                     probe=None, find_runc=None, probe_cache: str | os.PathLike | None = None) -> Isolation:
    """The agent's isolation for ``--isolation spec``: parsed
    (:func:`parse_isolation`), the cgroups found, the namespaces probed
    (``probe``: :func:`.namespaces.probe`; its answer kept in ``probe_cache``
    for this boot of the machine, so that a restarted agent — whose tasks'
    supervisors wait for it — starts without a probe) and ``runc`` looked
    for (``find_runc``). Raises :class:`ConfigError` naming what the
    machine refuses of an explicit list; drops it with a warning for the
    default."""
    names, lenient = parse_isolation(spec)
    warnings: list[str] = []
    limits = frozenset(resource for resource in ("cpu", "mem") if f"cgroups/{resource}" in names)
    if limits:
        resources = select_isolator("auto" if lenient else "cgroups", cgroups_root=cgroups_root, cpu_quota=cpu_quota,
                                    proc=proc, limits=limits)
        if not resources.enforcing:
            names = [f"posix/{n.split('/')[1]}" if n.startswith("cgroups/") else n for n in names]
            warnings.append("cgroups/cpu, cgroups/mem: no usable cgroups here, tasks' cpus and mem are measured, "
                            "NOT enforced (posix/cpu, posix/mem)")
    else:
        resources = PosixIsolator()
    wanted = [NAMESPACE_OF[name] for name in names if name in NAMESPACE_OF]
    if wanted:
        if probe is None:
            from mesoslike.agent.namespaces import probe as probe_namespaces
            probe = _cached_probe(probe_namespaces, probe_cache)
        refused = {namespace: why for namespace, why in probe(wanted).items() if why}
        dropped = [name for name in names if NAMESPACE_OF.get(name) in refused]
        by_reason: dict[str, list[str]] = {}
        for name in dropped:
            why = refused[NAMESPACE_OF[name]]
            if not lenient:
                raise ConfigError(f"--isolation {name}: this machine refuses a new {NAMESPACE_OF[name]} namespace "
                                  f"({why}); run the agent as root, or leave {name} out "
                                  "(--isolation posix/cpu,posix/mem runs tasks without namespaces)")
            by_reason.setdefault(why.split(": ", 1)[-1], []).append(name)
        for why, group in by_reason.items():   # one line per cause (an unprivileged agent: one line)
            kinds = ", ".join(NAMESPACE_OF[name] for name in group)
            warnings.append(f"{', '.join(group)}: the kernel refused a new {kinds} namespace ({why}); tasks run "
                            f"without {'it' if len(group) == 1 else 'them'}")
        names = [name for name in names if name not in dropped]
        for name, needed in _NEEDS.items():
            if name in names and needed not in names:
                names.remove(name)
                warnings.append(f"{name}: off, as {needed} is")
    runc = ""
    if "docker/runtime" in names:
        runc = (find_runc or find_runc_binary)()
        if not runc:
            why = f"no runc found (PATH, {', '.join(RUNC_PLACES)}): install Debian's runc"
            if not lenient:
                raise ConfigError(f"--isolation docker/runtime: {why}, or leave docker/runtime out")
            names.remove("docker/runtime")
            warnings.append(f"docker/runtime: {why}; tasks with a container image fail on this agent")
    return Isolation(tuple(names), resources, runc, tuple(warnings))


def find_runc_binary() -> str:
    """The ``runc`` to run image tasks with ('' if there is none)."""
    import shutil
    found = shutil.which("runc")
    if found:
        return found
    return next((place for place in RUNC_PLACES if os.access(place, os.X_OK)), "")


_probes: dict[tuple[tuple[str, ...], int], dict[str, str]] = {}


def _cached_probe(probe, cache_file: str | os.PathLike | None = None):
    """``probe``, asked once per set of namespaces and user in this process
    (agents of one process — tests, ``mesoslike local`` — share the
    answer), and once per boot of the machine for ``cache_file``."""
    def cached(names: list[str]) -> dict[str, str]:
        key = (tuple(names), os.geteuid())
        if key not in _probes:
            stamp = f"{_boot_id()} {os.geteuid()} {','.join(names)}"
            answer = _read_probe(cache_file, stamp)
            if answer is None:
                answer = probe(names)
                _write_probe(cache_file, stamp, answer)
            _probes[key] = answer
        return dict(_probes[key])
    return cached


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _read_probe(cache_file: str | os.PathLike | None, stamp: str) -> dict[str, str] | None:
    if cache_file is None or not stamp.split()[0]:
        return None
    try:
        import json
        document = json.loads(Path(cache_file).read_text())
    except (OSError, ValueError):
        return None
    answer = document.get("answer") if isinstance(document, dict) and document.get("stamp") == stamp else None
    if not isinstance(answer, dict) or not all(isinstance(v, str) for v in answer.values()):
        return None
    return {str(k): v for k, v in answer.items()}


def _write_probe(cache_file: str | os.PathLike | None, stamp: str, answer: dict[str, str]) -> None:
    if cache_file is None or not stamp.split()[0]:
        return
    try:
        import json
        Path(cache_file).parent.mkdir(parents=True, exist_ok=True)
        Path(cache_file).write_text(json.dumps({"stamp": stamp, "answer": answer}))
    except OSError as exc:   # the next start probes again
        log.debug("cannot keep the namespace probe's answer in %s: %s", cache_file, exc)


def _try_v2(mounts: list[CgroupMount], own: dict[str, str], root: str,
            cpu_quota: bool) -> tuple[Isolator | None, str]:
    unified = next((mount for mount in mounts if mount.version == 2), None)
    if unified is None:
        return None, "v2: no unified hierarchy mounted"
    missing = {"memory", "cpu"} - unified.controllers
    if missing:
        return None, f"v2: the unified hierarchy at {unified.path} lacks the {', '.join(sorted(missing))} controller"
    base = os.path.join(unified.path, root)
    mine = own.get("")
    homes = {base: os.path.normpath(os.path.join(unified.path, os.path.relpath(mine, unified.root)))} \
        if mine is not None and _below(mine, unified.root) else {}
    wanted = " ".join(f"+{c}" for c in ("memory", "cpu", "pids") if c in unified.controllers)
    try:
        _append(unified.path, "cgroup.subtree_control", wanted)
        os.makedirs(base, exist_ok=True)
        _append(base, "cgroup.subtree_control", wanted)
    except OSError as exc:
        return None, f"v2: cannot enable controllers below {unified.path}: {exc}"
    return CgroupsV2Isolator({"unified": base}, cpu_quota, homes), ""


def _try_v1(mounts: list[CgroupMount], own: dict[str, str], root: str,
            cpu_quota: bool) -> tuple[Isolator | None, str]:
    bases: dict[str, str] = {}
    homes: dict[str, str] = {}
    # not pids: nothing is limited there, and the memory hierarchy's cgroup.procs tracks the same processes
    # (usage, kill); a hierarchy fewer is a cgroup fewer to hand out, check and join a task (the init's
    # join, a css_set made and freed: docs/performance.rst)
    for controller in ("memory", "cpu", "cpuacct"):
        mount = next((m for m in mounts if m.version == 1 and controller in m.controllers), None)
        if mount is None:
            continue
        mine = own.get(controller, "/")
        relative = os.path.relpath(mine, mount.root) if mine.startswith(mount.root) else "."
        bases[controller] = os.path.normpath(os.path.join(mount.path, relative, root))
        if controller in own and _below(mine, mount.root):
            homes[bases[controller]] = os.path.dirname(bases[controller])
    missing = {"memory", "cpu"} - set(bases)
    if missing:
        return None, f"v1: the {', '.join(sorted(missing))} hierarchy is not mounted"
    for base in set(bases.values()):
        existing = _existing_ancestor(base)   # the base itself is made with the first task's cgroup
        if not os.access(existing, os.W_OK):
            return None, f"v1: cannot make cgroups in {existing} (not writable: run as root?)"
    return CgroupsV1Isolator(bases, cpu_quota, homes), ""


def _below(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (cgroup paths, as /proc shows them)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _existing_ancestor(path: str) -> str:
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


# ----------------------------------------------------------- file helpers
def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _write(directory: str, name: str, value: object) -> None:
    # one open and one write, no text layer: five of them make a task's cgroups
    fd = os.open(f"{directory}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def _append(directory: str, name: str, value: str) -> None:
    if value:
        _write(directory, name, value)


def _read_int(path: str) -> int:
    return read_int(path) or 0


def _check_empty(directories: list[str]) -> None:
    """OSError unless each cgroup directory is there with no process in it."""
    for directory in directories:
        # (the path joined as a string: os.path.join was a tenth of the check's Python, four a hand-out)
        fd = os.open(f"{directory}/cgroup.procs", os.O_RDONLY | os.O_CLOEXEC)   # no file object: no fstat, ioctl
        try:
            if os.read(fd, 1):
                raise OSError(f"{directory} is not empty")
        finally:
            os.close(fd)


def _rmdir_if_empty(directory: str) -> int:
    """1 if the cgroup was removed, 0 if not (one with processes: EBUSY; gone meanwhile)."""
    try:
        os.rmdir(directory)
        return 1
    except OSError:
        return 0


def _rmdir(directory: str) -> None:
    if not remove_cgroup(directory):
        log.warning("could not remove the cgroup %s", directory)


def _session_processes(session: int | None) -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields of its ``/proc/PID/stat`` after the name) of each
    living process of session ``session``."""
    if not session:
        return
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[3]) == session and fields[0] not in ("Z", "X"):
            yield int(entry), fields


def _session_usage(session: int | None) -> TaskUsage:
    """Usage summed over the living processes of session ``session`` (posix)."""
    now = time.time()
    if not session:
        return TaskUsage("", "", now)
    user = system = 0.0
    rss = count = 0
    for _, fields in _session_processes(session):
        count += 1
        user += (int(fields[11]) + int(fields[13])) / _CLOCK_TICKS    # utime + cutime
        system += (int(fields[12]) + int(fields[14])) / _CLOCK_TICKS  # stime + cstime
        rss += int(fields[21]) * _PAGE_SIZE
    return TaskUsage("", "", now, cpus_user_time_secs=user, cpus_system_time_secs=system, mem_rss_bytes=rss,
                     mem_total_bytes=rss, processes=count)
