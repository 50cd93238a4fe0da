"""What a master process is told to be: :class:`MasterSettings`, the one
argument of :class:`~mesoslike.master.runtime.MasterRuntime` (the CLI builds
it from ``mesoslike master``'s flags and config file, docs/cluster.rst;
tests build it with the defaults and the few fields they need), and the
rule that keeps an unsecured master on loopback (docs/security.rst).
"""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING

import attrs

from mesoslike.errors import ConfigError
from mesoslike.master.records import MasterConfig

if TYPE_CHECKING:
    from mesoslike.acl import Credentials
    from mesoslike.ha.url import ZkUrl
    from mesoslike.master.roles import RolesConfig
    from mesoslike.transport import CurveKeys

__all__ = ["MasterSettings", "check_secure", "is_loopback"]

log = logging.getLogger("mesoslike.master")

#: hosts that only this machine can reach
_LOOPBACK = ("localhost", "::1", "[::1]")


@attrs.frozen(kw_only=True)
class MasterSettings:
    """A master's settings (times in seconds).

    ``address``: ``tcp://HOST:PORT`` to bind for agents and frameworks (port
    0 = any free port; see :attr:`MasterRuntime.address` for what peers are
    told: ``advertise_ip`` or, for a wildcard, this host's address,
    :mod:`mesoslike.advertise`). ``http_port``: the HTTP endpoints' port on
    the same host (0 = any, None = no HTTP). ``config``: the core's timing,
    policy and bounds. ``master_id``: its id (default: a random one).
    ``zk``: a :class:`mesoslike.ha.ZkUrl` to run highly available (the
    registry then lives in ZooKeeper), with ``zk_session_timeout``;
    ``zk_session_guard``: a guard process closes this master's session as
    soon as the master's process dies (:mod:`mesoslike.ha.session_guard`);
    ``standby_mirror``: while following, keep a copy of the registry current
    (ZooKeeper watches) so that taking over reads only what changed.
    ``roles``: the roles file's settings (docs/roles.rst), applied whenever
    this master takes the lead. ``keys`` and ``credentials``: its CURVE
    pair and the cluster's principals and ACLs (docs/security.rst; both or
    neither); ``insecure``: bind beyond loopback without them.
    ``http_auth``: what HTTP asks a token for (``writes`` or ``all``);
    ``http_tls``: serve HTTPS. ``turn_spacing``: while peers keep it busy,
    the loop starts a turn that handles frames at most this often (0: at
    once, whatever came): what came meanwhile is handled in one turn and
    answered in fewer, larger batches (docs/performance.rst, "Stop 22: the
    master's CPU a task on the real path (master22)"). An idle master
    handles a frame as soon as it comes, and so does one whose last turn
    handled a single frame (a lone exchange's hop, which another waits on).
    """

    address: str = "tcp://127.0.0.1:5050"
    http_port: int | None = 5051
    config: MasterConfig = attrs.field(factory=MasterConfig)
    master_id: str | None = None
    zk: ZkUrl | None = None
    zk_session_timeout: float = 10.0
    zk_session_guard: bool = True
    standby_mirror: bool = True
    roles: RolesConfig | None = None
    keys: CurveKeys | None = None
    credentials: Credentials | None = None
    insecure: bool = False
    http_auth: str = "writes"
    http_tls: ssl.SSLContext | None = None
    advertise_ip: str | None = None
    turn_spacing: float = attrs.field(default=0.015, validator=attrs.validators.and_(
        attrs.validators.ge(0.0), attrs.validators.le(1.0)))


def is_loopback(host: str) -> bool:
    return host in _LOOPBACK or host.startswith("127.")


def check_secure(address: str, credentials: Credentials | None, keys: CurveKeys | None, insecure: bool) -> None:
    """Secure by default (docs/security.rst): a master without credentials
    binds loopback only, unless ``insecure`` — then it warns, at every
    start. Keys and credentials go together."""
    if (keys is None) != (credentials is None):
        raise ConfigError("a secured master needs both --key (its secret certificate) and --credentials")
    if credentials is not None:
        return
    host = address[len("tcp://"):].rpartition(":")[0]
    if not is_loopback(host):
        if not insecure:
            raise ConfigError(f"refusing to bind {host} without --credentials: any peer that reaches it could run "
                              "tasks. Give --key and --credentials (docs/security.rst), bind 127.0.0.1, or pass "
                              "--insecure")
    if insecure:
        log.warning("INSECURE: this master runs without authentication (--insecure): any peer that reaches "
                    "%s may register agents and frameworks and run tasks", address)
