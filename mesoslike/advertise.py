"""The address a process tells others to reach it at (``--advertise-ip``).

A master bound to ``0.0.0.0`` (every interface) must never advertise
``0.0.0.0`` — in ZooKeeper, in ``/state``, in AGENT_REGISTERED — since no
peer can connect there; nor an agent its HTTP endpoints. As Mesos's
``--advertise_ip``: the address given, else the bound one unless it is a
wildcard, else this host's address (:func:`host_address`). Nothing binds
to the advertised address.
"""

from __future__ import annotations

import ipaddress
import socket

from mesoslike.errors import ConfigError

__all__ = ["advertised_ip", "host_address", "check_advertise_ip", "url_host"]

#: addresses that mean "every interface": bound to, never advertised
WILDCARDS = frozenset({"0.0.0.0", "::", ""})
#: TEST-NET-1 (RFC 5737): a UDP socket "connected" there only picks the default route, sends nothing
_ROUTE_PROBE = ("192.0.2.1", 9)


def check_advertise_ip(value: str) -> str:
    """``value`` as an advertised address: an IP address that is not a
    wildcard; ConfigError otherwise."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise ConfigError(f"--advertise-ip must be an IP address, got {value!r}") from None
    if address.is_unspecified:
        raise ConfigError(f"--advertise-ip {value} is no address a peer can reach: give this host's address")
    return str(address)


def host_address() -> str:
    """This host's address as others reach it: the source address of its
    default route, else what its name resolves to (not a loopback address),
    else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(_ROUTE_PROBE)
            address = str(probe.getsockname()[0])
            if address not in WILDCARDS:
                return address
    except OSError:
        pass
    try:
        address = socket.gethostbyname(socket.getfqdn())
        if not ipaddress.ip_address(address).is_loopback:
            return address
    except (OSError, ValueError):
        pass
    return "127.0.0.1"


def advertised_ip(bound_ip: str, advertise_ip: str | None = None) -> str:
    """What to advertise for a socket bound to ``bound_ip``: ``advertise_ip``
    if given (checked), the bound address unless it is a wildcard, else
    :func:`host_address`."""
    if advertise_ip:
        return check_advertise_ip(advertise_ip)
    bound = bound_ip.strip("[]")
    return host_address() if bound in WILDCARDS else bound


def url_host(ip: str) -> str:
    """``ip`` as the host part of a URL (an IPv6 address in brackets)."""
    return f"[{ip}]" if ":" in ip else ip
