"""Isolation (issue 15 §4) against the machine's real cgroups: limits are
written, a task above its memory limit ends TASK_FAILED with
REASON_CONTAINER_LIMITATION_MEMORY naming the limit, usage is measured,
processes that leave their group are caught, and every cgroup goes when its
task ends. These tests do not skip under CI=true (CI runs as root on a
machine with writable cgroups); elsewhere they skip without cgroups.

The posix fallback and the v2 layout are checked on a fake /proc and a
fake cgroup tree (this machine's v2 hierarchy has no controllers).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from agent_helpers import (Launcher, master, agent_state, cgroup_bases, cgroups_below, cgroups_root,  # noqa: F401
                           kill_9, read_pid_file, require_cgroups, spares_below, start_agent, task_cgroups_below)
from e2e_helpers import cluster, http_get  # noqa: F401 (fixture)
from environment import unavailable
from mesoslike.agent.executor import sandbox_path
from mesoslike.agent.supervisor import cgroup_pids
from mesoslike.agent.isolation import (CgroupsV2Isolator, Container, Isolator, PosixIsolator, cgroup_mounts,
                                       select_isolator)
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.errors import ConfigError
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import FrameworkInfo, TaskInfo, TaskState
from waiting import wait_until

pytestmark = [pytest.mark.timeout(90), pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cgroups")]

R = Resources.parse
MB = 1024 * 1024
FW = FrameworkInfo(name="demo", id="fw-1")
#: allocates 200 MB and holds it: far above a 64 MB limit
HOG = f"{sys.executable} -I -S -c 'x = bytearray(200 * 1024 * 1024); import time; time.sleep(60)'"


@pytest.fixture
def agent(tmp_path, master, cgroups_root):
    require_cgroups()
    made = []

    def make(**kwargs):
        runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:2;mem:1024;disk:100",
                                             hostname="iso", work_dir=tmp_path / "iso", cgroups_root=cgroups_root,
                                             **kwargs)).start()
        made.append(runtime)
        master.register()
        return runtime
    make.made = made   # type: ignore[attr-defined]
    yield make
    for runtime in made:
        runtime.stop()


def run(master, task_id, command, resources="cpus:0.5;mem:64", grace=1.0):
    master.send(m.RunTask(FW, TaskInfo(task_id, "agent-1", command, R(resources), kill_grace_period=grace)))
    assert master.update(task_id).state == TaskState.STARTING


def cgroup_of(runtime, task_id):
    wait_until(lambda: runtime.executor.pid("fw-1", task_id), 10, "the task's pid")
    return runtime.executor.container("fw-1", task_id).cgroups


def read(directory, name):
    return Path(directory, name).read_text().strip()


# ------------------------------------------------------------ limits
def test_a_task_above_its_memory_limit_fails_with_the_memory_limitation_naming_the_limit(master, agent,
                                                                                          cgroups_root):
    agent()
    run(master, "hog", HOG)
    statuses = master.updates_until_terminal("hog", timeout=30)
    failed = statuses[-1]
    assert (failed.state, failed.reason) == (TaskState.FAILED, "REASON_CONTAINER_LIMITATION_MEMORY")
    assert "64 MB" in failed.message and "mem:64" in failed.message
    # an OOM kill's cgroups go (no other task gets them); what an idle agent holds besides is empty spares
    wait_until(lambda: task_cgroups_below(cgroups_root) == [], 10, "its cgroups to be removed")
    spares_below(cgroups_root)


def test_a_task_whose_child_is_oom_killed_but_runs_on_is_killed_for_the_limitation(master, agent):
    runtime = agent()
    run(master, "hog", f"{HOG}; echo survived; sleep 60")   # the shell outlives its OOM-killed child
    statuses = master.updates_until_terminal("hog", timeout=30)
    assert (statuses[-1].state, statuses[-1].reason) == (TaskState.FAILED, "REASON_CONTAINER_LIMITATION_MEMORY")
    assert TaskState.RUNNING in [s.state for s in statuses]
    assert "mem:64" in statuses[-1].message
    assert runtime.executor.running() == []


def test_limits_are_written_and_the_task_runs_inside_its_cgroups(master, agent, cgroups_root):
    runtime = agent(cgroups_cpu_quota=True)
    run(master, "limited", "sleep 60", resources="cpus:0.5;mem:96")
    assert master.update("limited").state == TaskState.RUNNING
    groups = cgroup_of(runtime, "limited")
    pid = runtime.executor.pid("fw-1", "limited")
    if runtime.isolator.name == "cgroups-v1":
        assert int(read(groups["memory"], "memory.limit_in_bytes")) == 96 * 1024 * 1024
        assert int(read(groups["cpu"], "cpu.shares")) == 512
        assert int(read(groups["cpu"], "cpu.cfs_quota_us")) == 50_000
        assert int(read(groups["cpu"], "cpu.cfs_period_us")) == 100_000
    else:
        assert int(read(groups["unified"], "memory.max")) == 96 * 1024 * 1024
        assert read(groups["unified"], "cpu.max") == "50000 100000"
    for directory in set(groups.values()):
        assert pid in [int(p) for p in read(directory, "cgroup.procs").split()]
    supervisor = json.loads((runtime.executor.work_dir / "meta" / "tasks" / "fw-1" / "limited" /
                             "supervisor.json").read_text())["pid"]
    for directory in set(groups.values()):     # the supervisor stays outside: its memory is not the task's
        assert supervisor not in [int(p) for p in read(directory, "cgroup.procs").split()]
    master.send(m.KillTask("fw-1", "limited"))
    assert master.update("limited").state == TaskState.KILLED
    # emptied, and kept for a later task (the pool) until the agent stops
    wait_until(lambda: all(not cgroup_pids(d) for d in groups.values()), 10, "its cgroups to be emptied")
    runtime.stop()
    assert cgroups_below(cgroups_root) == []


def test_a_pooled_cgroup_is_handed_out_only_empty_and_with_the_new_tasks_limits(master, agent, cgroups_root):
    runtime = agent()
    if not runtime.isolator.pool_size:
        unavailable("this machine's cgroups (v2) keep no pool")
    run(master, "first", "sleep 60", resources="cpus:0.5;mem:96")
    assert master.update("first").state == TaskState.RUNNING
    first = cgroup_of(runtime, "first")
    first_pids = cgroup_pids(first["memory"])
    master.send(m.KillTask("fw-1", "first"))
    assert master.update("first").state == TaskState.KILLED
    wait_until(lambda: runtime.isolator._pool, 10, "its cgroups back in the pool")
    run(master, "second", "sleep 60", resources="cpus:0.25;mem:128")
    assert master.update("second").state == TaskState.RUNNING
    second = cgroup_of(runtime, "second")
    assert second == first   # the same cgroups, the new task's limits and only its processes
    assert int(read(second["memory"], "memory.limit_in_bytes")) == 128 * MB
    assert int(read(second["cpu"], "cpu.shares")) == 256
    now = cgroup_pids(second["memory"])
    assert runtime.executor.pid("fw-1", "second") in now and not set(first_pids) & set(now)
    master.send(m.KillTask("fw-1", "second"))
    assert master.update("second").state == TaskState.KILLED
    wait_until(lambda: runtime.isolator._pool, 10, "its cgroups back in the pool")
    # a process that got into a pooled cgroup: it is not handed out, and what is in it is killed
    stray = subprocess.Popen(["sleep", "60"])
    try:
        Path(second["memory"], "cgroup.procs").write_text(str(stray.pid))
        run(master, "third", "sleep 60", resources="cpus:0.25;mem:128")
        assert master.update("third").state == TaskState.RUNNING
        third = cgroup_of(runtime, "third")
        assert third["memory"] != second["memory"]
        assert stray.wait(timeout=10) == -signal.SIGKILL
        assert not os.path.exists(second["memory"])
    finally:
        stray.kill()
        stray.wait()
    master.send(m.KillTask("fw-1", "third"))
    assert master.update("third").state == TaskState.KILLED
    runtime.stop()
    assert cgroups_below(cgroups_root) == []


def test_a_spawned_task_has_no_signal_blocked_or_ignored_and_its_supervisor_went_back_to_the_agents_cgroups(
        master, agent):
    # the supervisor joins the task's cgroups to spawn it and leaves them at once (issue 14)
    runtime = agent()
    # read by the shell itself, with builtins: a shell blocks every signal while it waits for a child
    run(master, "signals", "while read -r line; do case $line in SigBlk*|SigIgn*) echo \"$line\";; esac; "
                           "done < /proc/$$/status > signals; sleep 60")
    assert master.update("signals").state == TaskState.RUNNING
    groups = cgroup_of(runtime, "signals")
    path = sandbox_path(runtime.work_dir, "fw-1", "signals") / "signals"
    wait_until(lambda: path.exists() and path.read_text().count("\n") == 2, 10, "the task's signal masks")
    masks = dict(line.split(":") for line in path.read_text().splitlines())
    assert int(masks["SigBlk"], 16) == 0
    ignored = int(masks["SigIgn"], 16)
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGCHLD):
        assert not ignored & (1 << (signum - 1)), signum
    supervisor = json.loads((runtime.executor.work_dir / "meta" / "tasks" / "fw-1" / "signals" /
                             "supervisor.json").read_text())["pid"]
    assert Path(f"/proc/{supervisor}/cgroup").read_text() == Path("/proc/self/cgroup").read_text()
    for directory in set(groups.values()):
        inside = [int(p) for p in read(directory, "cgroup.procs").split()]
        assert runtime.executor.pid("fw-1", "signals") in inside and supervisor not in inside
    master.send(m.KillTask("fw-1", "signals"))
    assert master.update("signals").state == TaskState.KILLED


def test_a_process_that_leaves_the_tasks_group_is_still_killed_with_it(master, agent, tmp_path):
    runtime = agent()
    run(master, "escaper", "setsid sleep 600 & echo $! > escapee; wait")
    assert master.update("escaper").state == TaskState.RUNNING
    read_pid_file(sandbox_path(runtime.work_dir, "fw-1", "escaper") / "escapee")   # it runs (its pid is the task's
    # PID namespace's: the host's is found in its cgroup)
    leader = runtime.executor.pid("fw-1", "escaper")
    escapee = wait_until(lambda: next((pid for directory in cgroup_of(runtime, "escaper").values()
                                       for pid in cgroup_pids(directory) if os.getpgid(pid) != leader), None),
                         10, "the escapee in the task's cgroups")
    assert os.getpgid(escapee) != leader   # it did leave the group
    master.send(m.KillTask("fw-1", "escaper"))
    assert master.update("escaper").state == TaskState.KILLED
    wait_until(lambda: not Path(f"/proc/{escapee}").exists() or "Z" in Path(f"/proc/{escapee}/stat").read_text()
               .rsplit(")", 1)[1].split()[0], 10, "the escapee to be killed through the cgroup")


def test_a_custom_executors_container_grows_with_its_tasks_and_shrinks_as_they_end(master, agent, cgroups_root):
    # Mesos's containerizer update: the executor's cgroup holds its own resources and its live tasks'
    from mesoslike.wire.types import ExecutorInfo

    runtime = agent(cgroups_cpu_quota=True)
    program = Path(__file__).with_name("executor_program.py")
    executor = ExecutorInfo("grow", f"{sys.executable} {program}", R("cpus:0.5;mem:64"))

    def launch(*task_ids):
        for task_id in task_ids:   # back to back: the executor's launch may still wait when the second comes
            master.send(m.RunTask(FW, TaskInfo(task_id, "agent-1", "hold", R("cpus:0.25;mem:32"), executor=executor)))
        for task_id in task_ids:   # each update acknowledged (one the agent resent meanwhile too)
            states = [master.update(task_id).state]
            while states[-1] != TaskState.RUNNING and len(states) < 10:   # the executor has it
                states.append(master.update(task_id).state)
            # only the executor reports its tasks (as in Mesos): RUNNING, maybe after its own STARTING
            assert states[-1] == TaskState.RUNNING and set(states) <= {TaskState.STARTING, TaskState.RUNNING}, states

    def limits():
        groups = runtime.executor.container("fw-1", executor.run_id()).cgroups
        if runtime.isolator.name == "cgroups-v1":
            return (int(read(groups["memory"], "memory.limit_in_bytes")) // MB,
                    int(read(groups["cpu"], "cpu.cfs_quota_us")), int(read(groups["cpu"], "cpu.shares")))
        return int(read(groups["unified"], "memory.max")) // MB, int(read(groups["unified"], "cpu.max").split()[0]), 0

    def kill(task_id):
        master.send(m.KillTask("fw-1", task_id))
        states = [master.update(task_id).state]
        while states[-1] != TaskState.KILLED and len(states) < 10:   # past resent RUNNING updates
            states.append(master.update(task_id).state)
        assert set(states) <= {TaskState.RUNNING, TaskState.KILLED} and states[-1] == TaskState.KILLED, states

    launch("t1", "t2")
    assert limits()[:2] == (64 + 2 * 32, 100_000)       # the executor's 64 MB and two tasks' 32 MB
    if runtime.isolator.name == "cgroups-v1":
        assert limits()[2] == 1024                       # 1 cpu's shares
    usage = next(u for u in runtime.executor.usage() if u.task_id == executor.run_id())
    assert usage.mem_limit_bytes == 128 * MB and usage.cpus_limit == 1.0   # what /monitor/statistics shows
    kill("t2")
    wait_until(lambda: limits()[:2] == (96, 75_000), 10, "the container to shrink back to the executor and t1")
    launch("t3")                                         # handed to the running executor: it grows again
    assert limits()[:2] == (128, 100_000)
    kill("t1")
    kill("t3")
    wait_until(lambda: limits()[:2] == (64, 50_000), 10, "the container to shrink to the executor alone")


# ------------------------------------------------------------ usage
def test_usage_and_limits_in_the_agents_statistics_and_the_masters_state(cluster, cgroups_root):
    require_cgroups()
    cluster.start_master()
    proc = start_agent(cluster, "u1", "cpus:1;mem:512", "--cgroups-root", cgroups_root)
    # half a second of CPU time, however busy the machine (a wall-clock burn got 0.16 s under load)
    burn = f"{sys.executable} -I -S -c 'import time; end = time.process_time() + 0.5\nwhile time.process_time() < end: pass'; " \
           "echo burnt > burnt; sleep 600"
    scheduler = Launcher({"busy": burn}, "cpus:0.5;mem:64")
    cluster.driver(scheduler, "usage")
    scheduler.wait(lambda: scheduler.running("busy"), 20, "the task to run", cluster.diagnostics)
    agent = next(a for a in cluster.state()["agents"] if a["hostname"] == "u1")
    wait_until(lambda: (sandbox_path(cluster.work_root / "u1", scheduler.framework_id, "busy") / "burnt").exists(),
               20, "the task to burn some CPU")

    def statistics():
        status, _, body = http_get(agent["http_address"] + "/monitor/statistics")
        return json.loads(body)[0]["statistics"] if status == 200 and json.loads(body) else None
    stats = wait_until(statistics, 10, "statistics")
    assert stats["cpus_user_time_secs"] + stats["cpus_system_time_secs"] > 0.2
    assert stats["cpus_limit"] == 0.5 and stats["mem_limit_bytes"] == 64 * 1024 * 1024 and stats["enforced"]
    assert stats["mem_rss_bytes"] > 0 and stats["processes"] >= 1

    def usage_in_master_state():   # it comes with the agent's next PONG
        tasks = [t for f in cluster.state()["frameworks"] for t in f["tasks"] if t["id"] == "busy"]
        usage = tasks[0]["usage"] if tasks else None
        return usage if usage and usage["cpus_user_time_secs"] + usage["cpus_system_time_secs"] > 0.2 else None
    usage = wait_until(usage_in_master_state, 10, "the task's usage in the master's /state")
    assert usage["mem_limit_bytes"] == 64 * 1024 * 1024 and usage["cpus_limit"] == 0.5
    task = next(t for f in cluster.state()["frameworks"] for t in f["tasks"] if t["id"] == "busy")
    assert {"cgroups/cpu", "cgroups/mem", "namespaces/pid"} <= set(task["container_status"]["isolators"]), task
    assert "isolation: cgroups-v" in proc.output()                                  # the startup line


# ------------------------------------------------- selection and fallbacks
def fake_proc(tmp_path, mountinfo: str, cgroup: str = "0::/\n") -> str:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    (proc / "self" / "cgroup").write_text(cgroup)
    return str(proc)


def test_without_cgroups_isolation_falls_back_to_posix_and_says_limits_are_not_enforced(tmp_path):
    proc = fake_proc(tmp_path, "22 1 0:21 / /proc rw,relatime - proc proc rw\n")
    isolator = select_isolator("auto", proc=proc)
    assert isinstance(isolator, PosixIsolator) and not isolator.enforcing
    assert "NOT enforced" in isolator.describe()
    with pytest.raises(ConfigError, match="no usable cgroup hierarchy"):
        select_isolator("cgroups", proc=proc)
    with pytest.raises(ConfigError, match="--isolation"):
        select_isolator("containers")
    assert isinstance(select_isolator("posix"), PosixIsolator)


def test_posix_isolation_measures_a_tasks_session(master, tmp_path):
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256;disk:10", hostname="posix",
                                         work_dir=tmp_path / "p", isolation="posix")).start()
    try:
        master.register()
        run(master, "measured", "sleep 60")
        assert master.update("measured").state == TaskState.RUNNING
        (usage,) = runtime.executor.usage()
        assert usage.mem_rss_bytes > 0 and usage.processes >= 1 and not usage.enforced
        assert usage.mem_limit_bytes == 64 * 1024 * 1024                   # what it asked for, not enforced
    finally:
        runtime.stop()


def v2_unified(tmp_path) -> tuple[Path, Isolator]:
    """A v2 hierarchy in ``tmp_path`` (a directory) with the controllers, and
    the isolator ``select_isolator`` makes there (cgroups root ``tasks``)."""
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    proc = fake_proc(tmp_path, f"30 1 0:26 / {unified} rw,nosuid - cgroup2 cgroup2 rw\n")
    isolator = select_isolator("auto", cgroups_root="tasks", cpu_quota=True, proc=proc)
    return unified, isolator


def test_cgroups_v2_where_the_unified_hierarchy_has_the_controllers(tmp_path):
    unified, isolator = v2_unified(tmp_path)
    assert isinstance(isolator, CgroupsV2Isolator)
    assert (unified / "cgroup.subtree_control").read_text() == "+memory +cpu +pids"
    container = isolator.create("one", R("cpus:1.5;mem:100"))
    directory = unified / "tasks" / "one"
    assert container == Container("cgroups-v2", {"unified": str(directory)}, 1.5, 100 * 1024 * 1024)
    assert (directory / "memory.max").read_text() == str(100 * 1024 * 1024)
    assert (directory / "cpu.max").read_text() == "150000 100000"
    assert 1 <= int((directory / "cpu.weight").read_text()) <= 10_000
    spec = isolator.launch_spec(container)
    assert spec["cgroups"] == [str(directory)]
    assert spec["oom_events"] == [[str(directory / "memory.events"), "oom_kill"]]
    (directory / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert isolator.oom_kills(container) == 1
    assert Container.from_json(json.loads(json.dumps(container.to_json()))) == container


def v1_memory_and_cpu(tmp_path, cgroup: str) -> tuple[Path, Path, str]:
    """v1 memory and cpu hierarchies in ``tmp_path`` (directories), and a
    /proc that has them mounted and this process in ``cgroup``."""
    memory, cpu = tmp_path / "memory", tmp_path / "cpu"
    for hierarchy in (memory, cpu):
        hierarchy.mkdir()
    mountinfo = (f"35 31 0:32 / {memory} rw,relatime - cgroup cgroup rw,memory\n"
                 f"32 31 0:29 / {cpu} rw,relatime - cgroup cgroup rw,cpu\n")
    return memory, cpu, fake_proc(tmp_path, mountinfo, cgroup)


def test_v1_task_cgroups_go_below_the_agents_own_cgroup(tmp_path):
    memory, cpu, proc = v1_memory_and_cpu(tmp_path, "4:memory:/sandbox/one\n1:cpu:/\n")
    isolator = select_isolator("cgroups", cgroups_root="mesoslike", proc=proc)
    assert isolator.name == "cgroups-v1"
    assert isolator.bases == {"memory": str(memory / "sandbox" / "one" / "mesoslike"),   # type: ignore[attr-defined]
                              "cpu": str(cpu / "mesoslike")}
    assert [m.version for m in cgroup_mounts(proc)] == [1, 1]
    # a supervisor that spawned its task inside the task's cgroups goes back to the agent's own
    container = isolator.create("task", R("cpus:1;mem:64"))
    assert isolator.launch_spec(container)["cgroups_home"] == [str(cpu), str(memory / "sandbox" / "one")]


def test_the_tasks_parent_cgroup_weighs_the_cpus_the_agent_offers(tmp_path):
    # made with the kernel's 1024 shares, all the tasks together weighed as one busy daemon beside them
    _, cpu, proc = v1_memory_and_cpu(tmp_path, "4:memory:/\n1:cpu:/\n")
    isolator = select_isolator("cgroups", cgroups_root="mesoslike", proc=proc)
    shares = cpu / "mesoslike" / "cpu.shares"
    assert isolator.weigh_tasks(R("cpus:4"), cores=8) == 4096 and shares.read_text() == "4096"
    assert isolator.weigh_tasks(R("cpus:64"), cores=8) == 8192       # overcommitted: no more than the machine's cores
    assert isolator.weigh_tasks(R("cpus:2"), cores=8) == 8192 and shares.read_text() == "8192"   # shared: the larger kept
    assert isolator.weigh_tasks(R("cpus:10000"), cores=1000) == 262_144                        # the kernel's most
    isolator.limits = frozenset({"mem"})
    assert isolator.weigh_tasks(R("cpus:64")) is None   # cgroups/cpu off: the tasks' CPU is not the agent's to weigh


def test_the_tasks_parent_cgroup_weighs_the_cpus_offered_in_v2_too(tmp_path):
    unified, isolator = v2_unified(tmp_path)
    (unified / "tasks").mkdir(exist_ok=True)
    (unified / "tasks" / "cpu.weight").write_text("100\n")   # the kernel's default
    assert isolator.weigh_tasks(R("cpus:1"), cores=64) == 100    # 1024 shares are weight 39: never lowered
    assert isolator.weigh_tasks(R("cpus:64"), cores=64) == 2500 and (unified / "tasks" / "cpu.weight").read_text() == "2500"


def test_an_agent_weighs_its_tasks_parent_cgroup_as_the_cpus_it_offers(master, agent, cgroups_root):
    agent()   # cpus:2
    base = select_isolator("cgroups", cgroups_root=cgroups_root).bases["cpu"]   # type: ignore[attr-defined]
    assert read(base, "cpu.shares") == str(1024 * min(2, len(os.sched_getaffinity(0))))
    run(master, "weighed", "sleep 60")
    assert master.update("weighed").state == TaskState.RUNNING
    assert os.path.dirname(cgroup_of(agent.made[0], "weighed")["cpu"]) == base


def test_a_v1_task_gets_no_pids_cgroup(tmp_path):
    # nothing is limited in pids, and any of its cgroups lists its processes: a cgroup there was one more to
    # hand out, check, join and empty a task
    hierarchies = {name: tmp_path / name for name in ("memory", "cpu", "cpuacct", "pids")}
    for hierarchy in hierarchies.values():
        hierarchy.mkdir()
    mountinfo = "".join(f"{30 + i} 29 0:{40 + i} / {path} rw,relatime - cgroup cgroup rw,{name}\n"
                        for i, (name, path) in enumerate(hierarchies.items()))
    proc = fake_proc(tmp_path, mountinfo, "4:memory:/\n3:cpu:/\n2:cpuacct:/\n1:pids:/\n")
    isolator = select_isolator("cgroups", cgroups_root="mesoslike", proc=proc)
    assert sorted(isolator.bases) == ["cpu", "cpuacct", "memory"]   # type: ignore[attr-defined]
    container = isolator.create("task", R("cpus:1;mem:64"))
    assert sorted(container.cgroups) == ["cpu", "cpuacct", "memory"]
    assert not (hierarchies["pids"] / "mesoslike").exists()
    spec = isolator.launch_spec(container)   # what its init joins, its supervisor empties and kills
    assert sorted(spec["cgroups"]) == sorted(container.cgroups.values())


def test_the_supervisors_and_tasks_of_a_stopped_agent_leave_no_cgroup(master, agent, cgroups_root):
    runtime = agent()
    run(master, "a", "sleep 60")
    run(master, "b", "trap '' TERM; sleep 60 & wait")
    for task_id in ("a", "b"):
        assert master.update(task_id).state == TaskState.RUNNING
    assert len(cgroups_below(cgroups_root)) >= 2
    runtime.stop()
    assert cgroups_below(cgroups_root) == []


def test_a_container_made_without_a_memory_limit_takes_one_when_updated(cgroups_root):
    require_cgroups()
    isolator = select_isolator("cgroups", cgroups_root=cgroups_root)
    container = isolator.create("agent-a.unlimited", R("cpus:0.5"))
    try:
        assert container.mem_bytes == 0
        # v1: from no limit the swap limit must not be written first (below the unlimited memory limit: EINVAL)
        updated = isolator.update(container, R("cpus:0.5;mem:64"))
        assert updated.mem_bytes == 64 * MB
        if isolator.name == "cgroups-v1":
            assert int(read(updated.cgroups["memory"], "memory.limit_in_bytes")) == 64 * MB
            swap = Path(updated.cgroups["memory"], "memory.memsw.limit_in_bytes")
            assert not swap.exists() or int(swap.read_text()) == 64 * MB
            bigger = isolator.update(updated, R("cpus:0.5;mem:128"))   # growing: the swap limit first, as before
            assert int(read(bigger.cgroups["memory"], "memory.limit_in_bytes")) == 128 * MB
    finally:
        isolator.destroy(container)


def test_a_pooled_cgroup_counts_the_new_tasks_cpu_only_and_a_killed_agents_spares_are_swept(cgroups_root):
    require_cgroups()
    isolator = select_isolator("cgroups", cgroups_root=cgroups_root)
    if not isolator.pool_size:
        unavailable("this machine's cgroups (v2) keep no pool")
    first = isolator.create("agent-a.first", R("cpus:1;mem:64"), pooled=True)
    burner = subprocess.Popen([sys.executable, "-I", "-S", "-c",
                                             "import sys, time\nsys.stdin.readline()\nend = time.process_time() + 0.5\n"
                                             "while time.process_time() < end: pass\n"],
                                            stdin=subprocess.PIPE)
    for directory in first.directories:   # as a task's supervisor places it
        Path(directory, "cgroup.procs").write_text(str(burner.pid))
    burner.communicate(b"go\n", timeout=30)
    used = isolator.usage(first, None)
    assert used.cpus_user_time_secs + used.cpus_system_time_secs >= 0.4
    isolator.give_back(first)
    second = isolator.create("agent-a.second", R("cpus:1;mem:64"), pooled=True)
    assert second.directories == first.directories
    fresh = isolator.usage(second, None)      # the earlier task's CPU is not the new one's
    assert fresh.cpus_user_time_secs + fresh.cpus_system_time_secs < 0.05
    # the pooled cgroups a killed process of the agent left (the pool never released) go when its next process
    # sweeps; a recovered task's stay, and another live agent's
    left = _killed_agent_isolator(cgroups_root, "container = isolator.create('agent-a.third', "
                                                "Resources.parse('cpus:1;mem:64'), pooled=True)\n"
                                                "print(*container.directories)\n")
    other = isolator.create("agent-b.fourth", R("cpus:1;mem:64"), pooled=True)
    restarted = select_isolator("cgroups", cgroups_root=cgroups_root)
    assert left and restarted.sweep("agent-a", keep=set(second.directories)) == len(left)
    assert all(os.path.isdir(d) for d in second.directories + other.directories)
    assert not any(os.path.exists(d) for d in left)
    for container in (second, other):
        isolator.destroy(container)


def pooling_isolator(cgroups_root: str):
    """The cgroups isolator of ``cgroups_root``, one that keeps a pool and spares (the test is skipped if not)."""
    require_cgroups()
    isolator = select_isolator("cgroups", cgroups_root=cgroups_root)
    if not isolator.pool_size:
        unavailable("this machine's cgroups (v2) keep no pool")
    return isolator


def test_spares_are_made_bounded_handed_out_empty_renamed_with_the_tasks_limits_and_removed_at_release(
        cgroups_root):
    isolator = pooling_isolator(cgroups_root)
    isolator.spare_size = 3
    assert isolator.spares_short()
    assert isolator.make_spares("agent-c", 2) == 2
    assert isolator.make_spares("agent-c", 5) == 1 and not isolator.spares_short()   # the bound: 3 in all
    assert len(spares_below(cgroups_root, bound=3)) == 3 and task_cgroups_below(cgroups_root) == []
    for name in cgroups_below(cgroups_root):   # made with the kernel's defaults: no limit written
        memory = os.path.join(isolator.bases["memory"], name)
        assert int(read(memory, "memory.limit_in_bytes")) > 1 << 50
        assert int(read(os.path.join(isolator.bases["cpu"], name), "cpu.shares")) == 1024
    used = isolator.create("agent-c.pooled", R("cpus:0.5;mem:32"), pooled=True)
    # a task's now: named as a pooled cgroup, the spare's name gone, the task's limits, counted from zero
    assert used.pooled and (used.cpus, used.mem_bytes) == (0.5, 32 * MB) and used.base == (0.0, 0.0, 0, 0.0)
    assert all(".pooled." in d and os.path.isdir(d) and not os.path.exists(d.replace(".pooled.", ".spare."))
               for d in used.directories)
    assert int(read(used.cgroups["memory"], "memory.limit_in_bytes")) == 32 * MB
    assert int(read(used.cgroups["cpu"], "cpu.shares")) == 512
    assert len(task_cgroups_below(cgroups_root)) == 1 and len(spares_below(cgroups_root)) == 2
    # a process that got into a spare: it is not handed out, and what is in it is killed
    stray = subprocess.Popen(["sleep", "60"])
    try:
        spare = isolator._spares[-1]
        Path(spare.cgroups["memory"], "cgroup.procs").write_text(str(stray.pid))
        other = isolator.create("agent-c.pooled", R("cpus:0.5;mem:32"), pooled=True)
        assert other.cgroups["memory"] != spare.cgroups["memory"].replace(".spare.", ".pooled.")
        assert stray.wait(timeout=10) == -signal.SIGKILL
        assert not any(os.path.exists(d) for d in spare.directories)
    finally:
        stray.kill()
        stray.wait()
    isolator.give_back(used)   # back in the pool: handed out first, its counters read (none told)
    again = isolator.create("agent-c.pooled", R("cpus:0.5;mem:32"), pooled=True)
    assert again.directories == used.directories and not isolator._spares
    # an agent killed with spares: its next process sweeps them (and its pooled ones), but its tasks'
    assert isolator.make_spares("agent-c", 1) == 1
    restarted = select_isolator("cgroups", cgroups_root=cgroups_root)
    kept = set(again.directories) | set(other.directories)
    assert restarted.sweep("agent-c", keep=kept) == len(isolator._spares[0].directories)
    isolator._spares.clear()
    isolator.make_spares("agent-c", 1)
    isolator.destroy(again)
    isolator.destroy(other)
    isolator.release()   # the agent's stop: its spares go
    assert cgroups_below(cgroups_root) == []


def _killed_agent_isolator(cgroups_root: str, script: str) -> list[str]:
    """Run ``script`` in an agent-like process with ``isolator`` (the cgroups isolator of ``cgroups_root``),
    then kill it by SIGKILL (it never releases its pool); returns the lines it printed."""
    killed = subprocess.run(
        [sys.executable, "-c", "import os, sys\nfrom mesoslike.agent.isolation import select_isolator\n"
         "from mesoslike.resources import Resources\n"
         "isolator = select_isolator('cgroups', cgroups_root=sys.argv[1])\n" + script
         + "sys.stdout.flush()\nos.kill(os.getpid(), 9)\n", cgroups_root],
        capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    return killed.stdout.split()


def test_the_spares_and_pool_of_a_killed_agent_of_another_name_are_swept_by_a_later_agent_and_a_live_ones_are_not(
        cgroups_root):
    isolator = pooling_isolator(cgroups_root)
    # an agent killed with 3 spares and its pool full (3 here; a 4th cgroup given back was removed), whose work
    # directory is gone for good: no process of its key comes again
    printed = _killed_agent_isolator(
        cgroups_root, "isolator.pool_size = 3\nresources = Resources.parse('cpus:0.1;mem:32')\n"
        "used = [isolator.create('agent-gone.pooled', resources, pooled=True) for _ in range(4)]\n"
        "for container in used: isolator.give_back(container)\n"
        "isolator.spare_size = 6\nassert isolator.make_spares('agent-gone', 3) == 3\n"
        "print(*sorted({os.path.basename(d) for c in isolator._pool for d in c.directories}))\n")
    spares = spares_below(cgroups_root, bound=3)
    pooled = task_cgroups_below(cgroups_root)
    assert len(spares) == 3 and all(name.startswith("agent-gone.spare.") for name in spares)
    assert len(printed) == 3 and pooled == sorted(printed) and all(name.startswith("agent-gone.pooled.")
                                                                    for name in pooled)
    # a live agent's spares and pool (this process's: a spare of it handed out, renamed to a pooled cgroup, in
    # it), a killed one's spare and pooled cgroup with a process written in, a spare and a pooled cgroup named
    # before names told their maker or holder: none of them is another agent's to remove
    isolator.spare_size = 3
    assert isolator.make_spares("agent-live", 3) == 3
    for container in [isolator.create("agent-live.pooled", R("cpus:0.1;mem:32"), pooled=True) for _ in range(2)]:
        isolator.give_back(container)
    live = set(cgroups_below(cgroups_root)) - set(spares + pooled)
    assert len(live) == 3 and len({name for name in live if name.startswith("agent-live.pooled.")}) == 2
    strays = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]   # a process is in one cgroup a hierarchy
    unnamed = [f"agent-old.spare.{os.urandom(6).hex()}", f"agent-old.pooled.{os.urandom(6).hex()}"]
    try:
        for base in set(isolator.bases.values()):
            for name in unnamed:
                os.mkdir(os.path.join(base, name))
        for name, stray in zip((spares[0], pooled[0]), strays):
            Path(isolator.bases["memory"], name, "cgroup.procs").write_text(str(stray.pid))
        later = select_isolator("cgroups", cgroups_root=cgroups_root)
        hierarchies = len(set(isolator.bases.values()))
        # the killed agent's two empty spares and two empty pooled cgroups go in every hierarchy; the two
        # holding a process stay where they do
        assert later.sweep("agent-later", keep=set()) == 4 * hierarchies + 2 * (hierarchies - 1)
        assert sorted(set(cgroups_below(cgroups_root))) == sorted([spares[0], pooled[0], *unnamed, *live])
        for name, stray in zip((spares[0], pooled[0]), strays):
            assert cgroup_pids(os.path.join(isolator.bases["memory"], name)) == [stray.pid]
        assert later.sweep("agent-later", keep=set()) == 0   # nothing more is an orphan's
        # the live agent's pool still serves (its cgroups were never removed)
        again = isolator.create("agent-live.pooled", R("cpus:0.1;mem:32"), pooled=True)
        assert {os.path.basename(d) for d in again.directories} <= live
        isolator.give_back(again)
    finally:
        for stray in strays:
            stray.kill()
            stray.wait()
    for base in set(isolator.bases.values()):
        for name in (spares[0], pooled[0], *unnamed):
            try:
                os.rmdir(os.path.join(base, name))
            except FileNotFoundError:
                pass
    isolator.release()
    assert cgroups_below(cgroups_root) == []


def test_a_killed_agent_whose_work_directory_is_gone_leaves_its_empty_pool_to_the_next_agent_started(
        cluster, cgroups_root):
    pooling_isolator(cgroups_root)   # skipped where there is no pool
    cluster.start_master()
    killed = start_agent(cluster, "k1", "cpus:2;mem:1024", "--cgroups-root", cgroups_root)
    scheduler = Launcher({f"t{n}": "true" for n in range(3)}, "cpus:0.25;mem:64")
    cluster.driver(scheduler, "pool")
    scheduler.wait(lambda: all(scheduler.terminal(f"t{n}") for n in range(3)), 20, "the tasks to end",
                   cluster.diagnostics)
    # the ended tasks' cgroups wait in the agent's pool, named for it (and its spares for their maker)
    pooled = wait_until(lambda: [n for n in task_cgroups_below(cgroups_root) if ".pooled." in n], 10,
                        "the tasks' cgroups back in the pool")
    assert all(name.partition(".pooled.")[2].startswith(f"{killed.popen.pid}-") for name in pooled)
    kill_9(killed)   # killed with its pool, and its work directory gone for good: no process of it comes again
    shutil.rmtree(cluster.work_root / "k1")
    left = set(cgroups_below(cgroups_root))
    stray = subprocess.Popen(["sleep", "60"])   # a process in one of them: that one is never removed
    try:
        Path(cgroup_bases(cgroups_root)[0], pooled[0], "cgroup.procs").write_text(str(stray.pid))
        start_agent(cluster, "k2", "cpus:2;mem:1024", "--cgroups-root", cgroups_root)
        # the next agent started on the same cgroups (another work directory) removes the rest at its first
        # idle turn; its own spares are a live agent's: no other agent's sweep removes them
        wait_until(lambda: set(cgroups_below(cgroups_root)) & left == {pooled[0]}, 20,
                   "the killed agent's empty cgroups to be removed")
        assert cgroup_pids(os.path.join(cgroup_bases(cgroups_root)[0], pooled[0])) == [stray.pid]
        assert spares_below(cgroups_root) and not set(spares_below(cgroups_root)) & left
    finally:
        stray.kill()
        stray.wait()


def test_a_recovered_tasks_pooled_cgroup_is_renamed_for_the_restarted_agent_as_it_goes_back_into_the_pool(
        cgroups_root):
    restarted = pooling_isolator(cgroups_root)
    hierarchies = len(set(restarted.bases.values()))
    task = subprocess.Popen(["sleep", "60"])
    old_task = subprocess.Popen(["sleep", "60"])
    try:
        # the agent's earlier process launched a task into a pooled cgroup and was killed; a task of an agent
        # of the previous naming (no holder in the name) runs on too
        printed = _killed_agent_isolator(
            cgroups_root, "import json\n"
            "container = isolator.create('agent-r.pooled', Resources.parse('cpus:0.1;mem:32'), pooled=True)\n"
            f"for d in container.directories: open(os.path.join(d, 'cgroup.procs'), 'w').write('{task.pid}')\n"
            "print(json.dumps(container.to_json(), separators=(',', ':')))\n")
        inherited = Container.from_json(json.loads(printed[0]))
        old_name = f"agent-r.pooled.{os.urandom(6).hex()}"
        old = attrs.evolve(inherited, cgroups={c: os.path.join(os.path.dirname(d), old_name)
                                               for c, d in inherited.cgroups.items()})
        for directory in old.directories:
            os.mkdir(directory)
            Path(directory, "cgroup.procs").write_text(str(old_task.pid))
        # the restarted agent's sweep keeps its recovered tasks' cgroups; another agent's cannot remove them
        # (a task is in each)
        assert restarted.sweep("agent-r", keep=set(inherited.directories + old.directories)) == 0
        assert select_isolator("cgroups", cgroups_root=cgroups_root).sweep("agent-other", keep=set()) == 0
        for process in (task, old_task):   # the tasks end (their supervisors empty their cgroups)
            process.kill()
            process.wait()
        wait_until(lambda: not any(cgroup_pids(d) for d in inherited.directories + old.directories), 10,
                   "the ended tasks out of their cgroups")
        restarted.give_back(inherited)
        restarted.give_back(old)
        # back in the pool under this process's name: the old names are gone, each random part kept
        held = [container.directories for container in restarted._pool]
        assert len(held) == 2 and not any(os.path.exists(d) for d in inherited.directories + old.directories)
        for directories, before in zip(held, (inherited.directories, old.directories)):
            assert all(os.path.isdir(d) and d.rpartition("-")[2] == b.rpartition("-")[2][-12:]
                       and d.rpartition(".pooled.")[2].startswith(f"{os.getpid()}-")
                       for d, b in zip(directories, before))
        # so that another agent's sweep takes them for a live agent's; they serve this agent's next tasks
        assert select_isolator("cgroups", cgroups_root=cgroups_root).sweep("agent-other", keep=set()) == 0
        assert restarted.sweep("agent-r", keep=set()) == 0
        served = [restarted.create("agent-r.pooled", R("cpus:0.1;mem:32"), pooled=True) for _ in range(2)]
        assert sorted(c.directories for c in served) == sorted(held)
        assert len(cgroups_below(cgroups_root)) == 2 * hierarchies
        for container in served:
            restarted.give_back(container)
    finally:
        for process in (task, old_task):
            process.kill()
            process.wait()
    restarted.release()
    assert cgroups_below(cgroups_root) == []


def test_a_pooled_cgroups_throttling_counters_are_read_only_where_a_cfs_quota_is_written(cgroups_root, monkeypatch):
    require_cgroups()
    import mesoslike.agent.isolation as isolation
    for quota in (False, True):
        isolator = select_isolator("cgroups", cgroups_root=cgroups_root, cpu_quota=quota)
        if not isolator.pool_size:
            unavailable("this machine's cgroups (v2) keep no pool")
            return
        first = isolator.create("agent-d.pooled", R("cpus:0.5;mem:32"), pooled=True)
        isolator.give_back(first)
        read: list = []
        real = isolation._flat_keyed
        monkeypatch.setattr(isolation, "_flat_keyed", lambda path: read.append(os.path.basename(path)) or real(path))
        second = isolator.create("agent-d.pooled", R("cpus:0.5;mem:32"), pooled=True)
        usage = isolator.usage(second, None)
        monkeypatch.setattr(isolation, "_flat_keyed", real)
        assert second.directories == first.directories
        # without a quota the kernel counts no throttling: cpu.stat is not read (at hand-out, in usage)
        assert ("cpu.stat" in read) == quota and "cpuacct.stat" in read
        assert (usage.cpus_nr_throttled, usage.cpus_throttled_time_secs) == (0, 0.0)
        isolator.destroy(second)
        isolator.release()
