"""Nova's ``scheduler.select_destinations.start`` / ``.end`` (``[nova_compat] notifications``).

For a ``select_destinations`` served by Nova's API, the worker also publishes
the versioned notifications Nova's scheduler publishes, for Nova's consumers:
event type ``scheduler.select_destinations.start`` (before the decision) and
``.end`` (once hosts were selected: none after a NoValidHost, as Nova), at
INFO, publisher ``nova-scheduler:<host>``, on Nova's exchange and topic
``[nova_compat] notifications_topic``, the payload a bare
``RequestSpecPayload`` 1.1 in namespace ``nova``, as Nova's own payload
classes read it. The scheduler's own notifications of the same request are
published as before.

The payload is made from the RequestSpec as it came over the wire (its
oslo.versionedobjects primitive, kept by
:class:`~scheduler.nova_compat.objects.NovaSerializer`) with plain dicts, on
the notifier's thread: the request only queues it. Nova's payload classes
copy each field of the request spec they name (a field the spec does not
set is null), except the image's properties (only those set) and the few
rules in the functions below. Making it as Nova does, by instantiating its
payload objects with oslo.versionedobjects, costs some two hundred times as
much (milliseconds: the administrator guide says what was measured);
decoding the request with oslo.versionedobjects stays where it is cheap, in
:mod:`~scheduler.nova_compat.objects`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from scheduler.notifier import Notifier, Route
from scheduler.nova_compat.objects import envelope

#: Nova's source name of its scheduler (the publisher id's first half).
SOURCE = "nova-scheduler"
#: The event types, by phase.
START = "scheduler.select_destinations.start"
END = "scheduler.select_destinations.end"

# Each payload: the fields copied from its source object (null when not set).
_SPEC = (
    "instance_uuid",
    "project_id",
    "user_id",
    "availability_zone",
    "ignore_hosts",
    "num_instances",
    "scheduler_hints",
)
_FLAVOR = (
    "flavorid",
    "memory_mb",
    "vcpus",
    "root_gb",
    "ephemeral_gb",
    "name",
    "swap",
    "rxtx_factor",
    "vcpu_weight",
    "disabled",
    "is_public",
    "extra_specs",
    "projects",
    "description",
)
_IMAGE = (
    "id",
    "name",
    "status",
    "visibility",
    "protected",
    "checksum",
    "owner",
    "size",
    "virtual_size",
    "container_format",
    "disk_format",
    "created_at",
    "updated_at",
    "tags",
    "direct_url",
    "min_ram",
    "min_disk",
)
#: The image properties Nova's payload leaves out (a secret's id).
_HIDDEN_IMAGE_PROPERTIES = frozenset({"hw_ephemeral_encryption_secret_uuid"})
_GROUP = ("uuid", "name", "user_id", "project_id", "policies", "members", "hosts", "policy")
_NUMA_CELL = (
    "id",
    "cpuset",
    "pcpuset",
    "cpuset_reserved",
    "memory",
    "pagesize",
    "cpu_pinning_raw",
    "cpu_policy",
    "cpu_thread_policy",
)
_CPU_TOPOLOGY = ("sockets", "cores", "threads")
_PCI_REQUEST = ("count", "spec", "alias_name", "request_id", "numa_policy")
_CELL = ("uuid", "name", "disabled")


def _object(name: str, version: str, data: dict[str, Any]) -> dict[str, Any]:
    """A payload object as Nova's consumers read it (no ``changes``: Nova drops them)."""
    return envelope(name, version, data, changes=False)


def _data(primitive: Any) -> dict[str, Any] | None:
    """The fields of an object primitive; None for null (or not an object)."""
    if isinstance(primitive, Mapping):
        data = primitive.get("nova_object.data")
        if isinstance(data, dict):
            return data
    return None


def _copied(data: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {name: data.get(name) for name in names}


def request_spec_payload(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Nova's ``RequestSpecPayload`` of ``spec``, a RequestSpec's primitive as
    Nova's conductor sent it."""
    data = _data(spec) or {}
    uuid = data.get("instance_uuid")
    payload: dict[str, Any] = _copied(data, _SPEC)
    flavor = _data(data.get("flavor"))
    payload["flavor"] = (
        None if flavor is None else _object("FlavorPayload", "1.4", _copied(flavor, _FLAVOR))
    )
    payload["image"] = _image(_data(data.get("image")))
    payload["instance_group"] = _group(_data(data.get("instance_group")))
    payload["numa_topology"] = _numa_topology(_data(data.get("numa_topology")), uuid)
    payload["pci_requests"] = _pci_requests(_data(data.get("pci_requests")), uuid)
    payload["requested_destination"] = _destination(_data(data.get("requested_destination")))
    payload["retry"] = _retry(_data(data.get("retry")))
    for name in ("force_hosts", "force_nodes"):  # Nova's payload names the first only
        forced = data.get(name)
        payload[name] = forced[0] if forced else None
    groups = _data(data.get("security_groups")) or {}
    payload["security_groups"] = [
        sg.get("uuid", sg.get("name"))
        for sg in map(_data, groups.get("objects") or ())
        if sg is not None
    ]
    return _object("RequestSpecPayload", "1.1", payload)


def _image(image: dict[str, Any] | None) -> dict[str, Any] | None:
    if image is None:
        return None
    props = _data(image.get("properties")) or {}
    out = _copied(image, _IMAGE)
    out["properties"] = _object(
        "ImageMetaPropsPayload",
        "1.20",
        {k: v for k, v in props.items() if k not in _HIDDEN_IMAGE_PROPERTIES},
    )
    return _object("ImageMetaPayload", "1.0", out)


def _group(group: dict[str, Any] | None) -> dict[str, Any] | None:
    """The group; its rules as Nova reads them (the one it knows, as a string)."""
    if group is None:
        return None
    out = _copied(group, _GROUP)
    rules = group.get("_rules") or {}
    out["rules"] = {}
    if "max_server_per_host" in rules:
        try:
            out["rules"]["max_server_per_host"] = str(int(rules["max_server_per_host"]))
        except (TypeError, ValueError):
            pass  # refused by the decoder: no notification is made of it
    return _object("ServerGroupPayload", "1.1", out)


def _numa_topology(topology: dict[str, Any] | None, uuid: Any) -> dict[str, Any] | None:
    if topology is None:
        return None
    cells = []
    for cell in map(_data, topology.get("cells") or ()):
        if cell is None:
            continue
        out = _copied(cell, _NUMA_CELL)
        cpu = _data(cell.get("cpu_topology"))
        out["cpu_topology"] = (
            None
            if cpu is None
            else _object("VirtCPUTopologyPayload", "1.0", _copied(cpu, _CPU_TOPOLOGY))
        )
        cells.append(_object("InstanceNUMACellPayload", "1.2", out))
    return _object(
        "InstanceNUMATopologyPayload",
        "1.0",
        {
            "instance_uuid": topology.get("instance_uuid", uuid),
            "cells": cells,
            "emulator_threads_policy": topology.get("emulator_threads_policy"),
        },
    )


def _pci_requests(requests: dict[str, Any] | None, uuid: Any) -> dict[str, Any] | None:
    if requests is None:
        return None
    made = [
        _object("InstancePCIRequestPayload", "1.1", _copied(request, _PCI_REQUEST))
        for request in map(_data, requests.get("requests") or ())
        if request is not None
    ]
    return _object(
        "InstancePCIRequestsPayload",
        "1.0",
        {"instance_uuid": requests.get("instance_uuid", uuid), "requests": made},
    )


def _destination(destination: dict[str, Any] | None) -> dict[str, Any] | None:
    """The requested destination: host, node and cell only when set."""
    if destination is None:
        return None
    out: dict[str, Any] = {
        name: destination[name] for name in ("host", "node") if destination.get(name) is not None
    }
    cell = _data(destination.get("cell"))
    if cell is not None:
        out["cell"] = _object("CellMappingPayload", "2.0", _copied(cell, _CELL))
    out["aggregates"] = destination.get("aggregates")
    return _object("DestinationPayload", "1.0", out)


def _retry(retry: dict[str, Any] | None) -> dict[str, Any] | None:
    """The attempts, and the nodes tried by name."""
    if retry is None:
        return None
    nodes = (_data(retry.get("hosts")) or {}).get("objects") or ()
    return _object(
        "SchedulerRetriesPayload",
        "1.0",
        {
            "num_attempts": retry.get("num_attempts"),
            "hosts": [n.get("hypervisor_hostname") for n in map(_data, nodes) if n is not None],
        },
    )


class NovaNotifications:
    """Nova's ``select_destinations`` notifications of one worker, through its
    notifier (:meth:`Notifier.info_as`)."""

    def __init__(self, notifier: Notifier, host: str, exchange: str, topic: str) -> None:
        self.notifier = notifier
        self.route = Route(f"{SOURCE}:{host}", exchange, topic)

    def start(self, ctxt: Any, spec: Mapping[str, Any]) -> None:
        """``.start`` of the request spec primitive ``spec``."""
        self.notifier.info_as(self.route, ctxt, START, partial(request_spec_payload, spec))

    def end(self, ctxt: Any, spec: Mapping[str, Any]) -> None:
        """``.end`` of ``spec``: hosts were selected."""
        self.notifier.info_as(self.route, ctxt, END, partial(request_spec_payload, spec))
