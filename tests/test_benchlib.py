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


def test_the_sweep_removes_the_cgroups_of_an_agent_named_apart_from_its_directory(tmp_path, monkeypatch):
    # bench/throughput.py's agents are bench-N in directories agent-N: their cgroups, named for the
    # hostname and a digest of the work directory, were never matched and piled up
    from mesoslike.agent.isolation import agent_key
    lib = benchlib()
    work, hierarchy = tmp_path / "work", tmp_path / "cpu"
    (work / "agent-2").mkdir(parents=True)
    ours = f"{agent_key('bench-2', work / 'agent-2')}.pooled.10250-2596626-97b28c9aa8c3"
    theirs = f"{agent_key('bench-2', tmp_path / 'elsewhere' / 'agent-2')}.pooled.1-2-3"
    for name in (ours, theirs):
        (hierarchy / "mesoslike" / name).mkdir(parents=True)
    (hierarchy / "bench-run" / ours).mkdir(parents=True)
    monkeypatch.setattr(lib, "cgroup_hierarchies", lambda: [hierarchy])
    assert lib.sweep_agent_cgroups(work, ("mesoslike", "bench-run")) == 2
    assert sorted(os.listdir(hierarchy / "mesoslike")) == [theirs]   # another run's agent's: kept
    assert not (hierarchy / "bench-run").exists()                     # the benchmark's own root, left empty
