"""Host filters and weighers end to end: simulators reporting capabilities, a
real worker, real RabbitMQ and Redis."""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter
from typing import Any

import pytest

from bench.nodes import wait_until
from compute_sim.hosts import aggregate_uuid, provider_uuid
from scheduler import rpc
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, Image, RequestSpec, Selection
from scheduler.store import Aggregate
from tests.functional.conftest import Cluster

SMALL = Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20)
PACKING = {
    "ram_weight_multiplier": -1.0,
    "cpu_weight_multiplier": -1.0,
    "disk_weight_multiplier": -1.0,
}


def select(transport: Any, spec: RequestSpec) -> list[list[Selection]]:
    uuids = [str(uuidlib.uuid4()) for _ in range(spec.num_instances)]
    return rpc.SchedulerClient(transport).select_destinations(rpc.RequestContext(), spec, uuids)


def release_all(cluster: Cluster, selections: list[list[Selection]]) -> None:
    """Give back what select_destinations claimed, as a conductor that gave up would."""
    for consumer in cluster.store.list_consumers():
        if any(s[0].provider_uuid in consumer.allocations for s in selections):
            cluster.store.release(consumer.uuid)


def test_image_properties_pick_architecture_and_hypervisor_version(
    cluster: Cluster, transport: Any
) -> None:
    cluster.start_compute(2, name="x86")
    cluster.start_compute(
        2,
        "--cpu-arch",
        "aarch64",
        "--hypervisor-version",
        "9.1.0",
        "--numa-cells",
        "4:8192,4:8192",
        name="arm",
    )
    cluster.start_worker()
    service = cluster.store.get_service("arm-0000")
    assert service is not None and service.capabilities["cpu_arch"] == "aarch64"

    arm = RequestSpec(
        flavor=SMALL,
        project_id="p",
        user_id="u",
        num_instances=2,
        image=Image(properties={"hw_architecture": "AArch64"}),
    )
    selections = select(transport, arm)
    assert {s.host for per in selections for s in per} == {"arm-0000", "arm-0001"}

    newer = RequestSpec(
        flavor=SMALL,
        project_id="p",
        user_id="u",
        image=Image(properties={"img_hv_type": "kvm", "img_hv_requested_version": ">=9.0"}),
    )
    [[primary, *alternates]] = select(transport, newer)
    assert primary.host.startswith("arm-")

    ppc = RequestSpec(
        flavor=SMALL,
        project_id="p",
        user_id="u",
        image=Image(properties={"hw_architecture": "ppc64le"}),
    )
    with pytest.raises(NoValidHost) as err:
        select(transport, ppc)
    assert err.value.reasons == {"image properties not supported": 4}
    release_all(cluster, [*selections, [primary]])


def test_aggregate_extra_specs_steer_a_flavor(cluster: Cluster, transport: Any) -> None:
    cluster.write_config(
        filter_scheduler={
            "enabled_filters": "ComputeFilter,AggregateInstanceExtraSpecsFilter,"
            "ComputeCapabilitiesFilter"
        }
    )
    cluster.start_compute(2, name="ssd")
    cluster.start_compute(2, name="hdd")
    # What an operator does with the aggregates API: tag the SSD hosts.
    fast = Aggregate(
        uuid=aggregate_uuid("fast"), name="fast", metadata={"ssd": "true", "gen": "3"}
    )
    cluster.store.put_aggregate(fast)
    for name in ("ssd-0000", "ssd-0001"):
        provider = cluster.store.get_provider(provider_uuid(name))
        cluster.store.set_aggregates(
            provider.uuid, provider.generation, {*provider.aggregates, fast.uuid}
        )
    cluster.start_worker()

    flavor = Flavor(
        name="fast",
        vcpus=1,
        memory_mb=2048,
        root_gb=20,
        extra_specs={"aggregate_instance_extra_specs:ssd": "true", "gen": ">= 2"},
    )
    spec = RequestSpec(flavor=flavor, project_id="p", user_id="u", num_instances=3)
    selections = select(transport, spec)
    assert Counter(per[0].host for per in selections).keys() <= {"ssd-0000", "ssd-0001"}
    assert all(s.host.startswith("ssd-") for per in selections for s in per)

    too_new = Flavor(
        name="newer",
        vcpus=1,
        memory_mb=2048,
        extra_specs={"aggregate_instance_extra_specs:gen": ">= 4"},
    )
    with pytest.raises(NoValidHost) as err:
        select(transport, RequestSpec(flavor=too_new, project_id="p", user_id="u"))
    assert err.value.reasons == {"aggregate metadata does not match the flavor": 4}
    release_all(cluster, selections)


def test_same_host_and_different_host_hints(cluster: Cluster, transport: Any) -> None:
    cluster.write_config(
        filter_scheduler={"enabled_filters": "ComputeFilter,SameHostFilter,DifferentHostFilter"}
    )
    cluster.start_compute(3)
    cluster.start_worker()
    client = rpc.SchedulerClient(transport)
    ctxt = rpc.RequestContext()
    base = RequestSpec(flavor=SMALL, project_id="p", user_id="u")
    first = str(uuidlib.uuid4())
    [[placed, *_]] = client.select_destinations(ctxt, base, [first])

    for _ in range(3):
        same = base.replace(scheduler_hints={"same_host": (first,)})
        [[primary, *alternates]] = client.select_destinations(ctxt, same, [str(uuidlib.uuid4())])
        assert primary.host == placed.host
        assert alternates == []  # no other host runs the hinted instance
        different = base.replace(scheduler_hints={"different_host": (first,)})
        [[other, *rest]] = client.select_destinations(ctxt, different, [str(uuidlib.uuid4())])
        assert placed.host not in {other.host, *(s.host for s in rest)}
    for consumer in cluster.store.list_consumers():
        cluster.store.release(consumer.uuid)


def test_soft_anti_affinity_spreads_a_group_against_packing(cluster: Cluster) -> None:
    cluster.write_config(
        filter_scheduler={
            **PACKING,
            "io_ops_weight_multiplier": 0.0,
            "soft_anti_affinity_weight_multiplier": 10.0,
        }
    )
    cluster.start_conductor()
    cluster.start_compute(4, "--build-time", "0.01")
    cluster.start_worker()

    # One request per instance: each sees the members the earlier ones left
    # in the store, though every resource weigher says "pack".
    result = cluster.boot("--count", "4", "--group-policy", "soft-anti-affinity")
    assert Counter(i["state"] for i in result["instances"]) == {"ACTIVE": 4}
    assert len({i["host"] for i in result["instances"]}) == 4
    # The control: without the group, the same weighers pack.
    packed = cluster.boot("--count", "2")
    assert len({i["host"] for i in packed["instances"]}) == 1

    # The simulators report builds in progress as they start and end.
    def idle() -> bool:
        return all(s.stats.get("num_io_ops") == 0 for s in cluster.store.list_services())

    wait_until(idle, what="builds in progress to be reported back to zero")
