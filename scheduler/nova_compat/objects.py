"""Nova's versioned objects as this scheduler reads and writes them on the wire.

Nova's conductor sends its ``RequestSpec`` as oslo.versionedobjects primitives
(``nova_object.name`` / ``namespace`` / ``version`` / ``data`` / ``changes``)
and reads ``Selection`` objects back the same way. oslo.versionedobjects
rebuilds an object only under a registered class of the same name and
namespace whose minor version is at least the one on the wire, and it skips
the fields that class does not declare. So each class below is registered
under namespace ``nova`` at the version Nova 34 sends, declaring only the
fields the decoder reads (:mod:`scheduler.nova_compat.decode`) or the encoder
writes (:mod:`scheduler.nova_compat.encode`): a field left out here is never
decoded, and the decoder's docstring says why each is not needed.

Field types are oslo.versionedobjects' own; Nova's enum fields (architecture,
hypervisor type, CPU policy ...) are strings on the wire, read here as plain
strings and checked by the project's own validation. Nothing of Nova's package
is imported: it is not installed beside the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oslo_versionedobjects import base, exception, fields

from scheduler.rpc.context import RequestContext

#: The namespace Nova's objects carry on the wire.
NAMESPACE = "nova"


class NovaObject(base.VersionedObject):
    """The base of every class here: Nova's serial and project namespaces."""

    OBJ_SERIAL_NAMESPACE = "nova_object"
    OBJ_PROJECT_NAMESPACE = NAMESPACE


_registry = base.VersionedObjectRegistry()
register = _registry.register


def _string(nullable: bool = True) -> fields.StringField:
    return fields.StringField(nullable=nullable)


def _integer(nullable: bool = True) -> fields.IntegerField:
    return fields.IntegerField(nullable=nullable)


# --- what the conductor sends -------------------------------------------------------


@register
class Flavor(NovaObject):
    """nova.objects.Flavor (``swap`` in MB)."""

    VERSION = "1.2"
    fields = {
        "name": _string(),
        "memory_mb": _integer(False),
        "vcpus": _integer(False),
        "root_gb": _integer(False),
        "ephemeral_gb": _integer(False),
        "swap": _integer(False),
        "extra_specs": fields.DictOfStringsField(),
    }


@register
class ImageMetaProps(NovaObject):
    """nova.objects.ImageMetaProps: the properties the project's filters and
    weighers read, and those it refuses (:data:`decode.REFUSED_IMAGE_PROPERTIES`)."""

    VERSION = "1.44"
    fields = {
        "hw_architecture": _string(),
        "img_hv_type": _string(),
        "hw_vm_mode": _string(),
        "img_hv_requested_version": _string(),
        "hw_numa_nodes": _integer(),
        "hw_numa_cpus": fields.ListOfSetsOfIntegersField(),
        "hw_numa_mem": fields.ListOfIntegersField(),
        "hw_cpu_policy": _string(),
        "traits_required": fields.ListOfStringsField(),
        "os_distro": _string(),
        "os_type": _string(),
        # Read only to be refused (the project does not model them).
        "hw_mem_page_size": _string(),
        "hw_cpu_thread_policy": _string(),
        "hw_emulator_threads_policy": _string(),
        "hw_pci_numa_affinity_policy": _string(),
    }


@register
class ImageMeta(NovaObject):
    """nova.objects.ImageMeta."""

    VERSION = "1.8"
    fields = {
        "id": fields.UUIDField(),
        "disk_format": _string(),
        "properties": fields.ObjectField("ImageMetaProps"),
    }


@register
class InstanceGroup(NovaObject):
    """nova.objects.InstanceGroup (the rules travel as ``_rules``)."""

    VERSION = "1.11"
    fields = {
        "uuid": fields.UUIDField(),
        "policy": _string(),
        "_rules": fields.DictOfStringsField(),
    }


@register
class CellMapping(NovaObject):
    """nova.objects.CellMapping: which cell a move must stay in."""

    VERSION = "1.1"
    fields = {"uuid": fields.UUIDField()}


@register
class Destination(NovaObject):
    """nova.objects.Destination: a requested host / node, a cell, aggregates."""

    VERSION = "1.4"
    fields = {
        "host": _string(),
        "node": _string(),
        "cell": fields.ObjectField("CellMapping", nullable=True),
        "aggregates": fields.ListOfStringsField(nullable=True),
        "forbidden_aggregates": fields.SetOfStringsField(nullable=True),
    }


@register
class ComputeNode(NovaObject):
    """nova.objects.ComputeNode, as a retry names a host already tried."""

    VERSION = "1.19"
    fields = {"host": _string(), "hypervisor_hostname": _string()}


@register
class ComputeNodeList(base.ObjectListBase, NovaObject):
    """nova.objects.ComputeNodeList."""

    VERSION = "1.17"
    fields = {"objects": fields.ListOfObjectsField("ComputeNode")}


@register
class SchedulerRetries(NovaObject):
    """nova.objects.SchedulerRetries: the hosts already tried."""

    VERSION = "1.1"
    fields = {
        "num_attempts": _integer(False),
        "hosts": fields.ObjectField("ComputeNodeList"),
    }


@register
class InstancePCIRequest(NovaObject):
    """nova.objects.InstancePCIRequest: an alias's (from the flavor) or a port's."""

    VERSION = "1.4"
    fields = {
        "count": _integer(False),
        "alias_name": _string(),
        "requester_id": _string(),
    }


@register
class InstancePCIRequests(NovaObject):
    """nova.objects.InstancePCIRequests."""

    VERSION = "1.1"
    fields = {"requests": fields.ListOfObjectsField("InstancePCIRequest")}


@register
class RequestGroup(NovaObject):
    """nova.objects.RequestGroup: a port's or an accelerator's resources."""

    VERSION = "1.3"
    fields = {
        "resources": fields.DictOfIntegersField(),
        "requester_id": _string(),
    }


@register
class RequestLevelParams(NovaObject):
    """nova.objects.RequestLevelParams: root traits, same-subtree groups."""

    VERSION = "1.1"
    fields = {
        "root_required": fields.SetOfStringsField(),
        "root_forbidden": fields.SetOfStringsField(),
        "same_subtree": fields.ListOfListsOfStringsField(),
    }


@register
class RequestSpec(NovaObject):
    """nova.objects.RequestSpec, the fields :mod:`~scheduler.nova_compat.decode`
    reads (the others are skipped on decode: see its docstring)."""

    VERSION = "1.15"
    #: The primitive this object was read from, as the conductor sent it (what
    #: :mod:`~scheduler.nova_compat.notifications` makes Nova's payload of);
    #: None for an object made here.
    wire: Any = None

    fields = {
        "image": fields.ObjectField("ImageMeta", nullable=True),
        "pci_requests": fields.ObjectField("InstancePCIRequests", nullable=True),
        "project_id": _string(),
        "user_id": _string(),
        "availability_zone": _string(),
        "flavor": fields.ObjectField("Flavor"),
        "num_instances": _integer(False),
        "ignore_hosts": fields.ListOfStringsField(nullable=True),
        "force_hosts": fields.ListOfStringsField(nullable=True),
        "force_nodes": fields.ListOfStringsField(nullable=True),
        "requested_destination": fields.ObjectField("Destination", nullable=True),
        "retry": fields.ObjectField("SchedulerRetries", nullable=True),
        "instance_group": fields.ObjectField("InstanceGroup", nullable=True),
        "scheduler_hints": fields.DictOfListOfStringsField(nullable=True),
        "instance_uuid": fields.UUIDField(),
        "is_bfv": fields.BooleanField(),
        "requested_resources": fields.ListOfObjectsField("RequestGroup", nullable=True),
        "request_level_params": fields.ObjectField("RequestLevelParams"),
    }


# --- what the scheduler answers -----------------------------------------------------


@register
class SchedulerLimits(NovaObject):
    """nova.objects.SchedulerLimits: no limits (the claim in the store holds
    capacity; the compute has nothing to re-check)."""

    VERSION = "1.0"
    fields = {
        "numa_topology": fields.ObjectField("NUMATopologyLimits", nullable=True),
        "vcpu": _integer(),
        "disk_gb": _integer(),
        "memory_mb": _integer(),
    }


@register
class Selection(NovaObject):
    """nova.objects.Selection 1.1, every field."""

    VERSION = "1.1"
    fields = {
        "compute_node_uuid": fields.UUIDField(),
        "service_host": _string(False),
        "nodename": _string(False),
        "cell_uuid": fields.UUIDField(),
        "limits": fields.ObjectField("SchedulerLimits", nullable=True),
        "allocation_request": _string(),
        "allocation_request_version": _string(),
        "availability_zone": _string(),
    }


def envelope(name: str, version: str, data: dict[str, Any], changes: bool) -> dict[str, Any]:
    """Object ``name`` at ``version`` as oslo.versionedobjects writes it in
    namespace ``nova``: with ``changes``, every field of ``data`` listed as
    changed (an object made and sent); without, none (Nova's notification
    payloads, whose changes Nova resets before sending)."""
    out = {
        "nova_object.name": name,
        "nova_object.namespace": NAMESPACE,
        "nova_object.version": version,
        "nova_object.data": data,
    }
    if changes:
        out["nova_object.changes"] = sorted(data)
    return out


def value(obj: Any, name: str, default: Any = None) -> Any:
    """``obj.name`` if the primitive set it, else ``default`` (a field absent from
    the wire raises on read in oslo.versionedobjects).

    Read from the attribute oslo.versionedobjects keeps a set field's value in
    (``_obj_<name>``, what its ``obj_attr_is_set`` tests): the decoder reads
    some forty fields per request, and the public pair (``obj_attr_is_set``,
    then the property) cost ten times as much.
    """
    if obj is None:
        return default
    return getattr(obj, _ATTR_PREFIX + name, default)


#: Where oslo.versionedobjects keeps a field's value (``base._get_attrname``).
_ATTR_PREFIX = "_obj_"


@dataclass(frozen=True)
class Unreadable:
    """An argument holding an object no class here reads (a class not
    registered, or a newer version than registered): left as its primitive,
    for the endpoint to refuse with ``reason`` or to ignore (a fanout cast's
    aggregates and instances)."""

    primitive: Any
    reason: str


class Primitives(list[Any]):
    """A list already in Nova's wire form (what :mod:`~scheduler.nova_compat.encode`
    writes): :class:`NovaSerializer` sends it as it is, without walking it for
    objects to serialize (a Selection's three nested dicts and strings cost
    that walk ~0.07 ms an instance of worker CPU, ``python -m bench --case nova``)."""


class NovaSerializer(base.VersionedObjectSerializer):
    """Nova's wire format: objects as versioned-object primitives, the context as
    Nova's ``RequestContext.to_dict()``, read into the project's context (what
    its policy needs: admin flag, roles, project, user, request ids).

    An argument that cannot be read arrives as :class:`Unreadable` rather than
    failing in the dispatcher (which would log a traceback and answer the
    caller with a bare RemoteError). A :class:`RequestSpec` keeps the
    primitive it was read from (:attr:`RequestSpec.wire`)."""

    OBJ_BASE_CLASS = NovaObject

    def serialize_entity(self, context: Any, entity: Any) -> Any:
        if isinstance(entity, Primitives):
            return entity
        return super().serialize_entity(context, entity)

    def deserialize_entity(self, context: Any, entity: Any) -> Any:
        try:
            obj = super().deserialize_entity(context, entity)
        except (exception.UnsupportedObjectError, exception.IncompatibleObjectVersion) as exc:
            return Unreadable(entity, str(exc))
        if isinstance(obj, RequestSpec):
            obj.wire = entity
        return obj

    def serialize_context(self, ctxt: Any) -> dict[str, Any]:
        if isinstance(ctxt, RequestContext):
            return ctxt.to_dict()
        return dict(ctxt or {})

    def deserialize_context(self, ctxt: dict[str, Any]) -> RequestContext:
        data = ctxt if isinstance(ctxt, dict) else {}
        roles = data.get("roles")
        return RequestContext(
            is_admin=data.get("is_admin") is True,
            roles=[r for r in roles if isinstance(r, str)] if isinstance(roles, list) else [],
            project_id=_text(data.get("project_id")),
            user_id=_text(data.get("user_id")),
            request_id=_text(data.get("request_id")),
            global_request_id=_text(data.get("global_request_id")),
        )


def _text(raw: Any) -> str | None:
    return raw if isinstance(raw, str) else None
