"""The handshake watch (``mesoslike/handshake_watch.py``) alone: every
transition of its table with a fake ``now``, and its invariants after each (its
event numbers are checked against pyzmq's in tests/test_layering.py, the one
test file that may name zmq)."""

from __future__ import annotations

import struct

import pytest

from mesoslike import handshake_watch as hw
from mesoslike.handshake_watch import (CUT, CUTS_REFUSED, DROPPED, FIRST_CUT, FIRST_REFUSAL, IGNORED, REFUSAL,
                                       SUCCEEDED, SUCCEEDED_AFTER_FAILURE, HandshakeWatch)

pytestmark = pytest.mark.timeout(30)

CUT_EVENT = hw.EVENT_HANDSHAKE_FAILED_NO_DETAIL
AUTH = hw.EVENT_HANDSHAKE_FAILED_AUTH
PROTOCOL = hw.EVENT_HANDSHAKE_FAILED_PROTOCOL
SUCCESS = hw.EVENT_HANDSHAKE_SUCCEEDED
DISCONNECTED = hw.EVENT_DISCONNECTED


def feed(watch: HandshakeWatch, *kinds: int, now: float = 0.0) -> list[hw.Verdict]:
    verdicts = []
    for kind in kinds:
        verdicts.append(watch.event(kind, now))
        watch._check()
    return verdicts


def test_a_monitor_frame_is_read_as_libzmq_writes_it():
    assert hw.monitor_event(struct.pack("=Hi", hw.EVENT_HANDSHAKE_FAILED_AUTH, 400)) == (AUTH, 400)
    assert hw.monitor_event(struct.pack("=Hi", DISCONNECTED, -1)) == (DISCONNECTED, -1)
    assert hw.monitor_event(b"") is None and hw.monitor_event(b"1234567") is None


def test_cuts_below_the_refusal_count_are_told_once_and_retried_by_zeromq():
    watch = HandshakeWatch(2.0)
    assert CUTS_REFUSED == 3
    assert feed(watch, CUT_EVENT, CUT_EVENT) == [FIRST_CUT, CUT]
    assert (watch.failed, watch.refused, watch.cuts, watch.failures, watch.refusals) == (True, False, 2, 2, 0)
    assert watch.retry_at is None, "ZeroMQ tries a cut handshake again by itself, on the same socket"
    assert FIRST_CUT.failed and FIRST_CUT.tell and not FIRST_CUT.refused and not FIRST_CUT.renew
    assert CUT.failed and not CUT.tell


def test_the_third_cut_in_a_row_is_a_refusal_retried_with_a_new_socket():
    watch = HandshakeWatch(2.0)
    assert feed(watch, CUT_EVENT, CUT_EVENT) == [FIRST_CUT, CUT]
    assert watch.event(CUT_EVENT, 10.0) is FIRST_REFUSAL
    watch._check()
    assert (watch.refused, watch.cuts, watch.failures, watch.refusals, watch.retry_at) == (True, 3, 3, 1, 12.0)
    # more cuts (the new socket's handshakes cut too) are refusals again, told no more
    assert watch.event(CUT_EVENT, 13.0) is REFUSAL
    assert (watch.refusals, watch.retry_at) == (2, 15.0)


@pytest.mark.parametrize("kind", [AUTH, PROTOCOL])
def test_a_refusal_is_told_once_and_retried_after_the_pause(kind):
    watch = HandshakeWatch(2.0)
    assert watch.event(kind, 5.0) is FIRST_REFUSAL
    assert (watch.failed, watch.refused, watch.cuts, watch.retry_at) == (True, True, 0, 7.0)
    assert watch.event(kind, 8.0) is REFUSAL
    watch._check()
    assert (watch.refusals, watch.failures, watch.retry_at) == (2, 2, 10.0)
    assert FIRST_REFUSAL.refused and FIRST_REFUSAL.tell and not REFUSAL.tell and REFUSAL.refused


def test_a_refusal_after_a_cut_is_the_first_refusal():
    watch = HandshakeWatch(1.0)
    assert feed(watch, CUT_EVENT, AUTH) == [FIRST_CUT, FIRST_REFUSAL]


def test_the_retry_is_due_exactly_at_its_time_and_once():
    watch = HandshakeWatch(2.0)
    watch.event(AUTH, 1.0)
    assert not watch.retry_due(2.999)
    assert watch.retry_at == 3.0
    assert watch.retry_due(3.0)
    assert watch.retry_at is None and not watch.retry_due(3.0), "once: the new socket's handshake tells the rest"
    assert watch.refused, "still refused until a handshake succeeds"
    watch._check()


def test_no_retry_is_due_without_a_refusal():
    watch = HandshakeWatch(2.0)
    assert not watch.retry_due(1e9)
    feed(watch, CUT_EVENT)
    assert not watch.retry_due(1e9)


def test_a_success_after_failure_is_told_and_clears_the_cuts_and_the_retry():
    watch = HandshakeWatch(2.0)
    feed(watch, CUT_EVENT, CUT_EVENT, CUT_EVENT)
    assert watch.retry_at is not None
    assert watch.event(SUCCESS, 4.0) is SUCCEEDED_AFTER_FAILURE
    watch._check()
    assert (watch.failed, watch.refused, watch.cuts) == (False, False, 0) and watch.retry_at is None
    assert (watch.failures, watch.refusals) == (3, 1), "the counters are of all time"
    # the cut count starts again: two cuts are not a refusal
    assert feed(watch, CUT_EVENT, CUT_EVENT) == [FIRST_CUT, CUT]
    assert not watch.refused


def test_a_success_with_no_failure_before_it_is_not_told():
    watch = HandshakeWatch(2.0)
    assert feed(watch, SUCCESS, SUCCESS) == [SUCCEEDED, SUCCEEDED]
    assert not SUCCEEDED.tell and SUCCEEDED_AFTER_FAILURE.tell
    assert not watch.failed and watch.failures == 0


def test_a_drop_makes_the_socket_anew_unless_the_handshake_failed():
    watch = HandshakeWatch(2.0)
    assert feed(watch, SUCCESS, DISCONNECTED) == [SUCCEEDED, DROPPED]
    assert DROPPED.renew and not DROPPED.failed
    assert feed(watch, DISCONNECTED) == [DROPPED], "a drop changes no state: the next one is a drop too"
    # a failed handshake's own drop is not a drop to renew on (a cut: ZeroMQ retries; a refusal: the pause)
    assert feed(watch, CUT_EVENT, DISCONNECTED) == [FIRST_CUT, IGNORED]
    assert feed(watch, AUTH, DISCONNECTED) == [FIRST_REFUSAL, IGNORED]
    assert feed(watch, SUCCESS, DISCONNECTED) == [SUCCEEDED_AFTER_FAILURE, DROPPED]


def test_events_not_watched_change_nothing():
    watch = HandshakeWatch(2.0)
    feed(watch, CUT_EVENT)
    before = (watch.failed, watch.refused, watch.cuts, watch.failures, watch.refusals, watch.retry_at)
    assert feed(watch, 0x0001, 0x0004, 0x0400) == [IGNORED] * 3   # CONNECTED, LISTENING... not watched
    assert (watch.failed, watch.refused, watch.cuts, watch.failures, watch.refusals, watch.retry_at) == before
    assert not any((IGNORED.failed, IGNORED.refused, IGNORED.tell, IGNORED.renew))


def test_a_socket_not_made_anew_is_tried_again_after_the_pause():
    watch = HandshakeWatch(0.5)
    watch.renew_failed(10.0)
    assert watch.retry_at == 10.5 and not watch.failed
    assert not watch.retry_due(10.4) and watch.retry_due(10.5)
    watch._check()


def test_the_pause_must_be_positive():
    with pytest.raises(ValueError):
        HandshakeWatch(0.0)



def test_a_success_on_the_old_socket_drops_the_retry_of_a_failed_renewal():
    # ZeroMQ reconnected the socket that could not be replaced (a network error, not a protocol one)
    watch = HandshakeWatch(0.5)
    assert feed(watch, DISCONNECTED) == [DROPPED]
    watch.renew_failed(10.0)
    assert feed(watch, SUCCESS) == [SUCCEEDED]
    assert watch.retry_at is None and not watch.retry_due(11.0)
