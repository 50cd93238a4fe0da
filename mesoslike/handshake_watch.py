"""What a client makes of its connection's monitor events: the one set of
rules of :meth:`mesoslike.transport.Client._watch` (pyzmq) and of the Fuxi
worker's :meth:`mesoslike_frameworks.fuxi.worker_libzmq.Connection.watch`
(libzmq through ``ctypes``), sans-I/O: events in — their kind and the
caller's ``now`` (their value is only for the caller's log) —, verdicts
out — what to log, whether to make the socket anew now, when a refused
handshake is due to be tried again. No ZeroMQ, no logging, no clock read
here: the caller reads the monitor, makes the socket
anew, logs and counts (docs/wire.rst, "Failed handshakes").

Why the rules are what they are: ZeroMQ reconnects by itself after a network
error but never after a protocol error, so a dropped connection is made anew
with a new socket (a frame over the codec's limit ended an agent's
connection for good, issue 12 §2). A handshake cut (the connection closed
mid-handshake, ``HANDSHAKE_FAILED_NO_DETAIL``) is what a server going down
does once — the connection waiting in its listen backlog, then nothing
listens — and what a server that cannot read our HELLO (not the server whose
key we were given) does at every attempt, ~0.1-0.2 s apart: ZeroMQ tries
again on the same socket, and :data:`CUTS_REFUSED` cuts in a row count as a
refusal. A refusal (``AUTH``: the server's ZAP refused our key;
``PROTOCOL``: a mechanism mismatch) is never tried again by ZeroMQ, but a
server may learn our key later (a new leader that has not read its
credentials yet), so a socket made anew tries again ``retry_after`` seconds
later.

Transitions of :meth:`HandshakeWatch.event` (``failed``: a handshake failed
since the last that succeeded; ``refused``: one was refused since then;
``cuts``: handshakes cut since then)::

    event                   state before                      verdict              state after
    ----------------------  --------------------------------  -------------------  -----------------------------
    HANDSHAKE_FAILED_       cuts + 1 < CUTS_REFUSED,          FIRST_CUT (log)      cuts + 1, failed
      NO_DETAIL (a cut)       not failed
                            cuts + 1 < CUTS_REFUSED, failed   CUT                  cuts + 1
                            cuts + 1 >= CUTS_REFUSED          as a refusal below   cuts + 1, then as below
    HANDSHAKE_FAILED_AUTH,  not refused                       FIRST_REFUSAL (log)  failed, refused,
      _PROTOCOL (refusal)                                                            retry_at = now + retry_after
                            refused                           REFUSAL              retry_at = now + retry_after
    HANDSHAKE_SUCCEEDED     failed                            SUCCEEDED_AFTER_     not failed, not refused,
                                                                FAILURE (log)        cuts 0, retry_at None
                            not failed                        SUCCEEDED            retry_at None (a renewal
                                                                                     that failed is not needed:
                                                                                     the old socket connected)
    DISCONNECTED            not failed                        DROPPED (renew now)  unchanged
                            failed                            IGNORED              unchanged (the failed
                                                                                     handshake's own drop)
    anything else           any                               IGNORED              unchanged

    retry_due(now)          retry_at <= now                   True (renew now)     retry_at None
                            else                              False                unchanged
    renew_failed(now)       any                               —                    retry_at = now + retry_after

Counters: ``failures`` (every failed handshake, cut or refused), ``cuts``
(in a row, since the last success), ``refusals`` (every refusal, cuts that
made one included). Invariants (:meth:`HandshakeWatch._check`): a refusal is
a failure; cuts only after a failure; at least :data:`CUTS_REFUSED` cuts make
a refusal.
"""

from __future__ import annotations

import sys

__all__ = ["EVENT_DISCONNECTED", "EVENT_HANDSHAKE_FAILED_NO_DETAIL", "EVENT_HANDSHAKE_SUCCEEDED",
           "EVENT_HANDSHAKE_FAILED_PROTOCOL", "EVENT_HANDSHAKE_FAILED_AUTH", "HANDSHAKE_FAILED",
           "WATCHED_EVENTS", "CUTS_REFUSED", "Verdict", "HandshakeWatch", "monitor_event",
           "IGNORED", "FIRST_CUT", "CUT", "FIRST_REFUSAL", "REFUSAL", "SUCCEEDED", "SUCCEEDED_AFTER_FAILURE",
           "DROPPED"]

# libzmq's socket monitor events (zmq.h: its ABI, stable since 4.0; the handshake events since 4.3).
# Defined here once, for pyzmq's client and the worker's ctypes one alike; tests/test_handshake_watch.py
# checks them against pyzmq's.
EVENT_DISCONNECTED = 0x0200
EVENT_HANDSHAKE_FAILED_NO_DETAIL = 0x0800
EVENT_HANDSHAKE_SUCCEEDED = 0x1000
EVENT_HANDSHAKE_FAILED_PROTOCOL = 0x2000
EVENT_HANDSHAKE_FAILED_AUTH = 0x4000
#: the events of a handshake that failed
HANDSHAKE_FAILED = EVENT_HANDSHAKE_FAILED_NO_DETAIL | EVENT_HANDSHAKE_FAILED_PROTOCOL | EVENT_HANDSHAKE_FAILED_AUTH
#: what a client's monitor reports (the mask given to ``zmq_socket_monitor``)
WATCHED_EVENTS = EVENT_DISCONNECTED | EVENT_HANDSHAKE_SUCCEEDED | HANDSHAKE_FAILED

#: handshakes cut in a row, each on a connection made, that make a refusal (see the module's doc)
CUTS_REFUSED = 3


class Verdict:
    """What an event means to the caller: ``failed`` — a failed handshake
    (to count); ``refused`` — a refusal (to count; a socket made anew is
    due at :attr:`HandshakeWatch.retry_at`); ``tell`` — the first of its
    kind since the last success, to log; ``renew`` — make the socket anew
    now. The verdicts are this module's constants, compared with ``is``."""

    __slots__ = ("name", "failed", "refused", "tell", "renew")

    def __init__(self, name: str, *, failed: bool = False, refused: bool = False, tell: bool = False,
                 renew: bool = False) -> None:
        self.name, self.failed, self.refused, self.tell, self.renew = name, failed, refused, tell, renew

    def __repr__(self) -> str:
        return self.name


#: an event that changes nothing (not watched, or the drop of a handshake that failed)
IGNORED = Verdict("IGNORED")
#: a handshake cut, the first failure since the last success: ZeroMQ tries again on this socket
FIRST_CUT = Verdict("FIRST_CUT", failed=True, tell=True)
#: another cut, below the refusal count
CUT = Verdict("CUT", failed=True)
#: the first refusal since the last success (a refusal, or the CUTS_REFUSED-th cut in a row)
FIRST_REFUSAL = Verdict("FIRST_REFUSAL", failed=True, refused=True, tell=True)
#: a refusal after one already told
REFUSAL = Verdict("REFUSAL", failed=True, refused=True)
#: a handshake that succeeded, none failed before it
SUCCEEDED = Verdict("SUCCEEDED")
#: a handshake that succeeded after one failed: the server may not know this client (a connection made anew)
SUCCEEDED_AFTER_FAILURE = Verdict("SUCCEEDED_AFTER_FAILURE", tell=True)
#: the connection dropped (no handshake failing): make the socket anew now
DROPPED = Verdict("DROPPED", renew=True)


class HandshakeWatch:
    """One client connection's handshake state (see the module's doc for the
    transitions). ``retry_after``: seconds from a refusal (or a socket that
    could not be made anew) to the next try with a new socket. O(1) a call."""

    __slots__ = ("retry_after", "failed", "refused", "cuts", "failures", "refusals", "retry_at")

    def __init__(self, retry_after: float) -> None:
        if not retry_after > 0:
            raise ValueError(f"retry_after must be > 0, not {retry_after!r}")
        self.retry_after = retry_after
        #: a handshake failed / was refused since the last that succeeded
        self.failed = self.refused = False
        #: handshakes cut in a row since the last that succeeded
        self.cuts = 0
        #: failed handshakes and refusals seen, ever
        self.failures = self.refusals = 0
        #: when to make the socket anew and try again (a refusal's pause, or a renewal that failed)
        self.retry_at: float | None = None

    def event(self, kind: int, now: float) -> Verdict:
        """The verdict of a monitor event of ``kind`` read at ``now``."""
        if kind & HANDSHAKE_FAILED:
            self.failures += 1
            if kind == EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                self.cuts += 1
                if self.cuts < CUTS_REFUSED:
                    verdict = CUT if self.failed else FIRST_CUT
                    self.failed = True
                    return verdict
            verdict = REFUSAL if self.refused else FIRST_REFUSAL
            self.refusals += 1
            self.failed = self.refused = True
            self.retry_at = now + self.retry_after
            return verdict
        if kind == EVENT_HANDSHAKE_SUCCEEDED:
            verdict = SUCCEEDED_AFTER_FAILURE if self.failed else SUCCEEDED
            self.failed = self.refused = False
            self.cuts = 0
            self.retry_at = None
            return verdict
        if kind == EVENT_DISCONNECTED and not self.failed:
            return DROPPED
        return IGNORED

    def retry_due(self, now: float) -> bool:
        """Whether the socket is to be made anew now (``retry_at`` reached,
        and then cleared: the new socket's handshake tells what comes next)."""
        if self.retry_at is None or now < self.retry_at:
            return False
        self.retry_at = None
        return True

    def renew_failed(self, now: float) -> None:
        """No socket could be made anew at ``now`` (the process's file or
        socket limit): the old one is kept, and a new one tried again
        ``retry_after`` later."""
        self.retry_at = now + self.retry_after

    def _check(self) -> None:
        assert not self.refused or self.failed, "a refusal is a failed handshake"
        assert self.failed or self.cuts == 0, "cuts counted with no failure since the last success"
        assert self.cuts < CUTS_REFUSED or self.refused, "the refusal count of cuts is a refusal"
        assert self.refusals <= self.failures


def monitor_event(frame: bytes) -> tuple[int, int] | None:
    """The event and value of a socket monitor message's first frame (a
    16-bit event, a 32-bit signed value, in the machine's order: libzmq's
    ABI), None for a frame of another size."""
    if len(frame) != 6:
        return None
    return int.from_bytes(frame[:2], sys.byteorder), int.from_bytes(frame[2:], sys.byteorder, signed=True)
