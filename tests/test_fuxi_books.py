"""The Fuxi books' arithmetic (frameworks/mesoslike_frameworks/fuxi/books.py): how many slots a
group's quota holds, counted without making the room."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike import Resources
from mesoslike_frameworks.fuxi.books import how_many, how_many_within

pytestmark = pytest.mark.timeout(120)

amounts = st.dictionaries(st.sampled_from(["cpus", "mem", "gpus"]), st.integers(0, 5000))


@given(amounts, amounts, amounts)
def test_slots_within_a_cap_are_those_of_the_room_between_cap_and_use(cap, used, slot):
    cap, used, slot = (Resources.from_millis({k: v for k, v in d.items() if v}) for d in (cap, used, slot))
    assert how_many_within(cap, used, slot) == how_many(cap.subtract_clamped(used), slot)
