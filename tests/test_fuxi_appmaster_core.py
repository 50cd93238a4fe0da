"""The Fuxi AppMaster core, sans I/O: workers and results in, actions out (seed 002)."""

import json
import logging
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesoslike import Resources
from mesoslike.clock import FakeClock
from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.appmaster_core import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    AppMasterCore,
    AppMasterError,
    SnapshotChanged,
    ToService,
    ToWorker,
)
from mesoslike_frameworks.fuxi.model import BackupPolicy, JobSpec, UnitSpec

SLOT = Resources.parse("cpus:1;mem:64")
NO_BACKUP = BackupPolicy(enabled=False)


def unit(name="map", slots=2, instances=4, **kw):
    return UnitSpec(name, slots, SLOT, command=f"run {name} {{instance}}", instances=instances, **kw)


def job(*units, **kw):
    return JobSpec("j", units or [unit()], **kw)


def core(spec, clock=None, **kw):
    return AppMasterCore("job-1", spec, clock or FakeClock(), **kw)


JOB = "job-1"


# the actions are protocol messages, addressed: how the tests write them
def assign(worker_id, instance, attempt, command, env):
    return ToWorker(worker_id, amp.Assign(instance, attempt, command, env))


def kill(worker_id, instance, attempt, reason):
    return ToWorker(worker_id, amp.Kill(instance, attempt), reason)


def release(worker_id):
    return ToService(protocol.ReleaseSlot(0, JOB, "", worker_id))


def set_desire(unit, slots):
    return ToService(protocol.SetDesire(0, JOB, "", unit, slots))


def avoid(unit, hosts):
    return ToService(protocol.AvoidHosts(0, JOB, "", unit, list(hosts)))


def blacklist(host, reason):
    return ToService(protocol.BlacklistHost(0, JOB, "", host), reason)


def report(host, reason):
    return ToService(protocol.ReportHost(0, JOB, "", host), reason)


def job_ended(succeeded, reason):
    return ToService(protocol.JobEnded(0, JOB, "", succeeded, reason))


def message(action):
    """The protocol message an action carries (SnapshotChanged carries none: itself)."""
    if isinstance(action, ToWorker):
        return action.message
    if isinstance(action, ToService):
        return action.request
    return action


def of(actions, kind):
    """The actions whose message is a ``kind``."""
    return [a for a in actions if isinstance(message(a), kind)]


def assigns(actions):
    """worker id -> (instance, attempt) of the ASSIGNs in ``actions``."""
    return {a.worker_id: (a.message.instance, a.message.attempt) for a in of(actions, amp.Assign)}


# ---------------------------------------------------------------- dispatch
def test_a_worker_gets_the_instance_with_data_on_its_machine_then_its_room_then_any():
    am = core(job(unit(slots=4, instances=4, data=[["hA"], ["hC"], ["hC"], []])))
    assert am.worker_joined("wC", "map", "hC", room="r1") == [
        assign("wC", 1, 1, "run map 1", {"FUXI_INSTANCE": "1", "FUXI_ATTEMPT": "1", "FUXI_DATA_HOSTS": "hC"})]
    # no data on hX; instance 2's data is on hC, seen in room r1: it beats the lower instance 0
    assert assigns(am.worker_joined("wX", "map", "hX", room="r1")) == {"wX": (2, 1)}
    # nothing in r2: the lowest pending instance
    assert assigns(am.worker_joined("wY", "map", "hY", room="r2")) == {"wY": (0, 1)}
    assert assigns(am.worker_joined("wZ", "map", "hA", room="r2")) == {"wZ": (3, 1)}


def test_the_machine_earliest_in_the_data_list_holds_the_most_data():
    am = core(job(unit(slots=4, instances=3, data=[["h2", "h1"], ["h1", "h2"], ["h3", "h1"]])))
    assert assigns(am.worker_joined("w1", "map", "h1")) == {"w1": (1, 1)}
    assert assigns(am.worker_joined("w2", "map", "h1")) == {"w2": (0, 1)}     # ties by position: lowest first
    assert assigns(am.worker_joined("w3", "map", "h1")) == {"w3": (2, 1)}


def test_a_room_learned_later_ranks_the_instances_already_pending():
    am = core(job(unit(slots=4, instances=3, data=[["hA"], ["hB"], ["hB"]])))
    assert assigns(am.worker_joined("w1", "map", "hX", room="r9")) == {"w1": (0, 1)}   # rooms unknown: any
    assert assigns(am.worker_joined("w2", "map", "hB", room="r1")) == {"w2": (1, 1)}   # learns hB -> r1
    assert assigns(am.worker_joined("w3", "map", "hY", room="r1")) == {"w3": (2, 1)}


def test_assign_replaces_instance_in_the_command_and_sets_the_environment():
    am = core(job(unit(instances=2, data=[["h1", "h2"], []])))
    (first,) = am.worker_joined("w1", "map", "h2")
    assert first == assign("w1", 0, 1, "run map 0",
                           {"FUXI_INSTANCE": "0", "FUXI_ATTEMPT": "1", "FUXI_DATA_HOSTS": "h1,h2"})
    (second,) = am.worker_joined("w2", "map", "h3")
    assert second.message.env["FUXI_DATA_HOSTS"] == "" and second.message.command == "run map 1"


# ------------------------------------------------------------------ retries
def test_a_failed_instance_is_retried_until_max_attempts_then_the_job_fails_and_copies_are_killed():
    am = core(job(unit(slots=2, instances=2, max_attempts=3), blacklist_after=10, backup=NO_BACKUP))
    assert assigns(am.worker_joined("w1", "map", "h1")) == {"w1": (0, 1)}
    assert assigns(am.worker_joined("w2", "map", "h2")) == {"w2": (1, 1)}
    out = am.instance_done("w1", 0, 1, False, "disk full")
    assert assigns(out) == {"w1": (0, 2)} and SnapshotChanged() in out
    assert assigns(am.instance_done("w1", 0, 2, False, "disk full")) == {"w1": (0, 3)}
    assert am.progress_report()["units"]["map"]["failed_attempts"] == 2
    out = am.instance_done("w1", 0, 3, False, "disk full")
    assert of(out, protocol.JobEnded) == [job_ended(False, "instance 0 of unit map failed 3 times: disk full")]
    assert of(out, amp.Kill) == [kill("w2", 1, 1, "job failed: instance 0 of unit map failed 3 times: disk full")]
    assert set(of(out, protocol.ReleaseSlot)) == {release("w1"), release("w2")}
    assert out.index(kill("w2", 1, 1, of(out, amp.Kill)[0].reason)) < out.index(release("w2"))
    assert set_desire("map", 0) in out and not of(out, amp.Assign)
    assert am.state == FAILED and am.desired_slots() == {"map": 0} and am.next_wakeup() is None
    report = am.progress_report()
    assert report["state"] == "failed" and "failed 3 times" in report["reason"]
    # the job ended once: later calls do nothing, a late worker is released
    assert am.instance_done("w2", 1, 1, True) == [] and am.tick() == []
    assert am.worker_joined("w3", "map", "h3", running=(1, 1)) == [kill("w3", 1, 1, "job failed"),
                                                                 release("w3")]


def test_a_worker_leaving_does_not_count_a_failure():
    am = core(job(unit(slots=1, instances=1, max_attempts=1), blacklist_after=1))
    am.worker_joined("w1", "map", "h1")
    out = am.worker_left("w1", "preempted")
    assert not of(out, protocol.JobEnded) and not of(out, protocol.BlacklistHost)
    assert am.desired_slots() == {"map": 1} and am.state == RUNNING
    assert am.progress_report()["units"]["map"]["pending"] == 1
    # the next worker runs it as attempt 2: attempts count starts, failures count failed runs
    assert assigns(am.worker_joined("w2", "map", "h1")) == {"w2": (0, 2)}
    assert of(am.instance_done("w2", 0, 2, True), protocol.JobEnded) == [job_ended(True, "all 1 instances finished")]
    assert am.progress_report()["instances"]["failed"] == 0


# --------------------------------------------------------------- blacklists
def test_a_host_failing_blacklist_after_times_is_blacklisted_its_idle_workers_released():
    am = core(job(unit(slots=4, instances=6, max_attempts=5), blacklist_after=2, backup=NO_BACKUP),
              global_report_after=3)
    am.worker_joined("a1", "map", "hA")
    am.worker_joined("a2", "map", "hA")
    am.worker_joined("b1", "map", "hB")
    # a1 gets another instance: 0 failed on hA, and other pending instances can run there
    assert assigns(am.instance_done("a1", 0, 1, False, "bad disk")) == {"a1": (3, 1)}
    out = am.instance_done("a2", 1, 1, False, "bad disk")
    assert of(out, protocol.BlacklistHost) == [blacklist("hA", "2 failed runs of job job-1 on hA")]
    assert release("a2") in out and not of(out, amp.Assign) and not of(out, protocol.ReportHost)
    assert am.progress_report()["blacklisted"] == ["hA"]
    # a1 still runs on hA: it finishes its run, then it is released too; the third failure reports the host
    out = am.instance_done("a1", 3, 1, False, "bad disk")
    assert of(out, protocol.ReportHost) == [report("hA", "3 failed runs of job job-1 on hA")]
    assert release("a1") in out and not of(out, amp.Assign)
    assert am.worker_joined("a3", "map", "hA") == [release("a3")]
    assert am.desired_slots() == {"map": 4}          # still wanted: the scheduler grants elsewhere
    assert assigns(am.worker_joined("c1", "map", "hC")) == {"c1": (0, 2)}


def test_global_report_after_defaults_to_twice_blacklist_after():
    am = core(job(unit(slots=3, instances=3, max_attempts=9), blacklist_after=1, backup=NO_BACKUP))
    assert am.global_report_after == 2
    for w in ("a1", "a2", "a3"):
        am.worker_joined(w, "map", "hA")
    out = am.instance_done("a1", 0, 1, False)
    assert of(out, protocol.BlacklistHost) and not of(out, protocol.ReportHost)
    out = am.instance_done("a2", 1, 1, False)
    assert of(out, protocol.ReportHost) == [report("hA", "2 failed runs of job job-1 on hA")]
    assert not of(am.instance_done("a3", 2, 1, False), protocol.ReportHost)      # once


def test_a_blacklisted_host_is_used_again_after_blacklist_seconds_and_needs_fresh_failures():
    # seed 000: the job tells the scheduler to avoid the machine "for a while"
    # (before: for good); the scheduler forgets the entry after as long
    clock = FakeClock()
    am = core(job(unit(slots=3, instances=6, max_attempts=9), blacklist_after=2, blacklist_seconds=30,
                  backup=NO_BACKUP), clock, global_report_after=99)
    am.worker_joined("a1", "map", "hA")
    am.worker_joined("a2", "map", "hA")
    am.instance_done("a1", 0, 1, False)
    out = am.instance_done("a2", 1, 1, False)
    assert of(out, protocol.BlacklistHost) and am.progress_report()["blacklisted"] == ["hA"]
    clock.advance(29)
    assert am.worker_joined("a3", "map", "hA") == [release("a3")]
    clock.advance(1)
    assert am.progress_report()["blacklisted"] == []
    out = am.worker_joined("a4", "map", "hA")
    assert list(assigns(out).values()) and am.snapshot()["blacklisted"] == []
    (instance, attempt), = assigns(out).values()
    assert not of(am.instance_done("a4", instance, attempt, False), protocol.BlacklistHost)   # 1 of 2 again


# ------------------------------------------------------------------ backups
def four_running(clock, backup=BackupPolicy(), instances=4):
    am = core(job(unit(slots=instances, instances=instances), backup=backup, blacklist_after=10), clock)
    for i in range(instances):
        assert assigns(am.worker_joined(f"w{i}", "map", f"h{i}")) == {f"w{i}": (i, 1)}
    return am


def test_no_backup_before_min_finished_fraction():
    clock = FakeClock()
    am = four_running(clock)
    clock.advance(10)
    am.instance_done("w0", 0, 1, True)          # 1/4 < 0.5
    assert am.next_wakeup() is None
    clock.advance(1000)
    assert am.tick() == [] and am.desired_slots() == {"map": 3}


def test_a_straggler_gets_one_backup_on_another_host_and_the_first_to_finish_wins():
    clock = FakeClock()
    am = four_running(clock, BackupPolicy(slower_factor=2.0))   # the default is 1 since issue 16
    clock.advance(10)
    for i in range(3):
        am.instance_done(f"w{i}", i, 1, True)    # average 10 s
    assert am.desired_slots() == {"map": 1}
    assert am.next_wakeup() == 20.0              # 2 x the average
    clock.advance(9.5)
    assert am.tick() == []
    clock.advance(0.5)
    # no idle worker: ask for one more slot, not on the straggler's machine
    assert am.tick() == [avoid("map", ("h3",)), set_desire("map", 2)]
    assert am.worker_joined("x3", "map", "h3") == [release("x3")]     # granted there anyway: useless
    out = am.worker_joined("x5", "map", "h5")
    assert assigns(out) == {"x5": (3, 2)} and avoid("map", ()) in out   # no backup waits any more
    assert am.progress_report()["instances"]["backups"] == 1
    clock.advance(100)
    assert am.tick() == []                       # ONE backup
    out = am.instance_done("x5", 3, 2, True)
    assert out[0] == kill("w3", 3, 1, "instance 3 finished on another copy")
    assert of(out, protocol.JobEnded) == [job_ended(True, "all 4 instances finished")]
    assert set(of(out, protocol.ReleaseSlot)) == {release("w3"), release("x5")}
    assert am.state == SUCCEEDED


def backed_up(clock):
    """Instances 0-2 finished after 10 s; instance 3 (w3 on h3) straggles and has its backup on x5 (h5)."""
    am = four_running(clock)
    clock.advance(10)
    for i in range(3):
        am.instance_done(f"w{i}", i, 1, True)
    clock.advance(10)
    am.tick()
    assert assigns(am.worker_joined("x5", "map", "h5")) == {"x5": (3, 2)}
    return am


def test_when_the_original_finishes_first_the_backup_is_killed():
    am = backed_up(FakeClock())
    out = am.instance_done("w3", 3, 1, True)
    assert out[0] == kill("x5", 3, 2, "instance 3 finished on another copy")
    assert am.instance_done("x5", 3, 2, True) == []             # the loser's late result is stale


def test_a_failed_copy_does_not_restart_an_instance_whose_other_copy_runs():
    am = backed_up(FakeClock())
    out = am.instance_done("x5", 3, 2, False, "oops")
    assert out == [release("x5"), SnapshotChanged(), set_desire("map", 1)]
    report = am.progress_report()["units"]["map"]
    assert report["pending"] == 0 and report["running"] == 1 and report["failed_attempts"] == 1


def test_an_idle_worker_on_another_host_takes_a_waiting_backup():
    clock = FakeClock()
    am = four_running(clock)
    clock.advance(10)
    am.instance_done("w0", 0, 1, True)
    am.instance_done("w1", 1, 1, True)           # 2/4 finished, average 10 s
    clock.advance(10)
    assert am.tick() == [avoid("map", ("h2", "h3")), set_desire("map", 4)]    # instances 2 and 3 straggle
    out = am.instance_done("w2", 2, 1, True)     # w2 (on h2) is free: it backs up instance 3 (on h3)
    assert assigns(out) == {"w2": (3, 2)}
    assert out[-1] == set_desire("map", 2)


def test_by_default_a_straggler_is_an_instance_running_longer_than_the_average():
    # seed 002: "运行时间超过其他Instance的平均运行时间"; before: 2x the average
    clock = FakeClock()
    am = four_running(clock)
    clock.advance(10)
    for i in range(3):
        am.instance_done(f"w{i}", i, 1, True)    # average 10 s
    assert am.next_wakeup() == 10.0              # 1 x the average: now
    assert am.tick() == [avoid("map", ("h3",)), set_desire("map", 2)]


def test_copies_progressing_at_the_average_rate_are_not_slow():
    # seed 002: a rate *below* the average; at the default factor 1, "at or
    # below" would back up every copy when all progress alike
    clock = FakeClock()
    am = core(job(unit(slots=4, instances=4), backup=BackupPolicy(min_finished_fraction=0.25),
                  blacklist_after=10), clock)
    assert assigns(am.worker_joined("w0", "map", "h0")) == {"w0": (0, 1)}
    clock.advance(15)
    for i in (1, 2, 3):
        assert assigns(am.worker_joined(f"w{i}", "map", f"h{i}")) == {f"w{i}": (i, 1)}
    clock.advance(5)
    am.instance_done("w0", 0, 1, True)           # average 20 s; the others ran 5 s
    for i in (1, 2, 3):
        am.progress(f"w{i}", i, 1, 0.25)         # all at the average rate
    assert am.tick() == []
    am.progress("w3", 3, 1, 0.1)                 # now below it
    assert am.tick() == [avoid("map", ("h3",)), set_desire("map", 4)]


def test_a_slow_progress_rate_triggers_a_backup():
    clock = FakeClock()
    am = four_running(clock, BackupPolicy(min_finished_fraction=0.25, slower_factor=2.0))
    clock.advance(10)
    am.instance_done("w0", 0, 1, True)           # average 10 s: by runtime, nobody straggles before 20 s
    clock.advance(2)
    am.progress("w1", 1, 1, 0.9)
    am.progress("w2", 2, 1, 0.9)
    am.progress("w3", 3, 1, 0.1)                 # 0.1/12 s against an average of (0.9+0.9+0.1)/3/12 s
    assert am.next_wakeup() == pytest.approx(13.0)      # a rate check; not the runtime limit (20)
    assert am.tick() == [avoid("map", ("h3",)), set_desire("map", 4)]
    assert assigns(am.worker_joined("x9", "map", "h9")) == {"x9": (3, 2)}


def test_backups_disabled_never_back_up():
    clock = FakeClock()
    am = four_running(clock, NO_BACKUP)
    clock.advance(10)
    for i in range(3):
        am.instance_done(f"w{i}", i, 1, True)
    clock.advance(1000)
    assert am.tick() == [] and am.next_wakeup() is None


def test_runs_shorter_than_min_runtime_are_never_backed_up():
    clock = FakeClock()
    am = four_running(clock, BackupPolicy(min_runtime=60))
    clock.advance(1)
    for i in range(3):
        am.instance_done(f"w{i}", i, 1, True)
    assert am.next_wakeup() == 60.0
    clock.advance(58)
    assert am.tick() == []
    clock.advance(1)
    assert am.tick() == [avoid("map", ("h3",)), set_desire("map", 2)]


# ------------------------------------------------------------- dependencies
def test_a_unit_after_another_wants_nothing_until_that_one_finished():
    am = core(job(unit("map", slots=2, instances=2), unit("reduce", slots=2, instances=3, after=["map"])))
    assert am.desired_slots() == {"map": 2, "reduce": 0}
    am.worker_joined("m1", "map", "h1")
    am.worker_joined("m2", "map", "h2")
    assert am.worker_joined("r1", "reduce", "h3") == [release("r1")]
    out = am.instance_done("m1", 0, 1, True)
    assert out == [release("m1"), SnapshotChanged(), set_desire("map", 1)]
    out = am.instance_done("m2", 1, 1, True)
    assert set_desire("reduce", 2) in out and set_desire("map", 0) in out
    assert am.desired_slots() == {"map": 0, "reduce": 2}
    assert assigns(am.worker_joined("r2", "reduce", "h3")) == {"r2": (0, 1)}


# --------------------------------------------------------- incremental desire
def test_desire_shrinks_and_idle_workers_are_released_as_instances_run_out():
    am = core(job(unit(slots=2, instances=4)))
    assert am.desired_slots() == {"map": 2}
    assert assigns(am.worker_joined("w1", "map", "h1")) == {"w1": (0, 1)}
    assert assigns(am.worker_joined("w2", "map", "h2")) == {"w2": (1, 1)}
    assert am.worker_joined("w3", "map", "h3") == [release("w3")]     # beyond the unit's 2 slots
    assert am.instance_done("w1", 0, 1, True) == [
        assign("w1", 2, 1, "run map 2", {"FUXI_INSTANCE": "2", "FUXI_ATTEMPT": "1", "FUXI_DATA_HOSTS": ""}),
        SnapshotChanged()]
    assert assigns(am.instance_done("w2", 1, 1, True)) == {"w2": (3, 1)}
    assert am.instance_done("w1", 2, 1, True) == [release("w1"), SnapshotChanged(), set_desire("map", 1)]
    out = am.instance_done("w2", 3, 1, True)
    assert out == [job_ended(True, "all 4 instances finished"), release("w2"), SnapshotChanged(),
                   set_desire("map", 0)]
    assert am.progress_report()["instances"] == {"done": 4, "total": 4, "running": 0, "failed": 0, "backups": 0}


# ---------------------------------------------------------------- snapshots
def mid_job(clock):
    """Instances 0 and 1 finished (0 after a failure on h0, retried on h1); 2 runs on w0 (h0) and 3 on w1
    (h1), both attempt 1; then the AppMaster restarts from a JSON snapshot and no worker has rejoined yet."""
    spec = job(unit(slots=2, instances=4, max_attempts=3), blacklist_after=2, backup=NO_BACKUP)
    am = core(spec, clock)
    am.worker_joined("w0", "map", "h0")
    am.worker_joined("w1", "map", "h1")
    clock.advance(1)
    assert assigns(am.instance_done("w0", 0, 1, False, "flaky")) == {"w0": (2, 1)}
    assert assigns(am.instance_done("w1", 1, 1, True)) == {"w1": (0, 2)}
    assert assigns(am.instance_done("w1", 0, 2, True)) == {"w1": (3, 1)}
    snapshot = json.loads(json.dumps(am.snapshot()))
    return spec, AppMasterCore("job-1", spec, clock, snapshot=snapshot)


def test_a_restored_core_keeps_finished_instances_counts_and_blacklists():
    clock = FakeClock()
    _, am = mid_job(clock)
    report = am.progress_report()["units"]["map"]
    assert (report["done"], report["pending"], report["unknown"], report["failed_attempts"]) == (2, 0, 2, 1)
    assert am.desired_slots() == {"map": 2}
    assert am.snapshot()["host_failures"] == {"h0": 1}
    assert am.next_wakeup() == clock.now() + 5.0


def test_a_worker_rejoining_with_its_running_instance_keeps_it():
    clock = FakeClock()
    _, am = mid_job(clock)
    assert am.worker_joined("w0", "map", "h0", running=(2, 1)) == []
    assert am.worker_joined("w0", "map", "h0", running=(2, 1)) == []          # idempotent
    # w0 is kept (idle) while instance 3 is unknown: it may turn pending
    assert am.instance_done("w0", 2, 1, True) == [SnapshotChanged(), set_desire("map", 1)]
    assert am.progress_report()["units"]["map"]["workers"] == 1


def test_a_worker_rejoining_with_finished_results_records_them():
    clock = FakeClock()
    _, am = mid_job(clock)
    # w1 finished 3 while nobody listened; it is kept (idle) since instance 2 may turn pending
    assert am.worker_joined("w1", "map", "h1", finished=[(3, 1, True, "")]) == [SnapshotChanged(),
                                                                                 set_desire("map", 1)]
    assert am.progress_report()["units"]["map"]["done"] == 3
    out = am.worker_joined("w0", "map", "h0", finished=[(2, 1, False, "oom")])
    assert assigns(out) == {"w1": (2, 2)} and release("w0") in out       # the failure counted: retried
    assert am.snapshot()["units"]["map"]["failures"] == {"0": 1, "2": 1}
    assert am.snapshot()["host_failures"] == {"h0": 2} and of(out, protocol.BlacklistHost)


def test_running_but_unreported_instances_go_back_to_pending_after_rejoin_grace():
    clock = FakeClock()
    _, am = mid_job(clock)
    am.worker_joined("w0", "map", "h0", running=(2, 1))
    assert am.worker_joined("n1", "map", "h9") == []     # kept idle: instance 3 may still be reported
    clock.advance(4.9)
    assert am.tick() == []
    clock.advance(0.1)
    assert am.tick() == [assign("n1", 3, 2, "run map 3", {"FUXI_INSTANCE": "3", "FUXI_ATTEMPT": "2",
                                                           "FUXI_DATA_HOSTS": ""})]
    # w1 comes back late with attempt 1 of instance 3: kept as a second copy; the first to finish wins
    assert am.worker_joined("w1", "map", "h1", running=(3, 1)) == []
    out = am.instance_done("w1", 3, 1, True)
    assert out[0] == kill("n1", 3, 2, "instance 3 finished on another copy")


def test_finished_instances_are_never_assigned_again_after_a_restore():
    clock = FakeClock()
    _, am = mid_job(clock)
    clock.advance(10)
    assert am.tick() == []                               # 2 and 3 pending again (no worker yet)
    out = am.worker_joined("w0", "map", "h0", running=(0, 2))
    assert out[0] == kill("w0", 0, 2, "instance 0 already finished")
    seen = [a.message.instance for a in of(out, amp.Assign)]
    for n in range(4):
        seen += [a.message.instance for a in of(am.worker_joined(f"n{n}", "map", f"h{n}"), amp.Assign)]
    assert sorted(seen) == [2, 3]
    assert am.snapshot()["units"]["map"]["done"] == [[0, 2]]


def test_a_snapshot_of_another_job_is_refused():
    clock = FakeClock()
    spec, am = mid_job(clock)
    snapshot = am.snapshot()
    with pytest.raises(AppMasterError, match="units"):
        AppMasterCore("job-1", job(unit("other")), clock, snapshot=snapshot)
    with pytest.raises(AppMasterError, match="instances"):
        AppMasterCore("job-1", job(unit(instances=5, slots=2)), clock, snapshot=snapshot)
    for damaged in ({"units": {"map": {"instances": 4, "done": [[3, 9]]}}},
                    {"units": {"map": {"instances": 4, "starts": {"x": 1}}}},
                    {"units": {"map": {"instances": 4, "finished_seconds": "nan"}}},
                    {"units": {"map": [1, 2]}}, {"units": None}, {"format": 99}):
        with pytest.raises(AppMasterError):
            AppMasterCore("job-1", spec, clock, snapshot={"format": 1, **damaged})


def test_a_restored_finished_job_stays_finished():
    clock = FakeClock()
    am = core(job(unit(slots=1, instances=1)), clock)
    am.worker_joined("w", "map", "h")
    am.instance_done("w", 0, 1, True)
    again = AppMasterCore("job-1", am.job, clock, snapshot=json.loads(json.dumps(am.snapshot())))
    assert again.state == SUCCEEDED and again.desired_slots() == {"map": 0}
    assert again.worker_joined("w2", "map", "h") == [release("w2")]


# ---------------------------------------------------------------- bad calls
def test_bad_calls_change_nothing_and_do_not_raise(caplog):
    clock = FakeClock()
    am = core(job(unit(slots=2, instances=3)), clock)
    am.worker_joined("w1", "map", "h1")
    before = (am.snapshot(), am.progress_report(), am.desired_slots())
    caplog.set_level(logging.INFO, logger="mesoslike_frameworks.fuxi.appmaster")
    assert am.instance_done("nobody", 0, 1, True) == []
    assert am.progress("nobody", 0, 1, 0.5) == []
    assert am.worker_left("nobody", "lost") == []
    assert am.instance_done("w1", 0, 2, True) == []           # stale attempt
    assert am.instance_done("w1", 1, 1, False) == []          # not its instance
    assert am.instance_done("w1", "0", 1, True) == []
    assert am.progress("w1", 0, 1, math.nan) == []
    assert am.progress("w1", 0, 1, "half") == []
    assert am.worker_joined("w1", "map", "h1") == []          # idempotent
    assert am.worker_joined("w9", "nosuchunit", "h1") == [release("w9")]
    assert (am.snapshot(), am.progress_report(), am.desired_slots()) == before
    assert "unknown worker 'nobody'" in caplog.text and "stale" in caplog.text


def test_a_restarted_runtime_restates_every_desire_and_an_end_the_service_may_not_know():
    am = core(job(unit("map", slots=1, instances=1), unit("reduce", slots=1, after=["map"]), blacklist_after=10))
    assert am.restate() == [set_desire("map", 1), set_desire("reduce", 0)]
    am.worker_joined("w1", "map", "h1")
    ended = am.instance_done("w1", 0, 1, False, "x") + am.instance_done("w1", 0, 2, False, "x") \
        + am.instance_done("w1", 0, 3, False, "boom")
    assert of(ended, protocol.JobEnded) == [job_ended(False, "instance 0 of unit map failed 3 times: boom")]
    again = core(am.job, snapshot=am.snapshot())
    assert again.restate() == [set_desire("map", 0), set_desire("reduce", 0),
                               job_ended(False, "instance 0 of unit map failed 3 times: boom")]


def test_nonsense_from_a_rejoining_worker_is_ignored():
    am = core(job(unit(slots=2, instances=2)))
    out = am.worker_joined("w1", "map", "h1", running=(7, 1), finished=[(9, 1, True, ""), ("x",), None])
    assert assigns(out) == {"w1": (0, 1)}
    assert am.progress_report()["units"]["map"]["done"] == 0


# ---------------------------------------------------------------- property
HOSTS = ["h0", "h1", "h2", "h3"]

jobs = st.builds(
    lambda n_map, map_slots, n_red, red_slots, attempts, blacklist, fraction, data: job(
        unit("map", slots=map_slots, instances=n_map, max_attempts=attempts,
             data=[data[i % len(data)] for i in range(n_map)] if data else ()),
        *([unit("reduce", slots=red_slots, instances=n_red, max_attempts=attempts, after=["map"])] if n_red else []),
        blacklist_after=blacklist, backup=BackupPolicy(min_finished_fraction=fraction, min_runtime=0.5)),
    st.integers(1, 6), st.integers(1, 3), st.integers(0, 3), st.integers(1, 2), st.integers(1, 3),
    st.integers(1, 3), st.sampled_from([0.0, 0.5, 1.0]),
    st.lists(st.lists(st.sampled_from(HOSTS), max_size=2), max_size=3))

steps = st.lists(st.one_of(
    st.tuples(st.just("join"), st.sampled_from(["map", "reduce"]), st.sampled_from(HOSTS)),
    st.tuples(st.just("leave"), st.integers(0, 20)),
    st.tuples(st.just("progress"), st.integers(0, 20), st.floats(0, 1)),
    st.tuples(st.just("done"), st.integers(0, 20), st.booleans()),
    st.tuples(st.just("tick"), st.sampled_from([0.0, 1.0, 3.0, 10.0])),
    st.tuples(st.just("restart"), st.booleans()),
), min_size=5, max_size=60)


class Harness:
    """Drives an AppMasterCore like a runtime would and checks every action."""

    def __init__(self, spec):
        self.spec = spec
        self.clock = FakeClock()
        self.am = AppMasterCore("job-1", spec, self.clock)
        self.workers = {}              # worker id -> [unit, host, (instance, attempt) | None]
        self.finished = set()          # (unit, instance)
        self.ended = 0
        self.seq = 0
        self.saved = self.am.snapshot()

    def apply(self, actions):
        for action in actions:
            sent = message(action)
            if isinstance(action, ToService):
                assert (sent.id, sent.job_id, sent.token) == (0, "job-1", ""), action   # the runtime's to fill in
            if isinstance(sent, amp.Assign):
                assert action.worker_id in self.workers, action
                worker = self.workers[action.worker_id]
                assert worker[2] is None, f"{action} to a busy worker {worker}"
                assert (worker[0], sent.instance) not in self.finished, action
                worker[2] = (sent.instance, sent.attempt)
                hosts = [w[1] for w in self.workers.values() if w[0] == worker[0] and w[2] is not None
                         and w[2][0] == sent.instance]
                assert len(hosts) <= 2, action
                assert len(hosts) == 1 or len(set(hosts)) == 2, f"{action}: a backup on the same host"
            elif isinstance(sent, amp.Kill):
                worker = self.workers[action.worker_id]
                assert worker[2] == (sent.instance, sent.attempt), action
                worker[2] = None
            elif isinstance(sent, protocol.ReleaseSlot):
                worker = self.workers.pop(sent.slot)
                assert worker[2] is None, action
            elif isinstance(sent, protocol.JobEnded):
                self.ended += 1
                assert self.ended == 1
            elif isinstance(sent, SnapshotChanged):
                self.saved = json.loads(json.dumps(self.am.snapshot()))
            elif isinstance(sent, protocol.SetDesire):
                slots = self.spec.unit(sent.unit).slots
                assert 0 <= sent.slots <= slots and self.am.desired_slots()[sent.unit] == sent.slots

    def pick(self, index):
        ids = sorted(self.workers)
        return ids[index % len(ids)] if ids else None

    def join(self, unit, host):
        if unit not in {u.name for u in self.spec.units}:
            return
        self.seq += 1
        worker_id = f"w{self.seq}"
        self.workers[worker_id] = [unit, host, None]
        self.apply(self.am.worker_joined(worker_id, unit, host))

    def done(self, worker_id, ok):
        unit, _, run = self.workers[worker_id]
        if run is None:
            return
        out = self.am.instance_done(worker_id, run[0], run[1], ok)
        if ok:
            assert (unit, run[0]) not in self.finished, f"instance {run[0]} of {unit} finished twice"
            self.finished.add((unit, run[0]))
        self.workers[worker_id][2] = None
        self.promote(worker_id)
        self.apply(out)

    def promote(self, worker_id):
        """The worker's run ended: what it starts next (with a queue)."""

    def restart(self, report_all):
        self.am = AppMasterCore("job-1", self.spec, self.clock, snapshot=self.saved)
        for worker_id, (unit, host, run) in sorted(self.workers.items()):
            if run is not None and (report_all or int(worker_id[1:]) % 2):
                self.apply(self.am.worker_joined(worker_id, unit, host, running=run))
            elif run is None:
                self.apply(self.am.worker_joined(worker_id, unit, host))
            else:
                del self.workers[worker_id]      # never comes back

    def step(self, step):
        kind = step[0]
        if kind == "join":
            self.join(step[1], step[2])
        elif kind == "tick":
            self.clock.advance(step[1])
            self.apply(self.am.tick())
        elif kind == "restart":
            self.restart(step[1])
        else:
            worker_id = self.pick(step[1])
            if worker_id is None:
                return
            if kind == "leave":
                del self.workers[worker_id]
                self.apply(self.am.worker_left(worker_id, "lost"))
            elif kind == "progress":
                run = self.workers[worker_id][2]
                if run is not None:
                    assert self.am.progress(worker_id, run[0], run[1], step[2]) == []
            else:
                self.clock.advance(0.5)
                self.done(worker_id, step[2])


def drain(h, spec):
    """Fresh hosts, every run succeeds: the job must end, exactly once, every worker released."""
    for n in range(200):
        if h.am.state != RUNNING:
            break
        for name, wanted in h.am.desired_slots().items():
            held = sum(1 for w in h.workers.values() if w[0] == name)
            for _ in range(max(0, wanted - held)):
                h.join(name, f"d{n}")
        for worker_id in sorted(h.workers):
            if worker_id in h.workers:
                h.done(worker_id, True)
        h.clock.advance(5.0)
        h.apply(h.am.tick())
    assert h.am.state in (SUCCEEDED, FAILED)
    assert h.ended == 1
    assert not h.workers
    if h.am.state == SUCCEEDED:
        assert h.finished == {(u.name, i) for u in spec.units for i in range(u.instance_count)}


def test_a_failed_instance_is_retried_on_another_machine_when_one_is_free():
    am = core(job(unit(slots=2, instances=3, max_attempts=3), blacklist_after=10, backup=NO_BACKUP))
    am.worker_joined("w1", "map", "h1")
    am.worker_joined("w2", "map", "h2")
    # instance 0 fails on h1: h1's worker takes instance 2 instead, and 0 waits for another machine
    assert assigns(am.instance_done("w1", 0, 1, False, "bad disk")) == {"w1": (2, 1)}
    assert assigns(am.instance_done("w2", 1, 1, True)) == {"w2": (0, 2)}
    # with no other machine it may run where it failed before
    am2 = core(job(unit(slots=1, instances=1, max_attempts=3), blacklist_after=10, backup=NO_BACKUP))
    am2.worker_joined("w1", "map", "h1")
    assert assigns(am2.instance_done("w1", 0, 1, False, "flaky")) == {"w1": (0, 2)}


# ------------------------------------------------------------ a queue of two
def queued_core(clock, slots=2, instances=8, max_attempts=3, **kw):
    """A core that queues (instances under 1 s on average), its two workers w1 (h1), w2 (h2) each running one,
    and instance 0 finished on w1 in 0.1 s: w1 runs 2 and holds 3 queued."""
    am = core(job(unit(slots=slots, instances=instances, max_attempts=max_attempts), blacklist_after=10,
                  backup=NO_BACKUP, **kw),
              clock, queue_below=1.0)
    assert assigns(am.worker_joined("w1", "map", "h1")) == {"w1": (0, 1)}   # nothing finished yet: no queue
    assert assigns(am.worker_joined("w2", "map", "h2")) == {"w2": (1, 1)}
    clock.advance(0.1)
    out = am.instance_done("w1", 0, 1, True)
    assert [(a.worker_id, a.message.instance) for a in of(out, amp.Assign)] == [("w1", 2), ("w1", 3)]
    assert [a.reason for a in of(out, amp.Assign)] == ["", "queued"]
    return am


def test_a_worker_gets_its_next_instance_queued_while_instances_are_short():
    clock = FakeClock()
    am = queued_core(clock)
    report = am.progress_report()["units"]["map"]
    assert (report["done"], report["running"], report["pending"]) == (1, 3, 4)   # queued counts as handed out
    assert am.desired_slots() == {"map": 2}
    # w1's running instance ends: its queued one runs (no ASSIGN for it) and the next one is queued
    clock.advance(0.1)
    out = am.instance_done("w1", 2, 1, True)
    assert [(a.worker_id, a.message.instance, a.reason) for a in of(out, amp.Assign)] == [("w1", 4, "queued")]
    # w2 gets its own queue at its next run
    assert [(a.worker_id, a.message.instance) for a in of(am.instance_done("w2", 1, 1, True), amp.Assign)] == [
        ("w2", 5), ("w2", 6)]
    # fewer pending instances than workers: nothing more is queued, the last go to whichever worker is free
    assert [(a.worker_id, a.message.instance) for a in of(am.instance_done("w1", 3, 1, True), amp.Assign)] == []
    assert assigns(am.instance_done("w1", 4, 1, True)) == {"w1": (7, 1)}
    for worker_id, instance in (("w2", 5), ("w2", 6), ("w1", 7)):
        out = am.instance_done(worker_id, instance, 1, True)
    assert of(out, protocol.JobEnded) == [job_ended(True, "all 8 instances finished")]


def test_no_queue_for_instances_longer_than_queue_below_nor_by_default():
    clock = FakeClock()
    am = core(job(unit(slots=1, instances=4), backup=NO_BACKUP), clock, queue_below=1.0)
    am.worker_joined("w1", "map", "h1")
    clock.advance(1.0)
    assert assigns(am.instance_done("w1", 0, 1, True)) == {"w1": (1, 1)}
    clock.advance(2.0)
    assert len(of(am.instance_done("w1", 1, 1, True), amp.Assign)) == 1   # 1.5 s on average
    plain = core(job(unit(slots=1, instances=4), backup=NO_BACKUP), clock)
    plain.worker_joined("w1", "map", "h1")
    assert len(of(plain.instance_done("w1", 0, 1, True), amp.Assign)) == 1


def test_a_queued_instance_of_a_lost_worker_goes_back_to_pending_once_without_a_failure():
    clock = FakeClock()
    am = queued_core(clock)
    out = am.worker_left("w1", "agent lost")
    assert not of(out, amp.Kill) and not of(out, protocol.JobEnded)
    report = am.progress_report()["units"]["map"]
    assert (report["running"], report["pending"], report["failed_attempts"]) == (1, 6, 0)
    assert am.snapshot()["units"]["map"]["running"] == [[1, 2]]
    # both come back as their next attempts, on a new worker: run and queued
    assert [(a.message.instance, a.message.attempt, a.reason) for a in of(am.worker_joined("w3", "map", "h3"),
                                                                           amp.Assign)] == [(2, 2, ""), (3, 2, "queued")]
    assert [(a.message.instance, a.message.attempt) for a in of(am.instance_done("w3", 2, 2, True), amp.Assign)] == [
        (4, 1)]
    assert am.snapshot()["units"]["map"]["failures"] == {}


def test_a_result_of_the_queued_copy_before_the_running_ones_is_kept_and_so_is_the_running_ones():
    clock = FakeClock()
    am = queued_core(clock)
    # the worker's DONE of instance 2 was lost on the way; it ran 3 and says so first (its resend follows)
    out = am.instance_done("w1", 3, 1, True)
    assert SnapshotChanged() in out and not of(out, amp.Assign)
    assert am.progress_report()["units"]["map"]["done"] == 2
    out = am.instance_done("w1", 2, 1, True)
    assert am.progress_report()["units"]["map"]["done"] == 3
    assert [a.message.instance for a in of(out, amp.Assign)] == [4, 5]


def test_a_queued_instance_is_checkpointed_as_running_and_adopted_from_a_rejoining_worker():
    clock = FakeClock()
    am = queued_core(clock)
    journal = am.journal()
    assert ["i", "map", 3, 0, 1, 0, 1] in journal        # queued: handed out, as a running one is
    again = AppMasterCore("job-1", am.job, clock, snapshot=json.loads(json.dumps(am.snapshot())), queue_below=1.0)
    assert again.progress_report()["units"]["map"]["unknown"] == 3
    assert again.worker_joined("w1", "map", "h1", running=(2, 1), queued=(3, 1)) == []
    assert again.worker_joined("w2", "map", "h2", running=(1, 1)) == []
    report = again.progress_report()["units"]["map"]
    assert (report["unknown"], report["running"], report["pending"]) == (0, 3, 4)
    # a queued one it holds that another runs now is killed; a queued one without a run is running
    third = AppMasterCore("job-1", am.job, clock, snapshot=json.loads(json.dumps(am.snapshot())), queue_below=1.0)
    assert third.worker_joined("w1", "map", "h1", queued=(3, 1)) == []
    assert third.worker_joined("w2", "map", "h2", running=(1, 1), queued=(3, 1)) == [
        kill("w2", 3, 1, "instance 3 is already handed out")]
    out = third.instance_done("w1", 3, 1, True)
    assert SnapshotChanged() in out


def test_the_end_of_a_job_kills_queued_instances_too():
    clock = FakeClock()
    am = queued_core(clock, max_attempts=1)
    out = am.instance_done("w2", 1, 1, False, "boom")
    assert {(a.worker_id, a.message.instance) for a in of(out, amp.Kill)} >= {("w1", 2), ("w1", 3)}
    assert am.snapshot()["units"]["map"]["running"] == [] and am.state == FAILED


class QueueHarness(Harness):
    """The harness's promises with a queue of two: a worker holds one run and one queued; a KILL of its run
    starts the queued one, a KILL of the queued one drops it; a rejoining worker reports both."""

    def __init__(self, spec):
        super().__init__(spec)
        self.am = AppMasterCore("job-1", spec, self.clock, queue_below=10.0)
        self.queued = {}               # worker id -> (instance, attempt)

    def apply(self, actions):
        killing = set()   # workers whose run these actions killed: still holding their queued one, for now
        for action in actions:
            sent = message(action)
            if isinstance(sent, amp.Assign):
                assert action.worker_id not in killing, f"{action}: a third run while the killed one ends"
            if isinstance(sent, amp.Assign) and self.workers.get(action.worker_id, [None, None, None])[2] is not None:
                assert action.worker_id not in self.queued, f"{action}: a third run"
                assert (self.workers[action.worker_id][0], sent.instance) not in self.finished, action
                self.queued[action.worker_id] = (sent.instance, sent.attempt)
                continue
            if isinstance(sent, amp.Kill) and self.queued.get(action.worker_id) == (sent.instance, sent.attempt):
                del self.queued[action.worker_id]
                continue
            if isinstance(sent, protocol.ReleaseSlot):
                assert sent.slot not in self.queued, action
            super().apply([action])
            if isinstance(sent, amp.Kill):
                if action.worker_id in self.queued:
                    killing.add(action.worker_id)
                self.promote(action.worker_id)

    def promote(self, worker_id):
        if worker_id in self.queued and worker_id in self.workers and self.workers[worker_id][2] is None:
            self.workers[worker_id][2] = self.queued.pop(worker_id)

    def restart(self, report_all):
        self.am = AppMasterCore("job-1", self.spec, self.clock, snapshot=self.saved, queue_below=10.0)
        for worker_id, (unit, host, run) in sorted(self.workers.items()):
            queued = self.queued.get(worker_id)
            if run is not None and (report_all or int(worker_id[1:]) % 2):
                self.apply(self.am.worker_joined(worker_id, unit, host, running=run, queued=queued))
            elif run is None:
                self.apply(self.am.worker_joined(worker_id, unit, host))
            else:
                del self.workers[worker_id]      # never comes back
                self.queued.pop(worker_id, None)

    def step(self, step):
        if step[0] == "leave" and self.workers:
            self.queued.pop(self.pick(step[1]), None)
        super().step(step)


@pytest.mark.parametrize("harness", [Harness, QueueHarness], ids=["one a worker", "a queue of two"])
@given(spec=jobs, plan=steps)
def test_the_appmaster_keeps_its_promises(harness, spec, plan):
    h = harness(spec)
    for step in plan:
        h.step(step)
    drain(h, spec)
    assert not getattr(h, "queued", None)
