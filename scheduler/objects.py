"""Typed, frozen request and result objects.

Everything that crosses the RPC boundary is converted here, explicitly, with
``to_primitive()`` / ``from_primitive()``. ``from_primitive`` validates: types,
ranges and known fields, raising :class:`InvalidRequest` with a message that
names the offending field. Past this module nobody digs in dicts.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

from scheduler.exceptions import InvalidRequest
from scheduler.fields import (
    MAX_VALUE_LENGTH,
    bool_field,
    check_fields,
    frozen_map,
    int_field,
    require_mapping,
    str_field,
    str_list,
    str_map,
    validate_host_name,
    validate_number,
    validate_uuid,
)
from scheduler.resource_request import (
    DISK_GB,
    MEMORY_MB,
    VCPU,
    ResourceRequest,
    flavor_amounts,
    parse_extra_specs,
)

STANDARD_RESOURCE_CLASSES = (VCPU, MEMORY_MB, DISK_GB)

#: The most instances one request may ask for; larger boots are refused at
#: validation, before anything is claimed.
MAX_INSTANCES_PER_REQUEST = 1000
#: Upper bounds that catch nonsense (and integer overflow in the store) early.
MAX_VCPUS = 4096
MAX_MEMORY_MB = 64 * 1024 * 1024
MAX_DISK_GB = 1024 * 1024
MAX_SWAP_MB = 1024 * 1024
#: Bounds on the size of what one request may carry: a request spec within
#: them stays well under 1 MB, so an oversized message is refused by name at
#: validation instead of being worked on (Nova's API bounds extra specs and
#: image properties to 255 characters a value, too).
MAX_EXTRA_SPECS = 256
MAX_IMAGE_PROPERTIES = 128
MAX_IMAGE_PROPERTY_LENGTH = 1024  # an image signature runs to some 700 characters
MAX_HINT_VALUES = 256  # across all scheduler hints
MAX_IGNORE_HOSTS = 256
MAX_FORCED = 100

MAX_WEIGHT = 1e12  # a Selection's (normalised and multiplied weights are far below)

GROUP_POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")


def migration_uuid_for(instance_uuid: str, request_id: str) -> str:
    """The migration consumer of one move request (a resize, a live migration)
    of an instance.

    Derived, not drawn: a re-driven move (the same request, sent again with
    the same request id) names the same migration, so its moves are no-ops.
    """
    return str(uuidlib.uuid5(uuidlib.UUID(instance_uuid), request_id))


def validate_instance_uuids(value: Any, num_instances: int) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise InvalidRequest(reason="instance_uuids must be a list")
    if len(value) != num_instances:  # before reading them: the list may be huge
        raise InvalidRequest(
            reason=f"instance_uuids has {len(value)} entries but num_instances is {num_instances}"
        )
    uuids = tuple(validate_uuid(v, "instance_uuids[]") for v in value)
    if len(set(uuids)) != len(uuids):
        raise InvalidRequest(reason="instance_uuids holds duplicates")
    return uuids


# --- request objects ----------------------------------------------------------------


@dataclass(frozen=True)
class Flavor:
    name: str
    vcpus: int
    memory_mb: int
    root_gb: int = 0
    ephemeral_gb: int = 0
    swap_mb: int = 0
    extra_specs: Mapping[str, str] = field(default_factory=dict)

    FIELDS = {"name", "vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap_mb", "extra_specs"}

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_specs", frozen_map(self.extra_specs))

    def to_primitive(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "vcpus": self.vcpus,
            "memory_mb": self.memory_mb,
            "root_gb": self.root_gb,
            "ephemeral_gb": self.ephemeral_gb,
            "swap_mb": self.swap_mb,
            "extra_specs": dict(self.extra_specs),
        }

    @classmethod
    def from_primitive(cls, data: Any) -> Flavor:
        w = "flavor"
        data = require_mapping(data, w)
        check_fields(data, w, cls.FIELDS, {"name", "vcpus", "memory_mb"})
        return cls(
            name=str_field(data, "name", w),  # type: ignore[arg-type]
            vcpus=int_field(data, "vcpus", w, 1, MAX_VCPUS),
            memory_mb=int_field(data, "memory_mb", w, 1, MAX_MEMORY_MB),
            root_gb=int_field(data, "root_gb", w, 0, MAX_DISK_GB, 0),
            ephemeral_gb=int_field(data, "ephemeral_gb", w, 0, MAX_DISK_GB, 0),
            swap_mb=int_field(data, "swap_mb", w, 0, MAX_SWAP_MB, 0),
            extra_specs=str_map(data, "extra_specs", w, MAX_EXTRA_SPECS),
        )


@dataclass(frozen=True)
class Image:
    """The image to boot. ``disk_format`` (``qcow2``, ``raw`` ...) is what the
    image-type request filter asks hosts to support; None is not checked."""

    id: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    disk_format: str | None = None

    FIELDS = {"id", "properties", "disk_format"}

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", frozen_map(self.properties))

    def to_primitive(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "properties": dict(self.properties)}
        if self.disk_format is not None:
            out["disk_format"] = self.disk_format
        return out

    @classmethod
    def from_primitive(cls, data: Any) -> Image:
        w = "image"
        data = require_mapping(data, w)
        check_fields(data, w, cls.FIELDS)
        disk_format = str_field(data, "disk_format", w, optional=True, max_len=64)
        if disk_format is not None and not re.fullmatch(r"[a-z0-9_-]+", disk_format):
            raise InvalidRequest(
                reason=f"image.disk_format must be lower-case letters, digits, "
                f"'-' or '_', got {disk_format[:64]!r}"
            )
        return cls(
            id=str_field(data, "id", w, optional=True),
            properties=str_map(
                data, "properties", w, MAX_IMAGE_PROPERTIES, MAX_IMAGE_PROPERTY_LENGTH
            ),
            disk_format=disk_format,
        )


@dataclass(frozen=True)
class ServerGroup:
    uuid: str
    policy: str
    max_server_per_host: int = 1

    FIELDS = {"uuid", "policy", "max_server_per_host"}

    @property
    def is_strict(self) -> bool:
        return self.policy in ("affinity", "anti-affinity")

    def to_primitive(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "policy": self.policy,
            "max_server_per_host": self.max_server_per_host,
        }

    @classmethod
    def from_primitive(cls, data: Any) -> ServerGroup:
        w = "group"
        data = require_mapping(data, w)
        check_fields(data, w, cls.FIELDS, {"uuid", "policy"})
        policy = str_field(data, "policy", w)
        if policy not in GROUP_POLICIES:
            raise InvalidRequest(
                reason=f"group.policy must be one of {', '.join(GROUP_POLICIES)}, got {policy!r}"
            )
        return cls(
            uuid=validate_uuid(data["uuid"], "group.uuid"),
            policy=policy,
            max_server_per_host=int_field(data, "max_server_per_host", w, 1, 1000, 1),
        )


@dataclass(frozen=True)
class Destination:
    """Where an admin asks an instance to go: a host, and optionally its node.

    Unlike a forced host, a requested destination names exactly one host
    (Nova's ``RequestSpec.requested_destination``, used for targeted moves).
    """

    host: str
    node: str | None = None

    FIELDS = {"host", "node"}

    def to_primitive(self) -> dict[str, Any]:
        return {"host": self.host, "node": self.node}

    @classmethod
    def from_primitive(cls, data: Any) -> Destination:
        w = "requested_destination"
        data = require_mapping(data, w)
        check_fields(data, w, cls.FIELDS, {"host"})
        return cls(
            host=str_field(data, "host", w),  # type: ignore[arg-type]
            node=str_field(data, "node", w, optional=True) or None,
        )


@dataclass(frozen=True)
class RequestSpec:
    """What to place: one flavor, ``num_instances`` times.

    ``ignore_hosts`` are hosts already tried for this request (the retry
    filter keeps them out). ``availability_zone`` narrows to one zone.

    ``force_hosts`` / ``force_nodes`` (any of them) and
    ``requested_destination`` narrow the request to the hosts they name;
    only an admin may set them (:mod:`scheduler.policy`), and the request
    still passes through the filters and the atomic claim
    (:mod:`scheduler.request_filters.destination`). They are left out of
    :meth:`to_primitive` when unset, so a spec without them reads the same
    as it did before they existed.
    """

    flavor: Flavor
    project_id: str
    user_id: str
    num_instances: int = 1
    image: Image | None = None
    availability_zone: str | None = None
    is_bfv: bool = False
    group: ServerGroup | None = None
    ignore_hosts: tuple[str, ...] = ()
    scheduler_hints: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    force_hosts: tuple[str, ...] = ()
    force_nodes: tuple[str, ...] = ()
    requested_destination: Destination | None = None

    FIELDS = {
        "flavor",
        "project_id",
        "user_id",
        "num_instances",
        "image",
        "availability_zone",
        "is_bfv",
        "group",
        "ignore_hosts",
        "scheduler_hints",
        "force_hosts",
        "force_nodes",
        "requested_destination",
    }
    #: The fields that steer a request to named hosts (admin only).
    DESTINATION_FIELDS = ("force_hosts", "force_nodes", "requested_destination")

    def __post_init__(self) -> None:
        object.__setattr__(self, "scheduler_hints", frozen_map(self.scheduler_hints))

    @property
    def resources(self) -> dict[str, int]:
        """Amount per resource class one instance takes: what the engine claims,
        ``resources:`` overrides and numbered groups included (zero amounts
        left out). The rule has one home, :attr:`ResourceRequest.resources`.
        """
        return self.resource_request.resources

    @cached_property
    def resource_request(self) -> ResourceRequest:
        """The typed resource request (groups, traits, aggregates) of this spec:
        the flavor's amounts (:func:`~scheduler.resource_request.flavor_amounts`)
        under its extra specs and the image's traits.

        :raises InvalidRequest: a resource, trait or aggregate extra spec (or
            image trait) is malformed; :meth:`from_primitive` asks for it, so
            such a spec is refused at validation.
        """
        f = self.flavor
        base = flavor_amounts(
            f.vcpus, f.memory_mb, f.root_gb, f.ephemeral_gb, f.swap_mb, self.is_bfv
        )
        image_properties = self.image.properties if self.image is not None else {}
        return parse_extra_specs(base, f.extra_specs, image_properties)

    def replace(self, **changes: Any) -> RequestSpec:
        from dataclasses import replace

        return replace(self, **changes)

    @property
    def has_destination(self) -> bool:
        """True if the spec forces a host or node or requests a destination."""
        return bool(self.force_hosts or self.force_nodes or self.requested_destination)

    def to_primitive(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "flavor": self.flavor.to_primitive(),
            "project_id": self.project_id,
            "user_id": self.user_id,
            "num_instances": self.num_instances,
            "image": self.image.to_primitive() if self.image else None,
            "availability_zone": self.availability_zone,
            "is_bfv": self.is_bfv,
            "group": self.group.to_primitive() if self.group else None,
            "ignore_hosts": list(self.ignore_hosts),
            "scheduler_hints": {k: list(v) for k, v in self.scheduler_hints.items()},
        }
        if self.force_hosts:
            out["force_hosts"] = list(self.force_hosts)
        if self.force_nodes:
            out["force_nodes"] = list(self.force_nodes)
        if self.requested_destination is not None:
            out["requested_destination"] = self.requested_destination.to_primitive()
        return out

    @classmethod
    def from_primitive(cls, data: Any) -> RequestSpec:
        w = "request_spec"
        data = require_mapping(data, w)
        check_fields(data, w, cls.FIELDS, {"flavor", "project_id", "user_id"})
        hints = _hints(data, w)
        destination = data.get("requested_destination")
        spec = cls(
            flavor=Flavor.from_primitive(data["flavor"]),
            project_id=str_field(data, "project_id", w),  # type: ignore[arg-type]
            user_id=str_field(data, "user_id", w),  # type: ignore[arg-type]
            num_instances=int_field(data, "num_instances", w, 1, MAX_INSTANCES_PER_REQUEST, 1),
            image=Image.from_primitive(data["image"]) if data.get("image") is not None else None,
            availability_zone=str_field(data, "availability_zone", w, optional=True),
            is_bfv=bool_field(data, "is_bfv", w),
            group=(
                ServerGroup.from_primitive(data["group"])
                if data.get("group") is not None
                else None
            ),
            ignore_hosts=str_list(data, "ignore_hosts", w, MAX_IGNORE_HOSTS),
            scheduler_hints=hints,
            force_hosts=str_list(data, "force_hosts", w, MAX_FORCED),
            force_nodes=str_list(data, "force_nodes", w, MAX_FORCED),
            requested_destination=(
                Destination.from_primitive(destination) if destination is not None else None
            ),
        )
        spec.resource_request  # noqa: B018 - validates the resource extra specs
        return spec


def _hints(data: Mapping[str, Any], what: str) -> dict[str, tuple[str, ...]]:
    """Scheduler hints: names to lists of strings, at most MAX_HINT_VALUES values in all."""
    w = f"{what}.scheduler_hints"
    raw = require_mapping(data.get("scheduler_hints") or {}, w)
    hints: dict[str, tuple[str, ...]] = {}
    total = 0
    for key in raw:
        if not isinstance(key, str) or not key or len(key) > MAX_VALUE_LENGTH:
            raise InvalidRequest(
                reason=f"{w} names must be strings of 1 to {MAX_VALUE_LENGTH} characters"
            )
        hints[key] = str_list(raw, key, w, MAX_HINT_VALUES)
        total += len(hints[key])
        if total > MAX_HINT_VALUES:
            raise InvalidRequest(reason=f"{w} hold more than {MAX_HINT_VALUES} values in all")
    return hints


# --- results ------------------------------------------------------------------------


@dataclass(frozen=True)
class AllocationRequest:
    """What a claim writes: amounts per resource class per provider."""

    allocations: Mapping[str, Mapping[str, int]]
    project_id: str
    user_id: str

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "allocations",
            MappingProxyType(
                {rp: MappingProxyType(dict(res)) for rp, res in self.allocations.items()}
            ),
        )

    def to_primitive(self) -> dict[str, Any]:
        return {
            "allocations": {rp: dict(res) for rp, res in self.allocations.items()},
            "project_id": self.project_id,
            "user_id": self.user_id,
        }

    @classmethod
    def from_primitive(cls, data: Any) -> AllocationRequest:
        w = "allocation_request"
        data = require_mapping(data, w)
        check_fields(
            data,
            w,
            {"allocations", "project_id", "user_id"},
            {"allocations", "project_id", "user_id"},
        )
        allocs = require_mapping(data["allocations"], f"{w}.allocations")
        if not allocs:
            raise InvalidRequest(reason=f"{w}.allocations is empty")
        out: dict[str, dict[str, int]] = {}
        for rp, res in allocs.items():
            rp = validate_uuid(rp, f"{w}.allocations key")
            res = require_mapping(res, f"{w}.allocations[{rp}]")
            out[rp] = {
                str(rc): int_field(res, rc, f"{w}.allocations[{rp}]", 1, 2**40) for rc in res
            }
        return cls(
            allocations=out,
            project_id=str_field(data, "project_id", w),  # type: ignore[arg-type]
            user_id=str_field(data, "user_id", w),  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class Selection:
    """One destination: where to build and how to claim it.

    The conductor can claim an alternate with nothing but what this holds.
    ``availability_zone`` is the zone the scheduler saw the host in (its
    aggregates' ``availability_zone``, else ``default_availability_zone``);
    None from a worker older than RPC 1.3, which did not say. It is left out
    of :meth:`to_primitive` when None, and :meth:`without_zone` drops it for
    a reader older than that (whose ``from_primitive`` refuses the field).
    """

    host: str
    node: str
    provider_uuid: str
    allocation_request: AllocationRequest
    weight: float
    availability_zone: str | None = None

    FIELDS = {"host", "node", "provider_uuid", "allocation_request", "weight", "availability_zone"}

    def without_zone(self) -> Selection:
        """This selection as a reader older than the zone field reads it."""
        return replace(self, availability_zone=None)

    def to_primitive(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "host": self.host,
            "node": self.node,
            "provider_uuid": self.provider_uuid,
            "allocation_request": self.allocation_request.to_primitive(),
            "weight": self.weight,
        }
        if self.availability_zone is not None:
            out["availability_zone"] = self.availability_zone
        return out

    @classmethod
    def from_primitive(cls, data: Any) -> Selection:
        w = "selection"
        data = require_mapping(data, w)
        check_fields(data, w, cls.FIELDS, {"host", "node", "provider_uuid", "allocation_request"})
        return cls(
            host=validate_host_name(data.get("host"), "selection.host"),
            node=validate_host_name(data.get("node"), "selection.node"),
            provider_uuid=validate_uuid(data["provider_uuid"], "selection.provider_uuid"),
            allocation_request=AllocationRequest.from_primitive(data["allocation_request"]),
            weight=validate_number(
                data.get("weight", 0.0), "selection.weight", -MAX_WEIGHT, MAX_WEIGHT
            ),
            availability_zone=str_field(data, "availability_zone", w, optional=True) or None,
        )


# --- instance records (owned by the conductor) --------------------------------------

BUILDING = "BUILDING"
ACTIVE = "ACTIVE"
ERROR = "ERROR"
RESIZING = "RESIZING"  # a resize is under way; the instance still runs on its source
RESIZED = "RESIZED"  # resized on the destination, waiting for confirm or revert
REBUILDING = "REBUILDING"  # evacuated off a down host; being rebuilt on a destination
DELETING = "DELETING"  # fenced against claims; waiting for the computes to destroy it
DELETED = "DELETED"  # nothing held, nothing runs; the record expires after a retention
SHELVING = "SHELVING"  # its host is destroying the VM; the allocation is still held
SHELVED_OFFLOADED = "SHELVED_OFFLOADED"  # on no host, holding nothing; unshelve places it
MIGRATING = "MIGRATING"  # a live migration is under way; the instance runs on its source
PENDING = "PENDING"  # found no host and waits for capacity, holding nothing
#: Every state a record can be in (what ``conductor-stub list --state`` takes).
STATES = (
    BUILDING,
    PENDING,
    ACTIVE,
    ERROR,
    RESIZING,
    RESIZED,
    REBUILDING,
    MIGRATING,
    SHELVING,
    SHELVED_OFFLOADED,
    DELETING,
    DELETED,
)
FINAL_STATES = frozenset({ACTIVE, ERROR, DELETED, SHELVED_OFFLOADED})

# Task states: what the conductor is waiting for (None: nothing).
SCHEDULING = "scheduling"  # run_instance sent; no build heard of yet
SPAWNING = "spawning"  # the conductor cast a build itself (a reschedule)
RESIZE_PREP = "resize_prep"  # resize sent; prep -> resize -> finish under way
RESIZE_CONFIRMING = "resize_confirming"
RESIZE_REVERTING = "resize_reverting"
DELETING_TASK = "deleting"  # terminate cast to the hosts in pending_hosts
SHELVING_TASK = "shelving_offloading"  # shelve_offload_instance cast to the host
REBUILD_SCHEDULING = "rebuild_scheduling"  # evacuate: a destination asked for, not yet cast
REBUILD_SPAWNING = "rebuild_spawning"  # rebuild_instance cast to the destination
LIVE_MIGRATING = "migrating"  # pre-checks -> migration under way on a destination
#: A boot whose claim evicted lower-priority instances (``victims``): built
#: once their VMs are gone (:mod:`conductor_stub.tasks.preempt`).
PREEMPTING = "preempting"


@dataclass(frozen=True)
class InstanceRecord:
    """The conductor's record of one instance.

    ``fault`` is what the user sees (generic); ``fault_details`` is admin-only
    (which filter removed how many hosts, which host failed).

    ``deadline`` is when the conductor re-drives the request it is waiting
    on (None: it waits on nothing); ``redrives`` counts the re-drives so far;
    ``request_id`` is the request's id, reused when it is re-driven. During a
    resize, ``migration_uuid`` is the consumer holding the source's
    allocation, ``new_flavor`` the flavor asked for (a Flavor primitive) and
    ``source_host`` / ``source_node`` where the instance was. While
    REBUILDING (an evacuation), ``host`` is still the down source,
    ``source_host`` names it too, and ``migration_uuid`` holds the source's
    allocation until the rebuild on the destination succeeds.
    ``availability_zone`` is the zone of ``host`` as the Selection it was
    built from named it (None: not known, e.g. from a worker older than RPC
    1.3); a resize records the destination's, and keeps the source's in
    ``source_availability_zone`` for a revert. ``roles`` and
    ``is_admin`` are the rights the request was made with, so that a re-drive
    is sent with them (an admin's forced host is refused to anyone else).
    While DELETING, ``pending_hosts`` are the hosts that have not yet said
    the instance's VM is gone there. ``requested_destination`` is the host an
    admin named for the move in flight (a :class:`Destination` primitive):
    kept on the record for its re-drives and dropped when the move ends, never
    written into ``request_spec``, so no later move is steered by it. While
    MIGRATING (a live migration), ``migration_uuid`` and ``source_*`` are as
    for a resize (``host`` stays the source until the instance lands) and
    ``block_migration`` says whether the disk goes with it.
    ``priority_class``, ``priority`` and ``preemptible`` are the request's
    priority class as it was when the instance was recorded
    (:func:`scheduler.priority.record_fields`; no class: None, 0, False).
    ``max_wait`` is how many seconds the request may wait for capacity when
    it finds no host (None: it fails at once; see
    :mod:`conductor_stub.pending`), and ``waiting_since`` when it first found
    none (None: it has not waited).
    While a boot waits on the instances its claim evicted (task
    ``preempting``), ``victims`` names them; a victim's ``preempted_by``
    names the instance that evicted it (see :mod:`conductor_stub.tasks.preempt`).
    """

    uuid: str
    state: str = BUILDING
    task_state: str | None = SCHEDULING
    host: str | None = None
    node: str | None = None
    availability_zone: str | None = None
    attempts: int = 0
    tried_hosts: tuple[str, ...] = ()
    fault: str | None = None
    fault_details: str | None = None
    request_spec: Mapping[str, Any] | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    deadline: float | None = None
    request_id: str | None = None
    redrives: int = 0
    migration_uuid: str | None = None
    new_flavor: Mapping[str, Any] | None = None
    source_host: str | None = None
    source_node: str | None = None
    source_availability_zone: str | None = None
    roles: tuple[str, ...] = ()
    is_admin: bool = False
    pending_hosts: tuple[str, ...] = ()
    requested_destination: Mapping[str, Any] | None = None
    block_migration: bool = False
    priority_class: str | None = None
    priority: int = 0
    preemptible: bool = False
    max_wait: float | None = None
    waiting_since: float | None = None
    victims: tuple[str, ...] = ()
    preempted_by: str | None = None

    def to_primitive(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "state": self.state,
            "task_state": self.task_state,
            "host": self.host,
            "node": self.node,
            "availability_zone": self.availability_zone,
            "attempts": self.attempts,
            "tried_hosts": list(self.tried_hosts),
            "fault": self.fault,
            "fault_details": self.fault_details,
            "request_spec": dict(self.request_spec) if self.request_spec else None,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "deadline": self.deadline,
            "request_id": self.request_id,
            "redrives": self.redrives,
            "migration_uuid": self.migration_uuid,
            "new_flavor": dict(self.new_flavor) if self.new_flavor else None,
            "source_host": self.source_host,
            "source_node": self.source_node,
            "source_availability_zone": self.source_availability_zone,
            "roles": list(self.roles),
            "is_admin": self.is_admin,
            "pending_hosts": list(self.pending_hosts),
            "requested_destination": (
                dict(self.requested_destination) if self.requested_destination else None
            ),
            "block_migration": self.block_migration,
            "priority_class": self.priority_class,
            "priority": self.priority,
            "preemptible": self.preemptible,
            "max_wait": self.max_wait,
            "waiting_since": self.waiting_since,
            "victims": list(self.victims),
            "preempted_by": self.preempted_by,
        }

    @classmethod
    def from_primitive(cls, data: Mapping[str, Any]) -> InstanceRecord:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["tried_hosts"] = tuple(known.get("tried_hosts") or ())
        known["pending_hosts"] = tuple(known.get("pending_hosts") or ())
        known["victims"] = tuple(known.get("victims") or ())
        # Records written before these existed, or by Lua (an empty list is {}).
        roles = known.get("roles")
        known["roles"] = (
            tuple(r for r in roles if isinstance(r, str)) if isinstance(roles, list) else ()
        )
        known["is_admin"] = known.get("is_admin") is True
        known["block_migration"] = known.get("block_migration") is True
        known["preemptible"] = known.get("preemptible") is True
        priority = known.get("priority")
        known["priority"] = priority if type(priority) is int else 0
        for name in ("max_wait", "waiting_since"):
            value = known.get(name)
            known[name] = float(value) if isinstance(value, int | float) else None
        return cls(**known)


def evacuated_from(record: InstanceRecord | None, host: str) -> bool:
    """Whether a VM of the instance running on ``host`` is one no record keeps
    there: the instance is gone (or DELETED), is being evacuated from
    ``host``, or its record places it elsewhere (and no resize involves
    ``host``: a resize's VM may still be on its source). A compute back from
    an outage destroys such VMs; the reconciler reaps them once the record
    has settled."""
    if record is None or record.state == DELETED:
        return True
    if record.state == REBUILDING:
        return record.source_host == host
    if record.state in (RESIZING, RESIZED):
        return host not in (record.host, record.source_host)
    return record.host != host
