"""The launch planner on its own (mesoslike.master.planner): offer ids and
operations in, a LaunchPlan or a Refusal out — and nothing it is given
changes."""

import copy

import pytest

from mesoslike.acl import Acls, Credentials, Principal
from mesoslike.allocator import Offer
from mesoslike.master.planner import (BAD_FILTER, INVALID_OFFERS, OPERATION_REFUSED, LaunchPlan, Refusal, operations_of,
                                      plan_accept)
from mesoslike.master.records import AgentRecord, FrameworkRecord, TaskRecord, new_status
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo, Operation, OperationType, TaskInfo, TaskState
from mesoslike.wire import messages as m
from mesoslike.wire.types import ExecutorInfo

pytestmark = pytest.mark.timeout(30)

R = Resources.parse


def framework(user="alice", role="analytics", principal=""):
    return FrameworkRecord(FrameworkInfo("job", id="F1", user=user, role=role, principal=principal), peer=b"fw")


def agent(agent_id="S1", resources="cpus:4;mem:1024"):
    return AgentRecord(AgentInfo("node", R(resources), id=agent_id), peer=b"agent")


def offer(offer_id, resources="cpus:2;mem:512", agent_id="S1", framework_id="F1"):
    return Offer(id=offer_id, agent_id=agent_id, hostname="node", resources=R(resources), framework_id=framework_id)


def task(task_id, resources="cpus:1;mem:128", agent_id="S1", **fields):
    return TaskInfo(task_id, agent_id, "sleep 1", R(resources), **fields)


def plan(record, offer_ids, operations, *, offers=(), agents=None, refuse=5.0, principal=None, credentials=None):
    by_id = {o.id: o for o in offers}
    return plan_accept(record, offer_ids, operations, refuse, principal, offer_of=by_id.get,
                       agents=agents if agents is not None else {"S1": agent()}, credentials=credentials)


def launch(*tasks):
    return [Operation(OperationType.LAUNCH, tasks=list(tasks))]


def test_tasks_that_fit_launch_and_use_what_they_ask_for():
    record, made = framework(), [offer("O1"), offer("O2")]
    result = plan(record, ["O1", "O2"], launch(task("a"), task("b", "cpus:2;mem:256")), offers=made)
    assert isinstance(result, LaunchPlan)
    assert [t.task_id for t in result.launched] == ["a", "b"] and not result.failed
    assert result.used == R("cpus:3;mem:384") and result.offers == tuple(made) and result.refuse_seconds == 5.0
    assert [t.user for t in result.launched] == ["alice", "alice"]   # the framework's user, written in


def test_an_invalid_task_fails_alone_and_the_others_launch():
    record = framework()
    record.tasks["old"] = TaskRecord(task("old"), "F1", "S1", new_status("old", TaskState.RUNNING))
    result = plan(record, ["O1"], launch(task("old"), task("big", "cpus:9"), task("twice"), task("twice"),
                                         task("elsewhere", agent_id="S9"), task("fine")), offers=[offer("O1")])
    assert isinstance(result, LaunchPlan)
    assert [t.task_id for t in result.launched] == ["twice", "fine"]
    assert {f.task.task_id: f.why for f in result.failed} == {
        "old": "task id old is already in use",
        "big": "task resources cpus:9 exceed what is left of the offers (cpus:2;mem:512)",
        "twice": "task id twice is already in use",
        "elsewhere": "task agent_id 'S9' is not the offers' agent S1"}
    assert {(f.state, f.reason) for f in result.failed} == {(TaskState.ERROR, "REASON_TASK_INVALID")}


@pytest.mark.parametrize("ids, made, why", [
    ([], [], "no offers given"),
    (["O1", "O1"], [offer("O1")], "an offer is given twice"),
    (["O1", "gone"], [offer("O1")], "offer gone is no longer valid (answered, rescinded or never made)"),
    (["O1", "O2"], [offer("O1"), offer("O2", framework_id="F2")], "offer O2 is no longer valid"),
    (["O1", "O2"], [offer("O1"), offer("O2", agent_id="S2")], "offers of more than one agent in one accept"),
])
def test_offers_the_framework_may_not_accept_refuse_the_accept(ids, made, why):
    result = plan(framework(), ids, launch(task("a"), task("b")), offers=made)
    assert isinstance(result, Refusal) and result.kind == INVALID_OFFERS and result.why.startswith(why)
    assert [t.task_id for t in result.dropped] == ["a", "b"] and result.refuse_seconds == 5.0
    assert all(o.framework_id == "F1" for o in result.offers)   # only its own valid ones go back
    assert not result.tells_framework


def test_a_negative_filter_refuses_before_looking_at_the_offers():
    result = plan(framework(), ["O1"], launch(task("a")), offers=[offer("O1")], refuse=-1)
    assert result == Refusal(BAD_FILTER, "refuse_seconds must be >= 0, got -1")
    assert result.tells_framework


def test_a_reservation_applies_to_the_operations_after_it():
    reserve = Operation(OperationType.RESERVE, resources=R("cpus:1"))
    result = plan(framework(principal="alice"), ["O1"],
                  [reserve, *launch(task("on-reserved", "cpus(analytics,alice):1;mem:128"))], offers=[offer("O1")],
                  principal="alice")
    assert isinstance(result, LaunchPlan) and [t.task_id for t in result.launched] == ["on-reserved"]
    (conversion,) = result.conversions
    assert conversion.removed == R("cpus:1") and conversion.added.reservation_roles() == ["analytics"]


def test_a_bad_reservation_refuses_the_whole_accept_unfiltered():
    unreserve = Operation(OperationType.UNRESERVE, resources=R("cpus(analytics,alice):1"), role="analytics")
    result = plan(framework(), ["O1"], [unreserve, *launch(task("a"))], offers=[offer("O1")])
    assert isinstance(result, Refusal) and result.kind == OPERATION_REFUSED and result.tells_framework
    assert result.why == ("the accept was refused, nothing was applied: operation 1 (UNRESERVE): an UNRESERVE names "
                          "no role: its resources say whose they are")
    assert result.refuse_seconds == 0.0 and [t.task_id for t in result.dropped] == ["a"]
    assert [o.id for o in result.offers] == ["O1"]


def test_acls_refuse_tasks_alone_and_reservations_whole():
    users = Acls.parse({"run_tasks": [{"principals": ["alice"], "users": ["alice"]}],
                        "reserve_resources": [{"principals": ["alice"], "roles": ["web"]}]})
    credentials = Credentials({"alice": Principal("alice", b"key", frozenset(["framework"]))}, users)
    result = plan(framework(), ["O1"], launch(task("mine"), task("theirs", user="root")), offers=[offer("O1")],
                  principal="alice", credentials=credentials)
    assert isinstance(result, LaunchPlan) and [t.task_id for t in result.launched] == ["mine"]
    (failed,) = result.failed
    assert failed.reason == "REASON_TASK_UNAUTHORIZED" and result.refused_permissions == ("run_tasks",)
    reserve = Operation(OperationType.RESERVE, resources=R("cpus:1"))
    refused = plan(framework(), ["O1"], [reserve], offers=[offer("O1")], principal="alice", credentials=credentials)
    assert isinstance(refused, Refusal) and refused.permission == "reserve_resources"


def test_a_custom_executor_takes_its_resources_once_per_agent():
    executor = ExecutorInfo("ex", "run-executor", R("cpus:0.5;mem:64"))
    record, host = framework(), agent()
    result = plan(record, ["O1"], launch(task("a", executor=executor), task("b", executor=executor)),
                  offers=[offer("O1", "cpus:4;mem:1024")], agents={"S1": host})
    assert isinstance(result, LaunchPlan) and result.used == R("cpus:2.5;mem:320")
    assert dict(result.starting) == {"ex": executor}
    other = ExecutorInfo("ex", "another-command", R("cpus:0.5;mem:64"))
    host.executors[("F1", "ex")] = executor
    again = plan(record, ["O1"], launch(task("c", executor=executor), task("d", executor=other)), offers=[offer("O1")],
                 agents={"S1": host})
    assert isinstance(again, LaunchPlan) and not again.starting and again.used == R("cpus:1;mem:128")
    assert [f.task.task_id for f in again.failed] == ["d"]


def test_the_planner_changes_nothing_it_is_given():
    record, host, made = framework(), agent(), [offer("O1")]
    record.tasks["old"] = TaskRecord(task("old"), "F1", "S1", new_status("old", TaskState.RUNNING))
    before = copy.deepcopy((record.info, record.tasks, host, made))
    executor = ExecutorInfo("ex", "run-executor", R("cpus:0.5;mem:64"))
    plan(record, ["O1"], [Operation(OperationType.RESERVE, resources=R("cpus:1")),
                          *launch(task("a", executor=executor))], offers=made, agents={"S1": host})
    assert (record.info, record.tasks, host, made) == before


def test_an_accepts_tasks_are_its_last_launch():
    operation = Operation(OperationType.RESERVE, resources=R("cpus(a):1"))
    accept = m.Accept("F1", ["O1"], [task("t")], operations=[operation])
    assert operations_of(accept) == [operation, Operation(OperationType.LAUNCH, tasks=[task("t")])]


@pytest.mark.parametrize("seed", range(40))
def test_what_is_left_kept_in_thousandths_is_the_vector_arithmetic(seed):
    """An ACCEPT's scalar-only tasks take what they use from thousandths kept
    in place (the vector made again only when read): the same launches,
    failures and messages as a new vector a task — tasks that no longer fit,
    tasks with ports, with a custom executor, with a bad kill grace period
    mixed in, over offers with and without ports."""
    import random

    rng = random.Random(seed)
    executor = ExecutorInfo("ex", "run-executor", R("cpus:0.5;mem:32"))
    pool = R(rng.choice(["cpus:4;mem:1024", "cpus:4;mem:1024;ports:[1000-1010]", "cpus:2.5;mem:300;disk:10"]))
    shared = R("cpus:0.25;mem:64")   # (the codec gives equal texts one vector: most tasks share it)
    tasks = []
    for i in range(rng.randint(1, 40)):
        kind = rng.random()
        if kind < 0.6:
            tasks.append(TaskInfo(f"t{i}", "S1", "true", shared))
        elif kind < 0.7:
            tasks.append(task(f"t{i}", rng.choice(["cpus:1;mem:128", "cpus:0.001;mem:1", "cpus:3;mem:2000"])))
        elif kind < 0.8:
            tasks.append(task(f"t{i}", f"cpus:0.1;mem:8;ports:[{1000 + rng.randint(0, 12)}-{1000 + rng.randint(0, 12) + 12}]"))
        elif kind < 0.9:
            tasks.append(task(f"t{i}", "cpus:0.25;mem:16", executor=executor))
        else:
            tasks.append(task(f"t{i}", "cpus:0.25;mem:64", kill_grace_period=-1.0))
    # the arithmetic as it was: a new vector a task
    left, launched, failed, used, started = pool, [], {}, [], False
    for t in tasks:
        needs = t.executor.resources if t.executor is not None and not started else None
        if needs is not None and not left.contains(t.resources + needs):
            failed[t.task_id] = (f"task resources {t.resources} and its executor's {needs} exceed what is left of "
                                 f"the offers ({left})")
        elif not left.contains(t.resources):
            failed[t.task_id] = f"task resources {t.resources} exceed what is left of the offers ({left})"
        elif t.kill_grace_period < 0:
            failed[t.task_id] = "kill_grace_period must be >= 0"
        else:
            launched.append(t.task_id)
            used.append(t.resources)
            left = left - t.resources
            if needs is not None:
                started = True
                used.append(needs)
                left = left - needs
    host = agent(resources=str(pool))
    result = plan(framework(), ["O1"], launch(*tasks), offers=[offer("O1", str(pool))], agents={"S1": host})
    assert isinstance(result, LaunchPlan)
    assert [t.task_id for t in result.launched] == launched
    assert {f.task.task_id: f.why for f in result.failed} == failed
    assert result.used == Resources.sum(used)
