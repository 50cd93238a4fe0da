"""Reliable delivery of status updates, sans I/O: Mesos's status update manager.

An *update stream* holds one task's status updates that the receiver has not
acknowledged yet, oldest first. Only the oldest, the *head*, is in flight: it
is sent, and sent again after a :class:`~mesoslike.backoff.Backoff` until the
receiver acknowledges it by uuid; then the next one goes out. So the receiver
gets each task's updates in order, each at least once, and never two of a
task at the same time. An acknowledgement of anything but the head is ignored
(the second answer to a retried update, an old or unknown uuid), as is an
update whose uuid is pending already (a resend of it by its producer) —
Mesos's ``TaskStatusUpdateStream`` does the same.

:class:`UpdateStreams` keeps a sender's streams by key — the agent's by
(framework id, task id), toward the master; the executor driver's by task id,
toward its agent — and when each head is due again: a heap, O(log n) per
send, an entry stale once its stream was sent, acknowledged or removed since;
a head's first send, due after the back-off's first wait from a clock that
does not go back, in a queue beside it instead (O(1): the agent's three
updates a task are nearly all first sends, acknowledged before they are due).
It does not know whether the receiver listens: its user sends (:meth:`add`'s
answer, :meth:`due`, :meth:`send_head`) only while it does, and calls
:meth:`heads` when it is registered again. docs/reliability.rst, "Retries",
lists each user's back-off.

A sender that tells :meth:`acknowledge` the time (the agent) has a head's
retry wait while the receiver is visibly working through what was sent
before it: when the retry comes due, no send made after the head's last one
has been acknowledged (counting only heads sent once: the acknowledgement
of a head sent again may answer its first send, as Karn's rule for TCP has
it), and an acknowledgement came less than the back-off's
first wait ago. Then the head is behind others in the receiver's queue, not
lost: a retry would only add to that queue (a burst of 20,000 launches had
the master handle as many retries as updates). The retry goes out once the
acknowledgements stop for that long, or once a later send is acknowledged
first — the wait is bounded by the acknowledgements of the sends before it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Container, Hashable, Iterator
from typing import Any, Generic, TypeVar

from mesoslike.backoff import Backoff
from mesoslike.clock import Clock
from mesoslike.wire.types import TaskStatus

__all__ = ["UpdateStream", "UpdateStreams"]

K = TypeVar("K", bound=Hashable)


class UpdateStream(list):
    """One task's unacknowledged updates: the list's items from ``start``
    on, oldest (the one in flight) first, and the stream's ``key``. ``due``
    is when the head goes out again (None: not sent since it became the
    head, waiting for a receiver, or the stream is gone); ``sends`` counts
    its sends since the last acknowledgement or reset, the attempt its
    back-off is at; ``sent`` numbers the head's last send among all the
    streams' sends (0: none).

    One object a task, the updates in it (a list with slots): the agent
    keeps one a task with three updates through it, and the collector's
    passes over the young objects (every 50,000 allocations in the agent)
    saw a stream, a deque and a tuple a send before. An acknowledged head's
    place is emptied and skipped (``start``); the list is cut when the
    skipped part is at least half of it: O(1) amortised an update."""

    __slots__ = ("key", "start", "due", "sends", "sent")

    def __init__(self, key: Hashable) -> None:
        self.key: Any = key   # (the streams' K)
        self.start = 0
        self.due: float | None = None
        self.sends = 0
        self.sent = 0

    @property
    def head(self) -> TaskStatus | None:
        return self[self.start] if len(self) > self.start else None

    @property
    def updates(self) -> list[TaskStatus]:
        """The unacknowledged updates, the one in flight first (a copy)."""
        return self[self.start:]

    def take_head(self) -> TaskStatus:
        """Remove the head and return it (the stream must have one)."""
        start = self.start
        head: TaskStatus = self[start]
        start += 1
        if start >= 32 and 2 * start >= len(self):
            del self[:start]
            start = 0
        else:
            self[start - 1] = None   # (not kept alive until the stream goes)
        self.start = start
        return head


class UpdateStreams(Generic[K]):
    """A sender's update streams (see the module doc). ``backoff``: the
    waits between sends of one head (no jitter: no random source here);
    ``limit``: the most updates held in all (:meth:`add` refuses more)."""

    def __init__(self, backoff: Backoff, limit: int | None = None) -> None:
        if backoff.jitter:
            raise ValueError("an update stream's back-off has no jitter (it has no random source)")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit!r}")
        self.backoff = backoff
        self.limit = limit
        self._streams: dict[K, UpdateStream] = {}
        #: uuid -> the key of the stream holding it, for every pending update
        self._keys: dict[str, K] = {}
        #: (when, n, stream): when a head is due again; stale unless stream.due == when
        self._resends: list[tuple[float, int, UpdateStream]] = []
        #: the same for first sends, in the order they are due (each due the back-off's first wait after
        #: it was made): a queue, cheaper than the heap — their times and their streams side by side (no
        #: tuple a send for the collector to pass over); at the same time a first send goes before a retry
        self._first_due: deque[float] = deque()
        self._first_streams: deque[UpdateStream] = deque()
        self._seq = itertools.count()
        #: sends made (numbering them), the highest number acknowledged, and when an acknowledgement
        #: told with its time last came (None: none yet): a retry waits while the receiver works
        #: through older sends (the module doc)
        self._sends_made = 0
        self._acknowledged_send = 0
        self._progress_at: float | None = None
        #: how long without an acknowledgement makes a due retry go out all the same; also a head's
        #: first wait (the back-off's first delay, read once: a head's first send is most sends)
        self._patience = self._first_wait = backoff.delay(0)
        #: retries that waited for the receiver's progress (each time one did)
        self.retries_waited = 0

    # ------------------------------------------------------------- reading
    @property
    def count(self) -> int:
        """How many updates wait for an acknowledgement, in all streams."""
        return len(self._keys)

    @property
    def full(self) -> bool:
        return self.limit is not None and len(self._keys) >= self.limit

    def __contains__(self, key: object) -> bool:
        return key in self._streams

    def pending(self, key: K) -> list[TaskStatus]:
        """The updates of ``key`` not yet acknowledged, the one in flight first."""
        stream = self._streams.get(key)
        return stream[stream.start:] if stream is not None else []

    def depth(self, key: K) -> int:
        """How many updates of ``key`` wait (O(1))."""
        stream = self._streams.get(key)
        return len(stream) - stream.start if stream is not None else 0

    def head(self, key: K) -> TaskStatus | None:
        """The update of ``key`` in flight (None: it has none)."""
        stream = self._streams.get(key)
        return stream[stream.start] if stream is not None else None

    def key_of(self, uuid: str) -> K | None:
        """The key of the stream holding pending update ``uuid``."""
        return self._keys.get(uuid)

    def updates(self) -> Iterator[TaskStatus]:
        """Every pending update, stream by stream (in the order the streams began)."""
        for stream in self._streams.values():
            yield from itertools.islice(stream, stream.start, None)

    # ------------------------------------------------------------- changes
    def add(self, key: K, update: TaskStatus) -> bool:
        """Queue ``update`` behind ``key``'s others. True when it is the head
        now: send it (:meth:`send_head`) if the receiver listens. False for a
        duplicate (its uuid is pending) and for one queued behind another.
        ``ValueError`` for an update without a uuid (an acknowledgement could
        not name it), ``OverflowError`` past ``limit``."""
        return self.add_and_send(key, update, None) is not None

    def add_and_send(self, key: K, update: TaskStatus, clock: Clock | None) -> TaskStatus | None:
        """:meth:`add` and, when ``update`` is the head now and ``clock`` is
        given (the receiver listens), :meth:`send_head` at ``clock.now()``
        (read only then), with one lookup of ``key``: ``update`` when it is the
        head now (sent if ``clock`` is given), None for a duplicate and for
        one queued behind another. The same errors as :meth:`add`."""
        uuid = update.uuid
        if not uuid:
            raise ValueError(f"an update of task {update.task_id!r} without a uuid cannot be acknowledged")
        keys = self._keys
        if uuid in keys:
            return None
        limit = self.limit
        if limit is not None and len(keys) >= limit:
            raise OverflowError(f"{limit} updates wait for an acknowledgement already")
        keys[uuid] = key
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = UpdateStream(key)
        elif len(stream) > stream.start:   # behind an unacknowledged one
            stream.append(update)
            return None
        stream.append(update)
        return self._send(stream, clock.now()) if clock is not None else update

    def send_head(self, key: K, now: float) -> TaskStatus | None:
        """``key``'s head, to send now (None: nothing pending); it is due
        again after the back-off's next delay unless acknowledged first."""
        stream = self._streams.get(key)
        return self._send(stream, now) if stream is not None else None

    def heads(self, now: float) -> list[tuple[K, TaskStatus]]:
        """Every head, to send now to a receiver that has just (re)registered;
        each stream's back-off starts again."""
        out = []
        for key, stream in self._streams.items():
            stream.sends = 0
            out.append((key, self._send(stream, now)))
        return out

    def due(self, now: float) -> list[tuple[K, TaskStatus]]:
        """The heads whose time has come (oldest due first), to send again now."""
        out: list[tuple[K, TaskStatus]] = []
        resends = self._resends
        progress_at = self._progress_at
        first_due, first_streams = self._first_due, self._first_streams
        # (one sum, compared and then used: ``now - progress_at < patience`` could hold while
        # ``progress_at + patience <= now`` in floating point, and a retry rescheduled to that time was
        # due again at once: the loop never ended, and an agent in it sent nothing more — CI run 84)
        working_until = progress_at + self._patience if progress_at is not None else -math.inf
        working = now < working_until
        while True:   # the two queues merged, the one due first first
            if first_due and first_due[0] <= now and (not resends or first_due[0] <= resends[0][0]):
                when = first_due.popleft()
                stream = first_streams.popleft()
            elif resends and resends[0][0] <= now:
                when, _, stream = heapq.heappop(resends)
            else:
                break
            if self._current(when, stream):
                if working and stream.sent > self._acknowledged_send:
                    # behind older sends the receiver is still acknowledging: not lost, queued
                    self.retries_waited += 1
                    self._schedule(stream, working_until)
                    continue
                out.append((stream.key, self._send(stream, now)))
        return out

    def next_due(self) -> float | None:
        """When :meth:`due` has a head to send next (None: none is waiting)."""
        resends = self._resends
        first_due, first_streams = self._first_due, self._first_streams
        while resends:
            when, _, stream = resends[0]
            if self._current(when, stream):
                break
            heapq.heappop(resends)
        while first_due:
            if self._current(first_due[0], first_streams[0]):
                break
            first_due.popleft()
            first_streams.popleft()
        if first_due and (not resends or first_due[0] <= resends[0][0]):
            return first_due[0]
        return resends[0][0] if resends else None

    def postpone(self, key: K, until: float) -> None:
        """Send ``key``'s head next at ``until``, not earlier (the receiver
        refused it for now)."""
        stream = self._streams.get(key)
        if stream is not None:
            self._schedule(stream, until)

    def acknowledge(self, key: K, uuid: str, now: float | None = None) -> TaskStatus | None:
        """The receiver has ``key``'s head if ``uuid`` names it: it is removed
        and returned, and the next update (if any) becomes the head, with its
        back-off from the start; send it if the receiver listens. Any other
        uuid: None, nothing changes. ``now`` (when it came) lets the heads
        sent after this one wait for their retries while such
        acknowledgements keep coming (the module doc)."""
        answer = self.acknowledge_and_send(key, uuid, now)
        return answer[0] if answer is not None else None

    def acknowledge_and_send(self, key: K, uuid: str, now: float | None, send: bool = False,
                             ends: Container[str] = ()) -> tuple[TaskStatus, TaskStatus | None] | None:
        """:meth:`acknowledge` and what follows it, with one lookup of
        ``key``: None when ``uuid`` does not name the head (nothing changes);
        else the acknowledged update and the next head, sent now as
        :meth:`send_head` sends it when ``send`` (and ``now`` is given) —
        None when there is none or it is not sent. An acknowledged update
        whose state is in ``ends`` ends the stream instead: whatever it still
        holds is forgotten (:meth:`remove`), nothing is sent."""
        stream = self._streams.get(key)
        if stream is None or stream[stream.start].uuid != uuid:
            return None
        if now is not None:
            self._progress_at = now
            if stream.sends == 1 and stream.sent > self._acknowledged_send:
                # (only a head sent once says how far the receiver got, as Karn's rule for TCP: the
                # acknowledgement of a head sent again may answer its first send — counted, the
                # retry's late number let every older head go at once, a retry of retries)
                self._acknowledged_send = stream.sent
        del self._keys[uuid]
        stream.due, stream.sends, stream.sent = None, 0, 0
        if len(stream) - stream.start == 1:   # the last: the stream goes
            del self._streams[key]
            head: TaskStatus = stream[stream.start]
            stream.clear()   # (its queue entries may hold it a while)
            return head, None
        head = stream.take_head()
        if head.state in ends:
            self.remove(key)
            return head, None
        return head, self._send(stream, now) if send and now is not None else None

    def drop(self, key: K, uuid: str) -> TaskStatus | None:
        """The receiver refuses ``key``'s head for good: forget it as if
        acknowledged (:meth:`acknowledge`), so the task's later updates go on."""
        return self.acknowledge(key, uuid)

    def remove(self, key: K) -> None:
        """Forget ``key``'s stream and whatever it still holds."""
        stream = self._streams.pop(key, None)
        if stream is not None:
            stream.due = None
            for update in itertools.islice(stream, stream.start, None):
                del self._keys[update.uuid]

    def clear(self) -> None:
        """Forget every stream."""
        for stream in self._streams.values():
            stream.due = None
        self._streams.clear()
        self._keys.clear()
        self._resends.clear()
        self._first_due.clear()
        self._first_streams.clear()
        self._progress_at = None

    # ------------------------------------------------------------ internals
    def _send(self, stream: UpdateStream, now: float) -> TaskStatus:
        sends = stream.sends
        if sends == 0:
            when = now + self._first_wait
            first_due = self._first_due
            if not first_due or when >= first_due[-1]:
                stream.due = when
                first_due.append(when)
                self._first_streams.append(stream)
            else:
                self._schedule(stream, when)
        else:
            self._schedule(stream, now + self.backoff.delay(sends))
        stream.sends = sends + 1
        self._sends_made += 1
        stream.sent = self._sends_made
        return stream[stream.start]

    def _schedule(self, stream: UpdateStream, when: float) -> None:
        stream.due = when
        heapq.heappush(self._resends, (when, next(self._seq), stream))

    def _current(self, when: float, stream: UpdateStream) -> bool:
        """Whether a queue entry still stands for its stream's next send
        (a stream acknowledged to its end, removed or cleared has no due)."""
        return stream.due == when and self._streams.get(stream.key) is stream
