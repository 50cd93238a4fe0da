"""Helpers for the agent's tests: a scripted master, real cgroups that are
cleaned up, and real ``mesoslike agent`` processes.

Every cgroup a test makes lies below a root of its own
(:func:`cgroups_root`), removed with everything in it when the test ends;
every process is killed by the fixtures that started it.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from environment import unavailable

from e2e_helpers import Cluster, Proc, RecordingScheduler, http_get
from mesoslike import Resources, TaskInfo, TaskState
from mesoslike.agent.isolation import CgroupsV1Isolator, CgroupsV2Isolator, cgroup_mounts, select_isolator
from mesoslike.agent.supervisor import cgroup_pids, kill_cgroups, process_start_ticks, read_json, remove_cgroup
from mesoslike.transport import Server
from mesoslike.wire import messages as m
from mesoslike.wire.types import MasterInfo
from waiting import wait_until

_roots = itertools.count()


# ------------------------------------------------------------ cgroups
def cgroup_bases(root: str) -> list[str]:
    """Where ``select_isolator`` puts the task cgroups of ``root`` (one per hierarchy)."""
    isolator = select_isolator("auto", cgroups_root=root)
    if isinstance(isolator, (CgroupsV1Isolator, CgroupsV2Isolator)):
        return sorted(set(isolator.bases.values()))
    return []


def remove_cgroup_root(root: str) -> list[str]:
    """Kill everything below the cgroup ``root`` and remove it; returns what could not be removed."""
    left = []
    for base in cgroup_bases(root):
        deadline = time.monotonic() + 5.0
        while os.path.isdir(base):   # again while an agent still running makes spares below it (empty ones)
            children = [os.path.join(base, name) for name in os.listdir(base)
                        if os.path.isdir(os.path.join(base, name))]
            while not kill_cgroups(children) and time.monotonic() < deadline:
                time.sleep(0.01)
            failed = [directory for directory in children if not remove_cgroup(directory)]
            try:
                os.rmdir(base)
                break
            except FileNotFoundError:
                break
            except OSError:   # a new spare (ENOTEMPTY), or the kernel not done with its last child (EBUSY)
                if failed or time.monotonic() >= deadline + 5.0:
                    left += [*failed, base]
                    break
                time.sleep(0.01)
    _remove_runc_parents(root)
    return left


def _remove_runc_parents(root: str) -> None:
    """runc makes an image task's cgroups in every hierarchy (blkio, devices, freezer, ...) below the
    agent's own and removes them with the container; the ``root`` directories above them stay, empty."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    for mount in cgroup_mounts():
        names = [""] if mount.version == 2 else [c.removeprefix("name=") for c in mount.controllers]
        mine = next((own.get(n) or own.get(f"name={n}") for n in names if own.get(n) or own.get(f"name={n}")), "/")
        relative = os.path.relpath(mine, mount.root) if mine.startswith(mount.root) else "."
        directory = os.path.normpath(os.path.join(mount.path, relative, root))
        if os.path.isdir(directory):
            for name in os.listdir(directory):
                if os.path.isdir(os.path.join(directory, name)):
                    remove_cgroup(os.path.join(directory, name))
            remove_cgroup(directory)


def require_cgroups() -> str:
    """The cgroup isolator's name here; skips without writable cgroups — fails under CI=true."""
    isolator = select_isolator("auto", cgroups_root=f"mesoslike-probe-{os.getpid()}")
    if isolator.enforcing:
        return isolator.name
    unavailable("no writable cgroups (v2 with memory and cpu, or v1) on this machine: run as root")


@pytest.fixture
def cgroups_root():
    """A cgroup root of the test's own (``--cgroups-root``), removed afterwards with all below it."""
    root = f"mesoslike-test-{os.getpid()}-{next(_roots)}"
    yield root
    left = remove_cgroup_root(root)
    assert not left, f"cgroups left behind: {left}"


def cgroups_below(root: str) -> list[str]:
    """The task cgroups that exist below ``root`` now."""
    found = []
    for base in cgroup_bases(root):
        if os.path.isdir(base):
            found += [name for name in os.listdir(base) if os.path.isdir(os.path.join(base, name))]
    return sorted(found)


def task_cgroups_below(root: str) -> list[str]:
    """The cgroups below ``root`` now that are not spares: a task's, or (``.pooled.``) one that served a task.
    A spare (``<key>.spare.<pid>-<start>-<random>``) is made ahead by an idle agent and was never a task's
    (isolation.Isolator.make_spares); :func:`spares_below` checks what users rely on of those."""
    return sorted({name for name in cgroups_below(root) if ".spare." not in name})


def spares_below(root: str, bound: int = 64) -> list[str]:
    """The spares below ``root`` now, each asserted empty (no process) in every hierarchy, at most ``bound``
    an agent."""
    spares = sorted({name for name in cgroups_below(root) if ".spare." in name})
    for base in cgroup_bases(root):
        for name in spares:
            if os.path.isdir(os.path.join(base, name)):
                assert not cgroup_pids(os.path.join(base, name)), f"a spare cgroup with processes: {base}/{name}"
    per_agent: dict[str, int] = {}
    for name in spares:
        per_agent[name.split(".", 1)[0]] = per_agent.get(name.split(".", 1)[0], 0) + 1
    assert all(count <= bound for count in per_agent.values()), per_agent
    return spares


# ------------------------------------------------------- a scripted master
class FakeMaster:
    """A ROUTER socket with a backlog: tests wait for the message they expect."""

    def __init__(self):
        self.server = Server("tcp://127.0.0.1:0")
        self.address = self.server.address
        self.info = MasterInfo("master-1", self.address)
        self.peer = None
        self.backlog = []
        #: uuids this master acknowledged: a copy that crossed the ack (the agent's retry fired before the ack
        #: arrived, as on a loaded machine) is acknowledged again and not handed to the test, as the real master does
        self.acknowledged = set()

    def expect(self, kind, where=lambda msg: True, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            for i, (peer, msg) in enumerate(self.backlog):
                if isinstance(msg, kind) and where(msg):
                    del self.backlog[i]
                    self.peer = peer
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kind.__name__} within {timeout} s; got {[m for _, m in self.backlog]}")
            if self.server.wait(min(left, 0.1)):
                self.backlog.extend(self.server.receive())

    def send(self, message):
        self.server.send(self.peer, message)

    def register(self, agent_id="agent-1", ping_interval=30.0):
        registration = self.expect(m.RegisterAgent)
        self.send(m.AgentRegistered(agent_id, self.info, ping_interval))
        return registration

    def update(self, task_id, ack=True, timeout=10.0):
        while True:
            msg = self.expect(m.StatusUpdate, where=lambda u: u.status.task_id == task_id, timeout=timeout)
            if msg.status.uuid not in self.acknowledged:
                break
            self.ack(msg.status)
        if ack:
            self.ack(msg.status)
        return msg.status

    def ack(self, status):
        self.acknowledged.add(status.uuid)
        self.send(m.StatusUpdateAck(status.agent_id, status.framework_id, status.task_id, status.uuid))

    def updates_until_terminal(self, task_id, timeout=20.0):
        statuses = [self.update(task_id, timeout=timeout)]
        while not statuses[-1].terminal:
            statuses.append(self.update(task_id, timeout=timeout))
        return statuses

    def close(self):
        self.server.close()


@pytest.fixture
def master():
    """A FakeMaster, closed after the test."""
    fake = FakeMaster()
    yield fake
    fake.close()


#: the work directories (as agent_key's digests) of agents outside pytest's temporary directories:
#: the session sweeps the task cgroups they leave (tests/conftest.py)
WORK_DIR_DIGESTS: set[str] = set()


def work_dir_digests(root: Path) -> set[str]:
    """The digests :func:`mesoslike.agent.isolation.agent_key` gives an agent
    whose work directory is ``root`` or below it."""
    from hashlib import sha256

    return {sha256(directory.encode()).hexdigest()[:8] for directory, _, _ in os.walk(root.resolve())}


@pytest.fixture
def traversable_dir():
    """A directory every user may traverse (pytest's own tmp dirs are 0700), removed afterwards: the work
    dir of an agent whose tasks switch to another user lies below it."""
    directory = tempfile.mkdtemp(prefix="mesoslike-agent-")
    os.chmod(directory, 0o711)
    yield Path(directory)
    WORK_DIR_DIGESTS.update(work_dir_digests(Path(directory)))   # its agents' cgroups: swept at the session's end
    shutil.rmtree(directory, ignore_errors=True)


# ------------------------------------------------------------- a framework
class Launcher(RecordingScheduler):
    """Launches ``tasks`` (task id -> command) on the first offer, declines the rest."""

    def __init__(self, tasks: dict[str, str], resources: str = "cpus:0.25;mem:64", grace: float = 1.0):
        super().__init__()
        self.tasks, self.resources, self.grace = tasks, Resources.parse(resources), grace
        self.launched = False

    def on_offers(self, driver, offers):
        for offer in offers:
            if self.launched:
                driver.decline_offer(offer.id)
                continue
            self.launched = True
            driver.launch_tasks([offer.id], self.tasks_for(offer))

    def tasks_for(self, offer) -> list[TaskInfo]:
        return [TaskInfo(task_id, offer.agent_id, command, self.resources, kill_grace_period=self.grace)
                for task_id, command in self.tasks.items()]

    def states(self, task_id):
        return [s.state for s in self.statuses(task_id)]

    def running(self, *task_ids):
        return all(TaskState.RUNNING in self.states(t) for t in task_ids)

    def terminal(self, task_id):
        return [s for s in self.statuses(task_id) if s.terminal]


# ------------------------------------------------------ real agent processes
_names = itertools.count()


def start_agent(cluster: Cluster, hostname: str, resources: str, *extra: str, wait: bool = True,
                timeout: float = 20.0) -> Proc:
    """``mesoslike agent`` for ``hostname`` with its work dir under the cluster's,
    and ``extra`` options (e.g. ``--cgroups-root``)."""
    args = ["agent", "--master", cluster.address, "--resources", resources, "--hostname", hostname,
            "--work-dir", str(cluster.work_root / hostname), "--log-level", "info",
            # the cluster is authenticated (docs/security.rst): the agents' principal and its master's key
            "--key", cluster.keys.secret("agent1"), "--master-key", cluster.master_key, *extra]
    proc = cluster._start(f"agent-{hostname}-{next(_names)}", args)
    cluster.agents[hostname] = proc
    if wait:
        cluster.wait_for_agents([hostname], timeout=timeout)
    return proc


def agent_state(cluster: Cluster, hostname: str) -> dict:
    """The agent's own ``/state`` (found through the master's)."""
    agent = next((a for a in cluster.state()["agents"] if a["hostname"] == hostname), None)
    if agent is None:   # a restarted agent not registered yet: "not yet" to wait_until (a KeyError)
        raise KeyError(f"no agent {hostname!r} in the master's state")
    status, _, body = http_get(agent["http_address"] + "/state")
    if status != 200:
        raise ValueError(f"the agent's /state answered {status}")
    return json.loads(body)


def run_dir(cluster: Cluster, hostname: str, framework_id: str, task_id: str) -> Path:
    from mesoslike.agent.executor import run_dir_path

    return run_dir_path(cluster.work_root / hostname, framework_id, task_id)


def sandbox(cluster: Cluster, hostname: str, framework_id: str, task_id: str) -> Path:
    from mesoslike.agent.executor import sandbox_path

    return sandbox_path(cluster.work_root / hostname, framework_id, task_id)


def supervisor_pid(directory: Path) -> int:
    return read_json(str(directory / "supervisor.json"))["pid"]  # type: ignore[index]


def alive(pid: int) -> bool:
    return process_start_ticks(pid) is not None


def task_pid(run_directory: Path, timeout: float = 10.0) -> int:
    """The task's pid as this machine sees it, from its supervisor's ``task.json`` (a pid the task
    itself says, ``echo $$``, is its PID namespace's: docs/containers.rst)."""
    def pid() -> int | None:
        value = read_json(str(run_directory / "task.json"))["pid"]  # type: ignore[index]
        return value if isinstance(value, int) and value > 0 else None
    return wait_until(pid, timeout, f"the task's pid in {run_directory}/task.json")


def read_pid_file(path: Path, timeout: float = 10.0) -> int:
    wait_until(lambda: path.exists() and path.read_text().strip(), timeout, f"{path}")
    return int(path.read_text().split()[0])


def kill_9(proc: Proc) -> None:
    """SIGKILL a process's group and reap it (its tasks, in sessions of their own, live on)."""
    proc.signal_group(signal.SIGKILL)
    proc.popen.wait(timeout=10)


__all__ = ["FakeMaster", "master", "Launcher", "cgroups_root", "cgroups_below", "task_cgroups_below", "spares_below",
           "cgroup_pids", "remove_cgroup_root", "require_cgroups",
           "start_agent", "agent_state", "run_dir", "sandbox", "supervisor_pid", "alive", "read_pid_file", "kill_9"]
