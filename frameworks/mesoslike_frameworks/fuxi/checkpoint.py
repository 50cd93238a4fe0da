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
from pathlib import Path
from typing import Any

from mesoslike_frameworks.fuxi import appmaster_core as amc

__all__ = ["Checkpoint", "write_snapshot", "read_snapshot", "JOURNAL_SUFFIX", "MIN_COMPACT_BYTES"]

log = logging.getLogger("mesoslike_frameworks.fuxi.appmaster")

JOURNAL_SUFFIX = ".journal"
#: a journal smaller than this is never compacted (a tiny job's snapshot is smaller than a few records)
MIN_COMPACT_BYTES = 64 * 1024
#: bytes of one journal line read at most (a record is well under 1 KiB; a longer line is not one)
MAX_LINE = 64 * 1024


def write_snapshot(path: Path, snapshot: dict) -> int:
    """Write ``snapshot`` as JSON to ``path`` atomically (a temporary file
    in the same directory, flushed, then renamed over ``path``). Bytes written."""
    data = json.dumps(snapshot, separators=(",", ":")).encode()
    _replace(path, data)
    return len(data)


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


class Checkpoint:
    """The snapshot at ``path`` and its journal (module docstring). Not
    thread-safe: the AppMaster's loop owns it.

    :meth:`restore` builds the core from them; :meth:`save` appends a
    turn's records (one write, one fsync) and compacts when the journal
    outgrows the snapshot, which keeps the bytes written per change
    O(1) amortised: a compaction writes s bytes after at least s bytes of
    records. ``counters``: records, bytes and fsyncs written, compactions."""

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
        fsync), then compact if the journal outgrew the snapshot. Raises
        OSError if the disk refuses; the next save then writes a whole
        snapshot, so nothing the core handed over is lost."""
        if self._whole:
            self.compact(core)
            return
        records = core.journal()
        if records:
            data = b"".join(json.dumps(record, separators=(",", ":")).encode() + b"\n" for record in records)
            try:
                self._append(data)
            except OSError:
                self._whole = True
                raise
            self.counters["records"] += len(records)
        if self.journal_bytes > max(self.snapshot_bytes, self.min_compact_bytes):
            self.compact(core)

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
        self._whole = True
        core.journal()                         # all in the snapshot below
        generation = self.generation + 1
        snapshot = core.snapshot()
        snapshot["journal"] = generation
        size = write_snapshot(self.path, snapshot)
        self.close()
        header = json.dumps(["journal", generation]).encode() + b"\n"
        _replace(self.journal_path, header)
        self.generation, self.snapshot_bytes, self.journal_bytes = generation, size, len(header)
        self.counters["snapshot_bytes"] += size
        self.counters["fsyncs"] += 2
        self.counters["compactions"] += 1
        self._whole = False

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None
