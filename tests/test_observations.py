"""The cores' metric values (mesoslike.observations): pure."""

import pytest

from mesoslike.observations import Histogram, Metric, metric

pytestmark = pytest.mark.timeout(30)


def test_a_metric_is_a_frozen_value_of_a_known_kind():
    made = metric("offers_total", "counter", "Offers made.", [({"role": "*"}, 3)])
    assert made == Metric("offers_total", "counter", "Offers made.", (({"role": "*"}, 3),))
    assert made.label_names == ("role",) and metric("up", "gauge", "Up.", 1).label_names == ()
    assert repr(metric("up", "gauge", "Up.", 1)) == "Metric(name='up', kind='gauge', help='Up.', samples=(({}, 1),))"
    assert metric("t", "histogram", "T.", Histogram()).kind == "histogram"
    with pytest.raises(AttributeError):
        made.kind = "gauge"   # type: ignore[misc]
    for kind in ("summary", ["counter"], None):
        with pytest.raises(ValueError, match=r"^'kind' must be in \('counter', 'gauge', 'histogram'\) \(got "):
            Metric("x", kind, "X.", ())   # type: ignore[arg-type]
