"""Fair-share preemption: the master-level policy of docs/preemption.rst (seed 003,
YARN FairScheduler's update thread plus its preemption thread).

Pure and deterministic: the caller passes the time, the cluster total, each
role's usage and demand and the running tasks; :meth:`FairSharePreemption.update`
answers with actions (:class:`Warn`, :class:`Kill`, :class:`Prefer`) for the
master to carry out. No I/O, no clock, no randomness. docs/preemption.rst has
the semantics and a worked example; in short:

* **Settings** are the roles file in force, a
  :class:`~mesoslike.master.roles.RolesConfig`; a role's settings are what
  its ``effective(role)`` gives (inheritance is resolved there, and only
  there).
* **Fair shares** come from :mod:`mesoslike.fairness` over the role hierarchy
  (``"a/b"`` is a child of ``"a"``), one YARN ``ComputeFairShares`` pass per
  resource kind: *instantaneous* shares over the roles with demand, *steady*
  shares over all known roles. A role with work of its own and sub-roles
  gets a virtual ``.`` leaf of weight 1 for its own work, as the allocator's
  DRF sorter has it (Mesos's ``a/.``): the role's weight counts for its whole
  subtree against its siblings.
* **Comparing vectors** (multi-resource): by dominant share, i.e. the largest
  ``amount / cluster total`` over the kinds of the cluster, as the DRF sorter
  does. "Below" means a dominant share smaller by more than :data:`EPSILON`.
  Amounts (starvation, what to free) are per-kind vectors.
* **Starvation**: a role below ``min(threshold * fair share, demand)`` for at
  least its ``fair_share_preemption_timeout`` is fair-share starved by that
  target minus its usage; a role below ``min(min_share, demand)`` for at
  least its ``min_share_preemption_timeout`` is min-share starved, and the
  part not already covered by fair-share starvation under it goes to the
  roles under it with pending demand (seed 003's ``updateStarvedApps``).
* **Victims**: running tasks of roles above their fair share, never taking a
  role (or any ancestor not shared with the starved role) below its fair
  share; the agent whose tasks free the need in the fewest tasks first; on an
  agent, the task that frees most of what is still missing, then the most
  over-served role, then the smaller task, then the newest.
* **Only on a busy cluster** (YARN's ``shouldAttemptPreemption``): no new
  victims are chosen while the cluster's utilisation, the largest
  ``used / total`` over its kinds, is at or below the roles file's
  ``cluster_utilization_threshold`` (default 0.8): a starved role there gets
  free resources without a kill. Starvation is still measured meanwhile, and
  victims already warned are still killed at their deadline.
* **Warn, then kill**: a :class:`Warn` with ``deadline = now +
  wait_before_kill``, a :class:`Kill` for each warned task still running at
  the deadline, a :class:`Prefer` for the freed resources when a warned task
  ends; the starved role is not re-checked until its victims have ended and
  the preference window has passed (or their deadline plus a grace passed).
"""

from __future__ import annotations

import heapq
import math
from typing import Iterable, Mapping, Sequence

import attrs

from mesoslike.allocator.roles import ancestors
from mesoslike.fairness import FairShareQueue, hierarchical_fair_shares
from mesoslike.master.roles import RoleConfig, RolesConfig, quantities
from mesoslike.resources import Resources

__all__ = ["EPSILON", "Action", "FairSharePreemption", "Kill", "Prefer", "RoleUsage", "TaskView", "Warn"]

#: tolerance on dominant shares (fair shares come from a binary search)
EPSILON = 1e-6
_SELF = "."  # the virtual leaf holding the own work of a role with sub-roles
_EMPTY = Resources()


# ------------------------------------------------------------------ settings
@attrs.frozen
class _Rules:
    """One role's effective settings (:meth:`RolesConfig.effective
    <mesoslike.master.roles.RolesConfig.effective>`, the one place they are
    inherited) in the units the policy computes with: the min share as
    :class:`Resources`, the limit as ``{kind: max}`` keeping explicit zeros
    (``"gpus:0"`` means none of it). ``guarantee`` is not read here: the
    allocator enforces quota."""

    weight: float
    min_share: Resources
    limit: Mapping[str, float] = attrs.field(hash=False)
    fair_share_preemption_timeout: float
    min_share_preemption_timeout: float
    fair_share_preemption_threshold: float

    @classmethod
    def of(cls, role: RoleConfig) -> _Rules:
        """From an effective :class:`RoleConfig` (every inherited setting resolved)."""
        fair_timeout, min_timeout = role.fair_share_preemption_timeout, role.min_share_preemption_timeout
        threshold = role.fair_share_preemption_threshold
        assert fair_timeout is not None and min_timeout is not None and threshold is not None, role
        limit = {kind: amount / 1000 for kind, amount in quantities(role.limit).items()}
        return cls(role.weight, Resources.parse(role.min_share or ""), limit, fair_timeout, min_timeout, threshold)

    def max_share(self, kind: str) -> float:
        """The limit on ``kind`` (``inf`` when the limit does not name it)."""
        return self.limit.get(kind, math.inf)


# ------------------------------------------------------------- inputs/outputs
@attrs.frozen
class RoleUsage:
    """A role's own allocation (``usage``) and ``demand`` = usage plus what its
    frameworks still want (excluding sub-roles: the hierarchy is by name)."""

    usage: Resources = _EMPTY
    demand: Resources = _EMPTY


@attrs.frozen
class TaskView:
    """A running task, as the policy sees it."""

    task_id: str
    framework_id: str
    role: str
    agent_id: str
    resources: Resources
    started_at: float = 0.0


@attrs.frozen
class Warn:
    """Tell a framework these tasks will be killed at ``deadline`` unless it
    releases them first (they go to ``role_for``)."""

    framework_id: str
    task_ids: tuple[str, ...]
    deadline: float
    role_for: str


@attrs.frozen
class Kill:
    """Kill a warned task still running at its deadline."""

    framework_id: str
    task_id: str
    reason: str


@attrs.frozen
class Prefer:
    """Offer ``resources`` freed on ``agent_id`` to ``role`` first, until ``until``."""

    role: str
    agent_id: str
    resources: Resources
    until: float


Action = Warn | Kill | Prefer


def _utilization(roles: Mapping[str, RoleUsage], total: Mapping[str, float]) -> float:
    """The cluster's utilisation: the largest ``used / total`` over its kinds
    (YARN compares memory and vcores alike). O(roles x kinds)."""
    used: dict[str, float] = {}
    for usage in roles.values():
        for kind, amount in usage.usage.scalars().items():
            used[kind] = used.get(kind, 0.0) + amount
    return max((used.get(kind, 0.0) / amount for kind, amount in total.items() if amount > 0), default=0.0)


def _dominant_share(resources: Resources, total: Mapping[str, float]) -> float:
    """``max_k resources[k] / total[k]`` over the kinds with ``total[k] > 0``
    (0.0 for none). O(kinds of ``total``)."""
    share = 0.0
    for kind, amount in total.items():
        value = resources.get(kind)
        if value and amount > 0:
            share = max(share, value / amount)
    return share


# -------------------------------------------------------------- the snapshot
@attrs.define
class _Node:
    """A role (or a virtual ``.`` leaf) in one update's view."""

    fair: Resources
    steady: Resources
    usage: Resources
    demand: Resources
    chain: tuple[str, ...]  # node ids from this one up to the top level


@attrs.define
class _Starved:
    fair_share: Resources  # fair-share starvation
    min_share: Resources  # min-share starvation assigned to this role
    total: Resources  # what to free for it
    reason: str


@attrs.define
class _View:
    """One update's fair shares and starvation."""

    total: dict[str, float]
    nodes: dict[str, _Node]  # node id -> node; node id = role path, or path + "/." for a virtual leaf
    paths: list[str]  # every role in the tree, sorted
    clients: dict[str, str]  # role with work of its own -> its node id
    starved: dict[str, _Starved]  # role -> starvation, most starved first
    min_share_starvation: dict[str, Resources]  # role -> its (subtree's) min-share starvation

    def share(self, resources: Resources) -> float:
        return _dominant_share(resources, self.total)


@attrs.define
class _Victim:
    task: TaskView
    role_for: str
    reason: str
    warned_at: float
    deadline: float
    killed_at: float | None = None


# ------------------------------------------------------------------ the policy
class FairSharePreemption:
    """The fair-share preemption policy. Call :meth:`update` every
    ``update_interval`` seconds (YARN's update thread) and carry out the
    actions; call :meth:`task_gone` when a warned task ends (or just stop
    listing it in ``tasks``).

    :param settings: the roles file in force (:class:`RolesConfig`): whether
        preemption is on, the wait before a kill, and each role's settings.
    :param update_interval: how often the caller runs :meth:`update`.
    :param allocation_interval: the allocator's batch interval.
    :param prefer_for: how long freed resources are preferred for the starved
        role (default 2 allocation intervals); the role is not re-checked
        before that window has passed either.
    :param kill_grace: after the last deadline of a role's victims, how long
        to wait for the kills to land before re-checking the role anyway
        (default ``prefer_for`` + 2 update intervals).
    """

    def __init__(self, settings: RolesConfig, *, update_interval: float = 0.5, allocation_interval: float = 1.0,
                 prefer_for: float | None = None, kill_grace: float | None = None) -> None:
        for name, value in (("update_interval", update_interval), ("allocation_interval", allocation_interval),
                            ("prefer_for", prefer_for), ("kill_grace", kill_grace)):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        self.settings = settings
        self._rules: dict[str, _Rules] = {}  # role -> its settings, read from ``settings`` when first needed
        self.update_interval = float(update_interval)
        self.allocation_interval = float(allocation_interval)
        self.prefer_for = 2.0 * self.allocation_interval if prefer_for is None else float(prefer_for)
        self.kill_grace = self.prefer_for + 2.0 * self.update_interval if kill_grace is None else float(kill_grace)
        self._now: float | None = None
        self._view: _View | None = None
        self._utilization = 0.0                          # at the last update
        self._fair_below_since: dict[str, float] = {}  # role -> since when below its fair-share target
        self._min_below_since: dict[str, float] = {}  # role -> since when (its subtree is) below its min-share target
        self._pending: dict[tuple[str, str], _Victim] = {}  # warned, still running; in the order chosen
        self._ended: list[_Victim] = []  # warned tasks gone since the last update (Prefer not sent yet)
        self._settle_until: dict[str, float] = {}  # role -> end of the preference window of its last freed task
        self._counters = {"warned": 0, "killed": 0, "released": 0, "cancelled": 0}

    # ---------------------------------------------------------------- entry
    def update(self, now: float, total: Resources, roles: Mapping[str, RoleUsage],
               tasks: Sequence[TaskView]) -> list[Action]:
        """One round: recompute fair shares and starvation, warn the victims
        for newly starved roles, kill those past their deadline, prefer freed
        resources for the roles they were taken for. ``roles`` holds every
        role with frameworks or listed in the settings; ``tasks`` the
        running tasks. A warned task missing from ``tasks`` counts as ended.
        Returns ``[]`` when preemption is disabled (:meth:`state` still
        reports shares and starvation).

        :raises ValueError: if ``now`` goes back in time.
        """
        now = float(now)
        if self._now is not None and now < self._now:
            raise ValueError(f"time went backwards: {now} < {self._now}")
        self._now = now
        running = {(task.framework_id, task.task_id): task for task in tasks}
        for key in [key for key in self._pending if key not in running]:
            self._end(key)
        view = self._view = self._evaluate(now, total, roles)
        if not self.settings.preemption.enabled:
            self._pending.clear()
            self._ended.clear()
            self._settle_until.clear()
            return []
        actions: list[Action] = self._prefer_ended(now)
        self._utilization = _utilization(roles, view.total)
        if self._utilization > self.settings.preemption.cluster_utilization_threshold:
            for role in view.starved:
                if self.hold_until(role) <= now:
                    actions.extend(self._preempt_for(role, view, running, now))
        actions.extend(self._kill_due(now, view))
        return actions

    def task_gone(self, framework_id: str, task_id: str) -> None:
        """A task ended (released by its framework or killed). For a warned
        task, its resources are preferred for the role it was taken for at
        the next :meth:`update`. Unknown tasks are ignored."""
        key = (framework_id, task_id)
        if key in self._pending:
            self._end(key)

    def set_settings(self, settings: RolesConfig) -> None:
        """New settings (a reloaded roles file), used from the next update."""
        self.settings = settings
        self._rules.clear()

    def hold_until(self, role: str) -> float:
        """Until when ``role`` is not re-checked for starvation: the end of
        the preference window of its last freed task, or, while victims
        taken for it still run, their last deadline plus the kill grace."""
        until = self._settle_until.get(role, -math.inf)
        for victim in self._pending.values():
            if victim.role_for == role:
                until = max(until, victim.deadline + self.kill_grace)
        return until

    # ---------------------------------------------------------------- state
    def state(self) -> dict:
        """Per role: ``fair_share`` (instantaneous) and ``steady_fair_share``,
        ``usage`` and ``demand`` of the role and its sub-roles; its min-share
        starvation; and for a role with work of its own: since when it is
        below its fair-share target, its fair-share starvation, the total it
        is starved by (``starved``), the tasks being preempted for it and
        until when it is not re-checked (``own`` gives its own work's
        shares when it also has sub-roles). Then the pending victims in the
        order chosen and the counters. Resources are strings, times floats
        (None = not set). JSON-ready."""
        view = self._view
        out: dict = {"enabled": self.settings.preemption.enabled, "updated_at": self._now,
                     "cluster_utilization": self._utilization,
                     "cluster_utilization_threshold": self.settings.preemption.cluster_utilization_threshold,
                     "roles": {}, "pending": [], "counters": dict(self._counters)}
        for victim in self._pending.values():
            task = victim.task
            out["pending"].append({"framework_id": task.framework_id, "task_id": task.task_id, "role": task.role,
                                   "agent_id": task.agent_id, "resources": str(task.resources),
                                   "role_for": victim.role_for, "reason": victim.reason,
                                   "warned_at": victim.warned_at, "deadline": victim.deadline,
                                   "killed_at": victim.killed_at})
        if view is None:
            return out
        for path in view.paths:
            node = view.nodes[path]
            entry = _describe(node)
            entry["min_share_starved_since"] = self._min_below_since.get(path)
            entry["min_share_starvation"] = str(view.min_share_starvation.get(path, _EMPTY))
            client = view.clients.get(path)
            if client is not None:
                if client != path:
                    entry["own"] = _describe(view.nodes[client])
                starved = view.starved.get(path)
                hold = self.hold_until(path)
                entry.update({
                    "fair_share_starved_since": self._fair_below_since.get(path),
                    "fair_share_starvation": str(starved.fair_share if starved else _EMPTY),
                    "starved": str(starved.total if starved else _EMPTY),
                    "preempting": [v.task.task_id for v in self._pending.values() if v.role_for == path],
                    "hold_until": hold if hold > -math.inf else None,
                })
            out["roles"][path] = entry
        return out

    # ------------------------------------------------------- fair shares etc.
    def _evaluate(self, now: float, total: Resources, roles: Mapping[str, RoleUsage]) -> _View:
        kinds = {kind: amount for kind, amount in total.scalars().items() if amount > 0}
        paths = sorted({a for role in [*roles, *self.settings.roles] for a in ancestors(role)})
        policy = {path: self._rules_of(path) for path in paths}
        children: dict[str, list[str]] = {path: [] for path in ["", *paths]}
        for path in paths:
            children[path.rpartition("/")[0]].append(path)
        own = {path: roles.get(path, RoleUsage()) for path in paths}
        # a leaf is a client; a role with sub-roles only if it has work of its own
        clients = {path: (f"{path}/{_SELF}" if children[path] else path)
                   for path in paths if not children[path] or own[path].demand}
        nodes: dict[str, _Node] = {}
        for node_id in [*paths, *(c for c in clients.values() if c.endswith("/" + _SELF))]:
            nodes[node_id] = _Node(_EMPTY, _EMPTY, _EMPTY, _EMPTY, _chain(node_id))
        for path, node_id in clients.items():
            for upper in nodes[node_id].chain:
                nodes[upper].usage += own[path].usage
                nodes[upper].demand += own[path].demand
        for steady in (False, True):
            per_node: dict[str, dict[str, float]] = {node_id: {} for node_id in nodes}
            for kind, amount in kinds.items():
                root = FairShareQueue("root", children=tuple(
                    _queue(path, kind, children, policy, own, clients) for path in children[""]))
                for node_id, share in hierarchical_fair_shares(root, amount, steady).items():
                    if node_id:
                        per_node[node_id][kind] = share
            for node_id, shares in per_node.items():
                setattr(nodes[node_id], "steady" if steady else "fair", Resources(shares))
        view = _View(kinds, nodes, paths, clients, {}, {})
        self._find_starved(now, view, policy, own)
        return view

    def _rules_of(self, role: str) -> _Rules:
        rules = self._rules.get(role)
        if rules is None:
            rules = self._rules[role] = _Rules.of(self.settings.effective(role))
        return rules

    def _find_starved(self, now: float, view: _View, policy: Mapping[str, _Rules],
                      own: Mapping[str, RoleUsage]) -> None:
        """Seed 003's ``updateStarvedApps``, with roles in place of apps and
        role subtrees in place of queues."""
        fair_part: dict[str, Resources] = {}
        for role, node_id in view.clients.items():
            node, settings = view.nodes[node_id], policy[role]
            target = node.fair.scale(settings.fair_share_preemption_threshold).minimum(node.demand)
            below = view.share(node.usage) < view.share(target) - EPSILON
            if _starved_for(self._fair_below_since, role, below, now, settings.fair_share_preemption_timeout):
                fair_part[role] = target.subtract_clamped(node.usage)
        _forget_others(self._fair_below_since, view.clients)
        min_part: dict[str, Resources] = {}
        for path in sorted(view.paths, key=lambda p: (-p.count("/"), p)):  # deepest first
            settings, node = policy[path], view.nodes[path]
            target = settings.min_share.minimum(node.demand)
            below = bool(settings.min_share) and view.share(node.usage) < view.share(target) - EPSILON
            if not _starved_for(self._min_below_since, path, below, now, settings.min_share_preemption_timeout):
                continue
            starvation = view.min_share_starvation[path] = target.subtract_clamped(node.usage)
            under = sorted((role for role, node_id in view.clients.items() if path in view.nodes[node_id].chain),
                           key=lambda role: (_ratio(view, view.clients[role], _EMPTY), role))
            covered = Resources.sum(fair_part.get(r, _EMPTY) + min_part.get(r, _EMPTY) for r in under)
            uncovered = starvation.subtract_clamped(covered)
            for role in under:  # ``updateStarvedAppsMinshare``: to the roles with pending demand
                if not uncovered:
                    break
                client = view.nodes[view.clients[role]]
                pending = (client.demand.subtract_clamped(client.usage).subtract_clamped(fair_part.get(role, _EMPTY))
                           .subtract_clamped(min_part.get(role, _EMPTY)))
                given = pending.minimum(uncovered)
                if given:
                    min_part[role] = min_part.get(role, _EMPTY) + given
                    uncovered = uncovered.subtract_clamped(given)
        _forget_others(self._min_below_since, view.paths)
        starved = []
        for role in view.clients:
            fair, least = fair_part.get(role, _EMPTY), min_part.get(role, _EMPTY)
            amount = fair + least
            if view.share(amount) > 0:
                reason = " and ".join(kind for kind, part in (("fair share", fair), ("min share", least)) if part)
                starved.append((-view.share(amount), role, _Starved(fair, least, amount, reason)))
        view.starved = {role: entry for _, role, entry in sorted(starved, key=lambda item: item[:2])}

    # --------------------------------------------------------------- victims
    def _preempt_for(self, role: str, view: _View, running: Mapping[tuple[str, str], TaskView],
                     now: float) -> list[Action]:
        starved = view.starved[role]
        removed: dict[str, Resources] = {}
        for victim in self._pending.values():
            client = view.clients.get(victim.task.role)
            for node_id in view.nodes[client].chain if client else ():
                removed[node_id] = removed.get(node_id, _EMPTY) + victim.task.resources
        candidates = [task for key, task in running.items()
                      if key not in self._pending and task.role in view.clients and task.role != role
                      and view.share(task.resources) > 0]
        chosen = _choose(view, role, starved.total, candidates, removed)
        if not chosen:
            return []
        deadline = now + self.settings.preemption.wait_before_kill
        by_framework: dict[str, list[str]] = {}
        for task in chosen:
            self._pending[(task.framework_id, task.task_id)] = _Victim(task, role, starved.reason, now, deadline)
            by_framework.setdefault(task.framework_id, []).append(task.task_id)
        self._counters["warned"] += len(chosen)
        return [Warn(framework_id, tuple(ids), deadline, role) for framework_id, ids in by_framework.items()]

    def _kill_due(self, now: float, view: _View) -> list[Action]:
        actions: list[Action] = []
        for key, victim in list(self._pending.items()):
            if victim.killed_at is not None or now < victim.deadline:
                continue
            client = view.clients.get(victim.role_for)
            if client is None or not view.nodes[client].demand.subtract_clamped(view.nodes[client].usage):
                # the role no longer wants anything: a kill would free resources for nobody
                del self._pending[key]
                self._counters["cancelled"] += 1
                continue
            victim.killed_at = now
            self._counters["killed"] += 1
            actions.append(Kill(victim.task.framework_id, victim.task.task_id,
                                f"preempted for role {victim.role_for!r} ({victim.reason} starvation)"))
        return actions

    def _end(self, key: tuple[str, str]) -> None:
        victim = self._pending.pop(key)
        if victim.killed_at is None:
            self._counters["released"] += 1
        self._ended.append(victim)

    def _prefer_ended(self, now: float) -> list[Action]:
        until = now + self.prefer_for
        freed: dict[tuple[str, str], Resources] = {}
        for victim in self._ended:
            key = (victim.role_for, victim.task.agent_id)
            freed[key] = freed.get(key, _EMPTY) + victim.task.resources
            self._settle_until[victim.role_for] = max(self._settle_until.get(victim.role_for, -math.inf), until)
        self._ended.clear()
        return [Prefer(role, agent_id, resources, until) for (role, agent_id), resources in freed.items()]


# ------------------------------------------------------------------- helpers
def _describe(node: _Node) -> dict:
    return {"fair_share": str(node.fair), "steady_fair_share": str(node.steady), "usage": str(node.usage),
            "demand": str(node.demand)}


def _chain(node_id: str) -> tuple[str, ...]:
    """``"a/b/."`` -> ``("a/b/.", "a/b", "a")``."""
    if node_id.endswith("/" + _SELF):
        return (node_id, *ancestors(node_id[: -len(_SELF) - 1]))
    return tuple(ancestors(node_id))


def _queue(path: str, kind: str, children: Mapping[str, list[str]], policy: Mapping[str, _Rules],
           own: Mapping[str, RoleUsage], clients: Mapping[str, str]) -> FairShareQueue:
    settings = policy[path]
    minimum = settings.min_share.get(kind)
    kids = [_queue(child, kind, children, policy, own, clients) for child in children[path]]
    if kids and path in clients:
        kids.append(FairShareQueue(_SELF, 1.0, active=True))  # the role's weight is its subtree's
    active = None if kids else bool(own[path].demand)
    return FairShareQueue(path.rpartition("/")[2], settings.weight, minimum, settings.max_share(kind), active,
                          tuple(kids))


def _starved_for(since: dict[str, float], key: str, below: bool, now: float, timeout: float) -> bool:
    """Track since when ``key`` is continuously below its target; starved
    once that lasted at least ``timeout`` (inf = never)."""
    if not below:
        since.pop(key, None)
        return False
    return now - since.setdefault(key, now) >= timeout


def _forget_others(since: dict[str, float], keep: Iterable[str]) -> None:
    keep = set(keep)
    for key in [key for key in since if key not in keep]:
        del since[key]


def _ratio(view: _View, node_id: str, removed: Resources) -> float:
    """How over-served a node is: dominant share of its usage (less what is
    already being taken) over that of its fair share."""
    node = view.nodes[node_id]
    return _over(view.share(node.usage.subtract_clamped(removed)), view.share(node.fair))


def _over(used: float, fair: float) -> float:
    return used / fair if fair > 0 else (math.inf if used > 0 else 0.0)


class _Floors:
    """The fair-share floors while victims are taken: what each node (role or
    ancestor) has left after the removals so far, with its dominant share
    cached until the next removal under it."""

    def __init__(self, view: _View, removed: Mapping[str, Resources], shared: set[str],
                 base: _Floors | None = None) -> None:
        self.view, self.shared, self.removed, self.base = view, shared, dict(removed), base
        self._left: dict[str, tuple[Resources, float]] = {}
        self._fair: dict[str, float] = base._fair if base else {}
        self._touched: set[str] = set()

    def fork(self) -> _Floors:
        """A copy to plan on; it reads this one's cache for the nodes it has
        not taken from yet."""
        return _Floors(self.view, self.removed, self.shared, self)

    def left(self, node_id: str) -> tuple[Resources, float]:
        cached = self._left.get(node_id)
        if cached is None:
            if self.base is not None and node_id not in self._touched:
                return self.base.left(node_id)
            left = self.view.nodes[node_id].usage.subtract_clamped(self.removed.get(node_id, _EMPTY))
            cached = self._left[node_id] = (left, self.view.share(left))
        return cached

    def above(self, task: TaskView) -> bool:
        """Whether ``task``'s role is above its fair share now."""
        client = self.view.clients[task.role]
        return self.left(client)[1] > self.fair(client) + EPSILON

    def fair(self, node_id: str) -> float:
        share = self._fair.get(node_id)
        if share is None:
            share = self._fair[node_id] = self.view.share(self.view.nodes[node_id].fair)
        return share

    def ratio(self, node_id: str) -> float:
        return _over(self.left(node_id)[1], self.fair(node_id))

    def allow(self, task: TaskView) -> bool:
        """Taking ``task`` leaves its role and every ancestor not shared with
        the starved role at or above their fair shares; and its role is above
        its fair share before (never take from a role at or below it)."""
        for index, node_id in enumerate(self.view.nodes[self.view.clients[task.role]].chain):
            if node_id in self.shared:
                continue
            left, share = self.left(node_id)
            fair = self.fair(node_id)
            if index == 0 and share <= fair + EPSILON:
                return False
            if self.view.share(left.subtract_clamped(task.resources)) < fair - EPSILON:
                return False
        return True

    def take(self, task: TaskView) -> None:
        for node_id in self.view.nodes[self.view.clients[task.role]].chain:
            self.removed[node_id] = self.removed.get(node_id, _EMPTY) + task.resources
            self._left.pop(node_id, None)
            self._touched.add(node_id)


def _plan(view: _View, tasks: list[TaskView], need: Resources,
          base: _Floors) -> tuple[list[TaskView], Resources, _Floors, float]:
    """The victims on one agent: its tasks ordered by how much of ``need``
    each frees (dominant share of ``min(task, need)``: bigger first while they
    fit), then the most over-served role, then the smaller, the newest, the
    ids; taken in that order while something is missing, skipping tasks that
    free nothing still missing or would break a fair share. Returns the plan,
    what is still missing, the removals and how over-served the most
    over-served of the chosen tasks' roles was. O(t log t) for t tasks."""
    floors, plan, over = base.fork(), [], 0.0
    ratio: dict[str, float] = {}

    def order(task: TaskView) -> tuple:
        client = view.clients[task.role]
        if client not in ratio:
            ratio[client] = floors.ratio(client)
        return (-view.share(task.resources.minimum(need)), -ratio[client], view.share(task.resources),
                -task.started_at, task.framework_id, task.task_id)

    for task in sorted(tasks, key=order):
        if not need:
            break
        if view.share(task.resources.minimum(need)) <= 0 or not floors.allow(task):
            continue
        plan.append(task)
        over = max(over, ratio[view.clients[task.role]])
        floors.take(task)
        need = need.subtract_clamped(task.resources)
    return plan, need, floors, over


def _choose(view: _View, role: str, need: Resources, candidates: list[TaskView],
            removed: dict[str, Resources]) -> list[TaskView]:
    """Victims for ``role``, agent by agent, while something is missing:

    * among the agents whose candidates add up to all that is missing, the
      one whose plan frees it all in the fewest tasks (a useful chunk on one
      machine; ties: the more over-served roles, then the agent id);
    * else the agent whose candidates could free the most of it (ties: the
      agent id), which gives what its plan frees.

    Each agent is planned at most twice, and the bounds are kept in a lazy
    heap, so this is O(T log T) for T candidates."""
    floors = _Floors(view, removed, set(view.nodes[view.clients[role]].chain))
    by_agent: dict[str, list[TaskView]] = {}
    for task in candidates:
        if floors.above(task):
            by_agent.setdefault(task.agent_id, []).append(task)
    sums = {agent_id: Resources.sum(task.resources for task in tasks) for agent_id, tasks in by_agent.items()}
    chosen: list[TaskView] = []
    tried: set[str] = set()  # planned as a whole-need agent and failed: floors only get tighter

    def bound(agent_id: str) -> tuple[float, str]:  # never grows as the need shrinks
        return (-view.share(sums[agent_id].minimum(need)), agent_id)

    heap: list[tuple[float, str]] | None = None  # by stale bounds, refreshed when popped
    def optimistic(agent_id: str) -> tuple[int, float, str]:
        """A lower bound of the agent's key (len(plan), -over, id): a plan
        needs at least share(need) / (its most useful task's) tasks, and its
        roles are at most as over-served as the most over-served there."""
        most = max(view.share(task.resources.minimum(need)) for task in by_agent[agent_id])
        fewest = max(1, math.ceil(view.share(need) / most - 1e-9)) if most > 0 else len(by_agent[agent_id])
        ratio = max(floors.ratio(view.clients[task.role]) for task in by_agent[agent_id])
        return (fewest, -ratio, agent_id)

    while need and by_agent:
        best = None
        whole = [a for a in by_agent if a not in tried and sums[a].contains(need)]
        for bound_key, agent_id in sorted((optimistic(a), a) for a in whole):
            if best is not None and best[0] <= bound_key:
                break  # no agent left can beat it
            tried.add(agent_id)
            plan, left, _, over = _plan(view, by_agent[agent_id], need, floors)
            if plan and not left and (best is None or (len(plan), -over, agent_id) < best[0]):
                best = ((len(plan), -over, agent_id), plan, left)
        if best is not None:
            (_, _, agent_id), plan, left = best
        else:
            if heap is None:
                heap = [bound(a) for a in by_agent]
                heapq.heapify(heap)
            while True:
                _, agent_id = heapq.heappop(heap)
                if agent_id in by_agent:
                    fresh = bound(agent_id)
                    if not heap or fresh <= heap[0]:
                        break
                    heapq.heappush(heap, fresh)
            plan, left, _, _ = _plan(view, by_agent[agent_id], need, floors)
        del by_agent[agent_id]
        chosen.extend(plan)
        for task in plan:
            floors.take(task)
        need = left
    return chosen
