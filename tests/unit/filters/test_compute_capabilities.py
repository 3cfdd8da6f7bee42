"""ComputeCapabilitiesFilter: flavor extra specs against reported capabilities."""

from __future__ import annotations

import pytest

from scheduler.filters.compute_capabilities import ComputeCapabilitiesFilter
from tests.unit.factories import context, host, settings, spec
from tests.unit.filters.helpers import kept

INTEL = {
    "cpu_arch": "x86_64",
    "hypervisor_type": "kvm",
    "hypervisor_version": 6002000,
    "cpu_info": {"vendor": "Intel", "features": ["avx", "avx2"]},
    "ssd": "true",
}
AMD = {
    "cpu_arch": "x86_64",
    "hypervisor_type": "qemu",
    "hypervisor_version": 5000000,
    "cpu_info": {"vendor": "AMD", "features": ["avx"]},
}
HOSTS = [
    host("intel", capabilities=INTEL, stats={"gpus": 2}, consumers=2),
    host("amd", capabilities=AMD, stats={"gpus": 0}),
    host("silent"),
]


@pytest.mark.parametrize(
    ("extra_specs", "expected"),
    [
        pytest.param({}, ["intel", "amd", "silent"], id="no-specs"),
        pytest.param({"capabilities:cpu_info:vendor": "Intel"}, ["intel"], id="nested-plain"),
        pytest.param({"capabilities:cpu_info:vendor": "<or> AMD <or> Hygon"}, ["amd"], id="or"),
        pytest.param(
            {"capabilities:hypervisor_version": ">= 6000000"}, ["intel"], id="numeric-version"
        ),
        pytest.param(
            {"capabilities:cpu_info:features": "<all-in> avx avx2"}, ["intel"], id="list-all-in"
        ),
        pytest.param(
            {"capabilities:cpu_info:features": "avx"}, ["intel", "amd"], id="list-contains"
        ),
        pytest.param({"capabilities:gpus": ">= 1"}, ["intel"], id="falls-back-to-stats"),
        pytest.param(
            {"capabilities:num_instances": "<= 1"}, ["amd", "silent"], id="live-instance-count"
        ),
        pytest.param({"capabilities:ssd": "true"}, ["intel"], id="scoped-missing-fails"),
        pytest.param(
            {"ssd": "true"}, ["intel", "amd", "silent"], id="unscoped-asked-only-where-reported"
        ),
        pytest.param({"ssd": "false"}, ["amd", "silent"], id="unscoped-mismatch-fails"),
        pytest.param(
            {"hypervisor_type": "s== kvm", "capabilities:cpu_arch": "x86_64"},
            ["intel"],
            id="every-spec-must-hold",
        ),
        pytest.param(
            {"hw:cpu_policy": "dedicated", "trait:HW_CPU_X86_AVX": "required"},
            ["intel", "amd", "silent"],
            id="other-namespaces-ignored",
        ),
        pytest.param(
            {"aggregate_instance_extra_specs:ssd": "false"},
            ["intel", "amd", "silent"],
            id="aggregate-scope-ignored",
        ),
    ],
)
def test_compute_capabilities(extra_specs: dict[str, str], expected: list[str]) -> None:
    assert kept(ComputeCapabilitiesFilter, HOSTS, spec(extra_specs=extra_specs)) == expected


@pytest.mark.parametrize(
    ("extra_specs", "applies"),
    [
        pytest.param({}, False, id="no-specs"),
        pytest.param({"hw:mem_page_size": "large"}, False, id="only-other-namespaces"),
        pytest.param({"ssd": "true"}, True, id="unscoped"),
        pytest.param({"capabilities:cpu_arch": "x86_64"}, True, id="scoped"),
    ],
)
def test_applies_only_to_capability_specs(extra_specs: dict[str, str], applies: bool) -> None:
    ctx = context(spec(extra_specs=extra_specs))
    assert (ComputeCapabilitiesFilter(settings()).prepare(ctx) is not None) is applies


# Reported values are compared as the driver reports them, as in Nova: a host
# whose hypervisor says QEMU matches "QEMU", not "qemu"; its architecture
# likewise. (Only the image properties filter canonicalises, on both sides.)
AS_REPORTED = [
    host("libvirt-qemu", capabilities={"hypervisor_type": "QEMU", "cpu_arch": "AMD64"}),
    host("lower-kvm", capabilities={"hypervisor_type": "kvm", "cpu_arch": "x86_64"}),
]


@pytest.mark.parametrize(
    ("extra_specs", "expected"),
    [
        pytest.param({"capabilities:hypervisor_type": "QEMU"}, ["libvirt-qemu"], id="as-reported"),
        pytest.param({"capabilities:hypervisor_type": "qemu"}, [], id="case-matters"),
        pytest.param({"capabilities:hypervisor_type": "s== KVM"}, [], id="no-canonical-kvm"),
        pytest.param({"capabilities:cpu_arch": "AMD64"}, ["libvirt-qemu"], id="arch-as-reported"),
        pytest.param({"capabilities:cpu_arch": "x86_64"}, ["lower-kvm"], id="arch-not-mapped"),
    ],
)
def test_reported_values_are_compared_as_reported(
    extra_specs: dict[str, str], expected: list[str]
) -> None:
    assert kept(ComputeCapabilitiesFilter, AS_REPORTED, spec(extra_specs=extra_specs)) == expected
