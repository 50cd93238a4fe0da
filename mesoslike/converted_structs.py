"""Frozen ``msgspec.Struct`` value types whose fields are converted and
checked when a caller makes one, and by the codec when one is decoded —
not by a ``__post_init__`` (:class:`ConvertedWhenMade`). Shared by the wire's
value types (``TaskInfo``, ``FrameworkInfo``, ``AgentInfo``) and the
allocator's ``Offer``, which sit in two layers of the core: this module sits
under both.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Callable

import msgspec

__all__ = ["ConvertedWhenMade", "made_unconverted"]


class ConvertedWhenMade(msgspec.StructMeta):
    """The metaclass of a Struct whose fields are converted and checked by
    its ``_convert`` when it is made by a call (``TaskInfo(...)``, its
    :meth:`replace`, unpickling, the checking decoder), not by a
    ``__post_init__``: msgspec calls ``__post_init__`` for every struct it
    decodes, from C into Python, but never the metaclass. What a decoded
    one needs converted or checked is in its ``__wire_converters__`` (field
    -> converter; ``mesoslike.wire.schema.fields`` reports them), which the
    compiled codec runs after decoding on the fields that are not empty
    (most tasks' URIs, labels, secrets and arguments are): one test each,
    no call (:mod:`mesoslike.wire.compiled`). ``msgspec.structs.replace``
    and ``msgspec.convert`` do not convert: use the class's ``replace``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        made = super().__call__(*args, **kwargs)
        made._convert()
        return made


#: makes a value of a :class:`ConvertedWhenMade` class from fields its maker has converted and checked
#: already, without converting them again (``made_unconverted(Offer, ...)``: the allocator's offers, whose
#: agents' attributes were checked when the agents registered): msgspec's own constructor, in C
made_unconverted: Callable[..., Any] = msgspec.StructMeta.__call__
