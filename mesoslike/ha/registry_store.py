"""The master's registry in ZooKeeper: sharded, incremental, fenced writes.

:class:`ZooKeeperRegistry` keeps the hard state (``mesoslike.master.registry``)
in shards under ``<path>/registry`` — agents and frameworks bucketed by a
hash of their id — loads them in parallel and writes them incrementally:
only the shards that changed, in transactions fenced on the writer's
election znode and on each shard's version. :class:`FencedRegistryStore`
adapts it to the master runtime's store protocol. docs/ha.rst, "Registry
storage and fencing", describes the layout and why a write split into
several transactions is safe.
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from typing import Any, Callable, Protocol, TypeVar

import attrs
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError,
                              RolledBackError, RuntimeInconsistency)
from kazoo.protocol.states import Callback, EventType, WatchedEvent

from mesoslike.ha.zookeeper import (MAX_REGISTRY_BYTES, REGISTRY_NODE, FencingError, RegistryError, ZooKeeperError,
                                    _wait, log)
from mesoslike.master.registry import (MAX_REMOVED, REGISTRY_FORMAT, Registry, RegistryChanges, RegistryFormatError,
                                       agent_record, framework_record, unreachable_record)
from mesoslike.master.storage import RegistryPartlyWritten

__all__ = ["ZooKeeperRegistry", "RegistryMirror", "FencedRegistryStore", "PreparedWrite", "ShardsRefused", "AGENT_BUCKETS", "FRAMEWORK_BUCKETS", "REMOVED_CHUNK",
           "MAX_REGISTRY_BYTES"]


# ----------------------------------------------------------------- registry
#
# Layout (docs/ha.rst, "Registry storage and fencing"): ``<path>/registry``
# holds a small header; its children hold the records, each a fragment of a
# registry document (``Registry.to_document``'s format) that parses alone:
#
#   agents.NNNN              the agents whose id hashes to bucket NNNN
#   frameworks.NN            the frameworks whose id hashes to bucket NN
#   unreachable.NNN          the unreachable agents whose id hashes to bucket NNN
#   removed_agents.K         the K-th chunk of REMOVED_CHUNK removed agent ids,
#   removed_frameworks.K     in the order they were removed ({"first": seq, ...})
#   weights                  the role weights
#   quota                    the roles' quota
#   drains                   the agents the operator drains
#
# A ``<path>/registry`` whose data has no "layout" holds a whole registry
# document (the format before sharding): it is loaded as such and the first
# store converts it, replacing the document by the header last.

#: agents are spread over this many shards by a stable hash of their id
#: (CRC-32 of its UTF-8 bytes, modulo); 100k agents of ~100-150 bytes make ~3 KB shards. Many small
#: shards keep each group-committed write small: one of 2,000 agents admitted rewrites ~40 % of them
#: (with 1,024 buckets, all of them: the whole registry at each write)
AGENT_BUCKETS = 4096
#: frameworks likewise
FRAMEWORK_BUCKETS = 64
#: unreachable agents likewise (~60 bytes each: Mesos's default bound of 102,400 makes ~25 KB shards)
UNREACHABLE_BUCKETS = 256
#: removed ids per chunk (10k remembered: at most 11 chunks per list)
REMOVED_CHUNK = 1000
#: the header's "layout"
REGISTRY_LAYOUT = "sharded"

_RECORD_KINDS = {"agents": (AGENT_BUCKETS, 4), "frameworks": (FRAMEWORK_BUCKETS, 2),
                 "unreachable": (UNREACHABLE_BUCKETS, 3)}
_ENCODERS: dict[str, Callable[[Any], dict]] = {"agents": agent_record, "frameworks": framework_record,
                                               "unreachable": unreachable_record}
_REMOVED_KINDS = ("removed_agents", "removed_frameworks")
#: sections stored whole, one znode each, named after the section
_SINGLE_SECTIONS = ("weights", "quota", "drains")
_SHARD_NAME = re.compile(r"(agents|frameworks|unreachable|removed_agents|removed_frameworks)\.(\d{1,9})|(weights|quota|drains)")
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
    """``agents``, ``frameworks``, ``unreachable``, ``removed_agents``,
    ``removed_frameworks``, ``weights``, ``quota`` or ``drains`` for a shard's
    name; None for a foreign child."""
    match = _SHARD_NAME.fullmatch(name)
    return None if match is None else match.group(1) or match.group(3)


@attrs.define
class _Stored:
    """What the registry's znodes hold, as this store last read or wrote them."""

    header: dict | None = None  # None: no <path>/registry yet
    header_version: int = -1
    versions: dict[str, int] = attrs.field(factory=dict)           # shard -> its version
    #: record shard -> its records by id, each as written (JSON bytes) or as loaded (the info, encoded
    #: when its shard is next written): rewriting a shard joins its records' bytes, encoding only the new
    members: dict[str, dict[str, object]] = attrs.field(factory=dict)
    chunks: dict[str, tuple] = attrs.field(factory=dict)           # removed chunk -> (first seq, ids)
    removed: dict[str, tuple[int, list[str]]] = attrs.field(factory=dict)  # list -> (seq of its first id, ids)
    singles: dict[str, dict] = attrs.field(factory=dict)           # weights / quota / drains -> what they hold
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
    members: dict[str, dict[str, object]] = attrs.field(factory=dict)
    chunks: dict[str, tuple | None] = attrs.field(factory=dict)  # None: deleted
    removed: dict[str, tuple[int, list[str]]] = attrs.field(factory=dict)
    singles: dict[str, dict] = attrs.field(factory=dict)  # weights / quota / drains written (or deleted: {})

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

    def put_encoded(self, name: str, kind: str, records: dict[str, object]) -> bool:
        """Plan to write record shard ``name`` from its records' JSON members
        (id -> ``"id":{...}``, :func:`_encode_member`): the same bytes as
        ``put(name, {kind: records})``, ids in order."""
        body = b",".join([records[item_id] for item_id in sorted(records)])  # type: ignore[misc]
        data = b'{"format":%d,"%s":{%s}}' % (REGISTRY_FORMAT, kind.encode(), body)
        if len(data) > self.room:
            self.refused[name] = (f"the registry shard {name} would be {len(data)} bytes, over the {self.room}-byte "
                                  "limit of one ZooKeeper request (jute.maxbuffer, about 1 MiB)")
            return False
        self.writes[name] = data
        return True

    def stored_part(self, changes: RegistryChanges) -> RegistryChanges:
        """The part of ``changes`` this plan stores: all but what lies in refused shards."""
        if not self.refused:
            return changes
        kinds = {_shard_kind(name) for name in self.refused}

        def stored_ids(kind: str) -> frozenset[str]:
            return frozenset(item_id for item_id in getattr(changes, kind)
                             if _record_shard(kind, item_id) not in self.refused)
        return attrs.evolve(changes, sections=changes.sections - kinds, agents=stored_ids("agents"),
                            frameworks=stored_ids("frameworks"), unreachable=stored_ids("unreachable"))

    def apply(self, stored: _Stored, versions: dict[str, int | None]) -> None:
        """The writes succeeded with ``versions`` (None: deleted): remember what is stored now."""
        for name, version in versions.items():
            if version is None:  # deleted (never the header)
                stored.versions.pop(name, None)
            elif name == "":
                stored.header, stored.header_version = _header(), version
            else:
                stored.versions[name] = version
        for name, records in self.members.items():
            if records:
                stored.members[name] = records
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


@attrs.frozen
class PreparedWrite:
    """What one store writes, taken from the registry in the master's loop
    (O(changes): the changed records' infos, which are immutable, and copies
    of the changed sections) so that planning, encoding and writing it may
    happen in another thread while the loop changes the registry on."""

    changes: RegistryChanges
    #: everything is written (the stored layout is not current): ``records`` holds every record
    full: bool
    #: kind -> id -> its info now (None: gone)
    records: dict[str, dict[str, object | None]]
    #: removed_agents / removed_frameworks -> the list now (only those to write)
    removed: dict[str, list[str]]
    #: weights / quota / drains -> the section now (only those to write)
    singles: dict[str, dict]


def _prepare(registry: Registry, changes: RegistryChanges, full: bool) -> PreparedWrite:
    """The part of ``registry`` a store of ``changes`` writes (everything if ``full``)."""
    records: dict[str, dict[str, object | None]] = {}
    for kind in _RECORD_KINDS:
        current: dict = getattr(registry, kind)
        records[kind] = dict(current) if full else {item_id: current.get(item_id) for item_id in getattr(changes, kind)}
    removed = {kind: list(getattr(registry, kind)) for kind in _REMOVED_KINDS if full or kind in changes.sections}
    singles = {name: dict(sorted(getattr(registry, name).items())) for name in _SINGLE_SECTIONS
               if full or name in changes.sections}
    return PreparedWrite(changes, full, records, removed, singles)


def _plan(prepared: PreparedWrite, stored: _Stored, room: int) -> _Plan:
    """What to write so that the znodes hold the prepared registry: the
    shards of the changed records — or, if prepared ``full``, everything."""
    plan = _Plan(room)
    full = prepared.full
    for kind in _RECORD_KINDS:
        _plan_records(plan, kind, prepared.records[kind], stored, full)
    for kind, ids in prepared.removed.items():
        _plan_removed(plan, kind, ids, stored)
    for name, content in prepared.singles.items():
        if not (full or content != stored.singles.get(name, {})):
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


def _plan_records(plan: _Plan, kind: str, changed: dict[str, object | None], stored: _Stored, full: bool) -> None:
    """Rewrite the shards of the ``changed`` records (if ``full``: they are
    every record, and every other stored shard goes). A shard's unchanged
    records are taken as stored, already encoded: O(records in the shards written)."""
    touched: dict[str, dict[str, object | None]] = {}
    for item_id, info in changed.items():
        touched.setdefault(_record_shard(kind, item_id), {})[item_id] = info
    if full:
        names = set(touched) | {name for name in stored.versions if _shard_kind(name) == kind}
    else:
        names = set(touched) | {name for name in stored.stale if _shard_kind(name) == kind}
    encode = _ENCODERS[kind]
    for name in names:
        records = {} if full else dict(stored.members.get(name, {}))
        for item_id, info in touched.get(name, {}).items():
            if info is None:
                records.pop(item_id, None)
            else:
                records[item_id] = info
        if not records:
            if name in stored.versions:
                plan.writes[name] = None
            plan.members[name] = {}
            continue
        try:
            for item_id, value in records.items():
                if not isinstance(value, bytes):
                    records[item_id] = _encode_member(item_id, _encode_json(name, encode(value)))
        except RegistryError as exc:
            plan.refused[name] = str(exc)
            continue
        if plan.put_encoded(name, kind, records):
            plan.members[name] = records


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


def _encode_member(item_id: str, record: bytes) -> bytes:
    """A record as a member of its shard's JSON object: ``"id":{...}``."""
    return json.dumps(item_id).encode() + b":" + record


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
    plan = _plan(_prepare(_from_document(REGISTRY_NODE, document), RegistryChanges(), full=True), _Stored(),
                 _room(f"/{REGISTRY_NODE}", "/"))
    if plan.refused:
        raise RegistryError("; ".join(plan.refused.values()))
    # nothing is stored yet, so nothing is deleted
    return {name: data for name, data in plan.writes.items() if data is not None}


def _op_cost(path: str, data: bytes | None) -> int:
    return len(path.encode("utf-8")) + len(data or b"") + _OP_OVERHEAD


def _room(node: str, fence: str) -> int:
    """The largest shard under ``node`` that fits, with the fence check, in one transaction."""
    return MAX_REGISTRY_BYTES - _op_cost(fence, None) - _op_cost(f"{node}/removed_frameworks.999999999", None)


class _Sized(Protocol):
    @property
    def path(self) -> str: ...

    @property
    def data(self) -> bytes | None: ...


_AnyOp = TypeVar("_AnyOp", bound=_Sized)


def _pack(ops: list[_AnyOp], fence: str) -> list[list[_AnyOp]]:
    """``ops`` in order, packed into transactions of at most MAX_REGISTRY_BYTES with the fence check."""
    batches: list[list[_AnyOp]] = []
    batch: list[_AnyOp] = []
    size = _op_cost(fence, None)
    for op in ops:
        cost = _op_cost(op.path, op.data)
        if size + cost > MAX_REGISTRY_BYTES and batch:
            batches.append(batch)
            batch, size = [], _op_cost(fence, None)
        batch.append(op)
        size += cost
    if batch:
        batches.append(batch)
    return batches


@attrs.frozen
class _Op:
    name: str            # "" for the header
    path: str
    data: bytes | None   # None: delete
    version: int         # expected version; -1: create


class ShardsRefused(RegistryError, RegistryPartlyWritten):
    """Some shards could not be written (too big for one ZooKeeper request,
    or not serializable); the rest was, and ``stored`` says which changes
    that stored."""

    def __init__(self, message: str, stored: RegistryChanges) -> None:
        super().__init__(message)
        self.stored = stored


class ZooKeeperRegistry:
    """The registry in the znodes under ``<path>/registry``: loaded in
    parallel, written shard by shard with transactions fenced on the writer's
    election znode and on each shard's version.

    It remembers what it last read or wrote (each znode's version, which ids
    each shard holds), so :meth:`store` must follow a :meth:`load`.
    """

    def __init__(self, client: KazooClient, path: str, timeout: float = 10.0,
                 mirror: RegistryMirror | None = None) -> None:
        self._client = client
        self.node = f"{path.rstrip('/')}/{REGISTRY_NODE}"
        self._timeout = timeout
        #: a standby's copy of the znodes, kept current by watches: load() takes it instead of reading them all
        self._mirror = mirror
        self._stored: _Stored | None = None
        #: the last write failed without saying whether it happened: the next (a whole one) reads first
        self._outcome_unknown = False

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
        if self._mirror is not None:
            taken = self._mirror.take()
            if taken is not None:
                registry, self._stored = taken
                return registry
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
            registry = _assemble(self.node, _decode_shards(self.node, shards), stored)
        else:
            raise RegistryError(f"the registry {self.node} has layout {header.get('layout')!r}, format "
                                f"{header.get('format')!r}: not one this master reads")
        self._stored = stored
        return registry

    def _read_shards(self) -> dict[str, tuple[bytes, int]]:
        """name -> (data, version) of every child of the registry node, read in parallel."""
        return _read_children(self._client, self.node, self._timeout, "the registry")

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
        try:
            stored, written = self.write(self.prepare(registry), fence)
        except ShardsRefused as exc:
            registry.mark_stored(exc.stored)
            raise
        registry.mark_stored(stored)
        return written

    def prepare(self, registry: Registry) -> PreparedWrite:
        """What a store of ``registry``'s changes writes, taken now (in the
        thread that changes the registry; O(changes)) for :meth:`write`."""
        stored = self._stored
        return _prepare(registry, registry.changes(), full=stored is None or not stored.current)

    def write(self, prepared: PreparedWrite, fence: str) -> tuple[RegistryChanges, int]:
        """Write ``prepared`` as :meth:`store` does (in any thread, one write
        at a time, each prepared after the last one returned). Returns the
        changes now stored — for the registry's thread to ``mark_stored`` —
        and how many znodes were written or deleted. Raises as :meth:`store`
        does; for shards that could not be written, :class:`ShardsRefused`
        with the changes stored."""
        if not isinstance(fence, str) or not fence.startswith("/"):
            raise FencingError(f"not the leader any more: no election znode to fence on ({fence!r})")
        stored = self._stored
        if stored is None and self._outcome_unknown and prepared.full:
            # the last write may or may not have happened (ZooKeeper did not answer in time): read what
            # the znodes hold now and write everything over it — fenced as ever, so only while leading
            self.load()
            self._outcome_unknown = False
            stored = self._stored
        if stored is None:
            raise FencingError("registry changed under us: load() it before storing")
        plan = _plan(prepared, stored, _room(self.node, fence))
        batches, last = self._batches(plan, stored, fence)
        if plan.refused:
            last = []  # an old document is replaced only once all of it is in the shards
        try:
            versions = self._commit(batches, fence)
            if last:  # only once every shard is in place
                versions.update(self._commit([last], fence))
        except ZooKeeperError as exc:
            self._stored = None  # partly written, or unknown: what we know is stale
            self._outcome_unknown = not isinstance(exc, FencingError)
            raise
        plan.apply(stored, versions)
        done = plan.stored_part(prepared.changes)
        if versions:
            log.debug("registry: wrote %d znodes in %d transactions", len(versions), len(batches) + bool(last))
        if plan.refused:
            raise ShardsRefused(f"{len(plan.refused)} registry shard(s) not written, their changes kept to retry "
                                f"(the other {len(versions)} znodes were written): " + "; ".join(plan.refused.values()),
                                done)
        return done, len(versions)

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
        return _pack([*first, *ops], fence), header if stored.header is not None else []

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


#: a mirror's name for the registry node's list of children (no shard is named so)
_CHILDREN = "/"


class RegistryMirror:
    """A standby master's copy of the registry's znodes, decoded and kept
    current by ZooKeeper watches, so that the master that takes over reads
    only what changed since it last looked instead of the whole registry
    (docs/ha.rst, "Standby masters keep the registry loaded").

    :meth:`refresh` (the standby's mirror thread, while it follows) reads the
    znodes whose watch fired since the last refresh — every znode the first
    time, and again after the ZooKeeper session wavered (SUSPENDED or LOST:
    the watches may not have told everything). :meth:`take` (on election)
    makes sure every watch of a change made before the election has fired,
    reads those znodes, and returns the registry with what each znode holds.

    Why a watched copy is current: the predecessor's writes are fenced on its
    election znode, so each happened before that znode went, which is what
    elected this master; ZooKeeper sends a session the watch events of
    changes before its answers to later requests, and kazoo runs watch
    callbacks in order on one thread. ``take`` asks ZooKeeper one question
    after the election, then waits for a marker put on that thread's queue.
    """

    def __init__(self, client: KazooClient, path: str, timeout: float = 10.0) -> None:
        self._client = client
        self.node = f"{path.rstrip('/')}/{REGISTRY_NODE}"
        self._timeout = timeout
        self._lock = threading.Lock()    # one refresh or take at a time
        self._marks = threading.Lock()   # what watches and session changes mark (kazoo's threads)
        self._header: tuple[bytes, int] | None = None   # None: no registry node (when complete)
        self._shards: dict[str, _Shard] = {}
        #: every znode was read, with a watch, since the session was last known to keep its watches
        self._complete = False
        self._dirty: set[str] = set()    # znodes whose watch fired ("": the header; _CHILDREN: the list)
        self._generation = 0             # moves on whenever the session wavers
        #: set when a watch fires: the mirror thread refreshes
        self.changed = threading.Event()
        #: znodes read so far (the header and the list count as one each)
        self.reads = 0
        #: moves on whenever the copy may have changed (a read of any znode, a shard gone)
        self._changes = 0
        #: the registry the copy holds, assembled while it was quiet (:meth:`prepare`), and ``_changes`` then
        self._assembled: tuple[Registry, _Stored] | None = None
        self._assembled_at = -1
        #: take()s that found the registry assembled already
        self.takes_prepared = 0
        client.add_listener(self._session_changed)

    @property
    def complete(self) -> bool:
        """Every znode is mirrored (a take() reads only what changed)."""
        with self._marks:
            return self._complete

    @property
    def current(self) -> bool:
        """Complete, and no watch fired since the last refresh: a take() now reads no shard."""
        with self._marks:
            return self._complete and not self._dirty

    def _session_changed(self, state: str) -> None:  # kazoo's thread: never block
        if state != KazooState.CONNECTED:
            self.invalidate()

    def invalidate(self) -> None:
        """Forget that the copy is current: the next refresh reads everything."""
        with self._marks:
            self._generation += 1
            self._complete = False
        self.changed.set()

    def _watched(self, event: WatchedEvent) -> None:  # kazoo's callback thread
        if event.path is None:   # a session event, not a znode's (its watches may be gone): read everything again
            self.invalidate()
            return
        name = "" if event.path == self.node else event.path[len(self.node) + 1:]
        with self._marks:
            self._dirty.add(_CHILDREN if event.type == EventType.CHILD else name)
        self.changed.set()

    def refresh(self) -> int:
        """Read what changed since the last refresh (everything, the first
        time or after the session wavered). Returns how many znodes were read.
        Raises :class:`ZooKeeperError` if ZooKeeper cannot be read."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> int:
        with self._marks:
            generation, complete = self._generation, self._complete
            dirty, self._dirty = self._dirty, set()
            self.changed.clear()
            self._complete = False   # until this refresh is done
        try:
            read = self._read(dirty if complete else None)
        except (KazooException, ZooKeeperError) as exc:
            raise ZooKeeperError(f"could not mirror the registry {self.node}: {exc!r}") from None
        with self._marks:
            self._complete = self._generation == generation
        self.reads += read
        return read

    def _read(self, dirty: set[str] | None) -> int:
        """Read the ``dirty`` znodes (None: all of them), each with a watch."""
        client, node, timeout = self._client, self.node, self._timeout
        read = 0
        if dirty is None or dirty or self._header is None:
            self._changes += 1   # what is assembled already may no longer be what the copy holds
        if dirty is None or "" in dirty or self._header is None:
            read += 1
            try:
                data, stat = _wait(client.get_async(node, watch=self._watched), timeout)
            except NoNodeError:
                self._header, self._shards = None, {}
                if _wait(client.exists_async(node, watch=self._watched), timeout) is not None:
                    with self._marks:   # created since: read it next time
                        self._dirty.add("")
                    self.changed.set()
                return read
            self._header = (data, stat.version)
            dirty = None if dirty is None or not self._shards else dirty | {_CHILDREN}
        names = set(self._shards)
        if dirty is None or _CHILDREN in dirty:
            read += 1
            try:
                names = set(_wait(client.get_children_async(node, watch=self._watched), timeout))
            except NoNodeError:   # deleted since: its watch fired
                return read
            for gone in set(self._shards) - names:
                del self._shards[gone]
        wanted = names if dirty is None else (names - set(self._shards)) | (dirty & names)
        pending = [(name, client.get_async(f"{node}/{name}", watch=self._watched)) for name in sorted(wanted)]
        for name, result in pending:
            try:
                data, stat = _wait(result, timeout)
            except NoNodeError:   # deleted since the listing: its watch fired
                self._shards.pop(name, None)
                continue
            self._shards[name] = _decode_shard(node, name, data, stat.version)
        return read + len(pending)

    def take(self) -> tuple[Registry, _Stored] | None:
        """On election: the registry the znodes hold, from the copy and the
        znodes changed since it was refreshed, and what each znode holds; None
        if the copy is not complete or not of the current layout (the caller
        reads the registry itself). The copy is given up: a leader does not
        mirror (its own writes would only fire the watches); refresh() starts
        it again."""
        with self._lock:
            try:
                if not self.complete:
                    return None
                self._drain()
                self._refresh()
                if not self.complete or self._header is None:
                    return None
                if self._assembled is not None and self._assembled_at == self._changes:
                    self.takes_prepared += 1
                    return self._assembled   # nothing read since it was assembled: the same znodes
                return self._build()
            finally:
                self._header, self._shards = None, {}
                self._assembled = None
                self.invalidate()

    def prepare(self) -> bool:
        """While the copy is current and quiet (the standby's mirror thread,
        after a refresh that read nothing): assemble the registry it holds
        now, so that a take() that reads no znode hands it over instead of
        assembling it after the election (0.11 s of CPU at 100,000 agents,
        between the old leader's session expiring and the new one serving).
        Any znode read since makes take() assemble afresh. True if assembled
        now."""
        with self._lock:
            if not self.current or self._header is None or self._assembled_at == self._changes:
                return False
            changes = self._changes
            self._assembled, self._assembled_at = self._build(), changes
            return True

    def _build(self) -> tuple[Registry, _Stored] | None:
        """The registry the copy holds and what each znode holds (None: a
        header of another layout or format; the caller reads it itself)."""
        assert self._header is not None
        data, version = self._header
        try:
            header = _decode_json(self.node, data)
        except RegistryError:
            return None
        if header.get("layout") != REGISTRY_LAYOUT or header.get("format") != REGISTRY_FORMAT:
            return None
        stored = _Stored(header=header, header_version=version)
        return _assemble(self.node, self._shards, stored), stored

    def _drain(self) -> None:
        """Wait until every watch event ZooKeeper sent before now has marked
        its znode: one round trip (ZooKeeper answers after sending the
        session's older events), then a marker through kazoo's callback queue
        (watch callbacks run from it in order)."""
        try:
            _wait(self._client.exists_async(self.node), self._timeout)
        except (KazooException, ZooKeeperError) as exc:
            raise ZooKeeperError(f"could not read the registry {self.node}: {exc!r}") from None
        drained = threading.Event()
        self._client.handler.dispatch_callback(Callback("watch", drained.set, ()))
        if not drained.wait(self._timeout):
            raise ZooKeeperError(f"ZooKeeper's watch callbacks did not run within {self._timeout:g} s")


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


def _read_children(client: KazooClient, node: str, timeout: float, what: str) -> dict[str, tuple[bytes, int]]:
    """name -> (data, version) of every child of ``node``, read in parallel ({} if ``node`` is absent)."""
    try:
        names = _wait(client.get_children_async(node), timeout)
        pending = [(name, client.get_async(f"{node}/{name}")) for name in names]
        children = {}
        for name, result in pending:
            try:
                data, stat = _wait(result, timeout)
            except NoNodeError:  # deleted since the listing
                continue
            children[name] = (data, stat.version)
    except NoNodeError:
        return {}
    except (KazooException, ZooKeeperError) as exc:
        raise ZooKeeperError(f"could not read {what} {node}: {exc!r}") from None
    return children


def _from_document(node: str, document: dict) -> Registry:
    try:
        return Registry.from_document(document)
    except RegistryFormatError as exc:
        raise RegistryError(f"the registry record {node}: {exc}") from None


@attrs.frozen
class _Shard:
    """One child of the registry node, decoded (alone: a shard parses without the others)."""

    version: int
    kind: str | None              # None: not a registry shard (a foreign child)
    #: removed chunks: (first seq, ids); single sections and record shards: the fragment as a Registry;
    #: None if it did not parse (``problem`` says why)
    content: tuple[int, list] | Registry | None
    problem: str = ""


def _decode_shard(node: str, name: str, data: bytes, version: int) -> _Shard:
    """Shard ``name`` of the registry ``node`` decoded, or why it could not be."""
    kind = _shard_kind(name)
    if kind is None:
        return _Shard(version, None, None)
    try:
        fragment = _decode_json(f"{node}/{name}", data)
        if kind in _REMOVED_KINDS:
            return _Shard(version, kind, _removed_chunk(fragment, kind))
        return _Shard(version, kind, _from_document(f"{node}/{name}", fragment))
    except RegistryError as exc:
        return _Shard(version, kind, None, str(exc))


def _decode_shards(node: str, shards: dict[str, tuple[bytes, int]]) -> dict[str, _Shard]:
    return {name: _decode_shard(node, name, data, version) for name, (data, version) in shards.items()}


def _assemble(node: str, shards: dict[str, _Shard], stored: _Stored) -> Registry:
    """The registry from its decoded shards (and, in ``stored``, what each holds).
    A shard that does not parse is skipped with a warning; so is a foreign child."""
    registry = Registry()
    misplaced = []
    removed: dict[str, list[tuple[int, str]]] = {kind: [] for kind in _REMOVED_KINDS}
    for name in sorted(shards):
        shard = shards[name]
        kind = shard.kind
        if kind is None:
            log.warning("registry: ignoring %s/%s: not a registry shard", node, name)
            continue
        stored.versions[name] = shard.version
        if shard.content is None:
            log.warning("registry: skipping the shard %s/%s (its records stay unknown): %s", node, name,
                        shard.problem)
            continue
        if isinstance(shard.content, tuple):   # a chunk of a removed list
            first, ids = shard.content
            stored.chunks[name] = (first, tuple(ids))
            removed[kind] += [(first + index, item) for index, item in enumerate(ids) if isinstance(item, str)]
            continue
        part = shard.content
        if kind in _SINGLE_SECTIONS:
            getattr(registry, kind).update(getattr(part, kind))
            stored.singles[kind] = dict(getattr(part, kind))
            continue
        records = getattr(part, kind)
        homed = stored.members.setdefault(name, {})
        for item_id, info in records.items():
            home = _record_shard(kind, item_id)
            if home == name:
                getattr(registry, kind)[item_id] = info
                homed[item_id] = info
            else:  # written under another bucket count, or by hand: moved at the next store
                misplaced.append((kind, item_id, info))
                stored.stale.update((name, home))
    for kind, item_id, info in misplaced:
        getattr(registry, kind).setdefault(item_id, info)
        stored.members.setdefault(_record_shard(kind, item_id), {}).setdefault(item_id, info)
    # the shards hold them by hash: the list is oldest first (registry_max_agent_count prunes from the front)
    registry.unreachable = dict(sorted(registry.unreachable.items(), key=lambda item: (item[1].since, item[0])))
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

    @property
    def fence(self) -> str | None:
        """The election znode the registry was last loaded under (None before a load)."""
        return self._loaded_under

    def load(self) -> Registry:
        self._loaded_under = None
        fence = self._fence()
        registry = self._registry.load()
        self._loaded_under = fence
        return registry

    def store(self, registry: Registry) -> None:
        self._registry.store(registry, self._current_fence())

    #: writes go to ZooKeeper: the master's loop hands them to a thread of their own
    asynchronous = True

    def prepare(self, registry: Registry) -> PreparedWrite:
        return self._registry.prepare(registry)

    def write_prepared(self, prepared: PreparedWrite) -> RegistryChanges:
        return self._registry.write(prepared, self._current_fence())[0]

    def _current_fence(self) -> str:
        fence = self._fence()
        if self._loaded_under is not None and fence != self._loaded_under:
            raise FencingError(f"not the leader any more: it read the registry as {self._loaded_under}, "
                               f"now it is {fence}")
        return fence
