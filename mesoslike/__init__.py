"""mesoslike: a Mesos-style two-level cluster manager with Fuxi scheduling semantics.

The package is layered (see ``docs/architecture.rst``): a pure, deterministic
core (``resources``, ``clock``, ``fairness``, ``allocator``) that never does I/O,
then the wire codec, the edges (ZeroMQ, ZooKeeper), the runtimes and the CLI.
"""

__version__ = "0.1.0"

#: typing.TYPE_CHECKING without importing typing (with re, contextlib and warnings ~19 M instructions, ~7 ms: a
#: fifth of a Fuxi worker's start, which imports this package for its clock; mypy takes the name for True)
TYPE_CHECKING = False

from mesoslike.clock import Clock, FakeClock, SystemClock  # noqa: E402
from mesoslike.errors import ConfigError, MesoslikeError, ResourcesError  # noqa: E402

if TYPE_CHECKING:   # the names __getattr__ below loads on first use, for type checkers
    from mesoslike.resources import Resources
    from mesoslike.attributes import Attribute
    from mesoslike.driver import DriverStatus, Scheduler, SchedulerDriver
    from mesoslike.executor import Executor, ExecutorDriver
    from mesoslike.ha import MasterContender, ZkUrl, ZooKeeperError, ZooKeeperRecordStore
    from mesoslike.locator import make_locator, resolve_leader
    from mesoslike.wire.types import (
        CommandURI,
        ContainerInfo,
        ContainerStatus,
        DockerInfo,
        ExecutorInfo,
        Filters,
        FrameworkInfo,
        HealthCheck,
        HTTPCheck,
        Image,
        Label,
        MasterInfo,
        Offer,
        Operation,
        OperationType,
        Launch,
        Reserve,
        Secret,
        SecretReference,
        Unreserve,
        TaskInfo,
        TaskState,
        TaskStatus,
        TCPCheck,
        Volume,
        VolumeSource,
    )

__all__ = [
    "__version__", "Clock", "SystemClock", "FakeClock", "MesoslikeError", "ConfigError", "Resources",
    "ResourcesError", "Filters", "FrameworkInfo", "MasterInfo", "Label", "Attribute",
    "Offer", "Operation", "OperationType", "Launch", "Reserve", "Unreserve", "TaskInfo", "TaskState", "TaskStatus", "HealthCheck", "HTTPCheck", "TCPCheck", "CommandURI", "Scheduler", "SchedulerDriver", "DriverStatus",
    # custom executors (docs/framework-api.rst, "Custom executors")
    "ExecutorInfo", "Executor", "ExecutorDriver",
    # containers, volumes and secrets (docs/containers.rst)
    "ContainerInfo", "ContainerStatus", "DockerInfo", "Image", "Volume", "VolumeSource", "Secret", "SecretReference",
    # high availability for a framework of its own (docs/framework-api.rst, "A highly available framework")
    "ZkUrl", "ZooKeeperError", "MasterContender", "ZooKeeperRecordStore", "make_locator", "resolve_leader",
]

#: names loaded on first use, and the module each comes from: the driver pulls in
#: zmq, the ZooKeeper names kazoo, the message types the whole wire codec
#: (attrs, msgspec, msgpack); `import mesoslike` for the core alone must not,
#: nor must a command that uses none of them (`mesoslike run --help`); nor
#: does a process that never parses resources (a Fuxi worker, 16 a job) pay for
#: their parser (its regular expressions, difflib)
_LAZY = {"Resources": "mesoslike.resources", "Executor": "mesoslike.executor", "ExecutorDriver": "mesoslike.executor",
         "Scheduler": "mesoslike.driver", "SchedulerDriver": "mesoslike.driver", "DriverStatus": "mesoslike.driver",
         "ZkUrl": "mesoslike.ha", "ZooKeeperError": "mesoslike.ha", "MasterContender": "mesoslike.ha",
         "ZooKeeperRecordStore": "mesoslike.ha", "make_locator": "mesoslike.locator",
         "resolve_leader": "mesoslike.locator", "Attribute": "mesoslike.attributes",
         **dict.fromkeys(["CommandURI", "ContainerInfo", "ContainerStatus", "DockerInfo", "ExecutorInfo",
                          "Filters", "FrameworkInfo", "HealthCheck", "HTTPCheck", "Image", "Label",
                          "MasterInfo", "Offer", "Operation", "OperationType", "Launch", "Reserve", "Secret",
                          "SecretReference", "Unreserve", "TaskInfo", "TaskState", "TaskStatus", "TCPCheck",
                          "Volume", "VolumeSource"],
                         "mesoslike.wire.types")}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value   # once: the next lookup is an ordinary attribute
        return value
    raise AttributeError(f"module 'mesoslike' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
