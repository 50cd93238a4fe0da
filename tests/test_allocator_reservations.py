"""Static reservations in the allocator (issue 18 §4): ``cpus(analytics):4``
on an agent goes only to frameworks in ``analytics`` and its sub-roles; the
unreserved part goes to everyone; reservations count as consumed quota and
in DRF shares, as in Mesos.

The first tests are Apache Mesos's allocator cases, ported with Mesos's
numbers (``src/tests/hierarchical_allocator_tests.cpp``: ``ReservedDRF``,
``Reservations``, ``ReservationWithinQuota``, ``QuotaSetAsideReservedResources``
— there with a dynamic reservation, here a static one; at the end
``UpdateAllocation``, ``UpdateAvailableSuccess``, ``UpdateAvailableFail``
and ``QuotaSetAsideReservedResources`` with dynamic reservations). Sans-I/O, fake
clock; every test also runs with the single-role fast path off, which must
decide the same."""

import pytest

from allocator_helpers import R, make
from mesoslike.errors import AgentCapacityError

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=[True, False], ids=["fast-path", "stage-loop"])
def fast_path(request):
    return request.param


def _make(fast_path, **kwargs):
    alloc, clock = make(**kwargs)
    alloc._fast_path = fast_path
    return alloc, clock


def _offers(alloc):
    """{(framework, agent): resources} of one cycle, with invariants checked."""
    offers = alloc.tick()
    alloc.check_invariants()
    return {(o.framework_id, o.agent_id): o.resources for o in offers}


def test_reserved_drf(fast_path):
    """HierarchicalAllocatorTest.ReservedDRF: reserved resources count in
    the DRF shares of the role they are allocated to, and are shared fairly
    among that role's frameworks."""
    alloc, _ = _make(fast_path)
    slave1 = R("cpus:1;mem:512;disk:0;cpus(role1):100;mem(role1):1024;disk(role1):0")
    alloc.add_agent("slave1", slave1)
    alloc.add_framework("framework1", role="role1")
    assert _offers(alloc) == {("framework1", "slave1"): slave1}  # everything, reserved and not

    alloc.add_framework("framework2", role="role2")
    alloc.add_agent("slave2", R("cpus:2;mem:512;disk:0"))
    assert _offers(alloc) == {("framework2", "slave2"): R("cpus:2;mem:512")}

    # framework1 holds more (its reserved resources count): framework2 again
    alloc.add_agent("slave3", R("cpus:2;mem:512;disk:0"))
    assert _offers(alloc) == {("framework2", "slave3"): R("cpus:2;mem:512")}

    # reserved resources are shared fairly within the role: the newcomer gets them
    alloc.add_framework("framework3", role="role1")
    slave4 = R("cpus(role1):2;mem(role1):1024;disk(role1):0")
    alloc.add_agent("slave4", slave4)
    assert _offers(alloc) == {("framework3", "slave4"): slave4}


def test_reservations(fast_path):
    """HierarchicalAllocatorTest.Reservations: a role's framework gets its
    reservations and unreserved resources; another role's reservations on
    the same agent wait for that role; a reservation for a role without
    frameworks is never offered."""
    alloc, _ = _make(fast_path)
    slave1 = R("cpus(role1):2;mem(role1):1024;disk(role1):0")
    slave2 = R("cpus(role2):2;mem(role2):1024;cpus:1;mem:1024;disk:0")
    alloc.add_agent("slave1", slave1)
    alloc.add_agent("slave2", slave2)
    alloc.add_agent("slave3", R("cpus(role3):1;mem(role3):1024;disk(role3):0"))

    alloc.add_framework("framework1", role="role1")
    assert _offers(alloc) == {("framework1", "slave1"): slave1, ("framework1", "slave2"): slave2.unreserved()}

    alloc.add_framework("framework2", role="role2")
    assert _offers(alloc) == {("framework2", "slave2"): slave2.reserved("role2")}

    assert alloc.available("slave3") == R("cpus(role3):1;mem(role3):1024")  # nobody in role3
    assert _offers(alloc) == {}


def test_reservation_within_quota(fast_path):
    """HierarchicalAllocatorTest.ReservationWithinQuota: a role's reserved
    resources count towards its quota consumption and its DRF share."""
    alloc, _ = _make(fast_path)
    alloc.update_quota("quota-role", guarantee="cpus:2;mem:256", limit="cpus:2;mem:256")
    alloc.add_framework("framework1", role="quota-role")
    alloc.add_framework("framework2", role="non-quota-role")
    assert _offers(alloc) == {}  # no resources yet

    # framework1 uses cpus:2 and the reserved mem: its quota is satisfied, so
    # framework2 (holding nothing) is offered the rest of agent1
    alloc.add_agent("agent1", R("cpus:8;mem(quota-role):256"),
                    used={"framework1": R("cpus:2;mem(quota-role):256")})
    assert _offers(alloc) == {("framework2", "agent1"): R("cpus:6")}

    # the reserved mem counts in quota-role's DRF share (mem 256/256 = 1.0),
    # so framework2 (cpus 6/12) is offered agent2 too
    alloc.add_agent("agent2", R("cpus:4"))
    assert _offers(alloc) == {("framework2", "agent2"): R("cpus:4")}


def test_quota_set_aside_reserved_resources(fast_path):
    """HierarchicalAllocatorTest.QuotaSetAsideReservedResources (with a
    static reservation): the headroom set aside for a guarantee is never
    taken from resources reserved for another role, and the unreserved
    resources held for the guarantee are not offered to that other role."""
    alloc, clock = _make(fast_path)
    alloc.add_agent("agent1", R("cpus:4;mem:512;disk:0"))
    agent2 = R("cpus(no-quota-role):4;mem(no-quota-role):512")
    alloc.add_agent("agent2", agent2)
    alloc.add_framework("framework1", role="quota-role")
    alloc.update_quota("quota-role", guarantee="cpus:4;mem:512", limit="cpus:4;mem:512")
    offers = alloc.tick()
    assert [(o.framework_id, o.agent_id, o.resources) for o in offers] == \
        [("framework1", "agent1", R("cpus:4;mem:512"))]
    alloc.decline_offer(offers[0].id, refuse_seconds=10)  # declined for the whole test
    clock.advance(1)
    assert _offers(alloc) == {}

    alloc.add_framework("framework2", role="no-quota-role")
    assert _offers(alloc) == {("framework2", "agent2"): agent2}  # never agent1's cpus


@pytest.mark.parametrize("role, gets_reserved", [
    ("analytics", True),
    ("analytics/batch", True),        # a sub-role
    ("analytics/batch/nightly", True),
    ("analytics2", False),            # a name that merely starts the same
    ("web", False),
    ("*", False),
])
def test_reservations_go_to_the_role_and_its_sub_roles(fast_path, role, gets_reserved):
    alloc, _ = _make(fast_path)
    total = R("cpus(analytics):4;mem(analytics):4096;cpus:4;mem:4096")
    alloc.add_agent("agent1", total)
    alloc.add_framework("f1", role=role)
    expected = total if gets_reserved else total.unreserved()
    assert _offers(alloc) == {("f1", "agent1"): expected}


def test_a_sub_roles_reservation_is_not_for_its_parent(fast_path):
    alloc, _ = _make(fast_path)
    alloc.add_agent("agent1", R("cpus(analytics/batch):2;mem(analytics/batch):512"))
    alloc.add_framework("parent", role="analytics")
    assert _offers(alloc) == {}
    alloc.add_framework("child", role="analytics/batch")
    assert _offers(alloc) == {("child", "agent1"): R("cpus(analytics/batch):2;mem(analytics/batch):512")}


def test_two_roles_share_one_agent(fast_path):
    """With a framework in each role, each gets its part of the agent in
    the same cycle: analytics its reservation (and, first in order, the
    unreserved part), web nothing reserved."""
    alloc, _ = _make(fast_path)
    total = R("cpus(analytics):4;mem(analytics):4096;cpus:4;mem:4096")
    alloc.add_agent("agent1", total)
    alloc.add_framework("web-fw", role="web")
    alloc.add_framework("analytics-fw", role="analytics")
    offers = _offers(alloc)
    assert offers[("analytics-fw", "agent1")].contains(total.reserved("analytics"))
    assert not offers.get(("web-fw", "agent1"), R("")).reserved()
    assert sum(offers.values(), R("")) == total


def test_used_reserved_resources_come_back_to_the_reservation(fast_path):
    """A task on reserved resources ends: they are offered again, still
    only to the role."""
    alloc, clock = _make(fast_path)
    alloc.add_agent("agent1", R("cpus(analytics):2;mem(analytics):256;cpus:1;mem:128"))
    alloc.add_framework("a", role="analytics")
    (offer,) = alloc.tick()
    task = R("cpus(analytics):1;mem(analytics):128")
    alloc.accept_offer(offer.id, task, refuse_seconds=3600)  # the rest filtered for an hour
    alloc.add_framework("w", role="web")
    # web is offered the unreserved part, never the reserved remainder
    assert _offers(alloc) == {("w", "agent1"): R("cpus:1;mem:128")}
    assert alloc.available("agent1") == R("cpus(analytics):1;mem(analytics):128")
    alloc.recover_resources("a", "agent1", task, refuse_seconds=0)  # the task ended
    clock.advance(1)
    assert _offers(alloc) == {("a", "agent1"): R("cpus(analytics):2;mem(analytics):256")}


def test_minimum_allocatable_counts_reserved_quantities(fast_path):
    """Reserved cpus meet a ``cpus`` minimum: an agent with only reserved
    resources is offered to its role."""
    alloc, _ = _make(fast_path, min_allocatable="cpus:1")
    alloc.add_agent("agent1", R("cpus(analytics):2;mem(analytics):256"))
    alloc.add_framework("a", role="analytics")
    assert _offers(alloc) == {("a", "agent1"): R("cpus(analytics):2;mem(analytics):256")}


def test_reservations_count_against_a_quota_limit(fast_path):
    """Mesos: a role's reservations (allocated or not) are consumed quota,
    so a limit the reservations fill leaves no unreserved resources for it."""
    alloc, _ = _make(fast_path)
    alloc.add_agent("agent1", R("cpus(analytics):4;mem(analytics):1024"))
    alloc.add_agent("agent2", R("cpus:4;mem:1024"))
    alloc.update_quota("analytics", limit="cpus:6")
    alloc.add_framework("a", role="analytics/batch")
    offers = _offers(alloc)
    # its reservations are offered in full; of agent2 only cpus:2 (6 - 4 reserved)
    assert offers == {("a", "agent1"): R("cpus(analytics):4;mem(analytics):1024"),
                      ("a", "agent2"): R("cpus:2;mem:1024")}
    assert alloc.snapshot()["quota"]["analytics"]["consumed"] == "cpus:6;mem:2048"


def test_reservations_satisfy_a_guarantee(fast_path):
    """A guarantee its reservations cover needs no headroom: the unreserved
    resources go to other roles."""
    alloc, _ = _make(fast_path)
    alloc.add_agent("agent1", R("cpus(g):4;mem(g):512"))
    alloc.add_agent("agent2", R("cpus:4;mem:512"))
    alloc.update_quota("g", guarantee="cpus:4;mem:512")
    alloc.add_framework("other", role="other")
    assert _offers(alloc) == {("other", "agent2"): R("cpus:4;mem:512")}
    assert alloc.snapshot()["quota"]["g"]["consumed"] == "cpus:4;mem:512"


def test_removing_the_agent_removes_its_reservations():
    alloc, _ = make()
    alloc.add_agent("agent1", R("cpus(g):4;mem(g):512"))
    alloc.update_quota("g", guarantee="cpus:4")
    assert alloc.snapshot()["reservations"] == {"g": "cpus:4;mem:512"}
    assert alloc.snapshot()["quota"]["g"]["consumed"] == "cpus:4;mem:512"
    alloc.remove_agent("agent1")
    assert alloc.snapshot()["reservations"] == {}
    assert alloc.snapshot()["quota"]["g"]["consumed"] == ""
    alloc.check_invariants()


def test_update_agent_changes_its_reservations():
    alloc, _ = make()
    alloc.add_agent("agent1", R("cpus(g):4;cpus:4"))
    alloc.update_agent("agent1", total=R("cpus(g):2;cpus(h):2;cpus:4"))
    assert alloc.snapshot()["reservations"] == {"g": "cpus:2", "h": "cpus:2"}
    alloc.add_framework("h-fw", role="h")
    assert _offers(alloc) == {("h-fw", "agent1"): R("cpus(h):2;cpus:4")}


def test_statistics_show_reserved_and_unreserved_per_role(fast_path):
    alloc, _ = _make(fast_path)
    alloc.add_agent("agent1", R("cpus(analytics):4;mem(analytics):4096;cpus:4;mem:4096"))
    alloc.add_agent("agent2", R("cpus(web):1;mem(web):128"))
    alloc.add_framework("a", role="analytics/batch")
    alloc.tick()
    stats = alloc.statistics()
    assert dict(stats.reserved) == {"analytics": R("cpus(analytics):4;mem(analytics):4096"),
                                    "web": R("cpus(web):1;mem(web):128")}
    held = stats.role_allocated["analytics/batch"]
    assert held.reserved() == R("cpus(analytics):4;mem(analytics):4096")
    assert held.unreserved() == R("cpus:4;mem:4096")
    assert stats.total == R("cpus(analytics):4;mem(analytics):4096;cpus:4;mem:4096;cpus(web):1;mem(web):128")
    # the share counts reserved quantities: cpus 8 of 9, mem 8192 of 8320
    assert stats.role_shares["analytics/batch"] == pytest.approx(8192 / 8320)


# ================================================== dynamic reservations
# Mesos's allocator cases for RESERVE as an allocation update (``updateAllocation``)
# and on what is available (``updateAvailable``), ported with Mesos's numbers.

def test_update_allocation(fast_path):
    """HierarchicalAllocatorTest.UpdateAllocation: a RESERVE on what the
    framework was offered changes its allocation in place; recovered, the
    next offer is the agent's resources with the reservation applied."""
    alloc, clock = _make(fast_path)
    slave = R("cpus:100;mem:100;disk:100")
    alloc.add_agent("slave", slave)
    alloc.add_framework("framework", role="role1")
    ((offer_id, resources),) = [(o.id, o.resources) for o in alloc.tick()]
    assert resources == slave
    share = alloc.dominant_share("framework")

    unreserved = R("cpus:25;mem:50")
    reserved = unreserved.as_reserved("role1", "ops")
    updated = alloc.convert_offered(offer_id, unreserved, reserved)
    assert updated.resources == slave - unreserved + reserved != slave
    assert alloc.allocation("framework") == {"slave": updated.resources}
    assert alloc.dominant_share("framework") == share          # the same quantities
    alloc.check_invariants()

    alloc.decline_offer(offer_id, refuse_seconds=0.0)
    clock.advance(1)
    assert _offers(alloc) == {("framework", "slave"): slave - unreserved + reserved}


def test_update_available_success(fast_path):
    """HierarchicalAllocatorTest.UpdateAvailableSuccess: an operator's
    reserve on available resources; a framework of the role added later is
    offered the agent's resources with it applied."""
    alloc, _ = _make(fast_path)
    slave = R("cpus:100;mem:100;disk:100")
    alloc.add_agent("slave", slave)
    unreserved = R("cpus:25;mem:50")
    reserved = unreserved.as_reserved("role1", "ops")
    alloc.convert_available("slave", unreserved, reserved)
    alloc.add_framework("framework", role="role1")
    assert _offers(alloc) == {("framework", "slave"): slave - unreserved + reserved}


def test_update_available_fail(fast_path):
    """HierarchicalAllocatorTest.UpdateAvailableFail: a reserve of resources
    that are not available fails. (Mesos's master rescinds offers before it
    asks; this allocator does that itself, so here tasks use them.)"""
    alloc, _ = _make(fast_path)
    slave = R("cpus:100;mem:100;disk:100")
    alloc.add_agent("slave", slave)
    alloc.add_framework("framework", role="role1")
    (offer,) = alloc.tick()
    alloc.accept_offer(offer.id, slave, refuse_seconds=0.0)    # all of it used by tasks
    unreserved = R("cpus:25;mem:50")
    with pytest.raises(AgentCapacityError):
        alloc.convert_available("slave", unreserved, unreserved.as_reserved("role1", "ops"))
    assert alloc.available("slave") == R("")
    alloc.check_invariants()


def test_quota_set_aside_dynamically_reserved_resources(fast_path):
    """HierarchicalAllocatorTest.QuotaSetAsideReservedResources as Mesos
    writes it, with a dynamic reservation (made on the available resources
    of agent2): the guarantee's headroom is never taken from it."""
    alloc, clock = _make(fast_path)
    alloc.add_agent("agent1", R("cpus:4;mem:512;disk:0"))
    alloc.add_agent("agent2", R("cpus:4;mem:512"))
    reserved = R("cpus:4;mem:512").as_reserved("no-quota-role", "ops")
    alloc.convert_available("agent2", R("cpus:4;mem:512"), reserved)
    alloc.add_framework("framework1", role="quota-role")
    alloc.update_quota("quota-role", guarantee="cpus:4;mem:512", limit="cpus:4;mem:512")
    offers = alloc.tick()
    assert [(o.framework_id, o.agent_id, o.resources) for o in offers] == \
        [("framework1", "agent1", R("cpus:4;mem:512"))]
    alloc.decline_offer(offers[0].id, refuse_seconds=10)
    clock.advance(1)
    assert _offers(alloc) == {}
    alloc.add_framework("framework2", role="no-quota-role")
    assert _offers(alloc) == {("framework2", "agent2"): reserved}
