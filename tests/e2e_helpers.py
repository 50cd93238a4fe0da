"""Helpers for end-to-end tests with real processes on 127.0.0.1.

A :class:`Cluster` starts ``python -m mesoslike master`` / ``agent`` / ``local``
as subprocesses (each in its own session, so a test can kill a whole process
group), waits for readiness by polling ``GET /state`` with deadlines, and
cleans everything up: drivers first (so their TEARDOWN reaches the master),
then the process groups, then any task process that escaped (tasks run in
their own sessions, so killing an agent with SIGKILL orphans them). Only
processes this module started, or whose ``MESOSLIKE_SANDBOX`` lies under the
test's own temporary directory, are ever signalled.

Frameworks run in the test process: :class:`RecordingScheduler` records every
callback with a timestamp and lets a test wait for a condition on them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterable

import pytest

from mesoslike import FrameworkInfo, Scheduler, SchedulerDriver
from mesoslike.agent.executor import destroy_containers_under
from security_helpers import SecuredKeys
from waiting import wait_until

REPO = Path(__file__).resolve().parent.parent

# The master options every e2e cluster uses: fast cycles and fast liveness.
FAST_MASTER_ARGS = ("--allocation-interval", "0.2", "--heartbeat-interval", "0.5",
                    "--ping-interval", "0.5", "--max-agent-ping-timeouts", "3")


# ----------------------------------------------------------------- basics
def free_port() -> int:
    """A port that was free a moment ago (bind to 0, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child_env() -> dict[str, str]:
    """The environment of the cluster's processes: the repo importable, no installation needed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # keep the test's own MESOSLIKE_* settings from leaking into the processes' options
    for key in [k for k in env if k.startswith("MESOSLIKE_")]:
        del env[key]
    return env


def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05,
             diagnostics: Callable[[], str] | None = None):
    """Poll ``predicate`` until it returns something truthy; return that
    (:func:`waiting.wait_until` with this module's default interval)."""
    return wait_until(predicate, timeout, what, interval=interval, diagnostics=diagnostics)


def run_on_local(*command: str, agents: int = 1, timeout: float = 80.0) -> subprocess.CompletedProcess:
    """``mesoslike local --agents N -- COMMAND`` (an example, run as a user
    runs it) on free ports with a quick allocation interval; its output."""
    args = [sys.executable, "-m", "mesoslike", "local", "--agents", str(agents), "--port", str(free_port()),
            "--http-port", str(free_port()), "--allocation-interval", "0.2", "--", *command]
    return subprocess.run(args, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=timeout)


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str, str]:
    """(status, content type, body) of a GET; HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


# ------------------------------------------------------------- processes
def _proc_environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) of a process, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[2])


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie has ended; only its reaping is due)."""
    stat = _proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def host_pid(ident: str) -> int | None:
    """The pid on this machine of the living process a task program names
    ``<pid>@<inode of its PID namespace>`` (its own view: in a task's PID
    namespace every first process is pid 2; tests/executor_program.py),
    None if it is gone."""
    inner, _, namespace = ident.partition("@")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/pid").st_ino != int(namespace):
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        line = next((line for line in status.splitlines() if line.startswith("NSpid:")), "")
        if line and int(line.split()[-1]) == int(inner):
            return int(entry)
    return None


def group_members(pgid: int) -> list[int]:
    """Living processes of a process group."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
                members.append(int(entry))
    return members


def task_processes(sandbox_root: str | Path, framework_id: str | None = None, *,
                   shared_supervisors: bool = False) -> dict[int, str]:
    """pid -> MESOSLIKE_TASK_ID of the living task processes whose sandbox lies under ``sandbox_root``.
    An agent's shared supervisor (its own process, not a task's: it lives while its agent does) only with
    ``shared_supervisors``."""
    root = str(Path(sandbox_root).resolve())
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        env = _proc_environ(int(entry))
        sandbox = env.get("MESOSLIKE_SANDBOX", "")
        if not sandbox or not (sandbox == root or sandbox.startswith(root + os.sep)):
            continue
        if env.get("MESOSLIKE_SUPERVISOR") == "shared" and not shared_supervisors:
            continue
        if framework_id is not None and env.get("MESOSLIKE_FRAMEWORK_ID") != framework_id:
            continue
        if alive(int(entry)):
            found[int(entry)] = env.get("MESOSLIKE_TASK_ID", "")
    return found


def kill_task_processes(sandbox_root: str | Path) -> None:
    """SIGKILL every task process (and its process group) left under ``sandbox_root``."""
    for pid in task_processes(sandbox_root, shared_supervisors=True):
        stat = _proc_stat(pid)
        try:
            if stat is not None and stat[1] == pid:   # a task leads its own group: take the group
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@contextlib.contextmanager
def _sigint_not_ignored():
    """Start children with SIGINT at its default, as a terminal's foreground job has it.

    A shell starts background jobs (``pytest ... &``, CI runners) with SIGINT
    ignored, and an ignored signal stays ignored across ``exec``: Python then
    never turns Ctrl-C into ``KeyboardInterrupt``. A handler, unlike SIG_IGN,
    is reset to the default by ``exec``, so install one for the moment of the
    ``Popen`` (``preexec_fn`` is not safe with the drivers' threads running)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.SIG_IGN):
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class Proc:
    """A cluster process started in its own session (pgid == pid)."""

    def __init__(self, name: str, args: list[str], log_dir: Path) -> None:
        self.name = name
        self.args = args
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")
        with _sigint_not_ignored():
            self.popen = subprocess.Popen([sys.executable, "-m", "mesoslike", *args], cwd=str(REPO),
                                          env=child_env(), stdin=subprocess.DEVNULL, stdout=self._log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.pgid = self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the leader."""
        self.signal_group(signal.SIGKILL)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()

    def output(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""


# ---------------------------------------------------------------- cluster
class ProcessSet:
    """Processes and scheduler drivers a test started; :meth:`close` stops
    them all (drivers first, then the process groups, then any task process
    left under ``work_root``)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[Proc] = []
        self.agents: dict[str, Proc] = {}
        self.drivers: list[SchedulerDriver] = []

    @property
    def work_root(self) -> Path:
        """Every sandbox of these processes lies under here."""
        return self.tmp_path / "work"

    def _start(self, name: str, args: list[str]) -> Proc:
        proc = Proc(name, args, self.tmp_path)
        self.procs.append(proc)
        return proc

    def process_diagnostics(self, tail: int = 4000) -> list[str]:
        parts = []
        for proc in self.procs:
            state = "running" if proc.running() else f"exited {proc.popen.returncode}"
            parts.append(f"--- {proc.name} ({state}) {' '.join(proc.args)}\n{proc.output(tail)}")
        return parts

    def close(self) -> None:
        for driver in self.drivers:
            try:
                driver.stop()
            except Exception:  # noqa: BLE001 (cleanup must go on)
                pass
        for proc in reversed(self.procs):
            proc.signal_group(signal.SIGCONT)  # a frozen process must be able to die and be reaped
            proc.kill()
        kill_task_processes(self.work_root)
        destroy_containers_under(self.work_root)  # the cgroups of tasks whose supervisors were killed


class Cluster(ProcessSet):
    """One master (or one ``local``) and its agents as real processes,
    authenticated as a real cluster is (docs/security.rst): the master with
    its key and credentials, agents and drivers with theirs and the master's
    public key; ``mesoslike local`` makes its own under its work dir."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.master: Proc | None = None
        self.port = self.http_port = 0
        self.keys = SecuredKeys(tmp_path / "security")
        #: the client's secret and the master's public certificate (``local``'s once it runs)
        self.client_key, self.master_key = self.keys.secret("fwA"), self.keys.public("master")
        self.token = self.keys.token

    def security_args(self) -> list[str]:
        """The master's flags of an authenticated cluster."""
        return ["--key", self.keys.secret("master"), "--credentials", str(self.keys.credentials)]

    def peer_keys(self) -> dict:
        """``Client`` keywords of a raw wire peer with an agent's key (an
        authenticated peer that may still send anything)."""
        from mesoslike.transport import load_public_key

        return {"keys": self.keys.keys("agent1"), "server_key": load_public_key(self.master_key)}

    def agent_env(self) -> dict[str, str]:
        """The environment of a process of simulated agents (its clients read the keys from it)."""
        return dict(child_env(), MESOSLIKE_KEY=self.keys.secret("agent1"), MESOSLIKE_MASTER_KEY=self.master_key)

    def client_env(self) -> dict[str, str]:
        """The environment of a CLI client (``mesoslike state``, ``run``) of this cluster."""
        return dict(child_env(), MESOSLIKE_KEY=self.client_key, MESOSLIKE_MASTER_KEY=self.master_key)

    # addresses
    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    # processes
    def _start_listening(self, name: str, make_args: Callable[[int, int], list[str]], timeout: float) -> Proc:
        """Start a process that serves /state on fresh ports; retry with other
        ports if it dies before answering (another process took a port)."""
        for attempt in range(3):
            self.port = free_port()
            self.http_port = free_port()
            while self.http_port == self.port:
                self.http_port = free_port()
            proc = self._start(name if attempt == 0 else f"{name}-{attempt}", make_args(self.port, self.http_port))

            def served_or_died(proc: Proc = proc) -> str | None:
                if not proc.running():
                    return "died"
                return "served" if http_get(self.http + "/state", timeout=1.0)[0] == 200 else None

            if wait_until(served_or_died, timeout, f"{name} to serve {self.http}/state", interval=0.05,
                          diagnostics=self.diagnostics) == "served":
                return proc
            proc.kill()
        pytest.fail(f"{name} died before serving {self.http}/state, three times\n{self.diagnostics()}")

    def start_master(self, *extra: str, timeout: float = 20.0) -> Proc:
        self.master = self._start_listening(
            "master",
            lambda port, http_port: ["master", "--ip", "127.0.0.1", "--port", str(port), "--http-port",
                                     str(http_port), *FAST_MASTER_ARGS, *self.security_args(), *extra],
            timeout)
        return self.master

    def restart_master(self, *extra: str) -> Proc:
        """Kill the master -9 and start another on its ports (``extra``: its
        flags, e.g. the same ``--work-dir``); not waited for."""
        self.master.signal_group(signal.SIGKILL)
        wait_until(lambda: not self.master.running(), 10, "the master to die")
        self.master = self._start("master-restarted", [
            "master", "--ip", "127.0.0.1", "--port", str(self.port), "--http-port", str(self.http_port),
            *FAST_MASTER_ARGS, *extra, *self.security_args()])
        return self.master

    def start_local(self, *extra: str, timeout: float = 30.0) -> Proc:
        """``mesoslike local`` (master and agents in one process)."""
        self.master = self._start_listening(
            "local",
            lambda port, http_port: ["local", "--port", str(port), "--http-port", str(http_port),
                                     "--work-dir", str(self.work_root), *FAST_MASTER_ARGS, *extra],
            timeout)
        if "--insecure" not in extra:
            keys = self.work_root / "keys"
            self.client_key, self.master_key = str(keys / "client.key_secret"), str(keys / "master.key")
            self.token = (keys / "operator.token").read_text().strip()
        return self.master

    def start_agent(self, hostname: str, resources: str, attributes: str = "", wait: bool = True,
                    timeout: float = 20.0, extra: tuple[str, ...] = ()) -> Proc:
        args = ["agent", "--master", self.address, "--resources", resources, "--hostname", hostname,
                "--work-dir", str(self.work_root / hostname), "--key", self.keys.secret("agent1"),
                "--master-key", self.master_key, *extra]
        if attributes:
            args += ["--attributes", attributes]
        proc = self._start(f"agent-{hostname}", args)
        self.agents[hostname] = proc
        if wait:
            self.wait_for_agents([hostname], timeout=timeout)
        return proc

    def kill_agent(self, hostname: str) -> None:
        """SIGKILL an agent's process group (its tasks, in their own sessions, survive as orphans)."""
        self.agents[hostname].signal_group(signal.SIGKILL)
        self.agents[hostname].popen.wait(timeout=10)

    # state
    def state(self) -> dict:
        status, _, body = http_get(self.http + "/state")
        if status != 200:
            raise ValueError(f"GET /state answered {status}: {body[:200]}")
        return json.loads(body)

    def agent_id(self, hostname: str) -> str:
        return next(a["id"] for a in self.state()["agents"] if a["hostname"] == hostname)

    def framework(self, name: str) -> dict | None:
        return next((f for f in self.state()["frameworks"] if f["name"] == name), None)

    def wait_for_agents(self, hostnames: Iterable[str], timeout: float = 20.0) -> dict:
        wanted = set(hostnames)

        def ready():
            doc = self.state()
            return doc if wanted <= {a["hostname"] for a in doc["agents"]} else None
        return self.wait_until(ready, timeout, f"agents {sorted(wanted)} in /state")

    def wait_until(self, predicate: Callable[[], object], timeout: float, what: str):
        return wait_for(predicate, timeout, what, diagnostics=self.diagnostics)

    # frameworks
    def driver(self, scheduler: Scheduler, name: str, start: bool = True, **kwargs) -> SchedulerDriver:
        """A driver for ``scheduler`` against this cluster; stopped at cleanup."""
        framework = kwargs.pop("framework", None) or FrameworkInfo(name=name, role=kwargs.pop("role", "*"))
        kwargs.setdefault("stop_timeout", 5.0)
        kwargs.setdefault("key", self.client_key)
        kwargs.setdefault("master_key", self.master_key)
        driver = SchedulerDriver(scheduler, framework, self.address, **kwargs)
        self.drivers.append(driver)
        if start:
            driver.start()
        return driver

    # diagnostics and cleanup
    def diagnostics(self) -> str:
        parts = self.process_diagnostics()
        try:
            parts.append("--- /state\n" + json.dumps(self.state(), indent=1)[-4000:])
        except Exception as exc:  # noqa: BLE001 (diagnostics only)
            parts.append(f"--- /state unavailable: {exc!r}")
        return "\n".join(parts)


@pytest.fixture
def cluster(tmp_path):
    """A :class:`Cluster` (nothing started yet); everything it started is killed afterwards."""
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


# -------------------------------------------------------------- frameworks
class RecordingScheduler(Scheduler):
    """Records every callback as ``(monotonic time, name, payload)``.

    Subclasses put their policy in ``on_offers`` / ``on_status``; exceptions
    they raise propagate to the driver (which reports them through ``error``).
    """

    def __init__(self) -> None:
        self.events: list[tuple[float, str, object]] = []
        self.cond = threading.Condition()
        self.framework_id = ""

    def _record(self, name: str, payload: object = None) -> None:
        with self.cond:
            self.events.append((time.monotonic(), name, payload))
            self.cond.notify_all()

    def of(self, name: str) -> list:
        with self.cond:
            return [payload for _, name_, payload in self.events if name_ == name]

    def timed(self, name: str) -> list[tuple[float, object]]:
        with self.cond:
            return [(t, payload) for t, name_, payload in self.events if name_ == name]

    def statuses(self, task_id: str | None = None) -> list:
        return [s for s in self.of("status_update") if task_id is None or s.task_id == task_id]

    def wait(self, predicate: Callable[[], object], timeout: float, what: str,
             diagnostics: Callable[[], str] | None = None):
        """Wait until ``predicate()`` (checked on every callback) is truthy; return it."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    names = [name for _, name, _ in self.events]
                    extra = "\n" + diagnostics() if diagnostics is not None else ""
                    pytest.fail(f"timed out after {timeout:g}s waiting for {what}; callbacks: {names}"
                                f"\nstatuses: {self.of('status_update')}\nerrors: {self.of('error')}{extra}")
                self.cond.wait(min(left, 0.1))

    # the callbacks
    def registered(self, driver, framework_id, master_info):
        self.framework_id = framework_id
        self._record("registered", framework_id)

    def reregistered(self, driver, master_info):
        self._record("reregistered", master_info)

    def disconnected(self, driver):
        self._record("disconnected")

    def resource_offers(self, driver, offers):
        self._record("resource_offers", list(offers))
        self.on_offers(driver, offers)

    def offer_rescinded(self, driver, offer_id):
        self._record("offer_rescinded", offer_id)

    def status_update(self, driver, status):
        self._record("status_update", status)
        self.on_status(driver, status)

    def framework_message(self, driver, agent_id, data):
        self._record("framework_message", (agent_id, data))

    def agent_lost(self, driver, agent_id):
        self._record("agent_lost", agent_id)

    def error(self, driver, message):
        self._record("error", message)

    # policy hooks
    def on_offers(self, driver, offers) -> None:
        pass

    def on_status(self, driver, status) -> None:
        pass
