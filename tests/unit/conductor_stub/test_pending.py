"""Waiting for capacity: PENDING instances, their retries, time-out, delete and
the reconciler's view of the pending index (in-memory store, recorded RPC)."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from dataclasses import replace

import pytest
from prometheus_client import REGISTRY

from conductor_stub import pending
from conductor_stub.findings import PENDING_UNINDEXED, STALE_PENDING
from conductor_stub.manager import ConductorEndpoint
from conductor_stub.pending import PendingRetrier, PendingSettings, could_fit
from conductor_stub.reconcile import Reconciler, ReconcileSettings
from conductor_stub.records import ConductorSettings
from conductor_stub.redrive import Sweeper
from conductor_stub.tasks.delete import Deleter
from conductor_stub.tasks.resize import Resizer
from scheduler.exceptions import InvalidRequest, NoValidHost
from scheduler.objects import (
    BUILDING,
    DELETED,
    ERROR,
    PENDING,
    AllocationRequest,
    InstanceRecord,
)
from scheduler.policy import user_reason
from scheduler.rpc import RequestContext
from scheduler.store import MemoryStore, Service
from scheduler.store.base import Change
from tests.unit.conductor_stub.helpers import ask, building, cloud, holder
from tests.unit.factories import NOW, Recorded, host, populate, uuid_of

NO_HOST = NoValidHost.USER_MESSAGE
WHY = "0/2 hosts: 2 Insufficient MEMORY_MB"
SETTINGS = ConductorSettings(build_timeout=10, max_redrives=3)


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def waiting(store: MemoryStore, name: str, priority: int = 0, age: float = 0.0) -> str:
    """A BUILDING instance that may wait 100 s, created ``age`` s before NOW."""
    uuid = building(store, name, max_wait=100.0, priority=priority, deadline=NOW + 10)
    store.update_instance(uuid, created_at=NOW - age)
    return uuid


def endpoint(store: MemoryStore, clock: Callable[[], float]) -> ConductorEndpoint:
    return ConductorEndpoint(store, Recorded(), Recorded(), SETTINGS, clock=clock)  # type: ignore[arg-type]


def no_host(store: MemoryStore, clock: Callable[[], float], *uuids: str) -> None:
    """The scheduler's answer: no valid host for ``uuids``."""
    ctxt = RequestContext(request_id="req-1")
    endpoint(store, clock).schedule_failed(ctxt, list(uuids), NO_HOST, WHY)


def retrier(
    store: MemoryStore, clock: Callable[[], float], batch: int = 20
) -> tuple[PendingRetrier, Recorded]:
    scheduler = Recorded()
    settings = PendingSettings(retry_interval=60.0, retry_batch=batch, build_timeout=10.0)
    return PendingRetrier(store, scheduler, settings, clock=clock), scheduler  # type: ignore[arg-type]


def sent(scheduler: Recorded) -> list[str]:
    """The instances ``run_instance`` was sent for, in order."""
    out: list[str] = []
    for name, args, _ in scheduler.calls:
        if name == "run_instance":
            uuids = args[2]
            assert isinstance(uuids, list)
            out.extend(uuids)
    return out


# --- going PENDING ------------------------------------------------------------------


def test_no_host_for_a_waiting_instance_makes_it_pending_holding_nothing() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1", priority=5)
    no_host(store, clock, uuid)
    record = store.get_instance(uuid)
    assert (record.state, record.task_state, record.host) == (PENDING, None, None)
    assert record.fault is None and record.fault_details == WHY
    assert record.waiting_since == NOW and record.deadline == NOW + 100
    assert store.get_consumer(uuid) is None
    assert store.list_pending() == [uuid]


@pytest.mark.parametrize(
    ("max_wait", "reason", "state"),
    [
        pytest.param(100.0, NO_HOST, PENDING, id="waits"),
        pytest.param(None, NO_HOST, ERROR, id="does-not-wait"),
        pytest.param(
            100.0, user_reason(InvalidRequest(reason="bad hint")), ERROR, id="refused-not-no-host"
        ),
    ],
)
def test_only_no_valid_host_for_an_instance_that_waits_parks_it(
    max_wait: float | None, reason: str, state: str
) -> None:
    store = cloud("h1")
    uuid = building(store, "i1", max_wait=max_wait)
    endpoint(store, Clock()).schedule_failed(RequestContext(), [uuid], reason, WHY)
    assert store.get_instance(uuid).state == state
    assert store.list_pending() == ([uuid] if state == PENDING else [])


def test_a_duplicate_no_host_answer_for_a_pending_instance_changes_nothing() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    before = store.get_instance(uuid)
    clock.now += 5
    no_host(store, clock, uuid)  # a re-driven copy's answer: refused by the step guard
    assert store.get_instance(uuid) == before


def test_found_no_host_again_it_keeps_its_wait_and_its_place() -> None:
    store, clock = cloud("h1"), Clock()
    first, second = waiting(store, "i1", age=10), waiting(store, "i2", age=5)
    no_host(store, clock, first, second)
    clock.now += 30
    retry, scheduler = retrier(store, clock)
    assert retry.retry_pending(periodic=True) == 2
    assert store.get_instance(first).state == BUILDING
    no_host(store, clock, first)
    record = store.get_instance(first)
    assert record.state == PENDING and record.waiting_since == NOW
    assert record.deadline == NOW + 100  # its wait did not start again
    no_host(store, clock, second)
    assert store.list_pending() == [first, second]  # oldest first, as before


# --- the retries, in order --------------------------------------------------------------


def test_a_pass_retries_by_priority_then_age_a_batch_at_a_time() -> None:
    store, clock = cloud("h1"), Clock()
    low_old = waiting(store, "low-old", priority=1, age=50)
    high_young = waiting(store, "high-young", priority=9, age=1)
    high_old = waiting(store, "high-old", priority=9, age=20)
    mid = waiting(store, "mid", priority=5, age=100)
    no_host(store, clock, low_old, high_young, high_old, mid)
    retry, scheduler = retrier(store, clock, batch=3)
    assert retry.retry_pending(periodic=True) == 3
    assert sent(scheduler) == [high_old, high_young, mid]
    assert store.list_pending() == [low_old]
    for uuid in (high_old, high_young, mid):
        record = store.get_instance(uuid)
        assert record.state == BUILDING and record.deadline == clock.now + 10
        assert record.attempts == 0 and record.redrives == 0


def test_two_retriers_never_send_one_request_twice() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    record = store.get_instance(uuid)
    scheduler = Recorded()
    assert pending.retry(store, scheduler, record, 10.0, clock)  # type: ignore[arg-type]
    assert not pending.retry(store, scheduler, record, 10.0, clock)  # type: ignore[arg-type]
    assert sent(scheduler) == [uuid]


def _release(store: MemoryStore) -> None:
    store.release("tenant")


def _claim_more(store: MemoryStore) -> None:
    store.claim(str(uuidlib.uuid4()), ask("h1"))


def _enable(store: MemoryStore) -> None:
    store.set_service_disabled("h1", False)


def _disable(store: MemoryStore) -> None:
    store.set_service_disabled("h1", True)


def _add_host(store: MemoryStore) -> None:
    populate(store, [host("h9", ram=4096)])


def _stats_only(store: MemoryStore) -> None:
    store.record_build_result("h1", False)


def _raise_inventory(store: MemoryStore, total: int = 8192) -> None:
    provider = store.get_provider(uuid_of("h1"))
    inventories = dict(provider.inventories)
    inventories["MEMORY_MB"] = replace(inventories["MEMORY_MB"], total=total)
    store.set_inventory(provider.uuid, provider.generation, inventories)


def _lower_inventory(store: MemoryStore) -> None:
    _raise_inventory(store, total=2048)


def _add_trait(store: MemoryStore) -> None:
    provider = store.get_provider(uuid_of("h1"))
    store.set_traits(provider.uuid, provider.generation, {*provider.traits, "CUSTOM_SSD"})


def watched(store: MemoryStore, clock: Clock) -> PendingRetrier:
    """A retrier that has seen h1's usage, provider and service in the feed
    (what it sees first counts as an event: it has nothing to compare with)."""
    store.register_services([Service(host="h1", rpc_server="h1")])
    store.claim("tenant", ask("h1"))
    retry, _ = retrier(store, clock)
    retry.watch()  # the feed's end: what came before is not an event
    _claim_more(store)
    _stats_only(store)
    _raise_inventory(store, total=4096)  # as it was
    assert retry.watch() is True
    return retry


@pytest.mark.parametrize(
    ("act", "wakes"),
    [
        pytest.param(_release, True, id="a-release"),
        pytest.param(_claim_more, False, id="a-claim"),
        pytest.param(_add_host, True, id="a-host-added"),
        pytest.param(_disable, False, id="a-host-disabled"),
        pytest.param(_stats_only, False, id="a-failed-build-counted"),
        pytest.param(_raise_inventory, True, id="inventory-raised"),
        pytest.param(_lower_inventory, False, id="inventory-lowered"),
        pytest.param(_add_trait, True, id="trait-added"),
    ],
)
def test_only_a_change_that_could_make_room_wakes_the_retrier(
    act: Callable[[MemoryStore], None], wakes: bool
) -> None:
    store, clock = cloud("h1"), Clock()
    retry = watched(store, clock)
    assert retry.watch() is False  # nothing new
    act(store)
    assert retry.watch() is wakes


def test_a_host_enabled_again_wakes_the_retrier() -> None:
    store, clock = cloud("h1"), Clock()
    retry = watched(store, clock)
    _disable(store)
    assert retry.watch() is False
    _enable(store)
    assert retry.watch() is True


def test_an_aggregate_change_could_make_room_a_corrupt_entry_could_not() -> None:
    seen = pending.FeedState()
    assert could_fit(Change("2-0", "aggregate", None), seen)
    assert not could_fit(Change("3-0", "corrupt", None), seen)


def test_an_event_retries_what_was_not_sent_since_it() -> None:
    store, clock = cloud("h1"), Clock()
    store.claim("tenant", ask("h1"))
    first, second = waiting(store, "i1", age=2), waiting(store, "i2", age=1)
    no_host(store, clock, first, second)
    retry, scheduler = retrier(store, clock)
    retry.watch()
    clock.now += 1
    _release(store)
    assert retry.watch()
    assert retry.retry_pending() == 2
    # Both come back PENDING, found no host: no new event, nothing is sent.
    no_host(store, clock, first, second)
    clock.now += 1
    assert retry.watch() is False and retry.retry_pending() == 0
    # The next event retries them again.
    store.claim("tenant2", ask("h1"))
    store.release("tenant2")
    clock.now += 1
    assert retry.watch() and retry.retry_pending() == 2
    assert sent(scheduler) == [first, second, first, second]


def test_an_event_while_a_retry_is_in_flight_is_not_lost() -> None:
    store, clock = cloud("h1"), Clock()
    store.claim("tenant", ask("h1"))
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    retry, scheduler = retrier(store, clock)
    assert retry.tick() == 1  # the first pass: in flight from here
    clock.now += 1
    _release(store)  # room made while the retry was being scheduled ...
    assert retry.tick() == 0 and retry.owed  # (BUILDING: nothing to send yet)
    clock.now += 1
    no_host(store, clock, uuid)  # ... which had already found none
    assert retry.tick() == 1  # no new event: the one it missed is not lost
    assert not retry.owed
    clock.now += 1
    assert retry.tick() == 0
    assert sent(scheduler) == [uuid, uuid]


def test_without_an_event_a_request_back_from_a_retry_waits_for_the_next() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    retry, scheduler = retrier(store, clock)
    assert retry.tick() == 1  # the first pass
    no_host(store, clock, uuid)
    clock.now += 1
    assert retry.tick() == 0 and not retry.owed
    clock.now += 60  # the slow pass
    assert retry.tick() == 1
    assert sent(scheduler) == [uuid, uuid]


# --- the time-out -------------------------------------------------------------------


def sweep(store: MemoryStore, clock: Callable[[], float]) -> Sweeper:
    scheduler, compute = Recorded(), Recorded()
    resizer = Resizer(store, scheduler, compute, SETTINGS, clock=clock)  # type: ignore[arg-type]
    sweeper = Sweeper(store, scheduler, resizer, SETTINGS, clock=clock)  # type: ignore[arg-type]
    sweeper.sweep()
    return sweeper


def test_past_its_wait_a_pending_instance_is_no_valid_host_saying_it_waited() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    clock.now += 99
    assert sweep(store, clock).counts["pending_timed_out"] == 0
    assert store.get_instance(uuid).state == PENDING
    clock.now += 1
    assert sweep(store, clock).counts["pending_timed_out"] == 1
    record = store.get_instance(uuid)
    assert (record.state, record.fault) == (ERROR, NO_HOST)
    assert record.fault_details is not None
    assert record.fault_details.startswith("waited 100 s for capacity (max_wait 100 s)")
    assert WHY in record.fault_details
    assert store.list_pending() == []


def test_no_host_once_its_wait_is_over_is_an_error_at_once() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    retry, _ = retrier(store, clock)
    retry.retry_pending(periodic=True)
    clock.now += 150  # the retry took longer than the wait had left
    no_host(store, clock, uuid)
    record = store.get_instance(uuid)
    assert (record.state, record.fault) == (ERROR, NO_HOST)
    assert store.list_pending() == []


# --- delete ----------------------------------------------------------------------


def test_a_pending_instance_is_deleted_at_once_and_its_entry_dropped() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    compute = Recorded()
    deleted = Deleter(store, compute, SETTINGS, clock).delete(uuid)  # type: ignore[arg-type]
    assert deleted.state == DELETED and compute.calls == []
    retry, scheduler = retrier(store, clock)
    assert retry.retry_pending(periodic=True) == 0
    assert sent(scheduler) == [] and store.list_pending() == []
    assert retry.counts["stale"] == 1


# --- the reconciler, and a conductor killed between two writes ---------------------


def reconcile(store: MemoryStore, clock: Clock) -> dict[str, str | None]:
    reconciler = Reconciler(store, None, ReconcileSettings(orphan_grace=0), clock=clock)
    return {f"{f.kind}:{f.uuid}": f.outcome for f in reconciler.run_once()}


def test_a_pending_record_is_no_finding_of_the_reconciler() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    assert reconcile(store, clock) == {}


def test_killed_after_parking_before_indexing_the_reconciler_indexes_it() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    store.remove_pending(uuid)  # as if the conductor died between the two writes
    retry, scheduler = retrier(store, clock)
    assert retry.retry_pending(periodic=True) == 0  # no entry: no retry ...
    assert reconcile(store, clock) == {f"{PENDING_UNINDEXED}:{uuid}": "indexed"}
    assert store.list_pending() == [uuid]
    assert retry.retry_pending(periodic=True) == 1  # ... until it is indexed again
    assert sent(scheduler) == [uuid]


def test_killed_after_a_retry_began_the_sweep_redrives_it_once() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    # The retry's compare-and-set, then the conductor died: entry kept, nothing sent.
    assert store.update_instance(uuid, expected_states=[PENDING], state=BUILDING, deadline=NOW)
    retry, scheduler = retrier(store, clock)
    assert retry.retry_pending(periodic=True) == 0  # a BUILDING record's entry is left
    assert store.list_pending() == [uuid]
    assert reconcile(store, clock) == {}
    sweeper = sweep(store, clock)
    assert sweeper.counts["run_instance"] == 1
    assert [n for n, _, _ in sweeper.scheduler.calls] == ["run_instance"]  # type: ignore[attr-defined]
    # Placed this time: the entry left is stale, dropped by the next pass.
    store.claim(uuid, ask("h1"))
    endpoint(store, clock).build_succeeded(RequestContext(), uuid, "h1", "h1")
    assert reconcile(store, clock) == {f"{STALE_PENDING}:{uuid}": "unindexed"}
    assert store.list_pending() == [] and holder(store, uuid) == "h1"


def test_an_allocation_a_pending_instance_holds_is_released() -> None:
    store, clock = cloud("h1"), Clock()
    uuid = waiting(store, "i1")
    no_host(store, clock, uuid)
    store.claim(uuid, AllocationRequest({uuid_of("h1"): {"MEMORY_MB": 64}}, "p", "u"))
    assert reconcile(store, clock) == {f"orphan_allocation:{uuid}": "released"}
    assert store.get_consumer(uuid) is None


def test_records_and_index_agree_when_each_is_in_order() -> None:
    records = [
        InstanceRecord(uuid="p1", state=PENDING),
        InstanceRecord(uuid="b1", state=BUILDING),
        InstanceRecord(uuid="e1", state=ERROR),
    ]
    assert pending.audit_index(records, ["p1", "b1"]) == []
    assert pending.audit_index(records, ["b1", "e1", "gone"]) == [
        (PENDING_UNINDEXED, "p1", "PENDING, not in the pending index"),
        (STALE_PENDING, "e1", "in the pending index, no longer PENDING"),
        (STALE_PENDING, "gone", "in the pending index, no longer PENDING"),
    ]


# --- the metrics --------------------------------------------------------------------


def _waits(outcome: str) -> tuple[float, float]:
    labels = {"outcome": outcome}
    return (
        REGISTRY.get_sample_value("conductor_pending_wait_seconds_count", labels) or 0.0,
        REGISTRY.get_sample_value("conductor_pending_wait_seconds_sum", labels) or 0.0,
    )


def test_the_pending_count_and_each_wait_are_measured() -> None:
    store, clock = cloud("h1"), Clock()
    placed, timed_out = waiting(store, "placed"), waiting(store, "late")
    no_host(store, clock, placed, timed_out)
    retry, _ = retrier(store, clock)
    assert retry.tick() == 2  # the first pass retries both: none left waiting ...
    assert REGISTRY.get_sample_value("conductor_pending_requests") == 0.0
    clock.now += 1
    no_host(store, clock, placed, timed_out)  # ... both found no host again
    assert retry.tick() == 0  # (no event: they wait for one, or the next pass)
    assert REGISTRY.get_sample_value("conductor_pending_requests") == 2.0
    before_placed, before_late = _waits("placed"), _waits("timed_out")
    clock.now += 60  # the slow pass retries both again
    assert retry.tick() == 2
    no_host(store, clock, timed_out)
    # Placed 61 s after it first found no host: its wait, from its first to ACTIVE.
    store.claim(placed, ask("h1"))
    endpoint(store, clock).build_succeeded(RequestContext(), placed, "h1", "h1")
    assert store.get_instance(placed).state == "ACTIVE"
    assert _waits("placed") == before_placed  # not seen yet
    clock.now += 1
    retry.tick()  # the retrier looks at what it sent (the other, woken, is sent again)
    assert _waits("placed") == (before_placed[0] + 1, before_placed[1] + 61)
    retry.tick()
    assert _waits("placed") == (before_placed[0] + 1, before_placed[1] + 61)  # once
    no_host(store, clock, timed_out)
    # The other times out at the end of its wait (100 s).
    clock.now += 38
    assert sweep(store, clock).counts["pending_timed_out"] == 1
    assert _waits("timed_out") == (before_late[0] + 1, before_late[1] + 100)
    assert _waits("placed") == (before_placed[0] + 1, before_placed[1] + 61)
