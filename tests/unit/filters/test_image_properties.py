"""ImagePropertiesFilter: architecture, hypervisor type, VM mode and version."""

from __future__ import annotations

import pytest

from scheduler.filters.image_properties import ImagePropertiesFilter
from tests.unit.factories import host, spec
from tests.unit.filters.helpers import kept

HOSTS = [
    host(
        "kvm-x86",
        capabilities={
            "hypervisor_version": 6002000,
            "supported_instances": [["x86_64", "kvm", "hvm"], ["i686", "kvm", "hvm"]],
        },
    ),
    host(
        "xen-x86",
        capabilities={
            "hypervisor_version": 4011000,
            "supported_instances": [["x86_64", "xen", "xen"], ["x86_64", "xen", "hvm"]],
        },
    ),
    host("kvm-arm", capabilities={"supported_instances": [["aarch64", "kvm", "hvm"]]}),
    host("legacy", capabilities={"cpu_arch": "x86_64"}),  # reports no supported instances
]
ALL = ["kvm-x86", "xen-x86", "kvm-arm", "legacy"]


@pytest.mark.parametrize(
    ("props", "default_arch", "expected"),
    [
        pytest.param(None, None, ALL, id="no-image"),
        pytest.param({"os_distro": "ubuntu"}, None, ALL, id="unrelated-properties"),
        pytest.param({"hw_architecture": "x86_64"}, None, ["kvm-x86", "xen-x86"], id="arch"),
        pytest.param(
            {"hw_architecture": "AMD64"}, None, ["kvm-x86", "xen-x86"], id="arch-normalised"
        ),
        pytest.param({"architecture": "i386"}, None, ["kvm-x86"], id="legacy-name-i386-is-i686"),
        pytest.param({"img_hv_type": "KVM"}, None, ["kvm-x86", "kvm-arm"], id="hv-type"),
        pytest.param({"hw_vm_mode": "pv"}, None, ["xen-x86"], id="pv-is-xen"),
        pytest.param(
            {"hw_architecture": "aarch64", "img_hv_type": "xen"},
            None,
            [],
            id="no-triple-holds-both",
        ),
        pytest.param(
            {"hw_architecture": "x86_64", "img_hv_requested_version": ">=6.0"},
            None,
            ["kvm-x86"],
            id="version-with-arch",
        ),
        pytest.param(
            {"img_hv_requested_version": ">=6.0"}, None, ALL, id="version-alone-checks-nothing"
        ),
        pytest.param(
            {"img_hv_type": "kvm", "img_hv_requested_version": ">=99"},
            None,
            ["kvm-arm"],
            id="version-0-passes",
        ),
        pytest.param(None, "aarch64", ["kvm-arm"], id="default-arch-without-image"),
        pytest.param(
            {"hw_architecture": "x86_64"},
            "aarch64",
            ["kvm-x86", "xen-x86"],
            id="image-arch-beats-default",
        ),
    ],
)
def test_image_properties(
    props: dict[str, str] | None, default_arch: str | None, expected: list[str]
) -> None:
    request = spec(image_properties=props) if props is not None else spec()
    assert (
        kept(
            ImagePropertiesFilter,
            HOSTS,
            request,
            image_properties_default_architecture=default_arch,
        )
        == expected
    )


def test_volume_backed_request_keeps_its_image_properties() -> None:
    request = spec(image_properties={"hw_architecture": "aarch64"}, is_bfv=True)
    assert kept(ImagePropertiesFilter, HOSTS, request) == ["kvm-arm"]
