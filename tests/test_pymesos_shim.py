"""What the pymesos shim (mesoslike.compat.pymesos) gained for real pymesos
frameworks (docs/framework-api.rst, "pymesos compatibility"): a raising
callback aborts the driver as pymesos's does (``aborted``, the exception
raised again from ``run()``/``join()``), ``stream_id``, ``change_master``,
``updateFramework``."""

from __future__ import annotations

import threading

import pytest

from e2e_helpers import cluster, wait_for  # noqa: F401 (cluster: a fixture)
from mesoslike import DriverStatus
from mesoslike.compat import pymesos as shim

pytestmark = pytest.mark.timeout(120)


def shim_driver(cluster, sched, framework: dict) -> shim.MesosSchedulerDriver:  # noqa: F811
    cluster.start_local("--agents", "1", "--resources", "cpus:1;mem:256")
    driver = shim.MesosSchedulerDriver(sched, framework, cluster.address.removeprefix("tcp://"),
                                       key=cluster.client_key, master_key=cluster.master_key, stop_timeout=5.0)
    cluster.drivers.append(driver)   # stopped at clean-up
    return driver


class Raising(shim.Scheduler):
    def __init__(self, exception: BaseException) -> None:
        self.registered_event = threading.Event()
        self.exception = exception

    def registered(self, driver, frameworkId, masterInfo):
        self.registered_event.set()

    def resourceOffers(self, driver, offers):
        raise self.exception


# SystemExit too: before, the driver stopped (DRIVER_STOPPED) and the program exited 0 whatever the code
@pytest.mark.parametrize("exception", [LookupError("no room for my tasks"), SystemExit(3)], ids=["error", "exit"])
def test_a_raising_callback_aborts_the_shim_and_run_raises_it(cluster, exception):
    sched = Raising(exception)
    driver = shim_driver(cluster, sched, {"name": "raising", "failover_timeout": 30})
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["status"] = driver.run()
        except BaseException as exc:   # what a pymesos program's main thread sees
            outcome["raised"] = exc

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    assert sched.registered_event.wait(30)
    runner.join(30)
    assert outcome.get("raised") is exception, outcome   # a program's run() ends with it: exit status 1, or 3
    assert driver.aborted and driver.status is DriverStatus.ABORTED and driver.stream_id is None
    # aborted, not torn down: the framework waits for its failover timeout
    (framework,) = cluster.state()["frameworks"]
    assert framework["name"] == "raising"


class Quiet(shim.Scheduler):
    def __init__(self) -> None:
        self.registered_event = threading.Event()

    def registered(self, driver, frameworkId, masterInfo):
        self.registered_event.set()


def test_update_framework_stream_id_and_change_master(cluster):
    sched = Quiet()
    driver = shim_driver(cluster, sched, {"name": "before", "failover_timeout": 0})
    assert driver.stream_id is None
    driver.start()
    assert sched.registered_event.wait(30)
    wait_for(lambda: driver.stream_id, 10, "a stream id while subscribed")
    assert not driver.aborted
    driver.change_master(cluster.address.removeprefix("tcp://"))   # the driver follows the leader itself
    driver.updateFramework({"name": "after", "failover_timeout": 5,
                            "labels": {"labels": [{"key": "k", "value": "v"}]}})
    wait_for(lambda: cluster.state()["frameworks"][0]["name"] == "after", 10, "the new name in /state")
    (framework,) = cluster.state()["frameworks"]
    assert framework["failover_timeout"] == 5 and framework["labels"] == [{"key": "k", "value": "v"}]
    assert driver.stop() is DriverStatus.STOPPED
