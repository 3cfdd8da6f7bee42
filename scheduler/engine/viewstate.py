"""The host view's state: its two provider tables and what names their rows,
columns and bits, and the log of what changed.

:class:`ViewState` is the base of :class:`~scheduler.engine.hostview.HostView`
(see its module doc for the whole): the host and child-provider tables
(:class:`~scheduler.engine.tables.ProviderTable`), the host names and uuids
and their indexes, the vocabulary that maps a resource class to its column
row and a trait or aggregate to its bit (widening the tables as new ones
appear), the distinct aggregate sets and their zones, and the change log
and epoch that those who keep answers per host read. The feed that writes
it (:mod:`scheduler.engine.viewfeed`) and the questions that read it
(:mod:`scheduler.engine.hostview`) build on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduler.engine.capabilities import HostCapabilities
from scheduler.engine.settings import EngineSettings
from scheduler.engine.tables import (
    BIT_KINDS,
    HOST_ROW_COLUMNS,
    KID_ROW_COLUMNS,
    WORD,
    ProviderTable,
    set_words,
)
from scheduler.store.base import Aggregate, ChangeFeed, Provider, Service

#: Metadata key of an aggregate that names an availability zone.
AZ_METADATA_KEY = "availability_zone"
#: Changed rows the view remembers (see :meth:`ViewState.changed_since`).
CHANGE_LOG = 8192


class ViewState:
    """The rows, the names of rows, columns and bits, and the change log of a
    host view (see the module doc)."""

    # Set by _clear() and by the cold load.
    names: list[str]
    uuids: list[str]
    _index: dict[str, int]
    _uuid_index: dict[str, int]
    _folded: dict[str, list[int]] | None  # casefolded name -> rows
    _aggregates: dict[str, Aggregate]
    _set_zones: list[frozenset[str]] | None

    def __init__(self, store: ChangeFeed, settings: EngineSettings) -> None:
        self._store = store
        self._default_zone = settings.default_availability_zone
        # What hosts report beyond inventory (capabilities, stats), for the
        # host filters and weighers; fed wherever services, aggregates or
        # rows change (see scheduler/engine/capabilities.py).
        self.capabilities = HostCapabilities(store)
        #: Moves on at every change of the view's shape (see the module doc).
        self.epoch = 0
        # The log of changed host rows: entry k is change number _log_start + k.
        self._log: list[int] = []
        self._log_start = 0
        self._clear()

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

    # --- internals ------------------------------------------------------------------

    def _clear(self) -> None:
        self._reshaped()
        self._hosts = ProviderTable(HOST_ROW_COLUMNS)
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
        self._words_of = dict.fromkeys(BIT_KINDS, 1)
        # child providers
        self._kids = ProviderTable(KID_ROW_COLUMNS)
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
            words = bit // WORD + 1
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
            set_words(row, row_bits)
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
