"""The master core's command buffer: what a message or a tick makes the
master say, as :class:`Send` commands the runtime carries out (sans I/O).

Every part of the core writes into the one :class:`Outbox` its
:class:`~mesoslike.master.core.MasterCore` owns; the core hands its
contents to the runtime at the end of each call (:meth:`Outbox.flush`).
"""

from __future__ import annotations

import logging
from typing import Callable

import msgspec

from mesoslike.clock import Clock
from mesoslike.master.records import FrameworkRecord, clip
from mesoslike.wire import FrameworkInfo, TaskInfo, TaskStatus
from mesoslike.wire import messages as m
from mesoslike.wire.batching import SEND_BATCH

__all__ = ["Send", "Outbox", "MAX_ERROR_TEXT"]

log = logging.getLogger("mesoslike.master")

#: the longest ERROR text sent to a peer (it may quote what the peer sent)
MAX_ERROR_TEXT = 2000


class Send(msgspec.Struct, frozen=True):
    """Send ``message`` to the peer with transport identity ``peer``.
    A msgspec Struct (built in C: 55 ns against an attrs class's 126, and
    the master makes seven to ten a task; equal and hashed by its fields, as
    the attrs class was). Tracked by the collector (no ``gc=False``):
    untracked, the master's memory grew by 75-93 MiB under
    ``tests/test_fuzz.py::test_the_master_survives_hostile_frames_and_still_serves_a_framework``
    (against < 64), so some Send takes part in a reference cycle there (which
    one is not known yet); the collector must see through it."""

    peer: bytes
    message: object


class Outbox:
    """The sends of the call being handled, in order. O(1) per send.

    With :attr:`batches_to` set (the runtime's: :meth:`MasterCore.batch_sends
    <mesoslike.master.core.MasterCore.batch_sends>`), the updates
    and acknowledgements (:meth:`batch`) and the launches (:meth:`run_task`) a call sends
    to a peer that takes batches go as :func:`~mesoslike.wire.batching.batched`
    would put them: a peer's consecutive ones of a kind in one UPDATES,
    STATUS_UPDATE_ACKS or RUN_TASKS (of one framework) of at most SEND_BATCH (one alone as itself), where
    the first of them was; any other message to the peer ends its run. One
    :class:`Send` a batch, not one an item (and no UPDATE made to be
    unwrapped): two to three objects less an item, seven to ten items a task."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._sends: list[Send] = []
        #: whether a peer takes batch messages (None: each update and acknowledgement a Send of its own)
        self.batches_to: Callable[[bytes], bool] | None = None
        #: the call's runs of updates, acknowledgements and launches: each peer's open one, (batch type or
        #: the launches' framework, items, place in _sends), and every one made (with its peer), made
        #: messages at flush
        self._runs: dict[bytes, tuple[type | FrameworkInfo, list, int]] = {}
        self._made: list[tuple[bytes, type | FrameworkInfo, list, int]] = []
        self._asked: dict[bytes, bool] = {}

    def send(self, peer: bytes | None, message: object) -> None:
        """Send ``message`` to ``peer`` (None: nobody to tell, nothing sent)."""
        if peer is not None:
            if self._runs:
                self._runs.pop(peer, None)   # another message ends the peer's run (the order is kept)
            self._sends.append(Send(peer, message))

    def batch(self, peer: bytes | None, kind: type[m.Updates] | type[m.StatusUpdateAcks],
              item: TaskStatus | m.StatusUpdateAck) -> None:
        """Send ``item`` to ``peer`` (None: nothing sent) — a status as an
        UPDATE to a framework's connection (``kind`` Updates), a
        STATUS_UPDATE_ACK to an agent's (``kind`` StatusUpdateAcks) — in the
        peer's run of ``kind`` while the runtime batches (:attr:`batches_to`)."""
        if peer is None:
            return
        if self.batches_to is None:   # (each a Send of its own: no run is open)
            self._sends.append(Send(peer, _alone(kind, item)))
            return
        run = self._runs.get(peer)
        if run is not None and run[0] is kind and len(run[1]) < SEND_BATCH:
            run[1].append(item)
        elif not self._opened_run(peer, kind, item):
            self.send(peer, _alone(kind, item))

    def run_task(self, peer: bytes | None, framework: FrameworkInfo, task: TaskInfo) -> None:
        """Send ``task`` of ``framework`` to an agent's connection ``peer``
        (None: nothing sent): a RUN_TASK, in the peer's run of RUN_TASKS of
        that framework while the runtime batches (:attr:`batches_to`), as
        ``batched`` puts them — an ACCEPT's launches, one to an agent, a
        Send and a RUN_TASK less a launch."""
        if peer is None:
            return
        if self.batches_to is not None:
            # (the run's kind is the framework's info itself: the record's one object for all its launches)
            run = self._runs.get(peer)
            if run is not None and run[0] is framework and len(run[1]) < SEND_BATCH:
                run[1].append(task)
                return
            if self._opened_run(peer, framework, task):
                return
        self.send(peer, m.RunTask(framework, task))

    def _opened_run(self, peer: bytes, kind: type | FrameworkInfo, item: object) -> bool:
        """Begin ``peer``'s run of ``kind`` (a batch type, or RUN_TASKS of a framework) with ``item``, if
        the peer takes batches (asked once a call); False if it does not (``item`` is not sent)."""
        assert self.batches_to is not None
        accepts = self._asked.get(peer)
        if accepts is None:
            accepts = self._asked[peer] = self.batches_to(peer)
        if not accepts:
            return False
        items = [item]
        self._runs[peer] = (kind, items, len(self._sends))
        self._made.append((peer, kind, items, len(self._sends)))
        self._sends.append(Send(peer, None))   # its place: the batch is made at flush
        return True

    def send_framework(self, record: FrameworkRecord, message: object) -> None:
        """Send to a framework's connection, noting when (heartbeats are due after a silence)."""
        record.last_sent = self._clock.now()
        self.send(record.peer, message)

    def error(self, peer: bytes, text: str, fatal: bool = False) -> None:
        """ERROR to ``peer``. The text may quote what the peer sent: it is cut
        to MAX_ERROR_TEXT (the log line to less), so an answer never echoes
        unbounded input."""
        log.info("error to %s: %s", clip(peer), clip(text))
        self.send(peer, m.Error(clip(text, MAX_ERROR_TEXT), fatal))

    def clear(self) -> None:
        """Forget what was said (a call that failed half-way says nothing of it)."""
        self._sends = []
        if self._made or self._asked:
            self._runs, self._made, self._asked = {}, [], {}

    def flush(self) -> list[Send]:
        """What was said since the last flush; the buffer is empty afterwards."""
        out, self._sends = self._sends, []
        if self._made or self._asked:
            for peer, kind, items, index in self._made:
                message: object
                if isinstance(kind, FrameworkInfo):   # a framework's RUN_TASKS
                    message = m.RunTasks(kind, items) if len(items) > 1 else m.RunTask(kind, items[0])
                else:
                    message = kind(items) if len(items) > 1 else _alone(kind, items[0])
                out[index] = Send(peer, message)
            self._runs, self._made, self._asked = {}, [], {}
        return out


def _alone(kind: type, item: object) -> object:
    """The message of a batch's one item (no envelope for one, as ``batched`` has it)."""
    return m.Update(item) if kind is m.Updates else item   # type: ignore[arg-type]
