"""The namespace init helper (``mesoslike/agent/nsinit.c``) run by itself, as
the shared supervisor's server would start an init, on what its launch path
makes and says: the kept paths' places in a fresh private ``/tmp`` (made from
the ``/tmp`` down since stop 22), its ``R`` and ``X`` lines (formatted
without the C library's ``printf`` since then), and the file it joins each
cgroup by (a v1 cgroup's ``tasks`` since then)."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from agent_helpers import cgroup_bases, cgroups_root, require_cgroups  # noqa: F401 (fixture)
from environment import unavailable
from mesoslike.agent import nsinit

pytestmark = pytest.mark.timeout(120)


def helper_in(meta: Path) -> str:
    """The helper, built (skipped outside CI, failed in CI, without a C compiler); root needed."""
    if os.geteuid() != 0:
        unavailable("a mount namespace needs root")
    helper = nsinit.helper(str(meta))
    if helper is None:
        unavailable("no C compiler to build the namespace init helper (as root: make cc)")
    assert helper is not None
    return helper


def run_init(helper: str, spec: bytes) -> tuple[int, str, str]:
    """The init started with ``spec`` on fd 3 and a status pipe on fd 4: its exit status, what it
    said on the pipe, its task's output."""
    spec_fd = os.memfd_create("spec")
    os.write(spec_fd, spec)
    os.lseek(spec_fd, 0, os.SEEK_SET)
    read_end, write_end = os.pipe()
    try:
        done = subprocess.run([helper], env={}, pass_fds=(3, 4), timeout=60, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              preexec_fn=lambda: (os.dup2(spec_fd, 3), os.dup2(write_end, 4)) and None)
        os.close(write_end)
        said = b""
        while chunk := os.read(read_end, 65536):
            said += chunk
    finally:
        os.close(read_end)
        os.close(spec_fd)
    return done.returncode, said.decode(), done.stdout.decode()


def test_kept_paths_get_their_places_levels_below_a_fresh_private_tmp_and_a_file_in_the_way_fails(tmp_path):
    """Two kept paths whose places share two missing levels below a private ``/tmp`` the init makes:
    each place made (the shared levels once), each path seen there by the task, the init's lines
    ``R PID`` and ``X STATUS``; a file where a level must be fails the launch, naming the place."""
    helper = helper_in(tmp_path / "meta")
    (tmp_path / "sandbox").mkdir()
    tmp = tmp_path / "sandbox" / "tmp"
    kept = {}
    for name in ("one", "two"):
        kept[name] = tmp_path / f"kept-{name}"
        kept[name].mkdir()
        (kept[name] / "marker").write_text(f"{name}\n")
    keep = [(str(kept["one"]), f"{tmp}/a/b/one"), (str(kept["two"]), f"{tmp}/a/b/two")]
    spec = nsinit.encode_spec(namespaces=["mount"], hostname="", tmp=str(tmp), keep=keep, volumes=[],
                              user=None, cwd="/", env={"PATH": "/usr/bin:/bin"},
                              argv=["sh", "-c", "cat /tmp/a/b/one/marker /tmp/a/b/two/marker; exit 5"])
    code, said, out = run_init(helper, spec)
    lines = said.splitlines()
    assert code == 0 and len(lines) == 2, (code, said)
    assert lines[0].startswith("R ") and int(lines[0][2:]) > 1, said
    assert lines[1] == f"X {5 << 8}", said
    assert out == "one\ntwo\n"
    assert sorted(p.name for p in (tmp / "a" / "b").iterdir()) == ["one", "two"]   # the places, on the host
    assert (tmp.stat().st_mode & 0o7777) == 0o1777

    (tmp / "c").write_text("a file, not a directory")
    spec = nsinit.encode_spec(namespaces=["mount"], hostname="", tmp=str(tmp), keep=[(str(kept["one"]),
                              f"{tmp}/c/d/one")], volumes=[], user=None, cwd="/", env={}, argv=["/bin/true"])
    code, said, _ = run_init(helper, spec)
    assert code == 127 and said == f"F cannot make {tmp}/c/d: Not a directory\n", (code, said)


def test_the_ended_tasks_status_is_said_whole_when_it_is_a_signal_or_a_large_code(tmp_path):
    """``X`` carries the wait status as a number: a task killed by a signal, one exiting 255."""
    helper = helper_in(tmp_path / "meta")
    for command, status in (("kill -9 $$", 9), ("exit 255", 255 << 8)):
        spec = nsinit.encode_spec(namespaces=[], hostname="", tmp="", keep=[], volumes=[], user=None,
                                  cwd="/", env={}, argv=["/bin/sh", "-c", command])
        code, said, _ = run_init(helper, spec)
        assert code == 0 and said.splitlines()[-1] == f"X {status}", (command, code, said)


def test_an_init_joins_a_v1_cgroup_by_its_tasks_file_and_a_v2_one_by_its_cgroup_procs(tmp_path, cgroups_root):  # noqa: F811
    """The init moves itself (one thread) into each cgroup: by a v1 cgroup's ``tasks`` file, which the
    kernel serves without its global thread-group lock (every fork and exit of the machine waits on it
    while ``cgroup.procs`` is written), by ``cgroup.procs`` where the hierarchy has no ``tasks`` (v2).
    Seen by ``strace`` of the server and its inits: each cgroup opened once, by that file, from its
    parent's descriptor; the task is in every one of them."""
    require_cgroups()
    helper = helper_in(tmp_path / "meta")
    strace = shutil.which("strace")
    if strace is None:
        unavailable("no strace to see which file an init opens (apt-get install strace)")
    bases = cgroup_bases(cgroups_root)
    assert bases
    cgroups = [os.path.join(base, "joined") for base in bases]
    for directory in cgroups:
        os.makedirs(directory)
    log = tmp_path / "strace.log"
    traced = tmp_path / "nsinit-traced"   # the helper under strace, with the helper's feature marks
    traced.write_text(f"#!/bin/sh\n# {nsinit.INLINE_FEATURE.decode()} {nsinit.CHANNEL_FEATURE.decode()}\n"
                      f"exec {strace} -f -qq -o {log} -e trace=openat {helper} \"$@\"\n")
    traced.chmod(0o755)
    channel = nsinit.StatusChannel()
    server = nsinit.Server(str(traced), channel=channel)
    try:
        spec = nsinit.encode_spec(namespaces=["pid"], hostname="", tmp="", keep=[], volumes=[], user=None,
                                  cwd=str(tmp_path), env={}, argv=["/bin/cat", "/proc/self/cgroup"], cgroups=cgroups)
        out = tmp_path / "out"
        assert server.submit_channel(5, spec, str(out), str(tmp_path / "err"), None, False)
        said = b""
        deadline = time.monotonic() + 60   # the inits are strace's children here: their X line says the end
        while b"X " not in said and b"F " not in said and time.monotonic() < deadline:
            select.select([channel.read_end], [], [], 1.0)
            said += b"".join(line + b"\n" for _, line in channel.read())
        assert said.startswith(b"R ") and said.endswith(b"X 0\n"), said
    finally:
        server.close()
        channel.close()
    shown = out.read_text()
    assert sum(line.endswith(f"/{cgroups_root}/joined") for line in shown.split()) == len(bases), shown
    opened = [line for line in log.read_text().splitlines() if "joined/" in line]
    expected = sorted("tasks" if os.path.exists(os.path.join(base, "tasks")) else "cgroup.procs" for base in bases)
    assert sorted(line.split('"joined/')[1].split('"')[0] for line in opened) == expected, opened
    assert all(line.split()[1].startswith("openat(") and "= -1" not in line for line in opened), opened
