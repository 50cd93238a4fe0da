"""Registry credentials from a Docker ``config.json`` (the agent's
``--docker-config``, Mesos's ``--docker_config``).

Only its ``auths`` table is read: keys name registries (``host[:port]``,
with or without ``https://`` and a path — ``https://index.docker.io/v1/``
is Docker Hub), values hold ``auth`` (base64 of ``user:password``) or
``username`` and ``password``. Credential helpers (``credsStore``,
``credHelpers``) and OAuth ``identitytoken`` entries are not run or used.

The file holds passwords: it must be a regular file that no one but its
owner may read or write (mode 0600 or stricter), else it is refused, as
every secret file of mesoslike is. Nothing read from it ever reaches an
error message.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
from dataclasses import dataclass

from .errors import CREDENTIALS, ImageError
from .reference import DOCKER_HUB

__all__ = ["Credential", "DockerConfig", "read_docker_config", "parse_docker_config", "registry_key"]

#: the largest credentials file read
MAX_CONFIG_BYTES = 1 << 20
_HUB_ALIASES = ("index.docker.io", "registry-1.docker.io", "registry.hub.docker.com", DOCKER_HUB)


@dataclass(frozen=True)
class Credential:
    username: str
    password: str

    def __repr__(self) -> str:   # never print a password, even by accident
        return f"Credential(username={self.username!r}, password=<hidden>)"


@dataclass(frozen=True)
class DockerConfig:
    """Credentials by registry (``host[:port]``, Docker Hub as ``docker.io``)."""

    path: str
    credentials: dict[str, Credential]

    def for_registry(self, registry: str) -> Credential | None:
        return self.credentials.get(registry_key(registry))


def registry_key(name: str) -> str:
    """A registry as the table is keyed: no scheme, no path, lowercase
    host, Docker Hub's aliases as ``docker.io``."""
    name = name.strip()
    for scheme in ("https://", "http://"):
        if name.lower().startswith(scheme):
            name = name[len(scheme):]
    name = name.split("/", 1)[0].lower()
    return DOCKER_HUB if name in _HUB_ALIASES else name


def _refuse(path: str, why: str) -> ImageError:
    return ImageError(CREDENTIALS, f"the registry credentials file {path} (--docker-config) {why}")


def read_docker_config(path: str) -> DockerConfig:
    """The credentials of the file ``path``, checked (the module says how).
    Raises :class:`ImageError` of kind credentials."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise _refuse(path, f"cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as source:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise _refuse(path, "is not a regular file")
        if status.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise _refuse(path, f"has mode {stat.S_IMODE(status.st_mode):04o}: others may read it; it must be "
                                f"0600 (chmod 600 {path})")
        data = source.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise _refuse(path, f"is larger than {MAX_CONFIG_BYTES} bytes")
    return parse_docker_config(data, path)


def parse_docker_config(data: bytes, path: str = "config.json") -> DockerConfig:
    """The ``auths`` of a Docker config file's bytes (pure). Entries without
    credentials (an ``identitytoken`` only) are skipped; a malformed file,
    or a malformed ``auth``, is refused."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise _refuse(path, "is not JSON") from None
    if not isinstance(document, dict):
        raise _refuse(path, "is not a JSON object")
    auths = document.get("auths", {})
    if not isinstance(auths, dict):
        raise _refuse(path, "has an 'auths' that is not an object")
    found: dict[str, Credential] = {}
    for registry, entry in auths.items():
        if not isinstance(entry, dict):
            raise _refuse(path, f"has an entry for {registry[:100]!r} that is not an object")
        try:
            credential = _credential(entry)
        except ValueError:
            raise _refuse(path, f"has an 'auth' for {registry[:100]!r} that is not base64 of USER:PASSWORD") from None
        if credential is None:
            continue
        found[registry_key(registry)] = credential
    return DockerConfig(path, found)


def _credential(entry: dict) -> Credential | None:
    username, password = entry.get("username"), entry.get("password")
    if isinstance(username, str) and isinstance(password, str) and username:
        return Credential(username, password)
    encoded = entry.get("auth")
    if not isinstance(encoded, str) or not encoded:
        return None
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise ValueError("not base64 of UTF-8") from None
    username, colon, password = decoded.partition(":")
    if not colon or not username:
        raise ValueError("not USER:PASSWORD")
    return Credential(username, password)
