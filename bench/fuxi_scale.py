#!/usr/bin/env python3
"""Fuxi scheduler at scale: the first scheduling pass, first-fit index vs naive scan.

Issue 16 §3 (seed 000: one FuxiMaster, 20,000 machines; seed 002: 5,000
machines, 10,000 concurrent jobs). Jobs are submitted to a fresh
``FuxiCore``, then the first offer batch arrives, one offer per machine,
and ``on_offers`` runs its first pass: active scheduling of every unit, the
gangs, preemption, the answers to every offer. That pass is timed twice on
the same workload, in the same run, interleaved round by round:

``tree``
    ``FuxiCore(machine_index="tree")``: placement asks a segment tree of the
    machines' free room for the next machine that fits (``frameworks/fuxi/
    machines.py``), so machines that cannot take a slot are not looked at.
``scan``
    ``FuxiCore(machine_index="scan")``: the same scheduler with the naive
    walk over the machines for each of those questions. Both must produce
    the same commands, and the script checks that they do.
``previous``
    The same index at git revision ``--previous`` (the code before the last
    round of speed-ups: ``frameworks/fuxi/*.py`` loaded from git as a package
    of its own), so a speed-up is measured against its baseline in one run.
    It must make the same decisions too.
``before``
    The scheduler before issue 16 (``frameworks/fuxi/core.py`` at git
    revision ``--before``, loaded with ``git show``), which scanned every
    machine for every unit. Its decisions differ (issue 16 changed the
    semantics); it is timed once, as the issue did.

The workload (seeded):

* Machines drawn with replacement from the 1,523 nodes of the Alibaba openb
  2023 trace (``mesoslike/sim/data/alibaba-openb-2023``: 27 shapes, 8-128 cores,
  0-8 GPUs), in 20 engine rooms. The cluster is half busy: each machine
  offers a fraction of its resources drawn uniformly from ``--free``
  (default 0.2-0.8), so free room is fragmented.
* Jobs of 1-3 ScheduleUnits; slot sizes drawn from the trace's 8,152 pods
  (cpus, memory, GPUs), priority from the pod's QoS band; slots per unit
  log-normal (sigma 0.8) around the case's median: 8 for 1,000 jobs on
  20,000 machines, 2 for 10,000 jobs on 5,000. Units: 10% prefer 1-3 named
  machines then the cluster, 5% a room then the cluster, 3% only a room,
  20% have ``max_per_machine = 2``, 2% are all-or-nothing gangs (at most 16
  slots). Three quota groups: ``default`` (unlimited, FIFO), ``batch``
  (unlimited, FAIR), ``prod`` (FIFO, capped at 10% of the cluster).

Two more shapes of job, named after a case (``JOBSxMACHINESxSLOTS:SHAPE``):
``plain`` jobs have one unit of exactly SLOTS slots and no locality, gang or
``max_per_machine`` (issue 30: 10,000 such jobs on 100,000 machines);
``local`` jobs have three units of SLOTS slots each with locality spread
uniformly over the machines and rooms: ``u0`` prefers 1-3 named machines
then the cluster, ``u1`` a room then the cluster, ``u2`` 1-2 machines, then
a room, then the cluster. Slot sizes, priorities and the three quota groups
are drawn as above; ``mixed`` (the default) is the workload above.

After the first passes, ``--incremental N`` steady-state passes follow on
the tree's core (and the previous revision's, interleaved): in each, the
clock moves one second, two granted slots end (their jobs return them), one
job finishes and a new one of the same shape arrives; the offers are those
of the machines whose free room grew (one offer per agent, all its free
room: what the master offers after a task end). The bench keeps each
machine's free room from the commands (launches take it, ends and kills
give it back). Timed per pass like the first; both cores must decide the
same. ``--scale`` runs issue 30's cases and the sweep of the plot
(``--plot FILE``: first-pass and incremental cost against machines, one line
per job count; ``--plot-from RESULT.json`` redraws it without measuring).

In the second case demand exceeds the free room about threefold, a backlog:
most units wait after the pass. For each case it reports the pass's wall and
process CPU time (median over the rounds; the collection of the objects the
pass made, right after it, counted in: the core defers it to the end of the
pass), slots granted, units left
waiting, and the speed-up. Prints one JSON document on stdout (progress on
stderr); ``--out FILE`` also writes it there. It reports; it never fails on
slow numbers.

    python bench/fuxi_scale.py --out bench/results/fuxi_scale.json
    python bench/fuxi_scale.py --quick
    python bench/fuxi_scale.py --scale --out bench/results/fuxi_scale_100k.json --plot docs/img/fuxi-scale.png
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))   # run from a checkout without installing
sys.path.insert(0, str(HERE))

from benchlib import blob_ids, finish, git_state, start  # noqa: E402
from mesoslike import Offer, Resources  # noqa: E402
from mesoslike.clock import FakeClock  # noqa: E402
from mesoslike.sim import DEFAULT_TRACE_DIR  # noqa: E402
from mesoslike_frameworks.fuxi.core import FuxiCore, KillSlot, LaunchSlots, SlotGranted, SlotRevoked  # noqa: E402
from mesoslike_frameworks.fuxi.deferred_gc import deferred_collection  # noqa: E402
from mesoslike_frameworks.fuxi.model import JobSpec, Locality, UnitSpec  # noqa: E402

DATA = Path(os.environ.get("MESOSLIKE_OPENB_DIR", DEFAULT_TRACE_DIR))
QOS_BAND = {"LS": 0, "Guaranteed": 100, "Burstable": 200, "BE": 300}
ROOMS = 20
DEFAULT_CASES = "1000x20000x8,10000x5000x2"
BEFORE = "ebb7ef4"              # main when issue 16 started: the scheduler that took 13.6 s and 17.9 s
PREVIOUS = "41c223d"            # main before the first pass was made cheaper (1.26 s and 1.80 s quoted)
TARGET_SECONDS = 1.0            # issue 16 §3: each first pass < 1 s
TARGETS = {"plain": 1.0, "local": 2.0}   # issue 30 §3 at 100,000 machines
INCREMENTAL_TARGET_MS = 10.0    # issue 30 §3: a steady-state pass (a few units changing)
QUICK = {"cases": "200x2000x8,1000x500x2", "rounds": 1}
SHAPES = ("mixed", "plain", "local")
#: issue 30 §3 (10,000 jobs on 100,000 machines) and the sweep of the plot
SCALE_CASES = ("10000x100000x2:plain,10000x100000x2:local,"
               + ",".join(f"{jobs}x{machines}x2:plain" for jobs in (1000, 10000)
                          for machines in (1000, 3000, 10000, 30000, 100000) if (jobs, machines) != (10000, 100000)))
SCALE = {"cases": SCALE_CASES, "rounds": 3, "scan_rounds": 0, "incremental": 50}
CODE_FILES = [*(f"frameworks/mesoslike_frameworks/fuxi/{name}.py"
                for name in ("core", "books", "preemption", "machines", "waiting_queue", "quota", "blacklist")),
              "mesoslike/resources.py", "bench/fuxi_scale.py"]


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


# -------------------------------------------------------------- workload
def read_trace() -> tuple[list[dict[str, float]], list[tuple[dict[str, float], int]]]:
    with open(DATA / "openb_node_list_all_node.csv", newline="") as fh:
        nodes = [{"cpus": int(r["cpu_milli"]) / 1000, "mem": int(r["memory_mib"]), "gpus": int(r["gpu"])}
                 for r in csv.DictReader(fh)]
    with open(DATA / "openb_pod_list_default.csv", newline="") as fh:
        pods = [({"cpus": int(r["cpu_milli"]) / 1000, "mem": int(r["memory_mib"]),
                  "gpus": int(r["num_gpu"]) * int(r["gpu_milli"]) / 1000}, QOS_BAND[r["qos"]])
                for r in csv.DictReader(fh)]
    return nodes, pods


def workload(jobs: int, machines: int, slots_median: float, args, trace,
             shape: str = "mixed") -> tuple[list[Offer], list[JobSpec], dict]:
    nodes, pods = trace
    seed = f"fuxi-scale-{jobs}x{machines}-{args.seed}" + ("" if shape == "mixed" else f"-{shape}")
    rng = random.Random(seed)
    low, high = args.free
    offers, total, hosts = [], {"cpus": 0.0, "mem": 0.0, "gpus": 0.0}, []
    for i in range(machines):
        node = nodes[rng.randrange(len(nodes))]
        share = rng.uniform(low, high)
        free = {kind: (round(amount * share, 1) if kind == "cpus" else math.floor(amount * share))
                for kind, amount in node.items()}
        for kind, amount in node.items():
            total[kind] += amount
        host = f"m{i:05d}"
        hosts.append(host)
        offers.append(Offer(f"o{i}", f"agent-{i:05d}", host, Resources({k: v for k, v in free.items() if v > 0}),
                            {"room": f"er{i % ROOMS}"}))
    make_job = {"mixed": mixed_job, "plain": plain_job, "local": local_job}[shape]
    specs = [make_job(f"job{j}", rng, pods, hosts, slots_median) for j in range(jobs)]
    prod = Resources({k: v * 0.1 for k, v in total.items()})
    return offers, specs, {"prod": prod}


def _quota_group(rng: random.Random) -> tuple[str, str]:
    """A job's quota group and the policy named with it (the core before
    issue 16 took the policy per job)."""
    group = rng.choice(("default", "default", "batch", "prod"))
    return group, "FAIR" if group == "batch" else "FIFO"


def _slot(rng: random.Random, pods) -> tuple[Resources, int]:
    """A slot size drawn from the trace's pods and a priority in its QoS band."""
    size, band = pods[rng.randrange(len(pods))]
    return Resources({k: v for k, v in size.items() if v > 0}), band + rng.randrange(100)


def mixed_job(name: str, rng: random.Random, pods, hosts: list[str], slots_median: float) -> JobSpec:
    """1-3 units, log-normal slots, some locality, gangs and max_per_machine (module docstring)."""
    machines = len(hosts)
    units = []
    for u in range(rng.choice((1, 1, 1, 2, 2, 3))):
        size, band = pods[rng.randrange(len(pods))]
        slots = max(1, min(200, round(math.exp(rng.gauss(math.log(slots_median), 0.8)))))
        draw = rng.random()
        locality: list[Locality] = []
        gang = False
        if draw < 0.10:
            locality = [Locality.machine(hosts[rng.randrange(machines)]) for _ in range(rng.randint(1, 3))]
            locality.append(Locality.cluster(slots))
        elif draw < 0.15:
            locality = [Locality.room(f"er{rng.randrange(ROOMS)}", slots), Locality.cluster(slots)]
        elif draw < 0.18:
            locality = [Locality.room(f"er{rng.randrange(ROOMS)}", slots)]
        elif draw < 0.20:
            gang, slots = True, min(slots, 16)
        units.append(UnitSpec(f"u{u}", slots, Resources({k: v for k, v in size.items() if v > 0}),
                              priority=band + rng.randrange(100), all_or_nothing=gang, locality=locality,
                              max_per_machine=2 if rng.random() < 0.2 else None))
    group, policy = _quota_group(rng)
    return JobSpec(name, units, quota_group=group, policy=policy)


def plain_job(name: str, rng: random.Random, pods, hosts: list[str], slots_median: float) -> JobSpec:
    """One unit of exactly ``slots_median`` slots, no locality."""
    slot, priority = _slot(rng, pods)
    group, policy = _quota_group(rng)
    return JobSpec(name, [UnitSpec("u0", round(slots_median), slot, priority=priority)], quota_group=group,
                   policy=policy)


def local_job(name: str, rng: random.Random, pods, hosts: list[str], slots_median: float) -> JobSpec:
    """Three units of ``slots_median`` slots: named machines, a room, both (then the cluster)."""
    slots = round(slots_median)
    machines = len(hosts)

    def named(count: int) -> list[Locality]:
        return [Locality.machine(hosts[rng.randrange(machines)]) for _ in range(count)]

    preferences = [
        [*named(rng.randint(1, 3)), Locality.cluster(slots)],
        [Locality.room(f"er{rng.randrange(ROOMS)}", slots), Locality.cluster(slots)],
        [*named(rng.randint(1, 2)), Locality.room(f"er{rng.randrange(ROOMS)}", slots), Locality.cluster(slots)],
    ]
    units = []
    for u, locality in enumerate(preferences):
        slot, priority = _slot(rng, pods)
        units.append(UnitSpec(f"u{u}", slots, slot, priority=priority, locality=locality))
    group, policy = _quota_group(rng)
    return JobSpec(name, units, quota_group=group, policy=policy)


def make_core(variant: str, groups: dict, before: type | None, previous: types.ModuleType | None = None) -> Any:
    if variant == "before":
        assert before is not None
        return before({"batch": None, **groups}, clock=FakeClock())
    if variant == "previous":
        assert previous is not None
        return previous.core.FuxiCore({"batch": None, **groups}, policies={"batch": "FAIR"}, clock=FakeClock(),
                                      machine_index="tree")
    return FuxiCore({"batch": None, **groups}, policies={"batch": "FAIR"}, clock=FakeClock(), machine_index=variant)


def first_pass(variant: str, offers, specs, groups, before: type | None = None,
               previous: types.ModuleType | None = None) -> tuple[float, float, list, Any]:
    core = make_core(variant, groups, before, previous)
    if variant == "previous":
        assert previous is not None
        specs = [previous_spec(spec, previous.model) for spec in specs]
    for spec in specs:
        core.submit(spec)
    gc.collect()
    gc.freeze()
    wall, cpu, out = timed_pass(core, offers)
    gc.unfreeze()
    return wall, cpu, out, core


def timed_pass(core, offers: list[Offer]) -> tuple[float, float, list]:
    """One ``on_offers``, wall and CPU seconds, the young collection after it
    counted in (deferred to the end of the pass, not skipped)."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    with deferred_collection():    # as the service runs a pass (older revisions' cores defer it themselves)
        out = core.on_offers(offers)
    gc.collect(0)
    return time.perf_counter() - wall0, time.process_time() - cpu0, out


class Steady:
    """A core after its first pass, driven through steady-state passes
    (module docstring): it keeps every machine's free room and the slots
    launched from the core's commands, and makes the changes of each step
    with its own seeded generator, so two cores that decide alike get the
    same changes."""

    def __init__(self, core, offers: list[Offer], out: list, make_job, trace, hosts: list[str], slots: float,
                 model: types.ModuleType | None, seed: str) -> None:
        self.core = core
        self.make_job = make_job
        self.pods = trace[1]
        self.hosts = hosts
        self.slots = slots
        self.model = model            # the previous revision's model classes, or None for this checkout's
        self.rng = random.Random(seed)
        self.free = {o.agent_id: dict(o.resources.millis()) for o in offers}
        self.where = {o.agent_id: (o.hostname, o.attributes) for o in offers}
        self.held: dict[str, Any] = {}     # slot id -> slot, launched and not ended
        self.held_ids: list[str] = []      # the same ids (and some ended: skipped when drawn) to draw from
        self.jobs = list(core.jobs)
        self.changed: set[str] = set()
        self.submitted = 0
        self.apply(out)

    def apply(self, out: list) -> None:
        for command in out:
            kind = type(command).__name__
            if kind == LaunchSlots.__name__:
                free = self.free[command.agent_id]
                for slot in command.slots:
                    self.held[slot.id] = slot
                    self.held_ids.append(slot.id)
                    for name, amount in slot.resources.millis().items():
                        free[name] = free.get(name, 0) - amount
            elif kind == KillSlot.__name__:
                self._give_back(self.held.pop(command.slot_id, None))

    def _give_back(self, slot) -> None:
        if slot is None:
            return
        free = self.free[slot.agent_id]
        for name, amount in slot.resources.millis().items():
            free[name] = free.get(name, 0) + amount
        self.changed.add(slot.agent_id)

    def step(self, number: int) -> list[Offer]:
        """The changes of one step (two slots end, one job ends, one arrives);
        the offers of the machines whose room grew."""
        core, rng = self.core, self.rng
        core.clock.advance(1.0)
        self.changed = set()
        for _ in range(2):
            while self.held_ids:
                position = rng.randrange(len(self.held_ids))
                slot_id = self.held_ids[position]
                self.held_ids[position] = self.held_ids[-1]
                self.held_ids.pop()
                slot = self.held.pop(slot_id, None)
                if slot is not None and core.holds(slot_id):
                    self.apply(core.release(slot_id, keep_desire=False))
                    self._give_back(slot)
                    break
        if self.jobs:
            position = rng.randrange(len(self.jobs))
            job_id = self.jobs[position]
            self.jobs[position] = self.jobs[-1]
            self.jobs.pop()
            self.apply(core.finish_job(job_id))
        self.submitted += 1
        spec = self.make_job(f"arrival{self.submitted}", rng, self.pods, self.hosts, self.slots)
        if self.model is not None:
            spec = previous_spec(spec, self.model)
        job_id, out = core.submit(spec)
        self.jobs.append(job_id)
        self.apply(out)
        offers = []
        for agent_id in sorted(self.changed):
            room = {name: amount for name, amount in self.free[agent_id].items() if amount > 0}
            if room:
                hostname, attributes = self.where[agent_id]
                offers.append(Offer(f"s{number}-{agent_id}", agent_id, hostname, Resources.from_millis(room),
                                    attributes))
        return offers


def incremental(cores: dict[str, Any], offers: list[Offer], outs: dict[str, list], shape: str, trace,
                slots: float, steps: int, previous: types.ModuleType | None, seed: str) -> dict:
    """``steps`` steady-state passes on each core (interleaved step by step):
    their times, and that the cores decided alike."""
    hosts = [o.hostname for o in offers]
    make_job = {"mixed": mixed_job, "plain": plain_job, "local": local_job}[shape]
    drivers = {variant: Steady(core, offers, outs[variant], make_job, trace, hosts, slots,
                               previous.model if variant == "previous" and previous else None, seed)
               for variant, core in cores.items()}
    times: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu": []} for v in drivers}
    batch_sizes: list[int] = []
    granted: dict[str, int] = {v: 0 for v in drivers}
    gc.collect()
    gc.freeze()
    try:
        for number in range(steps):
            signatures = {}
            for variant, driver in drivers.items():
                batch = driver.step(number)
                gc.collect(1)
                wall, cpu, out = timed_pass(driver.core, batch)
                driver.apply(out)
                times[variant]["wall"].append(wall)
                times[variant]["cpu"].append(cpu)
                signatures[variant] = signature(out)
                granted[variant] += sum(1 for c in out if type(c).__name__ == SlotGranted.__name__)
                if variant == "tree":
                    batch_sizes.append(len(batch))
            if len(set(map(repr, signatures.values()))) > 1:
                raise SystemExit(f"steady-state pass {number + 1}: the cores decided differently")
    finally:
        gc.unfreeze()
    result: dict = {"passes": steps, "offers_per_pass_median": statistics.median(batch_sizes) if batch_sizes else 0,
                    "slots_granted": granted["tree"],
                    "units_waiting_after": sum(1 for job in drivers["tree"].core.status()["jobs"]
                                               for u in job["units"] if u["waiting"])}
    for variant, series in times.items():
        result[variant] = {f"{kind}_ms_{name}": 1000 * value for kind in ("wall", "cpu")
                           for name, value in _spread(series[kind]).items()}
        result[variant]["cpu_ms"] = [round(1000 * t, 3) for t in series["cpu"]]
    result["goal_ms"] = INCREMENTAL_TARGET_MS
    result["goal_met"] = result["tree"]["cpu_ms_p90"] <= INCREMENTAL_TARGET_MS
    return result


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            "max": ordered[-1]}


def load_previous(rev: str) -> types.ModuleType | None:
    """The Fuxi package (``frameworks/mesoslike_frameworks/fuxi``, or
    ``frameworks/fuxi`` before it moved) as it was at git revision ``rev``, imported as a
    package of its own (``fuxi_previous``; its imports of the package
    rewritten to it) from a temporary directory. None if git or the
    revision is not there."""
    import importlib
    import tempfile
    try:
        names: list[str] = []
        for place in ("frameworks/mesoslike_frameworks/fuxi/", "frameworks/fuxi/"):   # its place now, and before
            names = subprocess.run(["git", "ls-tree", "--name-only", rev, place], cwd=ROOT,
                                   capture_output=True, text=True, timeout=30, check=True).stdout.split()
            if names:
                break
        folder = Path(tempfile.mkdtemp(prefix="fuxi-previous-")) / "fuxi_previous"
        folder.mkdir()
        for name in names:
            if name.endswith(".py"):
                source = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=ROOT, capture_output=True, text=True,
                                        timeout=30, check=True).stdout
                source = source.replace("mesoslike.frameworks.fuxi", "fuxi_previous")
                (folder / Path(name).name).write_text(source.replace("mesoslike_frameworks.fuxi", "fuxi_previous"))
    except (OSError, subprocess.SubprocessError):
        return None
    sys.path.insert(0, str(folder.parent))
    package = importlib.import_module("fuxi_previous")
    package.core = importlib.import_module("fuxi_previous.core")     # type: ignore[attr-defined]
    package.model = importlib.import_module("fuxi_previous.model")   # type: ignore[attr-defined]
    return package


def previous_spec(spec: JobSpec, model: types.ModuleType) -> Any:
    """``spec`` in the previous revision's own model classes."""
    return model.JobSpec(spec.name, [model.UnitSpec(
        u.name, u.slots, u.slot, priority=u.priority, all_or_nothing=u.all_or_nothing, max_per_machine=u.max_per_machine,
        locality=[model.Locality(p.kind, p.count, p.target) for p in u.locality]) for u in spec.units],
        quota_group=spec.quota_group, policy=spec.policy)


def load_before(rev: str) -> type | None:
    """``FuxiCore`` as it was at git revision ``rev`` (the scheduler before
    issue 16), loaded from the repository: the baseline the issue measured.
    None if git or the revision is not there."""
    try:
        source = subprocess.run(["git", "show", f"{rev}:frameworks/fuxi/core.py"], cwd=ROOT, capture_output=True,
                                text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    module = types.ModuleType("fuxi_core_before")
    source = source.replace("mesoslike.frameworks.", "mesoslike_frameworks.")   # the package's name now
    exec(compile(source, f"{rev}:frameworks/fuxi/core.py", "exec"), module.__dict__)  # noqa: S102 - our own code
    return module.FuxiCore


def signature(out: list) -> list:
    """What a pass decided, comparable between runs: grants, launches, revokes
    (by class name: the previous revision has command classes of its own)."""
    sig = []
    for command in out:
        kind = type(command).__name__
        if kind == SlotGranted.__name__:
            sig.append(("grant", command.slot.id, command.slot.agent_id))
        elif kind == LaunchSlots.__name__:
            sig.append(("launch", command.agent_id, len(command.slots)))
        elif kind == SlotRevoked.__name__:
            sig.append(("revoke", command.slot_id))
    return sig


def bench_case(jobs: int, machines: int, slots_median: float, shape: str, args, trace, before: type | None,
               previous: types.ModuleType | None = None) -> dict:
    log(f"[{jobs} jobs x {machines} machines, {slots_median:g} slots per unit (median), {shape}] "
        "building the workload")
    offers, specs, groups = workload(jobs, machines, slots_median, args, trace, shape)
    rounds = {"tree": args.rounds, "previous": args.rounds if previous else 0, "scan": args.scan_rounds,
              "before": args.before_rounds if before else 0}
    times: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu": []} for v, n in rounds.items() if n}
    signatures: dict[str, list] = {}
    outcomes: dict[str, dict] = {}
    last: dict[str, tuple[Any, list]] = {}
    rss_growth: list[float] = []
    for r in range(args.rounds):
        for variant in times:
            if r >= rounds[variant]:
                continue
            last.pop(variant, None)      # the previous round's core: freed before the next is built
            rss_before = _rss()
            wall, cpu, out, core = first_pass(variant, offers, specs, groups, before, previous)
            if variant == "tree":
                rss_growth.append(_rss() - rss_before)
            times[variant]["wall"].append(wall)
            times[variant]["cpu"].append(cpu)
            sig = signature(out)
            if variant in signatures and signatures[variant] != sig:
                raise SystemExit(f"{variant}: two runs of the same pass differ")
            signatures[variant] = sig
            outcomes.setdefault(variant, outcome(core, out))
            if variant in ("tree", "previous") and args.incremental:
                last[variant] = (core, out)
            del core, out
            log(f"  round {r + 1} {variant}: {wall:.3f} s wall, {cpu:.3f} s cpu")
    same = signatures["tree"] == signatures["scan"] if "scan" in signatures else None
    if same is False:
        raise SystemExit("tree and scan made different decisions: the index is wrong")
    if "previous" in signatures and signatures["previous"] != signatures["tree"]:
        raise SystemExit(f"the scheduler at {args.previous} decided differently: a speed-up changed a decision")
    result: dict = {"jobs": jobs, "machines": machines, "shape": shape, "median_slots_per_unit": slots_median,
                    "outcome": outcomes["tree"], "tree_and_scan_agree": same,
                    "core_rss_growth_mib_first_round": round(rss_growth[0] / 2**20, 1) if rss_growth else None}
    for variant, series in times.items():
        result[variant] = {"wall_s_median": statistics.median(series["wall"]),
                           "cpu_s_median": statistics.median(series["cpu"]),
                           "wall_s": series["wall"], "cpu_s": series["cpu"]}
    if "before" in outcomes:
        result["before"]["outcome"] = outcomes["before"]
    for variant in ("previous", "scan", "before"):
        if variant in result:
            result[f"speedup_vs_{variant}_wall"] = result[variant]["wall_s_median"] / result["tree"]["wall_s_median"]
            result[f"speedup_vs_{variant}_cpu"] = result[variant]["cpu_s_median"] / result["tree"]["cpu_s_median"]
    target = TARGETS.get(shape, TARGET_SECONDS)
    result["goal_s"] = target
    result["goal_met"] = result["tree"]["wall_s_median"] < target
    # on a shared machine other processes stretch the wall time: the CPU time is the pass's own cost
    result["goal_met_cpu"] = result["tree"]["cpu_s_median"] < target
    log(f"  tree {result['tree']['wall_s_median']:.3f} s ({result['tree']['cpu_s_median']:.3f} s cpu)"
        + (f", scan {result['scan']['wall_s_median']:.3f} s" if "scan" in result else "")
        + (f", previous {result['previous']['wall_s_median']:.3f} s" if "previous" in result else "")
        + (f", before {result['before']['wall_s_median']:.3f} s" if "before" in result else "")
        + f"; {result['outcome']['slots_granted']} slots granted, "
        f"{result['outcome']['units_waiting']} of {result['outcome']['units']} units waiting")
    if last:
        cores = {variant: core for variant, (core, _) in last.items()}
        outs = {variant: out for variant, (_, out) in last.items()}
        last.clear()
        result["incremental"] = incremental(cores, offers, outs, shape, trace, slots_median, args.incremental,
                                            previous, f"steady-{jobs}x{machines}-{shape}-{args.seed}")
        steady = result["incremental"]
        log(f"  steady state: {steady['passes']} passes of ~{steady['offers_per_pass_median']:g} offers, "
            f"tree {steady['tree']['cpu_ms_median']:.2f} ms cpu median, {steady['tree']['cpu_ms_p90']:.2f} p90, "
            f"{steady['tree']['cpu_ms_max']:.2f} max"
            + (f"; previous {steady['previous']['cpu_ms_median']:.2f} ms median" if "previous" in steady else ""))
    return result


def _rss() -> int:
    """The process's resident memory now, bytes."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def outcome(core, out: list) -> dict:
    """What the pass achieved, from the core's status and commands (by class
    name: the scheduler before issue 16 has command classes of its own)."""
    status = core.status()
    units = [u for job in status["jobs"] for u in job["units"]]
    return {"units": len(units), "slots_wanted": sum(u["desired"] for u in units),
            "slots_granted": sum(1 for c in out if type(c).__name__ == "SlotGranted"),
            "units_waiting": sum(1 for u in units if u["waiting"]),
            "machines_launched_on": sum(1 for c in out if type(c).__name__ == "LaunchSlots"),
            "why_waiting": _count(u["why_waiting"] for u in units if u["waiting"])}


def _case(text: str) -> tuple[int, int, float, str]:
    case, _, shape = text.strip().partition(":")
    parts = case.split("x")
    if len(parts) != 3 or shape not in ("", *SHAPES):
        raise SystemExit(f"--cases: JOBSxMACHINESxSLOTS[:SHAPE] (SHAPE one of {', '.join(SHAPES)}), got {text!r}")
    return int(parts[0]), int(parts[1]), float(parts[2]), shape or "mixed"


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return dict(sorted(out.items()))


# --------------------------------------------------------------- the run
def code_info(imported: dict[str, str]) -> dict:
    head, dirty = git_state(CODE_FILES)
    return {"git_blobs": imported, "git_head": head, "measured_files_differ_from_head": dirty}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=None, help=f"JOBSxMACHINESxSLOTS[:SHAPE] (median slots per unit; "
                                                      f"SHAPE {'|'.join(SHAPES)}, default mixed), comma-separated "
                                                      f"(default {DEFAULT_CASES})")
    parser.add_argument("--scale", action="store_true", help=f"issue 30's cases and the plot's sweep: {SCALE_CASES} "
                                                             "(3 rounds, no scan, 50 steady-state passes)")
    parser.add_argument("--incremental", type=int, default=None, help="steady-state passes after the first "
                                                                      "(default 0; 50 with --scale)")
    parser.add_argument("--plot", type=Path, default=None, help="draw the cost against machines into this PNG "
                                                                "(needs matplotlib)")
    parser.add_argument("--plot-from", type=Path, default=None, help="only draw --plot from this result JSON")
    parser.add_argument("--rounds", type=int, default=None, help="timed first passes per case with the tree "
                                                                 "(default 5)")
    parser.add_argument("--scan-rounds", type=int, default=None, help="of which also with the scan (default 3)")
    parser.add_argument("--before", default=BEFORE, help=f"git revision of the scheduler before issue 16, timed "
                                                         f"too ('' to skip; default {BEFORE})")
    parser.add_argument("--before-rounds", type=int, default=1, help="rounds for it (default 1)")
    parser.add_argument("--previous", default=PREVIOUS, help=f"git revision of the index timed alongside, every "
                                                             f"round ('' to skip; default {PREVIOUS})")
    parser.add_argument("--free", default="0.2,0.8",
                        help="the range of the share of a machine offered free (default 0.2,0.8)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the workloads (default 1)")
    parser.add_argument("--quick", action="store_true", help="a small smoke run (seconds)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.plot_from is not None:
        if args.plot is None:
            parser.error("--plot-from needs --plot")
        plot(json.loads(args.plot_from.read_text()), args.plot)
        return 0
    preset = QUICK if args.quick else SCALE if args.scale else {}
    cases = [_case(case) for case in (args.cases or preset.get("cases", DEFAULT_CASES)).split(",") if case.strip()]
    args.rounds = args.rounds or preset.get("rounds", 5)
    args.scan_rounds = min(args.rounds, args.scan_rounds if args.scan_rounds is not None else
                           preset.get("scan_rounds", preset.get("rounds", 3)))
    args.incremental = args.incremental if args.incremental is not None else preset.get("incremental", 0)
    args.free = tuple(float(x) for x in args.free.split(","))
    if len(args.free) != 2 or not 0 < args.free[0] <= args.free[1] <= 1:
        parser.error("--free: LOW,HIGH with 0 < LOW <= HIGH <= 1")
    imported = blob_ids(CODE_FILES)
    doc, started, load_start = start(
        "Fuxi scheduler: the first pass over a busy cluster, first-fit index (tree) vs naive scan", argv,
        code_info(imported))
    doc["config"] = {"cases": [f"{j}x{m}x{s:g}:{shape}" for j, m, s, shape in cases], "rounds": args.rounds,
                     "scan_rounds": args.scan_rounds, "free_share": list(args.free), "seed": args.seed,
                     "quick": args.quick, "goal_s": TARGET_SECONDS, "goals_s_by_shape": TARGETS,
                     "incremental_passes": args.incremental, "incremental_goal_ms": INCREMENTAL_TARGET_MS,
                     "timer": "time.perf_counter and time.process_time around on_offers and the young "
                              "collection after it (gc.collect(0)); medians over the rounds; objects built before "
                              "the pass frozen (gc.freeze)",
                     "interleaved": "per round: the tree pass, the previous revision's, then the scan pass, each "
                                    "on a fresh core"}
    doc["results"] = {}
    trace = read_trace()
    before = load_before(args.before) if args.before else None
    doc["config"]["before"] = {"rev": args.before, "loaded": before is not None, "rounds": args.before_rounds}
    previous = load_previous(args.previous) if args.previous else None
    doc["config"]["previous"] = {"rev": args.previous, "loaded": previous is not None}
    for jobs, machines, slots, shape in cases:
        name = f"{jobs}x{machines}" + ("" if shape == "mixed" else f":{shape}")
        doc["results"][name] = bench_case(jobs, machines, slots, shape, args, trace, before, previous)
    doc["all_goals_met"] = all(r["goal_met"] for r in doc["results"].values())
    doc["all_goals_met_cpu"] = all(r["goal_met_cpu"] and r.get("incremental", {}).get("goal_met", True)
                                   for r in doc["results"].values())
    finish(doc, started, load_start, args.out, log, code_changed=blob_ids(CODE_FILES) != imported)
    if args.plot is not None:
        plot(doc, args.plot)
    return 0


def plot(doc: dict, path: Path) -> None:
    """The first pass's and a steady-state pass's CPU time against machines,
    a line per job count, from the ``plain`` cases of ``doc``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[int, list[dict]] = {}
    for result in doc["results"].values():
        if result.get("shape") == "plain":
            series.setdefault(result["jobs"], []).append(result)
    figure, (first, steady) = plt.subplots(1, 2, figsize=(10, 4))
    for jobs, results in sorted(series.items()):
        results.sort(key=lambda r: r["machines"])
        machines = [r["machines"] for r in results]
        label = f"{jobs:,} jobs"
        first.plot(machines, [r["tree"]["cpu_s_median"] for r in results], marker="o", label=label)
        if "previous" in results[0]:
            first.plot(machines, [r["previous"]["cpu_s_median"] for r in results], marker="x", linestyle="--",
                       label=f"{label}, before ({doc['config']['previous']['rev']})")
        with_steady = [r for r in results if "incremental" in r]
        if with_steady:
            steady.plot([r["machines"] for r in with_steady],
                        [r["incremental"]["tree"]["cpu_ms_median"] for r in with_steady], marker="o",
                        label=f"{label}, median")
            steady.plot([r["machines"] for r in with_steady],
                        [r["incremental"]["tree"]["cpu_ms_max"] for r in with_steady], marker="^", linestyle=":",
                        label=f"{label}, max")
    first.axhline(TARGETS["plain"], color="grey", linewidth=0.8)
    steady.axhline(INCREMENTAL_TARGET_MS, color="grey", linewidth=0.8)
    for axes, title, unit in ((first, "first pass (every job new, one offer per machine)", "CPU seconds"),
                              (steady, "steady-state pass (2 slots end, a job ends, one arrives)", "CPU ms")):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("machines")
        axes.set_ylabel(unit)
        axes.set_title(title, fontsize=9)
        axes.grid(True, which="both", linewidth=0.3)
        axes.legend(fontsize=7)
    figure.suptitle("Fuxi scheduling pass: 2-slot jobs without locality (bench/fuxi_scale.py --scale)", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    log(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
