"""IoOpsWeigher and NumInstancesWeigher."""

from __future__ import annotations

import pytest

from scheduler.weighers.io_ops import IoOpsWeigher
from scheduler.weighers.num_instances import NumInstancesWeigher
from tests.unit.factories import host
from tests.unit.weighers.helpers import ranking, raw_weights

BUILDS = [
    host("busy", stats={"num_io_ops": 4}),
    host("quiet", stats={"num_io_ops": 0}),
    host("some", stats={"num_io_ops": 1}),
]
INSTANCES = [host("few", consumers=1), host("many", consumers=9), host("none")]


@pytest.mark.parametrize(
    ("multiplier", "best_first"),
    [
        pytest.param(None, ["quiet", "some", "busy"], id="default-negative-spreads-io"),
        pytest.param(1.0, ["busy", "some", "quiet"], id="positive-prefers-busy"),
    ],
)
def test_io_ops_weigher(multiplier: float | None, best_first: list[str]) -> None:
    assert ranking(IoOpsWeigher, BUILDS, multiplier) == best_first


def test_io_ops_scaled_by_the_maximum() -> None:
    assert raw_weights(IoOpsWeigher, BUILDS) == [4, 0, 1]


@pytest.mark.parametrize(
    ("multiplier", "best_first"),
    [
        pytest.param(None, ["few", "many", "none"], id="default-off-keeps-order"),
        pytest.param(1.0, ["many", "few", "none"], id="positive-packs"),
        pytest.param(-1.0, ["none", "few", "many"], id="negative-spreads"),
    ],
)
def test_num_instances_weigher(multiplier: float | None, best_first: list[str]) -> None:
    assert ranking(NumInstancesWeigher, INSTANCES, multiplier) == best_first
