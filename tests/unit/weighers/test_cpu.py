"""CPUWeigher: free vCPUs with the ratio; positive spreads, negative packs."""

from __future__ import annotations

import pytest

from scheduler.objects import VCPU
from scheduler.weighers.cpu import CPUWeigher
from tests.unit.factories import host
from tests.unit.weighers.helpers import ranking, raw_weights

HOSTS = [host("busy", used={VCPU: 14}), host("idle"), host("half", used={VCPU: 8})]


@pytest.mark.parametrize(
    ("multiplier", "best_first"),
    [
        pytest.param(None, ["idle", "half", "busy"], id="default-spreads"),
        pytest.param(1.0, ["idle", "half", "busy"], id="positive-spreads"),
        pytest.param(-1.0, ["busy", "half", "idle"], id="negative-packs"),
    ],
)
def test_cpu_weigher_order(multiplier: float | None, best_first: list[str]) -> None:
    assert ranking(CPUWeigher, HOSTS, multiplier) == best_first


def test_free_vcpus_use_the_ratio() -> None:
    hosts = [host("h1", vcpus=8, ratios={VCPU: 4.0}, used={VCPU: 20})]
    assert raw_weights(CPUWeigher, hosts) == [12]


def test_ratio_makes_a_smaller_host_freer() -> None:
    hosts = [host("big", vcpus=32), host("small-overcommitted", vcpus=16, ratios={VCPU: 4.0})]
    assert ranking(CPUWeigher, hosts) == ["small-overcommitted", "big"]
