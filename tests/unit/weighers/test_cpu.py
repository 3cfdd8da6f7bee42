"""CPUWeigher: total x ratio - reserved - used (Nova's free vCPUs); positive
spreads, negative packs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_reserved_vcpus_count_as_used_once_unscaled() -> None:
    # 8 vCPUs at 16x, 2 reserved: Nova counts 8 * 16 - 2 = 126 free, not the
    # claim's (8 - 2) * 16 = 96; so it beats a host with 110 plain vCPUs.
    hosts = [
        host("plain", vcpus=110),
        host("overcommitted", vcpus=8, ratios={VCPU: 16.0}, reserved={VCPU: 2}),
    ]
    assert raw_weights(CPUWeigher, hosts) == [110, 126]
    assert ranking(CPUWeigher, hosts) == ["overcommitted", "plain"]


@settings(deadline=None, max_examples=200)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=256),
            st.integers(min_value=0, max_value=256),
            st.sampled_from([0.5, 1.0, 1.5, 2.0, 4.0, 16.0]),
            st.integers(min_value=0, max_value=4096),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_raw_weight_is_total_times_ratio_minus_reserved_minus_used(
    rows: list[tuple[int, int, float, int]],
) -> None:
    hosts = [
        host(
            f"h{i}",
            vcpus=total,
            reserved={VCPU: min(reserved, total)},
            ratios={VCPU: ratio},
            used={VCPU: used},
        )
        for i, (total, reserved, ratio, used) in enumerate(rows)
    ]
    expected = [
        total * ratio - min(reserved, total) - used for total, reserved, ratio, used in rows
    ]
    assert raw_weights(CPUWeigher, hosts) == pytest.approx(expected)
