"""The Fuxi service (``mesoslike fuxi serve / submit / status``).

First the job runtime against a stand-in driver (fast, deterministic: the
core's commands become driver calls, instances are retried, desire shrinks,
preempted instances wait again); then the job-client protocol; then the real
thing: a ``mesoslike local`` cluster, a ``mesoslike fuxi serve`` process and
the ``submit`` / ``status`` commands as a user runs them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import msgpack
import pytest

from e2e_helpers import REPO, Cluster, alive, child_env, free_port, wait_for
from mesoslike import Offer, Resources, TaskState, TaskStatus
from mesoslike.clock import FakeClock
from mesoslike.wire import TERMINAL_STATES
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.am_protocol import worker_token
from mesoslike_frameworks.fuxi.hard_state import decode as decode_state
from mesoslike_frameworks.fuxi.state_store import FileRecordStore, StoreLocked
from mesoslike_frameworks.fuxi.core import FuxiCore, FuxiError
from mesoslike_frameworks.fuxi.jobs import MAX_WORKER_FAILURES
from mesoslike_frameworks.fuxi.model import (
    BackupPolicy,
    JobSpec,
    JobSpecError,
    Locality,
    UnitSpec,
    check_runnable,
    job_document,
    load_job_file,
    parse_job,
)
from mesoslike_frameworks.fuxi.quota import QuotaFileError, load_quota_file
from mesoslike.transport import Client, CurveKeys, load_public_key
from mesoslike_frameworks.fuxi.service import (
    APPMASTER_MODULE,
    STANDBY_REFUSAL,
    WORKER_MODULE,
    FuxiService,
    JobClient,
    JobRefused,
    JobServer,
    answer,
    worker_command,
)

pytestmark = pytest.mark.timeout(60)

R = Resources.parse


# ============================================== the runtime, stand-in driver
class FakeDriver:
    """Records the driver calls the service makes."""

    framework_id = "framework-1"
    connected = True

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def launch_tasks(self, offer_ids, tasks, filters=None):
        self.calls.append(("launch", list(offer_ids), list(tasks), filters))

    def decline_offer(self, offer_id, filters=None):
        self.calls.append(("decline", offer_id, filters))

    def kill_task(self, task_id, agent_id=""):
        self.calls.append(("kill", task_id))

    def suppress_offers(self):
        self.calls.append(("suppress",))

    def revive_offers(self):
        self.calls.append(("revive",))

    def reconcile_tasks(self, tasks):
        self.calls.append(("reconcile", list(tasks)))

    def take(self, kind: str) -> list[tuple]:
        found = [c for c in self.calls if c[0] == kind]
        self.calls = [c for c in self.calls if c[0] != kind]
        return found

    def launched(self) -> list:
        return [task for call in self.take("launch") for task in call[2]]


_offer_seq = iter(range(1, 1_000_000))


def offer(host: str = "h1", res: str = "cpus:4;mem:4096", room: str = "er0") -> Offer:
    return Offer(f"o{next(_offer_seq)}", f"a-{host}", host, R(res), {"room": room})


def unit(name="u", slots=1, instances=0, command="run {instance}", slot="cpus:1;mem:100", **kw) -> UnitSpec:
    return UnitSpec(name, slots, R(slot), command=command, instances=instances, **kw)


def make_service(**kwargs):
    core = FuxiCore(kwargs.pop("groups", None), clock=FakeClock(), **kwargs)
    service = FuxiService(core, launch_appmasters=False)
    driver = FakeDriver()
    service.attach(driver)
    return service, driver


def update(service, task, state, message="", driver=None):
    service.status_update(driver or service.driver, TaskStatus(task_id=task.task_id, state=state, message=message))


def unit_status(service, job_id, name="u") -> dict:
    job = service.status(job_id)["jobs"][0]
    return next(u for u in job["units"] if u["name"] == name)


def ask(service, job_id, cls, token=None, **fields):
    """What the service answers an AppMaster request (through the job server's handler)."""
    token = service.core.job(job_id).token if token is None else token
    return protocol.decode(answer(service, protocol.encode(cls(id=7, job_id=job_id, token=token, **fields))))


def test_each_granted_slot_runs_a_worker_task_that_knows_its_place():
    service, driver = make_service()
    job_id = service.submit(JobSpec("j", [unit(slots=2, instances=4)]))
    service.resource_offers(driver, [offer("h1", room="er1")])
    tasks = driver.launched()
    assert len(tasks) == 2
    for task in tasks:
        # the worker module, run by the service's interpreter (tests/test_fuxi_worker_spawn.py: how it starts)
        assert task.command == worker_command(service.python) and WORKER_MODULE in task.command
        assert task.resources == R("cpus:1;mem:100")
        env = task.environment
        assert env["FUXI_JOB_ID"] == job_id and env["FUXI_UNIT"] == "u" and env["FUXI_SLOT_ID"] == task.task_id
        assert env["FUXI_HOSTNAME"] == "h1" and env["FUXI_ROOM"] == "er1" and "FUXI_APPMASTER" in env
        # what proves to the AppMaster that it is this slot's worker (issue 12 §2): a secret file of its
        # sandbox the environment names, never the environment itself
        assert worker_secret(task, "FUXI_WORKER_TOKEN_FILE") == worker_token(service.core.job(job_id).token,
                                                                             task.task_id).encode()
        assert not any(worker_token(service.core.job(job_id).token, task.task_id) in value for value in env.values())
        assert task.user == ""          # a service without credentials: its jobs run as the framework's user


def worker_secret(task, variable: str) -> bytes:
    """The value of the worker secret file the task's ``variable`` names (a SECRET volume of its container)."""
    (volume,) = [v for v in task.container.volumes if v.container_path == task.environment[variable]]
    assert volume.source.type == "SECRET" and volume.source.secret is not None
    return volume.source.secret.value


def test_the_first_desire_is_the_instances_and_none_for_units_that_come_after():
    service, _ = make_service()
    job_id = service.submit(JobSpec("j", [unit("map", slots=5, instances=2), unit("reduce", slots=3, after=["map"])]))
    assert unit_status(service, job_id, "map")["desired"] == 2
    assert unit_status(service, job_id, "reduce")["desired"] == 0


def test_appmaster_requests_drive_desire_release_blacklists_progress_and_the_end():
    service, driver = make_service(blacklist_reports=1)   # one job's report is enough here (issue 16: two)
    job_id = service.submit(JobSpec("j", [unit(slots=3, instances=6)]))
    assert isinstance(ask(service, job_id, protocol.SetDesire, unit="u", slots=2), protocol.Ok)
    service.resource_offers(driver, [offer("h1")])
    first, second = driver.launched()
    assert unit_status(service, job_id)["granted"] == 2
    # the AppMaster lowers its desire, then lets a slot go: it is not granted again
    ask(service, job_id, protocol.SetDesire, unit="u", slots=1)
    assert isinstance(ask(service, job_id, protocol.ReleaseSlot, slot=first.task_id), protocol.Ok)
    assert unit_status(service, job_id)["granted"] == 1 and unit_status(service, job_id)["desired"] == 1
    update(service, first, TaskState.FINISHED)                 # the released worker exits: nothing more
    assert unit_status(service, job_id)["granted"] == 1
    # a blacklisted host gets no more slots of the job; a reported one none of anybody's
    ask(service, job_id, protocol.BlacklistHost, host="h1")
    ask(service, job_id, protocol.ReportHost, host="h9")
    ask(service, job_id, protocol.SetDesire, unit="u", slots=2)
    service.resource_offers(driver, [offer("h1")])
    assert driver.launched() == []
    service.resource_offers(driver, [offer("h2")])
    (third,) = driver.launched()
    assert third.environment["FUXI_HOSTNAME"] == "h2"
    assert service.status()["global_blacklist"] == ["h9"]
    report = {"state": "running", "units": {"u": {"total": 6, "done": 4, "running": 2, "pending": 0,
                                                  "failed_attempts": 1, "backups": 1, "workers": 2}},
              "blacklisted": ["h1"]}
    ask(service, job_id, protocol.Progress, report=report)
    job = service.status(job_id)["jobs"][0]
    assert job["instances"] == {"total": 6, "done": 4, "running": 2, "pending": 0, "failed": 1, "backups": 1}
    assert job["blacklisted"] == ["h1"]
    assert isinstance(ask(service, job_id, protocol.JobEnded, succeeded=True, reason=""), protocol.Ok)
    job = service.status(job_id)["jobs"][0]
    assert job["state"] == "succeeded" and job["units"][0]["granted"] == 0
    assert driver.take("kill") == []   # released by their AppMaster, the workers exit by themselves
    # what an AppMaster says after the end is moot, not an error
    assert isinstance(ask(service, job_id, protocol.SetDesire, unit="u", slots=3), protocol.Ok)


def test_bad_appmaster_requests_are_refused_and_change_nothing():
    service, driver = make_service()
    job_id = service.submit(JobSpec("j", [unit(slots=1)]))
    other = service.submit(JobSpec("k", [unit(slots=1)]))
    service.resource_offers(driver, [offer()])
    other_slot = next(t for t in driver.launched() if t.environment["FUXI_JOB_ID"] == other)
    for answer, reason in [
            (ask(service, "job-9", protocol.SetDesire, token="x", unit="u", slots=1), "unknown job"),
            (ask(service, job_id, protocol.SetDesire, token="forged", unit="u", slots=1), "wrong token"),
            (ask(service, job_id, protocol.SetDesire, unit="nope", slots=1), "unknown unit"),
            (ask(service, job_id, protocol.SetDesire, unit="u", slots=-1), ">= 0"),
            (ask(service, job_id, protocol.ReleaseSlot, slot=other_slot.task_id), "not a slot of job"),
            (ask(service, job_id, protocol.BlacklistHost, host=""), "non-empty"),
            (ask(service, job_id, protocol.Progress, report={"x": b"bytes"}), "JSON"),
    ]:
        assert isinstance(answer, protocol.Error) and reason in answer.message, (answer, reason)
    assert unit_status(service, job_id)["desired"] == 1 and unit_status(service, other)["granted"] == 1
    assert service.status(job_id)["jobs"][0]["state"] == "running"


def test_a_worker_that_ends_gives_its_slot_back_and_the_unit_keeps_its_desire():
    service, driver = make_service()
    job_id = service.submit(JobSpec("j", [unit(slots=2, instances=2)]))
    service.resource_offers(driver, [offer()])
    first, second = driver.launched()
    update(service, first, TaskState.RUNNING)
    update(service, first, TaskState.FAILED, "worker crashed")
    assert unit_status(service, job_id)["granted"] == 1 and unit_status(service, job_id)["desired"] == 2
    update(service, second, TaskState.LOST, "agent gone")           # a lost worker: a lost slot
    assert unit_status(service, job_id)["granted"] == 0 and unit_status(service, job_id)["desired"] == 2
    service.resource_offers(driver, [offer()])
    assert len(driver.launched()) == 2


def test_workers_that_keep_failing_fail_the_job():
    service, driver = make_service()
    job_id = service.submit(JobSpec("j", [unit(slots=1)]))
    for _ in range(MAX_WORKER_FAILURES):
        service.resource_offers(driver, [offer()])
        (task,) = driver.launched()
        update(service, task, TaskState.FAILED, "python: not found")
    job = service.status(job_id)["jobs"][0]
    assert job["state"] == "failed" and "worker tasks failed" in job["reason"] and "python: not found" in job["reason"]


def test_the_workers_of_a_unit_with_an_image_run_in_it_by_its_python():
    service, driver = make_service()
    service.submit(JobSpec("j", [unit(slots=1, image="registry.example:5000/team/app:1.2"), unit("plain")]))
    service.resource_offers(driver, [offer("h1")])
    tasks = {task.name.split(".")[1]: task for task in driver.launched()}
    assert tasks["u"].container.image.name == "registry.example:5000/team/app:1.2"
    assert tasks["u"].command.startswith("exec python3 -m ") and tasks["u"].shell
    # (both carry the worker's secret files as SECRET volumes)
    assert tasks["plain"].container.image is None and not tasks["plain"].command.startswith("exec python3 ")
    assert {v.container_path for v in tasks["u"].container.volumes} == {
        v.container_path for v in tasks["plain"].container.volumes} == {".fuxi_worker_token"}


def test_an_agent_lost_takes_its_slots_back():
    service, driver = make_service()
    job_id = service.submit(JobSpec("j", [unit(slots=2, instances=2)]))
    service.resource_offers(driver, [offer("h1")])
    assert len(driver.launched()) == 2
    service.agent_lost(driver, "a-h1")
    assert unit_status(service, job_id)["granted"] == 0 and unit_status(service, job_id)["desired"] == 2


def test_an_appmaster_that_keeps_exiting_is_restarted_then_its_job_fails(tmp_path):
    core = FuxiCore(clock=FakeClock())
    service = FuxiService(core, work_dir=tmp_path, python="/bin/false", max_appmaster_restarts=2)
    service.service_address = "tcp://127.0.0.1:1"
    service.attach(FakeDriver())
    try:
        job_id = service.submit(JobSpec("j", [unit()]))
        appmaster = service.appmasters[job_id]
        assert (tmp_path / job_id / "job.json").exists() and appmaster.address.startswith("tcp://127.0.0.1:")
        address = appmaster.address

        def ended():
            service.supervise()
            return service.status(job_id)["jobs"][0]["state"] == "failed"
        wait_for(ended, 20, "the job to fail")
        job = service.status(job_id)["jobs"][0]
        assert "AppMaster exited 3 times" in job["reason"] and job["appmaster"]["restarts"] == 2
        assert job["appmaster"]["address"] == address                   # restarted on the same address
    finally:
        service.stop()


def test_job_document_reads_back_as_the_same_job():
    spec = JobSpec("j", [unit("map", slots=2, instances=3, data=[["h1"], [], ["h2", "h1"]], max_attempts=5,
                              max_per_machine=1, priority=7, locality=[Locality.machine("h1", 1),
                                                                        Locality.room("er0", 1),
                                                                        Locality.cluster(2)],
                              blacklist=["h3"]),
                         unit("reduce", slots=1, after=["map"], slot="cpus:0.5;mem:64;gpus:1")],
                   backup=BackupPolicy(min_finished_fraction=0.25), blacklist_after=2, policy="FAIR")
    assert parse_job(json.loads(json.dumps(job_document(spec)))) == spec


def test_declines_suppress_revive_and_rescinds_reach_the_driver():
    service, driver = make_service()
    service.resource_offers(driver, [offer()])
    assert driver.take("decline") and driver.take("suppress")
    service.submit(JobSpec("j", [unit()]))
    assert driver.take("revive")
    service.offer_rescinded(driver, "o-unknown")
    service.reregistered(driver, None)
    assert driver.take("revive")


def test_a_bad_job_changes_nothing():
    service, _ = make_service()
    with pytest.raises(JobSpecError, match=r"job.units\[0\].command"):
        service.submit(JobSpec("j", [unit(command=" ")]))
    with pytest.raises(FuxiError, match="unknown quota group 'nope'"):
        service.submit(JobSpec("j", [unit()], quota_group="nope"))
    with pytest.raises(JobSpecError, match=r"job.units\[0\].slots"):
        service.submit({"job": {"name": "j", "units": [{"name": "u", "slots": 0, "cpus": 1, "command": "x"}]}})
    assert service.status()["jobs"] == []


def test_the_example_files_are_valid():
    spec = load_job_file(REPO / "examples" / "fuxi" / "two-units.toml")
    check_runnable(spec)
    config = load_quota_file(REPO / "examples" / "fuxi" / "quota.toml")
    assert spec.quota_group in config.groups


# ================================================== protocol and job server
def test_protocol_round_trips_and_names_what_is_wrong():
    for message in (protocol.Submit(1, {"job": {"name": "x"}}), protocol.Submitted(2, "job-0001"),
                    protocol.Status(3), protocol.StatusReply(4, "{}"), protocol.Error(5, "no")):
        assert protocol.decode(protocol.encode(message)) == message
    with pytest.raises(protocol.ProtocolError, match="SUBMIT.document: missing"):
        protocol.decode(msgpack.packb({"v": 1, "type": "SUBMIT", "id": 1}))
    with pytest.raises(protocol.ProtocolError, match="unsupported protocol version"):
        protocol.decode(msgpack.packb({"v": 9, "type": "STATUS", "id": 1}))


def test_the_job_server_answers_bad_requests_with_errors():
    service, _ = make_service()
    server = JobServer(service, "tcp://127.0.0.1:0")
    try:
        def answer(frame):
            return protocol.decode(server.handle(frame))
        assert isinstance(answer(b"\xc1garbage"), protocol.Error)
        assert "unknown message type" in answer(msgpack.packb({"v": 1, "type": "NOPE", "id": 7})).message
        bad = answer(protocol.encode(protocol.Submit(3, {"job": {"name": "j", "units": "x"}})))
        assert bad.id == 3 and "job.units" in bad.message
        assert "unknown job" in answer(protocol.encode(protocol.Status(4, "job-9"))).message
        good = answer(protocol.encode(protocol.Submit(5, {"job": {"name": "j", "units": [
            {"name": "u", "slots": 1, "cpus": 1, "mem": 10, "command": "true"}]}})))
        assert isinstance(good, protocol.Submitted) and good.job_id == "job-0001"
    finally:
        server.stop()


def test_job_client_and_server_over_zeromq():
    service, _ = make_service()
    server = JobServer(service, "tcp://127.0.0.1:0").start()
    try:
        with JobClient(server.address, timeout=5) as client:
            job_id = client.submit({"job": {"name": "j", "units": [
                {"name": "u", "slots": 1, "cpus": 1, "mem": 10, "command": "true"}]}})
            assert client.status(job_id)["jobs"][0]["id"] == job_id
            with pytest.raises(JobRefused, match="unknown job"):
                client.status("job-4242")
    finally:
        server.stop()


TWO_SLOTS = {"job": {"name": "j", "units": [{"name": "u", "slots": 2, "cpus": 1, "mem": 10, "command": "true"}]}}


@contextlib.contextmanager
def _serving(server_class: type[JobServer] = JobServer, **kwargs) -> Iterator[tuple[FuxiService, JobServer,
                                                                                    JobClient, str]]:
    """A service with a job of two slots submitted, its job server and a client: (service, server, client, job)."""
    service, _ = make_service()
    server = server_class(service, "tcp://127.0.0.1:0", **kwargs).start()
    try:
        with JobClient(server.address, timeout=5) as client:
            yield service, server, client, client.submit(TWO_SLOTS)
    finally:
        server.stop()


def _asking(client: JobClient, job_id: str, wait: float) -> tuple[threading.Thread, list]:
    """A STATUS of ``job_id`` with ``wait`` on a thread: (the thread, [(answer or error, seconds it took)])."""
    answers: list = []

    def ask_once() -> None:
        started = time.monotonic()
        try:
            found: object = client.status(job_id, wait=wait)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            found = exc
        answers.append((found, time.monotonic() - started))

    thread = threading.Thread(target=ask_once)
    thread.start()
    return thread, answers


def test_a_status_with_a_wait_is_answered_the_moment_its_job_ends():
    """A long poll: ``submit --wait`` saw a job's end up to a poll after it
    (a fifth of ``--interval`` at best); now the service answers it then."""
    with _serving() as (service, server, other, job_id), JobClient(server.address, timeout=5) as client:
        thread, answers = _asking(client, job_id, wait=40)
        wait_for(lambda: server.counters["waited"] == 1, 10, "the STATUS to wait")
        assert other.status(job_id)["jobs"][0]["state"] == "running"   # others are answered meanwhile
        assert not answers
        assert isinstance(ask(service, job_id, protocol.JobEnded, succeeded=True, reason=""), protocol.Ok)
        thread.join(20)
        (document, _), = answers
        assert document["jobs"][0]["state"] == "succeeded"
        # an ended job's STATUS, or one for every job, is answered at once whatever its wait
        assert other.status(job_id, wait=40)["jobs"][0]["state"] == "succeeded"
        assert len(other.status(wait=40)["jobs"]) == 1
        assert server.counters["waited"] == 1


def test_a_status_waits_at_most_its_wait_and_a_killed_job_ends_it():
    with _serving() as (_, server, other, job_id), JobClient(server.address, timeout=5) as client:
        thread, answers = _asking(client, job_id, wait=0.3)
        thread.join(20)
        (document, took), = answers
        assert document["jobs"][0]["state"] == "running" and took >= 0.3
        thread, answers = _asking(client, job_id, wait=40)
        wait_for(lambda: server.counters["waited"] == 2, 10, "the second STATUS to wait")
        other.kill(job_id)   # over the protocol, on the server's own thread
        thread.join(20)
        (document, _), = answers
        assert document["jobs"][0]["state"] == "killed"
        with pytest.raises(JobRefused, match="STATUS.wait: seconds to wait, 0 or more"):
            other._ask(protocol.Status(9, job_id, -1.0))


def test_status_waits_are_bounded_and_a_server_standing_by_answers_them(monkeypatch):
    """State a peer can grow is bounded: past MAX_WAITING_STATUS a long poll
    is answered at once (its client polls, as with a service of before);
    a server that stops serving answers the waiting ones as a standby."""
    monkeypatch.setattr("mesoslike_frameworks.fuxi.service.MAX_WAITING_STATUS", 2)
    with _serving(refusing=STANDBY_REFUSAL) as (_, server, client, job_id):
        clients = [JobClient(server.address, timeout=5) for _ in range(2)]
        waiting = [_asking(each, job_id, wait=40) for each in clients]
        wait_for(lambda: server.counters["waited"] == 2, 10, "two STATUS to wait")
        started = time.monotonic()
        assert client.status(job_id, wait=40)["jobs"][0]["state"] == "running"
        assert time.monotonic() - started < 20 and server.counters["waited"] == 2
        server.stand_by(hold=False)
        for thread, answers in waiting:
            thread.join(20)
            (refused, _), = answers
            assert isinstance(refused, JobRefused) and "is a standby" in str(refused)
        for each in clients:
            each.close()


def test_a_status_whose_wait_ends_while_leadership_is_in_doubt_is_held_until_the_server_serves():
    with _serving(refusing=STANDBY_REFUSAL) as (service, server, client, job_id):
        thread, answers = _asking(client, job_id, wait=0.5)
        wait_for(lambda: server.counters["waited"] == 1, 10, "the STATUS to wait")
        server.stand_by(hold=True)
        wait_for(lambda: server.counters["held"] == 1, 10, "the STATUS to be held at the end of its wait")
        assert not answers
        server.serve(service)
        thread.join(20)
        (document, _), = answers
        assert document["jobs"][0]["state"] == "running"


def test_following_a_job_sees_its_end_at_once_and_polls_a_service_of_before():
    """``submit --wait``'s loop (``_follow``): with a long poll it returns at
    the job's end though its interval is 30 s; against a service that
    answers every STATUS at once (one of before long polls) it polls every
    interval — not in a tight loop."""
    from mesoslike_frameworks.fuxi.cli import _follow

    class ServerOfBefore(JobServer):
        def _waits(self, peer, frame, principal) -> bool:
            return False

    for server_class, interval in ((JobServer, 30.0), (ServerOfBefore, 0.2)):
        with _serving(server_class) as (service, server, client, job_id):
            codes: list[int] = []
            follow = threading.Thread(target=lambda: codes.append(_follow(client, job_id, interval, 5)))
            follow.start()
            wait_for(lambda: server.counters["requests"] >= 3 or server.counters["waited"] >= 1, 10,
                     "the client to follow the job")
            asked = server.counters["requests"]
            time.sleep(1.0)   # a second of following: how many more requests it made
            more = server.counters["requests"] - asked
            assert more <= (1 if server_class is JobServer else 1.0 / interval * 5 + 2), more
            ask(service, job_id, protocol.JobEnded, succeeded=True, reason="")
            follow.join(10)
            assert codes == [0]


def test_a_just_elected_job_server_holds_requests_until_it_serves():
    """Between its election and its jobs being loaded a new leader answered
    as a standby: an AppMaster that saw the election first had its report
    refused and waited 2 s for the next one, holding up the job's new slots."""
    server = JobServer(None, "tcp://127.0.0.1:0", refusing=STANDBY_REFUSAL).start()
    try:
        with JobClient(server.address, timeout=5) as client:
            with pytest.raises(JobRefused, match="is a standby"):
                client.status()
            server.hold()
            answers: list = []
            asking = threading.Thread(target=lambda: answers.append(client.status()))
            asking.start()
            wait_for(lambda: server.counters["held"] == 1, 10, "the request to be held")
            assert not answers
            service, _ = make_service()
            server.serve(service)
            asking.join(10)
            assert answers and answers[0]["jobs"] == []
    finally:
        server.stop()


def test_kill_over_the_protocol_and_status_says_where_the_master_is():
    service, driver = make_service()
    service.master = "tcp://master:5050"
    job_id = service.submit(JobSpec("j", [unit(slots=2, instances=2)]))
    service.resource_offers(driver, [offer()])
    slots = [task.task_id for task in driver.launched()]
    assert isinstance(protocol.decode(answer(service, protocol.encode(protocol.KillJob(3, job_id)))), protocol.Ok)
    assert sorted(call[1] for call in driver.take("kill")) == sorted(slots)
    document = service.status(job_id)
    assert document["jobs"][0]["state"] == "killed" and document["framework"]["master"] == "tcp://master:5050"
    again = protocol.decode(answer(service, protocol.encode(protocol.KillJob(4, job_id))))
    assert isinstance(again, protocol.Error) and "ended already" in again.message


def test_the_job_server_survives_a_frame_whose_answer_cannot_be_sent():
    # issue 12 §2: one 4,194,288-byte frame killed the serving thread (the echoed ERROR was too big to send)
    service, _ = make_service()
    server = JobServer(service, "tcp://127.0.0.1:0").start()
    try:
        with JobClient(server.address, timeout=10) as client:
            hostile = {"job": {"name": "/" * (protocol.MAX_FRAME - 200), "units": []}}
            frame = protocol.encode(protocol.Submit(1, hostile))
            assert len(frame) > protocol.MAX_FRAME - 300
            client._client.send_frame(frame)
            assert client._client.wait(10)
            refused = protocol.decode(next(client._client.receive_frames())[1])
            assert isinstance(refused, protocol.Error) and len(refused.message) <= protocol.MAX_ERROR
            # a handler that raises something unforeseen, and an answer too big to encode
            service.status = lambda job_id=None: {"jobs": ["x" * protocol.MAX_FRAME]}   # type: ignore[method-assign]
            with pytest.raises(JobRefused, match="the answer cannot be sent"):
                client.status()
            service.appmaster_request = lambda request, principal=None: 1 / 0   # type: ignore[method-assign]
            with pytest.raises(JobRefused, match="internal error: ZeroDivisionError"):
                client._ask(protocol.SetDesire(9, "job-1", "t", "u", 1))
            # it still serves a real client
            assert client.submit({"job": {"name": "j", "units": [
                {"name": "u", "slots": 1, "cpus": 1, "mem": 10, "command": "true"}]}}) == "job-0001"
    finally:
        server.stop()


def test_a_submission_is_acknowledged_only_once_it_is_stored(tmp_path):
    class Store:
        def __init__(self) -> None:
            self.records: dict[str, bytes] = {}
            self.fail = ""
            self.fail_once = False
            self.loads = 0

        def load(self) -> dict[str, bytes]:
            self.loads += 1
            return dict(self.records)

        def write(self, records, deleted=()) -> None:
            if self.fail or self.fail_once:
                self.fail_once = False
                raise StoreLocked(self.fail or "did not answer in time")
            self.records.update(records)
            for key in deleted:
                self.records.pop(key, None)

    store = Store()
    service = FuxiService(FuxiCore(clock=FakeClock()), launch_appmasters=False, store=store)
    service.attach(FakeDriver())
    service.recover(decode_state({}))
    job_id = service.submit(JobSpec("j", [unit()]))
    assert decode_state(store.records).jobs[job_id].state == "running"
    store.fail_once = True                                   # an outcome unknown: read again, written once more
    retried = service.submit(JobSpec("j", [unit()]))
    assert store.loads == 1 and decode_state(store.records).jobs[retried].state == "running"
    service.kill(retried)
    store.fail = "the disk is full"
    with pytest.raises(FuxiError, match="could not be stored, so it was not accepted: the disk is full"):
        service.submit(JobSpec("j", [unit()]))
    with pytest.raises(FuxiError, match="the kill could not be stored, so the job goes on"):
        service.kill(job_id)
    assert [job.id for job in service.core.jobs] == [job_id, retried]
    assert service.core.job(job_id).state.value == "running"


def test_the_file_store_writes_whole_records_and_admits_one_service(tmp_path):
    store = FileRecordStore(tmp_path / "state")
    assert store.load() == {}
    store.write({"service": b"1", "job.job-0001": b"a"})
    store.write({"job.job-0002": b"b"}, deleted=["job.job-0001"])
    assert store.load() == {"service": b"1", "job.job-0002": b"b"}
    assert not list((tmp_path / "state").glob(".*tmp"))
    with pytest.raises(StoreLocked, match="another `mesoslike fuxi serve` keeps its state"):
        FileRecordStore(tmp_path / "state")
    store.close()
    again = FileRecordStore(tmp_path / "state")         # let go: the next one may
    assert again.load() == {"service": b"1", "job.job-0002": b"b"}
    again.close()


def test_quota_file(tmp_path):
    path = tmp_path / "quota.toml"
    path.write_text('[quota.a]\ncpus = 2\nmem = 100\n[quota.b]\n[blacklist]\nhosts = ["h9"]\n')
    config = load_quota_file(path)
    assert config.groups == {"a": R("cpus:2;mem:100"), "b": None} and config.blacklist == {"h9"}
    path.write_text('[quota.a]\ncpus = "lots"\n')
    with pytest.raises(QuotaFileError, match="quota.a.cpus"):
        load_quota_file(path)


# ========================================================= the real thing
JOB_TEMPLATE = """
[job]
name = "{name}"
quota_group = "{group}"

{units}
"""

UNIT_TEMPLATE = """
[[job.units]]
name = "{name}"
slots = {slots}
cpus = {cpus}
mem = 32
instances = {instances}
command = '{command}'
{extra}
"""


def job_file(path: Path, name: str, units: list[dict], group: str = "default") -> Path:
    text = JOB_TEMPLATE.format(name=name, group=group, units="".join(
        UNIT_TEMPLATE.format(**{"cpus": 0.1, "instances": 0, "extra": "", **u}) for u in units))
    path.write_text(text)
    return path


def fuxi_serve_security(cluster: Cluster) -> list[str]:
    """``fuxi serve``'s flags on the authenticated ``mesoslike local`` cluster, as its COMMAND gets them in
    its environment: the client's key (at the master, and to serve job clients) and local's credentials."""
    keys = cluster.work_root / "keys"
    return ["--key", cluster.client_key, "--master-key", cluster.master_key,
            "--credentials", str(keys / "credentials.toml")]


def fuxi_client_env(cluster: Cluster) -> dict[str, str]:
    """The environment of a job client (``fuxi submit/status/kill``) of that service: the client principal's
    key and the service's public certificate (the client's, which it serves with)."""
    return dict(cluster.client_env(), MESOSLIKE_FUXI_KEY=cluster.client_key.removesuffix("_secret"))


def fuxi_job_client(cluster: Cluster, address: str, timeout: float) -> JobClient:
    """A :class:`JobClient` of that service, as the client principal."""
    return JobClient(address, timeout, keys=CurveKeys.load(cluster.client_key),
                     server_key=load_public_key(cluster.client_key.removesuffix("_secret")))


class Fuxi:
    """A ``mesoslike local`` cluster of ``agents`` agents with a ``mesoslike
    fuxi serve`` on it (its quota file: a ``small`` group; its work dir under
    ``tmp``), authenticated end to end (docs/security.rst)."""

    def __init__(self, tmp: Path, agents: int = 2) -> None:
        self.tmp = tmp
        self.cluster = Cluster(tmp)
        self.cluster.start_local("--agents", str(agents), "--resources", "cpus:2;mem:1024")
        quota = tmp / "quota.toml"
        quota.write_text("[quota.small]\ncpus = 0.2\nmem = 1000\n")
        port = free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        self.work_dir = tmp / "fuxi-work"
        self.proc = self.cluster._start("fuxi", ["fuxi", "serve", "--master", self.cluster.address, "--port",
                                                 str(port), "--quota", str(quota), "--work-dir", str(self.work_dir),
                                                 "--log-level", "info", *fuxi_serve_security(self.cluster)])
        wait_for(lambda: self.status()["jobs"] == [], 20, "the Fuxi service to answer",
                 diagnostics=self.cluster.diagnostics)
        self.cluster.wait_until(lambda: self.cluster.framework("fuxi"), 20, "the fuxi framework")

    def status(self, job_id: str | None = None) -> dict:
        try:
            with fuxi_job_client(self.cluster, self.address, timeout=2) as client:
                return client.status(job_id)
        except JobRefused:
            raise
        except Exception as exc:  # noqa: BLE001 - not up yet
            raise OSError(str(exc)) from None

    def cli(self, *args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """``mesoslike fuxi ARGS`` as the client principal (``env``: another environment)."""
        return subprocess.run([sys.executable, "-m", "mesoslike", "fuxi", *args], cwd=REPO,
                              env=fuxi_client_env(self.cluster) if env is None else env, capture_output=True,
                              text=True, timeout=timeout)

    def submit(self, path: Path, *extra: str) -> subprocess.CompletedProcess:
        return self.cli("submit", "--fuxi", self.address, "--interval", "0.2", *extra, str(path))


def appmaster_processes(work_dir: Path) -> list[int]:
    """Living AppMaster processes whose snapshot lies under ``work_dir``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if APPMASTER_MODULE.encode() in argv and any(str(work_dir).encode() in arg for arg in argv) \
                and alive(int(entry)):
            found.append(int(entry))
    return found


def kill_appmasters(work_dir: Path) -> None:
    """SIGKILL the AppMasters (and their groups) of ``work_dir``: with a kept
    state they outlive their service, waiting for the next one."""
    for pid in appmaster_processes(work_dir):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def serving(cls, tmp: Path):
    """A module fixture's body: a ``cls`` (a :class:`Fuxi`) in ``tmp``, all of it stopped afterwards."""
    service = None
    try:
        service = cls(tmp)
        yield service
    finally:
        if service is not None:
            service.cluster.close()
            kill_appmasters(service.work_dir)


@pytest.fixture(scope="module")
def fuxi(tmp_path_factory):
    yield from serving(Fuxi, tmp_path_factory.mktemp("fuxi"))


@pytest.mark.timeout(120)
def test_a_two_unit_job_succeeds_and_every_instance_runs_once(fuxi, tmp_path):
    ran = tmp_path / "ran.txt"
    record = f'echo "$FUXI_JOB_ID $FUXI_UNIT {{instance}} $FUXI_INSTANCE" >> {ran}'
    path = job_file(tmp_path / "job.toml", "two-units", [
        {"name": "map", "slots": 2, "instances": 5, "command": f"sleep 0.2; {record}",
         "extra": "max_per_machine = 1"},
        {"name": "reduce", "slots": 2, "command": record}])
    done = fuxi.submit(path, "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = done.stdout.split()[1]
    assert done.stdout.startswith(f"submitted {job_id} (two-units)")
    assert f"{job_id} succeeded: 7/7 instances done" in done.stdout
    assert "/7 done" in done.stdout.splitlines()[1]               # a progress line
    lines = sorted(ran.read_text().splitlines())
    expected = sorted([f"{job_id} map {i} {i}" for i in range(5)] + [f"{job_id} reduce {i} {i}" for i in range(2)])
    assert lines == expected                                      # each instance ran exactly once
    job = fuxi.status(job_id)["jobs"][0]
    assert job["state"] == "succeeded" and job["instances"]["failed"] == 0
    assert job["instances"]["done"] == 7
    wait_for(lambda: not fuxi.status(job_id)["jobs"][0]["appmaster"]["running"], 10, "the AppMaster to exit")

    # its workers ended as they really did: released by the AppMaster, they exited (not killed: issue 25)
    def ended() -> dict | None:
        framework = fuxi.cluster.framework("fuxi")
        if any(t["id"].startswith(f"{job_id}.") for t in framework["tasks"]):
            return None
        return {t["id"]: t["state"] for t in framework["completed_tasks"] if t["id"].startswith(f"{job_id}.")}
    states = wait_for(ended, 20, "the job's worker tasks to end", diagnostics=fuxi.cluster.diagnostics)
    assert states and set(states.values()) == {"TASK_FINISHED"}, states


def test_a_bad_field_exits_2_naming_it_and_sends_nothing(fuxi, tmp_path):
    before = len(fuxi.status()["jobs"])
    path = job_file(tmp_path / "bad.toml", "bad", [{"name": "u", "slots": 0, "command": "true"}])
    done = fuxi.submit(path)
    assert done.returncode == 2
    assert "job.units[0].slots" in done.stderr and "must be an integer >= 1" in done.stderr
    path.write_text(path.read_text().replace("slots = 0", "slots = 1\ncolour = 'red'"))
    done = fuxi.submit(path)
    assert done.returncode == 2 and "job.units[0]" in done.stderr and "'colour'" in done.stderr
    assert len(fuxi.status()["jobs"]) == before


def test_an_unknown_quota_group_is_a_clear_error(fuxi, tmp_path):
    path = job_file(tmp_path / "job.toml", "q", [{"name": "u", "slots": 1, "command": "true"}], group="nope")
    done = fuxi.submit(path, "--wait")
    assert done.returncode == 1
    assert "unknown quota group 'nope'" in done.stderr and "default, small" in done.stderr
    assert "submitted" not in done.stdout


@pytest.mark.timeout(120)
def test_status_shows_desired_granted_hosts_and_why_a_unit_waits(fuxi, tmp_path):
    spread = job_file(tmp_path / "spread.toml", "spread", [
        {"name": "spread", "slots": 2, "instances": 2, "command": "sleep 8", "extra": "max_per_machine = 1"},
        {"name": "huge", "slots": 1, "cpus": 64, "command": "true"}])
    small = job_file(tmp_path / "small.toml", "small", [
        {"name": "capped", "slots": 3, "command": "sleep 8"}], group="small")
    ids = []
    for path in (spread, small):
        done = fuxi.submit(path)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.split()[1])

    def granted():
        jobs = {j["id"]: j for j in fuxi.status()["jobs"]}
        units = {u["name"]: u for j in ids for u in jobs[j]["units"]}
        return units if units["spread"]["granted"] == 2 and units["capped"]["granted"] == 2 else None
    units = wait_for(granted, 30, "the slots to be granted", diagnostics=fuxi.cluster.diagnostics)
    assert units["spread"]["hosts"] == {"node-0": 1, "node-1": 1}
    # fits no machine, even an empty one
    assert units["huge"]["why_waiting"] == "no machine can ever fit" and units["huge"]["granted"] == 0
    assert units["capped"]["desired"] == 3 and units["capped"]["why_waiting"] == "quota"

    shown = fuxi.cli("status", "--fuxi", fuxi.address, ids[0])
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line.split() for line in shown.stdout.splitlines() if line.startswith("  ")}
    assert rows["unit"][:5] == ["unit", "slot", "desired", "granted", "hosts"]
    assert rows["spread"][2:5] == ["2", "2", "node-0:1,node-1:1"]
    assert rows["spread"][5] == "0/2" and rows["huge"][2:4] == ["1", "0"]
    assert units["huge"]["why_waiting"] in shown.stdout and f"{ids[0]} spread (by client): running" in shown.stdout
    everything = fuxi.cli("status", "--fuxi", fuxi.address, "--json")
    document = json.loads(everything.stdout)
    assert {ids[0], ids[1]} <= {j["id"] for j in document["jobs"]}
    assert {g["name"] for g in document["quota_groups"]} == {"default", "small"}
    missing = fuxi.cli("status", "--fuxi", fuxi.address, "job-4242")
    assert missing.returncode == 1 and "unknown job 'job-4242'" in missing.stderr


@pytest.mark.timeout(120)
def test_an_instance_that_always_fails_fails_the_job(fuxi, tmp_path):
    path = job_file(tmp_path / "fail.toml", "failing", [
        {"name": "fine", "slots": 1, "command": "sleep 30"},
        {"name": "broken", "slots": 1, "command": "no-such-command-fuxi {instance}"}])
    done = fuxi.submit(path, "--wait")
    assert done.returncode == 1, done.stdout + done.stderr
    job_id = done.stdout.split()[1]
    assert f"{job_id} failed: instance 0 of unit broken failed 3 times" in done.stderr
    assert "status 127" in done.stderr and "not found" in done.stderr   # the shell could not find the command
    job = fuxi.status(job_id)["jobs"][0]
    assert job["state"] == "failed" and job["instances"]["failed"] == 3
    broken = next(u for u in job["units"] if u["name"] == "broken")
    assert broken["instances"]["failed"] == 3

    def fine_task_gone():
        tasks = [t for f in fuxi.cluster.state()["frameworks"] if f["name"] == "fuxi" for t in f["tasks"]]
        return not any(t["name"].startswith("failing.") and t["state"] not in TERMINAL_STATES for t in tasks)
    fuxi.cluster.wait_until(fine_task_gone, 20, "the failed job's other task to be killed")


def test_an_anonymous_submission_is_refused_with_a_clear_error(fuxi, tmp_path):
    # issue 13: "the Fuxi service refuses anonymous submissions"
    before = len(fuxi.status()["jobs"])
    path = job_file(tmp_path / "job.toml", "anonymous", [{"name": "u", "slots": 1, "command": "true"}])
    start = time.monotonic()
    done = fuxi.cli("submit", "--fuxi", fuxi.address, "--timeout", "20", str(path), env=child_env())
    assert done.returncode == 1 and "takes no anonymous clients" in done.stderr, done.stderr
    assert time.monotonic() - start < 15        # refused at the handshake, not a timeout
    assert "submitted" not in done.stdout and len(fuxi.status()["jobs"]) == before
    # a key of the cluster without the service's public certificate is a usage error, before sending anything
    done = fuxi.cli("submit", "--fuxi", fuxi.address, str(path), env=fuxi.cluster.client_env())
    assert done.returncode == 1 and "--key needs --fuxi-key (or MESOSLIKE_FUXI_KEY)" in done.stderr


def test_serve_refuses_a_bad_quota_file(tmp_path):
    path = tmp_path / "quota.toml"
    path.write_text("[quota.a]\ncpus = -1\n")
    done = subprocess.run([sys.executable, "-m", "mesoslike", "fuxi", "serve", "--master", "tcp://127.0.0.1:1",
                           "--quota", str(path)], cwd=REPO, env=child_env(), capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2 and "quota.a.cpus" in done.stderr


def test_submit_to_nobody_says_so_quickly(tmp_path):
    path = job_file(tmp_path / "job.toml", "j", [{"name": "u", "slots": 1, "command": "true"}])
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mesoslike", "fuxi", "submit", "--fuxi",
                           f"tcp://127.0.0.1:{free_port()}", "--timeout", "1", str(path)], cwd=REPO,
                          env=child_env(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "no answer from a Fuxi service" in done.stderr
    assert time.monotonic() - start < 20


def test_grants_and_revocations_reach_the_jobs_appmaster_on_its_connection():
    """FuxiMaster tells an AppMaster of its grants (seed 002): the service
    sends SLOT_GRANTED and SLOT_REVOKED, unasked, on the connection the
    AppMaster's accepted requests came over — not to another job's."""
    service, driver = make_service(preemption=True)
    server = JobServer(service, "tcp://127.0.0.1:0").start()
    low = service.submit(JobSpec("low", [unit(slots=4, instances=4)], priority=500))
    other = service.submit(JobSpec("other", [unit(slots=1, instances=1)], priority=400))
    clients = {job_id: Client(server.address, codec=protocol.CODEC) for job_id in (low, other)}
    news: dict[str, list] = {low: [], other: []}

    def hear(job_id: str, until) -> None:
        client = clients[job_id]

        def heard():
            for _, frame in client.receive_frames():
                news[job_id].append(protocol.decode(frame))
            return until(news[job_id])
        wait_for(heard, 10, f"news for {job_id}")

    try:
        for job_id, client in clients.items():   # an accepted request names the AppMaster's connection
            client.send(protocol.Progress(1, job_id, service.core.job(job_id).token, {}))
            client.flush()
            hear(job_id, lambda heard: any(isinstance(m, protocol.Ok) for m in heard))
        service.resource_offers(driver, [offer("h1", res="cpus:5;mem:4096", room="er1")])
        granted = [task.task_id for task in driver.launched() if task.environment["FUXI_JOB_ID"] == low]
        hear(low, lambda heard: sum(isinstance(m, protocol.SlotGranted) for m in heard) == 4)
        assert sorted(m.slot for m in news[low] if isinstance(m, protocol.SlotGranted)) == sorted(granted)
        assert {(m.job_id, m.unit, m.hostname, m.room) for m in news[low]
                if isinstance(m, protocol.SlotGranted)} == {(low, "u", "h1", "er1")}
        urgent = service.submit(JobSpec("urgent", [unit(slots=1, instances=1)], priority=10))
        service.resource_offers(driver, [])          # a pass: the urgent unit preempts one of low's slots
        (killed,) = [call[1] for call in driver.take("kill")]
        hear(low, lambda heard: any(isinstance(m, protocol.SlotRevoked) for m in heard))
        (revoked,) = [m for m in news[low] if isinstance(m, protocol.SlotRevoked)]
        assert revoked.slot == killed and "preempted by a higher priority unit" in revoked.reason and urgent
        hear(other, lambda heard: any(isinstance(m, protocol.SlotGranted) for m in heard))
        assert {m.job_id for m in news[other] if not isinstance(m, protocol.Ok)} == {other}   # nothing of low's
    finally:
        for client in clients.values():
            client.close()
        server.stop()
