"""bench/benchlib.py's cgroup sweep: what it finds of the benchmark's agents'
cgroups under a container's own cgroup, and that a directory gone while it
looks (another session removing its cgroups) is not an error — two benchmark
runs lost their results to pathlib's glob raising there."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[1]


def benchlib():
    spec = importlib.util.spec_from_file_location("benchlib_under_test", REPO / "bench" / "benchlib.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_the_sweep_finds_the_roots_two_levels_down_and_a_directory_gone_is_none(tmp_path):
    lib = benchlib()
    (tmp_path / "process_api" / "c1" / "mesoslike").mkdir(parents=True)
    (tmp_path / "process_api" / "c2").mkdir(parents=True)               # no root below it
    (tmp_path / "other" / "c3" / "mesoslike").mkdir(parents=True)
    os.symlink(tmp_path / "other", tmp_path / "linked")                 # not followed
    found = sorted(lib._nested(tmp_path, "mesoslike"))
    assert found == [tmp_path / "other" / "c3" / "mesoslike", tmp_path / "process_api" / "c1" / "mesoslike"]
    assert lib._nested(tmp_path / "gone", "mesoslike") == []
    assert lib._listdir(tmp_path / "process_api" / "c2" / "gone") == []
