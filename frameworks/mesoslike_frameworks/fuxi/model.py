"""What a Fuxi job asks for: jobs, ScheduleUnits, locality, and the job file.

A **ScheduleUnit** is ``slots`` identical slots of one slot size (``cpus``,
``mem``, ...): the unit of scheduling is the unit, not the slot (seed 000).
A unit carries a priority (smaller number = higher priority), the quota
group of its job, locality preferences (per machine, per engine room — the
agent attribute ``room`` — and cluster-wide, each with a count),
``max_per_machine``, its own blacklist of machines, ``all_or_nothing``, and
``node_labels``: agent attributes a machine must have to get its slots (Fuxi's
NodeLabel, seed 000 feature 4 "NodeLabel 动态划分集群": labels carve the
cluster into parts, e.g. the machines with ``ssd = "true"``).

Jobs group units. They come from a TOML job file (docs/fuxi.rst, parsed by
:func:`load_job_file` / :func:`parse_job`) or are built in Python::

    JobSpec("wordcount", units=[UnitSpec("map", slots=8, slot=Resources.parse("cpus:1;mem:512"),
                                          command="python -m examples.wordcount map {instance}",
                                          instances=32, locality=[Locality.machine("host-1", 2),
                                                                  Locality.cluster(8)])],
            quota_group="analytics", priority=100, policy="FIFO")

Every check raises :class:`JobSpecError` naming the field (``job.units[0].slots:
must be an integer >= 1, got 0``). A job is also held to :data:`LIMITS` — so
that a hostile or mistaken job file (``instances = 2**63-1``, a 400-digit
ports range) is refused when it is submitted, not when the scheduler or the
AppMaster chokes on it later. Pure: no I/O except reading the file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping

import attrs

from mesoslike import MesoslikeError, Resources
from mesoslike_frameworks.fuxi import FieldsRepr

__all__ = ["JobSpec", "UnitSpec", "Locality", "BackupPolicy", "JobSpecError", "load_job_file", "parse_job",
           "read_toml", "check_runnable", "job_document", "LT_MACHINE", "LT_ENGINEROOM", "LT_CLUSTER", "POLICIES",
           "DEFAULT_PRIORITY", "DEFAULT_QUOTA_GROUP", "DEFAULT_BLACKLIST_SECONDS", "LIMITS", "MAX_UNITS",
           "MAX_SLOTS", "MAX_INSTANCES", "MAX_ATTEMPTS", "MAX_NUMBER", "MAX_NAME", "MAX_COMMAND", "MAX_LIST",
           "MAX_RESOURCE", "MAX_PORT"]

LT_MACHINE, LT_ENGINEROOM, LT_CLUSTER = "machine", "room", "cluster"
POLICIES = ("FIFO", "FAIR")
DEFAULT_PRIORITY = 100
DEFAULT_QUOTA_GROUP = "default"
DEFAULT_BLACKLIST_SECONDS = 600.0
#: resource kinds a job file may give a slot directly (``cpus = 1.0``)
SLOT_KINDS = ("cpus", "mem", "disk", "gpus")

# ------------------------------------------------------------------ limits
#: units in one job
MAX_UNITS = 100
#: a unit's ``slots`` and ``max_per_machine``, a locality entry's ``count``
MAX_SLOTS = 100_000
#: a unit's ``instances`` (each is a record in its AppMaster and its snapshot)
MAX_INSTANCES = 1_000_000
#: a unit's ``max_attempts``, a job's ``blacklist_after``
MAX_ATTEMPTS = 1000
#: priorities
MAX_NUMBER = 1_000_000_000
#: characters of a name (job, unit, hostname, room, quota group)
MAX_NAME = 256
#: characters of a unit's command
MAX_COMMAND = 65_536
#: entries of a list (locality, blacklist, after, the data hosts of one instance)
MAX_LIST = 1000
#: a slot's quantity of one scalar resource (cpus, mem in MB, ...)
MAX_RESOURCE = 1_000_000_000
#: ports ranges lie within [0, MAX_PORT]
MAX_PORT = 65_535
#: the limits above by name, for the documentation and for messages
LIMITS = {"units per job": MAX_UNITS, "slots / max_per_machine / locality count": MAX_SLOTS,
          "instances per unit": MAX_INSTANCES, "max_attempts / blacklist_after": MAX_ATTEMPTS,
          "priority": MAX_NUMBER, "characters of a name": MAX_NAME, "characters of a command": MAX_COMMAND,
          "entries of a list": MAX_LIST, "quantity of a scalar resource": MAX_RESOURCE, "highest port": MAX_PORT}


class JobSpecError(MesoslikeError, ValueError):
    """A job or job file that cannot run as written; the message names the field."""


@attrs.frozen(repr=False)
class Locality(FieldsRepr):
    """Place ``count`` slots on ``target``: a machine (hostname), an engine
    room (the agents' ``room`` attribute) or, for ``cluster``, anywhere."""

    kind: str
    count: int
    target: str = ""

    @classmethod
    def machine(cls, hostname: str, count: int = 1) -> Locality:
        return cls(LT_MACHINE, count, hostname)

    @classmethod
    def room(cls, room: str, count: int) -> Locality:
        return cls(LT_ENGINEROOM, count, room)

    @classmethod
    def cluster(cls, count: int) -> Locality:
        return cls(LT_CLUSTER, count)


# typed converters: mypy cannot type ``converter=tuple`` on an attrs field
def _localities(value: Iterable[Locality]) -> tuple[Locality, ...]:
    return tuple(value)


def _host_set(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _data_hosts(value: Iterable[Iterable[str]]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(hosts) for hosts in value)


def _label_pairs(value: Mapping[str, str] | Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``{"ssd": "true"}`` or pairs -> sorted pairs (hashable, one order)."""
    pairs = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((name, text) for name, text in pairs))


def label_text(value: object) -> object:
    """A TOML label value as the agent attribute's canonical text (Mesos's
    formatting: ``true``, ``3``, ``2.5``); anything else is returned as it is
    (and refused by the check)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return value


@attrs.frozen(repr=False)
class UnitSpec(FieldsRepr):
    """One ScheduleUnit. ``priority`` None takes the job's. ``locality``
    empty means the whole cluster. ``instances``: data shards handed to the
    unit's slots (0: one per slot)."""

    name: str
    slots: int
    slot: Resources
    command: str = ""
    instances: int = 0
    priority: int | None = None
    max_per_machine: int | None = None
    all_or_nothing: bool = False
    locality: tuple[Locality, ...] = attrs.field(default=(), converter=_localities)
    blacklist: frozenset[str] = attrs.field(default=frozenset(), converter=_host_set)
    #: per instance, the machines (hostnames) holding its data; empty: no preference
    data: tuple[tuple[str, ...], ...] = attrs.field(default=(), converter=_data_hosts)
    #: units of the same job that must finish before this one asks for slots
    after: tuple[str, ...] = attrs.field(default=(), converter=_names)
    #: runs of one instance before the job fails
    max_attempts: int = 3
    #: agent attributes (name, canonical text) a machine must all have to get a slot of the unit
    node_labels: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_label_pairs)
    #: a container image (Docker/OCI reference) the unit's workers — and so its instances — run in
    #: (docs/containers.rst); it must have ``python3`` with mesoslike installed. '': the agent's filesystem
    image: str = ""

    def __attrs_post_init__(self) -> None:
        _check_unit(self, "unit")

    def labels_text(self) -> str:
        """``ssd=true, rack=r1``: the node labels, for messages."""
        return ", ".join(f"{name}={text}" for name, text in self.node_labels)

    @property
    def instance_count(self) -> int:
        """Instances to run: ``instances``, or one per slot when 0."""
        return self.instances or self.slots


@attrs.frozen(repr=False)
class BackupPolicy(FieldsRepr):
    """When a straggling instance gets a backup copy on another machine
    (seed 002): only once ``min_finished_fraction`` of the unit's instances
    finished, and when it has run ``slower_factor`` x longer than the
    average finished one, or reports progress ``slower_factor`` x slower
    than the average rate. The first copy to finish wins. Seed 002: longer
    than the average, so the factor is 1 unless a job sets another."""

    enabled: bool = True
    min_finished_fraction: float = 0.5
    slower_factor: float = 1.0
    min_runtime: float = 1.0          # seconds; shorter runs are never backed up


def _units(value: Iterable[UnitSpec]) -> tuple[UnitSpec, ...]:
    return tuple(value)


@attrs.frozen(repr=False)
class JobSpec(FieldsRepr):
    name: str
    units: tuple[UnitSpec, ...] = attrs.field(converter=_units)
    quota_group: str = DEFAULT_QUOTA_GROUP
    priority: int = DEFAULT_PRIORITY
    #: FIFO or FAIR; None: its quota group's. The policy is the group's (seed
    #: 000): a job naming another one is refused at submit.
    policy: str | None = None
    backup: BackupPolicy = BackupPolicy()
    #: failed runs on one machine after which the job stops using it ...
    blacklist_after: int = 3
    #: ... for this many seconds (seed 000: "for a while")
    blacklist_seconds: float = DEFAULT_BLACKLIST_SECONDS

    def __attrs_post_init__(self) -> None:
        _check_job(self)

    def unit(self, name: str) -> UnitSpec:
        for unit in self.units:
            if unit.name == name:
                return unit
        raise KeyError(name)

    def priority_of(self, unit: UnitSpec) -> int:
        return self.priority if unit.priority is None else unit.priority


# ------------------------------------------------------------------ checks
def _fail(path: str, why: str) -> JobSpecError:
    return JobSpecError(f"{path}: {why}")


def _shown(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut short: an error must not echo a hostile field whole."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _check_name(value: object, path: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, f"must be a non-empty string, got {_shown(value)}")
    if len(value) > MAX_NAME:
        raise _fail(path, f"must be at most {MAX_NAME} characters, got {len(value)}")
    if any(c in value for c in "/\n\t"):
        raise _fail(path, f"must not contain '/', tabs or newlines, got {_shown(value)}")


def _check_int(value: object, path: str, minimum: int, maximum: int = MAX_NUMBER) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _fail(path, f"must be an integer >= {minimum}, got {_shown(value)}")
    if value > maximum:
        raise _fail(path, f"must be at most {maximum} (the Fuxi service's limit), got {_shown(value)}")


def _check_list(items: Collection[object], path: str) -> None:
    if len(items) > MAX_LIST:
        raise _fail(path, f"must have at most {MAX_LIST} entries, got {len(items)}")


def _check_slot(slot: Resources, path: str) -> None:
    """A slot's quantities within :data:`MAX_RESOURCE`, its ports within [0, :data:`MAX_PORT`]."""
    for kind, quantity in slot.scalars().items():
        if quantity > MAX_RESOURCE:
            raise _fail(path, f"{kind} must be at most {MAX_RESOURCE}, got {_shown(quantity)}")
    for kind in slot.range_names():
        ranges = slot.ranges(kind)
        if len(ranges) > MAX_LIST:
            raise _fail(path, f"{kind} must have at most {MAX_LIST} ranges, got {len(ranges)}")
        for low, high in ranges:
            if high > MAX_PORT:
                raise _fail(path, f"{kind} must lie within [0, {MAX_PORT}], got "
                                  f"[{_shown(low, 20)}-{_shown(high, 20)}]")


def _check_unit(unit: UnitSpec, path: str) -> None:
    _check_name(unit.name, f"{path}.name")
    _check_int(unit.slots, f"{path}.slots", 1, MAX_SLOTS)
    if not isinstance(unit.slot, Resources) or not unit.slot:
        raise _fail(f"{path}.slot", f"a slot needs resources (e.g. cpus and mem), got {_shown(unit.slot)}")
    _check_slot(unit.slot, f"{path}.resources")
    if not isinstance(unit.command, str):
        raise _fail(f"{path}.command", f"must be a string, got {_shown(unit.command)}")
    if len(unit.command) > MAX_COMMAND:
        raise _fail(f"{path}.command", f"must be at most {MAX_COMMAND} characters, got {len(unit.command)}")
    if unit.image:
        from mesoslike import Image   # here: the master protocol's value types, for a unit with an image only

        try:
            Image(unit.image)
        except (TypeError, ValueError) as exc:
            raise _fail(f"{path}.image", str(exc).removeprefix("image.name ")) from None
    _check_int(unit.instances, f"{path}.instances", 0, MAX_INSTANCES)
    if unit.priority is not None:
        _check_int(unit.priority, f"{path}.priority", 0)
    if unit.max_per_machine is not None:
        _check_int(unit.max_per_machine, f"{path}.max_per_machine", 1, MAX_SLOTS)
    if not isinstance(unit.all_or_nothing, bool):
        raise _fail(f"{path}.all_or_nothing", f"must be true or false, got {_shown(unit.all_or_nothing)}")
    _check_list(unit.locality, f"{path}.locality")
    for i, pref in enumerate(unit.locality):
        where = f"{path}.locality[{i}]"
        if not isinstance(pref, Locality):
            raise _fail(where, f"must be a Locality, got {_shown(pref)}")
        if pref.kind not in (LT_MACHINE, LT_ENGINEROOM, LT_CLUSTER):
            raise _fail(where, f"kind must be machine, room or cluster, got {_shown(pref.kind)}")
        _check_int(pref.count, f"{where}.count", 1, MAX_SLOTS)
        if pref.kind != LT_CLUSTER:
            _check_name(pref.target, f"{where}.{pref.kind}")
    _check_list(unit.blacklist, f"{path}.blacklist")
    for host in unit.blacklist:
        _check_name(host, f"{path}.blacklist")
    _check_int(unit.max_attempts, f"{path}.max_attempts", 1, MAX_ATTEMPTS)
    if unit.data:
        if len(unit.data) != unit.instance_count:
            raise _fail(f"{path}.data", f"lists {len(unit.data)} instances' data, but the unit has "
                                        f"{unit.instance_count} instances")
        for i, hosts in enumerate(unit.data):
            _check_list(hosts, f"{path}.data[{i}]")
            for host in hosts:
                _check_name(host, f"{path}.data[{i}]")
    _check_list(unit.after, f"{path}.after")
    for name in unit.after:
        _check_name(name, f"{path}.after")
    _check_list(unit.node_labels, f"{path}.node_labels")
    for name, text in unit.node_labels:
        _check_name(name, f"{path}.node_labels")
        if not isinstance(text, str) or len(text) > MAX_NAME:
            raise _fail(f"{path}.node_labels.{name}", f"must be a string, number or boolean of at most {MAX_NAME} "
                                                      f"characters, got {_shown(text)}")


def _check_job(job: JobSpec) -> None:
    _check_name(job.name, "job.name")
    _check_name(job.quota_group, "job.quota_group")
    _check_int(job.priority, "job.priority", 0)
    if job.policy is not None and job.policy not in POLICIES:
        raise _fail("job.policy", f"must be FIFO or FAIR, got {_shown(job.policy)}")
    if not job.units:
        raise _fail("job.units", "a job needs at least one unit ([[job.units]])")
    if len(job.units) > MAX_UNITS:
        raise _fail("job.units", f"a job has at most {MAX_UNITS} units, got {len(job.units)}")
    seen: set[str] = set()
    for i, unit in enumerate(job.units):
        if not isinstance(unit, UnitSpec):
            raise _fail(f"job.units[{i}]", f"must be a UnitSpec, got {_shown(unit)}")
        if unit.name in seen:
            raise _fail(f"job.units[{i}].name", f"duplicate unit name {unit.name!r}")
        seen.add(unit.name)
    for i, unit in enumerate(job.units):
        for name in unit.after:
            if name not in seen or name == unit.name:
                raise _fail(f"job.units[{i}].after", f"{name!r} is not another unit of this job")
    _check_no_cycle(job)
    _check_int(job.blacklist_after, "job.blacklist_after", 1, MAX_ATTEMPTS)
    if not isinstance(job.blacklist_seconds, (int, float)) or isinstance(job.blacklist_seconds, bool) \
            or not math.isfinite(job.blacklist_seconds) or not 0 < job.blacklist_seconds <= MAX_NUMBER:
        raise _fail("job.blacklist_seconds", f"must be a number of seconds in (0, {MAX_NUMBER}], "
                                             f"got {_shown(job.blacklist_seconds)}")
    backup = job.backup
    if not isinstance(backup, BackupPolicy):
        raise _fail("job.backup", f"must be a BackupPolicy, got {_shown(backup)}")
    for name, low, high in (("min_finished_fraction", 0.0, 1.0), ("slower_factor", 1.0, math.inf),
                            ("min_runtime", 0.0, math.inf)):
        value = getattr(backup, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high \
                or math.isnan(value):
            raise _fail(f"job.backup.{name}", f"must be a number in [{low}, {high}], got {_shown(value)}")


def _check_no_cycle(job: JobSpec) -> None:
    after = {unit.name: set(unit.after) for unit in job.units}
    done: set[str] = set()
    while len(done) < len(after):
        ready = [name for name, deps in after.items() if name not in done and deps <= done]
        if not ready:
            raise _fail("job.units", "the units' 'after' lists form a cycle: "
                        + ", ".join(sorted(set(after) - done)))
        done.update(ready)


# ------------------------------------------------------------- job files
def load_job_file(path: str | Path) -> JobSpec:
    """Read and check a TOML job file (docs/fuxi.rst)."""
    return parse_job(read_toml(path, "job file", JobSpecError))


def read_toml(path: str | Path, what: str, error: type[Exception]) -> dict[str, Any]:
    """The parsed TOML file at ``path`` (``what`` it is, for messages);
    raises ``error`` saying why it cannot be read."""
    import tomllib   # here: a job's AppMaster, which reads JSON, imports this module too (~3 ms of its start)

    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise error(f"cannot read the {what} {str(path)!r}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None


def check_runnable(job: JobSpec) -> None:
    """What the Fuxi service needs beyond a valid job: a command in every unit."""
    for i, unit in enumerate(job.units):
        if not unit.command.strip():
            raise JobSpecError(f"job.units[{i}].command: a unit needs a command (what each of its instances runs)")


def job_document(spec: JobSpec) -> dict[str, Any]:
    """The job file (as parsed TOML, docs/fuxi.rst) that :func:`parse_job` reads back as ``spec``."""
    units = []
    for unit in spec.units:
        table: dict[str, Any] = {
            "name": unit.name, "slots": unit.slots, "resources": str(unit.slot), "command": unit.command,
            "instances": unit.instances, "all_or_nothing": unit.all_or_nothing,
            "locality": [{"cluster": True, "count": pref.count} if pref.kind == LT_CLUSTER
                         else {pref.kind: pref.target, "count": pref.count} for pref in unit.locality],
            "blacklist": sorted(unit.blacklist), "data": [list(hosts) for hosts in unit.data],
            "after": list(unit.after), "max_attempts": unit.max_attempts}
        if unit.priority is not None:
            table["priority"] = unit.priority
        if unit.max_per_machine is not None:
            table["max_per_machine"] = unit.max_per_machine
        if unit.node_labels:
            table["node_labels"] = dict(unit.node_labels)
        if unit.image:
            table["image"] = unit.image
        units.append(table)
    policy = {} if spec.policy is None else {"policy": spec.policy}
    return {"job": {"name": spec.name, "quota_group": spec.quota_group, "priority": spec.priority, **policy,
                    "units": units, "backup": attrs.asdict(spec.backup), "blacklist_after": spec.blacklist_after,
                    "blacklist_seconds": spec.blacklist_seconds}}


_JOB_KEYS = {"name", "quota_group", "priority", "policy", "units", "backup", "blacklist_after", "blacklist_seconds"}
_UNIT_KEYS = {"name", "slots", "command", "instances", "priority", "max_per_machine", "all_or_nothing", "locality",
              "blacklist", "resources", "data", "after", "max_attempts", "node_labels", "image", *SLOT_KINDS}
_BACKUP_KEYS = {"enabled", "min_finished_fraction", "slower_factor", "min_runtime"}


def parse_job(document: Mapping[str, Any]) -> JobSpec:
    """A :class:`JobSpec` from the parsed TOML document (``{"job": {...}}``)."""
    if not isinstance(document, Mapping) or not isinstance(document.get("job"), Mapping):
        raise JobSpecError("job: the file needs a [job] table")
    job = document["job"]
    _no_unknown_keys(job, _JOB_KEYS, "job")
    units = job.get("units")
    if not isinstance(units, list) or not units:
        raise _fail("job.units", "a job needs at least one unit ([[job.units]])")
    if len(units) > MAX_UNITS:
        raise _fail("job.units", f"a job has at most {MAX_UNITS} units, got {len(units)}")
    parsed = [_parse_unit(unit, f"job.units[{i}]") for i, unit in enumerate(units)]
    backup = job.get("backup", {})
    if not isinstance(backup, Mapping):
        raise _fail("job.backup", "must be a table ([job.backup])")
    _no_unknown_keys(backup, _BACKUP_KEYS, "job.backup")
    if not isinstance(backup.get("enabled", True), bool):
        raise _fail("job.backup.enabled", f"must be true or false, got {_shown(backup['enabled'])}")
    return JobSpec(name=job.get("name", ""), units=parsed, quota_group=job.get("quota_group", DEFAULT_QUOTA_GROUP),
                   priority=job.get("priority", DEFAULT_PRIORITY), policy=job.get("policy"),
                   backup=BackupPolicy(**backup), blacklist_after=job.get("blacklist_after", 3),
                   blacklist_seconds=job.get("blacklist_seconds", DEFAULT_BLACKLIST_SECONDS))


def _parse_unit(table: object, path: str) -> UnitSpec:
    if not isinstance(table, Mapping):
        raise _fail(path, "must be a table")
    _no_unknown_keys(table, _UNIT_KEYS, path)
    try:
        return UnitSpec(name=table.get("name", ""), slots=table.get("slots", 0), slot=_slot(table, path),
                        command=table.get("command", ""), instances=table.get("instances", 0),
                        priority=table.get("priority"), max_per_machine=table.get("max_per_machine"),
                        all_or_nothing=table.get("all_or_nothing", False),
                        locality=_locality(table.get("locality", []), f"{path}.locality"),
                        blacklist=_hosts(table.get("blacklist", []), f"{path}.blacklist"),
                        data=_data(table.get("data", []), f"{path}.data"),
                        after=_hosts(table.get("after", []), f"{path}.after"),
                        max_attempts=table.get("max_attempts", 3),
                        node_labels=_node_labels(table.get("node_labels", {}), f"{path}.node_labels"),
                        image=table.get("image", ""))
    except JobSpecError as exc:
        raise JobSpecError(str(exc).replace("unit.", f"{path}.", 1)) from None


def _node_labels(table: object, path: str) -> list[tuple[str, Any]]:
    """``node_labels = {ssd = true, rack = "r1"}``: a table of attribute -> value."""
    if not isinstance(table, Mapping):
        raise _fail(path, f"must be a table of attribute = value, e.g. {{ssd = \"true\"}}, got {_shown(table)}")
    return [(name, label_text(value)) for name, value in table.items()]


def _slot(table: Mapping[str, Any], path: str) -> Resources:
    parts = []
    for kind in SLOT_KINDS:
        if kind in table:
            value = table[kind]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value <= 0:
                raise _fail(f"{path}.{kind}", f"must be a number > 0, got {_shown(value)}")
            if value > MAX_RESOURCE:
                raise _fail(f"{path}.{kind}", f"must be at most {MAX_RESOURCE}, got {_shown(value)}")
            parts.append(f"{kind}:{value}")
    extra = table.get("resources", "")
    if not isinstance(extra, str):
        raise _fail(f"{path}.resources", f"must be a resource string like 'gpus:1', got {_shown(extra)}")
    if len(extra) > MAX_COMMAND:
        raise _fail(f"{path}.resources", f"must be at most {MAX_COMMAND} characters, got {len(extra)}")
    try:
        return Resources.parse(";".join(p for p in (*parts, extra) if p))
    except MesoslikeError as exc:
        raise _fail(f"{path}.resources", _shown(str(exc), 200)) from None


def _locality(items: object, path: str) -> list[Locality]:
    if not isinstance(items, list):
        raise _fail(path, "must be a list of { machine = ..., count = N } / { room = ... } / { cluster = true }")
    prefs = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            raise _fail(where, "must be an inline table")
        _no_unknown_keys(item, {"machine", "room", "cluster", "count"}, where)
        kinds = [k for k in ("machine", "room", "cluster") if k in item]
        if len(kinds) != 1:
            raise _fail(where, "needs exactly one of machine, room or cluster")
        count = item.get("count", 1)
        _check_int(count, f"{where}.count", 1)
        if kinds[0] == "cluster":
            if item["cluster"] is not True:
                raise _fail(f"{where}.cluster", "must be true")
            prefs.append(Locality.cluster(count))
        else:
            _check_name(item[kinds[0]], f"{where}.{kinds[0]}")
            prefs.append(Locality(kinds[0], count, item[kinds[0]]))
    return prefs


def _hosts(items: object, path: str) -> Iterable[str]:
    if not isinstance(items, list) or not all(isinstance(h, str) and h for h in items):
        raise _fail(path, f"must be a list of hostnames, got {_shown(items)}")
    return items


def _data(items: object, path: str) -> list[list[str]]:
    if not isinstance(items, list) or not all(isinstance(hosts, list) and all(isinstance(h, str) for h in hosts)
                                              for hosts in items):
        raise _fail(path, "must be a list, per instance, of lists of hostnames holding its data")
    return items


def _no_unknown_keys(table: Mapping[str, Any], known: set[str], path: str) -> None:
    unknown = sorted(_shown(key, 40) for key in table if key not in known)
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise _fail(path, f"unknown field(s) {', '.join(unknown[:5])}{more}; known: {', '.join(sorted(known))}")
