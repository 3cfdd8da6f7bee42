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
per host; see :meth:`~scheduler.engine.viewfeed.ViewFeed.load`) and kept fresh by applying
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
:class:`~scheduler.engine.tables.ProviderTable`: the per-class columns, the
bit words and the row growth are written once, and which :class:`Inventory`
field fills which column is declared once, for the bulk load and the
per-row write from the change feed alike.

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

The view is one object in four modules, each a part a reader can take
alone: the tables (:mod:`scheduler.engine.tables`); the view's state, the
names of its rows, columns and bits and its change log
(:class:`~scheduler.engine.viewstate.ViewState`); how it follows the
store, the load, the deltas and the heartbeats
(:class:`~scheduler.engine.viewfeed.ViewFeed`, on the state); and here the
questions the pipeline asks (:class:`HostView`, on the feed). They are
bases of one class, not collaborators, because they share one state that
the questions read on every decision: a question reads the tables and the
vocabulary directly, with no hop through another object.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from scheduler.engine.settings import EngineSettings
from scheduler.engine.tables import CLASS_FILL, ProviderTable, set_words
from scheduler.engine.viewfeed import CHANGES_BATCH, ViewFeed
from scheduler.engine.viewstate import AZ_METADATA_KEY, CHANGE_LOG
from scheduler.store.base import Aggregate, ChangeFeed


@dataclass(frozen=True)
class UsageShift:
    """Many consumers' allocations as arrays (:meth:`HostView.usage_shift`):
    each consumer's host, and per table (hosts, then children) one entry per
    provider and class: its consumer's position, class row, provider row and
    amount."""

    hosts: np.ndarray
    parts: tuple[tuple[np.ndarray, ...], ...]


# Defined in the view's parts, and importable from here as they were.
__all__ = ["AZ_METADATA_KEY", "CHANGES_BATCH", "CHANGE_LOG", "HostView", "UsageShift"]


class _Column:
    """A read-only attribute giving the live rows of a column of the host table,
    or with ``kid=True`` of the child-provider table (a view, no copy)."""

    def __init__(self, name: str, kid: bool = False) -> None:
        self._name = name
        self._kid = kid

    def __get__(self, view: HostView, owner: type | None = None) -> np.ndarray:
        return (view._kids if self._kid else view._hosts).live(self._name)


class HostView(ViewFeed):
    """Columnar cache of the hosts a worker schedules onto: the questions the
    pipeline asks of it (its state, :class:`ViewState`, and how it follows
    the store, :class:`ViewFeed`, are its bases)."""

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
        # Per-class columns of the hosts being weighed, each gathered once
        # (see gathering()): those hosts, and (column, class row) -> values.
        self._gathered: tuple[np.ndarray, dict[tuple[str, int], np.ndarray]] | None = None
        super().__init__(store, settings)

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

    def _table(self, kid: bool) -> ProviderTable:
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
        set_words(words, (bit for name in names if (bit := ids.get(name)) is not None))
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

    def of_class(self, column: str, rc: str, idx: np.ndarray) -> np.ndarray:
        """Per-class column ``column`` (``total``, ``reserved``, ``ratio``,
        ``used``, ...) of ``rc`` on the root providers of the hosts in ``idx``:
        its no-inventory value (0; a ratio of 1.0) on those without the class."""
        j = self._rc.get(rc)
        if j is None:
            dtype = self._hosts.per_class[column].dtype
            return np.full(len(idx), CLASS_FILL[column], dtype=dtype)
        return self._of_hosts(column, j, idx)

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

    def usage_shift(
        self, held: Sequence[tuple[int, Mapping[str, Mapping[str, int]]]]
    ) -> UsageShift:
        """Many consumers' allocations (host index, amounts per provider uuid)
        as arrays, for :meth:`shift_usage` (valid while :attr:`epoch` stays)."""
        parts: list[tuple[list[int], list[int], list[int], list[int]]] = [
            ([], [], [], []),
            ([], [], [], []),
        ]
        for n, (_index, allocations) in enumerate(held):
            for uuid, amounts in allocations.items():
                k = self._kid_index.get(uuid)
                row = self._uuid_index.get(uuid) if k is None else k
                if row is None:
                    continue
                owners, js, rows, values = parts[k is not None]
                for rc, amount in amounts.items():
                    j = self._rc.get(rc)
                    if j is not None:
                        owners.append(n)
                        js.append(j)
                        rows.append(row)
                        values.append(amount)
        arrays = tuple(tuple(np.array(a, dtype=np.int64) for a in part) for part in parts)
        return UsageShift(np.array([index for index, _ in held], dtype=np.int64), arrays)

    def shift_usage(self, shift: UsageShift, chosen: np.ndarray | int, sign: int) -> None:
        """Take the ``chosen`` (a mask over its consumers, or one's position)
        of ``shift`` off the usage (``sign=-1``), or give them back (``+1``):
        one array operation per table. Neither the change log nor what the
        view awaits confirmation of moves: a caller gives back exactly what it
        took before anything else reads the view (the preemption search,
        under the engine's lock)."""
        for kid, (owners, js, rows, values) in zip((False, True), shift.parts, strict=True):
            picked: np.ndarray | slice
            if isinstance(chosen, int):  # its entries are together: owners ascend
                picked = slice(*np.searchsorted(owners, (chosen, chosen + 1)))
            else:
                picked = chosen[owners]
            used = self._table(kid).per_class["used"]
            np.add.at(used, (js[picked], rows[picked]), sign * values[picked])
        np.add.at(self._hosts.per_row["consumers"], shift.hosts[chosen], sign)

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
