"""The Redis store's records as JSON, and back (the scripts' side of it is in
:mod:`scheduler.store.scripts`).

A value that cannot be read raises :class:`CorruptRecord` from :func:`parse`
(the one record asked for); :func:`each` skips it instead, logging
``corrupt_record`` with its key, so one bad value never stops a list.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from scheduler.exceptions import CorruptRecord
from scheduler.log import get_logger
from scheduler.objects import InstanceRecord
from scheduler.store.base import Aggregate, Consumer, Inventory, Provider, Service, freeze_json

LOG = get_logger(__name__)

T = TypeVar("T")


def parse(build: Callable[[dict[str, Any]], T], raw: str | bytes, where: str) -> T:
    try:
        return build(json.loads(raw))
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise CorruptRecord(key=where, reason=repr(exc)[:200]) from exc


def each(
    build: Callable[[dict[str, Any]], T], pairs: Iterable[tuple[str, str | bytes]], key: str
) -> Iterable[T]:
    """The records of a hash's (field, value) pairs that can be read; the others
    are logged (``corrupt_record``, with the key and field) and skipped."""
    for name, raw in pairs:
        try:
            yield parse(build, raw, f"{key}[{name}]")
        except CorruptRecord as exc:
            LOG.error("corrupt_record", key=exc.kwargs["key"], reason=exc.kwargs["reason"])


def flat_pairs(flat: list[str]) -> Iterable[tuple[str, str]]:
    """HGETALL's flat reply as (field, value) pairs."""
    return zip(flat[::2], flat[1::2], strict=True)


def read_provider(d: dict[str, Any]) -> Provider:
    # Lua's cjson writes an empty list as {}: frozenset() reads both as empty.
    return Provider(
        uuid=d["uuid"],
        name=d["name"],
        generation=int(d["generation"]),
        parent_uuid=d["parent_uuid"],
        root_uuid=d["root_uuid"],
        inventories=read_inventories(d["inventories"]),
        usages={rc: int(n) for rc, n in d["usages"].items()},
        traits=frozenset(d["traits"]),
        aggregates=frozenset(d["aggregates"]),
        consumers=int(d["consumers"]),
    )


@functools.lru_cache(maxsize=4096)
def read_inventories(text: str) -> Mapping[str, Inventory]:
    """A provider's inventories, kept as JSON text inside its JSON (see
    scripts.py); read-only and cached, since hosts of one kind share them."""
    return MappingProxyType(
        {rc: Inventory.from_primitive(inv) for rc, inv in json.loads(text).items()}
    )


def read_usage(d: dict[str, Any]) -> dict[str, Any]:
    return {
        "uuid": d["uuid"],
        "generation": int(d["generation"]),
        "usages": {rc: int(n) for rc, n in d["usages"].items()},
        "consumers": int(d["consumers"]),
    }


def read_aggregate(d: dict[str, Any]) -> Aggregate:
    return Aggregate(uuid=d["uuid"], name=d["name"], metadata=dict(d["metadata"]))


def read_service(d: dict[str, Any], last_seen: str | None) -> Service:
    # Reported capabilities and stats are kept as JSON text inside the JSON
    # (see scripts.py); records written before they existed have neither.
    return Service(
        host=d["host"],
        rpc_server=d["rpc_server"],
        last_seen=float(last_seen or 0),
        disabled=bool(d["disabled"]),
        disabled_reason=d["disabled_reason"],
        failed_builds=int(d["failed_builds"]),
        capabilities=read_report(d.get("capabilities") or "{}"),
        stats=read_report(d.get("stats") or "{}"),
    )


@functools.lru_cache(maxsize=4096)
def read_report(text: str) -> Mapping[str, Any]:
    """A reported JSON object, frozen; cached, since many hosts report the same."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"a report must be a JSON object, got {type(value).__name__}")
    return freeze_json(value)


def report_text(value: Mapping[str, Any] | None) -> str:
    """A report as the canonical JSON text the store keeps ('' for no change)."""
    if value is None:
        return ""
    return json.dumps(dict(value), sort_keys=True, separators=(",", ":"), default=_plain)


def _plain(value: Any) -> Any:
    """For json.dumps: a read-only mapping (a frozen report) as a dict."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def read_consumer(d: dict[str, Any]) -> Consumer:
    return Consumer(
        uuid=d["uuid"],
        allocations={
            rp: {rc: int(n) for rc, n in res.items()} for rp, res in d["allocations"].items()
        },
        project_id=d["project_id"],
        user_id=d["user_id"],
        generation=int(d["generation"]),
        group_uuid=d.get("group_uuid"),
        host=d.get("host"),
    )


def read_instance(d: dict[str, Any]) -> InstanceRecord:
    # request_spec is kept as a JSON string, so the update script sees a flat record.
    if d.get("request_spec") is not None:
        d["request_spec"] = json.loads(d["request_spec"])
    return InstanceRecord.from_primitive(d)


def changes_json(changes: dict[str, Any]) -> str:
    """An instance update's changes as the scripts take them (``request_spec``
    as a JSON string of its own)."""
    if changes.get("request_spec") is not None:
        changes = {**changes, "request_spec": json.dumps(dict(changes["request_spec"]))}
    return json.dumps(changes)


def instance_json(record: InstanceRecord) -> str:
    d = record.to_primitive()
    if d["request_spec"] is not None:
        d["request_spec"] = json.dumps(d["request_spec"])
    return json.dumps(d)
