"""Fair-division reference implementations kept as test oracles.

Nothing in mesoslike calls these; the tests compare the allocator, the
simulator and the fair-share code against them (docs/fairness.rst shows them
with seed 001's worked examples):

* :func:`max_min_fair` -- max-min fairness by progressive filling.
* :func:`weighted_max_min_fair` -- the same, splitting in proportion to weights.
* :func:`drf` -- (weighted) Dominant Resource Fairness by progressive filling,
  one task at a time (tests/test_allocator_properties.py, tests/test_simulate.py).
* :func:`compute_fair_share_vectors` -- :func:`mesoslike.fairness.compute_fair_shares`
  run independently for every resource kind.

Deterministic and pure, like :mod:`mesoslike.fairness`, whose input checks
they share.
"""

from __future__ import annotations

import heapq
import math
import numbers
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from mesoslike.fairness import (
    DEFAULT_ITERATIONS,
    Schedulable,
    _check_name,
    _check_quantity,
    _check_unique,
    compute_fair_shares,
)

__all__ = [
    "DRFAllocation",
    "VectorSchedulable",
    "compute_fair_share_vectors",
    "dominant_share",
    "drf",
    "max_min_fair",
    "weighted_max_min_fair",
]


# ---------------------------------------------------------------- validation


def _check_positive_weight(what: str, value: object) -> float:
    number = _check_quantity(what, value)
    if number <= 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
    return number


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

