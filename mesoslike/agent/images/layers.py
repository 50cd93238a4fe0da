"""Unpacking one layer (a tar, plain, gzip or zstd) into a directory of its
own, safely: the tar comes from a registry and is hostile until unpacked.

- **No escape.** A member whose name is absolute, holds a NUL or a ``..``
  component is refused (the whole layer: it is not an image a proper
  tool makes). Members are created relative to directory descriptors
  opened without following symbolic links, so a member that would go
  *through* a link (``a -> /etc`` then ``a/passwd``) is refused too, and
  nothing is ever written outside the layer's directory. Symbolic links
  themselves may point anywhere (``/bin/sh -> busybox`` is ordinary):
  they are data, resolved only inside the container's root.
- **Hard links** must name a regular file unpacked earlier from the same
  layer (checked the same way).
- **No devices.** Character and block devices are skipped (counted): the
  container runtime makes ``/dev``; a device node in a cache is a way
  around the devices cgroup. FIFOs are made. Extended attributes (file
  capabilities, ``trusted.overlay.*``) are not applied. Owners (numeric,
  as in the tar) and modes, setuid included, are kept when running as
  root — the cache directory is 0700, so they matter only inside
  containers.
- **Whiteouts** (``.wh.NAME``: NAME of a lower layer is deleted;
  ``.wh..wh..opq``: the directory hides its lower contents) become
  overlayfs's own marks when running as root — a 0/0 character device,
  and the ``trusted.overlay.opaque=y`` attribute — so the layer
  directories can be overlay lower directories as they are; without root
  they stay as ``.wh.`` files, which :func:`.rootfs.flatten` understands.
- **Bounds.** At most ``max_bytes`` of uncompressed tar (a gzip bomb
  stops there) and ``max_entries`` members.
- **Integrity.** The sha256 of the uncompressed stream is returned (the
  image config's ``diff_id``, checked by the caller).

gzip and plain tars use the standard library; zstd layers
(``tar+zstd``) need the ``zstd`` program (Debian's ``zstd``), which is
run as a filter: without it such a layer is refused, saying so.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from .errors import BAD_IMAGE, CACHE, TOO_LARGE, UNSUPPORTED, ImageError
from .manifest import LAYER_GZIP, LAYER_TAR, LAYER_ZSTD

__all__ = ["LayerStats", "unpack_layer", "WHITEOUT_PREFIX", "OPAQUE_MARK", "OVERLAY_OPAQUE_XATTR", "member_path",
           "disk_usage", "OVERLAY", "MARKERS"]

WHITEOUT_PREFIX = ".wh."
OPAQUE_MARK = ".wh..wh..opq"
_META_PREFIX = ".wh..wh."
OVERLAY_OPAQUE_XATTR = "trusted.overlay.opaque"
#: how whiteouts are kept: as overlayfs marks (root) or as the tar's ``.wh.`` files
OVERLAY, MARKERS = "overlay", "markers"
CHUNK = 1 << 16
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: errors of the disk rather than of the layer
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


@dataclass(frozen=True)
class LayerStats:
    """What unpacking found: the uncompressed tar's digest (``diff_id``),
    the bytes the directory takes on disk, members unpacked, devices
    skipped, and how whiteouts are kept (:data:`OVERLAY` or :data:`MARKERS`)."""

    diff_id: str
    size: int
    entries: int
    skipped_devices: int
    whiteouts: str


class _Bad(Exception):
    """A member is refused (the message says why)."""


class _CountingReader:
    """Reads the decompressed stream, hashing it and stopping past ``limit`` bytes."""

    def __init__(self, source: BinaryIO, limit: int) -> None:
        self.source, self.limit = source, limit
        self.hasher = hashlib.sha256()
        self.total = 0

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(CHUNK if size is None or size < 0 else size)
        self.total += len(data)
        if self.total > self.limit:
            raise ImageError(TOO_LARGE, f"it unpacks to more than {self.limit} bytes")
        self.hasher.update(data)
        return data

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


def member_path(name: str) -> list[str]:
    """The components of a member's name inside its layer (``./a//b/`` →
    ``["a", "b"]``); raises ``ValueError`` saying why a name is refused."""
    if "\0" in name:
        raise ValueError("a NUL in its name")
    if name.startswith("/"):
        raise ValueError("an absolute name")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError("a '..' in its name")
    return parts


@dataclass
class _Directory:
    parts: list[str]
    mode: int
    uid: int
    gid: int
    mtime: float


class _Unpacker:
    def __init__(self, root: str, max_entries: int, owners: bool, whiteouts: str) -> None:
        self.root_fd = os.open(root, _DIR_FLAGS)
        self.max_entries, self.owners, self.whiteouts = max_entries, owners, whiteouts
        self.entries = self.skipped_devices = 0
        self.directories: list[_Directory] = []

    def close(self) -> None:
        os.close(self.root_fd)

    # ---------------------------------------------------------- walking
    def _open_parent(self, parts: list[str], create: bool = True) -> int:
        """A descriptor of the directory holding ``parts[-1]``, made on the
        way when missing; never through a symbolic link."""
        fd = os.dup(self.root_fd)
        try:
            for part in parts[:-1]:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise _Bad(f"its directory {part!r} does not exist") from None
                    os.mkdir(part, 0o755, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _Bad(f"a path through {part!r}, which is not a directory (a link?)") from None
                    raise
                os.close(fd)
                fd = child
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _clear(self, parent: int, leaf: str, keep_directory: bool = False) -> None:
        """Remove what ``leaf`` is in ``parent`` (a later member replaces it)."""
        try:
            status = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(status.st_mode):
            if not keep_directory:
                shutil.rmtree(leaf, dir_fd=parent)
        else:
            os.unlink(leaf, dir_fd=parent)

    # ---------------------------------------------------------- members
    def add(self, member: tarfile.TarInfo, archive: tarfile.TarFile) -> None:
        self.entries += 1
        if self.entries > self.max_entries:
            raise ImageError(TOO_LARGE, f"a layer has more than {self.max_entries} members")
        try:
            parts = member_path(member.name)
        except ValueError as exc:
            raise _Bad(str(exc)) from None
        if not parts:
            return   # the layer's root ("./"): its own directory stands for it
        leaf = parts[-1]
        if any(part.startswith(_META_PREFIX) for part in parts) and leaf != OPAQUE_MARK:
            return   # aufs's own bookkeeping (.wh..wh..plnk), as Docker skips it
        if leaf.startswith(WHITEOUT_PREFIX) and self._whiteout(parts):
            return
        if member.ischr() or member.isblk():
            self.skipped_devices += 1
            return
        parent = self._open_parent(parts)
        try:
            self._create(parent, leaf, parts, member, archive)
        finally:
            os.close(parent)

    def _whiteout(self, parts: list[str]) -> bool:
        """Handle a whiteout member; False when it is to be unpacked as it is (markers)."""
        leaf = parts[-1]
        hidden = leaf[len(WHITEOUT_PREFIX):]
        if leaf != OPAQUE_MARK and (not hidden or hidden in (".", "..")):
            raise _Bad("a whiteout that names nothing")
        if self.whiteouts == MARKERS:
            return False
        if leaf == OPAQUE_MARK:
            directory = self._open_parent(parts)   # the mark's directory, made if missing
            try:
                os.setxattr(directory, OVERLAY_OPAQUE_XATTR, b"y")
            finally:
                os.close(directory)
            return True
        parent = self._open_parent(parts)
        try:
            self._clear(parent, hidden)
            os.mknod(hidden, stat.S_IFCHR | 0o000, os.makedev(0, 0), dir_fd=parent)
        finally:
            os.close(parent)
        return True

    def _create(self, parent: int, leaf: str, parts: list[str], member: tarfile.TarInfo,
                archive: tarfile.TarFile) -> None:
        mode = member.mode & 0o7777
        if member.isdir():
            self._clear(parent, leaf, keep_directory=True)
            try:
                os.mkdir(leaf, 0o700, dir_fd=parent)
            except FileExistsError:
                pass
            self.directories.append(_Directory(parts, mode, member.uid, member.gid, member.mtime))
            return
        self._clear(parent, leaf)
        if member.isreg():
            fd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=parent)
            with os.fdopen(fd, "wb") as sink:
                source = archive.extractfile(member)
                if source is not None:
                    shutil.copyfileobj(source, sink, CHUNK)
                if self.owners:
                    os.fchown(fd, member.uid, member.gid)
                os.fchmod(fd, mode)   # after chown, which clears setuid bits
                os.utime(fd, (member.mtime, member.mtime))
        elif member.issym():
            if "\0" in member.linkname or len(member.linkname) > 4095:
                raise _Bad("a link target with a NUL or longer than 4095 bytes")
            os.symlink(member.linkname, leaf, dir_fd=parent)
            if self.owners:
                os.chown(leaf, member.uid, member.gid, dir_fd=parent, follow_symlinks=False)
            os.utime(leaf, (member.mtime, member.mtime), dir_fd=parent, follow_symlinks=False)
        elif member.islnk():
            self._hard_link(parent, leaf, member.linkname)
        elif member.isfifo():
            os.mkfifo(leaf, mode & 0o777, dir_fd=parent)
            if self.owners:
                os.chown(leaf, member.uid, member.gid, dir_fd=parent, follow_symlinks=False)
        else:
            raise _Bad(f"an unknown type {member.type!r}")

    def _hard_link(self, parent: int, leaf: str, linkname: str) -> None:
        try:
            target = member_path(linkname)
        except ValueError as exc:
            raise _Bad(f"a hard link to {linkname[:200]!r}, with {exc}") from None
        if not target:
            raise _Bad("a hard link to the layer's root")
        source = self._open_parent(target, create=False)
        try:
            try:
                status = os.stat(target[-1], dir_fd=source, follow_symlinks=False)
            except FileNotFoundError:
                raise _Bad(f"a hard link to {linkname[:200]!r}, not in this layer (before it)") from None
            if not stat.S_ISREG(status.st_mode):
                raise _Bad(f"a hard link to {linkname[:200]!r}, which is not a regular file")
            os.link(target[-1], leaf, src_dir_fd=source, dst_dir_fd=parent, follow_symlinks=False)
        finally:
            os.close(source)

    def finish_directories(self) -> None:
        """Directories' owners, modes and times, once their contents are in."""
        for directory in reversed(self.directories):
            try:
                parent = self._open_parent(directory.parts, create=False)
            except (_Bad, OSError):
                continue   # a later member replaced a directory above it
            try:
                fd = os.open(directory.parts[-1], _DIR_FLAGS, dir_fd=parent)
            except OSError:
                continue   # replaced by a later member
            finally:
                os.close(parent)
            try:
                if self.owners:
                    os.fchown(fd, directory.uid, directory.gid)
                os.fchmod(fd, directory.mode)
                os.utime(fd, (directory.mtime, directory.mtime))
            finally:
                os.close(fd)


@contextlib.contextmanager
def _decompressed(blob: BinaryIO, compression: str) -> Iterator[BinaryIO]:
    if compression == LAYER_TAR:
        yield blob
    elif compression == LAYER_GZIP:
        with gzip.GzipFile(fileobj=blob, mode="rb") as stream:
            yield stream  # type: ignore[misc]
    elif compression == LAYER_ZSTD:
        zstd = shutil.which("zstd")
        if zstd is None:
            raise ImageError(UNSUPPORTED, "a layer is zstd-compressed and this machine has no zstd program "
                                          "(apt-get install zstd)")
        try:
            blob.fileno()
            source: BinaryIO = blob
        except (AttributeError, OSError):   # an in-memory blob: the program reads files
            source = tempfile.TemporaryFile()
            shutil.copyfileobj(blob, source)
            source.seek(0)
        process = subprocess.Popen([zstd, "-d", "-c", "-q"], stdin=source, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
        assert process.stdout is not None
        try:
            yield process.stdout  # type: ignore[misc]
        finally:
            process.stdout.close()
            process.kill()
            process.wait()
    else:
        raise ImageError(UNSUPPORTED, f"unknown layer compression {compression!r}")


def unpack_layer(blob: BinaryIO, compression: str, directory: str, *, max_bytes: int, max_entries: int = 1_000_000,
                 whiteouts: str | None = None) -> LayerStats:
    """Unpack the layer ``blob`` (positioned at its start) into the empty
    directory ``directory`` (the module says how). ``whiteouts``:
    :data:`OVERLAY` or :data:`MARKERS` (default: overlay marks when
    running as root). Raises :class:`ImageError`: bad_image naming the
    refused member, too_large, unsupported, cache (the disk failed)."""
    owners = os.geteuid() == 0
    whiteouts = whiteouts or (OVERLAY if owners else MARKERS)
    unpacker = _Unpacker(directory, max_entries, owners, whiteouts)
    member_name = ""
    try:
        with _decompressed(blob, compression) as stream:
            reader = _CountingReader(stream, max_bytes)
            with tarfile.open(fileobj=reader, mode="r|") as archive:  # type: ignore[call-overload]
                for member in archive:
                    member_name = member.name
                    unpacker.add(member, archive)
            reader.drain()   # the end-of-archive blocks count in the digest too
        if compression == LAYER_ZSTD and reader.total == 0:
            raise ImageError(BAD_IMAGE, "a zstd layer did not decompress")
        unpacker.finish_directories()
        return LayerStats("sha256:" + reader.hasher.hexdigest(), disk_usage(directory), unpacker.entries,
                          unpacker.skipped_devices, whiteouts)
    except _Bad as exc:
        raise ImageError(BAD_IMAGE, f"a layer is refused: its member {member_name[:200]!r} has {exc}") from None
    except (ValueError, OverflowError) as exc:   # times or owners out of range
        raise ImageError(BAD_IMAGE, f"a layer is refused: its member {member_name[:200]!r} has {exc}") from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ImageError(BAD_IMAGE, f"a layer is not a valid tar ({type(exc).__name__}: {exc})") from None
    except OSError as exc:
        if exc.errno in _DISK_ERRNOS:
            raise ImageError(CACHE, f"the image cache could not be written: {exc.strerror}") from None
        raise ImageError(BAD_IMAGE, f"a layer is refused: its member {member_name[:200]!r} could not be made "
                                    f"({exc.strerror or exc})") from None
    finally:
        unpacker.close()


def disk_usage(path: str) -> int:
    """Bytes the tree ``path`` takes on disk (blocks; hard links once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        total += os.lstat(current).st_blocks * 512
        for entry in entries:
            status = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(status.st_mode):
                stack.append(entry.path)
            elif (status.st_dev, status.st_ino) not in seen:
                seen.add((status.st_dev, status.st_ino))
                total += status.st_blocks * 512
    return total
