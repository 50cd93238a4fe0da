"""The one way tests wait: poll a condition until it holds, with a deadline.

Tests never sleep to synchronise with another thread or process, nor sleep
and then assert that nothing happened; they wait for the condition they
rely on (``wait_until``), or drive a ``FakeClock``.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

import pytest

T = TypeVar("T")

#: errors a condition may raise while what it reads is not up yet (an HTTP
#: server still starting, a file still being written, a key not yet present)
TRANSIENT = (OSError, ValueError, KeyError)


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.02,
               diagnostics: Callable[[], str] | None = None,
               transient: tuple[type[BaseException], ...] = TRANSIENT) -> T:
    """Poll ``predicate`` until it returns something truthy; return that.

    Exceptions of the ``transient`` kinds count as "not yet" (the last one is
    shown on failure). After ``timeout`` seconds the test fails naming
    ``what``, with ``diagnostics()`` appended when given."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except transient as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            extra = f"\nlast error: {last_exc!r}" if last_exc else ""
            if diagnostics is not None:
                extra += "\n" + diagnostics()
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}{extra}")
        time.sleep(interval)
