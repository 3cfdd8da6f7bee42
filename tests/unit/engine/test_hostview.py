"""The columnar host view: loading, capacity questions, following the store."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.engine.hostview import CHANGES_BATCH, HostView
from scheduler.objects import DISK_GB, MEMORY_MB, VCPU
from scheduler.store.base import Inventory, Provider, Service
from tests.unit.factories import NOW, FeedStore, az, host, settings, uuid_of, view_of


def everyone(view: HostView) -> np.ndarray:
    return np.arange(view.size)


@pytest.mark.parametrize(("kwargs", "rc", "capacity"), [
    pytest.param({"ram": 1000}, MEMORY_MB, 1000, id="plain"),
    pytest.param({"ram": 1000, "reserved": {MEMORY_MB: 200}}, MEMORY_MB, 800, id="reserved"),
    pytest.param({"vcpus": 8, "ratios": {VCPU: 4.0}}, VCPU, 32, id="ratio"),
    pytest.param({"vcpus": 8, "reserved": {VCPU: 2}, "ratios": {VCPU: 1.5}}, VCPU, 9,
                 id="reserved-then-ratio"),
    pytest.param({"disk": 10, "ratios": {DISK_GB: 0.55}}, DISK_GB, 5, id="ratio-rounds-down"),
])
def test_capacity_applies_reserved_then_ratio(kwargs: dict, rc: str, capacity: int) -> None:
    view = view_of(host("h1", **kwargs))
    j = view.resource_classes.index(rc)
    assert view.capacity[j, 0] == capacity


@pytest.mark.parametrize(("kwargs", "request_", "short"), [
    pytest.param({}, {MEMORY_MB: 32768}, None, id="exactly-full-fits"),
    pytest.param({"used": {MEMORY_MB: 1}}, {MEMORY_MB: 32768}, MEMORY_MB, id="one-too-many"),
    pytest.param({"vcpus": 4, "ratios": {VCPU: 4.0}}, {VCPU: 4}, None, id="ratio-gives-room"),
    pytest.param({"vcpus": 4, "ratios": {VCPU: 16.0}, "used": {VCPU: 60}}, {VCPU: 5}, VCPU,
                 id="ratio-room-used-up"),
    pytest.param({"vcpus": 4, "ratios": {VCPU: 16.0}}, {VCPU: 5}, VCPU,
                 id="never-above-total-whatever-the-ratio"),
    pytest.param({"ram": 1000, "reserved": {MEMORY_MB: 500}}, {MEMORY_MB: 600}, MEMORY_MB,
                 id="reserved-is-not-free"),
    pytest.param({"max_unit": {MEMORY_MB: 2048}}, {MEMORY_MB: 4096}, MEMORY_MB,
                 id="above-max-unit"),
    pytest.param({"min_unit": {MEMORY_MB: 2048}}, {MEMORY_MB: 1024}, MEMORY_MB,
                 id="below-min-unit"),
    pytest.param({"step": {MEMORY_MB: 512}}, {MEMORY_MB: 1000}, MEMORY_MB, id="off-step"),
    pytest.param({"step": {MEMORY_MB: 512}}, {MEMORY_MB: 1024}, None, id="on-step"),
    pytest.param({"disk": 0}, {DISK_GB: 1}, DISK_GB, id="no-such-inventory"),
    pytest.param({}, {"CUSTOM_GPU": 1}, "CUSTOM_GPU", id="class-no-host-has"),
])
def test_shortfalls(kwargs: dict, request_: dict, short: str | None) -> None:
    view = view_of(host("h1", **kwargs))
    failing = {rc for rc, bad in view.shortfalls(request_) if bad[0]}
    assert failing == ({short} if short else set())
    assert view.fits(request_, everyone(view))[0] == (short is None)


def test_free_with_and_without_ratio() -> None:
    view = view_of(host("h1", vcpus=8, ram=4096, ratios={VCPU: 2.0, MEMORY_MB: 1.5},
                        reserved={MEMORY_MB: 96}, used={VCPU: 3, MEMORY_MB: 1000}))
    idx = everyone(view)
    assert view.free(VCPU, idx).tolist() == [13]
    assert view.free_ignoring_ratio(MEMORY_MB, idx).tolist() == [3000]
    assert view.free("CUSTOM_X", idx).tolist() == [0]


def test_consume_and_unconsume() -> None:
    view = view_of(host("h1"), host("h2"))
    view.consume(1, {MEMORY_MB: 1024, VCPU: 2})
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [32768, 31744]
    assert view.consumers.tolist() == [0, 1]
    view.unconsume(1, {MEMORY_MB: 1024, VCPU: 2})
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [32768, 32768]
    assert view.consumers.tolist() == [0, 0]


def test_lookups_by_name_uuid_and_ignoring_case() -> None:
    view = view_of(host("Node-A"), host("node-b"))
    assert view.index_of("node-b") == 1
    assert view.index_of("missing") is None
    assert view.index_of_uuid(uuid_of("Node-A")) == 0
    assert view.indices_of(["node-b", "missing"]).tolist() == [1]
    assert view.indices_of_ignoring_case(["NODE-a", "Node-B"]).tolist() == [0, 1]


def test_zones_come_from_aggregates_else_the_default() -> None:
    east, west = az("agg-east", "east"), az("agg-west", "west")
    view = view_of(host("e1", aggregates=[east.uuid]), host("w1", aggregates=[west.uuid]),
                   host("both", aggregates=[east.uuid, west.uuid]), host("none"),
                   aggregates=[east, west], default_availability_zone="nova")
    idx = everyone(view)
    assert view.zone_mask("east", idx).tolist() == [True, False, True, False]
    assert view.zone_mask("nova", idx).tolist() == [False, False, False, True]
    assert view.zone_mask("nowhere", idx).tolist() == [False] * 4


def test_hosts_sharing_aggregates_share_a_code() -> None:
    view = view_of(host("h1", aggregates=["a", "b"]), host("h2"),
                   host("h3", aggregates=["b", "a"]))
    codes = view.agg_set.tolist()
    assert codes[0] == codes[2] != codes[1]
    assert view.aggregate_sets[codes[0]] == {"a", "b"}
    assert view.aggregate_sets[codes[1]] == frozenset()


def test_nested_providers_are_not_hosts() -> None:
    child = Provider(uuid=uuid_of("h1-gpu"), name="h1-gpu", parent_uuid=uuid_of("h1"),
                     root_uuid=uuid_of("h1"), inventories={"CUSTOM_GPU": Inventory(total=2)})
    store = FeedStore([host("h1")])
    store.providers[child.uuid] = child
    view = HostView(store, settings())  # type: ignore[arg-type]
    view.refresh(NOW)
    assert view.names == ["h1"]


def test_a_host_without_service_record_is_never_seen() -> None:
    view = view_of(host("h1", service=False))
    assert view.last_seen.tolist() == [-np.inf]


# --- following the store ------------------------------------------------------------


def loaded(store: FeedStore, **overrides: object) -> HostView:
    view = HostView(store, settings(**overrides))  # type: ignore[arg-type]
    view.refresh(NOW)
    return view


def test_follows_usage_changes() -> None:
    store = FeedStore([host("h1"), host("h2")])
    view = loaded(store)
    store.use("h2", {MEMORY_MB: 2048})
    view.refresh(NOW)
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [32768, 30720]
    assert view.consumers.tolist() == [0, 1]


def test_feed_usage_replaces_local_consumption_without_double_counting() -> None:
    store = FeedStore([host("h1")])
    view = loaded(store)
    view.consume(0, {MEMORY_MB: 2048})
    store.use("h1", {MEMORY_MB: 2048})  # the store's record of that same claim
    view.refresh(NOW)
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [30720]


def test_follows_new_providers_and_new_resource_classes() -> None:
    store = FeedStore([host("h1")])
    view = loaded(store)
    store.put_provider(host("h2", extra={"CUSTOM_FPGA": Inventory(total=4)}))
    view.refresh(NOW)
    assert view.names == ["h1", "h2"]
    assert "CUSTOM_FPGA" in view.resource_classes
    assert view.fits({"CUSTOM_FPGA": 2}, everyone(view)).tolist() == [False, True]
    assert view.last_seen[1] == NOW - 1  # its service came with it


def test_grows_past_its_buffers() -> None:
    store = FeedStore([host("h0")])
    view = loaded(store)
    for n in range(1, 200):
        store.put_provider(host(f"h{n}"))
    view.refresh(NOW)
    assert view.size == 200
    assert view.names[199] == "h199"
    assert view.fits({VCPU: 16}, everyone(view)).all()


def test_follows_inventory_changes() -> None:
    store = FeedStore([host("h1", ram=4096)])
    view = loaded(store)
    store.put_provider(host("h1", ram=8192))
    view.refresh(NOW)
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [8192]


def test_follows_aggregate_changes() -> None:
    east = az("agg-east", "east")
    store = FeedStore([host("h1", aggregates=[east.uuid])])
    view = loaded(store)
    assert view.zone_mask("nova", everyone(view)).tolist() == [True]  # aggregate unknown yet
    store.put_aggregate(east)
    view.refresh(NOW)
    assert view.zone_mask("east", everyone(view)).tolist() == [True]


def test_follows_service_changes() -> None:
    store = FeedStore([host("h1"), host("h2")])
    view = loaded(store)
    store.put_service(Service(host="h2", rpc_server="x", last_seen=NOW - 1, disabled=True,
                              failed_builds=3))
    view.refresh(NOW)
    assert view.disabled.tolist() == [False, True]
    assert view.failed_builds.tolist() == [0, 3]


def test_reads_many_changes_in_batches() -> None:
    store = FeedStore([host("h1", ram=10 * CHANGES_BATCH)])
    view = loaded(store)
    for _ in range(2 * CHANGES_BATCH + 5):
        store.use("h1", {MEMORY_MB: 1})
    view.refresh(NOW)
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [8 * CHANGES_BATCH - 5]


def test_reloads_when_the_stream_was_truncated() -> None:
    store = FeedStore([host("h1")])
    view = loaded(store)
    store.use("h1", {MEMORY_MB: 1024})
    store.put_provider(host("h2"))
    store.truncate()
    view.refresh(NOW)
    assert view.names == ["h1", "h2"]
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [31744, 32768]


def test_ignores_changes_older_than_a_provider_reread() -> None:
    store = FeedStore([host("h1")])
    view = loaded(store)
    store.use("h1", {MEMORY_MB: 1024})
    store.use("h1", {MEMORY_MB: 1024})
    view.refresh_provider(uuid_of("h1"))  # sees both claims before the feed does
    view.refresh(NOW)
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [30720]
    assert view.generation.tolist() == [3]


def test_heartbeats_are_reread_at_most_every_interval() -> None:
    store = FeedStore([host("h1", up=False)])
    view = loaded(store, services_refresh_interval=2.0)
    store.heartbeat("h1", NOW + 1)
    view.refresh(NOW + 1)
    assert view.last_seen.tolist() == [NOW - 3600]  # not yet re-read
    view.refresh(NOW + 2)
    assert view.last_seen.tolist() == [NOW + 1]
