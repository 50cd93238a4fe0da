"""High availability: ``zk://`` addresses, leader election, leader detection
and the registry in ZooKeeper (see docs/ha.rst).

:mod:`mesoslike.ha.url` is pure and imported eagerly. :mod:`mesoslike.ha.zookeeper`
(election, detection), :mod:`mesoslike.ha.registry_store` (the registry) and
:mod:`mesoslike.ha.record_store` (named, chunked, fenced records: a
framework's hard state) are the only modules that import kazoo; their names
are loaded on first use, so parsing an address never needs kazoo.
"""

from __future__ import annotations

import importlib
from typing import Any

from mesoslike.ha.url import ZkUrl, is_zk_url, parse_master_address

__all__ = [
    "ZkUrl", "is_zk_url", "parse_master_address",
    # loaded lazily from mesoslike.ha.zookeeper and mesoslike.ha.registry_store:
    "ZooKeeperError", "RegistryError", "FencingError", "connect", "MasterContender", "LeaderDetector",
    "ZooKeeperRegistry", "RegistryMirror", "FencedRegistryStore", "ZooKeeperRecordStore",
]

_LAZY = {name: "mesoslike.ha.zookeeper" for name in __all__[3:9]}
_LAZY.update({"ZooKeeperRegistry": "mesoslike.ha.registry_store", "RegistryMirror": "mesoslike.ha.registry_store",
              "FencedRegistryStore": "mesoslike.ha.registry_store",
              "ZooKeeperRecordStore": "mesoslike.ha.record_store"})


def __getattr__(name: str) -> Any:
    # PEP 562: import kazoo only when a ZooKeeper name is actually used.
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
