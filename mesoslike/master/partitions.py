"""Partitioned agents, sans I/O (docs/reliability.rst, "Partitions").

What the master core needs to treat an agent it cannot reach as Mesos's
master does: the record of an agent marked unreachable (it may come back
under its id, and its partition-aware tasks with it), the rate at which
agents failing health checks are marked unreachable
(``--agent-removal-rate-limit``, Mesos's ``--agent_removal_rate_limit``), and
which unreachable agents the registry forgets (``--registry-max-agent-age``,
``--registry-max-agent-count``). Pure: times are passed in.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from typing import KeysView, Mapping

import attrs

from mesoslike.errors import ConfigError
from mesoslike.master.registry import UnreachableEntry

__all__ = ["RemovalRateLimit", "RemovalQueue", "UnreachableAgent", "agents_to_forget", "parse_mesos_duration"]

#: Mesos's duration units (stout's Duration), and the short ones the other flags take
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "secs": 1.0, "mins": 60.0, "hrs": 3600.0, "days": 86400.0,
          "weeks": 604800.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*")


def parse_mesos_duration(text: str) -> float:
    """``"20mins"``, ``"3hrs"``, ``"1days"``, ``"500ms"`` (also ``"90s"``,
    ``"15m"``) -> seconds. ValueError for anything else."""
    match = _DURATION.fullmatch(text.lower())
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"not a duration: {text!r} (a number and one of {', '.join(_UNITS)})")
    return float(match.group(1)) * _UNITS[match.group(2)]


@attrs.frozen
class RemovalRateLimit:
    """At most ``agents`` agents per ``seconds`` are marked unreachable,
    spaced evenly (Mesos's RateLimiter): ``1/20mins`` removes one agent
    every 20 minutes."""

    agents: int
    seconds: float

    @classmethod
    def parse(cls, text: str) -> RemovalRateLimit:
        """Mesos's format, ``(number of agents)/(duration)``: ``1/20mins``,
        ``2/3hrs``, ``10/1secs``. :class:`ConfigError` for anything else."""
        count, slash, duration = str(text).partition("/")
        try:
            agents = int(count.strip())
            seconds = parse_mesos_duration(duration)
        except ValueError:
            agents, seconds = 0, 0.0
        if not slash or agents < 1 or not 0 < seconds < math.inf:
            raise ConfigError(f"agent removal rate limit {text!r} is not of the form AGENTS/DURATION with "
                              "AGENTS >= 1 and DURATION > 0 (e.g. 1/20mins, 2/3hrs, 10/1secs)")
        return cls(agents, seconds)

    @property
    def interval(self) -> float:
        """Seconds between two removals."""
        return self.seconds / self.agents


class RemovalQueue:
    """Agents that failed their health checks, in the order they failed,
    waiting for their turn to be marked unreachable. Without a limit each
    one's turn is at once. An agent heard from before its turn is taken off
    (:meth:`cancel`), as Mesos's master cancels a removal when the agent
    answers a ping meanwhile. O(1) per operation."""

    def __init__(self, limit: RemovalRateLimit | None) -> None:
        self.limit = limit
        self._waiting: OrderedDict[str, str] = OrderedDict()   # agent id -> why
        self._next_turn = -math.inf

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._waiting

    def waiting(self) -> KeysView[str]:
        """The agents waiting for their turn."""
        return self._waiting.keys()

    def schedule(self, agent_id: str, why: str) -> None:
        self._waiting.setdefault(agent_id, why)

    def cancel(self, agent_id: str) -> bool:
        return self._waiting.pop(agent_id, None) is not None

    def due(self, now: float) -> list[tuple[str, str]]:
        """The agents whose turn has come (taken off the queue), with why."""
        out: list[tuple[str, str]] = []
        while self._waiting and now >= self._next_turn:
            out.append(self._waiting.popitem(last=False))
            if self.limit is not None:
                self._next_turn = now + self.limit.interval
        return out

    def next_turn(self) -> float:
        """When the next agent's turn comes (inf: none waits)."""
        return self._next_turn if self._waiting else math.inf


@attrs.define
class UnreachableAgent:
    """An agent marked unreachable: it stays known (in the registry) and may
    re-register under its id until it is marked gone or ages out.

    ``tasks``: the tasks of partition-aware frameworks left TASK_UNREACHABLE
    on it, and ended tasks whose terminal update was not acknowledged yet
    (they stay in their frameworks' records). ``tasks_known`` is False for
    an agent this master took over from the registry (marked by an earlier
    leader, or one that did not re-register after a failover): its tasks are
    soft state this master never saw."""

    id: str
    hostname: str
    since: float                        # wall-clock seconds it was marked unreachable
    tasks: set[tuple[str, str]] = attrs.field(factory=set)   # (framework_id, task_id)
    tasks_known: bool = True
    principal: str = ""                 # whose its id is (docs/security.rst)

    def entry(self) -> UnreachableEntry:
        return UnreachableEntry(self.since, self.hostname, self.principal)


def agents_to_forget(unreachable: Mapping[str, UnreachableEntry], now: float, max_age: float,
                     max_count: int) -> list[str]:
    """The unreachable agents the registry forgets now (Mesos's registry GC):
    the oldest beyond ``max_count``, and any marked more than ``max_age``
    seconds before ``now``. ``unreachable`` is oldest first. O(n)."""
    excess = max(0, len(unreachable) - max_count)
    out = []
    for index, (agent_id, entry) in enumerate(unreachable.items()):
        if index < excess or now - entry.since > max_age:
            out.append(agent_id)
    return out
