"""Sandbox garbage collection: which sandboxes of ended tasks to remove.

As Mesos's agent does (``--gc_delay``, default one week), a sandbox is kept
for ``gc_delay`` seconds after it was last used, so that people can read
what the task printed. When the work directory's file system is fuller
than ``disk_watermark`` (a fraction of its size), the oldest ended
sandboxes go at once, oldest first, until what they free brings the use
back under the watermark. Sandboxes of tasks the agent still knows (running,
or ended with an unacknowledged update) are never candidates.

:func:`plan` decides (pure: it takes the time and the measurements);
the agent's runtime measures and removes.
"""

from __future__ import annotations

import attrs

__all__ = ["Sandbox", "plan", "DEFAULT_GC_DELAY", "DEFAULT_DISK_WATERMARK", "parse_duration"]

#: a week, as Mesos's --gc_delay
DEFAULT_GC_DELAY = 7 * 24 * 3600.0
#: collect early once the work directory's file system is 90% full
DEFAULT_DISK_WATERMARK = 0.9

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


@attrs.frozen
class Sandbox:
    """An ended task's sandbox: where, when it was last written to (seconds
    since the epoch), and how many bytes it holds."""

    path: str
    last_used: float
    size: int


def plan(sandboxes: list[Sandbox], *, now: float, gc_delay: float, disk_used: int, disk_total: int,
         disk_watermark: float) -> list[Sandbox]:
    """The sandboxes to remove now: those unused for ``gc_delay`` seconds,
    then — while ``disk_used`` minus what those free is above
    ``disk_watermark`` x ``disk_total`` — the oldest of the rest.
    O(n log n) in the sandboxes."""
    by_age = sorted(sandboxes, key=lambda s: (s.last_used, s.path))
    chosen = [s for s in by_age if now - s.last_used >= gc_delay]
    used = disk_used - sum(s.size for s in chosen)
    limit = disk_watermark * disk_total
    for sandbox in by_age:
        if used <= limit:
            break
        if sandbox not in chosen:
            chosen.append(sandbox)
            used -= sandbox.size
    return chosen


def parse_duration(text: str) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"45s"``, ``"1w"`` or plain seconds -> seconds.
    Raises ValueError on anything else (or a negative duration)."""
    text = text.strip().lower()
    unit = _UNITS.get(text[-1:]) if text else None
    number = text[:-1] if unit is not None else text
    value = float(number) * (unit or 1.0)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"not a duration: {text!r}")
    return value
