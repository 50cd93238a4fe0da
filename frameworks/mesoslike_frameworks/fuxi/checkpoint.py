"""The AppMaster's checkpoint on disk: a snapshot and a journal of changes.

Writing the whole job (:meth:`~.appmaster_core.AppMasterCore.snapshot`,
O(instances)) after every loop turn that changed it made an instance's end
cost O(instances): 18 ms at 100,000 instances (issue 14). Now a turn
appends the core's :meth:`~.appmaster_core.AppMasterCore.journal` records
— O(what changed) — to a journal next to the snapshot, one JSON array a
line, with one ``fsync`` for the turn; when the journal has grown bigger
than the snapshot it is *compacted*: a new snapshot is written and the
journal starts again empty. Recovery is the snapshot plus a replay of the
journal (docs/fuxi-jobs.rst, "Checkpoints").

Files, for ``--snapshot PATH``:

``PATH``
    the snapshot (JSON), written atomically (a temporary file, fsync,
    rename); it names its journal's *generation* (``"journal": N``).
``PATH.journal``
    a first line ``["journal", N]``, then one record a line. A journal whose
    generation is not the snapshot's is left over from before a compaction
    (the snapshot already holds it) and is not replayed. It is replaced, not
    truncated, on compaction: a crash between the two files leaves either
    the old pair or the new snapshot with a journal it ignores.

Both files are hostile input: a snapshot that is not a JSON object is set
aside (``.corrupt``); a journal line cut short by a crash (the last one,
without its newline) is ignored; any other line that is not a record ends
the replay there, with an error logged and the rest set aside in
``PATH.journal.corrupt``. The AppMaster then starts with a compaction, so
nothing is appended after a damaged tail.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from pathlib import Path
from typing import Any, Callable

from mesoslike_frameworks.fuxi import appmaster_core as amc

__all__ = ["Checkpoint", "Write", "Writer", "write_snapshot", "read_snapshot", "JOURNAL_SUFFIX", "MIN_COMPACT_BYTES"]

log = logging.getLogger("mesoslike_frameworks.fuxi.appmaster")

JOURNAL_SUFFIX = ".journal"
#: a journal smaller than this is never compacted (a tiny job's snapshot is smaller than a few records)
MIN_COMPACT_BYTES = 64 * 1024
#: bytes of one journal line read at most (a record is well under 1 KiB; a longer line is not one)
MAX_LINE = 64 * 1024


def write_snapshot(path: Path, snapshot: dict) -> int:
    """Write ``snapshot`` as JSON to ``path`` atomically (a temporary file
    in the same directory, flushed, then renamed over ``path``). Bytes written."""
    data = _encode(snapshot)
    _replace(path, data)
    return len(data)


#: compact JSON; one encoder for every record (``json.dumps`` with separators makes an encoder a call: a third of
#: what encoding a turn's records cost)
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _encode(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


def read_snapshot(path: Path) -> dict | None:
    """The snapshot at ``path``; None if there is none. A file that is not
    a JSON object is set aside (``.corrupt``) and ignored, with an error logged."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        snapshot = json.loads(text)
        if not isinstance(snapshot, dict):
            raise ValueError(f"a snapshot must be a JSON object, got {type(snapshot).__name__}")
        return snapshot
    except ValueError as exc:
        log.error("snapshot %s is unusable (%s): starting afresh", path, exc)
        os.replace(path, path.with_name(path.name + ".corrupt"))
        return None


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class Write:
    """What one save writes, encoded: the journal records of a turn (or of
    the turns a write in flight let pile up) and, when they make the journal
    outgrow the snapshot (or after a failed write, alone), a whole snapshot
    of the next generation (a compaction)."""

    __slots__ = ("journal", "records", "snapshot")

    def __init__(self, *, journal: bytes = b"", records: int = 0, snapshot: bytes | None = None) -> None:
        self.journal, self.records, self.snapshot = journal, records, snapshot


class Checkpoint:
    """The snapshot at ``path`` and its journal (module docstring). Not
    thread-safe: the AppMaster's loop owns it, and a :class:`Writer`'s
    thread may carry out its writes one at a time while the loop prepares
    none.

    :meth:`restore` builds the core from them; :meth:`save` appends a
    turn's records (one write, one fsync) and compacts when the journal
    outgrows the snapshot, which keeps the bytes written per change
    O(1) amortised: a compaction writes s bytes after at least s bytes of
    records. A save is two halves: :meth:`prepare` takes the core's
    changes and encodes them (the core's thread), :meth:`write` puts them
    on disk (any thread). ``counters``: records, bytes and fsyncs written,
    compactions."""

    def __init__(self, path: Path, *, min_compact_bytes: int = MIN_COMPACT_BYTES) -> None:
        self.path = Path(path)
        self.journal_path = self.path.with_name(self.path.name + JOURNAL_SUFFIX)
        self.min_compact_bytes = min_compact_bytes
        self.generation = 0
        self.snapshot_bytes = 0
        self.journal_bytes = 0
        self._journal: Any = None              # the open journal file (append), None until needed
        self._whole = False                    # the next save writes a snapshot (after a failed write)
        self.counters = {"records": 0, "journal_bytes": 0, "snapshot_bytes": 0, "fsyncs": 0, "compactions": 0}

    # ------------------------------------------------------------ reading
    def restore(self, job_id: str, job: Any, clock: Any) -> amc.AppMasterCore:
        """The core as the files leave it, then a compaction (a fresh
        snapshot, an empty journal). A snapshot of another job, or a
        damaged one, is set aside and the job starts afresh; a journal
        record the core refuses ends the replay there."""
        snapshot = read_snapshot(self.path)
        records = self._read_journal(snapshot)
        try:
            core = self._core(job_id, job, clock, snapshot, records)
        except amc.AppMasterError as exc:      # another job's snapshot, or a damaged one
            log.error("snapshot %s refused (%s): starting afresh", self.path, exc)
            if self.path.exists():
                os.replace(self.path, self.path.with_name(self.path.name + ".corrupt"))
            snapshot = None
            core = amc.AppMasterCore(job_id, job, clock)
        if snapshot is not None or records:
            log.info("job %s: resumed from the snapshot %s and %d journal record(s)", job_id, self.path,
                     len(records))
        try:
            self.compact(core)
        except OSError as exc:
            log.error("cannot write the snapshot %s (%s): trying again at the next change", self.path, exc)
            self._whole = True
        return core

    def _core(self, job_id: str, job: Any, clock: Any, snapshot: dict | None,
              records: list) -> amc.AppMasterCore:
        try:
            return amc.AppMasterCore(job_id, job, clock, snapshot=snapshot, journal=records)
        except amc.JournalError as exc:
            log.error("journal %s: %s; replaying the %d record(s) before it", self.journal_path, exc, exc.valid)
            return amc.AppMasterCore(job_id, job, clock, snapshot=snapshot, journal=records[:exc.valid])

    def _read_journal(self, snapshot: dict | None) -> list:
        """The records of the journal that goes with ``snapshot`` (module docstring)."""
        generation = snapshot.get("journal", 0) if snapshot is not None else 0
        self.generation = generation if type(generation) is int else 0
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        if lines[-1]:
            log.warning("journal %s: the last record was cut short (%d bytes); ignored", self.journal_path,
                        len(lines[-1]))
        lines.pop()                            # b"" after the last newline, or the cut record
        records = []
        for n, line in enumerate(lines):
            try:
                if len(line) > MAX_LINE:
                    raise ValueError(f"{len(line)} bytes")
                record = json.loads(line)
            except ValueError as exc:
                record = exc
            if n == 0:
                if record != ["journal", self.generation]:
                    log.info("journal %s is not of the snapshot's generation %d: ignored (the snapshot holds it)",
                             self.journal_path, self.generation)
                    return []
                continue
            if not isinstance(record, list):
                log.error("journal %s: line %d is not a record (%s); the rest (%d lines) set aside in %s.corrupt",
                          self.journal_path, n + 1, str(record)[:200], len(lines) - n, self.journal_path.name)
                try:
                    self.journal_path.with_name(self.journal_path.name + ".corrupt").write_bytes(b"\n".join(lines[n:]))
                except OSError as exc:
                    log.error("cannot set the rest aside: %s", exc)
                break
            records.append(record)
        return records

    # ------------------------------------------------------------ writing
    def save(self, core: amc.AppMasterCore) -> None:
        """Append the core's changes since the last save (one write, one
        fsync) — a whole snapshot instead when the journal outgrew the
        snapshot. Raises OSError if the disk refuses; the next save then
        writes a whole snapshot, so nothing the core handed over is lost."""
        write = self.prepare(core)
        if write is not None:
            self.write(write)

    def prepare(self, core: amc.AppMasterCore) -> Write | None:
        """The core's changes since the last save, encoded: its journal
        records — and, when they make the journal outgrow the snapshot, a
        whole snapshot of the next generation to write after them — or only
        that snapshot when the last write failed; None if nothing changed.
        Takes the records from the core: the caller writes what it gets
        (:meth:`write`) before it prepares again."""
        if self._whole:
            core.journal()                     # all in the snapshot
            return Write(snapshot=self._next_snapshot(core))
        records = core.journal()
        if not records:
            return None
        data = ("\n".join(map(_ENCODER.encode, records)) + "\n").encode()
        compact = self.journal_bytes + len(data) > max(self.snapshot_bytes, self.min_compact_bytes)
        return Write(journal=data, records=len(records), snapshot=self._next_snapshot(core) if compact else None)

    def _next_snapshot(self, core: amc.AppMasterCore) -> bytes:
        snapshot = core.snapshot()
        snapshot["journal"] = self.generation + 1
        return _encode(snapshot)

    def write(self, write: Write) -> None:
        """Put a prepared write on disk: its records appended with one
        fsync, then its snapshot if it has one (a compaction: the snapshot
        written atomically, then a new empty journal). Raises OSError if the
        disk refuses; the next :meth:`prepare` is then a whole snapshot."""
        if write.journal:
            try:
                self._append(write.journal)
            except OSError:
                self._whole = True
                raise
            self.counters["records"] += write.records
        if write.snapshot is not None:
            self._compact(write.snapshot)

    def _append(self, data: bytes) -> None:
        if self._journal is None:
            self._journal = open(self.journal_path, "ab")
        self._journal.write(data)
        self._journal.flush()
        os.fsync(self._journal.fileno())
        self.journal_bytes += len(data)
        self.counters["journal_bytes"] += len(data)
        self.counters["fsyncs"] += 1

    def compact(self, core: amc.AppMasterCore) -> None:
        """A whole snapshot of the next generation, then an empty journal of
        it. O(instances), once per journal's worth of records."""
        core.journal()                         # all in the snapshot below
        self._compact(self._next_snapshot(core))

    def _compact(self, snapshot: bytes) -> None:
        self._whole = True
        generation = self.generation + 1
        _replace(self.path, snapshot)
        self.close()
        header = _encode(["journal", generation]) + b"\n"
        _replace(self.journal_path, header)
        self.generation, self.snapshot_bytes, self.journal_bytes = generation, len(snapshot), len(header)
        self.counters["snapshot_bytes"] += len(snapshot)
        self.counters["fsyncs"] += 2
        self.counters["compactions"] += 1
        self._whole = False

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None


class Writer:
    """A thread of its own that carries out a :class:`Checkpoint`'s writes,
    one at a time, so that the AppMaster's loop goes on — takes results,
    hands out instances — while the disk syncs (the fsync blocked the loop:
    half of an AppMaster's time, and every worker whose result came
    meanwhile waited for it).

    :meth:`submit` a prepared write when the last one is done
    (:attr:`busy` is False); :meth:`outcome` says, once, how it went; ``wake``
    is called from the thread when a write ended (the loop's waker)."""

    #: :meth:`outcome` while the write is in flight
    BUSY = object()

    def __init__(self, checkpoint: Checkpoint, wake: Callable[[], None]) -> None:
        self.checkpoint = checkpoint
        self.busy = False
        self._wake = wake
        self._todo: queue.SimpleQueue[Write | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[OSError | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="fuxi-checkpoint", daemon=True)
        self._thread.start()

    def submit(self, write: Write) -> None:
        if self.busy:
            raise RuntimeError("a checkpoint write is in flight: one at a time")
        self.busy = True
        self._todo.put(write)

    def outcome(self) -> object:
        """:attr:`BUSY` while the write is in flight; then, once, None (it is
        on disk) or the OSError it failed with. None when there is none."""
        if not self.busy:
            return None
        try:
            result = self._done.get_nowait()
        except queue.Empty:
            return self.BUSY
        self.busy = False
        return result

    def wait(self, timeout: float) -> object:
        """:meth:`outcome`, waiting up to ``timeout`` seconds for the write in flight."""
        if not self.busy:
            return None
        try:
            result = self._done.get(timeout=timeout)
        except queue.Empty:
            return self.BUSY
        self.busy = False
        return result

    def _run(self) -> None:
        while (write := self._todo.get()) is not None:
            try:
                self.checkpoint.write(write)
                result: OSError | None = None
            except OSError as exc:
                result = exc
            self._done.put(result)
            self._wake()

    def close(self, timeout: float = 5.0) -> None:
        """Let the write in flight end (up to ``timeout`` s), then stop the thread."""
        self._todo.put(None)
        self._thread.join(timeout)
