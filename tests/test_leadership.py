"""The leadership machine (mesoslike.master.leadership), without ZooKeeper
and without sleeps: every row of its table, the races the HA runtime tests
found (as event sequences), a simulation of the runtime driven by random
ZooKeeper events, and the table in docs/ha.rst."""

from __future__ import annotations

import pathlib

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mesoslike.master.core import Send
from mesoslike.master.leadership import (
    PEERS, TRANSITIONS, BuildCore, Commit, Confirmed, Confirming, ConfirmLeadership, CoreBuilt, Demoted, Drop,
    Elected, ElectionWon, Fenced, Follower, InDoubt, Kept, Leadership, Leading, LoadRegistry, Loading, Peers, Phase,
    PutAside, Refuted, RegistryLoaded, RegistryUnreadable, Resume, RetryLoading, Serve, Stored, Tick, TurnEnded,
    TurnStarted, Unsent, ZnodeChanged, render_phases, render_transitions)

pytestmark = pytest.mark.timeout(120)

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOLD, STALL, RETRY = 4.0, 0.25, 0.5
NOW = 100.0


@attrs.define(eq=False)
class FakeCore:
    """A core as the machine sees it (compared by identity)."""

    name: str
    registry: object = "R"
    registry_changes: int = 0


def machine(state=None) -> Leadership:
    return Leadership(hold_for=HOLD, stall_after=STALL, retry_every=RETRY, state=state)


CORE = FakeCore("core")
NEW = FakeCore("new", registry="R2", registry_changes=3)
R1, R2, R3 = (Send(b"peer", f"reply-{i}") for i in (1, 2, 3))
KEPT = Kept(CORE, "/z1", persisted=0, until=NOW + HOLD, undelivered=(R1,))
UNSTORED = Kept(FakeCore("busy", registry_changes=2), "/z1", persisted=1, until=NOW + HOLD)
LEADING = Leading(CORE, "/z1", 0)
CONFIRMING = Confirming(CORE, "/z1", 0, (R2,))

#: (start state, event, now, next state, actions); Drop is matched by its type (its reason is prose)
CASES = [
    (Follower(), ElectionWon(), NOW, Elected(None, NOW), []),
    (Elected(None, NOW), Tick(), NOW, Loading(None), [LoadRegistry()]),
    (Elected(KEPT, NOW), Demoted("suspended"), NOW, InDoubt(KEPT), []),
    (Elected(None, NOW), Demoted("suspended"), NOW, Follower(), []),
    (Elected(KEPT, NOW), ZnodeChanged("/z2"), NOW, Elected(None, NOW), [Drop]),
    (Elected(KEPT, NOW), Fenced("gone"), NOW, Elected(None, NOW), [Drop]),
    (Elected(KEPT, NOW), Refuted("gone"), NOW, Elected(None, NOW), [Drop]),
    (Elected(KEPT, NOW), TurnEnded(0.01, (R2,)), NOW, Elected(KEPT.saying((R2,)), NOW), []),
    (Elected(KEPT, NOW), Unsent((R2,)), NOW, Elected(KEPT.saying((R2,)), NOW), []),
    (Elected(KEPT, NOW), Stored(5), NOW, Elected(attrs.evolve(KEPT, persisted=5), NOW), []),
    (Loading(KEPT), RegistryLoaded("R", "/z1"), NOW, Leading(CORE, "/z1", 0), [Resume(CORE, (R1,))]),
    (Loading(KEPT), RegistryLoaded("R", "/z2"), NOW, Loading(None), [Drop, BuildCore("R", "/z2")]),
    (Loading(None), RegistryLoaded("R", "/z1"), NOW, Loading(None), [BuildCore("R", "/z1")]),
    (Loading(KEPT), RegistryUnreadable("bad"), NOW, Elected(KEPT, NOW + RETRY), [RetryLoading(NOW + RETRY, "bad")]),
    (Loading(None), CoreBuilt(NEW, "/z1"), NOW, Leading(NEW, "/z1", 3), [Serve(NEW)]),
    (Loading(KEPT), Demoted("lost"), NOW, InDoubt(KEPT), []),
    (Loading(None), Demoted("lost"), NOW, Follower(), []),
    (Loading(KEPT), ZnodeChanged(None), NOW, Loading(None), [Drop]),
    (LEADING, Demoted("suspended"), NOW, InDoubt(Kept(CORE, "/z1", 0, NOW + HOLD)), [PutAside("suspended")]),
    (LEADING, ZnodeChanged(None), NOW, Follower(), [Drop]),
    (LEADING, TurnStarted(0.3), NOW, Confirming(CORE, "/z1", 0, ()), [ConfirmLeadership(0.3)]),
    (LEADING, TurnEnded(0.3, (R2,)), NOW, Confirming(CORE, "/z1", 0, (R2,)), [ConfirmLeadership(0.3)]),
    (LEADING, TurnEnded(0.01, (R2,)), NOW, LEADING, [Commit((R2,))]),
    (LEADING, Unsent((R2,)), NOW, LEADING, [Commit((R2,))]),
    (LEADING, Stored(4), NOW, Leading(CORE, "/z1", 4), []),
    (LEADING, Fenced("registry changed under us"), NOW, Follower(), [Drop]),
    (CONFIRMING, Confirmed(), NOW, Leading(CORE, "/z1", 0), [Commit((R2,))]),
    (CONFIRMING, Refuted("SessionExpiredError"), NOW, Follower(), [Drop]),
    (CONFIRMING, Demoted("lost"), NOW, InDoubt(Kept(CORE, "/z1", 0, NOW + HOLD, (R2,))), [PutAside("lost")]),
    (CONFIRMING, ZnodeChanged("/z9"), NOW, Follower(), [Drop]),
    (InDoubt(KEPT), ElectionWon(), NOW, Elected(KEPT, NOW), []),
    (InDoubt(KEPT), Tick(), NOW + HOLD, Follower(), [Drop]),
    (InDoubt(UNSTORED), Tick(), NOW, Follower(), [Drop]),
    (InDoubt(KEPT), ZnodeChanged("/z2"), NOW, Follower(), [Drop]),
    (InDoubt(KEPT), TurnEnded(0.01, (R2, R3)), NOW, InDoubt(KEPT.saying((R2, R3))), []),
    (InDoubt(KEPT), Unsent((R3,)), NOW, InDoubt(KEPT.saying((R3,))), []),
    (InDoubt(KEPT), Stored(1), NOW, InDoubt(attrs.evolve(KEPT, persisted=1)), []),
    (InDoubt(KEPT), Fenced("gone"), NOW, Follower(), [Drop]),
    (InDoubt(KEPT), Refuted("gone"), NOW, Follower(), [Drop]),
]

#: events that mean nothing in a state: nothing changes, nothing is done
IGNORED = [
    (Elected(None, NOW + 0.1), Tick(), NOW),                 # not due yet
    (LEADING, TurnStarted(0.1), NOW),                        # no stall
    (LEADING, ZnodeChanged("/z1"), NOW),                     # its own znode
    (LEADING, ElectionWon(), NOW),
    (InDoubt(KEPT), Tick(), NOW + HOLD - 0.01),              # still in time
    (InDoubt(KEPT), ZnodeChanged("/z1"), NOW),
    (InDoubt(KEPT), Confirmed(), NOW),
    (Follower(), Demoted("stopped"), NOW),
    (Follower(), TurnEnded(0.0, (R1,)), NOW),                # the core that said it is gone
    (Follower(), RegistryLoaded("R", "/z1"), NOW),           # demoted while it read
    (Follower(), CoreBuilt(NEW, "/z1"), NOW),
    (Elected(None, NOW), TurnEnded(0.0, (R1,)), NOW),
]


def kinds(actions):
    return [Drop if isinstance(action, Drop) else action for action in actions]


@pytest.mark.parametrize("start, event, now, after, actions", CASES,
                         ids=[f"{s.phase.name}-{type(e).__name__}-{i}" for i, (s, e, *_) in enumerate(CASES)])
def test_each_transition(start, event, now, after, actions):
    leadership = machine(start)
    row = leadership.transition(event, now)
    assert row is not None and row.source is start.phase and row.target is after.phase
    assert kinds(leadership.process(event, now)) == actions
    assert leadership.state == after
    leadership._check()


def test_the_cases_cover_every_row_of_the_table():
    covered = {machine(start).transition(event, now) for start, event, now, *_ in CASES}
    assert [row for row in TRANSITIONS if row not in covered] == []


@pytest.mark.parametrize("start, event, now", IGNORED)
def test_events_without_a_row_change_nothing(start, event, now):
    leadership = machine(start)
    assert leadership.transition(event, now) is None
    assert leadership.process(event, now) == [] and leadership.state is start


def test_each_phase_says_what_peers_get():
    assert {phase: PEERS[phase] for phase in Phase} == {
        Phase.FOLLOWER: Peers.REFUSE, Phase.ELECTED: Peers.WAIT, Phase.LOADING: Peers.WAIT,
        Phase.LEADING: Peers.HANDLE, Phase.CONFIRMING: Peers.WAIT, Phase.IN_DOUBT: Peers.WAIT}


def test_a_standalone_master_leads_for_good_and_never_confirms():
    core = FakeCore("alone", registry_changes=2)
    leadership = Leadership.standalone(core)
    assert leadership.leading == Leading(core, None, 2) and leadership.peers is Peers.HANDLE
    assert leadership.process(TurnStarted(gap=30.0), NOW) == []   # a long stall: nobody to ask
    assert leadership.process(TurnEnded(30.0, (R1,)), NOW) == [Commit((R1,))]
    assert leadership.wakeup() is None


# ------------------------------------------------- the races, as sequences
def feed(leadership, *events, now=NOW):
    actions = []
    for event in events:
        actions += leadership.process(event, now)
        leadership._check()
    return actions


def leading_master(core=CORE):
    leadership = machine()
    feed(leadership, ZnodeChanged("/z1"), ElectionWon(), Tick(), RegistryLoaded(core.registry, "/z1"))
    assert feed(leadership, CoreBuilt(core, "/z1")) == [Serve(core)]
    return leadership


def test_a_connection_blip_keeps_the_cluster():
    leadership = leading_master()
    assert feed(leadership, Demoted("connection suspended")) == [PutAside("connection suspended")]
    assert leadership.peers is Peers.WAIT and leadership.kept.core is CORE
    assert feed(leadership, ElectionWon(), now=NOW + 1) == []
    assert feed(leadership, Tick(), now=NOW + 1) == [LoadRegistry()]
    assert feed(leadership, RegistryLoaded(CORE.registry, "/z1"), now=NOW + 1) == [Resume(CORE, ())]
    assert leadership.leading.core is CORE


def test_frames_that_woke_the_loop_with_a_break_wait_unread():
    """The demotion is handed over while the loop waits on its socket; the
    loop feeds it before its own TurnStarted: peers' frames wait."""
    leadership = leading_master()
    feed(leadership, Demoted("connection suspended"), TurnStarted(gap=0.0))
    assert leadership.peers is Peers.WAIT   # neither handled nor refused


def test_a_turn_cut_short_keeps_its_undelivered_replies():
    leadership = leading_master()
    feed(leadership, Demoted("connection suspended"), TurnEnded(0.01, (R1, R2)))
    assert leadership.kept.undelivered == (R1, R2)
    feed(leadership, ElectionWon(), Tick())
    assert feed(leadership, RegistryLoaded(CORE.registry, "/z1")) == [Resume(CORE, (R1, R2))]


def test_replies_a_demotion_stopped_mid_delivery_go_with_the_kept_core():
    leadership = leading_master()
    assert feed(leadership, TurnEnded(0.01, (R1, R2, R3))) == [Commit((R1, R2, R3))]
    feed(leadership, Demoted("connection suspended"), Unsent((R2, R3)))   # R1 went out
    feed(leadership, ElectionWon(), Tick())
    assert feed(leadership, RegistryLoaded(CORE.registry, "/z1")) == [Resume(CORE, (R2, R3))]


def test_frames_that_arrive_with_the_election_wait_for_the_new_leader():
    leadership = machine()
    feed(leadership, ZnodeChanged("/z1"), ElectionWon(), TurnStarted(gap=0.0))
    assert leadership.peers is Peers.WAIT   # not refused: handled once it serves, next turn


def test_an_unreadable_registry_is_read_again_every_half_second_keeping_the_candidacy():
    leadership = machine()
    feed(leadership, ElectionWon())
    assert feed(leadership, Tick()) == [LoadRegistry()]
    assert feed(leadership, RegistryUnreadable("not JSON")) == [RetryLoading(NOW + RETRY, "not JSON")]
    assert leadership.phase is Phase.ELECTED and leadership.peers is Peers.WAIT
    assert leadership.wakeup() == NOW + RETRY
    assert feed(leadership, Tick(), now=NOW + RETRY - 0.01) == []
    assert feed(leadership, Tick(), now=NOW + RETRY) == [LoadRegistry()]


@pytest.mark.parametrize("news", [ZnodeChanged(None), ZnodeChanged("/z2")], ids=["gone", "new"])
def test_a_kept_core_is_dropped_as_soon_as_the_session_is_known_lost(news):
    leadership = leading_master()
    feed(leadership, Demoted("connection suspended"))
    assert kinds(feed(leadership, news, now=NOW + 0.1)) == [Drop]   # long before NOW + HOLD
    assert leadership.peers is Peers.REFUSE and leadership.kept is None


def test_a_kept_core_is_given_up_after_the_session_timeout():
    leadership = leading_master()
    feed(leadership, Demoted("connection suspended"))
    assert leadership.wakeup() == NOW + HOLD
    assert feed(leadership, Tick(), now=NOW + HOLD - 0.01) == []
    assert kinds(feed(leadership, Tick(), now=NOW + HOLD)) == [Drop]


def test_a_kept_core_whose_registry_moved_on_does_not_resume():
    leadership = leading_master()
    feed(leadership, Demoted("connection suspended"), ElectionWon(), Tick())
    assert kinds(feed(leadership, RegistryLoaded("written by another master", "/z1"))) == \
        [Drop, BuildCore("written by another master", "/z1")]


def test_a_write_stored_while_the_demotion_waited_keeps_the_core():
    """Demoted is handed over during a registry write: the loop feeds it
    before Stored, and the core is still kept (not dropped as unstored)."""
    core = FakeCore("writer")
    leadership = leading_master(core)
    core.registry_changes = 1
    feed(leadership, TurnEnded(0.01, (R1,)))
    feed(leadership, Demoted("connection suspended"), Stored(1))
    assert feed(leadership, Tick(), now=NOW + 0.1) == []
    assert leadership.kept.core is core and leadership.kept.undelivered == ()


def test_changes_never_stored_drop_the_kept_core_at_the_next_turn():
    core = FakeCore("writer")
    leadership = leading_master(core)
    core.registry_changes = 1   # the turn changed the registry; the break came before it was written
    feed(leadership, Demoted("connection suspended"), TurnEnded(0.01, (R1,)))
    assert kinds(feed(leadership, Tick())) == [Drop]


def test_after_a_stall_the_master_confirms_before_it_acts():
    leadership = leading_master()
    assert feed(leadership, TurnStarted(gap=STALL)) == [ConfirmLeadership(STALL)]
    assert leadership.peers is Peers.WAIT and leadership.leading is None
    assert feed(leadership, Confirmed()) == [Commit(())]
    assert feed(leadership, TurnEnded(STALL + 1, (R1,))) == [ConfirmLeadership(STALL + 1)]
    assert kinds(feed(leadership, Refuted("SessionExpiredError"))) == [Drop]
    assert leadership.peers is Peers.REFUSE


# ---------------------------------------------- the runtime, simulated
@attrs.define(eq=False)
class SimCore:
    """A core whose registry is a value: (who changed it, how often)."""

    registry: object
    name: int
    registry_changes: int = 0

    def change(self) -> None:
        self.registry_changes += 1
        self.registry = (self.name, self.registry_changes)


#: what ZooKeeper may do. "expire": the server expires the session and the
#: client has not noticed yet (a frozen master); "lose": the client notices.
#: "unreadable"/"readable": the registry's header.
ZOOKEEPER = ["win", "suspend", "expire", "expire and another leads", "lose", "rejoin", "unreadable", "readable"]
#: what may happen at one step inside a turn: mostly nothing; a blip, an election, a lost session
INTERRUPTS = [()] * 30 + [(what,) for what in ZOOKEEPER] + [("suspend",)] * 3 + [("suspend", "win")] * 3 + \
    [("expire", "suspend"), ("lose", "rejoin", "win"), ("expire and another leads", "lose", "rejoin", "win")]


class RuntimeSimulation(RuleBasedStateMachine):
    """Feeds the machine as MasterRuntime does — ZooKeeper's events handed
    over, fed before the loop's own next event — and carries out its actions
    against a simulated ZooKeeper. ZooKeeper's events come between turns and
    at any step inside one. Checks: a master acts (sends a reply) only while
    its contender leads under the znode it loaded the registry with; a kept
    core resumes only under that znode with the registry it last wrote; no
    reply is lost while the core that said it lives, none is sent twice."""

    def __init__(self) -> None:
        super().__init__()
        self.leadership: Leadership[SimCore] = Leadership(hold_for=HOLD, stall_after=STALL, retry_every=RETRY)
        self.now = 0.0
        self.pending: list = []
        self.serial = 0
        self.znode: str | None = "/z0"          # the contender's znode
        self.alive = True                       # it exists on the server
        self.won = False                        # the contender leads
        self.stored: object = ("initial", 0)    # the registry in ZooKeeper
        self.readable = True
        self.processed_won = False              # as the machine has been told
        self.processed_znode: str | None = None
        self.said: set[Send] = set()
        self.delivered: list[Send] = []
        self.dropped: set[Send] = set()
        self.outbox: list[Send] = []            # the runtime's: resumed replies, sent next turn
        self.data: st.DataObject | None = None  # during a turn: draws what happens at each step
        self.hand_over(ZnodeChanged("/z0"))

    # ZooKeeper, as the contender reports it
    def hand_over(self, event) -> None:
        self.pending.append(event)

    def zookeeper(self, what: str) -> None:
        if what == "win" and not self.won and self.znode is not None and self.alive:
            self.won = True
            self.hand_over(ElectionWon())
        elif what == "suspend" and self.won:
            self.won = False
            self.hand_over(Demoted("connection suspended"))
        elif what.startswith("expire"):
            self.alive = False
            if what == "expire and another leads":
                self.serial += 1
                self.stored = ("another master", self.serial)
        elif what == "lose" and self.znode is not None:
            self.znode, self.alive = None, False
            self.hand_over(ZnodeChanged(None))
            if self.won:
                self.won = False
                self.hand_over(Demoted("session lost"))
        elif what == "rejoin" and self.znode is None:
            self.serial += 1
            self.znode, self.alive = f"/z{self.serial}", True
            self.hand_over(ZnodeChanged(self.znode))
        elif what in ("unreadable", "readable"):
            self.readable = what == "readable"

    def interrupt(self) -> None:
        """What ZooKeeper does while the loop is at this step of a turn."""
        if self.data is not None:
            for what in self.data.draw(st.sampled_from(INTERRUPTS)):
                self.zookeeper(what)

    # the runtime's feeding
    def feed(self, event) -> list:
        self.interrupt()
        pending, self.pending = self.pending, []
        actions: list = []
        for each in [*pending, event]:
            actions += self.process(each)
        return actions

    def process(self, event) -> list:
        if isinstance(event, ElectionWon):
            self.processed_won = True
        elif isinstance(event, Demoted):
            self.processed_won = False
        elif isinstance(event, ZnodeChanged):
            self.processed_znode = event.znode
        before = self.held() | set(getattr(event, "replies", ()))
        had_core = self.core_held() is not None
        actions = self.leadership.process(event, self.now)
        self.leadership._check()
        moved = {reply for action in actions
                 for reply in getattr(action, "replies", getattr(action, "undelivered", ()))}
        lost = before - self.held() - moved
        if lost:
            # only with the core that said them: a Drop, or a reply for a core dropped before
            assert any(isinstance(a, Drop) for a in actions) or not had_core, (event, actions, lost)
            self.dropped |= lost
        state = self.leadership.state
        if isinstance(state, (Leading, Confirming)):
            assert self.processed_won and self.processed_znode == state.fence, "leads without the election"
        return actions

    def held(self) -> set[Send]:
        state = self.leadership.state
        if isinstance(state, Confirming):
            return set(state.replies)
        kept = self.leadership.kept
        return set(kept.undelivered) if kept is not None else set()

    def core_held(self) -> SimCore | None:
        state = self.leadership.state
        if isinstance(state, (Leading, Confirming)):
            return state.core
        kept = self.leadership.kept
        return kept.core if kept is not None else None

    def acting(self) -> bool:
        return self.leadership.leading is not None and not self.pending

    def carry_out(self, actions: list) -> None:
        while actions:
            action, actions = actions[0], actions[1:]
            actions = self.do(action) + actions

    def do(self, action) -> list:
        if isinstance(action, LoadRegistry):
            if self.readable and self.znode is not None and self.alive:
                return self.feed(RegistryLoaded(self.stored, self.znode))
            return self.feed(RegistryUnreadable("unreadable"))
        if isinstance(action, BuildCore):
            self.serial += 1
            return self.feed(CoreBuilt(SimCore(action.registry, self.serial), action.fence))
        if isinstance(action, Serve):
            assert not self.outbox and self.held() == set(), "a fresh core inherits nothing"
        if isinstance(action, Resume):
            leading = self.leadership.leading
            assert leading is not None and leading.core is action.core
            assert self.processed_znode == leading.fence and self.stored == action.core.registry
            self.outbox = list(action.undelivered) + self.outbox
        if isinstance(action, Drop):
            self.dropped |= set(self.outbox)
            self.outbox = []
        if isinstance(action, ConfirmLeadership):
            self.interrupt()   # while the question travels
            fence = self.leadership.state.fence
            return self.feed(Confirmed() if self.alive and self.znode == fence else Refuted("not ours"))
        if isinstance(action, Commit):
            return self.commit(action.replies)
        return []

    def commit(self, replies) -> list:
        actions: list = []
        self.interrupt()   # while the registry is written
        leading = self.leadership.leading
        if leading is not None and leading.core.registry_changes != leading.persisted:
            if self.alive and self.znode == leading.fence:   # the fenced write
                self.stored = leading.core.registry
                actions += self.feed(Stored(leading.core.registry_changes))
            else:
                actions += self.feed(Fenced("not the leader any more"))
        for index, reply in enumerate(replies):
            self.interrupt()
            if not self.acting():
                return actions + self.feed(Unsent(tuple(replies[index:])))
            leading = self.leadership.leading
            assert self.won and self.znode == leading.fence, "a word as leader from a master that does not lead"
            assert reply not in self.delivered
            self.delivered.append(reply)
        return actions

    # the loop
    @rule(what=st.sampled_from(ZOOKEEPER))
    def between_turns(self, what):
        self.zookeeper(what)

    @rule(data=st.data())
    def turn(self, data):
        self.data = data
        try:
            self.turn_with(data)
        finally:
            self.data = None

    def turn_with(self, data):
        self.now += data.draw(st.sampled_from([0.0, 0.1, 0.5, 1.0, HOLD]))
        self.carry_out(self.feed(Tick()))
        if self.leadership.peers is Peers.WAIT:
            return
        gap = data.draw(st.sampled_from([0.0, 0.01, STALL]))
        self.carry_out(self.feed(TurnStarted(gap)))
        leading = self.leadership.leading
        if self.leadership.peers is not Peers.HANDLE or leading is None:
            return
        replies = tuple(Send(b"peer", f"reply-{len(self.said) + i}") for i in range(data.draw(st.integers(0, 3))))
        self.said |= set(replies)
        replies = tuple(self.outbox) + replies
        self.outbox = []
        for _ in range(data.draw(st.integers(0, 2))):
            leading.core.change()
        duration = data.draw(st.sampled_from([0.0, 0.01, STALL]))
        self.carry_out(self.feed(TurnEnded(duration, replies)))

    @invariant()
    def every_reply_is_sent_held_or_dropped_with_its_core(self):
        held, outbox, delivered = self.held(), set(self.outbox), set(self.delivered)
        assert len(delivered) == len(self.delivered), "a reply sent twice"
        parts = [held, outbox, delivered, self.dropped]
        assert sum(map(len, parts)) == len(set().union(*parts)), "a reply in two places"
        assert set().union(*parts) == self.said


TestRuntimeSimulation = RuntimeSimulation.TestCase
TestRuntimeSimulation.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)


# ------------------------------------------------------------------ docs
def test_docs_show_the_table_the_code_has():
    doc = (ROOT / "docs" / "ha.rst").read_text()
    paste = "docs/ha.rst: paste what `python -m mesoslike.master.leadership` prints"
    assert render_phases() in doc, paste
    assert render_transitions() in doc, paste
