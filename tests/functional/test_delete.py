"""Delete end to end over RabbitMQ and Redis, through the real daemons:
capacity given back, a delete racing a build and a resize, twice, an unknown
uuid, the record expired by Redis after its retention, and ``--all --state``
clean-up.
The shared checker (conftest) then requires that no allocation, group
membership or VM is left to a DELETED instance."""

from __future__ import annotations

import json
from typing import Any

import redis

from bench.cluster import REDIS_URL
from bench.nodes import wait_until
from tests.functional.conftest import Cluster

#: Room for exactly two m1.small (2048 MB each) once 512 MB are reserved.
TWO_SMALL = ("--memory-mb", "4608")


def delete(cluster: Cluster, *args: str, timeout: float = 60.0) -> tuple[int, str, str]:
    return cluster.conductor_stub("delete", *args, timeout=timeout + 30)


def boot(cluster: Cluster, count: int) -> list[dict[str, Any]]:
    instances: list[dict[str, Any]] = cluster.boot(
        "--count", str(count), "--flavor", "m1.small", timeout=60
    )["instances"]
    return instances


def test_delete_frees_the_capacity_of_a_full_host_twice_is_a_no_op_unknown_is_an_error(
    cluster: Cluster,
) -> None:
    cluster.start_conductor()
    compute = cluster.start_compute(1, *TWO_SMALL)
    cluster.start_worker()
    first, second = boot(cluster, 2)
    assert {first["state"], second["state"]} == {"ACTIVE"}
    [full] = boot(cluster, 1)
    assert full["state"] == "ERROR"  # the host is full

    # An unknown uuid among known ones: one line, exit 2, nothing deleted.
    unknown = "00000000-0000-4000-8000-000000000000"
    code, out, err = delete(cluster, first["uuid"], unknown)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"conductor-stub delete: no such instance: {unknown}"]
    assert cluster.store.get_instance(first["uuid"]).state == "ACTIVE"

    code, out, err = delete(cluster, first["uuid"], "--wait", "--json")
    assert code == 0, err
    assert json.loads(out)["instances"] == [
        {"uuid": first["uuid"], "state": "DELETED", "host": "compute-0000"}
    ]
    assert cluster.store.get_consumer(first["uuid"]) is None
    assert compute.count("instance_terminated") == 1
    assert first["uuid"] not in cluster.running_vms()

    # The host that was full takes a new instance.
    [again] = boot(cluster, 1)
    assert (again["state"], again["host"]) == ("ACTIVE", "compute-0000")

    # Twice: a no-op (nothing cast, the record unchanged).
    before = cluster.store.get_instance(first["uuid"])
    code, out, _ = delete(cluster, first["uuid"], "--wait")
    assert (code, out.split()) == (0, [first["uuid"], "DELETED"])
    assert cluster.store.get_instance(first["uuid"]) == before
    assert compute.count("instance_terminated") == 1


def test_delete_of_a_building_instance_leaves_no_claim_and_no_vm(cluster: Cluster) -> None:
    cluster.start_conductor()
    # A build long enough for the delete to come while it is under way.
    compute = cluster.start_compute(1, "--build-time", "10")
    cluster.start_worker()
    code, out, err = cluster.conductor_stub("boot", "--count", "1", "--flavor", "m1.small")
    assert code == 0, err
    uuid = out.strip()
    wait_until(lambda: cluster.store.get_consumer(uuid) is not None, what="the claim")
    assert cluster.store.get_instance(uuid).state == "BUILDING"

    code, out, err = delete(cluster, uuid, "--wait")
    assert code == 0, err
    assert out.split() == [uuid, "DELETED"]
    assert cluster.store.get_consumer(uuid) is None
    # The build in flight ends cancelled: no VM, no result.
    compute.wait_for("build_cancelled_by_delete", timeout=30)
    assert compute.count("vm_started") == 0 and compute.count("build_succeeded") == 0
    assert cluster.store.get_instance(uuid).state == "DELETED"


def test_a_deleted_record_expires_and_all_with_a_state_cleans_up(cluster: Cluster) -> None:
    cluster.write_config(conductor={"deleted_retention": 5})
    cluster.start_conductor()
    cluster.start_compute(1, *TWO_SMALL)
    cluster.start_worker()
    active = boot(cluster, 2)
    failed = boot(cluster, 2)
    assert [i["state"] for i in active + failed] == ["ACTIVE"] * 2 + ["ERROR"] * 2

    code, out, err = delete(cluster, "--all", "--state", "ERROR", "--wait")
    assert code == 0, err
    assert sorted(out.split()) == sorted([i["uuid"] for i in failed] + ["DELETED"] * len(failed))
    for instance in active:  # untouched
        assert cluster.store.get_instance(instance["uuid"]).state == "ACTIVE"

    # The store expires a DELETED record by itself (Redis key expiry).
    gone = failed[0]["uuid"]
    with redis.Redis.from_url(REDIS_URL) as client:
        assert 0 < client.pttl(f"{{{cluster.prefix}}}:deleted:{gone}") <= 5000
    wait_until(lambda: cluster.store.list_instances([gone]) == [], what="the record to expire")
    code, _, err = delete(cluster, gone)
    assert code == 2 and "no such instance" in err


def test_delete_of_a_resizing_instance_releases_both_hosts_and_cancels_the_resize(
    cluster: Cluster,
) -> None:
    cluster.start_conductor()
    # The boot goes to the roomier host; the destination preps slowly.
    src = cluster.start_compute(1, "--memory-mb", "131072", name="src")
    dst = cluster.start_compute(1, "--build-time", "10", name="dst")
    cluster.start_worker()
    [instance] = boot(cluster, 1)
    uuid = instance["uuid"]
    assert instance["host"] == "src-0000"
    resized = cluster.resize(uuid, "--flavor", "m1.medium")
    assert resized["state"] == "RESIZING", resized
    dst.wait_for("prep_resize", timeout=30)  # under way on the destination

    code, out, err = delete(cluster, uuid, "--wait")
    assert code == 0, err
    assert out.split() == [uuid, "DELETED"]
    assert cluster.store.list_consumers() == []  # the instance's and the migration's
    assert src.count("instance_terminated") == dst.count("instance_terminated") == 1
    dst.wait_for("resize_cancelled_by_delete", timeout=30)
    assert dst.count("vm_started") == 0 and uuid not in cluster.running_vms()
    assert cluster.store.get_instance(uuid).state == "DELETED"
