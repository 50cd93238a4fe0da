"""Bad input raises one documented error and leaves the allocator exactly as it was."""

import copy

import pytest

from mesoslike.errors import (
    AgentCapacityError,
    AllocatorError,
    DuplicateAgentError,
    DuplicateFrameworkError,
    InvalidFilterError,
    InvalidRoleError,
    MesoslikeError,
    QuotaError,
    RecoveryError,
    ResourcesError,
    UnknownAgentError,
    UnknownFrameworkError,
    UnknownOfferError,
    WeightError,
)

from allocator_helpers import R, make

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def busy():
    """An allocator with agents, frameworks, an offer, used resources, a filter and quota."""
    alloc, clock = make()
    alloc.add_agent("n0", R("cpus:4;mem:4096"))
    alloc.add_agent("n1", R("cpus:4;mem:4096"))
    alloc.add_framework("f", role="eng/prod")
    alloc.add_framework("g", role="ops")
    offers = {o.framework_id: o for o in alloc.allocate()}
    assert offers["f"].agent_id != offers["g"].agent_id
    alloc.accept_offer(offers["g"].id, R("cpus:1;mem:512"), refuse_seconds=60)
    alloc.update_quota("eng", guarantee=R("cpus:1"), limit=R("cpus:6"))
    assert alloc.drain_rescinds() == []
    clock.advance(1)
    return alloc, offers["f"], offers["g"].id


BAD_CALLS = [
    ("unknown agent in remove", lambda a, o, answered: a.remove_agent("nope"), UnknownAgentError),
    ("unknown agent in update", lambda a, o, answered: a.update_agent("nope", total=R("cpus:1")), UnknownAgentError),
    ("unknown agent in recover", lambda a, o, answered: a.recover_resources("f", "nope", R("cpus:1")), UnknownAgentError),
    ("unknown agent in allocate", lambda a, o, answered: a.allocate(["n0", "nope"]), UnknownAgentError),
    ("unknown framework", lambda a, o, answered: a.remove_framework("nope"), UnknownFrameworkError),
    ("unknown framework in suppress", lambda a, o, answered: a.suppress_offers("nope"), UnknownFrameworkError),
    ("unknown framework in recover", lambda a, o, answered: a.recover_resources("nope", "n0", R("cpus:1")),
     UnknownFrameworkError),
    ("unknown framework in used", lambda a, o, answered: a.add_agent("n9", R("cpus:1"), used={"nope": R("cpus:1")}),
     UnknownFrameworkError),
    ("unknown offer", lambda a, o, answered: a.decline_offer("O999"), UnknownOfferError),
    ("answered offer", lambda a, o, answered: a.accept_offer(answered, R("cpus:1")),
     UnknownOfferError),
    ("agent added twice", lambda a, o, answered: a.add_agent("n0", R("cpus:1")), DuplicateAgentError),
    ("framework added twice", lambda a, o, answered: a.add_framework("f"), DuplicateFrameworkError),
    ("recover more than offered", lambda a, o, answered: a.recover_resources("f", o.agent_id, R("cpus:5")), RecoveryError),
    ("recover what another framework holds", lambda a, o, answered: a.recover_resources("g", o.agent_id, R("cpus:1")),
     RecoveryError),
    ("accept more than offered", lambda a, o, answered: a.accept_offer(o.id, R("cpus:100")), RecoveryError),
    ("negative refuse_seconds", lambda a, o, answered: a.decline_offer(o.id, refuse_seconds=-1), InvalidFilterError),
    ("NaN refuse_seconds", lambda a, o, answered: a.decline_offer(o.id, refuse_seconds=float("nan")), InvalidFilterError),
    ("negative refuse in recover", lambda a, o, answered: a.recover_resources("f", o.agent_id, R("cpus:1"), -5),
     InvalidFilterError),
    ("empty role", lambda a, o, answered: a.add_framework("h", role=""), InvalidRoleError),
    ("role with empty component", lambda a, o, answered: a.add_framework("h", role="eng//prod"), InvalidRoleError),
    ("role with trailing slash", lambda a, o, answered: a.add_framework("h", role="eng/"), InvalidRoleError),
    ("role with dot component", lambda a, o, answered: a.add_framework("h", role="eng/.."), InvalidRoleError),
    ("role with space", lambda a, o, answered: a.add_framework("h", role="my role"), InvalidRoleError),
    ("role starting with dash", lambda a, o, answered: a.add_framework("h", role="-x"), InvalidRoleError),
    ("star inside a path", lambda a, o, answered: a.add_framework("h", role="*/x"), InvalidRoleError),
    ("bad role in weights", lambda a, o, answered: a.update_weights({"ops": 2.0, "a b": 1.0}), InvalidRoleError),
    ("zero weight", lambda a, o, answered: a.update_weights({"ops": 2.0, "eng": 0}), WeightError),
    ("negative weight", lambda a, o, answered: a.update_weights({"ops": -1}), WeightError),
    ("infinite weight", lambda a, o, answered: a.update_weights({"ops": float("inf")}), WeightError),
    ("guarantee above limit", lambda a, o, answered: a.update_quota("ops", guarantee=R("cpus:4"), limit=R("cpus:2")),
     QuotaError),
    ("children above parent guarantee", lambda a, o, answered: a.update_quota("eng/prod", guarantee=R("cpus:2")),
     QuotaError),
    ("quota with ranges", lambda a, o, answered: a.update_quota("ops", guarantee=R("ports:[1-2]")), QuotaError),
    ("quota with bad number", lambda a, o, answered: a.update_quota("ops", limit="cpus:lots"), QuotaError),
    ("quota for a bad role", lambda a, o, answered: a.update_quota("", limit="cpus:1"), InvalidRoleError),
    ("agent shrunk below allocation", lambda a, o, answered: a.update_agent(o.agent_id, total=R("cpus:1")),
     AgentCapacityError),
    ("agent with used above total", lambda a, o, answered: a.add_agent("n9", R("cpus:1"), used={"f": R("cpus:2")}),
     AgentCapacityError),
    ("agent total not Resources", lambda a, o, answered: a.add_agent("n9", "cpus:1"), ResourcesError),
    ("bad min_allocatable", lambda a, o, answered: a.add_framework("h", min_allocatable="cpus:-1"), ResourcesError),
]


@pytest.mark.parametrize("what, call, error", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_raises_and_changes_nothing(busy, what, call, error):
    alloc, offer, answered = busy
    before = copy.deepcopy(alloc.snapshot())
    stats_before = alloc.statistics()
    with pytest.raises(error) as info:
        call(alloc, offer, answered)
    assert isinstance(info.value, MesoslikeError)
    assert str(info.value)  # a message a person can read
    assert alloc.snapshot() == before
    assert alloc.statistics() == stats_before
    alloc.check_invariants()


def test_every_allocator_error_is_a_mesoslike_error():
    for error in (UnknownAgentError, UnknownFrameworkError, UnknownOfferError, DuplicateAgentError,
                  DuplicateFrameworkError, InvalidRoleError, InvalidFilterError, RecoveryError, QuotaError,
                  WeightError, AgentCapacityError):
        assert issubclass(error, AllocatorError)
        assert issubclass(error, MesoslikeError)
    assert issubclass(UnknownAgentError, LookupError)
    assert issubclass(RecoveryError, ValueError)
