"""Nova's RequestSpec, as its conductor sends it, into the project's request:
each field honoured (here) or refused (test_endpoint's table)."""

from __future__ import annotations

from typing import Any

import pytest

from bench import nova_wire as wire
from scheduler.exceptions import InvalidRequest
from scheduler.nova_compat.decode import decode
from scheduler.nova_compat.objects import NovaSerializer
from scheduler.objects import RequestSpec

CELL = "5c1e7a2d-3b4f-4e6a-9d8c-0f1e2d3c4b5a"
VM = "0b5f4c1e-2a3d-4e6f-8a9b-0c1d2e3f4a5b"
GROUP = "7e3d1c9b-5a4f-4b2e-8d6c-1f0e9d8c7b6a"


def decoded(**fields: Any) -> RequestSpec:
    primitive = wire.request_spec([VM], **fields)
    spec = NovaSerializer().deserialize_entity(None, primitive)
    return RequestSpec.from_primitive(decode(spec, CELL))


def test_a_boot_is_read_field_by_field() -> None:
    spec = decoded(
        flavor=wire.flavor(
            "m1.numa",
            vcpus=4,
            memory_mb=8192,
            root_gb=40,
            ephemeral_gb=5,
            swap=512,
            extra_specs={"hw:numa_nodes": "2", "trait:HW_CPU_X86_AVX2": "required"},
        ),
        image=wire.image(
            {
                "hw_architecture": "x86_64",
                "img_hv_type": "kvm",
                "hw_vm_mode": "hvm",
                "img_hv_requested_version": ">=6000000",
                "hw_numa_nodes": 2,
                "hw_numa_cpus": [[0, 1], [2, 3]],
                "hw_numa_mem": [4096, 4096],
                "hw_cpu_policy": "shared",
                "os_distro": "ubuntu",
                "traits_required": ["COMPUTE_IMAGE_TYPE_QCOW2"],
            },
            disk_format="raw",
        ),
        availability_zone="east",
        is_bfv=True,
        scheduler_hints={"same_host": ["a"], "query": ["x"]},
        instance_group=wire.group(GROUP, "anti-affinity", {"max_server_per_host": "2"}),
    )
    assert spec.flavor.to_primitive() == {
        "name": "m1.numa",
        "vcpus": 4,
        "memory_mb": 8192,
        "root_gb": 40,
        "ephemeral_gb": 5,
        "swap_mb": 512,
        "extra_specs": {"hw:numa_nodes": "2", "trait:HW_CPU_X86_AVX2": "required"},
    }
    assert spec.image is not None
    assert (spec.image.id, spec.image.disk_format) == (wire.IMAGE, "raw")
    assert dict(spec.image.properties) == {
        "hw_architecture": "x86_64",
        "img_hv_type": "kvm",
        "hw_vm_mode": "hvm",
        "img_hv_requested_version": ">=6000000",
        "hw_numa_nodes": "2",
        "hw_numa_cpus.0": "0,1",
        "hw_numa_cpus.1": "2,3",
        "hw_numa_mem.0": "4096",
        "hw_numa_mem.1": "4096",
        "hw_cpu_policy": "shared",
        "os_distro": "ubuntu",
        "trait:COMPUTE_IMAGE_TYPE_QCOW2": "required",
    }
    assert (spec.project_id, spec.user_id) == (wire.PROJECT, wire.USER)
    assert (spec.num_instances, spec.availability_zone, spec.is_bfv) == (1, "east", True)
    assert dict(spec.scheduler_hints) == {"same_host": ("a",), "query": ("x",)}
    assert spec.group is not None
    assert spec.group.to_primitive() == {
        "uuid": GROUP,
        "policy": "anti-affinity",
        "max_server_per_host": 2,
    }
    assert spec.resources == {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 6}  # bfv: no root disk


def test_the_hosts_to_avoid_and_to_go_to() -> None:
    spec = decoded(
        ignore_hosts=["src"],
        retry=wire.retry(["tried-1", "src"]),
        force_hosts=["h1"],
        force_nodes=["n1"],
        requested_destination=wire.destination("h2", "n2", cell_uuid=CELL),
    )
    assert spec.ignore_hosts == ("src", "tried-1")
    assert (spec.force_hosts, spec.force_nodes) == (("h1",), ("n1",))
    assert spec.requested_destination is not None
    assert spec.requested_destination.to_primitive() == {"host": "h2", "node": "n2"}


@pytest.mark.parametrize(
    "destination",
    [wire.destination(cell_uuid=CELL), wire.destination()],
    ids=["our cell only", "nothing"],
)
def test_a_destination_naming_no_host_steers_nothing(destination: dict[str, Any]) -> None:
    assert decoded(requested_destination=destination).requested_destination is None


def test_a_pci_request_from_a_flavor_alias_is_read_from_the_flavor() -> None:
    request = wire.obj(
        "InstancePCIRequest", "1.4", {"count": 1, "alias_name": "gpu", "spec": [{}]}
    )
    spec = decoded(pci_requests=wire.obj("InstancePCIRequests", "1.1", {"requests": [request]}))
    assert spec.flavor.extra_specs == {}  # the alias travels in the flavor's extra specs


def test_a_spec_without_image_or_group() -> None:
    spec = decoded(image=None, instance_group=None, scheduler_hints=None)
    assert (spec.image, spec.group, dict(spec.scheduler_hints)) == (None, None, {})


def test_a_bad_value_is_refused_by_the_project_validation() -> None:
    with pytest.raises(InvalidRequest, match="policy"):
        decoded(instance_group=wire.group(GROUP, "spread"))
