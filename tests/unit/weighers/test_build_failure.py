"""BuildFailureWeigher: hosts with recent build failures sink."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.weighers.build_failure import BuildFailureWeigher
from tests.unit.factories import context, host, settings, view_of
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


def test_one_failure_weighs_a_million_by_default() -> None:
    view = view_of(host("clean"), host("failed", failed_builds=1))
    weights = BuildFailureWeigher(settings()).weigh(view, np.arange(2), context(), True)
    assert weights.tolist() == [1_000_000.0, 0.0]
