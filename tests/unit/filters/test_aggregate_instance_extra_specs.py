"""AggregateInstanceExtraSpecsFilter: flavor extra specs against aggregate metadata."""

from __future__ import annotations

import pytest

from scheduler.filters.aggregate_instance_extra_specs import AggregateInstanceExtraSpecsFilter
from tests.unit.factories import aggregate, host, spec, uuid_of
from tests.unit.filters.helpers import kept

AGGREGATES = [
    aggregate("fast", ssd="true", gen="3"),
    aggregate("gpu", gpu="nvidia, amd", gen="2"),
    aggregate("bare"),
]
HOSTS = [
    host("fast", aggregates=[uuid_of("fast")]),
    host("both", aggregates=[uuid_of("fast"), uuid_of("gpu")]),
    host("gpu", aggregates=[uuid_of("gpu")]),
    host("bare", aggregates=[uuid_of("bare")]),
    host("none"),
]


@pytest.mark.parametrize(
    ("extra_specs", "expected"),
    [
        pytest.param({}, ["fast", "both", "gpu", "bare", "none"], id="no-specs"),
        pytest.param({"ssd": "true"}, ["fast", "both"], id="unscoped-key"),
        pytest.param(
            {"aggregate_instance_extra_specs:ssd": "true"}, ["fast", "both"], id="scoped-key"
        ),
        pytest.param({"gpu": "amd"}, ["both", "gpu"], id="comma-split-and-stripped"),
        pytest.param({"gen": "= 3"}, ["fast", "both"], id="operator-numeric-ge"),
        pytest.param({"gen": "2"}, ["both", "gpu"], id="pooled-one-value-suffices"),
        pytest.param({"ssd": "true", "gpu": "nvidia"}, ["both"], id="every-spec-must-hold"),
        pytest.param({"ssd": "false"}, [], id="no-match"),
        pytest.param(
            {
                "hw:cpu_policy": "dedicated",
                "capabilities:ssd": "true",
                "trait:CUSTOM_X": "required",
            },
            ["fast", "both", "gpu", "bare", "none"],
            id="other-namespaces-ignored",
        ),
        pytest.param(
            {"group_policy": "isolate"},
            ["fast", "both", "gpu", "bare", "none"],
            id="placement-key-ignored",
        ),
        pytest.param(
            {
                "required": "!CUSTOM_X",
                "member_of": "in:a,b",
                "member_of1": "c",
                "resources1:VGPU": "1",
            },  # group 1 needs resources to be a valid spec
            ["fast", "both", "gpu", "bare", "none"],
            id="placement-clauses-ignored",
        ),
    ],
)
def test_aggregate_instance_extra_specs(extra_specs: dict[str, str], expected: list[str]) -> None:
    assert (
        kept(
            AggregateInstanceExtraSpecsFilter,
            HOSTS,
            spec(extra_specs=extra_specs),
            aggregates=AGGREGATES,
        )
        == expected
    )
