"""The agent's task journal (issue 14): a loop turn's checkpoints cost one
fsync however many tasks changed in it, the last record of a task is its
checkpoint, damage is reported by name and never resurrects a stale state,
the journal stays proportional to the live tasks, an older agent's
``task.ckpt`` files are taken over; and forgotten run directories are removed
off the agent's loop. Real files in a temporary directory; counts, never times."""

from __future__ import annotations

import os

import pytest

from mesoslike.agent import checkpoint as ckpt
from mesoslike.agent.checkpoint import CODEC, JOURNAL_MAGIC, CheckpointStore, TaskFile
from mesoslike.agent.core import TaskCheckpoint
from mesoslike.agent.gc import RunDirRemover
from mesoslike.resources import Resources
from mesoslike.wire.types import FrameworkInfo, TaskInfo, TaskState, TaskStatus
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)

FW = FrameworkInfo(name="demo", id="fw-1")


def checkpoint(task_id: str, state: str = TaskState.RUNNING, uuid: str = "u-1", data: bytes = b"") -> TaskCheckpoint:
    status = TaskStatus(task_id=task_id, state=state, agent_id="a-1", uuid=uuid, framework_id=FW.id, data=data)
    return TaskCheckpoint(FW, TaskInfo(task_id, "a-1", "true", Resources.parse("cpus:0.1;mem:16")), state,
                          [status])


def loaded(store: CheckpointStore) -> dict[str, TaskCheckpoint]:
    tasks, errors = CheckpointStore(store.meta.parent).load_tasks()
    assert errors == []
    return {t.task.task_id: t for t in tasks}


def test_the_last_record_of_a_task_is_its_checkpoint_and_a_forgotten_task_is_gone(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save_task(checkpoint("t1", TaskState.STARTING, "u-1"))
    store.save_task(checkpoint("t2", TaskState.STARTING, "u-2"))
    store.save_task(checkpoint("t1", TaskState.FINISHED, "u-3"))
    store.forget_task(FW.id, "t2")
    # written at once: an agent killed before the sync loses nothing (the page cache outlives it)
    tasks = loaded(store)
    assert list(tasks) == ["t1"]
    assert tasks["t1"].state == TaskState.FINISHED and tasks["t1"].updates[0].uuid == "u-3"


@pytest.mark.parametrize("changed", [1, 500])
def test_a_turn_costs_one_fsync_however_many_tasks_changed_in_it(tmp_path, changed):
    store = CheckpointStore(tmp_path)
    store.start_journal([])
    journal = store.journal
    assert journal is not None
    before = dict(journal.counters)
    for i in range(changed):
        store.save_task(checkpoint(f"t{i}"))
    assert store.sync() is True
    assert journal.counters["fsyncs"] - before["fsyncs"] == 1
    assert journal.counters["records"] - before["records"] == changed
    assert store.sync() is False                       # nothing new: no fsync
    assert journal.counters["fsyncs"] - before["fsyncs"] == 1
    assert len(loaded(store)) == changed


def test_the_journal_stays_proportional_to_the_live_tasks(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "COMPACT_MIN_BYTES", 16 * 1024)
    store = CheckpointStore(tmp_path)
    store.start_journal([])
    journal = store.journal
    record = len(ckpt._task_record(checkpoint("t0")))
    for turn in range(2_000):      # 10 live tasks, updated over and over; others come and go
        store.save_task(checkpoint(f"t{turn % 10}", uuid=f"u-{turn}"))
        store.save_task(checkpoint(f"gone{turn}"))
        store.forget_task(FW.id, f"gone{turn}")
        store.sync()
        assert journal.size <= ckpt.COMPACT_MIN_BYTES + 3 * record + len(JOURNAL_MAGIC)
    assert journal.counters["compactions"] >= 10
    # compactions are rare: fsyncs stay one per turn plus two per compaction
    assert journal.counters["fsyncs"] == 2 + 2_000 - journal.counters["compactions"] + \
        2 * journal.counters["compactions"]
    tasks = loaded(store)
    assert sorted(tasks) == sorted(f"t{i}" for i in range(10))
    assert tasks["t9"].updates[0].uuid == "u-1999"


def test_a_record_cut_short_at_the_end_is_dropped_and_the_others_recovered(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save_task(checkpoint("t1"))
    store.save_task(checkpoint("t2"))
    store.sync()
    assert store.journal is not None
    size = store.journal.size
    data = store.journal_path.read_bytes()
    assert len(data) > size and not data[size:].strip(b"\0")   # the zeros written ahead
    # a power loss during the last write of a journal without zeros ahead (an agent's of before): cut at its end
    store.journal_path.write_bytes(data[:size - 5])
    tasks, errors = CheckpointStore(tmp_path).load_tasks()
    assert errors == [] and [t.task.task_id for t in tasks] == ["t1"]


def test_a_torn_last_record_is_told_from_a_damaged_one_by_its_zeros(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save_task(checkpoint("t1", TaskState.STARTING, "u-1"))
    store.save_task(checkpoint("t1", TaskState.RUNNING, "u-2", data=b"x" * 3000))   # spans sectors
    store.sync()
    assert store.journal is not None
    size = store.journal.size
    data = bytearray(store.journal_path.read_bytes())
    start = data.rindex(b"\0t1", 0, size) - len(FW.id) - ckpt._FRAME.size   # the last record's header
    # its sectors from the second on never reached the disk: torn, dropped; t1 is what was synced before
    torn = bytearray(data)
    boundary = (start // 512 + 1) * 512
    torn[boundary:size] = bytes(size - boundary)
    store.journal_path.write_bytes(bytes(torn))
    tasks, errors = CheckpointStore(tmp_path).load_tasks()
    assert errors == [] and [(t.task.task_id, t.state) for t in tasks] == [("t1", TaskState.STARTING)]
    # zeros that begin inside a sector and end the record are damage, not a torn write: reported, t1 not recovered
    damaged = bytearray(data)
    damaged[size - 5:size] = bytes(5)
    if damaged == data:   # (the record ended in zeros of its own: damage it otherwise)
        damaged[size - 6] ^= 0xFF
    store.journal_path.write_bytes(bytes(damaged))
    tasks, errors = CheckpointStore(tmp_path).load_tasks()
    assert tasks == [] and len(errors) == 1 and "corrupt" in errors[0].problem


def test_a_stopped_agent_leaves_its_records_alone_and_a_running_one_appends_over_zeros(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "PREALLOCATE", 4096)
    store = CheckpointStore(tmp_path)
    store.start_journal([])
    journal = store.journal
    assert journal is not None
    sizes = set()
    for i in range(40):   # past the zeros written ahead, more than once
        store.save_task(checkpoint(f"t{i}", data=b"y" * 300))
        store.sync()
        on_disk = os.path.getsize(store.journal_path)
        assert on_disk >= journal.size and on_disk - journal.size <= 4096
        sizes.add(on_disk)
    assert len(sizes) > 1   # the zeros were written ahead again as the records reached them
    assert len(loaded(store)) == 40
    size = journal.size
    store.close_journal()   # a clean stop: the zeros cut off
    assert os.path.getsize(store.journal_path) == size
    assert len(loaded(store)) == 40


def test_a_damaged_record_is_reported_and_its_task_is_not_recovered_from_an_older_one(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save_task(checkpoint("bad", TaskState.STARTING, "u-1"))
    store.save_task(checkpoint("good"))
    store.save_task(checkpoint("bad", TaskState.RUNNING, "u-2"))
    store.sync()
    assert store.journal is not None
    data = bytearray(store.journal_path.read_bytes())
    data[store.journal.size - 3] ^= 0xFF               # inside bad's last record
    store.journal_path.write_bytes(bytes(data))
    tasks, errors = CheckpointStore(tmp_path).load_tasks()
    assert [t.task.task_id for t in tasks] == ["good"]   # not bad as STARTING: that would be stale
    (error,) = errors
    assert error.path == store.journal_path and "record 3" in error.problem and "corrupt" in error.problem


def test_a_file_that_is_not_a_journal_is_reported(tmp_path):
    store = CheckpointStore(tmp_path)
    store.meta.mkdir(parents=True)
    store.journal_path.write_bytes(b"hello")
    tasks, errors = store.load_tasks()
    assert tasks == [] and len(errors) == 1 and "not an agent journal" in errors[0].problem


def test_the_task_ckpt_files_of_an_older_agent_are_read_and_moved_into_the_journal(tmp_path):
    store = CheckpointStore(tmp_path)
    for task_id in ("old1", "old2"):
        run_dir = store.run_dir(FW.id, task_id)
        run_dir.mkdir(parents=True)
        (run_dir / ckpt.TASK_CHECKPOINT).write_bytes(CODEC.encode(TaskFile(checkpoint(task_id))))
    broken = store.run_dir(FW.id, "broken")
    broken.mkdir(parents=True)
    (broken / ckpt.TASK_CHECKPOINT).write_bytes(b"\x93")
    tasks, errors = store.load_tasks()
    assert sorted(t.task.task_id for t in tasks) == ["old1", "old2"]
    assert [e.path for e in errors] == [broken / ckpt.TASK_CHECKPOINT]
    store.start_journal(tasks)
    assert not list(store.meta.glob("tasks/*/*/" + ckpt.TASK_CHECKPOINT))
    assert sorted(loaded(store)) == ["old1", "old2"]


def test_forgotten_run_directories_are_removed_by_a_thread_and_leftovers_at_the_next_start(tmp_path):
    trash = tmp_path / "meta" / "trash"
    remover = RunDirRemover(trash)
    run_dirs = []
    for i in range(3):
        run_dir = tmp_path / "meta" / "tasks" / "fw" / f"t{i}"
        run_dir.mkdir(parents=True)
        (run_dir / "exit.json").write_text("{}")
        run_dirs.append(run_dir)
    assert all(remover.discard(d) for d in run_dirs)
    assert not any(d.exists() for d in run_dirs)          # gone from the tasks at once (a rename)
    assert remover.discard(run_dirs[0]) is False          # nothing there any more
    assert remover.wait()
    assert remover.removed == 3 and list(trash.iterdir()) == []
    (trash / "left-by-a-crash" / "sub").mkdir(parents=True)
    fresh = RunDirRemover(trash, idle_exit=0.1)
    fresh.empty_trash()
    assert fresh.wait() and list(trash.iterdir()) == []
    wait_until(lambda: not fresh.working, 10, "the idle remover's thread to end")
    again = tmp_path / "meta" / "tasks" / "fw" / "again"
    again.mkdir(parents=True)
    assert fresh.discard(again) and fresh.wait() and list(trash.iterdir()) == []   # a new thread when needed


def test_the_agent_file_keeps_the_masters_receipt_and_reads_one_written_without(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save_agent("m-S1", "host-1", "a" * 32)
    assert store.load_agent() == ckpt.AgentFile("m-S1", "host-1", "a" * 32)
    path = store.meta / ckpt.AGENT_CHECKPOINT          # an agent before receipts wrote no receipt field
    written = CODEC.encode(ckpt.AgentFile("m-S2", "host-1"))
    path.write_bytes(written.replace(b"\xa7receipt\xa0", b"").replace(b"\x85", b"\x84", 1))
    assert b"receipt" not in path.read_bytes()
    assert store.load_agent() == ckpt.AgentFile("m-S2", "host-1", "")


def test_a_task_forgotten_and_launched_again_in_one_turn_is_journalled_as_the_new_one(tmp_path):
    from mesoslike.agent.commands import CheckpointTask, ForgetTask
    from mesoslike.agent.runtime import AgentRuntime
    from mesoslike.agent.settings import AgentSettings

    runtime = AgentRuntime(AgentSettings(master="tcp://127.0.0.1:5050", work_dir=tmp_path))
    states = {"t1": TaskState.FINISHED}
    runtime.core.task_checkpoint = lambda framework_id, task_id: checkpoint(task_id, states[task_id])  # type: ignore
    runtime.checkpoints.start_journal([])
    runtime._carry_out(None, [CheckpointTask(FW.id, "t1")])
    runtime._send_outgoing()
    assert [t.state for t in loaded(runtime.checkpoints).values()] == [TaskState.FINISHED]
    states["t1"] = TaskState.STAGING   # its end acknowledged, and a task of the same id sent at once
    runtime._carry_out(None, [ForgetTask(FW.id, "t1"), CheckpointTask(FW.id, "t1")])
    runtime._launch_batch([])
    assert [t.state for t in loaded(runtime.checkpoints).values()] == [TaskState.STAGING]
    runtime._carry_out(None, [ForgetTask(FW.id, "t1")])
    runtime._send_outgoing()
    assert loaded(runtime.checkpoints) == {}
    runtime.checkpoints.close_journal()


def test_records_written_together_are_all_journalled_or_none(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    store.start_journal([])
    journal = store.journal
    assert journal is not None
    store.save_tasks([checkpoint("t1", TaskState.STARTING, "u-1"), checkpoint("t2", TaskState.STARTING, "u-2")])
    assert journal.counters["records"] == 2
    size = journal.size
    real_pwrite = os.pwrite
    # a disk that fills in the middle of the write: neither record is kept, not even the part written
    monkeypatch.setattr(ckpt.os, "pwrite", lambda fd, data, at: real_pwrite(fd, bytes(data)[:len(data) // 2], at))
    with pytest.raises(OSError):
        store.save_tasks([checkpoint("t1", TaskState.RUNNING, "u-3"), checkpoint("t3")])
    monkeypatch.undo()
    assert journal.size == size == os.path.getsize(store.journal_path)   # cut back to the records
    tasks = loaded(store)
    assert sorted(tasks) == ["t1", "t2"] and tasks["t1"].state == TaskState.STARTING


def test_a_tasks_checkpoints_asked_in_one_turn_are_journalled_once_as_it_is_then_before_it_is_launched(tmp_path):
    from mesoslike.agent.commands import CheckpointTask, ForgetTask
    from mesoslike.agent.runtime import AgentRuntime
    from mesoslike.agent.settings import AgentSettings

    runtime = AgentRuntime(AgentSettings(master="tcp://127.0.0.1:5050", work_dir=tmp_path))
    states = {"t1": TaskState.STARTING, "t2": TaskState.STARTING, "t3": TaskState.STARTING}
    runtime.core.task_checkpoint = lambda framework_id, task_id: checkpoint(task_id, states[task_id])  # type: ignore
    runtime.checkpoints.start_journal([])
    journal = runtime.checkpoints.journal
    assert journal is not None
    runtime._carry_out(None, [CheckpointTask(FW.id, "t1"), CheckpointTask(FW.id, "t2"), CheckpointTask(FW.id, "t3")])
    states["t1"] = TaskState.RUNNING
    runtime._carry_out(None, [CheckpointTask(FW.id, "t1"), ForgetTask(FW.id, "t3")])
    assert journal.counters["records"] == 0            # the forget too waits for the next records written
    size = journal.size
    runtime._launch_batch([])                         # a launch (of none here) comes after them
    assert journal.counters["records"] == 3           # t3's forget first, then t1's and t2's, in one write
    data = runtime.checkpoints.journal_path.read_bytes()[size:journal.size]
    assert data.index(b"\0t3") < data.index(b"\0t1") < data.index(b"\0t2")
    tasks = loaded(runtime.checkpoints)
    assert sorted(tasks) == ["t1", "t2"] and tasks["t1"].state == TaskState.RUNNING
    runtime._carry_out(None, [CheckpointTask(FW.id, "t2")])
    runtime._send_outgoing()                          # the end of a half-turn writes them, with sends or none
    assert journal.counters["records"] == 4
    runtime.checkpoints.close_journal()


def records_of(store: CheckpointStore) -> list[object]:
    """The journal's records, decoded, in order."""
    return [CODEC.decode(frame.payload) for frame in ckpt._frames(store.journal_path.read_bytes(), store.journal_path)]


def test_a_tasks_later_records_are_state_records_over_its_full_one_and_recover_it_whole(tmp_path):
    store = CheckpointStore(tmp_path)
    store.start_journal([])
    first = checkpoint("t1", TaskState.STARTING, "u-1")
    store.save_task(first)
    # the same framework and TaskInfo (another object, equal: a VALUE secret emptied anew makes one)
    store.save_tasks([checkpoint("t1", TaskState.RUNNING, "u-2"), checkpoint("t2")])
    killing = TaskCheckpoint(FW, first.task, TaskState.RUNNING, [], holds_resources=False, killing=True,
                             kill_why="asked", limitation="REASON_CONTAINER_LIMITATION_MEMORY",
                             limitation_message="over", healthy=False, executor_secret_digest="d" * 64)
    store.save_task(killing)
    kinds = [type(record).__name__ for record in records_of(store)]
    assert kinds == ["TaskFile", "TaskStateFile", "TaskFile", "TaskStateFile"]
    assert store.journal is not None and store.journal.counters["state_records"] == 2
    tasks = loaded(store)
    assert tasks["t1"] == killing and tasks["t2"] == checkpoint("t2")   # every field, the TaskInfo the base's


def test_a_changed_framework_or_task_info_or_a_task_forgotten_gets_a_full_record(tmp_path):
    store = CheckpointStore(tmp_path)
    store.start_journal([])
    store.save_task(checkpoint("t1"))
    renamed = FrameworkInfo(name="renamed", id=FW.id)
    other = TaskCheckpoint(renamed, checkpoint("t1").task, TaskState.RUNNING)
    store.save_task(other)                                       # the framework changed: full
    relaunched = TaskCheckpoint(renamed, TaskInfo("t1", "a-1", "false", Resources.parse("cpus:1;mem:16")),
                                TaskState.STAGING)
    store.save_task(relaunched)                                  # the TaskInfo changed: full
    store.save_tasks([relaunched], forgotten=[(FW.id, "t1")])    # forgotten and sent again in one write: full
    kinds = [type(record).__name__ for record in records_of(store)]
    assert kinds == ["TaskFile", "TaskFile", "TaskFile", "ForgetFile", "TaskFile"]
    assert loaded(store)["t1"] == relaunched


def test_a_journal_of_full_records_only_is_read_and_state_records_follow_a_recovered_task(tmp_path):
    store = CheckpointStore(tmp_path)
    store.meta.mkdir(parents=True)
    # an agent of before state records: a full record each change
    store.journal_path.write_bytes(JOURNAL_MAGIC + ckpt._task_record(checkpoint("t1", TaskState.STARTING, "u-1"))
                                   + ckpt._task_record(checkpoint("t1", TaskState.RUNNING, "u-2")))
    tasks, errors = store.load_tasks()
    assert errors == [] and [(t.task.task_id, t.state) for t in tasks] == [("t1", TaskState.RUNNING)]
    store.start_journal(tasks)                                   # recovery's journal: the base of the next
    store.save_task(checkpoint("t1", TaskState.FINISHED, "u-3"))
    assert [type(record).__name__ for record in records_of(store)] == ["TaskFile", "TaskStateFile"]
    assert loaded(store)["t1"].state == TaskState.FINISHED


def test_a_compaction_keeps_a_tasks_full_record_and_its_latest_state_record(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "COMPACT_MIN_BYTES", 8 * 1024)
    store = CheckpointStore(tmp_path)
    store.start_journal([])
    for turn in range(200):
        store.save_task(checkpoint("t1", uuid=f"u-{turn}"))
        store.sync()
    assert store.journal is not None and store.journal.counters["compactions"] >= 1
    kinds = [type(record).__name__ for record in records_of(store)]
    assert kinds[:2] == ["TaskFile", "TaskStateFile"] and set(kinds[2:]) <= {"TaskStateFile"}
    assert loaded(store)["t1"].updates[0].uuid == "u-199"


def test_a_state_record_whose_full_record_is_damaged_missing_or_another_leaves_its_task_reported(tmp_path):
    store = CheckpointStore(tmp_path)
    store.start_journal([])
    store.save_tasks([checkpoint("bad"), checkpoint("good")])
    full = store.journal_path.read_bytes()[:store.journal.size] if store.journal else b""
    bad_base = full.index(b"\0bad")                              # inside bad's full record (its key)
    store.save_tasks([checkpoint("bad", uuid="u-2"), checkpoint("good", uuid="u-2")])
    store.sync()
    assert store.journal is not None
    data = bytearray(store.journal_path.read_bytes()[:store.journal.size])
    # the full record damaged: the state record after it is not applied over an older state
    damaged = bytearray(data)
    damaged[bad_base + 10] ^= 0xFF
    store.journal_path.write_bytes(bytes(damaged))
    tasks, errors = CheckpointStore(tmp_path).load_tasks()
    assert [(t.task.task_id, t.updates[0].uuid) for t in tasks] == [("good", "u-2")]
    assert len(errors) == 2 and all("task fw-1/bad is not recovered" in e.problem for e in errors)
    assert "full record before it is missing or damaged" in errors[1].problem
    # the full records missing (a journal that lost them): each state record reported, no task recovered
    frames = list(ckpt._frames(bytes(data), store.journal_path))
    states = b"".join(bytes(data[f.offset:f.offset + ckpt._FRAME.size]) + f"{f.key[0]}\0{f.key[1]}".encode()
                      + f.payload for f in frames[2:] if f.key is not None)
    store.journal_path.write_bytes(JOURNAL_MAGIC + states)
    tasks, errors = CheckpointStore(tmp_path).load_tasks()
    assert tasks == [] and len(errors) == 2 and all("missing or damaged" in e.problem for e in errors)
    # a state record over another full record of its task (its checksum names the one before): reported
    swapped = JOURNAL_MAGIC + ckpt._task_record(checkpoint("bad", TaskState.STARTING)) + states
    store.journal_path.write_bytes(swapped)
    tasks, errors = CheckpointStore(tmp_path).load_tasks()
    assert [(t.task.task_id, t.state) for t in tasks] == []
    assert len(errors) == 2 and "fw-1/bad" in errors[0].problem and "fw-1/good" in errors[1].problem


# the files written by the attrs classes AgentFile and ReservationsFile (the base of their conversion to frozen
# Structs, f3c3947): a Struct writes the same bytes, and an agent reads the files older agents left
OLD_AGENT_FILES = [
    (ckpt.AgentFile("m-S1", "host-1", "r" * 32),
     "85a17601a474797065a54147454e54a86167656e745f6964a46d2d5331a8686f73746e616d65a6686f73742d31a772656365697074d920"
     "7272727272727272727272727272727272727272727272727272727272727272"),
    (ckpt.AgentFile("m-S2", "host-1"),
     "85a17601a474797065a54147454e54a86167656e745f6964a46d2d5332a8686f73746e616d65a6686f73742d31a772656365697074a0"),
]
OLD_RESERVATIONS_FILE = (
    ckpt.ReservationsFile(Resources.parse("cpus(web):1;mem(web):64")),
    "83a17601a474797065ac5245534552564154494f4e53ac7265736572766174696f6e73b76370757328776562293a313b6d656d2877656229"
    "3a3634")


def test_the_agent_and_reservations_files_are_the_bytes_older_agents_wrote_and_read_as_theirs(tmp_path):
    import msgspec

    store = CheckpointStore(tmp_path)
    store.meta.mkdir(parents=True)
    for record, old in OLD_AGENT_FILES + [OLD_RESERVATIONS_FILE]:
        assert isinstance(record, msgspec.Struct) and CODEC.encode(record) == bytes.fromhex(old)
        assert CODEC.decode(bytes.fromhex(old)) == record
    for record, old in OLD_AGENT_FILES:
        (store.meta / ckpt.AGENT_CHECKPOINT).write_bytes(bytes.fromhex(old))
        assert store.load_agent() == record
    record, old = OLD_RESERVATIONS_FILE
    (store.meta / ckpt.RESERVATIONS_CHECKPOINT).write_bytes(bytes.fromhex(old))
    assert store.load_reservations() == record.reservations
    store.save_reservations(record.reservations)
    assert (store.meta / ckpt.RESERVATIONS_CHECKPOINT).read_bytes() == bytes.fromhex(old)
    store.save_agent("m-S1", "host-1", "r" * 32)
    assert (store.meta / ckpt.AGENT_CHECKPOINT).read_bytes() == bytes.fromhex(OLD_AGENT_FILES[0][1])
