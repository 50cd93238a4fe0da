"""Real ZooKeeper servers for the HA tests: a standalone server and a 3-node ensemble.

Each server is ``java -cp <classpath> org.apache.zookeeper.server.quorum.QuorumPeerMain
zoo.cfg`` from Debian's ``zookeeper`` package, in its own session (so its whole
process group can be signalled), with its own data dir under the test's temp
dir, free ports on 127.0.0.1, the admin server off, every four-letter word
allowed, and a 200 ms tick so that sessions can be short. It logs to a file in
its dir (``zookeeper.log``; ``console.log`` has anything the JVM printed).

Readiness is the ``srvr`` four-letter word answering with a ``Mode:`` line
(standalone, leader or follower): a server that answers but has no quorum is
not ready.

Without the jar the tests skip — except under ``CI=true``, where they fail:
CI must never skip them (``make test`` installs the package when missing).

Fixtures (import them into a test module):

* ``zookeeper_server`` — one standalone server per test module.
* ``zookeeper`` — the same server, restarted first if a previous test left it
  stopped or killed.
* ``zookeeper_ensemble`` — three servers in one ensemble, per test module.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from environment import unavailable
from waiting import wait_until

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# The jar's manifest Class-Path names the rest of its dependencies. These two
# only bind slf4j to log4j so that the server logs to a file (without them it
# logs nothing at all); they are added when present.
LOG_BINDING_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar"))
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
TICK_MILLIS = 200
START_DEADLINE = 30.0
STOP_DEADLINE = 10.0

_LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={log_file}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{{ISO8601}} [myid:%X{{myid}}] %-5p [%t:%C{{1}}@%L] - %m%n
"""

# Every process this module started, so that even an aborted run kills them.
_LIVE_PROCESSES: set[subprocess.Popen] = set()


def java() -> str | None:
    return shutil.which("java") or ("/usr/bin/java" if os.access("/usr/bin/java", os.X_OK) else None)


def zookeeper_classpath() -> str:
    """The server's classpath: the Debian jar (its manifest pulls in its
    dependencies) plus the slf4j->log4j binding when installed."""
    return os.pathsep.join(str(jar) for jar in (ZOOKEEPER_JAR, *LOG_BINDING_JARS) if jar.exists())


def require_zookeeper() -> None:
    """Skip the test if ZooKeeper or Java is missing — or fail it under CI=true."""
    missing = [what for what, ok in ((str(ZOOKEEPER_JAR), ZOOKEEPER_JAR.exists()), ("java", java() is not None))
               if not ok]
    if not missing:
        return
    message = (f"ZooKeeper tests need {' and '.join(missing)} "
               f"(Debian: apt-get install zookeeper; `make test` installs it when run as root)")
    unavailable(message)


def free_port() -> int:
    """A port that was free a moment ago (bind to 0, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports."""
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


def four_letter_word(port: int, word: str, timeout: float = 1.0, address: str = "127.0.0.1") -> str:
    """Send a four-letter command to address:port and return the answer ('' if none)."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


class ZooKeeperNode:
    """One ZooKeeper server process with its own dir, config and ports."""

    def __init__(self, directory: Path, client_port: int, myid: int | None = None,
                 peers: list[tuple[int, int, int]] | None = None, address: str = "127.0.0.1",
                 peer_addresses: dict[int, str] | None = None, prefix: tuple[str, ...] = (),
                 ask: Callable[[str, int, str], str] | None = None, sync_limit: int = 10,
                 init_limit: int = 25) -> None:
        """``peers``: (myid, peer port, election port) of every ensemble member, or None for standalone.
        ``address``: where it serves clients, ``peer_addresses``: where each member is (by myid;
        127.0.0.1 if not given), ``prefix``: what its command runs under (``ip netns exec NS``),
        ``ask(address, port, word)``: how the test sends it a four-letter word (tests/partition_lab.py:
        from inside a network namespace). ``sync_limit``, ``init_limit``: in ticks (200 ms), how
        long a follower may lag behind or take to join its leader."""
        self.directory = directory
        self.client_port = client_port
        self.address = address
        self._peer_addresses = peer_addresses or {}
        self._prefix = prefix
        self._ask = ask or (lambda address, port, word: four_letter_word(port, word, address=address))
        self._limits = (init_limit, sync_limit)
        self.myid = myid
        self.process: subprocess.Popen | None = None
        self.config_file = directory / "zoo.cfg"
        self.log_file = directory / "zookeeper.log"
        self.console_file = directory / "console.log"
        (directory / "data").mkdir(parents=True, exist_ok=True)
        self._write_config(peers)

    def _write_config(self, peers: list[tuple[int, int, int]] | None) -> None:
        lines = [
            f"tickTime={TICK_MILLIS}",
            f"initLimit={self._limits[0]}",
            f"syncLimit={self._limits[1]}",
            f"dataDir={self.directory / 'data'}",
            f"clientPort={self.client_port}",
            f"clientPortAddress={self.address}",
            # tests ask for sessions of a few seconds; the default cap is 20 ticks
            "maxSessionTimeout=60000",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
        ]
        for myid, peer_port, election_port in peers or ():
            lines.append(f"server.{myid}={self._peer_addresses.get(myid, '127.0.0.1')}:{peer_port}:{election_port}")
        if self.myid is not None:
            (self.directory / "data" / "myid").write_text(f"{self.myid}\n")
        self.config_file.write_text("\n".join(lines) + "\n")
        (self.directory / "log4j.properties").write_text(_LOG4J_PROPERTIES.format(log_file=self.log_file))

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def serving(self) -> bool:
        """Whether the server answers requests (in a quorum, if in an ensemble)."""
        return "Mode:" in self._ask(self.address, self.client_port, "srvr")

    def launch(self) -> None:
        """Start the process (no waiting); a running one is left alone."""
        if self.running:
            return
        # 512 MiB: tests/test_zookeeper_registry_layout.py stores registries of 40,000 agents in 4,096 shards
        # (128 MiB ran out of heap, and the next test could not connect)
        command = [*self._prefix, java(), "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   f"-Dlog4j.configuration=file:{self.directory / 'log4j.properties'}",
                   f"-Dzookeeper.log.dir={self.directory}",
                   "-cp", zookeeper_classpath(), MAIN_CLASS, str(self.config_file)]
        with open(self.console_file, "ab") as console:
            self.process = subprocess.Popen(command, cwd=self.directory, stdin=subprocess.DEVNULL, stdout=console,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        _LIVE_PROCESSES.add(self.process)

    def wait_serving(self, deadline: float) -> None:
        """Wait until the server serves; fail the test, with its log's tail, at ``deadline``."""
        def serving() -> bool:
            if not self.running:
                pytest.fail(f"ZooKeeper on port {self.client_port} exited:\n{self.log_tail()}", pytrace=False)
            return self.serving()

        wait_until(serving, max(0.0, deadline - time.monotonic()), f"ZooKeeper on port {self.client_port} to serve",
                   interval=0.05, diagnostics=self.log_tail)

    def start(self) -> None:
        """Start (on the same port and data) and wait until it serves."""
        self.launch()
        self.wait_serving(time.monotonic() + START_DEADLINE)

    def kill(self) -> None:
        """SIGKILL the process group: no goodbye to clients beyond the sockets closing."""
        self._signal_and_wait(signal.SIGKILL, STOP_DEADLINE)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if not self._signal_and_wait(signal.SIGTERM, STOP_DEADLINE):
            self.kill()

    def _signal_and_wait(self, signum: int, timeout: float) -> bool:
        process = self.process
        if process is None or process.poll() is not None:
            return True
        try:
            os.killpg(process.pid, signum)  # start_new_session: the pgid is the pid
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        _LIVE_PROCESSES.discard(process)
        return True

    def log_tail(self, lines: int = 30) -> str:
        text = ""
        for path in (self.console_file, self.log_file):
            if path.exists():
                text += f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text


class ZooKeeperServer:
    """A standalone server: ``.hosts``, ``.url(path)``, ``.start()``, ``.stop()``, ``.kill()``."""

    def __init__(self, directory: Path) -> None:
        self.node = ZooKeeperNode(directory, free_port())
        self.hosts = f"127.0.0.1:{self.node.client_port}"

    def url(self, path: str) -> str:
        return f"zk://{self.hosts}/{path.lstrip('/')}"

    @property
    def running(self) -> bool:
        return self.node.running

    def start(self) -> None:
        self.node.start()

    def stop(self) -> None:
        self.node.stop()

    def kill(self) -> None:
        self.node.kill()


class ZooKeeperEnsemble:
    """Three servers in one ensemble: ``.hosts`` lists all three."""

    def __init__(self, directory: Path, size: int = 3) -> None:
        ports = free_ports(3 * size)
        peers = [(i + 1, ports[size + i], ports[2 * size + i]) for i in range(size)]
        self.nodes = [ZooKeeperNode(directory / f"node{i + 1}", ports[i], myid=i + 1, peers=peers)
                      for i in range(size)]
        self.hosts = ",".join(f"127.0.0.1:{node.client_port}" for node in self.nodes)

    def url(self, path: str) -> str:
        return f"zk://{self.hosts}/{path.lstrip('/')}"

    def start(self, index: int) -> None:
        self.nodes[index].start()

    def kill(self, index: int) -> None:
        self.nodes[index].kill()

    def stop(self, index: int) -> None:
        self.nodes[index].stop()

    def start_all(self) -> None:
        """Start every node (quorum needs a majority up, so launch all, then wait)."""
        for node in self.nodes:
            node.launch()
        deadline = time.monotonic() + START_DEADLINE
        for node in self.nodes:
            node.wait_serving(deadline)

    def stop_all(self) -> None:
        for node in self.nodes:
            node.stop()


@atexit.register
def _kill_leftovers() -> None:
    for process in list(_LIVE_PROCESSES):
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def zookeeper_server(tmp_path_factory):
    """One standalone server for the test module."""
    require_zookeeper()
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def zookeeper(zookeeper_server):
    """The module's standalone server, running (restarted if a previous test left it down).
    Tests share it: each uses its own znode paths."""
    require_zookeeper()
    if not zookeeper_server.running:
        zookeeper_server.start()
    return zookeeper_server


@pytest.fixture(scope="module")
def zookeeper_ensemble(tmp_path_factory):
    """A 3-node ensemble for the test module."""
    require_zookeeper()
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zookeeper-ensemble"))
    ensemble.start_all()
    try:
        yield ensemble
    finally:
        for node in ensemble.nodes:
            node.kill()
