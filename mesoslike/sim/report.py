"""``mesoslike simulate --report DIR``: the JSON document, the plots (PNG and
SVG) and a small HTML page that shows them.

The one module of the simulator that writes files, and the only one that
needs matplotlib (the ``sim`` extra: ``pip install mesoslike[sim]``). It is
imported only when a report is asked for. Output is deterministic: the same
results give byte-identical JSON and SVG files (fixed SVG hash salt, no
dates in the metadata) and PNG files identical for a given matplotlib.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from mesoslike.sim.engine import SimulationResult

__all__ = ["comparison_document", "write_json", "write_report", "plot_policy", "plot_comparison", "REPORT_JSON"]

REPORT_JSON = "simulation.json"
#: the formats every figure is written in
FORMATS = ("png", "svg")


def comparison_document(results: Mapping[str, SimulationResult], checkpoints: int = 1) -> dict:
    """One JSON document for runs of the same workload under several policies."""
    first = next(iter(results.values()))
    return {
        "workload": first.workload,
        "description": first.description,
        "seed": first.seed,
        "agents": first.agents,
        "total": str(first.total),
        "policies": list(results),
        "runs": {policy: result.to_dict(checkpoints) for policy, result in results.items()},
    }


def write_json(document: Mapping, path: Path) -> None:
    """Write ``document`` as stable JSON (sorted keys are not needed: every
    mapping is built in a fixed order)."""
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


# ===================================================================== plots
def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - depends on the installation
        raise RuntimeError("plots need matplotlib: pip install 'mesoslike[sim]'") from None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "mesoslike"   # stable element ids
    matplotlib.rcParams["svg.fonttype"] = "none"        # text stays text: smaller, stable files
    import matplotlib.pyplot as plt
    return plt


def _save(fig: Any, base: Path) -> list[Path]:
    paths = []
    for fmt in FORMATS:
        path = base.with_suffix(f".{fmt}")
        metadata = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(path, format=fmt, metadata=metadata, dpi=100)
        paths.append(path)
    return paths


def _time_axis(seconds: Sequence[float]) -> tuple[list[float], str]:
    """Times in a readable unit for the axis."""
    end = max(seconds, default=0.0)
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if end >= 3 * size:
            return [t / size for t in seconds], unit
    return list(seconds), "seconds"


def _time(ax: Any, series: Mapping) -> list[float]:
    """The series' times for the x axis (log for long runs), labelled."""
    if series.get("axis") == "log":
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel("simulated time (s, log scale)")
        return list(series["time"])
    times, unit = _time_axis(series["time"])
    ax.set_xlabel(f"simulated time ({unit})")
    return times


def _plot_utilisation(ax: Any, metrics: Mapping) -> None:
    series = metrics["series"]
    times = _time(ax, series)
    for kind, values in series["utilisation"].items():
        ax.step(times, values, where="post", label=kind)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("utilisation (share of cluster)")
    ax.set_xlim(left=0)   # after the data: setting a limit first stops autoscaling
    ax.legend(loc="upper left", fontsize="small")


def _plot_shares(ax: Any, metrics: Mapping) -> None:
    series = metrics["series"]
    times = _time(ax, series)
    for cls, data in series["by_class"].items():
        ax.step(times, data["dominant_share"], where="post", label=cls)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("dominant share (of the cluster)")
    ax.set_xlim(left=0)   # after the data: setting a limit first stops autoscaling
    ax.legend(loc="upper left", fontsize="small")


def _plot_waits(ax: Any, metrics: Mapping) -> None:
    cdf = metrics["wait_cdf"]
    quantiles = cdf["quantiles"]
    for cls, waits in cdf["by_class"].items():
        # null: the quantiles reached only by tasks that never started; the curve stops below 1
        points = [(w, q) for w, q in zip(waits, quantiles) if w is not None]
        entry = metrics["wait"][cls]
        ax.step([w for w, _ in points], [q for _, q in points], where="post",
                label=f"{cls} ({entry['started']} of {entry['tasks']} started)")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(left=0)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("wait before start (simulated s)")
    ax.set_ylabel("fraction of tasks")
    ax.legend(loc="lower right", fontsize="small")


_PANELS = (("utilisation over time", _plot_utilisation), ("dominant shares over time", _plot_shares),
           ("wait-time CDF per class", _plot_waits))


def plot_policy(result: SimulationResult, base: Path) -> list[Path]:
    """One figure for one run: utilisation, dominant shares, wait CDF."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (title, draw) in zip(axes, _PANELS):
        draw(ax, result.metrics)
        ax.set_title(title)
    fig.suptitle(f"{result.workload}: policy {result.policy}")
    fig.tight_layout()
    try:
        return _save(fig, base)
    finally:
        plt.close(fig)


def plot_comparison(results: Mapping[str, SimulationResult], base: Path) -> list[Path]:
    """The runs side by side: a column per policy, a row per measure, the
    axes of a row shared."""
    plt = _pyplot()
    count = len(results)
    fig, axes = plt.subplots(3, count, figsize=(4.6 * count, 10), squeeze=False, sharey="row")
    for column, (policy, result) in enumerate(results.items()):
        for row, (title, draw) in enumerate(_PANELS):
            ax = axes[row][column]
            draw(ax, result.metrics)
            ax.set_title(f"{policy}: {title}", fontsize="medium")
    first = next(iter(results.values()))
    fig.suptitle(f"{first.workload}: {', '.join(results)}")
    fig.tight_layout()
    try:
        return _save(fig, base)
    finally:
        plt.close(fig)


# ====================================================================== html
def _cell(value: object) -> str:
    if value is None:
        return "&ndash;"
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def _never(entry: Mapping, key: str) -> object:
    """A wait of the summary: "never" for null (tasks that never started)."""
    if key in entry and entry[key] is None:
        return "never"
    return entry.get(key)


def _summary_rows(results: Mapping[str, SimulationResult]) -> list[tuple[str, list[object]]]:
    rows: list[tuple[str, list[object]]] = []
    docs = {p: r.to_dict() for p, r in results.items()}
    rows.append(("tasks started / submitted", [f"{d['tasks']['launched']} / {d['tasks']['submitted']}"
                                               for d in docs.values()]))
    rows.append(("makespan (s)", [r.metrics["makespan"] for r in results.values()]))
    kinds = list(next(iter(results.values())).metrics["mean_utilisation"])
    for kind in kinds:
        rows.append((f"mean {kind} utilisation", [r.metrics["mean_utilisation"][kind] for r in results.values()]))
    classes = [c for c in next(iter(results.values())).metrics["wait"] if c != "all"]
    for cls in classes + ["all"]:
        rows.append((f"{cls}: started / tasks", [f"{r.metrics['wait'][cls]['started']} / {r.metrics['wait'][cls]['tasks']}"
                                                 for r in results.values()]))
        for q in ("p50", "p90", "p99", "max"):
            rows.append((f"wait {q} {cls} (s)", [_never(r.metrics["wait"][cls], q) for r in results.values()]))
    rows.append(("preemptions", [r.metrics["preemptions"]["total"] for r in results.values()]))
    rows.append(("offers made", [r.metrics["offers"]["made"] for r in results.values()]))
    rows.append(("offers declined", [r.metrics["offers"]["declined"] for r in results.values()]))
    rows.append(("top reasons for waiting", [", ".join(f"{t['reason']} {t['share']:.0%}"
                                                       for t in r.metrics["why_waiting"]["top"][:3]) or "none"
                                             for r in results.values()]))
    return rows


def write_html(results: Mapping[str, SimulationResult], directory: Path, figures: Mapping[str, str]) -> Path:
    """``index.html``: the summary table and the figures (PNG, linking the SVG)."""
    first = next(iter(results.values()))
    head = "".join(f"<th>{html.escape(p)}</th>" for p in results)
    body = "\n".join(f"<tr><th>{html.escape(label)}</th>{''.join(f'<td>{_cell(v)}</td>' for v in values)}</tr>"
                     for label, values in _summary_rows(results))
    images = "\n".join(
        f'<h2>{html.escape(title)}</h2>\n<a href="{name}.svg"><img src="{name}.png" alt="{html.escape(title)}"></a>'
        for title, name in figures.items())
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>mesoslike simulate: {html.escape(first.workload)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }}
th:first-child {{ text-align: left; }}
img {{ max-width: 100%; }}
</style>
</head>
<body>
<h1>mesoslike simulate: {html.escape(first.workload)}</h1>
<p>{html.escape(first.description)}; {first.agents} agents ({html.escape(str(first.total))}), seed {first.seed}.
The data: <a href="{REPORT_JSON}">{REPORT_JSON}</a>.</p>
<table>
<tr><th>policy</th>{head}</tr>
{body}
</table>
{images}
</body>
</html>
"""
    path = directory / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_report(results: Mapping[str, SimulationResult], directory: str | Path, checkpoints: int = 1) -> list[Path]:
    """Write the JSON, one figure per policy, the comparison figure (with
    more than one policy) and ``index.html`` into ``directory`` (created if
    needed). Returns the files written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    json_path = directory / REPORT_JSON
    write_json(comparison_document(results, checkpoints), json_path)
    written.append(json_path)
    figures: dict[str, str] = {}
    if len(results) > 1:
        written += plot_comparison(results, directory / "compare")
        figures["the policies side by side"] = "compare"
    for policy, result in results.items():
        written += plot_policy(result, directory / f"policy-{policy}")
        figures[f"policy {policy}"] = f"policy-{policy}"
    written.append(write_html(results, directory, figures))
    return written
