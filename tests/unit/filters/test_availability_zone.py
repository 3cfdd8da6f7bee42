"""AvailabilityZoneFilter: hosts outside the requested zone are rejected."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.engine.hostview import HostView
from scheduler.filters.availability_zone import AvailabilityZoneFilter
from scheduler.store.base import Aggregate
from tests.unit.factories import az, context, host, settings, spec, view_of

EAST, WEST = az("agg-east", "east"), az("agg-west", "west")
PLAIN = Aggregate(uuid="agg-plain", name="plain", metadata={})  # an aggregate naming no zone


def zone_view() -> HostView:
    return view_of(
        host("e1", aggregates=[EAST.uuid]),
        host("w1", aggregates=[WEST.uuid]),
        host("both", aggregates=[EAST.uuid, WEST.uuid]),
        host("plain", aggregates=[PLAIN.uuid]),
        host("bare"),
        aggregates=[EAST, WEST, PLAIN],
        default_availability_zone="nova",
    )


@pytest.mark.parametrize(
    ("zone", "kept"),
    [
        pytest.param("east", ["e1", "both"], id="named-zone"),
        pytest.param("west", ["w1", "both"], id="host-in-two-zones-matches-each"),
        pytest.param("nova", ["plain", "bare"], id="default-zone-is-hosts-in-no-zone"),
        pytest.param("atlantis", [], id="zone-with-no-hosts-finds-none-we-differ"),
        pytest.param("East", [], id="zone-names-are-case-sensitive"),
    ],
)
def test_availability_zone_filter(zone: str, kept: list[str]) -> None:
    view = zone_view()
    idx = np.arange(view.size)
    mask = AvailabilityZoneFilter(settings()).passes(
        view, idx, context(spec(availability_zone=zone)), zone
    )
    assert [view.names[i] for i in idx[mask]] == kept


def test_no_requested_zone_does_not_apply() -> None:
    assert AvailabilityZoneFilter(settings()).prepare(context(spec())) is None
    assert (
        AvailabilityZoneFilter(settings()).prepare(context(spec(availability_zone="east")))
        is not None
    )
