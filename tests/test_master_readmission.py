"""A new leader re-admitting agents with their tasks, made cheaper (issue 30
goal 2, docs/performance.rst "Re-admission CPU an agent"): the status of a
re-admitted task is made when first read, the same as it would have been
made at once; the allocator grants what a re-registering agent's tasks hold
in one subtraction, as one grant each would; the codec keeps its
``Resources`` answers. Each is held to what it replaced."""

from __future__ import annotations

import math

import pytest

from mesoslike.allocator import HierarchicalAllocator
from mesoslike.allocator.agents import AgentBook
from mesoslike.clock import FakeClock
from mesoslike.errors import AgentCapacityError, MesoslikeError, ResourcesError, UnknownAgentError
from mesoslike.master import MasterConfig, MasterCore
from mesoslike.master.records import TaskRecord, new_status
from mesoslike.master.state import render_state, snapshot
from mesoslike.master.task_lifecycle import Phase
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo, Label, MasterInfo, TaskInfo, TaskState, decode, encode
from mesoslike.wire import compiled
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(30)

R = Resources.parse


def _reported(state=TaskState.RUNNING, labels=(), healthy=None):
    return ("t1", state, "a1", "f1", 12.5, list(labels), healthy)


# ------------------------------------------------------- the lazy status
@pytest.mark.parametrize("state, healthy, labels", [
    (TaskState.RUNNING, None, ()), (TaskState.FINISHED, True, (Label("k", "v"),)), (TaskState.STAGING, False, ())])
def test_a_reported_status_is_made_when_first_read_and_is_the_status_made_at_once(state, healthy, labels):
    info = TaskInfo("t1", "a1", "true", R("cpus:1"))
    lazy = TaskRecord(info, "f1", "a1", _reported(state, labels, healthy), Phase.LIVE, 3.0)
    eager = TaskRecord(info, "f1", "a1", new_status("t1", state, agent_id="a1", framework_id="f1", timestamp=12.5,
                                                    labels=list(labels), healthy=healthy), Phase.LIVE, 3.0)
    # read without making it: the state and whether it is terminal
    assert lazy.state == eager.state == state and lazy.terminal == eager.terminal
    assert type(lazy._status) is tuple
    assert lazy == eager and repr(lazy) == repr(eager)   # equal before it is made, and shown as made
    assert lazy.status == eager.status and type(lazy.status) is type(eager.status)
    assert lazy.status is lazy.status   # made once
    assert lazy.ended == eager.ended
    later = eager.status.replace(state=TaskState.KILLED)
    lazy.status = later
    assert lazy.status is later and lazy.state == TaskState.KILLED and lazy.terminal


def test_a_reregistered_tasks_status_is_made_when_read_with_the_labels_health_and_time_of_its_report():
    clock = FakeClock()
    core = MasterCore(clock, MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig())
    labelled = TaskInfo("t1", "a1", "true", R("cpus:1;mem:64"), labels=[Label("k", "v")])
    tasks = [m.RunningTask("f1", labelled, TaskState.RUNNING, healthy=True),
             m.RunningTask("f1", TaskInfo("t2", "a1", "true", R("cpus:1;mem:64")), TaskState.RUNNING,
                           update_state=TaskState.STAGING)]
    core.on_message(b"p", decode(encode(m.ReregisterAgent(AgentInfo("h", R("cpus:4;mem:512"), id="a1"), tasks,
                                                          [FrameworkInfo("demo", id="f1")]))))
    core._check()
    record = core.frameworks["f1"].tasks
    assert type(record["t1"]._status) is tuple   # not made yet
    assert record["t2"].state == TaskState.STAGING   # what its update stream delivers next
    status = record["t1"].status
    assert status == new_status("t1", TaskState.RUNNING, agent_id="a1", framework_id="f1", timestamp=status.timestamp,
                                labels=[Label("k", "v")], healthy=True)
    core._check()


def test_a_refused_reregistration_leaves_no_task_record_and_adopted_frameworks_keep_the_agents_order():
    """An agent whose tasks do not fit in its total leaves no task record
    behind (its records are entered once the allocator admitted it); tasks
    of a framework first known from the frame (adopted half-way) are entered
    in the agent's order — what a re-admission that makes its records in
    another pass, or later, must keep (docs/performance.rst, failover30h)."""
    clock = FakeClock()
    core = MasterCore(clock, MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig())
    core.on_message(b"p0", m.ReregisterAgent(AgentInfo("h0", R("cpus:4;mem:512"), id="a0"), [
        m.RunningTask("f1", TaskInfo("t0", "a0", "true", R("cpus:1")), TaskState.RUNNING)],
        [FrameworkInfo("demo", id="f1")]))
    too_much = [m.RunningTask("f1", TaskInfo(f"x{i}", "a1", "true", R("cpus:3")), TaskState.RUNNING) for i in range(2)]
    sends = core.on_message(b"p1", m.ReregisterAgent(AgentInfo("h1", R("cpus:4"), id="a1"), too_much))
    assert any(isinstance(s.message, m.Error) for s in sends)
    assert "a1" not in core.agents and sorted(core.frameworks["f1"].tasks) == ["t0"]
    core._check()
    mixed = [m.RunningTask("f1", TaskInfo("t1", "a2", "true", R("cpus:1")), TaskState.RUNNING),
             m.RunningTask("f2", TaskInfo("u1", "a2", "true", R("cpus:1")), TaskState.FINISHED),
             m.RunningTask("f2", TaskInfo("u2", "a2", "true", R("cpus:1")), TaskState.RUNNING),
             m.RunningTask("f1", TaskInfo("t2", "a2", "true", R("cpus:1")), TaskState.RUNNING)]
    core.on_message(b"p2", m.ReregisterAgent(AgentInfo("h2", R("cpus:4;mem:512"), id="a2"), mixed,
                                             [FrameworkInfo("other", id="f2")]))
    core._check()
    assert list(core.frameworks["f1"].tasks) == ["t0", "t1", "t2"] and list(core.frameworks["f2"].tasks) == ["u1", "u2"]
    assert core.frameworks["f2"].tasks["u1"].terminal and core.agents["a2"].tasks == {
        ("f1", "t1"), ("f2", "u1"), ("f2", "u2"), ("f1", "t2")}


# ------------------------------------------- the allocator's one subtraction
def test_a_state_snapshot_leaves_reported_statuses_to_be_made_outside_the_masters_lock():
    """``snapshot`` runs under the master's lock: after a failover it would
    make every re-admitted task's status there (1,000,000 of them, ~3 s).
    It takes them as held; its lines make them when read, outside the lock,
    and /state shows the same task either way."""
    clock = FakeClock()
    core = MasterCore(clock, MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig())
    tasks = [m.RunningTask("f1", TaskInfo(f"t{i}", "a1", "true", R("cpus:1;mem:64"), labels=[Label("k", "v")]),
                           TaskState.RUNNING, healthy=True) for i in range(3)]
    core.on_message(b"p", decode(encode(m.ReregisterAgent(AgentInfo("h", R("cpus:4;mem:512"), id="a1"), tasks,
                                                          [FrameworkInfo("demo", id="f1")]))))
    records = core.frameworks["f1"].tasks
    records["t0"].status   # one read already: made and kept by its record
    taken = snapshot(core)
    assert [type(records[f"t{i}"]._status) for i in range(3)] == [type(records["t0"].status), tuple, tuple]
    (line,) = taken.frameworks
    shown = {info.task_id: status for info, status, _, _ in line.tasks}
    assert shown == {task_id: record.status for task_id, record in records.items()}
    assert shown["t0"] is records["t0"].status
    assert render_state(taken)["frameworks"][0]["tasks"][1]["state"] == TaskState.RUNNING
    core._check()


def test_an_agent_added_with_what_frameworks_hold_is_as_if_each_were_granted_after():
    held = {"f1": R("cpus:1;mem:100;ports:[10-20]"), "f2": R("cpus:2;mem:50")}
    total = R("cpus:8;mem:1000;ports:[1-100]")
    at_once, one_by_one = AgentBook(), AgentBook()
    at_once.track_free(True)
    one_by_one.track_free(True)
    a = at_once.add("a1", total, "h", {}, held)
    b = one_by_one.add("a1", total, "h", {})
    for framework_id, resources in held.items():
        one_by_one.decrease_available(b, framework_id, resources)
    assert a.available == b.available and a.held == b.held and a.version == b.version
    assert list(a.held) == list(b.held) and at_once._free == one_by_one._free
    at_once._check()
    with pytest.raises(ResourcesError):
        at_once.add("a2", R("cpus:2"), "h", {}, {"f1": R("cpus:3")})
    assert "a2" not in at_once   # nothing changed


def test_add_agent_with_used_resources_matches_the_grants_and_refuses_what_does_not_fit():
    allocator = HierarchicalAllocator(FakeClock())
    for framework_id in ("f1", "f2", "f3"):
        allocator.add_framework(framework_id, "*")
    allocator.add_agent("a1", R("cpus:8;mem:1000"), used={"f1": R("cpus:1;mem:100"), "f2": R("cpus:2"), "f3": R("")})
    allocator.check_invariants()
    assert allocator.available("a1") == R("cpus:5;mem:900")
    assert sorted(allocator._agents.get("a1").held) == ["f1", "f2"]   # nothing held: not listed
    with pytest.raises(AgentCapacityError):
        allocator.add_agent("a2", R("cpus:1"), used={"f1": R("cpus:1"), "f2": R("cpus:1")})
    allocator.check_invariants()


# ------------------------------------------------------ the codec's hook
def test_the_decode_hook_keeps_its_answers_and_refuses_what_is_not_a_resources_string():
    first = compiled._decode_hook(Resources, "cpus:1;mem:32")
    assert first == R("cpus:1;mem:32") and compiled._decode_hook(Resources, "cpus:1;mem:32") is first
    for bad in (["cpus:1"], {"cpus": 1}, 5, b"cpus:1"):
        with pytest.raises(TypeError):
            compiled._decode_hook(Resources, bad)
    with pytest.raises(TypeError):
        compiled._decode_hook(int, "cpus:1")
    with pytest.raises(Exception):
        compiled._decode_hook(Resources, "cpus:-1")


def test_the_kept_parses_of_long_resources_strings_are_bounded_in_characters():
    # a peer's distinct long resources strings (valid: padded with spaces; or 100,000 port ranges) decoded
    # from frames: the caches keep the parses of short strings, but of long ones only ~1 M characters in all
    # (checking.KEPT_LONG_TEXT) -- 4,096 of them up to the frame limit each were gigabytes
    import msgspec

    from mesoslike.wire import checking

    compiled._decode_hook.cache_clear()
    checking.parse_resources.cache_clear()
    plain = msgspec.msgpack.decode(encode(m.RegisterAgent(AgentInfo("h", R("cpus:1")))))
    size = 100_000
    for n in range(40):
        plain["agent"]["resources"] = f"cpus:{n + 1}" + " " * size
        assert decode(msgspec.msgpack.encode(plain)).agent.resources == R(f"cpus:{n + 1}")
    for cache in (compiled._decode_hook, checking.parse_resources):
        assert cache.cache_info().currsize * size <= 2 * 2**20, cache.cache_info()   # (KEPT_LONG_TEXT: 2**20)
    first = compiled._decode_hook(Resources, "cpus:3;mem:5")   # short ones: kept as before
    assert compiled._decode_hook(Resources, "cpus:3;mem:5") is first and checking.parse_resources("cpus:3;mem:5") is first


# ------------------------------------------------ a sum of one vector again
@pytest.mark.parametrize("text", ["cpus:0.4;mem:819", "cpus:1;ports:[1-5,8-9]", "cpus(a):1;disk:10", ""])
@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_a_sum_of_the_same_vector_again_and_again_is_the_sum_made_one_by_one(text, count):
    vector = R(text)
    one_by_one = Resources()
    for _ in range(count):
        one_by_one = one_by_one + vector
    alike = Resources.sum([vector] * count)
    assert alike == one_by_one == Resources.sum(iter([vector] * count)) and str(alike) == str(one_by_one)
    mixed = [vector] * count + [R("cpus:1")]
    assert Resources.sum(mixed) == one_by_one + R("cpus:1")


def test_sums_of_one_vector_again_are_kept_shared_and_bounded():
    from mesoslike import resources

    vector = R("cpus:0.3;mem:77")
    first = Resources.sum([vector] * 3)
    assert Resources.sum([vector] * 3) is first and Resources.sum([vector] * 4) == R("cpus:1.2;mem:308")
    for n in range(resources._MULTIPLES_KEPT + 10):
        assert Resources.sum([R(f"cpus:{n + 1}")] * 2) == R(f"cpus:{2 * (n + 1)}")   # (each a fresh object)
    assert len(resources._MULTIPLES) <= resources._MULTIPLES_KEPT


def test_a_sum_of_a_vector_of_many_ranges_again_is_made_but_the_vector_not_kept():
    # the kept sums keep their vectors alive: one of many port ranges (a peer's: 60,000 in a frame, ~8 MB) is
    # summed as any, but not kept -- 4,096 such vectors outlived their tasks
    from mesoslike import resources

    many = R("cpus:1;ports:[" + ",".join(f"{2 * i}-{2 * i}" for i in range(1000)) + "]")
    twice = Resources.sum([many] * 2)
    assert twice == many + many and twice.get("cpus") == 2.0 and twice.ranges("ports") == many.ranges("ports")
    assert all(kept is not many for kept, _ in resources._MULTIPLES.values())
    few = R("cpus:1;ports:[1-5,8-9]")
    assert Resources.sum([few] * 2) is Resources.sum([few] * 2)   # a few ranges: kept as before


# ------------------------------------------- task records after the answer
# A new agent's task records are made after its AGENT_REGISTERED (AgentLifecycle.settle, the gate every
# reader of tasks passes first: docs/performance.rst, "Stop 14: failover, records after the answer").
# Held here to making them at once: the same sends at every step, the same allocator at every step
# (its holdings are summed at admission), the same /state whenever it is read and at the end.
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mesoslike.master.registry import Registry  # noqa: E402
from mesoslike.wire import TaskStatus  # noqa: E402

_AGENTS, _FRAMEWORKS, _TASKS = 3, 3, 3
#: a task as an agent reports it: its state, and the state its update stream delivers next
_REPORTS = [(TaskState.RUNNING, ""), (TaskState.FINISHED, ""), (TaskState.RUNNING, TaskState.STAGING),
            (TaskState.KILLED, TaskState.RUNNING), (TaskState.STAGING, "")]
_UPDATES = [TaskState.RUNNING, TaskState.FINISHED, TaskState.FAILED, TaskState.KILLED]


def _framework_info(index: int) -> FrameworkInfo:
    return FrameworkInfo(f"fw{index}", id=f"f{index}", failover_timeout=5.0, partition_aware=index == 1)


def _core(defer: bool) -> tuple[MasterCore, FakeClock]:
    registry = Registry()
    for index in range(2):   # f0 and f1 known to the registry; f2 learnt from the agents
        registry.add_framework(_framework_info(index))
    for index in range(_AGENTS - 1):   # the last is new to this master
        registry.admit_agent(AgentInfo(f"h{index}", R("cpus:16;mem:1024"), id=f"a{index}"))
    clock = FakeClock()
    core = MasterCore(clock, MasterInfo("m", "tcp://127.0.0.1:1"),
                      MasterConfig(ping_interval=2.0, max_agent_ping_timeouts=2, agent_reregister_timeout=30.0,
                                   heartbeat_interval=1.0),
                      registry=registry)
    core.agent_lifecycle.defer_task_records = defer
    return core, clock


_task = st.tuples(st.integers(0, _FRAMEWORKS - 1), st.integers(0, _TASKS - 1), st.integers(0, len(_REPORTS) - 1))
#: what reads the tasks of a re-registration just handled (its records still to make, if made after it)
_FOLLOWERS = ["update", "kill", "operator_kill", "reconcile", "reconcile_all", "unregister", "teardown", "closed",
              "advance", "state", "pong", "subscribe", "reregister_again", "settle_one", "idle", "quiet", "none"]
_step = st.one_of(
    st.tuples(st.just("reregister"), st.integers(0, _AGENTS - 1),
              st.lists(_task, max_size=6, unique_by=lambda t: (t[0], t[1])),
              st.sampled_from(_FOLLOWERS), st.integers(0, 5), st.sampled_from(_UPDATES)),
    st.tuples(st.just("reregister"), st.integers(0, _AGENTS - 1),
              st.lists(_task, max_size=6, unique_by=lambda t: (t[0], t[1])),
              st.sampled_from(_FOLLOWERS), st.integers(0, 5), st.sampled_from(_UPDATES)),
    st.tuples(st.just("subscribe"), st.integers(0, _FRAMEWORKS - 1)),
    st.tuples(st.just("update"), st.integers(0, _AGENTS - 1), st.integers(0, _FRAMEWORKS - 1),
              st.integers(0, _TASKS - 1), st.sampled_from(_UPDATES)),
    st.tuples(st.just("kill"), st.integers(0, _FRAMEWORKS - 1), st.integers(0, _TASKS - 1)),
    st.tuples(st.just("operator_kill"), st.integers(0, _FRAMEWORKS - 1), st.integers(0, _TASKS - 1)),
    st.tuples(st.just("reconcile"), st.integers(0, _FRAMEWORKS - 1),
              st.lists(st.tuples(st.integers(0, _TASKS - 1), st.integers(-1, _AGENTS - 1)), max_size=3)),
    st.tuples(st.just("unregister"), st.integers(0, _AGENTS - 1)),
    st.tuples(st.just("pong"), st.integers(0, _AGENTS - 1), st.booleans()),
    st.tuples(st.just("closed"), st.integers(0, _FRAMEWORKS - 1)),
    st.tuples(st.just("teardown"), st.integers(0, _FRAMEWORKS - 1)),
    st.tuples(st.just("advance"), st.sampled_from([0.5, 3.0, 8.0, 40.0])),
    st.tuples(st.just("state")),
    st.tuples(st.just("idle"), st.integers(1, 3)),
    st.tuples(st.just("quiet")),
)


def _do(core: MasterCore, clock: FakeClock, step: tuple, number: int) -> list:
    kind = step[0]
    if kind == "reregister":
        _, agent, tasks, follower, which, state = step
        sent = _do(core, clock, ("reregister_only", agent, tasks), number)
        f, t, _ = tasks[which % len(tasks)] if tasks else (which % _FRAMEWORKS, which % _TASKS, 0)
        follow = {"update": ("update", agent, f, t, state), "kill": ("kill", f, t),
                  "operator_kill": ("operator_kill", f, t), "reconcile": ("reconcile", f, [(t, agent)]),
                  "reconcile_all": ("reconcile", f, []), "unregister": ("unregister", agent),
                  "teardown": ("teardown", f), "closed": ("closed", f), "advance": ("advance", 40.0),
                  "state": ("state",), "pong": ("pong", agent, True), "subscribe": ("subscribe", f),
                  "reregister_again": ("reregister_only", agent, tasks[1:]), "settle_one": ("settle_one",),
                  "idle": ("idle", 1), "quiet": ("quiet",)}.get(follower)
        return sent + (_do(core, clock, follow, number) if follow is not None else [])
    if kind == "reregister_only":
        _, agent, tasks = step
        running = [m.RunningTask(f"f{f}", TaskInfo(f"t{t}", f"a{agent}", "true", R("cpus:1;mem:16")),
                                 _REPORTS[r][0], update_state=_REPORTS[r][1]) for f, t, r in tasks]
        frameworks = [_framework_info(f) for f in sorted({f for f, _, _ in tasks})]
        message = decode(encode(m.ReregisterAgent(AgentInfo(f"h{agent}", R("cpus:16;mem:1024"), id=f"a{agent}"),
                                                  running, frameworks)))
        return core.on_message(f"ag{agent}".encode(), message)
    if kind == "subscribe":
        return core.on_message(f"fw{step[1]}".encode(), m.Subscribe(_framework_info(step[1])))
    if kind == "update":
        _, agent, f, t, state = step
        return core.on_message(f"ag{agent}".encode(), m.StatusUpdate(f"f{f}", TaskStatus(
            f"t{t}", state, agent_id=f"a{agent}", uuid=f"u{number}", timestamp=float(number))))
    if kind == "kill":
        return core.on_message(f"fw{step[1]}".encode(), m.Kill(f"f{step[1]}", f"t{step[2]}"))
    if kind == "operator_kill":
        try:
            return core.kill_task(f"t{step[2]}", f"f{step[1]}")[1]
        except MesoslikeError as exc:
            return [str(exc)]
    if kind == "reconcile":
        items = [m.ReconcileTask(f"t{t}", f"a{a}" if a >= 0 else "") for t, a in step[2]]
        return core.on_message(f"fw{step[1]}".encode(), m.Reconcile(f"f{step[1]}", items))
    if kind == "unregister":
        return core.on_message(f"ag{step[1]}".encode(), m.UnregisterAgent(f"a{step[1]}"))
    if kind == "pong":
        usage = [m.TaskUsage(f"f{f}", f"t{t}", float(number)) for f in range(_FRAMEWORKS) for t in range(2)] \
            if step[2] else []
        return core.on_message(f"ag{step[1]}".encode(), m.Pong(f"a{step[1]}", usage))
    if kind == "closed":
        return core.on_connection_closed(f"fw{step[1]}".encode())
    if kind == "teardown":
        return core.on_message(f"fw{step[1]}".encode(), m.Teardown(f"f{step[1]}"))
    if kind == "settle_one":   # the runtime's idle turn, a part at a time
        core.settle(1)
        return []
    if kind == "idle":   # the runtime's policy in a turn that admitted no agent: a part, once they are due
        if core.clock.now() >= core.agent_lifecycle.settle_due():
            core.settle(step[1])
        return []
    if kind == "quiet":   # the re-admissions pause past the runtime's wait; a tick without re-admission
        clock.advance(core.agent_lifecycle.SETTLE_QUIET)
        return core.tick()
    if kind == "advance":
        clock.advance(step[1])
        return core.tick()
    assert kind == "state"
    return [render_state(snapshot(core))]


def _allocator_view(core: MasterCore) -> tuple:
    """What the allocator holds, and will hold once it books the agents it checked at their admission and
    has not booked yet (failover30p: booked with their records, or before a cycle that may offer
    anything) — read without booking them or making the records."""
    allocator = core.allocator
    unbooked = {checked.agent_id: checked for checked in core.agent_lifecycle._bookings}
    agents = sorted(core.agent_book.records)   # the book itself: reading it must not make the records
    allocations = []
    for f in range(_FRAMEWORKS):
        if f"f{f}" in core.framework_book.records:
            allocation = dict(allocator.allocation(f"f{f}"))
            allocation.update((a, checked.holds[f"f{f}"]) for a, checked in unbooked.items()
                              if f"f{f}" in checked.holds)
            allocations.append((f"f{f}", sorted(allocation.items())))
    return (tuple((a, unbooked[a].available if a in unbooked else allocator.available(a)) for a in agents),
            tuple(allocations))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_step, min_size=1, max_size=25))
# a framework first known from a later agent (adopted with the ended tasks an earlier agent reported):
# the earlier agent's tasks of it are not its records when they are made after the answer either
@example([("reregister", 0, [(2, 0, 3)], "none", 0, TaskState.RUNNING),
          ("reregister", 1, [(2, 1, 0)], "state", 0, TaskState.RUNNING)])
# two agents report one task: the latest report stands, in the order they were admitted
@example([("reregister", 0, [(0, 0, 0), (1, 1, 0)], "none", 0, TaskState.RUNNING),
          ("reregister", 1, [(0, 0, 2)], "none", 0, TaskState.RUNNING),
          ("reregister", 0, [(0, 0, 0)], "update", 0, TaskState.FINISHED)])
def test_task_records_made_after_the_answer_make_the_state_made_at_once(steps):
    eager, eager_clock = _core(defer=False)
    lazy, lazy_clock = _core(defer=True)
    for number, step in enumerate(steps):
        sent = _do(eager, eager_clock, step, number)
        assert repr(_do(lazy, lazy_clock, step, number)) == repr(sent), step
        assert _allocator_view(lazy) == _allocator_view(eager), step   # exact from the admission on
        assert eager.agent_lifecycle.tasks_pending == 0
        # the loop's wait (failover30j): records pending never make it "now" before they are due; the
        # core wakes as the eager one does, or when the re-admissions have paused
        due = lazy.agent_lifecycle.settle_due()
        assert (due == math.inf) == (lazy.agent_lifecycle.tasks_pending == 0), step
        # — but for the allocator's turns that offer nothing: while no framework may be offered anything the
        # lazy core books the agents with their records (failover30p), so one core's allocator may have agents
        # to go over now (the eager one's just admitted, the lazy one's just booked) and the other not
        wake, nothing_offered = lazy.next_wakeup(), not lazy.allocator.offers_wanted()
        assert wake == min(eager.next_wakeup(), due) or (
            nothing_offered and lazy.agent_lifecycle.bookings_pending
            and eager.allocator.next_wakeup() == eager_clock.now() <= wake) or (
            nothing_offered and lazy.allocator.next_wakeup() == lazy_clock.now() == wake), step
    assert render_state(snapshot(lazy)) == render_state(snapshot(eager))
    assert lazy.agent_lifecycle.tasks_pending == 0
    assert lazy.counters == eager.counters
    lazy._check()
    eager._check()


def test_a_new_agents_task_records_wait_for_a_reader_and_its_answer_does_not():
    core, _ = _core(defer=True)
    tasks = [m.RunningTask("f0", TaskInfo(f"t{t}", "a0", "true", R("cpus:1;mem:16")), TaskState.RUNNING)
             for t in range(3)]
    sent = core.on_message(b"ag0", decode(encode(m.ReregisterAgent(AgentInfo("h0", R("cpus:16;mem:1024"), id="a0"),
                                                                   tasks, [_framework_info(0)]))))
    assert [type(s.message) for s in sent] == [m.AgentRegistered]
    assert core.agent_lifecycle.tasks_pending == 1
    assert not core.framework_book.records["f0"].tasks and not core.agent_book.records["a0"].tasks
    # checked by the allocator at admission, booked with the records: no framework may be offered anything
    assert core.agent_lifecycle.bookings_pending == 1
    with pytest.raises(UnknownAgentError):
        core.allocator.available("a0")
    core.on_message(b"ag0", m.Pong("a0"))   # a PONG reads no task: they still wait
    core.tick()   # nor does a tick that may offer nothing
    assert core.agent_lifecycle.tasks_pending == 1 and core.agent_lifecycle.bookings_pending == 1
    assert sorted(core.frameworks["f0"].tasks) == ["t0", "t1", "t2"]   # a reader: made first
    assert core.agent_lifecycle.tasks_pending == 0 and core.agent_lifecycle.bookings_pending == 0
    assert core.allocator.available("a0") == R("cpus:13;mem:976")   # what they hold
    assert len(core.agent_book.records["a0"].tasks) == 3


def test_pending_task_records_do_not_wake_the_loop_until_the_re_admissions_pause():
    # failover30j: while agents keep coming the loop waits for their frames, not for the records; it
    # wakes as a core making them at once would (the allocator, the pings...) or once they are due
    core, clock = _core(defer=True)
    eager, eager_clock = _core(defer=False)
    quiet = core.agent_lifecycle.SETTLE_QUIET
    assert core.agent_lifecycle.settle_due() == math.inf
    for agent in range(2):
        clock.advance(quiet / 2)
        eager_clock.advance(quiet / 2)
        tasks = [m.RunningTask("f0", TaskInfo(f"t{agent}{t}", f"a{agent}", "true", R("cpus:1;mem:16")),
                               TaskState.RUNNING) for t in range(2)]
        for each in (core, eager):
            each.on_message(f"ag{agent}".encode(), decode(encode(m.ReregisterAgent(
                AgentInfo(f"h{agent}", R("cpus:16;mem:1024"), id=f"a{agent}"), tasks, [_framework_info(0)]))))
        # due a quiet wait after the last admission, not now
        assert core.agent_lifecycle.settle_due() == clock.now() + quiet
        assert core.next_wakeup() == min(eager.next_wakeup(), clock.now() + quiet)
        assert eager.agent_lifecycle.settle_due() == math.inf
    assert core.agent_lifecycle.tasks_pending == 2
    clock.advance(quiet)
    assert core.next_wakeup() <= clock.now()   # the pause came: the runtime makes them, a part a turn
    assert core.settle(1) == 1 and core.agent_lifecycle.tasks_pending == 1
    assert core.agent_lifecycle.settle_due() <= clock.now()
    assert core.settle(1) == 1 and core.agent_lifecycle.settle_due() == math.inf
    assert sorted(core.frameworks["f0"].tasks) == ["t00", "t01", "t10", "t11"]


def test_an_agent_admitted_is_booked_before_a_turn_that_may_offer_it_and_offered_as_if_booked_at_once():
    # failover30p: the allocator's books of a re-registered agent wait with its records only while no
    # framework may be offered anything; a framework that may is offered it at the same turn as before
    cores = {defer: _core(defer) for defer in (False, True)}
    offered = {}
    for defer, (core, _) in cores.items():
        core.on_message(b"fw0", m.Subscribe(_framework_info(0)))
        tasks = [m.RunningTask("f0", TaskInfo("t0", "a0", "true", R("cpus:1;mem:16")), TaskState.RUNNING)]
        core.on_message(b"ag0", decode(encode(m.ReregisterAgent(AgentInfo("h0", R("cpus:16;mem:1024"), id="a0"),
                                                                tasks, [_framework_info(0)]))))
        assert core.agent_lifecycle.bookings_pending == (1 if defer else 0)
        assert core.allocator.offers_wanted() and core.next_wakeup() == core.clock.now()
        offered[defer] = [(s.peer, s.message) for s in core.tick() if isinstance(s.message, m.Offers)]
        assert core.agent_lifecycle.bookings_pending == 0
        assert core.agent_lifecycle.tasks_pending == (1 if defer else 0)   # the records still wait
    assert offered[True] == offered[False] and offered[True]
