"""The client side of the Fuxi job protocol (:mod:`.protocol`):
:class:`JobClient` — what ``mesoslike fuxi submit``, ``status`` and ``kill``
talk to a Fuxi service with.

A module of its own so that a client imports the protocol and the
transport only, not the service and its scheduler (``mesoslike fuxi submit``
started in 0.65 s of CPU with the service's module, 0.2 s without); and of
the protocol its own side (:mod:`.client_wire`: MessagePack alone, not the
attrs classes and the msgspec codec of :mod:`.protocol`).
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any, Mapping

from mesoslike import MesoslikeError
from mesoslike_frameworks.fuxi import client_wire as protocol   # the job client's side: no attrs nor msgspec
from mesoslike_frameworks.fuxi.client_wire import MAX_STATUS_WAIT, STANDBY_REFUSAL
from mesoslike.transport import Client, CurveKeys, parse_tcp_address

__all__ = ["JobClient", "JobRefused", "NoAnswer"]


class JobRefused(MesoslikeError):
    """The service answered a request with an ERROR (the message is its reason)."""


class NoAnswer(MesoslikeError):
    """The service did not answer in time (it may be restarting, or a new
    leader not elected yet): asking again later may succeed."""


class JobClient:
    """Talks to a Fuxi service at ``tcp://HOST:PORT`` — or, with
    ``zk://HOSTS/PATH``, to the leader of the Fuxi services that elect one
    there: :meth:`submit`, :meth:`status`, :meth:`kill`. Raises
    :class:`JobRefused` when the service refuses, :class:`NoAnswer` when it
    does not answer within ``timeout`` s, :class:`MesoslikeError` at once
    when it refuses the connection.

    With ``zk://`` the client follows the group's leader for its whole life
    (a ZooKeeper watch, as agents and drivers follow the master): a request
    waiting for a leader that died is sent again to the next one the moment
    it is elected, instead of waiting out ``timeout``.

    ``keys`` (a principal's pair) and ``server_key`` (the service's public
    key, z85): talk to that service only, as that principal. A service with
    credentials refuses a client without them (anonymous) or with a key it
    does not list.

    Only a definite refusal of the handshake (``stats.handshakes_refused``
    of the transport: the service refused our key or our lack of one, or
    cut our handshake three times in a row — what a service whose key is
    not ``server_key`` does) raises at once. A handshake cut once — the
    connection reached a leader dying of a ``kill -9``, in its listen
    backlog — is tried again, and with ``zk://`` the next leader is asked,
    until ``timeout``."""

    def __init__(self, address: str, timeout: float = 10.0, *, keys: CurveKeys | None = None,
                 server_key: bytes | None = None) -> None:
        self.url = address if address.startswith("zk://") else ""
        self._keys, self._server_key = keys, server_key
        self._locator: Any = None
        if self.url:
            from mesoslike import make_locator   # here: mesoslike.ha (and attrs) only for zk://

            try:
                self._locator = make_locator(self.url, timeout=timeout)
                address = self._locator.wait_for_leader(timeout)
            except MesoslikeError as exc:
                self.close()
                raise MesoslikeError(f"no leading Fuxi service in {self.url}: {exc}") from None
        parse_tcp_address(address)
        self.address = address
        self.timeout = timeout
        self._client: Client | None = self._connect(address)
        self._ids = itertools.count(1)

    def _connect(self, address: str) -> Client:
        self._refusals_told = 0   # the new connection's refused handshakes a request raised for
        return Client(address, codec=protocol.CODEC, keys=self._keys, server_key=self._server_key)

    def submit(self, document: Mapping[str, Any]) -> str:
        """Submit a parsed job file; the job's id."""
        return self._ask(protocol.Submit(next(self._ids), dict(document))).job_id

    def status(self, job_id: str | None = None, wait: float = 0.0) -> dict:
        """The status document of every job, or of ``job_id``'s. ``wait``
        (seconds, with a ``job_id``): a long poll — the service answers once
        the job is no longer running, or after ``wait`` s (at most
        :data:`.protocol.MAX_STATUS_WAIT`); this request's timeout is
        ``wait`` more than the client's. A service of before long polls
        answers at once."""
        request = protocol.Status(next(self._ids), job_id or "", min(max(wait, 0.0), MAX_STATUS_WAIT))
        return json.loads(self._ask(request, request.wait).document)

    def kill(self, job_id: str) -> None:
        """End the job (its state becomes ``killed``)."""
        self._ask(protocol.KillJob(next(self._ids), job_id))

    def _follow_leader(self) -> bool:
        """With ``zk://``: talk to the leader ZooKeeper names now; True if it changed."""
        leader = self._locator.current() if self._locator is not None else None
        if not leader or leader == self.address:
            return False
        if self._client is not None:
            self._client.close()
        self.address, self._client = leader, self._connect(leader)
        return True

    def _ask(self, request, longer: float = 0.0):
        """Send ``request`` and wait for its answer (``longer`` s more than
        the client's timeout: a long poll's wait); sent again to a new
        leader as soon as one is elected (a submission the dead one took and
        never answered may then be there twice; ``status`` shows both), and
        again to a leader ZooKeeper names that still answers as a standby
        (it is taking over)."""
        assert self._client is not None
        self._follow_leader()
        deadline = time.monotonic() + self.timeout + longer
        send_at: float | None = time.monotonic()
        while (left := deadline - time.monotonic()) > 0:
            if self._follow_leader():
                send_at, deadline = time.monotonic(), time.monotonic() + self.timeout + longer
            if send_at is not None and time.monotonic() >= send_at:
                send_at = None
                self._client.send(request)
            # in short steps: a refused handshake shows only in the connection's events,
            # and a new leader only in the locator. A handshake cut (a dying leader) is no refusal:
            # the transport tries again, and the locator names the next leader
            if not self._client.wait(min(left, 0.1)):
                if self._client.stats.handshakes_refused > self._refusals_told:
                    self._refusals_told = self._client.stats.handshakes_refused
                    raise JobRefused(self._refused_connection())
                continue
            for _, answer in self._client.receive():
                if isinstance(answer, protocol.WireError):
                    # something answers, in another protocol: most often a master given for --fuxi
                    raise MesoslikeError(
                        f"{self.address} is not a Fuxi service: its answer is not of the Fuxi job protocol "
                        f"({protocol.bounded(str(answer), 200)}). Is it a mesoslike master? --fuxi takes the address "
                        "`mesoslike fuxi serve` prints (the master is that command's --master)")
                if answer.id not in (request.id, 0):   # 0: the service could not read the request
                    continue   # the late answer to an earlier request that timed out
                if isinstance(answer, protocol.Error):
                    if self.url and answer.message == STANDBY_REFUSAL:
                        send_at = time.monotonic() + 0.05   # named the leader, not taken over yet: ask again
                        continue
                    raise JobRefused(answer.message)
                return answer
        where = f"the leader of {self.url} ({self.address})" if self.url else self.address
        raise NoAnswer(f"no answer from a Fuxi service at {where} within {self.timeout:g}s "
                       "(is `mesoslike fuxi serve` running there?)")

    def _refused_connection(self) -> str:
        if self._keys is None and self._server_key is None:
            return (f"the Fuxi service at {self.address} refused the connection: it takes no anonymous clients "
                    "(submissions included); give --key (a principal of its credentials) and --fuxi-key (its "
                    "public certificate), or MESOSLIKE_KEY and MESOSLIKE_FUXI_KEY")
        if self._keys is None:
            return (f"the Fuxi service at {self.address} refused the connection: it takes no anonymous clients "
                    "(submissions included); give --key too (a principal of its credentials)")
        return (f"the Fuxi service at {self.address} refused the connection: our key is not in its credentials, "
                "or it is not the service whose public certificate --fuxi-key gives (or it takes no keys)")

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None
        if self._locator is not None:
            self._locator.close()
            self._locator = None

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
