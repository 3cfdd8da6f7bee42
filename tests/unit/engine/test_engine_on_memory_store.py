"""The engine on the real in-memory store: claims, races between workers, the feed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import structlog

from scheduler.exceptions import NoValidHost
from scheduler.objects import MEMORY_MB, VCPU, AllocationRequest
from tests.unit.factories import engine, group, host, populate, spec, uuid_of

memory = pytest.importorskip("scheduler.store.memory")


def memory_store(*hosts: object) -> object:
    store = memory.MemoryStore()
    populate(store, hosts)  # type: ignore[arg-type]
    return store


def assert_usage_is_the_sum_of_allocations(store: object) -> None:
    summed: dict[str, Counter[str]] = {}
    for consumer in store.list_consumers():  # type: ignore[attr-defined]
        for rp, amounts in consumer.allocations.items():
            summed.setdefault(rp, Counter()).update(amounts)
    for provider in store.list_providers():  # type: ignore[attr-defined]
        assert dict(provider.usages) == dict(summed.get(provider.uuid, {}))
        for rc, inv in provider.inventories.items():
            assert provider.usages.get(rc, 0) <= inv.capacity


def test_fills_hosts_exactly_then_finds_no_host() -> None:
    store = memory_store(*(host(f"h{i}", vcpus=8, ram=4096, ratios={VCPU: 2.0}) for i in range(5)))
    eng = engine(store, host_subset_size=2)
    for n in range(20):  # 4 instances of 1024 MB fit per host
        eng.select(f"req{n}", spec(vcpus=2, ram=1024, disk=1), [uuid_of(f"i{n}")])
    with pytest.raises(NoValidHost) as err:
        eng.select("one-more", spec(vcpus=2, ram=1024, disk=1), [uuid_of("i-more")])
    assert err.value.reasons == {f"insufficient {MEMORY_MB}": 5}
    assert_usage_is_the_sum_of_allocations(store)


class RacedAfterRefresh:
    """The store as a worker sees it that another worker races: ``then`` runs
    once, right after the worker's next feed read, so what it writes is not
    in the view the worker decides on (until its next refresh)."""

    def __init__(self, store: object) -> None:
        self._store = store
        self.then: Callable[[], object] | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def changes(self, cursor: str, limit: int = 1000) -> list:
        read = self._store.changes(cursor, limit)  # type: ignore[attr-defined]
        then, self.then = self.then, None
        if then is not None:
            then()
        return read  # type: ignore[no-any-return]


def test_a_worker_with_a_stale_view_falls_through_and_never_overcommits() -> None:
    store = memory_store(host("big", ram=8192), host("h1", ram=4096), host("h2", ram=4096))
    raced = RacedAfterRefresh(store)
    # Weighed by absolute free RAM (the nova profile), "big" looks best to a
    # worker that does not know it is full.
    fresh, stale = engine(store, weigher_profile="nova"), engine(raced, weigher_profile="nova")
    stale.schedule("req-first", spec(ram=1024, disk=1), [uuid_of("first")])  # loads its view
    # The rest of the biggest host is taken behind the stale worker's back,
    # once it has read the feed for its next request.
    raced.then = lambda: store.claim(  # type: ignore[attr-defined]
        uuid_of("filler"), AllocationRequest({uuid_of("big"): {MEMORY_MB: 7168}}, "p", "u")
    )
    conflicts = []
    for n in range(8):  # the 8 slots left on h1 and h2, the workers taking turns
        worker = fresh if n % 2 else stale
        result = worker.schedule(f"req{n}", spec(ram=1024, disk=1), [uuid_of(f"i{n}")])
        conflicts += result.traces[0].conflicts
    # The stale worker still saw room on "big": its claim there was refused,
    # it re-read the host and fell through.
    assert conflicts[0] == ("big", "CapacityExceeded")
    assert len(store.list_consumers()) == 10
    with pytest.raises(NoValidHost):
        fresh.schedule("req-over", spec(ram=1024, disk=1), [uuid_of("over")])
    assert_usage_is_the_sum_of_allocations(store)


def test_anti_affinity_holds_across_workers() -> None:
    store = memory_store(*(host(f"h{i}") for i in range(3)))
    a, b = engine(store, weighers=()), engine(store, weighers=())
    a.select(
        "req-a",
        spec(num_instances=2, group=group("anti-affinity")),
        [uuid_of("a0"), uuid_of("a1")],
    )
    b.select("req-b", spec(group=group("anti-affinity")), [uuid_of("b0")])
    with pytest.raises(NoValidHost):
        a.select("req-c", spec(group=group("anti-affinity")), [uuid_of("c0")])
    assert sorted(store.group_hosts(group("anti-affinity").uuid).values()) == [1, 1, 1]


def test_released_request_leaves_nothing_and_reselect_reuses() -> None:
    store = memory_store(host("h0", ram=2048), host("h1", ram=2048))
    eng = engine(store)
    with pytest.raises(NoValidHost):
        eng.select("req", spec(ram=1024, num_instances=5), [uuid_of(f"i{n}") for n in range(5)])
    assert store.list_consumers() == []
    assert_usage_is_the_sum_of_allocations(store)
    first = eng.select("req2", spec(ram=1024), [uuid_of("i0")])
    again = eng.select("req2", spec(ram=1024), [uuid_of("i0")])
    assert first[0][0].host == again[0][0].host
    assert len(store.list_consumers()) == 1


@pytest.mark.parametrize(
    "up, placed_on, released",
    [
        pytest.param(True, "h0", False, id="host-alive-claim-reused"),
        pytest.param(False, "h1", True, id="host-down-placed-again"),
    ],
)
def test_a_redriven_request_reuses_its_claim_unless_the_host_is_down(
    up: bool, placed_on: str, released: bool
) -> None:
    store = memory_store(host("h0", up=up), host("h1", ram=2048))
    store.claim(uuid_of("i1"), AllocationRequest({uuid_of("h0"): {MEMORY_MB: 1024}}, "p", "u"))
    with structlog.testing.capture_logs() as logs:
        [[primary, *_]] = engine(store).select("req-again", spec(ram=1024), [uuid_of("i1")])
    assert primary.host == placed_on
    [held] = store.list_consumers()
    assert held.uuid == uuid_of("i1") and list(held.allocations) == [uuid_of(placed_on)]
    assert any(e["event"] == "allocation_on_down_host_released" for e in logs) is released
    assert_usage_is_the_sum_of_allocations(store)


def test_a_redriven_request_whose_claim_is_on_a_down_host_and_no_host_left_holds_nothing() -> None:
    store = memory_store(host("h0", up=False), host("h1", ram=512))
    store.claim(uuid_of("i1"), AllocationRequest({uuid_of("h0"): {MEMORY_MB: 1024}}, "p", "u"))
    with structlog.testing.capture_logs() as logs, pytest.raises(NoValidHost):
        engine(store).select("req-again", spec(ram=1024), [uuid_of("i1")])
    assert store.list_consumers() == []
    assert any(e["event"] == "allocation_on_down_host_released" for e in logs)
    assert_usage_is_the_sum_of_allocations(store)
