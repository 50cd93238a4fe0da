"""Users' own traces (docs/simulate.rst, "Your own trace"): a good file
replays, a bad one is refused with an error naming the file and the row."""

from __future__ import annotations

import json

import pytest

from mesoslike.sim.traces import load_workload_file
from mesoslike.sim.workload import TraceError

pytestmark = pytest.mark.timeout(60)

AGENTS = "id,resources\nn1,cpus:4;mem:4096\nn2,cpus:4;mem:4096\n"
TASKS_HEADER = "id,class,arrival,duration,resources\n"
GOOD_TASK = "t1,batch,0,10,cpus:1;mem:512\n"


def write(tmp_path, tasks: str, agents: str = AGENTS):
    (tmp_path / "agents.csv").write_text(agents)
    (tmp_path / "tasks.csv").write_text(tasks)
    return tmp_path


def test_a_good_csv_directory_loads(tmp_path):
    workload = load_workload_file(write(tmp_path, TASKS_HEADER + GOOD_TASK + "t2,web,5,,cpus:2;mem:1024\n"))
    assert [a.agent_id for a in workload.agents] == ["n1", "n2"]
    assert [(t.task_id, t.framework_id, t.arrival, t.duration) for t in workload.tasks] == [
        ("t1", "batch", 0.0, 10.0), ("t2", "web", 5.0, None)]


@pytest.mark.parametrize("tasks, expected", [
    # a missing column names the file and the columns
    ("id,class,arrival,resources\nt1,batch,0,cpus:1;mem:512\n", "tasks.csv: missing columns"),
    # a negative duration names the row (line 3: the header is line 1)
    (TASKS_HEADER + GOOD_TASK + "t2,batch,1,-5,cpus:1;mem:512\n", "tasks.csv line 3 (task 't2')"),
    # an unknown resource kind names the row and the kind
    (TASKS_HEADER + GOOD_TASK + "t2,batch,1,5,cpus:1;fpgas:2\n", "unknown resource kind 'fpgas'"),
    # a negative arrival
    (TASKS_HEADER + "t1,batch,-1,5,cpus:1;mem:512\n", "tasks.csv line 2 (task 't1')"),
    # a duplicate id
    (TASKS_HEADER + GOOD_TASK + GOOD_TASK, "task id 't1' is used twice"),
])
def test_bad_rows_are_refused_naming_the_row(tmp_path, tasks, expected):
    with pytest.raises(TraceError) as info:
        load_workload_file(write(tmp_path, tasks))
    assert expected in str(info.value)


def test_a_bad_json_row_names_its_index(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"agents": [{"id": "n1", "resources": "cpus:4;mem:4096"}],
                                "tasks": [{"id": "t1", "class": "a", "arrival": 0, "duration": 1,
                                           "resources": "cpus:1"},
                                          {"id": "t2", "class": "a", "arrival": 0, "duration": -3,
                                           "resources": "cpus:1"}]}))
    with pytest.raises(TraceError) as info:
        load_workload_file(path)
    assert "t2" in str(info.value) and "tasks[1]" in str(info.value)
