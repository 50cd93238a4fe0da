#!/usr/bin/env python3
"""Where the contended simulation's rounds and offers come from, policy by
policy: could an event-driven clock or fewer offers make it cheaper
without changing its report?

Runs ``mesoslike simulate`` (by default the contended case: ``--workload
trace --nodes 500 --load 1000 --quota examples/simulate/quota.toml``) once
per policy, in this process, with the simulator's round and decline
methods wrapped to count (the wrappers call the real methods and change
nothing; the run's JSON digest is recorded so it can be checked against
``bench/simulate_contended.py``'s):

* ``rounds``; ``rounds_with_event``: rounds at whose time a task arrived or
  ended (those an event-driven clock must run anyway); the others ran only
  because the round before made offers and a framework still wanted some
  (a filter expiring can change a cycle), and ``offers_in_rounds_without_event``;
* ``offers_made`` (as the report counts them), ``declines``, and
  ``repeat_declines``: declines of the very resources the same framework
  declined on the same agent the time before (what a framework that
  declines "until something changes" would not be offered again);
* ``rounds_with_launch``: rounds in which a task started.

Prints one JSON document (progress on stderr); ``--out FILE`` also writes
it there. The CPU time of an instrumented run is not a benchmark figure
(``bench/simulate_contended.py`` times the runs).

    python bench/simulate_census.py --out bench/results/simulate_census.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from benchlib import finish, git_state, start  # noqa: E402

from mesoslike.cli import main as cli_main  # noqa: E402
from mesoslike.sim import engine  # noqa: E402

CONTENDED = "--workload trace --nodes 500 --load 1000 --quota examples/simulate/quota.toml"
POLICIES = "drf,random,fuxi-fifo,fuxi-fair"
CODE_FILES = ["mesoslike/sim/engine.py", "mesoslike/sim/schedulers.py",
              "frameworks/mesoslike_frameworks/fuxi/simulation.py", "frameworks/mesoslike_frameworks/fuxi/core.py"]


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def census(argv: list[str]) -> dict[str, Any]:
    """One instrumented run of ``mesoslike simulate argv``: the counts above."""
    counts = dict.fromkeys(("rounds", "rounds_with_event", "rounds_with_launch", "offers_made",
                            "offers_in_rounds_without_event", "declines", "repeat_declines"), 0)
    last_declined: dict[tuple[str, str], object] = {}
    plain_round, plain_decline = engine.Simulator._round, engine.Simulator.decline

    def counted_round(sim: engine.Simulator) -> int:
        now = sim.clock.now()
        tasks = sim._tasks
        event = bool(sim._ends and sim._ends[0][0] <= now) or \
            (sim._next_arrival < len(tasks) and tasks[sim._next_arrival].arrival <= now)
        launched_before = sum(c.launched for c in sim.scheduler.counters.values())
        made = plain_round(sim)
        counts["rounds"] += 1
        counts["offers_made"] += made
        counts["rounds_with_event"] += event
        if not event:
            counts["offers_in_rounds_without_event"] += made
        counts["rounds_with_launch"] += sum(c.launched for c in sim.scheduler.counters.values()) > launched_before
        return made

    def counted_decline(sim: engine.Simulator, offer: Any, refuse_seconds: float) -> None:
        key = (offer.agent_id, offer.framework_id)
        counts["declines"] += 1
        counts["repeat_declines"] += last_declined.get(key) == offer.resources
        last_declined[key] = offer.resources
        plain_decline(sim, offer, refuse_seconds)

    out = io.StringIO()
    cpu0 = time.process_time()
    engine.Simulator._round = counted_round          # type: ignore[method-assign,assignment]
    engine.Simulator.decline = counted_decline       # type: ignore[method-assign,assignment]
    try:
        with contextlib.redirect_stdout(out):
            try:
                cli_main(["simulate", *argv], standalone_mode=False)
            except SystemExit as exc:     # click's exit: a failure is a non-zero code
                if exc.code:
                    raise
    finally:
        engine.Simulator._round = plain_round        # type: ignore[method-assign]
        engine.Simulator.decline = plain_decline     # type: ignore[method-assign]
    data = out.getvalue().encode()
    return {**counts, "instrumented_cpu_s": round(time.process_time() - cpu0, 3),
            "json_sha256": hashlib.sha256(data).hexdigest(),
            "share_rounds_with_event": round(counts["rounds_with_event"] / max(1, counts["rounds"]), 4),
            "share_repeat_declines": round(counts["repeat_declines"] / max(1, counts["declines"]), 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--args", default=CONTENDED, help=f"simulate's arguments but the policy (default {CONTENDED})")
    parser.add_argument("--policies", default=POLICIES, help=f"comma-separated (default {POLICIES})")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    os.chdir(ROOT)    # the default arguments name files of the checkout
    head, dirty = git_state(CODE_FILES)
    doc, started, load_start = start("mesoslike simulate: where the rounds and offers come from", argv,
                                     {"git_head": head, "measured_files_differ_from_head": dirty})
    common = [*shlex.split(args.args), "--json"]
    doc["config"] = {"simulate_args": common, "policies": args.policies.split(",")}
    results: dict[str, dict] = {}
    for policy in args.policies.split(","):
        results[policy] = census([*common, "--policy", policy])
        log(f"{policy}: {results[policy]}")
    doc["results"] = results
    finish(doc, started, load_start, args.out, log, code_changed=git_state(CODE_FILES) != (head, dirty))
    return 0


if __name__ == "__main__":
    sys.exit(main())
