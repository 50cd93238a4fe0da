"""Manifests and indexes (pure): Docker image manifest v2 schema 2 and
manifest lists, OCI image manifests and indexes; picking this machine's
platform out of an index.

Everything here comes from a registry and is hostile until validated:
every field is type-checked, digests must be well formed, sizes and
counts bounded. Schema 1 manifests (signed, deprecated by Docker since
2019) are refused with a message that says so, as are foreign
(non-distributable) layers, which live at URLs outside the registry.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass

from .errors import BAD_IMAGE, TOO_LARGE, UNSUPPORTED, ImageError
from .reference import check_digest

__all__ = ["Descriptor", "Manifest", "Index", "Platform", "parse_manifest", "select_platform", "host_platform",
           "MANIFEST_TYPES", "INDEX_TYPES", "ACCEPT", "LAYER_GZIP", "LAYER_TAR", "LAYER_ZSTD", "layer_compression",
           "DOCKER_MANIFEST", "DOCKER_MANIFEST_LIST", "json_object", "OCI_MANIFEST", "OCI_INDEX", "CONFIG_TYPES"]

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_SCHEMA1 = ("application/vnd.docker.distribution.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v1+prettyjws")
MANIFEST_TYPES = (DOCKER_MANIFEST, OCI_MANIFEST)
INDEX_TYPES = (DOCKER_MANIFEST_LIST, OCI_INDEX)
#: the Accept header of a manifest request: what we can read, best first
ACCEPT = ", ".join((OCI_INDEX, DOCKER_MANIFEST_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
CONFIG_TYPES = ("application/vnd.docker.container.image.v1+json", "application/vnd.oci.image.config.v1+json")
LAYER_GZIP = "gzip"
LAYER_TAR = "tar"
LAYER_ZSTD = "zstd"
#: layer media type -> its compression
_LAYER_TYPES = {
    "application/vnd.docker.image.rootfs.diff.tar.gzip": LAYER_GZIP,
    "application/vnd.docker.image.rootfs.diff.tar": LAYER_TAR,
    "application/vnd.oci.image.layer.v1.tar+gzip": LAYER_GZIP,
    "application/vnd.oci.image.layer.v1.tar": LAYER_TAR,
    "application/vnd.oci.image.layer.v1.tar+zstd": LAYER_ZSTD,
}
_FOREIGN_LAYER_MARKS = ("foreign", "nondistributable")
#: machine names (platform.machine()) -> OCI architecture and variant
_ARCHITECTURES = {"x86_64": ("amd64", ""), "amd64": ("amd64", ""), "aarch64": ("arm64", "v8"),
                  "arm64": ("arm64", "v8"), "armv7l": ("arm", "v7"), "armv6l": ("arm", "v6"), "i686": ("386", ""),
                  "i386": ("386", ""), "ppc64le": ("ppc64le", ""), "s390x": ("s390x", ""),
                  "riscv64": ("riscv64", "")}
#: bounds on what a manifest may list
MAX_INDEX_ENTRIES = 1000
MAX_DESCRIPTOR_SIZE = 1 << 50


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str
    variant: str = ""

    def __str__(self) -> str:
        return f"{self.os}/{self.architecture}" + (f"/{self.variant}" if self.variant else "")


@dataclass(frozen=True)
class Descriptor:
    """What a manifest says of a blob or manifest: its media type, digest
    and size, and (in an index) its platform."""

    media_type: str
    digest: str
    size: int
    platform: Platform | None = None


@dataclass(frozen=True)
class Manifest:
    """An image manifest: the config blob and the layers, bottom first."""

    media_type: str
    config: Descriptor
    layers: tuple[Descriptor, ...]


@dataclass(frozen=True)
class Index:
    """A manifest list / image index: one manifest per platform."""

    media_type: str
    manifests: tuple[Descriptor, ...]


def host_platform(machine: str | None = None) -> Platform:
    """This machine's platform as an OCI index names it (linux/amd64, linux/arm64/v8, ...)."""
    machine = machine or platform.machine()
    architecture, variant = _ARCHITECTURES.get(machine.lower(), (machine.lower(), ""))
    return Platform("linux", architecture, variant)


def layer_compression(media_type: str) -> str:
    """:data:`LAYER_GZIP`, :data:`LAYER_TAR` or :data:`LAYER_ZSTD` for a
    layer's media type (validated by :func:`parse_manifest`)."""
    return _LAYER_TYPES[media_type]


def _bad(message: str) -> ImageError:
    return ImageError(BAD_IMAGE, message)


def json_object(data: bytes, what: str) -> dict:
    """The JSON object of ``data``, or :class:`ImageError` (bad_image) saying ``what`` is not one."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"{what} is not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise _bad(f"{what} is not a JSON object")
    return document


def _string(value: object, what: str, limit: int = 512) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise _bad(f"{what} is not a string of at most {limit} characters")
    return value


def _descriptor(value: object, what: str, *, with_platform: bool = False) -> Descriptor:
    if not isinstance(value, dict):
        raise _bad(f"{what} is not an object")
    media_type = _string(value.get("mediaType"), f"{what}'s mediaType")
    digest = value.get("digest")
    try:
        check_digest(digest)  # type: ignore[arg-type]
    except ImageError:
        raise _bad(f"{what} has no valid digest ({str(digest)[:100]!r})") from None
    size = value.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_DESCRIPTOR_SIZE:
        raise _bad(f"{what} has no valid size ({str(size)[:40]!r})")
    found_platform = None
    if with_platform and isinstance(value.get("platform"), dict):
        given = value["platform"]
        found_platform = Platform(_string(given.get("os"), f"{what}'s os", 64),
                                  _string(given.get("architecture"), f"{what}'s architecture", 64),
                                  _string(given.get("variant", ""), f"{what}'s variant", 64))
    if any(mark in media_type for mark in _FOREIGN_LAYER_MARKS) or value.get("urls"):
        raise ImageError(UNSUPPORTED, f"{what} is a foreign (non-distributable) blob, fetched from URLs outside "
                                      "the registry: not supported")
    return Descriptor(media_type, str(digest), size, found_platform)


def parse_manifest(data: bytes, content_type: str = "", max_layers: int = 127) -> Manifest | Index:
    """The manifest or index in ``data`` (its media type from its own
    ``mediaType``, else the response's ``content_type``, else its shape).
    Raises :class:`ImageError`: bad_image, unsupported, too_large."""
    document = json_object(data, "the manifest")
    content_type = content_type.split(";")[0].strip()
    media_type = document.get("mediaType") or content_type
    if document.get("schemaVersion") == 1 or media_type in DOCKER_SCHEMA1:
        raise ImageError(UNSUPPORTED, "it has a schema 1 manifest (deprecated by Docker since 2019): push it again "
                                      "with a current tool")
    if document.get("schemaVersion") != 2:
        raise _bad(f"unknown manifest schemaVersion {str(document.get('schemaVersion'))[:20]!r}")
    if media_type not in MANIFEST_TYPES + INDEX_TYPES:
        media_type = OCI_INDEX if "manifests" in document else OCI_MANIFEST if "config" in document else media_type
    if media_type in INDEX_TYPES:
        entries = document.get("manifests")
        if not isinstance(entries, list):
            raise _bad("the index has no list of manifests")
        if len(entries) > MAX_INDEX_ENTRIES:
            raise ImageError(TOO_LARGE, f"the index lists {len(entries)} manifests (at most {MAX_INDEX_ENTRIES})")
        return Index(media_type, tuple(_descriptor(entry, f"index entry {number}", with_platform=True)
                                       for number, entry in enumerate(entries)))
    if media_type not in MANIFEST_TYPES:
        raise ImageError(UNSUPPORTED, f"the manifest's media type {str(media_type)[:100]!r} is not an image "
                                      "manifest we read")
    config = _descriptor(document.get("config"), "the config")
    if config.media_type not in CONFIG_TYPES:
        raise ImageError(UNSUPPORTED, f"it is not a container image (its config is {config.media_type!r})")
    layers = document.get("layers")
    if not isinstance(layers, list):
        raise _bad("the manifest has no list of layers")
    if len(layers) > max_layers:
        raise ImageError(TOO_LARGE, f"it has {len(layers)} layers (at most {max_layers})")
    parsed = tuple(_descriptor(layer, f"layer {number}") for number, layer in enumerate(layers))
    for number, layer in enumerate(parsed):
        if layer.media_type not in _LAYER_TYPES:
            raise ImageError(UNSUPPORTED, f"layer {number} has media type {layer.media_type!r}, not a layer we "
                                          f"unpack ({', '.join(sorted(set(_LAYER_TYPES.values())))} tars are)")
    return Manifest(media_type, config, parsed)


def select_platform(index: Index, wanted: Platform) -> Descriptor:
    """The entry of ``index`` for ``wanted`` (os and architecture; the same
    variant first, then one without a variant, then any variant). Raises
    :class:`ImageError` (unsupported) listing what the index has."""
    candidates = [entry for entry in index.manifests
                  if entry.platform is not None and entry.platform.os == wanted.os
                  and entry.platform.architecture == wanted.architecture
                  and entry.media_type in MANIFEST_TYPES + INDEX_TYPES]
    for preferred in (wanted.variant, ""):
        for entry in candidates:
            if entry.platform is not None and entry.platform.variant == preferred:
                return entry
    if candidates:
        return candidates[0]
    available = sorted({str(entry.platform) for entry in index.manifests if entry.platform is not None
                        and entry.platform.os != "unknown"})
    raise ImageError(UNSUPPORTED, f"it has no {wanted.os}/{wanted.architecture} image (it has: "
                                  f"{', '.join(available) or 'no platforms'})")
