"""The master core, sans I/O: peers are byte strings, time is a FakeClock."""

import pytest

from mesoslike import ExecutorInfo, MesoslikeError
from mesoslike.clock import FakeClock
from mesoslike.master import MasterConfig, MasterCore
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, Filters, FrameworkInfo, MasterInfo, TaskInfo, TaskState, TaskStatus, WireError
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
FW, FW2, AG, AG2 = b"fw-peer", b"fw2-peer", b"agent-peer", b"agent2-peer"


class Harness:
    def __init__(self, **config):
        self.clock = FakeClock()
        defaults = dict(heartbeat_interval=1.0, ping_interval=1.0, max_agent_ping_timeouts=3)
        defaults.update(config)
        self.core = MasterCore(self.clock, MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig(**defaults))

    def send(self, peer, message):
        out = [(s.peer, s.message) for s in self.core.on_message(peer, message)]
        self.core._check()   # the books' invariants hold after every message
        return out

    def tick(self, advance=0.0):
        self.clock.advance(advance)
        out = [(s.peer, s.message) for s in self.core.tick()]
        self.core._check()
        return out

    def subscribe(self, peer=FW, **info):
        out = self.send(peer, m.Subscribe(FrameworkInfo(**{"name": "demo", **info})))
        (subscribed,) = [msg for p, msg in out if isinstance(msg, m.Subscribed)]
        return subscribed.framework_id

    def register_agent(self, peer=AG, resources="cpus:4;mem:4096", hostname="node-0"):
        out = self.send(peer, m.RegisterAgent(AgentInfo(hostname, R(resources))))
        (registered,) = [msg for p, msg in out if isinstance(msg, m.AgentRegistered)]
        return registered.agent_id

    def offers(self, out, peer=FW):
        return [o for p, msg in out if p == peer and isinstance(msg, m.Offers) for o in msg.offers]


def only(out, kind, peer=None):
    return [msg for p, msg in out if isinstance(msg, kind) and (peer is None or p == peer)]


@pytest.fixture
def h():
    return Harness()


def test_subscribe_register_and_offer(h):
    fid = h.subscribe()
    assert fid == "m-F0001"
    aid = h.register_agent()
    (offer,) = h.offers(h.tick())
    assert (offer.agent_id, offer.hostname, offer.resources) == (aid, "node-0", R("cpus:4;mem:4096"))
    assert offer.framework_id == fid


def launch(h, fid, offer, *tasks, refuse=0.0):
    return h.send(FW, m.Accept(fid, [offer.id], list(tasks), Filters(refuse)))


def task(tid, agent_id, resources="cpus:1;mem:128", command="sleep 1"):
    return TaskInfo(tid, agent_id, command, R(resources))


def test_valid_launch_runs_the_task_and_returns_the_rest(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    out = launch(h, fid, offer, task("t1", aid), task("t2", aid))
    run = only(out, m.RunTask, AG)
    assert [r.task.task_id for r in run] == ["t1", "t2"]
    assert run[0].framework.id == fid
    (again,) = h.offers(h.tick(advance=1.0))
    assert again.resources == R("cpus:2;mem:3840")


@pytest.mark.parametrize("bad, fragment", [
    (lambda aid: task("t1", aid, "cpus:5"), "exceed"),
    (lambda aid: task("t1", "other-agent"), "is not the offers' agent"),
    (lambda aid: task("", aid), "task id is empty"),
    (lambda aid: task("t1", aid, command="  "), "no command"),
    (lambda aid: TaskInfo("t1", aid, "", R("cpus:1"), shell=False), "shell false and no arguments"),
    (lambda aid: TaskInfo("t1", aid, "x", Resources()), "no resources"),
])
def test_invalid_tasks_get_task_error_and_launch_nothing(h, bad, fragment):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    out = launch(h, fid, offer, bad(aid))
    (update,) = only(out, m.Update, FW)
    assert update.status.state == TaskState.ERROR and fragment in update.status.message
    assert update.status.uuid == "" and update.status.source == "SOURCE_MASTER"
    assert not only(out, m.RunTask)
    assert h.core.allocator.available(aid) == R("cpus:4;mem:4096")


def test_a_task_without_a_shell_command_runs_its_arguments_or_its_images_entrypoint(h):
    from mesoslike.wire.types import ContainerInfo, Image

    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    argv = TaskInfo("argv", aid, "", R("cpus:1"), shell=False, arguments=["/bin/echo", "hi"])
    image = TaskInfo("image", aid, "", R("cpus:1"), shell=False, container=ContainerInfo(image=Image("busybox")))
    out = launch(h, fid, offer, argv, image)
    assert [r.task.task_id for r in only(out, m.RunTask, AG)] == ["argv", "image"]


def test_duplicate_task_ids_and_resources_summed_over_tasks(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    out = launch(h, fid, offer, task("a", aid, "cpus:3"), task("a", aid, "cpus:0.5"), task("b", aid, "cpus:2"))
    assert [r.task.task_id for r in only(out, m.RunTask)] == ["a"]
    errors = {u.status.task_id + ":" + u.status.message for u in only(out, m.Update)}
    assert any("already in use" in e for e in errors) and any("exceed" in e for e in errors)


def test_launch_on_a_rescinded_or_unknown_offer_is_dropped(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    h.send(FW, m.Decline(fid, [offer.id], Filters(0)))
    out = launch(h, fid, offer, task("t", aid))
    (update,) = only(out, m.Update)
    assert update.status.state == TaskState.DROPPED and "no longer valid" in update.status.message


def test_a_master_elected_again_names_its_offers_apart_from_its_last_terms():
    # the same master (same id) elected again serves from a new core (MasterRuntime._new_core);
    # offers are not in the registry, so without the term in their ids the new core's first offer
    # was "m-O1" again, and a framework's late ACCEPT of the last term's "m-O1" launched on it
    first = Harness()
    fid, aid = first.subscribe(), first.register_agent()
    (old_offer,) = first.offers(first.tick())
    again = Harness()
    again.core = MasterCore(again.clock, MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig(
        heartbeat_interval=1.0, ping_interval=1.0, max_agent_ping_timeouts=3), term=2)
    fid2, aid2 = again.subscribe(), again.register_agent()
    (new_offer,) = again.offers(again.tick())
    assert old_offer.id == "m-O1" and new_offer.id.startswith("m-T2-O") and new_offer.id != old_offer.id
    out = launch(again, fid2, old_offer, task("t", aid2))
    (update,) = only(out, m.Update)
    assert update.status.state == TaskState.DROPPED and "no longer valid" in update.status.message
    out = launch(again, fid2, new_offer, task("t", aid2))     # the offer it names is untouched
    assert not only(out, m.Update) and only(out, m.RunTask)


def test_status_updates_are_forwarded_and_acks_go_back_to_the_agent(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid))
    running = TaskStatus("t", TaskState.RUNNING, uuid="u1")
    (update,) = only(h.send(AG, m.StatusUpdate(fid, running)), m.Update, FW)
    assert update.status.agent_id == aid and update.status.uuid == "u1"
    (ack,) = only(h.send(FW, m.Acknowledge(fid, aid, "t", "u1")), m.StatusUpdateAck, AG)
    assert (ack.task_id, ack.uuid) == ("t", "u1")
    finished = TaskStatus("t", TaskState.FINISHED, uuid="u2", exit_code=0)
    h.send(AG, m.StatusUpdate(fid, finished))
    assert h.core.allocator.available(aid) == R("cpus:4;mem:4096")
    state = h.core.frameworks[fid].tasks["t"]
    assert state.state == TaskState.FINISHED
    h.send(FW, m.Acknowledge(fid, aid, "t", "u2"))
    assert "t" not in h.core.frameworks[fid].tasks
    assert [t.id for t in h.core.frameworks[fid].completed] == ["t"]


def test_terminal_update_returns_the_task_resources_once(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid, "cpus:4;mem:4096"))
    assert h.core.allocator.available(aid) == Resources()
    for _ in range(3):  # retried update
        h.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.FAILED, uuid="u", exit_code=3)))
    assert h.core.allocator.available(aid) == R("cpus:4;mem:4096")
    h.core.allocator.check_invariants()


def test_calls_from_another_connection_are_refused(h):
    fid = h.subscribe()
    (error,) = only(h.send(FW2, m.Revive(fid)), m.Error, FW2)
    assert "not subscribed on this connection" in error.message


def test_unexpected_messages_and_bad_frames_get_errors(h):
    (error,) = only(h.send(FW, m.Subscribed("x", 1.0, MasterInfo("a", "b"))), m.Error)
    assert "unexpected message Subscribed" in error.message
    (error,) = only([(s.peer, s.message) for s in h.core.on_bad_frame(FW, WireError("junk"))], m.Error)
    assert "junk" in error.message


def test_bad_role_is_a_fatal_subscription_error(h):
    (error,) = only(h.send(FW, m.Subscribe(FrameworkInfo("x", role="a//b"))), m.Error)
    assert error.fatal and "role" in error.message
    assert h.core.frameworks == {}


def test_reconciliation_implicit_and_explicit(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t1", aid), task("t2", aid))
    h.send(AG, m.StatusUpdate(fid, TaskStatus("t1", TaskState.RUNNING, uuid="u")))
    implicit = only(h.send(FW, m.Reconcile(fid)), m.Update)
    assert [(u.status.task_id, u.status.state) for u in implicit] == [("t1", TaskState.RUNNING),
                                                                       ("t2", TaskState.STAGING)]
    assert all(u.status.reason == "REASON_RECONCILIATION" and u.status.uuid == "" for u in implicit)
    explicit = only(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("t2"), m.ReconcileTask("nope", aid)])), m.Update)
    assert [(u.status.task_id, u.status.state) for u in explicit] == [("t2", TaskState.STAGING),
                                                                       ("nope", TaskState.LOST)]


def test_agent_that_stops_answering_pings_is_removed_and_its_tasks_lost(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid))
    out = []
    for _ in range(5):
        out += h.tick(advance=1.0)
        h.send(FW, m.Heartbeat())
    assert only(out, m.Ping, AG)
    (lost,) = [u for u in only(out, m.Update, FW) if u.status.task_id == "t"]
    assert lost.status.state == TaskState.LOST and lost.status.reason == "REASON_AGENT_REMOVED"
    assert only(out, m.Failure, FW)[0].agent_id == aid
    assert aid not in h.core.agents and aid in h.core.unreachable
    # it may come back under its old id (tests/test_master_partitions.py): the task its framework was
    # told is lost is killed there, and the framework hears nothing more of it
    out = h.send(AG, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id=aid),
                                       [m.RunningTask(fid, task("t", aid), TaskState.RUNNING)]))
    assert only(out, m.AgentRegistered, AG)[0].agent_id == aid
    assert only(out, m.KillTask, AG) == [m.KillTask(fid, "t")] and not only(out, m.Update, FW)


def test_pongs_keep_an_agent_alive(h):
    h.subscribe()
    aid = h.register_agent()
    for _ in range(10):
        h.tick(advance=1.0)
        h.send(AG, m.Pong(aid))
        h.send(FW, m.Heartbeat())
    assert aid in h.core.agents


def test_a_ping_sweep_of_many_agents_goes_on_over_several_turns_each_pinging_every_agent_once(h, monkeypatch):
    """Past PING_CHUNK agents a sweep pings a chunk per turn (100,000 agents
    made one turn of seconds), and the core asks for the next turn at once;
    every agent is pinged once per sweep, the next sweep starts after this
    one, and an agent that never answers is still marked unreachable after
    max_agent_ping_timeouts sweeps."""
    import mesoslike.master.agents as agents

    monkeypatch.setattr(agents, "PING_CHUNK", 3)
    peers = [f"agent-{n}".encode() for n in range(7)]
    ids = [h.register_agent(peer=peer, hostname=f"node-{n}") for n, peer in enumerate(peers)]
    pinged = [only(h.tick(advance=1.0), m.Ping)]
    assert len(pinged[0]) == 3 and h.core.next_wakeup() == h.clock.now()
    # a turn late enough for the next sweep goes on with this one: no agent is pinged twice before
    # every agent was pinged once (a restarted sweep would ping the first ones only, again and again)
    pinged += [only(h.tick(advance=1.0), m.Ping), only(h.tick(), m.Ping)]
    assert [len(p) for p in pinged] == [3, 3, 1]
    assert sorted(p.agent_id for sweep in pinged for p in sweep) == sorted(ids)
    for _ in range(3):   # all but the last agent answer every ping
        for agent_id, peer in zip(ids[:-1], peers[:-1]):
            h.send(peer, m.Pong(agent_id))
        h.tick(advance=1.0)
        h.tick()
        h.tick()
    assert ids[-1] not in h.core.agents and ids[-1] in h.core.unreachable
    assert all(agent_id in h.core.agents for agent_id in ids[:-1])


def test_partition_aware_frameworks_get_unreachable(h):
    fid = h.subscribe(partition_aware=True)
    aid = h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid))
    out = []
    for _ in range(5):
        out += h.tick(advance=1.0)
        h.send(FW, m.Heartbeat())
    assert [u.status.state for u in only(out, m.Update) if u.status.task_id == "t"] == [TaskState.UNREACHABLE]


def test_heartbeats_then_disconnect_then_failover_timeout_removes_framework(h):
    fid = h.subscribe(failover_timeout=10.0)
    aid = h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid))
    out = h.tick(advance=1.0)
    assert only(out, m.Heartbeat, FW)
    for _ in range(6):  # silent framework; the agent keeps answering
        h.tick(advance=1.0)
        h.send(AG, m.Pong(aid))
    record = h.core.frameworks[fid]
    assert not record.connected
    out = []
    for _ in range(11):
        out += h.tick(advance=1.0)
        h.send(AG, m.Pong(aid))
    assert only(out, m.ShutdownFramework, AG) == [m.ShutdownFramework(fid)]
    assert fid not in h.core.frameworks
    (error,) = only(h.send(FW, m.Subscribe(FrameworkInfo("demo", id=fid))), m.Error)
    assert error.fatal


def test_resubscribe_within_failover_keeps_tasks(h):
    fid = h.subscribe(failover_timeout=60.0)
    aid = h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid))
    for _ in range(7):
        h.tick(advance=1.0)
        h.send(AG, m.Pong(aid))
    assert not h.core.frameworks[fid].connected
    out = h.send(FW2, m.Subscribe(FrameworkInfo("demo", id=fid, failover_timeout=60.0)))
    (subscribed,) = only(out, m.Subscribed, FW2)
    assert subscribed.resubscribed and subscribed.framework_id == fid
    assert "t" in h.core.frameworks[fid].tasks
    assert h.offers(h.tick(advance=1.0), peer=FW2)


def test_unknown_agent_reregistering_is_admitted_with_its_tasks(h):
    running = m.RunningTask("old-fw", task("t", "old-agent", "cpus:1;mem:128"), TaskState.RUNNING)
    out = h.send(AG, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="old-agent"), [running],
                                       [FrameworkInfo("demo", id="old-fw", failover_timeout=30.0)]))
    assert only(out, m.AgentRegistered)[0].agent_id == "old-agent"
    assert h.core.allocator.available("old-agent") == R("cpus:3;mem:3968")
    out = h.send(FW, m.Subscribe(FrameworkInfo("demo", id="old-fw", failover_timeout=30.0)))
    assert only(out, m.Subscribed)[0].resubscribed
    assert only(h.send(FW, m.Reconcile("old-fw")), m.Update)[0].status.state == TaskState.RUNNING


def test_offer_timeout_rescinds(h):
    h = Harness(offer_timeout=5.0)
    h.subscribe()
    aid = h.register_agent()
    (offer,) = h.offers(h.tick())
    out = []
    for _ in range(6):
        out += h.tick(advance=1.0)
        h.send(FW, m.Heartbeat())
        h.send(AG, m.Pong(aid))
    (rescind,) = only(out, m.RescindOffer, FW)
    assert rescind.offer_id == offer.id and rescind.reason == "offer_timeout"


def test_status_update_for_a_removed_framework_is_acknowledged_by_the_master(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid))
    h.send(FW, m.Teardown(fid))
    (ack,) = only(h.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.KILLED, uuid="u9"))), m.StatusUpdateAck)
    assert ack.uuid == "u9"


def test_kill_goes_to_the_agent(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid))
    assert only(h.send(FW, m.Kill(fid, "t")), m.KillTask, AG) == [m.KillTask(fid, "t")]
    (update,) = only(h.send(FW, m.Kill(fid, "nope")), m.Update)
    assert update.status.state == TaskState.LOST


def test_a_retried_first_subscribe_from_one_connection_makes_one_framework(h):
    first = h.subscribe()
    again = h.subscribe()
    assert first == again and len(h.core.frameworks) == 1


def test_a_retried_resubscribe_on_the_same_connection_keeps_the_frameworks_offers(h):
    # after a failover every driver retries SUBSCRIBE while the new leader is
    # busy; each retry used to rescind all of the framework's offers
    fid = h.subscribe(failover_timeout=60.0)
    h.register_agent()
    (offer,) = h.offers(h.tick())
    out = h.send(FW, m.Subscribe(FrameworkInfo("demo", id=fid, failover_timeout=60.0)))
    (subscribed,) = only(out, m.Subscribed, FW)
    assert subscribed.framework_id == fid and subscribed.resubscribed
    assert not only(out, m.RescindOffer)
    assert [o.id for o in h.core.allocator.outstanding_offers(fid)] == [offer.id]
    # from another connection it is a failover of the scheduler: its old
    # offers are withdrawn and it gets fresh ones
    h.send(FW2, m.Subscribe(FrameworkInfo("demo", id=fid, failover_timeout=60.0)))
    assert not h.core.allocator.outstanding_offers(fid)
    assert h.offers(h.tick(advance=1.0), peer=FW2)


def test_reregistering_agent_reports_ended_unacknowledged_tasks_which_are_not_lost(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid))
    ended = m.RunningTask(fid, task("t", aid), TaskState.FINISHED)
    out = h.send(AG2, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id=aid), [ended]))
    assert not [u for u in only(out, m.Update) if u.status.state == TaskState.LOST]
    # and a master that never knew the agent does not count the ended task's resources
    fresh = Harness()
    fresh.send(AG, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="x"), [ended],
                                     [FrameworkInfo("demo", id=fid)]))
    assert fresh.core.allocator.available("x") == R("cpus:4;mem:4096")
    fresh.send(FW, m.Subscribe(FrameworkInfo("demo", id=fid)))
    (update,) = only(fresh.send(AG, m.StatusUpdate(fid, TaskStatus("t", TaskState.FINISHED, uuid="u"))), m.Update)
    assert update.status.state == TaskState.FINISHED


def reregister(h, aid, resources, attributes=None, tasks=(), peer=AG):
    info = AgentInfo("node-0", R(resources), attributes or {}, id=aid)
    return h.send(peer, m.ReregisterAgent(info, list(tasks), []))


def test_an_agent_reregistering_with_another_total_and_attributes_is_offered_with_the_new_ones(h):
    # Mesos: the master hands the changed agent to the allocator (updateSlave)
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid, "cpus:1;mem:128"))
    (held,) = h.offers(h.tick(advance=1.0))  # what is left, outstanding while the agent restarts
    running = m.RunningTask(fid, task("t", aid, "cpus:1;mem:128"), TaskState.RUNNING)
    out = reregister(h, aid, "cpus:8;mem:8192", {"rack": "r2"}, [running])
    assert only(out, m.AgentRegistered, AG)[0].agent_id == aid
    assert [r.offer_id for r in only(out, m.RescindOffer, FW)] == [held.id]  # made of the old total
    (offer,) = h.offers(h.tick(advance=1.0))
    assert (offer.resources, offer.attributes) == (R("cpus:7;mem:8064"), {"rack": "r2"})
    assert h.core.agents[aid].info.resources == R("cpus:8;mem:8192")
    assert h.core.registry.agents[aid].attributes == {"rack": "r2"}  # a new leader knows it too
    assert not h.core.frameworks[fid].tasks["t"].terminal


def test_an_agent_reregistering_as_before_keeps_its_offers(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    changes = h.core.registry_changes
    out = reregister(h, aid, "cpus:4;mem:4096", peer=AG2)
    assert not only(out, m.RescindOffer) and h.core.registry_changes == changes
    assert [o.id for o in h.core.allocator.outstanding_offers(fid)] == [offer.id]


def test_an_agent_reregistering_with_a_total_its_tasks_do_not_fit_in_keeps_the_old_one(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid, "cpus:3;mem:128"))
    running = m.RunningTask(fid, task("t", aid, "cpus:3;mem:128"), TaskState.RUNNING)
    out = reregister(h, aid, "cpus:2;mem:4096", {"rack": "r2"}, [running])
    assert only(out, m.AgentRegistered, AG)
    assert h.core.agents[aid].info == AgentInfo("node-0", R("cpus:4;mem:4096"), id=aid)
    (offer,) = h.offers(h.tick(advance=1.0))
    assert (offer.resources, offer.attributes) == (R("cpus:1;mem:3968"), {})


def test_a_task_an_agent_no_longer_reports_is_lost_and_its_resources_are_offered_again(h):
    fid, aid = h.subscribe(), h.register_agent()
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("t", aid, "cpus:1;mem:128"))
    out = reregister(h, aid, "cpus:4;mem:4096", peer=AG2)
    assert [u.status.state for u in only(out, m.Update, FW)] == [TaskState.LOST]
    (offer,) = h.offers(h.tick(advance=1.0))
    assert offer.resources == R("cpus:4;mem:4096")


def test_a_retried_registration_is_answered_again_without_losing_tasks_launched_since(h):
    # after a failover an agent retries REREGISTER_AGENT while the master is
    # busy; the runtime recognises the retry by its bytes and asks the core
    fid = h.subscribe(failover_timeout=60.0)
    first = m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="a1"), [], [])
    assert only(h.send(AG, first), m.AgentRegistered, AG)[0].agent_id == "a1"
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, task("new", "a1"))
    h.core.agents["a1"].pings_unanswered = 2
    out = [(s.peer, s.message) for s in h.core.on_retried_registration(AG)]
    assert out == [(AG, m.AgentRegistered("a1", h.core.info, h.core.config.ping_interval,
                                               accepts_batches=True))]
    assert h.core.agents["a1"].pings_unanswered == 0
    assert not h.core.frameworks[fid].tasks["new"].terminal
    assert h.core.counters["registration_retries"] == 1
    # what handling the stale retry in full would have done
    assert only(h.send(AG, first), m.Update, FW)[0].status.state == TaskState.LOST


def test_a_retried_registration_from_a_connection_the_agent_no_longer_uses_is_handled_in_full(h):
    assert h.core.on_retried_registration(AG) is None          # nobody registered there
    aid = h.register_agent(AG)
    h.send(AG2, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id=aid), [], []))
    assert h.core.on_retried_registration(AG) is None          # it moved to another connection
    assert h.core.on_retried_registration(AG2) is not None
    for _ in range(4):
        h.tick(advance=1.0)                                      # pings unanswered: removed
    assert aid not in h.core.agents
    assert h.core.on_retried_registration(AG2) is None


def test_a_retried_registration_whose_admission_is_not_written_yet_is_ignored_until_it_is(h):
    # as Mesos ignores a re-registration already in progress: the first answer waits for the registry
    # write (the runtime holds it), and a retry gets no answer of its own
    aid = h.register_agent(AG)
    written = h.core.registry_changes - 1          # the runtime's write of the admission is on its way
    assert h.core.on_retried_registration(AG, persisted=written) == []
    assert h.core.on_retried_registration(AG, persisted=written) == []
    assert h.core.counters["registration_retries_ignored"] == 2
    assert h.core.agents[aid].pings_unanswered == 0
    out = [(s.peer, s.message) for s in h.core.on_retried_registration(AG, persisted=h.core.registry_changes)]
    assert [type(msg) for _, msg in out] == [m.AgentRegistered]
    assert h.core.counters["registration_retries_ignored"] == 2
    assert h.core.counters["registration_retries"] == 3


def test_an_agent_reregistering_as_the_registry_holds_it_changes_nothing_to_write():
    # after a failover every agent re-registers as stored: its AGENT_REGISTERED waits for no write,
    # and a retry of it is answered at once; an agent the registry does not hold is a change
    h = Harness()
    aid = h.register_agent(AG)
    from mesoslike.master.registry import Registry
    registry = Registry.from_document(h.core.registry.to_document())
    successor = MasterCore(FakeClock(), MasterInfo("m2", "tcp://127.0.0.1:2"), MasterConfig(), registry=registry)
    info = registry.agents[aid]
    before = successor.registry_changes
    out = successor.on_message(AG, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id=aid), [], []))
    assert [type(s.message) for s in out if s.peer == AG] == [m.AgentRegistered]
    assert successor.registry_changes == before and not successor.registry.changes().agents
    assert successor.registry.agents[aid] == info
    assert [type(s.message) for s in successor.on_retried_registration(AG, persisted=before)] == [m.AgentRegistered]
    successor.on_message(AG2, m.ReregisterAgent(AgentInfo("node-1", R("cpus:2;mem:1024"), id="unknown"), [], []))
    assert successor.registry_changes == before + 1 and "unknown" in successor.registry.changes().agents
    assert successor.on_retried_registration(AG2, persisted=before) == []


def test_statuses_the_master_makes_up_carry_wall_clock_time_as_agents_do():
    h = Harness()
    h.core = MasterCore(h.clock, MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig(heartbeat_interval=1.0),
                        wall_clock=lambda: 1_700_000_000.0)
    fid = h.subscribe()
    (update,) = only(h.send(FW, m.Reconcile(fid, [m.ReconcileTask("ghost", "nowhere")])), m.Update)
    assert update.status.state == TaskState.LOST and update.status.timestamp == 1_700_000_000.0


def test_weights_and_quota_set_by_the_operator_are_hard_state_a_new_leader_applies():
    h = Harness()
    h.core.update_weights({"eng": 2.0})
    h.core.update_quota("eng", guarantee="cpus:2;mem:512", limit="cpus:4;gpus:0")
    assert h.core.registry.weights == {"eng": 2.0}
    assert h.core.registry.quota == {"eng": {"guarantee": "cpus:2;mem:512", "limit": "cpus:4;gpus:0"}}
    changes = h.core.registry.changes().sections
    assert {"weights", "quota"} <= changes
    # a new leader reads the registry and applies both before it serves
    from mesoslike.master.registry import Registry
    registry = Registry.from_document(h.core.registry.to_document())
    successor = MasterCore(FakeClock(), MasterInfo("m2", "tcp://127.0.0.1:2"), MasterConfig(), registry=registry)
    applied = successor.allocator.snapshot()
    assert applied["weights"] == {"eng": 2.0}
    assert (applied["quota"]["eng"]["guarantee"], applied["quota"]["eng"]["limit"]) == ("cpus:2;mem:512", "cpus:4;gpus:0")
    # clearing the quota is a change too; bad input changes nothing
    h.core.update_quota("eng")
    assert h.core.registry.quota == {}
    before = h.core.registry.to_document()
    with pytest.raises(MesoslikeError):
        h.core.update_quota("eng", guarantee="cpus:-1")
    with pytest.raises(MesoslikeError):
        h.core.update_weights({"eng": -1.0})
    assert h.core.registry.to_document() == before


def test_an_agents_message_to_a_framework_names_the_agent_that_sent_it(h):
    fid, aid = h.subscribe(), h.register_agent()
    other = h.register_agent(AG2, hostname="node-1")
    offer = next(o for o in h.offers(h.tick()) if o.agent_id == aid)
    executor = ExecutorInfo("e1", "run", R("cpus:0.5;mem:64"))
    launch(h, fid, offer, task("t1", aid).replace(executor=executor))   # e1 runs on this agent
    out = h.send(AG, m.FrameworkMessage(fid, other, b"hi", executor_id="e1"))   # claims to be the other agent
    (msg,) = only(out, m.FrameworkMessage, FW)
    assert (msg.agent_id, msg.data, msg.executor_id) == (aid, b"hi", "e1")
