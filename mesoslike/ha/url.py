"""Master addresses: ``tcp://HOST:PORT`` or ``zk://HOST:PORT[,HOST:PORT...]/PATH``.

Pure parsing, no kazoo and no zmq, so the CLI and the runtimes can validate an
address without importing either edge. Every malformed address raises
:class:`~mesoslike.errors.ConfigError` naming what is wrong.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from mesoslike.errors import ConfigError
from mesoslike.secret_files import check_secret_file_mode

__all__ = ["ZkUrl", "is_zk_url", "parse_master_address", "ZK_SCHEME"]

ZK_SCHEME = "zk://"
_TCP_SCHEME = "tcp://"
_EXPECTED_ZK = "expected zk://HOST:PORT[,HOST:PORT...]/PATH"
_EXPECTED_ADDRESS = "expected tcp://HOST:PORT or zk://HOST:PORT[,HOST:PORT...]/PATH"

# A DNS name or IPv4 address (letters, digits, '-', '_', '.'), or an IPv6
# address in brackets as ZooKeeper's own connect strings write it.
_HOSTNAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_BRACKETED_IPV6 = re.compile(r"\[[0-9A-Fa-f:.]+\]")
# ZooKeeper rejects control characters in paths; whitespace is legal there but
# is almost always a quoting mistake in a flag, so it is refused too.
_BAD_PATH_CHARACTER = re.compile(r"[\x00-\x20\x7f]")


class ZkUrl(msgspec.Struct, frozen=True):
    """A parsed ``zk://`` URL: the ensemble's connect string and the group path.

    ``hosts`` is kazoo's connect string (``"h1:2181,h2:2181"``, no chroot);
    ``path`` is the absolute znode path of the master group (``"/mesoslike"``).
    """

    hosts: str
    path: str
    #: digest credentials (user, password) of a master (``--zk-auth FILE``):
    #: it authenticates, and what it creates only masters may change; others
    #: (agents, frameworks) read (docs/security.rst). Not part of the URL's text.
    #: Nor of its equality, hash or repr (a password must never reach a log):
    #: a Struct compares, hashes and shows every field, so the three are
    #: written out below, over ``hosts`` and ``path`` only.
    auth: tuple[str, str] | None = None

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, ZkUrl)
        return (self.hosts, self.path) == (other.hosts, other.path)

    def __ne__(self, other: object) -> bool:   # stated, not left to the Struct's own (every field)
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash((self.hosts, self.path))

    def __repr__(self) -> str:
        return f"ZkUrl(hosts={self.hosts!r}, path={self.path!r})"

    def __rich_repr__(self) -> Any:
        yield "hosts", self.hosts
        yield "path", self.path

    def with_auth_file(self, path: str) -> ZkUrl:
        """This URL with the digest credentials of ``path`` (one line
        ``USER:PASSWORD``, mode 0600); ConfigError naming the file."""
        check_secret_file_mode(path)
        try:
            with open(path) as file:
                text = file.read().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the ZooKeeper auth file {path}: {exc.strerror}") from None
        user, sep, password = text.partition(":")
        if not sep or not user or not password or "\n" in text:
            raise ConfigError(f"the ZooKeeper auth file {path} must hold one line USER:PASSWORD")
        return msgspec.structs.replace(self, auth=(user, password))

    def __str__(self) -> str:
        return f"{ZK_SCHEME}{self.hosts}{self.path}"

    @classmethod
    def parse(cls, text: str) -> ZkUrl:
        """Parse ``zk://HOST:PORT[,HOST:PORT...]/PATH``; raise ConfigError saying what is wrong."""
        if not isinstance(text, str):
            raise ConfigError(f"bad ZooKeeper URL {text!r}: {_EXPECTED_ZK}")
        stripped = text.strip()
        if not stripped.lower().startswith(ZK_SCHEME):
            raise ConfigError(f"bad ZooKeeper URL {text!r}: the scheme must be zk:// ({_EXPECTED_ZK})")
        rest = stripped[len(ZK_SCHEME):]
        for character, reason in (("@", "credentials are not supported"), ("?", "query strings are not supported"),
                                  ("#", "fragments are not supported")):
            if character in rest:
                raise ConfigError(f"bad ZooKeeper URL {text!r}: {reason} ({_EXPECTED_ZK})")
        hosts_part, slash, path_part = rest.partition("/")
        hosts = _parse_hosts(text, hosts_part)
        path = _parse_path(text, slash + path_part)
        return cls(hosts=hosts, path=path)


def is_zk_url(text: object) -> bool:
    """Whether ``text`` uses the ``zk://`` scheme.

    This only routes an address: a ``zk://`` text may still be malformed, and
    :meth:`ZkUrl.parse` then says why (rather than a misleading "expected
    tcp://" from the other branch).
    """
    return isinstance(text, str) and text.strip().lower().startswith(ZK_SCHEME)


def parse_master_address(text: str) -> str | ZkUrl:
    """A master address: ``tcp://HOST:PORT`` (returned as the stripped text) or a :class:`ZkUrl`.

    The tcp form is checked by the same rules as
    ``mesoslike.transport.parse_tcp_address`` (re-implemented here so that
    this module stays free of zmq). Raises ConfigError for anything else.
    """
    if is_zk_url(text):
        return ZkUrl.parse(text)
    if not isinstance(text, str) or not text.strip().startswith(_TCP_SCHEME):
        raise ConfigError(f"bad master address {text!r}: {_EXPECTED_ADDRESS}")
    address = text.strip()
    host, sep, port = address[len(_TCP_SCHEME):].rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"bad address {text!r}: expected tcp://HOST:PORT with a port 0-65535")
    return address


def _parse_hosts(text: str, hosts_part: str) -> str:
    if not hosts_part:
        raise ConfigError(f"bad ZooKeeper URL {text!r}: no hosts ({_EXPECTED_ZK})")
    for entry in hosts_part.split(","):
        _check_host_port(text, entry)
    return hosts_part


def _check_host_port(text: str, entry: str) -> None:
    if not entry:
        raise ConfigError(f"bad ZooKeeper URL {text!r}: an empty host in the host list ({_EXPECTED_ZK})")
    host, sep, port = entry.rpartition(":")
    if not sep:
        raise ConfigError(f"bad ZooKeeper URL {text!r}: {entry!r} has no port ({_EXPECTED_ZK})")
    if not (_HOSTNAME.fullmatch(host) or _BRACKETED_IPV6.fullmatch(host)):
        raise ConfigError(f"bad ZooKeeper URL {text!r}: {host!r} is not a host name or address "
                          f"(IPv6 goes in brackets: [::1]:2181)")
    if not port.isdigit() or not port.isascii():
        raise ConfigError(f"bad ZooKeeper URL {text!r}: port {port!r} of {entry!r} is not a number")
    if not 1 <= int(port) <= 65535:
        raise ConfigError(f"bad ZooKeeper URL {text!r}: port {port} of {entry!r} is out of range 1-65535")


def _parse_path(text: str, path: str) -> str:
    if not path or path == "/":
        raise ConfigError(f"bad ZooKeeper URL {text!r}: the group path is missing; "
                          f"give one, like zk://127.0.0.1:2181/mesoslike")
    if path.endswith("/"):
        raise ConfigError(f"bad ZooKeeper URL {text!r}: the path {path!r} ends with '/'")
    if _BAD_PATH_CHARACTER.search(path):
        raise ConfigError(f"bad ZooKeeper URL {text!r}: the path {path!r} contains whitespace or control characters")
    components = path[1:].split("/")
    for component in components:
        if component in ("", ".", ".."):
            raise ConfigError(f"bad ZooKeeper URL {text!r}: the path {path!r} has an empty, '.' or '..' component")
    if components[0] == "zookeeper":
        raise ConfigError(f"bad ZooKeeper URL {text!r}: /zookeeper is reserved by ZooKeeper itself")
    return path
