"""Observability (issue 17 §4, docs/observability.rst): ``/metrics`` through
prometheus_client on the master, agents and the Fuxi service — read back
with prometheus_client's own text parser, histograms counted —; ``--log-format
json``; what the default log level tells a user (an agent registered, a
master out of reach, a task no agent can fit); ``/health`` and ZooKeeper.

Real processes and sockets on 127.0.0.1; every wait is on a condition."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import urllib.request

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e_helpers import (REPO, FAST_MASTER_ARGS, RecordingScheduler, child_env, cluster,  # noqa: F401 (fixture)
                         free_port, http_get)
from mesoslike import Filters, Resources, TaskInfo, TaskState
from mesoslike.cli.options import JsonLogFormatter
from mesoslike.master.runtime import MasterRuntime
from mesoslike.master.settings import MasterSettings
from waiting import wait_until
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------ helpers
def scrape(url: str) -> dict[str, prometheus_client.Metric]:
    """``url``'s /metrics, parsed by prometheus_client: family name -> family."""
    status, content_type, body = http_get(url + "/metrics", timeout=10.0)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4"), (status, content_type)
    return {family.name: family for family in text_string_to_metric_families(body)}


def value(families: dict, name: str, **labels: str) -> float:
    """The sample ``name`` with ``labels`` (a counter's family is named without ``_total``)."""
    for family in families.values():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise KeyError(f"{name} {labels} not in /metrics")


def histogram_count(families: dict, name: str, **labels: str) -> float:
    family = families[name]
    assert family.type == "histogram", family
    buckets = [s for s in family.samples if s.name == name + "_bucket"
               and all(s.labels.get(k) == v for k, v in labels.items())]
    assert buckets and buckets[-1].labels["le"] == "+Inf", buckets
    count = value(families, name + "_count", **labels)
    assert buckets[-1].value == count   # cumulative buckets end at the count
    return count


class LaunchOne(RecordingScheduler):
    """Launches one task on the first offer that fits, declines the rest."""

    def __init__(self, command: str = "sleep 600") -> None:
        super().__init__()
        self.command = command
        self.launched = False

    def resource_offers(self, driver, offers) -> None:
        super().resource_offers(driver, offers)
        for offer in offers:
            if not self.launched and offer.resources.contains(Resources.parse("cpus:0.5;mem:64")):
                self.launched = True
                driver.launch_tasks([offer.id], [TaskInfo(task_id="t-0", agent_id=offer.agent_id,
                                                          command=self.command,
                                                          resources=Resources.parse("cpus:0.5;mem:64"))])
            else:
                driver.decline_offer(offer.id, Filters(refuse_seconds=0.2))


class Cli:
    """A ``mesoslike`` command run as a process of its own, stderr kept apart."""

    def __init__(self, tmp_path, *args: str, env: dict | None = None) -> None:
        self.err_path = tmp_path / f"{args[0]}-{free_port()}.err"
        self._err = open(self.err_path, "wb")
        self.popen = subprocess.Popen([sys.executable, "-m", "mesoslike", *args], cwd=str(REPO),
                                      env=env or child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=self._err, start_new_session=True)

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        self._err.close()


@pytest.fixture
def clis():
    started: list[Cli] = []
    yield started
    for cli in started:
        cli.stop()


# ------------------------------------------------------------------ /metrics
def test_master_metrics_parse_keep_their_names_and_histograms_count(cluster):
    cluster.start_master()
    cluster.start_agent("obs-host", "cpus:2;mem:512")
    scheduler = LaunchOne()
    cluster.driver(scheduler, "obs-fw")
    scheduler.wait(lambda: any(s.state == TaskState.RUNNING for s in scheduler.statuses()), 20, "TASK_RUNNING",
                   cluster.diagnostics)
    families = cluster.wait_until(lambda: (lambda f: f if histogram_count(f, "mesoslike_task_launch_to_running_seconds")
                                           else None)(scrape(cluster.http)), 10, "the launch to be timed")
    # the names the docs and dashboards rely on, with their kinds
    for name, kind in [("mesoslike_tasks_launched", "counter"), ("mesoslike_offers_made", "counter"),
                       ("mesoslike_transport_frames_sent", "counter"), ("mesoslike_tasks", "gauge"),
                       ("mesoslike_allocation_cycle_seconds", "gauge"), ("mesoslike_loop_turns", "counter"),
                       ("mesoslike_tasks_completed", "counter"), ("mesoslike_agents_registered", "gauge")]:
        assert families[name].type == kind, (name, families.get(name))
    assert value(families, "mesoslike_tasks_launched_total") == 1
    assert value(families, "mesoslike_tasks", state="TASK_RUNNING") == 1
    assert histogram_count(families, "mesoslike_allocation_cycle_duration_seconds") >= 1
    assert histogram_count(families, "mesoslike_offer_round_trip_seconds") >= 1   # the accept
    assert histogram_count(families, "mesoslike_task_launch_to_running_seconds") == 1
    assert histogram_count(families, "mesoslike_message_handling_seconds", type="Subscribe") >= 1
    assert histogram_count(families, "mesoslike_message_handling_seconds", type="Accept") == 1
    # counters only grow
    again = scrape(cluster.http)
    for name in ("mesoslike_offers_made_total", "mesoslike_transport_frames_sent_total",
                 "mesoslike_loop_turns_total"):
        assert value(again, name) >= value(families, name), name


def test_agent_metrics_parse_with_a_histogram_of_task_starts(cluster):
    cluster.start_master()
    cluster.start_agent("obs-agent", "cpus:2;mem:512")
    scheduler = LaunchOne()
    cluster.driver(scheduler, "obs-agent-fw")
    scheduler.wait(lambda: any(s.state == TaskState.RUNNING for s in scheduler.statuses()), 20, "TASK_RUNNING",
                   cluster.diagnostics)
    (agent,) = cluster.state()["agents"]
    families = scrape(agent["http_address"])
    assert families["mesoslike_agent_files_refused"].type == "counter"
    assert value(families, "mesoslike_agent_registered") == 1
    assert value(families, "mesoslike_agent_tasks", state="TASK_RUNNING") == 1
    assert histogram_count(families, "mesoslike_agent_task_start_seconds") == 1


def test_masters_in_one_process_keep_their_own_registries():
    first = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=0))
    second = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=0))
    first.start()
    second.start()
    try:
        for runtime in (first, second):
            wait_until(lambda runtime=runtime: scrape(runtime.http_address), 10, "/metrics")
        first.metrics.message_timings.observe("Subscribe", 0.001)
        one, two = scrape(first.http_address), scrape(second.http_address)
        assert histogram_count(one, "mesoslike_message_handling_seconds", type="Subscribe") == 1
        assert "mesoslike_message_handling_seconds" not in two or not two["mesoslike_message_handling_seconds"].samples
        # nothing lands in prometheus_client's global registry
        assert not [n for n in prometheus_client.REGISTRY._names_to_collectors if n.startswith("mesoslike")]
    finally:
        first.stop()
        second.stop()


def test_fuxi_service_serves_metrics_and_says_it_cannot_reach_the_master(tmp_path, clis):
    http_port = free_port()
    serve = Cli(tmp_path, "fuxi", "serve", "--master", f"tcp://127.0.0.1:{free_port()}", "--port", "0",
                "--http-port", str(http_port))
    clis.append(serve)
    wait_until(lambda: "cannot reach the master at" in serve.stderr(), 15, "fuxi serve to say the master is "
               "out of reach", diagnostics=serve.stderr)
    assert serve.popen.poll() is None   # and it keeps trying
    families = scrape(f"http://127.0.0.1:{http_port}")
    assert value(families, "mesoslike_fuxi_serving") == 1
    assert value(families, "mesoslike_fuxi_jobs") == 0
    assert families["mesoslike_fuxi_slots_granted"].type == "gauge"


# ------------------------------------------------------------------ logs
def test_json_log_lines_parse_and_the_agent_says_the_master_is_unreachable(tmp_path, clis):
    agent = Cli(tmp_path, "agent", "--master", f"tcp://127.0.0.1:{free_port()}", "--hostname", "lonely",
                "--work-dir", str(tmp_path / "lonely"), "--resources", "cpus:1;mem:128", "--log-format", "json")
    clis.append(agent)

    def said() -> list[dict]:
        lines = [json.loads(line) for line in agent.stderr().splitlines() if line.strip()]
        return lines if any(line["message"].startswith("master unreachable, retrying") for line in lines) else []

    lines = wait_until(said, 20, "the agent to say the master is unreachable", diagnostics=agent.stderr)
    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys(), line
    (notice,) = [line for line in lines if line["message"].startswith("master unreachable")]
    assert notice["level"] == "NOTICE" and notice["logger"].startswith("mesoslike.agent")
    assert agent.popen.poll() is None   # retrying, not gone


def test_sigquit_writes_every_threads_stack_to_the_log_and_the_process_goes_on(tmp_path, clis):
    agent = Cli(tmp_path, "agent", "--master", f"tcp://127.0.0.1:{free_port()}", "--hostname", "stuck",
                "--work-dir", str(tmp_path / "stuck"), "--resources", "cpus:1;mem:128")
    clis.append(agent)
    wait_until(lambda: "master unreachable" in agent.stderr(), 20, "the agent to run", diagnostics=agent.stderr)
    agent.popen.send_signal(signal.SIGQUIT)
    dump = wait_until(lambda: agent.stderr().partition("(most recent call first)")[2], 10, "the stacks",
                      diagnostics=agent.stderr)
    assert "mesoslike/agent/" in dump and "Thread 0x" in agent.stderr()   # the agent's own frames, every thread
    assert agent.popen.poll() is None   # a dump, not a death


def test_json_formatter_carries_extra_fields_and_exceptions():
    formatter = JsonLogFormatter()
    record = logging.LogRecord("mesoslike.test", logging.WARNING, __file__, 1, "task %s lost", ("t-1",), None)
    record.task_id = "t-1"
    line = json.loads(formatter.format(record))
    assert line["message"] == "task t-1 lost" and line["level"] == "WARNING" and line["task_id"] == "t-1"
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("mesoslike.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert "ValueError: boom" in json.loads(formatter.format(record))["exception"]


def test_agent_says_it_registered_at_the_default_level(cluster):
    cluster.start_master()
    proc = cluster.start_agent("talkative", "cpus:1;mem:128")
    agent_id = cluster.agent_id("talkative")
    wait_until(lambda: f"registered with master {cluster.address}" in proc.output()
               and f"as {agent_id}" in proc.output(), 10, "the agent to say it registered",
               diagnostics=proc.output)


def test_run_says_within_5s_that_it_cannot_reach_the_master(tmp_path, clis):
    run = Cli(tmp_path, "run", "--master", f"tcp://127.0.0.1:{free_port()}", "--", "true")
    clis.append(run)
    # the driver says it 3 s into the silence; allow the interpreter's start on a loaded machine
    wait_until(lambda: "cannot reach the master at" in run.stderr(), 15, "run to say the master is out of reach",
               diagnostics=run.stderr)
    assert "retrying" in run.stderr() and run.popen.poll() is None


def test_run_says_when_no_agent_can_fit_a_task(cluster, clis, tmp_path):
    cluster.start_master()
    cluster.start_agent("small", "cpus:4;mem:1024")
    run = Cli(tmp_path, "run", "--master", cluster.address, "--cpus", "100", "--", "true", env=cluster.client_env())
    clis.append(run)
    wait_until(lambda: "no agent can fit an instance: it needs cpus:100, the largest agent has cpus:4 (1 agent(s))"
               in run.stderr(), 20, "run to say no agent can fit the task", diagnostics=run.stderr)


# ------------------------------------------------------------------ /health
def test_health_of_a_master_with_zk_reports_a_lost_zookeeper_connection(zookeeper, tmp_path, clis):
    http_port = free_port()
    master = Cli(tmp_path, "master", "--ip", "127.0.0.1", "--port", str(free_port()), "--http-port",
                 str(http_port), "--zk", zookeeper.url("/observability-health"), "--zk-session-timeout", "2",
                 *FAST_MASTER_ARGS)
    clis.append(master)

    def health() -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health", timeout=2) as reply:
                return json.loads(reply.read())
        except OSError:
            return None

    wait_until(lambda: (health() or {}).get("healthy") and health()["zookeeper_connected"], 30,
               "the master to be healthy", diagnostics=master.stderr)
    zookeeper.stop()
    down = wait_until(lambda: (lambda h: h if h and not h["healthy"] else None)(health()), 15,
                      "/health to report the lost connection", diagnostics=master.stderr)
    assert down["zookeeper_connected"] is False
    zookeeper.start()
    wait_until(lambda: (health() or {}).get("healthy"), 30, "healthy again", diagnostics=master.stderr)
