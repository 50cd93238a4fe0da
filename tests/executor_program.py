"""A custom executor the tests of tests/test_executors.py run (as the
process an agent starts for an ExecutorInfo). What it does with a task is
its ``command``:

- ``finish``: TASK_RUNNING, then TASK_FINISHED;
- ``hold``: TASK_RUNNING, then nothing until ``kill_task`` (TASK_KILLED);
- ``exit N``: TASK_RUNNING, then the process exits with status N;
- ``flood N PATH``: TASK_RUNNING, then, once file PATH exists, N more
  TASK_RUNNING (messages ``n 0`` .. ``n N-1``) and TASK_FINISHED; each
  ``error`` callback (an update the agent refused) adds a line to
  ``PATH.errors``.

- ``data N``: TASK_RUNNING, then TASK_FINISHED whose ``data`` is
  :func:`pattern` of N bytes.
- ``last N``: TASK_RUNNING, then from another thread (as a program's main
  thread) TASK_FINISHED with :func:`pattern` of N bytes, ``stop()`` and at
  once ``os._exit(3)``.

Framework messages: ``ping`` is answered ``pong <executor id> <ident>``;
``echo:...`` is sent back as it came; ``exit`` stops the driver (the
process exits 0). Each TASK_RUNNING's
message is ``pid <ident>``: tests tell one process from another by it.
``<ident>`` is ``<pid>@<inode of its PID namespace>``: the executor runs in
a PID namespace of its own (docs/containers.rst), where its pid is 2 like
every other executor's; ``e2e_helpers.host_pid`` finds the host's pid.
"""

import os
import sys
import threading
import time

from mesoslike import TaskState, TaskStatus
from mesoslike.executor import Executor, ExecutorDriver

IDENT = f"{os.getpid()}@{os.stat('/proc/self/ns/pid').st_ino}"


def pattern(size: int) -> bytes:
    """``size`` bytes every one of which says where it is (NUL bytes too)."""
    return (bytes(range(256)) * (size // 256 + 1))[:size]


class TestExecutor(Executor):
    def __init__(self) -> None:
        self.held: set[str] = set()
        self.done = threading.Event()
        self.errors_file = ""

    def registered(self, driver, executor_info, framework_info, agent_info):
        driver.send_framework_message(f"registered {executor_info.executor_id} {IDENT}".encode())

    def reregistered(self, driver, agent_info):
        driver.send_framework_message(f"reregistered {driver.executor_id} {IDENT}".encode())

    def launch_task(self, driver, task):
        driver.send_status_update(TaskStatus(task.task_id, TaskState.RUNNING, message=f"pid {IDENT}"))
        words = task.command.split()
        if words[:1] == ["finish"]:
            driver.send_status_update(TaskStatus(task.task_id, TaskState.FINISHED, message="done"))
        elif words[:1] == ["hold"]:
            self.held.add(task.task_id)
        elif words[:1] == ["exit"]:
            os._exit(int(words[1]))
        elif words[:1] == ["data"]:
            driver.send_status_update(TaskStatus(task.task_id, TaskState.FINISHED, data=pattern(int(words[1]))))
        elif words[:1] == ["last"]:
            threading.Thread(target=self.last, args=(driver, task.task_id, int(words[1]))).start()
        elif words[:1] == ["flood"]:
            self.errors_file = words[2] + ".errors"
            threading.Thread(target=self.flood, args=(driver, task.task_id, int(words[1]), words[2]),
                             daemon=True).start()

    def last(self, driver, task_id, size):
        driver.send_status_update(TaskStatus(task_id, TaskState.FINISHED, data=pattern(size)))
        driver.stop()
        os._exit(3)

    def flood(self, driver, task_id, count, trigger):
        while not os.path.exists(trigger):
            time.sleep(0.02)
        for i in range(count):
            driver.send_status_update(TaskStatus(task_id, TaskState.RUNNING, message=f"n {i}"))
        driver.send_status_update(TaskStatus(task_id, TaskState.FINISHED, message="flooded"))

    def error(self, driver, message):
        if self.errors_file:
            with open(self.errors_file, "a") as errors:
                errors.write(message.replace("\n", " ") + "\n")

    def kill_task(self, driver, task_id):
        if task_id in self.held:
            self.held.discard(task_id)
            driver.send_status_update(TaskStatus(task_id, TaskState.KILLED, message="killed by the executor"))

    def framework_message(self, driver, data):
        if data == b"ping":
            driver.send_framework_message(f"pong {driver.executor_id} {IDENT}".encode())
        elif data.startswith(b"echo:"):
            driver.send_framework_message(data)
        elif data == b"exit":
            driver.stop()

    def shutdown(self, driver):
        for task_id in sorted(self.held):
            driver.send_status_update(TaskStatus(task_id, TaskState.KILLED, message="shut down"))
        self.held.clear()


if __name__ == "__main__":
    status = ExecutorDriver(TestExecutor()).run()
    sys.exit(0 if status.value == "DRIVER_STOPPED" else 1)
