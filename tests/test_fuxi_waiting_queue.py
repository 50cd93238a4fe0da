"""The Fuxi waiting queue (frameworks/mesoslike_frameworks/fuxi/waiting_queue.py): order, fits,
bad input, and a stateful property test against a linear-scan oracle."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mesoslike.errors import MesoslikeError
from mesoslike_frameworks.fuxi.waiting_queue import (
    DuplicateUnitError,
    InvalidArgumentError,
    UnknownUnitError,
    WaitingQueue,
    WaitingUnit,
)
from mesoslike.resources import Resources

pytestmark = pytest.mark.timeout(120)


def R(text: str) -> Resources:
    return Resources.parse(text)


SMALL = R("cpus:1;mem:1024")


def snapshot(q: WaitingQueue):
    """Everything observable about a queue."""
    return (q.policy, len(q), list(q), [q.info(u) for u in q])


# ------------------------------------------------------------------ order
def test_empty_queue_picks_nothing():
    q = WaitingQueue()
    assert len(q) == 0
    assert q.pick(R("cpus:100;mem:100000")) is None
    assert q.pick_all(R("cpus:100")) == []
    assert list(q) == []
    q.check_invariants()


def test_smaller_priority_number_goes_first():
    q = WaitingQueue()
    q.add("low", 200, SMALL, submitted=0)
    q.add("high", 5, SMALL, submitted=1)
    q.add("mid", 100, SMALL, submitted=2)
    assert q.pick(R("cpus:8;mem:8192")) == "high"
    assert list(q) == ["high", "mid", "low"]


def test_fifo_breaks_priority_ties_by_submission_then_id():
    q = WaitingQueue("FIFO")
    q.add("b", 1, SMALL, submitted=7)
    q.add("late", 1, SMALL, submitted=9, granted=0)
    q.add("a", 1, SMALL, submitted=7)
    q.add("early", 1, SMALL, submitted=3, granted=50)
    assert list(q) == ["early", "a", "b", "late"]
    assert q.pick(SMALL) == "early"


def test_fair_puts_fewest_granted_first_then_submission():
    q = WaitingQueue("FAIR")
    q.add("rich", 1, SMALL, submitted=0, granted=10)
    q.add("poor-late", 1, SMALL, submitted=5, granted=2)
    q.add("poor-early", 1, SMALL, submitted=4, granted=2)
    q.add("urgent-rich", 0, SMALL, submitted=9, granted=99)
    assert list(q) == ["urgent-rich", "poor-early", "poor-late", "rich"]


def test_update_granted_reorders_under_fair_only():
    fair, fifo = WaitingQueue("FAIR"), WaitingQueue("FIFO")
    for q in (fair, fifo):
        q.add("x", 1, SMALL, submitted=0, granted=0)
        q.add("y", 1, SMALL, submitted=1, granted=0)
        assert q.pick(SMALL) == "x"
        q.update_granted("x", 3)
        assert q.info("x").granted == 3
        q.check_invariants()
    assert fair.pick(SMALL) == "y"
    assert fifo.pick(SMALL) == "x"
    fair.update_granted("y", 4)
    assert fair.pick(SMALL) == "x"
    fair.update_granted("y", 4)          # no change is fine
    fair.check_invariants()


def test_update_granted_moves_a_unit_across_sizes_heads():
    q = WaitingQueue("FAIR")
    q.add("big", 1, R("cpus:4;mem:4096"), submitted=0, granted=5)
    q.add("small", 1, R("cpus:1;mem:512"), submitted=1, granted=1)
    q.add("small2", 1, R("cpus:1;mem:512"), submitted=2, granted=2)
    everything = R("cpus:8;mem:8192")
    assert list(q) == ["small", "small2", "big"]
    q.update_granted("small", 9)
    assert q.pick(everything) == "small2"
    q.update_granted("big", 0)
    assert q.pick(everything) == "big"
    assert list(q) == ["big", "small2", "small"]
    q.check_invariants()


def test_policy_property_and_repr():
    q = WaitingQueue("FAIR")
    q.add("u", 1, SMALL, 0)
    assert q.policy == "FAIR"
    assert "FAIR" in repr(q) and "units=1" in repr(q)


# ------------------------------------------------------------------- fits
def test_fits_needs_every_dimension():
    q = WaitingQueue()
    q.add("cpu-heavy", 1, R("cpus:8;mem:1024"), 0)
    q.add("mem-heavy", 2, R("cpus:1;mem:16384"), 1)
    q.add("gpu", 3, R("cpus:1;mem:1024;gpus:1"), 2)
    q.add("tiny", 4, R("cpus:0.5;mem:512"), 3)
    assert q.pick(R("cpus:4;mem:4096")) == "tiny"            # gpu unit: free has no gpus at all
    assert q.pick(R("cpus:4;mem:4096;gpus:1")) == "gpu"
    assert q.pick(R("cpus:8;mem:4096")) == "cpu-heavy"
    assert q.pick(R("cpus:4;mem:16384")) == "mem-heavy"
    assert q.pick(R("cpus:0.499;mem:100000;gpus:8")) is None
    assert q.pick(R("cpus:0.5;mem:512")) == "tiny"            # exactly equal fits
    assert q.pick_all(R("cpus:8;mem:16384;gpus:1")) == ["cpu-heavy", "mem-heavy", "gpu", "tiny"]
    assert q.pick_all(R("cpus:4;mem:16384;disk:10;ports:[1-10]")) == ["mem-heavy", "tiny"]


def test_kind_unknown_to_the_queue_in_free_is_ignored():
    q = WaitingQueue()
    q.add("u", 1, R("cpus:1"), 0)
    assert q.pick(R("cpus:1;mem:4;disk:5;ports:[1-2]")) == "u"


def test_new_resource_kind_after_the_queue_was_built():
    q = WaitingQueue()
    for i in range(50):
        q.add(f"c{i}", i, R(f"cpus:{1 + i % 7};mem:{256 * (1 + i % 5)}"), i)
    q.add("fpga", -1, R("cpus:1;mem:256;fpga:1"), 100)
    q.check_invariants()
    assert q.pick(R("cpus:1;mem:256")) == "c0"
    assert q.pick(R("cpus:1;mem:256;fpga:1")) == "fpga"
    q.remove("fpga")
    q.check_invariants()
    assert q.pick(R("cpus:1;mem:256;fpga:1")) == "c0"


def test_pick_is_a_query():
    q = WaitingQueue()
    q.add("u", 1, SMALL, 0)
    before = snapshot(q)
    assert q.pick(SMALL) == "u"
    assert q.pick(SMALL) == "u"
    assert snapshot(q) == before


# ----------------------------------------------------------------- remove
def test_remove_takes_the_unit_out_and_the_next_one_shows():
    q = WaitingQueue()
    q.add("a", 1, SMALL, 0)
    q.add("b", 2, SMALL, 1)
    q.add("c", 0, R("cpus:64"), 2)
    q.remove("a")
    assert "a" not in q and "b" in q and len(q) == 2
    assert q.pick(SMALL) == "b"
    q.remove("b")
    assert q.pick(SMALL) is None
    q.remove("c")
    assert len(q) == 0 and q.distinct_slots == 0
    q.add("a", 5, SMALL, 3)               # an id can come back once it has left
    assert q.pick(SMALL) == "a"
    q.check_invariants()


def test_many_sizes_emptied_are_collected():
    q = WaitingQueue()
    for i in range(500):
        q.add(f"u{i}", i % 13, R(f"cpus:{1 + i};mem:{1 + 3 * i}"), i)
    assert q.distinct_slots == 500
    for i in range(0, 490):
        q.remove(f"u{i}")
    q.check_invariants()
    assert q.distinct_slots == 10
    assert q.pick(R("cpus:10000;mem:100000")) == min((f"u{i}" for i in range(490, 500)),
                                                     key=lambda u: (int(u[1:]) % 13, int(u[1:])))


# -------------------------------------------------------------- bad input
def test_unknown_policy_is_rejected():
    for policy in ("LIFO", "fifo", "", None):
        with pytest.raises(ValueError):
            WaitingQueue(policy)


def test_unknown_unit_errors_are_key_errors_with_a_clear_message():
    q = WaitingQueue()
    q.add("a", 1, SMALL, 0)
    before = snapshot(q)
    for call in (lambda: q.remove("nope"), lambda: q.update_granted("nope", 1), lambda: q.info("nope"),
                 lambda: q.remove(["unhashable"])):
        with pytest.raises(UnknownUnitError) as err:
            call()
        assert isinstance(err.value, KeyError) and isinstance(err.value, MesoslikeError)
        assert "is not waiting" in str(err.value) and not str(err.value).startswith("'")
    assert snapshot(q) == before
    q.check_invariants()


def test_duplicate_add_is_rejected_and_the_first_unit_stays():
    q = WaitingQueue()
    q.add("a", 1, SMALL, 0)
    before = snapshot(q)
    with pytest.raises(DuplicateUnitError, match="already waiting"):
        q.add("a", 0, R("cpus:2"), 5)
    assert isinstance(DuplicateUnitError("x"), ValueError)
    assert snapshot(q) == before
    assert q.info("a") == WaitingUnit("a", 1, SMALL, 0, 0)
    q.check_invariants()


@pytest.mark.parametrize("args, match", [
    (("", 1, SMALL, 0), "unit_id"),
    ((7, 1, SMALL, 0), "unit_id"),
    (("x", True, SMALL, 0), "priority"),
    (("x", 1.5, SMALL, 0), "priority"),
    (("x", "1", SMALL, 0), "priority"),
    (("x", 1, "cpus:1", 0), "Resources"),
    (("x", 1, Resources(), 0), "empty"),
    (("x", 1, R("cpus:1;ports:[1-2]"), 0), "range"),
    (("x", 1, SMALL, -1), "submitted"),
    (("x", 1, SMALL, 1.0), "submitted"),
    (("x", 1, SMALL, 0, -2), "granted"),
    (("x", 1, SMALL, 0, False), "granted"),
])
def test_bad_add_raises_and_changes_nothing(args, match):
    q = WaitingQueue("FAIR")
    q.add("a", 1, SMALL, 0)
    q.add("b", 2, R("cpus:3;mem:7"), 1)
    before = snapshot(q)
    with pytest.raises(InvalidArgumentError, match=match) as err:
        q.add(*args)
    assert isinstance(err.value, ValueError)
    assert snapshot(q) == before
    assert "x" not in q
    q.check_invariants()


def test_bad_update_granted_and_bad_free_change_nothing():
    q = WaitingQueue("FAIR")
    q.add("a", 1, SMALL, 0, granted=1)
    before = snapshot(q)
    for bad in (-1, 1.0, None, True):
        with pytest.raises(InvalidArgumentError):
            q.update_granted("a", bad)
    for bad in ("cpus:1", None, {"cpus": 1}):
        with pytest.raises(InvalidArgumentError):
            q.pick(bad)
        with pytest.raises(InvalidArgumentError):
            q.pick_all(bad)
    assert snapshot(q) == before
    q.check_invariants()


# ------------------------------------------------------- helpers / lazy order
def test_iter_fitting_is_lazy_and_ordered():
    q = WaitingQueue()
    for i in range(200):
        q.add(f"u{i:03d}", i % 5, R(f"cpus:{1 + i % 4};mem:{512 * (1 + i % 3)}"), i)
    free = R("cpus:2;mem:1024")
    want = [u for u in q if free.contains(q.info(u).slot)]
    it = q.iter_fitting(free)
    assert next(it) == want[0] == q.pick(free)
    assert [next(it) for _ in range(3)] == want[1:4]
    assert q.pick_all(free) == want
    assert q.pick_all(free, limit=5) == want[:5]
    assert q.pick_all(free, limit=0) == []


def test_iterating_while_changing_is_an_error():
    q = WaitingQueue()
    for i in range(10):
        q.add(f"u{i}", i, SMALL, i)
    it = q.iter_fitting(SMALL)
    first = next(it)
    q.remove(first)
    with pytest.raises(RuntimeError, match="changed"):
        next(it)
    walk = iter(q)
    next(walk)
    q.add("new", 0, SMALL, 99)
    with pytest.raises(RuntimeError, match="changed"):
        next(walk)


def test_pick_does_not_scan_one_dimension():
    """With one resource kind the boxes prune exactly: a pick pops O(log S)
    nodes per k-d block, O(log^2 S) in all, however many units wait."""
    q = WaitingQueue()
    sizes = 1000
    order = list(range(sizes))
    random.Random(3).shuffle(order)                         # sizes arrive in any order
    for i in order:
        q.add(f"u{i}", sizes - i, R(f"mem:{i + 1}"), i)     # bigger slots are more urgent
    depth = int(math.log2(2 * sizes)) + 1
    costs = []
    for free_mem in (1, 2, 17, 500, 999, 1000, 5000):
        assert q.pick(R(f"mem:{free_mem}")) == f"u{min(free_mem, sizes) - 1}"
        costs.append(q.search_cost(R(f"mem:{free_mem}")))
    assert max(costs) <= depth * (depth + 1) // 2 < sizes // 10, costs
    before = [q.search_cost(R(f"mem:{m}")) for m in (17, 500)]
    for i in range(sizes, 20 * sizes):                       # 20x the units, same sizes
        q.add(f"u{i}", 10**6 + i, R(f"mem:{i % sizes + 1}"), i)
    assert [q.search_cost(R(f"mem:{m}")) for m in (17, 500)] == before
    assert q.pick(R("mem:17")) == "u16"
    q.check_invariants()


def test_pick_skips_a_large_region_that_cannot_fit():
    """Many units that are all too big in some dimension, one that fits, last
    in order: pick answers after a number of node pops tied to the sizes
    near the edge of free, not to the number of units."""
    q = WaitingQueue()
    n = 0
    for cpus in range(1, 41):
        for mem in range(1, 41):
            if cpus <= 20 and mem <= 20:
                continue
            for copy in range(3):
                q.add(f"u{n}", n % 97, R(f"cpus:{cpus};mem:{mem * 256}"), n)
                n += 1
    q.add("fits", 10**9, R("cpus:20;mem:5120"), n)
    free = R("cpus:20;mem:5120")
    assert q.pick(free) == "fits"
    assert q.search_cost(free) < q.distinct_slots // 4
    q.check_invariants()


@pytest.mark.parametrize("policy", ["FIFO", "FAIR"])
def test_long_churn_of_many_sizes_matches_a_scan(policy):
    """Thousands of seeded operations over a wide grid of sizes (the layout
    grows, merges blocks, drops empty sizes, rebuilds): every pick agrees
    with a linear scan and the invariants hold throughout."""
    rng = random.Random(f"churn-{policy}")
    q = WaitingQueue(policy)
    model: dict[str, list] = {}

    def order(u):
        p, _, sub, g = model[u]
        return (p, g, sub, u) if policy == "FAIR" else (p, sub, u)

    for step in range(4000):
        op = rng.random()
        if op < 0.55 or not model:
            uid = f"u{step}"
            extra = {"gpus": rng.randint(1, 2)} if rng.random() < 0.1 else {}
            slot = Resources(cpus=rng.randint(1, 40) / 4, mem=rng.randint(1, 60) * 128, **extra)
            model[uid] = [rng.randint(0, 9), slot, step, rng.randint(0, 3)]
            q.add(uid, model[uid][0], slot, step, model[uid][3])
        elif op < 0.85:
            uid = rng.choice(sorted(model))
            q.remove(uid)
            del model[uid]
        else:
            uid = rng.choice(sorted(model))
            model[uid][3] = rng.randint(0, 5)
            q.update_granted(uid, model[uid][3])
        free = Resources(cpus=rng.randint(0, 40) / 4, mem=rng.randint(0, 60) * 128, gpus=rng.randint(0, 2))
        want = next((u for u in sorted(model, key=order) if free.contains(model[u][1])), None)
        assert q.pick(free) == want, step
        if step % 250 == 0:
            q.check_invariants()
    q.check_invariants()
    assert list(q) == sorted(model, key=order)


# ------------------------------------------------------- property: vs oracle
CPUS = st.sampled_from([0.5, 1, 2, 4, 8])
MEM = st.sampled_from([256, 1024, 4096, 16384])
EXTRA = st.sampled_from([None, ("gpus", 1), ("gpus", 2), ("disk", 100)])
IDS = st.sampled_from([f"u{i}" for i in range(25)])


@st.composite
def slots(draw):
    scalars = {"cpus": draw(CPUS), "mem": draw(MEM)}
    extra = draw(EXTRA)
    if extra:
        scalars[extra[0]] = extra[1]
    return Resources(scalars)


@st.composite
def frees(draw):
    scalars = {"cpus": draw(st.sampled_from([0, 0.5, 1, 3, 8])),
               "mem": draw(st.sampled_from([0, 256, 2048, 4096, 20000]))}
    for kind, values in (("gpus", [0, 1, 2]), ("disk", [0, 50, 100])):
        scalars[kind] = draw(st.sampled_from(values))
    return Resources(scalars)


class WaitingQueueMachine(RuleBasedStateMachine):
    """Any sequence of add/remove/update_granted (valid or not): pick(free)
    equals a linear scan in queue order, the lazy order equals the full
    fitting list, and the internal invariants hold."""

    def __init__(self):
        super().__init__()
        self.q: WaitingQueue | None = None
        self.model: dict[str, list] = {}      # unit_id -> [priority, slot, submitted, granted]
        self.seq = 0

    @initialize(policy=st.sampled_from(["FIFO", "FAIR"]))
    def start(self, policy):
        self.q = WaitingQueue(policy)
        self.policy = policy

    def order_key(self, unit_id):
        priority, _, submitted, granted = self.model[unit_id]
        if self.policy == "FAIR":
            return (priority, granted, submitted, unit_id)
        return (priority, submitted, unit_id)

    def scan(self, free):
        for unit_id in sorted(self.model, key=self.order_key):
            if free.contains(self.model[unit_id][1]):
                return unit_id
        return None

    @rule(unit_id=IDS, priority=st.integers(0, 4), slot=slots(), granted=st.integers(0, 3),
          submitted=st.none() | st.integers(0, 5))
    def add(self, unit_id, priority, slot, granted, submitted):
        if submitted is None:
            submitted = self.seq
            self.seq += 1
        if unit_id in self.model:
            with pytest.raises(DuplicateUnitError):
                self.q.add(unit_id, priority, slot, submitted, granted)
        else:
            self.q.add(unit_id, priority, slot, submitted, granted)
            self.model[unit_id] = [priority, slot, submitted, granted]

    @rule(unit_id=IDS)
    def remove(self, unit_id):
        if unit_id in self.model:
            self.q.remove(unit_id)
            del self.model[unit_id]
        else:
            with pytest.raises(UnknownUnitError):
                self.q.remove(unit_id)

    @rule(unit_id=IDS, granted=st.integers(0, 4))
    def update_granted(self, unit_id, granted):
        if unit_id in self.model:
            self.q.update_granted(unit_id, granted)
            self.model[unit_id][3] = granted
        else:
            with pytest.raises(UnknownUnitError):
                self.q.update_granted(unit_id, granted)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove_existing(self, data):
        unit_id = data.draw(st.sampled_from(sorted(self.model)))
        self.q.remove(unit_id)
        del self.model[unit_id]

    @rule(free=frees())
    def pick_matches_scan(self, free):
        assert self.q.pick(free) == self.scan(free)
        fitting = [u for u in sorted(self.model, key=self.order_key) if free.contains(self.model[u][1])]
        assert self.q.pick_all(free) == fitting

    @invariant()
    def consistent(self):
        if self.q is None:
            return
        self.q.check_invariants()
        assert len(self.q) == len(self.model)
        assert list(self.q) == sorted(self.model, key=self.order_key)
        for unit_id, (priority, slot, submitted, granted) in self.model.items():
            assert self.q.info(unit_id) == WaitingUnit(unit_id, priority, slot, submitted, granted)
        # least(): the floor passive scheduling asks first -- the kind-by-kind minimum of the waiting slots
        least = self.q.least()
        if not self.model:
            assert least is None
        else:
            slots = [slot.millis() for _, slot, _, _ in self.model.values()]
            kinds = set().union(*slots)
            floor = {kind: min(s.get(kind, 0) for s in slots) for kind in kinds}
            assert least == {kind: amount for kind, amount in floor.items() if amount > 0}


TestWaitingQueueMachine = WaitingQueueMachine.TestCase


class ManySizesMachine(WaitingQueueMachine):
    """The same, with slot sizes drawn from a wide grid so the k-d layout is
    rebuilt and garbage-collected along the way."""

    @rule(unit_id=st.integers(0, 400).map(lambda i: f"w{i}"), priority=st.integers(0, 50),
          cpus=st.integers(1, 64), mem=st.integers(1, 64))
    def add_wide(self, unit_id, priority, cpus, mem):
        slot = Resources(cpus=cpus / 4, mem=mem * 128)
        if unit_id in self.model:
            return
        self.q.add(unit_id, priority, slot, self.seq)
        self.model[unit_id] = [priority, slot, self.seq, 0]
        self.seq += 1

    @rule(cpus=st.integers(0, 64), mem=st.integers(0, 64))
    def pick_wide(self, cpus, mem):
        free = Resources(cpus=cpus / 4, mem=mem * 128)
        assert self.q.pick(free) == self.scan(free)


TestManySizesMachine = ManySizesMachine.TestCase
TestManySizesMachine.settings = settings(stateful_step_count=120)
