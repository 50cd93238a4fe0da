"""The master process: a ZeroMQ ROUTER loop feeding :class:`MasterCore`,
plus the HTTP endpoints, and — with ZooKeeper — leader election.

A standalone master leads from the start. With ``zk`` it contends in the
ZooKeeper group and only the elected master builds a core (from the
registry in ZooKeeper) and serves; a follower answers peers with an ERROR
naming the leader, and its ``/state`` names the leader. Losing the session
or the election clears ``_leading`` at once (on kazoo's thread): from then on
no message is handled, no reply leaves and no registry write is attempted —
every registry write is also fenced on the leader's znode — and the soft
state is dropped before the master contends again.
"""

from __future__ import annotations

import gc
import itertools
import json
import logging
import os
import threading
import time
import uuid
from typing import NamedTuple

from mesoslike import __version__
from mesoslike.clock import Clock, SystemClock
from mesoslike.errors import MesoslikeError
from mesoslike.master.core import MasterCore, Send
from mesoslike.master.http import StatusHTTPServer
from mesoslike.master.inbox import Inbox
from mesoslike.master.records import MasterConfig
from mesoslike.master.registry import Registry
from mesoslike.master.roles import RolesConfig, RolesFileError, load_roles_file, quantities
from mesoslike.master.state import metrics_text, state_json
from mesoslike.master.storage import MemoryRegistryStore, RegistryStore
from mesoslike.transport import Server, Waker
from mesoslike.wire import MasterInfo
from mesoslike.wire import messages as m

__all__ = ["MasterRuntime"]

log = logging.getLogger("mesoslike.master")

#: messages handled per loop turn before time-driven work gets its turn
_BATCH = 2000
#: frames taken from the socket into the inbox per turn (not decoded: cheap)
_RECEIVE_LIMIT = 20_000
#: how long a follower trusts what it last read from ZooKeeper about the leader (s)
_LEADER_INFO_TTL = 1.0
#: how often the roles file's modification time is looked at (s)
_ROLES_CHECK_INTERVAL = 2.0
#: seconds between attempts of an elected master to read a registry it could not read
_OFFICE_RETRY = 0.5


class _KeptCore(NamedTuple):
    """Soft state put aside when the ZooKeeper connection broke (_step_down)."""

    core: MasterCore
    fence: str               # the election znode it served under
    undelivered: list[Send]  # what it said in the turn the break cut short


class MasterRuntime:
    """Runs a master.

    ``address``: ``tcp://HOST:PORT`` to bind for agents and frameworks (port 0
    = any free port; ``self.address`` is the bound one). ``http_port``: the
    HTTP endpoints' port on the same host (0 = any, None = no HTTP).
    ``registry_store``: where a standalone master keeps its registry (memory
    by default). ``zk``: a :class:`mesoslike.ha.ZkUrl` to run highly
    available; the registry then lives in ZooKeeper. ``roles``: a
    :class:`~mesoslike.master.roles.RolesConfig` (docs/roles.rst) applied
    whenever this master takes the lead; when it came from a file, the file
    is read again on :meth:`reload_roles` and when it changes.
    """

    def __init__(self, address: str = "tcp://127.0.0.1:5050", http_port: int | None = 5051,
                 config: MasterConfig | None = None, clock: Clock | None = None,
                 master_id: str | None = None, registry_store: RegistryStore | None = None,
                 zk=None, zk_session_timeout: float = 10.0, roles: RolesConfig | None = None) -> None:
        self.clock = clock or SystemClock()
        self.config = config or MasterConfig()
        self._zk = zk
        self._zk_session_timeout = zk_session_timeout
        self._turn_end = self.clock.now()
        #: peer -> the last REGISTER/REREGISTER_AGENT frame from it (see _retried_registration)
        self._registrations: dict[bytes, bytes] = {}
        self._inbox = Inbox()
        self._holding_until: float | None = None  # see _holding
        self._leader_cache: tuple[float, dict] = (float("-inf"), {})
        self._leader_cache_lock = threading.Lock()  # the HTTP thread asks too
        self._store = registry_store or MemoryRegistryStore()
        registry = self._store.load() if zk is None else None  # bad: stop before binding
        self._server = Server(address)
        self.address = self._server.address
        host = self.address[len("tcp://"):].rpartition(":")[0]
        self._http = None
        try:
            if http_port is not None:
                self._http = StatusHTTPServer(host, http_port, {
                    "/state": lambda: ("application/json", json.dumps(self.state(), indent=1).encode()),
                    "/health": lambda: ("application/json", json.dumps(self._health()).encode()),
                    "/metrics": lambda: ("text/plain; version=0.0.4", self._metrics().encode()),
                }, actions={"/weights": self._post_weights, "/quota": self._post_quota})
        except Exception:
            self._server.close()
            raise
        self.http_address = self._http.address if self._http else ""
        self.info = MasterInfo(master_id or uuid.uuid4().hex[:8], self.address, self.http_address, __version__)
        self._lock = threading.Lock()
        #: notified (under _lock) each time the registry is written
        self._stored = threading.Condition(self._lock)
        #: what operator requests (HTTP thread) left for the loop to send
        self._operator_sends: list[Send] = []
        self._waker = Waker()
        self._stopping = threading.Event()
        self._elected = threading.Event()   # set by the contender, taken by the loop
        self._leading = threading.Event()   # cleared by the contender the moment leadership is in doubt
        self._thread: threading.Thread | None = None
        self._contender = None
        self._kept: _KeptCore | None = None
        self.core: MasterCore | None = None
        #: the roles settings in force (the preemption policy reads them)
        self.roles_config = roles
        self._roles_core: MasterCore | None = None   # the core they were last applied to
        self._roles_applied: RolesConfig | None = None
        self._roles_reloads = self._roles_reloads_seen = 0   # reload_roles() calls, and those handled
        self._roles_check_at = self.clock.now() + _ROLES_CHECK_INTERVAL
        self._roles_stat = self._roles_file_stat()
        if zk is None:
            self._lead(registry)
            self._apply_roles()  # the loop does it on a take-over (_roles_turn)
        else:
            self._contend(zk, zk_session_timeout)

    # ------------------------------------------------------------ leadership
    def _contend(self, zk, session_timeout: float) -> None:
        from mesoslike.ha.zookeeper import MasterContender  # kazoo only for HA masters

        info = {"id": self.info.id, "address": self.address, "http_address": self.http_address,
                "version": __version__}
        self._contender = MasterContender(zk, info, self._on_elected, self._on_demoted, session_timeout)
        try:
            self._contender.start()
        except Exception:
            self._close()
            raise

    def _on_elected(self) -> None:  # the contender's thread: hand over, return at once
        self._elected.set()
        self._waker.wake()

    def _on_demoted(self, reason: str) -> None:  # kazoo's thread: stop acting now
        self._leading.clear()
        self._elected.clear()
        self._waker.wake()
        log.warning("master %s is no longer the leader (%s)", self.info.id, reason)

    def _lead(self, registry: Registry) -> None:
        self.core = MasterCore(self.clock, self.info, self.config, registry=registry, wall_clock=time.time)
        self._persisted = self.core.registry_changes
        self._turn_end = self.clock.now()
        self._leading.set()
        log.info("master %s leads (%d agents and %d frameworks in the registry)", self.info.id,
                 len(registry.agents), len(registry.frameworks))

    def _take_office(self) -> bool:
        """Elected: read the registry from ZooKeeper, then serve. False if it
        could not be read; the loop tries again while we stay elected — the
        group has no other leader meanwhile, and another master would read
        the same registry."""
        from mesoslike.ha.registry_store import FencedRegistryStore, ZooKeeperRegistry
        from mesoslike.ha.zookeeper import ZooKeeperError

        self._elected.clear()
        self._store = FencedRegistryStore(ZooKeeperRegistry(self._contender.client, self._zk.path),
                                          self._contender.fence)
        try:
            registry = self._store.load()
        except (ZooKeeperError, ValueError) as exc:
            log.error("elected but cannot read the registry, not serving yet (again in %gs): %s", _OFFICE_RETRY, exc)
            if self._contender.is_leader:
                self._elected.set()
            return False
        if not self._contender.is_leader:  # leadership may have gone while we read
            return True
        kept, self._kept = self._kept, None
        if kept is not None and self._resumable(kept, registry):
            self.core, self._persisted = kept.core, kept.core.registry_changes
            # what the core said in the turn the blip cut short goes out now,
            # late rather than never (it believes it was said)
            self._operator_sends = kept.undelivered + self._operator_sends
            self._turn_end = self.clock.now()
            self._leading.set()
            log.info("master %s leads again under the same znode: soft state kept", self.info.id)
            return True  # what waited in the inbox during the blip is handled now
        self._drop_held()  # a fresh core: frames meant for the old one are not its business
        self._lead(registry)
        return True

    def _resumable(self, kept: _KeptCore, registry: Registry) -> bool:
        """A core kept across a lost connection may serve again only if our
        znode never went away (nobody else can have led meanwhile) and the
        registry is what we last wrote."""
        try:
            same_znode = self._contender.fence() == kept.fence
        except Exception:
            return False
        return same_znode and registry == kept.core.registry

    def _confirm_leadership(self, since: float, allowed: float = 0.0) -> bool:
        """After a gap — the process was frozen (SIGSTOP, a long GC, a
        swapped-out VM) or a turn ran long — the ZooKeeper session may have
        expired without kazoo's thread having run yet to say so. Then ask
        ZooKeeper itself, synchronously, before acting as leader again: an
        expired session fails the request. Costs one round trip, only after a
        gap. Refuted, it steps down (dropping the core) and returns False; it
        also returns False, the core untouched, when the contender demoted us."""
        gap = self.clock.now() - since - allowed
        # any stall well beyond what the turn allowed: ZooKeeper may have heard
        # nothing from us for longer than our pings' period
        if self._contender is None or gap < min(0.25, self._zk_session_timeout / 6):
            return self._leading.is_set()
        try:
            client = self._contender.client
            stat = client.exists_async(self._contender.fence()).get(timeout=self._zk_session_timeout)
            owned = stat is not None and client.client_id is not None and stat.ephemeralOwner == client.client_id[0]
        except Exception as exc:  # session expired, connection lost, no znode, or no answer in time
            owned, reason = False, type(exc).__name__
        else:
            reason = "the election znode is not ours any more"
        if not owned:
            log.warning("after a %.1fs gap, leadership could not be confirmed (%s): stepping down", gap, reason)
            self._leading.clear()
            self._step_down()  # refuted, not in doubt: nothing to keep
            return False
        return self._leading.is_set()

    def _step_down(self, keep: bool = False, undelivered: list[Send] | None = None) -> None:
        """Stop serving. With ``keep`` (the connection to ZooKeeper broke but
        the session may survive), the core — and ``undelivered``, what it
        said in a turn cut short — is put aside in case we are re-elected
        under the same znode, provided the registry holds all it changed;
        otherwise the soft state is dropped."""
        self._leader_cache = (float("-inf"), {})  # someone else leads now: ask ZooKeeper afresh
        if self.core is not None:
            fence = self._current_fence() if keep and self._persisted == self.core.registry_changes else None
            self._kept = _KeptCore(self.core, fence, list(undelivered or ())) if fence is not None else None
            log.warning("master %s steps down: soft state %s", self.info.id,
                        "kept in case the session survives" if self._kept else "dropped")
        if self._kept is not None:
            # a connection blip: until the session is known to survive (we lead
            # on with this core) or not, peers' messages wait unread — refusing
            # them would lose calls the kept core never saw (an ACCEPT of its offers)
            self._holding_until = self.clock.now() + self._zk_session_timeout
        else:
            self._drop_held()  # not ours to handle any more: the peers retry with whoever leads
        self.core = None
        self._leading.clear()

    def _put_aside_if_demoted(self) -> bool:
        """If the contender demoted us (a connection blip), put the core
        aside; True while peers' messages must wait unread (_holding).
        Called with ``_lock`` held."""
        if self.core is not None and not self._leading.is_set():
            self._step_down(keep=True)
        return self._holding()

    def _holding(self) -> bool:
        """After a connection blip, while the kept core may still serve: peers'
        messages wait unread (at most a session timeout), neither handled
        nor refused."""
        if self._holding_until is None or self.is_leader or self._elected.is_set():
            return False
        if self._kept is None or self.clock.now() >= self._holding_until or self._current_fence() != self._kept.fence:
            # given up, or the session is known lost (our znode is gone or
            # new): the kept core can never serve again
            self._kept = None
            self._drop_held()
            return False
        return True

    def _drop_held(self) -> None:
        self._holding_until = None
        self._inbox.clear()

    def _current_fence(self) -> str | None:
        try:
            return self._contender.fence() if self._contender is not None else None
        except Exception:
            return None

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set() and self.core is not None

    def _leader_info(self) -> dict:
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
            info = {k: leader.get(k, "") for k in ("id", "address", "http_address")} if leader else {}
            self._leader_cache = (self.clock.now(), info)
            return dict(info)

    # -------------------------------------------------------------- views
    def state(self) -> dict:
        """The /state document (thread-safe); a follower names the leader."""
        with self._lock:
            if self.is_leader:
                return state_json(self.core)
        return {"leader": self._leader_info(), "is_leader": False, "version": __version__,
                "master": {"id": self.info.id, "address": self.address}, "agents": [], "frameworks": [],
                "offers": []}

    def _health(self) -> dict:
        return {"healthy": True, "is_leader": self.is_leader, "leader": self._leader_info().get("address", "")}

    # ----------------------------------------------------------- operator
    def _post_weights(self, body: bytes) -> tuple[int, object]:
        """``POST /weights {"role": weight, ...}``: answered once the registry holds them."""
        def apply(request: object) -> list[Send]:
            if not isinstance(request, dict) or not request:
                raise ValueError('expected {"role": weight, ...}')
            return self.core.update_weights(request)
        return self._operator_request(body, apply)

    def _post_quota(self, body: bytes) -> tuple[int, object]:
        """``POST /quota {"role": R, "guarantee": "cpus:2", "limit": "cpus:8"}``
        (neither: clear the role's quota); answered once the registry holds it."""
        def apply(request: object) -> list[Send]:
            if not isinstance(request, dict) or not isinstance(request.get("role"), str) \
                    or not set(request) <= {"role", "guarantee", "limit"} \
                    or not all(isinstance(request[k], str) for k in ("guarantee", "limit") if k in request):
                raise ValueError('expected {"role": R, "guarantee": "RESOURCES", "limit": "RESOURCES"}')
            return self.core.update_quota(request["role"], request.get("guarantee"), request.get("limit"))
        return self._operator_request(body, apply)

    def _operator_request(self, body: bytes, apply) -> tuple[int, object]:
        try:
            request = json.loads(body or b"null")
        except ValueError as exc:
            return 400, {"error": f"the body is not JSON: {exc}"}
        with self._lock:
            if not self.is_leader:
                return 409, {"error": "this master does not lead", "leader": self._leader_info()}
            core = self.core
            try:
                self._operator_sends += apply(request)
            except (MesoslikeError, TypeError, ValueError) as exc:
                return 400, {"error": str(exc)}
            target = core.registry_changes
            self._waker.wake()
            stored = self._stored.wait_for(lambda: self.core is not core or self._persisted >= target, timeout=10.0)
            if self.core is not core:
                return 503, {"error": "this master stopped leading before the change was stored; retry"}
            if not stored:
                return 503, {"error": "the change is applied but not stored yet (the registry is unreachable); "
                                      "it is retried every turn"}
            return 200, {"ok": True}

    def _metrics(self) -> str:
        with self._lock:
            if self.is_leader:
                return metrics_text(self.core)
        return "# HELP mesoslike_leader 1 if this master leads\n# TYPE mesoslike_leader gauge\nmesoslike_leader 0\n"

    # -------------------------------------------------------------- roles
    def reload_roles(self) -> None:
        """Read the roles file again and apply it if it changed (thread-safe
        and signal-safe: the loop does the work, under the lock). A file
        that no longer parses is logged and the roles in force stay."""
        self._roles_reloads += 1  # no lock: a signal handler may run this on the loop's own thread
        self._waker.wake()

    def _roles_file_stat(self) -> tuple | None:
        path = self.roles_config.path if self.roles_config is not None else None
        try:
            st = os.stat(path) if path else None
        except OSError:
            return None
        return st and (st.st_mtime_ns, st.st_size, st.st_ino)

    def _roles_turn(self) -> None:
        """Every turn, under the lock: look at the roles file when asked or
        every ``_ROLES_CHECK_INTERVAL``; a leader applies what is new (to a
        new core too: a take-over)."""
        if self.roles_config is None:
            return
        now = self.clock.now()
        reloads = self._roles_reloads
        asked = reloads != self._roles_reloads_seen
        taking_over = self.is_leader and self._roles_core is not self.core
        if self.roles_config.path and (asked or taking_over or now >= self._roles_check_at):
            self._roles_reloads_seen = reloads
            self._roles_check_at = now + _ROLES_CHECK_INTERVAL
            self._read_roles_file(asked)
        if self.is_leader and self._roles_core is not self.core:
            self._apply_roles()

    def _read_roles_file(self, asked: bool) -> None:
        stat = self._roles_file_stat()
        if stat == self._roles_stat and not asked:
            return
        self._roles_stat = stat
        try:
            config = load_roles_file(self.roles_config.path)
        except RolesFileError as exc:
            log.error("roles file not reloaded, the roles in force stay: %s", exc)
            return
        if config != self.roles_config:
            log.info("roles file %s reloaded: %d roles", config.path, len(config.roles))
        # applied again even if unchanged: what an operator set since for a
        # listed role gives way to the file (only what differs changes)
        self.roles_config, self._roles_core = config, None

    def _apply_roles(self) -> None:
        """Make the allocator (and the registry) hold the file's weights and
        quota for every role it lists — the file wins — and the defaults
        (weight 1, no quota) for roles an earlier version listed and this one
        dropped. Only what differs is changed. Leader only, under the lock."""
        config, core = self.roles_config, self.core
        if config is None or core is None:
            return
        core.roles_config = config
        self._roles_core = core
        try:
            core.set_preemption(config)
        except (MesoslikeError, ValueError) as exc:
            log.error("roles file: the preemption settings could not be applied: %s", exc)
        dropped = set(self._roles_applied.roles if self._roles_applied else ()) - set(config.roles)
        self._roles_applied = config
        wanted = {role: config.effective(role) for role in config.roles}
        wanted.update({role: config.effective(role) for role in dropped})  # not listed: the defaults
        registry = core.registry
        try:
            weights = {role: c.weight for role, c in wanted.items() if registry.weights.get(role, 1.0) != c.weight}
            if weights:
                self._operator_sends += core.update_weights(weights)
        except MesoslikeError as exc:
            log.error("roles file: the weights could not be applied: %s", exc)
        pending = [(role, c.guarantee, c.limit) for role, c in sorted(wanted.items())
                   if not self._same_quota(registry.quota.get(role, {}), c)]
        # in several passes: lowering a parent's guarantee may have to wait
        # for its children's, raising a child's for its parent's
        while pending:
            failed = []
            for role, guarantee, limit in pending:
                try:
                    self._operator_sends += core.update_quota(role, guarantee, limit)
                except MesoslikeError as exc:
                    failed.append((role, guarantee, limit, exc))
            if len(failed) == len(pending):
                for role, _, _, exc in failed:
                    log.error("roles file: the quota of role %s could not be applied: %s", role, exc)
                break
            pending = [item[:3] for item in failed]

    @staticmethod
    def _same_quota(record: dict, config) -> bool:
        return all(quantities(record.get(part)) == quantities(getattr(config, part)) and
                   (record.get(part) is None) == (getattr(config, part) is None) for part in ("guarantee", "limit"))

    # --------------------------------------------------------------- loop
    def start(self) -> None:
        """Run the loop in a background thread."""
        self._thread = threading.Thread(target=self.run, name="master", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """The loop; returns after :meth:`stop`."""
        if self._http is not None:
            self._http.start()
        log.info("master %s listening on %s (HTTP %s)", self.info.id, self.address, self.http_address or "off")
        try:
            while not self._stopping.is_set():
                self._turn()
        finally:
            self._close()

    def _turn(self) -> None:
        if self._elected.is_set() and not self.is_leader and not self._take_office():
            self._waker.wait(_OFFICE_RETRY)  # peers' messages wait for the leader we are about to be
            return
        with self._lock:
            holding = self._put_aside_if_demoted()
        if holding:
            self._waker.wait(min(0.1, self._holding_until - self.clock.now()))
            return
        timeout = 1.0
        if self.is_leader:
            timeout = min(max(self.core.next_wakeup() - self.clock.now(), 0.0), 1.0)
            if self._inbox:
                timeout = 0.0  # frames are waiting in the inbox already
        self._server.wait(timeout, self._waker)
        with self._lock:
            if self._put_aside_if_demoted():
                return  # demoted while we waited: the frames that woke us wait with the rest, unread
            if self.is_leader:
                # measured from the end of the last turn, so a freeze anywhere
                # between two turns counts, not only one inside the wait
                self._confirm_leadership(since=self._turn_end, allowed=timeout)  # steps down if refuted
            elif self._elected.is_set():
                return  # elected while we waited: what woke us is the new leader's, next turn
            self._roles_turn()
            if not self.is_leader:
                self._answer_as_follower()
                self._turn_end = self.clock.now()
                return
            started = self.clock.now()
            sends, self._operator_sends = self._operator_sends, []
            collecting = gc.isenabled()
            gc.disable()  # a turn of 2,000 re-registrations makes ~100k objects: collect after it, not during
            try:
                sends += self._handle_messages()
                sends += self.core.tick()
            finally:
                if collecting:
                    gc.enable()
            if not self._confirm_leadership(since=started):
                if self.core is not None:  # demoted, not refuted: keep what this turn said
                    self._step_down(keep=True, undelivered=sends)
                return
            # stamped before the replies go out: a freeze from here on shows
            # as a gap at the start of the next turn
            self._turn_end = self.clock.now()
            if self._persist():  # hard state first, then the replies that depend on it
                self._deliver(sends)

    def _handle_messages(self) -> list[Send]:
        """Take what waits on the socket into the inbox (cheap: not decoded)
        and handle up to ``_BATCH`` frames from it, registrations last."""
        for peer, frame in itertools.islice(self._server.receive_frames(), _RECEIVE_LIMIT):
            self._inbox.add(peer, frame)
        out: list[Send] = []
        for peer, frame in self._inbox.take(_BATCH):
            out += self._handle_frame(peer, frame)
        return out

    def _handle_frame(self, peer: bytes | None, frame: bytes | Exception) -> list[Send]:
        message: object = frame
        try:
            if isinstance(frame, Exception):
                return self.core.on_bad_frame(peer, frame)
            sends = self._retried_registration(peer, frame)
            if sends is not None:
                return sends
            message = self._server.decode(frame)
            if isinstance(message, Exception):
                return self.core.on_bad_frame(peer, message)
            sends = self.core.on_message(peer, message)
            self._remember_registration(peer, frame, message)
            return sends
        except Exception:  # a bug must not take the master down with it
            log.exception("handling %s from %r failed", type(message).__name__, peer)
            return []

    def _retried_registration(self, peer: bytes, frame: bytes) -> list[Send] | None:
        """The core's answer if ``frame`` repeats, byte for byte, the last
        registration from ``peer`` (an agent retrying while we were busy);
        None to decode and handle it. Comparing bytes is far cheaper than
        decoding a re-registration with its tasks."""
        last = self._registrations.get(peer)
        if last is None or len(last) != len(frame) or last != frame:
            return None
        sends = self.core.on_retried_registration(peer)
        if sends is None:
            del self._registrations[peer]  # not registered there any more: handle it in full
        return sends

    def _remember_registration(self, peer: bytes, frame: bytes, message: object) -> None:
        if isinstance(message, (m.RegisterAgent, m.ReregisterAgent)):
            self._registrations[peer] = frame
        elif isinstance(message, m.Pong):
            # registered and answering: it will not retry; keep the memory small
            self._registrations.pop(peer, None)

    def _answer_as_follower(self) -> None:
        for peer, message in self._server.receive():
            if peer is None:
                continue
            leader = self._leader_info()  # cached: only read when someone asks
            if isinstance(message, m.GetState):
                reply = m.StateReply(json.dumps({"leader": leader, "is_leader": False}))
            else:
                reply = m.Error(f"this master does not lead; the leader is {leader.get('address') or 'not elected yet'}")
            self._server.send(peer, reply)

    def _persist(self) -> bool:
        """Write the registry if it changed; False if we must not act any more."""
        if self.core.registry_changes == self._persisted:
            return True
        try:
            self._store.store(self.core.registry)  # writes what changed since the last store
            self._persisted = self.core.registry_changes
            self._stored.notify_all()
            return True
        except Exception as exc:
            if self._zk is not None and type(exc).__name__ == "FencingError":
                log.error("registry write fenced off: %s", exc)
                self._step_down()
                return False
            log.exception("writing the registry failed; retried on the next turn")
            return True

    def _deliver(self, sends: list[Send]) -> None:
        for send in sends:
            if not self._leading.is_set():
                return  # demoted while we worked: not one more word as leader
            try:
                self._server.send(send.peer, send.message)
            except Exception:
                log.exception("sending %s failed", type(send.message).__name__)

    def stop(self) -> None:
        """Stop the loop (thread-safe) and wait for it."""
        self._stopping.set()
        self._waker.wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _close(self) -> None:
        if self._contender is not None:
            try:
                self._contender.stop()
            except Exception:
                log.exception("leaving the ZooKeeper group failed")
        if self._http is not None:
            self._http.stop()
        self._server.close()
        self._waker.close()
