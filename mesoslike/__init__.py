"""mesoslike: a Mesos-style two-level cluster manager with Fuxi scheduling semantics.

The package is layered (see ``docs/architecture.rst``): a pure, deterministic
core (``resources``, ``clock``, ``fairness``, ``allocator``) that never does I/O,
then the wire codec, the edges (ZeroMQ, ZooKeeper), the runtimes and the CLI.
"""

__version__ = "0.1.0"

from mesoslike.clock import Clock, FakeClock, SystemClock  # noqa: E402
from mesoslike.errors import ConfigError, MesoslikeError, ResourcesError  # noqa: E402
from mesoslike.resources import Resources  # noqa: E402
from mesoslike.wire.types import (  # noqa: E402
    Filters,
    FrameworkInfo,
    MasterInfo,
    Offer,
    TaskInfo,
    TaskState,
    TaskStatus,
)

__all__ = [
    "__version__", "Clock", "SystemClock", "FakeClock", "MesoslikeError", "ConfigError", "Resources",
    "ResourcesError", "Filters", "FrameworkInfo", "MasterInfo",
    "Offer", "TaskInfo", "TaskState", "TaskStatus", "Scheduler", "SchedulerDriver", "DriverStatus",
]

_DRIVER_NAMES = ("Scheduler", "SchedulerDriver", "DriverStatus")


def __getattr__(name: str):
    # the driver pulls in zmq; `import mesoslike` for the core alone must not
    if name in _DRIVER_NAMES:
        from mesoslike import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'mesoslike' has no attribute {name!r}")
