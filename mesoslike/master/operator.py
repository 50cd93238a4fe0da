"""The operator's writes over HTTP: ``POST /weights`` and ``POST /quota``
(docs/cluster.rst), answered once the registry holds the change.

They run on an HTTP server thread. :class:`OperatorWrites` validates the
request, applies it to the leading core under the master's lock, hands what
the core has to say to the master's loop and waits — releasing the lock — until
the loop has stored the change, the core is dropped, or ``store_timeout``
passes.
"""

from __future__ import annotations

import json
import threading
from typing import Callable, Protocol

from mesoslike.errors import MesoslikeError
from mesoslike.master.core import MasterCore, Send
from mesoslike.master.http import Action

__all__ = ["OperatorWrites", "LeadingMaster", "weights_request", "quota_request"]

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


def quota_request(request: object) -> tuple[str, str | None, str | None]:
    """``{"role": R, "guarantee": "RESOURCES", "limit": "RESOURCES"}`` -> (role, guarantee, limit)."""
    if not isinstance(request, dict) or not isinstance(request.get("role"), str) \
            or not set(request) <= {"role", "guarantee", "limit"} \
            or not all(isinstance(request[k], str) for k in ("guarantee", "limit") if k in request):
        raise ValueError('expected {"role": R, "guarantee": "RESOURCES", "limit": "RESOURCES"}')
    return request["role"], request.get("guarantee"), request.get("limit")


class OperatorWrites:
    """The POST endpoints of one master (:attr:`actions`)."""

    def __init__(self, master: LeadingMaster, store_timeout: float = STORE_TIMEOUT) -> None:
        self._master = master
        self._store_timeout = store_timeout

    @property
    def actions(self) -> dict[str, Action]:
        return {"/weights": self.post_weights, "/quota": self.post_quota}

    def post_weights(self, body: bytes) -> tuple[int, object]:
        """``POST /weights {"role": weight, ...}``: answered once the registry holds them."""
        return self._write(body, lambda core, request: core.update_weights(weights_request(request)))

    def post_quota(self, body: bytes) -> tuple[int, object]:
        """``POST /quota {"role": R, "guarantee": "cpus:2", "limit": "cpus:8"}``
        (neither: clear the role's quota); answered once the registry holds it."""
        return self._write(body, lambda core, request: core.update_quota(*quota_request(request)))

    def _write(self, body: bytes, apply: Callable[[MasterCore, object], list[Send]]) -> tuple[int, object]:
        try:
            request = json.loads(body or b"null")
        except ValueError as exc:
            return 400, {"error": f"the body is not JSON: {exc}"}
        master = self._master
        with master.stored:
            core = master.serving_core()
            if core is not None:
                return self._apply(core, request, apply)
        return 409, {"error": "this master does not lead", "leader": master.leader_info()}

    def _apply(self, core: MasterCore, request: object,
               apply: Callable[[MasterCore, object], list[Send]]) -> tuple[int, object]:
        """Under the lock: apply, hand the replies to the loop, wait until stored."""
        master = self._master
        try:
            master.send_later(apply(core, request))
        except (MesoslikeError, TypeError, ValueError) as exc:
            return 400, {"error": str(exc)}
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
        return 200, {"ok": True}
