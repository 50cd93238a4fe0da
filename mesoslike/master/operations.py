"""What the operator's operations on the soft state need besides the core
(pure): the errors they answer with, and an agent's drain (Mesos's
DRAIN_AGENT / REACTIVATE_AGENT). docs/operations.rst describes them.

The core carries them out (``MasterCore.kill_task``, ``teardown_framework``,
``drain_agent``, ``reactivate_agent``); :mod:`mesoslike.master.operator`
serves them over HTTP, and ``mesoslike task kill``, ``framework teardown``,
``agent drain`` and ``agent reactivate`` call that.
"""

from __future__ import annotations

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
