"""IsolatedAggregatesRequestFilter: aggregates reserved for traits keep others out."""

from __future__ import annotations

import pytest

from scheduler.engine import reasons
from scheduler.objects import Image, RequestSpec
from scheduler.request_filters import IsolatedAggregatesRequestFilter
from scheduler.resource_request import HostConstraint
from scheduler.store.base import Aggregate
from tests.unit.factories import spec, uuid_of
from tests.unit.request_filters.helpers import added

GPU = Aggregate(uuid_of("agg-gpu"), "gpu", {"trait:CUSTOM_GPU": "required"})
GPU_AVX = Aggregate(
    uuid_of("agg-gpu-avx"), "gpu-avx", {"trait:CUSTOM_GPU": "required", "trait:HW_AVX": "required"}
)
NOT_ISOLATING = Aggregate(uuid_of("agg-x"), "x", {"trait:CUSTOM_GPU": "preferred"})


def closed(*aggregates: Aggregate) -> HostConstraint:
    return HostConstraint(
        reasons.TRAIT_ISOLATED_AGGREGATE,
        forbidden_aggregates=frozenset(a.uuid for a in aggregates),
    )


@pytest.mark.parametrize(
    ("request_", "constraint"),
    [
        pytest.param(spec(), closed(GPU, GPU_AVX), id="closed-to-a-request-without-the-traits"),
        pytest.param(
            spec(extra_specs={"trait:CUSTOM_GPU": "required"}),
            closed(GPU_AVX),
            id="open-to-its-trait-only-when-all-are-asked",
        ),
        pytest.param(
            spec(
                extra_specs={"trait:CUSTOM_GPU": "required"},
                image=Image(properties={"trait:HW_AVX": "required"}),
            ),
            None,
            id="image-traits-count",
        ),
        pytest.param(
            spec(
                extra_specs={
                    "resources1:VGPU": "1",
                    "trait1:CUSTOM_GPU": "required",
                    "trait:HW_AVX": "required",
                }
            ),
            None,
            id="a-numbered-group's-traits-count",
        ),
        pytest.param(
            spec(extra_specs={"trait:CUSTOM_GPU": "forbidden"}),
            closed(GPU, GPU_AVX),
            id="forbidding-is-not-asking",
        ),
    ],
)
def test_isolated_aggregates(request_: RequestSpec, constraint: HostConstraint | None) -> None:
    assert (
        added(IsolatedAggregatesRequestFilter, request_, [GPU, GPU_AVX, NOT_ISOLATING])
        == constraint
    )
