"""``mesoslike services serve --zk``: one candidate among several, on the
master's own leadership table (:mod:`mesoslike.leadership`).

:class:`Candidacy` feeds the machine what ZooKeeper says (elected, demoted,
znode changed) and ticks, and carries out its actions:

- ``LoadRegistry``: read the hard state from ZooKeeper
  (:class:`mesoslike.ZooKeeperRecordStore` under ``<path>/registry``,
  fenced on this candidate's election znode);
- ``BuildCore``: a fresh :class:`~.core.ServicesCore` from it (apps,
  deployments, launched instances), handed to ``on_serve`` — the caller
  starts the driver with the kept framework id; the core reconciles every
  instance it knows, so a deployment resumes where the instances are and
  nothing is launched twice;
- ``PutAside`` / ``Resume``: the connection broke and came back within the
  session: the service stops acting meanwhile, then reconciles;
- ``Drop``: the session is gone (or a write was fenced): ``on_drop`` — the
  process exits, like a Mesos master; the next leader carries on.

Writes are the service's (each change stored before it is acted on); each
successful one is reported to the machine as ``Stored``, a refused one as
``Fenced``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Mapping

from mesoslike import MasterContender, ZkUrl, ZooKeeperRecordStore
from mesoslike.leadership import (BuildCore, CoreBuilt, Demoted, Drop, ElectionWon, Fenced, Leadership, LoadRegistry,
                                  PutAside, RegistryLoaded, RegistryUnreadable, Resume, RetryLoading, Serve, Stored,
                                  Tick, ZnodeChanged)

__all__ = ["Candidacy", "KeptState"]

log = logging.getLogger("mesoslike.frameworks.services.leader")


class KeptState:
    """What the machine knows of a service as its "core": the records it
    believes are stored, and how many writes it made."""

    def __init__(self, service: Any) -> None:
        self.service = service

    @property
    def registry(self) -> object:
        return dict(self.service.records)

    @property
    def registry_changes(self) -> int:
        return int(self.service.writes)


class Candidacy:
    """See the module docstring. ``build(records) -> service`` makes a
    serving service from the stored records (not started); ``on_serve(service,
    store)`` starts it; ``on_drop(reason)`` ends the process."""

    def __init__(self, zk_url: str, info: Mapping[str, Any], build: Callable[[dict[str, bytes], Any], Any],
                 on_serve: Callable[[Any], None], on_drop: Callable[[str], None],
                 session_timeout: float = 10.0) -> None:
        self.url = ZkUrl.parse(zk_url)
        self._build = build
        self._on_serve = on_serve
        self._on_drop = on_drop
        self._events: queue.Queue = queue.Queue()
        self.machine: Leadership[KeptState] = Leadership(hold_for=session_timeout, stall_after=None)
        self.contender = MasterContender(self.url, dict(info), on_elected=lambda: self._events.put(ElectionWon()),
                                         on_demoted=lambda reason: self._events.put(Demoted(reason)),
                                         session_timeout=session_timeout, warn_unverified=False,
                                         on_znode=lambda znode: self._events.put(ZnodeChanged(znode)))
        self.store: ZooKeeperRecordStore | None = None
        self.service: Any = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="services-leadership", daemon=True)

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
                log.exception("the services' leadership loop failed on %s", type(event).__name__)
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
            assert isinstance(action.registry, dict)
            service = self._build(action.registry, self.store)
            service.records = dict(action.registry)
            return CoreBuilt(KeptState(service), action.fence)
        if isinstance(action, Serve):
            self.service = action.core.service
            log.info("elected the leading service scheduler in %s", self.url)
            self._on_serve(self.service)
        elif isinstance(action, Resume):
            log.info("the service scheduler leads again under the same znode: it goes on")
            action.core.service.resume()
        elif isinstance(action, PutAside):
            log.warning("the service scheduler steps aside while ZooKeeper is away (%s)", action.reason)
            action_service = self.service
            if action_service is not None:
                action_service.pause()
        elif isinstance(action, Drop):
            log.warning("the service scheduler is no longer the leader: %s", action.reason)
            if self.service is not None:     # it served: its process ends, the next leader carries on
                self.service.pause()
                self._on_drop(action.reason)
        elif isinstance(action, RetryLoading):
            log.error("elected but cannot read the kept state (again soon): %s", action.reason)
        return None
