"""A client of the Docker Registry HTTP API V2 / OCI distribution API:
manifests and blobs, pulled only (the test fixture pushes with its own
code or skopeo).

- **Transport.** ``https`` (the system's CA certificates), except for
  loopback registries and those the operator lists as insecure
  (``--docker-insecure-registries``), which are reached over plain
  ``http``; a registry given with a scheme (``--docker-registry
  http://10.0.0.5:5000``) uses that scheme, ``http`` again only if it is
  loopback or listed. Redirects (a registry sending blobs to a CDN) are
  followed, at most :data:`MAX_REDIRECTS`, never from ``https`` down to
  ``http`` (unless to an allowed host), and the ``Authorization`` header
  never follows one to another host.
- **Authentication.** A ``401`` with ``WWW-Authenticate: Bearer
  realm=…,service=…,scope=…`` is answered by asking the realm for a token
  (with the registry's credentials as basic auth, if any; anonymously
  otherwise), once per scope; ``Basic`` by sending the credentials. A
  realm over plain ``http`` is refused unless loopback or listed:
  credentials never travel in clear text to a host not chosen for it.
- **Bounds.** Each read waits at most ``timeout`` seconds, a whole
  response ``deadline`` seconds; a manifest or token is at most
  ``max_manifest_bytes``; a blob exactly its descriptor's size — more is
  refused at once, less at the end — and its sha256 must match the digest.
- **Errors.** :class:`~.errors.ImageError` of kind not_found (404),
  unauthorized (401, 403), unreachable (connection, TLS, timeout, 429,
  5xx), digest_mismatch, too_large, bad_image; the registry's own error
  code and message (printable characters only, truncated) are quoted.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ipaddress
import json
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import BinaryIO, Callable

from .credentials import Credential
from .errors import BAD_IMAGE, DIGEST_MISMATCH, NOT_FOUND, TOO_LARGE, UNAUTHORIZED, UNREACHABLE, ImageError
from .manifest import ACCEPT
from .reference import DOCKER_HUB, ImageReference

__all__ = ["RegistryClient", "RegistryEndpoints", "parse_challenge", "is_loopback", "MAX_REDIRECTS", "USER_AGENT"]

MAX_REDIRECTS = 5
USER_AGENT = "mesoslike-images/1"
CHUNK = 1 << 16
#: where Docker Hub's API is (``docker.io`` in references)
DOCKER_HUB_API = "registry-1.docker.io"


def is_loopback(host: str) -> bool:
    """Is ``host`` (a name or address, no port) this machine?"""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_host(netloc: str) -> str:
    """The host of ``host[:port]`` (IPv6 in brackets)."""
    if netloc.startswith("["):
        return netloc[1:netloc.index("]")] if "]" in netloc else netloc
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


@dataclass(frozen=True)
class RegistryEndpoints:
    """Where each registry's API is and over which scheme: ``schemes`` the
    registries given with a scheme (the default registry's flag),
    ``insecure`` those allowed over plain http (besides loopback)."""

    insecure: frozenset[str] = frozenset()
    schemes: dict[str, str] = field(default_factory=dict)

    def allows_http(self, netloc: str) -> bool:
        return netloc.lower() in self.insecure or _split_host(netloc) in self.insecure or is_loopback(
            _split_host(netloc))

    def base_url(self, registry: str) -> str:
        """``scheme://host[:port]`` of ``registry``'s API."""
        netloc = DOCKER_HUB_API if registry == DOCKER_HUB else registry
        scheme = self.schemes.get(registry) or ("http" if self.allows_http(netloc) else "https")
        if scheme == "http" and not self.allows_http(netloc):
            raise ImageError(UNREACHABLE, f"the registry {registry} is to be reached over plain http, which only "
                                          "loopback registries and those of --docker-insecure-registries may be")
        return f"{scheme}://{netloc}"


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``WWW-Authenticate: Bearer realm="…",service="…"`` → ("bearer",
    {"realm": …, "service": …}) (pure; quoted strings may hold commas and
    backslash escapes; unknown or broken parts are dropped)."""
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    position, length = 0, len(rest)
    while position < length:
        while position < length and rest[position] in " ,":
            position += 1
        equals = rest.find("=", position)
        if equals < 0:
            break
        key = rest[position:equals].strip().lower()
        position = equals + 1
        if position < length and rest[position] == '"':
            value, position = [], position + 1
            while position < length and rest[position] != '"':
                if rest[position] == "\\" and position + 1 < length:
                    position += 1
                value.append(rest[position])
                position += 1
            position += 1
            params[key] = "".join(value)
        else:
            end = rest.find(",", position)
            end = length if end < 0 else end
            params[key] = rest[position:end].strip()
            position = end
    return scheme.lower(), params


def _printable(text: str, limit: int = 200) -> str:
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


class _Response:
    """A response whose body is still to be read, and its connection
    (back to the client's pool by :meth:`finish` if the body was read to
    its end, else closed)."""

    def __init__(self, client: RegistryClient, key: tuple[str, str], connection: http.client.HTTPConnection,
                 response: http.client.HTTPResponse) -> None:
        self.client, self.key, self.connection, self.response = client, key, connection, response
        self.status = response.status

    def header(self, name: str) -> str:
        return self.response.getheader(name) or ""

    def finish(self) -> None:
        if self.response.isclosed() and self.key not in self.client._connections:
            self.client._connections[self.key] = self.connection
        else:
            self.connection.close()

    def read_bounded(self, limit: int, deadline: float, what: str) -> bytes:
        declared = self.header("Content-Length")
        if declared.isdigit() and int(declared) > limit:
            raise ImageError(TOO_LARGE, f"{what} is {int(declared)} bytes (at most {limit})")
        parts: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = self.response.read(min(CHUNK, limit + 1 - total))
            except (OSError, http.client.HTTPException) as exc:
                raise self.client._unreachable(urllib.parse.urlsplit(f"{self.key[0]}://{self.key[1]}"), exc,
                                               what) from None
            if not chunk:
                return b"".join(parts)
            total += len(chunk)
            if total > limit:
                raise ImageError(TOO_LARGE, f"{what} is more than {limit} bytes")
            parts.append(chunk)
            _check_deadline(deadline, what)


def _check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise ImageError(UNREACHABLE, f"{what} was not downloaded in time")


class RegistryClient:
    """Pulls manifests and blobs of one image's repository (the module
    says how). Not thread-safe: one per pull."""

    def __init__(self, reference: ImageReference, endpoints: RegistryEndpoints, credential: Credential | None = None,
                 *, timeout: float = 60.0, deadline: float = 1800.0, max_manifest_bytes: int = 4 << 20,
                 on_request: Callable[[str, str], None] | None = None) -> None:
        self.reference = reference
        self.endpoints = endpoints
        self.credential = credential
        self.timeout, self.deadline, self.max_manifest_bytes = timeout, deadline, max_manifest_bytes
        self.base = endpoints.base_url(reference.registry)
        #: the ``Authorization`` value for the registry's host, once known
        self._authorization: str | None = None
        self._connections: dict[tuple[str, str], http.client.HTTPConnection] = {}
        self._on_request = on_request
        #: requests made (method, path), for the caller's accounting
        self.requests = 0

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------ the API
    def manifest(self, reference: str) -> tuple[bytes, str, str]:
        """The manifest (or index) named by a tag or digest: its bytes,
        content type and digest (the sha256 of the bytes; when
        ``reference`` is a digest, the bytes must have it)."""
        what = f"the manifest {reference}"
        response = self._get(f"/v2/{self.reference.repository}/manifests/{reference}", {"Accept": ACCEPT}, what)
        try:
            body = response.read_bounded(self.max_manifest_bytes, time.monotonic() + self.deadline, what)
        finally:
            response.finish()
        expected = reference if ":" in reference else response.header("Docker-Content-Digest")
        algorithm = "sha512" if expected.startswith("sha512:") else "sha256"
        digest = f"{algorithm}:{hashlib.new(algorithm, body).hexdigest()}"
        if expected and expected != digest:
            raise ImageError(DIGEST_MISMATCH, f"{what}: the registry sent bytes whose digest is {digest}, "
                                              f"not {expected}")
        return body, response.header("Content-Type"), digest

    def blob(self, digest: str, size: int, sink: BinaryIO, what: str = "") -> None:
        """Write blob ``digest`` into ``sink``: exactly ``size`` bytes whose
        digest is ``digest``, or :class:`ImageError` (digest_mismatch)."""
        what = what or f"the blob {digest}"
        started = time.monotonic()
        response = self._get(f"/v2/{self.reference.repository}/blobs/{digest}", {}, what)
        algorithm = digest.split(":", 1)[0]
        hasher = hashlib.new(algorithm)
        total = 0
        try:
            while True:
                try:
                    chunk = response.response.read(min(CHUNK, size + 1 - total))
                except (OSError, http.client.HTTPException) as exc:
                    raise self._unreachable(urllib.parse.urlsplit(self.base), exc, what) from None
                if not chunk:
                    break
                total += len(chunk)
                if total > size:
                    raise ImageError(DIGEST_MISMATCH, f"{what}: the registry sent more than its {size} bytes")
                hasher.update(chunk)
                sink.write(chunk)
                _check_deadline(started + self.deadline, what)
        finally:
            response.finish()
        if total != size:
            raise ImageError(DIGEST_MISMATCH, f"{what}: the registry sent {total} bytes, not {size}")
        if f"{algorithm}:{hasher.hexdigest()}" != digest:
            raise ImageError(DIGEST_MISMATCH, f"{what}: the registry sent bytes whose digest is "
                                              f"{algorithm}:{hasher.hexdigest()}, not {digest}")

    # ------------------------------------------------------------ requests
    def _get(self, path: str, headers: dict[str, str], what: str) -> _Response:
        """GET ``path`` of the registry, authenticating as it asks; the
        response is 200 or an :class:`ImageError` is raised."""
        tried: set[str] = set()
        while True:
            response = self._request(self.base + path, headers, self._authorization, what)
            if response.status == 200:
                return response
            error = self._failure(response, what)
            if response.status != 401:
                raise error
            scheme, params = parse_challenge(response.header("WWW-Authenticate"))
            if scheme == "bearer" and params.get("realm"):
                scope = params.get("scope") or f"repository:{self.reference.repository}:pull"
                if scope in tried:
                    raise error
                tried.add(scope)
                self._authorization = "Bearer " + self._token(params, scope, what)
            elif scheme == "basic" and self.credential is not None and "basic" not in tried:
                tried.add("basic")
                self._authorization = self._basic()
            else:
                raise error

    def _basic(self) -> str:
        assert self.credential is not None
        pair = f"{self.credential.username}:{self.credential.password}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def _token(self, params: dict[str, str], scope: str, what: str) -> str:
        """A bearer token from the challenge's realm for ``scope``."""
        realm = urllib.parse.urlsplit(params["realm"])
        if realm.scheme not in ("https", "http") or not realm.netloc:
            raise ImageError(UNAUTHORIZED, f"{what}: the registry's token realm {params['realm'][:200]!r} is not "
                                           "an http(s) URL")
        query = urllib.parse.urlencode([(k, v) for k, v in (("service", params.get("service")), ("scope", scope))
                                        if v])
        url = urllib.parse.urlunsplit((realm.scheme, realm.netloc, realm.path or "/",
                                       "&".join(q for q in (realm.query, query) if q), ""))
        basic = self._basic() if self.credential is not None else None
        response = self._request(url, {}, basic, "a token")
        if response.status != 200:
            failure = self._failure(response, "a token")
            refused = "the credentials of --docker-config" if self.credential else "an anonymous token"
            raise ImageError(UNAUTHORIZED if response.status in (401, 403) else failure.kind,
                             f"{what}: the token service {realm.netloc} refused {refused} ({failure.cause})")
        try:
            body = response.read_bounded(self.max_manifest_bytes, time.monotonic() + self.deadline, "the token")
        finally:
            response.finish()
        try:
            answer = json.loads(body)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, UnicodeDecodeError, AttributeError):
            token = None
        if not isinstance(token, str) or not token or not token.isprintable():
            raise ImageError(UNAUTHORIZED, f"{what}: the token service {realm.netloc} answered without a token")
        return token

    def _failure(self, response: _Response, what: str) -> ImageError:
        """The error a non-200 response means (its body read and the response finished)."""
        status = response.status
        detail = f"HTTP {status}"
        try:
            errors = json.loads(response.read_bounded(1 << 16, time.monotonic() + self.timeout, "an error"))["errors"]
            first = errors[0]
            detail += f" {_printable(str(first.get('code', '')), 60)}: {_printable(str(first.get('message', '')))}"
        except (ImageError, ValueError, UnicodeDecodeError, KeyError, IndexError, TypeError, AttributeError,
                OSError, http.client.HTTPException):
            detail += f" {_printable(response.response.reason or '')}"
        finally:
            response.finish()
        registry = self.reference.registry
        if status == 404:
            return ImageError(NOT_FOUND, f"{what} was not found in {registry} ({detail})")
        if status in (401, 403):
            has = ("the credentials of --docker-config were refused" if self.credential is not None
                   else "no credentials for it in --docker-config")
            return ImageError(UNAUTHORIZED, f"{what}: {registry} refused access ({detail}; {has})")
        if status == 429 or status >= 500:
            return ImageError(UNREACHABLE, f"{what}: {registry} failed to answer ({detail})")
        return ImageError(BAD_IMAGE, f"{what}: {registry} answered {detail}")

    def _request(self, url: str, headers: dict[str, str], authorization: str | None, what: str) -> _Response:
        """GET ``url``, following redirects (the module says how); the
        ``authorization`` goes to ``url``'s host only."""
        origin = urllib.parse.urlsplit(url).netloc
        for _ in range(MAX_REDIRECTS + 1):
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ImageError(BAD_IMAGE, f"{what}: the registry sent us to {url[:200]!r}, not an http(s) URL")
            if parts.scheme == "http" and not self.endpoints.allows_http(parts.netloc):
                raise ImageError(UNREACHABLE, f"{what}: the registry sent us to {parts.netloc} over plain http, "
                                              "which only loopback hosts and --docker-insecure-registries may be")
            sent = dict(headers, **{"User-Agent": USER_AGENT})
            if authorization and parts.netloc == origin:
                sent["Authorization"] = authorization
            response = self._send(parts, sent, what)
            if response.status not in (301, 302, 303, 307, 308):
                return response
            location = response.header("Location")
            response.connection.close()   # the redirect's body is not wanted
            if not location:
                raise ImageError(BAD_IMAGE, f"{what}: a redirect without a Location")
            url = urllib.parse.urljoin(url, location)
        raise ImageError(UNREACHABLE, f"{what}: more than {MAX_REDIRECTS} redirects")

    def _send(self, parts: urllib.parse.SplitResult, headers: dict[str, str], what: str) -> _Response:
        key = (parts.scheme, parts.netloc)
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        kept = self._connections.pop(key, None)   # ours until the response is finished
        connection = kept or self._connect(parts)
        try:
            connection.request("GET", target, headers=headers)
            response = connection.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            connection.close()
            if kept is None:
                raise self._unreachable(parts, exc, what) from None
            return self._send(parts, headers, what)   # a kept-alive connection the server had closed: anew
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise self._unreachable(parts, exc, what) from None
        self.requests += 1
        if self._on_request is not None:
            self._on_request("GET", parts.netloc + target)
        return _Response(self, key, connection, response)

    def _connect(self, parts: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        if parts.scheme == "https":
            return http.client.HTTPSConnection(parts.netloc, timeout=self.timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(parts.netloc, timeout=self.timeout)

    def _unreachable(self, parts: urllib.parse.SplitResult, exc: BaseException, what: str) -> ImageError:
        if isinstance(exc, (socket.timeout, TimeoutError)):
            why = f"no answer within {self.timeout:g} s"
        elif isinstance(exc, ssl.SSLError):
            why = f"TLS failed ({exc.reason or exc})"
        else:
            why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return ImageError(UNREACHABLE, f"{what}: cannot reach the registry at {parts.scheme}://{parts.netloc} ({why})")
