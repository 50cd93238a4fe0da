"""The agent's checkpoints: what a restarted agent reads to recover.

Everything lives in ``<work_dir>/meta`` (Mesos's ``meta`` directory):

=====================================  =========================================================
``meta/agent.lock``                    held (``flock``) by the agent running on this work dir:
                                       a second agent on it is refused
``meta/agent.pid``                     the running agent's pid and start time (JSON, written by
                                       the executor): the supervisors watch it for
                                       ``--recovery-timeout``
``meta/agent.ckpt``                    the agent's id and the master's receipt for it
                                       (:class:`AgentFile`)
``meta/resources.ckpt``                the dynamic reservations the master made on this agent
                                       (:class:`ReservationsFile`; Mesos's ``meta/resources``)
``meta/tasks.journal``                 the tasks' checkpoints (the core's
                                       :class:`~mesoslike.agent.core.TaskCheckpoint`: the task,
                                       its state, its unacknowledged updates), one record per
                                       change (:class:`TaskJournal`)
``meta/tasks/<framework>/<task>/``     a task's *run directory*: the files its supervisor keeps
                                       (:mod:`.supervisor`)
``meta/trash/``                        run directories of forgotten tasks, being removed by a
                                       background thread (:class:`~.gc.RunDirRemover`)
=====================================  =========================================================

Records and ``agent.ckpt`` are messages of their own small protocol on the
wire machinery (:data:`SCHEMA`, :data:`CODEC`: MessagePack, versioned, every
field checked). ``agent.ckpt`` is written whole — temp file, fsync, rename,
fsync of the directory — so a crash leaves the old version or the new one.

The journal (issue 14: a file per task per update, each with two fsyncs,
held each agent's loop on its disk for most of its time) takes a
:class:`TaskFile` record each time a task's checkpoint changes and a
:class:`ForgetFile` when the task is forgotten; each record *sets* what it
names, so the last one about a task is its checkpoint. After a task's first
(full) record, a change that leaves its framework and TaskInfo as they were
is a :class:`TaskStateFile`: the rest of the checkpoint, over that full
record, which it names by its checksum (the TaskInfo was most of a record's
bytes and encoding). A record is written
(``write``, to the page cache: a killed agent loses nothing) as soon as the
core asks for it, and the journal is fdatasynced once before the loop
turn's messages go to the master (:meth:`TaskJournal.sync`): whatever the
agent reports is on disk first, at one fsync a turn however many tasks
changed in it. Each record is framed with its length, a crc32 and whose
task it is; once the journal has
grown past twice what its live records take (and 1 MiB), it is rewritten
with only those (a new file, fsync, rename, fsync of the directory): each
live task's full record and its latest state record, copied.

The file is written ahead as zeros (:data:`PREALLOCATE` bytes past its
records, whenever a record reaches its end: the first after a start or a
rewrite too) and the records overwrite them in place: a record appended
changes no size, so a
turn's ``fdatasync`` writes the record's blocks alone, not the file's
inode too (on ext4 without a journal, one write to the disk fewer a
turn: ~20 % of the fdatasync's CPU here, docs/performance.rst, "Stop 20:
the agent"). The records end at the first all-zero frame header (a record
always has a key); a record whose checksum fails and whose end, from a
sector's start on, and everything after it are zeros is the last one cut
short by a power loss (its later sectors never reached the disk) and is
dropped as one cut short at the file's end is. A clean stop cuts the
zeros off (:meth:`TaskJournal.close`).

A record that does not check (corrupt, or from an incompatible version) is
reported as a :class:`CheckpointError` naming the journal and the record;
the task it names (if it can be told) is not recovered, and recovery goes on
with the others. A record cut short at the end — a power loss during a
write whose fsync never returned, so nothing depending on it was sent — is
dropped with a warning. Work dirs of agents before the journal, with a
``task.ckpt`` per run directory, are read once and moved into it.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import struct
import zlib
from pathlib import Path
from typing import ClassVar, Iterator, NamedTuple, Sequence, TextIO, TypeVar

import msgspec

from mesoslike.agent.core import TaskCheckpoint
from mesoslike.agent.executor import run_dir_path
from mesoslike.agent.supervisor import write_atomically
from mesoslike.errors import ConfigError, MesoslikeError
from mesoslike.resources import Resources
from mesoslike.wire.codec import Codec, WireError, frame_limit
from mesoslike.wire.schema import Schema
from mesoslike.wire.types import MAX_MESSAGE_SIZE_CEILING, FrameworkInfo, TaskInfo, TaskStatus

__all__ = ["CheckpointStore", "CheckpointError", "AgentFile", "ReservationsFile", "TaskFile", "TaskStateFile", "ForgetFile",
           "TaskJournal", "SCHEMA",
           "CODEC", "TASK_CHECKPOINT", "JOURNAL"]

log = logging.getLogger("mesoslike.agent")

#: the checkpoint files' protocol (its own version: bump it on an incompatible change)
SCHEMA = Schema("agent checkpoint", 1)
#: a run directory's checkpoint in work dirs of agents before the journal (read, never written)
TASK_CHECKPOINT = "task.ckpt"
JOURNAL = "tasks.journal"
#: what a journal begins with (a file that does not is not read as one)
JOURNAL_MAGIC = b"MESOSLIKE-AGENT-JOURNAL-1\n"
#: each record: payload length, crc32 of the key and payload, key length (big endian); then the key
#: ("framework\0task", UTF-8: whose record it is, even when its payload cannot be read) and the payload
_FRAME = struct.Struct(">III")
#: compact once the journal is this many times what its live records take ...
COMPACT_RATIO = 2
#: ... and at least this big
COMPACT_MIN_BYTES = 1024 * 1024
#: zeros written ahead past the records (see the module doc) each time a record reaches the file's end: with it,
#: in its write, and the next fdatasync writes the inode too (once every ~100 tasks). Not at a start or a rewrite:
#: an agent that never runs a task writes none
PREALLOCATE = 256 * 1024
#: the granularity a torn write leaves zeros at (a disk's sector): a record that fails its checksum is one cut
#: short only if its zeros begin at such a boundary
_SECTOR = 512
AGENT_CHECKPOINT = "agent.ckpt"
RESERVATIONS_CHECKPOINT = "resources.ckpt"
AGENT_LOCK = "agent.lock"


@SCHEMA.message
class AgentFile(msgspec.Struct, frozen=True, gc=False):
    """``meta/agent.ckpt``: who this agent is. A frozen Struct, as the
    journal's records (an attrs class before, of the same fields: the same
    bytes)."""

    TYPE: ClassVar[str] = "AGENT"
    agent_id: str
    hostname: str
    #: the master's receipt binding the id to this agent's principal (AGENT_REGISTERED's): shown
    #: when it re-registers, to a master without a registry too (docs/security.rst)
    receipt: str = ""


@SCHEMA.message
class ReservationsFile(msgspec.Struct, frozen=True, gc=False):
    """``meta/resources.ckpt``: the agent's dynamic reservations (a frozen
    Struct; an attrs class before, of the same field: the same bytes)."""

    TYPE: ClassVar[str] = "RESERVATIONS"
    reservations: Resources


@SCHEMA.message
class TaskFile(msgspec.Struct, frozen=True, gc=False):
    """A journal record: the task's checkpoint, whole (also the
    ``meta/tasks/<framework>/<task>/task.ckpt`` of agents before the
    journal). A frozen Struct, as :class:`TaskStateFile` and
    :class:`ForgetFile` (an attrs class before, of the same fields: the same
    bytes): msgspec encodes a Struct in C, an attrs object field by field
    through Python (a :class:`ForgetFile` 2.7 µs as attrs, 0.6 as a Struct)."""

    TYPE: ClassVar[str] = "TASK"
    task: TaskCheckpoint


@SCHEMA.message
class TaskStateFile(msgspec.Struct, frozen=True, gc=False):
    """A journal record: the task's checkpoint but its framework and its
    TaskInfo, which are those of its *base* — the task's last full record
    (:class:`TaskFile`) before it in the journal, named by that record's
    checksum (its frame's crc32). A task's first record is a full one; each
    later change (its state, its updates, an acknowledgement) is one of
    these, which does not encode its TaskInfo and framework again (most of a
    full record's bytes and of its encoding: docs/performance.rst, "Stop 22:
    the agent's journal records (agent22)"). Recovery applies it over the
    base; a state record whose base is not the task's last intact full
    record (missing, damaged, another) leaves the task unrecovered and
    reported, as a damaged record does. A frozen Struct: built in C."""

    TYPE: ClassVar[str] = "TASK_STATE"
    #: the crc32 of the base record's frame (its key and payload, as its header holds it)
    base: int
    state: str
    updates: list[TaskStatus]
    holds_resources: bool
    killing: bool
    kill_why: str
    limitation: str
    limitation_message: str
    healthy: bool | None
    executor_secret_digest: str


@SCHEMA.message
class ForgetFile(msgspec.Struct, frozen=True, gc=False):
    """A journal record: the task is forgotten (its story is told)."""

    TYPE: ClassVar[str] = "FORGET"
    framework_id: str
    task_id: str


#: a task's record holds its unacknowledged updates, with data of up to any --max-message-size
CODEC = Codec(SCHEMA, max_message_size=frame_limit(MAX_MESSAGE_SIZE_CEILING))
R = TypeVar("R")


class CheckpointError(MesoslikeError):
    """A checkpoint file that cannot be read; ``path`` names it."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"checkpoint {path}: {problem}")
        self.path = path
        self.problem = problem


class CheckpointStore:
    """The ``meta`` directory of one agent's work dir (see the module doc).
    Writes raise OSError (a full disk, say); reads raise :class:`CheckpointError`."""

    def __init__(self, work_dir: str | os.PathLike) -> None:
        self.meta = Path(work_dir) / "meta"
        self.tasks_dir = self.meta / "tasks"
        self._lock: TextIO | None = None
        #: the open journal (None until recovery starts it, or after a clear)
        self.journal: TaskJournal | None = None

    # ----------------------------------------------------------- the agent
    def lock(self) -> None:
        """Take the work dir for this process; :class:`ConfigError` if another
        agent runs on it. Held until :meth:`unlock` or the process ends."""
        self.tasks_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.meta / AGENT_LOCK, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ConfigError(f"another agent ({holder}) runs on the work directory {self.meta.parent}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._lock = handle

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing releases the flock
            self._lock = None

    def load_agent(self) -> AgentFile | None:
        """The checkpointed agent, None if there is none."""
        path = self.meta / AGENT_CHECKPOINT
        if not path.exists():
            return None
        return self._decode(path, AgentFile)

    def save_agent(self, agent_id: str, hostname: str, receipt: str = "") -> None:
        """Persist the agent's id and the master's receipt for it; "" forgets
        them (the next start registers anew)."""
        path = self.meta / AGENT_CHECKPOINT
        if not agent_id:
            path.unlink(missing_ok=True)
            return
        self.meta.mkdir(parents=True, exist_ok=True)
        write_atomically(str(path), CODEC.encode(AgentFile(agent_id, hostname, receipt)))

    def load_reservations(self) -> Resources:
        """The checkpointed dynamic reservations (none if never written)."""
        path = self.meta / RESERVATIONS_CHECKPOINT
        if not path.exists():
            return Resources()
        return self._decode(path, ReservationsFile).reservations

    def save_reservations(self, reservations: Resources) -> None:
        """Persist the dynamic reservations whole (temp file, fsync, rename)."""
        self.meta.mkdir(parents=True, exist_ok=True)
        write_atomically(str(self.meta / RESERVATIONS_CHECKPOINT), CODEC.encode(ReservationsFile(reservations)))

    # ------------------------------------------------------------- tasks
    @property
    def journal_path(self) -> Path:
        return self.meta / JOURNAL

    def run_dir(self, framework_id: str, task_id: str) -> Path:
        """``meta/tasks/<framework>/<task>`` (ids made safe as for sandboxes)."""
        return run_dir_path(self.meta.parent, framework_id, task_id)

    def save_task(self, checkpoint: TaskCheckpoint) -> None:
        """Journal the task's checkpoint (written now, on disk after the next :meth:`sync`)."""
        self._open_journal().append_task(checkpoint)

    def save_tasks(self, checkpoints: list[TaskCheckpoint], forgotten: Sequence[TaskKey] = ()) -> None:
        """:meth:`forget_task` of each of ``forgotten``, then :meth:`save_task` of
        each of ``checkpoints``, in one write: all of them journalled, or
        (OSError) none."""
        self._open_journal().append_tasks(checkpoints, forgotten)

    def forget_task(self, framework_id: str, task_id: str) -> None:
        """Journal that the task is forgotten."""
        self._open_journal().append_forget(framework_id, task_id)

    def sync(self) -> bool:
        """Make what was journalled so far durable (one fdatasync, none if
        nothing was written since the last); True if it synced."""
        return self.journal.sync() if self.journal is not None else False

    def run_dirs(self) -> list[Path]:
        """Every task's run directory, in a stable order."""
        if not self.tasks_dir.is_dir():
            return []
        return sorted(task for framework in self.tasks_dir.iterdir() if framework.is_dir()
                      for task in framework.iterdir() if task.is_dir())

    def load_tasks(self) -> tuple[list[TaskCheckpoint], list[CheckpointError]]:
        """Every task checkpointed, and what could not be read: the journal's
        records over the ``task.ckpt`` files of an agent before the journal."""
        tasks: dict[tuple[str, str], TaskCheckpoint] = {}
        errors: list[CheckpointError] = []
        for run_dir in self.run_dirs():
            if (run_dir / TASK_CHECKPOINT).exists():
                try:
                    checkpoint = self.load_task(run_dir)
                except CheckpointError as exc:
                    errors.append(exc)
                    continue
                tasks[checkpoint.framework.id, checkpoint.task.task_id] = checkpoint
        if self.journal_path.exists():
            errors.extend(_replay(self.journal_path, tasks))
        return list(tasks.values()), errors

    def load_task(self, run_dir: Path) -> TaskCheckpoint:
        """The task checkpointed in ``run_dir``'s ``task.ckpt`` (an agent before
        the journal); :class:`CheckpointError` if it is missing or unreadable."""
        path = run_dir / TASK_CHECKPOINT
        record = self._decode(path, TaskFile)
        expected = self.run_dir(record.task.framework.id, record.task.task.task_id)
        if expected != run_dir:
            raise CheckpointError(path, f"holds task {record.task.framework.id}/{record.task.task.task_id}, "
                                        f"which belongs in {expected}")
        return record.task

    def start_journal(self, checkpoints: list[TaskCheckpoint]) -> TaskJournal:
        """A journal of just ``checkpoints`` (what recovery read), durable
        before this returns; the ``task.ckpt`` files it replaces are removed
        and a damaged journal is kept aside as ``tasks.journal.damaged``."""
        self.close_journal()
        self.meta.mkdir(parents=True, exist_ok=True)
        live: dict[TaskKey, bytes] = {}
        bases: dict[TaskKey, _Base] = {}
        for c in checkpoints:
            key = (c.framework.id, c.task.task_id)
            record, crc = _full_record(c)
            live[key] = record
            bases[key] = _Base(c.framework, c.task, crc, record)
        self.journal = TaskJournal._rewrite(self.journal_path, live, bases=bases)
        for run_dir in self.run_dirs():
            (run_dir / TASK_CHECKPOINT).unlink(missing_ok=True)
        return self.journal

    def keep_damaged_journal(self) -> None:
        """Keep the journal as it is, for a human, before it is rewritten."""
        if self.journal_path.exists():
            shutil.copyfile(self.journal_path, self.journal_path.with_name(JOURNAL + ".damaged"))

    def close_journal(self) -> None:
        if self.journal is not None:
            self.journal.close()
            self.journal = None

    def _open_journal(self) -> TaskJournal:
        if self.journal is None:   # the first write since a clear (or of a store not recovered)
            self.journal = self.start_journal([])
        return self.journal

    def clear(self) -> None:
        """Forget everything (``--recover cleanup``, a drained agent): the
        agent id, the journal and every task's run directory."""
        self.save_agent("", "")
        (self.meta / RESERVATIONS_CHECKPOINT).unlink(missing_ok=True)
        self.close_journal()
        self.journal_path.unlink(missing_ok=True)
        shutil.rmtree(self.tasks_dir, ignore_errors=True)

    def _decode(self, path: Path, kind: type[R]) -> R:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CheckpointError(path, f"cannot be read: {exc.strerror or exc}") from None
        if not data:
            raise CheckpointError(path, "is empty (truncated)")
        try:
            record = CODEC.decode(data)
        except WireError as exc:
            raise CheckpointError(path, f"is corrupt or truncated ({exc})") from None
        if not isinstance(record, kind):
            raise CheckpointError(path, f"holds a {getattr(record, 'TYPE', '?')} record, not "
                                        f"{getattr(kind, 'TYPE', kind.__name__)}")
        return record



TaskKey = tuple[str, str]


class TaskJournal:
    """``meta/tasks.journal`` open for appending (see the module doc); made
    by :meth:`CheckpointStore.start_journal`. ``counters``: records and bytes
    written (``state_records``: of them, :class:`TaskStateFile` records),
    fsyncs (of the journal and of the directory), compactions."""

    def __init__(self, path: Path, fd: int, size: int, live: dict[TaskKey, bytes], allocated: int = 0,
                 bases: dict[TaskKey, _Base] | None = None) -> None:
        self.path = path
        self._fd: int | None = fd
        self._size = size   # where the records end (the next one is written there)
        self._allocated = max(size, allocated)   # the file's size: zeros from _size to here
        #: the records of each task not forgotten that a compaction keeps: its full record, and the
        #: latest state record after it if any (which needs that full record before it)
        self._live = live
        self._live_bytes = sum(map(len, live.values()))
        #: each live task's full record in this file: a state record of the task applies over it
        self._bases: dict[TaskKey, _Base] = bases if bases is not None else {}
        self._dirty = False
        self.counters = {"records": 0, "bytes": 0, "fsyncs": 0, "compactions": 0, "state_records": 0}

    @classmethod
    def _rewrite(cls, path: Path, live: dict[TaskKey, bytes], counters: dict[str, int] | None = None,
                 bases: dict[TaskKey, _Base] | None = None) -> TaskJournal:
        """A new journal holding ``live``, durable (fsync, rename, fsync of the directory)."""
        data = JOURNAL_MAGIC + b"".join(live.values())
        write_atomically(str(path), data)
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)   # written at offsets (pwrite): not O_APPEND
        journal = cls(path, fd, len(data), live, bases=bases)
        if counters is not None:
            journal.counters = counters
        journal.counters["fsyncs"] += 2
        return journal

    @property
    def size(self) -> int:
        return self._size

    def append_task(self, checkpoint: TaskCheckpoint) -> None:
        self.append_tasks([checkpoint])

    def append_tasks(self, checkpoints: list[TaskCheckpoint], forgotten: Sequence[TaskKey] = ()) -> None:
        """A forget record of each of ``forgotten``, then a record of each
        checkpoint, in one ``write`` (a system call a record was ~2.5 µs of
        the agent's CPU, five a task): all appended, or (OSError) none — the
        journal cut back to where it was. A checkpoint whose task has a full
        record in this file, of the same framework and TaskInfo, is written
        as a :class:`TaskStateFile` over it; any other as a full record."""
        bases = self._bases
        gone = set(forgotten) if forgotten else ()
        made: dict[TaskKey, _Base] = {}   # full records of this call (a task forgotten here has none before)
        records = [_forget_record(key) for key in forgotten]
        entries: list[tuple[TaskKey, bytes, _Base]] = []
        states = 0
        for checkpoint in checkpoints:
            framework, info = checkpoint.framework, checkpoint.task
            key = (framework.id, info.task_id)
            base = made.get(key) or (bases.get(key) if key not in gone else None)
            if base is not None and (base.framework is framework or base.framework == framework) \
                    and (base.info is info or base.info == info):
                record = _frame(key, CODEC.encode(TaskStateFile(
                    base.crc, checkpoint.state, checkpoint.updates, checkpoint.holds_resources, checkpoint.killing,
                    checkpoint.kill_why, checkpoint.limitation, checkpoint.limitation_message, checkpoint.healthy,
                    checkpoint.executor_secret_digest)))[0]
                entries.append((key, base.record + record, base))
                states += 1
            else:
                record, crc = _frame(key, CODEC.encode(TaskFile(checkpoint)))
                base = made[key] = _Base(framework, info, crc, record)
                entries.append((key, record, base))
            records.append(record)
        if not records:
            return
        self._append(records[0] if len(records) == 1 else b"".join(records), len(records))
        self.counters["state_records"] += states
        live = self._live
        for key in forgotten:
            self._live_bytes -= len(live.pop(key, b""))
            bases.pop(key, None)
        for key, kept, base in entries:
            self._live_bytes += len(kept) - len(live.get(key, b""))
            live[key] = kept
            bases[key] = base

    def append_forget(self, framework_id: str, task_id: str) -> None:
        key = (framework_id, task_id)
        self._append(_forget_record(key))
        self._live_bytes -= len(self._live.pop(key, b""))
        self._bases.pop(key, None)

    def sync(self) -> bool:
        """fdatasync what was appended since the last sync (nothing to do:
        no fsync); then compact if the journal has outgrown its live records."""
        if not self._dirty or self._fd is None:
            return False
        if self._size > max(COMPACT_MIN_BYTES, COMPACT_RATIO * self._live_bytes):
            self._compact()
        else:
            os.fdatasync(self._fd)
            self.counters["fsyncs"] += 1
        self._dirty = False
        return True

    def close(self) -> None:
        """Closed, the zeros written ahead cut off (best effort, not synced): a journal left by an agent
        that stopped is its records alone, as an agent of before the zeros wrote and reads it."""
        if self._fd is not None:
            try:
                if self._allocated > self._size:
                    os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None

    def _append(self, record: bytes, count: int = 1) -> None:
        """Append ``record`` (``count`` records, framed, one after the other): written over the zeros
        after the records; where it reaches past them, with :data:`PREALLOCATE` more zeros after it."""
        if self._fd is None:
            raise OSError(f"the journal {self.path} is closed")
        size = len(record)
        end = self._size + size
        data = record if end <= self._allocated else record + bytes(PREALLOCATE)
        try:
            written = os.pwrite(self._fd, data, self._size)
            if written != len(data):   # a regular file writes short only when its disk is full
                raise OSError(errno.ENOSPC, f"short write to {self.path} ({written} of {len(data)} bytes): "
                                            "no space left on device")
        except OSError:
            try:   # no partial record for a reader to trip on: the file cut back to the records (no zeros left)
                os.ftruncate(self._fd, self._size)
                self._allocated = self._size
            except OSError:
                pass
            raise
        if data is not record:
            self._allocated = end + PREALLOCATE
        self._size = end
        self._dirty = True
        self.counters["records"] += count
        self.counters["bytes"] += size

    def _compact(self) -> None:
        """Replace the journal by its live records (O(live tasks), once per
        journal that has grown to twice that: O(1) per record amortised).
        A task's full record and its latest state record are copied as they
        are (not encoded again): the full record is still its state
        record's base, by the same checksum."""
        self.close()
        counters = self.counters
        counters["compactions"] += 1
        fresh = TaskJournal._rewrite(self.path, self._live, counters, self._bases)
        self._fd, self._size, self._live_bytes = fresh._fd, fresh._size, fresh._live_bytes
        self._allocated = fresh._allocated
        fresh._fd = None


class _Base(NamedTuple):
    """A task's full record in the journal, what its state records are written over."""

    framework: FrameworkInfo
    info: TaskInfo
    #: its frame's checksum, which its state records name
    crc: int
    #: the framed record (what a compaction writes again before the task's latest state record)
    record: bytes


def _frame(key: TaskKey, payload: bytes) -> tuple[bytes, int]:
    """The framed record and its checksum (of the key and payload: the key's crc32 carried on, no copy made)."""
    name = _key_bytes(key)
    crc = zlib.crc32(payload, zlib.crc32(name))
    return b"".join((_FRAME.pack(len(payload), crc, len(name)), name, payload)), crc


def _key_bytes(key: TaskKey) -> bytes:
    return f"{key[0]}\0{key[1]}".encode("utf-8", "surrogatepass")


def _forget_record(key: TaskKey) -> bytes:
    return _frame(key, CODEC.encode(ForgetFile(*key)))[0]


def _task_record(checkpoint: TaskCheckpoint) -> bytes:
    """A full record of ``checkpoint``."""
    return _full_record(checkpoint)[0]


def _full_record(checkpoint: TaskCheckpoint) -> tuple[bytes, int]:
    return _frame((checkpoint.framework.id, checkpoint.task.task_id), CODEC.encode(TaskFile(checkpoint)))


class _Frame(msgspec.Struct, frozen=True, gc=False):
    """A record of the journal as read (:func:`_frames`; never encoded). A
    frozen Struct (an attrs class before): one made a record on recovery,
    ~60 ns against ~460, and its class ~16 µs to make at import against
    ~400 (the module imports no attrs)."""

    number: int
    offset: int
    key: TaskKey | None     # None: not readable
    payload: bytes
    intact: bool            # its checksum matches
    crc: int                # the checksum its header holds


def _frames(data: bytes, path: Path) -> Iterator[_Frame]:
    """The journal's records after its magic, in order, up to the zeros
    written ahead (an all-zero header: a record always has a key); a record
    cut short at the end — past the file's end, or torn (:func:`_torn`) —
    is dropped with a warning."""
    offset, number = len(JOURNAL_MAGIC), 0
    while offset < len(data):
        number += 1
        length, crc, key_length = _FRAME.unpack_from(data, offset) if offset + _FRAME.size <= len(data) \
            else (len(data), 0, 0)
        if not (length or crc or key_length):
            return   # the zeros after the records
        start = offset + _FRAME.size
        end = start + key_length + length
        if end > len(data):
            log.warning("%s: the last record is cut short (a crash while it was written): dropped", path)
            return
        name, payload = data[start:start + key_length], data[start + key_length:end]
        intact = zlib.crc32(name + payload) == crc
        if not intact and _torn(data, offset, end):
            log.warning("%s: the last record is cut short (a crash while it was written): dropped", path)
            return
        try:
            framework_id, task_id = name.decode("utf-8", "surrogatepass").split("\0")
            key: TaskKey | None = (framework_id, task_id)
        except ValueError:
            key = None
        yield _Frame(number, offset, key, payload, intact, crc)
        offset = end


def _torn(data: bytes, offset: int, end: int) -> bool:
    """Whether the record at ``offset`` (ending at ``end``) is the last one
    of a write a power loss tore: it ends in zeros from a sector's start on,
    and only zeros follow it (the sectors written later never reached the
    disk). A record damaged otherwise is not."""
    if data.count(0, end) != len(data) - end:
        return False
    tail = len(data[offset:end]) - len(data[offset:end].rstrip(b"\0"))   # its zeros at its end
    zeros_from = end - tail
    return tail > 0 and -(-zeros_from // _SECTOR) * _SECTOR < end


def _replay(path: Path, tasks: dict[TaskKey, TaskCheckpoint]) -> list[CheckpointError]:
    """Apply the journal's records to ``tasks``; the problems found."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [CheckpointError(path, f"cannot be read: {exc.strerror or exc}")]
    if not data.startswith(JOURNAL_MAGIC):
        return [CheckpointError(path, "is not an agent journal (it does not begin as one): no task in it is "
                                      "recovered")]
    errors: list[CheckpointError] = []
    #: each recovered task's last full record's checksum: what a state record of it must name
    bases: dict[TaskKey, int] = {}
    for frame in _frames(data, path):
        record: object = None
        problem = "" if frame.intact else "its checksum does not match"
        if not problem:
            try:
                record = CODEC.decode(frame.payload)
            except WireError as exc:
                problem = str(exc)
        key = frame.key
        if isinstance(record, TaskStateFile) and key is not None:
            base = tasks.get(key)
            if base is not None and bases.get(key) == record.base:
                tasks[key] = TaskCheckpoint(base.framework, base.task, record.state, record.updates,
                                            record.holds_resources, record.killing, record.kill_why,
                                            record.limitation, record.limitation_message, record.healthy,
                                            record.executor_secret_digest)
                continue
            problem = "a state record whose task's full record before it is missing or damaged"
        elif isinstance(record, TaskFile) and key == (record.task.framework.id, record.task.task.task_id):
            tasks[key] = record.task
            bases[key] = frame.crc
            continue
        elif isinstance(record, ForgetFile) and key == (record.framework_id, record.task_id):
            tasks.pop(key, None)
            bases.pop(key, None)
            continue
        # what came before it of its task may be stale: that task is not recovered
        if key is not None:
            tasks.pop(key, None)
            bases.pop(key, None)
        whose = f"task {key[0]}/{key[1]} is not recovered" if key is not None \
            else "whose task it was cannot be told"
        errors.append(CheckpointError(path, f"record {frame.number} (byte {frame.offset}) is corrupt: "
                                            f"{problem or 'it is not a task record'}; {whose}"))
    return errors
