"""Preemption's victim order kept between passes (frameworks/mesoslike_frameworks/fuxi/preemption.py,
``VictimOrder``) against a sort of the held slots, through grants, drops, re-adopted ids and passes."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike import Resources
from mesoslike_frameworks.fuxi.books import Slot
from mesoslike_frameworks.fuxi.preemption import VictimOrder

pytestmark = pytest.mark.timeout(120)

ONE = Resources({"cpus": 1})


def slot(number: int, priority: int, granted_at: float) -> Slot:
    return Slot(f"s{number}", "job", "u", "a1", "h1", ONE, priority, "default", granted_at)


def expected(held: dict, granted_now: set) -> list:
    return sorted((s for s in held.values() if s.id not in granted_now),
                  key=lambda s: (-s.priority, -s.granted_at, s.id))


ops = st.lists(st.one_of(
    st.tuples(st.just("grant"), st.integers(1, 12), st.integers(0, 3)),    # slots granted by a pass, priority
    st.tuples(st.just("drop"), st.integers(0, 1000)),
    st.tuples(st.just("adopt"), st.integers(0, 1000), st.integers(0, 3)),  # an id dropped before, held again
    st.tuples(st.just("order"), st.booleans()),                           # asked mid-pass (its grants excluded)
), max_size=80)


@given(ops)
def test_the_kept_order_is_the_sorted_order_of_the_held_slots(plan):
    held: dict[str, Slot] = {}
    order = VictimOrder(held)
    number, now, gone = 0, 0.0, []
    for op in plan:
        if op[0] == "grant":
            now += 1.0
            granted = []
            for i in range(op[1]):
                number += 1
                new = slot(number, (op[2] + i) % 4, now)
                held[new.id] = new
                granted.append(new)
            order.add_many(granted)
        elif op[0] == "drop" and held:
            victim = sorted(held)[op[1] % len(held)]
            gone.append(held.pop(victim))
            order.dropped(gone[-1])
        elif op[0] == "adopt" and gone:
            old = gone[op[1] % len(gone)]
            if old.id not in held:
                again = slot(int(old.id[1:]), op[2], now - 5.0)    # same id, another slot
                held[again.id] = again
                order.add(again)
        elif op[0] == "order":
            granted_now = {s.id for s in held.values() if s.granted_at == now} if op[1] else set()
            got = [s for s in order.order(granted_now) if held.get(s.id) is s]
            assert got == expected(held, granted_now)
            assert len({s.id for s in got}) == len(got)
        order._check()
