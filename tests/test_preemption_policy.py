"""The fair-share preemption policy (mesoslike.master.preemption), driven
with explicit times: starvation timeouts and thresholds, min-share vs
fair-share starvation (seed 003's amount rule), the choice of victims (never
below a fair share, fewest tasks, most over-served, one agent's chunk),
warn -> kill, releases, no re-check until kills land, weights, nested roles;
a property test over random runs; the worked example of docs/preemption.rst."""

from __future__ import annotations

import doctest
import json
import math
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike.fairness import FairShareQueue, hierarchical_fair_shares
from mesoslike.master.preemption import EPSILON, FairSharePreemption, Kill, Prefer, RoleUsage, TaskView, Warn
from mesoslike.master.roles import (
    DEFAULT_CLUSTER_UTILIZATION_THRESHOLD,
    PreemptionConfig,
    RoleConfig,
    RolesConfig,
    parse_roles,
    quantities,
)
from mesoslike.resources import Resources

pytestmark = pytest.mark.timeout(120)

DOCS_PATH = Path(__file__).resolve().parent.parent / "docs" / "preemption.rst"
R = Resources.parse
TOTAL = R("cpus:16;mem:16384")  # four agents of cpus:4;mem:4096
UNIT = R("cpus:1;mem:1024")


# ------------------------------------------------------------------ helpers
def role(timeout: float = 0.0, threshold: float = 1.0, **more) -> dict:
    """A role's settings, for :func:`policy` (which names the role)."""
    return {"fair_share_preemption_timeout": timeout, "fair_share_preemption_threshold": threshold, **more}


def policy(*, enabled: bool = True, wait: float = 15.0, busy: float = DEFAULT_CLUSTER_UTILIZATION_THRESHOLD,
           **roles: dict) -> FairSharePreemption:
    """A policy over a roles file listing ``roles`` (``p__x`` names ``p/x``);
    ``busy``: the cluster utilisation threshold."""
    named = {name.replace("__", "/"): settings for name, settings in roles.items()}
    return FairSharePreemption(RolesConfig(PreemptionConfig(enabled, wait, busy),
                                           {name: RoleConfig(name, **settings) for name, settings in named.items()}))


def any_utilization(cluster: Cluster) -> Cluster:
    """The cluster's policy preempting at any utilisation (threshold 0)."""
    settings = cluster.policy.settings
    cluster.policy.set_settings(attrs.evolve(settings, preemption=attrs.evolve(
        settings.preemption, cluster_utilization_threshold=0.0)))
    return cluster


def task(task_id: str, role_name: str, agent: str, resources: Resources = UNIT, started: float = 0.0,
         framework: str | None = None) -> TaskView:
    return TaskView(task_id, framework or f"fw-{role_name}", role_name, agent, resources, started)


def spread(role_name: str, count: int, agents: tuple[str, ...] = ("node-0", "node-1", "node-2", "node-3"),
           per_agent: int = 4, prefix: str | None = None) -> list[TaskView]:
    """``count`` unit tasks, ``per_agent`` to an agent in order, started at 0, 1, 2, ..."""
    prefix = prefix or role_name.replace("/", "-")
    return [task(f"{prefix}-{i}", role_name, agents[i // per_agent], started=float(i)) for i in range(count)]


class Cluster:
    """Tasks and what each role still wants; usage and demand follow."""

    def __init__(self, preemption: FairSharePreemption, tasks: list[TaskView], wanting: dict[str, str],
                 total: Resources = TOTAL) -> None:
        self.policy, self.tasks, self.total = preemption, list(tasks), total
        self.wanting = {name: R(amount) for name, amount in wanting.items()}

    def roles(self) -> dict[str, RoleUsage]:
        names = {t.role for t in self.tasks} | set(self.wanting)
        out = {}
        for name in sorted(names):
            usage = Resources.sum(t.resources for t in self.tasks if t.role == name)
            out[name] = RoleUsage(usage, usage + self.wanting.get(name, Resources()))
        return out

    def update(self, now: float) -> list:
        return self.policy.update(now, self.total, self.roles(), self.tasks)

    def end(self, *task_ids: str, tell: bool = True) -> None:
        for t in [t for t in self.tasks if t.task_id in task_ids]:
            self.tasks.remove(t)
            if tell:
                self.policy.task_gone(t.framework_id, t.task_id)

    def state(self, name: str | None = None) -> dict:
        state = self.policy.state()
        return state if name is None else state["roles"][name]


def of(actions: list, kind: type) -> list:
    return [a for a in actions if isinstance(a, kind)]


def warned(actions: list) -> list[str]:
    return [task_id for w in of(actions, Warn) for task_id in w.task_ids]


def a_fills_b_arrives(**b_settings) -> Cluster:
    """Role a fills the cluster (16 unit tasks, four per agent) and wants
    more; role b wants eight units."""
    b = role(**{"timeout": 30.0, "threshold": 0.5, **b_settings})
    return Cluster(policy(a=role(30.0, 0.5), b=b), spread("a", 16), {"a": "cpus:4;mem:4096", "b": "cpus:8;mem:8192"})


# ------------------------------------------------------------ fair shares
def test_fair_shares_instantaneous_over_active_roles_steady_over_all():
    cluster = Cluster(policy(a=role(), b=role(), c=role()), spread("a", 16), {"a": "cpus:1;mem:1024"})
    assert cluster.update(0.0) == []
    for name, fair, steady in (("a", "cpus:16;mem:16384", "cpus:5.333;mem:5461.333"),
                               ("b", "", "cpus:5.333;mem:5461.333"), ("c", "", "cpus:5.333;mem:5461.333")):
        entry = cluster.state(name)
        assert (entry["fair_share"], entry["steady_fair_share"]) == (fair, steady)
    cluster.wanting["b"] = UNIT
    cluster.update(1.0)
    assert cluster.state("a")["fair_share"] == cluster.state("b")["fair_share"] == "cpus:8;mem:8192"


def test_weights_divide_the_fair_shares():
    cluster = Cluster(policy(a=role(weight=3.0), b=role(weight=1.0)), spread("a", 16),
                      {"a": "cpus:4;mem:4096", "b": "cpus:8;mem:8192"})
    actions = cluster.update(0.0)
    assert cluster.state("a")["fair_share"] == "cpus:12;mem:12288"
    assert cluster.state("b")["fair_share"] == "cpus:4;mem:4096"
    assert cluster.state("b")["starved"] == "cpus:4;mem:4096"  # min(1.0 * 4, 8) - 0
    assert len(warned(actions)) == 4


def test_a_limit_caps_the_fair_share_per_kind():
    cluster = Cluster(policy(a=role(limit="cpus:4"), b=role()), spread("a", 4),
                      {"a": "cpus:8;mem:8192", "b": "cpus:8;mem:8192"})
    cluster.update(0.0)
    assert cluster.state("a")["fair_share"] == "cpus:4;mem:8192"
    assert cluster.state("b")["fair_share"] == "cpus:12;mem:8192"


# ---------------------------------------------------------- starvation timing
def test_fair_share_timeout_not_before_exactly_after():
    cluster = a_fills_b_arrives()
    del cluster.wanting["b"]
    assert cluster.update(0.0) == []
    cluster.wanting["b"] = R("cpus:8;mem:8192")
    assert cluster.update(10.0) == []
    assert cluster.update(39.999) == []
    entry = cluster.state("b")
    assert entry["fair_share_starved_since"] == 10.0 and entry["starved"] == ""
    actions = cluster.update(40.0)
    assert actions == [Warn("fw-a", ("a-3", "a-2", "a-1", "a-0"), 55.0, "b")]
    assert cluster.state("b")["starved"] == "cpus:4;mem:4096"


def test_the_timeout_restarts_when_the_role_is_no_longer_below():
    cluster = a_fills_b_arrives()
    assert cluster.update(10.0) == []
    del cluster.wanting["b"]  # no demand: not below anything
    assert cluster.update(20.0) == []
    assert cluster.state("b")["fair_share_starved_since"] is None
    cluster.wanting["b"] = R("cpus:8;mem:8192")
    assert cluster.update(25.0) == []
    assert cluster.update(54.999) == []
    assert warned(cluster.update(55.0))


def test_an_infinite_timeout_never_starves():
    cluster = a_fills_b_arrives(timeout=math.inf)
    assert cluster.update(0.0) == []
    assert cluster.update(1e9) == []
    assert cluster.state("b")["fair_share_starved_since"] == 0.0
    assert cluster.state("b")["starved"] == ""


# ------------------------------------------------------------- thresholds
@pytest.mark.parametrize("b_running, threshold, starved", [
    (3, 0.5, "cpus:1;mem:1024"),   # below min(0.5 * 8, 8) = 4
    (4, 0.5, ""),                  # at the threshold: not below
    (3, 1.0, "cpus:5;mem:5120"),   # below min(1.0 * 8, 8) = 8
    (0, 0.0, ""),                  # threshold 0: never fair-share starved
])
def test_threshold(b_running, threshold, starved):
    tasks = spread("a", 16 - b_running) + [task(f"b-{i}", "b", "node-3") for i in range(b_running)]
    cluster = Cluster(policy(a=role(), b=role(threshold=threshold)), tasks,
                      {"a": "cpus:4;mem:4096", "b": f"cpus:{8 - b_running};mem:{1024 * (8 - b_running)}"})
    actions = cluster.update(0.0)
    assert cluster.state("b")["starved"] == starved
    assert bool(actions) == bool(starved)


def test_the_target_is_capped_by_demand():
    cluster = Cluster(policy(a=role(), b=role(threshold=1.0)), spread("a", 16),
                      {"a": "cpus:4;mem:4096", "b": "cpus:2;mem:2048"})
    cluster.update(0.0)
    assert cluster.state("b")["starved"] == "cpus:2;mem:2048"


# ------------------------------------------------- min share vs fair share
def test_min_share_starvation_after_its_own_timeout():
    b = role(timeout=math.inf, min_share="cpus:6;mem:6144", min_share_preemption_timeout=5.0)
    cluster = Cluster(policy(a=role(), b=b), spread("a", 16), {"a": "cpus:4;mem:4096", "b": "cpus:8;mem:8192"})
    assert cluster.update(0.0) == []
    assert cluster.update(4.999) == []
    assert cluster.state("b")["min_share_starved_since"] == 0.0
    actions = cluster.update(5.0)
    entry = cluster.state("b")
    assert entry["fair_share_starvation"] == ""
    assert entry["min_share_starvation"] == entry["starved"] == "cpus:6;mem:6144"
    assert len(warned(actions)) == 6
    assert all(k.reason.endswith("(min share starvation)") for k in of(cluster.update(20.0), Kill))


@pytest.mark.parametrize("min_share, starved", [
    ("cpus:6;mem:6144", "cpus:6;mem:6144"),   # min share starvation larger: it wins
    ("cpus:2;mem:2048", "cpus:4;mem:4096"),   # covered by the fair-share starvation
    ("cpus:6;mem:1024", "cpus:6;mem:4096"),   # per kind: the larger of the two
])
def test_the_amount_is_the_larger_of_the_two_starvations(min_share, starved):
    b = role(threshold=0.5, min_share=min_share, min_share_preemption_timeout=0.0)
    cluster = Cluster(policy(a=role(), b=b), spread("a", 16), {"a": "cpus:4;mem:4096", "b": "cpus:8;mem:8192"})
    cluster.update(0.0)
    entry = cluster.state("b")
    assert entry["fair_share_starvation"] == "cpus:4;mem:4096"  # min(0.5 * 8, 8) - 0
    assert entry["min_share_starvation"] == min_share
    assert entry["starved"] == starved


def test_min_share_starvation_is_capped_by_demand():
    b = role(timeout=math.inf, min_share="cpus:6;mem:6144", min_share_preemption_timeout=0.0)
    cluster = Cluster(policy(a=role(), b=b), spread("a", 16), {"a": "cpus:4;mem:4096", "b": "cpus:3;mem:3072"})
    cluster.update(0.0)
    assert cluster.state("b")["starved"] == "cpus:3;mem:3072"


@pytest.mark.parametrize("x_fair_share_timeout", [math.inf, 0.0])
def test_a_parents_min_share_starvation_goes_to_sub_roles_with_pending_demand(x_fair_share_timeout):
    p = {"min_share": "cpus:6;mem:6144", "min_share_preemption_timeout": 0.0}
    cluster = Cluster(policy(a=role(math.inf), p=p, p__x=role(x_fair_share_timeout), p__y=role(math.inf)),
                      spread("a", 16), {"a": "cpus:4;mem:4096", "p/x": "cpus:2;mem:2048", "p/y": "cpus:8;mem:8192"})
    actions = cluster.update(0.0)
    assert cluster.state("p")["min_share_starvation"] == "cpus:6;mem:6144"
    # x (first by name among equally served) can use only 2: the other 4 go to y
    assert cluster.state("p/x")["starved"] == "cpus:2;mem:2048"
    assert cluster.state("p/y")["starved"] == "cpus:4;mem:4096"
    x_fair = "cpus:2;mem:2048" if x_fair_share_timeout == 0.0 else ""
    assert cluster.state("p/x")["fair_share_starvation"] == x_fair
    # the most starved first
    assert [(w.role_for, len(w.task_ids)) for w in of(actions, Warn)] == [("p/y", 4), ("p/x", 2)]


# ------------------------------------------------------------ the victims
def test_never_takes_a_role_below_its_fair_share():
    # fair shares 16/3 each; b needs 16/3; a (10) gives 4 and stays above
    # 16/3, c (6) would drop to 5 < 16/3 and gives nothing
    tasks = spread("a", 10) + spread("c", 6, agents=("node-2", "node-3"), per_agent=3)
    cluster = Cluster(policy(a=role(), b=role(), c=role()), tasks,
                      {"a": "cpus:1;mem:1024", "b": "cpus:8;mem:8192", "c": "cpus:1;mem:1024"})
    actions = cluster.update(0.0)
    victims = warned(actions)
    assert len(victims) == 4 and all(v.startswith("a-") for v in victims)
    assert cluster.state("b")["starved"] == "cpus:5.333;mem:5461.333"
    # nothing more while the kills are pending, and never from c
    assert warned(cluster.update(1.0)) == []


def test_a_role_exactly_at_its_fair_share_gives_nothing():
    cluster = Cluster(policy(a=role(), b=role(), c=role()), spread("a", 8) + spread("c", 8, prefix="c"),
                      {"a": "cpus:1;mem:1024", "b": "cpus:8;mem:8192", "c": "cpus:1;mem:1024"})
    # fair shares 16/3 each: a and c (8) are above, each may give 2
    assert len(warned(cluster.update(0.0))) == 4
    cluster = Cluster(policy(a=role(), b=role()), spread("a", 8), {"a": "cpus:1;mem:1024", "b": "cpus:16;mem:16384"})
    cluster.tasks += spread("b", 8, agents=("node-2", "node-3"))
    assert cluster.update(0.0) == []  # a at 8 = its fair share; b at 8 too: nobody starved
    cluster.tasks = spread("a", 8) + spread("b", 4, agents=("node-2",))
    assert cluster.update(1.0) == []  # b starved but a is exactly at its fair share


def test_fewest_tasks_a_big_task_that_covers_the_need_wins():
    tasks = ([task("a-big", "a", "node-0", R("cpus:4;mem:4096"))]
             + spread("a", 8, agents=("node-1", "node-2")))
    cluster = Cluster(policy(a=role(), b=role(threshold=0.5), busy=0.0), tasks,   # 75% used: below 0.8
                      {"a": "cpus:4;mem:4096", "b": "cpus:4;mem:4096"})
    assert warned(cluster.update(0.0)) == ["a-big"]


def test_the_fewest_tasks_search_finds_a_lone_big_task_among_many_agents():
    agents = tuple(f"node-{i:02d}" for i in range(40))
    tasks = spread("a", 156, agents=agents[:39]) + [task("a-big", "a", "node-39", R("cpus:4;mem:4096"))]
    cluster = Cluster(policy(a=role(), b=role()), tasks, {"a": "cpus:4;mem:4096", "b": "cpus:4;mem:4096"},
                      total=R("cpus:160;mem:163840"))
    assert warned(cluster.update(0.0)) == ["a-big"]


def test_bigger_tasks_first_when_they_fit_the_need():
    two = task("a-two", "a", "node-0", R("cpus:2;mem:2048"), started=0.0)
    units = [task(f"a-u{i}", "a", "node-0", started=float(i)) for i in range(2)]
    rest = spread("a", 12, agents=("node-1", "node-2", "node-3"), prefix="a-r")
    cluster = Cluster(policy(a=role(), b=role()), [two, *units, *rest],
                      {"a": "cpus:4;mem:4096", "b": "cpus:3;mem:3072"})
    # node-0: the 2-cpu task and then the newest unit (2 tasks) beats three units elsewhere
    assert warned(cluster.update(0.0)) == ["a-two", "a-u1"]


@pytest.mark.parametrize("agents, b_wants, expected", [
    (("node-0", "node-0"), "cpus:4;mem:4096", ["a-6", "a-5"]),  # on one agent: a, still a (6/4 > 5/4)
    (("node-1", "node-0"), "cpus:1;mem:1024", ["a-6"]),  # one task covers it on either agent: a's
])
def test_the_most_over_served_role_first(agents, b_wants, expected):
    # total 12: fair shares 4 each; a holds 7, c 5; b needs min(0.5 * 4, demand)
    a_agent, c_agent = agents
    tasks = ([task(f"a-{i}", "a", a_agent, started=i) for i in range(7)]
             + [task(f"c-{i}", "c", c_agent, started=i) for i in range(5)])
    cluster = Cluster(policy(a=role(), b=role(threshold=0.5), c=role()), tasks,
                      {"a": "cpus:1;mem:1024", "b": b_wants, "c": "cpus:1;mem:1024"},
                      total=R("cpus:12;mem:12288"))
    assert warned(cluster.update(0.0)) == expected


def test_a_weight_makes_a_role_less_over_served():
    # total 12, weights a 2, c 1, b 1: fair shares a 6, c 3, b 3; a holds 7 (7/6), c 5 (5/3)
    tasks = spread("a", 7, per_agent=7) + [task(f"c-{i}", "c", "node-0", started=i) for i in range(5)]
    cluster = Cluster(policy(a=role(weight=2.0), b=role(), c=role()), tasks,
                      {"a": "cpus:1;mem:1024", "b": "cpus:1;mem:1024", "c": "cpus:1;mem:1024"},
                      total=R("cpus:12;mem:12288"))
    assert warned(cluster.update(0.0)) == ["c-4"]


def test_prefers_an_agent_where_the_whole_need_fits():
    # node-1 can free 4 units alone: take them all there, not 2 + 2
    tasks = ([task(f"a-0{i}", "a", "node-0", started=10.0 + i) for i in range(2)]
             + [task(f"a-1{i}", "a", "node-1", started=float(i)) for i in range(4)]
             + [task(f"a-2{i}", "a", "node-2", started=20.0 + i) for i in range(4)]
             + [task(f"a-3{i}", "a", "node-3", started=30.0 + i) for i in range(2)])
    cluster = Cluster(policy(a=role(), b=role(), busy=0.0), tasks,            # 75% used: below 0.8
                      {"a": "cpus:4;mem:4096", "b": "cpus:4;mem:4096"})
    cluster.update(0.0)
    pending = cluster.state()["pending"]
    assert len(pending) == 4
    assert {p["agent_id"] for p in pending} == {"node-1"}


def test_without_a_whole_fit_the_biggest_chunk_first():
    tasks = ([task(f"a-0{i}", "a", "node-0") for i in range(2)]
             + [task(f"a-1{i}", "a", "node-1") for i in range(3)]
             + [task(f"a-2{i}", "a", "node-2") for i in range(2)]
             + [task(f"a-3{i}", "a", "node-3") for i in range(2)])
    cluster = Cluster(policy(a=role(), b=role(), busy=0.0), tasks,            # 75% used: below 0.8
                      {"a": "cpus:4;mem:4096", "b": "cpus:4;mem:4096"}, total=R("cpus:12;mem:12288"))
    # fair shares 6 each; a (9) may give 3 and b needs 4: node-1's three
    cluster.update(0.0)
    assert [p["agent_id"] for p in cluster.state()["pending"]] == ["node-1"] * 3


def test_only_tasks_that_help_with_what_is_missing():
    # b needs cpus only; a's memory-only task frees nothing b lacks
    tasks = [task("a-mem", "a", "node-0", R("mem:8192"), started=9.0)] + spread("a", 12, prefix="a-cpu")
    cluster = Cluster(policy(a=role(), b=role()), tasks, {"a": "cpus:4;mem:4096", "b": "cpus:2"})
    victims = warned(cluster.update(0.0))
    assert "a-mem" not in victims and len(victims) == 2


# ------------------------------------------------------------ warn and kill
def test_warn_then_kill_after_wait_before_kill_then_prefer():
    cluster = a_fills_b_arrives()
    cluster.update(10.0)
    assert warned(cluster.update(40.0)) == ["a-3", "a-2", "a-1", "a-0"]
    assert cluster.update(45.0) == []
    assert cluster.update(54.999) == []
    kills = cluster.update(55.0)
    assert [(k.framework_id, k.task_id) for k in kills] == [("fw-a", t) for t in ("a-3", "a-2", "a-1", "a-0")]
    assert all(isinstance(k, Kill) and "'b'" in k.reason and "fair share" in k.reason for k in kills)
    assert cluster.update(55.5) == []  # still running: no second kill
    cluster.end("a-3", "a-2", "a-1", "a-0", tell=False)  # the kills land
    assert cluster.update(56.0) == [Prefer("b", "node-0", R("cpus:4;mem:4096"), 58.0)]
    assert cluster.state()["counters"] == {"warned": 4, "killed": 4, "released": 0, "cancelled": 0}


def test_no_wait_warns_and_kills_at_once():
    cluster = a_fills_b_arrives(timeout=0.0)
    cluster.policy.set_settings(attrs.evolve(cluster.policy.settings, preemption=PreemptionConfig(True, 0.0)))
    actions = cluster.update(0.0)
    assert [type(a) for a in actions] == [Warn] + [Kill] * 4


def test_a_voluntarily_released_task_is_not_killed():
    cluster = a_fills_b_arrives()
    cluster.update(10.0)
    cluster.update(40.0)
    cluster.end("a-3")  # the framework gives it back (and tells the master)
    assert cluster.update(45.0) == [Prefer("b", "node-0", UNIT, 47.0)]
    cluster.end("a-2", tell=False)  # or it simply stops being listed
    assert cluster.update(46.0) == [Prefer("b", "node-0", UNIT, 48.0)]
    kills = cluster.update(55.0)
    assert [k.task_id for k in kills] == ["a-1", "a-0"]
    assert cluster.state()["counters"] == {"warned": 4, "killed": 2, "released": 2, "cancelled": 0}


def test_task_gone_for_an_unknown_task_is_ignored():
    cluster = a_fills_b_arrives()
    cluster.policy.task_gone("fw-a", "nope")
    assert cluster.update(0.0) == []


def test_no_kill_when_the_starved_role_no_longer_wants_anything():
    cluster = a_fills_b_arrives()
    cluster.update(10.0)
    cluster.update(40.0)
    del cluster.wanting["b"]  # b's framework went away
    assert cluster.update(55.0) == []
    state = cluster.state()
    assert state["pending"] == [] and state["counters"]["cancelled"] == 4


def test_no_recheck_until_the_kills_land_or_their_deadline_and_a_grace_pass():
    cluster = a_fills_b_arrives()
    cluster.update(10.0)
    assert len(warned(cluster.update(40.0))) == 4
    for now in (40.5, 45.0, 54.5):  # b is still starved, but its victims are pending
        assert cluster.update(now) == []
    assert len(of(cluster.update(55.0), Kill)) == 4
    assert cluster.state("b")["hold_until"] == 58.0  # deadline + prefer_for (2) + 2 updates (1)
    assert cluster.update(57.999) == []  # the kills have not landed
    second = warned(cluster.update(58.0))  # the grace passed: re-checked, other tasks chosen
    assert second == ["a-7", "a-6", "a-5", "a-4"]


def killed_and_landed() -> Cluster:
    """b starved at 40, a's four tasks warned, killed at 55, gone by 55.5."""
    cluster = a_fills_b_arrives()
    for now in (10.0, 40.0, 55.0):
        cluster.update(now)
    cluster.end("a-3", "a-2", "a-1", "a-0", tell=False)
    assert of(cluster.update(55.5), Prefer) == [Prefer("b", "node-0", R("cpus:4;mem:4096"), 57.5)]
    return cluster


def test_after_the_kills_land_the_role_waits_for_the_preference_window():
    cluster = killed_and_landed()
    assert cluster.update(57.0) == []  # the allocator has not placed b's tasks yet: still on hold
    cluster.tasks += [task(f"b-{i}", "b", "node-0") for i in range(4)]  # now it has
    cluster.wanting["b"] = R("cpus:4;mem:4096")
    assert cluster.update(57.5) == []  # at its threshold (4 of fair share 8): not starved any more
    assert cluster.state("b")["fair_share_starved_since"] is None


def test_without_the_freed_resources_the_role_is_rechecked_after_the_window():
    cluster = any_utilization(killed_and_landed())        # 12 of 16 used after the kills: below 0.8
    assert cluster.update(57.499) == []
    assert len(warned(cluster.update(57.5))) == 4


def test_tasks_of_a_role_missing_from_the_input_are_left_alone():
    cluster = a_fills_b_arrives(timeout=0.0)
    cluster.policy = policy(b=role(threshold=0.5), c=role())  # a is known only from the input
    assert len(warned(cluster.update(0.0))) == 4
    roles = cluster.roles()
    del roles["a"]  # a's frameworks are gone from the input, their tasks not yet
    roles["c"] = RoleUsage(Resources(), R("cpus:4;mem:4096"))
    assert cluster.policy.update(1.0, TOTAL, roles, cluster.tasks) == []
    assert cluster.state("c")["starved"] == "cpus:4;mem:4096"


# ------------------------------------------------------------------ disabled
def test_disabled_returns_nothing_but_reports_shares_and_starvation():
    cluster = a_fills_b_arrives(timeout=0.0)
    cluster.policy = FairSharePreemption(attrs.evolve(cluster.policy.settings,
                                                      preemption=PreemptionConfig(False, 15.0)))
    assert cluster.update(0.0) == []
    assert cluster.update(100.0) == []
    state = cluster.state()
    assert state["enabled"] is False and state["pending"] == []
    assert state["roles"]["b"]["starved"] == "cpus:4;mem:4096"
    assert state["roles"]["b"]["fair_share"] == "cpus:8;mem:8192"


# -------------------------------------------------------------------- nesting
def nested(ops: int, prod: int, dev: int, wanting: dict[str, str]) -> Cluster:
    tasks = (spread("ops", ops, per_agent=4) + spread("eng/prod", prod, agents=("node-2", "node-3", "node-0"))
             + spread("eng/dev", dev, agents=("node-3", "node-1")))
    return Cluster(policy(ops=role(), eng__prod=role(), eng__dev=role()), tasks, wanting)


def test_nested_roles_share_down_the_tree():
    cluster = nested(8, 8, 0, {"ops": "cpus:1", "eng/prod": "cpus:1", "eng/dev": "cpus:4;mem:4096"})
    actions = cluster.update(0.0)
    fair = {name: cluster.state(name)["fair_share"] for name in ("ops", "eng", "eng/prod", "eng/dev")}
    assert fair == {"ops": "cpus:8;mem:8192", "eng": "cpus:8;mem:8192", "eng/prod": "cpus:4;mem:4096",
                    "eng/dev": "cpus:4;mem:4096"}
    assert cluster.state("eng")["usage"] == "cpus:8;mem:8192"
    # dev takes from its sibling prod (eng is shared: its total does not change); ops is at its fair share
    assert {w.role_for for w in of(actions, Warn)} == {"eng/dev"}
    assert [t.split("-")[0] for t in warned(actions)] == ["eng"] * 4
    assert all(t.startswith("eng-prod-") for t in warned(actions))


def test_a_parent_is_never_taken_below_its_fair_share():
    # eng is exactly at its fair share (8): ops gets nothing from prod, though
    # prod alone (7, fair share 4) is above its own
    cluster = nested(4, 7, 1, {"ops": "cpus:8;mem:8192", "eng/prod": "cpus:1", "eng/dev": "cpus:3;mem:3072"})
    cluster.policy = policy(ops=role(), eng__prod=role(), eng__dev=role(timeout=math.inf))
    assert cluster.update(0.0) == []
    assert cluster.state("ops")["starved"] == "cpus:4;mem:4096"


def test_a_parent_above_its_fair_share_gives_from_both_children_down_to_it():
    cluster = nested(2, 8, 6, {"ops": "cpus:8;mem:8192", "eng/prod": "cpus:1", "eng/dev": "cpus:1"})
    actions = cluster.update(0.0)
    victims = warned(actions)
    assert len(victims) == 6  # eng 14 -> 8
    assert sum(v.startswith("eng-prod-") for v in victims) == 4  # prod 8 -> 4
    assert sum(v.startswith("eng-dev-") for v in victims) == 2  # dev 6 -> 4


def test_a_role_with_work_of_its_own_and_sub_roles():
    tasks = spread("b", 12) + spread("a/x", 4, agents=("node-3",))
    cluster = Cluster(policy(a=role(), a__x=role(), b=role()), tasks,
                      {"a": "cpus:4;mem:4096", "a/x": "cpus:1", "b": "cpus:1"})
    actions = cluster.update(0.0)
    entry = cluster.state("a")
    assert entry["fair_share"] == "cpus:8;mem:8192"
    assert entry["own"]["fair_share"] == "cpus:4;mem:4096"
    assert entry["starved"] == "cpus:4;mem:4096"
    assert [(w.role_for, len(w.task_ids)) for w in of(actions, Warn)] == [("a", 4)]
    assert all(t.startswith("b-") for t in warned(actions))


def test_a_roles_own_work_is_a_leaf_of_weight_one_beside_its_sub_roles():
    """Mesos's ``a/.`` (the sorter's AddChildToLeaf): a's weight counts for
    its whole subtree against b; inside a, its own work and a/c split 1:1."""
    tasks = spread("a", 4) + spread("a/c", 4, agents=("node-1",)) + spread("b", 4, agents=("node-2",))
    cluster = Cluster(policy(a=role(weight=3.0), a__c=role(), b=role()), tasks,
                      {"a": "cpus:16;mem:16384", "a/c": "cpus:16;mem:16384", "b": "cpus:16;mem:16384"})
    cluster.update(0.0)
    assert cluster.state("a")["fair_share"] == "cpus:12;mem:12288"
    assert cluster.state("b")["fair_share"] == "cpus:4;mem:4096"
    assert cluster.state("a")["own"]["fair_share"] == "cpus:6;mem:6144"
    assert cluster.state("a/c")["fair_share"] == "cpus:6;mem:6144"


# ------------------------------------------------------------------ settings
def test_settings_from_a_roles_file():
    config = parse_roles({
        "preemption": {"enabled": True, "wait_before_kill": 5.0, "fair_share_preemption_threshold": 0.8},
        "roles": {"eng/prod": {"weight": 2.0, "limit": "cpus:8;gpus:0", "min_share": "cpus:1",
                               "fair_share_preemption_timeout": 30.0}}})
    preemption = FairSharePreemption(config)  # the policy reads the roles file itself
    assert preemption.state()["enabled"] and config.preemption.wait_before_kill == 5.0
    prod = preemption._rules_of("eng/prod")
    assert prod.weight == 2.0 and prod.min_share == R("cpus:1")
    assert prod.max_share("gpus") == 0.0 and prod.max_share("cpus") == 8.0 and prod.max_share("mem") == math.inf
    assert prod.fair_share_preemption_threshold == 0.8
    below = preemption._rules_of("eng/prod/x")  # inherits the timeouts, not the weight or shares
    assert (below.weight, below.min_share, below.fair_share_preemption_timeout) == (1.0, Resources(), 30.0)
    assert preemption._rules_of("other").fair_share_preemption_timeout == math.inf
    assert preemption._rules_of("other").fair_share_preemption_threshold == 0.8
    # a reloaded file replaces what the policy read of the old one
    preemption.set_settings(attrs.evolve(config, roles={}))
    assert preemption._rules_of("eng/prod").weight == 1.0


@pytest.mark.parametrize("bad", [{"weight": 0}, {"weight": math.inf}, {"fair_share_preemption_threshold": 1.5},
                                 {"fair_share_preemption_timeout": -1}, {"min_share_preemption_timeout": math.nan}])
def test_bad_role_settings_are_refused(bad):
    with pytest.raises(ValueError):
        RoleConfig("a", **bad)


def test_bad_policy_arguments_are_refused():
    with pytest.raises(ValueError):
        PreemptionConfig(True, math.inf)
    with pytest.raises(ValueError):
        FairSharePreemption(RolesConfig(), update_interval=-1.0)


def test_time_never_goes_back():
    cluster = a_fills_b_arrives()
    cluster.update(5.0)
    with pytest.raises(ValueError):
        cluster.update(4.0)


def test_state_is_json_and_deterministic():
    first, second = a_fills_b_arrives(timeout=0.0), a_fills_b_arrives(timeout=0.0)
    second.tasks.reverse()
    assert first.update(0.0) == second.update(0.0)
    assert json.loads(json.dumps(first.state())) == second.state()


# ------------------------------------------------------------- the docs
def test_docs_example():
    """The worked example of docs/preemption.rst runs as written."""
    failed, attempted = doctest.testfile(str(DOCS_PATH), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert (failed, attempted > 10) == (0, True)


# ------------------------------------------------------------ the property
ROLES = ("a", "b", "c", "d/x", "d/y")
AGENTS = {f"node-{i}": R("cpus:4;mem:4096") for i in range(4)}
SIZES = (R("cpus:1;mem:1024"), R("cpus:2;mem:512"), R("cpus:0.5;mem:2048"))
WANTS = ("", "cpus:1;mem:1024", "cpus:4;mem:4096", "cpus:8;mem:2048")


def oracle_fair_shares(settings: RolesConfig, roles: dict[str, RoleUsage]) -> dict[str, Resources]:
    """Instantaneous fair shares of the fixed tree a, b, c, d/{x, y}, straight
    from the fairness library, one pass per kind."""
    shares: dict[str, dict[str, float]] = {}
    for kind, amount in TOTAL.scalars().items():
        def queue(name, path, kids=()):
            p = settings.effective(path)
            minimum = R(p.min_share or "").get(kind)
            limit = quantities(p.limit)
            maximum = limit[kind] / 1000 if kind in limit else math.inf
            active = None if kids else bool(roles[path].demand)
            return FairShareQueue(name, p.weight, minimum, maximum, active, kids)
        root = FairShareQueue("root", children=(
            queue("a", "a"), queue("b", "b"), queue("c", "c"),
            queue("d", "d", (queue("x", "d/x"), queue("y", "d/y")))))
        for path, share in hierarchical_fair_shares(root, amount).items():
            shares.setdefault(path, {})[kind] = share
    return {path: Resources(by_kind) for path, by_kind in shares.items() if path}


def share(resources: Resources) -> float:
    return max(resources.get(kind) / amount for kind, amount in TOTAL.scalars().items())


def subtree(path: str, name: str) -> bool:
    return name == path or name.startswith(path + "/")


def role_settings(name: str) -> st.SearchStrategy[RoleConfig]:
    return st.builds(
        RoleConfig, st.just(name),
        weight=st.sampled_from([1.0, 2.0, 3.0]),
        min_share=st.sampled_from([None, "cpus:2;mem:2048", "cpus:4"]),
        fair_share_preemption_timeout=st.sampled_from([0.0, 1.0, 3.0, math.inf]),
        min_share_preemption_timeout=st.sampled_from([0.0, 2.0, math.inf]),
        fair_share_preemption_threshold=st.sampled_from([0.5, 0.8, 1.0]),
    )


steps = st.lists(st.one_of(
    st.tuples(st.just("tick"), st.sampled_from([0.5, 1.0, 2.5])),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 1.0, 2.5])),
    st.tuples(st.just("release"), st.integers(0, 20)),
    st.tuples(st.just("launch"), st.sampled_from(ROLES), st.sampled_from(SIZES)),
    st.tuples(st.just("want"), st.sampled_from(ROLES), st.sampled_from(WANTS)),
), min_size=5, max_size=30)


@given(
    roles=st.fixed_dictionaries({name: role_settings(name) for name in ROLES}),
    wait=st.sampled_from([0.0, 1.0, 3.0]),
    initial=st.lists(st.tuples(st.sampled_from(ROLES), st.sampled_from(SIZES)), min_size=8, max_size=24),
    wants=st.fixed_dictionaries({name: st.sampled_from(WANTS) for name in ROLES}),
    script=steps,
)
def test_property_victims_only_above_fair_share_and_no_more_than_needed(roles, wait, initial, wants, script):
    settings = RolesConfig(PreemptionConfig(True, wait), roles)
    preemption = FairSharePreemption(settings)
    cluster = Cluster(preemption, [], wants)
    serial = iter(range(10_000))

    def launch(name: str, size: Resources) -> None:
        for agent, capacity in AGENTS.items():
            used = Resources.sum(t.resources for t in cluster.tasks if t.agent_id == agent)
            if capacity.contains(used + size):
                cluster.tasks.append(task(f"t{next(serial)}", name, agent, size, started=now))
                return

    now = 0.0
    for name, size in initial:
        launch(name, size)
    previous: set[str] = set()
    warned_at: dict[str, float] = {}
    deadline_of: dict[str, float] = {}
    gone: set[str] = set()
    for step in script:
        if step[0] == "tick":
            now += step[1]
        elif step[0] == "release":
            pending = [p["task_id"] for p in preemption.state()["pending"] if p["killed_at"] is None]
            if pending:
                victim = pending[step[1] % len(pending)]
                cluster.end(victim)
                gone.add(victim)
        elif step[0] == "launch":
            launch(step[1], step[2])
        else:
            cluster.wanting[step[1]] = R(step[2])
        roles_now = cluster.roles()
        for name in ROLES:
            roles_now.setdefault(name, RoleUsage())
        running = {t.task_id: t for t in cluster.tasks}
        actions = preemption.update(now, TOTAL, roles_now, cluster.tasks)
        state = preemption.state()
        fair = oracle_fair_shares(settings, roles_now)
        usage = {path: Resources.sum(u.usage for name, u in roles_now.items() if subtree(path, name))
                 for path in fair}
        for path, entry in state["roles"].items():
            if path in fair:
                assert abs(share(R(entry["fair_share"])) - share(fair[path])) < 1e-3

        new = [p for p in state["pending"] if p["task_id"] not in previous]
        previous = {p["task_id"] for p in state["pending"]}
        assert sorted(p["task_id"] for p in new) == sorted(warned(actions))
        for p in new:
            assert p["task_id"] in running and p["role"] != p["role_for"]
            warned_at[p["task_id"]] = now
            deadline_of[p["task_id"]] = p["deadline"]
            # never from a role at or below its fair share ...
            assert share(usage[p["role"]]) > share(fair[p["role"]]) + EPSILON / 2
            # ... nor below it afterwards, nor any ancestor the starved role does not share
            for path in fair:
                if subtree(path, p["role"]) and not subtree(path, p["role_for"]):
                    taken = Resources.sum(R(q["resources"]) for q in state["pending"]
                                          if subtree(path, q["role"]) and not subtree(path, q["role_for"]))
                    assert share(usage[path].subtract_clamped(taken)) >= share(fair[path]) - EPSILON
        # no more than the starved amount plus one task, and every task helped
        for starved in {p["role_for"] for p in new}:
            need = R(state["roles"][starved]["starved"])
            chosen = [R(p["resources"]) for p in new if p["role_for"] == starved]
            freed = Resources()
            for resources in chosen:
                assert not freed.contains(need)
                assert share(resources.minimum(need.subtract_clamped(freed))) > 0
                freed += resources
        # kills only for warned tasks still running at their deadline, once
        for kill in of(actions, Kill):
            assert kill.task_id in warned_at and kill.task_id not in gone
            assert now >= deadline_of[kill.task_id]
            gone.add(kill.task_id)
        for prefer in of(actions, Prefer):
            assert prefer.until > now and prefer.resources
        # the kills land right away
        cluster.end(*(k.task_id for k in of(actions, Kill)), tell=False)


# ------------------------------------------ cluster utilisation threshold
def test_no_new_victims_while_the_cluster_is_used_at_or_below_the_threshold_yarn():
    # seed 003 / YARN shouldAttemptPreemption; issue 16: 4 tasks were warned at 62.5%
    tasks = spread("a", 10)                              # 10 of 16: 62.5%
    wanting = {"a": "cpus:4;mem:4096", "b": "cpus:8;mem:8192"}
    cluster = Cluster(policy(a=role(), b=role(threshold=1.0)), tasks, wanting)
    assert cluster.update(0.0) == []
    state = cluster.state()
    assert state["cluster_utilization"] == 0.625 and state["cluster_utilization_threshold"] == 0.8
    assert state["roles"]["b"]["starved"] != ""           # starvation is still measured
    cluster.tasks += spread("a", 3, prefix="more")         # 13 of 16: 81.25%
    assert len(warned(cluster.update(1.0))) > 0


def test_the_threshold_is_strict_and_warned_tasks_are_killed_below_it():
    cluster = Cluster(policy(a=role(), b=role(threshold=1.0), busy=0.75, wait=5.0), spread("a", 12),
                      {"a": "cpus:4;mem:4096", "b": "cpus:8;mem:8192"})
    assert cluster.update(0.0) == []                      # exactly 0.75: not above it
    cluster.tasks += spread("a", 1, prefix="more")
    victims = warned(cluster.update(1.0))
    assert victims
    cluster.tasks = [t for t in cluster.tasks if t.task_id.startswith("more")] + \
        [t for t in cluster.tasks if t.task_id in victims]    # the cluster empties, the victims still run
    kills = of(cluster.update(6.0), Kill)
    assert sorted(k.task_id for k in kills) == sorted(victims)


def test_the_roles_file_sets_the_threshold():
    config = parse_roles({"preemption": {"enabled": True, "cluster_utilization_threshold": 0.5}})
    assert config.preemption.cluster_utilization_threshold == 0.5
    assert parse_roles({}).preemption.cluster_utilization_threshold == 0.8
    assert config.to_json()["preemption"]["cluster_utilization_threshold"] == 0.5
    with pytest.raises(ValueError, match="preemption.cluster_utilization_threshold"):
        parse_roles({"preemption": {"cluster_utilization_threshold": 1.5}})
