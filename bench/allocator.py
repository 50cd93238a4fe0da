#!/usr/bin/env python3
"""Allocator benchmark, modelled on Mesos's ``HierarchicalAllocator_BENCHMARK_Test``.

Every agent is ``cpus:24;mem:4096;disk:4096;ports:[31000-32000]``, every
framework is in role ``*``, and one *cycle* is one call of
``HierarchicalAllocator.allocate`` timed with ``time.perf_counter`` (CPU time,
``time.process_time``, is recorded too: other processes inflate only the
former). Modes:

``decline``
    Mesos's "DeclineOffers": every offer is declined with a 1-day filter, then
    the clock moves one allocation interval and the next cycle runs. In round
    r, each agent may walk past up to r-1 frameworks that already refused it.
``accept``
    Frameworks accept every offer in full. The first cycle offers the whole
    cluster; then, per round, the tasks on a fraction (``--churn``) of the agents
    end (``recover_resources``) and the next full cycle re-offers those agents.
``event``
    Event-triggered allocation of one freed agent: the whole cluster is
    allocated and accepted, then one agent at a time is freed and
    ``allocate([agent])`` is timed, for several framework counts.
``decline_saturated`` (with ``decline``)
    Mesos's full loop of 2 x F decline rounds on a small cluster, allocator
    only: once every framework has filtered every agent, a cycle checks all
    A x F pairs against their filters.

The baseline, ``bench/textbook_drf.py``, is measured in the same run on the same
workload: a textbook DRF allocator with the same semantics that sorts every
framework from scratch for every agent. With the same seed both shuffle agents
identically, so the bench checks they make the same offers. Their decline and
accept cycles run interleaved (one of each in turn) so that drift in the
machine's speed hits both sides of a ratio alike. Sizes above
``--baseline-sample-above`` agents time the baseline on a deterministic sample
and scale it linearly, and say so in the JSON (``baseline_sampled_agents``).

Prints one JSON document on stdout (progress goes to stderr); ``--out FILE``
also writes it to FILE. Timing assertions do not belong in the test suite:
this script reports, it does not fail on slow numbers.

    python bench/allocator.py --out bench/results/allocator.json
    python bench/allocator.py --quick
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))   # run from a checkout without installing
sys.path.insert(0, str(HERE))   # textbook_drf and benchlib next to this file

from benchlib import blob_ids, finish, git_state, machine_info  # noqa: E402

from mesoslike.allocator import HierarchicalAllocator  # noqa: E402
from mesoslike.clock import FakeClock  # noqa: E402
from mesoslike.resources import Resources  # noqa: E402
from textbook_drf import TextbookDRFAllocator  # noqa: E402

AGENT_RESOURCES = "cpus:24;mem:4096;disk:4096;ports:[31000-32000]"
MIN_ALLOCATABLE = "cpus:0.01|mem:32"
ALLOCATION_INTERVAL = 1.0
DAY = 24 * 3600.0
MESOS_18_CYCLE_SECONDS = 1.1     # the project's reference: Mesos 1.8, 10k agents x 1k frameworks
TARGET_SPEEDUP = 50.0
TARGET_SIZE = (10_000, 1_000)
FLAT_RATIO = 2.0                 # event allocation "flat": median(max F) <= 2 x median(min F)

DEFAULT_SIZES = "1000x100,10000x1000,20000x2000"
DEFAULT_EVENT_FRAMEWORKS = "100,1000,10000"
QUICK = dict(sizes="200x20,1000x100", rounds=3, event_agents=200, event_frameworks="10,100,1000",
             event_reps=50, saturated="100x10")

IMPLS = {
    "allocator": lambda clock, seed: HierarchicalAllocator(
        clock, sorter="drf", allocation_interval=ALLOCATION_INTERVAL, min_allocatable=MIN_ALLOCATABLE,
        offer_timeout=None, rng=random.Random(seed)),
    "baseline": lambda clock, seed: TextbookDRFAllocator(
        clock, allocation_interval=ALLOCATION_INTERVAL, min_allocatable=MIN_ALLOCATABLE, rng=random.Random(seed)),
}


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- helpers
def agent_name(i: int) -> str:
    return f"agent-{i:06d}"


def framework_name(j: int) -> str:
    return f"fw-{j:05d}"


def build(impl: str, agents: int, frameworks: int, seed: int):
    """A fresh cluster: returns (clock, allocator, agent ids, setup seconds)."""
    clock = FakeClock()
    alloc = IMPLS[impl](clock, seed)
    total = Resources.parse(AGENT_RESOURCES)
    agent_ids = [agent_name(i) for i in range(agents)]
    t0 = time.perf_counter()
    for agent_id in agent_ids:
        alloc.add_agent(agent_id, total)
    for j in range(frameworks):
        alloc.add_framework(framework_name(j), role="*")
    return clock, alloc, agent_ids, time.perf_counter() - t0


def check_invariants(alloc, agents: int, frameworks: int) -> bool:
    """The allocator's own consistency check, where it is affordable (O(A*F))."""
    if isinstance(alloc, HierarchicalAllocator) and agents * frameworks <= 200_000:
        alloc.check_invariants()
        return True
    return False


def filtered_count(alloc) -> int:
    if isinstance(alloc, HierarchicalAllocator):
        return alloc.statistics().offers_filtered
    return alloc.offers_filtered


def run_cycle(alloc, targets):
    """``alloc.allocate(targets)`` as its runtime runs it. The allocator is a
    pure core and leaves the garbage collector alone; the master runtime
    disables it around a loop turn (a cycle makes many short-lived objects
    and no reference cycles), so the bench does the same around the
    allocator's cycle. The textbook baseline runs with GC enabled, as always."""
    if not isinstance(alloc, HierarchicalAllocator) or not gc.isenabled():
        return alloc.allocate(targets)
    gc.disable()
    try:
        return alloc.allocate(targets)
    finally:
        gc.enable()


def timed_cycle(alloc, targets):
    """One allocation cycle over ``targets`` (None = every agent): the offers,
    wall seconds (perf_counter) and CPU seconds of this process (process_time,
    which other processes competing for the cores do not inflate)."""
    gc.collect()   # start every timed cycle from the same GC state
    c0 = time.process_time()
    t0 = time.perf_counter()
    offers = run_cycle(alloc, targets)
    wall = time.perf_counter() - t0
    return offers, wall, time.process_time() - c0


def sample_agents(agent_ids: list[str], n: int | None) -> list[str] | None:
    """A deterministic sample: every k-th agent in id order (None = all)."""
    if not n or n >= len(agent_ids):
        return None
    step = len(agent_ids) / n
    return [agent_ids[int(i * step)] for i in range(n)]


def summary(seconds: list[float], cpu: list[float]) -> dict:
    return {
        "first_s": seconds[0],
        "median_s": statistics.median(seconds),
        "mean_s": statistics.fmean(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "first_cpu_s": cpu[0],
        "median_cpu_s": statistics.median(cpu),
        "max_cpu_s": max(cpu),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


# ------------------------------------------------------------------ modes
# Each mode is a generator that yields after every timed step and leaves its
# results in ``result``; ``lockstep`` interleaves the allocator's and the
# baseline's steps, so that drift in the machine's speed (other processes,
# a noisy VM neighbour) hits both sides of a ratio alike.
def lockstep(*runs) -> None:
    active = list(runs)
    while active:
        for run in list(active):
            try:
                next(run)
            except StopIteration:
                active.remove(run)


def run_decline(impl: str, agents: int, frameworks: int, rounds: int, seed: int, sample: int | None,
                result: dict, log_every: int = 1):
    clock, alloc, agent_ids, setup = build(impl, agents, frameworks, seed)
    targets = sample_agents(agent_ids, sample)
    scale = 1.0 if targets is None else agents / len(targets)
    seconds, cpu_seconds, offers_per_round, filtered_per_round, answer_seconds = [], [], [], [], []
    first_pairs = None
    filtered_before = filtered_count(alloc)
    for r in range(rounds):
        offers, dt, cpu = timed_cycle(alloc, targets)
        filtered_now = filtered_count(alloc)
        seconds.append(dt * scale)
        cpu_seconds.append(cpu * scale)
        offers_per_round.append(len(offers))
        filtered_per_round.append(filtered_now - filtered_before)
        filtered_before = filtered_now
        if r == 0:
            first_pairs = sorted((o.framework_id, o.agent_id) for o in offers)
        t0 = time.perf_counter()
        for offer in offers:
            alloc.decline_offer(offer.id, DAY)
        answer_seconds.append(time.perf_counter() - t0)
        clock.advance(ALLOCATION_INTERVAL)
        if (r + 1) % log_every == 0 or r == 0:
            log(f"    {impl:9s} decline round {r + 1}/{rounds}: {dt * scale * 1e3:9.1f} ms"
                f"{' (%.1f ms on the sample, x%.1f)' % (dt * 1e3, scale) if targets else ''}, "
                f"{len(offers)} offers, {filtered_per_round[-1]} filtered")
        yield
    out = {
        "invariants_checked": check_invariants(alloc, agents, frameworks),
        "setup_s": setup,
        "cycle_s": seconds,
        "cycle_cpu_s": cpu_seconds,
        **summary(seconds, cpu_seconds),
        "offers_per_round": offers_per_round,
        "filtered_per_round": filtered_per_round,
        "decline_answers_s_median": statistics.median(answer_seconds),
        "sampled_agents": None if targets is None else len(targets),
        "sample_scale": scale,
    }
    result.update(out=out, first_pairs=first_pairs, targets=targets)


def run_accept(impl: str, agents: int, frameworks: int, rounds: int, churn: float, seed: int,
               sample: int | None, result: dict):
    clock, alloc, agent_ids, setup = build(impl, agents, frameworks, seed)
    targets = sample_agents(agent_ids, sample)
    scale = 1.0 if targets is None else agents / len(targets)
    pool = agent_ids if targets is None else targets
    holder: dict[str, tuple[str, Resources]] = {}

    def accept_all(offers):
        for offer in offers:
            alloc.accept_offer(offer.id, offer.resources, DAY)   # nothing unused, so no filter
            holder[offer.agent_id] = (offer.framework_id, offer.resources)

    offers, first, first_cpu = timed_cycle(alloc, targets)
    first_pairs = sorted((o.framework_id, o.agent_id) for o in offers)
    first_offers = len(offers)
    accept_all(offers)
    log(f"    {impl:9s} accept first cycle: {first * scale * 1e3:9.1f} ms, {first_offers} offers")
    yield
    churn_seconds, churn_cpu, churn_offers, freed_counts = [], [], [], []
    picker = random.Random(seed * 7919 + 1)   # same picks for both implementations
    for r in range(rounds):
        freed = sorted(picker.sample(sorted(holder), max(1, int(len(pool) * churn))))
        for agent_id in freed:
            framework_id, resources = holder.pop(agent_id)
            alloc.recover_resources(framework_id, agent_id, resources, 0.0)
        clock.advance(ALLOCATION_INTERVAL)
        cycle_targets = None if targets is None else freed
        offers, dt, cpu = timed_cycle(alloc, cycle_targets)
        churn_seconds.append(dt * scale)
        churn_cpu.append(cpu * scale)
        churn_offers.append(len(offers))
        freed_counts.append(len(freed))
        accept_all(offers)
        log(f"    {impl:9s} accept churn round {r + 1}/{rounds}: {dt * scale * 1e3:9.1f} ms, "
            f"{len(freed)} freed, {len(offers)} offers")
        yield
    out = {
        "invariants_checked": check_invariants(alloc, agents, frameworks),
        "setup_s": setup,
        "first_cycle_s": first * scale,
        "first_cycle_cpu_s": first_cpu * scale,
        "first_cycle_offers": first_offers,
        "churn_fraction": churn,
        "churn_cycle_s": churn_seconds,
        "churn_median_s": statistics.median(churn_seconds) if churn_seconds else None,
        "churn_max_s": max(churn_seconds) if churn_seconds else None,
        "churn_cycle_cpu_s": churn_cpu,
        "churn_median_cpu_s": statistics.median(churn_cpu) if churn_cpu else None,
        "churn_freed_per_round": freed_counts,
        "churn_offers_per_round": churn_offers,
        "sampled_agents": None if targets is None else len(targets),
        "sample_scale": scale,
    }
    result.update(out=out, first_pairs=first_pairs, targets=targets)


def run_event(impl: str, agents: int, frameworks: int, reps: int, seed: int, result: dict):
    clock, alloc, agent_ids, setup = build(impl, agents, frameworks, seed)
    holder: dict[str, tuple[str, Resources]] = {}
    for offer in alloc.allocate():
        alloc.accept_offer(offer.id, offer.resources, DAY)
        holder[offer.agent_id] = (offer.framework_id, offer.resources)
    picker = random.Random(seed * 104729 + 3)
    gc.collect()
    micros, cpu_micros, choices = [], [], []
    for _ in range(reps):
        agent_id = picker.choice(agent_ids)
        framework_id, resources = holder.pop(agent_id)
        alloc.recover_resources(framework_id, agent_id, resources, 0.0)
        c0 = time.process_time()
        t0 = time.perf_counter()
        offers = run_cycle(alloc, [agent_id])
        micros.append((time.perf_counter() - t0) * 1e6)
        cpu_micros.append((time.process_time() - c0) * 1e6)
        if len(offers) != 1:
            raise RuntimeError(f"{impl}: freeing {agent_id} made {len(offers)} offers, expected 1")
        offer = offers[0]
        alloc.accept_offer(offer.id, offer.resources, DAY)
        holder[agent_id] = (offer.framework_id, offer.resources)
        choices.append(offer.framework_id)
        yield
    out = {
        "agents": agents,
        "frameworks": frameworks,
        "reps": reps,
        "setup_s": setup,
        "median_us": statistics.median(micros),
        "p90_us": sorted(micros)[int(0.9 * (len(micros) - 1))],
        "min_us": min(micros),
        "max_us": max(micros),
        "median_cpu_us": statistics.median(cpu_micros),
    }
    result.update(out=out, choices=choices, micros=micros)


# --------------------------------------------------------------- the run
CODE_FILES = ["mesoslike/allocator/hierarchical.py", "mesoslike/allocator/drf.py",
              "mesoslike/allocator/filters.py", "mesoslike/allocator/offer_book.py",
              "mesoslike/allocator/offers.py", "mesoslike/allocator/agents.py",
              "mesoslike/allocator/shuffle.py", "mesoslike/allocator/sorter.py", "mesoslike/resources.py",
              "bench/textbook_drf.py"]


def code_hashes() -> dict[str, str]:
    return blob_ids(CODE_FILES)


IMPORTED_CODE = code_hashes()   # right after the imports: the code this process runs


def code_info() -> dict:
    """Which allocator code was measured (the tree is edited concurrently):
    hashes of the files as imported, and whether they changed during the run
    (a running process keeps the code it imported)."""
    head, dirty = git_state(CODE_FILES)
    return {"git_blobs": IMPORTED_CODE, "git_head": head, "measured_files_differ_from_head": dirty}


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        a, sep, f = part.partition("x")
        if not sep:
            raise argparse.ArgumentTypeError(f"bad size {part!r}: expected AGENTSxFRAMEWORKS")
        sizes.append((int(a), int(f)))
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    return sizes


def bench_size(agents: int, frameworks: int, args) -> dict:
    key = f"{agents}x{frameworks}"
    sample = (args.baseline_sample if args.baseline_sample and agents > args.baseline_sample_above
              and agents > args.baseline_sample else None)
    result: dict = {"agents": agents, "frameworks": frameworks, "baseline_sampled_agents": sample}
    if "decline" in args.modes:
        log(f"[{key}] decline, {args.rounds} rounds")
        mine_r, base_r = {}, {}
        lockstep(run_decline("allocator", agents, frameworks, args.rounds, args.seed, None, mine_r),
                 run_decline("baseline", agents, frameworks, args.rounds, args.seed, sample, base_r))
        gc.collect()
        mine, my_pairs = mine_r["out"], mine_r["first_pairs"]
        base, base_pairs, targets = base_r["out"], base_r["first_pairs"], base_r["targets"]
        if targets is None:
            offers_match = my_pairs is not None and len(my_pairs) == len(base_pairs)
            assignments_match = my_pairs == base_pairs
            per_round_match = mine["offers_per_round"] == base["offers_per_round"]
        else:   # compare the allocator's round-1 offers on the sampled agents
            chosen = set(targets)
            mine_on_sample = [p for p in my_pairs if p[1] in chosen]
            offers_match = len(mine_on_sample) == len(base_pairs)
            assignments_match = None   # different agent order: pairs are not comparable
            per_round_match = None
        result["decline"] = {
            "allocator": mine,
            "baseline": base,
            "offers_match": offers_match,
            "assignments_match": assignments_match,
            "offers_per_round_match": per_round_match,
            "speedup": {
                "first_round": ratio(base["first_s"], mine["first_s"]),
                "median": ratio(base["median_s"], mine["median_s"]),
                "max": ratio(base["max_s"], mine["max_s"]),
                "per_round": [ratio(b, m) for b, m in zip(base["cycle_s"], mine["cycle_s"])],
                "median_of_round_ratios": statistics.median(
                    ratio(b, m) for b, m in zip(base["cycle_s"], mine["cycle_s"])),
                "median_cpu": ratio(base["median_cpu_s"], mine["median_cpu_s"]),
            },
        }
        log(f"[{key}] decline: allocator median {mine['median_s'] * 1e3:.1f} ms, baseline median "
            f"{base['median_s'] * 1e3:.1f} ms, speedup x{result['decline']['speedup']['median']:.1f}, "
            f"offers_match={offers_match}, assignments_match={assignments_match}")
    if "accept" in args.modes:
        log(f"[{key}] accept, {args.rounds} churn rounds of {args.churn:.0%}")
        mine_r, base_r = {}, {}
        lockstep(run_accept("allocator", agents, frameworks, args.rounds, args.churn, args.seed, None, mine_r),
                 run_accept("baseline", agents, frameworks, args.rounds, args.churn, args.seed, sample, base_r))
        gc.collect()
        mine, my_pairs = mine_r["out"], mine_r["first_pairs"]
        base, base_pairs, targets = base_r["out"], base_r["first_pairs"], base_r["targets"]
        if targets is None:
            offers_match = len(my_pairs) == len(base_pairs)
            assignments_match = my_pairs == base_pairs
            per_round_match = mine["churn_offers_per_round"] == base["churn_offers_per_round"]
        else:
            chosen = set(targets)
            offers_match = len([p for p in my_pairs if p[1] in chosen]) == len(base_pairs)
            assignments_match = per_round_match = None
        result["accept"] = {
            "allocator": mine,
            "baseline": base,
            "offers_match": offers_match,
            "assignments_match": assignments_match,
            "offers_per_round_match": per_round_match,
            "speedup": {
                "first_cycle": ratio(base["first_cycle_s"], mine["first_cycle_s"]),
                "churn_median": ratio(base["churn_median_s"], mine["churn_median_s"]),
                "first_cycle_cpu": ratio(base["first_cycle_cpu_s"], mine["first_cycle_cpu_s"]),
                "churn_median_cpu": ratio(base["churn_median_cpu_s"], mine["churn_median_cpu_s"]),
            },
        }
        log(f"[{key}] accept: allocator first {mine['first_cycle_s'] * 1e3:.1f} ms / churn "
            f"{(mine['churn_median_s'] or 0) * 1e3:.1f} ms, baseline first {base['first_cycle_s'] * 1e3:.1f} ms "
            f"/ churn {(base['churn_median_s'] or 0) * 1e3:.1f} ms")
    return key, result


def bench_saturated(agents: int, frameworks: int, args) -> dict:
    """Mesos's full DeclineOffers loop: 2 x F decline rounds, allocator only.

    After F rounds every framework has filtered every agent, so the later
    cycles make no offers but still check every (agent, framework) pair
    against its filter: the cost of a cycle grows to O(A * F). The textbook
    baseline is not run here: scanning each framework's list of up to A
    filters makes its saturated cycle O(A * F * A), far beyond the budget.
    """
    rounds = 2 * frameworks
    log(f"[saturated {agents}x{frameworks}] decline, {rounds} rounds (allocator only)")
    mine_r: dict = {}
    lockstep(run_decline("allocator", agents, frameworks, rounds, args.seed, None, mine_r,
                         log_every=max(1, rounds // 10)))
    mine = mine_r["out"]
    gc.collect()
    offers = mine["offers_per_round"]
    live = [s for s, n in zip(mine["cycle_s"], offers) if n]
    dead = [s for s, n in zip(mine["cycle_s"], offers) if not n]
    dead_cpu = [s for s, n in zip(mine["cycle_cpu_s"], offers) if not n]
    dead_filtered = [f for f, n in zip(mine["filtered_per_round"], offers) if not n]
    out = {
        "agents": agents,
        "frameworks": frameworks,
        "rounds": rounds,
        "baseline": None,
        "allocator": mine,
        "rounds_with_offers": len(live),
        "median_s_rounds_with_offers": statistics.median(live) if live else None,
        "median_s_saturated_rounds": statistics.median(dead) if dead else None,
        "median_cpu_s_saturated_rounds": statistics.median(dead_cpu) if dead_cpu else None,
        "filtered_per_saturated_round": statistics.median(dead_filtered) if dead_filtered else None,
    }
    if dead:
        # saturated agents are skipped without any filter check (the allocator
        # remembers that nobody could take them), so this is only per check when checks happen
        checks = out["filtered_per_saturated_round"]
        out["us_per_filtered_check"] = statistics.median(dead) / checks * 1e6 if checks else None
        out["us_per_agent_saturated"] = statistics.median(dead) / agents * 1e6
        log(f"[saturated] rounds with offers: median {out['median_s_rounds_with_offers'] * 1e3:.1f} ms; "
            f"saturated rounds: median {out['median_s_saturated_rounds'] * 1e3:.1f} ms for "
            f"{out['filtered_per_saturated_round']} filter checks")
    return out


def bench_event(args) -> dict:
    rows = []
    for frameworks in args.event_frameworks:
        log(f"[event] {args.event_agents} agents x {frameworks} frameworks, {args.event_reps} reps")
        mine_r, base_r = {}, {}
        # not interleaved: a call takes microseconds, and the baseline's sort between two calls
        # would evict the allocator's working set from the CPU caches and bias the flatness check
        lockstep(run_event("allocator", args.event_agents, frameworks, args.event_reps, args.seed, mine_r))
        gc.collect()
        lockstep(run_event("baseline", args.event_agents, frameworks, args.event_reps, args.seed, base_r))
        gc.collect()
        mine, my_choices = mine_r["out"], mine_r["choices"]
        base, base_choices = base_r["out"], base_r["choices"]
        same = sum(a == b for a, b in zip(my_choices, base_choices))
        rows.append({
            "frameworks": frameworks,
            "allocator": mine,
            "baseline": base,
            "choices_match": same == len(my_choices),
            "speedup": ratio(base["median_us"], mine["median_us"]),
        })
        log(f"[event] F={frameworks}: allocator median {mine['median_us']:.1f} us, baseline "
            f"{base['median_us']:.1f} us, same choices {same}/{len(my_choices)}")
    lo, hi = rows[0], rows[-1]
    return {
        "agents": args.event_agents,
        "reps": args.event_reps,
        "rows": rows,
        "allocator_ratio_max_over_min_frameworks": ratio(hi["allocator"]["median_us"], lo["allocator"]["median_us"]),
        "baseline_ratio_max_over_min_frameworks": ratio(hi["baseline"]["median_us"], lo["baseline"]["median_us"]),
    }


def targets(results: dict, event: dict | None) -> dict:
    out: dict = {}
    key = f"{TARGET_SIZE[0]}x{TARGET_SIZE[1]}"
    size = results.get(key)
    if size is None or "decline" not in size:
        out["speedup_10k_x_1k"] = {"met": None, "note": f"{key} decline not measured in this run"}
        out["cycle_10k_x_1k_below_mesos_1_8"] = {"met": None, "note": f"{key} decline not measured in this run"}
    else:
        decline = size["decline"]
        speedup = decline["speedup"]["median"]
        out["speedup_10k_x_1k"] = {
            "target": f">= {TARGET_SPEEDUP:g}x faster than the textbook baseline",
            "measure": "decline mode, median cycle (baseline / allocator)",
            "value": speedup,
            "other_cycles": {
                "decline_first_round": decline["speedup"]["first_round"],
                "accept_first_cycle": size.get("accept", {}).get("speedup", {}).get("first_cycle"),
                "accept_churn_median": size.get("accept", {}).get("speedup", {}).get("churn_median"),
            },
            "met": speedup is not None and speedup >= TARGET_SPEEDUP,
        }
        cycles = list(decline["allocator"]["cycle_s"])
        if "accept" in size:
            cycles.append(size["accept"]["allocator"]["first_cycle_s"])
            cycles.extend(size["accept"]["allocator"]["churn_cycle_s"])
        out["cycle_10k_x_1k_below_mesos_1_8"] = {
            "target": f"every cycle < {MESOS_18_CYCLE_SECONDS} s (Mesos 1.8 reference, 10k agents x 1k frameworks)",
            "measure": "slowest allocator cycle at 10k x 1k over all decline and accept cycles",
            "value_s": max(cycles),
            "decline_median_s": decline["allocator"]["median_s"],
            "met": max(cycles) < MESOS_18_CYCLE_SECONDS,
        }
    if event is None:
        out["event_flat"] = {"met": None, "note": "event mode not measured in this run"}
    else:
        value = event["allocator_ratio_max_over_min_frameworks"]
        out["event_flat"] = {
            "target": f"median allocate([agent]) at {event['rows'][-1]['frameworks']} frameworks <= "
                      f"{FLAT_RATIO:g} x the median at {event['rows'][0]['frameworks']}",
            "value_ratio": value,
            "met": value is not None and value <= FLAT_RATIO,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=None, help=f"AGENTSxFRAMEWORKS,... (default {DEFAULT_SIZES})")
    parser.add_argument("--rounds", type=int, default=None,
                        help="decline rounds and accept churn rounds per size (default 10)")
    parser.add_argument("--churn", type=float, default=0.1,
                        help="fraction of agents freed per accept round (default 0.1)")
    parser.add_argument("--modes", default="decline,accept,event",
                        help="which modes to run (default decline,accept,event)")
    parser.add_argument("--event-agents", type=int, default=None, help="agents in event mode (default 2000)")
    parser.add_argument("--event-frameworks", default=None,
                        help=f"framework counts in event mode (default {DEFAULT_EVENT_FRAMEWORKS})")
    parser.add_argument("--event-reps", type=int, default=None, help="freed agents timed per count (default 300)")
    parser.add_argument("--baseline-sample", type=int, default=5000,
                        help="for sizes with more than --baseline-sample-above agents, time the baseline on this "
                             "many agents (every k-th) and scale its cycle times linearly; 0 = never sample "
                             "(default 5000)")
    parser.add_argument("--baseline-sample-above", type=int, default=10000,
                        help="sizes with more agents than this get a sampled baseline (default 10000)")
    parser.add_argument("--saturated", default=None,
                        help="AGENTSxFRAMEWORKS for the full Mesos DeclineOffers loop (2 x F rounds, allocator "
                             "only; default 1000x100; 'none' to skip)")
    parser.add_argument("--seed", type=int, default=1, help="seeds both allocators' agent shuffles (default 1)")
    parser.add_argument("--quick", action="store_true", help="a small smoke run (seconds)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)

    quick = QUICK if args.quick else {}
    args.sizes = parse_sizes(args.sizes or quick.get("sizes", DEFAULT_SIZES))
    args.rounds = args.rounds if args.rounds is not None else quick.get("rounds", 10)
    args.event_agents = args.event_agents or quick.get("event_agents", 2000)
    args.event_frameworks = [int(x) for x in (args.event_frameworks or quick.get(
        "event_frameworks", DEFAULT_EVENT_FRAMEWORKS)).split(",") if x.strip()]
    args.event_reps = args.event_reps or quick.get("event_reps", 300)
    args.saturated = args.saturated or quick.get("saturated", "1000x100")
    args.saturated = None if args.saturated.lower() == "none" else parse_sizes(args.saturated)[0]
    args.modes = {m.strip() for m in args.modes.split(",") if m.strip()}
    unknown = args.modes - {"decline", "accept", "event"}
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")

    started = time.perf_counter()
    load_start = os.getloadavg()   # other work on the machine makes timings noisy
    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], os.getcwd()),
                                                            *(sys.argv[1:] if argv is None else argv)])
    doc: dict = {
        "benchmark": "mesoslike allocator vs textbook DRF (Mesos HierarchicalAllocator_BENCHMARK_Test style)",
        "command": command,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(),
        "code": code_info(),
        "config": {
            "agent_resources": AGENT_RESOURCES,
            "framework_role": "*",
            "sorter": "drf",
            "min_allocatable": MIN_ALLOCATABLE,
            "allocation_interval_s": ALLOCATION_INTERVAL,
            "decline_refuse_seconds": DAY,
            "rounds": args.rounds,
            "churn_fraction": args.churn,
            "seed": args.seed,
            "quick": args.quick,
            "modes": sorted(args.modes),
            "baseline_sample": args.baseline_sample or None,
            "baseline_sample_above": args.baseline_sample_above,
            "saturated": None if not args.saturated else "%dx%d" % args.saturated,
            "timer": "time.perf_counter around allocate(); gc.collect() before each timed cycle; GC disabled around "
                     "the allocator's cycle (as the master runtime does around a turn), left enabled for the baseline",
            "interleaved": "decline and accept: allocator and baseline run in lockstep, one timed cycle of each "
                           "in turn; event: the allocator's calls, then the baseline's",
        },
        "sizes": {},
    }
    for agents, frameworks in args.sizes:
        if args.modes & {"decline", "accept"}:
            key, result = bench_size(agents, frameworks, args)
            doc["sizes"][key] = result
    doc["decline_saturated"] = (bench_saturated(*args.saturated, args)
                                if args.saturated and "decline" in args.modes else None)
    event = bench_event(args) if "event" in args.modes else None
    doc["event"] = event
    doc["targets"] = targets(doc["sizes"], event)
    finish(doc, started, load_start, args.out, log, code_changed=code_hashes() != IMPORTED_CODE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
