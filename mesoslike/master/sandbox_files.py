"""``GET /files/read`` on the master: a page of a task's sandbox file, read
from its agent's ``/files/read`` (Mesos's format, ``{"data", "offset"}``),
for the dashboard's log viewer (docs/dashboard.rst, "Task logs").

The dashboard may talk to its own master only (its Content-Security-Policy,
and browsers' same-origin rule), so the master asks the agent for it. Only a
registered agent is asked, at the HTTP address it registered with, and only
its ``/files/read`` with the request's ``path``, ``offset`` and ``length``:
the master fetches nothing else for anyone. The request's
``Authorization`` header goes on to the agent, whose own checks decide
(docs/security.rst); the agent's refusals come back as they are. Served on
an HTTP worker thread; the agent has :data:`AGENT_TIMEOUT` seconds.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from mesoslike.http_server import Handler, Request, Response, json_response
from mesoslike.master.http import ViewError
from mesoslike.master.operator import LeadingMaster

__all__ = ["SandboxReads", "AGENT_TIMEOUT", "MAX_ANSWER"]

#: how long the agent has to answer (s)
AGENT_TIMEOUT = 5.0
#: the largest answer passed on (an agent pages its reads at 64 KiB; escaped as JSON, a few times that)
MAX_ANSWER = 4 << 20


class SandboxReads:
    """The master's ``GET /files/read?agent_id=ID&path=P[&offset=O][&length=L]``."""

    def __init__(self, master: LeadingMaster, timeout: float = AGENT_TIMEOUT) -> None:
        self._master = master
        self._timeout = timeout

    @property
    def handlers(self) -> dict[str, Handler]:
        return {"/files/read": self.serve}

    def serve(self, request: Request) -> Response:
        """The handler: ``read`` for a GET, its refusal as ``{"error": ...}``."""
        if request.method != "GET":
            return json_response(405, {"error": "use GET"})
        try:
            content_type, body = self.read(request)
        except ViewError as refusal:
            return json_response(refusal.status, {"error": str(refusal)})
        return Response(200, body, content_type)

    def read(self, request: Request) -> tuple[str, bytes]:
        """The page of the file the request's query names, as the agent answers it; ViewError for a refusal."""
        query = urllib.parse.parse_qs(request.target.partition("?")[2], keep_blank_values=True)
        agent_id, path = _one(query, "agent_id"), _one(query, "path")
        forwarded = {"path": path, "offset": _number(_one(query, "offset", "0"), "offset")}
        if "length" in query:
            forwarded["length"] = _number(_one(query, "length"), "length")
        address = self._agent_address(agent_id)
        headers = {"Accept": "application/json"}
        authorization = request.header("Authorization")
        if authorization:
            headers["Authorization"] = authorization
        url = f"{address}/files/read?{urllib.parse.urlencode(forwarded)}"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self._timeout) as reply:
                body = reply.read(MAX_ANSWER + 1)
        except urllib.error.HTTPError as exc:
            raise ViewError(exc.code, f"agent {agent_id}: {_error_of(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ViewError(502, f"cannot reach agent {agent_id} at {address}: {exc}") from None
        if len(body) > MAX_ANSWER:
            raise ViewError(502, f"agent {agent_id} answered more than {MAX_ANSWER} bytes")
        return "application/json", body

    def _agent_address(self, agent_id: str) -> str:
        master = self._master
        with master.stored:
            core = master.serving_core()
            if core is None:
                raise ViewError(409, "this master does not lead: ask the leader")
            agent = core.agents.get(agent_id)
            address = agent.http_address if agent is not None else ""
        if agent is None:
            raise ViewError(404, f"no registered agent has the id {agent_id[:100]!r}")
        if not address.startswith(("http://", "https://")):
            raise ViewError(404, f"agent {agent_id} serves no HTTP")
        return address.rstrip("/")


def _one(query: dict[str, list[str]], name: str, default: str | None = None) -> str:
    values = query.get(name)
    if not values:
        if default is None:
            raise ViewError(400, f"expected ?agent_id=ID&path=PATH[&offset=N][&length=N]: {name} is missing")
        return default
    if len(values) > 1:
        raise ViewError(400, f"{name} is given {len(values)} times")
    return values[0]


def _number(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ViewError(400, f"{name} must be an integer, got {text[:40]!r}") from None


def _error_of(exc: urllib.error.HTTPError) -> str:
    try:
        answer = json.loads(exc.read(64 * 1024))
    except (ValueError, OSError):
        return str(exc.reason)
    return str(answer.get("error", exc.reason)) if isinstance(answer, dict) else str(exc.reason)
