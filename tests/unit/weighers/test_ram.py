"""RAMWeigher: free RAM ignoring the ratio; positive spreads, negative packs."""

from __future__ import annotations

import pytest

from scheduler.objects import MEMORY_MB
from scheduler.weighers.ram import RAMWeigher
from tests.unit.factories import host
from tests.unit.weighers.helpers import ranking, raw_weights

HOSTS = [
    host("busy", used={MEMORY_MB: 30000}),
    host("idle"),
    host("half", used={MEMORY_MB: 16000}),
]


@pytest.mark.parametrize(
    ("multiplier", "best_first"),
    [
        pytest.param(None, ["idle", "half", "busy"], id="default-spreads"),
        pytest.param(2.0, ["idle", "half", "busy"], id="positive-spreads"),
        pytest.param(-1.0, ["busy", "half", "idle"], id="negative-packs"),
    ],
)
def test_ram_weigher_order(multiplier: float | None, best_first: list[str]) -> None:
    assert ranking(RAMWeigher, HOSTS, multiplier) == best_first


def test_free_ram_ignores_ratio_and_subtracts_reserved() -> None:
    hosts = [
        host(
            "h1",
            ram=4096,
            ratios={MEMORY_MB: 1.5},
            reserved={MEMORY_MB: 512},
            used={MEMORY_MB: 5000},
        )
    ]
    assert raw_weights(RAMWeigher, hosts) == [-1416]
