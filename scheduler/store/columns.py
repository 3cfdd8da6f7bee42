"""The compact snapshot: what a host view loads at start, laid out as columns.

:meth:`Store.compact_snapshot` holds every provider, aggregate and service
(with its last heartbeat) and the feed cursor it is valid at, with no object
per host: root providers and services come as one column per field
(numpy arrays for numbers, lists for names), and a value that many hosts
share (an inventory, a set of traits or of aggregates, a capability or stats
report, an RPC server name) is given once and referred to by an integer code
per host. A host view fills its own columns from these with a few array
operations (``per_code[codes]``), so a cold load of 100,000 hosts builds
neither 100,000 provider objects nor 300,000 inventories, and decodes each
shared value once. Child providers (a GPU pool, a NUMA cell) are few, and
come whole.

The stores build the columns with :class:`HostColumnsBuilder` and
:class:`ServiceColumnsBuilder`, a record at a time (``add``) or, where a
store reads its records a page at a time, a page's worth of each field at
once (``add_columns``: at 300,000 hosts the Python work per host is what a
cold load costs); each shared value is looked up by a key the store chooses
(the JSON text it keeps, or the value itself when it is hashable) and
decoded only the first time.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from scheduler.store.records import Aggregate, Inventory, Provider, Service


@dataclass(frozen=True)
class HostColumns:
    """Root providers, sorted by uuid: entry ``i`` of every column is provider ``i``."""

    uuids: list[str]
    names: list[str]
    generation: np.ndarray  # int64
    consumers: np.ndarray  # int64
    #: resource class -> amount used per provider (int64; 0 where none)
    usage: Mapping[str, np.ndarray]
    inventory: np.ndarray  # int32, an index into ``inventories``
    inventories: Sequence[Mapping[str, Inventory]]
    traits: np.ndarray  # int32, an index into ``trait_sets``
    trait_sets: Sequence[frozenset[str]]
    aggregates: np.ndarray  # int32, an index into ``aggregate_sets``
    aggregate_sets: Sequence[frozenset[str]]

    def __len__(self) -> int:
        return len(self.uuids)

    def provider(self, i: int) -> Provider:
        """Provider ``i`` whole (a bulk load reads the columns instead)."""
        return Provider(
            uuid=self.uuids[i],
            name=self.names[i],
            generation=int(self.generation[i]),
            root_uuid=self.uuids[i],
            inventories=self.inventories[self.inventory[i]],
            usages={rc: int(used[i]) for rc, used in self.usage.items() if used[i]},
            traits=self.trait_sets[self.traits[i]],
            aggregates=self.aggregate_sets[self.aggregates[i]],
            consumers=int(self.consumers[i]),
        )


@dataclass(frozen=True)
class ServiceColumns:
    """Service records with their heartbeats, sorted by host."""

    hosts: list[str]
    rpc_server: np.ndarray  # int32, an index into ``rpc_servers``
    rpc_servers: Sequence[str]
    last_seen: np.ndarray  # float64
    disabled: np.ndarray  # bool
    disabled_reasons: list[str | None]
    failed_builds: np.ndarray  # int64
    capabilities: np.ndarray  # int32, an index into ``capability_reports``
    capability_reports: Sequence[Mapping[str, Any]]
    stats: np.ndarray  # int32, an index into ``stats_reports``
    stats_reports: Sequence[Mapping[str, int]]

    def __len__(self) -> int:
        return len(self.hosts)

    def service(self, i: int) -> Service:
        """Service ``i`` whole (a bulk load reads the columns instead)."""
        return Service(
            host=self.hosts[i],
            rpc_server=self.rpc_servers[self.rpc_server[i]],
            last_seen=float(self.last_seen[i]),
            disabled=bool(self.disabled[i]),
            disabled_reason=self.disabled_reasons[i],
            failed_builds=int(self.failed_builds[i]),
            capabilities=self.capability_reports[self.capabilities[i]],
            stats=self.stats_reports[self.stats[i]],
        )


@dataclass(frozen=True)
class CompactSnapshot:
    """Everything a host view needs at start, and the feed cursor it is valid at."""

    cursor: str
    hosts: HostColumns
    children: Sequence[Provider]
    aggregates: Sequence[Aggregate]
    services: ServiceColumns


# --- building them ------------------------------------------------------------------


class SharedValues:
    """The distinct values of a column, and each record's code into them."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._codes: dict[Hashable, int] = {}

    def code(self, key: Hashable, decode: Callable[[Any], Any]) -> int:
        """The code of the value ``key`` stands for; ``decode(key)`` makes the
        value the first time the key is seen."""
        code = self._codes.get(key)
        if code is None:
            value = decode(key)  # first: a key that cannot be decoded gets no code
            code = self._codes[key] = len(self.values)
            self.values.append(value)
        return code

    def codes(self, keys: Sequence[Hashable], decode: Callable[[Any], Any]) -> list[int]:
        """:meth:`code` of each key, looked up in bulk (a page of a cold load)."""
        found: list[int | None] = list(map(self._codes.get, keys))
        if None in found:
            pairs = zip(keys, found, strict=True)
            return [self.code(key, decode) if c is None else c for key, c in pairs]
        return found  # type: ignore[return-value]  # no None in it


def _same(value: Any) -> Any:
    return value


def _canonical(report: Mapping[str, Any]) -> str:
    """A report (a JSON object, maybe frozen) as canonical JSON text: its key."""
    return json.dumps(
        report, sort_keys=True, separators=(",", ":"), default=lambda value: dict(value)
    )


def _frozen_inventories(items: tuple[tuple[str, Inventory], ...]) -> Mapping[str, Inventory]:
    return MappingProxyType(dict(items))


def _ints(values: array) -> np.ndarray:
    return np.frombuffer(values, dtype=np.int64)


def _codes(values: array) -> np.ndarray:
    return np.frombuffer(values, dtype=np.int32)


def _order(keys: list[str], sort: bool) -> list[int]:
    if not sort:
        return list(range(len(keys)))
    return sorted(range(len(keys)), key=keys.__getitem__)


def _reordered(values: list[Any], order: list[int]) -> list[Any]:
    return list(map(values.__getitem__, order))


class HostColumnsBuilder:
    """Root providers, added one at a time, as :class:`HostColumns`.

    A store passes each provider's own fields to :meth:`add` with the codes
    of its shared ones, from ``inventories``, ``trait_sets`` and
    ``aggregate_sets`` (:meth:`SharedValues.code`).
    """

    def __init__(self) -> None:
        self.inventories = SharedValues()
        self.trait_sets = SharedValues()
        self.aggregate_sets = SharedValues()
        self._classes = SharedValues()
        self._uuids: list[str] = []
        self._names: list[str] = []
        self._generation = array("q")
        self._consumers = array("q")
        self._inventory = array("i")
        self._traits = array("i")
        self._aggregates = array("i")
        # usage as (record, class code, amount) triples: records use a few classes
        self._usage_at = array("q")
        self._usage_class = array("i")
        self._usage_amount = array("q")

    def add(
        self,
        uuid: str,
        name: str,
        generation: int,
        consumers: int,
        usages: Mapping[str, int],
        inventory: int,
        traits: int,
        aggregates: int,
    ) -> None:
        at = len(self._uuids)
        self._uuids.append(uuid)
        self._names.append(name)
        self._generation.append(generation)
        self._consumers.append(consumers)
        self._inventory.append(inventory)
        self._traits.append(traits)
        self._aggregates.append(aggregates)
        for rc, amount in usages.items():
            self._usage_at.append(at)
            self._usage_class.append(self._classes.code(rc, _same))
            self._usage_amount.append(amount)

    def add_columns(
        self,
        uuids: Sequence[str],
        names: Sequence[str],
        generation: np.ndarray,
        consumers: np.ndarray,
        usage: Mapping[str, np.ndarray],
        inventory: Sequence[int],
        traits: Sequence[int],
        aggregates: Sequence[int],
    ) -> None:
        """Many providers at once, as :meth:`add` would add them one by one:
        entry ``i`` of each argument is one provider's (``usage``: the amount
        used of each class named, 0 where a provider uses none)."""
        at = len(self._uuids)
        self._uuids.extend(uuids)
        self._names.extend(names)
        self._generation.frombytes(np.asarray(generation, dtype=np.int64).tobytes())
        self._consumers.frombytes(np.asarray(consumers, dtype=np.int64).tobytes())
        self._inventory.extend(inventory)
        self._traits.extend(traits)
        self._aggregates.extend(aggregates)
        for rc, amounts in usage.items():
            code = self._classes.code(rc, _same)  # named: a column, even if all 0
            rows = np.flatnonzero(amounts)
            self._usage_at.frombytes((rows + at).astype(np.int64).tobytes())
            self._usage_class.frombytes(np.full(len(rows), code, dtype=np.int32).tobytes())
            self._usage_amount.frombytes(np.asarray(amounts, dtype=np.int64)[rows].tobytes())

    def add_provider(self, p: Provider) -> None:
        """A :class:`Provider` object (the in-memory stores keep them)."""
        self.add(
            p.uuid,
            p.name,
            p.generation,
            p.consumers,
            p.usages,
            inventory=self.inventories.code(tuple(p.inventories.items()), _frozen_inventories),
            traits=self.trait_sets.code(frozenset(p.traits), _same),
            aggregates=self.aggregate_sets.code(frozenset(p.aggregates), _same),
        )

    def build(self, sort: bool = True) -> HostColumns:
        """The columns, sorted by uuid (``sort=False``: in the order added)."""
        n = len(self._uuids)
        listed = _order(self._uuids, sort)
        order = np.array(listed, dtype=np.int64)
        position = np.empty(n, dtype=np.int64)  # record -> its row once sorted
        position[order] = np.arange(n)
        at, amount = position[_ints(self._usage_at)], _ints(self._usage_amount)
        of_class = _codes(self._usage_class)
        usage = {}
        for code, rc in enumerate(self._classes.values):
            used = np.zeros(n, dtype=np.int64)
            mine = of_class == code
            used[at[mine]] = amount[mine]
            usage[rc] = used
        return HostColumns(
            uuids=_reordered(self._uuids, listed),
            names=_reordered(self._names, listed),
            generation=_ints(self._generation)[order],
            consumers=_ints(self._consumers)[order],
            usage=usage,
            inventory=_codes(self._inventory)[order],
            inventories=self.inventories.values,
            traits=_codes(self._traits)[order],
            trait_sets=self.trait_sets.values,
            aggregates=_codes(self._aggregates)[order],
            aggregate_sets=self.aggregate_sets.values,
        )


class ServiceColumnsBuilder:
    """Service records, added one at a time, as :class:`ServiceColumns`.

    Shared values (RPC server names, capability and stats reports) get their
    codes from ``rpc_servers``, ``capability_reports`` and ``stats_reports``.
    """

    def __init__(self) -> None:
        self.rpc_servers = SharedValues()
        self.capability_reports = SharedValues()
        self.stats_reports = SharedValues()
        self._hosts: list[str] = []
        self._reasons: list[str | None] = []
        self._rpc_server = array("i")
        self._last_seen = array("d")
        self._disabled = array("b")
        self._failed_builds = array("q")
        self._capabilities = array("i")
        self._stats = array("i")

    def add(
        self,
        host: str,
        rpc_server: int,
        last_seen: float,
        disabled: bool,
        disabled_reason: str | None,
        failed_builds: int,
        capabilities: int,
        stats: int,
    ) -> None:
        self._hosts.append(host)
        self._rpc_server.append(rpc_server)
        self._last_seen.append(last_seen)
        self._disabled.append(disabled)
        self._reasons.append(disabled_reason)
        self._failed_builds.append(failed_builds)
        self._capabilities.append(capabilities)
        self._stats.append(stats)

    def add_columns(
        self,
        hosts: Sequence[str],
        rpc_server: Sequence[int],
        last_seen: np.ndarray,
        disabled: np.ndarray,
        disabled_reasons: Sequence[str | None],
        failed_builds: np.ndarray,
        capabilities: Sequence[int],
        stats: Sequence[int],
    ) -> None:
        """Many services at once, as :meth:`add` would add them one by one."""
        self._hosts.extend(hosts)
        self._rpc_server.extend(rpc_server)
        self._last_seen.frombytes(np.asarray(last_seen, dtype=np.float64).tobytes())
        self._disabled.frombytes(np.asarray(disabled, dtype=np.int8).tobytes())
        self._reasons.extend(disabled_reasons)
        self._failed_builds.frombytes(np.asarray(failed_builds, dtype=np.int64).tobytes())
        self._capabilities.extend(capabilities)
        self._stats.extend(stats)

    def add_service(self, s: Service, last_seen: float | None = None) -> None:
        """A :class:`Service` object (the in-memory stores keep them), its
        ``last_seen`` unless given. Equal reports share a code."""
        self.add(
            s.host,
            self.rpc_servers.code(s.rpc_server, _same),
            s.last_seen if last_seen is None else last_seen,
            s.disabled,
            s.disabled_reason,
            s.failed_builds,
            capabilities=self.capability_reports.code(
                _canonical(s.capabilities), lambda _text: s.capabilities
            ),
            stats=self.stats_reports.code(_canonical(s.stats), lambda _text: s.stats),
        )

    def build(self, sort: bool = True) -> ServiceColumns:
        """The columns, sorted by host (``sort=False``: in the order added)."""
        listed = _order(self._hosts, sort)
        order = np.array(listed, dtype=np.int64)
        last_seen = np.frombuffer(self._last_seen, dtype=np.float64)
        disabled = np.frombuffer(self._disabled, dtype=np.int8)
        return ServiceColumns(
            hosts=_reordered(self._hosts, listed),
            rpc_server=_codes(self._rpc_server)[order],
            rpc_servers=self.rpc_servers.values,
            last_seen=last_seen[order],
            disabled=disabled[order].astype(bool),
            disabled_reasons=_reordered(self._reasons, listed),
            failed_builds=_ints(self._failed_builds)[order],
            capabilities=_codes(self._capabilities)[order],
            capability_reports=self.capability_reports.values,
            stats=_codes(self._stats)[order],
            stats_reports=self.stats_reports.values,
        )
