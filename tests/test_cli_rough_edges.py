"""Rough edges a new user met (issue 17 §5), each as the user meets it: the
real command line in a subprocess (or click's CliRunner where no process
boundary matters), real clusters on 127.0.0.1."""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from e2e_helpers import REPO, RecordingScheduler, child_env, cluster, free_port, task_processes  # noqa: F401 (a fixture)
from mesoslike import Resources, TaskInfo
from mesoslike.cli import main
from mesoslike.agent.settings import AUTOGROUP_NICE, TURN_GAP
from waiting import wait_until
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)


def mesoslike(*args: str, timeout: float = 60.0, env: dict[str, str] | None = None,
              cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``python -m mesoslike ARGS`` as a user runs it, its output captured."""
    return subprocess.run([sys.executable, "-m", "mesoslike", *args], cwd=str(cwd), env=env or child_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ local
def test_local_with_a_missing_command_says_so_in_one_line_and_stops(tmp_path):
    work = tmp_path / "work"
    done = mesoslike("local", "--port", str(free_port()), "--http-port", str(free_port()), "--work-dir", str(work),
                     "--", "nosuchcmd-of-the-test")
    assert done.returncode == 127, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: cannot run 'nosuchcmd-of-the-test': No such file or directory; stopping the cluster"]


def test_local_with_a_command_that_is_not_executable_exits_126(tmp_path):
    script = tmp_path / "not-executable.sh"
    script.write_text("echo hi\n")
    done = mesoslike("local", "--port", str(free_port()), "--http-port", str(free_port()), "--work-dir",
                     str(tmp_path / "work"), "--", str(script))
    assert done.returncode == 126, done.stderr
    assert "Traceback" not in done.stderr
    assert f"error: cannot run '{script}': Permission denied" in done.stderr


# ------------------------------------------------------------ config files
@pytest.mark.parametrize("command, content, where, fragment", [
    (["master"], '[master]\nport = "fifty"\n', "'port' in {path} (table [master])", "'fifty' is not a valid integer"),
    (["master"], 'http-port = -3\n', "'http-port' in {path}", "-3"),
    (["agent", "--master", "tcp://127.0.0.1:1"], '[agent]\nrecovery-timeout = "soon"\n',
     "'recovery-timeout' in {path} (table [agent])", "'soon' is not a duration"),
    (["master"], '[master]\nroles = "/nonexistent/roles.toml"\n', "'roles' in {path} (table [master])",
     "no such file"),
])
def test_a_bad_value_in_a_config_file_names_the_file_and_the_key(tmp_path, command, content, where, fragment):
    config = tmp_path / "settings.toml"
    config.write_text(content)
    result = CliRunner().invoke(main, [*command, "--config", str(config)], env={"MESOSLIKE_MASTER_PORT": None})
    assert result.exit_code == 2, result.output
    error = " ".join(result.output.split("Error: ", 1)[1].split())  # undo click's wrapping
    assert error.startswith("Invalid value for " + where.format(path=config) + ": "), error
    assert fragment in error
    assert "env var" not in error and "--" not in error.split(":")[0]


def test_a_bad_environment_variable_is_still_named_as_such():
    result = CliRunner().invoke(main, ["master"], env={"MESOSLIKE_MASTER_PORT": "fifty"})
    assert result.exit_code == 2
    assert "Invalid value for '--port' (env var: 'MESOSLIKE_MASTER_PORT')" in result.output


def record_agent_runtime(monkeypatch) -> dict:
    """Replace the agent's runtime with a recorder of the master and attributes it was given."""
    seen: dict = {}

    class RecordingRuntime:
        def __init__(self, settings, **injected):
            seen.update(master=settings.master, attributes=settings.attributes, turn_gap=settings.turn_gap,
                        autogroup_nice=settings.autogroup_nice)
            raise SystemExit(0)

    monkeypatch.setattr("mesoslike.agent.runtime.AgentRuntime", RecordingRuntime)
    return seen


def test_the_shipped_agent_config_file_is_read(monkeypatch):
    """conf/agent.toml's ``master = ...`` names the --master option (its
    parameter is master_address): it used to be refused as unknown."""
    seen = record_agent_runtime(monkeypatch)
    result = CliRunner().invoke(main, ["agent", "--config", str(REPO / "conf" / "agent.toml")],
                                env={"MESOSLIKE_AGENT_MASTER": None, "MESOSLIKE_MASTER": None})
    assert result.exit_code == 0, result.output
    assert seen == {"master": "tcp://127.0.0.1:5050", "attributes": "rack:r1;room:er0", "turn_gap": TURN_GAP,
                    "autogroup_nice": AUTOGROUP_NICE}


@pytest.mark.parametrize("flag, expected", [([], TURN_GAP), (["--turn-gap", "0"], 0.0),
                                            (["--turn-gap", "0.05"], 0.05)])
def test_the_agent_turn_gap_is_an_option(monkeypatch, flag, expected):
    """--turn-gap reaches the agent's settings (docs/agent.rst, Turns); its
    default is the settings' (a literal in the CLI, which does not import the
    agent's modules to start: this holds the two equal)."""
    seen = record_agent_runtime(monkeypatch)
    result = CliRunner().invoke(main, ["agent", "--master", "tcp://127.0.0.1:7001", *flag])
    assert result.exit_code == 0, result.output
    assert seen["turn_gap"] == expected


@pytest.mark.parametrize("flag, expected", [([], AUTOGROUP_NICE), (["--autogroup-nice", "0"], 0),
                                            (["--autogroup-nice", "19"], 19)])
def test_the_agent_autogroup_nice_is_an_option(monkeypatch, flag, expected):
    """--autogroup-nice reaches the agent's settings (docs/agent.rst, CPU)."""
    seen = record_agent_runtime(monkeypatch)
    result = CliRunner().invoke(main, ["agent", "--master", "tcp://127.0.0.1:7001", *flag])
    assert result.exit_code == 0, result.output
    assert seen["autogroup_nice"] == expected


def test_an_agent_autogroup_nice_below_0_is_refused():
    # a nice below 0 would raise the agent above its tasks (and needs CAP_SYS_NICE)
    result = CliRunner().invoke(main, ["agent", "--master", "tcp://127.0.0.1:7001", "--autogroup-nice", "-5"])
    assert result.exit_code == 2 and "--autogroup-nice" in result.output, result.output


def test_an_agent_turn_gap_over_a_second_is_refused():
    result = CliRunner().invoke(main, ["agent", "--master", "tcp://127.0.0.1:7001", "--turn-gap", "2"])
    assert result.exit_code == 2 and "--turn-gap" in result.output and "0<=x<=1" in result.output, result.output


# ------------------------------------------------------------------ agent
@pytest.mark.parametrize("env, flag, expected", [
    ({"MESOSLIKE_MASTER": "tcp://127.0.0.1:7001"}, [], "tcp://127.0.0.1:7001"),
    ({"MESOSLIKE_MASTER": "tcp://127.0.0.1:7001", "MESOSLIKE_AGENT_MASTER": "tcp://127.0.0.1:7002"}, [],
     "tcp://127.0.0.1:7002"),
    ({"MESOSLIKE_MASTER": "tcp://127.0.0.1:7001"}, ["--master", "tcp://127.0.0.1:7003"], "tcp://127.0.0.1:7003"),
])
def test_the_agent_reads_mesoslike_master_below_its_own_variable(monkeypatch, env, flag, expected):
    seen = record_agent_runtime(monkeypatch)
    result = CliRunner().invoke(main, ["agent", *flag], env={"MESOSLIKE_AGENT_MASTER": None, **env})
    assert result.exit_code == 0, result.output
    assert seen["master"] == expected


@pytest.mark.parametrize("command, table", [
    (["state"], "state"), (["fuxi", "status"], "fuxi.status"), (["fuxi", "kill", "job-1"], "fuxi.kill"),
    (["fuxi", "submit", "job.toml"], "fuxi.submit"),
])
def test_client_commands_take_their_address_from_a_config_file(tmp_path, command, table):
    silent = free_port()  # nothing listens there: the error names the address the file gave
    key = "master" if command == ["state"] else "fuxi"
    config = tmp_path / "client.toml"
    config.write_text(f'[{table}]\n{key} = "tcp://127.0.0.1:{silent}"\ntimeout = 0.3\n')
    args = [*command[:-1], str(REPO / "examples" / "fuxi" / "two-units.toml")] if command[-1] == "job.toml" \
        else command
    done = mesoslike(*args, "--config", str(config), timeout=30)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"tcp://127.0.0.1:{silent} within 0.3s" in done.stderr


@pytest.mark.parametrize("command, table, bad", [(["run"], "run", 'cpus = "many"'),
                                                (["fuxi", "serve"], "fuxi.serve", 'port = "x"')])
def test_run_and_fuxi_serve_read_a_config_file(tmp_path, command, table, bad):
    config = tmp_path / "settings.toml"
    config.write_text(f'[{table}]\nmaster = "tcp://127.0.0.1:1"\n{bad}\n')
    result = CliRunner().invoke(main, [*command, "--config", str(config), "--", "true"])
    assert result.exit_code == 2, result.output
    assert f"'{bad.split()[0]}' in {config} (table [{table}])" in " ".join(result.output.split())


# ------------------------------------------------------------------- fuxi
def test_fuxi_submit_to_a_master_says_it_is_not_a_fuxi_service(cluster):
    cluster.start_local("--agents", "1")
    done = mesoslike("fuxi", "submit", "--fuxi", cluster.address, "--key", cluster.client_key,
                     "--fuxi-key", cluster.master_key, str(REPO / "examples" / "fuxi" / "two-units.toml"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: {cluster.address} is not a Fuxi service: its answer is not of the "
                                  "Fuxi job protocol"), done.stderr
    assert "Is it a mesoslike master?" in done.stderr and "Traceback" not in done.stderr


def test_the_readme_masters_do_not_take_the_fuxi_service_port():
    """README's highly available masters and the Fuxi service, started as
    it says, all bind: no port is used twice."""
    import re

    from mesoslike_frameworks.fuxi.cli import serve

    fuxi_port = next(p.default for p in serve.params if p.name == "port")
    readme = (REPO / "README.rst").read_text()
    masters = [line for line in readme.splitlines() if line.strip().startswith("mesoslike master ") and "--zk" in line]
    ports = [int(port) for line in masters for port in re.findall(r"--(?:http-)?port (\d+)", line)]
    assert len(masters) >= 3 and len(ports) == 2 * len(masters)
    assert len(set(ports)) == len(ports), ports
    assert fuxi_port not in ports
    assert "fuxi serve" in readme and "--port" not in next(line for line in readme.splitlines()
                                                             if "mesoslike fuxi serve" in line)


# -------------------------------------------------------------------- run
def run_in_background(cluster, *args: str):
    """``mesoslike run`` against ``cluster`` as a process of its own (signalled by the test)."""
    return cluster._start("run", ["run", "--master", cluster.address, "--key", cluster.client_key,
                                  "--master-key", cluster.master_key, *args])


@pytest.mark.parametrize("signum, code, said", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                                (signal.SIGINT, 130, "interrupted (Ctrl-C)")])
def test_run_stopped_by_a_signal_kills_its_tasks_tears_down_and_says_so(cluster, signum, code, said):
    cluster.start_local("--agents", "2")   # cpus:2 each: 4 instances of cpus:1 run, 2 wait
    run = run_in_background(cluster, "--instances", "6", "--cpus", "1", "--", "sleep", "120")

    def running() -> int:
        return sum(t["state"] == "TASK_RUNNING" for f in cluster.state()["frameworks"] for t in f["tasks"])

    cluster.wait_until(lambda: running() == 4, 30, "4 instances running")
    cluster.wait_until(lambda: run.output().count(": TASK_RUNNING") == 4, 10, "run to show them running")
    run.popen.send_signal(signum)
    assert run.popen.wait(timeout=30) == code, run.output()
    output = run.output()
    assert f"{said}: killed the 4 tasks still running; 2 never launched. 0/6 finished" in output
    assert output.count(": TASK_KILLED") == 4
    assert "gave up" not in output and "Traceback" not in output
    # where the tasks run is said by hostname (node-0, node-1), not by agent id
    assert {line.split(" on ")[1].split(":")[0] for line in output.splitlines() if ": TASK_" in line} \
        == {"node-0", "node-1"}
    doc = cluster.state()
    assert doc["frameworks"] == []   # torn down, not left connected
    (framework,) = doc["completed_frameworks"]
    assert sorted(t["state"] for t in framework["completed_tasks"]) == ["TASK_KILLED"] * 4
    assert task_processes(cluster.work_root) == {}


def test_run_of_failing_instances_does_not_draw_a_full_bar(cluster):
    cluster.start_local("--agents", "1")
    done = mesoslike("run", "--master", cluster.address, "--key", cluster.client_key, "--master-key",
                     cluster.master_key, "--instances", "4", "--", "false")
    assert done.returncode == 1, done.stderr
    assert "[xxxxxxxxxxxxxxxxxxxx] 0/4 finished, 4 failed, 0 running, 0 waiting" in done.stdout
    assert "#" not in done.stdout


# ------------------------------------------------------------------- demo
def test_demo_framework_writes_whole_lines_into_a_pipe(tmp_path):
    """``make demo-framework`` (the command its Makefile rule runs, smaller)
    piped into a file: progress as lines, no carriage returns."""
    rule = (REPO / "Makefile").read_text().split("\ndemo-framework:", 1)[1].split("\n\n", 1)[0]
    assert "mesoslike local --port 0 --http-port 0 -- $(BIN)/python examples/wordcount.py" in rule
    done = subprocess.run([sys.executable, "-m", "mesoslike", "local", "--port", "0", "--http-port", "0",
                           "--work-dir", str(tmp_path / "work"), "--", sys.executable, "examples/wordcount.py",
                           "--shards", "3", "--words", "2000", "--data-dir", str(tmp_path)],
                          cwd=str(REPO), env=child_env(), stdin=subprocess.DEVNULL, capture_output=True, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    assert b"\r" not in done.stdout   # read as bytes: text mode would turn \r into \n
    lines = done.stdout.decode().split("\n")
    assert "[##############################] 3/3 shards done, 0 running, 0 failed" in lines
    assert any(line.endswith("matches the single-process count: yes") for line in lines)


# -------------------------------------------------------- ZooKeeper down
def test_an_agent_logs_one_line_per_zookeeper_outage_and_one_when_it_is_back(cluster, zookeeper):
    group = zookeeper.url("/rough-outage")
    cluster.start_master("--zk", group)
    agent = cluster._start("agent-z1", ["agent", "--master", group, "--hostname", "z1", "--resources", "cpus:1;mem:64",
                                        "--work-dir", str(cluster.work_root / "z1"), "--key",
                                        cluster.keys.secret("agent1"), "--master-key", cluster.master_key])
    cluster.wait_for_agents(["z1"], timeout=30)
    zookeeper.stop()
    cluster.wait_until(lambda: "lost the ZooKeeper connection" in agent.output(), 30, "the outage's line")
    outage_began = time.monotonic()
    # an outage of 5 s: kazoo tries again about once a second meanwhile
    wait_until(lambda: time.monotonic() - outage_began > 5.0, 10, "an outage of 5 s")
    zookeeper.start()
    back = cluster.wait_until(lambda: re.search(r"ZooKeeper connection to \S+ back after ([\d.]+) s "
                                                r"\((\d+) failed attempts", agent.output(20000)), 60,
                              "the line saying ZooKeeper is back")
    assert float(back.group(1)) >= 5.0 and int(back.group(2)) >= 3   # the attempts happened, unlogged
    log = agent.output(20000)
    assert log.count("lost the ZooKeeper connection") == 1
    assert log.count(" back after ") == 1
    assert "Connection dropped" not in log.replace("(Connection dropped", "")   # only inside the one line
    assert "Connection time-out" not in log and "Transition to CONNECTING" not in log


def test_the_connection_log_keeps_one_line_per_outage_and_notes_an_expired_session(caplog):
    from mesoslike import FakeClock
    from mesoslike.ha.connection_log import ConnectionLog

    clock = FakeClock()
    connection_log = ConnectionLog("zk1:2181", clock=clock.now)
    caplog.set_level(logging.DEBUG)

    def lines() -> list[str]:
        return [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]

    connection_log.warning("Connection dropped: %s", "refused")        # the first connection: the caller says it
    connection_log.state_changed("CONNECTED")
    assert lines() == []
    connection_log.warning("Connection dropped: %s", "socket connection broken")
    for _ in range(30):
        clock.advance(1.0)
        connection_log.warning("Transition to CONNECTING")
        connection_log.warning("Connection dropped: %s", "socket connection error: Connection refused")
    connection_log.warning("Session has expired")
    connection_log.state_changed("LOST")
    connection_log.error("an error always passes")
    connection_log.state_changed("CONNECTED")
    connection_log.warning("some other warning")
    assert lines() == [
        "WARNING mesoslike.ha: lost the ZooKeeper connection to zk1:2181 (Connection dropped: socket connection "
        "broken); retrying, and saying so once it is back",
        "ERROR kazoo.client: an error always passes",
        "WARNING mesoslike.ha: ZooKeeper connection to zk1:2181 back after 30.0 s (61 failed attempts; the "
        "session had expired: a new one)",
        "WARNING kazoo.client: some other warning",
    ]


def test_state_asks_a_tcp_master_directly_which_says_it_does_not_lead_while_zookeeper_is_down(cluster, zookeeper):
    cluster.start_master("--zk", zookeeper.url("/rough-state"), "--zk-session-timeout", "4")
    cluster.wait_until(lambda: cluster.state()["is_leader"], 30, "the master to lead")
    env = cluster.client_env()
    assert mesoslike("state", "--master", cluster.address, env=env).returncode == 0
    zookeeper.stop()
    cluster.wait_until(lambda: cluster.state()["is_leader"] is False, 30, "the master to step down")

    def answered():
        done = mesoslike("state", "--master", cluster.address, "--timeout", "3", env=env)
        return done if "does not lead" in done.stderr else None

    # once its session has expired (4 s) it answers, at once, that it does not lead and knows no leader
    cluster.wait_until(answered, 40, "the master's answer that it does not lead")
    for _ in range(3):   # every time, not once in a while: asking ZooKeeper who leads does not block its answer
        done = mesoslike("state", "--master", cluster.address, "--timeout", "3", env=env)
        assert done.returncode == 1
        assert done.stderr == (f"error: the master at {cluster.address} answers but does not lead, and knows of "
                               "no leader (it cannot reach ZooKeeper, or an election is under way)\n")


# ---------------------------------------------------- framework messages
class ReadsItsMessages(RecordingScheduler):
    """Launches one task that ends once a line ``hello`` is in its <sandbox>/messages."""

    def __init__(self) -> None:
        super().__init__()
        self.launched = False

    def on_offers(self, driver, offers) -> None:
        for offer in offers:
            if self.launched:
                driver.decline_offer(offer.id)
                continue
            self.launched = True
            driver.launch_tasks([offer.id], [TaskInfo(task_id="reader", agent_id=offer.agent_id, command=READER,
                                                      resources=Resources(cpus=0.1, mem=16))])


READER = "until grep -qx hello messages 2>/dev/null; do sleep 0.05; done; echo got it"


def test_a_framework_message_reaches_the_running_task_it_names(cluster):
    cluster.start_local("--agents", "1")
    scheduler = ReadsItsMessages()
    driver = cluster.driver(scheduler, "messages")
    running = scheduler.wait(lambda: next((s for s in scheduler.statuses("reader") if s.state == "TASK_RUNNING"),
                                          None), 30, "the task to run")
    with pytest.raises(ValueError, match="needs the task_id of a running task"):
        driver.send_framework_message(running.agent_id, b"hello\n", "")   # refused here, not dropped there
    with pytest.raises(TypeError):
        driver.send_framework_message(running.agent_id, b"hello\n")   # type: ignore[call-arg]
    driver.send_framework_message(running.agent_id, b"hello\n", "reader")
    scheduler.wait(lambda: any(s.state == "TASK_FINISHED" for s in scheduler.statuses("reader")), 30,
                   "the task to read the message and finish")


def test_pymesos_send_framework_message_reaches_the_command_task_of_that_executor_id(cluster):
    """pymesos's ``sendFrameworkMessage(executorId, agentId, data)``: a command
    task's executor id is its task id (as Mesos's command executor)."""
    from mesoslike.compat import pymesos

    finished = threading.Event()

    class Reader(pymesos.Scheduler):
        launched = False

        def resourceOffers(self, driver, offers):
            for offer in offers:
                if self.launched:
                    driver.declineOffer(offer["id"])
                    continue
                self.launched = True
                driver.launchTasks([offer["id"]], [{
                    "task_id": {"value": "reader"}, "agent_id": offer["agent_id"], "name": "reader",
                    "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                                  {"name": "mem", "type": "SCALAR", "scalar": {"value": 16}}],
                    "command": {"value": READER}}])

        def statusUpdate(self, driver, status):
            if status["state"] == "TASK_RUNNING":
                driver.sendFrameworkMessage({"value": "reader"}, status["agent_id"], pymesos.encode_data(b"hello\n"))
            elif status["state"] == "TASK_FINISHED":
                finished.set()

    cluster.start_local("--agents", "1")
    driver = pymesos.MesosSchedulerDriver(Reader(), {"name": "pymesos-messages", "failover_timeout": 0},
                                          cluster.address.removeprefix("tcp://"), key=cluster.client_key,
                                          master_key=cluster.master_key, stop_timeout=5.0)
    cluster.drivers.append(driver)   # stopped at clean-up
    driver.start()
    assert finished.wait(30), "the task did not get the message"


# ----------------------------------------------------------------- README
def test_the_readme_says_to_activate_the_venv_and_that_works():
    readme = (REPO / "README.rst").read_text()
    assert "make venv && . .venv/bin/activate    # or call .venv/bin/mesoslike instead of mesoslike" in readme
    assert (REPO / ".venv" / "bin" / "activate").exists(), "make venv (make test) makes .venv"
    done = subprocess.run(["bash", "-c", ". .venv/bin/activate && command -v mesoslike && mesoslike --version"],
                          cwd=str(REPO), env=child_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(REPO / ".venv" / "bin" / "mesoslike")


def test_a_killed_leaders_session_ends_at_once_with_its_guard_and_after_the_timeout_without(cluster, zookeeper):
    """README: a killed master's ZooKeeper session ends at once (its session
    guard closes it), and, with --no-zk-session-guard, only when ZooKeeper
    expires it: between 2/3 of the timeout and the whole of it."""
    from kazoo.client import KazooClient

    readme = (REPO / "README.rst").read_text()
    assert "or its process dies" in readme and "--no-zk-session-guard" in readme
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=10)
    try:
        for path, timeout, flags in (("/rough-guarded", 30, ()), ("/rough-session", 6, ("--no-zk-session-guard",))):
            def members() -> list[str]:
                return [c for c in client.get_children(path) if c.startswith("json.info_")]

            cluster.start_master("--zk", zookeeper.url(path), "--zk-session-timeout", str(timeout), *flags)
            cluster.wait_until(lambda: cluster.state()["is_leader"], 30, "the master to lead")
            assert len(members()) == 1
            cluster.master.kill()   # SIGKILL of its process group: no goodbye to ZooKeeper
            killed_at = time.monotonic()
            # guarded: well within the 30 s session; unguarded: the whole session at most
            wait_until(lambda: not members(), 15, f"the killed leader's session to end ({path})")
            if flags:
                assert time.monotonic() - killed_at >= timeout * 2 / 3 - 0.5   # not at once
    finally:
        client.stop()
        client.close()
