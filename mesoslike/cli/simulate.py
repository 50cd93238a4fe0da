"""``mesoslike simulate``: a workload through the allocator (and the Fuxi
core) in simulated time, one policy or several compared."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import click
from click.core import ParameterSource

from mesoslike.cli.options import option
from mesoslike.sim.policies import greedy_policies, load_policy, policy_names

#: the allocator's sorters over greedy frameworks, then the policy plugins (the bundled fuxi-fifo, fuxi-fair)
POLICY_NAMES = policy_names()
#: options that apply to one kind of workload only
_ONLY = {
    "trace": ("trace_dir", "nodes", "pods", "copies", "time_scale", "pending", "job_window"),
    "synthetic": ("agents", "tasks"),
    "file": ("workload_file",),
}
_LOADED = ("trace", "synthetic")   # --load applies to these


def _simulate_option(*decls: str, **kwargs: Any) -> Callable:
    """A ``simulate`` option with its ``MESOSLIKE_SIMULATE_<NAME>`` env var and its default shown."""
    return option("simulate", *decls, **kwargs)


def _policies(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in POLICY_NAMES]
    if unknown or not names:
        raise click.BadParameter(f"{', '.join(map(repr, unknown)) or 'nothing'}: give policies among "
                                 f"{', '.join(POLICY_NAMES)}, separated by commas", ctx, param)
    if len(set(names)) != len(names):
        raise click.BadParameter("a policy is named twice", ctx, param)
    return names


@click.command()
@_simulate_option("--workload", type=click.Choice(["drf-example", "trace", "synthetic", "file"]),
                  default="drf-example",
                  help="drf-example: the DRF worked example of seed 004 (one agent, frameworks A and B); "
                       "trace: the Alibaba openb 2023 trace, a class per QoS class; synthetic: Poisson "
                       "arrivals, heavy-tailed durations, three roles; file: your own trace (--workload-file).")
@_simulate_option("--trace-dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
                  show_default="the bundled Alibaba openb 2023 trace (mesoslike/sim/data)",
                  help="Directory holding openb_node_list_all_node.csv and openb_pod_list_default.csv "
                       "(trace workload only).")
@_simulate_option("--nodes", type=click.IntRange(min=0), default=0,
                  help="Use only the first N nodes of the trace as agents; 0 = all 1,523.")
@_simulate_option("--pods", type=click.IntRange(min=0), default=0,
                  help="Use only the first N pods of the trace as tasks; 0 = all 8,152.")
@_simulate_option("--copies", type=click.IntRange(min=1), default=1,
                  help="The trace's nodes and pods N times over: a cluster N times as big with N times the work "
                       "(each copy of a pod arrives with it, in jobs of its own copy).")
@_simulate_option("--time-scale", type=click.FloatRange(min=0, min_open=True), default=1.0,
                  help="Divide every trace time (arrivals, durations) by X.")
@_simulate_option("--pending", type=click.Choice(["lifetime", "skip"]), default="lifetime",
                  help="Pods the trace never scheduled: run them for their lifetime in the trace, or skip them.")
@_simulate_option("--job-window", type=click.FloatRange(min=0), default=3600.0,
                  help="Pods of a class with the same requests, each created within S trace seconds of the "
                       "previous one, are one job (Fuxi's FIFO and FAIR order jobs); 0 = a job per pod.")
@_simulate_option("--load", type=click.FloatRange(min=0, min_open=True), default=1.0,
                  help="Arrival-rate factor. trace: the pods arrive X times as fast (durations unchanged); "
                       "synthetic: X times the rate that keeps the cluster's scarcest resource busy.")
@_simulate_option("--agents", type=click.IntRange(min=1), default=60, help="Agents of the synthetic workload.")
@_simulate_option("--tasks", type=click.IntRange(min=1), default=2000, help="Tasks of the synthetic workload.")
@_simulate_option("--workload-file", type=click.Path(exists=True, path_type=Path), default=None,
                  show_default="none",
                  help="Your trace (workload file): a JSON file, or a directory with agents.csv and tasks.csv "
                       "(format in docs/simulate.rst).")
@_simulate_option("--sorter", type=click.Choice(["drf", "random"]), default="drf",
                  help="Order in which the allocator offers resources to frameworks; --sorter S is --policy S.")
@_simulate_option("--policy", type=click.Choice(POLICY_NAMES), default=None, show_default="the --sorter",
                  help="drf, random: a greedy framework per class under that sorter; fuxi-fifo, fuxi-fair: "
                       "the Fuxi scheduler's core as the one framework.")
@_simulate_option("--compare", callback=_policies, default=None, show_default="none",
                  help="Run several policies on the same workload, e.g. drf,random,fuxi-fifo,fuxi-fair.")
@_simulate_option("--roles", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
                  show_default="none",
                  help="Roles file (docs/roles.rst): weights and quota of the allocator's roles, a role per class.")
@_simulate_option("--quota", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
                  show_default="none",
                  help="Fuxi quota file (docs/fuxi.rst): quota groups, a group per class (others: default).")
@_simulate_option("--preemption/--no-preemption", default=None, show_default="the quota file's, else on",
                  help="Let the Fuxi core preempt lower priority tasks and take back lent quota.")
@_simulate_option("--seed", type=click.IntRange(min=0), default=0,
                  help="Seed of the random generators (agent order, random sorter).")
@_simulate_option("--refuse-seconds", type=click.FloatRange(min=0), default=5.0,
                  help="Filter a framework asks for when it declines an offer it cannot use (simulated s).")
@_simulate_option("--cycle-chunk", type=click.IntRange(min=0), default=1,
                  help="Agents of the first batch of an allocation cycle (doubling after); 0 = the whole cycle "
                       "at once (docs/simulate.rst, Allocation cycles).")
@_simulate_option("--offer-filters/--no-offer-filters", default=True, show_default="on",
                  help="Frameworks (drf, random, and the Fuxi scheduler) keep offer filters: the allocator offers "
                       "a framework only agents whose free resources hold some task it waits for (Mesos's "
                       "min_allocatable_resources of offer_filters); off: every agent, declined "
                       "(docs/simulate.rst).")
@_simulate_option("--full-passes", is_flag=True, default=False, show_default="off",
                  help="Run the Fuxi core's scheduling pass in full on every batch, even where a pass could "
                       "change nothing (quiet passes); the same results, slower: for checks and benchmarks.")
@_simulate_option("--checkpoints", type=click.IntRange(min=1), default=5,
                  help="Print the framework table at N rounds spread over the run (the last is the final round).")
@_simulate_option("--json", "as_json", is_flag=True, default=False, show_default="off",
                  help="Print one JSON document instead of tables.")
@_simulate_option("--report", type=click.Path(file_okay=False, path_type=Path), default=None, show_default="none",
                  help="Write the JSON, plots (PNG, SVG) and an HTML page into DIR (needs matplotlib).")
@_simulate_option("--timing", is_flag=True, default=False, show_default="off",
                  help="Print each run's wall-clock time and its simulated-to-wall time ratio (to stderr).")
@click.pass_context
def simulate(ctx: click.Context, workload: str, trace_dir: Path | None, nodes: int, pods: int, copies: int,
             time_scale: float,
             pending: str, job_window: float, load: float, agents: int, tasks: int, workload_file: Path | None, sorter: str,
             policy: str | None, compare: list[str] | None, roles: Path | None, quota: Path | None,
             preemption: bool | None, seed: int, refuse_seconds: float, cycle_chunk: int, offer_filters: bool,
             full_passes: bool,
             checkpoints: int, as_json: bool, report: Path | None, timing: bool) -> None:
    """Replay a workload through the allocator in simulated time.

    Prints each framework's dominant share, running tasks and offers
    received and declined, at checkpoints and at the end, then the wait
    times per class and why tasks waited. With --compare, one line per
    policy; with --report, files to look at.

    Deterministic and fast: a fake clock, seeded random generators, no I/O
    but reading the inputs (and writing the report). Greedy frameworks
    launch what fits an offer, decline what they cannot use, suppress offers
    when idle and revive when tasks arrive; the Fuxi core schedules every
    task as a job of its class's quota group, with the class's priority.
    """
    from mesoslike import sim  # keeps `mesoslike --help` fast

    _refuse_misplaced(ctx, workload)
    loaded = _load_workload(workload, trace_dir, nodes, pods, time_scale, pending, job_window, load, agents, tasks,
                            workload_file, seed, copies)
    policies = compare or [_policy(ctx, sorter, policy)]
    base = dict(seed=seed, refuse_seconds=refuse_seconds, roles=_roles(roles), quota=_quota(quota, policies),
                preemption=preemption, cycle_chunk=cycle_chunk or None, quiet_passes=not full_passes,
                offer_filters=offer_filters)
    results = {}
    for name in policies:
        started = time.perf_counter()
        results[name] = sim.simulate(loaded, sim.SimulationConfig.for_policy(name, **base))
        if timing:
            wall = time.perf_counter() - started
            simulated = results[name].final.time
            click.echo(f"{name}: {simulated:.1f} simulated s in {wall:.2f} s wall "
                       f"({simulated / wall if wall else float('inf'):.3g} x real time)", err=True)
    if report is not None:
        _write_report(results, report, checkpoints)
    if as_json:
        if len(results) == 1:
            document = next(iter(results.values())).to_dict(checkpoints)
        else:
            from mesoslike.sim.report import comparison_document
            document = comparison_document(results, checkpoints)
        click.echo(json.dumps(document, indent=2))
    elif len(results) == 1:
        click.echo("\n".join(_format_result(next(iter(results.values())), loaded, checkpoints)))
    else:
        click.echo("\n".join(_format_comparison(results, loaded)))
    if report is not None and not as_json:
        click.echo(f"\nreport: {report / 'index.html'}")


def _refuse_misplaced(ctx: click.Context, workload: str) -> None:
    """Options of another workload given on the command line are an error."""
    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE

    def only(names: list[str], where: str) -> click.UsageError:
        flags = ", ".join("--" + n.replace("_", "-") for n in names)
        noun, verb = ("option", "applies") if len(names) == 1 else ("options", "apply")
        return click.UsageError(f"{noun} {flags} {verb} only to --workload {where}")

    for kind, names in _ONLY.items():
        misplaced = [n for n in names if kind != workload and given(n)]
        if misplaced:
            raise only(misplaced, kind)
    if workload not in _LOADED and given("load"):
        raise only(["load"], " or ".join(_LOADED))
    if workload == "file" and ctx.params.get("workload_file") is None:
        raise click.UsageError("--workload file needs --workload-file PATH")


def _policy(ctx: click.Context, sorter: str, policy: str | None) -> str:
    if policy is None:
        return sorter
    if ctx.get_parameter_source("sorter") == ParameterSource.COMMANDLINE and sorter != policy:
        raise click.UsageError(f"--sorter {sorter} and --policy {policy} disagree; give one")
    return policy


def _load_workload(workload: str, trace_dir: Path | None, nodes: int, pods: int, time_scale: float, pending: str,
                   job_window: float, load: float, agents: int, tasks: int, workload_file: Path | None, seed: int,
                   copies: int = 1) -> Any:
    """The workload, turning a missing or broken input into a usage error."""
    from mesoslike import sim

    if workload == "trace":
        directory = trace_dir if trace_dir is not None else sim.DEFAULT_TRACE_DIR
        try:
            return sim.load_openb_trace(directory, nodes=nodes or None, pods=pods or None, time_scale=time_scale,
                                        load=load, pending=pending, job_window=job_window, copies=copies)
        except sim.TraceError as exc:
            hint = "" if trace_dir is not None else " (give the trace directory with --trace-dir)"
            raise click.BadParameter(f"{exc}{hint}", param_hint="'--trace-dir'") from None
    if workload == "synthetic":
        return sim.synthetic_workload(sim.SyntheticSpec(agents=agents, tasks=tasks, load=load, seed=seed))
    if workload == "file":
        assert workload_file is not None
        try:
            return sim.load_workload_file(workload_file)
        except sim.TraceError as exc:
            raise click.BadParameter(str(exc), param_hint="'--workload-file'") from None
    return sim.drf_example_workload()


def _roles(path: Path | None) -> Any:
    if path is None:
        return None
    from mesoslike.master.roles import RolesFileError, load_roles_file
    try:
        return load_roles_file(path)
    except RolesFileError as exc:
        raise click.BadParameter(str(exc), param_hint="'--roles'") from None


def _quota(path: Path | None, policies: list[str]) -> Any:
    """``--quota FILE`` as the run's policy plugin reads it (the Fuxi policies: a Fuxi quota file)."""
    plugged = [name for name in policies if name not in greedy_policies()]
    if path is None or not plugged:
        return None
    readers: dict[type, Any] = {}
    for name in plugged:
        policy = load_policy(name)
        readers.setdefault(type(policy), policy)
    if len(readers) > 1:
        raise click.BadParameter(f"one --quota file for policies that read different ones ({', '.join(plugged)})",
                                 param_hint="'--quota'")
    (policy,) = readers.values()
    try:
        return policy.read_quota(path)
    except (ValueError, OSError) as exc:
        raise click.BadParameter(str(exc), param_hint="'--quota'") from None


def _write_report(results: dict, directory: Path, checkpoints: int) -> None:
    try:
        from mesoslike.sim.report import write_report
        write_report(results, directory, checkpoints)
    except RuntimeError as exc:   # matplotlib missing
        raise click.UsageError(str(exc)) from None


# ================================================================= formatting
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


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _wait(entry: dict, key: str) -> str:
    """A wait of the JSON document: "-" when the class had no task, "never"
    when the percentile falls among tasks that never started."""
    if key not in entry:
        return "-"
    return "never" if entry[key] is None else f"{entry[key]:.1f}"


def _format_waits(metrics: dict) -> list[str]:
    """Wait times per class, the preemptions and the top reasons for waiting.
    Tasks that never started (``never``, of which ``no fit`` fit no agent at
    all) count in the percentiles as waiting for ever."""
    lines = ["waits (s, arrival to first start; never: did not start, no fit: fits no agent):"]
    width = max(len(c) for c in metrics["wait"])
    lines.append(f"  {'class':<{width}}  {'tasks':>5}  {'started':>7}  {'never':>5}  {'no fit':>6}  {'p50':>7}  "
                 f"{'p90':>7}  {'p99':>7}  {'max':>7}")
    for cls, w in metrics["wait"].items():
        lines.append(f"  {cls:<{width}}  {w['tasks']:>5}  {w['started']:>7}  {w['never_started']:>5}  "
                     f"{w['unplaceable']:>6}  {_wait(w, 'p50'):>7}  {_wait(w, 'p90'):>7}  {_wait(w, 'p99'):>7}  "
                     f"{_wait(w, 'max'):>7}")
    why = metrics["why_waiting"]
    top = why["top"]
    reasons = ", ".join(f"{t['reason']} {t['share']:.0%}" for t in top[:5]) if top else "no task waiting at a sample"
    lines.append(f"why tasks waited (task-seconds, sampled every {why['sample_interval']:g} s): {reasons}; "
                 f"preemptions {metrics['preemptions']['total']}")
    return lines


def _format_result(result, workload, checkpoints: int) -> list[str]:
    """Header, one table per checkpoint, waits, summary line."""
    agents = f"{result.agents} agent" + ("" if result.agents == 1 else "s")
    lines = [
        f"mesoslike simulate: {result.workload} ({result.description})",
        f"{agents} ({result.total}), {len(workload.frameworks)} frameworks, {result.tasks_submitted} tasks; "
        f"{_policy_label(result)}, seed {result.seed}",
    ]
    for snapshot in result.checkpoints(checkpoints):
        lines.append("")
        lines.extend(_format_table(snapshot, snapshot is result.final))
    lines.append("")
    lines.extend(_format_waits(dict(result.metrics)))
    tasks = result.to_dict()["tasks"]
    extras = ""
    if result.tasks_unplaceable:
        extras += f", {result.tasks_unplaceable} fit no agent"
    if result.skipped:
        extras += ", rows skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(result.skipped.items()))
    if result.notes:
        extras += ", " + ", ".join(f"{n} {why}" for why, n in sorted(result.notes.items()))
    lines += ["", f"summary: {len(result.rounds)} rounds over {result.final.time:.1f} simulated s; "
                  f"{tasks['launched']} tasks launched, {tasks['finished']} finished, {tasks['running']} running, "
                  f"{tasks['queued']} queued{extras}; {result.final.offers_made} offers, "
                  f"{result.final.offers_declined} declined; stopped: {result.stop_reason}"]
    return lines


def _policy_label(result) -> str:
    return f"sorter {result.sorter}" if result.policy == result.sorter else f"policy {result.policy}"


def _format_comparison(results: dict, workload) -> list[str]:
    """A header, then per policy its run and its waits."""
    first = next(iter(results.values()))
    lines = [f"mesoslike simulate: {first.workload} ({first.description})",
             f"{first.agents} agents ({first.total}), {len(workload.frameworks)} classes, "
             f"{first.tasks_submitted} tasks; seed {first.seed}"]
    width = max(len(p) for p in results)
    lines += ["", f"  {'policy':<{width}}  {'started':>11}  {'makespan':>10}  {'wait p50':>8}  {'wait p99':>8}  "
                  f"{'max':>8}  {'preempt':>7}  {'offers':>7}  {'declined':>8}"]
    for policy, result in results.items():
        m = result.metrics
        w = m["wait"]["all"]
        started = f"{w['started']}/{w['tasks']}"
        lines.append(f"  {policy:<{width}}  {started:>11}  {_seconds(m['makespan']):>10}  "
                     f"{_wait(w, 'p50'):>8}  {_wait(w, 'p99'):>8}  {_wait(w, 'max'):>8}  "
                     f"{m['preemptions']['total']:>7}  {m['offers']['made']:>7}  {m['offers']['declined']:>8}")
    for policy, result in results.items():
        lines += ["", f"{policy}: stopped after {len(result.rounds)} rounds at t={result.final.time:.1f}s: "
                      f"{result.stop_reason}"]
        lines.extend(_format_waits(dict(result.metrics)))
    return lines
