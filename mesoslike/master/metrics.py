"""The master's ``/metrics`` (docs/observability.rst): what its core
counts (:func:`mesoslike.master.state.master_metrics`), its transport, its
loop (:class:`LoopStats`: stalls, lock waits), its registry writes, and its
HTTP server and authorization — collected at each scrape by
:class:`MasterMetrics` and exposed through prometheus_client
(:mod:`mesoslike.metrics`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

import attrs

from mesoslike.master.state import master_metrics, transport_metrics
from mesoslike.metrics import exposition, metrics_registry, render
from mesoslike.observations import QUICK_BUCKETS, LabelledHistograms, Metric, metric

if TYPE_CHECKING:
    from mesoslike.master.core import MasterCore
    from mesoslike.master.http import StatusHTTPServer
    from mesoslike.master.http_auth import HTTPAuthorization
    from mesoslike.transport import Server

__all__ = ["MasterMetrics", "LoopStats", "MeasuredMaster"]


@attrs.define
class LoopStats:
    """How long the loop could not serve peers: a *stall* is a turn, from
    the moment it woke with work until its answers went out (waiting for
    the lock included)."""

    turns: int = 0
    stall_max: float = 0.0
    stall_last: float = 0.0
    lock_wait_max: float = 0.0

    def record(self, stall: float, lock_wait: float) -> None:
        self.turns += 1
        self.stall_last = stall
        self.stall_max = max(self.stall_max, stall)
        self.lock_wait_max = max(self.lock_wait_max, lock_wait)


class MeasuredMaster(Protocol):
    """What the metrics read of a master runtime."""

    #: the master's lock (it guards the core)
    stored: threading.Condition
    registry_write_failures: int

    @property
    def core(self) -> MasterCore | None: ...

    @property
    def transport(self) -> Server: ...

    @property
    def http(self) -> StatusHTTPServer | None: ...

    @property
    def http_authorization(self) -> HTTPAuthorization: ...

    @property
    def registry_writable(self) -> bool: ...

    @property
    def answers_held(self) -> int: ...


class MasterMetrics:
    """One master's metrics: :attr:`loop` and :attr:`message_timings` are
    fed by its loop; the rest is read from ``master`` at each scrape."""

    def __init__(self, master: MeasuredMaster) -> None:
        self._master = master
        self.loop = LoopStats()
        #: seconds the core took per message, by message type (under the master's lock, as the core)
        self.message_timings = LabelledHistograms(QUICK_BUCKETS)
        #: a registry of this master's own (several masters may share a process)
        self._registry = metrics_registry(self.collect)

    def exposition(self) -> bytes:
        """``/metrics``: what :meth:`collect` reads, in Prometheus's text format."""
        return exposition(self._registry)

    def collect(self) -> list[Metric]:
        """Every metric of this master now (the registry's collector calls it at each scrape)."""
        master = self._master
        transport = master.transport.stats.as_dict()   # ints only: read without the loop's lock
        with master.stored:
            core = master.core
            metrics = master_metrics(core, transport) if core is not None else \
                [metric("leader", "gauge", "1 if this master leads", 0)] + transport_metrics(transport)
            handling = self.message_timings.copy()
        metrics.append(metric("message_handling_seconds", "histogram",
                              "Messages handled by the master's loop, by type, by the time the core took "
                              "(decoding not included).", [({"type": kind}, histogram)
                                                           for kind, histogram in handling.items()]))
        return metrics + self.runtime_metric_list()

    def runtime_metrics(self) -> str:
        """The runtime's own metrics (loop, registry writes, connections), as text."""
        return render(self.runtime_metric_list())

    def runtime_metric_list(self) -> list[Metric]:
        master, stats = self._master, self.loop
        samples = [
            ("loop_stall_seconds_max", "gauge",
             "The longest loop turn since the master started: from waking with work to its answers sent, "
             "waiting for the lock included.", stats.stall_max),
            ("loop_stall_seconds_last", "gauge", "The last loop turn, measured as loop_stall_seconds_max.",
             stats.stall_last),
            ("loop_lock_wait_seconds_max", "gauge", "The longest the loop waited for the master's lock.",
             stats.lock_wait_max),
            ("loop_turns_total", "counter", "Loop turns.", stats.turns),
            ("registry_writable", "gauge", "0 while registry writes fail (the master answers nothing), else 1.",
             1 if master.registry_writable else 0),
            ("registry_write_failures_total", "counter", "Registry writes that failed (not fenced).",
             master.registry_write_failures),
            ("answers_held", "gauge", "Answers held until the registry is written.", master.answers_held),
        ]
        server = master.transport
        if server.authenticator is not None:
            samples += [
                ("connections_refused_total", "counter",
                 "Connections refused at the CURVE handshake: their key is not in the credentials.",
                 server.authenticator.refused),
                ("frames_impersonating_total", "counter",
                 "Frames dropped: they came under a peer identity another principal holds.",
                 server.stats.impersonations),
            ]
        http, refused = master.http, master.http_authorization.refused
        if http is not None:
            samples += [
                ("http_connections_refused_total", "counter",
                 "HTTP connections refused (503): http_max_connections were open, none waiting for its request.",
                 http.refused),
                ("http_connections_evicted_total", "counter",
                 "HTTP connections closed to make room for a new one: the one waiting longest for its request "
                 "head, when http_max_connections were open.", http.evicted),
                ("http_connections_timed_out_total", "counter",
                 "HTTP connections closed at their deadline (http_timeout).", http.timed_out),
                ("http_connections_open", "gauge", "HTTP connections open now.", http.open_connections),
                ("http_unauthenticated_total", "counter", "HTTP requests refused 401: no valid token.",
                 refused[401]),
                ("http_forbidden_total", "counter", "HTTP requests refused 403: the token's principal lacks "
                 "the permission.", refused[403]),
            ]
        return [metric(name, kind, help_text, value) for name, kind, help_text, value in samples]
