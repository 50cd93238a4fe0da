"""Whether one offer can take one instance of an app, and if not why —
Marathon's offer matcher and its "reason funnel" (``NoOfferMatchReason``).

Pure. :func:`match` checks, in the funnel's order, the role, the
constraints, the agent's maintenance (draining), then each resource kind,
and answers the resources to take (with the host ports picked) or the first
reason the offer fails. :class:`OfferStats` counts, per reason, how many
offers reached that check and how many it turned down: ``/v2/queue``'s
``processedOffersSummary``.
"""

from __future__ import annotations

import random
from typing import Iterable, Mapping

import attrs

from mesoslike import Resources
from mesoslike_frameworks.constraints import Placements

__all__ = ["Match", "match", "REASONS", "OfferStats", "Fit", "resources_of", "explain"]

#: Marathon's funnel: an offer that is not used counts against the first of these it fails
REASONS = ("UnfulfilledRole", "UnfulfilledConstraint", "NoCorrespondingReservationFound", "AgentMaintenance",
           "InsufficientCpus", "InsufficientMemory", "InsufficientDisk", "InsufficientGpus", "InsufficientPorts",
           "DeclinedScarceResources")
_KIND_REASONS = (("cpus", "InsufficientCpus"), ("mem", "InsufficientMemory"), ("disk", "InsufficientDisk"),
                 ("gpus", "InsufficientGpus"))
#: what each reason means, in a sentence (the CLI's "why waiting")
_MEANING = {
    "UnfulfilledRole": "no offer has resources of the app's accepted roles",
    "UnfulfilledConstraint": "a placement constraint refuses the agents offered",
    "NoCorrespondingReservationFound": "no reservation for the app",
    "AgentMaintenance": "the agents offered are draining",
    "InsufficientCpus": "no offer has enough cpus",
    "InsufficientMemory": "no offer has enough mem",
    "InsufficientDisk": "no offer has enough disk",
    "InsufficientGpus": "no offer has enough gpus",
    "InsufficientPorts": "no offer has the ports the app needs",
    "DeclinedScarceResources": "offers with GPUs are kept for apps that need them",
}


@attrs.frozen
class Fit:
    """What one instance takes of an offer: its resources and host ports."""

    resources: Resources
    host_ports: tuple[int, ...]


@attrs.frozen
class Match:
    """The outcome of one offer for one instance: ``fit`` if it fits, else
    ``reason`` (one of :data:`REASONS`) and ``checks``, the reasons whose
    check the offer reached (so passed, but the last)."""

    fit: Fit | None
    reason: str = ""
    checks: tuple[str, ...] = ()


def resources_of(cpus: float, mem: float, disk: float, gpus: int, host_ports: Iterable[int] = ()) -> Resources:
    """An instance's resources, with its host ports as single-port ranges."""
    ports = sorted(host_ports)
    return Resources({"cpus": cpus, "mem": mem, "disk": disk, "gpus": gpus},
                     ranges={"ports": [(port, port) for port in ports]} if ports else None)


def _pick_ports(free: tuple[tuple[int, int], ...], wanted: list[int], rng: random.Random | None) -> tuple[int, ...] | None:
    """Host ports for the app's port definitions: the ones asked for
    (non-zero) exactly, a free one for each 0 — picked at random, as
    Marathon does, so that agents sharing one machine's port range rarely
    hand out the same port (lowest first without ``rng``). None if the
    offer lacks them."""
    def has(port: int) -> bool:
        return any(lo <= port <= hi for lo, hi in free)
    fixed = {port for port in wanted if port}
    if not all(has(port) for port in fixed):
        return None
    total = sum(hi - lo + 1 for lo, hi in free)
    if total - len(fixed) < sum(1 for port in wanted if not port):
        return None
    taken = set(fixed)

    def nth(index: int) -> int:
        for lo, hi in free:
            if index <= hi - lo:
                return lo + index
            index -= hi - lo + 1
        raise IndexError(index)
    picked: list[int] = []
    spare = (port for lo, hi in free for port in range(lo, hi + 1))
    for port in wanted:
        if not port:
            port = 0
            for _ in range(16 if rng is not None else 0):
                candidate = nth(rng.randrange(total))  # type: ignore[union-attr]
                if candidate not in taken:
                    port = candidate
                    break
            while not port:
                candidate = next(spare)
                if candidate not in taken:
                    port = candidate
        taken.add(port)
        picked.append(port)
    return tuple(picked)


def match(*, cpus: float, mem: float, disk: float, gpus: int, ports: list[int], hostname: str,
          attributes: Mapping[str, str], available: Resources, placements: Placements | None,
          draining: bool, role_ok: bool = True, rng: random.Random | None = None) -> Match:
    """One instance (``cpus`` ... ``gpus``; ``ports``: its port definitions'
    host ports, 0 = any) against what is ``available`` of an offer from
    agent ``hostname`` (``attributes``), with the app's ``placements``
    (constraints and where its instances are). ``draining``: the agent is
    in maintenance. ``role_ok``: the offer has resources of a role the app
    accepts."""
    checks: list[str] = ["UnfulfilledRole"]
    if not role_ok:
        return Match(None, "UnfulfilledRole", tuple(checks))
    checks.append("UnfulfilledConstraint")
    if placements is not None and placements.constraints \
            and placements.refusing(hostname, attributes) is not None:
        return Match(None, "UnfulfilledConstraint", tuple(checks))
    checks += ["NoCorrespondingReservationFound", "AgentMaintenance"]
    if draining:
        return Match(None, "AgentMaintenance", tuple(checks))
    wanted = {"cpus": cpus, "mem": mem, "disk": disk, "gpus": gpus}
    for kind, reason in _KIND_REASONS:
        checks.append(reason)
        if wanted[kind] > 0 and available.get(kind) + 1e-9 < wanted[kind]:
            return Match(None, reason, tuple(checks))
    checks.append("InsufficientPorts")
    host_ports: tuple[int, ...] = ()
    if ports:
        picked = _pick_ports(available.ranges("ports"), ports, rng)
        if picked is None:
            return Match(None, "InsufficientPorts", tuple(checks))
        host_ports = picked
    # DeclinedScarceResources (GPU agents kept for GPU apps) is not enforced: docs/services.rst
    return Match(Fit(resources_of(cpus, mem, disk, gpus, host_ports), host_ports), "", tuple(checks))


class OfferStats:
    """Per reason, how many offers reached its check (``processed``) and
    how many it turned down (``declined``); ``offers``/``unused``: offers
    seen and not used at all."""

    def __init__(self) -> None:
        self.processed: dict[str, int] = {reason: 0 for reason in REASONS}
        self.declined: dict[str, int] = {reason: 0 for reason in REASONS}
        self.offers = 0
        self.unused = 0

    def count(self, outcome: Match) -> None:
        self.offers += 1
        for reason in outcome.checks:
            self.processed[reason] += 1
        if outcome.fit is None:
            self.unused += 1
            self.declined[outcome.reason] += 1

    def summary(self) -> list[dict[str, object]]:
        return [{"reason": reason, "declined": self.declined[reason], "processed": self.processed[reason]}
                for reason in REASONS]

    def main_reason(self) -> str | None:
        """The reason that turned down most offers, if any did."""
        best = max(REASONS, key=lambda reason: self.declined[reason])
        return best if self.declined[best] else None


def explain(reason: str | None) -> str:
    """A sentence for a reason of :data:`REASONS`."""
    return _MEANING.get(reason or "", "no offer has been seen since it was queued")
