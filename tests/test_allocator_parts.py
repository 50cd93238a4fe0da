"""The allocator's parts on their own — agent book, role tree, offer book, quota book —
each with its ``_check()``, plus what ties them together: one offer model,
agent (de)activation, and a pure core (no GC, no sorter privates)."""

import ast
import pathlib
import random

import pytest

import mesoslike
from mesoslike.allocator import Offer
from mesoslike.allocator.agents import AgentBook
from mesoslike.allocator.filters import FilterStore
from mesoslike.allocator.offer_book import OfferBook
from mesoslike.allocator.quota import QuotaBook
from mesoslike.allocator.role_tree import RoleTree
from mesoslike.allocator.shuffle import shuffle
from mesoslike.errors import AgentCapacityError, RecoveryError, ResourcesError, UnknownAgentError, UnknownOfferError
from mesoslike.wire import codec
from mesoslike.wire import messages as m

from allocator_helpers import R, make

pytestmark = pytest.mark.timeout(30)

ALLOCATOR = pathlib.Path(mesoslike.__file__).parent / "allocator"


# ------------------------------------------------------------ agent book
def test_agent_book_moves_are_checked_and_keep_the_totals():
    book = AgentBook()
    book.track_free(True)
    agent = book.add("n", R("cpus:4;mem:4096"), "host", {"rack": "r1"})
    book.decrease_available(agent, "f", R("cpus:1;mem:1024"))
    book.decrease_available(agent, "g", R("cpus:2;mem:1024"))
    assert agent.available == R("cpus:1;mem:2048")
    assert book.free == {"cpus": 1000, "mem": 2048000}
    with pytest.raises(ResourcesError):
        book.decrease_available(agent, "f", R("cpus:2"))      # never below zero
    with pytest.raises(RecoveryError):
        book.increase_available(agent, "f", R("cpus:2"))      # only what f holds: never above the total
    book.increase_available(agent, "g", R("cpus:2;mem:1024"))
    assert agent.held == {"f": R("cpus:1;mem:1024")}
    book._check()
    with pytest.raises(AgentCapacityError):
        book.resize(agent, R("cpus:0.5;mem:4096"))           # below what is held
    with pytest.raises(AgentCapacityError):
        book.remove("n")                                      # still held
    book.set_active(agent, False)
    assert book.free == {}
    book._check()
    with pytest.raises(UnknownAgentError):
        book.get("nope")


def test_agent_book_check_catches_a_broken_invariant():
    book = AgentBook()
    agent = book.add("n", R("cpus:4"), "n", {})
    agent.available = R("cpus:5")  # what only a bug could do
    with pytest.raises(AssertionError):
        book._check()


# ------------------------------------------------------------- role tree
def test_role_tree_charges_a_role_and_its_ancestors():
    tree = RoleTree()
    tree.add_framework("eng/prod")
    tree.add_framework("eng/dev")
    tree.add_framework("eng")
    tree.start_tracking([])
    tree.charge("eng/prod", {"cpus": 2000}, 1)
    tree.charge("eng/dev", {"cpus": 1000}, 1)
    tree.charge("eng", {"mem": 5}, 1)
    assert tree.consumed("eng") == {"cpus": 3000, "mem": 5}
    assert tree.consumed("eng/prod") == {"cpus": 2000}
    assert tree.consumed("ops") == {}
    assert tree.in_subtree("eng/prod", "eng") and not tree.in_subtree("eng", "eng/prod")
    assert not tree.in_subtree("engineering", "eng")  # a path, not a string prefix
    tree._check([("eng/prod", {"cpus": 2000}), ("eng/dev", {"cpus": 1000}), ("eng", {"mem": 5})])
    with pytest.raises(AssertionError):
        tree._check([("eng/prod", {"cpus": 2000})])


def test_quota_book_caps_a_role_by_its_limits_and_by_the_headroom_others_guarantees_hold():
    tree = RoleTree()
    for role in ("eng", "eng/prod", "ops", "batch"):
        tree.add_framework(role)
    tree.start_tracking([])
    quota = QuotaBook(tree)
    quota.set("eng", {"cpus": 10_000}, {"cpus": 12_000, "mem": 4_000})
    quota.set("ops", {"cpus": 4_000}, None)
    tree.charge("eng/prod", {"cpus": 6_000, "mem": 4_000}, 1)
    free = {"cpus": 9_000, "mem": 8_000}
    # unmet guarantees: eng 4 cpus, ops 4 cpus: 8 of the 9 free cpus are held for them
    assert quota.required_headroom() == {"cpus": 8_000}
    assert quota.caps("batch", free) == {"cpus": 1_000}
    # eng may take its own unmet part besides, up to its limit; its mem limit is reached
    assert quota.caps("eng/prod", free) == {"cpus": 5_000, "mem": 0}
    # the guarantee stage: what it is owed, under its limits, not held back for ops
    assert quota.caps("eng", free, owed={"cpus": 4_000}) == {"cpus": 4_000, "mem": 0}
    assert quota.limits_reached("eng/prod") == [("eng", ["mem"], {"cpus": 12_000, "mem": 4_000},
                                                 {"cpus": 6_000, "mem": 4_000})]
    # a kind the caps give nothing of while some is free is exactly a kind held for the guarantees
    assert quota.held_for_guarantees("batch", free) == ([], {"cpus": 8_000})
    assert quota.caps("batch", {"cpus": 8_000}) == {"cpus": 0}
    assert quota.held_for_guarantees("batch", {"cpus": 8_000}) == (["cpus"], {"cpus": 8_000})
    assert quota.short_of_guarantee("eng", {"cpus": 1_000}) == {"cpus": 3_000}
    assert quota.over_limit("eng") == {} and quota.over_limit("ops") == {}
    tree.charge("eng/prod", {"cpus": 7_000}, 1)
    assert quota.over_limit("eng") == {"cpus": 1_000}
    # the guarantees of the top-level roles (eng, ops; not a sub-role) against the agents' total
    assert quota.capacity_shortfall("eng/prod", {"cpus": 1_000}, {"cpus": 12_000}) == ({"cpus": 14_000},
                                                                                      {"cpus": 2_000})


def test_role_tree_prunes_roles_left_without_frameworks():
    tree = RoleTree()
    tree.add_framework("a/b/c")
    assert tree.has_frameworks("a") and tree.has_frameworks("a/b")
    assert tree.roles() == ["a/b/c"]
    tree.add_framework("a")
    tree.remove_framework("a/b/c")
    assert tree.has_frameworks("a") and not tree.has_frameworks("a/b")
    tree._check()
    tree.remove_framework("a")
    assert not tree.has_frameworks("a")
    tree._check()


# ------------------------------------------------------------ offer book
def test_offer_book_indexes_and_times_offers():
    books = AgentBook()
    n0 = books.add("n0", R("cpus:4"), "host0", {"rack": "r1"})
    n1 = books.add("n1", R("cpus:4"), "host1", {})
    book = OfferBook("X", track_times=True)
    first = book.issue({("f", n0): R("cpus:1"), ("g", n1): R("cpus:2")}, now=1.0)
    (later,) = book.issue({("f", n1): R("cpus:3")}, now=2.0)
    assert [o.id for o in first] == ["X1", "X2"] and later.id == "X3"
    assert first[0] == Offer(id="X1", agent_id="n0", hostname="host0", resources=R("cpus:1"),
                             attributes={"rack": "r1"}, framework_id="f")
    assert book.of_framework("f") == [first[0], later]
    assert list(book.on("f", "n1").values()) == [later]
    assert book.oldest_time() == 1.0
    assert book.timed_out(1.5) == first
    book.retire(first[0])
    book._check()
    with pytest.raises(UnknownOfferError):
        book.require("X1")
    assert book.on("f", "n0") == {}
    assert [o.id for o in book] == ["X2", "X3"]


def test_offer_book_files_offers_when_asked_and_bounds_those_waiting():
    """Offers are filed by framework and agent only when someone asks for
    them: answered ones never are, and the offers waiting to be filed stay
    bounded however long nobody asks."""
    books = AgentBook()
    agents = [books.add(f"n{i}", R("cpus:4"), f"host{i}", {}) for i in range(10)]
    book = OfferBook()
    for second in range(500):
        for offer in book.issue({("f", agent): R("cpus:1") for agent in agents}, now=float(second)):
            book.retire(offer)  # declined by id, as most offers are
        assert len(book._unfiled) <= 2 * 1024 + 2 * len(agents)
    assert book.of_framework("f") == [] and book._by_framework == {}
    kept = book.issue({("f", agent): R("cpus:2") for agent in agents}, now=500.0)
    replaced = book.replace(kept[0], R("cpus:1"))  # an operation on an offer not filed yet
    assert book.on("f", "n0") == {kept[0].id: replaced}
    assert book.of_framework("f") == [replaced, *kept[1:]]
    book.retire(replaced)
    assert book.on("f", "n0") == {}
    book._check()


# ---------------------------------------------------------- one offer model
def test_one_offer_model_from_allocator_to_wire_to_scheduler():
    assert mesoslike.Offer is Offer is mesoslike.wire.Offer
    alloc, _ = make()
    alloc.add_framework("f")
    alloc.add_agent("n", R("cpus:1;mem:64"), attributes={"room": "er1"}, hostname="node-0")
    (offer,) = alloc.allocate()
    assert offer == Offer(id=offer.id, agent_id="n", hostname="node-0", resources=R("cpus:1;mem:64"),
                          attributes={"room": "er1"}, framework_id="f")
    frame = codec.encode(m.Offers([offer]))  # what the master sends is what the allocator made
    assert codec.decode(frame) == m.Offers([offer])


def test_offer_keyword_construction_copies_attributes():
    attributes = {"room": "er0"}
    offer = Offer(id="o1", agent_id="a", hostname="h", resources=R("cpus:1"), attributes=attributes)
    attributes["room"] = "er9"
    assert offer.attributes == {"room": "er0"} and offer.framework_id == ""
    with pytest.raises(AttributeError):
        offer.id = "o2"  # type: ignore[misc]


# --------------------------------------------------- agent (de)activation
def test_deactivated_agent_keeps_its_tasks_leaves_the_headroom_and_comes_back_on_activation():
    alloc, clock = make()
    alloc.add_agent("n0", R("cpus:4;mem:4096"))
    alloc.add_agent("n1", R("cpus:4;mem:4096"))
    alloc.update_quota("q", guarantee=R("cpus:4;mem:4096"))
    alloc.add_framework("other", role="other")
    offers = alloc.allocate()
    assert sum(o.resources.get("cpus") for o in offers) == 4  # 4 cpus held back for q
    for offer in offers:
        alloc.accept_offer(offer.id, R("cpus:1;mem:1024"), refuse_seconds=0)
    used = alloc.allocation("other")
    drained = next(iter(used))
    alloc.deactivate_agent(drained)
    alloc.deactivate_agent(drained)  # twice: no-op
    assert alloc.allocation("other") == used  # its tasks keep their resources
    assert alloc.snapshot()["agents"][drained]["active"] is False
    alloc.check_invariants()  # the free pool no longer counts the inactive agent
    assert all(o.agent_id != drained for o in alloc.allocate())
    alloc.activate_agent(drained)
    assert alloc.next_wakeup() == clock.now()  # activation triggers allocation
    alloc.check_invariants()
    alloc.activate_agent(drained)  # twice: no-op


def test_update_agent_keeps_its_signature_for_reregistration():
    alloc, _ = make()
    alloc.add_agent("n", R("cpus:1;mem:64"), attributes={"rack": "r1"}, hostname="old")
    alloc.update_agent("n", total=R("cpus:2;mem:128"), attributes={"rack": "r2"}, hostname="new")
    state = alloc.snapshot()["agents"]["n"]
    assert (state["total"], state["attributes"], state["hostname"]) == ("cpus:2;mem:128", {"rack": "r2"}, "new")


# ----------------------------------------------------------- a pure core
def test_the_allocator_leaves_garbage_collection_to_its_runtime():
    for path in ALLOCATOR.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        assert "gc" not in imported, f"{path.name} imports gc"


def test_allocator_modules_import_no_private_names_from_each_other():
    for path in ALLOCATOR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mesoslike"):
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"


# ------------------------------------------------------------ the shuffle
@pytest.mark.parametrize("seed", [0, 1, 7, 2**40 + 3])
def test_the_cycle_shuffle_is_random_shuffle(seed):
    """The allocator's own shuffle makes Random.shuffle's permutation and
    leaves the generator in the same state: offers for a seed do not change."""
    for size in (0, 1, 2, 3, 5, 8, 100, 1000, 4097):
        ours, theirs = random.Random(seed), random.Random(seed)
        mine, reference = list(range(size)), list(range(size))
        shuffle(ours, mine)
        theirs.shuffle(reference)
        assert mine == reference
        assert ours.getstate() == theirs.getstate()


def test_a_random_subclass_that_draws_otherwise_shuffles_its_own_way():
    class Drawn(random.Random):
        def random(self):
            return 0.0
    items = list(range(10))
    shuffle(Drawn(1), items)
    reference = list(range(10))
    Drawn(1).shuffle(reference)
    assert items == reference


# ------------------------------------------------ the cycle's shortcuts
def test_an_issued_offer_is_a_plain_frozen_offer():
    """The offer book builds offers with msgspec's constructor, without
    converting the agent's attributes again (made_unconverted); what comes
    out is an ``Offer`` like any other, sharing the agent's checked map."""
    books = AgentBook()
    agent = books.add("n0", R("cpus:4"), "host0", {"rack": "r1"})
    (offer,) = OfferBook().issue({("f", agent): R("cpus:1")}, now=0.0)
    assert type(offer) is Offer
    assert offer == Offer(id="O1", agent_id="n0", hostname="host0", resources=R("cpus:1"),
                          attributes={"rack": "r1"}, framework_id="f")
    assert offer.attributes is agent.attributes
    with pytest.raises(AttributeError):
        offer.id = "O2"  # type: ignore[misc]


def test_an_offer_made_by_a_caller_or_decoded_has_its_attributes_copied_and_checked():
    """``Offer(...)`` copies the caller's map and checks it against the
    grammar, as the attrs class did; a decoded offer's are checked too."""
    from mesoslike.wire import codec
    from mesoslike.wire import messages as m

    given = {"rack": "r1"}
    offer = Offer(id="O1", agent_id="n0", hostname="h", resources=R("cpus:1"), attributes=given)
    given["rack"] = "r2"
    assert offer.attributes == {"rack": "r1"}
    assert Offer("O1", "n0", "h", R("cpus:1"), None).attributes == {}   # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attribute"):
        Offer("O1", "n0", "h", R("cpus:1"), {"bad name!": "x"})
    frame = codec.encode(m.Offers([offer]))
    assert codec.decode(frame) == m.Offers([offer])
    bad = frame.replace(b"\xa4rack", b"\xa4ra k")
    with pytest.raises(codec.WireError, match=r"OFFERS.offers\[0\]: attribute name .ra k."):
        codec.decode(bad)


def test_a_filter_table_an_agent_keeps_is_never_stale():
    """FilterStore.add hands out the agent's table; whatever removes filters
    empties it in place, and the next filter starts a new one."""
    store = FilterStore()
    table = store.add("f", "n0", R("cpus:1"), expires_at=10.0)
    assert store.add("g", "n0", R("cpus:1"), expires_at=20.0) is table and set(table) == {"f", "g"}
    store.clear_framework("f")
    assert set(table) == {"g"}
    assert store.expire(20.0) == {"n0"} and table == {}
    fresh = store.add("f", "n0", R("cpus:1"), expires_at=30.0)
    assert fresh is not table and table == {}
    store.clear_agent("n0")
    assert fresh == {} and store.on_agent("n0") is None


def test_the_allocator_reads_an_agents_filters_and_fit_from_the_agent():
    """A decline filter blocks the agent; a change of attributes clears it
    (the agent's table with it); a smaller total that misses the minimum
    is not offered though the agent met the minimum before."""
    alloc, clock = make(min_allocatable="cpus:1")
    alloc.add_framework("f")
    alloc.add_agent("n", R("cpus:4;mem:64"))
    (offer,) = alloc.allocate()
    alloc.decline_offer(offer.id, 3600.0)
    clock.advance(1.0)
    assert alloc.allocate() == []
    alloc.check_invariants()
    alloc.update_agent("n", attributes={"rack": "r2"})  # removes the agent's filters
    (again,) = alloc.allocate()
    alloc.check_invariants()
    alloc.decline_offer(again.id, 0.0)
    alloc.update_agent("n", total=R("cpus:0.5;mem:64"))
    assert alloc.allocate() == []
    alloc.check_invariants()
