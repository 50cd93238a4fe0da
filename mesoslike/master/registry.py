"""The registry: the master's hard state, which survives a failover.

What a new leader must know before it serves (DESIGN §4): the admitted
agents, the known frameworks with their failover timeouts, the agents and
frameworks that were removed (they may not come back under their old ids),
role weights and quota. Everything else — tasks, offers, allocations — is
soft state, rebuilt from re-registering agents and re-subscribing
frameworks.

This module is pure: the document is plain JSON-able data, and where it is
kept (a file for a standalone master, ZooKeeper for an HA cluster) is the
runtime's business. A record that does not parse is skipped with a logged
warning; the rest of the registry still loads.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import attrs

from mesoslike.errors import MesoslikeError
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo

__all__ = ["Registry", "RegistryFormatError", "REGISTRY_FORMAT", "MAX_REMOVED"]

log = logging.getLogger("mesoslike.master.registry")

REGISTRY_FORMAT = 1
#: removed agents/frameworks remembered (the oldest are forgotten first)
MAX_REMOVED = 10_000


class RegistryFormatError(MesoslikeError, ValueError):
    """The registry document as a whole is unusable (not a map, or a newer
    format this master does not understand)."""


@attrs.define
class Registry:
    agents: dict[str, AgentInfo] = attrs.field(factory=dict)
    frameworks: dict[str, FrameworkInfo] = attrs.field(factory=dict)
    removed_agents: list[str] = attrs.field(factory=list)
    removed_frameworks: list[str] = attrs.field(factory=list)
    weights: dict[str, float] = attrs.field(factory=dict)

    # ------------------------------------------------------------ changes
    def admit_agent(self, info: AgentInfo) -> None:
        self.agents[info.id] = info

    def remove_agent(self, agent_id: str) -> None:
        self.agents.pop(agent_id, None)
        _remember(self.removed_agents, agent_id)

    def add_framework(self, info: FrameworkInfo) -> None:
        self.frameworks[info.id] = info

    def remove_framework(self, framework_id: str) -> None:
        self.frameworks.pop(framework_id, None)
        _remember(self.removed_frameworks, framework_id)

    # ------------------------------------------------------------- format
    def to_document(self) -> dict[str, Any]:
        return {
            "format": REGISTRY_FORMAT,
            "agents": {aid: {"hostname": a.hostname, "resources": str(a.resources),
                             "attributes": dict(a.attributes), "port": a.port}
                       for aid, a in sorted(self.agents.items())},
            "frameworks": {fid: {"name": f.name, "role": f.role, "failover_timeout": f.failover_timeout,
                                 "user": f.user, "partition_aware": f.partition_aware}
                           for fid, f in sorted(self.frameworks.items())},
            "removed_agents": list(self.removed_agents),
            "removed_frameworks": list(self.removed_frameworks),
            "weights": dict(sorted(self.weights.items())),
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
                    hostname=_text(record["hostname"]), resources=Resources.parse(record["resources"]),
                    attributes={_text(k): _text(v) for k, v in record.get("attributes", {}).items()},
                    id=agent_id, port=int(record.get("port", 0)))
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
                    partition_aware=bool(record.get("partition_aware", False)))
            except (TypeError, ValueError, AttributeError) as exc:
                log.warning("registry: skipping framework %r: %s", framework_id, exc)
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
        return registry


def _remember(items: list[str], item: str) -> None:
    if item not in items:
        items.append(item)
        del items[:-MAX_REMOVED]


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
