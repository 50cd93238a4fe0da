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
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.core import (
    DeclineOffers,
    FuxiCore,
    FuxiError,
    KillSlot,
    LaunchSlots,
    ReviveOffers,
    Slot,
    SuppressOffers,
)
from mesoslike_frameworks.fuxi.hard_state import (
    SERVICE_KEY,
    AppMasterRecord,
    HardStateError,
    JobRecord,
    ServiceRecord,
    decode,
    encode,
    job_key,
)
from mesoslike_frameworks.fuxi.jobs import (
    ADOPT_WINDOW,
    MAX_WORKER_FAILURES,
    RELEASE_GRACE,
    TRANSITIONS,
    AdoptAppMaster,
    AgentLost,
    AppMasterExited,
    AppMasterRequest,
    AppMasterStarted,
    AppMasterStartFailed,
    DriverDisconnected,
    DriverRegistered,
    ForgetJob,
    JobAccepted,
    JobCore,
    JobFinished,
    JobKillRequested,
    JobState,
    JobSubmitted,
    OfferRescinded,
    OffersReceived,
    Persist,
    TellAppMaster,
    Persisted,
    PersistFailed,
    ReconcileTasks,
    Recover,
    Refused,
    RestartAppMaster,
    StartAppMaster,
    StopAppMaster,
    Tick,
    Transition,
    WorkerUpdate,
)
from mesoslike_frameworks.fuxi.model import JobSpec, UnitSpec, job_document

pytestmark = pytest.mark.timeout(60)

R = Resources.parse
RUNNING, SUCCEEDED, FAILED, KILLED = JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED


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
def test_an_appmaster_that_says_succeeded_ends_the_job_and_its_workers_exit_by_themselves(h):
    """A succeeded job's workers were killed with it, and shown TASK_KILLED in
    the master's history although nothing went wrong; its AppMaster releases
    them as it ends the job, so they exit by themselves (TASK_FINISHED) and
    are killed only if they outlive the release grace (issue 25)."""
    job_id, _ = h.submit(unit(slots=2, instances=2))
    slots = launched(h.offer())
    h.clock.advance(7.5)
    out = h.ask(job_id, protocol.JobEnded, succeeded=True, reason="all 2 instances finished")
    assert of(out, KillSlot) == [] and not any(h.scheduler.holds(s.id) for s in slots)   # the slots went back
    assert out[-1] == JobFinished(job_id, SUCCEEDED, "all 2 instances finished")
    assert not of(out, StopAppMaster)                     # an AppMaster that ended its job exits by itself
    job = h.core.job(job_id)
    assert (job.state, job.reason, job.ended) == (SUCCEEDED, "all 2 instances finished", 7.5)
    status = h.core.status(job_id)["jobs"][0]
    assert status["state"] == "succeeded" and status["elapsed"] == 7.5 and status["units"][0]["granted"] == 0
    assert h.core.story(job_id)[-1] == Transition(job_id, RUNNING, SUCCEEDED, "test-3", 7.5)
    # the workers' ends are not news; what the AppMaster says after the end is moot
    assert h.update(slots[0], TaskState.FINISHED) == []
    assert h.ask(job_id, protocol.SetDesire, unit="u", slots=3) == []
    assert h.ask(job_id, protocol.JobEnded, succeeded=False, reason="late") == []
    assert h.core.job(job_id).state is SUCCEEDED
    h.clock.advance(RELEASE_GRACE - 1)
    assert h.handle(Tick) == []
    h.clock.advance(1)   # the other one did not exit: killed, and said why
    assert h.handle(Tick) == [KillSlot(slots[1].id, f"its worker did not exit within {RELEASE_GRACE:g}s of its "
                                                    "job's success")]
    assert h.update(slots[1], TaskState.KILLED) == [] and h.handle(Tick) == []


def test_an_appmaster_that_says_failed_fails_the_job_and_is_stopped(h):
    job_id, _ = h.submit()
    h.offer()
    out = h.ask(job_id, protocol.JobEnded, succeeded=False, reason="instance 0 failed 3 times")
    assert out[-2:] == [StopAppMaster(job_id), JobFinished(job_id, FAILED, "instance 0 failed 3 times")]
    assert h.core.status(job_id)["jobs"][0]["reason"] == "instance 0 failed 3 times"


def test_a_job_ends_once_the_transitions_say_so():
    # issue 16 §2 adds "killed" (mesoslike fuxi kill), an end like the others
    assert TRANSITIONS[RUNNING] == {SUCCEEDED, FAILED, KILLED}
    assert TRANSITIONS[SUCCEEDED] == TRANSITIONS[FAILED] == TRANSITIONS[KILLED] == frozenset()


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
    # its AppMaster hears of each slot taken back; suppressed while it had all it wanted, now it revives
    out = h.handle(AgentLost, "a-h1")
    assert [c for c in out if not isinstance(c, TellAppMaster)] == [ReviveOffers()]
    assert [c for c in out if isinstance(c, TellAppMaster)] == [
        TellAppMaster(job_id, protocol.SlotRevoked(job_id, s.id, "agent lost")) for s in slots]
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


def test_a_released_worker_still_running_when_its_job_ends_is_killed_at_once(h):
    # seen in test_fuxi_service: a failed job's AppMaster released a slot (it blacklisted the
    # machine), the job then failed, and the worker ran on, no AppMaster left to tell it to exit
    job_id, _ = h.submit(unit(slots=2, instances=2))
    first, second = launched(h.offer())
    h.ask(job_id, protocol.ReleaseSlot, slot=first.id)
    out = h.ask(job_id, protocol.JobEnded, succeeded=False, reason="instance 0 failed 3 times")
    assert KillSlot(first.id, "its job ended") in out and KillSlot(second.id, "job finished") in out
    h.clock.advance(2 * RELEASE_GRACE)
    assert h.handle(Tick) == []                                              # killed once


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


def test_status_shows_the_groups_policy_and_nothing_running_once_a_job_ended():
    """``fuxi status`` printed ``None`` as the policy of a job whose file did
    not name one, and a killed job went on showing the instances its
    AppMaster last reported running (issue 25)."""
    h = Harness()
    h.scheduler = FuxiCore({"batch": None}, clock=h.clock, policies={"batch": "FAIR"})
    h.core = JobCore(h.scheduler)
    job_id, _ = h.submit(unit(slots=3, instances=6))
    fair, _ = h.submit(unit(slots=1), quota_group="batch")
    assert [j["policy"] for j in h.core.status()["jobs"]] == ["FIFO", "FAIR"]
    launched(h.offer("h1"))
    report = {"units": {"u": {"total": 6, "done": 1, "running": 3, "pending": 2, "failed_attempts": 0,
                              "backups": 0, "workers": 3}}}
    h.ask(job_id, protocol.Progress, report=report)
    assert h.core.status(job_id)["jobs"][0]["instances"]["running"] == 3
    h.handle(JobKillRequested, job_id)
    job = h.core.status(job_id)["jobs"][0]
    assert job["state"] == "killed" and job["policy"] == "FIFO"
    assert job["instances"] == {"total": 6, "done": 1, "running": 0, "pending": 0, "failed": 0, "backups": 0}
    assert job["units"][0]["instances"]["workers"] == 0


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
    assert_pure(ROOT / "frameworks" / "mesoslike_frameworks" / "fuxi" / "jobs.py")
    assert_pure(ROOT / "frameworks" / "mesoslike_frameworks" / "fuxi" / "hard_state.py")   # the records it writes, too


# ================================================================ offers
def test_offers_are_declined_and_suppressed_with_nothing_to_do_and_revived_by_demand(h):
    out = h.offer()
    assert of(out, DeclineOffers) and of(out, SuppressOffers)
    _, out = h.submit()
    assert of(out, ReviveOffers)


# =============================================== random walks: invariants
KINDS = ["submit"] * 2 + ["offer"] * 3 + ["update"] * 4 + ["release", "desire", "end", "exit", "start-failed",
                                                              "tick", "lost", "reregistered", "kill"]
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
        elif kind == "kill" and h.core.job(job_id).state is RUNNING:
            h.handle(JobKillRequested, job_id)
    for job in h.core.jobs:
        story = h.core.story(job.id)
        assert story[0].start is None and story[-1].finish is job.state and len(story) <= 2


# ================================================================ kill
def test_a_killed_job_ends_killed_its_slots_killed_and_its_appmaster_stopped(h):
    job_id, _ = h.submit(unit(slots=2, instances=4))
    slots = launched(h.offer())
    out = h.handle(JobKillRequested, job_id)
    assert set(of(out, KillSlot)) == {KillSlot(s.id, "job finished") for s in slots}
    assert of(out, StopAppMaster) == [StopAppMaster(job_id)]
    assert of(out, JobFinished) == [JobFinished(job_id, KILLED, "killed by a client (mesoslike fuxi kill)")]
    assert h.core.job(job_id).state is KILLED and h.unit_status(job_id)["desired"] == 0
    with pytest.raises(FuxiError, match="has ended already \\(killed\\)"):
        h.handle(JobKillRequested, job_id)
    with pytest.raises(FuxiError, match="unknown job 'job-0042'"):
        h.handle(JobKillRequested, "job-0042")


def test_killed_jobs_stay_in_a_bounded_history():
    h = Harness(keep_ended=2)
    ids = [h.submit()[0] for _ in range(4)]
    forgotten = [c for job_id in ids for c in of(h.handle(JobKillRequested, job_id), ForgetJob)]
    assert forgotten == [ForgetJob(ids[0]), ForgetJob(ids[1])]
    assert [job.id for job in h.core.jobs] == ids[2:]


# ======================================================== why waiting
def test_status_says_a_unit_waits_for_a_master_until_the_driver_registers(h):
    job_id, _ = h.submit(unit(slots=2, instances=2))
    h.clock.advance(12)
    status = h.core.status(job_id)
    assert status["framework"]["registered"] is False
    assert h.unit_status(job_id)["why_waiting"] == "no master: not registered with a master yet (for 12s)"
    h.handle(DriverRegistered, framework_id="fw-1")
    assert h.unit_status(job_id)["why_waiting"] == "" and h.core.status()["framework"]["id"] == "fw-1"
    h.offer(res="cpus:1;mem:1024")                          # room for one slot: the other waits for a fit
    assert h.unit_status(job_id)["why_waiting"] == "no fit"
    h.handle(DriverDisconnected, "the master stopped answering")
    h.clock.advance(3)
    assert h.unit_status(job_id)["why_waiting"] == "no master: the master stopped answering (for 3s)"
    assert h.core.status()["framework"]["why_not"].startswith("no master: the master stopped answering")


# ========================================================== hard state
class Persisting(Harness):
    """A job core that writes its hard state: :meth:`write` carries out a Persist as a store would."""

    def __init__(self, stored: dict[str, bytes] | None = None, **limits) -> None:
        super().__init__(persist=True, **limits)
        self.stored: dict[str, bytes] = dict(stored or {})
        state = decode(self.stored)                  # as the service starts: with what the store holds
        self.out = self.write(self.handle(Recover, state.service, list(state.jobs.values())))

    def write(self, out: list, fail: str = "") -> list:
        """Carry out the Persists in ``out`` (failing with ``fail``); the commands that follows, all of them."""
        done = []
        for command in of(out, Persist):
            if fail:
                done += self.handle(PersistFailed, (*command.records, *command.deleted), fail, command.waiting)
                continue
            self.stored.update({key: encode(record) for key, record in command.records.items()})
            for key in command.deleted:
                self.stored.pop(key, None)
            done += self.write(self.handle(Persisted, command.waiting))
        return [c for c in out if not isinstance(c, Persist)] + done

    def submit(self, *units: UnitSpec, token: str = "secret", **job_fields) -> tuple[str, list]:
        spec = JobSpec("j", units or [unit()], **job_fields)
        out = self.write(self.handle(JobSubmitted, spec, job_document(spec), token))
        (job_id,) = [c.job_id for c in out if isinstance(c, JobAccepted)]
        return job_id, out


def test_a_submission_is_accepted_only_once_it_is_written():
    h = Persisting()
    spec = JobSpec("j", [unit(slots=2, instances=3)])
    out = h.handle(JobSubmitted, spec, job_document(spec), "secret")
    (persist,) = out
    assert persist.waiting == "submit job-0001" and set(persist.records) == {"job.job-0001", SERVICE_KEY}
    assert persist.records["job.job-0001"].state == "running" and persist.records[SERVICE_KEY].next_job == 2
    assert list(h.core.jobs) == [] and h.core.get("job-0001") is None   # not in before it is written
    out = h.handle(Persisted, persist.waiting)
    assert out[0] == JobAccepted("job-0001") and out[-1] == StartAppMaster("job-0001", job_document(spec), "secret")
    assert h.core.job("job-0001").state is RUNNING


def test_a_submission_that_cannot_be_written_is_refused_and_changes_nothing():
    h = Persisting()
    spec = JobSpec("j", [unit()])
    out = h.write(h.handle(JobSubmitted, spec, job_document(spec), "secret"), fail="disk full")
    assert out == [Refused("job-0001", "the job could not be stored, so it was not accepted: disk full")]
    assert list(h.core.jobs) == [] and h.scheduler.jobs == {}
    # the record may have been written nonetheless: the next tick deletes it
    h.stored["job.job-0001"] = b"half"
    h.clock.advance(5)
    (retry,) = of(h.handle(Tick), Persist)
    assert retry.deleted == ("job.job-0001",)
    h.write([retry])
    assert "job.job-0001" not in h.stored
    job_id, _ = h.submit()
    assert job_id == "job-0002"                           # the refused job's id is not given again


def test_a_kill_is_carried_out_once_written_and_refused_if_it_cannot_be():
    h = Persisting()
    job_id, _ = h.submit(unit(slots=2, instances=2))
    h.offer()
    out = h.handle(JobKillRequested, job_id)
    assert [type(c) for c in out] == [Persist] and out[0].records[job_key(job_id)].state == "killed"
    assert h.core.job(job_id).state is RUNNING            # not before it is written
    refused = h.write(out, fail="ZooKeeper did not answer")
    assert refused == [Refused(job_id, "the kill could not be stored, so the job goes on: ZooKeeper did not answer")]
    assert h.core.job(job_id).state is RUNNING and h.unit_status(job_id)["granted"] == 2
    h.clock.advance(5)
    h.write(h.handle(Tick))                                # what is true is written again: running
    assert decode(h.stored).jobs[job_id].state == "running"
    out = h.write(h.handle(JobKillRequested, job_id))
    assert of(out, JobFinished) and h.core.job(job_id).state is KILLED
    assert decode(h.stored).jobs[job_id].state == "killed"


def test_ends_appmasters_framework_ids_and_reported_hosts_are_written_as_they_change():
    h = Persisting(keep_ended=1)
    first, _ = h.submit()
    h.write(h.handle(AppMasterStarted, first, AppMasterRecord("tcp://h:1", 42, "host", "tcp://s:2")))
    assert decode(h.stored).jobs[first].appmaster == AppMasterRecord("tcp://h:1", 42, "host", "tcp://s:2")
    h.write(h.handle(DriverRegistered, framework_id="fw-7"))
    h.write(h.ask(first, protocol.ReportHost, host="bad-host"))
    service = decode(h.stored).service
    assert service.framework_id == "fw-7" and service.global_blacklist == ("bad-host",)
    h.write(h.ask(first, protocol.JobEnded, succeeded=True, reason="done"))
    assert decode(h.stored).jobs[first].state == "succeeded"
    second, _ = h.submit()
    h.write(h.ask(second, protocol.JobEnded, succeeded=False, reason="broken"))
    assert set(decode(h.stored).jobs) == {second}          # the forgotten job's record is deleted too
    # a write that failed is done again at a tick
    h.write(h.handle(DriverRegistered, framework_id="fw-8"), fail="no disk")
    assert decode(h.stored).service.framework_id == "fw-7"
    h.clock.advance(0.5)
    assert of(h.handle(Tick), Persist) == []              # not before the retry delay
    h.clock.advance(1)
    h.write(h.handle(Tick))
    assert decode(h.stored).service.framework_id == "fw-8"


def test_records_read_back_and_a_damaged_job_record_is_skipped():
    service = ServiceRecord("fw", 3, 12, {"default": None, "a": "cpus:2"}, ("h9",), False)
    job = JobRecord("job-0003", {"job": {"name": "j"}}, "t", "running", "", 1.5, None,
                    AppMasterRecord("tcp://h:1", 9, "host", "zk://z/p"), 2, 1)
    state = decode({SERVICE_KEY: encode(service), job_key(job.id): encode(job), "job.job-0004": b"{not json",
                    "job.job-0005": encode(attrs_evolve(job, id="job-0006"))})
    assert state.service == service and dict(state.jobs) == {job.id: job}
    with pytest.raises(HardStateError, match="service"):
        decode({SERVICE_KEY: b'{"format": 1, "framework_id": 5}'})


def attrs_evolve(record, **changes):
    import attrs
    return attrs.evolve(record, **changes)


# ============================================================ recovery
def recovered(stored: dict[str, bytes], **limits) -> Persisting:
    """A new leader's job core over what ``stored`` holds."""
    return Persisting(stored, **limits)


def report(h: Harness, job_id: str, slots: dict, desired: dict, blacklisted=()) -> list:
    units = {name: {"desired": n} for name, n in desired.items()}
    return h.ask(job_id, protocol.Progress, report={"units": units, "slots": slots, "blacklisted": list(blacklisted)})


def claim(slot: Slot) -> list[str]:
    return [slot.unit, slot.hostname, slot.room, slot.agent_id]


def test_a_new_leader_takes_the_jobs_back_and_adopts_the_slots_the_appmaster_reports():
    old = Persisting()
    running, _ = old.submit(unit(slots=3, instances=6))
    ended, _ = old.submit()
    old.write(old.ask(ended, protocol.JobEnded, succeeded=True, reason="done"))
    old.write(old.handle(DriverRegistered, framework_id="fw-1"))
    old.write(old.handle(AppMasterStarted, running, AppMasterRecord("tcp://h:1", 42, "host", "tcp://s:2")))
    slots = launched(old.offer("h1", room="er1"))
    assert len(slots) == 3

    h = recovered(old.stored)                               # old dies; its slots run on
    assert of(h.out, AdoptAppMaster) == [AdoptAppMaster(running, h.core.job(running).document, "secret",
                                                        AppMasterRecord("tcp://h:1", 42, "host", "tcp://s:2"))]
    assert h.core.job(ended).state is SUCCEEDED and h.core.job(running).state is RUNNING
    assert h.core.framework_id == "fw-1" and decode(h.stored).service.generation == 2
    assert h.unit_status(running)["desired"] == 0             # until its AppMaster says
    out = h.handle(DriverRegistered, framework_id="fw-1")
    assert ReconcileTasks(()) in out                         # every task the master knows
    for slot in slots:
        h.update(slot, TaskState.RUNNING)                    # the reconciliation's answers
    assert of(h.offer("h2"), LaunchSlots) == []              # nothing granted before the AppMaster reported
    out = report(h, running, {s.id: claim(s) for s in slots}, {"u": 3})
    assert not of(out, LaunchSlots)
    status = h.unit_status(running)
    assert (status["granted"], status["desired"], status["hosts"]) == (3, 3, {"h1": 3})
    assert all(h.scheduler.holds(s.id) for s in slots)
    # the adopted slots are the job's as before: one released goes back, the others end with the job
    h.ask(running, protocol.ReleaseSlot, slot=slots[0].id)
    assert not h.scheduler.holds(slots[0].id)
    h.clock.advance(ADOPT_WINDOW)
    # every running task was claimed (the released one's worker only gets its release grace)
    assert of(h.handle(Tick), KillSlot) == [KillSlot(slots[0].id, f"its worker did not exit within "
                                                                  f"{RELEASE_GRACE:g}s of its release")]
    out = h.ask(running, protocol.JobEnded, succeeded=False, reason="broken")
    assert {c.slot_id for c in of(out, KillSlot)} == {s.id for s in slots[1:]}


def test_after_the_window_unclaimed_workers_are_killed_and_unconfirmed_slots_lost():
    old = Persisting()
    job_id, _ = old.submit(unit(slots=3, instances=3))
    claimed, unclaimed, gone = launched(old.offer("h1"))
    h = recovered(old.stored)
    h.handle(DriverRegistered, framework_id="fw")
    h.update(claimed, TaskState.RUNNING)
    h.update(unclaimed, TaskState.RUNNING)
    report(h, job_id, {claimed.id: claim(claimed), gone.id: claim(gone)}, {"u": 3})
    assert h.unit_status(job_id)["granted"] == 2
    h.clock.advance(ADOPT_WINDOW - 1)
    assert not of(h.handle(Tick), KillSlot)
    h.clock.advance(1)
    out = h.handle(Tick)
    assert of(out, KillSlot) == [KillSlot(unclaimed.id, "no AppMaster claimed this worker after the failover")]
    assert h.scheduler.holds(claimed.id) and not h.scheduler.holds(gone.id)   # not reported running: lost
    assert h.unit_status(job_id)["granted"] == 1 and h.unit_status(job_id)["desired"] == 3
    # later claims are not adopted any more; new slots carry the new generation's numbers
    report(h, job_id, {gone.id: claim(gone)}, {"u": 3})
    assert not h.scheduler.holds(gone.id)
    new = launched(h.offer("h2"))
    assert [s.id for s in new] == [f"{job_id}.u.2-1", f"{job_id}.u.2-2"]


def test_the_window_never_kills_the_new_leaders_own_workers_again():
    """A worker this leader launched in the window, of a job that ended in it,
    was killed with its job — and again when the window closed, logged as "no
    AppMaster claimed this worker after the failover" (issue 25: noise)."""
    old = Persisting()
    job_id, _ = old.submit(unit(slots=2, instances=2))
    (predecessors,) = launched(old.offer("h1", res="cpus:1;mem:4096"))
    h = recovered(old.stored)
    h.handle(DriverRegistered, framework_id="fw")
    h.update(predecessors, TaskState.RUNNING)
    report(h, job_id, {predecessors.id: claim(predecessors)}, {"u": 2})
    (own,) = launched(h.offer("h2", res="cpus:1;mem:4096"))
    assert own.id == f"{job_id}.u.2-1"
    h.update(own, TaskState.RUNNING)
    out = h.ask(job_id, protocol.JobEnded, succeeded=False, reason="broken")
    assert {c.slot_id for c in of(out, KillSlot)} == {predecessors.id, own.id}
    h.clock.advance(ADOPT_WINDOW)
    assert of(h.handle(Tick), KillSlot) == []     # its TASK_KILLED has not come yet: it was killed once already


def test_a_slot_that_ended_or_belongs_elsewhere_is_never_adopted():
    old = Persisting()
    job_id, _ = old.submit(unit(slots=2, instances=2))
    other, _ = old.submit(unit(slots=1, instances=1))
    ended, alive, _ = launched(old.offer("h1"))   # the third is the other job's
    h = recovered(old.stored)
    h.handle(DriverRegistered, framework_id="fw")
    h.update(ended, TaskState.FINISHED)                     # it ended while nobody listened
    out = report(h, job_id, {ended.id: claim(ended), "job-0002.u.9": ["u", "h1", "", "a-h1"],
                             alive.id: ["nope", "h1", "", "a-h1"], "junk": 5}, {"u": 2})
    assert not of(out, KillSlot) and h.unit_status(job_id)["granted"] == 0
    assert h.unit_status(other)["granted"] == 0


def test_a_task_of_a_job_that_is_not_running_is_killed_at_once_after_a_failover():
    old = Persisting()
    job_id, _ = old.submit(unit(slots=1, instances=1))
    (slot,) = launched(old.offer())
    old.write(old.ask(job_id, protocol.JobEnded, succeeded=True, reason="done"))   # its kill never landed
    h = recovered(old.stored)
    h.handle(DriverRegistered, framework_id="fw")
    assert h.update(slot, TaskState.RUNNING) == [KillSlot(slot.id, "a worker of a job that is not running")]


def test_a_recovered_job_whose_quota_group_is_gone_fails():
    record = JobRecord("job-0001", job_document(JobSpec("j", [unit()], quota_group="gone")), "t", "running")
    h = recovered({SERVICE_KEY: encode(ServiceRecord("fw", 1, 2)), job_key(record.id): encode(record)})
    assert h.core.job("job-0001").state is FAILED and "unknown quota group 'gone'" in h.core.job("job-0001").reason
    assert not of(h.out, AdoptAppMaster) and decode(h.stored).jobs["job-0001"].state == "failed"


def test_job_ids_continue_after_a_recovery():
    old = Persisting()
    for _ in range(3):
        old.submit()
    h = recovered(old.stored)
    assert h.submit()[0] == "job-0004"
    with pytest.raises(FuxiError, match="recovers once"):
        h.handle(Recover, None, [])
