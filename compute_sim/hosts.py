"""The hosts a compute process serves, as resource providers in the store.

Each host registers as a root resource provider with VCPU, MEMORY_MB and
DISK_GB inventory (:class:`HostShape`) and, if asked, traits, aggregates with
metadata, and GPU child providers with VGPU inventory and traits of their own
(:class:`Topology`); the hosts are spread over availability zones round robin,
one aggregate each. Provider and aggregate uuids are derived from names, so a
restarted process finds its providers again instead of registering duplicates.

Reporting is guarded by provider generations: a write that meets a stale
generation re-reads the provider and decides again from what it now holds
(:func:`report_provider`), never repeating the write blindly. The compute
owns the traits it reports; it keeps ``COMPUTE_STATUS_DISABLED`` (the store
writes it with the service record) and ``CUSTOM_*`` traits it does not
report (an operator's).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.exceptions import GenerationConflict, ProviderExists
from scheduler.log import get_logger
from scheduler.objects import DISK_GB, MEMORY_MB, VCPU
from scheduler.resource_request import COMPUTE_STATUS_DISABLED
from scheduler.store import Aggregate, Inventory, PlacementStore

LOG = get_logger(__name__)

#: Provider uuids are derived from host names, so a restarted simulator finds
#: its providers again instead of registering duplicates.
PROVIDER_NAMESPACE = uuidlib.UUID("5b1d7a40-2f5e-4c1e-9a57-6f0b6c2d9e11")


def provider_uuid(host: str) -> str:
    return str(uuidlib.uuid5(PROVIDER_NAMESPACE, host))


def aggregate_uuid(name: str) -> str:
    return str(uuidlib.uuid5(PROVIDER_NAMESPACE, f"aggregate:{name}"))


def gpu_name(host: str, n: int) -> str:
    """The name of a host's ``n``-th GPU child provider."""
    return f"{host}-gpu{n}"


@dataclass(frozen=True)
class AggregateSpec:
    """An aggregate every host of the simulator joins, with its metadata.

    Read from ``name`` or ``name:key=value,key=value`` (``--aggregate``).
    """

    name: str
    metadata: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> AggregateSpec:
        name, _, pairs = text.partition(":")
        metadata = {}
        for pair in filter(None, (p.strip() for p in pairs.split(","))):
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ValueError(f"aggregate metadata must be key=value, got {pair!r}")
            metadata[key.strip()] = value.strip()
        if not name.strip():
            raise ValueError(f"an aggregate needs a name: {text!r}")
        return cls(name.strip(), metadata)


@dataclass(frozen=True)
class Topology:
    """Traits, aggregates and child providers of the simulated hosts.

    ``traits`` go on the first ``traits_on`` hosts (None: all of them);
    ``vgpus_per_gpu`` > 0 gives each host ``gpus_per_host`` GPU child
    providers, each with that much VGPU inventory and ``gpu_traits``.
    """

    traits: tuple[str, ...] = ()
    traits_on: int | None = None
    aggregates: tuple[AggregateSpec, ...] = ()
    vgpus_per_gpu: int = 0
    gpus_per_host: int = 1
    gpu_traits: tuple[str, ...] = ("CUSTOM_VGPU",)

    def host_traits(self, position: int) -> frozenset[str]:
        on = self.traits_on is None or position < self.traits_on
        return frozenset(self.traits) if on else frozenset()

    def gpus(self) -> int:
        return self.gpus_per_host if self.vgpus_per_gpu > 0 else 0

    def providers_of(self, host: str) -> set[str]:
        """The providers of ``host``'s tree: its root and its GPU children."""
        return {provider_uuid(host)} | {
            provider_uuid(gpu_name(host, n)) for n in range(self.gpus())
        }


@dataclass(frozen=True)
class HostShape:
    """What each simulated host reports."""

    vcpus: int = 16
    memory_mb: int = 65536
    disk_gb: int = 1000
    cpu_allocation_ratio: float = 4.0
    ram_allocation_ratio: float = 1.0
    disk_allocation_ratio: float = 1.0
    reserved_host_memory_mb: int = 512
    reserved_host_disk_gb: int = 0
    reserved_host_cpus: int = 0

    def inventories(self) -> dict[str, Inventory]:
        return {
            VCPU: Inventory(
                total=self.vcpus,
                reserved=self.reserved_host_cpus,
                allocation_ratio=self.cpu_allocation_ratio,
            ),
            MEMORY_MB: Inventory(
                total=self.memory_mb,
                reserved=self.reserved_host_memory_mb,
                allocation_ratio=self.ram_allocation_ratio,
            ),
            DISK_GB: Inventory(
                total=self.disk_gb,
                reserved=self.reserved_host_disk_gb,
                allocation_ratio=self.disk_allocation_ratio,
            ),
        }


def register_providers(
    store: PlacementStore,
    hosts: Sequence[str],
    shape: HostShape,
    topology: Topology,
    availability_zones: Sequence[str],
) -> None:
    """Create (or find again) each host's providers; report inventory,
    traits, zone and aggregates."""
    zone_aggs = {}
    for zone in availability_zones:
        agg = Aggregate(uuid=aggregate_uuid(zone), name=zone, metadata={"availability_zone": zone})
        store.put_aggregate(agg)
        zone_aggs[zone] = agg.uuid
    shared = set()
    for spec in topology.aggregates:
        agg = Aggregate(uuid=aggregate_uuid(spec.name), name=spec.name, metadata=spec.metadata)
        store.put_aggregate(agg)
        shared.add(agg.uuid)
    inventories = shape.inventories()
    gpu_inventory = {"VGPU": Inventory(total=topology.vgpus_per_gpu)}
    for i, host in enumerate(hosts):
        uuid = provider_uuid(host)
        _create(store, uuid, host)
        aggregates = set(shared)
        if availability_zones:
            aggregates.add(zone_aggs[availability_zones[i % len(availability_zones)]])
        report_provider(store, uuid, inventories, aggregates, topology.host_traits(i))
        for n in range(topology.gpus()):
            name = gpu_name(host, n)
            _create(store, provider_uuid(name), name, parent_uuid=uuid)
            report_provider(
                store, provider_uuid(name), gpu_inventory, set(), frozenset(topology.gpu_traits)
            )


def _create(store: PlacementStore, uuid: str, name: str, parent_uuid: str | None = None) -> None:
    try:
        store.create_provider(uuid, name, parent_uuid)
    except ProviderExists:
        pass  # a restarted simulator finds its providers again


def traits_to_write(current: frozenset[str], reported: frozenset[str]) -> frozenset[str]:
    """The traits a provider should hold: what this host reports, plus the
    ones it does not own (the status trait, an operator's CUSTOM_* ones)."""
    kept = {
        t
        for t in current
        if t == COMPUTE_STATUS_DISABLED or (t.startswith("CUSTOM_") and t not in reported)
    }
    return frozenset(kept) | reported


def report_provider(
    store: PlacementStore,
    uuid: str,
    inventories: dict[str, Inventory],
    aggregates: set[str],
    traits: frozenset[str] = frozenset(),
    attempts: int = 5,
) -> None:
    """Write inventory, aggregates and traits, guarded by the provider generation.

    Each attempt reads the provider and writes only what differs from
    this host's report, each write on the generation the previous one
    returned. On a conflict (someone else wrote in between: an operator,
    the store disabling the service), re-read and decide again from what the
    store now holds; never a blind repeat.
    """
    for _ in range(attempts):
        provider = store.get_provider(uuid)
        generation = provider.generation
        try:
            if dict(provider.inventories) != inventories:
                generation = store.set_inventory(uuid, generation, inventories)
            if set(provider.aggregates) != aggregates:
                generation = store.set_aggregates(uuid, generation, aggregates)
            wanted = traits_to_write(provider.traits, traits)
            if provider.traits != wanted:
                store.set_traits(uuid, generation, wanted)
            return
        except GenerationConflict:
            LOG.info("provider_generation_conflict", provider=uuid)
    raise GenerationConflict(uuid=uuid, expected="?", actual="?")
