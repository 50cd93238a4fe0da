"""``/metrics`` through ``prometheus_client`` (the edge of the metrics).

The cores count and time in plain numbers (:mod:`mesoslike.observations`);
here a :class:`MetricsCollector` reads them at scrape time and hands them to
``prometheus_client`` as metric families, which renders the text
exposition format (0.0.4). Each runtime has a :class:`CollectorRegistry` of
its own (:func:`metrics_registry`): several masters and agents in one
process (the tests, ``mesoslike local``) never share one, and the library's
global default registry is not used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                            Metric as Family)
from prometheus_client.registry import Collector, CollectorRegistry

from mesoslike.master.state import master_metrics
from mesoslike.observations import Histogram, Metric

if TYPE_CHECKING:
    from mesoslike.master.core import MasterCore

__all__ = ["CONTENT_TYPE", "MetricsCollector", "metrics_registry", "exposition", "render", "family", "master_metrics_text"]

#: the Content-Type of :func:`exposition`'s text
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


def _number(value: object) -> float:
    if isinstance(value, Histogram):
        raise TypeError("a histogram sample in a counter or gauge")
    return float(value)  # type: ignore[arg-type]


def family(item: Metric, prefix: str = "mesoslike_") -> Family:
    """``item`` as a ``prometheus_client`` metric family named ``prefix + item.name``."""
    name, labels = prefix + item.name, list(item.label_names)
    if item.kind == "histogram":
        histograms = HistogramMetricFamily(name, item.help, labels=labels)
        for values, histogram in item.samples:
            if not isinstance(histogram, Histogram):
                raise TypeError(f"{name}: a histogram's sample must be a Histogram")
            buckets = [("+Inf" if bound == float("inf") else repr(bound), float(count))
                       for bound, count in histogram.cumulative()]
            histograms.add_metric(list(values.values()), buckets, histogram.sum)
        return histograms
    kind = CounterMetricFamily if item.kind == "counter" else GaugeMetricFamily
    numbers = kind(name, item.help, labels=labels)
    for values, value in item.samples:
        numbers.add_metric(list(values.values()), _number(value))
    return numbers


class MetricsCollector(Collector):
    """Reads ``read()`` (the runtime's counters, under its own lock if it
    needs one) at every scrape."""

    def __init__(self, read: Callable[[], Iterable[Metric]], prefix: str = "mesoslike_") -> None:
        self._read = read
        self._prefix = prefix

    def collect(self) -> Iterator[Family]:
        for item in self._read():
            yield family(item, self._prefix)


def metrics_registry(read: Callable[[], Iterable[Metric]], prefix: str = "mesoslike_") -> CollectorRegistry:
    """A registry of its own holding one :class:`MetricsCollector` of ``read``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MetricsCollector(read, prefix))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The text exposition format (0.0.4) of everything ``registry`` collects."""
    return generate_latest(registry)


def render(metrics: Iterable[Metric], prefix: str = "mesoslike_") -> str:
    """``metrics`` in the text exposition format (for a one-off: tests, tools)."""
    kept = list(metrics)
    return exposition(metrics_registry(lambda: kept, prefix)).decode()


def master_metrics_text(core: MasterCore, transport: Mapping[str, int] | None = None) -> str:
    """What a master serving ``core`` shows in ``/metrics`` of the core (its
    runtime adds its loop's and socket's figures)."""
    return render(master_metrics(core, transport))
