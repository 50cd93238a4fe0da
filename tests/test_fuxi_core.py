"""The Fuxi scheduler core, sans I/O: offers in, grants and commands out."""

import pytest

from mesoslike import Offer, Resources
from mesoslike.clock import FakeClock
from mesoslike.frameworks.fuxi.core import (
    WAIT_ALL_OR_NOTHING,
    WAIT_BLACKLIST,
    WAIT_LOWER_PRIORITY,
    WAIT_QUOTA,
    DeclineOffers,
    FuxiCore,
    FuxiError,
    KillSlot,
    LaunchSlots,
    ReviveOffers,
    SlotGranted,
    SlotRevoked,
    SuppressOffers,
)
from mesoslike.frameworks.fuxi.model import JobSpec, Locality, UnitSpec

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
SLOT = "cpus:1;mem:100"


def offers(*hosts, res="cpus:4;mem:4096", room=None, tag=""):
    return [Offer(f"o-{h}{tag}", f"a-{h}", h, R(res), {"room": room or ("er1" if i % 2 else "er0")})
            for i, h in enumerate(hosts)]


def unit(name="su", slots=1, slot=SLOT, **kwargs):
    return UnitSpec(name, slots, R(slot), **kwargs)


def job(*units, name="j", **kwargs):
    return JobSpec(name, units or (unit(),), **kwargs)


def grants(out):
    return [c.slot for c in out if isinstance(c, SlotGranted)]


def hosts(out):
    return sorted(s.hostname for s in grants(out))


def kinds(out, kind):
    return [c for c in out if isinstance(c, kind)]


@pytest.fixture
def clock():
    return FakeClock()


# ------------------------------------------------------------- seed 000
SEED_UNIT = unit(slots=5, locality=[Locality.machine(f"M{i}") for i in range(1, 6)] + [Locality.cluster(5)])


def test_seed_000_one_slot_on_each_preferred_machine(clock):
    core = FuxiCore(clock=clock)
    core.submit(job(SEED_UNIT))
    out = core.on_offers(offers("M1", "M2", "M3", "M4", "M5", "M6", "M7"))
    assert hosts(out) == ["M1", "M2", "M3", "M4", "M5"]


def test_seed_000_with_m3_blacklisted_four_on_the_others_and_one_elsewhere(clock):
    core = FuxiCore(clock=clock, global_blacklist=["M3"])
    core.submit(job(SEED_UNIT))
    out = core.on_offers(offers("M1", "M2", "M3", "M4", "M5", "M6", "M7"))
    placed = hosts(out)
    assert placed[:4] == ["M1", "M2", "M4", "M5"] and placed[4] in ("M6", "M7")
