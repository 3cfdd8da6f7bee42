"""Nova 34's ``SchedulerAPI.select_destinations`` against a running worker.

Each request is built by Nova's code (``RequestSpec.from_components``, as
Nova's API builds a boot's, then changed as the conductor's tasks change it
for a move) and sent by Nova's client; the Selections are those Nova's
caller deserialized, checked field by field against the claims in the
store.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from tests.nova_compat.conftest import (
    CELL_UUID,
    PROJECT_ID,
    Cluster,
    Listened,
    NovaCaller,
    new_uuids,
    publisher_id,
)

SMALL = {"name": "m1.small", "vcpus": 1, "memory_mb": 2048, "root_gb": 20}
MEDIUM = {"name": "m1.medium", "vcpus": 2, "memory_mb": 4096, "root_gb": 40}
LARGE = {"name": "m1.large", "vcpus": 4, "memory_mb": 8192, "root_gb": 80}
SELECTION_FIELDS = {
    "compute_node_uuid",
    "service_host",
    "nodename",
    "cell_uuid",
    "limits",
    "allocation_request",
    "allocation_request_version",
    "availability_zone",
}


def resources(flavor: dict[str, Any]) -> dict[str, int]:
    """What Nova asks of Placement for a flavor (no swap, no ephemeral disk)."""
    return {
        "VCPU": flavor["vcpus"],
        "MEMORY_MB": flavor["memory_mb"],
        "DISK_GB": flavor["root_gb"],
    }


def zone_of(host: str) -> str:
    """The zone each test's computes were started in: ``--availability-zones az-<name>``."""
    return "az-" + host.rsplit("-", 1)[0]


def start(cluster: Cluster, *computes: tuple[str, int, tuple[str, ...]]) -> None:
    """Computes (name, hosts, options), each in zone ``az-<name>``, then the worker."""
    for name, hosts, args in computes:
        cluster.start_compute(hosts, "--availability-zones", f"az-{name}", *args, name=name)
    cluster.start_worker()


def check_selections(
    cluster: Cluster,
    instance_uuid: str,
    per_instance: list[dict[str, Any]],
    flavor: dict[str, Any],
) -> list[str]:
    """One instance's Selections field by field; the hosts, primary first.

    The primary is the instance's claim in the store; an alternate is an
    allocation request for the flavor on its host, claimed by nobody yet.
    """
    providers = {p.name: p for p in cluster.store.list_providers()}
    consumer = cluster.store.get_consumer(instance_uuid)
    assert consumer is not None, f"{instance_uuid}: the primary is not claimed"
    assert consumer.project_id == PROJECT_ID
    hosts = []
    for rank, s in enumerate(per_instance):
        where = (instance_uuid, rank, s)
        assert s["_version"] == "1.1", where
        assert set(s) - {"_version"} == SELECTION_FIELDS, where
        host = s["service_host"]
        hosts.append(host)
        assert s["nodename"] == host, where  # a compute node is named after its host
        assert s["compute_node_uuid"] == providers[host].uuid, where
        assert s["cell_uuid"] == CELL_UUID, where
        assert s["availability_zone"] == zone_of(host), where
        assert s["allocation_request_version"].startswith("1."), where
        request = json.loads(s["allocation_request"])
        if rank == 0:
            claimed = {rp: {"resources": dict(res)} for rp, res in consumer.allocations.items()}
            assert request["allocations"] == claimed, where
        assert request["allocations"] == {
            providers[host].uuid: {"resources": resources(flavor)}
        }, where
    assert len(set(hosts)) == len(hosts), f"alternates are other hosts: {hosts}"
    return hosts


def no_valid_host(answer: dict[str, Any]) -> str:
    """The message of the exception Nova's caller got, an instance of
    ``nova.exception.NoValidHost`` (as oslo.messaging rebuilds it: a subclass)."""
    error = answer.get("error")
    assert error is not None, answer
    assert "nova.exception.NoValidHost" in error["is_a"], error
    message: str = error["message"]
    assert message.startswith("No valid host was found."), error
    return message


def test_boots_of_several_flavors_and_images_with_alternates(
    nova_cluster: Cluster, nova: NovaCaller, nova_notifications: Listened
) -> None:
    start(
        nova_cluster,
        ("x86", 4, ("--traits", "CUSTOM_SSD", "--traits-on", "2")),
        ("arm", 3, ("--cpu-arch", "aarch64")),
    )
    boots: list[tuple[dict[str, Any], dict[str, Any], set[str]]] = [
        # flavor, image properties, the hosts that may take it
        (SMALL, {}, {f"x86-000{i}" for i in range(4)} | {f"arm-000{i}" for i in range(3)}),
        (LARGE, {"hw_architecture": "aarch64"}, {f"arm-000{i}" for i in range(3)}),
        (
            MEDIUM,
            {
                "hw_architecture": "x86_64",
                "img_hv_type": "kvm",
                "img_hv_requested_version": ">=8.0",
            },
            {f"x86-000{i}" for i in range(4)},
        ),
        (
            {**SMALL, "name": "m1.ssd", "extra_specs": {"trait:CUSTOM_SSD": "required"}},
            {},
            {"x86-0000", "x86-0001"},
        ),
    ]
    for flavor, properties, allowed in boots:
        [uuid] = new_uuids(1)

        [per_instance] = nova.select({"flavor": flavor, "image": properties}, [uuid])

        hosts = check_selections(nova_cluster, uuid, per_instance, flavor)
        # A primary and max_attempts - 1 alternates, from the hosts that fit.
        assert len(hosts) == min(3, len(allowed)), (flavor, hosts)
        assert set(hosts) <= allowed, (flavor, properties, hosts)
    # Nova's notifications of each call, as Nova's consumers read them.
    nova.check_notifications(nova_notifications, publisher_id(nova_cluster))


def test_multi_instance_request(nova_cluster: Cluster, nova: NovaCaller) -> None:
    start(nova_cluster, ("x86", 4, ()))
    uuids = new_uuids(6)

    selections = nova.select({"flavor": MEDIUM, "num_instances": 6}, uuids)

    assert len(selections) == 6
    primaries = Counter(
        check_selections(nova_cluster, uuid, per, MEDIUM)[0]
        for uuid, per in zip(uuids, selections, strict=True)
    )
    assert sum(primaries.values()) == 6
    for provider in nova_cluster.store.list_providers():
        assert provider.usages.get("VCPU", 0) == 2 * primaries[provider.name], provider


def test_strict_anti_affinity_group(
    nova_cluster: Cluster, nova: NovaCaller, nova_notifications: Listened
) -> None:
    start(nova_cluster, ("x86", 4, ()))
    [group_uuid] = new_uuids(1)
    members = new_uuids(4)
    group = {"uuid": group_uuid, "policy": "anti-affinity", "members": members}

    selections = nova.select({"flavor": SMALL, "group": group}, members)

    primaries = [
        check_selections(nova_cluster, uuid, per, SMALL)[0]
        for uuid, per in zip(members, selections, strict=True)
    ]
    assert sorted(primaries) == [f"x86-000{i}" for i in range(4)]
    assert nova_cluster.store.group_hosts(group_uuid) == dict.fromkeys(primaries, 1)
    # A fifth member: every host holds one already.
    [fifth] = new_uuids(1)
    group = {**group, "members": [*members, fifth], "hosts": primaries}
    no_valid_host(nova.call({"flavor": SMALL, "group": group}, [fifth], return_alternates=True))
    assert nova_cluster.store.get_consumer(fifth) is None
    # Nova's notifications of each call, as Nova's consumers read them.
    nova.check_notifications(nova_notifications, publisher_id(nova_cluster))


def test_cold_migrate_ignores_the_source_and_the_hosts_tried(
    nova_cluster: Cluster, nova: NovaCaller, nova_notifications: Listened
) -> None:
    start(nova_cluster, ("x86", 5, ()))
    [uuid, migration] = new_uuids(2)
    [[booted, *_]] = nova.select({"flavor": SMALL}, [uuid])
    source = booted["service_host"]
    # The conductor's MigrationTask hands the source's allocation to the
    # migration (replace_allocation_with_migration) before it schedules.
    nova.release.add(migration)
    assert nova_cluster.store.move_allocations(uuid, migration)
    # Nova's API ignores the source (allow_resize_to_same_host is False); the
    # retry names a host an earlier attempt of this move failed on.
    tried = next(f"x86-000{i}" for i in range(5) if f"x86-000{i}" != source)
    spec = {
        "flavor": SMALL,
        "ignore_hosts": [source],
        "retry": [[tried, tried]],
        "scheduler_hints": {"_nova_check_type": ["resize"]},
    }

    [per_instance] = nova.select(spec, [uuid])

    hosts = check_selections(nova_cluster, uuid, per_instance, SMALL)
    assert len(hosts) == 3 and not {source, tried} & set(hosts), (source, tried, hosts)
    held = nova_cluster.store.get_consumer(migration)
    assert held is not None, "the migration still holds the source"
    assert list(held.allocations) == [booted["compute_node_uuid"]], held
    # Nova's notifications of each call, as Nova's consumers read them.
    nova.check_notifications(nova_notifications, publisher_id(nova_cluster))


def test_live_migrate_to_a_requested_destination(
    nova_cluster: Cluster, nova: NovaCaller, nova_notifications: Listened
) -> None:
    start(nova_cluster, ("x86", 4, ()))
    [uuid, migration] = new_uuids(2)
    [[booted, *_]] = nova.select({"flavor": LARGE}, [uuid])
    source = booted["service_host"]
    target = next(f"x86-000{i}" for i in range(4) if f"x86-000{i}" != source)
    # LiveMigrationTask: the source's allocation to the migration, then a
    # select_destinations for the requested host, in the source's cell,
    # source ignored, no alternates.
    nova.release.add(migration)
    assert nova_cluster.store.move_allocations(uuid, migration)
    spec = {
        "flavor": LARGE,
        "ignore_hosts": [source],
        "requested_destination": {"host": target, "node": target, "cell_uuid": CELL_UUID},
    }

    selections = nova.select(spec, [uuid], return_alternates=False)

    [per_instance] = selections
    assert check_selections(nova_cluster, uuid, per_instance, LARGE) == [target]
    # Nova's notifications of each call, as Nova's consumers read them.
    nova.check_notifications(nova_notifications, publisher_id(nova_cluster))


def test_a_request_no_host_can_take_is_nova_novalidhost(
    nova_cluster: Cluster, nova: NovaCaller
) -> None:
    start(nova_cluster, ("x86", 3, ()))
    uuids = new_uuids(2)
    huge = {"name": "m1.huge", "vcpus": 4, "memory_mb": 10**7, "root_gb": 20}

    answer = nova.call({"flavor": huge, "num_instances": 2}, uuids, return_alternates=True)

    no_valid_host(answer)
    for uuid in uuids:
        assert nova_cluster.store.get_consumer(uuid) is None
    assert all(not p.usages.get("MEMORY_MB") for p in nova_cluster.store.list_providers())


def test_a_field_the_scheduler_cannot_honour_is_refused_as_novalidhost(
    nova_cluster: Cluster, nova: NovaCaller
) -> None:
    # Huge pages: Nova's NUMA placement reads them, the project does not model them.
    start(nova_cluster, ("x86", 2, ()))
    [uuid] = new_uuids(1)

    answer = nova.call(
        {"flavor": SMALL, "image": {"hw_mem_page_size": "large"}}, [uuid], return_alternates=True
    )

    assert "hw_mem_page_size" in no_valid_host(answer), answer
    assert nova_cluster.store.get_consumer(uuid) is None
