"""The namespace init helper (``mesoslike/agent/nsinit.c``) run by itself, as
the shared supervisor's server would start an init, on what its launch path
makes and says: the kept paths' places in a fresh private ``/tmp`` (made from
the ``/tmp`` down since stop 22), and its ``R`` and ``X`` lines (formatted
without the C library's ``printf`` since then)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

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
