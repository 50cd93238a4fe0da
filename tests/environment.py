"""What a test needs from the machine (root, ZooKeeper, a browser, cgroups...).

Outside CI a test whose needs are not met skips, saying what is missing; under
``CI=true`` it fails instead: CI installs everything (``make test`` as root),
so a missing part there is a broken install step, never a reason to skip.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(message: str) -> NoReturn:
    """Skip the calling test with ``message`` — or fail it under CI=true."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; under CI=true tests must not skip", pytrace=False)
    pytest.skip(message)
