"""A full disk (issue 15 §8): a task that fills its sandbox's file system
fails with a message that says so, and a task launched on a full one fails
at once saying why — the agent carries on (checkpoint writes that fail are
counted, the supervisor still records the exit in its pre-made file).

The work dir is a 4 MB tmpfs mounted for the test (root is needed; under
CI=true, which runs as root, these tests must not skip)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from environment import unavailable

from agent_helpers import master  # noqa: F401 (fixture)
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import FrameworkInfo, TaskInfo, TaskState

pytestmark = [pytest.mark.timeout(60), pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tmpfs")]

FW = FrameworkInfo(name="demo", id="fw-1")


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs ({mounted.stderr.strip()}): run as root")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def run(master, task_id, command):
    master.send(m.RunTask(FW, TaskInfo(task_id, "agent-1", command, Resources.parse("cpus:0.1;mem:32"))))
    return master.updates_until_terminal(task_id)


def test_a_task_that_fills_its_sandboxs_disk_fails_saying_so_and_the_next_launch_too(master, small_disk):
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256;disk:10", hostname="full",
                                         work_dir=small_disk, isolation="posix")).start()
    try:
        master.register()
        filler = run(master, "filler", "head -c 20000000 /dev/zero > big")
        failed = filler[-1]
        assert failed.state == TaskState.FAILED and failed.exit_code != 0
        assert "the sandbox's file system is full" in failed.message, filler
        late = run(master, "late", "echo hi")                      # the disk is still full
        assert late[-1].state == TaskState.FAILED
        assert "file system is full" in late[-1].message, late[-1].message
        master.send(m.Ping("agent-1"))
        assert master.expect(m.Pong).agent_id == "agent-1"          # and the agent still serves
    finally:
        runtime.stop()
