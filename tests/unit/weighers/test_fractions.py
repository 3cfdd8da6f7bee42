"""The fraction-based weighers, headroom and the profiles' orderings: named
cases, and properties over drawn hosts (dominance in free share is respected
by spread and by pack)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from scheduler.engine.plugins import build
from scheduler.objects import DISK_GB, MEMORY_MB, VCPU
from scheduler.weighers.alignment import AlignmentWeigher
from scheduler.weighers.allocation import resource_weights
from scheduler.weighers.balanced import BalancedAllocationWeigher
from scheduler.weighers.base import BaseWeigher
from scheduler.weighers.headroom import HeadroomWeigher, amounts
from scheduler.weighers.least_allocated import LeastAllocatedWeigher
from scheduler.weighers.most_allocated import MostAllocatedWeigher
from tests.unit.factories import Host, context, host, settings, spec, view_of

GIB = 1024


def weights(
    weigher_cls: type[BaseWeigher[Any]],
    hosts: list[Host],
    request: Mapping[str, int] | None = None,
    **options: object,
) -> dict[str, float]:
    """Each host's contribution under this weigher alone (multiplier 1 unless given)."""
    options.setdefault(weigher_cls.MULTIPLIER_OPTION, 1.0)
    weigher = build(weigher_cls, settings(**options))
    view = view_of(*hosts)
    ctx = context(spec(**(request or {})))
    idx = np.arange(view.size)
    out = weigher.weigh(view, idx, ctx, weigher.prepare(ctx))
    return {view.names[i]: float(out[i]) for i in idx}


def best_first(scores: Mapping[str, float]) -> list[str]:
    return sorted(scores, key=lambda name: -scores[name])


# --- named cases --------------------------------------------------------------------

SMALL_HALF = host(
    "small-half",
    vcpus=16,
    ram=64 * GIB,
    disk=500,
    used={MEMORY_MB: 32 * GIB, DISK_GB: 250, VCPU: 32},
)
BIG_QUARTER = host(
    "big-quarter",
    vcpus=64,
    ram=256 * GIB,
    disk=2000,
    used={MEMORY_MB: 64 * GIB, DISK_GB: 500, VCPU: 64},
)
BIG_EMPTY = host("big-empty", vcpus=64, ram=256 * GIB, disk=2000)


@pytest.mark.parametrize(
    ("weigher", "expected"),
    [
        pytest.param(
            LeastAllocatedWeigher,
            ["big-empty", "big-quarter", "small-half"],
            id="least-allocated-spreads-by-share-not-amount",
        ),
        pytest.param(
            MostAllocatedWeigher,
            ["small-half", "big-quarter", "big-empty"],
            id="most-allocated-packs-by-share",
        ),
    ],
)
def test_fraction_order(weigher: type[BaseWeigher[Any]], expected: list[str]) -> None:
    assert best_first(weights(weigher, [BIG_EMPTY, SMALL_HALF, BIG_QUARTER])) == expected


def test_least_allocated_sees_a_small_host_as_full_as_a_big_one_at_the_same_share() -> None:
    """Nova's RAM weigher prefers the big host (more absolute free RAM); by share
    the two are alike, and only the request's own share of each tells them apart."""
    small = host("small", vcpus=16, ram=64 * GIB, disk=500, used={MEMORY_MB: 32 * GIB})
    big = host("big", vcpus=64, ram=256 * GIB, disk=2000, used={MEMORY_MB: 128 * GIB})
    got = weights(
        LeastAllocatedWeigher,
        [small, big],
        {"ram": 1, "disk": 1, "vcpus": 1},
        allocation_resource_weights={MEMORY_MB: 1.0},
    )
    assert got["small"] == pytest.approx(got["big"], abs=1e-4)


def test_least_allocated_value_is_the_mean_free_share_after_placement() -> None:
    h = host(
        "h",
        vcpus=10,
        ram=1000,
        disk=100,
        ratios={VCPU: 1.0},
        used={VCPU: 5, MEMORY_MB: 0, DISK_GB: 50},
    )
    got = weights(LeastAllocatedWeigher, [h], {"vcpus": 1, "ram": 100, "disk": 10})
    assert got["h"] == pytest.approx(((10 - 6) / 10 + (1000 - 100) / 1000 + (100 - 60) / 100) / 3)


def test_resource_weights_leave_a_class_out() -> None:
    disk_full = host("disk-full", used={DISK_GB: 1000})
    ram_full = host("ram-full", used={MEMORY_MB: 32768})
    only_ram = weights(
        LeastAllocatedWeigher, [disk_full, ram_full], allocation_resource_weights={MEMORY_MB: 1.0}
    )
    assert best_first(only_ram) == ["disk-full", "ram-full"]


def test_balanced_prefers_the_host_whose_classes_fill_alike() -> None:
    level = host("level", ram=1000, disk=1000, used={MEMORY_MB: 500, DISK_GB: 500})
    lopsided = host("lopsided", ram=1000, disk=1000, used={MEMORY_MB: 900, DISK_GB: 100})
    got = weights(
        BalancedAllocationWeigher,
        [lopsided, level],
        {"ram": 0, "disk": 0},
        allocation_resource_weights={MEMORY_MB: 1.0, DISK_GB: 1.0},
    )
    assert got["level"] == pytest.approx(1.0)
    assert got["lopsided"] == pytest.approx(1 - 0.4)


def test_alignment_sends_a_ram_heavy_request_where_ram_is_plentiful() -> None:
    ram_rich = host("ram-rich", ram=1000, disk=1000, used={MEMORY_MB: 100, DISK_GB: 800})
    disk_rich = host("disk-rich", ram=1000, disk=1000, used={MEMORY_MB: 800, DISK_GB: 100})
    request = {"ram": 200, "disk": 10}
    options = {"allocation_resource_weights": {MEMORY_MB: 1.0, DISK_GB: 1.0}}
    got = weights(AlignmentWeigher, [disk_rich, ram_rich], request, **options)
    assert best_first(got) == ["ram-rich", "disk-rich"]
    flipped = weights(AlignmentWeigher, [disk_rich, ram_rich], {"ram": 10, "disk": 200}, **options)
    assert best_first(flipped) == ["disk-rich", "ram-rich"]


LARGEST = {VCPU: 16, MEMORY_MB: 64 * GIB, DISK_GB: 320}


@pytest.mark.parametrize(
    ("used_ram", "request_ram", "expected"),
    [
        pytest.param(0, 2 * GIB, 1.0, id="room-for-two-stays-room-for-two"),
        pytest.param(65 * GIB, 2 * GIB, 0.0, id="takes-the-last-place"),
        pytest.param(100 * GIB, 2 * GIB, 1.0, id="no-place-to-take"),
        pytest.param(0, 64 * GIB, 0.0, id="the-largest-itself-takes-one"),
    ],
)
def test_headroom(used_ram: int, request_ram: int, expected: float) -> None:
    h = host("h", vcpus=64, ram=130 * GIB, disk=2000, used={MEMORY_MB: used_ram})
    got = weights(HeadroomWeigher, [h], {"ram": request_ram, "disk": 20}, headroom_flavor=LARGEST)
    assert got["h"] == expected


def test_headroom_learns_the_largest_request_seen() -> None:
    weigher = build(HeadroomWeigher, settings(headroom_weight_multiplier=1.0, headroom_window=2))
    small = context(spec(vcpus=1, ram=2 * GIB, disk=20))
    big = context(spec(vcpus=16, ram=64 * GIB, disk=10))

    def largest(ctx: Any) -> list[int]:
        state = weigher.prepare(ctx)
        assert state is not None
        return list(state.largest)

    assert largest(small) == [1, 2 * GIB, 20]
    assert largest(big) == [16, 64 * GIB, 20]  # the largest of each class
    assert largest(small) == [16, 64 * GIB, 20]
    assert largest(small) == [1, 2 * GIB, 20]  # the big has left the window of 2


@pytest.mark.parametrize(
    ("parse", "bad"),
    [
        pytest.param(resource_weights, ["VCPU"], id="weights-no-value"),
        pytest.param(resource_weights, ["VCPU=-1"], id="weights-negative"),
        pytest.param(amounts, ["VCPU=0"], id="amount-zero"),
        pytest.param(amounts, ["=3"], id="amount-no-class"),
    ],
)
def test_option_parsers_refuse(parse: Any, bad: list[str]) -> None:
    with pytest.raises(ValueError, match="is not RESOURCE_CLASS="):
        parse(bad)


# --- properties ---------------------------------------------------------------------

SHAPES = st.sampled_from([(16, 64 * GIB, 500), (32, 128 * GIB, 1000), (64, 256 * GIB, 2000)])
SHARE = st.floats(min_value=0.0, max_value=0.9)


@st.composite
def dominating_pair(draw: st.DrawFn) -> tuple[Host, Host]:
    """Two hosts (any shapes): ``roomy`` has a strictly larger free share of every
    class than ``full``, also once the request is placed on either."""
    shapes = draw(SHAPES), draw(SHAPES)
    low = [draw(SHARE) for _ in range(3)]
    gap = [draw(st.floats(min_value=0.02, max_value=1.0)) for _ in range(3)]
    high = [min(0.95, lo + g) for lo, g in zip(low, gap, strict=True)]
    hosts = []
    for name, (vcpus, ram, disk), fill in (("roomy", shapes[0], low), ("full", shapes[1], high)):
        used = {
            VCPU: int(fill[0] * vcpus * 4),
            MEMORY_MB: int(fill[1] * ram),
            DISK_GB: int(fill[2] * disk),
        }
        hosts.append(host(name, vcpus=vcpus, ram=ram, disk=disk, used=used))
    return hosts[0], hosts[1]


@hypothesis_settings(max_examples=150, deadline=None)
@given(pair=dominating_pair())
def test_spread_never_ranks_a_dominating_host_below(pair: tuple[Host, Host]) -> None:
    roomy, full = pair
    got = weights(LeastAllocatedWeigher, [roomy, full], {"vcpus": 1, "ram": 1, "disk": 1})
    assert got["roomy"] >= got["full"]


@hypothesis_settings(max_examples=150, deadline=None)
@given(pair=dominating_pair())
def test_pack_never_ranks_a_dominated_host_below(pair: tuple[Host, Host]) -> None:
    roomy, full = pair
    got = weights(MostAllocatedWeigher, [roomy, full], {"vcpus": 1, "ram": 1, "disk": 1})
    assert got["full"] >= got["roomy"]
