"""How the command line reaches the leading master: its state document
over the master protocol (``tcp://``, ``zk://``) or its ``GET /state``
(``http(s)://``), and a call to the leader's HTTP operator endpoints, found
through that state (the leader's HTTP address).

``mesoslike state`` (:mod:`mesoslike.cli.state`), the operator's commands
(:mod:`mesoslike.cli.operations`) and the bundled frameworks' commands all
ask through here; the first two name its functions in their own
``__all__`` as they always did.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING

from mesoslike.cli.options import CLIENT_TIMEOUT
from mesoslike.errors import MesoslikeError

if TYPE_CHECKING:
    from mesoslike.locator import MasterLocator

__all__ = ["fetch_state", "handshake_refusal", "NEEDS_KEYS", "operate", "leader_http"]


def fetch_state(master: str, timeout: float = CLIENT_TIMEOUT, key: str | None = None, master_key: str | None = None,
                token: str | None = None) -> dict:
    """Ask the master at ``tcp://HOST:PORT`` — or the leader of a ``zk://``
    group, or the master at ``http(s)://HOST:PORT`` (its ``GET /state``,
    with ``token`` if given) — for its state document. A master that
    answers it does not lead (a follower, or the leadership just moved) is
    asked once more, at the leader it names. With ``zk://`` the request
    follows the leader ZooKeeper names while it waits (one that died —
    its handshake cut, or no answer — is replaced once its session expires)."""
    from mesoslike.credentials import client_keys
    from mesoslike.ha.url import ZkUrl, parse_master_address
    from mesoslike.locator import ZooKeeperLocator

    if master.startswith(("http://", "https://")):
        return _http_state(master.rstrip("/"), timeout, token)
    keys = client_keys(key, master_key)

    parsed = parse_master_address(master)
    locator = ZooKeeperLocator(parsed, timeout=timeout) if isinstance(parsed, ZkUrl) else None
    try:
        address = locator.wait_for_leader(timeout) if locator is not None else str(parsed)
        silent = ("; ZooKeeper names it the leader: if it died, another master leads once its ZooKeeper session "
                  "expires (--zk-session-timeout)") if locator is not None else (
            ": it is down, or (with --zk) it lost ZooKeeper and waits out its session timeout before it answers "
            "again, saying it does not lead")
        doc, address = _ask_for_state(address, timeout, keys, silent, locator)
    finally:
        if locator is not None:
            locator.close()
    if doc.get("is_leader") is False:   # a follower (or a leadership that just moved): ask the leader it names
        leader = (doc.get("leader") or {}).get("address")
        if not leader or leader == address:
            raise MesoslikeError(f"the master at {address} answers but does not lead, and knows of no leader "
                                 "(it cannot reach ZooKeeper, or an election is under way)")
        doc, _ = _ask_for_state(leader, timeout, keys)
        if doc.get("is_leader") is False:
            raise MesoslikeError(f"the master at {leader} does not lead either; the leadership is moving, "
                                 "try again in a moment")
    return doc


def _http_state(http: str, timeout: float, token: str | None) -> dict:
    """``GET /state`` of the master at ``http``, or of the leader it names."""
    doc = operate(http, "/state", None, token, timeout)
    if not isinstance(doc, dict) or "agents" not in doc:
        raise MesoslikeError(f"{http}/state is not a master's state document")
    return doc


#: what a client without keys is told by an authenticated master's refusal
NEEDS_KEYS = "this master requires keys: pass --key/--master-key or set MESOSLIKE_KEY/MESOSLIKE_MASTER_KEY"


def handshake_refusal(address: str, keys: tuple) -> str:
    """What to tell the user when the master at ``address`` refused the
    handshake of a client with ``keys`` (its secret certificate or None,
    the master's public key or None)."""
    own, master_key = keys
    if own is None:
        alone = " (--master-key alone is not enough: it takes listed keys only)" if master_key is not None else ""
        return f"the master at {address} refused the connection: {NEEDS_KEYS}{alone}"
    return (f"the master at {address} refused our key: --key (MESOSLIKE_KEY) is not in its credentials, or it is "
            "not the master whose --master-key (MESOSLIKE_MASTER_KEY) we have")


def _ask_for_state(address: str, timeout: float, keys: tuple, if_silent: str = "",
                   locator: MasterLocator | None = None) -> tuple[dict, str]:
    """The document the master at ``address`` answers — or, with a
    ``locator``, the master it names the leader while we wait — and that
    master's address; ``if_silent``
    ends the error when none answers in time. A refused handshake
    (``stats.handshakes_refused``) is said at once: waiting longer would not
    change it. A handshake cut once (a master dying of a ``kill -9``) is
    not a refusal: the transport tries again, the locator names the next
    leader, until ``timeout``."""
    from mesoslike.transport import Client
    from mesoslike.wire import messages as m

    deadline = time.monotonic() + timeout
    while True:
        with Client(address, keys=keys[0], server_key=keys[1]) as client:
            client.send(m.GetState())
            while time.monotonic() < deadline:
                if client.wait(min(0.2, deadline - time.monotonic())):
                    for _, reply in client.receive():
                        if isinstance(reply, m.StateReply):
                            return json.loads(reply.document), address
                        if isinstance(reply, m.Error):
                            raise MesoslikeError(f"the master refused: {reply.message}")
                client.connections()   # reads the connection's events: a refused handshake
                if client.stats.handshakes_refused:
                    raise MesoslikeError(handshake_refusal(address, keys))
                leader = locator.current() if locator is not None else None
                if leader and leader != address:
                    break   # the leadership moved: ask the new leader
            else:
                raise MesoslikeError(f"no answer from a master at {address} within {timeout:g}s{if_silent}")
        address = leader


def leader_http(master: str, timeout: float, key: str | None = None, master_key: str | None = None) -> str:
    """The HTTP address of the master ``master`` names: itself if it is an
    ``http(s)://`` address, else what its state says of the leader."""
    if master.startswith(("http://", "https://")):
        return master.rstrip("/")
    http = (fetch_state(master, timeout, key, master_key).get("leader") or {}).get("http_address", "")
    if not http:
        raise MesoslikeError(f"the master at {master} serves no HTTP (started with no --http-port?)")
    return http.rstrip("/")


def operate(master: str, path: str, request: dict | None, token: str | None, timeout: float,
            key: str | None = None, master_key: str | None = None) -> dict | list:
    """POST ``request`` to ``path`` of the leading master (GET when
    ``request`` is None); its answer, or :class:`MesoslikeError` with the
    master's refusal. A master that says it does not lead is asked once
    more, at the leader it names."""
    http = leader_http(master, timeout, key, master_key)
    code, answer = _request(http + path, request, token, timeout)
    follower = isinstance(answer, dict) and (code == 409 or answer.get("is_leader") is False)
    leader = (answer.get("leader") or {}).get("http_address") if follower and isinstance(answer, dict) else None
    if leader and leader.rstrip("/") != http:
        code, answer = _request(leader.rstrip("/") + path, request, token, timeout)
    if code != 200:
        raise MesoslikeError(f"the master refused ({code}): "
                             f"{answer.get('error', answer) if isinstance(answer, dict) else answer}")
    if isinstance(answer, dict) and answer.get("is_leader") is False:
        raise MesoslikeError(f"the master at {http} does not lead, and knows of no leader: try again in a moment")
    return answer


def _request(url: str, request: dict | None, token: str | None, timeout: float) -> tuple[int, dict | list]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if request is None else json.dumps(request).encode()
    ask = urllib.request.Request(url, data=data, headers=headers, method="GET" if request is None else "POST")
    try:
        with urllib.request.urlopen(ask, timeout=timeout) as response:
            return response.status, _json(response.read())
    except urllib.error.HTTPError as exc:
        answer = _json(exc.read())
        return exc.code, answer or {"error": exc.reason}
    except (urllib.error.URLError, OSError) as exc:
        where = urllib.parse.urlsplit(url)
        raise MesoslikeError(f"cannot reach the master at {where.scheme}://{where.netloc}: {exc}") from None


def _json(body: bytes) -> dict | list:
    try:
        answer = json.loads(body)
    except ValueError:
        return {"error": body[:200].decode("utf-8", "replace")}
    return answer if isinstance(answer, (dict, list)) else {"answer": answer}
