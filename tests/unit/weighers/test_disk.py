"""DiskWeigher: free disk ignoring the ratio; positive spreads, negative packs."""

from __future__ import annotations

import pytest

from scheduler.objects import DISK_GB
from scheduler.weighers.disk import DiskWeigher
from tests.unit.factories import host
from tests.unit.weighers.helpers import ranking, raw_weights

HOSTS = [host("busy", used={DISK_GB: 900}), host("idle"), host("half", used={DISK_GB: 500})]


@pytest.mark.parametrize(
    ("multiplier", "best_first"),
    [
        pytest.param(None, ["idle", "half", "busy"], id="default-spreads"),
        pytest.param(1.0, ["idle", "half", "busy"], id="positive-spreads"),
        pytest.param(-1.0, ["busy", "half", "idle"], id="negative-packs"),
    ],
)
def test_disk_weigher_order(multiplier: float | None, best_first: list[str]) -> None:
    assert ranking(DiskWeigher, HOSTS, multiplier) == best_first


def test_free_disk_ignores_ratio() -> None:
    hosts = [host("h1", disk=100, ratios={DISK_GB: 2.0}, used={DISK_GB: 40})]
    assert raw_weights(DiskWeigher, hosts) == [60]
