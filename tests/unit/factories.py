"""The one factory for hosts, requests and a small store the engine tests run on.

``host("h1", ram=8192, used={"MEMORY_MB": 1024})`` makes a root provider and
its service record (``capabilities=`` / ``stats=``: what its compute
reports; ``traits=``, ``aggregates=``, and child providers made with
:func:`child`, e.g. a GPU pool); :class:`FeedStore` holds them and speaks
the part of the store contract the engine uses (snapshot, change feed,
services, claim, release, moves, consumers, group members), with knobs
for what tests provoke: a claim conflict on a host, a truncated feed,
another worker's writes, an instance already running. :class:`Recorded`
stands in for an RPC client (the conductor, compute and simulator tests
read what would have been sent).
"""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.engine.context import PlacementContext
from scheduler.engine.hostview import HostView
from scheduler.engine.pipeline import Engine
from scheduler.engine.settings import EngineSettings
from scheduler.exceptions import (
    CapacityExceeded,
    ConsumerConflict,
    GroupPolicyViolation,
    ProviderNotFound,
    StreamTruncated,
)
from scheduler.objects import (
    DISK_GB,
    MEMORY_MB,
    VCPU,
    AllocationRequest,
    Flavor,
    Image,
    RequestSpec,
    ServerGroup,
)
from scheduler.resource_request import COMPUTE_STATUS_DISABLED
from scheduler.store.base import (
    Aggregate,
    Change,
    Consumer,
    GroupClaim,
    Inventory,
    Provider,
    Service,
    ServiceReport,
    Snapshot,
    Store,
)
from scheduler.store.columns import CompactSnapshot, HostColumnsBuilder, ServiceColumnsBuilder

#: The tests' wall clock: every engine and context built here reads it.
NOW = 1_000_000.0
GROUP_UUID = "00000000-0000-4000-8000-0000000000aa"


def uuid_of(name: str) -> str:
    """A stable uuid per name, so tests can refer to providers and instances by name."""
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, name))


@dataclass(frozen=True)
class Host:
    provider: Provider
    service: Service | None
    children: tuple[Provider, ...] = ()

    @property
    def providers(self) -> tuple[Provider, ...]:
        """The root first, then its children."""
        return (self.provider, *self.children)


@dataclass(frozen=True)
class Child:
    """A child provider to hang under a host (see :func:`child`)."""

    name: str
    inventories: Mapping[str, Inventory]
    used: Mapping[str, int]
    traits: frozenset[str]
    aggregates: frozenset[str]


def child(name: str, *, inventory: Mapping[str, int] | None = None,
          used: Mapping[str, int] | None = None, traits: Iterable[str] = (),
          aggregates: Iterable[str] = (), max_unit: Mapping[str, int] | None = None) -> Child:
    """A child provider (a GPU pool, a NUMA cell): ``inventory`` is totals per class."""
    max_unit = max_unit or {}
    return Child(name, {rc: Inventory(total=n, max_unit=max_unit.get(rc))
                        for rc, n in (inventory or {}).items()},
                 dict(used or {}), frozenset(traits), frozenset(aggregates))


def host(name: str, *, vcpus: int = 16, ram: int = 32768, disk: int = 1000,
         used: Mapping[str, int] | None = None, reserved: Mapping[str, int] | None = None,
         ratios: Mapping[str, float] | None = None, max_unit: Mapping[str, int] | None = None,
         min_unit: Mapping[str, int] | None = None, step: Mapping[str, int] | None = None,
         extra: Mapping[str, Inventory] | None = None, aggregates: Iterable[str] = (),
         traits: Iterable[str] = (), children: Iterable[Child] = (),
         up: bool = True, disabled: bool = False, failed_builds: int = 0,
         service: bool = True, capabilities: Mapping[str, Any] | None = None,
         stats: Mapping[str, int] | None = None, consumers: int = 0) -> Host:
    """A compute host: a root provider named after it, its service record and
    its child providers. A disabled host carries COMPUTE_STATUS_DISABLED, as
    the store keeps it.

    ``consumers`` is how many instances hold allocations on it (for the
    instance-count filter and weigher; ``used`` is their usage).
    """
    totals = {VCPU: vcpus, MEMORY_MB: ram, DISK_GB: disk}
    reserved, ratios = reserved or {}, ratios or {}
    max_unit, min_unit, step = max_unit or {}, min_unit or {}, step or {}
    inventories = {
        rc: Inventory(total=total, reserved=reserved.get(rc, 0), min_unit=min_unit.get(rc, 1),
                      max_unit=max_unit.get(rc), step_size=step.get(rc, 1),
                      allocation_ratio=ratios.get(rc, 1.0))
        for rc, total in totals.items() if total}
    inventories.update(extra or {})
    traits = frozenset(traits) | ({COMPUTE_STATUS_DISABLED} if disabled else set())
    root = uuid_of(name)
    provider = Provider(uuid=root, name=name, generation=1, inventories=inventories,
                        usages=dict(used or {}), aggregates=frozenset(aggregates),
                        traits=traits, consumers=consumers)
    kids = tuple(Provider(uuid=uuid_of(c.name), name=c.name, generation=1, parent_uuid=root,
                          root_uuid=root, inventories=dict(c.inventories), usages=dict(c.used),
                          traits=c.traits, aggregates=c.aggregates) for c in children)
    record = Service(host=name, rpc_server="compute-sim",
                     last_seen=NOW - 1 if up else NOW - 3600, disabled=disabled,
                     failed_builds=failed_builds, capabilities=dict(capabilities or {}),
                     stats=dict(stats or {})) if service else None
    return Host(provider, record, kids)


def az(name: str, zone: str) -> Aggregate:
    """An aggregate naming an availability zone (its uuid derives from ``name``)."""
    return Aggregate(uuid=uuid_of(name), name=name, metadata={"availability_zone": zone})


def aggregate(name: str, **metadata: str) -> Aggregate:
    """An aggregate with this metadata (its uuid derives from ``name``)."""
    return Aggregate(uuid=uuid_of(name), name=name, metadata=metadata)


def spec(vcpus: int = 1, ram: int = 1024, disk: int = 10,
         extra_specs: Mapping[str, str] | None = None,
         image_properties: Mapping[str, str] | None = None, image_id: str | None = None,
         **fields: object) -> RequestSpec:
    """A request for one flavor; ``fields`` set any other RequestSpec field."""
    flavor = Flavor(name="test", vcpus=vcpus, memory_mb=ram, root_gb=disk,
                    extra_specs=dict(extra_specs or {}))
    if image_properties is not None or image_id is not None:
        fields["image"] = Image(id=image_id, properties=image_properties or {})
    fields = {"project_id": "project", "user_id": "user", **fields}
    return RequestSpec(flavor=flavor, **fields)  # type: ignore[arg-type]


def group(policy: str, max_server_per_host: int = 1) -> ServerGroup:
    return ServerGroup(uuid=GROUP_UUID, policy=policy, max_server_per_host=max_server_per_host)


def context(request: RequestSpec | None = None, members: Mapping[str, int] | None = None,
            now: float = NOW) -> PlacementContext:
    request = request or spec()
    return PlacementContext(spec=request, now=now, group_members=Counter(members or {}))


def settings(**overrides: object) -> EngineSettings:
    """EngineSettings; a name that is not one of its fields is a plugin option
    (``max_io_ops_per_host=1``), and ``weight_multipliers`` gives several at once."""
    fields = EngineSettings.__dataclass_fields__
    options = dict(overrides.pop("weight_multipliers", None) or {})  # type: ignore[call-overload]
    options.update({name: overrides.pop(name) for name in list(overrides) if name not in fields})
    return EngineSettings(**overrides, plugin_options=options)  # type: ignore[arg-type]


def view_of(*hosts: Host, aggregates: Iterable[Aggregate] = (),
            **overrides: object) -> HostView:
    """A host view loaded from these hosts."""
    view = HostView(FeedStore(hosts, aggregates), settings(**overrides))  # type: ignore[arg-type]
    view.refresh(NOW)
    return view


def engine(store: FeedStore, **overrides: object) -> Engine:
    return Engine(store, settings(**overrides), clock=lambda: NOW)  # type: ignore[arg-type]


def populate(store: Store, hosts: Iterable[Host], aggregates: Iterable[Aggregate] = (),
             now: float = NOW) -> None:
    """Write hosts into a real store through its contract (usage comes from claims only)."""
    for agg in aggregates:
        store.put_aggregate(agg)
    hosts = list(hosts)
    for h in hosts:
        for p in h.providers:
            assert not p.usages, "a store's usage comes from claims"
            generation = store.create_provider(p.uuid, p.name, p.parent_uuid).generation
            generation = store.set_inventory(p.uuid, generation, p.inventories)
            if p.aggregates:
                generation = store.set_aggregates(p.uuid, generation, p.aggregates)
            own = p.traits - {COMPUTE_STATUS_DISABLED}  # the store sets that one
            if own:
                store.set_traits(p.uuid, generation, own)
    services = [h.service for h in hosts if h.service is not None]
    store.register_services(services)
    for service in services:
        store.heartbeat([service.host], service.last_seen)
        if service.disabled:
            store.set_service_disabled(service.host, True)
        for _ in range(service.failed_builds):
            store.record_build_result(service.host, success=False)
    store.report_services(ServiceReport(s.host, s.capabilities, s.stats) for s in services
                          if s.capabilities or s.stats)


class FeedStore:
    """The slice of the store contract the engine uses, in memory.

    Claims check capacity (with ratios and ``max_unit``) and the strict group
    policies, like the real stores. ``conflict_on`` names hosts whose next
    claim is refused as if another worker filled them first.
    """

    def __init__(self, hosts: Iterable[Host] = (), aggregates: Iterable[Aggregate] = ()) -> None:
        self.providers: dict[str, Provider] = {}
        self.services: dict[str, Service] = {}
        self.aggregates = {a.uuid: a for a in aggregates}
        self.consumers: dict[str, Consumer] = {}
        self.feed: list[Change] = []
        self.oldest = 0  # feed entries before this number are dropped
        self.conflict_on: set[str] = set()
        self.claims: list[tuple[str, str, GroupClaim | None]] = []
        self.heartbeats_asked: list[list[str] | None] = []  # hosts per heartbeats() call
        for h in hosts:
            for p in h.providers:
                self.providers[p.uuid] = p
            if h.service is not None:
                self.services[h.service.host] = h.service

    # --- the contract ---------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return Snapshot(cursor=self._cursor(len(self.feed)),
                        providers=list(self.providers.values()),
                        aggregates=list(self.aggregates.values()),
                        services=list(self.services.values()))

    def compact_snapshot(self) -> CompactSnapshot:
        hosts, services = HostColumnsBuilder(), ServiceColumnsBuilder()
        for p in self.providers.values():
            if p.parent_uuid is None:
                hosts.add_provider(p)
        for service in self.services.values():
            services.add_service(service)
        return CompactSnapshot(
            cursor=self._cursor(len(self.feed)), hosts=hosts.build(sort=False),
            children=[p for p in self.providers.values() if p.parent_uuid is not None],
            aggregates=list(self.aggregates.values()), services=services.build(sort=False))

    def changes(self, cursor: str, limit: int = 1000) -> list[Change]:
        seen = int(cursor.split("-")[1])
        if seen < self.oldest:
            raise StreamTruncated(cursor=cursor)
        return self.feed[seen:seen + limit]

    def list_services(self) -> list[Service]:
        return list(self.services.values())

    def heartbeats(self, hosts: Sequence[str] | None = None) -> dict[str, float]:
        self.heartbeats_asked.append(None if hosts is None else list(hosts))
        return {host: s.last_seen for host, s in self.services.items()
                if hosts is None or host in hosts}

    def get_provider(self, uuid: str) -> Provider:
        if uuid not in self.providers:
            raise ProviderNotFound(uuid)
        return self.providers[uuid]

    def get_consumer(self, consumer_uuid: str) -> Consumer | None:
        return self.consumers.get(consumer_uuid)

    def group_hosts(self, group_uuid: str) -> dict[str, int]:
        members: dict[str, int] = {}
        for c in self.consumers.values():
            if c.group_uuid == group_uuid and c.host:
                members[c.host] = members.get(c.host, 0) + 1
        return members

    def claim(self, consumer_uuid: str, request: AllocationRequest,
              group: GroupClaim | None = None) -> bool:
        held = self.consumers.get(consumer_uuid)
        if held is not None:
            if held.allocations == request.allocations:
                return False
            raise ConsumerConflict(consumer=consumer_uuid)
        for rp, amounts in request.allocations.items():
            p = self.get_provider(rp)
            if p.name in self.conflict_on:
                self.conflict_on.discard(p.name)
                raise CapacityExceeded(uuid=rp, rc=VCPU, requested=0, free=0)
            for rc, amount in amounts.items():
                inv = p.inventories[rc]
                if amount > min(p.free(rc), inv.effective_max_unit):
                    raise CapacityExceeded(uuid=rp, rc=rc, requested=amount, free=p.free(rc))
        first = self.providers[next(iter(request.allocations))]
        host_name = self.providers[first.root_uuid or first.uuid].name
        if group is not None:
            members = self.group_hosts(group.group_uuid)
            if (group.policy == "affinity" and members and host_name not in members) or (
                    group.policy == "anti-affinity"
                    and members.get(host_name, 0) >= group.max_server_per_host):
                raise GroupPolicyViolation(group=group.group_uuid, policy=group.policy,
                                           host=host_name)
        self.claims.append((consumer_uuid, host_name, group))
        self.consumers[consumer_uuid] = Consumer(
            uuid=consumer_uuid, allocations=request.allocations, project_id=request.project_id,
            user_id=request.user_id, group_uuid=group.group_uuid if group else None,
            host=host_name)
        for rp, amounts in request.allocations.items():
            self._add_usage(rp, amounts, +1)
        return True

    def release(self, consumer_uuid: str) -> bool:
        held = self.consumers.pop(consumer_uuid, None)
        if held is None:
            return False
        for rp, amounts in held.allocations.items():
            self._add_usage(rp, amounts, -1)
        return True

    def move_allocations(self, source_uuid: str, target_uuid: str,
                         replace: bool = False) -> bool:
        """The contract's move: usage stays, the consumer holding it changes."""
        held = self.consumers.get(source_uuid)
        if held is None:
            return False
        if target_uuid in self.consumers:
            if not replace:
                raise ConsumerConflict(consumer=target_uuid)
            self.release(target_uuid)
        del self.consumers[source_uuid]
        self.consumers[target_uuid] = _renamed(held, target_uuid)
        return True

    # --- what tests provoke ---------------------------------------------------------

    def place(self, consumer_uuid: str, name: str, amounts: Mapping[str, int]) -> None:
        """An instance already running on host ``name`` (a resize's subject).

        Held like a claim, but not one of the ``claims`` a test counts.
        """
        rp = uuid_of(name)
        self.consumers[consumer_uuid] = Consumer(uuid=consumer_uuid,
                                                 allocations={rp: dict(amounts)},
                                                 project_id="p", user_id="u", host=name)
        self._add_usage(rp, amounts, +1)

    def use(self, name: str, amounts: Mapping[str, int], fed: bool = True) -> None:
        """Another worker's claim on host ``name``.

        Fed as a usage change; with ``fed=False`` the feed never shows it, as
        if the view had not caught up yet.
        """
        self._add_usage(uuid_of(name), amounts, +1, fed)

    def put_provider(self, h: Host) -> None:
        """A host's providers created or replaced (fed as provider changes)."""
        for p in h.providers:
            old = self.providers.get(p.uuid)
            provider = replace(p, generation=old.generation + 1 if old else 1)
            self.providers[provider.uuid] = provider
            self._append("provider", provider)
        if h.service is not None:
            self.put_service(h.service)

    def put_service(self, service: Service) -> None:
        self.services[service.host] = service
        self._append("service", service)

    def put_aggregate(self, aggregate: Aggregate) -> None:
        self.aggregates[aggregate.uuid] = aggregate
        self._append("aggregate", aggregate)

    def heartbeat(self, name: str, now: float) -> None:
        """A heartbeat: not fed, only seen through ``heartbeats`` and ``list_services``."""
        self.services[name] = replace(self.services[name], last_seen=now)

    def truncate(self) -> None:
        """Drop every feed entry so far, as a capped stream would."""
        self.oldest = len(self.feed)

    # --- internals ------------------------------------------------------------------

    def _add_usage(self, rp: str, amounts: Mapping[str, int], sign: int,
                   fed: bool = True) -> None:
        p = self.providers[rp]
        usages = dict(p.usages)
        for rc, amount in amounts.items():
            usages[rc] = usages.get(rc, 0) + sign * amount
        p = replace(p, usages=usages, generation=p.generation + 1,
                    consumers=p.consumers + sign)
        self.providers[rp] = p
        if fed:
            self._append("usage", {"uuid": rp, "generation": p.generation, "usages": usages,
                                   "consumers": p.consumers})

    def _append(self, kind: str, data: object) -> None:
        self.feed.append(Change(cursor=self._cursor(len(self.feed) + 1), kind=kind, data=data))

    @staticmethod
    def _cursor(n: int) -> str:
        return f"0-{n}"


class Recorded:
    """Stands in for an RPC client: records every method called on it.

    ``answers`` maps a method name to what it returns (a callable is called
    with the arguments, and may raise).
    """

    def __init__(self, **answers: object) -> None:
        self.calls: list[tuple[str, tuple[object, ...], dict[str, object]]] = []
        self._answers = answers

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)

        def method(*args: object, **kwargs: object) -> object:
            self.calls.append((name, args, kwargs))
            answer = self._answers.get(name)
            return answer(*args, **kwargs) if callable(answer) else answer

        return method

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def last(self, name: str) -> tuple[tuple[object, ...], dict[str, object]]:
        """The arguments of the last call of ``name``."""
        for called, args, kwargs in reversed(self.calls):
            if called == name:
                return args, kwargs
        raise AssertionError(f"{name} was not called; calls: {self.names}")


def _renamed(consumer: Consumer, uuid: str) -> Consumer:
    return replace(consumer, uuid=uuid, generation=1)
