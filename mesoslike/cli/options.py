"""Shared option machinery: ``MESOSLIKE_*`` env vars, defaults in ``--help``,
and TOML config files with precedence file < environment < flag."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path
from typing import Callable

import click

__all__ = ["option", "config_option", "logging_option", "die", "client_key_options"]


def option(command: str, *decls: str, **kwargs) -> Callable:
    """A click option with env var ``MESOSLIKE_<COMMAND>_<NAME>`` (or
    ``MESOSLIKE_<NAME>`` when ``command`` is empty) and its default shown."""
    name = next(d for d in decls if d.startswith("--")).lstrip("-").replace("-", "_").upper()
    prefix = f"MESOSLIKE_{command.upper()}_" if command else "MESOSLIKE_"
    kwargs.setdefault("show_default", True)
    return click.option(*decls, envvar=prefix + name, show_envvar=True, **kwargs)


def _load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Turn a TOML file into defaults for the command's options. click ranks
    a ``default_map`` below env vars and flags, which is the precedence we
    want: file < environment < flag."""
    if value is None:
        return
    path = Path(value)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise click.BadParameter(f"no such file: {path}", ctx, param) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"{path} is not valid TOML: {exc}", ctx, param) from None
    own = data.get(ctx.info_name or "")  # the command's own section, if the file has one
    section = own if isinstance(own, dict) else data
    known = {p.name for p in ctx.command.params if p.name}
    defaults = {}
    for key, item in section.items():
        if isinstance(item, dict):
            continue  # another command's section
        name = key.replace("-", "_")
        if name not in known or name == "config":
            raise click.BadParameter(f"{path}: unknown setting {key!r} for `{ctx.info_name}` "
                                     f"(known: {', '.join(sorted(known - {'config'}))})", ctx, param)
        defaults[name] = item
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def config_option(command: str) -> Callable:
    return option(command, "--config", type=click.Path(dir_okay=False), default=None, is_eager=True,
                  expose_value=False, callback=_load_config, show_default="none",
                  help=f"TOML file of settings for this command (a [{command}] table or top-level keys; "
                       "names as the long options). Flags and environment variables win over it.")


def _set_logging(ctx: click.Context, param: click.Parameter, value: str) -> str:
    logging.basicConfig(level=getattr(logging, value.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return value


def logging_option(command: str) -> Callable:
    return option(command, "--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
                  default="warning", expose_value=False, callback=_set_logging, help="How much to log to stderr.")


def client_key_options(fn: Callable) -> Callable:
    """``--key`` and ``--master-key`` of a process that talks to a secured
    master (env ``MESOSLIKE_KEY``, ``MESOSLIKE_MASTER_KEY``; docs/security.rst)."""
    fn = option("", "--master-key", type=click.Path(dir_okay=False), default=None, show_default="none",
                help="The master's public certificate (MASTER.key): talk to that master only.")(fn)
    return option("", "--key", type=click.Path(dir_okay=False), default=None, show_default="none",
                  help="This peer's secret certificate (NAME.key_secret, mode 0600), listed in the master's "
                       "credentials.")(fn)


def die(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)
