"""The mesoslike agent: runs the tasks a master sends it.

Layers (``docs/agent.rst``): :mod:`.core` decides (sans I/O),
:mod:`.executor` runs processes, :mod:`.resources_probe` looks at the
machine, and :mod:`.runtime` ties them to the master's socket.
"""

from mesoslike.agent.core import AgentCore

__all__ = ["AgentCore", "AgentRuntime"]


def __getattr__(name: str):
    # the runtime pulls in zmq; importing the pure core must not
    if name == "AgentRuntime":
        from mesoslike.agent.runtime import AgentRuntime
        return AgentRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
