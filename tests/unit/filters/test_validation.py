"""validate_request: what the host filters read, refused before anything is chosen."""

from __future__ import annotations

import pytest

from scheduler.engine.settings import PciAlias
from scheduler.exceptions import InvalidRequest
from scheduler.filters.validation import validate_request
from scheduler.objects import RequestSpec
from scheduler.priority import PriorityClasses
from tests.unit.factories import settings, spec


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        pytest.param(
            spec(extra_specs={"capabilities:gen": ">= new"}),
            "flavor.extra_specs 'capabilities:gen' = '>= new'",
            id="numeric-operator",
        ),
        pytest.param(
            spec(extra_specs={"aggregate_instance_extra_specs:az": "<or>"}),
            "'aggregate_instance_extra_specs:az' = '<or>'",
            id="bare-or",
        ),
        pytest.param(
            spec(image_properties={"hw_architecture": "pdp11"}),
            "image.properties 'hw_architecture' = 'pdp11'",
            id="unknown-arch",
        ),
        pytest.param(
            spec(image_properties={"img_hv_requested_version": "newest"}),
            "'img_hv_requested_version' = 'newest'",
            id="version",
        ),
        pytest.param(
            spec(vcpus=3, extra_specs={"hw:numa_nodes": "2"}), "hw:numa_nodes", id="numa"
        ),
        pytest.param(
            spec(extra_specs={"pci_passthrough:alias": "nic:lots"}),
            "'pci_passthrough:alias'",
            id="pci-syntax",
        ),
    ],
)
def test_bad_requests_are_refused_naming_the_spec(request_: RequestSpec, message: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        validate_request(request_)
    assert message in err.value.message


def test_pci_aliases_are_checked_against_the_configured_ones() -> None:
    request = spec(extra_specs={"pci_passthrough:alias": "gpu:1"})
    validate_request(request)  # syntax only, without settings
    with pytest.raises(InvalidRequest, match="not configured") as err:
        validate_request(request, settings(pci_aliases={"nic": PciAlias("nic", "8086")}))
    assert "nic" not in err.value.message, "a user must not learn the cloud's aliases"


def test_a_good_request_passes() -> None:
    request = spec(
        vcpus=4,
        extra_specs={
            "capabilities:cpu_arch": "x86_64",
            "ssd": "<in> t",
            "hw:numa_nodes": "2",
            "pci_passthrough:alias": "nic",
        },
        image_properties={"hw_architecture": "amd64", "os_distro": "ubuntu"},
    )
    validate_request(request, settings(pci_aliases={"nic": PciAlias("nic", "8086")}))
    assert request.flavor.extra_specs["ssd"] == "<in> t"


def test_the_priority_class_is_checked_against_the_defined_ones() -> None:
    request = spec(extra_specs={"sched:priority_class": "gold"})
    validate_request(request)  # nothing to check it against, without settings
    classes = PriorityClasses.parse(["spot:10:preemptible"])
    with pytest.raises(InvalidRequest, match="no such priority class is defined") as err:
        validate_request(request, settings(priority_classes=classes))
    assert "spot" not in err.value.message, "a user must not learn the cloud's classes"
    validate_request(
        spec(extra_specs={"sched:priority_class": "spot"}), settings(priority_classes=classes)
    )
