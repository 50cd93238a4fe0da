"""ZooKeeper at the edge: the only module that imports kazoo.

Three things live here (docs/ha.rst describes the protocol):

* :class:`MasterContender` — a master joins the group ``<path>`` with an
  ephemeral sequential znode ``<path>/json.info_<seq>`` holding its JSON
  info; the lowest valid sequence leads. A leader that loses its ZooKeeper
  connection (SUSPENDED) or session (LOST) is demoted at once, in kazoo's
  state listener, before anything else happens.
* :class:`LeaderDetector` — agents and scheduler drivers watch the group and
  follow the leader.
* :class:`ZooKeeperRegistry` — the master's hard state in shards under
  ``<path>/registry`` (agents and frameworks bucketed by a hash of their id),
  loaded in parallel and written incrementally — only the shards that
  changed — with transactions fenced on the writer's election znode and on
  each shard's version.

Threads: kazoo runs a connection thread (it calls state listeners) and a
callback thread (it calls watches). Each contender and detector adds one
worker thread of its own that does every ZooKeeper read and write of the
election, so neither kazoo thread ever blocks on ZooKeeper.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import zlib
from typing import Any, Callable

import attrs
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError,
                              RolledBackError, RuntimeInconsistency)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from mesoslike.errors import ConfigError, MesoslikeError
from mesoslike.ha.url import ZkUrl
from mesoslike.master.registry import (MAX_REMOVED, REGISTRY_FORMAT, Registry, RegistryChanges, RegistryFormatError,
                                       agent_record, framework_record)

__all__ = [
    "ZooKeeperError", "RegistryError", "FencingError", "connect", "MasterContender", "LeaderDetector",
    "ZooKeeperRegistry", "FencedRegistryStore", "MEMBER_PREFIX", "REGISTRY_NODE", "MAX_REGISTRY_BYTES",
    "AGENT_BUCKETS", "FRAMEWORK_BUCKETS", "REMOVED_CHUNK",
]

log = logging.getLogger("mesoslike.ha")

#: name prefix of a master's election znode (ZooKeeper appends 10 digits)
MEMBER_PREFIX = "json.info_"
_MEMBER_NAME = re.compile(r"json\.info_(\d{10})")
#: the registry's znode, a child of the group path beside the election znodes
REGISTRY_NODE = "registry"
#: ZooKeeper refuses packets over jute.maxbuffer (0xfffff bytes by default) by
#: dropping the connection — which would demote the leader — so no registry
#: transaction is bigger (a larger write is split into several; a single shard
#: too big is refused before sending); 16 KiB stay free for headers.
MAX_REGISTRY_BYTES = 1024 * 1024 - 16 * 1024

# Reconnect quickly after an outage: kazoo's default backoff grows to an hour.
_RECONNECT_MAX_DELAY = 1.0
# How long a worker waits before retrying a refresh that failed while connected.
_RETRY_DELAY = 0.5


class ZooKeeperError(MesoslikeError):
    """ZooKeeper is unreachable, or an operation on it failed or timed out."""


class RegistryError(ZooKeeperError):
    """The registry record does not parse, or a shard cannot be stored."""


class FencingError(ZooKeeperError):
    """A fenced registry write was refused: the writer is not the leader any
    more, or the registry changed since it was read. Nothing was written."""


# ----------------------------------------------------------------- connect
def connect(url: ZkUrl, timeout: float = 10.0, session_timeout: float = 10.0) -> KazooClient:
    """A started kazoo client for ``url``'s ensemble, with ``url.path`` created.

    Raises :class:`ZooKeeperError` if no server answers within ``timeout``
    seconds. ``session_timeout`` is asked of the server, which clamps it to
    its ``[minSessionTimeout, maxSessionTimeout]`` (2 and 20 ticks by default).
    """
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=_RECONNECT_MAX_DELAY)
    try:
        client = KazooClient(hosts=url.hosts, timeout=session_timeout, connection_retry=retry)
    except (KazooException, ValueError) as exc:
        raise ZooKeeperError(f"cannot use ZooKeeper hosts {url.hosts!r}: {exc}") from None
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        raise ZooKeeperError(f"could not connect to ZooKeeper at {url.hosts} within {timeout:g} s "
                             f"(is it running, and is {url} the right URL?)") from None
    try:
        _ensure_path(client, url.path, timeout)
    except ZooKeeperError:
        _close(client)
        raise
    log.info("connected to ZooKeeper at %s", url.hosts)
    return client


def _ensure_path(client: KazooClient, path: str, timeout: float) -> None:
    try:
        _wait(client.ensure_path_async(path), timeout)
    except (KazooException, ZooKeeperError) as exc:
        raise ZooKeeperError(f"could not create the group path {path} in ZooKeeper: {exc!r}") from None


def _close(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception:  # closing is best effort; the session ends on the server anyway
        log.debug("error closing the ZooKeeper client", exc_info=True)


def _wait(result: Any, timeout: float) -> Any:
    """The value of a kazoo async result; ZooKeeperError if it takes longer than ``timeout``.

    Requests made while disconnected are queued by kazoo until it reconnects;
    without a timeout a caller could block for the whole outage.
    """
    try:
        return result.get(timeout=timeout)
    except KazooTimeoutError:
        raise ZooKeeperError(f"ZooKeeper did not answer within {timeout:g} s") from None


# ----------------------------------------------------------------- group members
@attrs.frozen
class _Member:
    """A valid election znode: ``json.info_<seq>`` holding a JSON object with an address."""

    name: str
    sequence: int
    info: dict
    owner_session: int | None


class _SkipLog:
    """Warns once per foreign child of the group, not on every refresh."""

    def __init__(self, group_path: str) -> None:
        self._group_path = group_path
        self._warned: set[str] = set()

    def skip(self, name: str, reason: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            log.warning("ignoring %s/%s in the master group: %s", self._group_path, name, reason)


def _candidates(children: list[str], skips: _SkipLog) -> list[tuple[int, str]]:
    """Election znode names in sequence order; foreign names are skipped (and logged)."""
    found = []
    for name in children:
        match = _MEMBER_NAME.fullmatch(name)
        if match:
            found.append((int(match.group(1)), name))
        elif name != REGISTRY_NODE:
            skips.skip(name, f"not an election znode ({MEMBER_PREFIX}<10 digits>)")
    return sorted(found)


def _decode_member_info(data: bytes) -> dict | str:
    """The info dict of an election znode, or the reason it is not valid."""
    try:
        info = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return f"its data is not JSON ({exc})"
    if not isinstance(info, dict):
        return "its data is not a JSON object"
    if not isinstance(info.get("address"), str) or not info["address"]:
        return "its JSON has no \"address\""
    return info


def _lowest_valid_member(client: KazooClient, path: str, children: list[str], skips: _SkipLog,
                         timeout: float) -> _Member | None:
    """The leader: the lowest-sequence election znode whose data is valid."""
    for sequence, name in _candidates(children, skips):
        try:
            data, stat = _wait(client.get_async(f"{path}/{name}"), timeout)
        except NoNodeError:  # went away since the listing
            continue
        info = _decode_member_info(data)
        if isinstance(info, str):
            skips.skip(name, info)
            continue
        if stat.owner_session_id is None:
            # masters only create ephemeral znodes; a persistent one would lead forever
            skips.skip(name, "it is not ephemeral (no master's session owns it)")
            continue
        return _Member(name=name, sequence=sequence, info=info, owner_session=stat.owner_session_id)
    return None


# ----------------------------------------------------------------- group watcher
class _GroupWatcher:
    """Shared machinery: the client, a state listener, a child watch on the
    group and a worker thread that refreshes the view whenever poked."""

    def __init__(self, url: ZkUrl, client: KazooClient | None, session_timeout: float, role: str) -> None:
        if not isinstance(url, ZkUrl):
            raise ConfigError(f"expected a ZkUrl, got {url!r} (parse it with ZkUrl.parse)")
        self._url = url
        self._path = url.path
        self._session_timeout = session_timeout
        self._op_timeout = max(session_timeout, 1.0)
        self._client = client
        self._owns_client = client is None
        self._role = role
        self._skips = _SkipLog(url.path)
        self._wake = threading.Condition()
        self._dirty = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._child_watch = self._on_child_event  # one object, so kazoo's watcher set deduplicates it

    @property
    def client(self) -> KazooClient:
        """The kazoo client in use (borrowed or owned); None before start()."""
        return self._client

    def _connect_and_listen(self, timeout: float) -> None:
        if self._thread is not None or self._stopping:
            raise ZooKeeperError(f"this {self._role} was already started; create a new one")
        if self._client is None:
            self._client = connect(self._url, timeout=timeout, session_timeout=self._session_timeout)
        else:
            _ensure_path(self._client, self._path, timeout)
        self._client.add_listener(self._on_state)

    def _start_worker(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"mesoslike-ha-{self._role}", daemon=True)
        self._thread.start()
        self._poke()

    def _poke(self) -> None:
        with self._wake:
            self._dirty = True
            self._wake.notify_all()

    def _on_child_event(self, _event: Any) -> None:
        self._poke()

    def _on_state(self, state: str) -> None:
        self._state_changed(state)
        if state == KazooState.CONNECTED:
            self._poke()

    def _state_changed(self, state: str) -> None:
        """Called synchronously in kazoo's connection thread; must not block on ZooKeeper."""

    def _refresh(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        retry_after: float | None = None
        while True:
            with self._wake:
                if not self._dirty and not self._stopping:
                    self._wake.wait(retry_after)
                if self._stopping:
                    return
                self._dirty = False
            retry_after = None
            if not self._client.connected:
                continue  # the CONNECTED state change pokes us again
            try:
                self._refresh()
            except (KazooException, ZooKeeperError) as exc:
                level = logging.WARNING if self._client.connected else logging.DEBUG
                log.log(level, "%s: refreshing the master group failed (%r); retrying", self._role, exc)
                retry_after = _RETRY_DELAY
            except Exception:  # a bug must not kill the thread that keeps the election going
                log.exception("%s: unexpected error refreshing the master group; retrying", self._role)
                retry_after = _RETRY_DELAY

    def _list_group(self) -> list[str]:
        """The group's children, leaving a child watch; recreates the group path if deleted."""
        try:
            return _wait(self._client.get_children_async(self._path, watch=self._child_watch), self._op_timeout)
        except NoNodeError:
            _ensure_path(self._client, self._path, self._op_timeout)
            return _wait(self._client.get_children_async(self._path, watch=self._child_watch), self._op_timeout)

    def _stop_watching(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._client is not None:
            self._client.remove_listener(self._on_state)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self._op_timeout + 1.0)
        if self._owns_client and self._client is not None:
            _close(self._client)


# ----------------------------------------------------------------- election
class MasterContender(_GroupWatcher):
    """One master's candidacy in the group at ``url.path``.

    ``on_elected()`` is called when this master becomes leader and
    ``on_demoted(reason)`` when it stops being leader; they strictly alternate,
    starting with ``on_elected``. Both are called with an internal lock held,
    so they must return quickly and must not call ZooKeeper (hand the event to
    your own loop): ``on_demoted`` runs inside kazoo's connection thread when
    the connection is suspended or the session lost.
    """

    def __init__(self, url: ZkUrl, info: dict, on_elected: Callable[[], None], on_demoted: Callable[[str], None],
                 session_timeout: float = 10.0, client: KazooClient | None = None) -> None:
        super().__init__(url, client, session_timeout, role="contender")
        self._data = _encode_member_info(info)
        self._info = dict(info)
        self._on_elected = on_elected
        self._on_demoted = on_demoted
        # Guards leadership; held while calling back so that an election
        # decided just before a disconnection cannot be reported after it.
        self._lock = threading.RLock()
        self._leader = False
        self._epoch = 0  # bumped on every SUSPENDED/LOST/stop: decisions from before are void
        self._znode: str | None = None
        self._stopped = False
        self._callbacks = threading.local()

    @property
    def is_leader(self) -> bool:
        """True while this contender leads (connected, znode present and lowest)."""
        return self._leader

    @property
    def info(self) -> dict:
        """The info this contender advertises."""
        return dict(self._info)

    def start(self, timeout: float = 10.0) -> None:
        """Connect (unless given a client), join the group and start watching it.

        Raises :class:`ZooKeeperError` if ZooKeeper cannot be reached or the
        znode cannot be created within ``timeout`` seconds.
        """
        self._connect_and_listen(timeout)
        try:
            znode = self._create_znode(timeout)
        except (KazooException, ZooKeeperError) as exc:
            self._stop_watching()
            raise ZooKeeperError(f"could not join the master group {self._path}: {exc!r}") from None
        with self._lock:
            self._znode = znode
        log.info("joined the master group as %s", znode)
        self._start_worker()

    def fence(self) -> str:
        """The path of this contender's election znode, to fence registry writes on.

        Raises :class:`FencingError` if it has none (stopped, or its session
        was lost and it has not rejoined).
        """
        znode = self._znode
        if znode is None:
            raise FencingError(f"not the leader any more: no election znode in {self._path}")
        return znode

    def leader_info(self) -> dict | None:
        """The current leader's info, read from ZooKeeper now (None if nobody leads)."""
        if self._client is None:
            raise ZooKeeperError("the contender is not started")
        try:
            children = _wait(self._client.get_children_async(self._path), self._op_timeout)
            leader = _lowest_valid_member(self._client, self._path, children, self._skips, self._op_timeout)
        except KazooException as exc:
            raise ZooKeeperError(f"could not read the master group {self._path}: {exc!r}") from None
        return None if leader is None else leader.info

    def stop(self) -> None:
        """Leave the group: demote (calling ``on_demoted("stopped")`` if leading),
        delete the znode, stop the worker and close the client if owned.

        Safe to call from inside ``on_elected``/``on_demoted``: the cleanup
        then finishes in a background thread.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._epoch += 1
            self._demote("stopped")
            znode, self._znode = self._znode, None
        if getattr(self._callbacks, "depth", 0):
            threading.Thread(target=self._release, args=(znode,), name="mesoslike-ha-stop", daemon=True).start()
        else:
            self._release(znode)

    def _release(self, znode: str | None) -> None:
        # An owned client's session ends on close, taking the znode with it; a
        # borrowed client's session lives on, so its znode must go explicitly.
        if znode is not None and self._client is not None and (self._client.connected or not self._owns_client):
            try:
                _wait(self._client.delete_async(znode), self._op_timeout)
            except NoNodeError:
                pass
            except (KazooException, ZooKeeperError) as exc:  # the session's end removes it anyway
                log.warning("could not delete %s on stop: %r", znode, exc)
        self._stop_watching()
        log.info("left the master group %s", self._path)

    def _create_znode(self, timeout: float) -> str:
        result = self._client.create_async(f"{self._path}/{MEMBER_PREFIX}", self._data, ephemeral=True, sequence=True)
        return _wait(result, timeout)

    # -- leadership transitions (called with self._lock held)
    def _call_back(self, callback: Callable, *args: Any) -> None:
        # a depth, not a flag: on_elected may call stop(), which calls on_demoted
        self._callbacks.depth = getattr(self._callbacks, "depth", 0) + 1
        try:
            callback(*args)
        except Exception:  # a failing callback must not break the election
            log.exception("%s callback raised", getattr(callback, "__name__", "election"))
        finally:
            self._callbacks.depth -= 1

    def _demote(self, reason: str) -> None:
        if self._leader:
            self._leader = False
            log.warning("no longer the leading master: %s", reason)
            self._call_back(self._on_demoted, reason)

    def _state_changed(self, state: str) -> None:
        # Runs in kazoo's connection thread, before anything else can act on
        # the new state: the leader stops acting as one immediately.
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            with self._lock:
                self._epoch += 1
                if state == KazooState.LOST:
                    self._znode = None  # the session and its ephemeral znode are gone
                self._demote(f"ZooKeeper {'connection suspended' if state == KazooState.SUSPENDED else 'session lost'}")

    # -- the worker's view of the group
    def _refresh(self) -> None:
        with self._lock:
            if self._stopped:
                return
            epoch, znode = self._epoch, self._znode
        children = self._list_group()
        if znode is None or znode.rpartition("/")[2] not in children:
            self._rejoin(epoch, znode)
            return
        leader = _lowest_valid_member(self._client, self._path, children, self._skips, self._op_timeout)
        own_session = (self._client.client_id or (None,))[0]
        if (leader is not None and own_session is not None and leader.owner_session == own_session
                and leader.name != znode.rpartition("/")[2]):
            # A create whose reply was lost to a disconnection left a second
            # znode of ours; it would make us lead under a name we do not fence on.
            log.warning("deleting %s/%s, an orphan of an interrupted create", self._path, leader.name)
            _wait(self._client.delete_async(f"{self._path}/{leader.name}"), self._op_timeout)
            return
        self._decide(epoch, znode, leader is not None and leader.name == znode.rpartition("/")[2])

    def _rejoin(self, epoch: int, old_znode: str | None) -> None:
        """Our znode is gone (session lost, or deleted): demote and create a fresh one."""
        with self._lock:
            if self._stopped or epoch != self._epoch:
                return
            if old_znode is not None:
                self._demote(f"its election znode {old_znode} is gone")
        znode = self._create_znode(self._op_timeout)
        with self._lock:
            stopped = self._stopped
            if not stopped:
                self._znode = znode  # the next refresh (its creation fires the watch) checks it
        if stopped:
            _wait(self._client.delete_async(znode), self._op_timeout)
        else:
            log.info("rejoined the master group as %s", znode)

    def _decide(self, epoch: int, znode: str, lowest: bool) -> None:
        with self._lock:
            if self._stopped or epoch != self._epoch or znode != self._znode:
                return  # the connection changed while we read: a fresh refresh follows
            if lowest and not self._leader and self._client.state == KazooState.CONNECTED:
                self._leader = True
                log.info("elected leading master (%s)", znode)
                self._call_back(self._on_elected)
            elif not lowest and self._leader:
                self._demote(f"its election znode {znode} is gone or no longer the lowest")


def _encode_member_info(info: dict) -> bytes:
    if not isinstance(info, dict) or not isinstance(info.get("address"), str) or not info["address"]:
        raise ConfigError(f"a master's info must be a dict with a non-empty \"address\", got {info!r}")
    try:
        return json.dumps(info, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"a master's info must be JSON-serializable: {exc}") from None


# ----------------------------------------------------------------- detection
class LeaderDetector(_GroupWatcher):
    """Follows the leading master of the group at ``url.path``.

    ``on_change(info_or_None)`` is called from the detector's worker thread
    each time the leading znode changes (a new master, or the same master
    rejoining after losing its session). While ZooKeeper is unreachable the
    last known leader is kept.
    """

    def __init__(self, url: ZkUrl, on_change: Callable[[dict | None], None] | None = None,
                 client: KazooClient | None = None, session_timeout: float = 10.0) -> None:
        super().__init__(url, client, session_timeout, role="detector")
        self._on_change = on_change
        self._leader_name: str | None = None
        self._leader_info: dict | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Connect (unless given a client) and start watching; raises ZooKeeperError
        if ZooKeeper cannot be reached within ``timeout`` seconds."""
        self._connect_and_listen(timeout)
        self._start_worker()

    def stop(self) -> None:
        """Stop watching and close the client if owned."""
        self._stop_watching()

    def leader(self) -> dict | None:
        """The last leader seen (None if none yet)."""
        with self._wake:
            return None if self._leader_info is None else dict(self._leader_info)

    def wait_for_leader(self, timeout: float) -> dict:
        """Block until a leader is known; raise ZooKeeperError after ``timeout`` seconds."""
        with self._wake:
            if not self._wake.wait_for(lambda: self._leader_info is not None, timeout):
                raise ZooKeeperError(f"no leading master in {self._url} within {timeout:g} s")
            return dict(self._leader_info)

    def _refresh(self) -> None:
        children = self._list_group()
        member = _lowest_valid_member(self._client, self._path, children, self._skips, self._op_timeout)
        name, info = (None, None) if member is None else (member.name, member.info)
        with self._wake:
            changed = name != self._leader_name
            self._leader_name, self._leader_info = name, info
            self._wake.notify_all()
        if changed:
            log.info("leading master is now %s", "none" if info is None else f"{info['address']} ({name})")
            if self._on_change is not None:
                try:
                    self._on_change(None if info is None else dict(info))
                except Exception:
                    log.exception("leader change callback raised")


# ----------------------------------------------------------------- registry
#
# Layout (docs/ha.rst, "Registry storage and fencing"): ``<path>/registry``
# holds a small header; its children hold the records, each a fragment of a
# registry document (``Registry.to_document``'s format) that parses alone:
#
#   agents.NNNN              the agents whose id hashes to bucket NNNN
#   frameworks.NN            the frameworks whose id hashes to bucket NN
#   removed_agents.K         the K-th chunk of REMOVED_CHUNK removed agent ids,
#   removed_frameworks.K     in the order they were removed ({"first": seq, ...})
#   weights                  the role weights
#   quota                    the roles' quota
#
# A ``<path>/registry`` whose data has no "layout" holds a whole registry
# document (the format before sharding): it is loaded as such and the first
# store converts it, replacing the document by the header last.

#: agents are spread over this many shards by a stable hash of their id
#: (CRC-32 of its UTF-8 bytes, modulo); 100k agents of ~150 bytes make ~15 KB shards
AGENT_BUCKETS = 1024
#: frameworks likewise
FRAMEWORK_BUCKETS = 64
#: removed ids per chunk (10k remembered: at most 11 chunks per list)
REMOVED_CHUNK = 1000
#: the header's "layout"
REGISTRY_LAYOUT = "sharded"

_RECORD_KINDS = {"agents": (AGENT_BUCKETS, 4), "frameworks": (FRAMEWORK_BUCKETS, 2)}
_REMOVED_KINDS = ("removed_agents", "removed_frameworks")
#: sections stored whole, one znode each, named after the section
_SINGLE_SECTIONS = ("weights", "quota")
_SHARD_NAME = re.compile(r"(agents|frameworks|removed_agents|removed_frameworks)\.(\d{1,9})|(weights|quota)")
#: what one operation of a transaction costs beyond its path and data (its
#: header, version, flags and ACL), rounded up generously
_OP_OVERHEAD = 128


def _header() -> dict:
    return {"format": REGISTRY_FORMAT, "layout": REGISTRY_LAYOUT, "agent_buckets": AGENT_BUCKETS,
            "framework_buckets": FRAMEWORK_BUCKETS, "removed_chunk": REMOVED_CHUNK}


def _record_shard(kind: str, item_id: str) -> str:
    """The shard an agent's or framework's record belongs in."""
    buckets, digits = _RECORD_KINDS[kind]
    return f"{kind}.{zlib.crc32(item_id.encode('utf-8', 'surrogatepass')) % buckets:0{digits}d}"


def _shard_kind(name: str) -> str | None:
    """``agents``, ``frameworks``, ``removed_agents``, ``removed_frameworks`` or
    ``weights`` or ``quota`` for a shard's name; None for a foreign child."""
    match = _SHARD_NAME.fullmatch(name)
    return None if match is None else match.group(1) or match.group(3)


@attrs.define
class _Stored:
    """What the registry's znodes hold, as this store last read or wrote them."""

    header: dict | None = None  # None: no <path>/registry yet
    header_version: int = -1
    versions: dict[str, int] = attrs.field(factory=dict)           # shard -> its version
    members: dict[str, set[str]] = attrs.field(factory=dict)       # record shard -> the ids it (may) hold
    chunks: dict[str, tuple] = attrs.field(factory=dict)           # removed chunk -> (first seq, ids)
    removed: dict[str, tuple[int, list[str]]] = attrs.field(factory=dict)  # list -> (seq of its first id, ids)
    singles: dict[str, dict] = attrs.field(factory=dict)           # weights / quota -> what they hold
    stale: set[str] = attrs.field(factory=set)  # record shards holding records that belong elsewhere

    @property
    def current(self) -> bool:
        """The header is this code's layout: records sit in the shards it writes."""
        return self.header == _header()


@attrs.define
class _Plan:
    """The znodes one store writes (None: deletes), and what they hold after."""

    room: int  # the largest shard one transaction can carry
    writes: dict[str, bytes | None] = attrs.field(factory=dict)
    refused: dict[str, str] = attrs.field(factory=dict)  # shard -> why it cannot be written
    header: bytes | None = None  # the header to create (first) or to put in place of an old one (last)
    members: dict[str, set[str]] = attrs.field(factory=dict)
    chunks: dict[str, tuple | None] = attrs.field(factory=dict)  # None: deleted
    removed: dict[str, tuple[int, list[str]]] = attrs.field(factory=dict)
    singles: dict[str, dict] = attrs.field(factory=dict)  # weights / quota written (or deleted: {})

    def put(self, name: str, sections: dict) -> bool:
        """Plan to write shard ``name``; False, with the reason in ``refused``, if it cannot be."""
        try:
            data = _encode_json(name, {"format": REGISTRY_FORMAT, **sections})
            if len(data) > self.room:
                raise RegistryError(f"the registry shard {name} would be {len(data)} bytes, over the "
                                    f"{self.room}-byte limit of one ZooKeeper request (jute.maxbuffer, about 1 MiB)")
        except RegistryError as exc:
            self.refused[name] = str(exc)
            return False
        self.writes[name] = data
        return True

    def stored_part(self, changes: RegistryChanges) -> RegistryChanges:
        """The part of ``changes`` this plan stores: all but what lies in refused shards."""
        if not self.refused:
            return changes
        kinds = {_shard_kind(name) for name in self.refused}
        return attrs.evolve(
            changes, sections=changes.sections - kinds,
            **{kind: frozenset(item_id for item_id in getattr(changes, kind)
                               if _record_shard(kind, item_id) not in self.refused) for kind in _RECORD_KINDS})

    def apply(self, stored: _Stored, versions: dict[str, int | None]) -> None:
        """The writes succeeded with ``versions`` (None: deleted): remember what is stored now."""
        for name, version in versions.items():
            if name == "":
                stored.header, stored.header_version = _header(), version
            elif version is None:
                stored.versions.pop(name, None)
            else:
                stored.versions[name] = version
        for name, ids in self.members.items():
            if ids:
                stored.members[name] = ids
            else:
                stored.members.pop(name, None)
        for name, content in self.chunks.items():
            if content is None:
                stored.chunks.pop(name, None)
            else:
                stored.chunks[name] = content
        stored.removed.update(self.removed)
        stored.singles.update(self.singles)
        stored.stale.difference_update(self.writes)


def _plan(registry: Registry, changes: RegistryChanges, stored: _Stored, room: int) -> _Plan:
    """What to write so that the znodes hold ``registry``: the shards of the
    changed records — or, unless the stored layout is current, everything."""
    plan = _Plan(room)
    full = not stored.current
    for kind in _RECORD_KINDS:
        _plan_records(plan, kind, getattr(registry, kind), getattr(changes, kind), stored, full)
    for kind in _REMOVED_KINDS:
        if full or kind in changes.sections:
            _plan_removed(plan, kind, getattr(registry, kind), stored)
    for name in _SINGLE_SECTIONS:
        content = dict(sorted(getattr(registry, name).items()))
        if not (full or (name in changes.sections and content != stored.singles.get(name, {}))):
            continue
        if not content:
            if name in stored.versions:
                plan.writes[name] = None
            plan.singles[name] = {}
        elif plan.put(name, {name: content}):
            plan.singles[name] = content
    if full and (stored.header is not None or plan.writes):
        plan.header = _encode_json("header", _header())
    return plan


def _plan_records(plan: _Plan, kind: str, records: dict, changed: frozenset[str], stored: _Stored,
                  full: bool) -> None:
    """Rewrite the shards of ``changed`` ids (all shards if ``full``) from ``records``."""
    candidates: dict[str, set[str]] = {}
    if full:
        for item_id in records:
            candidates.setdefault(_record_shard(kind, item_id), set()).add(item_id)
        names = set(candidates) | {name for name in stored.versions if _shard_kind(name) == kind}
    else:
        for item_id in changed:
            candidates.setdefault(_record_shard(kind, item_id), set()).add(item_id)
        names = set(candidates) | {name for name in stored.stale if _shard_kind(name) == kind}
    encode = agent_record if kind == "agents" else framework_record
    for name in names:
        ids = sorted(item_id for item_id in candidates.get(name, set()) | stored.members.get(name, set())
                     if item_id in records and _record_shard(kind, item_id) == name)
        if not ids:
            if name in stored.versions:
                plan.writes[name] = None
            plan.members[name] = set()
        elif plan.put(name, {kind: {item_id: encode(records[item_id]) for item_id in ids}}):
            plan.members[name] = set(ids)


def _plan_removed(plan: _Plan, kind: str, ids: list[str], stored: _Stored) -> None:
    """Rewrite the chunks of a removed list that differ from what is stored.

    Chunk K holds the ids removed in positions K*REMOVED_CHUNK.. of the
    list's whole history; the list's ``start`` (the position of its first
    id) moves on as the oldest ids are forgotten, so a removal rewrites the
    last chunk and, once the list is full, the first."""
    start, old = stored.removed.get(kind, (0, []))
    start = _removed_start(start, old, ids)
    chunks = {}
    index = 0
    while index < len(ids):
        position = start + index
        end = (position // REMOVED_CHUNK + 1) * REMOVED_CHUNK - start
        chunks[f"{kind}.{position // REMOVED_CHUNK}"] = (position, tuple(ids[index:end]))
        index = end
    for name, content in chunks.items():
        if stored.chunks.get(name) != content and plan.put(name, {"first": content[0], kind: list(content[1])}):
            plan.chunks[name] = content
    for name in stored.versions:
        if _shard_kind(name) == kind and name not in chunks:
            plan.writes[name] = None
            plan.chunks[name] = None
    plan.removed[kind] = (start, list(ids))


def _removed_start(start: int, old: list[str], new: list[str]) -> int:
    """The position of ``new[0]`` in the list's history, given that ``old``
    (stored, its first id at ``start``) became ``new`` by dropping ids at the
    front and appending at the end — or, if it did not, a fresh position after ``old``."""
    if old and new:
        try:
            dropped = old.index(new[0])
        except ValueError:
            dropped = len(old)
        if new[:len(old) - dropped] == old[dropped:]:
            return start + dropped
    return start + len(old)


def _encode_json(name: str, value: Any) -> bytes:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise RegistryError(f"the registry's {name} is not JSON-serializable: {exc}") from None


def _decode_json(node: str, data: bytes) -> dict:
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RegistryError(f"the registry record {node} is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise RegistryError(f"the registry record {node} is not a JSON object")
    return document


def _encode_registry(document: dict) -> dict[str, bytes]:
    """Every shard of a whole registry document, as a first store writes them
    (name -> data). Raises :class:`RegistryError` if the document does not
    parse or a shard is too big for one ZooKeeper request."""
    if not isinstance(document, dict):
        raise RegistryError(f"the registry document must be a dict, got {type(document).__name__}")
    plan = _plan(_from_document(REGISTRY_NODE, document), RegistryChanges(), _Stored(), _room(f"/{REGISTRY_NODE}", "/"))
    if plan.refused:
        raise RegistryError("; ".join(plan.refused.values()))
    return plan.writes


def _op_cost(path: str, data: bytes | None) -> int:
    return len(path.encode("utf-8")) + len(data or b"") + _OP_OVERHEAD


def _room(node: str, fence: str) -> int:
    """The largest shard under ``node`` that fits, with the fence check, in one transaction."""
    return MAX_REGISTRY_BYTES - _op_cost(fence, None) - _op_cost(f"{node}/removed_frameworks.999999999", None)


@attrs.frozen
class _Op:
    name: str            # "" for the header
    path: str
    data: bytes | None   # None: delete
    version: int         # expected version; -1: create


class ZooKeeperRegistry:
    """The registry in the znodes under ``<path>/registry``: loaded in
    parallel, written shard by shard with transactions fenced on the writer's
    election znode and on each shard's version.

    It remembers what it last read or wrote (each znode's version, which ids
    each shard holds), so :meth:`store` must follow a :meth:`load`.
    """

    def __init__(self, client: KazooClient, path: str, timeout: float = 10.0) -> None:
        self._client = client
        self.node = f"{path.rstrip('/')}/{REGISTRY_NODE}"
        self._timeout = timeout
        self._stored: _Stored | None = None

    @property
    def versions(self) -> dict[str, int]:
        """Each znode's version as last read or written ("" is the header); {} before load()."""
        if self._stored is None:
            return {}
        header = {"": self._stored.header_version} if self._stored.header is not None else {}
        return {**header, **self._stored.versions}

    # ------------------------------------------------------------- load
    def load(self) -> Registry:
        """The stored registry (empty if there is none).

        Shards that do not parse, and records inside them that do not, are
        skipped with a warning each. Raises :class:`RegistryError` if
        ``<path>/registry`` itself is not a registry header or document
        (the caller decides whether to stop or start afresh) and
        :class:`ZooKeeperError` if ZooKeeper cannot be read.
        """
        self._stored = None
        try:
            data, stat = _wait(self._client.get_async(self.node), self._timeout)
        except NoNodeError:
            self._stored = _Stored()
            return Registry()
        except (KazooException, ZooKeeperError) as exc:
            raise ZooKeeperError(f"could not read the registry {self.node}: {exc!r}") from None
        try:
            header = _decode_json(self.node, data)
        except RegistryError as exc:
            raise RegistryError(f"{exc}; repair or delete it to start afresh") from None
        stored = _Stored(header=header, header_version=stat.version)
        shards = self._read_shards()
        if "layout" not in header:
            log.info("the registry %s is one document (the format before sharding): the first store converts it",
                     self.node)
            stored.versions = {name: version for name, (_, version) in shards.items() if _shard_kind(name)}
            registry = _from_document(self.node, header)
        elif header.get("layout") == REGISTRY_LAYOUT and header.get("format") == REGISTRY_FORMAT:
            registry = _assemble(self.node, shards, stored)
        else:
            raise RegistryError(f"the registry {self.node} has layout {header.get('layout')!r}, format "
                                f"{header.get('format')!r}: not one this master reads")
        self._stored = stored
        return registry

    def _read_shards(self) -> dict[str, tuple[bytes, int]]:
        """name -> (data, version) of every child of the registry node, read in parallel."""
        try:
            names = _wait(self._client.get_children_async(self.node), self._timeout)
            pending = [(name, self._client.get_async(f"{self.node}/{name}")) for name in names]
            shards = {}
            for name, result in pending:
                try:
                    data, stat = _wait(result, self._timeout)
                except NoNodeError:  # deleted since the listing
                    continue
                shards[name] = (data, stat.version)
        except NoNodeError:
            return {}
        except (KazooException, ZooKeeperError) as exc:
            raise ZooKeeperError(f"could not read the registry {self.node}: {exc!r}") from None
        return shards

    # ------------------------------------------------------------- store
    def store(self, registry: Registry, fence: str) -> int:
        """Write what changed in ``registry`` (its ``changes()``; everything
        when converting an old document) if ``fence`` (the writer's election
        znode) still exists and each znode written is still at the version
        last read or written. Marks the changes stored and returns how many
        znodes were written or deleted.

        Large writes go out as several transactions, each under
        ``MAX_REGISTRY_BYTES`` and each fenced. Raises :class:`FencingError`
        if a check failed (that transaction wrote nothing; others of the same
        store may have) and :class:`ZooKeeperError` if the outcome is
        unknown: load() again before storing. Raises :class:`RegistryError`
        after writing the rest if some shards cannot be written (too big for
        one request, or not serializable): their changes stay unstored, to be
        tried again by the next store.
        """
        if not isinstance(fence, str) or not fence.startswith("/"):
            raise FencingError(f"not the leader any more: no election znode to fence on ({fence!r})")
        stored = self._stored
        if stored is None:
            raise FencingError("registry changed under us: load() it before storing")
        changes = registry.changes()
        plan = _plan(registry, changes, stored, _room(self.node, fence))
        batches, last = self._batches(plan, stored, fence)
        if plan.refused:
            last = []  # an old document is replaced only once all of it is in the shards
        try:
            versions = self._commit(batches, fence)
            if last:  # only once every shard is in place
                versions.update(self._commit([last], fence))
        except ZooKeeperError:
            self._stored = None  # partly written, or unknown: what we know is stale
            raise
        plan.apply(stored, versions)
        registry.mark_stored(plan.stored_part(changes))
        if versions:
            log.debug("registry: wrote %d znodes in %d transactions", len(versions), len(batches) + bool(last))
        if plan.refused:
            raise RegistryError(f"{len(plan.refused)} registry shard(s) not written, their changes kept to retry "
                                f"(the other {len(versions)} znodes were written): " + "; ".join(plan.refused.values()))
        return len(versions)

    def _batches(self, plan: _Plan, stored: _Stored, fence: str) -> tuple[list[list[_Op]], list[_Op]]:
        """The plan's operations packed into transactions of at most
        MAX_REGISTRY_BYTES, and a last one. A new header goes first (the
        shards are its children); a header replacing an old document goes
        alone, last, so that the document is only replaced once every shard
        is written."""
        ops = [_Op(name, f"{self.node}/{name}", data, stored.versions.get(name, -1))
               for name, data in sorted(plan.writes.items())]
        header = [] if plan.header is None else [_Op("", self.node, plan.header, stored.header_version)]
        first = header if stored.header is None else []
        batches: list[list[_Op]] = []
        batch, size = list(first), _op_cost(fence, None) + sum(_op_cost(op.path, op.data) for op in first)
        for op in ops:
            cost = _op_cost(op.path, op.data)
            if size + cost > MAX_REGISTRY_BYTES and batch:
                batches.append(batch)
                batch, size = [], _op_cost(fence, None)
            batch.append(op)
            size += cost
        if batch:
            batches.append(batch)
        return batches, header if stored.header is not None else []

    def _commit(self, batches: list[list[_Op]], fence: str) -> dict[str, int | None]:
        """Send the transactions, pipelined (ZooKeeper applies one session's
        requests in order). Returns the new version of each znode (None: deleted)."""
        sent = [(batch, self._transaction(batch, fence).commit_async()) for batch in batches]
        versions: dict[str, int | None] = {}
        errors: list[ZooKeeperError] = []
        for batch, result in sent:
            try:  # once one answer is missing, do not wait the full timeout for each of the others
                results = _wait(result, 0.0 if errors else self._timeout)
            except (KazooException, ZooKeeperError) as exc:
                errors.append(ZooKeeperError(f"a registry write under {self.node} may or may not have "
                                             f"happened: {exc!r}"))
                continue
            refused = _refusal(results, batch, fence)
            if refused is not None:
                errors.append(refused)
                continue
            for op, outcome in zip(batch, results[1:]):
                versions[op.name] = None if op.data is None else 0 if op.version == -1 else outcome.version
        if errors:
            raise next((e for e in errors if isinstance(e, FencingError)), errors[0])
        return versions

    def _transaction(self, batch: list[_Op], fence: str):
        transaction = self._client.transaction()
        transaction.check(fence, -1)  # version -1: any version, the znode just has to exist
        for op in batch:
            if op.data is None:
                transaction.delete(op.path, version=op.version)
            elif op.version == -1:
                transaction.create(op.path, op.data)
            else:
                transaction.set_data(op.path, op.data, version=op.version)
        return transaction


def _refusal(results: list, batch: list[_Op], fence: str) -> ZooKeeperError | None:
    """The error of a transaction that failed (None if it succeeded)."""
    for index, result in enumerate(results):
        if not isinstance(result, Exception) or isinstance(result, (RolledBackError, RuntimeInconsistency)):
            continue
        if index == 0:
            if isinstance(result, NoNodeError):
                return FencingError(f"not the leader any more: its election znode {fence} is gone")
            break
        op = batch[index - 1]
        if isinstance(result, (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)):
            found = "exists" if isinstance(result, NodeExistsError) else \
                "is absent" if isinstance(result, NoNodeError) else \
                "has children" if isinstance(result, NotEmptyError) else "has another version"
            return FencingError(f"registry changed under us: {op.path} {found} (expected version {op.version})")
        break
    failed = [result for result in results if isinstance(result, Exception)]
    return ZooKeeperError(f"a registry write under {batch[0].path.rpartition('/')[0]} failed: {failed[0]!r}") \
        if failed else None


def _from_document(node: str, document: dict) -> Registry:
    try:
        return Registry.from_document(document)
    except RegistryFormatError as exc:
        raise RegistryError(f"the registry record {node}: {exc}") from None


def _assemble(node: str, shards: dict[str, tuple[bytes, int]], stored: _Stored) -> Registry:
    """The registry from its shards (and, in ``stored``, what each holds).
    A shard that does not parse is skipped with a warning; so is a foreign child."""
    registry = Registry()
    misplaced = []
    removed: dict[str, list[tuple[int, str]]] = {kind: [] for kind in _REMOVED_KINDS}
    for name in sorted(shards):
        data, version = shards[name]
        kind = _shard_kind(name)
        if kind is None:
            log.warning("registry: ignoring %s/%s: not a registry shard", node, name)
            continue
        stored.versions[name] = version
        try:
            fragment = _decode_json(f"{node}/{name}", data)
            if kind in _REMOVED_KINDS:
                first, ids = _removed_chunk(fragment, kind)
                stored.chunks[name] = (first, tuple(ids))
                removed[kind] += [(first + index, item) for index, item in enumerate(ids) if isinstance(item, str)]
                continue
            part = _from_document(f"{node}/{name}", fragment)
        except RegistryError as exc:
            log.warning("registry: skipping the shard %s/%s (its records stay unknown): %s", node, name, exc)
            continue
        if kind in _SINGLE_SECTIONS:
            getattr(registry, kind).update(getattr(part, kind))
            stored.singles[kind] = dict(getattr(part, kind))
            continue
        records = getattr(part, kind)
        stored.members[name] = set(records)
        for item_id, info in records.items():
            home = _record_shard(kind, item_id)
            if home == name:
                getattr(registry, kind)[item_id] = info
            else:  # written under another bucket count, or by hand: moved at the next store
                misplaced.append((kind, item_id, info))
                stored.stale.update((name, home))
                stored.members.setdefault(home, set()).add(item_id)
    for kind, item_id, info in misplaced:
        getattr(registry, kind).setdefault(item_id, info)
    for kind, pairs in removed.items():
        ids = list(dict.fromkeys(item for _, item in sorted(pairs)))[-MAX_REMOVED:]
        setattr(registry, kind, ids)
        start = min((position for position, item in pairs if item == ids[0]), default=0) if ids else 0
        stored.removed[kind] = (start, list(ids))
    return registry


def _removed_chunk(fragment: dict, kind: str) -> tuple[int, list]:
    first, ids = fragment.get("first"), fragment.get(kind)
    if not isinstance(first, int) or isinstance(first, bool) or first < 0 or not isinstance(ids, list):
        raise RegistryError(f"a chunk of {kind} needs \"first\" (an int >= 0) and \"{kind}\" (a list)")
    return first, ids


class FencedRegistryStore:
    """Adapts :class:`ZooKeeperRegistry` to the master's ``load() -> Registry``
    / ``store(registry)`` store protocol, fencing every write on the election
    znode that ``fence()`` (e.g. ``contender.fence``) named when the registry
    was loaded: a master that lost that znode and joined again under a new
    one is not the leader that read the registry, and may not write it.

    ``store`` raises :class:`FencingError` if called before ``load`` (or
    after a failed write, until the next ``load``): a new leader must read
    what its predecessor wrote before writing.
    """

    def __init__(self, registry: ZooKeeperRegistry, fence: Callable[[], str]) -> None:
        self._registry = registry
        self._fence = fence
        self._loaded_under: str | None = None

    def load(self) -> Registry:
        self._loaded_under = None
        fence = self._fence()
        registry = self._registry.load()
        self._loaded_under = fence
        return registry

    def store(self, registry: Registry) -> None:
        fence = self._fence()
        if self._loaded_under is not None and fence != self._loaded_under:
            raise FencingError(f"not the leader any more: it read the registry as {self._loaded_under}, "
                               f"now it is {fence}")
        self._registry.store(registry, fence)
