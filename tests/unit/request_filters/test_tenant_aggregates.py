"""TenantAggregatesRequestFilter: a project goes to the aggregates reserved for it."""

from __future__ import annotations

import pytest

from scheduler.engine import reasons
from scheduler.request_filters import TenantAggregatesRequestFilter
from scheduler.resource_request import HostConstraint
from scheduler.store.base import Aggregate
from tests.unit.factories import spec, uuid_of
from tests.unit.request_filters.helpers import added

MINE = Aggregate(uuid_of("agg-a"), "tenant-a", {"filter_tenant_id": "project"})
SHARED = Aggregate(uuid_of("agg-ab"), "tenant-ab", {"filter_tenant_id2": "other, project"})
THEIRS = Aggregate(uuid_of("agg-b"), "tenant-b", {"filter_tenant_id": "other"})
PREFIX_ONLY = Aggregate(uuid_of("agg-c"), "c", {"filter_tenant_id": "project-2"})
OTHER_KEY = Aggregate(uuid_of("agg-d"), "d", {"owner": "project"})


@pytest.mark.parametrize(
    ("aggregates", "options", "constraint"),
    [
        pytest.param(
            [MINE, SHARED, THEIRS],
            {},
            HostConstraint(
                reasons.NOT_IN_TENANT_AGGREGATE, member_of=frozenset({MINE.uuid, SHARED.uuid})
            ),
            id="to-its-aggregates-including-a-listed-one",
        ),
        pytest.param(
            [THEIRS, PREFIX_ONLY, OTHER_KEY], {}, None, id="none-reserved-for-it-is-free"
        ),
        pytest.param(
            [THEIRS],
            {"placement_aggregate_required_for_tenants": True},
            HostConstraint(reasons.NO_TENANT_AGGREGATE, member_of=frozenset()),
            id="none-reserved-when-required-finds-nothing",
        ),
        pytest.param(
            [MINE],
            {"placement_aggregate_required_for_tenants": True},
            HostConstraint(reasons.NOT_IN_TENANT_AGGREGATE, member_of=frozenset({MINE.uuid})),
            id="reserved-when-required",
        ),
    ],
)
def test_tenant_aggregates(
    aggregates: list[Aggregate], options: dict, constraint: HostConstraint | None
) -> None:
    assert added(TenantAggregatesRequestFilter, spec(), aggregates, **options) == constraint
