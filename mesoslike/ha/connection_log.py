"""One log line per ZooKeeper outage, and one when the connection is back.

While its server is down, kazoo retries about once a second and warns at
each attempt (``Connection dropped: socket connection error: Connection
refused``, ``Connection time-out``, ``Transition to CONNECTING``): a master,
agent or Fuxi service without ZooKeeper for ten minutes wrote some 600
such lines to stderr. Each kazoo client gets a :class:`ConnectionLog` as
its logger (kazoo's ``logger=``): an adapter of ``kazoo.client`` that keeps
one client's outage to itself. While the client first connects only errors
pass (the caller raises one clear error instead); once connected, the first
of these warnings of an outage becomes one line, ``lost the ZooKeeper
connection to HOSTS (...); retrying``, the rest are dropped, and
:meth:`ConnectionLog.state_changed` (a kazoo state listener) writes
``ZooKeeper connection to HOSTS back after N s`` when it is. Everything
else (errors, kazoo's info and debug lines) goes to ``kazoo.client`` as
before.

Pure logging: kazoo is not imported here; the state names are kazoo's
``KazooState`` values.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

__all__ = ["ConnectionLog"]

log = logging.getLogger("mesoslike.ha")

#: the starts of kazoo's warnings of a failed connection attempt
_RETRY_WARNINGS = ("Connection dropped", "Connection time-out", "Transition to CONNECTING", "Cannot resolve",
                   "Session has expired")


class ConnectionLog(logging.LoggerAdapter):
    """The logger of one kazoo client (see the module's text)."""

    def __init__(self, hosts: str, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.hosts = hosts
        self._clock = clock
        self._lock = threading.Lock()
        self._connected_once = False
        self._lost_at: float | None = None   # when the current outage began; None while connected
        self._dropped = 0                    # retry warnings dropped in the current outage
        self._expired = False                # the session expired during the current outage

    def log(self, level: int, msg: object, *args: object, **kwargs) -> None:
        if level < logging.WARNING or level >= logging.ERROR:
            super().log(level, msg, *args, **kwargs)
            return
        if not (level == logging.WARNING and isinstance(msg, str) and msg.startswith(_RETRY_WARNINGS)):
            if self._connected_once:
                super().log(level, msg, *args, **kwargs)
            return   # the first connection: the caller reports a failure as one error
        with self._lock:
            if not self._connected_once:
                return
            if self._lost_at is not None:
                self._dropped += 1
                return
            self._lost_at, self._dropped, self._expired = self._clock(), 0, False
        log.warning("lost the ZooKeeper connection to %s (%s); retrying, and saying so once it is back",
                    self.hosts, msg % args if args else msg)

    def state_changed(self, state: str) -> None:
        """A kazoo state listener: ``CONNECTED`` after an outage is the
        line saying it is back; ``LOST`` (the session expired) is noted in it."""
        with self._lock:
            if state == "LOST":
                self._expired = True
                return
            if state != "CONNECTED":
                return
            if not self._connected_once:
                self._connected_once = True
                return
            if self._lost_at is None:
                return
            down_for, retries, expired = self._clock() - self._lost_at, self._dropped, self._expired
            self._lost_at = None
        log.warning("ZooKeeper connection to %s back after %.1f s (%d failed attempts%s)", self.hosts, down_for,
                    retries, "; the session had expired: a new one" if expired else "")
