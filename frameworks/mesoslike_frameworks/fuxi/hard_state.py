"""The Fuxi service's hard state: what a new leader reads (seed 002).

FuxiMaster's failover splits its state in two. The **hard state** — the
jobs submitted (their job files), their states, the quota configuration —
is written before a submission is acknowledged and read back by the next
leader. The **soft state** — granted slots, running workers and
AppMasters, instance progress — is not written: the next leader rebuilds
it from the AppMasters' reports and the master's reconciliation
(:mod:`.jobs`, docs/fuxi-jobs.rst "Failover").

Two kinds of record, each stored under its own name (ZooKeeper's
``<group>/registry/<name>``, or ``<work dir>/state/<name>`` standalone;
:mod:`.state_store`), as JSON:

- ``service`` (:class:`ServiceRecord`): the framework id, the leaders'
  generation, the next job number, the quota groups (maximums, policies),
  the global blacklist (and how many jobs' reports put a host there) and
  whether preemption is on;
- ``job.<job id>`` (:class:`JobRecord`): the job file as submitted, the
  AppMaster's token, the principal that submitted it, the job's state
  and why, its AppMaster (address, pid, host) and counts its limits are
  about. (Not its key pairs: those stay in the job's work directory.)

Pure: records to bytes and back, no I/O.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping

import attrs

from mesoslike import MesoslikeError

__all__ = ["ServiceRecord", "JobRecord", "AppMasterRecord", "HardState", "HardStateError", "SERVICE_KEY",
           "JOB_PREFIX", "FORMAT", "job_key", "encode", "decode"]

log = logging.getLogger("mesoslike_frameworks.fuxi.hard_state")

FORMAT = 1
SERVICE_KEY = "service"
JOB_PREFIX = "job."


class HardStateError(MesoslikeError):
    """A stored record that cannot be read (the message names it and why), or one that cannot be stored."""


@attrs.frozen
class AppMasterRecord:
    """Where a job's AppMaster runs: its workers' ``address``, its ``pid`` on
    ``host``, and the job server it was told to report to (``service``)."""
    address: str
    pid: int
    host: str
    service: str


@attrs.frozen
class ServiceRecord:
    """The scheduler's own record. ``generation`` counts the leaders that
    recovered (each makes slot ids of its own); ``next_job`` is the next job
    number; ``quota``: group -> maximum (a resource string, None: unlimited);
    ``policies``: group -> FIFO or FAIR (a group not named: FIFO);
    ``blacklist_reports``/``blacklist_report_seconds``: how many jobs' reports,
    how recent, put a host on the global blacklist (the quota file's)."""
    framework_id: str = ""
    generation: int = 0
    next_job: int = 1
    quota: Mapping[str, str | None] = attrs.field(factory=dict)
    global_blacklist: tuple[str, ...] = ()
    preemption: bool = True
    policies: Mapping[str, str] = attrs.field(factory=dict)
    blacklist_reports: int = 2
    blacklist_report_seconds: float = 600.0


@attrs.frozen
class JobRecord:
    """One job as stored. ``state``: running, succeeded, failed or killed;
    ``submitted``/``ended``: the leader's clock; ``appmaster``: None until
    its first start."""
    id: str
    document: Mapping[str, Any]
    token: str
    state: str
    reason: str = ""
    submitted: float = 0.0
    ended: float | None = None
    appmaster: AppMasterRecord | None = None
    appmaster_restarts: int = 0
    worker_failures: int = 0
    #: who submitted it ("" anonymous): its owner (docs/security.rst, "The Fuxi service")
    principal: str = ""


@attrs.frozen
class HardState:
    """What a store held: the service record (None: nothing stored yet) and the jobs by id."""
    service: ServiceRecord | None = None
    jobs: Mapping[str, JobRecord] = attrs.field(factory=dict)


def job_key(job_id: str) -> str:
    """The record name of a job."""
    return JOB_PREFIX + job_id


def encode(record: ServiceRecord | JobRecord) -> bytes:
    """The record as stored: JSON, with its kind and the format."""
    kind = "service" if isinstance(record, ServiceRecord) else "job"
    try:
        return json.dumps({"format": FORMAT, "kind": kind, **attrs.asdict(record)}, separators=(",", ":"),
                          allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise HardStateError(f"the {kind} record cannot be stored: {exc}") from None


def decode(records: Mapping[str, bytes]) -> HardState:
    """The hard state in ``records`` (name -> stored bytes). A job record
    that does not parse is skipped with an error logged (one damaged job must
    not keep the scheduler from recovering the others); a service record
    that does not parse raises :class:`HardStateError` (without it the
    framework id is lost: better to stop and say so)."""
    service = None
    jobs: dict[str, JobRecord] = {}
    for name, data in sorted(records.items()):
        if name == SERVICE_KEY:
            service = _service(_document(name, data))
        elif name.startswith(JOB_PREFIX):
            try:
                job = _job(_document(name, data))
            except HardStateError as exc:
                log.error("skipping a job the scheduler cannot read back: %s", exc)
                continue
            if job_key(job.id) != name:
                log.error("skipping the record %s: it holds job %r", name, job.id)
                continue
            jobs[job.id] = job
        else:
            log.warning("ignoring the stored record %s: not one of the Fuxi scheduler's", name)
    return HardState(service, jobs)


def _document(name: str, data: bytes) -> dict:
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HardStateError(f"the record {name} is not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise HardStateError(f"the record {name} is not a format-{FORMAT} record of the Fuxi scheduler")
    document.pop("format")
    document.pop("kind", None)
    return document


def _service(document: dict) -> ServiceRecord:
    try:
        record = ServiceRecord(**{**document, "global_blacklist": tuple(document.get("global_blacklist", ()))})
    except TypeError as exc:
        raise HardStateError(f"the service record does not parse: {exc}") from None
    if not (isinstance(record.framework_id, str) and isinstance(record.generation, int)
            and isinstance(record.next_job, int) and isinstance(record.quota, dict)
            and all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in record.quota.items())
            and all(isinstance(h, str) for h in record.global_blacklist) and isinstance(record.preemption, bool)
            and isinstance(record.policies, dict)
            and all(isinstance(k, str) and v in ("FIFO", "FAIR") for k, v in record.policies.items())
            and isinstance(record.blacklist_reports, int) and record.blacklist_reports >= 1
            and isinstance(record.blacklist_report_seconds, (int, float)) and record.blacklist_report_seconds > 0):
        raise HardStateError(f"the service record has fields of the wrong type: {record!r}"[:300])
    return record


def _job(document: dict) -> JobRecord:
    try:
        appmaster = document.get("appmaster")
        record = JobRecord(**{**document, "appmaster": AppMasterRecord(**appmaster) if appmaster else None})
    except TypeError as exc:
        raise HardStateError(f"a job record does not parse: {exc}") from None
    if not (isinstance(record.id, str) and isinstance(record.document, dict) and isinstance(record.token, str)
            and record.state in ("running", "succeeded", "failed", "killed") and isinstance(record.reason, str)
            and isinstance(record.submitted, (int, float)) and isinstance(record.appmaster_restarts, int)
            and isinstance(record.worker_failures, int) and isinstance(record.principal, str)):
        raise HardStateError(f"the record of job {record.id!r} has fields of the wrong type"[:300])
    return record
