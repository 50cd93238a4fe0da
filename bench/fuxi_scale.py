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
"""

from __future__ import annotations

import argparse
import csv
import gc
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
from mesoslike.frameworks.fuxi.core import FuxiCore, LaunchSlots, SlotGranted, SlotRevoked  # noqa: E402
from mesoslike.frameworks.fuxi.model import JobSpec, Locality, UnitSpec  # noqa: E402

DATA = Path(os.environ.get("MESOSLIKE_OPENB_DIR", DEFAULT_TRACE_DIR))
QOS_BAND = {"LS": 0, "Guaranteed": 100, "Burstable": 200, "BE": 300}
ROOMS = 20
DEFAULT_CASES = "1000x20000x8,10000x5000x2"
BEFORE = "ebb7ef4"              # main when issue 16 started: the scheduler that took 13.6 s and 17.9 s
PREVIOUS = "41c223d"            # main before the first pass was made cheaper (1.26 s and 1.80 s quoted)
TARGET_SECONDS = 1.0            # issue 16 §3: each first pass < 1 s
QUICK = {"cases": "200x2000x8,1000x500x2", "rounds": 1}
CODE_FILES = ["frameworks/fuxi/core.py", "frameworks/fuxi/machines.py", "frameworks/fuxi/waiting_queue.py",
              "frameworks/fuxi/quota.py", "frameworks/fuxi/blacklist.py", "mesoslike/resources.py",
              "bench/fuxi_scale.py"]


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


def workload(jobs: int, machines: int, slots_median: float, args, trace) -> tuple[list[Offer], list[JobSpec], dict]:
    nodes, pods = trace
    rng = random.Random(f"fuxi-scale-{jobs}x{machines}-{args.seed}")
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
    specs = []
    for j in range(jobs):
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
        group = rng.choice(("default", "default", "batch", "prod"))
        # the policy named, as the group has it: the core before issue 16 took it per job
        specs.append(JobSpec(f"job{j}", units, quota_group=group, policy="FAIR" if group == "batch" else "FIFO"))
    prod = Resources({k: v * 0.1 for k, v in total.items()})
    return offers, specs, {"prod": prod}


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
    wall0, cpu0 = time.perf_counter(), time.process_time()
    out = core.on_offers(offers)
    gc.collect(0)                  # the young objects the pass made: deferred to here by the core, not skipped
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    gc.unfreeze()
    return wall, cpu, out, core


def load_previous(rev: str) -> types.ModuleType | None:
    """``frameworks/fuxi`` as it was at git revision ``rev``, imported as a
    package of its own (``fuxi_previous``; its imports of the package
    rewritten to it) from a temporary directory. None if git or the
    revision is not there."""
    import importlib
    import tempfile
    try:
        names = subprocess.run(["git", "ls-tree", "--name-only", rev, "frameworks/fuxi/"], cwd=ROOT,
                               capture_output=True, text=True, timeout=30, check=True).stdout.split()
        folder = Path(tempfile.mkdtemp(prefix="fuxi-previous-")) / "fuxi_previous"
        folder.mkdir()
        for name in names:
            if name.endswith(".py"):
                source = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=ROOT, capture_output=True, text=True,
                                        timeout=30, check=True).stdout
                (folder / Path(name).name).write_text(source.replace("mesoslike.frameworks.fuxi", "fuxi_previous"))
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


def bench_case(jobs: int, machines: int, slots_median: float, args, trace, before: type | None,
               previous: types.ModuleType | None = None) -> dict:
    log(f"[{jobs} jobs x {machines} machines, {slots_median:g} slots per unit (median)] building the workload")
    offers, specs, groups = workload(jobs, machines, slots_median, args, trace)
    rounds = {"tree": args.rounds, "previous": args.rounds if previous else 0, "scan": args.scan_rounds,
              "before": args.before_rounds if before else 0}
    times: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu": []} for v, n in rounds.items() if n}
    signatures: dict[str, list] = {}
    outcomes: dict[str, dict] = {}
    for r in range(args.rounds):
        for variant in times:
            if r >= rounds[variant]:
                continue
            wall, cpu, out, core = first_pass(variant, offers, specs, groups, before, previous)
            times[variant]["wall"].append(wall)
            times[variant]["cpu"].append(cpu)
            sig = signature(out)
            if variant in signatures and signatures[variant] != sig:
                raise SystemExit(f"{variant}: two runs of the same pass differ")
            signatures[variant] = sig
            outcomes.setdefault(variant, outcome(core, out))
            log(f"  round {r + 1} {variant}: {wall:.3f} s wall, {cpu:.3f} s cpu")
    same = signatures["tree"] == signatures["scan"]
    if not same:
        raise SystemExit("tree and scan made different decisions: the index is wrong")
    if "previous" in signatures and signatures["previous"] != signatures["tree"]:
        raise SystemExit(f"the scheduler at {args.previous} decided differently: a speed-up changed a decision")
    result: dict = {"jobs": jobs, "machines": machines, "median_slots_per_unit": slots_median,
                    "outcome": outcomes["tree"], "tree_and_scan_agree": same}
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
    result["goal_met"] = result["tree"]["wall_s_median"] < TARGET_SECONDS
    log(f"  tree {result['tree']['wall_s_median']:.3f} s, scan {result['scan']['wall_s_median']:.3f} s"
        + (f", previous {result['previous']['wall_s_median']:.3f} s" if "previous" in result else "")
        + (f", before {result['before']['wall_s_median']:.3f} s" if "before" in result else "")
        + f"; {result['outcome']['slots_granted']} slots granted, "
        f"{result['outcome']['units_waiting']} of {result['outcome']['units']} units waiting")
    return result


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


def _case(text: str) -> tuple[int, int, float]:
    parts = text.strip().split("x")
    if len(parts) != 3:
        raise SystemExit(f"--cases: JOBSxMACHINESxSLOTS, got {text!r}")
    return int(parts[0]), int(parts[1]), float(parts[2])


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
    parser.add_argument("--cases", default=None, help=f"JOBSxMACHINESxSLOTS (median slots per unit), "
                                                      f"comma-separated (default {DEFAULT_CASES})")
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
    quick = QUICK if args.quick else {}
    cases = [_case(case) for case in (args.cases or quick.get("cases", DEFAULT_CASES)).split(",") if case.strip()]
    args.rounds = args.rounds or quick.get("rounds", 5)
    args.scan_rounds = min(args.rounds, args.scan_rounds or quick.get("rounds", 3))
    args.free = tuple(float(x) for x in args.free.split(","))
    if len(args.free) != 2 or not 0 < args.free[0] <= args.free[1] <= 1:
        parser.error("--free: LOW,HIGH with 0 < LOW <= HIGH <= 1")
    imported = blob_ids(CODE_FILES)
    doc, started, load_start = start(
        "Fuxi scheduler: the first pass over a busy cluster, first-fit index (tree) vs naive scan", argv,
        code_info(imported))
    doc["config"] = {"cases": [f"{j}x{m}x{s:g}" for j, m, s in cases], "rounds": args.rounds,
                     "scan_rounds": args.scan_rounds, "free_share": list(args.free), "seed": args.seed,
                     "quick": args.quick, "goal_s": TARGET_SECONDS,
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
    for jobs, machines, slots in cases:
        doc["results"][f"{jobs}x{machines}"] = bench_case(jobs, machines, slots, args, trace, before, previous)
    doc["all_goals_met"] = all(r["goal_met"] for r in doc["results"].values())
    finish(doc, started, load_start, args.out, log, code_changed=blob_ids(CODE_FILES) != imported)
    return 0


if __name__ == "__main__":
    sys.exit(main())
