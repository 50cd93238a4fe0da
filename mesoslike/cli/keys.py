"""``mesoslike keys``: CURVE certificates for masters, agents, frameworks
and operators (docs/security.rst)."""

from __future__ import annotations

import click

from mesoslike.cli.options import die
from mesoslike.errors import MesoslikeError
from mesoslike.transport import new_certificate

__all__ = ["keys"]


@click.group()
def keys() -> None:
    """Make the keys peers authenticate with."""


@keys.command("new")
@click.argument("name")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Where to write NAME.key and NAME.key_secret.")
def new(name: str, directory: str) -> None:
    """Write a CURVE certificate pair: DIR/NAME.key (public: list it in the
    master's credentials file, or give it as --master-key) and
    DIR/NAME.key_secret (secret, mode 0600: give it as --key)."""
    try:
        public, secret = new_certificate(directory, name)
    except MesoslikeError as exc:
        die(str(exc))
    click.echo(f"public key: {public}\nsecret key: {secret} (mode 0600; keep it to its owner)")
