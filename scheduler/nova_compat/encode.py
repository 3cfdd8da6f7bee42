"""The project's Selections as Nova's ``Selection`` 1.1 objects.

``allocation_request`` is a JSON string in Placement's allocation-request
format, as Nova's conductor reads it to claim an alternate:
``{"allocations": {rp_uuid: {"resources": {...}}}, "mappings": {"": [rp, ...]},
"consumer_generation": null}``, plus the project and user. The mappings name
every provider under the unsuffixed group (a request with a port's or an
accelerator's groups is refused before: see :mod:`~scheduler.nova_compat.decode`).
``limits`` are empty: the claim in the store already holds the capacity.

The primitives are written here directly, not through the registered
``Selection`` class's ``obj_to_primitive`` (the same output, a test holds them
equal): oslo.versionedobjects took ~0.23 ms of worker CPU per Selection to
build and serialize one (``python -m bench --case nova``), three times what
the rest of the endpoint adds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from scheduler.nova_compat.objects import Primitives, SchedulerLimits, Selection, envelope
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


def _primitive(name: str, version: str, data: dict[str, Any]) -> dict[str, Any]:
    """An object's primitive as oslo.versionedobjects writes it, every field set."""
    return envelope(name, version, data, changes=True)


#: ``SchedulerLimits`` with no limit, every field set to None.
_NO_LIMITS = {"numa_topology": None, "vcpu": None, "disk_gb": None, "memory_mb": None}


def selection(own: OwnSelection, cell_uuid: str) -> dict[str, Any]:
    """Nova's Selection for one of the project's, as its primitive (what
    :class:`~scheduler.nova_compat.objects.Selection` ``.obj_to_primitive()``
    writes: a test holds them equal)."""
    return _primitive(
        Selection.obj_name(),
        Selection.VERSION,
        {
            "compute_node_uuid": own.provider_uuid,
            "service_host": own.host,
            "nodename": own.node,
            "cell_uuid": cell_uuid,
            "limits": _primitive(
                SchedulerLimits.obj_name(), SchedulerLimits.VERSION, dict(_NO_LIMITS)
            ),
            "allocation_request": allocation_request(own),
            "allocation_request_version": ALLOCATION_REQUEST_VERSION,
            "availability_zone": own.availability_zone,
        },
    )


def selections(per_instance: Sequence[Sequence[OwnSelection]], cell_uuid: str) -> Primitives:
    """Per instance, its Selections (primary first), as Nova reads them: in
    wire form already, for the serializer to send as they are."""
    return Primitives([[selection(s, cell_uuid) for s in per] for per in per_instance])
