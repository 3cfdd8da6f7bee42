"""ImageTypeRequestFilter: the image's disk format becomes a required trait."""

from __future__ import annotations

import pytest

from scheduler.engine import reasons
from scheduler.objects import Image, RequestSpec
from scheduler.request_filters import ImageTypeRequestFilter
from scheduler.resource_request import HostConstraint
from tests.unit.factories import spec
from tests.unit.request_filters.helpers import added


@pytest.mark.parametrize(
    ("request_", "constraint"),
    [
        pytest.param(
            spec(image=Image(id="img", disk_format="qcow2")),
            HostConstraint(
                reasons.image_type("qcow2"),
                required_traits=frozenset({"COMPUTE_IMAGE_TYPE_QCOW2"}),
            ),
            id="qcow2",
        ),
        pytest.param(
            spec(image=Image(disk_format="vhd-x")),
            HostConstraint(
                reasons.image_type("vhd-x"),
                required_traits=frozenset({"COMPUTE_IMAGE_TYPE_VHD_X"}),
            ),
            id="dash-becomes-underscore",
        ),
        pytest.param(spec(image=Image(id="img")), None, id="image-without-format"),
        pytest.param(spec(), None, id="no-image"),
        pytest.param(
            spec(image=Image(id="img", disk_format="raw"), is_bfv=True),
            None,
            id="volume-backed-has-no-image-to-write",
        ),
    ],
)
def test_image_type(request_: RequestSpec, constraint: HostConstraint | None) -> None:
    assert added(ImageTypeRequestFilter, request_) == constraint
