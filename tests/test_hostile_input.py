"""One frame must not kill a process or a thread (issue 12 §2): resources are
bounded where they enter, and a driver given a hostile offer or an agent
given hostile resources by its master logs and carries on."""

import msgpack
import pytest

from mesoslike.driver import DriverStatus
from mesoslike.errors import ResourcesError
from mesoslike.resources import MAX_QUANTITY, Resources
from mesoslike.wire import messages as m

from codec_helpers import HOSTILE_RESOURCES
import test_agent_runtime as agent_side
from mesoslike.agent.settings import AgentSettings
from agent_helpers import FakeMaster
import test_driver as driver_side

pytestmark = pytest.mark.timeout(60)

R = Resources.parse


# -------------------------------------------------------------- the bound
def test_every_way_into_a_vector_is_bounded():
    assert R(f"cpus:{MAX_QUANTITY}").get("cpus") == MAX_QUANTITY
    for build in (lambda: Resources(cpus=MAX_QUANTITY * 1.01),
                  lambda: Resources({"cpus": 6e14}, cpus=6e14),             # the entries add up
                  lambda: Resources.from_millis({"cpus": MAX_QUANTITY * 1000 + 1}),
                  lambda: Resources(ranges={"ports": [(1, MAX_QUANTITY + 1)]}),
                  lambda: R("cpus:6e14;cpus:6e14"),
                  lambda: R("cpus:1e308"),
                  lambda: R("ports:[1-" + "9" * 5000 + "]")):
        with pytest.raises(ResourcesError):
            build()


def test_arithmetic_on_bounded_vectors_cannot_overflow():
    top = R(f"cpus:{MAX_QUANTITY};mem:{MAX_QUANTITY};ports:[0-{MAX_QUANTITY}]")
    total = Resources.sum([top] * 1000)
    assert total.get("cpus") == 1000 * MAX_QUANTITY and total.get("ports") == MAX_QUANTITY + 1
    scalars = top.only(["cpus", "mem"])
    assert (total - scalars).contains(scalars) and top.scale(2.0).get("mem") == 2 * MAX_QUANTITY
    assert float(sum(total.millis().values())) == 2000 * MAX_QUANTITY * 1000   # converts to a float


# ------------------------------------------------- a driver given a hostile offer
def offers_frame(resources):
    return msgpack.packb({"v": 1, "type": "OFFERS", "offers": [
        {"id": "evil", "agent_id": "a", "hostname": "h", "resources": resources}]}, use_bin_type=True)


def test_a_driver_given_hostile_offers_logs_them_and_carries_on(caplog):
    master = driver_side.FakeMaster()
    drivers = []
    try:
        driver, scheduler, peer = driver_side.subscribed_driver(master, drivers)
        for resources in HOSTILE_RESOURCES:
            master.server.send_frame(peer, offers_frame(resources))
        master.send(peer, m.Offers([driver_side.offer("fine")]))
        (offers,) = scheduler.wait_for("resource_offers")
        assert [o.id for o in offers] == ["fine"]                  # the hostile ones never reached it
        assert driver.status is DriverStatus.RUNNING and driver.connected
        assert sum("bad frame from the master" in r.getMessage() for r in caplog.records) == len(HOSTILE_RESOURCES)
        driver.decline_offer("fine")
        assert master.expect(m.Decline)[1].offer_ids == ["fine"]
    finally:
        for driver in drivers:
            driver.abort()
            driver.join(10)
        master.close()


def test_a_driver_given_huge_but_valid_numbers_carries_on():
    master = driver_side.FakeMaster()
    drivers = []
    try:
        driver, scheduler = driver_side.start_driver(master, drivers)
        peer, _ = master.subscribe(heartbeat=1e308)                 # its deadlines become infinite, not errors
        scheduler.wait_for("registered")
        top = driver_side.offer("top")
        top = type(top)(top.id, top.agent_id, top.hostname, R(f"cpus:{MAX_QUANTITY};mem:{MAX_QUANTITY}"), {})
        master.send(peer, m.Offers([top, top]))
        (offers,) = scheduler.wait_for("resource_offers")
        assert Resources.sum(o.resources for o in offers).get("cpus") == 2 * MAX_QUANTITY
        driver.revive_offers()
        master.expect(m.Revive)                                     # the loop still runs
        assert driver.status is DriverStatus.RUNNING
    finally:
        for driver in drivers:
            driver.abort()
            driver.join(10)
        master.close()


# ------------------------------------------- an agent given hostile resources
def run_task_frame(resources, task_id="evil"):
    return msgpack.packb({"v": 1, "type": "RUN_TASK", "framework": {"name": "fw", "id": "fw-1"},
                          "task": {"task_id": task_id, "agent_id": "agent-1", "command": "true",
                                   "resources": resources}}, use_bin_type=True)


def test_an_agent_given_hostile_resources_by_its_master_logs_them_and_keeps_its_tasks(tmp_path, caplog):
    master = FakeMaster()
    agent = None
    try:
        agent = agent_side.AgentRuntime(AgentSettings(master=master.address, resources="cpus:2;mem:512;disk:100",
                                                      hostname="target", work_dir=tmp_path / "target")).start()
        master.register()
        master.send(m.RunTask(agent_side.FW, agent_side.task("keeper", "sleep 30")))
        assert [s.state for s in (master.update("keeper"), master.update("keeper"))] == ["TASK_STARTING",
                                                                                          "TASK_RUNNING"]
        for resources in HOSTILE_RESOURCES:
            master.server.send_frame(master.peer, run_task_frame(resources))
        master.send(m.Ping("agent-1"))
        master.expect(m.Pong)                                      # alive, and reading
        assert [t.task_id for t in agent.core.tasks()] == ["keeper"]
        assert sum("bad frame from the master" in r.getMessage() for r in caplog.records) == len(HOSTILE_RESOURCES)
        master.send(m.KillTask("fw-1", "keeper"))
        assert master.updates_until_terminal("keeper")[-1].state == "TASK_KILLED"
    finally:
        if agent is not None:
            agent.stop()
        master.close()
