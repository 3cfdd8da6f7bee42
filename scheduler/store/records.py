"""The store's records: what the contract takes and hands out.

Frozen dataclasses with no behaviour past their own fields: providers and
their inventories, aggregates, services and their reports, consumers, group
claims, change-feed entries and the snapshot. Both the contract
(:mod:`scheduler.store.base`) and the compact snapshot's columns
(:mod:`scheduler.store.columns`) are written in terms of them, so this module
imports neither, and the dependency goes one way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from scheduler import rules
from scheduler.exceptions import InvalidRequest
from scheduler.objects import (
    BUILDING,
    DELETING_TASK,
    PREEMPTING,
    InstanceRecord,
    RequestSpec,
    validate_uuid,
)

# --- records ------------------------------------------------------------------------


@dataclass(frozen=True)
class Inventory:
    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int | None = None  # None: the total
    step_size: int = 1
    allocation_ratio: float = 1.0

    @property
    def capacity(self) -> int:
        return rules.capacity(self.total, self.reserved, self.allocation_ratio)

    @property
    def effective_max_unit(self) -> int:
        return rules.effective_max_unit(self.total, self.max_unit)

    def to_primitive(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "reserved": self.reserved,
            "min_unit": self.min_unit,
            "max_unit": self.effective_max_unit,
            "step_size": self.step_size,
            "allocation_ratio": self.allocation_ratio,
        }

    @classmethod
    def from_primitive(cls, d: Mapping[str, Any]) -> Inventory:
        return cls(
            total=int(d["total"]),
            reserved=int(d.get("reserved", 0)),
            min_unit=int(d.get("min_unit", 1)),
            max_unit=int(d["max_unit"]) if d.get("max_unit") is not None else None,
            step_size=int(d.get("step_size", 1)),
            allocation_ratio=float(d.get("allocation_ratio", 1.0)),
        )


@dataclass(frozen=True)
class Provider:
    """A resource provider. A compute host is a root provider named after it."""

    uuid: str
    name: str
    generation: int = 0
    parent_uuid: str | None = None
    root_uuid: str | None = None  # None: itself
    inventories: Mapping[str, Inventory] = field(default_factory=dict)
    usages: Mapping[str, int] = field(default_factory=dict)
    traits: frozenset[str] = frozenset()
    aggregates: frozenset[str] = frozenset()
    consumers: int = 0  # how many consumers hold allocations here

    def free(self, rc: str) -> int:
        inv = self.inventories.get(rc)
        return 0 if inv is None else inv.capacity - self.usages.get(rc, 0)


@dataclass(frozen=True)
class Aggregate:
    uuid: str
    name: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Service:
    """A compute service: the host, where its RPC server listens, its state.

    ``rpc_server`` is the oslo.messaging server name to cast to on topic
    ``compute`` (one simulator process serves many hosts under one name).
    ``capabilities`` (what the host is: architecture, hypervisor, NUMA cells,
    PCI devices, any attribute) and ``stats`` (counters such as builds in
    progress) are what the compute reports with :meth:`Store.report_services`;
    the store keeps them as given (JSON values) and never interprets them
    (:mod:`scheduler.engine.capabilities` reads them).
    """

    host: str
    rpc_server: str
    last_seen: float = 0.0
    disabled: bool = False
    disabled_reason: str | None = None
    failed_builds: int = 0
    capabilities: Mapping[str, Any] = field(default_factory=dict)
    stats: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ServiceReport:
    """What one compute reports beyond heartbeats; None leaves that part as it is."""

    host: str
    capabilities: Mapping[str, Any] | None = None
    stats: Mapping[str, int] | None = None


@dataclass(frozen=True)
class RunningInstance:
    """One VM a host really runs, as its compute reports it (the resource
    tracker's view, not the store's): what it takes, for whom, and which
    request and move brought it there (``migration_uuid`` while a move
    involving this host is under way)."""

    uuid: str
    resources: Mapping[str, int] = field(default_factory=dict)
    project_id: str | None = None
    user_id: str | None = None
    request_id: str | None = None
    migration_uuid: str | None = None
    #: When the VM last started on its host (seconds since the epoch; None:
    #: not known). Not part of what the VM is (equality).
    started_at: float | None = field(default=None, compare=False)

    def problem(self) -> str | None:
        """Why this entry cannot be reported (None: it can): each field of the
        type a report carries, the uuids UUIDs, the amounts whole numbers."""
        for what, value in (("uuid", self.uuid), ("migration_uuid", self.migration_uuid)):
            if value is not None or what == "uuid":
                try:
                    validate_uuid(value, what)
                except InvalidRequest as exc:
                    return exc.message.removeprefix("invalid request: ")
        if not isinstance(self.resources, Mapping) or any(
            not isinstance(rc, str) or isinstance(n, bool) or not isinstance(n, int) or n < 0
            for rc, n in self.resources.items()
        ):
            return "its resources are not amounts by resource class"
        if any(
            v is not None and not isinstance(v, str)
            for v in (self.project_id, self.user_id, self.request_id)
        ):
            return "its project, user or request id is not a string"
        if self.started_at is not None and (
            not isinstance(self.started_at, int | float) or not math.isfinite(self.started_at)
        ):
            return "its start time is not a time"
        return None

    def to_primitive(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "uuid": self.uuid,
            "resources": dict(self.resources),
            "project_id": self.project_id,
            "user_id": self.user_id,
            "request_id": self.request_id,
            "migration_uuid": self.migration_uuid,
        }
        if self.started_at is not None:
            out["started_at"] = self.started_at
        return out

    @classmethod
    def from_primitive(cls, d: Mapping[str, Any]) -> RunningInstance:
        return cls(
            uuid=str(d["uuid"]),
            resources={str(rc): int(n) for rc, n in dict(d.get("resources") or {}).items()},
            project_id=d.get("project_id"),
            user_id=d.get("user_id"),
            request_id=d.get("request_id"),
            migration_uuid=d.get("migration_uuid"),
            started_at=float(d["started_at"]) if d.get("started_at") is not None else None,
        )


#: What an :class:`EndedInstance` says ended on its host: a user's delete
#: (``terminate_instance``) or a shelve's offload (``shelve_offload_instance``).
ENDED_DELETE = "deleted"
ENDED_OFFLOAD = "offloaded"


@dataclass(frozen=True)
class EndedInstance:
    """A tombstone: the instance's VM was destroyed on the reporting host at
    ``at`` (seconds since the epoch) by a step of a delete or of a shelve
    (``what``: :data:`ENDED_DELETE`, :data:`ENDED_OFFLOAD`), each acted on
    only while the record said so. What lets the reconciler finish a delete
    or a shelve that a store gone back in time forgot."""

    uuid: str
    what: str
    at: float

    def problem(self) -> str | None:
        """Why this tombstone cannot be reported (None: it can)."""
        try:
            validate_uuid(self.uuid, "uuid")
        except InvalidRequest as exc:
            return exc.message.removeprefix("invalid request: ")
        if self.what not in (ENDED_DELETE, ENDED_OFFLOAD):
            return "it names no delete or shelve"
        if isinstance(self.at, bool) or not isinstance(self.at, int | float):
            return "its time is not a time"
        return None if math.isfinite(self.at) else "its time is not a time"

    def to_primitive(self) -> list[Any]:
        return [self.uuid, self.what, self.at]

    @classmethod
    def from_primitive(cls, d: Sequence[Any]) -> EndedInstance:
        uuid, what, at = d
        return cls(uuid=str(uuid), what=str(what), at=float(at))


#: How many of the last NoValidHosts the store keeps (a bounded list: the
#: newest push out the oldest).
REFUSALS_KEPT = 200


@dataclass(frozen=True)
class Refusal:
    """One request no host could take (a NoValidHost), as an operator asks
    "why did the last requests fail?": when (``at``, seconds since the
    epoch), which request and instances, and how many hosts each reason
    removed."""

    at: float
    request_id: str
    action: str  # run_instance, select_destinations, resize ...
    instance_uuids: tuple[str, ...]
    reasons: Mapping[str, int]

    def to_primitive(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "request_id": self.request_id,
            "action": self.action,
            "instance_uuids": list(self.instance_uuids),
            "reasons": dict(self.reasons),
        }

    @classmethod
    def from_primitive(cls, d: Mapping[str, Any]) -> Refusal:
        return cls(
            at=float(d["at"]),
            request_id=str(d["request_id"]),
            action=str(d["action"]),
            instance_uuids=tuple(str(u) for u in d["instance_uuids"]),
            reasons=MappingProxyType({str(k): int(v) for k, v in d["reasons"].items()}),
        )


@dataclass(frozen=True)
class InstanceReport:
    """Every VM one host runs, as its compute saw them at ``reported_at``
    (seconds since the epoch), and the VMs it destroyed for a delete or a
    shelve within the retention (``ended``). A report replaces the host's
    previous one."""

    host: str
    reported_at: float
    instances: tuple[RunningInstance, ...] = ()
    ended: tuple[EndedInstance, ...] = ()

    def to_primitive(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reported_at": self.reported_at,
            "instances": [i.to_primitive() for i in self.instances],
        }
        if self.ended:
            out["ended"] = [e.to_primitive() for e in self.ended]
        return out

    @classmethod
    def from_primitive(cls, host: str, d: Mapping[str, Any]) -> InstanceReport:
        return cls(
            host=host,
            reported_at=float(d["reported_at"]),
            instances=tuple(RunningInstance.from_primitive(i) for i in d.get("instances") or ()),
            ended=tuple(EndedInstance.from_primitive(e) for e in d.get("ended") or ()),
        )


@dataclass(frozen=True)
class GroupClaim:
    """The server-group check made inside a claim.

    The claim records the consumer as a member of the group on ``host``,
    whatever the policy, so the soft (anti-)affinity weighers of later
    requests see where the group's instances are; only the strict policies
    are checked (:func:`scheduler.rules.check_group`): ``affinity``, the
    group's members all on one host; ``anti-affinity``, at most
    ``max_server_per_host`` members per host.

    ``own_consumer`` names the consumer whose membership is the claimant's
    own: a move's migration, holding the instance's membership on its source
    while the instance is placed again. Where it is a member of this group,
    on ``host``, the check does not count it against the claim (``own_host``
    of :func:`scheduler.rules.check_group`); anywhere else it changes nothing.
    """

    group_uuid: str
    policy: str
    host: str
    max_server_per_host: int = 1
    own_consumer: str | None = None

    @classmethod
    def for_spec(
        cls, spec: RequestSpec, host: str, migration_uuid: str | None = None
    ) -> GroupClaim | None:
        """The group membership a claim of ``spec`` on ``host`` records (None when
        the request names no group); a move's claim names its ``migration_uuid``,
        the consumer holding the instance's own membership. Every claim of an
        instance, the scheduler's and the conductor's of an alternate, is made
        with this."""
        group = spec.group
        if group is None:
            return None
        return cls(group.uuid, group.policy, host, group.max_server_per_host, migration_uuid)


@dataclass(frozen=True)
class Consumer:
    """The allocations one consumer (instance or migration) holds."""

    uuid: str
    allocations: Mapping[str, Mapping[str, int]]
    project_id: str
    user_id: str
    generation: int = 1
    group_uuid: str | None = None
    host: str | None = None

    def member_host(self, group_uuid: str) -> str | None:
        """Where this consumer is a member of the group (None: it is not)."""
        return self.host if self.group_uuid == group_uuid else None


#: The kind of a change-feed entry that cannot be read (see :class:`Change`).
CORRUPT_CHANGE = "corrupt"


@dataclass(frozen=True)
class Change:
    """One entry of the change feed.

    kind ``provider``: ``data`` is the whole provider (a :class:`Provider`);
    kind ``usage``: ``data`` is ``{"uuid", "generation", "usages", "consumers"}``;
    kind ``aggregate``: an :class:`Aggregate`;
    kind ``service``: a :class:`Service` (disabled state, failed-build count,
    capabilities or stats changed; plain heartbeats are not fed, they are
    read with ``heartbeats``);
    kind ``corrupt`` (:data:`CORRUPT_CHANGE`): an entry the store cannot read
    (something foreign or damaged in the feed); ``data`` is the
    :class:`~scheduler.exceptions.CorruptRecord` naming it. Readers log it and
    move past it.
    """

    cursor: str
    kind: str
    data: Any


@dataclass(frozen=True)
class RecordCheck:
    """What an instance record must say for a write to go on, checked in the
    write's own atomic step: its state one of ``states`` and each field of
    ``expect`` (text fields such as ``migration_uuid`` or ``task_state``) that
    value (None: none). The step guard's record rules, made atomic with the
    step's write (:meth:`scheduler.steps.Step.record_check`)."""

    uuid: str
    states: tuple[str, ...]
    expect: Mapping[str, str | None] = field(default_factory=dict)

    def unmatched(self, record: InstanceRecord | None) -> str | None:
        """Why ``record`` does not pass (None: it does); the in-memory store's
        reading of the rule the Lua scripts apply."""
        if record is None:
            return "no instance record"
        if record.state not in self.states:
            return f"instance is {record.state}"
        if any(getattr(record, f) != v for f, v in self.expect.items()):
            return "the record moved on"
        return None


#: The state an instance must be in to be preempted: running, with no task
#: (no move, delete or shelve under way).
VICTIM_STATES = ("ACTIVE",)


def eviction_refused(record: InstanceRecord, priority: int | None = None) -> str | None:
    """Why ``record`` may not be evicted by a request of ``priority`` (None: it
    may): the one rule of who may be a victim, read by the preemption search
    (with no ``priority``: by any higher one, the search compares priorities
    itself) and by the preempting claim (:meth:`Victim.unmatched`, and its
    mirror in ``lua/claim.lua``). In :data:`VICTIM_STATES`, with no task, on
    a host, preemptible and of a priority strictly below ``priority``."""
    if record.state not in VICTIM_STATES:
        return f"instance is {record.state}"
    if record.task_state is not None or record.host is None:
        return "the record moved on"
    if not record.preemptible or (priority is not None and record.priority >= priority):
        return f"not preemptible by priority {priority}"
    return None


@dataclass(frozen=True)
class Victim:
    """An instance a preempting claim evicts, as the scheduler read it: its
    allocations, and its record's ``host`` and ``updated_at``. The claim
    goes on only while they are as read (:meth:`unmatched`), checked in its
    own atomic step (:meth:`scheduler.store.base.PlacementStore.claim_preempting`)."""

    uuid: str
    allocations: Mapping[str, Mapping[str, int]]
    host: str | None
    updated_at: float
    #: The class and priority its record was created with (never rewritten
    #: afterwards, so as read while ``updated_at`` matches): what the log of
    #: preemptions keeps (:meth:`Eviction.entry`).
    priority_class: str | None = None
    priority: int = 0

    def to_primitive(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "allocations": {rp: dict(res) for rp, res in self.allocations.items()},
            "host": self.host,
            "updated_at": self.updated_at,
        }

    def unmatched(
        self, record: InstanceRecord | None, held: Consumer | None, priority: int
    ) -> str | None:
        """Why this victim may not be evicted by a claim of ``priority``
        (None: it may); the in-memory store's reading of the rule the Lua
        claim applies: a live record that :func:`eviction_refused` lets go,
        on the host and with the ``updated_at`` read, holding exactly the
        allocations read."""
        if record is None:
            return "no instance record"
        why = eviction_refused(record, priority)
        if why is not None:
            return why
        if record.host != self.host or record.updated_at != self.updated_at:
            return "the record moved on"
        if held is None or held.allocations != self.allocations:
            return "its allocation changed"
        return None


#: The state a preemptor's record must be in for its claim to evict: a boot
#: being scheduled (the conductor recorded it and waits on the scheduler).
PREEMPTOR_STATES = (BUILDING,)


@dataclass(frozen=True)
class Eviction:
    """What a preempting claim writes on the records, in its own atomic step
    (:meth:`scheduler.store.base.PlacementStore.claim_preempting`): each
    victim turns DELETING, its delete fenced and due at once (``at``), its
    fault naming the preemptor; the preemptor's record (BUILDING) waits on
    them (task ``preempting``, placed on ``host``). The conductor carries
    both on (:mod:`conductor_stub.tasks.preempt`)."""

    request_id: str
    at: float
    host: str
    node: str
    availability_zone: str | None = None
    priority_class: str | None = None
    priority: int = 0

    def fault(self, preemptor: str) -> str:
        """What a victim's user reads."""
        return f"preempted by instance {preemptor}"

    def victim_fields(self, preemptor: str, victim: Victim) -> dict[str, Any]:
        """A victim's record fields once evicted (state DELETING besides)."""
        return {
            "task_state": DELETING_TASK,
            "fault": self.fault(preemptor),
            "fault_details": (
                f"preempted by instance {preemptor} of priority class "
                f"{self.priority_class} (priority {self.priority}), request "
                f"{self.request_id}, on host {victim.host}"
            ),
            "preempted_by": preemptor,
            "pending_hosts": [victim.host] if victim.host else [],
            "request_id": self.request_id,
            "redrives": 0,
            "updated_at": self.at,
            "deadline": self.at,
        }

    def preemptor_fields(self, victims: Sequence[Victim]) -> dict[str, Any]:
        """The preemptor's record fields once its claim is written."""
        return {
            "task_state": PREEMPTING,
            "host": self.host,
            "node": self.node,
            "availability_zone": self.availability_zone,
            "victims": [v.uuid for v in victims],
            "updated_at": self.at,
        }

    def entry(self, preemptor: str, victims: Sequence[Victim]) -> PreemptionEntry:
        """What the store's log of recent preemptions keeps of this one,
        written in the claim's own step (``scheduler-admin preemptions``)."""
        return PreemptionEntry(
            at=self.at,
            instance_uuid=preemptor,
            request_id=self.request_id,
            host=self.host,
            priority_class=self.priority_class,
            priority=self.priority,
            victims=tuple(EvictedVictim(v.uuid, v.priority_class, v.priority) for v in victims),
        )

    def unmatched(self, record: InstanceRecord | None) -> str | None:
        """Why the preemptor's ``record`` may not take the claim (None: it may)."""
        if record is None:
            return "no instance record"
        if record.state not in PREEMPTOR_STATES:
            return f"instance is {record.state}"
        return None


#: How many of the last preemptions the store keeps (a bounded list, written
#: in each preempting claim's own step: the newest push out the oldest).
PREEMPTIONS_KEPT = 200


@dataclass(frozen=True)
class EvictedVictim:
    """One instance a preemption evicted: its uuid, class and priority."""

    uuid: str
    priority_class: str | None
    priority: int


@dataclass(frozen=True)
class PreemptionEntry:
    """One preempting claim, as the store's log keeps it: when (``at``,
    seconds since the epoch), the preemptor (``instance_uuid``), its request,
    the host, its class and priority, and the victims evicted there."""

    at: float
    instance_uuid: str
    request_id: str
    host: str
    priority_class: str | None
    priority: int
    victims: tuple[EvictedVictim, ...]

    def to_primitive(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "instance_uuid": self.instance_uuid,
            "request_id": self.request_id,
            "host": self.host,
            "priority_class": self.priority_class,
            "priority": self.priority,
            "victims": [
                {"uuid": v.uuid, "priority_class": v.priority_class, "priority": v.priority}
                for v in self.victims
            ],
        }

    @classmethod
    def from_primitive(cls, d: Mapping[str, Any]) -> PreemptionEntry:
        def _class(value: Any) -> str | None:
            return None if value is None else str(value)

        return cls(
            at=float(d["at"]),
            instance_uuid=str(d["instance_uuid"]),
            request_id=str(d["request_id"]),
            host=str(d["host"]),
            priority_class=_class(d.get("priority_class")),
            priority=int(d.get("priority", 0)),
            victims=tuple(
                EvictedVictim(str(v["uuid"]), _class(v.get("priority_class")), int(v["priority"]))
                for v in d["victims"]
            ),
        )
