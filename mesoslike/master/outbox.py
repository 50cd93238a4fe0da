"""The master core's command buffer: what a message or a tick makes the
master say, as :class:`Send` commands the runtime carries out (sans I/O).

Every part of the core writes into the one :class:`Outbox` its
:class:`~mesoslike.master.core.MasterCore` owns; the core hands its
contents to the runtime at the end of each call (:meth:`Outbox.flush`).
"""

from __future__ import annotations

import logging

import msgspec

from mesoslike.clock import Clock
from mesoslike.master.records import FrameworkRecord, clip
from mesoslike.wire import messages as m

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
    """The sends of the call being handled, in order. O(1) per send."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._sends: list[Send] = []

    def send(self, peer: bytes | None, message: object) -> None:
        """Send ``message`` to ``peer`` (None: nobody to tell, nothing sent)."""
        if peer is not None:
            self._sends.append(Send(peer, message))

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

    def flush(self) -> list[Send]:
        """What was said since the last flush; the buffer is empty afterwards."""
        out, self._sends = self._sends, []
        return out
