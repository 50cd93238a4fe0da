"""``Progress`` of ``mesoslike run`` (frameworks/mesoslike_frameworks/command.py): its figures are
counters, so a status update costs the same whatever the job's size
(issue 14 §2). Operations are counted, not timed."""

from __future__ import annotations

import pytest

from mesoslike import TaskState, TaskStatus
from mesoslike_frameworks.command import CommandScheduler, Progress
from mesoslike.resources import Resources

pytestmark = pytest.mark.timeout(60)


class CountingDict(dict):
    """A dict that counts the element visits of every walk over it."""

    def __init__(self) -> None:
        super().__init__()
        self.visits = 0

    def _walk(self, items):
        for item in items:
            self.visits += 1
            yield item

    def __iter__(self):
        return self._walk(super().__iter__())

    def values(self):  # type: ignore[override]  # a generator stands in for the view: only walking is counted
        return self._walk(super().values())

    def items(self):  # type: ignore[override]
        return self._walk(super().items())

    def keys(self):  # type: ignore[override]
        return self._walk(super().keys())


class FakeDriver:
    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def updates_walk(instances: int) -> int:
    """Element visits over the task table while a job of ``instances`` runs
    to its end, its progress read after every update as ``mesoslike run``
    does."""
    scheduler = CommandScheduler("true", Resources(cpus=0.1, mem=1), instances,
                                 on_change=lambda progress, status: (progress.summary(), progress.done))
    progress = scheduler.progress
    progress.tasks = CountingDict()
    for i in range(instances):
        progress.record(f"run-{i}", TaskState.STAGING)
        progress.launched += 1
    driver = FakeDriver()
    for i in range(instances):
        for state in (TaskState.RUNNING, TaskState.FINISHED if i % 10 else TaskState.FAILED):
            scheduler.status_update(driver, TaskStatus(task_id=f"run-{i}", state=state, exit_code=0 if i % 10 else 2))
            progress.summary(), progress.finished, progress.failed, progress.running, progress.done
    assert driver.stopped and progress.done
    visits = progress.tasks.visits  # type: ignore[attr-defined]
    progress._check()
    return visits


def test_a_status_update_does_not_walk_the_task_table_whatever_the_job_size():
    # before issue 14 every update recounted the table: ~N visits per update, O(N^2) per job
    assert updates_walk(100) == 0
    assert updates_walk(5_000) == 0


def test_the_counters_follow_every_transition_and_agree_with_a_recount():
    progress = Progress(4)
    for i in range(4):
        progress.record(f"t{i}", TaskState.STAGING)
        progress.launched += 1
    assert (progress.running, progress.finished, progress.failed) == (4, 0, 0)
    progress.record("t0", TaskState.RUNNING)
    progress.record("t0", TaskState.FINISHED)
    progress.record("t1", TaskState.LOST)
    progress.record("t2", TaskState.UNREACHABLE)   # neither running nor ended
    progress._check()
    assert (progress.running, progress.finished, progress.failed, progress.done) == (1, 1, 1, False)
    assert progress.summary() == "1/4 finished, 1 failed, 1 running, 0 waiting"
    progress.record("t2", TaskState.RUNNING)
    progress.record("t2", TaskState.KILLED)
    progress.record("t3", TaskState.FINISHED)
    progress._check()
    assert (progress.running, progress.finished, progress.failed, progress.done) == (0, 2, 2, True)


def test_exit_code_is_a_failed_instances_code():
    scheduler = CommandScheduler("true", Resources(cpus=0.1, mem=1), 3)
    for i in range(3):
        scheduler.progress.record(f"run-{i}", TaskState.STAGING)
        scheduler.progress.launched += 1
    driver = FakeDriver()
    scheduler.status_update(driver, TaskStatus(task_id="run-0", state=TaskState.FINISHED, exit_code=0))
    scheduler.status_update(driver, TaskStatus(task_id="run-1", state=TaskState.FAILED, exit_code=7))
    scheduler.status_update(driver, TaskStatus(task_id="nobody", state=TaskState.FAILED, exit_code=9))
    scheduler.status_update(driver, TaskStatus(task_id="run-2", state=TaskState.FINISHED, exit_code=0))
    assert driver.stopped and scheduler.exit_code() == 7


class RecordingDriver(FakeDriver):
    def __init__(self) -> None:
        super().__init__()
        self.launched: dict[str, int] = {}
        self.declined: list[str] = []
        self.suppressed = False

    def launch_tasks(self, offer_ids, tasks, filters=None) -> None:
        (offer_id,) = offer_ids
        self.launched[offer_id] = len(tasks)

    def decline_offer(self, offer_id, filters=None) -> None:
        self.declined.append(offer_id)

    def suppress_offers(self) -> None:
        self.suppressed = True


def offers(*capacities: str):
    from mesoslike import Offer
    return [Offer(id=f"o{i}", agent_id=f"a{i}", hostname=f"h{i}", resources=Resources.parse(capacity))
            for i, capacity in enumerate(capacities)]


def test_instances_are_spread_over_the_offers_that_came_together():
    scheduler = CommandScheduler("true", Resources(cpus=0.1, mem=16), 1000)
    driver = RecordingDriver()
    scheduler.resource_offers(driver, offers(*["cpus:64;mem:65536"] * 4))
    assert driver.launched == {"o0": 250, "o1": 250, "o2": 250, "o3": 250} and driver.suppressed
    scheduler.progress._check()


def test_what_a_small_offer_cannot_take_goes_where_it_fits_and_an_unusable_one_is_declined():
    scheduler = CommandScheduler("true", Resources(cpus=1, mem=16), 10)
    driver = RecordingDriver()
    scheduler.resource_offers(driver, offers("cpus:1;mem:1024", "cpus:0.5;mem:1024", "cpus:20;mem:1024"))
    assert driver.launched == {"o0": 1, "o2": 9} and driver.declined == ["o1"]
    assert scheduler.progress.launched == 10


def test_an_agent_gets_no_more_than_max_staging_per_agent_tasks_not_yet_started():
    scheduler = CommandScheduler("true", Resources(cpus=0.01, mem=1), 2000)
    scheduler.max_staging_per_agent = 300
    driver = RecordingDriver()
    scheduler.resource_offers(driver, offers("cpus:64;mem:65536", "cpus:64;mem:65536"))
    assert driver.launched == {"o0": 300, "o1": 300} and not driver.suppressed
    for i in range(100):                      # 100 of o0's tasks started: room for 100 more there
        scheduler.status_update(driver, TaskStatus(task_id=f"run-{i}", state=TaskState.STARTING, agent_id="a0"))
    scheduler.status_update(driver, TaskStatus(task_id="run-0", state=TaskState.RUNNING, agent_id="a0"))
    assert scheduler.staging == {"a0": 200, "a1": 300}
    driver = RecordingDriver()
    scheduler.resource_offers(driver, offers("cpus:64;mem:65536", "cpus:64;mem:65536"))
    assert driver.launched == {"o0": 100} and driver.declined == ["o1"]
    assert scheduler.staging == {"a0": 300, "a1": 300}
    scheduler.progress._check()


@pytest.mark.parametrize("need, capacities", [
    ("cpus:0.3;mem:100", ["cpus:1;mem:1024;ports:[31000-31009]", "cpus:4;mem:250", "cpus:0.2;mem:4096"]),
    ("cpus:1;mem:16;ports:[31000-31000]", ["cpus:8;mem:1024;ports:[31000-31009]", "cpus:8;mem:1024"]),
    ("cpus:0.01;mem:1", ["cpus:1000;mem:1000000"] * 3),
])
def test_as_many_as_fit_are_taken_at_once_as_one_by_one(need, capacities):
    """resource_offers takes the copies of a scalar-only task that fit in an
    offer at once (_copies_that_fit): the same tasks on the same offers, and
    the same rest, as one by one (a contains and a subtraction each)."""
    from mesoslike_frameworks.command import _copies_that_fit
    wanted = Resources.parse(need)
    for capacity in capacities:
        free, one_by_one = Resources.parse(capacity), 0
        while free.contains(wanted) and one_by_one < 100_000:
            free, one_by_one = free - wanted, one_by_one + 1
        copies = _copies_that_fit(Resources.parse(capacity), wanted)
        assert copies is None if wanted.range_names() else copies == one_by_one
        if copies:
            assert Resources.parse(capacity) - wanted.scale(copies) == free
    scheduler = CommandScheduler("true", wanted, 25)
    driver = RecordingDriver()
    scheduler.resource_offers(driver, offers(*capacities))
    assert sum(driver.launched.values()) == scheduler.progress.launched
    scheduler.progress._check()
