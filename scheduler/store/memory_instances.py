"""The in-process store's instance records, their delete fences, the
deadline index the conductor's sweep reads
(:class:`scheduler.store.base.InstanceStore`) and the index of the requests
waiting for capacity (:class:`scheduler.store.base.PendingIndex`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from scheduler.exceptions import InstanceNotFound
from scheduler.objects import BUILDING, DELETED, DELETING, InstanceRecord
from scheduler.store.base import (
    BUILT,
    NO_RECORD,
    NOT_BUILDING,
    STALE,
    StepRead,
    check_instance_changes,
    pending_member,
    pending_uuid,
)
from scheduler.store.memory_base import MemoryBase


class MemoryInstances(MemoryBase):
    """Instance records, and the index of their deadlines."""

    def create_instances(self, records: Iterable[InstanceRecord]) -> None:
        with self._lock:
            for record in records:
                if record.uuid not in self._instances:
                    self._put_instance(record)

    def get_instance(self, uuid: str) -> InstanceRecord:
        with self._lock:
            record = self._instances.get(uuid) or self._tomb(uuid)
            if record is None:
                raise InstanceNotFound(uuid)
            return record

    def step_reads(self, reads: Sequence[tuple[str, str | None]]) -> list[StepRead]:
        with self._lock:
            out: list[StepRead] = []
            for uuid, host in reads:
                consumer = self._consumers.get(uuid)
                provider = self._names.get(host) if host is not None else None
                holds = consumer is not None and provider in consumer.allocations
                out.append((self._instances.get(uuid) or self._tomb(uuid), holds))
            return out

    def mark_built(
        self, uuid: str, built_on: str, **changes: Any
    ) -> tuple[str, InstanceRecord | None]:
        check_instance_changes(changes)
        with self._lock:
            [(record, holds)] = self.step_reads([(uuid, built_on)])
            if record is None:
                return NO_RECORD, None
            if record.state != BUILDING:
                return NOT_BUILDING, record
            if not holds:
                return STALE, record
            record = replace(record, **changes, attempts=record.attempts + 1)
            self._put_instance(record)
            return BUILT, record

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

    # the pending index

    def add_pending(self, uuid: str, priority: int, created_at: float) -> None:
        with self._lock:
            self._pending[uuid] = pending_member(uuid, priority, created_at)

    def remove_pending(self, uuid: str) -> bool:
        with self._lock:
            return self._pending.pop(uuid, None) is not None

    def count_pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def list_pending(self, limit: int = 1000, offset: int = 0) -> list[str]:
        with self._lock:
            members = sorted(self._pending.values())
        start = max(offset, 0)
        return [pending_uuid(m) for m in members[start : start + max(limit, 0)]]
