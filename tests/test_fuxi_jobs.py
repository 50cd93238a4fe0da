"""The Fuxi service's job core, sans I/O: events in, commands out, a fake clock.

Every lifecycle path of a job — submitted, running, succeeded or failed by
its AppMaster, failed by its worker tasks, by its AppMaster exiting too
often or not starting — and what the core guards on the way: AppMaster
requests checked and dispatched by type, the release grace period, ended
jobs kept for ``status`` and then forgotten. The invariants
(:meth:`JobCore._check`) are checked after every event.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike import FakeClock, Offer, Resources, TaskState, TaskStatus
from mesoslike.frameworks.fuxi import protocol
from mesoslike.frameworks.fuxi.core import (
    DeclineOffers,
    FuxiCore,
    FuxiError,
    KillSlot,
    LaunchSlots,
    ReviveOffers,
    Slot,
    SuppressOffers,
)
from mesoslike.frameworks.fuxi.jobs import (
    MAX_WORKER_FAILURES,
    RELEASE_GRACE,
    TRANSITIONS,
    AgentLost,
    AppMasterExited,
    AppMasterRequest,
    AppMasterStartFailed,
    DriverRegistered,
    ForgetJob,
    JobAccepted,
    JobCore,
    JobFinished,
    JobState,
    JobSubmitted,
    OfferRescinded,
    OffersReceived,
    ReconcileTasks,
    RestartAppMaster,
    StartAppMaster,
    StopAppMaster,
    Tick,
    Transition,
    WorkerUpdate,
)
from mesoslike.frameworks.fuxi.model import JobSpec, UnitSpec, job_document

pytestmark = pytest.mark.timeout(60)

R = Resources.parse
RUNNING, SUCCEEDED, FAILED = JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED


class Harness:
    """A job core over a scheduler core, both on one fake clock; checks the
    invariants after every event."""

    def __init__(self, **limits) -> None:
        self.clock = FakeClock()
        # one job's report is enough here (the default needs two: issue 16)
        self.scheduler = FuxiCore(clock=self.clock, blacklist_reports=1)
        self.core = JobCore(self.scheduler, **limits)
        self._ids = itertools.count(1)
        self._offers = itertools.count(1)

    def handle(self, event_type, *args, **fields) -> list:
        out = self.core.handle(event_type(*args, **fields, stimulus_id=self.stimulus()))
        self.core._check()
        return out

    def stimulus(self) -> str:
        return f"test-{next(self._ids)}"

    def submit(self, *units: UnitSpec, token: str = "secret", **job_fields) -> tuple[str, list]:
        spec = JobSpec("j", units or [unit()], **job_fields)
        out = self.handle(JobSubmitted, spec, job_document(spec), token)
        (job_id,) = [c.job_id for c in out if isinstance(c, JobAccepted)]
        return job_id, out

    def offer(self, host: str = "h1", res: str = "cpus:4;mem:4096", room: str = "er0") -> list:
        return self.handle(OffersReceived, [Offer(f"o{next(self._offers)}", f"a-{host}", host, R(res),
                                                  {"room": room})])

    def ask(self, job_id: str, cls, token: str | None = None, **fields) -> list:
        token = self.core.job(job_id).token if token is None else token
        return self.handle(AppMasterRequest, cls(id=1, job_id=job_id, token=token, **fields))

    def update(self, slot: Slot, state: str, message: str = "") -> list:
        return self.handle(WorkerUpdate, TaskStatus(task_id=slot.id, state=state, message=message))

    def unit_status(self, job_id: str, name: str = "u") -> dict:
        job = self.core.status(job_id)["jobs"][0]
        return next(u for u in job["units"] if u["name"] == name)


def unit(name="u", slots=1, instances=0, **kw) -> UnitSpec:
    return UnitSpec(name, slots, R("cpus:1;mem:100"), command="run {instance}", instances=instances, **kw)


def of(commands, kind) -> list:
    return [c for c in commands if isinstance(c, kind)]


def launched(commands) -> list[Slot]:
    return [slot for command in of(commands, LaunchSlots) for slot in command.slots]


@pytest.fixture
def h() -> Harness:
    return Harness()


# ============================================================== submission
def test_a_submission_is_accepted_wants_offers_and_starts_its_appmaster(h):
    spec = JobSpec("j", [unit("map", slots=5, instances=2), unit("reduce", slots=3, after=["map"])])
    out = h.handle(JobSubmitted, spec, job_document(spec), "secret")
    assert out == [JobAccepted("job-0001"), StartAppMaster("job-0001", job_document(spec), "secret")]
    # the first desire: the unit's instances (at most its slots), none for a unit that comes after another
    assert h.unit_status("job-0001", "map")["desired"] == 2 and h.unit_status("job-0001", "reduce")["desired"] == 0
    assert h.core.job("job-0001").state is RUNNING
    assert h.core.story("job-0001") == [Transition("job-0001", None, RUNNING, "test-1", 0.0)]


def test_a_refused_submission_changes_nothing(h):
    with pytest.raises(FuxiError, match="unknown quota group 'nope'"):
        h.submit(quota_group="nope")
    assert h.core.status()["jobs"] == [] and list(h.core.jobs) == []
    h.core._check()


def test_granted_slots_launch_worker_tasks_that_know_their_room(h):
    job_id, _ = h.submit(unit(slots=2, instances=2))
    out = h.offer("h1", room="er1")
    slots = launched(out)
    assert [(s.job_id, s.unit, s.hostname, s.room) for s in slots] == [(job_id, "u", "h1", "er1")] * 2
    assert h.unit_status(job_id)["granted"] == 2 and all(h.scheduler.holds(s.id) for s in slots)


# ========================================================= the job's end
def test_an_appmaster_that_says_succeeded_ends_the_job_and_its_slots_are_killed(h):
    job_id, _ = h.submit(unit(slots=2, instances=2))
    slots = launched(h.offer())
    h.clock.advance(7.5)
    out = h.ask(job_id, protocol.JobEnded, succeeded=True, reason="all 2 instances finished")
    assert set(of(out, KillSlot)) == {KillSlot(s.id, "job finished") for s in slots}
    assert out[-1] == JobFinished(job_id, SUCCEEDED, "all 2 instances finished")
    assert not of(out, StopAppMaster)                     # an AppMaster that ended its job exits by itself
    job = h.core.job(job_id)
    assert (job.state, job.reason, job.ended) == (SUCCEEDED, "all 2 instances finished", 7.5)
    status = h.core.status(job_id)["jobs"][0]
    assert status["state"] == "succeeded" and status["elapsed"] == 7.5 and status["units"][0]["granted"] == 0
    assert h.core.story(job_id)[-1] == Transition(job_id, RUNNING, SUCCEEDED, "test-3", 7.5)
    # the killed tasks' updates are not news; what the AppMaster says after the end is moot
    assert all(h.update(s, TaskState.KILLED) == [] for s in slots)
    assert h.ask(job_id, protocol.SetDesire, unit="u", slots=3) == []
    assert h.ask(job_id, protocol.JobEnded, succeeded=False, reason="late") == []
    assert h.core.job(job_id).state is SUCCEEDED


def test_an_appmaster_that_says_failed_fails_the_job_and_is_stopped(h):
    job_id, _ = h.submit()
    h.offer()
    out = h.ask(job_id, protocol.JobEnded, succeeded=False, reason="instance 0 failed 3 times")
    assert out[-2:] == [StopAppMaster(job_id), JobFinished(job_id, FAILED, "instance 0 failed 3 times")]
    assert h.core.status(job_id)["jobs"][0]["reason"] == "instance 0 failed 3 times"


def test_a_job_ends_once_the_transitions_say_so():
    assert TRANSITIONS[RUNNING] == {SUCCEEDED, FAILED}
    assert TRANSITIONS[SUCCEEDED] == TRANSITIONS[FAILED] == frozenset()


# ====================================================== the worker tasks
def test_a_worker_that_ends_gives_its_slot_back_and_one_lost_loses_it_both_keep_the_desire(h):
    job_id, _ = h.submit(unit(slots=2, instances=2))
    first, second = launched(h.offer())
    assert h.update(first, TaskState.RUNNING) == []
    h.update(first, TaskState.FINISHED)
    assert not h.scheduler.holds(first.id)
    assert h.unit_status(job_id)["granted"] == 1 and h.unit_status(job_id)["desired"] == 2
    h.update(second, TaskState.LOST, "agent gone")
    assert h.unit_status(job_id)["granted"] == 0 and h.unit_status(job_id)["desired"] == 2
    assert len(launched(h.offer())) == 2
    assert h.core.job(job_id).worker_failures == 0


def test_worker_tasks_that_keep_failing_fail_the_job():
    h = Harness(max_worker_failures=3)
    job_id, _ = h.submit()
    for n in range(1, 4):
        (slot,) = launched(h.offer())
        out = h.update(slot, TaskState.FAILED, "python: not found")
        assert h.core.job(job_id).worker_failures == n
    assert h.core.job(job_id).state is FAILED and out[-1] == JobFinished(
        job_id, FAILED, "3 worker tasks failed; last on h1: TASK_FAILED: python: not found")
    assert StopAppMaster(job_id) in out
    assert MAX_WORKER_FAILURES == 20                       # the service's default


def test_an_agent_lost_takes_its_slots_back(h):
    job_id, _ = h.submit(unit(slots=2, instances=2))
    slots = launched(h.offer("h1"))
    assert h.handle(AgentLost, "a-h1") == [ReviveOffers()]          # suppressed while it had all it wanted
    assert h.unit_status(job_id)["granted"] == 0 and h.unit_status(job_id)["desired"] == 2
    assert all(h.update(s, TaskState.LOST) == [] for s in slots)   # the scheduler knew already


def test_a_reregistered_framework_reconciles_its_worker_tasks_and_revives(h):
    assert h.handle(DriverRegistered) == []
    job_id, _ = h.submit(unit(slots=3, instances=3))
    slots = launched(h.offer(res="cpus:2;mem:4096"))
    assert h.handle(DriverRegistered, reregistered=True) == [ReconcileTasks(tuple(sorted(s.id for s in slots))),
                                                             ReviveOffers()]
    assert h.handle(DriverRegistered) == [ReviveOffers()]     # a first registration has no tasks to ask about
    assert h.handle(OfferRescinded, "o-unknown") == []


# ================================================ the release grace period
def test_a_released_slot_goes_back_at_once_and_its_task_is_killed_only_after_the_grace_period(h):
    job_id, _ = h.submit(unit(slots=2, instances=2))
    first, second = launched(h.offer())
    h.ask(job_id, protocol.SetDesire, unit="u", slots=1)
    out = h.ask(job_id, protocol.ReleaseSlot, slot=first.id)
    assert not of(out, KillSlot) and not h.scheduler.holds(first.id)
    assert h.unit_status(job_id)["granted"] == 1 and h.unit_status(job_id)["desired"] == 1
    assert h.ask(job_id, protocol.ReleaseSlot, slot=first.id) == []          # twice: nothing more
    h.clock.advance(RELEASE_GRACE - 0.1)
    assert h.handle(Tick) == []
    h.clock.advance(0.1)
    assert h.handle(Tick) == [KillSlot(first.id, f"its worker did not exit within {RELEASE_GRACE:g}s of its "
                                                 "release")]
    assert h.handle(Tick) == []                                              # killed once
    assert h.update(first, TaskState.KILLED) == [] and h.unit_status(job_id)["granted"] == 1


def test_a_released_worker_that_exits_in_time_is_not_killed(h):
    job_id, _ = h.submit(unit(slots=2, instances=2))
    first, _ = launched(h.offer())
    h.ask(job_id, protocol.ReleaseSlot, slot=first.id)
    assert h.update(first, TaskState.FINISHED) == []                        # its slot went back already
    h.clock.advance(2 * RELEASE_GRACE)
    assert h.handle(Tick) == []
    assert h.unit_status(job_id)["granted"] == 1


# ================================================== AppMaster supervision
def test_an_appmaster_that_keeps_exiting_is_restarted_up_to_the_limit_then_its_job_fails():
    h = Harness(max_appmaster_restarts=2)
    job_id, _ = h.submit()
    assert h.handle(AppMasterExited, job_id, 1, "boom") == [RestartAppMaster(job_id, 1, 1)]
    assert h.handle(AppMasterExited, job_id, -9, "boom") == [RestartAppMaster(job_id, 2, -9)]
    out = h.handle(AppMasterExited, job_id, 3, "Traceback: boom")
    assert out[-1] == JobFinished(job_id, FAILED, "the AppMaster exited 3 times (last: exit status 3): "
                                                  "Traceback: boom")
    assert StopAppMaster(job_id) in out and h.core.job(job_id).appmaster_restarts == 2
    assert h.handle(AppMasterExited, job_id, 0, "") == []          # it ended with its job: no news


def test_an_appmaster_that_cannot_start_or_restart_fails_its_job(h):
    job_id, _ = h.submit()
    out = h.handle(AppMasterStartFailed, job_id, "[Errno 2] No such file or directory: 'python'")
    assert out[-1] == JobFinished(job_id, FAILED, "cannot start the AppMaster: [Errno 2] No such file or directory: "
                                                  "'python'")
    other, _ = h.submit()
    h.handle(AppMasterExited, other, 1)
    h.handle(AppMasterStartFailed, other, "port taken")
    assert h.core.job(other).reason == "cannot restart the AppMaster: port taken"
    assert h.handle(AppMasterStartFailed, other, "again") == []


# ======================================================== ended jobs kept
def test_ended_jobs_are_kept_for_status_until_newer_ended_ones_push_them_out():
    h = Harness(keep_ended=2)
    ids = [h.submit()[0] for _ in range(4)]
    for job_id in ids[:2]:
        assert not of(h.ask(job_id, protocol.JobEnded, succeeded=True, reason=""), ForgetJob)
    out = h.ask(ids[2], protocol.JobEnded, succeeded=True, reason="")
    assert out[-1] == ForgetJob(ids[0])
    assert [j["id"] for j in h.core.status()["jobs"]] == ids[1:] and h.core.get(ids[0]) is None
    with pytest.raises(FuxiError, match="unknown job"):
        h.core.status(ids[0])
    with pytest.raises(FuxiError, match="unknown job"):
        h.ask(ids[0], protocol.SetDesire, token="secret", unit="u", slots=1)


# ======================================================= AppMaster requests
def test_appmaster_requests_drive_desire_blacklists_and_progress(h):
    job_id, _ = h.submit(unit(slots=3, instances=6))
    h.ask(job_id, protocol.SetDesire, unit="u", slots=2)
    assert len(launched(h.offer("h1"))) == 2
    h.ask(job_id, protocol.BlacklistHost, host="h2")
    h.ask(job_id, protocol.ReportHost, host="h9")        # the global blacklist: through the scheduler's method
    assert set(h.scheduler.global_blacklist) == {"h9"} and h.core.status()["global_blacklist"] == ["h9"]
    h.ask(job_id, protocol.SetDesire, unit="u", slots=3)
    assert launched(h.offer("h2")) == [] and launched(h.offer("h9")) == []
    h.ask(job_id, protocol.AvoidHosts, unit="u", hosts=["h3"])
    assert launched(h.offer("h3")) == [] and len(launched(h.offer("h4"))) == 1
    report = {"units": {"u": {"total": 6, "done": 4, "running": 2, "pending": 0, "failed_attempts": 1,
                              "backups": 1, "workers": 2}}, "blacklisted": ["h2"]}
    h.ask(job_id, protocol.Progress, report=report)
    job = h.core.status(job_id)["jobs"][0]
    assert job["instances"] == {"total": 6, "done": 4, "running": 2, "pending": 0, "failed": 1, "backups": 1}
    assert job["blacklisted"] == ["h2"] and job["units"][0]["instances"]["workers"] == 2


def test_bad_appmaster_requests_are_refused_and_change_nothing(h):
    job_id, _ = h.submit(unit(slots=1))
    other, _ = h.submit(unit(slots=1))
    other_slot = next(s for s in launched(h.offer()) if s.job_id == other)
    before = h.core.status()
    for request, reason in [
            (protocol.SetDesire(1, "job-9", "x", "u", 1), "unknown job"),
            (protocol.SetDesire(1, job_id, "forged", "u", 1), "wrong token"),
            (protocol.SetDesire(1, job_id, "s\u00e9cret", "u", 1), "wrong token"),
            (protocol.SetDesire(1, job_id, "secret", "nope", 1), "unknown unit"),
            (protocol.SetDesire(1, job_id, "secret", "u", -1), ">= 0"),
            (protocol.ReleaseSlot(1, job_id, "secret", other_slot.id), "not a slot of job"),
            (protocol.AvoidHosts(1, job_id, "secret", "nope", []), "unknown unit"),
            (protocol.AvoidHosts(1, job_id, "secret", "u", ["h1", ""]), "non-empty hostnames"),
            (protocol.BlacklistHost(1, job_id, "secret", ""), "non-empty"),
            (protocol.ReportHost(1, job_id, "secret", ""), "non-empty"),
            (protocol.Progress(1, job_id, "secret", {"x": b"bytes"}), "JSON"),
            (protocol.Submit(1, {}), "SUBMIT is not an AppMaster request"),
    ]:
        with pytest.raises(FuxiError, match=reason):
            h.handle(AppMasterRequest, request)
    assert h.core.status() == before and h.scheduler.holds(other_slot.id)
    assert h.core.job(job_id).report is None and h.core.job(job_id).state is RUNNING


def test_a_release_of_a_slot_whose_task_is_gone_is_no_news(h):
    job_id, _ = h.submit(unit(slots=2, instances=2))
    first, _ = launched(h.offer())
    h.update(first, TaskState.FINISHED)
    assert h.ask(job_id, protocol.ReleaseSlot, slot=first.id) == []
    assert h.ask(job_id, protocol.ReleaseSlot, slot="no-such-slot") == []


def test_an_event_the_core_does_not_know_is_refused(h):
    with pytest.raises(FuxiError, match="not an event of the job core"):
        h.core.handle(object())  # type: ignore[arg-type]


def test_the_job_core_does_no_io_and_reads_no_clock():
    from test_layering import ROOT, assert_pure
    assert_pure(ROOT / "frameworks" / "fuxi" / "jobs.py")


# ================================================================ offers
def test_offers_are_declined_and_suppressed_with_nothing_to_do_and_revived_by_demand(h):
    out = h.offer()
    assert of(out, DeclineOffers) and of(out, SuppressOffers)
    _, out = h.submit()
    assert of(out, ReviveOffers)


# =============================================== random walks: invariants
KINDS = ["submit"] * 2 + ["offer"] * 3 + ["update"] * 4 + ["release", "desire", "end", "exit", "start-failed",
                                                              "tick", "lost", "reregistered"]
EVENTS = st.lists(st.tuples(st.sampled_from(KINDS),
                            st.integers(0, 5), st.sampled_from([TaskState.RUNNING, TaskState.FINISHED,
                                                                TaskState.FAILED, TaskState.KILLED,
                                                                TaskState.LOST]),
                            st.floats(0, 3)),
                  min_size=10, max_size=80)


@given(EVENTS)
def test_any_sequence_of_events_keeps_the_invariants(steps):
    h = Harness(max_appmaster_restarts=2, max_worker_failures=3, keep_ended=2)
    slots: list[Slot] = []
    for kind, n, state, seconds in steps:
        h.clock.advance(seconds)
        ids = [job.id for job in h.core.jobs]
        job_id = ids[n % len(ids)] if ids else None
        if kind == "submit":
            h.submit(unit(slots=1 + n % 3, instances=n), unit("v", slots=1, after=["u"]))
        elif kind == "offer":
            slots += launched(h.offer(f"h{n}", res="cpus:2;mem:1024"))
        elif kind == "update" and slots:
            h.update(slots[n % len(slots)], state)
        elif kind == "lost":
            h.handle(AgentLost, f"a-h{n}")
        elif kind == "reregistered":
            h.handle(DriverRegistered, reregistered=True)
        elif kind == "tick":
            h.handle(Tick)
        elif job_id is None:
            continue
        elif kind == "release" and slots:
            slot = slots[n % len(slots)]
            if slot.job_id == job_id:
                h.ask(job_id, protocol.ReleaseSlot, slot=slot.id)
        elif kind == "desire":
            h.ask(job_id, protocol.SetDesire, unit="u", slots=n)
        elif kind == "end":
            h.ask(job_id, protocol.JobEnded, succeeded=n % 2 == 0, reason="")
        elif kind == "exit":
            h.handle(AppMasterExited, job_id, n)
        elif kind == "start-failed":
            h.handle(AppMasterStartFailed, job_id, "no")
    for job in h.core.jobs:
        story = h.core.story(job.id)
        assert story[0].start is None and story[-1].finish is job.state and len(story) <= 2
