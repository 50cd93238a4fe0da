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
"""

from __future__ import annotations

from typing import Iterable, Mapping

import attrs

from mesoslike import Resources

__all__ = ["QuotaGroup", "compute_caps", "hunger"]

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
