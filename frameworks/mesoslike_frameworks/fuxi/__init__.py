"""The bundled Fuxi-style scheduler (docs/fuxi.rst, docs/fuxi-scheduling.rst)."""

__all__ = ["DEFAULT_FAILOVER_TIMEOUT"]

#: the framework's failover timeout when the state is kept (``fuxi serve --work-dir`` or ``--zk``): long
#: enough for a restart or a new leader to take the workers over
DEFAULT_FAILOVER_TIMEOUT = 600.0
