"""What every part of the Redis store shares: its client, key names and
registered scripts, the write acknowledged by replicas, and the paged read of
a whole hash.

:class:`~scheduler.store.redis_store.RedisStore` is this base and one part
per concern (:mod:`.redis_placement`, :mod:`.redis_feed`,
:mod:`.redis_services`, :mod:`.redis_instances`), each a subclass of
:class:`RedisBase`; the contract they keep together is
:class:`scheduler.store.base.Store`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from scheduler.exceptions import StoreUnavailable
from scheduler.store.base import Store
from scheduler.store.keys import Keys
from scheduler.store.redis_connect import redis_client, translated
from scheduler.store.scripts import Scripts

#: Fields asked per HSCAN page (its COUNT) where a hash is read whole: a cold
#: load, a list, every host's heartbeat. Redis follows the hint closely on a
#: hash this big, and a page costs it time in proportion to its size. At
#: 300,000 hosts (about 1 kB per provider record) on a shared 2-core machine
#: at load average 15: median page 5 ms at 1000, longest 110-160 ms (500:
#: 111 ms, 2000: 356 ms), against 29.5 s for the one script this replaced;
#: 1000 also gave the shortest cold load. To be measured again on a quiet
#: machine against the 10 ms bound.
PAGE = 1000


class RedisBase(Store):
    """The state and the plumbing every part of :class:`RedisStore` uses.

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

    # whole hashes, a page at a time

    def _scan(self, key: str, batch: int = PAGE) -> Iterator[tuple[str, str]]:
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

    def _whole(self, key: str, batch: int = PAGE) -> dict[str, str]:
        """A whole hash, read in HSCAN pages (:meth:`_pages`)."""
        found: dict[str, str] = {}
        for page in self._pages(key, batch):
            found.update(page)
        return found

    @translated
    def _scan_hash(self, key: str, cursor: int, batch: int) -> tuple[int, dict[str, str]]:
        """One HSCAN page of a hash: the next cursor (0: done) and its fields."""
        found, page = self._client.hscan(key, cursor, count=batch)
        return int(found), cast("dict[str, str]", page)
