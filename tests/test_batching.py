"""Batching on the wire (issue 14; docs/wire.rst, "Batching"): several
updates, acknowledgements or launches of a loop turn in one frame, each item
handled exactly as the message it stands for — the delivery guarantees of
issue 12 and the checks of issue 13 hold item by item. Sans-I/O: the
batching functions, the codec, and the master's, agent's and driver's cores
with fake clocks."""

import random

import msgpack
import pytest

from mesoslike.agent.core import LaunchTask, SendToMaster
from mesoslike.wire import SCHEMA, Codec, FrameworkInfo, TaskState, TaskStatus, WireError, decode, encode
from mesoslike.wire import messages as m
from mesoslike.wire.batching import BATCH_TYPES, batch_frames, batched, batched_messages, unbatched

import test_agent_core as agent_tests
import test_driver_core as driver_tests
from test_master_core import AG, AG2, FW, Harness, R, launch, only, task

pytestmark = pytest.mark.timeout(60)

FRAMEWORK = FrameworkInfo(name="demo", id="fw-1")
OTHER = FrameworkInfo(name="other", id="fw-2")


def status(task_id, state=TaskState.RUNNING, uuid="", **kwargs):
    return TaskStatus(task_id, state, uuid=uuid or f"u-{task_id}-{state}", **kwargs)


def everyone(_peer):
    return True


# ------------------------------------------------------------ batched / unbatched
def test_consecutive_messages_of_a_kind_go_in_one_batch_per_peer_in_order():
    sends = [(AG, m.StatusUpdateAck("a1", "fw-1", "t1", "u1")), (FW, m.Update(status("t1"))),
             (AG, m.StatusUpdateAck("a1", "fw-1", "t2", "u2")), (FW, m.Update(status("t2"))),
             (AG2, m.StatusUpdateAck("a2", "fw-1", "t3", "u3"))]
    out = batched(sends, everyone)
    assert out == [(AG, m.StatusUpdateAcks([sends[0][1], sends[2][1]])),
                   (FW, m.Updates([status("t1"), status("t2")])),
                   (AG2, sends[4][1])]                       # one message: no envelope


def test_a_message_of_another_kind_ends_a_run_so_a_peer_sees_the_same_order():
    ack1, ack2 = m.StatusUpdateAck("a1", "fw-1", "t1", "u1"), m.StatusUpdateAck("a1", "fw-1", "t2", "u2")
    kill = m.KillTask("fw-1", "t9")
    out = batched([(AG, ack1), (AG, kill), (AG, ack2)], everyone)
    assert out == [(AG, ack1), (AG, kill), (AG, ack2)]
    assert [item for _, message in out for item in unbatched(message)] == [ack1, kill, ack2]


def test_a_peer_that_does_not_take_batches_gets_one_message_a_frame():
    sends = [(AG, m.StatusUpdateAck("a1", "fw-1", f"t{i}", "u")) for i in range(3)]
    assert batched(sends, lambda peer: peer != AG) == sends


def test_launches_are_batched_per_framework_and_batches_are_bounded():
    runs = [m.RunTask(FRAMEWORK, task(f"t{i}", "a1")) for i in range(5)] + [m.RunTask(OTHER, task("o", "a1"))]
    out = batched([(AG, run) for run in runs], everyone, limit=2)
    assert [type(message).__name__ for _, message in out] == ["RunTasks", "RunTasks", "RunTask", "RunTask"]
    assert out[0][1] == m.RunTasks(FRAMEWORK, [task("t0", "a1"), task("t1", "a1")])
    assert [item for _, message in out for item in unbatched(message)] == runs
    with pytest.raises(ValueError):
        batched([], everyone, limit=m.MAX_BATCH + 1)


def test_batching_then_unbatching_gives_each_peer_its_messages_in_order():
    rng = random.Random(3)
    makers = [lambda i: m.StatusUpdate("fw-1", status(f"t{i}")), lambda i: m.Update(status(f"t{i}")),
              lambda i: m.Acknowledge("fw-1", "a1", f"t{i}", f"u{i}"),
              lambda i: m.StatusUpdateAck("a1", "fw-1", f"t{i}", f"u{i}"),
              lambda i: m.RunTask(rng.choice([FRAMEWORK, OTHER]), task(f"t{i}", "a1")),
              lambda i: m.Heartbeat(), lambda i: m.Ping("a1")]
    for _ in range(50):
        sends = [(rng.choice([AG, AG2, FW]), rng.choice(makers)(i)) for i in range(rng.randrange(60))]
        out = batched(sends, lambda peer: peer != AG2, limit=rng.randrange(1, 8))
        for peer in (AG, AG2, FW):
            assert [x for p, message in out if p == peer for x in unbatched(message)] == \
                [message for p, message in sends if p == peer]
        assert all(type(message) not in (m.StatusUpdates, m.Updates, m.Acknowledgements, m.StatusUpdateAcks,
                                         m.RunTasks) for p, message in out if p == AG2)
    assert batched_messages([m.Heartbeat()], True) == [m.Heartbeat()]
    acks = [m.Acknowledge("fw-1", "a1", f"t{i}", "u") for i in range(3)]
    assert batched_messages(acks, False) == acks and batched_messages(acks, True) == [m.Acknowledgements(acks)]


def test_one_peers_messages_are_batched_as_batched_does_for_that_peer():
    """batched_messages (an agent's or a driver's turn, one pass) makes the
    batches batched makes for one peer, in random turns of every kind, full
    batches included."""
    rng = random.Random(29)
    makers = [lambda i: m.StatusUpdate("fw-1", status(f"t{i}")), lambda i: m.Update(status(f"t{i}")),
              lambda i: m.Acknowledge("fw-1", "a1", f"t{i}", f"u{i}"),
              lambda i: m.StatusUpdateAck("a1", "fw-1", f"t{i}", f"u{i}"),
              lambda i: m.RunTask(FRAMEWORK, task(f"t{i}", "a1")), lambda i: m.RunTask(OTHER, task(f"t{i}", "a1")),
              lambda i: m.Heartbeat()]
    for _ in range(200):
        kinds = [rng.randrange(len(makers)) for _ in range(rng.randrange(0, 40))]
        if rng.random() < 0.1:
            kinds = [2] * rng.randrange(m.MAX_BATCH, 2 * m.MAX_BATCH + 3)   # over a full batch
        messages = [makers[kind](i) for i, kind in enumerate(kinds)]
        expected = [message for _, message in batched(((None, message) for message in messages), everyone)]
        assert batched_messages(messages, True) == expected
        assert batched_messages(messages, False) == messages


def test_a_batch_over_the_frame_limit_goes_in_halves_that_each_fit():
    small = Codec(SCHEMA, max_message_size=2_000)
    updates = [m.StatusUpdate("fw-1", status(f"t{i}", message="x" * 100)) for i in range(40)]
    frames = batch_frames(m.StatusUpdates(updates), small.encode)
    assert len(frames) > 1 and all(len(frame) <= 2_000 for frame in frames)
    assert [item for frame in frames for item in unbatched(small.decode(frame))] == updates
    with pytest.raises(WireError):   # one message too large stays an error, as ever
        batch_frames(m.StatusUpdate("fw-1", status("t", message="x" * 5_000)), small.encode)


# --------------------------------------------------------------------- the codec
def test_a_batch_decodes_with_every_item_checked_and_its_size_bounded():
    plain = {"v": 1, "type": "STATUS_UPDATES", "updates": [
        {"framework_id": "fw-1", "status": {"task_id": "t1", "state": "TASK_RUNNING"}},
        {"framework_id": "fw-1", "status": {"task_id": "t2", "state": 7}}]}
    with pytest.raises(WireError, match=r"STATUS_UPDATES\.updates\[1\]\.status\.state: expected str"):
        decode(msgpack.packb(plain))
    with pytest.raises(WireError, match=r"ACKNOWLEDGEMENTS\.acknowledgements\[0\]\.uuid: missing"):
        decode(msgpack.packb({"v": 1, "type": "ACKNOWLEDGEMENTS",
                              "acknowledgements": [{"framework_id": "f", "agent_id": "a", "task_id": "t"}]}))
    for count, problem in ((0, "must be >= 1"), (m.MAX_BATCH + 1, f"must be <= {m.MAX_BATCH}")):
        frame = msgpack.packb({"v": 1, "type": "UPDATES", "statuses": [{"task_id": "t", "state": "s"}] * count})
        with pytest.raises(WireError, match=f"UPDATES: Length of 'statuses' {problem}"):
            decode(frame)
    with pytest.raises(WireError, match="RUN_TASKS.framework: missing"):
        decode(msgpack.packb({"v": 1, "type": "RUN_TASKS", "tasks": []}))
    full = m.Updates([status(f"t{i}") for i in range(m.MAX_BATCH)])
    assert decode(encode(full)) == full


# ------------------------------------------------------------------ the master
def subscribe_batching(h):
    out = h.send(FW, m.Subscribe(FrameworkInfo(name="demo"), accepts_batches=True))
    (subscribed,) = only(out, m.Subscribed, FW)
    assert subscribed.accepts_batches
    return subscribed.framework_id


def register_batching(h, peer=AG, hostname="node-0"):
    out = h.send(peer, m.RegisterAgent(m.AgentInfo(hostname, R("cpus:4;mem:4096")), accepts_batches=True))
    (registered,) = only(out, m.AgentRegistered, peer)
    assert registered.accepts_batches
    return registered.agent_id


def running_tasks(h, count=3):
    fid, aid = subscribe_batching(h), register_batching(h)
    (offer,) = h.offers(h.tick())
    launch(h, fid, offer, *[task(f"t{i}", aid, "cpus:0.1;mem:16") for i in range(count)])
    return fid, aid


def test_the_master_knows_which_peers_take_batches():
    h = Harness()
    fid = subscribe_batching(h)
    h.register_agent(peer=AG2, hostname="old")   # an agent that does not say so
    aid = register_batching(h)
    assert h.core.accepts_batches(FW) and h.core.accepts_batches(AG)
    assert not h.core.accepts_batches(AG2) and not h.core.accepts_batches(b"nobody")
    h.send(FW, m.Subscribe(FrameworkInfo(name="demo", id=fid)))   # re-subscribed by a driver that does not
    assert not h.core.accepts_batches(FW)
    assert aid in h.core.agents


def test_a_batch_of_status_updates_is_applied_and_forwarded_as_each_update_would_be():
    h = Harness()
    fid, aid = running_tasks(h)
    batch = m.StatusUpdates([m.StatusUpdate(fid, status(f"t{i}", TaskState.FINISHED, exit_code=0)) for i in range(3)])
    out = h.send(AG, batch)
    forwarded = only(out, m.Update, FW)
    assert [u.status.task_id for u in forwarded] == ["t0", "t1", "t2"]
    assert all(u.status.agent_id == aid and u.status.framework_id == fid for u in forwarded)
    assert all(h.core.frameworks[fid].tasks[f"t{i}"].state == TaskState.FINISHED for i in range(3))
    # the framework acknowledges all three in one frame; the agent gets its acknowledgements
    acks = m.Acknowledgements([m.Acknowledge(fid, aid, u.status.task_id, u.status.uuid) for u in forwarded])
    out = h.send(FW, acks)
    assert [a.uuid for a in only(out, m.StatusUpdateAck, AG)] == [u.status.uuid for u in forwarded]
    assert h.core.completed_by_state == {TaskState.FINISHED: 3}
    # a retry of the whole batch is settled by the master, item by item; nothing reaches the framework again
    out = h.send(AG, batch)
    assert not only(out, m.Update) and len(only(out, m.StatusUpdateAck, AG)) == 3
    assert h.core.counters["messages_received"] > 0


def test_an_item_of_a_batch_for_a_task_the_agent_does_not_run_is_refused_and_the_rest_applied():
    h = Harness()
    fid, aid = running_tasks(h, count=2)
    other = register_batching(h, peer=AG2, hostname="node-1")
    assert other != aid
    forged = m.StatusUpdates([m.StatusUpdate(fid, status("t0", TaskState.FINISHED)),
                              m.StatusUpdate(fid, status("t1", TaskState.FAILED))])
    out = h.send(AG2, forged)   # issue 13: only the agent that runs a task speaks for it
    assert [e.message for e in only(out, m.Error, AG2)] == [
        f"not authorized: task t0 of framework {fid} does not run on agent {other}",
        f"not authorized: task t1 of framework {fid} does not run on agent {other}"]
    assert not only(out, m.Update)
    assert h.core.refused_by_permission == {"status_updates": 2}
    mixed = m.StatusUpdates([m.StatusUpdate(fid, status("t0", TaskState.FINISHED))])
    assert only(h.send(AG, mixed), m.Update, FW)[0].status.task_id == "t0"


def test_acknowledgements_for_another_frameworks_id_are_refused_item_by_item():
    h = Harness()
    fid, aid = running_tasks(h, count=1)
    out = h.send(b"intruder", m.Acknowledgements([m.Acknowledge(fid, aid, "t0", "u"),
                                                   m.Acknowledge(fid, aid, "t0", "v")]))
    assert len(only(out, m.Error, b"intruder")) == 2 and not only(out, m.StatusUpdateAck)


@pytest.mark.parametrize("seed", range(12))
def test_a_batch_of_updates_or_acknowledgements_is_its_items_sent_one_by_one(seed):
    """The master handles STATUS_UPDATES and ACKNOWLEDGEMENTS whole (a loop
    in the handler, the agent or framework looked up once a run): the same
    sends, in order, and the same tasks as each item sent alone — items of
    another framework, of an agent not registered, of unknown tasks, repeated
    and out of order mixed in, from the right and the wrong connections."""
    rng = random.Random(seed)

    def setup():
        h = Harness()
        fid, aid = running_tasks(h, count=6)
        return h, fid, aid

    (one, fid, aid), (whole, _, _) = setup(), setup()
    for _ in range(4):
        peer = rng.choice([AG, AG, AG, AG2])
        items = [m.StatusUpdate(rng.choice([fid, fid, "fw-other"]),
                                status(f"t{rng.randint(0, 7)}", rng.choice([TaskState.RUNNING, TaskState.FINISHED]),
                                       uuid=f"u{rng.randint(0, 9)}", agent_id=rng.choice([aid, "elsewhere"])))
                 for _ in range(rng.randint(1, 8))]
        alone = [send for item in items for send in one.send(peer, item)]
        assert whole.send(peer, m.StatusUpdates(items)) == alone
        peer = rng.choice([FW, FW, FW, b"intruder"])
        acks = [m.Acknowledge(rng.choice([fid, fid, "fw-other"]), rng.choice([aid, aid, "no-agent"]),
                              f"t{rng.randint(0, 7)}", f"u{rng.randint(0, 9)}") for _ in range(rng.randint(1, 8))]
        alone = [send for ack in acks for send in one.send(peer, ack)]
        assert whole.send(peer, m.Acknowledgements(acks)) == alone
        assert {t: r.state for t, r in one.core.frameworks[fid].tasks.items()} == \
            {t: r.state for t, r in whole.core.frameworks[fid].tasks.items()}
        assert one.core.completed_by_state == whole.core.completed_by_state


def _per_peer(sends):
    """Each peer's messages, batches unbatched, in order."""
    out = {}
    for peer, message in sends:
        out.setdefault(peer, []).extend(unbatched(message))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_a_core_that_batches_its_sends_says_what_batched_makes_of_its_sends(seed):
    """With ``MasterCore.batch_sends`` (the runtime's), the updates and
    acknowledgements a STATUS_UPDATES or ACKNOWLEDGEMENTS makes the core send
    come out batched already: each peer gets the same messages in the same
    order as from a core that sends them one by one, and where every one of a
    call's sends is an update or an acknowledgement (nothing settled, dropped
    or refused) the same batches as ``batched`` makes of those; a peer that
    takes no batches gets them one by one. Runs longer than SEND_BATCH are
    cut as ``batched`` cuts them."""
    from mesoslike.wire.batching import SEND_BATCH

    rng = random.Random(seed)

    def setup(batching):
        h = Harness()
        fid, aid = running_tasks(h, count=6)
        aid2 = h.register_agent(peer=AG2, hostname="old")   # takes no batches
        if batching:
            h.core.batch_sends()
        return h, fid, aid, aid2

    (one, fid, aid, aid2), (whole, _, _, _) = setup(False), setup(True)
    for _ in range(4):
        peer = rng.choice([AG, AG, AG, AG2])
        items = [m.StatusUpdate(rng.choice([fid, fid, fid, "fw-other"]),
                                status(f"t{rng.randint(0, 7)}", rng.choice([TaskState.RUNNING, TaskState.FINISHED]),
                                       uuid=f"u{rng.randint(0, 9)}", agent_id=aid))
                 for _ in range(rng.randint(1, 8))]
        alone = one.send(peer, m.StatusUpdates(items))
        out = whole.send(peer, m.StatusUpdates(items))
        assert _per_peer(out) == _per_peer(alone)
        if all(type(message) is m.Update for _, message in alone):
            assert out == batched(alone, whole.core.accepts_batches)
        peer = rng.choice([FW, FW, FW, b"intruder"])
        acks = [m.Acknowledge(rng.choice([fid, fid, fid, "fw-other"]), rng.choice([aid, aid, aid2, "no-agent"]),
                              f"t{rng.randint(0, 7)}", f"u{rng.randint(0, 9)}") for _ in range(rng.randint(1, 8))]
        alone = one.send(peer, m.Acknowledgements(acks))
        out = whole.send(peer, m.Acknowledgements(acks))
        assert _per_peer(out) == _per_peer(alone)
        if all(type(message) is m.StatusUpdateAck for _, message in alone):
            assert out == batched(alone, whole.core.accepts_batches)
        assert not [message for p, message in out if p == AG2 and type(message) in BATCH_TYPES]
    # a run longer than a batch: cut where batched cuts it
    acks = [m.Acknowledge(fid, aid, f"t{i % 6}", f"x{i}") for i in range(SEND_BATCH + 3)]
    alone = one.send(FW, m.Acknowledgements(acks))
    assert whole.send(FW, m.Acknowledgements(acks)) == batched(alone, whole.core.accepts_batches)


@pytest.mark.parametrize("count", [1, 5, 250 + 3])
def test_a_core_that_batches_its_sends_launches_an_accepts_tasks_as_batched_does(count):
    """With ``MasterCore.batch_sends``, an ACCEPT's launches come out as
    RUN_TASKS already (``Outbox.run_task``): the same sends as ``batched``
    makes of a core's that launches them one by one (one RUN_TASK alone,
    runs cut at SEND_BATCH); an agent that takes no batches gets a RUN_TASK
    a task."""
    def setup(batching):
        h = Harness()
        fid = subscribe_batching(h)
        aid = register_batching(h)
        aid2 = h.register_agent(peer=AG2, hostname="old")   # takes no batches
        if batching:
            h.core.batch_sends()
        offers = {o.agent_id: o for o in h.offers(h.tick())}
        return h, fid, aid, aid2, offers

    (one, fid, aid, aid2, offers), (whole, _, _, _, whole_offers) = setup(False), setup(True)
    for agent_id, peer in ((aid, AG), (aid2, AG2)):
        tasks = [task(f"{agent_id}-t{i}", agent_id, "cpus:0.001;mem:1") for i in range(count)]
        alone = launch(one, fid, offers[agent_id], *tasks)
        out = launch(whole, fid, whole_offers[agent_id], *tasks)
        assert out == batched(alone, whole.core.accepts_batches)
        launched = [t.task_id for message in unbatched_to(out, peer) for t in message]
        assert launched == [t.task_id for t in tasks]
        if peer == AG2:
            assert all(type(message) is m.RunTask for p, message in out if p == AG2)


def unbatched_to(out, peer):
    """The tasks of each RUN_TASK or RUN_TASKS sent to ``peer``, in order."""
    return [message.tasks if type(message) is m.RunTasks else [message.task]
            for p, message in out if p == peer and type(message) in (m.RunTask, m.RunTasks)]


def test_the_master_refuses_batches_only_it_sends():
    h = Harness()
    out = h.send(AG, m.StatusUpdateAcks([m.StatusUpdateAck("a", "f", "t", "u")]))
    assert "unexpected message StatusUpdateAcks" in only(out, m.Error, AG)[0].message
    out = h.send(FW, m.Updates([status("t")]))
    assert "unexpected message Updates" in only(out, m.Error, FW)[0].message


# ------------------------------------------------------------------- the agent
def registered_agent():
    core, clock = agent_tests.make()
    (msg,) = agent_tests.messages(core.tick())
    assert msg.accepts_batches   # it says so
    core.on_message(m.AgentRegistered("agent-1", agent_tests.MASTER, 1.0, accepts_batches=True))
    assert core.master_accepts_batches
    return core, clock


def test_the_agent_runs_a_batch_of_launches_as_each_launch():
    core, _ = registered_agent()
    out = core.on_message(m.RunTasks(FRAMEWORK, [agent_tests.task(f"t{i}", "cpus:1;mem:128") for i in range(3)]))
    assert [c.task.task_id for c in out if isinstance(c, LaunchTask)] == ["t0", "t1", "t2"]
    starting = [c.message.status for c in out if isinstance(c, SendToMaster)]
    assert [(s.task_id, s.state) for s in starting] == [(f"t{i}", TaskState.STARTING) for i in range(3)]
    again = core.on_message(m.RunTasks(FRAMEWORK, [agent_tests.task("t0", "cpus:1;mem:128"),
                                                  agent_tests.task("t9", "cpus:4;mem:128")]))
    # t0 is known: its update in flight again, never a second run; t9 does not fit: TASK_ERROR
    assert not [c for c in again if isinstance(c, LaunchTask)]
    assert [(s.task_id, s.state) for s in agent_tests.updates(again)] == [("t0", TaskState.STARTING),
                                                                         ("t9", TaskState.ERROR)]


def test_the_agent_takes_a_batch_of_acknowledgements_and_sends_each_tasks_next_update():
    core, _ = registered_agent()
    heads = []
    for i in range(3):
        heads.append(agent_tests.launch(core, f"t{i}")[0])
    acks = m.StatusUpdateAcks([m.StatusUpdateAck("agent-1", "fw-1", s.task_id, s.uuid) for s in heads] +
                              [m.StatusUpdateAck("agent-1", "fw-1", "t0", "not-in-flight")])
    out = core.on_message(acks)
    nexts = agent_tests.updates(out)
    assert [(s.task_id, s.state) for s in nexts] == [(f"t{i}", TaskState.RUNNING) for i in range(3)]
    assert all(core.pending_updates("fw-1", f"t{i}")[0].state == TaskState.RUNNING for i in range(3))
    # what the runtime sends: the three updates in one STATUS_UPDATES frame
    (frame,) = batched_messages(agent_tests.messages(out), core.master_accepts_batches)
    assert frame == m.StatusUpdates([m.StatusUpdate("fw-1", s) for s in nexts])


def test_an_agent_of_a_master_that_takes_no_batches_sends_one_update_a_frame():
    core, _ = agent_tests.make()
    agent_tests.register(core)   # AGENT_REGISTERED without accepts_batches: an older master
    assert not core.master_accepts_batches
    first = [agent_tests.launch(core, f"t{i}")[0] for i in range(2)]
    out = core.on_message(m.StatusUpdateAcks([m.StatusUpdateAck("agent-1", "fw-1", s.task_id, s.uuid)
                                              for s in first]))
    assert [type(x) for x in batched_messages(agent_tests.messages(out), core.master_accepts_batches)] == \
        [m.StatusUpdate, m.StatusUpdate]


# ------------------------------------------------------------------ the driver
def test_the_driver_delivers_a_batch_of_updates_once_each_and_acknowledges_them_in_one_frame():
    core, _ = driver_tests.make_core()
    (subscribe,) = driver_tests.sent(core.start())
    assert subscribe.accepts_batches
    core.receive(m.Subscribed("fw-1", 1.0, driver_tests.MASTER, accepts_batches=True))
    statuses = [status(f"t{i}", agent_id="a1") for i in range(3)]
    commands = core.receive(m.Updates([*statuses, statuses[1]]))   # one of them twice
    delivered = [args[0] for name, args in driver_tests.callbacks(commands) if name == "status_update"]
    assert delivered == statuses
    acks = driver_tests.sent(driver_tests.run_callbacks(core, commands))
    assert batched_messages(acks, core.master_accepts_batches) == [m.Acknowledgements(
        [m.Acknowledge("fw-1", "a1", s.task_id, s.uuid) for s in statuses])]
    # redelivered in a later batch: not given to the scheduler again (issue 12)
    again = core.receive(m.Updates(statuses))
    assert not driver_tests.callbacks(again) and core.redeliveries == 4


def test_a_driver_of_a_master_that_takes_no_batches_acknowledges_one_by_one():
    core, _ = driver_tests.make_core()
    core.start()
    driver_tests.subscribed(core)
    commands = core.receive(m.Updates([status("t1", agent_id="a1"), status("t2", agent_id="a1")]))
    acks = driver_tests.sent(driver_tests.run_callbacks(core, commands))
    assert batched_messages(acks, core.master_accepts_batches) == acks and len(acks) == 2
