"""The preemption search (scheduler.engine.preemption) on the in-memory store.

A request of a class that may preempt finds where it would go by evicting
preemptible instances of strictly lower priority, and the store's atomic
step then makes room and claims. The properties drawn below hold for every
search: no victim of equal or higher priority, none that is not
preemptible, the victims minimal on the chosen host (giving any one back
makes the claim fail), and after the claim, capacity, the group's policy
and the usage accounting hold.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.engine import Engine
from scheduler.engine.preemption import POOL_AGE
from scheduler.exceptions import ClaimFailed, NoValidHost
from scheduler.objects import (
    ACTIVE,
    BUILDING,
    DISK_GB,
    MEMORY_MB,
    VCPU,
    AllocationRequest,
    InstanceRecord,
    RequestSpec,
)
from scheduler.priority import CLASS_SPEC, PriorityClasses
from scheduler.store import GroupClaim, MemoryStore, Store
from tests.fixtures.store import ask
from tests.unit.factories import NOW, engine, group, host, populate, spec, uuid_of
from tests.unit.factories import settings as engine_settings

CLASSES = PriorityClasses.parse(
    ["spot:10:preemptible", "batch:50:preemptible", "pinned:20", "od:100", "polite:100:never"]
)


def store_of(*names: str, vcpus: int = 8) -> MemoryStore:
    store = MemoryStore()
    populate(store, [host(n, vcpus=vcpus, ram=8192, disk=100) for n in names])
    return store


def running(
    store: Store,
    name: str,
    on: str,
    vcpus: int,
    cls: str | None = "spot",
    age: float = 0.0,
    member: GroupClaim | None = None,
) -> str:
    """An ACTIVE instance of class ``cls`` on host ``on``, holding ``vcpus``."""
    chosen = CLASSES.classes[cls] if cls else None
    uuid = uuid_of(name)
    store.create_instances(
        [
            InstanceRecord(
                uuid=uuid,
                state=ACTIVE,
                task_state=None,
                host=on,
                priority_class=cls,
                priority=chosen.priority if chosen else 0,
                preemptible=bool(chosen and chosen.preemptible),
                created_at=1000.0 - age,
                updated_at=1000.0,
            )
        ]
    )
    store.claim(
        uuid,
        ask_on(on, vcpus),
        member,
    )
    return uuid


def ask_on(on: str, vcpus: int) -> AllocationRequest:
    return ask({uuid_of(on): {VCPU: vcpus, MEMORY_MB: 1, DISK_GB: 1}})


def od(vcpus: int, cls: str = "od", **fields: object) -> RequestSpec:
    return spec(vcpus=vcpus, ram=1, disk=1, extra_specs={CLASS_SPEC: cls}, **fields)


def test_the_host_needing_the_lowest_priority_victims_is_chosen() -> None:
    store = store_of("a", "b")
    running(store, "batch-a", "a", 8, "batch")
    spot = [running(store, f"spot-b{n}", "b", 2) for n in range(4)]
    eng = engine(store, priority_classes=CLASSES)
    with pytest.raises(NoValidHost):
        eng.select("r", od(4), [uuid_of("new")])
    found = eng.preemption("r", od(4), uuid_of("new"))
    assert found is not None and found.host == "b"
    # Two of the four make room: the reprieve gives the other two back.
    assert len(found.victims) == 2
    assert {v.record.uuid for v in found.victims} <= set(spot)


def test_fewest_victims_then_least_evicted() -> None:
    store = store_of("a", "b", "c")
    for n in range(3):
        running(store, f"a{n}", "a", 2)
    running(store, "a-pinned", "a", 2, "pinned")
    running(store, "b-big", "b", 6)
    running(store, "b-small", "b", 2, "pinned")
    running(store, "c-big", "c", 8)
    eng = engine(store, priority_classes=CLASSES)
    found = eng.preemption("r", od(5), uuid_of("new"))
    assert found is not None
    # b and c need one victim each, a needs three; b's evicts less of it.
    assert (found.host, [v.record.uuid for v in found.victims]) == ("b", [uuid_of("b-big")])


def test_the_longest_running_are_given_back_first() -> None:
    store = store_of("a")
    old = running(store, "old", "a", 4, age=100.0)
    young = running(store, "young", "a", 4, age=1.0)
    found = engine(store, priority_classes=CLASSES).preemption("r", od(4), uuid_of("new"))
    assert found is not None
    assert [v.record.uuid for v in found.victims] == [young]
    assert old != young


@pytest.mark.parametrize(
    ("cls", "victim_cls"),
    [
        ("spot", "spot"),  # equal priority
        ("batch", "batch"),
        ("spot", "batch"),  # lower than the victim
        ("od", "pinned"),  # not preemptible
        ("polite", "spot"),  # a class that never preempts
        (None, "spot"),  # no class
    ],
)
def test_never_an_equal_or_higher_priority_or_a_non_preemptible(
    cls: str | None, victim_cls: str
) -> None:
    store = store_of("a")
    running(store, "v", "a", 8, victim_cls)
    request = od(4, cls) if cls else spec(vcpus=4, ram=1, disk=1)
    assert engine(store, priority_classes=CLASSES).preemption("r", request, uuid_of("n")) is None


def test_the_view_is_left_as_it_was() -> None:
    store = store_of("a", "b")
    for n in range(4):
        running(store, f"s{n}", "a" if n % 2 else "b", 4)
    eng = engine(store, priority_classes=CLASSES)
    eng.select("warm", spec(vcpus=0, ram=1, disk=1), [uuid_of("warm")], claim=False)
    before = (eng.view.used.copy(), eng.view.consumers.copy())
    assert eng.preemption("r", od(6), uuid_of("new")) is not None
    assert np.array_equal(eng.view.used, before[0])
    assert np.array_equal(eng.view.consumers, before[1])


def test_a_victim_in_the_group_frees_its_anti_affinity_host() -> None:
    store = store_of("a", "b")
    anti = group("anti-affinity")
    running(store, "m-a", "a", 1, member=GroupClaim(anti.uuid, anti.policy, "a"))
    running(store, "m-b", "b", 1, "pinned", member=GroupClaim(anti.uuid, anti.policy, "b"))
    eng = engine(store, priority_classes=CLASSES)
    request = od(1, group=anti)
    with pytest.raises(NoValidHost):
        eng.select("r", request, [uuid_of("new")])
    found = eng.preemption("r", request, uuid_of("new"))
    assert found is not None
    assert (found.host, [v.record.uuid for v in found.victims]) == ("a", [uuid_of("m-a")])
    store.create_instances([InstanceRecord(uuid=uuid_of("new"), state=BUILDING)])
    assert store.claim_preempting(
        uuid_of("new"),
        found.selection.allocation_request,
        found.victims_as_read(),
        100,
        GroupClaim.for_spec(request, found.host),
        eviction=found.eviction("r", 1.0, "gold", 100),
    )
    assert store.group_hosts(anti.uuid) == {"a": 1, "b": 1}


# --- properties -------------------------------------------------------------------------

HOSTS = ("h0", "h1", "h2")
KINDS = ("spot", "batch", "pinned", None)
instances = st.lists(
    st.tuples(
        st.sampled_from(HOSTS),
        st.integers(1, 4),
        st.sampled_from(KINDS),
        st.booleans(),  # a member of the request's group
        st.floats(0, 100),  # age
    ),
    max_size=10,
)


def assert_invariants(store: Store, anti: bool) -> None:
    summed: dict[str, Counter[str]] = {}
    for consumer in store.list_consumers():
        for rp, amounts in consumer.allocations.items():
            summed.setdefault(rp, Counter()).update(amounts)
    for provider in store.list_providers():
        assert dict(provider.usages) == dict(summed.get(provider.uuid, {}))
        for rc, inv in provider.inventories.items():
            assert provider.usages.get(rc, 0) <= inv.capacity
    if anti:
        assert all(n <= 1 for n in store.group_hosts(group("anti-affinity").uuid).values())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    running_now=instances,
    vcpus=st.integers(1, 8),
    cls=st.sampled_from(("od", "batch", "pinned", "spot")),
    anti=st.booleans(),
)
def test_every_preemption_keeps_the_rules(
    running_now: list[tuple[str, int, str | None, bool, float]],
    vcpus: int,
    cls: str,
    anti: bool,
) -> None:
    store = store_of(*HOSTS)
    ag = group("anti-affinity")
    placed = []
    for n, (on, size, kind, member, age) in enumerate(running_now):
        claim = GroupClaim(ag.uuid, ag.policy, on) if member else None
        try:
            placed.append(running(store, f"i{n}", on, size, kind, age, claim))
        except ClaimFailed:
            continue
    request = od(vcpus, cls, group=ag) if anti else od(vcpus, cls)
    eng = engine(store, priority_classes=CLASSES)
    priority = CLASSES.classes[cls].priority
    found = eng.preemption("r", request, uuid_of("new"))
    event("preempts" if found is not None else "finds no room")
    if found is None:
        return
    for victim in found.victims:
        record = store.get_instance(victim.record.uuid)
        assert record.preemptible and record.priority < priority
        assert record.host == found.host
    group_claim = GroupClaim.for_spec(request, found.host)
    allocation = found.selection.allocation_request
    victims = found.victims_as_read()
    store.create_instances([InstanceRecord(uuid=uuid_of("new"), state=BUILDING)])
    evict = found.eviction("r", 1.0, cls, priority)
    # Minimal on the chosen host: giving any one victim back, the claim fails.
    for k in range(len(victims)):
        fewer = victims[:k] + victims[k + 1 :]
        with pytest.raises(ClaimFailed):
            if not fewer:
                store.claim(uuid_of("new"), allocation, group_claim)
            else:
                store.claim_preempting(
                    uuid_of("new"), allocation, fewer, priority, group_claim, eviction=evict
                )
    assert store.claim_preempting(
        uuid_of("new"), allocation, victims, priority, group_claim, eviction=evict
    )
    assert_invariants(store, anti)


# --- explain ----------------------------------------------------------------------------


def test_explain_shows_the_victims_of_a_request_that_finds_no_host() -> None:
    from scheduler.cmd.admin_explain import format_explain
    from scheduler.explain import ExplainReport

    store = store_of("a")
    victim = running(store, "v", "a", 8)
    eng = engine(store, priority_classes=CLASSES)
    report = eng.explain("r", od(4), [uuid_of("new")])
    assert not report.placeable
    assert report.preemption is not None
    assert report.preemption.to_primitive() == {
        "host": "a",
        "victims": [{"uuid": victim, "priority_class": "spot", "priority": 10}],
    }
    again = ExplainReport.from_primitive(report.to_primitive())
    assert again.preemption == report.preemption
    assert f"would preempt on a: {victim} (spot, priority 10)" in format_explain(report)
    # Nothing was evicted, and a class that may not preempt shows none.
    assert store.get_consumer(victim) is not None
    assert eng.explain("r", od(4, "polite"), [uuid_of("new")]).preemption is None
    assert "would preempt" not in format_explain(eng.explain("r", od(4, "polite"), ["x"]))


# --- the pool: what may be evicted, read whole every POOL_AGE seconds -------------------


def pool_engine(store: Store, clock: list[float]) -> Engine:
    return Engine(store, engine_settings(priority_classes=CLASSES), clock=lambda: clock[0])


def test_the_pool_is_read_again_after_its_age_and_changed_hosts_when_needed() -> None:
    store = store_of("a", "b", "c")
    running(store, "on-a", "a", 8)
    running(store, "on-b", "b", 8)
    running(store, "filler-c", "c", 8, "pinned")
    clock = [NOW]
    eng = pool_engine(store, clock)
    found = eng.preemption("r", od(8), uuid_of("new"))
    assert found is not None and found.host == "a"
    # Host a's usage changes: what its instances hold may have changed, so
    # the hosts that did not change are searched first; b makes room.
    store.release(uuid_of("on-a"))
    store.claim(uuid_of("on-a"), ask_on("a", 8))
    found = eng.preemption("r", od(8), uuid_of("new"))
    assert found is not None and found.host == "b"
    # b's instance is gone, a pinned one took its room: no unchanged host
    # makes room, so the changed hosts are read again, and a's is found.
    store.release(uuid_of("on-b"))
    running(store, "pinned-b", "b", 8, "pinned")
    found = eng.preemption("r", od(8), uuid_of("new"))
    assert found is not None
    assert (found.host, [v.record.uuid for v in found.victims]) == ("a", [uuid_of("on-a")])
    # A record made preemptible without its host's usage changing is seen
    # once the pool is read whole again, after its age.
    store.update_instance(uuid_of("filler-c"), priority_class="spot", priority=1, preemptible=True)
    store.release(uuid_of("on-a"))
    running(store, "pinned-a", "a", 8, "pinned")
    assert eng.preemption("r", od(8), uuid_of("new")) is None
    clock[0] += POOL_AGE
    found = eng.preemption("r", od(8), uuid_of("new"))
    assert found is not None
    assert (found.host, [v.record.uuid for v in found.victims]) == ("c", [uuid_of("filler-c")])


def test_a_new_preemptible_instance_on_a_changed_host_is_found_before_the_pool_s_age() -> None:
    store = store_of("a", "b")
    running(store, "pinned-a", "a", 2, "pinned")
    running(store, "pinned-b", "b", 8, "pinned")
    clock = [NOW]
    eng = pool_engine(store, clock)
    assert eng.preemption("r", od(3), uuid_of("new")) is None  # the pool is read: empty
    # Two spot instances come on a, after the read and well within its age.
    young = running(store, "young", "a", 3)
    old = running(store, "old", "a", 3, age=50.0)
    clock[0] += POOL_AGE / 4
    found = eng.preemption("r", od(3), uuid_of("new"))
    assert found is not None
    # Both are there to evict: one is enough, the youngest goes.
    assert (found.host, [v.record.uuid for v in found.victims]) == ("a", [young])
    assert old != young
    # And the claim the search prepared goes through.
    store.create_instances([InstanceRecord(uuid=uuid_of("new"), state=BUILDING)])
    assert store.claim_preempting(
        uuid_of("new"),
        found.selection.allocation_request,
        found.victims_as_read(),
        100,
        eviction=found.eviction("r", 1.0, "od", 100),
    )
    assert_invariants(store, anti=False)


def test_the_pool_brought_up_to_date_keeps_the_other_hosts_entries_right() -> None:
    store = store_of("a", "b", "c")
    running(store, "x", "a", 8)
    y = running(store, "y", "b", 4)
    running(store, "pinned-b", "b", 4, "pinned")
    running(store, "pinned-c", "c", 8, "pinned")
    clock = [NOW]
    eng = pool_engine(store, clock)
    found = eng.preemption("r", od(8), uuid_of("new"))
    assert found is not None and found.host == "a"
    # a changes: x leaves, a pinned instance and a new spot one come.
    store.release(uuid_of("x"))
    running(store, "pinned-a", "a", 2, "pinned")
    z = running(store, "z", "a", 6)
    eng.select("warm", spec(vcpus=0, ram=1, disk=1), [uuid_of("warm")], claim=False)
    before = (eng.view.used.copy(), eng.view.consumers.copy())
    # b's y frees too little: a is read again, and its new z makes room.
    found = eng.preemption("r", od(5), uuid_of("new"))
    assert found is not None
    assert (found.host, [v.record.uuid for v in found.victims]) == ("a", [z])
    assert np.array_equal(eng.view.used, before[0])
    assert np.array_equal(eng.view.consumers, before[1])
    # Nothing changed since: the pool as brought up to date, b's y kept in
    # it, is searched whole; y evicts the least of its host.
    found = eng.preemption("r", od(4), uuid_of("new"))
    assert found is not None
    assert (found.host, [v.record.uuid for v in found.victims]) == ("b", [y])
    assert np.array_equal(eng.view.used, before[0])
