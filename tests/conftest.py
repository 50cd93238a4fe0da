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
    their own. Twice a CI run saw every in-process socket stop answering
    from one moment on (its context's I/O thread blocked: one such cause, a
    client's unread monitor, is fixed in mesoslike.transport; another, not
    yet found, struck after tests/test_security_master.py): a context per
    module keeps whatever a module leaves behind from deciding the tests of
    the next. Earlier contexts are left as they are (never terminated: a
    leaked socket would block that)."""
    from mesoslike import transport

    transport._new_context()
    yield
