"""Custom executors (docs/framework-api.rst, "Custom executors"): the
:class:`Executor` interface and the :class:`ExecutorDriver` that runs it in
a process an agent started for a task's
:class:`~mesoslike.wire.types.ExecutorInfo`, as mesos.interface / pymesos's.

::

    from mesoslike.executor import Executor, ExecutorDriver
    from mesoslike import TaskState, TaskStatus

    class Echo(Executor):
        def launch_task(self, driver, task):
            driver.send_status_update(TaskStatus(task.task_id, TaskState.RUNNING))
            driver.send_status_update(TaskStatus(task.task_id, TaskState.FINISHED))

        def framework_message(self, driver, data):
            driver.send_framework_message(b"echo: " + data)

    ExecutorDriver(Echo()).run()
"""

from mesoslike.driver.driver import DriverStatus
from mesoslike.executor.driver import Executor, ExecutorDriver
from mesoslike.wire.types import MAX_FRAMEWORK_MESSAGE, ExecutorInfo

__all__ = ["Executor", "ExecutorDriver", "ExecutorInfo", "DriverStatus", "MAX_FRAMEWORK_MESSAGE"]
