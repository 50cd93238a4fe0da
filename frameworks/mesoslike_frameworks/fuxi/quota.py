"""Quota groups: a cap per group, lending of unused quota, hunger order.

Pure arithmetic over :class:`~mesoslike.Resources`, used by the Fuxi core on
every scheduling pass (seed 000, docs/fuxi-scheduling.rst):

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

* **policy**: ``FIFO`` or ``FAIR`` among units of equal priority is the
  group's, as seed 000 has it: each quota group has one waiting queue, and
  the policy is that queue's sort key.

The quota file (``serve --quota FILE``) configures the groups and their
policies, the global blacklist and whether to preempt: :func:`parse_quota`
checks the parsed document (:class:`QuotaFileError` names the field);
:func:`load_quota_file` reads the file, the one piece of I/O here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import attrs

from mesoslike import MesoslikeError, Resources
from mesoslike_frameworks.fuxi.blacklist import DEFAULT_REPORT_SECONDS, DEFAULT_REPORTS_NEEDED
from mesoslike_frameworks.fuxi.model import POLICIES, read_toml

__all__ = ["QuotaGroup", "compute_caps", "hunger", "QuotaConfig", "QuotaFileError", "load_quota_file",
           "parse_quota"]

EMPTY = Resources()


@attrs.define
class QuotaGroup:
    name: str
    maximum: Resources | None            # None: unlimited
    used: Resources = EMPTY
    waiting: Resources = EMPTY           # what its waiting units still want, in total
    policy: str = "FIFO"                 # FIFO or FAIR among equal priority (seed 000: the group's)

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
    None = unlimited) and their policies (name -> FIFO or FAIR; a group not
    named is FIFO), the global blacklist (the operators' hosts, and how many
    different jobs must report a host, within how many seconds, to put it
    there: docs/fuxi-scheduling.rst), and whether to preempt."""

    groups: Mapping[str, Resources | None] = attrs.field(factory=dict)
    blacklist: frozenset[str] = frozenset()
    preemption: bool = True
    policies: Mapping[str, str] = attrs.field(factory=dict)
    blacklist_reports: int = DEFAULT_REPORTS_NEEDED
    blacklist_report_seconds: float = DEFAULT_REPORT_SECONDS


def load_quota_file(path: str | Path) -> QuotaConfig:
    """Read a quota file::

        [quota.analytics]          # a quota group and its maximum
        cpus = 8
        mem = 8192
        policy = "FAIR"            # among equal priority; default FIFO
        [quota.adhoc]              # no keys: a group without a maximum
        [blacklist]
        hosts = ["node-3"]         # no slot ever goes to these machines
        reports = 2                # jobs that must report a host to blacklist it (default 2)
        report_seconds = 600       # how long a report counts (default 600)
        [preemption]
        enabled = true             # the default
    """
    return parse_quota(read_toml(path, "quota file", QuotaFileError))


def parse_quota(document: Mapping[str, Any]) -> QuotaConfig:
    """The :class:`QuotaConfig` of a parsed quota file; :class:`QuotaFileError` names what is wrong."""
    unknown = sorted(set(document) - {"quota", "blacklist", "preemption"})
    if unknown:
        raise QuotaFileError(f"unknown table(s) {', '.join(map(repr, unknown))}; known: blacklist, preemption, quota")
    groups, policies = _groups(document.get("quota", {}))
    blacklist = document.get("blacklist", {})
    hosts = _blacklist(blacklist)
    return QuotaConfig(groups, hosts, _preemption(document.get("preemption", {})), policies,
                       _reports(blacklist), _report_seconds(blacklist))


def _groups(quota: object) -> tuple[dict[str, Resources | None], dict[str, str]]:
    if not isinstance(quota, Mapping):
        raise QuotaFileError("quota: must be tables like [quota.<group>] with cpus = 8, mem = 8192")
    groups: dict[str, Resources | None] = {}
    policies: dict[str, str] = {}
    for name, table in quota.items():
        where = f"quota.{name}"
        if not isinstance(table, Mapping):
            raise QuotaFileError(f"{where}: must be a table ([{where}] with cpus = 8, mem = 8192)")
        parts = []
        for kind, value in table.items():
            if kind == "policy":
                if value not in POLICIES:
                    raise QuotaFileError(f"{where}.policy: must be FIFO or FAIR, got {value!r}")
                policies[name] = value
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0:
                raise QuotaFileError(f"{where}.{kind}: must be a number >= 0, got {value!r}")
            parts.append(f"{kind}:{value}")
        try:
            groups[name] = Resources.parse(";".join(parts)) if parts else None
        except MesoslikeError as exc:
            raise QuotaFileError(f"{where}: {exc}") from None
    return groups, policies


def _blacklist(blacklist: object) -> frozenset[str]:
    if not isinstance(blacklist, Mapping) or set(blacklist) - {"hosts", "reports", "report_seconds"}:
        raise QuotaFileError("blacklist: must be a table with hosts = [\"host\", ...], reports = 2, "
                             "report_seconds = 600")
    hosts = blacklist.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise QuotaFileError(f"blacklist.hosts: must be a list of hostnames, got {hosts!r}")
    return frozenset(hosts)


def _reports(blacklist: Mapping[str, Any]) -> int:
    reports = blacklist.get("reports", DEFAULT_REPORTS_NEEDED)
    if not isinstance(reports, int) or isinstance(reports, bool) or reports < 1:
        raise QuotaFileError(f"blacklist.reports: must be an integer >= 1, got {reports!r}")
    return reports


def _report_seconds(blacklist: Mapping[str, Any]) -> float:
    seconds = blacklist.get("report_seconds", DEFAULT_REPORT_SECONDS)
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise QuotaFileError(f"blacklist.report_seconds: must be a number of seconds > 0, got {seconds!r}")
    return float(seconds)


def _preemption(preemption: object) -> bool:
    if not isinstance(preemption, Mapping) or set(preemption) - {"enabled"}:
        raise QuotaFileError("preemption: must be a table with enabled = true|false")
    enabled = preemption.get("enabled", True)
    if not isinstance(enabled, bool):
        raise QuotaFileError(f"preemption.enabled: must be true or false, got {enabled!r}")
    return enabled
