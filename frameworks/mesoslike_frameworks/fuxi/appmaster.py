"""A Fuxi job's AppMaster process: the imperative shell of
:class:`~mesoslike_frameworks.fuxi.appmaster_core.AppMasterCore`.

The Fuxi service starts one per job::

    python -m mesoslike_frameworks.fuxi.appmaster --service tcp://127.0.0.1:5060 --job-id job-0001 \\
        --bind tcp://127.0.0.1:PORT --snapshot WORK/job-0001/snapshot.json --job WORK/job-0001/job.json

(``--job``: the job document as JSON; the service's token for the job in
``FUXI_AM_TOKEN``; ``--key`` its job's AppMaster key pair, ``--worker-key``
the job's workers' public key, ``--service-key`` the service's public key
when the service is authenticated) and starts it again — same port, same snapshot — when it
exits while the job runs. It binds a ROUTER for the job's workers
(:mod:`.worker`, :mod:`.am_protocol`) and connects a DEALER to the
service's job server (:mod:`.protocol`) — ``--service`` is its address,
or ``zk://HOSTS/PATH`` to follow the leading Fuxi service through
ZooKeeper. One thread, one loop:

- worker messages go into the core (HELLO -> ``worker_joined`` with what
  the worker runs and what it finished meanwhile, PROGRESS, DONE ->
  ``instance_done``, BYE or ~3 s without a heartbeat -> ``worker_left``),
  and the core's ``tick`` runs when its wakeup is due;
- the core's actions are protocol messages, carried out as they are: a
  ``ToWorker``'s ASSIGN or KILL goes to its worker, a ``ToService``'s
  request to the service, numbered and signed with the job's token (a
  RELEASE_SLOT also tells its worker RELEASE), ``SnapshotChanged`` makes a
  snapshot;
- the checkpoint (:mod:`.checkpoint`: the turn's changes appended to a
  journal with one fsync, a whole snapshot — written atomically — when the
  journal outgrows it) is written **before** the results that changed it
  are acknowledged to the workers, so a result is never lost between an
  AppMaster that died and one that starts from the snapshot and journal;
- the service's news of the job's slots, unasked: SLOT_GRANTED is kept
  (the slot's worker must then say HELLO for that unit and host),
  SLOT_REVOKED (preempted, lost) gives the slot's work to others at once
  (``worker_left``), without waiting for its heartbeats to stop;
- the core's progress report goes to the service (PROGRESS) when it
  changes, at most every 0.2 s, and at least every 2 s, with the slots of
  the workers it knows (``slots``: slot -> ``[unit, hostname, room, agent
  id]``): after a failover the new leader adopts them from it.

Authentication (docs/security.rst, "The Fuxi service"): with ``--key``
the workers' port is CURVE-encrypted and lets in only the job's workers'
key (``--worker-key``); the AppMaster reaches the service with its key, and
with ``--service-key`` talks to that service only.

Workers are held to what they are: a HELLO must carry the slot's token
(:func:`~.am_protocol.worker_token`; checked when the AppMaster has the
job's token), every other message must come over the connection that said
HELLO, and a DONE must name a run this AppMaster handed that worker (or
that the worker reported running when it joined). Nothing a peer sends —
junk, oversized fields, a frame that makes handling fail — stops the loop.

After JobEnded it sends JOB_ENDED until the service answers, then exits 0.
With ``--orphan-timeout S`` it outlives its service — a new one (restarted,
or a new leader) adopts it — and exits 3 only when no service answered for
S seconds; without it, it exits 3 as soon as the service that started it
is gone.
"""

from __future__ import annotations

import argparse
import collections
import hmac
import itertools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import msgspec

from mesoslike import Clock, MesoslikeError, SystemClock
from mesoslike_frameworks.fuxi import flush_before_os_exit
from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import appmaster_core as amc
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.checkpoint import Checkpoint, Writer, read_snapshot, write_snapshot
from mesoslike_frameworks.fuxi.model import MAX_NAME, JobSpec, JobSpecError, parse_job
from mesoslike.transport import (Authenticator, Client, CurveKeys, Poller, Server, Waker, flush_before_exit,
                                 load_public_key, parse_tcp_address)

__all__ = ["AppMaster", "main", "main_and_exit", "write_snapshot", "read_snapshot"]

log = logging.getLogger("mesoslike_frameworks.fuxi.appmaster")

#: the longest the loop sleeps (it also polls the service's socket)
POLL = 0.05
PROGRESS_MIN_INTERVAL = 0.2
PROGRESS_MAX_INTERVAL = 2.0
#: seconds between JOB_ENDED re-sends until the service answers
END_RESEND = 1.0
#: an ASSIGN the worker does not confirm (in its heartbeats) within this is sent again
ASSIGN_RESEND = 2.0
#: seconds an ACK that its checkpoint let go waits for the worker's next ASSIGN to carry it, before it goes
#: in a frame of its own (well within the worker's heartbeat, at which it says its unacknowledged results again)
ACK_CARRY = 0.1
#: seconds: while a unit's instances took under this on average, a worker gets its next one queued
#: (AppMasterCore's ``queue_below``; --queue-below)
QUEUE_BELOW = 1.0
#: seconds: a turn that took workers' frames is followed by the next no sooner than this after its start, so
#: that the results of that time share a turn (its checkpoint write, its wake-up) — an AppMaster that outranks
#: its workers on the CPU (the slots' small cpu shares) woke for every result, one at a time; a worker holds a
#: queued instance meanwhile (QUEUE_BELOW), so its slot does not wait for the turn
TURN_GAP = 0.01
#: what workers send
_FROM_WORKERS = (amp.Hello, amp.Heartbeat, amp.Progress, amp.Done, amp.Bye)
#: what a worker may act on only once the turn is checkpointed: an ACK lets it forget a result, a RELEASE
#: makes it exit (with the results it holds)
_AFTER_CHECKPOINT = (amp.Ack, amp.Release)
#: slots granted whose workers did not join yet, kept at most (a job's slots are fewer)
MAX_GRANTED = 100_000
_Request = TypeVar("_Request", bound=amc.ServiceRequest | protocol.Progress)


class _Worker:
    __slots__ = ("slot", "peer", "last_seen", "done_seen", "assigned", "runs", "claim")

    def __init__(self, hello: amp.Hello, peer: bytes, now: float) -> None:
        self.slot = hello.slot
        self.peer = peer
        self.last_seen = now
        self.done_seen: set[tuple[int, int]] = set()
        #: the ASSIGNs it has not confirmed yet (the one it runs, the one it holds queued) and when they were sent
        self.assigned: dict[tuple[int, int], tuple[amp.Assign, float]] = {}
        #: the runs handed to it (or that it ran when it joined): the only ones it may report done
        self.runs: set[tuple[int, int]] = set()
        #: how the service knows its slot again after a failover: [unit, hostname, room, agent id]
        self.claim = [hello.unit, hello.hostname, hello.room, hello.agent_id]


def _service_locator(service: str) -> Any:
    """What follows the service's leader (``mesoslike.make_locator``:
    ``zk://``, the leader of the services' group), or None for a ``tcp://``
    address, which never moves — checked as ``make_locator`` checks one (a
    ConfigError), without importing :mod:`mesoslike.ha` (~1.5-2 ms of the
    AppMaster's start)."""
    address = service.strip() if isinstance(service, str) else service
    if isinstance(address, str) and address.startswith("tcp://"):
        parse_tcp_address(address)
        return None
    from mesoslike import make_locator   # here: mesoslike.ha (attrs, re) only for zk://

    return make_locator(service)


class _Refused(Exception):
    """A worker's message refused: the ERROR's text (bounded)."""


class _Held:
    """What waits for a checkpoint write: messages to workers (ACK,
    RELEASE) and requests to the service, in the order they were made."""

    __slots__ = ("workers", "service")

    def __init__(self) -> None:
        self.workers: list[tuple[bytes, Any]] = []
        self.service: list[protocol.Message] = []


class AppMaster:
    """The loop of one job's AppMaster (:meth:`run`)."""

    def __init__(self, job_id: str, job: JobSpec, *, bind: str, service: str, token: str, snapshot: Path,
                 clock: Clock | None = None, heartbeat_timeout: float = amp.HEARTBEAT_TIMEOUT,
                 orphan_timeout: float | None = None, keys: CurveKeys | None = None,
                 worker_key: bytes | None = None, service_key: bytes | None = None,
                 queue_below: float = QUEUE_BELOW, turn_gap: float = TURN_GAP) -> None:
        if keys is not None and worker_key is None:
            raise MesoslikeError("an AppMaster with keys needs its workers' public key (--worker-key)")
        self.job_id = job_id
        self._keys, self._service_key = keys, service_key
        self.job = job
        self.token = token
        self.snapshot_path = Path(snapshot)
        self.clock = clock or SystemClock()
        self.heartbeat_timeout = heartbeat_timeout
        self.orphan_timeout = orphan_timeout
        self.checkpoint = Checkpoint(self.snapshot_path)   # the snapshot and its journal (checkpoint.py)
        self.core = self.checkpoint.restore(job_id, job, self.clock)
        self.core.queue_below = queue_below
        self.turn_gap = turn_gap
        #: when the last turn that took workers' frames started (time.monotonic; the gap is real time)
        self._busy_turn: float | None = None
        self.workers: dict[str, _Worker] = {}
        self.released: set[str] = set()
        #: slot -> (unit, hostname): granted, as the service said, its worker not joined yet
        self.granted: dict[str, tuple[str, str]] = {}
        self._locator = _service_locator(service)   # zk://: follows the leading service; tcp://: None
        leader = (self._locator.current() if self._locator is not None else service.strip()) or ""
        # binds now: errors surface here; with keys only the job's workers get in
        self._server = Server(bind, codec=amp.CODEC, keys=keys, authenticator=None if worker_key is None else
                              Authenticator({worker_key: f"workers of {job_id}"}))
        self.address = self._server.address
        self._service_address = leader
        self._service: Client | None = self._connect(leader) if leader else None
        self._last_answer = self.clock.now()
        self._ids = itertools.count(1)
        self._to_workers: list[tuple[bytes, Any]] = []
        self._to_service: collections.deque[protocol.Message] = collections.deque()
        self._dirty = False
        # the checkpoint is written by a thread of its own while the loop goes on; what must wait for it (ACK,
        # RELEASE, the requests to the service) waits in _held for the next write, in _saving for the one in flight
        self._waker = Waker()
        self._writer = Writer(self.checkpoint, self._waker.wake)
        self._held = _Held()
        self._saving = _Held()
        #: per worker's connection: the ACKs written and not sent yet, for its next ASSIGN to carry, and since when
        self._acks: dict[bytes, tuple[list[list[int]], float]] = {}
        # the service's socket too: its answers wake the loop (JOB_ENDED's answer ends the job at once, not at the
        # next poll's timeout), and a turn reads it only when it holds something (reading an empty socket — its
        # monitor, then its queue — was a tenth of a busy turn)
        self._poller = Poller([self._server, self._waker, *([self._service] if self._service is not None else [])])
        self._ended: protocol.JobEnded | None = None      # the core's JOB_ENDED, sent until answered
        self._end_request: protocol.JobEnded | None = None
        self._end_sent = 0.0
        self._end_acknowledged = False
        self._report: dict | None = None
        self._report_sent = -1e9
        self._parent = os.getppid()
        #: the core's next_wakeup() at the end of the last turn (None: none, or not known yet)
        self._wakeup: float | None = None

    def _connect(self, service: str) -> Client:
        """A connection to the service: with the job's key when it is authenticated (``service_key``)."""
        if self._service_key is None:
            return Client(service, codec=protocol.CODEC)
        return Client(service, codec=protocol.CODEC, keys=self._keys, server_key=self._service_key)

    # ------------------------------------------------------------ the loop
    def run(self) -> int:
        try:
            self._carry_out(self.core.restate())   # the scheduler may remember other desires, or no end
            self._flush()
            while True:
                self._turn()
                if self._ended is not None and self._end_acknowledged:
                    log.info("job %s ended and the service knows: exiting", self.job_id)
                    return 0
                if self._orphaned():
                    return 3
        finally:
            self.close()

    def close(self) -> None:
        """Let the checkpoint's write in flight end and its messages out, then close everything."""
        try:
            self._after_write(self._writer.wait(5.0))
        except Exception:  # noqa: BLE001 - closing goes on
            log.exception("the last checkpoint write failed")
        self._writer.close()
        for peer in list(self._acks):
            self._send_acks(peer)
        self._server.close(linger=0.5)   # let the last RELEASEs go out
        if self._service is not None:
            self._service.close()
        if self._locator is not None:
            self._locator.close()
        self.checkpoint.close()
        self._waker.close()

    def _turn(self) -> None:
        """One turn of the loop. What goes wrong in one part is logged and
        the loop goes on: no frame and no failure of one step stops it."""
        if self._busy_turn is not None:
            rest = self._busy_turn + self.turn_gap - time.monotonic()
            if rest > 0:
                time.sleep(rest)   # the workers' next results gather in the socket meanwhile (TURN_GAP)
        now = self.clock.now()
        # the core's next wakeup as the last turn left it (what ran since — the flush, the checkpoint's
        # preparation — changes nothing it depends on): one O(running) call a turn, not two
        wakeup = self._wakeup
        timeout = POLL if wakeup is None else min(POLL, max(0.0, wakeup - now))
        ready = self._poller.poll(timeout)
        self._busy_turn = None
        if self._server in ready:
            if self.turn_gap > 0:
                self._busy_turn = time.monotonic()
            for peer, frame in self._server.receive_frames():
                self._on_worker_frame(peer, frame)
        service = self._service
        if service is not None and service in ready:
            for _, answer in service.receive_frames():
                self._on_service_frame(answer)
        self._follow_service()
        now = self.clock.now()
        self._wakeup = None
        try:
            self._check_heartbeats(now)
            wakeup = self.core.next_wakeup()
            if wakeup is not None and wakeup <= now and self._ended is None:
                self._carry_out(self._core(self.core.tick))
                wakeup = self.core.next_wakeup()
            self._wakeup = wakeup
        except Exception:  # noqa: BLE001 - a bug must not restart the AppMaster (and cost its job a restart)
            log.exception("the AppMaster's turn failed; going on")
        try:
            self._flush()
        except Exception:  # noqa: BLE001 - as above; what could not go out goes at the next turn
            log.exception("sending failed; going on")

    def _orphaned(self) -> bool:
        if self.orphan_timeout is None:
            if os.getppid() != self._parent:
                log.error("the Fuxi service that started this AppMaster is gone: exiting")
                return True
            return False
        silence = self.clock.now() - self._last_answer
        if silence > self.orphan_timeout:
            log.error("no Fuxi service answered for %.0fs (--orphan-timeout): exiting", silence)
            return True
        return False

    def _follow_service(self) -> None:
        """Talk to the service the locator names now (a new leader, after a failover)."""
        leader = self._locator.current() if self._locator is not None else None
        if leader and leader != self._service_address:
            log.info("the Fuxi service is now at %s", leader)
            if self._service is not None:
                self._poller.unregister(self._service)
                self._service.close()
            self._service, self._service_address = self._connect(leader), leader
            self._poller.register(self._service)
            # the new leader knows nothing of this job's slots and desires until our report: at once,
            # not when the last one (sent to the dead leader) is PROGRESS_MAX_INTERVAL old
            self._report_sent = -1e9
            if self._end_request is not None:
                self._end_sent = -1e9   # say JOB_ENDED to the new one at once

    # ---------------------------------------------------------- workers
    def _on_worker_frame(self, peer: bytes | None, frame) -> None:
        if peer is None or not isinstance(frame, (bytes, bytearray)):
            log.warning("ignoring a malformed frame: %s", protocol.bounded(str(frame), 200))
            return
        try:
            message = amp.decode(bytes(frame))
            self._on_worker_message(peer, message)
        except amp.ProtocolError as exc:
            log.warning("a bad frame from a worker: %s", protocol.bounded(str(exc), 200))
            self._to_workers.append((peer, amp.Error(protocol.bounded(str(exc)))))
        except _Refused as exc:
            log.warning("refused a worker's message: %s", exc)
            self._to_workers.append((peer, amp.Error(str(exc))))
        except Exception as exc:  # noqa: BLE001 - a worker must not take the AppMaster down
            log.exception("handling a worker's message failed")
            self._to_workers.append((peer, amp.Error(protocol.bounded(f"internal error: {type(exc).__name__}: "
                                                                       f"{exc}"))))

    def _on_worker_message(self, peer: bytes, message) -> None:
        if not isinstance(message, _FROM_WORKERS):
            self._to_workers.append((peer, amp.Error(f"{message.TYPE} is not a message for the AppMaster")))
            return
        now = self.clock.now()
        slot = message.slot
        if len(slot) > MAX_NAME:
            raise _Refused(f"a slot id is at most {MAX_NAME} characters, got {len(slot)}")
        worker = self.workers.get(slot)
        if isinstance(message, amp.Hello):
            self._check_hello(message)
        elif worker is not None and worker.peer != peer:
            raise _Refused(f"{message.TYPE} for slot {slot} from a connection that is not its worker's")
        if slot in self.released:
            self._to_workers.append((peer, amp.Release()))
            return
        if isinstance(message, amp.Hello):
            self._hello(peer, message, worker, now)
            return
        if worker is None:
            if not isinstance(message, amp.Bye):
                self._to_workers.append((peer, amp.Rejoin()))   # a worker of the AppMaster before this one
            return
        worker.last_seen = now
        if isinstance(message, amp.Heartbeat):
            self._resend_assign(worker, message.running, message.queued, now)
        elif isinstance(message, amp.Progress):
            self._carry_out(self._core(self.core.progress, slot, message.instance, message.attempt,
                                       float(message.fraction)))
        elif isinstance(message, amp.Done):
            self._done(worker, message.instance, message.attempt, message.ok, message.message)
        elif isinstance(message, amp.Bye):
            del self.workers[slot]
            self._carry_out(self._core(self.core.worker_left, slot, message.reason or "worker stopped"))

    def _check_hello(self, hello: amp.Hello) -> None:
        """A HELLO is a worker of this job's unit, with the slot's token (when the AppMaster knows the job's)."""
        if hello.unit not in {unit.name for unit in self.job.units}:
            raise _Refused(f"unit {protocol.bounded(repr(hello.unit), 100)} is not a unit of job {self.job_id}")
        for field in ("hostname", "room", "agent_id"):
            if len(getattr(hello, field)) > MAX_NAME:
                raise _Refused(f"HELLO.{field} is at most {MAX_NAME} characters")
        if self.token and not hmac.compare_digest(hello.token.encode(),
                                                  amp.worker_token(self.token, hello.slot).encode()):
            raise _Refused(f"HELLO refused: not the worker of slot {hello.slot} (wrong token)")
        granted = self.granted.get(hello.slot)
        if granted is not None and granted != (hello.unit, hello.hostname):
            raise _Refused(f"HELLO refused: slot {hello.slot} was granted for unit {granted[0]} on {granted[1]}")

    def _hello(self, peer: bytes, hello: amp.Hello, worker: _Worker | None, now: float) -> None:
        finished = [(i, a, ok, msg) for i, a, ok, msg in hello.finished]
        if worker is None:
            running = tuple(hello.running) if hello.running is not None else None
            queued = tuple(hello.queued) if hello.queued is not None else None
            try:
                actions = self.core.worker_joined(hello.slot, hello.unit, hello.hostname, hello.room, running,
                                                  finished, queued)
            except (KeyError, ValueError, TypeError, MesoslikeError) as exc:
                self._to_workers.append((peer, amp.Error(protocol.bounded(f"HELLO refused: {exc}"))))
                return
            worker = self.workers[hello.slot] = _Worker(hello, peer, now)
            self.granted.pop(hello.slot, None)
            for run in (running, queued):
                if run is not None:
                    worker.runs.add((run[0], run[1]))
            worker.done_seen.update((i, a) for i, a, _, _ in finished)
            if finished:
                self._dirty = True   # acknowledged below: checkpoint what they changed first
            log.info("worker %s (%s on %s) joined%s", hello.slot, hello.unit, hello.hostname,
                     f", running instance {running[0]}" if running else "")
            self._to_workers.append((peer, amp.Welcome(hello.slot)))
            self._carry_out(actions)
        else:
            worker.peer, worker.last_seen = peer, now
            self._to_workers.append((peer, amp.Welcome(hello.slot)))
            for instance, attempt, ok, message in finished:
                self._done(worker, instance, attempt, ok, message)
            return
        for instance, attempt, _, _ in finished:
            self._to_workers.append((peer, amp.Ack(instance, attempt)))

    def _done(self, worker: _Worker, instance: int, attempt: int, ok: bool, message: str) -> None:
        key = (instance, attempt)
        if key not in worker.done_seen and key not in worker.runs:
            raise _Refused(f"DONE for instance {instance} attempt {attempt}, which slot {worker.slot} was not given")
        first = key not in worker.done_seen
        if first:
            worker.done_seen.add(key)
            worker.assigned.pop(key, None)
        # its ACK before what the result leads to — the slot's RELEASE, when it was the job's last: a worker
        # hears its result taken before it is told to exit (both wait for the write that holds the result)
        self._to_workers.append((worker.peer, amp.Ack(instance, attempt)))
        if first:
            self._carry_out(self._core(self.core.instance_done, worker.slot, instance, attempt, ok, message))
            self._dirty = True

    def _resend_assign(self, worker: _Worker, running: list | None, queued: list | None, now: float) -> None:
        """An ASSIGN the worker's heartbeats do not show (running or queued) within a while was lost: send it
        again."""
        for key, (assign, sent) in list(worker.assigned.items()):
            if list(key) == running or list(key) == queued or key in worker.done_seen:
                del worker.assigned[key]
            elif now - sent > ASSIGN_RESEND:
                worker.assigned[key] = (assign, now)
                self._to_workers.append((worker.peer, assign))

    def _check_heartbeats(self, now: float) -> None:
        for slot, worker in list(self.workers.items()):
            if now - worker.last_seen > self.heartbeat_timeout:
                log.info("worker %s: no heartbeat for %.1fs", slot, now - worker.last_seen)
                del self.workers[slot]
                self._carry_out(self._core(self.core.worker_left, slot,
                                           f"no heartbeat for {self.heartbeat_timeout:g}s"))

    def _core(self, method, *args) -> list:
        """A core call; what it raises (a bad value from a worker) is logged and yields no actions."""
        try:
            return method(*args)
        except (KeyError, ValueError, TypeError, MesoslikeError) as exc:
            log.warning("%s%r refused: %s", method.__name__, args, exc)
            return []

    # ------------------------------------------------------------ actions
    def _carry_out(self, actions: list[amc.Action]) -> None:
        for action in actions:
            if isinstance(action, amc.ToWorker):
                self._to_worker(action)
            elif isinstance(action, amc.ToService):
                self._to_the_service(action)
            else:
                self._dirty = True   # SnapshotChanged

    def _to_worker(self, action: amc.ToWorker) -> None:
        worker = self.workers.get(action.worker_id)
        message = action.message
        if worker is None:
            log.warning("%s to unknown worker %s dropped", message.TYPE, action.worker_id)
            return
        if isinstance(message, amp.Assign):
            key = (message.instance, message.attempt)
            worker.assigned[key] = (message, self.clock.now())
            worker.runs.add(key)
        else:
            worker.assigned.pop((message.instance, message.attempt), None)
            log.info("killing instance %d attempt %d on %s: %s", message.instance, message.attempt,
                     action.worker_id, action.reason)
        self._to_workers.append((worker.peer, message))

    def _to_the_service(self, action: amc.ToService) -> None:
        request = action.request
        if isinstance(request, protocol.JobEnded):
            if self._ended is None:
                self._ended = request   # sent by _flush, again until the service answers
                self._dirty = True
            return
        if isinstance(request, protocol.ReleaseSlot):
            worker = self.workers.pop(request.slot, None)
            self.released.add(request.slot)
            if worker is not None:
                self._to_workers.append((worker.peer, amp.Release()))
        elif isinstance(request, (protocol.BlacklistHost, protocol.ReportHost)):
            log.info("%s %s for job %s: %s", request.TYPE, request.host, self.job_id, action.reason)
        self._send(request)

    # -------------------------------------------------------- the outside
    def _send(self, request: _Request) -> _Request:
        """Queue ``request`` for the service, numbered and signed."""
        signed = msgspec.structs.replace(request, id=next(self._ids), token=self.token)
        self._to_service.append(signed)
        return signed

    def _flush(self) -> None:
        """Tell the workers their work, checkpoint, then acknowledge and
        release them and tell the service.

        An ASSIGN or a KILL goes out at once, so that a worker whose result
        this turn took starts its next instance while the disk writes: a
        crash before the fsync loses nothing, as the worker still holds the
        result (unacknowledged) and says what it runs when it joins the
        restarted AppMaster. The checkpoint is written by a thread of its
        own (:class:`~.checkpoint.Writer`), one write at a time: the loop
        goes on taking results and handing out instances meanwhile, and the
        changes of the turns that ran during a write go into the next. What
        lets a worker forget a result — its ACK, a RELEASE (it exits) — and
        the requests to the service wait for the write that holds the turn's
        changes."""
        now = self.clock.now()
        outgoing, self._to_workers = self._to_workers, []
        for peer, message in outgoing:
            if isinstance(message, _AFTER_CHECKPOINT):
                self._held.workers.append((peer, message))
            else:
                self._send_to_worker(peer, message)
        final = self._ended is not None and self._end_request is None
        if now - self._report_sent >= PROGRESS_MIN_INTERVAL or final:
            report = self._progress_report()
            if report != self._report or now - self._report_sent >= PROGRESS_MAX_INTERVAL or final:
                self._report, self._report_sent = report, now
                self._send(protocol.Progress(0, self.job_id, "", report))
        if self._ended is not None and (self._end_request is None or now - self._end_sent >= END_RESEND):
            self._end_request = self._send(self._ended)
            self._end_sent = now
        self._held.service.extend(self._to_service)
        self._to_service.clear()
        self._after_write(self._writer.outcome())
        if not self._writer.busy:
            self._start_write()
        for peer, (_, since) in list(self._acks.items()):
            if now - since >= ACK_CARRY:
                self._send_acks(peer)
        if self._service is not None:
            self._service.flush()   # what waited for the service's socket goes out as it takes it

    def _start_write(self) -> None:
        """The changes since the last write (none in flight): to the writer,
        with what waits for them; what waits for nothing goes out now."""
        write = None
        if self._dirty:
            try:
                write = self.checkpoint.prepare(self.core)
                self._dirty = False
            except Exception:  # noqa: BLE001 - tried again next turn; what waits for it waits on
                log.exception("cannot prepare the checkpoint of %s", self.snapshot_path)
                return
        if write is None:
            held, self._held = self._held, _Held()
            self._release(held, written=True)
            return
        self._saving, self._held = self._held, _Held()
        self._writer.submit(write)

    def _after_write(self, outcome: object) -> None:
        """A write ended (``outcome``: None, or its OSError): what waited for it goes out."""
        if outcome is Writer.BUSY:
            return
        if outcome is not None:
            # results are acknowledged only once checkpointed: their workers say them again, and the next
            # write is a whole snapshot
            log.error("cannot write the snapshot %s (%s): results stay unacknowledged", self.snapshot_path, outcome)
            self._dirty = True
        saving, self._saving = self._saving, _Held()
        self._release(saving, written=outcome is None)

    def _release(self, held: _Held, written: bool) -> None:
        for peer, message in held.workers:
            if isinstance(message, amp.Ack):
                if written:   # for the worker's next ASSIGN to carry (ACK_CARRY)
                    acks, since = self._acks.get(peer) or ([], self.clock.now())
                    acks.append([message.instance, message.attempt])
                    self._acks[peer] = (acks, since)
                continue
            self._send_acks(peer)   # (a RELEASE: the worker hears of every result first)
            self._send_to_worker(peer, message)
        # a lower desire before the slots it lets go: the scheduler never sees them as still wanted
        requests = sorted(held.service, key=lambda r: not isinstance(r, protocol.SetDesire))
        if self._service is None:
            return   # no service known yet (ZooKeeper names none): the next report says it all again
        for request in requests:
            try:
                if not self._service.send(request):
                    log.error("%s to the service dropped: its outbox is full", request.TYPE)
            except protocol.ProtocolError as exc:
                log.error("cannot send %s to the service: %s", request.TYPE, protocol.bounded(str(exc), 200))

    def _send_acks(self, peer: bytes) -> None:
        """The ACKs waiting for the worker's next ASSIGN, in frames of their own."""
        acks, _ = self._acks.pop(peer, ([], 0.0))
        for instance, attempt in acks:
            self._send_to_worker(peer, amp.Ack(instance, attempt))

    def _send_to_worker(self, peer: bytes, message: Any) -> None:
        """Queued while a worker reads slowly; a drop is counted and logged. An
        ASSIGN carries the worker's ACKs that wait (one frame an instance fewer)."""
        if isinstance(message, amp.Assign) and peer in self._acks:
            message = msgspec.structs.replace(message, acks=self._acks.pop(peer)[0])
        try:
            if not self._server.send(peer, message):
                log.warning("%s to worker %r dropped: it is gone or its outbox is full", message.TYPE, peer)
        except amp.ProtocolError as exc:
            log.error("cannot send %s to a worker: %s", message.TYPE, protocol.bounded(str(exc), 200))

    def _progress_report(self) -> dict:
        """The core's report, with the slots of the workers this AppMaster knows (for a new leader to adopt)."""
        report = self.core.progress_report()
        report["slots"] = {slot: worker.claim for slot, worker in sorted(self.workers.items())}
        return report

    def _on_service_frame(self, frame: bytes) -> None:
        self._last_answer = self.clock.now()
        try:
            answer = protocol.decode(frame)
        except protocol.ProtocolError as exc:
            log.warning("a bad answer from the service: %s", protocol.bounded(str(exc), 200))
            return
        if isinstance(answer, protocol.GRANT_NEWS):
            self._slot_news(answer)
            return
        if isinstance(answer, protocol.Error):
            if answer.message == protocol.STANDBY_REFUSAL:
                # ZooKeeper named it the leader before it took over: report again shortly
                log.debug("the service is not serving yet (request %d): reporting again", answer.id)
                self._report_sent = min(self._report_sent, self.clock.now() - PROGRESS_MAX_INTERVAL +
                                        PROGRESS_MIN_INTERVAL)
                return
            log.warning("the service refused request %d: %s", answer.id, answer.message)
        if self._end_request is not None and answer.id == self._end_request.id:
            self._end_acknowledged = True

    def _slot_news(self, news: protocol.SlotGranted | protocol.SlotRevoked) -> None:
        """What the service says of this job's slots, unasked."""
        if news.job_id != self.job_id or len(news.slot) > MAX_NAME:
            log.warning("ignoring %s for job %s", news.TYPE, protocol.bounded(news.job_id, 100))
            return
        if isinstance(news, protocol.SlotGranted):
            if news.slot not in self.workers and len(self.granted) < MAX_GRANTED:
                self.granted[news.slot] = (news.unit, news.hostname)
            log.debug("slot %s granted for %s on %s", news.slot, news.unit, news.hostname)
            return
        self.granted.pop(news.slot, None)
        self.released.add(news.slot)      # a worker that says HELLO after this is told RELEASE
        worker = self.workers.pop(news.slot, None)
        if worker is not None:
            self._carry_out(self._core(self.core.worker_left, news.slot, f"slot revoked: {news.reason}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mesoslike_frameworks.fuxi.appmaster",
                                     description="A Fuxi job's AppMaster (started by `mesoslike fuxi serve`).")
    parser.add_argument("--service", required=True,
                        help="the Fuxi service's job server, tcp://HOST:PORT, or zk://HOSTS/PATH to follow its leader")
    parser.add_argument("--orphan-timeout", type=float, default=None,
                        help="outlive the service; exit only when no service answered for this many seconds "
                             "(default: exit when the service that started it is gone)")
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--bind", required=True, help="where the job's workers connect, tcp://HOST:PORT")
    parser.add_argument("--snapshot", required=True, help="the snapshot file (JSON), read on start if present")
    parser.add_argument("--job", required=True, help="the job document (the parsed job file) as JSON")
    parser.add_argument("--heartbeat-timeout", type=float, default=amp.HEARTBEAT_TIMEOUT,
                        help="seconds without a heartbeat after which a worker is gone (default: %(default)s)")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--queue-below", type=float, default=QUEUE_BELOW,
                        help="seconds: while a unit's finished instances took under this on average, a worker "
                             "that runs one is handed its next one to start as it ends (0: never; default: "
                             "%(default)s)")
    parser.add_argument("--key", default=None,
                        help="the job's AppMaster key pair (appmaster.key_secret, mode 0600): serve the workers "
                             "encrypted, and reach the service as the job's AppMaster")
    parser.add_argument("--worker-key", default=None,
                        help="the public key (z85, or a certificate) of the job's workers: the only peers let in")
    parser.add_argument("--service-key", default=None,
                        help="the Fuxi service's public key (z85, or a certificate): talk to that service only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s %(levelname)s fuxi-appmaster {args.job_id} %(message)s")
    try:
        with open(args.job) as handle:
            job = parse_job(json.load(handle))
        keys = CurveKeys.load(args.key) if args.key else None
        appmaster = AppMaster(args.job_id, job, bind=args.bind, service=args.service,
                              token=os.environ.get("FUXI_AM_TOKEN", ""), snapshot=Path(args.snapshot),
                              heartbeat_timeout=args.heartbeat_timeout, orphan_timeout=args.orphan_timeout,
                              keys=keys, worker_key=load_public_key(args.worker_key) if args.worker_key else None,
                              service_key=load_public_key(args.service_key) if args.service_key else None,
                              queue_below=args.queue_below)
    except (OSError, ValueError, JobSpecError, MesoslikeError) as exc:
        log.error("cannot start: %s", exc)
        return 2
    log.info("job %s (%s): serving workers on %s", args.job_id, job.name, appmaster.address)
    return appmaster.run()


def main_and_exit() -> NoReturn:
    """:func:`main`, then out of the process without the interpreter's
    teardown (what the AppMaster imported — the protocols' classes
    and msgspec codecs, the core — took tens of ms of CPU to tear down, at
    the end of a round, on the cores its job's client still needs to see
    the end): its log flushed, what its sockets still hold (the workers'
    last RELEASEs, its server closed with a 0.5 s linger) given up to 0.6 s
    to go out (:func:`mesoslike.transport.flush_before_exit`; a plain exit
    did not wait for them), then ``os._exit`` with :func:`main`'s status.
    An exception out of :func:`main` leaves as before."""
    code = main()
    flush_before_os_exit()
    flush_before_exit(0.6)
    os._exit(code)


if __name__ == "__main__":
    main_and_exit()
