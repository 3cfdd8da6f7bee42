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
is up whatever its newer heartbeats say.

A host is a root provider named after it (node = host name). Its child
providers (a GPU or PCI pool, a NUMA cell: any provider whose root is the
host) live in a second table of the same per-class columns (``kid_*``), each
row knowing its host; their inventories count toward the host, and the
candidate step (:mod:`scheduler.engine.placement`) asks both tables.

Traits and aggregates are bitsets: every trait name and aggregate uuid the
view has seen gets a bit, and each provider row holds ``uint64`` words of
them (hosts and children alike), so "required", "forbidden", "any of" and
"member of" are mask operations over all providers at once. A child
provider counts as a member of its root's aggregates too (as Placement
has it).

Only the first :attr:`size` rows of the buffers are hosts (they grow by
doubling); the public column attributes return exactly those rows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    Inventory,
    Provider,
    Service,
    Store,
)
from scheduler.store.columns import ServiceColumns

LOG = structlog.get_logger(__name__)

#: Changes read per call to :meth:`Store.changes` while catching up.
CHANGES_BATCH = 1000
#: Metadata key of an aggregate that names an availability zone.
AZ_METADATA_KEY = "availability_zone"

_INITIAL_ROWS = 64
#: (class, amount) unit-rule masks a view keeps between inventory writes.
_UNITS_CACHE_SIZE = 64
_WORD = 64

# Per resource class buffers: (attribute, dtype, fill value of an absent inventory).
_RC_COLUMNS: tuple[tuple[str, type, Any], ...] = (
    ("_total", np.int64, 0),
    ("_reserved", np.int64, 0),
    ("_ratio", np.float64, 1.0),
    ("_capacity", np.int64, 0),
    ("_used", np.int64, 0),
    ("_min_unit", np.int64, 0),
    ("_max_unit", np.int64, 0),
    ("_step", np.int64, 1),
)
# The per resource class buffers an Inventory fills, as _RC_COLUMNS has them,
# with how each reads it: (attribute, dtype, fill value, reader).
_INVENTORY_FIELDS: tuple[tuple[str, type, Any, Callable[[Inventory], Any]], ...] = (
    ("_total", np.int64, 0, lambda inv: inv.total),
    ("_reserved", np.int64, 0, lambda inv: inv.reserved),
    ("_ratio", np.float64, 1.0, lambda inv: inv.allocation_ratio),
    ("_capacity", np.int64, 0, lambda inv: inv.capacity),
    ("_min_unit", np.int64, 0, lambda inv: inv.min_unit),
    ("_max_unit", np.int64, 0, lambda inv: inv.effective_max_unit),
    ("_step", np.int64, 1, lambda inv: inv.step_size),
)
# Per host buffers: (attribute, dtype, fill value of a new row).
_HOST_COLUMNS: tuple[tuple[str, type, Any], ...] = (
    ("_generation", np.int64, -1),
    ("_consumers", np.int64, 0),
    ("_last_seen", np.float64, -math.inf),  # no service record: never seen, so down
    ("_has_service", np.bool_, False),
    ("_disabled", np.bool_, False),
    ("_failed_builds", np.int64, 0),
    ("_agg_set", np.int32, 0),
)


class _Column:
    """A read-only attribute giving the live rows of a buffer (a view, no copy)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = "_" + name

    def __get__(self, view: HostView, owner: type | None = None) -> np.ndarray:
        return getattr(view, self._attr)[..., :view.size]


class _KidColumn:
    """Like :class:`_Column`, for the child-provider table (``kid_x`` reads ``_k_x``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = "_k_" + name.removeprefix("kid_")

    def __get__(self, view: HostView, owner: type | None = None) -> np.ndarray:
        return getattr(view, self._attr)[..., :view.kid_size]


class HostView:
    """Columnar cache of the hosts a worker schedules onto."""

    total = _Column()
    reserved = _Column()
    ratio = _Column()
    capacity = _Column()
    used = _Column()
    min_unit = _Column()
    max_unit = _Column()
    step = _Column()
    generation = _Column()
    consumers = _Column()
    last_seen = _Column()
    disabled = _Column()
    failed_builds = _Column()
    agg_set = _Column()
    trait_bits = _Column()
    agg_bits = _Column()
    kid_capacity = _KidColumn()
    kid_used = _KidColumn()
    kid_host = _KidColumn()
    kid_trait_bits = _KidColumn()
    kid_agg_bits = _KidColumn()

    def __init__(self, store: Store, settings: EngineSettings) -> None:
        self._store = store
        self._default_zone = settings.default_availability_zone
        self._services_interval = settings.services_refresh_interval
        self._down_time = settings.service_down_time
        self._cursor: str | None = None
        self._services_read_at = -math.inf
        # What hosts report beyond inventory (capabilities, stats), for the
        # host filters and weighers; fed below wherever services, aggregates
        # or rows change (see scheduler/engine/capabilities.py).
        self.capabilities = HostCapabilities(store)
        self._clear()

    # --- reading the store ----------------------------------------------------------

    def refresh(self, now: float) -> None:
        """Catch up with the store: load once, then apply deltas.

        Falls back to a full reload when the cursor fell off the stream, and
        re-reads heartbeats when ``services_refresh_interval`` has passed.
        """
        if self._cursor is None:
            self.load(now)
            return
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
            self.load(now)
            return
        if now - self._services_read_at >= self._services_interval:
            self._read_heartbeats(self._store.heartbeats(self._liveness_in_doubt(now)), now)

    def load(self, now: float) -> None:
        """Rebuild the whole view from a compact snapshot, a column at a time.

        A value hosts share (an inventory, a set of traits or aggregates, a
        report) becomes row values once and is broadcast to its hosts by
        code (``per_value[codes]``): no Python work per host but the name
        and uuid indexes.
        """
        snap = self._store.compact_snapshot()
        self._clear()
        hosts = snap.hosts
        n = self.size = len(hosts)
        self._ensure_rows(n)
        self.names, self.uuids = hosts.names, hosts.uuids
        self._index = dict(zip(self.names, range(n), strict=True))
        self._uuid_index = dict(zip(self.uuids, range(n), strict=True))
        self._aggregates = {agg.uuid: agg for agg in snap.aggregates}
        for rc in dict.fromkeys(itertools.chain(*hosts.inventories, hosts.usage)):
            j = self._rc_row(rc)
            for attr, dtype, fill, value in _INVENTORY_FIELDS:
                per_value = np.array([value(invs[rc]) if rc in invs else fill
                                      for invs in hosts.inventories], dtype=dtype)
                getattr(self, attr)[j, :n] = per_value[hosts.inventory]
            if rc in hosts.usage:
                self._used[j, :n] = hosts.usage[rc]
        self._generation[:n] = hosts.generation
        self._consumers[:n] = hosts.consumers
        agg_codes = np.array([self._agg_code(aggs) for aggs in hosts.aggregate_sets],
                             dtype=np.int32)
        self._agg_set[:n] = agg_codes[hosts.aggregates]
        self._trait_bits[:n] = self._bit_rows(hosts.trait_sets, "trait")[hosts.traits]
        self._agg_bits[:n] = self._bit_rows(hosts.aggregate_sets, "agg")[hosts.aggregates]
        for p in snap.children:
            self._put_kid(p)
        rows = self._load_services(snap.services, now)
        self.capabilities.load(self._rows, rows, snap.services, snap.aggregates)
        self._cursor = snap.cursor
        LOG.info("host_view_loaded", hosts=n, children=self.kid_size, cursor=snap.cursor)

    def refresh_provider(self, uuid: str) -> None:
        """Re-read one provider (after a claim on it was refused)."""
        self._put_provider(self._store.get_provider(uuid))

    def consume(self, index: int, resources: Mapping[str, int]) -> None:
        """Account locally for a claim just made on host ``index``.

        The change feed later brings the same usage as absolute numbers, so
        this never counts twice.
        """
        for rc, amount in resources.items():
            self._used[self._rc_row(rc), index] += amount
        self._consumers[index] += 1
        self.capabilities.consumed(index, +1)

    def unconsume(self, index: int, resources: Mapping[str, int]) -> None:
        """Undo :meth:`consume` (a dry run, or claims released after a failure)."""
        for rc, amount in resources.items():
            self._used[self._rc_row(rc), index] -= amount
        self._consumers[index] -= 1
        self.capabilities.consumed(index, -1)

    def consume_allocation(self, index: int,
                           allocations: Mapping[str, Mapping[str, int]], sign: int = 1) -> None:
        """Account locally for a claim of ``allocations`` (per provider uuid) on
        host ``index``, its root and children alike; ``sign=-1`` undoes it."""
        for uuid, resources in allocations.items():
            k = self._kid_index.get(uuid)
            for rc, amount in resources.items():
                j = self._rc_row(rc)
                if k is None:
                    self._used[j, self._uuid_index[uuid]] += sign * amount
                else:
                    self._k_used[j, k] += sign * amount
        self._consumers[index] += sign
        self.capabilities.consumed(index, sign)

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

    def kids_of(self, idx: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The child providers of the hosts in ``idx`` (None: every host): their
        rows, and for each the position of its host in ``idx``."""
        if not self.kid_size:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        if idx is None:
            return np.arange(self.kid_size), self._k_host[:self.kid_size]
        where = np.full(self.size, -1, dtype=np.int64)
        where[idx] = np.arange(len(idx))
        pos = where[self._k_host[:self.kid_size]]
        kids = np.flatnonzero(pos >= 0)
        return kids, pos[kids]

    # providers: ``kid=False`` asks hosts' root providers (rows are host
    # indices), ``kid=True`` child providers (rows are kid rows).

    def _count(self, rows: np.ndarray | slice, kid: bool = False) -> int:
        if isinstance(rows, slice):
            return len(range(self.kid_size if kid else self.size)[rows])
        return len(rows)

    def can_give(self, rc: str, amount: int, rows: np.ndarray | slice, kid: bool = False,
                 extra: np.ndarray | None = None) -> np.ndarray:
        """Mask of the providers in ``rows`` that can give ``amount`` of ``rc``:
        free capacity (less ``extra``, already promised in this request), and
        min_unit, max_unit and step_size. A provider without the class cannot."""
        j = self._rc.get(rc)
        if j is None:
            return np.zeros(self._count(rows, kid), dtype=bool)
        p = "_k" if kid else ""
        free = getattr(self, p + "_capacity")[j, rows] - getattr(self, p + "_used")[j, rows]
        if extra is not None:
            free = free - extra
        ok = free >= amount
        ok &= self._units_allow(j, amount, kid)[rows]
        return ok

    def _units_allow(self, j: int, amount: int, kid: bool) -> np.ndarray:
        """Mask over every host (or child provider) whose min_unit, max_unit and
        step_size of class ``j`` allow ``amount``. Kept until an inventory is
        written (usage changes leave these rules alone), since every decision
        asks the same few amounts."""
        key = (kid, j, amount)
        mask = self._units_cache.get(key)
        if mask is None:
            p, n = ("_k", self.kid_size) if kid else ("", self.size)
            mask = rules.units_allow(amount, getattr(self, p + "_min_unit")[j, :n],
                                     getattr(self, p + "_max_unit")[j, :n],
                                     getattr(self, p + "_step")[j, :n])
            if len(self._units_cache) >= _UNITS_CACHE_SIZE:
                self._units_cache.clear()
            self._units_cache[key] = mask
        return mask

    def has_trait(self, trait: str, rows: np.ndarray | slice, kid: bool = False) -> np.ndarray:
        """Mask of the providers in ``rows`` that have ``trait``."""
        bit = self._trait_ids.get(trait)
        if bit is None:
            return np.zeros(self._count(rows, kid), dtype=bool)
        bits = self._k_trait_bits if kid else self._trait_bits
        return (bits[rows, bit // _WORD] & np.uint64(1 << (bit % _WORD))) != 0

    def in_any_trait(self, traits: Iterable[str], rows: np.ndarray | slice,
                     kid: bool = False) -> np.ndarray:
        """Mask of the providers in ``rows`` that have at least one of ``traits``."""
        words = self._words(self._trait_ids, traits, self._trait_words)
        if not words.any():
            return np.zeros(self._count(rows, kid), dtype=bool)
        bits = self._k_trait_bits if kid else self._trait_bits
        return (bits[rows] & words).any(axis=1)

    def trait_count(self, traits: Iterable[str], rows: np.ndarray | slice,
                    kid: bool = False) -> np.ndarray:
        """How many of ``traits`` each provider in ``rows`` has."""
        count = np.zeros(self._count(rows, kid), dtype=np.int64)
        for trait in traits:
            count += self.has_trait(trait, rows, kid)
        return count

    @staticmethod
    def _words(ids: Mapping[str, int], names: Iterable[str], width: int) -> np.ndarray:
        words = np.zeros(width, dtype=np.uint64)
        for name in names:
            bit = ids.get(name)
            if bit is not None:
                words[bit // _WORD] |= np.uint64(1 << (bit % _WORD))
        return words

    def in_any(self, aggregates: Iterable[str], rows: np.ndarray | slice,
               kid: bool = False) -> np.ndarray:
        """Mask of the providers in ``rows`` that are members of any of
        ``aggregates`` (uuids or names), a child through its root too."""
        uuids = [uuid for token in aggregates for uuid in self._resolve_aggregate(token)]
        words = self._words(self._agg_ids, uuids, self._agg_words)
        if not words.any():
            return np.zeros(self._count(rows, kid), dtype=bool)
        if kid:
            bits = self._k_agg_bits[rows] | self._agg_bits[self._k_host[rows]]
        else:
            bits = self._agg_bits[rows]
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
            self._folded = {}
            for i, name in enumerate(self.names):
                self._folded.setdefault(name.casefold(), []).append(i)
        found = [i for n in names for i in self._folded.get(n.casefold(), ())]
        return np.array(found, dtype=np.int64)

    def shortfalls(self, resources: Mapping[str, int],
                   idx: np.ndarray | None = None) -> list[tuple[str, np.ndarray]]:
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

    def free(self, rc: str, idx: np.ndarray) -> np.ndarray:
        """Free capacity of ``rc`` (allocation ratio applied) on the hosts in ``idx``."""
        j = self._rc.get(rc)
        if j is None:
            return np.zeros(len(idx), dtype=np.int64)
        return self._capacity[j, idx] - self._used[j, idx]

    def free_ignoring_ratio(self, rc: str, idx: np.ndarray) -> np.ndarray:
        """Physically free ``rc`` (total - reserved - used) on the hosts in ``idx``."""
        j = self._rc.get(rc)
        if j is None:
            return np.zeros(len(idx), dtype=np.int64)
        return self._total[j, idx] - self._reserved[j, idx] - self._used[j, idx]

    def zone_mask(self, zone: str, idx: np.ndarray) -> np.ndarray:
        """Mask of the hosts in ``idx`` that belong to availability zone ``zone``.

        A host belongs to the zones its aggregates name; a host in none
        belongs to the default zone.
        """
        if self._set_zones is None:
            self._set_zones = [self._zones_of(s) for s in self._agg_sets]
        in_zone = np.fromiter((zone in zones for zones in self._set_zones), dtype=bool,
                              count=len(self._set_zones))
        return in_zone[self._agg_set[idx]]

    # --- internals ------------------------------------------------------------------

    def _clear(self) -> None:
        self.size = 0
        self._units_cache: dict[tuple[bool, int, int], np.ndarray] = {}
        self.names: list[str] = []
        self.uuids: list[str] = []
        self._index: dict[str, int] = {}
        self._uuid_index: dict[str, int] = {}
        self._folded: dict[str, list[int]] | None = None  # casefolded name -> rows
        self._rows = 0
        self._rc: dict[str, int] = {}
        self._rc_names: list[str] = []
        for attr, dtype, _fill in _RC_COLUMNS:
            setattr(self, attr, np.zeros((0, 0), dtype=dtype))
        for attr, dtype, fill in _HOST_COLUMNS:
            setattr(self, attr, np.full(0, fill, dtype=dtype))
        self._aggregates: dict[str, Aggregate] = {}
        self._agg_sets: list[frozenset[str]] = [frozenset()]
        self._agg_set_codes: dict[frozenset[str], int] = {frozenset(): 0}
        self._set_zones: list[frozenset[str]] | None = None
        self._agg_names: dict[str, list[str]] | None = None
        self._waiting: dict[str, Service] = {}  # services of hosts not in the view yet
        # traits and aggregates: a bit each, words of them per provider row
        self._trait_ids: dict[str, int] = {}
        self._agg_ids: dict[str, int] = {}
        self._trait_words = self._agg_words = 1
        self._trait_bits = np.zeros((0, 1), dtype=np.uint64)
        self._agg_bits = np.zeros((0, 1), dtype=np.uint64)
        # child providers
        self.kid_size = 0
        self._kid_rows = 0
        self._kid_uuids: list[str] = []
        self._kid_index: dict[str, int] = {}
        self._kid_pending: dict[str, list[Provider]] = {}  # root uuid -> kids seen before it
        self._kid_classes: set[str] = set()  # classes some child has inventory of
        for attr, dtype, _fill in _RC_COLUMNS:
            setattr(self, "_k" + attr, np.zeros((0, 0), dtype=dtype))
        self._k_host = np.zeros(0, dtype=np.int64)
        self._k_generation = np.zeros(0, dtype=np.int64)
        self._k_trait_bits = np.zeros((0, 1), dtype=np.uint64)
        self._k_agg_bits = np.zeros((0, 1), dtype=np.uint64)
        self.capabilities.clear()

    def _ensure_rows(self, rows: int) -> None:
        if rows <= self._rows:
            return
        new_rows = max(rows, 2 * self._rows, _INITIAL_ROWS)
        for attr, dtype, fill in _RC_COLUMNS:
            old = getattr(self, attr)
            grown = np.full((old.shape[0], new_rows), fill, dtype=dtype)
            grown[:, :self._rows] = old
            setattr(self, attr, grown)
        for attr, dtype, fill in _HOST_COLUMNS:
            old = getattr(self, attr)
            grown = np.full(new_rows, fill, dtype=dtype)
            grown[:self._rows] = old
            setattr(self, attr, grown)
        for attr in ("_trait_bits", "_agg_bits"):
            old = getattr(self, attr)
            grown = np.zeros((new_rows, old.shape[1]), dtype=np.uint64)
            grown[:self._rows] = old
            setattr(self, attr, grown)
        self._rows = new_rows
        self.capabilities.grow(new_rows)

    def _ensure_kid_rows(self, rows: int) -> None:
        if rows <= self._kid_rows:
            return
        new_rows = max(rows, 2 * self._kid_rows, _INITIAL_ROWS)
        for attr, dtype, fill in _RC_COLUMNS:
            old = getattr(self, "_k" + attr)
            grown = np.full((old.shape[0], new_rows), fill, dtype=dtype)
            grown[:, :self._kid_rows] = old
            setattr(self, "_k" + attr, grown)
        for attr, fill in (("_k_host", -1), ("_k_generation", -1)):
            old = getattr(self, attr)
            grown = np.full(new_rows, fill, dtype=np.int64)
            grown[:self._kid_rows] = old
            setattr(self, attr, grown)
        for attr in ("_k_trait_bits", "_k_agg_bits"):
            old = getattr(self, attr)
            grown = np.zeros((new_rows, old.shape[1]), dtype=np.uint64)
            grown[:self._kid_rows] = old
            setattr(self, attr, grown)
        self._kid_rows = new_rows

    def _bit(self, ids: dict[str, int], name: str, kind: str) -> int:
        """The bit of a trait (``kind="trait"``) or aggregate, widening the words."""
        bit = ids.get(name)
        if bit is None:
            bit = ids[name] = len(ids)
            words = bit // _WORD + 1
            if words > getattr(self, f"_{kind}_words"):
                setattr(self, f"_{kind}_words", words)
                for attr in (f"_{kind}_bits", f"_k_{kind}_bits"):
                    old = getattr(self, attr)
                    setattr(self, attr, np.hstack(
                        [old, np.zeros((old.shape[0], 1), dtype=np.uint64)]))
        return bit

    def _set_bits(self, trait_bits: np.ndarray, agg_bits: np.ndarray, i: int,
                  p: Provider) -> None:
        """Write provider ``p``'s traits and aggregates into row ``i``.

        ``trait_bits`` / ``agg_bits`` name the table (hosts or kids); they are
        looked up again after each new bit, which may widen (replace) them.
        """
        t_attr = "_trait_bits" if trait_bits is self._trait_bits else "_k_trait_bits"
        a_attr = "_agg_bits" if agg_bits is self._agg_bits else "_k_agg_bits"
        t_bits = [self._bit(self._trait_ids, t, "trait") for t in p.traits]
        a_bits = [self._bit(self._agg_ids, a, "agg") for a in p.aggregates]
        for attr, bits in ((t_attr, t_bits), (a_attr, a_bits)):
            table = getattr(self, attr)
            table[i] = 0
            for bit in bits:
                table[i, bit // _WORD] |= np.uint64(1 << (bit % _WORD))

    def _bit_rows(self, sets: Sequence[frozenset[str]], kind: str) -> np.ndarray:
        """One row of bit words per trait (``kind="trait"``) or aggregate set."""
        ids = self._trait_ids if kind == "trait" else self._agg_ids
        bits = [[self._bit(ids, name, kind) for name in names] for names in sets]
        table = np.zeros((len(sets), getattr(self, f"_{kind}_words")), dtype=np.uint64)
        for row, row_bits in zip(table, bits, strict=True):
            for bit in row_bits:
                row[bit // _WORD] |= np.uint64(1 << (bit % _WORD))
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
            j = self._rc[rc] = len(self._rc_names)
            self._rc_names.append(rc)
            for attr, dtype, fill in _RC_COLUMNS:
                old = getattr(self, attr)
                setattr(self, attr, np.vstack([old, np.full((1, self._rows), fill, dtype=dtype)]))
                old = getattr(self, "_k" + attr)
                setattr(self, "_k" + attr,
                        np.vstack([old, np.full((1, self._kid_rows), fill, dtype=dtype)]))
        return j

    def _agg_code(self, aggregates: frozenset[str]) -> int:
        code = self._agg_set_codes.get(aggregates)
        if code is None:
            code = self._agg_set_codes[aggregates] = len(self._agg_sets)
            self._agg_sets.append(aggregates)
            self._set_zones = None
        return code

    def _zones_of(self, aggregates: frozenset[str]) -> frozenset[str]:
        zones = frozenset(
            agg.metadata[AZ_METADATA_KEY] for uuid in aggregates
            if (agg := self._aggregates.get(uuid)) is not None
            and agg.metadata.get(AZ_METADATA_KEY))
        return zones or frozenset({self._default_zone})

    def _apply(self, change: Change) -> None:
        if change.kind == "provider":
            self._put_provider(change.data)
        elif change.kind == "usage":
            self._put_usage(change.data)
        elif change.kind == "aggregate":
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
            LOG.error("corrupt_change_skipped", cursor=change.cursor,
                      key=change.data.kwargs.get("key"), reason=change.data.kwargs.get("reason"))
        else:
            LOG.warning("host_view_unknown_change", kind=change.kind, cursor=change.cursor)

    def _put_provider(self, p: Provider) -> None:
        if p.parent_uuid is not None:
            self._put_kid(p)
            return
        i = self._uuid_index.get(p.uuid)
        if i is None:
            i = self._add_row(p)
        elif p.generation < self._generation[i]:
            return  # older than what the view holds (a provider re-read got ahead)
        for rc in (*p.inventories, *p.usages):
            self._rc_row(rc)
        self._write_resources("", i, p)
        self._generation[i] = p.generation
        self._consumers[i] = p.consumers
        self._agg_set[i] = self._agg_code(frozenset(p.aggregates))
        self._set_bits(self._trait_bits, self._agg_bits, i, p)

    def _write_resources(self, prefix: str, col: int, p: Provider) -> None:
        """Fill column ``col`` of the per-class buffers (``prefix`` "" for hosts,
        "_k" for child providers) from ``p``'s inventories and usages; every
        class ``p`` names already has its row."""
        self._units_cache.clear()  # the unit rules may change, and the row count
        for attr, _dtype, fill in _RC_COLUMNS:
            getattr(self, prefix + attr)[:, col] = fill
        total, reserved, ratio, capacity, min_unit, max_unit, step, used = (
            getattr(self, prefix + name) for name in (
                "_total", "_reserved", "_ratio", "_capacity", "_min_unit", "_max_unit",
                "_step", "_used"))
        for rc, inv in p.inventories.items():
            j = self._rc[rc]
            total[j, col] = inv.total
            reserved[j, col] = inv.reserved
            ratio[j, col] = inv.allocation_ratio
            capacity[j, col] = inv.capacity
            min_unit[j, col] = inv.min_unit
            max_unit[j, col] = inv.effective_max_unit
            step[j, col] = inv.step_size
        for rc, amount in p.usages.items():
            used[self._rc[rc], col] = amount

    def _put_kid(self, p: Provider) -> None:
        """A child provider: its row in the kid table, counted toward its root's host."""
        root = p.root_uuid or p.parent_uuid or ""
        host = self._uuid_index.get(root)
        if host is None:  # its root is not in the view yet: add it with the root
            self._kid_pending.setdefault(root, []).append(p)
            return
        k = self._kid_index.get(p.uuid)
        if k is None:
            k = self.kid_size
            self._ensure_kid_rows(k + 1)
            self.kid_size = k + 1
            self._kid_uuids.append(p.uuid)
            self._kid_index[p.uuid] = k
        elif p.generation < self._k_generation[k]:
            return
        for rc in (*p.inventories, *p.usages):
            self._rc_row(rc)
        self._kid_classes.update(p.inventories)
        self._write_resources("_k", k, p)
        self._k_host[k] = host
        self._k_generation[k] = p.generation
        self._set_bits(self._k_trait_bits, self._k_agg_bits, k, p)

    def _put_usage(self, data: Mapping[str, Any]) -> None:
        k = self._kid_index.get(data["uuid"])
        if k is not None:
            if data["generation"] >= self._k_generation[k]:
                self._k_used[:, k] = 0
                for rc, amount in data["usages"].items():
                    self._k_used[self._rc_row(rc), k] = amount
                self._k_generation[k] = data["generation"]
            return
        i = self._uuid_index.get(data["uuid"])
        if i is None or data["generation"] < self._generation[i]:
            return  # unknown, or older than what the view holds
        self._used[:, i] = 0
        for rc, amount in data["usages"].items():
            self._used[self._rc_row(rc), i] = amount
        self._generation[i] = data["generation"]
        self._consumers[i] = data["consumers"]

    def _add_row(self, p: Provider) -> int:
        i = self.size
        self._ensure_rows(i + 1)
        self.size = i + 1
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
        self._has_service[i] = True
        self._last_seen[i] = max(self._last_seen[i], service.last_seen)
        self._disabled[i] = service.disabled
        self._failed_builds[i] = service.failed_builds
        self.capabilities.put_service(i, service)

    def _load_services(self, services: ServiceColumns, now: float) -> np.ndarray:
        """Apply a snapshot's service records in bulk; return each one's row
        (-1 for a host not in the view yet: that record waits for its provider)."""
        rows = np.fromiter(map(self._index.get, services.hosts, itertools.repeat(-1)),
                           dtype=np.int64, count=len(services))
        known = rows >= 0
        at = rows[known]
        self._has_service[at] = True
        self._last_seen[at] = services.last_seen[known]
        self._disabled[at] = services.disabled[known]
        self._failed_builds[at] = services.failed_builds[known]
        self._waiting = {services.hosts[k]: services.service(k) for k in np.flatnonzero(~known)}
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
        n = self.size
        certain = rules.is_up(now, self._last_seen[:n],
                              self._down_time - 2 * self._services_interval)
        return [self.names[i] for i in np.flatnonzero(self._has_service[:n] & ~certain)]

    def _read_heartbeats(self, seen: Mapping[str, float], now: float) -> None:
        """Move ``last_seen`` forward to these heartbeats, in bulk.

        Only rows with a service record take one: a host that heartbeats
        without having registered stays never seen, as it was.
        """
        rows = np.fromiter(map(self._index.get, seen, itertools.repeat(-1)), dtype=np.int64,
                           count=len(seen))
        when = np.fromiter(seen.values(), dtype=np.float64, count=len(seen))
        keep = rows >= 0
        keep[keep] = self._has_service[rows[keep]]
        rows, when = rows[keep], when[keep]
        self._last_seen[rows] = np.maximum(self._last_seen[rows], when)
        self._services_read_at = now
