"""The scheduler driver: the imperative shell around :class:`~.core.DriverCore`,
and the :class:`Scheduler` interface users implement, whose callbacks it calls
(each names the other, so they live together, as in Mesos's ``scheduler.hpp``).

Every callback of a :class:`Scheduler` receives the driver first. The driver
calls them one at a time, in the order the events happened, on its own
thread (see ``docs/framework-api.rst``). The defaults do nothing, except
:meth:`Scheduler.error`, which logs.

One driver thread owns the ZeroMQ connection to the master. It waits for a
message, a wake-up or the core's next deadline, feeds the core, and carries
out the commands the core returns — in particular it invokes every
scheduler callback, one at a time and in order, on that thread.

Driver methods are thread-safe. Called from inside a callback (the driver
thread) they act at once; called from any other thread they are queued and
the loop is woken (:class:`~mesoslike.transport.Waker`), because the socket
belongs to the driver thread.
"""

from __future__ import annotations

import collections
import enum
import getpass
import logging
import random
import threading
import time
from typing import Callable, Iterable


from mesoslike.clock import SystemClock
from mesoslike.credentials import client_keys
from mesoslike.driver.core import (
    Backoff,
    Command,
    DriverCore,
    InvokeCallback,
    InvokeUpdates,
    Reconnect,
    SendToMaster,
    Shutdown,
    SubscriptionState,
    TEARDOWN_WAIT,
    filters_or_default,
    message_data,
    message_task,
    offer_id_list,
    operation_list,
    reconcile_task_list,
    task_list,
)
from mesoslike.errors import ConfigError, MesoslikeError
from mesoslike.locator import MasterLocator, check_master_address, make_locator
from mesoslike.observations import NOTICE
from mesoslike.transport import Client, Waker, idle
from mesoslike.wire import WireError
from mesoslike.wire.batching import SEND_BATCH, SEND_WITHIN, batch_frames, batched_messages
from mesoslike.wire.codec import CODEC, sized
from mesoslike.wire.messages import Acknowledgements, ReconcileTask
from mesoslike.wire.types import (MAX_FRAMEWORK_MESSAGE, Filters, FrameworkInfo, MasterInfo, Offer, Operation,
                                  TaskInfo, TaskStatus, check_message_size)

__all__ = ["Scheduler", "SchedulerDriver", "DriverStatus", "parse_master"]

log = logging.getLogger("mesoslike.driver")

#: seconds the last messages (a TEARDOWN) may take to leave after the loop ends
_CLOSE_LINGER = 2.0
#: seconds without a master answering (or, with ZooKeeper, without a leader)
#: before the driver says so at the default log level (the issue's "within 5 s")
UNREACHABLE_NOTICE_AFTER = 3.0


class DriverStatus(str, enum.Enum):
    """The driver's life cycle (Mesos' ``Status``); every driver method returns it."""

    NOT_STARTED = "DRIVER_NOT_STARTED"
    RUNNING = "DRIVER_RUNNING"
    ABORTED = "DRIVER_ABORTED"
    STOPPED = "DRIVER_STOPPED"


def parse_master(master: str) -> str:
    """Check a master address: ``tcp://HOST:PORT``, or ``zk://HOSTS/PATH`` to
    follow whichever master leads that ZooKeeper group."""
    try:
        return check_master_address(master)
    except ConfigError as exc:
        raise ConfigError(f"bad master address: {exc}") from None


class Scheduler:
    """Override the callbacks your framework needs; the rest are no-ops."""

    def registered(self, driver: SchedulerDriver, framework_id: str, master_info: MasterInfo) -> None:
        """The master accepted this driver's first subscription and gave the
        framework ``framework_id`` (the one in ``FrameworkInfo.id`` if it
        had one and the master still knew it)."""

    def reregistered(self, driver: SchedulerDriver, master_info: MasterInfo) -> None:
        """The driver subscribed again, keeping its framework id, after it
        had lost its master. Offers made before are void. Reconcile your
        tasks: updates sent while you were away may come again, or not at all."""

    def disconnected(self, driver: SchedulerDriver) -> None:
        """The master went silent (no message for 5 heartbeat intervals). The
        driver is already re-subscribing. Calls made until
        :meth:`reregistered` are dropped."""

    def resource_offers(self, driver: SchedulerDriver, offers: list[Offer]) -> None:
        """New offers. Answer each one with ``launch_tasks`` or ``decline_offer``
        (an offer you ignore stays allocated to you until it is rescinded)."""

    def offer_rescinded(self, driver: SchedulerDriver, offer_id: str) -> None:
        """An offer is no longer valid; launching on it gives TASK_DROPPED."""

    def status_update(self, driver: SchedulerDriver, status: TaskStatus) -> None:
        """A task changed state. With implicit acknowledgements the driver
        acknowledges the update after this returns (even if it raises)."""

    def framework_message(self, driver: SchedulerDriver, agent_id: str, data: bytes) -> None:
        """Opaque data sent to the framework from an agent."""

    def executor_message(self, driver: SchedulerDriver, executor_id: str, agent_id: str, data: bytes) -> None:
        """Data the custom executor ``executor_id`` on agent ``agent_id``
        sent (``ExecutorDriver.send_framework_message``). By default it
        calls :meth:`framework_message` (without the executor id): override
        this one to know which executor spoke."""
        self.framework_message(driver, agent_id, data)

    def agent_lost(self, driver: SchedulerDriver, agent_id: str) -> None:
        """An agent was removed. Its tasks come as TASK_LOST (or
        TASK_UNREACHABLE) status updates as well."""

    def executor_lost(self, driver: SchedulerDriver, executor_id: str, agent_id: str, status: int | None) -> None:
        """The process of the custom executor ``executor_id`` on agent
        ``agent_id`` ended (``status``: its exit code, minus the signal that
        killed it, or None if not known). Its tasks that had not ended come
        as TASK_FAILED updates too."""

    def preemption_warning(self, driver: SchedulerDriver, task_ids: list[str], seconds: float) -> None:
        """The master will kill these tasks in ``seconds`` to give a starved
        role its fair share (fair-share preemption). Checkpoint them, or kill
        them yourself to release their resources sooner."""

    def error(self, driver: SchedulerDriver, message: str) -> None:
        """Something went wrong: the master refused a request, a callback
        raised, or a launch was dropped. If the master's error was fatal,
        ``driver.status`` is already DRIVER_ABORTED and no further callbacks
        follow."""
        log.error("framework error: %s", message)


class SchedulerDriver:
    """Connects a :class:`Scheduler` to a master (docs/framework-api.rst).

    ``implicit_acknowledgements`` (default) acknowledges each status update
    after ``status_update`` returns; turn it off to acknowledge yourself with
    :meth:`acknowledge_status_update`. ``backoff`` sets the subscription
    retry delays, ``rng`` their jitter, ``stop_timeout`` how long
    :meth:`stop` from another thread waits for the driver thread to end,
    ``teardown_wait`` how long a stopping driver waits for the master to
    confirm its TEARDOWN (:meth:`stop`).
    ``max_message_size`` is the cluster's ``--max-message-size`` (bytes of
    a framework message's or a status update's data; 64 MiB by default).
    """

    def __init__(self, scheduler: Scheduler, framework: FrameworkInfo, master: str,
                 implicit_acknowledgements: bool = True, *, backoff: Backoff | None = None,
                 rng: random.Random | None = None, stop_timeout: float = 10.0,
                 key: str | None = None, master_key: str | None = None,
                 max_message_size: int = MAX_FRAMEWORK_MESSAGE, teardown_wait: float = TEARDOWN_WAIT) -> None:
        self.scheduler = scheduler
        try:
            self.max_message_size = check_message_size(max_message_size)
        except ValueError as exc:
            raise ConfigError(f"max_message_size: {exc}") from None
        self._codec = sized(CODEC, self.max_message_size)
        # a secured cluster (docs/security.rst): our secret certificate and the master's public one,
        # by default from MESOSLIKE_KEY / MESOSLIKE_MASTER_KEY (``mesoslike local`` sets them)
        self._keys, self._master_key = client_keys(key, master_key)
        if self._keys is not None and not framework.user:
            framework = framework.replace(user=getpass.getuser())  # as Mesos: the current user
        self.framework = framework
        self.master = parse_master(master)
        self._clock = SystemClock()
        self._core = DriverCore(framework, self._clock, rng or random.Random(),
                                implicit_acknowledgements=implicit_acknowledgements, backoff=backoff or Backoff(),
                                teardown_wait=teardown_wait)
        self._stop_timeout = stop_timeout
        self._status = DriverStatus.NOT_STARTED
        # guards _status, _inbox hand-over and the waker's life time
        self._lock = threading.Lock()
        self._inbox: collections.deque[Callable[[], None]] = collections.deque()   # from other threads
        self._pending: collections.deque[InvokeCallback | InvokeUpdates | Shutdown] = \
            collections.deque()  # driver thread only
        self._outgoing: list[object] = []   # what the step sends to the master (driver thread only)
        #: something but the acknowledgements of _invoke_updates is in _outgoing (else: ACKNOWLEDGEs only)
        self._outgoing_mixed = False
        self._outgoing_since = 0.0           # when the oldest of them was made (time.monotonic)
        self._waker: Waker | None = None     # while the driver runs (made by start(), closed by the loop)
        self._client: Client | None = None
        self._locator: MasterLocator | None = None   # follows the leader (made on the driver thread)
        self._address: str | None = None     # the master the client talks to
        self._thread: threading.Thread | None = None
        self._stop_requested = False
        self._finished = False
        self._aborted = False
        #: the exception a scheduler callback raised that aborted the driver (None: none did)
        self.callback_exception: BaseException | None = None
        #: since when (driver clock) no master has answered; None while subscribed
        self._unreached_since: float | None = None
        self._told_unreachable = False   # said so since the last subscription

    # ------------------------------------------------------------ properties
    @property
    def status(self) -> DriverStatus:
        return self._status

    @property
    def framework_id(self) -> str:
        """The framework's id: ``""`` until the master assigns one."""
        return self._core.framework_id

    @property
    def connected(self) -> bool:
        """True while subscribed to a master."""
        return self._core.connected

    @property
    def master_info(self) -> MasterInfo | None:
        return self._core.master_info

    def __repr__(self) -> str:
        return (f"SchedulerDriver(framework={self.framework.name!r}, id={self.framework_id!r}, "
                f"status={self._status.value}, state={self._core.state.value})")

    # ------------------------------------------------------------- lifecycle
    def start(self) -> DriverStatus:
        """Start the driver thread, which subscribes to the master. Returns
        DRIVER_RUNNING (or the status it already had)."""
        with self._lock:
            if self._status is not DriverStatus.NOT_STARTED:
                return self._status
            self._waker = Waker()
            self._status = DriverStatus.RUNNING
            self._thread = threading.Thread(target=self._run_loop, daemon=True,
                                            name=f"mesoslike-driver-{self.framework.name}")
            self._thread.start()
        return DriverStatus.RUNNING

    def join(self, timeout: float | None = None) -> DriverStatus:
        """Wait until the driver stops (or ``timeout`` seconds pass)."""
        if self._on_driver_thread():
            raise RuntimeError("join() inside a scheduler callback would wait for itself; call stop() and return")
        if self._thread is not None:
            self._thread.join(timeout)
        return self._status

    def run(self) -> DriverStatus:
        """``start()`` then ``join()``."""
        status = self.start()
        return self.join() if status is DriverStatus.RUNNING else status

    def stop(self, failover: bool = False) -> DriverStatus:
        """Stop the driver. ``failover=False`` tears the framework down (the
        master kills its tasks); ``failover=True`` only disconnects, and the
        tasks keep running for ``failover_timeout`` so that a new driver with
        the same framework id can take over. Safe inside a callback (it does
        not wait there); from another thread it waits up to ``stop_timeout``
        for the driver thread to end. Without failover the driver thread
        ends once the master has confirmed the teardown (it answers TEARDOWN
        with the fatal ERROR of the framework's removal), or after
        ``teardown_wait`` seconds (1 by default) without that answer: once
        :meth:`join` returns, a master that could be reached has removed the
        framework, and nothing the driver sent is left in its queue."""
        return self._end(lambda: self._core.stop(failover), DriverStatus.STOPPED)

    def abort(self) -> DriverStatus:
        """Stop without tearing down (like ``stop(failover=True)``); the
        status becomes DRIVER_ABORTED."""
        return self._end(self._core.abort, DriverStatus.ABORTED)

    # ----------------------------------------------------------------- calls
    def launch_tasks(self, offer_ids: Iterable[str], tasks: Iterable[TaskInfo],
                     filters: Filters | None = None) -> DriverStatus:
        """Launch ``tasks`` on the offers (all of one agent); the unused rest
        of the offers is declined with ``filters``. Launching no tasks
        declines the offers."""
        ids, infos, filters = offer_id_list(offer_ids), task_list(tasks), filters_or_default(filters)
        return self._call("launch_tasks", lambda: self._core.launch_tasks(ids, infos, filters))

    def accept_offers(self, offer_ids: Iterable[str], operations: Iterable[Operation],
                      filters: Filters | None = None) -> DriverStatus:
        """Accept the offers (all of one agent) with ``operations`` —
        ``Launch(tasks)``, ``Reserve(resources)``, ``Unreserve(resources)`` —
        applied in order: a task may use what a RESERVE before it reserved.
        The unused rest of the offers is declined with ``filters``. An
        invalid RESERVE or UNRESERVE refuses the whole accept: nothing is
        applied, its tasks end TASK_DROPPED, ``error`` says why
        (docs/framework-api.rst, "Reservations")."""
        ids, items, filters = offer_id_list(offer_ids), operation_list(operations), filters_or_default(filters)
        return self._call("accept_offers", lambda: self._core.accept_offers(ids, items, filters))

    def decline_offer(self, offer_id: str, filters: Filters | None = None) -> DriverStatus:
        """Give the offer back; don't offer those resources again for
        ``filters.refuse_seconds`` (default 5 s)."""
        offer_id_list([offer_id])
        filters = filters_or_default(filters)
        return self._call("decline_offer", lambda: self._core.decline_offer(offer_id, filters))

    def suppress_offers(self) -> DriverStatus:
        """Ask for no more offers until :meth:`revive_offers`. Kept while
        not subscribed — before :meth:`start` too — and stated in every
        SUBSCRIBE, so the master agrees after a reconnection, a master
        failover or a scheduler restart (as Mesos's ``suppressed_roles``)."""
        return self._call("suppress_offers", self._core.suppress_offers, before_start=True)

    def update_framework(self, framework: FrameworkInfo) -> DriverStatus:
        """Change the framework's info (Mesos's UPDATE_FRAMEWORK): its name,
        failover timeout, labels, web UI, host name and partition
        awareness; its id, role, user and principal stay (a role change is
        refused through ``error``)."""
        return self._call("update_framework", lambda: self._core.update_framework(framework))

    def revive_offers(self) -> DriverStatus:
        """Ask for offers again, clearing every filter of the framework
        (kept while not subscribed, as :meth:`suppress_offers`)."""
        return self._call("revive_offers", self._core.revive_offers, before_start=True)

    def kill_task(self, task_id: str, agent_id: str = "") -> DriverStatus:
        """Kill a task; its end arrives as a status update (TASK_KILLED)."""
        return self._call("kill_task", lambda: self._core.kill_task(task_id, agent_id))

    def reconcile_tasks(self, tasks: Iterable[TaskStatus | str | ReconcileTask]) -> DriverStatus:
        """Ask for the latest state of tasks (ids or TaskStatus objects); an
        empty list asks for every non-terminal task of the framework. The
        answers come as status updates without a uuid."""
        items = reconcile_task_list(tasks)
        return self._call("reconcile_tasks", lambda: self._core.reconcile_tasks(items))

    def acknowledge_status_update(self, status: TaskStatus) -> DriverStatus:
        """Acknowledge a status update (only with implicit acknowledgements
        off). Updates without a uuid need none; this ignores them."""
        if not isinstance(status, TaskStatus):
            raise TypeError(f"acknowledge_status_update takes a TaskStatus, got {type(status).__name__}")
        return self._call("acknowledge_status_update", lambda: self._core.acknowledge_status_update(status))

    def send_framework_message(self, agent_id: str, data: bytes, task_id: str,
                               executor_id: str = "") -> DriverStatus:
        """Send opaque ``data`` to the running task ``task_id`` on agent
        ``agent_id`` (best effort): the agent appends it to the task's
        ``<sandbox>/messages``, or hands it to the task's custom executor.
        With ``executor_id`` (``task_id`` may then be ``""``) it goes to that
        custom executor's ``framework_message`` callback (at most
        ``max_message_size`` bytes, else ValueError). A message for a task or
        executor that is not running there is dropped, with a warning in the
        agent's log."""
        payload = message_data(data, self.max_message_size)
        message_task(task_id, executor_id)
        return self._call("send_framework_message",
                          lambda: self._core.send_framework_message(agent_id, payload, task_id, executor_id))

    # -------------------------------------------------- thread hand-over
    def _on_driver_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def _call(self, name: str, make_commands: Callable[[], list[Command]], before_start: bool = False) -> DriverStatus:
        with self._lock:
            status = self._status
            if status is DriverStatus.NOT_STARTED and before_start:
                make_commands()   # no thread yet: the core only takes note (nothing to send)
                return status
            if status is not DriverStatus.RUNNING:
                log.warning("%s ignored: the driver is %s", name, status.value)
                return status
            if not self._on_driver_thread():
                self._inbox.append(lambda: self._execute(make_commands()))
                self._loop_waker().wake()
                return status
        self._execute(make_commands())
        return status

    def _end(self, make_commands: Callable[[], list[Command]], status: DriverStatus) -> DriverStatus:
        def end_now() -> None:
            self._pending.clear()   # no callbacks after stop() or abort()
            self._execute(make_commands())

        with self._lock:
            if self._status is DriverStatus.NOT_STARTED:
                self._status = status   # never ran: nothing to tell the master
            if self._status is not DriverStatus.RUNNING:
                return self._status
            self._status = status
            self._stop_requested = True
            on_driver_thread = self._on_driver_thread()
            if not on_driver_thread:
                self._inbox.append(end_now)
                self._loop_waker().wake()
        if on_driver_thread:
            end_now()   # the loop ends once the current callback returns
        elif self._thread is not None:   # RUNNING: start() made it
            self._thread.join(self._stop_timeout)
        return status

    def _loop_waker(self) -> Waker:
        """The waker: start() makes it before the status becomes RUNNING, and
        the loop drops it only at its end, after the status left RUNNING
        (both under ``_lock``) — so a RUNNING driver and the loop have it."""
        if self._waker is None:  # pragma: no cover - the invariant above
            raise RuntimeError("a running driver without its waker")
        return self._waker

    # -------------------------------------------------------------- the loop
    def _run_loop(self) -> None:
        try:
            try:
                self._locator = make_locator(self.master, on_change=self._wake)
            except MesoslikeError as exc:  # e.g. ZooKeeper unreachable: the user's setup, not a driver bug
                log.info("the scheduler driver cannot find the master: %s", exc)  # error() tells the user
                self._aborted = True
                self._report_error(f"cannot find the master: {exc}")
                return
            self._address = self._wait_for_leader()
            if self._address is None:
                return  # stopped before any master led
            self._client = Client(self._address, codec=self._codec, keys=self._keys, server_key=self._master_key)
            self._execute(self._core.start())
            while not self._finished:
                self._step()
                self._send_outgoing()
        except Exception as exc:  # a bug in the driver: report it rather than die silently
            log.exception("the scheduler driver loop failed")
            self._aborted = True
            self._report_error(f"the scheduler driver failed: {type(exc).__name__}: {exc}")
        finally:
            self._close()

    def _step(self) -> None:
        while self._inbox:
            self._run_call(self._inbox.popleft())
        self._run_pending()
        if self._finished or self._inbox or self._pending:
            return
        leader = self._current_leader()
        if leader and leader != self._address:  # a failover: go to the new leader now
            self._address = leader
            self._execute(self._core.master_changed())
            return
        self._send_outgoing()   # before waiting: what the calls and callbacks sent goes out now
        if self._connection().wait(self._wait_timeout(), self._waker):
            self._receive()
        self._execute(self._core.tick())
        self._say_if_unreachable(self._address)

    def _say_if_unreachable(self, address: str | None) -> None:
        """Say once, UNREACHABLE_NOTICE_AFTER seconds into an outage, that
        the master cannot be reached (and that the driver keeps trying);
        say when it answers again. ``address``: None while no master leads."""
        now = self._clock.now()
        if address is not None and self._core.state is SubscriptionState.SUBSCRIBED:
            if self._told_unreachable:
                log.log(NOTICE, "reached the master at %s: subscribed as framework %s", address,
                        self._core.framework_id)
            self._unreached_since, self._told_unreachable = None, False
            return
        if self._unreached_since is None:
            self._unreached_since = now
        elif not self._told_unreachable and now - self._unreached_since >= UNREACHABLE_NOTICE_AFTER:
            self._told_unreachable = True
            if address is None:
                log.log(NOTICE, "no leading master in %s after %.0f s; still waiting for one", self.master,
                        now - self._unreached_since)
            else:
                log.log(NOTICE, "cannot reach the master at %s: no answer for %.0f s; retrying", address,
                        now - self._unreached_since)

    def _notice_due(self) -> float | None:
        """When :meth:`_say_if_unreachable` has something to say (driver clock), or None."""
        if self._unreached_since is None or self._told_unreachable:
            return None
        return self._unreached_since + UNREACHABLE_NOTICE_AFTER

    def _run_call(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:  # e.g. a value the codec cannot carry: the caller's mistake, not fatal
            log.exception("a driver call failed")
            self._report_error(f"a driver call failed: {type(exc).__name__}: {exc}")

    def _wait_timeout(self) -> float | None:
        deadline = min((due for due in (self._core.next_deadline(), self._notice_due()) if due is not None),
                       default=None)
        if deadline is None:
            return None
        # a millisecond late rather than early: the poll rounds down to whole
        # milliseconds, and waking before the deadline would spin
        return max(0.0, deadline - self._clock.now()) + 0.001

    def _receive(self) -> None:
        client = self._connection()
        for _, message in client.receive():
            if isinstance(message, WireError):
                log.warning("ignoring a bad frame from the master: %s", message)
            else:
                self._take(message)
            if self._client is not client:
                return   # reconnected meanwhile: the rest belongs to the old connection

    def _take(self, message: object) -> None:
        """A message from the master, to the core (an UPDATES frame's new
        updates as one :class:`InvokeUpdates` a run: no command and queue
        entry for each)."""
        self._execute(self._core.receive(message, grouped=True))

    def _execute(self, commands: list[Command]) -> None:
        """Sends are collected for the end of the step (:meth:`_send_outgoing`),
        reconnects happen now; callbacks and the shutdown wait their turn in
        ``_pending`` so that callbacks never nest."""
        for command in commands:
            if type(command) is InvokeUpdates or type(command) is InvokeCallback:   # (the updates: first)
                self._pending.append(command)
            elif type(command) is SendToMaster or isinstance(command, SendToMaster):
                self._queue_outgoing(command.message)
            elif isinstance(command, Reconnect):
                self._send_outgoing()   # on the connection they were meant for
                self._reconnect()
            else:
                if isinstance(command, Shutdown):
                    with self._lock:   # aborted before the error callback runs, as in Mesos
                        if self._status is DriverStatus.RUNNING:
                            self._status = DriverStatus.ABORTED if command.aborted else DriverStatus.STOPPED
                self._pending.append(command)

    def _queue_outgoing(self, message: object) -> None:
        """Send ``message`` at the end of the step (:meth:`_send_outgoing`),
        or now with what is queued if that is a batch's worth, or old."""
        outgoing = self._outgoing
        now = time.monotonic()
        if not outgoing:
            self._outgoing_since = now
        outgoing.append(message)
        self._outgoing_mixed = True
        if len(outgoing) >= SEND_BATCH or now - self._outgoing_since >= SEND_WITHIN:
            self._send_outgoing()   # slow callbacks must not keep the master from hearing of us

    def _run_pending(self) -> None:
        pending = self._pending
        while pending and not self._finished:
            item = pending.popleft()
            if isinstance(item, InvokeUpdates):
                if not self._stop_requested:
                    self._invoke_updates(item.statuses)
            elif isinstance(item, Shutdown):
                self._finished = True
                self._aborted = item.aborted
                self._pending.clear()
            elif not self._stop_requested:
                self._invoke(item)

    def _invoke_updates(self, statuses: list[TaskStatus]) -> None:
        """``status_update`` of each status in turn, as :meth:`_invoke` does
        for an InvokeCallback of each: its acknowledgement queued once it
        returns; none after a stop or an abort (a callback's own included)."""
        core = self._core
        update_returned = core.update_returned
        status_update = self.scheduler.status_update   # (looked up once a run, not once an update)
        monotonic = time.monotonic
        acknowledged = False
        try:
            for status in statuses:
                if self._stop_requested:
                    return
                try:
                    status_update(self, status)
                except BaseException as exc:   # (as _invoke)
                    self._callback_raised("status_update", exc)
                    return
                acknowledgement = update_returned(status, False)   # (the clock read once a run: note_sent)
                if acknowledgement is not None:
                    acknowledged = True
                    # (_queue_outgoing inlined: one call less an update)
                    outgoing = self._outgoing   # (a new list after each send)
                    now = monotonic()
                    if not outgoing:
                        self._outgoing_since = now
                    outgoing.append(acknowledgement)
                    if len(outgoing) >= SEND_BATCH or now - self._outgoing_since >= SEND_WITHIN:
                        self._send_outgoing()   # slow callbacks must not keep the master from hearing of us
        finally:
            if acknowledged:
                core.note_sent()

    def _callback_raised(self, name: str, exc: BaseException) -> None:
        # as Mesos's drivers do: the framework's bug aborts the driver (DRIVER_ABORTED, no callback
        # follows, nothing is acknowledged); the framework is not torn down, its tasks keep running
        # for its failover timeout
        log.exception("scheduler callback %s raised: aborting the driver", name)
        if name != "error":
            self._report_error(f"scheduler.{name} raised {type(exc).__name__}: {exc}; the driver aborts")
        if self.callback_exception is None:
            self.callback_exception = exc
        self.abort()

    def _invoke(self, invocation: InvokeCallback) -> None:
        try:
            getattr(self.scheduler, invocation.name)(self, *invocation.args)
        except BaseException as exc:   # SystemExit and KeyboardInterrupt too: they end this thread's work
            self._callback_raised(invocation.name, exc)
            return
        if invocation.name == "status_update":   # (one an update: its acknowledgement queued at once)
            acknowledgement = self._core.update_returned(invocation.args[0])
            if acknowledgement is not None:
                self._queue_outgoing(acknowledgement)
        else:
            self._execute(self._core.callback_returned(invocation))

    def _report_error(self, message: str) -> None:
        try:
            self.scheduler.error(self, message)
        except Exception:
            log.exception("scheduler.error raised while reporting: %s", message)

    def _send_outgoing(self) -> None:
        """Send what the step collected, in order, its acknowledgements in
        ACKNOWLEDGEMENTS frames if the master takes them (docs/wire.rst,
        "Batching"): the callbacks of a frame of UPDATES are acknowledged
        in one frame."""
        if not self._outgoing:
            return
        messages, self._outgoing = self._outgoing, []
        mixed, self._outgoing_mixed = self._outgoing_mixed, False
        if not mixed and len(messages) > 1 and self._core.master_accepts_batches:
            # ACKNOWLEDGEs only (a run of updates' callbacks): what batched_messages makes of them, in
            # ACKNOWLEDGEMENTS of SEND_BATCH, without asking each one's kind
            for start in range(0, len(messages), SEND_BATCH):
                chunk = messages[start:start + SEND_BATCH]
                self._send(Acknowledgements(chunk) if len(chunk) > 1 else chunk[0])  # type: ignore[arg-type]
            return
        for message in batched_messages(messages, self._core.master_accepts_batches):
            self._send(message)

    def _send(self, message: object) -> None:
        try:
            connection = self._connection()
            sent = all([connection.send_frame(frame) for frame in batch_frames(message, connection.codec.encode)])
        except (WireError, TypeError, ValueError) as exc:   # a value msgpack cannot carry
            log.error("cannot send %s: %s", type(message).__name__, exc)
            self._pending.append(InvokeCallback("error", (f"cannot send {type(message).__name__}: {exc}",)))
            return
        if not sent:   # the transport's outbox is full too (a master that has not read for long)
            log.error("cannot send %s: the queue to the master is full (%d frames waiting); dropped",
                      type(message).__name__, self._connection().queued)

    def _reconnect(self) -> None:
        old = self._connection()
        self._client = Client(self._address or old.address,   # _address: set with the first connection
                              codec=self._codec, keys=self._keys, server_key=self._master_key)
        old.close()

    def _connection(self) -> Client:
        """The connection to the master (driver thread only: the loop makes
        it before the core can ask to send or receive anything)."""
        if self._client is None:  # pragma: no cover - the invariant above
            raise RuntimeError("the scheduler driver has no connection yet")
        return self._client

    def _current_leader(self) -> str | None:
        """Where the leading master is now (driver thread only, once the loop made the locator)."""
        if self._locator is None:  # pragma: no cover - the invariant above
            raise RuntimeError("the scheduler driver has no locator yet")
        return self._locator.current()

    def _wake(self) -> None:
        with self._lock:
            if self._waker is not None:
                self._waker.wake()

    def _wait_for_leader(self) -> str | None:
        """The leader's address; with ZooKeeper, wait (interruptibly) for one."""
        while not self._stop_requested and not self._finished:
            leader = self._current_leader()
            if leader:
                return leader
            while self._inbox:  # calls made meanwhile (e.g. stop) still run
                self._run_call(self._inbox.popleft())
            self._say_if_unreachable(None)
            idle(self._loop_waker(), 0.5)
        return None

    def _close(self) -> None:
        with self._lock:
            if self._status is DriverStatus.RUNNING:
                self._status = DriverStatus.ABORTED if self._aborted else DriverStatus.STOPPED
            waker, self._waker = self._waker, None
        if self._client is not None:
            self._send_outgoing()
            # let a final TEARDOWN leave; closing with the default linger of 0 would drop it
            self._client.close(linger=_CLOSE_LINGER)
        if self._locator is not None:
            self._locator.close()
        if waker is not None:
            waker.close()
        log.info("scheduler driver for %s ended: %s", self.framework.name, self._status.value)
