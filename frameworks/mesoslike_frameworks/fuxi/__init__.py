"""The bundled Fuxi-style scheduler (docs/fuxi.rst, docs/fuxi-scheduling.rst)."""

import sys

__all__ = ["DEFAULT_FAILOVER_TIMEOUT", "FieldsRepr", "flush_before_os_exit"]

#: the framework's failover timeout when the state is kept (``fuxi serve --work-dir`` or ``--zk``): long
#: enough for a restart or a new leader to take the workers over
DEFAULT_FAILOVER_TIMEOUT = 600.0


def flush_before_os_exit() -> None:
    """What a process leaving with ``os._exit`` (a worker, ``fuxi submit
    --wait``) must not lose: its log's handlers and its standard streams
    flushed (a closed pipe is no reason to stop)."""
    if "logging" in sys.modules:   # (the transport's, when it logged)
        sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


class FieldsRepr:
    """The ``repr`` attrs writes — ``Name(field=value, ...)``, its fields in
    their order, each value's own ``repr`` — for the attrs classes of the
    Fuxi job model and AppMaster core, which are declared with
    ``repr=False`` and this base: attrs compiles a ``__repr__`` for each
    class as it is made (~0.2 ms of CPU a class, ~8 ms of the AppMaster's
    start over its 38 classes then; docs/performance.rst, "Stop 14: the
    AppMaster's start (fuxi29j)"). The messages of the Fuxi protocols
    (:mod:`.protocol`, :mod:`.am_protocol`) are msgspec Structs, whose own
    ``repr`` is this same text, written in C. Values are plain data or these
    classes: no cycles, so no guard against one."""

    __slots__ = ()

    def __repr__(self) -> str:
        cls = type(self)
        fields = ", ".join(f"{field.name}={getattr(self, field.name)!r}"
                           for field in getattr(cls, "__attrs_attrs__") if field.repr)
        return f"{cls.__qualname__.rsplit('>.', 1)[-1]}({fields})"
