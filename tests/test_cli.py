"""Tests for the ``mesoslike`` command line: the group's ``--version`` and
``--help``, and ``mesoslike simulate`` (tables, JSON, env vars, bad input)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mesoslike import __version__
from mesoslike.cli import main

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parent.parent
SIMULATE_OPTIONS = ["workload", "trace-dir", "nodes", "pods", "copies", "time-scale", "sorter", "seed",
                    "refuse-seconds", "checkpoints", "json", "pending", "job-window", "load", "agents", "tasks", "workload-file",
                    "policy", "compare", "roles", "quota", "preemption", "cycle-chunk", "full-passes", "report", "timing",
                    "offer-filters"]
SMALL_TRACE = ["--workload", "trace", "--nodes", "50", "--pods", "300", "--time-scale", "1000"]


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env)


# ================================================================== group
def test_version():
    result = run("--version")
    assert result.exit_code == 0
    assert __version__ in result.output


def test_help_lists_simulate():
    result = run("--help")
    assert result.exit_code == 0
    assert "simulate" in result.output


def test_console_entry_point_runs_as_a_module():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    completed = subprocess.run([sys.executable, "-m", "mesoslike", "--version"], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=30)
    assert completed.returncode == 0, completed.stderr
    assert __version__ in completed.stdout


# =============================================================== simulate
def test_simulate_help_shows_every_option_with_default_and_env_var():
    result = CliRunner().invoke(main, ["simulate", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.split())  # undo help-text wrapping
    for option in SIMULATE_OPTIONS:
        assert f"--{option}" in text
        assert f"MESOSLIKE_SIMULATE_{option.replace('-', '_').upper()}" in text
    assert text.count("default:") == len(SIMULATE_OPTIONS)


def test_simulate_default_is_the_drf_example():
    result = run("simulate")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "drf-example" in out
    final = out[out.index("final round"):].splitlines()
    rows = {line.split()[0]: line.split() for line in final[2:4]}
    assert rows["A"][1:3] == ["0.667", "3"]   # share, running tasks
    assert rows["B"][1:3] == ["0.667", "2"]
    assert out.rstrip().splitlines()[-1].startswith("summary: 5 rounds")


def test_docs_show_the_real_default_output():
    docs = (REPO / "docs" / "simulate.rst").read_text(encoding="utf-8")
    documented = {line.strip() for line in docs.splitlines()}
    output = run("simulate").output
    missing = [line for line in output.splitlines() if line.strip() and line.strip() not in documented]
    assert not missing


def test_simulate_json_parses():
    result = run("simulate", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    shares = {f["framework_id"]: (f["running_tasks"], f["dominant_share"]) for f in document["frameworks"]}
    assert shares["A"][0] == 3 and shares["B"][0] == 2
    assert shares["A"][1] == pytest.approx(2 / 3) and shares["B"][1] == pytest.approx(2 / 3)
    assert len(document["checkpoints"]) == 5


def test_simulate_reads_env_vars():
    result = run("simulate", env={"MESOSLIKE_SIMULATE_JSON": "1", "MESOSLIKE_SIMULATE_CHECKPOINTS": "2",
                                  "MESOSLIKE_SIMULATE_SORTER": "random"})
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["sorter"] == "random"
    assert len(document["checkpoints"]) == 2


def test_simulate_small_trace():
    result = run("simulate", *SMALL_TRACE, "--checkpoints", "2")
    assert result.exit_code == 0, result.output
    assert "LS" in result.output and "BE" in result.output
    assert "fit no agent" in result.output
    assert "never scheduled" in result.output
    assert result.output.count("framework ") == 2


def test_simulate_small_trace_json():
    result = run("simulate", *SMALL_TRACE, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["agents"] == 50
    assert document["tasks"]["never_launched"] == 0
    assert document["tasks"]["launched"] == document["tasks"]["submitted"] - document["tasks"]["unplaceable"]


@pytest.mark.parametrize("args, message", [
    (["--workload", "nope"], "Invalid value for '--workload'"),
    (["--sorter", "fifo"], "Invalid value for '--sorter'"),
    (["--workload", "trace", "--nodes", "-1"], "Invalid value for '--nodes'"),
    (["--workload", "trace", "--pods", "-3"], "Invalid value for '--pods'"),
    (["--workload", "trace", "--time-scale", "0"], "Invalid value for '--time-scale'"),
    (["--seed", "-1"], "Invalid value for '--seed'"),
    (["--refuse-seconds", "-1"], "Invalid value for '--refuse-seconds'"),
    (["--checkpoints", "0"], "Invalid value for '--checkpoints'"),
    (["--workload", "trace", "--trace-dir", "/no/such/dir"], "does not exist"),
    (["--nodes", "10"], "option --nodes applies only to --workload trace"),
    (["--workload", "trace", "--copies", "0"], "Invalid value for '--copies'"),
    (["--copies", "2"], "option --copies applies only to --workload trace"),
])
def test_simulate_bad_arguments_exit_2(args, message):
    result = run("simulate", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_simulate_trace_copies_make_the_cluster_and_its_pods_bigger():
    result = run("simulate", "--workload", "trace", "--nodes", "20", "--pods", "50", "--copies", "3", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["agents"] == 60
    assert document["tasks"]["submitted"] + sum(document["skipped_rows"].values()) == 150


def test_simulate_trace_dir_without_the_files_exits_2(tmp_path):
    result = run("simulate", "--workload", "trace", "--trace-dir", str(tmp_path))
    assert result.exit_code == 2
    assert "openb_node_list_all_node.csv" in result.output and "does not exist" in result.output


def test_simulate_bad_env_var_exits_2():
    result = run("simulate", env={"MESOSLIKE_SIMULATE_WORKLOAD": "bogus"})
    assert result.exit_code == 2
    assert "bogus" in result.output
