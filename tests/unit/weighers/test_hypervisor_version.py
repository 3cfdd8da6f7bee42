"""HypervisorVersionWeigher: newer hypervisors first."""

from __future__ import annotations

import pytest

from scheduler.weighers.hypervisor_version import HypervisorVersionWeigher
from tests.unit.factories import host
from tests.unit.weighers.helpers import ranking, raw_weights

HOSTS = [
    host("old", capabilities={"hypervisor_version": 4002000}),
    host("new", capabilities={"hypervisor_version": 8000000}),
    host("mid", capabilities={"hypervisor_version": 6002001}),
    host("unknown"),
]


@pytest.mark.parametrize(
    ("multiplier", "best_first"),
    [
        pytest.param(None, ["new", "mid", "old", "unknown"], id="default-prefers-newer"),
        pytest.param(-1.0, ["unknown", "old", "mid", "new"], id="negative-prefers-older"),
    ],
)
def test_hypervisor_version_weigher(multiplier: float | None, best_first: list[str]) -> None:
    assert ranking(HypervisorVersionWeigher, HOSTS, multiplier) == best_first


def test_raw_is_the_reported_version() -> None:
    assert raw_weights(HypervisorVersionWeigher, HOSTS) == [4002000, 8000000, 6002001, 0]
