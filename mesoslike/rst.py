"""reStructuredText the code renders for the docs (tables of its state
machines: docs/ha.rst, docs/architecture.rst), so that the docs show what
the code has — tests compare them."""

from __future__ import annotations

import textwrap
from typing import Sequence

__all__ = ["simple_table"]


def simple_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], last_width: int = 64) -> str:
    """An RST simple table; the last column wraps at ``last_width``."""
    lasts = [textwrap.wrap(cells[-1], last_width) or [""] for cells in rows]
    widths = [max(len(cells[i]) for cells in [header, *rows]) for i in range(len(header) - 1)]
    widths.append(max([len(header[-1])] + [len(part) for parts in lasts for part in parts]))
    rule = "  ".join("=" * width for width in widths)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()
    lines = [rule, line(header), rule]
    for cells, parts in zip(rows, lasts):
        lines.append(line([*cells[:-1], parts[0]]))
        lines += [line([""] * (len(cells) - 1) + [part]) for part in parts[1:]]
    return "\n".join([*lines, rule]) + "\n"
