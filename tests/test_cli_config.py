"""Configuration precedence: file < environment < flag; bad files and flags
are clear errors (exit 2)."""

import pytest
import click
from click.testing import CliRunner

from mesoslike.cli import main

pytestmark = pytest.mark.timeout(30)


def probe(monkeypatch):
    """Replace the master runtime with a recorder of what it was given."""
    seen = {}

    class FakeRuntime:
        def __init__(self, settings, registry_store=None):
            seen.update(address=settings.address, http_port=settings.http_port, config=settings.config)
            raise SystemExit(0)

    monkeypatch.setattr("mesoslike.master.runtime.MasterRuntime", FakeRuntime)
    return seen


def test_file_then_environment_then_flag(tmp_path, monkeypatch):
    seen = probe(monkeypatch)
    config = tmp_path / "master.toml"
    config.write_text('[master]\nport = 6000\nhttp-port = 6001\nallocation-interval = 2.5\nsorter = "random"\n')
    runner = CliRunner()
    result = runner.invoke(main, ["master", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert seen["address"] == "tcp://127.0.0.1:6000" and seen["http_port"] == 6001
    assert seen["config"].allocation_interval == 2.5 and seen["config"].sorter == "random"
    result = runner.invoke(main, ["master", "--config", str(config)], env={"MESOSLIKE_MASTER_PORT": "7000"})
    assert seen["address"] == "tcp://127.0.0.1:7000" and seen["http_port"] == 6001
    result = runner.invoke(main, ["master", "--config", str(config), "--port", "8000"],
                           env={"MESOSLIKE_MASTER_PORT": "7000"})
    assert seen["address"] == "tcp://127.0.0.1:8000"


def test_shipped_config_files_are_valid(monkeypatch):
    seen = probe(monkeypatch)
    result = CliRunner().invoke(main, ["master", "--config", "conf/master.toml"])
    assert result.exit_code == 0, result.output
    assert seen["address"] == "tcp://127.0.0.1:5050"


@pytest.mark.parametrize("content, fragment", [
    ("[master]\nbogus = 1\n", "unknown setting 'bogus'"),
    ("[master\nport = 1\n", "not valid TOML"),
    ("[master]\nport = 'x'\n", "port"),
    ("[master]\nallocation-interval = -1\n", "allocation-interval"),
])
def test_bad_config_files(tmp_path, monkeypatch, content, fragment):
    probe(monkeypatch)
    config = tmp_path / "bad.toml"
    config.write_text(content)
    result = CliRunner().invoke(main, ["master", "--config", str(config)])
    assert result.exit_code == 2
    assert fragment in result.output


@pytest.mark.parametrize("args, fragment", [
    (["master", "--port", "99999"], "99999"),
    (["master", "--sorter", "fifo"], "fifo"),
    (["master", "--config", "/nonexistent.toml"], "no such file"),
    (["agent"], "--master"),
    (["run", "--master", "tcp://127.0.0.1:1"], "COMMAND"),
    (["local", "--agents", "0"], "0"),
])
def test_bad_flags_exit_2_with_a_message(monkeypatch, args, fragment):
    probe(monkeypatch)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert fragment in result.output


def test_bad_addresses_are_reported(monkeypatch):
    result = CliRunner().invoke(main, ["agent", "--master", "localhost:5050"])
    assert result.exit_code == 1 and "tcp://HOST:PORT" in result.output
    result = CliRunner().invoke(main, ["state", "--master", "zk://127.0.0.1:2181"])
    assert result.exit_code == 1 and "ZooKeeper URL" in result.output
    result = CliRunner().invoke(main, ["state", "--master", "127.0.0.1:5050"])
    assert result.exit_code == 1 and "tcp://HOST:PORT" in result.output


def test_every_option_has_an_env_var_and_shows_its_default():
    ctx = click.Context(main)
    # every command of the registry: the platform's and the bundled frameworks' (entry points)
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        for param in command.params:
            if param.param_type_name != "option" or param.name in ("help",):
                continue
            assert param.envvar, f"{name} {param.opts} has no env var"
            # a variable a shell can set (a boolean flag's "--on/--off" pair was named after both halves)
            for envvar in [param.envvar] if isinstance(param.envvar, str) else param.envvar:
                assert envvar.isidentifier(), f"{name} {param.opts}: env var {envvar!r}"
            assert param.show_default, f"{name} {param.opts} hides its default"
            assert param.help, f"{name} {param.opts} has no help"


def test_the_bounds_are_options_and_reach_the_master(tmp_path, monkeypatch):
    seen = probe(monkeypatch)
    defaults = CliRunner().invoke(main, ["master"])
    assert defaults.exit_code == 0, defaults.output
    assert seen["config"].offer_timeout == 60.0 and seen["config"].max_frameworks_per_connection == 1
    config = tmp_path / "master.toml"
    config.write_text("[master]\nmax-frameworks-per-connection = 3\nhttp-timeout = 2.5\n")
    result = CliRunner().invoke(main, [
        "master", "--config", str(config), "--offer-timeout", "0", "--max-agents-per-connection", "2",
        "--max-failover-timeout", "3600", "--max-reconcile-tasks", "500", "--http-workers", "2",
        "--http-max-connections", "16"])
    assert result.exit_code == 0, result.output
    got = seen["config"]
    assert got.offer_timeout is None    # 0: offers never expire
    assert (got.max_frameworks_per_connection, got.max_agents_per_connection, got.max_failover_timeout,
            got.max_reconcile_tasks, got.http_workers, got.http_timeout, got.http_max_connections) == \
        (3, 2, 3600.0, 500, 2, 2.5, 16)
    assert CliRunner().invoke(main, ["master", "--http-workers", "0"]).exit_code == 2
