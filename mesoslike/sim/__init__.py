"""The simulator: workloads replayed through the real allocator and the real
Fuxi core on a virtual clock, compared across policies (docs/simulate.rst).

* :mod:`~mesoslike.sim.workload` -- agents, task classes, tasks.
* :mod:`~mesoslike.sim.traces` -- the Alibaba openb trace, users' CSV/JSON files.
* :mod:`~mesoslike.sim.synthetic` -- the DRF example, a Poisson/Pareto generator.
* :mod:`~mesoslike.sim.schedulers` -- greedy frameworks, the Fuxi core.
* :mod:`~mesoslike.sim.engine` -- the discrete-event loop and its results.
* :mod:`~mesoslike.sim.metrics` -- utilisation, shares, waits, reasons.
* :mod:`~mesoslike.sim.report` -- the JSON, plots and HTML of ``--report``.

Everything but :mod:`~mesoslike.sim.report` (which needs matplotlib, the
``sim`` extra) is pure: its only I/O is reading the input files.
"""

from mesoslike.sim.engine import (
    POLICIES,
    STOP_DONE,
    STOP_MAX_ROUNDS,
    STOP_MAX_TIME,
    STOP_STUCK,
    FrameworkSnapshot,
    RoundSnapshot,
    SimulationConfig,
    SimulationResult,
    Simulator,
    simulate,
)
from mesoslike.sim.schedulers import REASONS
from mesoslike.sim.synthetic import SyntheticClass, SyntheticSpec, drf_example_workload, synthetic_workload
from mesoslike.sim.traces import (
    DEFAULT_TRACE_DIR,
    OPENB_PRIORITIES,
    TRACE_NODE_FILE,
    TRACE_POD_FILE,
    load_openb_trace,
    load_workload_file,
    parse_workload_document,
)
from mesoslike.sim.workload import KNOWN_KINDS, AgentSpec, TaskSpec, TraceError, Workload

__all__ = [
    "WORKLOADS", "POLICIES", "REASONS", "KNOWN_KINDS", "TRACE_NODE_FILE", "TRACE_POD_FILE", "DEFAULT_TRACE_DIR",
    "OPENB_PRIORITIES", "AgentSpec", "TaskSpec", "Workload", "TraceError", "SimulationConfig", "FrameworkSnapshot",
    "RoundSnapshot", "SimulationResult", "Simulator", "simulate", "drf_example_workload", "load_openb_trace",
    "load_workload_file", "parse_workload_document", "SyntheticClass", "SyntheticSpec", "synthetic_workload",
    "STOP_DONE", "STOP_STUCK", "STOP_MAX_ROUNDS", "STOP_MAX_TIME",
]

#: the workloads ``mesoslike simulate --workload`` knows
WORKLOADS = ("drf-example", "trace", "synthetic", "file")
