"""Fair shares as YARN's FairScheduler computes them, as pure functions:
what fair-share preemption (:mod:`mesoslike.master.preemption`) divides the
cluster by.

* :func:`compute_fair_shares` -- ``share = clamp(weight * R, min, max)`` with
  ``R`` found by doubling then binary search (YARN's ``ComputeFairShares``).
* :func:`hierarchical_fair_shares` -- the same applied down a queue tree.

Everything here is deterministic: no I/O, no clock, no randomness, and no
dependence on the iteration order of the input mappings beyond the order of the
returned dictionaries. Only the standard library is used.

Max-min, weighted max-min and DRF, which nothing in mesoslike calls, are kept
as test oracles in ``tests/fairness_oracles.py`` (docs/fairness.rst).

Deliberate difference from YARN: quantities are floats. YARN truncates every
share to a whole number of units (``(long) share``) both while searching for
``R`` and in the final result, and caps sums at ``Integer.MAX_VALUE``; here
shares are not truncated, so they add up to the distributable total (to the
precision of the binary search) instead of leaving up to one unit per
schedulable unassigned. For the same reason, when nothing is left to
distribute the ratio is taken as exactly 0 (YARN gets there by truncating
tiny shares to 0).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = [
    "DEFAULT_ITERATIONS",
    "FairShareQueue",
    "Schedulable",
    "compute_fair_shares",
    "hierarchical_fair_shares",
]

#: Binary-search steps, YARN's ``COMPUTE_FAIR_SHARES_ITERATIONS``.
DEFAULT_ITERATIONS = 25


# ---------------------------------------------------------------- validation


def _check_number(what: str, value: object) -> float:
    # bool is an int subclass; True as a quantity is almost certainly a bug.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} must be a number, got {value!r}")
    number = float(value)
    if math.isnan(number):
        raise ValueError(f"{what} must not be NaN")
    return number


def _check_quantity(what: str, value: object, *, allow_inf: bool = False) -> float:
    number = _check_number(what, value)
    if number < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
    if math.isinf(number) and not allow_inf:
        raise ValueError(f"{what} must be finite, got {value!r}")
    return number


def _check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} must be a non-empty string, got {name!r}")
    return name


def _check_unique(what: str, names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"duplicate {what} {name!r}")
        seen.add(name)



# ------------------------------------------------------- YARN fair shares


def _normalize_share_params(instance: Schedulable | FairShareQueue) -> None:
    # Stored as floats so that shares come out as floats even from int inputs.
    label = _check_name("name", instance.name)
    for attribute, allow_inf in (("weight", False), ("min_share", False), ("max_share", True)):
        value = _check_quantity(
            f"{attribute} of {label!r}", getattr(instance, attribute), allow_inf=allow_inf
        )
        object.__setattr__(instance, attribute, value)


@dataclass(frozen=True)
class Schedulable:
    """A queue or application competing for a single resource (YARN's
    ``Schedulable``).

    ``weight`` 0 means "exactly its min share"; ``max_share`` 0 means "nothing";
    ``active`` is whether it has demand or running work (only instantaneous
    shares look at it). If ``min_share > max_share``, ``max_share`` wins, as in
    YARN's clamp.

    :raises ValueError: on an empty name, a negative or NaN weight or share,
        an infinite weight or min share, or a non-bool ``active``.
    """

    name: str
    weight: float = 1.0
    min_share: float = 0.0
    max_share: float = math.inf
    active: bool = True

    def __post_init__(self) -> None:
        _normalize_share_params(self)
        if not isinstance(self.active, bool):
            raise ValueError(f"active of {self.name!r} must be a bool, got {self.active!r}")


def compute_fair_shares(
    total: float,
    schedulables: Sequence[Schedulable],
    steady: bool = False,
    iterations: int = DEFAULT_ITERATIONS,
) -> dict[str, float]:
    """Fair shares of ``total`` as YARN's ``ComputeFairShares`` computes them.

    First the fixed shares: ``max_share`` 0 gets 0; in instantaneous mode
    (``steady=False``) an inactive schedulable gets 0; ``weight`` 0 gets its
    ``min_share``. The rest share ``min(sum of their max shares, total - fixed
    shares)`` as ``clamp(weight * R, min_share, max_share)``: ``R`` starts at
    1 and doubles until the shares reach that amount, then ``iterations``
    bisection steps narrow it and the upper end is used, so the shares add up
    to at least the amount (to within the search precision). Steady shares
    (``steady=True``) ignore ``active``.

    >>> shares = compute_fair_shares(100, [Schedulable("a"), Schedulable("b"),
    ...                                    Schedulable("c", weight=2)])
    >>> {name: round(share, 6) for name, share in shares.items()}
    {'a': 25.0, 'b': 25.0, 'c': 50.0}

    Shares are floats, not YARN's truncated integers (see the module notes).
    Min shares are honoured even when they add up to more than ``total``.

    Complexity: O(n (D + iterations)) for n schedulables, where D (the number
    of doublings) is about log2 of the final ratio.

    :raises ValueError: on a negative, NaN or infinite total, a negative
        ``iterations`` or duplicate names.
    """
    total = _check_quantity("total", total)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be an integer >= 0, got {iterations!r}")
    _check_unique("schedulable name", (sched.name for sched in schedulables))
    shares: dict[str, float] = {}
    flexible: list[Schedulable] = []
    taken = 0.0
    for sched in schedulables:
        fixed = _fixed_share(sched, steady)
        if fixed is None:
            flexible.append(sched)
        else:
            shares[sched.name] = fixed
            taken += fixed
    if flexible:
        ratio = _weight_to_share_ratio(flexible, max(total - taken, 0.0), iterations)
        for sched in flexible:
            shares[sched.name] = _clamped_share(sched, ratio)
    return {sched.name: shares[sched.name] for sched in schedulables}


def _fixed_share(sched: Schedulable, steady: bool) -> float | None:
    if sched.max_share <= 0:
        return 0.0
    if not steady and not sched.active:
        return 0.0
    if sched.weight <= 0:
        return float(sched.min_share)
    return None


def _clamped_share(sched: Schedulable, ratio: float) -> float:
    # Same order as YARN: the max share wins over a larger min share.
    return min(max(sched.weight * ratio, sched.min_share), sched.max_share)


def _share_sum(ratio: float, flexible: Sequence[Schedulable]) -> float:
    return sum(_clamped_share(sched, ratio) for sched in flexible)


def _weight_to_share_ratio(
    flexible: Sequence[Schedulable], available: float, iterations: int
) -> float:
    # Summed in the same order as _share_sum, so once every share is at its
    # max the two sums are bit-identical and the doubling loop stops.
    target = min(sum(sched.max_share for sched in flexible), available)
    if target <= 0:
        # No positive ratio hands out exactly nothing with float shares.
        return 0.0
    upper = 1.0
    # Terminates: at upper == inf every share is at its max (weights are > 0).
    while _share_sum(upper, flexible) < target:
        upper *= 2.0
    lower = 0.0
    for _ in range(iterations):
        middle = (lower + upper) / 2.0
        used = _share_sum(middle, flexible)
        if used == target:
            upper = middle
            break
        if used < target:
            lower = middle
        else:
            upper = middle
    return upper



# --------------------------------------------------------------- hierarchy


@dataclass(frozen=True)
class FairShareQueue:
    """A queue in a fair-share hierarchy.

    A leaf's ``active`` says whether it has demand or running work (``None``
    means active). An internal queue is active iff any child is, unless
    ``active`` is given explicitly. Children must have distinct names without
    ``/``; a list of children is accepted and stored as a tuple.

    :raises ValueError: on invalid weight or shares (as for
        :class:`Schedulable`), a child that is not a :class:`FairShareQueue`,
        or a bad or duplicate child name.
    """

    name: str
    weight: float = 1.0
    min_share: float = 0.0
    max_share: float = math.inf
    active: bool | None = None
    children: tuple[FairShareQueue, ...] = ()

    def __post_init__(self) -> None:
        _normalize_share_params(self)
        if self.active is not None and not isinstance(self.active, bool):
            raise ValueError(f"active of {self.name!r} must be a bool or None")
        object.__setattr__(self, "children", tuple(self.children))
        for child in self.children:
            if not isinstance(child, FairShareQueue):
                raise ValueError(f"child of {self.name!r} is not a FairShareQueue: {child!r}")
            if "/" in child.name:
                raise ValueError(f"queue name {child.name!r} must not contain '/'")
        _check_unique(f"child of {self.name!r}", (child.name for child in self.children))


def hierarchical_fair_shares(
    root: FairShareQueue, total: float, steady: bool = False
) -> dict[str, float]:
    """Fair share of every queue in the tree under ``root``.

    The root gets ``total`` (its own weight and shares are ignored, as YARN
    gives the root queue the whole cluster); each parent's share is divided
    among its children with :func:`compute_fair_shares`, recursively. Keys are
    slash-joined child names below the root (``"eng"``, ``"eng/prod"``); the
    root itself is ``""``. Queues appear in depth-first pre-order.

    >>> tree = FairShareQueue("root", children=(
    ...     FairShareQueue("eng", weight=2, children=(
    ...         FairShareQueue("prod", weight=3), FairShareQueue("dev"))),
    ...     FairShareQueue("sales")))
    >>> {path: round(share, 6) for path, share in hierarchical_fair_shares(tree, 120).items()}
    {'': 120.0, 'eng': 80.0, 'eng/prod': 60.0, 'eng/dev': 20.0, 'sales': 40.0}

    Complexity: O(N (D + iterations)) for N queues (see
    :func:`compute_fair_shares`).

    :raises ValueError: on a negative, NaN or infinite total.
    """
    total = _check_quantity("total", total)
    activity: dict[int, bool] = {}
    shares: dict[str, float] = {"": total}
    _divide_among_children(root, "", total, steady, activity, shares)
    return shares


def _is_active(queue: FairShareQueue, activity: dict[int, bool]) -> bool:
    key = id(queue)
    if key not in activity:
        if queue.active is not None:
            activity[key] = queue.active
        elif not queue.children:
            activity[key] = True
        else:
            activity[key] = any(_is_active(child, activity) for child in queue.children)
    return activity[key]


def _divide_among_children(
    parent: FairShareQueue,
    path: str,
    share: float,
    steady: bool,
    activity: dict[int, bool],
    shares: dict[str, float],
) -> None:
    if not parent.children:
        return
    competitors = [
        Schedulable(child.name, child.weight, child.min_share, child.max_share,
                    _is_active(child, activity))
        for child in parent.children
    ]
    child_shares = compute_fair_shares(share, competitors, steady)
    for child in parent.children:
        child_path = f"{path}/{child.name}" if path else child.name
        shares[child_path] = child_shares[child.name]
        _divide_among_children(child, child_path, child_shares[child.name], steady,
                               activity, shares)

