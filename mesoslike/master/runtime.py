"""The master process: a ZeroMQ ROUTER loop feeding :class:`MasterCore`,
plus the HTTP endpoints."""

from __future__ import annotations

import json
import logging
import threading
import uuid

from mesoslike import __version__
from mesoslike.clock import Clock, SystemClock
from mesoslike.master.core import MasterCore, Send
from mesoslike.master.http import StatusHTTPServer
from mesoslike.master.records import MasterConfig
from mesoslike.master.registry import Registry
from mesoslike.master.storage import MemoryRegistryStore, RegistryStore
from mesoslike.master.state import metrics_text, state_json
from mesoslike.transport import Server, Waker
from mesoslike.wire import MasterInfo

__all__ = ["MasterRuntime"]

log = logging.getLogger("mesoslike.master")

#: messages handled per loop turn before time-driven work gets its turn
_BATCH = 2000


class MasterRuntime:
    """Runs a standalone leading master.

    ``address``: ``tcp://HOST:PORT`` to bind for agents and frameworks (port 0
    = any free port; ``self.address`` is the bound one). ``http_port``: the
    HTTP endpoints' port on the same host (0 = any, None = no HTTP).
    """

    def __init__(self, address: str = "tcp://127.0.0.1:5050", http_port: int | None = 5051,
                 config: MasterConfig | None = None, clock: Clock | None = None,
                 master_id: str | None = None, registry_store: RegistryStore | None = None) -> None:
        self.clock = clock or SystemClock()
        self._store = registry_store or MemoryRegistryStore()
        registry = Registry.from_document(self._store.load())  # a bad registry stops us before we bind
        self._server = Server(address)
        self.address = self._server.address
        host = self.address[len("tcp://"):].rpartition(":")[0]
        self._http = None
        try:
            if http_port is not None:
                self._http = StatusHTTPServer(host, http_port, {
                    "/state": lambda: ("application/json", self._locked(lambda: json.dumps(
                        state_json(self.core), indent=1).encode())),
                    "/health": lambda: ("application/json", json.dumps(
                        {"healthy": True, "leader": self.address}).encode()),
                    "/metrics": lambda: ("text/plain; version=0.0.4", self._locked(
                        lambda: metrics_text(self.core).encode())),
                })
        except Exception:
            self._server.close()
            raise
        self.http_address = self._http.address if self._http else ""
        info = MasterInfo(master_id or uuid.uuid4().hex[:8], self.address, self.http_address, __version__)
        self.core = MasterCore(self.clock, info, config, registry=registry)
        self._persisted = self.core.registry_changes
        self._lock = threading.Lock()
        self._waker = Waker()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def _locked(self, fn):
        with self._lock:
            return fn()

    def state(self) -> dict:
        """The /state document (thread-safe)."""
        return self._locked(lambda: state_json(self.core))

    def start(self) -> None:
        """Run the loop in a background thread."""
        self._thread = threading.Thread(target=self.run, name="master", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """The loop; returns after :meth:`stop`."""
        if self._http is not None:
            self._http.start()
        log.info("master %s listening on %s (HTTP %s)", self.core.info.id, self.address, self.http_address or "off")
        try:
            while not self._stopping.is_set():
                with self._lock:
                    timeout = self.core.next_wakeup() - self.clock.now()
                self._server.wait(min(max(timeout, 0.0), 1.0), self._waker)
                with self._lock:
                    sends = self._handle_messages()
                    sends += self.core.tick()
                    self._persist()  # hard state first, then the replies that depend on it
                    self._deliver(sends)
        finally:
            self._close()

    def _handle_messages(self) -> list[Send]:
        out: list[Send] = []
        for count, (peer, message) in enumerate(self._server.receive()):
            try:
                if isinstance(message, Exception):
                    sends = self.core.on_bad_frame(peer, message)
                else:
                    sends = self.core.on_message(peer, message)
            except Exception:  # a bug must not take the master down with it
                log.exception("handling %s from %r failed", type(message).__name__, peer)
                continue
            out += sends
            if count >= _BATCH:
                break
        return out

    def _persist(self) -> None:
        if self.core.registry_changes == self._persisted:
            return
        try:
            self._store.store(self.core.registry.to_document())
            self._persisted = self.core.registry_changes
        except Exception:  # retried on the next turn of the loop
            log.exception("writing the registry failed")

    def _deliver(self, sends: list[Send]) -> None:
        for send in sends:
            try:
                self._server.send(send.peer, send.message)
            except Exception:
                log.exception("sending %s failed", type(send.message).__name__)

    def stop(self) -> None:
        """Stop the loop (thread-safe) and wait for it."""
        self._stopping.set()
        self._waker.wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _close(self) -> None:
        if self._http is not None:
            self._http.stop()
        self._server.close()
        self._waker.close()
