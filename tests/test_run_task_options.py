"""Issue 18: ``mesoslike run``'s task flags (``--uri``, ``--label``, the
``--health-*`` checks) and each task's latest health verdict in ``/state``
and ``mesoslike state``.

The flags' parsing is pure (frameworks/mesoslike_frameworks/task_options.py) and tested directly;
then real runs on an authenticated cluster of real processes: a ``run``
whose ``--uri`` files, served by an HTTP server on 127.0.0.1, are in the
sandbox when its command runs, a ``run`` its health check kills, and tasks
whose checks pass and fail as ``/state`` shows them."""

import http.server
import io
import json
import re
import subprocess
import sys
import tarfile
import threading

import pytest
from click.testing import CliRunner

from e2e_helpers import REPO, RecordingScheduler, cluster  # noqa: F401 (fixture)
from mesoslike import CommandURI, Filters, HealthCheck, HTTPCheck, Label, Resources, TaskInfo, TaskState, TCPCheck
from mesoslike.cli import main
from mesoslike.clock import FakeClock
from mesoslike_frameworks.task_options import (TaskOptionError, health_check, parse_label, parse_labels, parse_uri,
                                               parse_uris)
from mesoslike.master import MasterConfig, MasterCore
from mesoslike.master.state import state_json
from mesoslike.wire import AgentInfo, FrameworkInfo, MasterInfo
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(120)

HEALTH_REASON = "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"


# ------------------------------------------------------------------ parsing
def test_a_uri_flag_takes_marathon_fetch_settings_after_commas():
    assert parse_uri("http://repo/app.tgz") == CommandURI("http://repo/app.tgz")   # Mesos's defaults
    assert parse_uri("http://repo/app.tgz,extract=false,cache=true") == \
        CommandURI("http://repo/app.tgz", extract=False, cache=True)
    assert parse_uri("file:///opt/run,executable=yes,output_file=start") == \
        CommandURI("file:///opt/run", executable=True, output_file="start")
    assert parse_uri("http://repo/q%2Cr.txt,extract=0") == CommandURI("http://repo/q%2Cr.txt", extract=False)


@pytest.mark.parametrize("text, problem", [
    ("http://repo/a,extrakt=true", "'extrakt=true' is not a setting"),
    ("http://repo/a,b", "'b' is not a setting"),
    ("http://repo/a,cache=maybe", "cache='maybe' is neither true nor false"),
    ("http://repo/a,cache=1,cache=0", "cache is given twice"),
    ("ftp://repo/a", "must be a file://, http:// or https:// URI"),
    ("http://repo/", "names no file: give it an output_file"),
    ("http://repo/a,output_file=../b", "must be a plain file name"),
    (",cache=true", "must be a file://, http:// or https:// URI"),
])
def test_a_bad_uri_flag_is_a_clear_error_naming_the_flag(text, problem):
    with pytest.raises(TaskOptionError, match="--uri") as caught:
        parse_uri(text)
    assert problem in str(caught.value)


def test_two_uris_fetched_as_one_file_are_refused():
    assert [u.file_name() for u in parse_uris(["http://a/x", "file:///b/x,output_file=y"])] == ["x", "y"]
    with pytest.raises(TaskOptionError, match="two URIs are fetched as 'x'"):
        parse_uris(["http://a/x", "file:///b/x"])


def test_label_flags_are_key_value_pairs():
    assert parse_labels(["team=ads", "canary", "expr=a=b"]) == [Label("team", "ads"), Label("canary"),
                                                                Label("expr", "a=b")]
    with pytest.raises(TaskOptionError, match="--label '=x': a label's key is empty"):
        parse_label("=x")
    with pytest.raises(TaskOptionError, match="control character"):
        parse_label("k=\x07")


def test_health_flags_make_one_health_check_with_mesos_defaults():
    assert health_check() is None
    assert health_check(command="test -f ready") == HealthCheck("COMMAND", command="test -f ready")
    assert health_check(http="8080:/health", timings={"--health-interval": 2.5, "--health-delay": None}) == \
        HealthCheck("HTTP", http=HTTPCheck(8080, "/health"), interval_seconds=2.5)
    assert health_check(https="8443").http == HTTPCheck(8443, "/", scheme="https")
    assert health_check(tcp="6379", timings={"--health-consecutive-failures": 5, "--health-grace-period": 0.0}) == \
        HealthCheck("TCP", tcp=TCPCheck(6379), consecutive_failures=5, grace_period_seconds=0.0)


@pytest.mark.parametrize("kwargs, problem", [
    ({"command": "true", "tcp": "80"}, "a task has one health check: --health-cmd and --health-tcp were given"),
    ({"timings": {"--health-interval": 1.0}}, "--health-interval needs a health check"),
    ({"command": "  "}, "--health-cmd: the command is empty"),
    ({"tcp": "http"}, "--health-tcp 'http': give a PORT"),
    ({"tcp": "70000"}, "--health-tcp port must be in [1, 65535]"),
    ({"http": "web:/x"}, "--health-http 'web:/x': give PORT[:PATH]"),
    ({"http": "80:health"}, "http.path must start with '/'"),
    ({"command": "true", "timings": {"--health-interval": 0.0}}, "--health-interval must be in [0.1, 86400]"),
    ({"command": "true", "timings": {"--health-timeout": float("nan")}}, "--health-timeout must be in"),
    ({"command": "true", "timings": {"--health-consecutive-failures": 0}},
     "--health-consecutive-failures must be in [1, 1000]"),
])
def test_bad_health_flags_are_clear_errors(kwargs, problem):
    with pytest.raises(TaskOptionError) as caught:
        health_check(**kwargs)
    assert problem in str(caught.value)


@pytest.mark.parametrize("args, problem", [
    (["--uri", "gopher://x/a"], "error: --uri 'gopher://x/a': uri.value must be a file://"),
    (["--uri", "http://x/a,cache"], "'cache' is not a setting"),
    (["--label", "=v"], "error: --label '=v': a label's key is empty"),
    (["--health-tcp", "1", "--health-cmd", "true"], "error: a task has one health check"),
    (["--health-delay", "1"], "error: --health-delay needs a health check"),
    (["--health-cmd", "true", "--health-interval", "0"], "error: --health-interval must be in [0.1, 86400]"),
    ([arg for i in range(101) for arg in ("--uri", f"http://x/f{i}")], "error: a task fetches at most 100 URIs"),
])
def test_run_refuses_bad_task_flags_before_it_reaches_a_master(args, problem):
    # the master's address is never dialled: the flags are refused first
    result = CliRunner().invoke(main, ["run", "--master", "tcp://127.0.0.1:9", *args, "--", "true"])
    assert result.exit_code == 1, result.output
    assert problem in result.output


def test_run_help_lists_the_task_flags():
    result = CliRunner().invoke(main, ["run", "--help"], terminal_width=200)
    for flag in ("--uri", "--label", "--health-cmd", "--health-http", "--health-https", "--health-tcp",
                 "--health-delay", "--health-interval", "--health-timeout", "--health-grace-period",
                 "--health-consecutive-failures"):
        assert flag in result.output


# ------------------------------------------------------------ real runs
@pytest.fixture
def files(tmp_path):
    """An HTTP server on 127.0.0.1 serving ``tmp_path/served``, counting GETs per path."""
    root = tmp_path / "served"
    root.mkdir()
    requests: dict[str, int] = {}

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self):  # noqa: N802 (http.server's name)
            requests[self.path] = requests.get(self.path, 0) + 1
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}", requests
    httpd.shutdown()
    httpd.server_close()


def run_cli(cluster, *args, timeout=90):  # noqa: F811 (fixture)
    """``mesoslike run`` against the cluster; its output with the task ids
    shown as NAME-N (a run's ids are NAME-<6 hex>-N, unique per run)."""
    done = subprocess.run([sys.executable, "-m", "mesoslike", "run", "--master", cluster.address, *args],
                          cwd=str(REPO), env=cluster.client_env(), capture_output=True, text=True, timeout=timeout)
    done.stdout, done.stderr = (re.sub(r"\b([\w.]+)-[0-9a-f]{6}-(\d+)\b", r"\1-\2", text)
                                for text in (done.stdout, done.stderr))
    return done


def tar_gz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o755
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def completed_tasks(cluster, name):  # noqa: F811 (fixture)
    framework = next(f for f in cluster.state()["completed_frameworks"] if f["name"] == name)
    return framework["completed_tasks"]


def test_a_run_with_uris_finds_their_files_in_its_sandbox_and_labels_its_tasks(cluster, files):  # noqa: F811
    root, url, requests = files
    (root / "app.tgz").write_bytes(tar_gz({"app/hello.sh": b"#!/bin/sh\necho hello from the archive\n"}))
    (root / "data.txt").write_bytes(b"payload\n")
    (root / "tool").write_bytes(b"#!/bin/sh\necho tool ran\n")
    cluster.start_master()
    cluster.start_agent("fetch-host", "cpus:2;mem:512")
    done = run_cli(cluster, "--name", "fetched", "--instances", "2", "--output",
                   "--uri", f"{url}/app.tgz,cache=true", "--uri", f"{url}/data.txt,output_file=input.txt",
                   "--uri", f"{url}/tool,executable=true", "--label", "team=ads", "--label", "canary",
                   "--", 'app/hello.sh && ./tool && test "$(cat input.txt)" = payload && test -f app.tgz')
    assert done.returncode == 0, done.stdout + done.stderr
    assert "done: 2/2 finished" in done.stdout
    for instance in (0, 1):
        assert f"[{instance}] hello from the archive" in done.stdout
        assert f"[{instance}] tool ran" in done.stdout
    assert requests["/data.txt"] == 2   # each instance fetched its own (not cached)
    tasks = completed_tasks(cluster, "fetched")
    assert [t["labels"] for t in tasks] == [[{"key": "team", "value": "ads"}, {"key": "canary", "value": ""}]] * 2


def test_a_run_whose_uri_cannot_be_fetched_fails_naming_the_uri(cluster, files):  # noqa: F811
    _, url, _ = files
    cluster.start_master()
    cluster.start_agent("fetch-host", "cpus:1;mem:256")
    done = run_cli(cluster, "--name", "missing", "--uri", f"{url}/nothing.tgz", "--", "true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"missing-0 TASK_FAILED: could not start the command: fetching {url}/nothing.tgz failed" in done.stderr
    assert "404" in done.stderr


def test_a_run_whose_health_check_fails_ends_task_failed_with_the_health_reason(cluster):  # noqa: F811
    cluster.start_master()
    cluster.start_agent("health-host", "cpus:1;mem:256")
    done = run_cli(cluster, "--name", "sick", "--health-cmd", "echo not ready >&2; exit 3", "--health-delay", "0",
                   "--health-interval", "0.2", "--health-grace-period", "0", "--health-consecutive-failures", "2",
                   "--", "sleep 60")
    assert done.returncode == 1, done.stdout + done.stderr
    # the status lines, then the failure's explanation
    assert "sick-0 on health-host: TASK_RUNNING (command check 'echo not ready >&2; exit 3' failed" in done.stdout
    assert ("sick-0 TASK_FAILED: command check 'echo not ready >&2; exit 3' failed 2 times in a row "
            "(consecutive_failures 2)") in done.stderr
    (task,) = completed_tasks(cluster, "sick")
    assert (task["state"], task["healthy"]) == (TaskState.FAILED, False)


def test_a_run_whose_health_check_passes_finishes(cluster):  # noqa: F811
    cluster.start_master()
    cluster.start_agent("health-host", "cpus:1;mem:256")
    done = run_cli(cluster, "--name", "well", "--health-cmd", "test -f ready", "--health-delay", "0",
                   "--health-interval", "0.2", "--", "touch ready; sleep 2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "well-0 on health-host: TASK_RUNNING (health check passed)" in done.stdout
    (task,) = completed_tasks(cluster, "well")
    assert (task["state"], task["healthy"]) == (TaskState.FINISHED, True)


class CheckedTasks(RecordingScheduler):
    """Launches three long tasks on the first offer: one whose check passes,
    one whose check fails (and would be killed only after 1,000 failures),
    one without a check."""

    def on_offers(self, driver, offers):
        for offer in offers:
            if self.of("launched"):
                driver.decline_offer(offer.id, Filters(refuse_seconds=3600.0))
                continue
            self._record("launched", offer)
            quick = {"delay_seconds": 0.0, "interval_seconds": 0.2, "grace_period_seconds": 0.0}
            each = Resources(cpus=0.1, mem=32)
            driver.launch_tasks([offer.id], [
                TaskInfo("passing", offer.agent_id, "sleep 600", each,
                         health_check=HealthCheck("COMMAND", command="true", **quick)),
                TaskInfo("failing", offer.agent_id, "sleep 600", each,
                         health_check=HealthCheck("COMMAND", command="false", consecutive_failures=1000, **quick)),
                TaskInfo("unchecked", offer.agent_id, "sleep 600", each),
            ])


def test_state_shows_each_tasks_latest_health_verdict(cluster):  # noqa: F811
    cluster.start_master()
    cluster.start_agent("health-host", "cpus:1;mem:256")
    fw = CheckedTasks()
    cluster.driver(fw, "checked")

    def verdicts():
        framework = cluster.framework("checked")
        shown = {t["id"]: (t["state"], t["healthy"]) for t in framework["tasks"]} if framework else {}
        wanted = {"passing": (TaskState.RUNNING, True), "failing": (TaskState.RUNNING, False),
                  "unchecked": (TaskState.RUNNING, None)}
        return shown if shown == wanted else None

    cluster.wait_until(verdicts, 30, "/state to show passing healthy, failing unhealthy, unchecked null")
    # what the framework was told is what /state shows
    for task_id, healthy in (("passing", True), ("failing", False)):
        told = [s for s in fw.statuses(task_id) if s.healthy is not None]
        assert told and told[-1].healthy is healthy and told[-1].reason == HEALTH_REASON
    shown = subprocess.run([sys.executable, "-m", "mesoslike", "state", "--master", cluster.address], cwd=str(REPO),
                           env=cluster.client_env(), capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[1]: line.split()[2:4] for line in shown.stdout.splitlines()
            if line.split()[1:2] in (["passing"], ["failing"], ["unchecked"])}
    assert rows == {"passing": [TaskState.RUNNING, "healthy"], "failing": [TaskState.RUNNING, "unhealthy"],
                    "unchecked": [TaskState.RUNNING, "-"]}, shown.stdout
    document = json.loads(subprocess.run(
        [sys.executable, "-m", "mesoslike", "state", "--json", "--master", cluster.address], cwd=str(REPO),
        env=cluster.client_env(), capture_output=True, text=True, timeout=30).stdout)
    (framework,) = [f for f in document["frameworks"] if f["name"] == "checked"]
    assert {t["id"]: t["healthy"] for t in framework["tasks"]} == {"passing": True, "failing": False,
                                                                   "unchecked": None}


def test_a_new_leader_shows_the_verdicts_agents_report_when_they_reregister():
    # a master that never saw the health updates (a new leader) learns each
    # verdict from the agent's re-registration, not from the next change
    core = MasterCore(FakeClock(), MasterInfo("m2", "tcp://127.0.0.1:1"), MasterConfig())
    each = Resources.parse("cpus:1;mem:128")
    tasks = [m.RunningTask("fw-1", TaskInfo(task_id, "agent-1", "sleep 600", each), TaskState.RUNNING, healthy)
             for task_id, healthy in (("up", True), ("down", False), ("plain", None))]
    core.on_message(b"agent", m.ReregisterAgent(AgentInfo("node-0", Resources.parse("cpus:4;mem:4096"), id="agent-1"),
                                                tasks, [FrameworkInfo("demo", id="fw-1", failover_timeout=60.0)]))
    (framework,) = state_json(core)["frameworks"]
    assert {t["id"]: t["healthy"] for t in framework["tasks"]} == {"up": True, "down": False, "plain": None}
