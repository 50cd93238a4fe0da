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


def test_the_shared_empty_mapping_of_machines_refuses_every_write():
    """Machines with no slots or reservations share one empty dict (a first
    batch of 100,000 makes no two per machine); a write to it would put an
    entry on every such machine, so it raises instead."""
    from mesoslike_frameworks.fuxi.books import NO_ENTRIES, Machine

    machine, other = Machine("a1", "h1", "er0"), Machine("a2", "h2", "er0")
    assert machine.slots is NO_ENTRIES and other.holds is NO_ENTRIES
    for write in (lambda: NO_ENTRIES.__setitem__("s", 1), lambda: NO_ENTRIES.setdefault("s", 1),
                  lambda: NO_ENTRIES.update(s=1), lambda: NO_ENTRIES.__ior__({"s": 1}),
                  lambda: NO_ENTRIES.__delitem__("s"), NO_ENTRIES.clear, NO_ENTRIES.popitem):
        with pytest.raises(TypeError):
            write()
    assert not NO_ENTRIES and NO_ENTRIES.get("s") is None and NO_ENTRIES.pop("s", None) is None
