"""What hosts report beyond their inventory, as columns over the view's rows.

Inventory, usage and aggregates live in
:class:`~scheduler.engine.hostview.HostView`; this table holds what the
capability, image, NUMA, PCI, I/O and instance filters and weighers read.
The view owns one (``view.capabilities``), feeds it the service records and
aggregates it reads from the store, grows it with its rows, and tells it
about local placements; the filters only ask it questions.

Where the data comes from: a compute reports two mappings on its service
record (see :meth:`Store.report_services`), and only when they change,
never with heartbeats:

* ``capabilities`` (rarely changes), read as a :class:`CapabilityReport`:
  ``cpu_arch``, ``hypervisor_type``, ``hypervisor_version`` (an integer,
  ``major * 1,000,000 + minor * 1,000 + patch``), ``supported_instances``
  (``[arch, hypervisor type, vm mode]`` triples), ``numa_cells``
  (``{"cpus", "memory_mb"}`` each), ``pci_devices`` (``{"vendor_id",
  "product_id", "count"}`` pools of free devices) and any other attribute
  (strings, numbers, lists, nested mappings) for the capabilities filter;
* ``stats`` (counters that change with builds): :data:`IO_OPS_STAT`, builds
  in progress, and per image property value the instances running from an
  image with it (:func:`image_property_stat`).

Columns, all numpy, aligned with the view's rows:

* categorical columns (an int32 code per host into a short list of distinct
  values, code 0 for "not reported"): one per flattened attribute
  (``cpu_info:vendor``) and one for the set of supported instance triples.
  A question is evaluated once per distinct value and broadcast by code, so
  filters never loop over hosts;
* numeric columns: hypervisor version, I/O ops, one per stat, one per PCI
  pool (vendor, product), and NUMA cells padded to the widest host.

I/O ops are also counted locally: each placement this worker makes adds one
on its host until the compute's next report says how many builds really run
(as Nova's host state does). Only hosts that report the stat count locally;
a host that never reports it stays at 0 rather than drifting upwards.

Aggregate metadata, pooled per aggregate set of the view (``agg_set``), is
cached here for the aggregate filters and the per-aggregate weight
multipliers. Where instances run (the same/different host hints) is read
from the store on demand, for the few instances a hint names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import structlog

from scheduler.exceptions import ProviderNotFound
from scheduler.image_meta import canonical_arch, canonical_hv_type, canonical_vm_mode
from scheduler.store.base import Aggregate, PlacementReader, Service
from scheduler.store.columns import ServiceColumns

LOG = structlog.get_logger(__name__)

#: The stat a compute reports with its count of builds in progress.
IO_OPS_STAT = "num_io_ops"
_IMAGE_STAT_PREFIX = "image_props:"
#: Separator of nested capability keys (``cpu_info:features``), as in extra specs.
KEY_SEPARATOR = ":"


def image_property_stat(prop: str, value: str) -> str:
    """The stat counting a host's instances whose image has ``prop = value``."""
    return f"{_IMAGE_STAT_PREFIX}{prop}={value}"


# --- the report a compute sends -----------------------------------------------------


@dataclass(frozen=True)
class NumaCell:
    """One host NUMA cell: its CPUs and memory."""

    cpus: int
    memory_mb: int


@dataclass(frozen=True)
class PciPool:
    """Free PCI devices of one kind on a host."""

    vendor_id: str
    product_id: str
    count: int


Triple = tuple[str | None, str | None, str | None]


@dataclass(frozen=True)
class CapabilityReport:
    """A compute's capabilities, typed; ``extra`` holds any other attribute."""

    cpu_arch: str | None = None
    hypervisor_type: str | None = None
    hypervisor_version: int = 0
    supported_instances: tuple[Triple, ...] = ()
    numa_cells: tuple[NumaCell, ...] = ()
    pci_devices: tuple[PciPool, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    KNOWN = (
        "cpu_arch",
        "hypervisor_type",
        "hypervisor_version",
        "supported_instances",
        "numa_cells",
        "pci_devices",
    )

    def to_primitive(self) -> dict[str, Any]:
        out: dict[str, Any] = _thaw(self.extra)
        if self.cpu_arch is not None:
            out["cpu_arch"] = self.cpu_arch
        if self.hypervisor_type is not None:
            out["hypervisor_type"] = self.hypervisor_type
        if self.hypervisor_version:
            out["hypervisor_version"] = self.hypervisor_version
        if self.supported_instances:
            out["supported_instances"] = [list(t) for t in self.supported_instances]
        if self.numa_cells:
            out["numa_cells"] = [
                {"cpus": c.cpus, "memory_mb": c.memory_mb} for c in self.numa_cells
            ]
        if self.pci_devices:
            out["pci_devices"] = [
                {"vendor_id": p.vendor_id, "product_id": p.product_id, "count": p.count}
                for p in self.pci_devices
            ]
        return out

    @classmethod
    def from_primitive(cls, data: Mapping[str, Any]) -> CapabilityReport:
        """:raises ValueError: a known field has the wrong shape."""
        try:
            version = int(data.get("hypervisor_version") or 0)
            triples = tuple(
                (
                    canonical_arch(_opt_str(t[0])),
                    canonical_hv_type(_opt_str(t[1])),
                    canonical_vm_mode(_opt_str(t[2])),
                )
                for t in data.get("supported_instances") or ()
            )
            cells = tuple(
                NumaCell(int(c["cpus"]), int(c["memory_mb"])) for c in data.get("numa_cells") or ()
            )
            pools = tuple(
                PciPool(str(p["vendor_id"]).lower(), str(p["product_id"]).lower(), int(p["count"]))
                for p in data.get("pci_devices") or ()
            )
        except (TypeError, KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"unreadable capability report: {exc!r}") from None
        if (
            version < 0
            or any(c.cpus < 0 or c.memory_mb < 0 for c in cells)
            or any(p.count < 0 for p in pools)
        ):
            raise ValueError("capability report holds negative numbers")
        return cls(
            # As the driver reports them: ComputeCapabilitiesFilter compares them
            # so, as Nova does; only supported_instances (the image properties
            # filter's) is canonicalised, as the image's side is.
            cpu_arch=_opt_str(data.get("cpu_arch")),
            hypervisor_type=_opt_str(data.get("hypervisor_type")),
            hypervisor_version=version,
            supported_instances=triples,
            numa_cells=cells,
            pci_devices=pools,
            extra={k: v for k, v in data.items() if k not in cls.KNOWN},
        )

    def attributes(self) -> dict[str, Any]:
        """Every leaf attribute by its flattened key, lists as tuples."""
        out: dict[str, Any] = {}
        if self.cpu_arch is not None:
            out["cpu_arch"] = self.cpu_arch
        if self.hypervisor_type is not None:
            out["hypervisor_type"] = self.hypervisor_type
        if self.hypervisor_version:
            out["hypervisor_version"] = self.hypervisor_version
        _flatten(self.extra, "", out)
        return out


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _flatten(data: Mapping[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten(value, name + KEY_SEPARATOR, out)
        elif isinstance(value, list | tuple):
            out[name] = tuple(_hashable(v) for v in value)
        elif value is not None:
            out[name] = value


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return json.dumps(_thaw(value), sort_keys=True)
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


def _jsonable(value: Any) -> Any:
    """For json.dumps: a read-only mapping as a dict, anything else as text."""
    return dict(value) if isinstance(value, Mapping) else str(value)


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


# --- columns ------------------------------------------------------------------------

_INITIAL_ROWS = 64
#: Up to this many distinct values, a question is asked of all of them;
#: beyond, only of those the candidates hold.
_EVALUATE_ALL = 64


class _Categorical:
    """Hashable values as int32 codes; code 0 is "not reported" (value None)."""

    def __init__(self, rows: int) -> None:
        self.codes = np.zeros(rows, dtype=np.int32)
        self.values: list[Any] = [None]
        self._code: dict[Any, int] = {}

    def grow(self, rows: int) -> None:
        grown = np.zeros(rows, dtype=np.int32)
        grown[: len(self.codes)] = self.codes
        self.codes = grown

    def set(self, row: int | np.ndarray, value: Any) -> None:
        self.codes[row] = self.code(value)

    def code(self, value: Any) -> int:
        """The code of ``value`` (a new one for a value not seen before)."""
        if value is None:
            return 0
        code = self._code.get(value)
        if code is None:
            code = self._code[value] = len(self.values)
            self.values.append(value)
        return code

    def mask(self, predicate: Callable[[Any], bool], idx: np.ndarray) -> np.ndarray:
        """``predicate`` of each host's value (None when not reported), per candidate."""
        codes = self.codes[idx]
        if len(self.values) <= _EVALUATE_ALL:
            truth = np.fromiter(
                (predicate(v) for v in self.values), dtype=bool, count=len(self.values)
            )
            return truth[codes]
        present, inverse = np.unique(codes, return_inverse=True)
        truth = np.fromiter(
            (predicate(self.values[c]) for c in present), dtype=bool, count=len(present)
        )
        return truth[inverse]


def numeric_mask(values: np.ndarray, predicate: Callable[[Any], bool]) -> np.ndarray:
    """``predicate`` of each value, evaluated once per distinct value."""
    present, inverse = np.unique(values, return_inverse=True)
    truth = np.fromiter((predicate(v.item()) for v in present), dtype=bool, count=len(present))
    return truth[inverse]


@dataclass(frozen=True)
class _Parsed:
    """A report as the table writes it into a row."""

    attributes: Mapping[str, Any]
    version: int
    supported: frozenset[Triple] | None
    numa: tuple[NumaCell, ...]
    pci: Mapping[tuple[str, str], int]


#: Distinct reports remembered, parsed.
_CACHE_SIZE = 4096
#: A stat column's value on a host that does not report that stat.
_UNREPORTED = -1

_NOTHING = _Parsed(MappingProxyType({}), 0, None, (), MappingProxyType({}))


class HostCapabilities:
    """Columns of what hosts report, aligned with the owning view's rows."""

    def __init__(self, store: PlacementReader) -> None:
        self._store = store
        self.clear()

    # --- fed by the view ----------------------------------------------------------

    def clear(self) -> None:
        self._rows = 0
        self._attributes: dict[str, _Categorical] = {}
        self._supported = _Categorical(0)
        self._version = np.zeros(0, dtype=np.int64)
        self._io_ops = np.zeros(0, dtype=np.int64)
        self._counts_io = np.zeros(0, dtype=bool)
        self._stats: dict[str, np.ndarray] = {}
        self._pci: dict[tuple[str, str], np.ndarray] = {}
        self._numa = np.zeros((0, 0, 2), dtype=np.int64)  # row, cell, (cpus, memory_mb)
        # Which attribute and PCI columns, and which stat columns, a row has
        # values in (so that a new report can clear what the old one set).
        self._report_keys = _Categorical(0)
        self._stat_keys = _Categorical(0)
        self._parsed: dict[int, tuple[Mapping[str, Any], _Parsed]] = {}
        self._parsed_text: dict[str, _Parsed] = {}
        self._aggregates: dict[str, Aggregate] = {}
        self._agg_epoch = 0
        self._pooled: tuple[int, list[Mapping[str, frozenset[str]]]] = (-1, [])
        self._lowest: dict[
            tuple[str, float, Callable[[str], float]], tuple[int, np.ndarray | None]
        ] = {}
        self.grow(_INITIAL_ROWS)

    def grow(self, rows: int) -> None:
        """Make room for at least ``rows`` hosts."""
        if rows <= self._rows:
            return
        rows = max(rows, 2 * self._rows)
        for categorical in (
            *self._attributes.values(),
            self._supported,
            self._report_keys,
            self._stat_keys,
        ):
            categorical.grow(rows)
        self._version = _grown(self._version, rows)
        self._io_ops = _grown(self._io_ops, rows)
        self._counts_io = _grown(self._counts_io, rows)
        for name, column in self._stats.items():
            self._stats[name] = _grown(column, rows, _UNREPORTED)
        for pool, column in self._pci.items():
            self._pci[pool] = _grown(column, rows)
        numa = np.zeros((rows, self._numa.shape[1], 2), dtype=np.int64)
        numa[: self._rows] = self._numa
        self._numa = numa
        self._rows = rows

    def load(
        self,
        size: int,
        rows: np.ndarray,
        services: ServiceColumns,
        aggregates: Iterable[Aggregate],
    ) -> None:
        """Fill the columns from a snapshot's services, for a view of ``size``
        rows (``rows``: each service's row in the view, -1 for none).

        Capabilities a report at a time (hosts share a handful), stats a
        stat at a time: array operations, with no Python work per host.
        """
        self.clear()
        self.grow(size)
        self._aggregates = {agg.uuid: agg for agg in aggregates}
        present = np.flatnonzero(rows >= 0)  # the services of hosts in the view
        for code, which in _by_code(services.capabilities[present], present):
            parsed = self._parse(services.hosts[which[0]], services.capability_reports[code])
            self._write_report(rows[which], parsed)
        # Stats differ from host to host (counters): a column at a time, each
        # stat's value per distinct report broadcast by code.
        reports = [_stats(report) for report in services.stats_reports]
        codes, at = services.stats[present], rows[present]
        for name in dict.fromkeys(name for report in reports for name in report):
            per_report = np.array(
                [report.get(name, _UNREPORTED) for report in reports], dtype=np.int64
            )
            self._column(self._stats, name, _UNREPORTED)[at] = per_report[codes]
        self._take_io_ops(at)
        key_codes = np.array(
            [self._stat_keys.code(frozenset(report)) for report in reports], dtype=np.int32
        )
        self._stat_keys.codes[at] = key_codes[codes]

    def put_service(self, row: int, service: Service) -> None:
        """Write what ``service`` reports into ``row`` (replacing what it held)."""
        self.grow(row + 1)
        parsed = self._parse(service.host, service.capabilities)
        old_attrs, old_pci = self._report_keys.values[self._report_keys.codes[row]] or (
            frozenset(),
            frozenset(),
        )
        old_stats = self._stat_keys.values[self._stat_keys.codes[row]] or frozenset()
        for key in old_attrs - parsed.attributes.keys():
            self._attributes[key].set(row, None)
        for pool in old_pci - parsed.pci.keys():
            self._pci[pool][row] = 0
        self._write_report(row, parsed)
        stats = _stats(service.stats)
        for name in old_stats - stats.keys():
            self._stats[name][row] = _UNREPORTED
        for name, value in stats.items():
            self._column(self._stats, name, _UNREPORTED)[row] = value
        self._take_io_ops(row)
        self._stat_keys.set(row, frozenset(stats))

    def put_aggregate(self, aggregate: Aggregate) -> None:
        self._aggregates[aggregate.uuid] = aggregate
        self._agg_epoch += 1

    def consumed(self, row: int, instances: int) -> None:
        """``instances`` placed (negative: taken back) on ``row`` by this worker."""
        if self._counts_io[row]:
            self._io_ops[row] = max(int(self._io_ops[row]) + instances, 0)

    # --- questions ----------------------------------------------------------------

    def io_ops(self, idx: np.ndarray) -> np.ndarray:
        """Builds in progress per host (reported, plus this worker's since)."""
        return self._io_ops.take(idx)

    def hypervisor_version(self, idx: np.ndarray) -> np.ndarray:
        """Reported hypervisor version per host, 0 when unknown."""
        return self._version.take(idx)

    def has_attribute(self, key: str) -> bool:
        return key in self._attributes

    def attribute_mask(
        self, key: str, predicate: Callable[[Any], bool], idx: np.ndarray
    ) -> np.ndarray:
        """``predicate`` of each host's attribute ``key`` (None when not reported)."""
        column = self._attributes.get(key)
        if column is None:
            return np.full(len(idx), bool(predicate(None)))
        return column.mask(predicate, idx)

    def reports_attribute(self, key: str, idx: np.ndarray) -> np.ndarray:
        column = self._attributes.get(key)
        if column is None:
            return np.zeros(len(idx), dtype=bool)
        return column.codes[idx] != 0

    def attribute_numbers(self, key: str, idx: np.ndarray) -> np.ndarray:
        """Attribute ``key`` per host as a float: NaN where it is not reported,
        or is not a number (a bool is not one). Converted once per distinct value."""
        column = self._attributes.get(key)
        if column is None:
            return np.full(len(idx), np.nan)
        numbers = np.fromiter(
            (
                float(v) if isinstance(v, int | float) and not isinstance(v, bool) else np.nan
                for v in column.values
            ),
            dtype=np.float64,
            count=len(column.values),
        )
        return numbers[column.codes[idx]]

    def has_stat(self, name: str) -> bool:
        return name in self._stats

    def stat(self, name: str, idx: np.ndarray) -> np.ndarray:
        """A reported counter per host, 0 where not reported."""
        column = self._stats.get(name)
        if column is None:
            return np.zeros(len(idx), dtype=np.int64)
        return np.maximum(column[idx], 0)

    def reports_stat(self, name: str, idx: np.ndarray) -> np.ndarray:
        """Mask of the hosts that report counter ``name``."""
        column = self._stats.get(name)
        if column is None:
            return np.zeros(len(idx), dtype=bool)
        return column[idx] >= 0

    def supported_mask(
        self, predicate: Callable[[frozenset[Triple] | None], bool], idx: np.ndarray
    ) -> np.ndarray:
        """``predicate`` of each host's supported instance triples (None: none reported)."""
        return self._supported.mask(predicate, idx)

    def numa_cells(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """CPUs and memory per host NUMA cell: two (hosts, cells) arrays, 0-padded."""
        cells = self._numa[idx]
        return cells[..., 0], cells[..., 1]

    def pci_free(self, vendor_id: str, product_id: str | None, idx: np.ndarray) -> np.ndarray:
        """Free devices per host of a vendor and product (None: any product)."""
        vendor_id = vendor_id.lower()
        total = np.zeros(len(idx), dtype=np.int64)
        for (vendor, product), column in self._pci.items():
            if vendor == vendor_id and (product_id is None or product == product_id.lower()):
                total += column[idx]
        return total

    def pooled_metadata(
        self, sets: Sequence[frozenset[str]]
    ) -> list[Mapping[str, frozenset[str]]]:
        """Per aggregate set (by code), each metadata key's values across its
        aggregates, split on commas and stripped (as Nova pools them)."""
        epoch, pooled = self._pooled
        if epoch != self._agg_epoch:
            pooled = []
        for aggregates in sets[len(pooled) :]:
            values: dict[str, set[str]] = {}
            for uuid in aggregates:
                agg = self._aggregates.get(uuid)
                for key, value in agg.metadata.items() if agg is not None else ():
                    values.setdefault(key, set()).update(v.strip() for v in value.split(","))
            pooled.append(MappingProxyType({k: frozenset(v) for k, v in values.items()}))
        self._pooled = (self._agg_epoch, pooled)
        return pooled

    def aggregate_lowest(
        self,
        key: str,
        default: float,
        sets: Sequence[frozenset[str]],
        number: Callable[[str], float] = float,
    ) -> np.ndarray | None:
        """Per aggregate set, the lowest number its aggregates' metadata ``key``
        gives (a weigher's multiplier, a filter's limit), each value read with
        ``number`` (``int`` for a count); ``default`` where no aggregate of the
        set gives one, or where one of its values does not read (a number that
        is not finite included), as Nova falls back to the option. None when no
        aggregate has the key at all, so the default applies everywhere.

        Computed once per aggregate change and kept, so an unreadable value is
        logged once, not per request."""
        cache_key = (key, default, number)
        epoch, table = self._lowest.get(cache_key, (-1, None))
        if epoch == self._agg_epoch and (table is None or len(table) == len(sets)):
            return table
        setting = {
            uuid: agg.metadata[key]
            for uuid, agg in self._aggregates.items()
            if key in agg.metadata
        }
        if not setting:
            self._lowest[cache_key] = (self._agg_epoch, None)
            return None
        out = np.full(len(sets), default)
        for code, aggregates in enumerate(sets):
            values = [setting[uuid] for uuid in aggregates if uuid in setting]
            if not values:
                continue
            try:
                numbers = [number(v) for v in values]
            except ValueError:
                LOG.warning("aggregate_metadata_unreadable", key=key, values=values)
                continue
            if all(math.isfinite(n) for n in numbers):
                out[code] = min(numbers)
        self._lowest[cache_key] = (self._agg_epoch, out)
        return out

    def instance_rows(
        self, instance_uuids: Iterable[str], row_of_provider: Callable[[str], int | None]
    ) -> np.ndarray:
        """The rows of the hosts where these instances hold allocations.

        Read from the store (a round trip per instance: hints name a few);
        an instance the store does not know is on no host. An allocation on
        a nested provider counts for its root. A store that cannot be
        reached raises, as the claim would.
        """
        rows: set[int] = set()
        for uuid in instance_uuids:
            consumer = self._store.get_consumer(uuid)
            if consumer is None:
                continue
            for provider in consumer.allocations:
                row = row_of_provider(provider)
                if row is None:
                    try:
                        root = self._store.get_provider(provider).root_uuid
                    except ProviderNotFound:  # deleted meanwhile
                        continue
                    row = row_of_provider(root) if root else None
                if row is not None:
                    rows.add(row)
        return np.fromiter(rows, dtype=np.int64, count=len(rows))

    # --- internals ----------------------------------------------------------------

    def _attribute(self, key: str) -> _Categorical:
        column = self._attributes.get(key)
        if column is None:
            column = self._attributes[key] = _Categorical(self._rows)
        return column

    def _column(self, store: dict[Any, np.ndarray], key: Any, fill: int = 0) -> np.ndarray:
        column = store.get(key)
        if column is None:
            column = store[key] = np.full(self._rows, fill, dtype=np.int64)
        return column

    def _write_report(self, at: int | np.ndarray, parsed: _Parsed) -> None:
        """Write a parsed capability report into rows ``at`` (one, or all the
        hosts of a snapshot that share it); a row's columns for attributes and
        PCI pools the report leaves out are the caller's to clear."""
        for key, value in parsed.attributes.items():
            self._attribute(key).set(at, value)
        self._supported.set(at, parsed.supported)
        self._version[at] = parsed.version
        for pool, count in parsed.pci.items():
            self._column(self._pci, pool)[at] = count
        self._put_numa(at, parsed.numa)
        self._report_keys.set(at, (frozenset(parsed.attributes), frozenset(parsed.pci)))

    def _take_io_ops(self, at: int | np.ndarray) -> None:
        """Take the I/O ops of rows ``at`` from their reported stat (already
        written): a row that does not report it does not count them."""
        column = self._stats.get(IO_OPS_STAT)
        io_ops = column[at] if column is not None else np.full(np.shape(at), _UNREPORTED)
        self._counts_io[at] = io_ops >= 0
        self._io_ops[at] = np.maximum(io_ops, 0)

    def _put_numa(self, row: int | np.ndarray, cells: tuple[NumaCell, ...]) -> None:
        if len(cells) > self._numa.shape[1]:
            wider = np.zeros((self._rows, len(cells), 2), dtype=np.int64)
            wider[:, : self._numa.shape[1]] = self._numa
            self._numa = wider
        self._numa[row] = 0
        for k, cell in enumerate(cells):
            self._numa[row, k] = (cell.cpus, cell.memory_mb)

    def _parse(self, host: str, report: Mapping[str, Any]) -> _Parsed:
        """A host's report as row values, cached: hosts share a handful of reports.

        The cache is looked up by the report object first (the stores hand
        out one object per distinct report), then by its canonical JSON.
        """
        if not report:
            return _NOTHING
        hit = self._parsed.get(id(report))
        if hit is not None and hit[0] is report:
            return hit[1]
        text = json.dumps(report, sort_keys=True, default=_jsonable)
        parsed = self._parsed_text.get(text)
        if parsed is None:
            parsed = self._parse_report(host, report)
            if len(self._parsed_text) >= _CACHE_SIZE:
                self._parsed_text.clear()
            self._parsed_text[text] = parsed
        if len(self._parsed) >= _CACHE_SIZE:
            self._parsed.clear()
        self._parsed[id(report)] = (report, parsed)
        return parsed

    @staticmethod
    def _parse_report(host: str, report: Mapping[str, Any]) -> _Parsed:
        try:
            typed = CapabilityReport.from_primitive(report)
        except ValueError as exc:
            LOG.warning("capability_report_unreadable", host=host, error=str(exc))
            return _NOTHING
        pci: dict[tuple[str, str], int] = {}
        for pool in typed.pci_devices:
            key = (pool.vendor_id, pool.product_id)
            pci[key] = pci.get(key, 0) + pool.count
        return _Parsed(
            attributes=MappingProxyType(typed.attributes()),
            version=typed.hypervisor_version,
            supported=frozenset(typed.supported_instances) or None,
            numa=typed.numa_cells,
            pci=MappingProxyType(pci),
        )


def _stats(report: Mapping[str, Any]) -> dict[str, int]:
    """The integer stats of a stats report (anything else is ignored)."""
    return {
        name: max(value, 0)
        for name, value in report.items()
        if isinstance(value, int) and not isinstance(value, bool)
    }


def _by_code(codes: np.ndarray, items: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each code present in ``codes``, with the ``items`` (aligned) that hold it."""
    if not len(codes):
        return
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    starts = np.flatnonzero(np.diff(ordered, prepend=-1))
    for start, end in zip(starts, (*starts[1:], len(ordered)), strict=True):
        yield int(ordered[start]), items[order[start:end]]


def _grown(column: np.ndarray, rows: int, fill: Any = 0) -> np.ndarray:
    grown = np.full(rows, fill, dtype=column.dtype)
    grown[: len(column)] = column
    return grown
