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


def test_anything_with_now_is_a_clock_and_nothing_else_is():
    # as a runtime-checkable Protocol has it (mesoslike.clock defines it without importing typing)
    class Sundial:
        def now(self) -> float:
            return 12.0

    assert isinstance(Sundial(), Clock)
    assert not isinstance(object(), Clock) and not isinstance(12.0, Clock)
