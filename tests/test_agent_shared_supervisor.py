"""The agent's shared supervisor (mesoslike/agent/shared_supervisor.py):
one long-lived process per agent spawns the plain tasks, watches them with
pidfds and records their ends, with no Python process per task. Real
processes, real cgroups, a real user switch."""

import collections
import os
import pwd
import select
import signal
import sys
from pathlib import Path

import pytest

from agent_helpers import cgroups_below, cgroups_root, require_cgroups, spares_below, task_cgroups_below  # noqa: F401
from environment import unavailable
from mesoslike.agent.executor import (REASON_CONTAINER_LIMITATION_MEMORY, REASON_EXECUTOR_TERMINATED, LaunchFailed,
                                      TaskExecutor, TaskExit, TaskStarted, run_dir_path)
from mesoslike.agent.isolation import select_isolator
from mesoslike.agent.supervisor import cgroup_pids, read_json, set_autogroup_nice
from mesoslike.wire.types import CommandURI

from test_agent_launcher import events_until, exits, parent_of
from test_agent_runtime import task
from waiting import wait_until

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfds, /proc"),
]


def shared_executor(work_dir, **kwargs):
    return TaskExecutor(work_dir, shared_supervisor=True, **kwargs)


@pytest.fixture
def executor(tmp_path):
    made = shared_executor(tmp_path / "agent")
    yield made
    made.kill_all(grace_period=0.0)
    made.release()
    stop_shared_supervisor(tmp_path / "agent")


def stop_shared_supervisor(work_dir: Path) -> None:
    """End the shared supervisor of ``work_dir`` (it outlives its agent, as it must)."""
    try:
        state = read_json(str(work_dir / "meta" / "shared-supervisor.json"))
    except OSError:
        return
    try:
        os.kill(state["pid"], signal.SIGKILL)   # type: ignore[index]
    except ProcessLookupError:
        pass


def run_of(executor, task_id):
    return executor._runs[("fw", task_id)]


def started_record(executor, task_id: str) -> dict:
    """The task's ``task.json``, once the shared supervisor has written it (it may
    run, and write its own files, before)."""
    task_file = run_of(executor, task_id).run_dir / "task.json"
    wait_until(lambda: task_file.exists() and task_file.read_text().endswith("}"), 20, f"{task_id}'s task.json")
    return read_json(str(task_file))  # type: ignore[return-value]


def test_plain_tasks_run_under_one_shared_supervisor_and_their_exit_codes_arrive(executor):
    for i, command in enumerate(["true", "exit 3", "kill -TERM $$", "echo out; echo err >&2"]):
        executor.launch("fw", task(f"t{i}", command), "agent-1")
    shared = {run.watch.pid for run in executor._runs.values()}
    assert len(shared) == 1
    (supervisor,) = shared
    assert supervisor != os.getpid() and parent_of(supervisor) == os.getpid() and os.getsid(supervisor) == supervisor
    run_dirs = {key[1]: run.run_dir for key, run in executor._runs.items()}
    events = events_until(executor, lambda events: len(exits(events)) == 4)
    assert exits(events) == {"t0": (0, None, ""), "t1": (3, None, ""), "t2": (None, 15, ""), "t3": (0, None, "")}
    assert {e.task_id for e in events if isinstance(e, TaskStarted)} == {"t0", "t1", "t2", "t3"}
    for run_dir in run_dirs.values():   # the run files a task's own supervisor writes, with the same meaning
        assert read_json(str(run_dir / "supervisor.json"))["pid"] == supervisor  # type: ignore[index]
        assert read_json(str(run_dir / "supervisor.json"))["shared"] is True  # type: ignore[index]
        assert read_json(str(run_dir / "task.json"))["started"] == "spawn"  # type: ignore[index]
    sandbox = executor.sandbox("fw", "t3")
    assert (sandbox / "stdout").read_text() == "out\n" and (sandbox / "stderr").read_text() == "err\n"
    assert executor.launcher is not None and executor.launcher.started == 0   # no supervisor forked
    # what needs a process of its own still gets one: a task with URIs to fetch
    executor.launch("fw", task("fetching", "true", uris=(CommandURI("file:///no/such/file"),)), "agent-1")
    assert run_of(executor, "fetching").watch.pid != supervisor
    events_until(executor, lambda events: not executor.running())


def test_the_shared_supervisors_connection_is_what_the_agents_loop_waits_on_for_ends(executor):
    """The agent's loop polls this descriptor with its sockets: a task's end
    told by the shared supervisor wakes it at once, not at its next look."""
    assert executor.readable() is None   # nothing runs under a shared supervisor yet
    executor.launch("fw", task("t", "true"), "agent-1")
    told = executor.readable()
    assert told is not None and told == executor.link.fileno()
    wait_until(lambda: select.select([told], [], [], 0.1)[0], 20, "the shared supervisor's news")
    events_until(executor, lambda events: "t" in exits(events))
    assert executor.readable() is None   # its run ended: nothing to wait on


def test_a_task_is_killed_with_its_grace_then_sigkill(executor):
    executor.launch("fw", task("polite", "trap 'echo term; exit 7' TERM; echo up > up; while :; do sleep 0.05; done",
                                grace=5.0), "agent-1")
    executor.launch("fw", task("stubborn", "trap '' TERM; echo up > up; while :; do sleep 0.05; done", grace=0.5),
                    "agent-1")
    for name in ("polite", "stubborn"):
        wait_until(lambda: (executor.sandbox("fw", name) / "up").exists(), 20, f"{name} to run")
    stubborn = run_of(executor, "stubborn").task_pid or started_record(executor, "stubborn")["pid"]
    assert executor.kill("fw", "polite", 5.0) and executor.kill("fw", "stubborn", 0.5)
    ended = exits(events_until(executor, lambda events: len(exits(events)) == 2))
    assert ended["polite"] == (7, None, "")            # SIGTERM reached it, it ended on its own
    assert ended["stubborn"] == (None, 9, "")          # SIGKILL after its grace
    assert (executor.sandbox("fw", "polite") / "stdout").read_text() == "term\n"
    assert not Path(f"/proc/{stubborn}").exists()


def test_a_task_runs_in_its_cgroups_with_its_limits_and_an_oom_kill_is_reported(tmp_path, cgroups_root):
    require_cgroups()
    isolator = select_isolator("cgroups", cgroups_root=cgroups_root)
    executor = shared_executor(tmp_path / "agent", isolator=isolator)
    try:
        executor.launch("fw", task("limited", "cat /proc/self/cgroup", resources="cpus:0.5;mem:48"), "agent-1")
        container = run_of(executor, "limited").container
        assert exits(events_until(executor, lambda events: "limited" in exits(events)))["limited"] == (0, None, "")
        cgroup_lines = (executor.sandbox("fw", "limited") / "stdout").read_text()
        for directory in container.directories:        # in each of its cgroups from its first instruction
            assert directory.rsplit("/", 1)[1] in cgroup_lines
        assert_kept_for_the_pool(executor, container)
        memory = container.cgroups.get("memory", "")
        assert memory and container.mem_bytes == 48 * 1024 * 1024
        # the supervisor went back where it came from: no task cgroup holds it
        supervisor = run_of_any_pid(executor, tmp_path / "agent")
        assert cgroups_root not in Path(f"/proc/{supervisor}/cgroup").read_text()
        hog = f"{sys.executable} -c 'b = bytearray(200 * 2**20); b[::4096] = b\"x\" * len(b[::4096])'"
        executor.launch("fw", task("hog", hog, resources="cpus:0.5;mem:32"), "agent-1")
        hog_container = run_of(executor, "hog").container
        ended = events_until(executor, lambda events: "hog" in exits(events), timeout=40)
        code, signum, reason = exits(ended)["hog"]
        assert (code, signum) in ((137, None), (None, 9)) and reason == REASON_CONTAINER_LIMITATION_MEMORY
        # an OOM kill's cgroups go (a counter that cannot be reset serves no other task)
        assert hog_container.pooled and not any(os.path.exists(d) for d in hog_container.directories)
    finally:
        executor.kill_all(grace_period=0.0)
        executor.release()
        stop_shared_supervisor(tmp_path / "agent")
    assert not any(os.path.exists(directory) for directory in container.directories)   # the pool's, at release


def run_of_any_pid(executor, work_dir):
    return read_json(str(work_dir / "meta" / "shared-supervisor.json"))["pid"]  # type: ignore[index]


@pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                    reason="switching users needs root (CI runs as root: never skipped there)")
def test_a_task_runs_as_its_user(tmp_path):
    work = tmp_path / "agent"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    executor = shared_executor(work, switch_user=True)
    try:
        executor.prepare_directories()
        nobody = pwd.getpwnam("nobody")
        executor.launch("fw", task("as-nobody", "id -u; id -un; echo $HOME; touch mine", user="nobody"), "agent-1")
        run_dir = run_of(executor, "as-nobody").run_dir
        assert exits(events_until(executor, lambda events: "as-nobody" in exits(events)))["as-nobody"] == \
            (0, None, "")
        uid, name, home = (executor.sandbox("fw", "as-nobody") / "stdout").read_text().split()
        assert (int(uid), name, home) == (nobody.pw_uid, "nobody", nobody.pw_dir)
        assert (executor.sandbox("fw", "as-nobody") / "mine").stat().st_uid == nobody.pw_uid
        assert read_json(str(run_dir / "task.json"))["started"] == "fork"  # type: ignore[index]
        # a user this machine does not have fails the launch, naming it (never root instead)
        executor.launch("fw", task("ghost", "true", user="mesoslike-no-such-user"), "agent-1")
        events = events_until(executor, lambda events: not executor.running())
        assert any("mesoslike-no-such-user" in getattr(e, "message", "") for e in events)
    finally:
        executor.kill_all(grace_period=0.0)
        executor.release()
        stop_shared_supervisor(work)


def test_a_restarted_agent_reattaches_and_learns_of_ends_before_and_after(tmp_path):
    work = tmp_path / "agent"
    first = shared_executor(work)
    first.launch("fw", task("early", "exit 5"), "agent-1")
    first.launch("fw", task("late", "echo $$ > pid; while [ ! -e go ]; do sleep 0.05; done; exit 6"), "agent-1")
    supervisor = run_of(first, "late").watch.pid
    late = executor_sandbox = first.sandbox("fw", "late")
    wait_until(lambda: (executor_sandbox / "pid").exists() and (first.sandbox("fw", "early") / "stdout").exists()
               and read_json(str(run_of(first, "early").run_dir / "exit.json")).get("ended"),  # type: ignore[attr-defined]
               20, "both tasks to start, the early one to end")
    first.release()                                    # the agent is gone: the tasks run on
    second = shared_executor(work)
    try:
        events = second.recover("fw", "early") + second.recover("fw", "late")
        assert exits(events) == {"early": (5, None, "")}   # ended while no agent watched: its exit.json
        assert any(isinstance(e, TaskStarted) and e.task_id == "late" for e in events)
        assert second.link.pid == supervisor and second.link.started == 0   # re-attached, none started
        (late / "go").touch()
        assert exits(events_until(second, lambda events: "late" in exits(events)))["late"] == (6, None, "")
    finally:
        second.kill_all(grace_period=0.0)
        second.release()
        stop_shared_supervisor(work)


def test_the_shared_supervisors_death_fails_its_tasks_and_the_next_task_gets_a_new_one(executor, tmp_path):
    executor.launch("fw", task("orphan", "echo $$ > pid; exec sleep 60"), "agent-1")
    pid_file = executor.sandbox("fw", "orphan") / "pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, "the task to run")
    task_pid = int(pid_file.read_text())
    supervisor = run_of(executor, "orphan").watch.pid
    os.kill(supervisor, signal.SIGKILL)
    events = events_until(executor, lambda events: "orphan" in exits(events))
    ended = next(e for e in events if isinstance(e, TaskExit))
    assert ended.reason == REASON_EXECUTOR_TERMINATED and "died" in ended.message
    wait_until(lambda: not Path(f"/proc/{task_pid}").exists() or "Z" in
               Path(f"/proc/{task_pid}/stat").read_text().rsplit(")", 1)[1].split()[0], 10,
               "the unsupervised task to be killed")
    executor.launch("fw", task("next", "exit 2"), "agent-1")
    assert run_of(executor, "next").watch.pid != supervisor and executor.link.started == 2
    assert exits(events_until(executor, lambda events: "next" in exits(events)))["next"] == (2, None, "")


def test_an_agent_stopped_with_its_tasks_leaves_none_running_though_their_supervisor_is_stuck(executor):
    """``kill_all`` (an agent stopped with ``kill_tasks_on_exit``, ``mesoslike
    local``'s stop): a task whose supervisor does not end it by the kill's
    deadline has its processes SIGKILLed by the agent itself."""
    executor.launch("fw", task("held", "echo $$ > pid; trap '' TERM; exec sleep 600"), "agent-1")
    pid_file = executor.sandbox("fw", "held") / "pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, "the task to run")
    task_pid = int(pid_file.read_text())
    supervisor = run_of(executor, "held").watch.pid
    started = events_until(executor, lambda events: any(isinstance(e, TaskStarted) for e in events))
    assert [e.task_id for e in started if isinstance(e, TaskStarted)] == ["held"]
    os.kill(supervisor, signal.SIGSTOP)   # a supervisor that never answers (starved, stopped)
    try:
        executor.kill_all(grace_period=0.0, give_up_after=0.5)
        assert not running(task_pid)
    finally:
        os.kill(supervisor, signal.SIGCONT)


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_sigterm_to_the_shared_supervisor_kills_its_tasks_with_their_grace_and_records_them(executor, tmp_path):
    executor.launch("fw", task("polite", "trap 'exit 7' TERM; echo up > up; while :; do sleep 0.05; done"),
                    "agent-1")
    wait_until(lambda: (executor.sandbox("fw", "polite") / "up").exists(), 20, "the task to run")
    supervisor = run_of(executor, "polite").watch.pid
    os.kill(supervisor, signal.SIGTERM)
    assert exits(events_until(executor, lambda events: "polite" in exits(events)))["polite"] == (7, None, "")
    wait_until(lambda: executor.link.alive() is False, 10, "the shared supervisor to end")


def test_a_connection_made_again_loses_no_end_and_no_launch(executor, monkeypatch):
    executor.launch("fw", task("waits", "echo $$ > pid; while [ ! -e go ]; do sleep 0.05; done; exit 3"), "agent-1")
    sandbox = executor.sandbox("fw", "waits")
    wait_until(lambda: (sandbox / "pid").exists(), 20, "the task to run")
    link = executor.link

    def lost() -> None:   # the connection breaks with the launch request unsent
        link._outbox.clear()
        link._disconnect()
    monkeypatch.setattr(link, "flush", lost)
    executor.launch("fw", task("lost", "exit 4"), "agent-1")
    monkeypatch.undo()
    (sandbox / "go").touch()   # ends while no connection is there to tell it
    ended = exits(events_until(executor, lambda events: len(exits(events)) == 2))
    assert ended == {"waits": (3, None, ""), "lost": (4, None, "")}
    assert link.started == 1   # the same shared supervisor, connected again


def test_without_a_shared_supervisor_to_be_had_a_task_gets_a_supervisor_of_its_own(executor, monkeypatch):
    from mesoslike.agent import supervisor_link

    monkeypatch.setattr(supervisor_link, "SHARED_SUPERVISOR_SCRIPT", "/nonexistent/shared_supervisor.py")
    executor.launch("fw", task("alone", "exit 6"), "agent-1")
    run = run_of(executor, "alone")
    assert executor.link.started == 1 and executor.link.identity is None   # tried, and it did not start
    assert exits(events_until(executor, lambda events: "alone" in exits(events)))["alone"] == (6, None, "")
    assert read_json(str(run.run_dir / "supervisor.json")).get("shared") is None  # type: ignore[union-attr]


# ------------------------------------------------------------ with namespaces
NAMESPACES = "namespaces/pid,namespaces/ipc,namespaces/uts,filesystem/linux"


def require_init_helper(meta: Path) -> str:
    """The namespace init helper, built (skipped outside CI, failed in CI, without a C compiler)."""
    from mesoslike.agent import nsinit

    helper = nsinit.helper(str(meta))
    if helper is None:
        unavailable("no C compiler to build the namespace init helper (as root: make cc)")
    assert helper is not None
    return helper


def namespaced_executor(work_dir, cgroups_root, helper=True):
    from mesoslike.agent.isolation import select_isolation

    if os.geteuid() != 0:
        unavailable("namespaces need root")
    if helper:
        require_init_helper(Path(work_dir) / "meta")
    isolation = select_isolation(f"{NAMESPACES},cgroups/cpu,cgroups/mem", cgroups_root=cgroups_root)
    return shared_executor(work_dir, isolation=isolation)


@pytest.fixture
def ns_executor(tmp_path, cgroups_root):  # noqa: F811 (fixture)
    made = namespaced_executor(tmp_path / "agent", cgroups_root)
    yield made
    made.kill_all(grace_period=0.0)
    made.release()
    stop_shared_supervisor(tmp_path / "agent")


def test_tasks_with_namespaces_run_under_the_shared_supervisor_through_its_init_helper(ns_executor):
    """The default isolation's tasks (PID, mount, IPC, UTS namespaces, a private /tmp) get no Python
    process each: the shared supervisor spawns the compiled init helper as pid 1 of each task's PID
    namespace; exit codes, signals, kill grace and launch failures arrive as a task's own supervisor
    would record them."""
    executor = ns_executor
    assert executor.init_helper is not None and "/nsinit-" in executor.init_helper
    executor.launch("fw", task("five", "echo $$ > pid; ls /proc | grep -cE '^[0-9]+$' > count; "
                                       "echo private > /tmp/mine; exit 5"), "agent-1")
    executor.launch("fw", task("signalled", "kill -TERM $$"), "agent-1")
    executor.launch("fw", task("polite", "trap 'echo term; exit 7' TERM; echo up > up; while :; do sleep 0.05; done",
                               grace=5.0), "agent-1")
    executor.launch("fw", task("missing", "", shell=False, arguments=["no-such-program-here"]), "agent-1")
    shared = {run.watch.pid for run in executor._runs.values()}
    assert len(shared) == 1
    (supervisor,) = shared
    keys = set(executor._runs)
    polite = executor.sandbox("fw", "polite")
    wait_until(lambda: (polite / "up").exists(), 20, "polite to run")
    task_file = run_of(executor, "polite").run_dir / "task.json"
    wait_until(lambda: task_file.exists() and task_file.read_text().endswith("}"), 20, "its task.json")
    record = read_json(str(task_file))
    assert record["started"] == "nsinit"  # type: ignore[index]
    init, task_pid = record["init"], record["pid"]  # type: ignore[index]
    assert parent_of(init) == supervisor and parent_of(task_pid) == init
    assert os.readlink(f"/proc/{init}/exe") == executor.init_helper   # no Python there
    assert Path(f"/proc/{init}/environ").read_bytes() == b""           # nothing of the task's environment
    assert os.readlink(f"/proc/{task_pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    assert executor.kill("fw", "polite", 5.0)   # SIGTERM to the init, which forwards it to the task's group
    ended = events_until(executor, lambda events: len(exits(events)) == 3 and not executor.running())
    assert exits(ended) == {"five": (5, None, ""), "signalled": (None, 15, ""), "polite": (7, None, "")}
    (missing,) = [e for e in ended if isinstance(e, LaunchFailed)]
    assert missing.task_id == "missing" and "cannot execute no-such-program-here" in missing.message, missing
    started = {e.task_id: e.pid for e in ended if isinstance(e, TaskStarted)}
    assert set(started) == {"five", "signalled", "polite"} and all(pid > 0 for pid in started.values())
    assert (polite / "stdout").read_text() == "term\n"
    five = executor.sandbox("fw", "five")
    assert (five / "pid").read_text() == "2\n"                   # the first process after its init
    assert int((five / "count").read_text()) <= 4                # its init, its shell, ls, grep: no host process
    assert (five / "tmp" / "mine").read_text() == "private\n"    # its /tmp: its sandbox's tmp
    for _, task_id in keys:
        run_dir = run_dir_path(executor.work_dir, "fw", task_id)
        assert read_json(str(run_dir / "supervisor.json"))["shared"] is True  # type: ignore[index]
    assert executor.launcher is not None and executor.launcher.started == 0   # no supervisor forked


def init_servers_of(supervisor: int) -> list[int]:
    """The shared supervisor's children with the command of the init helper's server (``nsinit --serve``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and parent_of(int(entry.name)) == supervisor \
                    and (entry / "cmdline").read_bytes().endswith(b"\0--serve\0"):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def test_task_inits_are_clones_of_one_init_server_and_a_killed_server_is_replaced(ns_executor):
    """No exec of the init helper per task (its C library start-up cost more than the namespaces):
    one ``nsinit --serve`` process, the shared supervisor's child, clones each task's init, which is
    the shared supervisor's child as a spawned one was. Killed, it is replaced at the next launch,
    whose task runs as ever."""
    executor = ns_executor
    sandboxes = {}
    for name in ("first", "second"):
        executor.launch("fw", task(name, "while [ ! -e go ]; do sleep 0.05; done"), "agent-1")
        sandboxes[name] = executor.sandbox("fw", name)
    (supervisor,) = {run.watch.pid for run in executor._runs.values()}
    inits = [started_record(executor, name)["init"] for name in sandboxes]
    (server,) = set(init_servers_of(supervisor)) - set(inits)   # the inits are clones of it: the same command
    for init in inits:
        assert parent_of(init) == supervisor
        assert Path(f"/proc/{init}/cmdline").read_bytes() == f"{executor.init_helper}\0--serve\0".encode()
    os.kill(server, signal.SIGKILL)
    # a zombie, or reaped already (its SIGCHLD read: the loop lets an ended server go at once)
    wait_until(lambda: not Path(f"/proc/{server}/cmdline").exists()
               or not Path(f"/proc/{server}/cmdline").read_bytes(), 20, "the server to die")
    executor.launch("fw", task("third", "exit 3"), "agent-1")
    for sandbox in sandboxes.values():
        (sandbox / "go").touch()
    ended = events_until(executor, lambda events: len(exits(events)) == 3)
    assert exits(ended) == {"first": (0, None, ""), "second": (0, None, ""), "third": (3, None, "")}
    (replacement,) = init_servers_of(supervisor)
    assert replacement != server


def ask_for_init(server, cwd, argv) -> int:
    """Ask ``server`` (an ``nsinit.Server``) for an init of no namespace that runs ``argv`` in ``cwd``,
    its output to /dev/null, without waiting for the answer; the read end of its status pipe."""
    from mesoslike.agent import nsinit

    spec = nsinit.encode_spec(namespaces=[], hostname="", tmp="", keep=[], volumes=[], user=None, cwd=str(cwd),
                              env={}, argv=argv)
    spec_fd = os.memfd_create("spec", os.MFD_CLOEXEC)
    os.write(spec_fd, spec)
    os.lseek(spec_fd, 0, os.SEEK_SET)
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        server.submit(spec_fd, write_end, null, null, False)
    finally:
        for fd in (spec_fd, write_end, null):
            os.close(fd)
    return read_end


def test_the_init_server_takes_requests_in_flight_and_answers_them_in_order(tmp_path):
    """The shared supervisor sends its launches' requests without waiting for each answer (a round
    trip a task was half its wall time): more than the socket's queue holds
    (``net.unix.max_dgram_qlen``, 10 by default) go in without a deadlock — the answers are read
    while a full queue is waited for — and come back in the order asked, each the pid of an init
    that ran its task."""
    from mesoslike.agent import nsinit

    helper = require_init_helper(tmp_path / "meta")
    server = nsinit.Server(helper)
    count = 25
    pipes = []
    try:
        for index in range(count):
            pipes.append(ask_for_init(server, tmp_path, ["/bin/sh", "-c", f"exit {index}"]))
        assert server.pending + len(server.ready) == count
        answers: list = []
        wait_until(lambda: answers.extend(server.answers(wait=True)) or len(answers) == count, 30, "the answers")
        assert all(isinstance(pid, int) and parent_of(pid) == os.getpid() for pid in answers), answers
        for index, (pid, pipe) in enumerate(zip(answers, pipes)):   # in order: the i-th init ran "exit i"
            os.waitpid(pid, 0)
            said = b""
            while chunk := os.read(pipe, 4096):
                said += chunk
            (ended,) = [line for line in said.decode().splitlines() if line.startswith("X ")]
            assert os.waitstatus_to_exitcode(int(ended[2:])) == index
    finally:
        server.close()
        for pipe in pipes:
            os.close(pipe)


def test_the_shared_supervisor_watches_its_tasks_with_epoll(executor):
    """Each running task's pidfd (and, with namespaces, its init's status pipe) is watched; poll(2)
    looked at every one of them each turn of the loop (8 % of the shared supervisor's CPU in a burst
    of 4,000 tasks): the loop waits in epoll, which hands over only what is ready."""
    executor.launch("fw", task("waiting", "while [ ! -e go ]; do sleep 0.05; done"), "agent-1")
    (supervisor,) = {run.watch.pid for run in executor._runs.values()}
    started_record(executor, "waiting")
    links = []
    for fd in os.listdir(f"/proc/{supervisor}/fd"):
        try:
            links.append(os.readlink(f"/proc/{supervisor}/fd/{fd}"))
        except OSError:
            continue
    assert "anon_inode:[eventpoll]" in links, links
    # its end is found by SIGCHLD (a signalfd) and waitid, not a pidfd a task in the epoll set
    assert "anon_inode:[signalfd]" in links and "anon_inode:[pidfd]" not in links, links
    (executor.sandbox("fw", "waiting") / "go").touch()
    assert exits(events_until(executor, lambda events: "waiting" in exits(events)))["waiting"] == (0, None, "")


def test_a_server_let_go_for_another_helper_answers_what_was_asked_of_it_first(tmp_path):
    """A restarted agent of another version names another init helper: the shared supervisor starts a
    server of it and lets the last one go — but only once the last has answered every request in
    flight, whose inits may have been cloned already (let go unanswered, they would run with no one
    watching them)."""
    import shutil

    from mesoslike.agent.shared_supervisor import SharedSupervisor, SharedTask

    helper = require_init_helper(tmp_path / "meta")
    other = tmp_path / "other-helper"
    shutil.copy2(helper, other)
    supervisor = SharedSupervisor(str(tmp_path / "meta"))
    server = supervisor.server_for(helper)
    asked = []
    for index in range(5):
        run_dir = tmp_path / "meta" / "tasks" / "fw" / f"t{index}"
        run_dir.mkdir(parents=True)
        shared_task = SharedTask(str(run_dir), f"fw/t{index}")
        shared_task.status_pipe, shared_task.awaiting = ask_for_init(server, tmp_path, ["/bin/true"]), True
        supervisor.tasks[shared_task.name] = shared_task
        supervisor.asked(server, shared_task)
        asked.append(shared_task)
    try:
        replacement = supervisor.server_for(str(other))
        assert replacement is not server and server.sock is None
        assert all(not t.awaiting and t.task_pid > 0 and parent_of(t.task_pid) == os.getpid() for t in asked), \
            [(t.name, t.task_pid) for t in asked]
        assert set(supervisor.tasks) == {t.name for t in asked}
    finally:
        for shared_task in asked:
            if shared_task.task_pid:
                os.waitpid(shared_task.task_pid, 0)
        supervisor.close()


def test_a_kill_that_comes_before_the_init_server_answered_is_carried_out(ns_executor):
    """A kill asked in the same breath as the launch reaches the shared supervisor before its init
    server has answered with the init's pid: it is kept, and carried out once the pid is known (with
    its grace), never dropped."""
    executor = ns_executor
    for name in ("first", "second", "third"):
        executor.launch("fw", task(name, "trap 'exit 7' TERM; while :; do sleep 0.05; done", grace=5.0), "agent-1")
        assert executor.kill("fw", name, 5.0)
    ended = events_until(executor, lambda events: len(exits(events)) + len(
        [e for e in events if isinstance(e, LaunchFailed)]) == 3, timeout=40)
    assert set(exits(ended)) == {"first", "second", "third"}, ended
    for code, signum, _ in exits(ended).values():   # SIGTERM'd (killed before its trap was set) or trapped
        assert (code, signum) in ((7, None), (None, signal.SIGTERM)), ended


def test_a_cloned_init_hands_its_task_only_its_three_descriptors_no_blocked_signal_and_a_sticky_tmp(ns_executor):
    """The init server does once what each init did (the init's signals; /dev/null as fd 0, 1-4
    taken so that a request's descriptors land above them): a task of a cloned init still gets
    /dev/null, its stdout and its stderr as fds 0-2 and no other descriptor, no signal blocked, the
    agent's umask, and a private /tmp made mode 1777 (with no chmod after the mkdir); twice in a row
    from the same server (each init its own descriptors)."""
    executor = ns_executor
    script = ("grep SigBlk /proc/self/status > blocked; stat -c %a /tmp > tmpmode; umask > mask; echo out; "
              "echo err >&2; while [ ! -e go ]; do sleep 0.05; done")
    names = ("one", "two")
    for name in names:
        executor.launch("fw", task(name, script), "agent-1")
    mask = os.umask(0)
    os.umask(mask)
    for name in names:
        sandbox = executor.sandbox("fw", name)
        wait_until(lambda: (sandbox / "stderr").read_text() == "err\n", 20, f"{name} to run")
        pid = started_record(executor, name)["pid"]
        fds = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        assert fds == {0: "/dev/null", 1: str(sandbox / "stdout"), 2: str(sandbox / "stderr")}, fds
        assert int((sandbox / "blocked").read_text().split()[1], 16) == 0
        assert (sandbox / "tmpmode").read_text() == "1777\n"
        assert int((sandbox / "mask").read_text(), 8) == mask
        assert (sandbox / "stdout").read_text() == "out\n"
        assert oct((sandbox / "tmp").stat().st_mode & 0o7777) == oct(0o1777)
        (sandbox / "go").touch()
    ended = events_until(executor, lambda events: len(exits(events)) == 2)
    assert exits(ended) == {"one": (0, None, ""), "two": (0, None, "")}, ended

def test_a_task_with_namespaces_runs_in_its_cgroups_and_an_oom_kill_is_reported(ns_executor):
    executor = ns_executor
    executor.launch("fw", task("limited", "cat /proc/self/cgroup", resources="cpus:0.5;mem:48"), "agent-1")
    container = run_of(executor, "limited").container
    assert exits(events_until(executor, lambda events: "limited" in exits(events)))["limited"] == (0, None, "")
    cgroup_lines = (executor.sandbox("fw", "limited") / "stdout").read_text()
    assert container.directories
    for directory in container.directories:        # in each of its cgroups, with its init
        assert directory.rsplit("/", 1)[1] in cgroup_lines
    assert_kept_for_the_pool(executor, container)
    supervisor = run_of_any_pid(executor, executor.work_dir)   # the shared supervisor went back out of them
    assert container.directories[0].rsplit("/", 1)[1] not in Path(f"/proc/{supervisor}/cgroup").read_text()
    hog = f"{sys.executable} -c 'b = bytearray(200 * 2**20); b[::4096] = b\"x\" * len(b[::4096])'"
    executor.launch("fw", task("hog", hog, resources="cpus:0.5;mem:32"), "agent-1")
    hog_container = run_of(executor, "hog").container   # the pooled cgroups "limited" had, its limits now
    ended = events_until(executor, lambda events: "hog" in exits(events), timeout=40)
    code, signum, reason = exits(ended)["hog"]
    assert (code, signum) in ((137, None), (None, 9)) and reason == REASON_CONTAINER_LIMITATION_MEMORY
    # an OOM kill's cgroups go: its counter cannot be reset, they serve no other task
    assert hog_container.pooled and not any(os.path.exists(d) for d in hog_container.directories)


def assert_kept_for_the_pool(executor, container):
    """An ended task's cgroups: emptied, and (where the isolator pools) in its pool for a later task."""
    for directory in container.directories:
        assert not cgroup_pids(directory)
    pool = executor.isolator._pool if executor.isolator.pool_size else []
    assert not executor.isolator.pool_size or container.directories in [c.directories for c in pool]


def test_without_a_c_compiler_tasks_with_namespaces_get_supervisors_of_their_own(tmp_path, cgroups_root,  # noqa: F811
                                                                                monkeypatch, caplog):
    monkeypatch.setenv("CC", "/nonexistent/cc")   # another compiler: a build of its own, which cannot be made
    executor = namespaced_executor(tmp_path / "agent", cgroups_root, helper=False)
    try:
        assert executor.init_helper is None
        assert "the namespace init helper cannot be built" in caplog.text and "no C compiler" in caplog.text
        executor.launch("fw", task("alone", "echo $$ > pid; exit 6"), "agent-1")
        run = run_of(executor, "alone")
        assert exits(events_until(executor, lambda events: "alone" in exits(events)))["alone"] == (6, None, "")
        assert read_json(str(run.run_dir / "supervisor.json")).get("shared") is None  # type: ignore[union-attr]
        assert (executor.sandbox("fw", "alone") / "pid").read_text() == "2\n"   # namespaced all the same
    finally:
        executor.kill_all(grace_period=0.0)
        executor.release()
        stop_shared_supervisor(tmp_path / "agent")


@pytest.mark.parametrize("spec, why", [
    (b"ns\0pid\0cwd\0/\0arg\0true\0", "ends inside"),                      # no end record
    (b"bogus\0x\0end\0", "unknown record"),
    (b"cwd\0/\0env\0NOEQUALS\0arg\0true\0end\0", "without '='"),
    (b"cwd\0relative\0arg\0true\0end\0", "not an absolute path"),
    (b"cwd\0/\0arg\0true\0end\0extra\0", "goes on after its end"),
    (b"cwd\0/\0user\0-1\0" b"0\0\0arg\0true\0end\0", "not a number"),
    (b"cwd\0/\0arg\0true", "not terminated"),
])
def test_the_init_helper_refuses_a_bad_spec_saying_why(tmp_path, spec, why):
    helper = require_init_helper(tmp_path)
    spec_fd = os.memfd_create("spec")
    os.write(spec_fd, spec)
    os.lseek(spec_fd, 0, os.SEEK_SET)
    read_end, write_end = os.pipe()
    import subprocess
    done = subprocess.run([helper], env={}, pass_fds=(3, 4), timeout=30,
                          preexec_fn=lambda: (os.dup2(spec_fd, 3), os.dup2(write_end, 4)) and None)
    os.close(write_end)
    said = os.read(read_end, 65536).decode()
    assert done.returncode == 127 and said.startswith("F ") and why in said, (done.returncode, said)


@pytest.mark.parametrize("cwd, argv, why", [
    ("missing", ["/bin/true"], "the task's chdir failed: No such file or directory"),
    (".", ["no-such-program-here"], "cannot execute no-such-program-here: No such file or directory"),
    (".", ["/dev/null"], "cannot execute /dev/null: Permission denied"),
])
def test_a_task_that_cannot_start_has_its_init_say_why_without_a_pipe_of_its_own(tmp_path, cwd, argv, why):
    """The vforked child says why it could not become the task in the memory it shares with its
    init until it executes or exits (no pipe made, read and closed a task): the init fails the
    launch with the step and the error."""
    import subprocess

    from mesoslike.agent import nsinit

    helper = require_init_helper(tmp_path / "meta")
    spec = nsinit.encode_spec(namespaces=[], hostname="", tmp="", keep=[], volumes=[], user=None,
                              cwd=str(tmp_path / cwd), env={"PATH": "/usr/bin:/bin"}, argv=argv)
    spec_fd = os.memfd_create("spec")
    os.write(spec_fd, spec)
    os.lseek(spec_fd, 0, os.SEEK_SET)
    read_end, write_end = os.pipe()
    done = subprocess.run([helper], env={}, pass_fds=(3, 4), timeout=30, stdin=subprocess.DEVNULL,
                          preexec_fn=lambda: (os.dup2(spec_fd, 3), os.dup2(write_end, 4)) and None)
    os.close(write_end)
    said = os.read(read_end, 65536).decode()
    assert done.returncode == 127 and said == f"F {why}\n", (done.returncode, said)


def test_the_init_resets_the_signals_it_was_given_ignored_for_its_task(tmp_path):
    """The task's dispositions are the defaults (execve resets the caught ones; the init resets the
    ones it ignores — found once, not 64 sigactions a task): an init executed with SIGHUP, SIGUSR2 and
    SIGTERM ignored, and one cloned by a server (SIGPIPE ignored in it), hand their task none of them
    ignored, nor any other."""
    import subprocess

    from mesoslike.agent import nsinit

    helper = require_init_helper(tmp_path / "meta")
    script = ("while read -r line; do case $line in SigIgn*) echo \"$line\";; esac; "
              "done < /proc/$$/status > ignored")
    spec = nsinit.encode_spec(namespaces=[], hostname="", tmp="", keep=[], volumes=[], user=None,
                              cwd=str(tmp_path), env={}, argv=["/bin/sh", "-c", script])
    spec_fd = os.memfd_create("spec")
    os.write(spec_fd, spec)
    os.lseek(spec_fd, 0, os.SEEK_SET)
    read_end, write_end = os.pipe()

    def ignoring() -> None:
        for signum in (signal.SIGHUP, signal.SIGUSR2, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        os.dup2(spec_fd, 3)
        os.dup2(write_end, 4)

    done = subprocess.run([helper], env={}, pass_fds=(3, 4), timeout=30, preexec_fn=ignoring,
                          stdin=subprocess.DEVNULL)
    os.close(write_end)
    said = os.read(read_end, 65536).decode()
    assert done.returncode == 0 and "X 0" in said, (done.returncode, said)
    assert int((tmp_path / "ignored").read_text().split()[1], 16) == 0
    (tmp_path / "ignored").unlink()
    server = nsinit.Server(helper)
    try:
        pipe = ask_for_init(server, tmp_path, ["/bin/sh", "-c", script])
        answers: list = []
        wait_until(lambda: answers.extend(server.answers(wait=True)) or answers, 30, "the answer")
        os.waitpid(answers[0], 0)
        os.close(pipe)
    finally:
        server.close()
    assert int((tmp_path / "ignored").read_text().split()[1], 16) == 0


def test_an_init_of_a_pid_namespace_says_its_tasks_host_pid_with_its_start(tmp_path):
    """With ``R`` (the task's pid in its namespace) an init that is the first process of a PID
    namespace says ``H`` (the task's pid on the host), in the same write: the shared supervisor
    writes it in ``task.json`` without reading the init's children and their status in ``/proc``."""
    from mesoslike.agent import nsinit

    helper = require_init_helper(tmp_path / "meta")
    spec = nsinit.encode_spec(namespaces=["pid"], hostname="", tmp="", keep=[], volumes=[], user=None,
                              cwd=str(tmp_path), env={}, argv=["/bin/sleep", "60"])
    spec_fd = os.memfd_create("spec", os.MFD_CLOEXEC)
    os.write(spec_fd, spec)
    os.lseek(spec_fd, 0, os.SEEK_SET)
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    server = nsinit.Server(helper)
    init = 0
    try:
        server.submit(spec_fd, write_end, null, null, True)
        for fd in (spec_fd, write_end, null):
            os.close(fd)
        answers: list = []
        wait_until(lambda: answers.extend(server.answers(wait=True)) or answers, 30, "the answer")
        init = answers[0]
        said = os.read(read_end, 4096).decode()   # blocks until the init writes: R and H at once
        lines = dict(line.split(" ", 1) for line in said.splitlines())
        inner, host = int(lines["R"]), int(lines["H"])
        status = Path(f"/proc/{host}/status").read_text()
        nspids = [line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")][0]
        assert nspids == [str(host), str(inner)] and parent_of(host) == init, (said, nspids)
        # the init says R once vfork returns: the task's execve may still be setting up its arguments
        wait_until(lambda: Path(f"/proc/{host}/cmdline").read_bytes() == b"/bin/sleep\x0060\x00", 10,
                   "the task's command line")
    finally:
        if init:
            os.kill(init, signal.SIGKILL)   # the first process of its namespace: the task goes with it
            os.waitpid(init, 0)
        server.close()
        os.close(read_end)


def test_a_pooled_cgroups_peak_is_read_and_reset_through_one_descriptor_and_a_small_one_spares_the_usage(
        tmp_path, monkeypatch):
    """At a task's end its memory peak is read and, when its pooled cgroups are kept, reset through the
    same open file; with a peak no larger than what a kept cgroup may keep charged, the charge now (no
    larger than the peak) is not read. A large peak still has the charge looked at; a task whose cgroups are not pooled reads the peak alone."""
    from mesoslike.agent import supervisor as sup

    peak, usage = tmp_path / "memory.max_usage_in_bytes", tmp_path / "memory.usage_in_bytes"
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(sup.os, "open", lambda path, *args, **kwargs: (opened.append(os.path.basename(str(path))),
                                                                      real_open(path, *args, **kwargs))[1])

    def end(peak_bytes: int, usage_bytes: int, pooled: bool = True) -> dict:
        peak.write_text(f"{peak_bytes}\n")
        usage.write_text(f"{usage_bytes}\n")
        (tmp_path / "run").mkdir(exist_ok=True)
        task = sup.Supervisor(str(tmp_path / "run"))
        task.launch = {"cgroups": [], "oom_events": [], "memory_peak": str(peak), "memory_usage": str(usage),
                       "pooled": pooled, "user": "", "cwd": str(tmp_path)}
        task.cgroups_emptied = True
        opened.clear()
        return task.record(0, None, "", "")

    small = end(300_000, 60_000)
    assert small["cgroups_kept"] and small["memory_peak_bytes"] == 300_000
    assert opened.count(peak.name) == 1 and usage.name not in opened, opened
    assert peak.read_text().startswith("0")   # reset (a cgroup file takes the write; a plain file here)
    large = end(sup.POOL_MEMORY_LEFT * 4, sup.POOL_MEMORY_LEFT * 2)
    assert not large["cgroups_kept"] and large["memory_peak_bytes"] == sup.POOL_MEMORY_LEFT * 4
    assert usage.name in opened and peak.read_text().startswith(str(sup.POOL_MEMORY_LEFT * 4))   # not reset
    kept = end(sup.POOL_MEMORY_LEFT * 4, 1000)
    assert kept["cgroups_kept"] and usage.name in opened and opened.count(peak.name) == 1
    unpooled = end(500, 100, pooled=False)
    assert not unpooled["cgroups_kept"] and unpooled["memory_peak_bytes"] == 500 and usage.name not in opened


def test_a_pooled_tasks_end_files_stay_open_for_the_next_task_and_close_with_their_cgroups(tmp_path, monkeypatch):
    """The shared supervisor keeps a pooled cgroup's end files (its OOM kill count, its peak) open from
    one task to the next and reads them from their start (a cgroup file makes its text anew at each
    such read): the second end opens neither, and still reads what they hold then, and resets the peak.
    An end whose cgroups are removed closes them (the next end opens them anew); a task not pooled
    reads them as a task supervisor does. The ``X`` line tells the bytes written to ``exit.json``."""
    import json

    from mesoslike.agent import shared_supervisor as shared
    from mesoslike.agent import supervisor as sup

    peak, oom = tmp_path / "memory.max_usage_in_bytes", tmp_path / "memory.oom_control"
    files = shared.EndFiles(8)
    opened: list[str] = []
    real_open = os.open
    for module in (sup.os, shared.os):   # one module: os (counted once a call)
        monkeypatch.setattr(module, "open", lambda path, *args, **kwargs: (
            opened.append(os.path.basename(str(path))), real_open(path, *args, **kwargs))[1])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "exit.json").write_bytes(sup.exit_placeholder())

    def end(peak_bytes: int, kills: int = 0, pooled: bool = True) -> shared.SharedTask:
        peak.write_text(f"{peak_bytes}\n")
        oom.write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n")
        task = shared.SharedTask(str(tmp_path / "run"), "fw/t")
        task.end_files = files
        task.launch = {"cgroups": [], "oom_events": [[str(oom), "oom_kill"]], "memory_peak": str(peak),
                       "memory_usage": str(tmp_path / "usage"), "pooled": pooled, "user": "", "cwd": str(tmp_path)}
        task.cgroups_emptied = True
        opened.clear()
        task.status_recorded = task.record(0, None, "", "")   # type: ignore[attr-defined]
        return task

    first = end(300_000)
    assert first.status_recorded["cgroups_kept"] and sorted(opened) == sorted([oom.name, peak.name, "exit.json"])
    assert peak.read_text().startswith("0")
    second = end(200_000)
    assert opened == ["exit.json"]   # neither cgroup file opened again
    assert second.status_recorded["memory_peak_bytes"] == 200_000 and second.status_recorded["cgroups_kept"]
    assert peak.read_text().startswith("0") and len(files.fds) == 2
    killed = end(100_000, kills=1)   # an OOM kill: not kept, its files let go
    assert killed.status_recorded["oom_kills"] == 1 and not killed.status_recorded["cgroups_kept"]
    assert files.fds == {} and peak.read_text().startswith("100000")   # not reset
    end(50_000)
    assert sorted(opened) == sorted([oom.name, peak.name, "exit.json"])   # opened anew
    unpooled = end(500, pooled=False)
    assert sorted(opened) == sorted([oom.name, peak.name, "exit.json"]) and not unpooled.status_recorded["cgroups_kept"]
    # the X line: exit.json's JSON as written, not encoded again
    supervisor = shared.SharedSupervisor.__new__(shared.SharedSupervisor)
    supervisor.conn, supervisor.outbox = object(), b""   # type: ignore[assignment]
    supervisor.tell_status(unpooled, unpooled.status_recorded)
    told = supervisor.outbox
    assert told.startswith(b"X fw/t ") and told.endswith(b"\n") and told.count(b"\n") == 1
    assert json.loads(told[len(b"X fw/t "):]) == unpooled.status_recorded == read_json(str(tmp_path / "run/exit.json"))
    assert (tmp_path / "run/exit.json").read_bytes().startswith(told[len(b"X fw/t "):-1])
    files.close()
    assert files.fds == {}


def test_an_inits_task_json_is_formatted_byte_for_byte_as_json_writes_it(tmp_path):
    """A task started by an init helper gets its ``task.json`` made by formatting, not by ``json.dumps``:
    the same bytes as :func:`.supervisor.write_run_file` writes (sorted keys), over a longer blank too."""
    import json

    from mesoslike.agent import shared_supervisor as shared

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "task.json").write_text("{" + " " * 200)   # longer than the record: cut
    task = shared.SharedTask(str(tmp_path / "run"), "fw/t")
    task.started_by, task.task_pid = "nsinit", 4321
    supervisor = shared.SharedSupervisor.__new__(shared.SharedSupervisor)
    supervisor.conn, supervisor.outbox = object(), b""   # type: ignore[assignment]
    supervisor.started(task, 98765)
    assert (tmp_path / "run" / "task.json").read_bytes() == json.dumps(
        {"pid": 98765, "started": "nsinit", "init": 4321}, sort_keys=True).encode()
    assert supervisor.outbox == b"S fw/t 98765\n"


def test_an_end_file_kept_open_is_opened_anew_once_its_cgroup_is_removed_and_made_again(cgroups_root):  # noqa: F811
    """A descriptor of a cgroup's file fails every read once the cgroup is removed (``ENODEV``), even
    with another cgroup made at its path: the kept file is then opened anew by its path, so what is
    read is always the cgroup the path names now (never a removed one's)."""
    from agent_helpers import cgroup_bases
    from mesoslike.agent import shared_supervisor as shared

    memory = [base for base in cgroup_bases(cgroups_root) if "/memory" in base]
    if not memory or not os.path.exists(os.path.join(memory[0].split("/memory")[0], "memory",
                                                     "memory.max_usage_in_bytes")):
        unavailable("no cgroup v1 memory hierarchy here (its memory.max_usage_in_bytes)")
    os.makedirs(memory[0], exist_ok=True)
    group = os.path.join(memory[0], "end-files")
    os.mkdir(group)
    files = shared.EndFiles(4)
    try:
        path = os.path.join(group, "memory.max_usage_in_bytes")
        data, first = files.pread(path, os.O_RDWR, 64)
        assert int(data) >= 0 and files.pread(path, os.O_RDWR, 64)[1] == first   # kept
        os.rmdir(group)
        with pytest.raises(OSError):
            os.pread(first, 64, 0)
        os.mkdir(group)
        data, again = files.pread(path, os.O_RDWR, 64)   # the new cgroup's file
        assert int(data) == 0 and list(files.fds.values()) == [again] and files.pread(path, os.O_RDWR, 64)[1] == again
    finally:
        files.close()
        os.rmdir(group)


def test_the_init_spec_is_its_fields_each_ended_by_nul_and_a_nul_inside_one_is_refused():
    """The spec is encoded as one string (os.fsencode once, not a call a field): byte for byte what
    encoding each field did, names undecodable as UTF-8 (surrogate escapes) kept, a NUL in any field
    refused."""
    from mesoslike.agent import nsinit

    odd = os.fsdecode(b"/srv/caf\xe9")   # a path's bytes that are no UTF-8
    fields = dict(namespaces=["pid", "mount"], hostname="h", tmp="/s/tmp", keep=[("/w", "/s/tmp/w")],
                  volumes=[], user=(1000, 1000, [1000, 27]), cwd=odd, env={"A": "b c", "É": "ü"},
                  argv=["sh", "-c", "echo é"], cgroups=["/sys/fs/cgroup/memory/x"])
    expected = [b"ns", b"pid", b"ns", b"mount", b"hostname", b"h", b"tmp", b"/s/tmp", b"keep", b"/w",
                b"/s/tmp/w", b"user", b"1000", b"1000", b"1000,27", b"cwd", b"/srv/caf\xe9", b"cgroup",
                b"/sys/fs/cgroup/memory/x", b"env", b"A=b c", b"env", "É=ü".encode(), b"arg", b"sh", b"arg", b"-c",
                b"arg", "echo é".encode(), b"end"]
    assert nsinit.encode_spec(**fields) == b"".join(field + b"\0" for field in expected)
    for where in ({"cwd": "/a\0b"}, {"env": {"A": "x\0y"}}, {"argv": ["sh", "\0"]}, {"hostname": "h\0"}):
        with pytest.raises(ValueError, match="NUL"):
            nsinit.encode_spec(**{**fields, **where})


def test_the_sandbox_root_spreads_its_framework_directories_over_the_file_system(tmp_path):
    """The agent marks its sandbox root as the top of directory hierarchies (ext4's ``chattr +T``): the
    framework directories made in it are placed as ext4 places those made in ``/``, in block groups of
    their own, away from the groups of other processes' recently deleted inodes (each of which a new
    inode in that group costs a scan past)."""
    import array
    import fcntl

    from mesoslike.agent.executor import spread_children

    probe = tmp_path / "probe"
    probe.mkdir()
    if not spread_children(probe):
        unavailable(f"the file system of {tmp_path} has no 'top of directory hierarchies' flag (not ext2/3/4)")
    executor = TaskExecutor(tmp_path / "agent")
    executor.prepare_directories()
    for directory in (executor.sandbox_root, executor.work_dir / "meta" / "tasks"):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            flags = array.array("l", [0])
            fcntl.ioctl(fd, 0x80086601, flags, True)   # FS_IOC_GETFLAGS
        finally:
            os.close(fd)
        assert flags[0] & 0x00020000, directory   # FS_TOPDIR_FL
    assert spread_children(executor.sandbox_root)   # marked already: nothing to change, still true
    executor.prepare_directories()   # an agent started again on its work directory


def test_launch_json_says_whether_there_are_secrets_and_a_supervisor_still_looks_without_the_word(executor, tmp_path):
    """``launch.json``'s ``secrets`` spares a supervisor the look for ``secrets.json`` a task; one written
    by an agent of before the key (none) is looked for as before."""
    from mesoslike.agent import supervisor as sup

    executor.launch("fw", task("plain", "true"), "agent-1")
    launch = read_json(str(run_of(executor, "plain").run_dir / "launch.json"))
    assert launch["secrets"] is False   # type: ignore[index]
    events_until(executor, lambda events: "plain" in exits(events))

    run_dir = tmp_path / "old-run"
    run_dir.mkdir()
    looked: list[str] = []
    real_exists = os.path.exists
    for told, expected in ((None, ["secrets.json"]), (False, []), (True, [])):
        supervisor = sup.Supervisor.__new__(sup.Supervisor)
        supervisor.run_dir = str(run_dir)
        supervisor.launch = {"user": "", "env": {}, "image": None, **({} if told is None else {"secrets": told})}
        looked.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sup.os.path, "exists", lambda path: looked.append(os.path.basename(path)) or real_exists(path))
            patch.setattr(sup, "load_sibling", lambda name: type("NoSecrets", (), {
                "take_secrets": staticmethod(lambda run_dir: ({}, []))}))
            supervisor.prepare()
        assert looked == expected, told


def test_an_ended_child_is_reaped_as_its_task_and_an_init_not_answered_yet_is_left_until_its_answer(tmp_path):
    """Ends are found by ``waitid`` when ``SIGCHLD`` comes, not by a pidfd a task: an ended child that
    is no known task's while a server still owes answers may be an init whose answer is unread — its
    zombie is left (reaped, its status would be lost), and its answer asks for another look, which
    takes it as its task's; once no answer is owed, a child of no one's is reaped."""
    import subprocess

    from mesoslike.agent import shared_supervisor as shared

    meta = tmp_path / "meta"
    run_dir = meta / "tasks" / "fw" / "t"
    run_dir.mkdir(parents=True)
    loop = shared.SharedSupervisor(str(meta))
    reaped: list[tuple[str, int | None]] = []
    loop.finish = lambda task: reaped.append((task.name, task.status)) or True   # type: ignore[method-assign]

    class OwingServer:   # a server with an answer owed and none come yet
        pid, sock, pending, ready = -1, object(), 1, []

        def answers(self, wait=False):
            return []

        def fileno(self):
            return 1000

    def scenario() -> None:
        server = OwingServer()
        loop.servers[1000] = (server, collections.deque())   # type: ignore[assignment]
        child = subprocess.Popen(["sh", "-c", "exit 7"], start_new_session=True)
        child.returncode = 0   # reaped by the loop, never by its Popen
        wait_until(lambda: os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None, 20,
                   "the child to end")
        loop.reap_ended()
        assert reaped == [] and Path(f"/proc/{child.pid}").exists()   # left: maybe an init unanswered
        made = shared.SharedTask(str(run_dir), "fw/t")
        made.task_pid = child.pid
        loop.tasks[made.name] = made
        loop.by_pid[child.pid] = made   # as answered() does, asking for another look
        loop.reap_ended()
        assert reaped == [("fw/t", 7 << 8)] and child.pid not in loop.by_pid
        stray = subprocess.Popen(["true"], start_new_session=True)
        stray.returncode = 0
        wait_until(lambda: os.waitid(os.P_PID, stray.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None, 20,
                   "the stray child to end")
        server.pending = 0   # nothing owed: a child of no one's is reaped
        loop.reap_ended()
        assert not Path(f"/proc/{stray.pid}").exists() and reaped == [("fw/t", 7 << 8)]

    # in a child of its own: waitid(P_ALL) looks at every child, and this test's process has others'
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            scenario()
            code = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    loop.close()
    assert os.waitstatus_to_exitcode(status) == 0, "the scenario failed (its traceback is above)"


def test_a_run_name_is_two_safe_components_and_nothing_else():
    from mesoslike.agent import shared_supervisor as shared

    for name in ("fw/t", "a-b_c.d/task.1", "f" * 255 + "/" + "t" * 255, "-/_"):
        assert shared.safe_run(name), name
    for name in ("", "fw", "fw/", "/t", "fw/t/", "fw//t", ".fw/t", "fw/.t", "fw/..", "../t", "fw/t\n",
                 "fw/t ", "fw/t\0", "fw/té", "f" * 256 + "/t", "fw/" + "t" * 256, "fw\\t"):
        assert not shared.safe_run(name), name


def test_a_task_said_ended_with_its_start_gets_no_task_json_unless_its_end_must_wait(tmp_path):
    """A short task's init says ``R`` and ``X`` in one read: its start is told
    to the agent (``S``) but no ``task.json`` is written, its ``exit.json``
    coming in the same turn; only if its end must wait for its cgroups to
    empty is ``task.json`` written then. A task still running gets it at once."""
    import subprocess

    from mesoslike.agent import shared_supervisor as shared

    meta = tmp_path / "meta"
    run_dir = meta / "tasks" / "fw" / "t"
    run_dir.mkdir(parents=True)
    loop = shared.SharedSupervisor(str(meta))
    told: list[str] = []
    loop.tell = told.append   # type: ignore[method-assign]
    try:
        for ended in (False, True):
            (run_dir / "task.json").unlink(missing_ok=True)
            made = shared.SharedTask(str(run_dir), "fw/t")
            made.started_by, made.task_pid, made.task_status = "nsinit", 4321, (0 if ended else None)
            told.clear()
            loop.started(made, 4321)
            assert told == ["S fw/t 4321"]
            assert (run_dir / "task.json").exists() is not ended
            assert (made.unrecorded_start is not None) is ended
        # its end waits (a process left in its cgroups): task.json written as the start says
        child = subprocess.Popen(["true"], start_new_session=True)
        made.task_pid = child.pid
        loop.by_pid[child.pid] = made
        loop.tasks[made.name] = made
        loop.finish = lambda task: False   # type: ignore[method-assign]
        loop.reap(made)
        child.returncode = 0   # reaped by the loop
        assert read_json(str(run_dir / "task.json")) == {"init": 4321, "pid": 4321, "started": "nsinit"}
        assert made.unrecorded_start is None and loop.cleaning == [made]
    finally:
        loop.close()


def test_a_sandbox_file_is_made_new_or_else_opened_only_if_plain(tmp_path):
    """``open_sandbox_file``: a name nothing holds is made (``O_EXCL``, blocking, appending); one
    taken is opened only as a plain file of one link — never through a symlink, never a FIFO
    (which would block), never a hard link to a file elsewhere."""
    from mesoslike.agent.supervisor import open_sandbox_file

    made = str(tmp_path / "stdout")
    fd = open_sandbox_file(made)
    try:
        assert os.get_blocking(fd) and os.fstat(fd).st_nlink == 1
        os.write(fd, b"one\n")
    finally:
        os.close(fd)
    fd = open_sandbox_file(made)   # taken, plain: appended to
    try:
        os.write(fd, b"two\n")
    finally:
        os.close(fd)
    assert Path(made).read_bytes() == b"one\ntwo\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"")
    (tmp_path / "link").symlink_to(elsewhere)
    os.link(elsewhere, tmp_path / "hard")
    os.mkfifo(tmp_path / "fifo")
    for name in ("link", "hard", "fifo"):
        with pytest.raises(OSError):
            os.close(open_sandbox_file(str(tmp_path / name)))
    assert elsewhere.read_bytes() == b""


def test_launch_json_is_the_json_of_the_launch_and_an_undecodable_byte_still_goes_through():
    import json

    from mesoslike.agent.executor import _launch_json

    launch = {"env": {"A": "é", "PATH": "/bin"}, "argv": [], "grace_period": 3.0, "health_check": None,
              "container": {"cgroups": {"memory": "/sys/fs/cgroup/memory/x"}, "pooled": True}}
    assert json.loads(_launch_json(launch)) == launch
    odd = {"env": {"A": "\udcff"}}   # os.environ's surrogate escape of a byte that is not UTF-8
    assert json.loads(_launch_json(odd)) == odd


def test_an_inline_request_carries_the_spec_and_the_init_opens_the_tasks_output_files(tmp_path):
    """An inline request (sup29e): the spec travels in the request to the init server, and the cloned
    init opens the task's stdout and stderr as the shared supervisor's ``open_sandbox_file`` did —
    made new with the umask'd 0644 and given to the task's user, or, if the name is taken, opened only
    if a plain file with one link (appended to) — so the shared supervisor's loop makes no memfd and
    opens no file a task. A name it cannot open fails the launch on the status pipe (``F``) with the
    words of before, and nothing is written through it."""
    from mesoslike.agent import nsinit

    helper = require_init_helper(tmp_path / "meta")
    assert nsinit.takes_inline(helper)
    server = nsinit.Server(helper)
    assert server.inline
    nobody = pwd.getpwnam("nobody")
    spec = nsinit.encode_spec(namespaces=[], hostname="", tmp="", keep=[], volumes=[], user=None,
                              cwd=str(tmp_path), env={"WORD": "hello"},
                              argv=["/bin/sh", "-c", "echo $WORD; echo e >&2"])
    (tmp_path / "old-out").write_text("before\n")
    (tmp_path / "target").write_text("")
    os.symlink(tmp_path / "target", tmp_path / "link")
    os.link(tmp_path / "target", tmp_path / "hard")
    asks = [("new-out", "new-err", (nobody.pw_uid, nobody.pw_gid)), ("old-out", "old-err", None),
            ("link", "e1", None), ("new2", "hard", None)]
    pipes = []
    try:
        for out, err, owner in asks:
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
            try:
                assert server.submit_inline(spec, write_end, str(tmp_path / out), str(tmp_path / err), owner, False)
            finally:
                os.close(write_end)
            pipes.append(read_end)
        answers: list = []
        wait_until(lambda: answers.extend(server.answers(wait=True)) or len(answers) == len(asks), 30, "answers")
        said = []
        for pid, pipe in zip(answers, pipes):
            assert isinstance(pid, int) and parent_of(pid) == os.getpid()
            os.waitpid(pid, 0)
            text = b""
            while chunk := os.read(pipe, 4096):
                text += chunk
            said.append(text.decode())
        mask = os.umask(0)
        os.umask(mask)
        made = (tmp_path / "new-out").stat()
        assert (made.st_uid, made.st_gid, made.st_mode & 0o777) == (nobody.pw_uid, nobody.pw_gid, 0o644 & ~mask)
        assert (tmp_path / "new-out").read_text() == "hello\n" and (tmp_path / "new-err").read_text() == "e\n"
        assert (tmp_path / "old-out").read_text() == "before\nhello\n"
        assert said[0].startswith("R ") and said[1].startswith("R "), said
        refused = "F cannot open the task's output file"
        assert said[2] == f"{refused} {tmp_path / 'link'}: Too many levels of symbolic links\n"
        assert said[3] == f"{refused} {tmp_path / 'hard'}: not a plain file of the sandbox\n"
        assert (tmp_path / "target").read_text() == ""
        assert not (tmp_path / "e1").exists()
    finally:
        server.close()
        for pipe in pipes:
            os.close(pipe)


def test_inits_say_their_lines_on_one_status_channel_under_their_tags(tmp_path):
    """A channel request (sup29h): the init server, given the shared supervisor's status channel (one
    pipe) as its fd 4, clones each init with no descriptor passed, and each init says its lines (``R``,
    ``H``, ``F``, ``X``) there, each tagged with the number asked and written whole — no pipe made,
    passed, polled and closed a task. All an init said is on the channel once its zombie can be seen; a
    bad tag, or a channel request to a server without a channel (or a helper of before), is refused;
    a line without a tag is dropped, one cut across reads is read whole."""
    from mesoslike.agent import nsinit

    helper = require_init_helper(tmp_path / "meta")
    assert nsinit.takes_channel(helper)
    assert nsinit.takes_channel(__file__) is False   # no marker: a helper of before, asked with pipes
    channel = nsinit.StatusChannel()
    server = nsinit.Server(helper, channel=channel)
    plain = nsinit.Server(helper)   # no channel given: asked as before
    try:
        assert server.channel is channel and plain.channel is None
        assert not plain.submit_channel(1, b"end\0", str(tmp_path / "o"), str(tmp_path / "e"), None, False)
        (tmp_path / "target").write_text("")
        os.symlink(tmp_path / "target", tmp_path / "link")
        asks = {7: (["/bin/sh", "-c", "exit 3"], "out7"), 8: (["/bin/true"], "out8"),
                123456789: (["/bin/true"], "link"), 10: (["no-such-program-here"], "out10"),
                11: (["/bin/true"], "long/" * 900)}   # its F line longer than a pipe takes whole: cut
        for tag, (argv, out) in asks.items():
            spec = nsinit.encode_spec(namespaces=[], hostname="", tmp="", keep=[], volumes=[], user=None,
                                      cwd=str(tmp_path), env={}, argv=argv)
            assert server.submit_channel(tag, spec, str(tmp_path / out), str(tmp_path / "err"), None, False)
        answers: list = []
        wait_until(lambda: answers.extend(server.answers(wait=True)) or len(answers) == len(asks), 30, "answers")
        said: dict = collections.defaultdict(bytes)
        for pid in answers:
            assert isinstance(pid, int) and parent_of(pid) == os.getpid()
            os.waitpid(pid, 0)
        for tag, line in channel.read():   # every init has ended: all it said is there
            said[tag] += line + b"\n"
        assert channel.read() == []
        assert said[7].startswith(b"R ") and said[7].endswith(b"X %d\n" % (3 << 8)), said
        assert said[8].startswith(b"R ") and said[8].endswith(b"X 0\n"), said
        assert said[123456789] == (b"F cannot open the task's output file %s: Too many levels of symbolic links\n"
                                   % bytes(tmp_path / "link")), said
        assert said[10].startswith(b"F cannot execute no-such-program-here"), said
        assert said[11].startswith(b"F cannot open the task's output file") and len(said[11]) < 4096, said[11][:80]
        assert set(said) == set(asks)
        # hostile requests: a tag that is not a number, and a channel request to a server without one
        for target, request in ((server, b"CPx1\0/o\0/e\0\0end\0"), (server, b"CP\0/o\0/e\0\0end\0"),
                                (plain, b"CP5\0/o\0/e\0\0end\0")):
            target._send([request], [])
            (answer,) = target.answers(wait=True)
            assert isinstance(answer, OSError) and "a bad request" in str(answer), answer
        assert channel.read() == []
        # a line with no tag (none is written so) is dropped; one cut across reads waits for its end
        os.write(channel.write_end, b"R 5\n12 R 3")
        assert channel.read() == []
        os.write(channel.write_end, b"4\n")
        assert channel.read() == [(12, b"R 34")]
    finally:
        server.close()
        plain.close()
        channel.close()


def test_an_init_opens_its_cgroups_from_the_servers_descriptors_of_their_parents_and_a_remade_one_by_its_path(
        tmp_path, cgroups_root):  # noqa: F811 (fixture)
    """The init server holds the cgroups' parent directories open (inits29l): an init opens each
    ``cgroup.procs`` from its copy of its parent's descriptor (two names walked, not the whole path), and
    closes the server's descriptors once joined (its task gets only its three). A parent removed and made
    again under the same path, with the cgroup in it, is joined — the new one, by its whole path — and
    the server holds at most 8 parents (the least recently used let go)."""
    from mesoslike.agent import nsinit

    require_cgroups()
    from agent_helpers import cgroup_bases
    helper = require_init_helper(tmp_path / "meta")
    bases = cgroup_bases(cgroups_root)
    assert bases

    def cgroup(parent: str, name: str) -> list[str]:
        made = [os.path.join(base, parent, name) for base in bases]
        for directory in made:
            os.makedirs(directory, exist_ok=True)
        return made

    channel = nsinit.StatusChannel()
    server = nsinit.Server(helper, channel=channel)
    said: dict = collections.defaultdict(bytes)

    def run(tag: int, cgroups: list[str], argv: list[str]) -> bytes:
        spec = nsinit.encode_spec(namespaces=["pid", "mount"], hostname="", tmp="", keep=[], volumes=[],
                                  user=None, cwd=str(tmp_path), env={}, argv=argv, cgroups=cgroups)
        out = tmp_path / f"out{tag}"
        assert server.submit_channel(tag, spec, str(out), str(tmp_path / "err"), None, False)
        answers: list = []
        wait_until(lambda: answers.extend(server.answers(wait=True)) or answers, 30, "the answer")
        (pid,) = answers
        os.waitpid(pid, 0)
        for got, line in channel.read():
            said[got] += line + b"\n"
        assert said[tag].startswith(b"R ") and said[tag].endswith(b"X 0\n"), said[tag]
        return out.read_bytes()

    def held() -> set[str]:
        fds = f"/proc/{server.pid}/fd"
        return {os.readlink(os.path.join(fds, name)) for name in os.listdir(fds)
                if os.readlink(os.path.join(fds, name)).startswith("/sys/fs/cgroup/")}

    def shown_in(lines: str, name: str) -> int:
        return sum(line.endswith(f"/{cgroups_root}/outer/{name}") for line in lines.split())

    try:
        first = cgroup("outer", "first")
        shown = run(1, first, ["/bin/sh", "-c", "cat /proc/self/cgroup; echo --; ls /proc/self/fd"]).decode()
        lines, fds = shown.split("--\n")
        assert shown_in(lines, "first") == len(bases), lines
        assert fds.split() == ["0", "1", "2", "3"], fds   # 3: ls's own listing
        assert held() == {os.path.dirname(directory) for directory in first}
        second = cgroup("outer", "second")   # another cgroup of the same parents: nothing more held
        assert shown_in(run(2, second, ["/bin/cat", "/proc/self/cgroup"]).decode(), "second") == len(bases)
        assert held() == {os.path.dirname(directory) for directory in first}
        # the parents removed and made again under their names: the new cgroups are joined
        for directory in first + second:
            os.rmdir(directory)
        for directory in first:
            os.rmdir(os.path.dirname(directory))
        first = cgroup("outer", "first")
        listing = "; ".join(f"echo --; cat {directory}/cgroup.procs" for directory in first)
        again = run(3, first, ["/bin/sh", "-c", f"cat /proc/self/cgroup; {listing}"]).decode().split("--\n")
        assert shown_in(again[0], "first") == len(bases), again
        # the new cgroups' own members: the init, its task and the task's cat (their pids as the cat sees them)
        assert all(len(members.split()) >= 3 for members in again[1:]) and len(again) == len(bases) + 1, again
        # many parents: the server holds a bounded number of them
        for number in range(12):
            run(10 + number, cgroup(f"outer{number}", "c"), ["/bin/true"])
        assert 0 < len(held()) <= 8
    finally:
        server.close()
        channel.close()
        for base in bases:   # the nested ones (the fixture removes those right below the root)
            for parent, _, _ in sorted(os.walk(base), key=lambda walked: -len(walked[0])):
                if parent != base and not cgroup_pids(parent):
                    os.rmdir(parent)


def test_the_shared_supervisor_opens_no_pipe_a_task_with_a_channel_helper(ns_executor):
    """The shared supervisor's tasks with namespaces say their lines on its one status channel: however
    many run, the shared supervisor holds no pipe per task, and their starts and ends arrive as before."""
    executor = ns_executor
    for index in range(6):
        executor.launch("fw", task(f"w{index}", "while [ ! -e go ]; do sleep 0.05; done; exit 4"), "agent-1")
    (supervisor,) = {run.watch.pid for run in executor._runs.values()}
    for index in range(6):
        started_record(executor, f"w{index}")

    def pipes() -> int:
        count = 0
        for fd in os.listdir(f"/proc/{supervisor}/fd"):
            try:
                count += os.readlink(f"/proc/{supervisor}/fd/{fd}").startswith("pipe:")
            except OSError:
                continue
        return count

    assert pipes() <= 4, pipes()   # its wake-up pipe's two ends and its status channel's, none of a task
    for index in range(6):
        (executor.sandbox("fw", f"w{index}") / "go").touch()
    ended = exits(events_until(executor, lambda events: len(exits(events)) == 6))
    assert all(ended[f"w{index}"] == (4, None, "") for index in range(6)), ended


def test_a_spec_too_large_for_a_request_or_a_helper_of_before_goes_in_a_memfd(ns_executor):
    """The inline request has a size limit (``nsinit.INLINE_MAX``) and a helper built from an older
    ``nsinit.c`` (named by an agent of before) takes none: the spec then goes in a memfd and the shared
    supervisor opens the output files, as before; the task runs the same."""
    from mesoslike.agent import nsinit

    executor = ns_executor
    big = "x" * (nsinit.INLINE_MAX + 1)
    executor.launch("fw", task("big", 'echo ${#BIG}', environment={"BIG": big}), "agent-1")
    ended = events_until(executor, lambda events: "big" in exits(events))
    assert exits(ended)["big"] == (0, None, "")
    assert executor.sandbox("fw", "big").joinpath("stdout").read_text() == f"{len(big)}\n"
    assert nsinit.takes_inline(__file__) is False   # no marker: a helper of before


def test_a_plain_runs_spare_is_blanked_without_a_listing_and_a_run_directory_in_place_keeps_the_spare(
        executor, monkeypatch):
    """A run of the shared supervisor without secrets leaves four known files: its spare is cut without
    listing the directory first, and holds nothing of the last run from the moment it takes its place.
    No look whether the run directory exists first: the rename fails on one with files (an ended task
    relaunched under its name before it was forgotten), which keeps that directory and the spare."""
    from mesoslike.agent import executor as executor_module

    executor.launch("fw", task("first", "exit 7"), "agent-1")
    assert run_of(executor, "first").plain
    assert exits(events_until(executor, lambda events: "first" in exits(events)))["first"] == (7, None, "")
    executor.forget("fw", "first")
    assert len(executor._plain_spares) == 1
    listed: list[str] = []
    seen: dict[str, str] = {}
    real_listdir, real_rename = os.listdir, os.rename

    def rename_and_look(source, target):
        real_rename(source, target)
        if "meta/tasks" in str(target):
            seen.update({name: (Path(target) / name).read_text()
                         for name in ("supervisor.json", "task.json", "exit.json", "launch.json")})

    monkeypatch.setattr(executor_module.os, "listdir", lambda path: listed.append(str(path)) or real_listdir(path))
    monkeypatch.setattr(executor_module.os, "rename", rename_and_look)
    executor.launch("fw", task("second", "exit 5"), "agent-1")
    monkeypatch.setattr(executor_module.os, "rename", real_rename)
    assert listed == [] and not executor._plain_spares
    assert read_json_text(seen.pop("exit.json")) == {"ended": False}
    assert sorted(seen) == ["launch.json", "supervisor.json", "task.json"]
    assert all(len(text) <= 1 for text in seen.values()), seen
    assert exits(events_until(executor, lambda events: "second" in exits(events)))["second"] == (5, None, "")

    # an ended task not forgotten: its run directory stays; relaunched under its name, the spare stays a spare
    executor.forget("fw", "second")
    spares = list(executor._spares or [])
    assert len(spares) == 1
    executor.launch("fw", task("third", "exit 2"), "agent-1")
    assert exits(events_until(executor, lambda events: "third" in exits(events)))["third"] == (2, None, "")
    executor.forget("fw", "third")   # two spares now
    executor.launch("fw", task("fourth", "exit 4"), "agent-1")
    assert exits(events_until(executor, lambda events: "fourth" in exits(events)))["fourth"] == (4, None, "")
    kept = list(executor._spares or [])
    fourth_dir = run_of_dir(executor, "fourth")
    inode = fourth_dir.stat().st_ino
    executor.launch("fw", task("fourth", "exit 6"), "agent-1")   # over its ended run's directory
    assert executor._spares == kept and fourth_dir.stat().st_ino == inode
    assert exits(events_until(executor, lambda events: "fourth" in exits(events)))["fourth"] == (6, None, "")


def read_json_text(text: str) -> object:
    import json
    return json.loads(text)


def run_of_dir(executor, task_id: str) -> Path:
    from mesoslike.agent.executor import run_dir_path
    return run_dir_path(executor.work_dir, "fw", task_id)


def test_a_runs_end_carries_its_exit_status_and_the_agent_reads_no_exit_json_for_it(executor, monkeypatch):
    import mesoslike.agent.executor as executor_module
    read: list = []
    real = executor_module._exit_status
    monkeypatch.setattr(executor_module, "_exit_status", lambda run_dir: read.append(run_dir) or real(run_dir))
    executor.launch("fw", task("told", "exit 7"), "agent-1")
    exit_file = run_of(executor, "told").run_dir / "exit.json"
    events = events_until(executor, lambda events: len(exits(events)) == 1)
    assert exits(events) == {"told": (7, None, "")}
    assert read == []   # the status came with the end
    assert read_json(str(exit_file))["exit_code"] == 7   # and is in exit.json all the same (recovery reads it)


def test_an_end_told_without_a_status_or_with_a_bad_one_has_its_exit_json_read(executor, monkeypatch):
    from mesoslike.agent import supervisor_link
    assert supervisor_link._exit_status_of(b'{"ended":true,"exit_code":0}') == {"ended": True, "exit_code": 0}
    for hostile in (b"", b"{", b"[1]", b'{"ended":false}', b"\xff\xfe", b"[" * 100000, b'"x"'):
        assert supervisor_link._exit_status_of(hostile) is None
    # a shared supervisor that tells no X (one of before): the file is read
    monkeypatch.setattr(type(executor.link), "pop_exit_status", lambda self, name: None)
    executor.launch("fw", task("untold", "exit 5"), "agent-1")
    events = events_until(executor, lambda events: len(exits(events)) == 1)
    assert exits(events) == {"untold": (5, None, "")}


def test_an_idle_agent_makes_spares_bounded_and_its_next_launch_takes_one_renamed_a_tasks(  # noqa: F811
        ns_executor, cgroups_root):
    """An idle agent makes spare cgroups (``.spare.``: never a task's), empty and bounded, which a launch
    takes when its pool has none, renamed a task's (``.pooled.``); its stop removes them with the pool."""
    executor = ns_executor
    isolator = executor.isolator
    if not isolator.pool_size:
        unavailable("this machine's cgroups (v2) keep no pool")
    executor.launch("fw", task("first", "true"), "agent-1")
    first = run_of(executor, "first").container
    events_until(executor, lambda events: len(exits(events)) == 1)
    # idle turns: spares made, bounded with the pool, empty; the pool's cgroup keeps a task's (pooled) name
    wait_until(lambda: executor.poll() == [] and not isolator.spares_short(), 20, "the spares to be made")
    spares = spares_below(cgroups_root)
    assert len(spares) + len(isolator._pool) == isolator.spare_size
    assert task_cgroups_below(cgroups_root) == sorted({os.path.basename(d) for d in first.directories})
    executor.launch("fw", task("one", "sleep 30"), "agent-1")
    executor.launch("fw", task("two", "sleep 30"), "agent-1")   # the pool's one is taken: a spare, renamed
    one, two = run_of(executor, "one").container, run_of(executor, "two").container
    assert one.directories == first.directories
    assert all(".pooled." in d for d in two.directories) and not any(
        os.path.basename(d).replace(".pooled.", ".spare.") in spares_below(cgroups_root) for d in two.directories)
    assert len(spares_below(cgroups_root)) == len(spares) - 1
    wait_until(lambda: executor.poll() is not None and all(executor.pid("fw", t) for t in ("one", "two")), 20,
               "both to run")
    assert executor.pid("fw", "two") in cgroup_pids(two.cgroups["memory"])
    executor.kill_all(grace_period=0.0)
    events_until(executor, lambda events: not executor.running())
    executor.release()   # the agent's stop: the pool and the spares go
    assert cgroups_below(cgroups_root) == []


def test_launch_files_are_decoded_by_msgspec_named_by_the_agent_with_json_having_the_last_word(executor, tmp_path):
    """The shared supervisor runs ``-I -S`` (none of the interpreter's packages): the agent names where
    its msgspec is (``--msgspec DIR``), and the tasks' ``launch.json`` are decoded by msgspec's JSON
    decoder (4 µs against ``json.loads``'s 12, sup29h) — with ``json.loads`` having the last word on
    anything msgspec refuses, so every document decodes to the same object or fails with the same
    error as before; one nested too deeply is a ValueError, never a RecursionError; without the
    option, or with a directory msgspec cannot be imported from, ``json.loads`` alone."""
    import json

    import msgspec

    from mesoslike.agent.shared_supervisor import launch_loads

    executor.launch("fw", task("quick", "exit 0"), "agent-1")
    (supervisor,) = {run.watch.pid for run in executor._runs.values()}
    with open(f"/proc/{supervisor}/cmdline", "rb") as handle:
        argv = handle.read().split(b"\0")
    site = os.path.dirname(os.path.dirname(os.path.abspath(msgspec.__file__)))
    assert argv[argv.index(b"--msgspec") + 1] == os.fsencode(site), argv
    assert exits(events_until(executor, lambda events: "quick" in exits(events)))["quick"] == (0, None, "")

    documents = [b'{"a": [1, 2.5, null, true, "\\u00e9", "\xc3\xa9"], "b": {"c": 123456789012345678901234567890}}',
                 b'{"a": NaN, "b": Infinity, "c": 1e400}', b'{"a": "\\udc80"}', b"\xef\xbb\xbf{}",
                 '{"a": "é"}'.encode("utf-16"), b'{"a": 1, "a": 2}', b" {} "]
    hostile = [b"", b"{", b"{nope", b"\xff", b"{}x", b'"unterminated', b"[" * 200_000, b'{"a":' * 200_000]
    for loads in (launch_loads(site), launch_loads(None), launch_loads(str(tmp_path))):
        for document in documents:
            assert repr(loads(document)) == repr(json.loads(document)), document
        for document in hostile:
            with pytest.raises(ValueError):
                loads(document)


def test_exit_statuses_encoded_by_msgspec_are_the_bytes_json_wrote(monkeypatch, tmp_path):
    """With msgspec (the shared supervisor's, :func:`launch_loads`), ``exit.json`` and the agent's ``X``
    line are encoded by its sorted encoder: the very bytes ``json.dumps`` (sorted, compact, ASCII) wrote,
    for every flat status of ASCII strings and finite numbers; a status with a message in another script
    (which msgspec would write as UTF-8), a NaN or an infinity (null in msgspec), a nested value or an
    int past 64 bits goes through ``json.dumps`` as before. Written in place over the placeholder, it
    reads back as the status; the agent decodes the line (msgspec, json having the last word) to what
    ``json.loads`` made of it."""
    import json
    import math

    import msgspec

    from mesoslike.agent import supervisor as sup
    from mesoslike.agent import supervisor_link

    monkeypatch.setattr(sup, "sorted_json", msgspec.json.Encoder(order="sorted").encode)
    ended = {"ended": True, "exit_code": 0, "signal": None, "reason": "", "message": "", "killed": False,
             "oom_kills": 0, "memory_peak_bytes": 1 << 40, "ended_at": 1796054885.1845965, "cgroups_kept": True}
    statuses = [ended, {**ended, "exit_code": None, "signal": 9, "killed": True, "reason": "REASON_X",
                        "message": 'a "quoted"\\ message\nwith\ta \x01 control', "ended_at": 0.1 + 0.2},
                {**ended, "message": "é ünïcode ☃", "reason": "\udc80"}, {**ended, "ended_at": math.nan},
                {**ended, "ended_at": math.inf}, {**ended, "extra": {"nested": [1, "é"]}},
                {**ended, "memory_peak_bytes": 1 << 70}, {"ended": False}, {}]
    for status in statuses:
        expected = json.dumps(status, sort_keys=True, separators=(",", ":")).encode()
        assert sup.status_json(status) == expected, status
        assert expected.isascii()
        # the agent's decoding of the X line (msgspec, json's last word): what json.loads makes of it
        told = supervisor_link._exit_status_of(expected)
        assert repr(told) == repr(json.loads(expected) if status.get("ended") is True else None), status
    path = str(tmp_path / "exit.json")
    with open(path, "wb") as handle:
        handle.write(sup.exit_placeholder())
    assert sup.write_exit_status(path, ended) == json.dumps(ended, sort_keys=True, separators=(",", ":")).encode()
    assert read_json(path) == ended and os.path.getsize(path) == sup.EXIT_PLACEHOLDER_SIZE


def autogroup_nice(pid: int) -> int:
    """The nice of ``pid``'s session's autogroup (``/autogroup-N nice K``)."""
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def test_the_shared_supervisor_runs_in_an_autogroup_below_its_tasks(executor):
    # each session is one entity at the top of the scheduler: the supervisor's at nice 10 weighs 110 against a
    # session's 1024, and the tasks, sessions of their own, keep the kernel's 0
    executor.link.autogroup_nice = 10
    executor.launch("fw", task("t", "sleep 30"), "agent-1")
    task_pid = started_record(executor, "t")["pid"]
    assert os.getsid(executor.link.pid) == executor.link.pid   # its own session, so its own autogroup
    if not Path("/proc/self/autogroup").exists():   # a kernel without autogroups: nothing to set
        assert not set_autogroup_nice(10, executor.link.pid)
        return
    assert autogroup_nice(executor.link.pid) == 10
    assert autogroup_nice(task_pid) == 0
