"""A preempting claim (:meth:`PlacementStore.claim_preempting`), on both stores.

Each test runs on the :class:`MemoryStore` and on a :class:`RedisStore` over
the real Redis (a private key prefix, deleted afterwards): the victims'
allocations go and the claim is written in one step, or nothing is written
and the refusal names the victim or the rule.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from scheduler.exceptions import (
    CapacityExceeded,
    ConsumerDeleted,
    GroupPolicyViolation,
    InvalidRequest,
    RecordChanged,
)
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    DELETING,
    DELETING_TASK,
    PREEMPTING,
    RESIZING,
    InstanceRecord,
)
from scheduler.store import (
    Eviction,
    GroupClaim,
    Inventory,
    MemoryStore,
    RedisStore,
    Store,
    Victim,
)
from tests.fixtures.store import REDIS_URL, ask

HOST = "rp-host"
#: The eviction every claim here makes: the preemptor "new" goes to HOST.
EVICT = Eviction("req-preempt", 1765000100.25, HOST, "node-1", "az1", "gold", 10)


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    made: Store
    if request.param == "memory":
        made = MemoryStore()
    else:
        made = RedisStore(REDIS_URL, f"test-preempt-{uuidlib.uuid4().hex}", socket_timeout=2.0)
        if not made.ping():
            pytest.fail(f"the store does not answer (Redis at {REDIS_URL})")
    made.create_provider(HOST, HOST)
    made.set_inventory(HOST, 0, {"VCPU": Inventory(total=8), "MEMORY_MB": Inventory(total=64)})
    made.create_instances([InstanceRecord(uuid="new", state=BUILDING, host=None)])
    yield made
    if isinstance(made, RedisStore):
        made.wipe()
    made.close()


def running(
    store: Store,
    uuid: str,
    vcpu: int,
    priority: int = 0,
    preemptible: bool = True,
    group: GroupClaim | None = None,
    **fields: Any,
) -> Victim:
    """An ACTIVE instance holding ``vcpu`` on the host; the victim as read."""
    record = InstanceRecord(
        uuid=uuid,
        state=ACTIVE,
        task_state=None,
        host=HOST,
        priority=priority,
        preemptible=preemptible,
        updated_at=1765000000.123456789,
        **fields,
    )
    store.create_instances([record])
    store.claim(uuid, ask({HOST: {"VCPU": vcpu, "MEMORY_MB": 8}}), group)
    held = store.get_consumer(uuid)
    assert held is not None
    return Victim(uuid, held.allocations, HOST, store.get_instance(uuid).updated_at)


def snapshot(store: Store, *groups: str) -> tuple[Any, ...]:
    p = store.get_provider(HOST)
    return (
        p.generation,
        dict(p.usages),
        p.consumers,
        sorted(c.uuid for c in store.list_consumers()),
        [store.group_hosts(g) for g in groups],
        store.list_instances(),
        store.list_instances_due(2e9),
    )


def test_the_victims_go_and_the_claim_is_written_in_one_step(store: Store) -> None:
    a = running(store, "a", 3, priority=1)
    b = running(store, "b", 3, priority=2)
    generation = store.get_provider(HOST).generation
    assert store.claim_preempting(
        "new", ask({HOST: {"VCPU": 6}}), [a, b], priority=10, eviction=EVICT
    )
    p = store.get_provider(HOST)
    assert dict(p.usages) == {"VCPU": 6}
    assert p.consumers == 1
    assert p.generation == generation + 1  # one step, one generation
    assert store.get_consumer("a") is None and store.get_consumer("b") is None
    # In the same step the victims are fenced, their delete due at once.
    for victim in ("a", "b"):
        record = store.get_instance(victim)
        assert record.state == DELETING
        assert record.task_state == DELETING_TASK
        assert record.fault == "preempted by instance new"
        assert record.preempted_by == "new"
        assert record.pending_hosts == (HOST,)
        assert record.request_id == "req-preempt"
        assert record.deadline == record.updated_at == EVICT.at
        assert "priority class gold (priority 10)" in (record.fault_details or "")
    assert [r.uuid for r in store.list_instances_due(EVICT.at)] == ["a", "b"]
    # A claim for a victim is refused from then on, as for any delete.
    with pytest.raises(ConsumerDeleted):
        store.claim("a", ask({HOST: {"VCPU": 1}}))
    new = store.get_instance("new")
    assert (new.state, new.task_state, new.victims) == (BUILDING, PREEMPTING, ("a", "b"))
    assert (new.host, new.node, new.availability_zone) == (HOST, "node-1", "az1")
    # A repeat is a no-op, the victims and records unread.
    before = snapshot(store)
    assert (
        store.claim_preempting("new", ask({HOST: {"VCPU": 6}}), [a, b], 10, eviction=EVICT)
        is False
    )
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("state", "why"),
    [
        (ACTIVE, "instance is ACTIVE"),
        (DELETING, "instance is DELETING"),
        (None, "no instance record"),
    ],
)
def test_a_claimant_not_being_booted_evicts_nothing(
    store: Store, state: str | None, why: str
) -> None:
    a = running(store, "a", 6, priority=1)
    claimant = "other"
    if state is not None:
        store.create_instances([InstanceRecord(uuid=claimant, state=state)])
    before = snapshot(store)
    with pytest.raises(RecordChanged) as caught:
        store.claim_preempting(claimant, ask({HOST: {"VCPU": 6}}), [a], 10, eviction=EVICT)
    assert (caught.value.kwargs["uuid"], caught.value.why) == (claimant, why)
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("victim_fields", "tamper", "why"),
    [
        ({"priority": 10}, None, "not preemptible by priority 10"),
        ({"priority": 11}, None, "not preemptible by priority 10"),
        ({"preemptible": False}, None, "not preemptible by priority 10"),
        ({}, "task", "the record moved on"),
        ({}, "host", "the record moved on"),
        ({}, "updated", "the record moved on"),
        ({}, "allocation", "its allocation changed"),
        ({}, "state", "instance is RESIZING"),
        ({}, "gone", "no instance record"),
    ],
)
def test_a_victim_not_as_read_refuses_the_whole_step(
    store: Store, victim_fields: dict[str, Any], tamper: str | None, why: str
) -> None:
    keep = running(store, "keep", 2, priority=1)
    victim = running(store, "v", 6, **{"priority": 1, **victim_fields})
    if tamper == "task":
        store.update_instance("v", task_state="deleting")
    elif tamper == "host":
        store.update_instance("v", host="elsewhere")
    elif tamper == "updated":
        store.update_instance("v", updated_at=victim.updated_at + 1e-6)
    elif tamper == "allocation":
        victim = replace(victim, allocations={HOST: {"VCPU": 5, "MEMORY_MB": 8}})
    elif tamper == "state":
        store.update_instance("v", state=RESIZING)
        victim = replace(victim, updated_at=store.get_instance("v").updated_at)
    elif tamper == "gone":
        victim = replace(victim, uuid="nobody")
    before = snapshot(store)
    with pytest.raises(RecordChanged) as caught:
        store.claim_preempting(
            "new", ask({HOST: {"VCPU": 6}}), [keep, victim], priority=10, eviction=EVICT
        )
    assert caught.value.why == why
    assert caught.value.kwargs["uuid"] == victim.uuid
    assert snapshot(store) == before


def test_a_claim_that_does_not_fit_without_the_victims_writes_nothing(store: Store) -> None:
    a = running(store, "a", 2, priority=1)
    running(store, "b", 6, priority=1)
    before = snapshot(store)
    with pytest.raises(CapacityExceeded):
        store.claim_preempting("new", ask({HOST: {"VCPU": 6}}), [a], priority=10, eviction=EVICT)
    assert snapshot(store) == before


def test_a_victim_in_the_group_frees_its_anti_affinity_slot(store: Store) -> None:
    group = GroupClaim("g", "anti-affinity", "h1")
    member = running(store, "m", 1, group=group)
    other = running(store, "o", 1, group=GroupClaim("g2", "soft-affinity", "h1"))
    with pytest.raises(GroupPolicyViolation):
        store.claim("new", ask({HOST: {"VCPU": 1}}), group)
    assert store.claim_preempting(
        "new", ask({HOST: {"VCPU": 1}}), [member, other], 5, group, eviction=EVICT
    )
    assert store.group_hosts("g") == {"h1": 1}
    assert store.group_hosts("g2") == {}


@pytest.mark.parametrize("victims", [[], ["a", "a"], ["new"]])
def test_victims_must_be_distinct_others(store: Store, victims: list[str]) -> None:
    held = {"a": running(store, "a", 1)}
    chosen = [held.get(v) or Victim(v, {HOST: {"VCPU": 1}}, HOST, 0.0) for v in victims]
    with pytest.raises(InvalidRequest):
        store.claim_preempting("new", ask({HOST: {"VCPU": 1}}), chosen, priority=5, eviction=EVICT)


def test_the_log_of_preemptions_keeps_each_eviction_written_newest_first(store: Store) -> None:
    a = replace(running(store, "a", 3, priority=1), priority_class="spot", priority=1)
    b = replace(running(store, "b", 3, priority=2), priority_class=None, priority=2)
    assert store.recent_preemptions() == []
    # A refused claim (a victim changed since it was read) logs nothing.
    with pytest.raises(RecordChanged):
        stale = replace(b, updated_at=1.0)
        store.claim_preempting("new", ask({HOST: {"VCPU": 6}}), [a, stale], 10, eviction=EVICT)
    assert store.recent_preemptions() == []
    assert store.claim_preempting("new", ask({HOST: {"VCPU": 6}}), [a, b], 10, eviction=EVICT)
    (entry,) = store.recent_preemptions()
    assert entry == EVICT.entry("new", [a, b])
    assert entry.to_primitive() == {
        "at": EVICT.at,
        "instance_uuid": "new",
        "request_id": "req-preempt",
        "host": HOST,
        "priority_class": "gold",
        "priority": 10,
        "victims": [
            {"uuid": "a", "priority_class": "spot", "priority": 1},
            {"uuid": "b", "priority_class": None, "priority": 2},
        ],
    }
    # A repeat of the same claim is a no-op: no second entry.
    store.claim_preempting("new", ask({HOST: {"VCPU": 6}}), [a, b], 10, eviction=EVICT)
    assert len(store.recent_preemptions()) == 1
    # A second preemption comes first; the limit cuts the oldest.
    store.create_instances([InstanceRecord(uuid="next", state=BUILDING, host=None)])
    store.release("new")
    c = running(store, "c", 4, priority=3)
    later = replace(EVICT, at=EVICT.at + 1)
    assert store.claim_preempting("next", ask({HOST: {"VCPU": 8}}), [c], 10, eviction=later)
    assert [e.instance_uuid for e in store.recent_preemptions()] == ["next", "new"]
    assert [e.instance_uuid for e in store.recent_preemptions(1)] == ["next"]
    assert store.recent_preemptions(0) == []
