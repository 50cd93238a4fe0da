"""The wire layer: the schema and codec machinery every protocol is built on
(:mod:`.schema`, :mod:`.codec`), and the master protocol made with it —
its messages (:mod:`.messages`), its public value types (:mod:`.types`) and
its codec (:data:`CODEC`)."""

from mesoslike.wire.codec import CODEC, Codec, WireError, decode, encode
from mesoslike.wire.messages import MESSAGE_TYPES, PROTOCOL_VERSION, SCHEMA
from mesoslike.wire.schema import Schema
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

__all__ = ["WireError", "Codec", "Schema", "CODEC", "SCHEMA", "decode", "encode", "MESSAGE_TYPES", "PROTOCOL_VERSION",
           "TERMINAL_STATES", "AgentInfo", "Filters", "FrameworkInfo", "Label", "MasterInfo", "Offer", "TaskInfo", "TaskState",
           "TaskStatus", "HealthCheck", "HTTPCheck", "TCPCheck", "CommandURI",
           "ExecutorInfo", "Operation", "OperationType"]
