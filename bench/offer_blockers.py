#!/usr/bin/env python3
"""What "why no offers" costs (docs/operations.rst): the allocator's
``offer_blockers()`` query on a busy allocator — ``--agents`` agents,
``--frameworks`` frameworks in ``--roles`` roles, every agent offered or
declined with a long filter, a tenth of the frameworks suppressed — and the
allocation cycle it must not slow: cycles on an allocator asked the query
before each, against the baseline of the same history never asked, built
in the same run with the same seed.

Timed with ``time.perf_counter``, the best of ``--repeat``.

    python bench/offer_blockers.py [--agents 2000] [--frameworks 200] [--out bench/results/offer_blockers.json]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib  # noqa: E402

from mesoslike.allocator import HierarchicalAllocator  # noqa: E402
from mesoslike.clock import FakeClock  # noqa: E402
from mesoslike.resources import Resources  # noqa: E402

AGENT = Resources.parse("cpus:8;mem:16384")
TASK = Resources.parse("cpus:1;mem:1024")


def busy(agents: int, frameworks: int, roles: int, seed: int = 7) -> tuple[HierarchicalAllocator, FakeClock]:
    """An allocator whose frameworks took a task from each offer, declined
    the rest for an hour, and a tenth of which suppressed offers."""
    clock = FakeClock()
    alloc = HierarchicalAllocator(clock, rng=random.Random(seed))
    for i in range(agents):
        alloc.add_agent(f"a{i}", AGENT)
    for i in range(frameworks):
        alloc.add_framework(f"f{i}", role=f"r{i % roles}")
    for _ in range(3):
        for offer in alloc.allocate():
            alloc.accept_offer(offer.id, TASK, refuse_seconds=3600.0)
        clock.advance(1.0)
    for i in range(0, frameworks, 10):
        alloc.suppress_offers(f"f{i}")
    return alloc, clock


def cycles(alloc: HierarchicalAllocator, clock: FakeClock, repeat: int, ask: bool) -> float:
    """The best time of a cycle over all agents (a freed task on each first), asked the query before or not."""
    best = float("inf")
    for n in range(repeat):
        for offer in alloc.outstanding_offers():
            alloc.decline_offer(offer.id, refuse_seconds=0.0)
        if ask:
            alloc.offer_blockers()
        clock.advance(1.0)
        started = time.perf_counter()
        alloc.allocate()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--frameworks", type=int, default=200)
    parser.add_argument("--roles", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=7, help="measurements of each; the best is kept")
    parser.add_argument("--out", help="also write the JSON document here")
    args = parser.parse_args(argv)
    code = ["mesoslike/allocator/hierarchical.py", "mesoslike/allocator/blockers.py", "mesoslike/allocator/filters.py"]
    head, dirty = benchlib.git_state(code)
    doc, started, load = benchlib.start("offer_blockers", argv, {"git_head": head, "dirty": dirty,
                                                                  "files": benchlib.blob_ids(code)})
    alloc, clock = busy(args.agents, args.frameworks, args.roles)
    queries = []
    for _ in range(args.repeat):
        began = time.perf_counter()
        answer = alloc.offer_blockers()
        queries.append(time.perf_counter() - began)
    reasons: dict[str, int] = {}
    for blockers in answer.values():
        for blocker in blockers:
            reasons[blocker.reason] = reasons.get(blocker.reason, 0) + 1
    doc["setup"] = {"agents": args.agents, "frameworks": args.frameworks, "roles": args.roles,
                    "frameworks_without_offers": len(answer), "reasons": dict(sorted(reasons.items()))}
    doc["query_ms"] = round(min(queries) * 1e3, 3)
    never = busy(args.agents, args.frameworks, args.roles)
    doc["cycle_ms_never_asked"] = round(cycles(*never, args.repeat, ask=False) * 1e3, 3)
    asked = busy(args.agents, args.frameworks, args.roles)
    doc["cycle_ms_asked_before_each"] = round(cycles(*asked, args.repeat, ask=True) * 1e3, 3)
    benchlib.finish(doc, started, load, Path(args.out) if args.out else None,
                    lambda line: print(line, file=sys.stderr))


if __name__ == "__main__":
    main()
