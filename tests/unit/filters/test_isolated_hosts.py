"""IsolatedHostsFilter: isolated images on isolated hosts (and, restricted, only them)."""

from __future__ import annotations

import pytest

from scheduler.filters.isolated_hosts import IsolatedHostsFilter
from scheduler.objects import RequestSpec
from tests.unit.factories import host, spec
from tests.unit.filters.helpers import kept

HOSTS = [host("iso1"), host("iso2"), host("open")]
ISO_IMAGE, OTHER_IMAGE = "img-isolated", "img-other"


@pytest.mark.parametrize(
    ("request_", "isolated_images", "restrict", "expected"),
    [
        pytest.param(
            spec(image_id=ISO_IMAGE),
            (ISO_IMAGE,),
            True,
            ["iso1", "iso2"],
            id="isolated-image-to-isolated-hosts",
        ),
        pytest.param(
            spec(image_id=OTHER_IMAGE),
            (ISO_IMAGE,),
            True,
            ["open"],
            id="restricted-hosts-refuse-other-images",
        ),
        pytest.param(
            spec(image_id=OTHER_IMAGE),
            (ISO_IMAGE,),
            False,
            ["iso1", "iso2", "open"],
            id="unrestricted-hosts-take-other-images",
        ),
        pytest.param(
            spec(image_id=ISO_IMAGE),
            (ISO_IMAGE,),
            False,
            ["iso1", "iso2"],
            id="isolated-image-always-restricted",
        ),
        pytest.param(
            spec(image_id=ISO_IMAGE, is_bfv=True),
            (ISO_IMAGE,),
            True,
            ["open"],
            id="volume-backed-is-not-an-isolated-image",
        ),
        pytest.param(spec(), (ISO_IMAGE,), True, ["open"], id="no-image-is-not-isolated"),
        pytest.param(
            spec(image_id=OTHER_IMAGE),
            (),
            True,
            ["open"],
            id="no-isolated-images-keeps-hosts-free",
        ),
        pytest.param(
            spec(image_id=OTHER_IMAGE),
            (),
            False,
            ["iso1", "iso2", "open"],
            id="no-isolated-images-unrestricted-does-nothing",
        ),
    ],
)
def test_isolated_hosts(
    request_: RequestSpec, isolated_images: tuple[str, ...], restrict: bool, expected: list[str]
) -> None:
    assert (
        kept(
            IsolatedHostsFilter,
            HOSTS,
            request_,
            isolated_hosts=("iso1", "iso2", "gone"),
            isolated_images=isolated_images,
            restrict_isolated_hosts_to_isolated_images=restrict,
        )
        == expected
    )


def test_isolated_image_with_no_isolated_hosts_finds_none() -> None:
    assert (
        kept(IsolatedHostsFilter, HOSTS, spec(image_id=ISO_IMAGE), isolated_images=(ISO_IMAGE,))
        == []
    )
