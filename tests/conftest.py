import os

import pytest
from hypothesis import HealthCheck, settings

# Deterministic, bounded property tests in CI; a little more locally if asked.
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="module")
def _a_zeromq_context_per_test_module():
    """Each test module's in-process endpoints share a ZeroMQ context of
    their own. Three CI runs saw every in-process socket stop answering from
    one moment on: the context's I/O thread blocked sending a monitor event
    (a client's monitor never read, and a client dropped unclosed whose
    monitor's reader went first — both fixed in mesoslike.transport, with
    tests in tests/test_transport.py). Should another such block come, a
    context per module keeps it inside the module that caused it, rather
    than failing every later module's tests. Earlier contexts are kept,
    never terminated (that blocks on a socket a test left open)."""
    from mesoslike import transport

    transport._new_context()
    yield
