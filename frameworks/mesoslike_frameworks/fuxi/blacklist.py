"""The Fuxi scheduler's global blacklist (seed 000).

Seed 000 names two sources of blacklisted machines: the cluster's operators
(PE) put machines on the *global* list, which no ScheduleUnit uses; and a
job whose slots keep failing on a machine tells the scheduler to stop
placing its new slots there *for a while* (暂时). The second kind is the
units' own business and lives with the unit in the core; this module holds
the global list:

* **permanent** entries: the operators' (the quota file's ``[blacklist]
  hosts``, :meth:`GlobalBlacklist.add`);
* **reported** entries: a job reports a machine (its runs failed there
  ``global_report_after`` times, docs/fuxi-jobs.rst). One job's report is
  evidence about that job as much as the machine, so a machine joins the
  list only when ``reports_needed`` *different* jobs reported it, and each
  report counts for ``report_seconds``: the machine leaves the list when
  fewer than ``reports_needed`` reports are that recent.

Pure: the caller passes the time. ``contains`` is O(1); ``report`` and
``expire`` are O(reports of the host) and O(reported hosts).
"""

from __future__ import annotations

import math
from typing import Iterable

__all__ = ["GlobalBlacklist", "DEFAULT_REPORTS_NEEDED", "DEFAULT_REPORT_SECONDS"]

#: different jobs that must report a machine before it is blacklisted for all
DEFAULT_REPORTS_NEEDED = 2
#: how long a report counts (seconds)
DEFAULT_REPORT_SECONDS = 600.0


class GlobalBlacklist:
    """Hosts no slot goes to: the operators' (permanent) and those recently
    reported by enough different jobs (module docstring)."""

    def __init__(self, permanent: Iterable[str] = (), *, reports_needed: int = DEFAULT_REPORTS_NEEDED,
                 report_seconds: float = DEFAULT_REPORT_SECONDS) -> None:
        if not isinstance(reports_needed, int) or isinstance(reports_needed, bool) or reports_needed < 1:
            raise ValueError(f"reports needed must be an integer >= 1, got {reports_needed!r}")
        if not isinstance(report_seconds, (int, float)) or isinstance(report_seconds, bool) \
                or math.isnan(report_seconds) or report_seconds <= 0:
            raise ValueError(f"report seconds must be a number > 0, got {report_seconds!r}")
        self.reports_needed = reports_needed
        self.report_seconds = float(report_seconds)
        self._permanent: set[str] = set(permanent)
        self._reports: dict[str, dict[str, float]] = {}     # host -> job id -> until when its report counts
        self._listed: set[str] = set()                       # reported hosts with enough recent reports
        self._next_expiry = math.inf

    def add(self, host: str) -> None:
        """The operators blacklist ``host`` for good."""
        self._permanent.add(host)

    def report(self, job_id: str, host: str, now: float) -> bool:
        """Job ``job_id`` reports ``host``; True if that puts it on the list."""
        self.expire(now)
        until = now + self.report_seconds
        reports = self._reports.setdefault(host, {})
        reports[job_id] = until
        self._next_expiry = min(self._next_expiry, until)
        if host not in self._listed and len(reports) >= self.reports_needed:
            self._listed.add(host)
            return host not in self._permanent
        return False

    @property
    def next_expiry(self) -> float:
        """When the oldest report counting now stops counting (inf: none)."""
        return self._next_expiry

    def expire(self, now: float) -> None:
        """Forget reports older than ``report_seconds``."""
        if now < self._next_expiry:
            return
        self._next_expiry = math.inf
        for host in list(self._reports):
            reports = self._reports[host]
            for job_id in [j for j, until in reports.items() if until <= now]:
                del reports[job_id]
            if reports:
                self._next_expiry = min(self._next_expiry, min(reports.values()))
            else:
                del self._reports[host]
            if len(reports) < self.reports_needed:
                self._listed.discard(host)

    def __contains__(self, host: object) -> bool:
        return host in self._permanent or host in self._listed

    def hosts(self) -> frozenset[str]:
        """Every blacklisted host now (call :meth:`expire` first)."""
        return frozenset(self._permanent | self._listed)

    def __len__(self) -> int:
        """At most how many hosts are listed (a host may be both). O(1)."""
        return len(self._permanent) + len(self._listed)

    def reports(self) -> dict[str, list[str]]:
        """Per reported host, the jobs whose reports still count (for status)."""
        return {host: sorted(reports) for host, reports in sorted(self._reports.items())}
