"""Where a master keeps its registry: in memory, in a file (a standalone
master with ``--work-dir``), or in ZooKeeper (``mesoslike.ha``).

Every store has ``load() -> Registry`` and ``store(registry)``. ``store``
persists what changed since the registry was last stored (its
:meth:`~mesoslike.master.registry.Registry.changes`) and, once that is
written, marks it stored; a store may write more than the changes — the
memory and file stores here keep the whole document, the ZooKeeper store
(:class:`mesoslike.ha.FencedRegistryStore`) only the shards that changed.

``store`` is also two steps, which the master's loop takes apart so that it
does not wait for a slow store within a turn: ``prepare(registry)`` takes
what to write, in the thread that changes the registry (the loop), and
``write_prepared(prepared)`` writes it — in a thread of its own when the
store is ``asynchronous`` (ZooKeeper) — returning the changes now stored,
which the loop then marks stored. One write at a time, each prepared after
the last one returned.

A store may *fence* its writes: refuse them once the writer may not write
any more (it does not lead any more, or the registry changed since it read
it). It then raises :class:`RegistryFencedError`, and the master stops
acting as leader; any other error of ``store`` is a write that failed and is
tried again. A write that failed for want of room or permission is a
:class:`RegistryWriteError` with one line saying why (no traceback needed).
Until a write succeeds the master acknowledges nothing that depends on it
(:class:`mesoslike.master.runtime.MasterRuntime`). The memory and file stores never fence (a standalone master
always leads); the ZooKeeper store's :class:`mesoslike.ha.FencingError` is a
``RegistryFencedError``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from mesoslike.errors import MesoslikeError
from mesoslike.master.registry import Registry, RegistryChanges, RegistryFormatError

__all__ = ["RegistryStore", "RegistryFencedError", "RegistryWriteError", "RegistryPartlyWritten", "MemoryRegistryStore", "FileRegistryStore"]


class RegistryFencedError(MesoslikeError):
    """A store refused a write because the writer may not write any more:
    it does not lead any more, or the registry changed since it read it.
    What was refused is not stored; the writer must stop acting as leader."""


class RegistryWriteError(MesoslikeError):
    """The registry could not be written (the disk is full, the directory
    is not writable, ...); nothing of the write is stored and it may be
    tried again. Its text says where and why, in one line."""


class RegistryPartlyWritten(RegistryWriteError):
    """Part of a write could not be done; ``stored`` says which changes the
    rest stored (to mark stored; the others are tried again)."""

    stored: RegistryChanges


class RegistryStore(Protocol):
    #: write_prepared may take long (a round trip to ZooKeeper): the loop runs it in another thread
    asynchronous: bool

    def load(self) -> Registry:
        """The stored registry (empty if none); raises ``ValueError`` (e.g.
        :class:`RegistryFormatError`) if what is stored is unusable."""

    def store(self, registry: Registry) -> None:
        """Persist ``registry``'s changes, then ``registry.mark_stored(...)``
        them. Raises :class:`RegistryFencedError` if this writer may not
        write any more, any other exception (marking nothing) if they could
        not be written."""

    def prepare(self, registry: Registry) -> Any:
        """What ``write_prepared`` writes: ``registry``'s changes taken now."""

    def write_prepared(self, prepared: Any) -> RegistryChanges:
        """Write what ``prepare`` took (any thread); the changes now stored.
        Raises as ``store`` does (:class:`RegistryPartlyWritten` if part of it
        could not be written)."""


class _DocumentStore:
    """A store that keeps the registry as one document, rewritten whole."""

    asynchronous = False

    def load(self) -> Registry:
        return Registry.from_document(self.read())

    def store(self, registry: Registry) -> None:
        registry.mark_stored(self.write_prepared(self.prepare(registry)))

    def prepare(self, registry: Registry) -> tuple[RegistryChanges, dict[str, Any]]:
        return registry.changes(), registry.to_document()

    def write_prepared(self, prepared: tuple[RegistryChanges, dict[str, Any]]) -> RegistryChanges:
        changes, document = prepared
        self.write(document)
        return changes

    def read(self) -> Any:
        raise NotImplementedError

    def write(self, document: dict[str, Any]) -> None:
        raise NotImplementedError


class MemoryRegistryStore(_DocumentStore):
    """Keeps the registry document for the life of the process only."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {}

    def read(self) -> dict[str, Any]:
        return self.document

    def write(self, document: dict[str, Any]) -> None:
        self.document = document


class FileRegistryStore(_DocumentStore):
    """``<work_dir>/registry.json``, replaced atomically (write, fsync, rename)."""

    def __init__(self, work_dir: str | os.PathLike) -> None:
        self.path = Path(work_dir) / "registry.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def read(self) -> Any:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise RegistryFormatError(f"{self.path} is not valid JSON ({exc}); move it away to start afresh") \
                from None

    def write(self, document: dict[str, Any]) -> None:
        """Write, fsync, rename; the file before stays whole until the rename.
        On an error (``ENOSPC`` on a full disk, ``EACCES``...) the partial
        file is removed — it would hold the space the next try needs — and
        :class:`RegistryWriteError` is raised."""
        partial = self.path.with_suffix(".json.partial")
        try:
            with open(partial, "w") as handle:
                json.dump(document, handle, separators=(",", ":"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, self.path)
        except OSError as exc:
            try:
                partial.unlink(missing_ok=True)
            except OSError:
                pass  # the error that matters is the first one
            raise RegistryWriteError(f"cannot write the registry {self.path}: {exc.strerror or exc}") from exc
