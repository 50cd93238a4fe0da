"""A large JSON document as a sequence of pieces, byte for byte what
``json.dumps`` would make of it, without ever holding the whole text.

``json.JSONEncoder.iterencode`` streams too, but only through the pure-Python
encoder (the C one is for ``dumps``): about five times slower on a
``/state`` of a million tasks. Here the outer levels (the document's keys,
the elements of its long lists) are written by hand and each element below
them by ``json.dumps`` (the C encoder), re-indented for its depth: with an
indent, ``dumps`` starts every nested line with a newline and ``indent *
level`` spaces, and a JSON string never holds a raw newline, so shifting a
sub-document's newlines by ``indent * depth`` spaces gives the same text as
encoding it in place.

Pieces are about ``size`` characters (a single element larger than that is
one piece), encoded to UTF-8 bytes as ``json.dumps(...).encode()`` would.
"""

from __future__ import annotations

import json
from typing import Iterator

__all__ = ["json_chunks", "CHUNK_CHARS"]

#: the size a piece is cut at (characters)
CHUNK_CHARS = 1 << 20


def json_chunks(document: object, indent: int | None = None, *, size: int = CHUNK_CHARS,
                depth: int = 2) -> Iterator[bytes]:
    """``json.dumps(document, indent=indent).encode()`` in pieces of about
    ``size`` characters. Dicts and lists down to ``depth`` levels are walked
    by hand (memory: one element of that level at a time, plus ``size``);
    below, elements are encoded whole. O(the text's length)."""
    pending: list[str] = []
    held = 0
    for text in _encode(document, indent, 0, depth):
        pending.append(text)
        held += len(text)
        if held >= size:
            yield "".join(pending).encode()
            pending, held = [], 0
    if pending:
        yield "".join(pending).encode()


def _encode(value: object, indent: int | None, level: int, depth: int) -> Iterator[str]:
    if level >= depth or not isinstance(value, (dict, list)) or not value:
        yield _dumps(value, indent, level)
        return
    item_separator = "," if indent is not None else ", "
    inner = "" if indent is None else "\n" + " " * (indent * (level + 1))
    close = "" if indent is None else "\n" + " " * (indent * level)
    if isinstance(value, dict):
        yield "{"
        for number, (key, item) in enumerate(value.items()):
            yield (item_separator if number else "") + inner + _dumps(_key(key), None, 0) + ": "
            yield from _encode(item, indent, level + 1, depth)
        yield close + "}"
    else:
        yield "["
        for number, item in enumerate(value):
            yield (item_separator if number else "") + inner
            yield from _encode(item, indent, level + 1, depth)
        yield close + "]"


def _dumps(value: object, indent: int | None, level: int) -> str:
    text = json.dumps(value, indent=indent)
    if indent is None or level == 0:
        return text
    return text.replace("\n", "\n" + " " * (indent * level))


def _key(key: object) -> str:
    """A dict key as ``json.dumps`` writes it (str, or a number/bool/None made a string)."""
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, (int, float)):
        return json.dumps(key)   # float keys: the same repr dumps uses
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
