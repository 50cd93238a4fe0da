"""The Fuxi job runtime with real processes: a ``mesoslike local`` cluster
(``node-0`` … ``node-2``, rooms er0/er1/er0), ``mesoslike fuxi serve`` on it,
an AppMaster process per job and a worker task per slot.

Backups for stragglers, blacklisting a machine whose instances fail, an
AppMaster killed mid-job and restarted from its snapshot, data locality, bad
commands and protocol garbage. Then the worker and the AppMaster on their own,
against a stand-in AppMaster / service in the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest

import test_fuxi_service as service_tests
from e2e_helpers import REPO, child_env, task_processes, wait_for
from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.appmaster import read_snapshot, write_snapshot
from mesoslike.transport import Client, CurveKeys, Server, load_public_key

pytestmark = pytest.mark.timeout(120)


def job_toml(name: str, *, instances: int, slots: int, command: str, job_extra: str = "", unit_extra: str = "") -> str:
    return f"""
[job]
name = "{name}"
{job_extra}

[[job.units]]
name = "work"
slots = {slots}
cpus = 0.1
mem = 32
instances = {instances}
command = '{command}'
{unit_extra}
"""


class Fuxi(service_tests.Fuxi):
    """Three agents (``node-0`` … ``node-2``, rooms er0/er1/er0) and a look at the jobs' processes."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, agents=3)

    def job(self, job_id: str) -> dict:
        return self.status(job_id)["jobs"][0]

    def submit_id(self, path: Path) -> str:
        done = self.submit(path)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.split()[1]

    def wait_ended(self, job_id: str, timeout: float = 60) -> dict:
        return wait_for(lambda: (lambda j: j if j["state"] != "running" else None)(self.job(job_id)), timeout,
                        f"job {job_id} to end", diagnostics=lambda: self.diagnostics(job_id))

    def diagnostics(self, job_id: str | None = None) -> str:
        text = self.cluster.diagnostics()
        if job_id is not None:
            log = self.work_dir / job_id / "appmaster.log"
            text += f"\n--- {log}\n" + (log.read_text()[-6000:] if log.exists() else "(none)")
        return text

    def job_processes(self, job_id: str) -> dict[int, str]:
        """Living task processes (workers and the instances they started) of the job."""
        return {pid: task for pid, task in task_processes(self.cluster.work_root).items()
                if task.startswith(job_id + ".")}


@pytest.fixture(scope="module")
def fuxi(tmp_path_factory):
    yield from service_tests.serving(Fuxi, tmp_path_factory.mktemp("fuxi-runtime"))


def records(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


# ============================================================ straggler
def test_a_straggler_gets_a_backup_and_the_job_ends_long_before_it_would(fuxi, tmp_path):
    log = tmp_path / "runs.txt"
    command = (f'echo start $FUXI_INSTANCE $FUXI_ATTEMPT $FUXI_HOSTNAME >> {log}; '
               'if [ "$FUXI_INSTANCE" = 3 ] && [ "$FUXI_ATTEMPT" = 1 ]; then sleep 60; else sleep 0.3; fi; '
               f'echo end $FUXI_INSTANCE $FUXI_ATTEMPT $FUXI_HOSTNAME >> {log}')
    path = tmp_path / "job.toml"
    # the backup's slot must not land on the straggler's machine, where the AppMaster could not use it:
    # it tells the scheduler so (AVOID_HOSTS), whichever machine has room
    path.write_text(job_toml("straggler", instances=8, slots=3, command=command,
                             job_extra="[job.backup]\nmin_finished_fraction = 0.5\nslower_factor = 2.0\n"
                                       "min_runtime = 1.0"))
    start = time.monotonic()
    done = fuxi.submit(path, "--wait")
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stdout + done.stderr
    assert elapsed < 20, elapsed
    job_id = done.stdout.split()[1]
    assert f"{job_id} succeeded: 8/8 instances done" in done.stdout
    assert "backups" in done.stdout and "[" in done.stdout.splitlines()[1]     # the progress bar, plain lines
    runs = records(log)
    ends = {int(r[1]): r for r in runs if r[0] == "end"}
    assert sorted(ends) == list(range(8))
    first = next(r for r in runs if r[0] == "start" and r[1:3] == ["3", "1"])
    assert ends[3][2] != "1" and ends[3][3] != first[3]          # the backup won, on another machine
    job = fuxi.job(job_id)
    assert job["instances"]["backups"] >= 1 and job["units"][0]["instances"]["backups"] >= 1
    # the losing copy (sleep 60) was killed, and every worker is gone
    wait_for(lambda: not fuxi.job_processes(job_id), 20, "the job's processes to end",
             diagnostics=lambda: f"{fuxi.job_processes(job_id)}\n{fuxi.diagnostics(job_id)}")


# =========================================================== AppMaster failover
def test_a_killed_appmaster_is_restarted_and_finished_instances_do_not_run_again(fuxi, tmp_path):
    log = tmp_path / "runs.txt"
    path = tmp_path / "job.toml"
    gate = tmp_path / "gate"
    # once 3 instances have finished, the next ones wait for the gate, opened after the kill: the job
    # cannot end before its AppMaster is killed, however loaded the machine (it did at load 21)
    path.write_text(job_toml("failover", instances=12, slots=3, command=(
        f"sleep 0.6; if [ $(cat {log} 2>/dev/null | wc -l) -ge 3 ]; then "
        f"while [ ! -e {gate} ]; do sleep 0.05; done; fi; echo $FUXI_INSTANCE >> {log}")))
    job_id = fuxi.submit_id(path)
    wait_for(lambda: len(records(log)) >= 3, 30, "some instances to finish",
             diagnostics=lambda: fuxi.diagnostics(job_id))
    shown = fuxi.cli("status", "--fuxi", fuxi.address, "--json", job_id)
    appmaster = json.loads(shown.stdout)["jobs"][0]["appmaster"]
    assert appmaster["running"] and appmaster["restarts"] == 0
    os.kill(appmaster["pid"], signal.SIGKILL)
    gate.touch()
    job = fuxi.wait_ended(job_id)
    assert job["state"] == "succeeded", (job, fuxi.diagnostics(job_id))
    assert job["appmaster"]["restarts"] == 1 and job["appmaster"]["pid"] != appmaster["pid"]
    assert job["appmaster"]["address"] == appmaster["address"]
    ran = sorted(int(r[0]) for r in records(log))
    assert ran == list(range(12)), ran                                # every instance exactly once
    assert "resumed from the snapshot" in (fuxi.work_dir / job_id / "appmaster.log").read_text()
    assert (fuxi.work_dir / job_id / "snapshot.json").exists()


# ================================================================ locality
def test_instances_run_where_their_data_is(fuxi, tmp_path):
    log = tmp_path / "runs.txt"
    data = [["node-0"], ["node-1"], ["node-2"], ["node-0"], ["node-1"], ["node-2"]]
    path = tmp_path / "job.toml"
    path.write_text(job_toml("locality", instances=6, slots=3, command=f"sleep 1; echo $FUXI_INSTANCE "
                                                                       f"$FUXI_HOSTNAME $FUXI_DATA_HOSTS >> {log}",
                             unit_extra=f"max_per_machine = 1\ndata = {json.dumps(data)}"))
    done = fuxi.submit(path, "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    where = {int(r[0]): (r[1], r[2]) for r in records(log)}
    assert sorted(where) == list(range(6))
    for instance, (host, data_hosts) in where.items():
        assert data_hosts == data[instance][0]
        assert host == data[instance][0], where


# ================================================================ bad input
def test_a_command_that_cannot_start_fails_its_instance_and_the_job_cleanly(fuxi, tmp_path):
    path = tmp_path / "job.toml"
    # a NUL byte: no process can be started with it
    path.write_text(job_toml("unstartable", instances=2, slots=2, command="", unit_extra="max_attempts = 2")
                    .replace("command = ''", 'command = "echo \\u0000 {instance}"'))
    done = fuxi.submit(path, "--wait")
    assert done.returncode == 1, done.stdout + done.stderr
    job_id = done.stdout.split()[1]
    assert f"{job_id} failed: instance" in done.stderr and "failed 2 times: cannot start" in done.stderr
    assert "null byte" in done.stderr
    job = fuxi.job(job_id)
    assert job["state"] == "failed" and job["instances"]["failed"] >= 2
    wait_for(lambda: not fuxi.job_processes(job_id), 20, "the job's workers to end")
    assert fuxi.proc.running()


def test_protocol_garbage_gets_errors_and_crashes_nothing(fuxi, tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(job_toml("garbage", instances=2, slots=1, command="sleep 2"))
    job_id = fuxi.submit_id(path)
    appmaster = wait_for(lambda: fuxi.job(job_id)["appmaster"], 10, "the AppMaster")
    # the AppMaster's port lets in only the job's workers' key (docs/security.rst): garbage from inside
    keys = fuxi.work_dir / job_id
    with Client(appmaster["address"], codec=amp.CODEC, identity=b"intruder",
                keys=CurveKeys.load(str(keys / "worker.key_secret")),
                server_key=load_public_key(str(keys / "appmaster.key"))) as intruder:
        def say(frame: bytes):
            intruder.send_frame(frame)
            assert intruder.wait(5), "no answer from the AppMaster"
            return amp.decode(next(intruder.receive_frames())[1])
        assert isinstance(say(b"\xc1\x00garbage"), amp.Error)
        assert "HELLO.running" in say(msgpack.packb({"v": 1, "type": "HELLO", "slot": "x", "unit": "work",
                                                     "hostname": "h", "running": ["a", 1]})).message
        assert "unknown message type" in say(msgpack.packb({"v": 1, "type": "NOPE"})).message
        assert "not a unit" in say(amp.encode(amp.Hello("x", "nope", "h"))).message
        assert isinstance(say(amp.encode(amp.Heartbeat("never-said-hello"))), amp.Rejoin)
        assert isinstance(say(amp.encode(amp.Welcome("x"))), amp.Error)
    # the service: garbage and a forged AppMaster request from a client principal
    with Client(fuxi.address, codec=protocol.CODEC, keys=CurveKeys.load(fuxi.cluster.client_key),
                server_key=load_public_key(fuxi.cluster.client_key.removesuffix("_secret"))) as client:
        client.send_frame(b"garbage")
        assert client.wait(5) and isinstance(protocol.decode(next(client.receive_frames())[1]), protocol.Error)
        client.send_frame(protocol.encode(protocol.JobEnded(3, job_id, "forged", True, "")))
        assert client.wait(5)
        answer = protocol.decode(next(client.receive_frames())[1])
        assert isinstance(answer, protocol.Error) and "only that job's AppMaster" in answer.message, answer
    job = fuxi.wait_ended(job_id)
    assert job["state"] == "succeeded" and job["appmaster"]["restarts"] == 0 and fuxi.proc.running()


# ================================================================ blacklist
def test_a_machine_whose_instances_fail_is_blacklisted_and_the_job_succeeds_elsewhere(fuxi, tmp_path):
    # last in the module: node-1 stays blacklisted for this job only, but keep the others clear of it
    log = tmp_path / "runs.txt"
    command = (f'if [ "$FUXI_HOSTNAME" = node-1 ]; then echo fail $FUXI_INSTANCE node-1 >> {log}; '
               'echo "disk on fire" >&2; exit 3; fi; sleep 0.3; '
               f'echo ok $FUXI_INSTANCE $FUXI_HOSTNAME >> {log}')
    path = tmp_path / "job.toml"
    path.write_text(job_toml("blacklist", instances=9, slots=3, command=command, job_extra="blacklist_after = 2",
                             unit_extra="max_per_machine = 1\nmax_attempts = 4"))
    done = fuxi.submit(path, "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = done.stdout.split()[1]
    runs = records(log)
    assert sorted(int(r[1]) for r in runs if r[0] == "ok") == list(range(9))
    assert all(r[2] != "node-1" for r in runs if r[0] == "ok")
    assert 1 <= sum(r[0] == "fail" for r in runs) <= 2                 # blacklisted after its 2nd failure
    job = fuxi.job(job_id)
    assert job["blacklisted"] == ["node-1"] and job["instances"]["failed"] == sum(r[0] == "fail" for r in runs)
    shown = fuxi.cli("status", "--fuxi", fuxi.address, job_id)
    assert "blacklisted: node-1" in shown.stdout and "8/8" not in shown.stdout and "9/9" in shown.stdout


# ================================================ the worker on its own
def worker_env(appmaster: str, slot: str = "job-1.work.1") -> dict[str, str]:
    return {**child_env(), "FUXI_APPMASTER": appmaster, "FUXI_SLOT_ID": slot, "FUXI_JOB_ID": "job-1",
            "FUXI_UNIT": "work", "FUXI_HOSTNAME": "h1", "FUXI_ROOM": "er0"}


class StandInAppMaster:
    """A ROUTER in the test that a real worker process connects to."""

    def __init__(self, tmp_path: Path, address: str = "tcp://127.0.0.1:0") -> None:
        self.server = Server(address, codec=amp.CODEC)
        self.peer: bytes | None = None

    def receive(self, kind, timeout: float = 10.0):
        """The next message of type ``kind`` from the worker (others skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.server.wait(0.1):
                for peer, frame in self.server.receive_frames():
                    self.peer = peer
                    message = amp.decode(frame)
                    if isinstance(message, kind):
                        return message
        pytest.fail(f"no {kind.TYPE} from the worker within {timeout}s")

    def send(self, message) -> None:
        self.send_raw(amp.encode(message))

    def send_raw(self, frame: bytes) -> None:
        self.server.send_frame(self.peer, frame)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def worker(tmp_path):
    appmaster = StandInAppMaster(tmp_path)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "mesoslike_frameworks.fuxi.worker"], cwd=sandbox,
                            env=worker_env(appmaster.server.address), stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "worker.log", "wb"), start_new_session=True)
    try:
        yield appmaster, proc, sandbox
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        appmaster.close()


def test_the_worker_runs_assignments_relays_progress_and_answers_garbage(worker):
    appmaster, proc, sandbox = worker
    hello = appmaster.receive(amp.Hello)
    assert (hello.slot, hello.unit, hello.hostname, hello.room, hello.running) == ("job-1.work.1", "work", "h1", "er0",
                                                                                    None)
    appmaster.send_raw(b"\xc1garbage")
    assert isinstance(appmaster.receive(amp.Error), amp.Error)
    appmaster.send_raw(msgpack.packb({"v": 1, "type": "ASSIGN", "instance": 0, "attempt": 1, "command": "true",
                                      "env": {"X": 1}}))
    assert "ASSIGN.env" in appmaster.receive(amp.Error).message
    appmaster.send(amp.Welcome(hello.slot))
    appmaster.send(amp.Assign(4, 2, "echo FUXI_PROGRESS 0.5; echo $FUXI_INSTANCE.$FUXI_ATTEMPT.$GREETING; "
                                    "echo oops >&2; exit 5", {"GREETING": "hi", "FUXI_INSTANCE": "4",
                                                              "FUXI_ATTEMPT": "2"}))
    progress = appmaster.receive(amp.Progress)
    assert (progress.instance, progress.attempt, progress.fraction) == (4, 2, 0.5)
    done = appmaster.receive(amp.Done)
    assert (done.instance, done.attempt, done.ok) == (4, 2, False)
    assert done.message == "exit status 5: oops"
    assert (sandbox / "instances" / "4.2.stdout").read_text().splitlines()[-1] == "4.2.hi"
    again = appmaster.receive(amp.Done)                              # sent again until acknowledged
    assert again == done
    appmaster.send(amp.Ack(4, 2))
    appmaster.send(amp.Assign(5, 1, "sleep 60", {}))
    beat = wait_for(lambda: (lambda b: b if b.running == [5, 1] else None)(appmaster.receive(amp.Heartbeat)), 10,
                    "the worker to run instance 5")
    assert beat.running == [5, 1]
    appmaster.send(amp.Kill(5, 1))
    wait_for(lambda: appmaster.receive(amp.Heartbeat).running is None, 10, "the instance to be killed")
    appmaster.send(amp.Release())
    assert proc.wait(10) == 0


def test_the_worker_holds_one_assignment_queued_and_starts_it_as_the_running_one_ends(worker, tmp_path):
    appmaster, proc, sandbox = worker
    hello = appmaster.receive(amp.Hello)
    appmaster.send(amp.Welcome(hello.slot))
    gate = sandbox / "gate"
    appmaster.send(amp.Assign(1, 1, f"while [ ! -e {gate} ]; do sleep 0.05; done", {}))
    appmaster.send(amp.Assign(2, 1, "echo second", {}))                 # queued behind instance 1
    appmaster.send(amp.Assign(3, 1, "true", {}))                        # a third: refused
    assert "busy" in appmaster.receive(amp.Error).message
    beat = wait_for(lambda: (lambda b: b if b.running == [1, 1] else None)(appmaster.receive(amp.Heartbeat)), 10,
                    "the worker to run instance 1")
    assert beat.queued == [2, 1]
    appmaster.send(amp.Assign(2, 1, "echo second", {}))                 # a resent ASSIGN of the queued one: no-op
    gate.touch()
    done = [appmaster.receive(amp.Done) for _ in range(2)]
    assert [(d.instance, d.ok) for d in done] == [(1, True), (2, True)]
    assert (sandbox / "instances" / "2.1.stdout").read_text() == "second\n"
    appmaster.send(amp.Ack(1, 1))
    # the next ASSIGN carries the ACK of instance 2; a KILL of the queued one drops it, the running one goes on
    appmaster.send(amp.Assign(4, 1, "sleep 60", {}, acks=[[2, 1]]))
    appmaster.send(amp.Assign(5, 1, "touch five", {}))
    wait_for(lambda: (lambda b: b if b.queued == [5, 1] else None)(appmaster.receive(amp.Heartbeat)), 10,
             "instance 5 queued")
    appmaster.send(amp.Rejoin())
    hello = appmaster.receive(amp.Hello)
    assert (hello.running, hello.queued, hello.finished) == ([4, 1], [5, 1], [])   # nothing unacknowledged
    appmaster.send(amp.Welcome(hello.slot))
    appmaster.send(amp.Kill(5, 1))
    beat = wait_for(lambda: (lambda b: b if b.queued is None else None)(appmaster.receive(amp.Heartbeat)), 10,
                    "instance 5 dropped")
    assert beat.running == [4, 1]
    appmaster.send(amp.Kill(4, 1))
    wait_for(lambda: appmaster.receive(amp.Heartbeat).running is None, 10, "the instance to be killed")
    assert not (sandbox / "five").exists()
    appmaster.send(amp.Release())
    assert proc.wait(10) == 0


def test_the_worker_keeps_its_results_for_an_appmaster_that_comes_back(worker, tmp_path):
    appmaster, proc, _ = worker
    hello = appmaster.receive(amp.Hello)
    appmaster.send(amp.Welcome(hello.slot))
    appmaster.send(amp.Assign(1, 1, "sleep 1", {}))
    appmaster.receive(amp.Heartbeat)
    address = appmaster.server.address
    appmaster.close()                                                # the AppMaster dies mid-instance
    # the instance ends while no AppMaster listens: the worker says so in its log
    wait_for(lambda: "instance 1 attempt 1 succeeded" in (tmp_path / "worker.log").read_text(), 10,
             "the instance to end while the AppMaster is away")
    back = StandInAppMaster(tmp_path, address)                       # ... and a new one binds the same address
    try:
        back.receive(amp.Heartbeat)   # it still thinks it is welcome
        back.send(amp.Rejoin())
        hello = back.receive(amp.Hello)
        assert hello.running is None and hello.finished == [[1, 1, True, "exit status 0"]]
        back.send(amp.Welcome(hello.slot))
        back.send(amp.Ack(1, 1))
        back.send(amp.Release())
        assert proc.wait(10) == 0
    finally:
        back.close()


def test_a_worker_without_its_environment_says_what_is_missing():
    done = subprocess.run([sys.executable, "-m", "mesoslike_frameworks.fuxi.worker"], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "FUXI_APPMASTER" in done.stderr


# ============================================== snapshots
def test_snapshots_are_written_whole_and_a_damaged_one_is_set_aside(tmp_path):
    path = tmp_path / "snapshot.json"
    assert read_snapshot(path) is None
    write_snapshot(path, {"format": 1, "units": {"u": {"done": [[0, 3]]}}})
    assert read_snapshot(path) == {"format": 1, "units": {"u": {"done": [[0, 3]]}}}
    assert not (tmp_path / "snapshot.json.tmp").exists()
    path.write_text("{not json")
    assert read_snapshot(path) is None and (tmp_path / "snapshot.json.corrupt").exists() and not path.exists()


def test_am_protocol_round_trips_and_checks_nested_values():
    for message in (amp.Hello("s", "u", "h", "er0", [1, 2], [[0, 1, True, "ok"]]), amp.Heartbeat("s", None),
                    amp.Progress("s", 1, 1, 0.5), amp.Done("s", 1, 1, False, "exit status 1"), amp.Bye("s", "x"),
                    amp.Welcome("s"), amp.Rejoin(), amp.Assign(1, 2, "true", {"A": "b"}), amp.Kill(1, 2),
                    amp.Ack(1, 2), amp.Release(), amp.Error("no")):
        assert amp.decode(amp.encode(message)) == message
    for plain, reason in [({"type": "HELLO", "slot": "s", "unit": "u", "hostname": "h", "finished": [[0, 1, "yes", ""]]},
                           "HELLO.finished[0]"),
                          ({"type": "PROGRESS", "slot": "s", "instance": 0, "attempt": 1, "fraction": 2.0},
                           "PROGRESS.fraction"),
                          ({"type": "DONE", "slot": "s", "instance": 0, "attempt": 1, "ok": 1}, "DONE.ok"),
                          ({"type": "KILL", "instance": -1, "attempt": 1}, ">= 0")]:
        with pytest.raises(amp.ProtocolError, match=reason.replace("[", r"\[").replace("]", r"\]")):
            amp.decode(msgpack.packb({"v": 1, **plain}))
