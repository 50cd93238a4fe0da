"""The agent core's status streams cost O(log n) per turn, not a walk over
every task's stream (issue 14 §2): counted, not timed."""

from __future__ import annotations

import pytest

from mesoslike.agent.core import UPDATE_BACKOFF_INITIAL, SendToMaster
from mesoslike.wire import messages as m
from test_agent_core import FW, ack, launch, make, register
from test_command_progress import CountingDict

pytestmark = pytest.mark.timeout(60)


def test_turns_do_not_walk_the_streams_and_due_updates_still_go_out_again():
    core, clock = make(resources="cpus:1000;mem:100000")
    register(core, ping_interval=0.0)
    tasks = 500
    for i in range(tasks):
        launch(core, f"t{i}", resources="cpus:1;mem:1")
    counting = CountingDict()   # the streams by task, inside the agent's UpdateStreams
    counting.update(core._streams._streams)
    core._streams._streams = counting
    for _ in range(100):                       # turns with nothing due
        assert core.tick() == []
        assert core.next_wakeup() == pytest.approx(clock.now() + UPDATE_BACKOFF_INITIAL, abs=1.0)
    clock.advance(UPDATE_BACKOFF_INITIAL)     # every head is due again: each goes out once more
    resent = [c.message.status for c in core.tick() if isinstance(c, SendToMaster)
              and isinstance(c.message, m.StatusUpdate)]
    assert sorted(status.task_id for status in resent) == sorted(f"t{i}" for i in range(tasks))
    assert core.tick() == []
    for status in resent[:-1]:                # acknowledged: each stream's next update is sent at once
        ack(core, status)
    assert counting.visits == 0
    clock.advance(2 * UPDATE_BACKOFF_INITIAL)  # every head in flight is due again, once
    again = [c.message.status for c in core.tick() if isinstance(c, SendToMaster)]
    assert sorted(s.task_id for s in again) == sorted(f"t{i}" for i in range(tasks))
    assert {s.framework_id for s in again} == {FW.id}
    assert [s.state for s in again if s.task_id == resent[-1].task_id] == [resent[-1].state]
    assert counting.visits == 0
