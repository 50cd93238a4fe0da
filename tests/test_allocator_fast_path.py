"""The allocator's fast path against its general stage loop.

In the common case — no quota, one active role, one minimum allocatable for
everyone — the plain stage runs as one tight loop (``_allocate_plain``)
instead of the general stage loop (``_run_stage``). Both must make exactly
the same offers. Here two allocators with the same seed get the same random
history, one with the fast path turned off, and every cycle's offers and
the resulting state are compared."""

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mesoslike.allocator import DEFAULT_MIN_ALLOCATABLE
from mesoslike.errors import MesoslikeError

from allocator_helpers import R, draw_answer, make

pytestmark = pytest.mark.timeout(120)

FRAMEWORKS = ["f0", "f1", "f2", "f3"]


def offers_of(offers):
    return [(o.id, o.framework_id, o.agent_id, str(o.resources)) for o in offers]


class FastPathMachine(RuleBasedStateMachine):
    """Every rule is applied to both allocators; cycles must agree."""

    @initialize(role=st.sampled_from(["*", "eng", "eng/prod"]), interval=st.sampled_from([1.0, 5.0]),
                minimum=st.sampled_from([DEFAULT_MIN_ALLOCATABLE, ""]))
    def setup(self, role, interval, minimum):
        self.fast, self.clock_fast = make(allocation_interval=interval, min_allocatable=minimum)
        self.general, self.clock_general = make(allocation_interval=interval, min_allocatable=minimum)
        self.general._fast_path = False
        self.role = role
        self.frameworks = []
        self.agents = []
        self.next_agent = 0
        for fw in FRAMEWORKS[:2]:
            self.both(lambda a: a.add_framework(fw, role=role))
            self.frameworks.append(fw)
        for _ in range(3):
            self.add_agent(cpus=4, mem=4)

    def both(self, event):
        """Apply ``event`` to both allocators; they must agree on its result
        (or on the error it raises)."""
        results = []
        for alloc in (self.fast, self.general):
            try:
                results.append(("ok", event(alloc)))
            except MesoslikeError as exc:
                results.append(("error", type(exc).__name__))
        assert results[0] == results[1]
        return results[0]

    # ------------------------------------------------------------- events
    @rule(cpus=st.integers(1, 6), mem=st.integers(1, 6))
    def add_agent(self, cpus, mem):
        agent = f"n{self.next_agent}"
        self.next_agent += 1
        self.both(lambda a: a.add_agent(agent, R(f"cpus:{cpus};mem:{mem}")))
        self.agents.append(agent)

    @precondition(lambda self: len(self.agents) > 1)
    @rule(data=st.data())
    def remove_agent(self, data):
        agent = data.draw(st.sampled_from(self.agents))
        self.both(lambda a: a.remove_agent(agent))
        self.agents.remove(agent)

    @precondition(lambda self: self.agents)
    @rule(data=st.data(), cpus=st.integers(4, 8), mem=st.integers(4, 8), rack=st.sampled_from(["r1", "r2"]))
    def update_agent(self, data, cpus, mem, rack):
        agent = data.draw(st.sampled_from(self.agents))
        self.both(lambda a: a.update_agent(agent, total=R(f"cpus:{cpus};mem:{mem}"), attributes={"rack": rack}))

    @precondition(lambda self: self.agents)
    @rule(data=st.data())
    def deactivate_or_activate_agent(self, data):
        agent = data.draw(st.sampled_from(self.agents))
        if self.fast.snapshot()["agents"][agent]["active"]:
            self.both(lambda a: a.deactivate_agent(agent))
        else:
            self.both(lambda a: a.activate_agent(agent))

    @precondition(lambda self: len(self.frameworks) < len(FRAMEWORKS))
    @rule()
    def add_framework(self):
        fw = next(f for f in FRAMEWORKS if f not in self.frameworks)
        self.both(lambda a: a.add_framework(fw, role=self.role))
        self.frameworks.append(fw)

    @precondition(lambda self: len(self.frameworks) > 1)
    @rule(data=st.data())
    def remove_framework(self, data):
        fw = data.draw(st.sampled_from(self.frameworks))
        self.both(lambda a: a.remove_framework(fw))
        self.frameworks.remove(fw)

    @precondition(lambda self: self.frameworks)
    @rule(data=st.data(), op=st.sampled_from(["suppress", "revive", "deactivate", "activate"]))
    def framework_state(self, data, op):
        fw = data.draw(st.sampled_from(self.frameworks))
        call = {"suppress": "suppress_offers", "revive": "revive_offers",
                "deactivate": "deactivate_framework", "activate": "activate_framework"}[op]
        self.both(lambda a: getattr(a, call)(fw))

    @precondition(lambda self: self.agents)
    @rule(data=st.data(), seconds=st.sampled_from([0.5, 2.0]))
    def prefer(self, data, seconds):
        agent = data.draw(st.sampled_from(self.agents))
        self.both(lambda a: a.prefer_role(agent, self.role, until=a.clock.now() + seconds))

    @rule(weight=st.sampled_from([0.5, 2.0]))
    def reweigh(self, weight):
        self.both(lambda a: a.update_weights({self.role: weight}))

    @rule(seconds=st.sampled_from([0.5, 1.0, 5.0]))
    def advance(self, seconds):
        self.clock_fast.advance(seconds)
        self.clock_general.advance(seconds)

    @rule(data=st.data())
    def answer_offers(self, data):
        for offer in self.fast.outstanding_offers():
            answer = draw_answer(data, offer)
            if answer is not None:
                self.both(answer)

    @precondition(lambda self: self.frameworks)
    @rule(data=st.data())
    def tasks_end(self, data):
        fw = data.draw(st.sampled_from(self.frameworks))
        for agent, held in sorted(self.fast.allocation(fw).items()):
            if data.draw(st.booleans()):
                part = held.minimum(R("cpus:1;mem:1"))
                refuse = data.draw(st.sampled_from([0, 2]))
                self.both(lambda a: a.recover_resources(fw, agent, part, refuse_seconds=refuse))

    # ------------------------------------------------------------- cycles
    @rule()
    def allocate_all(self):
        self.both(lambda a: offers_of(a.allocate()))

    @precondition(lambda self: self.agents)
    @rule(data=st.data())
    def allocate_some(self, data):
        agents = data.draw(st.lists(st.sampled_from(self.agents), min_size=1, max_size=3))
        self.both(lambda a: offers_of(a.allocate(agents)))

    @rule()
    def tick(self):
        self.both(lambda a: offers_of(a.tick()))

    @invariant()
    def same_state(self):
        fast, general = self.fast.snapshot(), self.general.snapshot()
        assert fast == general
        assert self.fast.statistics() == self.general.statistics()
        self.fast.check_invariants()


TestFastPathMachine = FastPathMachine.TestCase


def test_the_fast_path_runs_in_the_common_case_and_not_otherwise():
    """What the machine above compares really is the fast path: it runs with
    one role and no quota, and gives way to the stage loop otherwise."""
    alloc, _ = make()
    calls = []
    plain = alloc._allocate_plain
    alloc._allocate_plain = lambda *args: calls.append(args) or plain(*args)
    alloc.add_framework("f", role="eng")
    alloc.add_agent("n", R("cpus:1;mem:64"))
    assert len(alloc.allocate()) == 1
    assert len(calls) == 1
    alloc.add_framework("g", role="ops")  # two active roles: the general loop
    alloc.add_agent("m", R("cpus:1;mem:64"))
    assert len(alloc.allocate()) == 1
    assert len(calls) == 1


def test_without_a_minimum_a_preferred_agent_taken_whole_is_not_offered_again():
    """With no minimum allocatable, the prefer stage can take a whole agent
    before the plain stage: the fast path must not make its empty rest an
    offer (nor count it as an allocation received), as the stage loop does not."""
    results = []
    for fast_path in (True, False):
        alloc, _ = make(min_allocatable="")
        alloc._fast_path = fast_path
        alloc.add_framework("f0")
        alloc.add_framework("f1")
        alloc.add_agent("n0", R("cpus:4;mem:4"))
        alloc.prefer_role("n0", "*", until=100.0)
        offers = [(o.framework_id, o.agent_id, str(o.resources)) for o in alloc.allocate()]
        results.append((offers, alloc.snapshot(), alloc.statistics()))
    assert results[0][0] == [("f0", "n0", "cpus:4;mem:4")]
    assert results[0] == results[1]
