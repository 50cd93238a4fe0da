"""The operator's writes over HTTP: ``POST /weights`` and ``POST /quota``
(docs/cluster.rst; read back with ``GET /weights`` and ``GET /quota``), and the operations of docs/operations.rst —
``POST /tasks/kill``, ``/frameworks/teardown``, ``/agents/drain``,
``/agents/reactivate``, ``/agents/gone``, ``/reserve`` and ``/unreserve``. Each needs the ACL permission :data:`PERMISSIONS`
names (docs/security.rst).

They run on an HTTP server thread. :class:`OperatorWrites` validates the
request, applies it to the leading core under the master's lock, hands what
the core has to say to the master's loop and, for a change of the registry
(weights, quota, a teardown), waits — releasing the lock — until the loop
has stored the change, the core is dropped, or ``store_timeout`` passes (a drain and
a reactivation too: the registry keeps drains). Operations on the soft
state (kill) are answered at once.
A name the master does not know is answered 404, an operation that does
not apply (an ambiguous name, a task that ended) 409, with ``error`` saying
which.
"""

from __future__ import annotations

import json
import threading
from typing import Callable, Protocol

from mesoslike.acl import Refused
from mesoslike.errors import MesoslikeError
from mesoslike.master.core import MasterCore, Send
from mesoslike.http_server import Request
from mesoslike.master.http import Action
from mesoslike.master.operations import Conflict, NotFound
from mesoslike.master.state import quota_by_role, quota_json, weights_json

__all__ = ["OperatorWrites", "LeadingMaster", "PERMISSIONS", "weights_request", "quota_request", "named"]

#: the ACL permission each POST endpoint needs (docs/security.rst)
PERMISSIONS = {"/quota": "update_quota", "/weights": "update_weights", "/tasks/kill": "kill_tasks",
               "/frameworks/teardown": "teardown_frameworks", "/agents/drain": "drain_agents",
               "/agents/reactivate": "reactivate_agents", "/agents/gone": "mark_agents_gone",
               "/reserve": "reserve_resources",
               "/unreserve": "unreserve_resources"}

#: how long a write waits for the registry to hold it (s)
STORE_TIMEOUT = 10.0


class LeadingMaster(Protocol):
    """What the writes need from the master runtime."""

    #: the master's lock (it guards the core), notified whenever the registry
    #: is written or a core is dropped
    stored: threading.Condition

    def serving_core(self) -> MasterCore | None:
        """The core this master leads with; None unless it leads. Under ``stored``."""

    def persisted(self, core: MasterCore) -> int | None:
        """How many of ``core``'s registry changes are stored; None once
        ``core`` is dropped. Under ``stored``."""

    def leader_info(self) -> dict[str, str]:
        """Who leads (``id``, ``address``, ``http_address``; {} if unknown)."""

    def send_later(self, sends: list[Send]) -> None:
        """Have the loop send ``sends`` at its next turn. Under ``stored``."""


def weights_request(request: object) -> dict[str, float]:
    """``{"role": weight, ...}``; the core validates the weights themselves."""
    if not isinstance(request, dict) or not request:
        raise ValueError('expected {"role": weight, ...}')
    return request


def quota_request(request: object) -> tuple[str, str | None, str | None, bool]:
    """``{"role": R, "guarantee": "RESOURCES", "limit": "RESOURCES", "force": false}``
    -> (role, guarantee, limit, force)."""
    if not isinstance(request, dict) or not isinstance(request.get("role"), str) \
            or not set(request) <= {"role", "guarantee", "limit", "force"} \
            or not all(isinstance(request[k], str) for k in ("guarantee", "limit") if k in request) \
            or not isinstance(request.get("force", False), bool):
        raise ValueError('expected {"role": R, "guarantee": "RESOURCES", "limit": "RESOURCES", "force": false}')
    return request["role"], request.get("guarantee"), request.get("limit"), request.get("force", False)


def named(request: object, required: tuple[str, ...], optional: dict[str, type | tuple[type, ...]]) -> dict:
    """``request`` as a JSON object with the text fields ``required``, and
    fields of ``optional`` (name -> their types) if given; ValueError naming
    the expected shape otherwise."""
    fields = {**{name: str for name in required}, **optional}
    shape = "{" + ", ".join(f'"{name}": ...' for name in fields) + "}"
    if not isinstance(request, dict) or not set(required) <= set(request) or not set(request) <= set(fields):
        raise ValueError(f"expected {shape} ({', '.join(required)} required)")
    for name, value in request.items():
        if isinstance(value, bool) or not isinstance(value, fields[name]):
            raise ValueError(f"expected {shape}: {name} has the wrong type")
    return request


def label_pairs(labels: list) -> list[tuple[str, str]]:
    """``[{"key": K, "value": V}, ...]`` (Mesos's JSON labels; value
    optional) as (key, value) pairs; ValueError for another shape."""
    pairs = []
    for label in labels:
        if not isinstance(label, dict) or not {"key"} <= set(label) <= {"key", "value"} \
                or not all(isinstance(text, str) for text in label.values()):
            raise ValueError('expected labels as [{"key": K, "value": V}, ...] of text')
        pairs.append((label["key"], label.get("value", "")))
    return pairs


class OperatorWrites:
    """The POST endpoints of one master (:attr:`actions`)."""

    def __init__(self, master: LeadingMaster, store_timeout: float = STORE_TIMEOUT) -> None:
        self._master = master
        self._store_timeout = store_timeout

    @property
    def actions(self) -> dict[str, Action]:
        return {"/weights": self.post_weights, "/quota": self.post_quota, "/tasks/kill": self.post_kill_task,
                "/frameworks/teardown": self.post_teardown, "/agents/drain": self.post_drain,
                "/agents/reactivate": self.post_reactivate, "/agents/gone": self.post_gone,
                "/reserve": self.post_reserve,
                "/unreserve": self.post_unreserve}

    @property
    def views(self) -> dict[str, Callable[[], tuple[str, bytes]]]:
        """The reads of what the writes set: ``GET /quota`` (Mesos's
        ``configs``, with what each role consumes) and ``GET /weights``
        (Mesos's ``[{"role", "weight"}]``). A master that does not lead
        answers ``{"is_leader": false, "leader": {...}}``."""
        return {"/quota": lambda: self._read(lambda core: quota_json(quota_by_role(core))),
                "/weights": lambda: self._read(lambda core: weights_json(core.allocator.weights()))}

    def _read(self, view: Callable[[MasterCore], object]) -> tuple[str, bytes]:
        master = self._master
        with master.stored:
            core = master.serving_core()
            document = view(core) if core is not None else {"is_leader": False, "leader": master.leader_info()}
        return "application/json", json.dumps(document).encode()

    @property
    def permissions(self) -> dict[str, str]:
        return dict(PERMISSIONS)

    def post_kill_task(self, request: Request) -> tuple[int, object]:
        """``POST /tasks/kill {"task_id": T, "framework_id": F}`` (framework_id
        needed only when tasks of several frameworks have the id)."""
        def apply(core: MasterCore, document: object) -> tuple[dict, list[Send]]:
            fields = named(document, ("task_id",), {"framework_id": str})
            return core.kill_task(fields["task_id"], fields.get("framework_id"))
        return self._write(request.body, apply, store=False)

    def post_teardown(self, request: Request) -> tuple[int, object]:
        """``POST /frameworks/teardown {"framework_id": F}``: answered once the registry holds the removal."""
        return self._write(request.body, lambda core, document: core.teardown_framework(
            named(document, ("framework_id",), {})["framework_id"]))

    def post_drain(self, request: Request) -> tuple[int, object]:
        """``POST /agents/drain {"agent": ID_OR_HOSTNAME, "grace": SECONDS}``
        (grace 0 if left out): answered once the registry holds the drain."""
        def apply(core: MasterCore, document: object) -> tuple[dict, list[Send]]:
            fields = named(document, ("agent",), {"grace": (int, float)})
            return core.drain_agent(fields["agent"], fields.get("grace", 0.0))
        return self._write(request.body, apply)

    def post_reactivate(self, request: Request) -> tuple[int, object]:
        """``POST /agents/reactivate {"agent": ID_OR_HOSTNAME}``: answered once the registry forgot the drain."""
        return self._write(request.body, lambda core, document: core.reactivate_agent(
            named(document, ("agent",), {})["agent"]))

    def post_gone(self, request: Request) -> tuple[int, object]:
        """``POST /agents/gone {"agent": ID_OR_HOSTNAME}`` (Mesos's MARK_AGENT_GONE), registered or
        unreachable: answered once the registry holds it (docs/reliability.rst, "Partitions")."""
        return self._write(request.body, lambda core, document: core.mark_agent_gone(
            named(document, ("agent",), {})["agent"]))

    def post_reserve(self, request: Request) -> tuple[int, object]:
        """``POST /reserve {"agent_id": ID_OR_HOSTNAME, "resources": "cpus(analytics):2;mem(analytics):1024",
        "labels": [{"key": K, "value": V}, ...]}`` (labels optional):
        dynamically reserved for the role by the operator's principal (from
        its token); answered once the registry holds it."""
        principal = request.principal   # the caller's, from its token (mesoslike.master.http_auth)

        def apply(core: MasterCore, document: object) -> tuple[dict, list[Send]]:
            fields = named(document, ("agent_id", "resources"), {"labels": list})
            return core.reserve_resources(fields["agent_id"], fields["resources"], principal,
                                          label_pairs(fields.get("labels", [])))
        return self._write(request.body, apply)

    def post_unreserve(self, request: Request) -> tuple[int, object]:
        """``POST /unreserve {"agent_id": ID_OR_HOSTNAME, "resources": "cpus(analytics,alice):2"}``:
        answered once the registry holds it."""
        principal = request.principal   # the caller's, from its token (mesoslike.master.http_auth)

        def apply(core: MasterCore, document: object) -> tuple[dict, list[Send]]:
            fields = named(document, ("agent_id", "resources"), {})
            return core.unreserve_resources(fields["agent_id"], fields["resources"], principal)
        return self._write(request.body, apply)

    def post_weights(self, request: Request) -> tuple[int, object]:
        """``POST /weights {"role": weight, ...}``: answered once the registry holds them."""
        return self._write(request.body, lambda core, document: ({}, core.update_weights(weights_request(document))))

    def post_quota(self, request: Request) -> tuple[int, object]:
        """``POST /quota {"role": R, "guarantee": "cpus:2", "limit": "cpus:8", "force": false}``
        (neither: clear the role's quota); answered once the registry holds
        it. Unless ``force``, refused (400) for a resource name the cluster
        does not know (with the name it looks like) or a guarantee beyond
        the cluster's capacity, as Mesos's master refuses them."""
        def apply(core: MasterCore, document: object) -> tuple[dict, list[Send]]:
            role, guarantee, limit, force = quota_request(document)
            if not force and (guarantee is not None or limit is not None):
                core.settle()   # the agents admitted are booked: their capacity counts (AgentLifecycle.book)
                core.allocator.check_quota(role, guarantee, limit)
            return {}, core.update_quota(role, guarantee, limit)
        return self._write(request.body, apply)

    def _write(self, body: bytes, apply: Callable[[MasterCore, object], tuple[dict, list[Send]]],
               store: bool = True) -> tuple[int, object]:
        """Under the lock: apply, hand the sends to the loop and (``store``:
        a change of the registry) wait until stored; answer with what
        ``apply`` says. Operations on the soft state need no wait."""
        try:
            request = json.loads(body or b"null")
        except ValueError as exc:
            return 400, {"error": f"the body is not JSON: {exc}"}
        master = self._master
        with master.stored:
            core = master.serving_core()
            if core is None:
                return 409, {"error": "this master does not lead", "leader": master.leader_info()}
            try:
                reply, sends = apply(core, request)
            except (MesoslikeError, TypeError, ValueError, Refused) as exc:
                return _refusal(exc)
            master.send_later(sends)
            problem = self._wait_stored(core) if store else None
        return problem or (200, {**reply, "ok": True})

    def _wait_stored(self, core: MasterCore) -> tuple[int, object] | None:
        """Under the lock (released while waiting): None once the registry
        holds ``core``'s changes so far, else the 503 to answer."""
        master = self._master
        target = core.registry_changes

        def settled() -> bool:
            persisted = master.persisted(core)
            return persisted is None or persisted >= target
        stored = master.stored.wait_for(settled, timeout=self._store_timeout)
        if master.persisted(core) is None:
            return 503, {"error": "this master stopped leading before the change was stored; retry"}
        if not stored:
            return 503, {"error": "the change is applied but not stored yet (the registry is unreachable); "
                                  "it is retried every turn"}
        return None


def _refusal(exc: Exception) -> tuple[int, dict]:
    """The answer to a request the core refused: 404 for what it does not
    know, 409 for what does not apply now, 403 for what the ACLs do not
    allow on what it names (the role reserved for, the principal that
    reserved), else 400."""
    code = 404 if isinstance(exc, NotFound) else 409 if isinstance(exc, Conflict) \
        else 403 if isinstance(exc, Refused) else 400
    return code, {"error": str(exc)}
