"""Workloads from files: the bundled Alibaba openb 2023 trace, and the
documented CSV/JSON format for users' own traces (docs/simulate.rst).

The only I/O of the simulator's input side. Bad input raises
:class:`~mesoslike.sim.workload.TraceError` naming the file and, for a bad
row, the row: a user's file is refused on its first bad row. The openb
reader is lenient instead, as it always was: rows of the published trace
that make no sense are skipped and counted by reason.
"""

from __future__ import annotations

import csv
import importlib.resources
import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from mesoslike.allocator.roles import validate_role
from mesoslike.errors import MesoslikeError
from mesoslike.resources import Resources
from mesoslike.sim.workload import (
    DEFAULT_PRIORITY,
    KNOWN_KINDS,
    AgentSpec,
    TaskSpec,
    TraceError,
    Workload,
    unknown_kinds,
)

__all__ = [
    "TRACE_NODE_FILE", "TRACE_POD_FILE", "DEFAULT_TRACE_DIR", "OPENB_PRIORITIES", "PENDING_SKIP",
    "PENDING_LIFETIME", "load_openb_trace", "load_workload_file", "parse_workload_document",
    "AGENT_COLUMNS", "TASK_COLUMNS",
]

TRACE_NODE_FILE = "openb_node_list_all_node.csv"
TRACE_POD_FILE = "openb_pod_list_default.csv"
#: the bundled Alibaba openb 2023 trace: package data (setup.cfg), so an
#: installed wheel has it too, wherever the command runs from
DEFAULT_TRACE_DIR = Path(str(importlib.resources.files("mesoslike.sim").joinpath("data", "alibaba-openb-2023")))

#: Priority of each QoS class of the openb trace (smaller = higher): latency-
#: sensitive and guaranteed pods before burstable ones, best effort last.
OPENB_PRIORITIES: Mapping[str, int] = {"LS": 10, "Guaranteed": 10, "Burstable": 50, "BE": 100}
#: what to do with pods the trace never scheduled (``pod_phase`` Pending)
PENDING_SKIP = "skip"
PENDING_LIFETIME = "lifetime"


# ======================================================================= openb
def _trace_path(trace_dir: Path, name: str) -> Path:
    path = Path(trace_dir) / name
    if not path.is_file():
        raise TraceError(f"trace file {str(path)!r} does not exist")
    return path


def _read_rows(path: Path, columns: Sequence[str], limit: int | None) -> list[dict[str, str]]:
    """The first ``limit`` rows (all if None) of a CSV file with the header checked."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path.name}: missing columns {missing}")
        rows: list[dict[str, str]] = []
        for row in reader:
            if limit is not None and len(rows) >= limit:
                break
            rows.append(row)
    return rows


def _trace_agents(rows: Iterable[Mapping[str, str]]) -> tuple[list[AgentSpec], int]:
    """Nodes -> agents (cpus = cpu_milli/1000, mem = memory_mib, gpus = gpu);
    returns the agents and how many rows did not make sense."""
    agents, bad = [], 0
    for row in rows:
        try:
            cpus, mem, gpus = int(row["cpu_milli"]) / 1000, int(row["memory_mib"]), int(row["gpu"] or 0)
            resources = Resources(cpus=cpus, mem=mem, gpus=gpus)
        except (TypeError, ValueError):
            bad += 1
            continue
        if not row["sn"] or not resources:
            bad += 1
            continue
        model = (row.get("model") or "").strip()
        agents.append(AgentSpec(row["sn"], resources, {"model": model} if model else {}))
    return agents, bad


_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "qos",
                "creation_time", "deletion_time", "scheduled_time")


class _Pod(NamedTuple):
    """A pod of the trace, as a task of its ``qos`` class."""

    framework_id: str
    name: str
    resources: Resources
    created: int
    duration: int
    pending: bool          # never scheduled in the trace: ``duration`` is its lifetime


def _pod_task(row: Mapping[str, str], pending: str) -> _Pod | str:
    """One pod row -> its task, or why the row does not make sense."""
    never = not row["scheduled_time"]
    if never and pending == PENDING_SKIP:
        return "never scheduled"
    try:
        created, deleted = int(row["creation_time"]), int(row["deletion_time"])
        scheduled = created if never else int(row["scheduled_time"])
        # num_gpu whole GPUs, each used to gpu_milli/1000 (GPU sharing: 1 x 0.46)
        gpus = int(row["num_gpu"] or 0) * int(row["gpu_milli"] or 0) / 1000
        resources = Resources(cpus=int(row["cpu_milli"]) / 1000, mem=int(row["memory_mib"]), gpus=gpus)
    except (TypeError, ValueError):
        return "malformed"
    if not row["qos"] or not row["name"]:
        return "malformed"
    if scheduled < created or deleted <= scheduled:
        return "non-positive duration"
    if not resources:
        return "no resources"
    return _Pod(row["qos"], row["name"], resources, created, deleted - scheduled, never)


def _replica_jobs(pods: Sequence[_Pod], window: float) -> list[str]:
    """Each pod's job: pods of a class with the same requests, each created
    within ``window`` of the previous one, are one job ("" for a job of one)."""
    if not window:
        return [""] * len(pods)
    last: dict[tuple[str, Resources], tuple[int, str]] = {}
    jobs = [""] * len(pods)
    sizes: dict[str, int] = {}
    for i in sorted(range(len(pods)), key=lambda i: pods[i].created):
        pod = pods[i]
        key = (pod.framework_id, pod.resources)
        previous = last.get(key)
        job = previous[1] if previous is not None and pod.created - previous[0] <= window else f"job-{pod.name}"
        last[key] = (pod.created, job)
        sizes[job] = sizes.get(job, 0) + 1
        jobs[i] = job
    return [job if sizes[job] > 1 else "" for job in jobs]


def _check_positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def load_openb_trace(
    trace_dir: str | Path = DEFAULT_TRACE_DIR,
    nodes: int | None = None,
    pods: int | None = None,
    time_scale: float = 1000.0,
    load: float = 1.0,
    pending: str = PENDING_SKIP,
    priorities: Mapping[str, int] = OPENB_PRIORITIES,
    job_window: float = 0.0,
    copies: int = 1,
) -> Workload:
    """The Alibaba openb GPU trace as a workload.

    Nodes become agents; pods become tasks arriving at ``creation_time`` and
    running for ``deletion_time - scheduled_time``, one class per ``qos``
    (priority from ``priorities``, else the default). ``nodes``/``pods``
    take only the first N rows (None = all); every time is divided by
    ``time_scale``, and arrival times once more by ``load`` (the same pods,
    arriving ``load`` times as fast); arrivals start at 0.

    ``pending``: pods the trace never scheduled are skipped (``"skip"``) or
    replayed as tasks that run for their lifetime in the trace,
    ``deletion_time - creation_time`` (``"lifetime"``). Rows that do not
    make sense are skipped and counted by reason.

    ``job_window`` (trace seconds; 0 = none): the trace has no job ids, so
    pods of one class with the same requests, each created within this
    long of the previous one, are taken as replicas of one job.

    ``copies``: the cluster and its pods ``copies`` times over (a bigger
    cluster with as much more work): every node and every pod appears that
    many times, copy ``k`` > 0 with ``-c<k>`` after its name (and its job's),
    each copy's pods arriving when the original does, in their own jobs.
    Copies of one pod follow each other in the arrival order.
    """
    _check_positive("time_scale", time_scale)
    _check_positive("load", load)
    if not (isinstance(job_window, (int, float)) and math.isfinite(job_window) and job_window >= 0):
        raise ValueError(f"job_window must be a finite number >= 0, got {job_window!r}")
    if pending not in (PENDING_SKIP, PENDING_LIFETIME):
        raise ValueError(f"pending must be {PENDING_SKIP!r} or {PENDING_LIFETIME!r}, got {pending!r}")
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise ValueError(f"copies must be an integer >= 1, got {copies!r}")
    for what, limit in (("nodes", nodes), ("pods", pods)):
        if limit is not None and limit < 0:
            raise ValueError(f"{what} must be >= 0, got {limit!r}")
    trace_dir = Path(trace_dir)
    if not trace_dir.is_dir():
        raise TraceError(f"trace directory {str(trace_dir)!r} does not exist")
    node_rows = _read_rows(_trace_path(trace_dir, TRACE_NODE_FILE), ("sn", "cpu_milli", "memory_mib", "gpu"), nodes)
    pod_rows = _read_rows(_trace_path(trace_dir, TRACE_POD_FILE), _POD_COLUMNS, pods)
    agents, bad_nodes = _trace_agents(node_rows)
    agents = [agent if k == 0 else AgentSpec(f"{agent.agent_id}-c{k}", agent.resources, agent.attributes)
              for agent in agents for k in range(copies)]
    skipped: dict[str, int] = {"bad node": bad_nodes} if bad_nodes else {}
    parsed: list[_Pod] = []
    for row in pod_rows:
        pod = _pod_task(row, pending)
        if isinstance(pod, str):
            skipped[pod] = skipped.get(pod, 0) + 1
        else:
            parsed.append(pod)
    start = min((pod.created for pod in parsed), default=0)
    arrival_scale = time_scale * load
    jobs = _replica_jobs(parsed, job_window)
    tasks = [TaskSpec(_copy(pod.name, k), pod.framework_id, pod.resources, (pod.created - start) / arrival_scale,
                      pod.duration / time_scale, i * copies + k, priorities.get(pod.framework_id, DEFAULT_PRIORITY),
                      job=job and _copy(job, k))
             for i, (pod, job) in enumerate(zip(parsed, jobs)) for k in range(copies)]
    tasks.sort(key=lambda t: (t.arrival, t.index))
    lifetimes = copies * sum(pod.pending for pod in parsed)
    speed = f", arrivals x{load:g}" if load != 1 else ""
    speed += f", {copies} copies" if copies != 1 else ""
    return Workload(
        name="trace",
        agents=tuple(agents),
        frameworks=tuple(sorted({t.framework_id for t in tasks})),
        tasks=tuple(tasks),
        skipped=skipped,
        description=f"alibaba openb 2023: {len(agents)} nodes, {copies * len(pod_rows)} pods, time / {time_scale:g}"
                    f"{speed}",
        notes={"never scheduled, run for their lifetime": lifetimes} if lifetimes else {},
    )


def _copy(name: str, copy: int) -> str:
    """The name of a node, pod or job in copy ``copy`` of the trace (the original's in copy 0)."""
    return name if copy == 0 else f"{name}-c{copy}"


# ============================================================ users' own files
#: columns of a user's ``agents.csv`` / ``tasks.csv`` (the first ones required)
AGENT_COLUMNS = ("id", "resources", "attributes", "count")
TASK_COLUMNS = ("id", "class", "arrival", "duration", "resources", "priority", "job", "gang")
_REQUIRED_AGENT = ("id", "resources")
_REQUIRED_TASK = ("id", "class", "arrival", "duration", "resources")


class _RowError(Exception):
    """A bad value in the row being read; the caller adds where it is."""


def _text(row: Mapping[str, Any], key: str, required: bool = True) -> str:
    value = row.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise _RowError(f"{key} is missing")
        return ""
    if not isinstance(value, str):
        raise _RowError(f"{key} must be a string, got {value!r}")
    return value.strip()


def _number(row: Mapping[str, Any], key: str, optional: bool = False) -> float | None:
    """A number >= 0 (None for an empty optional one)."""
    value = row.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if optional:
            return None
        raise _RowError(f"{key} is missing")
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        raise _RowError(f"{key} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise _RowError(f"{key} must be a finite number >= 0, got {value!r}")
    return number


def _integer(row: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = row.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    try:
        number = int(value) if not isinstance(value, (bool, float)) else int("x")
    except (TypeError, ValueError):
        raise _RowError(f"{key} must be an integer >= {minimum}, got {value!r}") from None
    if number < minimum:
        raise _RowError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return number


def _resources(row: Mapping[str, Any], key: str = "resources") -> Resources:
    """``"cpus:1;mem:512"`` or ``{"cpus": 1, "mem": 512}``, known kinds only, not empty."""
    value = row.get(key)
    try:
        if isinstance(value, str):
            resources = Resources.parse(value)
        elif isinstance(value, Mapping):
            resources = Resources({str(k): v for k, v in value.items()})
        elif value is None:
            raise _RowError(f"{key} is missing")
        else:
            raise _RowError(f"{key} must be a string like 'cpus:1;mem:512' or an object, got {value!r}")
    except MesoslikeError as exc:
        raise _RowError(f"{key}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise _RowError(f"{key}: {exc}") from None
    unknown = unknown_kinds(resources)
    if unknown:
        raise _RowError(f"unknown resource kind{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                        f"(known: {', '.join(KNOWN_KINDS)})")
    if resources.range_names():
        raise _RowError(f"{key}: ranges are not simulated, got {resources}")
    if not resources:
        raise _RowError(f"{key} is empty")
    return resources


def _attributes(row: Mapping[str, Any]) -> dict[str, str]:
    value = row.get("attributes")
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, str):
        pairs = []
        for part in value.split(";"):
            name, sep, text = part.partition(":")
            if not sep or not name.strip():
                raise _RowError(f"attributes must look like 'room:er1;rack:r2', got {value!r}")
            pairs.append((name.strip(), text.strip()))
    else:
        raise _RowError(f"attributes must be an object or 'name:value;...', got {value!r}")
    out = {}
    for name, text in pairs:
        if not isinstance(text, str):
            raise _RowError(f"attribute {name!r} must be a string, got {text!r}")
        out[str(name)] = text
    return out


def _agents(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> list[AgentSpec]:
    agents: list[AgentSpec] = []
    seen: set[str] = set()
    for where, row in rows:
        try:
            agent_id = _text(row, "id")
            resources = _resources(row)
            attributes = _attributes(row)
            count = _integer(row, "count", 1, 1)
        except _RowError as exc:
            raise TraceError(f"{where}: {exc}") from None
        ids = [agent_id] if count == 1 else [f"{agent_id}-{i}" for i in range(count)]
        for one in ids:
            if one in seen:
                raise TraceError(f"{where}: agent id {one!r} is used twice")
            seen.add(one)
            agents.append(AgentSpec(one, resources, attributes))
    return agents


def _tasks(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> list[TaskSpec]:
    tasks: list[TaskSpec] = []
    seen: set[str] = set()
    for where, row in rows:
        try:
            task_id = _text(row, "id")
            cls = _text(row, "class")
            try:
                validate_role(cls)
            except MesoslikeError as exc:
                raise _RowError(f"class {cls!r} cannot name a role: {exc}") from None
            arrival = _number(row, "arrival")
            duration = _number(row, "duration", optional=True)
            resources = _resources(row)
            priority = _integer(row, "priority", DEFAULT_PRIORITY, 0)
            job = _text(row, "job", required=False)
            gang = _text(row, "gang", required=False)
            if job and gang:
                raise _RowError(f"a task is in a job or a gang, not both (job {job!r}, gang {gang!r})")
        except _RowError as exc:
            name = row.get("id")
            label = f" (task {name!r})" if isinstance(name, str) and name else ""
            raise TraceError(f"{where}{label}: {exc}") from None
        if task_id in seen:
            raise TraceError(f"{where}: task id {task_id!r} is used twice")
        seen.add(task_id)
        assert arrival is not None
        tasks.append(TaskSpec(task_id, cls, resources, arrival, duration, len(tasks), priority, gang, job))
    return tasks


def _workload(name: str, description: str, agents: list[AgentSpec], tasks: list[TaskSpec]) -> Workload:
    if not agents:
        raise TraceError(f"{name}: no agents")
    try:
        return Workload(name=name, agents=tuple(agents), frameworks=tuple(sorted({t.framework_id for t in tasks})),
                        tasks=tuple(sorted(tasks, key=lambda t: (t.arrival, t.index))), description=description)
    except ValueError as exc:
        raise TraceError(f"{name}: {exc}") from None


def _csv_rows(path: Path, known: Sequence[str], required: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    if not path.is_file():
        raise TraceError(f"workload file {str(path)!r} does not exist")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(f"{path.name}: missing columns {missing} (columns: {', '.join(known)})")
        unknown = [c for c in header if c not in known]
        if unknown:
            raise TraceError(f"{path.name}: unknown columns {unknown} (columns: {', '.join(known)}; "
                             f"resources go in one column, e.g. cpus:1;mem:512;gpus:1)")
        rows = []
        for row in reader:
            if None in row:
                raise TraceError(f"{path.name} line {reader.line_num}: more fields than columns")
            rows.append((f"{path.name} line {reader.line_num}", row))
    return rows


def parse_workload_document(document: object, name: str = "workload") -> Workload:
    """A workload from a parsed JSON document ``{"agents": [...], "tasks": [...]}``
    (docs/simulate.rst); ``name`` labels the errors."""
    if not isinstance(document, Mapping):
        raise TraceError(f"{name}: must be an object with 'agents' and 'tasks', got {type(document).__name__}")
    unknown = sorted(set(document) - {"name", "description", "agents", "tasks"})
    if unknown:
        raise TraceError(f"{name}: unknown keys {unknown} (known: name, description, agents, tasks)")
    parts: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for key, columns in (("agents", AGENT_COLUMNS), ("tasks", TASK_COLUMNS)):
        items = document.get(key)
        if not isinstance(items, list):
            raise TraceError(f"{name}: {key} must be a list, got {type(items).__name__}")
        parts[key] = []
        for i, item in enumerate(items):
            where = f"{name}: {key}[{i}]"
            if not isinstance(item, Mapping):
                raise TraceError(f"{where}: must be an object, got {item!r}")
            extra = sorted(set(item) - set(columns))
            if extra:
                raise TraceError(f"{where}: unknown keys {extra} (known: {', '.join(columns)})")
            parts[key].append((where, item))
    title = document.get("name", name)
    description = document.get("description", "")
    if not isinstance(title, str) or not isinstance(description, str):
        raise TraceError(f"{name}: name and description must be strings")
    return _workload(title, description, _agents(parts["agents"]), _tasks(parts["tasks"]))


def load_workload_file(path: str | Path) -> Workload:
    """A user's workload: a JSON file, or a directory holding ``agents.csv``
    and ``tasks.csv`` (docs/simulate.rst gives the format)."""
    path = Path(path)
    if path.is_dir():
        agents = _agents(_csv_rows(path / "agents.csv", AGENT_COLUMNS, _REQUIRED_AGENT))
        tasks = _tasks(_csv_rows(path / "tasks.csv", TASK_COLUMNS, _REQUIRED_TASK))
        return _workload(path.name, f"{path.name}: {len(agents)} agents, {len(tasks)} tasks", agents, tasks)
    if not path.is_file():
        raise TraceError(f"workload file {str(path)!r} does not exist")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path.name}: not JSON: {exc}") from None
    return parse_workload_document(document, path.name)
