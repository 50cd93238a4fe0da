"""A network of Linux network namespaces for the partition suite (tests/test_partitions.py).

Every node (a ZooKeeper server, a master, an agent, a framework, the observer) lives in a network
namespace of its own, joined to a *router* namespace by a veth pair on private addresses that exist
only inside them (node ``i``: ``10.213.i.2/24``, its router side ``10.213.i.1/24``); the router
forwards between them. Nothing is added to the machine's own namespace, and :meth:`Lab.close`
deletes every namespace it made (their veths go with them) and ends every process it started in
them — also when a test failed.

Faults (docs/reliability.rst, "Partitions"):

* :meth:`Lab.cut` / :meth:`Lab.heal` — ``iptables -I FORWARD -s A -d B -j DROP`` (both ways) in the
  router: some nodes cannot reach some others, everyone else still can;
* :meth:`Lab.link_down` / :meth:`Lab.link_up` — ``ip link set eth0 down`` inside a node;
* :meth:`Lab.degrade` — packet loss with ``iptables -m statistic --mode random`` and a constant delay
  with an NFQUEUE program of ours (tests/nfqueue_delayer.py): this kernel has no ``sch_netem``, so
  ``tc netem`` is not available.

The test process itself stays in the machine's namespace; what it reads from the nodes (HTTP,
ZooKeeper's four-letter words) goes through :class:`Observer`, a thread that entered the observer
node's namespace with ``setns(2)`` (a network namespace is per thread).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, TypeVar

import attrs

from environment import unavailable
from waiting import wait_until

T = TypeVar("T")

SUBNET = "10.213"
CLONE_NEWNET = 0x40000000
HERE = Path(__file__).resolve().parent


def require_lab() -> None:
    """Skip (fail under CI=true) unless this process may make network namespaces and has iptables."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    for tool in ("ip", "iptables"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            missing.append(tool)
    if missing:
        unavailable(f"the partition suite needs {', '.join(missing)} (`make test` installs iptables as root)")


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


@attrs.define
class Node:
    name: str
    namespace: str
    index: int

    @property
    def ip(self) -> str:
        return f"{SUBNET}.{self.index}.2"

    @property
    def gateway(self) -> str:
        return f"{SUBNET}.{self.index}.1"


class Lab:
    """The namespaces, the router, the processes started in them, and the faults in force."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.tag = f"ml{os.getpid()}"
        sweep_stale()
        self.router = f"{self.tag}-router"
        self.nodes: dict[str, Node] = {}
        self.processes: list[subprocess.Popen] = []
        self._rules: list[tuple[str, ...]] = []
        self._delayer: subprocess.Popen | None = None
        self._made: list[str] = []
        self._namespace(self.router)
        run("ip", "netns", "exec", self.router, "sysctl", "-qw", "net.ipv4.ip_forward=1")

    def _namespace(self, name: str) -> None:
        run("ip", "netns", "add", name)
        self._made.append(name)
        run("ip", "-n", name, "link", "set", "lo", "up")

    # ------------------------------------------------------------ topology
    def add(self, name: str) -> Node:
        """A node in a namespace of its own, routed through the router."""
        node = Node(name, f"{self.tag}-{name}", len(self.nodes) + 1)
        self._namespace(node.namespace)
        router_side = f"r{node.index}"
        run("ip", "-n", self.router, "link", "add", router_side, "type", "veth", "peer", "name", "eth0",
            "netns", node.namespace)
        run("ip", "-n", self.router, "addr", "add", f"{node.gateway}/24", "dev", router_side)
        run("ip", "-n", self.router, "link", "set", router_side, "up")
        run("ip", "-n", node.namespace, "addr", "add", f"{node.ip}/24", "dev", "eth0")
        self._link(node, up=True)
        self.nodes[name] = node
        return node

    def _link(self, node: Node, up: bool) -> None:
        run("ip", "-n", node.namespace, "link", "set", "eth0", "up" if up else "down")
        if up:   # the default route went with the link
            run("ip", "-n", node.namespace, "route", "replace", "default", "via", node.gateway)

    # ----------------------------------------------------------- processes
    def run_in(self, node: Node, argv: list[str], timeout: float = 60.0,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """``argv`` inside the node's namespace, to its end."""
        return subprocess.run(["ip", "netns", "exec", node.namespace, *argv], capture_output=True, text=True,
                              timeout=timeout, env=env)

    def start(self, node: Node, argv: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """``argv`` inside the node's namespace (``ip netns exec`` execs it: the pid is the program's),
        in a session of its own, its output in ``<directory>/<log>``."""
        with open(self.directory / log, "ab") as out:
            process = subprocess.Popen(["ip", "netns", "exec", node.namespace, *argv], stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.processes.append(process)
        return process

    # -------------------------------------------------------------- faults
    def _router_iptables(self, *rule: str, add: bool = True) -> None:
        run("ip", "netns", "exec", self.router, "iptables", "-I" if add else "-D", "FORWARD", *rule)

    def cut(self, these: list[Node], those: list[Node]) -> list[tuple[str, ...]]:
        """No packet between any of ``these`` and any of ``those`` (both ways); others pass. Returns
        the rules, for :meth:`heal`."""
        rules = []
        for a in these:
            for b in those:
                for source, target in ((a, b), (b, a)):
                    rule = ("-s", source.ip, "-d", target.ip, "-j", "DROP")
                    self._router_iptables(*rule)
                    rules.append(rule)
        self._rules += rules
        return rules

    def heal(self, rules: list[tuple[str, ...]]) -> None:
        for rule in rules:
            self._router_iptables(*rule, add=False)
            self._rules.remove(rule)

    def link_down(self, node: Node) -> None:
        self._link(node, up=False)

    def link_up(self, node: Node) -> None:
        self._link(node, up=True)

    def degrade(self, loss: float, delay: float, spare: list[Node]) -> None:
        """Drop ``loss`` of the packets between nodes at random and delay the rest by ``delay``
        seconds, on every link but those of ``spare`` (the observer)."""
        self._delayer = subprocess.Popen(
            ["ip", "netns", "exec", self.router, sys.executable, str(HERE / "nfqueue_delayer.py"), "--queue", "7",
             "--delay", str(delay)], stdout=open(self.directory / "delayer.log", "ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        self.processes.append(self._delayer)
        wait_for_file_line(self.directory / "delayer.log", "delaying", 10.0)
        for rule in (("-j", "NFQUEUE", "--queue-num", "7", "--queue-bypass"),
                     ("-m", "statistic", "--mode", "random", "--probability", str(loss), "-j", "DROP")):
            self._router_iptables(*rule)
            self._rules.append(rule)
        for node in spare:   # inserted last: first in the chain
            for rule in (("-s", node.ip, "-j", "ACCEPT"), ("-d", node.ip, "-j", "ACCEPT")):
                self._router_iptables(*rule)
                self._rules.append(rule)

    def restore(self) -> None:
        """Every fault off; the delayer stopped."""
        for rule in list(reversed(self._rules)):
            self._router_iptables(*rule, add=False)
        self._rules.clear()
        if self._delayer is not None:
            stop(self._delayer, signal.SIGTERM, 10.0)
            self._delayer = None
        for node in self.nodes.values():
            self._link(node, up=True)

    # ------------------------------------------------------------- cleanup
    def close(self) -> None:
        """End every process started here and any left in the namespaces; delete the namespaces."""
        for process in reversed(self.processes):
            for signum in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(process.pid, signum)
                except (ProcessLookupError, PermissionError):
                    pass
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for name in reversed(self._made):
            pids = run("ip", "netns", "pids", name, check=False).stdout.split()
            for pid in pids:   # tasks the agents started: theirs, in our namespaces
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            run("ip", "netns", "del", name, check=False)
        self._made.clear()


def sweep_stale() -> None:
    """Delete the namespaces an earlier run of this suite left when it was killed outright (named
    ``ml<pid>-...`` after a test process that no longer exists), ending what still runs in them."""
    for line in run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(r"ml(\d+)-[a-z0-9-]+", name)
        if match is None or Path(f"/proc/{match.group(1)}").exists():
            continue
        for pid in run("ip", "netns", "pids", name, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        run("ip", "netns", "del", name, check=False)


def stop(process: subprocess.Popen, signum: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Signal a process (its group) and wait for it; SIGKILL if it does not end in time."""
    for sig in (signum, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_for_file_line(path: Path, text: str, timeout: float) -> None:
    wait_until(lambda: text in path.read_text(errors="replace"), timeout, f"{path} to say {text!r}", interval=0.05)


class Observer:
    """A thread inside a node's namespace, doing the test's reads there (one at a time)."""

    def __init__(self, node: Node) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="observer",
                                                           initializer=_enter, initargs=(node.namespace,))

    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        return self._pool.submit(fn).result(timeout)

    def get_json(self, url: str, timeout: float = 2.0) -> dict:
        def get() -> dict:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return json.loads(response.read())
        return self.call(get, timeout + 5.0)

    def try_json(self, url: str, timeout: float = 1.0) -> dict | None:
        try:
            return self.get_json(url, timeout)
        except (OSError, ValueError, urllib.error.URLError, concurrent.futures.TimeoutError):
            return None

    def four_letter_word(self, ip: str, port: int, word: str) -> str:
        def ask() -> str:
            try:
                with socket.create_connection((ip, port), timeout=1.0) as sock:
                    sock.sendall(word.encode())
                    chunks = []
                    while chunk := sock.recv(4096):
                        chunks.append(chunk)
                return b"".join(chunks).decode(errors="replace")
            except OSError:
                return ""
        return self.call(ask)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _enter(namespace: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace}")
    finally:
        os.close(fd)
