"""Resource isolation: each task's ``cpus`` and ``mem`` enforced with
cgroups, and its usage measured.

Three isolators, chosen by ``--isolation`` (``auto`` picks the first that
works on this machine, in this order):

==============  ==============================================================
``cgroups-v2``  the unified hierarchy, where it is mounted with the ``memory``
                and ``cpu`` controllers and they can be enabled below it:
                ``memory.max``, ``cpu.weight`` (and ``cpu.max`` with
                ``cpu_quota``), ``memory.events``' ``oom_kill`` for
                out-of-memory kills. A task's cgroup is
                ``<mount>/<root>/<name>`` (v2 forbids processes in a cgroup
                that has controlled children, so not below the agent's own).
``cgroups-v1``  the ``memory`` and ``cpu`` hierarchies (plus ``cpuacct`` and
                ``pids`` when mounted, for usage and process tracking):
                ``memory.limit_in_bytes``, ``cpu.shares`` (and
                ``cpu.cfs_quota_us`` with ``cpu_quota``), ``memory.oom_control``'s
                ``oom_kill``. A task's cgroup is ``<agent's own cgroup>/<root>/<name>``
                in each hierarchy, so the tasks stay inside whatever the agent
                was started in.
``posix``       no limits: usage is measured from ``/proc`` (the processes of
                the task's session) and nothing is enforced.
==============  ==============================================================

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
import time
from pathlib import Path
from typing import Iterator

import attrs

from mesoslike.agent.supervisor import cgroup_pids as _cgroup_pids
from mesoslike.agent.supervisor import flat_keyed as _flat_keyed
from mesoslike.agent.supervisor import kill_cgroups, read_int, remove_cgroup
from mesoslike.errors import ConfigError
from mesoslike.resources import Resources
from mesoslike.wire.messages import TaskUsage

__all__ = ["ISOLATION_MODES", "Container", "Isolator", "CgroupsV1Isolator", "CgroupsV2Isolator",
           "PosixIsolator", "select_isolator", "agent_key", "CgroupMount", "cgroup_mounts"]

log = logging.getLogger("mesoslike.agent")

ISOLATION_MODES = ("auto", "cgroups", "posix")
CFS_PERIOD_US = 100_000
MIN_CFS_QUOTA_US = 1000
CPU_SHARES_PER_CPU = 1024
MIN_CPU_SHARES = 2
MB = 1024 * 1024
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@attrs.frozen
class Container:
    """Where one task's processes are confined and measured: its cgroup
    directory per controller (none for ``posix``) and its limits (0 = none)."""

    kind: str
    cgroups: dict[str, str] = attrs.field(factory=dict)
    cpus: float = 0.0
    mem_bytes: int = 0

    def to_json(self) -> dict:
        return {"kind": self.kind, "cgroups": dict(self.cgroups), "cpus": self.cpus, "mem_bytes": self.mem_bytes}

    @classmethod
    def from_json(cls, value: object) -> Container:
        """The container ``to_json`` described; ValueError if it is not one."""
        if not isinstance(value, dict):
            raise ValueError("a container is a JSON object")
        kind, cgroups, cpus, mem = value.get("kind"), value.get("cgroups"), value.get("cpus"), value.get("mem_bytes")
        if not isinstance(kind, str) or not isinstance(cgroups, dict) or not isinstance(cpus, (int, float)) \
                or not isinstance(mem, int) or not all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in cgroups.items()):
            raise ValueError(f"not a container: {value!r}")
        return cls(kind, dict(cgroups), float(cpus), mem)

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


class Isolator:
    """The interface, and the ``posix`` behaviour: nothing enforced."""

    name = "posix"
    enforcing = False

    def describe(self) -> str:
        """The startup line: which isolation is active, and where."""
        return "isolation: posix (usage measured from /proc; cpus and mem are NOT enforced)"

    def create(self, name: str, resources: Resources) -> Container:
        """Make the container of a task named ``name`` with the limits of
        ``resources``. Raises OSError when its cgroups cannot be made."""
        return Container(self.name, {}, _cpus(resources), _mem_bytes(resources))

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

    def oom_kills(self, container: Container) -> int:
        """How many of the task's processes the OOM killer ended so far."""
        return 0

    def destroy(self, container: Container) -> bool:
        """Kill what is left in the container and remove it (for a task
        whose supervisor died). True when nothing is left."""
        return True

    def release(self) -> None:
        """The agent stops: remove what it made that no task uses."""


class _Cgroups(Isolator):
    """What both cgroup versions share: directories, processes, removal."""

    def __init__(self, bases: dict[str, str], cpu_quota: bool, homes: dict[str, str] | None = None) -> None:
        self.bases = bases            # controller -> the directory task cgroups are made in
        self.cpu_quota = cpu_quota
        # base -> the agent's own cgroup in that hierarchy, where a supervisor goes back to after it
        # spawned its task inside the task's cgroups (supervisor.Supervisor.spawn); empty if not known
        self.homes = homes or {}

    def describe(self) -> str:
        places = ", ".join(f"{controller} {base}" for controller, base in sorted(self.bases.items()))
        cpu = "cpu shares and CFS quota" if self.cpu_quota else "cpu shares (no CFS quota)"
        return f"isolation: {self.name} (memory limit, {cpu}; cgroups in {places})"

    def create(self, name: str, resources: Resources) -> Container:
        cpus, mem = _cpus(resources), _mem_bytes(resources)
        cgroups: dict[str, str] = {}
        made: list[str] = []
        try:
            for controller, base in sorted(self.bases.items()):
                directory = os.path.join(base, name)
                if directory not in made:
                    try:
                        os.mkdir(directory)
                    except FileNotFoundError:   # the first task's: the base is made with it
                        os.makedirs(base, exist_ok=True)
                        os.mkdir(directory)
                    made.append(directory)
                cgroups[controller] = directory
            container = Container(self.name, cgroups, cpus, mem)
            self._set_limits(container)
        except OSError:
            for directory in made:
                _rmdir(directory)
            raise
        return container

    def _set_limits(self, container: Container) -> None:
        raise NotImplementedError

    def update(self, container: Container, resources: Resources) -> Container:
        updated = super().update(container, resources)
        self._set_limits(updated)
        return updated

    def launch_spec(self, container: Container) -> dict:
        spec = {"cgroups": container.directories, "oom_events": [self._oom_event(container)],
                "memory_peak": self._peak_file(container)}
        homes = [self.homes.get(os.path.dirname(directory)) for directory in container.directories]
        if all(homes):
            spec["cgroups_home"] = homes
        return spec

    def _oom_event(self, container: Container) -> list[str]:
        raise NotImplementedError

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

    def release(self) -> None:
        pass  # task cgroups are flat below the root, removed as their tasks end


class CgroupsV1Isolator(_Cgroups):
    """cgroups v1: memory and cpu hierarchies, cpuacct and pids when present."""

    name = "cgroups-v1"
    enforcing = True

    def _set_limits(self, container: Container) -> None:
        groups = container.cgroups
        if container.mem_bytes:
            _write(groups["memory"], "memory.limit_in_bytes", container.mem_bytes)
            if os.path.exists(os.path.join(groups["memory"], "memory.memsw.limit_in_bytes")):
                _write(groups["memory"], "memory.memsw.limit_in_bytes", container.mem_bytes)  # no swapping past it
        if container.cpus:
            _write(groups["cpu"], "cpu.shares", max(MIN_CPU_SHARES, int(container.cpus * CPU_SHARES_PER_CPU)))
            if self.cpu_quota:
                _write(groups["cpu"], "cpu.cfs_period_us", CFS_PERIOD_US)
                _write(groups["cpu"], "cpu.cfs_quota_us", max(MIN_CFS_QUOTA_US, int(container.cpus * CFS_PERIOD_US)))

    def update(self, container: Container, resources: Resources) -> Container:
        # v1 wants memory.memsw.limit_in_bytes >= memory.limit_in_bytes at every step:
        # growing, the swap limit goes up first (_set_limits then writes both again)
        mem_bytes = _mem_bytes(resources)
        memsw = os.path.join(container.cgroups["memory"], "memory.memsw.limit_in_bytes")
        if mem_bytes > container.mem_bytes and os.path.exists(memsw):
            _write(container.cgroups["memory"], "memory.memsw.limit_in_bytes", mem_bytes)
        return super().update(container, resources)

    def _oom_event(self, container: Container) -> list[str]:
        return [os.path.join(container.cgroups["memory"], "memory.oom_control"), "oom_kill"]

    def _peak_file(self, container: Container) -> str:
        return os.path.join(container.cgroups["memory"], "memory.max_usage_in_bytes")

    def usage(self, container: Container, pgid: int | None) -> TaskUsage:
        groups = container.cgroups
        memory = _flat_keyed(os.path.join(groups["memory"], "memory.stat"))
        user = system = 0.0
        if "cpuacct" in groups:
            ticks = _flat_keyed(os.path.join(groups["cpuacct"], "cpuacct.stat"))
            user, system = ticks.get("user", 0) / _CLOCK_TICKS, ticks.get("system", 0) / _CLOCK_TICKS
        cpu = _flat_keyed(os.path.join(groups["cpu"], "cpu.stat"))
        tracker = groups.get("pids", groups["memory"])
        return _limited(TaskUsage("", "", time.time(), cpus_user_time_secs=user, cpus_system_time_secs=system,
                                  cpus_nr_throttled=cpu.get("nr_throttled", 0),
                                  cpus_throttled_time_secs=cpu.get("throttled_time", 0) / 1e9,
                                  mem_rss_bytes=memory.get("total_rss", memory.get("rss", 0)),
                                  mem_total_bytes=_read_int(os.path.join(groups["memory"], "memory.usage_in_bytes")),
                                  mem_max_bytes=_read_int(self._peak_file(container)),
                                  processes=len(_cgroup_pids(tracker))), container, True)


class CgroupsV2Isolator(_Cgroups):
    """cgroups v2: one unified directory per task."""

    name = "cgroups-v2"
    enforcing = True

    def _set_limits(self, container: Container) -> None:
        directory = container.cgroups["unified"]
        if container.mem_bytes:
            _write(directory, "memory.max", container.mem_bytes)
            if os.path.exists(os.path.join(directory, "memory.swap.max")):
                _write(directory, "memory.swap.max", 0)
        if container.cpus:
            shares = max(MIN_CPU_SHARES, int(container.cpus * CPU_SHARES_PER_CPU))
            _write(directory, "cpu.weight", _shares_to_weight(shares))
            if self.cpu_quota:
                quota = max(MIN_CFS_QUOTA_US, int(container.cpus * CFS_PERIOD_US))
                _write(directory, "cpu.max", f"{quota} {CFS_PERIOD_US}")

    def _oom_event(self, container: Container) -> list[str]:
        return [os.path.join(container.cgroups["unified"], "memory.events"), "oom_kill"]

    def _peak_file(self, container: Container) -> str:
        return os.path.join(container.cgroups["unified"], "memory.peak")  # Linux 5.19+; else usage has no peak

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
                                  processes=len(_cgroup_pids(directory))), container, True)


class PosixIsolator(Isolator):
    """Measure only (the fallback where no cgroup can be written)."""


def _limited(usage: TaskUsage, container: Container, enforced: bool) -> TaskUsage:
    return attrs.evolve(usage, cpus_limit=container.cpus, mem_limit_bytes=container.mem_bytes, enforced=enforced)


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
                    proc: str = "/proc") -> Isolator:
    """The isolator for ``--isolation mode``: ``auto`` (cgroups v2, else v1,
    else posix), ``cgroups`` (v2 or v1, else :class:`ConfigError` saying
    why), ``posix``. ``cgroups_root`` names the cgroup the tasks' cgroups go
    in (created if missing)."""
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
            return isolator
        problems.append(problem)
    if mode == "cgroups":
        raise ConfigError("--isolation cgroups: no usable cgroup hierarchy (" + "; ".join(problems) + ")")
    log.warning("no usable cgroups (%s): falling back to posix isolation", "; ".join(problems))
    return PosixIsolator()


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
    for controller in ("memory", "cpu", "cpuacct", "pids"):
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
    with open(os.path.join(directory, name), "w") as sink:
        sink.write(str(value))


def _append(directory: str, name: str, value: str) -> None:
    if value:
        _write(directory, name, value)


def _read_int(path: str) -> int:
    return read_int(path) or 0


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
