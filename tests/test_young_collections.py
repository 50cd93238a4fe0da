"""The young generation passed over every 50,000 allocations in the runtimes with a busy loop."""

from __future__ import annotations

import gc

from agent_helpers import master  # noqa: F401 (fixture)
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.young_collections import YOUNG_PASS_EVERY, pass_over_young_objects_less_often
from test_master_long_lived import threshold  # noqa: F401 (fixture: the process's thresholds kept and restored)


def test_the_threshold_is_raised_never_lowered_and_an_off_collector_stays_off(threshold):
    gc.set_threshold(700, 10, 10)   # Python's default
    pass_over_young_objects_less_often()
    assert gc.get_threshold() == (YOUNG_PASS_EVERY, 10, 10) == (50_000, 10, 10)
    gc.set_threshold(200_000, 10, 10)
    pass_over_young_objects_less_often()
    assert gc.get_threshold() == (200_000, 10, 10)
    gc.set_threshold(0, 10, 10)
    pass_over_young_objects_less_often()
    assert gc.get_threshold()[0] == 0


def test_an_agent_passes_over_its_young_objects_every_50000_allocations(threshold, master, tmp_path):
    # a launch burst's records (runs, updates waiting for their acknowledgement) live a second or two:
    # at Python's 700 the agent's collector passed over them and promoted them turn after turn
    gc.set_threshold(700, 10, 10)
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256", hostname="young",
                                         work_dir=str(tmp_path / "work"), isolation="posix")).start()
    try:
        master.register()
        assert gc.get_threshold() == (YOUNG_PASS_EVERY, 10, 10)
    finally:
        runtime.stop()
