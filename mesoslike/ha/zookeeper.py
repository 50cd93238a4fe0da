"""ZooKeeper at the edge: connections, leader election and leader detection.

With :mod:`mesoslike.ha.registry_store` (the registry in ZooKeeper) these are
the only modules that import kazoo. Two things live here (docs/ha.rst
describes the protocol):

* :class:`MasterContender` — a master joins the group ``<path>`` with an
  ephemeral sequential znode ``<path>/json.info_<seq>`` holding its JSON
  info; the lowest valid sequence leads. A leader that loses its ZooKeeper
  connection (SUSPENDED) or session (LOST) is demoted at once, in kazoo's
  state listener, before anything else happens.
* :class:`LeaderDetector` — agents and scheduler drivers watch the group and
  follow the leader.

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
from typing import Any, Callable, Iterator

import attrs
from kazoo.client import KazooClient, KazooState
from kazoo.security import make_acl, make_digest_acl
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from mesoslike.errors import ConfigError, MesoslikeError
from mesoslike.ha.connection_log import ConnectionLog
from mesoslike.ha.session_guard import SessionGuard
from mesoslike.ha.url import ZkUrl
from mesoslike.master.storage import RegistryFencedError
from mesoslike.observations import NOTICE

__all__ = [
    "ZooKeeperError", "RegistryError", "FencingError", "connect", "MasterContender", "LeaderDetector",
    "MEMBER_PREFIX", "MESOSLIKE_ADDRESS", "REGISTRY_NODE", "MAX_REGISTRY_BYTES",
]

log = logging.getLogger("mesoslike.ha")

#: name prefix of a master's election znode (ZooKeeper appends 10 digits)
MEMBER_PREFIX = "json.info_"
#: where a member whose ``address`` is Mesos's (an object: a master's znode, for Mesos's clients) keeps ours
MESOSLIKE_ADDRESS = "mesoslike_address"
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


class FencingError(ZooKeeperError, RegistryFencedError):
    """A fenced registry write was refused: the writer is not the leader any
    more, or the registry changed since it was read. Nothing was written.
    The master's store protocol knows it as a ``RegistryFencedError``."""


# ----------------------------------------------------------------- connect
def connect(url: ZkUrl, timeout: float = 10.0, session_timeout: float = 10.0) -> KazooClient:
    """A started kazoo client for ``url``'s ensemble, with ``url.path`` created.

    Raises :class:`ZooKeeperError` if no server answers within ``timeout``
    seconds. ``session_timeout`` is asked of the server, which clamps it to
    its ``[minSessionTimeout, maxSessionTimeout]`` (2 and 20 ticks by default).
    """
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=_RECONNECT_MAX_DELAY)
    acl = master_acl(url.auth) if url.auth else None
    # kazoo warns at every failed attempt, about once a second while the server is down: the client's own
    # logger, filtered to one line per outage and one when it is back (mesoslike.ha.connection_log)
    connection_log = ConnectionLog(url.hosts)
    try:
        client = KazooClient(hosts=url.hosts, timeout=session_timeout, connection_retry=retry, default_acl=acl,
                             auth_data=[("digest", ":".join(url.auth))] if url.auth else None,
                             logger=connection_log)
    except (KazooException, ValueError) as exc:
        raise ZooKeeperError(f"cannot use ZooKeeper hosts {url.hosts!r}: {exc}") from None
    client.add_listener(connection_log.state_changed)
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        raise ZooKeeperError(f"could not connect to ZooKeeper at {url.hosts} within {timeout:g} s "
                             f"(is it running, and is {url} the right URL?)") from None
    try:
        _ensure_path(client, url.path, timeout, acl)
        if acl is not None:
            _check_group(client, url.path, acl, timeout)
    except ZooKeeperError:
        _close(client)
        raise
    log.info("connected to ZooKeeper at %s%s", url.hosts, " (digest-authenticated)" if acl else "")
    return client


def master_acl(auth: tuple[str, str]) -> list:
    """The znode ACL of a secured cluster: the masters' digest identity may
    do everything, anyone may read (agents and frameworks find the leader)."""
    user, password = auth
    return [make_digest_acl(user, password, all=True), make_acl("world", "anyone", read=True)]


def _check_group(client: KazooClient, path: str, acl: list, timeout: float) -> None:
    """Refuse (ZooKeeperError, naming the znode, its ACL and the way out)
    a group path, or a child of it, whose ACL is not ``acl``: a path made
    before the cluster was secured, or by someone else — who may hold an
    ephemeral member there that would lead, or registry znodes of their
    own. Guarding such a path would not remove what is already in it."""
    expected = _acl_text(acl)
    found = _acls(client, path, timeout)
    if found != set(acl):
        raise ZooKeeperError(
            f"the ZooKeeper group path {path} has the ACL {_acl_text(found)}, not the masters' ({expected}): it was "
            "made before the cluster was secured, or by another client, which may squat in it (an ephemeral member "
            "that would lead, registry znodes of its own). Remove it (zkCli.sh: deleteall " + path + ") or set its "
            "ACL once you know what it holds, then start the master again")
    try:
        children = _wait(client.get_children_async(path), timeout)
    except KazooException as exc:
        raise ZooKeeperError(f"cannot list the group path {path}: {exc!r}") from None
    for child in sorted(children):
        try:
            found = _acls(client, f"{path}/{child}", timeout)
        except NoNodeError:
            continue   # went away since the listing
        if found != set(acl):
            raise ZooKeeperError(
                f"the ZooKeeper group {path} holds {child} with the ACL {_acl_text(found)}, not the masters' "
                f"({expected}): no master made it (a squatter's member would lead the group). Remove it "
                f"(zkCli.sh: deleteall {path}/{child}), then start the master again")


def _acls(client: KazooClient, path: str, timeout: float) -> set:
    try:
        return set(_wait(client.get_acls_async(path), timeout)[0])
    except NoNodeError:
        raise
    except KazooException as exc:
        raise ZooKeeperError(f"cannot read the ACL of {path}: {exc!r}") from None


def _acl_text(acl: Any) -> str:
    """An ACL as zkCli writes it: ``digest:masters:...:cdrwa,world:anyone:r``."""
    letters = [(1, "r"), (2, "w"), (4, "c"), (8, "d"), (16, "a")]
    parts = sorted(f"{entry.id.scheme}:{entry.id.id}:" + "".join(c for bit, c in letters if entry.perms & bit)
                   for entry in acl)
    return ",".join(parts) or "(none)"


def _ensure_path(client: KazooClient, path: str, timeout: float, acl: list | None = None) -> None:
    """Create ``path`` (and its parents) if absent, with ``acl`` (the masters'
    on a secured cluster: nobody else may add a member or a registry znode)."""
    try:
        _wait(client.ensure_path_async(path, acl=acl), timeout)
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
    """The info dict of an election znode (``address`` our peers' address),
    or the reason it is not valid. A master's znode is Mesos's MasterInfo
    JSON (``address`` an object, for Mesos's clients) with our address as
    :data:`MESOSLIKE_ADDRESS`; another group's member has ``address``
    itself."""
    try:
        info = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return f"its data is not JSON ({exc})"
    if not isinstance(info, dict):
        return "its data is not a JSON object"
    if isinstance(info.get("address"), dict):
        ours = info.get(MESOSLIKE_ADDRESS)
        if not isinstance(ours, str) or not ours:
            return f"its JSON is Mesos's MasterInfo without \"{MESOSLIKE_ADDRESS}\" (a Mesos master's?)"
        info = {**info, "address": ours}
    if not isinstance(info.get("address"), str) or not info["address"]:
        return "its JSON has no \"address\""
    return info


def _lowest_valid_member(client: KazooClient, path: str, children: list[str], skips: _SkipLog,
                         timeout: float, acl: list | None = None) -> _Member | None:
    """The leader: the lowest-sequence election znode whose data is valid
    (and, with ``acl``, that carries the masters' ACL)."""
    return next(_valid_members(client, path, children, skips, timeout, acl), None)


def _valid_members(client: KazooClient, path: str, children: list[str], skips: _SkipLog,
                   timeout: float, acl: list | None = None) -> Iterator[_Member]:
    """The election znodes whose data is valid, lowest sequence first (read
    one by one, as asked for). With ``acl`` (a secured group), a znode
    without exactly that ACL is no master's: skipped, and logged once."""
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
        if acl is not None:
            try:
                found = _acls(client, f"{path}/{name}", timeout)
            except NoNodeError:
                continue
            if found != set(acl):
                skips.skip(name, f"its ACL {_acl_text(found)} is not the masters': no master made it (a squatter?)")
                continue
        yield _Member(name=name, sequence=sequence, info=info, owner_session=stat.owner_session_id)


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
        """The kazoo client in use (borrowed or owned); ZooKeeperError before start()."""
        if self._client is None:
            raise ZooKeeperError(f"this {self._role} is not started")
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
            if not self.client.connected:
                continue  # the CONNECTED state change pokes us again
            try:
                self._refresh()
            except (KazooException, ZooKeeperError) as exc:
                level = logging.WARNING if self.client.connected else logging.DEBUG
                log.log(level, "%s: refreshing the master group failed (%r); retrying", self._role, exc)
                retry_after = _RETRY_DELAY
            except Exception:  # a bug must not kill the thread that keeps the election going
                log.exception("%s: unexpected error refreshing the master group; retrying", self._role)
                retry_after = _RETRY_DELAY

    def _list_group(self) -> list[str]:
        """The group's children, leaving a child watch; recreates the group path if deleted."""
        try:
            return _wait(self.client.get_children_async(self._path, watch=self._child_watch), self._op_timeout)
        except NoNodeError:
            _ensure_path(self.client, self._path, self._op_timeout)
            return _wait(self.client.get_children_async(self._path, watch=self._child_watch), self._op_timeout)

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
    starting with ``on_elected``. ``on_znode(path_or_None)``, if given, is
    called each time the contender's election znode changes: created (on
    start, or on rejoining with a new session) or gone (None: the session was
    lost, or stopped) — a master that kept its state through a connection
    break learns from it that its session is known lost. All three are called
    with an internal lock held, so they must return quickly and must not call
    ZooKeeper (hand the event to your own loop): ``on_demoted`` and
    ``on_znode`` run inside kazoo's connection thread when the connection is
    suspended or the session lost.

    ``session_guard``: with a client of its own, start a guard process
    (:mod:`mesoslike.ha.session_guard`) that closes the contender's session
    as soon as this process dies, so that another contender leads without
    waiting out the session timeout; told every new session, and bye on stop.
    """

    def __init__(self, url: ZkUrl, info: dict, on_elected: Callable[[], None], on_demoted: Callable[[str], None],
                 session_timeout: float = 10.0, client: KazooClient | None = None,
                 on_znode: Callable[[str | None], None] | None = None, warn_unverified: bool = True,
                 session_guard: bool = False) -> None:
        super().__init__(url, client, session_timeout, role="contender")
        #: the process that closes this contender's session when this process dies (a borrowed client's
        #: session is its owner's to guard)
        self._guard: SessionGuard | None = SessionGuard(url.hosts, session_timeout, url.auth) \
            if session_guard and client is None else None
        #: log (once per znode) a member without the group's ACL that outranks this one (docs/security.rst):
        #: masters do; groups that never have an ACL of their own (the Fuxi and service schedulers') do not,
        #: or every failover of theirs would warn of what their docs already say
        self._warn_unverified = warn_unverified
        #: a secured group's ACL (--zk-auth): members without it never lead; None: no member can be verified
        self._acl = master_acl(url.auth) if url.auth else None
        self._unverified_warned: set[str] = set()
        self._data = _encode_member_info(info)
        self._info = dict(info)
        self._on_elected = on_elected
        self._on_demoted = on_demoted
        self._on_znode = on_znode
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
        if self._guard is not None:
            try:
                self._guard.start()
            except OSError as exc:
                self._stop_watching()
                raise ZooKeeperError(f"could not start the ZooKeeper session guard: {exc}") from None
            self._guard.tell(self.client.client_id)   # later sessions: _state_changed
        try:
            znode = self._create_znode(timeout)
        except (KazooException, ZooKeeperError) as exc:
            self._stop_watching()
            raise ZooKeeperError(f"could not join the master group {self._path}: {exc!r}") from None
        with self._lock:
            self._set_znode(znode)
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

    def confirm(self, timeout: float) -> str | None:
        """Ask ZooKeeper now whether this contender's znode exists and is owned
        by its session: None if so, else why not (no znode, another owner, the
        session expired, no answer within ``timeout`` seconds). Blocks for one
        round trip — for a master that was frozen and whose session may have
        expired before kazoo's thread could say so."""
        try:
            client = self.client
            stat = _wait(client.exists_async(self.fence()), timeout)
            session = client.client_id
        except (KazooException, ZooKeeperError) as exc:
            return type(exc).__name__
        if stat is None:
            return "the election znode is gone"
        if session is None or stat.ephemeralOwner != session[0]:
            return "the election znode is not ours any more"
        return None

    def leader_info(self) -> dict | None:
        """The current leader's info, read from ZooKeeper now (None if nobody leads).
        Without a connection to ZooKeeper a ZooKeeperError at once: a read
        would wait the whole operation timeout, and a follower answering
        ``mesoslike state`` must say it does not know rather than go silent."""
        client = self.client
        if not client.connected:
            raise ZooKeeperError(f"not connected to ZooKeeper ({client.state}): the leader of {self._path} is unknown")
        try:
            children = _wait(client.get_children_async(self._path), self._op_timeout)
            leader = _lowest_valid_member(client, self._path, children, self._skips, self._op_timeout)
        except KazooException as exc:
            raise ZooKeeperError(f"could not read the master group {self._path}: {exc!r}") from None
        return None if leader is None else leader.info

    def members(self) -> list[dict]:
        """The group's members, read from ZooKeeper now, in election order
        (the first leads): each member's info (``id``, ``address``,
        ``http_address``) with ``leader`` true for the first. Members whose
        znode holds no valid info are left out (as the election skips them).
        O(members) reads."""
        client = self.client
        try:
            children = _wait(client.get_children_async(self._path), self._op_timeout)
            members = list(_valid_members(client, self._path, children, self._skips, self._op_timeout))
        except KazooException as exc:
            raise ZooKeeperError(f"could not read the master group {self._path}: {exc!r}") from None
        return [{k: str(member.info.get(k, "")) for k in ("id", "address", "http_address")} | {"leader": i == 0}
                for i, member in enumerate(members)]

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
            znode = self._znode
            self._set_znode(None)
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

    def _stop_watching(self) -> None:
        super()._stop_watching()
        if self._guard is not None:
            self._guard.bye()   # after the session's close: a master killed before this still has its guard

    def _create_znode(self, timeout: float) -> str:
        result = self.client.create_async(f"{self._path}/{MEMBER_PREFIX}", self._data, ephemeral=True, sequence=True)
        return _wait(result, timeout)

    # -- leadership transitions (called with self._lock held)
    def _set_znode(self, znode: str | None) -> None:
        if znode != self._znode:
            self._znode = znode
            if self._on_znode is not None:
                self._call_back(self._on_znode, znode)

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
        if state == KazooState.CONNECTED and self._guard is not None:
            self._guard.tell(self.client.client_id)   # a new session after LOST; the same one is not told again
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            with self._lock:
                self._epoch += 1
                if state == KazooState.LOST:
                    self._set_znode(None)  # the session and its ephemeral znode are gone
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
        leader = _lowest_valid_member(self.client, self._path, children, self._skips, self._op_timeout, self._acl)
        own_session = (self.client.client_id or (None,))[0]
        if self._warn_unverified and leader is not None and self._acl is None \
                and leader.name != znode.rpartition("/")[2] \
                and leader.owner_session != own_session and leader.name not in self._unverified_warned:
            if len(self._unverified_warned) >= 1000:   # one per leader znode seen: bounded all the same
                self._unverified_warned.clear()
            self._unverified_warned.add(leader.name)
            log.warning("%s/%s (%s) outranks this master and cannot be verified as a master: the group has no "
                        "--zk-auth, so any ZooKeeper client may lead it (docs/security.rst)", self._path, leader.name,
                        str(leader.info.get("address"))[:200])
        if (leader is not None and own_session is not None and leader.owner_session == own_session
                and leader.name != znode.rpartition("/")[2]):
            # A create whose reply was lost to a disconnection left a second
            # znode of ours; it would make us lead under a name we do not fence on.
            log.warning("deleting %s/%s, an orphan of an interrupted create", self._path, leader.name)
            _wait(self.client.delete_async(f"{self._path}/{leader.name}"), self._op_timeout)
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
                self._set_znode(znode)  # the next refresh (its creation fires the watch) checks it
        if stopped:
            _wait(self.client.delete_async(znode), self._op_timeout)
        else:
            log.info("rejoined the master group as %s", znode)

    def _decide(self, epoch: int, znode: str, lowest: bool) -> None:
        with self._lock:
            if self._stopped or epoch != self._epoch or znode != self._znode:
                return  # the connection changed while we read: a fresh refresh follows
            if lowest and not self._leader and self.client.state == KazooState.CONNECTED:
                self._leader = True
                log.log(NOTICE, "elected leading master (%s)", znode)   # said at the default level
                self._call_back(self._on_elected)
            elif not lowest and self._leader:
                self._demote(f"its election znode {znode} is gone or no longer the lowest")


def _encode_member_info(info: dict) -> bytes:
    if not isinstance(info, dict) or isinstance(_decode_member_info(json.dumps(info, default=str).encode()), str):
        raise ConfigError(f"a master's info must be a dict with a non-empty \"address\" (or Mesos's address "
                          f"object and \"{MESOSLIKE_ADDRESS}\"), got {info!r}")
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
            leader = self._wake.wait_for(lambda: self._leader_info, timeout)
            if not leader:
                raise ZooKeeperError(f"no leading master in {self._url} within {timeout:g} s")
            return dict(leader)

    def _refresh(self) -> None:
        children = self._list_group()
        member = _lowest_valid_member(self.client, self._path, children, self._skips, self._op_timeout)
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
