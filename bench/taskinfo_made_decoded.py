#!/usr/bin/env python3
"""A TaskInfo made by a call, replaced, and decoded in a RUN_TASK frame (us each, best of five): the
control plane's per-task value, for an A/B of two trees run one after the other with PYTHONPATH set to each::

    for tree in /var/tmp/base $PWD; do PYTHONPATH=$tree python bench/taskinfo_made_decoded.py; done
"""
import json
import timeit

from mesoslike.resources import Resources
from mesoslike.wire import TaskInfo, encode, decode
from mesoslike.wire import messages as m
from mesoslike.wire.types import FrameworkInfo
r = Resources.parse("cpus:0.1;mem:32")
t = TaskInfo("task-1", "agent-1", "sleep 1000", r)
run = encode(m.RunTask(FrameworkInfo("fw", id="fw-1"), t))
n = 200000
out = {}
out["make"] = min(timeit.repeat(lambda: TaskInfo("task-1", "agent-1", "sleep 1000", r), number=n, repeat=5)) / n * 1e6
out["replace"] = min(timeit.repeat(lambda: t.replace(task_id="t2"), number=n, repeat=5)) / n * 1e6
out["decode_run_task"] = min(timeit.repeat(lambda: decode(run), number=n, repeat=5)) / n * 1e6
print(json.dumps({k: round(v, 3) for k, v in out.items()}))
