"""Mesos's RecordIO framing (docs/recordio.md of Apache Mesos): every record
is its length in decimal ASCII digits, a line feed, then that many bytes —
``20\\n{"type":"HEARTBEAT"}``. The v1 HTTP APIs stream their events in it.

:func:`encode` frames one record; :class:`RecordDecoder` takes a stream in
pieces of any size (proxies may cut it anywhere) and gives back whole
records. The decoder is bounded: it holds at most one record of
``max_record`` bytes and its header, and a header of more digits than that
bound needs, a record longer than it, or a byte that is not a digit where
the length goes raises :class:`RecordIOError` (the stream is then
unusable: a framing error cannot be skipped). Pure.
"""

from __future__ import annotations

from mesoslike.errors import MesoslikeError

__all__ = ["encode", "RecordDecoder", "RecordIOError", "DEFAULT_MAX_RECORD"]

#: the largest record a decoder takes by default (an event with a 50 MB framework message, base64, fits)
DEFAULT_MAX_RECORD = 96 * 1024 * 1024


class RecordIOError(MesoslikeError, ValueError):
    """A stream that is not RecordIO, or a record beyond the decoder's bound."""


def encode(record: bytes) -> bytes:
    """``record`` framed: ``b"<length>\\n" + record``."""
    return b"%d\n%s" % (len(record), record)


class RecordDecoder:
    """Records from a RecordIO stream fed in pieces (:meth:`feed`). Memory:
    at most ``max_record`` bytes of a record plus its header are held."""

    def __init__(self, max_record: int = DEFAULT_MAX_RECORD) -> None:
        if not isinstance(max_record, int) or max_record < 1:
            raise ValueError(f"a record bound is an integer >= 1, got {max_record!r}")
        self.max_record = max_record
        self._max_digits = len(str(max_record))
        self._buffer = bytearray()
        #: the length of the record being read, once its header is whole
        self._length: int | None = None
        self._broken = ""

    @property
    def buffered(self) -> int:
        """Bytes held for a record not yet whole."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """The records ``data`` completes (perhaps none); RecordIOError if the
        stream is broken (then and for every later call)."""
        if self._broken:
            raise RecordIOError(self._broken)
        records: list[bytes] = []
        view = memoryview(data)
        while view:
            if self._length is None:
                room = self._max_digits + 1 - len(self._buffer)
                end = bytes(view[:room]).find(b"\n")
                if end < 0:
                    self._buffer += view[:room]
                    view = view[room:]
                    self._check_header(complete=False)
                    continue
                self._buffer += view[:end]
                view = view[end + 1:]
                self._length = self._check_header(complete=True)
                self._buffer.clear()
            wanted = self._length - len(self._buffer)
            self._buffer += view[:wanted]
            view = view[wanted:]
            if len(self._buffer) == self._length:
                records.append(bytes(self._buffer))
                self._buffer.clear()
                self._length = None
        return records

    def _check_header(self, complete: bool) -> int:
        header = bytes(self._buffer)
        if not header.isdigit() and (complete or header):
            self._fail(f"a record's length is decimal digits, got {header[:24]!r}")
        if len(header) > self._max_digits:
            self._fail(f"a record's length has more digits than a record of at most {self.max_record} bytes needs")
        if not complete:
            return 0
        length = int(header)
        if length > self.max_record:
            self._fail(f"a record of {length} bytes is longer than the bound of {self.max_record}")
        return length

    def _fail(self, why: str) -> None:
        self._broken = why
        self._buffer.clear()
        raise RecordIOError(why)
