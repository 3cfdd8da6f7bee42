"""Each request filter: what it adds to the request, as a table of named cases,
then the whole chain through the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from scheduler.engine import reasons
from scheduler.exceptions import NoValidHost
from scheduler.objects import Image, RequestSpec
from scheduler.request_filters import (
    AvailabilityZoneRequestFilter,
    DisabledComputesRequestFilter,
    ImageTypeRequestFilter,
    IsolatedAggregatesRequestFilter,
    RequestFilter,
    TenantAggregatesRequestFilter,
)
from scheduler.resource_request import COMPUTE_STATUS_DISABLED, HostConstraint
from scheduler.store.base import Aggregate
from tests.unit.factories import FeedStore, az, engine, host, settings, spec, uuid_of

EAST, WEST, NOVA = az("agg-east", "east"), az("agg-west", "west"), az("agg-nova", "nova")
TENANT_A = Aggregate(uuid_of("agg-a"), "tenant-a", {"filter_tenant_id": "project"})
TENANT_AB = Aggregate(uuid_of("agg-ab"), "tenant-ab", {"filter_tenant_id2": "other, project"})
TENANT_B = Aggregate(uuid_of("agg-b"), "tenant-b", {"filter_tenant_id": "other"})
GPU_ONLY = Aggregate(uuid_of("agg-gpu"), "gpu", {"trait:CUSTOM_GPU": "required"})
GPU_AVX = Aggregate(uuid_of("agg-gpu-avx"), "gpu-avx",
                    {"trait:CUSTOM_GPU": "required", "trait:HW_AVX": "required"})
NOT_ISOLATING = Aggregate(uuid_of("agg-x"), "x", {"trait:CUSTOM_GPU": "preferred"})


@dataclass
class Case:
    name: str
    cls: type[RequestFilter]
    request: RequestSpec
    aggregates: list[Aggregate]
    added: HostConstraint | None  # None: the request comes back unchanged
    options: dict[str, object] = field(default_factory=dict)


CASES = [
    Case("disabled-forbids-the-status-trait", DisabledComputesRequestFilter, spec(), [],
         HostConstraint(reasons.DISABLED, forbidden_traits=frozenset({COMPUTE_STATUS_DISABLED}))),
    Case("zone-to-its-aggregates", AvailabilityZoneRequestFilter,
         spec(availability_zone="east"), [EAST, WEST],
         HostConstraint(reasons.NOT_IN_ZONE, member_of=frozenset({EAST.uuid}))),
    Case("no-zone-asked", AvailabilityZoneRequestFilter, spec(), [EAST], None),
    Case("unknown-zone-finds-nothing", AvailabilityZoneRequestFilter,
         spec(availability_zone="atlantis"), [EAST],
         HostConstraint(reasons.UNKNOWN_ZONE, member_of=frozenset())),
    Case("default-zone-is-outside-every-zone-aggregate", AvailabilityZoneRequestFilter,
         spec(availability_zone="nova"), [EAST, WEST],
         HostConstraint(reasons.NOT_IN_ZONE, forbidden_aggregates=frozenset(
             {EAST.uuid, WEST.uuid}))),
    Case("default-zone-named-by-an-aggregate", AvailabilityZoneRequestFilter,
         spec(availability_zone="nova"), [EAST, NOVA],
         HostConstraint(reasons.NOT_IN_ZONE, member_of=frozenset({NOVA.uuid}))),
    Case("default-zone-without-zone-aggregates", AvailabilityZoneRequestFilter,
         spec(availability_zone="nova"), [], None),
    Case("tenant-to-its-aggregates", TenantAggregatesRequestFilter, spec(),
         [TENANT_A, TENANT_AB, TENANT_B],
         HostConstraint(reasons.NOT_IN_TENANT_AGGREGATE,
                        member_of=frozenset({TENANT_A.uuid, TENANT_AB.uuid}))),
    Case("tenant-without-aggregates-is-free", TenantAggregatesRequestFilter, spec(),
         [TENANT_B], None),
    Case("tenant-without-aggregates-when-required", TenantAggregatesRequestFilter, spec(),
         [TENANT_B], HostConstraint(reasons.NO_TENANT_AGGREGATE, member_of=frozenset()),
         {"placement_aggregate_required_for_tenants": True}),
    Case("isolated-aggregates-forbidden-without-their-traits", IsolatedAggregatesRequestFilter,
         spec(), [GPU_ONLY, GPU_AVX, NOT_ISOLATING],
         HostConstraint(reasons.TRAIT_ISOLATED_AGGREGATE,
                        forbidden_aggregates=frozenset({GPU_ONLY.uuid, GPU_AVX.uuid}))),
    Case("isolated-aggregate-open-to-its-trait", IsolatedAggregatesRequestFilter,
         spec(extra_specs={"trait:CUSTOM_GPU": "required"}), [GPU_ONLY, GPU_AVX],
         HostConstraint(reasons.TRAIT_ISOLATED_AGGREGATE,
                        forbidden_aggregates=frozenset({GPU_AVX.uuid}))),
    Case("isolated-aggregates-all-open", IsolatedAggregatesRequestFilter,
         spec(extra_specs={"trait:CUSTOM_GPU": "required"},
              image=Image(properties={"trait:HW_AVX": "required"})), [GPU_ONLY, GPU_AVX], None),
    Case("image-type-trait", ImageTypeRequestFilter,
         spec(image=Image(id="img", disk_format="qcow2")), [],
         HostConstraint(reasons.image_type("qcow2"),
                        required_traits=frozenset({"COMPUTE_IMAGE_TYPE_QCOW2"}))),
    Case("image-without-format", ImageTypeRequestFilter, spec(image=Image(id="img")), [], None),
    Case("volume-backed-has-no-image-to-write", ImageTypeRequestFilter,
         spec(image=Image(id="img", disk_format="raw"), is_bfv=True), [], None),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_request_filter(case: Case) -> None:
    request = case.request.resource_request
    out = case.cls(settings(**case.options)).apply(request, case.request,
                                                   {a.uuid: a for a in case.aggregates})
    assert request.host_constraints == ()  # never mutated
    if case.added is None:
        assert out == request
    else:
        assert out.host_constraints == (case.added,)
        assert out.groups == request.groups


ORDER = [DisabledComputesRequestFilter, AvailabilityZoneRequestFilter,
         TenantAggregatesRequestFilter, IsolatedAggregatesRequestFilter, ImageTypeRequestFilter]
ALL_ON = {cls.OPTION: True for cls in ORDER}


@pytest.mark.parametrize(("options", "wired"), [
    pytest.param({}, ORDER[:2], id="nova-defaults"),
    pytest.param(ALL_ON, ORDER, id="all-on-in-order"),
    pytest.param({cls.OPTION: False for cls in ORDER}, [], id="all-off"),
])
def test_the_engine_wires_the_enabled_ones_in_order(options: dict,
                                                    wired: list[type[RequestFilter]]) -> None:
    assert [type(f) for f in engine(FeedStore(), **options).request_filters] == wired


# --- through the engine -----------------------------------------------------------------


@pytest.mark.parametrize(("hosts", "aggregates", "request_", "chosen", "reasons_"), [
    pytest.param([host("mine", aggregates=[TENANT_A.uuid]), host("shared")], [TENANT_A],
                 spec(), {"mine"}, {reasons.NOT_IN_TENANT_AGGREGATE: 1}, id="tenant-isolation"),
    pytest.param([host("east1", aggregates=[EAST.uuid]), host("west1", aggregates=[WEST.uuid]),
                  host("nozone")], [EAST, WEST], spec(availability_zone="nova"), {"nozone"},
                 {reasons.NOT_IN_ZONE: 2}, id="default-zone"),
    pytest.param([host("gpu", aggregates=[GPU_ONLY.uuid]), host("general")], [GPU_ONLY],
                 spec(), {"general"}, {reasons.TRAIT_ISOLATED_AGGREGATE: 1},
                 id="isolated-by-trait"),
    pytest.param([host("qcow", traits=["COMPUTE_IMAGE_TYPE_QCOW2"]), host("raw-only")], [],
                 spec(image=Image(disk_format="qcow2")), {"qcow"},
                 {"image type qcow2 not supported": 1}, id="image-type"),
    pytest.param([host("off", disabled=True, aggregates=[TENANT_A.uuid]),
                  host("mine", aggregates=[TENANT_A.uuid]), host("shared")], [TENANT_A],
                 spec(), {"mine"}, {reasons.DISABLED: 1, reasons.NOT_IN_TENANT_AGGREGATE: 1},
                 id="disabled-counted-first"),
])
def test_chain_through_the_engine(hosts: list, aggregates: list[Aggregate],
                                  request_: RequestSpec, chosen: set[str],
                                  reasons_: dict[str, int]) -> None:
    store = FeedStore(hosts, aggregates)
    result = engine(store, **ALL_ON).schedule("req", request_, [uuid_of("i1")], claim=False)
    assert result.traces[0].host in chosen
    assert result.traces[0].reasons == reasons_


def test_no_aggregate_for_the_project_names_the_reason() -> None:
    store = FeedStore([host("h1"), host("h2")], [TENANT_B])
    eng = engine(store, limit_tenants_to_placement_aggregate=True,
                 placement_aggregate_required_for_tenants=True)
    with pytest.raises(NoValidHost) as err:
        eng.select("req", spec(), [uuid_of("i1")])
    assert err.value.details == "0/2 hosts available: 2 no aggregate for the project"
