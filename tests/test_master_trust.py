"""What the master believes of keyed peers, sans I/O (FakeClock, peers as
byte strings speaking as principals): status updates and framework
messages bound to what the master placed where (docs/security.rst,
"What each attack meets"), and whose framework and agent ids are after a
restart without a registry (receipts)."""

import logging

import msgspec
import pytest

from mesoslike.acl import Acls, Credentials, Principal
from mesoslike.clock import FakeClock
from mesoslike.master import MasterConfig, MasterCore
from mesoslike.master import receipts
from mesoslike.master.registry import Registry
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, ExecutorInfo, Filters, FrameworkInfo, MasterInfo, TaskInfo, TaskState, TaskStatus
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
FW_A, FW_B, AG1, AG2, ROGUE = b"fwA-peer", b"fwB-peer", b"agent1-peer", b"agent2-peer", b"rogue-peer"
KEY = receipts.receipt_key(b"the master's secret key, z85")
PRINCIPALS = {FW_A: "fwA", FW_B: "fwB", AG1: "agent1", AG2: "agent2", ROGUE: "rogue"}


def credentials():
    kinds = {"fwA": "framework", "fwB": "framework", "agent1": "agent", "agent2": "agent", "rogue": "agent"}
    return Credentials({name: Principal(name, f"key-{name}".encode(), frozenset([kind])) for name, kind in kinds.items()},
                       Acls.parse(None))


class Cluster:
    """A secured master core whose peers speak as PRINCIPALS say; restart()
    makes a new core with an empty registry (a master without --work-dir)."""

    def __init__(self, registry=None):
        self.clock = FakeClock()
        self.core = self._core(registry)

    def _core(self, registry=None):
        return MasterCore(self.clock, MasterInfo("m", "tcp://127.0.0.1:1"),
                          MasterConfig(heartbeat_interval=1.0, ping_interval=1.0), registry=registry,
                          credentials=credentials(), receipt_key=KEY)

    def restart(self, registry=None):
        self.core = self._core(registry)

    def send(self, peer, message):
        out = [(s.peer, s.message) for s in self.core.on_message(peer, message, PRINCIPALS.get(peer))]
        self.core._check()   # the books' invariants hold after every message
        return out

    def tick(self, advance=1.0):
        self.clock.advance(advance)
        return [(s.peer, s.message) for s in self.core.tick()]

    def subscribe(self, peer=FW_A, framework_id=""):
        out = self.send(peer, m.Subscribe(FrameworkInfo(name="demo", user="nobody", id=framework_id)))
        return out, next((msg.framework_id for _, msg in out if isinstance(msg, m.Subscribed)), None)

    def register(self, peer=AG1, hostname="node-1"):
        out = self.send(peer, m.RegisterAgent(AgentInfo(hostname, R("cpus:4;mem:4096"))))
        (registered,) = only(out, m.AgentRegistered)
        return registered

    def launch(self, framework_id, agent_id, *tasks, peer=FW_A):
        offer = next(o for _, msg in self.tick() if isinstance(msg, m.Offers) for o in msg.offers
                     if o.agent_id == agent_id and o.framework_id == framework_id)
        return self.send(peer, m.Accept(framework_id, [offer.id], list(tasks), Filters(0)))


def only(out, kind, peer=None):
    return [msg for p, msg in out if isinstance(msg, kind) and (peer is None or p == peer)]


def task(tid, agent_id, executor=None):
    return TaskInfo(tid, agent_id, "sleep 100", R("cpus:1;mem:128"), executor=executor)


def update(framework_id, tid, state, uuid, source="SOURCE_AGENT"):
    return m.StatusUpdate(framework_id, TaskStatus(tid, state, uuid=uuid, source=source))


def dropped(cluster, reason):
    return cluster.core.updates_dropped.get(reason, 0)


@pytest.fixture
def cluster():
    return Cluster()


@pytest.fixture
def running(cluster):
    """fwA with task t1 on agent1, agent2 registered too."""
    _, fid = cluster.subscribe()
    a1 = cluster.register().agent_id
    a2 = cluster.register(AG2, "node-2").agent_id
    cluster.launch(fid, a1, task("t1", a1))
    return fid, a1, a2


# ------------------------------------------------------- updates bound to facts
def test_an_update_for_a_task_never_placed_on_the_agent_is_dropped_counted_acknowledged_and_logged_once(
        cluster, running, caplog):
    fid, a1, a2 = running
    with caplog.at_level(logging.WARNING, "mesoslike.master"):
        out = cluster.send(AG2, update(fid, "never-launched", TaskState.FINISHED, "u1", source="SOURCE_EXECUTOR"))
        again = cluster.send(AG2, update(fid, "never-launched-2", TaskState.RUNNING, "u2"))
    assert not only(out + again, m.Update)                          # fwA hears nothing of it
    assert [a.uuid for a in only(out + again, m.StatusUpdateAck, AG2)] == ["u1", "u2"]   # the stream drains
    assert dropped(cluster, "unknown_task") == 2
    assert len([r for r in caplog.records if "dropped (unknown_task" in r.getMessage()]) == 1
    # the same id on the agent it was placed on is another matter
    assert only(cluster.send(AG1, update(fid, "t1", TaskState.RUNNING, "u3")), m.Update, FW_A)


def test_a_second_terminal_update_is_dropped_while_retries_of_the_first_keep_their_semantics(cluster, running):
    fid, a1, _ = running
    (first,) = only(cluster.send(AG1, update(fid, "t1", TaskState.FAILED, "u-end")), m.Update, FW_A)
    assert first.status.state == TaskState.FAILED
    out = cluster.send(AG1, update(fid, "t1", TaskState.FINISHED, "u-other"))
    assert not only(out, m.Update) and dropped(cluster, "already_terminal") == 1
    assert [a.uuid for a in only(out, m.StatusUpdateAck, AG1)] == ["u-other"]
    # the agent retrying the first: held back, then forwarded again (the framework may not have it)
    assert not only(cluster.send(AG1, update(fid, "t1", TaskState.FAILED, "u-end")), m.Update)
    cluster.clock.advance(5.0)
    assert only(cluster.send(AG1, update(fid, "t1", TaskState.FAILED, "u-end")), m.Update, FW_A)
    # acknowledged by fwA: a late retry is acknowledged by the master, a new terminal still dropped
    cluster.send(FW_A, m.Acknowledge(fid, a1, "t1", "u-end"))
    assert [a.uuid for a in only(cluster.send(AG1, update(fid, "t1", TaskState.FAILED, "u-end")),
                                 m.StatusUpdateAck, AG1)] == ["u-end"]
    out = cluster.send(AG1, update(fid, "t1", TaskState.FINISHED, "u-third"))
    assert not only(out, m.Update) and dropped(cluster, "already_terminal") == 2


def test_a_task_ended_on_another_agent_cannot_be_finished_by_this_one(cluster, running):
    fid, a1, a2 = running
    cluster.send(AG1, update(fid, "t1", TaskState.FAILED, "u1"))
    cluster.send(FW_A, m.Acknowledge(fid, a1, "t1", "u1"))          # completed, in the history
    out = cluster.send(AG2, update(fid, "t1", TaskState.FINISHED, "forged"))
    assert not only(out, m.Update) and dropped(cluster, "unknown_task") == 1
    assert cluster.core.frameworks[fid].completed_task("t1").state == TaskState.FAILED


def test_source_executor_is_believed_only_for_a_task_run_by_a_custom_executor(cluster):
    _, fid = cluster.subscribe()
    a1 = cluster.register().agent_id
    executor = ExecutorInfo("e1", "run", R("cpus:0.5;mem:64"))
    cluster.launch(fid, a1, task("cmd", a1), task("ex", a1, executor))
    out = cluster.send(AG1, update(fid, "cmd", TaskState.FINISHED, "u1", source="SOURCE_EXECUTOR"))
    assert not only(out, m.Update) and dropped(cluster, "forged_source") == 1
    out = cluster.send(AG1, update(fid, "cmd", TaskState.LOST, "u2", source="SOURCE_MASTER"))
    assert not only(out, m.Update) and dropped(cluster, "forged_source") == 2
    assert cluster.core.frameworks[fid].tasks["cmd"].state == TaskState.STAGING
    (forwarded,) = only(cluster.send(AG1, update(fid, "ex", TaskState.RUNNING, "u3", source="SOURCE_EXECUTOR")),
                        m.Update, FW_A)
    assert forwarded.status.source == "SOURCE_EXECUTOR"
    assert only(cluster.send(AG1, update(fid, "cmd", TaskState.RUNNING, "u4")), m.Update, FW_A)


def test_framework_messages_from_an_agent_name_only_executors_of_that_framework_it_runs(cluster):
    _, fid = cluster.subscribe()
    a1 = cluster.register().agent_id
    cluster.register(AG2, "node-2")
    cluster.launch(fid, a1, task("ex", a1, ExecutorInfo("e1", "run", R("cpus:0.5;mem:64"))))
    assert not only(cluster.send(AG2, m.FrameworkMessage(fid, "x", b"forged", executor_id="e1")), m.FrameworkMessage)
    assert not only(cluster.send(AG1, m.FrameworkMessage(fid, a1, b"no such", executor_id="e2")), m.FrameworkMessage)
    assert cluster.core.framework_messages_dropped == {"unknown_executor": 2}
    (message,) = only(cluster.send(AG1, m.FrameworkMessage(fid, a1, b"real", executor_id="e1")), m.FrameworkMessage,
                      FW_A)
    assert message.data == b"real"


def test_an_agents_report_of_an_ended_task_of_a_framework_it_knows_of_still_reaches_it(cluster):
    """A master without a registry restarted; an agent holds the unacknowledged
    end of a task of a framework nothing else knows: the framework subscribes
    under its id and gets that end — from that agent only."""
    _, fid = cluster.subscribe()
    registered = cluster.register()
    cluster.register(AG2, "node-2")
    (run,) = only(cluster.launch(fid, registered.agent_id, task("t1", registered.agent_id)), m.RunTask)
    cluster.restart()
    ended = m.RunningTask(fid, run.task, TaskState.FINISHED)
    cluster.send(AG1, m.ReregisterAgent(AgentInfo("node-1", R("cpus:4;mem:4096"), id=registered.agent_id),
                                        [ended], [run.framework], receipt=registered.receipt))
    out, again = cluster.subscribe(framework_id=fid)
    assert again == fid
    other = cluster.register(AG2, "node-2")
    assert not only(cluster.send(AG2, update(fid, "t1", TaskState.FAILED, "forged")), m.Update)
    assert other.agent_id != registered.agent_id
    (end,) = only(cluster.send(AG1, update(fid, "t1", TaskState.FINISHED, "u-end")), m.Update, FW_A)
    assert end.status.state == TaskState.FINISHED


# ------------------------------------------- ownership without a registry
def reregister(cluster, peer, registered, runs, receipt=None):
    frameworks = list({r.framework.id: r.framework for r in runs}.values())
    return cluster.send(peer, m.ReregisterAgent(
        AgentInfo("node", R("cpus:4;mem:4096"), id=registered.agent_id),
        [m.RunningTask(r.framework.id, r.task, TaskState.RUNNING) for r in runs], frameworks,
        receipt=registered.receipt if receipt is None else receipt))


def test_the_master_signs_the_principal_of_each_framework_and_agent_it_registers(cluster):
    _, fid = cluster.subscribe()
    registered = cluster.register()
    assert receipts.verify(KEY, receipts.AGENT, registered.agent_id, "agent1", registered.receipt)
    (run,) = only(cluster.launch(fid, registered.agent_id, task("t1", registered.agent_id)), m.RunTask)
    assert run.framework.principal == "fwA"
    assert receipts.verify(KEY, receipts.FRAMEWORK, fid, "fwA", run.framework.principal_receipt)
    assert not receipts.verify(KEY, receipts.FRAMEWORK, fid, "fwB", run.framework.principal_receipt)
    assert not receipts.verify(KEY, receipts.AGENT, fid, "fwA", run.framework.principal_receipt)


def test_after_a_restart_without_registry_a_framework_id_stays_its_principals(cluster):
    _, fid = cluster.subscribe()
    registered = cluster.register()
    (run,) = only(cluster.launch(fid, registered.agent_id, task("t1", registered.agent_id)), m.RunTask)
    cluster.restart()
    assert only(reregister(cluster, AG1, registered, [run]), m.AgentRegistered)
    out, taken = cluster.subscribe(FW_B, fid)                       # fwB first, with fwA's id
    assert taken is None and "belongs to another principal" in only(out, m.Error)[0].message
    assert not only(cluster.send(FW_B, m.Kill(fid, "t1")), m.KillTask)
    _, back = cluster.subscribe(FW_A, fid)
    assert back == fid and cluster.core.frameworks[fid].info.principal == "fwA"


def test_an_agents_word_alone_binds_no_framework_to_a_principal(cluster):
    """A keyed rogue agent reports fwA's framework as its friend's: without the
    master's receipt the report binds nothing, and nobody may take the id."""
    _, fid = cluster.subscribe()
    registered = cluster.register()
    (run,) = only(cluster.launch(fid, registered.agent_id, task("t1", registered.agent_id)), m.RunTask)
    rogue = cluster.register(ROGUE, "rogue")
    cluster.restart()
    claimed = run.framework.replace(principal="fwB", principal_receipt="0" * 32)
    reregister(cluster, ROGUE, rogue, [msgspec.structs.replace(run, framework=claimed)])   # RunTask: a Struct
    for peer in (FW_B, FW_A):
        out, taken = cluster.subscribe(peer, fid)
        assert taken is None and "cannot be subscribed to" in only(out, m.Error)[0].message
    reregister(cluster, AG1, registered, [run])                      # the real agent, with the receipt
    out, taken = cluster.subscribe(FW_B, fid)
    assert taken is None and "belongs to another principal" in only(out, m.Error)[0].message
    assert cluster.subscribe(FW_A, fid)[1] == fid


def test_after_a_restart_without_registry_an_agent_id_is_not_the_first_claimants(cluster):
    _, fid = cluster.subscribe()
    registered = cluster.register()
    (run,) = only(cluster.launch(fid, registered.agent_id, task("t1", registered.agent_id)), m.RunTask)
    rogue = cluster.register(ROGUE, "rogue")
    cluster.restart()
    # the rogue agent comes first under agent1's id: with its own receipt, agent1's, or none
    for receipt in (rogue.receipt, registered.receipt, ""):
        out = reregister(cluster, ROGUE, registered, [], receipt=receipt)
        assert not only(out, m.AgentRegistered)
        (shutdown,) = only(out, m.ShutdownAgent, ROGUE)
        assert "no receipt" in shutdown.reason
    assert registered.agent_id not in cluster.core.agents
    assert cluster.core.counters["agent_registrations_refused"] == 3
    # the real agent is not locked out, and fwA's tasks are sent to nobody else
    (back,) = only(reregister(cluster, AG1, registered, [run]), m.AgentRegistered)
    assert back.agent_id == registered.agent_id and back.receipt == registered.receipt
    _, again = cluster.subscribe(FW_A, fid)
    assert again == fid


def test_with_a_registry_its_record_of_an_agents_principal_decides(cluster):
    registry = Registry()
    registered = cluster.register()
    registry.admit_agent(cluster.core.agents[registered.agent_id].info)
    cluster.restart(registry)
    out = reregister(cluster, ROGUE, registered, [], receipt="")
    assert "belongs to another principal" in only(out, m.Error)[0].message
    assert only(reregister(cluster, AG1, registered, [], receipt=""), m.AgentRegistered)  # the registry knows it


def test_anonymous_clusters_give_and_need_no_receipts():
    core = MasterCore(FakeClock(), MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig())
    out = core.on_message(AG1, m.RegisterAgent(AgentInfo("n", R("cpus:1;mem:64"))))
    (registered,) = [s.message for s in out if isinstance(s.message, m.AgentRegistered)]
    assert registered.receipt == ""
    fresh = MasterCore(FakeClock(), MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig())
    out = fresh.on_message(AG1, m.ReregisterAgent(AgentInfo("n", R("cpus:1;mem:64"), id=registered.agent_id)))
    assert [s.message for s in out if isinstance(s.message, m.AgentRegistered)]
