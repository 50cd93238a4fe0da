"""mesoslike: a Mesos-style two-level cluster manager with Fuxi scheduling semantics.

The package is layered (see ``docs/architecture.rst``): a pure, deterministic
core (``resources``, ``clock``, ``fairness``, ``allocator``) that never does I/O,
then the wire codec, the edges (ZeroMQ, ZooKeeper), the runtimes and the CLI.
"""

__version__ = "0.1.0"

from mesoslike.errors import MesoslikeError, ResourcesError  # noqa: E402
from mesoslike.resources import Resources  # noqa: E402

__all__ = ["__version__", "MesoslikeError", "Resources", "ResourcesError"]
