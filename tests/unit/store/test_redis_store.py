"""What only the Redis store promises: key layout, URLs, connection and data errors.

The contract itself is tested in ``test_contract.py``; these run against the
real Redis too (and fail, never skip, when it is not there).
"""

from __future__ import annotations

import json
import os
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import structlog
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.sentinel import SentinelConnectionPool

from scheduler.exceptions import CorruptRecord, StoreUnavailable, StreamTruncated
from scheduler.objects import ACTIVE, AllocationRequest, InstanceRecord
from scheduler.store import MemoryStore, RedisStore, open_store
from scheduler.store.keys import Keys
from scheduler.store.redis_store import redis_client
from scheduler.store.scripts import INDEX_COMPLETE

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


# --- the deadline index -------------------------------------------------------------


def _written_before_the_index(store: RedisStore, records: list[InstanceRecord]) -> None:
    """Records as a store from before the deadline index holds them: in the
    instances hash only."""
    with redis.Redis.from_url(REDIS_URL) as client:
        pipe = client.pipeline(transaction=False)
        for record in records:
            pipe.hset(store.keys.instances, record.uuid, json.dumps(record.to_primitive()))
        pipe.execute()


def test_a_store_from_before_the_index_is_indexed_on_the_first_sweep(
    store: RedisStore,
) -> None:
    old_due = [InstanceRecord(uuid=str(uuidlib.uuid4()), deadline=float(i)) for i in range(5)]
    later = InstanceRecord(uuid=str(uuidlib.uuid4()), deadline=50.0)
    finished = [InstanceRecord(uuid=str(uuidlib.uuid4()), state=ACTIVE) for _ in range(1200)]
    _written_before_the_index(store, [*old_due, later, *finished])
    new = InstanceRecord(uuid=str(uuidlib.uuid4()), deadline=2.5)
    store.create_instances([new])  # written by this code: indexed as it is written
    with structlog.testing.capture_logs() as logs:
        due = store.list_instances_due(10.0)
    assert [r.uuid for r in due] == [r.uuid for r in [*old_due[:3], new, *old_due[3:]]]
    [built] = [e for e in logs if e["event"] == "deadline_index_built"]
    assert (built["scanned"], built["indexed"]) == (1207, 6)
    with redis.Redis.from_url(REDIS_URL, decode_responses=True) as client:
        assert client.zscore(store.keys.deadlines, INDEX_COMPLETE) == float("inf")
        assert client.zcard(store.keys.deadlines) == 8  # the pending ones and the mark
    # Once complete, a sweep reads the index only: no second scan.
    with structlog.testing.capture_logs() as logs:
        assert [r.uuid for r in store.list_instances_due(100.0)][-1] == later.uuid
    assert not [e for e in logs if e["event"] == "deadline_index_built"]
    assert store.index_deadlines(batch=100) == 0, "idempotent"


def test_an_index_entry_out_of_step_with_its_record_is_put_right(store: RedisStore) -> None:
    later, gone, cleared = (str(uuidlib.uuid4()) for _ in range(3))
    store.create_instances(
        [InstanceRecord(uuid=later, deadline=50.0), InstanceRecord(uuid=cleared, deadline=1.0)]
    )
    store.list_instances_due(0.0)  # the index is complete
    with redis.Redis.from_url(REDIS_URL, decode_responses=True) as client:
        # Values written around the scripts: an entry earlier than its
        # record's deadline, one with no record, a record whose deadline went.
        client.zadd(store.keys.deadlines, {later: 1.0, gone: 1.0})
        raw = json.loads(client.hget(store.keys.instances, cleared))
        client.hset(store.keys.instances, cleared, json.dumps({**raw, "deadline": None}))
        assert store.list_instances_due(10.0) == []
        assert client.zscore(store.keys.deadlines, later) == 50.0
        assert client.zscore(store.keys.deadlines, gone) is None
        assert client.zscore(store.keys.deadlines, cleared) is None
    assert [r.uuid for r in store.list_instances_due(60.0)] == [later]


def test_an_unreadable_value_in_the_index_is_named_once(store: RedisStore) -> None:
    uuid = str(uuidlib.uuid4())
    store.list_instances_due(0.0)
    with redis.Redis.from_url(REDIS_URL, decode_responses=True) as client:
        client.hset(store.keys.instances, uuid, "{not json")
        client.zadd(store.keys.deadlines, {uuid: 1.0})
    with structlog.testing.capture_logs() as logs:
        assert store.list_instances_due(10.0) == []
        assert store.list_instances_due(10.0) == []
    assert [e["key"] for e in logs if e["event"] == "corrupt_record"] == [
        f"{store.keys.instances}[{uuid}]"
    ]


def test_a_deadline_keeps_every_digit_in_the_index(store: RedisStore) -> None:
    uuid = str(uuidlib.uuid4())
    deadline = 1764616285.1234567
    store.create_instances([InstanceRecord(uuid=uuid)])
    store.update_instance(uuid, deadline=deadline)
    assert store.list_instances_due(deadline - 1e-6) == []
    assert [r.deadline for r in store.list_instances_due(deadline)] == [deadline]


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


def test_cluster_url_is_its_first_nodes_url_and_the_rest_start_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: dict[str, Any] = {}

    def from_url(url: str, **kwargs: Any) -> str:
        built.update(kwargs, url=url)
        return "client"

    monkeypatch.setattr(RedisCluster, "from_url", from_url)  # building one connects
    url = "rediss+cluster://app:s%40cret@10.0.0.1:7000,[::1]:7001/?ssl_ca_certs=/etc/ca.pem"
    assert redis_client(url, socket_timeout=2.0) == "client"
    assert built["url"] == "rediss://app:s%40cret@10.0.0.1:7000/?ssl_ca_certs=/etc/ca.pem"
    assert [(n.host, n.port) for n in built["startup_nodes"]] == [("::1", 7001)]
    assert built["decode_responses"] is True and built["socket_timeout"] == 2.0
    redis_client("redis+cluster://10.0.0.1:7000")
    assert built["url"] == "redis://10.0.0.1:7000" and built["startup_nodes"] == []


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://",
        "redis+cluster://:pw@/",
        "rediss+cluster://10.0.0.1:7000/3",
        "redis+cluster://10.0.0.1:7000,10.0.0.2/",
    ],
)
def test_cluster_url_needs_host_port_pairs_and_no_db(url: str) -> None:
    # Refused before any connection: a cluster client connects when built.
    with pytest.raises(ValueError, match="cluster URL"):
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
