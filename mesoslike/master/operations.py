"""What the operator's operations on the soft state need besides the core
(pure): the errors they answer with, and an agent's drain (Mesos's
DRAIN_AGENT / REACTIVATE_AGENT). docs/operations.rst describes them.

The core carries them out (``MasterCore.kill_task``, ``teardown_framework``,
``drain_agent``, ``reactivate_agent``); :mod:`mesoslike.master.operator`
serves them over HTTP, and ``mesoslike task kill``, ``framework teardown``,
``agent drain`` and ``agent reactivate`` call that.
"""

from __future__ import annotations

import math

import attrs

from mesoslike.errors import MesoslikeError

__all__ = ["NotFound", "Conflict", "DrainInfo", "DRAINING", "DRAINED", "DRAIN_KILL_RESEND", "MAX_DRAIN_GRACE"]

#: an agent's drain states, as Mesos names them
DRAINING = "DRAINING"
DRAINED = "DRAINED"
#: while a drained agent still runs tasks its kills were sent for, they are sent again this often (s):
#: a kill is lost only with the connection, and an agent ignores one for a task it is killing
DRAIN_KILL_RESEND = 10.0
#: the longest grace a drain may give (a week, as max_failover_timeout)
MAX_DRAIN_GRACE = 7 * 24 * 3600.0


class NotFound(MesoslikeError):
    """The task, framework or agent an operation names is not known (HTTP 404)."""


class Conflict(MesoslikeError):
    """The operation does not apply to what it names as it is now: an
    ambiguous name, a task that already ended, an agent not deactivated
    (HTTP 409)."""


@attrs.frozen
class DrainInfo:
    """An agent being drained (``DRAINING``: no offers; its tasks are killed
    at ``kill_at``) or drained (``DRAINED``: none of its tasks is left).
    Times are the master's clock; ``started_at_wall`` is for people."""

    state: str
    grace: float
    started_at: float
    started_at_wall: float
    kill_at: float
    kill_at_wall: float
    #: when the kills go out (again) next; None before the first ones
    next_kill: float | None = None

    @property
    def killing(self) -> bool:
        """The grace has passed: the kills went out."""
        return self.next_kill is not None

    def to_record(self) -> dict:
        """What the registry keeps of it (Mesos keeps an agent's drain in
        its registry too): the state, the grace, and when it began and its
        kills are due in seconds since the epoch — a new leader's clock is
        not this one's (:meth:`from_record`)."""
        return {"state": self.state, "grace": self.grace, "started_at": self.started_at_wall,
                "kill_at": self.kill_at_wall}

    @classmethod
    def from_record(cls, record: object, now: float, wall: float) -> DrainInfo:
        """A drain a new leader read from the registry, on its clock (``now``;
        ``wall``: seconds since the epoch now): its kills due as long from
        now as they were still to wait. ValueError for a record that is not
        one."""
        if not isinstance(record, dict) or record.get("state") not in (DRAINING, DRAINED):
            raise ValueError(f"expected {{state: DRAINING|DRAINED, grace, started_at, kill_at}}, got {record!r}")
        numbers: dict[str, float] = {}
        for name in ("grace", "started_at", "kill_at"):
            value = record.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a number, got {value!r}")
            numbers[name] = float(value)
        grace, started, kill_at = check_grace(numbers["grace"]), numbers["started_at"], numbers["kill_at"]
        left = min(max(0.0, kill_at - wall), MAX_DRAIN_GRACE)
        return cls(str(record["state"]), grace, now - max(0.0, wall - started), started, now + left, kill_at)

    def to_json(self) -> dict:
        """Shaped as Mesos's ``drain_info`` of an agent in ``/state``, plus
        when it began and when its tasks are (were) killed, in seconds since
        the epoch."""
        return {"state": self.state, "config": {"grace_period": self.grace},
                "started_at": self.started_at_wall, "kill_at": self.kill_at_wall}


def check_grace(grace: object) -> float:
    """A drain's grace in seconds: a number from 0 to :data:`MAX_DRAIN_GRACE`;
    :class:`MesoslikeError` otherwise."""
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= MAX_DRAIN_GRACE:
        raise MesoslikeError(f"the grace must be a number of seconds from 0 to {MAX_DRAIN_GRACE:g}, got {grace!r}")
    return float(grace)
