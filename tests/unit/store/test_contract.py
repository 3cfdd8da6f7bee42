"""The store contract, run against both implementations.

Every test takes ``store`` (or ``make_store``) and runs twice: on the
:class:`MemoryStore` and on a :class:`RedisStore` over the real Redis at
``SCHEDULER_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``), each
test under its own key prefix, deleted afterwards. If Redis does not answer,
the Redis half fails: it is never skipped.
"""

from __future__ import annotations

import random
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from scheduler.exceptions import (
    CapacityExceeded,
    ClaimFailed,
    ConsumerConflict,
    ConsumerDeleted,
    GenerationConflict,
    GroupPolicyViolation,
    InstanceNotFound,
    InvalidRequest,
    InventoryInUse,
    NoSuchInventory,
    NotFound,
    ProviderExists,
    ProviderNotFound,
    RecordChanged,
    StreamTruncated,
    UnitRuleViolation,
)
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    DELETED,
    DELETING,
    ERROR,
    RESIZING,
    InstanceRecord,
)
from scheduler.priority import MAX_PRIORITY, PriorityClass, record_fields
from scheduler.store import (
    Aggregate,
    GroupClaim,
    InstanceReport,
    Inventory,
    MemoryStore,
    Provider,
    RecordCheck,
    RedisStore,
    RunningInstance,
    Service,
    ServiceReport,
    Store,
)
from scheduler.store.base import pending_member, pending_uuid
from scheduler.store.records import REFUSALS_KEPT, Refusal
from scheduler.store.redis_store import redis_client
from tests.fixtures.store import REDIS_URL, ask

MakeStore = Callable[..., Store]


@pytest.fixture(params=["memory", "redis"])
def make_store(request: pytest.FixtureRequest) -> Iterator[MakeStore]:
    made: list[Store] = []

    def make(stream_maxlen: int = 100000) -> Store:
        store: Store
        if request.param == "memory":
            store = MemoryStore(stream_maxlen=stream_maxlen)
        else:
            store = RedisStore(
                REDIS_URL,
                f"test-store-{uuidlib.uuid4().hex}",
                stream_maxlen=stream_maxlen,
                socket_timeout=2.0,
            )
        if not store.ping():
            pytest.fail(f"the store does not answer (Redis at {REDIS_URL})")
        made.append(store)
        return store

    yield make
    for store in made:
        if isinstance(store, RedisStore):
            store.wipe()  # the per-instance keys of deleted records too
        store.close()


@pytest.fixture
def store(make_store: MakeStore) -> Store:
    return make_store()


# --- one small factory ---------------------------------------------------------------

DEFAULT_INVENTORY = {
    "VCPU": Inventory(total=8),
    "MEMORY_MB": Inventory(total=4096),
    "DISK_GB": Inventory(total=100),
}


def new_uuid() -> str:
    return str(uuidlib.uuid4())


def make_host(
    store: Store,
    name: str | None = None,
    inventories: dict[str, Inventory] | None = None,
    parent_uuid: str | None = None,
) -> Provider:
    """A provider with inventory (the default: 8 VCPU, 4096 MB, 100 GB)."""
    provider = store.create_provider(
        new_uuid(), name or f"host-{new_uuid()[:8]}", parent_uuid=parent_uuid
    )
    store.set_inventory(
        provider.uuid,
        provider.generation,
        DEFAULT_INVENTORY if inventories is None else inventories,
    )
    return store.get_provider(provider.uuid)


# --- providers ------------------------------------------------------------------------


def test_create_provider_starts_at_generation_zero(store: Store) -> None:
    uuid = new_uuid()
    created = store.create_provider(uuid, "compute-1")
    expected = Provider(uuid=uuid, name="compute-1", generation=0, root_uuid=uuid)
    assert created == expected
    assert store.get_provider(uuid) == expected
    assert store.get_provider_by_name("compute-1") == expected
    assert store.list_providers() == [expected]


def test_nested_provider_shares_its_parents_root(store: Store) -> None:
    root = store.create_provider(new_uuid(), "root")
    child = store.create_provider(new_uuid(), "child", parent_uuid=root.uuid)
    grandchild = store.create_provider(new_uuid(), "grandchild", parent_uuid=child.uuid)
    assert (child.parent_uuid, child.root_uuid) == (root.uuid, root.uuid)
    assert (grandchild.parent_uuid, grandchild.root_uuid) == (child.uuid, root.uuid)


@pytest.mark.parametrize("clash", ["uuid", "name"])
def test_create_provider_refuses_a_taken_uuid_or_name(store: Store, clash: str) -> None:
    first = store.create_provider(new_uuid(), "taken")
    uuid, name = (first.uuid, "other") if clash == "uuid" else (new_uuid(), "taken")
    with pytest.raises(ProviderExists):
        store.create_provider(uuid, name)
    assert store.list_providers() == [first]


def test_missing_providers_are_typed_errors(store: Store) -> None:
    missing = new_uuid()
    with pytest.raises(ProviderNotFound) as exc:
        store.get_provider(missing)
    assert exc.value.ident == missing
    with pytest.raises(ProviderNotFound):
        store.get_provider_by_name("nobody")
    with pytest.raises(ProviderNotFound):
        store.create_provider(new_uuid(), "orphan", parent_uuid=missing)
    with pytest.raises(ProviderNotFound):
        store.set_traits(missing, 0, ["X"])


def test_provider_writes_replace_and_bump_the_generation(store: Store) -> None:
    p = store.create_provider(new_uuid(), "h")
    inventories = {
        "VCPU": Inventory(
            total=16, reserved=2, min_unit=1, max_unit=8, step_size=1, allocation_ratio=0.1 + 0.2
        ),
        "CUSTOM_GPU": Inventory(total=2),
    }
    assert store.set_inventory(p.uuid, 0, inventories) == 1
    assert store.set_traits(p.uuid, 1, ["HW_CPU_X86_AVX2", "COMPUTE_STATUS_DISABLED"]) == 2
    assert store.set_aggregates(p.uuid, 2, [new_uuid() for _ in range(2)]) == 3
    aggregates = {new_uuid()}
    assert store.set_aggregates(p.uuid, 3, aggregates) == 4
    assert store.set_traits(p.uuid, 4, []) == 5
    got = store.get_provider(p.uuid)
    # the ratio keeps every digit (0.30000000000000004), as the caller gave it
    assert dict(got.inventories) == inventories
    assert got.traits == frozenset()
    assert got.aggregates == aggregates
    assert got.generation == 5


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(
            lambda s, p, g: s.set_inventory(p, g, {"VCPU": Inventory(total=1)}), id="inventory"
        ),
        pytest.param(lambda s, p, g: s.set_traits(p, g, ["CUSTOM_X"]), id="traits"),
        pytest.param(lambda s, p, g: s.set_aggregates(p, g, [new_uuid()]), id="aggregates"),
    ],
)
def test_stale_generation_is_a_conflict_and_writes_nothing(
    store: Store, write: Callable[[Store, str, int], int]
) -> None:
    p = make_host(store)  # generation 1
    before = store.get_provider(p.uuid)
    with pytest.raises(GenerationConflict) as exc:
        write(store, p.uuid, 0)
    assert exc.value.kwargs == {"uuid": p.uuid, "expected": 0, "actual": 1}
    assert store.get_provider(p.uuid) == before
    assert write(store, p.uuid, 1) == 2


def test_a_claim_makes_the_generation_stale(store: Store) -> None:
    p = make_host(store)
    store.claim(new_uuid(), ask({p.uuid: {"VCPU": 1}}))
    with pytest.raises(GenerationConflict):
        store.set_traits(p.uuid, p.generation, ["CUSTOM_X"])
    assert store.get_provider(p.uuid).generation == p.generation + 1


def test_inventory_in_use_cannot_be_removed(store: Store) -> None:
    p = make_host(store)
    store.claim(new_uuid(), ask({p.uuid: {"VCPU": 2}}))
    gen = store.get_provider(p.uuid).generation
    with pytest.raises(InventoryInUse) as exc:
        store.set_inventory(p.uuid, gen, {"MEMORY_MB": Inventory(total=4096)})
    assert exc.value.kwargs == {"uuid": p.uuid, "rc": "VCPU", "used": 2}
    assert store.get_provider(p.uuid).generation == gen
    # changing the amount, or dropping an unused class, is fine
    assert store.set_inventory(p.uuid, gen, {"VCPU": Inventory(total=4)}) == gen + 1


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(Inventory(total=-1), id="negative-total"),
        pytest.param(Inventory(total=4, reserved=-1), id="negative-reserved"),
        pytest.param(Inventory(total=4, min_unit=0), id="min-unit-0"),
        pytest.param(Inventory(total=4, step_size=0), id="step-size-0"),
        pytest.param(Inventory(total=4, allocation_ratio=0.0), id="ratio-0"),
    ],
)
def test_nonsense_inventory_is_refused(store: Store, bad: Inventory) -> None:
    p = store.create_provider(new_uuid(), "h")
    with pytest.raises(InvalidRequest):
        store.set_inventory(p.uuid, 0, {"VCPU": bad})
    assert store.get_provider(p.uuid).generation == 0


def test_aggregates_are_created_or_replaced(store: Store) -> None:
    a, b = sorted([new_uuid(), new_uuid()])
    store.put_aggregate(Aggregate(uuid=a, name="az1", metadata={"availability_zone": "az1"}))
    store.put_aggregate(Aggregate(uuid=b, name="empty"))
    store.put_aggregate(Aggregate(uuid=a, name="az1", metadata={"availability_zone": "az2"}))
    assert store.list_aggregates() == [
        Aggregate(uuid=a, name="az1", metadata={"availability_zone": "az2"}),
        Aggregate(uuid=b, name="empty"),
    ]


# --- claims ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityCase:
    name: str
    inventory: Inventory
    capacity: int


CAPACITY_CASES = [
    CapacityCase("plain", Inventory(total=8), 8),
    CapacityCase("reserved", Inventory(total=8, reserved=3), 5),
    CapacityCase("overcommit", Inventory(total=8, allocation_ratio=4.0), 32),
    CapacityCase("truncated", Inventory(total=10, reserved=3, allocation_ratio=1.5), 10),
    CapacityCase("undercommit", Inventory(total=1024, reserved=512, allocation_ratio=0.9), 460),
    CapacityCase("all-reserved", Inventory(total=4, reserved=4, allocation_ratio=16.0), 0),
]


@pytest.mark.parametrize("case", CAPACITY_CASES, ids=lambda c: c.name)
def test_capacity_is_int_of_total_less_reserved_times_ratio(
    store: Store, case: CapacityCase
) -> None:
    assert case.inventory.capacity == case.capacity
    p = make_host(store, inventories={"VCPU": case.inventory})
    left = case.capacity
    while left:  # one request never exceeds max_unit (the total), so fill in chunks
        chunk = min(left, case.inventory.effective_max_unit)
        store.claim(new_uuid(), ask({p.uuid: {"VCPU": chunk}}))
        left -= chunk
    with pytest.raises(CapacityExceeded) as exc:
        store.claim(new_uuid(), ask({p.uuid: {"VCPU": 1}}))
    assert exc.value.kwargs == {"uuid": p.uuid, "rc": "VCPU", "requested": 1, "free": 0}
    got = store.get_provider(p.uuid)
    assert got.usages.get("VCPU", 0) == case.capacity
    assert got.free("VCPU") == 0


def test_claim_over_several_providers(store: Store) -> None:
    compute, pool = make_host(store), make_host(store)
    consumer = new_uuid()
    allocations = {compute.uuid: {"VCPU": 2, "MEMORY_MB": 512}, pool.uuid: {"DISK_GB": 20}}
    store.claim(consumer, ask(allocations))
    for before, used in ((compute, {"VCPU": 2, "MEMORY_MB": 512}), (pool, {"DISK_GB": 20})):
        after = store.get_provider(before.uuid)
        assert dict(after.usages) == used
        assert after.generation == before.generation + 1
        assert after.consumers == 1
    held = store.get_consumer(consumer)
    assert held is not None
    assert held.allocations == allocations
    assert (held.project_id, held.user_id, held.generation) == ("project", "user", 1)
    assert (held.group_uuid, held.host) == (None, None)
    assert store.list_consumers() == [held]


def test_claim_is_all_or_nothing(store: Store) -> None:
    first, second = sorted([make_host(store), make_host(store)], key=lambda p: p.uuid)
    store.claim(new_uuid(), ask({second.uuid: {"VCPU": 7}}))
    second = store.get_provider(second.uuid)
    cursor = store.compact_snapshot().cursor
    consumer = new_uuid()
    with pytest.raises(CapacityExceeded) as exc:
        store.claim(consumer, ask({first.uuid: {"VCPU": 2}, second.uuid: {"VCPU": 2}}))
    assert exc.value.kwargs["uuid"] == second.uuid
    assert store.get_provider(first.uuid) == first
    assert store.get_provider(second.uuid) == second
    assert store.get_consumer(consumer) is None
    assert store.changes(cursor) == []


@dataclass(frozen=True)
class RefusalCase:
    name: str
    inventory: Inventory
    amounts: dict[str, int]
    error: type[ClaimFailed]
    fields: dict[str, Any] = field(default_factory=dict)


REFUSAL_CASES = [
    RefusalCase(
        "capacity",
        Inventory(total=4, reserved=1),
        {"VCPU": 4},
        CapacityExceeded,
        {"rc": "VCPU", "requested": 4, "free": 3},
    ),
    RefusalCase(
        "no-such-inventory",
        Inventory(total=4),
        {"VCPU": 1, "DISK_GB": 1},
        NoSuchInventory,
        {"rc": "DISK_GB"},
    ),
    RefusalCase(
        "min-unit",
        Inventory(total=8, min_unit=2),
        {"VCPU": 1},
        UnitRuleViolation,
        {"rc": "VCPU", "requested": 1, "rule": "min_unit", "limit": 2},
    ),
    RefusalCase(
        "max-unit",
        Inventory(total=8, max_unit=4),
        {"VCPU": 5},
        UnitRuleViolation,
        {"rc": "VCPU", "requested": 5, "rule": "max_unit", "limit": 4},
    ),
    RefusalCase(
        "max-unit-defaults-to-total",
        Inventory(total=8, allocation_ratio=4.0),
        {"VCPU": 9},
        UnitRuleViolation,
        {"rule": "max_unit", "limit": 8},
    ),
    RefusalCase(
        "step-size",
        Inventory(total=8, step_size=2),
        {"VCPU": 3},
        UnitRuleViolation,
        {"rc": "VCPU", "requested": 3, "rule": "step_size", "limit": 2},
    ),
    RefusalCase(
        "zero-amount",
        Inventory(total=8),
        {"VCPU": 0},
        UnitRuleViolation,
        {"rule": "min_unit", "limit": 1},
    ),
]


@pytest.mark.parametrize("case", REFUSAL_CASES, ids=lambda c: c.name)
def test_each_refusal_has_its_type_and_writes_nothing(store: Store, case: RefusalCase) -> None:
    p = make_host(store, inventories={"VCPU": case.inventory})
    consumer = new_uuid()
    with pytest.raises(case.error) as exc:
        store.claim(consumer, ask({p.uuid: case.amounts}))
    expected = {"uuid": p.uuid, **case.fields}
    assert {k: exc.value.kwargs.get(k) for k in expected} == expected
    assert store.get_provider(p.uuid) == p
    assert store.get_consumer(consumer) is None


def test_claim_on_a_missing_provider(store: Store) -> None:
    p, missing = make_host(store), new_uuid()
    with pytest.raises(ProviderNotFound) as exc:
        store.claim(new_uuid(), ask({p.uuid: {"VCPU": 1}, missing: {"VCPU": 1}}))
    assert exc.value.ident == missing
    assert store.get_provider(p.uuid) == p


@pytest.mark.parametrize("allocations", [{}, {"rp": {}}], ids=["no-provider", "no-amount"])
def test_empty_allocation_request_is_invalid(
    store: Store, allocations: dict[str, dict[str, int]]
) -> None:
    with pytest.raises(InvalidRequest):
        store.claim(new_uuid(), ask(allocations))
    assert store.list_consumers() == []


def test_repeating_a_claim_is_a_no_op(store: Store) -> None:
    p = make_host(store)
    consumer, group = new_uuid(), GroupClaim(new_uuid(), "anti-affinity", "h1")
    request = ask({p.uuid: {"VCPU": 2, "MEMORY_MB": 256}})
    assert store.claim(consumer, request, group) is True
    after_first = store.get_provider(p.uuid)
    cursor = store.compact_snapshot().cursor
    # anti-affinity would refuse a second member
    assert store.claim(consumer, request, group) is False
    assert store.get_provider(p.uuid) == after_first
    assert after_first.consumers == 1
    assert store.group_hosts(group.group_uuid) == {"h1": 1}
    assert store.changes(cursor) == []


def test_a_different_claim_for_a_holding_consumer_conflicts(store: Store) -> None:
    p = make_host(store)
    consumer = new_uuid()
    store.claim(consumer, ask({p.uuid: {"VCPU": 2}}))
    held = store.get_provider(p.uuid)
    with pytest.raises(ConsumerConflict) as exc:
        store.claim(consumer, ask({p.uuid: {"VCPU": 3}}))
    assert exc.value.kwargs == {"consumer": consumer}
    assert store.get_provider(p.uuid) == held


@dataclass(frozen=True)
class GroupCase:
    name: str
    policy: str
    max_server_per_host: int
    steps: list[tuple[str, bool]]  # (host, accepted?) in order
    members: dict[str, int]


GROUP_CASES = [
    GroupCase(
        "anti-affinity-1",
        "anti-affinity",
        1,
        [("h1", True), ("h1", False), ("h2", True), ("h2", False)],
        {"h1": 1, "h2": 1},
    ),
    GroupCase(
        "anti-affinity-2",
        "anti-affinity",
        2,
        [("h1", True), ("h1", True), ("h1", False), ("h2", True)],
        {"h1": 2, "h2": 1},
    ),
    GroupCase(
        "affinity",
        "affinity",
        1,
        [("h2", True), ("h1", False), ("h2", True), ("h1", False)],
        {"h2": 2},
    ),
    GroupCase(
        "soft-anti-affinity-is-not-checked",
        "soft-anti-affinity",
        1,
        [("h1", True), ("h1", True)],
        {"h1": 2},
    ),
    GroupCase(
        "soft-affinity-is-not-checked",
        "soft-affinity",
        1,
        [("h1", True), ("h2", True)],
        {"h1": 1, "h2": 1},
    ),
]


@pytest.mark.parametrize("case", GROUP_CASES, ids=lambda c: c.name)
def test_strict_group_policies_are_checked_in_the_claim(store: Store, case: GroupCase) -> None:
    hosts = {name: make_host(store, name) for name in ("h1", "h2")}
    group = new_uuid()
    for host, accepted in case.steps:
        consumer = new_uuid()
        claim = GroupClaim(group, case.policy, host, case.max_server_per_host)
        if accepted:
            store.claim(consumer, ask({hosts[host].uuid: {"VCPU": 1}}), claim)
            continue
        before = store.get_provider(hosts[host].uuid)
        with pytest.raises(GroupPolicyViolation) as exc:
            store.claim(consumer, ask({hosts[host].uuid: {"VCPU": 1}}), claim)
        assert exc.value.kwargs == {"group": group, "policy": case.policy, "host": host}
        assert store.get_provider(hosts[host].uuid) == before
        assert store.get_consumer(consumer) is None
    assert store.group_hosts(group) == case.members


def test_release_restores_usage_group_members_and_consumers(store: Store) -> None:
    p = make_host(store, "h1")
    group = new_uuid()
    claims = {new_uuid(): {"VCPU": n, "MEMORY_MB": 128 * n} for n in (1, 2)}
    for consumer, amounts in claims.items():
        store.claim(
            consumer,
            ask({p.uuid: amounts}),
            GroupClaim(group, "anti-affinity", "h1", max_server_per_host=2),
        )
    first, second = claims
    assert store.release(first) is True
    after = store.get_provider(p.uuid)
    assert dict(after.usages) == {"VCPU": 2, "MEMORY_MB": 256}
    assert after.consumers == 1
    assert after.generation == p.generation + 3
    assert store.group_hosts(group) == {"h1": 1}
    assert store.get_consumer(first) is None
    assert store.release(first) is False
    assert store.get_provider(p.uuid) == after
    assert store.release(second) is True
    assert store.get_provider(p.uuid).usages == {}
    assert store.get_provider(p.uuid).consumers == 0
    assert store.group_hosts(group) == {}
    assert store.list_consumers() == []


def test_release_of_an_unknown_consumer(store: Store) -> None:
    assert store.release(new_uuid()) is False


@pytest.mark.parametrize(
    "check, written",
    [
        pytest.param(("m-1", RESIZING), True, id="at-that-step"),
        pytest.param(("m-2", RESIZING), False, id="another-migration"),
        pytest.param(("m-1", ACTIVE), False, id="another-state"),
        pytest.param(None, True, id="unchecked"),
    ],
)
@pytest.mark.parametrize("write", ["release", "move"])
def test_an_allocation_write_checked_against_a_record_is_all_or_nothing(
    store: Store, check: tuple[str, str] | None, written: bool, write: str
) -> None:
    """A compute's step writes allocations only while its step is due, checked
    in the write's own atomic step (issue 28: the guard atomic with the write)."""
    p = make_host(store, "h1")
    instance, migration = new_uuid(), new_uuid()
    store.create_instances([InstanceRecord(uuid=instance, state=RESIZING, migration_uuid="m-1")])
    store.claim(migration, ask({p.uuid: {"VCPU": 1}}))
    record_check = (
        None if check is None else RecordCheck(instance, (check[1],), {"migration_uuid": check[0]})
    )

    def act() -> bool:
        if write == "release":
            return store.release(migration, check=record_check)
        return store.move_allocations(migration, instance, replace=True, check=record_check)

    if written:
        assert act() is True
    else:
        with pytest.raises(RecordChanged):
            act()
    held = {c.uuid for c in store.list_consumers()}
    expected = {migration} if not written else (set() if write == "release" else {instance})
    assert held == expected
    assert dict(store.get_provider(p.uuid).usages) == ({} if held == set() else {"VCPU": 1})


def test_an_allocation_write_checked_against_no_record_is_refused(store: Store) -> None:
    p = make_host(store, "h1")
    consumer = new_uuid()
    store.claim(consumer, ask({p.uuid: {"VCPU": 1}}))
    with pytest.raises(RecordChanged, match="no instance record"):
        store.release(consumer, check=RecordCheck(new_uuid(), (ACTIVE,)))
    assert store.get_consumer(consumer) is not None


# --- what the reconciler reads and writes ----------------------------------------------


def test_scan_consumers_yields_every_consumer_once_a_batch_at_a_time(store: Store) -> None:
    assert list(store.scan_consumers()) == []
    p = make_host(store, inventories={"VCPU": Inventory(total=5000)})
    uuids = {new_uuid() for _ in range(1200)}
    for uuid in uuids:
        store.claim(uuid, ask({p.uuid: {"VCPU": 1}}))
    scanned = list(store.scan_consumers(batch=100))
    assert sorted(c.uuid for c in scanned) == sorted(uuids)
    assert sorted(scanned, key=lambda c: c.uuid) == store.list_consumers()


def test_consumers_on_reads_the_consumers_of_some_providers_only(store: Store) -> None:
    a, b, c = (make_host(store, inventories={"VCPU": Inventory(total=500)}) for _ in range(3))
    kid = make_host(store, inventories={"VCPU": Inventory(total=8)}, parent_uuid=a.uuid)
    on_a = {new_uuid() for _ in range(150)}
    for uuid in on_a:
        store.claim(uuid, ask({a.uuid: {"VCPU": 1}}))
    spanning, on_kid, on_b, on_c = new_uuid(), new_uuid(), new_uuid(), new_uuid()
    store.claim(spanning, ask({a.uuid: {"VCPU": 1}, kid.uuid: {"VCPU": 1}}))
    store.claim(on_kid, ask({kid.uuid: {"VCPU": 2}}))
    store.claim(on_b, ask({b.uuid: {"VCPU": 3}}))
    store.claim(on_c, ask({c.uuid: {"VCPU": 1}}))
    store.release(on_c)

    def uuids(*providers: str) -> list[str]:
        found = store.consumers_on(providers, batch=40)
        assert len(found) == len({c.uuid for c in found})  # each once
        return sorted(c.uuid for c in found)

    assert uuids(a.uuid) == sorted({*on_a, spanning})
    assert uuids(kid.uuid, b.uuid) == sorted([spanning, on_kid, on_b])
    assert uuids(c.uuid) == []  # released: not a consumer any more
    assert uuids() == []
    # As read: the allocations the consumer holds.
    (held,) = store.consumers_on([b.uuid])
    assert held == store.get_consumer(on_b)


def test_heal_writes_an_allocation_past_capacity_and_says_so(store: Store) -> None:
    p = make_host(store, "h1", inventories={"VCPU": Inventory(total=2)})
    fits, over, group = new_uuid(), new_uuid(), new_uuid()
    cursor = store.compact_snapshot().cursor
    assert store.heal_allocation(fits, ask({p.uuid: {"VCPU": 2}})) is False
    # No capacity check: a VM that runs is accounted for, and the overcommit told.
    member = GroupClaim(group, "anti-affinity", "h1")
    assert store.heal_allocation(over, ask({p.uuid: {"VCPU": 1}}), member) is True
    after = store.get_provider(p.uuid)
    assert dict(after.usages) == {"VCPU": 3}
    assert after.consumers == 2 and after.generation == p.generation + 2
    assert store.group_hosts(group) == {"h1": 1}
    held = store.get_consumer(over)
    assert held is not None and held.group_uuid == group and held.host == "h1"
    assert dict(held.allocations[p.uuid]) == {"VCPU": 1}
    fed = store.changes(cursor)
    assert [(c.kind, c.data["usages"]) for c in fed] == [
        ("usage", {"VCPU": 2}),
        ("usage", {"VCPU": 3}),
    ]
    # Released like any other.
    assert store.release(over) is True
    assert dict(store.get_provider(p.uuid).usages) == {"VCPU": 2}
    assert store.group_hosts(group) == {}


def test_heal_without_overcommit_refuses_past_capacity_and_writes_nothing(store: Store) -> None:
    p = make_host(store, "h1", inventories={"VCPU": Inventory(total=2, allocation_ratio=1.5)})
    fits, over = new_uuid(), new_uuid()
    # Capacity 3 (2 x 1.5): a heal up to it is written as any heal is.
    assert store.heal_allocation(fits, ask({p.uuid: {"VCPU": 3}}), overcommit=False) is False
    with pytest.raises(CapacityExceeded) as refused:
        store.heal_allocation(over, ask({p.uuid: {"VCPU": 1}}), overcommit=False)
    assert "free capacity 0" in str(refused.value)
    assert dict(store.get_provider(p.uuid).usages) == {"VCPU": 3}
    assert store.get_consumer(over) is None
    # The default still writes it, and says it overcommits.
    assert store.heal_allocation(over, ask({p.uuid: {"VCPU": 1}})) is True


def test_heal_refuses_a_holder_a_fenced_uuid_and_unknown_inventory(store: Store) -> None:
    p = make_host(store, inventories={"VCPU": Inventory(total=2)})
    held, fenced = new_uuid(), new_uuid()
    store.claim(held, ask({p.uuid: {"VCPU": 1}}))
    with pytest.raises(ConsumerConflict):
        store.heal_allocation(held, ask({p.uuid: {"VCPU": 1}}))
    store.create_instances([InstanceRecord(uuid=fenced)])
    store.start_delete(fenced)
    with pytest.raises(ConsumerDeleted):
        store.heal_allocation(fenced, ask({p.uuid: {"VCPU": 1}}))
    with pytest.raises(NoSuchInventory):
        store.heal_allocation(new_uuid(), ask({p.uuid: {"VCPU": 1, "DISK_GB": 1}}))
    with pytest.raises(ProviderNotFound):
        store.heal_allocation(new_uuid(), ask({new_uuid(): {"VCPU": 1}}))
    assert dict(store.get_provider(p.uuid).usages) == {"VCPU": 1}
    assert [c.uuid for c in store.list_consumers()] == [held]


# --- moving allocations between consumers (resize, revert) ---------------------------


@dataclass(frozen=True)
class MoveCase:
    name: str
    source: dict[str, int] | None  # what the source holds on host "a" (None: nothing)
    target: dict[str, int] | None  # what the target holds on host "b"
    replace: bool
    moved: bool
    usage_a: dict[str, int]  # usage afterwards
    usage_b: dict[str, int]
    holders: dict[str, str]  # consumer -> the provider it holds afterwards
    conflict: bool = False


MOVE_CASES = [
    MoveCase(
        "to-an-empty-target",
        {"VCPU": 2, "MEMORY_MB": 512},
        None,
        False,
        True,
        {"VCPU": 2, "MEMORY_MB": 512},
        {},
        {"target": "a"},
    ),
    MoveCase(
        "empty-source-is-a-no-op",
        None,
        {"VCPU": 1},
        False,
        False,
        {},
        {"VCPU": 1},
        {"target": "b"},
    ),
    MoveCase(
        "empty-source-with-replace-keeps-the-target",
        None,
        {"VCPU": 1},
        True,
        False,
        {},
        {"VCPU": 1},
        {"target": "b"},
    ),
    MoveCase(
        "holding-target-conflicts",
        {"VCPU": 2},
        {"VCPU": 1},
        False,
        False,
        {"VCPU": 2},
        {"VCPU": 1},
        {"source": "a", "target": "b"},
        conflict=True,
    ),
    MoveCase(
        "replace-drops-the-targets-and-restores",
        {"VCPU": 2},
        {"VCPU": 4, "DISK_GB": 5},
        True,
        True,
        {"VCPU": 2},
        {},
        {"target": "a"},
    ),
]


@pytest.mark.parametrize("case", MOVE_CASES, ids=lambda c: c.name)
def test_move_allocations(store: Store, case: MoveCase) -> None:
    hosts = {"a": make_host(store, "a"), "b": make_host(store, "b")}
    consumers = {"source": new_uuid(), "target": new_uuid()}
    for who, host, amounts in (("source", "a", case.source), ("target", "b", case.target)):
        if amounts is not None:
            store.claim(consumers[who], ask({hosts[host].uuid: amounts}))
    before = {name: store.get_provider(h.uuid) for name, h in hosts.items()}
    if case.conflict:
        with pytest.raises(ConsumerConflict) as exc:
            store.move_allocations(consumers["source"], consumers["target"], case.replace)
        assert exc.value.kwargs == {"consumer": consumers["target"]}
    else:
        assert (
            store.move_allocations(consumers["source"], consumers["target"], case.replace)
            is case.moved
        )
    after = {name: store.get_provider(h.uuid) for name, h in hosts.items()}
    assert dict(after["a"].usages) == case.usage_a
    assert dict(after["b"].usages) == case.usage_b
    held = {
        who: next(iter(c.allocations))
        for who, uuid in consumers.items()
        if (c := store.get_consumer(uuid)) is not None
    }
    assert held == {who: hosts[h].uuid for who, h in case.holders.items()}
    for name in hosts:
        assert after[name].consumers == sum(1 for h in case.holders.values() if h == name)
        if not case.moved:
            assert after[name] == before[name], "nothing written"


def test_a_move_keeps_project_user_and_group_and_feeds_absolute_usage(store: Store) -> None:
    a, b = make_host(store, "a"), make_host(store, "b")
    instance, migration, group = new_uuid(), new_uuid(), new_uuid()
    store.claim(instance, ask({a.uuid: {"VCPU": 2}}), GroupClaim(group, "anti-affinity", "a"))
    claimed = store.get_provider(a.uuid)
    cursor = store.compact_snapshot().cursor
    assert store.move_allocations(instance, migration) is True
    moved = store.get_consumer(migration)
    assert moved is not None and store.get_consumer(instance) is None
    assert (
        dict(moved.allocations),
        moved.project_id,
        moved.user_id,
        moved.group_uuid,
        moved.host,
    ) == ({a.uuid: {"VCPU": 2}}, "project", "user", group, "a")
    assert store.group_hosts(group) == {"a": 1}
    a_now = store.get_provider(a.uuid)
    assert a_now.generation == claimed.generation + 1
    assert [(c.kind, c.data) for c in store.changes(cursor)] == [
        (
            "usage",
            {
                "uuid": a.uuid,
                "generation": a_now.generation,
                "usages": {"VCPU": 2},
                "consumers": 1,
            },
        )
    ]
    # A revert: the instance claimed on b meanwhile; hand the migration's back.
    store.claim(instance, ask({b.uuid: {"VCPU": 4}}), GroupClaim(group, "anti-affinity", "b"))
    assert store.group_hosts(group) == {"a": 1, "b": 1}
    assert store.move_allocations(migration, instance, replace=True) is True
    assert store.group_hosts(group) == {"a": 1}
    assert store.get_provider(b.uuid).usages == {}
    assert store.get_provider(b.uuid).consumers == 0
    assert store.move_allocations(migration, instance, replace=True) is False
    assert store.release(instance) is True
    assert store.group_hosts(group) == {}
    assert store.list_consumers() == []


def test_a_moved_instance_is_not_held_against_its_own_membership(store: Store) -> None:
    # A resize parked the anti-affinity member's source on its migration,
    # which keeps the membership on h1; h2 holds another member.
    h1, h2 = make_host(store, "h1"), make_host(store, "h2")
    instance, migration, other, group = new_uuid(), new_uuid(), new_uuid(), new_uuid()
    store.claim(instance, ask({h1.uuid: {"VCPU": 1}}), GroupClaim(group, "anti-affinity", "h1"))
    store.claim(other, ask({h2.uuid: {"VCPU": 1}}), GroupClaim(group, "anti-affinity", "h2"))
    assert store.move_allocations(instance, migration) is True
    in_place = ask({h1.uuid: {"VCPU": 2}})

    # Without naming its migration, the instance is refused beside itself.
    with pytest.raises(GroupPolicyViolation):
        store.claim(instance, in_place, GroupClaim(group, "anti-affinity", "h1"))
    # On another host its own membership does not help.
    with pytest.raises(GroupPolicyViolation):
        store.claim(
            instance,
            ask({h2.uuid: {"VCPU": 2}}),
            GroupClaim(group, "anti-affinity", "h2", own_consumer=migration),
        )
    # Nor does another consumer's, nor a migration of another group.
    stranger, elsewhere = new_uuid(), new_uuid()
    store.claim(
        elsewhere, ask({h1.uuid: {"VCPU": 1}}), GroupClaim(new_uuid(), "soft-affinity", "h1")
    )
    for not_own in (stranger, elsewhere):
        with pytest.raises(GroupPolicyViolation):
            store.claim(
                instance, in_place, GroupClaim(group, "anti-affinity", "h1", own_consumer=not_own)
            )
    assert store.get_consumer(instance) is None
    assert store.group_hosts(group) == {"h1": 1, "h2": 1}

    # Naming it, the instance resizes in place; both are counted until confirmed.
    own = GroupClaim(group, "anti-affinity", "h1", own_consumer=migration)
    assert store.claim(instance, in_place, own) is True
    assert store.group_hosts(group) == {"h1": 2, "h2": 1}
    assert store.release(migration) is True  # the confirm
    assert store.group_hosts(group) == {"h1": 1, "h2": 1}


def test_affinity_counts_a_moved_instances_own_membership(store: Store) -> None:
    # The group's one member is resizing: its migration holds it on h1, so
    # affinity keeps the instance on h1, and the migration changes nothing there.
    h1, h2 = make_host(store, "h1"), make_host(store, "h2")
    instance, migration, group = new_uuid(), new_uuid(), new_uuid()
    store.claim(instance, ask({h1.uuid: {"VCPU": 1}}), GroupClaim(group, "affinity", "h1"))
    assert store.move_allocations(instance, migration) is True
    with pytest.raises(GroupPolicyViolation):
        store.claim(
            instance,
            ask({h2.uuid: {"VCPU": 2}}),
            GroupClaim(group, "affinity", "h2", own_consumer=migration),
        )
    own = GroupClaim(group, "affinity", "h1", own_consumer=migration)
    assert store.claim(instance, ask({h1.uuid: {"VCPU": 2}}), own) is True
    assert store.group_hosts(group) == {"h1": 2}


def test_a_move_onto_itself_is_invalid(store: Store) -> None:
    consumer = new_uuid()
    with pytest.raises(InvalidRequest):
        store.move_allocations(consumer, consumer)


# --- change feed ----------------------------------------------------------------------


@dataclass
class View:
    """What a worker's host view keeps: a snapshot with changes applied."""

    providers: dict[str, Provider]
    aggregates: dict[str, Aggregate]
    services: dict[str, Service]

    @classmethod
    def load(cls, store: Store) -> tuple[View, str]:
        snap = store.compact_snapshot()
        hosts = [snap.hosts.provider(i) for i in range(len(snap.hosts))]
        services = [snap.services.service(i) for i in range(len(snap.services))]
        return cls(
            {p.uuid: p for p in [*hosts, *snap.children]},
            {a.uuid: a for a in snap.aggregates},
            {s.host: s for s in services},
        ), snap.cursor

    def apply(self, store: Store, cursor: str, limit: int = 3) -> str:
        while batch := store.changes(cursor, limit):
            for change in batch:
                if change.kind == "provider":
                    self.providers[change.data.uuid] = change.data
                elif change.kind == "usage":
                    d = change.data
                    self.providers[d["uuid"]] = replace(
                        self.providers[d["uuid"]],
                        generation=d["generation"],
                        usages=d["usages"],
                        consumers=d["consumers"],
                    )
                elif change.kind == "aggregate":
                    self.aggregates[change.data.uuid] = change.data
                else:
                    assert change.kind == "service"
                    self.services[change.data.host] = change.data
            cursor = batch[-1].cursor
        return cursor


def test_snapshot_plus_changes_equals_the_store(store: Store) -> None:
    a = make_host(store, "a")
    store.put_aggregate(Aggregate(uuid=new_uuid(), name="before"))
    store.register_services([Service(host="a", rpc_server="sim-1")])
    consumer = new_uuid()
    store.claim(consumer, ask({a.uuid: {"VCPU": 4}}))
    view, cursor = View.load(store)

    b = make_host(store, "b")
    store.claim(new_uuid(), ask({a.uuid: {"VCPU": 1}, b.uuid: {"DISK_GB": 10}}))
    store.release(consumer)
    store.set_traits(b.uuid, store.get_provider(b.uuid).generation, ["CUSTOM_FAST"])
    agg = new_uuid()
    store.put_aggregate(Aggregate(uuid=agg, name="az1", metadata={"availability_zone": "az1"}))
    store.set_aggregates(a.uuid, store.get_provider(a.uuid).generation, [agg])
    store.heartbeat(["a", "b"], 1000.5)
    store.register_services([Service(host="b", rpc_server="sim-1")])
    store.set_service_disabled("a", True, "maintenance")
    store.record_build_result("b", success=False)
    store.report_services(
        [ServiceReport("a", capabilities={"cpu_arch": "x86_64"}, stats={"num_io_ops": 1})]
    )

    cursor = view.apply(store, cursor)
    assert sorted(view.providers.values(), key=lambda p: p.uuid) == store.list_providers()
    assert sorted(view.aggregates.values(), key=lambda a: a.uuid) == store.list_aggregates()
    assert sorted(view.services.values(), key=lambda s: s.host) == store.list_services()
    assert store.changes(cursor) == []
    assert store.compact_snapshot().cursor == cursor


def test_the_compact_snapshot_holds_what_the_store_lists(store: Store) -> None:
    big = {
        "VCPU": Inventory(total=64, allocation_ratio=4.0, max_unit=16),
        "MEMORY_MB": Inventory(total=262144, reserved=512, step_size=256),
    }
    hosts = [make_host(store, f"h{i}", inventories=big if i % 2 else None) for i in range(5)]
    gpu = make_host(
        store, "h1-gpu", inventories={"VGPU": Inventory(total=4)}, parent_uuid=hosts[1].uuid
    )
    store.set_traits(hosts[0].uuid, hosts[0].generation, ["CUSTOM_A", "CUSTOM_B"])
    store.set_aggregates(hosts[2].uuid, hosts[2].generation, ["agg-1"])
    store.put_aggregate(Aggregate(uuid="agg-1", name="az1", metadata={"availability_zone": "a"}))
    store.claim(new_uuid(), ask({hosts[3].uuid: {"VCPU": 4}, gpu.uuid: {"VGPU": 1}}))
    store.claim(new_uuid(), ask({hosts[3].uuid: {"MEMORY_MB": 1024}}))
    store.register_services(
        [Service(host=f"h{i}", rpc_server=f"sim-{i % 2}") for i in (0, 1, 2, 9)]
    )  # h9: no provider yet
    store.heartbeat(["h0", "h9"], 1000.25)
    store.set_service_disabled("h1", True, "maintenance")
    store.record_build_result("h2", success=False)
    store.report_services(
        [
            ServiceReport("h0", capabilities=CAPABILITIES, stats={"n": 1}),
            ServiceReport("h9", capabilities=CAPABILITIES),
        ]
    )

    compact, providers = store.compact_snapshot(), store.list_providers()
    assert store.changes(compact.cursor) == []  # the cursor of the last write
    roots = [p for p in providers if p.parent_uuid is None]
    assert compact.hosts.uuids == [p.uuid for p in roots]  # sorted by uuid
    assert [compact.hosts.provider(i) for i in range(len(compact.hosts))] == roots
    assert list(compact.children) == [p for p in providers if p.parent_uuid is not None]
    assert list(compact.aggregates) == store.list_aggregates()
    assert compact.services.hosts == ["h0", "h1", "h2", "h9"]
    assert [compact.services.service(i) for i in range(len(compact.services))] == (
        store.list_services()
    )


def test_the_compact_snapshot_gives_a_shared_value_once(store: Store) -> None:
    for i in range(4):
        provider = make_host(store, f"h{i}")
        store.set_traits(provider.uuid, provider.generation, ["CUSTOM_A"] if i % 2 else [])
    store.register_services([Service(host=f"h{i}", rpc_server="sim-1") for i in range(4)])
    store.report_services(
        [ServiceReport(f"h{i}", capabilities={"cpu_arch": "x86_64"}) for i in range(4)]
    )
    hosts, services = store.compact_snapshot().hosts, store.compact_snapshot().services
    assert len(hosts.inventories) == 1 and hosts.inventory.tolist() == [0] * 4
    assert sorted(hosts.trait_sets, key=len) == [frozenset(), {"CUSTOM_A"}]
    assert len(services.rpc_servers) == 1
    assert len(set(services.capabilities.tolist())) == 1


def test_an_empty_store_has_an_empty_compact_snapshot(store: Store) -> None:
    compact = store.compact_snapshot()
    assert (len(compact.hosts), len(compact.services), compact.children) == (0, 0, [])
    assert store.changes(compact.cursor) == []


def test_changes_are_ordered_and_paged(store: Store) -> None:
    cursor = store.compact_snapshot().cursor
    names = [f"agg-{i}" for i in range(5)]
    for name in names:
        store.put_aggregate(Aggregate(uuid=new_uuid(), name=name))
    first, rest = store.changes(cursor, limit=2), store.changes(cursor)
    assert [c.data.name for c in first] == names[:2]
    assert [c.data.name for c in rest] == names
    assert all(c.kind == "aggregate" for c in rest)
    assert [c.data.name for c in store.changes(first[-1].cursor)] == names[2:]


def test_claim_and_release_feed_absolute_usage(store: Store) -> None:
    p = make_host(store)
    cursor = store.compact_snapshot().cursor
    consumer = new_uuid()
    store.claim(consumer, ask({p.uuid: {"VCPU": 3}}))
    store.release(consumer)
    changes = store.changes(cursor)
    assert [(c.kind, c.data) for c in changes] == [
        (
            "usage",
            {
                "uuid": p.uuid,
                "generation": p.generation + 1,
                "usages": {"VCPU": 3},
                "consumers": 1,
            },
        ),
        ("usage", {"uuid": p.uuid, "generation": p.generation + 2, "usages": {}, "consumers": 0}),
    ]


def test_fresh_store_cursor_is_valid(make_store: MakeStore) -> None:
    store = make_store(stream_maxlen=5)
    cursor = store.compact_snapshot().cursor
    assert store.changes(cursor) == []
    store.put_aggregate(Aggregate(uuid=new_uuid(), name="x"))
    assert [c.data.name for c in store.changes(cursor)] == ["x"]


def test_a_cursor_that_fell_off_the_stream_is_truncated(make_store: MakeStore) -> None:
    store = make_store(stream_maxlen=5)
    start = store.compact_snapshot().cursor
    # the Redis stream trims approximately (whole nodes of ~100 entries)
    for i in range(300):
        store.put_aggregate(Aggregate(uuid=new_uuid(), name=f"agg-{i}"))
    with pytest.raises(StreamTruncated):
        store.changes(start)
    snap = store.compact_snapshot()
    assert store.changes(snap.cursor) == []
    assert len(snap.aggregates) == 300


def test_a_cursor_within_the_last_maxlen_changes_is_still_read(make_store: MakeStore) -> None:
    store = make_store(stream_maxlen=5)
    for i in range(300):
        store.put_aggregate(Aggregate(uuid=new_uuid(), name=f"agg-{i}"))
    cursor = store.compact_snapshot().cursor  # from here on, the last 5 changes include it
    for i in range(300, 304):
        store.put_aggregate(Aggregate(uuid=new_uuid(), name=f"agg-{i}"))
    assert [c.data.name for c in store.changes(cursor)] == [f"agg-{i}" for i in range(300, 304)]


@pytest.mark.parametrize("cursor", ["99999999999999-0", "not-a-cursor", ""])
def test_a_cursor_this_feed_never_issued_is_truncated(store: Store, cursor: str) -> None:
    store.put_aggregate(Aggregate(uuid=new_uuid(), name="x"))
    with pytest.raises(StreamTruncated):
        store.changes(cursor)


# --- services -------------------------------------------------------------------------


def test_services_register_heartbeat_and_list(store: Store) -> None:
    store.register_services([Service(host=h, rpc_server="sim-1") for h in ("h2", "h1")])
    store.heartbeat(["h1", "h2", "h3"], 1234.25)
    assert store.list_services() == [
        Service(host="h1", rpc_server="sim-1", last_seen=1234.25),
        Service(host="h2", rpc_server="sim-1", last_seen=1234.25),
    ]
    assert store.get_service("h3") is None  # a heartbeat does not register
    now = time.time()
    store.heartbeat(["h1"], now)
    service = store.get_service("h1")
    assert service is not None
    assert service.last_seen == now


def test_heartbeats_are_not_fed(store: Store) -> None:
    store.register_services([Service(host="h1", rpc_server="sim-1")])
    cursor = store.compact_snapshot().cursor
    store.heartbeat(["h1"], 5.0)
    assert store.changes(cursor) == []


def test_heartbeats_alone_are_read_by_host(store: Store) -> None:
    assert store.heartbeats() == {}
    store.register_services([Service(host="h1", rpc_server="sim-1")])
    now = time.time()
    store.heartbeat(["h1", "unregistered"], 1234.25)
    store.heartbeat(["h1"], now)
    assert store.heartbeats() == {"h1": now, "unregistered": 1234.25}  # exactly, as floats
    # Some hosts only: those that have a heartbeat, in any number.
    assert store.heartbeats(["unregistered", "never-seen"]) == {"unregistered": 1234.25}
    assert store.heartbeats([]) == {}
    many = [f"m{i}" for i in range(12000)]  # past one HMGET's worth
    store.heartbeat(many[::1000], 7.5)
    assert store.heartbeats(many) == dict.fromkeys(many[::1000], 7.5)


def test_instance_reports_replace_a_hosts_last_one(store: Store) -> None:
    assert list(store.instance_reports()) == []
    vm = RunningInstance(
        "u1", {"VCPU": 2, "MEMORY_MB": 512}, "proj", "user", "req-1", migration_uuid=None
    )
    store.report_instances([InstanceReport("h1", 10.0, (vm,)), InstanceReport("h2", 10.5, ())])
    store.report_instances([InstanceReport("h1", 20.0, ())])  # h1's VM has gone
    assert list(store.instance_reports()) == [
        InstanceReport("h1", 20.0, ()),
        InstanceReport("h2", 10.5, ()),
    ]
    store.report_instances([InstanceReport("h2", 30.0, (vm,))])
    assert {r.host: r for r in store.instance_reports(batch=1)}["h2"].instances == (vm,)
    assert store.changes(store.compact_snapshot().cursor) == []


def test_instance_reports_are_read_in_batches(store: Store) -> None:
    many = [InstanceReport(f"h{i:04}", 1.0, ()) for i in range(1200)]
    store.report_instances(many)
    assert sorted(store.instance_reports(batch=100), key=lambda r: r.host) == many


def test_service_state_changes_are_fed_once(store: Store) -> None:
    store.register_services([Service(host="h1", rpc_server="sim-1")])
    store.heartbeat(["h1"], 7.5)
    cursor = store.compact_snapshot().cursor
    store.set_service_disabled("h1", True, "maintenance")
    store.set_service_disabled("h1", True, "maintenance")  # no change, not fed
    store.record_build_result("h1", success=False)
    store.record_build_result("h1", success=False)
    store.record_build_result("h1", success=True)
    store.record_build_result("h1", success=True)  # already 0, not fed
    store.register_services([Service(host="h1", rpc_server="sim-1")])  # unchanged
    store.register_services([Service(host="h1", rpc_server="sim-2")])
    store.set_service_disabled("h1", False)
    fed = [
        (c.data.disabled, c.data.disabled_reason, c.data.failed_builds, c.data.rpc_server)
        for c in store.changes(cursor)
    ]
    assert fed == [
        (True, "maintenance", 0, "sim-1"),
        (True, "maintenance", 1, "sim-1"),
        (True, "maintenance", 2, "sim-1"),
        (True, "maintenance", 0, "sim-1"),
        (True, "maintenance", 0, "sim-2"),
        (False, None, 0, "sim-2"),
    ]
    assert all(c.kind == "service" and c.data.last_seen == 7.5 for c in store.changes(cursor))


def test_registering_again_keeps_the_service_state(store: Store) -> None:
    store.register_services([Service(host="h1", rpc_server="sim-1")])
    store.set_service_disabled("h1", True, "broken")
    store.record_build_result("h1", success=False)
    store.register_services([Service(host="h1", rpc_server="sim-2")])
    assert store.get_service("h1") == Service(
        host="h1", rpc_server="sim-2", disabled=True, disabled_reason="broken", failed_builds=1
    )


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda s: s.set_service_disabled("ghost", True), id="disable"),
        pytest.param(lambda s: s.record_build_result("ghost", success=False), id="build-result"),
    ],
)
def test_unknown_service_is_not_found(store: Store, write: Callable[[Store], None]) -> None:
    with pytest.raises(NotFound):
        write(store)
    assert store.list_services() == []


CAPABILITIES = {
    "cpu_arch": "x86_64",
    "hypervisor_version": 6002000,
    "supported_instances": [["x86_64", "kvm", "hvm"]],
    "cpu_info": {"vendor": "Intel", "features": ["avx", "sse"]},
    "ratio": 1.5,
}


def test_reports_are_kept_frozen_and_fed_only_when_they_change(store: Store) -> None:
    store.register_services([Service(host=h, rpc_server="sim-1") for h in ("h1", "h2")])
    store.heartbeat(["h1"], 3.5)
    cursor = store.compact_snapshot().cursor
    store.report_services(
        [
            ServiceReport("h1", capabilities=CAPABILITIES, stats={"n": 1}),
            ServiceReport("h2", stats={}),
        ]
    )
    store.report_services([ServiceReport("h1", capabilities=dict(CAPABILITIES))])  # same
    store.report_services([ServiceReport("h1", stats={"n": 2})])  # capabilities kept
    store.heartbeat(["h1"], 9.0)  # not fed, changes no report
    fed = [(c.data.host, dict(c.data.stats), c.data.last_seen) for c in store.changes(cursor)]
    assert fed == [("h1", {"n": 1}, 3.5), ("h1", {"n": 2}, 3.5)]  # h2's empty stats: no change
    service = store.get_service("h1")
    assert service is not None
    assert service.capabilities == CAPABILITIES | {
        "supported_instances": (("x86_64", "kvm", "hvm"),),
        "cpu_info": {"vendor": "Intel", "features": ("avx", "sse")},
    }
    assert service.stats == {"n": 2}
    with pytest.raises(TypeError):
        service.capabilities["cpu_arch"] = "ppc64"  # type: ignore[index]


def test_reports_survive_other_service_writes(store: Store) -> None:
    store.register_services([Service(host="h1", rpc_server="sim-1")])
    store.report_services([ServiceReport("h1", capabilities={"a": "b"}, stats={"n": 3})])
    store.set_service_disabled("h1", True, "maintenance")
    store.record_build_result("h1", success=False)
    store.register_services([Service(host="h1", rpc_server="sim-2")])
    assert store.list_services() == [
        Service(
            host="h1",
            rpc_server="sim-2",
            disabled=True,
            disabled_reason="maintenance",
            failed_builds=1,
            capabilities={"a": "b"},
            stats={"n": 3},
        )
    ]
    compact = store.compact_snapshot().services
    assert [compact.service(i) for i in range(len(compact))] == store.list_services()


@pytest.mark.parametrize(
    "report",
    [
        pytest.param(ServiceReport("h1", stats={"n": -1}), id="negative-stat"),
        pytest.param(ServiceReport("h1", stats={"n": 1.5}), id="fractional-stat"),
        pytest.param(ServiceReport("h1", stats={"n": True}), id="boolean-stat"),
        pytest.param(
            ServiceReport("h1", capabilities=["x86_64"]), id="capabilities-not-a-mapping"
        ),
    ],
)
def test_nonsense_reports_are_refused(store: Store, report: ServiceReport) -> None:
    store.register_services([Service(host="h1", rpc_server="sim-1")])
    with pytest.raises(InvalidRequest):
        store.report_services([report])
    assert store.get_service("h1") == Service(host="h1", rpc_server="sim-1")


def test_a_report_for_an_unknown_host_writes_nothing(store: Store) -> None:
    store.register_services([Service(host="h1", rpc_server="sim-1")])
    cursor = store.compact_snapshot().cursor
    with pytest.raises(NotFound):
        store.report_services(
            [ServiceReport("h1", stats={"n": 1}), ServiceReport("ghost", stats={"n": 1})]
        )
    assert store.changes(cursor) == []
    assert store.get_service("h1") == Service(host="h1", rpc_server="sim-1")


# --- instance records -----------------------------------------------------------------


def test_scan_instances_yields_every_live_record_once_a_batch_at_a_time(store: Store) -> None:
    records = [InstanceRecord(uuid=new_uuid(), attempts=n % 3) for n in range(1100)]
    store.create_instances(records)
    gone = records[0].uuid
    store.start_delete(gone)
    store.finish_delete(gone, None, retention=60.0, now=time.time())
    scanned = list(store.scan_instances(batch=100))
    assert len(scanned) == len({r.uuid for r in scanned}) == 1099
    assert sorted(scanned, key=lambda r: r.uuid) == store.list_instances()
    assert gone not in {r.uuid for r in scanned}  # DELETED: kept apart, not listed
    assert list(store.scan_instances()) != [] and store.get_instance(gone).state == DELETED


def test_instances_create_is_idempotent_and_list_is_sorted(store: Store) -> None:
    a, b = sorted([new_uuid(), new_uuid()])
    store.create_instances([InstanceRecord(uuid=b), InstanceRecord(uuid=a, attempts=1)])
    store.create_instances([InstanceRecord(uuid=a, state=ERROR)])  # left as it is
    assert store.get_instance(a) == InstanceRecord(uuid=a, attempts=1)
    assert [r.uuid for r in store.list_instances()] == [a, b]
    assert [r.uuid for r in store.list_instances([b, new_uuid(), a])] == [b, a]
    assert store.list_instances([]) == []
    with pytest.raises(InstanceNotFound):
        store.get_instance(new_uuid())


def test_instance_update_keeps_every_value_exactly(store: Store) -> None:
    uuid = new_uuid()
    spec = {
        "flavor": {"name": "m1", "vcpus": 1, "memory_mb": 512, "extra_specs": {}},
        "ignore_hosts": [],
        "scheduler_hints": {},
        "group": None,
    }
    store.create_instances([InstanceRecord(uuid=uuid, request_spec=spec, created_at=1.5)])
    now = time.time()
    updated = store.update_instance(
        uuid,
        state=ACTIVE,
        task_state=None,
        host="h1",
        node="h1",
        attempts=2,
        updated_at=now,
        deadline=now + 0.1,
    )
    expected = InstanceRecord(
        uuid=uuid,
        state=ACTIVE,
        task_state=None,
        host="h1",
        node="h1",
        attempts=2,
        request_spec=spec,
        created_at=1.5,
        updated_at=now,
        deadline=now + 0.1,
    )
    assert updated == expected
    assert store.get_instance(uuid) == expected


@pytest.mark.parametrize(
    "chosen",
    [
        pytest.param(PriorityClass("spot", 10, preemptible=True), id="preemptible"),
        pytest.param(PriorityClass("infra", -1_000_000_000), id="lowest"),
        pytest.param(PriorityClass("top", 1_000_000_000), id="highest"),
        pytest.param(None, id="no-class"),
    ],
)
def test_an_instance_keeps_the_priority_class_it_was_recorded_with(
    store: Store, chosen: PriorityClass | None
) -> None:
    """The class, its priority and preemptibility survive each write (a
    later eviction reads them from the record), whole numbers staying whole."""
    uuid = new_uuid()
    store.create_instances([InstanceRecord(uuid=uuid, **record_fields(chosen))])
    updated = store.update_instance(uuid, expected_states=[BUILDING], state=ACTIVE, host="h1")
    assert updated is not None
    kept = (updated.priority_class, updated.priority, updated.preemptible)
    assert kept == tuple(record_fields(chosen).values())
    assert type(updated.priority) is int
    assert store.get_instance(uuid) == updated
    assert store.list_instances([uuid]) == [updated]


def test_instance_resize_and_redrive_fields_keep_their_values(store: Store) -> None:
    uuid = new_uuid()
    store.create_instances(
        [
            InstanceRecord(
                uuid=uuid,
                request_id="req-1",
                deadline=2.5,
                roles=("admin", "member"),
                is_admin=True,
            )
        ]
    )
    flavor = {
        "name": "m1.large",
        "vcpus": 4,
        "memory_mb": 8192,
        "root_gb": 80,
        "ephemeral_gb": 0,
        "swap_mb": 0,
        "extra_specs": {},
    }
    updated = store.update_instance(
        uuid,
        redrives=2,
        migration_uuid=new_uuid(),
        new_flavor=flavor,
        source_host="h1",
        source_node="h1",
    )
    assert updated is not None
    assert store.get_instance(uuid) == updated
    assert (
        updated.request_id,
        updated.redrives,
        updated.new_flavor,
        updated.source_host,
        updated.deadline,
        updated.roles,
        updated.is_admin,
    ) == ("req-1", 2, flavor, "h1", 2.5, ("admin", "member"), True)
    cleared = store.update_instance(uuid, migration_uuid=None, new_flavor=None, deadline=None)
    assert cleared is not None and cleared.new_flavor is None and cleared.deadline is None
    assert store.list_instances_due(10.0) == []


@pytest.mark.parametrize(
    "expected_states, applies",
    [
        pytest.param([BUILDING], True, id="expected"),
        pytest.param([BUILDING, ERROR], True, id="one-of"),
        pytest.param([ACTIVE, ERROR], False, id="not-expected"),
        pytest.param([], False, id="none-expected"),
    ],
)
def test_instance_update_with_expected_states(
    store: Store, expected_states: list[str], applies: bool
) -> None:
    uuid = new_uuid()
    store.create_instances([InstanceRecord(uuid=uuid)])
    result = store.update_instance(
        uuid, expected_states=expected_states, state=ERROR, fault="No valid host was found."
    )
    if applies:
        assert result == InstanceRecord(uuid=uuid, state=ERROR, fault="No valid host was found.")
        assert store.get_instance(uuid) == result
    else:
        assert result is None
        assert store.get_instance(uuid) == InstanceRecord(uuid=uuid)


@pytest.mark.parametrize(
    "expect, applies",
    [
        pytest.param({"migration_uuid": "m-1"}, True, id="that-migration"),
        pytest.param({"migration_uuid": "m-2"}, False, id="another-migration"),
        pytest.param({"migration_uuid": None}, False, id="none-expected-one-held"),
        pytest.param({"request_id": None}, True, id="none-expected-none-held"),
        pytest.param({"migration_uuid": "m-1", "task_state": "x"}, False, id="one-of-two-off"),
        pytest.param({}, True, id="nothing-expected"),
    ],
)
def test_instance_update_with_expected_fields(
    store: Store, expect: dict[str, str | None], applies: bool
) -> None:
    uuid = new_uuid()
    store.create_instances([InstanceRecord(uuid=uuid, migration_uuid="m-1")])
    result = store.update_instance(uuid, expected_states=[BUILDING], expect=expect, state=ERROR)
    assert (result is not None) is applies
    assert store.get_instance(uuid).state == (ERROR if applies else BUILDING)


def test_instance_update_refuses_unknown_fields_and_instances(store: Store) -> None:
    uuid = new_uuid()
    store.create_instances([InstanceRecord(uuid=uuid)])
    with pytest.raises(TypeError):
        store.update_instance(uuid, colour="blue")
    with pytest.raises(TypeError):
        store.update_instance(uuid, uuid=new_uuid())
    with pytest.raises(InstanceNotFound):
        store.update_instance(new_uuid(), state=ERROR)
    assert store.get_instance(uuid) == InstanceRecord(uuid=uuid)


@pytest.mark.parametrize(
    "limit, expected",
    [
        pytest.param(1000, ["past", "just-now"], id="all-due"),
        pytest.param(1, ["past"], id="earliest-first"),
    ],
)
def test_instances_due_are_those_past_their_deadline(
    store: Store, limit: int, expected: list[str]
) -> None:
    now = time.time()
    deadlines = {"past": now - 10.25, "just-now": now, "future": now + 5, "none": None}
    uuids = {name: new_uuid() for name in deadlines}
    store.create_instances(
        InstanceRecord(uuid=uuids[name], deadline=deadline)
        for name, deadline in deadlines.items()
        if name != "just-now"
    )
    store.create_instances([InstanceRecord(uuid=uuids["just-now"])])
    store.update_instance(uuids["just-now"], deadline=now)  # written by the update script
    due = store.list_instances_due(now, limit)
    assert [r.uuid for r in due] == [uuids[name] for name in expected]
    assert due[0].deadline == deadlines["past"]


def test_a_record_whose_deadline_is_cleared_is_no_longer_due(store: Store) -> None:
    uuid = new_uuid()
    store.create_instances([InstanceRecord(uuid=uuid, deadline=5.0)])
    assert [r.uuid for r in store.list_instances_due(10.0)] == [uuid]
    # A state change that ends the wait clears the deadline in the same write.
    store.update_instance(uuid, expected_states=[BUILDING], state=ACTIVE, deadline=None)
    assert store.list_instances_due(10.0) == []
    assert store.get_instance(uuid).state == ACTIVE
    # An update that leaves the deadline alone leaves the record's due time too.
    store.update_instance(uuid, deadline=6.0)
    store.update_instance(uuid, host="h1")
    assert [r.host for r in store.list_instances_due(10.0)] == ["h1"]


def test_a_record_given_a_new_deadline_moves_in_the_pending_set(store: Store) -> None:
    first, second = new_uuid(), new_uuid()
    store.create_instances(
        [InstanceRecord(uuid=first, deadline=1.0), InstanceRecord(uuid=second, deadline=2.0)]
    )
    assert [r.uuid for r in store.list_instances_due(10.0)] == [first, second]
    store.update_instance(first, redrives=1, deadline=3.0)  # a re-drive pushes it back
    assert [r.uuid for r in store.list_instances_due(10.0)] == [second, first]
    assert [r.uuid for r in store.list_instances_due(2.5)] == [second]
    store.update_instance(first, deadline=20.0)  # not due yet
    assert [r.uuid for r in store.list_instances_due(10.0)] == [second]
    assert [r.deadline for r in store.list_instances_due(20.0)] == [2.0, 20.0]
    # Equal deadlines come in uuid order.
    store.update_instance(second, deadline=20.0)
    assert [r.uuid for r in store.list_instances_due(20.0)] == sorted([first, second])
    # A create for an existing uuid changes nothing, its deadline included.
    store.create_instances([InstanceRecord(uuid=first, deadline=0.5)])
    assert [r.deadline for r in store.list_instances_due(20.0)] == [20.0, 20.0]


def test_deleting_and_deleted_records_follow_their_deadline(store: Store) -> None:
    uuid = new_uuid()
    store.create_instances([InstanceRecord(uuid=uuid, state=ACTIVE, host="h1")])
    assert store.list_instances_due(10.0) == []
    record, started = store.start_delete(uuid, pending_hosts=("h1", "h2"), deadline=5.0)
    assert started
    assert store.list_instances_due(10.0) == [record]
    partly = store.finish_delete(uuid, "h1", retention=60, now=6.0)
    assert partly is not None and partly.pending_hosts == ("h2",)
    assert store.list_instances_due(10.0) == [partly]
    deleted = store.finish_delete(uuid, "h2", retention=60, now=7.0)
    assert deleted is not None and deleted.state == DELETED
    assert store.list_instances_due(10.0) == []
    assert store.update_instance(uuid, deadline=8.0) is None  # a DELETED record stays out
    assert store.list_instances_due(10.0) == []


def test_thousands_of_finished_records_leave_the_pending_set_as_it_was(store: Store) -> None:
    due = [InstanceRecord(uuid=new_uuid(), deadline=float(i)) for i in range(3)]
    store.create_instances(due)
    finished = [new_uuid() for _ in range(3000)]
    store.create_instances(InstanceRecord(uuid=u, deadline=100.0) for u in finished)
    for u in finished:  # each went ACTIVE: nothing outstanding
        store.update_instance(u, state=ACTIVE, task_state=None, deadline=None)
    assert store.list_instances_due(1000.0) == due
    assert store.list_instances_due(1000.0, limit=2) == due[:2]
    assert len(store.list_instances()) == 3003


# --- concurrency ----------------------------------------------------------------------


def run_threads(count: int, target: Callable[[int], None]) -> None:
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            target(i)
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_racing_claims_never_overcommit(store: Store) -> None:
    p = make_host(store, inventories={"VCPU": Inventory(total=6, allocation_ratio=2.0)})
    refused = []

    def worker(i: int) -> None:
        rng = random.Random(i)
        for _ in range(25):
            consumer = new_uuid()
            try:
                store.claim(consumer, ask({p.uuid: {"VCPU": rng.randint(1, 3)}}))
            except CapacityExceeded:
                refused.append(consumer)
            if rng.random() < 0.4:
                store.release(consumer)

    run_threads(8, worker)
    got = store.get_provider(p.uuid)
    live = store.list_consumers()
    assert got.usages.get("VCPU", 0) == sum(c.allocations[p.uuid]["VCPU"] for c in live)
    assert got.usages.get("VCPU", 0) <= 12
    assert got.consumers == len(live)
    assert refused  # the race was real: capacity ran out


def test_racing_anti_affinity_claims_place_one_member(store: Store) -> None:
    p = make_host(store, "h1")
    group = new_uuid()
    placed = []

    def worker(i: int) -> None:
        consumer = new_uuid()
        try:
            store.claim(
                consumer, ask({p.uuid: {"VCPU": 1}}), GroupClaim(group, "anti-affinity", "h1")
            )
            placed.append(consumer)
        except GroupPolicyViolation:
            pass

    run_threads(8, worker)
    assert len(placed) == 1
    assert store.group_hosts(group) == {"h1": 1}
    assert store.get_provider(p.uuid).consumers == 1


def test_wipe_forgets_everything_under_the_prefix(make_store: MakeStore) -> None:
    store, neighbour = make_store(), make_store()
    host = make_host(store)
    kept = make_host(neighbour)
    store.claim(new_uuid(), ask({host.uuid: {"VCPU": 1}}))
    store.create_instances([InstanceRecord(uuid=new_uuid())])
    store.wipe()
    assert store.list_providers() == []
    assert store.list_consumers() == []
    assert store.list_instances() == []
    assert [p.uuid for p in neighbour.list_providers()] == [kept.uuid]


# --- nested providers and the disabled-status trait ----------------------------------


def make_tree(store: Store) -> tuple[Provider, Provider]:
    """A compute root and a GPU child with 2 VGPU."""
    root = make_host(store)
    gpu = make_host(store, inventories={"VGPU": Inventory(total=2)}, parent_uuid=root.uuid)
    return root, gpu


def test_a_claim_spans_a_tree_and_its_release_restores_it(store: Store) -> None:
    root, gpu = make_tree(store)
    consumer = new_uuid()
    allocations = {root.uuid: {"VCPU": 2, "MEMORY_MB": 1024}, gpu.uuid: {"VGPU": 1}}
    store.claim(consumer, ask(allocations))
    assert dict(store.get_provider(root.uuid).usages) == {"VCPU": 2, "MEMORY_MB": 1024}
    assert dict(store.get_provider(gpu.uuid).usages) == {"VGPU": 1}
    assert store.get_consumer(consumer).allocations == allocations  # type: ignore[union-attr]
    assert store.release(consumer)
    assert dict(store.get_provider(root.uuid).usages) == {}
    assert dict(store.get_provider(gpu.uuid).usages) == {}


@pytest.mark.parametrize(
    ("gpu_ask", "error"),
    [
        pytest.param({"VGPU": 3}, UnitRuleViolation, id="child-max-unit"),
        pytest.param({"VGPU": 1, "VCPU": 1}, NoSuchInventory, id="child-lacks-the-class"),
    ],
)
def test_a_tree_claim_refused_on_the_child_writes_nothing_on_the_root(
    store: Store, gpu_ask: dict[str, int], error: type[ClaimFailed]
) -> None:
    root, gpu = make_tree(store)
    with pytest.raises(error):
        store.claim(new_uuid(), ask({root.uuid: {"VCPU": 1}, gpu.uuid: gpu_ask}))
    assert store.get_provider(root.uuid) == root
    assert store.get_provider(gpu.uuid) == gpu
    assert store.list_consumers() == []


def test_a_tree_claim_never_overcommits_the_child(store: Store) -> None:
    root, gpu = make_tree(store)
    store.claim(new_uuid(), ask({root.uuid: {"VCPU": 1}, gpu.uuid: {"VGPU": 2}}))
    with pytest.raises(CapacityExceeded) as exc:
        store.claim(new_uuid(), ask({root.uuid: {"VCPU": 1}, gpu.uuid: {"VGPU": 1}}))
    assert exc.value.kwargs["uuid"] == gpu.uuid
    assert dict(store.get_provider(root.uuid).usages) == {"VCPU": 1}


@pytest.mark.parametrize("traits", [[], ["CUSTOM_X"]], ids=["no-traits", "with-traits"])
def test_disabling_a_service_sets_the_status_trait_in_the_same_write(
    store: Store, traits: list[str]
) -> None:
    p = make_host(store, name="h1")
    if traits:
        store.set_traits(p.uuid, p.generation, traits)
    p = store.get_provider(p.uuid)
    store.register_services([Service(host="h1", rpc_server="sim")])
    cursor = store.compact_snapshot().cursor

    store.set_service_disabled("h1", True, "maintenance")
    disabled = store.get_provider(p.uuid)
    assert disabled.traits == {*traits, "COMPUTE_STATUS_DISABLED"}
    assert disabled.generation == p.generation + 1
    fed = store.changes(cursor)
    assert [c.kind for c in fed] == ["service", "provider"]
    assert fed[1].data == disabled
    # A trait write on the generation read before the disable is stale: the
    # reporter re-reads, and sees the status trait.
    with pytest.raises(GenerationConflict):
        store.set_traits(p.uuid, p.generation, traits)

    store.set_service_disabled("h1", True, "maintenance")  # nothing changes
    assert store.get_provider(p.uuid) == disabled
    store.set_service_disabled("h1", False)
    enabled = store.get_provider(p.uuid)
    assert enabled.traits == frozenset(traits)
    assert enabled.generation == disabled.generation + 1


def test_the_status_trait_catches_up_with_a_provider_made_later(store: Store) -> None:
    store.register_services([Service(host="h1", rpc_server="sim")])
    store.set_service_disabled("h1", True)  # no provider yet: the service alone
    p = make_host(store, name="h1")
    assert "COMPUTE_STATUS_DISABLED" not in p.traits
    store.set_service_disabled("h1", True)  # the service is unchanged, the trait is set
    assert "COMPUTE_STATUS_DISABLED" in store.get_provider(p.uuid).traits


# --- deleting instances -----------------------------------------------------------------


def test_a_delete_fences_the_instance_against_every_claim(store: Store) -> None:
    p = make_host(store)
    uuid, other = new_uuid(), new_uuid()
    store.create_instances([InstanceRecord(uuid=uuid), InstanceRecord(uuid=other)])
    record, started = store.start_delete(uuid, task_state="deleting", deadline=5.0)
    assert started and record.state == DELETING and record.deadline == 5.0
    assert store.get_instance(uuid) == record
    with pytest.raises(ConsumerDeleted):
        store.claim(uuid, ask({p.uuid: {"VCPU": 1}}))
    assert store.get_consumer(uuid) is None
    assert store.get_provider(p.uuid).usages == {}
    # Another instance, and a migration consumer, claim as before.
    assert store.claim(other, ask({p.uuid: {"VCPU": 1}})) is True
    # Twice is a no-op: nothing written.
    again, started = store.start_delete(uuid, task_state="other", deadline=9.0)
    assert not started and again == record
    with pytest.raises(InstanceNotFound):
        store.start_delete(new_uuid())


def test_a_delete_finishes_when_every_pending_host_answered(store: Store) -> None:
    source, dest = make_host(store, "src"), make_host(store, "dst")
    uuid, migration, group = new_uuid(), new_uuid(), new_uuid()
    store.create_instances(
        [InstanceRecord(uuid=uuid, state=RESIZING, migration_uuid=migration, host="dst")]
    )
    # A resize under way: the source's allocation parked on the migration, the
    # destination's claimed for the instance, both members of a group.
    store.claim(migration, ask({source.uuid: {"VCPU": 2}}), GroupClaim(group, "affinity", "src"))
    store.claim(uuid, ask({dest.uuid: {"VCPU": 4}}))
    store.start_delete(uuid)
    store.update_instance(uuid, pending_hosts=("src", "dst"))
    waiting = store.finish_delete(uuid, "src", retention=60, now=7.0)
    assert waiting is not None and waiting.state == DELETING
    assert waiting.pending_hosts == ("dst",)
    assert store.get_consumer(uuid) is not None  # nothing released yet
    deleted = store.finish_delete(uuid, "dst", retention=60, now=8.0)
    assert deleted is not None
    assert (deleted.state, deleted.pending_hosts, deleted.updated_at) == (DELETED, (), 8.0)
    assert deleted.task_state is None and deleted.deadline is None
    assert store.get_consumer(uuid) is None and store.get_consumer(migration) is None
    assert store.get_provider(source.uuid).usages == {}
    assert store.get_provider(dest.uuid).usages == {}
    assert store.group_hosts(group) == {}
    assert store.list_consumers() == []
    # Kept for show and audits, never changed, not among the live records.
    assert store.get_instance(uuid) == deleted
    assert store.list_instances([uuid]) == [deleted]
    assert store.list_instances() == []
    assert store.update_instance(uuid, state=ACTIVE) is None
    assert store.update_instance(uuid, expected_states=[DELETED], fault="x") is None
    assert store.finish_delete(uuid, "dst", retention=60, now=9.0) == deleted
    assert store.start_delete(uuid) == (deleted, False)
    with pytest.raises(ConsumerDeleted):  # still fenced
        store.claim(uuid, ask({dest.uuid: {"VCPU": 1}}))


def test_finishing_a_delete_by_force_or_of_an_instance_not_deleting(store: Store) -> None:
    p = make_host(store)
    uuid, live = new_uuid(), new_uuid()
    store.create_instances([InstanceRecord(uuid=uuid), InstanceRecord(uuid=live, state=ACTIVE)])
    store.claim(uuid, ask({p.uuid: {"VCPU": 1}}))
    assert store.finish_delete(live, "h", retention=60, now=1.0) is None
    assert store.get_instance(live).state == ACTIVE
    with pytest.raises(InstanceNotFound):
        store.finish_delete(new_uuid(), "h", retention=60, now=1.0)
    store.start_delete(uuid, pending_hosts=("h1", "h2"))
    done = store.finish_delete(uuid, None, retention=60, now=2.0, force=True)
    assert done is not None and done.state == DELETED
    assert store.get_consumer(uuid) is None and store.get_provider(p.uuid).usages == {}


def test_a_deleted_record_is_removed_by_the_store_after_its_retention(
    make_store: MakeStore,
) -> None:
    store = make_store()
    uuid = new_uuid()
    store.create_instances([InstanceRecord(uuid=uuid)])
    store.start_delete(uuid)
    store.finish_delete(uuid, None, retention=0.2, now=1.0)
    assert store.get_instance(uuid).state == DELETED
    if isinstance(store, RedisStore):  # Redis expires the key itself
        with redis_client(REDIS_URL) as client:  # any store URL, a cluster's too
            assert 0 < client.pttl(store.keys.deleted_record(uuid)) <= 200
    deadline = time.monotonic() + 10
    while store.list_instances([uuid]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.list_instances([uuid]) == []
    with pytest.raises(InstanceNotFound):
        store.get_instance(uuid)
    # The fence went with it.
    p = make_host(store)
    assert store.claim(uuid, ask({p.uuid: {"VCPU": 1}})) is True


def test_mark_down_forgets_heartbeats_and_feeds_each_record(store: Store) -> None:
    store.register_services([Service(host=h, rpc_server="sim-1") for h in ("h1", "h2")])
    store.heartbeat(["h1", "h2"], 1234.25)
    cursor = store.compact_snapshot().cursor
    store.mark_down(["h1", "unregistered", "h1"])  # unknown skipped, a repeat once
    assert store.heartbeats() == {"h2": 1234.25}
    [change] = store.changes(cursor)
    assert (change.kind, change.data) == ("service", Service(host="h1", rpc_server="sim-1"))
    assert store.get_service("h1") == Service(host="h1", rpc_server="sim-1")  # never seen since
    store.heartbeat(["h1"], 1300.5)  # back up with its next heartbeat
    assert store.heartbeats() == {"h1": 1300.5, "h2": 1234.25}
    store.mark_down([])
    assert len(store.changes(cursor)) == 1


def test_the_last_refusals_are_kept_newest_first_and_bounded(store: Store) -> None:
    def refusal(n: int) -> Refusal:
        return Refusal(
            at=1000.0 + n,
            request_id=f"req-{n}",
            action="run_instance",
            instance_uuids=(f"i-{n}",),
            reasons={"insufficient MEMORY_MB": n, "host down": 1},
        )

    assert store.recent_refusals() == []
    for n in range(REFUSALS_KEPT + 5):
        store.record_refusal(refusal(n))
    last = store.recent_refusals(3)
    assert [r.request_id for r in last] == [f"req-{REFUSALS_KEPT + 4 - i}" for i in range(3)]
    assert last[0] == refusal(REFUSALS_KEPT + 4)
    kept = store.recent_refusals(REFUSALS_KEPT * 2)
    assert len(kept) == REFUSALS_KEPT and kept[-1].request_id == "req-5"
    assert store.recent_refusals(0) == []
    store.wipe()
    assert store.recent_refusals() == []


# --- the pending index (requests waiting for capacity) --------------------------------


def test_entries_come_by_priority_then_age_then_uuid(store: Store) -> None:
    store.add_pending("c-young-low", -5, 30.0)
    store.add_pending("b-old-high", 100, 10.0)
    store.add_pending("a-young-high", 100, 20.0)
    store.add_pending("d-old-zero", 0, 1.0)
    store.add_pending("e-same-as-d", 0, 1.0)
    assert store.list_pending() == [
        "b-old-high",
        "a-young-high",
        "d-old-zero",
        "e-same-as-d",
        "c-young-low",
    ]
    assert store.list_pending(2) == ["b-old-high", "a-young-high"]
    assert store.list_pending(0) == []
    # Read page by page: each page the next entries in the same order.
    everything = store.list_pending()
    pages = [store.list_pending(2, offset) for offset in range(0, len(everything) + 2, 2)]
    assert [u for page in pages for u in page] == everything
    assert pages[-1] == []
    assert store.count_pending() == len(everything)


def test_adding_again_replaces_the_entry_and_removing_is_idempotent(
    store: Store,
) -> None:
    store.add_pending("x", 1, 5.0)
    store.add_pending("y", 1, 6.0)
    store.add_pending("x", 1, 7.0)  # re-indexed: now after y
    assert store.list_pending() == ["y", "x"]
    assert store.remove_pending("y") is True
    assert store.remove_pending("y") is False
    assert store.list_pending() == ["x"]


@pytest.mark.parametrize(
    "higher, lower",
    [
        pytest.param((MAX_PRIORITY, 9e9), (MAX_PRIORITY - 1, 0.0), id="extremes-priority"),
        pytest.param((-MAX_PRIORITY, 0.0), (-MAX_PRIORITY, 1.5), id="lowest-by-age"),
        pytest.param((1, 1e9), (0, 0.0), id="priority-beats-age"),
        pytest.param((0, 0.000001), (0, 0.000002), id="microseconds"),
    ],
)
def test_member_text_sorts_in_retry_order(
    higher: tuple[int, float], lower: tuple[int, float]
) -> None:
    first, second = pending_member("u1", *higher), pending_member("u2", *lower)
    assert first < second
    assert pending_uuid(first) == "u1"
