#!/usr/bin/env python3
"""Fuxi AppMaster: what checkpointing costs per instance end, whole snapshot vs journal.

Issue 14 §2: the AppMaster wrote its whole job (``AppMasterCore.snapshot()``,
O(instances)) with an fsync after every loop turn that changed it, so an
instance's end cost more the bigger the job. Now a turn appends the core's
``journal()`` records (O(changes)) with one fsync and writes a whole
snapshot only when the journal outgrew the last one
(``frameworks/mesoslike_frameworks/fuxi/checkpoint.py``).

A job of N instances runs on 16 workers (a core alone, fake clock, no
processes); each instance end is one loop turn — ``instance_done``, the
next ASSIGN, the checkpoint — the worst case (a busy AppMaster folds
several ends into one turn). Timed per end, two ways in the same run,
interleaved round by round:

``snapshot``
    the old way: ``json.dumps(core.snapshot())`` written to a temporary
    file, fsynced, renamed over the snapshot (``write_snapshot``);
``journal``
    ``Checkpoint.save(core)``: the records appended, fsynced, a compaction
    now and then (its cost spread over the ends, as it happens).

Each is measured with the fsync (``--fsync``, what the AppMaster does; the
files in ``--dir``, default a temporary directory) and without it (the
core's and the encoding's CPU alone, the fsync replaced by nothing), with
the bytes written per end. Prints one JSON document (progress on stderr);
``--out FILE`` also writes it there. It reports; it never fails on slow
numbers.

    python bench/fuxi_checkpoint.py --out bench/results/fuxi_checkpoint.json

``--hard-state N`` measures the Fuxi *service's* hard state instead (issue
30: at 10,000 running jobs), in the store the service writes it to — the
files of ``fuxi serve --work-dir`` (``FileRecordStore``: one file per
record, fsynced) and ZooKeeper (``ZooKeeperRecordStore`` on a real server
started by the bench, as ``tests/zk_helpers.py`` starts it; fenced on an
ephemeral znode of the bench) — with the real ``JobCore`` around a
``FuxiCore`` (no processes: the AppMasters and the master are played by
the bench, through the events the service would feed the core):

``checkpoint``
    N jobs are submitted one by one (one unit of 2 slots each): each
    submission is acknowledged only once its record and the service record
    are written (``Persist`` carried out by ``store.write``, then
    ``Persisted``): the time per submission, the first and the last 200
    (with N - 200 jobs stored), and the bytes stored. Then each job's
    AppMaster starts (``AppMasterStarted``: its record written again) and
    the jobs get their slots from one offer per machine (``--machines``).
``failover``
    A new leader takes over, each step timed: ``load`` (``store.load()``,
    every record read), ``decode`` (``hard_state.decode``), ``recover``
    (a fresh ``JobCore`` takes ``Recover``: every running job back in a new
    ``FuxiCore``, the service record written), ``reconcile`` (registered; the
    master's answers to the reconciliation, one ``TASK_RUNNING`` per worker
    task), ``adopt`` (each AppMaster's progress report claims its slots:
    ``Progress`` with ``slots`` and ``units``), ``first_pass`` (one offer per
    machine) and ``window`` (the adoption window closes: a ``Tick``). Every
    slot must be adopted and none lost. The total is what a new leader
    adds to the time ZooKeeper takes to see the old one gone (its session
    timeout: ``bench/fuxi_failover.py`` measures the whole failover with
    real processes, at a few jobs).

    python bench/fuxi_checkpoint.py --hard-state 10000 --out bench/results/fuxi_hard_state.json
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from benchlib import blob_ids, finish, git_state, start  # noqa: E402
from mesoslike import Resources  # noqa: E402
from mesoslike.clock import FakeClock  # noqa: E402
from mesoslike_frameworks.fuxi import am_protocol as amp  # noqa: E402
from mesoslike_frameworks.fuxi.appmaster_core import AppMasterCore, ToWorker  # noqa: E402
from mesoslike_frameworks.fuxi.checkpoint import Checkpoint, write_snapshot  # noqa: E402
from mesoslike_frameworks.fuxi.model import BackupPolicy, JobSpec, UnitSpec, parse_job  # noqa: E402
from mesoslike import Offer, TaskState, TaskStatus  # noqa: E402
from mesoslike_frameworks.fuxi import hard_state as hard_records, protocol  # noqa: E402
from mesoslike_frameworks.fuxi.core import FuxiCore, LaunchSlots  # noqa: E402
from mesoslike_frameworks.fuxi.hard_state import AppMasterRecord  # noqa: E402
from mesoslike_frameworks.fuxi.jobs import (AppMasterRequest, AppMasterStarted, DriverRegistered,  # noqa: E402
                                            JobAccepted, JobCore, JobSubmitted, OffersReceived, Persist, Persisted,
                                            Recover, Tick, WorkerUpdate)
from mesoslike_frameworks.fuxi.state_store import FileRecordStore  # noqa: E402

WORKERS = 16
CODE_FILES = ["frameworks/mesoslike_frameworks/fuxi/appmaster_core.py", "frameworks/mesoslike_frameworks/fuxi/checkpoint.py", "bench/fuxi_checkpoint.py"]
HARD_STATE_FILES = ["frameworks/mesoslike_frameworks/fuxi/jobs.py", "frameworks/mesoslike_frameworks/fuxi/hard_state.py", "frameworks/mesoslike_frameworks/fuxi/state_store.py",
                    "frameworks/mesoslike_frameworks/fuxi/core.py", "mesoslike/ha/record_store.py", "bench/fuxi_checkpoint.py"]
EDGE = 200                      # submissions timed at each end of the filling


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def job(instances: int) -> JobSpec:
    return JobSpec("bench", [UnitSpec("map", WORKERS, Resources.parse("cpus:1;mem:64"), command="true",
                                      instances=instances)], backup=BackupPolicy(enabled=False))


def run(way: str, instances: int, ends: int, folder: Path, fsync: bool) -> dict:
    """``ends`` instance ends of a fresh job, one checkpoint each: seconds and bytes per end."""
    clock = FakeClock()
    path = folder / f"{way}-{instances}.json"
    for leftover in folder.glob(f"{way}-{instances}.json*"):
        leftover.unlink()
    checkpoint = Checkpoint(path)
    core = checkpoint.restore("job-1", job(instances), clock) if way == "journal" else \
        AppMasterCore("job-1", job(instances), clock)
    runs: dict[str, tuple[int, int]] = {}

    def follow(actions) -> None:
        for action in actions:
            if isinstance(action, ToWorker) and isinstance(action.message, amp.Assign):
                runs[action.worker_id] = (action.message.instance, action.message.attempt)

    for w in range(WORKERS):
        follow(core.worker_joined(f"w{w}", "map", f"h{w % 4}"))
    written = 0
    with mock.patch("os.fsync") if not fsync else _nothing():
        if way == "journal":
            checkpoint.save(core)
            base = checkpoint.counters["journal_bytes"] + checkpoint.counters["snapshot_bytes"]
        started = time.perf_counter()
        cpu = time.process_time()
        for n in range(ends):
            worker = f"w{n % WORKERS}"
            instance, attempt = runs.pop(worker)
            clock.advance(0.01)
            follow(core.instance_done(worker, instance, attempt, True))
            if way == "journal":
                checkpoint.save(core)
            else:
                written += write_snapshot(path, core.snapshot())
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    if way == "journal":
        written = checkpoint.counters["journal_bytes"] + checkpoint.counters["snapshot_bytes"] - base
        checkpoint.close()
    return {"ms_per_end": 1000 * wall / ends, "cpu_ms_per_end": 1000 * cpu / ends, "bytes_per_end": written / ends,
            "compactions": checkpoint.counters["compactions"] - (1 if way == "journal" else 0)}


# ------------------------------------------------------------ hard state
def hard_state_document(number: int) -> dict:
    """A job file as a client submits it: one unit of 2 slots, 2 instances."""
    return {"job": {"name": f"bench-{number}", "units": [
        {"name": "u0", "slots": 2, "cpus": 0.5, "mem": 256, "instances": 2, "command": "sleep 3600"}]}}


class Leader:
    """A ``JobCore`` the way the service runs it against a store: a
    ``Persist`` is written before the events it holds up go on."""

    def __init__(self, store, clock: FakeClock, persist: bool = True) -> None:
        self.store = store
        self.core = JobCore(FuxiCore(clock=clock), persist=persist, adopt_window=ADOPT_WINDOW_S)
        self.stimuli = 0
        self.written = 0
        self.launched: dict[str, Any] = {}    # slot id -> slot, from the launches

    def handle(self, event_type, *fields, **named) -> list:
        self.stimuli += 1
        pending = self.core.handle(event_type(*fields, **named, stimulus_id=f"s{self.stimuli}"))
        out = []
        while pending:
            command = pending.pop(0)
            if isinstance(command, Persist):
                records = {key: hard_records.encode(record) for key, record in command.records.items()}
                self.written += sum(map(len, records.values()))
                self.store.write(records, command.deleted)
                self.stimuli += 1
                pending = self.core.handle(Persisted(command.waiting, stimulus_id=f"s{self.stimuli}")) + pending
            else:
                if isinstance(command, LaunchSlots):
                    for slot in command.slots:
                        self.launched[slot.id] = slot
                out.append(command)
        return out


ADOPT_WINDOW_S = 30.0


def machine_offers(machines: int, prefix: str) -> list:
    return [Offer(f"{prefix}{i}", f"agent-{i:05d}", f"h{i:05d}", Resources.parse("cpus:8;mem:32768"),
                  {"room": f"er{i % 20}"}) for i in range(machines)]


def fill(store, jobs: int, machines: int) -> tuple[dict, dict[str, Any], Leader]:
    """The first leader: ``jobs`` submissions (timed), their AppMasters, their slots."""
    clock = FakeClock()
    leader = Leader(store, clock)
    leader.handle(DriverRegistered, framework_id="bench-framework")
    times, ids, tokens = [], [], {}
    started = time.perf_counter()
    for number in range(jobs):
        document = hard_state_document(number)
        token = f"{number:032x}"
        begun = time.perf_counter()
        out = leader.handle(JobSubmitted, parse_job(document), document, token, "bench")
        times.append(time.perf_counter() - begun)
        (job_id,) = [c.job_id for c in out if isinstance(c, JobAccepted)]
        ids.append(job_id)
        tokens[job_id] = token
    filling = time.perf_counter() - started
    bytes_submitted = leader.written
    begun = time.perf_counter()
    for number, job_id in enumerate(ids):
        leader.handle(AppMasterStarted, job_id, AppMasterRecord(f"tcp://10.0.{number // 250}.{number % 250}:7000",
                                                                1000 + number, "bench-host", "zk://bench"))
    appmasters = time.perf_counter() - begun
    leader.handle(OffersReceived, machine_offers(machines, "first-"))
    slots = leader.launched
    assert len(slots) == 2 * jobs, f"{len(slots)} slots launched for {jobs} jobs of 2"
    result = {"jobs": jobs, "submissions_s": filling, "stored_bytes": leader.written,
              "bytes_per_submission": bytes_submitted / jobs,
              "submit_ms_first": _ms_spread(times[:EDGE]), "submit_ms_last": _ms_spread(times[-EDGE:]),
              "appmaster_started_ms_per_job": 1000 * appmasters / jobs, "slots_running": len(slots)}
    return result, {"tokens": tokens, "slots": slots}, leader


def failover(store, context: dict, machines: int) -> dict:
    """A new leader over the store: each step's seconds (module docstring)."""
    slots, tokens = context["slots"], context["tokens"]
    records_module = hard_records
    steps: dict[str, float] = {}
    cpu: dict[str, float] = {}
    collections: dict[str, float] = {}
    clock = FakeClock()
    offers = machine_offers(machines, "second-")

    def timed(name: str, action):
        gc_before = _gc_seconds[0]
        begun, cpu_begun = time.perf_counter(), time.process_time()
        value = action()
        steps[name] = time.perf_counter() - begun
        cpu[name] = time.process_time() - cpu_begun
        collections[name] = _gc_seconds[0] - gc_before
        return value

    stored = timed("load", store.load)
    state = timed("decode", lambda: records_module.decode(stored))
    leader = Leader(store, clock)
    timed("recover", lambda: leader.handle(Recover, state.service, list(state.jobs.values())))

    def reconcile() -> None:
        leader.handle(DriverRegistered, framework_id=state.service.framework_id if state.service else "")
        for slot_id, slot in slots.items():
            leader.handle(WorkerUpdate, TaskStatus(slot_id, TaskState.RUNNING, agent_id=slot.agent_id,
                                                   source="SOURCE_MASTER"))

    timed("reconcile", reconcile)
    claims: dict[str, dict] = {}
    for slot_id, slot in slots.items():
        claims.setdefault(slot.job_id, {})[slot_id] = [slot.unit, slot.hostname, slot.room, slot.agent_id]

    def adopt() -> None:
        for number, (job_id, claimed) in enumerate(claims.items()):
            report = {"slots": claimed, "units": {"u0": {"desired": 2}}}
            leader.handle(AppMasterRequest, protocol.Progress(number, job_id, tokens[job_id], report))

    timed("adopt", adopt)
    launches = timed("first_pass", lambda: leader.handle(OffersReceived, offers))
    clock.advance(ADOPT_WINDOW_S + 1)
    timed("window", lambda: leader.handle(Tick))
    held = leader.core.scheduler.held_slots()
    if len(held) != len(slots) or any(isinstance(c, LaunchSlots) for c in launches):
        raise SystemExit(f"the new leader holds {len(held)} of {len(slots)} slots after the failover "
                         f"(launched {sum(isinstance(c, LaunchSlots) for c in launches)} new ones)")
    return {"steps_s": steps, "total_s": sum(steps.values()), "jobs_recovered": len(leader.core.jobs),
            "slots_adopted": len(held), "records_read": len(stored), "cpu_s": cpu, "cpu_total_s": sum(cpu.values()),
            "gc_s": collections}


_gc_seconds = [0.0]     # the garbage collector's time so far (gc.callbacks)
_gc_started = [0.0]


def _time_collections(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_started[0] = time.perf_counter()
    else:
        _gc_seconds[0] += time.perf_counter() - _gc_started[0]


def _ms_spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": 1000 * statistics.median(ordered), "p90": 1000 * ordered[int(0.9 * (len(ordered) - 1))],
            "max": 1000 * ordered[-1]}


class _ZooKeeperStores:
    """A ZooKeeper server (Debian's, as the tests start it) and a record store in it per leader."""

    def __init__(self, folder: Path) -> None:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from zk_helpers import ZooKeeperServer

        self.server = ZooKeeperServer(folder / "zookeeper")
        self.server.start()
        self.clients: list = []

    def store(self, leader: int):
        from mesoslike import ZkUrl, ZooKeeperRecordStore
        from mesoslike.ha.zookeeper import connect

        client = connect(ZkUrl.parse(self.server.url("/bench")))
        self.clients.append(client)
        fence = client.create("/bench/leader-", ephemeral=True, sequence=True, makepath=True)
        store = ZooKeeperRecordStore(client, "/bench/registry", lambda: fence)
        store.load()
        return store

    def close(self) -> None:
        for client in self.clients:
            client.stop()
            client.close()
        self.server.stop()


def hard_state(jobs: int, machines: int, stores: list[str], rounds: int, folder: Path) -> dict:
    """The checkpoint and failover of ``jobs`` running jobs in each kind of store."""
    results: dict = {}
    for kind in stores:
        series = []
        for r in range(rounds):
            zookeeper = _ZooKeeperStores(folder / f"zk-{r}") if kind == "zookeeper" else None
            try:
                if zookeeper is not None:
                    first = zookeeper.store(1)
                else:
                    first = FileRecordStore(folder / f"state-{r}")
                filled, context, _ = fill(first, jobs, machines)
                if zookeeper is None:
                    first.close()        # the old leader's lock goes with it (kill -9 releases it too)
                    second = FileRecordStore(folder / f"state-{r}")
                else:
                    second = zookeeper.store(2)
                    second._stored = None   # a new leader: it has read nothing yet (failover() loads)
                recovered = failover(second, context, machines)
                if zookeeper is None:
                    second.close()
            finally:
                if zookeeper is not None:
                    zookeeper.close()
            series.append({"checkpoint": filled, "failover": recovered})
            log(f"  {kind}, round {r + 1}: submit {filled['submit_ms_last']['median']:.2f} ms median "
                f"(last {EDGE}), failover {recovered['total_s']:.2f} s ({recovered['cpu_total_s']:.2f} s cpu): "
                + ", ".join(f"{name} {seconds:.2f} ({recovered['cpu_s'][name]:.2f} cpu, "
                            f"{recovered['gc_s'][name]:.2f} gc)" for name, seconds in recovered["steps_s"].items()))
        totals = [run["failover"]["total_s"] for run in series]
        results[kind] = {"rounds": series, "failover_total_s_median": statistics.median(totals),
                         "failover_cpu_s_median": statistics.median(run["failover"]["cpu_total_s"] for run in series),
                         "submit_ms_last_median": statistics.median(
                             run["checkpoint"]["submit_ms_last"]["median"] for run in series)}
    return results


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,100000", help="instances per job, comma-separated "
                                                               "(default 1000,100000)")
    parser.add_argument("--ends", type=int, default=500, help="instance ends timed per run (default 500)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each way in turn (default 3)")
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: a temporary "
                                                                "directory; its disk's fsync is measured)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--hard-state", type=int, default=0, metavar="JOBS",
                        help="measure the Fuxi service's hard state at JOBS running jobs instead (module docstring)")
    parser.add_argument("--machines", type=int, default=10000, help="machines offered with --hard-state "
                                                                    "(default 10000)")
    parser.add_argument("--stores", default="file,zookeeper", help="with --hard-state (default file,zookeeper)")
    args = parser.parse_args(argv)
    if args.hard_state:
        return main_hard_state(args, argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    imported = blob_ids(CODE_FILES)
    head, dirty = git_state(CODE_FILES)
    doc, started, load_start = start("Fuxi AppMaster checkpoint per instance end: whole snapshot vs journal", argv,
                                     {"git_blobs": imported, "git_head": head,
                                      "measured_files_differ_from_head": dirty})
    doc["config"] = {"sizes": sizes, "ends": args.ends, "rounds": args.rounds, "workers": WORKERS,
                     "one_checkpoint_per_end": True,
                     "timer": "time.perf_counter / process_time over the ends; medians over the rounds"}
    folder = args.dir or Path(tempfile.mkdtemp(prefix="fuxi-checkpoint-"))
    doc["config"]["dir"] = str(folder)
    results: dict = {}
    for size in sizes:
        ends = min(args.ends, size - WORKERS)
        series: dict[str, list[dict]] = {}
        for r in range(args.rounds):
            for fsync in (True, False):
                for way in ("snapshot", "journal"):
                    key = f"{way}{'' if fsync else '_no_fsync'}"
                    result = run(way, size, ends, folder, fsync)
                    series.setdefault(key, []).append(result)
                    log(f"  {size} instances, round {r + 1}, {key}: {result['ms_per_end']:.3f} ms/end, "
                        f"{result['bytes_per_end']:.0f} B/end")
        results[str(size)] = {key: {"ms_per_end_median": statistics.median(x["ms_per_end"] for x in runs),
                                    "cpu_ms_per_end_median": statistics.median(x["cpu_ms_per_end"] for x in runs),
                                    "bytes_per_end": runs[0]["bytes_per_end"], "compactions": runs[0]["compactions"],
                                    "rounds": runs} for key, runs in series.items()}
        results[str(size)]["ends"] = ends
        for suffix in ("", "_no_fsync"):
            results[str(size)][f"speedup{suffix}"] = (results[str(size)][f"snapshot{suffix}"]["ms_per_end_median"]
                                                      / results[str(size)][f"journal{suffix}"]["ms_per_end_median"])
    doc["results"] = results
    finish(doc, started, load_start, args.out, log, code_changed=blob_ids(CODE_FILES) != imported)
    if args.dir is None:
        for leftover in folder.iterdir():
            leftover.unlink()
        os.rmdir(folder)
    return 0


def main_hard_state(args: argparse.Namespace, argv: list[str] | None) -> int:
    imported = blob_ids(HARD_STATE_FILES)
    head, dirty = git_state(HARD_STATE_FILES)
    doc, started, load_start = start("Fuxi service hard state: checkpoint per submission and a new leader's "
                                     "recovery", argv, {"git_blobs": imported, "git_head": head,
                                                        "measured_files_differ_from_head": dirty})
    stores = [kind for kind in args.stores.split(",") if kind]
    doc["config"] = {"jobs": args.hard_state, "machines": args.machines, "stores": stores, "rounds": args.rounds,
                     "job": hard_state_document(0), "adopt_window_s": ADOPT_WINDOW_S,
                     "timer": "time.perf_counter and time.process_time around each step; the garbage collector's share "
                              "from gc.callbacks (the service runs with the collector on); medians over the rounds"}
    folder = args.dir or Path(tempfile.mkdtemp(prefix="fuxi-hard-state-"))
    gc.callbacks.append(_time_collections)
    doc["config"]["dir"] = str(folder)
    try:
        doc["results"] = hard_state(args.hard_state, args.machines, stores, args.rounds, folder)
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)
    finish(doc, started, load_start, args.out, log, code_changed=blob_ids(HARD_STATE_FILES) != imported)
    return 0


if __name__ == "__main__":
    sys.exit(main())
