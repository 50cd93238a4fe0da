"""Where the Fuxi service keeps its hard state (:mod:`.hard_state`).

A store holds named records (bytes): :meth:`load` reads them all,
:meth:`write` stores some and deletes others, and returns only once they
are durable — the service acknowledges a submission after that.

- :class:`FileRecordStore`, standalone (``fuxi serve --work-dir DIR``): one
  file per record in ``DIR/state/``, each written atomically (a temporary
  file, fsynced, renamed over the old one, the directory fsynced). One
  service at a time: it holds an exclusive lock on ``DIR/state/lock``
  while it runs (the kernel releases it when the process dies, even by
  ``kill -9``).
- in HA mode (``fuxi serve --zk``) the store is
  :class:`mesoslike.ZooKeeperRecordStore`: the records under
  ``<group>/registry``, chunked when large, every write fenced on the
  leader's election znode.
"""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Protocol

from mesoslike_frameworks.fuxi.hard_state import HardStateError

__all__ = ["RecordStore", "FileRecordStore", "StoreLocked"]

_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")


class RecordStore(Protocol):
    def load(self) -> dict[str, bytes]:
        """Every record stored (name -> bytes)."""

    def write(self, records: Mapping[str, bytes], deleted: Iterable[str] = ()) -> None:
        """Store ``records`` and delete ``deleted``; durable when it returns. Raises on failure."""


class StoreLocked(HardStateError):
    """Another service holds the store."""


class FileRecordStore:
    """Records as files in ``directory`` (created), locked for this process
    (:class:`StoreLocked` if another holds it). :meth:`close` lets go."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.directory, 0o700)   # the records hold the jobs' tokens: the service's user's only
            self._lock = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise HardStateError(f"cannot use {self.directory} for the scheduler's state: "
                                 f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock)
            raise StoreLocked(f"another `mesoslike fuxi serve` keeps its state in {self.directory} (it holds "
                              f"{self.directory / 'lock'}): give each service its own --work-dir") from None
        for path in self.directory.iterdir():   # records an older service kept readable by all
            if path.is_file() and not path.is_symlink():
                os.chmod(path, 0o600)

    def load(self) -> dict[str, bytes]:
        records = {}
        try:
            for path in sorted(self.directory.iterdir()):
                if _NAME.fullmatch(path.name) and path.name != "lock" and path.is_file():
                    records[path.name] = path.read_bytes()
        except OSError as exc:
            raise HardStateError(f"cannot read the scheduler's state in {self.directory}: "
                                 f"{exc.strerror or exc}") from None
        return records

    def write(self, records: Mapping[str, bytes], deleted: Iterable[str] = ()) -> None:
        try:
            for name, data in records.items():
                path = self._path(name)
                tmp = path.with_name(f".{name}.tmp")
                tmp.unlink(missing_ok=True)
                # mode 0600: a job's record holds its AppMaster's token
                descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            for name in deleted:
                if name not in records:
                    self._path(name).unlink(missing_ok=True)
            directory = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(directory)   # the renames and unlinks themselves
            finally:
                os.close(directory)
        except OSError as exc:
            raise HardStateError(f"cannot write the scheduler's state in {self.directory}: "
                                 f"{exc.strerror or exc}") from None

    def _path(self, name: str) -> Path:
        if not _NAME.fullmatch(name) or name == "lock":
            raise HardStateError(f"bad record name {name!r}")
        return self.directory / name

    def close(self) -> None:
        try:
            os.close(self._lock)   # the lock goes with the descriptor
        except OSError:
            pass
