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

from scheduler.exceptions import StreamTruncated
from scheduler.store.base import Change, cursor_key
from scheduler.store.columns import CompactSnapshot, HostColumnsBuilder, ServiceColumnsBuilder
from scheduler.store.memory_instances import MemoryInstances
from scheduler.store.memory_placement import MemoryPlacement
from scheduler.store.memory_services import MemoryServices


class MemoryStore(MemoryPlacement, MemoryServices, MemoryInstances):
    """The store contract in one process; ``stream_maxlen`` bounds the change feed.

    ``clock`` tells when a DELETED record's retention has passed (as Redis's
    key expiry does for the Redis store): such a record is gone when next
    looked at. Each part is in a module of its own (see
    :mod:`scheduler.store.memory_base`); what is here is the change feed and
    the housekeeping.
    """

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
                self._pending,
                self._deleted,
                self._refusals,
                self._preemptions,
            ):
                table.clear()
            self._due.clear()
            # The feed keeps its cursor numbering: a view holding an old cursor
            # must see the wipe as a truncation, not as an empty stream.
            self._feed.clear()
