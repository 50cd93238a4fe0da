"""The bundled Fuxi-style scheduler (docs/fuxi.rst, docs/fuxi-scheduling.rst)."""

import sys

__all__ = ["DEFAULT_FAILOVER_TIMEOUT", "flush_before_os_exit"]

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
