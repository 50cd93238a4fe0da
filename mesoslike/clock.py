"""Clocks injected into the core, so that the core never reads the time itself.

The core only ever asks ``clock.now()`` for a monotonic number of seconds.
Production code passes :class:`SystemClock`; tests pass :class:`FakeClock` and
move time by hand, which makes timeouts and filters deterministic.
"""

from __future__ import annotations

import math
import time

#: typing.TYPE_CHECKING without importing typing (a Fuxi worker imports this module: mesoslike/__init__.py)
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Protocol, runtime_checkable

    @runtime_checkable
    class Clock(Protocol):   # what the type checker sees of the class below
        def now(self) -> float: ...
else:
    class _HasNow(type):
        def __instancecheck__(cls, instance: object) -> bool:   # as a runtime-checkable Protocol's
            return hasattr(instance, "now")

    class Clock(metaclass=_HasNow):
        """Anything with ``now() -> float``: monotonic seconds from an arbitrary
        origin. Only differences between two readings are meaningful.

        (Type checkers see a runtime-checkable ``typing.Protocol``; at run
        time an ``isinstance`` check asks the same — has it ``now`` — with
        no import of ``typing``.)"""

        #: a protocol, never constructed (what typing.Protocol sets: tools that list the public API read it)
        _is_protocol = True

        def now(self) -> float: ...


class SystemClock:
    """The real monotonic clock (``time.monotonic``)."""

    def __init__(self) -> None:
        # each instance reads the builtin itself, not this method: the clock is read several times a task in
        # each process of the control plane, and a Python frame a read cost as much again (docs/performance.rst,
        # ctl29o). The method stays the class's documented ``now()`` (a builtin has no signature to inspect).
        self.now = time.monotonic   # type: ignore[method-assign]

    def now(self) -> float:
        """Monotonic seconds (``time.monotonic()``)."""
        return time.monotonic()

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A clock that only moves when told to.

    >>> clock = FakeClock()
    >>> clock.advance(5.0)
    >>> clock.now()
    5.0
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward. Moving backwards would break monotonicity, so a
        negative or non-finite step raises ``ValueError``."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"FakeClock.advance needs a finite step >= 0, got {seconds!r}")
        self._now += seconds

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r})"
