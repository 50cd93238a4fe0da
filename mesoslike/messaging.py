"""What a framework author needs to define a protocol of their own (public
API, ``docs/framework-api.rst``): the schema and codec machinery that the
master protocol is built on, so that the framework's messages are declared
once, checked field by field, versioned, and fail with the one error type.

::

    from typing import Annotated, ClassVar
    import attrs
    from mesoslike.messaging import Codec, Range, Schema

    SCHEMA = Schema("my service", version=1)

    @SCHEMA.message
    @attrs.frozen
    class Resize:
        TYPE: ClassVar[str] = "RESIZE"
        workers: Annotated[int, Range(min=0)]

    CODEC = Codec(SCHEMA, max_message_size=1024 * 1024)

A :class:`~mesoslike.transport.Server` or :class:`~mesoslike.transport.Client`
built with ``codec=CODEC`` then sends and receives these messages.
Pure: no I/O.
"""

from mesoslike.wire.codec import DEFAULT_MAX_MESSAGE_SIZE, Codec, WireError
from mesoslike.wire.schema import Items, Range, Schema

__all__ = ["Schema", "Codec", "WireError", "Range", "Items", "DEFAULT_MAX_MESSAGE_SIZE"]
