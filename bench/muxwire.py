"""Many agents over a few TCP streams: the bench's way past one process's file limit.

A master holds one TCP connection (one file descriptor) per agent. On the
machine this project's benchmarks run on, a process may open at most
20,000 files (``RLIMIT_NOFILE``'s hard limit, which only
``CAP_SYS_RESOURCE`` — withheld here — may raise), so no master process can
hold 100,000 agent connections. For sizes past that, ``bench/master_turns.py
--mux`` puts :class:`MuxServer` in the place of the master's
:class:`mesoslike.transport.Server`:

* frameworks, the probe and everything else still reach the master's real
  ZeroMQ ROUTER (a real ``Server``, which MuxServer wraps);
* the simulated agents of one worker process share one TCP stream to the
  master's port + :data:`MUX_PORT_OFFSET`, each record being one agent's
  frame with the agent's identity: ``[u32 length][u8 n][identity (n bytes)]
  [frame]`` both ways. The frames are the product's (``mesoslike.wire``),
  byte for byte what they would be over ZeroMQ.

The master's core, runtime, codec and loop are the product's; what differs
is below the socket API: ZeroMQ's I/O thread (C, off the GIL, one file per
peer) is replaced by :class:`MuxServer`'s thread (Python, under the GIL:
it costs the loop more CPU than ZeroMQ's would). What ZeroMQ costs per
connection is measured separately on the real wire (``bench/scale_master.py``
runs its smaller sizes that way) and added where a figure needs it.
"""

from __future__ import annotations

import collections
import os
import select
import socket
import struct
import threading
from typing import Any, Iterator

#: the mux listener's port: the master's port + this
MUX_PORT_OFFSET = 1
#: records taken from the streams and not yet by the master before the
#: streams are read no more (ZeroMQ's receive high-water mark does the same
#: per connection): the rest waits in the kernel's buffers and the senders'
MAX_INCOMING = 20_000
_HEADER = 5   # u32 length, u8 identity length
_HEAD = struct.Struct(">IB")
#: a stream's receive buffer (grown for a larger record): filled by recv_into, no allocation a read
_READ_BUFFER = 8 << 20


def record(identity: bytes, frame: bytes) -> bytes:
    """One record of a mux stream."""
    return (1 + len(identity) + len(frame)).to_bytes(4, "big") + bytes([len(identity)]) + identity + frame


def records(buffer: bytearray) -> Iterator[tuple[bytes, bytes]]:
    """(identity, frame) of every whole record at the start of ``buffer``, taken out of it."""
    taken, end_of = 0, len(buffer)
    view = memoryview(buffer)
    try:
        while end_of - taken >= _HEADER:
            length = int.from_bytes(view[taken:taken + 4], "big")
            end = taken + 4 + length
            if end > end_of:
                break
            n = view[taken + 4]
            start = taken + _HEADER
            yield bytes(view[start:start + n]), bytes(view[start + n:end])
            taken = end
    finally:
        view.release()
        del buffer[:taken]


class MuxServer:
    """A :class:`mesoslike.transport.Server` (the master's) plus a mux
    listener on its port + MUX_PORT_OFFSET; the runtime sees one server."""

    #: the servers made in this process (bench/master_turns.py reports their mux_stats)
    made: "list[MuxServer]" = []

    def __init__(self, address: str, **options: Any) -> None:
        from mesoslike.transport import Server, parse_tcp_address

        self._zmq = Server(address, **options)
        self.address = self._zmq.address
        self.decode = self._zmq.decode   # the loop's every frame: not through __getattr__
        host, port = parse_tcp_address(self.address)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind((host, port + MUX_PORT_OFFSET))
        self._listener.listen(64)
        self._listener.setblocking(False)
        self._incoming: collections.deque[tuple[bytes, bytes]] = collections.deque()
        self._routes: dict[bytes, socket.socket] = {}      # agent identity -> its stream
        self._outgoing: dict[socket.socket, bytearray] = {}
        self._out_lock = threading.Lock()
        self._loop_waker: Any = None
        self._poke_r, self._poke_w = os.pipe()
        os.set_blocking(self._poke_r, False)
        os.set_blocking(self._poke_w, False)
        self._poked = False
        self._throttled = False   # the streams are not read: MAX_INCOMING records wait
        self._closed = False
        #: records each way, reads from the streams, and wake-ups to send (the loop's pokes)
        self.mux_stats = {"records_in": 0, "records_out": 0, "unroutable": 0, "streams": 0, "reads": 0, "wakeups": 0}
        MuxServer.made.append(self)
        self._thread = threading.Thread(target=self._run, name="bench-mux", daemon=True)
        self._thread.start()

    # ----------------------------------------------------- the Server API
    def __getattr__(self, name: str) -> Any:   # codec, stats, authenticator, principal, ...
        return getattr(self._zmq, name)

    def principal(self, peer: bytes) -> str | None:
        return None if peer in self._routes else self._zmq.principal(peer)

    def receive_frames(self) -> Iterator[tuple[bytes | None, bytes | Exception]]:
        yield from self._zmq.receive_frames()
        incoming = self._incoming
        while incoming:
            yield incoming.popleft()
        if self._throttled:   # room again: the thread reads on
            self._poke()

    def _poke(self) -> None:
        try:
            os.write(self._poke_w, b"x")
        except BlockingIOError:
            pass

    def receive(self) -> Iterator[tuple[bytes | None, Any]]:
        for peer, frame in self.receive_frames():
            yield peer, frame if isinstance(frame, Exception) else self._zmq.decode(frame)

    def send(self, peer: bytes, message: object) -> bool:
        return self.send_frame(peer, self._zmq.codec.encode(message))

    def send_frame(self, peer: bytes, frame: bytes) -> bool:
        stream = self._routes.get(peer)
        if stream is None:
            return self._zmq.send_frame(peer, frame)
        with self._out_lock:
            pending = self._outgoing.get(stream)
            if pending is None:
                self.mux_stats["unroutable"] += 1
                return False
            pending += record(peer, frame)
            self.mux_stats["records_out"] += 1
            poke = not self._poked
            self._poked = True
        if poke:
            self._poke()
        return True

    def wait(self, timeout: float | None, waker: Any = None) -> bool:
        self._loop_waker = waker
        if self._incoming:
            return True
        return self._zmq.wait(timeout, waker) or bool(self._incoming)

    def close(self, linger: float = 0.0) -> None:
        self._closed = True
        try:
            os.write(self._poke_w, b"x")
        except OSError:
            pass
        self._thread.join(5)
        self._zmq.close(linger)
        self._listener.close()

    # ---------------------------------------------------------- the thread
    def _run(self) -> None:
        poller = select.epoll()
        poller.register(self._listener.fileno(), select.EPOLLIN)
        poller.register(self._poke_r, select.EPOLLIN)
        streams: dict[int, tuple[socket.socket, _Received]] = {}
        while not self._closed:
            throttle = len(self._incoming) >= MAX_INCOMING
            if throttle != self._throttled:   # stop (or start again) reading the streams
                self._throttled = throttle
                for fd in streams:
                    poller.modify(fd, 0 if throttle else select.EPOLLIN)
            for fd, events in poller.poll(0.05 if throttle else 1.0):
                if fd == self._listener.fileno():
                    try:
                        stream, _ = self._listener.accept()
                    except BlockingIOError:
                        continue
                    stream.setblocking(False)
                    streams[stream.fileno()] = (stream, _Received())
                    with self._out_lock:
                        self._outgoing[stream] = bytearray()
                    self.mux_stats["streams"] += 1
                    poller.register(stream.fileno(), 0 if self._throttled else select.EPOLLIN)
                    continue
                if fd == self._poke_r:
                    self.mux_stats["wakeups"] += 1
                    try:
                        os.read(self._poke_r, 4096)
                    except BlockingIOError:
                        pass
                    with self._out_lock:
                        self._poked = False
                    for stream, _ in list(streams.values()):
                        self._flush(poller, stream)
                    continue
                stream, buffer = streams[fd]
                if events & select.EPOLLOUT:
                    self._flush(poller, stream)
                if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                    if not self._read(stream, buffer):
                        poller.unregister(fd)
                        del streams[fd]
                        with self._out_lock:
                            self._outgoing.pop(stream, None)
                        for identity in [i for i, s in self._routes.items() if s is stream]:
                            del self._routes[identity]
                        stream.close()
        for stream, _ in streams.values():
            stream.close()
        poller.close()

    def _read(self, stream: socket.socket, buffer: "_Received") -> bool:
        """Read what ``stream`` has into its buffer, in place (no 4 MiB bytes
        made a read, appended to a bytearray and cut from its front), and
        queue its whole records."""
        try:
            n = stream.recv_into(buffer.free())
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not n:
            return False
        self.mux_stats["reads"] += 1
        was_empty = not self._incoming
        got = buffer.take(n, stream, self._routes, self._incoming)
        self.mux_stats["records_in"] += got
        if got and was_empty and self._loop_waker is not None:
            self._loop_waker.wake()
        return True

    def _flush(self, poller: select.epoll, stream: socket.socket) -> None:
        with self._out_lock:
            pending = self._outgoing.get(stream)
            if not pending:
                return
            try:
                sent = stream.send(pending)
            except BlockingIOError:
                sent = 0
            except OSError:
                return
            del pending[:sent]
            left = bool(pending)
        try:
            poller.modify(stream.fileno(), (0 if self._throttled else select.EPOLLIN) | (select.EPOLLOUT if left else 0))
        except OSError:
            pass


class _Received:
    """A stream's bytes read and not yet taken as records: one buffer read
    into in place (``recv_into``), whole records taken from its start, a
    partial one moved to the front."""

    __slots__ = ("data", "view", "filled")

    def __init__(self, size: int = _READ_BUFFER) -> None:
        self.data = bytearray(size)
        self.view = memoryview(self.data)
        self.filled = 0

    def free(self) -> memoryview:
        """Where the next read goes (the buffer grown first if a record waits for more than it holds)."""
        if self.filled == len(self.data):
            bigger = bytearray(2 * len(self.data))
            bigger[:self.filled] = self.view[:self.filled]
            self.view.release()
            self.data, self.view = bigger, memoryview(bigger)
        return self.view[self.filled:]

    def take(self, n: int, stream: socket.socket, routes: dict[bytes, socket.socket],
             incoming: collections.deque[tuple[bytes, bytes]]) -> int:
        """``n`` bytes more were read: every whole record into ``incoming``
        (its identity routed to ``stream``); how many."""
        data, view = self.data, self.view
        filled = self.filled + n
        taken = got = 0
        unpack = _HEAD.unpack_from
        append = incoming.append
        while filled - taken >= _HEADER:
            length, k = unpack(data, taken)
            end = taken + 4 + length
            if end > filled:
                break
            start = taken + _HEADER
            identity = bytes(view[start:start + k])
            if routes.get(identity) is not stream:
                routes[identity] = stream
            append((identity, bytes(view[start + k:end])))
            got += 1
            taken = end
        if taken:
            rest = filled - taken
            if rest:
                data[:rest] = view[taken:filled]
            filled = rest
        self.filled = filled
        return got
