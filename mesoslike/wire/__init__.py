"""The wire protocol: message schema (:mod:`.messages`), public value types
(:mod:`.types`) and the pure codec (:mod:`.codec`)."""

from mesoslike.wire.codec import WireError, decode, encode
from mesoslike.wire.messages import MESSAGE_TYPES, PROTOCOL_VERSION
from mesoslike.wire.types import (
    TERMINAL_STATES,
    AgentInfo,
    Filters,
    FrameworkInfo,
    MasterInfo,
    Offer,
    TaskInfo,
    TaskState,
    TaskStatus,
)

__all__ = ["WireError", "decode", "encode", "MESSAGE_TYPES", "PROTOCOL_VERSION", "TERMINAL_STATES", "AgentInfo",
           "Filters", "FrameworkInfo", "MasterInfo", "Offer", "TaskInfo", "TaskState", "TaskStatus"]
