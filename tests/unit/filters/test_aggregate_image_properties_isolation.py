"""AggregateImagePropertiesIsolation: aggregate metadata against image properties."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from scheduler.filters.aggregate_image_properties_isolation import (
    AggregateImagePropertiesIsolation,
)
from tests.unit.factories import aggregate, host, spec, uuid_of
from tests.unit.filters.helpers import kept

AGGREGATES = [
    aggregate("windows", os_distro="windows"),
    aggregate("linux", os_distro="ubuntu , centos"),
    aggregate("fedora", os_distro="fedora"),
    aggregate("ns", **{"iso.tier": "gold, silver", "tier": "bronze"}),
]
HOSTS = [
    host("windows", aggregates=[uuid_of("windows")]),
    host("linux", aggregates=[uuid_of("linux")]),
    host("linux+fedora", aggregates=[uuid_of("linux"), uuid_of("fedora")]),
    host("ns", aggregates=[uuid_of("ns")]),
    host("none"),
]
EVERY = ["windows", "linux", "linux+fedora", "ns", "none"]


@pytest.mark.parametrize(
    ("props", "options", "expected"),
    [
        pytest.param({}, {}, EVERY, id="no-properties-restrict-nothing"),
        pytest.param({"os_distro": "windows"}, {}, ["windows", "ns", "none"], id="matching-value"),
        pytest.param(
            {"os_distro": "centos"},
            {},
            ["linux", "linux+fedora", "ns", "none"],
            id="second-of-a-list-with-spaces",
        ),
        pytest.param(
            {"os_distro": "fedora"},
            {},
            ["linux+fedora", "ns", "none"],
            id="union-over-aggregates",
        ),
        pytest.param({"os_distro": "arch"}, {}, ["ns", "none"], id="unlisted-value"),
        pytest.param({"os_distro": ""}, {}, EVERY, id="empty-value-restricts-nothing"),
        pytest.param({"os_type": "linux"}, {}, EVERY, id="property-no-aggregate-names"),
        pytest.param(
            {"tier": "gold"},
            {},
            ["windows", "linux", "linux+fedora", "none"],
            id="no-namespace-every-key-counts",
        ),
        pytest.param(
            {"tier": "gold", "os_distro": "arch"},
            {"aggregate_image_properties_isolation_namespace": "iso"},
            EVERY,
            id="namespace-skips-other-keys",
        ),
        pytest.param(
            {"iso.tier": "silver"},
            {"aggregate_image_properties_isolation_namespace": "iso"},
            EVERY,
            id="namespaced-match",
        ),
        pytest.param(
            {"iso.tier": "bronze"},
            {"aggregate_image_properties_isolation_namespace": "iso"},
            ["windows", "linux", "linux+fedora", "none"],
            id="namespaced-mismatch",
        ),
        pytest.param(
            {"iso.tier": "bronze"},
            {
                "aggregate_image_properties_isolation_namespace": "iso",
                "aggregate_image_properties_isolation_separator": ":",
            },
            EVERY,
            id="separator-is-part-of-the-prefix",
        ),
    ],
)
def test_image_properties_isolation(
    props: Mapping[str, str], options: Mapping[str, str], expected: list[str]
) -> None:
    request = spec(image_properties=props)
    assert (
        kept(AggregateImagePropertiesIsolation, HOSTS, request, AGGREGATES, **options) == expected
    )


def test_a_request_without_an_image_passes_everywhere() -> None:
    assert kept(AggregateImagePropertiesIsolation, HOSTS, spec(), AGGREGATES) == EVERY
