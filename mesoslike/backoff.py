"""Retry delays that grow: the one back-off of every retry loop in the core.

A :class:`Backoff` is a policy, not a timer: ``delay(attempt)`` is the wait
before retry number ``attempt`` (0 the first), ``initial`` doubled per attempt
up to ``maximum``, drawn from ``[(1 - jitter) x d, d]`` when there is jitter.
Its user keeps the attempt count (a plain int: thousands of update streams
each keep one) and sets it back to 0 to *reset* — after an answer, or when a
new peer leads. The random draw comes from an injected ``random.Random``, so
the cores stay deterministic under test.

Who uses it, and with what (docs/reliability.rst, "Retries"): the agent's
status update streams and registration, the executor driver's update
answers, refusals and registration, the scheduler driver's subscription,
and the master's retries of a registry write that failed.
"""

from __future__ import annotations

import random

import msgspec

__all__ = ["Backoff"]

#: past this many doublings every delay is ``maximum`` (2.0 ** 1024 would overflow)
_MAX_DOUBLINGS = 1000


class Backoff(msgspec.Struct, frozen=True):
    """Delays ``initial`` doubling up to ``maximum`` (seconds; ``maximum`` may
    be ``math.inf``); with ``jitter`` each is drawn from ``[(1 - jitter) x d, d]``
    so that many peers that lost one master do not retry in lockstep.

    The defaults are the scheduler driver's subscription back-off (public as
    ``mesoslike.driver.Backoff``, docs/framework-api.rst)."""

    initial: float = 0.5
    maximum: float = 10.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ValueError(f"need 0 < initial <= maximum, got {self.initial!r}, {self.maximum!r}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter!r}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait before retry ``attempt`` (0: the first, after the first
        try). With ``rng`` the delay is jittered — one ``rng.uniform`` draw per
        call, even with ``jitter`` 0, so a seeded run draws the same numbers
        whatever the spread; without it ``jitter`` must be 0."""
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt!r}")
        base = self.initial * 2.0 ** (attempt if attempt < _MAX_DOUBLINGS else _MAX_DOUBLINGS)
        if base > self.maximum:
            base = self.maximum
        if rng is not None:
            return base * rng.uniform(1.0 - self.jitter, 1.0)
        if self.jitter:
            raise ValueError("a jittered back-off needs a random.Random to draw from")
        return base
