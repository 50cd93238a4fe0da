"""An image's config blob (pure): what the image says a container runs
(``Env``, ``Entrypoint``, ``Cmd``, ``WorkingDir``, ``User``) and declares
(``Volumes``, ``ExposedPorts``, ``Labels``, ``StopSignal``), and the
digests of its uncompressed layers (``rootfs.diff_ids``), which unpacking
checks.

The config comes from a registry: each field is type-checked and bounded;
strings that will become a process's arguments or environment must not
hold a NUL; paths must be absolute."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import BAD_IMAGE, UNSUPPORTED, ImageError
from .manifest import Platform, json_object
from .reference import check_digest

__all__ = ["ImageConfig", "parse_config"]

MAX_LIST = 10_000
MAX_STRING = 128 * 1024
_ENV_NAME = re.compile(r"[^=\0]+\Z")
_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*(?::[A-Za-z0-9_.][A-Za-z0-9_.-]*)?\Z")
_PORT = re.compile(r"([0-9]{1,5})(?:/(tcp|udp|sctp))?\Z")


@dataclass(frozen=True)
class ImageConfig:
    """The parsed config. ``env`` keeps the image's order (``NAME=value``
    strings, names unique, the last one winning as Docker has it);
    ``entrypoint``/``cmd`` are None when the image gives none (not the same
    as an empty list); ``exposed_ports`` as ``"80/tcp"``."""

    os: str = "linux"
    architecture: str = ""
    env: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    working_dir: str = ""
    user: str = ""
    volumes: tuple[str, ...] = ()
    exposed_ports: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    stop_signal: str = ""
    diff_ids: tuple[str, ...] = ()

    @property
    def environment(self) -> dict[str, str]:
        """``env`` as a mapping."""
        return dict(entry.split("=", 1) for entry in self.env)

    def as_json(self) -> dict:
        """A JSON-able form (for ``/state`` or a launch file)."""
        return {"os": self.os, "architecture": self.architecture, "env": list(self.env),
                "entrypoint": None if self.entrypoint is None else list(self.entrypoint),
                "cmd": None if self.cmd is None else list(self.cmd), "working_dir": self.working_dir,
                "user": self.user, "volumes": list(self.volumes), "exposed_ports": list(self.exposed_ports),
                "labels": dict(self.labels), "stop_signal": self.stop_signal}


def _bad(message: str) -> ImageError:
    return ImageError(BAD_IMAGE, f"its config is refused: {message}")


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_STRING or "\0" in value:
        raise _bad(f"{what} is not a string (at most {MAX_STRING} characters, no NUL)")
    return value


def _strings(value: object, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise _bad(f"{what} is not a list of strings")
    return tuple(_text(item, f"an item of {what}") for item in value)


def _keys(value: object, what: str) -> list[str]:
    """The keys of a Docker "set" (``{"key": {}}``); null is empty."""
    if value is None:
        return []
    if not isinstance(value, dict) or len(value) > MAX_LIST:
        raise _bad(f"{what} is not an object")
    return [_text(key, f"a key of {what}") for key in value]


def _absolute(path: str, what: str) -> str:
    if not path.startswith("/"):
        raise _bad(f"{what} {path[:200]!r} is not an absolute path")
    return path


def _port(text: str) -> str:
    found = _PORT.match(text)
    if found is None or not 0 < int(found.group(1)) < 65536:
        raise _bad(f"ExposedPorts has {text[:50]!r}, not PORT[/tcp|udp|sctp]")
    return f"{int(found.group(1))}/{found.group(2) or 'tcp'}"


def _env(value: object) -> tuple[str, ...]:
    entries = _strings(value, "Env") or ()
    latest: dict[str, str] = {}
    for entry in entries:
        name, equals, _ = entry.partition("=")
        if not equals or not _ENV_NAME.match(name):
            raise _bad(f"Env has {entry[:100]!r}, not NAME=value")
        latest[name] = entry
    return tuple(latest.values())


def parse_config(data: bytes, wanted: Platform | None = None) -> ImageConfig:
    """The config blob ``data``, checked (the module says how); when
    ``wanted`` is given, an image of another os or architecture is refused
    (unsupported) rather than left to fail with "exec format error"."""
    document = json_object(data, "its config")
    os_name = _text(document.get("os", "linux"), "os")
    architecture = _text(document.get("architecture", ""), "architecture")
    if wanted is not None and (os_name != wanted.os or architecture not in ("", wanted.architecture)):
        raise ImageError(UNSUPPORTED, f"it is a {os_name}/{architecture} image; this machine is {wanted}")
    settings = document.get("config")
    if settings is None:
        settings = {}
    if not isinstance(settings, dict):
        raise _bad("config is not an object")
    rootfs = document.get("rootfs")
    if not isinstance(rootfs, dict) or rootfs.get("type") != "layers" or not isinstance(rootfs.get("diff_ids"), list):
        raise _bad("rootfs is not {\"type\": \"layers\", \"diff_ids\": [...]}")
    diff_ids = []
    for diff_id in rootfs["diff_ids"][:MAX_LIST + 1]:
        try:
            diff_ids.append(check_digest(diff_id))
        except ImageError:
            raise _bad(f"rootfs.diff_ids has {str(diff_id)[:100]!r}, not a digest") from None
    working_dir = _text(settings.get("WorkingDir") or "", "WorkingDir")
    user = _text(settings.get("User") or "", "User")
    if user and not _USER.match(user):
        raise _bad(f"User {user[:100]!r} is not USER[:GROUP] (names or numbers)")
    labels = settings.get("Labels") or {}
    if not isinstance(labels, dict) or len(labels) > MAX_LIST:
        raise _bad("Labels is not an object")
    return ImageConfig(
        os=os_name, architecture=architecture, env=_env(settings.get("Env")),
        entrypoint=_strings(settings.get("Entrypoint"), "Entrypoint"), cmd=_strings(settings.get("Cmd"), "Cmd"),
        working_dir=_absolute(working_dir, "WorkingDir") if working_dir else "", user=user,
        volumes=tuple(_absolute(path, "a volume") for path in _keys(settings.get("Volumes"), "Volumes")),
        exposed_ports=tuple(_port(port) for port in _keys(settings.get("ExposedPorts"), "ExposedPorts")),
        labels={_text(key, "a label"): _text(value, "a label's value") for key, value in labels.items()},
        stop_signal=_text(settings.get("StopSignal") or "", "StopSignal"), diff_ids=tuple(diff_ids))
