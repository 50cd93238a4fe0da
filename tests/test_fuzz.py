"""Fuzzing the master and an agent (issue 12 §4; docs/reliability.rst).

Seeded and bounded: a few thousand hostile frames (tests/fuzz_helpers.py:
random bytes, truncated frames, wrong-typed fields, huge numbers, hostile
resources, long strings, oversize frames, and valid messages between them)
go to a master process, and to an agent process through a fake master. Then
each must still be running, serve for real — a framework's tasks on a real
agent finish; the agent runs a task it is sent — and its memory must have
stayed bounded (RSS before and after)."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest

from e2e_helpers import ProcessSet, cluster  # noqa: F401  (the cluster fixture)
from fuzz_helpers import hostile_frames, oversize_frame
from mesoslike.resources import Resources
from mesoslike.transport import Client, Server
from mesoslike.wire import FrameworkInfo, MasterInfo, TaskInfo
from mesoslike.wire import messages as m
from stress_helpers import CountingScheduler, metrics, rss_kib
from test_wire import EXAMPLES
from waiting import wait_until

pytestmark = pytest.mark.timeout(240)

SEED = 20240612
#: the most a process's resident memory may grow over a fuzz run
RSS_GROWTH_LIMIT_KIB = 64 * 1024


def test_the_master_survives_hostile_frames_and_still_serves_a_framework(cluster):  # noqa: F811
    cluster.start_master()
    pid = cluster.master.pid
    rss_before = rss_kib(pid)
    rng = random.Random(SEED)
    count = 3000
    kinds: Counter[str] = Counter()
    clients = [Client(cluster.address, **cluster.peer_keys()) for _ in range(4)]
    try:
        for i, (kind, frame) in enumerate(hostile_frames(rng, EXAMPLES, count)):
            kinds[kind] += 1
            assert clients[i % len(clients)].send_frame(frame)
            if i % 100 == 99:   # read the answers, as a peer would (they are not looked at)
                for client in clients:
                    client.wait(0.0)
                    list(client.receive_frames())
        with Client(cluster.address, **cluster.peer_keys()) as big:                      # ZeroMQ drops this connection
            for _ in range(2):
                big.send_frame(oversize_frame())
            big.wait(1.0)

        def handled():   # every frame decoded and handled, or answered as bad
            values = metrics(cluster.http)
            return values["mesoslike_messages_received_total"] + values["mesoslike_bad_messages_total"] >= count
        cluster.wait_until(handled, 120, f"the master to handle the {count} frames")
        for client in clients:
            client.wait(0.0)
            list(client.receive_frames())
    finally:
        for client in clients:
            client.close()
    figures = metrics(cluster.http)
    assert cluster.master.running()

    # it still serves: a real framework's tasks finish on a real agent
    cluster.start_agent("real", "cpus:2;mem:512")
    scheduler = CountingScheduler(20, "cpus:0.1;mem:16", hostname="real")
    cluster.driver(scheduler, "after-the-fuzz")
    wait_until(scheduler.finished, 60, "20 tasks of a real framework to end", diagnostics=cluster.diagnostics)
    result = scheduler.figures()
    assert result["terminal_states"] == {"TASK_FINISHED": 20} and result["duplicate_uuids"] == 0
    rss_after = rss_kib(pid)
    print(json.dumps({"fuzz": "master", "seed": SEED, "frames": count + 2, "kinds": dict(kinds),
                      "bad_frames": figures["mesoslike_bad_messages_total"],
                      "handled": figures["mesoslike_messages_received_total"], "crashes": 0,
                      "rss_kib_before": rss_before, "rss_kib_after": rss_after}))
    assert cluster.master.running()
    assert rss_after - rss_before < RSS_GROWTH_LIMIT_KIB, (rss_before, rss_after)


# ---------------------------------------------------------------- an agent
def agent_examples(agent_id: str) -> list[object]:
    """What a master sends an agent, and some it never should (they are
    ignored). SHUTDOWN_AGENT is left out: it makes the agent wait seconds
    for its tasks before it registers again, and the fuzz would mostly test
    that wait."""
    return [example for example in EXAMPLES if not isinstance(example, m.ShutdownAgent)] + [
        m.RunTask(FrameworkInfo("fuzz", id="fz-fw"), TaskInfo("fz", agent_id, "true", Resources.parse("cpus:0.1"))),
    ]


class FakeMaster:
    """Answers an agent's registrations, acknowledges its updates, and
    remembers what it said."""

    def __init__(self) -> None:
        self.server = Server("tcp://127.0.0.1:0")
        self.address = self.server.address
        self.peer: bytes | None = None
        self.agent_id = "fz-agent"
        self.seen: list[object] = []

    def serve(self, timeout: float = 0.0) -> None:
        self.server.wait(timeout)
        for peer, message in self.server.receive():
            if peer is None or isinstance(message, Exception):
                continue
            self.peer = peer
            self.seen.append(message)
            if isinstance(message, (m.RegisterAgent, m.ReregisterAgent)):
                self.server.send(peer, m.AgentRegistered(self.agent_id, MasterInfo("fake", self.address), 5.0))
            elif isinstance(message, m.StatusUpdate) and message.status.uuid:
                self.server.send(peer, m.StatusUpdateAck(self.agent_id, message.framework_id,
                                                         message.status.task_id, message.status.uuid))

    def wait_for(self, what, timeout: float, poke=None):
        deadline = time.monotonic() + timeout
        next_poke = 0.0
        while time.monotonic() < deadline:
            if poke is not None and self.peer is not None and time.monotonic() >= next_poke:
                poke()
                next_poke = time.monotonic() + 1.0
            self.serve(0.2)
            found = [message for message in self.seen if what(message)]
            if found:
                return found[0]
        raise AssertionError(f"the agent did not answer within {timeout}s; last: {repr(self.seen[-5:])[:2000]}")


def test_an_agent_survives_hostile_frames_from_its_master_and_still_runs_tasks(tmp_path):
    fake = FakeMaster()
    procs = ProcessSet(tmp_path)
    try:
        agent = procs._start("agent-fz", ["agent", "--master", fake.address, "--hostname", "fz",
                                          "--resources", "cpus:4;mem:1024;disk:100;ports:[31000-31010]",
                                          "--work-dir", str(procs.work_root / "fz")])
        fake.wait_for(lambda msg: isinstance(msg, m.RegisterAgent), 30)
        rss_before = rss_kib(agent.pid)
        rng = random.Random(SEED)
        count = 1500
        kinds: Counter[str] = Counter()
        for i, (kind, frame) in enumerate(hostile_frames(rng, agent_examples(fake.agent_id), count,
                                                         protect=("command",))):
            kinds[kind] += 1
            assert fake.peer is not None and fake.server.send_frame(fake.peer, frame)
            if i % 50 == 49:
                fake.serve()
        for _ in range(2):   # the agent's socket ends the connection; the agent connects anew
            fake.server.send_frame(fake.peer, oversize_frame())
        assert agent.running()

        # it still serves: a task sent (again, until it is heard of: an agent
        # ignores a task it has) runs and finishes
        real = m.RunTask(FrameworkInfo("real", id="real-fw"), TaskInfo("real-task", "", "true",
                                                                        Resources.parse("cpus:0.1;mem:16")))

        def send_until_heard_of() -> None:
            if not any(isinstance(msg, m.StatusUpdate) and msg.status.task_id == "real-task" for msg in fake.seen):
                fake.server.send(fake.peer, real)
        done = fake.wait_for(lambda msg: isinstance(msg, m.StatusUpdate) and msg.status.task_id == "real-task"
                             and msg.status.terminal, 90, poke=send_until_heard_of)
        assert done.status.state == "TASK_FINISHED"
        rss_after = rss_kib(agent.pid)
        print(json.dumps({"fuzz": "agent", "seed": SEED, "frames": count + 2, "kinds": dict(kinds), "crashes": 0,
                          "rss_kib_before": rss_before, "rss_kib_after": rss_after}))
        assert agent.running()
        assert rss_after - rss_before < RSS_GROWTH_LIMIT_KIB, (rss_before, rss_after)
    finally:
        procs.close()
        fake.server.close()
