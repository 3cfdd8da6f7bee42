"""The store in process memory: plain dicts behind one lock.

It keeps the same contract as the Redis store (one suite tests both), for the
all-in-one demo and fast unit tests. Every public method holds one
:class:`threading.RLock` for its whole run, which makes each write as atomic
as a Lua script is on Redis. Records handed out are immutable: a write
replaces a provider rather than changing it, and mappings are read-only views.

The change feed is a list whose cursors compare like Redis stream ids
(``"<n>-0"``, n counting every change ever fed), so the change after a
cursor is found by arithmetic, not by a scan: reading it costs what it
returns, however long the feed. Past ``stream_maxlen`` it is trimmed back
in one step once it holds twice as many (like Redis's approximate trim),
and it raises :class:`StreamTruncated` by the same rule as the Redis store. Lists come back
in the Redis store's order (by uuid; services by host).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from scheduler import rules
from scheduler.exceptions import (
    CapacityExceeded,
    ConsumerConflict,
    ConsumerDeleted,
    GenerationConflict,
    InstanceNotFound,
    InventoryInUse,
    NoSuchInventory,
    NotFound,
    ProviderExists,
    ProviderNotFound,
    RecordChanged,
    StreamTruncated,
)
from scheduler.objects import DELETED, DELETING, AllocationRequest, InstanceRecord
from scheduler.resource_request import COMPUTE_STATUS_DISABLED
from scheduler.store.base import (
    Aggregate,
    Change,
    Consumer,
    GroupClaim,
    InstanceReport,
    Inventory,
    Provider,
    RecordCheck,
    Service,
    ServiceReport,
    Store,
    check_allocation_request,
    check_instance_changes,
    check_inventories,
    check_move,
    check_reports,
    cursor_key,
    freeze_json,
)
from scheduler.store.columns import CompactSnapshot, HostColumnsBuilder, ServiceColumnsBuilder


class MemoryStore(Store):
    """The store contract in one process; ``stream_maxlen`` bounds the change feed.

    ``clock`` tells when a DELETED record's retention has passed (as Redis's
    key expiry does for the Redis store): such a record is gone when next
    looked at.
    """

    def __init__(
        self, stream_maxlen: int = 100000, clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        # Delete fences: uuid -> (the DELETED record, or None while DELETING;
        # when it expires).
        self._deleted: dict[str, tuple[InstanceRecord | None, float]] = {}
        self._lock = threading.RLock()
        self._providers: dict[str, Provider] = {}
        self._names: dict[str, str] = {}
        self._aggregates: dict[str, Aggregate] = {}
        self._consumers: dict[str, Consumer] = {}
        self._groups: dict[str, dict[str, int]] = {}
        self._services: dict[str, Service] = {}  # last_seen lives in _heartbeats
        self._heartbeats: dict[str, float] = {}
        self._reports: dict[str, InstanceReport] = {}
        self._instances: dict[str, InstanceRecord] = {}
        # The deadline index: (deadline, uuid) of every live record that has a
        # deadline, sorted (as Redis's sorted set orders them), and each one's key.
        self._due: list[tuple[float, str]] = []
        self._due_key: dict[str, tuple[float, str]] = {}
        self._feed: list[Change] = []  # the last changes fed, oldest first
        self._maxlen = stream_maxlen
        self._fed = 0  # changes ever fed: the last cursor is f"{_fed}-0"

    def _append(self, kind: str, data: Any) -> None:
        self._fed += 1
        self._feed.append(Change(cursor=f"{self._fed}-0", kind=kind, data=data))
        if len(self._feed) >= 2 * self._maxlen:  # amortised: one trim per maxlen appends
            del self._feed[: len(self._feed) - self._maxlen]

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

    def _get(self, uuid: str) -> Provider:
        provider = self._providers.get(uuid)
        if provider is None:
            raise ProviderNotFound(uuid)
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

    def _rewrite(self, provider: Provider, **changes: Any) -> int:
        provider = replace(provider, generation=provider.generation + 1, **changes)
        self._providers[provider.uuid] = provider
        self._append("provider", provider)
        return provider.generation

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
            for rp in sorted(allocations):
                provider = self._get(rp)
                for rc in sorted(allocations[rp]):
                    rules.check_allocation(
                        rp,
                        rc,
                        allocations[rp][rc],
                        provider.inventories.get(rc),
                        provider.usages.get(rc, 0),
                    )
            if group is not None:
                self._join_group(group)
            for rp in sorted(allocations):
                provider = self._providers[rp]
                usages = dict(provider.usages)
                for rc, amount in allocations[rp].items():
                    usages[rc] = usages.get(rc, 0) + amount
                self._set_usage(provider, usages, provider.consumers + 1)
            self._hold(consumer_uuid, allocations, request, group)
            return True

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

    def _join_group(self, group: GroupClaim) -> None:
        """Check the strict policies, then count the new member."""
        members = self._groups.get(group.group_uuid, {})
        own = self._consumers.get(group.own_consumer) if group.own_consumer else None
        rules.check_group(
            group.group_uuid,
            group.policy,
            group.host,
            members,
            group.max_server_per_host,
            own.member_host(group.group_uuid) if own is not None else None,
        )
        members[group.host] = members.get(group.host, 0) + 1
        self._groups[group.group_uuid] = members

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
            for rp in sorted(consumer.allocations):
                provider = self._providers[rp]
                usages = dict(provider.usages)
                for rc, amount in consumer.allocations[rp].items():
                    left = usages.get(rc, 0) - amount
                    if left > 0:
                        usages[rc] = left
                    else:
                        usages.pop(rc, None)
                self._set_usage(provider, usages, max(provider.consumers - 1, 0))
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
                for rp, amounts in target.allocations.items():
                    usages, consumers = touched[rp]
                    for rc, amount in amounts.items():
                        left = usages.get(rc, 0) - amount
                        if left > 0:
                            usages[rc] = left
                        else:
                            usages.pop(rc, None)
                    touched[rp] = (usages, max(consumers - 1, 0))
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

    # change feed

    def compact_snapshot(self, batch: int = 1000) -> CompactSnapshot:
        # One instant (under the lock): the contract allows that too.
        with self._lock:
            hosts, services = HostColumnsBuilder(), ServiceColumnsBuilder()
            children = []
            for provider in self._providers.values():
                if provider.parent_uuid is None:
                    hosts.add_provider(provider)
                else:
                    children.append(provider)
            children.sort(key=lambda p: p.uuid)
            for service in self._services.values():
                services.add_service(service, last_seen=self._heartbeats.get(service.host, 0.0))
            return CompactSnapshot(
                cursor=f"{self._fed}-0",
                hosts=hosts.build(),
                children=children,
                aggregates=self.list_aggregates(),
                services=services.build(),
            )

    def changes(self, cursor: str, limit: int = 1000) -> list[Change]:
        after = cursor_key(cursor)
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        with self._lock:
            last = (self._fed, 0)
            dropped = self._fed - len(self._feed)
            first = cursor_key(self._feed[0].cursor) if self._feed else last
            if after > last or (dropped > 0 and after < first):
                raise StreamTruncated(cursor=cursor)
            # change n sits at index n - dropped - 1; the first after "<n>-<s>" is n + 1
            start = max(after[0] - dropped, 0)
            return self._feed[start : start + limit]

    # services

    def _service(self, host: str) -> Service:
        return replace(self._services[host], last_seen=self._heartbeats.get(host, 0.0))

    def register_services(self, services: Iterable[Service]) -> None:
        with self._lock:
            for service in services:
                known = self._services.get(service.host)
                if known is None:
                    known = Service(host=service.host, rpc_server=service.rpc_server)
                elif known.rpc_server != service.rpc_server:
                    known = replace(known, rpc_server=service.rpc_server)
                else:
                    continue
                self._services[service.host] = known
                self._append("service", self._service(service.host))

    def report_services(self, reports: Iterable[ServiceReport]) -> None:
        checked = check_reports(reports)
        frozen: dict[int, Any] = {}  # hosts reporting one object share its frozen copy
        with self._lock:
            for report in checked:
                self._known_service(report.host)
            for report in checked:
                changes: dict[str, Any] = {}
                if report.capabilities is not None:
                    key = id(report.capabilities)
                    if key not in frozen:
                        frozen[key] = freeze_json(report.capabilities)
                    changes["capabilities"] = frozen[key]
                if report.stats is not None:
                    changes["stats"] = MappingProxyType(dict(report.stats))
                self._change_service(self._services[report.host], **changes)

    def heartbeat(self, hosts: Iterable[str], now: float) -> None:
        with self._lock:
            self._heartbeats.update(dict.fromkeys(hosts, now))

    def heartbeats(self, hosts: Sequence[str] | None = None) -> dict[str, float]:
        with self._lock:
            if hosts is None:
                return dict(self._heartbeats)
            return {h: self._heartbeats[h] for h in hosts if h in self._heartbeats}

    def list_services(self) -> list[Service]:
        with self._lock:
            return [self._service(host) for host in sorted(self._services)]

    def get_service(self, host: str) -> Service | None:
        with self._lock:
            return self._service(host) if host in self._services else None

    def _known_service(self, host: str) -> Service:
        known = self._services.get(host)
        if known is None:
            raise NotFound(kind="service", ident=host)
        return known

    def _change_service(self, known: Service, **changes: Any) -> None:
        """Write (and feed) the service only if something changed."""
        changed = replace(known, **changes)
        if changed != known:
            self._services[known.host] = changed
            self._append("service", self._service(known.host))

    def set_service_disabled(self, host: str, disabled: bool, reason: str | None = None) -> None:
        with self._lock:
            self._change_service(
                self._known_service(host), disabled=disabled, disabled_reason=reason
            )
            # The same step keeps the root provider's status trait in line.
            uuid = self._names.get(host)
            provider = self._providers.get(uuid) if uuid else None
            if (
                provider is not None
                and provider.parent_uuid is None
                and (COMPUTE_STATUS_DISABLED in provider.traits) != disabled
            ):
                traits = provider.traits ^ {COMPUTE_STATUS_DISABLED}
                self._rewrite(provider, traits=frozenset(traits))

    def record_build_result(self, host: str, success: bool) -> None:
        with self._lock:
            known = self._known_service(host)
            self._change_service(known, failed_builds=0 if success else known.failed_builds + 1)

    def report_instances(self, reports: Iterable[InstanceReport]) -> None:
        with self._lock:
            self._reports.update((r.host, r) for r in reports)

    def instance_reports(self, batch: int = 500) -> Iterator[InstanceReport]:
        with self._lock:
            reports = [self._reports[host] for host in sorted(self._reports)]
        yield from reports

    def mark_down(self, hosts: Iterable[str]) -> None:
        with self._lock:
            for host in dict.fromkeys(hosts):
                if host in self._services:
                    self._heartbeats.pop(host, None)
                    self._append("service", self._service(host))

    # instance records

    def create_instances(self, records: Iterable[InstanceRecord]) -> None:
        with self._lock:
            for record in records:
                if record.uuid not in self._instances:
                    self._put_instance(record)

    def _put_instance(self, record: InstanceRecord) -> None:
        """Write a live record and keep its entry in the deadline index."""
        self._instances[record.uuid] = record
        self._index(record.uuid, record.deadline)

    def _index(self, uuid: str, deadline: float | None) -> None:
        old = self._due_key.get(uuid)
        if old is not None and (deadline is None or old[0] != deadline):
            del self._due[bisect.bisect_left(self._due, old)]
            del self._due_key[uuid]
        if deadline is not None and uuid not in self._due_key:
            key = (deadline, uuid)
            bisect.insort(self._due, key)
            self._due_key[uuid] = key

    def _fenced(self, uuid: str) -> tuple[InstanceRecord | None, float] | None:
        """The instance's delete fence, if it has one that has not expired."""
        fence = self._deleted.get(uuid)
        if fence is not None and fence[1] <= self._clock():
            del self._deleted[uuid]
            return None
        return fence

    def _tomb(self, uuid: str) -> InstanceRecord | None:
        """The DELETED record, within its retention."""
        fence = self._fenced(uuid)
        return None if fence is None else fence[0]

    def get_instance(self, uuid: str) -> InstanceRecord:
        with self._lock:
            record = self._instances.get(uuid) or self._tomb(uuid)
            if record is None:
                raise InstanceNotFound(uuid)
            return record

    def _check_record(self, check: RecordCheck | None) -> None:
        """(Under the lock.) Raise RecordChanged unless ``check`` passes."""
        if check is None:
            return
        record = self._instances.get(check.uuid) or self._tomb(check.uuid)
        why = check.unmatched(record)
        if why is not None:
            raise RecordChanged(uuid=check.uuid, why=why)

    def update_instance(
        self,
        uuid: str,
        expected_states: Iterable[str] | None = None,
        expect: Mapping[str, str | None] | None = None,
        **changes: Any,
    ) -> InstanceRecord | None:
        check_instance_changes(changes)
        with self._lock:
            record = self.get_instance(uuid)
            if record.state == DELETED:
                return None
            if expected_states is not None and record.state not in set(expected_states):
                return None
            if expect and any(getattr(record, f) != v for f, v in expect.items()):
                return None
            record = replace(record, **changes)
            self._put_instance(record)
            return record

    def start_delete(self, uuid: str, **changes: Any) -> tuple[InstanceRecord, bool]:
        check_instance_changes(changes)
        with self._lock:
            record = self.get_instance(uuid)
            if record.state in (DELETING, DELETED):
                return record, False
            record = replace(record, **changes, state=DELETING)
            self._put_instance(record)
            self._deleted[uuid] = (None, math.inf)
            return record, True

    def finish_delete(
        self, uuid: str, host: str | None, retention: float, now: float, force: bool = False
    ) -> InstanceRecord | None:
        with self._lock:
            record = self.get_instance(uuid)
            if record.state == DELETED:
                return record
            if record.state != DELETING:
                return None
            pending = tuple(h for h in record.pending_hosts if h != (host or ""))
            if pending and not force:
                record = replace(record, pending_hosts=pending)
                self._put_instance(record)
                return record
            self.release(uuid)
            if record.migration_uuid:
                self.release(record.migration_uuid)
            record = replace(
                record,
                state=DELETED,
                task_state=None,
                deadline=None,
                pending_hosts=(),
                updated_at=now,
            )
            del self._instances[uuid]
            self._index(uuid, None)
            # Redis keeps at least a millisecond too.
            self._deleted[uuid] = (record, self._clock() + max(retention, 0.001))
            return record

    def list_instances(self, uuids: Iterable[str] | None = None) -> list[InstanceRecord]:
        with self._lock:
            if uuids is None:
                return sorted(self._instances.values(), key=lambda r: r.uuid)
            found = ((u, self._instances.get(u) or self._tomb(u)) for u in uuids)
            return [r for _, r in found if r is not None]

    def scan_instances(self, batch: int = 500) -> Iterator[InstanceRecord]:
        with self._lock:  # the records are in memory already: a copy of the references
            records = list(self._instances.values())
        yield from records

    def list_instances_due(self, now: float, limit: int = 1000) -> list[InstanceRecord]:
        with self._lock:  # from the index: what is due, and nothing else
            due = itertools.takewhile(lambda key: key[0] <= now, self._due)
            return [self._instances[uuid] for _, uuid in itertools.islice(due, max(limit, 0))]

    # housekeeping

    def ping(self) -> bool:
        return True

    def wipe(self) -> None:
        with self._lock:
            for table in (
                self._providers,
                self._names,
                self._aggregates,
                self._consumers,
                self._groups,
                self._services,
                self._heartbeats,
                self._reports,
                self._instances,
                self._due_key,
                self._deleted,
            ):
                table.clear()
            self._due.clear()
            # The feed keeps its cursor numbering: a view holding an old cursor
            # must see the wipe as a truncation, not as an empty stream.
            self._feed.clear()
