"""A custom executor written only against pymesos's public API (pymesos
0.3.15 from PyPI), for tests/data/pymesos_v1_scheduler.py: on pymesos's
``MesosExecutorDriver`` it speaks a mesoslike agent's v1 executor API. It
runs its one task: TASK_RUNNING with data, waits for the scheduler's ping,
answers pong, reports TASK_FINISHED with data, a message, a reason and a
health verdict, then ends with exit status 3 (the scheduler's executorLost
hears of it)."""

import sys
import threading

from pymesos import Executor, MesosExecutorDriver, decode_data, encode_data

RUNNING_DATA = b"\x00started\x00\xff\xfe"
FINISHED_DATA = b"result:\x00\x01\x02" + bytes(range(256))
PING, PONG = b"ping\x00", b"pong\x00\xff"


class Once(Executor):
    def __init__(self):
        self.task_id = None
        self.finished = threading.Event()

    def launchTask(self, driver, task):
        self.task_id = task["task_id"]
        assert decode_data(task["data"]) == b"task data\x00", task.get("data")
        driver.sendStatusUpdate(dict(task_id=self.task_id, state="TASK_RUNNING", data=encode_data(RUNNING_DATA)))

    def frameworkMessage(self, driver, message):
        if decode_data(message) != PING:
            return
        driver.sendFrameworkMessage(encode_data(PONG))
        driver.sendStatusUpdate(dict(task_id=self.task_id, state="TASK_FINISHED", data=encode_data(FINISHED_DATA),
                                     message="done \u00e9\u4e2d", reason="REASON_TASK_CHECK_STATUS_UPDATED",
                                     healthy=True))
        self.finished.set()


if __name__ == "__main__":
    executor = Once()
    driver = MesosExecutorDriver(executor)
    driver.start()
    executor.finished.wait(120)
    driver.stop()
    sys.exit(3)
