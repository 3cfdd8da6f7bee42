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
  error reply to an exception lives in :mod:`.redis_connect` and nowhere
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

import redis
from redis.cluster import RedisCluster

from scheduler.store.redis_connect import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEME,
    Client,
    redis_client,
    translated,
)
from scheduler.store.redis_feed import RedisFeed
from scheduler.store.redis_instances import RedisInstances
from scheduler.store.redis_placement import RedisPlacement
from scheduler.store.redis_services import RedisServices

__all__ = ["CLUSTER_SCHEMES", "SENTINEL_SCHEME", "Client", "RedisStore", "redis_client"]


class RedisStore(RedisPlacement, RedisFeed, RedisServices, RedisInstances):
    """The store contract on one Redis (or one Redis Cluster slot).

    ``keys`` names every key it uses (all under ``{key_prefix}:``);
    ``stream_maxlen`` is the change stream's approximate bound. Each part is
    in a module of its own (see :mod:`scheduler.store.redis_base`); what is
    here is the housekeeping.
    """

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

    @translated
    def wipe(self) -> None:
        # UNLINK: each key goes at once and its memory is freed off Redis's
        # main thread, however big the hash.
        self._client.unlink(*self.keys.all())
        # The per-instance keys of deleted records, a SCAN page at a time.
        for key in self._client.scan_iter(match=f"{self.keys.deleted}:*", count=1000):
            self._client.unlink(key)

    def close(self) -> None:
        self._client.close()
