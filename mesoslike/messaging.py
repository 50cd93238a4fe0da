"""What a framework author needs to define a protocol of their own (public
API, ``docs/framework-api.rst``): the schema and codec machinery that the
master protocol is built on, so that the framework's messages are declared
once, checked field by field, versioned, and fail with the one error type.

::

    from typing import Annotated, ClassVar
    import msgspec
    from mesoslike.messaging import Codec, Range, Schema

    SCHEMA = Schema("my service", version=1)

    @SCHEMA.message
    class Resize(msgspec.Struct, frozen=True):
        TYPE: ClassVar[str] = "RESIZE"
        workers: Annotated[int, Range(min=0)]

    CODEC = Codec(SCHEMA, max_message_size=1024 * 1024)

A message class is a frozen ``msgspec.Struct`` (built, encoded and decoded
in C; its checks in ``__post_init__``, run on decoding too; not
``omit_defaults``: a message writes every field), as the master protocol's
and the executor channel's are, or a frozen attrs class (its validators
run on decoding too), which the codec takes alike.
A :class:`~mesoslike.transport.Server` or :class:`~mesoslike.transport.Client`
built with ``codec=CODEC`` then sends and receives these messages.
Pure: no I/O.
"""

from mesoslike.wire.codec import DEFAULT_MAX_MESSAGE_SIZE, Codec, WireError
from mesoslike.wire.schema import Items, Range, Schema

__all__ = ["Schema", "Codec", "WireError", "Range", "Items", "DEFAULT_MAX_MESSAGE_SIZE"]
