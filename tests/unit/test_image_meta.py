"""Image property normalisation, version requirements and their validation."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.exceptions import InvalidRequest
from scheduler.image_meta import (
    ImageRequirements,
    VersionRequirement,
    image_requirements,
    validate_image_properties,
    version_to_int,
)


@pytest.mark.parametrize(
    ("props", "default_arch", "wanted"),
    [
        pytest.param({}, None, ImageRequirements(), id="nothing"),
        pytest.param(
            {"hw_architecture": "AMD64"},
            None,
            ImageRequirements(arch="x86_64"),
            id="amd64-is-x86_64",
        ),
        pytest.param(
            {"architecture": "i386"}, None, ImageRequirements(arch="i686"), id="legacy-name-i386"
        ),
        pytest.param(
            {"hw_architecture": "aarch64", "architecture": "x86_64"},
            None,
            ImageRequirements(arch="aarch64"),
            id="current-name-wins",
        ),
        pytest.param(
            {"img_hv_type": "KVM"}, None, ImageRequirements(hv_type="kvm"), id="hv-type-lower"
        ),
        pytest.param(
            {"hypervisor_type": "xapi"}, None, ImageRequirements(hv_type="xen"), id="xapi-is-xen"
        ),
        pytest.param({"hw_vm_mode": "pv"}, None, ImageRequirements(vm_mode="xen"), id="pv-is-xen"),
        pytest.param(
            {"vm_mode": "baremetal"}, None, ImageRequirements(vm_mode="hvm"), id="baremetal-is-hvm"
        ),
        pytest.param({}, "x86_64", ImageRequirements(arch="x86_64"), id="default-arch"),
        pytest.param(
            {"hw_architecture": "ppc64le"},
            "x86_64",
            ImageRequirements(arch="ppc64le"),
            id="image-arch-beats-default",
        ),
    ],
)
def test_image_requirements(
    props: dict[str, str], default_arch: str | None, wanted: ImageRequirements
) -> None:
    assert image_requirements(props, default_arch) == wanted


def test_version_requirement_needs_another_property_to_count() -> None:
    only_version = image_requirements({"img_hv_requested_version": ">=6.0"})
    assert only_version.version is not None and not only_version.asks_anything


@pytest.mark.parametrize(
    ("text", "number"),
    [
        pytest.param("6", 6_000_000, id="major"),
        pytest.param("6.2", 6_002_000, id="minor"),
        pytest.param("6.2.11", 6_002_011, id="patch"),
    ],
)
def test_version_to_int(text: str, number: int) -> None:
    assert version_to_int(text) == number


@pytest.mark.parametrize(
    ("text", "versions", "ok"),
    [
        pytest.param(">=6.0", [5_009_000, 6_000_000, 7_000_000], [False, True, True], id="ge"),
        pytest.param(">=6.0,<7.0", [6_002_000, 7_000_000], [True, False], id="range"),
        pytest.param("==6.2", [6_002_000, 6_002_001], [True, False], id="eq-is-exact"),
        pytest.param("!=6.2", [6_002_000, 6_003_000], [False, True], id="ne"),
        pytest.param(" > 1.0 , <= 2", [1_000_000, 2_000_000], [False, True], id="spaces"),
    ],
)
def test_version_requirement(text: str, versions: list[int], ok: list[bool]) -> None:
    assert VersionRequirement.parse(text).satisfied(np.array(versions)).tolist() == ok


@pytest.mark.parametrize(
    ("props", "message"),
    [
        pytest.param(
            {"hw_architecture": "z80"},
            "'hw_architecture' = 'z80' is not one of",
            id="unknown-arch",
        ),
        pytest.param(
            {"hypervisor_type": "vbox9"}, "'hypervisor_type' = 'vbox9'", id="unknown-type"
        ),
        pytest.param({"hw_vm_mode": "paravirt"}, "'hw_vm_mode' = 'paravirt'", id="unknown-mode"),
        pytest.param({"img_hv_requested_version": "6.0"}, "is not a comparison", id="no-operator"),
        pytest.param({"img_hv_requested_version": ">=6.x"}, "not a version", id="bad-version"),
        pytest.param({"img_hv_requested_version": ">=1.2.3.4"}, "not a version", id="four-parts"),
    ],
)
def test_unreadable_properties_are_refused_naming_them(
    props: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        validate_image_properties(props)
    assert message in err.value.message


@pytest.mark.parametrize(
    "props",
    [
        pytest.param({}, id="none"),
        pytest.param(
            {
                "hw_architecture": "AMD64",
                "img_hv_type": "QEMU",
                "hw_vm_mode": "hv",
                "img_hv_requested_version": ">=2.11,<9",
            },
            id="all-readable",
        ),
        pytest.param({"os_distro": "ubuntu"}, id="other-properties-are-not-checked"),
    ],
)
def test_readable_properties_pass(props: dict[str, str]) -> None:
    validate_image_properties(props)
    assert image_requirements(props).version is not None or "img_hv_requested_version" not in props
