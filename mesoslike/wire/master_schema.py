"""The master protocol's :class:`~mesoslike.wire.schema.Schema`, version
:data:`PROTOCOL_VERSION`: its messages are declared in
:mod:`mesoslike.wire.messages` and, those no scheduler uses (made when a
process first needs one), :mod:`mesoslike.wire.cluster_messages`; both
import the schema from here. Pure."""

from __future__ import annotations

from mesoslike.wire.schema import Schema

__all__ = ["PROTOCOL_VERSION", "SCHEMA", "MESSAGE_TYPES", "message"]

PROTOCOL_VERSION = 1

#: the master protocol; its codec is :data:`mesoslike.wire.codec.CODEC`
SCHEMA = Schema("master", PROTOCOL_VERSION)
#: TYPE -> message class
MESSAGE_TYPES: dict[str, type] = SCHEMA.types
#: class decorator: register a message class under its ``TYPE``
message = SCHEMA.message
