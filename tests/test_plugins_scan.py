"""``mesoslike.plugins`` reads the installed entry points without importing
``importlib.metadata`` (~15 ms of every ``mesoslike run``), and finds what
``importlib.metadata.entry_points`` finds, in its order: checked on this
installation and on made-up ``sys.path`` directories (a distribution twice,
egg-info, none, comments, other groups)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from mesoslike import plugins

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parent.parent
GROUPS = [*plugins.GROUPS, "console_scripts", "pytest11"]


def metadata(group):
    return [(entry.name, entry.value) for entry in importlib.metadata.entry_points(group=group)]


@pytest.mark.parametrize("group", GROUPS)
def test_the_scan_finds_what_importlib_metadata_finds_here(group):
    scanned = plugins._scan_entry_points(group)
    assert scanned is not None
    assert scanned == metadata(group)
    if group == plugins.COMMANDS:
        assert ("run", "mesoslike_frameworks.command_cli:run") in scanned


def distribution(directory: Path, name: str, text: str | None) -> None:
    directory.mkdir(parents=True)
    if text is not None:
        (directory / "entry_points.txt").write_text(text)
    (directory / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1\n")


def test_the_scan_reads_made_up_paths_as_importlib_metadata_does(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    distribution(first / "alpha_pkg-1.0.dist-info", "alpha-pkg",
                 "stray = before:any_section\n# a comment\n[mesoslike.commands]\nhello = alpha.cli:hello\n"
                 "  spaced =  alpha.cli : spaced  \n[other.group]\nx = y:z\n")
    distribution(first / "beta.egg-info", "beta", "[mesoslike.commands]\nbeta = beta:main\n")
    distribution(first / "gamma-2.0.dist-info", "gamma", None)   # no entry points
    # the same distributions again later on the path (another version): hidden by the first ones
    distribution(second / "Alpha.Pkg-2.0.dist-info", "Alpha.Pkg", "[mesoslike.commands]\nhello = other:hello\n")
    distribution(second / "gamma-3.0.dist-info", "gamma", "[mesoslike.commands]\ngamma = gamma:main\n")
    distribution(second / "delta-1.0.dist-info", "delta", "[mesoslike.commands]\ndelta = delta:main\n")
    monkeypatch.setattr(sys, "path", [str(first), str(tmp_path / "missing"), str(second)])
    for group in ("mesoslike.commands", "other.group", "nothing.here"):
        assert plugins._scan_entry_points(group) == metadata(group)
    assert dict(plugins._scan_entry_points("mesoslike.commands")) == {
        "hello": "alpha.cli:hello", "spaced": "alpha.cli : spaced", "beta": "beta:main", "delta": "delta:main"}


def test_what_the_scan_does_not_read_goes_to_importlib_metadata(tmp_path, monkeypatch):
    distribution(tmp_path / "bad-1.0.dist-info", "bad", "[mesoslike.commands]\nno equals sign\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert plugins._scan_entry_points("mesoslike.commands") is None
    archive = tmp_path / "some.zip"
    archive.write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(archive)])
    assert plugins._scan_entry_points("mesoslike.commands") is None


def test_finding_the_run_command_imports_no_importlib_metadata():
    probe = ("import sys\nfrom mesoslike.cli import main\n"
             "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
             "print('importlib.metadata' in sys.modules, 'mesoslike_frameworks.command_cli' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines()[-1] == "False True", done
