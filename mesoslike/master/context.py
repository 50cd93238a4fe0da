"""What every part of the master core shares (sans I/O): the clock, the
settings, the allocator, the registry (hard state) and its change count,
the framework and agent books (soft state), the command buffer, the
counters, and the checks every handler makes of a sender (ACLs, ownership).

:class:`~mesoslike.master.core.MasterCore` makes one :class:`CoreContext`
and hands it to its parts (framework and agent lifecycles, offers,
launches, update delivery, reconciliation, operator operations,
preemption); they change the shared state only through it and the books.
"""

from __future__ import annotations

import logging
import random
from typing import Callable, Mapping

from mesoslike.acl import Credentials, Refused
from mesoslike.allocator import HierarchicalAllocator
from mesoslike.clock import Clock
from mesoslike.master.agent_book import AgentBook
from mesoslike.master.framework_book import FrameworkBook
from mesoslike.master.outbox import Outbox
from mesoslike.master.records import AgentRecord, FrameworkRecord, MasterConfig, clip
from mesoslike.master.registry import Registry
from mesoslike.wire import MasterInfo

__all__ = ["CoreContext", "MAX_LOGGED_DROPS"]

log = logging.getLogger("mesoslike.master")

#: (key, kind) pairs whose dropped input was logged: later drops of that kind from that key are
#: only counted (bounded logging: a keyed agent cannot flood the log)
MAX_LOGGED_DROPS = 10_000

_COUNTERS = ("messages_received", "bad_messages", "tasks_launched", "tasks_invalid", "agents_removed",
             "frameworks_removed", "registration_retries", "preemptions_warned", "preemptions_killed",
             "preemptions_released", "offers_expired", "subscriptions_refused", "agent_registrations_refused",
             "reconciliations_refused", "reconcile_answers", "launches_resent", "tasks_unconfirmed",
             "tasks_unreported", "updates_reforwarded", "updates_held_back", "updates_settled_by_master",
             "reservation_operations", "operations_refused", "agents_unreachable", "agents_reachable_again",
             "agent_removals_canceled", "agents_gone", "unreachable_agents_forgotten", "reconcile_answers_held",
             "tasks_killed_on_return", "registrations_repeated", "registration_retries_ignored",
             "reregistrations_stale", "unreported_tasks_kept")


class CoreContext:
    """The state and services the core's parts share (see the module docstring).

    ``wall_clock``: seconds since the epoch for the statuses the master makes
    up, as agents stamp theirs (the runtime passes time.time). ``credentials``:
    with them, peers are principals and the ACLs apply (docs/security.rst).
    ``receipt_key`` signs and checks the receipts binding ids to principals
    (mesoslike.master.receipts); None: no receipts are given, none believed.
    ``term``: how many cores this master process has built (one per election
    it won): offers are not in the registry, so their ids carry the term — a
    master elected again keeps its id, and an ACCEPT naming an offer of its
    last term must not find a new offer that happens to have its number.
    """

    def __init__(self, clock: Clock, info: MasterInfo, config: MasterConfig, rng: random.Random,
                 registry: Registry, wall_clock: Callable[[], float], credentials: Credentials | None,
                 receipt_key: bytes | None, agent_peers: Mapping[str, bytes] | None, term: int = 1) -> None:
        self.clock = clock
        self.wall_clock = wall_clock
        self.info = info
        self.config = config
        self.rng = rng
        self.credentials = credentials
        self.receipt_key = receipt_key
        self.allocator = HierarchicalAllocator(
            clock, sorter=config.sorter, allocation_interval=config.allocation_interval,
            # offer_timeout is the core's: an expired offer counts as declined (OfferDesk.expire)
            min_allocatable=config.min_allocatable, offer_timeout=None,
            rng=rng, offer_id_prefix=f"{info.id}-O" if term == 1 else f"{info.id}-T{term}-O",
        )
        #: the hard state; ``registry_changes`` counts its changes so the runtime knows when to persist it
        self.registry = registry
        self.registry_changes = 0
        self.frameworks = FrameworkBook(info.id, registry.removed_frameworks, config.max_completed_frameworks)
        self.agents = AgentBook(info.id, registry.removed_agents, config.agent_removal_rate_limit, agent_peers)
        self.out = Outbox(clock)
        self.counters = dict.fromkeys(_COUNTERS, 0)
        #: authorization refusals, by the permission that was missing
        self.refused_by_permission: dict[str, int] = {}
        self._logged_drops: set[tuple[str, str]] = set()
        #: the gate every reader of the tasks passes first: makes the task records of agents re-registered
        #: since (AgentLifecycle.settle, which sets it)
        self.settle: Callable[[], object] = _nothing

    def registry_changed(self) -> None:
        self.registry_changes += 1

    # ------------------------------------------------------------ senders
    def authorize(self, principal: str | None, action: str, target: str | None = None) -> None:
        """Raise :class:`~mesoslike.acl.Refused` unless ``principal`` may do
        ``action`` (on the role or user ``target``). Anonymous clusters have no ACLs."""
        if self.credentials is not None:
            self.credentials.check(action, principal, target)

    def count_refusal(self, permission: str) -> None:
        self.refused_by_permission[permission] = self.refused_by_permission.get(permission, 0) + 1

    def refuse(self, peer: bytes, refused: Refused) -> None:
        """Tell ``peer`` the ACLs do not allow what it asked (naming the permission), and count it."""
        self.count_refusal(refused.permission)
        log.warning("refused %s: %s", clip(peer), refused)
        self.out.error(peer, str(refused))

    def owned(self, principal: str | None, owner: str, what: str) -> None:
        """Refuse using ``what`` (a framework or agent id owned by
        ``owner``) unless ``principal`` is that principal. An id whose owner
        is not known (learnt from an agent after the registry was lost, or
        registered while the cluster was anonymous) goes to the first
        principal that uses it."""
        if self.credentials is not None and owner and owner != principal:
            raise Refused("principal", f"not authorized: {what} belongs to another principal than "
                                       f"{principal or 'an anonymous peer'}")

    @staticmethod
    def owner(peer: bytes) -> bytes:
        """Who a registration from ``peer`` counts against for the
        per-connection bounds (``max_frameworks_per_connection``,
        ``max_agents_per_connection``): its connection, in a secured cluster
        too. A principal has bounds of its own over all its connections
        (``max_frameworks_per_principal``, ``max_agents_per_principal``: the
        books' ``principals``), large enough for ``mesoslike local``'s
        client to run several frameworks; whose an id is, is the principal's
        (see :meth:`owned`)."""
        return peer

    def framework_for(self, peer: bytes, framework_id: str) -> FrameworkRecord | None:
        """The framework a message from ``peer`` names, if it is subscribed on
        that connection; else None, and ``peer`` is told to subscribe."""
        record = self.frameworks.records.get(framework_id)
        if record is None or record.peer != peer or not record.connected:
            self.out.error(peer, f"framework {clip(framework_id)!r} is not subscribed on this connection; "
                                 "send SUBSCRIBE")
            return None
        return record

    def agent_for(self, peer: bytes) -> AgentRecord | None:
        """The registered agent on ``peer``; None (logged) for another connection."""
        agent = self.agents.on(peer)
        if agent is None:
            log.info("message from an unregistered agent connection %s ignored", clip(peer))
        return agent

    def log_once(self, key: str, kind: str, text: str) -> None:
        """Log ``text`` the first time an input of ``kind`` from ``key`` (an
        agent, a framework) is dropped; later ones are counted only
        (mesoslike_status_updates_dropped_total, ...). O(1), bounded."""
        seen = (key, kind)
        if seen in self._logged_drops or len(self._logged_drops) >= MAX_LOGGED_DROPS:
            return
        self._logged_drops.add(seen)
        log.warning("%s; further ones of this kind from this agent are only counted", text)


def _nothing() -> None:
    pass
