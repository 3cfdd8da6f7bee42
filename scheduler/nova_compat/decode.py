"""Nova's ``RequestSpec`` (1.15) into the project's request spec primitive.

The result is what the native ``select_destinations`` reads
(:meth:`scheduler.objects.RequestSpec.from_primitive`), so the request is
validated, checked against the policy and decided by the very same path.

Honoured, field by field:

* ``flavor``: name, vcpus, memory_mb, root_gb, ephemeral_gb, ``swap`` (MB) and
  its extra specs (resources, traits, aggregates, NUMA and PCI aliases are
  read from them as for a native request);
* ``image``: id, disk_format and the properties under Nova's names
  (``hw_architecture``, ``img_hv_type``, ``hw_vm_mode``,
  ``img_hv_requested_version``, ``hw_numa_nodes``, ``hw_numa_cpus.N``,
  ``hw_numa_mem.N``, ``hw_cpu_policy``, ``os_distro``, ``os_type``; the
  required traits as ``trait:X=required``);
* ``project_id``, ``user_id``, ``availability_zone``, ``num_instances``,
  ``is_bfv``, ``scheduler_hints``;
* ``instance_group``: uuid, policy and the ``max_server_per_host`` rule;
* ``ignore_hosts`` and the hosts of ``retry``: hosts to ignore;
* ``force_hosts`` / ``force_nodes``; ``requested_destination``'s host and node
  (its cell, when it names this scheduler's cell, and
  ``allow_cross_cell_move`` need nothing: there is one cell);
* ``pci_requests`` made from the flavor's aliases (the project reads the
  aliases from the flavor's ``pci_passthrough:alias`` itself).

Refused, with the reason as NoValidHost's (never dropped silently):
``requested_resources`` (a port's or an accelerator's resources: the answer
would need Placement's group-to-provider mappings), a non-empty
``request_level_params``, a port's PCI request, ``requested_destination``
naming another cell or (forbidden) aggregates, and the image properties in
:data:`REFUSED_IMAGE_PROPERTIES`.

Not read, and why: ``numa_topology`` (Nova's conductor derives it from the
flavor and image, which the project reads itself); ``limits`` (the
scheduler's own output); ``security_groups``, ``requested_networks`` and
``network_metadata`` (Nova's scheduler ignores the first; the others matter
only for routed networks and NUMA-affine vswitches, which no host here
reports); ``instance_group``'s members and hosts (group policy is checked
against the claims this scheduler's store holds); ``id``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.exceptions import InvalidRequest
from scheduler.nova_compat.objects import RequestSpec, value

#: Image properties Nova's NUMA placement reads that the project does not model.
REFUSED_IMAGE_PROPERTIES = (
    "hw_mem_page_size",
    "hw_cpu_thread_policy",
    "hw_emulator_threads_policy",
    "hw_pci_numa_affinity_policy",
)
#: Image properties copied as they are (as strings).
_PLAIN_IMAGE_PROPERTIES = (
    "hw_architecture",
    "img_hv_type",
    "hw_vm_mode",
    "img_hv_requested_version",
    "hw_numa_nodes",
    "hw_cpu_policy",
    "os_distro",
    "os_type",
)


def refuse(reason: str) -> InvalidRequest:
    """The refusal of a field the project cannot honour (NoValidHost for Nova)."""
    return InvalidRequest(reason=reason)


def decode(spec: Any, cell_uuid: str) -> dict[str, Any]:
    """The project's request spec primitive from Nova's ``spec`` (a decoded
    :class:`~scheduler.nova_compat.objects.RequestSpec`); ``cell_uuid`` is the
    cell this scheduler serves.

    :raises InvalidRequest: a field the project cannot honour, with why.
    """
    if not isinstance(spec, RequestSpec):
        raise refuse("spec_obj must be a nova RequestSpec object")
    _refuse_unsupported(spec)
    out: dict[str, Any] = {
        "flavor": _flavor(value(spec, "flavor")),
        "project_id": value(spec, "project_id"),
        "user_id": value(spec, "user_id"),
        "num_instances": value(spec, "num_instances", 1),
        "image": _image(value(spec, "image")),
        "availability_zone": value(spec, "availability_zone"),
        "is_bfv": value(spec, "is_bfv", False),
        "group": _group(value(spec, "instance_group")),
        "ignore_hosts": _ignore_hosts(spec),
        "scheduler_hints": dict(value(spec, "scheduler_hints") or {}),
    }
    for name in ("force_hosts", "force_nodes"):
        if forced := value(spec, name):
            out[name] = list(forced)
    destination = _destination(value(spec, "requested_destination"), cell_uuid)
    if destination is not None:
        out["requested_destination"] = destination
    return out


def _refuse_unsupported(spec: Any) -> None:
    if value(spec, "requested_resources"):
        raise refuse("requested_resources (resources of ports or accelerators) are not supported")
    params = value(spec, "request_level_params")
    for name in ("root_required", "root_forbidden", "same_subtree"):
        if value(params, name):
            raise refuse(f"request_level_params.{name} is not supported")
    pci = value(spec, "pci_requests")
    for request in value(pci, "requests", None) or ():
        if not value(request, "alias_name"):
            raise refuse("PCI requests of ports (pci_requests without an alias) are not supported")


def _flavor(flavor: Any) -> dict[str, Any]:
    if flavor is None:
        raise refuse("spec_obj.flavor is required")
    return {
        "name": value(flavor, "name") or "",
        "vcpus": value(flavor, "vcpus"),
        "memory_mb": value(flavor, "memory_mb"),
        "root_gb": value(flavor, "root_gb", 0),
        "ephemeral_gb": value(flavor, "ephemeral_gb", 0),
        "swap_mb": value(flavor, "swap", 0),
        "extra_specs": dict(value(flavor, "extra_specs") or {}),
    }


def _image(image: Any) -> dict[str, Any] | None:
    if image is None:
        return None
    out: dict[str, Any] = {
        "id": value(image, "id"),
        "properties": image_properties(value(image, "properties")),
    }
    if disk_format := value(image, "disk_format"):
        out["disk_format"] = disk_format
    return out


def image_properties(props: Any) -> dict[str, str]:
    """Nova's typed image properties as the project reads them (Glance's names
    and string values).

    :raises InvalidRequest: a property in :data:`REFUSED_IMAGE_PROPERTIES` is set.
    """
    if props is None:
        return {}
    for name in REFUSED_IMAGE_PROPERTIES:
        if value(props, name) is not None:
            raise refuse(f"image property {name} is not supported")
    out = {
        name: str(raw)
        for name in _PLAIN_IMAGE_PROPERTIES
        if (raw := value(props, name)) is not None
    }
    for n, cpus in enumerate(value(props, "hw_numa_cpus") or ()):
        out[f"hw_numa_cpus.{n}"] = ",".join(str(c) for c in sorted(cpus))
    for n, mem in enumerate(value(props, "hw_numa_mem") or ()):
        out[f"hw_numa_mem.{n}"] = str(mem)
    for trait in value(props, "traits_required") or ():
        out[f"trait:{trait}"] = "required"
    return out


def _group(group: Any) -> dict[str, Any] | None:
    if group is None:
        return None
    rules: Mapping[str, str] = value(group, "_rules") or {}
    out: dict[str, Any] = {"uuid": value(group, "uuid"), "policy": value(group, "policy")}
    unknown = sorted(set(rules) - {"max_server_per_host"})
    if unknown:
        raise refuse(f"server group rules {', '.join(unknown)} are not supported")
    if "max_server_per_host" in rules:
        try:
            out["max_server_per_host"] = int(rules["max_server_per_host"])
        except ValueError:
            raise refuse("server group rule max_server_per_host must be a number") from None
    return out


def _ignore_hosts(spec: Any) -> list[str]:
    """``ignore_hosts`` and the hosts a retry already tried, each once."""
    hosts: list[str] = list(value(spec, "ignore_hosts") or ())
    retry = value(spec, "retry")
    tried: Iterable[Any] = value(value(retry, "hosts"), "objects", None) or ()
    hosts.extend(h for node in tried if (h := value(node, "host")))
    return list(dict.fromkeys(hosts))


def _destination(destination: Any, cell_uuid: str) -> dict[str, Any] | None:
    """The requested host and node; None when it only keeps a move in a cell
    (this scheduler's, the only one it serves)."""
    if destination is None:
        return None
    cell = value(destination, "cell")
    if cell is not None and value(cell, "uuid") != cell_uuid:
        raise refuse("requested_destination names a cell this scheduler does not serve")
    for name in ("aggregates", "forbidden_aggregates"):
        if value(destination, name):
            raise refuse(f"requested_destination.{name} is not supported")
    host, node = value(destination, "host"), value(destination, "node")
    if not host:
        if node:
            raise refuse("requested_destination names a node without its host")
        return None
    return {"host": host, "node": node}
