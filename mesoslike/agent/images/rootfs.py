"""A task's root filesystem from an image's unpacked layers, two ways:

- :func:`mount_overlay`: an overlay mount, the layers (read-only, shared
  by every task of the image) as lower directories and a per-task upper
  and work directory the caller supplies; what the task writes goes to
  its upper directory. Needs root (or a user namespace) and a kernel with
  overlayfs; nothing is copied, so it costs a mount (a few ms) whatever
  the image's size.
- :func:`flatten`: a copy of the layers, bottom first, into one
  directory, whiteouts applied; works anywhere, costs the image's size in
  time and disk for every task.

Both understand whiteouts in either form :mod:`.layers` keeps them.
The mount options put the lower directories relative to the layers'
common parent (``mount`` runs there) to keep them short: the kernel takes
at most a page (4096 bytes) of options, about 60 layers this way.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from typing import Sequence

from .layers import OPAQUE_MARK, OVERLAY_OPAQUE_XATTR, WHITEOUT_PREFIX

__all__ = ["overlay_options", "mount_overlay", "unmount", "flatten", "MAX_MOUNT_OPTIONS"]

MAX_MOUNT_OPTIONS = 4000


def overlay_options(layers: Sequence[str], upper: str, work: str) -> tuple[str, str]:
    """The working directory and ``-o`` options of an overlay mount of
    ``layers`` (bottom first) with ``upper`` and ``work``. Raises
    ``ValueError`` when there are no layers, they do not share a parent,
    or the options are too long for the kernel."""
    if not layers:
        raise ValueError("an overlay needs at least one layer")
    parent = os.path.dirname(os.path.abspath(layers[0]))
    if any(os.path.dirname(os.path.abspath(layer)) != parent for layer in layers):
        raise ValueError("the layers of an overlay must share one parent directory")
    names = [os.path.basename(os.path.abspath(layer)) for layer in reversed(layers)]   # the top layer first
    if any(c in name for name in names for c in ":,\\") or any(c in path for path in (upper, work) for c in ",:\\"):
        raise ValueError("a layer, upper or work path holds ':', ',' or '\\'")
    options = f"lowerdir={':'.join(names)},upperdir={os.path.abspath(upper)},workdir={os.path.abspath(work)}"
    if len(options) > MAX_MOUNT_OPTIONS:
        raise ValueError(f"{len(layers)} layers make overlay options of {len(options)} bytes (the kernel takes "
                         f"{MAX_MOUNT_OPTIONS}): flatten this image instead")
    return parent, options


def mount_overlay(layers: Sequence[str], upper: str, work: str, target: str) -> None:
    """Mount the overlay of ``layers`` on ``target`` (``mount -t overlay``);
    raises ``OSError`` with mount's message when the kernel refuses."""
    directory, options = overlay_options(layers, upper, work)
    result = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, os.path.abspath(target)],
                            cwd=directory, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise OSError(f"cannot mount the image's overlay on {target}: {result.stderr.strip() or result.returncode}")


def unmount(target: str) -> None:
    """Unmount ``target`` (lazily, so a process still in it does not stop us)."""
    result = subprocess.run(["umount", "-l", target], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise OSError(f"cannot unmount {target}: {result.stderr.strip() or result.returncode}")


def _is_whiteout(status: os.stat_result) -> bool:
    return stat.S_ISCHR(status.st_mode) and status.st_rdev == 0


def _is_opaque(path: str) -> bool:
    try:
        return os.getxattr(path, OVERLAY_OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _remove(path: str) -> None:
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(status.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _copy_metadata(path: str, status: os.stat_result, owners: bool) -> None:
    if owners:
        os.chown(path, status.st_uid, status.st_gid, follow_symlinks=False)
    if not stat.S_ISLNK(status.st_mode):
        os.chmod(path, stat.S_IMODE(status.st_mode))
    os.utime(path, ns=(status.st_mtime_ns, status.st_mtime_ns), follow_symlinks=False)


def flatten(layers: Sequence[str], target: str) -> None:
    """Copy ``layers`` (bottom first) into the empty directory ``target``,
    applying each layer's whiteouts and opaque directories to what the
    layers below put there. Owners are kept when running as root; hard
    links within a layer stay hard links."""
    owners = os.geteuid() == 0
    for layer in layers:
        links: dict[tuple[int, int], str] = {}
        directories: list[tuple[str, os.stat_result]] = []
        _merge(layer, target, owners, links, directories)
        for path, status in reversed(directories):
            _copy_metadata(path, status, owners)


def _merge(source: str, target: str, owners: bool, links: dict[tuple[int, int], str],
           directories: list[tuple[str, os.stat_result]]) -> None:
    """Merge the directory ``source`` of a layer into ``target`` (a real directory)."""
    entries = sorted(os.scandir(source), key=lambda entry: entry.name)
    names = {entry.name for entry in entries}
    if OPAQUE_MARK in names or _is_opaque(source):
        for existing in os.listdir(target):
            _remove(os.path.join(target, existing))
    for entry in entries:
        status = entry.stat(follow_symlinks=False)
        if entry.name == OPAQUE_MARK:
            continue
        if entry.name.startswith(WHITEOUT_PREFIX):
            _remove(os.path.join(target, entry.name[len(WHITEOUT_PREFIX):]))
            continue
        destination = os.path.join(target, entry.name)
        if _is_whiteout(status):
            _remove(destination)
            continue
        if stat.S_ISDIR(status.st_mode):
            if not os.path.isdir(destination) or os.path.islink(destination):
                _remove(destination)
                os.mkdir(destination, 0o700)
            directories.append((destination, status))
            _merge(entry.path, destination, owners, links, directories)
            continue
        _remove(destination)
        key = (status.st_dev, status.st_ino)
        if status.st_nlink > 1 and key in links:
            os.link(links[key], destination, follow_symlinks=False)
            continue
        if stat.S_ISREG(status.st_mode):
            with open(entry.path, "rb") as reader:
                fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as writer:
                    shutil.copyfileobj(reader, writer, 1 << 20)
        elif stat.S_ISLNK(status.st_mode):
            os.symlink(os.readlink(entry.path), destination)
        elif stat.S_ISFIFO(status.st_mode):
            os.mkfifo(destination, 0o600)
        else:
            continue   # devices are never unpacked (layers.py); sockets mean nothing in an image
        _copy_metadata(destination, status, owners)
        if status.st_nlink > 1:
            links[key] = destination
