"""Agent recovery end to end (issue 15 §1, §2, §8): a real master, real
``mesoslike agent`` processes, real task processes under their supervisors,
a framework in this process.

Tasks wait for a ``go`` file in their sandbox before they end, so a test
decides when each ends without sleeping; they print their pid first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from agent_helpers import (Launcher, agent_state, alive, cgroup_bases, cgroups_below, cgroups_root,  # noqa: F401
                           kill_9, run_dir, task_pid, sandbox, spares_below, start_agent, supervisor_pid,
                           task_cgroups_below)
from e2e_helpers import REPO, child_env, cluster  # noqa: F401 (fixture)
from mesoslike import FrameworkInfo, TaskState
from mesoslike.agent.supervisor import cgroup_pids
from waiting import wait_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")]

WAIT_FOR_GO = "echo $$ > pid; while [ ! -e go ]; do sleep 0.05; done; echo done; exit {code}"
FRAMEWORK = FrameworkInfo("recovery", failover_timeout=120.0)
#: the master of the tests that restart an agent and expect it back with its tasks: 30 s of silence before
#: it marks the agent unreachable (the e2e clusters' 1.5 s is shorter than a restart on a loaded machine,
#: whose Python imports alone can take seconds; the restarts are what these tests are about)
PATIENT_MASTER = ("--max-agent-ping-timeouts", "60")
#: the agents' supervisors: each task under a supervisor of its own (in namespaces), cgroups alone under the
#: agent's shared supervisor, and the default (namespaces, under the shared supervisor through its init
#: helper): docs/agent.rst, "Recovery"
SUPERVISORS = pytest.mark.parametrize("isolation", [("--no-shared-supervisor",),
                                                    ("--isolation", "cgroups/cpu,cgroups/mem"), ()],
                                      ids=["own-supervisors", "shared-supervisor", "shared-supervisor-namespaces"])


def shared(isolation: tuple[str, ...]) -> bool:
    """Whether agents started with ``isolation`` run their tasks under their shared supervisor."""
    return "--no-shared-supervisor" not in isolation
BAD_STATES = {TaskState.LOST, TaskState.FAILED, TaskState.KILLED, TaskState.ERROR, TaskState.DROPPED,
              TaskState.GONE, TaskState.UNREACHABLE}


def launch(cluster, tasks, *agent_args, hostname="a1"):
    """An agent, a framework and its tasks (id -> exit code) running; returns (scheduler, agent proc, {task: pid})."""
    proc = start_agent(cluster, hostname, "cpus:2;mem:1024", *agent_args)
    scheduler = Launcher({task_id: WAIT_FOR_GO.format(code=code) for task_id, code in tasks.items()})
    cluster.driver(scheduler, "recovery", framework=FRAMEWORK)
    scheduler.wait(lambda: scheduler.running(*tasks), 20, "the tasks to run", cluster.diagnostics)
    pids = {t: task_pid(run_dir(cluster, hostname, scheduler.framework_id, t)) for t in tasks}
    return scheduler, proc, pids


def go(cluster, scheduler, task_id, hostname="a1"):
    (sandbox(cluster, hostname, scheduler.framework_id, task_id) / "go").touch()


def agent_tasks(cluster, hostname="a1"):
    return {t["id"]: (t["state"], t["pid"]) for t in agent_state(cluster, hostname)["tasks"]}


def master_tasks(cluster):
    return {t["id"]: t["state"] for f in cluster.state()["frameworks"] for t in f["tasks"]}


def damage_last_record_of(journal, task_id):
    """Flip a bit of the checksum of the journal's last record about ``task_id``."""
    from mesoslike.agent.checkpoint import _frames

    data = bytearray(journal.read_bytes())
    last = max(f.offset for f in _frames(bytes(data), journal) if f.key is not None and f.key[1] == task_id)
    data[last + 4] ^= 0x01
    journal.write_bytes(bytes(data))


def exit_recorded(cluster, scheduler, task_id, hostname="a1"):
    path = run_dir(cluster, hostname, scheduler.framework_id, task_id) / "exit.json"
    try:
        return json.loads(path.read_text()).get("ended")
    except (OSError, ValueError):
        return False


def shared_supervisor(cluster, scheduler, task_id, hostname="a1"):
    """Whether the task runs under its agent's shared supervisor (its supervisor.json says so)."""
    path = run_dir(cluster, hostname, scheduler.framework_id, task_id) / "supervisor.json"
    return json.loads(path.read_text()).get("shared", False)


# ------------------------------------------------------------------ recovery
@SUPERVISORS
def test_kill_9_of_the_agent_then_restart_same_tasks_same_pids_then_one_finished_each(cluster, cgroups_root,
                                                                                    isolation):
    cluster.start_master(*PATIENT_MASTER)
    scheduler, agent, pids = launch(cluster, {"t1": 0, "t2": 0}, "--cgroups-root", cgroups_root, *isolation)
    assert shared_supervisor(cluster, scheduler, "t1") == shared(isolation)
    before = agent_state(cluster, "a1")
    kill_9(agent)
    assert all(alive(pid) for pid in pids.values())           # the tasks live on without their agent
    started = time.monotonic()
    start_agent(cluster, "a1", "cpus:2;mem:1024", "--cgroups-root", cgroups_root, *isolation, wait=False)
    cluster.wait_until(lambda: agent_tasks(cluster) == {"t1": ("TASK_RUNNING", pids["t1"]),
                                                        "t2": ("TASK_RUNNING", pids["t2"])},
                       20, "the restarted agent to report the same tasks running with the same pids")
    recovered_in = time.monotonic() - started
    after = agent_state(cluster, "a1")
    assert after["id"] == before["id"]                          # the same agent id
    assert master_tasks(cluster) == {"t1": TaskState.RUNNING, "t2": TaskState.RUNNING}
    for task_id in ("t1", "t2"):
        go(cluster, scheduler, task_id)
    scheduler.wait(lambda: all(scheduler.terminal(t) for t in ("t1", "t2")), 20, "both to finish",
                   cluster.diagnostics)
    # once the agent has let go of them (terminal acknowledged), nothing more can come
    cluster.wait_until(lambda: agent_tasks(cluster) == {}, 20, "the agent to forget the acknowledged tasks")
    for task_id in ("t1", "t2"):
        states = scheduler.states(task_id)
        assert states.count(TaskState.FINISHED) == 1 and not BAD_STATES & set(states), states
        uuids = [s.uuid for s in scheduler.statuses(task_id)]
        assert len(uuids) == len(set(uuids)), uuids                  # nothing delivered twice
    # the tasks' cgroups went with them, or (emptied) wait in the agent's pool for its next tasks; spares
    # (made ahead, no task's) are empty and bounded
    assert [name for name in task_cgroups_below(cgroups_root) if ".pooled." not in name] == []
    # each pooled one named for the restarted agent (the tasks' own renamed as they went back into the pool):
    # no other agent's sweep takes it for a gone agent's
    assert all(name.partition(".pooled.")[2].startswith(f"{cluster.agents['a1'].popen.pid}-")
               for name in task_cgroups_below(cgroups_root))
    spares_below(cgroups_root)
    assert all(not cgroup_pids(os.path.join(base, name)) for base in cgroup_bases(cgroups_root)
               for name in cgroups_below(cgroups_root) if os.path.isdir(os.path.join(base, name)))
    print(f"recovery: the restarted agent reported both tasks running (same pids) {recovered_in:.2f}s after it "
          "was started")


@SUPERVISORS
def test_a_task_that_ends_while_its_agent_is_down_is_reported_with_its_real_exit_status(cluster, cgroups_root,
                                                                                       isolation):
    cluster.start_master(*PATIENT_MASTER)
    scheduler, agent, pids = launch(cluster, {"seven": 7, "zero": 0}, "--cgroups-root", cgroups_root, *isolation)
    kill_9(agent)
    go(cluster, scheduler, "seven")
    go(cluster, scheduler, "zero")
    wait_until(lambda: exit_recorded(cluster, scheduler, "seven") and exit_recorded(cluster, scheduler, "zero"),
               20, "the supervisors to record the exits")
    assert not alive(pids["seven"]) and not alive(pids["zero"])
    start_agent(cluster, "a1", "cpus:2;mem:1024", "--cgroups-root", cgroups_root, *isolation, wait=False)
    scheduler.wait(lambda: scheduler.terminal("seven") and scheduler.terminal("zero"), 20,
                   "the exits to reach the framework", cluster.diagnostics)
    (seven,) = scheduler.terminal("seven")
    (zero,) = scheduler.terminal("zero")
    assert (seven.state, seven.exit_code) == (TaskState.FAILED, 7) and "status 7" in seven.message
    assert (zero.state, zero.exit_code) == (TaskState.FINISHED, 0)
    assert TaskState.LOST not in scheduler.states("seven") + scheduler.states("zero")


def test_sigterm_stops_the_agent_and_its_tasks_keep_running_for_the_next_agent(cluster, cgroups_root):
    cluster.start_master(*PATIENT_MASTER)
    scheduler, agent, pids = launch(cluster, {"t1": 0}, "--cgroups-root", cgroups_root)
    agent.signal_group(signal.SIGTERM)
    assert agent.popen.wait(timeout=20) == 0
    assert alive(pids["t1"])
    assert scheduler.terminal("t1") == []                            # no TASK_FAILED (signal 15) any more
    start_agent(cluster, "a1", "cpus:2;mem:1024", "--cgroups-root", cgroups_root, wait=False)
    cluster.wait_until(lambda: agent_tasks(cluster) == {"t1": ("TASK_RUNNING", pids["t1"])}, 20, "recovery")
    go(cluster, scheduler, "t1")
    scheduler.wait(lambda: scheduler.terminal("t1"), 20, "t1 to finish", cluster.diagnostics)
    assert [s.state for s in scheduler.terminal("t1")] == [TaskState.FINISHED]


@pytest.mark.parametrize("command", [["agent", "decommission"], ["agent", "--drain"]])   # the old name still works
def test_decommission_kills_the_tasks_killed_and_the_master_removes_the_agent_at_once(cluster, cgroups_root,
                                                                                       command):
    # pings every 30 s: a removal within seconds can only come from the agent unregistering
    cluster.start_master("--ping-interval", "30")
    scheduler, agent, pids = launch(cluster, {"t1": 0, "t2": 0}, "--cgroups-root", cgroups_root)
    started = time.monotonic()
    drain = subprocess.run([sys.executable, "-m", "mesoslike", *command, "--work-dir",
                            str(cluster.work_root / "a1")], cwd=str(REPO), env=child_env(), capture_output=True,
                           text=True, timeout=60)
    assert drain.returncode == 0, drain.stderr
    assert "decommissioned: the agent has unregistered and exited" in drain.stdout
    deprecated = "`mesoslike agent --drain` is deprecated: it is `mesoslike agent decommission`"
    assert (deprecated in drain.stderr) == ("--drain" in command), drain.stderr
    assert agent.popen.wait(timeout=10) == 0
    cluster.wait_until(lambda: cluster.state()["agents"] == [], 5, "the master to remove the drained agent")
    removed_in = time.monotonic() - started
    for task_id, pid in pids.items():
        assert [s.state for s in scheduler.terminal(task_id)] == [TaskState.KILLED]
        assert "draining" in scheduler.terminal(task_id)[0].message
        assert not alive(pid)
    scheduler.wait(lambda: scheduler.of("agent_lost"), 5, "agent_lost")
    assert not (cluster.work_root / "a1" / "meta" / "agent.ckpt").exists()   # the next start is a new agent
    print(f"drain: both tasks TASK_KILLED and the agent removed by the master {removed_in:.2f}s after the drain")


def test_kill_9_of_the_agent_amid_a_stream_of_updates_loses_and_repeats_none(cluster, cgroups_root):
    """Checkpoints go to one journal, synced once a turn before the turn's
    updates are sent: a killed agent must still lose no update it sent and
    report none twice."""
    cluster.start_master(*PATIENT_MASTER)
    start_agent(cluster, "a1", "cpus:2;mem:2048", "--cgroups-root", cgroups_root)
    tasks = [f"t{i}" for i in range(100)]
    scheduler = Launcher(dict.fromkeys(tasks, "true"), resources="cpus:0.01;mem:8")
    cluster.driver(scheduler, "recovery", framework=FRAMEWORK)
    scheduler.wait(lambda: sum(bool(scheduler.terminal(t)) for t in tasks) >= 10, 30, "ten tasks to end",
                   cluster.diagnostics)
    kill_9(cluster.agents["a1"])
    start_agent(cluster, "a1", "cpus:2;mem:2048", "--cgroups-root", cgroups_root, wait=False)
    scheduler.wait(lambda: all(scheduler.terminal(t) for t in tasks), 60, "every task to end", cluster.diagnostics)
    statuses = scheduler.statuses()
    uuids = [s.uuid for s in statuses]
    assert len(uuids) == len(set(uuids)), "an update was delivered twice"
    ends = {}
    for task_id in tasks:
        (end,) = scheduler.terminal(task_id)      # exactly one end each
        ends[task_id] = end
        if TaskState.STARTING in scheduler.states(task_id):   # the agent had told of it: it knew it after
            assert end.state == TaskState.FINISHED or (end.state, end.reason) == (TaskState.FAILED,
                                                                                 "REASON_AGENT_RESTARTED"), end
    finished = sum(e.state == TaskState.FINISHED for e in ends.values())
    assert finished >= 10
    # every story told and acknowledged: nothing is left to recover
    from mesoslike.agent.checkpoint import CheckpointStore

    def nothing_left():
        checkpoints, errors = CheckpointStore(cluster.work_root / "a1").load_tasks()
        return not checkpoints and not errors
    wait_until(nothing_left, 20, "the journal to hold no task")
    print(f"kill -9 amid updates: {finished} finished, "
          f"{len(tasks) - finished} ended otherwise ({sorted({e.state for e in ends.values()})}), none twice")


# ------------------------------------------------------------------ faults
def test_a_corrupt_checkpoint_is_reported_by_name_and_every_other_task_is_recovered(cluster, cgroups_root):
    cluster.start_master(*PATIENT_MASTER)
    scheduler, agent, pids = launch(cluster, {"bad": 0, "good": 0}, "--cgroups-root", cgroups_root)
    kill_9(agent)
    journal = cluster.work_root / "a1" / "meta" / "tasks.journal"
    damage_last_record_of(journal, "bad")     # its latest checkpoint: what came before it may be stale
    start_agent(cluster, "a1", "cpus:2;mem:1024", "--cgroups-root", cgroups_root, wait=False)
    cluster.wait_until(lambda: agent_tasks(cluster) == {"good": ("TASK_RUNNING", pids["good"])}, 20,
                       "the good task recovered")
    errors = agent_state(cluster, "a1")["recovery_errors"]
    assert [e["path"] for e in errors] == [str(journal)] and "corrupt" in errors[0]["problem"]
    assert f"task {scheduler.framework_id}/bad is not recovered" in errors[0]["problem"]
    wait_until(lambda: not alive(pids["bad"]), 10, "the unmanageable task to be killed")
    scheduler.wait(lambda: scheduler.terminal("bad"), 20, "the master to report the unrecovered task",
                   cluster.diagnostics)
    assert scheduler.terminal("bad")[0].state == TaskState.LOST
    assert scheduler.terminal("good") == [] and master_tasks(cluster)["good"] == TaskState.RUNNING
    go(cluster, scheduler, "good")
    scheduler.wait(lambda: scheduler.terminal("good"), 20, "good to finish", cluster.diagnostics)


@SUPERVISORS
def test_kill_9_of_a_supervisor_fails_its_task_saying_the_executor_died(cluster, cgroups_root, isolation):
    cluster.start_master()
    scheduler, agent, pids = launch(cluster, {"orphan": 0}, "--cgroups-root", cgroups_root, *isolation)
    supervisor = supervisor_pid(run_dir(cluster, "a1", scheduler.framework_id, "orphan"))
    assert shared_supervisor(cluster, scheduler, "orphan") == shared(isolation)
    os.kill(supervisor, signal.SIGKILL)
    scheduler.wait(lambda: scheduler.terminal("orphan"), 20, "the task to end", cluster.diagnostics)
    (ended,) = scheduler.terminal("orphan")
    assert (ended.state, ended.reason) == (TaskState.FAILED, "REASON_EXECUTOR_TERMINATED")
    assert "executor" in ended.message and "died" in ended.message
    wait_until(lambda: not alive(pids["orphan"]), 10, "the task to be killed with its supervisor")
    wait_until(lambda: task_cgroups_below(cgroups_root) == [], 10, "its cgroups to be removed")
    spares_below(cgroups_root)


def test_an_agent_marked_unreachable_while_it_was_down_kills_the_task_its_framework_was_told_is_lost(
        cluster, cgroups_root):
    cluster.start_master()   # pings every 0.5 s, 3 missed: unreachable 1.5 s after it died
    scheduler, agent, pids = launch(cluster, {"t1": 0}, "--cgroups-root", cgroups_root)
    old_id = agent_state(cluster, "a1")["id"]
    kill_9(agent)
    scheduler.wait(lambda: scheduler.terminal("t1"), 20, "the master to write the task off", cluster.diagnostics)
    assert scheduler.terminal("t1")[0].state == TaskState.LOST
    start_agent(cluster, "a1", "cpus:2;mem:1024", "--cgroups-root", cgroups_root, wait=False)
    wait_until(lambda: not alive(pids["t1"]), 20, "the recovered task to be killed")
    # an unreachable agent comes back under its id (docs/reliability.rst, "Partitions")
    cluster.wait_until(lambda: [a["id"] for a in cluster.state()["agents"]] == [old_id], 20,
                       "the agent to re-register under its id")
    assert [s.state for s in scheduler.statuses("t1")][-1] == TaskState.LOST


def test_recover_cleanup_kills_what_an_earlier_agent_left_and_exits(cluster, cgroups_root):
    cluster.start_master()
    scheduler, agent, pids = launch(cluster, {"t1": 0}, "--cgroups-root", cgroups_root)
    kill_9(agent)
    cleanup = subprocess.run([sys.executable, "-m", "mesoslike", "agent", "--master", cluster.address,
                              "--hostname", "a1", "--work-dir", str(cluster.work_root / "a1"), "--recover", "cleanup",
                              "--cgroups-root", cgroups_root], cwd=str(REPO), env=child_env(), capture_output=True,
                             text=True, timeout=60)
    assert cleanup.returncode == 0, cleanup.stderr
    assert not alive(pids["t1"])
    assert not (cluster.work_root / "a1" / "meta" / "agent.ckpt").exists()
    assert cgroups_below(cgroups_root) == []   # the killed agent's spares and pool too


@SUPERVISORS
def test_a_supervisor_whose_agent_does_not_come_back_kills_its_task(cluster, cgroups_root, isolation):
    cluster.start_master("--ping-interval", "30")
    scheduler, agent, pids = launch(cluster, {"t1": 0}, "--cgroups-root", cgroups_root, "--recovery-timeout", "1s",
                                    *isolation)
    kill_9(agent)
    wait_until(lambda: not alive(pids["t1"]), 20, "the supervisor to kill its task after the recovery timeout")
    start_agent(cluster, "a1", "cpus:2;mem:1024", "--cgroups-root", cgroups_root, *isolation, wait=False)
    scheduler.wait(lambda: scheduler.terminal("t1"), 20, "the task's end to be reported", cluster.diagnostics)
    (ended,) = scheduler.terminal("t1")
    assert (ended.state, ended.reason) == (TaskState.FAILED, "REASON_EXECUTOR_REREGISTRATION_TIMEOUT")
    assert "--recovery-timeout" in ended.message


def test_a_second_agent_on_the_same_work_dir_is_refused(cluster, cgroups_root):
    cluster.start_master()
    start_agent(cluster, "a1", "cpus:1;mem:256", "--cgroups-root", cgroups_root)
    second = subprocess.run([sys.executable, "-m", "mesoslike", "agent", "--master", cluster.address, "--hostname",
                             "a1", "--work-dir", str(cluster.work_root / "a1")], cwd=str(REPO), env=child_env(),
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 1 and "another agent" in second.stderr


def test_an_agent_whose_reservations_checkpoint_is_damaged_does_not_start_and_says_which_file(cluster):
    """Starting without the checkpointed dynamic reservations would drop them for good (the master takes a
    re-registering agent's word), so the agent stops and names the file; the file is left for the operator."""
    cluster.start_master()
    meta = cluster.work_root / "a1" / "meta"
    meta.mkdir(parents=True)
    (meta / "resources.ckpt").write_bytes(b"\x93\x01not a checkpoint")
    started = subprocess.run([sys.executable, "-m", "mesoslike", "agent", "--master", cluster.address, "--hostname",
                              "a1", "--work-dir", str(cluster.work_root / "a1")], cwd=str(REPO), env=child_env(),
                             capture_output=True, text=True, timeout=60)
    assert started.returncode == 1, started.stderr
    assert "resources.ckpt cannot be read" in started.stderr and "Remove the file" in started.stderr
    assert (meta / "resources.ckpt").exists()
    assert cluster.state()["agents"] == []
