"""Shared option machinery: ``MESOSLIKE_*`` env vars, defaults in ``--help``,
and TOML config files with precedence file < environment < flag."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import click
from click.core import ParameterSource


__all__ = ["option", "ConfigOption", "config_option", "logging_option", "configure_logging", "JsonLogFormatter", "die",
           "client_key_options", "timeout_option", "token_option", "CLIENT_TIMEOUT", "exit_when_done", "exit_requested"]

#: ``ctx.meta`` key of the settings a ``--config`` file gave: (path, table or "", {parameter name: key})
_CONFIG_META = "mesoslike.config"


class ConfigOption(click.Option):
    """An option whose bad value, when it came from a ``--config`` file, is
    reported as that file's key (``'port' in FILE: 'fifty' is not ...``)
    rather than as the flag and its environment variable, which the user
    never wrote."""

    def process_value(self, ctx: click.Context, value):
        try:
            return super().process_value(ctx, value)
        except click.BadParameter as exc:
            origin = ctx.meta.get(_CONFIG_META)
            if origin is None or ctx.get_parameter_source(self.name or "") is not ParameterSource.DEFAULT_MAP:
                raise
            path, table, keys = origin
            key = keys.get(self.name or "")
            if key is None:  # a default_map this file did not give
                raise
            where = f"{key!r} in {path}" + (f" (table [{table}])" if table else "")
            raise click.BadParameter(exc.message, ctx, self, param_hint=where) from None


def option(command: str, *decls: str, **kwargs) -> Callable:
    """A click option with env var ``MESOSLIKE_<COMMAND>_<NAME>`` (or
    ``MESOSLIKE_<NAME>`` when ``command`` is empty) and its default shown.
    ``also_envvar``: a further variable, read when the first is not set."""
    # a boolean flag's "--on/--off" pair is named after its first half
    name = next(d for d in decls if d.startswith("--")).partition("/")[0].lstrip("-").replace("-", "_").upper()
    prefix = f"MESOSLIKE_{command.upper()}_" if command else "MESOSLIKE_"
    also = kwargs.pop("also_envvar", None)
    kwargs.setdefault("show_default", True)
    kwargs.setdefault("cls", ConfigOption)
    return click.option(*decls, envvar=[prefix + name, also] if also else prefix + name, show_envvar=True,
                        **kwargs)


def _config_loader(table: str) -> Callable:
    """The ``--config`` callback of a command whose own settings are the
    file's ``[table]`` (dotted for a subcommand: ``[fuxi.serve]``)."""

    def load(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        """Turn a TOML file into defaults for the command's options. click ranks
        a ``default_map`` below env vars and flags, which is the precedence we
        want: file < environment < flag."""
        if value is None:
            return
        import tomllib   # here, not at the top: most runs have no --config

        path = Path(value)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise click.BadParameter(f"no such file: {path}", ctx, param) from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"{path} is not valid TOML: {exc}", ctx, param) from None
        own: object = data  # the command's own table, if the file has one
        for part in table.split("."):
            own = own.get(part) if isinstance(own, dict) else None
        section = own if isinstance(own, dict) else data
        # a setting is named as its long option (``master`` sets --master, whose parameter is master_address)
        known = {opt[2:].replace("-", "_"): p.name for p in ctx.command.params
                 if isinstance(p, click.Option) and p.name and p.name != "config"
                 for opt in p.opts if opt.startswith("--")}
        defaults = {}
        keys = {}
        for key, item in section.items():
            if isinstance(item, dict):
                continue  # another command's table
            name = known.get(key.replace("-", "_"))
            if name is None:
                raise click.BadParameter(f"{path}: unknown setting {key!r} for `{ctx.command_path}` (known: "
                                         f"{', '.join(sorted(k.replace('_', '-') for k in known))})", ctx, param)
            defaults[name] = item
            keys[name] = key
        ctx.default_map = {**(ctx.default_map or {}), **defaults}
        ctx.meta[_CONFIG_META] = (path, table if isinstance(own, dict) else "", keys)

    return load


def config_option(command: str) -> Callable:
    """``--config FILE`` (env ``MESOSLIKE_<COMMAND>_CONFIG``): the file's
    ``[command]`` table (``fuxi_serve``: ``[fuxi.serve]``) or its top-level
    keys become the command's defaults."""
    table = command.replace("_", ".")
    return option(command, "--config", type=click.Path(dir_okay=False), default=None, is_eager=True,
                  expose_value=False, callback=_config_loader(table), show_default="none",
                  help=f"TOML file of settings for this command (a [{table}] table or top-level keys; "
                       "names as the long options). Flags and environment variables win over it.")


#: the attributes every LogRecord has: the rest are the ``extra=`` fields a JSON line carries
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``,
    ``logger``, ``message``, the record's ``extra=`` fields, and
    ``exception`` (its traceback) when there is one — for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str, log_format: str = "text") -> None:
    """Log ``level`` and above (debug, info, notice, warning, error) to stderr
    as text lines or JSON objects (``log_format``: text, json)."""
    from mesoslike.observations import NOTICE   # here: it brings attrs, which `--help` does not need

    logging.addLevelName(NOTICE, "NOTICE")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=logging.getLevelName(level.upper()), handlers=[handler])


def _set_logging(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # both options call this: whichever click handles second sees the other's value
    ctx.meta[f"mesoslike.{param.name}"] = value
    level, log_format = ctx.meta.get("mesoslike.log_level"), ctx.meta.get("mesoslike.log_format")
    if level is not None and log_format is not None:
        configure_logging(level, log_format)
    return value


def logging_option(command: str) -> Callable:
    """``--log-level`` and ``--log-format`` of ``command``."""
    level = option(command, "--log-level", type=click.Choice(["debug", "info", "notice", "warning", "error"]),
                   default="notice", expose_value=False, callback=_set_logging,
                   help="How much to log to stderr: notice says what a user needs (an agent registered, a master "
                        "out of reach); info and debug say more.")
    log_format = option(command, "--log-format", type=click.Choice(["text", "json"]), default="text",
                        expose_value=False, callback=_set_logging,
                        help="text: one readable line per entry; json: one JSON object per line (time, level, "
                             "logger, message and the entry's extra fields).")

    def decorate(fn: Callable) -> Callable:
        return level(log_format(fn))
    return decorate


def client_key_options(fn: Callable) -> Callable:
    """``--key`` and ``--master-key`` of a process that talks to a secured
    master (env ``MESOSLIKE_KEY``, ``MESOSLIKE_MASTER_KEY``; docs/security.rst)."""
    fn = option("", "--master-key", type=click.Path(dir_okay=False), default=None, show_default="none",
                help="The master's public certificate (MASTER.key): talk to that master only.")(fn)
    return option("", "--key", type=click.Path(dir_okay=False), default=None, show_default="none",
                  help="This peer's secret certificate (NAME.key_secret, mode 0600), listed in the master's "
                       "credentials.")(fn)


#: how long a client command (state, task log, task kill, the operator's commands) waits for the master by default (s)
CLIENT_TIMEOUT = 10.0


def timeout_option(command: str, what: str = "the master") -> Callable:
    """``--timeout SECONDS`` of a client command: the same default everywhere (:data:`CLIENT_TIMEOUT`)."""
    return option(command, "--timeout", type=click.FloatRange(min=0, min_open=True), default=CLIENT_TIMEOUT,
                  help=f"Seconds to wait for {what}.")


def token_option(fn: Callable) -> Callable:
    """``--token`` (``MESOSLIKE_TOKEN``): the operator's HTTP bearer token."""
    return option("", "--token", default=None, show_default="none",
                  help="The operator's HTTP bearer token (of the credentials file; `mesoslike local` exports it).")(fn)


def die(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)


#: set by :func:`exit_when_done`
_exit_when_done = False


def exit_when_done() -> None:
    """Say, from a command that has finished all its work — its output
    written, its threads and connections ended (a scheduler driver joined:
    nothing it sent is left queued) — that the process may end as soon as
    the command returns, with its exit status, skipping the interpreter's
    teardown: freeing every module and object a run made took 30-100 ms
    of the end of ``mesoslike run`` (docs/performance.rst, "mesoslike run
    on mesoslike local"). ``atexit`` handlers still run and the standard
    streams are flushed. Only for the command line itself (``main()``
    reading ``sys.argv``): a command invoked in-process (click's
    ``CliRunner``, a program calling ``main(args)``) returns as always."""
    global _exit_when_done
    _exit_when_done = True


def exit_requested() -> bool:
    """Whether the running command called :func:`exit_when_done`."""
    return _exit_when_done
