"""The fetcher: a task's URIs (``TaskInfo.uris``, Mesos's
``CommandInfo.URI``) brought into its sandbox before it starts.

Run by the task's supervisor (:mod:`.supervisor`), which owns the task and
outlives the agent: a fetch goes on while the agent restarts, and the agent's
loop never waits for a download. Standard library only, like the supervisor,
which loads this file by its path, and only for a task that has URIs.

For each URI, in order (the first that fails ends the run: the task never
starts and ends TASK_FAILED with a message naming the URI and why):

1. the bytes: ``file://`` — the file, opened *as the task's user* (a task
   must not read through its root supervisor what its user may not);
   ``http://``/``https://`` — downloaded, at most ``max_size`` bytes within
   ``timeout`` seconds. With ``cache``, they come from (or go into) the
   agent's fetcher cache first.
2. into the sandbox, as the task's user (the supervisor takes on the user's
   identity for it, so every file is the user's and a link the user planted
   leads nowhere the user could not go): the file under ``output_file`` (by
   default the URI's last path component); ``executable`` makes it ``0755``;
   ``extract`` unpacks a ``.tar``, ``.tar.gz``, ``.tgz``, ``.tar.bz2``,
   ``.tar.xz`` or ``.zip`` into the sandbox too. An archive is checked
   whole before anything of it is written: a member with an absolute name or
   a ``..`` leading out of the sandbox, a link whose target lies outside it,
   a device or FIFO, a zip symlink, or more than ``max_size`` bytes
   unpacked refuse the whole archive.

The cache (``<work_dir>/fetcher-cache``): one file per (user, URI), an
``index.json`` of their sizes and last uses, and a lock file (``flock``: the
supervisors of many tasks share it). It holds at most ``cache_size`` bytes;
adding a file evicts the least recently used others. A file larger than the
whole cache is fetched but not kept. Keyed by user as well, as Mesos's: a
cached ``file://`` URI must not hand one user what only another could read.
"""

from __future__ import annotations

import bz2  # noqa: F401 - imported now: tarfile loads it lazily, as the task's user, who may not read the stdlib
import contextlib
import encodings.cp437  # noqa: F401 - zipfile's, loaded lazily too
import fcntl
import gzip  # noqa: F401
import lzma  # noqa: F401
import hashlib
import json
import os
import posixpath
import shutil
import socket
import stat
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile

__all__ = ["FetchError", "fetch_all", "Cache", "archive_kind", "extract", "CACHE_INDEX"]

CACHE_INDEX = "index.json"
CACHE_LOCK = "lock"
#: members an archive may have
MAX_MEMBERS = 100_000
#: files the cache may hold (besides its size bound)
MAX_CACHE_ENTRIES = 10_000
CHUNK = 1 << 16
_ARCHIVES = ((".tar.gz", "tar"), (".tgz", "tar"), (".tar.bz2", "tar"), (".tbz2", "tar"), (".tar.xz", "tar"),
             (".txz", "tar"), (".tar", "tar"), (".zip", "zip"))


class FetchError(Exception):
    """A URI could not be fetched; the message says which and why."""


def fetch_all(uris: list, sandbox: str, user: object, settings: dict, say) -> None:
    """Fetch every URI (``CommandURI`` dicts) into ``sandbox`` as ``user``
    (a supervisor ``TaskUser``, or None: as this process). ``settings``:
    cache_dir, cache_size, timeout, max_size. Raises :class:`FetchError`."""
    cache_dir = str(settings["cache_dir"])
    cache_size, max_size = int(settings["cache_size"]), int(settings["max_size"])
    timeout = float(settings["timeout"])
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    cache = Cache(cache_dir, cache_size, stale_after=2 * timeout + 60) if cache_size > 0 else None
    for uri in uris:
        value = str(uri["value"])
        try:
            started = time.monotonic()
            how = _fetch_one(uri, sandbox, user, cache, cache_dir, timeout, max_size)
            say(f"fetched {value} {how} in {time.monotonic() - started:.2f} s")
        except FetchError as exc:
            raise FetchError(f"fetching {value} failed: {exc}") from None
        except OSError as exc:
            raise FetchError(f"fetching {value} failed: {exc.strerror or exc}"
                             f"{f' ({exc.filename})' if exc.filename else ''}") from None


def _fetch_one(uri: dict, sandbox: str, user: object, cache: Cache | None, temp_dir: str, timeout: float,
               max_size: int) -> str:
    value = str(uri["value"])
    name = str(uri.get("output_file") or "") or _file_name(value)
    if not name or "/" in name or name in (".", ".."):
        raise FetchError(f"no file name for it in the sandbox ({name!r}): give it an output_file")

    def fill(sink) -> None:
        _read_uri(value, user, sink, timeout, max_size)

    if uri.get("cache") and cache is not None:
        source, how = cache.get(f"{getattr(user, 'name', '')}\0{value}", value, fill)
    else:
        source, how = tempfile.TemporaryFile(dir=temp_dir), "(not cached)"
        try:
            fill(source)
        except BaseException:
            source.close()
            raise
    with source, as_user(user):
        source.seek(0)
        target = os.path.join(sandbox, name)
        mode = 0o755 if uri.get("executable") else 0o644
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "wb") as sink:
            shutil.copyfileobj(source, sink, CHUNK)
            os.fchmod(sink.fileno(), mode)
        kind = archive_kind(name)
        if uri.get("extract", True) and not uri.get("executable") and kind:
            extract(target, kind, sandbox, max_size)
            how += ", extracted"
    return how


def _file_name(value: str) -> str:
    path = urllib.parse.urlsplit(value).path
    return posixpath.basename(path.rstrip("/"))


@contextlib.contextmanager
def as_user(user: object):
    """Act with ``user``'s identity (effective uid, gid and groups) inside
    the block; nothing to do for None. Only the supervisor's main thread
    runs then (the health checker starts later)."""
    if user is None:
        yield
        return
    saved_groups = os.getgroups()
    os.setgroups(user.groups)  # type: ignore[attr-defined]
    os.setegid(user.gid)  # type: ignore[attr-defined]
    os.seteuid(user.uid)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(saved_groups)


# ------------------------------------------------------------ the bytes
def _read_uri(value: str, user: object, sink, timeout: float, max_size: int) -> None:
    """Copy what ``value`` names into ``sink``: at most ``max_size`` bytes,
    within ``timeout`` seconds."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise FetchError(f"a file:// URI names a file of this machine, not of {parts.netloc!r}")
        path = urllib.parse.unquote(parts.path)
        with as_user(user):   # what the task's user may read, and nothing else
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as source:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FetchError(f"{path} is not a plain file")
            _copy(source, sink, value, time.monotonic() + timeout, timeout, max_size)
        return
    if parts.scheme not in ("http", "https"):
        raise FetchError(f"unsupported scheme {parts.scheme!r} (file, http and https are)")
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(value, headers={"User-Agent": "mesoslike-fetcher"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - schemes checked above
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > max_size:
                raise FetchError(f"it is {int(length)} bytes: more than the {max_size} bytes allowed (--fetcher-max-size)")
            _copy(response, sink, value, deadline, timeout, max_size)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"the server answered HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, socket.timeout):
            raise FetchError(f"no answer within {timeout:g} s (--fetcher-timeout)") from None
        raise FetchError(f"cannot reach {parts.netloc}: {getattr(reason, 'strerror', None) or reason}") from None
    except socket.timeout:
        raise FetchError(f"not downloaded within {timeout:g} s (--fetcher-timeout)") from None
    except (OSError, ValueError) as exc:
        if isinstance(exc, FetchError):
            raise
        raise FetchError(f"{type(exc).__name__}: {exc}") from None


def _copy(source, sink, value: str, deadline: float, timeout: float, max_size: int) -> None:
    total = 0
    while True:
        if time.monotonic() > deadline:
            raise FetchError(f"not downloaded within {timeout:g} s (--fetcher-timeout)")
        chunk = source.read(CHUNK)
        if not chunk:
            return
        total += len(chunk)
        if total > max_size:
            raise FetchError(f"it is more than the {max_size} bytes allowed (--fetcher-max-size)")
        sink.write(chunk)


# ------------------------------------------------------------ archives
def archive_kind(name: str) -> str:
    """"tar" or "zip" for a name with an archive's suffix, else ""."""
    lower = name.lower()
    return next((kind for suffix, kind in _ARCHIVES if lower.endswith(suffix)), "")


def _member_problem(name: str) -> str:
    """Why an archive member's name would lead out of the sandbox ("" if it does not)."""
    if not name or name.startswith("/") or "\0" in name:
        return "an empty or absolute name"
    if ".." in name.split("/"):
        return "a '..' in its name"
    return ""


def _inside(base: str, target: str) -> bool:
    """Does the link target ``target``, relative to the directory ``base``
    of the archive, stay inside it?"""
    if target.startswith("/"):
        return False
    resolved = posixpath.normpath(posixpath.join(base, target))
    return resolved != ".." and not resolved.startswith("../")


def extract(path: str, kind: str, directory: str, max_size: int) -> None:
    """Unpack the archive ``path`` into ``directory``, after checking every
    member (the module says what is refused). Raises :class:`FetchError`."""
    try:
        if kind == "zip":
            _extract_zip(path, directory, max_size)
        else:
            _extract_tar(path, directory, max_size)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise FetchError(f"cannot extract {os.path.basename(path)}: {type(exc).__name__}: {exc}") from None


def _refuse(archive: str, member: str, why: str) -> FetchError:
    return FetchError(f"the archive {os.path.basename(archive)} is refused: member {member!r} has {why}")


def _extract_tar(path: str, directory: str, max_size: int) -> None:
    with tarfile.open(path, "r:*") as archive:
        members, total = [], 0
        for member in archive:
            members.append(member)
            if len(members) > MAX_MEMBERS:
                raise FetchError(f"the archive {os.path.basename(path)} has more than {MAX_MEMBERS} members")
            problem = _member_problem(member.name)
            if not problem and member.issym() and not _inside(posixpath.dirname(member.name), member.linkname):
                problem = f"a link to {member.linkname!r}, outside the sandbox"
            if not problem and member.islnk() and _member_problem(member.linkname):
                problem = f"a hard link to {member.linkname!r}, outside the sandbox"
            if not problem and not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                problem = "a type other than file, directory or link (a device or FIFO)"
            if problem:
                raise _refuse(path, member.name, problem)
            total += member.size if member.isfile() else 0
            if total > max_size:
                raise FetchError(f"the archive {os.path.basename(path)} unpacks to more than the {max_size} bytes "
                                 "allowed (--fetcher-max-size)")
        # belt and braces: the standard library's own checks for untrusted archives (links through links
        # too), where it has them (Python 3.11.4+; Debian 12's 3.11.2 has not: the checks above hold alone)
        if hasattr(tarfile, "data_filter"):
            archive.extractall(directory, members=members, filter="data")
        else:
            archive.extractall(directory, members=members)


def _extract_zip(path: str, directory: str, max_size: int) -> None:
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise FetchError(f"the archive {os.path.basename(path)} has more than {MAX_MEMBERS} members")
        total = 0
        for member in members:
            problem = _member_problem(member.filename)
            if not problem and stat.S_ISLNK(member.external_attr >> 16):
                problem = "a symbolic link (not extracted from zip files)"
            if problem:
                raise _refuse(path, member.filename, problem)
            total += member.file_size   # zipfile stops a member at its declared size: an honest bound
            if total > max_size:
                raise FetchError(f"the archive {os.path.basename(path)} unpacks to more than the {max_size} bytes "
                                 "allowed (--fetcher-max-size)")
        for member in members:
            written = archive.extract(member, directory)
            mode = (member.external_attr >> 16) & 0o777
            if not member.is_dir() and mode & 0o111:   # keep a script's execute bits (as unzip does)
                os.chmod(written, mode & 0o755)


# --------------------------------------------------------------- the cache
class Cache:
    """The agent's fetcher cache (the module says how it works)."""

    def __init__(self, directory: str, capacity: int, stale_after: float = 3600.0) -> None:
        self.directory = directory
        self.capacity = capacity
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self._sweep(stale_after)

    def _sweep(self, stale_after: float) -> None:
        """Remove the partial downloads of supervisors that died fetching
        (older than any live download can be)."""
        now = time.time()
        for entry in os.scandir(self.directory):
            try:
                if entry.name.startswith(".fetching-") and now - entry.stat(follow_symlinks=False).st_mtime > stale_after:
                    os.unlink(entry.path)
            except OSError:
                continue

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(os.path.join(self.directory, CACHE_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _index(self) -> dict:
        try:
            with open(os.path.join(self.directory, CACHE_INDEX), "rb") as source:
                index = json.loads(source.read())
            if isinstance(index, dict) and all(isinstance(e, dict) and isinstance(e.get("size"), int)
                                               and isinstance(e.get("used"), (int, float)) for e in index.values()):
                return index
        except (OSError, ValueError):
            pass
        return {}

    def _save(self, index: dict) -> None:
        path = os.path.join(self.directory, CACHE_INDEX)
        temp = f"{path}.tmp-{os.getpid()}"
        with open(temp, "w") as sink:
            json.dump(index, sink)
        os.replace(temp, path)

    def _file(self, key: str) -> str:
        return os.path.join(self.directory, key)

    def get(self, identity: str, value: str, fill) -> tuple:
        """An open file of the bytes of ``identity`` (user and URI), from the
        cache, or made by ``fill(sink)`` and kept; and how it came."""
        key = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
        with self._locked():
            index = self._index()
            entry = index.get(key)
            if entry is not None:
                try:
                    source = open(self._file(key), "rb")   # open while locked: a later eviction cannot take it
                except FileNotFoundError:
                    del index[key]
                else:
                    entry["used"] = time.time()
                    self._save(index)
                    return source, "(from the cache)"
        # a miss: fetched without the lock (other tasks' fetches go on), kept under it
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=".fetching-")
        try:
            with os.fdopen(fd, "wb") as sink:
                fill(sink)
            size = os.path.getsize(temp)
            source = open(temp, "rb")
        except BaseException:
            os.unlink(temp)
            raise
        if size > self.capacity:
            os.unlink(temp)   # larger than the whole cache: used once, not kept
            return source, "(too large to cache)"
        with self._locked():
            index = self._index()
            os.replace(temp, self._file(key))
            index[key] = {"uri": value[:200], "size": size, "used": time.time()}
            self._evict(index, keep=key)
            self._save(index)
        return source, "(cached)"

    def _evict(self, index: dict, keep: str) -> None:
        """Least recently used files out until the rest fits."""
        total = sum(entry["size"] for entry in index.values())
        for key in sorted(index, key=lambda k: index[k]["used"]):
            if total <= self.capacity and len(index) <= MAX_CACHE_ENTRIES:
                break
            if key == keep:
                continue
            total -= index.pop(key)["size"]
            try:
                os.unlink(self._file(key))
            except FileNotFoundError:
                pass
