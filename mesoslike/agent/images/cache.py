"""The image cache's bookkeeping (pure): which layers are unpacked and how
large, when each was last used, which images are known (reference →
manifest, config, layers), and the leases that keep layers alive; and the
decision of what to collect.

**Collection.** When the unpacked layers take more than the bound, the
least recently used layers that no lease holds go, oldest first, until
the rest fit (ties broken by digest: a total order). Leased layers are
never collected, so the cache may stay above its bound while tasks use
more than it holds. An image whose layer was collected is forgotten with
it; a config no image names any more goes too.

The index is a JSON document; one read from disk is validated, and an
entry that does not validate is dropped (its layer directory then looks
unknown and is swept), never trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .errors import ImageError
from .reference import check_digest

__all__ = ["LayerEntry", "ImageEntry", "LeaseEntry", "CacheIndex", "plan_collection", "INDEX_VERSION"]

INDEX_VERSION = 1


@dataclass
class LayerEntry:
    """An unpacked layer: bytes on disk, last use (seconds since the epoch),
    its uncompressed digest, how its whiteouts are kept."""

    size: int
    used: float
    diff_id: str = ""
    whiteouts: str = "overlay"


@dataclass
class ImageEntry:
    """A provisioned image: its manifest's digest, its config blob, its layers (bottom first)."""

    manifest: str
    config: str
    layers: list[str]
    used: float


@dataclass
class LeaseEntry:
    """A holder's claim on an image's layers, kept until released;
    ``transient``: a pull's own lease while it runs, which lapses when its
    process dies (the store tells by a lock the pull holds)."""

    image: str
    layers: list[str]
    since: float
    transient: bool = False


@dataclass
class CacheIndex:
    layers: dict[str, LayerEntry] = field(default_factory=dict)
    images: dict[str, ImageEntry] = field(default_factory=dict)
    leases: dict[str, LeaseEntry] = field(default_factory=dict)

    def leased(self) -> set[str]:
        return {digest for lease in self.leases.values() for digest in lease.layers}

    def total_size(self) -> int:
        return sum(entry.size for entry in self.layers.values())

    def forget_layers(self, digests: Iterable[str]) -> list[str]:
        """Drop ``digests`` and the images using them; returns the configs
        no remaining image names."""
        gone = set(digests)
        for digest in gone:
            self.layers.pop(digest, None)
        configs_before = {image.config for image in self.images.values()}
        self.images = {name: image for name, image in self.images.items() if not gone.intersection(image.layers)}
        return sorted(configs_before - {image.config for image in self.images.values()})

    # ------------------------------------------------------------ JSON
    def to_json(self) -> dict:
        return {"version": INDEX_VERSION,
                "layers": {d: vars(e) for d, e in self.layers.items()},
                "images": {n: vars(e) for n, e in self.images.items()},
                "leases": {h: vars(e) for h, e in self.leases.items()}}

    @classmethod
    def from_json(cls, document: object) -> CacheIndex:
        """The index of ``document``; what does not validate is left out."""
        index = cls()
        if not isinstance(document, dict) or document.get("version") != INDEX_VERSION:
            return index
        for digest, value in _table(document, "layers"):
            if _digest(digest) and isinstance(value, dict) and _count(value.get("size")) and _time(value.get("used")):
                index.layers[digest] = LayerEntry(value["size"], float(value["used"]), str(value.get("diff_id", "")),
                                                  "markers" if value.get("whiteouts") == "markers" else "overlay")
        for name, value in _table(document, "images"):
            if (isinstance(value, dict) and _digest(value.get("manifest")) and _digest(value.get("config"))
                    and _digests(value.get("layers")) and _time(value.get("used"))):
                index.images[name] = ImageEntry(value["manifest"], value["config"], list(value["layers"]),
                                                float(value["used"]))
        for holder, value in _table(document, "leases"):
            if isinstance(value, dict) and _digests(value.get("layers")) and _time(value.get("since")):
                index.leases[holder] = LeaseEntry(str(value.get("image", "")), list(value["layers"]),
                                                  float(value["since"]), value.get("transient") is True)
        return index


def _table(document: dict, key: str) -> list[tuple[str, object]]:
    table = document.get(key)
    return [(k, v) for k, v in table.items() if isinstance(k, str)] if isinstance(table, dict) else []


def _digest(value: object) -> bool:
    try:
        check_digest(value)  # type: ignore[arg-type]
        return True
    except ImageError:
        return False


def _digests(value: object) -> bool:
    return isinstance(value, list) and all(_digest(item) for item in value)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _time(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def plan_collection(layers: Mapping[str, LayerEntry], keep: Iterable[str], capacity: int) -> list[str]:
    """The layers to collect so that the rest take at most ``capacity``
    bytes: never one of ``keep`` (leased), least recently used first (the
    module says how). Fewer (all that may go) when the kept ones alone
    exceed the bound."""
    kept = set(keep)
    total = sum(entry.size for entry in layers.values())
    victims = []
    for digest in sorted((d for d in layers if d not in kept), key=lambda d: (layers[d].used, d)):
        if total <= capacity:
            break
        victims.append(digest)
        total -= layers[digest].size
    return victims
