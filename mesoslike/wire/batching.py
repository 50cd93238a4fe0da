"""Batching on the wire: several messages of a loop turn in one frame.

A task crossed the master in 13 frames (issue 14), each paying a receive or
send, a decode or encode and the transport's bookkeeping. A runtime that
collects what its core wants to send during a turn hands it to
:func:`batched`, which puts each peer's *consecutive* messages of one kind
into one batch message (:class:`~mesoslike.wire.messages.StatusUpdates`,
``Updates``, ``Acknowledgements``, ``StatusUpdateAcks``, ``RunTasks`` of one
framework), at most :data:`SEND_BATCH` to a frame (a receiver takes up to
:data:`~mesoslike.wire.messages.MAX_BATCH`),
for peers that said they accept batches. The receiving core hands a batch to
:func:`unbatched` and handles each item exactly as the message it stands for,
in order, with every check (who may send it, duplicates, acknowledgements):
a batch changes how many frames carry the messages, never what they say or
their order on the connection. :func:`batch_frames` encodes one, split in
halves while a frame would be over the codec's limit.

Pure: no I/O. O(messages).
"""

from __future__ import annotations

from typing import Callable, Hashable, Iterable, TypeVar

from mesoslike.wire import messages as m
from mesoslike.wire.codec import WireError

__all__ = ["batched", "batched_messages", "unbatched", "batch_frames", "BATCH_TYPES", "SEND_WITHIN", "SEND_BATCH"]

Peer = TypeVar("Peer", bound=Hashable)

#: a runtime collecting a turn's messages sends what it has once the oldest
#: waited this long (seconds), or a batch is full: a turn can be long (an
#: agent checkpointing 5,000 launches), and a peer hearing nothing for
#: seconds takes the sender for gone — any message is a sign of life
SEND_WITHIN = 0.05

#: the most messages a sender puts in one batch frame (a receiver takes up to
#: :data:`~mesoslike.wire.messages.MAX_BATCH`): a frame of 250 status
#: updates is ~67 KB, under the C allocator's 128 KB threshold for memory of
#: its own (mmap). A frame of 1,000 (~270 KB) cost every copy of it — the
#: encoder's frame, ZeroMQ's, the receiver's — fresh pages: encoding took
#: 0.55-0.58 µs an update against 0.19 at 250, decoding 0.84 against 0.54
#: (docs/performance.rst, "Stop 14: the control plane (ctl29g)")
SEND_BATCH = 250

#: the batch message types, and what each carries
BATCH_TYPES: dict[type, type] = {m.StatusUpdates: m.StatusUpdate, m.Updates: m.Update,
                                 m.Acknowledgements: m.Acknowledge, m.StatusUpdateAcks: m.StatusUpdateAck,
                                 m.RunTasks: m.RunTask}

_SINGLE = frozenset({m.StatusUpdate, m.Update, m.Acknowledge, m.StatusUpdateAck, m.RunTask})


def _kind(message: object) -> object:
    """What a message can be batched with (None: nothing). RUN_TASKs of one
    framework only: the batch carries the framework once."""
    cls = type(message)
    if cls is m.RunTask:
        return (m.RunTask, message.framework)  # type: ignore[attr-defined]
    return cls if cls in _SINGLE else None


def _batch(items: list[object]) -> object:
    """One batch message of ``items`` (1 to MAX_BATCH messages of one kind)."""
    first = items[0]
    if len(items) == 1:
        return first   # no envelope for one
    if isinstance(first, m.StatusUpdate):
        return m.StatusUpdates(items)  # type: ignore[arg-type]
    if isinstance(first, m.Update):
        return m.Updates([item.status for item in items])  # type: ignore[attr-defined]
    if isinstance(first, m.Acknowledge):
        return m.Acknowledgements(items)  # type: ignore[arg-type]
    if isinstance(first, m.StatusUpdateAck):
        return m.StatusUpdateAcks(items)  # type: ignore[arg-type]
    assert isinstance(first, m.RunTask)
    return m.RunTasks(first.framework, [item.task for item in items])  # type: ignore[attr-defined]


def batched(sends: Iterable[tuple[Peer, object]], accepts_batches: Callable[[Peer], bool],
            limit: int = SEND_BATCH) -> list[tuple[Peer, object]]:
    """``sends`` ((peer, message) in the order they were made) with each
    peer's consecutive batchable messages of one kind put into batches of at
    most ``limit``, where ``accepts_batches(peer)``. Each peer's messages
    keep their order; a batch goes where its first message was. O(n)."""
    if not 1 <= limit <= m.MAX_BATCH:
        raise ValueError(f"a batch limit is 1 to {m.MAX_BATCH}, got {limit!r}")
    out: list[tuple[Peer, object]] = []
    open_runs: dict[Peer, tuple[object, list[object]]] = {}   # peer -> (kind, items)
    asked: dict[Peer, bool] = {}
    single, run_task = _SINGLE, m.RunTask
    for peer, message in sends:
        # (_kind inlined: the master batches seven to ten messages a task through here)
        cls = type(message)
        if cls not in single:
            open_runs.pop(peer, None)   # a message of another kind ends the peer's run
            out.append((peer, message))
            continue
        kind = (cls, message.framework) if cls is run_task else cls  # type: ignore[attr-defined]
        run = open_runs.get(peer)
        if run is not None:   # (a peer with a run takes batches: asked when it began)
            if run[0] == kind and len(run[1]) < limit:
                run[1].append(message)
                continue
        else:
            accepts = asked.get(peer)
            if accepts is None:
                accepts = asked[peer] = accepts_batches(peer)
            if not accepts:
                out.append((peer, message))
                continue
        items: list[object] = [message]
        open_runs[peer] = (kind, items)
        out.append((peer, items))   # a placeholder: made a message below
    return [(peer, _batch(item) if type(item) is list else item) for peer, item in out]


def batched_messages(messages: list[object], accepts_batches: bool) -> list[object]:
    """:func:`batched` for the messages of one peer (an agent's or a
    driver's turn, for its master)."""
    if not accepts_batches or len(messages) < 2:
        return messages
    # (what batched() does for one peer, without its peers' bookkeeping: one to three of these a task)
    out: list[object] = []
    run: list[object] = []
    run_kind: object = None
    limit = SEND_BATCH
    for message in messages:
        kind = _kind(message)
        if kind is not None and kind == run_kind and len(run) < limit:
            run.append(message)
            continue
        if run:
            out.append(_batch(run))
        if kind is None:   # a message of another kind ends the run
            out.append(message)
            run, run_kind = [], None
        else:
            run, run_kind = [message], kind
    if run:
        out.append(_batch(run))
    return out


def unbatched(message: object) -> list[object]:
    """The messages a batch stands for, in order (``[message]`` for any
    other message)."""
    cls = type(message)
    if cls is m.StatusUpdates:
        return list(message.updates)  # type: ignore[attr-defined]
    if cls is m.Updates:
        return [m.Update(status) for status in message.statuses]  # type: ignore[attr-defined]
    if cls is m.Acknowledgements:
        return list(message.acknowledgements)  # type: ignore[attr-defined]
    if cls is m.StatusUpdateAcks:
        return list(message.acks)  # type: ignore[attr-defined]
    if cls is m.RunTasks:
        return [m.RunTask(message.framework, task) for task in message.tasks]  # type: ignore[attr-defined]
    return [message]


def batch_frames(message: object, encode: Callable[[object], bytes]) -> list[bytes]:
    """The frame(s) of ``message``: one, unless it is a batch whose frame
    would be over the codec's limit — then the frames of its halves, and so
    on (a single message too large raises the codec's error, as ever).
    O(size x log items) in the worst case."""
    try:
        return [encode(message)]
    except WireError:
        items = unbatched(message)
        if len(items) < 2:
            raise
    middle = len(items) // 2
    out: list[bytes] = []
    for half in (items[:middle], items[middle:]):
        out += batch_frames(_batch(half), encode)
    return out
