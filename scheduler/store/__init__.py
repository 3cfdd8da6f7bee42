"""The shared store: the contract and its parts, its records, and :func:`open_store`.

The store URL decides the implementation: ``memory://`` is the in-process
:class:`MemoryStore` (the key prefix is not used); ``redis://``,
``rediss://`` (TLS), ``unix://``,
``redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]`` and
``redis+cluster://[[user]:password@]host:port[,host:port...][/?options]``
(``rediss+cluster://`` over TLS) are a :class:`RedisStore` whose keys all start
with ``{key_prefix}:`` (one hash slot: on a cluster, one shard per prefix).

The names below are imported when first used (:mod:`scheduler.lazy`): a
reader of the records does not load the Redis client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scheduler import lazy

if TYPE_CHECKING:
    from oslo_config import cfg

    from scheduler.store.base import (
        Aggregate,
        Change,
        ChangeFeed,
        Consumer,
        EndedInstance,
        Eviction,
        GroupClaim,
        InstanceReport,
        InstanceStore,
        Inventory,
        PendingIndex,
        PlacementReader,
        PlacementStore,
        Provider,
        RecordCheck,
        RunningInstance,
        Service,
        ServiceReport,
        ServiceStore,
        Store,
        Victim,
    )
    from scheduler.store.columns import CompactSnapshot, HostColumns, ServiceColumns
    from scheduler.store.memory import MemoryStore
    from scheduler.store.redis_store import RedisStore

__all__ = [
    "Aggregate",
    "Change",
    "ChangeFeed",
    "CompactSnapshot",
    "Consumer",
    "EndedInstance",
    "Eviction",
    "GroupClaim",
    "HostColumns",
    "InstanceReport",
    "InstanceStore",
    "PendingIndex",
    "Inventory",
    "MemoryStore",
    "PlacementReader",
    "PlacementStore",
    "Provider",
    "RecordCheck",
    "RedisStore",
    "RunningInstance",
    "Service",
    "ServiceColumns",
    "ServiceReport",
    "ServiceStore",
    "Store",
    "Victim",
    "check_store_url",
    "make_store",
    "open_store",
]

if not TYPE_CHECKING:  # the type checker reads the imports above, and knows no other name
    __getattr__, __dir__ = lazy.exports(
        __name__,
        {
            "Aggregate": "scheduler.store.base",
            "Change": "scheduler.store.base",
            "ChangeFeed": "scheduler.store.base",
            "Consumer": "scheduler.store.base",
            "EndedInstance": "scheduler.store.base",
            "Eviction": "scheduler.store.base",
            "GroupClaim": "scheduler.store.base",
            "InstanceReport": "scheduler.store.base",
            "InstanceStore": "scheduler.store.base",
            "PendingIndex": "scheduler.store.base",
            "Inventory": "scheduler.store.base",
            "PlacementReader": "scheduler.store.base",
            "PlacementStore": "scheduler.store.base",
            "Provider": "scheduler.store.base",
            "RecordCheck": "scheduler.store.base",
            "RunningInstance": "scheduler.store.base",
            "Service": "scheduler.store.base",
            "ServiceReport": "scheduler.store.base",
            "ServiceStore": "scheduler.store.base",
            "Store": "scheduler.store.base",
            "Victim": "scheduler.store.base",
            "CompactSnapshot": "scheduler.store.columns",
            "HostColumns": "scheduler.store.columns",
            "ServiceColumns": "scheduler.store.columns",
            "MemoryStore": "scheduler.store.memory",
            "RedisStore": "scheduler.store.redis_store",
        },
    )

_REDIS_SCHEMES = (
    "redis",
    "rediss",
    "unix",
    "redis+sentinel",
    "redis+cluster",
    "rediss+cluster",
)


def open_store(url: str, key_prefix: str, **options: Any) -> Store:
    """The store at ``url``; :class:`ValueError` for a scheme it does not know.

    ``options`` go to :class:`RedisStore` (``socket_timeout``, ``min_replicas``,
    ``min_replicas_timeout``); the in-process store has no replicas and ignores them.
    """
    if check_store_url(url) == "memory":
        from scheduler.store.memory import MemoryStore

        return MemoryStore()
    from scheduler.store.redis_store import RedisStore

    return RedisStore(url, key_prefix, **options)


def make_store(conf: cfg.ConfigOpts) -> Store:
    """The store the ``[redis]`` options name (what every command and daemon opens)."""
    r = conf.redis
    return open_store(
        r.url,
        r.key_prefix,
        min_replicas=r.min_replicas,
        min_replicas_timeout=r.min_replicas_timeout,
        socket_timeout=r.socket_timeout,
    )


def check_store_url(url: str) -> str:
    """The scheme of a store URL; :class:`ValueError` for one :func:`open_store`
    does not know (asked before anything connects, and by ``open_store``)."""
    scheme, sep, _ = url.partition("://")
    if sep and (scheme == "memory" or scheme in _REDIS_SCHEMES):
        return scheme
    raise ValueError(
        f"unknown store URL scheme in {url.split('@')[-1]!r}; "
        f"expected memory:// or one of {', '.join(_REDIS_SCHEMES)}"
    )
