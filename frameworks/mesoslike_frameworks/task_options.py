"""``mesoslike run``'s task flags turned into the public API's values:
``--uri`` into :class:`CommandURI`, ``--label`` into :class:`Label`, the
``--health-*`` flags into one :class:`HealthCheck` (issue 18 §2, §3, §5b).

Pure (no I/O) and built only on the public API, like the rest of the
bundled frameworks. Every problem raises :class:`TaskOptionError` naming the
flag, so the command line can print it as it is.
"""

from __future__ import annotations

from typing import Iterable

from mesoslike import CommandURI, HealthCheck, HTTPCheck, Label, TCPCheck

__all__ = ["TaskOptionError", "parse_uri", "parse_uris", "parse_label", "parse_labels", "health_check",
           "URI_SETTINGS", "HEALTH_TIMINGS"]

#: the settings a ``--uri`` may end with, as ``,NAME=VALUE``: CommandURI's fields
URI_SETTINGS = ("extract", "executable", "cache", "output_file")
_BOOLEAN_SETTINGS = ("extract", "executable", "cache")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")

#: flag -> the HealthCheck field it sets
HEALTH_TIMINGS = {
    "--health-delay": "delay_seconds",
    "--health-interval": "interval_seconds",
    "--health-timeout": "timeout_seconds",
    "--health-grace-period": "grace_period_seconds",
    "--health-consecutive-failures": "consecutive_failures",
}


class TaskOptionError(ValueError):
    """A task flag that cannot be used; the message names the flag and the value."""


def _boolean(text: str, name: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise TaskOptionError(f"--uri {_preview(text)}: {name}={value!r} is neither true nor false")


def parse_uri(text: str) -> CommandURI:
    """``URI[,extract=BOOL][,executable=BOOL][,cache=BOOL][,output_file=NAME]``
    (Marathon's ``fetch`` fields, Mesos's ``CommandInfo.URI``): the URI up to
    the first comma, then settings (a comma of the URI itself is written
    ``%2C``). Defaults are CommandURI's (``extract`` true, as in Mesos)."""
    flag = "--uri"
    value, *parts = text.split(",")
    settings: dict[str, str] = {}
    for part in parts:
        name, equals, setting = part.partition("=")
        name = name.strip()
        if not equals or name not in URI_SETTINGS:
            raise TaskOptionError(f"{flag} {_preview(text)}: {part!r} is not a setting (NAME=VALUE, NAME one "
                                  f"of {', '.join(URI_SETTINGS)}); write a comma of the URI as %2C")
        if name in settings:
            raise TaskOptionError(f"{flag} {_preview(text)}: {name} is given twice")
        settings[name] = setting.strip()
    fields: dict[str, object] = {name: _boolean(text, name, settings[name])
                                 for name in _BOOLEAN_SETTINGS if name in settings}
    if "output_file" in settings:
        fields["output_file"] = settings["output_file"]
    try:
        return CommandURI(value.strip(), **fields)  # type: ignore[arg-type]
    except ValueError as exc:
        raise TaskOptionError(f"{flag} {_preview(text)}: {exc}") from None


def parse_uris(texts: Iterable[str]) -> list[CommandURI]:
    """Each ``--uri``, in order (the order the agent fetches them in); two
    that would land on the same file of the sandbox are refused."""
    uris = [parse_uri(text) for text in texts]
    seen: set[str] = set()
    for uri in uris:
        name = uri.file_name()
        if name in seen:   # the second would overwrite the first
            raise TaskOptionError(f"--uri: two URIs are fetched as {name!r}: give one an output_file")
        seen.add(name)
    return uris


def parse_label(text: str) -> Label:
    """``KEY=VALUE`` (``KEY`` alone: an empty value, as Mesos allows)."""
    key, _, value = text.partition("=")
    try:
        return Label(key.strip(), value)
    except ValueError as exc:
        raise TaskOptionError(f"--label {_preview(text)}: {exc}") from None


def parse_labels(texts: Iterable[str]) -> list[Label]:
    return [parse_label(text) for text in texts]


def _http(flag: str, text: str) -> HTTPCheck:
    """``PORT[:PATH]`` of ``--health-http``/``--health-https``."""
    port_text, _, path = text.partition(":")
    if not port_text.strip().isdigit():
        raise TaskOptionError(f"{flag} {_preview(text)}: give PORT[:PATH], e.g. 8080:/health")
    try:
        return HTTPCheck(int(port_text), path or "/", scheme="https" if flag.endswith("https") else "http")
    except ValueError as exc:
        raise TaskOptionError(f"{flag} {_preview(text)}: {exc}") from None


def health_check(command: str | None = None, http: str | None = None, https: str | None = None,
                 tcp: str | None = None, timings: dict[str, float | int | None] | None = None
                 ) -> HealthCheck | None:
    """The one health check the ``--health-*`` flags describe, or None.
    ``timings``: flag (a key of :data:`HEALTH_TIMINGS`) -> its value, None
    when not given (then HealthCheck's default, Mesos's, holds)."""
    given = {flag: value for flag, value in (("--health-cmd", command), ("--health-http", http),
                                             ("--health-https", https), ("--health-tcp", tcp))
             if value is not None}
    chosen_timings = {flag: value for flag, value in (timings or {}).items() if value is not None}
    unknown = sorted(set(chosen_timings) - set(HEALTH_TIMINGS))
    if unknown:
        raise TaskOptionError(f"unknown health check setting {unknown[0]}")
    if not given:
        if chosen_timings:
            raise TaskOptionError(f"{sorted(chosen_timings)[0]} needs a health check: give --health-cmd, "
                                  "--health-http, --health-https or --health-tcp")
        return None
    if len(given) > 1:
        raise TaskOptionError(f"a task has one health check: {' and '.join(sorted(given))} were given")
    flag, value = next(iter(given.items()))
    fields = {HEALTH_TIMINGS[name]: item for name, item in chosen_timings.items()}
    try:
        if flag == "--health-cmd":
            if not value.strip():
                raise TaskOptionError("--health-cmd: the command is empty")
            return HealthCheck(HealthCheck.COMMAND, command=value, **fields)  # type: ignore[arg-type]
        if flag == "--health-tcp":
            if not value.strip().isdigit():
                raise TaskOptionError(f"--health-tcp {_preview(value)}: give a PORT, e.g. 8080")
            return HealthCheck(HealthCheck.TCP, tcp=TCPCheck(int(value)), **fields)  # type: ignore[arg-type]
        return HealthCheck(HealthCheck.HTTP, http=_http(flag, value), **fields)  # type: ignore[arg-type]
    except TaskOptionError:
        raise
    except ValueError as exc:
        # a field's bound, named as the flag that set it
        text = str(exc)
        for name, field in HEALTH_TIMINGS.items():
            text = text.replace(f"health_check.{field}", name)
        raise TaskOptionError(text.replace("tcp.port", "--health-tcp port")) from None


def _preview(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
