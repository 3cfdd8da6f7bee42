"""What a step's guard reads, and a build's result written, give the same
answer on both stores.

:meth:`~scheduler.store.InstanceStore.step_reads` is written twice: in the
memory store and in the Redis store's ``step_reads`` script. This property
draws instances (no record, a live record in some state, a record whose
delete started or finished), what their consumers hold (nothing, or on one
or two hosts) and the hosts each read asks about (one it holds on, another,
an unknown host, none), writes the same state into a :class:`MemoryStore`
and a :class:`RedisStore` over the real Redis (a private key prefix, deleted
afterwards), and requires the same records and the same answers, in the
order asked. Each read is also required to agree with the single reads it
stands for (:meth:`get_instance` and the consumer's allocations).

:meth:`~scheduler.store.InstanceStore.mark_built` (the ``mark_built``
script) is drawn over the same states: each instance's result reported from
a host it holds on, another or an unknown one, and both stores must give the
same outcome, the same record back and the same record and deadline index
after.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.exceptions import InstanceNotFound
from scheduler.objects import ACTIVE, BUILDING, ERROR, InstanceRecord
from scheduler.store import Inventory, MemoryStore, RedisStore, Store
from scheduler.store.base import BUILT
from tests.fixtures.store import REDIS_URL, ask

EXAMPLES = 300
HOSTS = ("h1", "h2")
#: What an instance's record is: none, live in a state, or deleted.
NONE, DELETING, DELETED = "none", "deleting", "deleted"
RECORDS = (NONE, BUILDING, ACTIVE, ERROR, DELETING, DELETED)

QUICK = settings(
    deadline=None,
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass(frozen=True)
class Instance:
    record: str  # one of RECORDS
    holds_on: tuple[str, ...]  # the hosts its consumer holds an allocation on
    asked: tuple[str | None, ...]  # the hosts reads ask about (None: no host)


instances = st.builds(
    Instance,
    record=st.sampled_from(RECORDS),
    holds_on=st.lists(st.sampled_from(HOSTS), max_size=2, unique=True).map(tuple),
    asked=st.lists(st.sampled_from((*HOSTS, "unknown", None)), min_size=1, max_size=3).map(tuple),
)


@pytest.fixture(scope="module")
def stores() -> Iterator[tuple[MemoryStore, RedisStore]]:
    memory = MemoryStore(stream_maxlen=1000)
    on_redis = RedisStore(
        REDIS_URL, f"test-step-reads-{uuidlib.uuid4().hex}", stream_maxlen=1000, socket_timeout=2.0
    )
    if not on_redis.ping():
        pytest.fail(f"the store does not answer (Redis at {REDIS_URL})")
    yield memory, on_redis
    on_redis.wipe()
    on_redis.close()


def set_up(store: Store, hosts: dict[str, str], uuid: str, instance: Instance) -> None:
    if instance.holds_on:
        store.claim(uuid, ask({hosts[h]: {"VCPU": 1} for h in instance.holds_on}))
    if instance.record == NONE:
        return
    state = BUILDING if instance.record in (DELETING, DELETED) else instance.record
    store.create_instances(
        [
            InstanceRecord(
                uuid=uuid, state=state, request_id="req-1", attempts=1, deadline=1e9 + 0.25
            )
        ]
    )
    if instance.record in (DELETING, DELETED):
        store.start_delete(uuid)
    if instance.record == DELETED:
        store.finish_delete(uuid, None, retention=60, now=1.0, force=True)


def outcome(store: Store, names: dict[str, str], drawn: list[Instance]) -> list[object]:
    """The scenario on ``store``, under fresh names: its reads, and the single
    reads each must agree with."""
    hosts = {h: f"{names[h]}" for h in HOSTS}
    for name in hosts.values():
        store.create_provider(name, name)
        store.set_inventory(name, 0, {"VCPU": Inventory(total=100)})
    uuids = [
        str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{names['run']}-{i}")) for i in range(len(drawn))
    ]
    for uuid, instance in zip(uuids, drawn, strict=True):
        set_up(store, hosts, uuid, instance)
    asked = [
        (uuid, None if host is None else hosts.get(host, f"{names['run']}-unknown"))
        for uuid, instance in zip(uuids, drawn, strict=True)
        for host in instance.asked
    ]
    reads = store.step_reads(asked)
    for (uuid, host), (record, holds) in zip(asked, reads, strict=True):
        try:
            single = store.get_instance(uuid)
        except InstanceNotFound:
            single = None
        consumer = store.get_consumer(uuid)
        assert record == single
        assert holds == (
            host is not None and consumer is not None and host in consumer.allocations
        )
    # Names differ between the stores' runs only through the uuids drawn
    # here, so the answers are compared by position and content.
    return [(None if r is None else (r.state, r.request_id, r.host), holds) for r, holds in reads]


@QUICK
@given(drawn=st.lists(instances, min_size=1, max_size=4))
def test_the_step_reads_agree_on_both_stores(
    stores: tuple[MemoryStore, RedisStore], drawn: list[Instance]
) -> None:
    run = uuidlib.uuid4().hex
    names = {
        "run": run,
        **{h: str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{run}-{h}")) for h in HOSTS},
    }
    python, lua = (outcome(store, names, drawn) for store in stores)
    assert lua == python


def test_no_reads_is_no_round_trip(stores: tuple[MemoryStore, RedisStore]) -> None:
    assert [store.step_reads([]) for store in stores] == [[], []]


def built_outcome(store: Store, names: dict[str, str], drawn: list[Instance]) -> list[object]:
    """Each instance's build result reported from its first asked host."""
    hosts = {h: f"{names[h]}" for h in HOSTS}
    for name in hosts.values():
        store.create_provider(name, name)
        store.set_inventory(name, 0, {"VCPU": Inventory(total=100)})
    uuids = [
        str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{names['run']}-{i}")) for i in range(len(drawn))
    ]
    out: list[object] = []
    for uuid, instance in zip(uuids, drawn, strict=True):
        set_up(store, hosts, uuid, instance)
        asked = instance.asked[0] or "unknown"
        host = hosts.get(asked, f"{names['run']}-unknown")
        outcome, record = store.mark_built(
            uuid,
            host,
            state=ACTIVE,
            task_state=None,
            host=host,
            node=host,
            availability_zone=None,
            deadline=None,
            updated_at=1.5e9 + 0.125,
        )
        try:
            after = store.get_instance(uuid)
        except InstanceNotFound:
            after = None
        assert record == (after if outcome == BUILT else record)
        due = [r.uuid for r in store.list_instances_due(2e9)]
        out.append(
            (
                outcome,
                None if record is None else (record.state, record.attempts, record.deadline),
                None
                if after is None
                else (after.state, after.attempts, after.node, after.updated_at, after.deadline),
                uuid in due,
            )
        )
    return out


@QUICK
@given(drawn=st.lists(instances, min_size=1, max_size=4))
def test_a_build_result_is_written_the_same_on_both_stores(
    stores: tuple[MemoryStore, RedisStore], drawn: list[Instance]
) -> None:
    run = uuidlib.uuid4().hex
    names = {
        "run": run,
        **{h: str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{run}-{h}")) for h in HOSTS},
    }
    python, lua = (built_outcome(store, names, drawn) for store in stores)
    assert lua == python
