"""pymesos's own pieces of the shim: the dict shapes themselves are Mesos's
v1 JSON (:mod:`mesoslike.v1`, shared with the master's and agent's v1 HTTP
APIs); here are what only pymesos has — its master address forms, its
default failover timeout, addict's ``Dict`` — and the error's pymesos name.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any, Callable

from mesoslike import ConfigError
from mesoslike.v1 import (EXECUTOR_VARIABLE, MAX_LAUNCH_SIZE, TASK_VARIABLE, Message, ShapeError, agent_message,
                          decode_data, encode_data, executor_info, executor_message, executor_task_message,
                          filters_from, framework_message, id_message, known_state, labels_message,
                          master_info_message, offer_id_list, offer_message, operations_from, resources_from,
                          resources_message, status_from_executor, status_from_message, status_message, task_info,
                          value_of)
from mesoslike.v1 import framework_info as _framework_info
from mesoslike import FrameworkInfo

__all__ = [
    "PymesosCompatError", "Message", "encode_data", "decode_data", "id_message", "value_of", "offer_id_list",
    "offer_message", "status_message", "status_from_message", "filters_from", "framework_info", "master_address",
    "master_info_message", "task_info", "executor_info", "resources_from", "resources_message", "addict_class",
    "known_state", "labels_message", "executor_message", "framework_message", "agent_message",
    "executor_task_message", "status_from_executor", "operations_from", "TASK_VARIABLE", "EXECUTOR_VARIABLE",
    "MAX_LAUNCH_SIZE", "PYMESOS_FAILOVER_TIMEOUT",
]

#: a pymesos dict that is malformed, or asks for what mesoslike does not do (docs/framework-api.rst,
#: "pymesos compatibility"): the v1 shapes' error, by the shim's name
PymesosCompatError = ShapeError

#: pymesos fills in this failover timeout when the framework dict has none
PYMESOS_FAILOVER_TIMEOUT = 100.0
#: the port of a pymesos-style master address without one (``"host"``)
DEFAULT_MESOS_PORT = 5050


def framework_info(framework: object) -> FrameworkInfo:
    """A pymesos framework dict as ``FrameworkInfo``; without
    ``failover_timeout`` it is 100 s, as pymesos makes it."""
    return _framework_info(framework, PYMESOS_FAILOVER_TIMEOUT)


def master_address(master: str) -> str:
    """pymesos's master forms as mesoslike's: ``host:port`` (``host`` alone
    means port 5050) becomes ``tcp://host:port``; ``zoo://`` is ``zk://``;
    ``tcp://`` and ``zk://`` are kept."""
    if not isinstance(master, str) or not master.strip():
        raise ConfigError(f"bad master address {master!r}: expected HOST:PORT, tcp://HOST:PORT or zk://HOSTS/PATH")
    master = master.strip()
    if master.startswith(("tcp://", "zk://")):
        return master
    if master.startswith("zoo://"):
        return "zk://" + master[len("zoo://"):]
    if "://" in master:
        raise ConfigError(f"bad master address {master!r}: expected HOST:PORT, tcp://HOST:PORT or zk://HOSTS/PATH")
    if ":" not in master:
        master = f"{master}:{DEFAULT_MESOS_PORT}"
    return "tcp://" + master



def addict_class() -> Callable[[Message], Any]:
    """addict's ``Dict`` (for ``use_addict=True``), with a clear error without it."""
    try:
        from addict import Dict
    except ImportError:
        raise PymesosCompatError("use_addict=True needs the addict package (pip install addict)") from None
    return Dict


