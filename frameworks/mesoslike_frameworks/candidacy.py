"""A bundled framework's candidacy among several of its processes
(``mesoslike fuxi serve --zk``, ``mesoslike services serve --zk``), on the
master's own leadership table (:mod:`mesoslike.leadership`): one model of
"who may act when" for the master and every framework that elects a leader.

:class:`Candidacy` feeds the machine what ZooKeeper says (elected, demoted,
znode changed) and ticks, and carries out its actions:

- ``LoadRegistry``: read the hard state from ZooKeeper
  (:class:`mesoslike.ZooKeeperRecordStore` under ``<path>/registry``,
  fenced on this candidate's election znode);
- ``BuildCore``: a service from it (``build(records, store)``, not acting
  yet), handed to ``on_serve`` — the caller starts its driver with the kept
  framework id and serves; the framework reconciles what it kept, so that
  work resumes where it is and nothing is launched twice;
- ``PutAside`` / ``Resume``: the connection broke and came back within the
  session: the service stops acting meanwhile (:meth:`LeaderService.pause`),
  then goes on (:meth:`LeaderService.resume`);
- ``Drop``: the session is gone (or a write was fenced): ``on_drop`` — the
  process exits, like a Mesos master; the next leader carries on.

Writes are the service's (each change stored before it is acted on); each
successful one is reported to the machine as ``Stored``
(:meth:`Candidacy.stored`), a refused one as ``Fenced``
(:meth:`Candidacy.fenced`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Mapping, Protocol

from mesoslike import DriverStatus, MasterContender, SchedulerDriver, ZkUrl, ZooKeeperRecordStore
from mesoslike.leadership import (BuildCore, CoreBuilt, Demoted, Drop, ElectionWon, Fenced, Leadership, LoadRegistry,
                                  PutAside, RegistryLoaded, RegistryUnreadable, Resume, RetryLoading, Serve, Stored,
                                  Tick, ZnodeChanged)

__all__ = ["Candidacy", "KeptState", "LeaderService", "Lifetime"]

log = logging.getLogger("mesoslike_frameworks.candidacy")


class LeaderService(Protocol):
    """What a candidacy needs of the service it leads with."""

    #: what the store holds, as this service wrote it (the leadership machine compares it)
    records: dict[str, bytes]
    #: its successful writes
    writes: int

    def pause(self) -> None:
        """Stop acting (leadership in doubt); what arrives meanwhile waits or is refused."""

    def resume(self) -> None:
        """Act again: the same leadership goes on (reconcile what happened meanwhile)."""


class Lifetime:
    """A framework process's life (its runner's part): :attr:`stopping` is
    set when it should end — its leadership lost (:meth:`drop`; :attr:`lost`
    says why), or the caller's signal —, and :meth:`running` is False from
    then on, or once its driver ended on its own."""

    def __init__(self) -> None:
        self.driver: SchedulerDriver | None = None
        self.lost = ""
        self.stopping = threading.Event()

    def drop(self, reason: str) -> None:
        """Leadership is lost: the process ends (the next leader carries on)."""
        self.lost = reason
        self.stopping.set()

    def running(self) -> bool:
        if self.stopping.is_set():
            return False
        return self.driver is None or self.driver.status in (DriverStatus.RUNNING, DriverStatus.NOT_STARTED)


class KeptState:
    """What the machine knows of a service as its "core": the records it
    believes are stored, and how many writes it made."""

    def __init__(self, service: LeaderService) -> None:
        self.service = service

    @property
    def registry(self) -> object:
        return dict(self.service.records)

    @property
    def registry_changes(self) -> int:
        return int(self.service.writes)


class Candidacy:
    """See the module docstring. ``build(records, store) -> service`` makes
    a service from the stored records and the store it writes to (not
    acting yet); ``on_serve(service)`` starts it; ``on_drop(reason)`` ends
    the process. ``on_elected()`` runs at once when the contender is
    elected (in ZooKeeper's thread: quick), before the records are read.
    ``on_standby()`` runs when it stops leading before it served (it
    stands again). ``name`` names the framework in the log."""

    def __init__(self, zk_url: str, info: Mapping[str, Any],
                 build: Callable[[dict[str, bytes], ZooKeeperRecordStore], LeaderService],
                 on_serve: Callable[[Any], None], on_drop: Callable[[str], None],
                 session_timeout: float = 10.0, *, on_elected: Callable[[], None] = lambda: None,
                 on_standby: Callable[[], None] = lambda: None, name: str = "service scheduler") -> None:
        self.url = ZkUrl.parse(zk_url)
        self.name = name
        self._build = build
        self._on_serve = on_serve
        self._on_drop = on_drop
        self._on_elected = on_elected
        self._on_standby = on_standby
        self._events: queue.Queue = queue.Queue()
        self.machine: Leadership[KeptState] = Leadership(hold_for=session_timeout, stall_after=None)
        self.contender = MasterContender(self.url, dict(info), on_elected=self._elected,
                                         on_demoted=lambda reason: self._events.put(Demoted(reason)),
                                         session_timeout=session_timeout, warn_unverified=False,
                                         on_znode=lambda znode: self._events.put(ZnodeChanged(znode)),
                                         # a killed leader's session is closed at once (docs/ha.rst): its
                                         # standby takes over without waiting out the session timeout
                                         session_guard=True)
        self.store: ZooKeeperRecordStore | None = None
        self.service: Any = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"{name}-leadership", daemon=True)

    def _elected(self) -> None:
        self._on_elected()
        self._events.put(ElectionWon())

    def start(self) -> None:
        self.contender.start()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._events.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.contender.stop()

    # called by the service (any thread)
    def stored(self, writes: int) -> None:
        self._events.put(Stored(writes))

    def fenced(self, reason: str) -> None:
        self._events.put(Fenced(reason))

    def leader_address(self) -> str:
        try:
            info = self.contender.leader_info()
        except Exception:
            return ""
        return str(info.get("http_address", "")) if info else ""

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                event = self._events.get(timeout=0.5)
            except queue.Empty:
                event = Tick()
            if event is None:
                return
            try:
                self._feed(event)
            except Exception:
                log.exception("the %s's leadership loop failed on %s", self.name, type(event).__name__)
                self._on_drop("the leadership loop failed")
                return

    def _feed(self, event: Any) -> None:
        pending = [event]
        while pending:
            actions = self.machine.process(pending.pop(0), time.time())
            for action in actions:
                follow = self._do(action)
                if follow is not None:
                    pending.append(follow)

    def _do(self, action: Any) -> Any:
        if isinstance(action, LoadRegistry):
            fence = self.contender.fence()
            self.store = ZooKeeperRecordStore(self.contender.client, f"{self.url.path.rstrip('/')}/registry",
                                              self.contender.fence)
            try:
                return RegistryLoaded(self.store.load(), fence)
            except Exception as exc:
                return RegistryUnreadable(str(exc) or type(exc).__name__)
        if isinstance(action, BuildCore):
            assert isinstance(action.registry, dict) and self.store is not None
            service = self._build(action.registry, self.store)
            service.records = dict(action.registry)
            return CoreBuilt(KeptState(service), action.fence)
        if isinstance(action, Serve):
            self.service = action.core.service
            log.info("elected the leading %s in %s", self.name, self.url)
            self._on_serve(self.service)
        elif isinstance(action, Resume):
            log.info("the %s leads again under the same znode: it goes on", self.name)
            action.core.service.resume()
        elif isinstance(action, PutAside):
            log.warning("the %s steps aside while ZooKeeper is away (%s)", self.name, action.reason)
            action_service = self.service
            if action_service is not None:
                action_service.pause()
        elif isinstance(action, Drop):
            log.warning("the %s is no longer the leader: %s", self.name, action.reason)
            if self.service is not None:     # it served: its process ends, the next leader carries on
                self.service.pause()
                self._on_drop(action.reason)
            else:
                self._on_standby()
        elif isinstance(action, RetryLoading):
            log.error("elected but cannot read the kept state (again soon): %s", action.reason)
        return None
