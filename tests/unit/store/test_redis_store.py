"""What only the Redis store promises: key layout, URLs, connection and data errors.

The contract itself is tested in ``test_contract.py``; these run against the
real Redis too (and fail, never skip, when it is not there).
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import redis
import structlog
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.sentinel import SentinelConnectionPool

from scheduler import rules
from scheduler.engine.hostview import HostView
from scheduler.exceptions import CorruptRecord, StoreUnavailable, StreamTruncated
from scheduler.objects import ACTIVE, AllocationRequest, InstanceRecord
from scheduler.store import (
    Aggregate,
    Inventory,
    MemoryStore,
    Provider,
    RedisStore,
    Service,
    ServiceReport,
    open_store,
    redis_feed,
)
from scheduler.store.columns import CompactSnapshot
from scheduler.store.keys import Keys
from scheduler.store.redis_store import redis_client
from scheduler.store.scripts import INDEX_COMPLETE
from tests.fixtures.store import REDIS_URL
from tests.unit.factories import NOW, child, host, populate, settings


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


# --- a cold load read in pages while writes go on --------------------------------------


class WritesBetweenPages(RedisStore):
    """A store whose cold load reads pages of ``page`` fields and runs one of
    ``writes`` after each."""

    def __init__(
        self, *args: Any, writes: Iterator[Callable[[], object]], page: int, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.writes = writes
        self.page = page
        self.pages = 0

    def compact_snapshot(self, batch: int = 0) -> CompactSnapshot:
        return super().compact_snapshot(batch or self.page)

    def _scan_hash(self, key: str, cursor: int, batch: int) -> tuple[int, dict[str, str]]:
        found = super()._scan_hash(key, cursor, batch)
        self.pages += 1
        write = next(self.writes, None)
        if write is not None:
            write()
        return found


def _view_state(view: HostView, now: float) -> dict[str, Any]:
    """What a view answers about every host, child and aggregate, by name (the
    rows of hosts added from the feed come after the loaded ones)."""
    rcs = view.resource_classes
    traits = [f"CUSTOM_T{n}" for n in range(4)] + ["COMPUTE_STATUS_DISABLED"]
    up = rules.is_up(now, view.last_seen, settings().service_down_time)

    def resources(capacity: np.ndarray, used: np.ndarray, i: int) -> dict[str, tuple[int, int]]:
        return {
            rc: (int(capacity[j, i]), int(used[j, i]))
            for j, rc in enumerate(rcs)
            if capacity[j, i] or used[j, i]
        }

    every = np.arange(view.size)
    has = {t: view.has_trait(t, every) for t in traits}
    hosts = {
        name: (
            view.uuids[i],
            int(view.generation[i]),
            int(view.consumers[i]),
            resources(view.capacity, view.used, i),
            {t for t in traits if has[t][i]},
            view.aggregate_sets[int(view.agg_set[i])],
            view.zone_of(i),
            bool(view.disabled[i]),
            int(view.failed_builds[i]),
            bool(up[i]),
            view.last_seen[i] == -np.inf,  # no service record
        )
        for i, name in enumerate(view.names)
    }
    kids = {
        uuid: (view.names[int(view.kid_host[k])], resources(view.kid_capacity, view.kid_used, k))
        for k, uuid in enumerate(view.kid_uuids)
    }
    return {"hosts": hosts, "kids": kids, "aggregates": dict(view.aggregates)}


def _cloud_writes(store: RedisStore, hosts: list[str]) -> Iterator[Callable[[], object]]:
    """Rounds of every kind of fed write (and heartbeats), on hosts spread over
    the hashes' pages: usage, inventory, traits, aggregates and their
    metadata, services disabled, failing, reporting, marked down and back,
    new hosts and new children of them."""

    def provider(name: str) -> Provider:
        return store.get_provider_by_name(name)

    def claim(consumer: str, rp: str, rc: str = "VCPU") -> None:
        store.claim(consumer, AllocationRequest({rp: {rc: 1}}, project_id="p", user_id="u"))

    def new_host(name: str, parent: str | None = None) -> None:
        uuid = str(uuidlib.uuid4())
        store.create_provider(uuid, name, parent_uuid=parent)
        store.set_inventory(uuid, 0, {"VCPU": Inventory(total=8)})
        if parent is None:
            store.register_services([Service(host=name, rpc_server="sim")])
            store.heartbeat([name], NOW)

    for k in range(60):
        h = hosts[k * 7 % len(hosts)]
        yield lambda h=h, k=k: claim(f"c-{k}", provider(h).uuid)
        if k >= 3:
            yield lambda k=k: store.release(f"c-{k - 3}")
        h = hosts[k * 11 % len(hosts)]
        yield lambda h=h, k=k: store.set_traits(
            provider(h).uuid, provider(h).generation, [f"CUSTOM_T{k % 4}"]
        )
        h = hosts[k * 13 % len(hosts)]
        yield lambda h=h, k=k: store.set_inventory(
            provider(h).uuid, provider(h).generation, {"VCPU": Inventory(total=16 + k)}
        )
        h = hosts[k * 5 % len(hosts)]
        yield lambda h=h, k=k: store.set_aggregates(
            provider(h).uuid, provider(h).generation, [f"agg-{k % 3}"]
        )
        yield lambda k=k: store.put_aggregate(
            Aggregate(f"agg-{k % 3}", f"a{k % 3}", {"availability_zone": f"z{k}"})
        )
        h = hosts[k * 17 % len(hosts)]
        yield lambda h=h, k=k: store.set_service_disabled(h, k % 2 == 0, f"r{k}")
        yield lambda h=h: store.record_build_result(h, False)
        h = hosts[k * 19 % len(hosts)]
        yield lambda h=h, k=k: store.report_services([ServiceReport(h, stats={"io": k})])
        yield lambda h=h: store.mark_down([h])
        if k % 2:  # and back: a heartbeat that the feed does not carry
            yield lambda h=h: store.heartbeat([h], NOW)
        yield lambda k=k: new_host(f"new-{k}")
        if k:
            yield lambda k=k: new_host(f"new-{k}-gpu", parent=provider(f"new-{k - 1}").uuid)
            yield lambda k=k: claim(f"g-{k}", provider(f"new-{k}-gpu").uuid)
        yield lambda k=k: claim(f"kid-{k}", provider("h00-gpu").uuid)


def test_a_view_loaded_while_writes_land_between_pages_converges() -> None:
    # Every hash is read in pages after the cursor, writes landing between
    # them; the view replays the changes after the cursor. Loaded so, and
    # caught up, it must answer as a view loaded from the store at rest.
    prefix = f"test-store-{uuidlib.uuid4().hex}"
    store = RedisStore(REDIS_URL, prefix, socket_timeout=2.0)
    hosts = [f"h{n:02d}" for n in range(80)]
    paged = WritesBetweenPages(
        REDIS_URL, prefix, socket_timeout=2.0, writes=_cloud_writes(store, hosts), page=4
    )
    try:
        for k in range(3):
            store.put_aggregate(Aggregate(f"agg-{k}", f"a{k}"))
        for name in hosts:
            uuid = str(uuidlib.uuid4())
            store.create_provider(uuid, name)
            store.set_inventory(uuid, 0, {"VCPU": Inventory(16), "MEMORY_MB": Inventory(4096)})
        root = store.get_provider_by_name("h00").uuid
        gpu = store.create_provider(str(uuidlib.uuid4()), "h00-gpu", parent_uuid=root)
        store.set_inventory(gpu.uuid, gpu.generation, {"VCPU": Inventory(total=100)})
        store.register_services([Service(host=name, rpc_server="sim") for name in hosts])
        store.heartbeat(hosts, NOW - 5)

        view = HostView(paged, settings())
        view.refresh(NOW)  # loads, a write after each page, and catches up
        assert paged.pages >= 30  # services and providers came in many pages
        assert next(paged.writes, None) is not None  # and writes were left over
        quiet = HostView(store, settings())
        quiet.refresh(NOW)
        got, want = _view_state(view, NOW), _view_state(quiet, NOW)
        # Heartbeats are not fed: one that landed after its page reaches the
        # view with the next heartbeat re-read, as for any view; all else
        # must be the same at once.
        for state in (got, want):
            for name, row in state["hosts"].items():
                state["hosts"][name] = row[:-2] + row[-1:]
        assert got == want
        assert len(got["hosts"]) > len(hosts) and len(got["kids"]) > 1
        later = NOW + settings().services_refresh_interval
        view.refresh(later)
        quiet.refresh(later)
        assert _view_state(view, later) == _view_state(quiet, later)
    finally:
        store.wipe()
        store.close()
        paged.close()


def _snapshot_rows(snap: CompactSnapshot) -> tuple[Any, ...]:
    """A compact snapshot as objects, row by row (codes may be numbered apart)."""
    hosts, services = snap.hosts, snap.services
    return (
        snap.cursor,
        [hosts.provider(i) for i in range(len(hosts))],
        sorted(hosts.usage),
        [services.service(i) for i in range(len(services))],
        list(snap.children),
        list(snap.aggregates),
    )


def test_pages_read_in_bulk_give_what_reading_a_record_at_a_time_gives(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cold load reads a page's roots and services a field at a time; a
    # page it cannot read so is read record by record (the corrupt-record
    # tests cover the skipping). Both must give the same snapshot.
    populate(
        store,
        [
            host(
                f"h{n:02d}",
                vcpus=8 + n % 3 * 8,
                traits=[f"CUSTOM_T{n % 4}"] * (n % 2),
                aggregates=[f"agg-{n % 3}"] if n % 5 else [],
                disabled=n % 7 == 0,
                failed_builds=n % 4,
                capabilities={"cpu_info": {"arch": "x86_64"}} if n % 2 else None,
                stats={"io": n % 3} if n % 3 else None,
                children=[child(f"gpu{n}", inventory={"CUSTOM_GPU": 4})] if n % 9 == 0 else [],
                service=n != 5,
            )
            for n in range(40)
        ],
        [Aggregate(f"agg-{k}", f"a{k}", {"availability_zone": f"z{k}"}) for k in range(3)],
    )
    for n in range(0, 40, 3):
        rp = store.get_provider_by_name(f"h{n:02d}").uuid
        amounts = {"VCPU": 1 + n % 2, "MEMORY_MB": 512} if n % 2 else {"DISK_GB": 10}
        store.claim(f"c-{n}", AllocationRequest({rp: amounts}, project_id="p", user_id="u"))
    store.heartbeat([f"h{n:02d}" for n in range(0, 40, 2)], NOW)
    bulk_pages = []
    real_add_hosts = redis_feed._add_hosts
    monkeypatch.setattr(
        redis_feed,
        "_add_hosts",
        lambda records, hosts: bulk_pages.append(len(records)) or real_add_hosts(records, hosts),
    )
    in_bulk = store.compact_snapshot(batch=7)
    assert sum(bulk_pages) == 40 and len(bulk_pages) > 3  # every root, in bulk, in pages
    monkeypatch.setattr(redis_feed, "_add_hosts", lambda records, hosts: False)
    monkeypatch.setattr(redis_feed, "_add_services", lambda records, seen, table: False)
    one_by_one = store.compact_snapshot(batch=7)
    assert _snapshot_rows(in_bulk) == _snapshot_rows(one_by_one)
    rows = _snapshot_rows(in_bulk)
    assert len(rows[1]) == 40 and len(rows[3]) == 39 and len(rows[4]) == 5
    assert rows[2] == ["DISK_GB", "MEMORY_MB", "VCPU"]
