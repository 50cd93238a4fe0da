"""How a Fuxi worker starts — without importing the master protocol it does
not speak — and how it starts its instances (mesoslike_frameworks/fuxi/worker.py):
``posix_spawn``, no fork of the worker, and still nothing of the worker's
leaks into an instance (no descriptor but stdin, stdout and stderr, none of
its secrets), a child an instance leaves behind holding its stdout does not
hold its result back, and an instance runs in the worker's sandbox. Real
worker processes, a real ROUTER in the test (the stand-in AppMaster of
test_fuxi_runtime)."""

from __future__ import annotations

import array
import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e_helpers import child_env, wait_for
from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol, service
from mesoslike_frameworks.fuxi import worker as worker_module
from mesoslike_frameworks.fuxi.worker import spawn_instance, spread_children
from test_fuxi_runtime import StandInAppMaster, worker_env

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def worker_with_an_open_descriptor(tmp_path):
    """A worker process started, as an agent might, with a descriptor of its parent left open (inheritable)."""
    appmaster = StandInAppMaster(tmp_path)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    read, write = os.pipe()
    os.set_inheritable(write, True)
    proc = subprocess.Popen([sys.executable, "-m", "mesoslike_frameworks.fuxi.worker"], cwd=sandbox,
                            env={**worker_env(appmaster.server.address), "FUXI_WORKER_TOKEN": "t0ken"},
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.log", "wb"),
                            start_new_session=True, pass_fds=(write,))
    os.close(write)
    try:
        hello = appmaster.receive(amp.Hello)
        appmaster.send(amp.Welcome(hello.slot))
        yield appmaster, sandbox
    finally:
        os.close(read)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        appmaster.close()


def run(appmaster: StandInAppMaster, instance: int, command: str) -> amp.Done:
    appmaster.send(amp.Assign(instance, 1, command, {}))
    done = appmaster.receive(amp.Done)
    appmaster.send(amp.Ack(instance, 1))
    return done


def test_an_instance_inherits_no_descriptor_and_no_secret_of_its_worker(worker_with_an_open_descriptor):
    appmaster, sandbox = worker_with_an_open_descriptor
    done = run(appmaster, 0, 'ls /proc/$$/fd; echo "token=$FUXI_WORKER_TOKEN"; true')
    assert done.ok, done.message
    lines = (sandbox / "instances" / "0.1.stdout").read_text().split()
    assert sorted(line for line in lines if line.isdigit()) == ["0", "1", "2"]
    assert "token=" in lines   # the secret is not in its environment


def test_a_child_left_holding_stdout_does_not_hold_the_result_back_and_is_still_heard(
        worker_with_an_open_descriptor):
    appmaster, sandbox = worker_with_an_open_descriptor
    started = time.monotonic()
    done = run(appmaster, 1, "(sleep 5; echo late) & echo $! > bg.pid; echo early")
    try:
        assert done.ok and time.monotonic() - started < 5   # before the child is done
        stdout = sandbox / "instances" / "1.1.stdout"
        assert stdout.read_text() == "early\n"
        # what the child writes once the result went out is copied still
        wait_for(lambda: stdout.read_text() == "early\nlate\n", 20, "the child's late line")
    finally:
        try:
            os.kill(int((sandbox / "bg.pid").read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_next_instance_runs_while_a_child_of_the_last_still_writes_to_its_stdout(
        worker_with_an_open_descriptor):
    # one thread watches the worker's instances in turn: what a left-behind child still writes is copied
    # beside it, and neither holds up the other
    appmaster, sandbox = worker_with_an_open_descriptor
    first = run(appmaster, 1, "(sleep 3; echo late) & echo $! > bg.pid; echo early")
    try:
        second = run(appmaster, 2, "echo FUXI_PROGRESS 0.5; echo second; echo oops >&2; exit 4")
        assert first.ok and (second.ok, second.message) == (False, "exit status 4: oops")
        instances = sandbox / "instances"
        assert (instances / "2.1.stdout").read_text() == "FUXI_PROGRESS 0.5\nsecond\n"
        assert (instances / "1.1.stdout").read_text() == "early\n"
        wait_for(lambda: (instances / "1.1.stdout").read_text() == "early\nlate\n", 20, "the child's late line")
        third = run(appmaster, 3, "echo third")
        assert third.ok and (instances / "3.1.stdout").read_text() == "third\n"
    finally:
        try:
            os.kill(int((sandbox / "bg.pid").read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_an_instance_leaves_files_only_for_what_it_wrote_and_a_child_on_stderr_does_not_hold_it_back(
        worker_with_an_open_descriptor):
    # its stdout and stderr reach their files through the worker, each file made at its first byte: a silent
    # instance makes no inode (two an instance were the worker's largest cost on a disk whose files come and go)
    appmaster, sandbox = worker_with_an_open_descriptor
    instances = sandbox / "instances"
    assert run(appmaster, 1, "true").ok
    assert not (instances / "1.1.stdout").exists() and not (instances / "1.1.stderr").exists()
    done = run(appmaster, 2, "echo oops >&2; exit 2")
    assert (done.ok, done.message) == (False, "exit status 2: oops")
    assert (instances / "2.1.stderr").read_text() == "oops\n" and not (instances / "2.1.stdout").exists()
    started = time.monotonic()
    done = run(appmaster, 3, "(sleep 5; echo late >&2) & echo $! > bg.pid; echo early >&2")
    try:
        assert done.ok and done.message == "exit status 0: early" and time.monotonic() - started < 5
        wait_for(lambda: (instances / "3.1.stderr").read_text() == "early\nlate\n", 20, "the child's late line")
    finally:
        try:
            os.kill(int((sandbox / "bg.pid").read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_an_instance_that_removes_the_instances_directory_does_not_stop_the_next(worker_with_an_open_descriptor):
    appmaster, sandbox = worker_with_an_open_descriptor
    assert run(appmaster, 1, "rm -rf instances").ok
    done = run(appmaster, 2, "echo again")
    assert done.ok, done.message
    assert (sandbox / "instances" / "2.1.stdout").read_text() == "again\n"


def test_an_instance_runs_in_the_sandbox_named_from_another_directory(tmp_path):
    sandbox = tmp_path / "elsewhere"
    sandbox.mkdir()
    pid, stdout, stderr = spawn_instance('pwd; echo "$0"; echo oops >&2; exit 3', {"PATH": os.environ["PATH"]},
                                         sandbox)
    with os.fdopen(stdout, "rb") as out, os.fdopen(stderr, "rb") as err:
        lines, errors = out.read().decode().split(), err.read()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3
    assert lines == [str(sandbox), "/bin/sh"] and errors == b"oops\n"


def test_a_worker_starts_without_the_master_protocol_or_asyncio():
    # every slot of a job starts one: what it imports is paid once per slot (0.15 s of CPU for these two;
    # hmac and hashlib, for the slot tokens only the AppMaster checks, 0.01 s; zmq.auth and tempfile, for
    # certificate files a worker never reads or writes, ~0.01 s; pyzmq and the transport over it, ~30 ms:
    # its connection is libzmq's through ctypes, worker_libzmq; typing, with re, contextlib and warnings, ~19 M
    # instructions, ~7 ms: its names are the type checker's, TYPE_CHECKING = False in each module)
    done = subprocess.run([sys.executable, "-c", "import sys, mesoslike_frameworks.fuxi.worker; "
                           "print(sorted(m for m in ('mesoslike.wire.messages', 'mesoslike.wire.types', 'asyncio', "
                           "'ctypes.util', 'mesoslike_frameworks.fuxi.protocol', 'hmac', 'zmq.auth', 'tempfile', 'logging', "
                           "'traceback', 'zmq', 'mesoslike.transport', 'typing') "
                           "if m in sys.modules))"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    # what it declares instead of importing the job protocol is the job protocol's
    assert amp.VERSION == protocol.VERSION and amp.ProtocolError is protocol.ProtocolError


def test_a_worker_started_by_main_logs_as_logging_would_without_importing_it(capsys):
    # logging (with re, traceback, tokenize) was ~8 ms of a worker's start; its lines keep logging's format,
    # which bench/fuxi_path.py reads the instances' ends from
    log = worker_module.WorkerLog()
    log.to_stderr("info")
    log.debug("not %s", "shown")
    log.info("instance %d attempt %d %s: %s", 3, 1, "succeeded", "exit status 0")
    log.warning("plain")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO fuxi-worker instance 3 attempt 1 "
                        r"succeeded: exit status 0", lines[0]), lines
    assert lines[1].endswith(" WARNING fuxi-worker plain")
    with pytest.raises(ValueError):
        log.to_stderr("chatty")


def test_a_worker_watches_its_instances_from_its_own_loop_without_a_thread_of_its_own(worker_with_an_open_descriptor):
    """An instance's stdout and exit are polled with the worker's socket: no
    thread of the worker's but its loop's (and ZeroMQ's) while it runs one
    — a watcher thread cost every instance two thread hand-overs."""
    appmaster, sandbox = worker_with_an_open_descriptor
    assert run(appmaster, 0, "true").ok
    done = run(appmaster, 1, 'for task in /proc/$PPID/task/*; do cat "$task/comm"; done')
    assert done.ok, done.message
    threads = (sandbox / "instances" / "1.1.stdout").read_text().split()
    assert [name for name in threads if not name.startswith("ZMQbg/")] == [threads[0]], threads


def _boots_a_worker(command: str, sandbox: Path) -> str:
    """Run a slot's task ``command`` in ``sandbox`` without the worker's environment: what it says (a worker
    that got as far as reading its environment says what is missing, exit 2)."""
    done = subprocess.run(["/bin/sh", "-c", command], cwd=sandbox, env=child_env(), capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2, done.stderr
    return done.stderr


def test_a_slot_starts_its_worker_without_site_from_where_the_service_found_the_packages(tmp_path, monkeypatch):
    """``worker_command``: ``python -S`` with the packages' directories named
    (no ``site``, no editable finder: ~8 ms of each of a job's 16 workers'
    start), ``site`` after all when they are not there, ``-m`` for another
    interpreter than the service's."""
    command = service.worker_command(sys.executable)
    assert " -S -c " in command and "mesoslike_frameworks.fuxi.worker" in command
    probe = command.replace("w.main_and_exit()", 'print(sorted(m for m in ("site", "pathlib") if m in sys.modules))')
    assert "missing environment FUXI_APPMASTER" in _boots_a_worker(command, tmp_path)
    done = subprocess.run(["/bin/sh", "-c", probe], cwd=tmp_path, env=child_env(), capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
    # the directories hold no such packages here (a machine installed otherwise): site, then as -m would
    monkeypatch.setattr(service, "_worker_paths", lambda: [str(tmp_path / "nowhere")])
    assert "missing environment FUXI_APPMASTER" in _boots_a_worker(service.worker_command(sys.executable), tmp_path)
    assert service.worker_command("/opt/other/python3") == "exec /opt/other/python3 -m mesoslike_frameworks.fuxi.worker"


def test_a_worker_places_its_instances_directory_as_the_agent_places_sandboxes(worker_with_an_open_descriptor):
    """The sandbox is marked the top of directory hierarchies (``chattr +T``)
    before ``instances`` is made in it, where the file system has the flag:
    ext4 gives ``instances`` — two files an instance — a block group of its
    own instead of the one every job of the service shares on the agent."""
    appmaster, sandbox = worker_with_an_open_descriptor
    assert run(appmaster, 0, "true").ok
    assert (sandbox / "instances").is_dir()
    flags = array.array("l", [0])
    fd = os.open(sandbox, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, 0x80086601, flags, True)   # FS_IOC_GETFLAGS
    except OSError:   # no such flags here (tmpfs, overlay): nothing to mark
        assert not spread_children(sandbox)
        return
    finally:
        os.close(fd)
    assert flags[0] & 0x00020000   # FS_TOPDIR_FL


def test_an_instance_that_closes_its_output_and_runs_on_is_reported_when_it_exits(worker_with_an_open_descriptor):
    # its stdout and stderr end long before it does: the worker must not take that for its exit (it reaps it
    # then only if it is gone), and goes on answering meanwhile
    appmaster, sandbox = worker_with_an_open_descriptor
    gate = sandbox / "gate"
    appmaster.send(amp.Assign(1, 1, f"exec >&- 2>&-; while [ ! -e {gate} ]; do sleep 0.05; done; exit 3", {}))
    wait_for(lambda: appmaster.receive(amp.Heartbeat).running == [1, 1], 10, "the worker to run instance 1")
    wait_for(lambda: appmaster.receive(amp.Heartbeat).running == [1, 1], 10, "a heartbeat after its output ended")
    gate.touch()
    done = appmaster.receive(amp.Done)
    assert (done.instance, done.ok, done.message) == (1, False, "exit status 3")


def test_a_kill_sent_as_the_instance_starts_stops_it(worker_with_an_open_descriptor):
    # the worker watches a new instance alone for its first moments (worker.QUICK_WATCH): what the AppMaster
    # sends meanwhile waits, and is obeyed then
    appmaster, sandbox = worker_with_an_open_descriptor
    appmaster.send(amp.Assign(1, 1, "echo $$ > pid.new; mv pid.new pid; exec sleep 60", {}))
    wait_for(lambda: (sandbox / "pid").exists(), 10, "the instance's pid")
    appmaster.send(amp.Kill(1, 1))
    pid = int((sandbox / "pid").read_text())
    wait_for(lambda: appmaster.receive(amp.Heartbeat).running is None, 10, "the instance to be killed")
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 10, "the instance's process to be gone")
    assert run(appmaster, 2, "echo after").ok
