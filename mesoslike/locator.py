"""Where is the leading master? A fixed ``tcp://`` address, or whoever leads
the ZooKeeper group of a ``zk://`` URL.

Agents, scheduler drivers and ``mesoslike state`` take either form. A
locator answers ``current()`` — the leader's ``tcp://`` address, or None
while there is no leader — and calls ``on_change`` (from another thread)
when the answer changes, so the owner can wake its loop and reconnect. The
ZooKeeper side lives in :mod:`mesoslike.ha` (the only place kazoo is
imported) and is loaded only for ``zk://`` addresses.
"""

from __future__ import annotations

from typing import Callable, Protocol

from mesoslike.ha.url import ZkUrl, parse_master_address

__all__ = ["MasterLocator", "StaticLocator", "make_locator", "check_master_address", "resolve_leader"]


class MasterLocator(Protocol):
    def current(self) -> str | None:
        """The leading master's ``tcp://HOST:PORT``, or None if unknown."""

    def close(self) -> None:
        """Stop following the leader."""


class StaticLocator:
    """A master given as ``tcp://HOST:PORT``: it never moves."""

    def __init__(self, address: str) -> None:
        self.address = address

    def current(self) -> str | None:
        return self.address

    def close(self) -> None:
        pass


class ZooKeeperLocator:
    """Follows the leader of a ZooKeeper group (``zk://...``)."""

    def __init__(self, url: ZkUrl, on_change: Callable[[], None] | None = None, timeout: float = 10.0) -> None:
        from mesoslike.ha.zookeeper import LeaderDetector  # kazoo only when asked for

        self.url = url
        self._on_change = on_change or (lambda: None)
        self._detector = LeaderDetector(url, self._changed)
        self._detector.start(timeout=timeout)

    def _changed(self, leader: dict | None) -> None:
        self._on_change()

    def current(self) -> str | None:
        leader = self._detector.leader()
        return leader.get("address") if leader else None

    def leader_info(self) -> dict | None:
        return self._detector.leader()

    def wait_for_leader(self, timeout: float) -> str:
        """The leader's address, waiting up to ``timeout`` seconds for one
        (ZooKeeperError after that)."""
        return self._detector.wait_for_leader(timeout)["address"]

    def close(self) -> None:
        self._detector.stop()


def check_master_address(master: str) -> str:
    """Validate ``tcp://HOST:PORT`` or ``zk://hosts/path`` (ConfigError if
    neither) and return it unchanged; no connection is made."""
    parse_master_address(master)
    return master


def make_locator(master: str, on_change: Callable[[], None] | None = None, timeout: float = 10.0) -> MasterLocator:
    """A locator for ``master``; for ``zk://`` this connects to ZooKeeper
    (a clear error if it cannot within ``timeout`` seconds)."""
    parsed = parse_master_address(master)
    if isinstance(parsed, ZkUrl):
        return ZooKeeperLocator(parsed, on_change, timeout)
    return StaticLocator(parsed)


def resolve_leader(master: str, timeout: float = 10.0) -> str:
    """The leading master's ``tcp://`` address now, waiting up to ``timeout``
    seconds for one to be elected (a ``MesoslikeError`` if none is)."""
    parsed = parse_master_address(master)
    if not isinstance(parsed, ZkUrl):
        return parsed
    locator = ZooKeeperLocator(parsed, timeout=timeout)
    try:
        return locator.wait_for_leader(timeout)
    finally:
        locator.close()
