"""Image references, parsed as Docker parses them (pure).

``busybox`` → registry = the default one, repository ``library/busybox``,
tag ``latest``; ``team/app:1.2``; ``localhost:5000/team/app@sha256:<64 hex>``;
``registry.example.com/app:v1@sha256:…`` (the digest wins over the tag).

The first ``/``-separated component names a registry when it holds a ``.``
or a ``:``, is ``localhost``, or has capitals (as Docker decides); else the
whole name is a repository of the default registry (the agent's
``--docker-registry``). A one-component repository of the default registry,
or of Docker Hub, is an official image: ``library/`` is put before it (so a
mirror of Docker Hub as the default registry works as Docker Hub does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import BAD_NAME, ImageError

__all__ = ["ImageReference", "parse_reference", "parse_registry", "DOCKER_HUB", "DEFAULT_TAG", "DIGEST_ALGORITHMS",
           "check_digest"]

#: Docker Hub's name in references (its API lives at registry-1.docker.io)
DOCKER_HUB = "docker.io"
DEFAULT_TAG = "latest"
#: the longest name (registry and repository) Docker accepts
MAX_NAME_LENGTH = 255
#: digest algorithm -> length of its hex digest
DIGEST_ALGORITHMS = {"sha256": 64, "sha512": 128}

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*\Z")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = re.compile(rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]{{1,5}})?\Z")
_TAG = re.compile(r"[\w][\w.-]{0,127}\Z", re.ASCII)
_DIGEST = re.compile(r"([a-z0-9]+):([0-9a-f]+)\Z")


@dataclass(frozen=True)
class ImageReference:
    """A parsed reference: ``registry`` (host[:port], as written, Docker Hub
    as ``docker.io``), ``repository`` (``library/busybox``), and ``tag``
    and/or ``digest`` (``sha256:<hex>``); at least one of the two."""

    registry: str
    repository: str
    tag: str | None = DEFAULT_TAG
    digest: str | None = None

    @property
    def manifest_reference(self) -> str:
        """What goes after ``/manifests/``: the digest when there is one (it pins the content), else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    @property
    def name(self) -> str:
        """``registry/repository``."""
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def check_digest(digest: str) -> str:
    """``digest`` if it is ``<algorithm>:<hex>`` of a supported algorithm and
    the right length; raises :class:`ImageError` (bad_name) otherwise."""
    found = _DIGEST.match(digest) if isinstance(digest, str) else None
    if found is None:
        raise ImageError(BAD_NAME, f"{digest!r} is not a digest (algorithm:lowercase hex)")
    algorithm, hex_digest = found.groups()
    if algorithm not in DIGEST_ALGORITHMS:
        raise ImageError(BAD_NAME, f"digest algorithm {algorithm!r} is not supported ({', '.join(DIGEST_ALGORITHMS)} are)")
    if len(hex_digest) != DIGEST_ALGORITHMS[algorithm]:
        raise ImageError(BAD_NAME, f"a {algorithm} digest has {DIGEST_ALGORITHMS[algorithm]} hex digits, "
                                   f"{digest!r} has {len(hex_digest)}")
    return digest


def parse_registry(text: str) -> str:
    """A registry as ``host[:port]``; ``index.docker.io`` is Docker Hub
    (``docker.io``). Raises :class:`ImageError` (bad_name)."""
    if not isinstance(text, str) or not _REGISTRY.match(text):
        raise ImageError(BAD_NAME, f"{text!r} is not a registry (host or host:port)")
    port = text.rsplit("]", 1)[-1].partition(":")[2]
    if port and not 0 < int(port) < 65536:
        raise ImageError(BAD_NAME, f"{text!r} has no valid port")
    return DOCKER_HUB if text.lower() == "index.docker.io" else text


def parse_reference(text: str, default_registry: str = DOCKER_HUB) -> ImageReference:
    """Parse an image reference (the module says how). Raises
    :class:`ImageError` of kind bad_name naming ``text`` and what is wrong."""
    try:
        return _parse(text, parse_registry(default_registry))
    except ImageError as exc:
        raise exc.naming(repr(text)[:300]) from None


def _parse(text: str, default_registry: str) -> ImageReference:
    if not isinstance(text, str) or not text:
        raise ImageError(BAD_NAME, "an image name is needed")
    if text != text.strip() or any(ord(c) < 33 or ord(c) > 126 for c in text):
        raise ImageError(BAD_NAME, "a reference has no spaces, control or non-ASCII characters")
    remainder, at, digest = text.partition("@")
    if at:
        check_digest(digest)
    name, tag = remainder, None
    colon = remainder.rfind(":")
    if colon > remainder.rfind("/"):
        name, tag = remainder[:colon], remainder[colon + 1:]
        if not _TAG.match(tag):
            raise ImageError(BAD_NAME, f"{tag!r} is not a tag (letters, digits, _ . -; at most 128, not starting "
                                       "with . or -)")
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.lower() != first):
        registry, repository = parse_registry(first), rest
        official = registry == DOCKER_HUB
    else:
        registry, repository, official = default_registry, name, True
    if not repository:
        raise ImageError(BAD_NAME, "the repository name is empty")
    if repository.lower() != repository:
        raise ImageError(BAD_NAME, "a repository name must be lowercase")
    if not _REPOSITORY.match(repository):
        raise ImageError(BAD_NAME, f"{repository!r} is not a repository name (lowercase letters and digits, "
                                   "separated by . _ __ - or /)")
    if official and "/" not in repository:
        repository = f"library/{repository}"
    if len(registry) + 1 + len(repository) > MAX_NAME_LENGTH:
        raise ImageError(BAD_NAME, f"the name is longer than {MAX_NAME_LENGTH} characters")
    return ImageReference(registry, repository, None if digest and not tag else (tag or "latest"),
                          digest or None)
