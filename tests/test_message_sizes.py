"""Message sizes (docs/reliability.rst, "Message sizes"): framework messages
and status updates carry as much data as Mesos lets them (64 MiB by default,
``--max-message-size`` on masters and agents), through both front ends;
more is refused where it enters, naming the flag."""

from __future__ import annotations

import base64
import logging
import sys

import pytest

from e2e_helpers import cluster  # noqa: F401 (fixture)
from executor_program import pattern
from mesoslike import FrameworkInfo, TaskState
from mesoslike.errors import ConfigError
from mesoslike.wire import executor_messages as x
from mesoslike.wire import messages as m
from mesoslike.wire.codec import CODEC, sized
from mesoslike.wire.types import (MAX_FRAMEWORK_MESSAGE, MAX_MESSAGE_SIZE_CEILING, MIN_MESSAGE_SIZE,
                                  WARN_MESSAGE_SIZE, check_message_size)
from test_executors import ExecutorScheduler, executor_task, registered_agent_core, run_cluster
from test_v1_executor import (as_executor, b64, executor_call, launch_executor_task, subscribe_executor)
from test_v1_scheduler import Cluster, subscribed, until_state

pytestmark = [pytest.mark.timeout(180), pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")]

#: more than the data and the frames of before (1 MiB of data, 8 MiB frames), as frameworks send
BIG = 9 * 1024 * 1024 + 7


def test_the_limit_is_mesos_default_and_configurable_within_bounds():
    assert MAX_FRAMEWORK_MESSAGE == 64 * 1024 * 1024 and WARN_MESSAGE_SIZE == 1024 * 1024
    assert check_message_size(MIN_MESSAGE_SIZE) == MIN_MESSAGE_SIZE
    for bad in (MIN_MESSAGE_SIZE - 1, MAX_MESSAGE_SIZE_CEILING + 1, True, "64MB", 1.5e6):
        with pytest.raises(ValueError, match="message size limit"):
            check_message_size(bad)
    # the frames of a peer fit its data and the rest of a message
    assert CODEC.max_message_size > MAX_FRAMEWORK_MESSAGE
    assert sized(CODEC, 256 * 1024 * 1024).max_message_size > 256 * 1024 * 1024
    from mesoslike.master.records import MasterConfig
    with pytest.raises(ConfigError, match="max_message_size"):
        MasterConfig(max_message_size=10).validate()


def test_flags_of_master_and_agent_take_sizes():
    from click.testing import CliRunner

    from mesoslike.cli import main

    for command in ("master", "agent"):
        result = CliRunner().invoke(main, [command, "--help"])
        assert "--max-message-size" in result.output
    # a size the agent cannot take is a clear error at start, not a crash
    result = CliRunner().invoke(main, ["agent", "--master", "tcp://127.0.0.1:1", "--max-message-size", "2GB",
                                       "--work-dir", "/nonexistent/never"])
    assert result.exit_code != 0 and "--max-message-size" in result.output


def test_core_the_master_refuses_a_scheduler_message_over_its_limit_and_warns_of_big_ones(caplog):
    import test_master_core as helpers

    h = helpers.Harness(max_message_size=2048)
    fid, aid = h.subscribe(), h.register_agent()
    out = h.send(helpers.FW, m.FrameworkMessage(fid, aid, b"x" * 2049, executor_id="e"))
    (error,) = helpers.only(out, m.Error, helpers.FW)
    assert "--max-message-size" in error.message and not error.fatal
    assert not helpers.only(out, m.FrameworkMessage)
    out = h.send(helpers.FW, m.FrameworkMessage(fid, aid, b"x" * 2048, executor_id="e"))
    assert helpers.only(out, m.FrameworkMessage, helpers.AG)
    h = helpers.Harness()
    fid, aid = h.subscribe(), h.register_agent()
    with caplog.at_level(logging.WARNING, "mesoslike.master"):
        out = h.send(helpers.FW, m.FrameworkMessage(fid, aid, b"x" * (WARN_MESSAGE_SIZE + 1), executor_id="e"))
    assert helpers.only(out, m.FrameworkMessage, helpers.AG)
    assert any("framework message of" in r.getMessage() for r in caplog.records)


def test_core_the_agent_refuses_executor_data_over_its_limit_and_tells_the_executor_its_limit():
    from mesoslike.agent.core import LaunchTask, SendToExecutor
    from mesoslike.wire.types import FrameworkInfo as Framework, TaskStatus

    core, _ = registered_agent_core(max_message_size=4096)
    (launch,) = [c for c in core.on_message(m.RunTask(Framework("f", id="fw-1"), executor_task("t1")))
                 if isinstance(c, LaunchTask)]
    assert launch.task.environment[x.MAX_MESSAGE_SIZE_ENV] == "4096"
    core.on_task_started("fw-1", launch.task.task_id, 1000)
    core.on_executor_frame(b"p", x.RegisterExecutor("a" * 64))
    for message in (x.ExecutorStatus("a" * 64, TaskStatus("t1", TaskState.RUNNING, uuid="u1", data=b"x" * 4097)),
                    x.ExecutorMessage("a" * 64, b"x" * 4097)):
        out = core.on_executor_frame(b"p", message)
        assert [type(c) for c in out] == [SendToExecutor]
        assert isinstance(out[0].message, x.ExecutorError) and "--max-message-size" in out[0].message.message
    assert core.pending_updates("fw-1", "t1") == []
    out = core.on_executor_frame(b"p", x.ExecutorMessage("a" * 64, b"x" * 4096))
    assert [type(c.message) for c in out] == [m.FrameworkMessage]
    # one for the executor over the limit is dropped
    assert core.on_message(m.FrameworkMessage("fw-1", "agent-1", b"x" * 4097, executor_id="exec-1")) == []


def test_an_executor_driver_takes_its_agents_limit_and_refuses_more_in_the_callers_thread(tmp_path):
    from mesoslike.executor import Executor, ExecutorDriver
    from mesoslike.wire.types import TaskStatus

    env = {x.ENDPOINT_ENV: "ipc:///nonexistent", x.SECRET_ENV: "s" * 64, x.MAX_MESSAGE_SIZE_ENV: "2048"}
    driver = ExecutorDriver(Executor(), env)
    with pytest.raises(ValueError, match="max-message-size"):
        driver.send_framework_message(b"x" * 2049)
    with pytest.raises(ValueError, match="max-message-size"):
        driver.send_status_update(TaskStatus("t1", TaskState.RUNNING, data=b"x" * 2049))
    with pytest.raises(ConfigError, match=x.MAX_MESSAGE_SIZE_ENV):
        ExecutorDriver(Executor(), {**env, x.MAX_MESSAGE_SIZE_ENV: "lots"})
    from mesoslike.driver.core import message_data
    with pytest.raises(ValueError, match="max-message-size"):
        message_data(b"x" * 11, 10)


def test_messages_and_status_data_of_megabytes_cross_a_cluster_on_zeromq(cluster):  # noqa: F811
    """The native front end: the scheduler driver, the master, the agent and
    a mesoslike ExecutorDriver, as separate processes."""
    scheduler = ExecutorScheduler()
    scheduler.add(("t0", "hold"), ("t1", f"data {BIG}"))
    driver = run_cluster(cluster, scheduler)
    scheduler.wait(lambda: scheduler.state_of("t1") == TaskState.FINISHED, 60, "t1 finished", cluster.diagnostics)
    assert scheduler.statuses("t1")[-1].data == pattern(BIG)
    agent_id = scheduler.statuses("t1")[-1].agent_id
    big = b"echo:" + pattern(BIG)
    driver.send_framework_message(agent_id, big, "", executor_id="exec-1")
    scheduler.wait(lambda: big in scheduler.messages(), 60, "the executor's echo", cluster.diagnostics)


def test_a_master_with_a_smaller_limit_refuses_more_and_says_so(cluster):  # noqa: F811
    cluster.start_master("--max-message-size", "1MB")
    from agent_helpers import start_agent
    start_agent(cluster, "a1", "cpus:2;mem:1024", "--max-message-size", "1MB")
    scheduler = ExecutorScheduler()
    scheduler.add(("t0", "hold"))
    driver = cluster.driver(scheduler, "small", framework=FrameworkInfo("small"))
    scheduler.wait(lambda: scheduler.state_of("t0") == TaskState.RUNNING, 60, "t0 running", cluster.diagnostics)
    agent_id = scheduler.statuses("t0")[-1].agent_id
    driver.send_framework_message(agent_id, b"echo:" + b"x" * (1024 * 1024), "", executor_id="exec-1")
    scheduler.wait(lambda: any("--max-message-size" in e for e in scheduler.of("error")), 30, "the master's error")
    driver.send_framework_message(agent_id, b"echo:" + b"x" * (1024 * 1024 - 5), "", executor_id="exec-1")
    scheduler.wait(lambda: any(len(d) == 1024 * 1024 for d in scheduler.messages()), 30, "the echo at the limit")


def test_v1_calls_carry_megabytes_both_ways(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        scheduler = cluster.subscribe(failover_timeout=0)
        framework_id, offer = launch_executor_task(cluster, scheduler)
        executor = subscribe_executor(cluster, framework_id)
        executor.wait_for("LAUNCH")
        data = pattern(BIG)
        assert cluster.call(scheduler, "MESSAGE", {"agent_id": offer["agent_id"], "executor_id": {"value": "exec-1"},
                                                   "data": b64(data)})[0] == 202
        assert base64.b64decode(executor.wait_for("MESSAGE")["message"]["data"]) == data
        assert executor_call(cluster, framework_id, "MESSAGE", {"data": b64(data[::-1])})[0] == 202
        assert base64.b64decode(scheduler.wait_for("MESSAGE")["message"]["data"]) == data[::-1]
        assert executor_call(cluster, framework_id, "UPDATE", {"status": {
            "task_id": {"value": "t1"}, "state": "TASK_FINISHED", "uuid": b64(bytes(16)), "data": b64(data)}})[0] == 202
        assert base64.b64decode(until_state(cluster, scheduler, "t1", "TASK_FINISHED")["data"]) == data
        scheduler.close()
        executor.close()
    finally:
        cluster.close()


def test_v1_calls_over_the_configured_limit_are_refused_naming_it(tmp_path):
    limit = 64 * 1024
    cluster = Cluster(tmp_path, master_options={"max_message_size": limit}, max_message_size=limit)
    try:
        scheduler = cluster.subscribe(failover_timeout=0)
        framework_id, offer = launch_executor_task(cluster, scheduler)
        executor = subscribe_executor(cluster, framework_id)
        executor.wait_for("LAUNCH")
        to_executor = {"agent_id": offer["agent_id"], "executor_id": {"value": "exec-1"}}
        status, answer = cluster.call(scheduler, "MESSAGE", {**to_executor, "data": b64(bytes(limit + 1))})
        assert status == 400 and b"--max-message-size" in answer
        assert cluster.call(scheduler, "MESSAGE", {**to_executor, "data": b64(bytes(limit))})[0] == 202
        assert len(base64.b64decode(executor.wait_for("MESSAGE")["message"]["data"])) == limit
        status, answer = executor_call(cluster, framework_id, "MESSAGE", {"data": b64(bytes(limit + 1))})
        assert status == 400 and b"--max-message-size" in answer
        status, answer = executor_call(cluster, framework_id, "UPDATE", {"status": {
            "task_id": {"value": "t1"}, "state": "TASK_RUNNING", "uuid": b64(bytes(16)),
            "data": b64(bytes(limit + 1))}})
        assert status == 400 and b"--max-message-size" in answer
        assert as_executor(cluster, framework_id)   # the executor is still there
        assert subscribed(scheduler) == framework_id
        scheduler.close()
        executor.close()
    finally:
        cluster.close()
