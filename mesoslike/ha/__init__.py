"""High availability: ``zk://`` addresses, leader election, leader detection
and the registry in ZooKeeper (see docs/ha.rst).

:mod:`mesoslike.ha.url` is pure and imported eagerly. :mod:`mesoslike.ha.zookeeper`
is the only module that imports kazoo; its names are loaded on first use, so
parsing an address never needs kazoo.
"""

from __future__ import annotations

import importlib
from typing import Any

from mesoslike.ha.url import ZkUrl, is_zk_url, parse_master_address

__all__ = [
    "ZkUrl", "is_zk_url", "parse_master_address",
    # from mesoslike.ha.zookeeper, loaded lazily:
    "ZooKeeperError", "RegistryError", "FencingError", "connect", "MasterContender", "LeaderDetector",
    "ZooKeeperRegistry", "FencedRegistryStore",
]

_ZOOKEEPER_NAMES = frozenset(__all__[3:])


def __getattr__(name: str) -> Any:
    # PEP 562: import kazoo only when a ZooKeeper name is actually used.
    if name in _ZOOKEEPER_NAMES:
        return getattr(importlib.import_module("mesoslike.ha.zookeeper"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
