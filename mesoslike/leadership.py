"""Leadership as a table-driven machine, public for frameworks that elect a
leader of their own (docs/framework-api.rst, "A highly available framework").

The master's own machine (:mod:`mesoslike.master.leadership`, docs/ha.rst
shows its table): a candidate is a FOLLOWER until its contender is elected,
then reads its hard state (LOADING) and LEADS; a broken connection puts its
state aside (IN_DOUBT) until it is known whether the session survived. A
framework feeds it the same events (``ElectionWon``, ``Demoted``,
``ZnodeChanged``, ``Tick``, ``RegistryLoaded``, ``CoreBuilt``, ``Stored``,
``Fenced``...) and carries out its actions (``LoadRegistry``,
``BuildCore``, ``Serve``, ``Resume``, ``PutAside``, ``Drop``...), so that
every framework's rules of "who may act when" are the same table. Its
"core" is anything with a ``registry`` (what it believes is stored) and a
count ``registry_changes`` of the changes it made; its "registry" whatever
the framework's store loads.
"""

from __future__ import annotations

from mesoslike.master.leadership import (
    TRANSITIONS,
    Action,
    BuildCore,
    Commit,
    ConfirmLeadership,
    Confirmed,
    CoreBuilt,
    Demoted,
    Drop,
    ElectionWon,
    Event,
    Fenced,
    Leadership,
    LoadRegistry,
    Phase,
    PutAside,
    Refuted,
    RegistryLoaded,
    RegistryUnreadable,
    Resume,
    RetryLoading,
    Serve,
    SoftState,
    Stored,
    Tick,
    TurnEnded,
    TurnStarted,
    Unsent,
    ZnodeChanged,
    render_transitions,
)

__all__ = [
    "Leadership", "Phase", "SoftState", "TRANSITIONS", "render_transitions", "Event", "Action",
    # events
    "ElectionWon", "Demoted", "ZnodeChanged", "Tick", "RegistryLoaded", "RegistryUnreadable", "CoreBuilt",
    "TurnStarted", "TurnEnded", "Unsent", "Confirmed", "Refuted", "Stored", "Fenced",
    # actions
    "LoadRegistry", "BuildCore", "Serve", "Resume", "PutAside", "Drop", "ConfirmLeadership", "Commit",
    "RetryLoading",
]
