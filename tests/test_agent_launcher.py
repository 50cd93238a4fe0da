"""The supervisor launcher (issue 14; mesoslike/agent/launcher.py): the
executor forks each task's supervisor from one pre-loaded process instead of
starting an interpreter per task. Real processes: the supervisor is the same
(its environment, session, files), it is not the agent's child, outlives
the launcher, and the tasks end as they would."""

import json
import os
import sys
from pathlib import Path

import pytest

from mesoslike.agent import executor as executor_module
from mesoslike.agent.executor import Launch, LaunchFailed, TaskExecutor, TaskExit, TaskStarted, run_dir_path
from mesoslike.agent.launcher import LauncherError, LaunchRefused, SupervisorLauncher
from mesoslike.wire.types import CommandURI

from test_agent_runtime import task
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def executor(tmp_path):
    made = TaskExecutor(tmp_path)
    yield made
    made.kill_all(grace_period=0.0)
    made.release()


def events_until(executor, done, timeout=20.0):
    """The executor's events from now until ``done(events)`` holds."""
    events = []

    def collected():
        events.extend(executor.poll())
        return done(events)

    wait_until(collected, timeout, "the executor's events", diagnostics=lambda: repr(events))
    return events


def exits(events):
    return {e.task_id: (e.exit_code, e.signal, e.reason) for e in events if isinstance(e, TaskExit)}


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def test_supervisors_are_forked_by_one_launcher_and_end_their_tasks_as_ever(executor):
    executor.launch("fw", task("sleeper", "sleep 30"), "agent-1")
    (supervisor,) = [run.watch.pid for run in executor._runs.values()]
    launcher = parent_of(supervisor)
    assert launcher != os.getpid() and parent_of(launcher) == os.getpid()   # the agent's child forks them
    run_dir = executor._runs[("fw", "sleeper")].run_dir
    wait_until(lambda: (run_dir / "supervisor.json").exists(), 10, "the supervisor's record")
    assert f'"pid": {supervisor}' in (run_dir / "supervisor.json").read_text()   # what recovery finds it by
    assert os.getsid(supervisor) == supervisor                             # a session of its own
    for i, command in enumerate(["true", "exit 3", "kill -TERM $$"]):
        executor.launch("fw", task(f"t{i}", command), "agent-1")
    ended = exits(events_until(executor, lambda events: len(exits(events)) == 3))
    assert ended == {"t0": (0, None, ""), "t1": (3, None, ""), "t2": (None, 15, "")}
    assert executor.launcher is not None and executor.launcher.started == 1
    assert executor.kill("fw", "sleeper", 0.0)
    assert exits(events_until(executor, lambda events: "sleeper" in exits(events)))["sleeper"][1] in (9, 15)


def test_a_supervisor_outlives_its_launcher_and_the_next_task_gets_a_new_one(executor):
    executor.launch("fw", task("slow", "sleep 1; exit 4"), "agent-1")
    events = events_until(executor, lambda events: any(isinstance(e, TaskStarted) for e in events))
    assert executor.launcher is not None
    executor.launcher.close()                      # as when the agent stops: its supervisors run on
    events += events_until(executor, lambda events: "slow" in exits(events))
    assert exits(events)["slow"] == (4, None, "")
    executor.launch("fw", task("next", "true"), "agent-1")
    assert exits(events_until(executor, lambda events: "next" in exits(events)))["next"] == (0, None, "")
    assert executor.launcher.started == 2


def test_without_the_launcher_each_supervisor_is_an_interpreter_of_the_agent(tmp_path):
    executor = TaskExecutor(tmp_path, fork_supervisors=False)
    try:
        executor.launch("fw", task("t", "exit 2"), "agent-1")
        (supervisor,) = [run.watch.pid for run in executor._runs.values()]
        assert executor.launcher is None and parent_of(supervisor) == os.getpid()
        assert exits(events_until(executor, lambda events: "t" in exits(events)))["t"] == (2, None, "")
    finally:
        executor.kill_all(grace_period=0.0)


def test_a_task_makes_no_file_it_does_not_need_and_its_exit_status_is_written_over_the_placeholder(executor):
    # issue 14: on this machine's file system every file made (and later removed) per task cost CPU
    executor.launch("fw", task("quiet", "exit 5"), "agent-1")
    run_dir = executor._runs[("fw", "quiet")].run_dir
    placeholder = (run_dir / "exit.json").stat().st_ino
    assert exits(events_until(executor, lambda events: "quiet" in exits(events)))["quiet"] == (5, None, "")
    assert (run_dir / "exit.json").stat().st_ino == placeholder
    assert not (run_dir / "supervisor.log").exists()           # it had nothing to say
    assert sorted(p.name for p in run_dir.iterdir()) == ["exit.json", "launch.json", "supervisor.json", "task.json"]
    # one that has something to say makes its log then
    executor.launch("fw", task("talks", "true", uris=(CommandURI("file:///no/such/file"),)), "agent-1")
    run_dir = executor._runs[("fw", "talks")].run_dir
    events = events_until(executor, lambda events: any(isinstance(e, LaunchFailed) for e in events))
    assert "/no/such/file" in next(e for e in events if isinstance(e, LaunchFailed)).message
    assert "not started" in (run_dir / "supervisor.log").read_text() and "/no/such/file" in \
        (run_dir / "supervisor.log").read_text()


def test_a_forgotten_run_directory_is_kept_and_reused_by_the_next_launch_with_nothing_of_the_last_run(
        executor, monkeypatch):
    # issue 14: no run directory made and removed per task; at most MAX_SPARE_RUN_DIRS kept
    monkeypatch.setattr(executor_module, "MAX_SPARE_RUN_DIRS", 1)
    executor.launch("fw", task("talker", "true", uris=(CommandURI("file:///no/such/file"),)), "agent-1")
    executor.launch("fw", task("quiet", "exit 3"), "agent-1")
    events_until(executor, lambda events: "quiet" in exits(events) and
                 any(isinstance(e, LaunchFailed) for e in events))
    talker_dir = run_dir_path(executor.work_dir, "fw", "talker")
    inode = talker_dir.stat().st_ino
    assert (talker_dir / "supervisor.log").exists()
    executor.forget("fw", "talker")
    executor.forget("fw", "quiet")                  # beyond the limit: removed
    assert not talker_dir.exists() and len(list((executor.work_dir / "meta" / "spare").iterdir())) == 1
    executor.launch("fw", task("third", "exit 5"), "agent-1")
    third_dir = run_dir_path(executor.work_dir, "fw", "third")
    assert third_dir.stat().st_ino == inode         # the talker's directory, renamed
    assert list((executor.work_dir / "meta" / "spare").iterdir()) == []
    assert exits(events_until(executor, lambda events: "third" in exits(events)))["third"] == (5, None, "")
    assert json.loads((third_dir / "launch.json").read_text())["task_id"] == "third"
    assert json.loads((third_dir / "task.json").read_text())["pid"] > 0
    assert not (third_dir / "supervisor.log").exists()   # nothing of the talker's run


def readable_json(text: str) -> bool:
    """Whether ``text`` is a JSON document (a reader takes a file that is not as not written yet)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_a_reused_run_directory_holds_nothing_of_the_last_run_from_the_moment_it_takes_its_place(
        executor, monkeypatch):
    # an agent killed -9 right after the spare is renamed into place recovers the new task from that directory:
    # the last run's supervisor.json, task.json and launch.json must already be cut to nothing readable (one
    # byte: no JSON document, read as "not started"), its exit.json the next run's placeholder ("not ended"),
    # nothing of the run before
    executor.launch("fw", task("first", "exit 7"), "agent-1")
    assert exits(events_until(executor, lambda events: "first" in exits(events)))["first"] == (7, None, "")
    executor.forget("fw", "first")
    seen: dict[str, str] = {}
    real_rename = os.rename

    def rename_and_look(source, target):
        real_rename(source, target)
        if "meta/tasks" in str(target):
            seen.update({name: (Path(target) / name).read_text()
                         for name in ("supervisor.json", "task.json", "exit.json", "launch.json")})

    monkeypatch.setattr(executor_module.os, "rename", rename_and_look)
    executor.launch("fw", task("second", "exit 5"), "agent-1")
    monkeypatch.setattr(executor_module.os, "rename", real_rename)
    placeholder = seen.pop("exit.json", None)
    assert placeholder is not None and json.loads(placeholder) == {"ended": False}, placeholder
    assert seen and all(len(text) <= 1 and not readable_json(text) for text in seen.values()), seen
    assert exits(events_until(executor, lambda events: "second" in exits(events)))["second"] == (5, None, "")


def test_launches_asked_together_get_their_supervisors_from_one_launcher_and_each_its_own_outcome(executor, tmp_path):
    # the agent's loop turn asks for a batch: each task prepared and its supervisor asked of the launcher while
    # the launcher forks the previous ones, the answers read together at the end; the tasks wait for the test
    # to have seen their supervisors' parent (a supervisor whose task ended is gone from /proc)
    go = tmp_path / "go"
    held = f"while [ ! -e {go} ]; do sleep 0.05; done; "
    problems = executor.launch_many([Launch("fw", task("a", held + "exit 1"), "agent-1"),
                                     Launch("fw", task("b", held + "exit 2"), "agent-1"),
                                     Launch("fw", task("a", "exit 9"), "agent-1"),   # the same task again
                                     Launch("fw", task("c", held + "exit 3"), "agent-1")])
    assert [problem is None for problem in problems] == [True, True, False, True]
    assert "already running" in str(problems[2])
    assert len({parent_of(run.watch.pid) for run in executor._runs.values()}) == 1
    go.touch()
    ended = exits(events_until(executor, lambda events: len(exits(events)) == 3))
    assert ended == {"a": (1, None, ""), "b": (2, None, ""), "c": (3, None, "")}
    assert executor.launcher is not None and executor.launcher.started == 1


def test_the_launchers_answers_to_a_batch_are_read_after_the_whole_batch_was_asked(tmp_path):
    # a launcher that answers only once it has read three requests (and ends before its third answer): each
    # request gets its own outcome, and one left unanswered is not known to have started (never retried)
    script = tmp_path / "launcher.py"
    script.write_text("import sys\n"
                      "lines = [sys.stdin.buffer.readline() for _ in range(3)]\n"
                      "sys.stdout.write('!no PID namespace here\\n4242\\n')\n")
    launcher = SupervisorLauncher(sys.executable, str(script))
    try:
        for name in ("x", "y", "z"):
            assert launcher.submit(tmp_path / name, {}, tmp_path / name / "log")
        refused, started, unknown = launcher.collect()
        assert isinstance(refused, LaunchRefused) and "no PID namespace here" in str(refused)
        assert started == 4242
        assert isinstance(unknown, LauncherError)
        assert launcher.collect() == []
        # the next request goes to a new launcher
        assert launcher.submit(tmp_path / "w", {}, tmp_path / "w" / "log") and launcher.started == 2
    finally:
        launcher.close()


def test_an_unforeseen_error_in_a_batch_leaves_the_launches_before_it_watched_and_the_launcher_in_step(
        executor, monkeypatch):
    # a bug in preparing one launch escapes (as it always did); the supervisor asked for before it is
    # watched all the same, and the next launch gets its own supervisor's answer, not that one's
    real = executor._container_spec

    def spec(framework_id, task_info, *args):
        if task_info.task_id == "bad":
            raise RuntimeError("a bug")
        return real(framework_id, task_info, *args)
    monkeypatch.setattr(executor, "_container_spec", spec)
    with pytest.raises(RuntimeError):
        executor.launch_many([Launch("fw", task("first", "exit 4"), "agent-1"),
                              Launch("fw", task("bad", "true"), "agent-1")])
    executor.launch("fw", task("next", "exit 6"), "agent-1")
    ended = exits(events_until(executor, lambda events: len(exits(events)) == 2))
    assert ended == {"first": (4, None, ""), "next": (6, None, "")}
