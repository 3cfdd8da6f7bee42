"""Keeping the host view in step with the store: the load, the deltas, the
heartbeats, and the claims it accounts for ahead of the feed.

:class:`ViewFeed` builds on :class:`~scheduler.engine.viewstate.ViewState`
and is the base of :class:`~scheduler.engine.hostview.HostView`, whose
module doc says how the view follows the store: a compact snapshot loaded
column by column, :meth:`Store.changes` deltas applied row by row, a reload
when the cursor fell off the stream or the store lost a write the view
relied on, and heartbeats re-read in bulk for the hosts whose liveness is in
doubt.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import structlog

from scheduler import rules
from scheduler.engine.settings import EngineSettings
from scheduler.engine.tables import ProviderTable
from scheduler.engine.viewstate import ViewState
from scheduler.exceptions import StreamTruncated
from scheduler.store.base import CORRUPT_CHANGE, Change, ChangeFeed, Provider, Service
from scheduler.store.columns import ServiceColumns

# The view's events keep the logger of the host view, of which this is a part.
LOG = structlog.get_logger("scheduler.engine.hostview")

#: Changes read per call to :meth:`Store.changes` while catching up.
CHANGES_BATCH = 1000


class ViewFeed(ViewState):
    """A host view's writes: from the store's snapshot and change feed, and
    the claims the engine makes (see the module doc)."""

    def __init__(self, store: ChangeFeed, settings: EngineSettings) -> None:
        self._services_interval = settings.services_refresh_interval
        self._down_time = settings.service_down_time
        self._cursor: str | None = None
        # Providers whose row holds more than the feed delivered so far: net
        # claims consumed locally (uuid -> count), re-reads ahead of the feed.
        self._consumed: dict[str, int] = {}
        self._read_ahead: set[str] = set()
        self._services_read_at = -math.inf
        # Ticks order a caller's start (asked) against each catch-up's first read.
        self._ticks = itertools.count(1)
        self._caught_up_from = 0  # the tick the last complete catch-up began at
        super().__init__(store, settings)

    # --- reading the store ----------------------------------------------------------

    def asked(self) -> int:
        """A tick to pass to :meth:`refresh` as ``asked``, taken when a caller
        begins (before it waits for the engine)."""
        return next(self._ticks)

    def refresh(self, now: float, asked: int | None = None) -> None:
        """Catch up with the store: load once, then apply deltas (at once after
        the load too).

        Falls back to a full reload when the cursor fell off the stream, and
        re-reads heartbeats when ``services_refresh_interval`` has passed.

        Given ``asked`` (:meth:`asked`, taken when the caller began), the
        deltas are not read again when a catch-up began after it: that read
        came after every write the store acknowledged before the caller
        began, and what this process claimed since is consumed in the view
        (:meth:`consume_allocation`). So requests waiting for the engine
        while one decides share the next one's read, and each still sees
        everything written before it arrived.
        """
        # After a load, catch up at once: a snapshot may have been read in
        # pages while writes went on, and the changes after its cursor are
        # what make it the store's (see ChangeFeed.compact_snapshot). So a
        # reload (the cursor fell off the stream, or the store lost a write
        # the view relied on) is caught up too before the view is used.
        if self._cursor is None or asked is None or asked > self._caught_up_from:
            began = next(self._ticks)  # before the first read
            if self._cursor is None:
                self.load(now)
            caught_up = self._catch_up()
            if not caught_up:
                self.load(now)
                caught_up = self._catch_up()
            if caught_up:
                self._caught_up_from = began
        if now - self._services_read_at >= self._services_interval:
            self._read_heartbeats(self._store.heartbeats(self._liveness_in_doubt(now)), now)

    def _catch_up(self) -> bool:
        """Apply the changes after the cursor up to the stream's end; False
        when the view must be reloaded (logged with the reason)."""
        assert self._cursor is not None
        try:
            while True:
                batch = self._store.changes(self._cursor, CHANGES_BATCH)
                for change in batch:
                    self._apply(change)
                if batch:
                    self._cursor = batch[-1].cursor
                if len(batch) < CHANGES_BATCH:
                    break
        except StreamTruncated:
            LOG.info("host_view_stream_truncated", cursor=self._cursor)
            return False
        if self._consumed or self._read_ahead:
            # Caught up to the stream's end, and a write the view relied on
            # never came: the store lost it (see the module doc).
            LOG.warning(
                "host_view_write_lost",
                cursor=self._cursor,
                consumed=sorted(self._consumed),
                read_ahead=sorted(self._read_ahead),
            )
            return False
        return True

    def load(self, now: float) -> None:
        """Rebuild the whole view from a compact snapshot, a column at a time.

        The snapshot need not be one instant (the Redis store reads it in
        pages while writes go on): it is the store's once the changes after
        its cursor are applied, which :meth:`refresh` does right after.

        A value hosts share (an inventory, a set of traits or aggregates, a
        report) becomes row values once and is broadcast to its hosts by
        code (``per_value[codes]``): no Python work per host but the name
        and uuid indexes.
        """
        snap = self._store.compact_snapshot()
        self._clear()
        hosts = snap.hosts
        table = self._hosts
        n = len(hosts)
        table.reserve(n)
        table.size = n
        self.names, self.uuids = hosts.names, hosts.uuids
        self._index = dict(zip(self.names, range(n), strict=True))
        self._uuid_index = dict(zip(self.uuids, range(n), strict=True))
        self._aggregates = {agg.uuid: agg for agg in snap.aggregates}
        for rc in dict.fromkeys(itertools.chain(*hosts.inventories, hosts.usage)):
            table.load_class(
                self._rc_row(rc), rc, hosts.inventories, hosts.inventory, hosts.usage.get(rc)
            )
        row = table.per_row
        row["generation"][:n] = hosts.generation
        row["consumers"][:n] = hosts.consumers
        agg_codes = np.array(
            [self._agg_code(aggs) for aggs in hosts.aggregate_sets], dtype=np.int32
        )
        row["agg_set"][:n] = agg_codes[hosts.aggregates]
        trait_rows = self._bit_rows(hosts.trait_sets, "trait")
        agg_rows = self._bit_rows(hosts.aggregate_sets, "agg")
        table.bits["trait"][:n] = trait_rows[hosts.traits]
        table.bits["agg"][:n] = agg_rows[hosts.aggregates]
        for p in snap.children:
            self._put_kid(p)
        rows = self._load_services(snap.services, now)
        self.capabilities.load(table.allocated, rows, snap.services, snap.aggregates)
        self._cursor = snap.cursor
        self._caught_up_from = 0  # caught up only once the changes after it are read
        self._consumed.clear()
        self._read_ahead.clear()
        LOG.info("host_view_loaded", hosts=n, children=self._kids.size, cursor=snap.cursor)

    def refresh_provider(self, uuid: str) -> None:
        """Re-read one provider (after a claim on it was refused): the view
        then holds it ahead of its cursor until the feed catches up."""
        p = self._store.get_provider(uuid)
        before = self._generation_of(p.uuid)
        self._put_provider(p)
        if before is None or p.generation > before:
            self._read_ahead.add(p.uuid)

    def consume(self, index: int, resources: Mapping[str, int]) -> None:
        """Account locally for a claim just made on host ``index``.

        The change feed later brings the same usage as absolute numbers, so
        this never counts twice.
        """
        self.consume_allocation(index, {self.uuids[index]: resources})

    def unconsume(self, index: int, resources: Mapping[str, int]) -> None:
        """Undo :meth:`consume` (a dry run, or claims released after a failure)."""
        self.consume_allocation(index, {self.uuids[index]: resources}, sign=-1)

    def consume_allocation(
        self, index: int, allocations: Mapping[str, Mapping[str, int]], sign: int = 1
    ) -> None:
        """Account locally for a claim of ``allocations`` (per provider uuid) on
        host ``index``, its root and children alike; ``sign=-1`` undoes it."""
        for uuid, resources in allocations.items():
            k = self._kid_index.get(uuid)
            table, row = (self._hosts, self._uuid_index[uuid]) if k is None else (self._kids, k)
            net = self._consumed.get(uuid, 0) + sign
            if net:
                self._consumed[uuid] = net
            else:  # undone (a dry run, a release after a failure): nothing to confirm
                self._consumed.pop(uuid, None)
            for rc, amount in resources.items():
                j = self._rc_row(rc)  # first: a new class replaces the buffers
                table.per_class["used"][j, row] += sign * amount
        self._hosts.per_row["consumers"][index] += sign
        self.capabilities.consumed(index, sign)
        self._touch(index)

    def _apply(self, change: Change) -> None:
        if change.kind == "provider":
            self._put_provider(change.data)
        elif change.kind == "usage":
            self._put_usage(change.data)
        elif change.kind == "aggregate":
            self._reshaped()
            self._aggregates[change.data.uuid] = change.data
            self._set_zones = None
            self._agg_names = None
            self.capabilities.put_aggregate(change.data)
        elif change.kind == "service":
            service: Service = change.data
            i = self._index.get(service.host)
            if i is None:
                self._waiting[service.host] = service  # until its provider comes
            else:
                self._put_service(i, service)
        elif change.kind == CORRUPT_CHANGE:
            # Foreign or damaged: the view may miss one update of one provider,
            # which costs at worst a refused claim (the claim re-checks).
            LOG.error(
                "corrupt_change_skipped",
                cursor=change.cursor,
                key=change.data.kwargs.get("key"),
                reason=change.data.kwargs.get("reason"),
            )
        else:
            LOG.warning("host_view_unknown_change", kind=change.kind, cursor=change.cursor)

    def _put_provider(self, p: Provider) -> None:
        if p.parent_uuid is not None:
            self._put_kid(p)
            return
        row = self._hosts.per_row
        i = self._uuid_index.get(p.uuid)
        if i is None:
            i = self._add_row(p)
        elif p.generation < row["generation"][i]:
            return  # older than what the view holds (a provider re-read got ahead)
        self._confirmed(p.uuid)
        self._touch(i)
        self._write_provider(self._hosts, i, p)
        row["consumers"][i] = p.consumers
        row["agg_set"][i] = self._agg_code(frozenset(p.aggregates))

    def _write_provider(self, table: ProviderTable, row: int, p: Provider) -> None:
        """What hosts and child providers alike hold of ``p``: its resources,
        generation, traits and aggregates, into ``row`` of ``table``."""
        for rc in (*p.inventories, *p.usages):
            self._rc_row(rc)
        bits = {
            "trait": [self._bit(self._trait_ids, t, "trait") for t in p.traits],
            "agg": [self._bit(self._agg_ids, a, "agg") for a in p.aggregates],
        }
        table.write_provider(row, p, self._rc, bits)

    def _put_kid(self, p: Provider) -> None:
        """A child provider: its row in the kid table, counted toward its root's host."""
        root = p.root_uuid or p.parent_uuid or ""
        host = self._uuid_index.get(root)
        if host is None:  # its root is not in the view yet: add it with the root
            self._kid_pending.setdefault(root, []).append(p)
            return
        kids = self._kids
        k = self._kid_index.get(p.uuid)
        if k is None:
            k = kids.add_row()
            self._kid_uuids.append(p.uuid)
            self._kid_index[p.uuid] = k
        elif p.generation < kids.per_row["generation"][k]:
            return
        self._confirmed(p.uuid)
        self._touch(host)
        if not self._kid_classes.issuperset(p.inventories):
            self._reshaped()  # a class children offer now: asked of them from now on
            self._kid_classes.update(p.inventories)
        self._write_provider(kids, k, p)
        kids.per_row["host"][k] = host

    def _put_usage(self, data: Mapping[str, Any]) -> None:
        k = self._kid_index.get(data["uuid"])
        table, row = (
            (self._hosts, self._uuid_index.get(data["uuid"])) if k is None else (self._kids, k)
        )
        if row is None or data["generation"] < table.per_row["generation"][row]:
            return  # unknown, or older than what the view holds
        self._confirmed(data["uuid"])
        self._touch(row if k is None else int(self._kids.per_row["host"][k]))
        for rc in data["usages"]:
            self._rc_row(rc)
        table.write_usages(row, data["usages"], self._rc)
        table.per_row["generation"][row] = data["generation"]
        if k is None:
            table.per_row["consumers"][row] = data["consumers"]

    def _confirmed(self, uuid: str) -> None:
        """The feed delivered provider ``uuid`` as the store has it: what the
        view held of it beyond the cursor is the store's now."""
        if self._consumed or self._read_ahead:
            self._consumed.pop(uuid, None)
            self._read_ahead.discard(uuid)

    def _generation_of(self, uuid: str) -> int | None:
        k = self._kid_index.get(uuid)
        if k is not None:
            return int(self._kids.per_row["generation"][k])
        i = self._uuid_index.get(uuid)
        return None if i is None else int(self._hosts.per_row["generation"][i])

    def _add_row(self, p: Provider) -> int:
        self._reshaped()
        i = self._hosts.add_row()
        self.capabilities.grow(self._hosts.allocated)
        self.names.append(p.name)
        self.uuids.append(p.uuid)
        self._index[p.name] = i
        self._uuid_index[p.uuid] = i
        if self._folded is not None:
            self._folded.setdefault(p.name.casefold(), []).append(i)
        service = self._waiting.pop(p.name, None)
        if service is not None:
            self._put_service(i, service)
        for kid in self._kid_pending.pop(p.uuid, ()):
            self._put_kid(kid)
        return i

    def _put_service(self, i: int, service: Service) -> None:
        self._touch(i)
        row = self._hosts.per_row
        row["has_service"][i] = True
        # A fed record's heartbeat may be older than one the view re-read since
        # (heartbeats are not fed), so it only moves last_seen forward; but a
        # record with no heartbeat at all says the host was marked down
        # (Store.mark_down: its compute stopped), and it is down from now on.
        last_seen = row["last_seen"][i]
        row["last_seen"][i] = max(last_seen, service.last_seen) if service.last_seen else 0.0
        row["disabled"][i] = service.disabled
        row["failed_builds"][i] = service.failed_builds
        self.capabilities.put_service(i, service)

    def _load_services(self, services: ServiceColumns, now: float) -> np.ndarray:
        """Apply a snapshot's service records in bulk; return each one's row
        (-1 for a host not in the view yet: that record waits for its provider)."""
        rows = np.fromiter(
            map(self._index.get, services.hosts, itertools.repeat(-1)),
            dtype=np.int64,
            count=len(services),
        )
        known = rows >= 0
        at, row = rows[known], self._hosts.per_row
        row["has_service"][at] = True
        row["last_seen"][at] = services.last_seen[known]
        row["disabled"][at] = services.disabled[known]
        row["failed_builds"][at] = services.failed_builds[known]
        self._waiting = {
            services.hosts[k]: services.service(int(k)) for k in np.flatnonzero(~known)
        }
        self._services_read_at = now
        return rows

    def _liveness_in_doubt(self, now: float) -> list[str]:
        """The hosts whose heartbeat must be re-read now: those last seen long
        enough ago that they could be down by the next re-read.

        A host seen within ``service_down_time`` is up whatever its newer
        heartbeats say, so re-reading it changes no decision; only hosts
        nearing the limit (two re-read intervals before it, or past it) are
        asked for. Each host is thus re-read about once per
        ``service_down_time`` instead of every interval: at 100,000 hosts
        heartbeating every 10 s against the default 60 s, a few thousand
        values per re-read instead of 100,000.
        """
        hosts = self._hosts
        certain = rules.is_up(
            now, hosts.live("last_seen"), self._down_time - 2 * self._services_interval
        )
        return [self.names[i] for i in np.flatnonzero(hosts.live("has_service") & ~certain)]

    def _read_heartbeats(self, seen: Mapping[str, float], now: float) -> None:
        """Move ``last_seen`` forward to these heartbeats, in bulk.

        Only rows with a service record take one: a host that heartbeats
        without having registered stays never seen, as it was.
        """
        rows = np.fromiter(
            map(self._index.get, seen, itertools.repeat(-1)), dtype=np.int64, count=len(seen)
        )
        when = np.fromiter(seen.values(), dtype=np.float64, count=len(seen))
        keep = rows >= 0
        keep[keep] = self._hosts.per_row["has_service"][rows[keep]]
        rows, when = rows[keep], when[keep]
        last_seen = self._hosts.per_row["last_seen"]
        before = last_seen[rows]
        # A host up before stays up until its deadline (those who keep answers
        # per host watch the clock for that); one that was down may be up now.
        for row in rows[(when > before) & ~rules.is_up(now, before, self._down_time)].tolist():
            self._touch(row)
        last_seen[rows] = np.maximum(before, when)
        self._services_read_at = now
