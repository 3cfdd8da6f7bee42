"""The store on Redis: one Lua script per atomic write, one hash per record kind.

Guarantees, on top of the contract in :mod:`scheduler.store.base`:

* Every write that must be atomic is one script (:mod:`.scripts`), run with
  one EVALSHA: a claim is one round trip. Scripts check everything before
  they write, so a refusal leaves nothing behind.
* All providers live in one hash of JSON values (:mod:`.keys`). No command
  reads a hash whole: :meth:`RedisStore.compact_snapshot` reads the stream's
  last id (its cursor) first, then each hash in HSCAN pages, and every list
  (and a host's heartbeats, all of them) is read in pages too, so no one
  command's cost grows with the cloud. A snapshot is thus no one instant;
  the changes after its cursor bring it to the store (why that converges:
  :meth:`scheduler.store.base.ChangeFeed.compact_snapshot`). Nor does a
  list see one instant: each record is as it stood when its page was read.
* Refusals come back as typed exceptions; the translation from a script's
  error reply to an exception lives in :func:`_script_error` and nowhere
  else. Connection errors and timeouts become :class:`StoreUnavailable`; a
  dropped connection is first retried a few times with bounded, jittered
  back-off (a timeout is not retried). A retried write may have landed
  already: claims and releases are idempotent and provider writes then see
  their own generation bump as a conflict, but a failed build may count
  twice. A value this code cannot read raises :class:`CorruptRecord` when it
  is the one record asked for; a list (and a snapshot) skips it, logging
  ``corrupt_record`` with its key, so one bad value under the prefix never
  stops a worker from serving the rest; a change-feed entry it cannot read
  comes back as a ``corrupt`` change, so readers log it once and move past.
* Lists come back sorted: providers, aggregates, consumers and instances by
  uuid, services by host (instances asked for by uuid: in the order asked,
  the missing ones left out).

Durable acknowledgements: with ``min_replicas`` above 0, every write a
caller relies on as done (claims, releases, moves and heals, instance
records, providers, aggregates, service records; not heartbeats nor the
computes' instance reports, which are rewritten every period) is sent in one
pipeline with ``WAIT min_replicas timeout`` behind it, on the same
connection, so that WAIT counts that write (it waits for the replication
offset of its own connection's last write). Fewer replicas in time:
:class:`StoreUnavailable`, the write done on the master but perhaps not on
what a failover promotes. A write that changes nothing (a retried claim that
finds itself already held) waits for its connection's last write only. Not
yet on a Redis Cluster (the constructor refuses it).

Store URLs: ``redis://``, ``rediss://`` (TLS) and ``unix://`` as redis-py
reads them, and ``redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]``
for a master found through Sentinel (the credentials are the master's; the
sentinels are reached without any), and
``redis+cluster://[[user]:password@]host:port[,host:port...][/?options]``
(``rediss+cluster://`` over TLS) for a Redis Cluster: credentials and options
as for ``redis://`` (``rediss://``), the nodes listed being where the client
discovers the cluster (it does so when the store is built). All keys share one
hash slot, so a deployment lives on one shard; redirects, a slot without a
master and a cluster that is down are :class:`StoreUnavailable`. Needs
Redis 7.0 or later (XINFO STREAM's ``entries-added``, which tells whether the
stream was ever trimmed).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar, cast
from urllib.parse import unquote

import numpy as np
import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from scheduler.exceptions import (
    CapacityExceeded,
    ConsumerConflict,
    ConsumerDeleted,
    CorruptRecord,
    GenerationConflict,
    GroupPolicyViolation,
    InstanceNotFound,
    InventoryInUse,
    NoSuchInventory,
    NotFound,
    ProviderExists,
    ProviderNotFound,
    RecordChanged,
    StoreError,
    StoreUnavailable,
    StreamTruncated,
    UnitRuleViolation,
)
from scheduler.log import get_logger, mask_secrets
from scheduler.objects import AllocationRequest, InstanceRecord
from scheduler.store.base import (
    CORRUPT_CHANGE,
    Aggregate,
    Change,
    Consumer,
    GroupClaim,
    InstanceReport,
    Inventory,
    Provider,
    RecordCheck,
    Service,
    ServiceReport,
    Store,
    check_allocation_request,
    check_instance_changes,
    check_inventories,
    check_move,
    check_reports,
    cursor_key,
    freeze_json,
)
from scheduler.store.columns import CompactSnapshot, HostColumnsBuilder, ServiceColumnsBuilder
from scheduler.store.keys import Keys
from scheduler.store.scripts import DELETING_MARKER, INDEX_COMPLETE, Scripts

LOG = get_logger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

SENTINEL_SCHEME = "redis+sentinel://"
#: A Redis Cluster; the second one over TLS.
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")

#: A client of a single Redis (or a Sentinel's master) or of a Redis Cluster.
Client = redis.Redis | RedisCluster

# --- errors -------------------------------------------------------------------------

_ERROR_PREFIX = "SCHEDULER "

#: A script's error code -> the exception it stands for, called with its fields.
_SCRIPT_ERRORS: dict[str, Callable[..., StoreError]] = {
    "ServiceNotFound": functools.partial(NotFound, kind="service"),
    **{
        cls.__name__: cls
        for cls in (
            ProviderNotFound,
            InstanceNotFound,
            ProviderExists,
            GenerationConflict,
            InventoryInUse,
            CapacityExceeded,
            NoSuchInventory,
            UnitRuleViolation,
            ConsumerConflict,
            ConsumerDeleted,
            RecordChanged,
            GroupPolicyViolation,
            StreamTruncated,
        )
    },
}


def _script_error(message: str) -> StoreError:
    """The typed exception for an error reply (``SCHEDULER <Code> <JSON fields>``)."""
    if message.startswith(_ERROR_PREFIX):
        code, _, rest = message[len(_ERROR_PREFIX) :].partition(" ")
        build = _SCRIPT_ERRORS.get(code)
        if build is not None:
            fields, _ = json.JSONDecoder().raw_decode(rest)
            return build(**fields)
    return StoreError(message)


#: What a Redis Cluster answers while it reshards or fails over (each a
#: ``ResponseError`` or the cluster client's own exception, never a refusal).
_CLUSTER_ERRORS = (
    redis.exceptions.ClusterError,
    redis.exceptions.AskError,  # and MovedError
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
)


def _translated(method: Callable[P, R]) -> Callable[P, R]:
    """Raise redis-py's errors as the store's typed ones."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError) as exc:
            raise StoreUnavailable(reason=str(exc)) from exc
        except _CLUSTER_ERRORS as exc:
            # A redirect the client could not follow, a slot that moves or has
            # no master yet, a cluster that is down: all pass with time.
            raise StoreUnavailable(reason=f"{type(exc).__name__}: {exc}") from exc
        except redis.exceptions.NoScriptError as exc:
            # Only a cluster pipeline meets this (it does not load scripts
            # first): a node restarted or a replica took over without them.
            # Load them again for the caller's retry (if that fails too, the
            # retry meets this again).
            try:
                cast("RedisStore", args[0])._load_scripts()
            except (redis.RedisError, redis.exceptions.RedisClusterException):
                pass
            raise StoreUnavailable(reason=f"NoScriptError: {exc}") from exc
        except redis.ResponseError as exc:
            raise _script_error(str(exc)) from None

    return wrapper


# --- connections --------------------------------------------------------------------


def redis_client(url: str, socket_timeout: float = 5.0) -> Client:
    """A client (decoding replies to str) for any store URL this module reads."""
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "health_check_interval": 30,
        "retry": Retry(
            ExponentialWithJitterBackoff(cap=1.0, base=0.05),
            3,
            supported_errors=(redis.ConnectionError,),
        ),
    }
    if url.startswith(CLUSTER_SCHEMES):
        return _cluster_client(url, options)
    if not url.startswith(SENTINEL_SCHEME):
        return redis.Redis.from_url(url, **options)
    userinfo, _, rest = url[len(SENTINEL_SCHEME) :].rpartition("@")
    hosts, _, path = rest.partition("/")
    service, _, db = path.strip("/").partition("/")
    if not hosts or not service:
        raise ValueError(f"a Sentinel URL needs hosts and a service name: {mask_secrets(url)!r}")
    username, _, password = (unquote(part) for part in userinfo.partition(":"))
    return Sentinel(_hosts(hosts), socket_timeout=socket_timeout).master_for(
        service, db=int(db or 0), username=username or None, password=password or None, **options
    )


def _hosts(hosts: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as (host, port) pairs (``[v6]:port`` too)."""
    found = []
    for hostport in hosts.split(","):
        host, _, port = hostport.rpartition(":")
        found.append((host.strip("[]"), int(port)))
    return found


def _cluster_client(url: str, options: dict[str, Any]) -> RedisCluster:
    """A Redis Cluster client: the listed nodes are where it discovers the cluster.

    The URL is read as the ``redis://`` (``rediss://``) URL of its first node,
    so credentials and query options mean what they mean there; the other
    nodes are more places to start from. A cluster has no databases but 0.
    """
    scheme, _, rest = url.partition("://")
    userinfo, at, rest = rest.rpartition("@")
    hosts, slash, tail = rest.partition("/")
    if not hosts or tail.split("?", 1)[0].strip("/") not in ("", "0"):
        raise ValueError(
            f"a cluster URL is host:port[,host:port...][/?options]: {mask_secrets(url)!r}"
        )
    try:
        nodes = _hosts(hosts)
    except ValueError:
        raise ValueError(f"a cluster URL needs host:port pairs: {mask_secrets(url)!r}") from None
    first = f"{scheme.split('+')[0]}://{userinfo}{at}{hosts.split(',')[0]}{slash}{tail}"
    return RedisCluster.from_url(
        first, startup_nodes=[ClusterNode(host, port) for host, port in nodes[1:]], **options
    )


# --- JSON <-> records ---------------------------------------------------------------


def _parse(build: Callable[[dict[str, Any]], T], raw: str | bytes, where: str) -> T:
    try:
        return build(json.loads(raw))
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise CorruptRecord(key=where, reason=repr(exc)[:200]) from exc


def _each(
    build: Callable[[dict[str, Any]], T], pairs: Iterable[tuple[str, str | bytes]], key: str
) -> Iterable[T]:
    """The records of a hash's (field, value) pairs that can be read; the others
    are logged (``corrupt_record``, with the key and field) and skipped."""
    for name, raw in pairs:
        try:
            yield _parse(build, raw, f"{key}[{name}]")
        except CorruptRecord as exc:
            LOG.error("corrupt_record", key=exc.kwargs["key"], reason=exc.kwargs["reason"])


def _pairs(flat: list[str]) -> Iterable[tuple[str, str]]:
    """HGETALL's flat reply as (field, value) pairs."""
    return zip(flat[::2], flat[1::2], strict=True)


def _provider(d: dict[str, Any]) -> Provider:
    # Lua's cjson writes an empty list as {}: frozenset() reads both as empty.
    return Provider(
        uuid=d["uuid"],
        name=d["name"],
        generation=int(d["generation"]),
        parent_uuid=d["parent_uuid"],
        root_uuid=d["root_uuid"],
        inventories=_inventories(d["inventories"]),
        usages={rc: int(n) for rc, n in d["usages"].items()},
        traits=frozenset(d["traits"]),
        aggregates=frozenset(d["aggregates"]),
        consumers=int(d["consumers"]),
    )


@functools.lru_cache(maxsize=4096)
def _inventories(text: str) -> Mapping[str, Inventory]:
    """A provider's inventories, kept as JSON text inside its JSON (see
    scripts.py); read-only and cached, since hosts of one kind share them."""
    return MappingProxyType(
        {rc: Inventory.from_primitive(inv) for rc, inv in json.loads(text).items()}
    )


#: Fields asked per HMGET when some hosts' heartbeats are read.
_HMGET_CHUNK = 5000
#: Hosts marked down per script (a few writes each: a short script).
_MARK_DOWN_CHUNK = 500

#: Fields asked per HSCAN page (its COUNT) where a hash is read whole: a cold
#: load, a list, every host's heartbeat. Redis follows the hint closely on a
#: hash this big, and a page costs it time in proportion to its size. At
#: 300,000 hosts (about 1 kB per provider record) on a shared 2-core machine
#: at load average 15: median page 5 ms at 1000, longest 110-160 ms (500:
#: 111 ms, 2000: 356 ms), against 29.5 s for the one script this replaced;
#: 1000 also gave the shortest cold load. To be measured again on a quiet
#: machine against the 10 ms bound.
_PAGE = 1000


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
    """One value that must be a JSON object; None (logged, as ``_each`` does)
    when it is not."""
    try:
        return _parse(_as_object, raw, where)
    except CorruptRecord as exc:
        LOG.error("corrupt_record", key=exc.kwargs["key"], reason=exc.kwargs["reason"])
        return None


def _as_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"not an object: {type(value).__name__}")
    return value


#: What reading a decoded record into columns may raise: it is then skipped.
_UNREADABLE = (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError)


def _usage(d: dict[str, Any]) -> dict[str, Any]:
    return {
        "uuid": d["uuid"],
        "generation": int(d["generation"]),
        "usages": {rc: int(n) for rc, n in d["usages"].items()},
        "consumers": int(d["consumers"]),
    }


def _host_row(d: dict[str, Any], hosts: HostColumnsBuilder) -> tuple[Any, ...]:
    """A root provider's arguments to :meth:`HostColumnsBuilder.add`, every
    field read and checked first, so that a bad one adds nothing."""
    return (
        _text(d["uuid"]),
        _text(d["name"]),
        int(d["generation"]),
        int(d["consumers"]),
        {_text(rc): int(n) for rc, n in d["usages"].items()},
        hosts.inventories.code(d["inventories"], _inventories),
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
        table.capability_reports.code(d.get("capabilities") or "{}", _reported),
        table.stats_reports.code(d.get("stats") or "{}", _reported),
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
            hosts.inventories.codes(inventories, _inventories),
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
            table.capability_reports.codes(_reports(records, "capabilities"), _reported),
            table.stats_reports.codes(_reports(records, "stats"), _reported),
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


def _aggregate(d: dict[str, Any]) -> Aggregate:
    return Aggregate(uuid=d["uuid"], name=d["name"], metadata=dict(d["metadata"]))


def _service(d: dict[str, Any], last_seen: str | None) -> Service:
    # Reported capabilities and stats are kept as JSON text inside the JSON
    # (see scripts.py); records written before they existed have neither.
    return Service(
        host=d["host"],
        rpc_server=d["rpc_server"],
        last_seen=float(last_seen or 0),
        disabled=bool(d["disabled"]),
        disabled_reason=d["disabled_reason"],
        failed_builds=int(d["failed_builds"]),
        capabilities=_reported(d.get("capabilities") or "{}"),
        stats=_reported(d.get("stats") or "{}"),
    )


@functools.lru_cache(maxsize=4096)
def _reported(text: str) -> Mapping[str, Any]:
    """A reported JSON object, frozen; cached, since many hosts report the same."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"a report must be a JSON object, got {type(value).__name__}")
    return freeze_json(value)


def _report_text(value: Mapping[str, Any] | None) -> str:
    """A report as the canonical JSON text the store keeps ('' for no change)."""
    if value is None:
        return ""
    return json.dumps(dict(value), sort_keys=True, separators=(",", ":"), default=_plain)


def _plain(value: Any) -> Any:
    """For json.dumps: a read-only mapping (a frozen report) as a dict."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def _consumer(d: dict[str, Any]) -> Consumer:
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


def _instance(d: dict[str, Any]) -> InstanceRecord:
    # request_spec is kept as a JSON string, so the update script sees a flat record.
    if d.get("request_spec") is not None:
        d["request_spec"] = json.loads(d["request_spec"])
    return InstanceRecord.from_primitive(d)


def _changes_json(changes: dict[str, Any]) -> str:
    """An instance update's changes as the scripts take them (``request_spec``
    as a JSON string of its own)."""
    if changes.get("request_spec") is not None:
        changes = {**changes, "request_spec": json.dumps(dict(changes["request_spec"]))}
    return json.dumps(changes)


def _instance_json(record: InstanceRecord) -> str:
    d = record.to_primitive()
    if d["request_spec"] is not None:
        d["request_spec"] = json.dumps(d["request_spec"])
    return json.dumps(d)


# --- the store ----------------------------------------------------------------------


class RedisStore(Store):
    """The store contract on one Redis (or one Redis Cluster slot).

    ``keys`` names every key it uses (all under ``{key_prefix}:``);
    ``stream_maxlen`` is the change stream's approximate bound.
    """

    def __init__(
        self,
        url: str,
        key_prefix: str,
        stream_maxlen: int = 100000,
        socket_timeout: float = 5.0,
        min_replicas: int = 0,
        min_replicas_timeout: float = 1.0,
    ) -> None:
        if min_replicas < 0:
            raise ValueError(f"min_replicas must be 0 or more, got {min_replicas}")
        if min_replicas and not 0 < min_replicas_timeout < socket_timeout:
            raise ValueError(
                f"min_replicas_timeout must be above 0 and below socket_timeout "
                f"({socket_timeout} s), got {min_replicas_timeout}"
            )
        self.keys = Keys.for_prefix(key_prefix)
        self._maxlen = stream_maxlen
        self._min_replicas = min_replicas
        self._wait_ms = max(int(min_replicas_timeout * 1000), 1)
        self._client = redis_client(url, socket_timeout)
        if min_replicas and isinstance(self._client, RedisCluster):
            self._client.close()
            raise ValueError("min_replicas is not supported on a redis+cluster:// store yet")
        self._scripts = Scripts.register(self._client)
        if isinstance(self._client, RedisCluster):
            self._load_scripts()
        k = self.keys
        self._alloc_keys = (k.changes, k.providers, k.consumers, k.groups)
        self._service_keys = (k.changes, k.services, k.heartbeats)

    def _pipeline(self, transaction: bool) -> Any:
        """A pipeline; on a cluster, one that may also send MGET and EVALSHA.

        redis-py's cluster pipeline refuses both (their keys could span
        slots), but every key here is in one slot, so each goes to the one
        node that holds it; ``transaction=True`` is a MULTI/EXEC on that node.
        A cluster pipeline does not load scripts before it runs (a plain one
        does): :meth:`_load_scripts` did, and does again when a node lost them.
        """
        pipe = self._client.pipeline(transaction=transaction)
        if isinstance(self._client, RedisCluster):
            pipe.mget = lambda keys: pipe.execute_command("MGET", *keys)  # type: ignore[method-assign]
            pipe.evalsha = functools.partial(pipe.execute_command, "EVALSHA")  # type: ignore[method-assign]
        return pipe

    def _load_scripts(self) -> None:
        """Load every script on every master (SCRIPT LOAD on a cluster client)."""
        for script in vars(self._scripts).values():
            self._client.script_load(script.script)

    # durable acknowledgements

    def _write(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one write script; with ``min_replicas``, acknowledged by WAIT."""
        if not self._min_replicas:
            return script(keys=keys, args=args)

        def once() -> Any:
            # EVALSHA itself, not the script through the pipeline (which
            # would ask SCRIPT EXISTS first: one more round trip per write).
            pipe = self._pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            return self._acknowledged(pipe)[0]

        try:
            return once()
        except redis.exceptions.NoScriptError:  # a new master, say: nothing ran
            self._client.script_load(script.script)
            return once()

    def _acknowledged(self, pipe: Any) -> list[Any]:
        """Execute a pipeline of writes; with ``min_replicas``, with WAIT behind
        them on the same connection, and :class:`StoreUnavailable` when fewer
        replicas than that have them within the timeout. A refused write (a
        script's error) raises as it would without WAIT: it wrote nothing."""
        if not self._min_replicas:
            return cast("list[Any]", pipe.execute())
        pipe.execute_command("WAIT", self._min_replicas, self._wait_ms)
        *replies, acked = pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        if isinstance(acked, Exception):
            raise acked
        if int(acked) < self._min_replicas:
            raise StoreUnavailable(
                reason=f"{acked} of {self._min_replicas} replicas acknowledged the write "
                f"within {self._wait_ms} ms"
            )
        return replies

    # providers

    @_translated
    def create_provider(self, uuid: str, name: str, parent_uuid: str | None = None) -> Provider:
        raw = self._write(
            self._scripts.create_provider,
            keys=(self.keys.changes, self.keys.providers, self.keys.provider_names),
            args=(self._maxlen, uuid, name, parent_uuid or ""),
        )
        return _parse(_provider, raw, f"{self.keys.providers}[{uuid}]")

    @_translated
    def get_provider(self, uuid: str) -> Provider:
        raw = self._client.hget(self.keys.providers, uuid)
        if raw is None:
            raise ProviderNotFound(uuid)
        return _parse(_provider, raw, f"{self.keys.providers}[{uuid}]")

    @_translated
    def get_provider_by_name(self, name: str) -> Provider:
        raw = self._scripts.provider_by_name(
            keys=(self.keys.providers, self.keys.provider_names), args=(name,)
        )
        if raw is None:
            raise ProviderNotFound(name)
        return _parse(_provider, raw, f"{self.keys.provider_names}[{name}]")

    @_translated
    def list_providers(self) -> list[Provider]:
        pairs = self._scan(self.keys.providers)
        return sorted(_each(_provider, pairs, self.keys.providers), key=lambda p: p.uuid)

    def set_inventory(
        self, uuid: str, generation: int, inventories: Mapping[str, Inventory]
    ) -> int:
        check_inventories(inventories)
        value = {rc: asdict(inv) for rc, inv in inventories.items()}
        return self._update_provider(uuid, generation, "inventories", value)

    def set_traits(self, uuid: str, generation: int, traits: Iterable[str]) -> int:
        return self._update_provider(uuid, generation, "traits", sorted(set(traits)))

    def set_aggregates(self, uuid: str, generation: int, aggregates: Iterable[str]) -> int:
        return self._update_provider(uuid, generation, "aggregates", sorted(set(aggregates)))

    @_translated
    def _update_provider(self, uuid: str, generation: int, field: str, value: Any) -> int:
        return int(
            self._write(
                self._scripts.update_provider,
                keys=(self.keys.changes, self.keys.providers),
                args=(self._maxlen, uuid, generation, field, json.dumps(value)),
            )
        )

    @_translated
    def put_aggregate(self, aggregate: Aggregate) -> None:
        data = {
            "uuid": aggregate.uuid,
            "name": aggregate.name,
            "metadata": dict(aggregate.metadata),
        }
        self._write(
            self._scripts.put_aggregate,
            keys=(self.keys.changes, self.keys.aggregates),
            args=(self._maxlen, aggregate.uuid, json.dumps(data)),
        )

    @_translated
    def list_aggregates(self) -> list[Aggregate]:
        pairs = self._scan(self.keys.aggregates)
        return sorted(_each(_aggregate, pairs, self.keys.aggregates), key=lambda a: a.uuid)

    # allocations

    @_translated
    def claim(
        self, consumer_uuid: str, request: AllocationRequest, group: GroupClaim | None = None
    ) -> bool:
        keys, args = self._allocation_call(consumer_uuid, request, group)
        return bool(self._write(self._scripts.claim, keys=keys, args=args))

    def _allocation_call(
        self, consumer_uuid: str, request: AllocationRequest, group: GroupClaim | None
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        """The KEYS and ARGV of a script that writes a consumer's allocations
        (``claim``, ``heal_allocation``: see their comments in scripts.py)."""
        check_allocation_request(request)
        allocations = json.dumps({rp: dict(res) for rp, res in request.allocations.items()})
        group_args = (
            ("", "", "", 0, "")
            if group is None
            else (
                group.group_uuid,
                group.policy,
                group.host,
                group.max_server_per_host,
                group.own_consumer or "",
            )
        )
        keys = (*self._alloc_keys, self.keys.deleted_record(consumer_uuid))
        args = (
            self._maxlen,
            consumer_uuid,
            allocations,
            request.project_id,
            request.user_id,
            *group_args,
        )
        return keys, args

    @_translated
    def release(self, consumer_uuid: str, check: RecordCheck | None = None) -> bool:
        keys, checked = self._checked(check)
        return bool(
            self._write(
                self._scripts.release,
                keys=(*self._alloc_keys, *keys),
                args=(self._maxlen, consumer_uuid, *checked),
            )
        )

    @_translated
    def move_allocations(
        self,
        source_uuid: str,
        target_uuid: str,
        replace: bool = False,
        check: RecordCheck | None = None,
    ) -> bool:
        check_move(source_uuid, target_uuid)
        keys, checked = self._checked(check)
        return bool(
            self._write(
                self._scripts.move_allocations,
                keys=(*self._alloc_keys, *keys),
                args=(self._maxlen, source_uuid, target_uuid, "1" if replace else "0", *checked),
            )
        )

    def _checked(self, check: RecordCheck | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The extra KEYS and ARGV of an allocation write's record check."""
        if check is None:
            return (), ()
        return (
            (self.keys.instances, self.keys.deleted_record(check.uuid)),
            (check.uuid, json.dumps(list(check.states)), json.dumps(dict(check.expect))),
        )

    @_translated
    def get_consumer(self, consumer_uuid: str) -> Consumer | None:
        raw = self._client.hget(self.keys.consumers, consumer_uuid)
        if raw is None:
            return None
        return _parse(_consumer, raw, f"{self.keys.consumers}[{consumer_uuid}]")

    @_translated
    def list_consumers(self) -> list[Consumer]:
        pairs = self._scan(self.keys.consumers)
        return sorted(_each(_consumer, pairs, self.keys.consumers), key=lambda c: c.uuid)

    @_translated
    def group_hosts(self, group_uuid: str) -> dict[str, int]:
        raw = self._client.hget(self.keys.groups, group_uuid)
        if raw is None:
            return {}
        return _parse(
            lambda d: {host: int(n) for host, n in d.items()},
            raw,
            f"{self.keys.groups}[{group_uuid}]",
        )

    def scan_consumers(self, batch: int = 500) -> Iterator[Consumer]:
        yield from _each(_consumer, self._scan(self.keys.consumers, batch), self.keys.consumers)

    def _scan(self, key: str, batch: int = _PAGE) -> Iterator[tuple[str, str]]:
        """Every (field, value) of a hash, one HSCAN page of ``batch`` at a
        time (each page's in field order), each field once."""
        for page in self._pages(key, batch):
            yield from sorted(page.items())

    def _pages(self, key: str, batch: int) -> Iterator[dict[str, str]]:
        """A hash's HSCAN pages of ``batch`` fields (COUNT), each field in one
        page only (HSCAN may return a field twice across a rehash).

        What every read of a whole hash goes through: no one command's cost
        grows with the hash. A field written or removed during the walk may
        be seen or not; one there throughout is seen.
        """
        seen: set[str] = set()
        cursor = 0
        while True:
            cursor, page = self._scan_hash(key, cursor, batch)
            if not seen.isdisjoint(page):
                page = {name: raw for name, raw in page.items() if name not in seen}
            seen.update(page)
            if page:
                yield page
            if cursor == 0:
                return

    def _whole(self, key: str, batch: int = _PAGE) -> dict[str, str]:
        """A whole hash, read in HSCAN pages (:meth:`_pages`)."""
        found: dict[str, str] = {}
        for page in self._pages(key, batch):
            found.update(page)
        return found

    @_translated
    def _scan_hash(self, key: str, cursor: int, batch: int) -> tuple[int, dict[str, str]]:
        """One HSCAN page of a hash: the next cursor (0: done) and its fields."""
        found, page = self._client.hscan(key, cursor, count=batch)
        return int(found), cast("dict[str, str]", page)

    @_translated
    def heal_allocation(
        self,
        consumer_uuid: str,
        request: AllocationRequest,
        group: GroupClaim | None = None,
        overcommit: bool = True,
    ) -> bool:
        keys, args = self._allocation_call(consumer_uuid, request, group)
        args = (*args, "1" if overcommit else "0")
        return bool(self._write(self._scripts.heal_allocation, keys=keys, args=args))

    # change feed

    @_translated
    def compact_snapshot(self, batch: int = _PAGE) -> CompactSnapshot:
        """The cursor first, then every hash in HSCAN pages of ``batch``.

        No command reads a whole hash, so none holds Redis for longer than
        one page takes (see ``_PAGE``), whatever the cloud's size. The
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
                        children.append(_provider(d))
                    else:
                        hosts.add(*_host_row(d, hosts))
                except _UNREADABLE as exc:
                    LOG.error(
                        "corrupt_record", key=f"{k.providers}[{name}]", reason=repr(exc)[:200]
                    )
        aggregates = _each(_aggregate, self._scan(k.aggregates, batch), k.aggregates)
        return CompactSnapshot(
            cursor=cursor,
            hosts=hosts.build(),
            children=sorted(children, key=lambda p: p.uuid),
            aggregates=sorted(aggregates, key=lambda a: a.uuid),
            services=table.build(),
        )

    @_translated
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
                data = _parse(_provider, fields["d"], where)
            elif kind == "usage":
                data = _parse(_usage, fields["d"], where)
            elif kind == "aggregate":
                data = _parse(_aggregate, fields["d"], where)
            elif kind == "service":
                data = _parse(lambda d: _service(d, fields.get("hb")), fields["d"], where)
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

    # services

    @_translated
    def register_services(self, services: Iterable[Service]) -> None:
        pairs = [value for s in services for value in (s.host, s.rpc_server)]
        if pairs:
            self._write(
                self._scripts.register_services,
                keys=self._service_keys,
                args=(self._maxlen, *pairs),
            )

    @_translated
    def report_services(self, reports: Iterable[ServiceReport]) -> None:
        args = [
            value
            for r in check_reports(reports)
            for value in (r.host, _report_text(r.capabilities), _report_text(r.stats))
        ]
        if args:
            self._write(
                self._scripts.report_services, keys=self._service_keys, args=(self._maxlen, *args)
            )

    @_translated
    def heartbeat(self, hosts: Iterable[str], now: float) -> None:
        seen: dict[Any, Any] = dict.fromkeys(hosts, repr(now))  # hset's mapping type
        if seen:
            self._client.hset(self.keys.heartbeats, mapping=seen)

    @_translated
    def heartbeats(self, hosts: Sequence[str] | None = None) -> dict[str, float]:
        seen: dict[str, str]
        if hosts is None:
            seen = self._whole(self.keys.heartbeats)
        else:
            pipe = self._pipeline(transaction=False)
            for start in range(0, len(hosts), _HMGET_CHUNK):
                pipe.hmget(self.keys.heartbeats, hosts[start : start + _HMGET_CHUNK])
            values = itertools.chain.from_iterable(pipe.execute()) if hosts else ()
            seen = {
                host: value for host, value in zip(hosts, values, strict=True) if value is not None
            }
        try:
            return dict(zip(seen, map(float, seen.values()), strict=True))
        except ValueError as exc:
            raise CorruptRecord(key=self.keys.heartbeats, reason=repr(exc)) from exc

    @_translated
    def list_services(self) -> list[Service]:
        # In pages, heartbeats first (they only move forward, but for a host
        # marked down meanwhile): no one command, nor a MULTI, holds both
        # hashes whole.
        seen = self._whole(self.keys.heartbeats)
        return self._services(self._scan(self.keys.services), seen)

    @_translated
    def get_service(self, host: str) -> Service | None:
        pipe = self._pipeline(transaction=True)
        pipe.hget(self.keys.services, host)
        pipe.hget(self.keys.heartbeats, host)
        raw, last_seen = pipe.execute()
        if raw is None:
            return None
        return self._service(raw, {host: last_seen})

    def _service(self, raw: str, seen: Mapping[str, str | None]) -> Service:
        return _parse(lambda d: _service(d, seen.get(d["host"])), raw, self.keys.services)

    def _services(
        self, pairs: Iterable[tuple[str, str]], seen: Mapping[str, str | None]
    ) -> list[Service]:
        return sorted(
            _each(lambda d: _service(d, seen.get(d["host"])), pairs, self.keys.services),
            key=lambda s: s.host,
        )

    @_translated
    def set_service_disabled(self, host: str, disabled: bool, reason: str | None = None) -> None:
        self._write(
            self._scripts.set_service_disabled,
            keys=(*self._service_keys, self.keys.provider_names, self.keys.providers),
            args=(self._maxlen, host, "1" if disabled else "0", json.dumps(reason)),
        )

    @_translated
    def record_build_result(self, host: str, success: bool) -> None:
        self._write(
            self._scripts.record_build_result,
            keys=self._service_keys,
            args=(self._maxlen, host, "1" if success else "0"),
        )

    @_translated
    def report_instances(self, reports: Iterable[InstanceReport]) -> None:
        mapping: dict[Any, Any] = {r.host: json.dumps(r.to_primitive()) for r in reports}
        if mapping:
            self._client.hset(self.keys.reports, mapping=mapping)

    def instance_reports(self, batch: int = 500) -> Iterator[InstanceReport]:
        for host, raw in self._scan(self.keys.reports, batch):
            yield from _each(
                functools.partial(InstanceReport.from_primitive, host),
                [(host, raw)],
                self.keys.reports,
            )

    @_translated
    def mark_down(self, hosts: Iterable[str]) -> None:
        names = list(dict.fromkeys(hosts))
        for start in range(0, len(names), _MARK_DOWN_CHUNK):
            chunk = names[start : start + _MARK_DOWN_CHUNK]
            self._write(
                self._scripts.mark_down, keys=self._service_keys, args=(self._maxlen, *chunk)
            )

    # instance records

    @_translated
    def create_instances(self, records: Iterable[InstanceRecord]) -> None:
        # One script per record (each one short), all in one round trip.
        pipe = self._pipeline(transaction=False)
        for record in records:
            deadline = "" if record.deadline is None else repr(float(record.deadline))
            self._scripts.create_instance(
                keys=(self.keys.instances, self.keys.deadlines),
                args=(record.uuid, _instance_json(record), deadline),
                client=pipe,
            )
        self._acknowledged(pipe)

    @_translated
    def get_instance(self, uuid: str) -> InstanceRecord:
        pipe = self._pipeline(transaction=False)
        pipe.hget(self.keys.instances, uuid)
        pipe.get(self.keys.deleted_record(uuid))
        raw, tomb = pipe.execute()
        if raw is not None:
            return _parse(_instance, raw, f"{self.keys.instances}[{uuid}]")
        if tomb is None or tomb == DELETING_MARKER:
            raise InstanceNotFound(uuid)
        return _parse(_instance, tomb, self.keys.deleted_record(uuid))

    @_translated
    def update_instance(
        self,
        uuid: str,
        expected_states: Iterable[str] | None = None,
        expect: Mapping[str, str | None] | None = None,
        **changes: Any,
    ) -> InstanceRecord | None:
        check_instance_changes(changes)
        expected = "" if expected_states is None else json.dumps(list(expected_states))
        fields = "" if not expect else json.dumps(dict(expect))
        raw = self._write(
            self._scripts.update_instance,
            keys=(self.keys.instances, self.keys.deleted_record(uuid), self.keys.deadlines),
            args=(uuid, expected, _changes_json(changes), fields),
        )
        if raw is None:
            return None
        return _parse(_instance, raw, f"{self.keys.instances}[{uuid}]")

    @_translated
    def start_delete(self, uuid: str, **changes: Any) -> tuple[InstanceRecord, bool]:
        check_instance_changes(changes)
        started, raw = self._write(
            self._scripts.start_delete,
            keys=(self.keys.instances, self.keys.deleted_record(uuid), self.keys.deadlines),
            args=(uuid, _changes_json(changes)),
        )
        return _parse(_instance, raw, f"{self.keys.instances}[{uuid}]"), bool(started)

    @_translated
    def finish_delete(
        self, uuid: str, host: str | None, retention: float, now: float, force: bool = False
    ) -> InstanceRecord | None:
        raw = self._write(
            self._scripts.finish_delete,
            keys=(
                *self._alloc_keys,
                self.keys.instances,
                self.keys.deleted_record(uuid),
                self.keys.deadlines,
            ),
            args=(
                self._maxlen,
                uuid,
                host or "",
                "1" if force else "0",
                max(int(retention * 1000), 1),
                repr(float(now)),
            ),
        )
        if raw is None:
            return None
        return _parse(_instance, raw, self.keys.deleted_record(uuid))

    @_translated
    def list_instances(self, uuids: Iterable[str] | None = None) -> list[InstanceRecord]:
        if uuids is None:
            pairs = self._scan(self.keys.instances)
            return sorted(_each(_instance, pairs, self.keys.instances), key=lambda r: r.uuid)
        wanted = list(uuids)
        if not wanted:
            return []
        pipe = self._pipeline(transaction=False)
        pipe.hmget(self.keys.instances, wanted)
        pipe.mget([self.keys.deleted_record(u) for u in wanted])
        raws, tombs = pipe.execute()
        found = (
            (uuid, raw if raw is not None else tomb)
            for uuid, raw, tomb in zip(wanted, raws, tombs, strict=True)
        )
        return list(
            _each(
                _instance,
                ((u, raw) for u, raw in found if raw is not None and raw != DELETING_MARKER),
                self.keys.instances,
            )
        )

    def scan_instances(self, batch: int = 500) -> Iterator[InstanceRecord]:
        yield from _each(_instance, self._scan(self.keys.instances, batch), self.keys.instances)

    def _instances_page(self, cursor: int, batch: int) -> tuple[int, list[InstanceRecord]]:
        """One HSCAN page of the instances hash: the next cursor (0: done) and its records."""
        cursor, page = self._scan_hash(self.keys.instances, cursor, batch)
        return cursor, list(_each(_instance, page.items(), self.keys.instances))

    def list_instances_due(self, now: float, limit: int = 1000) -> list[InstanceRecord]:
        due, complete = self._due(now, limit)
        if not complete:  # records from before the index: index them, once
            self.index_deadlines()
            due, _ = self._due(now, limit)
        return due

    @_translated
    def _due(self, now: float, limit: int) -> tuple[list[InstanceRecord], bool]:
        """What the due script returns: the due records, and whether the index is complete."""
        due, unreadable, complete = self._scripts.due_instances(
            keys=(self.keys.deadlines, self.keys.instances),
            args=(repr(float(now)), max(int(limit), 0)),
        )
        for name in unreadable:  # the script skipped them: say so
            LOG.error(
                "corrupt_record", key=f"{self.keys.instances}[{name}]", reason="not a JSON object"
            )
        return list(_each(_instance, _pairs(due), self.keys.instances)), bool(complete)

    def index_deadlines(self, batch: int = 100) -> int:
        """Index the deadlines of records written before the deadline index was.

        Walks the instances hash ``batch`` records at a time (HSCAN), each
        page's records with a deadline indexed by one short script, then marks
        the index complete; so an upgraded store is indexed without one long
        blocking step, while writes go on (each write keeps the index itself).
        :meth:`list_instances_due` calls it once, when the index is not marked
        complete. Idempotent; returns how many records it indexed.
        """
        started = time.monotonic()
        added = scanned = 0
        cursor = 0
        while True:
            cursor, page = self._instances_page(cursor, batch)
            scanned += len(page)
            pending = [r.uuid for r in page if r.deadline is not None]
            if pending:
                added += self._index_page(pending)
            if cursor == 0:
                break
        self._mark_indexed()
        LOG.info(
            "deadline_index_built",
            scanned=scanned,
            indexed=added,
            seconds=round(time.monotonic() - started, 3),
        )
        return added

    @_translated
    def _index_page(self, uuids: list[str]) -> int:
        return int(
            self._scripts.index_deadlines(
                keys=(self.keys.deadlines, self.keys.instances), args=uuids
            )
        )

    @_translated
    def _mark_indexed(self) -> None:
        self._client.zadd(self.keys.deadlines, {INDEX_COMPLETE: float("inf")})

    # housekeeping

    def ping(self) -> bool:
        try:
            if isinstance(self._client, RedisCluster):
                # PING goes to any node, and a node answers it while the cluster
                # is down; a read of one key asks the master of this store's slot.
                self._client.exists(self.keys.providers)
                return True
            return bool(self._client.ping())
        except (redis.RedisError, redis.exceptions.RedisClusterException):
            return False

    @_translated
    def wipe(self) -> None:
        # UNLINK: each key goes at once and its memory is freed off Redis's
        # main thread, however big the hash.
        self._client.unlink(*self.keys.all())
        # The per-instance keys of deleted records, a SCAN page at a time.
        for key in self._client.scan_iter(match=f"{self.keys.deleted}:*", count=1000):
            self._client.unlink(key)

    def close(self) -> None:
        self._client.close()
