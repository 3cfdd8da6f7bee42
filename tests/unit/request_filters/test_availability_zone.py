"""AvailabilityZoneRequestFilter: a zone becomes membership of its aggregates."""

from __future__ import annotations

import pytest

from scheduler.engine import reasons
from scheduler.objects import RequestSpec
from scheduler.request_filters import AvailabilityZoneRequestFilter
from scheduler.resource_request import HostConstraint
from scheduler.store.base import Aggregate
from tests.unit.factories import az, spec
from tests.unit.request_filters.helpers import added

EAST, WEST, NOVA = az("agg-east", "east"), az("agg-west", "west"), az("agg-nova", "nova")
EAST2 = az("agg-east-2", "east")


@pytest.mark.parametrize(
    ("request_", "aggregates", "constraint"),
    [
        pytest.param(
            spec(availability_zone="east"),
            [EAST, EAST2, WEST],
            HostConstraint(reasons.NOT_IN_ZONE, member_of=frozenset({EAST.uuid, EAST2.uuid})),
            id="zone-to-its-aggregates",
        ),
        pytest.param(spec(), [EAST], None, id="no-zone-asked"),
        pytest.param(
            spec(availability_zone="atlantis"),
            [EAST],
            HostConstraint(reasons.UNKNOWN_ZONE, member_of=frozenset()),
            id="unknown-zone-finds-nothing",
        ),
        pytest.param(
            spec(availability_zone="nova"),
            [EAST, WEST],
            HostConstraint(
                reasons.NOT_IN_ZONE, forbidden_aggregates=frozenset({EAST.uuid, WEST.uuid})
            ),
            id="default-zone-is-outside-every-zone-aggregate",
        ),
        pytest.param(
            spec(availability_zone="nova"),
            [EAST, NOVA],
            HostConstraint(reasons.NOT_IN_ZONE, member_of=frozenset({NOVA.uuid})),
            id="default-zone-named-by-an-aggregate",
        ),
        pytest.param(
            spec(availability_zone="nova"), [], None, id="default-zone-without-zone-aggregates"
        ),
        pytest.param(
            spec(availability_zone="east"),
            [Aggregate("x", "x", {"ssd": "1"})],
            HostConstraint(reasons.UNKNOWN_ZONE, member_of=frozenset()),
            id="aggregates-without-zone-metadata-name-none",
        ),
    ],
)
def test_availability_zone(
    request_: RequestSpec, aggregates: list[Aggregate], constraint: HostConstraint | None
) -> None:
    assert added(AvailabilityZoneRequestFilter, request_, aggregates) == constraint


def test_another_default_zone_name() -> None:
    constraint = added(
        AvailabilityZoneRequestFilter,
        spec(availability_zone="home"),
        [EAST],
        default_availability_zone="home",
    )
    assert constraint == HostConstraint(
        reasons.NOT_IN_ZONE, forbidden_aggregates=frozenset({EAST.uuid})
    )
