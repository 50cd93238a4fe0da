"""Tasks' containers beyond the default namespaces (docs/containers.rst):
Mesos's ``CommandInfo.shell``/``arguments`` (a program executed without a
shell), with real agents and real processes."""

from __future__ import annotations

import pytest

from agent_helpers import cgroups_root, master  # noqa: F401 (fixtures)
from mesoslike.agent.executor import sandbox_path
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import FrameworkInfo, TaskInfo, TaskState

pytestmark = pytest.mark.timeout(120)

FW = FrameworkInfo(name="containers", id="fw-1")


@pytest.fixture
def agent(master, tmp_path, cgroups_root):  # noqa: F811 (fixture)
    runtime = AgentRuntime(master.address, "cpus:4;mem:1024", hostname="c1", work_dir=tmp_path / "agent",
                           cgroups_root=cgroups_root).start()
    master.register()
    yield runtime
    runtime.stop()


def test_shell_false_executes_the_arguments_without_a_shell(master, agent):  # noqa: F811
    task = TaskInfo("argv", "agent-1", "", Resources.parse("cpus:0.5;mem:64"), shell=False,
                    arguments=["printf", "%s|", "two words", "$HOME", ";", "exit 3"])
    master.send(m.RunTask(FW, task))
    statuses = master.updates_until_terminal("argv")
    assert [s.state for s in statuses] == [TaskState.STARTING, TaskState.RUNNING, TaskState.FINISHED], statuses
    out = (sandbox_path(agent.work_dir, "fw-1", "argv") / "stdout").read_text()
    assert out == "two words|$HOME|;|exit 3|"   # no word splitting, no expansion, no ';'


def test_shell_false_with_a_program_that_does_not_exist_fails_naming_it(master, agent):  # noqa: F811
    task = TaskInfo("missing", "agent-1", "", Resources.parse("cpus:0.5;mem:64"), shell=False,
                    arguments=["no-such-program-here", "x"])
    master.send(m.RunTask(FW, task))
    failed = master.updates_until_terminal("missing")[-1]
    assert failed.state == TaskState.FAILED and "no-such-program-here" in failed.message, failed
