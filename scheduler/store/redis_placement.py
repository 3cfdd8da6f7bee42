"""The Redis store's providers, aggregates and allocations (the contract:
:class:`scheduler.store.base.PlacementStore`); each write is one script."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from scheduler.exceptions import ProviderNotFound
from scheduler.objects import AllocationRequest
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
from scheduler.store.records import PREEMPTIONS_KEPT
from scheduler.store.redis_base import RedisBase
from scheduler.store.redis_codec import each, parse, read_aggregate, read_consumer, read_provider
from scheduler.store.redis_connect import translated


class RedisPlacement(RedisBase):
    """Providers and aggregates; claims, releases, moves and heals; consumers and groups."""

    # providers

    @translated
    def create_provider(self, uuid: str, name: str, parent_uuid: str | None = None) -> Provider:
        raw = self._write(
            self._scripts.create_provider,
            keys=(self.keys.changes, self.keys.providers, self.keys.provider_names),
            args=(self._maxlen, uuid, name, parent_uuid or ""),
        )
        return parse(read_provider, raw, f"{self.keys.providers}[{uuid}]")

    @translated
    def get_provider(self, uuid: str) -> Provider:
        raw = self._client.hget(self.keys.providers, uuid)
        if raw is None:
            raise ProviderNotFound(uuid)
        return parse(read_provider, raw, f"{self.keys.providers}[{uuid}]")

    @translated
    def get_provider_by_name(self, name: str) -> Provider:
        raw = self._scripts.provider_by_name(
            keys=(self.keys.providers, self.keys.provider_names), args=(name,)
        )
        if raw is None:
            raise ProviderNotFound(name)
        return parse(read_provider, raw, f"{self.keys.provider_names}[{name}]")

    @translated
    def list_providers(self) -> list[Provider]:
        pairs = self._scan(self.keys.providers)
        return sorted(each(read_provider, pairs, self.keys.providers), key=lambda p: p.uuid)

    def set_inventory(
        self, uuid: str, generation: int, inventories: Mapping[str, Inventory]
    ) -> int:
        check_inventories(inventories)
        value = {rc: asdict(inv) for rc, inv in inventories.items()}
        return self._update_provider(uuid, generation, "inventories", value)

    def set_traits(self, uuid: str, generation: int, traits: Iterable[str]) -> int:
        return self._update_provider(uuid, generation, "traits", sorted(set(traits)))

    def set_aggregates(self, uuid: str, generation: int, aggregates: Iterable[str]) -> int:
        return self._update_provider(uuid, generation, "aggregates", sorted(set(aggregates)))

    @translated
    def _update_provider(self, uuid: str, generation: int, field: str, value: Any) -> int:
        return int(
            self._write(
                self._scripts.update_provider,
                keys=(self.keys.changes, self.keys.providers),
                args=(self._maxlen, uuid, generation, field, json.dumps(value)),
            )
        )

    @translated
    def put_aggregate(self, aggregate: Aggregate) -> None:
        data = {
            "uuid": aggregate.uuid,
            "name": aggregate.name,
            "metadata": dict(aggregate.metadata),
        }
        self._write(
            self._scripts.put_aggregate,
            keys=(self.keys.changes, self.keys.aggregates),
            args=(self._maxlen, aggregate.uuid, json.dumps(data)),
        )

    @translated
    def list_aggregates(self) -> list[Aggregate]:
        pairs = self._scan(self.keys.aggregates)
        return sorted(each(read_aggregate, pairs, self.keys.aggregates), key=lambda a: a.uuid)

    # allocations

    @translated
    def claim(
        self, consumer_uuid: str, request: AllocationRequest, group: GroupClaim | None = None
    ) -> bool:
        keys, args = self._allocation_call(consumer_uuid, request, group)
        return bool(self._write(self._scripts.claim, keys=keys, args=args))

    def _allocation_call(
        self, consumer_uuid: str, request: AllocationRequest, group: GroupClaim | None
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        """The KEYS and ARGV of a script that writes a consumer's allocations
        (``claim``, ``heal_allocation``: see lua/claim.lua and lua/heal_allocation.lua)."""
        check_allocation_request(request)
        allocations = json.dumps({rp: dict(res) for rp, res in request.allocations.items()})
        group_args = (
            ("", "", "", 0, "")
            if group is None
            else (
                group.group_uuid,
                group.policy,
                group.host,
                group.max_server_per_host,
                group.own_consumer or "",
            )
        )
        keys = (*self._alloc_keys, self.keys.deleted_record(consumer_uuid))
        args = (
            self._maxlen,
            consumer_uuid,
            allocations,
            request.project_id,
            request.user_id,
            *group_args,
        )
        return keys, args

    @translated
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
        keys, args = self._allocation_call(consumer_uuid, request, group)
        victims_json = json.dumps([v.to_primitive() for v in victims])
        fields = json.dumps(
            {
                "preemptor": eviction.preemptor_fields(victims),
                "victims": [eviction.victim_fields(consumer_uuid, v) for v in victims],
            }
        )
        fences = tuple(self.keys.deleted_record(v.uuid) for v in victims)
        entry = json.dumps(eviction.entry(consumer_uuid, victims).to_primitive())
        return bool(
            self._write(
                self._scripts.claim,
                keys=(
                    *keys,
                    self.keys.instances,
                    self.keys.deadlines,
                    self.keys.preemptions,
                    *fences,
                ),
                args=(*args, victims_json, int(priority), fields, entry, PREEMPTIONS_KEPT),
            )
        )

    @translated
    def release(self, consumer_uuid: str, check: RecordCheck | None = None) -> bool:
        keys, checked = self._checked(check)
        return bool(
            self._write(
                self._scripts.release,
                keys=(*self._alloc_keys, *keys),
                args=(self._maxlen, consumer_uuid, *checked),
            )
        )

    @translated
    def move_allocations(
        self,
        source_uuid: str,
        target_uuid: str,
        replace: bool = False,
        check: RecordCheck | None = None,
    ) -> bool:
        check_move(source_uuid, target_uuid)
        keys, checked = self._checked(check)
        return bool(
            self._write(
                self._scripts.move_allocations,
                keys=(*self._alloc_keys, *keys),
                args=(self._maxlen, source_uuid, target_uuid, "1" if replace else "0", *checked),
            )
        )

    def _checked(self, check: RecordCheck | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The extra KEYS and ARGV of an allocation write's record check."""
        if check is None:
            return (), ()
        return (
            (self.keys.instances, self.keys.deleted_record(check.uuid)),
            (check.uuid, json.dumps(list(check.states)), json.dumps(dict(check.expect))),
        )

    @translated
    def heal_allocation(
        self,
        consumer_uuid: str,
        request: AllocationRequest,
        group: GroupClaim | None = None,
        overcommit: bool = True,
    ) -> bool:
        keys, args = self._allocation_call(consumer_uuid, request, group)
        args = (*args, "1" if overcommit else "0")
        return bool(self._write(self._scripts.heal_allocation, keys=keys, args=args))

    @translated
    def get_consumer(self, consumer_uuid: str) -> Consumer | None:
        raw = self._client.hget(self.keys.consumers, consumer_uuid)
        if raw is None:
            return None
        return parse(read_consumer, raw, f"{self.keys.consumers}[{consumer_uuid}]")

    @translated
    def list_consumers(self) -> list[Consumer]:
        pairs = self._scan(self.keys.consumers)
        return sorted(each(read_consumer, pairs, self.keys.consumers), key=lambda c: c.uuid)

    @translated
    def group_hosts(self, group_uuid: str) -> dict[str, int]:
        raw = self._client.hget(self.keys.groups, group_uuid)
        if raw is None:
            return {}
        return parse(
            lambda d: {host: int(n) for host, n in d.items()},
            raw,
            f"{self.keys.groups}[{group_uuid}]",
        )

    @translated
    def consumers_on(self, provider_uuids: Collection[str], batch: int = 500) -> list[Consumer]:
        wanted = frozenset(provider_uuids)
        if not wanted:
            return []
        found: list[Consumer] = []
        for page in self._pages(self.keys.consumers, batch):
            # Only an entry naming one of the providers is decoded.
            named = [(u, raw) for u, raw in page.items() if any(p in raw for p in wanted)]
            found += (
                c
                for c in each(read_consumer, named, self.keys.consumers)
                if not wanted.isdisjoint(c.allocations)
            )
        return found

    def scan_consumers(self, batch: int = 500) -> Iterator[Consumer]:
        yield from each(read_consumer, self._scan(self.keys.consumers, batch), self.keys.consumers)
