"""Named records in ZooKeeper: chunked when large, every write fenced.

The master keeps its registry in shards of its own layout
(:mod:`mesoslike.ha.registry_store`); a framework that keeps hard state in
ZooKeeper — the bundled Fuxi scheduler keeps its jobs there — needs the
same two guarantees without the registry's layout: a record bigger than one
ZooKeeper request (``jute.maxbuffer``, about 1 MiB) is split into chunks,
and only the leader writes. :class:`ZooKeeperRecordStore` gives both.

Layout under ``path``, for a record ``name`` (``[A-Za-z0-9._-]``, at most
200 characters):

* ``<path>/<name>`` — ``R`` followed by the record, or, for a chunked
  record, ``C`` followed by a JSON header ``{"tag", "chunks", "size", "crc"}``;
* ``<path>/<name>~<tag>.<i>`` — chunk *i* of the record's version ``tag``.

A write goes out in three phases, each as transactions of at most
:data:`~mesoslike.ha.zookeeper.MAX_REGISTRY_BYTES`, each checking that the
writer's election znode (``fence()``) still exists: first the new chunks
(under a fresh tag, beside the old ones) and the whole records, then the
headers naming the new chunks, then the deletion of chunks no header names
any more. A reader thus sees the old record or the new one, never a mix; a
writer that dies between phases leaves unreferenced chunks, which
:meth:`~ZooKeeperRecordStore.load` notices and the next write deletes.
"""

from __future__ import annotations

import json
import re
import secrets
import zlib
from typing import Callable, Iterable, Mapping

import attrs
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from mesoslike.ha.registry_store import _op_cost, _pack, _read_children, _refusal
from mesoslike.ha.zookeeper import MAX_REGISTRY_BYTES, FencingError, RegistryError, ZooKeeperError, _wait, log

__all__ = ["ZooKeeperRecordStore", "RECORD_NAME"]

#: what a record's name may be
RECORD_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
_CHUNK_NAME = re.compile(r"([A-Za-z0-9._-]{1,200})~([0-9a-f]{16})\.(\d{1,9})")
_WHOLE, _CHUNKED = b"R", b"C"


@attrs.frozen
class _Op:
    path: str
    data: bytes | None    # None: delete
    create: bool = False
    version: int = -1     # any: the fence is the guard (named in refusals)


class ZooKeeperRecordStore:
    """Named records (bytes) under ``path`` (module docstring), written only
    while ``fence()`` names an existing znode (e.g. ``contender.fence``, the
    writer's election znode) and names the same znode as when the records
    were loaded. Not thread-safe: one caller at a time.

    :meth:`write` needs a :meth:`load` first (it must know what is stored);
    after a write that failed, load again. Costs: a load reads every znode
    under ``path`` in parallel; a write sends O(size / 1 MiB) transactions.
    """

    def __init__(self, client: KazooClient, path: str, fence: Callable[[], str], timeout: float = 10.0) -> None:
        self._client = client
        self.path = path.rstrip("/") or "/"
        self._fence = fence
        self._timeout = timeout
        #: name -> the chunk znodes its stored header names (empty: a whole record); None before a load
        self._stored: dict[str, list[str]] | None = None
        self._orphans: set[str] = set()
        self._loaded_under: str | None = None

    # --------------------------------------------------------------- load
    def load(self) -> dict[str, bytes]:
        """Every record stored. Raises :class:`RegistryError` if a record's
        header does not parse or its chunks are missing or damaged, and
        :class:`ZooKeeperError` if ZooKeeper cannot be read."""
        self._stored = None
        fence = self._fence()
        nodes = self._read_all()
        records: dict[str, bytes] = {}
        stored: dict[str, list[str]] = {}
        chunks = {name: data for name, data in nodes.items() if _CHUNK_NAME.fullmatch(name)}
        for name, data in nodes.items():
            if name in chunks:
                continue
            if not RECORD_NAME.fullmatch(name):
                log.warning("ignoring %s/%s: not a record of this store", self.path, name)
                continue
            if data.startswith(_WHOLE):
                records[name], stored[name] = data[1:], []
            elif data.startswith(_CHUNKED):
                records[name], stored[name] = self._assemble(name, data[1:], chunks)
            else:
                raise RegistryError(f"{self.path}/{name} is not a record of this store (it starts with "
                                    f"{data[:1]!r}); repair or delete it")
        named = {chunk for names in stored.values() for chunk in names}
        self._orphans = set(chunks) - named
        if self._orphans:
            log.info("%s: %d chunk(s) of an interrupted write; the next write deletes them", self.path,
                     len(self._orphans))
        self._stored, self._loaded_under = stored, fence
        return records

    def _read_all(self) -> dict[str, bytes]:
        children = _read_children(self._client, self.path, self._timeout, "the records under")
        return {name: data for name, (data, _) in children.items()}

    def _assemble(self, name: str, header: bytes, chunks: Mapping[str, bytes]) -> tuple[bytes, list[str]]:
        try:
            info = json.loads(header.decode("utf-8"))
            tag, count, size, crc = info["tag"], info["chunks"], info["size"], info["crc"]
            names = [f"{name}~{tag}.{i}" for i in range(int(count))]
            value = b"".join(chunks[chunk] for chunk in names)
        except (UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            raise RegistryError(f"the chunked record {self.path}/{name} is damaged ({exc!r}); repair or delete "
                                "it") from None
        if len(value) != size or zlib.crc32(value) != crc:
            raise RegistryError(f"the chunked record {self.path}/{name} does not match its header (size "
                                f"{len(value)}, expected {size}); repair or delete it")
        return value, names

    # -------------------------------------------------------------- write
    def write(self, records: Mapping[str, bytes], deleted: Iterable[str] = ()) -> None:
        """Store ``records`` (name -> value) and delete the records named in
        ``deleted``, fenced (module docstring). Raises :class:`FencingError`
        if the fence is gone (nothing more is written), :class:`RegistryError`
        for a bad name, :class:`ZooKeeperError` if the outcome is unknown:
        :meth:`load` again before the next write."""
        stored = self._stored
        if stored is None:
            raise FencingError(f"the records under {self.path} changed under us, or were never read: load() "
                               "them before writing")
        fence = self._fence()
        if fence != self._loaded_under:
            # rejoined under a new znode: another leader may have written meanwhile
            raise FencingError(f"not the leader any more: it read the records as {self._loaded_under}, now it is "
                               f"{fence}")
        deleted = [name for name in deleted if name not in records]
        for name in [*records, *deleted]:
            if not isinstance(name, str) or not RECORD_NAME.fullmatch(name):
                raise RegistryError(f"bad record name {name!r}: expected {RECORD_NAME.pattern}")
        room = MAX_REGISTRY_BYTES - _op_cost(fence, None) - _op_cost(f"{self.path}/{'x' * 200}~{'0' * 16}.999999999",
                                                                      None)
        first: list[_Op] = []
        headers: list[_Op] = []
        last: list[_Op] = [_Op(f"{self.path}/{chunk}", None) for chunk in sorted(self._orphans)]
        after: dict[str, list[str]] = {}
        for name, value in sorted(records.items()):
            node = f"{self.path}/{name}"
            exists = name in stored
            last += [_Op(f"{self.path}/{chunk}", None) for chunk in stored.get(name, [])]
            if len(value) + 1 <= room:
                first.append(_Op(node, _WHOLE + value, create=not exists))
                after[name] = []
                continue
            tag = secrets.token_hex(8)
            pieces = [value[i:i + room] for i in range(0, len(value), room)]
            names = [f"{name}~{tag}.{i}" for i in range(len(pieces))]
            first += [_Op(f"{self.path}/{chunk}", piece, create=True) for chunk, piece in zip(names, pieces)]
            header = {"tag": tag, "chunks": len(pieces), "size": len(value), "crc": zlib.crc32(value)}
            headers.append(_Op(node, _CHUNKED + json.dumps(header).encode(), create=not exists))
            after[name] = names
        for name in deleted:
            if name in stored:
                first.append(_Op(f"{self.path}/{name}", None))
                last += [_Op(f"{self.path}/{chunk}", None) for chunk in stored[name]]
        self._stored = None   # unknown until every phase is through
        try:
            self._ensure_path()
            for phase in (first, headers, last):
                self._commit(phase, fence)
        except KazooException as exc:
            raise ZooKeeperError(f"a write under {self.path} may or may not have happened: {exc!r}") from None
        for name in deleted:
            stored.pop(name, None)
        stored.update(after)
        self._orphans = set()
        self._stored = stored

    def _ensure_path(self) -> None:
        try:
            _wait(self._client.ensure_path_async(self.path), self._timeout)
        except (KazooException, ZooKeeperError) as exc:
            raise ZooKeeperError(f"could not create {self.path}: {exc!r}") from None

    def _commit(self, ops: list[_Op], fence: str) -> None:
        """The operations in transactions of at most MAX_REGISTRY_BYTES, each
        fenced, pipelined (ZooKeeper applies one session's requests in order)."""
        sent = [(batch, self._transaction(batch, fence).commit_async()) for batch in _pack(ops, fence)]
        errors: list[ZooKeeperError] = []
        for batch, result in sent:
            try:
                results = _wait(result, 0.0 if errors else self._timeout)
            except (KazooException, ZooKeeperError) as exc:
                errors.append(ZooKeeperError(f"a write under {self.path} may or may not have happened: {exc!r}"))
                continue
            refused = _refusal(results, batch, fence)  # type: ignore[arg-type]  # its ops have .path and .version too
            if refused is not None:
                errors.append(refused)
        if errors:
            raise next((e for e in errors if isinstance(e, FencingError)), errors[0])

    def _transaction(self, batch: list[_Op], fence: str):
        transaction = self._client.transaction()
        transaction.check(fence, -1)   # version -1: any version, the znode just has to exist
        for op in batch:
            if op.data is None:
                transaction.delete(op.path)
            elif op.create:
                transaction.create(op.path, op.data)
            else:
                transaction.set_data(op.path, op.data)
        return transaction
