"""The service scheduler running: ``mesoslike services serve``.

:class:`ServicesService` is the :class:`~.api.Backend` the REST API reads
and changes, and the :class:`~mesoslike.Scheduler` of the framework
(through :class:`ServicesScheduler`). It decides nothing: driver callbacks
become events of the :class:`~.core.ServicesCore`, API requests its
operations, and the core's commands become store writes, driver calls and
events on the bus. One lock: the core is not thread-safe; the driver's
calls are, and are made under it.

- **Hard state** (apps, versions, deployments, launched instances) is
  written by :class:`~.core.Persist` *before* anything that follows it:
  an API change is answered, and an instance launched, only once stored.
  Standalone it lives in ``--work-dir`` (one file per record); with
  ``--zk`` in ZooKeeper (:class:`mesoslike.ZooKeeperRecordStore`, fenced on
  the leader's election znode; :mod:`.leader`).
- **Drains.** The master tells frameworks nothing when an operator drains an
  agent; the service reads the master's ``/state`` (its public HTTP API)
  every ``drain_poll`` seconds and gives the core the agents draining
  (:class:`~.core.DrainingAgents`), so that their instances are replaced
  before the drain's grace ends; from the same read, why the master makes
  the service no offers (its ``offer_blockers``: quota, no agent, nothing
  free; :class:`~.core.MasterBlockers`), which ``/v2/queue`` says.
- **Events** go to :class:`EventBus`: each ``/v2/events`` client has a
  bounded queue (one that falls 1,000 events behind is cut off), and the
  last 200 are kept for the page.
"""

from __future__ import annotations

import collections
import json
import logging
import queue
import random
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TypeVar

from mesoslike import (FrameworkInfo, Filters, MasterInfo, MesoslikeError, Scheduler, TaskState, TaskStatus,
                       __version__)
from mesoslike_frameworks.services.api import ServicesApi
from mesoslike_frameworks.services.core import (ApiError, Command, Decline, Disconnected, DrainingAgents, Emit,
                                                Kill, Launch, MasterBlockers, OffersReceived, Persist, Reconcile,
                                                Registered, Reregistered, Revive, ServicesCore, StatusUpdate,
                                                Suppress, Tick)
from mesoslike_frameworks.services.model import format_timestamp

__all__ = ["ServicesService", "ServicesScheduler", "EventBus", "WallClock", "page_files", "STATIC_DIR",
           "FileStore", "RecordStore"]

log = logging.getLogger("mesoslike_frameworks.services.service")

T = TypeVar("T")
STATIC_DIR = Path(__file__).resolve().parent / "static"
#: seconds between ticks of the core
TICK = 0.5


class WallClock:
    """Epoch seconds: the core's versions and event times are wall times."""

    def now(self) -> float:
        return time.time()


class RecordStore:
    """Where the hard state goes: ``load()`` every record, ``write(records, deleted)`` durably."""

    def load(self) -> dict[str, bytes]:
        raise NotImplementedError

    def write(self, records: Mapping[str, bytes], deleted: tuple[str, ...] = ()) -> None:
        raise NotImplementedError


def FileStore(directory: str | Path):  # noqa: N802 (a constructor)
    """Records as files in ``directory``, locked for this process (the Fuxi
    service's store: each file written atomically and fsynced)."""
    from mesoslike_frameworks.fuxi.state_store import FileRecordStore, StoreLocked

    try:
        return FileRecordStore(directory)
    except StoreLocked:
        raise MesoslikeError(f"another `mesoslike services serve` keeps its state in {directory}: give each "
                             "service its own --work-dir") from None


class EventBus:
    """Events for ``/v2/events`` and the page (module docstring)."""

    #: subscribers at once, at most; events a subscriber may fall behind
    MAX_SUBSCRIBERS = 64
    BACKLOG = 1000
    #: seconds of silence after which a stream gets a keep-alive comment
    KEEPALIVE = 15.0

    def __init__(self, keep: int = 200) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[int, tuple[queue.Queue, frozenset[str]]] = {}
        self._recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self._next = 0
        self.cut_off = 0

    def publish(self, event: dict[str, Any]) -> None:
        event.setdefault("timestamp", format_timestamp(time.time()))
        with self._lock:
            self._recent.append(event)
            for key, (inbox, types) in list(self._subscribers.items()):
                if types and event["eventType"] not in types:
                    continue
                try:
                    inbox.put_nowait(event)
                except queue.Full:     # too slow a reader: cut it off rather than grow
                    del self._subscribers[key]
                    self.cut_off += 1
                    try:
                        inbox.get_nowait()
                        inbox.put_nowait(StopIteration)
                    except (queue.Empty, queue.Full):
                        pass

    def recent(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._recent)

    def subscribe(self, types: frozenset[str], client: str) -> Iterator[dict[str, Any] | None]:
        """A stream of events of ``types`` (all if empty), None after each
        :attr:`KEEPALIVE` seconds of silence; it begins with
        ``event_stream_attached``. 503 ApiError beyond MAX_SUBSCRIBERS."""
        inbox: queue.Queue = queue.Queue(self.BACKLOG)
        with self._lock:
            if len(self._subscribers) >= self.MAX_SUBSCRIBERS:
                raise ApiError(503, {"message": f"at most {self.MAX_SUBSCRIBERS} event streams at once"})
            self._next += 1
            key = self._next
            self._subscribers[key] = (inbox, types)
        self.publish({"eventType": "event_stream_attached", "remoteAddress": client})
        return self._stream(key, inbox, client)

    def _stream(self, key: int, inbox: queue.Queue, client: str) -> Iterator[dict[str, Any] | None]:
        try:
            while True:
                try:
                    event = inbox.get(timeout=self.KEEPALIVE)
                except queue.Empty:
                    yield None
                    continue
                if event is StopIteration:
                    return
                yield event
        finally:
            with self._lock:
                self._subscribers.pop(key, None)
            self.publish({"eventType": "event_stream_detached", "remoteAddress": client})

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subscribers)


def page_files() -> dict[str, tuple[str, bytes]]:
    """The services page: ``/`` and ``/static/NAME``."""
    types = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
             ".css": "text/css; charset=utf-8"}
    files: dict[str, tuple[str, bytes]] = {}
    for path in sorted(STATIC_DIR.iterdir()) if STATIC_DIR.is_dir() else []:
        if path.suffix in types:
            files[f"/static/{path.name}"] = (types[path.suffix], path.read_bytes())
    if "/static/index.html" in files:
        files["/"] = files.pop("/static/index.html")
    return files


class ServicesService:
    """The running service (module docstring). ``store``: where the hard
    state goes (None: nowhere, it dies with the process)."""

    def __init__(self, core: ServicesCore, store: Any | None = None, *, name: str = "services",
                 master: str = "", http_address: str = "", zk: str = "", drain_poll: float = 2.0,
                 failover_timeout: float = 0.0, on_stored: Callable[[int], None] | None = None,
                 on_fenced: Callable[[str], None] | None = None) -> None:
        self.core = core
        self.store = store
        self.name = name
        self.master = master
        self.http_address = http_address
        self.zk = zk
        self.drain_poll = drain_poll
        self.failover_timeout = failover_timeout
        self.bus = EventBus()
        self.lock = threading.RLock()
        self.driver: Any = None
        self.master_info: MasterInfo | None = None
        self.serving = False
        self.errors: list[str] = []
        #: what the store holds, as this service wrote it (the leadership machine compares it)
        self.records: dict[str, bytes] = {}
        self.writes = 0
        self._on_stored = on_stored
        self._on_fenced = on_fenced
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        #: where a standby finds the leader's API address (the candidacy's; "" standalone)
        self.leader_lookup: Callable[[], str] = lambda: ""

    # --------------------------------------------------------- backend
    def read(self, fn: Callable[[ServicesCore], T]) -> T:
        with self.lock:
            return fn(self.core)

    def change(self, fn: Callable[[ServicesCore], T]) -> T:
        with self.lock:
            if not self.serving:
                raise ApiError(503, {"message": "the service is not serving (it lost its leadership)"})
            result = fn(self.core)
            self._carry_out(self.core.take_commands())
            return result

    def leading(self) -> bool:
        return self.serving

    def leader_address(self) -> str:
        """``HOST:PORT`` of the leading service's API ("" while unknown)."""
        if self.serving:
            return self.http_address.split("://", 1)[-1]
        try:
            return self.leader_lookup().split("://", 1)[-1]
        except Exception:    # ZooKeeper away: unknown
            return ""

    def info(self) -> dict[str, Any]:
        return {"name": "mesoslike-services", "version": __version__, "buildref": "",
                "elected": self.serving, "leader": self.leader_address(), "frameworkId": self.core.framework_id,
                "marathon_config": {"master": self.master, "framework_name": self.name,
                                    "mesos_role": self.core.framework_role, "failover_timeout": self.failover_timeout,
                                    "ha": bool(self.zk), "hostname": self.http_address},
                "zookeeper_config": {"zk": self.zk or None},
                "http_config": {"http_port": int(self.http_address.rsplit(":", 1)[-1]) if self.http_address else None},
                "event_subscriber": None}

    def subscribe(self, types: frozenset[str], client: str) -> Iterator[dict[str, Any] | None]:
        return self.bus.subscribe(types, client)

    def publish(self, event: dict[str, Any]) -> None:
        self.bus.publish(event)

    def recent_events(self) -> list[dict[str, Any]]:
        return self.bus.recent()

    def api(self, credentials: Any = None) -> ServicesApi:
        return ServicesApi(self, credentials, page_files())

    # ------------------------------------------------------- commands
    def handle(self, event: Any) -> None:
        """Feed the core an event and carry out its commands (any thread)."""
        with self.lock:
            if not self.serving:
                return
            self._carry_out(self.core.handle(event))

    def _carry_out(self, commands: list[Command]) -> None:
        driver = self.driver
        for command in commands:
            if isinstance(command, Persist):
                self._persist(command)
            elif isinstance(command, Emit):
                self.bus.publish(dict(command.event))
            elif driver is None:
                continue
            elif isinstance(command, Launch):
                driver.launch_tasks([command.offer_id], command.tasks, Filters(refuse_seconds=command.refuse_seconds))
            elif isinstance(command, Decline):
                driver.decline_offer(command.offer_id, Filters(refuse_seconds=command.refuse_seconds))
            elif isinstance(command, Kill):
                driver.kill_task(command.task_id, command.agent_id)
            elif isinstance(command, Reconcile):
                if command.task_ids:
                    driver.reconcile_tasks([TaskStatus(task_id=t, state=TaskState.STAGING, agent_id=a)
                                            for t, a in zip(command.task_ids, command.agent_ids)])
                else:
                    driver.reconcile_tasks([])
            elif isinstance(command, Suppress):
                driver.suppress_offers()
            elif isinstance(command, Revive):
                driver.revive_offers()

    def _persist(self, command: Persist) -> None:
        if self.store is None:
            return
        try:
            self.store.write(dict(command.records), command.deleted)
        except Exception as exc:
            # not stored, so nothing that follows may happen: stop serving (the next leader, or this
            # service restarted, carries on from what the store holds)
            self.serving = False
            reason = f"the hard state could not be written: {exc}"
            self.errors.append(reason)
            log.error("%s: stopping", reason)
            if self._on_fenced is not None:
                self._on_fenced(reason)
            raise ApiError(503, {"message": reason}) from None
        self.records.update(command.records)
        for name in command.deleted:
            self.records.pop(name, None)
        self.writes += 1
        if self._on_stored is not None:
            self._on_stored(self.writes)

    # ---------------------------------------------------------- running
    def start(self, driver: Any) -> None:
        """Serve with ``driver`` (not started yet): ticks and drain polls begin."""
        self.driver = driver
        with self.lock:
            self.serving = True
        for target, name in ((self._tick_loop, "services-tick"), (self._drain_loop, "services-drains")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        driver.start()

    def pause(self) -> None:
        """Stop acting (leadership in doubt): callbacks and API changes are refused."""
        with self.lock:
            self.serving = False

    def resume(self) -> None:
        with self.lock:
            self.serving = True
            if self.driver is not None:
                self._carry_out(self.core.handle(Reregistered()))

    def stop(self) -> None:
        self._stopping.set()
        with self.lock:
            self.serving = False
        for thread in self._threads:
            thread.join(timeout=5)

    def _tick_loop(self) -> None:
        while not self._stopping.wait(TICK):
            try:
                self.handle(Tick())
            except ApiError:
                pass
            except Exception:
                log.exception("a tick of the services core failed")

    def _drain_loop(self) -> None:
        """Read which agents drain from the master's /state (module docstring)."""
        while not self._stopping.wait(self.drain_poll):
            info = self.master_info
            if info is None or not info.http_address:
                continue
            try:
                draining, blockers = _read_master(info.http_address, self.core.framework_id)
            except Exception as exc:   # a master that is away or busy: try again at the next poll
                log.debug("could not read the master's drains: %s", exc)
                continue
            try:
                self.handle(DrainingAgents(draining))
                self.handle(MasterBlockers(blockers))
            except ApiError:
                pass


def _read_master(http_address: str, framework_id: str, timeout: float = 5.0
                 ) -> tuple[frozenset[str], tuple[tuple[str, str], ...]]:
    """From the master's ``/state``: the agents draining, and why it makes
    the framework ``framework_id`` no offers (its ``offer_blockers``)."""
    address = http_address if "://" in http_address else f"http://{http_address}"
    with urllib.request.urlopen(address.rstrip("/") + "/state", timeout=timeout) as answer:  # noqa: S310
        state = json.loads(answer.read(64 * 1024 * 1024))
    draining = frozenset(str(agent.get("id")) for agent in state.get("agents", [])
                         if isinstance(agent, dict) and agent.get("drain_info"))
    ours = next((f for f in state.get("frameworks", []) if isinstance(f, dict) and framework_id
                 and f.get("id") == framework_id), {})
    blockers = tuple((str(b.get("reason", "")), str(b.get("message", ""))) for b in ours.get("offer_blockers") or []
                     if isinstance(b, dict))
    return draining, blockers


class ServicesScheduler(Scheduler):
    """The driver's callbacks, handed to the service's core."""

    def __init__(self, service: ServicesService) -> None:
        self.service = service

    def registered(self, driver, framework_id: str, master_info: MasterInfo) -> None:
        self.service.master_info = master_info
        self._feed(Registered(framework_id))

    def reregistered(self, driver, master_info: MasterInfo) -> None:
        self.service.master_info = master_info
        self._feed(Reregistered())

    def disconnected(self, driver) -> None:
        self._feed(Disconnected())

    def resource_offers(self, driver, offers) -> None:
        if not self.service.serving:
            for offer in offers:
                driver.decline_offer(offer.id, Filters(refuse_seconds=1.0))
            return
        self._feed(OffersReceived(list(offers)))

    def status_update(self, driver, status: TaskStatus) -> None:
        self._feed(StatusUpdate(status))

    def error(self, driver, message: str) -> None:
        self.service.errors.append(message)
        log.error("scheduler error: %s", message)

    def _feed(self, event: Any) -> None:
        try:
            self.service.handle(event)
        except ApiError as exc:     # the store refused: the service stopped serving
            log.error("%s", exc)


def framework_info(name: str, role: str, failover_timeout: float, framework_id: str, user: str = "",
                   webui_url: str = "") -> FrameworkInfo:
    """The framework: partition-aware (an unreachable agent's instances are
    Unreachable, replaced after the app's ``unreachableStrategy``); its page
    is ``webui_url`` (the master's dashboard links to it)."""
    return FrameworkInfo(name=name, role=role, failover_timeout=failover_timeout, id=framework_id,
                         partition_aware=True, user=user, webui_url=webui_url)


def new_core(role: str) -> ServicesCore:
    return ServicesCore(WallClock(), random.Random(), framework_role=role)
