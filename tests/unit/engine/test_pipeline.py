"""The whole pipeline: candidates, filters, weighers, pick, claim, alternates."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import structlog.testing

from scheduler.engine.pipeline import CLAIM_CONFLICT, NOT_TRIED, OVER_LIMIT, Engine
from scheduler.engine.plugins import UnknownPlugin
from scheduler.engine.ranking import _rank
from scheduler.exceptions import NoValidHost
from scheduler.objects import MEMORY_MB, VCPU, AllocationRequest
from scheduler.store.base import GroupClaim
from tests.unit.factories import (
    GROUP_UUID,
    HookedStore,
    az,
    engine,
    group,
    host,
    spec,
    uuid_of,
)

# Weighers off unless a test is about ranking: then hosts tie and the pick is seeded.
FLAT = {"weighers": ()}
RESOURCE_WEIGHERS = ("RAMWeigher", "CPUWeigher", "DiskWeigher", "BuildFailureWeigher")


def hosts_free(store: HookedStore) -> dict[str, int]:
    return {p.name: p.free(MEMORY_MB) for p in store.providers.values()}


def primaries(selections: list) -> list[str]:
    return [s[0].host for s in selections]


# --- candidates and filters: what NoValidHost says ----------------------------------


@pytest.mark.parametrize(
    ("hosts", "request_", "details", "reasons"),
    [
        pytest.param(
            [host(f"small{i}", ram=512) for i in range(15)]
            + [host(f"down{i}", up=False) for i in range(3)]
            + [host(f"off{i}", disabled=True) for i in range(2)],
            spec(ram=1024),
            "0/20 hosts available: 2 disabled, 3 host down, 15 insufficient MEMORY_MB",
            {"disabled": 2, "host down": 3, "insufficient MEMORY_MB": 15},
            id="kube-style-summary",
        ),
        pytest.param(
            [host("tiny", vcpus=1, ram=512), host("lowram", ram=512), host("gone", up=False)],
            spec(vcpus=2, ram=1024),
            "0/3 hosts available: 1 host down, 1 insufficient VCPU, 1 insufficient MEMORY_MB",
            {"insufficient VCPU": 1, "insufficient MEMORY_MB": 1, "host down": 1},
            id="each-host-counted-once-by-its-first-stage",
        ),
        pytest.param(
            [host("h1"), host("h2")],
            spec(availability_zone="atlantis"),
            "0/2 hosts available: 2 unknown availability zone",
            {"unknown availability zone": 2},
            id="zone-with-no-hosts",
        ),
        pytest.param(
            [host("h1"), host("H2")],
            spec(ignore_hosts=("h1", "h2")),
            "0/2 hosts available: 2 host already tried",
            {"host already tried": 2},
            id="all-tried",
        ),
        pytest.param([], spec(), "0/0 hosts available", {}, id="no-hosts-at-all"),
    ],
)
def test_no_valid_host_counts_per_reason(
    hosts: list, request_: object, details: str, reasons: dict[str, int]
) -> None:
    store = HookedStore(hosts)
    with pytest.raises(NoValidHost) as err:
        engine(store).select("req", request_, [uuid_of("i1")])
    assert err.value.details == details
    assert err.value.reasons == reasons
    assert str(err.value) == NoValidHost.USER_MESSAGE
    assert store.consumers == {}


def test_capacity_honours_ratio_and_reserved() -> None:
    store = HookedStore(
        [
            host("reserved-away", ram=4096, reserved={MEMORY_MB: 2048}),
            host("overcommitted", ram=2048, ratios={MEMORY_MB: 1.5}, used={MEMORY_MB: 2048}),
            host("roomy", vcpus=2, ratios={VCPU: 8.0}, used={VCPU: 12}),
        ]
    )
    selections = engine(store, **FLAT).select("req", spec(vcpus=2, ram=3000), [uuid_of("i1")])
    assert primaries(selections) == ["roomy"]


def test_max_placement_results_limits_candidates() -> None:
    store = HookedStore(
        [host(f"h{i}", used={MEMORY_MB: 32768}) for i in range(3)]
        + [host(f"ok{i}") for i in range(6)]
    )
    result = engine(store, max_placement_results=2, **FLAT).schedule(
        "req", spec(), [uuid_of("i1")], claim=False
    )
    assert result.traces[0].reasons == {"insufficient MEMORY_MB": 3, OVER_LIMIT: 4}
    assert [(s.stage, s.survivors) for s in result.traces[0].stages[:3]] == [
        ("DisabledComputesRequestFilter", 9),
        ("hosts up", 9),
        ("candidates", 2),
    ]


def test_randomized_candidates_are_drawn_from_all_hosts() -> None:
    store = HookedStore([host(f"h{i}") for i in range(20)])
    eng = engine(store, max_placement_results=2, randomize_candidates=True, **FLAT)
    picked = {
        primaries(eng.select(f"req{n}", spec(), [uuid_of(f"i{n}")], claim=False))[0]
        for n in range(30)
    }
    assert len(picked) > 5
    assert not picked <= {"h0", "h1"}


# --- weighers, pick, replay ---------------------------------------------------------


def test_weighers_rank_and_the_best_is_claimed() -> None:
    store = HookedStore(
        [host("busy", used={MEMORY_MB: 30000}), host("idle"), host("flaky", failed_builds=2)]
    )
    # Nova's RAM, CPU and disk weighers, as Nova weighs: the nova profile.
    eng = engine(store, weighers=RESOURCE_WEIGHERS, weigher_profile="nova")
    result = eng.schedule("req", spec(), [uuid_of("i1")])
    assert primaries(result.selections) == ["idle"]
    trace = result.traces[0]
    assert [w.host for w in trace.top] == ["idle", "busy", "flaky"]
    assert set(trace.top[0].contributions) == {
        "RAMWeigher",
        "CPUWeigher",
        "DiskWeigher",
        "BuildFailureWeigher",
    }
    assert trace.top[0].weight == pytest.approx(sum(trace.top[0].contributions.values()))
    # Nova's sign: the clean hosts score 0, the failing one -1,000,000.
    assert [w.contributions["BuildFailureWeigher"] for w in trace.top] == [0.0, 0.0, -1e6]


def test_packing_with_negative_multipliers() -> None:
    store = HookedStore([host("idle"), host("busy", used={MEMORY_MB: 30000})])
    eng = engine(
        store, weighers=("RAMWeigher",), weight_multipliers={"ram_weight_multiplier": -1.0}
    )
    assert primaries(eng.select("req", spec(), [uuid_of("i1")])) == ["busy"]


def test_one_host_left_is_not_weighed() -> None:
    store = HookedStore([host("only")])
    [[selection]] = engine(store, max_attempts=1).select("req", spec(), [uuid_of("i1")])
    assert selection.weight == 0.0


@pytest.mark.parametrize("subset", [1, 3])
def test_pick_stays_within_host_subset_size(subset: int) -> None:
    # Free RAM strictly decreasing: h0 is the best, h9 the worst.
    store = HookedStore([host(f"h{i}", used={MEMORY_MB: 1000 * i}) for i in range(10)])
    eng = engine(store, host_subset_size=subset, weighers=("RAMWeigher",))
    picked = Counter(
        primaries(eng.select(f"req{n}", spec(), [uuid_of(f"i{n}")], claim=False))[0]
        for n in range(60)
    )
    assert set(picked) == {f"h{i}" for i in range(subset)}


def test_same_request_replays_the_same_decision() -> None:
    hosts = [host(f"h{i}") for i in range(50)]
    first = engine(HookedStore(hosts), host_subset_size=10).select(
        "req-42", spec(num_instances=3), [uuid_of(f"i{n}") for n in range(3)]
    )
    again = engine(HookedStore(hosts), host_subset_size=10).select(
        "req-42", spec(num_instances=3), [uuid_of(f"i{n}") for n in range(3)]
    )
    assert first == again


def test_ties_are_broken_at_random_by_request() -> None:
    store = HookedStore([host(f"h{i}") for i in range(20)])
    eng = engine(store, **FLAT)
    picked = {
        primaries(eng.select(f"req{n}", spec(), [uuid_of("i1")], claim=False))[0]
        for n in range(30)
    }
    assert len(picked) > 5


# --- claim ----------------------------------------------------------------------------


def test_claim_records_the_allocation_request_of_the_selection() -> None:
    store = HookedStore([host("h1")])
    [[selection]] = engine(store, max_attempts=1).select(
        "req", spec(vcpus=2, ram=2048, disk=20), [uuid_of("i1")]
    )
    assert (selection.host, selection.node, selection.provider_uuid) == ("h1", "h1", uuid_of("h1"))
    assert selection.allocation_request.allocations == {
        uuid_of("h1"): {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}
    }
    assert (selection.allocation_request.project_id, selection.allocation_request.user_id) == (
        "project",
        "user",
    )
    assert store.consumers[uuid_of("i1")].allocations == selection.allocation_request.allocations


def test_claim_conflict_falls_through_to_the_next_best_host() -> None:
    store = HookedStore(
        [
            host("best"),
            host("second", used={MEMORY_MB: 1000}),
            host("third", used={MEMORY_MB: 2000}),
        ]
    )
    store.conflict_on.add("best")
    result = engine(store, weighers=("RAMWeigher",)).schedule("req", spec(), [uuid_of("i1")])
    assert primaries(result.selections) == ["second"]
    assert result.traces[0].conflicts == [("best", "CapacityExceeded")]
    assert [s.host for s in result.selections[0][1:]] == ["best", "third"]


def test_claim_conflict_rereads_the_provider() -> None:
    store = HookedStore([host("best"), host("second", used={MEMORY_MB: 1000})])
    eng = engine(store, weighers=("RAMWeigher",))
    eng.view.refresh(0.0)
    store.use("best", {MEMORY_MB: 32768}, fed=False)  # another worker filled it, unseen yet
    selections = eng.select("req", spec(), [uuid_of("i1")])
    assert primaries(selections) == ["second"]
    assert len(selections[0]) == 1  # "best" is known to be full now: no alternate there


def test_claim_attempts_are_bounded() -> None:
    store = HookedStore([host(f"h{i}") for i in range(6)])
    store.conflict_on.update(f"h{i}" for i in range(6))
    with pytest.raises(NoValidHost) as err:
        engine(store, claim_attempts=4).select("req", spec(), [uuid_of("i1")])
    assert err.value.reasons == {CLAIM_CONFLICT: 4, NOT_TRIED: 2}
    assert store.consumers == {}


def test_strict_group_claims_carry_the_policy() -> None:
    store = HookedStore([host("h1"), host("h2")])
    engine(store).select("req", spec(group=group("anti-affinity", 2)), [uuid_of("i1")])
    [(_, chosen, claim)] = store.claims
    assert claim == GroupClaim(GROUP_UUID, "anti-affinity", chosen, 2)


def test_soft_group_claims_record_the_member() -> None:
    # The store checks no soft policy, but records the member for later weighing.
    store = HookedStore([host("h1")])
    engine(store).select("req", spec(group=group("soft-anti-affinity")), [uuid_of("i1")])
    assert [claim for _, _, claim in store.claims] == [
        GroupClaim(GROUP_UUID, "soft-anti-affinity", "h1", 1)
    ]
    assert store.group_hosts(GROUP_UUID) == {"h1": 1}


# --- alternates -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_attempts", "hosts", "alternates"),
    [
        pytest.param(3, 5, 2, id="max-attempts-minus-one"),
        pytest.param(5, 3, 2, id="no-more-than-the-other-hosts"),
        pytest.param(1, 5, 0, id="none-wanted"),
    ],
)
def test_alternates_count(max_attempts: int, hosts: int, alternates: int) -> None:
    store = HookedStore([host(f"h{i}") for i in range(hosts)])
    [selections] = engine(store, max_attempts=max_attempts).select("req", spec(), [uuid_of("i1")])
    assert len(selections) == 1 + alternates
    assert len({s.host for s in selections}) == len(selections)
    assert list(store.consumers) == [uuid_of("i1")]  # alternates are not claimed


def test_alternates_are_ranked_and_not_claimed() -> None:
    store = HookedStore([host(f"h{i}", used={MEMORY_MB: 1000 * i}) for i in range(5)])
    [selections] = engine(store, weighers=("RAMWeigher",)).select("req", spec(), [uuid_of("i1")])
    assert [s.host for s in selections] == ["h0", "h1", "h2"]
    assert [s.weight for s in selections] == sorted((s.weight for s in selections), reverse=True)
    assert hosts_free(store)["h1"] == 31768


def test_alternates_follow_what_earlier_instances_consumed() -> None:
    # Packing: free RAM b 1024 < c 1536 < a 2048; each instance takes 1024.
    store = HookedStore(
        [
            host("a", ram=2048),
            host("b", ram=4096, used={MEMORY_MB: 3072}),
            host("c", ram=8192, used={MEMORY_MB: 6656}),
        ]
    )
    eng = engine(
        store,
        weighers=("RAMWeigher",),
        weight_multipliers={"ram_weight_multiplier": -1.0},
        max_attempts=3,
    )
    selections = eng.select(
        "req", spec(ram=1024, num_instances=3), [uuid_of(f"i{n}") for n in range(3)]
    )
    hosts = [[s.host for s in per_instance] for per_instance in selections]
    # i1 fills "b"; i2 leaves "c" 512, too little to be an alternate of i3.
    assert hosts == [["b", "c", "a"], ["c", "a"], ["a"]]


def test_each_selection_names_its_own_hosts_zone_the_default_for_a_host_in_none() -> None:
    east, west = az("agg-east", "east"), az("agg-west", "west")
    store = HookedStore(
        [
            host("e1", aggregates=[east.uuid]),
            host("w1", aggregates=[west.uuid]),
            host("plain"),
        ],
        [east, west],
    )
    [per_instance] = engine(store, **FLAT).select("req", spec(), [uuid_of("i1")])
    assert len(per_instance) == 3  # the primary and two alternates
    assert {s.host: s.availability_zone for s in per_instance} == {
        "e1": "east",
        "w1": "west",
        "plain": "nova",
    }


def test_a_host_in_two_zones_is_reported_in_the_zone_asked_for() -> None:
    east, west = az("agg-east", "east"), az("agg-west", "west")
    store = HookedStore([host("both", aggregates=[east.uuid, west.uuid])], [east, west])
    first = engine(store).select("req", spec(availability_zone="west"), [uuid_of("i1")])
    assert first[0][0].availability_zone == "west"
    # Selected again (a re-driven request), the allocation it holds is reused.
    again = engine(store).select("req2", spec(availability_zone="west"), [uuid_of("i1")])
    assert len(store.claims) == 1
    assert again[0][0].availability_zone == "west"


def test_no_alternates_when_not_asked() -> None:
    store = HookedStore([host(f"h{i}") for i in range(5)])
    selections = engine(store).select("req", spec(), [uuid_of("i1")], return_alternates=False)
    assert [len(s) for s in selections] == [1]


# --- multi-instance requests --------------------------------------------------------


def test_instances_consume_the_view_one_after_another() -> None:
    store = HookedStore([host("a", ram=2048), host("b", ram=1024)])
    selections = engine(store, **FLAT).select(
        "req", spec(ram=1024, num_instances=3), [uuid_of(f"i{n}") for n in range(3)]
    )
    assert sorted(primaries(selections)) == ["a", "a", "b"]
    assert hosts_free(store) == {"a": 0, "b": 0}


def test_all_or_nothing_releases_every_claim() -> None:
    store = HookedStore([host("a", ram=2048), host("b", ram=1024)])
    eng = engine(store)
    with pytest.raises(NoValidHost) as err:
        eng.select("req", spec(ram=1024, num_instances=4), [uuid_of(f"i{n}") for n in range(4)])
    assert err.value.details == "0/2 hosts available: 2 insufficient MEMORY_MB (instance 4 of 4)"
    assert store.consumers == {}
    assert hosts_free(store) == {"a": 2048, "b": 1024}
    # The view is as the store: the same hosts serve the next request whole.
    selections = eng.select(
        "req2", spec(ram=1024, num_instances=3), [uuid_of(f"j{n}") for n in range(3)]
    )
    assert sorted(primaries(selections)) == ["a", "a", "b"]


def test_dry_run_claims_nothing_and_leaves_the_view_as_it_was() -> None:
    store = HookedStore([host("a", ram=2048)])
    eng = engine(store)
    for request in ("dry1", "dry2"):
        selections = eng.select(
            request, spec(ram=1024, num_instances=2), [uuid_of("i1"), uuid_of("i2")], claim=False
        )
        assert primaries(selections) == ["a", "a"]
    assert store.consumers == {}
    assert eng.view.free(MEMORY_MB, [0]).tolist() == [2048]


def test_anti_affinity_spreads_a_multi_instance_request() -> None:
    store = HookedStore([host(f"h{i}") for i in range(4)])
    uuids = [uuid_of(f"i{n}") for n in range(4)]
    selections = engine(store, **FLAT).select(
        "req", spec(num_instances=4, group=group("anti-affinity")), uuids
    )
    assert sorted(primaries(selections)) == ["h0", "h1", "h2", "h3"]
    with pytest.raises(NoValidHost) as err:
        engine(store, **FLAT).select(
            "req2", spec(group=group("anti-affinity")), [uuid_of("i-extra")]
        )
    assert err.value.reasons == {"server group anti-affinity": 4}


def test_anti_affinity_max_server_per_host() -> None:
    store = HookedStore([host("h0"), host("h1")])
    selections = engine(store, **FLAT).select(
        "req",
        spec(num_instances=4, group=group("anti-affinity", 2)),
        [uuid_of(f"i{n}") for n in range(4)],
    )
    assert Counter(primaries(selections)) == {"h0": 2, "h1": 2}


def test_affinity_keeps_a_multi_instance_request_together() -> None:
    store = HookedStore([host(f"h{i}") for i in range(4)])
    selections = engine(store, **FLAT).select(
        "req", spec(num_instances=3, group=group("affinity")), [uuid_of(f"i{n}") for n in range(3)]
    )
    assert len(set(primaries(selections))) == 1


# --- idempotency ----------------------------------------------------------------------


def test_reselecting_a_claimed_instance_reuses_its_allocation() -> None:
    store = HookedStore([host(f"h{i}") for i in range(5)])
    first = engine(store).select("req", spec(), [uuid_of("i1")])
    again = engine(store).select("other-req", spec(), [uuid_of("i1")])
    assert again[0][0].host == first[0][0].host
    assert again[0][0].allocation_request == first[0][0].allocation_request
    assert len(store.claims) == 1
    assert first[0][0].host not in {s.host for s in again[0][1:]}
    assert len(again[0]) == 3


def test_redriven_request_claims_only_what_is_missing() -> None:
    store = HookedStore([host(f"h{i}") for i in range(5)])
    uuids = [uuid_of(f"i{n}") for n in range(3)]
    engine(store).select("req", spec(), uuids[:1])
    selections = engine(store).select("req", spec(num_instances=3), uuids)
    assert len(store.claims) == 3
    assert len(store.consumers) == 3
    claimed_on = {consumer: name for consumer, name, _ in store.claims}
    assert [s[0].host for s in selections] == [claimed_on[u] for u in uuids]


def test_racing_duplicate_claim_is_reused() -> None:
    # A duplicate of this request claims "h2" for i1 just before our claim on
    # "h1": the store refuses ours, and we reuse theirs.
    store = HookedStore([host("h1"), host("h2", used={MEMORY_MB: 1000})])
    eng = engine(store, weighers=("RAMWeigher",))
    theirs = AllocationRequest({uuid_of("h2"): spec().resources}, "project", "user")

    def claim_racing(
        consumer_uuid: str, request: AllocationRequest, group: GroupClaim | None = None
    ) -> bool:
        if not store.consumers:
            HookedStore.claim(store, consumer_uuid, theirs)
        return HookedStore.claim(store, consumer_uuid, request, group)

    store.claim = claim_racing  # type: ignore[method-assign]
    result = eng.schedule("req", spec(), [uuid_of("i1")])
    assert primaries(result.selections) == ["h2"]
    assert result.selections[0][0].allocation_request == theirs
    assert result.traces[0].reused
    assert len(store.claims) == 1


@pytest.mark.parametrize(
    "ram",
    [
        pytest.param(2048, id="its-host-has-room-for-it-again"),
        pytest.param(1024, id="its-host-is-full"),
    ],
)
def test_a_redrive_that_fails_keeps_what_was_placed_before(ram: int) -> None:
    # i1 was placed by the first attempt; the re-drive of [i1, i2] finds it
    # (by its claim, or by a look-up when no host has room) and no host for
    # i2, and must not release i1's allocation, which it did not make.
    store = HookedStore([host("h1", ram=ram)])
    request = spec(ram=1024, num_instances=2)
    uuids = [uuid_of("i1"), uuid_of("i2")]
    engine(store).select("req", request.replace(num_instances=1), uuids[:1])
    store.conflict_on = {"h1"}  # i2's claim there is refused (i1's is found held first)
    with pytest.raises(NoValidHost) as err:
        engine(store).select("req", request, uuids)
    assert err.value.traces[0].reused
    assert set(store.consumers) == {uuid_of("i1")}
    assert len(store.claims) == 1


# --- construction ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"enabled_filters": ("ComputeFilter", "NoSuchFilter")}, id="filter"),
        pytest.param({"weighers": ("RAMWeigher", "NoSuchWeigher")}, id="weigher"),
        pytest.param({"enabled_filters": ("RAMWeigher",)}, id="weigher-named-as-filter"),
    ],
)
def test_unknown_plugin_fails_at_construction(overrides: dict) -> None:
    with pytest.raises(UnknownPlugin) as err:
        engine(HookedStore(), **overrides)
    assert any(name in str(err.value) for name in ("NoSuch", "RAMWeigher"))


def test_plugins_load_in_configured_order() -> None:
    eng = engine(
        HookedStore(),
        enabled_filters=("ImagePropertiesFilter", "ComputeFilter"),
        weighers=("DiskWeigher",),
    )
    assert [name for name, _ in eng.filters] == ["ImagePropertiesFilter", "ComputeFilter"]
    # The configured weighers first, then those the weigher profile adds.
    assert [name for name, _ in eng.weighers][:1] == ["DiskWeigher"]
    assert isinstance(eng, Engine)


@pytest.mark.parametrize(
    "overrides, unenforced",
    [
        pytest.param({}, [], id="defaults-enforce-both"),
        pytest.param({"compute_status_filter": False}, [], id="status-off-compute-filter-on"),
        pytest.param(
            {"compute_status_filter": False, "enabled_filters": ("ImagePropertiesFilter",)},
            ["compute_status_filter"],
            id="status-off-no-compute-filter",
        ),
        pytest.param(
            {"query_placement_for_availability_zone": False},
            ["query_placement_for_availability_zone"],
            id="zone-request-filter-off",
        ),
        pytest.param(
            {
                "query_placement_for_availability_zone": False,
                "enabled_filters": ("ComputeFilter", "AvailabilityZoneFilter"),
            },
            [],
            id="zone-host-filter-instead",
        ),
    ],
)
def test_a_policy_left_to_no_filter_is_warned_at_construction(
    overrides: dict, unenforced: list[str]
) -> None:
    with structlog.testing.capture_logs() as logs:
        engine(HookedStore(), **overrides)
    assert [e["option"] for e in logs if e["event"] == "policy_not_enforced"] == unenforced


def test_trace_counts_survivors_per_stage() -> None:
    # The default pipeline: request filters and liveness before the candidates,
    # then the default host filters (disabled hosts never reach ComputeFilter).
    store = HookedStore(
        [
            host("small", ram=512),
            host("down", up=False),
            host("tried"),
            host("off", disabled=True),
            host("ok1"),
            host("ok2"),
        ]
    )
    result = engine(store).schedule(
        "req", spec(ignore_hosts=("tried",)), [uuid_of("i1")], claim=False
    )
    stages = [(s.stage, s.survivors) for s in result.traces[0].stages]
    assert stages == [
        ("DestinationRequestFilter", 5),
        ("DisabledComputesRequestFilter", 4),
        ("hosts up", 3),
        ("candidates", 2),
        ("ComputeFilter", 2),
        ("ComputeCapabilitiesFilter", 2),
        ("ImagePropertiesFilter", 2),
        ("ServerGroupAntiAffinityFilter", 2),
        ("ServerGroupAffinityFilter", 2),
        ("PciPassthroughFilter", 2),
        ("NUMATopologyFilter", 2),
    ]
    assert result.traces[0].reasons == {
        "host already tried": 1,
        "disabled": 1,
        "host down": 1,
        "insufficient MEMORY_MB": 1,
    }
    assert result.traces[0].host in {"ok1", "ok2"}


def test_alternates_of_each_instance_have_room_after_the_instances_before_it() -> None:
    # Room for one instance per host: each instance's alternates are the hosts
    # still free once it and the instances before it are placed.
    store = HookedStore([host(f"h{i}", ram=2048) for i in range(3)])
    uuids = [uuid_of(f"i{n}") for n in range(3)]
    selections = engine(store, max_attempts=3).select(
        "req", spec(ram=2048, num_instances=3), uuids
    )
    placed: list[str] = []
    for per in selections:
        primary, *alternates = (s.host for s in per)
        placed.append(primary)
        assert sorted(alternates) == sorted({"h0", "h1", "h2"} - set(placed))
    assert sorted(placed) == ["h0", "h1", "h2"]


@pytest.mark.parametrize(
    "total",
    [
        pytest.param([1.0] * 50, id="all-equal"),
        pytest.param([3.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0], id="runs"),
        pytest.param([float(i % 7) for i in range(60)], id="runs-across-the-edge"),
    ],
)
def test_ranking_is_best_first_with_ties_drawn_where_decisions_look(total: list[float]) -> None:
    values = np.array(total)
    head = 6
    orders = [_rank(values, np.random.default_rng(seed), head) for seed in range(40)]
    for order in orders:
        assert sorted(order.tolist()) == list(range(len(values)))  # a permutation
        assert (np.diff(values[order]) <= 0).all()  # best first
    # Which of a tie come first at the head is drawn: seeds disagree there...
    heads = {tuple(order[:head].tolist()) for order in orders}
    assert len(heads) > 1
    # ...and every member of a tie at the head's edge can get in.
    edge = values[orders[0][head - 1]]
    tied = set(np.flatnonzero(values == edge).tolist())
    seen = set().union(*(set(o[:head].tolist()) for o in orders)) & tied
    assert seen == tied


def test_ranking_without_ties_is_the_plain_order() -> None:
    values = np.array([0.5, 3.0, 1.0, 2.0])
    assert _rank(values, np.random.default_rng(1), 2).tolist() == [1, 3, 2, 0]


@pytest.mark.parametrize(
    "kind", ["distinct", "few-values", "nan", "mostly-nan", "all-equal", "best-at-the-end"]
)
def test_ranking_from_a_sample_is_the_ranking_of_every_total(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The head is bounded from a sample of the totals (every stride-th); with a
    # sample of every total the bound is the head's own last total.
    rng = np.random.default_rng(11)
    values = {
        "distinct": rng.random(20_000),
        "few-values": rng.integers(0, 4, size=20_000).astype(float),
        "nan": np.where(rng.random(20_000) < 0.3, np.nan, rng.random(20_000)),
        "mostly-nan": np.where(np.arange(20_000) % 5000 == 7, 1.0, np.nan),
        "all-equal": np.ones(20_000),
        "best-at-the-end": np.arange(20_000, dtype=float),
    }[kind]
    head = 9
    sampled = [_rank(values, np.random.default_rng(seed), head) for seed in range(3)]
    monkeypatch.setattr("scheduler.engine.ranking.HEAD_SAMPLE", len(values))
    whole = [_rank(values, np.random.default_rng(seed), head) for seed in range(3)]
    for a, b in zip(sampled, whole, strict=True):
        assert a.tolist() == b.tolist()


def _members_on(store: HookedStore, policy: str, *hosts: str) -> object:
    """Claims one member of a ``policy`` group on each of ``hosts``; the group."""
    g = group(policy)
    for name in hosts:
        store.claim(
            uuid_of(f"member-{name}"),
            AllocationRequest({uuid_of(name): {VCPU: 1}}, "project", "user"),
            GroupClaim(g.uuid, g.policy, name),
        )
    return g


def test_a_request_in_a_server_group_is_not_cut_to_max_placement_results() -> None:
    """As in Nova: the cut keeps h0 and h1 (store order), both holding a member of
    the anti-affinity group; cut anyway, the request would find no host."""
    store = HookedStore([host(f"h{i}") for i in range(5)])
    g = _members_on(store, "anti-affinity", "h0", "h1")
    eng = engine(store, max_placement_results=2, **FLAT)
    result = eng.schedule("req", spec(group=g), [uuid_of("new")], claim=False)
    assert result.selections[0][0].host in {"h2", "h3", "h4"}
    assert OVER_LIMIT not in result.traces[0].reasons
    # Without a group the cut still applies.
    plain = eng.schedule("req", spec(), [uuid_of("new")], claim=False)
    assert plain.traces[0].reasons[OVER_LIMIT] == 3


@pytest.mark.parametrize("hint", ["same_host", "different_host"])
def test_a_request_with_a_host_hint_is_not_cut_to_max_placement_results(hint: str) -> None:
    """``same_host`` next to an instance on h4, ``different_host`` away from those
    on h0 and h1: with the cut at 2 (h0, h1) neither could be placed."""
    store = HookedStore([host(f"h{i}") for i in range(5)])
    others = ("h4",) if hint == "same_host" else ("h0", "h1")
    for name in others:
        store.claim(
            uuid_of(f"other-{name}"),
            AllocationRequest({uuid_of(name): {VCPU: 1}}, "project", "user"),
            None,
        )
    wanted = {"h4"} if hint == "same_host" else {"h2", "h3", "h4"}
    filters = ("ComputeFilter", "SameHostFilter" if hint == "same_host" else "DifferentHostFilter")
    eng = engine(store, max_placement_results=2, enabled_filters=filters, **FLAT)
    hints = {hint: tuple(uuid_of(f"other-{name}") for name in others)}
    result = eng.schedule("req", spec(scheduler_hints=hints), [uuid_of("new")], claim=False)
    assert result.selections[0][0].host in wanted


# --- the scan stops at the cut ------------------------------------------------------


def _mixed_hosts(count: int) -> list:
    """Hosts of which about half can take ``spec()``: full, disabled and down
    ones scattered among them."""
    out = []
    for i in range(count):
        kind = i % 7
        out.append(
            host(
                f"h{i:03d}",
                used={MEMORY_MB: 32768} if kind in (1, 4) else {},
                disabled=kind == 2,
                up=kind != 5,
            )
        )
    return out


@pytest.mark.parametrize("randomize", [False, True], ids=["in-order", "randomised"])
def test_a_scan_stopped_at_the_cut_keeps_what_a_whole_scan_keeps(
    randomize: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ranges of 12 rows (4 x the cut) over 120 hosts: the scan stops early,
    # and a dry run for all hosts (which examines every host) must agree.
    monkeypatch.setattr("scheduler.engine.placement.FIRST_SPAN", 1)
    store = HookedStore(_mixed_hosts(120))
    eng = engine(store, max_placement_results=3, randomize_candidates=randomize)
    for n in range(12):
        uuids = [uuid_of(f"i{n}")]
        early = eng.schedule(f"req{n}", spec(), uuids, claim=False).traces[0]
        whole = eng.schedule(f"req{n}", spec(), uuids, claim=False, all_hosts=True).traces[0]
        assert early.host == whole.host
        assert early.top == whole.top
        assert early.stages[-len(eng.filters) - 1] == whole.stages[-len(eng.filters) - 1]
        assert whole.detail is not None
        candidates = next(s for s in whole.detail.stages if s.stage == "candidates")
        assert early.stages[-len(eng.filters) - 1].survivors == len(candidates.survivors) == 3
        # Every host is counted once either way: the hosts not examined are
        # beyond the cut, and each stage counts the hosts it examined.
        assert sum(early.reasons.values()) == sum(whole.reasons.values()) == 117
        assert early.reasons[OVER_LIMIT] > whole.reasons[OVER_LIMIT]
        assert early.stages[0].survivors < whole.stages[0].survivors


def test_a_randomised_cut_takes_consecutive_hosts_from_a_drawn_start() -> None:
    store = HookedStore([host(f"h{i:02d}") for i in range(40)])
    eng = engine(store, max_placement_results=4, randomize_candidates=True, **FLAT)
    starts = set()
    for n in range(30):
        trace = eng.schedule(
            f"req{n}", spec(), [uuid_of(f"i{n}")], claim=False, all_hosts=True
        ).traces[0]
        assert trace.detail is not None
        kept = next(s for s in trace.detail.stages if s.stage == "candidates").survivors
        rows = sorted(int(name[1:]) for name in kept)
        # four hosts in a row, going round past the last
        assert len(rows) == 4
        assert any(rows == sorted((s + k) % 40 for k in range(4)) for s in rows)
        starts.add(tuple(rows))
        again = eng.schedule(f"req{n}", spec(), [uuid_of(f"i{n}")], claim=False).traces[0]
        assert again.host == trace.host  # replayable from the ids
    assert len(starts) > 10


def test_ranking_past_the_head_keeps_ties_in_their_order() -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(0, 5, size=300).astype(float)
    order = _rank(values, np.random.default_rng(3), 6)
    edge = values[order[5]]
    tail = order[np.flatnonzero(values[order] < edge)]
    for value in np.unique(values[tail]):
        same = tail[values[tail] == value]
        assert (np.diff(same) > 0).all()
