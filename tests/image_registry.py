"""A real image registry for tests, and images built in the test.

- :class:`Registry`: Debian's ``docker-registry`` (the CNCF distribution
  registry, 2.8) on 127.0.0.1 with a temporary storage directory; no
  auth, ``htpasswd`` basic auth, or bearer-token auth against
  :class:`TokenServer`. Its access log tells which requests it served
  (:meth:`Registry.requests`), so a test can count blob downloads.
- :class:`TokenServer`: the token endpoint of the registry's token auth
  (the ``WWW-Authenticate: Bearer realm=…`` dance). Debian packages no
  token server (docker_auth, Harbor's core, ...), so this small one stands
  in: it checks basic credentials and signs RS256 JWTs with ``openssl``
  (no crypto library in the standard library), with its certificate in
  the ``x5c`` header; the registry verifies them against that
  certificate, as it would a real token service's.
- Images: :func:`tar_layer` builds a layer from (path, content) entries;
  :func:`busybox_image` a two-layer image of Debian's static busybox (the
  second layer deletes a file and hides a directory of the first with
  whiteouts); :func:`push_image` / :func:`push_index` push with the
  distribution API (monolithic uploads), :func:`push_with_skopeo` through
  an OCI layout and ``skopeo copy``, as an outside tool would.

The pytest fixtures ``registry`` and ``registry_factory`` start registries
and stop them after the test; the tools are installed by ``make
image-tools`` (part of ``make test``).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.client
import http.server
import io
import json
import os
import re
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import urllib.parse
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import pytest

from environment import unavailable
from waiting import wait_until

__all__ = ["Registry", "TokenServer", "Layer", "Image", "tar_layer", "busybox_image", "push_image", "push_index",
           "push_with_skopeo", "registry", "registry_factory", "require_tools", "BUSYBOX", "DOCKER_MANIFEST",
           "OCI_MANIFEST", "file_entry", "symlink_entry", "dir_entry"]

BUSYBOX = "/bin/busybox"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
_ACCESS_LINE = re.compile(r'"(GET|HEAD|PUT|POST|PATCH|DELETE) (\S+) HTTP/[0-9.]+" (\d{3})')
#: applets the test images link (a few: enough for the tests' commands)
APPLETS = ("sh", "ls", "cat", "echo", "id", "env", "pwd", "ps", "sleep", "true", "false", "mkdir", "rm", "test",
           "readlink", "stat", "hostname", "wc", "head")


def require_tools(*names: str) -> None:
    """Skip (fail under CI) when a tool of ``make image-tools`` is missing."""
    missing = [name for name in names if shutil.which(name) is None and not os.path.exists(name)]
    if missing:
        unavailable(f"missing {', '.join(missing)} (as root: make image-tools)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------ images
@dataclass(frozen=True)
class Layer:
    """A layer blob (``data``, compressed per ``media_type``) and its uncompressed digest."""

    data: bytes
    diff_id: str
    media_type: str = DOCKER_LAYER

    @property
    def digest(self) -> str:
        return _sha256(self.data)


@dataclass
class Image:
    """An image to push: layers bottom first and its config (a dict; its ``rootfs`` is filled in)."""

    layers: list[Layer]
    config: dict = field(default_factory=dict)
    oci: bool = False
    #: what the config claims the layers unpack to (default: the truth)
    diff_ids: list[str] | None = None

    def config_bytes(self) -> bytes:
        document = dict(self.config)
        document.setdefault("architecture", "amd64")
        document.setdefault("os", "linux")
        diff_ids = self.diff_ids if self.diff_ids is not None else [layer.diff_id for layer in self.layers]
        document["rootfs"] = {"type": "layers", "diff_ids": diff_ids}
        return json.dumps(document, sort_keys=True).encode()

    def manifest(self) -> tuple[bytes, str]:
        config = self.config_bytes()
        media_type = OCI_MANIFEST if self.oci else DOCKER_MANIFEST
        document = {"schemaVersion": 2, "mediaType": media_type,
                    "config": {"mediaType": OCI_CONFIG if self.oci else DOCKER_CONFIG, "digest": _sha256(config),
                               "size": len(config)},
                    "layers": [{"mediaType": layer.media_type, "digest": layer.digest, "size": len(layer.data)}
                               for layer in self.layers]}
        return json.dumps(document).encode(), media_type


def file_entry(path: str, data: bytes = b"", mode: int = 0o644, **fields) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(path)
    info.size, info.mode, info.mtime = len(data), mode, 1_700_000_000
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def dir_entry(path: str, mode: int = 0o755) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(path)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 1_700_000_000
    return info, None


def symlink_entry(path: str, target: str, hard: bool = False) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(path)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname, info.mtime = target, 1_700_000_000
    return info, None


def tar_layer(entries: Iterable[tuple[tarfile.TarInfo, bytes | None]], compress: bool = True,
              media_type: str = DOCKER_LAYER) -> Layer:
    """A layer of tar ``entries`` (``(TarInfo, data)``; the info is used as given)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for info, data in entries:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    raw = buffer.getvalue()
    return Layer(gzip.compress(raw, mtime=0) if compress else raw, _sha256(raw), media_type)


def busybox_image(*, oci: bool = False, extra: bytes = b"", config: dict | None = None) -> Image:
    """Two layers: busybox with applet links, ``/etc`` files and mount
    points; then a file added, ``/etc/remove-me`` deleted (whiteout) and
    ``/opt/hidden`` made opaque (its lower content hidden). ``extra``
    bytes go into a file of layer 2 (a distinct image per value)."""
    with open(BUSYBOX, "rb") as source:
        busybox = source.read()
    base = [dir_entry("bin"), file_entry("bin/busybox", busybox, 0o755)]
    base += [symlink_entry(f"bin/{applet}", "busybox") for applet in APPLETS]
    base += [dir_entry(d) for d in ("etc", "tmp", "proc", "sys", "dev", "opt", "opt/hidden", "root")]
    base += [file_entry("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
             file_entry("etc/group", b"root:x:0:\nnogroup:x:65534:\n"),
             file_entry("etc/remove-me", b"layer 1\n"), file_entry("opt/hidden/old", b"layer 1\n")]
    top = [dir_entry("etc"), file_entry("etc/motd", b"built in the test\n" + extra),
           file_entry("etc/.wh.remove-me"), dir_entry("opt/hidden"), file_entry("opt/hidden/.wh..wh..opq"),
           file_entry("opt/hidden/new", b"layer 2\n")]
    media_type = OCI_LAYER if oci else DOCKER_LAYER
    settings = {"Env": ["PATH=/bin", "GREETING=hello"], "Cmd": ["/bin/sh"], "WorkingDir": "/tmp",
                "ExposedPorts": {"8080/tcp": {}}, "Volumes": {"/data": {}}}
    settings.update(config or {})
    return Image([tar_layer(base, media_type=media_type), tar_layer(top, media_type=media_type)],
                 {"config": settings}, oci=oci)


# ------------------------------------------------------------------ pushing
def _request(url: str, method: str, body: bytes = b"", headers: dict[str, str] | None = None
             ) -> tuple[int, dict[str, str], bytes]:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=30)
    try:
        connection.request(method, urllib.parse.urlunsplit(("", "", parts.path, parts.query, "")), body=body,
                           headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def push_blob(registry: Registry, repository: str, data: bytes, auth: str | None = None) -> str:
    digest = _sha256(data)
    headers = {"Authorization": auth} if auth else {}
    status, response, body = _request(f"{registry.url}/v2/{repository}/blobs/uploads/", "POST", b"", headers)
    assert status == 202, (status, body)
    location = urllib.parse.urljoin(registry.url, response["location"])
    separator = "&" if "?" in location else "?"
    status, _, body = _request(f"{location}{separator}digest={digest}", "PUT", data,
                               dict(headers, **{"Content-Type": "application/octet-stream"}))
    assert status == 201, (status, body)
    return digest


def push_manifest(registry: Registry, repository: str, reference: str, body: bytes, media_type: str,
                  auth: str | None = None) -> str:
    headers = {"Content-Type": media_type, **({"Authorization": auth} if auth else {})}
    status, _, answer = _request(f"{registry.url}/v2/{repository}/manifests/{reference}", "PUT", body, headers)
    assert status == 201, (status, answer)
    return _sha256(body)


def _push_content(registry: Registry, repository: str, image: Image, auth: str | None) -> tuple[bytes, str]:
    """Push ``image``'s blobs; returns its manifest and the manifest's media type."""
    for layer in image.layers:
        push_blob(registry, repository, layer.data, auth)
    push_blob(registry, repository, image.config_bytes(), auth)
    return image.manifest()


def push_image(registry: Registry, repository: str, tag: str, image: Image) -> str:
    """Push ``image`` as ``repository:tag``; returns its manifest's digest."""
    auth = registry.push_authorization(repository)
    manifest, media_type = _push_content(registry, repository, image, auth)
    return push_manifest(registry, repository, tag, manifest, media_type, auth)


def push_index(registry: Registry, repository: str, tag: str, images: dict[str, Image], oci: bool = True) -> str:
    """Push one image per platform (``"linux/arm64/v8"``: image) under one index."""
    auth = registry.push_authorization(repository)
    entries = []
    for platform_name, image in images.items():
        manifest, media_type = _push_content(registry, repository, image, auth)
        digest = push_manifest(registry, repository, _sha256(manifest), manifest, media_type, auth)
        os_name, architecture, *variant = platform_name.split("/")
        entries.append({"mediaType": media_type, "digest": digest, "size": len(manifest),
                        "platform": {"os": os_name, "architecture": architecture,
                                     **({"variant": variant[0]} if variant else {})}})
    media_type = OCI_INDEX if oci else DOCKER_LIST
    body = json.dumps({"schemaVersion": 2, "mediaType": media_type, "manifests": entries}).encode()
    return push_manifest(registry, repository, tag, body, media_type, auth)


def push_with_skopeo(registry: Registry, repository: str, tag: str, image: Image, work: Path,
                     docker_format: bool = True) -> None:
    """Write ``image`` as an OCI layout and ``skopeo copy`` it to the
    registry (as Docker schema 2 with ``docker_format``: skopeo converts)."""
    layout = work / f"layout-{repository.replace('/', '-')}-{tag}"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    oci_image = Image([Layer(layer.data, layer.diff_id, OCI_LAYER) for layer in image.layers], image.config, oci=True)
    for data in [layer.data for layer in oci_image.layers] + [oci_image.config_bytes()]:
        (blobs / _sha256(data).split(":")[1]).write_bytes(data)
    manifest, media_type = oci_image.manifest()
    (blobs / _sha256(manifest).split(":")[1]).write_bytes(manifest)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": media_type, "digest": _sha256(manifest), "size": len(manifest),
         "annotations": {"org.opencontainers.image.ref.name": tag}}]}))
    command = ["skopeo", "--insecure-policy", "copy", "--dest-tls-verify=false"]
    if docker_format:
        command += ["--format", "v2s2"]
    if registry.users:
        user, password = next(iter(registry.users.items()))
        command += ["--dest-creds", f"{user}:{password}"]
    command += [f"oci:{layout}:{tag}", f"docker://{registry.host}/{repository}:{tag}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------ token service
class TokenServer:
    """The token endpoint of a registry's token auth (the module says why a
    stand-in): GET /token?service=…&scope=… with basic credentials of
    ``users`` → a JWT granting the scope; anonymous callers get pull
    access when ``anonymous_pull``; wrong credentials get 401."""

    def __init__(self, directory: Path, users: dict[str, str], service: str = "test-registry",
                 issuer: str = "test-issuer", anonymous_pull: bool = False) -> None:
        require_tools("openssl")
        self.directory, self.users, self.service, self.issuer = directory, users, service, issuer
        self.anonymous_pull = anonymous_pull
        self.key, self.certificate = directory / "token.key", directory / "token.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.key),
                        "-out", str(self.certificate), "-days", "2", "-subj", "/CN=mesoslike test token issuer"],
                       check=True, capture_output=True, timeout=60)
        der = subprocess.run(["openssl", "x509", "-in", str(self.certificate), "-outform", "DER"], check=True,
                             capture_output=True, timeout=60).stdout
        self._x5c = base64.b64encode(der).decode()
        #: (user or "", scope) of each token asked for
        self.asked: list[tuple[str, str]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                server._answer(self)

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.realm = f"http://127.0.0.1:{self.port}/token"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query)
        scope = (query.get("scope") or [""])[0]
        user = ""
        header = handler.headers.get("Authorization", "")
        if header.startswith("Basic "):
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            if self.users.get(user) != password:
                self.asked.append((user, scope))
                handler.send_response(401)
                handler.end_headers()
                return
        self.asked.append((user, scope))
        access = []
        if scope.startswith("repository:"):
            _, name, actions = scope.split(":", 2)
            granted = actions.split(",") if user else (["pull"] if self.anonymous_pull else [])
            access.append({"type": "repository", "name": name, "actions": granted})
        body = json.dumps({"token": self.token(user, access), "expires_in": 300}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def token(self, user: str, access: list[dict]) -> str:
        def encoded(document: dict) -> str:
            return base64.urlsafe_b64encode(json.dumps(document).encode()).rstrip(b"=").decode()

        now = int(time.time())
        claims = {"iss": self.issuer, "sub": user, "aud": self.service, "exp": now + 300, "nbf": now - 60,
                  "iat": now, "jti": os.urandom(8).hex(), "access": access}
        signed = f"{encoded({'typ': 'JWT', 'alg': 'RS256', 'x5c': [self._x5c]})}.{encoded(claims)}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signed.encode(),
                                   check=True, capture_output=True, timeout=60).stdout
        return f"{signed}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


# ------------------------------------------------------------------ the registry
class Registry:
    """A ``docker-registry`` on 127.0.0.1 (the module says how).
    ``auth``: None, "htpasswd" or "token" (with ``users``)."""

    def __init__(self, directory: Path, auth: str | None = None, users: dict[str, str] | None = None,
                 anonymous_pull: bool = False) -> None:
        require_tools("docker-registry")
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.storage = directory / "storage"
        self.users = dict(users or {})
        self.port = _free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        self.token_server: TokenServer | None = None
        self.log_path = directory / "registry.log"
        config = {"version": 0.1, "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
                  "storage": {"filesystem": {"rootdirectory": str(self.storage)}, "delete": {"enabled": True}},
                  "http": {"addr": self.host}}
        if auth == "htpasswd":
            with warnings.catch_warnings():   # deprecated in 3.11, gone in 3.13; the registry wants bcrypt
                warnings.simplefilter("ignore", DeprecationWarning)
                import crypt
            htpasswd = directory / "htpasswd"
            htpasswd.write_text("".join(f"{user}:{crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))}\n"
                                        for user, password in self.users.items()))
            config["auth"] = {"htpasswd": {"realm": "test-realm", "path": str(htpasswd)}}
        elif auth == "token":
            self.token_server = TokenServer(directory, self.users, anonymous_pull=anonymous_pull)
            config["auth"] = {"token": {"realm": self.token_server.realm, "service": self.token_server.service,
                                        "issuer": self.token_server.issuer,
                                        "rootcertbundle": str(self.token_server.certificate)}}
        self.auth = auth
        (directory / "config.yml").write_text(json.dumps(config))   # JSON is YAML
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(["docker-registry", "serve", str(directory / "config.yml")],
                                        stdout=self._log, stderr=subprocess.STDOUT)
        wait_until(self._serving, 30, f"the registry on {self.host}", diagnostics=self.log)
        #: where the access log starts counting: after the readiness probes
        self._log_start = self.log_path.stat().st_size

    def _serving(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail(f"docker-registry exited ({self.process.returncode}):\n{self.log()}")
        status, _, _ = _request(f"{self.url}/v2/", "GET")
        return status in (200, 401)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        if self.token_server is not None:
            self.token_server.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def _access_log(self) -> Iterator[re.Match]:
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            return _ACCESS_LINE.finditer(log.read().decode(errors="replace"))

    def requests(self, method: str = "GET", contains: str = "") -> list[str]:
        """The paths of the ``method`` requests served since it started whose path holds ``contains``."""
        return [found.group(2) for found in self._access_log() if found.group(1) == method and contains in found.group(2)]

    def blob_downloads(self, digest: str = "") -> int:
        """Blob GETs served with 200 (any blob, or the one of ``digest``)."""
        return sum(1 for found in self._access_log() if found.group(1) == "GET" and "/blobs/" in found.group(2)
                   and digest in found.group(2) and found.group(3) == "200")

    def blob_file(self, digest: str) -> Path:
        """Where the registry's storage keeps blob ``digest`` (to corrupt it)."""
        algorithm, hexdigest = digest.split(":")
        return self.storage / "docker/registry/v2/blobs" / algorithm / hexdigest[:2] / hexdigest / "data"

    def push_authorization(self, repository: str) -> str | None:
        """An ``Authorization`` value allowed to push to ``repository``."""
        if not self.users:
            return None
        user, password = next(iter(self.users.items()))
        if self.token_server is not None:
            return "Bearer " + self.token_server.token(
                user, [{"type": "repository", "name": repository, "actions": ["pull", "push"]}])
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def registry_factory(tmp_path: Path) -> Iterator:
    """Start registries (``registry_factory(auth=..., users=...)``); all stop after the test."""
    started: list[Registry] = []

    def start(**options) -> Registry:
        started.append(Registry(tmp_path / f"registry-{len(started)}", **options))
        return started[-1]

    yield start
    for one in started:
        one.stop()


@pytest.fixture
def registry(registry_factory) -> Registry:
    """A registry without auth."""
    return registry_factory()
