"""The Fuxi service authenticated (issue 13, docs/security.rst "The Fuxi
service"), over real sockets: a job server with the credentials of a secured
cluster, job clients with their keys, a real AppMaster process with its
job's key pair and a real worker process with the keys its task is given.

- anonymous clients, and keys the credentials do not list, are refused at
  the handshake, with a clear error, before anything is submitted;
- a principal may submit what ``submit_jobs`` allows, and kill only its own
  jobs unless ``kill_jobs`` allows it (operators);
- an AppMaster speaks only for its own job; its port lets in only its
  job's workers; the job's secrets stay out of ``status``, logs and the
  instances' environment.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e_helpers import child_env, free_port, wait_for
from mesoslike.clock import FakeClock
from mesoslike.credentials import load_credentials
from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.core import FuxiCore, FuxiError
from mesoslike_frameworks.fuxi.model import JobSpec, UnitSpec
from mesoslike_frameworks.fuxi.service import WORKER_MODULE, FuxiService, JobClient, JobKeys, JobRefused, JobServer
from mesoslike.resources import Resources
from mesoslike.transport import Client, CurveKeys, load_public_key, new_certificate
from security_helpers import SecuredKeys
from test_fuxi_service import FakeDriver, offer, worker_secret

pytestmark = pytest.mark.timeout(60)


def document(name: str = "j", group: str = "default", instances: int = 0, command: str = "true") -> dict:
    return {"job": {"name": name, "quota_group": group, "units": [
        {"name": "u", "slots": 1, "cpus": 1, "mem": 10, "instances": instances, "command": command}]}}


class Secured:
    """A Fuxi service whose job server serves with the ``fuxi`` key pair and
    the credentials of :class:`SecuredKeys` (frameworks fwA and fwB, agents,
    the operator ops), or ``credentials`` given; clients as any principal."""

    def __init__(self, tmp: Path, credentials: str = "", launch: bool = False, groups: dict | None = None) -> None:
        self.keys = SecuredKeys(tmp)
        new_certificate(str(self.keys.dir), "fuxi")
        self.public = load_public_key(self.keys.public("fuxi"))
        path = self.keys.credentials
        if credentials:   # a credentials file of its own (key paths relative to ``tmp``)
            path = tmp / "fuxi-credentials.toml"
            path.write_text(credentials)
        self.credentials = load_credentials(str(path))
        self.driver = FakeDriver()
        self.service = FuxiService(FuxiCore(groups, clock=FakeClock()), launch_appmasters=launch,
                                   work_dir=tmp / "fuxi-work", credentials=self.credentials, service_key=self.public)
        self.service.attach(self.driver)
        self.server = JobServer(self.service, "tcp://127.0.0.1:0", keys=self.keys.keys("fuxi"),
                                credentials=self.credentials).start()

    def client(self, name: str | None, *, timeout: float = 5.0, **keys) -> JobClient:
        """A job client as principal ``name`` (None: no key of its own)."""
        if name is not None:
            keys = {"keys": self.keys.keys(name), "server_key": self.public}
        return JobClient(self.server.address, timeout, **keys)

    def close(self) -> None:
        self.server.stop()
        self.service.stop()


@pytest.fixture
def secured(tmp_path):
    service = Secured(tmp_path)
    try:
        yield service
    finally:
        service.close()


def test_anonymous_and_unlisted_clients_are_refused_at_the_handshake(secured):
    cases = [({}, "takes no anonymous clients (submissions included); give --key (a principal"),
             ({"server_key": secured.public}, "takes no anonymous clients (submissions included); give --key too"),
             ({"keys": CurveKeys.generate(), "server_key": secured.public}, "our key is not in its credentials"),
             # a listed key, but the client believes another server's key: it is not the service it trusts
             ({"keys": secured.keys.keys("fwA"), "server_key": CurveKeys.generate().public},
              "our key is not in its credentials, or it is not the service")]
    for keys, message in cases:
        started = time.monotonic()
        with secured.client(None, timeout=20, **keys) as client, pytest.raises(JobRefused, match=re.escape(message)):
            client.submit(document())
        assert time.monotonic() - started < 10, "refused at the handshake, not after the timeout"
    assert secured.service.status()["jobs"] == []
    # and the service itself takes no job without a principal
    with pytest.raises(FuxiError, match="anonymous submissions are refused"):
        secured.service.submit(document())


def test_only_principals_the_acl_allows_submit_and_a_job_is_its_submitters(secured):
    with secured.client("agent1") as agent:
        with pytest.raises(JobRefused, match="principal agent1 lacks the submit_jobs permission quota_group "
                                             "'default'"):
            agent.submit(document())
        assert agent.status()["jobs"] == []          # reading the status is every listed principal's
    with secured.client("fwA") as client:
        job_id = client.submit(document())
        assert client.status(job_id)["jobs"][0]["principal"] == "fwA"


def test_a_submit_jobs_rule_names_principals_and_quota_groups(tmp_path):
    credentials = ('[principals.fwA]\nkey = "keys/fwA.key"\nkinds = ["framework"]\n'
                   '[principals.fwB]\nkey = "keys/fwB.key"\nkinds = ["framework"]\n'
                   '[[acls.submit_jobs]]\nprincipals = ["fwA"]\nquota_groups = ["default"]\n')
    secured = Secured(tmp_path, credentials, groups={"default": None, "batch": None})
    try:
        with secured.client("fwA") as client:
            assert client.submit(document())
            with pytest.raises(JobRefused, match="principal fwA lacks the submit_jobs permission quota_group "
                                                 "'batch'"):
                client.submit(document(group="batch"))
        with secured.client("fwB") as client, pytest.raises(JobRefused, match="fwB lacks the submit_jobs"):
            client.submit(document())
    finally:
        secured.close()


def test_a_principal_cannot_kill_another_principals_job_an_operator_can(secured):
    with secured.client("fwA") as alice, secured.client("fwB") as bob, secured.client("ops") as ops:
        first, second = alice.submit(document()), alice.submit(document())
        with pytest.raises(JobRefused, match=f"principal fwB lacks the kill_jobs permission, and {first} is "
                                             "fwA's"):
            bob.kill(first)
        assert alice.status(first)["jobs"][0]["state"] == "running"
        ops.kill(first)                    # an operator may (kill_jobs: operators when the file has no rule)
        alice.kill(second)                 # one's own
        assert [job["state"] for job in alice.status()["jobs"]] == ["killed", "killed"]


@pytest.fixture
def running(tmp_path):
    """A service that launches real AppMaster processes (two jobs of fwA: one
    instance that records its environment, one that sleeps) and the slot's
    task the first job was given."""
    secured = Secured(tmp_path, launch=True)
    try:
        with secured.client("fwA") as client:
            env_file = tmp_path / "instance-env.txt"
            recorded = client.submit(document("recorded", instances=1, command=f"env > {env_file}"))
            other = client.submit(document("other", instances=1, command="sleep 30"))
        secured.service.resource_offers(secured.driver, [offer("h1")])
        tasks = {task.task_id.split(".")[0]: task for task in secured.driver.launched()}
        yield secured, recorded, other, tasks, env_file
    finally:
        secured.close()


def appmaster_of(secured: Secured, job_id: str) -> tuple[str, bytes]:
    """(address, public key) of the job's AppMaster, once it reported to the service with its job key."""
    wait_for(lambda: secured.service.core.job(job_id).report is not None, 20,
             f"the AppMaster of {job_id} to report (over the authenticated job server)",
             diagnostics=lambda: (secured.service.work_dir / job_id / "appmaster.log").read_text())
    return secured.service.appmasters[job_id].address, secured.service.job_keys[job_id].appmaster.public


def test_an_appmaster_speaks_for_its_own_job_only(running):
    secured, recorded, other, _, _ = running
    appmaster_of(secured, recorded)
    job_dir = secured.service.work_dir / recorded
    for name in ("appmaster", "worker"):
        assert stat.S_IMODE(os.stat(job_dir / f"{name}.key_secret").st_mode) == 0o600
    token_of_other = secured.service.core.job(other).token
    as_recorded = {"keys": CurveKeys.load(str(job_dir / "appmaster.key_secret")), "server_key": secured.public}
    with secured.client(None, **as_recorded) as impostor:
        with pytest.raises(JobRefused, match=f"not authorized: SET_DESIRE for job {other} from principal "
                                             f"appmaster/{recorded}"):
            impostor._ask(protocol.SetDesire(1, other, token_of_other, "u", 0))
        with pytest.raises(JobRefused, match="an AppMaster's key, which submits no jobs"):
            impostor.submit(document())
    with secured.client("fwA") as owner, pytest.raises(JobRefused, match="only that job's AppMaster"):
        owner._ask(protocol.JobEnded(1, other, token_of_other, True, "forged"))
    assert secured.service.core.job(other).state.value == "running"


def hello_refused(client: Client, hello: amp.Hello) -> list:
    """Send a HELLO and wait until the handshake with the AppMaster has
    failed; what arrived until then. Nothing can arrive after: without a
    handshake no frame passes, and one that succeeded after all is counted
    (``stats.reconnects``)."""
    client.send(hello)
    got: list = []

    def failed() -> int:
        if client.wait(0.05):
            got.extend(message for _, message in client.receive())
        return client.stats.handshakes_failed

    wait_for(failed, 10, "the handshake to fail")
    assert client.stats.reconnects == 0, "a handshake succeeded after all"
    return got


def test_an_appmaster_lets_in_only_its_jobs_workers_and_its_secrets_stay_out_of_sight(running, tmp_path):
    secured, recorded, other, tasks, env_file = running
    address, appmaster_key = appmaster_of(secured, recorded)
    environment = tasks[recorded].environment
    slot = tasks[recorded].task_id
    token = worker_secret(tasks[recorded], "FUXI_WORKER_TOKEN_FILE").decode()
    secret = worker_secret(tasks[recorded], "FUXI_WORKER_SECRET_KEY_FILE").decode()
    assert token not in str(environment) and secret not in str(environment)
    hello = amp.Hello(slot, "u", "h1", token=token)
    other_dir = secured.service.work_dir / other
    strangers = {"no key": {}, "a one-time key": {"server_key": appmaster_key},
                 "a key of its own": {"keys": CurveKeys.generate(), "server_key": appmaster_key},
                 "another job's worker key": {"keys": CurveKeys.load(str(other_dir / "worker.key_secret")),
                                              "server_key": appmaster_key}}
    for what, keys in strangers.items():
        with Client(address, codec=amp.CODEC, identity=f"stranger-{len(what)}".encode(), **keys) as stranger:
            assert hello_refused(stranger, hello) == [], f"the AppMaster answered a peer with {what}"

    # the slot's real worker, with the environment and the secret files its task was given (as its agent
    # writes them: docs/containers.rst "Secrets"): welcomed, runs the instance
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    for volume in tasks[recorded].container.volumes:
        (sandbox / volume.container_path).write_bytes(volume.source.secret.value)
        os.chmod(sandbox / volume.container_path, 0o400)
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", WORKER_MODULE], cwd=sandbox,
                                  env={**child_env(), **environment}, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        wait_for(lambda: secured.service.core.job(recorded).state.value == "succeeded", 30,
                 "the job to succeed through its authenticated worker",
                 diagnostics=lambda: (tmp_path / "worker.log").read_text() + (
                     secured.service.work_dir / recorded / "appmaster.log").read_text())
    finally:
        worker.kill()
        worker.wait(10)
    # the secrets: not in the instance's environment nor its sandbox (the worker took its files away),
    # status, or the AppMaster's and worker's logs
    instance_environment = env_file.read_text()
    assert secret not in instance_environment and token not in instance_environment
    assert [p.name for p in sandbox.iterdir() if p.name.startswith(".fuxi")] == []
    assert f"FUXI_JOB_ID={recorded}" in instance_environment        # the rest of its place it keeps
    keys = secured.service.job_keys[recorded]
    shown = json.dumps(secured.service.status())
    logs = (secured.service.work_dir / recorded / "appmaster.log").read_text() + (tmp_path / "worker.log").read_text()
    for value in (secret, keys.appmaster.secret.decode()):
        assert value not in shown and value not in logs
    # the job ended: its secret key files are gone (its AppMaster never starts again)
    assert not (secured.service.work_dir / recorded / "appmaster.key_secret").exists()
    assert not (secured.service.work_dir / recorded / "worker.key_secret").exists()


def test_a_just_elected_service_lets_in_the_appmasters_of_running_jobs_before_it_serves(tmp_path):
    """A new leader knew its jobs' AppMaster keys only once it had loaded the
    jobs, and the AppMasters, which follow the leader, reconnected before
    that: every handshake refused with a warning ("key ... is not listed")
    and retried. Now their keys are read from the shared work dir."""
    keys = SecuredKeys(tmp_path)
    new_certificate(str(keys.dir), "fuxi")
    work = tmp_path / "work"
    running, ended = JobKeys.of(work / "job-0001"), JobKeys.of(work / "job-0002")
    ended.forget_secrets()
    server = JobServer(None, "tcp://127.0.0.1:0", keys=keys.keys("fuxi"),
                       credentials=load_credentials(str(keys.credentials)), work_dir=work).start()
    server.hold()
    public = load_public_key(keys.public("fuxi"))
    try:
        with JobClient(server.address, 5, keys=running.appmaster, server_key=public) as appmaster:
            appmaster._client.send(protocol.Status(1, ""))
            wait_for(lambda: server.counters["held"] == 1, 10, "the AppMaster's request to be held")
        with JobClient(server.address, 5, keys=ended.appmaster, server_key=public) as gone, \
                pytest.raises(JobRefused, match="our key is not in its credentials"):
            gone.status()
    finally:
        server.stop()


def test_serve_without_credentials_binds_loopback_only_and_credentials_need_a_key(tmp_path):
    keys = SecuredKeys(tmp_path)
    serve = [sys.executable, "-m", "mesoslike", "fuxi", "serve", "--master", "tcp://127.0.0.1:1", "--port", "0"]
    done = subprocess.run([*serve, "--ip", "0.0.0.0"], env=child_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "refusing to serve jobs on 0.0.0.0 without --credentials" in done.stderr
    done = subprocess.run([*serve, "--credentials", str(keys.credentials)], env=child_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "needs --key" in done.stderr, done.stderr


@pytest.mark.timeout(150)
def test_mesoslike_local_runs_the_service_and_its_clients_authenticated_with_no_flag(tmp_path):
    # issue 13 §8: `mesoslike local -- COMMAND` gives COMMAND what it needs, the Fuxi service and its clients too
    port = free_port()
    fuxi = f"tcp://127.0.0.1:{port}"
    job = tmp_path / "job.toml"
    job.write_text('[job]\nname = "local"\n[[job.units]]\nname = "u"\nslots = 1\ncpus = 0.1\nmem = 32\n'
                   'instances = 2\ncommand = "true"\n')
    cli = f"{sys.executable} -m mesoslike fuxi"
    script = f"""
{cli} serve --master "$MESOSLIKE_MASTER" --port {port} --work-dir {tmp_path}/fuxi > {tmp_path}/serve.log 2>&1 &
serve=$!
for i in $(seq 150); do {cli} status --fuxi {fuxi} --timeout 1 > /dev/null 2>&1 && break; sleep 0.2; done
env -u MESOSLIKE_KEY -u MESOSLIKE_FUXI_KEY {cli} status --fuxi {fuxi} --timeout 5 2> {tmp_path}/anonymous.txt
{cli} submit --fuxi {fuxi} --wait --interval 0.2 {job}
status=$?
kill $serve; wait $serve
exit $status
"""
    done = subprocess.run([sys.executable, "-m", "mesoslike", "local", "--agents", "1", "--port", "0", "--http-port",
                           "0", "--work-dir", str(tmp_path / "cluster"), "--", "sh", "-c", script], cwd=tmp_path,
                          env=child_env(), capture_output=True, text=True, timeout=120)
    serve_log = (tmp_path / "serve.log").read_text()
    assert done.returncode == 0, done.stdout + done.stderr + serve_log
    assert "succeeded: 2/2 instances done" in done.stdout
    assert "; job clients authenticated" in serve_log
    assert "takes no anonymous clients" in (tmp_path / "anonymous.txt").read_text()


def test_the_appmaster_command_takes_keys_that_begin_with_a_dash(tmp_path, monkeypatch):
    # found as a bug: a z85 key may begin with "-", and `--worker-key -x...` was an argument error (exit 2):
    # one job in ~40 failed with its AppMaster exiting 11 times
    dashed = next(keys for keys in iter(CurveKeys.generate, None) if keys.public.startswith(b"-"))
    service_key = next(keys for keys in iter(CurveKeys.generate, None) if keys.public.startswith(b"-")).public
    made = JobKeys(tmp_path / "job-0001", dashed, dashed)
    monkeypatch.setattr(JobKeys, "of", classmethod(lambda cls, directory: made))
    service = FuxiService(FuxiCore(clock=FakeClock()), work_dir=tmp_path, service_key=service_key)
    command = service._appmaster_process("job-0001", document(), "token").command
    # the AppMaster gets past its arguments and stops at the first thing that is missing: the job file
    (tmp_path / "job-0001" / "job.json").unlink()
    done = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "cannot start" in done.stderr and "expected one argument" not in done.stderr, \
        done.stderr


def test_a_jobs_workers_run_as_the_unix_user_of_its_principal(tmp_path):
    credentials = ('[principals.fwA]\nkey = "keys/fwA.key"\nkinds = ["framework"]\nuser = "alice"\n'
                   '[principals.fwB]\nkey = "keys/fwB.key"\nkinds = ["framework"]\n')
    secured = Secured(tmp_path, credentials)
    try:
        jobs = {}
        for principal in ("fwA", "fwB"):
            with secured.client(principal) as client:
                jobs[principal] = client.submit(document(f"job-of-{principal}", instances=1))
        secured.service.resource_offers(secured.driver, [offer("h1"), offer("h2")])
        users = {task.environment["FUXI_JOB_ID"]: task.user for task in secured.driver.launched()}
        # its user in the credentials, else its own name (as YARN runs a job as its submitter): never one
        # user for all jobs, so that no job's instances read another's processes or files
        assert users == {jobs["fwA"]: "alice", jobs["fwB"]: "fwB"}
    finally:
        secured.close()


def test_the_kept_jobs_holding_tokens_are_private_files(tmp_path):
    from mesoslike_frameworks.fuxi.state_store import FileRecordStore

    store = FileRecordStore(tmp_path / "state")
    store.write({"job.j-1": b"token-bearing record"})
    assert stat.S_IMODE(os.stat(tmp_path / "state" / "job.j-1").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    store.close()
