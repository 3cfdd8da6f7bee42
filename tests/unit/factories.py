"""The one factory for hosts, requests and a small store the engine tests run on.

``host("h1", ram=8192, used={"MEMORY_MB": 1024})`` makes a root provider and
its service record (``capabilities=`` / ``stats=``: what its compute
reports; ``traits=``, ``aggregates=``, and child providers made with
:func:`child`, e.g. a GPU pool); :class:`HookedStore` is the in-memory
store loaded with them, with hooks for what tests provoke (a claim conflict
on a host, a truncated feed, another worker's writes, seen or not, an
instance already running) and records of what the engine asked. :class:`Recorded`
stands in for an RPC client (the conductor, compute and simulator tests
read what would have been sent).
"""

from __future__ import annotations

import contextlib
import uuid as uuidlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from oslo_config import cfg

from scheduler import conf as conf_mod
from scheduler.engine.context import PlacementContext
from scheduler.engine.hostview import HostView
from scheduler.engine.pipeline import Engine
from scheduler.engine.settings import EngineSettings
from scheduler.exceptions import CapacityExceeded, ProviderNotFound
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
    Store,
    cursor_key,
)
from scheduler.store.columns import CompactSnapshot, HostColumnsBuilder, ServiceColumnsBuilder
from scheduler.store.memory import MemoryStore

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


def child(
    name: str,
    *,
    inventory: Mapping[str, int] | None = None,
    used: Mapping[str, int] | None = None,
    traits: Iterable[str] = (),
    aggregates: Iterable[str] = (),
    max_unit: Mapping[str, int] | None = None,
) -> Child:
    """A child provider (a GPU pool, a NUMA cell): ``inventory`` is totals per class."""
    max_unit = max_unit or {}
    return Child(
        name,
        {rc: Inventory(total=n, max_unit=max_unit.get(rc)) for rc, n in (inventory or {}).items()},
        dict(used or {}),
        frozenset(traits),
        frozenset(aggregates),
    )


def host(
    name: str,
    *,
    vcpus: int = 16,
    ram: int = 32768,
    disk: int = 1000,
    used: Mapping[str, int] | None = None,
    reserved: Mapping[str, int] | None = None,
    ratios: Mapping[str, float] | None = None,
    max_unit: Mapping[str, int] | None = None,
    min_unit: Mapping[str, int] | None = None,
    step: Mapping[str, int] | None = None,
    extra: Mapping[str, Inventory] | None = None,
    aggregates: Iterable[str] = (),
    traits: Iterable[str] = (),
    children: Iterable[Child] = (),
    up: bool = True,
    disabled: bool = False,
    failed_builds: int = 0,
    service: bool = True,
    capabilities: Mapping[str, Any] | None = None,
    stats: Mapping[str, int] | None = None,
    consumers: int = 0,
) -> Host:
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
        rc: Inventory(
            total=total,
            reserved=reserved.get(rc, 0),
            min_unit=min_unit.get(rc, 1),
            max_unit=max_unit.get(rc),
            step_size=step.get(rc, 1),
            allocation_ratio=ratios.get(rc, 1.0),
        )
        for rc, total in totals.items()
        if total
    }
    inventories.update(extra or {})
    traits = frozenset(traits) | ({COMPUTE_STATUS_DISABLED} if disabled else set())
    root = uuid_of(name)
    provider = Provider(
        uuid=root,
        name=name,
        generation=1,
        inventories=inventories,
        usages=dict(used or {}),
        aggregates=frozenset(aggregates),
        traits=traits,
        consumers=consumers,
    )
    kids = tuple(
        Provider(
            uuid=uuid_of(c.name),
            name=c.name,
            generation=1,
            parent_uuid=root,
            root_uuid=root,
            inventories=dict(c.inventories),
            usages=dict(c.used),
            traits=c.traits,
            aggregates=c.aggregates,
        )
        for c in children
    )
    record = (
        Service(
            host=name,
            rpc_server="compute-sim",
            last_seen=NOW - 1 if up else NOW - 3600,
            disabled=disabled,
            failed_builds=failed_builds,
            capabilities=dict(capabilities or {}),
            stats=dict(stats or {}),
        )
        if service
        else None
    )
    return Host(provider, record, kids)


def az(name: str, zone: str) -> Aggregate:
    """An aggregate naming an availability zone (its uuid derives from ``name``)."""
    return Aggregate(uuid=uuid_of(name), name=name, metadata={"availability_zone": zone})


def aggregate(name: str, **metadata: str) -> Aggregate:
    """An aggregate with this metadata (its uuid derives from ``name``)."""
    return Aggregate(uuid=uuid_of(name), name=name, metadata=metadata)


def spec(
    vcpus: int = 1,
    ram: int = 1024,
    disk: int = 10,
    extra_specs: Mapping[str, str] | None = None,
    image_properties: Mapping[str, str] | None = None,
    image_id: str | None = None,
    **fields: object,
) -> RequestSpec:
    """A request for one flavor; ``fields`` set any other RequestSpec field."""
    flavor = Flavor(
        name="test", vcpus=vcpus, memory_mb=ram, root_gb=disk, extra_specs=dict(extra_specs or {})
    )
    if image_properties is not None or image_id is not None:
        fields["image"] = Image(id=image_id, properties=image_properties or {})
    fields = {"project_id": "project", "user_id": "user", **fields}
    return RequestSpec(flavor=flavor, **fields)  # type: ignore[arg-type]


def group(policy: str, max_server_per_host: int = 1) -> ServerGroup:
    return ServerGroup(uuid=GROUP_UUID, policy=policy, max_server_per_host=max_server_per_host)


def context(
    request: RequestSpec | None = None, members: Mapping[str, int] | None = None, now: float = NOW
) -> PlacementContext:
    request = request or spec()
    return PlacementContext(spec=request, now=now, group_members=Counter(members or {}))


def settings(**overrides: object) -> EngineSettings:
    """EngineSettings; a name that is not one of its fields is a plugin option
    (``max_io_ops_per_host=1``), and ``weight_multipliers`` gives several at once."""
    fields = EngineSettings.__dataclass_fields__
    options = dict(overrides.pop("weight_multipliers", None) or {})  # type: ignore[call-overload]
    options.update({name: overrides.pop(name) for name in list(overrides) if name not in fields})
    return EngineSettings(**overrides, plugin_options=options)  # type: ignore[arg-type]


def view_of(*hosts: Host, aggregates: Iterable[Aggregate] = (), **overrides: object) -> HostView:
    """A host view loaded from these hosts."""
    view = HostView(HookedStore(hosts, aggregates), settings(**overrides))
    view.refresh(NOW)
    return view


def engine(store: Store, **overrides: object) -> Engine:
    return Engine(store, settings(**overrides), clock=lambda: NOW)  # type: ignore[arg-type]


def populate(
    store: Store, hosts: Iterable[Host], aggregates: Iterable[Aggregate] = (), now: float = NOW
) -> None:
    """Write hosts into a real store through its contract (usage comes from claims only)."""
    for agg in aggregates:
        store.put_aggregate(agg)
    hosts = list(hosts)
    for h in hosts:
        for p in h.providers:
            assert not p.usages, "a store's usage comes from claims"
            write_provider(store, p)
    for h in hosts:
        if h.service is not None:
            write_service(store, h.service)


def write_provider(store: Store, p: Provider) -> None:
    """Create ``p`` (or bring the one of its uuid in line with it): its
    inventories, traits and aggregates, each write at the generation read."""
    try:
        generation = store.get_provider(p.uuid).generation
    except ProviderNotFound:
        generation = store.create_provider(p.uuid, p.name, p.parent_uuid).generation
    generation = store.set_inventory(p.uuid, generation, p.inventories)
    held = store.get_provider(p.uuid)
    if held.aggregates != p.aggregates:
        generation = store.set_aggregates(p.uuid, generation, p.aggregates)
    own = p.traits - {COMPUTE_STATUS_DISABLED}  # the store sets that one
    if held.traits - {COMPUTE_STATUS_DISABLED} != own:
        store.set_traits(p.uuid, generation, own | (held.traits & {COMPUTE_STATUS_DISABLED}))


def write_service(store: Store, service: Service) -> None:
    """Bring the store's record of ``service`` in line with it, through the
    contract: registration, heartbeat, disabled state, failed builds, reports."""
    store.heartbeat([service.host], service.last_seen)  # first: the fed record carries it
    store.register_services([service])
    held = store.get_service(service.host)
    assert held is not None
    if (held.disabled, held.disabled_reason) != (service.disabled, service.disabled_reason):
        store.set_service_disabled(service.host, service.disabled, service.disabled_reason)
    failed = held.failed_builds
    if service.failed_builds < failed:
        store.record_build_result(service.host, success=True)
        failed = 0
    for _ in range(service.failed_builds - failed):
        store.record_build_result(service.host, success=False)
    if (held.capabilities, held.stats) != (service.capabilities, service.stats):
        store.report_services([ServiceReport(service.host, service.capabilities, service.stats)])


def _copied(value: object) -> object:
    """A copy of a store's container deep enough that its writes leave it
    alone (its records are immutable; a group's members are a dict)."""
    if isinstance(value, dict):
        return {k: dict(v) if isinstance(v, dict) else v for k, v in value.items()}
    if isinstance(value, list):
        return list(value)
    return value


class HookedStore(MemoryStore):
    """The in-memory store, loaded from :func:`host` records, with the hooks
    engine tests provoke and read.

    Every rule is :class:`MemoryStore`'s own (the contract suite tests it);
    what this adds is only what a test needs to set up or observe:

    * ``used`` and ``consumers`` of a :class:`Host` stand for instances the
      test does not model: they are written as the provider's usage (fed,
      like a claim), with no consumer record.
    * ``conflict_on`` names hosts whose next claim is refused with
      :class:`CapacityExceeded`, as if another worker filled them first.
    * ``claims`` records each claim made (consumer, host, group claim);
      ``heartbeats_asked`` the hosts of each ``heartbeats`` read.
    * :meth:`unfed` hides the changes written inside it from the feed, as if
      the view had not caught up yet; :meth:`truncate` drops the feed so far;
      :meth:`lost` takes the store back to where it was before the writes
      inside (a failover to a replica that never got them).
    * The compact snapshot lists hosts in the order they were written (the
      real stores sort them by uuid), so a test reads the view in its order.
    """

    def __init__(self, hosts: Iterable[Host] = (), aggregates: Iterable[Aggregate] = ()) -> None:
        super().__init__()
        self.conflict_on: set[str] = set()
        self.claims: list[tuple[str, str, GroupClaim | None]] = []
        self.heartbeats_asked: list[list[str] | None] = []
        self._hidden: list[range] = []  # feed numbers :meth:`unfed` hid
        self._others = 0  # claims made by :meth:`use`
        for agg in aggregates:
            self.put_aggregate(agg)
        for h in hosts:
            self.put_provider(h)

    # --- reads, through the contract ------------------------------------------------

    @property
    def providers(self) -> dict[str, Provider]:
        return {p.uuid: p for p in self.list_providers()}

    @property
    def services(self) -> dict[str, Service]:
        return {s.host: s for s in self.list_services()}

    @property
    def consumers(self) -> dict[str, Consumer]:
        return {c.uuid: c for c in self.list_consumers()}

    # --- the contract, with the hooks -----------------------------------------------

    def claim(
        self, consumer_uuid: str, request: AllocationRequest, group: GroupClaim | None = None
    ) -> bool:
        if self.get_consumer(consumer_uuid) is None:
            for rp in sorted(request.allocations):
                name = self.get_provider(rp).name
                if name in self.conflict_on:
                    self.conflict_on.discard(name)
                    raise CapacityExceeded(uuid=rp, rc=VCPU, requested=0, free=0)
        claimed = super().claim(consumer_uuid, request, group)
        if claimed:
            self.claims.append((consumer_uuid, self._host_of(request), group))
        return claimed

    def heartbeats(self, hosts: Sequence[str] | None = None) -> dict[str, float]:
        self.heartbeats_asked.append(None if hosts is None else list(hosts))
        return super().heartbeats(hosts)

    def changes(self, cursor: str, limit: int = 1000) -> list[Change]:
        return [
            c
            for c in super().changes(cursor, limit)
            if not any(cursor_key(c.cursor)[0] in hidden for hidden in self._hidden)
        ]

    def compact_snapshot(self, batch: int = 1000) -> CompactSnapshot:
        with self._lock:
            snap = super().compact_snapshot(batch)
            written = {uuid: n for n, uuid in enumerate(self._providers)}
            hosts, services = HostColumnsBuilder(), ServiceColumnsBuilder()
            for i in sorted(range(len(snap.hosts)), key=lambda i: written[snap.hosts.uuids[i]]):
                hosts.add_provider(snap.hosts.provider(i))
            order = {name: n for n, name in enumerate(self._services)}
            for i in sorted(
                range(len(snap.services)), key=lambda i: order[snap.services.hosts[i]]
            ):
                services.add_service(snap.services.service(i))
            return replace(
                snap, hosts=hosts.build(sort=False), services=services.build(sort=False)
            )

    # --- what tests provoke ---------------------------------------------------------

    def put_provider(self, h: Host) -> None:
        """A host's providers created or brought in line with ``h`` (fed as
        provider changes), their ``used`` written as usage, and its service."""
        for p in h.providers:
            write_provider(self, p)
            if p.usages or p.consumers:
                with self._lock:
                    self._set_usage(self._providers[p.uuid], dict(p.usages), p.consumers)
        if h.service is not None:
            self.put_service(h.service)

    def put_service(self, service: Service) -> None:
        """The service record brought in line with ``service`` (fed as it changes)."""
        write_service(self, service)

    def place(self, consumer_uuid: str, name: str, amounts: Mapping[str, int]) -> None:
        """An instance already running on host ``name`` (a resize's subject):
        claimed, but not one of the ``claims`` a test counts."""
        MemoryStore.claim(
            self, consumer_uuid, AllocationRequest({uuid_of(name): dict(amounts)}, "p", "u")
        )

    def use(self, name: str, amounts: Mapping[str, int], fed: bool = True) -> None:
        """Another worker's claim on provider ``name``; with ``fed=False`` the
        feed never shows it, as if the view had not caught up yet."""
        self._others += 1
        request = AllocationRequest({uuid_of(name): dict(amounts)}, "p", "u")
        if fed:
            MemoryStore.claim(self, uuid_of(f"another-worker-{self._others}"), request)
            return
        with self.unfed():
            MemoryStore.claim(self, uuid_of(f"another-worker-{self._others}"), request)

    @contextlib.contextmanager
    def unfed(self) -> Iterator[None]:
        """The changes written inside are never read from the feed."""
        start = self._fed + 1
        try:
            yield
        finally:
            self._hidden.append(range(start, self._fed + 1))

    @contextlib.contextmanager
    def lost(self) -> Iterator[None]:
        """The writes inside are lost, their feed entries with them: the store
        is as it was before (what the test observes, ``claims`` and the
        others, is kept)."""
        kept = {"_lock", "_clock", "claims", "heartbeats_asked", "conflict_on", "_hidden"}
        with self._lock:
            saved = {k: _copied(v) for k, v in vars(self).items() if k not in kept}
        try:
            yield
        finally:
            with self._lock:
                vars(self).update(saved)

    def truncate(self) -> None:
        """Drop every feed entry so far, as a capped stream would."""
        with self._lock:
            self._feed.clear()

    def _host_of(self, request: AllocationRequest) -> str:
        first = self.get_provider(next(iter(request.allocations)))
        return self.get_provider(first.root_uuid or first.uuid).name


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


def private_conf(config_files: Sequence[str] = ()) -> cfg.ConfigOpts:
    """A private ConfigOpts with our options, parsed from ``config_files`` (no RPC
    server is built from it, so oslo.messaging's global-only groups are not needed)."""
    c = cfg.ConfigOpts()
    conf_mod.register_opts(c)
    c([], project="scheduler", default_config_files=list(config_files))
    return c
