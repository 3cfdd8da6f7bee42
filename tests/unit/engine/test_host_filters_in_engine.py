"""The host filters and weighers of issue 3 inside the whole pipeline."""

from __future__ import annotations

from collections import Counter

import pytest
import structlog

from scheduler.exceptions import NoValidHost
from scheduler.objects import MEMORY_MB, AllocationRequest
from scheduler.store.base import GroupClaim
from tests.unit.factories import (
    GROUP_UUID,
    HookedStore,
    aggregate,
    engine,
    group,
    host,
    spec,
    uuid_of,
)

# Resource weighers pack (negative), so only a group weigher can spread.
PACKING = {
    "ram_weight_multiplier": -1.0,
    "cpu_weight_multiplier": -1.0,
    "disk_weight_multiplier": -1.0,
}
X86_KVM = {"supported_instances": [["x86_64", "kvm", "hvm"]], "hypervisor_version": 6002000}


def primaries(selections: list) -> list[str]:
    return [s[0].host for s in selections]


def test_default_filters_include_capabilities_and_image_properties() -> None:
    store = HookedStore(
        [
            host("arm", capabilities={"supported_instances": [["aarch64", "kvm", "hvm"]]}),
            host("x86", capabilities=X86_KVM),
        ]
    )
    request = spec(
        image_properties={"hw_architecture": "aarch64"},
        extra_specs={"capabilities:hypervisor_version": ">= 6000000"},
    )
    with pytest.raises(NoValidHost) as err:
        engine(store).select("req", request, [uuid_of("i1")])
    assert err.value.reasons == {
        "image properties not supported": 1,
        "capabilities do not match the flavor": 1,
    }


def test_soft_anti_affinity_spreads_a_request_against_packing_weighers() -> None:
    store = HookedStore([host(f"h{i}") for i in range(4)])
    eng = engine(
        store, weight_multipliers={**PACKING, "soft_anti_affinity_weight_multiplier": 10.0}
    )
    request = spec(num_instances=4, group=group("soft-anti-affinity"))
    selections = eng.select("req", request, [uuid_of(f"i{n}") for n in range(4)])
    assert sorted(primaries(selections)) == ["h0", "h1", "h2", "h3"]


def test_soft_anti_affinity_sees_members_of_earlier_requests() -> None:
    store = HookedStore([host("h0"), host("h1", used={MEMORY_MB: 8192})])
    eng = engine(
        store, weight_multipliers={**PACKING, "soft_anti_affinity_weight_multiplier": 10.0}
    )
    request = spec(group=group("soft-anti-affinity"))
    first = primaries(eng.select("req-1", request, [uuid_of("i1")]))
    second = primaries(eng.select("req-2", request, [uuid_of("i2")]))
    assert first == ["h1"]  # packing: the fuller host
    assert second == ["h0"]  # the group's member on h1 pushes the next one away


def test_soft_affinity_gathers_against_spreading_weighers() -> None:
    store = HookedStore([host(f"h{i}") for i in range(4)])
    eng = engine(store, weight_multipliers={"soft_affinity_weight_multiplier": 10.0})
    request = spec(num_instances=3, group=group("soft-affinity"))
    selections = eng.select("req", request, [uuid_of(f"i{n}") for n in range(3)])
    assert len(set(primaries(selections))) == 1


def test_io_ops_limit_counts_this_requests_placements() -> None:
    store = HookedStore([host(f"h{i}", stats={"num_io_ops": 0}) for i in range(3)])
    eng = engine(
        store, enabled_filters=("IoOpsFilter",), max_io_ops_per_host=1, weight_multipliers=PACKING
    )
    selections = eng.select("req", spec(num_instances=3), [uuid_of(f"i{n}") for n in range(3)])
    assert sorted(primaries(selections)) == ["h0", "h1", "h2"]
    with pytest.raises(NoValidHost) as err:
        eng.select("req-2", spec(), [uuid_of("i9")])
    assert err.value.reasons == {"too many builds in progress": 3}


def test_a_decision_replays_and_ties_are_shuffled_by_request() -> None:
    # Four identical hosts, two holding a member of the soft group: the other
    # two tie under every weigher, so the shuffle decides, seeded per request.
    hosts = [host(f"h{i}") for i in range(4)]

    def decide(request_id: str) -> str:
        store = HookedStore(hosts)
        for n, on in enumerate(("h0", "h1")):
            store.claim(
                uuid_of(f"member{n}"),
                AllocationRequest({uuid_of(on): {"VCPU": 1}}, "p", "u"),
                GroupClaim(GROUP_UUID, "soft-anti-affinity", on),
            )
        request = spec(group=group("soft-anti-affinity"))
        return primaries(engine(store).select(request_id, request, [uuid_of("new")]))[0]

    assert decide("req-7") == decide("req-7")
    picked = Counter(decide(f"req-{n}") for n in range(40))
    assert set(picked) == {"h2", "h3"}  # never a host with a member
    assert min(picked.values()) >= 5  # and the tie really is broken at random


def test_aggregate_filters_by_name_in_the_pipeline() -> None:
    # Each aggregate keeps out one host; "free", in none, takes the first
    # instance and then has reached the configured limit of 1.
    aggregates = [
        aggregate("windows", os_distro="windows"),
        aggregate("big", instance_type="m1.xlarge"),
        aggregate("full", max_instances_per_host="0"),
        aggregate("busy", max_io_ops_per_host="1"),
    ]
    store = HookedStore(
        [
            host("windows", aggregates=[uuid_of("windows")]),
            host("big", aggregates=[uuid_of("big")]),
            host("full", aggregates=[uuid_of("full")]),
            host("busy", aggregates=[uuid_of("busy")], stats={"num_io_ops": 1}),
            host("free"),
        ],
        aggregates,
    )
    eng = engine(
        store,
        enabled_filters=(
            "AggregateImagePropertiesIsolation",
            "AggregateTypeAffinityFilter",
            "AggregateNumInstancesFilter",
            "AggregateIoOpsFilter",
        ),
        max_instances_per_host=1,
    )
    request = spec(image_properties={"os_distro": "ubuntu"})
    assert primaries(eng.select("req", request, [uuid_of("i1")])) == ["free"]
    with pytest.raises(NoValidHost) as err:
        eng.select("req-2", request, [uuid_of("i2")])
    assert err.value.reasons == {
        "aggregate metadata does not match the image": 1,
        "aggregate reserved for other flavors": 1,
        "too many instances": 2,
        "too many builds in progress": 1,
    }


def test_an_unreadable_aggregate_limit_is_logged_once_not_per_request() -> None:
    aggregates = [aggregate("odd", max_instances_per_host="many")]
    store = HookedStore([host(f"h{i}", aggregates=[uuid_of("odd")]) for i in range(3)], aggregates)
    eng = engine(store, enabled_filters=("AggregateNumInstancesFilter",))
    with structlog.testing.capture_logs() as logs:
        for n in range(3):
            eng.select(f"req-{n}", spec(), [uuid_of(f"i{n}")])
    unreadable = [e for e in logs if e["event"] == "aggregate_metadata_unreadable"]
    assert len(unreadable) == 1
    assert unreadable[0]["key"] == "max_instances_per_host"
