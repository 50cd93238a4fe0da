"""The master: the sans-I/O core, its public views, and the runtime."""

from mesoslike.master.core import MasterCore, Send
from mesoslike.master.records import MasterConfig

__all__ = ["MasterCore", "MasterConfig", "Send"]
