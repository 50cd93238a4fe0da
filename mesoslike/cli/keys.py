"""``mesoslike keys``: CURVE certificates for masters, agents, frameworks
and operators (docs/security.rst)."""

from __future__ import annotations

import json
import os
import secrets

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


@keys.command("token")
@click.argument("name")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default="keys", show_default=True,
              help="Where NAME.key is (its path goes in the credentials lines).")
def token(name: str, directory: str) -> None:
    """Print a new HTTP bearer token for the operator NAME, as the lines of
    the credentials file that give it (TOML: paste them, or append them
    with >>). The token is also the comment's first line, for
    MESOSLIKE_TOKEN or --token. Nothing is written: the credentials file
    is the one place it is kept."""
    value = secrets.token_urlsafe(24)
    key = os.path.join(directory, f"{name}.key")
    click.echo(f"# operator {name}'s HTTP bearer token (give it as --token or MESOSLIKE_TOKEN): {value}\n"
               f"[principals.{name}]\n"
               f"key = {json.dumps(key)}\n"
               f'kinds = ["operator"]\n'
               f"token = {json.dumps(value)}")
    if not os.path.exists(key):
        click.echo(f"note: {key} does not exist yet: make it with `mesoslike keys new {name} --dir {directory}`",
                   err=True)
