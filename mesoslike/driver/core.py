"""The framework side of the scheduler conversation, sans-I/O.

:class:`DriverCore` is a pure state machine: the runtime
(:class:`mesoslike.driver.SchedulerDriver`) feeds it the master's messages
(:meth:`DriverCore.receive`), the passing of time (:meth:`DriverCore.tick`,
with :meth:`DriverCore.next_deadline` saying when) and the framework's calls
(``launch_tasks`` ...). Each returns a list of *commands* the runtime carries
out in order:

- :class:`SendToMaster` — send a wire message now;
- :class:`InvokeCallback` — call ``scheduler.<name>(driver, *args)``, then
  report back with :meth:`DriverCore.callback_returned` (implicit
  acknowledgements happen there);
- :class:`Reconnect` — throw the connection away and open a fresh one;
- :class:`Shutdown` — the session is over (after the callbacks queued before it).

It takes a :class:`~mesoslike.clock.Clock` and a :class:`random.Random`; it
never reads the time, sleeps, or touches a socket, so tests drive it with a
``FakeClock``. The protocol it keeps is the "Conversations" section of
``docs/wire.rst``.
"""

from __future__ import annotations

import enum
import logging
import random
from collections import deque
from typing import Any, Callable, Iterable, Union

import msgspec

from mesoslike.backoff import Backoff
from mesoslike.clock import Clock
from mesoslike.wire import messages as m
from mesoslike.wire.types import (MAX_FRAMEWORK_MESSAGE, MAX_OPERATIONS, Filters, FrameworkInfo, MasterInfo, Operation,
                                  TaskInfo, TaskState, TaskStatus)

__all__ = [
    "DriverCore", "SubscriptionState", "Backoff", "Command", "SendToMaster", "InvokeCallback", "InvokeUpdates",
    "Reconnect",
    "Shutdown", "DEFAULT_HEARTBEAT_TIMEOUTS", "offer_id_list", "task_list", "reconcile_task_list", "message_data",
    "filters_or_default", "DeliveredUpdates", "DEFAULT_REMEMBERED_UPDATES", "TEARDOWN_WAIT",
    "SAME_CONNECTION_RETRIES_FOR",
]

log = logging.getLogger(__name__)

#: heartbeat intervals of silence after which the master counts as gone
#: (the master uses the same multiple for frameworks: ``framework_timeout``)
DEFAULT_HEARTBEAT_TIMEOUTS = 5

#: seconds after a connection was made for a SUBSCRIBE during which the
#: SUBSCRIBE's retries go over it (as Mesos's driver retries over its link);
#: later ones make a fresh connection (one stalled in the kernel's
#: retransmission back-off after a partition must not hold the framework up).
#: A retry over a fresh connection while the master has not yet read the
#: SUBSCRIBE of the old one leaves two SUBSCRIBEs from two connections, which
#: the master may read in either order (ZeroMQ queues per connection): the
#: one read last decides where the framework's events go, and if that is the
#: closed connection the framework hears nothing until its master-silence
#: timeout (a busy new leader after a failover: 75 s; docs/ha.rst)
SAME_CONNECTION_RETRIES_FOR = 30.0

#: how many update uuids the driver remembers to keep redeliveries from the
#: scheduler (docs/framework-api.rst, "Delivery"); ~13 MB at most
DEFAULT_REMEMBERED_UPDATES = 100_000

DROPPED_MESSAGE = "launch_tasks while the driver was not subscribed to a master: the tasks were not sent"

#: seconds a stopping driver waits, after its TEARDOWN, for the master's word
#: that the framework is gone (the fatal ERROR it sends the framework it
#: removes) before it ends anyway: a program that exits once its driver has
#: ended (``mesoslike run``) must not leave the TEARDOWN queued behind it
TEARDOWN_WAIT = 1.0


class SubscriptionState(enum.Enum):
    """Where the driver stands with the master."""

    DISCONNECTED = "DISCONNECTED"   # not started yet (or the master was just declared gone)
    SUBSCRIBING = "SUBSCRIBING"     # SUBSCRIBE sent, waiting for SUBSCRIBED; retried with backoff
    SUBSCRIBED = "SUBSCRIBED"       # calls go out; heartbeats both ways
    STOPPED = "STOPPED"             # stopped or aborted: nothing more happens


# ------------------------------------------------------------------ commands
class SendToMaster(msgspec.Struct, frozen=True, gc=False):
    """Send ``message`` to the master now. (This and :class:`InvokeCallback`,
    made for every update and acknowledgement, are msgspec Structs: built in
    C, a quarter of a frozen attrs class's cost.)"""

    message: object


class InvokeCallback(msgspec.Struct, frozen=True):
    """Call ``scheduler.<name>(driver, *args)``, then ``core.callback_returned(self)``."""

    name: str
    args: tuple = ()


class InvokeUpdates(msgspec.Struct, frozen=True):
    """``scheduler.status_update(driver, status)`` for each of ``statuses``
    in turn, each followed by ``core.update_returned(status)`` — what an
    :class:`InvokeCallback` of each, and ``callback_returned``, do — as one
    command: a run of new updates of an UPDATES frame (:meth:`DriverCore.receive`
    with ``grouped``; none after a stop or an abort, as for the commands of
    each)."""

    statuses: list


class Reconnect(msgspec.Struct, frozen=True):
    """Close the connection and open a fresh one, discarding what the old one
    still queues (stale SUBSCRIBEs and heartbeats for a master that is gone)."""


class Shutdown(msgspec.Struct, frozen=True):
    """End the session once the callbacks queued before this command have
    run; ``aborted`` when the driver did not stop on request."""

    aborted: bool = False


Command = Union[SendToMaster, InvokeCallback, InvokeUpdates, Reconnect, Shutdown]


class DeliveredUpdates:
    """The updates (by uuid) given to ``status_update``, so that the same
    update redelivered — an agent retries until its acknowledgement arrives,
    and the master forwards a retry when the first may not have arrived —
    never reaches the callback again once acknowledged.

    Each uuid is *pending* (its callback is queued or running), *delivered*
    (the callback returned; with explicit acknowledgements the framework has
    yet to acknowledge) or *acknowledged* — in which session (0: while not
    subscribed, when the acknowledgement could not be sent). The
    ``capacity`` most recent are remembered; an update redelivered after
    that many newer ones is delivered again. O(1) per update; ``_check()``
    states the invariants."""

    PENDING, DELIVERED, ACKNOWLEDGED = 0, 1, 2

    def __init__(self, capacity: int = DEFAULT_REMEMBERED_UPDATES) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self.capacity = capacity
        #: uuid -> PENDING, DELIVERED, or ACKNOWLEDGED + the session. A plain dict, with the uuids
        #: in the order they came in a deque beside it (the same set: only :meth:`add` and
        #: :meth:`first_sight` add, only they forget, the oldest first): an OrderedDict forgot its
        #: oldest in O(1) too, but made a linked-list node for each uuid — adding one cost twice a
        #: dict's, 9 % of the driver's work an update. (A dict alone's ``next(iter(d))`` walks over
        #: every slot deleted before it since its last resize — O(capacity) an update once the
        #: capacity was reached: a framework's 150,000 tasks spent 190 µs of CPU a task.)
        self._states: dict[str, int] = {}
        self._order: deque[str] = deque()

    def __len__(self) -> int:
        return len(self._states)

    def state(self, uuid: str) -> int | None:
        """PENDING, DELIVERED, ACKNOWLEDGED, or None for an update not remembered."""
        value = self._states.get(uuid)
        return None if value is None else min(value, self.ACKNOWLEDGED)

    def session(self, uuid: str) -> int | None:
        """The session an acknowledged update was acknowledged in."""
        value = self._states.get(uuid)
        return None if value is None or value < self.ACKNOWLEDGED else value - self.ACKNOWLEDGED

    def add(self, uuid: str) -> None:
        """A new update goes to the callback."""
        states = self._states
        if uuid not in states:
            self._remember(uuid)
        states[uuid] = self.PENDING

    def first_sight(self, uuid: str) -> int | None:
        """:meth:`state`, and for an update not remembered (None) :meth:`add`
        as well: one lookup for the common case, a new update."""
        states = self._states
        value = states.get(uuid)
        if value is None:
            self._remember(uuid)
            states[uuid] = self.PENDING
            return None
        return value if value < self.ACKNOWLEDGED else self.ACKNOWLEDGED

    def _remember(self, uuid: str) -> None:
        """Note ``uuid`` as the newest, forgetting the oldest past the capacity."""
        order = self._order
        order.append(uuid)
        if len(order) > self.capacity:
            del self._states[order.popleft()]

    def delivered(self, uuid: str) -> None:
        """Its callback returned (explicit acknowledgements: not acknowledged yet)."""
        if self._states.get(uuid) == self.PENDING:
            self._states[uuid] = self.DELIVERED

    def acknowledged(self, uuid: str, session: int) -> None:
        """Acknowledged in ``session`` (a forgotten uuid stays forgotten)."""
        states = self._states
        if uuid in states:
            states[uuid] = self.ACKNOWLEDGED + session if session > 0 else self.ACKNOWLEDGED

    def again(self, uuid: str) -> None:
        """A delivered, unacknowledged update goes to the callback again."""
        if self._states.get(uuid) == self.DELIVERED:
            self._states[uuid] = self.PENDING

    def _check(self) -> None:
        assert len(self._states) <= self.capacity
        assert list(self._order) == list(self._states), "the order is the uuids', oldest first"
        assert all(isinstance(value, int) and value >= 0 for value in self._states.values())


# -------------------------------------------------- argument normalization
# The driver runs these in the caller's thread, so a bad argument raises
# there and not later on the driver thread.
def offer_id_list(offer_ids: Iterable[str]) -> list[str]:
    """A list of offer ids; a bare string is a mistake, not a list of letters."""
    if isinstance(offer_ids, str):
        raise TypeError("offer_ids must be a list of offer ids, not a string")
    ids = list(offer_ids)
    for offer_id in ids:
        if not isinstance(offer_id, str):
            raise TypeError(f"an offer id must be a str, got {type(offer_id).__name__}")
    return ids


def task_list(tasks: Iterable[TaskInfo]) -> list[TaskInfo]:
    items = list(tasks)
    for task in items:
        if not isinstance(task, TaskInfo):
            raise TypeError(f"tasks must be TaskInfo objects, got {type(task).__name__}")
    return items


def operation_list(operations: Iterable[Operation]) -> list[Operation]:
    """A list of :class:`Operation` (``Launch``, ``Reserve``, ``Unreserve``), at most MAX_OPERATIONS."""
    items = list(operations)
    for operation in items:
        if not isinstance(operation, Operation):
            raise TypeError(f"operations must be Operation objects (Launch, Reserve, Unreserve), "
                            f"got {type(operation).__name__}")
    if len(items) > MAX_OPERATIONS:
        raise ValueError(f"at most {MAX_OPERATIONS} operations in one accept, got {len(items)}")
    return items


def reconcile_task_list(tasks: Iterable[TaskStatus | str | m.ReconcileTask]) -> list[m.ReconcileTask]:
    """Task ids, TaskStatus objects (their ``task_id``/``agent_id``) or
    ReconcileTask; an empty list asks for every task (implicit)."""
    if isinstance(tasks, str):
        raise TypeError("tasks must be a list (of task ids or TaskStatus), not a string")
    result = []
    for task in tasks:
        if isinstance(task, m.ReconcileTask):
            result.append(task)
        elif isinstance(task, TaskStatus):
            result.append(m.ReconcileTask(task.task_id, task.agent_id))
        elif isinstance(task, str):
            result.append(m.ReconcileTask(task))
        else:
            raise TypeError(f"cannot reconcile a {type(task).__name__}: give task ids or TaskStatus objects")
    return result


def message_data(data: bytes | bytearray | memoryview, max_size: int = MAX_FRAMEWORK_MESSAGE) -> bytes:
    """``data`` of a framework message, as bytes; ValueError above ``max_size``
    (the cluster's ``--max-message-size``)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"framework message data must be bytes, got {type(data).__name__}")
    if len(data) > max_size:
        raise ValueError(f"a framework message holds at most {max_size} bytes (the cluster's --max-message-size; "
                         f"the driver's max_message_size), got {len(data)}")
    return bytes(data)


def message_task(task_id: str, executor_id: str = "") -> str:
    """The task a framework message is for: an agent delivers a message to a
    running task's ``<sandbox>/messages`` (or its custom executor) and drops
    one without a task, so a call without one — and without the
    ``executor_id`` of a custom executor — is refused here, in the caller's
    thread. Data for an executor is bounded (``MAX_FRAMEWORK_MESSAGE``)."""
    if not isinstance(task_id, str) or not isinstance(executor_id, str):
        raise TypeError(f"framework message task_id and executor_id must be str, got {type(task_id).__name__}")
    if not task_id and not executor_id:
        raise ValueError("a framework message needs the task_id of a running task (or the executor_id of a custom "
                         "executor): the agent appends it to that task's <sandbox>/messages and drops a message "
                         "without one")
    return task_id


def filters_or_default(filters: Filters | None) -> Filters:
    if filters is None:
        return Filters()
    if not isinstance(filters, Filters):
        raise TypeError(f"filters must be a Filters, got {type(filters).__name__}")
    return filters


# ---------------------------------------------------------------------- core
class DriverCore:
    """The scheduler driver's decisions, without I/O. See the module docstring."""

    def __init__(self, framework: FrameworkInfo, clock: Clock, rng: random.Random, *,
                 implicit_acknowledgements: bool = True, backoff: Backoff = Backoff(),
                 heartbeat_timeouts: int = DEFAULT_HEARTBEAT_TIMEOUTS,
                 remembered_updates: int = DEFAULT_REMEMBERED_UPDATES, teardown_wait: float = TEARDOWN_WAIT) -> None:
        if not isinstance(framework, FrameworkInfo):
            raise TypeError(f"framework must be a FrameworkInfo, got {type(framework).__name__}")
        self._framework = framework
        self._clock = clock
        self._rng = rng
        self._backoff = backoff
        self._heartbeat_timeouts = heartbeat_timeouts
        self.implicit_acknowledgements = implicit_acknowledgements
        self.state = SubscriptionState.DISCONNECTED
        #: kept across re-subscriptions; a FrameworkInfo with an id resumes that framework
        self.framework_id: str = framework.id
        #: the framework wants no offers (suppress_offers until revive_offers), kept across
        #: re-subscriptions and set while not subscribed too: every SUBSCRIBE states it
        #: (``suppressed_roles``) and the master takes it, as Mesos's driver and master do
        self.suppressed = False
        self.master_info: MasterInfo | None = None
        self.heartbeat_interval: float | None = None
        #: the master takes ACKNOWLEDGEMENTS (it said so in SUBSCRIBED): the runtime batches for it
        self.master_accepts_batches = False
        self._ever_subscribed = False
        self._subscribe_attempts = 0   # unanswered SUBSCRIBEs since the last answer or new master
        self._retry_at: float | None = None
        #: when the connection the SUBSCRIBEs go over was made
        self._connection_made = clock.now()
        self._last_sent = self._last_received = clock.now()
        #: updates given to the scheduler, so a redelivery is not given again
        self.delivered = DeliveredUpdates(remembered_updates)
        #: redelivered updates kept from the callback (acknowledged again if they were)
        self.redeliveries = 0
        #: counts subscriptions (SUBSCRIBED answers): an acknowledgement sent
        #: in this session is on its way — the transport does not drop it —
        #: and one sent in an earlier session (another connection) may not be
        self._session = 0
        self._teardown_wait = teardown_wait
        #: after a TEARDOWN: until when the master's confirmation is awaited (None: not awaiting one)
        self._teardown_until: float | None = None

    @property
    def connected(self) -> bool:
        return self.state is SubscriptionState.SUBSCRIBED

    # ------------------------------------------------------------- lifecycle
    def start(self) -> list[Command]:
        """Send the first SUBSCRIBE."""
        if self.state is not SubscriptionState.DISCONNECTED:
            return []
        self._connection_made = self._clock.now()   # the runtime's first connection
        return self._subscribe(fresh_connection=False)

    def stop(self, failover: bool = False) -> list[Command]:
        """End the session. Without ``failover`` the master is told to remove
        the framework and kill its tasks (TEARDOWN), and the session ends
        (:class:`Shutdown`) once the master confirms it — the fatal ERROR
        it sends the framework it removed — or ``teardown_wait`` seconds
        later; with it, the driver just goes quiet and the tasks run on for
        ``failover_timeout``. No callback follows either way."""
        if self.state is SubscriptionState.STOPPED:
            return []
        # as in Mesos, TEARDOWN only goes to a master we are subscribed to; a
        # master that cannot hear it removes the framework after failover_timeout
        if not failover and self.connected:
            teardown = self._send(m.Teardown(self.framework_id))
            self.state = SubscriptionState.STOPPED
            self._teardown_until = self._clock.now() + self._teardown_wait
            return [teardown]
        self.state = SubscriptionState.STOPPED
        return [Shutdown(aborted=False)]

    def _torn_down(self, why: str) -> list[Command]:
        log.debug("teardown: %s", why)
        self._teardown_until = None
        return [Shutdown(aborted=False)]

    def abort(self) -> list[Command]:
        """End the session without TEARDOWN (tasks keep running, as with failover)."""
        if self.state is SubscriptionState.STOPPED:
            return []
        self.state = SubscriptionState.STOPPED
        return [Shutdown(aborted=True)]

    # ------------------------------------------------------------------ time
    def next_deadline(self) -> float | None:
        """When :meth:`tick` has something to do (clock time), or None."""
        if self._teardown_until is not None:
            return self._teardown_until
        if self.state is SubscriptionState.SUBSCRIBING:
            return self._retry_at
        if self.state is SubscriptionState.SUBSCRIBED and self.heartbeat_interval:
            return min(self._last_sent + self.heartbeat_interval, self._master_deadline())
        return None

    def tick(self) -> list[Command]:
        """Retry a subscription, send a heartbeat, or give up on a silent master."""
        now = self._clock.now()
        if self._teardown_until is not None:
            if now < self._teardown_until:
                return []
            return self._torn_down(f"no confirmation from the master within {self._teardown_wait:g} s; ending anyway")
        if self.state is SubscriptionState.SUBSCRIBING and self._retry_at is not None and now >= self._retry_at:
            log.info("no answer to SUBSCRIBE yet; retrying")
            # without an id, the master can only tell a retry from a second
            # framework by the connection: keep it. With one, retry over the
            # connection for SAME_CONNECTION_RETRIES_FOR seconds (a busy master
            # reads one connection's SUBSCRIBEs in order), then over fresh ones
            # (the id names the framework; unanswered SUBSCRIBEs for a master
            # that is down do not pile up in a stalled connection)
            fresh = bool(self.framework_id) and now - self._connection_made >= SAME_CONNECTION_RETRIES_FOR
            return self._subscribe(fresh_connection=fresh)
        if self.state is SubscriptionState.SUBSCRIBED and self.heartbeat_interval:
            if now >= self._master_deadline():
                return self._master_gone()
            if now >= self._last_sent + self.heartbeat_interval:
                return [self._send(m.Heartbeat())]
        return []

    # ---------------------------------------------------------------- events
    def receive(self, message: object, grouped: bool = False) -> list[Command]:
        """A message from the master. ``grouped``: an UPDATES frame's
        consecutive new updates as one :class:`InvokeUpdates` (the runtime's
        path), not an :class:`InvokeCallback` each."""
        if self.state in (SubscriptionState.DISCONNECTED, SubscriptionState.STOPPED):
            if self._teardown_until is not None and isinstance(message, m.Error) and message.fatal:
                return self._torn_down(f"confirmed by the master: {message.message}")
            log.debug("ignoring %s: the driver is %s", type(message).__name__, self.state.value)
            return []
        if isinstance(message, m.Error):
            # an ERROR is no sign that the master still holds our session: a
            # master restarted at the same address answers every call of a
            # framework it forgot with ERROR, and counting those as heartbeats
            # would keep the dead session alive forever
            return self._on_error(message)
        self._last_received = self._clock.now()
        if isinstance(message, m.Subscribed):
            return self._on_subscribed(message)
        if not self.connected:
            # events of a session we are not (yet) part of; the master sends
            # them again, or the framework reconciles, after SUBSCRIBED
            log.debug("ignoring %s while subscribing", type(message).__name__)
            return []
        if type(message) is m.Updates:
            # each status as if it came in an UPDATE of its own, in order (docs/wire.rst, "Batching");
            # a new update (nearly all) to its callback here, without _on_status's list of one
            commands: list[Command] = []
            first_sight = self.delivered.first_sight
            if grouped:
                run: list[TaskStatus] | None = None
                # (DeliveredUpdates.first_sight and _remember inlined: two calls less an update)
                delivered = self.delivered
                states, order, capacity, pending = delivered._states, delivered._order, delivered.capacity, \
                    DeliveredUpdates.PENDING
                for status in message.statuses:
                    uuid = status.uuid
                    if not uuid:
                        seen = False
                    elif uuid in states:
                        seen = True
                    else:
                        seen = False
                        order.append(uuid)
                        if len(order) > capacity:
                            del states[order.popleft()]
                        states[uuid] = pending
                    if seen:
                        again = self._seen_again(status)
                        if again:
                            commands += again
                            run = None   # (its callback, or the acknowledgement, keeps its place in the order)
                    elif run is None:
                        run = [status]
                        commands.append(InvokeUpdates(run))
                    else:
                        run.append(status)
                return commands
            for status in message.statuses:
                if status.uuid and first_sight(status.uuid) is not None:
                    commands += self._seen_again(status)
                else:
                    commands.append(InvokeCallback("status_update", (status,)))
            return commands
        handler = self._EVENT_HANDLERS.get(type(message))
        if handler is None:
            log.warning("ignoring unexpected %s from the master", type(message).__name__)
            return []
        return handler(self, message)

    def callback_returned(self, invocation: InvokeCallback) -> list[Command]:
        """The runtime finished ``invocation`` (whether or not it raised)."""
        if invocation.name != "status_update":
            return []
        acknowledgement = self.update_returned(invocation.args[0])
        return [SendToMaster(acknowledgement)] if acknowledgement is not None else []

    def update_returned(self, status: TaskStatus, stamp: bool = True) -> m.Acknowledge | None:
        """``status_update(status)`` returned: what :meth:`callback_returned`
        does for it, the acknowledgement to send (if any) as the message
        itself — the runtime's path for each update, without the commands'
        list and wrapper. ``stamp`` False: the caller calls :meth:`note_sent`
        once after a run of them (the heartbeat's clock read once a run, not
        once an update)."""
        uuid = status.uuid
        if not self.implicit_acknowledgements:
            if uuid:
                self.delivered.delivered(uuid)
            return None
        if not uuid or self.state is not SubscriptionState.SUBSCRIBED:
            return self._acknowledgement(status)
        # (_acknowledgement's common case inlined, DeliveredUpdates.acknowledged's too: one call an update
        # where there were four)
        states = self.delivered._states
        if uuid in states:
            states[uuid] = DeliveredUpdates.ACKNOWLEDGED + self._session
        if stamp:
            self._last_sent = self._clock.now()
        return m.Acknowledge(self.framework_id, status.agent_id, status.task_id, uuid)

    def note_sent(self) -> None:
        """Something went to the master now (the acknowledgements of a run of
        :meth:`update_returned` with ``stamp`` False): the next heartbeat is
        due a heartbeat interval from now."""
        self._last_sent = self._clock.now()

    def _on_subscribed(self, message: m.Subscribed) -> list[Command]:
        if not message.framework_id:
            log.error("ignoring SUBSCRIBED without a framework id")
            return []
        if self.connected:
            # the answer to a retried SUBSCRIBE: one session, one callback
            if message.framework_id != self.framework_id:
                log.warning("ignoring SUBSCRIBED for framework %s: subscribed as %s",
                            message.framework_id, self.framework_id)
            return []
        new_framework = not self._ever_subscribed or message.framework_id != self.framework_id
        if self._ever_subscribed and new_framework:
            log.warning("the master gave a new framework id %s (was %s): the old framework is gone",
                        message.framework_id, self.framework_id)
        self.framework_id = message.framework_id
        self.master_info = message.master
        self.master_accepts_batches = message.accepts_batches
        self.heartbeat_interval = message.heartbeat_interval if message.heartbeat_interval > 0 else None
        self.state = SubscriptionState.SUBSCRIBED
        self._session += 1
        self._ever_subscribed = True
        self._retry_at = None
        self._subscribe_attempts = 0
        log.info("subscribed as framework %s to master %s", self.framework_id, message.master.address)
        if new_framework:
            return [InvokeCallback("registered", (self.framework_id, message.master))]
        return [InvokeCallback("reregistered", (message.master,))]

    def _on_error(self, message: m.Error) -> list[Command]:
        commands: list[Command] = [InvokeCallback("error", (message.message,))]
        if message.fatal:
            log.error("the master ended the session: %s", message.message)
            self.state = SubscriptionState.STOPPED
            commands.append(Shutdown(aborted=True))
        return commands

    def _on_offers(self, message: m.Offers) -> list[Command]:
        return [InvokeCallback("resource_offers", (list(message.offers),))] if message.offers else []

    def _on_rescind(self, message: m.RescindOffer) -> list[Command]:
        return [InvokeCallback("offer_rescinded", (message.offer_id,))]

    def _on_update(self, message: m.Update) -> list[Command]:
        return self._on_status(message.status)

    def _on_status(self, status: TaskStatus) -> list[Command]:
        """An UPDATE's status, or one of an UPDATES' (not made an UPDATE
        first: 5 % of the framework's CPU in the control plane). Never to the
        callback again once acknowledged (docs/framework-api.rst,
        "Delivery"): a redelivery of an update acknowledged in an earlier
        session (another connection, or none) is acknowledged again — that
        acknowledgement may not have reached the agent; one acknowledged in
        this session, or whose callback is still queued or running, is
        dropped. With
        explicit acknowledgements, an update the framework has not
        acknowledged after its callback returned is given again, as the
        agent retries it until it is. Updates without a uuid (made by the
        master: reconciliation, TASK_LOST...) always go through."""
        if status.uuid and self.delivered.first_sight(status.uuid) is not None:   # (new: None, remembered)
            return self._seen_again(status)
        return [InvokeCallback("status_update", (status,))]

    def _seen_again(self, status: TaskStatus) -> list[Command]:
        """An update whose uuid the driver remembers (:meth:`_on_status`)."""
        seen = self.delivered.state(status.uuid)
        if seen == DeliveredUpdates.DELIVERED:
            self.delivered.again(status.uuid)
            return [InvokeCallback("status_update", (status,))]
        self.redeliveries += 1
        log.debug("update %s of task %s redelivered: not given to the scheduler again", status.uuid,
                  status.task_id)
        if seen == DeliveredUpdates.ACKNOWLEDGED and self.delivered.session(status.uuid) != self._session:
            return self._acknowledge(status)
        return []   # its callback has not returned yet, or our acknowledgement is on its way

    def _on_preemption_warning(self, message: m.PreemptionWarning) -> list[Command]:
        return [InvokeCallback("preemption_warning", (list(message.task_ids), message.seconds))]

    def _on_failure(self, message: m.Failure) -> list[Command]:
        if message.executor_id:
            return [InvokeCallback("executor_lost", (message.executor_id, message.agent_id, message.status))]
        return [InvokeCallback("agent_lost", (message.agent_id,))]

    def _on_framework_message(self, message: m.FrameworkMessage) -> list[Command]:
        if message.executor_id:   # from a custom executor: say which (its default is framework_message)
            return [InvokeCallback("executor_message", (message.executor_id, message.agent_id, message.data))]
        return [InvokeCallback("framework_message", (message.agent_id, message.data))]

    def _on_heartbeat(self, message: m.Heartbeat) -> list[Command]:
        return []  # receiving it already counted as hearing from the master

    # type -> handler; each handler takes the message of its key's type
    _EVENT_HANDLERS: dict[type, Callable[[DriverCore, Any], list[Command]]] = {
        m.Offers: _on_offers,
        m.RescindOffer: _on_rescind,
        m.Update: _on_update,
        m.Failure: _on_failure,
        m.PreemptionWarning: _on_preemption_warning,
        m.FrameworkMessage: _on_framework_message,
        m.Heartbeat: _on_heartbeat,
    }

    # ----------------------------------------------------------------- calls
    def launch_tasks(self, offer_ids: Iterable[str], tasks: Iterable[TaskInfo],
                     filters: Filters | None = None) -> list[Command]:
        """ACCEPT the offers with these tasks; the unused rest is declined
        with ``filters``. While not subscribed the tasks come back as
        TASK_DROPPED updates and an error (so they do not vanish silently)."""
        ids, task_infos, filters = offer_id_list(offer_ids), task_list(tasks), filters_or_default(filters)
        if not self.connected:
            return self._drop_launch(task_infos)
        return [self._send(m.Accept(self.framework_id, ids, task_infos, filters))]

    def accept_offers(self, offer_ids: Iterable[str], operations: Iterable[Operation],
                      filters: Filters | None = None) -> list[Command]:
        """ACCEPT the offers with ``operations`` applied in order; the
        unused rest is declined with ``filters``. While not subscribed the
        launches come back as TASK_DROPPED updates and an error."""
        ids, items, filters = offer_id_list(offer_ids), operation_list(operations), filters_or_default(filters)
        if not self.connected:
            return self._drop_launch([task for operation in items for task in operation.tasks])
        return [self._send(m.Accept(self.framework_id, ids, [], filters, operations=items))]

    def decline_offer(self, offer_id: str, filters: Filters | None = None) -> list[Command]:
        ids, filters = offer_id_list([offer_id]), filters_or_default(filters)
        return self._call("decline_offer", lambda: m.Decline(self.framework_id, ids, filters))

    def suppress_offers(self) -> list[Command]:
        """SUPPRESS now, or — not subscribed — in the next SUBSCRIBE (never dropped)."""
        return self._set_suppressed(True, "suppress_offers", lambda: m.Suppress(self.framework_id))

    def update_framework(self, framework: FrameworkInfo) -> list[Command]:
        """UPDATE_FRAMEWORK: ``framework`` (its name, failover timeout,
        labels, web UI, host name, partition awareness) from now on, also
        when the driver subscribes again."""
        if not isinstance(framework, FrameworkInfo):
            raise TypeError(f"update_framework takes a FrameworkInfo, got {type(framework).__name__}")
        self._framework = framework.replace(id="")
        return self._call("update_framework", lambda: m.UpdateFramework(framework.replace(id=self.framework_id)))

    def revive_offers(self) -> list[Command]:
        """REVIVE now (it clears the filters too), or — not subscribed — no
        suppression in the next SUBSCRIBE (never dropped)."""
        return self._set_suppressed(False, "revive_offers", lambda: m.Revive(self.framework_id))

    def _set_suppressed(self, suppressed: bool, name: str, build: Callable[[], object]) -> list[Command]:
        if self.state is SubscriptionState.STOPPED:
            return self._call(name, build)   # says it is dropped
        self.suppressed = suppressed
        if not self.connected:
            log.debug("%s while %s: the next SUBSCRIBE says so", name, self.state.value)
            return []
        return [self._send(build())]

    def kill_task(self, task_id: str, agent_id: str = "") -> list[Command]:
        return self._call("kill_task", lambda: m.Kill(self.framework_id, task_id, agent_id))

    def reconcile_tasks(self, tasks: Iterable[TaskStatus | str | m.ReconcileTask]) -> list[Command]:
        items = reconcile_task_list(tasks)
        return self._call("reconcile_tasks", lambda: m.Reconcile(self.framework_id, items))

    def send_framework_message(self, agent_id: str, data: bytes, task_id: str,
                               executor_id: str = "") -> list[Command]:
        payload = message_data(data)
        message_task(task_id, executor_id)
        return self._call("send_framework_message",
                          lambda: m.FrameworkMessage(self.framework_id, agent_id, payload, task_id, executor_id))

    def acknowledge_status_update(self, status: TaskStatus) -> list[Command]:
        """Explicit acknowledgement (only when implicit ones are off)."""
        if not isinstance(status, TaskStatus):
            raise TypeError(f"acknowledge_status_update takes a TaskStatus, got {type(status).__name__}")
        if self.implicit_acknowledgements:
            log.warning("acknowledge_status_update ignored: the driver acknowledges implicitly")
            return []
        return self._acknowledge(status)

    # --------------------------------------------------------------- helpers
    def _call(self, name: str, build) -> list[Command]:
        """Send the message ``build()`` makes, or drop the call while not
        subscribed: Mesos drops calls made while disconnected (queued calls
        would act on a stale view; the framework reconciles after
        ``reregistered`` instead)."""
        if not self.connected:
            log.warning("%s dropped: the driver is %s, not subscribed", name, self.state.value)
            return []
        return [self._send(build())]

    def _drop_launch(self, tasks: list[TaskInfo]) -> list[Command]:
        log.warning("launch_tasks dropped %d task(s): the driver is %s", len(tasks), self.state.value)
        if self.state is SubscriptionState.STOPPED or not tasks:
            return []   # no callbacks after stop
        commands: list[Command] = [
            InvokeCallback("status_update", (TaskStatus(
                task_id=task.task_id, state=TaskState.DROPPED, agent_id=task.agent_id, message=DROPPED_MESSAGE,
                source="SOURCE_MASTER", reason="REASON_MASTER_DISCONNECTED", framework_id=self.framework_id),))
            for task in tasks
        ]
        ids = ", ".join(task.task_id for task in tasks)
        commands.append(InvokeCallback("error", (f"{DROPPED_MESSAGE} (TASK_DROPPED: {ids})",)))
        return commands

    def _acknowledge(self, status: TaskStatus) -> list[Command]:
        acknowledgement = self._acknowledgement(status)
        return [SendToMaster(acknowledgement)] if acknowledgement is not None else []

    def _acknowledgement(self, status: TaskStatus) -> m.Acknowledge | None:
        """The ACKNOWLEDGE of ``status`` to send now (None: nothing to send), noted as acknowledged."""
        uuid = status.uuid
        if not uuid:
            return None   # made up by the master (reconciliation, TASK_LOST ...): nothing to acknowledge
        # acknowledged as far as the framework goes, even if it cannot be sent
        # now: a redelivery is acknowledged again (and not given to the callback)
        connected = self.state is SubscriptionState.SUBSCRIBED   # (self.connected, once: one a callback)
        self.delivered.acknowledged(uuid, self._session if connected else 0)
        if not connected:
            # the agent resends unacknowledged updates, so nothing is lost
            log.info("not acknowledging %s of task %s: not subscribed", status.state, status.task_id)
            return None
        self._last_sent = self._clock.now()
        return m.Acknowledge(self.framework_id, status.agent_id, status.task_id, uuid)

    def _send(self, message: object) -> SendToMaster:
        self._last_sent = self._clock.now()
        return SendToMaster(message)

    def _subscribe(self, fresh_connection: bool) -> list[Command]:
        self.state = SubscriptionState.SUBSCRIBING
        commands: list[Command] = [Reconnect()] if fresh_connection else []
        if fresh_connection:
            self._connection_made = self._clock.now()
        framework = self._framework.replace(id=self.framework_id)
        suppressed_roles = [framework.role] if self.suppressed else []
        commands.append(self._send(m.Subscribe(framework, accepts_batches=True, suppressed_roles=suppressed_roles)))
        self._retry_at = self._clock.now() + self._backoff.delay(self._subscribe_attempts, self._rng)
        self._subscribe_attempts += 1
        return commands

    def master_changed(self) -> list[Command]:
        """Another master leads now (detected through ZooKeeper): reconnect
        and re-subscribe at once, without waiting for the old one's silence."""
        if self.state is SubscriptionState.STOPPED:
            return []
        log.info("the leading master changed: re-subscribing")
        was_subscribed = self.state is SubscriptionState.SUBSCRIBED
        self.state = SubscriptionState.DISCONNECTED
        self._subscribe_attempts = 0
        callbacks = [InvokeCallback("disconnected")] if was_subscribed else []
        return [*callbacks, *self._subscribe(fresh_connection=True)]

    def _master_deadline(self) -> float:
        return self._last_received + self._heartbeat_timeouts * (self.heartbeat_interval or 0.0)

    def _master_gone(self) -> list[Command]:
        log.warning("no message from the master for %.1f s: disconnected; re-subscribing",
                    self._heartbeat_timeouts * (self.heartbeat_interval or 0.0))
        self.state = SubscriptionState.DISCONNECTED
        self._subscribe_attempts = 0
        return [InvokeCallback("disconnected"), *self._subscribe(fresh_connection=True)]
