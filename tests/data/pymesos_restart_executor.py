"""A custom executor on pymesos 0.3.15 (from PyPI, unmodified) for
tests/test_pymesos_v1.py's agent restart: it runs its one task, echoes the
scheduler's messages, and on the message ``finish`` reports TASK_FINISHED
with data. MESOS_CHECKPOINT is set by the agent, so pymesos waits for a
restarted agent (reconnecting at growing intervals) instead of ending."""

import sys

from pymesos import Executor, MesosExecutorDriver, decode_data, encode_data


class Echo(Executor):
    def __init__(self):
        self.task_id = None

    def launchTask(self, driver, task):
        self.task_id = task["task_id"]
        driver.sendStatusUpdate(dict(task_id=self.task_id, state="TASK_RUNNING"))

    def reregistered(self, driver, agent_info):
        print("reregistered with", agent_info.get("hostname"), file=sys.stderr, flush=True)

    def frameworkMessage(self, driver, message):
        data = decode_data(message)
        driver.sendFrameworkMessage(encode_data(b"echo:" + data))
        if data == b"finish":
            driver.sendStatusUpdate(dict(task_id=self.task_id, state="TASK_FINISHED",
                                         data=encode_data(b"after the restart\x00")))
            driver.stop()


if __name__ == "__main__":
    MesosExecutorDriver(Echo()).run()
