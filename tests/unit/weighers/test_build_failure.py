"""BuildFailureWeigher: hosts with recent build failures sink."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.weighers.build_failure import BuildFailureWeigher
from tests.unit.factories import aggregate, context, host, settings, uuid_of, view_of
from tests.unit.weighers.helpers import ranking

HOSTS = [host("flaky", failed_builds=3), host("clean"), host("once", failed_builds=1)]


@pytest.mark.parametrize(
    ("multiplier", "best_first"),
    [
        pytest.param(None, ["clean", "once", "flaky"], id="default-sinks-failures"),
        pytest.param(1.0, ["clean", "once", "flaky"], id="positive-sinks-failures"),
        pytest.param(-1.0, ["flaky", "once", "clean"], id="negative-prefers-failures"),
    ],
)
def test_build_failure_order(multiplier: float | None, best_first: list[str]) -> None:
    assert ranking(BuildFailureWeigher, HOSTS, multiplier) == best_first


def test_one_failure_weighs_minus_a_million_by_default() -> None:
    # As in Nova: the raw value is the failure count, the configured multiplier
    # (1,000,000) is negated, so a clean host scores 0 and a failing one -1,000,000.
    view = view_of(host("clean"), host("failed", failed_builds=1), host("also-clean"))
    weights = BuildFailureWeigher(settings()).weigh(view, np.arange(3), context(), True)
    assert weights.tolist() == [0.0, -1_000_000.0, 0.0]


@pytest.mark.parametrize(
    ("failures", "weights"),
    [
        pytest.param([0, 0, 0], [0.0, 0.0, 0.0], id="no-failures-weigh-nothing"),
        pytest.param([0, 2, 4], [0.0, -500_000.0, -1_000_000.0], id="scaled-by-the-range"),
        pytest.param([1, 1, 3], [0.0, 0.0, -1_000_000.0], id="fewest-failures-score-0"),
    ],
)
def test_weights_follow_nova(failures: list[int], weights: list[float]) -> None:
    view = view_of(*(host(f"h{i}", failed_builds=n) for i, n in enumerate(failures)))
    got = BuildFailureWeigher(settings()).weigh(view, np.arange(3), context(), True)
    assert got.tolist() == weights


def test_a_per_aggregate_multiplier_still_pushes_a_failing_host_down() -> None:
    # The clean host's aggregate turns the weigher down to 0 for its hosts; the
    # failing host keeps the configured multiplier, so it must still sink.
    hosts = [host("clean", aggregates=[uuid_of("quiet")]), host("failing", failed_builds=1)]
    view = view_of(*hosts, aggregates=[aggregate("quiet", build_failure_weight_multiplier="0")])
    got = BuildFailureWeigher(settings()).weigh(view, np.arange(2), context(), True)
    assert got.tolist() == [0.0, -1_000_000.0]
