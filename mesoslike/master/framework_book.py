"""The framework book: every framework the master knows, which connection
each is subscribed on, who holds it, the ids that may never come back, and
what ended (sans I/O).

It guards what the rest of the core leans on when it looks a framework up
by its connection or its id (:meth:`FrameworkBook._check`):

- a connection names at most one framework, subscribed on it and connected;
- a framework id is live, removed, or neither — never both;
- every id a connection or a principal holds is a live framework's;
- frameworks adopted without a known principal (*unbound*), and those
  subscribed under ids this master did not know (*claimed*), are live ones;
- the ended tasks reported for frameworks not known yet are counted exactly.

The lifecycle that moves frameworks between these (SUBSCRIBE, failover,
removal) is :class:`mesoslike.master.frameworks.FrameworkLifecycle`'s.
"""

from __future__ import annotations

import itertools
from typing import Container, Iterable

from mesoslike.master.history import History
from mesoslike.master.records import FrameworkRecord, Holdings, TaskRecord
from mesoslike.wire import FrameworkInfo
from mesoslike.wire import messages as m

__all__ = ["FrameworkBook", "MAX_REPORTED_TASKS"]

#: ended tasks remembered from agents' reports, of frameworks not known otherwise (see ``reported``)
MAX_REPORTED_TASKS = 100_000


class FrameworkBook:
    """The frameworks by id (:attr:`records`, live: subscribed, or waiting
    for their failover timeout), with the indexes and bounds around them.
    Read the fields freely; change membership and connections only through
    the book. O(1) per operation, :meth:`_check` O(frameworks)."""

    def __init__(self, master_id: str, removed: Iterable[str] = (), max_completed_frameworks: int = 50) -> None:
        self.records: dict[str, FrameworkRecord] = {}
        self._by_peer: dict[bytes, str] = {}
        #: which connection holds which frameworks (max_frameworks_per_connection)
        self.owners = Holdings()
        #: the same, by principal (secured clusters: max_frameworks_per_principal)
        self.principals = Holdings()
        #: ids that may not come back (torn down, failover timeout expired)
        self.removed: set[str] = set(removed)
        #: adopted frameworks whose principal no registry and no receipt told (secured clusters:
        #: nobody may subscribe under their ids)
        self.unbound: set[str] = set()
        #: framework ids a subscriber brought that this master did not know, accepted for its principal
        #: (the Mesos rule, FrameworkLifecycle.subscribe) until an agent's receipt confirms whose they are
        self.claimed: set[str] = set()
        #: frameworks whose ended tasks a re-registering agent reported (not adopted: nothing of
        #: theirs runs): framework id -> its info as reported (principal only if its receipt checked)
        #: and task id -> (the agent, its report). Such a framework may subscribe under its id to
        #: hear of them; its tasks are then the master's like any other. At most MAX_REPORTED_TASKS
        self.reported: dict[str, tuple[FrameworkInfo, dict[str, tuple[str, m.RunningTask]]]] = {}
        self.reported_count = 0
        #: tasks whose story is told (see UpdateDelivery.complete), by their terminal state: monotonic totals
        self.completed_by_state: dict[str, int] = {}
        #: removed frameworks with their ended tasks, bounded (docs/operations.rst)
        self.history = History(max_completed_frameworks)
        self._ids = (f"{master_id}-F{n:04d}" for n in itertools.count(1))

    # --------------------------------------------------------------- lookups
    def get(self, framework_id: str) -> FrameworkRecord | None:
        return self.records.get(framework_id)

    def on(self, peer: bytes) -> FrameworkRecord | None:
        """The framework subscribed on connection ``peer``, if any. O(1)."""
        framework_id = self._by_peer.get(peer)
        return self.records[framework_id] if framework_id is not None else None

    def task(self, framework_id: str, task_id: str) -> tuple[FrameworkRecord, TaskRecord] | None:
        """A known task with its framework, or None. O(1)."""
        record = self.records.get(framework_id)
        task = record.tasks.get(task_id) if record is not None else None
        return None if record is None or task is None else (record, task)

    def new_id(self, taken: Container[str]) -> str:
        """The next id of this master's series that is free: a framework
        adopted after a failover, or a registry written by an earlier master
        of the same id (``taken``), may hold ids of the series already; a
        chosen id never makes a later subscription fail. O(1) amortised (each
        taken id is skipped once)."""
        for framework_id in self._ids:
            if framework_id not in self.records and framework_id not in self.removed and framework_id not in taken:
                return framework_id
        raise AssertionError("unreachable: the series is endless")

    # ------------------------------------------------------------ membership
    def add(self, record: FrameworkRecord) -> None:
        """A framework subscribed for the first time, or adopted (disconnected)."""
        assert record.id not in self.records and record.id not in self.removed
        self.records[record.id] = record

    def connect(self, record: FrameworkRecord, peer: bytes, owner: bytes) -> None:
        """``record`` is subscribed on ``peer`` now, held by ``owner`` (and its principal, if any)."""
        if record.peer is not None and record.peer != peer:
            self._unmap(record)
        record.peer = peer
        self._by_peer[peer] = record.id
        self.owners.hold(owner, record.id)
        if record.info.principal:
            self.principals.hold(record.info.principal.encode(), record.id)

    def disconnect(self, record: FrameworkRecord) -> None:
        """``record`` lost its connection; it waits for its failover timeout."""
        record.connected = False
        self._unmap(record)

    def remove(self, record: FrameworkRecord) -> None:
        """Forget a live framework for good: its id may not come back."""
        self._unmap(record)
        del self.records[record.id]
        self.unbound.discard(record.id)
        self.claimed.discard(record.id)
        self.owners.release(record.id)
        self.principals.release(record.id)
        self.removed.add(record.id)

    def _unmap(self, record: FrameworkRecord) -> None:
        if record.peer is not None and self._by_peer.get(record.peer) == record.id:
            del self._by_peer[record.peer]

    # ---------------------------------------------------------- what ended
    def complete(self, record: FrameworkRecord, task: TaskRecord, keep: int) -> None:
        """The task's story is told: out of the live tasks, into the history (the ``keep`` latest)."""
        self.completed_by_state[task.state] = self.completed_by_state.get(task.state, 0) + 1
        del record.tasks[task.info.task_id]
        record.completed.add(task, keep)

    def take_reported(self, framework_id: str) -> dict[str, tuple[str, m.RunningTask]]:
        """The ended tasks agents reported of a framework being adopted now (forgotten here)."""
        entry = self.reported.pop(framework_id, None)
        if entry is None:
            return {}
        self.reported_count -= len(entry[1])
        return entry[1]

    def _check(self, keep_tasks: int | None = None) -> None:
        """Raise ``AssertionError`` unless the invariants of the module docstring hold."""
        for peer, framework_id in self._by_peer.items():
            record = self.records.get(framework_id)
            assert record is not None, f"connection {peer!r} names framework {framework_id}, which is not live"
            assert record.peer == peer and record.connected, f"framework {framework_id} is not on {peer!r}"
        for framework_id, record in self.records.items():
            assert record.id == framework_id, f"framework {framework_id} is filed as {record.id}"
            assert record.connected or record.failover_deadline is not None, \
                f"disconnected framework {framework_id} has no failover deadline"
        assert not self.removed & self.records.keys(), "a removed framework is live"
        assert self.unbound <= self.records.keys(), "an unbound framework is not live"
        assert self.claimed <= self.records.keys(), "a claimed framework is not live"
        for holdings in (self.owners, self.principals):
            holdings._check()
        held = {item for holdings in (self.owners, self.principals) for item in holdings.items()}
        assert held <= self.records.keys(), f"frameworks {sorted(held - self.records.keys())} are held, not live"
        assert self.reported_count == sum(len(tasks) for _, tasks in self.reported.values())
        assert self.reported_count <= MAX_REPORTED_TASKS
        self.history._check(keep_tasks)
        for record in self.records.values():
            if keep_tasks is not None:
                record.completed._check(keep_tasks)
