"""Dynamic reservations (issue 18 §4), sans I/O: RESERVE and UNRESERVE
offer operations on the master core, the operator's reserve/unreserve, the
allocator's bookkeeping of them, the registry and the agent's checkpoint.

The first master tests are Apache Mesos's cases, ported
(``src/tests/reservation_tests.cpp``: ``ReserveThenUnreserve``,
``ReserveAndLaunchThenUnreserve``; ``master_validation_tests.cpp`` /
``reservation_tests.cpp``: an unauthorized unreserve and a reserve of more
than offered are refused). Fake clock, peers are byte strings."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator_helpers import make as make_allocator
from mesoslike import Launch, Reserve, Unreserve
from mesoslike.acl import Acls, Credentials, Principal, Refused
from mesoslike.agent.core import AgentCore, CheckpointReservations, SendToMaster
from mesoslike.cli.state import format_state
from mesoslike.clock import FakeClock
from mesoslike.errors import ConfigError, MesoslikeError
from mesoslike.master import MasterConfig, MasterCore
from mesoslike.master.operations import Conflict
from mesoslike.master.registry import Registry
from mesoslike.master.state import master_metrics, state_json
from mesoslike.metrics import render
from mesoslike.master.operator import label_pairs
from mesoslike.master.reservations import MAX_DYNAMIC_RESERVATIONS_PER_AGENT
from mesoslike.resources import Resources, reservation_labels, reservation_principal
from mesoslike.wire import AgentInfo, Filters, FrameworkInfo, MasterInfo, TaskInfo, TaskState, TaskStatus
from mesoslike.wire import CODEC, Label
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
FW, FW2, AG = b"fw-peer", b"fw2-peer", b"agent-peer"


class Harness:
    """A master core; with ``secured`` it has credentials (principals
    alice, bob: frameworks; ops: operator; agent: agent) and each peer
    speaks as the principal ``as_`` names."""

    def __init__(self, secured: bool = False, registry: Registry | None = None, acls: dict | None = None):
        self.clock = FakeClock()
        credentials = None
        if secured or acls is not None:
            principals = {name: Principal(name, f"key-{name}".encode(), frozenset([kind]))
                          for name, kind in (("alice", "framework"), ("bob", "framework"), ("ops", "operator"),
                                             ("admin", "operator"), ("agent", "agent"))}
            credentials = Credentials(principals, Acls.parse(acls))
        self.principals = {FW: "alice", FW2: "bob", AG: "agent"} if credentials is not None else {}
        self.core = MasterCore(self.clock, MasterInfo("m", "tcp://127.0.0.1:1"),
                               MasterConfig(heartbeat_interval=1.0, ping_interval=1.0), registry=registry,
                               credentials=credentials)

    def send(self, peer, message):
        out = [(s.peer, s.message) for s in self.core.on_message(peer, message, self.principals.get(peer))]
        self.core._check()   # the books' invariants hold after every message
        return out

    def tick(self, advance=1.0):
        self.clock.advance(advance)
        return [(s.peer, s.message) for s in self.core.tick()]

    def subscribe(self, peer=FW, role="analytics", **info):
        out = self.send(peer, m.Subscribe(FrameworkInfo(name="demo", role=role, user="nobody", **info)))
        (subscribed,) = only(out, m.Subscribed)
        return subscribed.framework_id

    def register_agent(self, resources="cpus:4;mem:4096"):
        out = self.send(AG, m.RegisterAgent(AgentInfo("node-0", R(resources))))
        (registered,) = only(out, m.AgentRegistered)
        return registered.agent_id

    def offer(self, peer=FW, advance=1.0):
        offers = [o for p, msg in self.tick(advance) if p == peer and isinstance(msg, m.Offers) for o in msg.offers]
        assert len(offers) == 1, offers
        self.core.allocator.check_invariants()
        return offers[0]

    def accept(self, fid, offer, *operations, peer=FW, refuse=0.0):
        out = self.send(peer, m.Accept(fid, [offer.id], [], Filters(refuse), operations=list(operations)))
        self.core.allocator.check_invariants()
        return out


def only(out, kind, peer=None):
    return [msg for p, msg in out if isinstance(msg, kind) and (peer is None or p == peer)]


def task(tid, agent_id, resources):
    return TaskInfo(tid, agent_id, "sleep 1", R(resources))


def checkpointed(out):
    (checkpoint,) = only(out, m.CheckpointResources, AG)
    return checkpoint.reservations


# ================================================== Mesos reservation_tests
def test_reserve_then_unreserve():
    """ReservationTest.ReserveThenUnreserve: a framework reserves part of an
    offer; the next offer holds it reserved for its role with its principal;
    it unreserves it; the next offer holds it unreserved again. The agent is
    told its reservations each time, the registry keeps the agent's total."""
    h = Harness(secured=True)
    fid, aid = h.subscribe(), h.register_agent()
    offer = h.offer()
    assert offer.resources == R("cpus:4;mem:4096")

    out = h.accept(fid, offer, Reserve("cpus:1;mem:512"))
    assert checkpointed(out) == R("cpus(analytics,alice):1;mem(analytics,alice):512")
    assert not only(out, m.Error)
    assert h.core.registry.agents[aid].resources == R("cpus:3;mem:3584;cpus(analytics,alice):1;"
                                                       "mem(analytics,alice):512")
    offer = h.offer()
    assert offer.resources == R("cpus:3;mem:3584;cpus(analytics,alice):1;mem(analytics,alice):512")

    out = h.accept(fid, offer, Unreserve("cpus(analytics,alice):1;mem(analytics,alice):512"))
    assert checkpointed(out) == R("")
    assert h.offer().resources == R("cpus:4;mem:4096")
    assert h.core.registry.agents[aid].resources == R("cpus:4;mem:4096")
    assert h.core.counters["reservation_operations"] == 2


def test_reserve_and_launch_then_unreserve():
    """ReservationTest.ReserveAndLaunchThenUnreserve: a task in the same
    accept runs on what the RESERVE before it reserved; the agent hears of
    the reservation before the task; once the task ended its resources come
    back reserved, and are unreserved."""
    h = Harness()
    fid, aid = h.subscribe(), h.register_agent()
    offer = h.offer()
    reserved = "cpus(analytics,):1;mem(analytics,):512"   # an anonymous cluster: no principal
    out = h.accept(fid, offer, Reserve("cpus:1;mem:512"), Launch([task("t1", aid, reserved)]))
    to_agent = [type(msg) for p, msg in out if p == AG]
    assert to_agent == [m.CheckpointResources, m.RunTask]
    (run,) = only(out, m.RunTask)
    assert run.task.resources == R(reserved)

    h.send(AG, m.StatusUpdate(fid, TaskStatus("t1", TaskState.FINISHED, agent_id=aid, framework_id=fid, uuid="u1",
                                              source="SOURCE_AGENT")))
    offer = h.offer()
    assert offer.resources == R("cpus:4;mem:4096").subtract_clamped(R("cpus:1;mem:512")) + R(reserved)
    out = h.accept(fid, offer, Unreserve(reserved))
    assert checkpointed(out) == R("")
    assert h.offer().resources == R("cpus:4;mem:4096")


def test_a_reservation_is_offered_only_to_its_role():
    """Reserved resources go to the role (and its sub-roles) only: a
    framework in another role is offered the unreserved rest."""
    h = Harness()
    fid, aid = h.subscribe(), h.register_agent()
    h.accept(fid, h.offer(), Reserve("cpus:3;mem:3000"), refuse=3600.0)
    other = h.subscribe(FW2, role="web")
    offer = h.offer(FW2)
    assert offer.framework_id == other
    assert offer.resources == R("cpus:1;mem:1096")
    stats = h.core.allocator.statistics()
    assert stats.reserved["analytics"] == R("cpus(analytics,):3;mem(analytics,):3000")


def test_unreserving_what_another_principal_reserved_is_refused_and_nothing_applied():
    """An UNRESERVE of a reservation made by another principal is refused
    (with credentials); nothing of the accept is applied: its task is
    dropped, the offer comes back whole and unfiltered."""
    h = Harness(secured=True)
    alice, aid = h.subscribe(), h.register_agent()
    h.accept(alice, h.offer(), Reserve("cpus:2;mem:1024"), refuse=3600.0)
    bob = h.subscribe(FW2)
    h.send(FW, m.Suppress(alice))
    offer = h.offer(FW2)
    assert offer.resources.reserved() == R("cpus(analytics,alice):2;mem(analytics,alice):1024")
    out = h.accept(bob, offer, Launch([task("t1", aid, "cpus:1")]),
                   Unreserve("cpus(analytics,alice):2;mem(analytics,alice):1024"), peer=FW2)
    (error,) = only(out, m.Error, FW2)
    assert "not authorized" in error.message and "alice" in error.message and not error.fatal
    (update,) = only(out, m.Update, FW2)
    assert update.status.state == TaskState.DROPPED and "nothing was applied" in update.status.message
    assert not only(out, m.RunTask) and not only(out, m.CheckpointResources)
    assert h.offer(FW2).resources == offer.resources   # back at once: no filter
    assert h.core.counters["operations_refused"] == 1
    metrics = render(master_metrics(h.core))
    assert "mesoslike_accepts_refused_total 1" in metrics and "mesoslike_reservation_operations_total 1" in metrics


@pytest.mark.parametrize("operations, fragment", [
    (lambda aid: [Reserve("cpus:5")], "is not in what the offers hold"),
    (lambda aid: [Launch([task("t1", aid, "cpus:3")]), Reserve("cpus:2")], "after the operations before it"),
    (lambda aid: [Reserve("cpus:1", role="web")], "reserves for its own role"),
    (lambda aid: [Reserve("cpus(analytics):1")], "only unreserved resources"),
    (lambda aid: [Unreserve("cpus:1")], "only dynamically reserved"),
    (lambda aid: [Unreserve("cpus(analytics,):1")], "is not in what the offers hold"),
    (lambda aid: [Reserve("")], "nothing to reserve"),
])
def test_invalid_operations_refuse_the_whole_accept(operations, fragment):
    """Insufficient resources and other invalid RESERVE/UNRESERVE: a clear
    ERROR, nothing half-applied (the offer comes back whole)."""
    h = Harness()
    fid, aid = h.subscribe(), h.register_agent()
    offer = h.offer()
    out = h.accept(fid, offer, *operations(aid))
    (error,) = only(out, m.Error, FW)
    assert fragment in error.message, error.message
    assert not only(out, m.RunTask) and not only(out, m.CheckpointResources)
    assert h.core.allocator.available(aid) == R("cpus:4;mem:4096")
    assert h.offer().resources == R("cpus:4;mem:4096")


def test_a_framework_in_the_default_role_cannot_reserve():
    h = Harness()
    fid, _ = h.subscribe(role="*"), h.register_agent()
    (error,) = only(h.accept(fid, h.offer(), Reserve("cpus:1")), m.Error)
    assert "default role" in error.message


def test_tasks_given_with_operations_launch_after_them_and_invalid_tasks_alone_fail():
    """``Accept.tasks`` is a last LAUNCH; a task that does not fit fails
    alone (TASK_ERROR), the reservation and the other task apply."""
    h = Harness()
    fid, aid = h.subscribe(), h.register_agent()
    offer = h.offer()
    out = h.send(FW, m.Accept(fid, [offer.id], [task("t2", aid, "cpus(analytics,):1")], Filters(0.0),
                              operations=[Reserve("cpus:1"), Launch([task("t1", aid, "cpus:9")])]))
    (update,) = only(out, m.Update)
    assert (update.status.task_id, update.status.state) == ("t1", TaskState.ERROR)
    assert [r.task.task_id for r in only(out, m.RunTask)] == ["t2"]
    assert checkpointed(out) == R("cpus(analytics,):1")


# ============================================================== operator
def test_operator_reserve_rescinds_offers_that_hold_it_and_unreserve_returns_it():
    h = Harness(secured=True)
    fid, aid = h.subscribe(), h.register_agent()
    offer = h.offer()
    reply, sends = h.core.reserve_resources(aid, "cpus(analytics):2;mem(analytics):1024", "ops")
    out = [(s.peer, s.message) for s in sends]
    (rescind,) = only(out, m.RescindOffer, FW)
    assert rescind.offer_id == offer.id
    assert checkpointed(out) == R("cpus(analytics,ops):2;mem(analytics,ops):1024")
    assert reply["resources"] == "cpus(analytics,ops):2;mem(analytics,ops):1024"
    h.core.allocator.check_invariants()
    assert h.offer().resources == R("cpus:2;mem:3072;cpus(analytics,ops):2;mem(analytics,ops):1024")
    # what is offered now is rescinded again for the unreserve
    reply, sends = h.core.unreserve_resources("node-0", "cpus(analytics,ops):2", "ops")
    assert checkpointed([(s.peer, s.message) for s in sends]) == R("mem(analytics,ops):1024")
    assert reply["total"] == "cpus:4;mem:3072;mem(analytics,ops):1024"
    h.core.allocator.check_invariants()


def test_operator_unreserve_takes_the_string_reserve_took_and_names_a_static_reservation():
    """``mesoslike unreserve`` takes back what ``mesoslike reserve`` was given:
    ``cpus(analytics):1`` names the role's reservation by the operator."""
    h = Harness(secured=True)
    h.subscribe()
    aid = h.register_agent("cpus:4;mem:4096;cpus(web):1")
    h.core.reserve_resources(aid, "cpus(analytics):1;mem(analytics):64", "ops")
    reply, _ = h.core.unreserve_resources(aid, "cpus(analytics):1;mem(analytics):64", "ops")
    assert reply["unreserved"] == "cpus(analytics,ops):1;mem(analytics,ops):64"
    assert h.core.agents[aid].info.resources == R("cpus:4;mem:4096;cpus(web):1")
    # a static reservation is said to be one, and why it cannot be unreserved
    with pytest.raises(Conflict, match=r"has no cpus\(web,ops\):1 .*; its cpus\(web\):1 is a static reservation "
                                       r"\(the agent's --resources\)"):
        h.core.unreserve_resources(aid, "cpus(web):1", "ops")
    h.core.allocator.check_invariants()


def test_operator_reserve_of_what_tasks_use_or_the_agent_lacks_is_a_conflict():
    h = Harness()
    fid, aid = h.subscribe(), h.register_agent()
    h.send(FW, m.Accept(fid, [h.offer().id], [task("t1", aid, "cpus:3")], Filters(0.0)))
    offer = h.offer()   # the rest is offered: a refused reserve rescinds nothing
    with pytest.raises(Conflict, match="in use by tasks"):
        h.core.reserve_resources(aid, "cpus(analytics):2", None)
    assert h.core.allocator.get_offer(offer.id) is not None
    with pytest.raises(Conflict, match="has no"):
        h.core.reserve_resources(aid, "cpus(analytics):9", None)
    with pytest.raises(MesoslikeError, match="one role"):
        h.core.reserve_resources(aid, "cpus:1", None)
    with pytest.raises(MesoslikeError, match="only dynamically reserved"):
        h.core.unreserve_resources(aid, "cpus:1")
    assert h.core.agents[aid].info.resources == R("cpus:4;mem:4096")
    h.core.allocator.check_invariants()


# ============================================== failover, agent authority
def test_the_registry_keeps_reservations_for_a_new_leader():
    h = Harness()
    fid, aid = h.subscribe(), h.register_agent()
    h.accept(fid, h.offer(), Reserve("cpus:1;mem:100"))
    stored = Registry.from_document(h.core.registry.to_document())
    assert stored.agents[aid].resources == R("cpus:3;mem:3996;cpus(analytics,):1;mem(analytics,):100")
    new = Harness(registry=stored)   # a new leader knows them before the agent re-registers
    assert new.core.registry.agents[aid].resources.dynamically_reserved() == R("cpus(analytics,):1;"
                                                                              "mem(analytics,):100")
    # /state shows the agent it expects back with them (Mesos's recovered_slaves), not as registered
    doc = state_json(new.core)
    assert doc["agents"] == []
    (recovered,) = doc["recovered_agents"]
    assert (recovered["id"], recovered["hostname"]) == (aid, "node-0")
    assert recovered["reservations"] == [{"role": "analytics", "type": "dynamic", "principal": "",
                                          "resources": "cpus(analytics,):1;mem(analytics,):100"}]
    shown = format_state(doc)
    assert "agents expected back after the failover (1)" in shown and "dynamic reservations (1)" in shown
    new.send(AG, m.ReregisterAgent(AgentInfo("node-0", stored.agents[aid].resources, id=aid), [], []))
    doc = state_json(new.core)
    assert doc["recovered_agents"] == [] and [a["id"] for a in doc["agents"]] == [aid]
    assert doc["agents"][0]["reservations"] == recovered["reservations"]


def test_a_reregistering_agents_total_is_authoritative():
    """Mesos: the agent's checkpointed resources win on re-registration (the
    agent did not get the reservation, say)."""
    h = Harness()
    fid, aid = h.subscribe(), h.register_agent()
    h.accept(fid, h.offer(), Reserve("cpus:1"))
    h.send(AG, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id=aid), [], []))
    assert h.core.agents[aid].info.resources == R("cpus:4;mem:4096")
    assert h.core.registry.agents[aid].resources == R("cpus:4;mem:4096")
    h.core.allocator.check_invariants()


# ============================================ ACLs: reserve_resources, unreserve_resources
#: Mesos's ACLs for reservations: alice may reserve for analytics, bob for nothing; ops for web only, admin for
#: any role; bob may unreserve what alice reserved, alice nothing; ops what ops reserved, admin anyone's
RESERVATION_ACLS = {
    "reserve_resources": [{"principals": ["alice"], "roles": ["analytics"]},
                          {"principals": ["ops"], "roles": ["web"]}, {"principals": ["admin"], "roles": ["*"]}],
    "unreserve_resources": [{"principals": ["bob"], "reserver_principals": ["alice"]},
                            {"principals": ["ops"], "reserver_principals": ["ops"]},
                            {"principals": ["admin"], "reserver_principals": ["*"]}],
}


def test_acls_say_which_principals_reserve_for_which_roles_and_unreserve_whose_reservations():
    """The rules as Mesos has them (``roles``, ``reserver_principals``);
    without rules operators may do both to anything, frameworks reserve
    and unreserve only what their own principal reserved."""
    credentials = Harness(acls=RESERVATION_ACLS).core.credentials
    assert credentials.allows("reserve_resources", "alice", "analytics", "framework")
    assert not credentials.allows("reserve_resources", "alice", "web", "framework")
    assert not credentials.allows("reserve_resources", "bob", "analytics", "framework")
    assert credentials.allows("reserve_resources", "admin", "anything")
    assert credentials.allows("unreserve_resources", "bob", "alice", "framework")
    assert not credentials.allows("unreserve_resources", "alice", "alice", "framework")   # rules: only grants
    assert not credentials.allows("unreserve_resources", "ops", "alice")
    assert credentials.allows("unreserve_resources", "admin", "")   # made without credentials
    with pytest.raises(Refused, match="principal ops lacks the unreserve_resources permission on what principal "
                                      "'alice' reserved"):
        credentials.check("unreserve_resources", "ops", "alice")
    defaults = Harness(secured=True).core.credentials
    assert defaults.allows("reserve_resources", "ops", "any") and defaults.allows("unreserve_resources", "ops", "x")
    assert defaults.allows("reserve_resources", "alice", "analytics", "framework")
    assert defaults.allows("unreserve_resources", "alice", "alice", "framework")
    assert not defaults.allows("unreserve_resources", "alice", "bob", "framework")
    assert not defaults.allows("reserve_resources", "alice", "analytics")   # as an operator: not one
    with pytest.raises(ConfigError, match="unknown key"):
        Acls.parse({"unreserve_resources": [{"principals": ["ops"], "roles": ["web"]}]})


def test_a_framework_reserves_only_for_roles_the_acls_allow_its_principal():
    h = Harness(acls=RESERVATION_ACLS)
    alice, aid = h.subscribe(), h.register_agent()
    out = h.accept(alice, h.offer(), Reserve("cpus:1"), refuse=3600.0)
    assert checkpointed(out) == R("cpus(analytics,alice):1") and not only(out, m.Error)
    bob = h.subscribe(FW2)
    h.send(FW, m.Suppress(alice))
    offer = h.offer(FW2)
    out = h.accept(bob, offer, Reserve("cpus:1"), Launch([task("t1", aid, "cpus:1")]), peer=FW2)
    (error,) = only(out, m.Error, FW2)
    assert "operation 1 (RESERVE): not authorized: principal bob lacks the reserve_resources permission for " \
           "role 'analytics'" in error.message and not error.fatal
    (update,) = only(out, m.Update, FW2)
    assert update.status.state == TaskState.DROPPED and "nothing was applied" in update.status.message
    assert not only(out, m.RunTask) and not only(out, m.CheckpointResources)
    assert h.offer(FW2).resources == offer.resources   # back whole, unfiltered
    assert h.core.refused_by_permission == {"reserve_resources": 1}
    assert 'mesoslike_authorization_refused_total{permission="reserve_resources"} 1' in render(master_metrics(h.core))


def test_a_framework_unreserves_only_what_the_acls_let_it_and_may_unreserve_another_principals():
    h = Harness(acls=RESERVATION_ACLS)
    alice, aid = h.subscribe(), h.register_agent()
    h.accept(alice, h.offer(), Reserve("cpus:2"))
    offer = h.offer()
    (error,) = only(h.accept(alice, offer, Unreserve("cpus(analytics,alice):1")), m.Error, FW)
    assert "alice lacks the unreserve_resources permission on what principal 'alice' reserved" in error.message
    bob = h.subscribe(FW2)
    h.send(FW, m.Suppress(alice))
    out = h.accept(bob, h.offer(FW2), Unreserve("cpus(analytics,alice):2"), peer=FW2)
    assert not only(out, m.Error) and checkpointed(out) == R("")


def test_the_operator_reserves_for_and_unreserves_from_whom_the_acls_say():
    h = Harness(acls=RESERVATION_ACLS)
    alice, aid = h.subscribe(), h.register_agent()
    h.accept(alice, h.offer(), Reserve("cpus:1"), refuse=3600.0)
    with pytest.raises(Refused, match="principal ops lacks the reserve_resources permission for role 'analytics'"):
        h.core.reserve_resources(aid, "cpus(analytics):1", "ops")
    reply, _ = h.core.reserve_resources(aid, "cpus(web):1", "ops")
    assert reply["resources"] == "cpus(web,ops):1"
    with pytest.raises(Refused, match="on what principal 'alice' reserved"):   # any of the reservers refused
        h.core.unreserve_resources(aid, "cpus(analytics,alice):1;cpus(web,ops):1", "ops")
    assert h.core.agents[aid].info.resources == R("cpus:2;mem:4096;cpus(analytics,alice):1;cpus(web,ops):1")
    h.core.unreserve_resources(aid, "cpus(web,ops):1", "ops")
    h.core.unreserve_resources(aid, "cpus(analytics,alice):1", "admin")
    assert h.core.agents[aid].info.resources == R("cpus:4;mem:4096")
    assert h.core.refused_by_permission == {"reserve_resources": 1, "unreserve_resources": 1}
    h.core.allocator.check_invariants()


# ==================================================== reservation labels
def test_reservation_labels_are_part_of_the_kind_and_never_merged():
    """Mesos's ``ReservationInfo.labels``: labelled reservations are kinds
    of their own (different labels: different kinds, never merged), kept
    in one canonical order; label text that cannot be written in a kind is
    refused."""
    labelled = R("cpus(a,alice,team=ml&purpose=etl):2")
    assert str(labelled) == "cpus(a,alice,purpose=etl&team=ml):2"   # sorted: one kind however written
    assert reservation_labels("cpus(a,alice,purpose=etl&team=ml)") == (("purpose", "etl"), ("team", "ml"))
    assert reservation_principal("cpus(a,alice,team=ml)") == "alice" and reservation_labels("cpus(a,alice)") == ()
    both = labelled + R("cpus(a,alice):1") + R("cpus(a,alice,team=ai):1")
    assert len(both.scalars()) == 3 and both.stripped() == R("cpus:4")
    assert R("cpus:2").as_reserved("a", "alice", [("team", "ml"), ("purpose", "etl")]) == labelled
    assert labelled.as_unreserved() == R("cpus:2")
    assert labelled.reservation_roles() == ["a"] and labelled.dynamically_reserved() == labelled
    for bad in ("cpus(a,alice,team=m l):1", "cpus(a,alice,=x):1", "cpus(a,alice,):1", "cpus(a,alice,k=v,w):1",
                "cpus(a,alice," + "&".join(f"k{i}=v" for i in range(17)) + "):1"):
        with pytest.raises(MesoslikeError):
            R(bad)
    with pytest.raises(MesoslikeError, match="cannot be part of a kind"):
        R("cpus:1").as_reserved("a", "alice", [("team", "a;b")])


def test_a_framework_reserves_with_labels_and_unreserves_them_as_offered():
    h = Harness(secured=True)
    alice, aid = h.subscribe(), h.register_agent()
    operation = Reserve("cpus:1", labels={"team": "ml"})
    assert CODEC.decode(CODEC.encode(m.Accept(alice, ["o"], [], Filters(0.0), operations=[operation]))) \
        .operations == [operation]
    out = h.accept(alice, h.offer(), Reserve("cpus:1;mem:64", labels={"team": "ml"}), Reserve("cpus:1"))
    assert checkpointed(out) == R("cpus(analytics,alice,team=ml):1;mem(analytics,alice,team=ml):64;"
                                  "cpus(analytics,alice):1")
    offer = h.offer()
    assert offer.resources.dynamically_reserved() == checkpointed(out)
    (entry, labelled) = [r for r in state_json(h.core)["agents"][0]["reservations"]]
    assert entry == {"role": "analytics", "type": "dynamic", "principal": "alice",
                     "resources": "cpus(analytics,alice):1"}
    assert labelled == {"role": "analytics", "type": "dynamic", "principal": "alice",
                        "labels": [{"key": "team", "value": "ml"}],
                        "resources": "cpus(analytics,alice,team=ml):1;mem(analytics,alice,team=ml):64"}
    # the labels are part of what is unreserved: the unlabelled kind is another one
    (error,) = only(h.accept(alice, offer, Unreserve("cpus(analytics,alice):2")), m.Error)
    assert "is not in what the offers hold" in error.message
    out = h.accept(alice, h.offer(), Unreserve("cpus(analytics,alice,team=ml):1;mem(analytics,alice,team=ml):64"),
                   Launch([task("t1", aid, "cpus(analytics,alice):1")]))
    assert checkpointed(out) == R("cpus(analytics,alice):1") and only(out, m.RunTask)
    for operations, fragment in (([Reserve("cpus:1", labels={"team": "m l"})], "cannot be part of a kind"),
                                 ([Unreserve("cpus(analytics,alice):1")], "only a RESERVE carries labels")):
        if fragment.startswith("only"):
            operations = [operations[0].replace(labels={"team": "ml"})]
        (error,) = only(h.accept(alice, h.offer(), *operations), m.Error)
        assert fragment in error.message, error.message


def test_labels_cannot_grow_an_agents_reservations_without_bound():
    """Each new set of labels is a new kind: at most
    MAX_DYNAMIC_RESERVATIONS_PER_AGENT distinct dynamic reservations per
    agent, for frameworks (the accept is refused) and the operator (409)."""
    h = Harness(secured=True)
    alice, aid = h.subscribe(), h.register_agent()
    out = h.accept(alice, h.offer(), Reserve("cpus:0.01", labels={"n": "0"}))
    assert not only(out, m.Error), only(out, m.Error)
    for number in range(1, MAX_DYNAMIC_RESERVATIONS_PER_AGENT):   # the operator's: no time passes
        h.core.reserve_resources(aid, "cpus(analytics):0.01", "ops", [("n", str(number))])
    (error,) = only(h.accept(alice, h.offer(), Reserve("cpus:0.01", labels={"n": "one-more"})), m.Error)
    assert f"at most {MAX_DYNAMIC_RESERVATIONS_PER_AGENT} are allowed" in error.message
    out = h.accept(alice, h.offer(), Reserve("cpus:0.01", labels={"n": "0"}))   # one already held: no new kind
    assert not only(out, m.Error)
    with pytest.raises(Conflict, match="distinct dynamic reservations"):
        h.core.reserve_resources(aid, "cpus(web):1", "ops")
    with pytest.raises(MesoslikeError, match="at most 255"):
        R("cpus:1").as_reserved("a", "alice", [("k", "v" * 300)])


def test_the_operator_reserves_with_labels():
    h = Harness(secured=True)
    aid = h.register_agent()
    reply, sends = h.core.reserve_resources(aid, "cpus(web):1", "ops", [("ticket", "OPS-42")])
    assert reply["resources"] == "cpus(web,ops,ticket=OPS-42):1"
    assert checkpointed([(s.peer, s.message) for s in sends]) == R("cpus(web,ops,ticket=OPS-42):1")
    assert label_pairs([{"key": "ticket", "value": "OPS-42"}, {"key": "urgent"}]) == [("ticket", "OPS-42"),
                                                                                       ("urgent", "")]
    with pytest.raises(ValueError, match="expected labels"):
        label_pairs([{"ticket": "OPS-42"}])
    with pytest.raises(MesoslikeError, match="cannot be part of a kind"):
        h.core.reserve_resources(aid, "cpus(web):1", "ops", [("ticket", "OPS 42")])
    h.core.unreserve_resources(aid, "cpus(web,ops,ticket=OPS-42):1", "ops")
    assert h.core.agents[aid].info.resources == R("cpus:4;mem:4096")


def test_pymesos_shapes_carry_reservation_labels_both_ways():
    """The pymesos shim shows a labelled reservation as Mesos's
    ``reservation: {principal, labels: {labels: [...]}}`` and reads one
    back, and its RESERVE keeps the labels."""
    from mesoslike.compat._pymesos_shapes import operations_from, resources_from, resources_message
    labelled = R("cpus(analytics,alice,team=ml):2;cpus(analytics,alice):1")
    items = resources_message(labelled)
    assert {"name": "cpus", "role": "analytics", "type": "SCALAR", "scalar": {"value": 2.0},
            "reservation": {"principal": "alice", "labels": {"labels": [{"key": "team", "value": "ml"}]}}} in items
    assert resources_from(items, "resources") == labelled
    labelled_items = [item for item in items if "labels" in item["reservation"]]
    (operation,) = operations_from([{"type": "RESERVE", "reserve": {"resources": labelled_items}}])
    assert (operation.role, operation.resources, operation.labels) == ("analytics", R("cpus:2"),
                                                                       [Label("team", "ml")])


# ============================================================= allocator
def test_allocator_convert_offered_keeps_shares_and_moves_quota_consumption():
    """A RESERVE on an offer changes its kinds, the framework's holding and
    the agent's total — not the DRF share; quota counts the reservation as
    consumed (Mesos) instead of the unreserved allocation."""
    alloc, clock = make_allocator()
    alloc.add_agent("a1", R("cpus:4;mem:1024"))
    alloc.add_framework("f1", role="analytics")
    alloc.update_quota("analytics", limit="cpus:8")
    (offer,) = alloc.tick()
    share = alloc.dominant_share("f1")
    consumed = dict(alloc._quota.consumed("analytics"))
    new = alloc.convert_offered(offer.id, R("cpus:1"), R("cpus(analytics,alice):1"))
    assert new.id == offer.id and new.resources == R("cpus:3;mem:1024;cpus(analytics,alice):1")
    assert alloc.dominant_share("f1") == share
    assert dict(alloc._quota.consumed("analytics")) == consumed
    alloc.check_invariants()
    alloc.decline_offer(offer.id, 0.0)
    alloc.check_invariants()
    assert dict(alloc._quota.consumed("analytics")) == {"cpus": 1000}   # the reservation, allocated or not
    assert alloc.available("a1") == R("cpus:3;mem:1024;cpus(analytics,alice):1")
    with pytest.raises(MesoslikeError):
        alloc.convert_offered(offer.id, R("cpus:1"), R("cpus(analytics,alice):1"))   # answered already


def test_allocator_convert_available_refuses_other_quantities():
    alloc, _ = make_allocator()
    alloc.add_agent("a1", R("cpus:4"))
    with pytest.raises(MesoslikeError, match="not the same quantities"):
        alloc.convert_available("a1", R("cpus:1"), R("cpus(a,p):2"))
    alloc.convert_available("a1", R("cpus:1"), R("cpus(a,p):1"))
    assert alloc.statistics().reserved == {"a": R("cpus(a,p):1")}
    alloc.check_invariants()


# ================================================================= agent
def make_agent(resources="cpus:4;mem:1024"):
    core = AgentCore(FakeClock(100.0), AgentInfo("host-1", R(resources)), checkpoint=True)
    core.tick()
    core.on_message(m.AgentRegistered("agent-1", MasterInfo("m", "tcp://127.0.0.1:1"), 1.0))
    return core


def test_agent_takes_and_checkpoints_its_reservations_and_registers_with_them():
    core = make_agent()
    out = core.on_message(m.CheckpointResources("agent-1", R("cpus(a,alice):1")))
    assert out == [CheckpointReservations(R("cpus(a,alice):1"))]
    assert core.total == R("cpus:3;mem:1024;cpus(a,alice):1")
    assert core.info.resources == core.total
    # a restarted agent recovers them before it re-registers
    again = AgentCore(FakeClock(100.0), AgentInfo("host-1", R("cpus:4;mem:1024")), checkpoint=True)
    again.recover("agent-1", [])
    again.recover_reservations(R("cpus(a,alice):1"))
    (send,) = [c for c in again.tick() if isinstance(c, SendToMaster)]
    assert isinstance(send.message, m.ReregisterAgent)
    assert send.message.agent.resources == R("cpus:3;mem:1024;cpus(a,alice):1")


def test_agent_refuses_reservations_that_do_not_fit():
    core = make_agent()
    assert core.on_message(m.CheckpointResources("agent-1", R("cpus(a,alice):9"))) == []
    # the master believes what the agent refused: it re-registers at once, telling its real total
    (send,) = [c for c in core.tick() if isinstance(c, SendToMaster)]
    assert isinstance(send.message, m.ReregisterAgent) and send.message.agent.resources == R("cpus:4;mem:1024")
    core.on_message(m.AgentRegistered("agent-1", MasterInfo("m", "tcp://127.0.0.1:1"), 1.0))
    assert core.registered and not [c for c in core.tick() if isinstance(c, SendToMaster)]
    assert core.on_message(m.CheckpointResources("other", R("cpus(a,alice):1"))) == []
    assert core.total == R("cpus:4;mem:1024")
    with pytest.raises(ConfigError, match="do not fit"):
        make_agent("cpus:1").recover_reservations(R("cpus(a,alice):2"))


# ============================================================== property
STEPS = st.lists(st.tuples(st.sampled_from(["cycle", "reserve_offer", "unreserve_offer", "reserve_free",
                                            "unreserve_free", "decline", "launch"]),
                           st.integers(0, 3), st.integers(1, 3)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(STEPS)
def test_reservation_operations_keep_the_books_and_the_quantities(steps):
    """Whatever RESERVE/UNRESERVE, on offers or on what is available, mixed
    with cycles, launches and declines: the allocator's invariants hold, no
    agent's quantities change (only their kinds), and every dynamic kind
    is offered only to its role."""
    alloc, clock = make_allocator()
    totals = {}
    for index in range(2):
        alloc.add_agent(f"a{index}", R("cpus:4;mem:400"))
        totals[f"a{index}"] = R("cpus:4;mem:400")
    roles = {"f0": "r1", "f1": "r2", "f2": "r1/sub"}
    for framework_id, role in roles.items():
        alloc.add_framework(framework_id, role=role)
    alloc.update_quota("r1", limit="cpus:6")
    for action, pick, amount in steps:
        offers = alloc.outstanding_offers()
        offer = offers[pick % len(offers)] if offers else None
        part = R(f"cpus:{amount}")
        try:
            if action == "cycle":
                clock.advance(1.0)
                for made in alloc.tick():
                    for role in made.resources.reservation_roles():
                        assert roles[made.framework_id] in (role,) or roles[made.framework_id].startswith(role + "/")
            elif action == "reserve_offer" and offer is not None:
                role = roles[offer.framework_id]
                alloc.convert_offered(offer.id, part, part.as_reserved(role, "p"))
            elif action == "unreserve_offer" and offer is not None:
                dynamic = offer.resources.dynamically_reserved().only([k for k in offer.resources.scalars()
                                                                       if k.startswith("cpus(")][:1])
                if dynamic:
                    alloc.convert_offered(offer.id, dynamic, dynamic.as_unreserved())
            elif action in ("reserve_free", "unreserve_free"):
                agent = f"a{pick % 2}"
                if action == "reserve_free":
                    alloc.convert_available(agent, part, part.as_reserved("r2", "ops"))
                else:
                    dynamic = alloc.available(agent).dynamically_reserved()
                    if dynamic:
                        alloc.convert_available(agent, dynamic, dynamic.as_unreserved())
            elif action == "decline" and offer is not None:
                alloc.decline_offer(offer.id, refuse_seconds=0.0)
            elif action == "launch" and offer is not None:
                alloc.accept_offer(offer.id, offer.resources.minimum(R("cpus:1;mem:10")), refuse_seconds=0.0)
        except MesoslikeError:
            pass   # refused, changing nothing: the checks below still hold
        alloc.check_invariants()
        for agent_id, total in totals.items():
            assert alloc.snapshot()["agents"][agent_id]["total"] and \
                R(alloc.snapshot()["agents"][agent_id]["total"]).stripped() == total


def test_an_agent_is_not_started_with_dynamic_reservations(tmp_path):
    """They are the master's to make (and the agent's to checkpoint): in
    --resources only static ones (``name(role)``)."""
    from mesoslike.agent.runtime import AgentRuntime
    from mesoslike.agent.settings import AgentSettings
    with pytest.raises(ConfigError, match="dynamic reservations"):
        AgentRuntime(AgentSettings(master="tcp://127.0.0.1:5050", resources="cpus(a,alice):1;mem:64", work_dir=tmp_path))
    AgentRuntime(AgentSettings(master="tcp://127.0.0.1:5050", resources="cpus(a):1;mem:64", work_dir=tmp_path))
