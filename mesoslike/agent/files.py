"""Reading sandboxes for the agent's ``/files`` endpoints, confined to the
sandbox root.

A path is relative to ``<work_dir>/sandboxes`` — ``<framework>/<task>/stdout``
— and is refused (:class:`FileAccessError`, 403) when it is absolute, has a
``..`` component or a NUL byte, or leads out of the root through a symlink;
a path that does not exist is 404. Symlinks that stay inside are followed.
The check is not a string comparison that a race could defeat: the path is
resolved, checked against the root, and then opened one component at a
time from the root's directory descriptor with ``O_NOFOLLOW``, so that a
symlink swapped in after the check is refused rather than followed, and
nothing outside the root is ever opened.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["SandboxFiles", "FileAccessError", "MAX_READ_LENGTH", "REFUSALS"]

#: the most ``read`` returns at once (a client pages with offsets)
MAX_READ_LENGTH = 1024 * 1024
#: the kinds of refusal, as counted in /metrics
REFUSALS = ("absolute", "parent", "symlink", "invalid")


class FileAccessError(Exception):
    """A refused or failed request: ``status`` is its HTTP status; ``refusal``
    one of :data:`REFUSALS` when it was refused for leading out of the root."""

    def __init__(self, status: int, message: str, refusal: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.refusal = refusal


class SandboxFiles:
    """The files below ``root``; every method takes a relative path."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    # ---------------------------------------------------------- the check
    def _components(self, path: str) -> list[str]:
        """``path`` made relative to the resolved root, checked; its components."""
        if "\0" in path:
            raise FileAccessError(403, "a path may not hold a NUL byte", "invalid")
        if path.startswith("/") or path.startswith("\\"):
            raise FileAccessError(403, f"absolute paths are refused ({path!r}): give a path relative to the "
                                       "sandboxes, e.g. FRAMEWORK/TASK/stdout", "absolute")
        parts = [part for part in path.split("/") if part not in ("", ".")]
        if ".." in parts:
            raise FileAccessError(403, f"'..' is refused in {path!r}", "parent")
        root = os.path.realpath(self.root)
        resolved = os.path.realpath(os.path.join(root, *parts))
        if resolved != root and not resolved.startswith(root + os.sep):
            raise FileAccessError(403, f"{path!r} leads out of the sandboxes", "symlink")
        if not os.path.lexists(resolved):
            raise FileAccessError(404, f"no such file or directory: {path!r}")
        return [] if resolved == root else resolved[len(root) + 1:].split(os.sep)

    def _open(self, path: str, directory: bool) -> int:
        """A descriptor of ``path``, opened from the root without following any symlink."""
        components = self._components(path)
        try:
            fd = os.open(os.path.realpath(self.root), os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise FileAccessError(404, f"no sandboxes here yet ({exc.strerror})") from None
        try:
            for index, name in enumerate(components):
                last = index == len(components) - 1
                # O_NONBLOCK: a FIFO a task made must not hold an HTTP thread in open()
                flags = (os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
                         | (os.O_DIRECTORY if not last or directory else 0))
                next_fd = os.open(name, flags, dir_fd=fd)
                os.close(fd)
                fd = next_fd
        except OSError as exc:
            os.close(fd)
            if exc.errno == errno.ELOOP:
                raise FileAccessError(403, f"{path!r} changed into a symlink", "symlink") from None
            if exc.errno == errno.ENOTDIR:
                raise FileAccessError(400, f"{path!r} is not a directory") from None
            if exc.errno == errno.ENOENT:
                raise FileAccessError(404, f"no such file or directory: {path!r}") from None
            raise FileAccessError(403 if exc.errno == errno.EACCES else 500, f"{path!r}: {exc.strerror}") from None
        return fd

    # ------------------------------------------------------------ the uses
    def browse(self, path: str) -> list[dict]:
        """The entries of a directory (Mesos's ``/files/browse``), by name;
        symlinks are listed as themselves."""
        fd = self._open(path, directory=True)
        prefix = "/".join(self._components(path))
        try:
            entries = []
            with os.scandir(fd) as listing:
                for entry in listing:
                    info = entry.stat(follow_symlinks=False)
                    entries.append({"path": f"{prefix}/{entry.name}" if prefix else entry.name,
                                    "size": info.st_size, "mode": stat.filemode(info.st_mode),
                                    "mtime": info.st_mtime, "nlink": info.st_nlink, "uid": info.st_uid,
                                    "gid": info.st_gid})
        finally:
            os.close(fd)
        return sorted(entries, key=lambda e: e["path"])

    def read(self, path: str, offset: int = 0, length: int | None = None) -> dict:
        """Up to ``length`` bytes (at most :data:`MAX_READ_LENGTH`) from
        ``offset``, as Mesos's ``/files/read``: ``{"data": ..., "offset": ...}``.
        ``offset`` -1 asks for the size only (``data`` empty, ``offset`` the
        size). ``data`` is the bytes as UTF-8, undecodable bytes as U+DC80..U+DCFF
        (``data.encode("utf-8", "surrogateescape")`` gives the bytes back), so
        offsets stay byte offsets."""
        if length is not None and length < 0:
            raise FileAccessError(400, f"length must be >= 0, got {length}")
        if offset < -1:
            raise FileAccessError(400, f"offset must be >= -1, got {offset}")
        fd = self._open(path, directory=False)
        try:
            info = os.fstat(fd)
            size = info.st_size
            if stat.S_ISDIR(info.st_mode):
                raise FileAccessError(400, f"{path!r} is a directory: browse it")
            if not stat.S_ISREG(info.st_mode):
                raise FileAccessError(400, f"{path!r} is not a regular file")
            if offset == -1:
                return {"data": "", "offset": size}
            if offset > size:
                raise FileAccessError(400, f"offset {offset} is past the end of {path!r} ({size} bytes)")
            wanted = MAX_READ_LENGTH if length is None else min(length, MAX_READ_LENGTH)
            data = os.pread(fd, wanted, offset)
        finally:
            os.close(fd)
        return {"data": data.decode("utf-8", "surrogateescape"), "offset": offset}

    def open(self, path: str) -> tuple[BinaryIO, int]:
        """A regular file, opened for reading, and its size (``/files/download``)."""
        fd = self._open(path, directory=False)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise FileAccessError(400, f"{path!r} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), info.st_size
