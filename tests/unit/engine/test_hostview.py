"""The columnar host view: loading, capacity questions, following the store."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.engine.hostview import CHANGES_BATCH, HostView
from scheduler.exceptions import StoreUnavailable
from scheduler.objects import DISK_GB, MEMORY_MB, VCPU
from scheduler.store.base import Aggregate, Inventory, Provider, Service
from tests.unit.factories import (
    NOW,
    HookedStore,
    aggregate,
    az,
    child,
    host,
    settings,
    uuid_of,
    view_of,
    write_provider,
)


def everyone(view: HostView) -> np.ndarray:
    return np.arange(view.size)


@pytest.mark.parametrize(
    ("kwargs", "rc", "capacity"),
    [
        pytest.param({"ram": 1000}, MEMORY_MB, 1000, id="plain"),
        pytest.param({"ram": 1000, "reserved": {MEMORY_MB: 200}}, MEMORY_MB, 800, id="reserved"),
        pytest.param({"vcpus": 8, "ratios": {VCPU: 4.0}}, VCPU, 32, id="ratio"),
        pytest.param(
            {"vcpus": 8, "reserved": {VCPU: 2}, "ratios": {VCPU: 1.5}},
            VCPU,
            9,
            id="reserved-then-ratio",
        ),
        pytest.param({"disk": 10, "ratios": {DISK_GB: 0.55}}, DISK_GB, 5, id="ratio-rounds-down"),
    ],
)
def test_capacity_applies_reserved_then_ratio(kwargs: dict, rc: str, capacity: int) -> None:
    view = view_of(host("h1", **kwargs))
    j = view.resource_classes.index(rc)
    assert view.capacity[j, 0] == capacity


@pytest.mark.parametrize(
    ("kwargs", "request_", "short"),
    [
        pytest.param({}, {MEMORY_MB: 32768}, None, id="exactly-full-fits"),
        pytest.param({"used": {MEMORY_MB: 1}}, {MEMORY_MB: 32768}, MEMORY_MB, id="one-too-many"),
        pytest.param({"vcpus": 4, "ratios": {VCPU: 4.0}}, {VCPU: 4}, None, id="ratio-gives-room"),
        pytest.param(
            {"vcpus": 4, "ratios": {VCPU: 16.0}, "used": {VCPU: 60}},
            {VCPU: 5},
            VCPU,
            id="ratio-room-used-up",
        ),
        pytest.param(
            {"vcpus": 4, "ratios": {VCPU: 16.0}},
            {VCPU: 5},
            VCPU,
            id="never-above-total-whatever-the-ratio",
        ),
        pytest.param(
            {"ram": 1000, "reserved": {MEMORY_MB: 500}},
            {MEMORY_MB: 600},
            MEMORY_MB,
            id="reserved-is-not-free",
        ),
        pytest.param(
            {"max_unit": {MEMORY_MB: 2048}}, {MEMORY_MB: 4096}, MEMORY_MB, id="above-max-unit"
        ),
        pytest.param(
            {"min_unit": {MEMORY_MB: 2048}}, {MEMORY_MB: 1024}, MEMORY_MB, id="below-min-unit"
        ),
        pytest.param({"step": {MEMORY_MB: 512}}, {MEMORY_MB: 1000}, MEMORY_MB, id="off-step"),
        pytest.param({"step": {MEMORY_MB: 512}}, {MEMORY_MB: 1024}, None, id="on-step"),
        pytest.param({"disk": 0}, {DISK_GB: 1}, DISK_GB, id="no-such-inventory"),
        pytest.param({}, {"CUSTOM_GPU": 1}, "CUSTOM_GPU", id="class-no-host-has"),
    ],
)
def test_shortfalls(kwargs: dict, request_: dict, short: str | None) -> None:
    view = view_of(host("h1", **kwargs))
    failing = {rc for rc, bad in view.shortfalls(request_) if bad[0]}
    assert failing == ({short} if short else set())
    assert view.fits(request_, everyone(view))[0] == (short is None)


def test_free_with_and_without_ratio() -> None:
    view = view_of(
        host(
            "h1",
            vcpus=8,
            ram=4096,
            ratios={VCPU: 2.0, MEMORY_MB: 1.5},
            reserved={MEMORY_MB: 96},
            used={VCPU: 3, MEMORY_MB: 1000},
        )
    )
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
    view = view_of(
        host("e1", aggregates=[east.uuid]),
        host("w1", aggregates=[west.uuid]),
        host("both", aggregates=[east.uuid, west.uuid]),
        host("none"),
        aggregates=[east, west],
        default_availability_zone="nova",
    )
    idx = everyone(view)
    assert view.zone_mask("east", idx).tolist() == [True, False, True, False]
    assert view.zone_mask("nova", idx).tolist() == [False, False, False, True]
    assert view.zone_mask("nowhere", idx).tolist() == [False] * 4


def test_a_hosts_zone_is_its_aggregates_else_the_default() -> None:
    east, west = az("agg-east", "east"), az("agg-west", "west")
    view = view_of(
        host("e1", aggregates=[east.uuid]),
        host("both", aggregates=[west.uuid, east.uuid]),
        host("none", aggregates=[uuid_of("plain")]),
        aggregates=[east, west, aggregate("plain", ssd="true")],
        default_availability_zone="elsewhere",
    )
    assert [view.zone_of(i) for i in range(3)] == ["east", "east", "elsewhere"]
    # A host in several zones is reported in the one it was asked for.
    assert view.zone_of(1, "west") == "west"
    assert view.zone_of(0, "west") == "east"
    # ... as the zone filters count it.
    for i in range(3):
        assert view.zone_mask(view.zone_of(i), np.array([i])).tolist() == [True]


def test_hosts_sharing_aggregates_share_a_code() -> None:
    view = view_of(
        host("h1", aggregates=["a", "b"]), host("h2"), host("h3", aggregates=["b", "a"])
    )
    codes = view.agg_set.tolist()
    assert codes[0] == codes[2] != codes[1]
    assert view.aggregate_sets[codes[0]] == {"a", "b"}
    assert view.aggregate_sets[codes[1]] == frozenset()


def test_nested_providers_are_not_hosts_but_count_toward_theirs() -> None:
    child = Provider(
        uuid=uuid_of("h1-gpu"),
        name="h1-gpu",
        parent_uuid=uuid_of("h1"),
        root_uuid=uuid_of("h1"),
        inventories={"CUSTOM_GPU": Inventory(total=2)},
    )
    store = HookedStore([host("h0"), host("h1")])
    write_provider(store, child)
    view = HostView(store, settings())  # type: ignore[arg-type]
    view.refresh(NOW)
    assert view.names == ["h0", "h1"]
    assert view.kid_uuids == [child.uuid]
    assert view.kid_host.tolist() == [1]
    kids, positions = view.kids_of(np.array([1, 0]))
    assert (kids.tolist(), positions.tolist()) == ([0], [0])
    assert view.can_give("CUSTOM_GPU", 2, kids, kid=True).tolist() == [True]
    assert view.can_give("CUSTOM_GPU", 1, kids, kid=True, extra=np.array([2])).tolist() == [False]


def test_follows_child_providers_and_their_usage() -> None:
    store = HookedStore([host("h1")])
    view = loaded(store)
    store.put_provider(
        host("h1", children=[child("h1-gpu", inventory={"VGPU": 4}, traits=["CUSTOM_T4"])])
    )
    store.use("h1-gpu", {"VGPU": 3})
    view.refresh(NOW)
    j = view.resource_classes.index("VGPU")
    assert (view.kid_capacity[j].tolist(), view.kid_used[j].tolist()) == ([4], [3])
    assert view.has_trait("CUSTOM_T4", np.array([0]), kid=True).tolist() == [True]
    view.consume_allocation(0, {uuid_of("h1-gpu"): {"VGPU": 1}, uuid_of("h1"): {VCPU: 2}})
    assert view.kid_used[j].tolist() == [4]
    assert view.consumers.tolist() == [1]
    view.consume_allocation(0, {uuid_of("h1-gpu"): {"VGPU": 1}, uuid_of("h1"): {VCPU: 2}}, sign=-1)
    assert view.kid_used[j].tolist() == [3]
    assert view.free(VCPU, everyone(view)).tolist() == [16]


def test_a_child_seen_before_its_root_waits_for_it() -> None:
    store = HookedStore()
    view = loaded(store)
    h = host("h1", children=[child("h1-gpu", inventory={"VGPU": 1})])
    store._append("provider", h.children[0])
    store.put_provider(host("h1"))
    view.refresh(NOW)
    assert view.kid_host.tolist() == [0]


def test_traits_and_aggregates_are_bits_past_one_word() -> None:
    many = [f"CUSTOM_T{i}" for i in range(130)]
    view = view_of(
        host("h0", traits=many[:70], aggregates=["a1"]),
        host("h1", traits=many[60:], aggregates=["a2"]),
    )
    idx = everyone(view)
    assert view.has_trait("CUSTOM_T0", idx).tolist() == [True, False]
    assert view.has_trait("CUSTOM_T65", idx).tolist() == [True, True]
    assert view.has_trait("CUSTOM_T129", idx).tolist() == [False, True]
    assert view.has_trait("CUSTOM_UNKNOWN", idx).tolist() == [False, False]
    assert view.in_any_trait(["CUSTOM_T1", "CUSTOM_T128"], idx).tolist() == [True, True]
    assert view.trait_count(["CUSTOM_T65", "CUSTOM_T0", "CUSTOM_T100"], idx).tolist() == [2, 2]
    assert view.in_any(["a2", "nope"], idx).tolist() == [False, True]


def test_trait_changes_replace_the_bits() -> None:
    store = HookedStore([host("h1", traits=["CUSTOM_A"])])
    view = loaded(store)
    store.put_provider(host("h1", traits=["CUSTOM_B"]))
    view.refresh(NOW)
    idx = everyone(view)
    assert view.has_trait("CUSTOM_A", idx).tolist() == [False]
    assert view.has_trait("CUSTOM_B", idx).tolist() == [True]


def test_aggregates_by_name_and_a_child_through_its_root() -> None:
    gold = Aggregate(uuid=uuid_of("gold"), name="gold")
    view = view_of(
        host("h1", aggregates=[gold.uuid], children=[child("h1-gpu", inventory={"VGPU": 1})]),
        host("h2", children=[child("h2-gpu", inventory={"VGPU": 1}, aggregates=[gold.uuid])]),
        aggregates=[gold],
    )
    assert view.in_any(["gold"], everyone(view)).tolist() == [True, False]
    assert view.in_any(["gold"], np.arange(view.kid_size), kid=True).tolist() == [True, True]


def test_a_host_without_service_record_is_never_seen() -> None:
    view = view_of(host("h1", service=False))
    assert view.last_seen.tolist() == [-np.inf]


# --- following the store ------------------------------------------------------------


def loaded(store: HookedStore, **overrides: object) -> HostView:
    view = HostView(store, settings(**overrides))  # type: ignore[arg-type]
    view.refresh(NOW)
    return view


def test_a_snapshot_load_and_fed_changes_give_the_same_columns() -> None:
    # The bulk load and the per-row write read one declaration of which
    # Inventory field fills which column; both must give the same view.
    hosts = [
        host(
            "h0",
            reserved={MEMORY_MB: 512},
            ratios={VCPU: 4.0},
            used={VCPU: 3},
            traits=["CUSTOM_A"],
            aggregates=["a1"],
            consumers=2,
            children=[
                child(
                    "h0-gpu",
                    inventory={"VGPU": 4},
                    used={"VGPU": 1},
                    traits=["CUSTOM_T4"],
                    max_unit={"VGPU": 2},
                )
            ],
        ),
        host(
            "h1",
            disk=0,
            max_unit={MEMORY_MB: 4096},
            min_unit={VCPU: 2},
            step={MEMORY_MB: 256},
            extra={"CUSTOM_FPGA": Inventory(total=2, reserved=1)},
        ),
        host("h2", ratios={DISK_GB: 0.5}, aggregates=["a1", "a2"], traits=["CUSTOM_B"]),
    ]
    snapshot = view_of(*hosts)
    store = HookedStore()
    fed = loaded(store)
    for h in hosts:
        store.put_provider(h)  # its usages and consumers come with it
    fed.refresh(NOW)
    assert (fed.names, fed.kid_uuids) == (snapshot.names, snapshot.kid_uuids)
    for rc in snapshot.resource_classes:
        j, k = snapshot.resource_classes.index(rc), fed.resource_classes.index(rc)
        for column in (
            "total",
            "reserved",
            "ratio",
            "capacity",
            "used",
            "min_unit",
            "max_unit",
            "step",
        ):
            assert getattr(fed, column)[k].tolist() == getattr(snapshot, column)[j].tolist(), (
                rc,
                column,
            )
        assert fed.kid_capacity[k].tolist() == snapshot.kid_capacity[j].tolist(), rc
        assert fed.kid_used[k].tolist() == snapshot.kid_used[j].tolist(), rc
        kids = np.arange(snapshot.kid_size)
        for amount in (1, 2, 3, 256, 4096):
            assert fed.can_give(rc, amount, everyone(fed)).tolist() == (
                snapshot.can_give(rc, amount, everyone(snapshot)).tolist()
            ), (rc, amount)
            assert fed.can_give(rc, amount, kids, kid=True).tolist() == (
                snapshot.can_give(rc, amount, kids, kid=True).tolist()
            ), (rc, amount)
    assert fed.consumers.tolist() == snapshot.consumers.tolist() == [2, 0, 0]
    for trait in ("CUSTOM_A", "CUSTOM_B", "CUSTOM_T4"):
        assert fed.has_trait(trait, everyone(fed)).tolist() == (
            snapshot.has_trait(trait, everyone(snapshot)).tolist()
        )
        assert fed.has_trait(trait, kids, kid=True).tolist() == (
            snapshot.has_trait(trait, kids, kid=True).tolist()
        )
    assert fed.in_any(["a2"], everyone(fed)).tolist() == [False, False, True]
    assert snapshot.in_any(["a2"], everyone(snapshot)).tolist() == [False, False, True]
    assert fed.kid_host.tolist() == snapshot.kid_host.tolist() == [0]


def test_public_columns_give_the_live_rows() -> None:
    view = view_of(host("h0", traits=[f"CUSTOM_T{i}" for i in range(70)]), host("h1"))
    assert view.trait_bits.shape == (2, 2)
    assert view.agg_bits.shape[0] == view.last_seen.shape[0] == view.size == 2
    assert view.capacity.shape == (len(view.resource_classes), 2)
    assert view.kid_capacity.shape == (len(view.resource_classes), 0)


def test_follows_usage_changes() -> None:
    store = HookedStore([host("h1"), host("h2")])
    view = loaded(store)
    store.use("h2", {MEMORY_MB: 2048})
    view.refresh(NOW)
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [32768, 30720]
    assert view.consumers.tolist() == [0, 1]


def test_feed_usage_replaces_local_consumption_without_double_counting() -> None:
    store = HookedStore([host("h1")])
    view = loaded(store)
    view.consume(0, {MEMORY_MB: 2048})
    store.use("h1", {MEMORY_MB: 2048})  # the store's record of that same claim
    view.refresh(NOW)
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [30720]


def test_follows_new_providers_and_new_resource_classes() -> None:
    store = HookedStore([host("h1")])
    view = loaded(store)
    store.put_provider(host("h2", extra={"CUSTOM_FPGA": Inventory(total=4)}))
    view.refresh(NOW)
    assert view.names == ["h1", "h2"]
    assert "CUSTOM_FPGA" in view.resource_classes
    assert view.fits({"CUSTOM_FPGA": 2}, everyone(view)).tolist() == [False, True]
    assert view.last_seen[1] == NOW - 1  # its service came with it


def test_grows_past_its_buffers() -> None:
    store = HookedStore([host("h0")])
    view = loaded(store)
    for n in range(1, 200):
        store.put_provider(host(f"h{n}"))
    view.refresh(NOW)
    assert view.size == 200
    assert view.names[199] == "h199"
    assert view.fits({VCPU: 16}, everyone(view)).all()


def test_follows_inventory_changes() -> None:
    store = HookedStore([host("h1", ram=4096)])
    view = loaded(store)
    store.put_provider(host("h1", ram=8192))
    view.refresh(NOW)
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [8192]


def test_unit_rules_asked_before_follow_inventory_changes_and_new_hosts() -> None:
    # The min_unit / max_unit / step_size masks are kept between decisions:
    # an inventory write (or a new host) must not be answered from them.
    store = HookedStore([host("h1"), host("h2", step={MEMORY_MB: 512})])
    view = loaded(store)
    assert view.can_give(MEMORY_MB, 256, everyone(view)).tolist() == [True, False]
    store.put_provider(host("h1", max_unit={MEMORY_MB: 128}))
    store.put_provider(host("h3"))
    view.refresh(NOW)
    assert view.can_give(MEMORY_MB, 256, everyone(view)).tolist() == [False, False, True]
    assert view.can_give(MEMORY_MB, 256, np.array([2, 0])).tolist() == [True, False]


def test_follows_aggregate_changes() -> None:
    east = az("agg-east", "east")
    store = HookedStore([host("h1", aggregates=[east.uuid])])
    view = loaded(store)
    assert view.zone_mask("nova", everyone(view)).tolist() == [True]  # aggregate unknown yet
    store.put_aggregate(east)
    view.refresh(NOW)
    assert view.zone_mask("east", everyone(view)).tolist() == [True]


def test_follows_service_changes() -> None:
    store = HookedStore([host("h1"), host("h2")])
    view = loaded(store)
    store.put_service(
        Service(host="h2", rpc_server="x", last_seen=NOW - 1, disabled=True, failed_builds=3)
    )
    view.refresh(NOW)
    assert view.disabled.tolist() == [False, True]
    assert view.failed_builds.tolist() == [0, 3]


def test_reads_many_changes_in_batches() -> None:
    store = HookedStore([host("h1", ram=10 * CHANGES_BATCH)])
    view = loaded(store)
    for _ in range(2 * CHANGES_BATCH + 5):
        store.use("h1", {MEMORY_MB: 1})
    view.refresh(NOW)
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [8 * CHANGES_BATCH - 5]


def test_reloads_when_the_stream_was_truncated() -> None:
    store = HookedStore([host("h1")])
    view = loaded(store)
    store.use("h1", {MEMORY_MB: 1024})
    store.put_provider(host("h2"))
    store.truncate()
    view.refresh(NOW)
    assert view.names == ["h1", "h2"]
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [31744, 32768]


def test_ignores_changes_older_than_a_provider_reread() -> None:
    store = HookedStore([host("h1")])
    view = loaded(store)
    store.use("h1", {MEMORY_MB: 1024})
    store.use("h1", {MEMORY_MB: 1024})
    view.refresh_provider(uuid_of("h1"))  # sees both claims before the feed does
    view.refresh(NOW)
    assert view.free(MEMORY_MB, everyone(view)).tolist() == [30720]
    assert view.generation.tolist() == [3]


def test_heartbeats_are_reread_at_most_every_interval() -> None:
    store = HookedStore([host("h1", up=False)])
    view = loaded(store, services_refresh_interval=2.0)
    store.heartbeat(["h1"], NOW + 1)
    view.refresh(NOW + 1)
    assert view.last_seen.tolist() == [NOW - 3600]  # not yet re-read
    view.refresh(NOW + 2)
    assert view.last_seen.tolist() == [NOW + 1]


def test_only_hosts_whose_liveness_is_in_doubt_are_reread() -> None:
    # Down time 60 s, re-read every 2 s: a host seen within 56 s is up until
    # the next re-read whatever its newer heartbeats say, so it is not asked.
    store = HookedStore(
        [host("fresh"), host("aging"), host("down", up=False), host("unregistered", service=False)]
    )
    view = loaded(store, services_refresh_interval=2.0, service_down_time=60.0)
    store.heartbeat(["aging"], NOW - 57)
    view._last_seen[1] = NOW - 57  # as if its last re-read was 57 s ago
    for name in ("fresh", "aging", "down"):
        store.heartbeat([name], NOW + 1)
    store.heartbeats_asked.clear()
    view.refresh(NOW + 2)
    assert store.heartbeats_asked == [["aging", "down"]]
    assert view.last_seen.tolist() == [NOW - 1, NOW + 1, NOW + 1, -np.inf]


@pytest.mark.parametrize("silent_for", [0, 10, 55, 57, 59, 61, 120])
def test_the_liveness_a_view_answers_is_that_of_every_heartbeat_reread(silent_for: float) -> None:
    # A host that heartbeats every 10 s and then falls silent: at every
    # decision the view's answer (up or not) is what re-reading every
    # heartbeat at every interval would give.
    store = HookedStore([host("h1")])
    view = loaded(store, services_refresh_interval=2.0, service_down_time=60.0)
    last = NOW - 1  # as the factory registered it
    for t in np.arange(NOW, NOW + 200, 0.5):
        if t <= NOW + 100 - silent_for and (t - NOW) % 10 == 0:
            store.heartbeat(["h1"], float(t))
            last = float(t)
        view.refresh(float(t))
        truly_up = abs(t - last) <= 60.0
        assert (abs(t - view.last_seen[0]) <= 60.0) == truly_up, (t, last)


def test_heartbeats_of_hosts_without_a_service_record_are_not_taken() -> None:
    store = HookedStore([host("h1", up=False), host("h2", service=False)])
    view = loaded(store, services_refresh_interval=2.0)
    store.heartbeat(["h1"], NOW + 1)
    store.heartbeat(["h2"], NOW + 1)  # a host with no service record
    view.refresh(NOW + 2)
    assert view.last_seen.tolist() == [NOW + 1, -np.inf]


def test_only_heartbeats_are_reread_the_rest_comes_with_the_feed() -> None:
    store = HookedStore([host("h1", up=False)])
    view = loaded(store, services_refresh_interval=2.0)
    with store.unfed():
        store.put_service(
            Service(host="h1", rpc_server="x", last_seen=NOW + 1, disabled=True, failed_builds=2)
        )
    view.refresh(NOW + 2)
    assert (view.last_seen.tolist(), view.disabled.tolist(), view.failed_builds.tolist()) == (
        [NOW + 1],
        [False],
        [0],
    )


def test_a_host_marked_down_is_down_at_once_and_up_with_its_next_heartbeat() -> None:
    # Seen a second ago: without the mark it would count up for a minute.
    store = HookedStore([host("h1"), host("h2")])
    view = loaded(store, services_refresh_interval=2.0, service_down_time=60.0)
    assert view.last_seen.tolist() == [NOW - 1, NOW - 1]
    store.mark_down(["h2"])
    view.refresh(NOW)
    assert view.last_seen.tolist() == [NOW - 1, 0.0]
    # An older record fed later (a report) keeps it down; a heartbeat brings it up.
    store.record_build_result("h2", success=False)
    view.refresh(NOW + 1)
    assert view.last_seen.tolist() == [NOW - 1, 0.0]
    store.heartbeat(["h2"], NOW + 2)
    view.refresh(NOW + 2)
    assert view.last_seen.tolist() == [NOW - 1, NOW + 2]


def test_a_caller_shares_a_catch_up_begun_after_it_and_sees_all_written_before_it() -> None:
    store = HookedStore([host("h1")])
    view = loaded(store)
    waiting = view.asked()  # a request begins, and waits for the engine
    store.use("h1", {VCPU: 3})  # written after it began
    view.refresh(NOW, view.asked())  # the decision before it: reads that
    store.use("h1", {VCPU: 1})  # written after that read began
    view.refresh(NOW, waiting)  # shares that read: nothing read again
    assert view.free(VCPU, everyone(view)).tolist() == [13]
    view.refresh(NOW, view.asked())  # one begun after that read reads again
    assert view.free(VCPU, everyone(view)).tolist() == [12]
    view.refresh(NOW)  # a caller that says nothing of its start always reads
    store.use("h1", {VCPU: 2})
    view.refresh(NOW, waiting)
    assert view.free(VCPU, everyone(view)).tolist() == [12]
    view.refresh(NOW)
    assert view.free(VCPU, everyone(view)).tolist() == [10]


def test_a_catch_up_that_failed_is_not_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    store = HookedStore([host("h1")])
    view = loaded(store)
    waiting = view.asked()
    store.use("h1", {VCPU: 3})

    def down(*_args: object, **_kwargs: object) -> None:
        raise StoreUnavailable(reason="refused")

    with monkeypatch.context() as patched:
        patched.setattr(store, "changes", down)
        with pytest.raises(StoreUnavailable):
            view.refresh(NOW, view.asked())  # the decision before it: its read failed
    view.refresh(NOW, waiting)
    assert view.free(VCPU, everyone(view)).tolist() == [13]
