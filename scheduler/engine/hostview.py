"""The columnar host view: the worker's in-memory cache of the store.

One numpy array per field across all hosts, so that the capacity, liveness,
zone and aggregate questions of the pipeline are array operations and never a
Python loop over hosts:

* per resource class (a row each, classes added as they appear): ``total``,
  ``reserved``, ``ratio``, ``capacity`` (``int((total - reserved) * ratio)``),
  ``used``, ``min_unit``, ``max_unit`` (never above total), ``step``; the
  last axis is the host;
* per host: ``generation``, ``consumers``, ``last_seen``, ``disabled``,
  ``failed_builds``, and ``agg_set``, a code for the host's set of aggregates
  (hosts share a handful of distinct sets, so a question about aggregates or
  availability zones is asked once per set and broadcast by code);
* ``names`` / ``uuids`` lists and name and uuid -> index dicts;
* ``capabilities``: what the hosts' computes report beyond inventory, for
  the host filters and weighers (:mod:`scheduler.engine.capabilities`).

The view is built from :meth:`Store.compact_snapshot` (columns, no object
per host; see :meth:`HostView.load`) and kept fresh by applying
:meth:`Store.changes` deltas; when the cursor has fallen off the stream
(:class:`StreamTruncated`) it reloads. Everything about a service is in the
change feed except its heartbeats: those alone are re-read, one number per
host (:meth:`Store.heartbeats`), at most every ``services_refresh_interval``
seconds, and applied to ``last_seen`` as one array operation; only for the
hosts whose liveness is in doubt (seen long enough ago that they could be
down by the next re-read), since a host seen within ``service_down_time``
is up whatever its newer heartbeats say. A host whose compute stopped
gracefully is marked down through the feed (:meth:`Store.mark_down`: its
record then carries no heartbeat) and counts as down at once.

A view also reloads when the store went back in time under it (a failover to
a replica that lacked the last writes) without its cursor showing it (the
cursor still one of the stream's entries). What the view holds beyond its
cursor is known: a claim it consumed locally (:meth:`consume_allocation`),
a provider it re-read ahead of the feed (:meth:`refresh_provider`). Each
such provider is *unconfirmed* until the feed delivers a change of it that
the view applies: the store acknowledged that write before the next
:meth:`refresh` began, so a catch-up that reaches the stream's end without
one means the store lost it (``host_view_write_lost``), and the view would
otherwise keep a usage, or a generation, that the store no longer has.

A host is a root provider named after it (node = host name). Its child
providers (a GPU or PCI pool, a NUMA cell: any provider whose root is the
host) live in a second table of the same kind (``kid_*``), each row knowing
its host; their inventories count toward the host, and the candidate step
(:mod:`scheduler.engine.placement`) asks both tables. Both are a
:class:`_ProviderTable`: the per-class columns, the bit words and the row
growth are written once, and which :class:`Inventory` field fills which
column is declared once (:data:`_INVENTORY_COLUMNS`), for the bulk load
and the per-row write from the change feed alike.

Traits and aggregates are bitsets: every trait name and aggregate uuid the
view has seen gets a bit, and each provider row holds ``uint64`` words of
them (hosts and children alike), so "required", "forbidden", "any of" and
"member of" are mask operations over all providers at once. A child
provider counts as a member of its root's aggregates too (as Placement
has it).

What changed, for those who keep answers per host (the engine's shape
cache, :mod:`scheduler.engine.shapecache`): every write to a host's rows
(its provider, a child of it, its usage, its service, a claim consumed, a
heartbeat that may bring it back up) appends the host's row to a bounded
log and moves :attr:`HostView.version` on; :meth:`HostView.changed_since`
gives the rows changed after a version (None once the log no longer
reaches back that far). A change of the view's shape (a load, a host
added, a new resource class, trait or aggregate bit, an aggregate's
metadata) moves :attr:`HostView.epoch` on instead: nothing kept per host
survives it.

Only the first :attr:`size` rows of the buffers are hosts (they grow by
doubling; :attr:`kid_size` for the child table); the public column
attributes return exactly those rows.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import numpy as np
import structlog

from scheduler import rules
from scheduler.engine.capabilities import HostCapabilities
from scheduler.engine.settings import EngineSettings
from scheduler.exceptions import StreamTruncated
from scheduler.store.base import (
    CORRUPT_CHANGE,
    Aggregate,
    Change,
    ChangeFeed,
    Inventory,
    Provider,
    Service,
)
from scheduler.store.columns import ServiceColumns

LOG = structlog.get_logger(__name__)

#: Changes read per call to :meth:`Store.changes` while catching up.
CHANGES_BATCH = 1000
#: Metadata key of an aggregate that names an availability zone.
AZ_METADATA_KEY = "availability_zone"

_INITIAL_ROWS = 64
#: (class, amount) unit-rule masks a provider table keeps between inventory writes.
_UNITS_CACHE_SIZE = 64
_WORD = 64
#: Changed rows the view remembers (see :meth:`HostView.changed_since`).
CHANGE_LOG = 8192


def _set_words(words: np.ndarray, bits: Iterable[int]) -> None:
    """Set ``bits`` in a row of ``uint64`` words (in place)."""
    for bit in bits:
        words[bit // _WORD] |= np.uint64(1 << (bit % _WORD))


@dataclass(frozen=True)
class _ClassColumn:
    """A per resource class column of a provider table: its dtype, its value
    where a provider has no inventory of the class, and the :class:`Inventory`
    field that fills it (None for ``used``, which the usages fill)."""

    name: str
    dtype: type
    fill: Any
    field: str | None = None


#: Which Inventory field fills which per-class column: read by the bulk load
#: (:meth:`_ProviderTable.load_class`) and by the per-row write
#: (:meth:`_ProviderTable.write_provider`) alike.
_INVENTORY_COLUMNS: tuple[_ClassColumn, ...] = (
    _ClassColumn("total", np.int64, 0, "total"),
    _ClassColumn("reserved", np.int64, 0, "reserved"),
    _ClassColumn("ratio", np.float64, 1.0, "allocation_ratio"),
    _ClassColumn("capacity", np.int64, 0, "capacity"),
    _ClassColumn("min_unit", np.int64, 0, "min_unit"),
    _ClassColumn("max_unit", np.int64, 0, "effective_max_unit"),
    _ClassColumn("step", np.int64, 1, "step_size"),
)
_USED = _ClassColumn("used", np.int64, 0)
_CLASS_COLUMNS = (*_INVENTORY_COLUMNS, _USED)
#: An Inventory's values for :data:`_INVENTORY_COLUMNS`, in their order (one
#: call per inventory), and those of a provider without the class.
_READ_INVENTORY: Callable[[Inventory], tuple[Any, ...]] = attrgetter(
    *(c.field for c in _INVENTORY_COLUMNS if c.field)
)
_NO_INVENTORY = tuple(c.fill for c in _INVENTORY_COLUMNS)

# Per row buffers: (name, dtype, fill value of a new row).
_RowColumns = tuple[tuple[str, type, Any], ...]
_HOST_ROW_COLUMNS: _RowColumns = (
    ("generation", np.int64, -1),
    ("consumers", np.int64, 0),
    ("last_seen", np.float64, -math.inf),  # no service record: never seen, so down
    ("has_service", np.bool_, False),
    ("disabled", np.bool_, False),
    ("failed_builds", np.int64, 0),
    ("agg_set", np.int32, 0),
)
_KID_ROW_COLUMNS: _RowColumns = (
    ("generation", np.int64, -1),
    ("host", np.int64, -1),  # the row of its host in the host table
)
#: The bit tables of a provider table: one row of uint64 words per provider.
_BIT_KINDS = ("trait", "agg")


class _ProviderTable:
    """Providers as rows (the hosts' root providers, or their children): per
    resource class columns (``per_class``, shape (classes, rows)), per row
    columns (``per_row``, shape (rows,)) and trait and aggregate bit words
    (``bits["trait"]`` / ``bits["agg"]``, shape (rows, words)).

    Only the first :attr:`size` rows are providers; the buffers grow by
    doubling. The owner keeps the resource classes and bits (shared by its
    tables), and tells each table when one is added.
    """

    def __init__(self, row_columns: _RowColumns) -> None:
        self.size = 0
        self._rows = 0
        self._row_columns = row_columns
        self.per_class: dict[str, np.ndarray] = {
            c.name: np.zeros((0, 0), dtype=c.dtype) for c in _CLASS_COLUMNS
        }
        self.per_row: dict[str, np.ndarray] = {
            name: np.full(0, fill, dtype=dtype) for name, dtype, fill in row_columns
        }
        self.bits: dict[str, np.ndarray] = {
            kind: np.zeros((0, 1), dtype=np.uint64) for kind in _BIT_KINDS
        }
        self._units_cache: dict[tuple[int, int], np.ndarray] = {}

    def live(self, name: str) -> np.ndarray:
        """The live rows of a column (a view, no copy)."""
        if name in self.per_class:
            return self.per_class[name][:, : self.size]
        if name in self.per_row:
            return self.per_row[name][: self.size]
        return self.bits[name.removesuffix("_bits")][: self.size]

    def count(self, rows: np.ndarray | slice) -> int:
        if isinstance(rows, slice):
            return len(range(self.size)[rows])
        return len(rows)

    # --- shape ----------------------------------------------------------------------

    def add_row(self) -> int:
        """A new row at the end (its columns at their fill values)."""
        i = self.size
        if i >= self._rows:
            self._grow(max(i + 1, 2 * self._rows, _INITIAL_ROWS))
        self.size = i + 1
        return i

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows (a bulk load then sets :attr:`size`)."""
        if rows > self._rows:
            self._grow(max(rows, 2 * self._rows, _INITIAL_ROWS))

    @property
    def allocated(self) -> int:
        """How many rows the buffers hold."""
        return self._rows

    def _grow(self, rows: int) -> None:
        old = self._rows
        for c in _CLASS_COLUMNS:
            classes = self.per_class[c.name].shape[0]
            table: np.ndarray = np.full((classes, rows), c.fill, dtype=c.dtype)
            table[:, :old] = self.per_class[c.name]
            self.per_class[c.name] = table
        for name, dtype, fill in self._row_columns:
            column: np.ndarray = np.full(rows, fill, dtype=dtype)
            column[:old] = self.per_row[name]
            self.per_row[name] = column
        for kind, table in self.bits.items():
            grown = np.zeros((rows, table.shape[1]), dtype=np.uint64)
            grown[:old] = table
            self.bits[kind] = grown
        self._rows = rows

    def add_class(self) -> None:
        """One more resource class row, at every provider's fill value."""
        for c in _CLASS_COLUMNS:
            self.per_class[c.name] = np.vstack(
                [self.per_class[c.name], np.full((1, self._rows), c.fill, dtype=c.dtype)]
            )

    def widen(self, kind: str) -> None:
        """One more word of ``kind`` ("trait" or "agg") bits per row."""
        table = self.bits[kind]
        self.bits[kind] = np.hstack([table, np.zeros((table.shape[0], 1), dtype=np.uint64)])

    # --- writing --------------------------------------------------------------------

    def load_class(
        self,
        j: int,
        rc: str,
        inventories: Sequence[Mapping[str, Inventory]],
        codes: np.ndarray,
        used: np.ndarray | None,
    ) -> None:
        """Fill class ``j`` (``rc``) of the first ``len(codes)`` rows in bulk: row
        ``i`` has inventory ``inventories[codes[i]]`` and uses ``used[i]``."""
        n = len(codes)
        values = [
            _READ_INVENTORY(invs[rc]) if rc in invs else _NO_INVENTORY for invs in inventories
        ]
        for k, c in enumerate(_INVENTORY_COLUMNS):
            per_value: np.ndarray = np.array([v[k] for v in values], dtype=c.dtype)
            self.per_class[c.name][j, :n] = per_value[codes]
        if used is not None:
            self.per_class[_USED.name][j, :n] = used
        self._units_cache.clear()

    def write_provider(
        self, row: int, p: Provider, rc_rows: Mapping[str, int], bits: Mapping[str, Iterable[int]]
    ) -> None:
        """Fill ``row`` from ``p``: its per-class columns from its inventories and
        usages (``rc_rows`` gives each class's row; every class ``p`` names has
        one), its generation, and its ``bits`` of each kind."""
        self.per_row["generation"][row] = p.generation
        for kind, kind_bits in bits.items():
            table = self.bits[kind]
            table[row] = 0
            for bit in kind_bits:  # as _set_words, with no view of the row (this is per write)
                table[row, bit // _WORD] |= np.uint64(1 << (bit % _WORD))
        self._units_cache.clear()  # the unit rules may change, and the row count
        columns = [self.per_class[c.name] for c in _INVENTORY_COLUMNS]
        for column, fill in zip(columns, _NO_INVENTORY, strict=True):
            column[:, row] = fill
        for rc, inv in p.inventories.items():
            j = rc_rows[rc]
            for column, value in zip(columns, _READ_INVENTORY(inv), strict=True):
                column[j, row] = value
        self.write_usages(row, p.usages, rc_rows)

    def write_usages(
        self, row: int, usages: Mapping[str, int], rc_rows: Mapping[str, int]
    ) -> None:
        used = self.per_class[_USED.name]
        used[:, row] = _USED.fill
        for rc, amount in usages.items():
            used[rc_rows[rc], row] = amount

    # --- questions ------------------------------------------------------------------

    def can_give(
        self, j: int, amount: int, rows: np.ndarray | slice, extra: np.ndarray | None
    ) -> np.ndarray:
        """Mask of the providers in ``rows`` that can give ``amount`` of class ``j``."""
        free = self.per_class["capacity"][j, rows] - self.per_class["used"][j, rows]
        if extra is not None:
            free = free - extra
        ok = free >= amount
        ok &= self._units_allow(j, amount)[rows]
        return ok

    def _units_allow(self, j: int, amount: int) -> np.ndarray:
        """Mask over every provider whose min_unit, max_unit and step_size of
        class ``j`` allow ``amount``. Kept until an inventory is written (usage
        changes leave these rules alone), since every decision asks the same
        few amounts."""
        key = (j, amount)
        mask = self._units_cache.get(key)
        if mask is None:
            n = self.size
            mask = rules.units_allow(
                amount,
                self.per_class["min_unit"][j, :n],
                self.per_class["max_unit"][j, :n],
                self.per_class["step"][j, :n],
            )
            if len(self._units_cache) >= _UNITS_CACHE_SIZE:
                self._units_cache.clear()
            self._units_cache[key] = mask
        return mask

    def has_bit(self, kind: str, bit: int, rows: np.ndarray | slice) -> np.ndarray:
        return (self.bits[kind][rows, bit // _WORD] & np.uint64(1 << (bit % _WORD))) != 0


class _Column:
    """A read-only attribute giving the live rows of a column of the host table,
    or with ``kid=True`` of the child-provider table (a view, no copy)."""

    def __init__(self, name: str, kid: bool = False) -> None:
        self._name = name
        self._kid = kid

    def __get__(self, view: HostView, owner: type | None = None) -> np.ndarray:
        return (view._kids if self._kid else view._hosts).live(self._name)


class HostView:
    """Columnar cache of the hosts a worker schedules onto."""

    # Set by _clear() and by the cold load.
    names: list[str]
    uuids: list[str]
    _index: dict[str, int]
    _uuid_index: dict[str, int]
    _folded: dict[str, list[int]] | None  # casefolded name -> rows
    _aggregates: dict[str, Aggregate]
    _set_zones: list[frozenset[str]] | None

    total = _Column("total")
    reserved = _Column("reserved")
    ratio = _Column("ratio")
    capacity = _Column("capacity")
    used = _Column("used")
    min_unit = _Column("min_unit")
    max_unit = _Column("max_unit")
    step = _Column("step")
    generation = _Column("generation")
    consumers = _Column("consumers")
    last_seen = _Column("last_seen")
    disabled = _Column("disabled")
    failed_builds = _Column("failed_builds")
    agg_set = _Column("agg_set")
    trait_bits = _Column("trait_bits")
    agg_bits = _Column("agg_bits")
    kid_capacity = _Column("capacity", kid=True)
    kid_used = _Column("used", kid=True)
    kid_host = _Column("host", kid=True)
    kid_trait_bits = _Column("trait_bits", kid=True)
    kid_agg_bits = _Column("agg_bits", kid=True)

    def __init__(self, store: ChangeFeed, settings: EngineSettings) -> None:
        self._store = store
        self._default_zone = settings.default_availability_zone
        self._services_interval = settings.services_refresh_interval
        self._down_time = settings.service_down_time
        self._cursor: str | None = None
        # Providers whose row holds more than the feed delivered so far: net
        # claims consumed locally (uuid -> count), re-reads ahead of the feed.
        self._consumed: dict[str, int] = {}
        self._read_ahead: set[str] = set()
        self._services_read_at = -math.inf
        # What hosts report beyond inventory (capabilities, stats), for the
        # host filters and weighers; fed below wherever services, aggregates
        # or rows change (see scheduler/engine/capabilities.py).
        self.capabilities = HostCapabilities(store)
        #: Moves on at every change of the view's shape (see the module doc).
        self.epoch = 0
        # The log of changed host rows: entry k is change number _log_start + k.
        self._log: list[int] = []
        self._log_start = 0
        # Per-class columns of the hosts being weighed, each gathered once
        # (see gathering()): those hosts, and (column, class row) -> values.
        self._gathered: tuple[np.ndarray, dict[tuple[str, int], np.ndarray]] | None = None
        self._clear()

    # --- reading the store ----------------------------------------------------------

    def refresh(self, now: float) -> None:
        """Catch up with the store: load once, then apply deltas (at once after
        the load too).

        Falls back to a full reload when the cursor fell off the stream, and
        re-reads heartbeats when ``services_refresh_interval`` has passed.
        """
        # After a load, catch up at once: a snapshot may have been read in
        # pages while writes went on, and the changes after its cursor are
        # what make it the store's (see ChangeFeed.compact_snapshot). So a
        # reload (the cursor fell off the stream, or the store lost a write
        # the view relied on) is caught up too before the view is used.
        if self._cursor is None:
            self.load(now)
        if not self._catch_up():
            self.load(now)
            self._catch_up()
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
        self._consumed.clear()
        self._read_ahead.clear()
        LOG.info("host_view_loaded", hosts=n, children=self.kid_size, cursor=snap.cursor)

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

    # --- what changed ---------------------------------------------------------------

    @property
    def version(self) -> int:
        """How many host-row changes the view has logged (see :meth:`changed_since`)."""
        return self._log_start + len(self._log)

    def changed_since(self, version: int) -> np.ndarray | None:
        """The host rows changed after ``version`` (ascending, each once), or
        None when the log no longer reaches back that far."""
        if version < self._log_start:
            return None
        if version == self.version:
            return np.zeros(0, dtype=np.int64)
        return np.array(sorted(set(self._log[version - self._log_start :])), dtype=np.int64)

    def _touch(self, row: int) -> None:
        """Log a change of host row ``row``."""
        log = self._log
        log.append(row)
        if len(log) > CHANGE_LOG:
            half = len(log) // 2
            del log[:half]
            self._log_start += half

    def _reshaped(self) -> None:
        """The view's shape changed: what is kept per host is void."""
        self.epoch += 1

    # --- questions the pipeline asks ------------------------------------------------

    @property
    def resource_classes(self) -> tuple[str, ...]:
        return tuple(self._rc_names)

    @property
    def aggregate_sets(self) -> tuple[frozenset[str], ...]:
        """The distinct aggregate sets; ``agg_set`` holds an index into this."""
        return tuple(self._agg_sets)

    @property
    def aggregates(self) -> Mapping[str, Aggregate]:
        """Every aggregate the store holds, by uuid (name and metadata)."""
        return MappingProxyType(self._aggregates)

    @property
    def size(self) -> int:
        """How many hosts the view holds (the live rows of the host columns)."""
        return self._hosts.size

    @property
    def kid_size(self) -> int:
        """How many child providers the view holds (the live rows of ``kid_*``)."""
        return self._kids.size

    @property
    def kid_uuids(self) -> list[str]:
        return self._kid_uuids

    def kids_offer(self, rc: str) -> bool:
        """Has any child provider ever had inventory of ``rc``? (If not, asking
        the child table about it can be skipped.)"""
        return rc in self._kid_classes

    def index_of(self, name: str) -> int | None:
        return self._index.get(name)

    def kid_index_of(self, uuid: str) -> int | None:
        """Row of a child provider in the ``kid_*`` columns."""
        return self._kid_index.get(uuid)

    def kids_of(self, idx: np.ndarray | slice | None) -> tuple[np.ndarray, np.ndarray]:
        """The child providers of the hosts in ``idx`` (indices, a range of rows, or
        None: every host): their rows, and for each the position of its host in
        ``idx``. A range asks only the child table, never every host."""
        if not self.kid_size:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        if idx is None:
            return np.arange(self.kid_size), self.kid_host
        if isinstance(idx, slice):
            start, stop, _ = idx.indices(self.size)
            offset = self.kid_host - start
            kids = np.flatnonzero((offset >= 0) & (offset < stop - start))
            return kids, offset[kids]
        where = np.full(self.size, -1, dtype=np.int64)
        where[idx] = np.arange(len(idx))
        pos = where[self.kid_host]
        kids = np.flatnonzero(pos >= 0)
        return kids, pos[kids]

    # providers: ``kid=False`` asks hosts' root providers (rows are host
    # indices), ``kid=True`` child providers (rows are kid rows).

    def _table(self, kid: bool) -> _ProviderTable:
        return self._kids if kid else self._hosts

    def can_give(
        self,
        rc: str,
        amount: int,
        rows: np.ndarray | slice,
        kid: bool = False,
        extra: np.ndarray | None = None,
    ) -> np.ndarray:
        """Mask of the providers in ``rows`` that can give ``amount`` of ``rc``:
        free capacity (less ``extra``, already promised in this request), and
        min_unit, max_unit and step_size. A provider without the class cannot."""
        table = self._table(kid)
        j = self._rc.get(rc)
        if j is None:
            return np.zeros(table.count(rows), dtype=bool)
        return table.can_give(j, amount, rows, extra)

    def has_trait(self, trait: str, rows: np.ndarray | slice, kid: bool = False) -> np.ndarray:
        """Mask of the providers in ``rows`` that have ``trait``."""
        table = self._table(kid)
        bit = self._trait_ids.get(trait)
        if bit is None:
            return np.zeros(table.count(rows), dtype=bool)
        return table.has_bit("trait", bit, rows)

    def in_any_trait(
        self, traits: Iterable[str], rows: np.ndarray | slice, kid: bool = False
    ) -> np.ndarray:
        """Mask of the providers in ``rows`` that have at least one of ``traits``."""
        table = self._table(kid)
        words = self._words(self._trait_ids, traits, self._words_of["trait"])
        if not words.any():
            return np.zeros(table.count(rows), dtype=bool)
        return (table.bits["trait"][rows] & words).any(axis=1)

    def trait_count(
        self, traits: Iterable[str], rows: np.ndarray | slice, kid: bool = False
    ) -> np.ndarray:
        """How many of ``traits`` each provider in ``rows`` has."""
        count = np.zeros(self._table(kid).count(rows), dtype=np.int64)
        for trait in traits:
            count += self.has_trait(trait, rows, kid)
        return count

    @staticmethod
    def _words(ids: Mapping[str, int], names: Iterable[str], width: int) -> np.ndarray:
        words = np.zeros(width, dtype=np.uint64)
        _set_words(words, (bit for name in names if (bit := ids.get(name)) is not None))
        return words

    def in_any(
        self, aggregates: Iterable[str], rows: np.ndarray | slice, kid: bool = False
    ) -> np.ndarray:
        """Mask of the providers in ``rows`` that are members of any of
        ``aggregates`` (uuids or names), a child through its root too."""
        uuids = [uuid for token in aggregates for uuid in self._resolve_aggregate(token)]
        words = self._words(self._agg_ids, uuids, self._words_of["agg"])
        if not words.any():
            return np.zeros(self._table(kid).count(rows), dtype=bool)
        host_bits = self._hosts.bits["agg"]
        if kid:
            bits = self._kids.bits["agg"][rows] | host_bits[self._kids.per_row["host"][rows]]
        else:
            bits = host_bits[rows]
        return (bits & words).any(axis=1)

    def index_of_uuid(self, uuid: str) -> int | None:
        return self._uuid_index.get(uuid)

    def indices_of(self, names: Iterable[str]) -> np.ndarray:
        """Indices of the named hosts present in the view (unknown names skipped)."""
        found = [i for n in names if (i := self._index.get(n)) is not None]
        return np.array(found, dtype=np.int64)

    def indices_of_ignoring_case(self, names: Iterable[str]) -> np.ndarray:
        """Like :meth:`indices_of`, matching names case-insensitively."""
        if self._folded is None:  # built on first use, then kept up to date
            folded: dict[str, list[int]] = {}
            for i, name in enumerate(self.names):
                folded.setdefault(name.casefold(), []).append(i)
            self._folded = folded
        found = [i for n in names for i in self._folded.get(n.casefold(), ())]
        return np.array(found, dtype=np.int64)

    def shortfalls(
        self, resources: Mapping[str, int], idx: np.ndarray | None = None
    ) -> list[tuple[str, np.ndarray]]:
        """Per requested resource class, a mask of the hosts whose root provider
        cannot give it (its own inventory only; the candidate step asks the
        child providers too, see :mod:`scheduler.engine.placement`).

        A host cannot give ``amount`` of a class if its free capacity is
        smaller, or the amount breaks ``max_unit``, ``min_unit`` or
        ``step_size``, or it has no such inventory. ``idx`` restricts the
        question to those hosts (the masks then align with ``idx``).
        """
        rows: slice | np.ndarray = slice(0, self.size) if idx is None else idx
        return [(rc, ~self.can_give(rc, amount, rows)) for rc, amount in resources.items()]

    def fits(self, resources: Mapping[str, int], idx: np.ndarray) -> np.ndarray:
        """Mask of the hosts in ``idx`` whose root provider has room for ``resources``."""
        ok = np.ones(len(idx), dtype=bool)
        for _rc, bad in self.shortfalls(resources, idx):
            ok &= ~bad
        return ok

    @contextlib.contextmanager
    def gathering(self, idx: np.ndarray) -> Iterator[None]:
        """While open, a per-class column asked of the hosts ``idx`` (this array)
        is gathered from the host table once, whichever question asks it: the
        weighers of one decision read the same few columns of the same
        candidates (capacity and usage, for free amounts and used shares).
        Nothing may write the view meanwhile (the engine's lock is held)."""
        self._gathered = (idx, {})
        try:
            yield
        finally:
            self._gathered = None

    def _of_hosts(self, column: str, j: int, idx: np.ndarray) -> np.ndarray:
        """Column ``column`` of class row ``j`` on the hosts in ``idx``: gathered
        once while :meth:`gathering` them (read-only: the gather is shared)."""
        gathered = self._gathered
        if gathered is None or gathered[0] is not idx:
            return self._hosts.per_class[column][j].take(idx)
        values = gathered[1].get((column, j))
        if values is None:
            values = gathered[1][column, j] = self._hosts.per_class[column][j].take(idx)
        return values

    def free(self, rc: str, idx: np.ndarray) -> np.ndarray:
        """Free capacity of ``rc`` (allocation ratio applied) on the hosts in ``idx``."""
        j = self._rc.get(rc)
        if j is None:
            return np.zeros(len(idx), dtype=np.int64)
        return self._of_hosts("capacity", j, idx) - self._of_hosts("used", j, idx)

    def free_of_overcommitted_total(self, rc: str, idx: np.ndarray) -> np.ndarray:
        """``total * ratio - reserved - used`` of ``rc`` on the hosts in ``idx``
        (floats): the ratio scales the total only, the reserved amount counting
        as used, once and unscaled, as Nova's resource tracker counts reserved
        host vCPUs."""
        j = self._rc.get(rc)
        if j is None:
            return np.zeros(len(idx), dtype=np.float64)
        scaled = self._of_hosts("total", j, idx) * self._of_hosts("ratio", j, idx)
        return scaled - self._of_hosts("reserved", j, idx) - self._of_hosts("used", j, idx)

    def free_ignoring_ratio(self, rc: str, idx: np.ndarray) -> np.ndarray:
        """Physically free ``rc`` (total - reserved - used) on the hosts in ``idx``."""
        j = self._rc.get(rc)
        if j is None:
            return np.zeros(len(idx), dtype=np.int64)
        physical = self._of_hosts("total", j, idx) - self._of_hosts("reserved", j, idx)
        return physical - self._of_hosts("used", j, idx)

    def used_fractions(
        self, rcs: Sequence[str], idx: np.ndarray, adding: Sequence[int] | None = None
    ) -> np.ndarray:
        """Per class of ``rcs`` (rows) and host of ``idx`` (columns): the share of
        the capacity (allocation ratio applied) in use, with ``adding`` (one
        amount per class) placed too; NaN where a host has no capacity of the
        class. One gather per class row, and no mask where every host has
        capacity (the common case: the weighers ask it for every decision)."""
        out = np.empty((len(rcs), len(idx)))
        for k, rc in enumerate(rcs):
            j = self._rc.get(rc)
            if j is None:
                out[k] = np.nan
                continue
            cap = self._of_hosts("capacity", j, idx)
            num = self._of_hosts("used", j, idx)
            if adding is not None and adding[k]:
                num = num + adding[k]  # exact in int64, as the float sum it stands for
            if cap.min(initial=1) > 0:
                np.true_divide(num, cap, out=out[k])
            else:
                out[k] = np.nan
                np.true_divide(num, cap, out=out[k], where=cap > 0)
        return out

    def aggregate_lowest(
        self,
        key: str,
        default: float,
        idx: np.ndarray,
        number: Callable[[str], float] = float,
    ) -> float | np.ndarray:
        """Per host in ``idx``, the lowest number its aggregates' metadata ``key``
        gives, else ``default`` (see :meth:`HostCapabilities.aggregate_lowest`);
        ``default`` itself, one number, when no aggregate has the key."""
        per_set = self.capabilities.aggregate_lowest(key, default, self._agg_sets, number)
        if per_set is None:
            return default
        return per_set[self._hosts.per_row["agg_set"][idx]]

    def metadata_mask(
        self, predicate: Callable[[Mapping[str, frozenset[str]]], bool], idx: np.ndarray
    ) -> np.ndarray:
        """``predicate`` of each host's pooled aggregate metadata (every key's
        values over its aggregates, split on commas and stripped: see
        :meth:`HostCapabilities.pooled_metadata`), for the hosts in ``idx``;
        asked once per distinct aggregate set among them."""
        pooled = self.capabilities.pooled_metadata(self._agg_sets)
        codes = self._hosts.per_row["agg_set"][idx]
        ok = np.zeros(len(pooled), dtype=bool)
        for code in np.unique(codes):
            ok[code] = predicate(pooled[code])
        return ok[codes]

    def zone_mask(self, zone: str, idx: np.ndarray) -> np.ndarray:
        """Mask of the hosts in ``idx`` that belong to availability zone ``zone``.

        A host belongs to the zones its aggregates name; a host in none
        belongs to the default zone.
        """
        set_zones = self._zones_by_set()
        in_zone = np.fromiter(
            (zone in zones for zones in set_zones), dtype=bool, count=len(set_zones)
        )
        return in_zone[self._hosts.per_row["agg_set"][idx]]

    def zone_of(self, index: int, requested: str | None = None) -> str:
        """The availability zone of host ``index``, as :meth:`zone_mask` counts
        it: the one its aggregates name, else the default zone. A host its
        aggregates put in several zones is reported in ``requested`` when that
        is one of them (the zone it was chosen for), else in the first by name.
        """
        zones = self._zones_by_set()[int(self._hosts.per_row["agg_set"][index])]
        if requested is not None and requested in zones:
            return requested
        return min(zones)

    # --- internals ------------------------------------------------------------------

    def _clear(self) -> None:
        self._reshaped()
        self._hosts = _ProviderTable(_HOST_ROW_COLUMNS)
        self.names = []
        self.uuids = []
        self._index = {}
        self._uuid_index = {}
        self._folded = None
        self._rc: dict[str, int] = {}
        self._rc_names: list[str] = []
        self._aggregates = {}
        self._agg_sets: list[frozenset[str]] = [frozenset()]
        self._agg_set_codes: dict[frozenset[str], int] = {frozenset(): 0}
        self._set_zones = None
        self._agg_names: dict[str, list[str]] | None = None
        self._waiting: dict[str, Service] = {}  # services of hosts not in the view yet
        # traits and aggregates: a bit each, words of them per provider row
        self._trait_ids: dict[str, int] = {}
        self._agg_ids: dict[str, int] = {}
        self._words_of = dict.fromkeys(_BIT_KINDS, 1)
        # child providers
        self._kids = _ProviderTable(_KID_ROW_COLUMNS)
        self._kid_uuids: list[str] = []
        self._kid_index: dict[str, int] = {}
        self._kid_pending: dict[str, list[Provider]] = {}  # root uuid -> kids seen before it
        self._kid_classes: set[str] = set()  # classes some child has inventory of
        self.capabilities.clear()

    # The whole buffers behind three host columns (``used`` and the others give
    # the live rows), for the tests that arrange or snapshot them.

    @property
    def _used(self) -> np.ndarray:
        return self._hosts.per_class["used"]

    @property
    def _consumers(self) -> np.ndarray:
        return self._hosts.per_row["consumers"]

    @property
    def _last_seen(self) -> np.ndarray:
        return self._hosts.per_row["last_seen"]

    def _bit(self, ids: dict[str, int], name: str, kind: str) -> int:
        """The bit of a trait (``kind="trait"``) or aggregate, widening the words."""
        bit = ids.get(name)
        if bit is None:
            self._reshaped()
            bit = ids[name] = len(ids)
            words = bit // _WORD + 1
            if words > self._words_of[kind]:
                self._words_of[kind] = words
                self._hosts.widen(kind)
                self._kids.widen(kind)
        return bit

    def _bit_rows(self, sets: Sequence[frozenset[str]], kind: str) -> np.ndarray:
        """One row of bit words per trait (``kind="trait"``) or aggregate set."""
        ids = self._trait_ids if kind == "trait" else self._agg_ids
        bits = [[self._bit(ids, name, kind) for name in names] for names in sets]
        table = np.zeros((len(sets), self._words_of[kind]), dtype=np.uint64)
        for row, row_bits in zip(table, bits, strict=True):
            _set_words(row, row_bits)
        return table

    def _resolve_aggregate(self, token: str) -> list[str]:
        """An aggregate named by uuid or by name: the uuids it may mean."""
        if token in self._agg_ids or token in self._aggregates:
            return [token]
        if self._agg_names is None:
            self._agg_names = {}
            for agg in self._aggregates.values():
                self._agg_names.setdefault(agg.name, []).append(agg.uuid)
        return self._agg_names.get(token, [])

    def _rc_row(self, rc: str) -> int:
        j = self._rc.get(rc)
        if j is None:
            self._reshaped()
            j = self._rc[rc] = len(self._rc_names)
            self._rc_names.append(rc)
            self._hosts.add_class()
            self._kids.add_class()
        return j

    def _agg_code(self, aggregates: frozenset[str]) -> int:
        code = self._agg_set_codes.get(aggregates)
        if code is None:
            code = self._agg_set_codes[aggregates] = len(self._agg_sets)
            self._agg_sets.append(aggregates)
            self._set_zones = None
        return code

    def _zones_by_set(self) -> list[frozenset[str]]:
        """The zones of each aggregate set (by its code), worked out once per
        change of the aggregates."""
        if self._set_zones is None:
            self._set_zones = [self._zones_of(s) for s in self._agg_sets]
        return self._set_zones

    def _zones_of(self, aggregates: frozenset[str]) -> frozenset[str]:
        zones = frozenset(
            agg.metadata[AZ_METADATA_KEY]
            for uuid in aggregates
            if (agg := self._aggregates.get(uuid)) is not None
            and agg.metadata.get(AZ_METADATA_KEY)
        )
        return zones or frozenset({self._default_zone})

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

    def _write_provider(self, table: _ProviderTable, row: int, p: Provider) -> None:
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
