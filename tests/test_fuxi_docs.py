"""docs/fuxi.rst says what the commands do: its option tables give the
defaults ``--help`` gives (it once said ``fuxi serve`` logs at ``warning``
while ``--help`` said ``notice``)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from mesoslike_frameworks.fuxi.cli import fuxi

pytestmark = pytest.mark.timeout(30)

DOC = Path(__file__).resolve().parents[1] / "docs" / "fuxi.rst"
#: a table row: ``--option`` then its default cell, when that is one literal (``5060``)
ROW = re.compile(r"^``(--[a-z-]+)``\s+``([^`]+)``(?:\s|$)")


def documented_defaults() -> dict[str, str]:
    return {match[1]: match[2] for line in DOC.read_text().splitlines() if (match := ROW.match(line))}


def same(documented: str, default: object) -> bool:
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        try:
            return float(documented) == float(default)
        except ValueError:
            return False
    return documented == str(default)


def test_the_serve_options_table_gives_the_defaults_of_help():
    serve = fuxi.commands["serve"]
    options = {opt: param for param in serve.params if isinstance(param, click.Option) for opt in param.opts}
    documented = documented_defaults()
    assert "--log-level" in documented and "--port" in documented
    wrong = {name: (text, options[name].default) for name, text in documented.items()
             if name in options and not same(text, options[name].default)}
    assert wrong == {}, f"docs/fuxi.rst vs `fuxi serve --help` (documented, actual): {wrong}"
