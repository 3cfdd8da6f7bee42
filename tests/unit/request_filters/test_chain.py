"""The request filters together: wired by the engine, in order, counted first."""

from __future__ import annotations

import pytest

from scheduler.engine import reasons
from scheduler.exceptions import NoValidHost
from scheduler.objects import Image, RequestSpec
from scheduler.request_filters import (
    AvailabilityZoneRequestFilter,
    DestinationRequestFilter,
    DisabledComputesRequestFilter,
    ImageTypeRequestFilter,
    IsolatedAggregatesRequestFilter,
    RequestFilter,
    TenantAggregatesRequestFilter,
)
from scheduler.store.base import Aggregate
from tests.unit.factories import HookedStore, az, engine, host, spec, uuid_of

EAST, WEST = az("agg-east", "east"), az("agg-west", "west")
TENANT_A = Aggregate(uuid_of("agg-a"), "tenant-a", {"filter_tenant_id": "project"})
TENANT_B = Aggregate(uuid_of("agg-b"), "tenant-b", {"filter_tenant_id": "other"})
GPU_ONLY = Aggregate(uuid_of("agg-gpu"), "gpu", {"trait:CUSTOM_GPU": "required"})

ORDER = [
    DisabledComputesRequestFilter,
    AvailabilityZoneRequestFilter,
    TenantAggregatesRequestFilter,
    IsolatedAggregatesRequestFilter,
    ImageTypeRequestFilter,
]
ALL_ON = {cls.OPTION: True for cls in ORDER}


@pytest.mark.parametrize(
    ("options", "wired"),
    [
        pytest.param({}, ORDER[:2], id="nova-defaults"),
        pytest.param(ALL_ON, ORDER, id="all-on-in-order"),
        pytest.param({cls.OPTION: False for cls in ORDER}, [], id="all-off"),
    ],
)
def test_the_engine_wires_the_enabled_ones_in_order(
    options: dict, wired: list[type[RequestFilter]]
) -> None:
    # The destination filter reads the request's own fields: always on, first.
    assert [type(f) for f in engine(HookedStore(), **options).request_filters] == [
        DestinationRequestFilter,
        *wired,
    ]


# --- through the engine -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("hosts", "aggregates", "request_", "chosen", "reasons_"),
    [
        pytest.param(
            [host("mine", aggregates=[TENANT_A.uuid]), host("shared")],
            [TENANT_A],
            spec(),
            {"mine"},
            {reasons.NOT_IN_TENANT_AGGREGATE: 1},
            id="tenant-isolation",
        ),
        pytest.param(
            [
                host("east1", aggregates=[EAST.uuid]),
                host("west1", aggregates=[WEST.uuid]),
                host("nozone"),
            ],
            [EAST, WEST],
            spec(availability_zone="nova"),
            {"nozone"},
            {reasons.NOT_IN_ZONE: 2},
            id="default-zone",
        ),
        pytest.param(
            [host("gpu", aggregates=[GPU_ONLY.uuid]), host("general")],
            [GPU_ONLY],
            spec(),
            {"general"},
            {reasons.TRAIT_ISOLATED_AGGREGATE: 1},
            id="isolated-by-trait",
        ),
        pytest.param(
            [host("qcow", traits=["COMPUTE_IMAGE_TYPE_QCOW2"]), host("raw-only")],
            [],
            spec(image=Image(disk_format="qcow2")),
            {"qcow"},
            {"image type qcow2 not supported": 1},
            id="image-type",
        ),
        pytest.param(
            [
                host("off", disabled=True, aggregates=[TENANT_A.uuid]),
                host("mine", aggregates=[TENANT_A.uuid]),
                host("shared"),
            ],
            [TENANT_A],
            spec(),
            {"mine"},
            {reasons.DISABLED: 1, reasons.NOT_IN_TENANT_AGGREGATE: 1},
            id="disabled-counted-first",
        ),
    ],
)
def test_chain_through_the_engine(
    hosts: list,
    aggregates: list[Aggregate],
    request_: RequestSpec,
    chosen: set[str],
    reasons_: dict[str, int],
) -> None:
    store = HookedStore(hosts, aggregates)
    result = engine(store, **ALL_ON).schedule("req", request_, [uuid_of("i1")], claim=False)
    assert result.traces[0].host in chosen
    assert result.traces[0].reasons == reasons_


def test_no_aggregate_for_the_project_names_the_reason() -> None:
    store = HookedStore([host("h1"), host("h2")], [TENANT_B])
    eng = engine(
        store,
        limit_tenants_to_placement_aggregate=True,
        placement_aggregate_required_for_tenants=True,
    )
    with pytest.raises(NoValidHost) as err:
        eng.select("req", spec(), [uuid_of("i1")])
    assert err.value.details == "0/2 hosts available: 2 no aggregate for the project"
