"""Waiting for capacity end to end, through the real daemons over RabbitMQ and
Redis: a boot on a full cloud goes PENDING (listed, shown, holding nothing),
and a delete that frees room makes it ACTIVE with no slow pass to help; one
that waits past its max_wait ends in ERROR; a PENDING one is deleted at once.
The shared checker (conftest) then requires that a PENDING instance holds
nothing and that the accounting holds."""

from __future__ import annotations

import json
from typing import Any

from bench.nodes import wait_until
from scheduler.exceptions import NoValidHost
from tests.functional.conftest import Cluster

#: Room for exactly two m1.small (2048 MB each) once 512 MB are reserved.
TWO_SMALL = ("--memory-mb", "4608")


def full_cloud(cluster: Cluster, **priority: Any) -> list[dict[str, Any]]:
    """One compute full with two m1.small; the conductor's slow pass over the
    PENDING requests out of the way unless ``priority`` says otherwise."""
    cluster.write_config(
        priority={"pending_retry_interval": 3600, **priority},
        conductor={"sweep_interval": 1},
    )
    cluster.start_conductor()
    cluster.start_compute(1, *TWO_SMALL)
    cluster.start_worker()
    instances: list[dict[str, Any]] = cluster.boot(
        "--count", "2", "--flavor", "m1.small", timeout=60
    )["instances"]
    assert [i["state"] for i in instances] == ["ACTIVE", "ACTIVE"]
    return instances


def boot_waiting(cluster: Cluster) -> str:
    code, out, err = cluster.conductor_stub(
        "boot", "--count", "1", "--flavor", "m1.small", "--wait-for-capacity"
    )
    assert code == 0, err
    uuid = out.strip()
    wait_until(
        lambda: cluster.store.get_instance(uuid).state == "PENDING", what="the boot to wait"
    )
    return uuid


def test_a_boot_on_a_full_cloud_waits_and_a_delete_makes_it_active(cluster: Cluster) -> None:
    first, _ = full_cloud(cluster)
    uuid = boot_waiting(cluster)
    assert cluster.store.get_consumer(uuid) is None
    assert cluster.store.list_pending() == [uuid]

    code, out, err = cluster.conductor_stub("list", "--state", "PENDING", "-f", "value")
    assert code == 0, err
    assert out.split() == [uuid, "PENDING", "-"]
    code, out, err = cluster.conductor_stub("show", uuid, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["state"], shown["fault"], shown["max_wait"]) == ("PENDING", None, 3600.0)
    assert shown["waits_until"] == shown["waiting_since"] + 3600.0

    # A delete frees room: the change feed wakes the conductor, which retries it.
    code, _, err = cluster.conductor_stub("delete", first["uuid"], "--wait", timeout=90)
    assert code == 0, err
    wait_until(
        lambda: cluster.store.get_instance(uuid).state == "ACTIVE",
        timeout=60,
        what="the waiting instance to be placed",
    )
    record = cluster.store.get_instance(uuid)
    assert record.host == "compute-0000" and record.waiting_since is not None
    assert cluster.store.list_pending() == []


def test_waiting_past_max_wait_is_no_valid_host_and_a_pending_one_deletes_at_once(
    cluster: Cluster,
) -> None:
    full_cloud(cluster, max_wait=3)
    late = boot_waiting(cluster)
    wait_until(
        lambda: cluster.store.get_instance(late).state == "ERROR",
        timeout=60,
        what="the wait to time out",
    )
    record = cluster.store.get_instance(late)
    assert record.fault == NoValidHost.USER_MESSAGE
    assert (record.fault_details or "").startswith("waited ")
    assert cluster.store.list_pending() == []

    # Refused to wait (--no-wait-for-capacity): no valid host at once.
    code, out, err = cluster.conductor_stub(
        "boot", "--flavor", "m1.small", "--no-wait-for-capacity", "--wait", "-f", "value"
    )
    assert code == 1 and out.split()[1] == "ERROR", err

    # A PENDING one is deleted at once: it has no host to wait on.
    pending = boot_waiting(cluster)
    code, out, err = cluster.conductor_stub("delete", pending, "--wait", timeout=60)
    assert code == 0, err
    assert out.split() == [pending, "DELETED"]
    assert cluster.store.get_consumer(pending) is None
