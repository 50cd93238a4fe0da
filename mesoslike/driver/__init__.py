"""The level-2 framework API (docs/framework-api.rst): implement a :class:`Scheduler`,
run it with a :class:`SchedulerDriver`.

The driver is layered like the rest of mesoslike: :mod:`.core` is the pure,
clock-driven state machine of the framework side of the protocol;
:mod:`.driver` is the thread and socket around it. ``docs/framework-api.rst``
is the user guide.
"""

from mesoslike.driver.core import Backoff, DriverCore, SubscriptionState
from mesoslike.driver.driver import DriverStatus, Scheduler, SchedulerDriver

__all__ = ["Scheduler", "SchedulerDriver", "DriverStatus", "Backoff", "DriverCore", "SubscriptionState"]
