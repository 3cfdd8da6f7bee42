"""The payloads of the scheduler's notifications: typed, versioned objects.

Every notification the scheduler publishes carries one of the objects below
(:data:`EVENTS` says which, per event). Each is a frozen dataclass whose
annotated fields are its schema, with a version; on the wire it travels in
Nova's envelope::

    {"nova_object.name": "RequestSpecPayload",
     "nova_object.namespace": "vm_scheduler",
     "nova_object.version": "1.0",
     "nova_object.data": {...its fields, nested objects in the same envelope...}}

published on ``[notifications] versioned_topic`` (``versioned_notifications``)
when ``[notifications] format`` is ``versioned`` or ``both``. Where Nova has
the object, the fields carry Nova's names (``RequestSpecPayload``,
``FlavorPayload``, ``DestinationPayload``, ``ExceptionPayload`` ...).

The legacy (unversioned) payloads on ``[notifications] topic`` are views of
the same objects (:meth:`EventPayload.legacy`), in the shape they always had:
a notification is described once, by its object, and each format is made
from it once, on the notifier's thread.

**The version rule** (Nova's): adding a field is a minor bump (1.0 -> 1.1),
removing or changing one (its name, type or nullability) a major bump (1.x ->
2.0). A field never changes meaning within a major version. The fingerprint
of every object's fields and types is pinned per version in
``tests/unit/test_notifications.py``: a change without its bump fails there.
"""

from __future__ import annotations

import hashlib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Literal

from scheduler import policy
from scheduler.exceptions import NoValidHost, SchedulerError
from scheduler.filters.numa_topology import requested_cells
from scheduler.filters.pci_passthrough import requested_aliases
from scheduler.objects import (
    MAX_INSTANCES_PER_REQUEST,
    Destination,
    Flavor,
    Image,
    RequestSpec,
    Selection,
    ServerGroup,
)
from scheduler.priority import PriorityClass

#: ``nova_object.namespace`` of every object here (Nova's are ``nova``).
NAMESPACE = "vm_scheduler"

#: What a scheduling action's ``state`` says: ``scheduling`` in its ``.start``;
#: in its ``.end`` ``scheduled`` (placed, or nothing left to place), ``error``
#: (failed: the ERROR notification says why, unless the store could not be
#: reached and the request is left to the conductor's re-drive) or ``deleted``
#: (the instance was deleted meanwhile).
State = Literal["scheduling", "scheduled", "error", "deleted"]


# --- the object base ----------------------------------------------------------------


class NotificationObject:
    """A versioned payload object: a frozen dataclass of typed fields.

    Field types are ``str``, ``int``, ``float``, ``bool``, another
    :class:`NotificationObject`, ``tuple[T, ...]`` (a list), ``Mapping[str,
    T]`` (a JSON object), each optionally ``| None``.
    """

    VERSION: ClassVar[str]

    def to_primitive(self, made: dict[int, Any] | None = None) -> dict[str, Any]:
        """This object in Nova's envelope; ``made`` (id -> envelope: for a caller that copies
        them, while the objects live) makes a nested object payloads share once."""
        return {
            "nova_object.name": type(self).__name__,
            "nova_object.namespace": NAMESPACE,
            "nova_object.version": self.VERSION,
            "nova_object.data": {
                f: _primitive(getattr(self, f), made) for f in _field_names(type(self))
            },
        }


#: The metadata of a dataclass field that only the legacy view reads: not
#: versioned, not published in the envelope, not in the fingerprint.
LEGACY_ONLY = {"legacy_only": True}


#: Each class's published field names (read for every object published).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type[NotificationObject]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(
            f.name
            for f in fields(cls)  # type: ignore[arg-type]
            if not f.metadata.get("legacy_only")
        )
    return names


def _primitive(value: Any, made: dict[int, Any] | None = None) -> Any:
    if type(value) in (str, int, float, bool, type(None)):  # most: before the Mapping ABC
        return value
    if isinstance(value, NotificationObject):
        if made is not None and id(value) not in made:
            made[id(value)] = value.to_primitive(made)
        return value.to_primitive() if made is None else made[id(value)]
    if isinstance(value, tuple):
        return [_primitive(v, made) for v in value]
    if isinstance(value, Mapping):
        return {k: _primitive(v, made) for k, v in value.items()}
    return value


def field_types(cls: type[NotificationObject]) -> dict[str, Any]:
    """The declared type of each field of ``cls``, by name, in declaration order."""
    hints = typing.get_type_hints(cls)
    return {name: hints[name] for name in _field_names(cls)}


def type_name(tp: Any) -> str:
    """A field type as the README and the fingerprint spell it: ``string``,
    ``integer``, ``number``, ``boolean``, ``FlavorPayload``, ``list of T``,
    ``object of T``, ``string, one of a, b``, ``T or null``."""
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in args if a is not type(None)]
        return f"{type_name(rest[0])} or null"
    if origin is tuple:
        return f"list of {type_name(args[0])}"
    if origin in (Mapping, dict):
        return f"object of {type_name(args[1])}"
    if origin is Literal:
        return f"string, one of {', '.join(map(str, args))}"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if tp in names:
        return names[tp]
    if isinstance(tp, type) and issubclass(tp, NotificationObject):
        return tp.__name__
    raise TypeError(f"unsupported notification field type {tp!r}")


def fingerprint(cls: type[NotificationObject]) -> str:
    """``<version>-<hash of the fields' names and types>``, as Nova's object hash test pins."""
    text = ";".join(f"{name}:{type_name(tp)}" for name, tp in sorted(field_types(cls).items()))
    return f"{cls.VERSION}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def check(primitive: Any, cls: type[NotificationObject], where: str = "payload") -> None:
    """Raise :class:`ValueError` naming the first field of ``primitive`` (an
    envelope) that is missing, unknown or not of its declared type, or an
    envelope whose name, namespace or version is not ``cls``'s."""
    if not isinstance(primitive, dict):
        raise ValueError(f"{where}: not an object envelope")
    expected = (cls.__name__, NAMESPACE, cls.VERSION)
    got = tuple(primitive.get(f"nova_object.{k}") for k in ("name", "namespace", "version"))
    if got != expected:
        raise ValueError(f"{where}: envelope {got} is not {expected}")
    data = primitive.get("nova_object.data")
    declared = field_types(cls)
    if not isinstance(data, dict) or set(data) != set(declared):
        keys = sorted(data) if isinstance(data, dict) else data
        raise ValueError(f"{where}: fields {keys} are not {sorted(declared)}")
    for name, tp in declared.items():
        check_value(data[name], tp, f"{where}.{name}")


def check_value(value: Any, tp: Any, where: str) -> None:
    """Raise :class:`ValueError` unless ``value`` (JSON) is of field type ``tp``."""
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        if value is None:
            return
        tp = next(a for a in args if a is not type(None))
        args, origin = typing.get_args(tp), typing.get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, NotificationObject):
        check(value, tp, where)
    elif origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"{where}: {value!r} is not a list")
        for n, item in enumerate(value):
            check_value(item, args[0], f"{where}[{n}]")
    elif origin in (Mapping, dict):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ValueError(f"{where}: {value!r} is not an object")
        for key, item in value.items():
            check_value(item, args[1], f"{where}[{key!r}]")
    elif origin is Literal:
        if value not in args:
            raise ValueError(f"{where}: {value!r} is not one of {args}")
    elif tp is float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"{where}: {value!r} is not a number")
    elif type(value) is not tp:
        raise ValueError(f"{where}: {value!r} is not {type_name(tp)}")


# --- the objects a request spec is made of ------------------------------------------


@dataclass(frozen=True)
class FlavorPayload(NotificationObject):
    # Version 1.0: initial version (Nova's names; swap in MB as Nova's)
    VERSION = "1.0"

    name: str
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int
    swap: int
    extra_specs: Mapping[str, str]

    @classmethod
    def of(cls, flavor: Flavor) -> FlavorPayload:
        return cls(
            name=flavor.name,
            vcpus=flavor.vcpus,
            memory_mb=flavor.memory_mb,
            root_gb=flavor.root_gb,
            ephemeral_gb=flavor.ephemeral_gb,
            swap=flavor.swap_mb,
            extra_specs=flavor.extra_specs,
        )


@dataclass(frozen=True)
class ImageMetaPayload(NotificationObject):
    # Version 1.0: initial version
    VERSION = "1.0"

    id: str | None
    disk_format: str | None
    properties: Mapping[str, str]

    @classmethod
    def of(cls, image: Image) -> ImageMetaPayload:
        return cls(id=image.id, disk_format=image.disk_format, properties=image.properties)


@dataclass(frozen=True)
class ServerGroupPayload(NotificationObject):
    # Version 1.0: initial version (Nova's rules: max_server_per_host as a string)
    VERSION = "1.0"

    uuid: str
    policy: str
    rules: Mapping[str, str]

    @classmethod
    def of(cls, group: ServerGroup) -> ServerGroupPayload:
        return cls(
            uuid=group.uuid,
            policy=group.policy,
            rules={"max_server_per_host": str(group.max_server_per_host)},
        )


@dataclass(frozen=True)
class DestinationPayload(NotificationObject):
    # Version 1.0: initial version
    VERSION = "1.0"

    host: str
    node: str | None

    @classmethod
    def of(cls, destination: Destination | Selection) -> DestinationPayload:
        return cls(host=destination.host, node=destination.node)


@dataclass(frozen=True)
class InstanceNUMACellPayload(NotificationObject):
    # Version 1.0: initial version (the guest node's vCPU count and memory in MB)
    VERSION = "1.0"

    id: int
    vcpus: int
    memory: int


@dataclass(frozen=True)
class InstanceNUMATopologyPayload(NotificationObject):
    # Version 1.0: initial version
    VERSION = "1.0"

    cells: tuple[InstanceNUMACellPayload, ...]

    @classmethod
    def of(cls, spec: RequestSpec) -> InstanceNUMATopologyPayload | None:
        """The guest NUMA topology the spec asks for (None: none asked for)."""
        cells = requested_cells(spec)
        if not cells:
            return None
        return cls(
            cells=tuple(
                InstanceNUMACellPayload(id=n, vcpus=vcpus, memory=memory)
                for n, (vcpus, memory) in enumerate(cells)
            )
        )


@dataclass(frozen=True)
class InstancePCIRequestPayload(NotificationObject):
    # Version 1.0: initial version
    VERSION = "1.0"

    alias_name: str
    count: int


@dataclass(frozen=True)
class InstancePCIRequestsPayload(NotificationObject):
    # Version 1.0: initial version
    VERSION = "1.0"

    requests: tuple[InstancePCIRequestPayload, ...]

    @classmethod
    def of(cls, spec: RequestSpec) -> InstancePCIRequestsPayload | None:
        """The PCI devices the spec asks for, per alias (None: none asked for)."""
        wanted = requested_aliases(spec)
        if not wanted:
            return None
        return cls(
            requests=tuple(
                InstancePCIRequestPayload(alias_name=name, count=count)
                for name, count in wanted.items()
            )
        )


@dataclass(frozen=True)
class PriorityClassPayload(NotificationObject):
    """The priority class a request's flavor chooses (:mod:`scheduler.priority`)."""

    # Version 1.0: initial version
    VERSION = "1.0"

    name: str
    priority: int
    preemptible: bool
    #: ``preempt`` or ``never`` (its requests never evict others).
    preemption_policy: str

    @classmethod
    def of(cls, chosen: PriorityClass) -> PriorityClassPayload:
        return cls(chosen.name, chosen.priority, chosen.preemptible, chosen.preemption_policy)


@dataclass(frozen=True)
class RequestSpecPayload(NotificationObject):
    """What was asked for; Nova's ``RequestSpecPayload`` field names.

    ``instance_uuid`` is the request's first instance (as Nova's request spec
    holds one); ``force_hosts`` / ``force_nodes`` are lists (Nova: the first
    one as a string). ``priority_class`` is the class the flavor chooses
    (null: no class), a field of this project's own.
    """

    # Version 1.0: initial version
    # Version 1.1: priority_class
    VERSION = "1.1"

    instance_uuid: str | None
    project_id: str
    user_id: str
    availability_zone: str | None
    flavor: FlavorPayload
    image: ImageMetaPayload | None
    is_bfv: bool
    numa_topology: InstanceNUMATopologyPayload | None
    pci_requests: InstancePCIRequestsPayload | None
    num_instances: int
    instance_group: ServerGroupPayload | None
    scheduler_hints: Mapping[str, tuple[str, ...]]
    ignore_hosts: tuple[str, ...]
    force_hosts: tuple[str, ...]
    force_nodes: tuple[str, ...]
    requested_destination: DestinationPayload | None
    priority_class: PriorityClassPayload | None
    #: The spec as the legacy payloads carry it (its own primitive); not a field.
    spec: RequestSpec = field(repr=False, compare=False, kw_only=True, metadata=LEGACY_ONLY)

    @classmethod
    def of(
        cls,
        spec: RequestSpec,
        instance_uuids: Sequence[str],
        priority_class: PriorityClass | None = None,
    ) -> RequestSpecPayload:
        return cls(
            instance_uuid=instance_uuids[0] if instance_uuids else None,
            project_id=spec.project_id,
            user_id=spec.user_id,
            availability_zone=spec.availability_zone,
            flavor=FlavorPayload.of(spec.flavor),
            image=ImageMetaPayload.of(spec.image) if spec.image is not None else None,
            is_bfv=spec.is_bfv,
            numa_topology=InstanceNUMATopologyPayload.of(spec),
            pci_requests=InstancePCIRequestsPayload.of(spec),
            num_instances=spec.num_instances,
            instance_group=ServerGroupPayload.of(spec.group) if spec.group else None,
            scheduler_hints=spec.scheduler_hints,
            ignore_hosts=spec.ignore_hosts,
            force_hosts=spec.force_hosts,
            force_nodes=spec.force_nodes,
            requested_destination=(
                DestinationPayload.of(spec.requested_destination)
                if spec.requested_destination is not None
                else None
            ),
            priority_class=(
                PriorityClassPayload.of(priority_class) if priority_class is not None else None
            ),
            spec=spec,
        )

    def summary(self) -> dict[str, Any]:
        """The few fields a legacy ``select_destinations`` payload carries."""
        return {
            "flavor": self.flavor.name,
            "num_instances": self.num_instances,
            "project_id": self.project_id,
            "availability_zone": self.availability_zone,
            "group": self.instance_group.uuid if self.instance_group else None,
        }


@dataclass(frozen=True)
class SelectionPayload(NotificationObject):
    """Where one instance goes: its primary host and node, the weight it won
    with, and the alternates kept for a reschedule."""

    # Version 1.0: initial version
    VERSION = "1.0"

    instance_uuid: str
    host: str
    node: str
    weight: float
    alternates: tuple[DestinationPayload, ...]

    @classmethod
    def of(cls, instance_uuid: str, selections: Sequence[Selection]) -> SelectionPayload:
        primary = selections[0]
        return cls(
            instance_uuid=instance_uuid,
            host=primary.host,
            node=primary.node,
            weight=primary.weight,
            alternates=tuple(DestinationPayload.of(s) for s in selections[1:]),
        )


@dataclass(frozen=True)
class ExceptionPayload(NotificationObject):
    """Why a request failed, as a user may read it (never a host or filter name)."""

    # Version 1.0: initial version
    VERSION = "1.0"

    #: The failure's class: ``NoValidHost``, ``InvalidRequest``, ``Forbidden``,
    #: ``InternalError`` (anything unexpected) ...
    exception: str
    exception_message: str

    @classmethod
    def of(cls, exc: BaseException) -> ExceptionPayload:
        kind = type(exc).__name__ if isinstance(exc, SchedulerError) else "InternalError"
        return cls(exception=kind, exception_message=policy.user_reason(exc))


# --- the events' payloads -----------------------------------------------------------


class EventPayload(NotificationObject):
    """A notification's payload: versioned, and viewed in the legacy shape."""

    def legacy(self) -> dict[str, Any]:
        raise NotImplementedError


def listed(uuids: Sequence[str]) -> tuple[tuple[str, ...], int]:
    """The instance uuids a notification or log line carries: at most
    MAX_INSTANCES_PER_REQUEST (a refused request may hold any number), and
    how many more there were."""
    return tuple(uuids[:MAX_INSTANCES_PER_REQUEST]), max(0, len(uuids) - MAX_INSTANCES_PER_REQUEST)


def legacy_uuids(uuids: tuple[str, ...], omitted: int) -> dict[str, Any]:
    """:func:`listed`'s uuids as the legacy payloads and the log lines carry them."""
    out: dict[str, Any] = {"instance_uuids": list(uuids)}
    if omitted:
        out["instance_uuids_omitted"] = omitted
    return out


@dataclass(frozen=True)
class SchedulingPayload(EventPayload):
    """``scheduler.run_instance.start`` / ``.end`` and
    ``scheduler.select_destinations.start`` / ``.end``: one decision.

    ``request_spec`` is None only for a request refused as unreadable (its
    ``.end`` says ``error``); ``migration_uuid`` names the move a decision is
    for (a resize), else None; ``selections`` are empty in the ``.start``.
    """

    # Version 1.0: initial version
    VERSION = "1.0"

    request_spec: RequestSpecPayload | None
    instance_uuids: tuple[str, ...]
    instance_uuids_omitted: int
    migration_uuid: str | None
    state: State
    selections: tuple[SelectionPayload, ...]
    #: Legacy only: select_destinations' legacy payload names the spec by summary.
    summary: bool = field(
        default=False, repr=False, compare=False, kw_only=True, metadata=LEGACY_ONLY
    )

    @classmethod
    def starting(
        cls,
        spec: RequestSpec | None,
        instance_uuids: Sequence[str],
        migration_uuid: str | None = None,
        summary: bool = False,
        priority_class: PriorityClass | None = None,
    ) -> SchedulingPayload:
        uuids, omitted = listed(instance_uuids)
        return cls(
            request_spec=(
                RequestSpecPayload.of(spec, uuids, priority_class) if spec is not None else None
            ),
            instance_uuids=uuids,
            instance_uuids_omitted=omitted,
            migration_uuid=migration_uuid,
            state="scheduling",
            selections=(),
            summary=summary,
        )

    def legacy(self) -> dict[str, Any]:
        spec: Any = None
        if self.request_spec is not None:
            spec = (
                self.request_spec.summary()
                if self.summary
                else self.request_spec.spec.to_primitive()
            )
        out = {
            "request_spec": spec,
            **legacy_uuids(self.instance_uuids, self.instance_uuids_omitted),
        }
        if self.migration_uuid is not None:
            out["migration_uuid"] = self.migration_uuid
        if self.state == "scheduled":
            out["hosts"] = [s.host for s in self.selections]
        elif self.state != "scheduling":
            out["state"] = self.state
        return out


@dataclass(frozen=True)
class InstanceScheduledPayload(EventPayload):
    """``scheduler.run_instance.scheduled``: one instance placed, before its build is cast."""

    # Version 1.0: initial version
    VERSION = "1.0"

    selection: SelectionPayload

    def legacy(self) -> dict[str, Any]:
        s = self.selection
        return {
            "instance_uuid": s.instance_uuid,
            "host": s.host,
            "node": s.node,
            "weight": s.weight,
            "alternates": [a.host for a in s.alternates],
        }


@dataclass(frozen=True)
class ResizePayload(EventPayload):
    """``scheduler.resize.start`` / ``.end``.

    ``instance_uuid``, ``source_host``, ``new_flavor`` and ``request_spec``
    are None only where a refused request did not hold a readable one;
    ``migration_uuid`` is set once the instance's allocation moved to the
    migration; ``selection`` is the destination (``.end``, ``scheduled``).
    """

    # Version 1.0: initial version
    VERSION = "1.0"

    instance_uuid: str | None
    source_host: str | None
    new_flavor: FlavorPayload | None
    request_spec: RequestSpecPayload | None
    migration_uuid: str | None
    state: State
    selection: SelectionPayload | None
    #: Legacy only: the instance, source host and new flavor's name as the
    #: request gave them (the legacy payload's shape).
    asked: Mapping[str, Any] = field(
        default_factory=dict, repr=False, compare=False, kw_only=True, metadata=LEGACY_ONLY
    )

    @classmethod
    def starting(
        cls,
        asked: Mapping[str, Any],
        instance_uuid: str | None,
        request: tuple[str, Flavor, RequestSpec] | None,
        priority_class: PriorityClass | None = None,
    ) -> ResizePayload:
        """The ``.start`` of a resize: ``asked`` is the legacy payload (the
        request's values as given), ``instance_uuid`` the instance if readable,
        ``request`` the (source host, new flavor, spec) read, None if refused."""
        source_host, flavor, spec = request if request is not None else (None, None, None)
        return cls(
            instance_uuid=instance_uuid,
            source_host=source_host,
            new_flavor=FlavorPayload.of(flavor) if flavor is not None else None,
            request_spec=(
                RequestSpecPayload.of(spec, [instance_uuid], priority_class)
                if spec is not None and instance_uuid is not None
                else None
            ),
            migration_uuid=None,
            state="scheduling",
            selection=None,
            asked=asked,
        )

    def legacy(self) -> dict[str, Any]:
        out = dict(self.asked)
        if self.migration_uuid is not None:
            out["migration_uuid"] = self.migration_uuid
        if self.state == "scheduled" and self.selection is not None:
            out["host"] = self.selection.host
        elif self.state not in ("scheduling", "scheduled"):
            out["state"] = self.state
        return out


@dataclass(frozen=True)
class SchedulingErrorPayload(EventPayload):
    """``scheduler.<action>.error`` (legacy: ``scheduler.<action>`` at ERROR):
    the instances a request failed and why, as a user may read it."""

    # Version 1.0: initial version
    # Version 1.1: no_valid_host_reasons
    VERSION = "1.1"

    instance_uuids: tuple[str, ...]
    instance_uuids_omitted: int
    state: Literal["error"]
    reason: ExceptionPayload
    #: For a NoValidHost, how many hosts each reason removed (``{"insufficient
    #: MEMORY_MB": 800, "disabled": 100}``), for a machine to read; empty for
    #: any other failure.
    no_valid_host_reasons: Mapping[str, int]

    @classmethod
    def of(cls, instance_uuids: Sequence[str], exc: BaseException) -> SchedulingErrorPayload:
        uuids, omitted = listed(instance_uuids)
        reasons = exc.reasons if isinstance(exc, NoValidHost) else {}
        return cls(
            instance_uuids=uuids,
            instance_uuids_omitted=omitted,
            state="error",
            reason=ExceptionPayload.of(exc),
            no_valid_host_reasons=types.MappingProxyType(dict(reasons)),
        )

    def legacy(self) -> dict[str, Any]:
        return {
            **legacy_uuids(self.instance_uuids, self.instance_uuids_omitted),
            "state": "error",
            "reason": self.reason.exception_message,
        }


@dataclass(frozen=True)
class ReconcileActionPayload(EventPayload):
    """``scheduler.reconcile.action``: the conductor's reconciler acted on a
    finding (a lost VM, a forgotten delete or shelve, a VM adopted where it
    runs, a stray reaped ...): what it found, why, and what it did."""

    # Version 1.0: initial version
    VERSION = "1.0"

    #: The finding's kind (``lost_vm``, ``misplaced_vm``, ``stray_vm`` ...).
    kind: str
    #: What was done about it (``error``, ``adopt``, ``reap`` ...).
    action: str
    #: The instance's uuid (for an orphan allocation, its consumer's).
    instance_uuid: str
    #: Where it was found (None: no host, e.g. an allocation on none).
    host: str | None
    reason: str
    #: What the action did (``ERROR, released``, ``adopted on ...`` ...).
    outcome: str

    def legacy(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _field_names(type(self))}


@dataclass(frozen=True)
class VictimPayload(NotificationObject):
    """An instance a preemption evicts: its uuid and priority class."""

    # Version 1.0: initial version
    VERSION = "1.0"

    instance_uuid: str
    #: The class it was recorded with (None: none, priority 0).
    priority_class: str | None
    priority: int


@dataclass(frozen=True)
class PreemptionPayload(EventPayload):
    """``scheduler.preempt``: a request that found no host claimed one by
    evicting lower-priority preemptible instances there (their deletes
    begun, the request's build cast once their VMs are gone)."""

    # Version 1.0: initial version
    VERSION = "1.0"

    instance_uuid: str
    request_id: str
    host: str
    node: str
    priority_class: PriorityClassPayload
    victims: tuple[VictimPayload, ...]

    def legacy(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in ("instance_uuid", "request_id", "host", "node")}
        chosen = self.priority_class
        out.update(priority_class=chosen.name, priority=chosen.priority)
        return {**out, "victims": [asdict(v) for v in self.victims]}


#: Per versioned event type: its priority and its payload's class. Every event
#: the scheduler publishes is here (and has its sample in doc/notification_samples).
EVENTS: dict[str, tuple[str, type[EventPayload]]] = {
    "scheduler.run_instance.start": ("INFO", SchedulingPayload),
    "scheduler.run_instance.scheduled": ("INFO", InstanceScheduledPayload),
    "scheduler.run_instance.end": ("INFO", SchedulingPayload),
    "scheduler.run_instance.error": ("ERROR", SchedulingErrorPayload),
    "scheduler.select_destinations.start": ("INFO", SchedulingPayload),
    "scheduler.select_destinations.end": ("INFO", SchedulingPayload),
    "scheduler.select_destinations.error": ("ERROR", SchedulingErrorPayload),
    "scheduler.resize.start": ("INFO", ResizePayload),
    "scheduler.resize.end": ("INFO", ResizePayload),
    "scheduler.resize.error": ("ERROR", SchedulingErrorPayload),
    "scheduler.reconcile.action": ("INFO", ReconcileActionPayload),
    "scheduler.preempt": ("INFO", PreemptionPayload),
}


def registry() -> dict[str, type[NotificationObject]]:
    """Every payload object by name, nested ones included."""
    found: dict[str, type[NotificationObject]] = {}

    def visit(cls: type[NotificationObject]) -> None:
        if cls.__name__ in found:
            return
        found[cls.__name__] = cls
        for tp in field_types(cls).values():
            for arg in (tp, *typing.get_args(tp), *_nested_args(tp)):
                if isinstance(arg, type) and issubclass(arg, NotificationObject):
                    visit(arg)

    for _, cls in EVENTS.values():
        visit(cls)
    return found


def _nested_args(tp: Any) -> list[Any]:
    return [inner for arg in typing.get_args(tp) for inner in typing.get_args(arg)]
