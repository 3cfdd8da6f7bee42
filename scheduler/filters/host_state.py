"""Nova's ``HostState`` attributes, for capability specs that name them.

Nova's ComputeCapabilitiesFilter reads any attribute of its ``HostState``,
so ``capabilities:free_ram_mb = >= 4096`` or ``vcpus_total = >= 32`` work
there. Here each numeric attribute is computed from the host view's columns,
with Nova's definitions, over the candidates at once (:data:`HOST_STATE`);
the others are refused when the request is validated
(:func:`refuse_unsupported_attributes`, :data:`UNSUPPORTED`), so a flavor
that names one fails loudly rather than matching no host.

Nova's ``HostState`` copies the host's compute node record, which its
resource tracker fills: ``vcpus``, ``memory_mb`` and ``local_gb`` are the
totals of the VCPU, MEMORY_MB and DISK_GB inventory of the host's root
provider (the compute node's own; child providers are other nodes' or
devices'), and the ``*_used`` amounts start at the host's reserved amount
(``reserved_host_cpus``, ``reserved_host_memory_mb``,
``reserved_host_disk_mb``) and add every instance's usage. So, as in Nova,
reserved counts as used, and with ``T`` the total, ``R`` the reserved and
``U`` the usage (the allocations) of a class:

=========================  ===============================================
attribute                  value
=========================  ===============================================
``vcpus_total``            ``T(VCPU)``
``vcpus_used``             ``R(VCPU) + U(VCPU)``
``total_usable_ram_mb``    ``T(MEMORY_MB)``
``free_ram_mb``            ``T - R - U`` of MEMORY_MB (negative on a host
                           overcommitted past its physical memory, as in
                           Nova)
``total_usable_disk_gb``   ``T(DISK_GB)``
``disk_mb_used``           ``(R + U) * 1024`` of DISK_GB
``free_disk_mb``           ``(T - R - U) * 1024`` of DISK_GB, or the
                           compute's reported ``disk_available_least``
                           (GB) times 1024 when that is lower (Nova's min)
``cpu_allocation_ratio``,  the allocation ratio of VCPU, MEMORY_MB,
``ram_allocation_ratio``,  DISK_GB (floats: ``== 16``, ``s== 16.0``)
``disk_allocation_ratio``
``num_instances``          the instances holding allocations on the host
``num_io_ops``             builds in progress (the reported stat, plus
                           this worker's placements since)
``failed_builds``          consecutive failed builds (a success resets it)
=========================  ===============================================

Where the inputs, not the definitions, can differ from Nova's: Placement
holds DISK_GB in whole GB, so a ``reserved_host_disk_mb`` or a flavor swap
that is not a whole number of GB counts one GB more (rounded up) than
Nova's compute node counts (rounded down); and the ratios are the
inventory's, which is the compute node's unless an operator changed the
inventory's ratio in Placement directly.

Such an attribute is Nova's, whatever the compute reports under the same
name: Nova reads the ``HostState`` attribute first, and its stats only
where there is none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from scheduler.engine.capabilities import numeric_mask
from scheduler.exceptions import InvalidRequest
from scheduler.extra_specs import CAPABILITIES_SCOPE, Requirement, scoped_key
from scheduler.objects import DISK_GB, MEMORY_MB, VCPU

if TYPE_CHECKING:
    from scheduler.engine.hostview import HostView

#: MB in a GB, as Nova's host state converts disk.
MB_PER_GB = 1024
#: The capability a compute may report with the hypervisor's free disk (GB)
#: once every instance disk has grown to its full size.
DISK_AVAILABLE_LEAST = "disk_available_least"

_Column = Callable[["HostView", np.ndarray], np.ndarray]


def _unused(view: HostView, rc: str, idx: np.ndarray) -> np.ndarray:
    """``total - reserved - used`` of ``rc``: negative when overcommitted."""
    total = view.of_class("total", rc, idx)
    return total - view.of_class("reserved", rc, idx) - view.of_class("used", rc, idx)


def _used_with_reserved(view: HostView, rc: str, idx: np.ndarray) -> np.ndarray:
    return view.of_class("reserved", rc, idx) + view.of_class("used", rc, idx)


def _free_disk_mb(view: HostView, idx: np.ndarray) -> np.ndarray:
    free_gb = _unused(view, DISK_GB, idx)
    least = view.capabilities.attribute_numbers(DISK_AVAILABLE_LEAST, idx)
    reported = ~np.isnan(least)
    if reported.any():  # Nova's compute node holds it as an integer
        free_gb = np.where(reported, np.minimum(free_gb, np.trunc(least)), free_gb)
        free_gb = free_gb.astype(np.int64)
    return free_gb * MB_PER_GB


def _of(column: str, rc: str) -> _Column:
    return lambda view, idx: view.of_class(column, rc, idx)


#: Nova's numeric HostState attributes: each a column over the hosts ``idx``.
HOST_STATE: Mapping[str, _Column] = MappingProxyType(
    {
        "vcpus_total": _of("total", VCPU),
        "vcpus_used": lambda view, idx: _used_with_reserved(view, VCPU, idx),
        "total_usable_ram_mb": _of("total", MEMORY_MB),
        "free_ram_mb": lambda view, idx: _unused(view, MEMORY_MB, idx),
        "total_usable_disk_gb": _of("total", DISK_GB),
        "disk_mb_used": lambda view, idx: _used_with_reserved(view, DISK_GB, idx) * MB_PER_GB,
        "free_disk_mb": _free_disk_mb,
        "cpu_allocation_ratio": _of("ratio", VCPU),
        "ram_allocation_ratio": _of("ratio", MEMORY_MB),
        "disk_allocation_ratio": _of("ratio", DISK_GB),
        "num_instances": lambda view, idx: view.consumers[idx],
        "num_io_ops": lambda view, idx: view.capabilities.io_ops(idx),
        "failed_builds": lambda view, idx: view.failed_builds[idx],
    }
)


def host_state_mask(
    attribute: str, requirement: Requirement, view: HostView, idx: np.ndarray
) -> np.ndarray | None:
    """Mask of the hosts ``idx`` whose Nova HostState ``attribute`` meets
    ``requirement``, or None if ``attribute`` is not one of :data:`HOST_STATE`.

    A numeric operator compares the whole column at once (the values are
    mostly distinct: free RAM differs from host to host); any other is
    evaluated once per distinct value, on the value's text, as Nova does.
    """
    column = HOST_STATE.get(attribute)
    if column is None:
        return None
    values = column(view, idx)
    comparison = requirement.comparison
    if comparison is None:
        return numeric_mask(values, requirement.matches)
    compare, wanted = comparison
    return np.asarray(compare(values, wanted), dtype=bool)


_IDENTITY = (
    "names one host; choose hosts by name with force_hosts, force_nodes or a requested destination"
)
#: Nova's other HostState attributes, and why a spec cannot name them here.
#: (``hypervisor_type``, ``hypervisor_version``, ``cpu_info`` and
#: ``supported_instances`` are what the computes report, under those names.)
UNSUPPORTED: Mapping[str, str] = MappingProxyType(
    {
        "host": _IDENTITY,
        "nodename": _IDENTITY,
        "hypervisor_hostname": _IDENTITY,
        "uuid": _IDENTITY,
        "host_ip": "is not known: computes do not report their address",
        "updated": "is a time the host view does not keep (heartbeats are not records)",
        "metrics": "is not known: compute monitors' metrics are not collected",
        "stats": (
            "holds Nova's resource-tracker counters, which computes do not report "
            "here; name a reported stat directly (capabilities:<stat>)"
        ),
        "limits": "is Nova's per-request oversubscription record, not a host's",
        "numa_topology": "is a Nova object; ask for NUMA with hw:numa_* specs",
        "pci_stats": "is a Nova object; ask for devices with pci_passthrough:alias",
        "instances": "is a mapping of Nova instance objects, not a host value",
        "aggregates": (
            "is a list of Nova aggregate objects; match aggregate metadata with "
            "aggregate_instance_extra_specs:<key>"
        ),
        "service": "is Nova's service record; disabled and down hosts never pass",
        "cell_uuid": "is not known: the scheduler serves one cell",
    }
)


def refuse_unsupported_attributes(
    extra_specs: Mapping[str, str], what: str = "flavor.extra_specs"
) -> None:
    """Refuse a capability spec naming a Nova HostState attribute (or a key
    nested in one) that cannot be evaluated here, with or without the
    ``capabilities:`` namespace (Nova evaluates both).

    :raises InvalidRequest: naming the spec and the reason, e.g.
        ``flavor.extra_specs 'capabilities:host_ip' = '10.0.0.1': Nova's host
        attribute 'host_ip' is not known: computes do not report their address``.
    """
    for key, text in extra_specs.items():
        attribute = scoped_key(key, CAPABILITIES_SCOPE)
        if attribute is None:
            continue
        head = attribute.partition(":")[0]
        reason = UNSUPPORTED.get(head)
        if reason is not None:
            raise InvalidRequest(
                reason=f"{what} {key!r} = {text!r}: Nova's host attribute {head!r} {reason}"
            )
