"""The AppMaster's incremental checkpoint (issue 14 §2): the core's journal
records replayed over its snapshot give back the state, and the files
(frameworks/mesoslike_frameworks/fuxi/checkpoint.py) survive a torn tail, damage and
compaction. The per-update cost is counted (records, bytes), not timed."""

from __future__ import annotations

import json
import logging
import random

import pytest

from mesoslike import Resources
from mesoslike.clock import FakeClock
from mesoslike_frameworks.fuxi import am_protocol as amp
from mesoslike_frameworks.fuxi import protocol
from mesoslike_frameworks.fuxi.appmaster_core import AppMasterCore, JournalError, ToService, ToWorker
from mesoslike_frameworks.fuxi.checkpoint import Checkpoint
from mesoslike_frameworks.fuxi.model import BackupPolicy, JobSpec, UnitSpec

pytestmark = pytest.mark.timeout(120)

SLOT = Resources.parse("cpus:1;mem:64")


def spec(instances=30, after_instances=5, max_attempts=3):
    return JobSpec("j", [UnitSpec("map", 4, SLOT, command="m {instance}", instances=instances,
                                  max_attempts=max_attempts),
                         UnitSpec("reduce", 2, SLOT, command="r {instance}", instances=after_instances,
                                  after=["map"])],
                   blacklist_after=2, blacklist_seconds=1e9,
                   backup=BackupPolicy(min_finished_fraction=0.2, min_runtime=1.0))


def roundtrip(value):
    return json.loads(json.dumps(value))


class Driver:
    """Plays workers against a core: joins, results (good and bad), leaves
    and ticks, chosen by a seeded random; follows the core's ASSIGN, KILL
    and RELEASE_SLOT so that every call is one a real worker could make."""

    def __init__(self, am: AppMasterCore, clock: FakeClock, seed: int, ok: float = 0.8) -> None:
        self.am, self.clock, self.rng, self.ok = am, clock, random.Random(seed), ok
        self.joined: dict[str, str] = {}          # worker -> host
        #: worker -> what it runs, then (with the core's queue_below) the one it holds queued
        self.runs: dict[str, list[tuple[int, int]]] = {}
        self.next_worker = 0

    def follow(self, actions) -> None:
        for action in actions:
            if isinstance(action, ToWorker) and isinstance(action.message, amp.Assign):
                self.runs.setdefault(action.worker_id, []).append((action.message.instance, action.message.attempt))
            elif isinstance(action, ToWorker):   # a KILL: of its run (the queued one runs) or of its queued one
                runs = self.runs.get(action.worker_id, [])
                killed = (action.message.instance, action.message.attempt)
                if killed in runs:
                    runs.remove(killed)
                if not runs:
                    self.runs.pop(action.worker_id, None)
            elif isinstance(action, ToService) and isinstance(action.request, protocol.ReleaseSlot):
                self.joined.pop(action.request.slot, None)
                self.runs.pop(action.request.slot, None)

    def step(self) -> None:
        rng, am = self.rng, self.am
        draw = rng.random()
        busy = sorted(self.runs)
        if draw < 0.25 or not self.joined:
            worker = f"w{self.next_worker}"
            self.next_worker += 1
            host = f"h{rng.randrange(6)}"
            self.joined[worker] = host
            self.follow(am.worker_joined(worker, rng.choice(["map", "reduce"]), host, f"er{int(host[1:]) % 2}"))
        elif draw < 0.75 and busy:
            worker = rng.choice(busy)
            instance, attempt = self.runs[worker].pop(0)
            if not self.runs[worker]:
                del self.runs[worker]
            self.follow(am.instance_done(worker, instance, attempt, rng.random() < self.ok, "boom"))
        elif draw < 0.85:
            worker = rng.choice(sorted(self.joined))
            del self.joined[worker]
            self.runs.pop(worker, None)
            self.follow(am.worker_left(worker, "gone"))
        else:
            self.clock.advance(rng.uniform(0.2, 3.0))
            self.follow(am.tick())


@pytest.mark.parametrize("seed, max_attempts, ok, ends, queue_below", [
    (0, 3, 0.85, "succeeded", 0.0), (2, 3, 0.85, "succeeded", 0.0), (4, 3, 0.85, "succeeded", 0.0),
    (1, 3, 0.85, "failed", 0.0), (11, 3, 0.85, "failed", 0.0), (5, 2, 0.5, "failed", 0.0),
    # workers holding a queued run too: its record, and the journal's silence when it starts running
    (0, 3, 0.85, "succeeded", 10.0), (2, 3, 0.85, "succeeded", 10.0), (10, 3, 0.85, "failed", 10.0),
    (5, 2, 0.5, "failed", 10.0)])
def test_a_snapshot_and_the_journal_since_give_back_the_state_at_every_step(seed, max_attempts, ok, ends,
                                                                            queue_below):
    clock = FakeClock()
    job = spec(max_attempts=max_attempts)
    am = AppMasterCore("job-1", job, clock, queue_below=queue_below)
    driver = Driver(am, clock, seed, ok=ok)
    base, records = None, []
    for step in range(2000):
        driver.step()
        expected = am.snapshot()
        records += roundtrip(am.journal())
        restored = AppMasterCore("job-1", job, clock, snapshot=roundtrip(base) if base else None, journal=records)
        assert restored.snapshot() == expected, f"step {step}"
        if step % 37 == 36:                       # a compaction: a new snapshot, the journal starts again
            base, records = am.snapshot(), []
            am.journal()
        if am.state != "running":
            break
    assert am.state == ends and am.snapshot()["units"]["map"]["done"]    # the walk went through the job


def test_every_record_says_what_it_sets_and_twice_changes_nothing():
    clock = FakeClock()
    job = spec()
    am = AppMasterCore("job-1", job, clock)
    driver = Driver(am, clock, 7)
    records = []
    for _ in range(120):
        driver.step()
        records += am.journal()
    assert {r[0] for r in records} >= {"i", "u", "m"}
    once = AppMasterCore("job-1", job, clock, journal=records).snapshot()
    assert AppMasterCore("job-1", job, clock, journal=records + records).snapshot() == once


@pytest.mark.parametrize("bad", [
    "oops", [], ["x", 1], ["i", "map", 30, 1, 1, 0, 0], ["i", "map", -1, 1, 1, 0, 0], ["i", "nope", 0, 1, 1, 0, 0],
    ["i", "map", 0, 2, 1, 0, 0], ["i", "map", 0, True, 1, 0, 0], ["i", "map", 0, 1, -3, 0, 0],
    ["u", "map", float("nan"), 0, 0], ["u", "map", -1.0, 0, 0], ["h", "x" * 5000, 1, 0, 0], ["h", 5, 1, 0, 0],
    ["m", "h0", ""], ["s", "exploded", ""], ["s", "failed"], ["i", "map", 0, 1, 1, 0, 0, 9],
])
def test_a_hostile_record_is_refused_with_its_place(bad):
    good = ["i", "map", 0, 1, 1, 0, 0]
    with pytest.raises(JournalError, match="journal record 1") as raised:
        AppMasterCore("job-1", spec(), FakeClock(), journal=[good, bad, good])
    assert raised.value.valid == 1


# ===================================================================== files
def saved_walk(tmp_path, seed, steps):
    """A walk of ``steps`` saved to files in ``tmp_path``: (path, job, clock, the state it left)."""
    clock = FakeClock()
    job = spec()
    path = tmp_path / "snapshot.json"
    checkpoint = Checkpoint(path)
    am = checkpoint.restore("job-1", job, clock)
    run_some(am, clock, checkpoint, seed, steps)
    checkpoint.close()
    return path, job, clock, am.snapshot()


def run_some(am, clock, checkpoint, seed, steps):
    driver = Driver(am, clock, seed)
    for _ in range(steps):
        driver.step()
        checkpoint.save(am)
        if am.state != "running":
            break
    return driver


def test_recovery_from_the_files_equals_the_state_before_through_compactions(tmp_path):
    clock = FakeClock()
    job = spec(instances=400)
    path = tmp_path / "snapshot.json"
    checkpoint = Checkpoint(path, min_compact_bytes=0)
    am = checkpoint.restore("job-1", job, clock)
    run_some(am, clock, checkpoint, 3, 300)
    assert checkpoint.counters["compactions"] >= 3          # the journal outgrew the snapshot now and then
    assert json.loads(path.read_text())["journal"] == checkpoint.generation
    expected = am.snapshot()
    checkpoint.close()
    again = Checkpoint(path)
    restored = again.restore("job-1", job, clock)
    assert restored.snapshot() == expected
    assert again.generation == checkpoint.generation + 1     # it starts with a compaction


def test_a_torn_last_record_is_ignored_and_the_rest_replayed(tmp_path, caplog):
    path, job, clock, expected = saved_walk(tmp_path, 1, 60)
    journal = tmp_path / "snapshot.json.journal"
    with open(journal, "ab") as handle:
        handle.write(b'["i","map",3,1,')                      # a crash in the middle of a write
    with caplog.at_level(logging.WARNING):
        restored = Checkpoint(path).restore("job-1", job, clock)
    assert restored.snapshot() == expected
    assert "cut short" in caplog.text
    assert journal.read_bytes().endswith(b"\n")              # compacted: nothing appended after the torn bit


def test_a_damaged_journal_replays_up_to_the_damage_and_sets_the_rest_aside(tmp_path, caplog):
    path, job, clock, expected = saved_walk(tmp_path, 2, 40)
    journal = tmp_path / "snapshot.json.journal"
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join(lines[:-1] + [b"\x00garbage{", b'["i","map",0,1,1,0,0]', b""]))
    with caplog.at_level(logging.ERROR):
        restored = Checkpoint(path).restore("job-1", job, clock)
    assert restored.snapshot() == expected                 # everything before the damage
    assert "set aside" in caplog.text and (tmp_path / "snapshot.json.journal.corrupt").exists()
    # a record that parses but is not one of this job's: the good ones before it count
    for record in (["i", "map", 0, 1, 1, 0, 0], ["i", "map", 10 ** 9, 1, 1, 0, 0]):
        with open(journal, "ab") as handle:
            handle.write(json.dumps(record).encode() + b"\n")
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        restored = Checkpoint(path).restore("job-1", job, clock)
    assert restored.snapshot()["units"]["map"]["done"][0][0] == 0 and "replaying the 1 record" in caplog.text


def test_a_journal_of_another_generation_is_not_replayed(tmp_path):
    # a crash between the new snapshot and the new journal: the old journal is in the snapshot already
    path, job, clock, _ = saved_walk(tmp_path, 5, 50)
    snapshot = json.loads(path.read_text())
    snapshot["journal"] += 1
    snapshot["units"]["map"]["done"] = []
    path.write_text(json.dumps(snapshot))
    restored = Checkpoint(path).restore("job-1", job, clock)
    assert restored.snapshot()["units"]["map"]["done"] == []


def test_a_snapshot_of_garbage_or_of_another_job_starts_afresh(tmp_path):
    path = tmp_path / "snapshot.json"
    for junk in ("{not json", json.dumps({"format": 1, "units": {"other": {}}})):
        path.write_text(junk)
        am = Checkpoint(path).restore("job-1", spec(), FakeClock())
        assert am.snapshot()["units"]["map"]["done"] == []
        assert (tmp_path / "snapshot.json.corrupt").exists()


# ============================================================== per update
def bytes_per_end(instances: int, ends: int, tmp_path) -> tuple[float, float]:
    """Bytes written (journal and snapshots) and records per instance end
    while ``ends`` instances of a job of ``instances`` finish on 16 workers."""
    clock = FakeClock()
    job = JobSpec("big", [UnitSpec("map", 16, SLOT, command="m", instances=instances)],
                  backup=BackupPolicy(enabled=False))
    checkpoint = Checkpoint(tmp_path / f"snapshot-{instances}.json")
    am = checkpoint.restore("job-1", job, clock)
    driver = Driver(am, clock, 0)
    for w in range(16):
        driver.joined[f"w{w}"] = "h0"
        driver.follow(am.worker_joined(f"w{w}", "map", f"h{w % 4}"))
    checkpoint.save(am)
    written = checkpoint.counters["journal_bytes"] + checkpoint.counters["snapshot_bytes"]
    records = checkpoint.counters["records"]
    for n in range(ends):
        worker = sorted(driver.runs)[n % 16]
        (instance, attempt), = driver.runs.pop(worker)
        clock.advance(0.01)
        driver.follow(am.instance_done(worker, instance, attempt, True))
        checkpoint.save(am)                           # one turn per end: the worst case
    written = checkpoint.counters["journal_bytes"] + checkpoint.counters["snapshot_bytes"] - written
    checkpoint.close()
    return written / ends, (checkpoint.counters["records"] - records) / ends


def test_the_bytes_written_per_instance_end_do_not_grow_with_the_job(tmp_path):
    small_bytes, small_records = bytes_per_end(1_000, 900, tmp_path)
    big_bytes, big_records = bytes_per_end(100_000, 900, tmp_path)
    # the end and the next start of one instance, and the unit's counters: three records
    assert small_records == big_records == 3
    assert big_bytes < 1.2 * small_bytes + 10, (small_bytes, big_bytes)
    assert big_bytes < 250                               # a whole snapshot at 100,000 instances: ~1.5 MB
