"""What only the Redis store promises: key layout, URLs, connection and data errors.

The contract itself is tested in ``test_contract.py``; these run against the
real Redis too (and fail, never skip, when it is not there).
"""

from __future__ import annotations

import json
import os
import uuid as uuidlib
from collections.abc import Iterator

import pytest
import redis
from redis.crc import key_slot
from redis.sentinel import SentinelConnectionPool

from scheduler.exceptions import CorruptRecord, StoreUnavailable, StreamTruncated
from scheduler.objects import AllocationRequest
from scheduler.store import MemoryStore, RedisStore, open_store
from scheduler.store.keys import Keys
from scheduler.store.redis_store import redis_client

REDIS_URL = os.environ.get("SCHEDULER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def store() -> Iterator[RedisStore]:
    store = RedisStore(REDIS_URL, f"test-store-{uuidlib.uuid4().hex}", socket_timeout=2.0)
    if not store.ping():
        pytest.fail(f"Redis at {REDIS_URL} does not answer")
    yield store
    with redis.Redis.from_url(REDIS_URL) as client:
        client.delete(*store.keys.all())
    store.close()


def test_every_key_of_a_store_hashes_to_one_cluster_slot() -> None:
    keys = Keys.for_prefix("cell-1")
    assert all(key.startswith("{cell-1}:") for key in keys.all())
    assert len({key_slot(key.encode()) for key in keys.all()}) == 1
    assert len(set(keys.all())) == len(Keys.__dataclass_fields__)


@pytest.mark.parametrize("prefix", ["", "a{b", "a}b"])
def test_a_prefix_that_would_break_the_hash_tag_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError):
        Keys.for_prefix(prefix)


def test_keys_are_written_only_under_the_prefix(store: RedisStore) -> None:
    p = store.create_provider(str(uuidlib.uuid4()), "h")
    with redis.Redis.from_url(REDIS_URL) as client:
        written = set(client.scan_iter(match=f"*{store.keys.providers.split(':')[0]}*"))
    assert {key.decode() for key in written} <= set(store.keys.all())
    assert store.get_provider(p.uuid) == p


def test_an_unreachable_redis_is_store_unavailable() -> None:
    store = RedisStore("redis://127.0.0.1:1/0", "unreachable", socket_timeout=0.5)
    assert store.ping() is False
    with pytest.raises(StoreUnavailable):
        store.claim(
            str(uuidlib.uuid4()),
            AllocationRequest(
                allocations={str(uuidlib.uuid4()): {"VCPU": 1}}, project_id="p", user_id="u"
            ),
        )
    with pytest.raises(StoreUnavailable):
        store.list_providers()


def test_an_unreadable_record_is_corrupt(store: RedisStore) -> None:
    uuid = str(uuidlib.uuid4())
    with redis.Redis.from_url(REDIS_URL) as client:
        client.hset(store.keys.providers, uuid, json.dumps({"uuid": uuid}))
    with pytest.raises(CorruptRecord) as exc:
        store.get_provider(uuid)
    assert uuid in exc.value.kwargs["key"]


@pytest.mark.parametrize(
    "url, kind",
    [
        ("memory://", MemoryStore),
        ("redis://127.0.0.1:6379/0", RedisStore),
        ("rediss://user:secret@127.0.0.1:6380/1", RedisStore),
        ("unix:///run/redis.sock?db=2", RedisStore),
        ("redis+sentinel://127.0.0.1:26379/mymaster", RedisStore),
    ],
)
def test_open_store_picks_the_implementation_by_scheme(url: str, kind: type) -> None:
    store = open_store(url, "prefix")  # nothing connects until the first command
    assert isinstance(store, kind)
    store.close()


@pytest.mark.parametrize("url", ["http://127.0.0.1", "memory", "127.0.0.1:6379"])
def test_open_store_refuses_an_unknown_scheme(url: str) -> None:
    with pytest.raises(ValueError):
        open_store(url, "prefix")


def test_sentinel_url_names_the_sentinels_service_db_and_password() -> None:
    client = redis_client("redis+sentinel://:s%40cret@10.0.0.1:26379,[::1]:26380/cell1/2")
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "cell1"
    assert [
        (c.connection_pool.connection_kwargs["host"], c.connection_pool.connection_kwargs["port"])
        for c in pool.sentinel_manager.sentinels
    ] == [("10.0.0.1", 26379), ("::1", 26380)]
    assert pool.connection_kwargs["db"] == 2
    assert pool.connection_kwargs["password"] == "s@cret"
    client.close()


@pytest.mark.parametrize("url", ["redis+sentinel://10.0.0.1:26379", "redis+sentinel:///cell1"])
def test_sentinel_url_needs_hosts_and_a_service(url: str) -> None:
    with pytest.raises(ValueError):
        redis_client(url)


def test_a_cursor_the_store_lost_is_truncated_though_newer_ones_follow(
    store: RedisStore,
) -> None:
    """A store gone back in time (a restored append-only file, a replica that was
    behind) and written to since: a reader's cursor is older than the stream's
    last id again but no longer one of its entries, so the reader reloads."""
    p = store.create_provider(str(uuidlib.uuid4()), "h1")
    kept = store.compact_snapshot().cursor
    store.set_traits(p.uuid, p.generation, ["CUSTOM_A"])
    held = store.compact_snapshot().cursor  # what a reader had read up to
    client = redis_client(REDIS_URL)
    client.xdel(store.keys.changes, held)  # the second the store lost
    store.set_traits(p.uuid, p.generation + 1, ["CUSTOM_B"])  # written to since
    with pytest.raises(StreamTruncated):
        store.changes(held)
    assert [c.kind for c in store.changes(kept)] == ["provider"]
