"""Foreign or damaged values under the store's key prefix: reported, never
crashed on.

A list (and the snapshot a worker loads) skips a value it cannot read and logs
``corrupt_record`` with its key; asking for that one record raises
:class:`CorruptRecord`; a change-feed entry it cannot read comes back as a
``corrupt`` change, which the host view logs once and moves past. A worker's
engine over such a store goes on placing requests. Runs on the real Redis
(these faults cannot happen in the in-memory store).
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import structlog

from scheduler.exceptions import CorruptRecord, NoValidHost
from scheduler.objects import InstanceRecord
from scheduler.steps import Step, StepGuard
from scheduler.store import RedisStore
from scheduler.store.base import CORRUPT_CHANGE
from scheduler.store.columns import CompactSnapshot
from tests.fixtures.store import REDIS_URL
from tests.unit.factories import engine, host, populate, spec, uuid_of

GARBAGE = "{not json"
FIELD = "00000000-0000-4000-8000-00000000dead"


@pytest.fixture
def store() -> Iterator[RedisStore]:
    store = RedisStore(REDIS_URL, f"test-corrupt-{uuidlib.uuid4().hex}", socket_timeout=2.0)
    if not store.ping():
        pytest.fail(f"Redis at {REDIS_URL} does not answer")
    populate(store, [host("h1", ram=4096), host("h2", ram=4096)])
    store.create_instances(
        [
            InstanceRecord(uuid=uuid_of("i-ok")),
            InstanceRecord(uuid=uuid_of("i-due"), deadline=100.0),
        ]
    )
    yield store
    store.wipe()
    store.close()


@pytest.fixture
def raw() -> Iterator[redis.Redis]:
    with redis.Redis.from_url(REDIS_URL, decode_responses=True) as client:
        yield client


def _sweep(store: RedisStore) -> list[InstanceRecord]:
    """The conductor's sweep, with ``FIELD`` in the deadline index as if it were
    due: the sweep reads only indexed records, so this is a damaged pending one."""
    with redis.Redis.from_url(REDIS_URL) as client:
        client.zadd(store.keys.deadlines, {FIELD: 1.0})
    return store.list_instances_due(2e9)


#: (hash, a bad value, the list that must skip it, the get that must raise)
BAD_VALUES = [
    pytest.param(
        "providers",
        GARBAGE,
        lambda s: s.list_providers(),
        lambda s: s.get_provider(FIELD),
        id="provider-not-json",
    ),
    pytest.param(
        "providers",
        json.dumps({"uuid": FIELD}),
        lambda s: s.list_providers(),
        lambda s: s.get_provider(FIELD),
        id="provider-missing-fields",
    ),
    pytest.param(
        "providers",
        "[" * 100000,
        lambda s: s.list_providers(),
        lambda s: s.get_provider(FIELD),
        id="provider-nested-too-deep",
    ),
    # The compact snapshot a worker's view loads from skips the same values.
    pytest.param(
        "providers",
        GARBAGE,
        lambda s: _hosts(s.compact_snapshot()),
        None,
        id="compact-provider-not-json",
    ),
    pytest.param(
        "providers",
        json.dumps({"uuid": FIELD}),
        lambda s: _hosts(s.compact_snapshot()),
        None,
        id="compact-provider-missing-fields",
    ),
    pytest.param(
        "providers",
        "[" * 100000,
        lambda s: _hosts(s.compact_snapshot()),
        None,
        id="compact-provider-nested-too-deep",
    ),
    pytest.param(
        "providers",
        json.dumps([FIELD]),
        lambda s: _hosts(s.compact_snapshot()),
        None,
        id="compact-provider-a-list",
    ),
    pytest.param(
        "services",
        GARBAGE,
        lambda s: _services(s.compact_snapshot()),
        None,
        id="compact-service-not-json",
    ),
    pytest.param(
        "services",
        json.dumps({"host": "ghost"}),
        lambda s: _services(s.compact_snapshot()),
        None,
        id="compact-service-missing-fields",
    ),
    pytest.param(
        "aggregates",
        json.dumps([1, 2]),
        lambda s: s.list_aggregates(),
        None,
        id="aggregate-a-list",
    ),
    pytest.param(
        "consumers",
        GARBAGE,
        lambda s: s.list_consumers(),
        lambda s: s.get_consumer(FIELD),
        id="consumer-not-json",
    ),
    pytest.param(
        "services",
        json.dumps({"host": "ghost"}),
        lambda s: s.list_services(),
        None,
        id="service-missing-fields",
    ),
    pytest.param("services", GARBAGE, lambda s: s.list_services(), None, id="service-not-json"),
    pytest.param(
        "instances",
        GARBAGE,
        lambda s: s.list_instances(),
        lambda s: s.get_instance(FIELD),
        id="instance-not-json",
    ),
    pytest.param(
        "instances",
        json.dumps({"state": "ACTIVE"}),
        lambda s: s.list_instances([uuid_of("i-ok"), FIELD]),
        lambda s: s.get_instance(FIELD),
        id="instance-asked-by-uuid",
    ),
    # The conductor's sweep: a value that is not a record never stops it.
    pytest.param("instances", GARBAGE, _sweep, None, id="instance-in-the-sweep"),
    pytest.param(
        "instances",
        json.dumps({"deadline": 1.0}),
        _sweep,
        None,
        id="due-instance-missing-fields",
    ),
]


def _hosts(snap: CompactSnapshot) -> list[tuple[Any, ...]]:
    """A compact snapshot's root providers, row by row (the columns must stay aligned)."""
    h = snap.hosts
    return [
        (h.uuids[i], h.names[i], int(h.generation[i]), h.provider(i).inventories)
        for i in range(len(h))
    ]


def _services(snap: CompactSnapshot) -> list[tuple[Any, ...]]:
    return [snap.services.service(i) for i in range(len(snap.services))]


def test_a_provider_with_one_bad_field_adds_no_half_row_to_the_compact_snapshot(
    store: RedisStore, raw: redis.Redis
) -> None:
    before = _hosts(store.compact_snapshot())
    good = json.loads(raw.hget(store.keys.providers, store.get_provider_by_name("h1").uuid))
    bad = {**good, "uuid": FIELD, "name": "h9", "consumers": "many"}
    raw.hset(store.keys.providers, FIELD, json.dumps(bad))
    with structlog.testing.capture_logs() as logs:
        after = _hosts(store.compact_snapshot())
    assert after == before
    assert [e["key"] for e in logs if e["event"] == "corrupt_record"] == [
        f"{store.keys.providers}[{FIELD}]"
    ]


@pytest.mark.parametrize("hash_name, value, listed, get", BAD_VALUES)
def test_a_list_skips_what_it_cannot_read_and_logs_its_key(
    store: RedisStore,
    raw: redis.Redis,
    hash_name: str,
    value: str,
    listed: Callable[[RedisStore], list[Any]],
    get: Callable[[RedisStore], Any] | None,
) -> None:
    before = listed(store)
    key = getattr(store.keys, hash_name)
    raw.hset(key, FIELD, value)
    with structlog.testing.capture_logs() as logs:
        after = listed(store)
    assert after == before, "the readable records, and only they"
    [logged] = [e for e in logs if e["event"] == "corrupt_record"]
    assert logged["key"] == f"{key}[{FIELD}]" and logged["log_level"] == "error"
    if get is not None:
        with pytest.raises(CorruptRecord) as err:
            get(store)
        assert FIELD in err.value.kwargs["key"]


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"k": "provider", "d": GARBAGE}, id="provider-not-json"),
        pytest.param({"k": "usage", "d": json.dumps({"uuid": FIELD})}, id="usage-missing-fields"),
        pytest.param({"k": "teleport", "d": "{}"}, id="unknown-kind"),
        pytest.param({"x": "y"}, id="no-kind-no-data"),
    ],
)
def test_a_change_it_cannot_read_is_a_corrupt_change_and_the_view_moves_past_it(
    store: RedisStore, raw: redis.Redis, fields: dict[str, str]
) -> None:
    eng = engine(store)  # type: ignore[arg-type]
    eng.view.refresh(0.0)
    cursor = store.compact_snapshot().cursor
    raw.xadd(store.keys.changes, fields)
    [change] = store.changes(cursor)
    assert change.kind == CORRUPT_CHANGE
    assert isinstance(change.data, CorruptRecord)
    assert change.data.kwargs["key"] == f"{store.keys.changes}[{change.cursor}]"
    with structlog.testing.capture_logs() as logs:
        eng.view.refresh(0.0)
        eng.view.refresh(0.0)
    assert [e["event"] for e in logs].count("corrupt_change_skipped") == 1, "logged once"


def test_a_worker_over_a_store_with_foreign_values_keeps_placing(
    store: RedisStore, raw: redis.Redis
) -> None:
    k = store.keys
    raw.hset(k.providers, FIELD, GARBAGE)
    raw.hset(k.aggregates, "foreign", "42")
    raw.hset(k.services, "ghost", GARBAGE)
    raw.hset(k.groups, "not-a-group", GARBAGE)
    raw.xadd(k.changes, {"k": "provider", "d": GARBAGE})
    eng = engine(store)  # type: ignore[arg-type]
    placed = [
        eng.select(f"req-{n}", spec(ram=2048, disk=1), [uuid_of(f"i{n}")])[0][0].host
        for n in range(2)
    ]
    assert sorted(placed) == ["h1", "h2"]
    # And its view keeps following the store past more garbage.
    raw.xadd(k.changes, {"k": "usage", "d": "[]"})
    eng.select("req-2", spec(ram=2048, disk=1), [uuid_of("i2")])
    with pytest.raises(NoValidHost):
        eng.select("req-3", spec(ram=4096, disk=1), [uuid_of("i3")])
    assert len(store.list_consumers()) == 3


def test_a_record_it_cannot_read_refuses_its_own_step_alone(
    store: RedisStore, raw: redis.Redis
) -> None:
    """A batch's guards are read together; a record the store cannot give
    does not refuse the other steps of the batch (each is read again alone)."""
    raw.hset(store.keys.instances, FIELD, GARBAGE)
    guard = StepGuard(store, {"h1"})
    ok = Step("build_and_run_instance", uuid_of("i-ok"), ("BUILDING",), host="h1")
    bad = Step("build_and_run_instance", FIELD, ("BUILDING",), host="h1")
    with pytest.raises(CorruptRecord):
        store.step_reads([(uuid_of("i-ok"), "h1"), (FIELD, "h1")])
    with structlog.testing.capture_logs() as logs:
        assert guard.refused_each([ok, bad, ok]) == [False, True, False]
    [why] = [e["why"] for e in logs if e["event"] == "step_refused"]
    assert why.startswith("the store cannot be read: corrupt record")
