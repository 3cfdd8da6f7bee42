"""End to end over RabbitMQ and Redis: traits, aggregates, nested providers,
granular groups, tenant isolation and disabled hosts, placed by a real worker
on providers registered by real compute simulators."""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Sequence
from typing import Any

import pytest

from compute_sim.hosts import aggregate_uuid, gpu_name, provider_uuid
from scheduler import rpc
from scheduler.exceptions import InvalidRequest, NoValidHost
from scheduler.objects import Flavor, RequestSpec, Selection
from tests.functional.conftest import Cluster


def request(
    extra_specs: dict[str, str] | None = None, num_instances: int = 1, project_id: str = "p"
) -> RequestSpec:
    flavor = Flavor(name="f", vcpus=1, memory_mb=1024, root_gb=10, extra_specs=extra_specs or {})
    return RequestSpec(
        flavor=flavor, project_id=project_id, user_id="u", num_instances=num_instances
    )


def select(
    cluster: Cluster, client: rpc.SchedulerClient, spec: RequestSpec
) -> list[list[Selection]]:
    """select_destinations, then release the claims (the test only looks)."""
    uuids = [str(uuidlib.uuid4()) for _ in range(spec.num_instances)]
    try:
        return client.select_destinations(rpc.RequestContext(), spec, uuids)
    finally:
        for uuid in uuids:
            cluster.store.release(uuid)


def hosts_of(selections: Sequence[Sequence[Selection]]) -> list[str]:
    return [per_instance[0].host for per_instance in selections]


def test_traits_nested_providers_and_granular_groups(cluster: Cluster, transport: Any) -> None:
    cluster.start_compute(3, name="plain")
    cluster.start_compute(2, "--traits", "HW_CPU_X86_AVX512F", name="avx")
    cluster.start_compute(
        2,
        "--vgpus-per-host",
        "1",
        "--gpus-per-host",
        "2",
        "--gpu-traits",
        "CUSTOM_NVIDIA_11",
        name="gpu",
    )
    cluster.start_worker()
    client = rpc.SchedulerClient(transport)

    # A required trait: only the two AVX hosts, spread by the weighers.
    placed = select(cluster, client, request({"trait:HW_CPU_X86_AVX512F": "required"}, 2))
    assert sorted(hosts_of(placed)) == ["avx-0000", "avx-0001"]

    # Forbidden: never an AVX host.
    for _ in range(3):
        placed = select(cluster, client, request({"trait:HW_CPU_X86_AVX512F": "forbidden"}))
        assert not hosts_of(placed)[0].startswith("avx")

    # Two numbered VGPU groups, isolated: both GPU children of one host; the
    # allocation names the root and each child, the Selection the root.
    [[primary, *alternates]] = select(
        cluster,
        client,
        request({"resources1:VGPU": "1", "resources2:VGPU": "1", "group_policy": "isolate"}),
    )
    host = primary.host
    assert host.startswith("gpu-")
    assert primary.provider_uuid == provider_uuid(host)
    assert primary.allocation_request.allocations == {
        provider_uuid(host): {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10},
        provider_uuid(gpu_name(host, 0)): {"VGPU": 1},
        provider_uuid(gpu_name(host, 1)): {"VGPU": 1},
    }
    assert [a.host for a in alternates] == [h for h in ("gpu-0000", "gpu-0001") if h != host]

    # The unsuffixed group split across the tree, the trait found on the child;
    # four instances use the four GPU children, a fifth finds none.
    wanted = {"resources:VGPU": "1", "trait:CUSTOM_NVIDIA_11": "required"}
    uuids = [str(uuidlib.uuid4()) for _ in range(4)]
    four = client.select_destinations(rpc.RequestContext(), request(wanted, 4), uuids)
    children = {
        rp
        for [s, *_] in four
        for rp in s.allocation_request.allocations
        if rp not in {provider_uuid(h) for h in ("gpu-0000", "gpu-0001")}
    }
    assert len(children) == 4
    with pytest.raises(NoValidHost):
        select(cluster, client, request(wanted))
    for uuid in uuids:
        cluster.store.release(uuid)

    # A malformed spec is refused at validation, by name.
    with pytest.raises(InvalidRequest) as err:
        select(cluster, client, request({"resources:VCPUS": "1"}))
    assert "resources:VCPUS" in str(err.value)


def test_aggregates_and_tenant_isolation(cluster: Cluster, transport: Any) -> None:
    cluster.write_config(scheduler={"limit_tenants_to_placement_aggregate": True})
    cluster.start_compute(2, "--aggregate", "gold:filter_tenant_id=tenant-a", name="gold")
    cluster.start_compute(2, "--aggregate", "silver", name="silver")
    cluster.start_compute(2, name="plain")
    cluster.start_worker()
    client = rpc.SchedulerClient(transport)

    # Tenant isolation: tenant-a only lands in its aggregate.
    placed = select(cluster, client, request(num_instances=2, project_id="tenant-a"))
    assert sorted(hosts_of(placed)) == ["gold-0000", "gold-0001"]

    # member_of by uuid and by name, any of / all of / none of.
    silver = aggregate_uuid("silver")
    for extra_specs, prefixes in [
        ({"member_of": f"in:{silver},gold"}, {"silver", "gold"}),
        ({"member_of": "silver"}, {"silver"}),
        ({"member_of": f"!in:{silver},gold"}, {"plain"}),
    ]:
        placed = select(cluster, client, request(extra_specs, num_instances=2))
        assert {h.split("-")[0] for h in hosts_of(placed)} <= prefixes, extra_specs
    with pytest.raises(NoValidHost):
        select(cluster, client, request({"member_of": "silver&gold"}))


def test_disabled_hosts_are_skipped_through_the_status_trait(
    cluster: Cluster, transport: Any
) -> None:
    cluster.write_config(scheduler={"max_placement_results": 2})
    cluster.start_compute(6)
    cluster.start_worker()
    client = rpc.SchedulerClient(transport)
    for n in range(5):  # the first five: a cut of 2 taken before removing them finds none
        cluster.store.set_service_disabled(f"compute-{n:04d}", True, "maintenance")
    assert (
        "COMPUTE_STATUS_DISABLED"
        in cluster.store.get_provider(provider_uuid("compute-0000")).traits
    )
    deadline = time.monotonic() + 10
    while True:  # the worker follows the change feed
        try:
            placed = select(cluster, client, request())
            break
        except NoValidHost:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert hosts_of(placed) == ["compute-0005"]
