"""Where a master keeps its registry document: in memory, in a file (a
standalone master with ``--work-dir``), or in ZooKeeper (``mesoslike.ha``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from mesoslike.master.registry import RegistryFormatError

__all__ = ["RegistryStore", "MemoryRegistryStore", "FileRegistryStore"]


class RegistryStore(Protocol):
    def load(self) -> dict[str, Any]:
        """The stored document ({} if none)."""

    def store(self, document: dict[str, Any]) -> None:
        """Replace the stored document; raise if it could not be written."""


class MemoryRegistryStore:
    """Keeps the registry for the life of the process only."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {}

    def load(self) -> dict[str, Any]:
        return self.document

    def store(self, document: dict[str, Any]) -> None:
        self.document = document


class FileRegistryStore:
    """``<work_dir>/registry.json``, replaced atomically (write, fsync, rename)."""

    def __init__(self, work_dir: str | os.PathLike) -> None:
        self.path = Path(work_dir) / "registry.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> dict[str, Any]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise RegistryFormatError(f"{self.path} is not valid JSON ({exc}); move it away to start afresh") \
                from None

    def store(self, document: dict[str, Any]) -> None:
        partial = self.path.with_suffix(".json.partial")
        with open(partial, "w") as handle:
            json.dump(document, handle, separators=(",", ":"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.path)
