"""The master's side of issue 15, sans I/O: an agent's HTTP address and its
tasks' usage in ``/state``, an agent that unregisters (drained) is removed at
once, and a fresh core of the same master process tells the agents an
earlier core knew to re-register at once."""

import pytest

from mesoslike.clock import FakeClock
from mesoslike.master import MasterConfig, MasterCore
from mesoslike.master.registry import Registry
from mesoslike.master.state import state_json
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, Filters, FrameworkInfo, MasterInfo, TaskInfo, TaskState
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
FW, AG = b"fw-peer", b"agent-peer"
CONFIG = MasterConfig(heartbeat_interval=1.0, ping_interval=1.0, max_agent_ping_timeouts=3)


def send(core, peer, message):
    return [(s.peer, s.message) for s in core.on_message(peer, message)]


def only(out, kind):
    return [msg for _, msg in out if isinstance(msg, kind)]


def cluster_with_a_task(clock):
    core = MasterCore(clock, MasterInfo("m", "tcp://127.0.0.1:1"), CONFIG)
    (registered,) = only(send(core, AG, m.RegisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096")),
                                                       http_address="http://127.0.0.1:5151")), m.AgentRegistered)
    (subscribed,) = only(send(core, FW, m.Subscribe(FrameworkInfo("demo"))), m.Subscribed)
    (offers,) = only([(s.peer, s.message) for s in core.tick()], m.Offers)
    task = TaskInfo("t1", registered.agent_id, "sleep 60", R("cpus:1;mem:128"))
    send(core, FW, m.Accept(subscribed.framework_id, [offers.offers[0].id], [task], Filters(0.0)))
    return core, registered.agent_id, subscribed.framework_id


def test_state_shows_the_agents_http_address_and_the_usage_of_its_running_tasks():
    clock = FakeClock()
    core, agent_id, framework_id = cluster_with_a_task(clock)
    (agent,) = state_json(core)["agents"]
    assert agent["http_address"] == "http://127.0.0.1:5151"
    (task,) = state_json(core)["frameworks"][0]["tasks"]
    assert task["usage"] is None                                     # not measured yet
    usage = m.TaskUsage(framework_id, "t1", 1234.5, cpus_user_time_secs=1.5, cpus_system_time_secs=0.25,
                        cpus_limit=1.0, mem_rss_bytes=10 << 20, mem_limit_bytes=128 << 20, enforced=True)
    stray = m.TaskUsage(framework_id, "not-here", 1234.5)
    send(core, AG, m.Pong(agent_id, [usage, stray]))
    (task,) = state_json(core)["frameworks"][0]["tasks"]
    assert task["usage"]["cpus_user_time_secs"] == 1.5 and task["usage"]["mem_limit_bytes"] == 128 << 20
    assert task["usage"]["enforced"] is True
    assert set(core.agents[agent_id].usage) == {(framework_id, "t1")}  # only its own tasks are kept


def test_an_agent_that_unregisters_is_removed_at_once_and_its_leftover_tasks_are_lost():
    clock = FakeClock()
    core, agent_id, framework_id = cluster_with_a_task(clock)
    out = send(core, AG, m.UnregisterAgent(agent_id, "drained"))
    assert state_json(core)["agents"] == []
    (update,) = only(out, m.Update)
    assert (update.status.task_id, update.status.state) == ("t1", TaskState.LOST)
    assert only(out, m.Failure) and not only(out, m.ShutdownAgent)    # it left on its own: nothing to tell it
    assert agent_id in core.removed_agents


def test_an_unregistration_from_another_connection_or_for_another_agent_is_ignored():
    clock = FakeClock()
    core, agent_id, _ = cluster_with_a_task(clock)
    send(core, b"stranger", m.UnregisterAgent(agent_id))
    send(core, AG, m.UnregisterAgent("someone-else"))
    assert [a["id"] for a in state_json(core)["agents"]] == [agent_id]


def test_a_fresh_core_of_the_same_master_tells_the_agents_an_earlier_core_knew_to_reregister():
    clock = FakeClock()
    earlier, agent_id, _ = cluster_with_a_task(clock)
    registry = Registry.from_document(earlier.registry.to_document())
    fresh = MasterCore(clock, MasterInfo("m", "tcp://127.0.0.1:1"), CONFIG, registry=registry,
                       agent_peers=earlier.agent_peers())
    pings = [(s.peer, s.message) for s in fresh.tick() if isinstance(s.message, m.Ping)]
    assert pings == [(AG, m.Ping(agent_id, connected=False))]          # at once, on its first tick
    clock.advance(1.0)
    assert pings_of(fresh) == [m.Ping(agent_id, connected=False)]   # again each ping interval
    send(fresh, AG, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id=agent_id)))
    clock.advance(1.0)
    assert pings_of(fresh) == [m.Ping(agent_id)]                      # known now: pinged as usual


def pings_of(core):
    return [s.message for s in core.tick() if isinstance(s.message, m.Ping)]
