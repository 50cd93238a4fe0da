"""A job client and the CLI's master client following a ``zk://`` leader
that dies of a ``kill -9`` while our connection waits in its listen
backlog (CI run 81: ``mesoslike fuxi status --wait`` exited 1 with "refused
the connection: our key is not in its credentials" though the job and a
standby were alive). The handshake is cut (ZeroMQ's
HANDSHAKE_FAILED_NO_DETAIL, ECONNRESET — or EPIPE when the client was writing
its greeting as the peer died, as in CI run 95): not a refusal; the client waits
for the next leader ZooKeeper names and gets its answer there. Real
sockets, a real ZooKeeper, a real process killed; a wrong key is still
refused at once (tests/test_fuxi_security.py, tests/test_run_first_day.py).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from typing import Any, Callable

import pytest

from mesoslike.cli.master_client import fetch_state
from mesoslike.ha.url import ZkUrl
from mesoslike.ha.zookeeper import MasterContender
from mesoslike.transport import Authenticator, CurveKeys, Server, load_public_key, new_certificate
from mesoslike.wire import messages as m
from mesoslike_frameworks.fuxi.client import JobClient
from test_fuxi_security import Secured
from tests.test_transport_handshakes import KILLED_SERVER
from tests.waiting import wait_until
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(90)

_paths = itertools.count(1)


class DyingLeader:
    """A process whose listener takes one connection and reads nothing, named
    the leader in ZooKeeper; :meth:`kill` is its ``kill -9``; then a standby
    at ``standby_address`` is elected (the dead one's ZooKeeper session gone)."""

    def __init__(self, url: str) -> None:
        self.text, self.url = url, ZkUrl.parse(url)
        self.process = subprocess.Popen([sys.executable, "-c", KILLED_SERVER], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.address = f"tcp://127.0.0.1:{int(self.process.stdout.readline())}"
        self.contenders: list[MasterContender] = []
        self.leader = self.contend(self.address)
        wait_until(lambda: self.leader.is_leader, 20, "the dying leader to be elected")

    def contend(self, address: str) -> MasterContender:
        contender = MasterContender(self.url, {"address": address, "id": f"m{len(self.contenders)}"},
                                    on_elected=lambda: None, on_demoted=lambda reason: None, warn_unverified=False)
        contender.start()
        self.contenders.append(contender)
        return contender

    def kill_once_connected(self, caplog, standby_address: str) -> None:
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "accepted", "the client never reached the leader"
        self.process.kill()
        self.process.wait(10)
        # which errno the kernel gives depends on whether the client was reading or writing when the peer died
        wait_until(lambda: any(f"was cut (NO_DETAIL {errno})" in caplog.text for errno in ("ECONNRESET", "EPIPE")),
                   20, "the handshake to be cut",
                   diagnostics=lambda: caplog.text)
        self.leader.stop()
        standby = self.contend(standby_address)
        wait_until(lambda: standby.is_leader, 20, "the standby to be elected")

    def close(self) -> None:
        for contender in self.contenders:
            contender.stop()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def dying(zookeeper):  # noqa: F811
    leader = DyingLeader(zookeeper.url(f"/mesoslike-test/handshake{next(_paths)}"))
    try:
        yield leader
    finally:
        leader.close()


def refusals(caplog) -> list[str]:
    """The transport's errors logged (a refused handshake is one)."""
    return [r.getMessage() for r in caplog.records if r.name == "mesoslike.transport" and r.levelname == "ERROR"]


def in_thread(ask: Callable[[], Any]) -> tuple[threading.Thread, dict]:
    """Run ``ask`` in a thread (it makes and polls its own sockets); its result or error."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["answer"] = ask()
        except Exception as exc:   # the test shows it
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_job_client_following_zk_gets_its_answer_across_a_leader_killed_mid_handshake(dying, tmp_path, caplog):
    secured = Secured(tmp_path)
    try:
        def ask() -> tuple[dict, str]:
            with JobClient(dying.text, 30, keys=secured.keys.keys("fwA"),
                           server_key=secured.public) as client:
                return client.status(), client.address

        thread, outcome = in_thread(ask)
        dying.kill_once_connected(caplog, secured.server.address)
        thread.join(40)
        assert "error" not in outcome, (outcome, caplog.text)
        document, address = outcome["answer"]
        assert document["jobs"] == [] and address == secured.server.address
        assert refusals(caplog) == [], caplog.text
    finally:
        secured.close()


def test_the_cli_master_client_following_zk_gets_the_state_across_a_leader_killed_mid_handshake(
        dying, tmp_path, caplog):
    public, secret = new_certificate(str(tmp_path), "client")
    master_public, master_secret = new_certificate(str(tmp_path), "master")
    with Server("tcp://127.0.0.1:0", keys=CurveKeys.load(master_secret),
                authenticator=Authenticator({load_public_key(public): "client"})) as standby:
        thread, outcome = in_thread(lambda: fetch_state(dying.text, 30,
                                                        key=secret, master_key=master_public))
        dying.kill_once_connected(caplog, standby.address)
        peer = wait_until(lambda: next((p for p, message in standby.receive() if isinstance(message, m.GetState)),
                                       None) if standby.wait(0.1) else None, 30, "the standby to be asked")
        standby.send(peer, m.StateReply(json.dumps({"is_leader": True, "agents": []})))
        thread.join(30)
        assert outcome.get("answer") == {"is_leader": True, "agents": []}, (outcome, caplog.text)
        assert refusals(caplog) == [], caplog.text
