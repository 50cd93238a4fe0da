"""The history and the operator's operations in the master core, sans I/O
(a FakeClock; peers are byte strings): bounded completed tasks and
frameworks, monotonic totals, kill, teardown, drain timing, reactivate.
docs/operations.rst."""

from __future__ import annotations

import pytest

from mesoslike.clock import FakeClock
from mesoslike.master import MasterConfig, MasterCore
from mesoslike.master.operations import DRAIN_KILL_RESEND, Conflict, NotFound
from mesoslike.master.state import state_json
from mesoslike.metrics import master_metrics_text as metrics_text
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, Filters, FrameworkInfo, MasterInfo, TaskInfo, TaskState, TaskStatus
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(60)

R = Resources.parse
AG, AG2 = b"agent-peer", b"agent2-peer"


class Cluster:
    """A core with agents and frameworks speaking to it as their peers would."""

    def __init__(self, **config) -> None:
        self.clock = FakeClock()
        settings = dict(heartbeat_interval=100.0, ping_interval=100.0, offer_timeout=None)
        settings.update(config)
        self.core = MasterCore(self.clock, MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig(**settings))
        self.uuids = 0

    def send(self, peer: bytes, message: object) -> list[tuple[bytes, object]]:
        return [(s.peer, s.message) for s in self.core.on_message(peer, message)]

    def tick(self, advance: float = 0.0) -> list[tuple[bytes, object]]:
        self.clock.advance(advance)
        out = [(s.peer, s.message) for s in self.core.tick()]
        self.core._check()
        return out

    def subscribe(self, peer: bytes, name: str = "fw") -> str:
        out = self.send(peer, m.Subscribe(FrameworkInfo(name=name)))
        return next(msg.framework_id for _, msg in out if isinstance(msg, m.Subscribed))

    def register(self, peer: bytes, hostname: str, resources: str = "cpus:8;mem:8192") -> str:
        out = self.send(peer, m.RegisterAgent(AgentInfo(hostname, R(resources))))
        return next(msg.agent_id for _, msg in out if isinstance(msg, m.AgentRegistered))

    def launch(self, peer: bytes, framework_id: str, agent_id: str, *task_ids: str) -> None:
        """Launch ``task_ids`` on ``agent_id`` (from a fresh offer) and have them run."""
        out = self.tick(advance=1.0)
        offer = next(o for p, msg in out if p == peer and isinstance(msg, m.Offers) for o in msg.offers
                     if o.agent_id == agent_id)
        tasks = [TaskInfo(t, agent_id, "sleep 100", R("cpus:0.1;mem:32")) for t in task_ids]
        self.send(peer, m.Accept(framework_id, [offer.id], tasks, Filters(0.0)))
        agent_peer = self.core.agents[agent_id].peer
        for task_id in task_ids:
            self.update(agent_peer, framework_id, task_id, TaskState.RUNNING)

    def update(self, agent_peer: bytes, framework_id: str, task_id: str, state: str,
               acknowledge_from: bytes | None = None) -> None:
        self.uuids += 1
        uuid = f"u{self.uuids}"
        self.send(agent_peer, m.StatusUpdate(framework_id, TaskStatus(task_id, state, uuid=uuid)))
        if acknowledge_from is not None:
            agent_id = self.core.agent_book.on(agent_peer).id
            self.send(acknowledge_from, m.Acknowledge(framework_id, agent_id, task_id, uuid))

    def end(self, peer: bytes, framework_id: str, agent_peer: bytes, task_id: str,
            state: str = TaskState.FINISHED) -> None:
        """The task ends in ``state`` and its framework acknowledges it."""
        self.update(agent_peer, framework_id, task_id, state, acknowledge_from=peer)


def kills(out: list[tuple[bytes, object]], peer: bytes) -> list[str]:
    return sorted(msg.task_id for p, msg in out if p == peer and isinstance(msg, m.KillTask))


# ------------------------------------------------------------------ history
def test_completed_tasks_are_bounded_per_framework_and_the_totals_keep_counting():
    c = Cluster(completed_tasks_per_framework=3)
    fid, aid = c.subscribe(b"fw"), c.register(AG, "node-0")
    ids = [f"t{i}" for i in range(7)]
    c.launch(b"fw", fid, aid, *ids)
    for task_id in ids:
        c.end(b"fw", fid, AG, task_id, TaskState.FINISHED if task_id != "t6" else TaskState.FAILED)
    c.core._check_history()
    framework = state_json(c.core)["frameworks"][0]
    assert [t["id"] for t in framework["completed_tasks"]] == ["t4", "t5", "t6"]   # the most recent, oldest first
    assert [t["state"] for t in framework["completed_tasks"]] == ["TASK_FINISHED", "TASK_FINISHED", "TASK_FAILED"]
    metrics = metrics_text(c.core)
    assert 'mesoslike_tasks_completed_total{state="TASK_FINISHED"} 6' in metrics   # beyond what is kept
    assert 'mesoslike_tasks_completed_total{state="TASK_FAILED"} 1' in metrics
    assert 'mesoslike_tasks_completed_total{state="TASK_KILLED"} 0' in metrics
    assert 'mesoslike_tasks{state="TASK_FINISHED"} 0' in metrics   # the gauge: live tasks only


def test_a_removed_framework_moves_to_the_bounded_completed_frameworks_with_its_tasks():
    c = Cluster(max_completed_frameworks=2, completed_tasks_per_framework=2)
    aid = c.register(AG, "node-0")
    names = []
    for n in range(3):
        peer = f"fw{n}".encode()
        fid = c.subscribe(peer, name=f"job{n}")
        names.append(fid)
        c.launch(peer, fid, aid, "a", "b", "c")
        c.end(peer, fid, AG, "a")
        c.send(peer, m.Teardown(fid))     # b and c still run: killed, TASK_KILLED in the history
        c.tick()
    doc = state_json(c.core)
    assert doc["frameworks"] == []
    completed = doc["completed_frameworks"]
    assert [f["id"] for f in completed] == [names[2], names[1]]     # the most recent first, 2 kept
    assert completed[0]["name"] == "job2" and completed[0]["connected"] is False
    assert "torn down by the framework" in completed[0]["removal_reason"]
    assert [(t["id"], t["state"]) for t in completed[0]["completed_tasks"]] == \
        [("b", "TASK_KILLED"), ("c", "TASK_KILLED")]     # 2 kept per framework, a pushed out
    assert completed[0]["completed_tasks"][0]["message"].startswith("framework removed")
    metrics = metrics_text(c.core)
    assert 'mesoslike_tasks_completed_total{state="TASK_FINISHED"} 3' in metrics
    assert 'mesoslike_tasks_completed_total{state="TASK_KILLED"} 6' in metrics
    assert "mesoslike_frameworks_completed_total 3" in metrics
    assert "mesoslike_frameworks_completed_kept 2" in metrics


def test_no_history_kept_when_its_bounds_are_zero_but_the_totals_still_count():
    c = Cluster(max_completed_frameworks=0, completed_tasks_per_framework=0)
    fid, aid = c.subscribe(b"fw"), c.register(AG, "node-0")
    c.launch(b"fw", fid, aid, "t")
    c.end(b"fw", fid, AG, "t")
    assert state_json(c.core)["frameworks"][0]["completed_tasks"] == []
    c.send(b"fw", m.Teardown(fid))
    assert state_json(c.core)["completed_frameworks"] == []
    assert 'mesoslike_tasks_completed_total{state="TASK_FINISHED"} 1' in metrics_text(c.core)


# ---------------------------------------------------------------- operations
def test_the_operator_kills_a_task_by_id_and_errors_name_what_is_wrong():
    c = Cluster()
    aid = c.register(AG, "node-0")
    f1, f2 = c.subscribe(b"fw1"), c.subscribe(b"fw2")
    c.launch(b"fw1", f1, aid, "web", "same")
    c.launch(b"fw2", f2, aid, "same")
    reply, sends = c.core.kill_task("web")
    assert reply == {"framework_id": f1, "task_id": "web", "agent_id": aid}
    assert [(s.peer, s.message) for s in sends] == [(AG, m.KillTask(f1, "web"))]
    with pytest.raises(Conflict, match="several frameworks"):
        c.core.kill_task("same")
    _, sends = c.core.kill_task("same", framework_id=f2)
    assert [s.message for s in sends] == [m.KillTask(f2, "same")]
    with pytest.raises(NotFound, match="no task 'nope'"):
        c.core.kill_task("nope")
    with pytest.raises(NotFound, match="no framework"):
        c.core.kill_task("web", framework_id="m-F9999")
    c.end(b"fw1", f1, AG, "web", TaskState.KILLED)
    with pytest.raises(Conflict, match="ended already"):
        c.core.kill_task("web")


def test_the_operator_tears_a_framework_down():
    c = Cluster()
    aid = c.register(AG, "node-0")
    fid = c.subscribe(b"fw", name="svc")
    c.launch(b"fw", fid, aid, "a", "b")
    reply, sends = c.core.teardown_framework(fid)
    assert reply == {"framework_id": fid, "name": "svc", "tasks_killed": 2}
    messages = [(s.peer, s.message) for s in sends]
    assert (AG, m.ShutdownFramework(fid)) in messages
    assert any(p == b"fw" and isinstance(msg, m.Error) and msg.fatal and "operator" in msg.message
               for p, msg in messages)
    assert fid in c.core.registry.removed_frameworks and fid not in c.core.frameworks
    assert state_json(c.core)["completed_frameworks"][0]["removal_reason"] == "torn down by the operator"
    with pytest.raises(NotFound, match="removed already"):
        c.core.teardown_framework(fid)


def test_drain_stops_offers_kills_after_the_grace_and_ends_drained():
    c = Cluster()
    a1, a2 = c.register(AG, "node-0"), c.register(AG2, "node-1")
    fid = c.subscribe(b"fw")
    c.launch(b"fw", fid, a1, "t1", "t2")
    outstanding = [o for o in c.core.allocator.outstanding_offers() if o.agent_id == a1]
    reply, sends = c.core.drain_agent("node-0", grace=30)       # by hostname
    assert reply["agent_id"] == a1 and reply["drain_info"]["state"] == "DRAINING"
    rescinded = {msg.offer_id for msg in (s.message for s in sends) if isinstance(msg, m.RescindOffer)}
    assert rescinded == {o.id for o in outstanding}
    c.core._check_history()
    # no offers of node-0 while it drains, node-1 still offered
    out = c.tick(advance=1.0) + c.tick(advance=1.0)
    offered = {o.agent_id for _, msg in out if isinstance(msg, m.Offers) for o in msg.offers}
    assert a1 not in offered
    assert c.core.next_wakeup() <= c.clock.now() + 28.0 + 1e-9    # the kill time is a wake-up
    assert kills(c.tick(advance=27.0), AG) == []                 # 29 s: the grace has not passed
    c.end(b"fw", fid, AG, "t1", TaskState.FINISHED)               # one ends on its own meanwhile
    assert kills(c.tick(advance=1.0), AG) == ["t2"]               # 30 s: the rest is killed
    assert kills(c.tick(advance=1.0), AG) == []                   # once ...
    assert kills(c.tick(advance=DRAIN_KILL_RESEND), AG) == ["t2"]  # ... and again while it runs
    agent = next(a for a in state_json(c.core)["agents"] if a["id"] == a1)
    assert agent["deactivated"] is True and agent["drain_info"]["state"] == "DRAINING"
    c.update(AG, fid, "t2", TaskState.KILLED)                     # killed, not acknowledged yet: DRAINING
    c.tick()
    assert c.core.drains[a1].state == "DRAINING"
    c.send(b"fw", m.Acknowledge(fid, a1, "t2", f"u{c.uuids}"))
    c.tick()
    assert c.core.drains[a1].state == "DRAINED"
    assert 'mesoslike_agents_drain{state="DRAINED"} 1' in metrics_text(c.core)
    assert {t["id"]: t["state"] for t in state_json(c.core)["frameworks"][0]["completed_tasks"]} == \
        {"t1": "TASK_FINISHED", "t2": "TASK_KILLED"}
    # reactivated: offered again
    reply, _ = c.core.reactivate_agent(a1)
    assert reply["was"] == "DRAINED" and reply["drain_info"] is None
    out = c.tick(advance=1.0)
    assert a1 in {o.agent_id for _, msg in out if isinstance(msg, m.Offers) for o in msg.offers}
    agent = next(a for a in state_json(c.core)["agents"] if a["id"] == a1)
    assert agent["deactivated"] is False and agent["drain_info"] is None


def test_a_new_leader_goes_on_with_a_drain_the_registry_kept():
    """Mesos keeps drains in its registry: a new leader knows a drain in
    progress, offers nothing of the agent when it is back, and kills its
    tasks when the grace given to the old leader has passed — on its own
    clock; a reactivation is forgotten by the registry too."""
    from mesoslike.master.registry import Registry

    c = Cluster()
    a1 = c.register(AG, "node-0")
    fid = c.subscribe(b"fw")
    c.launch(b"fw", fid, a1, "t1")
    wall = [5000.0]
    c.core.context.wall_clock = lambda: wall[0]
    c.core.drain_agent(a1, grace=30)
    c.core._check_history()
    assert c.core.registry.drains == {a1: {"state": "DRAINING", "grace": 30.0, "started_at": 5000.0,
                                           "kill_at": 5030.0}}
    stored = c.core.registry.to_document()

    wall[0] += 10.0   # the failover took 10 s: 20 s of the grace are left
    clock = FakeClock(123.0)   # the new leader's own clock
    new = MasterCore(clock, MasterInfo("m2", "tcp://127.0.0.1:2"),
                     MasterConfig(heartbeat_interval=100.0, ping_interval=100.0, offer_timeout=None),
                     registry=Registry.from_document(stored), wall_clock=lambda: wall[0])
    assert new.drains[a1].state == "DRAINING" and new.drains[a1].kill_at == pytest.approx(143.0)
    info = c.core.agents[a1].info
    task = c.core.frameworks[fid].tasks["t1"].info
    new.on_message(b"fw2", m.Subscribe(c.core.frameworks[fid].info))
    new.on_message(AG, m.ReregisterAgent(info, [m.RunningTask(fid, task, TaskState.RUNNING)]))
    agent = next(a for a in state_json(new)["agents"] if a["id"] == a1)
    assert agent["deactivated"] is True and agent["drain_info"]["state"] == "DRAINING"

    def tick(advance: float) -> list:
        clock.advance(advance)
        out = [(s.peer, s.message) for s in new.tick()]
        new._check_history()
        return out
    first = tick(1.0)
    assert a1 not in {o.agent_id for _, msg in first if isinstance(msg, m.Offers) for o in msg.offers}
    assert kills(tick(18.0), AG) == []        # 19 s after the failover: 1 s of grace left
    assert kills(tick(1.0), AG) == ["t1"]     # the grace given to the old leader has passed
    new.reactivate_agent(a1)
    assert new.registry.drains == {} and "drains" in new.registry.changes().sections


def test_drain_with_no_grace_kills_at_once_and_an_idle_agent_is_drained_at_once():
    c = Cluster()
    a1, a2 = c.register(AG, "node-0"), c.register(AG2, "node-1")
    fid = c.subscribe(b"fw")
    c.launch(b"fw", fid, a1, "t")
    _, sends = c.core.drain_agent(a1)
    assert [s.message for s in sends if isinstance(s.message, m.KillTask)] == [m.KillTask(fid, "t")]
    reply, _ = c.core.drain_agent("node-1", grace=60)
    assert reply["drain_info"]["state"] == "DRAINED"


def test_draining_again_may_shorten_the_grace_and_reactivating_early_kills_nothing():
    c = Cluster()
    a1 = c.register(AG, "node-0")
    fid = c.subscribe(b"fw")
    c.launch(b"fw", fid, a1, "t")
    c.core.drain_agent(a1, grace=100)
    c.core.drain_agent(a1, grace=500)                 # not lengthened
    assert kills(c.tick(advance=60.0), AG) == []
    c.core.drain_agent(a1, grace=10)                  # shortened: 10 s from now
    assert kills(c.tick(advance=10.0), AG) == ["t"]
    c2 = Cluster()
    b1 = c2.register(AG, "node-0")
    f2 = c2.subscribe(b"fw")
    c2.launch(b"fw", f2, b1, "t")
    c2.core.drain_agent(b1, grace=5)
    c2.core.reactivate_agent("node-0")
    assert kills(c2.tick(advance=10.0), AG) == []
    with pytest.raises(Conflict, match="not draining"):
        c2.core.reactivate_agent(b1)


def test_operations_on_agents_refuse_unknown_ambiguous_and_bad_input():
    c = Cluster()
    a1, a2 = c.register(AG, "same"), c.register(AG2, "same")
    with pytest.raises(Conflict, match="several agents"):
        c.core.drain_agent("same")
    with pytest.raises(NotFound, match="no registered agent"):
        c.core.drain_agent("nowhere")
    for grace in (-1, "10", True, float("nan"), 1e9):
        with pytest.raises(Exception, match="grace"):
            c.core.drain_agent(a1, grace=grace)
    assert c.core.drains == {}
    c.core.drain_agent(a2)
    assert set(c.core.drains) == {a2}


def test_a_drained_agent_out_of_reach_stays_drained_and_is_forgotten_once_gone():
    """As Mesos: an unreachable agent keeps its drain (it is still drained
    when it comes back), a gone one does not."""
    c = Cluster(ping_interval=1.0, max_agent_ping_timeouts=2)
    a1 = c.register(AG, "node-0")
    info = c.core.agents[a1].info
    c.core.drain_agent(a1)
    for _ in range(4):
        c.tick(advance=1.0)       # pings unanswered: unreachable
    assert a1 not in c.core.agents and c.core.drains[a1].state == "DRAINED"
    c.send(AG, m.ReregisterAgent(info, []))
    c.tick(advance=1.0)
    agent = next(a for a in state_json(c.core)["agents"] if a["id"] == a1)
    assert agent["deactivated"] is True and agent["drain_info"]["state"] == "DRAINED"
    for _ in range(4):
        c.tick(advance=1.0)       # unreachable again, then gone for good
    c.core.mark_agent_gone(a1)
    c.tick()
    assert c.core.drains == {} and c.core.registry.drains == {}


def test_a_drained_agent_back_only_after_the_reregistration_timeout_is_still_drained():
    """A new leader marks an agent that is late after the failover
    unreachable; its drain, from the registry, is kept until it is back."""
    from mesoslike.master.registry import Registry

    c = Cluster()
    a1 = c.register(AG, "node-0")
    info = c.core.agents[a1].info
    c.core.drain_agent(a1)
    stored = c.core.registry.to_document()
    clock = FakeClock(50.0)
    new = MasterCore(clock, MasterInfo("m2", "tcp://127.0.0.1:2"),
                     MasterConfig(heartbeat_interval=100.0, ping_interval=100.0, offer_timeout=None,
                                  agent_reregister_timeout=10.0),
                     registry=Registry.from_document(stored))
    clock.advance(11.0)
    new.tick()                    # not back within 10 s: unreachable
    new._check()
    assert a1 not in new.agents and new.drains[a1].state == "DRAINED"
    new.on_message(AG, m.ReregisterAgent(info, []))
    new._check()
    agent = next(a for a in state_json(new)["agents"] if a["id"] == a1)
    assert agent["deactivated"] is True and agent["drain_info"]["state"] == "DRAINED"
    assert a1 in new.registry.drains
