"""The check that a codec's compiled decoder agrees with its checking one
(test_wire for the master protocol, test_messaging for the Fuxi ones,
test_executors for the executor channel).

decode() runs the compiled decoder (msgspec into the message classes, then
the generated checks of what msgspec does not check) first and falls back to
the checking one, which names the field. The compiled one must never accept
what the checking one refuses, nor build anything else from what both
accept."""

import math

import msgpack

from mesoslike.wire.codec import from_plain, to_plain

#: resources strings and numbers a hostile peer sent (issue 12 §2): each
#: quantity too large, or their sum, or a range bound with hundreds of digits
HOSTILE_RESOURCES = ["cpus:1.7e305;cpus:1.7e305;mem:1024", "cpus:1e306", "cpus:1e308", "cpus:inf", "mem:nan",
                     "cpus:6e14;cpus:6e14", "ports:[1-" + "9" * 400 + "]", "ports:[1-" + "9" * 5000 + "]"]
HOSTILE_NUMBERS = [1.7e305, 1e306, 1e308, -1e308, 2**63, -2**63]

ODD_VALUES = [None, True, False, 0, -1, 2**64 - 1, 1.5, -0.0, math.nan, math.inf, -math.inf, "", "x", "cpus:-1",
              "cpus:2;mem:64", b"\x00", [], [1], ["a"], {}, {"a": 1}, {"a": "b"},  # (msgpack refuses non-string map keys)
              *HOSTILE_RESOURCES, *HOSTILE_NUMBERS]


def assert_the_fast_decoder_agrees_on_any_mutation(codec, example):
    cls = type(example)
    for mutated in _mutations(to_plain(example)):
        checked = _outcome(lambda: from_plain(cls, mutated, cls.TYPE))
        frame = msgpack.packb({"v": codec.schema.version, "type": cls.TYPE, **mutated}, use_bin_type=True)
        fast = _outcome(lambda: codec._decode_compiled(frame))
        if checked[0] == "error":
            assert fast[0] == "error", f"the compiled decoder accepted what the checking one refuses: {mutated!r}"
        elif fast[0] == "ok":
            assert _same(fast[1], checked[1]), mutated
        expected = "error" if len(frame) > codec.max_message_size else checked[0]   # a 5,000-digit value
        assert _outcome(lambda: codec.decode(frame))[0] == expected


def _same(one, other):
    """Equal, a NaN in a document equal to a NaN (the compiled decoder makes its own)."""
    return type(one) is type(other) and (one == other or msgpack.packb(to_plain(one)) == msgpack.packb(to_plain(other)))


def _paths(plain, prefix=()):
    yield prefix
    if isinstance(plain, dict):
        for key, value in plain.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(plain, list):
        for index, value in enumerate(plain):
            yield from _paths(value, prefix + (index,))


def _replaced(plain, path, value):
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(plain, dict):
        return {**plain, head: _replaced(plain[head], rest, value)}
    return [_replaced(item, rest, value) if i == head else item for i, item in enumerate(plain)]


def _outcome(convert):
    try:
        return "ok", convert()
    except Exception as exc:  # noqa: BLE001
        return "error", type(exc).__name__


def _mutations(plain):
    """Every field and item replaced by every odd value, and every field dropped."""
    for path in list(_paths(plain))[1:]:
        parent = _lookup(plain, path[:-1])
        if isinstance(parent, dict):
            yield _replaced(plain, path[:-1], {k: v for k, v in parent.items() if k != path[-1]})
        for value in ODD_VALUES:
            yield _replaced(plain, path, value)


def _lookup(plain, path):
    for key in path:
        plain = plain[key]
    return plain
