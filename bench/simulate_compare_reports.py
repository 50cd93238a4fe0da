#!/usr/bin/env python3
"""Two ``mesoslike simulate --json`` reports of one policy side by side: the
figures a reader needs to judge a change of the model (rounds, offers,
preemptions, the waits of every class, utilisation and dominant shares
while pods arrive, why tasks waited).

The runs' ``mean_utilisation`` covers the whole simulated time, months of a
few long-running pods after the contended hours; the *contended window*
(``--window``, default the first 4 hours, the arrivals of the contended
command) averages the utilisation and dominant-share series over it, time-weighted
(a sample holds until the next), and gives their peaks.

    python bench/simulate_compare_reports.py before.json after.json [--names BEFORE,AFTER] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def figures(doc: dict, window: float) -> dict:
    """The figures of one report (a ``--policy P --json`` document)."""
    m = doc["metrics"]
    series = m["series"]
    times = series["time"]
    inside = [i for i, t in enumerate(times) if t <= window]

    def over_window(values: list[float]) -> dict:
        """Time-weighted mean (each sample holds until the next) and peak of the samples in the window."""
        if not inside:
            return {"mean": None, "peak": None}
        area = sum(values[i] * (min(times[i + 1] if i + 1 < len(times) else window, window) - times[i])
                   for i in inside)
        return {"mean": round(area / window, 4), "peak": round(max(values[i] for i in inside), 4)}

    util = {kind: over_window(values) for kind, values in series["utilisation"].items()}
    shares = {name: over_window(by["dominant_share"]) for name, by in series["by_class"].items()}
    waits = {name: {k: w[k] for k in ("tasks", "started", "mean_started", "p50", "p90", "p99", "max")}
             for name, w in m["wait"].items()}
    return {
        "rounds": doc["rounds"],
        "time": doc["time"],
        "offers": m["offers"],
        "tasks": doc["tasks"],
        "preemptions": m["preemptions"],
        "wait": waits,
        "contended_window_s": window,
        "utilisation_in_window": util,
        "dominant_share_in_window": shares,
        "why_waiting_top": [(t["reason"], t["share"]) for t in m["why_waiting"]["top"]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--names", default="before,after", help="the two columns' names (default before,after)")
    parser.add_argument("--window", type=float, default=4 * 3600.0,
                        help="the contended window, simulated seconds from 0 (default 14400)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    names = args.names.split(",")
    docs = [json.loads(path.read_text()) for path in (args.before, args.after)]
    out = {"policy": docs[0].get("policy"), "files": [str(args.before), str(args.after)],
           **{name: figures(doc, args.window) for name, doc in zip(names, docs)}}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    before, after = (out[n] for n in names)
    print(f"\n{'figure':34} {names[0]:>22} {names[1]:>22}", file=sys.stderr)
    rows = [("rounds", before["rounds"], after["rounds"]),
            ("offers made / declined", "{made} / {declined}".format(**before["offers"]),
             "{made} / {declined}".format(**after["offers"])),
            ("preemptions", before["preemptions"]["total"], after["preemptions"]["total"])]
    for name in before["wait"]:
        for key in ("mean_started", "p50", "p90", "p99", "max"):
            rows.append((f"wait {name} {key}", before["wait"][name][key], after["wait"][name][key]))
    for kind in before["utilisation_in_window"]:
        b, a = before["utilisation_in_window"][kind], after["utilisation_in_window"][kind]
        rows.append((f"util {kind} mean / peak", f"{b['mean']} / {b['peak']}", f"{a['mean']} / {a['peak']}"))
    for name in before["dominant_share_in_window"]:
        b, a = before["dominant_share_in_window"][name], after["dominant_share_in_window"][name]
        rows.append((f"share {name} mean / peak", f"{b['mean']} / {b['peak']}", f"{a['mean']} / {a['peak']}"))
    for label, b, a in rows:
        print(f"{label:34} {str(b):>22} {str(a):>22}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
