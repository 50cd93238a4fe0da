"""``mesoslike simulate --report DIR``: the JSON, a figure per policy and the
comparison (PNG and SVG), and an HTML page that shows them; the same run
twice gives byte-identical JSON."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from mesoslike.cli import main

pytestmark = pytest.mark.timeout(300)

# a small slice of the bundled trace, compressed so that tasks wait
SMALL = ["simulate", "--workload", "trace", "--nodes", "450", "--pods", "600", "--load", "3000",
         "--compare", "drf,random,fuxi-fifo,fuxi-fair"]


def report(directory) -> str:
    result = CliRunner().invoke(main, [*SMALL, "--report", str(directory)])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_report_has_the_json_the_plots_and_a_page_showing_them(tmp_path):
    output = report(tmp_path)
    assert f"report: {tmp_path / 'index.html'}" in output
    figures = ["compare"] + [f"policy-{p}" for p in ("drf", "random", "fuxi-fifo", "fuxi-fair")]
    for name in figures:
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / f"{name}.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert set(re.findall(r'src="([^"]+)"', page)) == {f"{name}.png" for name in figures}
    assert set(re.findall(r'href="([^"]+\.svg)"', page)) == {f"{name}.svg" for name in figures}
    assert 'href="simulation.json"' in page
    document = json.loads((tmp_path / "simulation.json").read_text(encoding="utf-8"))
    assert document["policies"] == ["drf", "random", "fuxi-fifo", "fuxi-fair"]
    for run in document["runs"].values():
        metrics = run["metrics"]
        assert {"series", "wait", "wait_cdf", "why_waiting", "preemptions", "offers", "makespan"} <= set(metrics)
        assert metrics["wait"]["all"]["tasks"] == run["tasks"]["submitted"]
        assert set(metrics["series"]["by_class"]) == {"BE", "Burstable", "Guaranteed", "LS"}


def test_two_reports_of_the_same_run_have_byte_identical_json(tmp_path):
    report(tmp_path / "one")
    report(tmp_path / "two")
    first = (tmp_path / "one" / "simulation.json").read_bytes()
    assert first == (tmp_path / "two" / "simulation.json").read_bytes()
    assert (tmp_path / "one" / "compare.svg").read_bytes() == (tmp_path / "two" / "compare.svg").read_bytes()
