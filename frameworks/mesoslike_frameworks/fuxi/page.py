"""The Fuxi service's read-only page (``mesoslike fuxi serve --http-port``,
docs/dashboard.rst): its files (``static/``) at ``/`` and ``/static/``, at
``GET /status`` what ``fuxi status --json`` says (a standby says it is
one), and at ``GET /metrics`` the same as numbers (docs/observability.rst),
served by :class:`mesoslike.status_page.StatusPage`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from mesoslike.status_page import Metric, StatusPage, metric

__all__ = ["fuxi_page", "fuxi_metrics", "STATIC"]

#: the page's files, shipped in the package (setup.cfg package_data)
STATIC = Path(__file__).resolve().parent / "static"
_FIELDS = ("desired", "granted", "waiting", "reserved")


def fuxi_page(ip: str, port: int, status: Callable[[], dict[str, Any] | None], refusing: Callable[[], str]
              ) -> StatusPage:
    """The page on ``ip:port`` (not started; ConfigError if the port cannot be bound).
    ``status()``: the serving service's status document, None while it does not serve
    (``refusing()`` says why)."""

    def view() -> dict[str, Any]:
        document = status()
        return document if document is not None else {"serving": False, "why_not": refusing()}

    return StatusPage(ip, port, STATIC, {"/status": view}, lambda: fuxi_metrics(status()))


def fuxi_metrics(document: dict[str, Any] | None) -> list[Metric]:
    """Jobs, and slots by quota group, of a status document (None: not serving)."""
    serving = document is not None
    document = document or {"jobs": [], "quota_groups": []}
    slots: dict[str, dict[str, int]] = {group["name"]: dict.fromkeys(_FIELDS, 0) for group in document["quota_groups"]}
    units_waiting = 0
    for job in document["jobs"]:
        counts = slots.setdefault(job["quota_group"], dict.fromkeys(_FIELDS, 0))
        for unit in job["units"]:
            units_waiting += unit["waiting"] > 0
            for field in counts:
                counts[field] += unit[field]
    return [
        metric("fuxi_serving", "gauge", "1 while this Fuxi service leads and serves jobs.", int(serving)),
        metric("fuxi_jobs", "gauge", "Jobs the service keeps (running, and ended ones kept for status).",
               len(document["jobs"])),
        metric("fuxi_units_waiting", "gauge", "ScheduleUnits waiting for slots.", units_waiting),
        *(metric(f"fuxi_slots_{field}", "gauge", f"Slots {field} by the units of each quota group.",
                 [({"quota_group": group}, counts[field]) for group, counts in sorted(slots.items())])
          for field in _FIELDS),
    ]
