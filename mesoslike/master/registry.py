"""The registry: the master's hard state, which survives a failover.

What a new leader must know before it serves (docs/ha.rst): the admitted
agents, the agents marked unreachable (they may come back under their ids,
docs/reliability.rst), the known frameworks with their failover timeouts, the
agents and frameworks that were removed (they may not come back under their
old ids), role weights and quota, and the agents the operator drains.
Everything else — tasks, offers, allocations — is
soft state, rebuilt from re-registering agents and re-subscribing
frameworks.

This module is pure: the document is plain JSON-able data, and where it is
kept (a file for a standalone master, ZooKeeper for an HA cluster) is the
runtime's business. A record that does not parse is skipped with a logged
warning; the rest of the registry still loads.

The registry also records what changed since it was last stored
(:meth:`Registry.changes`), so that a store may write only that: the
ZooKeeper store keeps agents and frameworks in hash-bucketed shards and
rewrites only the shards of changed records (docs/ha.rst). Change the
registry through its methods (``admit_agent``, ``remove_agent``,
``add_framework``, ``remove_framework``, ``update_weights``); assigning to
its dicts and lists directly is not recorded.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any, Mapping

import attrs

from mesoslike.errors import MesoslikeError
from mesoslike.master.operations import DrainInfo
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo
from mesoslike.wire.types import Label

__all__ = ["Registry", "RegistryChanges", "RegistryFormatError", "REGISTRY_FORMAT", "MAX_REMOVED",
           "SECTIONS", "UnreachableEntry", "agent_record", "framework_record", "unreachable_record"]

log = logging.getLogger("mesoslike.master.registry")

REGISTRY_FORMAT = 1
#: removed agents/frameworks remembered (the oldest are forgotten first)
MAX_REMOVED = 10_000
#: the parts of the registry that are stored whole (agents and frameworks are
#: tracked record by record)
SECTIONS = ("removed_agents", "removed_frameworks", "weights", "quota", "drains")


class RegistryFormatError(MesoslikeError, ValueError):
    """The registry document as a whole is unusable (not a map, or a newer
    format this master does not understand)."""


@attrs.frozen
class UnreachableEntry:
    """An agent marked unreachable (Mesos's ``Registry.UnreachableSlave``):
    when (seconds since the epoch), its hostname (for the operator) and whose
    its id is."""

    since: float
    hostname: str = ""
    #: the principal its id belongs to (docs/security.rst; "" in an anonymous cluster)
    principal: str = ""


@attrs.frozen
class RegistryChanges:
    """What changed in a :class:`Registry` since it was last stored: the ids
    of the agents, frameworks and unreachable agents admitted, updated or
    removed, and which whole :data:`SECTIONS` changed."""

    agents: frozenset[str] = frozenset()
    frameworks: frozenset[str] = frozenset()
    sections: frozenset[str] = frozenset()
    #: how many changes the registry had counted when this was taken
    upto: int = 0
    unreachable: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.agents or self.frameworks or self.sections or self.unreachable)


@attrs.define(eq=False)
class Registry:
    agents: dict[str, AgentInfo] = attrs.field(factory=dict)
    frameworks: dict[str, FrameworkInfo] = attrs.field(factory=dict)
    removed_agents: list[str] = attrs.field(factory=list)
    removed_frameworks: list[str] = attrs.field(factory=list)
    weights: dict[str, float] = attrs.field(factory=dict)
    #: role -> {"guarantee": resources string, "limit": resources string} (either may be absent)
    quota: dict[str, dict[str, str]] = attrs.field(factory=dict)
    #: agent id -> its drain by the operator (``DrainInfo.to_record``: state, grace, started_at, kill_at)
    drains: dict[str, dict] = attrs.field(factory=dict)
    #: agents marked unreachable, oldest first: they may re-register under their ids until they
    #: are marked gone or age out (registry_max_agent_age, registry_max_agent_count)
    unreachable: dict[str, UnreachableEntry] = attrs.field(factory=dict)
    # changes not stored yet (what changed -> the count of its last change); not part of the registry's value
    _changed: dict[tuple[str, str], int] = attrs.field(factory=dict, init=False, eq=False, repr=False)
    _count: int = attrs.field(default=0, init=False, eq=False, repr=False)

    def __eq__(self, other: object) -> bool:
        """Equal when they store the same document: a framework's receipt, web
        page or hostname live in the registry's FrameworkInfo but are not
        stored, and a kept core whose registry differs only in those is the
        one ZooKeeper holds (mesoslike.master.leadership resumes it)."""
        if not isinstance(other, Registry):
            return NotImplemented
        return self.to_document() == other.to_document()

    # ------------------------------------------------------------ changes
    def admit_agent(self, info: AgentInfo) -> None:
        if self.agents.get(info.id) != info:  # a re-registration as before changes nothing
            self.agents[info.id] = info
            self._note("agents", info.id)

    def remove_agent(self, agent_id: str) -> None:
        """The agent is gone for good (it unregistered, was marked gone,
        or aged out of the unreachable list): it may not come back under its id."""
        if self.agents.pop(agent_id, None) is not None:
            self._note("agents", agent_id)
        if self.unreachable.pop(agent_id, None) is not None:
            self._note("unreachable", agent_id)
        if _remember(self.removed_agents, agent_id):
            self._note("sections", "removed_agents")

    def mark_unreachable(self, agent_id: str, entry: UnreachableEntry) -> None:
        """Move an admitted agent to the unreachable list (Mesos's MarkSlaveUnreachable)."""
        if self.agents.pop(agent_id, None) is not None:
            self._note("agents", agent_id)
        if self.unreachable.get(agent_id) != entry:
            self.unreachable.pop(agent_id, None)   # re-marked: it goes to the end (the newest)
            self.unreachable[agent_id] = entry
            self._note("unreachable", agent_id)

    def mark_reachable(self, agent_id: str) -> None:
        """An unreachable agent re-registered (Mesos's MarkSlaveReachable); admit_agent it too."""
        if self.unreachable.pop(agent_id, None) is not None:
            self._note("unreachable", agent_id)

    def add_framework(self, info: FrameworkInfo) -> None:
        if self.frameworks.get(info.id) != info:
            self.frameworks[info.id] = info
            self._note("frameworks", info.id)

    def remove_framework(self, framework_id: str) -> None:
        if self.frameworks.pop(framework_id, None) is not None:
            self._note("frameworks", framework_id)
        if _remember(self.removed_frameworks, framework_id):
            self._note("sections", "removed_frameworks")

    def update_weights(self, weights: Mapping[str, float]) -> None:
        """Set the weights of the roles in ``weights`` (others keep theirs)."""
        changed = {role: float(weight) for role, weight in weights.items() if self.weights.get(role) != weight}
        if changed:
            self.weights.update(changed)
            self._note("sections", "weights")

    def update_quota(self, role: str, guarantee: str | None = None, limit: str | None = None) -> None:
        """Set a role's quota as the allocator accepted it (with neither,
        clear it). The strings keep explicit zeros (``"gpus:0"``)."""
        record = {key: str(value) for key, value in (("guarantee", guarantee), ("limit", limit))
                  if value is not None}
        if self.quota.get(role) == (record or None):
            return
        if record:
            self.quota[role] = record
        else:
            self.quota.pop(role, None)
        self._note("sections", "quota")

    def update_drain(self, agent_id: str, record: dict | None) -> None:
        """Keep an agent's drain (``DrainInfo.to_record()``), or forget it (None)."""
        if self.drains.get(agent_id) == record:
            return
        if record is None:
            del self.drains[agent_id]
        else:
            self.drains[agent_id] = dict(record)
        self._note("sections", "drains")

    def _note(self, kind: str, key: str) -> None:
        self._count += 1
        self._changed[kind, key] = self._count

    def changes(self) -> RegistryChanges:
        """What changed since it was last stored (or since this registry was
        built or loaded)."""
        found: dict[str, set[str]] = {"agents": set(), "frameworks": set(), "sections": set(), "unreachable": set()}
        for kind, key in self._changed:
            found[kind].add(key)
        return RegistryChanges(frozenset(found["agents"]), frozenset(found["frameworks"]),
                               frozenset(found["sections"]), self._count, frozenset(found["unreachable"]))

    def mark_stored(self, changes: RegistryChanges) -> None:
        """``changes`` (from :meth:`changes`, or part of them) are stored now:
        forget them — but not what changed again after they were taken."""
        for kind, keys in (("agents", changes.agents), ("frameworks", changes.frameworks),
                           ("sections", changes.sections), ("unreachable", changes.unreachable)):
            for key in keys:
                if self._changed.get((kind, key), changes.upto + 1) <= changes.upto:
                    del self._changed[kind, key]

    # ------------------------------------------------------------- format
    def to_document(self) -> dict[str, Any]:
        return {
            "format": REGISTRY_FORMAT,
            "agents": {aid: agent_record(a) for aid, a in sorted(self.agents.items())},
            "frameworks": {fid: framework_record(f) for fid, f in sorted(self.frameworks.items())},
            "removed_agents": list(self.removed_agents),
            "removed_frameworks": list(self.removed_frameworks),
            "weights": dict(sorted(self.weights.items())),
            "quota": {role: dict(record) for role, record in sorted(self.quota.items())},
            "drains": {agent_id: dict(record) for agent_id, record in sorted(self.drains.items())},
            "unreachable": {aid: unreachable_record(entry) for aid, entry in self.unreachable.items()},
        }

    @classmethod
    def from_document(cls, document: object) -> Registry:
        """Parse a stored document. Bad records are skipped (logged); a
        document that is not a map or of a newer format raises
        :class:`RegistryFormatError`."""
        if not document:
            return cls()
        if not isinstance(document, dict):
            raise RegistryFormatError(f"registry must be a JSON object, got {type(document).__name__}")
        version = document.get("format", REGISTRY_FORMAT)
        if version != REGISTRY_FORMAT:
            raise RegistryFormatError(f"registry format {version!r} is not the one this master reads "
                                      f"({REGISTRY_FORMAT})")
        registry = cls()
        for agent_id, record in _entries(document, "agents"):
            try:
                registry.agents[agent_id] = AgentInfo(
                    hostname=_text(record["hostname"]), resources=_parse_resources(record["resources"]),
                    attributes={_text(k): _text(v) for k, v in record.get("attributes", {}).items()},
                    id=agent_id, port=int(record.get("port", 0)), principal=_text(record.get("principal", "")))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning("registry: skipping agent %r: %s", agent_id, exc)
        for framework_id, record in _entries(document, "frameworks"):
            try:
                timeout = float(record.get("failover_timeout", 0.0))
                if not math.isfinite(timeout) or timeout < 0:
                    raise ValueError(f"bad failover_timeout {timeout!r}")
                registry.frameworks[framework_id] = FrameworkInfo(
                    name=_text(record.get("name", "")), role=_text(record.get("role", "*")),
                    failover_timeout=timeout, id=framework_id, user=_text(record.get("user", "")),
                    partition_aware=bool(record.get("partition_aware", False)),
                    principal=_text(record.get("principal", "")),
                    labels=[Label(_text(key), _text(value)) for key, value in record.get("labels", [])])
            except (TypeError, ValueError, AttributeError) as exc:
                log.warning("registry: skipping framework %r: %s", framework_id, exc)
        unreachable = []
        for agent_id, record in _entries(document, "unreachable"):
            try:
                since = float(record["since"])
                if not math.isfinite(since):
                    raise ValueError(f"bad time {since!r}")
                unreachable.append((since, agent_id, UnreachableEntry(since, _text(record.get("hostname", "")),
                                                                      _text(record.get("principal", "")))))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("registry: skipping unreachable agent %r: %s", agent_id, exc)
        registry.unreachable = {agent_id: entry for _, agent_id, entry in sorted(unreachable)}  # oldest first
        for key in ("removed_agents", "removed_frameworks"):
            items = document.get(key, [])
            if isinstance(items, list):
                getattr(registry, key).extend(str(item) for item in items[-MAX_REMOVED:] if isinstance(item, str))
            else:
                log.warning("registry: skipping %s: not a list", key)
        weights = document.get("weights", {})
        for role, weight in (weights.items() if isinstance(weights, dict) else ()):
            if isinstance(weight, (int, float)) and not isinstance(weight, bool) and math.isfinite(weight) \
                    and weight > 0:
                registry.weights[str(role)] = float(weight)
            else:
                log.warning("registry: skipping weight of role %r: %r", role, weight)
        quota = document.get("quota", {})
        for role, record in (quota.items() if isinstance(quota, dict) else ()):
            try:
                if not isinstance(record, dict) or not set(record) <= {"guarantee", "limit"}:
                    raise ValueError("expected {guarantee, limit}")
                for text in record.values():
                    Resources.parse(text)  # raises on anything but a resources string
                registry.quota[str(role)] = {key: str(value) for key, value in record.items()}
            except (TypeError, ValueError, AttributeError, MesoslikeError) as exc:
                log.warning("registry: skipping the quota of role %r: %s", role, exc)
        drains = document.get("drains", {})
        for agent_id, record in (drains.items() if isinstance(drains, dict) else ()):
            try:
                DrainInfo.from_record(record, 0.0, 0.0)   # raises unless it is one
                registry.drains[str(agent_id)] = dict(record)
            except (ValueError, MesoslikeError) as exc:
                log.warning("registry: skipping the drain of agent %r: %s", agent_id, exc)
        return registry


# Agents of one kind share a resources string, and a registry of 10k agents
# parses only a handful of distinct ones; Resources are immutable, so sharing
# the parsed value is safe (a new leader loads faster).
_parse_resources = functools.lru_cache(maxsize=1024)(Resources.parse)


def agent_record(info: AgentInfo) -> dict[str, Any]:
    """An agent's record in the registry document (its id is the key)."""
    record = {"hostname": info.hostname, "resources": str(info.resources), "attributes": dict(info.attributes),
              "port": info.port}
    if info.principal:  # the id belongs to it (docs/security.rst)
        record["principal"] = info.principal
    return record


def framework_record(info: FrameworkInfo) -> dict[str, Any]:
    """A framework's record in the registry document (its id is the key)."""
    record = {"name": info.name, "role": info.role, "failover_timeout": info.failover_timeout, "user": info.user,
              "partition_aware": info.partition_aware}
    if info.principal:  # the id belongs to it (docs/security.rst)
        record["principal"] = info.principal
    if info.labels:
        record["labels"] = [[label.key, label.value] for label in info.labels]
    return record


def unreachable_record(entry: UnreachableEntry) -> dict[str, Any]:
    """An unreachable agent's record in the registry document (its id is the key)."""
    record: dict[str, Any] = {"since": entry.since, "hostname": entry.hostname}
    if entry.principal:
        record["principal"] = entry.principal
    return record


def _remember(items: list[str], item: str) -> bool:
    """Append ``item`` unless present, forgetting the oldest beyond MAX_REMOVED; True if appended."""
    if item in items:
        return False
    items.append(item)
    del items[:-MAX_REMOVED]
    return True


def _entries(document: dict, key: str):
    section = document.get(key, {})
    if not isinstance(section, dict):
        log.warning("registry: skipping %s: not a map", key)
        return
    for item_id, record in section.items():
        if isinstance(item_id, str) and item_id and isinstance(record, dict):
            yield item_id, record
        else:
            log.warning("registry: skipping %s entry %r: not a record", key, item_id)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value
