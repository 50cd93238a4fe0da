"""The master process: a ZeroMQ ROUTER loop feeding :class:`MasterCore`,
plus the HTTP endpoints, and — with ZooKeeper — leader election.

A standalone master leads from the start. With ``zk`` it contends in the
ZooKeeper group; what it may do at each moment is decided by its
:class:`~mesoslike.master.leadership.Leadership` machine (docs/ha.rst shows
its table), which this runtime feeds with events and whose actions it carries
out. The runtime keeps the I/O: the socket, the registry store, ZooKeeper's
callbacks (handed over to the loop thread-safely), HTTP.

Threads: the loop (:meth:`MasterRuntime.run`); kazoo's and the contender's
threads, which only hand events over (:meth:`MasterRuntime._hand_over`) and
silence the master at once; the HTTP server's threads, which make operator
writes under ``_lock`` and take ``/state`` snapshots under it (rendered
outside it); one thread that answers GET_STATE the same way.

Registry writes are group-committed, as Mesos's registrar does: one write
at a time, and what changed while it was on its way goes in the next one.
A turn's answers wait until the registry holds the changes made up to the
end of that turn (they may acknowledge them), and go out in order; the loop
does not wait: it handles the next frames meanwhile. A store that is slow
(ZooKeeper: ``asynchronous``) is written by a thread of its own, which
wakes the loop when it is done; the memory and file stores are written in
the loop, at once.

A registry write that fails (a full disk) stops the master from answering
until a write succeeds: the answers of the turns whose changes are not
written are held, no new frame is handled, and the write is tried again
with backoff (docs/reliability.rst, *Bounds*). ``/metrics`` reports the
longest loop stall.
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import logging
import math
import threading
import time
import uuid
from collections import OrderedDict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Iterator, Sequence

import attrs

from mesoslike import __version__
from mesoslike.clock import Clock, SystemClock
from mesoslike.backoff import Backoff
from mesoslike.master.core import MasterCore, Send
from mesoslike.advertise import advertised_ip, check_advertise_ip, url_host
from mesoslike.master.forked import ForkFailed, stream_forked
from mesoslike.master.shared_stream import SharedStream
from mesoslike.http_server import Request, Response, json_response
from mesoslike.json_chunks import json_chunks
from mesoslike.master.http import Fresh, StatusHTTPServer
from mesoslike.master.http_auth import HTTPAuthorization
from mesoslike.master.metrics import MasterMetrics
from mesoslike.master.v1_api import OPERATOR_PATHS, SCHEDULER_PATH, V1API, is_v1_peer
from mesoslike.v1.operator import MESOS_VERSION
from mesoslike.v1.shapes import call_body_limit, master_info_message
from mesoslike.master.receipts import receipt_key
from mesoslike.master.inbox import Inbox
from mesoslike.master.leadership import (Action, BuildCore, Commit, ConfirmLeadership, CoreBuilt, Demoted, Drop,
                                         ElectionWon, Event, Leadership, LoadRegistry, Peers, Phase, PutAside,
                                         Refuted, RegistryLoaded, RegistryUnreadable, Resume, RetryLoading, Serve,
                                         Stored, Tick, TurnEnded, TurnStarted, Unsent, ZnodeChanged, Confirmed,
                                         Fenced)
from mesoslike.master.operator import PERMISSIONS, OperatorWrites
from mesoslike.master.sandbox_files import SandboxReads
from mesoslike.master.records import clip
from mesoslike.master.registry import Registry
from mesoslike.master.roles import RolesConfig
from mesoslike.master.roles_watcher import RolesWatcher
from mesoslike.master.settings import MasterSettings, check_secure
from mesoslike.master.state import render_state, snapshot
from mesoslike.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from mesoslike.observations import NOTICE
from mesoslike.master.storage import MemoryRegistryStore, RegistryFencedError, RegistryStore, RegistryWriteError
from mesoslike.transport import Authenticator, Server, Waker
from mesoslike.wire import MasterInfo, WireError
from mesoslike.wire import messages as m
from mesoslike.wire.batching import batch_frames, batched
from mesoslike.wire.codec import CODEC, sized
from mesoslike.young_collections import YOUNG_PASS_EVERY, pass_over_young_objects_less_often

if TYPE_CHECKING:
    from mesoslike.ha.url import ZkUrl
    from mesoslike.ha.registry_store import RegistryMirror
    from mesoslike.ha.zookeeper import MasterContender

__all__ = ["MasterRuntime"]

log = logging.getLogger("mesoslike.master")

#: messages handled per loop turn before time-driven work gets its turn
_BATCH = 2000
#: bytes of frames other than registrations handled per loop turn (at least one frame) before the turn's
#: answers go out: a frame may be a batch of 1,000 updates, and 2,000 of them in one turn held every
#: answer back until all were handled — the peers waited idle meanwhile, and the agents' updates were
#: retried (0.5 s) before their acknowledgements could come. 256 KiB is ~850 status updates.
#: Registrations are still counted by _BATCH only: after a failover they come by the thousand
_TURN_BYTES = 256 * 1024
#: a turn that handled frames of fewer bytes than this is followed by a wait of up to turn_spacing
#: (MasterRuntime._space_turns): ~200 updates of a real agent's; the control plane's turns are of ~250 KiB
_SMALL_TURN_BYTES = 64 * 1024
#: ... and only a turn that handled at least this many frames: a turn of one frame is a request another
#: hop waits on (a lone task's subscription, launch, updates and acknowledgements each wait on the one
#: before), which the spacing delayed at every hop — a one-task `run` on `local` took 259 ms against 179
#: with this rule (docs/performance.rst, "One frame, no wait"); while many tasks are in flight, frames from
#: several peers come to each turn
_SPACED_TURN_FRAMES = 2
#: re-admitted agents whose task records an idle turn makes (~25 us an agent of ten tasks: ~25 ms)
_SETTLED_A_TURN = 1000
#: frames taken from the socket into the inbox per turn (not decoded: cheap)
_RECEIVE_LIMIT = 20_000
#: the most the inbox holds, in frames and in bytes: at either, nothing more is taken from the socket until
#: turns have handled some, so a peer sending faster than the master handles fills ZeroMQ's queues (which
#: push back on it and are read fairly between peers) instead of the master's memory; nothing is dropped.
#: 20,000 frames are ten turns of _BATCH; 64 MiB are 256 turns of _TURN_BYTES, and one frame of the largest
#: the master takes by default (--max-message-size): the frame that reaches the bound is held whole
_INBOX_FRAMES = 20_000
_INBOX_BYTES = 64 * 1024 * 1024
#: how long a follower trusts what it last read from ZooKeeper about the leader (s)
_LEADER_INFO_TTL = 1.0
#: seconds between attempts of an elected master to read a registry it could not read
_OFFICE_RETRY = 0.5
#: the longest the loop waits without looking at the clock (s)
_IDLE_WAIT = 1.0
#: a standby refreshes its copy of the registry at most this often (s): the changed znodes of a burst
#: of writes are read once
_MIRROR_SETTLE = 0.5
#: and after a failed refresh, tries again after this long (s)
_MIRROR_RETRY = 2.0
#: retries of a failed registry write: the first after 0.1 s, doubling up to 5 s (docs/reliability.rst, "Retries")
STORE_BACKOFF = Backoff(0.1, 5.0, jitter=0.0)
#: while registry writes keep failing, say so again this often (s)
_STORE_REMINDER = 60.0
#: registrations remembered, by their length and hash, for recognising retries (see _retried_registration;
#: ~150 bytes each); the oldest go first
_REGISTRATION_DIGESTS_KEPT = 200_000
#: peers waiting for a GET_STATE answer at most; more get an ERROR
_STATE_ASKERS = 1000


class LongLivedObjects:
    """Keeps the master's long-lived objects out of the collector's full
    passes: after each full collection its survivors are frozen
    (``gc.freeze``). A full collection scans every tracked object; with
    200,000 tasks that took 1-6 s holding the GIL — in whichever thread set
    it off, often one rendering ``/state`` — and the loop waited (issue 14:
    the longest loop stall at 50,000 tasks with 10 ``/state`` readers fell
    from 2.7 s to 0.34 s). Frozen objects are still freed by reference
    counting; only cycles among them wait, until the frozen set has doubled:
    then it is thawed once and the next full collection takes them — up to
    THAW_UP_TO frozen objects: past that a full pass holds the GIL for
    seconds (100,000 agents and 1,000,000 tasks make ~10M objects), so a
    master that large never thaws, and cycles among its long-lived objects
    stay (the master makes few: its records are trees). Once past it the
    frozen set is not counted again either: ``gc.get_freeze_count`` walks
    the whole set (6 % of the master's samples during admission at 100,000
    agents). O(1) per turn."""

    THAW_FROM = 1_000_000   # frozen objects below which no thaw is worth a full pass
    THAW_UP_TO = 2_000_000  # frozen objects above which a full pass costs too long a stall
    #: container objects allocated (net) between two passes over the young generation
    #: (:mod:`mesoslike.young_collections` says why)
    YOUNG_PASS_EVERY = YOUNG_PASS_EVERY
    #: a turn that admitted at least this many agents has its young objects frozen at its end, once a
    #: young pass is due (:meth:`turn_ended`)
    FREEZE_AFTER_ADMITTING = 100

    def __init__(self) -> None:
        self.full_collections = gc.get_stats()[2]["collections"]
        self.frozen_at_thaw = 0
        self.may_thaw = True   # False once the frozen set was past THAW_UP_TO
        #: turns whose young objects were frozen (turn_ended)
        self.turns_frozen = 0

    def start(self) -> None:
        """Set the young generation's threshold for this process (not lower than it is already; 0, the
        collector off, stays off)."""
        pass_over_young_objects_less_often(self.YOUNG_PASS_EVERY)

    def turn_ended(self, admitted: int) -> None:
        """Called at the end of a turn that admitted ``admitted`` agents,
        the collector still off. Once a young pass is due, a turn of
        admissions has its young objects frozen instead: they are the agents'
        and their tasks' records (~125 objects an agent with 10 tasks), which
        live as long as the agents. After a failover every agent is admitted
        again; the passes due would traverse every record and free none —
        the young pass every 50,000 of them, the middle one every ten of
        those, and a full one over all of them (seconds at 100,000 agents,
        holding the GIL). Frozen (O(1)) they are out of every pass, still
        freed by their reference counts; a cycle among them waits for a
        thaw, as the survivors of a full collection do."""
        if admitted >= self.FREEZE_AFTER_ADMITTING and gc.get_count()[0] >= self.YOUNG_PASS_EVERY:
            gc.freeze()
            self.turns_frozen += 1

    def after_turn(self) -> None:
        full = gc.get_stats()[2]["collections"]
        if full == self.full_collections:
            return
        self.full_collections = full
        if self.may_thaw:
            frozen = gc.get_freeze_count()   # O(frozen objects)
            if frozen > self.THAW_UP_TO:
                self.may_thaw = False
            elif frozen > max(2 * self.frozen_at_thaw, self.THAW_FROM):
                gc.unfreeze()
                self.frozen_at_thaw = frozen
                return
        gc.freeze()


@attrs.define
class StoreHealth:
    """Registry writes that failed (not fenced): since when, how often, and
    when to try again. While ``failing``, the master answers nothing."""

    failing_since: float | None = None
    reason: str = ""
    failures: int = 0
    retry_at: float = 0.0
    reminded_at: float = 0.0

    @property
    def failing(self) -> bool:
        return self.failing_since is not None


@attrs.define
class RegistryWrite:
    """A registry write on its way: ``core``'s changes up to ``upto``."""

    core: MasterCore
    upto: int
    outcome: Future   # of the changes stored (write_prepared's result)


class _StateDocument:
    """A rendered /state document and its encodings, made once for every
    caller that shares it (read-only)."""

    def __init__(self, document: dict) -> None:
        self.document = document

    @functools.cached_property
    def http_body(self) -> bytes:
        return json.dumps(self.document, indent=1).encode()

    @functools.cached_property
    def compact(self) -> str:
        return json.dumps(self.document)


class MasterRuntime:
    """Runs a master as ``settings`` say (:class:`~mesoslike.master.settings.MasterSettings`).

    ``self.bound_address`` is the address bound, ``self.address`` what
    peers are told. ``registry_store``: where a standalone master keeps its
    registry (memory by default; with ``settings.zk`` it lives in
    ZooKeeper). The roles settings apply whenever this master takes the
    lead; when they came from a file, the file is read again on
    :meth:`reload_roles` and when it changes. ``clock``: time for the core
    and the loop (the system's by default).
    """

    def __init__(self, settings: MasterSettings | None = None, *, clock: Clock | None = None,
                 registry_store: RegistryStore | None = None) -> None:
        settings = settings or MasterSettings()
        self.settings = settings
        address, zk, credentials, keys = settings.address, settings.zk, settings.credentials, settings.keys
        self.clock = clock or SystemClock()
        if settings.advertise_ip:
            check_advertise_ip(settings.advertise_ip)   # before binding anything
        check_secure(address, credentials, keys, settings.insecure)
        #: principals, ACLs and HTTP tokens; None: an anonymous cluster (loopback only unless insecure)
        self.credentials = credentials
        #: the receipts' key (mesoslike.master.receipts): masters sharing the key pair share it
        self._receipt_key = receipt_key(keys.secret) if keys is not None else None
        #: who may use HTTP (the v1 APIs identify their callers themselves: mesoslike.v1.identity)
        self.http_authorization = HTTPAuthorization(credentials, settings.http_auth, permissions=PERMISSIONS,
                                                    exempt={SCHEDULER_PATH, *OPERATOR_PATHS})
        self.config = settings.config
        self._zk = zk
        self._zk_session_timeout = settings.zk_session_timeout
        self._turn_end = self.clock.now()
        #: settings.turn_spacing, and when the last turn that handled frames woke (time.monotonic: the
        #: machine's pace, not the core's clock)
        self._turn_spacing = settings.turn_spacing
        self._busy_turn_at = -math.inf
        #: bytes and count of the frames handled by the turn under way (_handle_messages)
        self._bytes_this_turn = 0
        self._frames_this_turn = 0
        #: peer -> (length, hash) of the last REGISTER/REREGISTER_AGENT frame from it (see
        #: _retried_registration), the _REGISTRATION_DIGESTS_KEPT most recent (a new leader's 100,000
        #: agents' retries come after tens of thousands of other registrations: kept whole, the frames
        #: would take ~400 MB). Hashed as it is remembered, just decoded and still in the cache: the
        #: 10,000 latest frames were once kept whole and hashed as they made way, ~1 us an agent more
        #: in the storm (failover30q), each frame read back from memory long after its decoding
        self._registration_digests: OrderedDict[bytes, tuple[int, int]] = OrderedDict()
        #: answers held until the registry holds the changes they acknowledge (see _commit):
        #: (the core's registry changes at the end of their turn, the answers), oldest first
        self._held: deque[tuple[int, tuple[Send, ...]]] = deque()
        #: the registry write on its way (one at a time), and the thread that writes an asynchronous store
        self._writing: RegistryWrite | None = None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="master-registry")
        self._store_health = StoreHealth()
        #: registry writes that failed (not fenced), for /metrics
        self.registry_write_failures = 0
        #: /metrics: the loop's stalls and the core's handling times, and what they read at a scrape
        self.metrics = MasterMetrics(self)
        self._long_lived = LongLivedObjects()
        #: /state and GET_STATE: rendered from a snapshot outside _lock, one rendering at a time
        self._state_view: Fresh[_StateDocument] = Fresh(self._render_state)
        #: the same, rendered in a forked child (mesoslike.master.forked: the loop waits for the fork
        #: only, not for the GIL while a thread renders) — GET /state streamed to every reader that
        #: asked before the fork; GET_STATE over ZeroMQ whole (one message)
        self._state_stream = SharedStream(lambda: self._state_pieces(indent=1), name="/state rendering")
        self._state_compact: Fresh[bytes] = Fresh(lambda: self._render_state_bytes(indent=None))
        self._state_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="master-state")
        self._state_askers: list[bytes] = []
        self._askers_lock = threading.Lock()
        #: frames taken from the socket, not handled yet
        self._inbox = Inbox()
        #: what the loop sends at its next turn as leader (operator writes, the roles file)
        self._outbox: list[Send] = []
        self._leader_cache: tuple[float, dict[str, str]] = (float("-inf"), {})
        #: (when read, the HA group's members): /state's ``masters``, read at most once per _LEADER_INFO_TTL
        self._members_cache: tuple[float, list[dict]] = (float("-inf"), [])
        self._leader_cache_lock = threading.Lock()  # the HTTP thread asks too
        self._store = registry_store or MemoryRegistryStore()
        self._last_core: MasterCore | None = None   # the core that served last (its agents' connections)
        self._cores_built = 0   # the term of the next core's offer ids (MasterCore's ``term``)
        registry = self._store.load() if zk is None else None  # bad: stop before binding
        self._server = Server(address, codec=sized(CODEC, self.config.max_message_size), keys=keys,
                              authenticator=None if credentials is None else
                              Authenticator(credentials.principal_of_key()))
        self.bound_address = self._server.address
        host, _, bound_port = self.bound_address[len("tcp://"):].rpartition(":")
        #: what peers are told to connect to (ZooKeeper, /state, MasterInfo): never a wildcard
        advertised = url_host(advertised_ip(host, settings.advertise_ip))
        self.address = f"tcp://{advertised}:{bound_port}"
        #: guards the core (the loop and the HTTP threads use it); notified
        #: whenever the registry is written or a core is dropped
        self._lock = threading.RLock()
        self.stored = threading.Condition(self._lock)
        self._operator = OperatorWrites(self)
        #: Mesos's v1 HTTP APIs (docs/mesos-api.rst): a second front end on the same core
        self._v1 = V1API(self, reads_need_auth=credentials is not None and settings.http_auth == "all")
        self._http: StatusHTTPServer | None = None
        try:
            if settings.http_port is not None:
                self._http = StatusHTTPServer(host, settings.http_port, {
                    "/health": lambda: ("application/json", json.dumps(self._health()).encode()),
                    "/metrics": lambda: (METRICS_CONTENT_TYPE, self.metrics.exposition()),
                    **self._operator.views,
                }, actions=self._operator.actions, workers=self.config.http_workers,
                    timeout=self.config.http_timeout, max_connections=self.config.http_max_connections,
                    tls=settings.http_tls, authorize=self.http_authorization.authorize,
                    handlers={"/state": self._serve_state, **self._v1.handlers, **SandboxReads(self).handlers},
                    body_limits={SCHEDULER_PATH: call_body_limit(self.config.max_message_size)})
        except Exception:
            self._server.close()
            raise
        self.http_address = f"{'https' if settings.http_tls else 'http'}://{advertised}:{self._http.port}" if self._http else ""
        self.info = MasterInfo(settings.master_id or uuid.uuid4().hex[:8], self.address, self.http_address, __version__)
        self._waker = Waker()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._roles = RolesWatcher(settings.roles, self.clock)
        #: events from ZooKeeper's threads, not yet fed to the machine (under _handover)
        self._pending: list[Event] = []
        self._handover = threading.Lock()
        #: set while the machine leads and no handed-over event is pending:
        #: ZooKeeper's threads clear it, so a demoted master says not one more word
        self._acting = threading.Event()
        self._contender: MasterContender | None = None
        #: a standby's copy of the registry (settings.standby_mirror), and the thread that keeps it current
        self._mirror: RegistryMirror | None = None
        self._mirror_thread: threading.Thread | None = None
        self._mirror_stop = threading.Event()
        if registry is not None:
            core = self._new_core(registry)
            self._leadership: Leadership[MasterCore] = Leadership.standalone(core)
            self._acting.set()
            self._outbox += self._roles.apply(core)  # before the loop runs: no offer before the roles
            self._log_leads(core, logging.INFO)
        else:
            assert zk is not None
            stall_after = min(0.25, settings.zk_session_timeout / 6)
            self._leadership = Leadership(hold_for=settings.zk_session_timeout, stall_after=stall_after,
                                          retry_every=_OFFICE_RETRY)
            self._contend(zk, settings.zk_session_timeout)
            if settings.standby_mirror:
                self._start_mirror(zk)

    # ------------------------------------------------------------ leadership
    def _contend(self, zk: ZkUrl, session_timeout: float) -> None:
        from mesoslike.ha.zookeeper import MasterContender  # kazoo only for HA masters

        info: dict = {"id": self.info.id, "address": self.address, "http_address": self.http_address,
                      "version": __version__}
        if self.http_address:
            # Mesos's MasterInfo JSON, as Mesos's clients (pymesos's zk:// detector) read the group: its
            # address is where Mesos's API is, the HTTP one; ours is kept under mesoslike_address
            info = {**master_info_message(self.info, http=True), "version": MESOS_VERSION,
                    "mesoslike_address": self.address, "http_address": self.http_address,
                    "mesoslike_version": __version__}
        self._contender = MasterContender(zk, info, on_elected=lambda: self._hand_over(ElectionWon()),
                                          on_demoted=self._on_demoted, session_timeout=session_timeout,
                                          on_znode=lambda znode: self._hand_over(ZnodeChanged(znode)),
                                          session_guard=self.settings.zk_session_guard)
        try:
            self._contender.start()
        except Exception:
            self._close()
            raise

    def _start_mirror(self, zk: ZkUrl) -> None:
        from mesoslike.ha.registry_store import RegistryMirror

        assert self._contender is not None
        self._mirror = RegistryMirror(self._contender.client, zk.path, timeout=self._registry_timeout)
        self._mirror_thread = threading.Thread(target=self._keep_mirror, name="master-registry-mirror", daemon=True)
        self._mirror_thread.start()

    @property
    def _registry_timeout(self) -> float:
        # a large read or write on a loaded ZooKeeper may take seconds: wait for it as long as for the session
        return max(10.0, self._zk_session_timeout)

    def _keep_mirror(self) -> None:
        """The mirror's thread: while this master follows, keep its copy of
        the registry current — at most one refresh per _MIRROR_SETTLE, so that
        a leader writing every turn costs the standby one read of each
        changed znode per interval, not per write."""
        mirror = self._mirror
        assert mirror is not None
        stop = self._mirror_stop
        while not stop.is_set():
            if self._leadership.phase is Phase.FOLLOWER:
                try:
                    if mirror.refresh() == 0:   # quiet: have the registry assembled before an election
                        mirror.prepare()
                except Exception as exc:   # ZooKeeper away, or a bug: the election reads the registry itself
                    if not stop.is_set():
                        log.warning("standby: could not mirror the registry (again in %gs): %s", _MIRROR_RETRY, exc)
                    stop.wait(_MIRROR_RETRY)
                    continue
            mirror.changed.wait(_IDLE_WAIT)
            stop.wait(_MIRROR_SETTLE)

    def _on_demoted(self, reason: str) -> None:  # kazoo's thread: stop acting now
        self._hand_over(Demoted(reason))
        log.warning("master %s is no longer the leader (%s)", self.info.id, reason)

    def _hand_over(self, event: Event) -> None:
        """From ZooKeeper's threads: silence the master at once, give the
        loop the event, wake it. Never blocks on the loop."""
        with self._handover:
            self._pending.append(event)
            self._acting.clear()
        self._waker.wake()

    def _feed(self, event: Event) -> list[Action]:
        """Feed the events handed over so far, then ``event``; the actions to
        carry out. Loop thread only."""
        with self._handover:
            pending, self._pending = self._pending, []
            now = self.clock.now()
            actions: list[Action] = []
            for each in [*pending, event]:
                actions += self._leadership.process(each, now)
                if self._held and self._leadership.leading is None \
                        and self._leadership.phase is not Phase.CONFIRMING:
                    # held for an unwritten registry when leadership went: they stay with the kept
                    # core (sent if it serves again, late rather than never) or go with it
                    actions += self._leadership.process(Unsent(self._held_answers()), now)
                    self._held.clear()
                    self._store_health = StoreHealth()
            if self._leadership.leading is not None:
                self._acting.set()
            else:
                self._acting.clear()
        return actions

    def _carry_out(self, actions: list[Action]) -> None:
        """Carry out the machine's actions, and those of the events they lead to."""
        queue = deque(actions)
        while queue:
            queue.extend(self._do(queue.popleft()))

    def _do(self, action: Action) -> list[Action]:
        if isinstance(action, LoadRegistry):
            return self._load_registry()
        if isinstance(action, BuildCore):
            assert isinstance(action.registry, Registry)  # what _load_registry fed
            return self._feed(CoreBuilt(self._new_core(action.registry), action.fence))
        if isinstance(action, Commit):
            return self._commit(action.replies)
        if isinstance(action, ConfirmLeadership):
            return self._confirm(action.gap)
        with self._lock:
            if isinstance(action, Serve):
                self._last_core = action.core
                self._drop_held()  # a fresh core: frames meant for an older one are not its business
                self._turn_end = self.clock.now()
                self._log_leads(action.core)
            elif isinstance(action, Resume):
                # what the core said in the turn the blip cut short goes out
                # now, late rather than never (it believes it was said); what
                # waited in the inbox during the blip is handled next
                self._outbox = list(action.undelivered) + self._outbox
                self._turn_end = self.clock.now()
                log.log(NOTICE, "master %s leads again under the same znode: soft state kept", self.info.id)
            elif isinstance(action, PutAside):
                self._forget_leader()
                log.warning("master %s steps down: soft state kept in case the session survives (%s)",
                            self.info.id, action.reason)
            elif isinstance(action, Drop):
                self._drop_held()
                self._forget_leader()
                self.stored.notify_all()
                log.warning("master %s: soft state dropped (%s)", self.info.id, action.reason)
            elif isinstance(action, RetryLoading):
                log.error("elected but cannot read the registry, not serving yet (again in %gs): %s",
                          _OFFICE_RETRY, action.reason)
        return []

    def _new_core(self, registry: Registry) -> MasterCore:
        # the agents' connections as the last core knew them: a new core of this process tells
        # them at once that it does not know them (docs/agent.rst, "Re-registration")
        peers = self._last_core.agent_peers() if self._last_core is not None else None
        self._cores_built += 1
        core = MasterCore(self.clock, self.info, self.config, registry=registry, wall_clock=time.time,
                          agent_peers=peers, credentials=self.credentials, receipt_key=self._receipt_key,
                          term=self._cores_built)
        core.batch_sends()   # (_deliver batches what goes to peers that take batches: a batch's sends come so)
        return core

    def _log_leads(self, core: MasterCore, level: int = NOTICE) -> None:
        """Say that this master leads: at the default level (notice) after an
        election; a standalone master leads from its start (info)."""
        log.log(level, "master %s leads (%d agents and %d frameworks in the registry)", self.info.id,
                 len(core.registry.agents), len(core.registry.frameworks))

    def _load_registry(self) -> list[Action]:
        """Elected: read the registry from ZooKeeper (outside ``_lock``: it
        may take seconds). The machine decides what follows."""
        from mesoslike.ha.registry_store import FencedRegistryStore, ZooKeeperRegistry

        contender = self._contender
        assert contender is not None and self._zk is not None
        actions = self._finish_write(wait=True)   # what is read must not change under the new store
        if actions:
            self._carry_out(actions)
        store = FencedRegistryStore(ZooKeeperRegistry(contender.client, self._zk.path, timeout=self._registry_timeout,
                                                      mirror=self._mirror), contender.fence)
        self._store = store
        try:
            registry = store.load()
        except Exception as exc:  # unreadable, ZooKeeper unreachable, or a bug: read again later
            return self._feed(RegistryUnreadable(str(exc) or type(exc).__name__))
        return self._feed(RegistryLoaded(registry, store.fence))

    def _confirm(self, gap: float) -> list[Action]:
        """After a gap — the process was frozen (SIGSTOP, a long GC, a
        swapped-out VM) or a turn ran long — the ZooKeeper session may have
        expired without kazoo's thread having run yet to say so. Ask
        ZooKeeper itself, synchronously (one round trip, only after a gap):
        an expired session fails the request."""
        assert self._contender is not None
        try:
            refusal = self._contender.confirm(timeout=self._zk_session_timeout)
        except Exception as exc:  # a bug must not leave the machine waiting for an answer
            refusal = type(exc).__name__
        if refusal is None:
            return self._feed(Confirmed())
        log.warning("after a %.1fs gap, leadership could not be confirmed (%s): stepping down", gap, refusal)
        return self._feed(Refuted(refusal))

    def _commit(self, replies: tuple[Send, ...]) -> list[Action]:
        """Send ``replies`` once the registry holds the changes made so far
        (hard state first: the replies may acknowledge them), after those
        held before them. A write of the registry is started if none is on
        its way (:meth:`_persist`); until it is done — or, if it failed,
        until one succeeds — the replies are held."""
        with self._lock:
            # stamped before the replies go out: a freeze from here on shows
            # as a gap at the start of the next turn
            self._turn_end = self.clock.now()
            leading = self._leadership.leading
            if leading is None:
                return []
            if replies:
                self._held.append((leading.core.registry_changes, replies))
            return self._persist()

    def _persist(self) -> list[Action]:
        """Take a write that is done, start one if the registry changed since
        (unless one is on its way, or a failed one waits for its retry),
        and send the answers whose changes are written."""
        actions = self._finish_write()
        leading = self._leadership.leading
        if leading is None:
            return actions
        core = leading.core
        if self._writing is None and core.registry_changes != leading.persisted and \
                (not self._store_health.failing or self.clock.now() >= self._store_health.retry_at):
            store, upto = self._store, core.registry_changes
            prepared = store.prepare(core.registry)
            if getattr(store, "asynchronous", False):
                outcome = self._writer.submit(store.write_prepared, prepared)
                outcome.add_done_callback(lambda _: self._waker.wake())
            else:
                outcome = Future()
                try:
                    outcome.set_result(store.write_prepared(prepared))
                except Exception as exc:  # taken by _finish_write like a thread's
                    outcome.set_exception(exc)
            self._writing = RegistryWrite(core, upto, outcome)
            actions += self._finish_write()
        return actions + self._release()

    def _finish_write(self, wait: bool = False) -> list[Action]:
        """If the write on its way is done (``wait``: once it is), mark what
        it stored and tell the machine; a fenced write ends the leadership, a
        failed one is tried again after a back-off (:meth:`_store_failed`)."""
        writing = self._writing
        if writing is None or not (wait or writing.outcome.done()):
            return []
        self._writing = None
        core = writing.core
        try:
            stored = writing.outcome.result()
        except RegistryFencedError as exc:
            log.error("registry write fenced off: %s", exc)
            return self._feed(Fenced(str(exc))) if self._leadership.persisted(core) is not None else []
        except Exception as exc:
            part = getattr(exc, "stored", None)
            if part is not None:   # RegistryPartlyWritten: what was written stays written
                core.registry.mark_stored(part)
            if self._leadership.persisted(core) is not None:
                self._store_failed(exc)
            return []
        core.registry.mark_stored(stored)
        if self._leadership.persisted(core) is None:
            return []   # dropped meanwhile
        health = self._store_health
        if health.failing:
            assert health.failing_since is not None
            log.warning("the registry is written again after %.1fs and %d failed writes; %d held answers go out",
                        self.clock.now() - health.failing_since, health.failures, len(self._held_answers()))
            self._store_health = StoreHealth()
        actions = self._feed(Stored(writing.upto))
        self.stored.notify_all()
        return actions

    def _release(self) -> list[Action]:
        """Send the held answers whose changes the registry holds, in order."""
        leading = self._leadership.leading
        if leading is None or not self._held:
            return []
        replies: list[Send] = []
        while self._held and self._held[0][0] <= leading.persisted:
            replies += self._held.popleft()[1]
        unsent = self._deliver(tuple(replies)) if replies else ()
        return self._feed(Unsent(unsent)) if unsent else []

    def _held_answers(self) -> tuple[Send, ...]:
        return tuple(send for _, replies in self._held for send in replies)

    def _store_failed(self, exc: Exception) -> None:
        """A registry write failed (not fenced): hold answers and frames,
        try again after a back-off (:data:`STORE_BACKOFF`, by the failures
        so far). Logged once as one line — with a traceback only
        if the error is not a known write failure — then once every
        _STORE_REMINDER while it lasts."""
        health, now = self._store_health, self.clock.now()
        health.failures += 1
        self.registry_write_failures += 1
        reason = str(exc) or type(exc).__name__
        if not health.failing:
            health.failing_since, health.reminded_at = now, now
            if isinstance(exc, (RegistryWriteError, OSError)):
                log.error("%s: the master answers nothing and handles no new message until the registry is "
                          "written (tried again every %gs at most)", reason, STORE_BACKOFF.maximum)
            else:
                log.exception("writing the registry failed: the master answers nothing and handles no new "
                              "message until the registry is written (tried again every %gs at most)",
                              STORE_BACKOFF.maximum)
        elif now - health.reminded_at >= _STORE_REMINDER:
            health.reminded_at = now
            assert health.failing_since is not None
            log.error("the registry is still not written after %.0fs (%d tries): %s",
                      now - health.failing_since, health.failures, reason)
        health.reason = reason
        health.retry_at = now + STORE_BACKOFF.delay(health.failures - 1)

    def _deliver(self, replies: tuple[Send, ...]) -> tuple[Send, ...]:
        """Send ``replies`` while this master acts as leader; what was not sent.
        A peer that takes batches gets its consecutive updates,
        acknowledgements and launches of the turn in batch frames
        (``docs/wire.rst``, "Batching")."""
        leading = self._leadership.leading
        pairs: Sequence[tuple[bytes, object]]
        if leading is not None and len(replies) > 1:   # (pairs, not Sends again: seven to ten a task)
            pairs = batched([(send.peer, send.message) for send in replies], leading.core.accepts_batches)
        else:
            pairs = [(send.peer, send.message) for send in replies]
        encode, send_frame = self._server.codec.encode, self._server.send_frame
        for index, (peer, message) in enumerate(pairs):
            if not self._acting.is_set():   # demoted while we worked: not one more word as leader
                return tuple(Send(peer, message) for peer, message in pairs[index:])
            if is_v1_peer(peer):   # a v1 scheduler's event stream
                self._v1.deliver(peer, message)
                continue
            try:
                for frame in batch_frames(message, encode):
                    send_frame(peer, frame)
            except Exception:
                log.exception("sending %s failed", type(message).__name__)
        return ()

    def _drop_held(self) -> None:
        self._inbox.clear()
        self._outbox.clear()
        self._registration_digests.clear()
        self._held.clear()
        self._store_health = StoreHealth()

    def _forget_leader(self) -> None:
        with self._leader_cache_lock:
            self._leader_cache = (float("-inf"), {})  # someone else leads now: ask ZooKeeper afresh

    @property
    def leadership(self) -> Leadership[MasterCore]:
        """The leadership machine (read it; the loop alone feeds it)."""
        return self._leadership

    @property
    def core(self) -> MasterCore | None:
        """The core this master serves with; None unless it leads."""
        leading = self._leadership.leading
        return leading.core if leading is not None and self._acting.is_set() else None

    @property
    def transport(self) -> Server:
        """The ZeroMQ server agents and frameworks talk to."""
        return self._server

    @property
    def http(self) -> StatusHTTPServer | None:
        return self._http

    @property
    def registry_writable(self) -> bool:
        """False while registry writes fail (the master answers nothing)."""
        return not self._store_health.failing

    @property
    def answers_held(self) -> int:
        """Answers held until the registry is written."""
        return sum(len(replies) for _, replies in self._held)

    @property
    def is_leader(self) -> bool:
        return self.core is not None

    def _leader_info(self) -> dict[str, str]:
        """Who leads. A follower reads ZooKeeper at most once per
        ``_LEADER_INFO_TTL``: /health and the loop ask often, and a read
        blocks for seconds while ZooKeeper is unreachable."""
        if self.is_leader:
            return {"id": self.info.id, "address": self.address, "http_address": self.http_address}
        with self._leader_cache_lock:
            read_at, cached = self._leader_cache
            if self.clock.now() - read_at < _LEADER_INFO_TTL:
                return dict(cached)
            try:
                leader = self._contender.leader_info() if self._contender is not None else None
            except Exception:  # ZooKeeper unreachable: we do not know
                leader = None
            info: dict[str, str] = {k: leader.get(k, "") for k in ("id", "address", "http_address")} if leader else {}
            self._leader_cache = (self.clock.now(), info)
            return dict(info)

    def _masters(self) -> list[dict]:
        """The masters of the HA group, the leader first (``/state``'s
        ``masters``); a master without ``--zk`` is its own group. Read from
        ZooKeeper at most once per ``_LEADER_INFO_TTL`` (a read blocks while
        ZooKeeper is unreachable); empty when it cannot be read."""
        own = {"id": self.info.id, "address": self.address, "http_address": self.http_address}
        if self._contender is None:
            return [own | {"leader": self.is_leader}]
        with self._leader_cache_lock:
            read_at, cached = self._members_cache
            if self.clock.now() - read_at >= _LEADER_INFO_TTL:
                try:
                    cached = self._contender.members()
                except Exception:  # ZooKeeper unreachable: we do not know
                    cached = []
                self._members_cache = (self.clock.now(), cached)
            return [dict(member) for member in cached]

    # ----------------------------------------------- what operator writes use
    def serving_core(self) -> MasterCore | None:
        return self.core

    def persisted(self, core: MasterCore) -> int | None:
        return self._leadership.persisted(core)

    def leader_info(self) -> dict[str, str]:
        return self._leader_info()

    def send_later(self, sends: list[Send]) -> None:
        self._outbox += sends
        self._waker.wake()

    # -------------------------------------------------------------- views
    def state(self) -> dict:
        """The /state document (thread-safe; read-only: callers at the same
        moment share it); a follower names the leader. Never older than the
        call: see :class:`~mesoslike.master.http.Fresh`."""
        return self._state_view.get().document

    def _render_state(self) -> _StateDocument:
        """A snapshot under ``_lock`` (cheap), rendered outside it: the loop
        waits for the snapshot only, however large the state."""
        with self._lock:
            core = self.core
            taken = snapshot(core) if core is not None else None
        if taken is not None:
            return _StateDocument(render_state(taken) | {"masters": self._masters()})
        return _StateDocument(self._follower_state(self._masters(), self._leader_info()))

    def _serve_state(self, request: Request) -> Response:
        """GET /state: streamed as the forked child renders it (chunked), so
        the master never holds the document (hundreds of MB at 1,000,000 tasks)."""
        if request.method not in ("GET", "HEAD"):
            return json_response(405, {"error": "GET /state"}, {"Allow": "GET, HEAD"})
        return Response(200, content_type="application/json", stream=self._state_stream.read())

    def _state_pieces(self, indent: int | None) -> Iterator[bytes]:
        """The /state document's JSON in pieces, rendered in a forked child
        (in this thread, whole, where a fork is refused)."""
        # (read from ZooKeeper under a lock another thread may hold: not in the child)
        masters, leader = self._masters(), self._leader_info()

        def render() -> Iterator[bytes]:
            core = self.core
            document = (render_state(snapshot(core)) | {"masters": masters} if core is not None
                        else self._follower_state(masters, leader))
            return json_chunks(document, indent)
        try:
            return stream_forked(self._lock, render)
        except ForkFailed as exc:
            log.warning("rendering /state in this process: %s", exc)
            document = self._state_view.get()
            return iter((document.http_body if indent is not None else document.compact.encode(),))

    def _render_state_bytes(self, indent: int | None) -> bytes:
        """The /state document's JSON, whole (a GET_STATE reply is one message)."""
        return b"".join(self._state_pieces(indent))

    def _follower_state(self, masters: list[dict], leader: dict[str, str]) -> dict:
        return {"leader": leader, "is_leader": False, "version": __version__,
                "master": {"id": self.info.id, "address": self.address}, "agents": [],
                "frameworks": [], "offers": [], "masters": masters}

    def _ask_state(self, peer: bytes) -> list[Send]:
        """GET_STATE from ``peer``: answered from a snapshot rendered by the
        state thread (not the loop), every peer that asks meanwhile with the
        same rendering; beyond _STATE_ASKERS waiting, an ERROR."""
        with self._askers_lock:
            if len(self._state_askers) >= _STATE_ASKERS:
                return [Send(peer, m.Error("too many GET_STATE requests waiting; try again, or use HTTP /state"))]
            self._state_askers.append(peer)
            first = len(self._state_askers) == 1
        if first:
            self._state_worker.submit(self._answer_state_askers)
        return []

    def _answer_state_askers(self) -> None:
        if self._stopping.is_set():
            return
        try:
            body = self._state_compact.get().decode()
        except Exception:
            log.exception("rendering the state for GET_STATE failed")
            body = json.dumps({"error": "internal error"})
        with self._askers_lock:
            askers, self._state_askers = self._state_askers, []
        with self._lock:
            self.send_later([Send(peer, m.StateReply(body)) for peer in askers])

    def healthy(self) -> bool:
        return bool(self._health()["healthy"])

    def _health(self) -> dict:
        health = self._store_health
        zookeeper = self._zookeeper_connected()
        return {"healthy": not health.failing and zookeeper is not False, "is_leader": self.is_leader,
                "leader": self._leader_info().get("address", ""),
                "registry_writable": not health.failing, **({"registry_error": health.reason} if health.failing else {}),
                **({"zookeeper_connected": zookeeper} if zookeeper is not None else {}),
                **({"registry_mirrored": self._mirror.current} if self._mirror is not None and not self.is_leader
                   else {})}

    def _zookeeper_connected(self) -> bool | None:
        """Whether the connection to ZooKeeper is up (None: no --zk). Without
        it this master can neither lead nor learn who does: unhealthy."""
        contender = self._contender
        if self._zk is None:
            return None
        if contender is None:
            return False
        from mesoslike.ha.zookeeper import ZooKeeperError  # loaded already: the contender's module

        try:
            return bool(contender.client.connected)
        except ZooKeeperError:   # not started yet
            return False

    # -------------------------------------------------------------- roles
    @property
    def roles_config(self) -> RolesConfig | None:
        """The roles settings in force (the preemption policy reads them)."""
        return self._roles.config

    def reload_roles(self) -> None:
        """Read the roles file again and apply it if it changed (thread-safe
        and signal-safe: the loop does the work, under the lock). A file
        that no longer parses is logged and the roles in force stay."""
        self._roles.reload()
        self._waker.wake()

    # --------------------------------------------------------------- loop
    def start(self) -> None:
        """Run the loop in a background thread."""
        self._thread = threading.Thread(target=self.run, name="master", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """The loop; returns after :meth:`stop`."""
        if self._http is not None:
            self._http.start()
        self._long_lived.start()
        log.info("master %s listening on %s (HTTP %s)%s", self.info.id, self.address, self.http_address or "off",
                 f", bound to {self.bound_address}" if self.bound_address != self.address else "")
        try:
            while not self._stopping.is_set():
                self._turn()
        finally:
            self._close()

    def _turn(self) -> None:
        """One turn: time-driven leadership changes (and reading the
        registry once elected), a wait for frames, then — as the machine's
        phase says — leave them waiting, refuse them, or handle them."""
        if self._writing is not None and self._leadership.leading is None:
            # not leading (in doubt, say) with a write on its way: its outcome decides whether the
            # kept core holds only stored changes, which the next Tick asks
            with self._lock:
                self._carry_out(self._finish_write(wait=True))
        # not under _lock: reading the registry may take seconds (the actions
        # that touch what HTTP threads read take the lock themselves)
        self._carry_out(self._feed(Tick()))
        if self._peers() is Peers.WAIT:
            # elected and not serving yet, or in doubt: peers' frames wait unread
            wakeup = self._leadership.wakeup()
            self._waker.wait(_IDLE_WAIT if wakeup is None else min(_IDLE_WAIT, wakeup - self.clock.now()))
            return
        timeout = _IDLE_WAIT
        leading = self._leadership.leading
        if leading is not None and self._store_health.failing:
            # the registry is not written: frames wait unread until it is (back-pressure)
            timeout = min(max(self._store_health.retry_at - self.clock.now(), 0.0), _IDLE_WAIT)
            self._waker.wait(timeout)
        else:
            held = 0.0
            if leading is not None:
                held = self._space_turns()
                timeout = 0.0 if self._inbox else min(max(leading.core.next_wakeup() - self.clock.now(), 0.0),
                                                      _IDLE_WAIT)
            self._server.wait(timeout, self._waker)
            timeout += held
        woke = time.monotonic()
        with self._lock:
            locked = time.monotonic()
            self._bytes_this_turn = self._frames_this_turn = 0
            try:
                self._work(timeout)
            finally:
                self.metrics.loop.record(time.monotonic() - woke, locked - woke)
                if self._frames_this_turn >= _SPACED_TURN_FRAMES and self._bytes_this_turn < _SMALL_TURN_BYTES:
                    self._busy_turn_at = woke

    def _space_turns(self) -> float:
        """Right after a turn that handled a few frames (at least
        ``_SPACED_TURN_FRAMES``, of less than ``_SMALL_TURN_BYTES``), wait
        until ``turn_spacing`` has passed since it woke (woken early: no
        longer); the seconds waited.

        On the real agents' path (bench/master_per_task.py) the master woke
        for a few tasks' updates at a time, ~150 turns a round of 1,000
        tasks, each after other processes had had the CPU: its CPU a task was
        four times the control plane's (turns of hundreds of tasks) for the
        same work, the caches cold at each turn (in process: frames of 45
        updates cost 89 µs a task with the caches evicted before each, 54
        without; of 250, 57 and 53). What comes while it waits is handled in
        one turn, and its updates and acknowledgements go out in fewer,
        larger batches — which the framework and the agents handle with
        fewer wake-ups too. A latency of at most ``turn_spacing`` a hop, only
        while busy; an idle master answers at once. A turn that handled
        more waits for nothing: its batches are large already, and the
        control plane's turns of hundreds of tasks, held too, went at 68 %
        of their rate for the same CPU. Nor does a turn of one frame: a
        request whose answer another waits on, as each hop of a lone task's
        launch does."""
        began = time.monotonic()
        hold = self._busy_turn_at + self._turn_spacing - began
        if hold <= 0.0:
            return 0.0
        if self._waker.wait(hold):
            self._waker.wake()   # (its wait clears it: the wake is left for the wait that follows)
        return time.monotonic() - began

    def _work(self, waited: float) -> None:
        """The part of a turn under ``_lock``: handle what came (or, while
        the registry is not written, only try to write it again)."""
        # measured from the end of the last turn, so a freeze anywhere
        # between two turns counts, not only one inside the wait
        self._carry_out(self._feed(TurnStarted(gap=self.clock.now() - self._turn_end - waited)))
        if self._peers() is Peers.WAIT:
            return  # demoted or elected while we waited: the frames that woke us wait, unread
        leading = self._leadership.leading
        self._outbox += self._roles.turn(leading.core if leading is not None else None)
        if leading is None:
            self._answer_as_follower()
            self._turn_end = self.clock.now()
            return
        started = self.clock.now()
        replies, self._outbox = self._outbox, []
        admitted = 0
        if self._store_health.failing:
            if started < self._store_health.retry_at:
                self._outbox = replies  # not yet: they wait for the next try with the rest
                self._turn_end = started
                return
            # a turn with no new work: the commit writes the registry again, and sends what is held
        else:
            collecting = gc.isenabled()
            agents_before = len(leading.core.agent_book.records)
            gc.disable()  # a turn of 2,000 re-registrations makes ~250k objects: collect after it, not during
            try:
                replies += self._handle_messages(leading.core)
                replies += self._v1.turn(leading.core)
                replies += leading.core.tick()
            finally:
                admitted = len(leading.core.agent_book.records) - agents_before
                if collecting:
                    # before the collector is on: its pass would come first
                    self._long_lived.turn_ended(admitted)
                    gc.enable()
                    self._long_lived.after_turn()
        self._carry_out(self._feed(TurnEnded(self.clock.now() - started, tuple(replies))))
        lifecycle = leading.core.agent_lifecycle
        if admitted == 0 and not self._inbox and lifecycle.tasks_pending and \
                self.clock.now() >= lifecycle.settle_due():
            # the task records of the agents re-admitted, after their answers went out, a part a turn, in
            # turns that admitted no agent with nothing waiting, once no agent was admitted for a while
            # (settle_due): while re-registrations come they wait (every reader of the tasks makes them
            # first: MasterCore.settle), and the loop waits for frames, not for them. The collector off,
            # and the records frozen as a turn's admissions are (_LongLived.turn_ended)
            collecting = gc.isenabled()
            gc.disable()
            settled = 0
            try:
                settled = leading.core.settle(_SETTLED_A_TURN)
            finally:
                if collecting:
                    self._long_lived.turn_ended(settled)
                    gc.enable()
                    self._long_lived.after_turn()

    def _peers(self) -> Peers:
        """What to do with peers' frames now (a method: it changes as the machine is fed)."""
        return self._leadership.peers

    def _handle_messages(self, core: MasterCore) -> list[Send]:
        """Take what waits on the socket into the inbox (cheap: not decoded)
        and handle up to ``_BATCH`` frames from it (``_TURN_BYTES`` of them), registrations last."""
        out: list[Send] = []
        inbox = self._inbox
        room = min(_RECEIVE_LIMIT, _INBOX_FRAMES - len(inbox)) if inbox.bytes < _INBOX_BYTES else 0
        for sender, received in itertools.islice(self._server.receive_frames(), max(room, 0)):
            if sender is not None and isinstance(received, bytes):
                # an agent retrying the registration this master handled (its answer was slow): answered
                # now, as it would be when its turn came; queued, it would hold up the agent's later frames
                # (its PONGs) behind every registration waiting
                retried = self._retried_registration(core, sender, received)
                if retried is not None:
                    out += retried
                    continue
            if not inbox.add(sender, received):
                # received, and answered by the same registration still waiting: counted, not silent
                core.counters["messages_received"] += 1
                core.counters["registrations_repeated"] += 1
            if inbox.bytes >= _INBOX_BYTES:   # full: the rest waits in ZeroMQ's queues
                break
        for peer, frame in inbox.take(_BATCH, _TURN_BYTES):
            self._bytes_this_turn += len(frame) if isinstance(frame, bytes) else 1
            self._frames_this_turn += 1
            out += self._handle_frame(core, peer, frame)
        return out

    def _handle_frame(self, core: MasterCore, peer: bytes | None, frame: bytes | Exception) -> list[Send]:
        message: object = frame
        try:
            if isinstance(frame, Exception):
                return core.on_bad_frame(peer, frame)
            if peer is None:  # the transport names a peer for every whole frame
                return core.on_bad_frame(peer, WireError("a frame without a peer"))
            # not checked again for a retry (_retried_registration, ~0.4 us): it was on arrival, and what
            # this peer had handled since was queued before this frame — a registration it repeats was not
            # the latest waiting (the inbox drops a repeat of that), so a later other one was handled after
            # it and is what is remembered now. (Were that one refused at decoding, the older one stays
            # remembered: this frame is then handled in full — the same report again, answered again)
            message = self._server.decode(frame)
            if isinstance(message, Exception):
                return core.on_bad_frame(peer, message)
            if isinstance(message, m.GetState):
                core.counters["messages_received"] += 1   # received like any other, answered off the loop
                return self._ask_state(peer)
            began = time.perf_counter()
            sends = core.on_message(peer, message, self._server.principal(peer))
            self.metrics.message_timings.observe(type(message).__name__, time.perf_counter() - began)
            self._remember_registration(peer, frame, message)
            return sends
        except Exception:  # a bug must not take the master down with it
            log.exception("handling %s from %s failed", type(message).__name__, clip(peer))
            return []

    def _retried_registration(self, core: MasterCore, peer: bytes, frame: bytes) -> list[Send] | None:
        """The core's answer if ``frame`` repeats, byte for byte, the last
        registration from ``peer`` (an agent retrying while we were busy);
        None to decode and handle it. Hashing its bytes (~1 us for 2.4 KB) is
        far cheaper than decoding a re-registration with its tasks."""
        digest = self._registration_digests.get(peer)
        # the same length and hash (keyed SipHash, 64 bits: another frame passes for it with a chance of
        # 2**-64), hashed only when the length matches
        if digest is None or digest[0] != len(frame) or digest[1] != hash(frame):
            return None
        leading = self._leadership.leading
        sends = core.on_retried_registration(peer, leading.persisted if leading is not None else None)
        if sends is None:   # not registered there any more: handle it in full
            self._registration_digests.pop(peer, None)
        return sends

    def _remember_registration(self, peer: bytes, frame: bytes, message: object) -> None:
        if isinstance(message, (m.RegisterAgent, m.ReregisterAgent)):
            digests = self._registration_digests
            digests.pop(peer, None)   # then set again: the latest last, the oldest dropped first
            digests[peer] = (len(frame), hash(frame))
            if len(digests) > _REGISTRATION_DIGESTS_KEPT:
                digests.popitem(last=False)   # only an optimisation: its retry is then handled in full
        elif isinstance(message, m.Pong):
            # registered and answering: it will not retry; keep the memory small
            self._registration_digests.pop(peer, None)

    def _answer_as_follower(self) -> None:
        """Tell peers who leads: at most _BATCH frames a turn, and none more
        once ZooKeeper's threads handed over news (an election). Agents learn
        of an election when this master does and flood it with
        re-registrations; answered all in one turn, those that kept coming
        kept the turn going — and the election waiting — for as long as they
        came (93 s at 30,000 agents). Only GET_STATE is decoded."""
        for peer, frame in itertools.islice(self._server.receive_frames(), _BATCH):
            if peer is None:
                continue
            leader = self._leader_info()  # cached: only read when someone asks
            message = self._server.decode(frame) if isinstance(frame, bytes) and \
                CODEC.peek_type(frame) == m.GetState.TYPE else None
            reply: object
            if isinstance(message, m.GetState):
                reply = m.StateReply(json.dumps({"leader": leader, "is_leader": False}))
            else:
                address = leader.get("address") or "not elected yet"
                reply = m.Error(f"this master does not lead; the leader is {address}", standby=True)
            self._server.send(peer, reply)
            if self._pending:   # read without the lock: a hint, the next turn feeds it
                break

    def stop(self) -> None:
        """Stop the loop (thread-safe) and wait for it."""
        self._stopping.set()
        self._waker.wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _close(self) -> None:
        self._mirror_stop.set()
        if self._mirror is not None:
            self._mirror.changed.set()
        if self._contender is not None:
            try:
                self._contender.stop()
            except Exception:
                log.exception("leaving the ZooKeeper group failed")
        self._v1.close()
        if self._http is not None:
            self._http.stop()
        if self._mirror_thread is not None:
            self._mirror_thread.join(timeout=self._registry_timeout)
        self._state_worker.shutdown(wait=False, cancel_futures=True)
        self._writer.shutdown(wait=False, cancel_futures=True)
        self._server.close()
        self._waker.close()
