"""ComputeFilter: down or disabled hosts are rejected."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.filters.compute import ComputeFilter
from tests.unit.factories import NOW, context, host, settings, view_of


@pytest.mark.parametrize(
    ("kwargs", "passes"),
    [
        pytest.param({}, True, id="up-and-enabled"),
        pytest.param({"up": False}, False, id="stopped-heartbeating"),
        pytest.param({"disabled": True}, False, id="disabled"),
        pytest.param({"up": False, "disabled": True}, False, id="down-and-disabled"),
        pytest.param({"service": False}, False, id="no-service-record"),
    ],
)
def test_compute_filter(kwargs: dict, passes: bool) -> None:
    view = view_of(host("h1", **kwargs))
    mask = ComputeFilter(settings()).passes(view, np.arange(1), context(), True)
    assert mask.tolist() == [passes]


@pytest.mark.parametrize(
    ("seen_ago", "passes"),
    [
        pytest.param(60.0, True, id="exactly-service-down-time"),
        pytest.param(60.5, False, id="just-past-it"),
        pytest.param(-30.0, True, id="clock-skew-within-it"),
        pytest.param(-90.0, False, id="heartbeat-from-the-far-future"),
    ],
)
def test_liveness_window(seen_ago: float, passes: bool) -> None:
    view = view_of(host("h1"))
    view.last_seen[0] = NOW - seen_ago
    mask = ComputeFilter(settings(service_down_time=60.0)).passes(
        view, np.arange(1), context(), True
    )
    assert mask.tolist() == [passes]
