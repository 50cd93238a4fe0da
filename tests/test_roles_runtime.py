"""The roles file in a running master (docs/roles.rst): applied when it
leads, again when the file changes or on SIGHUP, a broken version keeps the
roles in force; and ``--roles`` on the command line."""

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import urllib.request

import pytest
from click.testing import CliRunner

from mesoslike.cli import main
from mesoslike.master.roles import load_roles_file
from mesoslike.master.runtime import MasterRuntime
from mesoslike.master.settings import MasterSettings
from mesoslike.master.storage import FileRegistryStore
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)

ROOT = pathlib.Path(__file__).resolve().parents[1]

FIRST = """
[preemption]
enabled = true
wait_before_kill = 5.0

[roles.eng]
weight = 2.0
guarantee = "cpus:2;mem:1024"
limit = "cpus:8;gpus:0"
fair_share_preemption_timeout = 30.0

[roles."eng/prod"]
weight = 3.0
min_share = "cpus:1"
"""
SECOND = """
[roles.eng]
weight = 5.0
limit = "cpus:16"

[roles.batch]
weight = 0.5
guarantee = "cpus:1"
"""


def snapshot(runtime):
    with runtime._lock:
        return runtime.core.allocator.snapshot()


def all_stored(runtime):
    """The registry holds every change of the core the master leads with."""
    with runtime._lock:
        return runtime.persisted(runtime.core) == runtime.core.registry_changes


def quota(runtime):
    return {role: (q["guarantee"] or None, q["limit"]) for role, q in snapshot(runtime)["quota"].items()}


def rewrite(path, text, keep_stat=False):
    """Write ``text``; with ``keep_stat`` (same length) restore the old
    modification time, so that only a reload asked for sees the change."""
    before = os.stat(path)
    if keep_stat:
        assert len(text.encode()) == before.st_size
    path.write_text(text)
    if keep_stat:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:  # a new mtime even on a coarse-grained file system
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 5_000_000_000))


@pytest.fixture
def roles_file(tmp_path):
    path = tmp_path / "roles.toml"
    path.write_text(FIRST)
    return path


@pytest.fixture
def master(roles_file):
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=0, roles=load_roles_file(roles_file)))
    runtime.start()
    yield runtime
    runtime.stop()


def test_the_roles_apply_as_the_master_starts_and_show_in_state(master, roles_file):
    # applied before the loop even runs: no framework can get an offer first
    assert snapshot(master)["weights"] == {"eng": 2.0, "eng/prod": 3.0}
    assert quota(master) == {"eng": ("cpus:2;mem:1024", "cpus:8;gpus:0")}
    with master._lock:
        assert master.core.registry.quota["eng"] == {"guarantee": "cpus:2;mem:1024", "limit": "cpus:8;gpus:0"}
    assert master.roles_config.preemption.enabled and master.roles_config.preemption.wait_before_kill == 5.0
    with urllib.request.urlopen(master.http_address + "/state", timeout=10) as reply:
        state = json.loads(reply.read())
    config = state["roles_config"]
    assert config["path"] == str(roles_file)
    assert config["preemption"]["enabled"] is True
    assert config["roles"]["eng"]["weight"] == 2.0 and config["roles"]["eng"]["limit"] == "cpus:8;gpus:0"
    prod = config["roles"]["eng/prod"]   # inherited from eng; the rest defaults
    assert prod == {"weight": 3.0, "guarantee": None, "limit": None, "min_share": "cpus:1",
                    "fair_share_preemption_timeout": 30.0, "min_share_preemption_timeout": None,
                    "fair_share_preemption_threshold": 0.5}


def test_a_master_without_a_roles_file_shows_none():
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None))
    try:
        assert runtime.roles_config is None and runtime.state()["roles_config"] is None
    finally:
        runtime._close()


def test_a_rewritten_file_applies_within_seconds_and_dropped_roles_get_the_defaults(master, roles_file):
    rewrite(roles_file, SECOND)
    wait_until(lambda: snapshot(master)["weights"].get("batch") == 0.5, 8, "the rewritten file applied")
    weights = snapshot(master)["weights"]
    assert weights == {"batch": 0.5, "eng": 5.0, "eng/prod": 1.0}   # eng/prod dropped: back to weight 1
    assert quota(master) == {"batch": ("cpus:1", None), "eng": (None, "cpus:16")}
    assert master.roles_config.roles.keys() == {"eng", "batch"}
    assert master.roles_config.preemption.enabled is False
    assert master.state()["roles_config"]["roles"]["batch"]["weight"] == 0.5


def test_reload_roles_applies_a_change_the_periodic_check_cannot_see(master, roles_file):
    changed = FIRST.replace("weight = 2.0", "weight = 4.0")
    rewrite(roles_file, changed, keep_stat=True)
    looks = master._roles.looks
    wait_until(lambda: master._roles.looks > looks, 5, "the periodic check to look at the file")
    assert snapshot(master)["weights"]["eng"] == 2.0   # it looked (same mtime and size): nothing changed
    master.reload_roles()   # what SIGHUP does
    wait_until(lambda: snapshot(master)["weights"]["eng"] == 4.0, 5, "the reload applied")


def test_a_broken_rewrite_keeps_the_roles_in_force_and_logs_the_field(master, roles_file, caplog):
    caplog.set_level(logging.ERROR, logger="mesoslike.master")
    before = master.roles_config
    rewrite(roles_file, FIRST.replace("weight = 3.0", "weight = -3.0"))
    master.reload_roles()
    wait_until(lambda: any('roles."eng/prod".weight' in r.getMessage() for r in caplog.records), 8,
               "an error naming the field")
    assert master.roles_config is before
    assert snapshot(master)["weights"] == {"eng": 2.0, "eng/prod": 3.0}
    assert master.state()["is_leader"] is True
    rewrite(roles_file, "this is not TOML [")
    master.reload_roles()
    wait_until(lambda: any("not valid TOML" in r.getMessage() for r in caplog.records), 8, "a TOML error")
    roles_file.unlink()
    master.reload_roles()
    wait_until(lambda: any("no such file" in r.getMessage() for r in caplog.records), 8, "a missing file")
    assert master.roles_config is before and quota(master) == {"eng": ("cpus:2;mem:1024", "cpus:8;gpus:0")}
    roles_file.write_text(SECOND)   # fixed: applies again
    wait_until(lambda: snapshot(master)["weights"].get("batch") == 0.5, 8, "the fixed file applied")


def test_the_file_wins_over_the_registry_for_the_roles_it_lists(tmp_path, roles_file):
    store = FileRegistryStore(tmp_path / "work")
    first = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None), registry_store=store)
    first.start()
    try:
        with first._lock:   # an operator's earlier settings, in the registry
            first.send_later(first.core.update_weights({"eng": 9.0, "other": 7.0}))
            first.send_later(first.core.update_quota("eng", "cpus:4", None))
            first.send_later(first.core.update_quota("other", "cpus:1", None))
        wait_until(lambda: all_stored(first), 5, "the registry stored")
    finally:
        first.stop()
    again = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, roles=load_roles_file(roles_file)), registry_store=FileRegistryStore(tmp_path / "work"))
    again.start()
    try:
        assert snapshot(again)["weights"] == {"eng": 2.0, "eng/prod": 3.0, "other": 7.0}
        assert quota(again) == {"eng": ("cpus:2;mem:1024", "cpus:8;gpus:0"), "other": ("cpus:1", None)}
        wait_until(lambda: all_stored(again), 5, "the registry stored")
    finally:
        again.stop()
    stored = json.loads((tmp_path / "work" / "registry.json").read_text())
    assert stored["weights"]["eng"] == 2.0 and stored["quota"]["eng"]["guarantee"] == "cpus:2;mem:1024"


def test_a_reload_changes_only_what_differs_from_the_file(master, roles_file):
    changes = master.core.registry_changes
    os.utime(roles_file, ns=(0, os.stat(roles_file).st_mtime_ns + 10_000_000_000))
    master.reload_roles()
    wait_until(lambda: not master._roles.reloads_pending, 5, "the reload handled")
    with master._lock:   # the turn that handled it has applied it
        assert master.core.registry_changes == changes   # unchanged file: nothing to do
    with master._lock:   # an operator's change to a listed role, and to another one
        master.send_later(master.core.update_weights({"eng": 9.0, "other": 4.0}))
    master.reload_roles()   # the file wins again, for the roles it lists
    wait_until(lambda: snapshot(master)["weights"]["eng"] == 2.0, 5, "the file applied again")
    assert snapshot(master)["weights"] == {"eng": 2.0, "eng/prod": 3.0, "other": 4.0}


# ------------------------------------------------------------ leadership
from mesoslike.ha.url import ZkUrl  # noqa: E402
from zk_helpers import zookeeper, zookeeper_server  # noqa: E402,F401 (fixtures)


def test_a_master_taking_over_applies_the_file_over_what_the_registry_holds(zookeeper, roles_file):
    url = ZkUrl.parse(zookeeper.url("roles-takeover"))
    leader = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0,
                                          roles=load_roles_file(roles_file)))
    leader.start()
    follower = None
    try:
        wait_until(lambda: leader.is_leader, 15, "a leader")
        assert snapshot(leader)["weights"]["eng"] == 2.0
        follower = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url,
                                                zk_session_timeout=4.0, roles=load_roles_file(roles_file)))
        follower.start()
        with leader._lock:   # an operator changes a listed role on the leader
            leader.send_later(leader.core.update_weights({"eng": 9.0}))
        wait_until(lambda: all_stored(leader), 5, "the registry stored")
        rewrite(roles_file, FIRST.replace("weight = 3.0", "weight = 6.0"))   # read by the next leader
        leader.stop()
        leader = None   # stopped (stop() is not to be called twice)
        wait_until(lambda: follower.is_leader, 20, "the follower to take over")
        wait_until(lambda: snapshot(follower)["weights"] == {"eng": 2.0, "eng/prod": 6.0}, 5,
                   "the file applied by the new leader")
        assert quota(follower) == {"eng": ("cpus:2;mem:1024", "cpus:8;gpus:0")}
        assert follower.state()["roles_config"]["roles"]["eng/prod"]["weight"] == 6.0
    finally:
        for runtime in (follower, leader):
            if runtime is not None:
                runtime.stop()


# ------------------------------------------------------------------- CLI
def test_a_bad_roles_file_stops_the_cli_with_exit_2_naming_the_field(tmp_path, monkeypatch):
    bad = tmp_path / "bad.toml"
    bad.write_text('[roles."a/b"]\nweight = -1\n')

    def never(*args, **kwargs):
        raise AssertionError("the master must not start (nor bind) with a bad roles file")
    monkeypatch.setattr("mesoslike.master.runtime.MasterRuntime", never)
    for command in ("master", "local"):
        result = CliRunner().invoke(main, [command, "--roles", str(bad)])
        assert result.exit_code == 2, result.output
        assert 'roles."a/b".weight: must be a number > 0, got -1' in result.output
        assert "--roles" in result.output
    result = CliRunner().invoke(main, ["master"], env={"MESOSLIKE_ROLES": str(tmp_path / "missing.toml")})
    assert result.exit_code == 2 and "no such file" in result.output
    config = tmp_path / "master.toml"
    config.write_text(f'[master]\nroles = "{bad}"\n')
    result = CliRunner().invoke(main, ["master", "--config", str(config)])
    assert result.exit_code == 2 and 'roles."a/b".weight' in result.output


def test_roles_reaches_the_runtime_from_the_flag_the_env_and_the_config_file(tmp_path, roles_file, monkeypatch):
    seen = []

    class FakeRuntime:
        def __init__(self, settings, **kwargs):
            seen.append(settings.roles)
            raise SystemExit(0)
    monkeypatch.setattr("mesoslike.master.runtime.MasterRuntime", FakeRuntime)
    runner = CliRunner()
    assert runner.invoke(main, ["master", "--roles", str(roles_file)]).exit_code == 0
    assert runner.invoke(main, ["master"], env={"MESOSLIKE_MASTER_ROLES": str(roles_file)}).exit_code == 0
    assert runner.invoke(main, ["master"], env={"MESOSLIKE_ROLES": str(roles_file)}).exit_code == 0
    config = tmp_path / "master.toml"
    config.write_text(f'[master]\nroles = "{roles_file}"\n')
    assert runner.invoke(main, ["master", "--config", str(config)]).exit_code == 0
    assert runner.invoke(main, ["master"]).exit_code == 0
    assert [c.path if c else None for c in seen] == [str(roles_file)] * 4 + [None]
    assert seen[0].roles["eng"].weight == 2.0


def test_help_shows_roles_with_its_default_and_env_vars():
    for command in ("master", "local"):
        result = CliRunner().invoke(main, [command, "--help"], terminal_width=200)
        assert "--roles FILE" in result.output
        assert "MESOSLIKE_ROLES" in result.output and f"MESOSLIKE_{command.upper()}_ROLES" in result.output
        assert "default: (none)" in result.output.split("--roles", 1)[1].split("--", 1)[0]


def test_sighup_makes_a_running_master_reload_its_roles_file(tmp_path, roles_file):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "mesoslike", "master", "--port", "0", "--http-port", "0",
                             "--roles", str(roles_file)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert "listening on" in line, line
        http = line.split("(HTTP ")[1].split(")")[0]

        def weight():
            with urllib.request.urlopen(http + "/state", timeout=5) as reply:
                return json.loads(reply.read())["roles_config"]["roles"]["eng"]["weight"]
        assert weight() == 2.0
        rewrite(roles_file, FIRST.replace("weight = 2.0", "weight = 7.0"), keep_stat=True)  # unseen by the check
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: weight() == 7.0, 10, "the SIGHUP reload")
        assert proc.poll() is None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
