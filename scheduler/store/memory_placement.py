"""The in-process store's providers, aggregates and allocations (the
contract: :class:`scheduler.store.base.PlacementStore`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from scheduler import rules
from scheduler.exceptions import (
    CapacityExceeded,
    ConsumerConflict,
    ConsumerDeleted,
    GenerationConflict,
    InventoryInUse,
    NoSuchInventory,
    ProviderExists,
    ProviderNotFound,
    RecordChanged,
)
from scheduler.objects import DELETING, AllocationRequest
from scheduler.store.base import (
    Aggregate,
    Consumer,
    Eviction,
    GroupClaim,
    Inventory,
    Provider,
    RecordCheck,
    Victim,
    check_allocation_request,
    check_inventories,
    check_move,
    check_victims,
)
from scheduler.store.memory_base import MemoryBase


class MemoryPlacement(MemoryBase):
    """Providers and aggregates; claims, releases, moves and heals; consumers and groups."""

    # providers

    def create_provider(self, uuid: str, name: str, parent_uuid: str | None = None) -> Provider:
        with self._lock:
            if uuid in self._providers:
                raise ProviderExists(ident=uuid)
            if name in self._names:
                raise ProviderExists(ident=name)
            root = uuid
            if parent_uuid is not None:
                root = self._get(parent_uuid).root_uuid or parent_uuid
            provider = Provider(
                uuid=uuid,
                name=name,
                parent_uuid=parent_uuid,
                root_uuid=root,
                inventories=MappingProxyType({}),
                usages=MappingProxyType({}),
            )
            self._providers[uuid] = provider
            self._names[name] = uuid
            self._append("provider", provider)
            return provider

    def get_provider(self, uuid: str) -> Provider:
        with self._lock:
            return self._get(uuid)

    def get_provider_by_name(self, name: str) -> Provider:
        with self._lock:
            uuid = self._names.get(name)
            if uuid is None:
                raise ProviderNotFound(name)
            return self._providers[uuid]

    def list_providers(self) -> list[Provider]:
        with self._lock:
            return sorted(self._providers.values(), key=lambda p: p.uuid)

    def _at_generation(self, uuid: str, generation: int) -> Provider:
        provider = self._get(uuid)
        if provider.generation != generation:
            raise GenerationConflict(uuid=uuid, expected=generation, actual=provider.generation)
        return provider

    def set_inventory(
        self, uuid: str, generation: int, inventories: Mapping[str, Inventory]
    ) -> int:
        check_inventories(inventories)
        new = dict(inventories)
        with self._lock:
            provider = self._at_generation(uuid, generation)
            for rc in sorted(provider.usages):  # usages hold only positive amounts
                if rc not in new:
                    raise InventoryInUse(uuid=uuid, rc=rc, used=provider.usages[rc])
            return self._rewrite(provider, inventories=MappingProxyType(new))

    def set_traits(self, uuid: str, generation: int, traits: Iterable[str]) -> int:
        with self._lock:
            return self._rewrite(self._at_generation(uuid, generation), traits=frozenset(traits))

    def set_aggregates(self, uuid: str, generation: int, aggregates: Iterable[str]) -> int:
        with self._lock:
            return self._rewrite(
                self._at_generation(uuid, generation), aggregates=frozenset(aggregates)
            )

    def put_aggregate(self, aggregate: Aggregate) -> None:
        stored = replace(aggregate, metadata=MappingProxyType(dict(aggregate.metadata)))
        with self._lock:
            self._aggregates[aggregate.uuid] = stored
            self._append("aggregate", stored)

    def list_aggregates(self) -> list[Aggregate]:
        with self._lock:
            return sorted(self._aggregates.values(), key=lambda a: a.uuid)

    # allocations

    def claim(
        self, consumer_uuid: str, request: AllocationRequest, group: GroupClaim | None = None
    ) -> bool:
        return self._claim(consumer_uuid, request, group, (), 0)

    def claim_preempting(
        self,
        consumer_uuid: str,
        request: AllocationRequest,
        victims: Sequence[Victim],
        priority: int,
        group: GroupClaim | None = None,
        *,
        eviction: Eviction,
    ) -> bool:
        check_victims(consumer_uuid, victims, group)
        return self._claim(consumer_uuid, request, group, tuple(victims), priority, eviction)

    def _claim(
        self,
        consumer_uuid: str,
        request: AllocationRequest,
        group: GroupClaim | None,
        victims: tuple[Victim, ...],
        priority: int,
        eviction: Eviction | None = None,
    ) -> bool:
        check_allocation_request(request)
        allocations = {rp: dict(res) for rp, res in request.allocations.items()}
        with self._lock:
            if self._fenced(consumer_uuid) is not None:
                raise ConsumerDeleted(consumer=consumer_uuid)
            held = self._consumers.get(consumer_uuid)
            if held is not None:
                if held.allocations == allocations:
                    return False
                raise ConsumerConflict(consumer=consumer_uuid)
            if eviction is not None:
                why = eviction.unmatched(self._instances.get(consumer_uuid))
                if why is not None:
                    raise RecordChanged(uuid=consumer_uuid, why=why)
            leaving = [self._evictable(victim, priority) for victim in victims]
            touched = self._after_release(leaving)
            for rp in sorted(allocations):
                provider = self._get(rp)
                usages = touched[rp][0] if rp in touched else provider.usages
                for rc in sorted(allocations[rp]):
                    rules.check_allocation(
                        rp,
                        rc,
                        allocations[rp][rc],
                        provider.inventories.get(rc),
                        usages.get(rc, 0),
                    )
            if group is not None:
                self._check_group(group, leaving)
            for victim in leaving:
                del self._consumers[victim.uuid]
                if victim.group_uuid is not None and victim.host is not None:
                    self._leave_group(victim.group_uuid, victim.host)
            if group is not None:
                members = self._groups.setdefault(group.group_uuid, {})
                members[group.host] = members.get(group.host, 0) + 1
            for rp in allocations:
                usages, consumers = touched.get(
                    rp, (dict(self._providers[rp].usages), self._providers[rp].consumers)
                )
                for rc, amount in allocations[rp].items():
                    usages[rc] = usages.get(rc, 0) + amount
                touched[rp] = (usages, consumers + 1)
            for rp in sorted(touched):
                usages, consumers = touched[rp]
                self._set_usage(self._providers[rp], usages, consumers)
            self._hold(consumer_uuid, allocations, request, group)
            if eviction is not None:
                self._evict(consumer_uuid, victims, eviction)
            return True

    def _evict(self, preemptor: str, victims: Sequence[Victim], eviction: Eviction) -> None:
        """(Under the lock, the claim written.) The victims fenced and DELETING,
        the preemptor's record waiting on them (see :class:`Eviction`)."""
        for victim in victims:
            fields = eviction.victim_fields(preemptor, victim)
            fields["pending_hosts"] = tuple(fields["pending_hosts"])
            record = replace(self._instances[victim.uuid], **fields, state=DELETING)
            self._put_instance(record)
            self._deleted[victim.uuid] = (None, math.inf)
        fields = eviction.preemptor_fields(victims)
        fields["victims"] = tuple(fields["victims"])
        self._put_instance(replace(self._instances[preemptor], **fields))
        self._preemptions.appendleft(eviction.entry(preemptor, victims))

    def _evictable(self, victim: Victim, priority: int) -> Consumer:
        """(Under the lock.) What the victim holds; RecordChanged unless it
        is still as read and may be evicted by ``priority``."""
        held = self._consumers.get(victim.uuid)
        why = victim.unmatched(self._instances.get(victim.uuid), held, priority)
        if why is not None or held is None:
            raise RecordChanged(uuid=victim.uuid, why=why or "its allocation changed")
        return held

    def _after_release(self, leaving: list[Consumer]) -> dict[str, tuple[dict[str, int], int]]:
        """The usages and consumer counts of the providers ``leaving`` hold
        allocations on, as they are once those are released (nothing written)."""
        touched: dict[str, tuple[dict[str, int], int]] = {}
        for consumer in leaving:
            for rp, amounts in consumer.allocations.items():
                provider = self._providers[rp]
                usages, consumers = touched.get(rp, (dict(provider.usages), provider.consumers))
                for rc, amount in amounts.items():
                    left = usages.get(rc, 0) - amount
                    if left > 0:
                        usages[rc] = left
                    else:
                        usages.pop(rc, None)
                touched[rp] = (usages, max(consumers - 1, 0))
        return touched

    def _hold(
        self,
        consumer_uuid: str,
        allocations: dict[str, dict[str, int]],
        request: AllocationRequest,
        group: GroupClaim | None,
    ) -> None:
        """Record what a consumer now holds (its usage is written by the caller)."""
        self._consumers[consumer_uuid] = Consumer(
            uuid=consumer_uuid,
            allocations=MappingProxyType(
                {rp: MappingProxyType(res) for rp, res in allocations.items()}
            ),
            project_id=request.project_id,
            user_id=request.user_id,
            group_uuid=group.group_uuid if group else None,
            host=group.host if group else None,
        )

    def _check_group(self, group: GroupClaim, leaving: Sequence[Consumer] = ()) -> None:
        """The strict policies, counting the members as they are once the
        ``leaving`` consumers are gone (a preempting claim's victims)."""
        members = dict(self._groups.get(group.group_uuid, {}))
        for consumer in leaving:
            host = consumer.member_host(group.group_uuid)
            if host is not None:
                left = members.pop(host, 0) - 1
                if left > 0:
                    members[host] = left
        own = self._consumers.get(group.own_consumer) if group.own_consumer else None
        rules.check_group(
            group.group_uuid,
            group.policy,
            group.host,
            members,
            group.max_server_per_host,
            own.member_host(group.group_uuid) if own is not None else None,
        )

    def _leave_group(self, group_uuid: str, host: str) -> None:
        members = self._groups.get(group_uuid, {})
        left = members.pop(host, 0) - 1
        if left > 0:
            members[host] = left
        if not members:
            self._groups.pop(group_uuid, None)

    def _set_usage(self, provider: Provider, usages: dict[str, int], consumers: int) -> None:
        provider = replace(
            provider,
            generation=provider.generation + 1,
            usages=MappingProxyType(usages),
            consumers=consumers,
        )
        self._providers[provider.uuid] = provider
        self._append(
            "usage",
            {
                "uuid": provider.uuid,
                "generation": provider.generation,
                "usages": dict(usages),
                "consumers": consumers,
            },
        )

    def release(self, consumer_uuid: str, check: RecordCheck | None = None) -> bool:
        with self._lock:
            self._check_record(check)
            consumer = self._consumers.pop(consumer_uuid, None)
            if consumer is None:
                return False
            for rp, (usages, consumers) in sorted(self._after_release([consumer]).items()):
                self._set_usage(self._providers[rp], usages, consumers)
            if consumer.group_uuid is not None and consumer.host is not None:
                self._leave_group(consumer.group_uuid, consumer.host)
            return True

    def move_allocations(
        self,
        source_uuid: str,
        target_uuid: str,
        replace: bool = False,
        check: RecordCheck | None = None,
    ) -> bool:
        check_move(source_uuid, target_uuid)
        with self._lock:
            self._check_record(check)
            source = self._consumers.get(source_uuid)
            if source is None:
                return False
            target = self._consumers.get(target_uuid)
            if target is not None and not replace:
                raise ConsumerConflict(consumer=target_uuid)
            touched = {
                rp: (dict(self._providers[rp].usages), self._providers[rp].consumers)
                for rp in (*source.allocations, *(target.allocations if target else ()))
            }
            if target is not None:
                touched.update(self._after_release([target]))
                if target.group_uuid is not None and target.host is not None:
                    self._leave_group(target.group_uuid, target.host)
            for rp in sorted(touched):
                usages, consumers = touched[rp]
                self._set_usage(self._providers[rp], usages, consumers)
            del self._consumers[source_uuid]
            self._consumers[target_uuid] = dataclasses.replace(
                source, uuid=target_uuid, generation=1
            )
            return True

    def get_consumer(self, consumer_uuid: str) -> Consumer | None:
        with self._lock:
            return self._consumers.get(consumer_uuid)

    def list_consumers(self) -> list[Consumer]:
        with self._lock:
            return sorted(self._consumers.values(), key=lambda c: c.uuid)

    def group_hosts(self, group_uuid: str) -> dict[str, int]:
        with self._lock:
            return dict(self._groups.get(group_uuid, {}))

    def consumers_on(self, provider_uuids: Collection[str], batch: int = 500) -> list[Consumer]:
        wanted = frozenset(provider_uuids)
        with self._lock:
            return [c for c in self._consumers.values() if not wanted.isdisjoint(c.allocations)]

    def scan_consumers(self, batch: int = 500) -> Iterator[Consumer]:
        with self._lock:  # immutable records: a copy of the references
            consumers = list(self._consumers.values())
        yield from consumers

    def heal_allocation(
        self,
        consumer_uuid: str,
        request: AllocationRequest,
        group: GroupClaim | None = None,
        overcommit: bool = True,
    ) -> bool:
        check_allocation_request(request)
        allocations = {rp: dict(res) for rp, res in request.allocations.items()}
        with self._lock:
            if self._fenced(consumer_uuid) is not None:
                raise ConsumerDeleted(consumer=consumer_uuid)
            if consumer_uuid in self._consumers:
                raise ConsumerConflict(consumer=consumer_uuid)
            over = False
            for rp in sorted(allocations):
                provider = self._get(rp)
                for rc in sorted(allocations[rp]):
                    inventory = provider.inventories.get(rc)
                    if inventory is None:
                        raise NoSuchInventory(uuid=rp, rc=rc)
                    amount = allocations[rp][rc]
                    left = rules.free(inventory, provider.usages.get(rc, 0))
                    if amount > left:
                        if not overcommit:
                            raise CapacityExceeded(uuid=rp, rc=rc, requested=amount, free=left)
                        over = True
            for rp in sorted(allocations):
                provider = self._providers[rp]
                usages = dict(provider.usages)
                for rc, amount in allocations[rp].items():
                    usages[rc] = usages.get(rc, 0) + amount
                self._set_usage(provider, usages, provider.consumers + 1)
            if group is not None:
                members = self._groups.setdefault(group.group_uuid, {})
                members[group.host] = members.get(group.host, 0) + 1
            self._hold(consumer_uuid, allocations, request, group)
            return over
