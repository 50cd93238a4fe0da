"""How fast can CPython do the bare minimum of one DRF grant per agent?

Per agent: take the first framework of a bisected list, add the agent's
resources to its allocation, recompute its dominant share, re-sort it, make
the offer. No roles, filters, quota or bookkeeping. ``docs/performance.rst``
compares the allocator's cost per agent with this floor.

    python bench/cpython_floor.py [--agents 10000] [--frameworks 1000]
"""

import argparse
import bisect
import json
import time

from mesoslike.allocator.offers import issue_offer
from mesoslike.resources import Resources


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--frameworks", type=int, default=1_000)
    args = parser.parse_args()
    agent = Resources.parse("cpus:24;mem:4096;disk:4096;ports:[31000-32000]")
    total = {kind: amount * args.agents for kind, amount in agent.millis().items()}
    order = [(0.0, 0, f"f{i:05d}", i) for i in range(args.frameworks)]
    allocations = [{} for _ in range(args.frameworks)]
    counts = [0] * args.frameworks
    offers = {}
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for a in range(args.agents):
            entry = order[0]
            i = entry[3]
            alloc = allocations[i]
            for kind, amount in agent.millis().items():
                alloc[kind] = alloc.get(kind, 0) + amount
            counts[i] += 1
            share = max(amount / total[kind] for kind, amount in alloc.items())
            del order[0]
            bisect.insort(order, (share, counts[i], entry[2], i))
            offer = issue_offer(f"O{a}", entry[2], f"a{a}", "h", agent, {})
            offers[offer.id] = offer
        best = min(best, time.perf_counter() - started)
    print(json.dumps({"benchmark": "cpython_floor", "agents": args.agents, "frameworks": args.frameworks,
                      "cycle_s": best, "us_per_agent": best / args.agents * 1e6}, indent=2))


if __name__ == "__main__":
    main()
