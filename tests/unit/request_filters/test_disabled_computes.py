"""DisabledComputesRequestFilter: forbids COMPUTE_STATUS_DISABLED on the compute node."""

from __future__ import annotations

import pytest

from scheduler.engine import reasons
from scheduler.objects import Image
from scheduler.request_filters import DisabledComputesRequestFilter
from scheduler.resource_request import COMPUTE_STATUS_DISABLED, HostConstraint
from tests.unit.factories import spec
from tests.unit.request_filters.helpers import added

FORBID = HostConstraint(reasons.DISABLED, forbidden_traits=frozenset({COMPUTE_STATUS_DISABLED}))


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(spec(), id="plain"),
        pytest.param(
            spec(image=Image(disk_format="raw"), availability_zone="east"), id="any-spec"
        ),
    ],
)
def test_every_request_forbids_the_status_trait(request_: object) -> None:
    assert added(DisabledComputesRequestFilter, request_) == FORBID  # type: ignore[arg-type]
