"""The roles-file watcher (mesoslike.master.roles_watcher) turned by hand
with a fake clock and sans-I/O cores: when it looks at the file, what it
applies to which core. The running master's use of it: test_roles_runtime.py."""

from __future__ import annotations

import logging
import os

import pytest

from mesoslike.clock import FakeClock
from mesoslike.master.core import MasterCore
from mesoslike.master.records import MasterConfig
from mesoslike.master.roles import load_roles_file
from mesoslike.master.roles_watcher import CHECK_INTERVAL, RolesWatcher
from mesoslike.wire import MasterInfo

pytestmark = pytest.mark.timeout(30)

FIRST = """
[roles.eng]
weight = 2.0
guarantee = "cpus:2"

[roles."eng/prod"]
weight = 3.0
"""
SECOND = """
[roles.batch]
weight = 0.5
limit = "cpus:4"
"""


def rewrite(path, text, keep_stat=False):
    before = os.stat(path)
    if keep_stat:
        assert len(text.encode()) == before.st_size
    path.write_text(text)
    mtime = before.st_mtime_ns if keep_stat else before.st_mtime_ns + 5_000_000_000
    os.utime(path, ns=(before.st_atime_ns, mtime))


def new_core(clock):
    return MasterCore(clock, MasterInfo("m", "tcp://127.0.0.1:1"), MasterConfig())


@pytest.fixture
def setup(tmp_path):
    path = tmp_path / "roles.toml"
    path.write_text(FIRST)
    clock = FakeClock()
    return path, clock, RolesWatcher(load_roles_file(path), clock)


def test_a_leader_gets_the_file_applied_once_per_core(setup):
    path, clock, watcher = setup
    core = new_core(clock)
    watcher.turn(core)   # a core it has not seen: applied (what the core has to say goes to the loop)
    assert core.registry.weights == {"eng": 2.0, "eng/prod": 3.0}
    assert core.registry.quota["eng"]["guarantee"] == "cpus:2"
    assert core.roles_config is watcher.config
    changes = core.registry_changes
    assert watcher.turn(core) == [] and core.registry_changes == changes   # nothing new
    successor = new_core(clock)   # a take-over: the file applies to the new core too
    watcher.turn(successor)
    assert successor.registry.weights == {"eng": 2.0, "eng/prod": 3.0}


def test_the_file_is_looked_at_every_check_interval_even_by_a_follower(setup):
    path, clock, watcher = setup
    rewrite(path, SECOND)
    watcher.turn(None)
    assert watcher.looks == 0 and set(watcher.config.roles) == {"eng", "eng/prod"}   # not yet time
    clock.advance(CHECK_INTERVAL)
    watcher.turn(None)
    assert watcher.looks == 1 and set(watcher.config.roles) == {"batch"}
    core = new_core(clock)
    watcher.turn(core)   # takes over with what is current
    assert core.registry.weights == {"batch": 0.5}


def test_a_change_that_keeps_the_stat_is_seen_only_when_asked(setup):
    path, clock, watcher = setup
    core = new_core(clock)
    watcher.turn(core)
    rewrite(path, FIRST.replace("weight = 2.0", "weight = 4.0"), keep_stat=True)
    clock.advance(CHECK_INTERVAL)
    watcher.turn(core)
    assert watcher.looks == 2 and core.registry.weights["eng"] == 2.0   # looked: same mtime and size
    watcher.reload()
    assert watcher.reloads_pending
    watcher.turn(core)
    assert not watcher.reloads_pending and core.registry.weights["eng"] == 4.0


def test_dropped_roles_go_back_to_the_defaults_and_the_file_wins_over_the_operator(setup):
    path, clock, watcher = setup
    core = new_core(clock)
    watcher.turn(core)
    core.update_weights({"eng": 9.0, "other": 4.0})   # an operator's changes
    rewrite(path, SECOND)
    watcher.reload()
    watcher.turn(core)
    assert core.registry.weights == {"batch": 0.5, "eng": 1.0, "eng/prod": 1.0, "other": 4.0}
    assert core.registry.quota == {"batch": {"limit": "cpus:4"}}   # eng's guarantee went with it


def test_a_broken_file_keeps_the_roles_in_force(setup, caplog):
    path, clock, watcher = setup
    caplog.set_level(logging.ERROR, logger="mesoslike.master")
    core = new_core(clock)
    watcher.turn(core)
    before = watcher.config
    rewrite(path, "this is not TOML [")
    watcher.reload()
    watcher.turn(core)
    assert watcher.config is before and core.registry.weights == {"eng": 2.0, "eng/prod": 3.0}
    assert any("not valid TOML" in record.getMessage() for record in caplog.records)


def test_without_a_roles_file_there_is_nothing_to_do():
    clock = FakeClock()
    watcher = RolesWatcher(None, clock)
    core = new_core(clock)
    watcher.reload()
    assert watcher.turn(core) == [] and core.roles_config is None and watcher.looks == 0
