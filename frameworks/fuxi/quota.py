"""Quota groups: a cap per group, lending of unused quota, hunger order.

Pure arithmetic over :class:`~mesoslike.Resources`, used by the Fuxi core on
every scheduling pass (seed 000, DESIGN §6):

* **cap**: a group may hold at most its ``maximum`` — plus what others lend it.
* **lending**: a group's *lendable* quota is what it neither uses nor waits
  for (``maximum - used - waiting``, per kind, at least 0). Groups that wait
  for more than their own room (*borrowers*) share the lendable quota of the
  others in proportion to their quotas, kind by kind. When the owner needs
  its quota back, the core takes it back by preemption from the groups that
  hold more than their maximum.
* **hunger**: ``used / maximum`` (the largest ratio over the kinds); the
  hungriest group (lowest ratio) is served first when resources free up.

A group without a maximum is unlimited: it neither lends nor borrows, and
its hunger is measured against the cluster it can see.

The quota file (``serve --quota FILE``) configures the groups, the global
blacklist and whether to preempt: :func:`parse_quota` checks the parsed
document (:class:`QuotaFileError` names the field); :func:`load_quota_file`
reads the file, the one piece of I/O here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import attrs

from mesoslike import MesoslikeError, Resources
from mesoslike.frameworks.fuxi.model import read_toml

__all__ = ["QuotaGroup", "compute_caps", "hunger", "QuotaConfig", "QuotaFileError", "load_quota_file",
           "parse_quota"]

EMPTY = Resources()


@attrs.define
class QuotaGroup:
    name: str
    maximum: Resources | None            # None: unlimited
    used: Resources = EMPTY
    waiting: Resources = EMPTY           # what its waiting units still want, in total

    @property
    def limited(self) -> bool:
        return self.maximum is not None

    def over_maximum(self) -> bool:
        return self.maximum is not None and not self.maximum.contains(self.used)


def hunger(group: QuotaGroup, cluster: Resources) -> float:
    """``used / maximum``, the largest ratio over the maximum's kinds (0 for
    an empty maximum). O(kinds)."""
    maximum = group.maximum if group.maximum is not None else cluster
    ratio = 0.0
    for kind in maximum.names():
        cap = maximum.get(kind)
        if cap > 0:
            ratio = max(ratio, group.used.get(kind) / cap)
        elif group.used.get(kind) > 0:
            return float("inf")
    return ratio


def compute_caps(groups: Iterable[QuotaGroup]) -> dict[str, Resources | None]:
    """Each group's cap for this pass: its maximum plus its share of the
    quota others lend (None: unlimited). O(groups x kinds)."""
    groups = list(groups)
    lendable = EMPTY
    borrowers: list[QuotaGroup] = []
    for group in groups:
        if group.maximum is None:
            continue
        room = group.maximum.subtract_clamped(group.used)
        spare = room.subtract_clamped(group.waiting)
        lendable = lendable + spare
        if not room.contains(group.waiting):
            borrowers.append(group)
    caps: dict[str, Resources | None] = {g.name: g.maximum for g in groups}
    if not borrowers or not lendable:
        return caps
    totals = Resources.sum(g.maximum for g in borrowers)  # type: ignore[misc]
    for group in borrowers:
        share = {}
        for kind in lendable.names():
            total = totals.get(kind)
            if total > 0:
                share[kind] = lendable.get(kind) * group.maximum.get(kind) / total  # type: ignore[union-attr]
        caps[group.name] = group.maximum + _floor_millis(share)  # type: ignore[operator]
    return caps


def _floor_millis(amounts: Mapping[str, float]) -> Resources:
    # floored to thousandths so the shares never add up to more than was lent
    return Resources({kind: int(value * 1000) / 1000 for kind, value in amounts.items() if value > 0})


# ------------------------------------------------------------ quota file
class QuotaFileError(MesoslikeError, ValueError):
    """A quota file that cannot be used; the message names the field."""


@attrs.frozen
class QuotaConfig:
    """What ``serve --quota FILE`` configures: quota groups (name -> maximum,
    None = unlimited), the global blacklist, and whether to preempt."""

    groups: Mapping[str, Resources | None] = attrs.field(factory=dict)
    blacklist: frozenset[str] = frozenset()
    preemption: bool = True


def load_quota_file(path: str | Path) -> QuotaConfig:
    """Read a quota file::

        [quota.analytics]          # a quota group and its maximum
        cpus = 8
        mem = 8192
        [quota.adhoc]              # no keys: a group without a maximum
        [blacklist]
        hosts = ["node-3"]         # no slot ever goes to these machines
        [preemption]
        enabled = true             # the default
    """
    return parse_quota(read_toml(path, "quota file", QuotaFileError))


def parse_quota(document: Mapping[str, Any]) -> QuotaConfig:
    """The :class:`QuotaConfig` of a parsed quota file; :class:`QuotaFileError` names what is wrong."""
    unknown = sorted(set(document) - {"quota", "blacklist", "preemption"})
    if unknown:
        raise QuotaFileError(f"unknown table(s) {', '.join(map(repr, unknown))}; known: blacklist, preemption, quota")
    return QuotaConfig(_groups(document.get("quota", {})), _blacklist(document.get("blacklist", {})),
                       _preemption(document.get("preemption", {})))


def _groups(quota: object) -> dict[str, Resources | None]:
    if not isinstance(quota, Mapping):
        raise QuotaFileError("quota: must be tables like [quota.<group>] with cpus = 8, mem = 8192")
    groups: dict[str, Resources | None] = {}
    for name, table in quota.items():
        where = f"quota.{name}"
        if not isinstance(table, Mapping):
            raise QuotaFileError(f"{where}: must be a table ([{where}] with cpus = 8, mem = 8192)")
        parts = []
        for kind, value in table.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0:
                raise QuotaFileError(f"{where}.{kind}: must be a number >= 0, got {value!r}")
            parts.append(f"{kind}:{value}")
        try:
            groups[name] = Resources.parse(";".join(parts)) if parts else None
        except MesoslikeError as exc:
            raise QuotaFileError(f"{where}: {exc}") from None
    return groups


def _blacklist(blacklist: object) -> frozenset[str]:
    if not isinstance(blacklist, Mapping) or set(blacklist) - {"hosts"}:
        raise QuotaFileError("blacklist: must be a table with hosts = [\"host\", ...]")
    hosts = blacklist.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise QuotaFileError(f"blacklist.hosts: must be a list of hostnames, got {hosts!r}")
    return frozenset(hosts)


def _preemption(preemption: object) -> bool:
    if not isinstance(preemption, Mapping) or set(preemption) - {"enabled"}:
        raise QuotaFileError("preemption: must be a table with enabled = true|false")
    enabled = preemption.get("enabled", True)
    if not isinstance(enabled, bool):
        raise QuotaFileError(f"preemption.enabled: must be true or false, got {enabled!r}")
    return enabled
