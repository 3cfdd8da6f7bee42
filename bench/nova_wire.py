"""Nova's RequestSpec as Nova 34's conductor puts it on the wire, built by hand.

Versioned-object primitives (``nova_object.name`` / ``namespace`` / ``version``
/ ``data`` / ``changes``) at Nova 34's versions, with the fields a boot's
RequestSpec really carries, those the scheduler does not read included
(security groups, networks, NUMA and limits objects, timestamps): what
:mod:`scheduler.nova_compat` must read, or skip. Used by its unit tests and by
the bench of its cost (``python -m bench --case nova``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PROJECT = "6f0b1c6e2a4d4b8e9f3a1c2d3e4f5a6b"
USER = "0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a"
IMAGE = "a1d3c5e7-0b2d-4f6a-8c9e-1b3d5f7a9c2e"


def obj(name: str, version: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """One object's primitive, every field in ``data`` marked changed (as Nova's
    conductor sends a RequestSpec it built)."""
    return {
        "nova_object.name": name,
        "nova_object.namespace": "nova",
        "nova_object.version": version,
        "nova_object.data": dict(data),
        "nova_object.changes": sorted(data),
    }


def flavor(
    name: str = "m1.small",
    vcpus: int = 1,
    memory_mb: int = 2048,
    root_gb: int = 20,
    ephemeral_gb: int = 0,
    swap: int = 0,
    extra_specs: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    return obj(
        "Flavor",
        "1.2",
        {
            "id": 2,
            "name": name,
            "memory_mb": memory_mb,
            "vcpus": vcpus,
            "root_gb": root_gb,
            "ephemeral_gb": ephemeral_gb,
            "flavorid": "2",
            "swap": swap,
            "rxtx_factor": 1.0,
            "vcpu_weight": 0,
            "disabled": False,
            "is_public": True,
            "extra_specs": dict(extra_specs or {}),
            "description": None,
            "created_at": "2026-11-02T10:00:00Z",
            "updated_at": None,
            "deleted_at": None,
            "deleted": False,
        },
    )


def image(
    properties: Mapping[str, Any] | None = None, disk_format: str = "qcow2"
) -> dict[str, Any]:
    props = {"hw_disk_bus": "virtio", "hw_rng_model": "virtio", **(properties or {})}
    return obj(
        "ImageMeta",
        "1.8",
        {
            "id": IMAGE,
            "name": "ubuntu-24.04",
            "status": "active",
            "visibility": "public",
            "protected": False,
            "checksum": "0123456789abcdef0123456789abcdef",
            "owner": PROJECT,
            "size": 2361393152,
            "virtual_size": None,
            "container_format": "bare",
            "disk_format": disk_format,
            "created_at": "2026-10-01T08:00:00Z",
            "updated_at": "2026-10-01T08:05:00Z",
            "tags": [],
            "min_ram": 0,
            "min_disk": 0,
            "properties": obj("ImageMetaProps", "1.44", props),
        },
    )


def group(
    uuid: str, policy: str = "anti-affinity", rules: Mapping[str, str] | None = None
) -> dict[str, Any]:
    return obj(
        "InstanceGroup",
        "1.11",
        {
            "id": 7,
            "uuid": uuid,
            "name": "web",
            "user_id": USER,
            "project_id": PROJECT,
            "policy": policy,
            "_rules": dict(rules or {}),
            "members": [],
            "hosts": [],
        },
    )


def destination(
    host: str | None = None, node: str | None = None, cell_uuid: str | None = None, **more: Any
) -> dict[str, Any]:
    data: dict[str, Any] = {"host": host, "node": node, "allow_cross_cell_move": False, **more}
    if cell_uuid is not None:
        data["cell"] = obj(
            "CellMapping",
            "1.1",
            {"id": 1, "uuid": cell_uuid, "name": "cell1", "disabled": False},
        )
    return obj("Destination", "1.4", data)


def retry(hosts: Iterable[str]) -> dict[str, Any]:
    nodes = [obj("ComputeNode", "1.19", {"host": h, "hypervisor_hostname": h}) for h in hosts]
    return obj(
        "SchedulerRetries",
        "1.1",
        {
            "num_attempts": len(nodes) + 1,
            "hosts": obj("ComputeNodeList", "1.17", {"objects": nodes}),
        },
    )


def request_spec(
    instance_uuids: Iterable[str],
    flavor_primitive: Mapping[str, Any] | None = None,
    image_primitive: Mapping[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A boot's RequestSpec 1.15 for ``instance_uuids``; ``fields`` replace or add
    any of its fields (primitives)."""
    uuids = list(instance_uuids)
    data: dict[str, Any] = {
        "id": 42,
        "instance_uuid": uuids[0],
        "project_id": PROJECT,
        "user_id": USER,
        "availability_zone": None,
        "flavor": flavor_primitive or flavor(),
        "image": image_primitive or image(),
        "num_instances": len(uuids),
        "numa_topology": None,
        "pci_requests": obj(
            "InstancePCIRequests", "1.1", {"instance_uuid": uuids[0], "requests": []}
        ),
        "ignore_hosts": None,
        "force_hosts": None,
        "force_nodes": None,
        "requested_destination": None,
        "retry": None,
        "limits": obj(
            "SchedulerLimits",
            "1.0",
            {"numa_topology": None, "vcpu": None, "disk_gb": None, "memory_mb": None},
        ),
        "instance_group": None,
        "scheduler_hints": {},
        "security_groups": obj(
            "SecurityGroupList",
            "1.1",
            {"objects": [obj("SecurityGroup", "1.2", {"name": "default"})]},
        ),
        "network_metadata": obj("NetworkMetadata", "1.0", {"physnets": [], "tunneled": False}),
        "is_bfv": False,
        "requested_resources": [],
        "request_level_params": obj(
            "RequestLevelParams",
            "1.1",
            {"root_required": [], "root_forbidden": [], "same_subtree": []},
        ),
        "requested_networks": obj(
            "NetworkRequestList",
            "1.1",
            {
                "objects": [
                    obj(
                        "NetworkRequest",
                        "1.3",
                        {"network_id": "9b1f0c2e-6a3d-4c8b-a7e5-2d4f6b8a0c1e", "port_id": None},
                    )
                ]
            },
        ),
    }
    data.update(fields)
    return obj("RequestSpec", "1.15", data)


def context(
    is_admin: bool = False, request_id: str = "req-3f0e6c1a-0d2b-4e5f-8a9b-1c2d3e4f5a6b"
) -> dict[str, Any]:
    """Nova's ``RequestContext.to_dict()``, as the conductor sends it."""
    return {
        "user_id": USER,
        "project_id": PROJECT,
        "system_scope": None,
        "project_name": "demo",
        "domain_id": None,
        "user_domain_id": "default",
        "project_domain_id": "default",
        "is_admin": is_admin,
        "read_only": False,
        "show_deleted": False,
        "auth_token": "gAAAAAB-not-a-real-token",
        "request_id": request_id,
        "global_request_id": None,
        "resource_uuid": None,
        "roles": ["admin", "member", "reader"] if is_admin else ["member", "reader"],
        "user_identity": f"{USER} {PROJECT} - default default",
        "is_admin_project": True,
        "read_deleted": "no",
        "remote_address": "192.0.2.10",
        "timestamp": "2026-12-07T10:00:00.000000",
        "quota_class": None,
        "user_name": "demo",
        "service_catalog": [],
        "tenant": PROJECT,
        "user": USER,
    }
