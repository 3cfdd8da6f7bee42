"""The Redis store's change feed: the compact snapshot a host view starts
from (read in HSCAN pages, a page's records into columns at once) and the
changes after its cursor (:class:`scheduler.store.base.ChangeFeed`)."""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from scheduler.exceptions import CorruptRecord
from scheduler.log import get_logger
from scheduler.store.base import CORRUPT_CHANGE, Change, cursor_key
from scheduler.store.columns import CompactSnapshot, HostColumnsBuilder, ServiceColumnsBuilder
from scheduler.store.redis_base import PAGE, RedisBase
from scheduler.store.redis_codec import (
    each,
    parse,
    read_aggregate,
    read_inventories,
    read_provider,
    read_report,
    read_service,
    read_usage,
)
from scheduler.store.redis_connect import translated

LOG = get_logger(__name__)


def _decoded(page: Mapping[str, str], key: str) -> tuple[list[str], list[dict[str, Any]]]:
    """One HSCAN page as its fields and their records, its values decoded by
    one ``json.loads`` of an array.

    A page that does not read as one array of objects, one per value, is
    read value by value instead, and a value that is not a JSON object is
    logged (``corrupt_record``, with its key and field) and skipped.
    """
    names, raws = list(page), list(page.values())
    try:
        records = json.loads(f"[{','.join(raws)}]")
    except (ValueError, RecursionError):
        records = None
    if records is not None and len(records) == len(names) and _all(dict, records):
        return names, records
    read = [(name, _object(raw, f"{key}[{name}]")) for name, raw in zip(names, raws, strict=True)]
    kept = [(name, record) for name, record in read if record is not None]
    return [name for name, _ in kept], [record for _, record in kept]


def _object(raw: str, where: str) -> dict[str, Any] | None:
    """One value that must be a JSON object; None (logged, as ``each`` does)
    when it is not."""
    try:
        return parse(_as_object, raw, where)
    except CorruptRecord as exc:
        LOG.error("corrupt_record", key=exc.kwargs["key"], reason=exc.kwargs["reason"])
        return None


def _as_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"not an object: {type(value).__name__}")
    return value


#: What reading a decoded record into columns may raise: it is then skipped.
_UNREADABLE = (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError)


def _host_row(d: dict[str, Any], hosts: HostColumnsBuilder) -> tuple[Any, ...]:
    """A root provider's arguments to :meth:`HostColumnsBuilder.add`, every
    field read and checked first, so that a bad one adds nothing."""
    return (
        _text(d["uuid"]),
        _text(d["name"]),
        int(d["generation"]),
        int(d["consumers"]),
        {_text(rc): int(n) for rc, n in d["usages"].items()},
        hosts.inventories.code(d["inventories"], read_inventories),
        hosts.trait_sets.code(tuple(d["traits"]), frozenset),
        hosts.aggregate_sets.code(tuple(d["aggregates"]), frozenset),
    )


def _service_row(
    d: dict[str, Any], seen: Mapping[str, str], table: ServiceColumnsBuilder
) -> tuple[Any, ...]:
    """A service's arguments to :meth:`ServiceColumnsBuilder.add`, checked first."""
    host = _text(d["host"])
    return (
        host,
        table.rpc_servers.code(_text(d["rpc_server"]), str),
        float(seen.get(host) or 0),
        bool(d["disabled"]),
        d["disabled_reason"],
        int(d["failed_builds"]),
        table.capability_reports.code(d.get("capabilities") or "{}", read_report),
        table.stats_reports.code(d.get("stats") or "{}", read_report),
    )


#: A root provider's fields, as :func:`_add_hosts` reads them from each record.
_HOST_FIELDS = operator.itemgetter(
    "uuid", "name", "generation", "consumers", "usages", "inventories", "traits", "aggregates"
)


#: A service's fields, as :func:`_add_services` reads them (reports come apart).
_SERVICE_FIELDS = operator.itemgetter(
    "host", "rpc_server", "disabled", "disabled_reason", "failed_builds"
)


def _all(kind: type, values: Iterable[Any]) -> bool:
    """Whether every value is exactly of ``kind`` (not a subclass: no bool for int)."""
    return set(map(type, values)) <= {kind}


def _field(records: Sequence[dict[str, Any]], name: str, default: Any = None) -> list[Any]:
    """Each record's ``name`` (``default`` where it has none), in one C-level pass."""
    return list(map(dict.get, records, itertools.repeat(name), itertools.repeat(default)))


def _reports(records: Sequence[dict[str, Any]], name: str) -> list[Any]:
    """Each service's report ``name`` as its JSON text ('{}': none, as in old records)."""
    return [text or "{}" for text in _field(records, name)]


def _ints(values: Sequence[Any]) -> np.ndarray:
    """Python ints as int64 (OverflowError past its range)."""
    return np.array(values, dtype=np.int64)


def _add_hosts(records: Sequence[dict[str, Any]], hosts: HostColumnsBuilder) -> bool:
    """A page's root providers added in bulk, as :func:`_host_row` reads each:
    all of them, or (False) none, when any field is not as the scripts write
    it. The caller then reads that page a record at a time, which skips and
    logs just the records it cannot read.

    The cold load's cost is Python's, per host: this reads each field of a
    page as one list and each list into a column at once, and looks shared
    values up by their text (decoded the first time only).
    """
    if not records:
        return True
    try:
        uuids, names, generation, consumers, usages, inventories, traits, aggregates = zip(
            *map(_HOST_FIELDS, records), strict=True
        )
        if not (
            _all(str, uuids)
            and _all(str, names)
            and _all(int, generation)
            and _all(int, consumers)
            and _all(dict, usages)
            and _all(str, inventories)
        ):
            return False
        classes: set[Any] = set().union(*usages)
        if not _all(str, classes):
            return False
        # Each class's amounts as one array; all ints (an int64 array) or no bulk.
        usage = {rc: np.array(_field(usages, rc, 0)) for rc in sorted(classes)}
        if any(used.dtype != np.int64 for used in usage.values()):
            return False
        columns = (_ints(generation), _ints(consumers), usage)
        codes = (
            hosts.inventories.codes(inventories, read_inventories),
            hosts.trait_sets.codes(list(map(tuple, traits)), frozenset),
            hosts.aggregate_sets.codes(list(map(tuple, aggregates)), frozenset),
        )
    except _UNREADABLE:
        return False
    hosts.add_columns(uuids, names, *columns, *codes)
    return True


def _add_services(
    records: Sequence[dict[str, Any]], seen: Mapping[str, str], table: ServiceColumnsBuilder
) -> bool:
    """A page's services added in bulk, as :func:`_service_row` reads each: all
    of them, or (False) none (the caller then reads the page record by record)."""
    if not records:
        return True
    try:
        hosts, rpc_servers, disabled, reasons, failed_builds = zip(
            *map(_SERVICE_FIELDS, records), strict=True
        )
        if not (
            _all(str, hosts)
            and _all(str, rpc_servers)
            and _all(bool, disabled)
            and _all(int, failed_builds)
        ):
            return False
        last_seen = np.array([at or 0 for at in map(seen.get, hosts)], dtype=np.float64)
        columns = (np.array(disabled, dtype=bool), reasons, _ints(failed_builds))
        codes = (
            table.capability_reports.codes(_reports(records, "capabilities"), read_report),
            table.stats_reports.codes(_reports(records, "stats"), read_report),
        )
        rpc_codes = table.rpc_servers.codes(rpc_servers, str)
    except _UNREADABLE:
        return False
    table.add_columns(hosts, rpc_codes, last_seen, *columns, *codes)
    return True


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection inside (after: as it was before).

    A cold load decodes millions of short-lived objects: each page's records
    go as soon as the page is in columns (reference counting frees them, no
    cycles), but their allocation alone set off collections that traversed
    whatever else was young, some 20% of the load's CPU time at 300,000 hosts.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


class RedisFeed(RedisBase):
    """The compact snapshot and the changes after its cursor."""

    @translated
    def compact_snapshot(self, batch: int = PAGE) -> CompactSnapshot:
        """The cursor first, then every hash in HSCAN pages of ``batch``.

        No command reads a whole hash, so none holds Redis for longer than
        one page takes (see ``PAGE``), whatever the cloud's size. The
        records are decoded a page at a time (one ``json.loads`` per
        page) and go into columns a field at a time (:func:`_add_hosts`,
        :func:`_add_services`), each shared value (inventory, trait set,
        report) decoded once (see scheduler/store/columns.py); a page with a
        record that cannot be read so is read record by record, and that
        record is logged with its key and skipped, as the lists do.

        The pages are read after the cursor, while writes go on, so the
        snapshot is no one instant: each record is as it stood when its page
        was read, at or after the cursor. A host view replays the changes
        after the cursor over it and converges on the store (the argument is
        in :meth:`ChangeFeed.compact_snapshot`). The cursor is read as the
        changes script wants it: the stream's last-generated id, '0-0' when
        there is no stream yet.
        """
        cursor = str(self._scripts.snapshot(keys=(self.keys.changes,)))
        with _collector_paused():
            return self._read_snapshot(cursor, batch)

    def _read_snapshot(self, cursor: str, batch: int) -> CompactSnapshot:
        k = self.keys
        seen = self._whole(k.heartbeats, batch)
        table = ServiceColumnsBuilder()
        for page in self._pages(k.services, batch):
            names, services = _decoded(page, k.services)
            if _add_services(services, seen, table):
                continue
            for name, d in zip(names, services, strict=True):
                try:
                    table.add(*_service_row(d, seen, table))
                except _UNREADABLE as exc:
                    LOG.error(
                        "corrupt_record", key=f"{k.services}[{name}]", reason=repr(exc)[:200]
                    )
        del seen
        hosts, children = HostColumnsBuilder(), []
        for page in self._pages(k.providers, batch):
            names, records = _decoded(page, k.providers)
            # Roots (the most) in bulk; a child or an unreadable record alone.
            parents = _field(records, "parent_uuid", ...)
            alone = []
            if parents.count(None) != len(parents):
                alone = [i for i, parent in enumerate(parents) if parent is not None]
            if alone:
                roots = [d for d, parent in zip(records, parents, strict=True) if parent is None]
            else:
                roots = records
            if not _add_hosts(roots, hosts):
                alone = list(range(len(records)))
            for name, d in ((names[i], records[i]) for i in alone):
                try:
                    if d["parent_uuid"] is not None:
                        children.append(read_provider(d))
                    else:
                        hosts.add(*_host_row(d, hosts))
                except _UNREADABLE as exc:
                    LOG.error(
                        "corrupt_record", key=f"{k.providers}[{name}]", reason=repr(exc)[:200]
                    )
        aggregates = each(read_aggregate, self._scan(k.aggregates, batch), k.aggregates)
        return CompactSnapshot(
            cursor=cursor,
            hosts=hosts.build(),
            children=sorted(children, key=lambda p: p.uuid),
            aggregates=sorted(aggregates, key=lambda a: a.uuid),
            services=table.build(),
        )

    @translated
    def changes(self, cursor: str, limit: int = 1000) -> list[Change]:
        cursor_key(cursor)  # refuse what XRANGE would misread
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        entries = self._scripts.changes(keys=(self.keys.changes,), args=(cursor, limit))
        return [
            self._change(entry_id, dict(zip(flat[::2], flat[1::2], strict=True)))
            for entry_id, flat in entries
        ]

    def _change(self, cursor: str, fields: dict[str, str]) -> Change:
        where = f"{self.keys.changes}[{cursor}]"
        kind = fields.get("k", "")
        data: Any
        try:
            if kind == "provider":
                data = parse(read_provider, fields["d"], where)
            elif kind == "usage":
                data = parse(read_usage, fields["d"], where)
            elif kind == "aggregate":
                data = parse(read_aggregate, fields["d"], where)
            elif kind == "service":
                data = parse(lambda d: read_service(d, fields.get("hb")), fields["d"], where)
            else:
                raise CorruptRecord(key=where, reason=f"unknown change kind {kind[:64]!r}")
        except KeyError:
            return Change(
                cursor=cursor,
                kind=CORRUPT_CHANGE,
                data=CorruptRecord(key=where, reason="no data field"),
            )
        except CorruptRecord as exc:
            return Change(cursor=cursor, kind=CORRUPT_CHANGE, data=exc)
        return Change(cursor=cursor, kind=kind, data=data)
