"""The Redis store's instance records, their delete fences, the deadline
index the conductor's sweep reads (:class:`scheduler.store.base.InstanceStore`)
and the index of the requests waiting for capacity
(:class:`scheduler.store.base.PendingIndex`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from scheduler.exceptions import InstanceNotFound
from scheduler.log import get_logger
from scheduler.objects import InstanceRecord
from scheduler.store.base import (
    NO_RECORD,
    StepRead,
    check_instance_changes,
    pending_member,
    pending_uuid,
)
from scheduler.store.redis_base import RedisBase
from scheduler.store.redis_codec import (
    changes_json,
    each,
    flat_pairs,
    instance_json,
    parse,
    read_instance,
)
from scheduler.store.redis_connect import translated
from scheduler.store.scripts import DELETING_MARKER, INDEX_COMPLETE

LOG = get_logger(__name__)


class RedisInstances(RedisBase):
    """Instance records: created, updated and deleted by script; read by uuid, in
    pages, or as the ones due."""

    @translated
    def create_instances(self, records: Iterable[InstanceRecord]) -> None:
        # One script per record (each one short), all in one round trip.
        pipe = self._pipeline(transaction=False)
        for record in records:
            deadline = "" if record.deadline is None else repr(float(record.deadline))
            self._scripts.create_instance(
                keys=(self.keys.instances, self.keys.deadlines),
                args=(record.uuid, instance_json(record), deadline),
                client=pipe,
            )
        self._acknowledged(pipe)

    @translated
    def get_instance(self, uuid: str) -> InstanceRecord:
        pipe = self._pipeline(transaction=False)
        pipe.hget(self.keys.instances, uuid)
        pipe.get(self.keys.deleted_record(uuid))
        raw, tomb = pipe.execute()
        if raw is not None:
            return parse(read_instance, raw, f"{self.keys.instances}[{uuid}]")
        if tomb is None or tomb == DELETING_MARKER:
            raise InstanceNotFound(uuid)
        return parse(read_instance, tomb, self.keys.deleted_record(uuid))

    @translated
    def mark_built(
        self, uuid: str, built_on: str, **changes: Any
    ) -> tuple[str, InstanceRecord | None]:
        check_instance_changes(changes)
        outcome, raw = self._write(
            self._scripts.mark_built,
            keys=(
                self.keys.instances,
                self.keys.deleted_record(uuid),
                self.keys.deadlines,
                self.keys.consumers,
                self.keys.provider_names,
            ),
            args=(uuid, built_on, changes_json(changes)),
        )
        if outcome == NO_RECORD:
            return NO_RECORD, None
        return outcome, parse(read_instance, raw, f"{self.keys.instances}[{uuid}]")

    @translated
    def step_reads(self, reads: Sequence[tuple[str, str | None]]) -> list[StepRead]:
        if not reads:
            return []
        flat = self._scripts.step_reads(
            keys=(
                self.keys.instances,
                self.keys.consumers,
                self.keys.provider_names,
                *(self.keys.deleted_record(uuid) for uuid, _ in reads),
            ),
            args=[v for uuid, host in reads for v in (uuid, host or "")],
        )
        out: list[StepRead] = []
        for (uuid, _), raw, holds in zip(reads, flat[::2], flat[1::2], strict=True):
            record = (
                None
                if raw in ("", b"")
                else parse(read_instance, raw, f"{self.keys.instances}[{uuid}]")
            )
            out.append((record, int(holds) == 1))
        return out

    @translated
    def update_instance(
        self,
        uuid: str,
        expected_states: Iterable[str] | None = None,
        expect: Mapping[str, str | None] | None = None,
        **changes: Any,
    ) -> InstanceRecord | None:
        check_instance_changes(changes)
        expected = "" if expected_states is None else json.dumps(list(expected_states))
        fields = "" if not expect else json.dumps(dict(expect))
        raw = self._write(
            self._scripts.update_instance,
            keys=(self.keys.instances, self.keys.deleted_record(uuid), self.keys.deadlines),
            args=(uuid, expected, changes_json(changes), fields),
        )
        if raw is None:
            return None
        return parse(read_instance, raw, f"{self.keys.instances}[{uuid}]")

    @translated
    def start_delete(self, uuid: str, **changes: Any) -> tuple[InstanceRecord, bool]:
        check_instance_changes(changes)
        started, raw = self._write(
            self._scripts.start_delete,
            keys=(self.keys.instances, self.keys.deleted_record(uuid), self.keys.deadlines),
            args=(uuid, changes_json(changes)),
        )
        return parse(read_instance, raw, f"{self.keys.instances}[{uuid}]"), bool(started)

    @translated
    def finish_delete(
        self, uuid: str, host: str | None, retention: float, now: float, force: bool = False
    ) -> InstanceRecord | None:
        raw = self._write(
            self._scripts.finish_delete,
            keys=(
                *self._alloc_keys,
                self.keys.instances,
                self.keys.deleted_record(uuid),
                self.keys.deadlines,
            ),
            args=(
                self._maxlen,
                uuid,
                host or "",
                "1" if force else "0",
                max(int(retention * 1000), 1),
                repr(float(now)),
            ),
        )
        if raw is None:
            return None
        return parse(read_instance, raw, self.keys.deleted_record(uuid))

    @translated
    def list_instances(self, uuids: Iterable[str] | None = None) -> list[InstanceRecord]:
        if uuids is None:
            pairs = self._scan(self.keys.instances)
            return sorted(each(read_instance, pairs, self.keys.instances), key=lambda r: r.uuid)
        wanted = list(uuids)
        if not wanted:
            return []
        pipe = self._pipeline(transaction=False)
        pipe.hmget(self.keys.instances, wanted)
        pipe.mget([self.keys.deleted_record(u) for u in wanted])
        raws, tombs = pipe.execute()
        found = (
            (uuid, raw if raw is not None else tomb)
            for uuid, raw, tomb in zip(wanted, raws, tombs, strict=True)
        )
        return list(
            each(
                read_instance,
                ((u, raw) for u, raw in found if raw is not None and raw != DELETING_MARKER),
                self.keys.instances,
            )
        )

    def scan_instances(self, batch: int = 500) -> Iterator[InstanceRecord]:
        yield from each(read_instance, self._scan(self.keys.instances, batch), self.keys.instances)

    def _instances_page(self, cursor: int, batch: int) -> tuple[int, list[InstanceRecord]]:
        """One HSCAN page of the instances hash: the next cursor (0: done) and its records."""
        cursor, page = self._scan_hash(self.keys.instances, cursor, batch)
        return cursor, list(each(read_instance, page.items(), self.keys.instances))

    def list_instances_due(self, now: float, limit: int = 1000) -> list[InstanceRecord]:
        due, complete = self._due(now, limit)
        if not complete:  # records from before the index: index them, once
            self.index_deadlines()
            due, _ = self._due(now, limit)
        return due

    @translated
    def _due(self, now: float, limit: int) -> tuple[list[InstanceRecord], bool]:
        """What the due script returns: the due records, and whether the index is complete."""
        due, unreadable, complete = self._scripts.due_instances(
            keys=(self.keys.deadlines, self.keys.instances),
            args=(repr(float(now)), max(int(limit), 0)),
        )
        for name in unreadable:  # the script skipped them: say so
            LOG.error(
                "corrupt_record", key=f"{self.keys.instances}[{name}]", reason="not a JSON object"
            )
        return list(each(read_instance, flat_pairs(due), self.keys.instances)), bool(complete)

    def index_deadlines(self, batch: int = 100) -> int:
        """Index the deadlines of records written before the deadline index was.

        Walks the instances hash ``batch`` records at a time (HSCAN), each
        page's records with a deadline indexed by one short script, then marks
        the index complete; so an upgraded store is indexed without one long
        blocking step, while writes go on (each write keeps the index itself).
        :meth:`list_instances_due` calls it once, when the index is not marked
        complete. Idempotent; returns how many records it indexed.
        """
        started = time.monotonic()
        added = scanned = 0
        cursor = 0
        while True:
            cursor, page = self._instances_page(cursor, batch)
            scanned += len(page)
            pending = [r.uuid for r in page if r.deadline is not None]
            if pending:
                added += self._index_page(pending)
            if cursor == 0:
                break
        self._mark_indexed()
        LOG.info(
            "deadline_index_built",
            scanned=scanned,
            indexed=added,
            seconds=round(time.monotonic() - started, 3),
        )
        return added

    @translated
    def _index_page(self, uuids: list[str]) -> int:
        return int(
            self._scripts.index_deadlines(
                keys=(self.keys.deadlines, self.keys.instances), args=uuids
            )
        )

    @translated
    def _mark_indexed(self) -> None:
        self._client.zadd(self.keys.deadlines, {INDEX_COMPLETE: float("inf")})

    # the pending index

    @translated
    def add_pending(self, uuid: str, priority: int, created_at: float) -> None:
        self._write(
            self._scripts.add_pending,
            keys=(self.keys.pending, self.keys.pending_members),
            args=(uuid, pending_member(uuid, priority, created_at)),
        )

    @translated
    def remove_pending(self, uuid: str) -> bool:
        return bool(
            self._write(
                self._scripts.remove_pending,
                keys=(self.keys.pending, self.keys.pending_members),
                args=(uuid,),
            )
        )

    @translated
    def count_pending(self) -> int:
        return int(self._client.zcard(self.keys.pending))

    @translated
    def list_pending(self, limit: int = 1000, offset: int = 0) -> list[str]:
        if limit < 1:
            return []
        start = max(offset, 0)
        members = self._client.zrange(self.keys.pending, start, start + limit - 1)
        return [pending_uuid(str(m)) for m in members]
