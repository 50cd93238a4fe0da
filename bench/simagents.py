#!/usr/bin/env python3
"""Simulated agents on the master's real wire, tens of thousands per process.

Each simulated agent is one TCP connection to the leading master that
speaks ZMTP 3.0 (ZeroMQ's wire protocol, NULL mechanism) as the real
agent's DEALER socket does: the greeting, a ``READY`` command naming the
socket type and a routing identity of its own, then one frame per message,
each the product's encoding (``mesoslike.wire.encode``). The master's
ROUTER cannot tell them from real agents. What they do:

* (re-)register with ``REREGISTER_AGENT`` listing their running tasks
  (``RunningTask`` entries spread over the frameworks; a master that does
  not know the agent admits it with them), and retry with the real agent's
  back-off (read from ``AgentCore``'s defaults: 10 s, its maximum,
  jittered) until ``AGENT_REGISTERED`` arrives — over the same connection,
  where the real agent makes a fresh one under the same identity (the
  master's ROUTER hands the identity over: to the master's loop the retry
  is the same frame from the same peer);
* answer every ``PING`` with a ``PONG``;
* follow the leader through a ``mesoslike.locator`` (a ``zk://`` group or a
  fixed ``tcp://`` address): when it changes, every connection is closed
  and made anew to the new leader, all at once, as real agents do when
  ZooKeeper tells them.

Why not one ZeroMQ DEALER per agent (as ``tests/stress_helpers.py`` and
this benchmark's first version had): a DEALER with its monitor costs
~290 µs of CPU to make and ~50 KB of memory, so 100,000 agents took ~29 CPU
seconds to reconnect and ~5 GB — on the two CPUs the master under test
shares. Here one ``epoll`` loop drives every connection of a process
(~20 µs of CPU to reconnect one agent). One difference with the real agent,
to keep the CPU for the master: when the connection drops and the locator
names no other leader, a simulated agent tries the same address again after
``RECONNECT_S`` (the real DEALER tries every 0.1-2 s; a dead master's kernel
refuses those at no cost to the master).

Connections come from 127.0.0.2-127.0.0.33 (``SOURCE_ADDRESSES``): the
kernel has ~28,000 ephemeral ports per source address, too few for
100,000 agents of one master from one address.

Run as a worker (its parent reads the JSON lines it prints)::

    python bench/simagents.py --master zk://127.0.0.1:2181/mesoslike --first 0 --count 25000 \\
        --tasks-per-agent 10 --frameworks 4

Lines: ``{"event": "ready", ...}`` once the frames are made;
``{"event": "round", ...}`` each time every agent of the process is
registered with a new leader (times on the machine's monotonic clock);
``{"event": "stats", ...}`` on SIGUSR1 (what arrived since the start).
SIGTERM ends it.
"""

from __future__ import annotations

import argparse
import collections
import errno
import heapq
import json
import os
import random
import resource
import select
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))   # run from a checkout without installing

#: every agent's resources
AGENT_RESOURCES = "cpus:8;mem:16384"


def _real_agent_backoff() -> tuple[tuple[float, float], float]:
    """The real agent's registration back-off, read from its defaults
    (``mesoslike.agent.core.AgentCore``: ``register_backoff`` doubling up to
    ``register_backoff_max``, each delay drawn from ``[(1 - register_jitter)
    x d, d]``), so that the simulated agents retry exactly as often as real
    ones do — never a faster or a gentler agent than the product's."""
    import inspect

    from mesoslike.agent.core import AgentCore

    defaults = inspect.signature(AgentCore.__init__).parameters
    return ((float(defaults["register_backoff"].default), float(defaults["register_backoff_max"].default)),
            float(defaults["register_jitter"].default))


def _real_agent_standby_retry() -> float:
    from mesoslike.agent.core import STANDBY_RETRY
    return STANDBY_RETRY


#: the real agent's registration back-off (today 10 s, its maximum: every delay 5-10 s, jitter 0.5)
AGENT_BACKOFF, AGENT_JITTER = _real_agent_backoff()
#: and its retry after a master that does not lead refused it (ERROR ``standby``): within [0.5, 1] x
#: this, doubling while refusals go on (``mesoslike.agent.core.STANDBY_RETRY``)
STANDBY_RETRY = _real_agent_standby_retry()
#: after a connection drops with no new leader named: try the same address again this late
RECONNECT_S = 5.0
#: a mux stream takes registrations this many bytes at a time (see MuxAgents)
STREAM_CHUNK = 1 << 20
#: the source addresses connections are spread over (agent i uses the (i mod 32)-th)
SOURCE_ADDRESSES = [f"127.0.0.{2 + k}" for k in range(32)]

# ------------------------------------------------------------------ ZMTP 3.0
#: signature, version 3.0, mechanism NULL, as-server 0, filler
GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x01" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
_MORE, _LONG, _COMMAND = 0x01, 0x02, 0x04


def zmtp_frame(body: bytes, command: bool = False) -> bytes:
    """One ZMTP frame (the last of its message) holding ``body``."""
    flags = _COMMAND if command else 0
    if len(body) > 255:
        return bytes([flags | _LONG]) + len(body).to_bytes(8, "big") + body
    return bytes([flags, len(body)]) + body


def _property(name: bytes, value: bytes) -> bytes:
    return bytes([len(name)]) + name + len(value).to_bytes(4, "big") + value


def zmtp_hello(identity: bytes) -> bytes:
    """What a DEALER with routing id ``identity`` sends first: the greeting and READY."""
    ready = b"\x05READY" + _property(b"Socket-Type", b"DEALER") + _property(b"Identity", identity)
    return GREETING + zmtp_frame(ready, command=True)


def zmtp_frames(buffer: bytearray) -> Iterator[tuple[bool, bytes]]:
    """(is a command, body) of every whole frame at the start of ``buffer``,
    taken out of it (a partial frame stays)."""
    taken = 0
    size_of = len(buffer)
    while size_of - taken >= 2:
        flags = buffer[taken]
        if flags & _LONG:
            if size_of - taken < 9:
                break
            size, header = int.from_bytes(buffer[taken + 1:taken + 9], "big"), 9
        else:
            size, header = buffer[taken + 1], 2
        end = taken + header + size
        if end > size_of:
            break
        yield bool(flags & _COMMAND), bytes(buffer[taken + header:end])
        taken = end
    del buffer[:taken]


# ------------------------------------------------------------------- the plan
def task_plan(first: int, count: int, tasks_per_agent: int, frameworks: int):
    """The agents ``first .. first+count-1``: (agent id, hostname, [(framework index, task id)])."""
    for index in range(first, first + count):
        tasks = []
        for k in range(tasks_per_agent):
            number = index * tasks_per_agent + k
            tasks.append((number % frameworks, f"t{number:08d}"))
        yield f"sim-{index:06d}", f"sim-{index:06d}.bench", tasks


def task_resources_for(tasks_per_agent: int) -> str:
    """Each task's share: the tasks of an agent use half of AGENT_RESOURCES' cpus and mem."""
    per = max(tasks_per_agent, 1)
    return f"cpus:{4.0 / per:.4g};mem:{8192 // per}"


def framework_info(j: int):
    from mesoslike import FrameworkInfo
    return FrameworkInfo(name=f"bench-{j}", id=f"fw-{j}", failover_timeout=3600.0)


def registrations(first: int, count: int, tasks_per_agent: int, frameworks: int,
                  resources: str = AGENT_RESOURCES) -> tuple[list[str], list[bytes], list[bytes]]:
    """(agent ids, their REREGISTER_AGENT frames, their PONG frames)."""
    from mesoslike.resources import Resources
    from mesoslike.wire import AgentInfo, TaskInfo, encode
    from mesoslike.wire import messages as m

    agent_resources = Resources.parse(resources)
    task_resources = Resources.parse(task_resources_for(tasks_per_agent))
    infos = [framework_info(j) for j in range(frameworks)]
    ids, reregister, pong = [], [], []
    for agent_id, hostname, tasks in task_plan(first, count, tasks_per_agent, frameworks):
        running = [m.RunningTask(infos[j].id, TaskInfo(task_id, agent_id, "sleep 3600", task_resources),
                                 "TASK_RUNNING") for j, task_id in tasks]
        used = sorted({j for j, _ in tasks})
        info = AgentInfo(hostname=hostname, resources=agent_resources, id=agent_id)
        ids.append(agent_id)
        # the messages never change: encoded once
        reregister.append(encode(m.ReregisterAgent(info, running, [infos[j] for j in used], version="bench")))
        pong.append(encode(m.Pong(agent_id)))
    return ids, reregister, pong


# ------------------------------------------------------------- the agents
class Agents:
    """``count`` simulated agents in one epoll loop, one connection each."""

    def __init__(self, master: str, first: int, ids: list[str], reregister: list[bytes], pong: list[bytes]) -> None:
        from mesoslike.locator import make_locator

        self.first = first
        self.ids = ids
        self.reregister, self.pong = self._framed(reregister), self._framed(pong)
        count = self.count = len(ids)
        self.epoll = select.epoll()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.epoll.register(self.wake_r, select.EPOLLIN)
        self.socks: list[socket.socket | None] = [None] * count
        self.by_fd: dict[int, int] = {}
        self.inbuf = [bytearray() for _ in range(count)]
        self.outbuf: list[bytes] = [b""] * count
        self.greeted = [False] * count        # the master's 64-byte greeting read
        self.ready = [False] * count          # and its READY: messages may flow
        self.connected = [False] * count
        self.registered = [False] * count
        self.backoff = [AGENT_BACKOFF[0]] * count
        self.refusals = [0] * count   # since its last answer: refusals by a master that does not lead
        self.retries: list[tuple[float, int, int]] = []   # (when, agent, generation) heap
        self.generation = [0] * count
        self.rng = random.Random(first)
        self.address: tuple[str, int] | None = None
        self.leader: str | None = None
        self.round: dict = {}
        self.times: list[float] = []
        self.stats = {"pings": 0, "pongs": 0, "registered_messages": 0, "errors": 0, "other": {},
                      "connect_failures": 0, "disconnects": 0, "retries": 0}
        self.stop = False
        self.want_stats = False
        self.rounds_done = 0   # leaders every agent of this process registered with
        self.changes: list[float] = []
        self.locator = make_locator(master, on_change=self._leader_changed)

    @staticmethod
    def _framed(frames: list[bytes]) -> list[bytes]:
        return [zmtp_frame(frame) for frame in frames]

    def _leader_changed(self) -> None:   # the locator's thread
        self.changes.append(time.monotonic())
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass

    # ----------------------------------------------------------- connections
    def _close(self, i: int) -> None:
        sock = self.socks[i]
        if sock is not None:
            fd = sock.fileno()
            self.by_fd.pop(fd, None)
            try:
                self.epoll.unregister(fd)
            except (OSError, ValueError):
                pass
            sock.close()
            self.socks[i] = None
        self.connected[i] = self.greeted[i] = self.ready[i] = False
        self.inbuf[i].clear()
        self.outbuf[i] = b""

    def _connect(self, i: int) -> None:
        assert self.address is not None
        self._close(i)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.bind((SOURCE_ADDRESSES[(self.first + i) % len(SOURCE_ADDRESSES)], 0))
        code = sock.connect_ex(self.address)
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self.stats["connect_failures"] += 1
            self._schedule(time.monotonic() + RECONNECT_S, i)
            return
        self.socks[i] = sock
        self.by_fd[sock.fileno()] = i
        # the registration goes once the master's READY came: a message before it
        # is a protocol error to ZeroMQ (the handshake is not over)
        self.outbuf[i] = zmtp_hello(os.urandom(8))
        self.epoll.register(sock.fileno(), select.EPOLLOUT | select.EPOLLIN)

    def _schedule(self, when: float, i: int) -> None:
        heapq.heappush(self.retries, (when, i, self.generation[i]))

    def _retry_delay(self, i: int) -> float:
        delay = self.backoff[i] * self.rng.uniform(1.0 - AGENT_JITTER, 1.0)
        self.backoff[i] = min(self.backoff[i] * 2, AGENT_BACKOFF[1])
        return delay

    def _follow(self, leader: str) -> None:
        """A new leader: every agent connects to it and re-registers."""
        from mesoslike.transport import parse_tcp_address

        now = time.monotonic()
        self.leader = leader
        self.address = parse_tcp_address(leader)
        self.round = {"event": "round", "leader": leader, "agents": self.count,
                      "changed_at": self.changes[-1] if self.changes else now, "sent_at": now, "first_at": None,
                      "last_at": None, "retries": 0, "errors": 0, "connect_failures": 0, "other": {}}
        self.times = []
        self.retries.clear()
        for i in range(self.count):
            self.registered[i] = False
            self.backoff[i] = AGENT_BACKOFF[0]
            self.refusals[i] = 0
            self.generation[i] += 1
            self._connect(i)
            self._schedule(now + self._retry_delay(i), i)
        self.round["sent_done_at"] = time.monotonic()

    # ------------------------------------------------------------------ I/O
    def _flush(self, i: int) -> None:
        sock = self.socks[i]
        data = self.outbuf[i]
        if sock is None or not data:
            return
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._dropped(i)
            return
        self.outbuf[i] = data[sent:]
        if not self.outbuf[i]:
            self.epoll.modify(sock.fileno(), select.EPOLLIN)

    def _send(self, i: int, frame: bytes) -> None:
        if self.socks[i] is None or not self.ready[i]:
            return
        if self.outbuf[i]:
            self.outbuf[i] += frame
            return
        self.outbuf[i] = frame
        self._flush(i)
        if self.outbuf[i]:
            self.epoll.modify(self.socks[i].fileno(), select.EPOLLIN | select.EPOLLOUT)

    def _dropped(self, i: int) -> None:
        if self.connected[i]:
            self.stats["disconnects"] += 1
        else:
            self.stats["connect_failures"] += 1
            self.round["connect_failures"] = self.round.get("connect_failures", 0) + 1
        self._close(i)
        self.generation[i] += 1
        self._schedule(time.monotonic() + RECONNECT_S, i)   # unless a new leader comes first

    def _readable(self, i: int) -> None:
        sock = self.socks[i]
        assert sock is not None
        try:
            data = sock.recv(262144)
        except BlockingIOError:
            return
        except OSError:
            self._dropped(i)
            return
        if not data:
            self._dropped(i)
            return
        buffer = self.inbuf[i]
        buffer += data
        if not self.greeted[i]:
            if len(buffer) < len(GREETING):
                return
            del buffer[:len(GREETING)]
            self.greeted[i] = True
        for command, body in zmtp_frames(buffer):
            if not command:
                self._message(i, body)
            elif body.startswith(b"\x05READY") and not self.ready[i]:
                self.ready[i] = True
                self._send(i, self.reregister[i])

    def _message(self, i: int, body: bytes) -> None:
        import msgpack

        decoded = msgpack.unpackb(body, raw=False)
        kind = decoded.get("type")
        if kind == "PING":
            self.stats["pings"] += 1
            self.stats["pongs"] += 1
            self._send(i, self.pong[i])
        elif kind == "AGENT_REGISTERED":
            self.stats["registered_messages"] += 1
            if not self.registered[i]:
                self.registered[i] = True
                self._registered(i)
                t = time.monotonic()
                self.round["first_at"] = self.round["first_at"] or t
                self.times.append(t)
                if len(self.times) == self.count:
                    self.round["last_at"] = t
                    self.round["quantiles_after_sent"] = {
                        q: round(self.times[min(self.count - 1, int(q / 100 * self.count))] - self.round["sent_at"],
                                 4) for q in (10, 50, 90, 99)}
                    emit(self.round)
        elif kind == "ERROR":
            self.stats["errors"] += 1
            self.round["errors"] = self.round.get("errors", 0) + 1
            if self.stats["errors"] == 1:
                emit({"event": "error", "message": decoded.get("message")})
            if decoded.get("standby") and not self.registered[i]:   # as the real agent: ask again soon
                self.round["standby_refusals"] = self.round.get("standby_refusals", 0) + 1
                delay = min(STANDBY_RETRY * 2 ** min(self.refusals[i], 8), AGENT_BACKOFF[1])
                self.refusals[i] += 1
                self.generation[i] += 1   # its back-off's retry is superseded (a new one follows this)
                self._schedule(time.monotonic() + delay * self.rng.uniform(0.5, 1.0), i)
        else:
            other = self.stats["other"]
            other[kind] = other.get(kind, 0) + 1
            self.round["other"][kind] = self.round["other"].get(kind, 0) + 1

    # ----------------------------------------------------------------- loop
    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self._stop())
        signal.signal(signal.SIGUSR1, lambda *_: self._ask_stats())
        while not self.stop:
            leader = self.locator.current()
            if leader and leader != self.leader:
                self._follow(leader)
            now = time.monotonic()
            timeout = 1.0
            if self.retries:
                timeout = min(timeout, max(0.0, self.retries[0][0] - now))
            for fd, events in self.epoll.poll(timeout, 4096):
                if fd == self.wake_r:
                    try:
                        os.read(self.wake_r, 4096)
                    except BlockingIOError:
                        pass
                    continue
                self._event(fd, events)
            now = time.monotonic()
            while self.retries and self.retries[0][0] <= now:
                _, i, generation = heapq.heappop(self.retries)
                if generation != self.generation[i] or self.registered[i] or self.address is None:
                    continue   # superseded, or done
                self._retry(i)
                if generation == self.generation[i]:
                    self._schedule(now + self._retry_delay(i), i)
            if self.want_stats:
                self.want_stats = False
                usage = resource.getrusage(resource.RUSAGE_SELF)
                emit({"event": "stats", **self.stats, "registered": sum(self.registered),
                      "connected": sum(self.connected), "cpu_s": usage.ru_utime + usage.ru_stime,
                      "at": time.monotonic()})
        self.locator.close()
        for i in range(self.count):
            self._close(i)

    def _registered(self, i: int) -> None:
        """Agent ``i`` got its AGENT_REGISTERED."""

    def _retry(self, i: int) -> None:
        """Agent ``i`` is not registered yet: register again (connecting first if it must)."""
        if self.socks[i] is None:   # dropped: connect again (and register)
            self._connect(i)
        elif self.ready[i]:
            self._send(i, self.reregister[i])
            self.stats["retries"] += 1
            self.round["retries"] += 1

    def _event(self, fd: int, events: int) -> None:
        i = self.by_fd.get(fd)
        if i is None:
            return
        if not self.connected[i]:
            sock = self.socks[i]
            assert sock is not None
            if sock.connect_ex(self.address) not in (0, errno.EISCONN):   # the connect's outcome
                self._dropped(i)
                return
            self.connected[i] = True
        if events & select.EPOLLOUT:
            self._flush(i)
        if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR) and self.socks[i] is not None:
            self._readable(i)

    def _stop(self) -> None:
        self.stop = True
        self._leader_changed()

    def _ask_stats(self) -> None:
        self.want_stats = True
        self._leader_changed()


class MuxAgents(Agents):
    """The same agents over one stream to the master's mux listener
    (``bench/muxwire.py``: for more agents than a process may hold files),
    each record one agent's frame under the agent's identity."""

    def __init__(self, *args: object, window: int = 0) -> None:
        super().__init__(*args)   # type: ignore[arg-type]
        #: with a window: the first leader gets at most this many registrations
        #: of this process unanswered at a time (a cluster brought up, not a storm)
        self.window = window or None
        self.in_flight: set[int] = set()
        self.stream: socket.socket | None = None
        self.stream_in = bytearray()
        self.stream_out = bytearray()
        self.identity = [b""] * self.count
        self.index_of: dict[bytes, int] = {}
        self.stream_retry_at: float | None = None
        #: agents whose registration waits to go into the stream: it takes them
        #: STREAM_CHUNK bytes at a time, so that a PONG waits behind at most that
        #: much (each agent's own connection would carry its frames alone)
        self.to_register: collections.deque[int] = collections.deque()
        self.queued: set[int] = set()   # the agents in to_register

    @staticmethod
    def _framed(frames: list[bytes]) -> list[bytes]:
        return frames

    def _registered(self, i: int) -> None:
        self.in_flight.discard(i)
        if len(self.times) + 1 == self.count:
            self.rounds_done += 1   # (times gets i after this call)
        if self.to_register:
            self._flush_stream()

    def _follow(self, leader: str) -> None:
        from mesoslike.transport import parse_tcp_address

        from muxwire import MUX_PORT_OFFSET

        now = time.monotonic()
        self.leader = leader
        host, port = parse_tcp_address(leader)
        self.address = (host, port + MUX_PORT_OFFSET)
        self.round = {"event": "round", "leader": leader, "agents": self.count,
                      "changed_at": self.changes[-1] if self.changes else now, "sent_at": now, "first_at": None,
                      "last_at": None, "retries": 0, "errors": 0, "connect_failures": 0, "other": {}}
        self.times = []
        self.retries.clear()
        self.index_of.clear()
        self.in_flight.clear()
        for i in range(self.count):   # new connections: new identities
            self.identity[i] = os.urandom(8)
            self.index_of[self.identity[i]] = i
            self.registered[i] = False
            self.backoff[i] = AGENT_BACKOFF[0]
            self.refusals[i] = 0
            self.generation[i] += 1
        self._open_stream()
        for i in range(self.count):
            self._schedule(now + self._retry_delay(i), i)
        self.round["sent_done_at"] = time.monotonic()

    def _open_stream(self) -> None:
        self._close_stream()
        assert self.address is not None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.connect(self.address)
        except OSError:
            sock.close()
            self.stats["connect_failures"] += 1
            self.stream_retry_at = time.monotonic() + 1.0
            return
        sock.setblocking(False)
        self.stream = sock
        self.stream_retry_at = None
        self.epoll.register(sock.fileno(), select.EPOLLIN | select.EPOLLOUT)
        self.stream_out = bytearray()
        self.to_register = collections.deque(i for i in range(self.count) if not self.registered[i])
        self.queued = set(self.to_register)
        for i in range(self.count):
            self.connected[i] = self.ready[i] = True
        self._flush_stream()

    def _close_stream(self) -> None:
        if self.stream is not None:
            try:
                self.epoll.unregister(self.stream.fileno())
            except (OSError, ValueError):
                pass
            self.stream.close()
            self.stream = None
        # fresh buffers, not clear(): a stream dropped while _event still walks the records of the old
        # one (a PONG's send found it closed: the leader was killed) holds a view of that buffer
        self.stream_in = bytearray()
        self.stream_out = bytearray()
        for i in range(self.count):
            self.connected[i] = self.ready[i] = False

    def _retry(self, i: int) -> None:
        if self.stream is None:
            if self.stream_retry_at is None or time.monotonic() >= self.stream_retry_at:
                self._open_stream()   # registers every agent not registered yet
                now = time.monotonic()
                for j in range(self.count):
                    if not self.registered[j]:
                        self.generation[j] += 1
                        self._schedule(now + self._retry_delay(j), j)
            return
        if i in self.queued:
            return   # its registration has not gone yet
        # the last one went unanswered (or was refused: "not elected yet"): it
        # holds no more of the window, else refused ones would close it for good
        self.in_flight.discard(i)
        self.to_register.append(i)
        self.queued.add(i)
        self.stats["retries"] += 1
        self.round["retries"] += 1
        self._flush_stream()

    def _send(self, i: int, frame: bytes) -> None:
        from muxwire import record

        if self.stream is None:
            return
        self.stream_out += record(self.identity[i], frame)
        self._flush_stream()

    def _flush_stream(self) -> None:
        from muxwire import record

        if self.stream is None:
            return
        window = self.window if self.leader is not None and not self.rounds_done else None
        while self.to_register and len(self.stream_out) < STREAM_CHUNK and (
                window is None or len(self.in_flight) < window):
            i = self.to_register.popleft()
            self.queued.discard(i)
            if not self.registered[i]:
                self.stream_out += record(self.identity[i], self.reregister[i])
                self.in_flight.add(i)
        if not self.stream_out:
            return
        try:
            sent = self.stream.send(self.stream_out)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._stream_dropped()
            return
        del self.stream_out[:sent]
        more = bool(self.stream_out or self.to_register)
        self.epoll.modify(self.stream.fileno(), select.EPOLLIN | (select.EPOLLOUT if more else 0))

    def _stream_dropped(self) -> None:
        self.stats["disconnects"] += 1
        self._close_stream()
        self.stream_retry_at = time.monotonic() + RECONNECT_S
        for i in range(self.count):   # all register again over the next stream
            self.registered[i] = False
            self.generation[i] += 1
            self._schedule(self.stream_retry_at, i)

    def _event(self, fd: int, events: int) -> None:
        from muxwire import records

        if self.stream is None or fd != self.stream.fileno():
            return
        if events & select.EPOLLOUT:
            self._flush_stream()
        if not events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
            return
        try:
            data = self.stream.recv(4 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._stream_dropped()
            return
        self.stream_in += data
        stream = self.stream
        for identity, body in records(self.stream_in):
            i = self.index_of.get(identity)
            if i is not None:
                self._message(i, body)
            if self.stream is not stream:   # dropped while answering: the rest went with it
                break


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def raise_file_limit(wanted: int) -> int:
    """Raise this process's open-file limit to ``wanted`` (as root, the hard
    limit too, up to the kernel's nr_open); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return soft
    try:
        ceiling = int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        ceiling = hard
    for new_hard in (max(hard, min(wanted, ceiling)), hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, new_hard), new_hard))
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--master", required=True, help="tcp://HOST:PORT or zk://HOSTS/PATH")
    parser.add_argument("--first", type=int, required=True, help="the first agent's number")
    parser.add_argument("--count", type=int, required=True, help="agents in this process")
    parser.add_argument("--tasks-per-agent", type=int, required=True)
    parser.add_argument("--frameworks", type=int, required=True, help="the tasks' frameworks: fw-0, fw-1...")
    parser.add_argument("--resources", default=AGENT_RESOURCES)
    parser.add_argument("--mux", action="store_true",
                        help="one stream to the master's mux listener for all (bench/muxwire.py) instead of one "
                             "ZMTP connection each")
    parser.add_argument("--admission-window", type=int, default=0,
                        help="with --mux: at most this many registrations unanswered at a time with the first "
                             "leader (a cluster brought up; 0: all at once, as after a failover)")
    args = parser.parse_args(argv)
    raise_file_limit(args.count + 1024)
    started = time.process_time()
    ids, reregister, pong = registrations(args.first, args.count, args.tasks_per_agent, args.frameworks,
                                          args.resources)
    agents = MuxAgents(args.master, args.first, ids, reregister, pong, window=args.admission_window) \
        if args.mux else Agents(args.master, args.first, ids, reregister, pong)
    emit({"event": "ready", "agents": len(ids), "message_bytes": sum(map(len, reregister)),
          "setup_cpu_s": round(time.process_time() - started, 2)})
    agents.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
