"""Which process holds the client's end of a TCP connection to the agent,
from the kernel's own tables: how the agent knows that a call of the v1
executor API comes from inside an executor's container, with no secret from
the caller (pymesos's executors send none; docs/mesos-api.rst, "Executor
API").

The connection, as the agent's end sees it, is (client address, client
port, agent address, agent port). The client's socket is the one whose
local end is the client's and whose remote end is the agent's, in the
client's network namespace; the kernel gives its inode — asked over netlink
(``sock_diag``, one exact lookup) when that namespace is the agent's own,
else read from the namespace's table of TCP sockets (``/proc/PID/net/tcp``
and ``tcp6``, through a process of that namespace). A process holds that
socket when one of its descriptors (``/proc/PID/fd/N``) is
``socket:[INODE]``.

Only the processes the caller names are looked at — those of one container
(its cgroup's, or its session's) — so the cost is bounded by what that
container holds, never by the host: at most :data:`MAX_PROCESSES`
processes, :data:`MAX_NAMESPACES` network namespaces, :data:`MAX_TABLE_LINES`
lines of a socket table and :data:`MAX_DESCRIPTORS` descriptors in all. Past
a bound the answer is "not found" (the call is refused, never wrongly
accepted). Linux only; reads ``/proc`` as the agent's user (root reads
every process's descriptors; another user only its own processes').
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from typing import Iterable, Iterator

__all__ = ["holder_of_connection", "socket_inode", "diag_inode", "MAX_PROCESSES", "MAX_NAMESPACES", "MAX_TABLE_LINES",
           "MAX_DESCRIPTORS"]

#: processes of a container looked at, at most
MAX_PROCESSES = 4096
#: network namespaces among them whose socket tables are read, at most
MAX_NAMESPACES = 8
#: lines of one socket table read, at most (a table line is ~150 bytes: 150 MB)
MAX_TABLE_LINES = 1_000_000
#: file descriptors looked at in all, at most
MAX_DESCRIPTORS = 1 << 20
#: the state of an established TCP socket in /proc/net/tcp
_ESTABLISHED = "01"

Endpoint = tuple[str, int]


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An address, IPv4-mapped IPv6 ones as IPv4 (a dual-stack socket's peer)."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _table_endpoint(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int] | None:
    """``0100007F:1F90`` (the kernel's: 32-bit words in host order, little-endian here) -> (address, port)."""
    hexaddress, _, hexport = text.partition(":")
    try:
        raw, port = bytes.fromhex(hexaddress), int(hexport, 16)
    except ValueError:
        return None
    if len(raw) not in (4, 16):
        return None
    ordered = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(ordered)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped, port
    return address, port


def socket_inode(table_lines: Iterable[str], client: Endpoint, server: Endpoint) -> int | None:
    """The inode of the established socket whose local end is ``client`` and
    remote end ``server``, in the lines of a ``/proc/net/tcp``-format table
    (its heading line is skipped); None if there is none."""
    want_local, want_remote = _address(client[0]), _address(server[0])
    if want_local is None or want_remote is None:
        return None
    port = f":{client[1]:04X}"   # what the line's local end ends with: most lines are left at that
    for count, line in enumerate(table_lines):
        if count >= MAX_TABLE_LINES:
            return None
        fields = line.split(None, 10)
        if len(fields) < 10 or not fields[1].endswith(port) or fields[3] != _ESTABLISHED:
            continue
        local, remote = _table_endpoint(fields[1]), _table_endpoint(fields[2])
        if local == (want_local, client[1]) and remote == (want_remote, server[1]):
            try:
                inode = int(fields[9])
            except ValueError:
                return None
            return inode or None   # 0: a socket no process holds any more
    return None


# ------------------------------------------------------------ sock_diag
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_NO_COOKIE = 0xFFFFFFFF
_ALL_STATES = 0xFFFFFFFF
#: nlmsghdr; inet_diag_req_v2's family, protocol, ext, pad, states; then its socket id: ports (network
#: order), addresses (network order), interface and cookie
_HEADER = struct.Struct("=IHHII")
_SELECT = struct.Struct("=BBBxI")
_PORTS = struct.Struct(">HH")
_TAIL = struct.Struct("=III")
_REQUEST_SIZE = _HEADER.size + _SELECT.size + _PORTS.size + 32 + _TAIL.size
#: where inet_diag_msg's idiag_inode is in a reply (after nlmsghdr: family..retrans, id, expires,
#: rqueue, wqueue, uid)
_INODE = struct.Struct("=I")
_INODE_OFFSET = 16 + 4 + 48 + 16


def _packed(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    return address.packed.ljust(16, b"\0")


def diag_inode(client: Endpoint, server: Endpoint) -> int | None:
    """The inode of the client's socket of the connection ``client`` ->
    ``server`` in this process's network namespace, asked of the kernel
    (``sock_diag``: one exact lookup); None if it has none. OSError when
    the kernel does not answer such questions."""
    local, remote = _address(client[0]), _address(server[0])
    if local is None or remote is None or local.version != remote.version:
        return None
    family = socket.AF_INET if local.version == 4 else socket.AF_INET6
    request = (_HEADER.pack(_REQUEST_SIZE, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
               + _SELECT.pack(family, socket.IPPROTO_TCP, 0, _ALL_STATES) + _PORTS.pack(client[1], server[1])
               + _packed(local) + _packed(remote) + _TAIL.pack(0, _NO_COOKIE, _NO_COOKIE))
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(2.0)
        diag.sendto(request, (0, 0))
        reply = diag.recv(8192)
    if len(reply) < 20:
        raise OSError(errno.EPROTO, "a short sock_diag reply")
    kind = struct.unpack_from("=H", reply, 4)[0]
    if kind == _NLMSG_ERROR:
        code = -struct.unpack_from("=i", reply, 16)[0]
        if code == errno.ENOENT:
            return None
        raise OSError(code, os.strerror(code))
    if kind != _SOCK_DIAG_BY_FAMILY or len(reply) < _INODE_OFFSET + 4:
        raise OSError(errno.EPROTO, f"an unexpected sock_diag reply (type {kind})")
    inode = _INODE.unpack_from(reply, _INODE_OFFSET)[0]
    return inode or None


def _lines(path: str) -> Iterator[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as table:
            yield from table
    except OSError:
        return


def _namespace(proc: str, pid: int) -> str | None:
    try:
        return os.readlink(f"{proc}/{pid}/ns/net")
    except OSError:
        return None


def _holds(proc: str, pid: int, target: str, budget: list[int]) -> bool:
    """Whether one of ``pid``'s descriptors is ``target`` (``socket:[INODE]``),
    spending ``budget[0]`` descriptors at most."""
    directory = f"{proc}/{pid}/fd"
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if budget[0] <= 0:
                    return False
                budget[0] -= 1
                try:
                    if os.readlink(entry.path) == target:
                        return True
                except OSError:
                    continue
    except OSError:
        return False
    return False


def _inode_in(proc: str, pid: int, client: Endpoint, server: Endpoint, own_namespace: bool) -> int | None:
    """The client socket's inode in ``pid``'s network namespace (the agent's own: asked of the kernel)."""
    if own_namespace:
        try:
            return diag_inode(client, server)
        except OSError:
            pass   # no sock_diag here: the table
    for table in ("tcp", "tcp6"):
        inode = socket_inode(_lines(f"{proc}/{pid}/net/{table}"), client, server)
        if inode is not None:
            return inode
    return None


def holder_of_connection(client: Endpoint, server: Endpoint, candidates: Iterable[int],
                         proc: str = "/proc") -> int | None:
    """The process among ``candidates`` that holds the client's end of the
    TCP connection from ``client`` (address, port) to ``server`` — the
    agent's end, as its socket's name says — or None (none of them does, or
    a bound was reached)."""
    pids: list[int] = []
    for pid in candidates:
        if len(pids) >= MAX_PROCESSES:
            break
        if isinstance(pid, int) and pid > 0:
            pids.append(pid)
    inode = None
    own = _namespace(proc, os.getpid()) if proc == "/proc" else None
    seen: set[str] = set()
    for pid in pids:   # the socket is in the client's network namespace: one of theirs
        namespace = _namespace(proc, pid)
        if namespace is None or namespace in seen:
            continue
        if len(seen) >= MAX_NAMESPACES:
            break
        seen.add(namespace)
        inode = _inode_in(proc, pid, client, server, namespace == own)
        if inode is not None:
            break
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    budget = [MAX_DESCRIPTORS]
    for pid in pids:
        if _holds(proc, pid, target, budget):
            return pid
        if budget[0] <= 0:
            break
    return None
