"""Leadership of a master, as a pure, table-driven state machine.

A master with ZooKeeper is a *follower* until its contender is elected;
then it reads the registry and *leads*. Connection trouble puts its soft
state (the core: tasks, offers, allocations) aside *in doubt* until it knows
whether its session survived. Every rule about what it may do in between —
and every race between ZooKeeper's threads and the master's loop that those
rules settle — lives here, as data: :data:`TRANSITIONS` lists, for each
phase and event, the condition, the next phase and the actions. docs/ha.rst
shows that table, rendered from it by :func:`render_transitions`.

The machine does no I/O and reads no clock (the runtime passes ``now``).
:class:`Leadership.process` takes one event and returns the actions the
runtime must carry out (read the registry, serve, confirm the session with
ZooKeeper, commit a turn's replies, drop the soft state...). Events about the
outcome of an action (:class:`RegistryLoaded`, :class:`Stored`...) come back
through ``process`` too. The runtime hands events from other threads
(ZooKeeper's) to the loop and feeds them *before* the loop's own next event,
in the order they arrived: what happened while the loop was busy counts
before what the loop did meanwhile (a demotion during a turn keeps that
turn's replies with the kept core).

The machine is generic in the core (:class:`SoftState`: its registry and a
count of its changes) so that its tests need no master.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, ClassVar, Generic, Protocol, TypeVar, Union

import attrs

from mesoslike.master.outbox import Send
from mesoslike.rst import simple_table

__all__ = [
    "Phase", "Peers", "PEERS", "SoftState", "Kept",
    "Follower", "Elected", "Loading", "Leading", "Confirming", "InDoubt", "State",
    "ElectionWon", "Demoted", "ZnodeChanged", "Tick", "RegistryLoaded", "RegistryUnreadable", "CoreBuilt",
    "TurnStarted", "TurnEnded", "Unsent", "Confirmed", "Refuted", "Stored", "Fenced", "Event",
    "LoadRegistry", "BuildCore", "Serve", "Resume", "PutAside", "Drop", "ConfirmLeadership", "Commit",
    "RetryLoading", "Action",
    "Transition", "TRANSITIONS", "Leadership", "render_transitions", "render_phases",
]


class Phase(enum.Enum):
    FOLLOWER = "follower"
    ELECTED = "elected"
    LOADING = "loading"
    LEADING = "leading"
    CONFIRMING = "confirming"
    IN_DOUBT = "in doubt"


class Peers(enum.Enum):
    """What the loop does with what agents and frameworks send."""

    REFUSE = "refused (an ERROR names the leader)"
    WAIT = "wait, unread"
    HANDLE = "handled by the core"


#: what each phase means for peers
PEERS: dict[Phase, Peers] = {
    Phase.FOLLOWER: Peers.REFUSE, Phase.ELECTED: Peers.WAIT, Phase.LOADING: Peers.WAIT,
    Phase.LEADING: Peers.HANDLE, Phase.CONFIRMING: Peers.WAIT, Phase.IN_DOUBT: Peers.WAIT,
}

_MEANING: dict[Phase, str] = {
    Phase.FOLLOWER: "another master leads, or none does yet",
    Phase.ELECTED: "the contender was elected: the loop reads the registry at its next turn, and "
                   "again every 0.5 s while it cannot (keeping its candidacy)",
    Phase.LOADING: "the loop reads the registry, then resumes the kept core or builds a fresh one",
    Phase.LEADING: "serving with its core; every registry write is fenced on the znode it loaded under",
    Phase.CONFIRMING: "a wait or a turn ran long: ZooKeeper is asked whether the session and the znode "
                      "are still ours before one more word is said",
    Phase.IN_DOUBT: "the connection broke: the core is kept aside until the session is known to survive "
                    "(elected again) or not (its znode gone or new, the session timeout passed, or "
                    "changes it made not stored); what it said and could not send is kept with it",
}


class SoftState(Protocol):
    """What the machine reads of a core: its registry (compared with what
    is loaded) and how many changes it made to it."""

    @property
    def registry(self) -> object: ...

    @property
    def registry_changes(self) -> int: ...


C = TypeVar("C", bound=SoftState)
Replies = tuple[Send, ...]


# ------------------------------------------------------------------ states
@attrs.frozen
class Kept(Generic[C]):
    """A core put aside when leadership went into doubt."""

    core: C
    fence: str | None          # the election znode it served under
    persisted: int             # its registry changes the registry is known to hold
    until: float               # given up at this time (a session timeout after the break)
    undelivered: Replies = ()  # what it said that was not sent: sent, late, if it leads on

    def saying(self, replies: Replies) -> Kept[C]:
        return attrs.evolve(self, undelivered=self.undelivered + replies)


@attrs.frozen
class Follower:
    phase: ClassVar[Phase] = Phase.FOLLOWER


@attrs.frozen
class Elected(Generic[C]):
    phase: ClassVar[Phase] = Phase.ELECTED
    kept: Kept[C] | None
    retry_at: float            # when the loop (again) reads the registry


@attrs.frozen
class Loading(Generic[C]):
    phase: ClassVar[Phase] = Phase.LOADING
    kept: Kept[C] | None


@attrs.frozen
class Leading(Generic[C]):
    phase: ClassVar[Phase] = Phase.LEADING
    core: C
    fence: str | None          # the election znode the registry was loaded under (None: standalone)
    persisted: int             # the core's registry changes the registry holds


@attrs.frozen
class Confirming(Generic[C]):
    phase: ClassVar[Phase] = Phase.CONFIRMING
    core: C
    fence: str | None
    persisted: int
    replies: Replies           # the turn's replies, committed once confirmed


@attrs.frozen
class InDoubt(Generic[C]):
    phase: ClassVar[Phase] = Phase.IN_DOUBT
    kept: Kept[C]


State = Union[Follower, Elected[C], Loading[C], Leading[C], Confirming[C], InDoubt[C]]


# ------------------------------------------------------------------ events
@attrs.frozen
class ElectionWon:
    """The contender was elected (its ``on_elected``)."""


@attrs.frozen
class Demoted:
    """The contender stopped leading: connection suspended or session lost,
    znode gone or not the lowest, stopped (its ``on_demoted``)."""

    reason: str


@attrs.frozen
class ZnodeChanged:
    """The contender's election znode is new (joined, rejoined) or gone
    (None: session lost, stopped) — its ``on_znode``."""

    znode: str | None


@attrs.frozen
class Tick:
    """The loop's turn begins (time-driven transitions: retrying a read,
    giving up a kept core)."""


@attrs.frozen
class RegistryLoaded:
    registry: object
    fence: str | None          # the znode it was loaded under


@attrs.frozen
class RegistryUnreadable:
    reason: str


@attrs.frozen
class CoreBuilt(Generic[C]):
    core: C
    fence: str | None


@attrs.frozen
class TurnStarted:
    """The loop woke from its wait ``gap`` seconds later than it planned."""

    gap: float


@attrs.frozen
class TurnEnded:
    """The core handled a batch in ``duration`` seconds and said ``replies``."""

    duration: float
    replies: Replies


@attrs.frozen
class Unsent:
    """Replies the loop stopped sending because leadership went into doubt."""

    replies: Replies


@attrs.frozen
class Confirmed:
    """ZooKeeper says the znode is still ours."""


@attrs.frozen
class Refuted:
    """ZooKeeper says it is not ours, or did not answer."""

    reason: str


@attrs.frozen
class Stored:
    """The registry holds the core's changes up to ``changes``."""

    changes: int


@attrs.frozen
class Fenced:
    """The registry refused a write (``RegistryFencedError``)."""

    reason: str


Event = Union[ElectionWon, Demoted, ZnodeChanged, Tick, RegistryLoaded, RegistryUnreadable, CoreBuilt[Any],
              TurnStarted, TurnEnded, Unsent, Confirmed, Refuted, Stored, Fenced]


# ----------------------------------------------------------------- actions
@attrs.frozen
class LoadRegistry:
    """Read the registry (fenced on the contender's znode); feed
    :class:`RegistryLoaded` or :class:`RegistryUnreadable`."""


@attrs.frozen
class BuildCore:
    """Build a fresh core from ``registry``; feed :class:`CoreBuilt`."""

    registry: object
    fence: str | None


@attrs.frozen
class Serve(Generic[C]):
    """Serve with a fresh core. Frames held for an older core are not its
    business: drop them (their peers retry)."""

    core: C


@attrs.frozen
class Resume(Generic[C]):
    """Serve again with the kept core; send what it said and could not
    (late rather than never: it believes it said it) and handle what waited."""

    core: C
    undelivered: Replies


@attrs.frozen
class PutAside:
    """Stop acting: the core is kept, peers' frames wait unread."""

    reason: str


@attrs.frozen
class Drop:
    """The soft state is gone (the serving or the kept core): drop it and the
    frames held for it; from now on peers are refused."""

    reason: str


@attrs.frozen
class ConfirmLeadership:
    """Ask ZooKeeper, now, whether the znode is still ours; feed
    :class:`Confirmed` or :class:`Refuted`."""

    gap: float


@attrs.frozen
class Commit:
    """Store the registry's changes (feed :class:`Stored` or :class:`Fenced`),
    then send ``replies``, stopping — and feeding :class:`Unsent` with the
    rest — the moment leadership is in doubt."""

    replies: Replies


@attrs.frozen
class RetryLoading:
    """The registry could not be read: say why; read it again at ``at``."""

    at: float
    reason: str


Action = Union[LoadRegistry, BuildCore, Serve[Any], Resume[Any], PutAside, Drop, ConfirmLeadership, Commit,
               RetryLoading]


# ------------------------------------------------------------- transitions
@attrs.frozen
class _Rules:
    hold_for: float                 # how long a kept core waits for re-election (the session timeout)
    stall_after: float | None       # a gap from which leadership is confirmed (None: never)
    retry_every: float              # between reads of a registry that could not be read


Step = Callable[[Any, Any, float, _Rules], tuple["State[Any]", list[Any]]]
Guard = Callable[[Any, Any, float, _Rules], bool]


@attrs.frozen
class Transition:
    """One row of the table: in ``source``, on an ``event`` for which
    ``guard`` holds (described by ``when``), go to ``target`` with
    ``actions``. ``step`` builds the next state and the actions' data."""

    source: Phase
    event: type
    when: str
    target: Phase
    actions: tuple[type, ...]
    step: Step = attrs.field(repr=False)
    guard: Guard | None = attrs.field(default=None, repr=False)


# guards
def _due(state: Elected[Any], event: Tick, now: float, rules: _Rules) -> bool:
    return now >= state.retry_at


def _kept(state: Elected[Any] | Loading[Any], event: object, now: float, rules: _Rules) -> bool:
    return state.kept is not None


def _not_kept(state: Elected[Any] | Loading[Any], event: object, now: float, rules: _Rules) -> bool:
    return state.kept is None


def _kept_znode_gone(state: Elected[Any] | Loading[Any] | InDoubt[Any], event: ZnodeChanged, now: float,
                     rules: _Rules) -> bool:
    return state.kept is not None and event.znode != state.kept.fence


def _znode_gone(state: Leading[Any] | Confirming[Any], event: ZnodeChanged, now: float, rules: _Rules) -> bool:
    return event.znode != state.fence


def _resumable(state: Loading[Any], event: RegistryLoaded, now: float, rules: _Rules) -> bool:
    kept = state.kept
    return kept is not None and kept.fence == event.fence and kept.core.registry == event.registry


def _not_resumable(state: Loading[Any], event: RegistryLoaded, now: float, rules: _Rules) -> bool:
    return state.kept is not None and not _resumable(state, event, now, rules)


def _stalled_wait(state: Leading[Any], event: TurnStarted, now: float, rules: _Rules) -> bool:
    return rules.stall_after is not None and event.gap >= rules.stall_after


def _stalled_turn(state: Leading[Any], event: TurnEnded, now: float, rules: _Rules) -> bool:
    return rules.stall_after is not None and event.duration >= rules.stall_after


def _expired(state: InDoubt[Any], event: Tick, now: float, rules: _Rules) -> bool:
    return now >= state.kept.until


def _unstored(state: InDoubt[Any], event: Tick, now: float, rules: _Rules) -> bool:
    return state.kept.persisted != state.kept.core.registry_changes


# steps
def _elect(state: Follower | InDoubt[Any], event: ElectionWon, now: float, rules: _Rules) -> tuple[State[Any], list]:
    return Elected(state.kept if isinstance(state, InDoubt) else None, retry_at=now), []


def _load(state: Elected[Any], event: Tick, now: float, rules: _Rules) -> tuple[State[Any], list]:
    return Loading(state.kept), [LoadRegistry()]


def _back_in_doubt(state: Elected[Any] | Loading[Any], event: Demoted, now: float,
                   rules: _Rules) -> tuple[State[Any], list]:
    assert state.kept is not None
    return InDoubt(state.kept), []


def _follow(state: object, event: object, now: float, rules: _Rules) -> tuple[State[Any], list]:
    return Follower(), []


def _drop_kept(state: Elected[Any] | Loading[Any], event: object, now: float,
               rules: _Rules) -> tuple[State[Any], list]:
    return attrs.evolve(state, kept=None), [Drop(_why(event, "the kept core"))]


def _keep_replies(state: Elected[Any] | InDoubt[Any], event: TurnEnded | Unsent, now: float,
                  rules: _Rules) -> tuple[State[Any], list]:
    assert state.kept is not None
    return attrs.evolve(state, kept=state.kept.saying(event.replies)), []


def _keep_stored(state: Elected[Any] | InDoubt[Any], event: Stored, now: float,
                 rules: _Rules) -> tuple[State[Any], list]:
    assert state.kept is not None
    return attrs.evolve(state, kept=attrs.evolve(state.kept, persisted=event.changes)), []


def _resume(state: Loading[Any], event: RegistryLoaded, now: float, rules: _Rules) -> tuple[State[Any], list]:
    kept = state.kept
    assert kept is not None
    return Leading(kept.core, kept.fence, kept.core.registry_changes), [Resume(kept.core, kept.undelivered)]


def _build(state: Loading[Any], event: RegistryLoaded, now: float, rules: _Rules) -> tuple[State[Any], list]:
    actions: list = []
    if state.kept is not None:
        actions.append(Drop("the kept core cannot serve: its znode or the registry changed"))
    return Loading(None), actions + [BuildCore(event.registry, event.fence)]


def _retry(state: Loading[Any], event: RegistryUnreadable, now: float, rules: _Rules) -> tuple[State[Any], list]:
    at = now + rules.retry_every
    return Elected(state.kept, retry_at=at), [RetryLoading(at, event.reason)]


def _serve(state: Loading[Any], event: CoreBuilt[Any], now: float, rules: _Rules) -> tuple[State[Any], list]:
    return Leading(event.core, event.fence, event.core.registry_changes), [Serve(event.core)]


def _put_aside(state: Leading[Any] | Confirming[Any], event: Demoted, now: float,
               rules: _Rules) -> tuple[State[Any], list]:
    replies = state.replies if isinstance(state, Confirming) else ()
    kept = Kept(state.core, state.fence, state.persisted, until=now + rules.hold_for, undelivered=replies)
    return InDoubt(kept), [PutAside(event.reason)]


def _drop(state: object, event: object, now: float, rules: _Rules) -> tuple[State[Any], list]:
    return Follower(), [Drop(_why(event, "the core"))]


def _confirm_wait(state: Leading[Any], event: TurnStarted, now: float, rules: _Rules) -> tuple[State[Any], list]:
    return Confirming(state.core, state.fence, state.persisted, ()), [ConfirmLeadership(event.gap)]


def _confirm_turn(state: Leading[Any], event: TurnEnded, now: float, rules: _Rules) -> tuple[State[Any], list]:
    return Confirming(state.core, state.fence, state.persisted, event.replies), [ConfirmLeadership(event.duration)]


def _commit(state: Leading[Any], event: TurnEnded | Unsent, now: float, rules: _Rules) -> tuple[State[Any], list]:
    return state, [Commit(event.replies)]


def _stored(state: Leading[Any], event: Stored, now: float, rules: _Rules) -> tuple[State[Any], list]:
    return attrs.evolve(state, persisted=event.changes), []


def _confirmed(state: Confirming[Any], event: Confirmed, now: float, rules: _Rules) -> tuple[State[Any], list]:
    return Leading(state.core, state.fence, state.persisted), [Commit(state.replies)]


def _give_up(state: InDoubt[Any], event: Tick, now: float, rules: _Rules) -> tuple[State[Any], list]:
    if _expired(state, event, now, rules):
        return Follower(), [Drop("not elected again within the session timeout")]
    return Follower(), [Drop("the registry lacks changes the kept core made")]


def _why(event: object, what: str) -> str:
    if isinstance(event, ZnodeChanged):
        return f"{what} served under another znode: the session is lost ({event.znode or 'no znode'})"
    if isinstance(event, (Fenced, Refuted)):
        return f"{what} may not serve: {event.reason}"
    return f"{what} cannot serve"


F, E, L, D, C_, I = (Phase.FOLLOWER, Phase.ELECTED, Phase.LOADING, Phase.LEADING, Phase.CONFIRMING,
                     Phase.IN_DOUBT)
_KEPT, _NOT_KEPT = "a core is kept", "no core is kept"
_ZNODE_GONE = "not the kept core's znode"

#: every transition; an event with no row in the current phase changes nothing
TRANSITIONS: tuple[Transition, ...] = (
    Transition(F, ElectionWon, "", E, (), _elect),
    Transition(E, Tick, "the read is due", L, (LoadRegistry,), _load, _due),
    Transition(E, Demoted, _KEPT, I, (), _back_in_doubt, _kept),
    Transition(E, Demoted, _NOT_KEPT, F, (), _follow, _not_kept),
    Transition(E, ZnodeChanged, _ZNODE_GONE, E, (Drop,), _drop_kept, _kept_znode_gone),
    Transition(E, Fenced, _KEPT, E, (Drop,), _drop_kept, _kept),
    Transition(E, Refuted, _KEPT, E, (Drop,), _drop_kept, _kept),
    Transition(E, TurnEnded, _KEPT, E, (), _keep_replies, _kept),
    Transition(E, Unsent, _KEPT, E, (), _keep_replies, _kept),
    Transition(E, Stored, _KEPT, E, (), _keep_stored, _kept),
    Transition(L, RegistryLoaded, "the kept core's znode and registry", D, (Resume,), _resume, _resumable),
    Transition(L, RegistryLoaded, "a kept core that cannot resume", L, (Drop, BuildCore), _build, _not_resumable),
    Transition(L, RegistryLoaded, _NOT_KEPT, L, (BuildCore,), _build, _not_kept),
    Transition(L, RegistryUnreadable, "", E, (RetryLoading,), _retry),
    Transition(L, CoreBuilt, "", D, (Serve,), _serve),
    Transition(L, Demoted, _KEPT, I, (), _back_in_doubt, _kept),
    Transition(L, Demoted, _NOT_KEPT, F, (), _follow, _not_kept),
    Transition(L, ZnodeChanged, _ZNODE_GONE, L, (Drop,), _drop_kept, _kept_znode_gone),
    Transition(D, Demoted, "", I, (PutAside,), _put_aside),
    Transition(D, ZnodeChanged, "not its znode", F, (Drop,), _drop, _znode_gone),
    Transition(D, TurnStarted, "a stall", C_, (ConfirmLeadership,), _confirm_wait, _stalled_wait),
    Transition(D, TurnEnded, "a stall", C_, (ConfirmLeadership,), _confirm_turn, _stalled_turn),
    Transition(D, TurnEnded, "", D, (Commit,), _commit),
    Transition(D, Unsent, "", D, (Commit,), _commit),
    Transition(D, Stored, "", D, (), _stored),
    Transition(D, Fenced, "", F, (Drop,), _drop),
    Transition(C_, Confirmed, "", D, (Commit,), _confirmed),
    Transition(C_, Refuted, "", F, (Drop,), _drop),
    Transition(C_, Demoted, "", I, (PutAside,), _put_aside),
    Transition(C_, ZnodeChanged, "not its znode", F, (Drop,), _drop, _znode_gone),
    Transition(I, ElectionWon, "", E, (), _elect),
    Transition(I, Tick, "the session timeout passed", F, (Drop,), _give_up, _expired),
    Transition(I, Tick, "changes not stored", F, (Drop,), _give_up, _unstored),
    Transition(I, ZnodeChanged, _ZNODE_GONE, F, (Drop,), _drop, _kept_znode_gone),
    Transition(I, TurnEnded, "", I, (), _keep_replies),
    Transition(I, Unsent, "", I, (), _keep_replies),
    Transition(I, Stored, "", I, (), _keep_stored),
    Transition(I, Fenced, "", F, (Drop,), _drop),
    Transition(I, Refuted, "", F, (Drop,), _drop),
)
del F, E, L, D, C_, I

_ROWS: dict[tuple[Phase, type], list[Transition]] = {}
for _row in TRANSITIONS:
    _ROWS.setdefault((_row.source, _row.event), []).append(_row)
del _row


# ------------------------------------------------------------------ machine
class Leadership(Generic[C]):
    """One master's leadership.

    ``hold_for``: how long a core kept after a connection break waits to be
    resumed (the ZooKeeper session timeout). ``stall_after``: a wait or a
    turn that ran this much longer than planned makes the master confirm
    its session with ZooKeeper before acting again (None: never, e.g. a
    standalone master). ``retry_every``: seconds between reads of a
    registry that could not be read.

    :meth:`process` is O(1): a dictionary lookup and at most three guards.
    """

    def __init__(self, hold_for: float, stall_after: float | None, retry_every: float = 0.5,
                 state: State[C] | None = None) -> None:
        self._rules = _Rules(hold_for, stall_after, retry_every)
        self.state: State[C] = state if state is not None else Follower()

    @classmethod
    def standalone(cls, core: C) -> Leadership[C]:
        """A master without ZooKeeper: it leads from the start, for good."""
        return cls(hold_for=0.0, stall_after=None, state=Leading(core, None, core.registry_changes))

    @property
    def phase(self) -> Phase:
        return self.state.phase

    @property
    def peers(self) -> Peers:
        return PEERS[self.state.phase]

    @property
    def leading(self) -> Leading[C] | None:
        """The state while leading (it has the core), else None."""
        return self.state if isinstance(self.state, Leading) else None

    @property
    def kept(self) -> Kept[C] | None:
        """The core put aside, if one is (in doubt, or elected and not serving yet)."""
        return self.state.kept if isinstance(self.state, (Elected, Loading, InDoubt)) else None

    def persisted(self, core: C) -> int | None:
        """How many of ``core``'s registry changes the registry holds; None
        if ``core`` is neither serving nor kept (dropped)."""
        state = self.state
        if isinstance(state, (Leading, Confirming)) and state.core is core:
            return state.persisted
        kept = self.kept
        return kept.persisted if kept is not None and kept.core is core else None

    def wakeup(self) -> float | None:
        """When a :class:`Tick` next changes something by itself (None: only an event will)."""
        state = self.state
        if isinstance(state, Elected):
            return state.retry_at
        if isinstance(state, InDoubt):
            return state.kept.until
        return None

    def transition(self, event: Event, now: float) -> Transition | None:
        """The row ``event`` follows now (None: it changes nothing)."""
        for row in _ROWS.get((self.state.phase, type(event)), ()):
            if row.guard is None or row.guard(self.state, event, now, self._rules):
                return row
        return None

    def process(self, event: Event, now: float) -> list[Action]:
        """Take ``event`` at time ``now``; return the actions to carry out, in order."""
        row = self.transition(event, now)
        if row is None:
            return []
        state, actions = row.step(self.state, event, now, self._rules)
        # the table is what docs/ha.rst shows: a step may not disagree with its row
        if state.phase is not row.target or tuple(type(a) for a in actions) != row.actions:
            raise AssertionError(f"{row} produced {state.phase} {actions}")
        self.state = state
        return actions

    def _check(self) -> None:
        """The invariants of the state (tests call it after every event)."""
        state = self.state
        assert state.phase in PEERS
        if isinstance(state, (Leading, Confirming)):
            assert state.persisted >= 0
        if isinstance(state, Confirming):
            assert self._rules.stall_after is not None, "only a master with ZooKeeper confirms"
        kept = self.kept
        if kept is not None:
            assert kept.until >= 0 and kept.persisted >= 0
        if state.phase is Phase.FOLLOWER:
            assert kept is None, "a follower refuses peers: it may keep no core that would own their frames"


# ------------------------------------------------------------------ docs
def render_transitions() -> str:
    """:data:`TRANSITIONS` as an RST table (docs/ha.rst includes it verbatim)."""
    header = ("state", "event", "when", "next state", "actions")
    rows = [(row.source.name, row.event.__name__, row.when or "—", row.target.name,
             ", ".join(action.__name__ for action in row.actions) or "—") for row in TRANSITIONS]
    return simple_table(header, rows)


def render_phases() -> str:
    """Each phase, what it means for peers and what it means, as an RST table."""
    header = ("state", "peers' messages", "meaning")
    rows = [(phase.name, PEERS[phase].value, _MEANING[phase]) for phase in Phase]
    return simple_table(header, rows)


if __name__ == "__main__":  # python -m mesoslike.master.leadership: the tables docs/ha.rst shows
    print(render_phases())
    print(render_transitions())
