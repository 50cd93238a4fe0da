"""The master: the sans-I/O core, its public views, and the runtime.

The names below are loaded on first use (PEP 562): a process that needs one
module of this package — the agent's command line reads
:mod:`mesoslike.master.records` for its options — does not import the whole
core (about half a second of CPU).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mesoslike.master.core import MasterCore, Send
    from mesoslike.master.records import MasterConfig

__all__ = ["MasterCore", "MasterConfig", "Send"]

_HOME = {"MasterCore": "mesoslike.master.core", "Send": "mesoslike.master.core",
         "MasterConfig": "mesoslike.master.records"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value   # looked up once
    return value
