"""Scalar quantities as plain dicts of exact thousandths (``{"cpus": 1500}``).

The allocator's quota and headroom arithmetic sits on the allocation path,
so it works on these dicts (what :meth:`Resources.millis` gives) instead of
building a ``Resources`` per step. Every function is O(kinds).
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["Millis", "add_millis", "positive_gap"]

#: resource kind -> thousandths
Millis = dict[str, int]


def add_millis(into: Millis, more: Mapping[str, int], sign: int = 1) -> None:
    """``into += sign * more``, per kind, dropping kinds that reach zero."""
    for kind, amount in more.items():
        value = into.get(kind, 0) + sign * amount
        if value:
            into[kind] = value
        else:
            into.pop(kind, None)


def positive_gap(target: Mapping[str, int], have: Mapping[str, int]) -> Millis:
    """Per kind of ``target``, how much ``have`` falls short of it (kinds
    with no shortfall are left out)."""
    gap = {}
    for kind, amount in target.items():
        left = amount - have.get(kind, 0)
        if left > 0:
            gap[kind] = left
    return gap
