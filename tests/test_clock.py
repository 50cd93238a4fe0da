import pytest

from mesoslike.clock import Clock, FakeClock, SystemClock

pytestmark = pytest.mark.timeout(10)


def test_fake_clock_moves_only_when_told():
    clock = FakeClock(start=10.0)
    assert clock.now() == 10.0
    clock.advance(2.5)
    assert clock.now() == 12.5
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        clock.advance(float("nan"))


def test_system_clock_is_monotonic_and_both_satisfy_the_protocol():
    clock = SystemClock()
    first = clock.now()
    assert clock.now() >= first
    assert isinstance(clock, Clock)
    assert isinstance(FakeClock(), Clock)
