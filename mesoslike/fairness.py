"""Fair-division algorithms as pure functions.

Single resource, divisible:

* :func:`max_min_fair` -- max-min fairness by progressive filling.
* :func:`weighted_max_min_fair` -- the same, splitting in proportion to weights.

Several resource kinds, indivisible tasks:

* :func:`drf` -- (weighted) Dominant Resource Fairness by progressive filling,
  one task at a time.

YARN FairScheduler fair shares (``ComputeFairShares``):

* :func:`compute_fair_shares` -- ``share = clamp(weight * R, min, max)`` with
  ``R`` found by doubling then binary search.
* :func:`hierarchical_fair_shares` -- the same applied down a queue tree.
* :func:`compute_fair_share_vectors` -- one independent computation per
  resource kind.

Everything here is deterministic: no I/O, no clock, no randomness, and no
dependence on the iteration order of the input mappings beyond the order of the
returned dictionaries. Only the standard library is used, so the allocator,
the simulator and the tests can all use these functions as oracles.

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

import heapq
import math
import numbers
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

__all__ = [
    "DEFAULT_ITERATIONS",
    "DRFAllocation",
    "FairShareQueue",
    "Schedulable",
    "VectorSchedulable",
    "compute_fair_share_vectors",
    "compute_fair_shares",
    "dominant_share",
    "drf",
    "hierarchical_fair_shares",
    "max_min_fair",
    "weighted_max_min_fair",
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


def _check_positive_weight(what: str, value: object) -> float:
    number = _check_quantity(what, value)
    if number <= 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
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


def _check_known(what: str, keys: Iterable[str], known: Mapping[str, object]) -> None:
    unknown = sorted(key for key in keys if key not in known)
    if unknown:
        raise ValueError(f"{what} given for unknown users {unknown!r}")


def _validated_weights(
    users: Mapping[str, object], weights: Mapping[str, float] | None
) -> dict[str, float]:
    weights = weights or {}
    _check_known("weights", weights, users)
    return {
        user: _check_positive_weight(f"weight of {user!r}", weights.get(user, 1.0))
        for user in users
    }


# ------------------------------------------------------------ max-min family


def max_min_fair(capacity: float, demands: Mapping[str, float]) -> dict[str, float]:
    """Divide ``capacity`` among users by max-min fairness.

    Progressive filling: split evenly, give back what exceeds a user's demand,
    split the returned amount evenly among the still-unsatisfied users, and so
    on. Every user ends with ``min(demand, level)`` for one common ``level``
    (the whole capacity is used unless every demand is met). Demands may be
    ``math.inf`` ("as much as possible"); capacity must be finite.

    >>> max_min_fair(10, {"a": 2, "b": 2.6, "c": 4, "d": 5})
    {'a': 2.0, 'b': 2.6, 'c': 2.7, 'd': 2.7}

    Complexity: O(n log n) for n users (one sort, one pass).

    :raises ValueError: on a negative, NaN or infinite capacity, or a negative
        or NaN demand.
    """
    return weighted_max_min_fair(capacity, demands, {})


def weighted_max_min_fair(
    capacity: float, demands: Mapping[str, float], weights: Mapping[str, float]
) -> dict[str, float]:
    """Divide ``capacity`` by weighted max-min fairness.

    Like :func:`max_min_fair`, but each round splits the available amount
    among the unsatisfied users in proportion to their weights, so every
    unsatisfied user ends with ``weight * level`` and every satisfied one with
    its demand (``demand <= weight * level``). Users missing from ``weights``
    have weight 1; weights must be finite and > 0.

    >>> weighted_max_min_fair(8, {"a": 1, "b": 100}, {"a": 1, "b": 3})
    {'a': 1.0, 'b': 7.0}

    Complexity: O(n log n) for n users.

    :raises ValueError: on invalid capacity or demands (see
        :func:`max_min_fair`), a non-positive or NaN weight, or a weight for a
        user without a demand.
    """
    capacity = _check_quantity("capacity", capacity)
    demand_of = {
        _check_name("user", user): _check_quantity(
            f"demand of {user!r}", demand, allow_inf=True
        )
        for user, demand in demands.items()
    }
    weight_of = _validated_weights(demand_of, weights)
    allocation = _progressive_fill(capacity, demand_of, weight_of)
    return {user: allocation[user] for user in demand_of}


def _progressive_fill(
    capacity: float, demand_of: dict[str, float], weight_of: dict[str, float]
) -> dict[str, float]:
    # Visiting users by increasing demand per unit of weight, the current user
    # is satisfied by a proportional split of what is left iff all earlier
    # ones were, so one pass replaces the rounds of "split, give back, split".
    order = sorted(demand_of, key=lambda user: (demand_of[user] / weight_of[user], user))
    weight_left = [0.0] * (len(order) + 1)
    for index in range(len(order) - 1, -1, -1):
        weight_left[index] = weight_left[index + 1] + weight_of[order[index]]
    allocation: dict[str, float] = {}
    remaining = capacity
    for index, user in enumerate(order):
        level = remaining / weight_left[index]
        if demand_of[user] / weight_of[user] <= level:
            allocation[user] = demand_of[user]
            remaining = max(remaining - demand_of[user], 0.0)
            continue
        for unsatisfied in order[index:]:
            allocation[unsatisfied] = weight_of[unsatisfied] * level
        break
    return allocation


# ----------------------------------------------------------------------- DRF


@dataclass(frozen=True)
class DRFAllocation:
    """Result of :func:`drf`.

    :ivar tasks: number of tasks given to each user (every user appears).
    :ivar dominant_shares: each user's final weighted dominant share.
    :ivar consumed: total quantity handed out per resource kind of the capacity.
    :ivar order: the users in the order they were given tasks, one entry per task.
    """

    tasks: dict[str, int]
    dominant_shares: dict[str, float]
    consumed: dict[str, float]
    order: list[str]


def dominant_share(
    tasks: int,
    demand: Mapping[str, float],
    capacity: Mapping[str, float],
    weight: float = 1.0,
) -> float:
    """Weighted dominant share of a user running ``tasks`` tasks of ``demand``.

    ``max_k (tasks * demand[k]) / capacity[k]``, divided by ``weight``, over the
    kinds with a positive capacity (0.0 if there are none). The arithmetic is
    done in exactly this order so that any allocator computing shares the same
    way gets bit-identical values, hence identical tie-breaks.

    >>> dominant_share(3, {"cpus": 1, "mem": 4}, {"cpus": 9, "mem": 18})
    0.6666666666666666

    Complexity: O(m) for m kinds in ``demand``. Inputs are not validated.
    """
    share = 0.0
    for kind, per_task in demand.items():
        available = capacity.get(kind, 0)
        if available > 0:
            share = max(share, (tasks * per_task) / available)
    return share / weight


def drf(
    capacity: Mapping[str, float],
    demands: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float] | None = None,
    max_tasks: Mapping[str, int] | None = None,
) -> DRFAllocation:
    """Discrete (weighted) Dominant Resource Fairness by progressive filling.

    ``demands[user]`` is the per-task demand vector. Repeatedly, among the
    users whose next task still fits in what is left of ``capacity`` (and who
    are below ``max_tasks[user]`` when given), the one with the lowest
    ``(weighted dominant share, tasks so far, user name)`` gets one more task.
    A user whose next task does not fit is skipped for good (consumption only
    grows); the others keep going. It stops when no user can take a task.

    Shares are computed by :func:`dominant_share`. Kinds with zero or missing
    capacity do not count towards shares, but a task needing a positive amount
    of such a kind never fits. Users missing from ``weights`` have weight 1.

    >>> result = drf({"cpus": 9, "mem": 18},
    ...              {"A": {"cpus": 1, "mem": 4}, "B": {"cpus": 3, "mem": 1}})
    >>> result.tasks, result.order
    ({'A': 3, 'B': 2}, ['A', 'B', 'A', 'B', 'A'])

    Complexity: O((T + n) (m + log n)) for T tasks handed out, n users and m
    kinds per demand vector. T is bounded by the capacity, but tiny per-task
    demands make it large.

    :raises ValueError: on a negative, NaN or infinite capacity or demand, a
        non-positive weight, a negative or non-integer ``max_tasks``, weights
        or limits for unknown users, or a user whose demand vector is all
        zeros without a ``max_tasks`` bound (it would take infinitely many
        tasks).
    """
    capacity_of, demand_of, weight_of, limit_of = _validated_drf_inputs(
        capacity, demands, weights, max_tasks
    )
    tasks = {user: 0 for user in demand_of}
    consumed = {kind: 0.0 for kind in capacity_of}
    order: list[str] = []
    candidates = [
        (dominant_share(0, demand_of[user], capacity_of, weight_of[user]), 0, user)
        for user in demand_of
    ]
    heapq.heapify(candidates)
    while candidates:
        _, count, user = heapq.heappop(candidates)
        demand = demand_of[user]
        if count >= limit_of.get(user, math.inf) or not _fits(demand, capacity_of, consumed):
            continue
        for kind, per_task in demand.items():
            if per_task > 0:
                consumed[kind] += per_task
        count += 1
        tasks[user] = count
        order.append(user)
        share = dominant_share(count, demand, capacity_of, weight_of[user])
        heapq.heappush(candidates, (share, count, user))
    shares = {
        user: dominant_share(tasks[user], demand_of[user], capacity_of, weight_of[user])
        for user in demand_of
    }
    return DRFAllocation(tasks=tasks, dominant_shares=shares, consumed=consumed, order=order)


def _fits(
    demand: Mapping[str, float], capacity_of: Mapping[str, float], consumed: Mapping[str, float]
) -> bool:
    for kind, per_task in demand.items():
        if per_task <= 0:
            continue
        available = capacity_of.get(kind, 0.0)
        if available <= 0 or consumed[kind] + per_task > available:
            return False
    return True


def _validated_drf_inputs(
    capacity: Mapping[str, float],
    demands: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float] | None,
    max_tasks: Mapping[str, int] | None,
) -> tuple[dict[str, float], dict[str, dict[str, float]], dict[str, float], dict[str, int]]:
    capacity_of = {
        _check_name("resource kind", kind): _check_quantity(f"capacity of {kind!r}", amount)
        for kind, amount in capacity.items()
    }
    demand_of = {
        _check_name("user", user): {
            _check_name("resource kind", kind): _check_quantity(
                f"demand of {user!r} for {kind!r}", amount
            )
            for kind, amount in vector.items()
        }
        for user, vector in demands.items()
    }
    weight_of = _validated_weights(demand_of, weights)
    max_tasks = max_tasks or {}
    _check_known("max_tasks", max_tasks, demand_of)
    limit_of: dict[str, int] = {}
    for user, limit in max_tasks.items():
        if isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 0:
            raise ValueError(f"max_tasks of {user!r} must be an integer >= 0, got {limit!r}")
        limit_of[user] = int(limit)
    for user, vector in demand_of.items():
        if user not in limit_of and not any(amount > 0 for amount in vector.values()):
            raise ValueError(
                f"user {user!r} demands nothing per task and has no max_tasks bound: "
                "it would be given infinitely many tasks"
            )
    return capacity_of, demand_of, weight_of, limit_of


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


# ---------------------------------------------------- per-kind fair shares


@dataclass(frozen=True)
class VectorSchedulable:
    """A schedulable with per-resource-kind min and max shares.

    Kinds missing from ``min_share`` have min share 0; kinds missing from
    ``max_share`` (or all kinds, if it is ``None``) have no max. Kinds not in
    the total being divided are ignored. The mappings are copied.
    """

    name: str
    weight: float = 1.0
    min_share: Mapping[str, float] = field(default_factory=dict, hash=False)
    max_share: Mapping[str, float] | None = field(default=None, hash=False)
    active: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "min_share", dict(self.min_share))
        if self.max_share is not None:
            object.__setattr__(self, "max_share", dict(self.max_share))
        # Building the single-resource views validates every field.
        Schedulable(self.name, self.weight, active=self.active)
        for kind in sorted(set(self.min_share) | set(self.max_share or {})):
            self.for_kind(kind)

    def for_kind(self, kind: str) -> Schedulable:
        """This schedulable's single-resource view for ``kind``. O(1)."""
        max_share = math.inf if self.max_share is None else self.max_share.get(kind, math.inf)
        return Schedulable(self.name, self.weight, self.min_share.get(kind, 0.0), max_share,
                           self.active)


def compute_fair_share_vectors(
    total: Mapping[str, float],
    schedulables: Sequence[VectorSchedulable],
    steady: bool = False,
    iterations: int = DEFAULT_ITERATIONS,
) -> dict[str, dict[str, float]]:
    """Per-kind fair shares: :func:`compute_fair_shares` run independently for
    every resource kind in ``total``.

    Returns ``{name: {kind: share}}`` with every schedulable and every kind of
    ``total``.

    >>> result = compute_fair_share_vectors(
    ...     {"cpus": 8, "mem": 64},
    ...     [VectorSchedulable("web", max_share={"cpus": 2}), VectorSchedulable("batch")])
    >>> {name: {kind: round(v, 6) for kind, v in shares.items()}
    ...  for name, shares in result.items()}
    {'web': {'cpus': 2.0, 'mem': 32.0}, 'batch': {'cpus': 6.0, 'mem': 32.0}}

    Complexity: O(m n (D + iterations)) for m kinds and n schedulables.

    :raises ValueError: as :func:`compute_fair_shares`, for any kind.
    """
    _check_unique("schedulable name", (sched.name for sched in schedulables))
    amounts = {
        _check_name("resource kind", kind): _check_quantity(f"total of {kind!r}", amount)
        for kind, amount in total.items()
    }
    result: dict[str, dict[str, float]] = {sched.name: {} for sched in schedulables}
    for kind, amount in amounts.items():
        per_kind = [sched.for_kind(kind) for sched in schedulables]
        shares = compute_fair_shares(amount, per_kind, steady, iterations)
        for name, share in shares.items():
            result[name][kind] = share
    return result
