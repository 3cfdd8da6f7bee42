"""AggregateMultiTenancyIsolation: aggregates that take only listed projects."""

from __future__ import annotations

import pytest

from scheduler.filters.aggregate_multitenancy_isolation import AggregateMultiTenancyIsolation
from tests.unit.factories import aggregate, host, spec, uuid_of
from tests.unit.filters.helpers import kept

AGGREGATES = [
    aggregate("acme", filter_tenant_id="acme, umbrella"),
    aggregate("globex", filter_tenant_id_2="globex"),
    aggregate("plain", ssd="true"),
]
HOSTS = [
    host("acme", aggregates=[uuid_of("acme")]),
    host("globex", aggregates=[uuid_of("globex")]),
    host("shared", aggregates=[uuid_of("acme"), uuid_of("globex")]),
    host("plain", aggregates=[uuid_of("plain")]),
    host("none"),
]


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        pytest.param("acme", ["acme", "shared", "plain", "none"], id="listed-project"),
        pytest.param("umbrella", ["acme", "shared", "plain", "none"], id="second-of-a-list"),
        pytest.param("globex", ["globex", "shared", "plain", "none"], id="suffixed-key"),
        pytest.param("initech", ["plain", "none"], id="unlisted-project"),
    ],
)
def test_multitenancy_isolation(project: str, expected: list[str]) -> None:
    assert (
        kept(
            AggregateMultiTenancyIsolation, HOSTS, spec(project_id=project), aggregates=AGGREGATES
        )
        == expected
    )
