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

Who may read what (:class:`SandboxAccess`, with the agent's credentials):
a framework's directory is readable by the principals Mesos's
``access_sandboxes`` ACL allows for the principal that framework belongs to
(:class:`SandboxOwners` remembers it, so sandboxes kept after their tasks
ended stay guarded); the check is made on the *resolved* path, so a symlink
in one framework's sandbox never leads a reader into another's. The secret
files of a task (docs/containers.rst, "Secrets") are never served, whoever
asks.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from pathlib import Path
from typing import BinaryIO, Callable

from mesoslike.acl import Credentials

__all__ = ["SandboxFiles", "FileAccessError", "MAX_READ_LENGTH", "REFUSALS", "SandboxOwners", "SandboxAccess",
           "MayRead", "launch_secret_files"]

#: whether a request may read the directory of the framework of this name (the sandbox root's entry)
MayRead = Callable[[str], bool]

#: the most ``read`` returns at once (a client pages with offsets)
MAX_READ_LENGTH = 1024 * 1024
#: the kinds of refusal, as counted in /metrics
REFUSALS = ("absolute", "parent", "symlink", "invalid", "unauthorized", "secret")


class FileAccessError(Exception):
    """A refused or failed request: ``status`` is its HTTP status; ``refusal``
    one of :data:`REFUSALS` when it was refused for leading out of the root."""

    def __init__(self, status: int, message: str, refusal: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.refusal = refusal


class SandboxOwners:
    """The principal of each framework directory of the sandbox root (its
    name, :func:`~mesoslike.agent.executor.path_component` of the
    framework id): a file per framework below ``directory`` (``meta``'s),
    written at the framework's first launch here, kept as long as the
    agent's work dir. Thread-safe (the HTTP threads read it)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._known: dict[str, str] = {}

    def record(self, framework_dir: str, principal: str) -> None:
        """``framework_dir`` is a framework of ``principal`` (its first launch here writes it down)."""
        with self._lock:
            if self._known.get(framework_dir) == principal:
                return
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = self.directory / framework_dir
            temp = path.with_name(f".{framework_dir}.tmp")
            temp.write_text(principal)
            os.replace(temp, path)
            self._known[framework_dir] = principal

    def owner(self, framework_dir: str) -> str | None:
        """The principal of ``framework_dir``; None if not known (a sandbox older than this record)."""
        with self._lock:
            known = self._known.get(framework_dir)
        if known is not None:
            return known
        try:
            principal = (self.directory / framework_dir).read_text()
        except (OSError, ValueError):
            return None
        with self._lock:
            self._known[framework_dir] = principal
        return principal


class SandboxAccess:
    """Who asks and what they may read (docs/agent.rst, "Authorization"):
    the principal an ``Authorization`` header proves by the credentials'
    tokens, and whether it may read a framework's directory — Mesos's
    ``access_sandboxes`` for the framework's principal (one not known is
    nobody's: operators only, by default)."""

    def __init__(self, credentials: Credentials, owners: SandboxOwners) -> None:
        self.credentials = credentials
        self.owners = owners

    def principal(self, authorization: str | None) -> str | None:
        return self.credentials.principal_of_authorization(authorization)

    def may_read(self, principal: str | None, framework_dir: str) -> bool:
        return self.credentials.may_access_sandboxes(principal, self.owners.owner(framework_dir) or "")


class SandboxFiles:
    """The files below ``root``; every method takes a relative path, and
    ``may_read`` (None: anything) says which frameworks' directories the
    request may see. ``secret_files(framework_dir, task_dir)`` gives the
    absolute paths of a task's secret files, which are never served."""

    def __init__(self, root: str | os.PathLike,
                 secret_files: Callable[[str, str], frozenset[str]] | None = None) -> None:
        self.root = Path(root)
        self.secret_files = secret_files

    # ---------------------------------------------------------- the check
    def _components(self, path: str, may_read: MayRead | None = None) -> list[str]:
        """``path`` made relative to the resolved root, checked (``may_read``
        the framework it resolves into); its components."""
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
        components = [] if resolved == root else resolved[len(root) + 1:].split(os.sep)
        if components and may_read is not None and not may_read(components[0]):
            raise FileAccessError(403, f"not authorized: {path!r} is in the sandboxes of a framework this "
                                       "principal may not read (access_sandboxes)", "unauthorized")
        if not os.path.lexists(resolved):
            raise FileAccessError(404, f"no such file or directory: {path!r}")
        if len(components) > 2 and self.secret_files is not None \
                and resolved in self.secret_files(components[0], components[1]):
            raise FileAccessError(403, f"{path!r} is a secret file of its task: never served", "secret")
        return components

    def _open(self, path: str, directory: bool, may_read: MayRead | None = None) -> int:
        """A descriptor of ``path``, opened from the root without following any symlink."""
        components = self._components(path, may_read)
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
    def browse(self, path: str, may_read: MayRead | None = None) -> list[dict]:
        """The entries of a directory (Mesos's ``/files/browse``), by name;
        symlinks are listed as themselves; at the root, only the
        frameworks ``may_read`` allows."""
        fd = self._open(path, directory=True, may_read=may_read)
        prefix = "/".join(self._components(path, may_read))
        try:
            entries = []
            with os.scandir(fd) as listing:
                for entry in listing:
                    if not prefix and may_read is not None and not may_read(entry.name):
                        continue
                    info = entry.stat(follow_symlinks=False)
                    entries.append({"path": f"{prefix}/{entry.name}" if prefix else entry.name,
                                    "size": info.st_size, "mode": stat.filemode(info.st_mode),
                                    "mtime": info.st_mtime, "nlink": info.st_nlink, "uid": info.st_uid,
                                    "gid": info.st_gid})
        finally:
            os.close(fd)
        return sorted(entries, key=lambda e: e["path"])

    def read(self, path: str, offset: int = 0, length: int | None = None, may_read: MayRead | None = None) -> dict:
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
        fd = self._open(path, directory=False, may_read=may_read)
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

    def open(self, path: str, may_read: MayRead | None = None) -> tuple[BinaryIO, int]:
        """A regular file, opened for reading, and its size (``/files/download``)."""
        fd = self._open(path, directory=False, may_read=may_read)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise FileAccessError(400, f"{path!r} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), info.st_size


def launch_secret_files(run_root: str | os.PathLike) -> Callable[[str, str], frozenset[str]]:
    """``secret_files`` of :class:`SandboxFiles` for the run directories
    below ``run_root`` (``<work_dir>/meta/tasks``): the paths a task's
    ``launch.json`` lists under ``secret_files`` (none if unreadable)."""
    root = Path(run_root)

    def secret_files(framework_dir: str, task_dir: str) -> frozenset[str]:
        try:
            with open(root / framework_dir / task_dir / "launch.json", "rb") as source:
                listed = json.loads(source.read()).get("secret_files", [])
        except (OSError, ValueError, AttributeError):
            return frozenset()
        return frozenset(os.path.realpath(p) for p in listed if isinstance(p, str))
    return secret_files
