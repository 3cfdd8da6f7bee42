"""The project's Selections as Nova's ``Selection`` 1.1 objects.

``allocation_request`` is a JSON string in Placement's allocation-request
format, as Nova's conductor reads it to claim an alternate:
``{"allocations": {rp_uuid: {"resources": {...}}}, "mappings": {"": [rp, ...]},
"consumer_generation": null}``, plus the project and user. The mappings name
every provider under the unsuffixed group (a request with a port's or an
accelerator's groups is refused before: see :mod:`~scheduler.nova_compat.decode`).
``limits`` are empty: the claim in the store already holds the capacity.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from scheduler.nova_compat.objects import SchedulerLimits, Selection
from scheduler.objects import Selection as OwnSelection

#: The Placement microversion whose allocation-request format this is.
ALLOCATION_REQUEST_VERSION = "1.36"


def allocation_request(selection: OwnSelection) -> str:
    """The selection's allocation request, as Placement writes one."""
    request = selection.allocation_request
    return json.dumps(
        {
            "allocations": {
                rp: {"resources": dict(resources)} for rp, resources in request.allocations.items()
            },
            "mappings": {"": sorted(request.allocations)},
            "consumer_generation": None,
            "project_id": request.project_id,
            "user_id": request.user_id,
        },
        sort_keys=True,
    )


def selection(own: OwnSelection, cell_uuid: str) -> Selection:
    """Nova's Selection for one of the project's."""
    return Selection(
        compute_node_uuid=own.provider_uuid,
        service_host=own.host,
        nodename=own.node,
        cell_uuid=cell_uuid,
        limits=SchedulerLimits(numa_topology=None, vcpu=None, disk_gb=None, memory_mb=None),
        allocation_request=allocation_request(own),
        allocation_request_version=ALLOCATION_REQUEST_VERSION,
        availability_zone=own.availability_zone,
    )


def selections(
    per_instance: Sequence[Sequence[OwnSelection]], cell_uuid: str
) -> list[list[Selection]]:
    """Per instance, its Selections (primary first), as Nova reads them."""
    return [[selection(s, cell_uuid) for s in per] for per in per_instance]
