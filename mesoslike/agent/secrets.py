"""Secrets for tasks (docs/containers.rst, "Secrets"): Mesos's ``Secret``
for environment variables (``TaskInfo.environment_secrets``) and files
(a ``Volume`` whose source is ``SECRET``).

Two halves, one module, standard library only at import (the supervisor
loads it by its path, :func:`.supervisor.load_sibling`):

- **The agent's half** resolves what a task asks for: a ``VALUE`` secret is
  its bytes; a ``REFERENCE`` secret is read from the agent's secrets
  directory (``--secrets-dir``, :class:`SecretStore`) as
  ``<dir>/<framework principal>/<name>`` — a principal reaches only its own
  secrets — and ``key``, if given, selects one value inside it
  (:func:`select_key`). :func:`resolve_task_secrets` makes the whole of a
  task's secrets; the executor writes them to the run directory
  (:data:`SECRETS_FILE`, mode 0600, in ``meta``, mode 0700) for the task's
  supervisor only, never into ``launch.json``, a checkpoint, a log or an
  argument.
- **The supervisor's half** (:func:`take_secrets`, :func:`write_secret_file`,
  :func:`remove_secret_files`) reads that file and removes it at once, puts
  the variables in the task's environment only (not its health checks'),
  writes each secret file (mode 0400, owned by the task's user) and removes
  the files again when the task has ended.

A secret file's place on the agent is :func:`secret_file_host_path`: a
relative ``container_path`` is that path below the sandbox; an absolute one
(inside an image's root filesystem) is a file of the run directory that the
containerizer bind-mounts at ``container_path``.

Nothing here ever puts a secret's value into an exception's message.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import stat
from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:   # the supervisor runs without the package: types for the checker only
    from mesoslike.wire.types import ContainerInfo, Secret, TaskInfo

__all__ = ["SecretError", "SecretStore", "select_key", "resolve_secret", "resolve_task_secrets", "TaskSecrets",
           "secret_file_host_path", "write_secrets_file", "take_secrets", "write_secret_file",
           "remove_secret_files", "read_sandbox_secret", "SECRETS_FILE", "RUN_DIR_SECRETS", "SECRET_FILE_MODE", "MAX_SECRET_FILE_BYTES"]

#: the run directory's file with a task's resolved secrets: made by the agent, removed by the supervisor
SECRETS_FILE = "secrets.json"
#: the run directory's directory of secret files with an absolute container path (bind-mounted)
RUN_DIR_SECRETS = "secrets"
#: the mode of every secret file a task gets (owned by the task's user)
SECRET_FILE_MODE = 0o400
#: the largest file of the secrets directory read (a secret's value is at most 1 MiB; the file may hold keys)
MAX_SECRET_FILE_BYTES = 4 * 1024 * 1024


class SecretError(Exception):
    """A secret cannot be had; the message says which and why, never its value."""


# ================================================================ the agent's
class SecretStore:
    """The agent's secrets directory (``--secrets-dir``): ``REFERENCE``
    secrets as files ``<directory>/<principal>/<name>`` (``name`` may have
    ``/``). Every directory on the way and the file must belong to the
    agent's user (``uid``) and be closed to others — directories not
    writable by group or others, the file mode 0600 or 0400 — and none may
    be a symlink; anything else is refused, naming the file and the fix."""

    def __init__(self, directory: str | os.PathLike, uid: int | None = None) -> None:
        self.directory = os.path.abspath(os.fspath(directory))
        self.uid = os.geteuid() if uid is None else uid

    def check(self) -> None:
        """At the agent's start: the directory exists and is the agent's. Raises :class:`SecretError`."""
        os.close(self._open_root())

    def _open_root(self) -> int:
        """The directory, opened and checked."""
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise SecretError(f"the secrets directory {self.directory} cannot be opened: {exc.strerror}") from None
        try:
            self._check_directory(fd, self.directory)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_directory(self, fd: int, path: str) -> None:
        info = os.fstat(fd)
        if info.st_uid != self.uid or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise SecretError(f"the secrets directory {path} must belong to uid {self.uid} (the agent's user) "
                              f"and not be writable by others (it is uid {info.st_uid}, mode "
                              f"{stat.S_IMODE(info.st_mode):04o}): chown {self.uid} {path}; chmod 700 {path}")

    def read(self, principal: str, name: str) -> bytes:
        """The bytes of secret ``name`` of ``principal``. Raises :class:`SecretError`."""
        if not principal:
            raise SecretError(f"secret {name!r}: a REFERENCE secret is looked up under its framework's principal, "
                              "and this framework has none (an anonymous cluster)")
        parts = [principal, *name.split("/")]
        if any(part in ("", ".", "..") or "/" in part or "\0" in part for part in parts) or principal.startswith("."):
            raise SecretError(f"secret {name!r} of principal {principal!r}: not a plain relative name")
        shown = os.path.join(self.directory, *parts)
        fd = self._open_root()
        try:
            for index, part in enumerate(parts):
                last = index == len(parts) - 1
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (0 if last else os.O_DIRECTORY)
                try:
                    next_fd = os.open(part, flags, dir_fd=fd)
                except OSError as exc:
                    raise SecretError(_open_problem(shown, exc)) from None
                os.close(fd)
                fd = next_fd
                if not last:
                    self._check_directory(fd, os.path.join(self.directory, *parts[:index + 1]))
            return self._read_file(fd, shown)
        finally:
            os.close(fd)

    def _read_file(self, fd: int, path: str) -> bytes:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SecretError(f"the secret {path} is not a regular file")
        if info.st_uid != self.uid or info.st_mode & 0o077:
            raise SecretError(f"the secret file {path} must belong to uid {self.uid} (the agent's user) with mode "
                              f"0600 or 0400 (it is uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o}): "
                              f"chown {self.uid} {path}; chmod 600 {path}")
        if info.st_size > MAX_SECRET_FILE_BYTES:
            raise SecretError(f"the secret file {path} holds {info.st_size} bytes, more than "
                              f"{MAX_SECRET_FILE_BYTES}")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_SECRET_FILE_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        raise SecretError(f"the secret file {path} holds more than {MAX_SECRET_FILE_BYTES} bytes")


def _open_problem(path: str, exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return f"no secret {path} on this agent"
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return f"the secret {path} (or a directory on its way) is a symlink or not a directory: refused"
    return f"the secret {path} cannot be opened: {exc.strerror}"


def select_key(data: bytes, key: str, name: str) -> bytes:
    """The value of ``key`` in a secret file's ``data`` (all of ``data``
    when ``key`` is empty). A file whose first non-blank character is ``{``
    is a JSON object (the key's value must be a string); otherwise it is
    ``KEY=VALUE`` lines (blank lines and lines beginning with ``#``
    skipped; the value is everything after the first ``=``, as it is).
    Raises :class:`SecretError` naming the secret and the key."""
    if not key:
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError(f"secret {name!r} is not UTF-8 text, so it has no key {key!r}") from None
    if text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except ValueError:
            raise SecretError(f"secret {name!r} begins with '{{' but is not a JSON object") from None
        if not isinstance(document, dict) or key not in document:
            raise SecretError(f"secret {name!r} has no key {key!r}")
        value = document[key]
        if not isinstance(value, str):
            raise SecretError(f"key {key!r} of secret {name!r} is not a JSON string")
        return value.encode("utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name_part, equals, value_part = line.partition("=")
        if not equals:
            raise SecretError(f"line {number} of secret {name!r} is not KEY=VALUE (nor is the file a JSON object)")
        if name_part.strip() == key:
            return value_part.encode("utf-8")
    raise SecretError(f"secret {name!r} has no key {key!r}")


def resolve_secret(secret: Secret, principal: str, store: SecretStore | None) -> bytes:
    """A secret's bytes: a ``VALUE``'s own, a ``REFERENCE``'s from ``store``."""
    if secret.type == "VALUE":
        assert secret.value is not None
        return secret.value
    reference = secret.reference
    assert reference is not None
    if store is None:
        raise SecretError(f"secret {reference.name!r} is a REFERENCE, and this agent has no secrets directory "
                          "(--secrets-dir)")
    return select_key(store.read(principal, reference.name), reference.key, reference.name)


def secret_file_host_path(sandbox: str | os.PathLike, run_dir: str | os.PathLike, container_path: str) -> str:
    """Where the agent writes the secret file a task sees at
    ``container_path``: ``<sandbox>/<container_path>`` for a relative path
    (the task's own sandbox), and for an absolute one
    ``<run_dir>/secrets/<sha256 of the path, 16 hex>`` — a file the
    containerizer bind-mounts (read-only) at ``container_path`` inside the
    task's root filesystem. Pure."""
    if not container_path.startswith("/"):
        return os.path.join(os.fspath(sandbox), container_path)
    digest = hashlib.sha256(container_path.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return os.path.join(os.fspath(run_dir), RUN_DIR_SECRETS, digest)


class TaskSecrets:
    """A task's resolved secrets: ``environment`` (name -> value, as the
    environment holds it) and ``files`` (``(host path, container path,
    bytes)``: see :func:`secret_file_host_path`). Its repr names no value."""

    __slots__ = ("environment", "files")

    def __init__(self, environment: dict[str, str], files: list[tuple[str, str, bytes]]) -> None:
        self.environment = environment
        self.files = files

    def __repr__(self) -> str:
        return (f"TaskSecrets(environment={sorted(self.environment)}, "
                f"files={[container for _, container, _ in self.files]})")

    def __bool__(self) -> bool:
        return bool(self.environment or self.files)


def resolve_task_secrets(task: TaskInfo, principal: str, store: SecretStore | None, *, sandbox: str | os.PathLike,
                         run_dir: str | os.PathLike, extra_files: Mapping[str, bytes] | None = None,
                         container: ContainerInfo | None = None) -> TaskSecrets:
    """Every secret of ``task`` (of a framework of ``principal``), resolved:
    its secret environment variables and the ``SECRET`` volumes of its
    container (``container``, else ``task.container``: a custom executor's
    process has its ``ExecutorInfo``'s), plus ``extra_files`` (container
    path -> bytes: the agent's own, such as a custom executor's secret).
    Raises :class:`SecretError` naming the first that cannot be had."""
    environment: dict[str, str] = {}
    for name, secret in sorted(task.environment_secrets.items()):
        value = resolve_secret(secret, principal, store)
        if b"\0" in value:
            raise SecretError(f"the secret of environment variable {name} holds a NUL byte, which an environment "
                              "cannot carry (give it as a file)")
        environment[name] = value.decode("utf-8", "surrogateescape")   # os.fsencode gives the bytes back
    files: list[tuple[str, str, bytes]] = []
    container = container if container is not None else task.container
    volumes = container.volumes if container is not None else []
    for volume in volumes:
        if volume.source.secret is not None:
            files.append((secret_file_host_path(sandbox, run_dir, volume.container_path), volume.container_path,
                          resolve_secret(volume.source.secret, principal, store)))
    for container_path, data in sorted((extra_files or {}).items()):
        files.append((secret_file_host_path(sandbox, run_dir, container_path), container_path, data))
    return TaskSecrets(environment, files)


def write_secrets_file(run_dir: str | os.PathLike, secrets: TaskSecrets) -> None:
    """:data:`SECRETS_FILE` in ``run_dir`` (mode 0600; replaced if there),
    for the task's supervisor (:func:`take_secrets`)."""
    document = {"environment": secrets.environment,
                "files": [{"path": path, "container_path": container, "data": base64.b64encode(data).decode()}
                          for path, container, data in secrets.files]}
    path = os.path.join(os.fspath(run_dir), SECRETS_FILE)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        data = json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogateescape")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


# =========================================================== the supervisor's
def take_secrets(run_dir: str) -> tuple[dict[str, str], list[tuple[str, bytes]]]:
    """The task's secrets from its run directory, the file removed at once:
    (environment variables, [(host path, bytes)]). None there: nothing.
    Raises OSError or ValueError for a damaged file (the launch fails)."""
    path = os.path.join(run_dir, SECRETS_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}, []
    try:
        os.unlink(path)
        with os.fdopen(os.dup(fd), "rb") as source:
            document = json.loads(source.read().decode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)
    environment = document["environment"]
    if not isinstance(environment, dict) or not all(isinstance(v, str) for v in environment.values()):
        raise ValueError(f"{path}: environment of the wrong type")
    files = [(str(entry["path"]), base64.b64decode(entry["data"])) for entry in document["files"]]
    return environment, files


def write_secret_file(path: str, data: bytes, uid: int, gid: int, sandbox: str) -> None:
    """Write a secret file at ``path`` (mode 0400, owned by ``uid``:``gid``).
    Below ``sandbox`` — a directory the task's user owns, who may have put
    symlinks there — every component is opened without following a
    symlink, missing directories are made (mode 0700, the user's), and a
    file already at ``path`` is replaced. Elsewhere (the run directory) the
    parent is made by root. Raises OSError."""
    sandbox = os.path.normpath(sandbox)
    inside = os.path.normpath(path).startswith(sandbox + os.sep)
    if inside:
        parts = os.path.relpath(path, sandbox).split(os.sep)
        fd = os.open(sandbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    else:
        parent = os.path.dirname(path)
        os.makedirs(parent, mode=0o700, exist_ok=True)
        parts = [os.path.basename(path)]
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
                made = True
            except FileExistsError:
                made = False
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = next_fd
            if made:
                os.fchown(fd, uid, gid)
        try:
            os.unlink(parts[-1], dir_fd=fd)
        except FileNotFoundError:
            pass
        out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=fd)
        try:
            os.fchown(out, uid, gid)
            os.fchmod(out, SECRET_FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
        finally:
            os.close(out)
    finally:
        os.close(fd)


def read_sandbox_secret(sandbox: str | os.PathLike, name: str, limit: int = 4096) -> str | None:
    """What the secret file ``name`` directly in ``sandbox`` holds (at most
    ``limit`` bytes, ASCII), None if it cannot be read or is not a regular
    file. The sandbox is its task's user's: neither it nor the file is
    followed if a link, and a FIFO does not block; the caller checks what
    it got against what it expects (a digest), never trusts it."""
    try:
        directory = os.open(sandbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=directory)
    except OSError:
        return None
    finally:
        os.close(directory)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def remove_secret_files(paths: Iterable[str], sandbox: str) -> None:
    """Remove the task's secret files (it has ended), never following a
    symlink on the way; what is gone already is fine."""
    sandbox = os.path.normpath(sandbox)
    for path in paths:
        if os.path.normpath(path).startswith(sandbox + os.sep):
            parts = os.path.relpath(path, sandbox).split(os.sep)
            base = sandbox
        else:
            parts, base = [os.path.basename(path)], os.path.dirname(path)
        try:
            fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            for part in parts[:-1]:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = next_fd
            os.unlink(parts[-1], dir_fd=fd)
        except OSError:
            pass
        finally:
            os.close(fd)
