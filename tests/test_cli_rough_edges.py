"""Rough edges a new user met (issue 17 §5), each as the user meets it: the
real command line in a subprocess (or click's CliRunner where no process
boundary matters), real clusters on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from e2e_helpers import REPO, child_env, cluster, free_port  # noqa: F401 (a fixture)
from mesoslike.cli import main

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
        def __init__(self, master_address, *args, **kwargs):
            seen.update(master=master_address, attributes=args[1])
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
    assert seen == {"master": "tcp://127.0.0.1:5050", "attributes": "rack:r1;room:er0"}


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

    from mesoslike.cli.fuxi import serve

    fuxi_port = next(p.default for p in serve.params if p.name == "port")
    readme = (REPO / "README.rst").read_text()
    masters = [line for line in readme.splitlines() if line.strip().startswith("mesoslike master ") and "--zk" in line]
    ports = [int(port) for line in masters for port in re.findall(r"--(?:http-)?port (\d+)", line)]
    assert len(masters) >= 3 and len(ports) == 2 * len(masters)
    assert len(set(ports)) == len(ports), ports
    assert fuxi_port not in ports
    assert "fuxi serve" in readme and "--port" not in next(line for line in readme.splitlines()
                                                             if "mesoslike fuxi serve" in line)
