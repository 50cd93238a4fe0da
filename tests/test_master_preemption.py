"""Fair-share preemption in the master core, sans I/O: role a fills the
cluster, role b arrives; the policy (tests/test_preemption_policy.py) runs
inside MasterCore.tick and its actions become PREEMPTION_WARNING, KILL_TASK
and preferred offers. Peers are byte strings, time is a FakeClock."""

import pytest

from mesoslike.clock import FakeClock
from mesoslike.master import MasterConfig, MasterCore
from mesoslike.master.roles import PreemptionConfig, RoleConfig, RolesConfig
from mesoslike.master.state import state_json
from mesoslike.metrics import master_metrics_text as metrics_text
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, Filters, FrameworkInfo, MasterInfo, TaskInfo, TaskState, TaskStatus
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
FA, FB = b"fw-a", b"fw-b"
AGENTS = (b"agent-0", b"agent-1")
SLOT = "cpus:1;mem:1024"


def settings(enabled=True, timeout=3.0, threshold=1.0, wait=5.0):
    roles = {name: RoleConfig(name, fair_share_preemption_timeout=timeout, fair_share_preemption_threshold=threshold)
             for name in ("a", "b")}
    return RolesConfig(PreemptionConfig(enabled=enabled, wait_before_kill=wait), roles)


class Cluster:
    """A master core with two 4-cpu agents that answer KILL_TASK with
    TASK_KILLED, and frameworks in roles a and b."""

    def __init__(self, preemption=None):
        self.clock = FakeClock()
        config = MasterConfig(heartbeat_interval=5.0, ping_interval=5.0, max_agent_ping_timeouts=100)
        self.core = MasterCore(self.clock, MasterInfo("m", "tcp://127.0.0.1:1"), config)
        self.core.set_preemption(preemption)
        self.received = []  # (peer, message) the frameworks got, in order
        self.kills = []     # KILL_TASK the agents got
        self.agents = {}    # agent peer -> agent id
        self.fids = {}
        self.silent = set()  # framework peers that stopped talking
        self.uuid = 0
        for peer in AGENTS:
            out = self.core.on_message(peer, m.RegisterAgent(AgentInfo(peer.decode(), R("cpus:4;mem:4096"))))
            (registered,) = [s.message for s in out if isinstance(s.message, m.AgentRegistered)]
            self.agents[peer] = registered.agent_id

    def deliver(self, sends):
        """Hand sends to their peers: agents answer kills at once."""
        for send in sends:
            if send.peer in self.agents:
                if isinstance(send.message, m.KillTask):
                    self.kills.append(send.message)
                    self.status(send.peer, send.message.framework_id, send.message.task_id, TaskState.KILLED)
            else:
                self.received.append((send.peer, send.message))

    def status(self, agent_peer, framework_id, task_id, state):
        self.uuid += 1
        self.deliver(self.core.on_message(agent_peer, m.StatusUpdate(
            framework_id, TaskStatus(task_id, state, uuid=f"u{self.uuid}"))))

    def send(self, peer, message):
        self.deliver(self.core.on_message(peer, message))

    def subscribe(self, peer, role, **info):
        self.send(peer, m.Subscribe(FrameworkInfo(name=role, role=role, **info)))
        (subscribed,) = [msg for p, msg in self.received if p == peer and isinstance(msg, m.Subscribed)]
        self.fids[peer] = subscribed.framework_id
        return subscribed.framework_id

    def tick(self, advance=0.0):
        self.clock.advance(advance)
        for peer in self.fids:  # the frameworks stay alive
            if self.fids[peer] in self.core.frameworks and peer not in self.silent:
                self.send(peer, m.Heartbeat())
        self.deliver(self.core.tick())

    def take(self, peer, kind):
        """The messages of ``kind`` the framework at ``peer`` got since the last take."""
        mine = [msg for p, msg in self.received if p == peer and isinstance(msg, kind)]
        self.received = [(p, msg) for p, msg in self.received if not (p == peer and isinstance(msg, kind))]
        return mine

    def launch_slots(self, peer, name, slot=SLOT, limit=None):
        """Accept every offer the framework holds with one task per slot
        that fits; the rest is declined (with no filter)."""
        launched = []
        for offers in self.take(peer, m.Offers):
            for offer in offers.offers:
                tasks, left = [], offer.resources
                while left.contains(R(slot)) and (limit is None or len(launched) + len(tasks) < limit):
                    task_id = f"{name}-{self.core.counters['tasks_launched'] + len(tasks)}"
                    tasks.append(TaskInfo(task_id, offer.agent_id, "sleep 1000", R(slot)))
                    left = left - R(slot)
                self.send(peer, m.Accept(self.fids[peer], [offer.id], tasks, Filters(0)))
                peer_of = {aid: p for p, aid in self.agents.items()}
                for task in tasks:
                    self.status(peer_of[offer.agent_id], self.fids[peer], task.task_id, TaskState.RUNNING)
                launched += [t.task_id for t in tasks]
        return launched

    def running(self, peer):
        record = self.core.frameworks[self.fids[peer]]
        return sorted(t.id for t in record.tasks.values() if not t.terminal)

    def agent_of(self, peer, task_id):
        return self.core.frameworks[self.fids[peer]].tasks[task_id].agent_id


def a_fills_the_cluster(preemption):
    c = Cluster(preemption)
    c.subscribe(FA, "a")
    c.tick()
    assert len(c.launch_slots(FA, "a")) == 8
    return c


def b_arrives_and_a_is_warned(preemption):
    """a fills the cluster, b arrives; after b's timeout a is warned."""
    c = a_fills_the_cluster(preemption)
    c.subscribe(FB, "b")
    for _ in range(6):
        c.tick(0.5)
    assert c.take(FA, m.PreemptionWarning)
    return c


def test_b_starves_then_a_is_warned_then_killed_and_b_gets_the_freed_agent_first():
    c = a_fills_the_cluster(settings(timeout=3.0, wait=5.0))
    c.tick(1.0)
    c.subscribe(FB, "b")  # t = 1: b wants the cluster too
    c.tick(0.5)  # the next update (every 0.5 s) sees b below its target
    b_since = c.core.preemption.state()["roles"]["b"]["fair_share_starved_since"]
    assert b_since == 1.5
    while c.clock.now() < b_since + 3.0 - 0.5:  # nothing before b's fair-share timeout
        c.tick(0.25)
        assert not c.take(FA, m.PreemptionWarning) and not c.kills
    while not c.received or not any(isinstance(msg, m.PreemptionWarning) for _, msg in c.received):
        c.tick(0.25)
    warned_at = c.clock.now()
    assert warned_at <= b_since + 3.0 + c.core.preemption.update_interval
    (warning,) = c.take(FA, m.PreemptionWarning)
    assert warning.role == "b" and warning.seconds == pytest.approx(5.0)
    assert len(warning.task_ids) == 4  # worth half the cluster: b's fair share
    assert len({c.agent_of(FA, t) for t in warning.task_ids}) == 1  # all on one agent
    assert not c.take(FB, m.PreemptionWarning)
    victim_agent = c.agent_of(FA, warning.task_ids[0])
    doc = state_json(c.core)["preemption"]
    assert doc["roles"]["b"]["starved"] == "cpus:4;mem:4096"
    assert sorted(doc["roles"]["b"]["preempting"]) == sorted(warning.task_ids)

    # a gives one back of its own accord: b is offered that agent at once
    voluntary = warning.task_ids[0]
    c.send(FA, m.Kill(c.fids[FA], voluntary))
    assert [k.task_id for k in c.kills] == [voluntary]
    update = [u for u in c.take(FA, m.Update) if u.status.task_id == voluntary][-1]
    assert update.status.state == TaskState.KILLED and update.status.reason != "REASON_TASK_PREEMPTED"
    assert c.core.allocator.preferences()[victim_agent][0] == "b"
    c.tick()
    (offers,) = c.take(FB, m.Offers)
    assert [(o.agent_id, o.resources) for o in offers.offers] == [(victim_agent, R(SLOT))]
    c.received.append((FB, offers))
    assert len(c.launch_slots(FB, "b")) == 1

    # at the deadline the three still running are killed, not the released one
    while c.clock.now() < warned_at + 5.0 - 0.25:
        c.tick(0.25)
        assert len(c.kills) == 1
    c.tick(0.5)
    assert sorted(k.task_id for k in c.kills[1:]) == sorted(warning.task_ids[1:])
    updates = {u.status.task_id: u.status for u in c.take(FA, m.Update)}
    for task_id in warning.task_ids[1:]:
        assert updates[task_id].state == TaskState.KILLED
        assert updates[task_id].reason == "REASON_TASK_PREEMPTED"
        assert updates[task_id].message.startswith("preempted for role 'b'")

    # the freed agent goes to b first; then both roles hold their fair halves
    c.tick(0.5)
    assert c.core.allocator.preferences()[victim_agent][0] == "b"
    for _ in range(40):  # 20 s more: nothing else is taken from a
        c.launch_slots(FB, "b")
        c.launch_slots(FA, "a")
        c.tick(0.5)
    assert len(c.running(FA)) == 4 and len(c.running(FB)) == 4
    assert {c.agent_of(FB, t) for t in c.running(FB)} == {victim_agent}
    assert len(c.kills) == 4
    doc = state_json(c.core)["preemption"]
    assert doc["counters"] == {"warned": 4, "killed": 3, "released": 1, "cancelled": 0}
    assert doc["roles"]["a"]["fair_share"] == doc["roles"]["b"]["fair_share"] == "cpus:4;mem:4096"
    assert doc["roles"]["b"]["starved"] == "" and doc["pending"] == []
    metrics = metrics_text(c.core)
    for kind, count in (("warned", 4), ("killed", 3), ("released", 1)):
        assert f'mesoslike_preemptions_total{{kind="{kind}"}} {count}' in metrics
    c.core.allocator.check_invariants()


def test_no_preemption_when_the_roles_file_turns_it_off():
    for preemption in (None, settings(enabled=False)):
        c = a_fills_the_cluster(preemption)
        c.subscribe(FB, "b")
        for _ in range(80):
            c.tick(0.5)
        assert not c.take(FA, m.PreemptionWarning) and not c.kills
        assert len(c.running(FA)) == 8
        assert c.core.preemption is None and state_json(c.core)["preemption"] is None
        assert 'mesoslike_preemptions_total{kind="warned"} 0' in metrics_text(c.core)
        assert c.core.next_wakeup() >= c.clock.now()


def test_turning_it_off_drops_pending_victims_and_on_again_starts_afresh():
    c = b_arrives_and_a_is_warned(settings(timeout=1.0, wait=5.0))
    c.core.set_preemption(settings(enabled=False))  # a reloaded roles file
    for _ in range(20):
        c.tick(0.5)
    assert not c.kills and len(c.running(FA)) == 8
    c.core.set_preemption(settings(timeout=1.0, wait=1.0))
    for _ in range(20):
        c.tick(0.5)
    assert len(c.kills) == 4 and len(c.running(FA)) == 4


def test_never_below_a_fair_share_even_while_b_stays_starved():
    # a holds 5 cpus in a 3-cpu and a 2-cpu task, b holds 3 and wants more:
    # b's fair share is 4, but taking either of a's tasks would leave a below 4
    c = Cluster(settings(timeout=1.0, wait=1.0))
    c.subscribe(FA, "a")
    c.tick()
    for offers in c.take(FA, m.Offers):
        for offer in offers.offers:
            size = "cpus:3;mem:3072" if offer.agent_id == c.agents[AGENTS[0]] else "cpus:2;mem:2048"
            task = TaskInfo(f"a-{offer.agent_id}", offer.agent_id, "sleep 1000", R(size))
            c.send(FA, m.Accept(c.fids[FA], [offer.id], [task], Filters(3600)))
    c.subscribe(FB, "b")
    c.tick(1.0)
    assert len(c.launch_slots(FB, "b")) == 3
    for _ in range(40):
        c.tick(0.5)
        c.launch_slots(FB, "b")
    assert not c.take(FA, m.PreemptionWarning) and not c.kills
    b = state_json(c.core)["preemption"]["roles"]["b"]
    assert b["starved"] == "cpus:1;mem:1024" and b["preempting"] == []


def test_suppressed_or_disconnected_frameworks_want_nothing_more():
    c = a_fills_the_cluster(settings(timeout=1.0, wait=1.0))
    c.subscribe(FB, "b")
    c.send(FB, m.Suppress(c.fids[FB]))
    for _ in range(20):
        c.tick(0.5)
    assert not c.take(FA, m.PreemptionWarning)
    b = state_json(c.core)["preemption"]["roles"]["b"]
    assert b["demand"] == "" and b["fair_share_starved_since"] is None
    c.send(FB, m.Revive(c.fids[FB]))  # wants more again: starved after its timeout
    for _ in range(6):
        c.tick(0.5)
    assert c.take(FA, m.PreemptionWarning)


def test_a_disconnected_framework_wants_nothing_more():
    c = a_fills_the_cluster(settings(timeout=30.0, wait=1.0))
    c.subscribe(FB, "b", failover_timeout=3600.0)
    c.silent.add(FB)  # disconnected after 5 heartbeats (25 s), before b's 30 s timeout
    for _ in range(120):
        c.tick(0.5)
    assert not c.core.frameworks[c.fids[FB]].connected
    assert not c.take(FA, m.PreemptionWarning) and not c.kills
    b = state_json(c.core)["preemption"]["roles"]["b"]
    assert b["demand"] == "" and b["fair_share_starved_since"] is None


def test_kills_are_dropped_when_the_starved_role_leaves_before_the_deadline():
    c = b_arrives_and_a_is_warned(settings(timeout=1.0, wait=5.0))
    c.send(FB, m.Teardown(c.fids[FB]))
    for _ in range(20):
        c.tick(0.5)
    assert not c.kills and len(c.running(FA)) == 8
    assert state_json(c.core)["preemption"]["counters"]["cancelled"] == 4
