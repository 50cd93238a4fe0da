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


def test_a_run_waits_for_the_inodes_the_last_run_freed_to_age_and_only_then(tmp_path, monkeypatch):
    # on ext4 without a journal a new inode is placed after scanning past those freed in the last minute: a run
    # started right after the previous one removed its work directory paid for it (benchlib.remove_work_directory)
    lib = benchlib()
    monkeypatch.setattr(lib, "REMOVED_STAMP", tmp_path / "removed-at")
    waits: list[float] = []
    monkeypatch.setattr(lib.time, "sleep", waits.append)
    assert lib.settle_after_removal(print) == 0.0 and waits == []        # no run removed anything yet
    work = tmp_path / "work"
    (work / "agent-0" / "sandboxes").mkdir(parents=True)
    lib.remove_work_directory(work)
    assert not work.exists()
    waited = lib.settle_after_removal(print, seconds=65.0)
    assert len(waits) == 1 and 60.0 < waits[0] <= 65.0 and waited == round(waits[0], 1)
    (tmp_path / "removed-at").write_text(f"{lib.time.time() - 66.0:.3f}\n")   # long enough ago
    assert lib.settle_after_removal(print, seconds=65.0) == 0.0 and len(waits) == 1
    (tmp_path / "removed-at").write_text("garbage\n")
    assert lib.settle_after_removal(print, seconds=65.0) == 0.0 and len(waits) == 1
