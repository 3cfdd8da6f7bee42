"""Providers as rows: the columnar tables behind the host view.

A :class:`ProviderTable` holds one kind of provider of the
:class:`~scheduler.engine.hostview.HostView` (the hosts' root providers, or
their children) as numpy columns: per resource class (``total``,
``reserved``, ``ratio``, ``capacity``, ``used``, ``min_unit``, ``max_unit``,
``step``; a row per class, the last axis the provider), per row (those of
:data:`HOST_ROW_COLUMNS` or :data:`KID_ROW_COLUMNS`), and trait and
aggregate bit words. The buffers grow by doubling; which
:class:`~scheduler.store.base.Inventory` field fills which column is declared
once (:data:`_INVENTORY_COLUMNS`), for the bulk load and the per-row write
from the change feed alike. The view owns the resource classes and bits
(shared by its two tables) and tells each table when one is added.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import numpy as np

from scheduler import rules
from scheduler.store.base import Inventory, Provider

_INITIAL_ROWS = 64
#: (class, amount) unit-rule masks a provider table keeps between inventory writes.
_UNITS_CACHE_SIZE = 64
WORD = 64


def set_words(words: np.ndarray, bits: Iterable[int]) -> None:
    """Set ``bits`` in a row of ``uint64`` words (in place)."""
    for bit in bits:
        words[bit // WORD] |= np.uint64(1 << (bit % WORD))


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
#: (:meth:`ProviderTable.load_class`) and by the per-row write
#: (:meth:`ProviderTable.write_provider`) alike.
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
#: Each per-class column's value where a provider has no inventory of the class.
CLASS_FILL: Mapping[str, Any] = MappingProxyType({c.name: c.fill for c in _CLASS_COLUMNS})

# Per row buffers: (name, dtype, fill value of a new row).
_RowColumns = tuple[tuple[str, type, Any], ...]
HOST_ROW_COLUMNS: _RowColumns = (
    ("generation", np.int64, -1),
    ("consumers", np.int64, 0),
    ("last_seen", np.float64, -math.inf),  # no service record: never seen, so down
    ("has_service", np.bool_, False),
    ("disabled", np.bool_, False),
    ("failed_builds", np.int64, 0),
    ("agg_set", np.int32, 0),
)
KID_ROW_COLUMNS: _RowColumns = (
    ("generation", np.int64, -1),
    ("host", np.int64, -1),  # the row of its host in the host table
)
#: The bit tables of a provider table: one row of uint64 words per provider.
BIT_KINDS = ("trait", "agg")


class ProviderTable:
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
            kind: np.zeros((0, 1), dtype=np.uint64) for kind in BIT_KINDS
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
            for bit in kind_bits:  # as set_words, with no view of the row (this is per write)
                table[row, bit // WORD] |= np.uint64(1 << (bit % WORD))
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
        return (self.bits[kind][rows, bit // WORD] & np.uint64(1 << (bit % WORD))) != 0
