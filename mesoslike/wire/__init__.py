"""The wire layer: the schema and codec machinery every protocol is built on
(:mod:`.schema`, :mod:`.codec`), and the master protocol made with it —
its messages (:mod:`.messages`), its public value types (:mod:`.types`) and
its codec (:data:`CODEC`)."""

from typing import TYPE_CHECKING, Any

from mesoslike.wire.codec import Codec, WireError
from mesoslike.wire.schema import Schema

if TYPE_CHECKING:
    from mesoslike.wire.codec import CODEC, decode, encode
    from mesoslike.wire.messages import MESSAGE_TYPES, PROTOCOL_VERSION, SCHEMA
    from mesoslike.wire.types import (
        TERMINAL_STATES,
        AgentInfo,
        CommandURI,
        ExecutorInfo,
        Filters,
        FrameworkInfo,
        HealthCheck,
        HTTPCheck,
        Label,
        MasterInfo,
        Offer,
        Operation,
        OperationType,
        TaskInfo,
        TaskState,
        TaskStatus,
        TCPCheck,
    )

#: the master protocol's names and the module each comes from, imported on first use (PEP 562): a process
#: that speaks another protocol on the same machinery (a Fuxi worker) does not import the master's
_MASTER_PROTOCOL = {**dict.fromkeys(("CODEC", "decode", "encode"), "mesoslike.wire.codec"),
                    **dict.fromkeys(("MESSAGE_TYPES", "PROTOCOL_VERSION", "SCHEMA"), "mesoslike.wire.messages")}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(_MASTER_PROTOCOL.get(name, "mesoslike.wire.types")), name)
    globals()[name] = value
    return value


__all__ = ["WireError", "Codec", "Schema", "CODEC", "SCHEMA", "decode", "encode", "MESSAGE_TYPES", "PROTOCOL_VERSION",
           "TERMINAL_STATES", "AgentInfo", "Filters", "FrameworkInfo", "Label", "MasterInfo", "Offer", "TaskInfo", "TaskState",
           "TaskStatus", "HealthCheck", "HTTPCheck", "TCPCheck", "CommandURI",
           "ExecutorInfo", "Operation", "OperationType"]
