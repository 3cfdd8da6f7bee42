"""AggregateTypeAffinityFilter: aggregates that take only listed flavors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.filters.aggregate_type_affinity import AggregateTypeAffinityFilter
from scheduler.objects import RequestSpec
from tests.unit.factories import aggregate, host, spec, uuid_of
from tests.unit.filters.helpers import kept

AGGREGATES = [
    aggregate("small", instance_type="m1.tiny, m1.small"),
    aggregate("big", instance_type="m1.xlarge"),
    aggregate("plain", ssd="true"),
]
HOSTS = [
    host("small", aggregates=[uuid_of("small")]),
    host("big", aggregates=[uuid_of("big")]),
    host("both", aggregates=[uuid_of("small"), uuid_of("big")]),
    host("plain", aggregates=[uuid_of("plain")]),
    host("none"),
]


def flavored(name: str) -> RequestSpec:
    request = spec()
    return replace(request, flavor=replace(request.flavor, name=name))


@pytest.mark.parametrize(
    ("flavor", "expected"),
    [
        pytest.param("m1.tiny", ["small", "both", "plain", "none"], id="first-of-a-list"),
        pytest.param("m1.small", ["small", "both", "plain", "none"], id="after-a-comma-and-space"),
        pytest.param("m1.xlarge", ["big", "both", "plain", "none"], id="union-over-aggregates"),
        pytest.param("m1.medium", ["plain", "none"], id="unlisted-flavor"),
        pytest.param("m1", ["plain", "none"], id="no-prefix-match"),
        pytest.param("M1.TINY", ["plain", "none"], id="case-sensitive"),
    ],
)
def test_type_affinity(flavor: str, expected: list[str]) -> None:
    assert kept(AggregateTypeAffinityFilter, HOSTS, flavored(flavor), AGGREGATES) == expected


def test_an_empty_list_takes_no_flavor() -> None:
    hosts = [host("empty", aggregates=[uuid_of("empty")]), host("none")]
    aggregates = [aggregate("empty", instance_type="")]
    assert kept(AggregateTypeAffinityFilter, hosts, flavored("m1.tiny"), aggregates) == ["none"]
