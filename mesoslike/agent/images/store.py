"""The agent's image store: image references in, unpacked layers and the
image's config out, through a content-addressed cache shared by every
process of the agent (the agent itself, tasks' supervisors).

Layout of the store's directory (mode 0700; ``<work_dir>/images`` by
default)::

    index.json          layers, images and leases (cache.CacheIndex), written whole
    lock                flock: held to read-modify-write index.json
    layers/<alg>-<hex>  one unpacked layer, named by its (compressed) blob digest
    blobs/<alg>-<hex>   image configs
    locks/<alg>-<hex>.lock   flock: held while that layer is pulled
    tmp/                downloads and unpacking in progress
    trash/              collected layers being removed

**Provisioning** (:meth:`ImageStore.provision`): the manifest — from the
index when the reference was provisioned before and ``cached`` is true
(no request at all), else from the registry, the index entry for this
machine's platform picked — then the config; a lease on the layers is
recorded *before* any is pulled, so a collection running meanwhile leaves
them alone; each missing layer is pulled under its own lock (a second
process wanting it waits, then finds it unpacked and reuses it), verified
(blob digest and size, then the uncompressed digest against the config's
``diff_ids``) and unpacked once; then the image is recorded and the cache
collected down to its bound (:func:`.cache.plan_collection`).

**Leases.** A caller that runs a task on an image names a lease
(``lease="container-…"``): its layers stay until :meth:`release`. A
provision without one takes a transient lease for the time of the pull.
An agent that restarts drops the leases of tasks no longer running with
:meth:`prune_leases`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
import time
import urllib.parse
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Iterator

from .cache import CacheIndex, ImageEntry, LayerEntry, LeaseEntry, plan_collection
from .config import ImageConfig, parse_config
from .credentials import Credential, read_docker_config
from .errors import BAD_IMAGE, BAD_NAME, CACHE, DIGEST_MISMATCH, TOO_LARGE, ImageError
from .layers import MARKERS, OVERLAY, unpack_layer
from .manifest import Descriptor, Index, Manifest, Platform, host_platform, layer_compression, parse_manifest, \
    select_platform
from .reference import DOCKER_HUB, ImageReference, parse_reference, parse_registry
from .registry import RegistryClient, RegistryEndpoints

__all__ = ["ImageStore", "ImageLimits", "ProvisionedImage", "CachedImage", "DEFAULT_CACHE_SIZE", "DEFAULT_REGISTRY",
           "parse_default_registry", "IMAGES_DIR"]

#: Mesos's default for --docker_registry
DEFAULT_REGISTRY = "https://registry-1.docker.io"
#: the default bound on the unpacked layers
DEFAULT_CACHE_SIZE = 10 * 1024 ** 3
#: the store's directory below the agent's work dir
IMAGES_DIR = "images"
INDEX_FILE = "index.json"
_MAX_INDEX_BYTES = 64 << 20


@dataclass(frozen=True)
class ImageLimits:
    """What an image may be: a manifest or token of ``max_manifest_bytes``,
    a config of ``max_config_bytes``, ``max_layers`` layers whose blobs
    total ``max_image_bytes``, each unpacking to at most
    ``max_unpacked_bytes`` and ``max_layer_entries`` members; each read
    waits at most ``timeout`` s, each download ``deadline`` s."""

    max_manifest_bytes: int = 4 << 20
    max_config_bytes: int = 8 << 20
    max_layers: int = 127
    max_image_bytes: int = 16 << 30
    max_unpacked_bytes: int = 64 << 30
    max_layer_entries: int = 1_000_000
    timeout: float = 60.0
    deadline: float = 3600.0


@dataclass(frozen=True)
class ProvisionedImage:
    """What a container needs of an image: ``layers``, the unpacked layer
    directories bottom first (overlay lower directories as they are, when
    ``whiteouts`` is ``"overlay"``; else :func:`.rootfs.flatten` them) and
    the image's ``config``. ``pulled``: the layers this call downloaded;
    ``registry_requests``: HTTP requests it made (0: all from the cache)."""

    reference: ImageReference
    manifest_digest: str
    layer_digests: tuple[str, ...]
    layers: tuple[str, ...]
    config: ImageConfig
    whiteouts: str
    pulled: tuple[str, ...]
    registry_requests: int
    lease: str | None

    def as_json(self) -> dict:
        return {"image": str(self.reference), "manifest": self.manifest_digest, "layers": list(self.layers),
                "whiteouts": self.whiteouts, "config": self.config.as_json()}


@dataclass(frozen=True)
class CachedImage:
    """An image of the cache (for listings): its reference, manifest digest,
    layers, bytes on disk, last use, and the leases holding it."""

    name: str
    manifest: str
    layers: tuple[str, ...]
    size: int
    used: float
    leases: tuple[str, ...]


def parse_default_registry(text: str) -> tuple[str, str | None]:
    """``--docker-registry``: ``host[:port]`` or ``http(s)://host[:port][/]``
    → (registry, scheme or None). Raises :class:`ImageError` (bad_name)."""
    scheme = None
    value = text.strip()
    if "://" in value:
        parts = urllib.parse.urlsplit(value)
        if parts.scheme not in ("http", "https") or parts.path not in ("", "/") or parts.query or not parts.netloc:
            raise ImageError(BAD_NAME, f"--docker-registry {text!r} is not host[:port] or http(s)://host[:port]")
        scheme, value = parts.scheme, parts.netloc
    registry = parse_registry(value)
    return (DOCKER_HUB if registry == "registry-1.docker.io" else registry), scheme


def _file_name(digest: str) -> str:
    return digest.replace(":", "-")


@dataclass
class _Plan:
    """What provisioning an image takes: its manifest's digest, its config
    (digest and bytes) and its layers' digests, bottom first, with their
    descriptors when the manifest was read (None when it came from the
    cache)."""

    manifest_digest: str
    config_digest: str
    digests: list[str]
    descriptors: tuple[Descriptor, ...] | None
    config_bytes: bytes


class _Session:
    """The registry client of one provision, opened when first needed."""

    def __init__(self, store: ImageStore, reference: ImageReference) -> None:
        self.store, self.reference = store, reference
        self._client: RegistryClient | None = None

    def client(self) -> RegistryClient:
        if self._client is None:
            self._client = self.store._client(self.reference)
        return self._client

    @property
    def requests(self) -> int:
        return self._client.requests if self._client is not None else 0

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *_: object) -> None:
        if self._client is not None:
            self._client.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class ImageStore:
    """The image cache of one agent (the module says how it works).
    Thread- and process-safe: every instance on the same ``root`` shares it.

    :param root: the store's directory (made 0700).
    :param default_registry: for names without one (``--docker-registry``).
    :param docker_config: a Docker ``config.json`` of credentials (``--docker-config``), mode 0600.
    :param insecure_registries: ``host[:port]`` reached over plain http (loopback ones always are).
    :param cache_size: the bound on the unpacked layers (``--image-cache-size``), in bytes.
    """

    def __init__(self, root: str, *, default_registry: str = DEFAULT_REGISTRY, docker_config: str | None = None,
                 insecure_registries: Iterable[str] = (), cache_size: int = DEFAULT_CACHE_SIZE,
                 limits: ImageLimits = ImageLimits(), platform: Platform | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if cache_size < 0:
            raise ValueError("cache_size must be >= 0")
        self.root = os.path.abspath(root)
        self.default_registry, scheme = parse_default_registry(default_registry)
        self._default_registry_flag = default_registry
        self.insecure_registries = tuple(name.strip() for name in insecure_registries if name.strip())
        insecure = frozenset(parse_registry(name).lower() for name in self.insecure_registries)
        self.endpoints = RegistryEndpoints(insecure, {self.default_registry: scheme} if scheme else {})
        self.docker_config = docker_config
        if docker_config:
            read_docker_config(docker_config)   # refuse a bad or readable-by-others file now, at the agent's start
        self.cache_size = cache_size
        self.limits = limits
        self.platform = platform or host_platform()
        self.clock = clock
        try:
            for directory in (self.root, *(self._path(d) for d in ("layers", "blobs", "locks", "tmp", "trash"))):
                os.makedirs(directory, mode=0o700, exist_ok=True)
            os.chmod(self.root, 0o700)
        except OSError as exc:
            raise ImageError(CACHE, f"cannot make the image store {self.root}: {exc.strerror}") from None
        self._sweep_leftovers()

    # ------------------------------------------------------------ public
    def settings(self) -> dict:
        """This store's settings as JSON (for a supervisor's ``launch.json``);
        :meth:`from_settings` makes the same store of them."""
        return {"root": self.root, "default_registry": self._default_registry_flag,
                "docker_config": self.docker_config, "insecure_registries": list(self.insecure_registries),
                "cache_size": self.cache_size, "limits": asdict(self.limits)}

    @classmethod
    def from_settings(cls, settings: dict) -> ImageStore:
        """The store of :meth:`settings` (another process's view of the same cache)."""
        return cls(str(settings["root"]), default_registry=str(settings["default_registry"]),
                   docker_config=settings.get("docker_config") or None,
                   insecure_registries=[str(name) for name in settings.get("insecure_registries", ())],
                   cache_size=int(settings["cache_size"]), limits=ImageLimits(**settings.get("limits", {})))

    def parse(self, image: str) -> ImageReference:
        """``image`` parsed against this store's default registry."""
        return parse_reference(image, self.default_registry)

    def provision(self, image: str | ImageReference, *, lease: str | None = None,
                  cached: bool = True) -> ProvisionedImage:
        """Make ``image`` ready: its layers unpacked in the cache (pulled as
        needed) and its config parsed. ``lease``: keep its layers until
        :meth:`release` (a holder has one lease: a new provision under the
        same name replaces it). ``cached=False`` asks the registry for the
        manifest even when the reference was provisioned before (Mesos's
        ``Image.cached``). Raises :class:`ImageError` naming the image."""
        name = image if isinstance(image, str) else str(image)
        try:
            reference = image if isinstance(image, ImageReference) else self.parse(image)
            return self._provision(reference, lease, cached)
        except ImageError as exc:
            raise exc.naming(name) from None
        except OSError as exc:   # the network's are ImageErrors already: this is the cache's disk
            raise ImageError(CACHE, f"the image cache {self.root} failed: {exc.strerror or exc}", name) from None

    def release(self, lease: str) -> bool:
        """Drop ``lease`` (its layers may be collected); False if there was none."""
        with self._index() as index:
            return index.leases.pop(lease, None) is not None

    def leases(self) -> dict[str, LeaseEntry]:
        with self._index(write=False) as index:
            return dict(index.leases)

    def prune_leases(self, keep: Iterable[str]) -> list[str]:
        """Drop every caller's lease not in ``keep`` (the agent, recovering:
        the containers still running); returns the dropped ones."""
        kept = set(keep)
        with self._index() as index:
            dropped = [holder for holder, entry in index.leases.items() if holder not in kept and not entry.transient]
            for holder in dropped:
                del index.leases[holder]
        return dropped

    def collect(self) -> list[str]:
        """Collect the cache down to its bound now; returns the layers removed."""
        with self._index() as index:
            victims = self._plan(index, ())
        self._empty_trash()
        return victims

    def images(self) -> list[CachedImage]:
        """The cached images, most recently used first."""
        with self._index(write=False) as index:
            holders: dict[str, list[str]] = {}
            for holder, entry in index.leases.items():
                holders.setdefault(entry.image, []).append(holder)
            return sorted((CachedImage(name, entry.manifest, tuple(entry.layers),
                                       sum(index.layers[d].size for d in entry.layers if d in index.layers),
                                       entry.used, tuple(sorted(holders.get(name, ()))))
                           for name, entry in index.images.items()), key=lambda image: -image.used)

    def usage(self) -> int:
        """Bytes the unpacked layers take."""
        with self._index(write=False) as index:
            return index.total_size()

    def layer_path(self, digest: str) -> str:
        return self._path("layers", _file_name(digest))

    # ------------------------------------------------------------ provisioning
    def _provision(self, reference: ImageReference, lease: str | None, cached: bool) -> ProvisionedImage:
        key = str(reference)
        with _Session(self, reference) as session:
            plan = self._cached_plan(key) if cached else None
            if plan is None:
                plan = self._remote_plan(session.client(), reference)
            config = parse_config(plan.config_bytes, self.platform)
            if len(config.diff_ids) != len(plan.digests):
                raise ImageError(BAD_IMAGE, f"its config lists {len(config.diff_ids)} layers, its manifest "
                                            f"{len(plan.digests)}")
            holder = lease or f"pull:{secrets.token_hex(8)}"
            with self._transient(None if lease else holder):
                created, missing = self._lease(holder, key, plan, config.diff_ids, transient=lease is None)
                try:
                    pulled = [plan.digests[number] for number in missing
                              if self._ensure_layer(number, plan, config.diff_ids[number], session)]
                    whiteouts = self._record(key, plan)
                except BaseException:
                    if created or lease is None:
                        self.release(holder)
                    raise
                if lease is None:
                    self.release(holder)
            self._empty_trash()
            return ProvisionedImage(reference, plan.manifest_digest, tuple(plan.digests),
                                    tuple(self.layer_path(d) for d in plan.digests), config, whiteouts, tuple(pulled),
                                    session.requests, lease)

    def _cached_plan(self, key: str) -> _Plan | None:
        """The plan of an image provisioned before (None: ask the registry)."""
        with self._index(write=False) as index:
            known = index.images.get(key)
        if known is None:
            return None
        config_bytes = self._read_blob(known.config)
        if config_bytes is None:
            return None
        return _Plan(known.manifest, known.config, list(known.layers), None, config_bytes)

    def _remote_plan(self, client: RegistryClient, reference: ImageReference) -> _Plan:
        manifest_digest, manifest = self._resolve(client, reference)
        return _Plan(manifest_digest, manifest.config.digest, [layer.digest for layer in manifest.layers],
                     manifest.layers, self._config(client, manifest.config))

    def _client(self, reference: ImageReference) -> RegistryClient:
        credential: Credential | None = None
        if self.docker_config:
            credential = read_docker_config(self.docker_config).for_registry(reference.registry)
        return RegistryClient(reference, self.endpoints, credential, timeout=self.limits.timeout,
                              deadline=self.limits.deadline, max_manifest_bytes=self.limits.max_manifest_bytes)

    def _resolve(self, client: RegistryClient, reference: ImageReference) -> tuple[str, Manifest]:
        """The image manifest for this platform (through an index, at most two deep)."""
        target = reference.manifest_reference
        expected_size = None
        for _ in range(3):
            body, content_type, digest = client.manifest(target)
            if expected_size is not None and len(body) != expected_size:
                raise ImageError(DIGEST_MISMATCH, f"the manifest {digest} is {len(body)} bytes, its index says "
                                                  f"{expected_size}")
            parsed = parse_manifest(body, content_type, self.limits.max_layers)
            if isinstance(parsed, Manifest):
                total = parsed.config.size + sum(layer.size for layer in parsed.layers)
                if total > self.limits.max_image_bytes:
                    raise ImageError(TOO_LARGE, f"it is {total} bytes compressed (at most "
                                                f"{self.limits.max_image_bytes})")
                return digest, parsed
            assert isinstance(parsed, Index)
            entry: Descriptor = select_platform(parsed, self.platform)
            target, expected_size = entry.digest, entry.size
        raise ImageError(BAD_IMAGE, "its index nests more than two deep")

    def _config(self, client: RegistryClient, descriptor: Descriptor) -> bytes:
        if descriptor.size > self.limits.max_config_bytes:
            raise ImageError(TOO_LARGE, f"its config is {descriptor.size} bytes (at most "
                                        f"{self.limits.max_config_bytes})")
        data = self._read_blob(descriptor.digest)
        if data is not None:
            return data
        temp = self._path("tmp", f"{_file_name(descriptor.digest)}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            with open(temp, "wb") as sink:
                client.blob(descriptor.digest, descriptor.size, sink, "its config")
            os.replace(temp, self._path("blobs", _file_name(descriptor.digest)))
        except OSError as exc:
            raise ImageError(CACHE, f"the image cache could not be written: {exc.strerror}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        return self._read_blob(descriptor.digest) or b""

    def _read_blob(self, digest: str) -> bytes | None:
        try:
            with open(self._path("blobs", _file_name(digest)), "rb") as source:
                return source.read(self.limits.max_config_bytes + 1)
        except FileNotFoundError:
            return None

    def _ensure_layer(self, number: int, plan: _Plan, diff_id: str, session: _Session) -> bool:
        """Have layer ``number`` of ``plan`` unpacked; True when this call pulled it."""
        digest = plan.digests[number]
        with self._locked(self._path("locks", _file_name(digest) + ".lock")):
            if self._known_layer(digest, diff_id, number):   # another process pulled it while we waited
                return False
            if plan.descriptors is None:   # a layer of a cached image was collected: its manifest, by digest
                body, content_type, _ = session.client().manifest(plan.manifest_digest)
                manifest = parse_manifest(body, content_type, self.limits.max_layers)
                if not isinstance(manifest, Manifest) or [d.digest for d in manifest.layers] != plan.digests:
                    raise ImageError(BAD_IMAGE, f"the manifest {plan.manifest_digest} is not the one cached")
                plan.descriptors = manifest.layers
            self._pull_layer(session.client(), plan.descriptors[number], diff_id, number)
            return True

    def _known_layer(self, digest: str, diff_id: str, number: int) -> bool:
        with self._index() as index:
            return self._has_layer(index, digest, diff_id, number)

    def _has_layer(self, index: CacheIndex, digest: str, diff_id: str, number: int) -> bool:
        """Is layer ``digest`` unpacked (and is it what the config says)? Marks it used."""
        entry = index.layers.get(digest)
        if entry is None or not os.path.isdir(self.layer_path(digest)):
            return False
        if entry.diff_id and entry.diff_id != diff_id:
            raise ImageError(DIGEST_MISMATCH, f"layer {number} ({digest}) unpacks to {entry.diff_id}, its config "
                                              f"says {diff_id}")
        entry.used = self.clock()
        return True

    def _pull_layer(self, client: RegistryClient, descriptor: Descriptor, diff_id: str, number: int) -> None:
        name = _file_name(descriptor.digest)
        for leftover in os.listdir(self._path("tmp")):   # of a pull of this layer that died (we hold its lock)
            if leftover.startswith(name + "."):
                self._remove(self._path("tmp", leftover))
        stem = self._path("tmp", f"{name}.{os.getpid()}.{secrets.token_hex(4)}")
        blob_path, directory = stem + ".blob", stem + ".dir"
        try:
            try:
                with open(blob_path, "w+b") as blob:
                    client.blob(descriptor.digest, descriptor.size, blob, f"layer {number} ({descriptor.digest})")
                    blob.seek(0)
                    os.mkdir(directory, 0o755)
                    stats = unpack_layer(blob, layer_compression(descriptor.media_type), directory,
                                         max_bytes=self.limits.max_unpacked_bytes,
                                         max_entries=self.limits.max_layer_entries)
            except OSError as exc:
                raise ImageError(CACHE, f"the image cache could not be written: {exc.strerror}") from None
            except ImageError as exc:
                raise ImageError(exc.kind, f"layer {number} ({descriptor.digest}): {exc.cause}") from None
            if stats.diff_id != diff_id:
                raise ImageError(DIGEST_MISMATCH, f"layer {number} ({descriptor.digest}) unpacks to {stats.diff_id}, "
                                                  f"its config says {diff_id}")
            with self._index() as index:
                target = self.layer_path(descriptor.digest)
                if os.path.lexists(target):
                    self._remove(target)
                os.rename(directory, target)
                index.layers[descriptor.digest] = LayerEntry(stats.size, self.clock(), stats.diff_id, stats.whiteouts)
        finally:
            for leftover in (blob_path, directory):
                if os.path.lexists(leftover):
                    self._remove(leftover)

    def _lease(self, holder: str, image: str, plan: _Plan, diff_ids: tuple[str, ...],
               transient: bool) -> tuple[bool, list[int]]:
        """Record the lease (in the same turn of the lock as the look at the
        cache, so no collection comes between); whether it is new, and the
        numbers of the layers to pull."""
        with self._index() as index:
            created = holder not in index.leases
            index.leases[holder] = LeaseEntry(image, list(plan.digests), self.clock(), transient)
            return created, [number for number, digest in enumerate(plan.digests)
                             if not self._has_layer(index, digest, diff_ids[number], number)]

    def _record(self, key: str, plan: _Plan) -> str:
        """Record the image, collect the cache; returns how its whiteouts are kept."""
        with self._index() as index:
            now = self.clock()
            index.images[key] = ImageEntry(plan.manifest_digest, plan.config_digest, list(plan.digests), now)
            whiteouts = OVERLAY
            for digest in plan.digests:
                entry = index.layers.get(digest)
                if entry is None:
                    raise ImageError(CACHE, f"layer {digest} vanished from the cache while provisioning")
                entry.used = now
                if entry.whiteouts == MARKERS:
                    whiteouts = MARKERS
            self._plan(index, plan.digests)
        return whiteouts

    # ------------------------------------------------------------ collection
    def _plan(self, index: CacheIndex, protect: Iterable[str]) -> list[str]:
        """Collect (under the index lock): lapsed transient leases out, then
        the LRU unleased layers over the bound into the trash."""
        for holder in [h for h, entry in index.leases.items() if entry.transient and not self._holds(h)]:
            del index.leases[holder]
        victims = plan_collection(index.layers, index.leased() | set(protect), self.cache_size)
        for digest in victims:
            with contextlib.suppress(FileNotFoundError):
                os.rename(self.layer_path(digest), self._path("trash", f"{_file_name(digest)}.{secrets.token_hex(4)}"))
        for config in index.forget_layers(victims):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path("blobs", _file_name(config)))
        return victims

    def _empty_trash(self) -> None:
        for name in os.listdir(self._path("trash")):
            self._remove(self._path("trash", name))

    def _sweep_leftovers(self) -> None:
        """Layer directories the index does not know (a crash between unpack
        and record, or an index lost) go to the trash, as do the downloads
        of pulls whose process is gone; the trash is emptied."""
        for name in os.listdir(self._path("tmp")):
            pid = name.split(".")[1] if name.count(".") >= 2 else ""
            if pid.isdigit() and not _alive(int(pid)):
                self._remove(self._path("tmp", name))
        with self._index() as index:
            known = {_file_name(d) for d in index.layers}
            for name in os.listdir(self._path("layers")):
                if name not in known:
                    os.rename(self._path("layers", name), self._path("trash", f"{name}.{secrets.token_hex(4)}"))
            for digest in [d for d in index.layers if not os.path.isdir(self.layer_path(d))]:
                index.forget_layers([digest])
        self._empty_trash()

    # ------------------------------------------------------------ locks, files
    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @contextlib.contextmanager
    def _locked(self, path: str, shared: bool = False) -> Iterator[int]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _transient(self, holder: str | None) -> Iterator[None]:
        """While a pull with a transient lease runs, hold its liveness lock."""
        if holder is None:
            yield
            return
        path = self._path("locks", holder.replace(":", "-") + ".pull")
        try:
            with self._locked(path, shared=True):
                yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def _holds(self, holder: str) -> bool:
        """Is the pull of transient lease ``holder`` still running?"""
        path = self._path("locks", holder.replace(":", "-") + ".pull")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _index(self, write: bool = True) -> Iterator[CacheIndex]:
        """The index, under the store's lock; written back when ``write``."""
        try:
            with self._locked(self._path("lock")):
                index = self._load_index()
                yield index
                if write:
                    self._save_index(index)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO):
                raise ImageError(CACHE, f"the image cache {self.root} failed: {exc.strerror}") from None
            raise

    def _load_index(self) -> CacheIndex:
        try:
            with open(self._path(INDEX_FILE), "rb") as source:
                data = source.read(_MAX_INDEX_BYTES + 1)
            return CacheIndex.from_json(json.loads(data)) if len(data) <= _MAX_INDEX_BYTES else CacheIndex()
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return CacheIndex()

    def _save_index(self, index: CacheIndex) -> None:
        temp = self._path(f"{INDEX_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        with open(temp, "w") as sink:
            json.dump(index.to_json(), sink)
        os.replace(temp, self._path(INDEX_FILE))

    @staticmethod
    def _remove(path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
