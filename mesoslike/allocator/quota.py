"""Quota bookkeeping: per-role guarantees (resources set aside first) and
limits (never allocated beyond), over the role hierarchy.

A role's quota covers its whole subtree: consumption of ``eng`` includes
``eng/prod`` (the :class:`~mesoslike.allocator.role_tree.RoleTree` keeps it).
Quantities are kept as scalar thousandths (see ``mesoslike.resources``)
because these checks sit on the allocation path.
Required *headroom* is the sum, over the top-most roles with a guarantee, of
the part of the guarantee not yet consumed; the allocator keeps that much
unallocated for them and never lets another role eat into it.
"""

from __future__ import annotations

from typing import Mapping

from mesoslike.allocator.millis import Millis, add_millis, positive_gap
from mesoslike.allocator.role_tree import RoleTree
from mesoslike.allocator.roles import ancestors, lineage
from mesoslike.errors import QuotaError
from mesoslike.resources import Resources, format_millis

__all__ = ["QuotaBook", "QuotaAmount"]

#: how quota quantities may be given
QuotaAmount = Resources | str | Mapping[str, float]


def _quantities(value: QuotaAmount | None, what: str, role: str) -> Millis | None:
    """Quota quantities as thousandths. Unlike ``Resources``, a string or a
    mapping keeps explicit zeros, so that ``limit="gpus:0"`` means "no gpus"."""
    if value is None:
        return None
    if isinstance(value, Resources):
        if value.range_names():
            raise QuotaError(f"{what} of role {role!r} may only hold scalar resources, got {value}")
        return dict(value.millis())
    pairs: Mapping[str, float | str]
    if isinstance(value, str):
        parsed: dict[str, float | str] = {}
        for part in filter(None, (p.strip() for p in value.split(";"))):
            name, _, text = part.partition(":")
            parsed[name.strip()] = text.strip()
        pairs = parsed
    elif isinstance(value, Mapping):
        pairs = value
    else:
        raise QuotaError(f"{what} of role {role!r} must be Resources, a string or a mapping, got {value!r}")
    millis: Millis = {}
    for name, amount in pairs.items():
        try:
            one = Resources({name: float(amount)})
        except (ValueError, TypeError) as exc:  # ResourcesError is a ValueError
            raise QuotaError(f"bad {what} of role {role!r}: {name}:{amount!r} ({exc})") from None
        millis[name] = one.millis().get(name, 0)
    return millis


class QuotaBook:
    """Guarantees and limits per role; what roles consume comes from the
    :class:`RoleTree` the book is given (which tracks it while quota exists).

    Complexity: the queries walk a role's ancestors, O(depth · kinds);
    ``required_headroom`` is O(roles with a guarantee · depth · kinds).
    """

    def __init__(self, tree: RoleTree) -> None:
        self.guarantees: dict[str, Millis] = {}
        self.limits: dict[str, Millis] = {}
        #: static reservations per reservation role (all agents, stripped
        #: thousandths): they count as consumed by the role and its
        #: ancestors whether allocated or not, as in Mesos
        self.reservations: dict[str, Millis] = {}
        self._tree = tree

    def __bool__(self) -> bool:
        return bool(self.guarantees) or bool(self.limits)

    # ------------------------------------------------------------ updates
    def validate(self, role: str, guarantee: QuotaAmount | None,
                 limit: QuotaAmount | None) -> tuple[Millis | None, Millis | None]:
        """Check a new quota for ``role`` against its own parts and the
        hierarchy; return it as millis. Changes nothing."""
        g = _quantities(guarantee, "guarantee", role)
        lim = _quantities(limit, "limit", role)
        if g and lim:
            for kind, amount in g.items():
                if kind in lim and lim[kind] < amount:
                    raise QuotaError(
                        f"guarantee of role {role!r} exceeds its limit for {kind}: "
                        f"{format_millis(g)} > {format_millis(lim)}"
                    )
        guarantees = dict(self.guarantees)
        if g:
            guarantees[role] = g
        else:
            guarantees.pop(role, None)
        self._check_nesting(guarantees)
        return g, lim

    @staticmethod
    def _check_nesting(guarantees: Mapping[str, Millis]) -> None:
        """Children's guarantees (nearest guaranteed descendants) may not add
        up to more than their parent's guarantee."""
        sums: dict[str, Millis] = {}
        for role in guarantees:
            parent = next((a for a in ancestors(role)[1:] if a in guarantees), None)
            if parent is not None:
                add_millis(sums.setdefault(parent, {}), guarantees[role])
        for parent, total in sums.items():
            gap = positive_gap(total, guarantees[parent])
            if gap:
                raise QuotaError(
                    f"guarantees of the sub-roles of {parent!r} add up to {format_millis(total)}, "
                    f"more than its guarantee {format_millis(guarantees[parent])}"
                )

    def set(self, role: str, guarantee: Millis | None, limit: Millis | None) -> None:
        """Install a validated quota (``None``/empty clears that part)."""
        if guarantee:
            self.guarantees[role] = guarantee
        else:
            self.guarantees.pop(role, None)
        if limit is not None:
            self.limits[role] = limit
        else:
            self.limits.pop(role, None)

    # ------------------------------------------------------------ queries
    def reserve(self, role: str, millis: Mapping[str, int], sign: int) -> None:
        """An agent with ``millis`` reserved for ``role`` came (+1) or went (-1)."""
        into = self.reservations.setdefault(role, {})
        add_millis(into, millis, sign)
        if not into:
            del self.reservations[role]

    def consumed(self, role: str) -> Mapping[str, int]:
        """What the role's subtree consumes (read-only): the unreserved
        resources its frameworks hold plus every reservation of a role in
        the subtree, allocated or not (Mesos: "consumed quota =
        reservations + unreserved allocation"). O(depth · kinds), plus
        O(reservation roles · kinds) when some are reserved."""
        held = self._tree.consumed(role)
        if not self.reservations:
            return held
        total: Millis | None = None
        for reservation, millis in self.reservations.items():
            if role in lineage(reservation):
                if total is None:
                    total = dict(held)
                add_millis(total, millis)
        return held if total is None else total

    def limit_caps(self, role: str) -> Millis | None:
        """Room left under the limits of the role and its ancestors, per
        limited kind (0 = nothing more); None when nothing limits it."""
        caps: Millis | None = None
        limits = self.limits
        for path in lineage(role):
            limit = limits.get(path)
            if limit is None:
                continue
            consumed = self.consumed(path)
            if caps is None:
                caps = {}
            for kind, amount in limit.items():
                room = max(0, amount - consumed.get(kind, 0))
                if kind not in caps or room < caps[kind]:
                    caps[kind] = room
        return caps

    def guarantee_root(self, role: str) -> str | None:
        """The top-most role (the role itself or an ancestor) with a guarantee."""
        root = None
        for path in lineage(role):
            if path in self.guarantees:
                root = path
        return root

    def unsatisfied(self, root: str) -> Millis:
        """The part of ``root``'s guarantee not yet consumed."""
        return positive_gap(self.guarantees[root], self.consumed(root))

    def required_headroom(self) -> Millis:
        """Unconsumed guarantees of the top-most guaranteed roles, summed."""
        need: Millis = {}
        for role in self.guarantees:
            if self.guarantee_root(role) == role:
                add_millis(need, self.unsatisfied(role))
        return need

    # ------------------------------------------------ against the free pool
    # (``free``: the agents' free pool, unreserved scalar thousandths, as the agent book keeps it)
    def caps(self, role: str, free: Mapping[str, int], owed: Millis | None = None) -> Millis:
        """Per scalar kind, the most an allocation to ``role`` may take: the
        room under its (and its ancestors') limits, and the free pool minus
        the headroom other roles' guarantees still need. With ``owed`` (the
        guarantee stage), the owed part of the role's own guarantee is capped
        by what is owed and the limits only — it is not held back for other
        roles' unmet guarantees (Mesos's ``MultiQuotaAbsentFrameworks``).
        On the allocation path: O(depth · kinds + roles with a guarantee · depth · kinds)."""
        caps = self.limit_caps(role) or {}
        if self.guarantees:
            need = self.required_headroom()
            root = self.guarantee_root(role)
            own = self.unsatisfied(root) if root is not None else {}
            for kind, amount in need.items():
                if owed is not None and kind in owed:
                    continue
                room = max(0, free.get(kind, 0) - amount + own.get(kind, 0))
                if kind not in caps or room < caps[kind]:
                    caps[kind] = room
        if owed is not None:
            for kind, amount in owed.items():
                caps[kind] = min(caps.get(kind, amount), amount)
        return caps

    def held_for_guarantees(self, role: str, free: Mapping[str, int]) -> tuple[list[str], Millis]:
        """The kinds of which the free pool has some but ``role`` may take
        none, all of it held for other roles' unmet guarantees (what
        :meth:`caps` caps at 0), and those guarantees' unmet part."""
        if not self.guarantees:
            return [], {}
        need = self.required_headroom()
        root = self.guarantee_root(role)
        own = self.unsatisfied(root) if root is not None else {}
        held = sorted(kind for kind, amount in need.items()
                      if free.get(kind, 0) > 0 and free.get(kind, 0) - amount + own.get(kind, 0) <= 0)
        return held, need

    def limits_reached(self, role: str) -> list[tuple[str, list[str], Millis, Mapping[str, int]]]:
        """(role, kinds, its limit, what it consumes) for the role and each
        ancestor whose limit is reached for some kinds."""
        reached = []
        for path in lineage(role):
            limit = self.limits.get(path)
            if limit is None:
                continue
            consumed = self.consumed(path)
            full = sorted(kind for kind, amount in limit.items() if consumed.get(kind, 0) >= amount)
            if full:
                reached.append((path, full, limit, consumed))
        return reached

    def over_limit(self, role: str) -> Millis:
        """How much the role's subtree consumes beyond its own limit (per kind over it)."""
        limit = self.limits.get(role)
        if limit is None:
            return {}
        consumed = self.consumed(role)
        return {k: consumed.get(k, 0) - v for k, v in limit.items() if consumed.get(k, 0) > v}

    def short_of_guarantee(self, root: str, free: Mapping[str, int]) -> Millis:
        """How much of ``root``'s unmet guarantee the free pool cannot cover (per kind short)."""
        return {k: v - free.get(k, 0) for k, v in self.unsatisfied(root).items() if v > free.get(k, 0)}

    def capacity_shortfall(self, role: str, guarantee: Millis | None,
                           total: Mapping[str, int]) -> tuple[Millis, Millis]:
        """With ``guarantee`` as ``role``'s (None or empty: none), what the
        guarantees of the top-level guaranteed roles add up to, and what of
        it the agents' ``total`` lacks (Mesos's capacity heuristic)."""
        guarantees = dict(self.guarantees)
        if guarantee:
            guarantees[role] = guarantee
        else:
            guarantees.pop(role, None)
        wanted: Millis = {}
        for path, amounts in guarantees.items():
            if not any(ancestor in guarantees for ancestor in lineage(path)[1:]):
                for kind, amount in amounts.items():   # explicit zeros kept: the refusal names them
                    wanted[kind] = wanted.get(kind, 0) + amount
        return wanted, positive_gap(wanted, total)

    def snapshot(self) -> dict[str, dict[str, str | None]]:
        roles = sorted(set(self.guarantees) | set(self.limits))
        return {
            role: {
                "guarantee": format_millis(self.guarantees.get(role, {})),
                "limit": format_millis(self.limits[role]) if role in self.limits else None,
                "consumed": format_millis(self.consumed(role)),
            }
            for role in roles
        }
