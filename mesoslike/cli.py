"""The ``mesoslike`` command line (click)."""

from __future__ import annotations

import click

from mesoslike import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="mesoslike")
def main() -> None:
    """mesoslike: a Mesos-style two-level cluster manager with Fuxi scheduling semantics."""


if __name__ == "__main__":  # pragma: no cover
    main()
