"""Hostile input cannot hurt the Fuxi service or an AppMaster (issue 12 §2, §4).

A seeded, bounded fuzzer sends each of them frames of every kind — random
bytes, truncated and oversized frames, every message type with fields of
the wrong type, huge numbers and long strings, forged AppMaster requests and
forged workers — over their real sockets, then checks that each still serves
a real client: the job server takes and shows a job, the AppMaster (a real
process, never restarted) welcomes its real worker and hands it work, its
job neither ended nor failed, and its memory stayed bounded.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import msgspec
import pytest

from e2e_helpers import REPO, child_env, free_port, wait_for
from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.model import JobSpec, job_document
from mesoslike_frameworks.fuxi.service import JobClient, JobServer
from mesoslike.transport import Client, Server
from test_fuxi_service import make_service, unit

pytestmark = pytest.mark.timeout(120)

SEED = 20161216
#: frames per target: bounded in count (and so in time)
FRAMES = 400

NASTY_VALUES = [None, True, -1, 0, 2**63 - 1, 2**64 - 1, -2**63, 1e308, -1e308, float("nan"), float("inf"), "",
                "x" * 10_000, "\x00\n/", b"\xff\xfe", [], [1, "a", None], {}, {"a": {"b": {"c": []}}}, 3.5]


def fuzz_frames(rng: random.Random, schema_types: dict[str, type], max_frame: int, count: int,
                forged: list[dict] = ()) -> list[bytes]:
    """``count`` hostile frames for a protocol whose messages are ``schema_types`` (TYPE -> class)."""
    frames = []
    types = sorted(schema_types)
    for i in range(count):
        kind = rng.randrange(8)
        if kind == 0:                                   # random bytes
            frames.append(rng.randbytes(rng.randrange(1, 200)))
        elif kind == 1:                                 # a message with wrong-typed fields
            cls = schema_types[rng.choice(types)]
            fields = {field.name: rng.choice(NASTY_VALUES) for field in msgspec.structs.fields(cls)}
            frames.append(msgpack.packb({"v": 1, "type": cls.TYPE, **fields}, use_bin_type=True))
        elif kind == 2:                                 # truncated
            cls = schema_types[rng.choice(types)]
            whole = msgpack.packb({"v": 1, "type": cls.TYPE, **{f.name: "x" for f in msgspec.structs.fields(cls)}})
            frames.append(whole[:rng.randrange(1, len(whole))])
        elif kind == 3:                                 # a long string in one field, up to just under the limit
            cls = schema_types[rng.choice(types)]
            big = "A" * (max_frame - 1000) if rng.random() < 0.1 else "A" * rng.randrange(1000, 100_000)
            fields = {f.name: "x" for f in msgspec.structs.fields(cls)}
            if fields:
                fields[rng.choice(sorted(fields))] = big
            frames.append(msgpack.packb({"v": 1, "type": cls.TYPE, **fields}))
        elif kind == 4:                                 # huge numbers where numbers belong
            cls = schema_types[rng.choice(types)]
            frames.append(msgpack.packb({"v": 1, "type": cls.TYPE,
                                         **{f.name: rng.choice([2**64 - 1, -2**63, 1e308, 10**18])
                                            for f in msgspec.structs.fields(cls)}}))
        elif kind == 5:                                 # wrong version, unknown type, not a map
            frames.append(msgpack.packb(rng.choice([{"v": 99, "type": "STATUS", "id": 1}, {"v": 1, "type": "NOPE"},
                                                    [1, 2, 3], "STATUS", {"type": None}, {}])))
        elif kind == 6 and forged:                      # well-formed but forged
            frames.append(msgpack.packb({"v": 1, **rng.choice(forged)}))
        else:                                           # deep nesting
            value: object = 1
            for _ in range(rng.randrange(10, 200)):
                value = [value]
            frames.append(msgpack.packb({"v": 1, "type": rng.choice(types), "id": 1, "document": value}))
    return frames


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# ========================================================== the job server
def test_the_job_server_survives_fuzzing_and_still_serves_a_real_client():
    rng = random.Random(SEED)
    service, driver = make_service()
    real = service.submit(JobSpec("before", [unit(slots=1, instances=1)]))
    token = service.core.job(real).token
    forged = [{"type": "JOB_ENDED", "id": 1, "job_id": real, "token": "guess", "succeeded": True, "reason": ""},
              {"type": "SET_DESIRE", "id": 2, "job_id": real, "token": token[:-1], "unit": "u", "slots": 10**9},
              {"type": "KILL", "id": 3, "job_id": "job-9999"},
              {"type": "SUBMIT", "id": 4, "document": {"job": {"name": "j", "units": [
                  {"name": "u", "slots": 1, "cpus": 1, "command": "c", "instances": 2**63 - 1}]}}},
              {"type": "SUBMIT", "id": 5, "document": {"job": {"name": "j", "units": [
                  {"name": "u", "slots": 1, "cpus": 1, "command": "c", "resources": "ports:[1-" + "9" * 400 + "]"}]}}}]
    server = JobServer(service, "tcp://127.0.0.1:0").start()
    try:
        frames = fuzz_frames(rng, protocol.SCHEMA.types, protocol.MAX_FRAME, FRAMES, forged)
        with Client(server.address, codec=protocol.CODEC) as fuzzer:
            for frame in frames:
                fuzzer.send_frame(frame)
            answered = 0
            deadline = time.monotonic() + 60
            while answered < len(frames) and time.monotonic() < deadline:
                if fuzzer.wait(1.0):
                    for _, reply in fuzzer.receive_frames():
                        assert len(reply) <= protocol.MAX_ERROR + 200 or not isinstance(protocol.decode(reply),
                                                                                        protocol.Error)
                        answered += 1
        assert answered == len(frames)                      # every frame got its answer, none stopped the loop
        assert server.counters["failures"] == 0
        with Client(server.address, codec=protocol.CODEC) as oversized:   # over the limit: the connection is dropped
            oversized.send_frame(b"\x00" * (protocol.MAX_FRAME + 1))
        with JobClient(server.address, timeout=10) as client:
            job_id = client.submit({"job": {"name": "after", "units": [
                {"name": "u", "slots": 1, "cpus": 1, "mem": 10, "command": "true"}]}})
            names = [job["name"] for job in client.status()["jobs"]]
        assert names == ["before", "after"] and job_id == "job-0002"   # no hostile job was taken
        assert service.core.job(real).state.value == "running"
        assert service.core.status(real)["jobs"][0]["units"][0]["desired"] == 1
    finally:
        server.stop()


# ============================================================ an AppMaster
class StandInService:
    """The job server an AppMaster reports to: answers OK to everything, keeps what it heard."""

    def __init__(self) -> None:
        self.server = Server("tcp://127.0.0.1:0", codec=protocol.CODEC)
        self.heard: list = []

    def pump(self, seconds: float = 0.0) -> None:
        deadline = time.monotonic() + seconds
        while True:
            if self.server.wait(0.05):
                for peer, frame in self.server.receive_frames():
                    message = protocol.decode(frame)
                    self.heard.append(message)
                    self.server.send(peer, protocol.Ok(message.id))
            if time.monotonic() >= deadline:
                return

    def close(self) -> None:
        self.server.close()


def test_an_appmaster_survives_fuzzing_and_forged_workers_and_still_serves_its_own(tmp_path):
    rng = random.Random(SEED + 1)
    service = StandInService()
    spec = JobSpec("fuzzed", [unit("u", slots=2, instances=4, command="sleep 30")])
    job_path = tmp_path / "job.json"
    job_path.write_text(json.dumps(job_document(spec)))
    token = "job-token"
    address = f"tcp://127.0.0.1:{free_port()}"
    appmaster = subprocess.Popen(
        [sys.executable, "-m", "mesoslike_frameworks.fuxi.appmaster", "--service", service.server.address,
         "--job-id", "job-0001", "--bind", address, "--snapshot", str(tmp_path / "snapshot.json"),
         "--job", str(job_path), "--log-level", "warning", "--heartbeat-timeout", "30"],
        cwd=REPO, env={**child_env(), "FUXI_AM_TOKEN": token}, stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "appmaster.log", "wb"), start_new_session=True)
    try:
        wait_for(lambda: (service.pump(0.1), any(isinstance(m, protocol.Progress) for m in service.heard))[1], 20,
                 "the AppMaster to report", diagnostics=lambda: (tmp_path / "appmaster.log").read_text())
        before = rss_kib(appmaster.pid)
        forged = ([{"type": "HELLO", "slot": f"job-0001.u.{i}", "unit": "u", "hostname": "evil", "running": [i % 4, 1],
                    "finished": [[i % 4, 1, True, "forged"]]} for i in range(10)]
                  + [{"type": "DONE", "slot": f"job-0001.u.{i}", "instance": i % 4, "attempt": 1, "ok": True,
                      "message": "forged"} for i in range(48)])
        frames = fuzz_frames(rng, amp.SCHEMA.types, amp.MAX_FRAME, FRAMES, forged)
        frames += [msgpack.packb({"v": 1, "type": "HELLO", "slot": "s" * (amp.MAX_FRAME - 200), "unit": "u",
                                  "hostname": "h"})] * 11   # issue 12 §2: 11 frames of 1 MiB restarted it 11 times
        intruders = [Client(address, codec=amp.CODEC, identity=f"job-0001.u.{i}".encode()) for i in range(3)]
        try:
            for n, frame in enumerate(frames):
                intruders[n % 3].send_frame(frame)
                if n % 50 == 0:
                    service.pump()
            # each intruder's last frame is a HELLO of a unit the job has not, refused naming it: that refusal
            # says the AppMaster has handled every frame the intruder sent before (one connection: in order)
            for i, intruder in enumerate(intruders):
                intruder.send(amp.Hello(f"sentinel-{i}", f"sentinel-{i}", "h"))
            for i, intruder in enumerate(intruders):
                wait_for(lambda: (service.pump(), _refused_naming(intruder, f"sentinel-{i}"))[1], 60,
                         f"intruder {i}'s frames to be handled", interval=0.0,
                         diagnostics=lambda: (tmp_path / "appmaster.log").read_text()[-3000:])
            worker_slot = "job-0001.u.7"
            with Client(address, codec=amp.CODEC, identity=worker_slot.encode()) as worker:
                worker.send(amp.Hello(worker_slot, "u", "node-1", "er0", None, [],
                                      amp.worker_token(token, worker_slot), "agent-1"))
                got = wait_for(lambda: _receive(worker, (amp.Welcome, amp.Assign)), 10, "a WELCOME and an ASSIGN",
                               interval=0.0)
                assert {type(m) for m in got} >= {amp.Welcome, amp.Assign}, got
                # a worker with the slot's name but not its token is refused
                worker.send(amp.Hello("job-0001.u.8", "u", "h", "", None, [], "wrong"))
                refused = wait_for(lambda: _receive(worker, (amp.Error,)), 10, "the refusal", interval=0.0)
                assert "wrong token" in refused[0].message
        finally:
            for intruder in intruders:
                intruder.close()
        # the AppMaster reports to its service on one connection, in order: a report that shows the worker,
        # which joined once every intruder frame was handled, comes after anything those frames made it say
        wait_for(lambda: (service.pump(), any(isinstance(m, protocol.Progress) and worker_slot in m.report["slots"]
                                              for m in service.heard))[1], 30, "a report that shows the worker",
                 interval=0.0, diagnostics=lambda: (tmp_path / "appmaster.log").read_text()[-3000:])
        assert appmaster.poll() is None, (tmp_path / "appmaster.log").read_text()[-3000:]
        ended = [m for m in service.heard if isinstance(m, protocol.JobEnded)]
        assert ended == []                                    # 48 forged DONEs did not finish its job
        last = [m for m in service.heard if isinstance(m, protocol.Progress)][-1].report
        assert last["instances"]["done"] == 0 and set(last["slots"]) == {"job-0001.u.7"}
        assert rss_kib(appmaster.pid) - before < 64 * 1024, (before, rss_kib(appmaster.pid))
    finally:
        os.killpg(appmaster.pid, signal.SIGKILL)
        appmaster.wait(10)
        service.close()


def _refused_naming(client: Client, name: str) -> bool:
    """Whether ``client`` has received an ERROR naming ``name`` (the replies before it are read and dropped)."""
    return any(isinstance(m, amp.Error) and repr(name) in m.message for _, m in client.receive())


def _receive(client: Client, kinds: tuple) -> list:
    found = []
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if client.wait(0.1):
            found += [m for _, m in client.receive() if isinstance(m, kinds)]
        if found and (len(kinds) == 1 or {type(m) for m in found} >= set(kinds)):
            return found
    return found if found and {type(m) for m in found} >= set(kinds) else []
