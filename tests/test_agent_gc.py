"""Sandbox garbage collection (issue 15 §7): the plan (pure) and the agent
carrying it out — ended tasks' sandboxes go after ``gc_delay``, sooner past
the disk watermark, a live task's never; and the default work dir is the
agent's own, not one shared by every user of the machine."""

from __future__ import annotations

import os
import tempfile

import pytest

from agent_helpers import master  # noqa: F401 (fixture)
from mesoslike.agent.gc import parse_duration, plan
from mesoslike.agent.runtime import AgentRuntime, default_work_dir
from mesoslike.agent.settings import AgentSettings
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import FrameworkInfo, TaskInfo, TaskState
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)

DAY = 86400.0
FW = FrameworkInfo(name="demo", id="fw-1")


def book(*ages_and_sizes, now=100 * DAY):
    """A GC book of sandboxes ``s0``, ``s1``... last used ``age`` ago, and a
    measure that says so (and records what it was asked)."""
    entries = {f"s{i}": (now - age, size) for i, (age, size) in enumerate(ages_and_sizes)}
    asked: list[str] = []

    def measure(path):
        asked.append(path)
        return entries[path]
    return {path: used for path, (used, _) in entries.items()}, measure, asked


def test_sandboxes_older_than_the_delay_go_the_others_stay_and_only_those_are_measured():
    ended, measure, asked = book((8 * DAY, 10), (6 * DAY, 10), (1.0, 10))
    chosen, later = plan(ended, now=100 * DAY, gc_delay=7 * DAY, disk_used=10, disk_total=100, disk_watermark=0.9,
                         measure=measure)
    assert [s.path for s in chosen] == ["s0"] and later == {}
    assert asked == ["s0"]                                    # the others' files are not looked at


def test_past_the_watermark_the_oldest_go_until_the_use_is_back_under_it():
    ended, measure, asked = book((1 * DAY, 30), (3 * DAY, 30), (2 * DAY, 30), (0.5 * DAY, 30))
    chosen, _ = plan(ended, now=100 * DAY, gc_delay=7 * DAY, disk_used=95, disk_total=100, disk_watermark=0.5,
                     measure=measure)
    assert [s.path for s in chosen] == ["s1", "s2"]          # oldest first; 95 - 60 = 35 <= 50
    assert asked == ["s1", "s2"]
    everything, _ = plan(ended, now=100 * DAY, gc_delay=7 * DAY, disk_used=400, disk_total=100, disk_watermark=0.5,
                         measure=measure)
    assert len(everything) == 4                               # even all of them may not be enough


def test_a_sandbox_written_to_since_it_was_booked_waits_its_delay_from_then():
    now = 100 * DAY
    ended = {"s0": now - 8 * DAY, "s1": now - 9 * DAY}
    files = {"s0": (now - 2 * DAY, 10), "s1": (now - 9 * DAY, 10)}
    chosen, later = plan(ended, now=now, gc_delay=7 * DAY, disk_used=10, disk_total=100, disk_watermark=0.9,
                         measure=files.__getitem__)
    assert [s.path for s in chosen] == ["s1"] and later == {"s0": now - 2 * DAY}
    # past the watermark the oldest go, used since or not, until the use is back under it
    chosen, later = plan(ended, now=now, gc_delay=7 * DAY, disk_used=105, disk_total=100, disk_watermark=0.9,
                         measure=files.__getitem__)
    assert [s.path for s in chosen] == ["s1", "s0"] and later == {}   # 105 - 10 = 95 > 90: s0 too


def test_durations():
    assert [parse_duration(t) for t in ("90", "90s", "15m", "12h", "7d", "1w", "0.5h")] == \
        [90.0, 90.0, 900.0, 43200.0, 7 * DAY, 7 * DAY, 1800.0]
    for bad in ("", "x", "-1s", "1y", "inf"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_the_default_work_dir_is_per_user_and_per_agent():
    mine = default_work_dir("node-1")
    assert mine == os.path.join(tempfile.gettempdir(), f"mesoslike-{os.getuid()}", "agent-node-1")
    assert default_work_dir("node-2") != mine and default_work_dir("../x") != default_work_dir("x")


def finished(master, task_id, command="echo hi"):
    master.send(m.RunTask(FW, TaskInfo(task_id, "agent-1", command, Resources.parse("cpus:0.1;mem:32"))))
    return master.updates_until_terminal(task_id)[-1]


def test_the_agent_collects_ended_sandboxes_after_the_delay_and_keeps_live_ones(master, tmp_path):
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256;disk:10", hostname="gc",
                                         work_dir=tmp_path, isolation="posix", gc_delay=0.0, gc_interval=0.05)).start()
    try:
        master.register()
        live = tmp_path / "sandboxes" / "fw-1" / "live"
        master.send(m.RunTask(FW, TaskInfo("live", "agent-1", "sleep 60", Resources.parse("cpus:0.1;mem:32"))))
        assert [master.update("live").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
        assert finished(master, "done").state == TaskState.FINISHED
        wait_until(lambda: not (tmp_path / "sandboxes" / "fw-1" / "done").exists(), 10, "the ended sandbox to go")
        assert live.is_dir()                                  # a running task's sandbox is never collected
        assert "mesoslike_agent_sandboxes_collected_total 1" in runtime.views.metrics_text()
    finally:
        runtime.stop()


def test_past_the_disk_watermark_ended_sandboxes_go_before_the_delay(master, tmp_path):
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256;disk:10", hostname="gc",
                                         work_dir=tmp_path, isolation="posix", gc_delay=7 * DAY, gc_disk_watermark=1e-9,
                                         gc_interval=0.05)).start()
    try:
        master.register()
        assert finished(master, "done").state == TaskState.FINISHED
        wait_until(lambda: not (tmp_path / "sandboxes" / "fw-1" / "done").exists(), 10, "the sandbox to go early")
    finally:
        runtime.stop()


def test_a_week_is_the_default_and_an_ended_sandbox_stays_until_then(master, tmp_path):
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256;disk:10", hostname="gc",
                                         work_dir=tmp_path, isolation="posix", gc_interval=0.05)).start()
    try:
        assert runtime.gc_delay == 7 * DAY
        master.register()
        assert finished(master, "done").state == TaskState.FINISHED
        wait_until(lambda: runtime.core.tasks() == [], 10, "the agent to forget the task")
        passes = runtime.counters["gc_passes"]
        wait_until(lambda: runtime.counters["gc_passes"] >= passes + 2, 10, "two more GC passes")
        assert runtime.counters["sandboxes_collected"] == 0
        assert (tmp_path / "sandboxes" / "fw-1" / "done" / "stdout").read_text() == "hi\n"
    finally:
        runtime.stop()


def test_a_pass_looks_at_the_files_of_a_sandbox_only_when_it_may_be_due(master, tmp_path, monkeypatch):
    """The GC's book (issue 29): an agent's pass used to walk every ended
    sandbox's files each ``gc_interval``; now what an earlier run left is
    measured at the first pass (and goes, if due), and a sandbox ended since
    is not looked into until its delay may be over."""
    from mesoslike.agent import runtime as agent_runtime

    left = tmp_path / "sandboxes" / "fw-0" / "left-by-an-earlier-run"
    left.mkdir(parents=True)
    (left / "stdout").write_text("old\n")
    for path in (left / "stdout", left):
        os.utime(path, (0, 100 * DAY))                        # long before any week ago
    measured: list[str] = []
    real = agent_runtime._last_use_and_size
    monkeypatch.setattr(agent_runtime, "_last_use_and_size", lambda path: (measured.append(path), real(path))[1])
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256;disk:10", hostname="gc",
                                         work_dir=tmp_path, isolation="posix", gc_interval=0.05)).start()
    try:
        # its framework's directory, now empty, goes with it (removed just after it, by the agent's loop: waited
        # for too — a look between the two found it still there)
        wait_until(lambda: not left.exists() and not left.parent.exists(), 10,
                   "what the earlier run left, and its framework's directory, to go at the first pass")
        master.register()
        assert finished(master, "done").state == TaskState.FINISHED
        wait_until(lambda: runtime.core.tasks() == [], 10, "the agent to forget the task")
        passes = runtime.counters["gc_passes"]
        wait_until(lambda: runtime.counters["gc_passes"] >= passes + 3, 10, "three more GC passes")
        assert measured == [str(left)] * 2                    # booked at the first pass, measured as due: no other
        assert list(runtime._ended_sandboxes or {}) == [str(tmp_path / "sandboxes" / "fw-1" / "done")]   # booked
        assert (tmp_path / "sandboxes" / "fw-1" / "done" / "stdout").read_text() == "hi\n"
    finally:
        runtime.stop()
