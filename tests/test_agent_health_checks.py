"""Issue 18 §2: health checks (Mesos's ``HealthCheck``), end to end with real
processes: an in-process agent whose tasks run under their supervisors (which
run the checks), real sockets on 127.0.0.1, and the test playing the master.
Plus the codec's validation of the new fields."""

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import msgpack
import pytest

from agent_helpers import master  # noqa: F401 (fixture)
from e2e_helpers import run_on_local
from mesoslike.agent.executor import sandbox_path
from mesoslike.agent.health import HealthPolicy
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.resources import Resources
from mesoslike.wire import WireError, decode, encode
from mesoslike.wire import messages as m
from mesoslike.wire.types import FrameworkInfo, HealthCheck, HTTPCheck, TaskInfo, TaskState, TaskStatus, TCPCheck
from waiting import wait_until

pytestmark = pytest.mark.timeout(90)

FW = FrameworkInfo(name="health", id="fw-1")
HEALTH_REASON = "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
#: quick checks for tests (Mesos's defaults wait 15 s before the first)
QUICK = {"delay_seconds": 0.0, "interval_seconds": 0.2, "timeout_seconds": 5.0}
#: failures while the task starts do not count (as they would not with Mesos's 10 s default)
STARTING = {**QUICK, "grace_period_seconds": 30.0}
#: every failure counts
STRICT = {**QUICK, "grace_period_seconds": 0.0}


@pytest.fixture
def agent(master, tmp_path):  # noqa: F811 (fixture)
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:4;mem:1024", hostname="h1",
                                         work_dir=tmp_path / "agent", isolation="posix", switch_user=False)).start()
    master.register()
    yield runtime
    runtime.stop()


def task(task_id, command, check, user=""):
    return TaskInfo(task_id, "agent-1", command, Resources.parse("cpus:0.5;mem:64"), kill_grace_period=1.0,
                    health_check=check, user=user)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_http(port):
    """A task that serves its sandbox over HTTP on ``port`` (so /stdout answers 200, /missing 404)."""
    return f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1"


def updates_until(master, task_id, predicate, timeout=30.0):  # noqa: F811 (fixture)
    statuses = []
    while not statuses or not predicate(statuses[-1]):
        statuses.append(master.update(task_id, timeout=timeout))
        assert not statuses[-1].terminal or predicate(statuses[-1]), statuses
    return statuses


def healthy_update(master, task_id):  # noqa: F811 (fixture)
    statuses = updates_until(master, task_id, lambda s: s.healthy is not None)
    return statuses[-1]


# ------------------------------------------------------------------ checks pass
def test_a_passing_command_check_sends_a_running_update_with_healthy_true(master, agent):  # noqa: F811
    check = HealthCheck("COMMAND", command='test -f "$MESOSLIKE_SANDBOX/stdout" && test "$PWD" = "$MESOSLIKE_SANDBOX"',
                        **STARTING)
    master.send(m.RunTask(FW, task("t", "sleep 60", check)))
    status = healthy_update(master, "t")
    assert (status.state, status.healthy, status.reason) == (TaskState.RUNNING, True, HEALTH_REASON)
    # a verdict that does not change sends nothing more: the next update is the kill's
    master.send(m.KillTask("fw-1", "t"))
    rest = master.updates_until_terminal("t")
    assert [s.state for s in rest] == [TaskState.KILLED]
    assert rest[-1].healthy is True   # later updates carry the last verdict


@pytest.mark.parametrize("kind", ["HTTP", "TCP"])
def test_an_http_or_tcp_check_against_the_port_the_task_opens_makes_it_healthy(master, agent, kind):  # noqa: F811
    port = free_port()
    check = (HealthCheck("HTTP", http=HTTPCheck(port, "/stdout"), **STARTING) if kind == "HTTP"
             else HealthCheck("TCP", tcp=TCPCheck(port), **STARTING))
    master.send(m.RunTask(FW, task("web", serve_http(port), check)))
    status = healthy_update(master, "web")
    assert (status.state, status.healthy) == (TaskState.RUNNING, True)


def test_failures_in_the_grace_period_do_not_count(master, agent):  # noqa: F811
    # not ready for ~1 s: with one failure allowed it would be killed, but the grace period covers it
    check = HealthCheck("COMMAND", command="test -f ready", delay_seconds=0.0, interval_seconds=0.1,
                        timeout_seconds=5.0, consecutive_failures=1, grace_period_seconds=20.0)
    master.send(m.RunTask(FW, task("slow", "sleep 1; touch ready; sleep 60", check)))
    statuses = updates_until(master, "slow", lambda s: s.healthy is not None)
    assert [s.state for s in statuses] == [TaskState.STARTING, TaskState.RUNNING, TaskState.RUNNING]
    assert statuses[-1].healthy is True


# ------------------------------------------------------------- checks fail
def test_a_failing_command_check_kills_the_task_task_failed_naming_the_check(master, agent):  # noqa: F811
    check = HealthCheck("COMMAND", command="echo not today >&2; exit 3", consecutive_failures=2, **STRICT)
    master.send(m.RunTask(FW, task("sick", "sleep 60", check)))
    statuses = master.updates_until_terminal("sick")
    assert [s.state for s in statuses] == [TaskState.STARTING, TaskState.RUNNING, TaskState.RUNNING,
                                           TaskState.FAILED]
    unhealthy, failed = statuses[-2], statuses[-1]
    assert (unhealthy.healthy, unhealthy.reason) == (False, HEALTH_REASON)
    assert (failed.healthy, failed.reason) == (False, HEALTH_REASON)
    assert "command check 'echo not today >&2; exit 3' failed 2 times in a row" in failed.message
    assert "exited with status 3: not today" in failed.message
    assert "signal 15" in failed.message      # killed as a KILL_TASK kills: SIGTERM first


def test_a_failing_http_check_says_what_the_server_answered(master, agent):  # noqa: F811
    port = free_port()
    # the grace period covers the server's start; after it, the 404 counts
    check = HealthCheck("HTTP", http=HTTPCheck(port, "/missing"), consecutive_failures=1,
                        **{**QUICK, "grace_period_seconds": 5.0})
    master.send(m.RunTask(FW, task("web", serve_http(port), check)))
    failed = master.updates_until_terminal("web")[-1]
    assert (failed.state, failed.reason, failed.healthy) == (TaskState.FAILED, HEALTH_REASON, False)
    assert f"GET http://127.0.0.1:{port}/missing answered 404" in failed.message


def test_a_tcp_check_of_a_port_nobody_listens_on_fails(master, agent):  # noqa: F811
    port = free_port()
    check = HealthCheck("TCP", tcp=TCPCheck(port), consecutive_failures=2, **STRICT)
    master.send(m.RunTask(FW, task("deaf", "sleep 60", check)))
    failed = master.updates_until_terminal("deaf")[-1]
    assert (failed.state, failed.reason) == (TaskState.FAILED, HEALTH_REASON)
    assert f"TCP check 127.0.0.1:{port} failed 2 times in a row" in failed.message
    assert "refused" in failed.message.lower()


def test_a_check_that_hangs_fails_on_its_timeout(master, agent):  # noqa: F811
    check = HealthCheck("COMMAND", command="sleep 30", delay_seconds=0.0, interval_seconds=0.2, timeout_seconds=0.3,
                        consecutive_failures=1, grace_period_seconds=0.0)
    master.send(m.RunTask(FW, task("hang", "sleep 60", check)))
    failed = master.updates_until_terminal("hang")[-1]
    assert failed.state == TaskState.FAILED and "did not end within 0.3 s" in failed.message


def test_a_task_killed_by_its_check_while_the_agent_is_down_is_reported_by_the_next_agent(master, tmp_path):  # noqa: F811
    """The checker lives in the supervisor: it keeps checking (and kills)
    while no agent runs; the restarted agent reports how the task ended."""
    options = dict(hostname="h1", work_dir=tmp_path / "agent", isolation="posix", switch_user=False,
                   kill_tasks_on_exit=False)
    first = AgentRuntime(AgentSettings(master=master.address, resources="cpus:4;mem:1024", **options)).start()
    master.register()
    check = HealthCheck("COMMAND", command="test ! -f sick", consecutive_failures=1, **STRICT)
    master.send(m.RunTask(FW, task("t", "sleep 60", check)))
    assert healthy_update(master, "t").healthy is True
    first.stop()
    (sandbox_path(tmp_path / "agent", "fw-1", "t") / "sick").touch()   # it turns sick while no agent runs
    second = AgentRuntime(AgentSettings(master=master.address, resources="cpus:4;mem:1024", **options)).start()
    try:
        master.expect(m.ReregisterAgent)
        master.send(m.AgentRegistered("agent-1", master.info, 30.0))
        statuses = master.updates_until_terminal("t")
        assert statuses[-1].state == TaskState.FAILED and statuses[-1].reason == HEALTH_REASON
        assert "command check 'test ! -f sick' failed 1 times in a row" in statuses[-1].message
        assert statuses[-1].healthy is False
    finally:
        second.stop()


# ----------------------------------------------------- as the task's user
@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root (CI runs as root: never skipped there)")
def test_a_command_check_runs_as_the_tasks_user_in_its_sandbox(master):  # noqa: F811
    directory = Path(tempfile.mkdtemp(prefix="mesoslike-health-"))
    os.chmod(directory, 0o711)   # the switched task's user must reach its sandbox
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:4;mem:1024", hostname="h1",
                                         work_dir=directory / "agent", isolation="posix", switch_user=True)).start()
    try:
        master.register()
        check = HealthCheck("COMMAND", command='test "$(id -un)" = nobody && test "$PWD" = "$MESOSLIKE_SANDBOX" '
                                                 '&& touch checked', **STARTING)
        master.send(m.RunTask(FrameworkInfo(name="health", id="fw-1", user="nobody"),
                              task("t", "sleep 60", check, user="nobody")))
        assert healthy_update(master, "t").healthy is True
        checked = sandbox_path(directory / "agent", "fw-1", "t") / "checked"
        wait_until(checked.exists, 10.0, "the check's file")
        assert checked.owner() == "nobody"
    finally:
        runtime.stop()
        shutil.rmtree(directory, ignore_errors=True)


# ------------------------------------------------- the example, on a cluster
def test_the_example_runs_a_fetched_app_with_health_checks_on_a_local_cluster():
    """examples/health_and_fetch.py through the public API: master, agent,
    scheduler driver and the healthy field on the way to the scheduler."""
    done = run_on_local(sys.executable, "examples/health_and_fetch.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "web: TASK_RUNNING healthy=True REASON_TASK_HEALTH_CHECK_STATUS_UPDATED health check passed" in done.stdout
    assert ("sick: TASK_FAILED healthy=False REASON_TASK_HEALTH_CHECK_STATUS_UPDATED command check 'test -f ready' "
            "failed 2 times in a row") in done.stdout


# ------------------------------------------------------------- the policy
def test_the_policy_counts_consecutive_failures_after_the_grace_period():
    policy = HealthPolicy({"delay_seconds": 1.0, "interval_seconds": 2.0, "consecutive_failures": 2,
                           "grace_period_seconds": 5.0}, started=100.0)
    assert policy.next_due == 101.0
    assert policy.result(101.0, False, "no").healthy is None            # in the grace period: not counted
    assert policy.next_due == 103.0
    verdict = policy.result(106.0, False, "no")                          # counted: unhealthy, not yet killed
    assert (verdict.healthy, verdict.changed, verdict.kill) == (False, True, "")
    verdict = policy.result(108.0, True, "")
    assert (verdict.healthy, verdict.changed) == (True, True)
    assert policy.result(110.0, False, "a").kill == ""                    # a success resets the count
    assert "failed 2 times in a row" in policy.result(112.0, False, "b").kill


def test_after_a_first_success_the_grace_period_no_longer_hides_failures():
    policy = HealthPolicy({"delay_seconds": 0.0, "interval_seconds": 1.0, "consecutive_failures": 1,
                           "grace_period_seconds": 60.0}, started=0.0)
    assert policy.result(1.0, True, "").healthy is True
    assert policy.result(2.0, False, "down").kill


# -------------------------------------------------------------- the codec
def roundtrip(check):
    return decode(encode(m.RunTask(FW, task("t", "true", check)))).task.health_check


def test_health_checks_and_healthy_cross_the_wire():
    for check in (HealthCheck("COMMAND", command="true"), HealthCheck("TCP", tcp=TCPCheck(8080)),
                  HealthCheck("HTTP", http=HTTPCheck(80, "/health?x=1", "https", [200, 204]), delay_seconds=0,
                              interval_seconds=1.5, timeout_seconds=2, consecutive_failures=7,
                              grace_period_seconds=30)):
        assert roundtrip(check) == check
    defaults = HealthCheck("TCP", tcp=TCPCheck(1))
    assert (defaults.delay_seconds, defaults.interval_seconds, defaults.timeout_seconds,
            defaults.consecutive_failures, defaults.grace_period_seconds) == (15.0, 10.0, 20.0, 3, 10.0)
    status = TaskStatus("t", TaskState.RUNNING, healthy=False)
    assert decode(encode(m.StatusUpdate("fw-1", status))).status.healthy is False
    assert decode(encode(m.StatusUpdate("fw-1", TaskStatus("t", TaskState.RUNNING)))).status.healthy is None


@pytest.mark.parametrize("change, problem", [
    ({"type": "PING"}, "health_check.type must be one of COMMAND, HTTP, TCP"),
    ({"command": ""}, "health_check.command is required"),
    ({"tcp": {"port": 80}}, "health_check.tcp is required for a TCP check, and only for it"),
    ({"interval_seconds": 0}, "health_check.interval_seconds must be in [0.1, 86400]"),
    ({"timeout_seconds": -1.0}, "health_check.timeout_seconds must be in [0.1, 86400]"),
    ({"delay_seconds": 1e12}, "health_check.delay_seconds must be in [0, 86400]"),
    ({"grace_period_seconds": -5}, "health_check.grace_period_seconds must be in [0, 86400]"),
    ({"consecutive_failures": 0}, "health_check.consecutive_failures must be in [1, 1000]"),
    ({"consecutive_failures": 1.5}, "consecutive_failures: expected int"),
    ({"command": "x" * 70000}, "health_check.command must be at most 65536 characters"),
    ({"type": "HTTP", "command": "", "http": {"port": 0}}, "http.port must be in [1, 65535]"),
    ({"type": "HTTP", "command": "", "http": {"port": 80, "path": "no-slash"}}, "http.path must start with '/'"),
    ({"type": "HTTP", "command": "", "http": {"port": 80, "path": "/a\r\nHost: evil"}}, "http.path must start"),
    ({"type": "HTTP", "command": "", "http": {"port": 80, "scheme": "gopher"}}, "http.scheme must be"),
    ({"type": "HTTP", "command": "", "http": {"port": 80, "statuses": [99]}}, "http.statuses must be"),
    ({"type": "TCP", "command": "", "tcp": {"port": 70000}}, "tcp.port must be in [1, 65535]"),
    ({"type": "TCP", "command": "", "tcp": "80"}, "expected a map"),
])
def test_hostile_health_checks_are_refused_by_the_codec_with_a_clear_error(change, problem):
    plain = msgpack.unpackb(encode(m.RunTask(FW, task("t", "true", HealthCheck("COMMAND", command="true")))))
    plain["task"]["health_check"].update(change)
    with pytest.raises(WireError, match="RUN_TASK.task.health_check") as caught:
        decode(msgpack.packb(plain))
    assert problem in str(caught.value)
