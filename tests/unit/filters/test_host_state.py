"""Nova's HostState attributes in capability specs: each computed from the
host view as Nova's host state has it, or refused at validation."""

from __future__ import annotations

import operator

import numpy as np
import pytest

from scheduler.exceptions import InvalidRequest
from scheduler.extra_specs import parse
from scheduler.filters.compute_capabilities import ComputeCapabilitiesFilter
from scheduler.filters.host_state import HOST_STATE, UNSUPPORTED
from scheduler.filters.validation import validate_request
from tests.unit.factories import host, spec
from tests.unit.filters.helpers import kept

RC = ("VCPU", "MEMORY_MB", "DISK_GB")
HOSTS = [
    host(
        "small",
        vcpus=16,
        ram=32768,
        disk=1000,
        reserved=dict(zip(RC, (2, 512, 10), strict=True)),
        used=dict(zip(RC, (4, 8192, 100), strict=True)),
        ratios=dict(zip(RC, (16.0, 1.5, 1.0), strict=True)),
        consumers=3,
    ),
    host(
        "big",
        vcpus=64,
        ram=131072,
        disk=2000,
        used=dict(zip(RC, (40, 65536, 500), strict=True)),
        ratios=dict(zip(RC, (4.0, 1.0, 2.0), strict=True)),
        consumers=10,
        failed_builds=2,
    ),
    # Overcommitted past its physical memory and disk: Nova's free amounts
    # go negative.
    host(
        "over",
        vcpus=8,
        ram=16384,
        disk=200,
        reserved={"MEMORY_MB": 1024},
        used=dict(zip(RC, (30, 20000, 250), strict=True)),
        ratios=dict(zip(RC, (4.0, 1.5, 1.5), strict=True)),
        consumers=1,
    ),
    # Its hypervisor says less disk is left than the allocations do (thin
    # disks grown): Nova takes the lower.
    host(
        "thin",
        vcpus=16,
        ram=32768,
        disk=1000,
        used={"DISK_GB": 500},
        capabilities={"disk_available_least": 50},
    ),
]

# Worked by hand as Nova's resource tracker fills the compute node (the
# *_used amounts start at the host's reserved ones) and HostState copies it.
NOVA = {
    "vcpus_total": {"small": 16, "big": 64, "over": 8, "thin": 16},
    # reserved + used
    "vcpus_used": {"small": 2 + 4, "big": 40, "over": 30, "thin": 0},
    "total_usable_ram_mb": {"small": 32768, "big": 131072, "over": 16384, "thin": 32768},
    # memory_mb - (reserved + used)
    "free_ram_mb": {
        "small": 32768 - 512 - 8192,
        "big": 131072 - 65536,
        "over": 16384 - 1024 - 20000,
        "thin": 32768,
    },
    "total_usable_disk_gb": {"small": 1000, "big": 2000, "over": 200, "thin": 1000},
    # local_gb_used * 1024, local_gb_used = reserved + used
    "disk_mb_used": {
        "small": (10 + 100) * 1024,
        "big": 500 * 1024,
        "over": 250 * 1024,
        "thin": 500 * 1024,
    },
    # min(local_gb - local_gb_used, disk_available_least) * 1024
    "free_disk_mb": {
        "small": (1000 - 10 - 100) * 1024,
        "big": (2000 - 500) * 1024,
        "over": (200 - 250) * 1024,
        "thin": 50 * 1024,
    },
    "cpu_allocation_ratio": {"small": 16.0, "big": 4.0, "over": 4.0, "thin": 1.0},
    "ram_allocation_ratio": {"small": 1.5, "big": 1.0, "over": 1.5, "thin": 1.0},
    "disk_allocation_ratio": {"small": 1.0, "big": 2.0, "over": 1.5, "thin": 1.0},
    "num_instances": {"small": 3, "big": 10, "over": 1, "thin": 0},
    "failed_builds": {"small": 0, "big": 2, "over": 0, "thin": 0},
}
NAMES = [h.provider.name for h in HOSTS]


def test_over_is_overcommitted_as_in_nova() -> None:
    assert NOVA["free_ram_mb"]["over"] == -4640
    assert NOVA["free_disk_mb"]["over"] == -51200


def test_every_numeric_attribute_has_a_worked_case() -> None:
    assert set(NOVA) == set(HOST_STATE) - {"num_io_ops"}  # num_io_ops: the filter's own tests


@pytest.mark.parametrize("attribute", sorted(NOVA))
@pytest.mark.parametrize("op", ["==", ">=", "<=", "!=", "="])
def test_each_host_matches_as_nova_computes_it(attribute: str, op: str) -> None:
    compare = {"==": operator.eq, ">=": operator.ge, "<=": operator.le, "!=": operator.ne}
    compare["="] = operator.ge  # Nova's "=" is "at least"
    values = NOVA[attribute]
    for value in sorted(set(values.values())):
        expected = [n for n in NAMES if compare[op](values[n], value)]
        request = spec(extra_specs={f"capabilities:{attribute}": f"{op} {value}"})
        assert kept(ComputeCapabilitiesFilter, HOSTS, request) == expected, (attribute, value)


@pytest.mark.parametrize(
    ("extra_specs", "expected"),
    [
        # Nova compares the attribute's text: a float ratio reads "16.0".
        pytest.param({"capabilities:cpu_allocation_ratio": "16.0"}, ["small"], id="float-text"),
        pytest.param({"capabilities:cpu_allocation_ratio": "16"}, [], id="not-int-text"),
        pytest.param({"capabilities:vcpus_total": "<in> 6"}, ["small", "big", "thin"], id="in"),
        pytest.param({"capabilities:vcpus_total": "s== 8"}, ["over"], id="string-op"),
        pytest.param({"capabilities:free_ram_mb": "<or> -4640 <or> 1"}, ["over"], id="or"),
        # Without the namespace too, on every host (each has the attribute).
        pytest.param({"free_ram_mb": "< 0"}, [], id="unscoped-plain-text"),
        pytest.param({"free_ram_mb": "<= 0"}, ["over"], id="unscoped-every-host"),
        pytest.param(
            {"capabilities:free_ram_mb": ">= 0", "vcpus_used": "<= 10"},
            ["small", "thin"],
            id="every-spec-must-hold",
        ),
        # Nested under a number: nothing there (Nova finds None too).
        pytest.param({"capabilities:vcpus_total:x": "1"}, [], id="nested-under-number"),
    ],
)
def test_operators_on_attributes(extra_specs: dict[str, str], expected: list[str]) -> None:
    assert kept(ComputeCapabilitiesFilter, HOSTS, spec(extra_specs=extra_specs)) == expected


# A compute reporting a capability or a stat under a HostState name: Nova's
# attribute wins (it reads the attribute first, its stats only without one).
SHADOWED = [
    host("claims", vcpus=16, capabilities={"vcpus_total": 999}, stats={"free_ram_mb": 7}),
    host("plain", vcpus=32),
]


@pytest.mark.parametrize(
    ("extra_specs", "expected"),
    [
        pytest.param({"capabilities:vcpus_total": "== 999"}, [], id="reported-ignored"),
        pytest.param({"capabilities:vcpus_total": "== 16"}, ["claims"], id="attribute-wins"),
        pytest.param({"capabilities:free_ram_mb": "== 7"}, [], id="stat-ignored"),
        pytest.param(
            {"capabilities:free_ram_mb": "== 32768"}, ["claims", "plain"], id="stat-shadowed"
        ),
    ],
)
def test_the_host_state_attribute_wins(extra_specs: dict[str, str], expected: list[str]) -> None:
    assert kept(ComputeCapabilitiesFilter, SHADOWED, spec(extra_specs=extra_specs)) == expected


@pytest.mark.parametrize("op", ["=", "==", "!=", ">=", "<="])
@pytest.mark.parametrize("operand", ["0", "-4640", "1.5", "16", "1e3"])
def test_the_column_comparison_is_the_requirements_own(op: str, operand: str) -> None:
    requirement = parse(f"{op} {operand}")
    values = np.array([-4640, 0, 1, 15, 16, 17, 1000, 2**40], dtype=np.int64)
    ratios = np.array([0.5, 1.0, 1.5, 16.0])
    assert requirement.comparison is not None
    compare, wanted = requirement.comparison
    for column in (values, ratios):
        assert list(compare(column, wanted)) == [requirement.matches(v.item()) for v in column]


@pytest.mark.parametrize("text", ["16", "s== 16", "<in> 1", "<or> 1 <or> 2", ">= many"])
def test_only_numeric_requirements_compare_columns(text: str) -> None:
    assert parse(text).comparison is None


@pytest.mark.parametrize(
    "key",
    [
        "capabilities:host_ip",
        "capabilities:updated",
        "capabilities:metrics:cpu.frequency",
        "capabilities:host",
        "capabilities:service:disabled",
        "capabilities:stats:num_instances",
        "updated",  # unscoped too: Nova's filter reads it as the attribute
    ],
)
def test_unsupported_attributes_are_refused_at_validation(key: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        validate_request(spec(extra_specs={key: "x"}))
    attribute = key.removeprefix("capabilities:").partition(":")[0]
    assert f"{key!r} = 'x': Nova's host attribute {attribute!r}" in str(err.value)
    assert UNSUPPORTED[attribute] in str(err.value)


@pytest.mark.parametrize(
    "key",
    [
        *(f"capabilities:{name}" for name in HOST_STATE),
        "capabilities:hypervisor_type",  # compared as the compute reports it
        "aggregate_instance_extra_specs:host_ip",  # another filter's scope
        "hw:host",
    ],
)
def test_supported_attributes_pass_validation(key: str) -> None:
    validate_request(spec(extra_specs={key: ">= 1"}))
