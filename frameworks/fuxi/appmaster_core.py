"""The Fuxi AppMaster's core: one job's task scheduling, sans I/O (seed 002).

A job's AppMaster gets *workers* (one per slot the Fuxi scheduler granted)
and hands them *instances* (data shards) of the job's units. Pure and
deterministic: calls go in (:meth:`AppMasterCore.worker_joined`,
:meth:`~AppMasterCore.progress`, :meth:`~AppMasterCore.instance_done`,
:meth:`~AppMasterCore.tick`, ...), actions come out (:class:`Assign`,
:class:`Kill`, :class:`ReleaseWorker`, :class:`SetDesire`,
:class:`BlacklistHost`, :class:`ReportHost`, :class:`JobEnded`,
:class:`SnapshotChanged`); time comes from an injected clock.
"""

from __future__ import annotations

import logging

import attrs

from mesoslike.clock import Clock
from mesoslike.frameworks.fuxi.model import JobSpec

__all__ = ["AppMasterCore", "Action", "Assign", "Kill", "ReleaseWorker", "SetDesire", "BlacklistHost", "ReportHost",
           "JobEnded", "SnapshotChanged", "RUNNING", "SUCCEEDED", "FAILED", "DEFAULT_REJOIN_GRACE"]

log = logging.getLogger("mesoslike.frameworks.fuxi.appmaster")

RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"
DEFAULT_REJOIN_GRACE = 5.0


@attrs.frozen
class Assign:
    """Run ``instance`` (its ``attempt``-th run) on ``worker_id``."""
    worker_id: str
    instance: int
    attempt: int
    command: str
    env: dict[str, str]


@attrs.frozen
class Kill:
    worker_id: str
    instance: int
    attempt: int
    reason: str


@attrs.frozen
class ReleaseWorker:
    worker_id: str


@attrs.frozen
class SetDesire:
    unit: str
    slots: int


@attrs.frozen
class BlacklistHost:
    hostname: str
    reason: str


@attrs.frozen
class ReportHost:
    hostname: str
    reason: str


@attrs.frozen
class JobEnded:
    succeeded: bool
    reason: str


@attrs.frozen
class SnapshotChanged:
    pass


Action = Assign | Kill | ReleaseWorker | SetDesire | BlacklistHost | ReportHost | JobEnded | SnapshotChanged


class AppMasterCore:
    def __init__(self, job_id: str, job: JobSpec, clock: Clock, *, snapshot: dict | None = None,
                 global_report_after: int | None = None, rejoin_grace: float = DEFAULT_REJOIN_GRACE) -> None:
        raise NotImplementedError

    def worker_joined(self, worker_id: str, unit: str, hostname: str, room: str = "",
                      running: tuple[int, int] | None = None,
                      finished: list[tuple[int, int, bool, str]] = ()) -> list[Action]:
        raise NotImplementedError

    def worker_left(self, worker_id: str, reason: str) -> list[Action]:
        raise NotImplementedError

    def progress(self, worker_id: str, instance: int, attempt: int, fraction: float) -> list[Action]:
        raise NotImplementedError

    def instance_done(self, worker_id: str, instance: int, attempt: int, ok: bool, message: str = "") -> list[Action]:
        raise NotImplementedError

    def tick(self) -> list[Action]:
        raise NotImplementedError

    def next_wakeup(self) -> float | None:
        raise NotImplementedError

    def desired_slots(self) -> dict[str, int]:
        raise NotImplementedError

    def progress_report(self) -> dict:
        raise NotImplementedError

    def snapshot(self) -> dict:
        raise NotImplementedError

    @property
    def state(self) -> str:
        raise NotImplementedError
