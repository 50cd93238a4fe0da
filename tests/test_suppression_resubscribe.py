"""A scheduler and its master agree on suppression across re-subscriptions
(the Fuxi restart stall): as in Mesos, every SUBSCRIBE states the roles the
framework wants no offers for (``suppressed_roles``) and the master sets the
framework's suppression to exactly that — a role left out is revived — so a
scheduler that restarts, fails over or reconnects never inherits its
predecessor's SUPPRESS. The driver keeps a suppress or revive made while it
is not subscribed (before ``start`` too) for its next SUBSCRIBE, and
``/state`` lists each framework's ``suppressed_roles``."""

import logging
import random

import pytest

from mesoslike.clock import FakeClock
from mesoslike.driver import DriverStatus, SchedulerDriver
from mesoslike.driver.core import DriverCore, SendToMaster
from mesoslike.master.state import state_json
from mesoslike.wire import FrameworkInfo
from mesoslike.wire import messages as m
from test_driver import FakeMaster, RecordingScheduler, offer
from test_master_core import FW, FW2, Harness, only

pytestmark = pytest.mark.timeout(60)


def state_of(h, framework_id):
    (framework,) = [f for f in state_json(h.core)["frameworks"] if f["id"] == framework_id]
    return framework


def suppressed_framework(h, role="*"):
    """A framework in ``role`` that suppressed offers, then went away (its scheduler killed)."""
    fid = h.subscribe(FW, role=role, failover_timeout=60.0)
    h.register_agent()
    assert h.offers(h.tick())
    h.send(FW, m.Suppress(fid))
    assert state_of(h, fid)["suppressed_roles"] == [role]
    h.tick(advance=60.0)   # silent for longer than the framework timeout: disconnected
    assert not h.core.frameworks[fid].connected
    return fid


# ----------------------------------------------------------------- master
def test_a_framework_re_subscribing_without_suppressed_roles_gets_offers_again():
    """The stall: the restarted scheduler believes it is not suppressed (it
    never said SUPPRESS); the master kept its predecessor's SUPPRESS and sent
    nothing, for ever."""
    h = Harness()
    fid = suppressed_framework(h, role="analytics")
    out = h.send(FW2, m.Subscribe(FrameworkInfo("demo", role="analytics", id=fid, failover_timeout=60.0)))
    assert only(out, m.Subscribed, FW2)[0].resubscribed
    assert h.offers(h.tick(advance=1.0), FW2)
    assert state_of(h, fid)["suppressed_roles"] == []


def test_a_framework_re_subscribing_suppressed_stays_suppressed_until_it_revives():
    h = Harness()
    fid = suppressed_framework(h)
    h.send(FW2, m.Subscribe(FrameworkInfo("demo", id=fid, failover_timeout=60.0), suppressed_roles=["*"]))
    assert not h.offers(h.tick(advance=1.0), FW2)
    assert state_of(h, fid)["suppressed_roles"] == ["*"]
    h.send(FW2, m.Revive(fid))
    assert h.offers(h.tick(advance=1.0), FW2)
    assert state_of(h, fid)["suppressed_roles"] == []


def test_a_new_framework_may_subscribe_suppressed():
    h = Harness()
    h.register_agent()
    out = h.send(FW, m.Subscribe(FrameworkInfo("demo"), suppressed_roles=["*"]))
    (subscribed,) = only(out, m.Subscribed, FW)
    assert not h.offers(h.tick(advance=1.0))
    assert state_of(h, subscribed.framework_id)["suppressed_roles"] == ["*"]


def test_a_suppressed_role_that_is_not_the_frameworks_is_refused():
    h = Harness()
    (error,) = only(h.send(FW, m.Subscribe(FrameworkInfo("demo", role="eng"), suppressed_roles=["prod"])), m.Error)
    assert error.fatal and "suppressed role 'prod' is not the framework's role 'eng'" in error.message
    assert h.core.frameworks == {}


# ----------------------------------------------------------------- driver
def test_the_driver_keeps_a_suppress_made_while_disconnected_for_its_next_subscribe():
    core = DriverCore(FrameworkInfo("demo", role="eng"), FakeClock(), random.Random(1))
    assert core.suppress_offers() == []          # not started: nothing to send, but not forgotten
    (subscribe,) = [c.message for c in core.start() if isinstance(c, SendToMaster)]
    assert subscribe.suppressed_roles == ["eng"]
    core.receive(m.Subscribed("fw-1", 1.0, m.MasterInfo("m", "tcp://127.0.0.1:1")))
    assert [c.message for c in core.revive_offers()] == [m.Revive("fw-1")]
    core.master_changed()
    assert core.suppress_offers() == []          # subscribing again
    core.revive_offers()
    (again,) = [c.message for c in core.master_changed() if isinstance(c, SendToMaster)]
    assert again.suppressed_roles == [] and again.framework.id == "fw-1"


def test_suppress_before_start_is_sent_in_the_first_subscribe_without_a_warning(caplog):
    master = FakeMaster()
    scheduler = RecordingScheduler()
    driver = SchedulerDriver(scheduler, FrameworkInfo(name="restarted", failover_timeout=60.0), master.address)
    try:
        with caplog.at_level(logging.WARNING):
            assert driver.suppress_offers() is DriverStatus.NOT_STARTED
        assert not [r for r in caplog.records if "ignored" in r.getMessage()]
        driver.start()
        peer, subscribe = master.subscribe()
        assert subscribe.suppressed_roles == ["*"]
        scheduler.wait_for("registered")
        master.send(peer, m.Offers([offer()]))   # the master decides; the driver only says what it wants
        scheduler.wait_for("resource_offers")
    finally:
        driver.abort()
        driver.join(10)
        master.close()
