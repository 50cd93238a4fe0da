"""Property tests: the allocator against the DRF oracle, and its invariants
under random sequences of events (hypothesis)."""

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fairness_oracles import drf
from mesoslike.resources import Resources

from allocator_helpers import R, draw_answer, make, run_tasks

pytestmark = pytest.mark.timeout(120)

demand = st.tuples(st.integers(0, 6), st.integers(0, 6)).filter(lambda d: d != (0, 0))


@given(
    cpus=st.integers(1, 40),
    mem=st.integers(1, 40),
    users=st.lists(st.tuples(demand, st.integers(1, 3)), min_size=1, max_size=4),
)
def test_allocator_drf_matches_progressive_filling_oracle(cpus, mem, users):
    """One agent, one framework per role; each takes one task per offer. The
    task counts equal the weighted DRF progressive-filling oracle's."""
    alloc, _ = make(min_allocatable="")
    alloc.add_agent("agent", Resources(cpus=cpus, mem=mem))
    sizes, demands, weights = {}, {}, {}
    for i, ((c, m), weight) in enumerate(users):
        role = f"r{i}"
        alloc.add_framework(role, role=role)
        sizes[role] = Resources(cpus=c, mem=m)
        demands[role] = {"cpus": c, "mem": m}
        weights[role] = weight
    alloc.update_weights(weights)
    launched = run_tasks(alloc, sizes, cycles=500)
    oracle = drf({"cpus": cpus, "mem": mem}, demands, weights=weights)
    note(f"allocator={launched} oracle={oracle.tasks}")
    assert launched == oracle.tasks


small = st.tuples(st.integers(0, 8), st.integers(0, 8))


@given(refused=small.filter(lambda r: r != (0, 0)), now=small)
def test_a_filter_blocks_exactly_the_offers_contained_in_what_was_refused(refused, now):
    alloc, _ = make(min_allocatable="")
    refused_r = Resources(cpus=refused[0], mem=refused[1])
    alloc.add_agent("n", refused_r)
    alloc.add_framework("f")
    (offer,) = alloc.allocate()
    alloc.decline_offer(offer.id, refuse_seconds=3600)
    # the agent changes size: it may now have more (in some kind) than was refused
    available = Resources(cpus=now[0], mem=now[1])
    alloc.update_agent("n", total=available)
    offered = [o.resources for o in alloc.allocate()]
    if available and not refused_r.contains(available):
        assert offered == [available]
    else:
        assert offered == []


class AllocatorMachine(RuleBasedStateMachine):
    """Random events; after each, the bookkeeping adds up and no agent with
    allocatable leftovers is withheld from an eligible framework unless one of
    its filters refused at least that much."""

    FRAMEWORKS = {"f0": "a", "f1": "a", "f2": "b/x", "f3": "b/y"}

    @initialize()
    def setup(self):
        self.alloc, self.clock = make(min_allocatable="cpus:1|mem:1")
        self.agents = {}
        self.next_agent = 0
        for fw, role in self.FRAMEWORKS.items():
            self.alloc.add_framework(fw, role=role)
        self.inactive = set()
        self.suppressed = set()
        for _ in range(3):
            self.add_agent(4, 4)

    @rule(cpus=st.integers(1, 6), mem=st.integers(1, 6))
    def add_agent(self, cpus, mem):
        agent = f"n{self.next_agent}"
        self.next_agent += 1
        self.alloc.add_agent(agent, Resources(cpus=cpus, mem=mem))
        self.agents[agent] = Resources(cpus=cpus, mem=mem)

    @precondition(lambda self: len(self.agents) > 1)
    @rule(data=st.data())
    def remove_agent(self, data):
        agent = data.draw(st.sampled_from(sorted(self.agents)))
        self.alloc.remove_agent(agent)
        del self.agents[agent]

    @rule()
    def allocate(self):
        offers = self.alloc.allocate()
        self.check_offers(offers)
        self.check_nothing_withheld()

    @rule(data=st.data())
    def answer_offers(self, data):
        for offer in self.alloc.outstanding_offers():
            answer = draw_answer(data, offer)
            if answer is not None:
                answer(self.alloc)

    @rule(data=st.data())
    def tasks_end(self, data):
        fw = data.draw(st.sampled_from(sorted(self.FRAMEWORKS)))
        for agent, held in sorted(self.alloc.allocation(fw).items()):
            if data.draw(st.booleans()):
                part = held.minimum(R("cpus:1;mem:1"))
                self.alloc.recover_resources(fw, agent, part, refuse_seconds=data.draw(st.sampled_from([0, 2])))

    @rule(seconds=st.sampled_from([0.5, 1, 3, 10]))
    def advance(self, seconds):
        self.clock.advance(seconds)

    @rule(data=st.data())
    def suppress_or_revive(self, data):
        fw = data.draw(st.sampled_from(sorted(self.FRAMEWORKS)))
        if fw in self.suppressed:
            self.alloc.revive_offers(fw)
            self.suppressed.discard(fw)
            assert fw not in self.alloc.snapshot()["filters"], "revive must clear the framework's filters"
        else:
            self.alloc.suppress_offers(fw)
            self.suppressed.add(fw)

    @rule(data=st.data())
    def disconnect_or_reconnect(self, data):
        fw = data.draw(st.sampled_from(sorted(self.FRAMEWORKS)))
        if fw in self.inactive:
            self.alloc.activate_framework(fw)
            self.inactive.discard(fw)
        else:
            self.alloc.deactivate_framework(fw)
            self.inactive.add(fw)
            assert self.alloc.outstanding_offers(fw) == []

    @rule(weight=st.sampled_from([0.5, 1.0, 2.0]), role=st.sampled_from(["a", "b", "b/x"]))
    def reweigh(self, weight, role):
        self.alloc.update_weights({role: weight})

    # ---------------------------------------------------------------- checks
    @invariant()
    def bookkeeping_adds_up(self):
        self.alloc.check_invariants()
        for agent, total in self.agents.items():
            held = Resources()
            for fw in self.FRAMEWORKS:
                held = held + self.alloc.allocation(fw).get(agent, Resources())
            assert total.contains(held), f"agent {agent} over capacity: {held} > {total}"

    def check_offers(self, offers):
        seen = set()
        for offer in offers:
            assert (offer.framework_id, offer.agent_id) not in seen
            seen.add((offer.framework_id, offer.agent_id))
            assert offer.framework_id not in self.inactive | self.suppressed

    def check_nothing_withheld(self):
        now = self.clock.now()
        filters = self.alloc.snapshot()["filters"]
        for agent in self.agents:
            left = self.alloc.available(agent)
            if not (left.contains(R("cpus:1")) or left.contains(R("mem:1"))):
                continue
            for fw in set(self.FRAMEWORKS) - self.inactive - self.suppressed:
                refused = [Resources.parse(r) for r, expires in filters.get(fw, {}).get(agent, []) if expires > now]
                assert any(r.contains(left) for r in refused), (
                    f"{agent} keeps {left} although {fw} is eligible and refused only {refused}"
                )


AllocatorMachine.TestCase.settings = AllocatorMachine.TestCase.settings
TestAllocatorMachine = AllocatorMachine.TestCase


class QuotaLimitMachine(RuleBasedStateMachine):
    """With limits on roles, allocation never pushes a role past its limit."""

    @initialize()
    def setup(self):
        self.alloc, self.clock = make(min_allocatable="")
        for i in range(4):
            self.alloc.add_agent(f"n{i}", R("cpus:4;mem:8"))
        for fw, role in {"p": "eng/prod", "d": "eng/dev", "o": "ops"}.items():
            self.alloc.add_framework(fw, role=role)
        self.limits = {}

    @rule(role=st.sampled_from(["eng", "eng/prod", "ops"]), cpus=st.integers(0, 12), mem=st.integers(0, 20))
    def set_limit(self, role, cpus, mem):
        self.alloc.update_quota(role, limit={"cpus": cpus, "mem": mem})
        self.limits[role] = Resources(cpus=cpus, mem=mem)

    @rule()
    def allocate(self):
        before = self.consumption()
        self.alloc.allocate()
        after = self.consumption()
        for role, limit in self.limits.items():
            for kind in ("cpus", "mem"):
                allowed = max(limit.get(kind), before[role].get(kind))
                assert after[role].get(kind) <= allowed, f"{role} exceeds its {kind} limit: {after[role]} > {limit}"

    @rule(data=st.data())
    def answer(self, data):
        for offer in self.alloc.outstanding_offers():
            if data.draw(st.booleans()):
                self.alloc.accept_offer(offer.id, offer.resources.minimum(R("cpus:1;mem:1")), refuse_seconds=0)
            else:
                self.alloc.decline_offer(offer.id, refuse_seconds=0)

    @rule(data=st.data())
    def tasks_end(self, data):
        fw = data.draw(st.sampled_from(["p", "d", "o"]))
        for agent, held in sorted(self.alloc.allocation(fw).items()):
            self.alloc.recover_resources(fw, agent, held.minimum(R("cpus:1;mem:1")))

    def consumption(self):
        roles = {"eng": ["p", "d"], "eng/prod": ["p"], "ops": ["o"]}
        out = {}
        for role, fws in roles.items():
            total = Resources()
            for fw in fws:
                for held in self.alloc.allocation(fw).values():
                    total = total + held
            out[role] = total
        return out

    @invariant()
    def consistent(self):
        self.alloc.check_invariants()


TestQuotaLimitMachine = QuotaLimitMachine.TestCase
