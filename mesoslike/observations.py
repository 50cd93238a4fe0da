"""What the cores measure, as plain numbers (pure: layer 1).

The sans-I/O cores count and time things with these classes and know
nothing of Prometheus: :class:`Histogram` keeps bucket counts, a sum and a
count; :class:`Metric` is one metric family — a name, a kind, a help text
and its samples. The runtimes hand lists of :class:`Metric` to
:mod:`mesoslike.metrics`, the edge that exposes them through
``prometheus_client`` (docs/observability.rst).
"""

from __future__ import annotations

import bisect
from typing import Iterable, Mapping

import msgspec

__all__ = ["NOTICE", "Histogram", "LabelledHistograms", "Metric", "LATENCY_BUCKETS", "QUICK_BUCKETS", "metric"]

#: the log level (between INFO and WARNING) of what a user needs to hear at the
#: CLI's default ``--log-level notice``: an agent registered, a master out of reach
NOTICE = 25

#: seconds: from a millisecond to a minute (an offer's round trip, a launch until TASK_RUNNING)
LATENCY_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                                      10.0, 30.0, 60.0)
#: seconds: from 10 µs to 5 s (an allocation cycle, handling one message)
QUICK_BUCKETS: tuple[float, ...] = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class Histogram:
    """Observations counted into buckets with upper bounds ``bounds`` (and
    one more, +Inf), with their sum: what a Prometheus histogram exposes.
    O(log buckets) an observation, constant memory."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Iterable[float] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(sorted(bounds))
        #: observations per bucket (not cumulative); the last one is +Inf
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        # a bucket holds the values <= its bound (Prometheus's "le")
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= it) per bucket, +Inf last."""
        out, running = [], 0
        for bound, count in zip(self.bounds + (float("inf"),), self.counts):
            running += count
            out.append((bound, running))
        return out

    def copy(self) -> Histogram:
        twin = Histogram(self.bounds)
        twin.counts, twin.sum, twin.count = list(self.counts), self.sum, self.count
        return twin


class LabelledHistograms:
    """One :class:`Histogram` per label value (a message type), at most
    ``max_labels`` of them: values beyond go to ``"other"`` (a peer must not
    grow this by sending strange names)."""

    def __init__(self, bounds: Iterable[float] = QUICK_BUCKETS, max_labels: int = 64) -> None:
        self.bounds = tuple(bounds)
        self.max_labels = max_labels
        self.by_label: dict[str, Histogram] = {}

    def observe(self, label: str, value: float) -> None:
        histogram = self.by_label.get(label)
        if histogram is None:
            if len(self.by_label) >= self.max_labels:
                label = "other"
                histogram = self.by_label.get(label)
            if histogram is None:
                histogram = self.by_label[label] = Histogram(self.bounds)
        histogram.observe(value)

    def copy(self) -> dict[str, Histogram]:
        return {label: histogram.copy() for label, histogram in sorted(self.by_label.items())}


#: a sample's value: a number (counter, gauge) or a histogram
Value = float | int | Histogram


#: the kinds a :class:`Metric` may be
_KINDS = ("counter", "gauge", "histogram")


class Metric(msgspec.Struct, frozen=True):
    """One metric family: ``name`` (without the exposition's prefix; a
    counter's ends in ``_total``), ``kind`` (counter, gauge, histogram),
    ``help`` and ``samples`` — (labels, value) pairs, every sample with the
    same label names."""

    name: str
    #: counter, gauge or histogram (checked when made)
    kind: str
    help: str
    samples: tuple[tuple[Mapping[str, str], Value], ...]

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:   # what attrs's ``in_`` validator checked, with its message
            raise ValueError(f"'kind' must be in {_KINDS!r} (got {self.kind!r})")

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(self.samples[0][0]) if self.samples else ()


def metric(name: str, kind: str, help_text: str, samples: Iterable[tuple[Mapping[str, str], Value]] | Value
           ) -> Metric:
    """A :class:`Metric`; ``samples`` may be one unlabelled value."""
    if isinstance(samples, (int, float, Histogram)):
        return Metric(name, kind, help_text, (({}, samples),))
    return Metric(name, kind, help_text, tuple((dict(labels), value) for labels, value in samples))
