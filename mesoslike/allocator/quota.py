"""Quota bookkeeping: per-role guarantees (resources set aside first) and
limits (never allocated beyond), over the role hierarchy.

A role's quota covers its whole subtree: consumption of ``eng`` includes
``eng/prod``. Quantities are kept as scalar thousandths (see
``mesoslike.resources``) because these checks sit on the allocation path.
Required *headroom* is the sum, over the top-most roles with a guarantee, of
the part of the guarantee not yet consumed; the allocator keeps that much
unallocated for them and never lets another role eat into it.
"""

from __future__ import annotations

from typing import Mapping

from mesoslike.allocator.roles import ancestors
from mesoslike.errors import QuotaError
from mesoslike.resources import Resources

__all__ = ["QuotaBook", "Millis", "add_millis"]

Millis = dict[str, int]


def _millis(value: Resources | str | Mapping[str, float] | None, what: str, role: str) -> Millis | None:
    """Quota quantities as thousandths. Unlike ``Resources``, a string or a
    mapping keeps explicit zeros, so that ``limit="gpus:0"`` means "no gpus"."""
    if value is None:
        return None
    if isinstance(value, Resources):
        if any(value.ranges(n) for n in value.names()):
            raise QuotaError(f"{what} of role {role!r} may only hold scalar resources, got {value}")
        return dict(value._millis)
    if isinstance(value, str):
        pairs = {}
        for part in filter(None, (p.strip() for p in value.split(";"))):
            name, _, amount = part.partition(":")
            pairs[name.strip()] = amount.strip()
        value = pairs
    if not isinstance(value, Mapping):
        raise QuotaError(f"{what} of role {role!r} must be Resources, a string or a mapping, got {value!r}")
    millis: Millis = {}
    for name, amount in value.items():
        try:
            parsed = Resources({name: float(amount)})
        except (ValueError, TypeError) as exc:
            raise QuotaError(f"bad {what} of role {role!r}: {name}:{amount!r} ({exc})") from None
        millis[name] = parsed._millis.get(name, 0)
    return millis


def _positive_gap(target: Millis, have: Mapping[str, int]) -> Millis:
    gap = {}
    for kind, amount in target.items():
        left = amount - have.get(kind, 0)
        if left > 0:
            gap[kind] = left
    return gap


def add_millis(into: Millis, more: Mapping[str, int], sign: int = 1) -> None:
    """``into += sign * more``, per kind, dropping kinds that reach zero."""
    for kind, amount in more.items():
        value = into.get(kind, 0) + sign * amount
        if value:
            into[kind] = value
        else:
            into.pop(kind, None)


class QuotaBook:
    """Guarantees, limits and the consumption of the roles that have quota."""

    def __init__(self) -> None:
        self.guarantees: dict[str, Millis] = {}
        self.limits: dict[str, Millis] = {}
        self.consumed: dict[str, Millis] = {}

    def __bool__(self) -> bool:
        return bool(self.guarantees) or bool(self.limits)

    # ------------------------------------------------------------ updates
    def validate(self, role: str, guarantee: Resources | None, limit: Resources | None) -> tuple[Millis | None, Millis | None]:
        """Check a new quota for ``role`` against its own parts and the
        hierarchy; return it as millis. Changes nothing."""
        g = _millis(guarantee, "guarantee", role)
        lim = _millis(limit, "limit", role)
        if g and lim:
            for kind, amount in g.items():
                if kind in lim and lim[kind] < amount:
                    raise QuotaError(
                        f"guarantee of role {role!r} exceeds its limit for {kind}: "
                        f"{Resources._make(g, {})} > {Resources._make(lim, {})}"
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
            gap = _positive_gap(total, guarantees[parent])
            if gap:
                raise QuotaError(
                    f"guarantees of the sub-roles of {parent!r} add up to {Resources._make(total, {})}, "
                    f"more than its guarantee {Resources._make(guarantees[parent], {})}"
                )

    def set(self, role: str, guarantee: Millis | None, limit: Millis | None, consumed: Millis) -> None:
        """Install a validated quota (``None``/empty clears that part)."""
        if guarantee:
            self.guarantees[role] = guarantee
        else:
            self.guarantees.pop(role, None)
        if limit is not None:
            self.limits[role] = limit
        else:
            self.limits.pop(role, None)
        if role in self.guarantees or role in self.limits:
            self.consumed[role] = dict(consumed)
        else:
            self.consumed.pop(role, None)

    def on_change(self, role: str, millis: Mapping[str, int], sign: int) -> None:
        """Resources were allocated (+1) to or released (-1) from ``role``."""
        consumed = self.consumed
        for path in ancestors(role):
            mine = consumed.get(path)
            if mine is not None:
                add_millis(mine, millis, sign)

    # ------------------------------------------------------------ queries
    def limit_caps(self, role: str) -> Millis | None:
        """Room left under the limits of the role and its ancestors, per
        limited kind (0 = nothing more); None when nothing limits it."""
        caps: Millis | None = None
        for path in ancestors(role):
            limit = self.limits.get(path)
            if limit is None:
                continue
            consumed = self.consumed[path]
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
        for path in ancestors(role):
            if path in self.guarantees:
                root = path
        return root

    def unsatisfied(self, root: str) -> Millis:
        """The part of ``root``'s guarantee not yet consumed."""
        return _positive_gap(self.guarantees[root], self.consumed[root])

    def required_headroom(self) -> Millis:
        """Unconsumed guarantees of the top-most guaranteed roles, summed."""
        need: Millis = {}
        for role in self.guarantees:
            if self.guarantee_root(role) == role:
                add_millis(need, self.unsatisfied(role))
        return need

    def snapshot(self) -> dict[str, dict[str, str | None]]:
        roles = sorted(set(self.guarantees) | set(self.limits))
        return {
            role: {
                "guarantee": str(Resources._make(dict(self.guarantees.get(role, {})), {})),
                "limit": str(Resources._make(dict(self.limits[role]), {})) if role in self.limits else None,
                "consumed": str(Resources._make(dict(self.consumed.get(role, {})), {})),
            }
            for role in roles
        }
