#!/usr/bin/env python3
"""Fuxi waiting queue benchmark: ``WaitingQueue.pick`` vs a linear scan.

The case from the Fuxi article (seed 000): one quota group's waiting queue of
N ScheduleUnits, a machine frees some resources, and exactly ONE waiting unit
fits them. ``pick(free)`` must find it; the baseline walks the units in queue
order and tests each slot with ``free.contains(slot)`` until one fits (the
obvious implementation). A second baseline, ``scan_vec``, is the fastest plain
scan we could write: slots pre-converted to integer tuples compared with
``all(map(le, ...))``. Both baselines are timed in the same run, interleaved
with the picks, so drift in the machine's speed hits both sides of a ratio.

Workloads (slot sizes; priorities spread over 4,000 levels)
    ``trace``  slot sizes drawn, with their frequencies, from the 8,152 pods of
               the Alibaba openb 2023 trace bundled with the simulator (``mesoslike/sim/data``):
               cpus = cpu_milli/1000, mem = memory_mib, gpus = num_gpu *
               gpu_milli/1000. Priority = QoS band (LS 0, Guaranteed 1000,
               Burstable 2000, BE 3000) + uniform 0..999. S <= 151 sizes.
    ``synthetic``  many distinct sizes: cpus log-normal (median 2 cores, sigma 1)
               rounded to 0.1 in [0.1, 32]; mem = cpus x GiB-per-core log-normal
               (median 4, sigma 0.6) rounded to 64 MiB in [64 MiB, 256 GiB];
               priority uniform 0..3999. S grows with N (about 6.6k distinct
               sizes at 10k units, 124k at 1M).

The freed machines: four free vectors, pairwise incomparable (more cpus, less
mem and the like). Units whose slot would fit any of them are re-drawn, then
one *designated* unit per free vector is added whose slot equals that vector,
so exactly one unit fits each (checked). ``--positions``: the designated units
are ``last`` in queue order (priority 4000: the worst case for both sides, the
scan walks all N and pick must rule out every other size) or in the
``middle`` (the median priority).

Timing: ``time.perf_counter`` around each call; medians over all calls.
``pick`` does not change the queue, so it is called on the same state; the
``cycle`` timing is pick + remove + add back of the picked unit (the state is
restored). GC is off while building and the built objects are frozen
(``gc.freeze``) before timing. Prints one JSON document on stdout (progress
goes to stderr); ``--out FILE`` also writes it to FILE. It reports; it does
not fail on slow numbers.

    python bench/fuxi_queue.py --out bench/results/fuxi_queue.json
    python bench/fuxi_queue.py --quick
"""

from __future__ import annotations

import argparse
import csv
import gc
import math
import os
import random
import shlex
import statistics
import sys
import time
from operator import le
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))   # run from a checkout without installing
sys.path.insert(0, str(HERE))   # bench/allocator.py next to this file

from benchlib import blob_ids, finish, git_state, machine_info  # noqa: E402
from mesoslike_frameworks.fuxi.waiting_queue import WaitingQueue  # noqa: E402
from mesoslike.resources import Resources  # noqa: E402
from mesoslike.sim import DEFAULT_TRACE_DIR, TRACE_POD_FILE  # noqa: E402

TRACE = Path(os.environ.get("MESOSLIKE_OPENB_PODS", DEFAULT_TRACE_DIR / TRACE_POD_FILE))
QOS_BAND = {"LS": 0, "Guaranteed": 1000, "Burstable": 2000, "BE": 3000}
PRIORITY_LEVELS = 4000
LAST_PRIORITY = PRIORITY_LEVELS          # after every other unit

# Free vectors of the freed machines, pairwise incomparable. Units are in
# (cpus millis, mem MiB, gpu millis).
FREES = {
    "trace": [(4000, 32768, 0), (16000, 8192, 0), (8000, 16384, 1000), (2000, 65536, 500)],
    "synthetic": [(500, 16384, 0), (1000, 8192, 0), (2000, 4096, 0), (4000, 2048, 0)],
}

TARGET_SPEEDUP = 1000.0      # issue 5: at 1M, pick >= 1000x faster than the scan
TARGET_GROWTH = 3.0          # issue 5: pick time grows <= 3x from 10k to 1M
DEFAULT_SIZES = "10000,100000,1000000"
QUICK = {"sizes": "2000,20000", "rounds": 2, "picks": 50}

CODE_FILES = ["frameworks/mesoslike_frameworks/fuxi/waiting_queue.py", "mesoslike/resources.py", "bench/fuxi_queue.py"]


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


# -------------------------------------------------------------- workloads
def to_resources(size: tuple[int, int, int]) -> Resources:
    cpu, mem, gpu = size
    scalars = {"cpus": cpu / 1000}
    if mem:
        scalars["mem"] = mem
    if gpu:
        scalars["gpus"] = gpu / 1000
    return Resources(scalars)


def fits(size: tuple[int, int, int], free: tuple[int, int, int]) -> bool:
    return size[0] <= free[0] and size[1] <= free[1] and size[2] <= free[2]


def trace_sampler(rng: random.Random):
    with open(TRACE, newline="") as fh:
        pods = [((int(r["cpu_milli"]), int(r["memory_mib"]), int(r["num_gpu"]) * int(r["gpu_milli"])),
                 QOS_BAND[r["qos"]]) for r in csv.DictReader(fh)]

    def draw():
        size, band = pods[rng.randrange(len(pods))]
        return size, band + rng.randrange(1000)
    return draw


def synthetic_sampler(rng: random.Random):
    def draw():
        cpu = min(32000, max(100, round(math.exp(rng.gauss(math.log(2), 1.0)) * 10) * 100))
        gib_per_core = math.exp(rng.gauss(math.log(4), 0.6))
        mem = min(262144, max(64, round(cpu / 1000 * gib_per_core * 1024 / 64) * 64))
        return (cpu, mem, 0), rng.randrange(PRIORITY_LEVELS)
    return draw


SAMPLERS = {"trace": trace_sampler, "synthetic": synthetic_sampler}


def draw_units(workload: str, n: int, seed: int):
    """``n - len(frees)`` units that fit none of the frees, then one designated
    unit per free whose slot is that free. Returns (units, frees); a unit is
    (unit_id, priority, size, submitted)."""
    rng = random.Random(f"{workload}-{seed}")
    draw = SAMPLERS[workload](rng)
    frees = FREES[workload]
    assert not any(a != b and fits(a, b) for a in frees for b in frees), "free vectors must be incomparable"
    units = []
    for i in range(n - len(frees)):
        while True:
            size, priority = draw()
            if not any(fits(size, f) for f in frees):
                break
        units.append((f"su-{i:07d}", priority, size, i))
    for j, free in enumerate(frees):
        units.append((f"fit-{j}", LAST_PRIORITY, free, n - len(frees) + j))
    return units, frees


# ------------------------------------------------------------- baselines
class LinearScan:
    """The baseline: the units in queue order (FIFO key), tested one by one."""

    def __init__(self, units, slot_of) -> None:
        ordered = sorted(units, key=lambda u: (u[1], u[3], u[0]))
        self.slots = [(u[0], slot_of[u[2]]) for u in ordered]
        self.vecs = [(u[0], (u[2][0], u[2][1], u[2][2])) for u in ordered]

    def scan(self, free: Resources) -> str | None:
        for unit_id, slot in self.slots:
            if free.contains(slot):
                return unit_id
        return None

    def scan_vec(self, fv: tuple[int, int, int]) -> str | None:
        for unit_id, vec in self.vecs:
            if all(map(le, vec, fv)):
                return unit_id
        return None

    def count_fitting(self, fv) -> int:
        return sum(1 for _, vec in self.vecs if all(map(le, vec, fv)))


# ---------------------------------------------------------------- timing
def timed(fn, arg):
    t0 = time.perf_counter()
    out = fn(arg)
    return out, time.perf_counter() - t0


def summary_us(seconds: list[float]) -> dict:
    micros = [s * 1e6 for s in seconds]
    return {
        "calls": len(micros),
        "median_us": statistics.median(micros),
        "mean_us": statistics.fmean(micros),
        "p90_us": statistics.quantiles(micros, n=10)[-1] if len(micros) >= 10 else max(micros),
        "min_us": min(micros),
        "max_us": max(micros),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def bench_case(workload: str, n: int, positions: list[str], args) -> dict:
    log(f"[{workload} n={n}] drawing units")
    gc.disable()
    units, frees = draw_units(workload, n, args.seed)
    slot_of = {}
    for u in units:
        if u[2] not in slot_of:
            slot_of[u[2]] = to_resources(u[2])
    t0 = time.perf_counter()
    q = WaitingQueue("FIFO")
    for unit_id, priority, size, submitted in units:
        q.add(unit_id, priority, slot_of[size], submitted)
    build_s = time.perf_counter() - t0
    log(f"[{workload} n={n}] queue built in {build_s:.1f} s: {q.distinct_slots} distinct slots")
    free_res = [to_resources(f) for f in frees]   # as Resources; the tuples serve scan_vec
    result: dict = {
        "units": n,
        "distinct_slots": q.distinct_slots,
        "tree_leaves": q._cap,
        "build_s": build_s,
        "add_mean_us": build_s / n * 1e6,
        "positions": {},
    }
    for position in positions:
        if position == "middle":
            middle = statistics.median_low(u[1] for u in units[:-len(frees)])
            for j, f in enumerate(frees):
                unit = q.info(f"fit-{j}")
                q.remove(unit.unit_id)
                q.add(unit.unit_id, middle, unit.slot, unit.submitted)
            units = [(u[0], middle, u[2], u[3]) if u[0].startswith("fit-") else u for u in units]
        baseline = LinearScan(units, slot_of)
        rank = {unit_id: i for i, (unit_id, _) in enumerate(baseline.slots) if unit_id.startswith("fit-")}
        if n <= 100_000:
            q.check_invariants()
        gc.collect()
        gc.freeze()
        for j, f in enumerate(frees):   # exactly one unit fits each free vector, and all agree on it
            expected = f"fit-{j}"
            assert baseline.count_fitting(f) == 1, (workload, n, f)
            assert q.pick(free_res[j]) == baseline.scan(free_res[j]) == baseline.scan_vec(f) \
                == expected
        picks: list[float] = []
        cycles: list[float] = []
        scans: list[float] = []
        scans_vec: list[float] = []
        scans_cpu: list[float] = []      # CPU time of this process: other processes do not inflate it
        picks_cpu: list[float] = []      # per pick, from the CPU time of each batch of picks
        costs = [q.search_cost(r) for r in free_res]
        scan_rounds = args.scan_rounds or max(3, min(args.rounds * 5, 300_000 // n))
        for r in range(max(args.rounds, scan_rounds)):
            for j, f in enumerate(frees):
                fr = free_res[j]
                if r < scan_rounds:
                    c = time.process_time()
                    _, s = timed(baseline.scan, fr)
                    scans_cpu.append(time.process_time() - c)
                    scans.append(s)
                    _, s = timed(baseline.scan_vec, f)
                    scans_vec.append(s)
                if r < args.rounds:
                    pick = q.pick
                    c = time.process_time()
                    for _ in range(args.picks):
                        t = time.perf_counter()
                        pick(fr)
                        picks.append(time.perf_counter() - t)
                    picks_cpu.append((time.process_time() - c) / args.picks)
                    for _ in range(max(1, args.picks // 5)):
                        t = time.perf_counter()
                        unit_id = pick(fr)
                        info = q.info(unit_id)
                        q.remove(unit_id)
                        q.add(unit_id, info.priority, info.slot, info.submitted, info.granted)
                        cycles.append(time.perf_counter() - t)
        gc.unfreeze()
        assert [q.pick(fr) for fr in free_res] == [f"fit-{j}" for j in range(len(frees))]
        pick_s, scan_s, vec_s = (summary_us(x) for x in (picks, scans, scans_vec))
        result["positions"][position] = {
            "designated_rank_in_order": sorted(rank.values()),
            "search_nodes_popped": costs,
            "pick": pick_s,
            "pick_remove_add_cycle": summary_us(cycles),
            "scan_contains": scan_s,
            "scan_vec": vec_s,
            "speedup_vs_scan_contains": ratio(scan_s["median_us"], pick_s["median_us"]),
            "speedup_vs_scan_vec": ratio(vec_s["median_us"], pick_s["median_us"]),
            "pick_batch_cpu_median_us": statistics.median(picks_cpu) * 1e6,
            "scan_contains_cpu_median_us": statistics.median(scans_cpu) * 1e6,
            "speedup_vs_scan_contains_cpu": ratio(statistics.median(scans_cpu), statistics.median(picks_cpu)),
        }
        log(f"[{workload} n={n} {position}] pick {pick_s['median_us']:.1f} us, "
            f"scan {scan_s['median_us'] / 1000:.1f} ms, scan_vec {vec_s['median_us'] / 1000:.1f} ms, "
            f"x{result['positions'][position]['speedup_vs_scan_contains']:.0f}, nodes {costs}")
    del q, baseline, units
    gc.enable()
    gc.collect()
    return result


def targets(doc: dict, sizes: list[int]) -> dict:
    out: dict = {"speedup_goal_at_largest": TARGET_SPEEDUP, "growth_goal_smallest_to_largest": TARGET_GROWTH,
                 "smallest": sizes[0], "largest": sizes[-1], "cases": {}}
    met = True
    for workload, by_size in doc["results"].items():
        small, large = by_size[str(sizes[0])], by_size[str(sizes[-1])]
        for position in large["positions"]:
            lp, sp = large["positions"][position], small["positions"][position]
            growth = ratio(lp["pick"]["median_us"], sp["pick"]["median_us"])
            case = {
                "speedup_vs_scan_contains": lp["speedup_vs_scan_contains"],
                "speedup_vs_scan_vec": lp["speedup_vs_scan_vec"],
                "pick_growth": growth,
                "speedup_met": lp["speedup_vs_scan_contains"] >= TARGET_SPEEDUP,
                "growth_met": growth <= TARGET_GROWTH,
            }
            met = met and case["speedup_met"] and case["growth_met"]
            out["cases"][f"{workload}/{position}"] = case
    out["all_met"] = met
    return out


# --------------------------------------------------------------- the run
def code_hashes() -> dict[str, str]:
    return blob_ids(CODE_FILES)


IMPORTED_CODE = code_hashes()


def code_info() -> dict:
    head, dirty = git_state(CODE_FILES)
    return {"git_blobs": IMPORTED_CODE, "git_head": head, "measured_files_differ_from_head": dirty}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=None, help=f"waiting units, comma-separated (default {DEFAULT_SIZES})")
    parser.add_argument("--workloads", default="trace,synthetic", help="trace and/or synthetic (default both)")
    parser.add_argument("--positions", default="last,middle",
                        help="where the fitting unit sits in queue order: last, middle (default both)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of picks; each round picks --picks times per free vector (default 5)")
    parser.add_argument("--picks", type=int, default=None, help="timed picks per free vector per round (default 200)")
    parser.add_argument("--scan-rounds", type=int, default=None,
                        help="rounds of scans, one per free vector per round (default min(5 x rounds, 300000/N), "
                             "at least 3)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the workloads (default 1)")
    parser.add_argument("--quick", action="store_true", help="a small smoke run (seconds)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)

    quick = QUICK if args.quick else {}
    sizes = sorted(int(x) for x in (args.sizes or quick.get("sizes", DEFAULT_SIZES)).split(",") if x.strip())
    args.rounds = args.rounds or quick.get("rounds", 5)
    args.picks = args.picks or quick.get("picks", 200)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    positions = [p.strip() for p in args.positions.split(",") if p.strip()]
    if not sizes or min(sizes) < 10:
        parser.error("--sizes: at least one size, each >= 10")
    if set(workloads) - set(SAMPLERS) or not workloads:
        parser.error(f"--workloads: choose from {sorted(SAMPLERS)}")
    if set(positions) - {"last", "middle"} or not positions or positions[0] != "last":
        parser.error("--positions: last, then optionally middle")
    if "trace" in workloads and not TRACE.exists():
        parser.error(f"the trace is missing: {TRACE}")

    started = time.perf_counter()
    load_start = os.getloadavg()
    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], os.getcwd()),
                                                            *(sys.argv[1:] if argv is None else argv)])
    doc: dict = {
        "benchmark": "Fuxi waiting queue: pick() vs linear scan, exactly one waiting unit fits the freed machine",
        "command": command,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(),
        "code": code_info(),
        "config": {
            "sizes": sizes,
            "workloads": workloads,
            "positions": positions,
            "policy": "FIFO",
            "free_vectors_cpu_milli_mem_mib_gpu_milli": {w: FREES[w] for w in workloads},
            "rounds": args.rounds,
            "picks_per_free_per_round": args.picks,
            "scan_rounds": args.scan_rounds or "min(5 x rounds, 300000 / N), at least 3",
            "seed": args.seed,
            "quick": args.quick,
            "timer": "time.perf_counter around each call; medians over all calls; GC off while building, "
                     "objects frozen (gc.freeze) while timing",
            "interleaved": "per round and free vector: one scan_contains, one scan_vec, then the picks",
        },
        "results": {},
    }
    for workload in workloads:
        doc["results"][workload] = {}
        for n in sizes:
            doc["results"][workload][str(n)] = bench_case(workload, n, positions, args)
    doc["targets"] = targets(doc, sizes)
    finish(doc, started, load_start, args.out, log, code_changed=code_hashes() != IMPORTED_CODE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
