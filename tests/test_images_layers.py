"""Unpacking layers from a registry — hostile until unpacked — and making
a root filesystem of them: an overlay mount, or a flattened copy
(docs/containers.rst, "Images"). Real tars, real files, a real overlay
mount (as root)."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from environment import unavailable
from image_registry import busybox_image, dir_entry, file_entry, symlink_entry, tar_layer
from mesoslike.agent.images import errors, flatten, mount_overlay, unmount
from mesoslike.agent.images.errors import ImageError
from mesoslike.agent.images.layers import MARKERS, OVERLAY, OVERLAY_OPAQUE_XATTR, unpack_layer

pytestmark = pytest.mark.timeout(60)

MiB = 1 << 20


def _unpack(layer, directory: Path, **options):
    directory.mkdir(parents=True, exist_ok=True)
    compression = "gzip" if layer.data[:2] == b"\x1f\x8b" else "tar"
    options.setdefault("max_bytes", 64 * MiB)
    return unpack_layer(io.BytesIO(layer.data), compression, str(directory), **options)


def _require_root() -> None:
    if os.geteuid() != 0:
        unavailable("needs root (device nodes for whiteouts, trusted.* attributes, mounts)")


def test_a_layer_unpacks_with_modes_links_and_its_uncompressed_digest(tmp_path):
    layer = tar_layer([dir_entry("bin"), file_entry("bin/tool", b"#!/bin/sh\necho hi\n", 0o4755, uid=0, gid=0),
                       symlink_entry("bin/sh", "/bin/busybox"), symlink_entry("bin/tool2", "bin/tool", hard=True),
                       file_entry("home/user/notes", b"x", 0o600, uid=1000, gid=1000)])
    stats = _unpack(layer, tmp_path / "layer")
    root = tmp_path / "layer"
    assert stats.diff_id == layer.diff_id and stats.entries == 5 and stats.skipped_devices == 0
    assert (root / "bin/tool").read_bytes() == b"#!/bin/sh\necho hi\n"
    assert stat.S_IMODE((root / "bin/tool").stat().st_mode) == 0o4755   # setuid kept (0700 cache, root only)
    assert os.readlink(root / "bin/sh") == "/bin/busybox"   # an absolute link is data: resolved in the container
    assert (root / "bin/tool2").stat().st_ino == (root / "bin/tool").stat().st_ino
    if os.geteuid() == 0:
        assert (root / "home/user/notes").stat().st_uid == 1000
    assert stats.size >= len(b"#!/bin/sh\necho hi\n")


@pytest.mark.parametrize("entries, cause", [
    ([file_entry("../escape", b"x")], "a '..' in its name"),
    ([file_entry("a/../../escape", b"x")], "a '..' in its name"),
    ([file_entry("/etc/escape", b"x")], "an absolute name"),
    ([symlink_entry("link", "OUTSIDE"), file_entry("link/escape", b"x")], "which is not a directory (a link?)"),
    ([symlink_entry("link", "OUTSIDE"), dir_entry("link/sub")], "which is not a directory (a link?)"),
    ([symlink_entry("hard", "../OUTSIDE/victim", hard=True)], "a hard link to '../OUTSIDE/victim'"),
    ([symlink_entry("link", "OUTSIDE"), symlink_entry("hard", "link/victim", hard=True)],
     "which is not a directory (a link?)"),
    ([symlink_entry("link", "OUTSIDE/victim"), symlink_entry("hard", "link", hard=True)], "not a regular file"),
    ([symlink_entry("hard", "never-there", hard=True)], "not in this layer"),
    ([file_entry(".wh.", b"")], "a whiteout that names nothing"),
])
def test_hostile_members_refuse_the_layer_and_write_nothing_outside_it(tmp_path, entries, cause):
    outside = tmp_path / "OUTSIDE"
    outside.mkdir()
    (outside / "victim").write_text("untouched")
    layer_dir = tmp_path / "layer"
    layer_dir.mkdir()
    entries = [(info, data) for info, data in entries]
    for info, _ in entries:   # links to "OUTSIDE" mean the directory next to the layer's
        if info.linkname.startswith("OUTSIDE"):
            info.linkname = str(outside) + info.linkname[len("OUTSIDE"):]
    with pytest.raises(ImageError) as caught:
        _unpack(tar_layer(entries), layer_dir)
    assert caught.value.kind == errors.BAD_IMAGE and cause in str(caught.value), str(caught.value)
    assert sorted(os.listdir(outside)) == ["victim"] and (outside / "victim").read_text() == "untouched"
    assert not (tmp_path / "escape").exists() and not Path("/etc/escape").exists()


def test_device_nodes_are_skipped_and_fifos_made(tmp_path):
    device = tarfile.TarInfo("dev/sda")
    device.type, device.devmajor, device.devminor, device.mode = tarfile.BLKTYPE, 8, 0, 0o666
    console = tarfile.TarInfo("dev/console")
    console.type, console.devmajor, console.devminor = tarfile.CHRTYPE, 5, 1
    fifo = tarfile.TarInfo("run/pipe")
    fifo.type = tarfile.FIFOTYPE
    stats = _unpack(tar_layer([(device, None), (console, None), (fifo, None)]), tmp_path / "layer")
    assert stats.skipped_devices == 2
    assert not (tmp_path / "layer/dev/sda").exists() and not (tmp_path / "layer/dev/console").exists()
    assert stat.S_ISFIFO((tmp_path / "layer/run/pipe").lstat().st_mode)


def test_a_layer_unpacking_past_its_bound_is_refused(tmp_path):
    bomb = tar_layer([file_entry("zeros", bytes(8 * MiB))])
    assert len(bomb.data) < 64 * 1024   # a few KiB of gzip...
    with pytest.raises(ImageError) as caught:
        _unpack(bomb, tmp_path / "layer", max_bytes=MiB)   # ... unpacking to 8 MiB
    assert caught.value.kind == errors.TOO_LARGE and "more than 1048576 bytes" in str(caught.value)
    many = tar_layer([file_entry(f"f{n}") for n in range(20)])
    with pytest.raises(ImageError, match="more than 10 members") as caught:
        _unpack(many, tmp_path / "layer2", max_entries=10)
    assert caught.value.kind == errors.TOO_LARGE


def test_a_layer_that_is_not_a_tar_is_refused(tmp_path):
    (tmp_path / "layer").mkdir()
    with pytest.raises(ImageError, match="not a valid tar") as caught:
        unpack_layer(io.BytesIO(b"\x1f\x8b" + b"garbage" * 100), "gzip", str(tmp_path / "layer"), max_bytes=MiB)
    assert caught.value.kind == errors.BAD_IMAGE


def test_zstd_layers_unpack_with_the_zstd_program(tmp_path):
    if shutil.which("zstd") is None:
        unavailable("no zstd program (as root: make image-tools)")
    raw = tar_layer([file_entry("hello", b"zstd\n")], compress=False)
    compressed = subprocess.run(["zstd", "-c", "-q"], input=raw.data, capture_output=True, check=True).stdout
    (tmp_path / "layer").mkdir()
    stats = unpack_layer(io.BytesIO(compressed), "zstd", str(tmp_path / "layer"), max_bytes=MiB)
    assert stats.diff_id == raw.diff_id and (tmp_path / "layer/hello").read_text() == "zstd\n"


def _unpacked_busybox(tmp_path: Path, whiteouts: str) -> list[str]:
    layers = []
    for number, layer in enumerate(busybox_image().layers):
        directory = tmp_path / f"{whiteouts}-{number}"
        assert _unpack(layer, directory, whiteouts=whiteouts).whiteouts == whiteouts
        layers.append(str(directory))
    return layers


def _assert_busybox_view(root: Path) -> None:
    """What the two busybox layers look like stacked: whiteouts applied."""
    assert (root / "etc/motd").read_bytes().startswith(b"built in the test")
    assert not (root / "etc/remove-me").exists() and not os.path.lexists(root / "etc/.wh.remove-me")
    assert sorted(os.listdir(root / "opt/hidden")) == ["new"]   # opaque: layer 1's "old" hidden
    assert os.readlink(root / "bin/sh") == "busybox" and (root / "bin/busybox").stat().st_size > 100_000
    assert (root / "etc/passwd").exists()


def test_whiteouts_become_overlay_marks_as_root(tmp_path):
    _require_root()
    upper = Path(_unpacked_busybox(tmp_path, OVERLAY)[1])
    whiteout = (upper / "etc/remove-me").lstat()
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == 0
    assert os.getxattr(upper / "opt/hidden", OVERLAY_OPAQUE_XATTR) == b"y"
    assert not os.path.lexists(upper / "etc/.wh.remove-me")


@pytest.mark.parametrize("whiteouts", [OVERLAY, MARKERS])
def test_flattening_applies_whiteouts_and_opaque_directories(tmp_path, whiteouts):
    if whiteouts == OVERLAY:
        _require_root()
    layers = _unpacked_busybox(tmp_path, whiteouts)
    target = tmp_path / "rootfs"
    target.mkdir()
    flatten(layers, str(target))
    _assert_busybox_view(target)
    assert (target / "opt/hidden/new").read_text() == "layer 2\n"
    (target / "etc/passwd").write_text("changed by the task")   # a copy: the cached layer stays as it was
    assert b"root:x:0:0" in (Path(layers[0]) / "etc/passwd").read_bytes()


def test_an_overlay_mount_shows_the_stacked_layers_and_writes_to_the_upper_dir(tmp_path):
    _require_root()
    layers = _unpacked_busybox(tmp_path, OVERLAY)
    upper, work, target = tmp_path / "upper", tmp_path / "work", tmp_path / "rootfs"
    for directory in (upper, work, target):
        directory.mkdir()
    mount_overlay(layers, str(upper), str(work), str(target))
    try:
        _assert_busybox_view(target)
        (target / "etc/passwd").write_text("changed by the task")
        assert (upper / "etc/passwd").read_text() == "changed by the task"
        assert b"root:x:0:0" in (Path(layers[0]) / "etc/passwd").read_bytes()
        result = subprocess.run(["chroot", str(target), "/bin/sh", "-c", "echo $((6 * 7)); cat /etc/motd"],
                                capture_output=True, text=True, timeout=30)
        assert result.stdout.startswith("42\nbuilt in the test"), result.stderr
    finally:
        unmount(str(target))
    assert not os.listdir(target)


_NAMES = st.sampled_from(["a", "a/b", "a/b/c", "./a/b", "b", "../a", "/a/b", "a/../../b", ".wh.a", "a/.wh..wh..opq",
                          "a/.wh.b", "x" * 300 + "/a"])
_KINDS = st.sampled_from(["file", "dir", "symlink", "symlink", "hardlink", "fifo", "device"])


@settings(max_examples=120)
@example(members=[("symlink", "a", "OUTSIDE"), ("file", "a/b", "")])   # through a link
@example(members=[("symlink", "a", "OUTSIDE"), ("dir", "a/b", ""), ("file", "a/b/c", "")])
@example(members=[("symlink", "a", "OUTSIDE"), ("hardlink", "b", "a/victim")])   # a hard link through a link
@example(members=[("symlink", "a", "OUTSIDE"), ("file", "a/.wh.victim", "")])   # a whiteout through a link
@example(members=[("symlink", "a", "OUTSIDE"), ("file", "a/.wh..wh..opq", "")])
@given(st.lists(st.tuples(_KINDS, _NAMES, st.sampled_from(["a/b", "../out", "OUTSIDE", "OUTSIDE/victim"])),
                min_size=1, max_size=10))
def test_no_layer_writes_outside_its_directory_or_fails_other_than_cleanly(tmp_path_factory, members):
    """Any sequence of members — ``..``, absolute names, links out and
    through links, whiteouts, devices — either unpacks inside the layer's
    directory or is refused with an ImageError; the directory next to it
    (which some links point at) is never touched."""
    base = tmp_path_factory.mktemp("fuzz")
    outside = base / "OUTSIDE"
    outside.mkdir()
    (outside / "victim").write_text("untouched")
    entries = []
    for kind, name, target in members:
        target = target.replace("OUTSIDE", str(outside))
        if kind == "file":
            entries.append(file_entry(name, b"data"))
        elif kind == "dir":
            entries.append(dir_entry(name))
        elif kind in ("symlink", "hardlink"):
            entries.append(symlink_entry(name, target, hard=kind == "hardlink"))
        else:
            info = tarfile.TarInfo(name)
            info.type = tarfile.FIFOTYPE if kind == "fifo" else tarfile.CHRTYPE
            entries.append((info, None))
    layer_dir = base / "layer"
    try:
        _unpack(tar_layer(entries), layer_dir)
    except ImageError as exc:
        assert exc.kind == errors.BAD_IMAGE, str(exc)
    assert sorted(os.listdir(outside)) == ["victim"] and (outside / "victim").read_text() == "untouched"
    assert sorted(os.listdir(base)) == ["OUTSIDE", "layer"]
