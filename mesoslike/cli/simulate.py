"""``mesoslike simulate``: the allocator driven over a workload in simulated time."""

from __future__ import annotations

import json
from pathlib import Path

import click
from click.core import ParameterSource



# ================================================================== simulate
def _simulate_option(*decls: str, **kwargs):
    """A ``simulate`` option with its ``MESOSLIKE_SIMULATE_<NAME>`` env var
    and its default shown in ``--help``."""
    name = decls[0].lstrip("-").replace("-", "_").upper()
    kwargs.setdefault("show_default", True)
    return click.option(*decls, envvar=f"MESOSLIKE_SIMULATE_{name}", show_envvar=True, **kwargs)


_TRACE_ONLY = ("trace_dir", "nodes", "pods", "time_scale")


@click.command()
@_simulate_option("--workload", type=click.Choice(["drf-example", "trace"]), default="drf-example",
                  help="drf-example: the DRF worked example of seed 004 (one agent, frameworks A and B); "
                       "trace: replay the Alibaba openb 2023 trace, one framework per QoS class.")
@_simulate_option("--trace-dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
                  show_default="bench/data/alibaba-openb-2023 of the source checkout",
                  help="Directory holding openb_node_list_all_node.csv and openb_pod_list_default.csv "
                       "(trace workload only).")
@_simulate_option("--nodes", type=click.IntRange(min=0), default=400,
                  help="Use only the first N nodes of the trace as agents; 0 = all 1,523.")
@_simulate_option("--pods", type=click.IntRange(min=0), default=2000,
                  help="Use only the first N pods of the trace as tasks; 0 = all 8,152.")
@_simulate_option("--time-scale", type=click.FloatRange(min=0, min_open=True), default=10000.0,
                  help="Divide every trace time (arrivals, durations) by X; the default turns the "
                       "150-day trace into about 21 simulated minutes.")
@_simulate_option("--sorter", type=click.Choice(["drf", "random"]), default="drf",
                  help="Order in which the allocator offers resources to frameworks.")
@_simulate_option("--seed", type=click.IntRange(min=0), default=0,
                  help="Seed of the allocator's random.Random (agent order, random sorter).")
@_simulate_option("--refuse-seconds", type=click.FloatRange(min=0), default=5.0,
                  help="Filter a framework asks for when it declines an offer it cannot use (simulated s).")
@_simulate_option("--checkpoints", type=click.IntRange(min=1), default=5,
                  help="Print the framework table at N rounds spread over the run (the last is the final round).")
@_simulate_option("--json", "as_json", is_flag=True, default=False, show_default="off",
                  help="Print one JSON document instead of tables.")
@click.pass_context
def simulate(ctx: click.Context, workload: str, trace_dir: Path | None, nodes: int, pods: int,
             time_scale: float, sorter: str, seed: int, refuse_seconds: float, checkpoints: int,
             as_json: bool) -> None:
    """Replay a workload through the allocator in simulated time.

    Prints each framework's dominant share, running tasks and offers
    received and declined, at checkpoints and at the end.

    Deterministic and fast: a fake clock, a seeded random generator, no I/O
    but reading the trace. Frameworks are greedy schedulers that launch what
    fits an offer, decline what they cannot use, suppress offers when idle
    and revive when tasks arrive.
    """
    from mesoslike import simulate as sim  # keeps `mesoslike --help` fast

    if workload == "trace":
        loaded = _load_trace(trace_dir, nodes, pods, time_scale)
    else:
        given = [p for p in _TRACE_ONLY if ctx.get_parameter_source(p) == ParameterSource.COMMANDLINE]
        if given:
            flags = ", ".join("--" + p.replace("_", "-") for p in given)
            noun, verb = ("option", "applies") if len(given) == 1 else ("options", "apply")
            raise click.UsageError(f"{noun} {flags} {verb} only to --workload trace")
        loaded = sim.drf_example_workload()
    config = sim.SimulationConfig(sorter=sorter, seed=seed, refuse_seconds=refuse_seconds)
    result = sim.simulate(loaded, config)
    if as_json:
        click.echo(json.dumps(result.to_dict(checkpoints), indent=2))
    else:
        click.echo("\n".join(_format_result(result, loaded, checkpoints)))


def _load_trace(trace_dir: Path | None, nodes: int, pods: int, time_scale: float):
    """Load the trace workload, turning a missing or broken trace into a usage error."""
    from mesoslike import simulate as sim

    directory = trace_dir if trace_dir is not None else sim.DEFAULT_TRACE_DIR
    try:
        return sim.load_openb_trace(directory, nodes=nodes or None, pods=pods or None, time_scale=time_scale)
    except sim.TraceError as exc:
        hint = "" if trace_dir is not None else " (give the trace directory with --trace-dir)"
        raise click.BadParameter(f"{exc}{hint}", param_hint="'--trace-dir'") from None


def _format_table(snapshot, final: bool) -> list[str]:
    """One checkpoint: a heading line and one row per framework."""
    label = "final round" if final else "round"
    lines = [f"{label} {snapshot.round}, t={snapshot.time:.1f}s: offers made {snapshot.offers_made}, "
             f"declined {snapshot.offers_declined}; tasks running {snapshot.running_tasks}"]
    width = max([len("framework")] + [len(f.framework_id) for f in snapshot.frameworks])
    lines.append(f"  {'framework':<{width}}  {'share':>6}  {'running':>7}  {'queued':>6}  "
                 f"{'finished':>8}  {'offers':>6}  {'declined':>8}")
    for f in snapshot.frameworks:
        lines.append(f"  {f.framework_id:<{width}}  {f.dominant_share:>6.3f}  {f.running_tasks:>7}  "
                     f"{f.queued_tasks:>6}  {f.finished_tasks:>8}  {f.offers_received:>6}  {f.offers_declined:>8}")
    return lines


def _format_result(result, workload, checkpoints: int) -> list[str]:
    """Header, one table per checkpoint, summary line."""
    agents = f"{result.agents} agent" + ("" if result.agents == 1 else "s")
    lines = [
        f"mesoslike simulate: {result.workload} ({result.description})",
        f"{agents} ({result.total}), {len(workload.frameworks)} frameworks, {result.tasks_submitted} tasks; "
        f"sorter {result.sorter}, seed {result.seed}",
    ]
    for snapshot in result.checkpoints(checkpoints):
        lines.append("")
        lines.extend(_format_table(snapshot, snapshot is result.final))
    tasks = result.to_dict()["tasks"]
    extras = ""
    if result.tasks_unplaceable:
        extras += f", {result.tasks_unplaceable} fit no agent"
    if result.skipped:
        extras += ", rows skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(result.skipped.items()))
    lines += ["", f"summary: {len(result.rounds)} rounds over {result.final.time:.1f} simulated s; "
                  f"{tasks['launched']} tasks launched, {tasks['finished']} finished, {tasks['running']} running, "
                  f"{tasks['queued']} queued{extras}; {result.final.offers_made} offers, "
                  f"{result.final.offers_declined} declined; stopped: {result.stop_reason}"]
    return lines

